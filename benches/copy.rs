//! Copy within a namespace against moving the same data through the host
//! (issue 43): SIZE bytes (1 GiB) from the start of namespace NSID to SIZE
//! bytes further on, once with Copy commands (source ranges of 16 MiB, as
//! many as MCL allows per command) and once with 128 KiB Reads and Writes
//! from farflash's host at QD 1. Marker blocks written first are checked at
//! the destination after each way.
//!
//! Against a running target with a namespace of at least 2 × SIZE, its
//! memory committed up front (`farflash serve --ram 2G --ram-commit`: else
//! the first method pays the page faults of first writes):
//!   FARFLASH_COPY_ADDR=127.0.0.1:4420 FARFLASH_COPY_NQN=nqn... \
//!   SIZE_MIB=1024 cargo bench --bench copy

use farflash_host::{ConnectOptions, Controller, IoQueue, IoQueueOptions};
use std::time::{Duration, Instant};

const CHUNK: u32 = 128 << 10;
const RANGE: u64 = 16 << 20;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

fn main() {
    let Ok(addr) = std::env::var("FARFLASH_COPY_ADDR") else {
        eprintln!("FARFLASH_COPY_ADDR (host:port of a running target) is not set");
        std::process::exit(2);
    };
    let nqn = std::env::var("FARFLASH_COPY_NQN")
        .unwrap_or_else(|_| "nqn.2026-11.io.farflash:default".into());
    let nsid = env_u64("NSID", 1) as u32;
    let size = env_u64("SIZE_MIB", 1024) << 20;
    let mut o = ConnectOptions::new(addr, &nqn);
    o.command_timeout = Duration::from_secs(600);
    let mut ctrl = Controller::connect_with_queues(&o, 1).expect("connect");
    // The run outlasts KATO; the target does not advertise TBKAS.
    ctrl.start_keep_alive().expect("keep alive");
    let ns = ctrl.identify_ns(nsid).expect("identify namespace");
    let bs = 1u64 << ns.lbads;
    assert!(
        ns.nsze * bs >= 2 * size,
        "namespace {nsid} holds {} bytes; 2 x {size} needed",
        ns.nsze * bs
    );
    let mut q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth: 4,
                max_io: CHUNK,
            },
        )
        .expect("I/O queue");
    let marks = [0, size / 2 + 7 * bs, size - bs];
    for (i, &m) in marks.iter().enumerate() {
        q.write_at(nsid, m / bs, 1, &vec![0xC0 + i as u8; bs as usize])
            .expect("marker");
    }
    let t = Instant::now();
    by_copy(
        &mut q,
        nsid,
        bs,
        size,
        ns.mcl as u64 * bs,
        ns.msrc as usize + 1,
    );
    let copy = t.elapsed();
    check(&mut q, nsid, bs, size, &marks, "Copy");
    let t = Instant::now();
    by_host(&mut q, nsid, bs, size);
    let host = t.elapsed();
    check(&mut q, nsid, bs, size, &marks, "host read + write");
    let gib = size as f64 / (1u64 << 30) as f64;
    println!(
        "{} MiB within namespace {nsid}: Copy {:.2} s ({:.2} GiB/s), host 128 KiB read + write QD 1 {:.2} s ({:.2} GiB/s)",
        size >> 20,
        copy.as_secs_f64(),
        gib / copy.as_secs_f64(),
        host.as_secs_f64(),
        gib / host.as_secs_f64()
    );
}

/// Copy commands of at most `mcl` bytes and `msrc` ranges of 16 MiB.
fn by_copy(q: &mut IoQueue, nsid: u32, bs: u64, size: u64, mcl: u64, msrc: usize) {
    let per_cmd = mcl.min(RANGE * msrc as u64).max(RANGE);
    let mut off = 0;
    while off < size {
        let n = per_cmd.min(size - off);
        let ranges: Vec<(u64, u32)> = (0..n.div_ceil(RANGE))
            .map(|k| {
                let s = off + k * RANGE;
                ((s / bs), (RANGE.min(off + n - s) / bs) as u32)
            })
            .collect();
        q.copy(nsid, (size + off) / bs, &ranges).expect("copy");
        off += n;
    }
}

fn by_host(q: &mut IoQueue, nsid: u32, bs: u64, size: u64) {
    let mut buf = vec![0u8; CHUNK as usize];
    let nlb = (CHUNK as u64 / bs) as u32;
    let mut off = 0;
    while off < size {
        q.read_at(nsid, off / bs, nlb, &mut buf).expect("read");
        q.write_at(nsid, (size + off) / bs, nlb, &buf)
            .expect("write");
        off += CHUNK as u64;
    }
}

fn check(q: &mut IoQueue, nsid: u32, bs: u64, size: u64, marks: &[u64], how: &str) {
    let mut b = vec![0u8; bs as usize];
    for (i, &m) in marks.iter().enumerate() {
        q.read_at(nsid, (size + m) / bs, 1, &mut b)
            .expect("read back");
        assert!(
            b.iter().all(|&x| x == 0xC0 + i as u8),
            "{how}: the block at byte {m} did not arrive"
        );
        // Clear it for the next way.
        q.write_at(nsid, (size + m) / bs, 1, &vec![0; bs as usize])
            .expect("clear");
    }
}
