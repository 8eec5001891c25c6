//! The sans-I/O queue-pair state machine: commands in, PDU bytes out;
//! received bytes in, completions out. No socket, no clock, no thread:
//! a driver moves the bytes ([`crate::admin`], [`crate::io_queue`]) and
//! unit tests feed it crafted PDUs.

use crate::cids::Cids;
use crate::error::{HostError, Result, TransportError};
use crate::slot::{Completion, DataDir, Slot};
use crate::tx::TxQueue;
use farflash_wire::digest;
use farflash_wire::pdu::{
    self, Framing, IcReq, Negotiated, PduType, CAPSULE_CMD_HLEN, CH_LEN, DGST_DDGST, DGST_HDGST,
    DIGEST_LEN, IC_HLEN, MIN_MAXH2CDATA,
};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL, SQE_SIZE};
use farflash_wire::{Cqe, Sqe};
use std::io::IoSlice;

mod rx;
#[cfg(test)]
mod tests;

/// In-capsule data the admin queue always accepts (TCP §3.3.1 "Capsules": 8,192 bytes
/// for Fabrics and Admin commands, the size the Linux host uses too).
pub const ADMIN_ICD: u32 = 8192;

/// How a queue pair is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Number of command slots (queue depth); CIDs are 0..depth.
    pub depth: u16,
    /// Bytes preallocated per slot (0 = grow on demand, for the admin queue).
    pub slot_buf: usize,
    /// Largest data one command may move (bounds C2HData from the network).
    pub max_data: u32,
    /// Largest write sent in-capsule (IOCCSZ*16-64 on I/O queues, 8 KiB on admin).
    pub icd_max: u32,
    /// Ask for header / data digests in ICReq.
    pub hdgst: bool,
    pub ddgst: bool,
}

/// Receive-side parsing state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rx {
    /// Accumulating a header into `hdr` (common header first, then the rest).
    Header,
    /// Skipping padding between the header and PDO.
    Pad { left: usize },
    /// C2HData payload going into a slot buffer.
    Payload { cid: u16, pos: usize, left: usize },
    /// The 4-byte data digest after a payload.
    DataDigest { cid: u16 },
}

const HDR_MAX: usize = IC_HLEN + DIGEST_LEN;

pub struct QueuePair {
    cfg: QueueConfig,
    neg: Negotiated,
    maxh2cdata: u32,
    slots: Vec<Slot>,
    cids: Cids,
    tx: TxQueue,
    rx: Rx,
    hdr: [u8; HDR_MAX],
    hdr_have: usize,
    hdr_need: usize,
    /// The framing of the PDU whose payload is being received.
    cur: Option<Framing>,
    crc: u32,
    ddgst_buf: [u8; DIGEST_LEN],
    ddgst_have: usize,
    done: Vec<Completion>,
    dead: Option<TransportError>,
}

impl QueuePair {
    /// A queue pair that has queued its ICReq (TCP §3.6.2.2) and waits for the ICResp.
    pub fn new(cfg: QueueConfig) -> QueuePair {
        let depth = cfg.depth.max(1);
        let mut q = QueuePair {
            cfg,
            neg: Negotiated {
                initialized: false,
                hdgst: cfg.hdgst,
                ddgst: cfg.ddgst,
                rx_pda: 0,
                max_data: cfg.max_data,
            },
            maxh2cdata: MIN_MAXH2CDATA,
            slots: (0..depth).map(|_| Slot::new(cfg.slot_buf)).collect(),
            cids: Cids::new(depth),
            tx: TxQueue::with_capacity(4096 + depth as usize * 128, 4 * depth as usize),
            rx: Rx::Header,
            hdr: [0; HDR_MAX],
            hdr_have: 0,
            hdr_need: CH_LEN,
            cur: None,
            crc: 0,
            ddgst_buf: [0; DIGEST_LEN],
            ddgst_have: 0,
            done: Vec::with_capacity(depth as usize),
            dead: None,
        };
        let ic = IcReq {
            pfv: 0,
            hpda: 0,
            dgst: if cfg.hdgst { DGST_HDGST } else { 0 } | if cfg.ddgst { DGST_DDGST } else { 0 },
            // 0's based: one outstanding R2T per command, as Linux asks.
            maxr2t: 0,
        };
        let mut b = [0u8; IC_HLEN];
        ic.encode(&mut b);
        q.tx.begin_pdu();
        q.tx.push_arena(IC_HLEN).copy_from_slice(&b);
        q
    }

    /// True once a valid ICResp was received.
    pub fn is_ready(&self) -> bool {
        self.neg.initialized && self.dead.is_none()
    }
    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }
    /// MAXH2CDATA from the ICResp.
    pub fn maxh2cdata(&self) -> u32 {
        self.maxh2cdata
    }
    /// The fatal error that killed this queue pair, if any.
    pub fn dead(&self) -> Option<&TransportError> {
        self.dead.as_ref()
    }
    pub fn depth(&self) -> u16 {
        self.cids.depth()
    }
    /// Commands taken or submitted and not yet reported as complete.
    pub fn outstanding(&self) -> usize {
        self.cids.outstanding()
    }
    /// Takes a free CID, if any.
    pub fn alloc_cid(&mut self) -> Option<u16> {
        self.cids.alloc()
    }
    /// Returns a CID taken with [`QueuePair::alloc_cid`] but never submitted.
    pub fn release_cid(&mut self, cid: u16) {
        self.cids.release(cid)
    }

    /// The slot buffer of `cid` (read data after completion, write data before submit).
    pub fn buf(&self, cid: u16) -> &[u8] {
        self.slots.get(cid as usize).map_or(&[], |s| &s.buf)
    }
    /// The slot buffer of an idle `cid`, for filling write data;
    /// `None` while the command is in flight.
    pub fn buf_mut(&mut self, cid: u16) -> Option<&mut [u8]> {
        let busy = self.cids.in_flight(cid);
        let s = self.slots.get_mut(cid as usize)?;
        (!busy).then_some(&mut s.buf[..])
    }
    /// Grows an idle slot's buffer to at least `len` bytes (admin queue).
    pub fn ensure_buf(&mut self, cid: u16, len: usize) -> Result<()> {
        let s = self
            .slots
            .get_mut(cid as usize)
            .ok_or_else(|| HostError::Invalid(format!("cid {cid} out of range")))?;
        if self.cids.in_flight(cid) {
            return Err(HostError::Invalid(format!("cid {cid} busy")));
        }
        if s.buf.len() < len {
            s.buf.resize(len, 0);
        }
        Ok(())
    }

    fn check_alive(&self) -> Result<()> {
        match &self.dead {
            Some(e) => Err(e.clone().into()),
            None => Ok(()),
        }
    }

    /// Queues a command capsule for `cid` (taken with [`QueuePair::alloc_cid`]).
    /// `len` data bytes move in direction `dir`; write data is read from the
    /// slot buffer (in-capsule when `len <= icd_max`, else on R2T).
    pub fn submit(&mut self, cid: u16, mut sqe: Sqe, dir: DataDir, len: u32) -> Result<()> {
        self.check_alive()?;
        if !self.neg.initialized {
            return Err(HostError::Invalid(
                "queue not initialized (no ICResp yet)".into(),
            ));
        }
        let slot = self
            .slots
            .get_mut(cid as usize)
            .ok_or_else(|| HostError::Invalid(format!("cid {cid} out of range")))?;
        if self.cids.in_flight(cid) {
            return Err(HostError::Invalid(format!("cid {cid} already in flight")));
        }
        let len = if dir == DataDir::None { 0 } else { len };
        if len > self.cfg.max_data || len as usize > slot.buf.len() {
            return Err(HostError::Invalid(format!(
                "data length {len} exceeds the slot buffer ({} bytes, max {})",
                slot.buf.len(),
                self.cfg.max_data
            )));
        }
        slot.start(dir, len);
        self.cids.start(cid);
        sqe.cid = cid;
        // NVMe over Fabrics requires SGLs for all commands
        // (Base 2.0, "Capsules and Data Transfer").
        sqe.flags = (sqe.flags & !0xC0) | PSDT_SGL;
        let icd = dir == DataDir::ToCtrl && len > 0 && len <= self.cfg.icd_max;
        sqe.dptr = if icd {
            slot.in_capsule = true;
            slot.xfer = len;
            SglDescriptor::in_capsule(len)
        } else {
            // Transport SGL: data by R2T/H2CData or C2HData (TCP §3.4).
            SglDescriptor::transport(len)
        };
        let (hd, dd) = (self.neg.hdgst, self.neg.ddgst);
        let data_len = if icd { len as usize } else { 0 };
        let hend = CAPSULE_CMD_HLEN + if hd { DIGEST_LEN } else { 0 };
        self.tx.begin_pdu();
        let b = self.tx.push_arena(hend);
        pdu::write_header(b, PduType::CapsuleCmd, 0, hd, dd, data_len);
        let mut sq = [0u8; SQE_SIZE];
        sqe.encode(&mut sq);
        b[CH_LEN..CAPSULE_CMD_HLEN].copy_from_slice(&sq);
        pdu::seal_header(b, PduType::CapsuleCmd, hd);
        if icd {
            self.push_data(cid, 0, len as usize);
        }
        Ok(())
    }

    fn push_data(&mut self, cid: u16, start: usize, end: usize) {
        let slot = &mut self.slots[cid as usize];
        slot.tx_refs += 1;
        self.tx.push_data(cid, start, end);
        if self.neg.ddgst {
            let d = digest::crc32c(&slot.buf[start..end]).to_le_bytes();
            self.tx.push_arena(DIGEST_LEN).copy_from_slice(&d);
        }
    }

    /// Bytes waiting to be sent.
    pub fn tx_pending(&self) -> usize {
        self.tx.pending()
    }
    /// Fills `iov` with the bytes to send, in order; returns the count used.
    pub fn tx_iovecs<'a>(&'a self, iov: &mut [IoSlice<'a>]) -> usize {
        let slots = &self.slots;
        self.tx.fill(iov, |cid| &slots[cid as usize].buf)
    }
    /// Records that `n` bytes from [`QueuePair::tx_iovecs`] were sent.
    pub fn tx_advance(&mut self, n: usize) {
        let slots = &mut self.slots;
        let done = &mut self.done;
        let cids = &mut self.cids;
        self.tx.advance(n, |cid| {
            let s = &mut slots[cid as usize];
            s.tx_refs = s.tx_refs.saturating_sub(1);
            if s.tx_refs == 0 {
                if let Some(cqe) = s.deferred.take() {
                    finish(s, cid, cqe, done, cids);
                }
            }
        });
    }

    /// Moves finished commands into `out` (appends).
    pub fn take_completions(&mut self, out: &mut Vec<Completion>) {
        out.append(&mut self.done);
    }
    /// The next finished command, if any.
    pub fn pop_completion(&mut self) -> Option<Completion> {
        if self.done.is_empty() {
            None
        } else {
            Some(self.done.remove(0))
        }
    }

    /// Where the rest of the current C2HData payload goes, when one is
    /// being received: a driver may `recv` straight into it and then call
    /// [`QueuePair::rx_direct_done`]. Not offered with data digests.
    pub fn rx_direct(&mut self) -> Option<&mut [u8]> {
        match self.rx {
            Rx::Payload { cid, pos, left } if !self.neg.ddgst && self.dead.is_none() => {
                Some(&mut self.slots[cid as usize].buf[pos..pos + left])
            }
            _ => None,
        }
    }
    /// `n` bytes were received into the slice from [`QueuePair::rx_direct`].
    pub fn rx_direct_done(&mut self, n: usize) {
        if let Rx::Payload { cid, pos, left } = self.rx {
            self.payload_advanced(cid, pos, left, n.min(left));
        }
    }
}

fn finish(s: &mut Slot, cid: u16, cqe: Cqe, done: &mut Vec<Completion>, cids: &mut Cids) {
    done.push(Completion {
        cid,
        cqe,
        dir: s.dir,
        expected: s.len,
        transferred: s.xfer,
        digest_error: s.digest_error,
    });
    s.deferred = None;
    cids.finish(cid);
}
