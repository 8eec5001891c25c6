//! Connect time, with and without in-band authentication: connects to a
//! subsystem ITER times (admin queue, Identify, Number of Queues, IOQ I/O
//! queues, each authenticated when the controller asks), shuts down, and
//! prints the per-connect times. Used by benches/auth-connect.sh.
//!
//!   connect_time ADDR SUBNQN HOSTNQN SECRET|- CTRL_SECRET|- ITER IOQ
//!
//! Prints `connects=N io_queues=Q min_ms=.. p50_ms=.. p90_ms=.. max_ms=..`.

use farflash_auth::Secret;
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() != 7 {
        eprintln!("usage: connect_time ADDR SUBNQN HOSTNQN SECRET|- CTRL_SECRET|- ITER IOQ");
        std::process::exit(2);
    }
    let secret = |s: &str, what: &str| -> Option<Secret> {
        (s != "-").then(|| {
            Secret::parse(s).unwrap_or_else(|e| {
                eprintln!("connect_time: {what}: {e}");
                std::process::exit(2)
            })
        })
    };
    let mut o = ConnectOptions::new(a[0].clone(), a[1].clone());
    o.hostnqn = a[2].clone();
    o.dhchap_secret = secret(&a[3], "secret");
    o.dhchap_ctrl_secret = secret(&a[4], "controller secret");
    o.command_timeout = Duration::from_secs(30);
    let iter: usize = a[5].parse().expect("ITER");
    let ioq: u16 = a[6].parse().expect("IOQ");
    let mut ms = Vec::with_capacity(iter);
    for _ in 0..iter {
        let t = Instant::now();
        let ctrl = Controller::connect_with_queues(&o, ioq).unwrap_or_else(|e| {
            eprintln!("connect_time: connect: {e}");
            std::process::exit(1)
        });
        let queues: Vec<_> = (1..=ctrl.info().io_queues)
            .map(|q| {
                ctrl.io_queue(
                    q,
                    IoQueueOptions {
                        depth: 32,
                        max_io: 128 << 10,
                    },
                )
                .unwrap_or_else(|e| {
                    eprintln!("connect_time: I/O queue {q}: {e}");
                    std::process::exit(1)
                })
            })
            .collect();
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        drop(queues);
        let _ = ctrl.shutdown();
    }
    ms.sort_by(|x, y| x.total_cmp(y));
    let pct = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    println!(
        "connects={} io_queues={ioq} min_ms={:.2} p50_ms={:.2} p90_ms={:.2} max_ms={:.2}",
        ms.len(),
        ms[0],
        pct(0.5),
        pct(0.9),
        ms[ms.len() - 1]
    );
}
