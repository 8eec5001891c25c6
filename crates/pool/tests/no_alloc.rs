//! The data path allocates nothing per I/O once warm: reads and writes of
//! allocated clusters (inside one cluster, and across two through bounce
//! buffers), over the io_uring engine, counted by a global allocator that
//! counts only on the measuring thread. Vectors may still grow to a new
//! high-water mark of completions ready at once (amortized doubling, a
//! handful of times at most), which is why the bound is a few
//! allocations for 6,800 requests rather than zero.

use farflash_backend::{BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest};
use farflash_pool::{LocalPool, PoolOptions, VolumeStore};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// only addition is a counter (no allocation inside the allocator).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `reqs` (recycling their buffers) and waits for all of them.
fn round(
    q: &mut dyn BackendQueue,
    bufs: &mut Vec<IoBuf>,
    ops: &[IoOp],
    done: &mut Vec<IoCompletion>,
) {
    for (i, op) in ops.iter().enumerate() {
        let buf = bufs.pop().expect("a buffer");
        q.submit(IoRequest {
            tag: i as u64,
            op: *op,
            buf,
        });
    }
    q.commit().expect("commit");
    let mut n = 0;
    while n < ops.len() {
        done.clear();
        q.reap(done);
        for c in done.drain(..) {
            c.result.expect("request");
            let mut b = c.buf;
            b.set_len(b.capacity());
            bufs.push(b);
            n += 1;
        }
        if n < ops.len() {
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
}

#[test]
fn steady_state_io_allocates_nothing() {
    let dir = std::env::temp_dir().join(format!("farflash-pool-noalloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("dev");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(64 << 20))
        .expect("file");
    let opts = PoolOptions {
        cluster_size: Some(64 << 10),
        commit_interval: None,
        ..PoolOptions::default()
    };
    let pool = LocalPool::create_opts("na", std::slice::from_ref(&path), &opts).expect("create");
    pool.create_volume("v", 8 << 20).expect("volume");
    let be = pool.open("v").expect("open");
    let mut q = be.open_queue(64).expect("queue");
    let k = 4096u64;
    let mut ops = Vec::new();
    for i in 0..16u64 {
        let off = i * 3 * k;
        ops.push(IoOp::Write {
            offset: off,
            len: k as u32,
            fua: false,
        });
        ops.push(IoOp::Read {
            offset: off + k,
            len: k as u32,
        });
    }
    // Across a cluster boundary: two pieces, bounce buffers.
    ops.push(IoOp::Write {
        offset: (64 << 10) - k,
        len: 2 * k as u32,
        fua: false,
    });
    ops.push(IoOp::Read {
        offset: (64 << 10) - k,
        len: 2 * k as u32,
    });
    let mut bufs: Vec<IoBuf> = (0..ops.len())
        .map(|_| {
            let mut b = IoBuf::with_capacity(2 * k as usize);
            b.set_len(2 * k as usize);
            b
        })
        .collect();
    let mut done = Vec::with_capacity(ops.len());
    // Warm up: allocates the clusters, the queue's slots and pools.
    for _ in 0..3 {
        round(q.as_mut(), &mut bufs, &ops, &mut done);
    }
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    for _ in 0..200 {
        round(q.as_mut(), &mut bufs, &ops, &mut done);
    }
    COUNTING.with(|c| c.set(false));
    let n = ALLOCS.load(Ordering::SeqCst);
    drop((q, be, pool));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(n <= 8, "{n} allocations in {} requests", 200 * ops.len());
}
