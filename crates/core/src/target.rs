//! The target: its subsystems, listeners and live controllers. Shared by
//! every event-loop thread behind an `Arc`; only Connect and teardown take
//! the controller table's lock.

use crate::config::TransportConfig;
use crate::controller::{Controller, Kind};
use crate::listen::ListenTransport;
use crate::subsystem::Subsystem;
use farflash_wire::identify::OAES_NS_ATTR;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

/// AER completion DW0 for "Namespace Attribute Changed": type Notice (2),
/// information 00h, log page 04h (Base §5.2 Figure "Asynchronous Event Information - Notice").
pub const AEN_NS_ATTR_CHANGED: u32 = 0x0004_0002;
/// AER completion DW0 for "Discovery Log Page Change": type Notice (2),
/// information F0h, log page 70h (Base §5.2, Base 2.3 §3.1.3.3.2).
pub const AEN_DISCOVERY_CHANGED: u32 = 0x0070_F002;

/// AER completion DW0 for "Reservation Log Page Available": type I/O
/// Command Specific Status (6), information 00h, log page 80h (Base §5.2).
pub const AEN_RESERVATION_LOG: u32 = 0x0080_0006;

use crate::cntlid::CntlidRange;
pub use crate::cntlid::MAX_CNTLID;

pub struct Target {
    /// Replaced whole by management changes; readers take a snapshot.
    subsystems: RwLock<Arc<Vec<Arc<Subsystem>>>>,
    pub transport: TransportConfig,
    /// Listeners: (the address as configured, the bound address), listed
    /// in the discovery log.
    listeners: RwLock<Arc<Vec<Listener>>>,
    /// Bumped when a listener is removed; queues then check their own.
    listeners_gen: AtomicU64,
    /// Discovery log generation counter (GENCTR).
    pub genctr: AtomicU64,
    /// Discovery log pages built for the current GENCTR.
    pub(crate) discovery_cache: crate::discovery_cache::DiscoveryCache,
    /// When the target started (SMART power-on hours): set by whoever
    /// starts it ([`Target::set_started`]; the command layer reads no
    /// clock), else the first time a SMART log is read.
    started: std::sync::OnceLock<std::time::Instant>,
    shutting_down: AtomicBool,
    /// Latency histograms are sampled (a metrics listener is on).
    latency_timing: AtomicBool,
    /// Controllers torn down for a missed Keep Alive (Base §3.9).
    pub keep_alive_expiries: AtomicU64,
    /// DH-HMAC-CHAP transactions that failed (a wrong or garbled message
    /// from the host, an AUTH_Failure2, or the transaction timeout).
    pub auth_failures: AtomicU64,
    /// Host oddities accepted (docs/interop.md).
    pub tolerated: crate::stats::Tolerated,
    /// The event loops' sleeps, per worker.
    pub loops: crate::stats::Loops,
    /// Serializes management changes (RPC, SIGHUP, load_config).
    manage: Mutex<()>,
    ctrls: Mutex<CtrlTable>,
}

/// One listener of the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// As configured (`listen = [...]`, `--listen`, `listeners.add`).
    pub config: String,
    pub addr: SocketAddr,
    /// TCP and RDMA listeners may share an address and port: a queue
    /// belongs to the listener of its own transport.
    pub transport: ListenTransport,
}

/// What the management API reports of a live controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    pub cntlid: u16,
    /// Subsystem NQN, or the discovery NQN.
    pub subnqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub io_queues: usize,
    pub kato_ms: u32,
    /// Every namespace is write protected for it (a read-only host's).
    pub read_only: bool,
}

struct CtrlTable {
    next: u16,
    live: HashMap<u16, Weak<Controller>>,
}

impl Target {
    /// A target whose listeners are named by their bound addresses.
    pub fn new(
        subsystems: Vec<Arc<Subsystem>>,
        transport: TransportConfig,
        listeners: Vec<SocketAddr>,
    ) -> Arc<Target> {
        let ls = listeners
            .into_iter()
            .map(|addr| Listener {
                config: addr.to_string(),
                addr,
                transport: ListenTransport::Tcp,
            })
            .collect();
        Target::with_listeners(subsystems, transport, ls)
    }

    /// Records when the target started (the SMART log's power-on hours
    /// count from there); only the first call counts.
    pub fn set_started(&self, at: std::time::Instant) {
        let _ = self.started.set(at);
    }

    /// When the target started; `now` when nobody said.
    pub fn started(&self, now: std::time::Instant) -> std::time::Instant {
        *self.started.get_or_init(|| now)
    }

    pub fn with_listeners(
        subsystems: Vec<Arc<Subsystem>>,
        transport: TransportConfig,
        listeners: Vec<Listener>,
    ) -> Arc<Target> {
        Arc::new(Target {
            subsystems: RwLock::new(Arc::new(subsystems)),
            transport,
            listeners: RwLock::new(Arc::new(listeners)),
            listeners_gen: AtomicU64::new(0),
            genctr: AtomicU64::new(1),
            discovery_cache: Default::default(),
            started: std::sync::OnceLock::new(),
            shutting_down: AtomicBool::new(false),
            latency_timing: AtomicBool::new(false),
            keep_alive_expiries: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            tolerated: Default::default(),
            loops: Default::default(),
            manage: Mutex::new(()),
            ctrls: Mutex::new(CtrlTable {
                next: 1,
                live: HashMap::new(),
            }),
        })
    }

    /// The current subsystems (a snapshot).
    pub fn subsystems(&self) -> Arc<Vec<Arc<Subsystem>>> {
        self.subsystems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems().iter().find(|s| s.nqn == nqn).cloned()
    }

    pub fn set_subsystems(&self, list: Vec<Arc<Subsystem>>) {
        *self.subsystems.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(list);
    }

    /// The current listeners (a snapshot).
    pub fn listeners(&self) -> Arc<Vec<Listener>> {
        self.listeners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Bound listener addresses.
    pub fn listener_addrs(&self) -> Vec<SocketAddr> {
        self.listeners().iter().map(|l| l.addr).collect()
    }

    pub fn set_listeners(&self, list: Vec<Listener>) {
        let removed = {
            let mut g = self.listeners.write().unwrap_or_else(|p| p.into_inner());
            let removed = g.iter().any(|l| !list.contains(l));
            *g = Arc::new(list);
            removed
        };
        if removed {
            self.listeners_gen.fetch_add(1, Ordering::AcqRel);
            crate::controller::note_change();
        }
    }

    /// Changes whenever a listener is removed.
    pub fn listeners_generation(&self) -> u64 {
        self.listeners_gen.load(Ordering::Acquire)
    }

    /// The secure channel of the TCP listener a connection reached at
    /// `local` (`tls:` / `tls-optional:` listeners; a listener bound to an
    /// unspecified address matches any local address of its port).
    pub fn secure_channel(&self, local: &SocketAddr) -> crate::listen::SecureChannel {
        let ls = self.listeners();
        let tcp = |l: &&Listener| l.transport == ListenTransport::Tcp;
        let l = (ls.iter().filter(tcp).find(|l| l.addr == *local)).or_else(|| {
            ls.iter()
                .filter(tcp)
                .find(|l| l.addr.ip().is_unspecified() && l.addr.port() == local.port())
        });
        l.map_or(crate::listen::SecureChannel::None, |l| {
            crate::listen::listen_secure(&l.config)
        })
    }

    /// The TLS PSK for the identity a ClientHello offers (raw bytes): the
    /// `tls_key` of the identity's host in the identity's subsystem, if the
    /// host may connect there and its key resolves the identity
    /// (`crate::tls_key`). None for anything else, malformed identities
    /// included. Read per handshake: rotated keys apply to new connections.
    ///
    /// An identity naming the discovery NQN (`nvme discover --tls`) is
    /// resolved with the host's key in any subsystem: the first that
    /// resolves it (a version 1 identity's digest picks the key).
    pub fn tls_psk(&self, identity: &[u8]) -> Option<farflash_psk::PskChoice> {
        let id = farflash_psk::PskIdentity::parse(identity).ok()?;
        if id.subnqn() == farflash_wire::DISCOVERY_NQN {
            return self.subsystems().iter().find_map(|s| s.tls_psk_for(&id));
        }
        self.subsystem(id.subnqn())?.tls_psk_for(&id)
    }

    /// Whether a TCP connection that reached `local` still has its listener.
    pub fn serves(&self, local: &SocketAddr) -> bool {
        self.serves_on(farflash_wire::discovery::TRTYPE_TCP, local)
    }

    /// Whether a queue of transport `trtype` that reached `local` still has
    /// its listener (of the same transport).
    pub fn serves_on(&self, trtype: u8, local: &SocketAddr) -> bool {
        self.listeners().iter().any(|l| {
            l.transport.trtype() == trtype
                && l.addr.port() == local.port()
                && (l.addr.ip() == local.ip() || l.addr.ip().is_unspecified())
        })
    }

    /// Turns latency sampling on or off (a metrics listener reads them).
    pub fn set_latency_timing(&self, on: bool) {
        self.latency_timing.store(on, Ordering::Relaxed);
    }

    #[inline]
    pub fn latency_timing(&self) -> bool {
        self.latency_timing.load(Ordering::Relaxed)
    }

    /// Held by every management change, so two never interleave; when it
    /// is released, event loops tick their queues (which see the change).
    pub fn manage_lock(&self) -> ManageGuard<'_> {
        ManageGuard {
            _serial: self.manage.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// Creates a controller with a CNTLID no live controller has, within
    /// the subsystem's range (`cntlid_min` / `cntlid_max`; discovery
    /// controllers use the whole range); `None` when all of it is in use.
    pub fn create_controller(
        &self,
        kind: Kind,
        hostnqn: String,
        hostid: [u8; 16],
        kato_ms: u32,
    ) -> Option<Arc<Controller>> {
        let (range, read_only) = match &kind {
            Kind::Io(s) => (s.cntlids, s.host_read_only(&hostnqn)),
            Kind::Discovery => (CntlidRange::default(), false),
        };
        let mut t = self.ctrls.lock().unwrap_or_else(|p| p.into_inner());
        t.live.retain(|_, w| w.strong_count() > 0);
        let mut id = range.start(t.next);
        for _ in 0..range.len() {
            let this = id;
            id = range.after(this);
            t.next = id;
            let id = this;
            if let std::collections::hash_map::Entry::Vacant(e) = t.live.entry(id) {
                let c = Controller::new(id, kind, hostnqn, hostid, kato_ms);
                let c = Arc::new(c.with_read_only(read_only));
                e.insert(Arc::downgrade(&c));
                return Some(c);
            }
        }
        None
    }

    /// A live controller by CNTLID.
    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        let t = self.ctrls.lock().unwrap_or_else(|p| p.into_inner());
        t.live
            .get(&cntlid)
            .and_then(Weak::upgrade)
            .filter(|c| c.is_alive())
    }

    /// Forgets a controller whose association ended.
    pub fn remove_controller(&self, c: &Controller) {
        c.kill();
        let mut t = self.ctrls.lock().unwrap_or_else(|p| p.into_inner());
        t.live.remove(&c.cntlid);
    }

    /// Tells every controller of `sub` that namespaces `nsids` changed: they
    /// go to its Changed Namespace List (log 04h) and, if the host enabled
    /// Namespace Attribute Notices, an asynchronous event is queued for the
    /// admin queue to deliver (Base §5.2, §5.16.1.5).
    pub fn namespaces_changed(&self, sub: &Arc<Subsystem>, nsids: &[u32]) {
        let ctrls: Vec<Arc<Controller>> = {
            let t = self.ctrls.lock().unwrap_or_else(|p| p.into_inner());
            t.live.values().filter_map(Weak::upgrade).collect()
        };
        for c in ctrls
            .iter()
            .filter(|c| c.subsystem().is_some_and(|s| Arc::ptr_eq(s, sub)))
        {
            let mut st = c.lock();
            note_changed(&mut st.changed_ns, nsids);
            if st.aec & OAES_NS_ATTR != 0 && !st.events.contains(&AEN_NS_ATTR_CHANGED) {
                st.events.push_back(AEN_NS_ATTR_CHANGED);
            }
        }
        crate::controller::note_change();
    }

    /// The ANA states of `sub` changed: every I/O controller of it that
    /// enabled ANA Change Notices gets an asynchronous event (Base §8.20.4,
    /// §5.2); the host then reads the ANA log page (0Ch).
    pub fn ana_changed(&self, sub: &Arc<Subsystem>) {
        for c in self.all_controllers() {
            if !c.subsystem().is_some_and(|s| Arc::ptr_eq(s, sub)) {
                continue;
            }
            let mut st = c.lock();
            if st.aec & farflash_wire::identify::OAES_ANA_CHANGE != 0
                && !st.events.contains(&crate::ana::AEN_ANA_CHANGE)
            {
                st.events.push_back(crate::ana::AEN_ANA_CHANGE);
            }
        }
        crate::controller::note_change();
    }

    /// Reservation notices of namespace `nsid` of `sub` (`crate::resv`):
    /// each goes to the Reservation Notification log of every controller
    /// of that host (Host Identifier) in the subsystem, with an
    /// asynchronous event (type I/O Command Specific, log page 80h) unless
    /// the host masked that notice (Base 2.0, "Reservations"; Base §5.16.1.25).
    pub fn reservation_notices(
        &self,
        sub: &Arc<Subsystem>,
        nsid: u32,
        notices: &[crate::resv::Notice],
    ) {
        if notices.is_empty() {
            return;
        }
        for c in self.all_controllers() {
            if !c.subsystem().is_some_and(|s| Arc::ptr_eq(s, sub)) {
                continue;
            }
            let mut st = c.lock();
            for &(h, kind) in notices {
                if h != c.hostid || st.resv_mask & (1 << kind) != 0 {
                    continue;
                }
                st.resv_log_count += 1;
                let n = st.resv_log_count;
                if st.resv_log.len() >= 255 {
                    st.resv_log.pop_front();
                }
                st.resv_log.push_back((n, kind, nsid));
                if !st.events.contains(&AEN_RESERVATION_LOG) {
                    st.events.push_back(AEN_RESERVATION_LOG);
                }
            }
        }
        crate::controller::note_change();
    }

    fn all_controllers(&self) -> Vec<Arc<Controller>> {
        let t = self.ctrls.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<Arc<Controller>> = t
            .live
            .values()
            .filter_map(Weak::upgrade)
            .filter(|c| c.is_alive())
            .collect();
        v.sort_by_key(|c| c.cntlid);
        v
    }

    /// The live controllers, by CNTLID.
    pub fn controllers(&self) -> Vec<ControllerInfo> {
        self.all_controllers()
            .iter()
            .map(|c| {
                let st = c.lock();
                ControllerInfo {
                    cntlid: c.cntlid,
                    subnqn: c
                        .subsystem()
                        .map(|s| s.nqn.clone())
                        .unwrap_or_else(|| farflash_wire::DISCOVERY_NQN.to_owned()),
                    hostnqn: c.hostnqn.clone(),
                    hostid: c.hostid,
                    io_queues: st.io_qids.len(),
                    kato_ms: st.kato_ms,
                    read_only: c.read_only(),
                }
            })
            .collect()
    }

    /// Ends the association of controller `cntlid`: its queues close at
    /// their next tick. Returns whether it was live.
    pub fn disconnect_controller(&self, cntlid: u16) -> bool {
        match self.controller(cntlid) {
            Some(c) => {
                self.remove_controller(&c);
                true
            }
            None => false,
        }
    }

    /// Ends every association of `sub` (all hosts when `host` is None);
    /// returns how many.
    pub fn disconnect_subsystem_hosts(&self, sub: &Arc<Subsystem>, host: Option<&str>) -> usize {
        let mut n = 0;
        for c in self.all_controllers() {
            let same = c.subsystem().is_some_and(|s| Arc::ptr_eq(s, sub));
            if same && host.is_none_or(|h| h == c.hostnqn) {
                self.remove_controller(&c);
                n += 1;
            }
        }
        n
    }

    /// The discovery log changed (subsystems, hosts, listeners): GENCTR
    /// moves on and every discovery controller that enabled Discovery Log
    /// Page Change notices gets an asynchronous event (Base §5.2,
    /// Fabrics §5.3 persistent discovery controllers).
    pub fn discovery_changed(&self) {
        self.genctr.fetch_add(1, Ordering::AcqRel);
        for c in self.all_controllers().iter().filter(|c| c.is_discovery()) {
            let mut st = c.lock();
            if st.aec & farflash_wire::identify::OAES_DISCOVERY_CHANGE != 0
                && !st.events.contains(&AEN_DISCOVERY_CHANGED)
            {
                st.events.push_back(AEN_DISCOVERY_CHANGED);
            }
        }
        crate::controller::note_change();
    }

    pub fn live_controllers(&self) -> usize {
        let t = self.ctrls.lock().unwrap_or_else(|p| p.into_inner());
        t.live.values().filter(|w| w.strong_count() > 0).count()
    }

    /// Starts shutdown: new commands are refused, controllers wind down.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }
}

/// The Changed Namespace List holds at most this many NSIDs; beyond it the
/// log page says "more than 1024 changed" (first entry FFFFFFFFh, Base
/// §5.16.1.5), so a controller keeps one more than this and no further.
pub const CHANGED_NS_MAX: usize = 1024;

/// Adds `nsids` to a controller's Changed Namespace List: sorted, without
/// duplicates, at most [`CHANGED_NS_MAX`] + 1 entries (one merge of two
/// sorted lists: thousands of changes reach every controller of the
/// subsystem).
fn note_changed(list: &mut Vec<u32>, nsids: &[u32]) {
    if list.len() > CHANGED_NS_MAX {
        return;
    }
    let mut add: Vec<u32> = nsids.to_vec();
    add.sort_unstable();
    let old = std::mem::take(list);
    let (mut a, mut b) = (old.into_iter().peekable(), add.into_iter().peekable());
    while list.len() <= CHANGED_NS_MAX {
        let next = match (a.peek(), b.peek()) {
            (Some(&x), Some(&y)) if x <= y => a.next(),
            (Some(_), Some(_)) | (None, Some(_)) => b.next(),
            (Some(_), None) => a.next(),
            (None, None) => break,
        };
        if let Some(id) = next {
            if list.last() != Some(&id) {
                list.push(id);
            }
        }
    }
}

/// [`Target::manage_lock`]'s guard: the change is noted when it is dropped
/// ([`crate::controller::note_change`]).
pub struct ManageGuard<'a> {
    _serial: MutexGuard<'a, ()>,
}

impl Drop for ManageGuard<'_> {
    fn drop(&mut self) {
        crate::controller::note_change();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_namespace_lists_stay_sorted_and_bounded() {
        let mut l = vec![];
        note_changed(&mut l, &[5, 1]);
        note_changed(&mut l, &[3, 5, 9]);
        assert_eq!(l, [1, 3, 5, 9]);
        let many: Vec<u32> = (1..=5000).rev().collect();
        note_changed(&mut l, &many);
        assert_eq!(
            l.len(),
            CHANGED_NS_MAX + 1,
            "one past the log's 1024: the overflow mark"
        );
        assert!(l.windows(2).all(|w| w[0] < w[1]));
        note_changed(&mut l, &[7000]);
        assert_eq!(l.len(), CHANGED_NS_MAX + 1);
    }

    #[test]
    fn cntlids_are_unique_among_live_controllers() {
        let t = Target::new(vec![], TransportConfig::default(), vec![]);
        let a = t
            .create_controller(Kind::Discovery, "h".into(), [0; 16], 0)
            .unwrap();
        let b = t
            .create_controller(Kind::Discovery, "h".into(), [0; 16], 0)
            .unwrap();
        assert_ne!(a.cntlid, b.cntlid);
        assert_eq!(t.controller(a.cntlid).map(|c| c.cntlid), Some(a.cntlid));
        t.remove_controller(&a);
        assert!(t.controller(a.cntlid).is_none());
        assert!(!a.is_alive());
        assert_eq!(t.live_controllers(), 1);
    }
}
