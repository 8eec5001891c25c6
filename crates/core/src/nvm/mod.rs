//! NVM commands that take more than one storage request, or wait for
//! another command: Compare and Verify (`compare.rs`), Copy (`copy.rs`) and
//! the fused Compare and Write (`fused.rs`); the per-namespace range
//! exclusion the fused pair needs is `crate::exclusion`.
//!
//! Their state lives here, per command slot ([`NvmState`]), so the queue's
//! slots and the dispatcher stay as they are: `io.rs` hands these commands
//! over at `classify` and `execute`, the dispatcher (`exec.rs`) hands over
//! their storage completions (`stored`), and a command waiting for a range is
//! `Outcome::Held` until [`resume`] runs it again.

mod compare;
mod copy;
mod fused;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_caps;

pub(crate) use crate::exclusion::Range;

use crate::command::{IoCmd, Outcome, Xfer};
use crate::exclusion::{Entry, Exclusion, Tally};
use crate::queue::NvmeQueue;
use farflash_backend::IoBuf;
use farflash_wire::identify as wid;
use farflash_wire::log as wlog;
use farflash_wire::opcode::io as op;
use farflash_wire::{Sqe, Status};
use std::sync::Arc;

/// This module's rows of the I/O command table (`io.rs`): opcode, Commands
/// Supported and Effects (Base §5.16.1.6) and the ONCS bit (Base
/// §5.17.2.1). A new command of this module adds its row here, its arms in
/// [`classify`], [`execute`] and [`stored`], and its file.
pub(crate) const COMMANDS: [(u8, u32, u16); 3] = [
    (op::COMPARE, wlog::CSUPP, wid::ONCS_COMPARE),
    (op::VERIFY, wlog::CSUPP, wid::ONCS_VERIFY),
    (op::COPY, wlog::CSUPP | wlog::LBCC, wid::ONCS_COPY),
];

/// Whether `opcode` is one of this module's commands (`io::classify`
/// hands those over).
pub(crate) const fn runs(opcode: u8) -> bool {
    let mut i = 0;
    while i < COMMANDS.len() {
        if COMMANDS[i].0 == opcode {
            return true;
        }
        i += 1;
    }
    false
}

/// Fills the Identify Namespace fields this module's commands report
/// (`identify.rs` calls it): Copy's MSSRL, MCL and MSRC.
pub(crate) fn identify_namespace(
    ns: &crate::subsystem::Namespace,
    id: &mut farflash_wire::identify::IdNs,
) {
    copy::identify_namespace(ns, id);
}
pub(crate) use fused::{arrive as fused_arrive, failed as fused_failed};

/// How often a queue with commands held for a range looks again.
pub(crate) const HELD_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// A command of this module, parsed once at arrival (see [`IoCmd::Nvm`]).
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

/// What the next storage completion of a command means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
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
enum Admit {
    #[default]
    None,
    Fast,
    Slow(Arc<Exclusion>, u64),
}

/// The state of one command slot's command.
#[derive(Debug, Default)]
struct Run {
    phase: Phase,
    admit: Admit,
    /// A fused pair's range (on the Write half's slot).
    lock: Option<(Arc<Exclusion>, u64)>,
    /// Chunked progress: next source byte, bytes left in this range, next
    /// destination byte, the range index (Copy).
    src: u64,
    left: u64,
    dst: u64,
    range: usize,
    /// Copy: source ranges as (byte offset, bytes).
    ranges: Vec<(u64, u64)>,
    /// Host data set aside while the slot's buffer holds what storage read.
    host: Option<IoBuf>,
    /// Fused: the other half's slot, whether this half's data is in place
    /// (it executed), and the answer it gets when its partner failed.
    partner: Option<u16>,
    ready: bool,
    verdict: Option<Status>,
}

/// Per queue: the runs of its slots, commands held for a range, the first
/// half of a fused pair waiting for its second, and this queue's write tally.
pub(crate) struct NvmState {
    runs: Vec<Run>,
    held: Vec<u16>,
    pending_first: Option<u16>,
    tally: Arc<Tally>,
    joined: Vec<Arc<Exclusion>>,
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
    fn run(&mut self, idx: usize) -> &mut Run {
        if idx >= self.runs.len() {
            self.runs.resize_with(idx + 1, Run::default);
        }
        &mut self.runs[idx]
    }

    /// A first half of a fused pair waits for its second: every command
    /// arriving now goes through `fused::arrive`.
    pub(crate) fn expects_second(&self) -> bool {
        self.pending_first.is_some()
    }

    /// Commands wait for a range: the event loop should call
    /// [`resume`] soon.
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

/// Parses Compare, Verify and Copy (`io::classify` hands them over).
pub(crate) fn classify<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
    ns: usize,
) -> Result<(Xfer, IoCmd), Status> {
    let (x, c) = match sqe.opcode {
        op::COMPARE => compare::classify_compare(q, sqe, ns)?,
        op::VERIFY => compare::classify_verify(q, sqe, ns)?,
        op::COPY => copy::classify(q, sqe, ns)?,
        _ => return Err(Status::INVALID_OPCODE.dnr()),
    };
    Ok((x, IoCmd::Nvm(c)))
}

/// Runs a command of this module (from `io::execute`).
pub(crate) fn execute<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    match cmd {
        NvmCmd::Compare { ns, offset, len } => compare::start_compare(q, idx, ns, offset, len),
        NvmCmd::Verify { ns, offset, len } => compare::start_verify(q, idx, ns, offset, len),
        NvmCmd::Copy { ns, dst, nr, .. } => copy::start(q, idx, ns, dst, nr),
        NvmCmd::Fused { second, .. } => fused::execute(q, idx, second),
    }
}

/// The last storage request of the command in `idx` came back: a plain
/// write leaves its range (`None`: the caller answers it as usual); a
/// command of this module goes on.
pub(crate) fn stored<C: Default>(q: &mut NvmeQueue<C>, idx: usize) -> Option<Outcome> {
    let Some(IoCmd::Nvm(cmd)) = q.slots[idx].cmd.io() else {
        leave(q, idx);
        return None;
    };
    let phase = q.nvm.runs.get(idx).map_or(Phase::Idle, |r| r.phase);
    Some(match phase {
        Phase::Compare => compare::compared(q, idx),
        Phase::Verify => compare::verified(q, idx),
        Phase::CopyRead | Phase::CopyWrite => copy::step(q, idx, cmd),
        Phase::PairRead | Phase::PairWrite | Phase::PairAtomic => fused::step(q, idx, cmd),
        Phase::Idle | Phase::Held | Phase::PairWait => Outcome::Done(q.slots[idx].status, 0),
    })
}

/// A write over `r` of namespace `ns` wants to start (Write, Write Zeroes,
/// Deallocate, Copy): whether it may (false: it is held, and runs again
/// from [`resume`]).
pub(crate) fn admit<C: Default>(q: &mut NvmeQueue<C>, idx: usize, ns: usize, r: Range) -> bool {
    let Some(n) = q.ns.get(ns) else {
        // Gone: the command's submit reports it.
        return true;
    };
    let ex = &n.exclusion;
    if !q.nvm.joined.iter().any(|j| Arc::ptr_eq(j, ex)) {
        join(&mut q.nvm, ex);
    }
    match ex.enter(&q.nvm.tally, r) {
        Entry::Fast => {
            q.nvm.run(idx).admit = Admit::Fast;
            true
        }
        Entry::Slow(id) => {
            let ex = ex.clone();
            q.nvm.run(idx).admit = Admit::Slow(ex, id);
            true
        }
        Entry::Wait => {
            hold(q, idx, Phase::Held);
            false
        }
    }
}

#[cold]
fn join(st: &mut NvmState, ex: &Arc<Exclusion>) {
    ex.join(&st.tally);
    st.joined.push(ex.clone());
}

fn hold<C: Default>(q: &mut NvmeQueue<C>, idx: usize, phase: Phase) {
    q.nvm.run(idx).phase = phase;
    q.nvm.held.push(idx as u16);
}

/// The write in `idx` is done with its range (or never went out).
pub(crate) fn leave<C: Default>(q: &mut NvmeQueue<C>, idx: usize) {
    let Some(r) = q.nvm.runs.get_mut(idx) else {
        return;
    };
    match std::mem::take(&mut r.admit) {
        Admit::None => {}
        Admit::Fast => q.nvm.tally.done(),
        Admit::Slow(ex, id) => ex.leave_slow(id),
    }
}

/// Runs again the commands held for a range; returns whether any left the
/// wait (the event loop calls it with the QoS resumes, see
/// `NvmeQueue::resume_throttled`). A write held for its range goes back to
/// the dispatcher through `admitted`, as a command QoS admitted does (the
/// dispatcher passes itself: this module, below it, does not name it).
pub(crate) fn resume<C: Default>(
    q: &mut NvmeQueue<C>,
    admitted: impl Fn(&mut NvmeQueue<C>, usize),
) -> bool {
    let n = q.nvm.held.len();
    let mut moved = false;
    for _ in 0..n {
        let idx = q.nvm.held.remove(0) as usize;
        let phase = q.nvm.run(idx).phase;
        q.nvm.run(idx).phase = Phase::Idle;
        match phase {
            Phase::Held => admitted(q, idx),
            Phase::PairWait => match fused::proceed(q, idx) {
                Outcome::Done(st, r) => q.complete(idx, st, r),
                Outcome::Held | Outcome::Pending | Outcome::Parked => {}
            },
            _ => continue,
        }
        moved |= !q.nvm.held.contains(&(idx as u16));
    }
    moved
}

/// Takes the slot's buffer of data read by storage (kept because `reply`
/// was set) and stops keeping the next ones.
fn take_read<C: Default>(q: &mut NvmeQueue<C>, idx: usize) -> Option<IoBuf> {
    let s = &mut q.slots[idx];
    s.reply = false;
    s.buf.take()
}
