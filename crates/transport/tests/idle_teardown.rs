//! An idle queue ticks only once a second (`sched.rs` `IDLE_TICK`), yet
//! what it must see soon still reaches it within a tick period: removing
//! its controller moves core's change counter, and the worker's next scan
//! (every 100 ms) ticks all its connections. A queue left idle for longer
//! than `IDLE_TICK` closes well before the second it would otherwise wait.

use farflash_control::build_subsystems;
use farflash_core::config::{BackendKind, Config, NamespaceConfig, PollMode, SubsystemConfig};
use farflash_core::Target;
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use farflash_transport::{serve, LoopOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.farflash:idle-teardown";

#[test]
fn an_idle_queue_of_a_removed_controller_closes_within_the_scan_period() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address").to_string();
    let cfg = Config {
        listen: vec![addr.clone()],
        transport: Default::default(),
        subsystems: vec![SubsystemConfig::new(
            NQN,
            vec![NamespaceConfig::sized(BackendKind::Null, 1 << 20)],
        )],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).expect("subsystem");
    let t = Target::new(
        subs,
        cfg.transport.clone(),
        vec![addr.parse().expect("address")],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let opts = LoopOptions {
        threads: 1,
        cpus: vec![],
        poll: PollMode::Adaptive,
        poll_idle: Duration::from_micros(100),
        drain: Duration::from_secs(2),
        max_connections: 64,
        fair_share: 256 * 1024,
    };
    let server = {
        let (t, stop) = (t.clone(), stop.clone());
        std::thread::spawn(move || serve(t, vec![listener], &opts, stop))
    };
    let mut copts = ConnectOptions::new(addr, NQN);
    copts.command_timeout = Duration::from_secs(10);
    let ctrl = Controller::connect(&copts).expect("connect");
    let qopts = IoQueueOptions {
        depth: 4,
        max_io: 4096,
    };
    let mut q = ctrl.io_queue(1, qopts).expect("I/O queue");
    let mut buf = vec![0u8; 4096];
    q.read_at(1, 0, 8, &mut buf).expect("read");
    // Idle for longer than IDLE_TICK: the queue's ticks are a second apart
    // now. (Polling sends nothing; it only looks for an EOF.)
    let mut done = Vec::new();
    let idle_until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < idle_until {
        q.poll(&mut done)
            .expect("the queue stays open while its controller lives");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        t.disconnect_controller(ctrl.info().cntlid),
        "controller live"
    );
    let t0 = Instant::now();
    let closed = loop {
        if q.poll(&mut done).is_err() {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the I/O queue never closed"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    eprintln!("idle I/O queue closed {closed:?} after its controller was removed");
    // The scan runs every 100 ms; an idle tick could be up to 1 s away.
    // The bound leaves a loaded machine 5x the scan period.
    assert!(
        closed < Duration::from_millis(500),
        "closed after {closed:?}"
    );
    stop.store(true, Ordering::Release);
    server.join().expect("server thread").expect("serve");
}
