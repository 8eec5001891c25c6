//! NVMe/TCP's state of one command ([`TcpCmd`], the binding's
//! `Transport::Cmd`): kept in the command's slot of the command layer, so a
//! command has one object, one index (the slot, also the R2T's TTAG) and
//! one free list. Where its data transfer is (`Phase`) changes only here,
//! by the table in [`Phase::next`] (as nvmet-tcp's per-command states and
//! SPDK's one request-state enum are written in one place).
//!
//! ```text
//!          ready (no data, or in-capsule data)
//!   Idle ------------------------------------------> Exec
//!    |  \  r2t                         data (all)    ^  ^
//!    |   `----------> H2C{got} --------------------'   |
//!    |  wait            ^  | data (part): got += n      |
//!    v                  |  `--'                          |
//!   WaitBuf{r2t} -------' r2t (r2t: true)                |
//!        `------------------------------------------------' budget (r2t: false)
//! ```
//!
//! A command leaves its slot with its completion (`Completion::cmd`): the
//! slot is reset (`Idle`) when the next command takes it, so nothing here
//! frees it.

/// Where a command's data transfer is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Just arrived: nothing decided yet.
    #[default]
    Idle,
    /// Waiting for data-buffer budget before its R2T (`r2t`) or its
    /// execution (a read's reply buffer).
    WaitBuf { r2t: bool },
    /// Its R2T went out; `got` bytes of H2CData so far.
    H2C { got: u32 },
    /// Its data is in place: the command layer has it (running, or failed).
    Exec,
}

/// What happens to a command's transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Its data is in place (none, or in the capsule): it runs.
    Ready,
    /// No budget yet: it waits, for an R2T (`r2t`) or to run.
    Wait { r2t: bool },
    /// The R2T for all its data goes out (TCP §3.6.2.10).
    R2t,
    /// H2CData arrived up to byte `end` of its data (TCP §3.6.2.8).
    Data { end: u32 },
    /// Its budget came: a read runs.
    Budget,
}

impl Phase {
    /// The phase `ev` leads to for a command moving `len` bytes, or `None`
    /// when `ev` cannot happen here.
    pub(crate) fn next(self, ev: Event, len: u32) -> Option<Phase> {
        use Event::*;
        use Phase::*;
        Some(match (self, ev) {
            (Idle, Ready) | (WaitBuf { r2t: false }, Budget) => Exec,
            (Idle, Wait { r2t }) => WaitBuf { r2t },
            (Idle | WaitBuf { r2t: true }, R2t) => H2C { got: 0 },
            // Data only moves forward (an empty PDU leaves it where it is).
            (H2C { got }, Data { end }) if end >= got && end < len => H2C { got: end },
            (H2C { got }, Data { end }) if end >= got && end == len => Exec,
            _ => return None,
        })
    }
}

/// NVMe/TCP's state of one command.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpCmd {
    phase: Phase,
    cid: u16,
    /// Data bytes the command moves.
    len: u32,
    /// Data-buffer bytes charged to this command's budget.
    charged: u32,
    /// A data digest failed on its H2CData.
    bad_digest: bool,
}

impl TcpCmd {
    /// A command with CID `cid` moving `len` bytes has just taken the slot.
    pub(crate) fn arrived(cid: u16, len: u32) -> TcpCmd {
        TcpCmd {
            cid,
            len,
            ..TcpCmd::default()
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    pub(crate) fn cid(&self) -> u16 {
        self.cid
    }

    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    pub(crate) fn charged(&self) -> u32 {
        self.charged
    }

    pub(crate) fn bad_digest(&self) -> bool {
        self.bad_digest
    }

    /// `n` more data-buffer bytes are charged to the command.
    pub(crate) fn charge(&mut self, n: u32) {
        self.charged += n;
    }

    /// A data digest of its H2CData failed (TCP §3.6.2.8: the command
    /// completes with Transient Transport Error once its data is in).
    pub(crate) fn note_bad_digest(&mut self) {
        self.bad_digest = true;
    }

    /// Moves the transfer on by `ev`. An event its phase does not allow is
    /// a bug of the binding (the wire's PDUs are checked before they become
    /// events): logged and refused (false), the phase kept.
    pub(crate) fn step(&mut self, ev: Event) -> bool {
        match self.phase.next(ev, self.len) {
            Some(p) => {
                self.phase = p;
                true
            }
            None => {
                tracing::error!(cid = self.cid, phase = ?self.phase, event = ?ev, "NVMe/TCP command state machine: event not allowed");
                debug_assert!(false, "{:?} cannot {ev:?}", self.phase);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Event::{self, *};
    use super::Phase::{self, *};
    use super::TcpCmd;

    const LEN: u32 = 8192;
    const PHASES: [Phase; 6] = [
        Idle,
        WaitBuf { r2t: false },
        WaitBuf { r2t: true },
        H2C { got: 0 },
        H2C { got: 4096 },
        Exec,
    ];
    const EVENTS: [Event; 9] = [
        Ready,
        Wait { r2t: false },
        Wait { r2t: true },
        R2t,
        Data { end: 0 },
        Data { end: 4096 },
        Data { end: LEN },
        Data { end: LEN + 1 },
        Budget,
    ];

    /// A write: R2T, two H2CData PDUs, runs.
    #[test]
    fn a_write_goes_round() {
        let mut c = TcpCmd::arrived(7, LEN);
        for (ev, want) in [
            (R2t, H2C { got: 0 }),
            (Data { end: 4096 }, H2C { got: 4096 }),
            (Data { end: LEN }, Exec),
        ] {
            assert!(c.step(ev), "{ev:?}");
            assert_eq!(c.phase(), want, "after {ev:?}");
        }
        assert_eq!((c.cid(), c.len()), (7, LEN));
    }

    /// The whole table: every phase's allowed events, nothing else.
    #[test]
    fn only_the_drawn_transitions_exist() {
        let mut allowed = Vec::new();
        for p in PHASES {
            for ev in EVENTS {
                if let Some(t) = p.next(ev, LEN) {
                    allowed.push((p, ev, t));
                }
            }
        }
        let want = [
            (Idle, Ready, Exec),
            (Idle, Wait { r2t: false }, WaitBuf { r2t: false }),
            (Idle, Wait { r2t: true }, WaitBuf { r2t: true }),
            (Idle, R2t, H2C { got: 0 }),
            (WaitBuf { r2t: false }, Budget, Exec),
            (WaitBuf { r2t: true }, R2t, H2C { got: 0 }),
            (H2C { got: 0 }, Data { end: 0 }, H2C { got: 0 }),
            (H2C { got: 0 }, Data { end: 4096 }, H2C { got: 4096 }),
            (H2C { got: 0 }, Data { end: LEN }, Exec),
            (H2C { got: 4096 }, Data { end: 4096 }, H2C { got: 4096 }),
            (H2C { got: 4096 }, Data { end: LEN }, Exec),
        ];
        assert_eq!(allowed, want);
    }

    #[test]
    fn charges_add_up() {
        let mut c = TcpCmd::arrived(1, 512);
        c.charge(512);
        c.charge(512);
        assert_eq!(c.charged(), 1024);
        assert!(!c.bad_digest());
        c.note_bad_digest();
        assert!(c.bad_digest());
    }
}
