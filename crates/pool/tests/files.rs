//! Pools over real files: the io_uring data path (requests complete
//! later, through the queue's notification fd), `check` on paths, and
//! damaged metadata named by `check` and refused by `open`.

mod common;

use common::{decode, pattern, BS};
use farflash_backend::{BackendQueue, IoBuf, IoOp};
use farflash_pool::testing::run;
use farflash_pool::{check, LocalPool, PoolError, VolumeStore};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const MIB: u64 = 1 << 20;

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("farflash-pool-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        Dir(p)
    }

    fn file(&self, name: &str, size: u64) -> PathBuf {
        let p = self.0.join(name);
        let f = std::fs::File::create(&p).expect("create file");
        f.set_len(size).expect("size");
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Submits several requests at once, then waits on the notification fd
/// for all of them (the way an event loop drives a queue).
fn batch(q: &mut dyn BackendQueue, reqs: Vec<(IoOp, IoBuf)>) -> Vec<(u64, IoBuf)> {
    let n = reqs.len();
    for (i, (op, buf)) in reqs.into_iter().enumerate() {
        q.submit(farflash_backend::IoRequest {
            tag: i as u64,
            op,
            buf,
        });
    }
    q.commit().expect("commit");
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while out.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "requests did not complete"
        );
        let mut done = Vec::new();
        q.reap(&mut done);
        for c in done {
            c.result.expect("request");
            out.push((c.tag, c.buf));
        }
        if out.len() < n {
            if let Some(fd) = q.notify_fd() {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { libc::poll(&mut p, 1, 100) };
            }
        }
    }
    out.sort_by_key(|x| x.0);
    out
}

#[test]
fn files_io_uring_path_reopen_and_check() {
    let dir = Dir::new("uring");
    let paths = vec![dir.file("a", 64 * MIB), dir.file("b", 32 * MIB)];
    let pool = LocalPool::create("fp", &paths, Some(64 << 10)).expect("create");
    assert_eq!(pool.stats().cluster_size, 64 << 10);
    pool.create_volume("v", 80 * MIB).expect("volume");
    let be = pool.open("v").expect("open");
    let mut q = be.open_queue(64).expect("queue");
    assert!(q.notify_fd().is_some(), "io_uring queues notify");
    // 40 writes in flight at once, on both devices, some spanning clusters.
    let writes: Vec<(IoOp, IoBuf)> = (0..40u64)
        .map(|i| {
            let block = i * 500 + 10;
            let mut data = pattern(i + 1, block);
            data.extend(pattern(i + 1, block + 1));
            let op = IoOp::Write {
                offset: block * BS,
                len: 2 * BS as u32,
                fua: i % 9 == 0,
            };
            (op, IoBuf::from_slice(&data))
        })
        .collect();
    batch(q.as_mut(), writes);
    run(q.as_mut(), IoOp::Flush, IoBuf::with_capacity(0)).expect("flush");
    let reads: Vec<(IoOp, IoBuf)> = (0..40u64)
        .map(|i| {
            (
                IoOp::Read {
                    offset: (i * 500 + 10) * BS,
                    len: 2 * BS as u32,
                },
                IoBuf::with_capacity(2 * BS as usize),
            )
        })
        .collect();
    for (i, buf) in batch(q.as_mut(), reads) {
        let block = i * 500 + 10;
        assert_eq!(decode(&buf[..BS as usize], block), Some(i + 1));
        assert_eq!(decode(&buf[BS as usize..], block + 1), Some(i + 1));
    }
    // One instance at a time; no offline check of an open pool.
    let twice = LocalPool::open(&paths)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(twice.contains("in use"), "{twice}");
    assert!(check(&paths).problems[0].contains("in use"));
    drop(q);
    drop(pool);
    assert!(
        LocalPool::open(&paths).is_err(),
        "an exported volume keeps the pool open"
    );
    drop(be);
    let r = check(&paths);
    assert!(r.ok(), "{r:?}");
    assert_eq!(r.volumes, 1);
    let rev: Vec<PathBuf> = paths.iter().rev().cloned().collect();
    let pool = LocalPool::open(&rev).expect("reopen in another order");
    let be = pool.open("v").expect("open");
    let mut q = be.open_queue(8).expect("queue");
    let b = run(
        q.as_mut(),
        IoOp::Read {
            offset: 39 * 500 * BS + 10 * BS,
            len: BS as u32,
        },
        IoBuf::with_capacity(BS as usize),
    )
    .expect("read");
    assert_eq!(decode(&b, 39 * 500 + 10), Some(40));
}

fn flip(path: &PathBuf, offset: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).expect("read");
    b[0] ^= 0x40;
    f.write_all_at(&b, offset).expect("write");
}

#[test]
fn damaged_metadata_is_named() {
    let dir = Dir::new("damage");
    let paths = vec![dir.file("a", 32 * MIB)];
    let pool = LocalPool::create("dp", &paths, Some(64 << 10)).expect("create");
    pool.create_volume("v", 8 * MIB).expect("volume");
    drop(pool);
    // One superblock copy bad: still opens; check notes it.
    flip(&paths[0], 100);
    let r = check(&paths);
    assert!(r.ok(), "{r:?}");
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("block 0") && n.contains("checksum")),
        "{r:?}"
    );
    drop(LocalPool::open(&paths).expect("opens on the other copy"));
    // Both bad: refused, naming the device.
    flip(&paths[0], 4096 + 100);
    let r = check(&paths);
    assert!(!r.ok());
    assert!(r.problems[0].contains("no valid superblock"), "{r:?}");
    match LocalPool::open(&paths) {
        Err(PoolError::Corrupt { what }) => {
            assert!(what.contains(&paths[0].display().to_string()), "{what}")
        }
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn damaged_checkpoint_is_named() {
    let dir = Dir::new("ckpt");
    let paths = vec![dir.file("a", 32 * MIB)];
    let opts = farflash_pool::PoolOptions {
        cluster_size: Some(64 << 10),
        journal_blocks: 16,
        ..Default::default()
    };
    let pool = LocalPool::create_opts("cp", &paths, &opts).expect("create");
    // Enough volumes to fill the journal several times: checkpoints.
    for i in 0..40 {
        pool.create_volume(&format!("v{i}"), MIB).expect("volume");
    }
    drop(pool);
    let r = check(&paths);
    assert!(r.ok(), "{r:?}");
    // The live checkpoint slot's first block: read the superblocks.
    let f = std::fs::File::open(&paths[0]).expect("open");
    let mut b = vec![0u8; 8192];
    f.read_exact_at(&mut b, 0).expect("read");
    let sbs = [&b[..4096], &b[4096..]].map(farflash_pool::format::Superblock::decode);
    let sb = sbs
        .into_iter()
        .flatten()
        .max_by_key(|s| s.generation)
        .expect("superblock");
    assert!(
        sb.generation > 1 && sb.ckpt_blocks > 0,
        "a checkpoint was written: {sb:?}"
    );
    let block = sb.slot_start(sb.ckpt_slot);
    flip(&paths[0], block * 4096 + 200);
    let r = check(&paths);
    assert!(!r.ok());
    assert!(
        r.problems[0].contains("checkpoint block 0")
            && r.problems[0].contains(&format!("block {block}")),
        "{r:?}"
    );
    assert!(matches!(
        LocalPool::open(&paths),
        Err(PoolError::Corrupt { .. })
    ));
}
