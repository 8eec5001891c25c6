//! The fused Compare and Write over NVMe/TCP, farflash's host against
//! `farflash serve` (issue 43): a pair writes only when its data match,
//! and two hosts on two controllers (two worker threads) hammering
//! test-and-set on one LBA, with 4 KiB writes beside it, never tear the
//! block and never lose or double an increment.

mod host_support;

use farflash_bench::ats::{self, AtsSpec};
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use host_support::Serve;
use std::time::Duration;

fn connect(s: &Serve, host: &str) -> (Controller, farflash_host::IoQueue) {
    let mut o = ConnectOptions::new(s.addr(), &s.nqn);
    o.hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:{host}");
    o.command_timeout = Duration::from_secs(30);
    let mut ctrl = Controller::connect_with_queues(&o, 1).expect("connect");
    // Keep Alive every KATO/2: on a loaded machine a run may outlast KATO.
    ctrl.start_keep_alive().expect("keep-alive thread");
    let q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth: 16,
                max_io: 64 << 10,
            },
        )
        .expect("I/O queue");
    (ctrl, q)
}

#[test]
fn a_fused_pair_writes_only_when_the_data_match() {
    let s = Serve::start("16M", &[]);
    let (_c, mut q) = connect(&s, "00000000-0000-0000-0000-0000000000a1");
    let (old, new) = (vec![1u8; 4096], vec![2u8; 4096]);
    q.write_at(1, 64, 8, &old).expect("write");
    assert!(!q.compare_and_write(1, 64, 8, &new, &old).expect("pair"));
    let mut back = vec![0u8; 4096];
    q.read_at(1, 64, 8, &mut back).expect("read");
    assert_eq!(back, old, "a miscompare writes nothing");
    // Larger than in-capsule data: the halves' data come by R2T.
    assert!(q.compare_and_write(1, 64, 8, &old, &new).expect("pair"));
    q.read_at(1, 64, 8, &mut back).expect("read");
    assert_eq!(back, new);
}

#[test]
fn copy_from_the_host_lands_in_order_and_limits_are_refused() {
    let s = Serve::start("16M", &[]);
    let (_c, mut q) = connect(&s, "00000000-0000-0000-0000-0000000000c1");
    let (a, b) = (vec![0x5Au8; 8192], vec![0xA5u8; 4096]);
    q.write_at(1, 100, 16, &a).expect("write");
    q.write_at(1, 300, 8, &b).expect("write");
    q.copy(1, 1000, &[(300, 8), (100, 16)]).expect("copy");
    let mut back = vec![0u8; 12288];
    q.read_at(1, 1000, 24, &mut back).expect("read");
    assert_eq!(&back[..4096], &b[..]);
    assert_eq!(&back[4096..], &a[..]);
    // 129 ranges: beyond MSRC (127, 0's based): Command Size Limit Exceeded.
    let many = vec![(0u64, 1u32); 129];
    let e = q.copy(1, 2000, &many).expect_err("beyond MSRC");
    // (The host names the status by its Fabrics meaning; the code is the one.)
    assert!(e.to_string().contains("sct 0x1 sc 0x83"), "{e}");
}

#[test]
fn two_hosts_hammering_test_and_set_never_tear_or_lose_an_increment() {
    let s = Serve::start("64M", &["--threads", "2"]);
    let spec = AtsSpec {
        nsid: 1,
        lba: 0,
        block: 512,
        pairs: 400,
        qd: 16,
        neighbours: 64,
        seed: 0,
    };
    let (_c0, mut q0) = connect(&s, "00000000-0000-0000-0000-0000000000b0");
    ats::init(&mut q0, &spec, 1000).expect("initial value");
    let runs: Vec<_> = (1..=2u64)
        .map(|h| {
            let (c, mut q) = connect(&s, &format!("00000000-0000-0000-0000-0000000000b{h}"));
            let spec = AtsSpec { seed: h, ..spec };
            std::thread::spawn(move || {
                let r = ats::run(&mut q, &spec);
                drop(c);
                r
            })
        })
        .collect();
    let results: Vec<_> = runs
        .into_iter()
        .map(|t| t.join().expect("host thread").expect("ATS run"))
        .collect();
    let won: u64 = results.iter().map(|r| r.won).sum();
    for r in &results {
        assert_eq!(r.pairs, spec.pairs);
        assert_eq!(r.won + r.lost, r.pairs);
        assert!(r.writes > 0, "neighbour writes ran beside the pairs");
    }
    assert_eq!(
        ats::read_value(&mut q0, &spec).expect("final value"),
        1000 + won,
        "every won pair incremented once: {results:?}"
    );
}
