//! Scale: many volumes and a large sparse pool open fast, and metadata
//! stays proportional to what is used.
//!
//! The time bounds are the (10,000 volumes open in < 1 s; a
//! 1 TiB pool with 1,000 volumes in < 2 s), in debug builds too (they
//! measured 0.17 s and 0.12 s there).

mod common;

use common::{read_id, write};
use farflash_pool::testing::MemDevice;
use farflash_pool::{check, LocalPool, PoolOptions, VolumeStore};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;

fn quiet() -> PoolOptions {
    PoolOptions {
        commit_interval: None,
        ..PoolOptions::default()
    }
}

#[test]
fn ten_thousand_volumes_open_fast() {
    let dev = MemDevice::recording(64 * GIB);
    let pool =
        LocalPool::create_with("big", vec![("m".into(), dev.backend())], &quiet()).expect("create");
    for i in 0..10_000 {
        pool.create_volume(&format!("vol-{i:05}"), GIB)
            .expect("volume");
    }
    let be = pool.open("vol-09999").expect("open");
    let mut q = be.open_queue(4).expect("queue");
    write(q.as_mut(), 77, 5, true).expect("write");
    drop((q, be, pool));
    let img = dev.image();
    let dev = MemDevice::from_image(64 * GIB, img);
    let t = Instant::now();
    let pool = LocalPool::open_with(vec![("m".into(), dev.backend())], &quiet()).expect("open");
    let took = t.elapsed();
    println!("10,000 volumes opened in {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(pool.list().len(), 10_000);
    let be = pool.open("vol-09999").expect("open");
    let mut q = be.open_queue(4).expect("queue");
    assert_eq!(read_id(q.as_mut(), 77), Some(5));
}

#[test]
fn one_tib_sparse_file_with_a_thousand_volumes() {
    // Built on an in-memory device (1,000 commits to a real file would
    // take longer than the point of the test), then written sparsely to
    // a 1 TiB file and opened from it.
    let size = 1u64 << 40;
    let dev = MemDevice::recording(size);
    let pool =
        LocalPool::create_with("tib", vec![("m".into(), dev.backend())], &quiet()).expect("create");
    for i in 0..1000u64 {
        pool.create_volume(&format!("v{i}"), 100 * GIB)
            .expect("volume");
        if i % 100 == 0 {
            let be = pool.open(&format!("v{i}")).expect("open");
            let mut q = be.open_queue(4).expect("queue");
            write(q.as_mut(), i * 1000, i + 1, true).expect("write");
        }
    }
    drop(pool);
    let dir = std::env::temp_dir().join(format!("farflash-pool-tib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("tib");
    let f = std::fs::File::create(&path).expect("file");
    f.set_len(size).expect("1 TiB sparse");
    for (offset, page) in dev.image().pages() {
        f.write_all_at(page, offset).expect("write page");
    }
    f.sync_all().expect("sync");
    drop(f);
    let t = Instant::now();
    let pool = LocalPool::open(std::slice::from_ref(&path)).expect("open 1 TiB");
    let took = t.elapsed();
    println!("1 TiB pool with 1,000 volumes opened in {took:?}");
    let ok = took < Duration::from_secs(2);
    assert_eq!(pool.list().len(), 1000);
    let be = pool.open("v500").expect("open");
    let mut q = be.open_queue(4).expect("queue");
    assert_eq!(read_id(q.as_mut(), 500 * 1000), Some(501));
    assert_eq!(pool.get("v500").expect("get").allocated, 1 << 20);
    drop((q, be, pool));
    let r = check(std::slice::from_ref(&path));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(r.ok(), "{r:?}");
    assert!(ok, "{took:?}");
}
