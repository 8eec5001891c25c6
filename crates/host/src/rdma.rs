//! The host side of the NVMe/RDMA binding, sans-I/O (RDMA Transport Spec
//! 1.0 §3.3 "Data Transfer", §3.4 "Capsules"): the command slots of one
//! host queue pair. A command becomes a capsule (the SQE with its DPTR:
//! in-capsule data, or a Keyed SGL naming the slot's registered buffer);
//! the completion of its SEND and its response (a CQE received into a
//! posted buffer) finish it, in either order. The verbs layer
//! (`farflash-rdma-verbs`' `RdmaHostQueue`) posts and polls; everything it
//! receives is checked here: a response shorter than a CQE, for a CID not
//! in flight or twice for one, or a remote invalidation this host never
//! asked for fails the queue with an error naming it.

use crate::cids::Cids;
use crate::error::{HostError, Result, TransportError};
use crate::{Completion, DataDir};
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::keyed_sgl::{KeyedSgl, KEYED_MAX_LEN};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL, SQE_SIZE};
use farflash_wire::{Cqe, Sqe};

/// Where a command's data sits in host memory, for a Keyed SGL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostBuf {
    pub addr: u64,
    /// The remote key of the region holding it.
    pub key: u32,
}

/// A command ready to SEND: the SQE's bytes and how many bytes of the
/// slot's buffer follow it in the same message (in-capsule data; 0 when
/// the data, if any, is named by a Keyed SGL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capsule {
    pub sqe: [u8; SQE_SIZE],
    pub in_capsule: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    dir: Option<DataDir>,
    len: u32,
    /// The SEND of the capsule completed (its buffers are the host's again).
    sent: bool,
    /// The response, once it arrived.
    resp: Option<Cqe>,
}

/// The command slots of one host queue pair (CIDs `0..depth`).
pub struct HostQueue {
    qid: u16,
    icd_max: u32,
    slots: Vec<Slot>,
    cids: Cids,
    done: Vec<Completion>,
    dead: Option<TransportError>,
}

impl HostQueue {
    /// `icd_max`: the largest write sent in the capsule (IOCCSZ × 16 - 64
    /// on I/O queues; 0 on the admin queue, whose receive buffers hold an
    /// SQE only).
    pub fn new(qid: u16, depth: u16, icd_max: u32) -> HostQueue {
        let d = depth.max(1);
        HostQueue {
            qid,
            icd_max,
            slots: vec![Slot::default(); d as usize],
            cids: Cids::new(d),
            done: Vec::with_capacity(d as usize),
            dead: None,
        }
    }

    pub fn qid(&self) -> u16 {
        self.qid
    }
    pub fn depth(&self) -> u16 {
        self.cids.depth()
    }
    /// CIDs taken (allocated or in flight).
    pub fn outstanding(&self) -> usize {
        self.cids.outstanding()
    }
    pub fn alloc_cid(&mut self) -> Option<u16> {
        self.cids.alloc()
    }
    /// Returns a CID taken with `alloc_cid` and never submitted.
    pub fn release_cid(&mut self, cid: u16) {
        self.cids.release(cid)
    }
    /// Whether `cid` is in flight (its buffer belongs to the target).
    pub fn is_busy(&self, cid: u16) -> bool {
        self.cids.in_flight(cid)
    }
    pub fn any_busy(&self) -> bool {
        self.cids.any_in_flight()
    }

    /// The error that failed this queue, if any.
    pub fn dead(&self) -> Option<&TransportError> {
        self.dead.as_ref()
    }
    pub fn check_alive(&self) -> Result<()> {
        match &self.dead {
            Some(e) => Err(HostError::Transport(e.clone())),
            None => Ok(()),
        }
    }
    /// Fails the queue (the first reason stays); returns the error.
    pub fn fail(&mut self, why: String) -> HostError {
        let e = self
            .dead
            .get_or_insert(TransportError::Rdma(why.clone()))
            .clone();
        HostError::Transport(e)
    }

    /// Starts the command `sqe` on `cid` with `len` bytes moving in `dir`;
    /// `buf` is the slot's buffer (at least `len` bytes, checked by the
    /// caller). A write of at most `icd_max` bytes goes in the capsule;
    /// any other data is named by a Keyed SGL (subtype 0h: the key stays
    /// valid, the host never asks for invalidation); a command without
    /// data gets a zero-length Keyed SGL, as Linux's nvme-rdma sends.
    pub fn submit(
        &mut self,
        cid: u16,
        mut sqe: Sqe,
        dir: DataDir,
        len: u32,
        buf: HostBuf,
    ) -> Result<Capsule> {
        self.check_alive()?;
        let s = self
            .slots
            .get_mut(cid as usize)
            .ok_or_else(|| HostError::Invalid(format!("cid {cid} out of range")))?;
        if self.cids.in_flight(cid) {
            return Err(HostError::Invalid(format!("cid {cid} already in flight")));
        }
        let len = if dir == DataDir::None { 0 } else { len };
        if len > KEYED_MAX_LEN {
            return Err(HostError::Invalid(format!(
                "data length {len} exceeds a Keyed SGL's 24-bit length"
            )));
        }
        self.cids.start(cid);
        *s = Slot {
            dir: Some(dir),
            len,
            sent: false,
            resp: None,
        };
        sqe.cid = cid;
        // NVMe over Fabrics requires SGLs for all commands
        // (Base 2.0, "Capsules and Data Transfer").
        sqe.flags = (sqe.flags & !0xC0) | PSDT_SGL;
        let icd = dir == DataDir::ToCtrl && len > 0 && len <= self.icd_max;
        let mut b = [0u8; SQE_SIZE];
        if icd {
            // In-capsule data: Data Block, subtype Offset, offset 0 (ICDOFF).
            sqe.dptr = SglDescriptor::in_capsule(len);
            sqe.encode(&mut b);
        } else {
            sqe.encode(&mut b);
            let k = KeyedSgl {
                addr: if len > 0 { buf.addr } else { 0 },
                length: len,
                key: if len > 0 { buf.key } else { 0 },
                invalidate: false,
            };
            b[24..40].copy_from_slice(&k.encode());
        }
        Ok(Capsule {
            sqe: b,
            in_capsule: if icd { len } else { 0 },
        })
    }

    /// The SEND of `cid`'s capsule completed.
    pub fn on_send_done(&mut self, cid: u16) {
        if self.dead.is_some() {
            return;
        }
        let busy = self.cids.in_flight(cid);
        if let Some(s) = self.slots.get_mut(cid as usize) {
            if busy {
                s.sent = true;
                self.try_finish(cid);
            }
        }
    }

    /// A message received into a posted buffer: the response of a command
    /// (§3.4: a 16-byte CQE). `invalidated` is the rkey a
    /// SEND_WITH_INVALIDATE invalidated, if it was one. Failures fail the
    /// queue; later messages are ignored.
    pub fn on_recv(&mut self, msg: &[u8], invalidated: Option<u32>) {
        if self.dead.is_some() {
            return;
        }
        if let Some(rkey) = invalidated {
            // This host's region key serves every command of the queue; it
            // never asks for remote invalidation (Keyed SGL subtype 0h).
            self.fail(format!(
                "queue {}: the target sent SEND_WITH_INVALIDATE of rkey {rkey:#x}, which this \
                 host never offered for invalidation",
                self.qid
            ));
            return;
        }
        let Some(b) = msg
            .get(..CQE_SIZE)
            .and_then(|b| <&[u8; CQE_SIZE]>::try_from(b).ok())
        else {
            self.fail(format!(
                "queue {}: a {}-byte response (a CQE is {CQE_SIZE})",
                self.qid,
                msg.len()
            ));
            return;
        };
        let cqe = Cqe::decode(b);
        let cid = cqe.cid;
        let busy = self.cids.in_flight(cid);
        match self.slots.get_mut(cid as usize) {
            Some(s) if busy && s.resp.is_none() => {
                s.resp = Some(cqe);
                self.try_finish(cid);
            }
            _ => {
                self.fail(format!(
                    "queue {}: a response for CID {cid}, which is not in flight",
                    self.qid
                ));
            }
        }
    }

    fn try_finish(&mut self, cid: u16) {
        let s = &mut self.slots[cid as usize];
        let (Some(cqe), true) = (s.resp, s.sent) else {
            return;
        };
        // RC delivers the target's RDMA WRITEs before its SEND, and it
        // answers a write after its RDMA READs: a successful response
        // means all the data moved.
        let transferred = if cqe.status.is_success() { s.len } else { 0 };
        self.done.push(Completion {
            cid,
            cqe,
            dir: s.dir.unwrap_or(DataDir::None),
            expected: s.len,
            transferred,
            digest_error: false,
        });
        *s = Slot::default();
        self.cids.finish(cid);
    }

    /// Moves finished commands into `out` (appends).
    pub fn take_completions(&mut self, out: &mut Vec<Completion>) {
        out.append(&mut self.done);
    }
    pub fn has_completions(&self) -> bool {
        !self.done.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_wire::sqe::sgl;
    use farflash_wire::Status;

    const BUF: HostBuf = HostBuf {
        addr: 0x1000_0000,
        key: 0xABCD,
    };

    fn resp(cid: u16, status: u16) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        Cqe {
            cid,
            status: Status(status),
            ..Default::default()
        }
        .encode(&mut b);
        b
    }

    fn write(nlb: u32) -> Sqe {
        Sqe {
            opcode: 0x01,
            nsid: 1,
            cdw12: nlb - 1,
            ..Default::default()
        }
    }

    #[test]
    fn small_writes_go_in_the_capsule_the_rest_by_keyed_sgl() {
        let mut q = HostQueue::new(1, 4, 4096);
        let c = q.alloc_cid().unwrap();
        let cap = q.submit(c, write(8), DataDir::ToCtrl, 4096, BUF).unwrap();
        assert_eq!(cap.in_capsule, 4096);
        assert_eq!(cap.sqe[1] & 0xC0, PSDT_SGL);
        assert_eq!(u16::from_le_bytes([cap.sqe[2], cap.sqe[3]]), c);
        let d = SglDescriptor::decode(&cap.sqe[24..40]);
        assert_eq!((d.addr, d.length, d.sgl_type), (0, 4096, sgl::IN_CAPSULE));

        let c2 = q.alloc_cid().unwrap();
        let cap = q.submit(c2, write(16), DataDir::ToCtrl, 8192, BUF).unwrap();
        assert_eq!(cap.in_capsule, 0);
        let k = KeyedSgl::decode(cap.sqe[24..40].try_into().unwrap());
        assert_eq!(
            k,
            KeyedSgl {
                addr: BUF.addr,
                length: 8192,
                key: BUF.key,
                invalidate: false
            }
        );
        // A read is always keyed (the target RDMA WRITEs it).
        let c3 = q.alloc_cid().unwrap();
        let cap = q
            .submit(c3, Sqe::default(), DataDir::FromCtrl, 512, BUF)
            .unwrap();
        assert_eq!(cap.in_capsule, 0);
        assert_eq!(cap.sqe[39], farflash_wire::keyed_sgl::KEYED_ADDRESS);
        // No data: a zero-length keyed descriptor, no key exposed.
        let c4 = q.alloc_cid().unwrap();
        let cap = q
            .submit(c4, Sqe::default(), DataDir::None, 4096, BUF)
            .unwrap();
        let k = KeyedSgl::decode(cap.sqe[24..40].try_into().unwrap());
        assert_eq!((k.addr, k.length, k.key), (0, 0, 0));
        assert_eq!(q.alloc_cid(), None);
        assert_eq!(q.outstanding(), 4);
    }

    #[test]
    fn admin_queue_has_no_in_capsule_data() {
        let mut q = HostQueue::new(0, 2, 0);
        let c = q.alloc_cid().unwrap();
        let cap = q.submit(c, write(2), DataDir::ToCtrl, 1024, BUF).unwrap();
        assert_eq!(cap.in_capsule, 0);
        assert_eq!(cap.sqe[39], farflash_wire::keyed_sgl::KEYED_ADDRESS);
    }

    #[test]
    fn a_command_finishes_after_its_send_and_its_response_in_either_order() {
        let mut q = HostQueue::new(1, 4, 0);
        let a = q.alloc_cid().unwrap();
        let b = q.alloc_cid().unwrap();
        q.submit(a, Sqe::default(), DataDir::FromCtrl, 4096, BUF)
            .unwrap();
        q.submit(b, Sqe::default(), DataDir::FromCtrl, 4096, BUF)
            .unwrap();
        let mut out = Vec::new();
        // Response first, then the send completion.
        q.on_recv(&resp(a, 0), None);
        q.take_completions(&mut out);
        assert!(out.is_empty(), "finished before its SEND completed");
        assert!(q.is_busy(a));
        q.on_send_done(a);
        q.on_send_done(b);
        q.take_completions(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].cid, a);
        assert!(out[0].check().is_ok());
        assert_eq!(out[0].transferred, 4096);
        // Then b's response, with an error status: no data counted.
        q.on_recv(&resp(b, 0x0002), None);
        out.clear();
        q.take_completions(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].transferred, 0);
        assert!(out[0].check().is_err());
        assert_eq!(q.outstanding(), 0);
        assert!(q.dead().is_none());
        // The slots are free again, and may be submitted directly.
        q.submit(3, Sqe::default(), DataDir::None, 0, BUF).unwrap();
        assert_eq!(q.outstanding(), 1);
    }

    #[test]
    fn hostile_responses_fail_the_queue_with_a_reason() {
        type Act = Box<dyn Fn(&mut HostQueue, u16)>;
        let cases: [(&str, Act); 5] = [
            ("short", Box::new(|q, c| q.on_recv(&resp(c, 0)[..15], None))),
            ("unknown CID", Box::new(|q, _| q.on_recv(&resp(3, 0), None))),
            (
                "out of range CID",
                Box::new(|q, _| q.on_recv(&resp(900, 0), None)),
            ),
            (
                "twice",
                Box::new(|q, c| {
                    q.on_recv(&resp(c, 0), None);
                    q.on_recv(&resp(c, 0), None)
                }),
            ),
            (
                "invalidate",
                Box::new(|q, c| q.on_recv(&resp(c, 0), Some(BUF.key))),
            ),
        ];
        for (name, act) in cases {
            let mut q = HostQueue::new(1, 4, 0);
            let c = q.alloc_cid().unwrap();
            q.submit(c, Sqe::default(), DataDir::FromCtrl, 8, BUF)
                .unwrap();
            act(&mut q, c);
            let e = q.dead().cloned();
            assert!(matches!(e, Some(TransportError::Rdma(_))), "{name}: {e:?}");
            // Dead: nothing more is taken or submitted.
            q.on_recv(&resp(c, 0), None);
            q.on_send_done(c);
            let mut out = Vec::new();
            q.take_completions(&mut out);
            assert!(out.is_empty(), "{name}");
            let c2 = q.alloc_cid().unwrap();
            assert!(q.submit(c2, Sqe::default(), DataDir::None, 0, BUF).is_err());
        }
    }

    #[test]
    fn caller_errors_are_refused_without_harm() {
        let mut q = HostQueue::new(1, 2, 0);
        assert!(q.submit(5, Sqe::default(), DataDir::None, 0, BUF).is_err());
        let c = q.alloc_cid().unwrap();
        assert!(q
            .submit(c, Sqe::default(), DataDir::ToCtrl, KEYED_MAX_LEN + 1, BUF)
            .is_err());
        q.submit(c, Sqe::default(), DataDir::ToCtrl, 8, BUF)
            .unwrap();
        assert!(q
            .submit(c, Sqe::default(), DataDir::ToCtrl, 8, BUF)
            .is_err());
        q.release_cid(c); // in flight: not released
        assert!(q.is_busy(c));
        assert!(q.dead().is_none());
    }
}
