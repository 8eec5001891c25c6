//! A flood of DH-HMAC-CHAP negotiations with the costliest group
//! (ffdhe8192: two ~20 ms exponentiations per transaction) from peers that
//! merely claim a keyed host NQN: the exponentiations run on the target's
//! offload thread at the lowest priority, so another host's I/O on the same
//! (single) I/O thread keeps its pace. Before they moved off the event loop
//! the same flood held that thread for ~20 ms per message and the other
//! host's commands waited behind it.
//!
//! A check with a generous bound, not a benchmark: the exact figures come
//! from `benches/auth-flood.sh` (docs/benchmarks.md).

mod common;

use common::raw::{Peer, HOSTNQN};
use common::{Serve, VerifiedIo, NQN};
use farflash_auth::Secret;
use farflash_host::ConnectOptions;
use farflash_wire::auth::{AuthCmd, Challenge, Message, Negotiate, AUTHID_DHCHAP};
use farflash_wire::sqe::SglDescriptor;
use farflash_wire::Status;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// DH group identifier of ffdhe8192 (Base §8.13.5.1).
const FFDHE8192: u8 = 5;
const FLOODERS: usize = 3;
const WINDOW: Duration = Duration::from_secs(2);

/// One flooding peer: Negotiate (the controller computes its key pair for
/// the challenge) and fetch the challenge, again and again, spending no
/// CPU of its own; counts the transactions in `done`.
fn flood(addr: &str, stop: &AtomicBool, done: &AtomicU64) {
    let mut p = Peer::ic(addr, false, false);
    let c = p.admin_connect(30_000);
    assert!(c.status.is_success(), "{:?}", c.status);
    let mut t_id = 0u16;
    while !stop.load(Ordering::Acquire) {
        t_id = t_id.wrapping_add(1);
        let neg = Message::Negotiate(Negotiate {
            t_id,
            sc_c: 0,
            napd: 1,
            authid: AUTHID_DHCHAP,
            hash_ids: vec![1],
            dh_ids: vec![FFDHE8192],
        })
        .encode();
        let (c, _) = p.call(AuthCmd::dhchap(neg.len() as u32).to_sqe(0, true), &neg);
        assert_eq!(c.status, Status::SUCCESS);
        let mut sqe = AuthCmd::dhchap(4096).to_sqe(0, false);
        sqe.dptr = SglDescriptor::transport(4096);
        let (c, d) = p.call(sqe, &[]);
        assert_eq!(c.status, Status::SUCCESS);
        match Message::decode(&d) {
            Ok(Message::Challenge(Challenge { dhgid, dhv, .. })) => {
                assert_eq!(dhgid, FFDHE8192);
                assert_eq!(dhv.len(), 1024, "an ffdhe8192 public value");
            }
            other => panic!("expected a challenge, got {other:?}"),
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
}

fn io_for(addr: &str, window: Duration) -> common::IoStats {
    let io = VerifiedIo::start(ConnectOptions::new(addr.to_string(), NQN), 0, 4096);
    std::thread::sleep(window);
    io.finish()
        .expect("the host without a key kept doing verified I/O")
}

#[test]
fn ffdhe8192_negotiation_flood_leaves_other_io_at_its_pace() {
    let secret = Secret::new(&[0x42; 32], None).unwrap();
    let dhhc = secret.to_dhhc().to_string();
    let serve = Serve::start(&[
        "--ram",
        "32M",
        "--threads",
        "1",
        "--dhchap-key",
        &format!("{HOSTNQN}={dhhc}"),
        "--dhchap-dhgroup",
        "ffdhe8192",
    ]);
    let addr = serve.addr.clone();

    let alone = io_for(&addr, WINDOW);

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|_| {
            let (a, s, d) = (addr.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || flood(&a, &s, &d))
        })
        .collect();
    // The flood is under way before the measured window starts.
    let t0 = Instant::now();
    while done.load(Ordering::Relaxed) < FLOODERS as u64 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = done.load(Ordering::Relaxed);
    let flooded = io_for(&addr, WINDOW);
    let during = done.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Release);
    for f in flooders {
        f.join().expect("a flooding peer failed");
    }

    let ratio = flooded.ops as f64 / alone.ops.max(1) as f64;
    println!(
        "other host alone: {} ops (slowest {:?}); beside {FLOODERS} peers negotiating \
         ffdhe8192 ({during} transactions in the window): {} ops (slowest {:?}), ratio {ratio:.2}",
        alone.ops, alone.max_op, flooded.ops, flooded.max_op
    );
    assert!(
        during >= FLOODERS as u64,
        "the flood did not run during the window ({during} transactions)"
    );
    // On the event loop each negotiation held the only I/O thread for
    // ~20 ms: the other host got a fraction of its pace.
    assert!(
        ratio >= 0.5,
        "the other host slowed to {ratio:.2} of its pace during the flood"
    );
    assert!(
        flooded.max_op < Duration::from_secs(1),
        "the other host's I/O stalled for {:?}",
        flooded.max_op
    );
}
