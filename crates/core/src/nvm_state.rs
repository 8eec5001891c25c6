//! What the queue keeps of the NVM commands that take more than one
//! storage request or wait for another command (Compare, Verify, Copy, the
//! fused Compare and Write; they run in `crate::nvm`): their typed form
//! ([`NvmCmd`], in the command's slot as `IoCmd::Nvm`) and their per-queue
//! state ([`NvmState`], the queue's `nvm` field): what each slot's command
//! is doing ([`Run`], its [`Phase`]), the commands held for a range, and
//! the queue's part in the namespaces' range exclusion (`crate::exclusion`).
//!
//! It sits below the queue, which holds it, and below `crate::nvm`, which
//! runs on the queue and alone changes it. It names no command of
//! `crate::nvm`: a command's runner, its own steps and what its fields
//! mean are in its own file there. A queue going away lets go of every
//! range its commands held (`Drop`).

use crate::exclusion::{Exclusion, Tally};
use farflash_backend::IoBuf;
use farflash_wire::Status;
use std::sync::Arc;

/// A command of `crate::nvm`, parsed once at arrival and kept in its slot
/// as `IoCmd::Nvm` (`crate::command`): which of that module's commands runs
/// it, chosen when it is parsed (as Linux nvmet sets `req->execute`), and
/// what its parser read, in fields common to all of them (as nvmet keeps a
/// command's data in its `struct nvmet_req`). What a field means to a
/// command is that command's own business (its file in `crate::nvm`); what
/// the rest of the command layer needs of it (QoS, the SMART log, range
/// exclusion, write faults) its parser decides in `writes`, `moves`,
/// `counted` and `compares`, so a new command changes nothing here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NvmCmd {
    /// Its runner in `crate::nvm`: the index of its row in that module's
    /// command table, or its fused pair's (set at parse time).
    pub(crate) run: u8,
    pub(crate) ns: usize,
    /// Byte offset of the range it works on (Copy: its destination).
    pub(crate) offset: u64,
    /// Bytes of that range (Copy: none; its ranges are in its data).
    pub(crate) len: u64,
    /// A count its parser read (Copy: its source ranges, at most 128).
    pub(crate) nr: u8,
    /// Force Unit Access, or the namespace writes through.
    pub(crate) fua: bool,
    /// The second (Write) half of a fused pair.
    pub(crate) second: bool,
    /// It writes the medium: QoS's write class, a write's range exclusion,
    /// an EIO is a Write Fault, write protection refuses it.
    pub(crate) writes: bool,
    /// The host moves `len` bytes of data for it (QoS charges them).
    pub(crate) moves: bool,
    /// The SMART log counts it (Base §5.16.1.3): a read, or a write if
    /// `writes`, of `len` bytes.
    pub(crate) counted: bool,
    /// Storage compares for it (`IoOp::CompareAndWrite`): an `EILSEQ` is
    /// Compare Failure, not a media error.
    pub(crate) compares: bool,
}

impl NvmCmd {
    /// For QoS: (is a write, bytes moved by the host).
    pub(crate) fn cost(self) -> (bool, u64) {
        (self.writes, if self.moves { self.len } else { 0 })
    }

    pub(crate) fn writes(self) -> bool {
        self.writes
    }

    /// For the SMART log: `Some((is_write, bytes))` if it counts.
    pub(crate) fn counted(self) -> Option<(bool, u32)> {
        self.counted.then_some((self.writes, self.len as u32))
    }
}

/// How often a queue with commands held for a range looks again.
pub(crate) const HELD_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// What the next storage completion of a command means, or what it waits
/// for. The steps every command shares are here; a command's own steps are
/// `Step(n)`, where `n` is a step of that command's own enum, in its file
/// (e.g. `nvm/copy.rs`'s `Step::{Read, Write}`), which alone defines them,
/// converts them (`From<Step> for Phase`, `Step::of`) and moves between
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Phase {
    #[default]
    Idle,
    /// Waiting in [`NvmState::held`] for a range (a write, or a Copy).
    Held,
    /// A fused pair waiting in `held` for its range to be granted.
    PairWait,
    /// A step of the command's own: its storage requests are out, and its
    /// runner's `stored` takes their completion.
    Step(u8),
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
    /// destination byte, the index in `ranges` (Verify uses the first two).
    pub(crate) src: u64,
    pub(crate) left: u64,
    pub(crate) dst: u64,
    pub(crate) range: usize,
    /// Ranges a command works through in turn, as (byte offset, bytes)
    /// (Copy: its sources).
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
