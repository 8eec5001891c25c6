//! Reconnecting after a controller reset (CC.EN 1 → 0 → 1, Base §3.7.2)
//! and after the target ended the association (`controller_disconnect`),
//! with the CNTLID rules a host relies on.

use farflash_host::{cmd, DataDir, HostError, TransportError};
use farflash_pair::{ConnId, Pair, TICK};
use farflash_wire::{props, Status};
use std::time::Duration;

fn write_pattern(p: &mut Pair, io: ConnId, lba: u64, byte: u8) {
    let done = p
        .run(
            io,
            cmd::rw(true, 1, lba, 8),
            DataDir::ToCtrl,
            &[byte; 4096],
            0,
        )
        .unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
}

fn read_back(p: &mut Pair, io: ConnId, lba: u64) -> Vec<u8> {
    let done = p
        .run(io, cmd::rw(false, 1, lba, 8), DataDir::FromCtrl, &[], 4096)
        .unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
    p.buf(io, done.cid)[..4096].to_vec()
}

fn property(p: &mut Pair, admin: ConnId, sqe: farflash_wire::Sqe) -> u64 {
    let done = p.run(admin, sqe, DataDir::None, &[], 0).unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
    done.cqe.dw0 as u64 | (done.cqe.dw1 as u64) << 32
}

#[test]
fn a_controller_reset_closes_the_io_queues_and_the_host_reconnects_them_with_the_same_cntlid() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (admin, cntlid) = p.connect_admin(0).unwrap();
    let io = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    write_pattern(&mut p, io, 16, 0xA5);
    // CC.EN 1 → 0: the reset.
    let off = props::cc::ENABLE_DEFAULT & !props::cc::EN;
    property(&mut p, admin, cmd::property_set(props::CC, off));
    let reset_at = p.now();
    let csts = property(&mut p, admin, cmd::property_get(props::CSTS, false));
    assert_eq!(csts as u32 & props::csts::RDY, 0);
    // The I/O queue is deleted: the target closes it at the worker's scan.
    assert!(p.advance_until(TICK * 3, |p| p.host_sees_close(io)));
    assert!(p.closed_at(io).unwrap() - reset_at <= TICK * 2);
    assert_eq!(p.closed_at(admin), None, "the admin queue stays");
    // An I/O Connect before CC.EN is 1 again is refused.
    let early = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap_err();
    assert!(!early.status.is_success());
    // CC.EN 0 → 1, CSTS.RDY, and the I/O queue comes back on the same CNTLID.
    property(
        &mut p,
        admin,
        cmd::property_set(props::CC, props::cc::ENABLE_DEFAULT),
    );
    let csts = property(&mut p, admin, cmd::property_get(props::CSTS, false));
    assert_eq!(csts as u32 & props::csts::RDY, props::csts::RDY);
    let io2 = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    assert_eq!(read_back(&mut p, io2, 16), vec![0xA5; 4096]);
    write_pattern(&mut p, io2, 24, 0x5A);
    assert_eq!(read_back(&mut p, io2, 24), vec![0x5A; 4096]);
    assert_eq!(p.target().live_controllers(), 1);
}

#[test]
fn after_controller_disconnect_the_host_reconnects_under_a_new_cntlid_and_the_old_one_is_refused() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (admin, old) = p.connect_admin(0).unwrap();
    let io = p.connect_io(old, 1, 8, 64 << 10, 8192).unwrap();
    write_pattern(&mut p, io, 0, 0x3C);
    let at = p.now();
    assert!(p.target().disconnect_controller(old));
    // Both queues close at the next scan; the host's ends see it.
    assert!(p.advance_until(TICK * 3, |p| p.host_sees_close(admin)
        && p.host_sees_close(io)));
    assert!(p.closed_at(admin).unwrap() - at <= TICK * 2);
    assert!(p.closed_at(io).unwrap() - at <= TICK * 2);
    let r = p.run(admin, cmd::keep_alive(), DataDir::None, &[], 0);
    assert!(
        matches!(r, Err(HostError::Transport(TransportError::Closed))),
        "{r:?}"
    );
    // The host reconnects: a new association, a new CNTLID.
    let (admin2, new) = p.connect_admin(0).unwrap();
    assert_ne!(new, old, "a CNTLID is not handed out again at once");
    // An I/O queue naming the removed controller is refused
    // (Connect Invalid Parameters, Fabrics §6.3), the new one works.
    let refused = p.connect_io(old, 1, 8, 64 << 10, 8192).unwrap_err();
    assert_eq!(refused.status.code(), Status::CONNECT_INVALID_PARAMETERS);
    let io2 = p.connect_io(new, 1, 8, 64 << 10, 8192).unwrap();
    assert_eq!(read_back(&mut p, io2, 0), vec![0x3C; 4096]);
    assert_eq!(p.target().live_controllers(), 1);
    assert_eq!(p.closed_at(admin2), None);
    // A second queue of the new controller on the same QID is refused
    // while the first lives.
    let dup = p.connect_io(new, 1, 8, 64 << 10, 8192).unwrap_err();
    assert!(!dup.status.is_success());
    p.advance(Duration::from_secs(3));
    assert_eq!(p.closed_at(io2), None, "KATO 0: no expiry");
}

#[test]
fn the_host_closing_its_admin_queue_ends_the_association_and_its_io_queues() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (admin, cntlid) = p.connect_admin(0).unwrap();
    let io = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    let at = p.now();
    p.host_close(admin);
    assert!(p.advance_until(TICK * 3, |p| p.host_sees_close(io)));
    assert!(p.closed_at(io).unwrap() - at <= TICK * 2);
    assert!(p.target().controller(cntlid).is_none());
}
