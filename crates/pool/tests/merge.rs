//! Deleting a snapshot that has exactly one child merges it into the
//! child (as SPDK's blobstore does): the child inherits the snapshot's
//! clusters it did not overwrite and the snapshot's parent, the clusters
//! it overwrote are freed, and the snapshot is gone.

mod common;

use common::*;
use farflash_backend::BackendQueue;
use farflash_pool::{check_backends, LocalPool, PoolError, VolumeStore};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
/// Blocks per cluster.
const PER: u64 = CS / BS;

fn ids(q: &mut dyn BackendQueue, blocks: u64) -> Vec<Option<u64>> {
    (0..blocks).map(|b| read_id(q, b)).collect()
}

fn volume_ids(pool: &LocalPool, name: &str, blocks: u64) -> Vec<Option<u64>> {
    let be = pool.open(name).expect("open");
    let mut q = be.open_queue(4).expect("queue");
    ids(q.as_mut(), blocks)
}

/// Commits until every freed cluster is free again, then checks that the
/// pool's used space is what the volumes hold.
fn settled_accounting(pool: &LocalPool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        pool.commit().expect("commit");
        if pool.stats().freeing == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "frees never settle");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let own: u64 = pool.list().iter().map(|v| v.allocated).sum();
    assert_eq!(own, pool.stats().allocated, "used = what volumes hold");
}

fn reopened_ok(pool: LocalPool, d: &[farflash_pool::testing::MemDevice]) -> LocalPool {
    pool.commit().expect("commit");
    drop(pool);
    let r = check_backends(devs(d));
    assert!(r.ok(), "{r:?}");
    LocalPool::open_with(devs(d), &opts()).expect("reopen")
}

#[test]
fn snapshot_with_its_volume_as_only_child_merges() {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", 8 * CS).unwrap();
    let blocks = 8 * PER;
    {
        let be = pool.open("v").unwrap();
        let mut q = be.open_queue(4).unwrap();
        for c in 0..4 {
            write_span(q.as_mut(), c * PER, PER, 10 + c).unwrap();
        }
    }
    let before_snap = pool.stats().allocated;
    pool.snapshot("v", "s").unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    write_span(q.as_mut(), PER, PER, 21).unwrap(); // cluster 1, whole
    write(q.as_mut(), 2 * PER + 3, 22, false).unwrap(); // cluster 2, copy-on-write
    write(q.as_mut(), 5 * PER, 23, false).unwrap(); // cluster 5, new
    zeroes(q.as_mut(), 3 * PER, PER, false).unwrap(); // cluster 3 hides the snapshot's
    let want = ids(q.as_mut(), blocks);
    assert_eq!(want[(3 * PER) as usize], Some(0));
    assert_eq!(want[PER as usize], Some(21));
    assert_eq!(pool.get("s").unwrap().clones, ["v"]);
    settled_accounting(&pool);
    assert_eq!(pool.stats().allocated, before_snap + 3 * CS);

    pool.delete("s").unwrap(); // v is exported and open: merged online
    assert!(matches!(pool.get("s"), Err(PoolError::NotFound(_))));
    let v = pool.get("v").unwrap();
    assert_eq!(v.parent, None);
    assert_eq!(v.shared, 0);
    // Own: clusters 0 (inherited), 1, 2 (copied), 5; cluster 3 is a hole.
    assert_eq!(v.allocated, 4 * CS);
    assert_eq!(ids(q.as_mut(), blocks), want, "same data after the merge");
    settled_accounting(&pool);
    assert_eq!(
        pool.stats().allocated,
        4 * CS,
        "the overwritten clusters (1, 2, 3) are freed"
    );
    // The inherited cluster is the volume's own now: writes go in place.
    write(q.as_mut(), 1, 31, false).unwrap();
    assert_eq!(read_id(q.as_mut(), 1), Some(31));
    assert_eq!(read_id(q.as_mut(), 0), Some(10));
    settled_accounting(&pool);
    assert_eq!(pool.stats().allocated, 4 * CS);
    let mut want = want;
    want[1] = Some(31);
    drop((q, be));
    let pool = reopened_ok(pool, &d);
    assert_eq!(volume_ids(&pool, "v", blocks), want, "after reopening");
    settled_accounting(&pool);
}

#[test]
fn chain_of_snapshots_merges_step_by_step() {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", 6 * CS).unwrap();
    let blocks = 6 * PER;
    let w = |pool: &LocalPool, block: u64, id: u64| {
        let be = pool.open("v").unwrap();
        let mut q = be.open_queue(4).unwrap();
        write(q.as_mut(), block, id, false).unwrap();
    };
    w(&pool, 0, 1);
    w(&pool, PER, 2);
    pool.snapshot("v", "s1").unwrap();
    w(&pool, PER, 3);
    w(&pool, 2 * PER, 4);
    pool.snapshot("v", "s2").unwrap(); // s2's parent is s1
    w(&pool, 2 * PER, 5);
    w(&pool, 3 * PER, 6);
    pool.snapshot("v", "s3").unwrap();
    pool.clone_volume("s3", "c").unwrap();
    w(&pool, 4 * PER, 7);
    let snap_ids = |pool: &LocalPool| {
        ["s1", "s2", "s3"].map(|s| pool.get(s).ok().map(|_| volume_ids(pool, s, blocks)))
    };
    let want_v = volume_ids(&pool, "v", blocks);
    let want_c = volume_ids(&pool, "c", blocks);
    let want_s = snap_ids(&pool);
    assert_eq!(pool.get("s2").unwrap().parent.as_deref(), Some("s1"));

    // s3 has two children (v and the clone c): refused, naming them.
    match pool.delete("s3") {
        Err(PoolError::HasClones { children, .. }) => {
            assert!(
                children.contains('v') && children.contains('c'),
                "{children}"
            )
        }
        other => panic!("{other:?}"),
    }
    // The middle of the chain: s2's only child is s3.
    pool.delete("s2").unwrap();
    assert_eq!(pool.get("s3").unwrap().parent.as_deref(), Some("s1"));
    assert_eq!(snap_ids(&pool)[2], want_s[2], "s3 reads the same");
    assert_eq!(snap_ids(&pool)[0], want_s[0], "s1 untouched");
    settled_accounting(&pool);
    // The root: s1's only child is s3.
    pool.delete("s1").unwrap();
    assert_eq!(pool.get("s3").unwrap().parent, None);
    assert_eq!(snap_ids(&pool)[2], want_s[2]);
    settled_accounting(&pool);
    // With v decoupled, s3's only child is the clone c.
    pool.decouple("v").unwrap();
    pool.delete("s3").unwrap();
    assert_eq!(pool.get("c").unwrap().parent, None);
    assert_eq!(pool.list().len(), 2);
    assert_eq!(volume_ids(&pool, "v", blocks), want_v);
    assert_eq!(volume_ids(&pool, "c", blocks), want_c);
    settled_accounting(&pool);
    let pool = reopened_ok(pool, &d);
    assert_eq!(volume_ids(&pool, "v", blocks), want_v);
    assert_eq!(volume_ids(&pool, "c", blocks), want_c);
    settled_accounting(&pool);
}

#[test]
fn merge_into_a_resized_clone() {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", 4 * CS).unwrap();
    {
        let be = pool.open("v").unwrap();
        let mut q = be.open_queue(4).unwrap();
        for c in 0..4 {
            write(q.as_mut(), c * PER, 40 + c, false).unwrap();
        }
    }
    pool.snapshot("v", "s").unwrap();
    pool.clone_volume("s", "small").unwrap();
    pool.clone_volume("s", "big").unwrap();
    pool.decouple("v").unwrap();
    pool.resize("small", 2 * CS, true).unwrap();
    pool.resize("big", 6 * CS, false).unwrap();
    pool.delete("big").unwrap();
    let want = volume_ids(&pool, "small", 2 * PER);
    pool.delete("s").unwrap();
    assert_eq!(pool.get("small").unwrap().parent, None);
    assert_eq!(pool.get("small").unwrap().allocated, 2 * CS);
    assert_eq!(volume_ids(&pool, "small", 2 * PER), want);
    settled_accounting(&pool);
    // v (4 clusters, decoupled) and small (2): the snapshot's clusters
    // beyond small's size are freed.
    assert_eq!(pool.stats().allocated, 6 * CS);
    let pool = reopened_ok(pool, &d);
    assert_eq!(volume_ids(&pool, "small", 2 * PER), want);
}

/// The child is exported, with a writer and a reader running, while
/// snapshots of it are taken and merged back again and again.
#[test]
fn exported_child_keeps_its_data_through_merges() {
    let (pool, d) = new_pool(&[32 * MIB]);
    let pool = Arc::new(pool);
    let clusters = 16;
    pool.create_volume("v", clusters * CS).unwrap();
    let be = pool.open("v").unwrap();
    // Clusters 0..8 written once (the reader checks them); 8.. by the
    // writer, over and over.
    {
        let mut q = be.open_queue(4).unwrap();
        for b in 0..8 * PER {
            write(q.as_mut(), b, 1_000_000 + b, false).unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (be, stop) = (be.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut q = be.open_queue(4).unwrap();
            let mut last = HashMap::new();
            let mut n = 0u64;
            let mut x = 7u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let b = 8 * PER + (x >> 33) % (8 * PER);
                write(q.as_mut(), b, n, n.is_multiple_of(5)).unwrap();
                last.insert(b, n);
                if n.is_multiple_of(50) {
                    flush(q.as_mut());
                }
            }
            last
        })
    };
    let reader = {
        let (be, stop) = (be.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut q = be.open_queue(4).unwrap();
            let mut rounds = 0u64;
            while !stop.load(Ordering::SeqCst) {
                for c in 0..8 {
                    let data = read(q.as_mut(), c * PER, PER);
                    for k in 0..PER {
                        let b = c * PER + k;
                        let got = decode(&data[(k * BS) as usize..((k + 1) * BS) as usize], b);
                        assert_eq!(got, Some(1_000_000 + b), "block {b} during merges");
                    }
                }
                rounds += 1;
            }
            rounds
        })
    };
    for i in 0..40 {
        let s = format!("s{i}");
        pool.snapshot("v", &s).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        pool.delete(&s).unwrap();
        assert_eq!(pool.get("v").unwrap().parent, None);
    }
    // A chain merged from its middle while I/O runs.
    pool.snapshot("v", "a").unwrap();
    pool.snapshot("v", "b").unwrap();
    pool.delete("a").unwrap();
    assert_eq!(pool.get("b").unwrap().parent, None);
    pool.delete("b").unwrap();
    stop.store(true, Ordering::SeqCst);
    let last = writer.join().expect("writer");
    assert!(reader.join().expect("reader") > 0);
    let mut q = be.open_queue(4).unwrap();
    for b in 0..8 * PER {
        assert_eq!(read_id(q.as_mut(), b), Some(1_000_000 + b));
    }
    for b in 8 * PER..16 * PER {
        assert_eq!(
            read_id(q.as_mut(), b),
            Some(last.get(&b).copied().unwrap_or(0))
        );
    }
    assert_eq!(pool.list().len(), 1);
    drop((q, be));
    settled_accounting(&pool);
    assert!(pool.stats().allocated <= clusters * CS);
    let pool = Arc::into_inner(pool).expect("only owner");
    let pool = reopened_ok(pool, &d);
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    for b in 8 * PER..16 * PER {
        assert_eq!(
            read_id(q.as_mut(), b),
            Some(last.get(&b).copied().unwrap_or(0))
        );
    }
}

/// A snapshot merged into a snapshot that has children of its own: the
/// children read through the merged layer, so a later decouple of it and
/// the deletion of its old ancestor leave their data alone.
#[test]
fn merge_into_a_snapshot_with_children() {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", 4 * CS).unwrap();
    let blocks = 4 * PER;
    let w = |pool: &LocalPool, block: u64, id: u64| {
        let be = pool.open("v").unwrap();
        let mut q = be.open_queue(4).unwrap();
        write(q.as_mut(), block, id, false).unwrap();
    };
    w(&pool, 0, 1);
    w(&pool, PER, 2);
    pool.snapshot("v", "g").unwrap();
    w(&pool, PER, 3);
    w(&pool, 2 * PER, 4);
    pool.snapshot("v", "s").unwrap();
    w(&pool, 2 * PER, 5);
    pool.snapshot("v", "c").unwrap();
    pool.clone_volume("c", "cl").unwrap();
    w(&pool, 3 * PER, 6);
    let want_v = volume_ids(&pool, "v", blocks);
    let want_c = volume_ids(&pool, "c", blocks);
    assert_eq!(want_v[0], Some(1));
    pool.delete("s").unwrap(); // c's children are v and cl
    assert_eq!(pool.get("c").unwrap().parent.as_deref(), Some("g"));
    pool.decouple("c").unwrap();
    pool.delete("g").unwrap();
    settled_accounting(&pool);
    assert_eq!(volume_ids(&pool, "v", blocks), want_v);
    assert_eq!(volume_ids(&pool, "c", blocks), want_c);
    assert_eq!(volume_ids(&pool, "cl", blocks), want_c);
    // Copy-on-write from the merged chain still works.
    w(&pool, 1, 7);
    let mut want_v = want_v;
    want_v[1] = Some(7);
    assert_eq!(volume_ids(&pool, "v", blocks), want_v);
    assert_eq!(volume_ids(&pool, "c", blocks), want_c);
    settled_accounting(&pool);
    let pool = reopened_ok(pool, &d);
    assert_eq!(volume_ids(&pool, "v", blocks), want_v);
    assert_eq!(volume_ids(&pool, "cl", blocks), want_c);
}
