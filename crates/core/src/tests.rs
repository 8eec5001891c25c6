//! The command layer on its own: commands parsed, executed and completed
//! with no PDU and no transport, storage completions out of order or failed
//! (scripted backend).

use crate::command::{Begin, Xfer};
pub(crate) use crate::testing::{
    completions, connect, connect_hostid, connect_to, io_queue, queue, run, rw, target, HOST, NQN,
};
use crate::NvmeQueue;
use farflash_backend::OpKind;
use farflash_wire::fabrics::{ConnectCmd, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::{fctype, io};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Sqe, Status};

fn block(seed: u8) -> Vec<u8> {
    (0..512u32)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

#[test]
fn reads_complete_in_the_backends_order_with_their_own_data() {
    let (t, script) = target();
    let (_admin, mut q) = io_queue(&t);
    for lba in 0..3u16 {
        let w = run(
            &mut q,
            rw(io::WRITE, 10 + lba, lba as u64, 512),
            &block(lba as u8),
        );
        assert_eq!(w.status, Status::SUCCESS);
    }
    script.hold(true);
    script.reverse(true);
    for lba in 0..3u16 {
        match q.begin(rw(io::READ, 20 + lba, lba as u64, 512)) {
            Begin::Ready { slot, xfer } => {
                assert_eq!(xfer, Xfer::C2H(512));
                q.execute(slot);
            }
            other => panic!("{other:?}"),
        }
    }
    q.commit();
    assert_eq!(q.in_flight(), 3);
    assert!(completions(&mut q).is_empty());
    script.hold(false);
    assert!(q.poll_backends());
    let done = completions(&mut q);
    let cids: Vec<u16> = done.iter().map(|c| c.cid).collect();
    assert_eq!(cids, [22, 21, 20]);
    for c in &done {
        assert_eq!(c.status, Status::SUCCESS);
        let (buf, len) = c.data.as_ref().expect("read data");
        assert_eq!(
            &buf.as_slice()[..*len as usize],
            &block((c.cid - 20) as u8)[..]
        );
    }
}

/// Opcode 7Fh on a connected queue with FCTYPE 01h (Connect), with or
/// without its 1024 bytes of data: Invalid Command Opcode before any data
/// moves, as Linux nvmet and SPDK answer and SPDK's bdevio ("blockdev nvme
/// passthru vendor specific": opcode 7Fh, NSID 1, no data) expects; the
/// queue goes on (issue 43; was Data SGL Length Invalid without data).
#[test]
fn connect_on_a_connected_queue_is_an_invalid_opcode() {
    let (t, _) = target();
    let (mut admin, mut q) = io_queue(&t);
    let bdevio = Sqe {
        opcode: farflash_wire::opcode::admin::FABRICS,
        flags: PSDT_SGL,
        cid: 40,
        nsid: 1,
        dptr: SglDescriptor::transport(0),
        ..Sqe::default()
    };
    for queue in [&mut q, &mut admin] {
        assert_eq!(run(queue, bdevio, &[]).status, Status::INVALID_OPCODE.dnr());
        let again = ConnectCmd {
            recfmt: 0,
            qid: 1,
            sqsize: 31,
            cattr: 0,
            kato: 0,
        }
        .to_sqe(41);
        assert!(
            matches!(queue.begin(again), Begin::Answered),
            "refused before its data moves"
        );
        let c = crate::testing::completions(queue);
        assert_eq!(c[0].status, Status::INVALID_OPCODE.dnr());
    }
    assert_eq!(
        run(&mut q, rw(io::READ, 42, 0, 512), &[]).status,
        Status::SUCCESS
    );
}

#[test]
fn a_failed_flush_fails_its_command_and_the_queue_goes_on() {
    let (t, script) = target();
    let (_admin, mut q) = io_queue(&t);
    script.fail(OpKind::Flush, libc::EIO, 1);
    let flush = Sqe {
        opcode: io::FLUSH,
        flags: PSDT_SGL,
        cid: 5,
        nsid: 1,
        ..Sqe::default()
    };
    let c = run(&mut q, flush, &[]);
    assert_eq!(c.status, Status::UNRECOVERED_READ_ERROR);
    assert_eq!(
        run(&mut q, Sqe { cid: 6, ..flush }, &[]).status,
        Status::SUCCESS
    );
    assert_eq!(script.submitted(), [OpKind::Flush, OpKind::Flush]);
}

#[test]
fn a_full_pool_is_capacity_exceeded_and_the_next_write_goes_through() {
    let (t, script) = target();
    let (_admin, mut q) = io_queue(&t);
    // A thin pool out of clusters fails the write with ENOSPC.
    script.fail(OpKind::Write, libc::ENOSPC, 1);
    let c = run(&mut q, rw(io::WRITE, 9, 4, 512), &block(1));
    assert_eq!(c.status, Status::CAPACITY_EXCEEDED);
    let c = run(&mut q, rw(io::WRITE, 10, 4, 512), &block(1));
    assert_eq!(c.status, Status::SUCCESS);
}

#[test]
fn parse_once_refuses_before_any_data_moves() {
    let (t, script) = target();
    let (_admin, mut q) = io_queue(&t);
    // Past the last LBA: answered at arrival, nothing asked of the host.
    assert_eq!(q.begin(rw(io::WRITE, 1, 2047, 1024)), Begin::Answered);
    let c = completions(&mut q);
    assert_eq!(c[0].status, Status::LBA_OUT_OF_RANGE.dnr());
    // A CID already in flight: answered without a slot.
    let Begin::Ready { slot, .. } = q.begin(rw(io::READ, 7, 0, 512)) else {
        panic!("read refused");
    };
    assert_eq!(q.begin(rw(io::READ, 7, 1, 512)), Begin::Answered);
    let c = completions(&mut q);
    assert_eq!((c[0].cid, c[0].slot), (7, None));
    assert_eq!(c[0].status, Status::CID_CONFLICT.dnr());
    q.execute(slot);
    q.commit();
    q.poll_backends();
    assert_eq!(completions(&mut q)[0].slot, Some(slot));
    assert!(script.submitted().iter().all(|&k| k == OpKind::Read));
}

#[test]
fn more_commands_than_entries_is_an_overrun() {
    let (t, script) = target();
    let (_admin, mut q) = io_queue(&t);
    script.hold(true);
    for cid in 0..32 {
        let Begin::Ready { slot, .. } = q.begin(rw(io::READ, cid, 0, 512)) else {
            panic!("command {cid} refused");
        };
        q.execute(slot);
    }
    assert_eq!(q.begin(rw(io::READ, 99, 0, 512)), Begin::Overrun);
    q.commit();
    script.hold(false);
    while q.in_flight() > 0 {
        q.poll_backends();
    }
    assert_eq!(completions(&mut q).len(), 32);
}

#[test]
fn fused_halves_alone_are_refused_and_nothing_is_written() {
    // Base §3.4.2: the one fused operation is Compare then Write
    // (`nvm/fused.rs`). A Write as first half, a second half with no
    // first, FUSE 11b: refused, and nothing runs.
    let (t, script) = target();
    let (mut admin, mut q) = io_queue(&t);
    for (fuse, want) in [
        (0b01u8, Status::INVALID_FIELD.dnr()),
        (0b10, Status::FUSED_MISSING),
        (0b11, Status::INVALID_FIELD.dnr()),
    ] {
        let mut w = rw(io::WRITE, 40 + fuse as u16, 0, 512);
        w.flags |= fuse;
        assert_eq!(q.begin(w), Begin::Answered);
        let c = completions(&mut q);
        assert_eq!(c[0].status, want, "FUSE {fuse:02b}");
    }
    assert!(script.submitted().is_empty());
    // Admin commands are never fused.
    let mut id = identify_ctrl(7);
    id.flags |= 0b01;
    assert_eq!(run(&mut admin, id, &[]).status, Status::INVALID_FIELD.dnr());
    // FUSE 00b runs as before.
    let w = run(&mut q, rw(io::WRITE, 50, 0, 512), &block(1));
    assert_eq!(w.status, Status::SUCCESS);
}

#[test]
fn active_namespace_list_from_the_last_nsids_is_an_invalid_namespace() {
    use farflash_wire::opcode::{admin, cns};
    let (t, _) = target();
    let (mut a, _q) = io_queue(&t);
    let identify = |cid: u16, cns_v: u8, nsid: u32| Sqe {
        opcode: admin::IDENTIFY,
        flags: PSDT_SGL,
        cid,
        nsid,
        dptr: SglDescriptor::transport(4096),
        cdw10: cns_v as u32,
        ..Sqe::default()
    };
    // Base §5.17, Linux nvmet: Invalid Namespace or Format (was Invalid Field).
    for (cid, nsid) in [(10, 0xFFFF_FFFE), (11, u32::MAX)] {
        let c = run(&mut a, identify(cid, cns::ACTIVE_NS_LIST, nsid), &[]);
        assert_eq!(c.status, Status::INVALID_NAMESPACE.dnr(), "{nsid:#x}");
    }
    let c = run(&mut a, identify(12, cns::ACTIVE_NS_LIST, 0), &[]);
    assert_eq!(c.status, Status::SUCCESS);
    let (buf, len) = c.data.as_ref().expect("the list");
    assert_eq!(*len, 4096);
    assert_eq!(&buf.as_slice()[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn host_identifier_feature_reads_the_connect_hostid() {
    use farflash_wire::opcode::{admin, feature};
    let (t, _) = target();
    let (mut a, _q) = io_queue(&t);
    let get = |cid: u16, cdw11: u32| Sqe {
        opcode: admin::GET_FEATURES,
        flags: PSDT_SGL,
        cid,
        dptr: SglDescriptor::transport(16),
        cdw10: feature::HOST_IDENTIFIER as u32,
        cdw11,
        ..Sqe::default()
    };
    // Base §5.27: EXHID set: the 128-bit HOSTID of the Connect ([1; 16] here).
    let c = run(&mut a, get(20, 1), &[]);
    assert_eq!(c.status, Status::SUCCESS);
    let (buf, len) = c.data.as_ref().expect("the Host Identifier");
    assert_eq!((&buf.as_slice()[..16], *len), (&[1u8; 16][..], 16));
    // EXHID clear: Fabrics has no 64-bit host identifier.
    assert_eq!(
        run(&mut a, get(21, 0), &[]).status,
        Status::INVALID_FIELD.dnr()
    );
    // Set Features of it: Command Sequence Error (it comes with Connect).
    let set = Sqe {
        opcode: admin::SET_FEATURES,
        flags: PSDT_SGL,
        cid: 22,
        cdw10: feature::HOST_IDENTIFIER as u32,
        cdw11: 1,
        ..Sqe::default()
    };
    assert_eq!(
        run(&mut a, set, &[]).status,
        Status::COMMAND_SEQUENCE_ERROR.dnr()
    );
}

pub(crate) fn identify_ctrl(cid: u16) -> Sqe {
    Sqe {
        opcode: farflash_wire::opcode::admin::IDENTIFY,
        flags: PSDT_SGL,
        cid,
        dptr: SglDescriptor::transport(4096),
        cdw10: 1,
        ..Sqe::default()
    }
}

fn set_cc(cid: u16, cc: u32) -> Sqe {
    PropertyCmd {
        size8: false,
        offset: props::CC,
        value: cc as u64,
    }
    .to_sqe(cid, fctype::PROPERTY_SET)
}

fn csts(q: &mut NvmeQueue) -> u32 {
    let get = PropertyCmd {
        size8: false,
        offset: props::CSTS,
        value: 0,
    }
    .to_sqe(7, fctype::PROPERTY_GET);
    run(q, get, &[]).result as u32
}

/// Base §3.5.1: commands other than Fabrics ones run only while CC.EN = 1,
/// CSTS.RDY = 1 and no shutdown was asked; the rest get Command Sequence
/// Error, as Linux nvmet and SPDK answer (the differential harness found
/// farflash running them).
#[test]
fn commands_wait_for_an_enabled_ready_controller() {
    let (t, _) = target();
    let mut admin = queue(&t);
    let c = connect(&mut admin, 0, CNTLID_DYNAMIC);
    assert_eq!(c.status, Status::SUCCESS);
    let seq = Status::COMMAND_SEQUENCE_ERROR.dnr();
    assert_eq!(
        run(&mut admin, identify_ctrl(2), &[]).status,
        seq,
        "before CC.EN"
    );
    // A refused enable (CC.AMS weighted round robin, which CAP.AMS does not
    // report) sets CSTS.CFS and leaves the controller not ready.
    let wrr = props::cc::ENABLE_DEFAULT | (1 << 11);
    assert_eq!(run(&mut admin, set_cc(3, wrr), &[]).status, Status::SUCCESS);
    assert_ne!(csts(&mut admin) & props::csts::CFS, 0, "CC.AMS 001b");
    assert_eq!(
        run(&mut admin, identify_ctrl(4), &[]).status,
        seq,
        "after CFS"
    );
    assert_eq!(run(&mut admin, set_cc(5, 0), &[]).status, Status::SUCCESS);
    let en = props::cc::ENABLE_DEFAULT;
    assert_eq!(run(&mut admin, set_cc(6, en), &[]).status, Status::SUCCESS);
    assert_eq!(csts(&mut admin) & props::csts::RDY, props::csts::RDY);
    assert_eq!(
        run(&mut admin, identify_ctrl(8), &[]).status,
        Status::SUCCESS
    );
    // An I/O queue runs commands while the controller is ready...
    let mut io = queue(&t);
    assert_eq!(connect(&mut io, 1, c.result as u16).status, Status::SUCCESS);
    let flush = Sqe {
        opcode: io::FLUSH,
        flags: PSDT_SGL,
        cid: 9,
        nsid: 1,
        ..Sqe::default()
    };
    assert_eq!(run(&mut io, flush, &[]).status, Status::SUCCESS);
    // ...and no more after a normal shutdown (CC.SHN 01b), until a reset.
    let shn = en | props::cc::SHN_NORMAL;
    assert_eq!(
        run(&mut admin, set_cc(10, shn), &[]).status,
        Status::SUCCESS
    );
    assert_eq!(run(&mut io, Sqe { cid: 11, ..flush }, &[]).status, seq);
    assert_eq!(run(&mut admin, identify_ctrl(12), &[]).status, seq);
}

/// Base §4.2: PSDT 11b is reserved: Invalid Field, as Linux nvmet (was:
/// taken as an SGL).
#[test]
fn psdt_11b_is_invalid_field() {
    let (_t, mut admin, mut q) = {
        let (t, _) = target();
        let (a, q) = io_queue(&t);
        (t, a, q)
    };
    let mut read = rw(io::READ, 3, 0, 512);
    read.flags = 0xC0;
    assert_eq!(run(&mut q, read, &[]).status, Status::INVALID_FIELD.dnr());
    let mut id = identify_ctrl(4);
    id.flags = 0xC0;
    assert_eq!(run(&mut admin, id, &[]).status, Status::INVALID_FIELD.dnr());
}

/// Base §6.4: Disconnect on the Admin Queue is Invalid Queue Type (was: the
/// association ended).
#[test]
fn disconnect_on_the_admin_queue_is_invalid_queue_type() {
    let (t, _) = target();
    let (mut admin, _q) = io_queue(&t);
    let sqe = Sqe {
        opcode: farflash_wire::opcode::admin::FABRICS,
        cid: 5,
        nsid: fctype::DISCONNECT as u32,
        ..Sqe::default()
    };
    assert_eq!(
        run(&mut admin, sqe, &[]).status,
        Status::INVALID_QUEUE_TYPE.dnr()
    );
    assert!(!admin.wants_close());
    assert_eq!(
        run(&mut admin, identify_ctrl(6), &[]).status,
        Status::SUCCESS
    );
}

/// Base §5.16.1.6: the Commands Supported and Effects log (LPA bit 1) lists
/// what an I/O controller runs; writes change logical block content.
#[test]
fn commands_supported_and_effects_log() {
    use farflash_wire::log::{CSUPP, LBCC};
    use farflash_wire::opcode::{admin, log_id};
    let (t, _) = target();
    let (mut a, _q) = io_queue(&t);
    let c = run(&mut a, identify_ctrl(3), &[]);
    let id = farflash_wire::identify::IdCtrl::decode(c.data.as_ref().unwrap().0.as_slice());
    assert_ne!(id.lpa & farflash_wire::identify::LPA_CMD_EFFECTS, 0);
    let log = |a: &mut NvmeQueue, csi: u32| {
        let sqe = Sqe {
            opcode: admin::GET_LOG_PAGE,
            flags: PSDT_SGL,
            cid: 4,
            nsid: u32::MAX,
            dptr: SglDescriptor::transport(4096),
            cdw10: log_id::COMMANDS_SUPPORTED as u32 | (4096 / 4 - 1) << 16,
            cdw14: csi << 24,
            ..Sqe::default()
        };
        run(a, sqe, &[])
    };
    let c = log(&mut a, 0);
    assert_eq!(c.status, Status::SUCCESS);
    let page = c.data.unwrap().0.as_slice()[..4096].to_vec();
    let entry = |base: usize, op: u8| farflash_wire::le::u32_at(&page, base + op as usize * 4);
    assert_eq!(entry(0, admin::IDENTIFY), CSUPP);
    assert_eq!(entry(0, admin::FABRICS), 0);
    assert_eq!(entry(1024, io::READ), CSUPP);
    assert_eq!(entry(1024, io::WRITE), CSUPP | LBCC);
    assert_eq!(entry(1024, io::COMPARE), CSUPP);
    assert_eq!(entry(1024, io::COPY), CSUPP | LBCC);
    assert_eq!(entry(1024, io::WRITE_UNCORRECTABLE), 0, "not run here");
    assert_eq!(
        log(&mut a, 2).status,
        Status::INVALID_LOG_PAGE.dnr(),
        "CSI 02h"
    );
}

/// A transport's state of a command lives in the command's slot: set after
/// `begin`, handed back with the completion, and fresh for the next command
/// to take the slot, even before the old completion was sent.
#[test]
fn a_transports_command_state_travels_with_its_command() {
    let (t, _script) = target();
    let a = "127.0.0.1:4420".parse().unwrap();
    let p = "127.0.0.1:50001".parse().unwrap();
    let mut q: NvmeQueue<u32> =
        NvmeQueue::new(t.clone(), a, p, farflash_wire::discovery::TRTYPE_TCP);
    let connect = |cid| {
        ConnectCmd {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato: 5000,
        }
        .to_sqe(cid)
    };
    // A Connect naming no subsystem: it runs, and is refused.
    let Begin::Ready { slot, .. } = q.begin(connect(1)) else {
        panic!("a Connect is parsed")
    };
    *q.cmd_mut(slot).expect("its slot") = 7;
    q.data_buf(slot).fill(0);
    q.execute(slot);
    // The slot is free again: the next command takes it with fresh state.
    let Begin::Ready { slot: again, .. } = q.begin(connect(2)) else {
        panic!("the second command")
    };
    assert_eq!(again, slot, "the freed slot is taken first");
    assert_eq!(q.cmd(again), Some(&0), "a new command's state starts fresh");
    *q.cmd_mut(again).expect("its slot") = 9;
    q.fail(again, Status::INTERNAL_ERROR);
    let mut done = Vec::new();
    q.take_completions(&mut done);
    let got: Vec<(u16, u32)> = done.iter().map(|c| (c.cid, c.cmd)).collect();
    assert_eq!(got, [(1, 7), (2, 9)]);
    assert_eq!(q.cmd(u16::MAX), None, "no such slot");
}

/// Without the control plane: the namespace list changes as a reload
/// changes it (`Subsystem::replace_namespaces`).
#[test]
fn an_idle_queue_lets_a_removed_namespace_go_at_a_tick_without_reloading_its_list() {
    use crate::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig};
    use crate::subsystem::build_namespace;
    use crate::testing::Memory;
    use std::time::{Duration, Instant};
    let null_ns = || NamespaceConfig::sized(BackendKind::Null, 1 << 20);
    let cfg = Config {
        subsystems: vec![SubsystemConfig::new(
            NQN,
            (0..100).map(|_| null_ns()).collect(),
        )],
        ..Config::default()
    };
    let subs = crate::testing::build_subsystems(&cfg).unwrap();
    let sub = subs[0].clone();
    let t = crate::Target::new(
        subs,
        cfg.transport.clone(),
        vec!["127.0.0.1:4420".parse().unwrap()],
    );
    let mut admin = queue(&t);
    let c = connect_to(&mut admin, NQN, HOST, 0, CNTLID_DYNAMIC);
    assert_eq!(c.status, Status::SUCCESS);
    let without = |nsid: u32| {
        let list = sub
            .namespaces()
            .iter()
            .filter(|n| n.nsid != nsid)
            .cloned()
            .collect();
        sub.replace_namespaces(list);
    };
    let gone = std::sync::Arc::downgrade(&sub.namespace(7).unwrap());
    let loaded = admin.ns.generation();
    let t0 = Instant::now();
    admin.tick(t0);
    // An addition moves the generation; ticks leave the table alone (the
    // next command loads the list).
    let mut list = sub.namespaces().to_vec();
    list.push(std::sync::Arc::new(
        build_namespace(NQN, &null_ns(), 101, &Memory).unwrap(),
    ));
    sub.replace_namespaces(list);
    admin.tick(t0 + Duration::from_millis(1100));
    assert_eq!(admin.ns.generation(), loaded);
    assert!(admin.ns.key(101).is_none());
    // A removal: the next tick lets the namespace go, without reloading
    // the list; another removal waits for a second after that look.
    without(7);
    admin.tick(t0 + Duration::from_millis(1200));
    assert!(admin.ns.key(7).is_none());
    assert!(admin.ns.key(8).is_some());
    without(8);
    admin.tick(t0 + Duration::from_millis(1300));
    assert!(admin.ns.key(8).is_some(), "at most one look a second");
    admin.tick(t0 + Duration::from_millis(2200));
    assert!(admin.ns.key(8).is_none());
    assert!(admin.ns.key(9).is_some());
    assert_eq!(admin.ns.generation(), loaded);
    assert!(gone.upgrade().is_none(), "namespace 7 is still held");
    // The next command loads the whole list: the added namespace appears.
    admin.refresh_namespaces();
    assert!(admin.ns.key(101).is_some());
    assert!(admin.ns.key(7).is_none() && admin.ns.key(8).is_none());
}
