//! A connection lost under load: the target keeps the queue (a zombie)
//! until its storage requests complete, the association survives the loss
//! of an I/O queue, and the host reconnects that queue once the old one
//! has gone.

use farflash_host::{cmd, DataDir};
use farflash_pair::{Pair, TICK};
use std::time::Duration;

#[test]
fn an_io_queue_cut_with_a_write_at_storage_lingers_until_it_completes_then_its_qid_is_free_again() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (admin, cntlid) = p.connect_admin(0).unwrap();
    let io = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    // Storage takes 500 ms from here on.
    p.set_storage_delay(|_, _| Duration::from_millis(500));
    let w = cmd::rw(true, 1, 0, 8);
    let cid = p.submit(io, w, DataDir::ToCtrl, &[0xEE; 4096], 0).unwrap();
    p.drive();
    assert_eq!(p.storage_pending(), 1);
    let cut_at = p.now();
    p.sever(io);
    assert!(p.host_sees_close(io));
    // The target's queue stays while its write is out, whatever ticks come.
    p.advance(Duration::from_millis(400));
    assert!(p.target_queue(io).is_some(), "dropped with a request out");
    assert_eq!(p.closed_at(io), None);
    // QID 1 is still taken meanwhile.
    let early = p.connect_io(cntlid, 1, 8, 64 << 10, 8192);
    assert!(
        early.is_err(),
        "a second queue on QID 1 while the first lingers"
    );
    // The write completes into the void; then the queue goes.
    assert!(p.advance_until(Duration::from_millis(200), |p| p.closed_at(io).is_some()));
    let gone = p.closed_at(io).unwrap() - cut_at;
    assert!(
        gone >= Duration::from_millis(500) && gone < Duration::from_millis(500) + TICK,
        "{gone:?}"
    );
    assert!(p.take(io, cid).is_none(), "the host never hears of it");
    // The association lives on (the admin queue holds it)...
    assert_eq!(p.closed_at(admin), None);
    assert!(p.target().controller(cntlid).is_some());
    // ...and QID 1 reconnects; the write did reach the medium.
    p.set_storage_delay(|_, _| Duration::ZERO);
    let io2 = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    let r = cmd::rw(false, 1, 0, 8);
    let done = p.run(io2, r, DataDir::FromCtrl, &[], 4096).unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
    assert!(p.buf(io2, done.cid)[..4096].iter().all(|&b| b == 0xEE));
}

#[test]
fn held_deliveries_delay_completions_but_lose_nothing() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (_, cntlid) = p.connect_admin(0).unwrap();
    let io = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    p.set_latency(io, Duration::from_millis(2));
    // The target's answers are held: writes reach the medium, no
    // completion reaches the host.
    p.hold(io, false, true);
    let mut cids = Vec::new();
    for k in 0..4u8 {
        let w = cmd::rw(true, 1, k as u64 * 8, 8);
        cids.push(p.submit(io, w, DataDir::ToCtrl, &[k + 1; 4096], 0).unwrap());
    }
    p.advance(Duration::from_millis(50));
    assert!(cids.iter().all(|&c| p.take(io, c).is_none()));
    assert_eq!(p.storage_pending(), 0, "the writes ran");
    // Released: what waited has long arrived, and is taken at once.
    p.hold(io, false, false);
    p.drive();
    for &c in &cids {
        assert!(p.take(io, c).unwrap().cqe.status.is_success());
    }
    for k in 0..4u8 {
        let r = cmd::rw(false, 1, k as u64 * 8, 8);
        let done = p.run(io, r, DataDir::FromCtrl, &[], 4096).unwrap();
        assert!(p.buf(io, done.cid)[..4096].iter().all(|&b| b == k + 1));
    }
}
