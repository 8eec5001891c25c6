//! NVM commands that take more than one storage request, or wait for
//! another command: Compare (`compare.rs`), Verify (`verify.rs`), Copy
//! (`copy.rs`) and the fused Compare and Write (`fused.rs`); the
//! per-namespace range exclusion the fused pair needs is
//! `crate::exclusion`.
//!
//! Each command is one row of this module's table ([`Table::ROWS`]: its
//! opcode, effects and ONCS bit, its parser, its runner and its storage
//! continuation) and one file of its own: those, its own steps (an enum of
//! its file, kept as `Phase::Step`) and its tests. Its row is chosen when
//! it is parsed ([`classify`] sets `NvmCmd::run`, as Linux nvmet sets
//! `req->execute`), and [`execute`] and [`stored`] run that row, so
//! nothing else names a command: `io.rs` hands these commands over at
//! `classify` and `execute` (its command table, the effects log and
//! Identify ONCS follow [`COMMANDS`]), the dispatcher (`exec.rs`) hands
//! over their storage completions (`stored`), and a command waiting for a
//! range is `Outcome::Held` until [`resume`] runs it again. Their typed
//! form (`NvmCmd`) and per-slot state (`Run`, `Phase`) are the queue's
//! (`crate::nvm_state`), common to all of them.

mod compare;
mod copy;
mod fused;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_caps;
mod verify;

pub(crate) use crate::exclusion::Range;

use crate::command::{IoCmd, Outcome, Xfer};
use crate::exclusion::{Entry, Exclusion};
use crate::nvm_state::{Admit, NvmCmd, NvmState, Phase};
use crate::queue::NvmeQueue;
use crate::subsystem::Namespace;
use farflash_backend::{IoBuf, IoOp, IoRequest};
use farflash_wire::identify::{self as wid, IdCtrl, IdNs};
use farflash_wire::log as wlog;
use farflash_wire::opcode::io as op;
use farflash_wire::{Sqe, Status};
use std::marker::PhantomData;
use std::sync::Arc;

/// A command's parser: checks it before any data moves (so that a command
/// that will fail never asks for its data), returns the data it moves and
/// its typed form (whose `run` [`classify`] sets).
type Parse<C> = fn(&NvmeQueue<C>, &Sqe, usize) -> Result<(Xfer, NvmCmd), Status>;

/// A command's runner, or its continuation after its storage requests.
type Exec<C> = fn(&mut NvmeQueue<C>, usize, NvmCmd) -> Outcome;

/// One command of this module.
struct Row<C> {
    /// Opcode, Commands Supported and Effects (Base §5.16.1.6) and the
    /// Identify Controller ONCS bit of an optional command (Base
    /// §5.17.2.1): `io.rs`'s command table, the effects log, Identify ONCS
    /// and `io::classify`'s hand-over follow them ([`COMMANDS`]).
    id: (u8, u32, u16),
    /// The Identify Controller fields it reports, if any (Copy's OCFS).
    id_ctrl: Option<fn(&mut IdCtrl)>,
    /// The Identify Namespace fields it reports, if any (Copy's limits).
    id_ns: Option<fn(&Namespace, &mut IdNs)>,
    parse: Parse<C>,
    /// Runs it once its data is in place (`io::execute`).
    execute: Exec<C>,
    /// The last of its storage requests came back while it was in a step of
    /// its own (`Phase::Step`).
    stored: Exec<C>,
}

/// This module's command table (generic over the transport's per-command
/// state `C`, as the queue is: `Table::<C>::ROWS`).
struct Table<C>(PhantomData<C>);

impl<C: Default> Table<C> {
    /// One row per command, found by its `NvmCmd::run` (its index here). A
    /// new command adds its row here and its file (with its parser, runner,
    /// steps and tests); nothing else of the command layer changes while
    /// its per-slot progress fits `Run`'s fields (`crate::nvm_state`). Its
    /// opcode and any ONCS bit or Identify field are `farflash_wire`'s.
    const ROWS: [Row<C>; 3] = [
        Row {
            id: (op::COMPARE, wlog::CSUPP, wid::ONCS_COMPARE),
            id_ctrl: None,
            id_ns: None,
            parse: compare::parse,
            execute: compare::start,
            stored: compare::stored,
        },
        Row {
            id: (op::VERIFY, wlog::CSUPP, wid::ONCS_VERIFY),
            id_ctrl: None,
            id_ns: None,
            parse: verify::parse,
            execute: verify::start,
            stored: verify::stored,
        },
        Row {
            id: (op::COPY, wlog::CSUPP | wlog::LBCC, wid::ONCS_COPY),
            id_ctrl: Some(copy::identify_controller),
            id_ns: Some(copy::identify_namespace),
            parse: copy::parse,
            execute: copy::start,
            stored: copy::stored,
        },
    ];
}

/// The table's parts that do not depend on `C`, read through `Table<()>`.
type Rows = Table<()>;

/// The `NvmCmd::run` of a fused pair's halves (`fused.rs`): no row, as the
/// pair has no opcode of its own (FUSE bits on a Compare and a Write).
const FUSED: u8 = u8::MAX;
const _: () = assert!(Rows::ROWS.len() < FUSED as usize);

/// This module's rows of the I/O command table (`io.rs`): opcode, Commands
/// Supported and Effects and the ONCS bit.
pub(crate) const COMMANDS: [(u8, u32, u16); Rows::ROWS.len()] = {
    let mut all = [(0, 0, 0); Rows::ROWS.len()];
    let mut i = 0;
    while i < all.len() {
        all[i] = Rows::ROWS[i].id;
        i += 1;
    }
    all
};

/// The row of the command with `opcode`.
const fn row_of(opcode: u8) -> Option<usize> {
    let mut i = 0;
    while i < COMMANDS.len() {
        if COMMANDS[i].0 == opcode {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Whether `opcode` is one of this module's commands (`io::classify`
/// hands those over).
pub(crate) const fn runs(opcode: u8) -> bool {
    row_of(opcode).is_some()
}

/// Fills the Identify Controller fields this module's commands report
/// (`identify.rs` calls it): Copy's OCFS.
pub(crate) fn identify_controller(id: &mut IdCtrl) {
    for r in &Rows::ROWS {
        if let Some(f) = r.id_ctrl {
            f(id);
        }
    }
}

/// Fills the Identify Namespace fields this module's commands report
/// (`identify.rs` calls it): Copy's MSSRL, MCL and MSRC.
pub(crate) fn identify_namespace(ns: &Namespace, id: &mut IdNs) {
    for r in &Rows::ROWS {
        if let Some(f) = r.id_ns {
            f(ns, id);
        }
    }
}
pub(crate) use fused::{arrive as fused_arrive, failed as fused_failed};

/// Parses a command of this module (`io::classify` hands them over) and
/// chooses its row.
pub(crate) fn classify<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
    ns: usize,
) -> Result<(Xfer, IoCmd), Status> {
    let Some(i) = row_of(sqe.opcode) else {
        return Err(Status::INVALID_OPCODE.dnr());
    };
    let parse = Table::<C>::ROWS[i].parse;
    let (x, mut c) = parse(q, sqe, ns)?;
    c.run = i as u8;
    Ok((x, IoCmd::Nvm(c)))
}

/// The runner of `cmd` and its storage continuation, chosen when it was
/// parsed.
fn runner<C: Default>(cmd: NvmCmd) -> (Exec<C>, Exec<C>) {
    if cmd.run == FUSED {
        return (fused::execute, fused::step);
    }
    match Table::<C>::ROWS.get(usize::from(cmd.run)) {
        Some(r) => (r.execute, r.stored),
        // Not set by `classify` (a bug).
        None => (lost, lost),
    }
}

fn lost<C: Default>(_: &mut NvmeQueue<C>, _: usize, _: NvmCmd) -> Outcome {
    Outcome::Done(Status::INTERNAL_ERROR, 0)
}

/// Runs a command of this module (from `io::execute`).
pub(crate) fn execute<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    (runner(cmd).0)(q, idx, cmd)
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
        Phase::Step(_) => (runner(cmd).1)(q, idx, cmd),
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

/// Checks a command that reads namespace `ns` against its reservations.
fn read_access<C: Default>(q: &NvmeQueue<C>, ns: usize) -> Result<(), Status> {
    if !q.blocks.resv_block.is_empty() {
        crate::resv_cmd::check_access(q, ns, false)?;
    }
    Ok(())
}

/// A read of `len` bytes at `offset` for the command in `idx`; `keep`: the
/// slot keeps the data (`reply`, cleared before it answers).
fn read<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ns: usize,
    offset: u64,
    len: u32,
    keep: bool,
) -> Outcome {
    let buf = q.pool.get(len as usize);
    q.slots[idx].reply = keep;
    let req = IoRequest {
        tag: idx as u64,
        op: IoOp::Read { offset, len },
        buf,
    };
    match q.submit(idx, ns, req) {
        Ok(()) => Outcome::Pending,
        Err(st) => {
            q.slots[idx].reply = false;
            Outcome::Done(st, 0)
        }
    }
}
