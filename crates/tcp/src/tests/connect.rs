//! Connect rules, keep-alive teardown, controller reset, discovery.

use super::*;

#[test]
fn connect_rules() {
    let t = target_with(vec![HOST.into()], TransportConfig::default());
    // A host that is not allowed.
    let mut h = Host::new(&t);
    h.icreq(false, false);
    assert_eq!(
        h.connect(0, CNTLID_DYNAMIC, "nqn.other").status,
        Status::CONNECT_INVALID_HOST.dnr()
    );
    // Admin connect must ask for a dynamic controller.
    let c = Host::new(&t)
        .tap(|h| {
            h.icreq(false, false);
        })
        .connect(0, 5, HOST);
    assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
    assert_eq!(c.dw0, 1 << 16 | 16, "IATTR=data, IPO=cntlid");
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let open = |qid: u16, cntlid: u16, sqsize: u16| {
        let mut h = Host::new(&t);
        h.icreq(false, false);
        let c = h.connect_sq(qid, cntlid, HOST, sqsize);
        (h, c)
    };
    let io = |qid, cntlid, sqsize| open(qid, cntlid, sqsize).1;
    assert_eq!(
        io(1, cntlid.wrapping_add(1), 31).dw0,
        1 << 16 | 16,
        "wrong CNTLID"
    );
    assert_eq!(
        io(1, cntlid, 0).status,
        Status::CONNECT_INVALID_PARAMETERS.dnr(),
        "SQSIZE 0"
    );
    assert_eq!(io(1, cntlid, 4096).dw0, 44, "SQSIZE too large");
    assert_eq!(io(17, cntlid, 31).dw0, 42, "QID beyond the granted count");
    let (_first, c) = open(1, cntlid, 31);
    assert_eq!(c.status, Status::SUCCESS);
    // Base 2.1 §6.3: a QID in use is Invalid Queue Identifier (as SPDK).
    assert_eq!(
        io(1, cntlid, 31).status,
        Status::INVALID_QUEUE_IDENTIFIER.dnr(),
        "QID already connected"
    );
    drop(_first);
    assert_eq!(
        io(1, cntlid, 31).status,
        Status::SUCCESS,
        "a closed queue's QID is free again"
    );
    // Commands before Connect.
    let mut h = Host::new(&t);
    h.icreq(false, false);
    assert_eq!(
        h.resp(admin_sqe(admin::IDENTIFY, 0, 4096), &[]).status,
        Status::COMMAND_SEQUENCE_ERROR.dnr()
    );
}

#[test]
fn cid_conflict_and_keep_alive_teardown() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    // A write waiting for its data (after the R2T) holds its CID; a second
    // command with that CID conflicts (Base §4.6.1.2.1).
    let mut q = io_queue(&t, cntlid);
    let mut w = rw(io::WRITE, 0, 8, 4096, false);
    w.cid = 77;
    let b = q.capsule(&w, &[]);
    q.feed(&b);
    assert!(matches!(q.recv_all()[..], [Rx::R2T(_)]));
    let mut r = rw(io::READ, 0, 8, 4096, false);
    r.cid = 77;
    let b = q.capsule(&r, &[]);
    q.feed(&b);
    let rx = q.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.status == Status::CID_CONFLICT.dnr() && c.cid == 77),
        "{rx:?}"
    );
    // KATO 5 s: a tick 7 s after the one that saw the Connect tears the
    // controller down (time comes only from ticks).
    let now = std::time::Instant::now();
    a.q.tick(now);
    a.q.tick(now + std::time::Duration::from_secs(7));
    assert!(a.q.wants_close());
    assert!(t.controller(cntlid).is_none());
    q.q.tick(std::time::Instant::now());
    assert!(q.q.wants_close(), "I/O queues follow their controller");
}

/// SPDK's initiator at detach: an AER is outstanding, the host has given it
/// up locally and reuses its CID for the Property Get of CC. The target
/// answers the Property Get (as the Linux and SPDK targets do) and the
/// retired AER never completes.
#[test]
fn parked_aer_cid_reused_by_property_get() {
    let t = target();
    let mut a = Host::new(&t);
    a.bring_up();
    // Namespace Attribute Notices on (Set Features 0Bh, bit 8).
    let mut aec = admin_sqe(admin::SET_FEATURES, 0, 0);
    aec.dptr = SglDescriptor::default();
    aec.cdw10 = farflash_wire::opcode::feature::ASYNC_EVENT_CONFIG as u32;
    aec.cdw11 = 1 << 8;
    assert_eq!(a.resp(aec, &[]).status, Status::SUCCESS);
    let mut aer = admin_sqe(admin::ASYNC_EVENT_REQUEST, 0, 0);
    aer.dptr = SglDescriptor::default();
    aer.cid = 500;
    let b = a.capsule(&aer, &[]);
    a.feed(&b);
    assert!(a.recv_all().is_empty(), "AER is parked");
    let get = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: 0,
    }
    .to_sqe(500, fctype::PROPERTY_GET);
    let b = a.capsule(&get, &[]);
    a.feed(&b);
    let rx = a.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.status == Status::SUCCESS
            && c.cid == 500 && c.dw0 == props::cc::ENABLE_DEFAULT),
        "{rx:?}"
    );
    // An event finds no AER to complete.
    t.namespaces_changed(&t.subsystems()[0], &[1]);
    a.q.tick(std::time::Instant::now());
    let rx = a.recv_all();
    assert!(rx.is_empty(), "a retired AER must not complete: {rx:?}");
    // A new AER with the same CID picks the event up.
    let b = a.capsule(&aer, &[]);
    a.feed(&b);
    let rx = a.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.status == Status::SUCCESS && c.cid == 500),
        "{rx:?}"
    );
}

#[test]
fn discovery_log_lists_allowed_subsystems() {
    let t = target_with(vec![HOST.into()], TransportConfig::default());
    let get = |host: &str| -> Vec<u8> {
        let mut h = Host::new(&t);
        h.icreq(false, false);
        let r = h.connect_admin(farflash_wire::DISCOVERY_NQN, host, 2, 0);
        assert_eq!(r.status, Status::SUCCESS);
        assert_eq!(h.prop_set_cc(props::cc::EN).status, Status::SUCCESS);
        let mut sqe = admin_sqe(admin::GET_LOG_PAGE, 0, 3072);
        farflash_wire::log::GetLogPage {
            lid: 0x70,
            lsp: 0,
            rae: false,
            len: 3072,
            offset: 0,
        }
        .fill_sqe(&mut sqe);
        data_of(&h.cmd(sqe, &[]))
    };
    let log = get(HOST);
    assert_eq!(farflash_wire::discovery::decode_header(&log), (1, 2));
    let e = farflash_wire::discovery::DiscEntry::decode(&log[1024..2048]);
    assert_eq!(
        (e.subnqn.as_str(), e.traddr.as_str(), e.trsvcid.as_str()),
        (NQN, "127.0.0.1", "4420")
    );
    let log = get("nqn.stranger");
    assert_eq!(
        farflash_wire::discovery::decode_header(&log).1,
        1,
        "only the discovery entry"
    );
}

#[test]
fn controller_reset_deletes_io_queues() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    // CC.EN 1 -> 0: a reset.
    assert_eq!(a.prop_set_cc(0).status, Status::SUCCESS);
    // The old queue runs nothing more and closes.
    assert!(q.cmd(rw(io::READ, 0, 1, 512, false), &[]).is_empty());
    assert!(q.q.wants_close());
    // Re-enabled, QID 1 can connect again; the old queue's drop leaves it alone.
    assert_eq!(
        a.prop_set_cc(props::cc::ENABLE_DEFAULT).status,
        Status::SUCCESS
    );
    let mut q2 = io_queue(&t, cntlid);
    drop(q);
    assert_eq!(
        q2.resp(rw(io::READ, 0, 1, 512, false), &[]).status,
        Status::SUCCESS
    );
    let mut h = Host::new(&t);
    h.icreq(false, false);
    assert_eq!(
        h.connect(1, cntlid, HOST).status,
        Status::INVALID_QUEUE_IDENTIFIER.dnr(),
        "QID 1 is still taken by the new queue"
    );
}
