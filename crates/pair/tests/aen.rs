//! Asynchronous events across host and target: a namespace added or
//! resized completes the host's parked Asynchronous Event Request with
//! Namespace Attribute Changed, and the Changed Namespace List (log 04h)
//! names it.

use farflash_control::manage;
use farflash_core::config::{BackendKind, NamespaceConfig};
use farflash_core::target::AEN_NS_ATTR_CHANGED;
use farflash_host::{cmd, DataDir};
use farflash_pair::{config, ram_namespace, target, ConnId, Pair, NQN, TICK};
use farflash_wire::opcode::admin;
use farflash_wire::Sqe;
use std::time::Duration;

/// Asynchronous Event Configuration (Base §5.27.1.7): Namespace Attribute Notices.
const FID_AEC: u8 = 0x0B;
const AEC_NS_ATTR: u32 = 1 << 8;
const LID_CHANGED_NS: u8 = 0x04;

fn aer() -> Sqe {
    Sqe {
        opcode: admin::ASYNC_EVENT_REQUEST,
        ..Sqe::default()
    }
}

/// The NSIDs the Changed Namespace List holds (read, which clears it).
fn changed_list(p: &mut Pair, a: ConnId) -> Vec<u32> {
    let glp = cmd::get_log_page(LID_CHANGED_NS, u32::MAX, 4096, 0);
    let done = p.run(a, glp, DataDir::FromCtrl, &[], 4096).unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
    p.buf(a, done.cid)[..4096]
        .chunks(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

/// Namespace Size (NSZE, Identify Namespace bytes 7:0) of `nsid`.
fn nsze(p: &mut Pair, a: ConnId, nsid: u32) -> u64 {
    let done = p
        .run(a, cmd::identify(0, nsid), DataDir::FromCtrl, &[], 4096)
        .unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
    let b = &p.buf(a, done.cid)[..8];
    u64::from_le_bytes(b.try_into().unwrap())
}

/// Parks an AER and checks nothing completes it while nothing changes.
fn park_aer(p: &mut Pair, a: ConnId) -> u16 {
    let cid = p.submit(a, aer(), DataDir::None, &[], 0).unwrap();
    p.advance(Duration::from_secs(2));
    assert!(p.take(a, cid).is_none(), "an AER completed with no event");
    cid
}

/// Waits (simulated, at most 3 TICKs) for the AER `cid`; returns its DW0.
fn aer_completes(p: &mut Pair, a: ConnId, cid: u16) -> u32 {
    assert!(
        p.advance_until(TICK * 3, |p| p.host(a).outstanding() == 0),
        "the AER did not complete"
    );
    let c = p.take(a, cid).expect("the AER's completion");
    assert!(c.cqe.status.is_success(), "{:?}", c.cqe);
    c.cqe.dw0
}

#[test]
fn a_namespace_added_then_one_resized_complete_the_aer_and_the_changed_list_names_them() {
    let null = NamespaceConfig {
        nsid: Some(2),
        block_size: Some(512),
        ..NamespaceConfig::sized(BackendKind::Null, 1 << 20)
    };
    let cfg = config(vec![ram_namespace(1, 1 << 20), null]);
    let mut p = Pair::new(target(&cfg).unwrap());
    let (a, cntlid) = p.connect_admin(0).unwrap();
    let io = p.connect_io(cntlid, 1, 8, 64 << 10, 8192).unwrap();
    let aec = cmd::set_features(FID_AEC, AEC_NS_ATTR);
    assert!(p
        .run(a, aec, DataDir::None, &[], 0)
        .unwrap()
        .cqe
        .status
        .is_success());
    // One command is outstanding on the admin queue from here: the AER.
    let cid = park_aer(&mut p, a);
    assert_eq!(p.host(a).outstanding(), 1);

    // A namespace added: the event reaches the idle admin queue at the
    // worker's next scan.
    let at = p.now();
    manage::add_namespace(p.target(), NQN, ram_namespace(3, 2 << 20)).unwrap();
    assert_eq!(aer_completes(&mut p, a, cid), AEN_NS_ATTR_CHANGED);
    assert!(p.now() - at <= TICK * 2, "{:?}", p.now() - at);
    assert_eq!(changed_list(&mut p, a), [3]);
    assert_eq!(
        changed_list(&mut p, a),
        Vec::<u32>::new(),
        "reading cleared it"
    );
    assert_eq!(nsze(&mut p, a, 3), 4096);
    // The I/O queue uses the new namespace at once.
    let w = cmd::rw(true, 3, 4095, 1);
    let done = p.run(io, w, DataDir::ToCtrl, &[0x77; 512], 0).unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);

    // A namespace resized (null, 1 MiB → 4 MiB): another event.
    let cid = park_aer(&mut p, a);
    manage::resize_namespace(p.target(), NQN, 2, 4 << 20).unwrap();
    assert_eq!(aer_completes(&mut p, a, cid), AEN_NS_ATTR_CHANGED);
    assert_eq!(changed_list(&mut p, a), [2]);
    assert_eq!(nsze(&mut p, a, 2), 8192);
    let r = cmd::rw(false, 2, 8191, 1);
    let done = p.run(io, r, DataDir::FromCtrl, &[], 512).unwrap();
    assert!(done.cqe.status.is_success(), "{:?}", done.cqe);
}

#[test]
fn without_namespace_attribute_notices_enabled_the_aer_stays_parked_but_the_list_fills() {
    let mut p = Pair::with_ram_namespace().unwrap();
    let (a, _) = p.connect_admin(0).unwrap();
    let cid = park_aer(&mut p, a);
    manage::add_namespace(p.target(), NQN, ram_namespace(2, 1 << 20)).unwrap();
    p.advance(Duration::from_secs(3));
    assert!(p.take(a, cid).is_none());
    assert_eq!(changed_list(&mut p, a), [2]);
}
