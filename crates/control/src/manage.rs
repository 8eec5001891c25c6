//! Management operations (the JSON-RPC API's methods): each takes the
//! management lock, builds the whole configuration it wants from the
//! running one, and applies it through [`crate::reload`], the path
//! `SIGHUP` and `load_config` take. Two calls never interleave; a call that
//! fails changes nothing.

use crate::reload::{
    apply_locked, apply_new_subsystem_locked, apply_subsystem_locked, current_config, ApplyError,
    ListenerControl, ReloadReport,
};
use farflash_core::config::{
    BackendKind, Config, ConfigError, HostAuthConfig, NamespaceConfig, Size, SubsystemConfig,
};
use farflash_core::Target;

#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Exists(String),
    /// The object exists with other settings than asked (an allowed host's
    /// `read_only` grant): refused, nothing changed.
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Apply(#[from] ApplyError),
}

/// Runs `change` on the running configuration and applies the result.
pub fn modify(
    target: &Target,
    listeners: Option<&dyn ListenerControl>,
    change: impl FnOnce(&mut Config) -> Result<(), ManageError>,
) -> Result<ReloadReport, ManageError> {
    let _serial = target.manage_lock();
    let mut cfg = current_config(target);
    change(&mut cfg)?;
    cfg.validate().map_err(ApplyError::from)?;
    Ok(apply_locked(target, &cfg, listeners)?)
}

/// Runs `change` on the running configuration of subsystem `nqn` and
/// applies the result to that subsystem alone: what [`modify`] does, at the
/// cost of that subsystem (not of every subsystem of the target). Checks
/// the subsystem and the target's limits on namespaces.
pub fn modify_subsystem(
    target: &Target,
    nqn: &str,
    change: impl FnOnce(&mut SubsystemConfig) -> Result<(), ManageError>,
) -> Result<ReloadReport, ManageError> {
    let _serial = target.manage_lock();
    let sub = target
        .subsystem(nqn)
        .ok_or_else(|| ManageError::NotFound(format!("no subsystem {nqn}")))?;
    let mut sc = sub.to_config();
    let before = sc.namespaces.len();
    change(&mut sc)?;
    if sc.nqn != nqn {
        return Err(ManageError::Invalid(
            "a subsystem's NQN cannot change".to_owned(),
        ));
    }
    sc.validate().map_err(ApplyError::from)?;
    let limits = &target.transport.limits;
    limits
        .check_subsystem_namespaces(nqn, sc.namespaces.len())
        .map_err(ApplyError::from)?;
    if sc.namespaces.len() > before {
        let others: usize = (target.subsystems().iter())
            .filter(|s| s.nqn != nqn)
            .map(|s| s.namespaces().len())
            .sum();
        limits
            .check_namespaces(others + sc.namespaces.len())
            .map_err(ApplyError::from)?;
    }
    Ok(apply_subsystem_locked(target, &sub, &sc)?)
}

fn subsystem<'a>(cfg: &'a mut Config, nqn: &str) -> Result<&'a mut SubsystemConfig, ManageError> {
    cfg.subsystems
        .iter_mut()
        .find(|s| s.nqn == nqn)
        .ok_or_else(|| ManageError::NotFound(format!("no subsystem {nqn}")))
}

/// Creates subsystem `sc`; the others are not read or rebuilt.
pub fn create_subsystem(target: &Target, sc: SubsystemConfig) -> Result<ReloadReport, ManageError> {
    let _serial = target.manage_lock();
    let current = target.subsystems();
    if current.iter().any(|s| s.nqn == sc.nqn) {
        return Err(ManageError::Exists(format!("subsystem {} exists", sc.nqn)));
    }
    sc.validate().map_err(ApplyError::from)?;
    let limits = &target.transport.limits;
    if current.len() >= limits.max_subsystems as usize {
        return Err(ApplyError::from(ConfigError::Limit(format!(
            "{} subsystems: more than transport.limits.max_subsystems ({})",
            current.len() + 1,
            limits.max_subsystems
        )))
        .into());
    }
    limits
        .check_subsystem_namespaces(&sc.nqn, sc.namespaces.len())
        .map_err(ApplyError::from)?;
    let total: usize = current.iter().map(|s| s.namespaces().len()).sum();
    limits
        .check_namespaces(total + sc.namespaces.len())
        .map_err(ApplyError::from)?;
    Ok(apply_new_subsystem_locked(target, &sc)?)
}

pub fn delete_subsystem(target: &Target, nqn: &str) -> Result<ReloadReport, ManageError> {
    modify(target, None, |cfg| {
        subsystem(cfg, nqn)?;
        cfg.subsystems.retain(|s| s.nqn != nqn);
        Ok(())
    })
}

/// Adds a namespace (the next free NSID when `nc.nsid` is None); returns
/// the report and the NSID.
pub fn add_namespace(
    target: &Target,
    nqn: &str,
    mut nc: NamespaceConfig,
) -> Result<(ReloadReport, u32), ManageError> {
    let mut nsid = 0;
    let r = modify_subsystem(target, nqn, |s| {
        let used: std::collections::HashSet<u32> =
            s.namespaces.iter().filter_map(|n| n.nsid).collect();
        nsid = match nc.nsid {
            Some(id) if used.contains(&id) => {
                return Err(ManageError::Exists(format!("{nqn}: NSID {id} is in use")))
            }
            Some(id) => id,
            None => used.iter().max().map_or(1, |m| m.saturating_add(1)),
        };
        nc.nsid = Some(nsid);
        s.namespaces.push(nc);
        Ok(())
    })?;
    Ok((r, nsid))
}

pub fn remove_namespace(
    target: &Target,
    nqn: &str,
    nsid: u32,
) -> Result<ReloadReport, ManageError> {
    modify_subsystem(target, nqn, |s| {
        let before = s.namespaces.len();
        s.namespaces.retain(|n| n.nsid != Some(nsid));
        if s.namespaces.len() == before {
            return Err(ManageError::NotFound(format!("{nqn}: no namespace {nsid}")));
        }
        Ok(())
    })
}

/// Resizes a namespace in place, keeping its data: a file namespace grows
/// (its file is extended; shrinking would discard data), a null namespace
/// takes any size; a RAM namespace cannot (its memory is one mapping).
pub fn resize_namespace(
    target: &Target,
    nqn: &str,
    nsid: u32,
    size: u64,
) -> Result<ReloadReport, ManageError> {
    let current = target
        .subsystem(nqn)
        .and_then(|s| s.namespace(nsid))
        .ok_or_else(|| ManageError::NotFound(format!("{nqn}: no namespace {nsid}")))?;
    let capacity = current.blocks * current.block_size as u64;
    match current.config.backend {
        BackendKind::Ram => {
            return Err(ManageError::Invalid(format!(
                "{nqn}: namespace {nsid} is RAM and cannot be resized in place (remove and add it)"
            )))
        }
        BackendKind::Rbd => {
            return Err(ManageError::Invalid(format!(
                "{nqn}: namespace {nsid} is RBD: its size is the image's (resize the image; the namespace follows)"
            )))
        }
        BackendKind::Volume => {
            return Err(ManageError::Invalid(format!(
                "{nqn}: namespace {nsid} is a volume: resize the volume (volume_resize); the namespace follows"
            )))
        }
        BackendKind::File if size < capacity => {
            return Err(ManageError::Invalid(format!(
                "{nqn}: namespace {nsid}: a file namespace only grows ({capacity} bytes now)"
            )))
        }
        _ => {}
    }
    if size == 0 || !size.is_multiple_of(current.block_size as u64) {
        return Err(ManageError::Invalid(format!(
            "size must be a non-zero multiple of the block size ({})",
            current.block_size
        )));
    }
    modify_subsystem(target, nqn, |s| {
        let n = s
            .namespaces
            .iter_mut()
            .find(|n| n.nsid == Some(nsid))
            .ok_or_else(|| ManageError::NotFound(format!("{nqn}: no namespace {nsid}")))?;
        n.size = Some(Size(size));
        Ok(())
    })
}

/// Adds `host` to the allowed hosts, with its DH-HMAC-CHAP settings when
/// `keys` is given (Base §8.13) and, with `read_only`, granted read-only
/// access: its controllers see every namespace write protected
/// (`farflash_core::controller::Controller::read_only`). A host allowed
/// already only takes new keys (without keys: `Exists`); its `read_only`
/// grant is not changed here: asked with another value it is a `Conflict`
/// naming the field, and nothing changes (a grant is fixed for the life of
/// the controllers it made; `host_disallow`, which disconnects them, then
/// `host_allow` changes it explicitly). docs/management.md, "Read-only
/// hosts".
pub fn allow_host(
    target: &Target,
    nqn: &str,
    host: &str,
    mut keys: Option<HostAuthConfig>,
    read_only: bool,
) -> Result<ReloadReport, ManageError> {
    check_nqn(host)?;
    if let Some(k) = keys.as_mut().and_then(|h| h.tls_key.as_mut()) {
        crate::key_files::read(k).map_err(ManageError::Invalid)?;
    }
    modify_subsystem(target, nqn, |s| {
        let listed = s.allowed_hosts.iter().any(|h| h == host);
        let granted_ro = s.read_only_hosts.iter().any(|h| h == host);
        if listed && granted_ro != read_only {
            return Err(ManageError::Conflict(format!(
                "read_only: {nqn}: {host} is allowed already with read_only = {granted_ro}; \
                 host_disallow it first to change the grant (that disconnects its controllers)"
            )));
        }
        match keys {
            None if listed => {
                return Err(ManageError::Exists(format!(
                    "{nqn}: {host} is allowed already"
                )))
            }
            None => s.allowed_hosts.push(host.to_owned()),
            Some(k) => {
                s.hosts.retain(|h| h.nqn != host);
                s.hosts.push(HostAuthConfig {
                    nqn: host.to_owned(),
                    ..k
                });
                if !listed {
                    s.allowed_hosts.push(host.to_owned());
                }
            }
        }
        if read_only && !granted_ro {
            s.read_only_hosts.push(host.to_owned());
        }
        Ok(())
    })
}

/// Sets (adds or replaces) `host`'s TLS PSK and its accepted derivations
/// (`farflash_core::tls_key`), keeping its DH-HMAC-CHAP settings. Queues connected
/// with the old key keep running (their TLS sessions hold their own keys);
/// the next handshake uses the new one (SPDK cannot do this: ceph-nvmeof
/// issue 1885). A subsystem with an allowed-hosts list must list the host.
pub fn set_host_psk(
    target: &Target,
    nqn: &str,
    host: &str,
    mut key: farflash_core::tls_key::TlsKey,
    derivation: Vec<String>,
) -> Result<ReloadReport, ManageError> {
    check_nqn(host)?;
    crate::key_files::read(&mut key).map_err(ManageError::Invalid)?;
    farflash_core::tls_key::derivations(&derivation).map_err(ManageError::Invalid)?;
    modify_subsystem(target, nqn, |s| {
        if !s.allowed_hosts.is_empty() && !s.allowed_hosts.iter().any(|h| h == host) {
            return Err(ManageError::NotFound(format!(
                "{nqn}: {host} is not in the allowed hosts (host_allow it first)"
            )));
        }
        match s.hosts.iter_mut().find(|h| h.nqn == host) {
            Some(h) => {
                h.tls_key = Some(key);
                h.tls_derivation = derivation;
            }
            None => s.hosts.push(HostAuthConfig {
                tls_key: Some(key),
                tls_derivation: derivation,
                ..HostAuthConfig::new(host)
            }),
        }
        Ok(())
    })
}

/// Removes `host`'s TLS PSK (its DH-HMAC-CHAP settings stay); connected
/// queues keep running, new TLS handshakes for it fail.
pub fn remove_host_psk(
    target: &Target,
    nqn: &str,
    host: &str,
) -> Result<ReloadReport, ManageError> {
    modify_subsystem(target, nqn, |s| {
        let Some(i) = s
            .hosts
            .iter()
            .position(|h| h.nqn == host && h.tls_key.is_some())
        else {
            return Err(ManageError::NotFound(format!(
                "{nqn}: {host} has no TLS PSK"
            )));
        };
        if s.hosts[i].dhchap_key.is_some() {
            s.hosts[i].tls_key = None;
            s.hosts[i].tls_derivation.clear();
        } else {
            s.hosts.remove(i);
        }
        Ok(())
    })
}

/// Removes `host` from the allowed hosts; its controllers are disconnected.
/// A subsystem open to any host has no list to remove it from.
pub fn disallow_host(target: &Target, nqn: &str, host: &str) -> Result<ReloadReport, ManageError> {
    modify_subsystem(target, nqn, |s| {
        if !s.allowed_hosts.iter().any(|h| h == host) {
            return Err(ManageError::NotFound(format!(
                "{nqn}: {host} is not in the allowed hosts{}",
                if s.allowed_hosts.is_empty() {
                    " (the subsystem allows any host: allow hosts first)"
                } else {
                    ""
                }
            )));
        }
        s.allowed_hosts.retain(|h| h != host);
        s.read_only_hosts.retain(|h| h != host);
        s.hosts.retain(|h| h.nqn != host);
        if s.allowed_hosts.is_empty() {
            return Err(ManageError::Invalid(format!(
                "{nqn}: removing the last allowed host would allow any host; delete the subsystem or allow another host first"
            )));
        }
        Ok(())
    })
}

/// Sets the QoS entry (`farflash_core::qos`) for the namespace or host `entry`
/// names, replacing the one there was; an entry with neither limits nor a
/// weight removes it. Queues adopt the change at their next tick.
pub fn set_qos(
    target: &Target,
    nqn: &str,
    entry: farflash_core::qos::QosConfig,
) -> Result<ReloadReport, ManageError> {
    entry.validate().map_err(ManageError::Invalid)?;
    modify_subsystem(target, nqn, |s| {
        let kind = entry.kind();
        s.qos.retain(|q| q.kind() != kind);
        if !entry.limits().is_empty() || entry.weight.is_some() {
            s.qos.push(entry.clone());
        }
        Ok(())
    })
}

/// Host NQNs (Base §4.5): "nqn." and at most 223 bytes.
fn check_nqn(nqn: &str) -> Result<(), ManageError> {
    if nqn.starts_with("nqn.") && nqn.len() <= 223 && !nqn.chars().any(char::is_control) {
        Ok(())
    } else {
        Err(ManageError::Invalid(format!(
            "{nqn:?} is not an NQN (\"nqn.\", at most 223 bytes)"
        )))
    }
}

pub fn add_listener(
    target: &Target,
    ctl: &dyn ListenerControl,
    addr: &str,
) -> Result<ReloadReport, ManageError> {
    modify(target, Some(ctl), |cfg| {
        cfg.listen.push(addr.to_owned());
        Ok(())
    })
}

pub fn remove_listener(
    target: &Target,
    ctl: &dyn ListenerControl,
    addr: &str,
) -> Result<ReloadReport, ManageError> {
    let ls = target.listeners();
    // As configured, else by address (`rdma:ADDR:PORT` for the RDMA one;
    // a plain address names the TCP listener).
    let found = ls
        .iter()
        .find(|l| l.config == addr)
        .or_else(|| ls.iter().find(|l| crate::reload::same_listener(l, addr)))
        .map(|l| farflash_core::listen::join_listen(l.transport, &l.addr.to_string()))
        .ok_or_else(|| ManageError::NotFound(format!("no listener {addr}")))?;
    modify(target, Some(ctl), |cfg| {
        cfg.listen.retain(|l| *l != found);
        if cfg.listen.is_empty() {
            return Err(ManageError::Invalid(
                "the last listener cannot be removed".to_owned(),
            ));
        }
        Ok(())
    })
}

/// Sets the ANA state of group `anagrpid` of subsystem `nqn` as seen
/// through listener `listen` (Base §8.20); "optimized", the default, removes
/// the entry. Controllers of the subsystem get an ANA Change event and
/// queues apply the state before their next command.
pub fn set_ana_state(
    target: &Target,
    nqn: &str,
    listen: &str,
    anagrpid: u32,
    state: &str,
) -> Result<ReloadReport, ManageError> {
    use farflash_core::listen::split_listen;
    // A listener as configured, or its address: plain for both transports
    // on it, `tcp:` / `rdma:` for one.
    let (t, rest) = split_listen(listen).map_err(ManageError::Invalid)?;
    let prefixed = rest.len() != listen.len();
    let ls = target.listeners();
    let (addr, transport) = ls
        .iter()
        .find(|l| l.config == listen)
        .or_else(|| {
            ls.iter()
                .find(|l| l.addr.to_string() == rest && (!prefixed || l.transport == t))
        })
        .map(|l| (l.addr, prefixed.then_some(l.transport)))
        .ok_or_else(|| ManageError::NotFound(format!("no listener {listen}")))?;
    let entry = farflash_core::ana::AnaConfig {
        listen: addr.to_string(),
        transport: transport.map(|t| t.name().to_owned()),
        anagrpid,
        state: state.to_owned(),
    };
    let (_, _, parsed) = entry.parse().map_err(ManageError::Invalid)?;
    modify_subsystem(target, nqn, |s| {
        // Both transports replace every entry of the address; one replaces
        // its own.
        s.ana.retain(|a| {
            !(a.anagrpid == anagrpid
                && a.parse()
                    .is_ok_and(|(l, at, _)| l == addr && (transport.is_none() || at == transport)))
        });
        let shadowed = transport.is_some_and(|t| {
            farflash_core::ana::AnaTable::build(&s.ana).state(t, &addr, anagrpid) != parsed
        });
        if parsed != farflash_wire::ana::AnaState::Optimized || shadowed {
            s.ana.push(entry);
        }
        Ok(())
    })
}

/// One row of [`ana_states`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaRow {
    pub listen: String,
    pub anagrpid: u32,
    pub state: farflash_wire::ana::AnaState,
    pub nsids: Vec<u32>,
}

/// The ANA state of every group of `nqn` (those holding namespaces and
/// those configured) through every listener of the target.
pub fn ana_states(target: &Target, nqn: &str) -> Result<Vec<AnaRow>, ManageError> {
    let sub = target
        .subsystem(nqn)
        .ok_or_else(|| ManageError::NotFound(format!("no subsystem {nqn}")))?;
    let table = sub.ana();
    let list = sub.namespaces();
    let mut groups: Vec<u32> = list.iter().map(|n| n.anagrpid).collect();
    groups.extend(table.config.iter().map(|a| a.anagrpid));
    groups.sort_unstable();
    groups.dedup();
    let mut out = Vec::new();
    for l in target.listeners().iter() {
        for &g in &groups {
            out.push(AnaRow {
                listen: farflash_core::listen::join_listen(l.transport, &l.addr.to_string()),
                anagrpid: g,
                state: table.state(l.transport, &l.addr, g),
                nsids: list
                    .iter()
                    .filter(|n| n.anagrpid == g)
                    .map(|n| n.nsid)
                    .collect(),
            });
        }
    }
    Ok(out)
}
