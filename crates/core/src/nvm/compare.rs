//! Compare (NVM Command Set §3.2.1): storage reads the range, which is
//! checked against the host's data (Compare Failure when it differs). The
//! fused pair (`fused.rs`) takes its Compare half's verdict from here.

use super::{read, read_access, take_read, NvmCmd, Phase};
use crate::command::{Outcome, Xfer};
use crate::queue::NvmeQueue;
use farflash_wire::{Sqe, Status};

/// Compare's one step: its read is out (`start`); when it is back
/// (`stored`) the data are compared and it is over (`Phase::Idle`).
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
    let (offset, len) = q.ns.lba_range(ns, sqe.slba(), sqe.nlb() as u64 + 1)?;
    if len > q.target.transport.max_io_size as u64 {
        // Base §5.17.2.1 MDTS bounds every data transfer.
        return Err(Status::INVALID_FIELD.dnr());
    }
    // The host sends `len` bytes (QoS reads); Base §5.16.1.3: Host Read
    // Commands count Compares.
    let cmd = NvmCmd {
        ns,
        offset,
        len,
        moves: true,
        counted: true,
        ..NvmCmd::default()
    };
    Ok((Xfer::H2C(len as u32), cmd))
}

/// Reads the range into a buffer the slot keeps; the host's data waits aside.
pub(super) fn start<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: NvmCmd) -> Outcome {
    let Some(host) = q.slots[idx].buf.take() else {
        return Outcome::Done(Status::INTERNAL_ERROR, 0);
    };
    q.nvm.run(idx).host = Some(host);
    q.nvm.run(idx).phase = Step::Read.into();
    read(q, idx, cmd.ns, cmd.offset, cmd.len as u32, true)
}

/// The read came back: compares it with the host's data.
pub(super) fn stored<C: Default>(q: &mut NvmeQueue<C>, idx: usize, _: NvmCmd) -> Outcome {
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

#[cfg(test)]
mod tests {
    use super::super::tests::{pattern, write};
    use crate::tests::{io_queue, run, rw, target};
    use farflash_wire::opcode::io;
    use farflash_wire::Status;

    #[test]
    fn compare_matches_fails_on_a_difference_and_checks_its_range() {
        let (t, _) = target();
        let (_a, mut q) = io_queue(&t);
        let d = pattern(1, 1024);
        write(&mut q, 10, 8, &d);
        let same = run(&mut q, rw(io::COMPARE, 11, 8, 1024), &d);
        assert_eq!(same.status, Status::SUCCESS);
        assert!(same.data.is_none(), "a Compare returns no data");
        let mut other = d.clone();
        other[1000] ^= 1;
        let diff = run(&mut q, rw(io::COMPARE, 12, 8, 1024), &other);
        assert_eq!(diff.status, Status::COMPARE_FAILURE);
        // 1 MiB of 512-byte blocks: LBA 2047 is the last.
        let out = run(&mut q, rw(io::COMPARE, 13, 2047, 1024), &[]);
        assert_eq!(out.status, Status::LBA_OUT_OF_RANGE.dnr());
    }

    #[test]
    fn verdict_puts_a_storage_error_before_the_data() {
        use super::verdict;
        assert_eq!(verdict(Status::SUCCESS, true), Status::SUCCESS);
        assert_eq!(verdict(Status::SUCCESS, false), Status::COMPARE_FAILURE);
        let eio = Status::UNRECOVERED_READ_ERROR;
        assert_eq!(verdict(eio, false), eio);
        assert_eq!(verdict(eio, true), eio);
    }
}
