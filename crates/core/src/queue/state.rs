//! The life of one command: the states of a command slot, and the only
//! place where a slot changes state (as SPDK's `nvmf_tcp_req_set_state`
//! is for its requests).
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

use super::Slot;

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

impl Slot {
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
