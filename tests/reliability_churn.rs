//! Churn: 1,000 connect/disconnect cycles against one target must leave its
//! memory, file descriptors and threads where they were after warm-up.
//!
//! The cycles rotate through ten shapes: clean host-library associations
//! (admin queue, one or two I/O queues, a little verified I/O on a RAM and a
//! file namespace, normal shutdown), an admin-only association, and raw
//! peers that vanish mid-command (a write waiting for its data, a read
//! whose answer is never read).
//!
//! Tolerances: descriptors and threads must come back exactly. VmRSS may
//! grow by less than 16 MiB: the allocator keeps freed memory in its
//! per-thread arenas and caches, which a warm-up cannot fully prime, but
//! the cycles open about 2,700 connections, so a leak of even 6 KiB per
//! connection (one receive buffer is 16 KiB) would exceed it.

mod common;

use common::raw::Peer;
use common::{eventually, fd_count, resting_counts, rss_kib, thread_count, Serve, NQN};
use farflash_host::{cmd, ConnectOptions, Controller, IoQueueOptions};
use farflash_wire::sqe::SglDescriptor;
use farflash_wire::Sqe;
use std::time::{Duration, Instant};

const WARM_UP: u32 = 50;
const CYCLES: u32 = 1000;
const RSS_TOLERANCE_KIB: u64 = 16 * 1024;

fn small_queue() -> IoQueueOptions {
    IoQueueOptions {
        depth: 4,
        max_io: 16 * 1024,
    }
}

/// Writes and reads back 4 KiB on namespaces 1 (RAM) and 2 (file).
fn verified_io(q: &mut farflash_host::IoQueue, i: u32) {
    let lba = (i as u64 % 1000) * 8;
    let data: Vec<u8> = (0..4096u32).map(|b| (b ^ i) as u8).collect();
    let mut back = vec![0u8; 4096];
    for nsid in [1, 2] {
        q.write_at(nsid, lba, 8, &data)
            .unwrap_or_else(|e| panic!("cycle {i}: write ns {nsid}: {e}"));
        q.read_at(nsid, lba, 8, &mut back)
            .unwrap_or_else(|e| panic!("cycle {i}: read ns {nsid}: {e}"));
        assert_eq!(back, data, "cycle {i}: data of ns {nsid}");
    }
}

fn cycle(addr: &str, opts: &ConnectOptions, i: u32) {
    match i % 10 {
        // Admin queue only.
        7 => {
            let c = Controller::connect(opts).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
            c.shutdown().unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        }
        // Two I/O queues.
        6 => {
            let c = Controller::connect(opts).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
            let mut a = c.io_queue(1, small_queue()).expect("I/O queue 1");
            let mut b = c.io_queue(2, small_queue()).expect("I/O queue 2");
            verified_io(&mut a, i);
            verified_io(&mut b, i + 1);
            drop((a, b));
            c.shutdown().unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        }
        // A peer that vanishes while the target waits for write data.
        8 => {
            let (admin, cntlid) = Peer::admin(addr, 0, 1);
            let mut q = Peer::io(addr, cntlid, 1, 31, false, false);
            q.write_for_r2t(cmd::rw(true, 2, 0, 32), 16384);
            drop((q, admin));
        }
        // A peer that vanishes with reads in flight (file and RAM).
        9 => {
            let (admin, cntlid) = Peer::admin(addr, 0, 1);
            let mut q = Peer::io(addr, cntlid, 1, 31, false, false);
            for nsid in [2, 1, 2] {
                let sqe = Sqe {
                    dptr: SglDescriptor::transport(65536),
                    ..cmd::rw(false, nsid, 0, 128)
                };
                q.submit(sqe, &[]);
            }
            drop((q, admin));
        }
        // The common case: one I/O queue, a little I/O, clean shutdown.
        _ => {
            let c = Controller::connect(opts).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
            let mut q = c.io_queue(1, small_queue()).expect("I/O queue");
            verified_io(&mut q, i);
            drop(q);
            c.shutdown().unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        }
    }
}

#[test]
fn connect_disconnect_churn_leaks_nothing() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!("reliability-churn-{}.img", std::process::id()));
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(16 << 20))
        .expect("namespace file");
    // --ram-commit: the namespace's pages are resident from the start, so
    // VmRSS measures the target's own memory, not first writes to the disk.
    let serve = Serve::start(&[
        "--ram",
        "16M",
        "--ram-commit",
        "--file",
        file.to_str().unwrap(),
        "--block-size",
        "512",
    ]);
    let pid = serve.pid();
    let mut opts = ConnectOptions::new(serve.addr.clone(), NQN);
    opts.command_timeout = Duration::from_secs(10);

    for i in 0..WARM_UP {
        cycle(&serve.addr, &opts, i);
    }
    let (fds0, threads0) = resting_counts(&serve);
    let rss0 = rss_kib(pid);
    // FARFLASH_CHURN_CYCLES runs a longer (or shorter) churn by hand.
    let cycles: u32 = std::env::var("FARFLASH_CHURN_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CYCLES);
    let every = (cycles / 4).max(1);
    let t0 = Instant::now();
    let mut samples = Vec::new();
    for i in WARM_UP..WARM_UP + cycles {
        cycle(&serve.addr, &opts, i);
        if (i - WARM_UP + 1).is_multiple_of(every) {
            samples.push(rss_kib(pid));
        }
    }
    let took = t0.elapsed();
    let settled = eventually(Duration::from_secs(5), || {
        fd_count(pid) == fds0 && thread_count(pid) == threads0
    });
    let (fds1, threads1, rss1) = (fd_count(pid), thread_count(pid), rss_kib(pid));
    eprintln!(
        "{cycles} cycles in {took:?} ({:.1} ms each): VmRSS {rss0} KiB -> {rss1} KiB \
         ({:+} KiB; every {every} cycles: {samples:?}), fds {fds0} -> {fds1}, threads {threads0} -> {threads1}",
        took.as_secs_f64() * 1000.0 / cycles as f64,
        rss1 as i64 - rss0 as i64
    );
    assert!(
        settled,
        "descriptors or threads leaked: fds {fds0} -> {fds1}, threads {threads0} -> {threads1}"
    );
    assert!(
        rss1 < rss0 + RSS_TOLERANCE_KIB,
        "VmRSS grew by {} KiB over {cycles} cycles (tolerance {RSS_TOLERANCE_KIB} KiB)",
        rss1 - rss0
    );
    drop(serve);
    let _ = std::fs::remove_file(&file);
}
