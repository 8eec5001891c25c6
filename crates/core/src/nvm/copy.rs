//! Copy (NVM Command Set §3.2.2), source range descriptor format 0, within
//! one namespace: the ranges, in order, are read and written to
//! consecutive LBAs from SDLBA, in chunks of the largest transfer, one
//! request out at a time, through one buffer. Limits (MSSRL, MCL, MSRC in
//! Identify Namespace) are reported by [`limits`] and enforced here.

use super::{admit, NvmCmd, Phase, Range};
use crate::command::{Outcome, Xfer};
use crate::queue::NvmeQueue;
use crate::subsystem::Namespace;
use farflash_backend::{IoOp, IoRequest};
use farflash_wire::le::{u16_at, u64_at};
use farflash_wire::{Sqe, Status};

/// Source range entry format 0: 32 bytes (NVM Command Set §3.2.2.1).
const DESC_LEN: u32 = 32;
/// At most 128 source ranges (MSRC is 0's based).
const MSRC: u8 = 127;
/// At most 1 GiB per Copy (MCL), and one range at most MSSRL blocks.
const MAX_COPY_BYTES: u64 = 1 << 30;

/// (MSSRL, MCL, MSRC) of a namespace, in its logical blocks.
fn limits(ns: &Namespace) -> (u16, u32, u8) {
    limits_for(ns.lba_shift)
}

/// Its Identify Namespace fields: MSSRL, MCL, MSRC (NVM Command Set §4.1.5.1).
pub(super) fn identify_namespace(ns: &Namespace, id: &mut farflash_wire::identify::IdNs) {
    (id.mssrl, id.mcl, id.msrc) = limits(ns);
}

fn limits_for(lba_shift: u32) -> (u16, u32, u8) {
    let mcl = (MAX_COPY_BYTES >> lba_shift).min(u32::MAX as u64) as u32;
    (mcl.min(u16::MAX as u32) as u16, mcl, MSRC)
}

pub(super) fn classify<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
    ns: usize,
) -> Result<(Xfer, NvmCmd), Status> {
    if !q.blocks.resv_block.is_empty() {
        crate::resv_cmd::check_access(q, ns, true)?;
    }
    // CDW12: NR 7:0 (0's based), Descriptor Format 11:8, FUA bit 30.
    let nr = (sqe.cdw12 & 0xFF) + 1;
    if (sqe.cdw12 >> 8) & 0xF != 0 {
        // Only format 0 is in OCFS: Invalid Field in Command (§3.2.2).
        return Err(Status::INVALID_FIELD.dnr());
    }
    if nr > MSRC as u32 + 1 {
        return Err(Status::COMMAND_SIZE_LIMIT_EXCEEDED.dnr());
    }
    // The destination's start is checked now; its end once the ranges are known.
    let (dst, _) = q.ns.lba_range(ns, sqe.slba(), 1)?;
    let fua = sqe.fua() || q.write_through();
    Ok((Xfer::H2C(nr * DESC_LEN), NvmCmd::Copy { ns, dst, nr, fua }))
}

/// Reads the descriptors (checked against the namespace and the limits),
/// takes the destination range, and starts the first chunk.
pub(super) fn start<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ns: usize,
    dst: u64,
    nr: u32,
) -> Outcome {
    let total = match parse(q, idx, ns, nr) {
        Ok(t) => t,
        Err(st) => return Outcome::Done(st, 0),
    };
    let Some(shift) = q.ns.get(ns).map(|n| n.lba_shift) else {
        return Outcome::Done(Status::INVALID_NAMESPACE.dnr(), 0);
    };
    let Some(blocks) = q.ns.get(ns).map(|n| n.blocks) else {
        return Outcome::Done(Status::INVALID_NAMESPACE.dnr(), 0);
    };
    if (dst >> shift).saturating_add(total >> shift) > blocks {
        return Outcome::Done(Status::LBA_OUT_OF_RANGE.dnr(), 0);
    }
    if !admit(q, idx, ns, Range::new(dst, total)) {
        return Outcome::Held;
    }
    if let Some(b) = q.slots[idx].buf.take() {
        q.pool.put(b);
    }
    let r = q.nvm.run(idx);
    r.range = 0;
    r.dst = dst;
    let (src, len) = r.ranges.first().copied().unwrap_or((0, 0));
    r.src = src;
    r.left = len;
    r.phase = Phase::CopyWrite;
    if total == 0 {
        return Outcome::Done(Status::SUCCESS, 0);
    }
    // The first chunk's read: as if a write of nothing had just finished.
    next_read(q, idx, ns)
}

/// The ranges in the slot's data into the run; returns the bytes to copy.
fn parse<C: Default>(q: &mut NvmeQueue<C>, idx: usize, ns: usize, nr: u32) -> Result<u64, Status> {
    let (mssrl, mcl, _) =
        q.ns.get(ns)
            .map(|n| limits(n))
            .ok_or(Status::INVALID_NAMESPACE.dnr())?;
    let mut ranges = std::mem::take(&mut q.nvm.run(idx).ranges);
    ranges.clear();
    let mut blocks = 0u64;
    let mut result = Ok(());
    if let Some(data) = q.slots[idx].buf.as_ref() {
        for d in data
            .as_slice()
            .chunks_exact(DESC_LEN as usize)
            .take(nr as usize)
        {
            // Format 0: SLBA at 8, NLB (0's based) at 16.
            let slba = u64_at(d, 8);
            let nlb = u16_at(d, 16) as u64 + 1;
            if nlb > mssrl as u64 {
                result = Err(Status::COMMAND_SIZE_LIMIT_EXCEEDED.dnr());
                break;
            }
            blocks += nlb;
            match q.ns.lba_range(ns, slba, nlb) {
                Ok(r) => ranges.push(r),
                Err(st) => {
                    result = Err(st);
                    break;
                }
            }
        }
    }
    if result.is_ok() && blocks > mcl as u64 {
        result = Err(Status::COMMAND_SIZE_LIMIT_EXCEEDED.dnr());
    }
    let bytes = ranges.iter().map(|r| r.1).sum();
    q.nvm.run(idx).ranges = ranges;
    result.map(|()| bytes)
}

/// A chunk came back: after a read, write it; after a write, read the next.
pub(super) fn step<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    let NvmCmd::Copy { ns, fua, .. } = cmd else {
        return Outcome::Done(Status::INTERNAL_ERROR, 0);
    };
    let st = q.slots[idx].status;
    if !st.is_success() {
        return finish(q, idx, st);
    }
    match q.nvm.run(idx).phase {
        Phase::CopyRead => write(q, idx, ns, fua),
        _ => next_read(q, idx, ns),
    }
}

fn finish<C: Default>(q: &mut NvmeQueue<C>, idx: usize, st: Status) -> Outcome {
    q.slots[idx].reply = false;
    q.nvm.run(idx).phase = Phase::Idle;
    super::leave(q, idx);
    Outcome::Done(st, 0)
}

fn next_read<C: Default>(q: &mut NvmeQueue<C>, idx: usize, ns: usize) -> Outcome {
    let chunk = q.target.transport.max_io_size as u64;
    let r = q.nvm.run(idx);
    while r.left == 0 {
        r.range += 1;
        match r.ranges.get(r.range) {
            Some(&(src, len)) => (r.src, r.left) = (src, len),
            None => return finish(q, idx, Status::SUCCESS),
        }
    }
    let n = r.left.min(chunk);
    let offset = r.src;
    r.phase = Phase::CopyRead;
    // The buffer of the last chunk, if any, is reused.
    let mut buf = q.slots[idx]
        .buf
        .take()
        .filter(|b| b.capacity() >= n as usize)
        .unwrap_or_else(|| q.pool.get(n as usize));
    buf.set_len(n as usize);
    q.slots[idx].reply = true;
    let req = IoRequest {
        tag: idx as u64,
        op: IoOp::Read {
            offset,
            len: n as u32,
        },
        buf,
    };
    match q.submit(idx, ns, req) {
        Ok(()) => Outcome::Pending,
        Err(st) => finish(q, idx, st),
    }
}

fn write<C: Default>(q: &mut NvmeQueue<C>, idx: usize, ns: usize, fua: bool) -> Outcome {
    let Some(buf) = q.slots[idx].buf.take() else {
        return finish(q, idx, Status::INTERNAL_ERROR);
    };
    let n = buf.len() as u64;
    let r = q.nvm.run(idx);
    let offset = r.dst;
    r.dst += n;
    r.src += n;
    r.left -= n.min(r.left);
    r.phase = Phase::CopyWrite;
    let req = IoRequest {
        tag: idx as u64,
        op: IoOp::Write {
            offset,
            len: n as u32,
            fua,
        },
        buf,
    };
    match q.submit(idx, ns, req) {
        Ok(()) => Outcome::Pending,
        Err(st) => finish(q, idx, st),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_one_gib_and_128_ranges() {
        assert_eq!(limits_for(9), (u16::MAX, 1 << 21, 127));
        assert_eq!(limits_for(12), (u16::MAX, 1 << 18, 127));
    }
}
