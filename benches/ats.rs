//! Atomic test-and-set under contention (issue 43): HOSTS hosts, each its
//! own controller, hammer a fused Compare and Write on one LBA with 4 KiB
//! writes to the LBAs beside it at queue depth QD, PAIRS pairs each
//! (`farflash_bench::ats`: every read of the block must be whole, and the
//! final counter must equal the sum of the wins, or the run fails). Then,
//! on one host at QD 1, the cost of a fused pair against a plain write of
//! the same block.
//!
//! Against a running target (benches/ats.sh starts one):
//!   FARFLASH_ATS_ADDR=127.0.0.1:4420 FARFLASH_ATS_NQN=nqn... \
//!   PAIRS=5000000 QD=32 HOSTS=2 cargo bench --bench ats

use farflash_bench::ats::{self, AtsSpec};
use farflash_host::{ConnectOptions, Controller, IoQueue, IoQueueOptions};
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

fn connect(addr: &str, nqn: &str, host: u64, depth: u16) -> (Controller, IoQueue) {
    let mut o = ConnectOptions::new(addr.to_string(), nqn);
    o.hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-{host:012x}");
    o.command_timeout = Duration::from_secs(60);
    let mut ctrl = Controller::connect_with_queues(&o, 1).expect("connect");
    // The run lasts minutes, and the target times a controller out after
    // KATO without a Keep Alive (it does not advertise TBKAS).
    ctrl.start_keep_alive().expect("keep alive");
    let q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth,
                max_io: 64 << 10,
            },
        )
        .expect("I/O queue");
    (ctrl, q)
}

fn main() {
    let Ok(addr) = std::env::var("FARFLASH_ATS_ADDR") else {
        eprintln!(
            "FARFLASH_ATS_ADDR (host:port of a running target) is not set; see benches/ats.sh"
        );
        std::process::exit(2);
    };
    let nqn = std::env::var("FARFLASH_ATS_NQN")
        .unwrap_or_else(|_| "nqn.2026-11.io.farflash:default".into());
    let spec = AtsSpec {
        nsid: env_u64("NSID", 1) as u32,
        lba: 0,
        block: env_u64("BLOCK", 512) as u32,
        pairs: env_u64("PAIRS", 5_000_000),
        qd: env_u64("QD", 32) as u16,
        neighbours: 1024,
        seed: 0,
    };
    let hosts = env_u64("HOSTS", 2);
    let (_c0, mut q0) = connect(&addr, &nqn, 0xA75, 4);
    ats::init(&mut q0, &spec, 0).expect("initial value");
    let t0 = Instant::now();
    let runs: Vec<_> = (1..=hosts)
        .map(|h| {
            let (c, mut q) = connect(&addr, &nqn, h, spec.qd);
            let spec = AtsSpec { seed: h, ..spec };
            std::thread::spawn(move || {
                let r = ats::run(&mut q, &spec).expect("ATS run");
                drop(c);
                r
            })
        })
        .collect();
    let results: Vec<_> = runs.into_iter().map(|t| t.join().expect("host")).collect();
    let secs = t0.elapsed().as_secs_f64();
    let won: u64 = results.iter().map(|r| r.won).sum();
    let value = ats::read_value(&mut q0, &spec).expect("final value");
    for (h, r) in results.iter().enumerate() {
        println!(
            "host {}: {} pairs ({} won, {} lost), {} 4 KiB writes; mean pair {:.1} us, write {:.1} us",
            h + 1,
            r.pairs,
            r.won,
            r.lost,
            r.writes,
            r.pair_ns as f64 / r.pairs.max(1) as f64 / 1e3,
            r.write_ns as f64 / r.writes.max(1) as f64 / 1e3,
        );
    }
    let pairs: u64 = results.iter().map(|r| r.pairs).sum();
    println!(
        "{pairs} pairs in {secs:.1} s ({:.0} pairs/s); counter {value}, wins {won}",
        pairs as f64 / secs
    );
    assert_eq!(value, won, "the counter lost or doubled an increment");
    println!("no torn block, no lost increment");
    qd1_cost(&mut q0, &spec, env_u64("QD1_OPS", 20_000));
}

/// Mean latency at QD 1 of a plain write of the ATS block and of a fused
/// pair over it (uncontended).
fn qd1_cost(q: &mut IoQueue, spec: &AtsSpec, n: u64) {
    let b = spec.block as usize;
    let mut cur = ats::read_value(q, spec).expect("value");
    let (mut old, mut new) = (vec![0u8; b], vec![0u8; b]);
    let t = Instant::now();
    for _ in 0..n {
        ats::encode(cur, &mut old);
        q.write_at(spec.nsid, spec.lba, 1, &old).expect("write");
    }
    let write = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        ats::encode(cur, &mut old);
        ats::encode(cur + 1, &mut new);
        assert!(q
            .compare_and_write(spec.nsid, spec.lba, 1, &old, &new)
            .expect("pair"));
        cur += 1;
    }
    let pair = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "QD 1, {} bytes: plain write {:.1} us, fused pair {:.1} us ({:.2}x)",
        b,
        write / 1e3,
        pair / 1e3,
        pair / write
    );
}
