//! Limits held over simulated time by queues driven as an event loop would
//! drive them: commands over a limit wait, in order, and run when
//! `resume_throttled` finds their tokens.

use super::QosConfig;
use crate::command::{Begin, Completion, Xfer};
use crate::config::{BackendKind, Config, NamespaceConfig, Size, SubsystemConfig, TransportConfig};
use crate::testing::build_subsystems;
use crate::tests::{io_queue, rw, HOST, NQN};
use crate::{NvmeQueue, Target};
use farflash_wire::opcode::io;
use farflash_wire::Status;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn target(qos: Vec<QosConfig>) -> Arc<Target> {
    let transport = TransportConfig::default();
    let mut sub = SubsystemConfig::new(
        NQN,
        vec![NamespaceConfig {
            nsid: Some(1),
            block_size: Some(512),
            ..NamespaceConfig::sized(BackendKind::Ram, 1 << 20)
        }],
    );
    sub.qos = qos;
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: transport.clone(),
        subsystems: vec![sub],
        pools: Vec::new(),
    };
    cfg.validate().unwrap();
    let subs = build_subsystems(&cfg).unwrap();
    Target::new(subs, transport, vec!["127.0.0.1:4420".parse().unwrap()])
}

/// One queue's driver: keeps `qd` 4 KiB commands (`opcode`) outstanding.
struct Driver {
    q: NvmeQueue,
    _admin: NvmeQueue,
    qd: usize,
    out: usize,
    next_cid: u16,
    done: u64,
    /// CIDs in submission order, to check that completions keep it.
    order: std::collections::VecDeque<u16>,
}

impl Driver {
    fn new(t: &Arc<Target>, qd: usize) -> Driver {
        let (admin, q) = io_queue(t);
        Driver {
            q,
            _admin: admin,
            qd,
            out: 0,
            next_cid: 0,
            done: 0,
            order: Default::default(),
        }
    }

    /// One event-loop pass at `now`.
    fn pass(&mut self, now: Instant, opcode: u8) {
        let q = &mut self.q;
        q.set_now(now);
        q.resume_throttled();
        while self.out < self.qd {
            let cid = self.next_cid;
            self.next_cid = (self.next_cid + 1) % 64;
            let sqe = rw(opcode, cid, (cid as u64 % 32) * 8, 4096);
            let Begin::Ready { slot, xfer } = q.begin(sqe) else {
                panic!("not runnable")
            };
            if let Xfer::H2C(n) = xfer {
                q.data_buf(slot)[..n as usize].fill(cid as u8);
            }
            q.execute(slot);
            self.out += 1;
            self.order.push_back(cid);
        }
        q.commit();
        while q.poll_backends() {}
        let mut c: Vec<Completion> = Vec::new();
        q.take_completions(&mut c);
        for c in c {
            assert_eq!(c.status, Status::SUCCESS);
            // Reads and writes of one queue complete in submission order here
            // (the RAM engine completes at once): a waiting command is never
            // overtaken by a later one.
            assert_eq!(self.order.pop_front(), Some(c.cid), "overtaken");
            self.out -= 1;
            self.done += 1;
        }
    }
}

/// Runs `drivers` for `secs` simulated seconds in 100 µs passes (a tick
/// every 100 ms); returns each one's completions.
fn run(drivers: &mut [Driver], secs: u64, opcode: u8) -> Vec<u64> {
    let t0 = Instant::now();
    let mut now = t0;
    let mut last_tick = t0;
    while now < t0 + Duration::from_secs(secs) {
        for d in drivers.iter_mut() {
            d.pass(now, opcode);
        }
        if now - last_tick >= Duration::from_millis(100) {
            last_tick = now;
            for d in drivers.iter_mut() {
                d.q.tick(now);
            }
        }
        now += Duration::from_micros(100);
    }
    drivers.iter().map(|d| d.done).collect()
}

fn ns_limit(ios: Option<u64>, bytes: Option<u64>) -> QosConfig {
    QosConfig {
        nsid: Some(1),
        rw_ios_per_sec: ios,
        rw_bytes_per_sec: bytes.map(Size),
        ..QosConfig::default()
    }
}

fn within(got: u64, want: f64, tol: f64) -> bool {
    (got as f64) >= want * (1.0 - tol) && (got as f64) <= want * (1.0 + tol)
}

#[test]
fn an_iops_limit_holds_with_one_and_four_queues() {
    for queues in [1, 4] {
        let t = target(vec![ns_limit(Some(2000), None)]);
        let mut d: Vec<Driver> = (0..queues).map(|_| Driver::new(&t, 8)).collect();
        let done = run(&mut d, 10, io::READ);
        let total: u64 = done.iter().sum();
        // 10 s × 2000/s, plus the 100 ms burst and a chunk per queue.
        assert!(within(total, 20_000.0, 0.05), "{queues} queues: {done:?}");
        // The queues share it evenly (they wait in line for tokens).
        for n in &done {
            assert!(within(*n, 20_000.0 / queues as f64, 0.1), "{done:?}");
        }
    }
}

#[test]
fn a_bytes_limit_holds_for_writes_and_a_host_limit_for_its_queues() {
    // 4 MiB/s of 4 KiB writes = 1024 writes/s.
    let t = target(vec![ns_limit(None, Some(4 << 20))]);
    let mut d = vec![Driver::new(&t, 16)];
    let done = run(&mut d, 10, io::WRITE);
    assert!(within(done[0], 10_240.0, 0.05), "{done:?}");

    let host = QosConfig {
        host: Some(HOST.into()),
        r_ios_per_sec: Some(500),
        ..QosConfig::default()
    };
    let t = target(vec![host.clone()]);
    let mut d: Vec<Driver> = (0..4).map(|_| Driver::new(&t, 4)).collect();
    let done = run(&mut d, 10, io::READ);
    assert!(within(done.iter().sum(), 5_000.0, 0.05), "{done:?}");
    // Queues in line for one limit share it: none starves.
    for n in &done {
        assert!(within(*n, 1_250.0, 0.1), "{done:?}");
    }
    // Writes are not limited by a read limit.
    let t = target(vec![host]);
    let mut d: Vec<Driver> = (0..4).map(|_| Driver::new(&t, 4)).collect();
    let done = run(&mut d, 1, io::WRITE);
    assert!(done.iter().sum::<u64>() > 50_000, "{done:?}");
}

#[test]
fn a_limit_changed_at_run_time_applies_at_the_next_tick() {
    let t = target(vec![ns_limit(Some(1000), None)]);
    let mut d = vec![Driver::new(&t, 8)];
    let first = run(&mut d, 2, io::READ)[0];
    assert!(within(first, 2_000.0, 0.1), "{first}");
    let sub = t.subsystems()[0].clone();
    assert!(sub.set_qos(&[ns_limit(Some(5000), None)]));
    let second = run(&mut d, 2, io::READ)[0] - first;
    assert!(within(second, 10_000.0, 0.1), "{second}");
    // Limits removed: nothing waits any more.
    assert!(sub.set_qos(&[]));
    let third = run(&mut d, 1, io::READ)[0] - first - second;
    assert!(third > 50_000, "{third}");
    assert!(
        d[0].q.qos.gate.is_none(),
        "the gate went away with the limits"
    );
}

#[test]
fn throttled_time_is_counted_and_unlimited_queues_have_no_gate() {
    let t = target(vec![ns_limit(Some(100), None)]);
    let mut d = vec![Driver::new(&t, 4)];
    run(&mut d, 2, io::READ);
    let st = d[0].q.stats.clone().unwrap();
    let throttled = st.throttled_ns.load(std::sync::atomic::Ordering::Relaxed);
    // Four commands outstanding at 100/s: nearly always one waits.
    assert!(throttled > 1_500_000_000, "{throttled} ns");
    let t = target(vec![]);
    let d = Driver::new(&t, 1);
    assert!(d.q.qos.gate.is_none());
}
