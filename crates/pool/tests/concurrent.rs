//! Concurrency: snapshots taken while writes are in flight are point in
//! time; management calls racing on one volume are serialized, fail with
//! clear errors, and leave other volumes alone.

mod common;

use common::{pattern, read_id, write, BS};
use farflash_backend::{BackendQueue, IoBuf, IoOp, IoRequest};
use farflash_pool::testing::{run, MemDevice};
use farflash_pool::{check_backends, LocalPool, PoolError, PoolOptions, VolumeStore};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const BLOCKS: [u64; 8] = [0, 16, 33, 50, 67, 84, 101, 118];

struct Tracks {
    started: Vec<AtomicU64>,
    completed: Vec<AtomicU64>,
    stop: AtomicBool,
}

/// Writes round after round (round r writes id r to every block of
/// `BLOCKS`), up to 8 requests in flight, until stopped.
fn writer(be: farflash_backend::SharedBackend, t: Arc<Tracks>) {
    let mut q: Box<dyn BackendQueue> = be.open_queue(16).expect("queue");
    let mut round = 0u64;
    let mut done = Vec::new();
    while !t.stop.load(Ordering::SeqCst) {
        round += 1;
        for (k, &b) in BLOCKS.iter().enumerate() {
            t.started[k].store(round, Ordering::SeqCst);
            let op = IoOp::Write {
                offset: b * BS,
                len: BS as u32,
                fua: false,
            };
            q.submit(IoRequest {
                tag: (round << 8) | k as u64,
                op,
                buf: IoBuf::from_slice(&pattern(round, b)),
            });
        }
        q.commit().expect("commit");
        let mut left = BLOCKS.len();
        while left > 0 {
            done.clear();
            q.reap(&mut done);
            for c in &done {
                c.result.as_ref().expect("write");
                let k = (c.tag & 0xff) as usize;
                t.completed[k].fetch_max(c.tag >> 8, Ordering::SeqCst);
                left -= 1;
            }
            if left > 0 {
                if let Some(fd) = q.notify_fd() {
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call.
                    unsafe { libc::poll(&mut p, 1, 50) };
                }
            }
        }
    }
}

#[test]
fn snapshots_under_in_flight_writes_are_point_in_time() {
    let dir = std::env::temp_dir().join(format!("farflash-pool-pit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("dev");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(64 * MIB))
        .expect("file");
    let opts = PoolOptions {
        cluster_size: Some(64 << 10),
        ..PoolOptions::default()
    };
    let pool = LocalPool::create_opts("pit", std::slice::from_ref(&path), &opts).expect("create");
    pool.create_volume("v", 8 * MIB).expect("volume");
    let be = pool.open("v").expect("open");
    let t = Arc::new(Tracks {
        started: BLOCKS.iter().map(|_| AtomicU64::new(0)).collect(),
        completed: BLOCKS.iter().map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
    });
    let (tw, bw) = (t.clone(), be.clone());
    let h = std::thread::spawn(move || writer(bw, tw));
    for s in 0..5 {
        // Wait for progress (a condition, not a sleep).
        let want = t.completed[0].load(Ordering::SeqCst) + 2;
        while t.completed[0].load(Ordering::SeqCst) < want {
            std::thread::yield_now();
        }
        let before: Vec<u64> = t
            .completed
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect();
        let name = format!("s{s}");
        pool.snapshot("v", &name).expect("snapshot");
        let after: Vec<u64> = t.started.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        let sbe = pool.open(&name).expect("open snapshot");
        let mut sq = sbe.open_queue(4).expect("queue");
        let first: Vec<Option<u64>> = BLOCKS.iter().map(|&b| read_id(sq.as_mut(), b)).collect();
        for (k, got) in first.iter().enumerate() {
            let got = got.expect("a whole write, not a mix");
            assert!(
                before[k] <= got && got <= after[k],
                "snapshot {name} block {}: {got} outside [{}, {}]",
                BLOCKS[k],
                before[k],
                after[k]
            );
        }
        // Writes go on: the snapshot does not move.
        let want = t.completed[0].load(Ordering::SeqCst) + 2;
        while t.completed[0].load(Ordering::SeqCst) < want {
            std::thread::yield_now();
        }
        let again: Vec<Option<u64>> = BLOCKS.iter().map(|&b| read_id(sq.as_mut(), b)).collect();
        assert_eq!(first, again, "snapshot {name} changed");
    }
    t.stop.store(true, Ordering::SeqCst);
    h.join().expect("writer");
    drop(be);
    drop(pool);
    let r = farflash_pool::check(std::slice::from_ref(&path));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(r.ok(), "{r:?}");
}

#[test]
fn racing_management_calls_are_serialized() {
    let dev = MemDevice::recording(64 * MIB);
    let opts = PoolOptions {
        cluster_size: Some(64 << 10),
        max_volumes: 512,
        commit_interval: None,
        ..PoolOptions::default()
    };
    let pool = Arc::new(
        LocalPool::create_with("race", vec![("m".into(), dev.backend())], &opts).expect("create"),
    );
    pool.create_volume("hot", 2 * MIB).expect("hot");
    pool.create_volume("cold", 2 * MIB).expect("cold");
    {
        let be = pool.open("cold").expect("open");
        let mut q = be.open_queue(4).expect("queue");
        for b in 0..32 {
            write(q.as_mut(), b * 16, 1000 + b, false).expect("write");
        }
        run(q.as_mut(), IoOp::Flush, IoBuf::with_capacity(0)).expect("flush");
    }
    let hot = pool.open("hot").expect("open hot");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (hot, stop) = (hot.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut q = hot.open_queue(4).expect("queue");
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                write(q.as_mut(), n % 500, n, n.is_multiple_of(7)).expect("hot write");
            }
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut errors = Vec::new();
                for i in 0..25 {
                    let snap = format!("s{w}-{i}");
                    let r = match i % 5 {
                        0 | 3 => pool.snapshot("hot", &snap).map(drop),
                        1 => pool
                            .clone_volume(&format!("s{w}-{}", i - 1), &format!("c{w}-{i}"))
                            .map(drop),
                        2 => pool.resize("hot", (3 + i as u64) * MIB, false),
                        _ => pool.delete(&format!("s{}-{}", (w + 1) % 4, i - 1)),
                    };
                    if let Err(e) = r {
                        errors.push(e);
                    }
                }
                errors
            })
        })
        .collect();
    for h in workers {
        for e in h.join().expect("worker") {
            // Deleting a snapshot another thread cloned, or one not made
            // yet; a resize below another thread's grow is a shrink of an
            // exported volume: clear, named refusals.
            let ok = matches!(e, PoolError::HasClones { .. } | PoolError::NotFound(_))
                || matches!(&e, PoolError::Exported(n) if n == "hot");
            assert!(ok, "{e}");
            assert!(e.to_string().contains('"'), "names the volume: {e}");
        }
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("writer");
    drop(hot);
    let be = pool.open("cold").expect("open");
    let mut q = be.open_queue(4).expect("queue");
    for b in 0..32 {
        assert_eq!(
            read_id(q.as_mut(), b * 16),
            Some(1000 + b),
            "cold untouched"
        );
    }
    drop((q, be));
    let names: Vec<String> = pool.list().into_iter().map(|v| v.name).collect();
    pool.commit().expect("commit");
    drop(pool);
    let r = check_backends(vec![("m".into(), dev.backend())]);
    assert!(r.ok(), "{r:?}");
    let again = LocalPool::open_with(vec![("m".into(), dev.backend())], &opts).expect("reopen");
    let back: Vec<String> = again.list().into_iter().map(|v| v.name).collect();
    assert_eq!(names, back);
}

#[test]
fn a_queue_dropped_with_writes_in_flight_does_not_stall_snapshots() {
    let dir = std::env::temp_dir().join(format!("farflash-pool-drop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("dev");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(32 * MIB))
        .expect("file");
    let opts = PoolOptions {
        cluster_size: Some(64 << 10),
        ..PoolOptions::default()
    };
    let pool = LocalPool::create_opts("drop", std::slice::from_ref(&path), &opts).expect("create");
    pool.create_volume("v", 4 * MIB).expect("volume");
    let be = pool.open("v").expect("open");
    {
        let mut q = be.open_queue(32).expect("queue");
        write(q.as_mut(), 0, 1, false).expect("allocate");
        for i in 0..16u64 {
            let op = IoOp::Write {
                offset: (i % 8) * BS,
                len: BS as u32,
                fua: false,
            };
            q.submit(IoRequest {
                tag: i,
                op,
                buf: IoBuf::from_slice(&pattern(2, i % 8)),
            });
        }
        q.commit().expect("commit");
        // Dropped without reaping.
    }
    let t = std::time::Instant::now();
    pool.snapshot("v", "s").expect("snapshot");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    drop((be, pool));
    let _ = std::fs::remove_dir_all(&dir);
}
