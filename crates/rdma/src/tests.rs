//! Drives `RdmaQueue`s the way the Linux kernel's nvme-rdma host does
//! (Connect data and reads by keyed SGL, writes in the capsule or by keyed
//! SGL with invalidate), with a simulated host memory that checks keys;
//! and the hostile inputs.

use crate::cm::Geometry;
use crate::queue::{Fault, RdmaQueue, Work};
use crate::sgl::{KeyedSgl, IN_CAPSULE};
use farflash_control::build_subsystems;
use farflash_core::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig};
use farflash_core::Target;
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::{admin, cns, fctype, io};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Cqe, Sqe, Status};
use std::sync::Arc;

mod auth;

const NQN: &str = "nqn.2026-11.io.farflash:rdma-test";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:rdma-host";
const KEY: u32 = 0x1234;
const SQ_ENTRIES: usize = 256;

pub(crate) fn target() -> Arc<Target> {
    let ns = NamespaceConfig {
        block_size: Some(512),
        ..NamespaceConfig::sized(BackendKind::Ram, 8 << 20)
    };
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: Default::default(),
        subsystems: vec![SubsystemConfig::new(NQN, vec![ns])],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).unwrap();
    Target::new(
        subs,
        cfg.transport.clone(),
        vec!["127.0.0.1:4420".parse().unwrap()],
    )
}

/// What came back for one command.
#[derive(Debug)]
struct Reply {
    cqe: Cqe,
    invalidated: Option<u32>,
}

/// A host with 1 MiB of registered memory under key `KEY`.
struct Host {
    q: RdmaQueue,
    mem: Vec<u8>,
    cid: u16,
    replies: Vec<Reply>,
    recv_outstanding: usize,
    /// Offloads taken from the queue (run here, as the worker's helper
    /// thread would), and the bytes of the last RDMA WRITE.
    offloads: usize,
    written: usize,
    /// RDMA READ destinations and WRITE sources within one of the queue's
    /// pool chunks (the verbs layer moves them without a copy), and not.
    in_chunk: usize,
    outside: usize,
}

impl Host {
    fn new(t: &Arc<Target>, qid: u16, entries: u32, icd: u32) -> Host {
        let geo = Geometry {
            qid,
            recv_entries: entries,
            recv_bytes: 64 + icd,
            send_entries: entries,
        };
        let a = "127.0.0.1:4420".parse().unwrap();
        let p = "127.0.0.1:50000".parse().unwrap();
        Host {
            q: RdmaQueue::new(t.clone(), a, p, geo, SQ_ENTRIES),
            mem: vec![0; 1 << 20],
            cid: 0,
            replies: Vec::new(),
            recv_outstanding: entries as usize,
            offloads: 0,
            written: 0,
            in_chunk: 0,
            outside: 0,
        }
    }

    /// One capsule as a SEND; runs every piece of work the queue emits.
    fn send(&mut self, sqe: &Sqe, dptr: Option<[u8; 16]>, icd: &[u8]) {
        let mut msg = vec![0u8; 64];
        let mut raw = [0u8; 64];
        sqe.encode(&mut raw);
        msg.copy_from_slice(&raw);
        if let Some(d) = dptr {
            msg[24..40].copy_from_slice(&d);
        }
        msg.extend_from_slice(icd);
        assert!(self.recv_outstanding > 0, "no receive buffer posted");
        self.recv_outstanding -= 1;
        self.q.on_recv(7, &msg);
        self.run();
    }

    fn run(&mut self) {
        loop {
            // The worker's path: offloads leave the queue, run elsewhere
            // and come back (commit() would run them in place).
            let mut jobs = Vec::new();
            self.q.take_offloads(|o| jobs.push(o));
            self.offloads += jobs.len();
            for j in jobs {
                self.q.on_offload_completion(j.run());
            }
            self.q.commit();
            while self.q.in_flight() > 0 {
                self.q.poll_backends();
            }
            let mut reposts = Vec::new();
            self.q.take_reposts(&mut reposts);
            assert!(reposts.iter().all(|&b| b == 7));
            self.recv_outstanding += reposts.len();
            let Some(w) = self.q.pop_work() else { break };
            let n = w.entries();
            match w {
                Work::Read { slot, remote } => {
                    assert_eq!(remote.key, KEY, "READ with a key the host never gave");
                    let at = self.q.data_mut(slot).map(|d| d.as_ptr() as usize);
                    self.count_chunk(at.unwrap(), remote.len as usize);
                    let src = &self.mem[remote.addr as usize..][..remote.len as usize];
                    let dst = self.q.data_mut(slot).unwrap();
                    assert_eq!(dst.len(), src.len());
                    dst.copy_from_slice(src);
                    self.q.on_send_done(n);
                    self.q.on_read_done(slot);
                }
                Work::Respond {
                    cqe,
                    invalidate,
                    data,
                } => {
                    if let Some((buf, len, r)) = data {
                        assert_eq!(r.key, KEY);
                        assert_eq!(r.len, len);
                        self.count_chunk(buf.as_ptr() as usize, len as usize);
                        self.mem[r.addr as usize..][..len as usize]
                            .copy_from_slice(&buf.as_slice()[..len as usize]);
                        self.q.release(buf);
                        self.written = len as usize;
                    }
                    self.q.on_send_done(n);
                    self.replies.push(Reply {
                        cqe: Cqe::decode(&cqe),
                        invalidated: invalidate,
                    });
                }
            }
        }
    }

    fn count_chunk(&mut self, addr: usize, len: usize) {
        match self.q.chunk_of(addr, len) {
            Some(_) => self.in_chunk += 1,
            None => self.outside += 1,
        }
    }

    fn next(&mut self, mut sqe: Sqe) -> Sqe {
        self.cid = self.cid.wrapping_add(1);
        sqe.cid = self.cid;
        sqe.flags = PSDT_SGL;
        sqe
    }

    fn reply(&mut self) -> Reply {
        assert_eq!(self.replies.len(), 1, "{:?}", self.replies);
        self.replies.pop().unwrap()
    }

    /// A command whose data is host memory at `addr` (keyed SGL).
    fn keyed(&mut self, sqe: Sqe, addr: u64, len: u32, invalidate: bool) -> Reply {
        let sqe = self.next(sqe);
        let d = KeyedSgl {
            addr,
            length: len,
            key: KEY,
            invalidate,
        }
        .encode();
        self.send(&sqe, Some(d), &[]);
        self.reply()
    }

    fn connect(&mut self, qid: u16, sqsize: u16, cntlid: u16) -> Cqe {
        let d = ConnectData {
            hostid: [1; 16],
            cntlid,
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
        };
        d.encode(&mut self.mem[..1024]);
        let c = ConnectCmd {
            recfmt: 0,
            qid,
            sqsize,
            cattr: 0,
            kato: 5000,
        };
        // Linux's nvme-rdma sends the Connect data by keyed SGL.
        self.keyed(c.to_sqe(0), 0, 1024, false).cqe
    }

    fn bring_up(&mut self) -> u16 {
        let c = self.connect(0, 31, CNTLID_DYNAMIC);
        assert_eq!(c.status, Status::SUCCESS);
        assert_eq!(self.enable(), Status::SUCCESS);
        c.dw0 as u16
    }

    /// Property Set of CC.EN (the controller's bring-up); its status.
    fn enable(&mut self) -> Status {
        let s = self.next(
            PropertyCmd {
                size8: false,
                offset: props::CC,
                value: props::cc::ENABLE_DEFAULT as u64,
            }
            .to_sqe(0, fctype::PROPERTY_SET),
        );
        self.send(&s, None, &[]);
        self.reply().cqe.status
    }
}

fn rw(opcode: u8, slba: u64, nlb: u16) -> Sqe {
    Sqe {
        opcode,
        nsid: 1,
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: nlb as u32 - 1,
        ..Sqe::default()
    }
}

#[test]
fn admin_connect_identify_by_keyed_sgls() {
    let t = target();
    let mut h = Host::new(&t, 0, 32, 0);
    let cntlid = h.bring_up();
    assert!(cntlid > 0);
    let id = Sqe {
        opcode: admin::IDENTIFY,
        cdw10: cns::CONTROLLER as u32,
        ..Sqe::default()
    };
    let r = h.keyed(id, 0x8000, 4096, true);
    assert_eq!(r.cqe.status, Status::SUCCESS);
    assert_eq!(r.cqe.sqid, 0);
    assert_eq!(r.invalidated, Some(KEY), "the host asked for invalidation");
    // Identify Controller: SUBNQN at bytes 1023:768.
    assert_eq!(
        &h.mem[0x8000 + 768..0x8000 + 768 + NQN.len()],
        NQN.as_bytes()
    );
    // SGLS (bytes 539:536) says Keyed SGL Data Block: Linux's nvme-rdma
    // refuses a controller without it ("Mandatory keyed sgls").
    let sgls = u32::from_le_bytes(h.mem[0x8000 + 536..0x8000 + 540].try_into().unwrap());
    assert_ne!(
        sgls & farflash_wire::identify::SGLS_KEYED,
        0,
        "SGLS {sgls:#x}"
    );
}

#[test]
fn io_queue_writes_in_capsule_and_keyed_reads_back() {
    let t = target();
    let mut admin = Host::new(&t, 0, 32, 0);
    let cntlid = admin.bring_up();
    let mut h = Host::new(&t, 1, 128, 8192);
    assert_eq!(h.connect(1, 127, cntlid).status, Status::SUCCESS);

    // 4 KiB in the capsule (Linux: I/O queues, writes up to IOCCSZ).
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let w = h.next(rw(io::WRITE, 8, 8));
    let mut d = [0u8; 16];
    SglDescriptor {
        addr: 0,
        length: 4096,
        sgl_type: IN_CAPSULE,
    }
    .encode(&mut d);
    h.send(&w, Some(d), &pattern);
    let r = h.reply();
    assert_eq!(r.cqe.status, Status::SUCCESS);
    assert_eq!(r.invalidated, None);

    // 64 KiB by RDMA READ from host memory, with invalidate.
    let big: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    h.mem[0x10000..0x20000].copy_from_slice(&big);
    let r = h.keyed(rw(io::WRITE, 64, 128), 0x10000, 65536, true);
    assert_eq!((r.cqe.status, r.invalidated), (Status::SUCCESS, Some(KEY)));

    // Read both back by RDMA WRITE.
    let r = h.keyed(rw(io::READ, 8, 8), 0x40000, 4096, false);
    assert_eq!(r.cqe.status, Status::SUCCESS);
    assert_eq!(&h.mem[0x40000..0x41000], &pattern[..]);
    let r = h.keyed(rw(io::READ, 64, 128), 0x80000, 65536, true);
    assert_eq!((r.cqe.status, r.invalidated), (Status::SUCCESS, Some(KEY)));
    assert_eq!(&h.mem[0x80000..0x90000], &big[..]);
    assert_eq!(r.cqe.sqid, 1);
}

#[test]
fn io_queue_data_is_in_registered_chunks_admin_data_is_not() {
    let t = target();
    let mut admin = Host::new(&t, 0, 32, 0);
    let cntlid = admin.bring_up();
    assert!(admin.q.chunks().is_empty(), "the admin queue uses staging");
    assert!(admin.in_chunk == 0 && admin.outside > 0);
    let mut h = Host::new(&t, 1, 128, 8192);
    assert_eq!(
        h.q.chunks().len(),
        1,
        "one chunk ready to register at accept"
    );
    assert_eq!(h.connect(1, 127, cntlid).status, Status::SUCCESS);
    let (c0, o0) = (h.in_chunk, h.outside);
    assert_eq!(o0, 0, "the Connect data too");
    // 128 KiB writes (RDMA READ) and reads (RDMA WRITE), many times over:
    // the buffers recycle within the chunk, none outside it.
    for i in 0..40u64 {
        let slba = (i % 8) * 256;
        h.mem[0x20000..0x40000].fill(i as u8 + 1);
        let r = h.keyed(rw(io::WRITE, slba, 256), 0x20000, 128 << 10, false);
        assert_eq!(r.cqe.status, Status::SUCCESS);
        let r = h.keyed(rw(io::READ, slba, 256), 0x40000, 128 << 10, false);
        assert_eq!(r.cqe.status, Status::SUCCESS);
        assert!(h.mem[0x40000..0x60000].iter().all(|&x| x == i as u8 + 1));
    }
    assert_eq!(h.in_chunk - c0, 80);
    assert_eq!(h.outside, 0);
    assert_eq!(h.q.chunks().len(), 1, "recycled, not grown");
}

#[test]
fn bad_descriptors_get_the_spec_status_and_the_queue_goes_on() {
    let t = target();
    let mut admin = Host::new(&t, 0, 32, 0);
    let cntlid = admin.bring_up();
    let mut h = Host::new(&t, 1, 16, 1024);
    assert_eq!(h.connect(1, 15, cntlid).status, Status::SUCCESS);

    // A keyed SGL shorter than the read.
    let r = h.keyed(rw(io::READ, 0, 8), 0, 512, false);
    assert_eq!(r.cqe.status, Status::SGL_INVALID_DATA_LENGTH.dnr());
    // In-capsule offset past what arrived.
    let w = h.next(rw(io::WRITE, 0, 1));
    let mut d = [0u8; 16];
    SglDescriptor {
        addr: 600,
        length: 512,
        sgl_type: IN_CAPSULE,
    }
    .encode(&mut d);
    h.send(&w, Some(d), &[0u8; 1024]);
    assert_eq!(h.reply().cqe.status, Status::SGL_INVALID_OFFSET.dnr());
    // A Transport SGL (TCP's) is not an RDMA descriptor.
    let w = h.next(rw(io::READ, 0, 1));
    h.send(
        &w,
        Some({
            let mut d = [0u8; 16];
            SglDescriptor::transport(512).encode(&mut d);
            d
        }),
        &[],
    );
    assert_eq!(h.reply().cqe.status, Status::SGL_INVALID_TYPE.dnr());
    // Still serving.
    let r = h.keyed(rw(io::READ, 0, 1), 0, 512, false);
    assert_eq!(r.cqe.status, Status::SUCCESS);
    assert!(h.q.fault().is_none());
}

#[test]
fn short_and_oversized_capsules_close_only_their_queue() {
    let t = target();
    let mut admin = Host::new(&t, 0, 32, 0);
    let cntlid = admin.bring_up();
    let mut a = Host::new(&t, 1, 16, 512);
    let mut b = Host::new(&t, 2, 16, 512);
    assert_eq!(a.connect(1, 15, cntlid).status, Status::SUCCESS);
    assert_eq!(b.connect(2, 15, cntlid).status, Status::SUCCESS);

    a.q.on_recv(3, &[0u8; 40]);
    assert!(matches!(a.q.fault(), Some(Fault::Capsule(_))));
    assert!(a.q.wants_close());
    b.q.on_recv(3, &vec![0u8; 64 + 513]);
    assert!(matches!(b.q.fault(), Some(Fault::Capsule(_))));

    let mut c = Host::new(&t, 3, 16, 512);
    assert_eq!(c.connect(3, 15, cntlid).status, Status::SUCCESS);
    assert_eq!(
        c.keyed(rw(io::READ, 0, 1), 0, 512, false).cqe.status,
        Status::SUCCESS
    );
    // The admin queue still answers.
    let ka = admin.next(Sqe {
        opcode: admin::KEEP_ALIVE,
        ..Sqe::default()
    });
    admin.send(&ka, None, &[]);
    assert_eq!(admin.reply().cqe.status, Status::SUCCESS);
}

#[test]
fn connect_must_match_the_cm_request() {
    let t = target();
    let mut admin = Host::new(&t, 0, 32, 0);
    let cntlid = admin.bring_up();
    // CM said QID 1 with 16 entries; the Connect asks for QID 2.
    let mut h = Host::new(&t, 1, 16, 512);
    h.connect(2, 15, cntlid);
    assert_eq!(h.q.fault(), Some(Fault::ConnectMismatch));
    // Or for more entries than receive buffers are posted.
    let mut h = Host::new(&t, 1, 16, 512);
    h.connect(1, 63, cntlid);
    assert_eq!(h.q.fault(), Some(Fault::ConnectMismatch));
}

#[test]
fn work_waits_for_send_queue_entries() {
    let t = target();
    let geo = Geometry {
        qid: 0,
        recv_entries: 32,
        recv_bytes: 64,
        send_entries: 32,
    };
    let a = "127.0.0.1:4420".parse().unwrap();
    let p = "127.0.0.1:50000".parse().unwrap();
    // A send queue of one entry: a response with data needs two.
    let mut q = RdmaQueue::new(t, a, p, geo, 1);
    let c = ConnectCmd {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 5000,
    };
    let mut raw = [0u8; 64];
    c.to_sqe(1).encode(&mut raw);
    raw[24..40].copy_from_slice(
        &KeyedSgl {
            addr: 0,
            length: 1024,
            key: KEY,
            invalidate: false,
        }
        .encode(),
    );
    q.on_recv(0, &raw);
    let Some(Work::Read { slot, .. }) = q.pop_work() else {
        panic!("no READ")
    };
    // Until the READ completes, nothing else fits.
    assert_eq!(q.pending_work(), 0);
    let d = ConnectData {
        hostid: [1; 16],
        cntlid: CNTLID_DYNAMIC,
        subnqn: NQN.into(),
        hostnqn: HOST.into(),
    };
    d.encode(q.data_mut(slot).unwrap());
    q.on_read_done(slot);
    assert!(q.pop_work().is_none(), "no entry is free yet");
    q.on_send_done(1);
    let Some(Work::Respond { cqe, .. }) = q.pop_work() else {
        panic!("no response")
    };
    assert_eq!(Cqe::decode(&cqe).status, Status::SUCCESS);
    assert!(!q.finished());
    // Posted, not completed: a disconnect now would flush the response.
    assert!(!q.flushed());
    q.on_send_done(1);
    assert!(q.flushed());
}
