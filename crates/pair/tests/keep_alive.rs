//! Keep Alive (Base §3.9) across host and target on the simulated clock:
//! without Keep Alives the controller is removed between KATO + 1 s and
//! KATO + 2 s after the tick that saw the Connect, and the host sees its
//! queues close; with Keep Alives every KATO/2 it stays.

use farflash_host::DataDir;
use farflash_pair::{Pair, TICK};
use std::time::Duration;

const KATO_MS: u32 = 3000;

#[test]
fn without_keep_alives_the_controller_is_removed_after_kato_and_the_host_sees_its_queues_close() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let start = p.now();
    let (admin, cntlid) = p.connect_admin(KATO_MS).unwrap();
    let io = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    // The Connect's keep-alive mark is taken at the admin queue's first
    // tick, TICK after the queue opened (the pair starts it at once).
    let marked = start + TICK;
    let kato = Duration::from_millis(KATO_MS as u64);
    // Silence: nothing is sent. Just before KATO + 1 s nothing has closed.
    assert!(!p.advance_until(kato + Duration::from_millis(900), |p| p
        .closed_at(admin)
        .is_some()));
    assert!(p.target().controller(cntlid).is_some());
    assert!(p.advance_until(Duration::from_secs(5), |p| p.closed_at(admin).is_some()));
    let gone = p.closed_at(admin).unwrap() - marked;
    assert!(
        gone > kato + Duration::from_secs(1) && gone <= kato + Duration::from_secs(2),
        "expired {gone:?} after the mark"
    );
    assert!(p.target().controller(cntlid).is_none());
    assert_eq!(
        p.target()
            .keep_alive_expiries
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // The I/O queue closes at the worker's next scan (the removal moved
    // the change counter), within a TICK or two of the admin queue.
    assert!(p.advance_until(TICK * 2, |p| p.host_sees_close(io)));
    let io_gone = p.closed_at(io).unwrap() - p.closed_at(admin).unwrap();
    assert!(io_gone <= TICK * 2, "{io_gone:?}");
    assert!(p.host_sees_close(admin));
    // A command on the dead queue goes nowhere: it never completes.
    let r = p.run(io, farflash_host::cmd::flush(1), DataDir::None, &[], 0);
    assert!(r.is_err(), "{r:?}");
}

#[test]
fn keep_alives_every_half_kato_keep_the_association() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (admin, cntlid) = p.connect_admin(KATO_MS).unwrap();
    let io = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    p.keep_alive_every(admin, Some(Duration::from_millis(KATO_MS as u64 / 2)));
    p.advance(Duration::from_millis(KATO_MS as u64 * 5));
    assert_eq!(p.closed_at(admin), None);
    assert_eq!(p.closed_at(io), None);
    // Every KATO/2 over 5 × KATO: 10 Keep Alives, all answered.
    assert_eq!(p.keep_alives_ok(admin), 10);
    assert!(p.target().controller(cntlid).is_some());
    let done = p
        .run(io, farflash_host::cmd::flush(1), DataDir::None, &[], 0)
        .unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
    // The host stops: the association ends a KATO (and the grace) later.
    p.keep_alive_every(admin, None);
    assert!(
        p.advance_until(Duration::from_millis(KATO_MS as u64) * 2, |p| p
            .host_sees_close(io))
    );
}
