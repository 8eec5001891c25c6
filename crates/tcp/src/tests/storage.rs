//! Storage completions that come late, out of order or failed, through the
//! scripted backend: no io_uring, no clock in the queue pair.

use super::*;
use farflash_backend::{open_scripted, OpKind, Script};
use farflash_core::subsystem::Namespace;

/// The test target with namespace 1 on a 1 MiB scripted backend.
fn scripted_target() -> (Arc<Target>, Arc<Script>) {
    let t = target();
    let sub = t.subsystem(NQN).unwrap().clone();
    let old = sub.namespace(1).unwrap();
    let (backend, script) = open_scripted(1 << 20, 512);
    let ns = Namespace::with_backend(&old, backend, "scripted");
    sub.replace_namespaces(vec![Arc::new(ns)]);
    (t, script)
}

/// Hands `bytes` to the queue and its storage requests to the backend,
/// without waiting for any completion.
fn send(h: &mut Host, bytes: &[u8]) {
    super::push(&mut h.q, bytes);
    h.q.commit();
}

fn block(seed: u8) -> Vec<u8> {
    (0..512u32)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect()
}

#[test]
fn reads_completed_out_of_order_each_carry_their_own_data() {
    let (t, script) = scripted_target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    for lba in 0..3u64 {
        let w = q.resp(rw(io::WRITE, lba, 1, 512, true), &block(lba as u8));
        assert_eq!(w.status, Status::SUCCESS);
    }
    script.hold(true);
    script.reverse(true);
    let mut bytes = Vec::new();
    let mut cids = Vec::new();
    for lba in 0..3u64 {
        let mut sqe = rw(io::READ, lba, 1, 512, false);
        sqe.cid = q.next_cid();
        cids.push(sqe.cid);
        bytes.extend(q.capsule(&sqe, &[]));
    }
    send(&mut q, &bytes);
    assert_eq!(q.q.in_flight(), 3);
    assert_eq!(q.q.output_len(), 0, "nothing answered before the backend");
    script.hold(false);
    assert!(q.q.poll_backends());
    let rx = q.recv_all();
    let mut order = Vec::new();
    for r in &rx {
        match r {
            Rx::Data(h, d, _) => {
                let lba = cids.iter().position(|&c| c == h.cccid).unwrap();
                assert_eq!(d, &block(lba as u8), "data of CID {}", h.cccid);
            }
            Rx::Resp(c) => {
                assert_eq!(c.status, Status::SUCCESS);
                order.push(c.cid);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    cids.reverse();
    assert_eq!(order, cids, "completed in the backend's (reversed) order");
    assert_eq!(q.q.in_flight(), 0);
}

#[test]
fn failed_storage_requests_become_nvme_statuses() {
    let (t, script) = scripted_target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    let good = block(9);
    assert_eq!(
        q.resp(rw(io::WRITE, 4, 1, 512, true), &good).status,
        Status::SUCCESS
    );
    script.fail(OpKind::Read, libc::EIO, 1);
    let r = q.resp(rw(io::READ, 4, 1, 512, false), &[]);
    assert_eq!(r.status, Status::UNRECOVERED_READ_ERROR);
    script.fail(OpKind::Write, libc::EIO, 1);
    let w = q.resp(rw(io::WRITE, 4, 1, 512, true), &block(1));
    assert_eq!(w.status, Status::WRITE_FAULT);
    script.fail(OpKind::Write, libc::ENOSPC, 1);
    let w = q.resp(rw(io::WRITE, 4, 1, 512, true), &block(2));
    assert_eq!(w.status, Status::CAPACITY_EXCEEDED);
    // The queue goes on; the failed writes moved no data.
    let rx = q.cmd(rw(io::READ, 4, 1, 512, false), &[]);
    assert_eq!(data_of(&rx), good);
    assert_eq!(q.q.in_flight(), 0);
}

#[test]
fn controller_shutdown_waits_for_its_flush_without_blocking() {
    let (t, script) = scripted_target();
    let mut a = Host::new(&t);
    a.bring_up();
    script.hold(true);
    let mut set = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: (props::cc::ENABLE_DEFAULT | props::cc::SHN_NORMAL) as u64,
    }
    .to_sqe(0, fctype::PROPERTY_SET);
    set.cid = a.next_cid();
    let b = a.capsule(&set, &[]);
    send(&mut a, &b);
    assert_eq!(script.submitted(), [OpKind::Flush]);
    assert_eq!(a.q.output_len(), 0, "Property Set waits for the flush");
    let shst = |a: &mut Host| {
        let mut get = PropertyCmd {
            size8: false,
            offset: props::CSTS,
            value: 0,
        }
        .to_sqe(0, fctype::PROPERTY_GET);
        get.cid = a.next_cid();
        let b = a.capsule(&get, &[]);
        send(a, &b);
        match a.recv_all().pop() {
            Some(Rx::Resp(c)) => (c.dw0 & props::csts::SHST_MASK) >> 2,
            other => panic!("no CSTS: {other:?}"),
        }
    };
    assert_eq!(shst(&mut a), 0b01, "shutdown processing occurring");
    script.hold(false);
    assert!(a.q.poll_backends());
    match a.recv_all().pop() {
        Some(Rx::Resp(c)) => {
            assert_eq!(c.cid, set.cid);
            assert_eq!(c.status, Status::SUCCESS);
        }
        other => panic!("no Property Set response: {other:?}"),
    }
    assert_eq!(shst(&mut a), 0b10, "shutdown processing complete");
}
