//! What waits for what: cluster preparation off the submitting thread,
//! and freed clusters that wait exactly for the requests in flight when
//! they were freed (reads through clones included), under a device that
//! holds requests on the test's command.

mod common;

use common::*;
use farflash_backend::{BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest};
use farflash_pool::testing::MemDevice;
use farflash_pool::{is_no_space, LocalPool, PoolOptions, VolumeStore};
use std::time::{Duration, Instant};

/// Waits (bounded) until `cond` holds.
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Reaps `q` until every tag of `tags` completed; returns them in order.
fn collect(q: &mut dyn BackendQueue, tags: &[u64]) -> Vec<IoCompletion> {
    let mut got: Vec<IoCompletion> = Vec::new();
    until("completions", || {
        q.reap(&mut got);
        tags.iter().all(|t| got.iter().any(|c| c.tag == *t))
    });
    assert_eq!(got.len(), tags.len(), "only the requests asked for");
    tags.iter()
        .map(|t| {
            let i = got.iter().position(|c| c.tag == *t).expect("tag");
            got.swap_remove(i)
        })
        .collect()
}

fn write_req(tag: u64, block: u64, n: u64, id: u64) -> IoRequest {
    let mut data = Vec::new();
    for b in block..block + n {
        data.extend(pattern(id, b));
    }
    IoRequest {
        tag,
        op: IoOp::Write {
            offset: block * BS,
            len: (n * BS) as u32,
            fua: false,
        },
        buf: IoBuf::from_slice(&data),
    }
}

fn read_req(tag: u64, block: u64, n: u64) -> IoRequest {
    IoRequest {
        tag,
        op: IoOp::Read {
            offset: block * BS,
            len: (n * BS) as u32,
        },
        buf: IoBuf::with_capacity((n * BS) as usize),
    }
}

/// A first write to a cluster (zeroing a new 1 MiB cluster, copying a
/// snapshot's 1 MiB cluster, a whole-cluster write), Write Zeroes and
/// Deallocate return from `submit` at once while the preparation thread
/// is held by the device; the volume's reads and another volume's I/O on
/// the same thread complete meanwhile; two queues writing to one cluster
/// not prepared yet share one allocation, and no write is lost.
#[test]
fn preparation_does_not_block_submit() {
    const MIB: u64 = 1 << 20;
    let per = MIB / BS;
    let d = MemDevice::recording(64 * MIB);
    let opts = PoolOptions {
        cluster_size: None,
        ..opts()
    };
    let pool = LocalPool::create_with("p", devs(std::slice::from_ref(&d)), &opts).expect("pool");
    pool.create_volume("a", 8 * MIB).expect("a");
    pool.create_volume("b", 8 * MIB).expect("b");
    let (a, b) = (pool.open("a").expect("open"), pool.open("b").expect("open"));
    let (mut qa, mut qa2) = (a.open_queue(16).expect("q"), a.open_queue(16).expect("q"));
    let mut qb = b.open_queue(16).expect("q");
    write(qa.as_mut(), 0, 1, false).expect("a block 0");
    pool.snapshot("a", "a0").expect("snapshot");
    write(qb.as_mut(), 0, 2, false).expect("b block 0");

    d.hold_thread(Some("pool-prep"));
    qa.submit(write_req(1, 1, 1, 11)); // copy-on-write of cluster 0
    qa.submit(write_req(2, per, 1, 12)); // a new cluster, zeroed
    qa2.submit(write_req(3, per + 1, 1, 13)); // the same cluster, another queue
    qa.submit(write_req(4, 2 * per, per, 14)); // a whole new cluster
    qa.submit(IoRequest {
        tag: 5,
        op: IoOp::WriteZeroes {
            offset: 3 * MIB + BS,
            len: BS,
            fua: false,
        },
        buf: IoBuf::with_capacity(0),
    });
    qa.submit(IoRequest {
        tag: 6,
        op: IoOp::Deallocate { ranges: 1 },
        buf: farflash_backend::dealloc_buf(&[(4 * MIB, MIB)]),
    });
    for q in [&mut qa, &mut qa2] {
        q.commit().expect("commit");
    }
    until("the preparation thread to be held", || d.held() >= 1);
    let mut none = Vec::new();
    assert_eq!(qa.reap(&mut none) + qa2.reap(&mut none), 0, "all held");
    assert_eq!((qa.in_flight(), qa2.in_flight()), (5, 1));
    // Meanwhile, on this thread: the held volume's reads and another
    // volume's writes and reads complete.
    assert_eq!(read_id(qa.as_mut(), 0), Some(1));
    for round in 0..20u64 {
        write(qb.as_mut(), round % 4, 100 + round, false).expect("b write");
        assert_eq!(read_id(qb.as_mut(), round % 4), Some(100 + round));
    }
    assert!(
        d.held() >= 1,
        "still held: the I/O above did not wait for it"
    );
    d.hold_thread(None);
    for c in collect(qa.as_mut(), &[1, 2, 4, 5, 6]) {
        assert!(c.result.is_ok(), "request {}: {:?}", c.tag, c.result);
    }
    let c = collect(qa2.as_mut(), &[3]);
    assert!(c[0].result.is_ok());
    let expect = [
        (0, 1),
        (1, 11),
        (2, 0),
        (per, 12),
        (per + 1, 13),
        (per + 2, 0),
        (2 * per, 14),
        (3 * per - 1, 14),
    ];
    for (block, id) in expect {
        assert_eq!(read_id(qa.as_mut(), block), Some(id), "block {block}");
    }
    let info = pool.get("a").expect("info");
    assert_eq!(info.allocated, 3 * MIB, "clusters 0, 1 and 2, once each");
}

/// The interleaving of the crate's old known limit: a read through a
/// clone resolves to its snapshot's parent's cluster and is held by the
/// device; the snapshot is decoupled and the parent deleted and
/// committed; the pool is then filled. The held cluster is neither
/// punched nor reused until the read ends: it returns the data it looked
/// up.
#[test]
fn a_read_through_a_clone_keeps_its_cluster() {
    let d = MemDevice::recording(4 << 20);
    let pool = LocalPool::create_with("p", devs(std::slice::from_ref(&d)), &opts()).expect("pool");
    pool.create_volume("v", 4 * CS).expect("v");
    let v = pool.open("v").expect("open");
    write(v.open_queue(4).expect("q").as_mut(), 0, 7, false).expect("write");
    drop(v);
    pool.snapshot("v", "p").expect("p");
    pool.snapshot("v", "s").expect("s");
    pool.clone_volume("s", "c").expect("c");
    let c = pool.open("c").expect("open");
    let mut qc = c.open_queue(4).expect("q");

    d.park_reads(Some(2 * BS as u32));
    qc.submit(read_req(9, 0, 2));
    until("the read to be parked", || d.parked() == 1);
    d.park_reads(None);
    pool.decouple("s").expect("decouple");
    pool.delete("p").expect("delete the parent");
    pool.commit().expect("commit");
    // Fill the pool: the held cluster must not be handed out.
    pool.create_volume("w", pool.stats().size).expect("w");
    let w = pool.open("w").expect("open");
    let mut qw = w.open_queue(4).expect("q");
    let per = CS / BS;
    for i in 0.. {
        match write(qw.as_mut(), i * per, 50 + i, false) {
            Ok(()) => {}
            Err(e) if is_no_space(&e) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    pool.commit().expect("commit");
    let waiting = pool.stats().freeing;
    d.release_parked(1);
    let got = collect(qc.as_mut(), &[9]).remove(0);
    assert!(got.result.is_ok());
    assert_eq!(
        decode(&got.buf[..BS as usize], 0),
        Some(7),
        "the data it looked up"
    );
    assert_eq!(decode(&got.buf[BS as usize..], 1), Some(0));
    assert_eq!(waiting, CS, "p's cluster waited for the read");
    until("the free once the read ended", || {
        pool.commit().expect("commit");
        pool.stats().freeing == 0
    });
    assert_eq!(read_id(qc.as_mut(), 0), Some(7), "the clone reads s's copy");
}

/// Continuous I/O: a read is always in flight on the volume (each one
/// released only once the next is held). A cluster freed by Deallocate
/// is reused as soon as the reads in flight when it was freed have
/// ended, though the volume never goes quiet.
#[test]
fn frees_complete_under_continuous_io() {
    let d = MemDevice::recording(4 << 20);
    let pool = LocalPool::create_with("p", devs(std::slice::from_ref(&d)), &opts()).expect("pool");
    let total = pool.stats().size;
    pool.create_volume("v", total).expect("v");
    let v = pool.open("v").expect("open");
    let mut q = v.open_queue(8).expect("q");
    let per = CS / BS;
    let clusters = total / CS;
    for i in 0..clusters {
        write(q.as_mut(), i * per, 1000 + i, false).expect("fill");
    }
    assert_eq!(pool.stats().free, 0, "full");
    d.park_reads(Some(2 * BS as u32));
    let mut tag = 100;
    q.submit(read_req(tag, (clusters - 1) * per, 2));
    until("the first read to be parked", || d.parked() == 1);
    for k in 0..4u64 {
        dealloc(q.as_mut(), k * per, per).expect("deallocate");
        pool.commit().expect("commit");
        assert_eq!(pool.stats().freeing, CS, "held by the read in flight");
        q.submit(read_req(tag + 1, (clusters - 1) * per, 2));
        until("the next read to be parked", || d.parked() == k + 2);
        d.release_parked(k + 1);
        let c = collect(q.as_mut(), &[tag]).remove(0);
        assert!(c.result.is_ok());
        assert_eq!(
            decode(&c.buf[..BS as usize], (clusters - 1) * per),
            Some(999 + clusters)
        );
        tag += 1;
        // A read is in flight, and the freed cluster is the only one.
        write(q.as_mut(), k * per, 2000 + k, false).expect("reuses the freed cluster");
        assert_eq!(read_id(q.as_mut(), k * per), Some(2000 + k));
        assert_eq!(pool.stats().free, 0);
    }
    d.release_parked(u64::MAX);
    assert!(collect(q.as_mut(), &[tag])[0].result.is_ok());
}
