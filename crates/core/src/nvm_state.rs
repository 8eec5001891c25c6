//! What the queue keeps of the NVM commands that take more than one
//! storage request or wait for another command (Compare, Verify, Copy, the
//! fused Compare and Write; they run in `crate::nvm`): their typed form
//! ([`NvmCmd`], in the command's slot as `IoCmd::Nvm`) and their per-queue
//! state ([`NvmState`], the queue's `nvm` field): what each slot's command
//! is doing ([`Run`], its [`Phase`]), the commands held for a range, and
//! the queue's part in the namespaces' range exclusion (`crate::exclusion`).
//!
//! It sits below the queue, which holds it, and below `crate::nvm`, which
//! runs on the queue and alone changes it. A queue going away lets go of
//! every range its commands held (`Drop`).

use crate::exclusion::{Exclusion, Tally};
use farflash_backend::IoBuf;
use farflash_wire::Status;
use std::sync::Arc;

/// A command of `crate::nvm`, parsed once at arrival and kept in its slot
/// as `IoCmd::Nvm` (`crate::command`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NvmCmd {
    /// Compare (NVM Command Set §3.2.1): `len` bytes of host data.
    Compare { ns: usize, offset: u64, len: u32 },
    /// Verify (NVM Command Set §3.2.8): read `len` bytes, move none.
    Verify { ns: usize, offset: u64, len: u64 },
    /// Copy (NVM Command Set §3.2.2): `nr` source ranges of format 0 in
    /// the host data, to the byte offset `dst`.
    Copy {
        ns: usize,
        dst: u64,
        nr: u32,
        fua: bool,
    },
    /// One half of a fused Compare and Write (Base §3.4.2): the Compare
    /// (`second: false`) or the Write.
    Fused {
        ns: usize,
        offset: u64,
        len: u32,
        second: bool,
        fua: bool,
    },
}

impl NvmCmd {
    /// For QoS: (is a write, bytes moved by the host).
    pub(crate) fn cost(self) -> (bool, u64) {
        match self {
            NvmCmd::Compare { len, .. } => (false, len as u64),
            NvmCmd::Verify { .. } => (false, 0),
            NvmCmd::Copy { .. } => (true, 0),
            NvmCmd::Fused { len, second, .. } => (second, len as u64),
        }
    }

    pub(crate) fn writes(self) -> bool {
        matches!(
            self,
            NvmCmd::Copy { .. } | NvmCmd::Fused { second: true, .. }
        )
    }
}

/// How often a queue with commands held for a range looks again.
pub(crate) const HELD_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// What the next storage completion of a command means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Phase {
    #[default]
    Idle,
    /// Waiting in [`NvmState::held`] for a range (a write, or a Copy).
    Held,
    /// A fused pair waiting in `held` for its range to be granted.
    PairWait,
    Compare,
    Verify,
    CopyRead,
    CopyWrite,
    PairRead,
    PairWrite,
    /// A fused pair run by storage as one compare-and-write.
    PairAtomic,
}

/// How a write got into its namespace's range exclusion.
#[derive(Debug, Default)]
pub(crate) enum Admit {
    #[default]
    None,
    Fast,
    Slow(Arc<Exclusion>, u64),
}

/// The state of one command slot's command.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) phase: Phase,
    pub(crate) admit: Admit,
    /// A fused pair's range (on the Write half's slot).
    pub(crate) lock: Option<(Arc<Exclusion>, u64)>,
    /// Chunked progress: next source byte, bytes left in this range, next
    /// destination byte, the range index (Copy).
    pub(crate) src: u64,
    pub(crate) left: u64,
    pub(crate) dst: u64,
    pub(crate) range: usize,
    /// Copy: source ranges as (byte offset, bytes).
    pub(crate) ranges: Vec<(u64, u64)>,
    /// Host data set aside while the slot's buffer holds what storage read.
    pub(crate) host: Option<IoBuf>,
    /// Fused: the other half's slot, whether this half's data is in place
    /// (it executed), and the answer it gets when its partner failed.
    pub(crate) partner: Option<u16>,
    pub(crate) ready: bool,
    pub(crate) verdict: Option<Status>,
}

/// Per queue: the runs of its slots, commands held for a range, the first
/// half of a fused pair waiting for its second, and this queue's write tally.
pub(crate) struct NvmState {
    /// By command slot (grown on first use, [`NvmState::run`]).
    pub(crate) runs: Vec<Run>,
    /// Slots of the commands held for a range, oldest first
    /// ([`Phase::Held`], [`Phase::PairWait`]).
    pub(crate) held: Vec<u16>,
    /// The first half of a fused pair, waiting for its second.
    pub(crate) pending_first: Option<u16>,
    /// This queue's fast-path writes in flight (`crate::exclusion`).
    pub(crate) tally: Arc<Tally>,
    /// The namespaces' exclusions this queue's tally has joined.
    pub(crate) joined: Vec<Arc<Exclusion>>,
}

impl Default for NvmState {
    fn default() -> Self {
        NvmState {
            runs: Vec::new(),
            held: Vec::new(),
            pending_first: None,
            tally: Arc::new(Tally::default()),
            joined: Vec::new(),
        }
    }
}

impl NvmState {
    /// The run of the command in slot `idx` (grown on first use).
    pub(crate) fn run(&mut self, idx: usize) -> &mut Run {
        if idx >= self.runs.len() {
            self.runs.resize_with(idx + 1, Run::default);
        }
        &mut self.runs[idx]
    }

    /// A first half of a fused pair waits for its second: every command
    /// arriving now goes through `nvm::fused_arrive`.
    pub(crate) fn expects_second(&self) -> bool {
        self.pending_first.is_some()
    }

    /// Commands wait for a range: the event loop should call
    /// `NvmeQueue::resume_throttled` soon.
    pub(crate) fn has_held(&self) -> bool {
        !self.held.is_empty()
    }
}

impl Drop for NvmState {
    /// A queue going away lets go of every range its commands held.
    fn drop(&mut self) {
        for r in &mut self.runs {
            if let Some((ex, id)) = r.lock.take() {
                ex.release(id);
            }
            if let Admit::Slow(ex, id) = std::mem::take(&mut r.admit) {
                ex.leave_slow(id);
            }
        }
    }
}
