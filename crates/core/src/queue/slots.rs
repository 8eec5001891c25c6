//! The life of one command: the states of a command slot, the only place
//! where a slot changes state (as SPDK's `nvmf_tcp_req_set_state` is for
//! its requests), and the two ends of that life: claiming a slot for an
//! arriving command, completing it (error log, reply data, the completion
//! for the binding); CIDs in flight, parked AERs.
//!
//! ```text
//!          claim            execute                emit (storage, offload)
//!   Free ---------> Parsed ---------> Running -----------------------------> Waiting{n}
//!    ^                |               |  ^  ^ \                                 |  ^
//!    |                |      throttle |  |  |  \ emit: n+1             reap: n-1  |  |
//!    |                |               v  |  |   `------------------------------'  |  |
//!    |                |       Throttled  |  `-------- reap (the last one) --------'  |
//!    |                |              admit  |                                        |
//!    |                |                     | park                                  |
//!    |                |                     v                                       |
//!    |                |                 ParkedAer                                   |
//!    |  complete      |  complete           |  complete (an event), retire (CID reused)
//!    `----------------+---------------------+---- from Parsed, Running, ParkedAer
//! ```
//!
//! `Parsed`: `begin` checked the command; the binding moves its data and
//! then calls `execute`, or fails it. `Running`: an executor has it (inside
//! one call into the queue, or between a last completion and its answer).
//! `Waiting`: `n` storage requests or offloaded jobs are out; the command
//! goes on when the last comes back. A command is answered (`complete`)
//! only when nothing of it is out: from `Parsed`, `Running` or `ParkedAer`.

use super::{NvmeQueue, Slot};
use crate::command::{Cmd, Completion};
use crate::stats::QueueStats;
use farflash_wire::log::ErrorEntry;
use farflash_wire::{Sqe, Status};

/// Where a command slot is in its command's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum CmdState {
    /// No command.
    #[default]
    Free,
    /// Arrived and checked (`begin`); its data is being moved.
    Parsed,
    /// In an executor's hands.
    Running,
    /// An I/O command waiting for QoS tokens (`queue/qos.rs`).
    Throttled,
    /// Storage requests or offloads out, this many.
    Waiting { pending: u16 },
    /// An Asynchronous Event Request held until an event (Base §5.2).
    ParkedAer,
}

/// What happens to a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A new command takes the slot.
    Claim,
    /// Its data is in place: an executor takes it.
    Execute,
    /// Over a QoS limit: it waits for tokens.
    Throttle,
    /// Its tokens came.
    Admit,
    /// A storage request or an offload goes out for it.
    Emit,
    /// One of those came back.
    Reap,
    /// An AER waits for an event.
    Park,
    /// Answered: the slot is free again.
    Complete,
    /// A parked AER the host gave up (its CID reused): freed unanswered.
    Retire,
}

impl CmdState {
    /// The state `ev` leads to, or `None` when `ev` cannot happen here.
    pub(crate) fn next(self, ev: Event) -> Option<CmdState> {
        use CmdState::*;
        use Event::*;
        Some(match (self, ev) {
            (Free, Claim) => Parsed,
            (Parsed, Execute) | (Throttled, Admit) => Running,
            (Running, Throttle) => Throttled,
            (Running, Emit) => Waiting { pending: 1 },
            (Waiting { pending }, Emit) => Waiting {
                pending: pending.checked_add(1)?,
            },
            (Waiting { pending: 1 }, Reap) => Running,
            (Waiting { pending }, Reap) if pending > 1 => Waiting {
                pending: pending - 1,
            },
            (Running, Park) => ParkedAer,
            (Parsed | Running | ParkedAer, Complete) | (ParkedAer, Retire) => Free,
            _ => return None,
        })
    }

    /// Storage requests and offloads out for the command.
    pub(crate) fn pending(self) -> u16 {
        match self {
            CmdState::Waiting { pending } => pending,
            _ => 0,
        }
    }
}

impl<C> Slot<C> {
    /// The command's state.
    pub(crate) fn state(&self) -> CmdState {
        self.state
    }

    /// Moves the command on by `ev`. An event its state does not allow is
    /// a bug of the command layer: it is logged and refused (false), and
    /// the slot keeps its state.
    pub(crate) fn step(&mut self, ev: Event) -> bool {
        match self.state.next(ev) {
            Some(next) => {
                self.state = next;
                true
            }
            None => {
                tracing::error!(cid = self.sqe.cid, opcode = self.sqe.opcode, state = ?self.state, event = ?ev, "command state machine: event not allowed");
                debug_assert!(false, "{:?} cannot {ev:?}", self.state);
                false
            }
        }
    }
}

impl<C: Default> NvmeQueue<C> {
    /// Takes a free slot for a command, or `None` when all are busy.
    pub(crate) fn take_slot(&mut self, sqe: Sqe) -> Option<usize> {
        let idx = self.slots.free.pop()? as usize;
        let s = &mut self.slots[idx];
        s.sqe = sqe;
        if !s.step(Event::Claim) {
            self.slots.free.push(idx as u16);
            return None;
        }
        s.len = 0;
        s.cmd = Cmd::Unparsed;
        s.status = Status::SUCCESS;
        s.reply = false;
        s.t0 = None;
        s.xport = C::default();
        if self.qid != 0 {
            if let Some(st) = &self.stats {
                QueueStats::bump(&st.outstanding, 1);
                if self.life.timing {
                    // Latency samples, only while a metrics listener asks
                    // for them: the pass's clock, no clock read per command.
                    s.t0 = self.life.now;
                }
            }
        }
        Some(idx)
    }

    /// Completes the command in `idx`: frees its slot and queues its
    /// completion, with its reply data when it succeeded.
    pub(crate) fn complete(&mut self, idx: usize, status: Status, result: u64) {
        let s = &mut self.slots[idx];
        if !s.step(Event::Complete) {
            // Requests of it are still out (logged by `step`): their
            // completions answer it.
            return;
        }
        let cid = s.sqe.cid;
        let nsid = s.sqe.nsid;
        let data = if status.is_success() && s.reply && s.len > 0 {
            let len = s.len;
            s.buf.take().map(|b| (b, len))
        } else {
            None
        };
        if let Some(b) = s.buf.take() {
            self.pool.put(b);
        }
        s.cmd = Cmd::Unparsed;
        let cmd = std::mem::take(&mut s.xport);
        if let Some(st) = &self.stats {
            if self.qid != 0 {
                QueueStats::drop_one(&st.outstanding);
            }
            if !status.is_success() {
                st.error((status.sct() as u16) << 8 | status.sc() as u16);
            }
        }
        if !status.is_success() {
            if let Some(c) = &self.ctrl {
                c.record_error(ErrorEntry {
                    sqid: self.qid,
                    cid,
                    status: status.to_cqe_field(false),
                    nsid,
                    trtype: self.via.trtype,
                    ..ErrorEntry::default()
                });
            }
        }
        self.cid_clear(cid);
        self.slots.free.push(idx as u16);
        self.out.done.push(Completion {
            cid,
            status,
            result,
            slot: Some(idx as u16),
            data,
            cmd,
        });
    }

    /// Answers a command that never got a slot.
    pub(crate) fn answer(&mut self, cid: u16, status: Status) {
        self.out.done.push(Completion {
            cid,
            status,
            result: 0,
            slot: None,
            data: None,
            cmd: C::default(),
        });
    }

    /// Marks `cid` in flight; returns whether it already was.
    pub(crate) fn cid_test_and_set(&mut self, cid: u16) -> bool {
        let (w, b) = (cid as usize / 64, cid as usize % 64);
        let was = self.slots.cid_busy[w] & (1 << b) != 0;
        self.slots.cid_busy[w] |= 1 << b;
        was
    }

    pub(crate) fn cid_clear(&mut self, cid: u16) {
        self.slots.cid_busy[cid as usize / 64] &= !(1u64 << (cid % 64));
    }

    /// Holds the AER in `idx` until an event (Base §5.2), and delivers
    /// one that is waiting already.
    pub(crate) fn park_aer(&mut self, idx: usize) {
        if self.slots[idx].step(Event::Park) {
            self.slots.aers.push(idx as u16);
            self.deliver_events();
        }
    }

    /// Completes parked AERs with pending events (Base §5.2).
    pub(crate) fn deliver_events(&mut self) {
        let Some(ctrl) = self.ctrl.clone() else {
            return;
        };
        while !self.slots.aers.is_empty() {
            let ev = ctrl.lock().events.pop_front();
            let Some(dw0) = ev else { break };
            let idx = self.slots.aers.remove(0) as usize;
            self.complete(idx, Status::SUCCESS, dw0.into());
        }
    }

    /// A host may give up an outstanding Asynchronous Event Request locally
    /// and reuse its CID (SPDK's initiator does so at detach, for the
    /// Property Get of CC). The Linux target and SPDK's accept the new
    /// command; so does this one: the parked AER is retired without a
    /// completion, since the host no longer waits for it.
    pub(crate) fn retire_parked_aer(&mut self, cid: u16) {
        let Some(pos) = self
            .slots
            .aers
            .iter()
            .position(|&i| self.slots[i as usize].sqe.cid == cid)
        else {
            return;
        };
        let idx = self.slots.aers.remove(pos) as usize;
        let s = &mut self.slots[idx];
        if !s.step(Event::Retire) {
            return;
        }
        s.xport = C::default();
        if let Some(b) = s.buf.take() {
            self.pool.put(b);
        }
        self.cid_clear(cid);
        self.slots.free.push(idx as u16);
    }
}

#[cfg(test)]
mod tests {
    use super::CmdState::{self, *};
    use super::Event::{self, *};

    const STATES: [CmdState; 7] = [
        Free,
        Parsed,
        Running,
        Throttled,
        Waiting { pending: 1 },
        Waiting { pending: 2 },
        ParkedAer,
    ];
    const EVENTS: [Event; 9] = [
        Claim, Execute, Throttle, Admit, Emit, Reap, Park, Complete, Retire,
    ];

    /// A read: arrives, runs, one storage request, answered.
    #[test]
    fn a_read_goes_round() {
        let mut s = Free;
        for (ev, want) in [
            (Claim, Parsed),
            (Execute, Running),
            (Emit, Waiting { pending: 1 }),
            (Reap, Running),
            (Complete, Free),
        ] {
            s = s.next(ev).unwrap();
            assert_eq!(s, want, "after {ev:?}");
        }
    }

    /// A Flush of every namespace: several requests out, answered after the last.
    #[test]
    fn several_requests_complete_after_the_last() {
        let mut s = Running;
        for _ in 0..3 {
            s = s.next(Emit).unwrap();
        }
        assert_eq!(s, Waiting { pending: 3 });
        assert_eq!(s.pending(), 3);
        assert_eq!(
            s.next(Complete),
            None,
            "not answered while requests are out"
        );
        s = s.next(Reap).unwrap().next(Reap).unwrap();
        assert_eq!(s, Waiting { pending: 1 });
        assert_eq!(s.next(Reap), Some(Running));
        assert_eq!(Waiting { pending: u16::MAX }.next(Emit), None);
    }

    #[test]
    fn throttled_commands_wait_for_their_tokens() {
        let s = Running.next(Throttle).unwrap();
        assert_eq!(s, Throttled);
        assert_eq!(s.next(Complete), None);
        assert_eq!(s.next(Emit), None);
        assert_eq!(s.next(Admit), Some(Running));
    }

    #[test]
    fn aers_park_and_leave_answered_or_retired() {
        let s = Running.next(Park).unwrap();
        assert_eq!(s.next(Complete), Some(Free));
        assert_eq!(s.next(Retire), Some(Free));
        assert_eq!(Running.next(Retire), None, "only a parked AER is retired");
    }

    /// The whole table: every state's allowed events, nothing else.
    #[test]
    fn only_the_drawn_transitions_exist() {
        let mut allowed = Vec::new();
        for s in STATES {
            for ev in EVENTS {
                if let Some(t) = s.next(ev) {
                    allowed.push((s, ev, t));
                }
            }
        }
        let want = [
            (Free, Claim, Parsed),
            (Parsed, Execute, Running),
            (Parsed, Complete, Free),
            (Running, Throttle, Throttled),
            (Running, Emit, Waiting { pending: 1 }),
            (Running, Park, ParkedAer),
            (Running, Complete, Free),
            (Throttled, Admit, Running),
            (Waiting { pending: 1 }, Emit, Waiting { pending: 2 }),
            (Waiting { pending: 1 }, Reap, Running),
            (Waiting { pending: 2 }, Emit, Waiting { pending: 3 }),
            (Waiting { pending: 2 }, Reap, Waiting { pending: 1 }),
            (ParkedAer, Complete, Free),
            (ParkedAer, Retire, Free),
        ];
        assert_eq!(allowed, want);
    }
}
