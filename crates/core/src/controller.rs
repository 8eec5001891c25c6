//! Controllers (dynamic controller model, Base 2.3 §3.1.2): one per association,
//! created by an admin-queue Connect and shared by that association's queue
//! pairs. Only the admin path and Connects take its lock; the I/O path reads
//! only the `alive` flag.

use crate::subsystem::Subsystem;
use farflash_wire::log::ErrorEntry;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Error Log entries kept (ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 64;
/// Asynchronous Event Requests a host may keep outstanding (AERL + 1).
pub const AER_LIMIT: usize = 4;

/// What kind of controller an association has.
#[derive(Clone)]
pub enum Kind {
    Io(Arc<Subsystem>),
    Discovery,
}

pub struct Controller {
    pub cntlid: u16,
    pub kind: Kind,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    alive: AtomicBool,
    /// CC.EN = 1, CSTS.RDY = 1 and no shutdown asked (CC.SHN 00b): the
    /// controller runs commands other than Fabrics ones (Base §3.5.1).
    /// Kept with CC and CSTS (`set_ready`), read without the lock.
    ready: AtomicBool,
    /// Bumped by every controller reset (CC.EN 1 -> 0): I/O queues connected
    /// under an older epoch are deleted (Base §3.7.2).
    epoch: AtomicU32,
    /// Offloads (authentication's DH work) out on any queue of the
    /// association: the host is waiting for us, so the keep-alive timer
    /// does not run meanwhile (`queue/lifecycle.rs`).
    offloads: AtomicU32,
    /// The host disabled the volatile write cache (Set Features 06h, Base
    /// §5.27.1.4): every write is written through (as with FUA). Read
    /// per write, without the lock.
    write_through: AtomicBool,
    /// The host was granted read-only access when it connected
    /// (`Subsystem::host_read_only`): every namespace is write protected
    /// for this controller (Identify Namespace NSATTR bit 0, and Namespace
    /// is Write Protected for commands that would modify one; `io.rs`).
    /// Fixed for the controller's life: a management change of the grant
    /// disconnects the host's controllers instead (`control/src/reload.rs`).
    read_only: bool,
    state: Mutex<CtrlState>,
}

/// Mutable controller state, behind the controller's lock.
#[derive(Default)]
pub struct CtrlState {
    /// Controller Configuration and Status properties.
    pub cc: u32,
    pub csts: u32,
    /// I/O queues granted by Set Features Number of Queues (count, not 0's based).
    pub io_queues_granted: u16,
    /// Whether Set Features Number of Queues has been issued.
    pub io_queues_set: bool,
    /// I/O QIDs currently connected.
    pub io_qids: Vec<u16>,
    /// Asynchronous Event Configuration (Set Features 0Bh).
    pub aec: u32,
    /// Volatile Write Cache enable (Set Features 06h).
    pub vwc_enabled: bool,
    /// Keep Alive Timeout in ms (Connect KATO, Set Features 0Fh).
    pub kato_ms: u32,
    /// Asynchronous events waiting for an AER (completion DW0 values).
    pub events: VecDeque<u32>,
    /// Changed Namespace List (log 04h) not read yet.
    pub changed_ns: Vec<u32>,
    /// Reservation Notification log pages not read yet: (Log Page Count,
    /// type, NSID), oldest first (Base §5.16.1.25), at most 255.
    pub resv_log: VecDeque<(u64, u8, u32)>,
    pub resv_log_count: u64,
    /// Reservation Notification Mask (Set Features 82h): bits 1-3 mask
    /// Registration Preempted, Reservation Released, Reservation Preempted.
    pub resv_mask: u32,
    /// Newest first.
    pub errors: VecDeque<ErrorEntry>,
    pub error_count: u64,
}

impl Controller {
    pub fn new(
        cntlid: u16,
        kind: Kind,
        hostnqn: String,
        hostid: [u8; 16],
        kato_ms: u32,
    ) -> Controller {
        Controller {
            cntlid,
            kind,
            hostnqn,
            hostid,
            alive: AtomicBool::new(true),
            ready: AtomicBool::new(false),
            epoch: AtomicU32::new(0),
            offloads: AtomicU32::new(0),
            write_through: AtomicBool::new(false),
            read_only: false,
            state: Mutex::new(CtrlState {
                kato_ms,
                vwc_enabled: true,
                ..CtrlState::default()
            }),
        }
    }

    /// Locks the state; a poisoned lock (a panic elsewhere) still yields the data.
    pub fn lock(&self) -> MutexGuard<'_, CtrlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// An offload of one of the association's queues went out (+1) or came
    /// back (-1).
    pub(crate) fn offload_count(&self, started: bool) {
        if started {
            self.offloads.fetch_add(1, Ordering::AcqRel);
        } else {
            let _ = (self.offloads)
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        }
    }

    /// Whether the target itself is working for this association.
    pub(crate) fn offloads_pending(&self) -> bool {
        self.offloads.load(Ordering::Acquire) > 0
    }

    /// Whether commands other than Fabrics ones run (Base §3.5.1: CC.EN and
    /// CSTS.RDY set, no shutdown asked); Linux nvmet and SPDK answer the
    /// others with Command Sequence Error.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The same controller, seeing every namespace write protected (a
    /// read-only host's; set at creation, `Target::create_controller`).
    pub fn with_read_only(self, read_only: bool) -> Controller {
        Controller { read_only, ..self }
    }

    /// Whether every namespace is write protected for this controller.
    #[inline]
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Writes go through to stable storage (the host turned the volatile
    /// write cache off).
    pub fn write_through(&self) -> bool {
        self.write_through.load(Ordering::Relaxed)
    }

    /// Set Features Volatile Write Cache (under the lock, with `vwc_enabled`).
    pub(crate) fn set_write_cache(&self, st: &mut CtrlState, enabled: bool) {
        st.vwc_enabled = enabled;
        self.write_through.store(!enabled, Ordering::Relaxed);
    }

    /// Recomputes [`Controller::is_ready`] from CC and CSTS (under the lock).
    pub(crate) fn set_ready(&self, st: &CtrlState) {
        use farflash_wire::props::{cc, csts};
        let ready = st.cc & cc::EN != 0 && st.csts & csts::RDY != 0 && cc::shn(st.cc) == 0;
        self.ready.store(ready, Ordering::Release);
    }

    /// The current reset epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The Flushes of a normal shutdown completed: CSTS.SHST 01b -> 10b
    /// (Base §3.6.2).
    pub fn shutdown_complete(&self) {
        use farflash_wire::props::csts;
        let mut st = self.lock();
        if st.csts & csts::SHST_MASK == csts::SHST_OCCURRING {
            st.csts = (st.csts & !csts::SHST_MASK) | csts::SHST_COMPLETE;
        }
    }

    /// A controller reset: the I/O queues of the association go away.
    pub fn reset_io_queues(&self, st: &mut CtrlState) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        note_change();
        st.io_qids.clear();
        st.io_queues_set = false;
    }

    /// Ends the association: every queue of this controller closes at its next tick.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::Release);
        note_change();
    }

    pub fn subsystem(&self) -> Option<&Arc<Subsystem>> {
        match &self.kind {
            Kind::Io(s) => Some(s),
            Kind::Discovery => None,
        }
    }

    pub fn is_discovery(&self) -> bool {
        matches!(self.kind, Kind::Discovery)
    }

    /// Records a failed command in the Error Information log (Base §5.16.1.2).
    pub fn record_error(&self, mut e: ErrorEntry) {
        let mut st = self.lock();
        st.error_count += 1;
        e.error_count = st.error_count;
        st.errors.push_front(e);
        st.errors.truncate(ERROR_LOG_ENTRIES);
    }
}

/// Moves on with every event an idle queue's tick must see within a tick
/// (a controller killed or reset, an asynchronous event queued, a
/// management change). Event loops compare it every tick period and then
/// tick all their queues, so that queues without work can tick rarely.
/// Process-wide: several targets in one process (tests) only cause extra
/// scans.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// The current value of the change counter ([`note_change`]).
pub fn changes() -> u64 {
    CHANGES.load(Ordering::Acquire)
}

/// Something every queue's next tick should see happened.
pub fn note_change() {
    CHANGES.fetch_add(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_log_is_bounded_and_newest_first() {
        let c = Controller::new(1, Kind::Discovery, "h".into(), [0; 16], 0);
        for i in 0..100u16 {
            c.record_error(ErrorEntry {
                cid: i,
                ..ErrorEntry::default()
            });
        }
        let st = c.lock();
        assert_eq!(st.errors.len(), ERROR_LOG_ENTRIES);
        assert_eq!(st.errors[0].cid, 99);
        assert_eq!(st.errors[0].error_count, 100);
        drop(st);
        assert!(c.is_alive());
        c.kill();
        assert!(!c.is_alive());
    }
}
