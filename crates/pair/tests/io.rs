//! A read/write exchange across host and target: patterns written and
//! read back, many commands in flight, storage completing out of order.

use farflash_host::{cmd, DataDir};
use farflash_pair::{ConnId, Pair};
use std::time::Duration;

const BLOCK: usize = 512;

/// A pattern no two blocks share: block `lba` of write `tag`.
fn pattern(tag: u8, lba: u64, blocks: usize) -> Vec<u8> {
    (0..blocks * BLOCK)
        .map(|i| (i as u64 / 7 + lba * 31 + tag as u64 * 101 + (i % 251) as u64) as u8)
        .collect()
}

fn io_pair(depth: u16) -> (Pair, ConnId) {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (_admin, cntlid) = p.connect_admin(0).unwrap();
    let io = p.connect_io(cntlid, 1, depth, 128 << 10, 8192).unwrap();
    (p, io)
}

/// (LBA, blocks): in-capsule writes (up to 8 KiB) and R2T ones (64 KiB, 128 KiB).
const EXTENTS: [(u64, usize); 8] = [
    (0, 1),
    (8, 8),
    (64, 16),
    (200, 128),
    (400, 256),
    (700, 2),
    (1000, 64),
    (2000, 255),
];

#[test]
fn writes_and_reads_in_flight_together_complete_out_of_order_and_read_back() {
    let (mut p, io) = io_pair(16);
    // Storage takes less for each later request: the last emitted
    // completes first.
    p.set_storage_delay(|n, _| Duration::from_micros(1000u64.saturating_sub(n * 10)));
    let mut cids = Vec::new();
    for (k, &(lba, n)) in EXTENTS.iter().enumerate() {
        let data = pattern(k as u8, lba, n);
        let sqe = cmd::rw(true, 1, lba, n as u32);
        cids.push(p.submit(io, sqe, DataDir::ToCtrl, &data, 0).unwrap());
    }
    p.drive();
    // All eight reached storage and wait there; none has completed.
    assert_eq!(p.storage_pending(), EXTENTS.len());
    assert!(cids.iter().all(|&c| p.take(io, c).is_none()));
    p.advance(Duration::from_millis(2));
    for &c in &cids {
        let done = p.take(io, c).expect("every write completes");
        assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
    }
    // The storage engine completed them in the reverse of their order.
    let log = p.storage_log().to_vec();
    let order: Vec<u64> = log.iter().map(|d| d.emitted).collect();
    assert_eq!(order, (0..EXTENTS.len() as u64).rev().collect::<Vec<_>>());
    assert!(log.iter().all(|d| d.conn == io.index()));

    // Read them all back, all in flight at once, again out of order.
    let mut reads = Vec::new();
    for &(lba, n) in &EXTENTS {
        let sqe = cmd::rw(false, 1, lba, n as u32);
        let len = (n * BLOCK) as u32;
        reads.push(p.submit(io, sqe, DataDir::FromCtrl, &[], len).unwrap());
    }
    p.drive();
    assert_eq!(p.storage_pending(), EXTENTS.len());
    p.advance(Duration::from_millis(2));
    let order: Vec<u64> = p.storage_log()[EXTENTS.len()..]
        .iter()
        .map(|d| d.emitted)
        .collect();
    assert_eq!(order, (8..16).rev().collect::<Vec<_>>());
    for (k, (&c, &(lba, n))) in reads.iter().zip(&EXTENTS).enumerate() {
        let done = p.take(io, c).expect("every read completes");
        assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
        assert_eq!(done.transferred as usize, n * BLOCK);
        assert!(
            p.buf(io, c)[..n * BLOCK] == pattern(k as u8, lba, n)[..],
            "extent {k} at LBA {lba} reads back something else"
        );
    }
}

#[test]
fn a_queue_full_of_commands_with_random_storage_delays_keeps_every_block() {
    let (mut p, io) = io_pair(32);
    // Scrambled delays (a fixed multiplicative hash of the request number).
    p.set_storage_delay(|n, _| Duration::from_micros((n.wrapping_mul(2_654_435_761) % 997) + 1));
    let depth = 32u64;
    for round in 0..3u8 {
        let mut cids = Vec::new();
        for i in 0..depth {
            let lba = i * 16;
            let data = pattern(round.wrapping_mul(40).wrapping_add(i as u8), lba, 16);
            cids.push(
                p.submit(io, cmd::rw(true, 1, lba, 16), DataDir::ToCtrl, &data, 0)
                    .unwrap(),
            );
        }
        assert!(p.advance_until(Duration::from_secs(1), |p| p.storage_pending() == 0));
        p.drive();
        for c in cids {
            assert!(p.take(io, c).unwrap().cqe.status.is_success());
        }
        for i in 0..depth {
            let lba = i * 16;
            let read = cmd::rw(false, 1, lba, 16);
            let got = p
                .run(io, read, DataDir::FromCtrl, &[], 16 * BLOCK as u32)
                .unwrap();
            let c = got.cid;
            assert!(got.cqe.status.is_success());
            let want = pattern(round.wrapping_mul(40).wrapping_add(i as u8), lba, 16);
            assert!(
                p.buf(io, c)[..16 * BLOCK] == want[..],
                "round {round} LBA {lba}"
            );
        }
    }
}
