//! `rdma_host`: the host side of the NVMe/RDMA binding, sans-I/O
//! (`farflash_host::rdma::HostQueue`) and the CM private data a host
//! decodes (Accept, Reject).
//!
//! Input: `[cm: 32 bytes][depth: u8][icd_max: u16]` then operations, each
//! an op byte:
//! - `0`: submit a command on a free CID (direction, length from the next
//!   bytes);
//! - `1`: the SEND of CID `u8` completed;
//! - `2`: a message (`len: u8 % 33` bytes) received, maybe flagged as
//!   SEND_WITH_INVALIDATE;
//! - `3`: a well-formed response (status `u16`) for an in-flight CID;
//! - `4`: a SEND completion after a failure.
//!
//! Completions are taken after every step (a finished command's CID is
//! free at once).
//!
//! Checks: no panic; the Reject/Accept decoders agree with the bytes
//! (RECFMT 0, 16-bit fields); a capsule's SQE carries its CID and PSDT
//! SGL, in-capsule data exactly for writes up to `icd_max`, else a Keyed
//! SGL with the command's length, and a key and address only with data;
//! a command completes once, only after both its SEND completed and its
//! response arrived, with no more data than it was issued with; at most
//! `depth` commands are taken; a failed queue completes nothing more.

use crate::input::Input;
use farflash_host::rdma::{HostBuf, HostQueue};
use farflash_host::{Completion, DataDir};
use farflash_rdma::cm::{decode_accept, decode_reject, RejectStatus};
use farflash_rdma::sgl::{KeyedSgl, KEYED_ADDRESS};
use farflash_wire::sqe::{sgl, SglDescriptor, PSDT_SGL};
use farflash_wire::{Cqe, Sqe, Status};

const BUF: HostBuf = HostBuf {
    addr: 0x7f00_0000_1000,
    key: 0x1234_5678,
};

#[derive(Clone, Copy, Default)]
struct Model {
    busy: bool,
    sent: bool,
    resp: bool,
    len: u32,
}

fn cm_bytes(cm: &[u8]) {
    let le = |i: usize| u16::from_le_bytes([cm[i], cm[i + 1]]);
    match decode_reject(cm) {
        Some(sts) => {
            assert_eq!(le(0), 0, "reject with RECFMT {}", le(0));
            assert_eq!(sts, le(2));
            if let Some(s) = RejectStatus::from_code(sts) {
                assert_eq!(s as u16, sts);
                assert!(!s.describe().is_empty());
            }
        }
        None => assert_ne!(le(0), 0, "RECFMT 0 reject not decoded"),
    }
    match decode_accept(cm) {
        Ok(crq) => assert_eq!((le(0), crq), (0, le(2))),
        Err(e) => assert_eq!(e, RejectStatus::InvalidRecfmt),
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let mut cm = [0u8; 32];
    for b in cm.iter_mut() {
        *b = inp.u8();
    }
    cm_bytes(&cm);
    let depth = (inp.u8() % 16).max(1) as u16;
    let icd_max = inp.u16() as u32;
    let mut q = HostQueue::new(1, depth, icd_max);
    let mut model = vec![Model::default(); depth as usize];
    let mut out: Vec<Completion> = Vec::new();
    let mut ops = 0;
    while !inp.is_empty() && ops < 4096 {
        ops += 1;
        match inp.u8() % 5 {
            0 => {
                let dir = match inp.u8() % 3 {
                    0 => DataDir::None,
                    1 => DataDir::ToCtrl,
                    _ => DataDir::FromCtrl,
                };
                let len = inp.u32() % (1 << 25);
                let Some(cid) = q.alloc_cid() else {
                    assert!(model.iter().all(|m| m.busy), "no CID with one free");
                    continue;
                };
                let sqe = Sqe {
                    opcode: inp.u8(),
                    flags: inp.u8(),
                    ..Default::default()
                };
                let r = q.submit(cid, sqe, dir, len, BUF);
                let Ok(cap) = r else {
                    assert!(len >= 1 << 24 || q.dead().is_some(), "submit refused");
                    q.release_cid(cid);
                    continue;
                };
                let len = if dir == DataDir::None { 0 } else { len };
                assert_eq!(u16::from_le_bytes([cap.sqe[2], cap.sqe[3]]), cid);
                assert_eq!(cap.sqe[1] & 0xC0, PSDT_SGL);
                let desc: &[u8; 16] = cap.sqe[24..40].try_into().expect("16 bytes");
                if dir == DataDir::ToCtrl && len > 0 && len <= icd_max {
                    assert_eq!(cap.in_capsule, len);
                    let d = SglDescriptor::decode(desc);
                    assert_eq!((d.addr, d.length, d.sgl_type), (0, len, sgl::IN_CAPSULE));
                } else {
                    assert_eq!(cap.in_capsule, 0);
                    let k = KeyedSgl::decode(desc);
                    assert_eq!(desc[15], KEYED_ADDRESS, "invalidation asked");
                    assert_eq!(k.length, len);
                    if len > 0 {
                        assert_eq!((k.addr, k.key), (BUF.addr, BUF.key));
                    } else {
                        assert_eq!((k.addr, k.key), (0, 0), "a key without data");
                    }
                }
                model[cid as usize] = Model {
                    busy: true,
                    sent: false,
                    resp: false,
                    len,
                };
            }
            1 => {
                let cid = inp.u8() as u16 % (depth + 2);
                q.on_send_done(cid);
                if let Some(m) = model.get_mut(cid as usize) {
                    if m.busy {
                        m.sent = true;
                    }
                }
            }
            2 => {
                let n = inp.u8() as usize % 33;
                let mut msg = [0u8; 32];
                for b in msg.iter_mut().take(n) {
                    *b = inp.u8();
                }
                let inv = inp.bool().then(|| inp.u32());
                let dead = q.dead().is_some();
                q.on_recv(&msg[..n], inv);
                let cid = u16::from_le_bytes([msg[12], msg[13]]) as usize;
                let fine = !dead
                    && n >= 16
                    && inv.is_none()
                    && model.get(cid).is_some_and(|m| m.busy && !m.resp);
                if fine {
                    model[cid].resp = true;
                } else if !dead {
                    assert!(q.dead().is_some(), "a bad response was taken");
                }
            }
            3 => {
                let busy: Vec<usize> = (0..model.len()).filter(|&i| model[i].busy).collect();
                if busy.is_empty() {
                    continue;
                }
                let cid = busy[inp.u8() as usize % busy.len()];
                let mut b = [0u8; 16];
                Cqe {
                    cid: cid as u16,
                    status: Status(inp.u16() & 0x7FFF),
                    ..Default::default()
                }
                .encode(&mut b);
                let dead = q.dead().is_some();
                q.on_recv(&b, None);
                if !dead && !model[cid].resp {
                    model[cid].resp = true;
                }
            }
            _ => {
                if q.dead().is_some() {
                    // Nothing finishes on a failed queue.
                    q.on_send_done(0);
                }
            }
        }
        // A finished command's CID is free at once (a caller may reuse it
        // before it looks at the completion), so check after every step.
        let dead = q.dead().is_some();
        out.clear();
        q.take_completions(&mut out);
        for c in &out {
            let m = &mut model[c.cid as usize];
            assert!(m.busy && m.sent && m.resp, "cid {} finished early", c.cid);
            assert!(c.transferred <= c.expected && c.expected == m.len);
            *m = Model::default();
        }
        if dead {
            assert!(out.is_empty(), "a dead queue completed a command");
        }
        assert!(q.outstanding() <= depth as usize);
    }
}
