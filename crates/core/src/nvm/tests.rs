//! The fused Compare and Write through the command layer (no transport),
//! on the scripted backend (memory-backed, completions held on demand):
//! statuses, data, the refusal rules, and the pair's atomicity against
//! writes of another controller; and the helpers the commands' own tests
//! (in their files: `compare.rs`, `verify.rs`, `copy.rs`) share.

use crate::command::{Begin, Completion, Xfer};
use crate::tests::{completions, io_queue, run, rw, target};
use crate::NvmeQueue;
use farflash_backend::OpKind;
use farflash_wire::opcode::io;
use farflash_wire::{Sqe, Status};

const FUSE_FIRST: u8 = 0x01;
const FUSE_SECOND: u8 = 0x02;

pub(super) fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub(super) fn write(q: &mut NvmeQueue, cid: u16, slba: u64, data: &[u8]) {
    let c = run(q, rw(io::WRITE, cid, slba, data.len() as u32), data);
    assert_eq!(c.status, Status::SUCCESS);
}

pub(super) fn read(q: &mut NvmeQueue, cid: u16, slba: u64, len: u32) -> Vec<u8> {
    let c = run(q, rw(io::READ, cid, slba, len), &[]);
    assert_eq!(c.status, Status::SUCCESS);
    let (buf, n) = c.data.expect("read data");
    buf.as_slice()[..n as usize].to_vec()
}

/// Begins a command and, when it is ready, gives it its data and runs it;
/// returns its completion if it was answered at once.
fn start(q: &mut NvmeQueue, sqe: Sqe, data: &[u8]) {
    match q.begin(sqe) {
        Begin::Ready { slot, xfer } => {
            if let Xfer::H2C(n) = xfer {
                assert_eq!(n as usize, data.len());
                q.data_buf(slot).copy_from_slice(data);
            }
            q.execute(slot);
        }
        Begin::Answered => {}
        other => panic!("not runnable: {other:?}"),
    }
}

/// Moves storage until nothing is out; the completions in CID order.
fn settle(q: &mut NvmeQueue) -> Vec<(u16, Status)> {
    q.commit();
    while q.in_flight() > 0 {
        q.poll_backends();
        q.commit();
    }
    let mut c: Vec<(u16, Status)> = completions(q)
        .into_iter()
        .map(|c: Completion| (c.cid, c.status))
        .collect();
    c.sort_by_key(|&(cid, _)| cid);
    c
}

/// One command that may take several storage requests in turn.
pub(super) fn run_steps(q: &mut NvmeQueue, sqe: Sqe, data: &[u8]) -> Status {
    let cid = sqe.cid;
    start(q, sqe, data);
    let done = settle(q);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].0, cid);
    done[0].1
}

fn fused(cid: u16, opcode: u8, flags: u8, slba: u64, len: u32) -> Sqe {
    let mut s = rw(opcode, cid, slba, len);
    s.flags |= flags;
    s
}

#[test]
fn fused_compare_and_write_writes_only_when_the_data_match() {
    let (t, _) = target();
    let (_a, mut q) = io_queue(&t);
    let (old, new, wrong) = (pattern(1, 512), pattern(2, 512), pattern(9, 512));
    write(&mut q, 1, 5, &old);
    // Match: both succeed, the new data is there.
    start(&mut q, fused(2, io::COMPARE, FUSE_FIRST, 5, 512), &old);
    start(&mut q, fused(3, io::WRITE, FUSE_SECOND, 5, 512), &new);
    assert_eq!(
        settle(&mut q),
        vec![(2, Status::SUCCESS), (3, Status::SUCCESS)]
    );
    assert_eq!(read(&mut q, 4, 5, 512), new);
    // Miscompare: Compare Failure, the Write aborted, nothing written.
    start(&mut q, fused(5, io::COMPARE, FUSE_FIRST, 5, 512), &wrong);
    start(&mut q, fused(6, io::WRITE, FUSE_SECOND, 5, 512), &old);
    assert_eq!(
        settle(&mut q),
        vec![(5, Status::COMPARE_FAILURE), (6, Status::FUSED_FAILED)]
    );
    assert_eq!(read(&mut q, 7, 5, 512), new);
}

/// Storage that compares and writes itself (an RBD image: atomic against
/// other gateways) gets a pair inside its unit as one request, answered as
/// the in-process path answers; a wider pair is read, compared and written
/// here.
#[test]
fn storage_that_compares_and_writes_gets_the_pairs_within_its_unit() {
    let (t, script) = target();
    script.offer_compare_and_write(Some(512));
    let (_a, mut q) = io_queue(&t);
    let (old, new, wrong) = (pattern(1, 512), pattern(2, 512), pattern(9, 512));
    write(&mut q, 1, 5, &old);
    let before = script.submitted().len();
    start(&mut q, fused(2, io::COMPARE, FUSE_FIRST, 5, 512), &old);
    start(&mut q, fused(3, io::WRITE, FUSE_SECOND, 5, 512), &new);
    assert_eq!(
        settle(&mut q),
        vec![(2, Status::SUCCESS), (3, Status::SUCCESS)]
    );
    assert_eq!(script.submitted()[before..], [OpKind::CompareAndWrite]);
    assert_eq!(read(&mut q, 4, 5, 512), new);
    // Miscompare (EILSEQ from storage): the statuses of the in-process path.
    start(&mut q, fused(5, io::COMPARE, FUSE_FIRST, 5, 512), &wrong);
    start(&mut q, fused(6, io::WRITE, FUSE_SECOND, 5, 512), &old);
    assert_eq!(
        settle(&mut q),
        vec![(5, Status::COMPARE_FAILURE), (6, Status::FUSED_FAILED)]
    );
    assert_eq!(read(&mut q, 7, 5, 512), new, "nothing written");
    // A storage error fails the Write with it, the Compare as Failed Fused.
    script.fail(OpKind::CompareAndWrite, libc::EIO, 1);
    start(&mut q, fused(8, io::COMPARE, FUSE_FIRST, 5, 512), &new);
    start(&mut q, fused(9, io::WRITE, FUSE_SECOND, 5, 512), &old);
    assert_eq!(
        settle(&mut q),
        vec![(8, Status::FUSED_FAILED), (9, Status::WRITE_FAULT)]
    );
    assert_eq!(read(&mut q, 10, 5, 512), new);
    // Two blocks cross the 512-byte unit: the pair runs here.
    let wide = pattern(3, 1024);
    write(&mut q, 11, 20, &wide);
    let before = script.submitted().len();
    start(&mut q, fused(12, io::COMPARE, FUSE_FIRST, 20, 1024), &wide);
    start(
        &mut q,
        fused(13, io::WRITE, FUSE_SECOND, 20, 1024),
        &old.repeat(2),
    );
    assert_eq!(
        settle(&mut q),
        vec![(12, Status::SUCCESS), (13, Status::SUCCESS)]
    );
    assert_eq!(script.submitted()[before..], [OpKind::Read, OpKind::Write]);
    assert_eq!(read(&mut q, 14, 20, 1024), old.repeat(2));
}

#[test]
fn the_second_half_may_run_first_and_the_pair_still_waits_for_both() {
    let (t, script) = target();
    let (_a, mut q) = io_queue(&t);
    let old = pattern(1, 1024);
    write(&mut q, 1, 0, &old);
    // Both arrive; the Write's data is in place before the Compare's.
    let Begin::Ready { slot: c, .. } = q.begin(fused(2, io::COMPARE, FUSE_FIRST, 0, 1024)) else {
        panic!("compare half refused")
    };
    let Begin::Ready { slot: w, .. } = q.begin(fused(3, io::WRITE, FUSE_SECOND, 0, 1024)) else {
        panic!("write half refused")
    };
    let new = pattern(4, 1024);
    q.data_buf(w).copy_from_slice(&new);
    q.execute(w);
    q.commit();
    let before = script.submitted().len();
    assert!(completions(&mut q).is_empty());
    q.data_buf(c).copy_from_slice(&old);
    q.execute(c);
    assert_eq!(
        settle(&mut q),
        vec![(2, Status::SUCCESS), (3, Status::SUCCESS)]
    );
    assert_eq!(
        script.submitted()[before..],
        [OpKind::Read, OpKind::Write],
        "nothing moved before both halves were in place"
    );
    assert_eq!(read(&mut q, 4, 0, 1024), new);
}

#[test]
fn fused_refusals_follow_the_halves_rules() {
    let (t, _) = target();
    let (_a, mut q) = io_queue(&t);
    let d = pattern(1, 512);
    // A second half alone: Missing Fused Command (as SPDK).
    start(&mut q, fused(1, io::WRITE, FUSE_SECOND, 0, 512), &d);
    assert_eq!(settle(&mut q), vec![(1, Status::FUSED_MISSING)]);
    // A first half followed by another command: the first is aborted
    // with Missing Fused Command, the other runs.
    start(&mut q, fused(2, io::COMPARE, FUSE_FIRST, 0, 512), &d);
    start(&mut q, rw(io::READ, 3, 0, 512), &[]);
    assert_eq!(
        settle(&mut q),
        vec![(2, Status::FUSED_MISSING), (3, Status::SUCCESS)]
    );
    // Halves over different ranges: Invalid Field for the Compare, Failed
    // Fused Command for the Write (as SPDK).
    start(&mut q, fused(4, io::COMPARE, FUSE_FIRST, 0, 512), &d);
    start(&mut q, fused(5, io::WRITE, FUSE_SECOND, 1, 512), &d);
    assert_eq!(
        settle(&mut q),
        vec![(4, Status::INVALID_FIELD.dnr()), (5, Status::FUSED_FAILED)]
    );
    // FUSE 11b, a first half that is not a Compare, a second that is not
    // a Write: Invalid Field.
    start(&mut q, fused(6, io::WRITE, 0x03, 0, 512), &d);
    start(&mut q, fused(7, io::READ, FUSE_FIRST, 0, 512), &[]);
    start(&mut q, fused(8, io::COMPARE, FUSE_FIRST, 0, 512), &d);
    start(&mut q, fused(9, io::READ, FUSE_SECOND, 0, 512), &[]);
    assert_eq!(
        settle(&mut q),
        vec![
            (6, Status::INVALID_FIELD.dnr()),
            (7, Status::INVALID_FIELD.dnr()),
            (8, Status::FUSED_MISSING),
            (9, Status::INVALID_FIELD.dnr())
        ]
    );
    // The queue goes on.
    write(&mut q, 10, 0, &d);
}

#[test]
fn a_bad_data_transfer_of_one_half_fails_the_other() {
    let (t, _) = target();
    let (_a, mut q) = io_queue(&t);
    let d = pattern(1, 512);
    let Begin::Ready { slot: c, .. } = q.begin(fused(1, io::COMPARE, FUSE_FIRST, 0, 512)) else {
        panic!("compare half refused")
    };
    q.data_buf(c).copy_from_slice(&d);
    q.execute(c);
    let Begin::Ready { slot: w, .. } = q.begin(fused(2, io::WRITE, FUSE_SECOND, 0, 512)) else {
        panic!("write half refused")
    };
    q.fail(w, Status::DATA_TRANSFER_ERROR);
    assert_eq!(
        settle(&mut q),
        vec![(1, Status::FUSED_FAILED), (2, Status::DATA_TRANSFER_ERROR)]
    );
}

#[test]
fn a_pair_excludes_writes_of_another_controller_until_it_is_done() {
    let (t, script) = target();
    let (_a1, mut q1) = io_queue(&t);
    let (_a2, mut q2) = io_queue(&t);
    let (old, new, theirs) = (pattern(1, 512), pattern(2, 512), pattern(3, 512));
    write(&mut q1, 1, 40, &old);
    // The pair's read is out and held.
    script.hold(true);
    start(&mut q1, fused(2, io::COMPARE, FUSE_FIRST, 40, 512), &old);
    start(&mut q1, fused(3, io::WRITE, FUSE_SECOND, 40, 512), &new);
    q1.commit();
    let n = script.submitted().len();
    // Another controller's write over the range waits; one beside it goes.
    start(&mut q2, rw(io::WRITE, 7, 40, 512), &theirs);
    start(&mut q2, rw(io::WRITE, 8, 41, 512), &theirs);
    q2.commit();
    assert_eq!(
        script.submitted()[n..],
        [OpKind::Write],
        "only LBA 41's write"
    );
    q2.set_now(std::time::Instant::now());
    assert!(
        q2.throttle_wake().is_some(),
        "the held write asks to be woken"
    );
    assert!(!q2.resume_throttled(), "still held while the pair is");
    script.hold(false);
    assert_eq!(
        settle(&mut q1),
        vec![(2, Status::SUCCESS), (3, Status::SUCCESS)]
    );
    assert_eq!(settle(&mut q2), vec![(8, Status::SUCCESS)]);
    assert!(q2.resume_throttled(), "the pair is done: the write runs");
    assert_eq!(settle(&mut q2), vec![(7, Status::SUCCESS)]);
    assert!(q2.throttle_wake().is_none());
    // It ran after the pair: its data is the last.
    assert_eq!(read(&mut q1, 4, 40, 512), theirs);
}

#[test]
fn a_pair_waits_for_writes_already_out_on_other_queues() {
    let (t, script) = target();
    let (_a1, mut q1) = io_queue(&t);
    let (_a2, mut q2) = io_queue(&t);
    let (old, new) = (pattern(1, 512), pattern(2, 512));
    write(&mut q1, 1, 9, &old);
    script.hold(true);
    // A plain write on q2 is out (fast path) when the pair comes.
    start(&mut q2, rw(io::WRITE, 5, 100, 512), &new);
    q2.commit();
    let n = script.submitted().len();
    start(&mut q1, fused(2, io::COMPARE, FUSE_FIRST, 9, 512), &old);
    start(&mut q1, fused(3, io::WRITE, FUSE_SECOND, 9, 512), &new);
    q1.commit();
    assert_eq!(script.submitted().len(), n, "the pair waits for q2's write");
    script.hold(false);
    assert_eq!(settle(&mut q2), vec![(5, Status::SUCCESS)]);
    assert!(q1.resume_throttled());
    assert_eq!(
        settle(&mut q1),
        vec![(2, Status::SUCCESS), (3, Status::SUCCESS)]
    );
    assert_eq!(read(&mut q1, 4, 9, 512), new);
}

#[test]
fn a_queue_closing_with_a_pair_waiting_frees_the_range() {
    let (t, script) = target();
    let (_a1, mut q1) = io_queue(&t);
    let (_a2, mut q2) = io_queue(&t);
    let d = pattern(1, 512);
    script.hold(true);
    start(&mut q2, rw(io::WRITE, 5, 100, 512), &d);
    q2.commit();
    start(&mut q1, fused(2, io::COMPARE, FUSE_FIRST, 100, 512), &d);
    start(&mut q1, fused(3, io::WRITE, FUSE_SECOND, 100, 512), &d);
    let ns = t.subsystems()[0].namespace(1).expect("namespace 1");
    assert_eq!(ns.exclusion.pairs(), 1);
    drop(q1);
    assert_eq!(ns.exclusion.pairs(), 0);
    script.hold(false);
    assert_eq!(settle(&mut q2), vec![(5, Status::SUCCESS)]);
}
