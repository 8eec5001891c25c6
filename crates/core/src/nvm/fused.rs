//! The fused Compare and Write (Base §3.4.2 "Fused Operations"; NVM
//! Command Set §3.2.1 and §3.2.6): a Compare with FUSE 01b followed, next
//! in the same submission queue, by a Write with FUSE 10b over the same
//! LBA range. The pair runs once both halves' data are in place, holding
//! its range in the namespace's [`crate::exclusion::Exclusion`] from before the read
//! until after the write, so no other write of any queue or controller
//! lands in between: both halves happen, or (the data differ: Compare
//! Failure, and the Write is Command Aborted due to Failed Fused Command)
//! neither writes. The Write half's slot runs the pair; the Compare half's
//! slot is held and answered with it.
//!
//! Storage that runs a compare-and-write itself
//! ([`farflash_backend::Backend::compare_and_write_unit`]: an RBD image,
//! whose OSD compares and writes in one operation, atomic against every
//! gateway of the image) gets the pair as one [`IoOp::CompareAndWrite`]
//! when the range fits its unit, still under the range exclusion; its
//! miscompare (`EILSEQ`, Compare Failure) is answered as ours. Other pairs,
//! and every pair on other storage, read, compare and write here
//! (docs/rbd.md, "Fused Compare and Write").
//!
//! Refusals (docs/interop.md, "Fused operations"): FUSE 11b, or a first
//! half that is not a Compare, or a second that is not a Write: Invalid
//! Field in Command; a second half with no first before it: Command Aborted
//! due to Missing Fused Command (as SPDK; Linux nvmet supports no fused
//! operation and answers Invalid Field); a first half followed by anything
//! but its second: the first is aborted with Missing Fused Command and the
//! other command runs; halves over different ranges: Invalid Field for the
//! Compare, Failed Fused Command for the Write (as SPDK).

use super::{compare, hold, read, take_read, NvmCmd, Phase, Range, FUSED};
use crate::command::{Cmd, IoCmd, Outcome, Xfer};
use crate::queue::NvmeQueue;
use farflash_backend::{IoBuf, IoOp, IoRequest};
use farflash_wire::opcode::io as op;
use farflash_wire::{Sqe, Status};

/// The pair's steps, on the Write half's slot: what its next storage
/// completion means. Once its range is granted (`proceed`, after
/// `Phase::PairWait` if it had to wait), the pair is either read (`Read`),
/// compared and written (`Write`), or handed to storage whole (`Atomic`);
/// the write's or storage's answer, or a failure, ends it (`finish`:
/// `Phase::Idle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read,
    Write,
    Atomic,
}

impl From<Step> for Phase {
    fn from(s: Step) -> Phase {
        Phase::Step(s as u8)
    }
}

impl Step {
    fn of(p: Phase) -> Option<Step> {
        match p {
            Phase::Step(n) if n == Step::Read as u8 => Some(Step::Read),
            Phase::Step(n) if n == Step::Write as u8 => Some(Step::Write),
            Phase::Step(n) if n == Step::Atomic as u8 => Some(Step::Atomic),
            _ => None,
        }
    }
}

/// A half of the pair over `len` bytes at `offset`: the Compare (`second:
/// false`) or the Write. QoS charges each its data; the SMART log counts
/// the Write half as a write and the Compare half not at all; storage's
/// miscompare of the offloaded pair is Compare Failure.
fn half(ns: usize, offset: u64, len: u32, second: bool, fua: bool) -> NvmCmd {
    NvmCmd {
        run: FUSED,
        ns,
        offset,
        len: u64::from(len),
        second,
        fua,
        writes: second,
        moves: true,
        counted: second,
        compares: true,
        ..NvmCmd::default()
    }
}

/// The fused half a slot's command is, if it is one.
fn half_of(cmd: Cmd) -> Option<NvmCmd> {
    match cmd.io() {
        Some(IoCmd::Nvm(c)) if c.run == FUSED => Some(c),
        _ => None,
    }
}

/// CDW0 FUSE (Base §4.2): 01b first half, 10b second half, 11b reserved.
const FUSE_MASK: u8 = 0x03;
const FUSE_FIRST: u8 = 0x01;
const FUSE_SECOND: u8 = 0x02;

/// A command arrived on an I/O queue with FUSE bits set, or while a first
/// half waits for its second; `r` is what `io::classify` made of it.
pub(crate) fn arrive<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    sqe: &Sqe,
    r: Result<(Xfer, Cmd), Status>,
) -> Result<(Xfer, Cmd), Status> {
    let fuse = sqe.flags & FUSE_MASK;
    let first = q.nvm.pending_first.take().map(usize::from);
    let run = q.nvm.run(idx);
    (run.partner, run.ready, run.verdict) = (None, false, None);
    if fuse == FUSE_SECOND {
        return second(q, idx, sqe, r, first);
    }
    if let Some(f) = first {
        // Base §3.4.2: the halves are adjacent in the SQ; this one is not
        // the second, so the first will never have one.
        orphan(q, f, Status::FUSED_MISSING);
    }
    match fuse {
        0 => r,
        FUSE_FIRST if sqe.opcode == op::COMPARE => {
            let (x, cmd) = r?;
            // `io::classify` parsed a Compare (its opcode is checked above).
            let Cmd::Io(IoCmd::Nvm(c)) = cmd else {
                return Err(Status::INVALID_FIELD.dnr());
            };
            q.nvm.pending_first = Some(idx as u16);
            let first = half(c.ns, c.offset, c.len as u32, false, false);
            Ok((x, Cmd::Io(IoCmd::Nvm(first))))
        }
        // A first half that is not a Compare, and FUSE 11b (reserved).
        _ => Err(Status::INVALID_FIELD.dnr()),
    }
}

fn second<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    sqe: &Sqe,
    r: Result<(Xfer, Cmd), Status>,
    first: Option<usize>,
) -> Result<(Xfer, Cmd), Status> {
    if sqe.opcode != op::WRITE {
        // Not a second half: the first misses its second (as SPDK).
        if let Some(f) = first {
            orphan(q, f, Status::FUSED_MISSING);
        }
        return Err(Status::INVALID_FIELD.dnr());
    }
    let Some(f) = first else {
        // Base §3.4.2 / SPDK: a second half alone.
        return Err(r.err().unwrap_or(Status::FUSED_MISSING));
    };
    let (x, cmd) = match r {
        Ok(v) => v,
        Err(st) => {
            orphan(q, f, Status::FUSED_FAILED);
            return Err(st);
        }
    };
    let first_range = half_of(q.slots[f].cmd).map(|c| (c.ns, c.offset, c.len as u32));
    match cmd {
        Cmd::Io(IoCmd::Write {
            ns,
            offset,
            len,
            fua,
        }) if first_range == Some((ns, offset, len)) => {
            q.nvm.run(f).partner = Some(idx as u16);
            q.nvm.run(idx).partner = Some(f as u16);
            let second = half(ns, offset, len, true, fua);
            Ok((x, Cmd::Io(IoCmd::Nvm(second))))
        }
        _ => {
            // NVM Command Set §3.2.1: the two halves name the same LBA
            // range. As SPDK: Invalid Field for the Compare, Failed Fused
            // Command for the Write.
            orphan(q, f, Status::INVALID_FIELD.dnr());
            Err(Status::FUSED_FAILED)
        }
    }
}

/// The half in `f` loses its partner: answered with `st` now if it is
/// already held, else when it runs.
fn orphan<C: Default>(q: &mut NvmeQueue<C>, f: usize, st: Status) {
    let r = q.nvm.run(f);
    r.partner = None;
    if r.ready {
        r.ready = false;
        q.complete(f, st, 0);
    } else {
        r.verdict = Some(st);
    }
}

/// The binding failed the command in `idx` before it ran (its data was
/// bad): a fused partner cannot run either.
pub(crate) fn failed<C: Default>(q: &mut NvmeQueue<C>, idx: usize) {
    if q.nvm.pending_first == Some(idx as u16) {
        q.nvm.pending_first = None;
    }
    let partner = q.nvm.runs.get_mut(idx).and_then(|r| r.partner.take());
    if let Some(p) = partner {
        orphan(q, p as usize, Status::FUSED_FAILED);
    }
}

/// One half's data is in place: the pair starts once both are.
pub(super) fn execute<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    let r = q.nvm.run(idx);
    if let Some(st) = r.verdict.take() {
        return Outcome::Done(st, 0);
    }
    r.ready = true;
    let Some(p) = r.partner.map(usize::from) else {
        // A first half whose second has not arrived yet.
        return Outcome::Held;
    };
    if !q.nvm.run(p).ready {
        return Outcome::Held;
    }
    if cmd.second {
        return start(q, idx);
    }
    // The first half came last: the Write half's slot runs the pair.
    if let Outcome::Done(st, res) = start(q, p) {
        q.complete(p, st, res);
    }
    Outcome::Held
}

fn start<C: Default>(q: &mut NvmeQueue<C>, w: usize) -> Outcome {
    let Some(c) = half_of(q.slots[w].cmd) else {
        return finish(q, w, Status::INTERNAL_ERROR, Status::INTERNAL_ERROR);
    };
    let Some(ex) = q.ns.get(c.ns).map(|n| n.exclusion.clone()) else {
        let gone = Status::INVALID_NAMESPACE.dnr();
        return finish(q, w, gone, Status::FUSED_FAILED);
    };
    let id = ex.request(Range::new(c.offset, c.len));
    q.nvm.run(w).lock = Some((ex, id));
    proceed(q, w)
}

/// Reads the range once it is the pair's (else waits in `held`).
pub(super) fn proceed<C: Default>(q: &mut NvmeQueue<C>, w: usize) -> Outcome {
    let granted = q
        .nvm
        .run(w)
        .lock
        .as_ref()
        .is_some_and(|(ex, id)| ex.grant(*id));
    if !granted {
        hold(q, w, Phase::PairWait);
        return Outcome::Held;
    }
    let Some(c) = half_of(q.slots[w].cmd) else {
        return finish(q, w, Status::INTERNAL_ERROR, Status::INTERNAL_ERROR);
    };
    let (ns, offset, len) = (c.ns, c.offset, c.len as u32);
    let host = q.slots[w].buf.take();
    if offloads(q, ns, offset, len) {
        return offload(q, w, host);
    }
    let r = q.nvm.run(w);
    r.host = host;
    r.phase = Step::Read.into();
    match read(q, w, ns, offset, len, true) {
        Outcome::Done(st, _) => finish(q, w, st, Status::FUSED_FAILED),
        o => o,
    }
}

/// Whether namespace `ns`'s storage runs the pair over `offset..+len` itself.
fn offloads<C: Default>(q: &NvmeQueue<C>, ns: usize, offset: u64, len: u32) -> bool {
    let unit =
        q.ns.get(ns)
            .and_then(|n| n.backend.compare_and_write_unit());
    unit.is_some_and(|u| offset % u64::from(u) + u64::from(len) <= u64::from(u))
}

/// Hands the pair to storage: the Compare half's data, then the Write
/// half's (`host`), in one buffer.
fn offload<C: Default>(q: &mut NvmeQueue<C>, w: usize, host: Option<IoBuf>) -> Outcome {
    let Some(c) = half_of(q.slots[w].cmd) else {
        return finish(q, w, Status::INTERNAL_ERROR, Status::INTERNAL_ERROR);
    };
    let (ns, offset, len, fua) = (c.ns, c.offset, c.len as u32, c.fua);
    let n = len as usize;
    let p = q.nvm.run(w).partner.map(usize::from);
    let cmp = p.and_then(|p| q.slots[p].buf.as_ref());
    let (Some(host), Some(cmp)) = (host, cmp) else {
        return finish(q, w, Status::FUSED_FAILED, Status::INTERNAL_ERROR);
    };
    if cmp.len() < n || host.len() < n {
        q.pool.put(host);
        return finish(q, w, Status::FUSED_FAILED, Status::INTERNAL_ERROR);
    }
    let mut buf = q.pool.get(2 * n);
    let both = buf.as_mut_slice();
    both[..n].copy_from_slice(&cmp.as_slice()[..n]);
    both[n..].copy_from_slice(&host.as_slice()[..n]);
    q.pool.put(host);
    q.nvm.run(w).phase = Step::Atomic.into();
    let req = IoRequest {
        tag: w as u64,
        op: IoOp::CompareAndWrite { offset, len, fua },
        buf,
    };
    match q.submit(w, ns, req) {
        Ok(()) => Outcome::Pending,
        Err(e) => finish(q, w, Status::FUSED_FAILED, e),
    }
}

/// The pair's read or write came back.
pub(super) fn step<C: Default>(q: &mut NvmeQueue<C>, w: usize, cmd: NvmCmd) -> Outcome {
    let st = q.slots[w].status;
    let step = Step::of(q.nvm.run(w).phase);
    if step == Some(Step::Atomic) {
        // As below: a miscompare fails the Compare with Compare Failure and
        // the Write with Failed Fused Command; a storage error fails the
        // Write and the Compare with Failed Fused Command.
        let (first, second) = if st.is_success() {
            (Status::SUCCESS, st)
        } else if st == Status::COMPARE_FAILURE {
            (st, Status::FUSED_FAILED)
        } else {
            (Status::FUSED_FAILED, st)
        };
        return finish(q, w, first, second);
    }
    if step == Some(Step::Write) {
        let first = if st.is_success() {
            Status::SUCCESS
        } else {
            Status::FUSED_FAILED
        };
        return finish(q, w, first, st);
    }
    let read = take_read(q, w);
    let p = q.nvm.run(w).partner.map(usize::from);
    let same = match (&read, p.and_then(|p| q.slots[p].buf.as_ref())) {
        (Some(r), Some(c)) => r.as_slice() == c.as_slice(),
        _ => false,
    };
    if let Some(b) = read {
        q.pool.put(b);
    }
    let verdict = compare::verdict(st, same);
    if !verdict.is_success() {
        return finish(q, w, verdict, Status::FUSED_FAILED);
    }
    let Some(buf) = q.nvm.run(w).host.take() else {
        return finish(q, w, Status::FUSED_FAILED, Status::INTERNAL_ERROR);
    };
    q.nvm.run(w).phase = Step::Write.into();
    let (offset, len, fua) = (cmd.offset, cmd.len as u32, cmd.fua);
    let req = IoRequest {
        tag: w as u64,
        op: IoOp::Write { offset, len, fua },
        buf,
    };
    match q.submit(w, cmd.ns, req) {
        Ok(()) => Outcome::Pending,
        Err(e) => finish(q, w, Status::FUSED_FAILED, e),
    }
}

/// The pair is over: its range is free, the Compare half is answered with
/// `first`, and the Write half's answer is returned.
fn finish<C: Default>(q: &mut NvmeQueue<C>, w: usize, first: Status, second: Status) -> Outcome {
    q.slots[w].reply = false;
    let r = q.nvm.run(w);
    r.phase = Phase::Idle;
    let lock = r.lock.take();
    let host = r.host.take();
    let p = r.partner.take().map(usize::from);
    if let Some((ex, id)) = lock {
        ex.release(id);
    }
    if let Some(b) = host {
        q.pool.put(b);
    }
    if let Some(p) = p {
        let r = q.nvm.run(p);
        (r.partner, r.ready) = (None, false);
        q.complete(p, first, 0);
    }
    q.nvm.run(w).ready = false;
    Outcome::Done(second, 0)
}
