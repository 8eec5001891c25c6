//! Applying a configuration to a running target: the one code path of
//! `SIGHUP`, the management API's `load_config` and every management call
//! (each builds the whole configuration it wants and applies it here).
//!
//! Subsystems are created and deleted, hosts allowed and disallowed (the
//! controllers of a disallowed host are disconnected), namespaces added,
//! removed, replaced or resized (every controller of the subsystem is told
//! through the Changed Namespace List and a Namespace Attribute Changed
//! event, Base §5.16.1.5), listeners added and removed (their connections
//! close at their next tick), and discovery controllers get a Discovery Log
//! Page Change event when the discovery log changed. Connections that none of
//! this concerns are not touched.
//!
//! Everything that can fail (opening backends, binding listeners) happens
//! before anything changes: a bad configuration changes nothing.

use crate::provision::{build_namespaces, build_subsystem};
use farflash_core::config::{Config, SubsystemConfig};
use farflash_core::listen::ListenTransport;
use farflash_core::subsystem::{files_to_open, BuildError, HostAccess, Namespace, Subsystem};
use farflash_core::target::{Listener, Target};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

/// A subsystem of the new configuration: kept (with its new namespace
/// list) or new (None).
type Plan = (
    Arc<Subsystem>,
    Option<Vec<Arc<farflash_core::subsystem::Namespace>>>,
);

/// Starts and stops listeners: the event loops own the sockets.
pub trait ListenerControl {
    /// Binds `addr` (as configured) and starts accepting on it; returns
    /// the bound address.
    fn add(&self, addr: &str) -> Result<SocketAddr, String>;
    /// Stops accepting on `addr` with `transport` (queues that came
    /// through it close at their next tick, see [`Target::serves_on`]; a
    /// listener of the other transport on the same address is untouched).
    fn remove(&self, addr: SocketAddr, transport: ListenTransport);
}

/// What a reload did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// (subsystem NQN, changed NSIDs) for each subsystem whose namespaces changed.
    pub changed: Vec<(String, Vec<u32>)>,
    pub subsystems_added: Vec<String>,
    pub subsystems_removed: Vec<String>,
    /// Subsystems whose allowed hosts changed.
    pub hosts_changed: Vec<String>,
    /// Subsystems whose limits or weights changed (queues adopt them at
    /// their next tick, within 100 ms).
    pub qos_changed: Vec<String>,
    /// Subsystems whose ANA states changed (hosts got an ANA Change event).
    pub ana_changed: Vec<String>,
    /// Controllers disconnected (disallowed hosts, deleted subsystems).
    pub disconnected: usize,
    pub listeners_added: Vec<SocketAddr>,
    pub listeners_removed: Vec<SocketAddr>,
    /// Changes this path cannot make (they need a restart).
    pub ignored: Vec<String>,
}

impl ReloadReport {
    pub fn is_empty(&self) -> bool {
        *self == ReloadReport::default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    // transparent: the inner error's message once, not again as a source
    #[error(transparent)]
    Invalid(#[from] farflash_core::config::ConfigError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Pools(#[from] crate::pools::PoolsError),
    #[error("listener {addr}: {msg}")]
    Listener { addr: String, msg: String },
    #[error(
        "subsystem {nqn}, namespace {nsid}: cannot serve ANA group {anagrpid} as optimized: {msg}"
    )]
    AnaStorage {
        nqn: String,
        nsid: u32,
        anagrpid: u32,
        msg: String,
    },
}

/// Opens `cfg`'s pools, then every backend of its subsystems
/// ([`farflash_core::subsystem::build_subsystems`] with
/// [`System`](crate::provision::System)). It lives here, not in
/// `provision`, which this module uses: no module cycle.
pub fn build_subsystems(cfg: &Config) -> Result<Vec<Arc<Subsystem>>, ApplyError> {
    crate::pools::registry().open_configured(&cfg.pools)?;
    Ok(farflash_core::subsystem::build_subsystems(
        cfg,
        &crate::provision::System,
    )?)
}

/// Tells the storage of each namespace of `subs` (its namespaces, its ANA
/// entries) whether its ANA group is optimized through one of `listeners`
/// ([`farflash_backend::Backend::set_ana_optimized`]): the promotions are
/// made here (an error stops at the first), the namespaces to demote are
/// returned, for [`demote_storage`] once hosts see the new states.
fn promote_storage<'a>(
    subs: impl Iterator<
        Item = (
            &'a str,
            &'a [Arc<Namespace>],
            &'a [farflash_core::ana::AnaConfig],
        ),
    >,
    listeners: &[(SocketAddr, ListenTransport)],
) -> Result<Vec<Arc<Namespace>>, ApplyError> {
    let mut demote = Vec::new();
    for (nqn, namespaces, ana) in subs {
        let table = farflash_core::ana::AnaTable::build(ana);
        for ns in namespaces {
            if !table.optimized_on_any(listeners, ns.anagrpid) {
                demote.push(ns.clone());
                continue;
            }
            ns.backend
                .set_ana_optimized(true)
                .map_err(|e| ApplyError::AnaStorage {
                    nqn: nqn.to_owned(),
                    nsid: ns.nsid,
                    anagrpid: ns.anagrpid,
                    msg: e.to_string(),
                })?;
        }
    }
    Ok(demote)
}

/// The second half of [`promote_storage`]: failures are logged (the state
/// has changed; a storage that cannot let go is fenced by the next owner).
fn demote_storage(demote: &[Arc<Namespace>]) {
    for ns in demote {
        if let Err(e) = ns.backend.set_ana_optimized(false) {
            tracing::warn!(nsid = ns.nsid, "{}: giving up ownership: {e}", ns.describe);
        }
    }
}

/// At start, before the listeners accept: the storage of every namespace
/// optimized here is taken (RBD: breaking a dead gateway's lock), the
/// rest let go. An error names the namespace.
pub fn claim_storage(target: &Target) -> Result<(), ApplyError> {
    let _serial = target.manage_lock();
    let subs = target.subsystems();
    let lists: Vec<_> = subs.iter().map(|s| (s.namespaces(), s.ana())).collect();
    let addrs: Vec<_> = target
        .listeners()
        .iter()
        .map(|l| (l.addr, l.transport))
        .collect();
    let demote = promote_storage(
        subs.iter()
            .zip(&lists)
            .map(|(s, (n, a))| (s.nqn.as_str(), &n[..], &a.config[..])),
        &addrs,
    )?;
    demote_storage(&demote);
    Ok(())
}

/// Applies `cfg` without touching listeners (a difference is reported as
/// ignored).
pub fn apply(target: &Target, cfg: &Config) -> Result<ReloadReport, ApplyError> {
    apply_with(target, cfg, None)
}

/// The configuration that rebuilds the target as it is now (`save_config`).
pub fn current_config(target: &Target) -> Config {
    Config {
        listen: target
            .listeners()
            .iter()
            .map(|l| farflash_core::listen::join_listen(l.transport, &l.addr.to_string()))
            .collect(),
        transport: target.transport.clone(),
        subsystems: target.subsystems().iter().map(|s| s.to_config()).collect(),
        pools: crate::pools::registry().configs(),
    }
}

/// Whether listener `l` is what `want` (an `ADDR:PORT` as configured) asks for.
pub(crate) fn same_listener(l: &Listener, want: &str) -> bool {
    if l.config == want {
        return true;
    }
    let Ok((t, want)) = farflash_core::listen::split_listen(want) else {
        return false;
    };
    if t != l.transport {
        return false;
    }
    if l.addr.to_string() == want {
        return true;
    }
    want.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| a == l.addr)
}

/// Applies `cfg` to the running target; with `listeners`, listener
/// changes too.
pub fn apply_with(
    target: &Target,
    cfg: &Config,
    listeners: Option<&dyn ListenerControl>,
) -> Result<ReloadReport, ApplyError> {
    cfg.validate()?;
    let _serial = target.manage_lock();
    apply_locked(target, cfg, listeners)
}

/// [`apply_with`] for a caller that holds [`Target::manage_lock`] and has
/// validated `cfg`. Everything that can fail is done first (building
/// namespaces and subsystems, binding listeners, promoting storage), undone
/// on a failure; only then is the target changed.
pub(crate) fn apply_locked(
    target: &Target,
    cfg: &Config,
    listeners: Option<&dyn ListenerControl>,
) -> Result<ReloadReport, ApplyError> {
    let mut report = ReloadReport::default();
    let current = target.subsystems();
    check_limits(target, cfg, &current)?;
    // Pools first: the namespaces built below may export their volumes.
    crate::pools::registry().open_configured(&cfg.pools)?;
    // 1. Build everything first, so a bad file changes nothing.
    let plans = plan_subsystems(target, cfg, &current, &mut report)?;
    // 2. Listeners: bind the new ones (undone if one fails).
    let ls = ListenerPlan::bind(target, cfg, listeners, &mut report)?;
    // 3. Storage shared with other targets follows ANA: promotions before
    // hosts see them, demotions after.
    let lists: Vec<Vec<Arc<Namespace>>> = plans
        .iter()
        .map(|(sub, new)| new.clone().unwrap_or_else(|| sub.namespaces().to_vec()))
        .collect();
    let promoted = promote_storage(
        (cfg.subsystems.iter())
            .zip(&lists)
            .map(|(sc, n)| (sc.nqn.as_str(), &n[..], &sc.ana[..])),
        &ls.serving(target, listeners),
    );
    let demote = match promoted {
        Ok(d) => d,
        Err(e) => {
            ls.undo(listeners);
            return Err(e);
        }
    };
    // 4. Commit.
    commit(target, cfg, &current, plans, ls, listeners, &mut report);
    demote_storage(&demote);
    Ok(report)
}

/// The running limits (a `[transport]` change needs a restart) and the
/// open files the new namespaces would take.
fn check_limits(
    target: &Target,
    cfg: &Config,
    current: &[Arc<Subsystem>],
) -> Result<(), ApplyError> {
    target.transport.limits.check_counts(&cfg.subsystems)?;
    let files = (cfg.subsystems.iter())
        .map(|sc| match current.iter().find(|s| s.nqn == sc.nqn) {
            Some(sub) => files_to_open(sc, &sub.namespaces()),
            None => files_to_open(sc, &[]),
        })
        .sum();
    farflash_backend::limits::check_headroom(files).map_err(BuildError::from)?;
    Ok(())
}

/// Builds what `cfg` needs: each kept subsystem's new namespace list, each
/// new subsystem; notes the subsystems removed and what needs a restart.
fn plan_subsystems(
    target: &Target,
    cfg: &Config,
    current: &[Arc<Subsystem>],
    report: &mut ReloadReport,
) -> Result<Vec<Plan>, ApplyError> {
    let mut plans: Vec<Plan> = Vec::new();
    for (i, sc) in cfg.subsystems.iter().enumerate() {
        match current.iter().find(|s| s.nqn == sc.nqn) {
            Some(sub) => {
                let range =
                    farflash_core::cntlid::CntlidRange::from_config(sc.cntlid_min, sc.cntlid_max);
                if range.ok() != Some(sub.cntlids) {
                    let what = format!("{}: cntlid_min/cntlid_max (restart to change)", sc.nqn);
                    report.ignored.push(what);
                }
                let new = build_namespaces(sc, &sub.namespaces())?;
                plans.push((sub.clone(), Some(new)));
            }
            None => {
                let idx = (current.len() + i).min(255) as u8;
                plans.push((build_subsystem(sc, idx)?, None));
                report.subsystems_added.push(sc.nqn.clone());
            }
        }
    }
    for sub in current.iter() {
        if !cfg.subsystems.iter().any(|s| s.nqn == sub.nqn) {
            report.subsystems_removed.push(sub.nqn.clone());
        }
    }
    if cfg.transport != target.transport {
        report
            .ignored
            .push("transport settings (restart to change)".to_owned());
    }
    Ok(plans)
}

/// The listeners a reload wants: those kept and those it bound, and those
/// to stop at the commit.
struct ListenerPlan {
    /// Whether the configured listeners differ from the running ones.
    differ: bool,
    new: Vec<Listener>,
    remove: Vec<Listener>,
    /// What this reload bound, to undo if a later step fails.
    added: Vec<(SocketAddr, ListenTransport)>,
}

impl ListenerPlan {
    /// Binds the configured listeners not running yet (with `listeners`;
    /// without, a difference is reported as needing a restart). On a
    /// failure, those bound are stopped again.
    fn bind(
        target: &Target,
        cfg: &Config,
        listeners: Option<&dyn ListenerControl>,
        report: &mut ReloadReport,
    ) -> Result<ListenerPlan, ApplyError> {
        let old_ls = target.listeners();
        let differ = cfg.listen.len() != old_ls.len()
            || (cfg.listen.iter()).any(|w| !old_ls.iter().any(|l| same_listener(l, w)));
        let mut plan = ListenerPlan {
            differ,
            new: Vec::new(),
            remove: Vec::new(),
            added: Vec::new(),
        };
        let ctl = match listeners {
            Some(ctl) if differ => ctl,
            None if differ => {
                report
                    .ignored
                    .push("listeners (restart to change)".to_owned());
                return Ok(plan);
            }
            _ => return Ok(plan),
        };
        for want in &cfg.listen {
            if let Some(l) = old_ls.iter().find(|l| same_listener(l, want)) {
                if !plan.new.contains(l) {
                    plan.new.push(l.clone());
                }
                continue;
            }
            match ctl.add(want) {
                Ok(addr) => {
                    let transport = farflash_core::listen::split_listen(want)
                        .map(|(t, _)| t)
                        .unwrap_or_default();
                    report.listeners_added.push(addr);
                    plan.added.push((addr, transport));
                    plan.new.push(Listener {
                        config: want.clone(),
                        addr,
                        transport,
                    });
                }
                Err(msg) => {
                    plan.undo(listeners);
                    let addr = want.clone();
                    return Err(ApplyError::Listener { addr, msg });
                }
            }
        }
        plan.remove = (old_ls.iter())
            .filter(|l| !plan.new.contains(l))
            .cloned()
            .collect();
        Ok(plan)
    }

    /// The listeners serving once the reload is committed.
    fn serving(
        &self,
        target: &Target,
        listeners: Option<&dyn ListenerControl>,
    ) -> Vec<(SocketAddr, ListenTransport)> {
        match listeners {
            Some(_) if self.differ => self.new.iter().map(|l| (l.addr, l.transport)).collect(),
            _ => (target.listeners().iter())
                .map(|l| (l.addr, l.transport))
                .collect(),
        }
    }

    /// Stops the listeners this reload bound.
    fn undo(&self, listeners: Option<&dyn ListenerControl>) {
        if let Some(ctl) = listeners {
            for (a, t) in &self.added {
                ctl.remove(*a, *t);
            }
        }
    }
}

/// Changes the target: the subsystem list, each subsystem, the listeners,
/// and what the hosts are owed (disconnects, the discovery log's change).
fn commit(
    target: &Target,
    cfg: &Config,
    current: &[Arc<Subsystem>],
    plans: Vec<Plan>,
    ls: ListenerPlan,
    listeners: Option<&dyn ListenerControl>,
    report: &mut ReloadReport,
) {
    // Lists change before controllers are swept: a Connect racing with
    // this checks the lists again after creating its controller.
    let mut discovery = false;
    target.set_subsystems(plans.iter().map(|(s, _)| s.clone()).collect());
    for sub in current.iter() {
        if report.subsystems_removed.contains(&sub.nqn) {
            report.disconnected += target.disconnect_subsystem_hosts(sub, None);
            discovery = true;
        }
    }
    for ((sub, new), sc) in plans.into_iter().zip(&cfg.subsystems) {
        let Some(new) = new else {
            discovery = true;
            continue;
        };
        discovery |= commit_subsystem(target, &sub, sc, new, report);
    }
    if let (Some(ctl), true) = (listeners, ls.differ) {
        for l in &ls.remove {
            ctl.remove(l.addr, l.transport);
        }
        report.listeners_removed = ls.remove.iter().map(|l| l.addr).collect();
        target.set_listeners(ls.new);
        discovery = true;
    }
    if discovery {
        target.discovery_changed();
    }
}

/// Commits the new configuration `sc` of subsystem `sub`, kept by a reload
/// (its namespaces `new` built): who may connect, QoS, ANA states,
/// namespaces, each followed by what it owes the hosts (disconnects, ANA and
/// namespace events). Returns whether the discovery log changed.
fn commit_subsystem(
    target: &Target,
    sub: &Arc<Subsystem>,
    sc: &SubsystemConfig,
    new: Vec<Arc<Namespace>>,
    report: &mut ReloadReport,
) -> bool {
    let mut discovery = false;
    let access = HostAccess::of(sc);
    if sub.access() != access {
        sub.set_access(access);
        report.hosts_changed.push(sub.nqn.clone());
        discovery = true;
        // Host access control (Fabrics §6.3, Connect Invalid Host): a host no
        // longer allowed (not listed, or without a key where one is now required)
        // loses its controllers now, not at its next Connect. New or changed keys
        // apply from the next (re-)authentication, as with Linux nvmet. A
        // host whose read-only grant changed (a configuration reloaded; the
        // management API refuses such a change) loses its controllers too:
        // a controller's write protection is fixed when it is created
        // (Identify Namespace told the host), so the host reconnects to see
        // the new grant rather than have it change under a mounted disk.
        for c in target.controllers() {
            let regranted = c.read_only != sub.host_read_only(&c.hostnqn);
            if c.subnqn == sub.nqn && (!sub.host_allowed(&c.hostnqn) || regranted) {
                report.disconnected += usize::from(target.disconnect_controller(c.cntlid));
            }
        }
    }
    if sub.set_qos(&sc.qos) {
        report.qos_changed.push(sub.nqn.clone());
    }
    if sub.set_ana(&sc.ana) {
        target.ana_changed(sub);
        report.ana_changed.push(sub.nqn.clone());
    }
    let changed = sub.replace_namespaces(new);
    if !changed.is_empty() {
        target.namespaces_changed(sub, &changed);
        report.changed.push((sub.nqn.clone(), changed));
    }
    discovery
}

/// Applies `sc`, the new configuration of the running subsystem `sub`
/// (same NQN), and nothing else: what [`apply_locked`] does for one kept
/// subsystem, without reading, validating or rebuilding the others, so that
/// a management call on one subsystem costs what that subsystem holds, not
/// what the target holds. The caller holds [`Target::manage_lock`] and has
/// validated `sc` ([`SubsystemConfig::validate`] and the target's limits).
pub(crate) fn apply_subsystem_locked(
    target: &Target,
    sub: &Arc<Subsystem>,
    sc: &SubsystemConfig,
) -> Result<ReloadReport, ApplyError> {
    let mut report = ReloadReport::default();
    let range = farflash_core::cntlid::CntlidRange::from_config(sc.cntlid_min, sc.cntlid_max);
    if range.ok() != Some(sub.cntlids) {
        let what = format!("{}: cntlid_min/cntlid_max (restart to change)", sc.nqn);
        report.ignored.push(what);
    }
    let current = sub.namespaces();
    farflash_backend::limits::check_headroom(files_to_open(sc, &current))
        .map_err(BuildError::from)?;
    let new = build_namespaces(sc, &current)?;
    let ls: Vec<(SocketAddr, ListenTransport)> = target
        .listeners()
        .iter()
        .map(|l| (l.addr, l.transport))
        .collect();
    let demote = promote_storage(
        std::iter::once((sc.nqn.as_str(), &new[..], &sc.ana[..])),
        &ls,
    )?;
    if commit_subsystem(target, sub, sc, new, &mut report) {
        target.discovery_changed();
    }
    demote_storage(&demote);
    Ok(report)
}

/// Adds subsystem `sc` (a new NQN) to the running target and nothing else:
/// what [`apply_locked`] does for a subsystem the configuration adds,
/// without reading or rebuilding the others. The caller holds
/// [`Target::manage_lock`] and has validated `sc` and the limits.
pub(crate) fn apply_new_subsystem_locked(
    target: &Target,
    sc: &SubsystemConfig,
) -> Result<ReloadReport, ApplyError> {
    let current = target.subsystems();
    farflash_backend::limits::check_headroom(files_to_open(sc, &[])).map_err(BuildError::from)?;
    // The index `apply_locked` gives a subsystem appended to the list.
    let sub = build_subsystem(sc, (2 * current.len()).min(255) as u8)?;
    let ls: Vec<(SocketAddr, ListenTransport)> = target
        .listeners()
        .iter()
        .map(|l| (l.addr, l.transport))
        .collect();
    let list = sub.namespaces();
    let demote = promote_storage(
        std::iter::once((sc.nqn.as_str(), &list[..], &sc.ana[..])),
        &ls,
    )?;
    let mut subs = current.to_vec();
    subs.push(sub);
    target.set_subsystems(subs);
    target.discovery_changed();
    demote_storage(&demote);
    Ok(ReloadReport {
        subsystems_added: vec![sc.nqn.clone()],
        ..ReloadReport::default()
    })
}
