//! NVM commands that take more than one storage request, or wait for
//! another command: Compare and Verify (`compare.rs`), Copy (`copy.rs`) and
//! the fused Compare and Write (`fused.rs`); the per-namespace range
//! exclusion the fused pair needs is `crate::exclusion`.
//!
//! Their state, per command slot, is the queue's `nvm` field
//! (`crate::nvm_state`), so the queue's slots and the dispatcher stay as
//! they are: `io.rs` hands these commands over at `classify` and `execute`,
//! the dispatcher (`exec.rs`) hands over their storage completions
//! (`stored`), and a command waiting for a range is `Outcome::Held` until
//! [`resume`] runs it again. Their typed form (`NvmCmd`) is there too.

mod compare;
mod copy;
mod fused;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_caps;

pub(crate) use crate::exclusion::Range;

use crate::command::{IoCmd, Outcome, Xfer};
use crate::exclusion::{Entry, Exclusion};
use crate::nvm_state::{Admit, NvmCmd, NvmState, Phase};
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
/// [`classify`], [`execute`] and [`stored`], its variant of `NvmCmd` (and
/// its `Phase`s, `crate::nvm_state`), and its file.
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
