//! Volume management and the data path on in-memory devices.

mod common;

use common::*;
use farflash_backend::{IoBuf, IoOp};
use farflash_pool::testing::{run, MemDevice};
use farflash_pool::{check_backends, is_no_space, LocalPool, PoolError, VolumeStore};

const MIB: u64 = 1 << 20;

#[test]
fn write_read_thin_and_reopen() {
    let (pool, d) = new_pool(&[16 * MIB]);
    let info = pool.create_volume("v", 4 * MIB).unwrap();
    assert_eq!((info.size, info.allocated, info.parent), (4 * MIB, 0, None));
    let be = pool.open("v").unwrap();
    assert!(be.volatile_write_cache());
    assert_eq!((be.capacity(), be.block_size()), (4 * MIB, 4096));
    let mut q = be.open_queue(8).unwrap();
    assert_eq!(read_id(q.as_mut(), 100), Some(0), "never written: zeroes");
    assert_eq!(pool.stats().allocated, 0, "reads allocate nothing");
    write(q.as_mut(), 3, 7, false).unwrap();
    // 17 blocks across a cluster boundary (16 blocks a cluster).
    write_span(q.as_mut(), 10, 17, 8).unwrap();
    assert_eq!(read_id(q.as_mut(), 3), Some(7));
    assert_eq!(
        read_id(q.as_mut(), 4),
        Some(0),
        "rest of a new cluster is zero"
    );
    let span = read(q.as_mut(), 9, 19);
    for k in 0..19 {
        let b = 9 + k;
        let want = if (10..27).contains(&b) { 8 } else { 0 };
        assert_eq!(
            decode(&span[(k * BS) as usize..((k + 1) * BS) as usize], b),
            Some(want),
            "block {b}"
        );
    }
    assert_eq!(pool.get("v").unwrap().allocated, 2 * CS);
    assert!(pool.get("v").unwrap().exported);
    flush(q.as_mut());
    drop(q);
    drop(be);
    assert!(!pool.get("v").unwrap().exported);
    let uuid = pool.get("v").unwrap().uuid;
    drop(pool);
    let again = LocalPool::open_with(devs(&d), &opts()).unwrap();
    let v = again.get("v").unwrap();
    assert_eq!(
        (v.uuid, v.allocated),
        (uuid, 2 * CS),
        "uuid and map persisted"
    );
    let be = again.open("v").unwrap();
    let mut q = be.open_queue(8).unwrap();
    assert_eq!(read_id(q.as_mut(), 3), Some(7));
    assert_eq!(read_id(q.as_mut(), 26), Some(8));
    assert!(check_backends(devs(&d)).ok());
}

#[test]
fn bad_requests_are_refused_not_panics() {
    let (pool, _d) = new_pool(&[8 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    let einval = Some(libc::EINVAL);
    let r = run(
        q.as_mut(),
        IoOp::Read {
            offset: MIB,
            len: 4096,
        },
        IoBuf::with_capacity(4096),
    );
    assert_eq!(r.unwrap_err().raw_os_error(), einval, "past the end");
    let r = run(
        q.as_mut(),
        IoOp::Read {
            offset: 512,
            len: 4096,
        },
        IoBuf::with_capacity(4096),
    );
    assert_eq!(r.unwrap_err().raw_os_error(), einval, "misaligned");
    let r = run(
        q.as_mut(),
        IoOp::Deallocate { ranges: 3 },
        IoBuf::with_capacity(16),
    );
    assert_eq!(r.unwrap_err().raw_os_error(), einval, "short range list");
}

#[test]
fn names_sizes_and_errors_name_the_volume() {
    let (pool, _d) = new_pool(&[8 * MIB]);
    pool.create_volume("a", MIB).unwrap();
    assert!(matches!(pool.create_volume("a", MIB), Err(PoolError::Exists(n)) if n == "a"));
    assert!(matches!(
        pool.create_volume("b/c", MIB),
        Err(PoolError::Invalid {
            field: "volume name",
            ..
        })
    ));
    assert!(matches!(
        pool.create_volume("b", 1000),
        Err(PoolError::Invalid { field: "size", .. })
    ));
    assert!(matches!(pool.get("zz"), Err(PoolError::NotFound(n)) if n == "zz"));
    pool.rename("a", "b").unwrap();
    assert!(pool.get("a").is_err());
    assert_eq!(
        pool.list()
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>(),
        ["b"]
    );
    pool.delete("b").unwrap();
    assert!(pool.list().is_empty());
    let e = PoolError::BelowUsed {
        name: "x".into(),
        size: 1,
        highest_written: 2,
    };
    assert!(e.to_string().contains("\"x\""));
}

#[test]
fn snapshot_clone_cow_decouple_delete() {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(8).unwrap();
    write(q.as_mut(), 1, 11, false).unwrap();
    write(q.as_mut(), 20, 12, false).unwrap();
    let snap = pool.snapshot("v", "s1").unwrap();
    assert!(snap.is_snapshot);
    assert_eq!(snap.allocated, 2 * CS, "the map moved to the snapshot");
    let v = pool.get("v").unwrap();
    assert_eq!(
        (v.allocated, v.shared, v.parent.as_deref()),
        (0, 2 * CS, Some("s1"))
    );
    // The open handle follows the volume: writes after the snapshot are
    // copy-on-write and leave the snapshot alone.
    write(q.as_mut(), 1, 13, false).unwrap();
    assert_eq!(read_id(q.as_mut(), 1), Some(13));
    assert_eq!(read_id(q.as_mut(), 2), Some(0));
    let sb = pool.open("s1").unwrap();
    let mut sq = sb.open_queue(4).unwrap();
    assert_eq!(read_id(sq.as_mut(), 1), Some(11));
    let w = common::write(sq.as_mut(), 1, 99, false);
    assert_eq!(
        w.unwrap_err().raw_os_error(),
        Some(libc::EROFS),
        "snapshots are read-only"
    );
    drop(sq);
    drop(sb);
    let c1 = pool.clone_volume("s1", "c1").unwrap();
    pool.clone_volume("s1", "c2").unwrap();
    assert_eq!(c1.parent.as_deref(), Some("s1"));
    assert!(matches!(
        pool.clone_volume("v", "c3"),
        Err(PoolError::NotSnapshot(_))
    ));
    let mut kids = pool.get("s1").unwrap().clones;
    kids.sort();
    assert_eq!(kids, ["c1", "c2", "v"]);
    match pool.delete("s1") {
        Err(PoolError::HasClones { children, .. }) => {
            assert!(children.contains("c1") && children.contains("c2") && children.contains('v'))
        }
        other => panic!("{other:?}"),
    }
    let cb = pool.open("c1").unwrap();
    let mut cq = cb.open_queue(4).unwrap();
    assert_eq!(read_id(cq.as_mut(), 20), Some(12));
    write(cq.as_mut(), 21, 14, false).unwrap();
    for name in ["v", "c1", "c2"] {
        pool.decouple(name).unwrap();
        assert_eq!(pool.get(name).unwrap().parent, None);
    }
    assert!(matches!(pool.decouple("v"), Err(PoolError::NoParent(_))));
    assert_eq!(
        read_id(cq.as_mut(), 20),
        Some(12),
        "decoupled data copied in"
    );
    assert_eq!(read_id(cq.as_mut(), 21), Some(14));
    assert_eq!(read_id(q.as_mut(), 20), Some(12));
    pool.delete("s1").unwrap();
    assert_eq!(read_id(q.as_mut(), 1), Some(13));
    assert_eq!(read_id(cq.as_mut(), 20), Some(12));
    assert!(matches!(pool.delete("c1"), Err(PoolError::Exported(_))));
    drop((q, be, cq, cb));
    pool.commit().unwrap();
    let r = check_backends(devs(&d));
    assert!(r.ok(), "{r:?}");
}

#[test]
fn resize_grow_shrink_rules() {
    let (pool, _d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    write(q.as_mut(), 200, 5, false).unwrap();
    pool.resize("v", 2 * MIB, false).unwrap();
    assert_eq!(be.capacity(), 2 * MIB, "grown online");
    assert!(be.refresh_capacity().unwrap());
    write(q.as_mut(), 400, 6, false).unwrap();
    assert!(matches!(
        pool.resize("v", MIB, true),
        Err(PoolError::Exported(_))
    ));
    drop(q);
    drop(be);
    match pool.resize("v", MIB, false) {
        Err(PoolError::BelowUsed {
            highest_written, ..
        }) => assert_eq!(highest_written, 26 * CS),
        other => panic!("{other:?}"),
    }
    pool.resize("v", MIB - 8192, true).unwrap();
    pool.resize("v", 2 * MIB, false).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    assert_eq!(read_id(q.as_mut(), 200), Some(5));
    assert_eq!(
        read_id(q.as_mut(), 400),
        Some(0),
        "shrunk away: zero after growing"
    );
}

#[test]
fn full_pool_fails_only_new_clusters() {
    // 1 MiB device of 64 KiB clusters: few data clusters after metadata.
    let (pool, _d) = new_pool(&[2 * MIB]);
    let total = pool.stats().size / CS;
    assert!(total >= 2, "{:?}", pool.stats());
    pool.create_volume("v", 4 * MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    for c in 0..total {
        write(q.as_mut(), c * 16, 1 + c, false).unwrap();
    }
    let e = write(q.as_mut(), total * 16, 9, false).unwrap_err();
    assert!(is_no_space(&e), "{e}");
    write(q.as_mut(), 1, 77, false).unwrap();
    assert_eq!(
        read_id(q.as_mut(), 1),
        Some(77),
        "allocated clusters keep working"
    );
    assert_eq!(read_id(q.as_mut(), total * 16), Some(0));
    flush(q.as_mut());
    // Freed space comes back once committed, not before (a crash before
    // the commit would map the cluster twice).
    dealloc(q.as_mut(), 0, 16).unwrap();
    let e = write(q.as_mut(), total * 16, 9, false).unwrap_err();
    assert!(is_no_space(&e), "reused before its free was committed");
    assert_eq!(pool.stats().freeing, CS);
    flush(q.as_mut());
    write(q.as_mut(), total * 16, 9, false).unwrap();
    assert_eq!(pool.stats().free, 0);
}

#[test]
fn dealloc_and_write_zeroes() {
    let (pool, _d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    write_span(q.as_mut(), 0, 32, 3).unwrap();
    assert_eq!(pool.get("v").unwrap().allocated, 2 * CS);
    dealloc(q.as_mut(), 0, 16).unwrap();
    assert_eq!(pool.get("v").unwrap().allocated, CS, "whole cluster freed");
    zeroes(q.as_mut(), 17, 2, true).unwrap();
    assert_eq!(read_id(q.as_mut(), 0), Some(0));
    assert_eq!(read_id(q.as_mut(), 16), Some(3));
    assert_eq!(read_id(q.as_mut(), 17), Some(0), "partial: zeroed in place");
    assert_eq!(read_id(q.as_mut(), 19), Some(3));
    // Over a snapshot: the parent's data must not show through.
    pool.snapshot("v", "s").unwrap();
    dealloc(q.as_mut(), 16, 16).unwrap();
    assert_eq!(read_id(q.as_mut(), 16), Some(0));
    zeroes(q.as_mut(), 20, 1, false).unwrap();
    assert_eq!(read_id(q.as_mut(), 20), Some(0));
    let sb = pool.open("s").unwrap();
    let mut sq = sb.open_queue(4).unwrap();
    assert_eq!(read_id(sq.as_mut(), 16), Some(3), "the snapshot keeps it");
}

#[test]
fn new_clusters_never_show_old_data() {
    let (pool, _d) = new_pool(&[2 * MIB]);
    let total = pool.stats().size / CS;
    pool.create_volume("a", 4 * MIB).unwrap();
    let be = pool.open("a").unwrap();
    let mut q = be.open_queue(4).unwrap();
    for c in 0..total {
        write_span(q.as_mut(), c * 16, 16, 40 + c).unwrap();
    }
    drop(q);
    drop(be);
    pool.delete("a").unwrap();
    pool.create_volume("b", 4 * MIB).unwrap();
    let be = pool.open("b").unwrap();
    let mut q = be.open_queue(4).unwrap();
    for c in 0..total {
        write(q.as_mut(), c * 16 + 5, 1, false).unwrap();
        let all = read(q.as_mut(), c * 16, 16);
        for k in 0..16u64 {
            let want = if k == 5 { 1 } else { 0 };
            assert_eq!(
                decode(&all[(k * BS) as usize..((k + 1) * BS) as usize], c * 16 + k),
                Some(want)
            );
        }
    }
}

#[test]
fn multi_device_pool_and_wrong_devices() {
    let d: Vec<MemDevice> = [4 * MIB, 3 * MIB]
        .iter()
        .map(|&s| MemDevice::recording(s))
        .collect();
    let pool = LocalPool::create_with("two", devs(&d), &opts()).unwrap();
    let stats = pool.stats();
    pool.create_volume("v", 8 * MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    let clusters = stats.size / CS;
    for c in 0..clusters {
        write(q.as_mut(), c * 16, 100 + c, false).unwrap();
    }
    flush(q.as_mut());
    drop((q, be, pool));
    // Any order opens.
    let rev = vec![
        ("b".to_string(), d[1].backend()),
        ("a".to_string(), d[0].backend()),
    ];
    let pool = LocalPool::open_with(rev, &opts()).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    for c in 0..clusters {
        assert_eq!(read_id(q.as_mut(), c * 16), Some(100 + c));
    }
    drop((q, be, pool));
    let missing = LocalPool::open_with(vec![("a".into(), d[0].backend())], &opts());
    let msg = missing.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("device 1") && msg.contains("missing"), "{msg}");
    let bigger = MemDevice::from_image(4 * MIB, d[1].image());
    let r = LocalPool::open_with(
        vec![
            ("a".into(), d[0].backend()),
            ("big".into(), bigger.backend()),
        ],
        &opts(),
    );
    let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("big") && msg.contains("bytes"), "{msg}");
    let blank = MemDevice::recording(4 * MIB);
    let r = LocalPool::open_with(vec![("blank".into(), blank.backend())], &opts());
    let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("blank") && msg.contains("no valid superblock"),
        "{msg}"
    );
}

#[test]
fn snapshot_writes_the_same_metadata_whatever_the_size() {
    let (pool, d) = new_pool(&[16 * MIB]);
    let mut cost = Vec::new();
    for (name, size) in [("small", MIB), ("huge", 1 << 50)] {
        pool.create_volume(name, size).unwrap();
        let be = pool.open(name).unwrap();
        let mut q = be.open_queue(4).unwrap();
        for c in 0..8 {
            write(q.as_mut(), c * 16, 1 + c, false).unwrap();
        }
        flush(q.as_mut());
        let before = d[0].log_len();
        pool.snapshot(name, &format!("{name}-snap")).unwrap();
        let ops = d[0].log()[before..].to_vec();
        let bytes: usize = ops
            .iter()
            .map(|o| match o {
                farflash_pool::testing::Op::Write { data, .. } => data.len(),
                _ => 0,
            })
            .sum();
        cost.push((ops.len(), bytes));
        assert_eq!(read_id(q.as_mut(), 16), Some(2));
    }
    assert_eq!(
        cost[0], cost[1],
        "a 2^50-byte volume's snapshot costs what a 1 MiB one does"
    );
}

#[test]
fn background_commits_make_mappings_durable() {
    let d = vec![MemDevice::recording(16 * MIB)];
    let o = farflash_pool::PoolOptions {
        commit_interval: Some(std::time::Duration::from_millis(20)),
        ..opts()
    };
    let pool = LocalPool::create_with("bg", devs(&d), &o).unwrap();
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    write(q.as_mut(), 5, 42, false).unwrap();
    // No Flush: the committer commits the mapping (and flushes the data).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while pool.uncommitted() {
        assert!(std::time::Instant::now() < deadline, "no background commit");
        std::thread::yield_now();
    }
    // A crash now keeps what the device had at its last flush.
    let log = d[0].log();
    let last = log
        .iter()
        .rposition(|o| matches!(o, farflash_pool::testing::Op::Flush))
        .unwrap();
    let mut img = farflash_pool::testing::Image::default();
    log[..=last].iter().for_each(|o| img.apply(o));
    let crashed = MemDevice::from_image(16 * MIB, img);
    let again = LocalPool::open_with(devs(&[crashed]), &opts()).unwrap();
    let be = again.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    assert_eq!(read_id(q.as_mut(), 5), Some(42));
}

#[test]
fn stores_are_objects_and_infos_serialize() {
    let (pool, _d) = new_pool(&[8 * MIB]);
    let store: std::sync::Arc<dyn VolumeStore> = std::sync::Arc::new(pool);
    let info = store.create_volume("v", MIB).unwrap();
    assert_eq!((store.kind(), store.name()), ("local", "p"));
    let j = serde_json::to_value(&info).unwrap();
    assert_eq!(j["uuid"], info.uuid.hyphenated().to_string());
    assert_eq!(j["size"], MIB);
    let s = serde_json::to_value(store.stats()).unwrap();
    assert_eq!(s["cluster_size"], CS);
}

#[test]
fn a_flush_needing_a_commit_does_not_block_the_submitter() {
    let d = vec![MemDevice::recording(16 * MIB)];
    let o = farflash_pool::PoolOptions {
        commit_interval: Some(std::time::Duration::from_secs(3600)),
        ..opts()
    };
    let pool = LocalPool::create_with("nb", devs(&d), &o).unwrap();
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    write(q.as_mut(), 3, 9, false).unwrap();
    assert!(pool.uncommitted());
    d[0].hold_flushes(true);
    // A watchdog releases the devices if submit blocks (the test then
    // fails instead of hanging).
    let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (dog_dev, dog_fired) = (d[0].clone(), fired.clone());
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if rx.recv_timeout(std::time::Duration::from_secs(20)).is_err() {
            dog_fired.store(true, std::sync::atomic::Ordering::SeqCst);
            dog_dev.hold_flushes(false);
        }
    });
    // The Flush needs a commit, which needs device flushes, which are
    // held: a synchronous commit would not return from submit.
    q.submit(farflash_backend::IoRequest {
        tag: 7,
        op: IoOp::Flush,
        buf: IoBuf::with_capacity(0),
    });
    q.commit().unwrap();
    let mut out = Vec::new();
    assert!(
        !fired.load(std::sync::atomic::Ordering::SeqCst),
        "submit blocked on the commit"
    );
    tx.send(()).unwrap();
    dog.join().unwrap();
    assert_eq!(q.reap(&mut out), 0, "not complete while the devices hold");
    assert_eq!(q.in_flight(), 1);
    let fd = q.notify_fd().expect("a wake-up for later completions");
    d[0].hold_flushes(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while out.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "flush never completed"
        );
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, 100) };
        q.reap(&mut out);
    }
    assert_eq!(out[0].tag, 7);
    out[0].result.as_ref().unwrap();
    assert!(!pool.uncommitted());
    // FUA writes that allocate wait the same way, and complete.
    write(q.as_mut(), 40, 10, true).unwrap();
    assert!(!pool.uncommitted());
}

#[test]
fn freed_clusters_are_punched_out_of_the_device() {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    write_span(q.as_mut(), 0, 48, 4).unwrap();
    flush(q.as_mut());
    let before = d[0].log_len();
    dealloc(q.as_mut(), 0, 32).unwrap();
    flush(q.as_mut());
    let punched: Vec<u64> = d[0].log()[before..]
        .iter()
        .filter_map(|o| match o {
            farflash_pool::testing::Op::Zero { len, .. } => Some(*len),
            _ => None,
        })
        .collect();
    assert_eq!(punched, vec![2 * CS], "two adjacent clusters, one punch");
    assert_eq!(pool.stats().allocated, CS);
}

#[test]
fn a_first_whole_cluster_write_is_its_own_preparation() {
    use farflash_pool::testing::Op;
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    let count = |ops: &[Op]| -> (usize, usize) {
        let zeroes = ops
            .iter()
            .filter(|o| matches!(o, Op::Zero { len, .. } if *len == CS))
            .count();
        let writes = ops
            .iter()
            .filter(|o| matches!(o, Op::Write { data, .. } if data.len() as u64 == CS))
            .count();
        (zeroes, writes)
    };
    let before = d[0].log_len();
    write_span(q.as_mut(), 16, 16, 5).unwrap();
    assert_eq!(
        count(&d[0].log()[before..]),
        (0, 1),
        "one write, no zeroing"
    );
    for b in 16..32 {
        assert_eq!(read_id(q.as_mut(), b), Some(5));
    }
    assert_eq!(read_id(q.as_mut(), 0), Some(0));
    assert_eq!(pool.get("v").unwrap().allocated, CS);
    // Over a snapshot: no copy of the parent's cluster either.
    pool.snapshot("v", "s").unwrap();
    let before = d[0].log_len();
    write_span(q.as_mut(), 16, 16, 6).unwrap();
    assert_eq!(count(&d[0].log()[before..]), (0, 1), "one write, no copy");
    assert_eq!(read_id(q.as_mut(), 20), Some(6));
    let sb = pool.open("s").unwrap();
    let mut sq = sb.open_queue(4).unwrap();
    assert_eq!(read_id(sq.as_mut(), 20), Some(5));
    // A partial first write is one write of the whole cluster too: its
    // data merged into zeroes (a file's blocks end up written, not
    // unwritten extents every later write converts)...
    let before = d[0].log_len();
    write(q.as_mut(), 40, 7, false).unwrap();
    let log = d[0].log()[before..].to_vec();
    assert_eq!(count(&log), (0, 1), "one write, no zeroing");
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(read_id(q.as_mut(), 40), Some(7));
    for b in (32..48).filter(|&b| b != 40) {
        assert_eq!(read_id(q.as_mut(), b), Some(0), "block {b}: zeroes");
    }
    // ...or into the parent's data, over a snapshot.
    write_span(q.as_mut(), 48, 16, 8).unwrap();
    pool.snapshot("v", "s2").unwrap();
    let before = d[0].log_len();
    write(q.as_mut(), 50, 9, false).unwrap();
    let log = d[0].log()[before..].to_vec();
    assert_eq!(count(&log), (0, 1), "one write, no separate copy");
    assert_eq!(log.len(), 1, "{log:?}");
    for b in 48..64 {
        let want = if b == 50 { 9 } else { 8 };
        assert_eq!(read_id(q.as_mut(), b), Some(want), "block {b}");
    }
    let sb = pool.open("s2").unwrap();
    let mut sq = sb.open_queue(4).unwrap();
    assert_eq!(read_id(sq.as_mut(), 50), Some(8));
    // The image buffer was left zeroed: the next cluster reads zeroes.
    write(q.as_mut(), 70, 10, false).unwrap();
    for b in (64..80).filter(|&b| b != 70) {
        assert_eq!(read_id(q.as_mut(), b), Some(0), "block {b}: zeroes");
    }
    assert_eq!(read_id(q.as_mut(), 70), Some(10));
}

#[test]
fn a_block_device_zeroes_a_new_cluster_in_place() {
    use farflash_pool::testing::Op;
    let d = MemDevice::recording(16 * MIB);
    d.claim_block_device();
    let pool = LocalPool::create_with("p", devs(std::slice::from_ref(&d)), &opts()).unwrap();
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    let before = d.log_len();
    write(q.as_mut(), 40, 7, false).unwrap();
    let log = d.log()[before..].to_vec();
    assert!(
        matches!(&log[..], [Op::Zero { len, .. }, Op::Write { data, .. }]
            if *len == CS && data.len() as u64 == BS),
        "Write Zeroes of the cluster, then the 4 KiB write: {log:?}"
    );
    assert_eq!(read_id(q.as_mut(), 40), Some(7));
    assert_eq!(read_id(q.as_mut(), 41), Some(0));
    // Spanning two new clusters: both zeroed in place, one write after.
    let before = d.log_len();
    write_span(q.as_mut(), 62, 4, 8).unwrap();
    let log = d.log()[before..].to_vec();
    let zeroes = log.iter().filter(|o| matches!(o, Op::Zero { .. })).count();
    assert_eq!(zeroes, 2, "{log:?}");
}

#[test]
fn a_write_spanning_new_clusters_on_a_file_writes_zeroes_not_write_zeroes() {
    use farflash_pool::testing::Op;
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    let be = pool.open("v").unwrap();
    let mut q = be.open_queue(4).unwrap();
    let before = d[0].log_len();
    write_span(q.as_mut(), 14, 4, 3).unwrap();
    let log = d[0].log()[before..].to_vec();
    assert!(
        !log.iter().any(|o| matches!(o, Op::Zero { .. })),
        "no Write Zeroes: {log:?}"
    );
    let whole = log
        .iter()
        .filter(|o| matches!(o, Op::Write { data, .. } if data.len() as u64 == CS && data.iter().all(|&b| b == 0)))
        .count();
    assert_eq!(whole, 2, "both clusters written with zeroes first");
    for b in 0..32 {
        let want = if (14..18).contains(&b) { 3 } else { 0 };
        assert_eq!(read_id(q.as_mut(), b), Some(want), "block {b}");
    }
}

#[test]
fn a_snapshot_can_be_decoupled_so_its_parent_can_go() {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("v", MIB).unwrap();
    {
        let be = pool.open("v").unwrap();
        let mut q = be.open_queue(4).unwrap();
        write(q.as_mut(), 1, 21, false).unwrap();
        write(q.as_mut(), 17, 22, false).unwrap();
    }
    pool.snapshot("v", "s1").unwrap();
    pool.clone_volume("s1", "c").unwrap();
    {
        let be = pool.open("c").unwrap();
        let mut q = be.open_queue(4).unwrap();
        write(q.as_mut(), 2, 23, false).unwrap();
    }
    pool.snapshot("c", "s2").unwrap(); // s2's parent is s1
    assert_eq!(pool.get("s2").unwrap().parent.as_deref(), Some("s1"));
    assert!(matches!(
        pool.delete("s1"),
        Err(PoolError::HasClones { .. })
    ));
    pool.decouple("s2").unwrap();
    pool.decouple("v").unwrap();
    assert_eq!(pool.get("s2").unwrap().parent, None);
    pool.delete("s1").unwrap();
    for (name, want) in [
        ("s2", [21, 22, 23]),
        ("c", [21, 22, 23]),
        ("v", [21, 22, 0]),
    ] {
        let be = pool.open(name).unwrap();
        let mut q = be.open_queue(4).unwrap();
        let got = [1, 17, 2].map(|b| read_id(q.as_mut(), b).unwrap());
        assert_eq!(got, want, "{name}");
    }
    pool.commit().unwrap();
    drop(pool);
    let r = check_backends(devs(&d));
    assert!(r.ok(), "{r:?}");
    let again = LocalPool::open_with(devs(&d), &opts()).unwrap();
    let be = again.open("c").unwrap();
    let mut q = be.open_queue(4).unwrap();
    assert_eq!(read_id(q.as_mut(), 17), Some(22));
}
