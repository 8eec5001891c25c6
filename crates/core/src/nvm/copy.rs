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

/// Copy's steps: what its next storage completion means. `start`, and each
/// chunk written (`Write`), read the next chunk (`Read`: `next_read`); each
/// chunk read is written (`write`); the last write, or a failure, ends it
/// (`finish`: `Phase::Idle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read,
    Write,
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
            _ => None,
        }
    }
}

/// (MSSRL, MCL, MSRC) of a namespace, in its logical blocks.
fn limits(ns: &Namespace) -> (u16, u32, u8) {
    limits_for(ns.lba_shift)
}

/// Its Identify Controller field: OCFS, the one descriptor format it reads
/// (Base §5.17.2.1 OCFS; format 0 is NVM Command Set §3.2.2.1).
pub(super) fn identify_controller(id: &mut farflash_wire::identify::IdCtrl) {
    id.ocfs = farflash_wire::identify::OCFS_FORMAT0;
}

/// Its Identify Namespace fields: MSSRL, MCL, MSRC (NVM Command Set §4.1.5.1).
pub(super) fn identify_namespace(ns: &Namespace, id: &mut farflash_wire::identify::IdNs) {
    (id.mssrl, id.mcl, id.msrc) = limits(ns);
}

fn limits_for(lba_shift: u32) -> (u16, u32, u8) {
    let mcl = (MAX_COPY_BYTES >> lba_shift).min(u32::MAX as u64) as u32;
    (mcl.min(u16::MAX as u32) as u16, mcl, MSRC)
}

pub(super) fn parse<C: Default>(
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
    // A write (QoS, write faults, write protection) whose data are its
    // descriptors, not blocks: QoS charges no bytes, SMART counts nothing.
    let cmd = NvmCmd {
        ns,
        offset: dst,
        nr: nr as u8,
        fua: sqe.fua() || q.write_through(),
        writes: true,
        ..NvmCmd::default()
    };
    Ok((Xfer::H2C(nr * DESC_LEN), cmd))
}

/// Reads the descriptors (checked against the namespace and the limits),
/// takes the destination range, and starts the first chunk.
pub(super) fn start<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    let (ns, dst) = (cmd.ns, cmd.offset);
    let total = match descriptors(q, idx, ns, u32::from(cmd.nr)) {
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
    r.phase = Step::Write.into();
    if total == 0 {
        // Nothing to copy: done, and out of the range it entered.
        return finish(q, idx, Status::SUCCESS);
    }
    // The first chunk's read: as if a write of nothing had just finished.
    next_read(q, idx, ns)
}

/// The ranges in the slot's data into the run; returns the bytes to copy.
fn descriptors<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ns: usize,
    nr: u32,
) -> Result<u64, Status> {
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
pub(super) fn stored<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    let st = q.slots[idx].status;
    if !st.is_success() {
        return finish(q, idx, st);
    }
    match Step::of(q.nvm.run(idx).phase) {
        Some(Step::Read) => write(q, idx, cmd.ns, cmd.fua),
        Some(Step::Write) => next_read(q, idx, cmd.ns),
        None => finish(q, idx, Status::INTERNAL_ERROR),
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
    r.phase = Step::Read.into();
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
    r.phase = Step::Write.into();
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
    use super::super::tests::{pattern, read, run_steps, write};
    use super::*;
    use crate::tests::{io_queue, run, rw, target};
    use farflash_wire::opcode::io;
    use farflash_wire::Sqe;

    fn copy_cmd(cid: u16, sdlba: u64, ranges: &[(u64, u16)]) -> (Sqe, Vec<u8>) {
        let mut s = rw(io::COPY, cid, sdlba, 512);
        s.cdw12 = ranges.len() as u32 - 1;
        s.dptr = farflash_wire::sqe::SglDescriptor::transport(ranges.len() as u32 * 32);
        let mut d = vec![0u8; ranges.len() * 32];
        for (i, &(slba, nlb)) in ranges.iter().enumerate() {
            d[i * 32 + 8..i * 32 + 16].copy_from_slice(&slba.to_le_bytes());
            d[i * 32 + 16..i * 32 + 18].copy_from_slice(&(nlb - 1).to_le_bytes());
        }
        (s, d)
    }

    #[test]
    fn copy_writes_the_ranges_in_order_to_the_destination() {
        let (t, _) = target();
        let (_a, mut q) = io_queue(&t);
        let (a, b) = (pattern(3, 1024), pattern(7, 512 * 600));
        write(&mut q, 1, 0, &a);
        write(&mut q, 2, 100, &b[..256 * 1024]);
        write(&mut q, 3, 612, &b[256 * 1024..]);
        // 600 blocks: more than one chunk of the largest transfer (256 KiB).
        let (s, d) = copy_cmd(4, 1000, &[(100, 600), (0, 2)]);
        assert_eq!(run_steps(&mut q, s, &d), Status::SUCCESS);
        let mut want = b.clone();
        want.extend_from_slice(&a);
        let mut got = read(&mut q, 5, 1000, 256 * 1024);
        got.extend(read(&mut q, 6, 1512, 512 * 90));
        assert_eq!(got, want);
    }

    #[test]
    fn copy_limits_and_ranges_are_enforced() {
        let (t, _) = target();
        let (_a, mut q) = io_queue(&t);
        // More than MSRC + 1 = 128 ranges.
        let many = vec![(0u64, 1u16); 129];
        let (s, _) = copy_cmd(1, 0, &many);
        assert_eq!(
            run(&mut q, s, &[]).status,
            Status::COMMAND_SIZE_LIMIT_EXCEEDED.dnr()
        );
        // A range longer than MSSRL (65535).
        let (mut s, mut d) = copy_cmd(2, 0, &[(0, 1)]);
        d[16..18].copy_from_slice(&0xFFFFu16.to_le_bytes());
        s.cid = 2;
        assert_eq!(
            run(&mut q, s, &d).status,
            Status::COMMAND_SIZE_LIMIT_EXCEEDED.dnr()
        );
        // Descriptor format 1 is not in OCFS.
        let (mut s, d) = copy_cmd(3, 0, &[(0, 1)]);
        s.cdw12 |= 1 << 8;
        assert_eq!(run(&mut q, s, &d).status, Status::INVALID_FIELD.dnr());
        // A source or the destination beyond the namespace.
        let (s, d) = copy_cmd(4, 0, &[(2040, 9)]);
        assert_eq!(run(&mut q, s, &d).status, Status::LBA_OUT_OF_RANGE.dnr());
        let (s, d) = copy_cmd(5, 2040, &[(0, 9)]);
        assert_eq!(run(&mut q, s, &d).status, Status::LBA_OUT_OF_RANGE.dnr());
    }

    #[test]
    fn limits_are_one_gib_and_128_ranges() {
        assert_eq!(limits_for(9), (u16::MAX, 1 << 21, 127));
        assert_eq!(limits_for(12), (u16::MAX, 1 << 18, 127));
    }
}
