//! Verify (NVM Command Set §3.2.8): storage reads the range and only that
//! it reads is reported; no data moves. Read in chunks of the largest
//! transfer, one at a time.

use super::{read, read_access, NvmCmd, Phase};
use crate::command::{Outcome, Xfer};
use crate::queue::NvmeQueue;
use farflash_wire::{Sqe, Status};

/// Verify's one step: a chunk's read is out. `start` reads the first;
/// each one back (`stored`) reads the next, until none is left or one
/// failed (`Phase::Idle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read,
}

impl From<Step> for Phase {
    fn from(s: Step) -> Phase {
        Phase::Step(s as u8)
    }
}

pub(super) fn parse<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
    ns: usize,
) -> Result<(Xfer, NvmCmd), Status> {
    read_access(q, ns)?;
    // No data moves, so MDTS does not apply; VSL (Identify Controller, I/O
    // command set specific) is not reported: no limit below the 16-bit NLB.
    let (offset, len) = q.ns.lba_range(ns, sqe.slba(), sqe.nlb() as u64 + 1)?;
    // Not a write, no host data (QoS charges no bytes), not counted in the
    // SMART log's reads (Base §5.16.1.3 names Read and Compare).
    let cmd = NvmCmd {
        ns,
        offset,
        len,
        ..NvmCmd::default()
    };
    Ok((Xfer::None, cmd))
}

pub(super) fn start<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    let r = q.nvm.run(idx);
    r.src = cmd.offset;
    r.left = cmd.len;
    r.phase = Step::Read.into();
    next(q, idx, cmd.ns)
}

fn next<C: Default>(q: &mut NvmeQueue<C>, idx: usize, ns: usize) -> Outcome {
    let chunk = q.target.transport.max_io_size as u64;
    let r = q.nvm.run(idx);
    let n = r.left.min(chunk);
    let offset = r.src;
    r.src += n;
    r.left -= n;
    read(q, idx, ns, offset, n as u32, false)
}

/// A chunk's read came back: the next one, or the answer.
pub(super) fn stored<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    let st = q.slots[idx].status;
    if !st.is_success() || q.nvm.run(idx).left == 0 {
        q.nvm.run(idx).phase = Phase::Idle;
        return Outcome::Done(st, 0);
    }
    next(q, idx, cmd.ns)
}

#[cfg(test)]
mod tests {
    use super::super::tests::run_steps;
    use crate::tests::{io_queue, run, rw, target};
    use farflash_backend::OpKind;
    use farflash_wire::opcode::io;
    use farflash_wire::Status;

    #[test]
    fn verify_reads_without_moving_data_and_reports_read_errors() {
        let (t, script) = target();
        let (_a, mut q) = io_queue(&t);
        // 2048 blocks: more than one chunk of the largest transfer.
        let mut s = rw(io::VERIFY, 1, 0, 512);
        s.cdw12 = 2047;
        assert_eq!(run_steps(&mut q, s, &[]), Status::SUCCESS);
        let reads = script
            .submitted()
            .iter()
            .filter(|k| **k == OpKind::Read)
            .count();
        let chunks = (1usize << 20).div_ceil(t.transport.max_io_size as usize);
        assert_eq!(reads, chunks, "one read per chunk, one at a time");
        script.fail(OpKind::Read, libc::EIO, 1);
        assert_eq!(
            run_steps(&mut q, rw(io::VERIFY, 2, 0, 512), &[]),
            Status::UNRECOVERED_READ_ERROR
        );
        let mut s = rw(io::VERIFY, 3, 2000, 512);
        s.cdw12 = 48; // 2000 + 49 > 2048
        assert_eq!(run(&mut q, s, &[]).status, Status::LBA_OUT_OF_RANGE.dnr());
    }
}
