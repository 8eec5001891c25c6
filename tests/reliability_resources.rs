//! Resource limits: what a peer can make the target hold, and for how long.
//!
//! - a peer that asks for reads and never reads the answers: the target
//!   stops reading a connection once 4 MiB of output wait for it, so its
//!   memory stays bounded however many commands the peer pushes, and the
//!   other connections keep being served;
//! - slowloris peers (silent, or one byte a second) are dropped when ICReq
//!   and Connect are not done within 10 s, without slowing anyone else;
//! - a controller whose host stops sending Keep Alive is torn down after
//!   KATO (+1 s grace): its queues are closed, its CNTLID is gone, a new
//!   controller can be created, and no descriptor is left behind.
//!
//! (The connection cap, `[transport] max_connections`, is tested in
//! tests/target_hostile.rs.)

mod common;

use common::raw::{Peer, HOSTID, HOSTNQN};
use common::{
    eventually, fd_count, resting_counts, rss_kib, thread_count, IoStats, Serve, VerifiedIo, NQN,
};
use farflash_host::{cmd, ConnectOptions, Controller, HostError, IoQueueOptions};
use farflash_wire::sqe::SglDescriptor;
use farflash_wire::{Sqe, Status};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const MAX_OP: Duration = Duration::from_secs(2);

fn good_host(addr: &str) -> VerifiedIo {
    let mut o = ConnectOptions::new(addr, NQN);
    o.command_timeout = Duration::from_secs(10);
    // 1 MiB of LBAs: the RAM namespace commits it in the first few hundred ops.
    VerifiedIo::start(o, 0, 2048)
}

fn check_good(stats: Result<IoStats, String>, min_ops: u64) -> IoStats {
    let s = stats.expect("the well-behaved host saw an error");
    assert!(s.ops >= min_ops, "the well-behaved host stalled: {s:?}");
    assert!(
        s.max_op < MAX_OP,
        "a well-behaved command took {:?}",
        s.max_op
    );
    s
}

fn set_rcvbuf(s: &TcpStream, bytes: i32) {
    // SAFETY: setsockopt on a socket we own, with a valid pointer and length.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUF");
}

#[test]
fn a_peer_that_never_reads_cannot_grow_the_target_or_block_others() {
    const DEPTH: u16 = 128;
    const READ: u32 = 128 * 1024;
    let serve = Serve::start(&["--ram", "64M", "--block-size", "512"]);
    let pid = serve.pid();
    let (fds0, _) = resting_counts(&serve);
    let good = good_host(&serve.addr);
    std::thread::sleep(Duration::from_millis(500));
    let rss0 = rss_kib(pid);

    // A controller and a 128-entry I/O queue that asks for 128 KiB reads of
    // CIDs 0..127 over and over and never reads a byte of the answers.
    let (admin, cntlid) = Peer::admin(&serve.addr, 0, 1);
    let mut q = Peer::io(&serve.addr, cntlid, 1, DEPTH - 1, false, false);
    set_rcvbuf(&q.s, 64 * 1024);
    let mut burst = Vec::new();
    for cid in 0..DEPTH {
        let sqe = Sqe {
            cid,
            flags: farflash_wire::sqe::PSDT_SGL,
            dptr: SglDescriptor::transport(READ),
            ..cmd::rw(false, 1, 0, READ / 512)
        };
        burst.extend_from_slice(&q.capsule(&sqe, &[]));
    }
    q.s.set_write_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    let (mut sent, mut peak) = (0usize, rss0);
    let mut blocked_since: Option<Instant> = None;
    while t0.elapsed() < Duration::from_secs(8) {
        let mut off = 0;
        while off < burst.len() {
            match q.s.write(&burst[off..]) {
                Ok(n) => {
                    off += n;
                    sent += n;
                    blocked_since = None;
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    blocked_since.get_or_insert_with(Instant::now);
                    break;
                }
                Err(e) => panic!("the target dropped the flooding peer: {e}"),
            }
        }
        peak = peak.max(rss_kib(pid));
        if blocked_since.is_some_and(|t| t.elapsed() > Duration::from_millis(1500)) {
            break;
        }
    }
    let blocked = blocked_since.is_some();
    let commands = sent / burst.len() * DEPTH as usize;
    let requested_gib = commands as f64 * READ as f64 / (1u64 << 30) as f64;
    // Worst case held by the target: every slot's read buffer, plus the
    // 4 MiB output high-water mark, plus receive buffers and allocator slack.
    let bound_kib = (DEPTH as u64 * READ as u64 + (4 << 20)) / 1024 + 16 * 1024;
    eprintln!(
        "flood: {commands} read commands ({requested_gib:.1} GiB requested) in {:?}, \
         writes blocked: {blocked}; target VmRSS {rss0} KiB -> peak {peak} KiB \
         (+{} KiB, bound +{bound_kib} KiB)",
        t0.elapsed(),
        peak - rss0
    );
    assert!(
        blocked,
        "the target kept reading a peer that never drains its output"
    );
    // However small the socket buffers, the peer asked for many times what
    // the target may hold.
    let requested_kib = commands as u64 * READ as u64 / 1024;
    assert!(
        requested_kib > 8 * bound_kib,
        "the flood was too small to show anything: {requested_gib:.2} GiB"
    );
    assert!(
        peak - rss0 < bound_kib,
        "target memory grew by {} KiB (bound {bound_kib} KiB)",
        peak - rss0
    );
    // Another host keeps being served while the flood sits there.
    let t = Instant::now();
    let mut o = ConnectOptions::new(serve.addr.clone(), NQN);
    o.command_timeout = Duration::from_secs(5);
    let ctrl = Controller::connect(&o).expect("a new host during the flood");
    let mut q2 = ctrl
        .io_queue(1, IoQueueOptions::default())
        .expect("its I/O queue");
    let mut back = vec![0u8; 4096];
    q2.read_at(1, 0, 8, &mut back).expect("its read");
    assert!(t.elapsed() < MAX_OP, "a new host took {:?}", t.elapsed());
    drop(q2);
    ctrl.shutdown().expect("its shutdown");
    let stats = check_good(good.finish(), 100);
    eprintln!("well-behaved host during the flood: {stats:?}");
    // Closing the flood releases everything it held.
    drop(q);
    drop(admin);
    assert!(
        eventually(Duration::from_secs(5), || fd_count(pid) == fds0),
        "fds {fds0} -> {}",
        fd_count(pid)
    );
}

/// Sends `bytes` one per second; returns when the target closes the
/// connection (Ok: seconds after connecting) or after `limit`.
fn trickle(addr: &str, prefix: &[u8], bytes: &[u8], limit: Duration) -> Result<Duration, String> {
    let mut p = Peer::connect(addr);
    let t0 = Instant::now();
    if !prefix.is_empty() {
        p.send(prefix);
    }
    p.s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut i = 0;
    let mut buf = [0u8; 256];
    let mut got = Vec::new();
    while t0.elapsed() < limit {
        if !bytes.is_empty() {
            let _ = p.s.write_all(&bytes[i % bytes.len()..][..1]);
            i += 1;
        }
        match p.s.read(&mut buf) {
            Ok(0) => return Ok(t0.elapsed()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(t0.elapsed()),
            Err(e) => return Err(format!("read: {e}")),
        }
        // Only the ICResp of a completed ICReq may come back.
        if !(got.is_empty() || (prefix.len() == 128 && got.len() <= 128)) {
            return Err(format!("unexpected {} bytes from the target", got.len()));
        }
    }
    Err(format!("still open after {limit:?}"))
}

#[test]
fn slowloris_peers_are_dropped_after_10s_and_block_nobody() {
    let serve = Serve::start(&["--ram", "16M", "--block-size", "512"]);
    let pid = serve.pid();
    let (fds0, _) = resting_counts(&serve);
    let good = good_host(&serve.addr);
    let limit = Duration::from_secs(14);
    let icreq = Peer::icreq_bytes(farflash_wire::pdu::IcReq::default());
    let connect = {
        let p = Peer::connect(&serve.addr);
        let d = Peer::connect_data(0xFFFF, NQN, HOSTNQN, HOSTID);
        let mut sqe = Peer::connect_sqe(0, 31, 0);
        sqe.cid = 1;
        sqe.flags = farflash_wire::sqe::PSDT_SGL;
        sqe.dptr = SglDescriptor::in_capsule(d.len() as u32);
        p.capsule(&sqe, &d)
    };
    let peers: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        ("silent", vec![], vec![]),
        ("ICReq at 1 byte/s", vec![], icreq.clone()),
        ("Connect at 1 byte/s after ICReq", icreq, connect),
    ];
    let handles: Vec<_> = peers
        .into_iter()
        .map(|(name, prefix, bytes)| {
            let addr = serve.addr.clone();
            std::thread::spawn(move || (name, trickle(&addr, &prefix, &bytes, limit)))
        })
        .collect();
    for h in handles {
        let (name, r) = h.join().expect("slowloris thread");
        let t = r.unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("slowloris {name}: closed by the target after {t:?}");
        assert!(
            t >= Duration::from_millis(9500) && t < Duration::from_secs(13),
            "{name}: closed after {t:?}, want ~10 s"
        );
    }
    // The good host's connection is older than 10 s and was not touched.
    let stats = check_good(good.finish(), 1000);
    eprintln!("well-behaved host beside the slowloris peers: {stats:?}");
    assert!(
        eventually(Duration::from_secs(5), || fd_count(pid) == fds0),
        "fds {fds0} -> {}",
        fd_count(pid)
    );
}

#[test]
fn keep_alive_expiry_tears_the_controller_down() {
    const KATO_MS: u32 = 1000;
    let serve = Serve::start(&["--ram", "16M", "--block-size", "512"]);
    let pid = serve.pid();
    let (fds0, threads0) = resting_counts(&serve);
    let mut o = ConnectOptions::new(serve.addr.clone(), NQN);
    o.kato_ms = KATO_MS;
    o.command_timeout = Duration::from_secs(5);

    // A host-library controller that never sends Keep Alive ...
    let silent = Controller::connect(&o).expect("connect");
    let mut sq = silent
        .io_queue(1, IoQueueOptions::default())
        .expect("I/O queue");
    sq.write_at(1, 0, 8, &[7u8; 4096]).expect("write");
    // ... one that does, with the same KATO (it must survive) ...
    let mut alive = Controller::connect(&o).expect("connect");
    alive.start_keep_alive().expect("keep-alive");
    let mut aq = alive
        .io_queue(1, IoQueueOptions::default())
        .expect("I/O queue");
    // ... and a raw one, to time the teardown and look at its CNTLID.
    let (mut ra, cntlid) = Peer::admin(&serve.addr, KATO_MS, 1);
    let mut rq = Peer::io(&serve.addr, cntlid, 1, 31, false, false);
    let t0 = Instant::now();

    // The target closes the raw admin queue KATO + 1 s grace after the last
    // command, then the I/O queue at its next tick.
    let admin_closed = ra
        .expect_closed(Duration::from_secs(6))
        .expect("the admin queue of the silent controller");
    let io_closed = rq
        .expect_closed(Duration::from_secs(2))
        .map(|_| t0.elapsed())
        .expect("its I/O queue");
    eprintln!(
        "KATO {KATO_MS} ms: admin queue closed after {admin_closed:?}, I/O queue after {io_closed:?}"
    );
    let kato = Duration::from_millis(KATO_MS as u64);
    assert!(
        admin_closed >= kato && admin_closed < kato + Duration::from_millis(2500),
        "admin queue closed after {admin_closed:?}"
    );
    assert!(io_closed < kato + Duration::from_secs(3), "{io_closed:?}");
    // Its CNTLID is gone: an I/O queue cannot join it any more.
    let mut late = Peer::ic(&serve.addr, false, false);
    let c = late.io_connect(cntlid, 1, 31);
    assert_eq!(
        (c.status, c.dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 1 << 16 | 16),
        "I/O Connect to the expired controller {cntlid}"
    );
    drop(late);

    // The host library sees its queues closed (a transport error, not a timeout).
    let t = Instant::now();
    let mut back = vec![0u8; 4096];
    let e = sq
        .read_at(1, 0, 8, &mut back)
        .expect_err("I/O on an expired controller");
    assert!(
        matches!(e, HostError::Transport(_) | HostError::Io(_)),
        "want a transport error, got {e}"
    );
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(silent.keep_alive().is_err(), "Keep Alive after expiry");
    drop(sq);
    drop(silent);

    // The controller that kept sending Keep Alive is untouched.
    aq.read_at(1, 0, 8, &mut back)
        .expect("I/O on the kept-alive controller");
    assert_eq!(back, vec![7u8; 4096]);
    assert_eq!(alive.keep_alive_failure(), None);
    drop(aq);
    alive.shutdown().expect("shutdown");

    // A new controller can be created and used, and nothing is left behind.
    let fresh = Controller::connect(&o).expect("a new controller");
    let mut fq = fresh
        .io_queue(1, IoQueueOptions::default())
        .expect("its I/O queue");
    fq.read_at(1, 0, 8, &mut back).expect("its read");
    drop(fq);
    fresh.shutdown().expect("shutdown");
    assert!(
        eventually(Duration::from_secs(5), || fd_count(pid) == fds0
            && thread_count(pid) == threads0),
        "fds {fds0} -> {}, threads {threads0} -> {}",
        fd_count(pid),
        thread_count(pid)
    );
}
