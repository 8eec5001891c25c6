//! A read-only host (`SubsystemConfig::read_only_hosts`): its controllers
//! see every namespace write protected (Identify Namespace NSATTR bit 0)
//! and every command that would modify one is refused with Namespace is
//! Write Protected before any data moves or storage is touched (`io.rs`
//! `classify`); reads, Compare, Verify and Flush run. Another host of the
//! same subsystem writes as before.

use crate::command::Begin;
use crate::subsystem::HostAccess;
use crate::testing::{completions, connect_to, queue, run, rw, target, NQN};
use crate::{NvmeQueue, Target};
use farflash_backend::{OpKind, Script};
use farflash_wire::fabrics::{PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::identify::{IdNs, NSATTR_WRITE_PROTECTED};
use farflash_wire::opcode::{admin, cns, fctype, io};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Sqe, Status};
use std::sync::Arc;

const READER: &str = "nqn.2014-08.org.nvmexpress:uuid:reader";
const WRITER: &str = "nqn.2014-08.org.nvmexpress:uuid:writer";
const WP: Status = Status::NS_WRITE_PROTECTED;

/// The test target with READER (read-only) and WRITER allowed.
fn target_ro() -> (Arc<Target>, Arc<Script>) {
    let (t, script) = target();
    let sub = t.subsystem(NQN).expect("the test subsystem");
    sub.set_access(HostAccess {
        allowed_hosts: vec![READER.into(), WRITER.into()],
        read_only_hosts: vec![READER.into()],
        ..HostAccess::default()
    });
    (t, script)
}

/// An enabled controller of `host` and one connected I/O queue.
fn io_queue_as(t: &Arc<Target>, host: &str) -> (NvmeQueue, NvmeQueue) {
    let mut admin = queue(t);
    let c = connect_to(&mut admin, NQN, host, 0, CNTLID_DYNAMIC);
    assert_eq!(c.status, Status::SUCCESS);
    let en = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: props::cc::ENABLE_DEFAULT as u64,
    }
    .to_sqe(2, fctype::PROPERTY_SET);
    assert_eq!(run(&mut admin, en, &[]).status, Status::SUCCESS);
    let mut q = queue(t);
    let io = connect_to(&mut q, NQN, host, 1, c.result as u16);
    assert_eq!(io.status, Status::SUCCESS);
    (admin, q)
}

fn identify_ns(a: &mut NvmeQueue) -> IdNs {
    let sqe = Sqe {
        opcode: admin::IDENTIFY,
        flags: PSDT_SGL,
        cid: 40,
        nsid: 1,
        dptr: SglDescriptor::transport(4096),
        cdw10: cns::NAMESPACE as u32,
        ..Sqe::default()
    };
    let c = run(a, sqe, &[]);
    assert_eq!(c.status, Status::SUCCESS);
    let (buf, n) = c.data.expect("Identify data");
    IdNs::decode(&buf.as_slice()[..n as usize])
}

fn write_zeroes(cid: u16) -> Sqe {
    Sqe {
        cdw12: 7,
        dptr: SglDescriptor::transport(0),
        ..rw(io::WRITE_ZEROES, cid, 0, 512)
    }
}

/// Dataset Management of one range; `deallocate`: attribute AD.
fn dsm(cid: u16, deallocate: bool) -> (Sqe, Vec<u8>) {
    let mut d = vec![0u8; 16];
    d[4..8].copy_from_slice(&8u32.to_le_bytes());
    let sqe = Sqe {
        cdw10: 0,
        cdw11: if deallocate { 1 << 2 } else { 1 },
        cdw12: 0,
        dptr: SglDescriptor::transport(16),
        ..rw(io::DATASET_MANAGEMENT, cid, 0, 512)
    };
    (sqe, d)
}

/// A Copy of blocks 0-1 to block 100.
fn copy(cid: u16) -> (Sqe, Vec<u8>) {
    let mut d = vec![0u8; 32];
    d[16..18].copy_from_slice(&1u16.to_le_bytes());
    let sqe = Sqe {
        cdw10: 100,
        cdw11: 0,
        cdw12: 0,
        dptr: SglDescriptor::transport(32),
        ..rw(io::COPY, cid, 0, 512)
    };
    (sqe, d)
}

fn storage_writes(script: &Script) -> usize {
    (script.submitted().iter())
        .filter(|k| !matches!(k, OpKind::Read | OpKind::Flush))
        .count()
}

#[test]
fn a_read_only_host_sees_its_namespaces_write_protected() {
    let (t, _) = target_ro();
    let (mut ra, _rq) = io_queue_as(&t, READER);
    let (mut wa, _wq) = io_queue_as(&t, WRITER);
    // NVM Command Set §4.1.5.1 NSATTR bit 0, per controller.
    assert_eq!(identify_ns(&mut ra).nsattr, NSATTR_WRITE_PROTECTED);
    assert_eq!(identify_ns(&mut wa).nsattr, 0);
    let ro: Vec<(u16, bool)> = t
        .controllers()
        .iter()
        .map(|c| (c.cntlid, c.read_only))
        .collect();
    assert_eq!(ro.iter().filter(|(_, r)| *r).count(), 1, "{ro:?}");
}

#[test]
fn every_command_that_would_modify_the_namespace_is_refused() {
    let (t, script) = target_ro();
    let (_a, mut q) = io_queue_as(&t, READER);
    let data = vec![0x5A; 512];
    let before = storage_writes(&script);
    // Refused at classify: no data is asked for (the answer comes at once).
    let c = run(&mut q, rw(io::WRITE, 1, 0, 512), &[]);
    assert_eq!(c.status, WP.dnr());
    let mut fua = rw(io::WRITE, 2, 8, 512);
    fua.cdw12 |= 1 << 30;
    assert_eq!(run(&mut q, fua, &[]).status, WP.dnr());
    assert_eq!(run(&mut q, write_zeroes(3), &[]).status, WP.dnr());
    let (s, _) = dsm(4, true);
    assert_eq!(q.begin(s), Begin::Answered, "no data moves");
    q.commit();
    let c = completions(&mut q);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WP.dnr());
    let (s, _) = copy(5);
    assert_eq!(run(&mut q, s, &[]).status, WP.dnr());
    assert_eq!(storage_writes(&script), before, "nothing reached storage");

    // Reads, Compare, Verify, Flush and DSM without Deallocate run.
    let c = run(&mut q, rw(io::READ, 10, 0, 512), &[]);
    assert_eq!(c.status, Status::SUCCESS);
    let (buf, n) = c.data.expect("read data");
    let zeros = buf.as_slice()[..n as usize].to_vec();
    assert_eq!(
        run(&mut q, rw(io::COMPARE, 11, 0, 512), &zeros).status,
        Status::SUCCESS
    );
    assert_eq!(
        run(&mut q, rw(io::COMPARE, 12, 0, 512), &data).status,
        Status::COMPARE_FAILURE
    );
    assert_eq!(
        run(&mut q, rw(io::VERIFY, 13, 0, 512), &[]).status,
        Status::SUCCESS
    );
    let flush = Sqe {
        dptr: SglDescriptor::transport(0),
        cdw12: 0,
        ..rw(io::FLUSH, 14, 0, 512)
    };
    assert_eq!(run(&mut q, flush, &[]).status, Status::SUCCESS);
    let (s, d) = dsm(15, false);
    assert_eq!(run(&mut q, s, &d).status, Status::SUCCESS);
    assert_eq!(storage_writes(&script), before);
}

#[test]
fn the_write_half_of_a_fused_compare_and_write_is_refused_and_fails_the_pair() {
    let (t, script) = target_ro();
    let (_a, mut q) = io_queue_as(&t, READER);
    let before = storage_writes(&script);
    let mut first = rw(io::COMPARE, 1, 0, 512);
    first.flags |= 0x01;
    let mut second = rw(io::WRITE, 2, 0, 512);
    second.flags |= 0x02;
    match q.begin(first) {
        Begin::Ready { slot, .. } => {
            q.data_buf(slot).copy_from_slice(&[0u8; 512]);
            q.execute(slot);
        }
        other => panic!("the Compare half: {other:?}"),
    }
    assert_eq!(q.begin(second), Begin::Answered);
    q.commit();
    while q.in_flight() > 0 {
        q.poll_backends();
        q.commit();
    }
    let mut c: Vec<(u16, Status)> = completions(&mut q)
        .into_iter()
        .map(|c| (c.cid, c.status))
        .collect();
    c.sort_by_key(|&(cid, _)| cid);
    // Base §3.4.2: the Compare is aborted because its Write failed.
    assert_eq!(c, [(1, Status::FUSED_FAILED), (2, WP.dnr())]);
    assert_eq!(storage_writes(&script), before);
}

#[test]
fn another_host_of_the_subsystem_writes() {
    let (t, script) = target_ro();
    let (_ra, mut rq) = io_queue_as(&t, READER);
    let (_wa, mut wq) = io_queue_as(&t, WRITER);
    let data = vec![0xA5; 512];
    assert_eq!(run(&mut wq, write_zeroes(1), &[]).status, Status::SUCCESS);
    assert_eq!(
        run(&mut wq, rw(io::WRITE, 2, 0, 512), &data).status,
        Status::SUCCESS
    );
    let (s, d) = copy(3);
    assert_eq!(run(&mut wq, s, &d).status, Status::SUCCESS);
    assert!(storage_writes(&script) >= 3);
    // The reader sees what the writer wrote.
    let c = run(&mut rq, rw(io::READ, 4, 100, 512), &[]);
    let (buf, n) = c.data.expect("read data");
    assert_eq!(&buf.as_slice()[..n as usize], &data[..]);
    assert_eq!(run(&mut rq, rw(io::WRITE, 5, 0, 512), &[]).status, WP.dnr());
}
