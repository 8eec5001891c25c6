//! Compare (NVM Command Set §3.2.1) and Verify (§3.2.8): storage reads the
//! range; Compare checks it against the host's data (Compare Failure when
//! it differs), Verify only that it reads (no data moves; read in chunks of
//! the largest transfer, one at a time).

use super::{take_read, NvmCmd, Phase};
use crate::command::{Outcome, Xfer};
use crate::queue::NvmeQueue;
use farflash_backend::{IoOp, IoRequest};
use farflash_wire::{Sqe, Status};

fn read_access<C: Default>(q: &NvmeQueue<C>, ns: usize) -> Result<(), Status> {
    if !q.blocks.resv_block.is_empty() {
        crate::resv_cmd::check_access(q, ns, false)?;
    }
    Ok(())
}

pub(super) fn classify_compare<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
    ns: usize,
) -> Result<(Xfer, NvmCmd), Status> {
    read_access(q, ns)?;
    let (offset, len) = q.ns.lba_range(ns, sqe.slba(), sqe.nlb() as u64 + 1)?;
    if len > q.target.transport.max_io_size as u64 {
        // Base §5.17.2.1 MDTS bounds every data transfer.
        return Err(Status::INVALID_FIELD.dnr());
    }
    let len = len as u32;
    Ok((Xfer::H2C(len), NvmCmd::Compare { ns, offset, len }))
}

pub(super) fn classify_verify<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
    ns: usize,
) -> Result<(Xfer, NvmCmd), Status> {
    read_access(q, ns)?;
    // No data moves, so MDTS does not apply; VSL (Identify Controller, I/O
    // command set specific) is not reported: no limit below the 16-bit NLB.
    let (offset, len) = q.ns.lba_range(ns, sqe.slba(), sqe.nlb() as u64 + 1)?;
    Ok((Xfer::None, NvmCmd::Verify { ns, offset, len }))
}

/// Reads the range into a buffer the slot keeps; the host's data waits aside.
pub(super) fn start_compare<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ns: usize,
    offset: u64,
    len: u32,
) -> Outcome {
    let Some(host) = q.slots[idx].buf.take() else {
        return Outcome::Done(Status::INTERNAL_ERROR, 0);
    };
    q.nvm.run(idx).host = Some(host);
    q.nvm.run(idx).phase = Phase::Compare;
    read(q, idx, ns, offset, len, true)
}

/// A read of `len` bytes at `offset` for the command in `idx`; `keep`: the
/// slot keeps the data (`reply`, cleared before it answers).
pub(super) fn read<C: Default>(
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

pub(super) fn compared<C: Default>(q: &mut NvmeQueue<C>, idx: usize) -> Outcome {
    let read = take_read(q, idx);
    let host = q.nvm.run(idx).host.take();
    q.nvm.run(idx).phase = Phase::Idle;
    let st = q.slots[idx].status;
    let same = match (&read, &host) {
        (Some(r), Some(h)) => r.as_slice() == h.as_slice(),
        _ => false,
    };
    for b in [read, host].into_iter().flatten() {
        q.pool.put(b);
    }
    Outcome::Done(verdict(st, same), 0)
}

/// A storage error first; then Compare Failure (Media and Data Integrity
/// Errors, 85h) when the data differ.
pub(super) fn verdict(read: Status, same: bool) -> Status {
    if !read.is_success() {
        read
    } else if same {
        Status::SUCCESS
    } else {
        Status::COMPARE_FAILURE
    }
}

pub(super) fn start_verify<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ns: usize,
    offset: u64,
    len: u64,
) -> Outcome {
    let r = q.nvm.run(idx);
    r.src = offset;
    r.left = len;
    r.phase = Phase::Verify;
    next_verify(q, idx, ns)
}

fn next_verify<C: Default>(q: &mut NvmeQueue<C>, idx: usize, ns: usize) -> Outcome {
    let chunk = q.target.transport.max_io_size as u64;
    let r = q.nvm.run(idx);
    let n = r.left.min(chunk);
    let offset = r.src;
    r.src += n;
    r.left -= n;
    read(q, idx, ns, offset, n as u32, false)
}

pub(super) fn verified<C: Default>(q: &mut NvmeQueue<C>, idx: usize) -> Outcome {
    let st = q.slots[idx].status;
    let Some(super::IoCmd::Nvm(NvmCmd::Verify { ns, .. })) = q.slots[idx].cmd.io() else {
        return Outcome::Done(Status::INTERNAL_ERROR, 0);
    };
    if !st.is_success() || q.nvm.run(idx).left == 0 {
        q.nvm.run(idx).phase = Phase::Idle;
        return Outcome::Done(st, 0);
    }
    next_verify(q, idx, ns)
}
