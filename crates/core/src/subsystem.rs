//! Subsystems and namespaces as the controller sees them at run time, built
//! from [`crate::config::Config`] with their backends opened.

use crate::ana::{AnaConfig, AnaTable};
use crate::config::{BackendKind, Config, HostAuthConfig, NamespaceConfig, SubsystemConfig};
use crate::qos::{QosConfig, QosTable};
use crate::resv::ptpl::PtplFile;
use crate::stats::StatsRegistry;
use farflash_backend::SharedBackend;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// One namespace: an NSID, its identifiers and its storage.
pub struct Namespace {
    pub nsid: u32,
    pub backend: SharedBackend,
    pub block_size: u32,
    /// log2(block_size), for LBA → byte shifts.
    pub lba_shift: u32,
    /// Size in logical blocks (NSZE).
    pub blocks: u64,
    pub uuid: [u8; 16],
    pub nguid: [u8; 16],
    /// ANA group (`crate::ana`).
    pub anagrpid: u32,
    /// Where it came from, for the start-up banner.
    pub describe: String,
    /// What built it (a reload keeps a namespace whose configuration is unchanged).
    pub config: NamespaceConfig,
    /// Reservations (`crate::resv`), shared by every controller of the
    /// subsystem in this process.
    pub resv: Arc<crate::resv::NsResv>,
    /// Range exclusion for fused Compare and Write (`crate::exclusion`), shared
    /// by every queue of the namespace in this process.
    pub exclusion: Arc<crate::exclusion::Exclusion>,
    /// It left its subsystem's list (removed or replaced): queues holding
    /// it let it go at their next tick (`NsTable::release_left`).
    left: AtomicBool,
}

impl Namespace {
    /// The same namespace (identifiers, configuration, reservations) on
    /// another backend of the same geometry (tests: a scripted backend).
    pub fn with_backend(old: &Namespace, backend: SharedBackend, describe: &str) -> Namespace {
        Namespace {
            nsid: old.nsid,
            backend,
            block_size: old.block_size,
            lba_shift: old.lba_shift,
            blocks: old.blocks,
            uuid: old.uuid,
            nguid: old.nguid,
            anagrpid: old.anagrpid,
            describe: describe.to_owned(),
            config: old.config.clone(),
            resv: old.resv.clone(),
            exclusion: old.exclusion.clone(),
            left: AtomicBool::new(false),
        }
    }

    /// Whether it left its subsystem's namespace list.
    pub fn has_left(&self) -> bool {
        self.left.load(Ordering::Acquire)
    }
}

/// Who may connect to a subsystem and how they authenticate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostAccess {
    /// Empty: any host may connect.
    pub allowed_hosts: Vec<String>,
    /// Allowed hosts whose controllers see every namespace write protected.
    pub read_only_hosts: Vec<String>,
    /// DH-HMAC-CHAP settings per host NQN (Base §8.13), checked by
    /// `Config::validate`.
    pub hosts: Vec<HostAuthConfig>,
    /// Hosts without an entry in `hosts` are refused.
    pub require_auth: bool,
}

impl HostAccess {
    /// The access rules a subsystem's configuration asks for.
    pub fn of(sc: &SubsystemConfig) -> HostAccess {
        HostAccess {
            allowed_hosts: sc.allowed_hosts.clone(),
            read_only_hosts: sc.read_only_hosts.clone(),
            hosts: sc.hosts.clone(),
            require_auth: sc.require_auth,
        }
    }
}

/// One NVM subsystem.
pub struct Subsystem {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    /// The CNTLIDs its controllers get (`cntlid_min` / `cntlid_max`).
    pub cntlids: crate::cntlid::CntlidRange,
    /// Who may connect and how they authenticate; changed by a reload or
    /// the management API (read at Connect, never per command).
    access: RwLock<HostAccess>,
    /// Sorted by NSID; replaced whole when the configuration is reloaded.
    namespaces: RwLock<Arc<Vec<Arc<Namespace>>>>,
    /// Bumped at every namespace change; queues compare it with their copy.
    generation: AtomicU64,
    /// Bumped when a namespace leaves the list (removed or replaced): idle
    /// queues then let theirs go (other changes wait for a queue's next
    /// command).
    releases: AtomicU64,
    /// Limits and weights (`crate::qos`); replaced whole by a reload or the
    /// management API, limiters of unchanged keys kept.
    qos: RwLock<Arc<QosTable>>,
    /// Bumped at every QoS change; queues compare it at their tick.
    qos_generation: AtomicU64,
    /// ANA states per listener and group (`crate::ana`); replaced whole.
    ana: RwLock<Arc<AnaTable>>,
    /// ANA change count (the log page's CHGCNT), bumped at every change.
    ana_chgcnt: AtomicU64,
    pub stats: StatsRegistry,
}

impl Subsystem {
    /// Whether `hostnqn` may connect (Fabrics §6.3: if not, Connect Invalid Host).
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        (a.allowed_hosts.is_empty() || a.allowed_hosts.iter().any(|h| h == hostnqn))
            && (!a.require_auth
                || a.hosts
                    .iter()
                    .any(|h| h.nqn == hostnqn && h.dhchap_key.is_some()))
    }
    /// Whether `hostnqn` is granted read-only access: the controllers it
    /// creates from now on see every namespace write protected (read at
    /// Connect, fixed for the controller's life; `Controller::read_only`).
    pub fn host_read_only(&self, hostnqn: &str) -> bool {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        a.read_only_hosts.iter().any(|h| h == hostnqn)
    }

    /// The hosts granted read-only access.
    pub fn read_only_hosts(&self) -> Vec<String> {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        a.read_only_hosts.clone()
    }

    /// The allowed host NQNs (empty: any host).
    pub fn allowed_hosts(&self) -> Vec<String> {
        // Only the list: `access()` would clone the host keys too.
        self.access
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .allowed_hosts
            .clone()
    }
    /// Allowed hosts, host keys and whether authentication is required.
    pub fn access(&self) -> HostAccess {
        self.access
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    pub fn set_access(&self, access: HostAccess) {
        *self.access.write().unwrap_or_else(|p| p.into_inner()) = access;
    }

    /// What the controller needs to authenticate `hostnqn`, if it has a
    /// secret here (the Connect response then asks for authentication).
    pub fn auth_for(&self, hostnqn: &str) -> Option<farflash_auth::CtrlConfig> {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        let h = a.hosts.iter().find(|h| h.nqn == hostnqn)?;
        Some(farflash_auth::CtrlConfig {
            subsys_nqn: self.nqn.clone(),
            host_nqn: h.nqn.clone(),
            host_secret: h.dhchap_key.as_ref()?.0.clone(),
            ctrl_secret: h.dhchap_ctrl_key.as_ref().map(|k| k.0.clone()),
            // Config::validate checked the names.
            hashes: h.hashes().unwrap_or_default(),
            groups: h.groups().unwrap_or_default(),
        })
    }

    /// The TLS PSK for `identity` (a ClientHello's, naming this subsystem),
    /// if its host has a `tls_key` here that resolves it
    /// (`crate::tls_key`). Read at each handshake: a key replaced by a
    /// reload or the management API applies to the next connection.
    pub fn tls_psk_for(
        &self,
        identity: &farflash_psk::PskIdentity,
    ) -> Option<farflash_psk::PskChoice> {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        let hostnqn = identity.hostnqn();
        if !a.allowed_hosts.is_empty() && !a.allowed_hosts.iter().any(|h| h == hostnqn) {
            return None;
        }
        let h = a.hosts.iter().find(|h| h.nqn == hostnqn)?;
        let key = h.tls_key.as_ref()?;
        // Config::validate checked the names.
        let ds = h.derivations().unwrap_or_default();
        crate::tls_key::choice(key, &ds, identity)
    }

    /// The configuration that rebuilds this subsystem as it is now
    /// (`save_config`): serial number and model as reported, the allowed
    /// hosts and host keys, each namespace's configuration with its NSID.
    pub fn to_config(&self) -> SubsystemConfig {
        let a = self.access();
        SubsystemConfig {
            nqn: self.nqn.clone(),
            serial: Some(self.serial.clone()),
            model: Some(self.model.clone()),
            cntlid_min: (self.cntlids != Default::default()).then_some(self.cntlids.min),
            cntlid_max: (self.cntlids != Default::default()).then_some(self.cntlids.max),
            allowed_hosts: a.allowed_hosts,
            read_only_hosts: a.read_only_hosts,
            hosts: a.hosts,
            require_auth: a.require_auth,
            namespaces: self.namespaces().iter().map(|n| n.config.clone()).collect(),
            qos: self.qos().config.clone(),
            ana: self.ana().config.clone(),
        }
    }

    /// A reservation changed: queues re-read their host's access before
    /// their next command (the namespace generation moves; the list stays).
    pub(crate) fn reservations_changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The current ANA states.
    pub fn ana(&self) -> Arc<AnaTable> {
        self.ana.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The ANA log page's change count.
    pub fn ana_chgcnt(&self) -> u64 {
        self.ana_chgcnt.load(Ordering::Acquire)
    }

    /// New ANA states (checked by `Config::validate`); returns whether
    /// anything changed. Queues adopt them before their next command
    /// (the namespace generation moves); the caller tells the controllers
    /// (`Target::ana_changed`).
    pub fn set_ana(&self, cfg: &[AnaConfig]) -> bool {
        let mut t = self.ana.write().unwrap_or_else(|p| p.into_inner());
        if t.config == cfg {
            return false;
        }
        *t = Arc::new(AnaTable::build(cfg));
        self.ana_chgcnt.fetch_add(1, Ordering::AcqRel);
        self.generation.fetch_add(1, Ordering::AcqRel);
        true
    }
    /// The current limits and weights.
    pub fn qos(&self) -> Arc<QosTable> {
        self.qos.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Bumped by every change of [`Subsystem::qos`].
    pub fn qos_generation(&self) -> u64 {
        self.qos_generation.load(Ordering::Acquire)
    }

    /// New limits and weights (checked by `Config::validate` or the
    /// caller); limiters of namespaces and hosts still listed keep their
    /// tokens and take the new rates at once. Queues adopt the rest at
    /// their next tick. Returns whether anything changed.
    pub fn set_qos(&self, cfg: &[QosConfig]) -> bool {
        let mut t = self.qos.write().unwrap_or_else(|p| p.into_inner());
        if t.config == cfg {
            return false;
        }
        *t = Arc::new(QosTable::build(cfg, Some(&t)));
        self.qos_generation.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// The current namespaces, sorted by NSID.
    pub fn namespaces(&self) -> Arc<Vec<Arc<Namespace>>> {
        self.namespaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    /// How many namespace lists dropped a namespace (see `releases`).
    pub fn releases(&self) -> u64 {
        self.releases.load(Ordering::Acquire)
    }
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        let list = self.namespaces();
        list.binary_search_by_key(&nsid, |n| n.nsid)
            .ok()
            .map(|i| list[i].clone())
    }
    /// Largest NSID (Identify Controller NN).
    pub fn max_nsid(&self) -> u32 {
        self.namespaces().last().map(|n| n.nsid).unwrap_or(0)
    }
    /// Installs a new namespace list; returns the NSIDs that were added,
    /// removed or replaced (for the Changed Namespace List, Base §5.16.1.5).
    pub fn replace_namespaces(&self, mut list: Vec<Arc<Namespace>>) -> Vec<u32> {
        list.sort_by_key(|n| n.nsid);
        let mut g = self.namespaces.write().unwrap_or_else(|p| p.into_inner());
        // Both lists are sorted by NSID: one merge, not a search per namespace.
        let mut changed: Vec<u32> = Vec::new();
        let mut released = false;
        let (mut old, mut new) = (g.iter().peekable(), list.iter().peekable());
        loop {
            match (old.peek(), new.peek()) {
                (Some(o), Some(n)) if o.nsid == n.nsid => {
                    if !Arc::ptr_eq(o, n) {
                        changed.push(n.nsid);
                        o.left.store(true, Ordering::Release);
                        released = true;
                    }
                    old.next();
                    new.next();
                }
                (Some(o), Some(n)) if o.nsid < n.nsid => {
                    changed.push(o.nsid);
                    o.left.store(true, Ordering::Release);
                    released = true;
                    old.next();
                }
                (Some(o), None) => {
                    changed.push(o.nsid);
                    o.left.store(true, Ordering::Release);
                    released = true;
                    old.next();
                }
                (_, Some(n)) => {
                    changed.push(n.nsid);
                    new.next();
                }
                (None, None) => break,
            }
        }
        if !changed.is_empty() {
            *g = Arc::new(list);
            self.generation.fetch_add(1, Ordering::AcqRel);
            if released {
                self.releases.fetch_add(1, Ordering::AcqRel);
            }
        }
        changed
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("subsystem {nqn}, namespace {nsid}: {what}: {cause}")]
    Backend {
        nqn: String,
        nsid: u32,
        what: String,
        /// In the message, and not a `source()`: a printed error chain
        /// names it once.
        cause: std::io::Error,
    },
    #[error("subsystem {nqn}, namespace {nsid}: {msg}")]
    Invalid { nqn: String, nsid: u32, msg: String },
    /// The files to open would not fit in the open-file limit.
    #[error(transparent)]
    Descriptors(#[from] farflash_backend::limits::FdShortage),
}

/// Derives a stable 16-byte identifier from the subsystem NQN, the NSID and a
/// salt (FNV-1a based), formatted as an RFC 4122 version-8 UUID.
fn derive_id(nqn: &str, nsid: u32, salt: u8) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (half, chunk) in out.chunks_mut(8).enumerate() {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (salt as u64) << 8 ^ half as u64;
        for b in nqn.bytes().chain(nsid.to_le_bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
        chunk.copy_from_slice(&h.to_be_bytes());
    }
    out[6] = (out[6] & 0x0F) | 0x80;
    out[8] = (out[8] & 0x3F) | 0x80;
    out
}

fn parse_hex16(s: &str) -> Option<[u8; 16]> {
    let h: String = s.chars().filter(|c| *c != '-').collect();
    if h.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// What building namespaces takes from the world: opening storage and
/// PTPL files. The command layer does no I/O; the control plane
/// (`farflash-control`) implements this.
pub trait Provision {
    /// Opens the storage of namespace `nsid` of subsystem `nqn`, configured
    /// as `nc`: the backend and its description for the start-up banner.
    fn open_backend(
        &self,
        nqn: &str,
        nc: &NamespaceConfig,
        nsid: u32,
    ) -> Result<(SharedBackend, String), BuildError>;
    /// The PTPL file at `path` (Base 2.0 §7.3), not yet read.
    fn ptpl_file(&self, path: &std::path::Path) -> Arc<dyn PtplFile>;
}

/// Builds one namespace of subsystem `nqn`, its backend opened by `p`.
pub fn build_namespace(
    nqn: &str,
    nc: &NamespaceConfig,
    nsid: u32,
    p: &dyn Provision,
) -> Result<Namespace, BuildError> {
    let (backend, describe) = p.open_backend(nqn, nc, nsid)?;
    // The storage's own block size unless one is configured (a pool
    // volume's is 4 KiB; RAM, null and files open with the configured or 512).
    let bs = nc.block_size.unwrap_or(backend.block_size());
    if bs < backend.block_size() {
        return Err(BuildError::Invalid {
            nqn: nqn.to_owned(),
            nsid,
            msg: format!(
                "block_size {bs} is below the storage's block size {}",
                backend.block_size()
            ),
        });
    }
    let blocks = backend.capacity() / bs as u64;
    if blocks == 0 {
        return Err(BuildError::Invalid {
            nqn: nqn.to_owned(),
            nsid,
            msg: "namespace is smaller than one block".into(),
        });
    }
    let invalid = |msg: &str| BuildError::Invalid {
        nqn: nqn.to_owned(),
        nsid,
        msg: msg.to_owned(),
    };
    let uuid = match &nc.uuid {
        Some(u) => {
            parse_hex16(u).ok_or_else(|| invalid("uuid must be 32 hex digits (dashes allowed)"))?
        }
        None => backend
            .stable_id()
            .unwrap_or_else(|| derive_id(nqn, nsid, 1)),
    };
    let nguid = match &nc.nguid {
        Some(u) => parse_hex16(u).ok_or_else(|| invalid("nguid must be 32 hex digits"))?,
        // Storage with an identity of its own (a pool volume) keeps it
        // across restarts and subsystems: NGUID = its UUID's bytes.
        None => match backend.stable_id() {
            Some(id) => id,
            None => derive_id(nqn, nsid, 2),
        },
    };
    let ptpl = nc.ptpl_file.as_deref().map(|f| p.ptpl_file(f));
    let resv = crate::resv::NsResv::open(ptpl).map_err(|m| invalid(&m))?;
    Ok(Namespace {
        resv: Arc::new(resv),
        exclusion: Arc::default(),
        nsid,
        backend,
        block_size: bs,
        lba_shift: bs.trailing_zeros(),
        blocks,
        uuid,
        nguid,
        anagrpid: nc.anagrpid.unwrap_or(crate::ana::DEFAULT_ANAGRPID),
        describe,
        config: NamespaceConfig {
            nsid: Some(nsid),
            ..nc.clone()
        },
        left: AtomicBool::new(false),
    })
}

pub fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (u, m) in UNITS {
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{}{u}", bytes / m);
        }
    }
    format!("{bytes}B")
}

/// Opens every backend of `cfg`'s subsystems (refused before any is
/// opened when their files would not fit in the open-file limit).
pub fn build_subsystems(
    cfg: &Config,
    p: &dyn Provision,
) -> Result<Vec<Arc<Subsystem>>, BuildError> {
    let files = cfg.subsystems.iter().map(|sc| files_to_open(sc, &[])).sum();
    farflash_backend::limits::check_headroom(files)?;
    let mut out = Vec::new();
    for (i, sc) in cfg.subsystems.iter().enumerate() {
        out.push(build_subsystem(sc, i as u8, p)?);
    }
    Ok(out)
}

/// Opens one subsystem's backends; `index` goes into the generated serial
/// number (the subsystem's position when the target started).
pub fn build_subsystem(
    sc: &SubsystemConfig,
    index: u8,
    p: &dyn Provision,
) -> Result<Arc<Subsystem>, BuildError> {
    let cntlids =
        crate::cntlid::CntlidRange::from_config(sc.cntlid_min, sc.cntlid_max).map_err(|msg| {
            BuildError::Invalid {
                nqn: sc.nqn.clone(),
                nsid: 0,
                msg,
            }
        })?;
    let namespaces = build_namespaces(sc, &[], p)?;
    let serial = sc.serial.clone().unwrap_or_else(|| {
        let id = derive_id(&sc.nqn, 0, 3);
        format!(
            "FF{:02X}{:02X}{:02X}{:02X}{:02X}{:02X}{:02X}",
            id[0], id[1], id[2], id[3], id[4], id[5], index
        )
    });
    Ok(Arc::new(Subsystem {
        nqn: sc.nqn.clone(),
        serial,
        model: sc.model.clone().unwrap_or_else(|| "farflash".to_owned()),
        cntlids,
        access: RwLock::new(HostAccess::of(sc)),
        namespaces: RwLock::new(Arc::new(namespaces)),
        generation: AtomicU64::new(1),
        releases: AtomicU64::new(0),
        qos: RwLock::new(Arc::new(QosTable::build(&sc.qos, None))),
        qos_generation: AtomicU64::new(1),
        ana: RwLock::new(Arc::new(AnaTable::build(&sc.ana))),
        ana_chgcnt: AtomicU64::new(1),
        stats: StatsRegistry::default(),
    }))
}

/// Builds a subsystem's namespaces, reusing those of `current` whose
/// configuration and NSID are unchanged (their backends stay open).
pub fn build_namespaces(
    sc: &SubsystemConfig,
    current: &[Arc<Namespace>],
    p: &dyn Provision,
) -> Result<Vec<Arc<Namespace>>, BuildError> {
    let mut out = Vec::with_capacity(sc.namespaces.len());
    let mut next = 1;
    for nc in &sc.namespaces {
        let nsid = nc.nsid.unwrap_or(next);
        next = next.max(nsid + 1);
        let ns = match reusable(current, nsid, nc) {
            // Storage resized outside farflash (an RBD image): the same
            // backend, a new size (hosts get a Namespace Attribute Changed).
            Some(n) if n.backend.capacity() >> n.lba_shift != n.blocks => Arc::new(Namespace {
                blocks: n.backend.capacity() >> n.lba_shift,
                ..Namespace::with_backend(n, n.backend.clone(), &n.describe)
            }),
            Some(n) => n.clone(),
            None => Arc::new(build_namespace(&sc.nqn, nc, nsid, p)?),
        };
        out.push(ns);
    }
    out.sort_by_key(|n| n.nsid);
    Ok(out)
}

/// The namespace of `current` (sorted by NSID, as `Subsystem::namespaces`)
/// that namespace `nsid` configured as `nc` keeps (its backend stays open).
fn reusable<'a>(
    current: &'a [Arc<Namespace>],
    nsid: u32,
    nc: &NamespaceConfig,
) -> Option<&'a Arc<Namespace>> {
    current
        .binary_search_by_key(&nsid, |n| n.nsid)
        .ok()
        .map(|i| &current[i])
        .filter(|n| n.config.nsid == Some(nsid) && same_config(&n.config, nc))
}

/// How many files [`build_namespaces`] would open for `sc`, keeping what
/// it can of `current`: each file namespace holds a descriptor.
pub fn files_to_open(sc: &SubsystemConfig, current: &[Arc<Namespace>]) -> u64 {
    let mut next = 1;
    let mut n = 0;
    for nc in &sc.namespaces {
        let nsid = nc.nsid.unwrap_or(next);
        next = next.max(nsid.saturating_add(1));
        if nc.backend == BackendKind::File && reusable(current, nsid, nc).is_none() {
            n += 1;
        }
    }
    n
}

/// Whether `a` (a built namespace's configuration, NSID set) is `b` (as
/// configured, NSID perhaps implied), NSIDs aside.
fn same_config(a: &NamespaceConfig, b: &NamespaceConfig) -> bool {
    let NamespaceConfig {
        nsid: _,
        backend,
        path,
        size,
        block_size,
        uuid,
        nguid,
        anagrpid,
        ptpl_file,
        rbd,
        volume,
        commit,
    } = b;
    a.backend == *backend
        && a.path == *path
        && a.size == *size
        && a.block_size == *block_size
        && a.uuid == *uuid
        && a.nguid == *nguid
        && a.anagrpid == *anagrpid
        && a.ptpl_file == *ptpl_file
        && a.rbd == *rbd
        && a.volume == *volume
        && a.commit == *commit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_unique() {
        let a = derive_id("nqn.a", 1, 1);
        assert_eq!(a, derive_id("nqn.a", 1, 1));
        assert_ne!(a, derive_id("nqn.a", 2, 1));
        assert_ne!(a, derive_id("nqn.b", 1, 1));
        assert_ne!(a, derive_id("nqn.a", 1, 2));
        assert_eq!(a[6] >> 4, 8);
        assert_eq!(
            parse_hex16("6d1d2c3a-4b5c-4d6e-8f90-a1b2c3d4e5f6").map(|x| x[0]),
            Some(0x6d)
        );
        assert_eq!(parse_hex16("zz"), None);
        assert_eq!(human(1 << 30), "1G");
        assert_eq!(human(1000), "1000B");
    }
}
