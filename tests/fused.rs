//! The fused Compare and Write over NVMe/TCP, farflash's host against
//! `farflash serve` (issue 43), on every local backend: RAM, a file, a
//! volume of a local pool and (tests/block-device.sh) a real block device.
//! On each, a pair writes only when its data match, a miscompare writes
//! nothing, and two hosts on two controllers (two worker threads)
//! hammering test-and-set on one LBA, with 4 KiB writes beside it, never
//! tear the block and never lose or double an increment.

mod common;
mod host_support;

use common::TempDir;
use farflash_bench::ats::{self, AtsSpec};
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use host_support::{cli_ok, Serve};
use std::path::Path;
use std::time::Duration;

/// Pairs per host in the hammer runs: a test, not a benchmark.
const PAIRS: u64 = 1000;

/// A target and the namespace under test on it.
struct Target {
    s: Serve,
    nsid: u32,
    /// Logical block size in bytes.
    block: u32,
    _dir: Option<TempDir>,
}

impl Target {
    /// A RAM namespace (NSID 1).
    fn ram(extra: &[&str]) -> Target {
        let s = Serve::start("64M", extra);
        Target {
            s,
            nsid: 1,
            block: 512,
            _dir: None,
        }
    }

    /// `--file PATH` (a regular file or a block device) beside a small RAM
    /// namespace: NSID 2.
    fn file(path: &Path, dir: Option<TempDir>, extra: &[&str]) -> Target {
        let p = path.to_str().expect("UTF-8 path");
        let mut args = vec!["--file", p];
        args.extend(extra);
        let s = Serve::start("1M", &args);
        Target {
            s,
            nsid: 2,
            block: 512,
            _dir: dir,
        }
    }

    /// A 64 MiB sparse file.
    fn regular_file(name: &str, extra: &[&str]) -> Target {
        let dir = TempDir::new(name);
        let p = dir.0.join("ns.img");
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(64 << 20))
            .expect("sparse file");
        Target::file(&p, Some(dir), extra)
    }

    /// The block device named by FARFLASH_TEST_BLOCK_DEVICE (tests/block-device.sh
    /// makes a loop device); a missing device fails the test.
    fn block_device(extra: &[&str]) -> Target {
        let dev = std::env::var("FARFLASH_TEST_BLOCK_DEVICE")
            .expect("FARFLASH_TEST_BLOCK_DEVICE names the block device (tests/block-device.sh)");
        Target::file(Path::new(&dev), None, extra)
    }

    /// Volume `tank/fv` (64 MiB, 4 KiB blocks) of a pool over a sparse
    /// file, created through the management API and added as NSID 2.
    fn volume(name: &str, extra: &[&str]) -> Target {
        let dir = TempDir::new(name);
        let dev = dir.0.join("tank0.img");
        std::fs::File::create(&dev)
            .and_then(|f| f.set_len(256 << 20))
            .expect("sparse pool device");
        let d = dev.to_str().expect("UTF-8 path");
        cli_ok(&["pool", "create", "tank", d]);
        let cfg = dir.0.join("pools.toml");
        // A configuration needs a subsystem: a RAM one of its own beside
        // the flags' (whose NQN is the target's).
        let toml = format!(
            "[[subsystem]]\nnqn = \"nqn.2026-11.io.farflash.test:pools\"\n\
             [[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"1M\"\n\
             [[pool]]\nname = \"tank\"\ndevices = [\"{d}\"]\n"
        );
        std::fs::write(&cfg, toml).expect("config");
        let sock = dir.0.join("rpc.sock");
        let (c, k) = (cfg.to_str().expect("path"), sock.to_str().expect("path"));
        let mut args = vec!["--config", c, "--rpc-socket", k];
        args.extend(extra);
        let s = Serve::start("1M", &args);
        cli_ok(&["ctl", "-s", k, "volume", "create", "tank", "fv", "64M"]);
        cli_ok(&[
            "ctl",
            "-s",
            k,
            "namespace",
            "add",
            &s.nqn,
            "--volume",
            "tank/fv",
        ]);
        Target {
            s,
            nsid: 2,
            block: 4096,
            _dir: Some(dir),
        }
    }
}

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

/// A pair writes only when the data match; a miscompare writes nothing.
fn writes_only_on_match(t: &Target) {
    let (_c, mut q) = connect(&t.s, "00000000-0000-0000-0000-0000000000a1");
    let (ns, nlb) = (t.nsid, 4096 / t.block);
    let (old, new) = (vec![1u8; 4096], vec![2u8; 4096]);
    q.write_at(ns, 64, nlb, &old).expect("write");
    assert!(!q.compare_and_write(ns, 64, nlb, &new, &old).expect("pair"));
    let mut back = vec![0u8; 4096];
    q.read_at(ns, 64, nlb, &mut back).expect("read");
    assert_eq!(back, old, "a miscompare writes nothing");
    // Larger than in-capsule data: the halves' data come by R2T.
    assert!(q.compare_and_write(ns, 64, nlb, &old, &new).expect("pair"));
    q.read_at(ns, 64, nlb, &mut back).expect("read");
    assert_eq!(back, new);
}

/// Two hosts, each on its own controller, hammer test-and-set on one LBA
/// with 4 KiB writes beside it: no torn block, no lost increment.
fn hammer(t: &Target) {
    let spec = AtsSpec {
        nsid: t.nsid,
        lba: 0,
        block: t.block,
        pairs: PAIRS,
        qd: 16,
        neighbours: 64,
        seed: 0,
    };
    let (_c0, mut q0) = connect(&t.s, "00000000-0000-0000-0000-0000000000b0");
    ats::init(&mut q0, &spec, 1000).expect("initial value");
    let runs: Vec<_> = (1..=2u64)
        .map(|h| {
            let (c, mut q) = connect(&t.s, &format!("00000000-0000-0000-0000-0000000000b{h}"));
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

#[test]
fn a_fused_pair_writes_only_when_the_data_match() {
    writes_only_on_match(&Target::ram(&[]));
}

#[test]
fn on_a_file_a_fused_pair_writes_only_when_the_data_match() {
    writes_only_on_match(&Target::regular_file("fused-file", &[]));
}

#[test]
fn on_a_volume_a_fused_pair_writes_only_when_the_data_match() {
    writes_only_on_match(&Target::volume("fused-volume", &[]));
}

#[test]
fn two_hosts_hammering_test_and_set_never_tear_or_lose_an_increment() {
    hammer(&Target::ram(&["--threads", "2"]));
}

#[test]
fn on_a_file_two_hosts_hammering_test_and_set_never_tear_or_lose_an_increment() {
    hammer(&Target::regular_file("fused-file-ats", &["--threads", "2"]));
}

#[test]
fn on_a_volume_two_hosts_hammering_test_and_set_never_tear_or_lose_an_increment() {
    hammer(&Target::volume("fused-volume-ats", &["--threads", "2"]));
}

/// Run by tests/block-device.sh on a loop device.
#[test]
#[ignore = "needs a block device: tests/block-device.sh"]
fn on_a_block_device_fused_pairs_are_atomic() {
    let t = Target::block_device(&["--threads", "2"]);
    writes_only_on_match(&t);
    hammer(&t);
}

#[test]
fn copy_from_the_host_lands_in_order_and_limits_are_refused() {
    let t = Target::ram(&[]);
    let (_c, mut q) = connect(&t.s, "00000000-0000-0000-0000-0000000000c1");
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
