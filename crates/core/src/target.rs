//! The target: its subsystems, listeners and live controllers. Shared by
//! every event-loop thread behind an `Arc`; only Connect and teardown take
//! the controller table's lock.

use crate::config::TransportConfig;
use crate::controller::{Controller, Kind};
use crate::subsystem::Subsystem;
use farflash_wire::identify::OAES_NS_ATTR;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// AER completion DW0 for "Namespace Attribute Changed": type Notice (2),
/// information 00h, log page 04h (Base §5.2 Figure "Asynchronous Event Information - Notice").
pub const AEN_NS_ATTR_CHANGED: u32 = 0x0004_0002;

/// Highest CNTLID of the dynamic model (Base: FFF0h..FFFFh are reserved).
pub const MAX_CNTLID: u16 = 0xFFEF;

pub struct Target {
    pub subsystems: Vec<Arc<Subsystem>>,
    pub transport: TransportConfig,
    /// Bound listener addresses, listed in the discovery log.
    pub listeners: Vec<SocketAddr>,
    /// Discovery log generation counter (GENCTR).
    pub genctr: AtomicU64,
    /// When the target started (SMART power-on hours).
    pub started: std::time::Instant,
    shutting_down: AtomicBool,
    ctrls: Mutex<CtrlTable>,
}

struct CtrlTable {
    next: u16,
    live: HashMap<u16, Weak<Controller>>,
}

impl Target {
    pub fn new(
        subsystems: Vec<Arc<Subsystem>>,
        transport: TransportConfig,
        listeners: Vec<SocketAddr>,
    ) -> Arc<Target> {
        Arc::new(Target {
            subsystems,
            transport,
            listeners,
            genctr: AtomicU64::new(1),
            started: std::time::Instant::now(),
            shutting_down: AtomicBool::new(false),
            ctrls: Mutex::new(CtrlTable {
                next: 1,
                live: HashMap::new(),
            }),
        })
    }

    pub fn subsystem(&self, nqn: &str) -> Option<&Arc<Subsystem>> {
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }

    /// Creates a controller with a CNTLID no live controller has; `None`
    /// when all 65519 are in use.
    pub fn create_controller(
        &self,
        kind: Kind,
        hostnqn: String,
        hostid: [u8; 16],
        kato_ms: u32,
    ) -> Option<Arc<Controller>> {
        let mut t = self.ctrls.lock().unwrap_or_else(|p| p.into_inner());
        t.live.retain(|_, w| w.strong_count() > 0);
        for _ in 0..MAX_CNTLID {
            let id = t.next;
            t.next = if id >= MAX_CNTLID { 1 } else { id + 1 };
            if let std::collections::hash_map::Entry::Vacant(e) = t.live.entry(id) {
                let c = Arc::new(Controller::new(id, kind, hostnqn, hostid, kato_ms));
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
            for id in nsids {
                if !st.changed_ns.contains(id) {
                    st.changed_ns.push(*id);
                }
            }
            if st.aec & OAES_NS_ATTR != 0 && !st.events.contains(&AEN_NS_ATTR_CHANGED) {
                st.events.push_back(AEN_NS_ATTR_CHANGED);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
