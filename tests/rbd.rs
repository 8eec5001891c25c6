//! RBD namespaces against a real single-node Ceph cluster (Debian's Ceph
//! 16.2 daemons, started by tests/ceph/cluster.sh for each test under a
//! temporary directory on 127.0.0.1, stopped when the test ends):
//!
//! - `farflash perf --verify` through an RBD namespace; data written through
//!   farflash is in the image (`rbd export`), data imported with `rbd import`
//!   reads back through a namespace added with `farflash ctl`; Flush, Write
//!   Zeroes and Deallocate; the image resized with `rbd resize` becomes a
//!   resized namespace (NSZE, Changed Namespace List);
//! - a missing pool or image, a missing or wrong keyring, an unreachable
//!   cluster: `farflash serve` exits at once with an error naming it;
//! - two gateways on one image with ANA: the exclusive lock follows the
//!   optimized state (released on demotion, taken on promotion), a write to
//!   the gateway without the lock gets ANA Transition, a promoted gateway
//!   breaks a dead owner's lock at once and fences (blocklists) it;
//! - two gateways on one image without the lock: fused Compare and Write
//!   through both is atomic (librbd's compare-and-write), hosts hammering
//!   test-and-set through both never tear the block nor lose an increment;
//! - the OSD stopped mid-run: an RBD command fails with an NVMe status
//!   within the OSD operation timeout while a RAM namespace keeps serving;
//! - Keep Alives beside image opens and closes (issue 33): 16 controllers
//!   (on both workers) each get a Keep Alive every 160 ms, timed, while RBD
//!   namespaces are added (opens slowed to about 2 s by Ceph's message
//!   delay injection) and removed, ten times; every Keep Alive answers
//!   within 150 ms, none expires, every controller stays connected; at a
//!   graceful exit `farflash serve` still releases the lock and watch of
//!   an image it wrote to (closes run on threads of their own).
//!
//! `cargo test --test rbd -- --ignored --test-threads=1` (tests/run.sh).

mod ceph;
mod common;

use ceph::Cluster;
use common::{Serve, NQN};
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use farflash_wire::Status;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed ^ (i >> 9) as u8)
        .collect()
}

fn connect(s: &Serve, queues: u16) -> Controller {
    let mut o = ConnectOptions::new(s.addr.clone(), NQN);
    o.command_timeout = Duration::from_secs(60);
    Controller::connect_with_queues(&o, queues).expect("connect")
}

fn queue_opts() -> IoQueueOptions {
    IoQueueOptions {
        depth: 16,
        max_io: 64 * 1024,
    }
}

/// `farflash serve ARGS` that must fail: its stderr and how long it took.
fn serve_fails(args: &[&str], within: Duration) -> (String, Duration) {
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["serve", "--listen", "127.0.0.1:0", "--rpc-socket", "none"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn farflash serve");
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().expect("stderr"), &mut err)
                .expect("read stderr");
            assert!(!st.success(), "serve {args:?} started: {err}");
            return (err, t.elapsed());
        }
        if t.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve {args:?} neither started nor failed within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "starts a Ceph cluster (Debian's ceph packages); run by tests/run.sh"]
fn rbd_namespace_verified_io_and_the_data_is_in_ceph() {
    let c = Cluster::start("io");
    // An image filled from outside farflash: librbd's own import.
    let src = c.dir().join("import.bin");
    let imported = pattern(1 << 20, 0x5a);
    std::fs::write(&src, &imported).unwrap();
    c.rbd(&["import", src.to_str().unwrap(), "rbd/imported"]);

    let sock = c.dir().join("rpc.sock");
    let s = Serve::start(&[
        "--rpc-socket",
        sock.to_str().unwrap(),
        "--threads",
        "2",
        "--rbd",
        "rbd/test",
        "--ram",
        "16M",
        "--ceph-conf",
        c.conf(),
    ]);
    // The second image is added at run time, through the management API,
    // with 4 KiB blocks.
    let ctl = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_farflash"))
            .args(["ctl", "--rpc-socket", sock.to_str().unwrap()])
            .args(args)
            .output()
            .expect("run farflash ctl")
    };
    let out = ctl(&[
        "namespace",
        "add",
        NQN,
        "--rbd",
        "rbd/imported",
        "--ceph-conf",
        c.conf(),
        "--block-size",
        "4096",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("namespace 3 added"),
        "{text}"
    );
    let out = ctl(&["namespace", "resize", NQN, "3", "2M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is RBD"), "{err}");
    let out = ctl(&[
        "namespace",
        "add",
        NQN,
        "--rbd",
        "rbd/absent",
        "--ceph-conf",
        c.conf(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("image rbd/absent"),
        "{err}"
    );
    let port = s.port.to_string();
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["perf", "-a", "127.0.0.1", "-s", &port, "-n", NQN])
        .args(["--nsid", "1", "--rw", "randrw", "--iodepth", "16"])
        .args(["--bssplit", "4k/50:64k/30:128k/20", "--size", "32M"])
        .args(["--numjobs", "2", "--verify", "crc32c"])
        .output()
        .expect("run farflash perf");
    assert!(
        out.status.success(),
        "perf --verify through the RBD namespace: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("perf --verify (2 jobs, 32M each) in {:.1?}", t.elapsed());

    let ctrl = connect(&s, 2);
    let mut q = ctrl.io_queue(1, queue_opts()).expect("queue");
    // Written through farflash at 40 MiB (LBA 81920), flushed, then read
    // back through librbd directly.
    let data = pattern(64 * 1024, 7);
    q.write_at(1, 81920, 128, &data).expect("write");
    q.flush(1).expect("flush");
    // Write Zeroes and Deallocate (unaligned to RBD's 4 MiB objects) read
    // back as zeroes.
    q.write_at(1, 200, 64, &pattern(32 * 1024, 9))
        .expect("write");
    q.write_zeroes(1, 200, 16).expect("write zeroes");
    q.deallocate(1, &[(232, 8), (248, 16)]).expect("deallocate");
    let mut b = vec![0u8; 32 * 1024];
    q.read_at(1, 200, 64, &mut b).unwrap();
    let expect = pattern(32 * 1024, 9);
    for (lba, chunk) in b.chunks(512).enumerate() {
        let lba = 200 + lba as u64;
        let zero =
            (200..216).contains(&lba) || (232..240).contains(&lba) || (248..264).contains(&lba);
        let off = ((lba - 200) * 512) as usize;
        if zero {
            assert!(chunk.iter().all(|&x| x == 0), "LBA {lba} not zeroed");
        } else {
            assert_eq!(chunk, &expect[off..off + 512], "LBA {lba} changed");
        }
    }
    // The imported image's bytes, through farflash (nsid 3, 4 KiB blocks).
    assert_eq!(ctrl.identify_ns(3).map(|n| n.nsze).ok(), Some(256));
    let mut b = vec![0u8; 64 * 1024];
    q.read_at(3, 128, 16, &mut b).unwrap();
    assert_eq!(b, imported[512 * 1024..576 * 1024], "rbd import → farflash");
    // Beyond the image: an NVMe status, not a hang.
    let e = q.read_at(1, 1 << 40, 8, &mut b).unwrap_err();
    assert!(e.status().is_some(), "{e}");

    // The image grown in Ceph: the namespace follows (the target asks
    // librbd every 2 s), the host finds NSID 1 in the Changed Namespace List,
    // and the new blocks are usable.
    let _ = ctrl.get_log_page(0x04, 0xFFFF_FFFF, 4096, 0);
    c.rbd(&["resize", "--size", "384M", "rbd/test"]);
    let t = Instant::now();
    let grown = common::eventually(Duration::from_secs(15), || {
        ctrl.identify_ns(1).map(|n| n.nsze).ok() == Some(384 << 11)
    });
    assert!(
        grown,
        "NSZE still {:?}",
        ctrl.identify_ns(1).map(|n| n.nsze).ok()
    );
    eprintln!("resize seen in {:.1?}", t.elapsed());
    let log = ctrl.get_log_page(0x04, 0xFFFF_FFFF, 4096, 0).unwrap();
    assert_eq!(
        &log[..8],
        &[1, 0, 0, 0, 0, 0, 0, 0],
        "Changed Namespace List"
    );
    let tail = pattern(4096, 11);
    q.write_at(1, 320 << 11, 8, &tail)
        .expect("write in the new blocks");
    drop(q);
    ctrl.shutdown().unwrap();
    drop(s);

    let exported = c.dir().join("export.bin");
    c.rbd(&["export", "rbd/test", exported.to_str().unwrap()]);
    let img = std::fs::read(&exported).unwrap();
    assert_eq!(img.len(), 384 << 20);
    assert_eq!(
        &img[320 << 20..(320 << 20) + 4096],
        &tail[..],
        "written after the resize"
    );
    assert_eq!(
        &img[40 << 20..(40 << 20) + data.len()],
        &data[..],
        "farflash → rbd export"
    );
}

#[test]
#[ignore = "starts a Ceph cluster (Debian's ceph packages); run by tests/run.sh"]
fn bad_rbd_settings_fail_the_start_naming_what_is_wrong() {
    let c = Cluster::start("bad");
    let conf = c.conf();
    let quick = Duration::from_secs(30);
    let (e, _) = serve_fails(&["--rbd", "nopool/test", "--ceph-conf", conf], quick);
    assert!(
        e.contains("pool \"nopool\"") && e.contains("No such file"),
        "{e}"
    );
    let (e, _) = serve_fails(&["--rbd", "rbd/noimage", "--ceph-conf", conf], quick);
    assert!(
        e.contains("image rbd/noimage") && e.contains("No such file"),
        "{e}"
    );
    let (e, _) = serve_fails(
        &["--rbd", "rbd/test", "--ceph-conf", "/nonexistent/ceph.conf"],
        quick,
    );
    assert!(
        e.contains("ceph.conf /nonexistent/ceph.conf does not exist"),
        "{e}"
    );
    let (e, _) = serve_fails(
        &[
            "--rbd",
            "rbd/test",
            "--ceph-conf",
            conf,
            "--ceph-keyring",
            "/nonexistent/k",
        ],
        quick,
    );
    assert!(
        e.contains("ceph keyring /nonexistent/k does not exist"),
        "{e}"
    );

    // The right client, the wrong key.
    let wrong = c.dir().join("wrong.keyring");
    let st = Command::new("ceph-authtool")
        .args([
            "--create-keyring",
            wrong.to_str().unwrap(),
            "--gen-key",
            "-n",
            "client.admin",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let (e, took) = serve_fails(
        &[
            "--rbd",
            "rbd/test",
            "--ceph-conf",
            conf,
            "--ceph-keyring",
            wrong.to_str().unwrap(),
        ],
        quick,
    );
    assert!(
        e.contains("connecting to the Ceph cluster as client.admin"),
        "{e}"
    );
    eprintln!(
        "wrong key refused in {took:.1?}: {}",
        e.lines().last().unwrap_or("")
    );
    // A client id the cluster does not know.
    let (e, _) = serve_fails(
        &[
            "--rbd",
            "rbd/test",
            "--ceph-conf",
            conf,
            "--ceph-id",
            "nobody",
        ],
        quick,
    );
    assert!(e.contains("client.nobody"), "{e}");

    // Nothing listens where the ceph.conf points: fails within
    // client_mount_timeout (farflash's 10 s), not Ceph's 300 s.
    let dead = c.dir().join("dead.conf");
    let port = common::free_port();
    let text = std::fs::read_to_string(c.conf()).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("mon_host") {
                format!("mon_host = v2:127.0.0.1:{port}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&dead, text).unwrap();
    let (e, took) = serve_fails(
        &["--rbd", "rbd/test", "--ceph-conf", dead.to_str().unwrap()],
        Duration::from_secs(40),
    );
    assert!(e.contains("connecting to the Ceph cluster"), "{e}");
    assert!(
        took < Duration::from_secs(25),
        "unreachable cluster took {took:?}"
    );
    eprintln!("unreachable cluster refused in {took:.1?}");
}

#[test]
#[ignore = "starts a Ceph cluster (Debian's ceph packages); run by tests/run.sh"]
fn stopped_osd_fails_rbd_commands_in_bounded_time_and_ram_keeps_serving() {
    let c = Cluster::start("osd");
    // A short OSD operation timeout for this client (farflash keeps a value
    // the ceph.conf sets).
    let mut conf = std::fs::read_to_string(c.conf()).unwrap();
    conf.push_str("\n[client.admin]\nrados_osd_op_timeout = 4\n");
    std::fs::write(c.conf(), conf).unwrap();
    let s = Serve::start(&[
        "--rpc-socket",
        "none",
        "--threads",
        "1",
        "--rbd",
        "rbd/test",
        "--ram",
        "16M",
        "--ceph-conf",
        c.conf(),
    ]);
    let mut ctrl = connect(&s, 2);
    ctrl.start_keep_alive().expect("keep-alive");
    let mut rbd_q = ctrl.io_queue(1, queue_opts()).expect("queue 1");
    let mut ram_q = ctrl.io_queue(2, queue_opts()).expect("queue 2");
    rbd_q
        .write_at(1, 0, 8, &pattern(4096, 1))
        .expect("write before the stop");

    c.stop_osd();
    let t = Instant::now();
    // A write to the RBD namespace that cannot reach an OSD...
    let cid = rbd_q.alloc_cid().unwrap();
    rbd_q.buf_mut(cid).unwrap()[..4096].copy_from_slice(&pattern(4096, 2));
    rbd_q.submit_write(cid, 1, 4096, 8, 4096).unwrap();
    // ...while the RAM namespace, on the same worker, answers at once.
    let mut ram_ios = 0;
    let mut slowest = Duration::ZERO;
    let mut done = Vec::new();
    while done.is_empty() {
        let r = Instant::now();
        ram_q
            .write_at(2, 8, 8, &pattern(4096, 3))
            .expect("RAM write");
        let mut b = vec![0u8; 4096];
        ram_q.read_at(2, 8, 8, &mut b).expect("RAM read");
        assert_eq!(b, pattern(4096, 3));
        slowest = slowest.max(r.elapsed());
        ram_ios += 2;
        rbd_q.wait(&mut done, Duration::from_millis(10)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(30), "the RBD write hangs");
    }
    let failed = t.elapsed();
    let status = done[0].check().expect_err("the write must fail");
    eprintln!(
        "RBD write failed after {failed:.1?} ({status}); meanwhile {ram_ios} RAM I/Os, slowest {slowest:.1?}"
    );
    assert!(status.status().is_some(), "an NVMe status: {status}");
    assert!(slowest < Duration::from_secs(1), "RAM I/O took {slowest:?}");
    assert!(ram_ios >= 20, "only {ram_ios} RAM I/Os");
    // The target is still up and the RBD namespace still answers (with an error).
    let mut b = vec![0u8; 4096];
    let t = Instant::now();
    let e = rbd_q.read_at(1, 0, 8, &mut b).unwrap_err();
    assert!(
        e.status().is_some() && t.elapsed() < Duration::from_secs(20),
        "{e}"
    );
    drop(rbd_q);
    drop(ram_q);
    let _ = ctrl.shutdown();
}

const HA_NQN: &str = "nqn.2026-11.io.farflash:rbd-ha";

/// One gateway of a pair exporting rbd/test as NSID 1 (ANA group 1, the
/// same NGUID and serial on both, CNTLIDs from `cntlid_min`) on
/// 127.0.0.1:`port`, group 1 in `state` through that listener; its
/// management socket is `DIR/NAME.sock`.
fn gateway(c: &Cluster, name: &str, port: u16, cntlid_min: u16, state: &str) -> Serve {
    let addr = format!("127.0.0.1:{port}");
    let ana = if state == "optimized" {
        String::new()
    } else {
        format!("[[subsystem.ana]]\nlisten = \"{addr}\"\nanagrpid = 1\nstate = \"{state}\"\n")
    };
    let cfg = c.dir().join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "listen = [\"{addr}\"]\n[[subsystem]]\nnqn = \"{HA_NQN}\"\nserial = \"FFRBDHA1\"\n\
             cntlid_min = {cntlid_min}\ncntlid_max = {}\n{ana}\
             [[subsystem.namespace]]\nnsid = 1\nbackend = \"rbd\"\n\
             nguid = \"2b7e151628aed2a6abf7158809cf4f3c\"\n\
             rbd = {{ pool = \"rbd\", image = \"test\", conf = \"{}\" }}\n",
            cntlid_min + 998,
            c.conf()
        ),
    )
    .expect("write the gateway's config");
    Serve::start_config(&cfg, &c.dir().join(format!("{name}.sock")), port)
}

/// `farflash ctl ana set` on gateway `name`: group 1 in `state` through its listener.
fn ana_set(c: &Cluster, name: &str, g: &Serve, state: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .arg("ctl")
        .arg("--rpc-socket")
        .arg(c.dir().join(format!("{name}.sock")))
        .args(["ana", "set", HA_NQN, &g.addr, "1", state])
        .output()
        .expect("run farflash ctl");
    assert!(
        out.status.success(),
        "ctl ana set {name} {state}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Clients in the cluster's OSD blocklist.
fn blocklisted(c: &Cluster) -> usize {
    let out = Command::new("timeout")
        .args(["60", "ceph", "-c", c.conf(), "osd", "blocklist", "ls"])
        .output()
        .expect("run ceph osd blocklist ls");
    assert!(out.status.success(), "ceph osd blocklist ls failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

fn ha_connect(g: &Serve) -> (Controller, farflash_host::IoQueue) {
    let mut o = ConnectOptions::new(g.addr.clone(), HA_NQN);
    o.command_timeout = Duration::from_secs(60);
    let mut c = Controller::connect_with_queues(&o, 1).expect("connect");
    // The test pauses longer than KATO (5 s) between commands on a queue.
    c.start_keep_alive().expect("keep-alive");
    let q = c.io_queue(1, queue_opts()).expect("I/O queue");
    (c, q)
}

/// The NVMe status a failed command got.
fn status_of(r: Result<(), farflash_host::HostError>) -> Status {
    let e = r.expect_err("the command must fail");
    let st = e.status().unwrap_or_else(|| panic!("no NVMe status: {e}"));
    assert!(!st.is_dnr(), "an ANA status lets the host retry elsewhere");
    st.code()
}

#[test]
#[ignore = "starts a Ceph cluster (Debian's ceph packages); run by tests/run.sh"]
fn two_gateways_move_the_exclusive_lock_with_ana() {
    let c = Cluster::start("ana");
    let (pa, pb) = (common::free_port(), common::free_port());
    let a = gateway(&c, "a", pa, 1, "optimized");
    let b = gateway(&c, "b", pb, 1000, "non-optimized");
    let (_ca, mut qa) = ha_connect(&a);
    let (_cb, mut qb) = ha_connect(&b);
    let mut buf = vec![0u8; 4096];

    // 1. A (optimized) owns the lock. B (non-optimized) reads what A wrote;
    // its write gets ANA Transition instead of taking the lock over, and A
    // keeps writing.
    qa.write_at(1, 0, 8, &pattern(4096, 1)).expect("A writes");
    qb.read_at(1, 0, 8, &mut buf).expect("B reads");
    assert_eq!(buf, pattern(4096, 1), "A's write read through B");
    let st = status_of(qb.write_at(1, 8, 8, &pattern(4096, 2)));
    assert_eq!(
        st,
        Status::ANA_TRANSITION,
        "a write to the gateway without the lock"
    );
    let t = Instant::now();
    qa.write_at(1, 8, 8, &pattern(4096, 3))
        .expect("A still writes");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "A lost the lock: {:?}",
        t.elapsed()
    );
    qb.read_at(1, 8, 8, &mut buf).expect("B reads");
    assert_eq!(buf, pattern(4096, 3), "B's refused write left nothing");
    assert_eq!(blocklisted(&c), 0);

    // 2. Orderly move: A demoted (releases), then B promoted (acquires, no
    // one to break).
    let t = Instant::now();
    ana_set(&c, "a", &a, "inaccessible");
    ana_set(&c, "b", &b, "optimized");
    qb.write_at(1, 16, 8, &pattern(4096, 4))
        .expect("B writes once optimized");
    eprintln!("orderly lock move and B's first write: {:.1?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let st = status_of(qa.write_at(1, 24, 8, &pattern(4096, 5)));
    assert_eq!(st, Status::ANA_INACCESSIBLE, "A is inaccessible now");
    assert_eq!(blocklisted(&c), 0, "an orderly move blocklists no one");

    // 3. B dies holding the lock; A promoted breaks the dead owner's lock
    // (blocklisting it) at once instead of waiting ~30 s for its watch to
    // expire, reads B's acknowledged write and writes.
    drop(qb);
    drop(b);
    let t = Instant::now();
    ana_set(&c, "a", &a, "optimized");
    qa.read_at(1, 16, 8, &mut buf).expect("A reads");
    assert_eq!(
        buf,
        pattern(4096, 4),
        "B's acknowledged write, read through A"
    );
    qa.write_at(1, 24, 8, &pattern(4096, 6))
        .expect("A writes after B died");
    eprintln!(
        "failover to A after B's SIGKILL, first write done: {:.1?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(blocklisted(&c), 1, "B's client is blocklisted");

    // 4. The operator makes both optimized: the one promoted last (B,
    // restarted) breaks A's lock and A is fenced: its writes get ANA
    // Transition, nothing it sends reaches the image.
    let b = gateway(&c, "b", pb, 1000, "non-optimized");
    let (_cb, mut qb) = ha_connect(&b);
    ana_set(&c, "b", &b, "optimized");
    qb.write_at(1, 32, 8, &pattern(4096, 7)).expect("B writes");
    let t = Instant::now();
    let st = status_of(qa.write_at(1, 40, 8, &pattern(4096, 8)));
    eprintln!("A fenced: its write failed after {:.1?}", t.elapsed());
    assert_eq!(st, Status::ANA_TRANSITION, "the fenced gateway's write");
    assert_eq!(blocklisted(&c), 2, "A's client is blocklisted too");
    qb.read_at(1, 40, 8, &mut buf).expect("B reads");
    assert_eq!(buf, vec![0u8; 4096], "A's fenced write is not in the image");

    drop((qa, qb, a, b));
    let exported = c.dir().join("export.bin");
    c.rbd(&["export", "rbd/test", exported.to_str().unwrap()]);
    let img = std::fs::read(&exported).unwrap();
    for (lba, seed) in [(0, 1), (8, 3), (16, 4), (24, 6), (32, 7)] {
        assert_eq!(
            &img[lba * 512..(lba + 8) * 512],
            &pattern(4096, seed)[..],
            "LBA {lba}"
        );
    }
    assert!(img[40 * 512..48 * 512].iter().all(|&b| b == 0), "LBA 40");
}

/// Fused Compare and Write across gateways (issue 43): rbd/test without
/// the exclusive lock (every gateway writes, docs/rbd.md), exported by two
/// gateways, both optimized. A one-block pair (512-byte blocks: inside
/// librbd's compare-and-write unit) runs as librbd's compare-and-write,
/// atomic at the OSD: a miscompare through one gateway writes nothing, and
/// two hosts, one on each gateway, hammering test-and-set on one LBA with
/// 4 KiB writes beside it never tear the block nor lose an increment (a
/// read-compare-write in each gateway would: both would win with the same
/// value). A wider pair takes the in-process path and still answers.
#[test]
#[ignore = "starts a Ceph cluster (Debian's ceph packages); run by tests/run.sh"]
fn two_gateways_run_fused_compare_and_write_atomically() {
    use farflash_bench::ats::{self, AtsSpec};
    let c = Cluster::start("ats");
    c.rbd(&[
        "feature",
        "disable",
        "rbd/test",
        "fast-diff",
        "object-map",
        "exclusive-lock",
    ]);
    let (pa, pb) = (common::free_port(), common::free_port());
    let a = gateway(&c, "a", pa, 1, "optimized");
    let b = gateway(&c, "b", pb, 1000, "optimized");
    let (_ca, mut qa) = ha_connect(&a);
    let (_cb, mut qb) = ha_connect(&b);

    // Through B, a pair over what A wrote: a miscompare writes nothing,
    // a match writes (A reads it).
    let (old, new) = (pattern(512, 1), pattern(512, 2));
    qa.write_at(1, 100, 1, &old).expect("A writes");
    assert!(!qb.compare_and_write(1, 100, 1, &new, &old).expect("pair"));
    let mut back = vec![0u8; 512];
    qa.read_at(1, 100, 1, &mut back).expect("A reads");
    assert_eq!(back, old, "a miscompare writes nothing");
    assert!(qb.compare_and_write(1, 100, 1, &old, &new).expect("pair"));
    qa.read_at(1, 100, 1, &mut back).expect("A reads");
    assert_eq!(back, new, "the pair's write, read through A");
    // Eight blocks: beyond librbd's unit, run under B's own exclusion.
    let (old8, new8) = (pattern(4096, 3), pattern(4096, 4));
    qa.write_at(1, 200, 8, &old8).expect("A writes");
    assert!(!qb.compare_and_write(1, 200, 8, &new8, &new8).expect("pair"));
    assert!(qb.compare_and_write(1, 200, 8, &old8, &new8).expect("pair"));
    let mut back8 = vec![0u8; 4096];
    qa.read_at(1, 200, 8, &mut back8).expect("A reads");
    assert_eq!(back8, new8);

    let spec = AtsSpec {
        nsid: 1,
        lba: 0,
        block: 512,
        // 400 pairs a host at QD 8 (a few minutes at most on a loaded
        // machine): without librbd's compare-and-write, 2 x 1000 at QD 16
        // lost about one increment in ten.
        pairs: 400,
        qd: 8,
        neighbours: 64,
        seed: 0,
    };
    ats::init(&mut qa, &spec, 1000).expect("initial value");
    let runs: Vec<_> = [(qa, 1u64), (qb, 2)]
        .into_iter()
        .map(|(mut q, h)| {
            let spec = AtsSpec { seed: h, ..spec };
            std::thread::spawn(move || (ats::run(&mut q, &spec), q))
        })
        .collect();
    let mut won = 0;
    let mut queues = vec![];
    for t in runs {
        let (r, q) = t.join().expect("host thread");
        let r = r.expect("ATS run");
        assert_eq!((r.pairs, r.won + r.lost), (spec.pairs, spec.pairs));
        assert!(r.writes > 0, "neighbour writes ran beside the pairs");
        eprintln!("ATS through one gateway: {r:?}");
        won += r.won;
        queues.push(q);
    }
    for q in &mut queues {
        assert_eq!(
            ats::read_value(q, &spec).expect("final value"),
            1000 + won,
            "every won pair incremented once, read through both gateways"
        );
    }
}

/// One Keep Alive of the probe: when it was sent and when it completed.
struct KaSample {
    sent: Instant,
    done: Instant,
}

impl KaSample {
    fn rtt(&self) -> Duration {
        self.done - self.sent
    }
    /// Whether it was outstanding at some time of `from..to`.
    fn overlaps(&self, (from, to): (Instant, Instant)) -> bool {
        self.sent < to && self.done > from
    }
}

/// What the Keep Alive probe saw: its samples, its failures, how many times
/// it went round every controller.
#[derive(Default)]
struct KaProbe {
    samples: Mutex<Vec<KaSample>>,
    failures: Mutex<Vec<String>>,
    rounds: AtomicU64,
    stop: AtomicBool,
}

impl KaProbe {
    fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Acquire)
    }

    /// Waits until the probe went round every controller twice more: each
    /// one's admin queue took a Keep Alive since the call.
    fn two_more_rounds(&self) {
        let seen = self.rounds() + 2;
        assert!(
            common::eventually(Duration::from_secs(20), || self.rounds() >= seen),
            "the Keep Alive probe stopped going round"
        );
    }
}

/// Sends a Keep Alive on one controller after the other, one every `every`
/// (each controller's every `every` × their number), until `stop`; gives
/// the controllers back. A failed Keep Alive is recorded (not retried).
fn probe_keep_alives(ctrls: Vec<Controller>, every: Duration, p: &KaProbe) -> Vec<Controller> {
    let start = Instant::now();
    let mut k: u32 = 0;
    while !p.stop.load(Ordering::Relaxed) {
        for (i, c) in ctrls.iter().enumerate() {
            // Pacing only: one due already (the one before was slow) goes
            // at once.
            let due = start + every * k;
            k += 1;
            if let Some(left) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            }
            let sent = Instant::now();
            let r = c.keep_alive();
            let done = Instant::now();
            match r {
                Ok(()) => p.samples.lock().unwrap().push(KaSample { sent, done }),
                Err(e) => (p.failures.lock().unwrap()).push(format!("controller {i}: {e}")),
            }
        }
        p.rounds.fetch_add(1, Ordering::Release);
    }
    ctrls
}

/// The value at fraction `q` of `v` once sorted (zero when empty).
fn quantile(v: &[Duration], q: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort_unstable();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).copied().unwrap_or_default()
}

fn summary(v: &[Duration]) -> String {
    format!(
        "p50 {:.2?} p99 {:.2?} max {:.2?}",
        quantile(v, 0.5),
        quantile(v, 0.99),
        quantile(v, 1.0)
    )
}

#[test]
#[ignore = "starts a Ceph cluster (Debian's ceph packages); run by tests/run.sh"]
fn keep_alives_stay_on_time_while_rbd_images_open_and_close() {
    // Issue 33: opening an RBD image (librados connects to the monitors and
    // authenticates, librbd opens the image) and closing one (librbd drops
    // its watch, librados its session and threads) are slow work; the Keep
    // Alives of every connected controller must still be answered at once.
    const CONTROLLERS: usize = 16;
    const CYCLES: usize = 10;
    const IMAGES: usize = 3;
    const IMAGE_BLOCKS: u64 = 64 << 11;
    // KATO is 5 s. A held-up worker shows as a Keep Alive of this or more
    // (up to 510-570 ms when closes ran on the workers); a loaded machine
    // adds a few ms (at most 16 ms seen beside a busy loop).
    const KA_BOUND: Duration = Duration::from_millis(150);
    let c = Cluster::start("ka");
    for i in 0..IMAGES {
        c.rbd(&["create", "--size", "64M", &format!("rbd/ka{i}")]);
    }
    // The namespaces' client sees the cluster through Ceph's own fault
    // injection: every message from a monitor or an OSD delivered up to
    // 200 ms late, as from a distant or loaded cluster. An open (a dozen
    // round trips) takes about 2 s, a close some hundreds of ms: a worker
    // either held up could not hide it among the Keep Alives.
    let slow = c.dir().join("slow.conf");
    let conf = std::fs::read_to_string(c.conf()).unwrap().replacen(
        "[client]\n",
        "[client]\nms_inject_delay_type = mon osd\nms_inject_delay_max = 0.2\n\
         ms_inject_delay_probability = 1\n",
        1,
    );
    assert!(conf.contains("ms_inject_delay_type"), "no [client] section");
    std::fs::write(&slow, conf).unwrap();
    let sock = c.dir().join("rpc.sock");
    let mut s = Serve::start(&[
        "--rpc-socket",
        sock.to_str().unwrap(),
        "--threads",
        "2",
        "--ram",
        "16M",
    ]);
    let rpc = |method: &str, params: serde_json::Value| -> serde_json::Value {
        let req =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (a, text) = common::rpc_exchange(&sock, req.to_string().as_bytes());
        assert!(a.get("error").is_none(), "{method}: {text}");
        a["result"].clone()
    };

    // The probed controllers (KATO 5 s) and two I/O queues each, idle until
    // the end. The target hands connections to its 2 workers round robin:
    // with 3 per controller the admin queues (the Keep Alives) alternate
    // between the workers (with 2, every admin queue would be on one).
    let mut ctrls = Vec::new();
    let mut queues = Vec::new();
    for i in 0..CONTROLLERS {
        let mut o = ConnectOptions::new(s.addr.clone(), NQN);
        o.hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0033-{i:012}");
        o.kato_ms = 5000;
        o.command_timeout = Duration::from_secs(10);
        let ctrl = Controller::connect_with_queues(&o, 2).expect("connect");
        for qid in 1..=2 {
            queues.push(ctrl.io_queue(qid, queue_opts()).expect("I/O queue"));
        }
        ctrls.push(ctrl);
    }
    // A host that reads each new namespace (as Linux does when one
    // appears): a worker's storage queue holds the image too.
    let mut reader = connect(&s, 1);
    reader.start_keep_alive().expect("keep-alive");
    let mut reader_q = reader.io_queue(1, queue_opts()).expect("I/O queue");

    let probe = std::sync::Arc::new(KaProbe::default());
    let p = probe.clone();
    let probing =
        std::thread::spawn(move || probe_keep_alives(ctrls, Duration::from_millis(10), &p));

    let t = Instant::now();
    let (mut opens, mut removes) = (Vec::new(), Vec::new());
    for i in 0..CYCLES {
        let image = format!("ka{}", i % IMAGES);
        let rbd = serde_json::json!({"pool": "rbd", "image": image, "conf": slow});
        let from = Instant::now();
        let a = rpc(
            "namespace_add",
            serde_json::json!({"nqn": NQN, "backend": "rbd", "rbd": rbd}),
        );
        opens.push((from, Instant::now()));
        let nsid = a["nsid"].as_u64().expect("nsid") as u32;
        // The image is there: its size, and a read through it.
        assert_eq!(
            reader.identify_ns(nsid).map(|n| n.nsze).ok(),
            Some(IMAGE_BLOCKS),
            "rbd/{image} as NSID {nsid}"
        );
        let mut b = vec![0u8; 4096];
        reader_q.read_at(nsid, 0, 8, &mut b).expect("read rbd");
        // Every probed admin queue loads the new list at its next Keep
        // Alive: they all hold the image when it is removed.
        probe.two_more_rounds();
        let from = Instant::now();
        rpc(
            "namespace_remove",
            serde_json::json!({"nqn": NQN, "nsid": nsid}),
        );
        removes.push((from, Instant::now()));
    }
    // The queues let the last image go at their next Keep Alive.
    probe.two_more_rounds();
    let busy = t.elapsed();
    probe.stop.store(true, Ordering::Relaxed);
    let ctrls = probing.join().expect("the probe thread");

    let failures = probe.failures.lock().unwrap();
    assert!(failures.is_empty(), "failed Keep Alives: {failures:?}");
    let samples = probe.samples.lock().unwrap();
    let all: Vec<Duration> = samples.iter().map(KaSample::rtt).collect();
    let during = |w: &[(Instant, Instant)]| -> Vec<Duration> {
        (samples.iter())
            .filter(|k| w.iter().any(|&w| k.overlaps(w)))
            .map(KaSample::rtt)
            .collect()
    };
    // A removed image closes once the queues let it go: at their next
    // Keep Alive (every 160 ms) or tick.
    let closing: Vec<_> = (removes.iter())
        .map(|&(from, to)| (from, to + Duration::from_secs(1)))
        .collect();
    let (in_open, in_close) = (during(&opens), during(&closing));
    let took = |w: &[(Instant, Instant)]| -> Vec<Duration> {
        w.iter().map(|&(from, to)| to - from).collect()
    };
    let (open_t, remove_t) = (took(&opens), took(&removes));
    eprintln!(
        "{CYCLES} RBD namespace adds (image opens): median {:.2?} max {:.2?}; \
         removes: median {:.1?} max {:.1?}; {busy:.1?} in all",
        quantile(&open_t, 0.5),
        quantile(&open_t, 1.0),
        quantile(&remove_t, 0.5),
        quantile(&remove_t, 1.0),
    );
    eprintln!("Keep Alives: {} in all, {}", all.len(), summary(&all));
    eprintln!(
        "  {} while an image opened, {}",
        in_open.len(),
        summary(&in_open)
    );
    eprintln!(
        "  {} in the second after a remove returned, {}",
        in_close.len(),
        summary(&in_close)
    );
    // The opens were slow enough for a held-up worker to show, and Keep
    // Alives went all along: every controller's at least every 200 ms.
    assert!(
        quantile(&open_t, 0.5) > KA_BOUND * 4,
        "image opens took {open_t:?}: too quick to tell a held-up worker"
    );
    assert!(
        all.len() >= CONTROLLERS * (busy.as_millis() as usize / 200),
        "only {} Keep Alives in {busy:?}",
        all.len()
    );
    assert!(
        in_open.len() >= CYCLES * CONTROLLERS,
        "only {} Keep Alives while images opened",
        in_open.len()
    );
    let slowest = samples.iter().max_by_key(|k| k.rtt()).expect("samples");
    let since = |w: &[(Instant, Instant)]| match w.iter().rev().find(|w| w.1 <= slowest.sent) {
        Some(w) => format!("{:.1?}", slowest.sent - w.1),
        None => "-".to_owned(),
    };
    assert!(
        slowest.rtt() < KA_BOUND,
        "a Keep Alive took {:.1?}, sent {} after the last add returned, {} after the last remove",
        slowest.rtt(),
        since(&opens),
        since(&removes),
    );
    let stats = rpc("stats", serde_json::json!({}));
    assert_eq!(stats["keep_alive_expiries"], 0, "{stats}");
    // Every controller is still there, its I/O queues too.
    for (i, ctrl) in ctrls.iter().enumerate() {
        let id = ctrl.identify(1, 0);
        id.unwrap_or_else(|e| panic!("controller {i}: {e}"));
    }
    for (i, q) in queues.iter_mut().enumerate() {
        let mut b = vec![0u8; 4096];
        q.read_at(1, 0, 8, &mut b)
            .unwrap_or_else(|e| panic!("I/O queue {} of controller {}: {e}", i % 2 + 1, i / 2));
    }
    assert_eq!(reader.keep_alive_failure(), None);

    // Closes go to threads of their own, and `serve` waits for them when it
    // exits: an image written to is unlocked and unwatched at a graceful
    // exit, not left for another gateway to break.
    let rbd = serde_json::json!({"pool": "rbd", "image": "ka0", "conf": slow});
    let a = rpc(
        "namespace_add",
        serde_json::json!({"nqn": NQN, "backend": "rbd", "rbd": rbd}),
    );
    let nsid = a["nsid"].as_u64().expect("nsid") as u32;
    let data = pattern(4096, 1);
    reader_q.write_at(nsid, 0, 8, &data).expect("write rbd");
    // (exclusive locks, watchers) of rbd/ka0
    let holders = || {
        let json = |args: &[&str]| -> serde_json::Value {
            serde_json::from_slice(&c.rbd(args).stdout).expect("rbd's JSON")
        };
        let locks = json(&["lock", "ls", "--format", "json", "rbd/ka0"]);
        let status = json(&["status", "--format", "json", "rbd/ka0"]);
        let n = |v: &serde_json::Value| v.as_array().map_or(usize::MAX, Vec::len);
        (n(&locks), n(&status["watchers"]))
    };
    assert_eq!(holders(), (1, 1), "the gateway's lock and watch");
    drop((reader_q, queues));
    for ctrl in ctrls {
        ctrl.shutdown().expect("shutdown");
    }
    reader.shutdown().expect("shutdown");
    let st = s.signal(libc::SIGTERM).expect("serve exits on SIGTERM");
    assert!(st.success(), "serve: {st}");
    assert_eq!(holders(), (0, 0), "rbd/ka0 after serve's exit");
}
