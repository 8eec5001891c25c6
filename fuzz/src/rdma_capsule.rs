//! `rdma_capsule`: the NVMe/RDMA binding's sans-I/O receive path
//! (`farflash-rdma`): RDMA CM private data, keyed / in-capsule SGL
//! placement, and `RdmaQueue` fed arbitrary capsules.
//!
//! Input: `[cm: 32 bytes][xfer: u8][xlen: u32][desc: 16 bytes][icd_len: u16]`
//! then operations, each an op byte:
//! - `0`/`1`: a message (`len: u16` then bytes) received on the I/O / admin
//!   queue;
//! - `2`: a well-formed command on the I/O queue (opcode, SLBA, NLB,
//!   keyed or in-capsule, invalidate from the next bytes);
//! - `3`: run the pending work (READs filled, responses taken);
//! - `4`: a tick, a second later.
//!
//! The queues are brought up honestly first (admin Connect by keyed SGL,
//! CC.EN, I/O queue Connect), like Linux's nvme-rdma does.
//!
//! Checks: no panic; an accepted CM Request yields `recv_entries =
//! HSQSIZE + 1` within the limits and an Accept that decodes to it; a
//! placement stays inside what the descriptor and the capsule name; READs
//! fill exactly the command's data buffer; responses carry the queue's
//! SQID and never more data than the host's SGL named; a faulted queue
//! takes nothing more; send-queue credits never exceed the queue's depth.

use crate::build::SUBNQN;
use crate::input::Input;
use crate::target_setup;
use farflash_core::Xfer;
use farflash_rdma::cm::{self, CmRequest, Geometry, Limits};
use farflash_rdma::queue::{RdmaQueue, Work};
use farflash_rdma::sgl::{self, KeyedSgl, Placement};
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::{fctype, io};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Cqe, Sqe, Status};
use std::time::{Duration, Instant};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:fuzz-rdma";
const SQ: usize = 64;
const KEY: u32 = 0x77;

struct Side {
    q: RdmaQueue,
    mem: Vec<u8>,
    replies: Vec<Cqe>,
    cid: u16,
    /// Successful responses.
    ok: usize,
}

impl Side {
    fn new(t: &std::sync::Arc<farflash_core::Target>, geo: Geometry) -> Side {
        let a = "127.0.0.1:4420".parse().expect("literal");
        let p = "127.0.0.1:50000".parse().expect("literal");
        Side {
            q: RdmaQueue::new(t.clone(), a, p, geo, SQ),
            mem: vec![0; 256 << 10],
            replies: Vec::new(),
            cid: 0,
            ok: 0,
        }
    }

    fn recv(&mut self, msg: &[u8]) {
        let faulted = self.q.wants_close();
        let before = self.q.pending_work();
        self.q.on_recv(0, msg);
        if faulted {
            assert_eq!(
                self.q.pending_work(),
                before,
                "a closed queue took a capsule"
            );
        }
        self.run();
    }

    fn run(&mut self) {
        for _ in 0..10_000 {
            self.q.commit();
            while self.q.in_flight() > 0 {
                self.q.poll_backends();
            }
            let mut r = Vec::new();
            self.q.take_reposts(&mut r);
            let Some(w) = self.q.pop_work() else { return };
            let n = w.entries();
            match w {
                Work::Read { slot, remote } => {
                    let len = remote.len as usize;
                    let start = (remote.addr as usize).min(self.mem.len());
                    let avail = &self.mem[start..];
                    let dst = self.q.data_mut(slot).expect("READ into a buffer");
                    assert_eq!(dst.len(), len, "READ length is the command's data length");
                    let k = len.min(avail.len());
                    dst[..k].copy_from_slice(&avail[..k]);
                    self.q.on_send_done(n);
                    self.q.on_read_done(slot);
                }
                Work::Respond { cqe, data, .. } => {
                    let c = Cqe::decode(&cqe);
                    assert_eq!(c.sqid, self.q.nvme().qid());
                    if let Some((buf, len, r)) = data {
                        assert!(len <= r.len && len as usize <= buf.len());
                        assert!(c.status.is_success(), "data with an error status");
                        self.q.release(buf);
                    }
                    self.q.on_send_done(n);
                    self.ok += c.status.is_success() as usize;
                    self.replies.push(c);
                }
            }
        }
        panic!("work never drained");
    }

    fn keyed(&mut self, mut sqe: Sqe, addr: u64, len: u32) -> Option<Cqe> {
        self.cid = self.cid.wrapping_add(1);
        sqe.cid = self.cid;
        sqe.flags = PSDT_SGL;
        let mut raw = [0u8; 64];
        sqe.encode(&mut raw);
        raw[24..40].copy_from_slice(
            &KeyedSgl {
                addr,
                length: len,
                key: KEY,
                invalidate: false,
            }
            .encode(),
        );
        self.replies.clear();
        self.recv(&raw);
        self.replies.pop()
    }

    fn connect(&mut self, qid: u16, sqsize: u16, cntlid: u16) -> Option<Cqe> {
        ConnectData {
            hostid: [9; 16],
            cntlid,
            subnqn: SUBNQN.into(),
            hostnqn: HOSTNQN.into(),
        }
        .encode(&mut self.mem[..1024]);
        let c = ConnectCmd {
            recfmt: 0,
            qid,
            sqsize,
            cattr: 0,
            kato: 5000,
        };
        self.keyed(c.to_sqe(0), 0, 1024)
    }
}

fn check_cm(raw: &[u8; 32]) {
    let lim = Limits {
        max_qid: 4,
        max_io_entries: 128,
        max_admin_entries: 32,
        icd_bytes: 8192,
    };
    if let Ok(r) = CmRequest::decode(raw) {
        assert_eq!(CmRequest::decode(&r.encode()), Ok(r));
        if let Ok(g) = lim.check(&r) {
            assert_eq!(g.recv_entries, r.hsqsize as u32 + 1);
            assert!(g.recv_entries >= 2 && r.qid <= lim.max_qid);
            assert!(r.hrqsize as u32 >= g.recv_entries);
            assert_eq!(
                cm::decode_accept(&cm::encode_accept(&g)),
                Ok(g.recv_entries as u16)
            );
        }
    }
}

fn check_plan(sel: u8, xlen: u32, desc: &[u8; 16], icd: usize) {
    let xfer = match sel % 3 {
        0 => Xfer::None,
        1 => Xfer::H2C(xlen),
        _ => Xfer::C2H(xlen),
    };
    let Ok(p) = sgl::plan(xfer, desc, icd) else {
        return;
    };
    let k = KeyedSgl::decode(desc);
    match p.data {
        Placement::None => assert!(xfer.is_empty() || icd == 0),
        Placement::InCapsule { offset, len } => {
            assert_eq!(xfer, Xfer::H2C(len));
            assert!(offset as u64 + len as u64 <= icd as u64);
        }
        Placement::Read(r) => {
            assert_eq!(xfer, Xfer::H2C(r.len));
            assert_eq!((r.len, r.key, r.addr), (k.length, k.key, k.addr));
        }
        Placement::Write(r) => {
            assert_eq!(xfer, Xfer::C2H(r.len));
            assert!(r.len <= k.length && r.key == k.key);
        }
    }
    if let Some(key) = p.invalidate {
        assert!(k.invalidate && key == k.key);
    }
}

pub fn run(data: &[u8]) {
    successes(data);
}

/// Runs one input; returns how many I/O-queue commands succeeded.
fn successes(data: &[u8]) -> usize {
    let mut inp = Input::new(data);
    check_cm(&inp.array::<32>());
    let (sel, xlen) = (inp.u8(), inp.u32());
    let desc = inp.array::<16>();
    let icd = inp.u16() as usize;
    check_plan(sel, xlen, &desc, icd);

    let (t, shape) = target_setup::build(0, 0);
    let icd_bytes = shape.icd;
    let mut admin = Side::new(
        &t,
        Geometry {
            qid: 0,
            recv_entries: 32,
            recv_bytes: 64,
            send_entries: 32,
        },
    );
    let Some(c) = admin.connect(0, 31, CNTLID_DYNAMIC) else {
        panic!("no admin Connect response")
    };
    assert_eq!(c.status, Status::SUCCESS, "honest admin Connect");
    let cntlid = c.dw0 as u16;
    let mut cc = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: props::cc::ENABLE_DEFAULT as u64,
    }
    .to_sqe(0, fctype::PROPERTY_SET);
    cc.flags = PSDT_SGL;
    cc.cid = 500;
    let mut raw = [0u8; 64];
    cc.encode(&mut raw);
    admin.recv(&raw);
    let mut ioq = Side::new(
        &t,
        Geometry {
            qid: 1,
            recv_entries: 32,
            recv_bytes: 64 + icd_bytes,
            send_entries: 32,
        },
    );
    let c = ioq.connect(1, 31, cntlid);
    assert_eq!(
        c.map(|c| c.status),
        Some(Status::SUCCESS),
        "honest I/O Connect"
    );

    let mut now = Instant::now();
    while !inp.is_empty() {
        let op = inp.u8() % 5;
        match op {
            0 | 1 => {
                let n = inp.u16() as usize % (64 + icd_bytes as usize + 64);
                let msg = inp.take(n);
                if op == 0 {
                    ioq.recv(msg);
                } else {
                    admin.recv(msg);
                }
            }
            2 => {
                let op = if inp.bool() { io::READ } else { io::WRITE };
                let slba = inp.u8() as u64;
                let nlb = inp.u8() as u16 % 16 + 1;
                let len = nlb as u32 * shape.block_size;
                let in_capsule = inp.bool();
                ioq.cid = ioq.cid.wrapping_add(1);
                let sqe = Sqe {
                    opcode: op,
                    flags: PSDT_SGL,
                    cid: ioq.cid,
                    nsid: 1,
                    cdw10: slba as u32,
                    cdw12: nlb as u32 - 1,
                    ..Sqe::default()
                };
                let mut raw = vec![0u8; 64];
                let mut s = [0u8; 64];
                sqe.encode(&mut s);
                raw.copy_from_slice(&s);
                if in_capsule && op == io::WRITE {
                    let mut d = [0u8; 16];
                    SglDescriptor::in_capsule(len).encode(&mut d);
                    raw[24..40].copy_from_slice(&d);
                    raw.resize(64 + len as usize, 0xA5);
                } else {
                    let k = KeyedSgl {
                        addr: inp.u16() as u64,
                        length: len,
                        key: KEY,
                        invalidate: inp.bool(),
                    };
                    raw[24..40].copy_from_slice(&k.encode());
                }
                ioq.recv(&raw);
            }
            3 => {
                ioq.run();
                admin.run();
            }
            _ => {
                now += Duration::from_secs(1);
                admin.q.tick(now);
                ioq.q.tick(now);
                admin.run();
                ioq.run();
            }
        }
    }
    ioq.run();
    admin.run();
    assert!(ioq.q.pending_work() == 0 && admin.q.pending_work() == 0);
    ioq.ok
}

#[cfg(test)]
mod tests {
    /// The honest seed reaches the command layer: its three I/O commands
    /// (the I/O Connect aside) succeed.
    #[test]
    fn honest_seed_runs_io() {
        let seed = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/corpus/rdma_capsule/io-write-read"
        ))
        .expect("seed");
        assert_eq!(super::successes(&seed), 1 + 3);
    }
}
