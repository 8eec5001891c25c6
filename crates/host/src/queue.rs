//! The sans-I/O queue-pair state machine: commands in, PDU bytes out;
//! received bytes in, completions out. No socket, no clock, no thread:
//! a driver moves the bytes ([`crate::admin`], [`crate::io_queue`]) and
//! unit tests feed it crafted PDUs.

use crate::error::{HostError, Result, TransportError};
use crate::slot::{Completion, DataDir, Slot};
use crate::tx::TxQueue;
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::digest;
use farflash_wire::pdu::{
    self, fes, flags, DataHeader, Fatal, Framing, IcReq, IcResp, Negotiated, PduType, TermReq,
    CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN, DGST_DDGST, DGST_HDGST, DIGEST_LEN, IC_HLEN,
    MIN_MAXH2CDATA, TERM_HLEN, TERM_MAX_DATA,
};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL, SQE_SIZE};
use farflash_wire::{Cqe, Sqe};
use std::io::IoSlice;

/// In-capsule data the admin queue always accepts (TCP §3.? "Admin queue
/// in-capsule data": 8 KiB, the size the Linux host uses too).
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
    free: Vec<u16>,
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
            free: (0..depth).rev().collect(),
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
        self.slots.len() as u16
    }
    /// Commands submitted and not yet reported as complete.
    pub fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }
    /// Takes a free CID, if any.
    pub fn alloc_cid(&mut self) -> Option<u16> {
        let cid = self.free.pop()?;
        self.slots[cid as usize].reserved = true;
        Some(cid)
    }
    /// Returns a CID taken with [`QueuePair::alloc_cid`] but never submitted.
    pub fn release_cid(&mut self, cid: u16) {
        if let Some(s) = self.slots.get(cid as usize) {
            if !s.busy && s.reserved {
                self.slots[cid as usize].reserved = false;
                self.free.push(cid);
            }
        }
    }

    /// The slot buffer of `cid` (read data after completion, write data before submit).
    pub fn buf(&self, cid: u16) -> &[u8] {
        self.slots.get(cid as usize).map_or(&[], |s| &s.buf)
    }
    /// The slot buffer of an idle `cid`, for filling write data;
    /// `None` while the command is in flight.
    pub fn buf_mut(&mut self, cid: u16) -> Option<&mut [u8]> {
        let s = self.slots.get_mut(cid as usize)?;
        (!s.busy).then_some(&mut s.buf[..])
    }
    /// Grows an idle slot's buffer to at least `len` bytes (admin queue).
    pub fn ensure_buf(&mut self, cid: u16, len: usize) -> Result<()> {
        let s = self
            .slots
            .get_mut(cid as usize)
            .ok_or_else(|| HostError::Invalid(format!("cid {cid} out of range")))?;
        if s.busy {
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
        if slot.busy {
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
        sqe.cid = cid;
        // Fabrics commands use SGLs (Fabrics §2.? "SGLs only").
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
        let b = self.tx.push_arena(hend);
        pdu::write_header(b, PduType::CapsuleCmd, 0, hd, dd, data_len);
        let mut sq = [0u8; SQE_SIZE];
        sqe.encode(&mut sq);
        b[CH_LEN..CAPSULE_CMD_HLEN].copy_from_slice(&sq);
        pdu::seal_header(b, PduType::CapsuleCmd, hd);
        if icd {
            self.push_data(cid, 0, len as usize);
        }
        if !std::mem::replace(&mut self.slots[cid as usize].reserved, true) {
            // Submitted without alloc_cid: take it off the free list.
            if let Some(i) = self.free.iter().rposition(|&c| c == cid) {
                self.free.swap_remove(i);
            }
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
        let free = &mut self.free;
        self.tx.advance(n, |cid| {
            let s = &mut slots[cid as usize];
            s.tx_refs = s.tx_refs.saturating_sub(1);
            if s.tx_refs == 0 {
                if let Some(cqe) = s.deferred.take() {
                    finish(s, cid, cqe, done, free);
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
            let n = n.min(left);
            self.rx = Rx::Payload {
                cid,
                pos: pos + n,
                left: left - n,
            };
            if n == left {
                self.payload_done(cid);
            }
        }
    }

    /// Consumes received bytes. On a fatal error the queue pair is dead:
    /// the error is returned now and by every later call, and an
    /// H2CTermReq is queued when the host detected the error.
    pub fn rx_feed(&mut self, mut input: &[u8]) -> Result<()> {
        self.check_alive()?;
        while !input.is_empty() {
            let n = match self.rx {
                Rx::Header => {
                    let n = (self.hdr_need - self.hdr_have).min(input.len());
                    self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&input[..n]);
                    self.hdr_have += n;
                    if self.hdr_have == self.hdr_need {
                        if let Err(e) = self.on_header_bytes() {
                            return Err(self.fail(e).into());
                        }
                    }
                    n
                }
                Rx::Pad { left } => {
                    let n = left.min(input.len());
                    self.rx = if n == left {
                        self.after_pad()
                    } else {
                        Rx::Pad { left: left - n }
                    };
                    n
                }
                Rx::Payload { cid, pos, left } => {
                    let n = left.min(input.len());
                    let s = &mut self.slots[cid as usize];
                    s.buf[pos..pos + n].copy_from_slice(&input[..n]);
                    if self.neg.ddgst {
                        self.crc = digest::crc32c_append(self.crc, &input[..n]);
                    }
                    self.rx = Rx::Payload {
                        cid,
                        pos: pos + n,
                        left: left - n,
                    };
                    if n == left {
                        self.payload_done(cid);
                    }
                    n
                }
                Rx::DataDigest { cid } => {
                    let n = (DIGEST_LEN - self.ddgst_have).min(input.len());
                    self.ddgst_buf[self.ddgst_have..self.ddgst_have + n]
                        .copy_from_slice(&input[..n]);
                    self.ddgst_have += n;
                    if self.ddgst_have == DIGEST_LEN {
                        if u32::from_le_bytes(self.ddgst_buf) != self.crc {
                            // TCP §3.6.1: a data digest error fails the command,
                            // not the connection (the Linux host does the same).
                            self.slots[cid as usize].digest_error = true;
                        }
                        self.data_pdu_done(cid);
                    }
                    n
                }
            };
            input = &input[n..];
            if let Some(e) = &self.dead {
                return Err(e.clone().into());
            }
        }
        Ok(())
    }

    /// Marks the queue dead; queues an H2CTermReq for errors the host found.
    fn fail(&mut self, e: TransportError) -> TransportError {
        if self.dead.is_none() {
            let term = match e {
                TransportError::BadPdu { fes, fei, .. } => Some(TermReq { fes, fei }),
                TransportError::HeaderDigest => Some(TermReq {
                    fes: fes::HEADER_DIGEST_ERROR,
                    fei: 0,
                }),
                _ => None,
            };
            if let (Some(t), true) = (term, self.neg.initialized) {
                let quoted = self.hdr_have.min(TERM_MAX_DATA);
                let mut b = [0u8; TERM_HLEN + TERM_MAX_DATA];
                let n = t.encode(&mut b, PduType::H2CTermReq, &self.hdr[..quoted]);
                let slots = &mut self.slots;
                // Nothing else may follow a TermReq: drop what was queued.
                self.tx.clear(|cid| {
                    let s = &mut slots[cid as usize];
                    s.tx_refs = s.tx_refs.saturating_sub(1);
                });
                self.tx.push_arena(n).copy_from_slice(&b[..n]);
            }
            self.dead = Some(e.clone());
        }
        e
    }

    /// Records that the peer closed the connection.
    pub fn closed(&mut self) -> TransportError {
        if self.dead.is_none() {
            self.dead = Some(TransportError::Closed);
        }
        self.dead.clone().unwrap_or(TransportError::Closed)
    }

    fn on_header_bytes(&mut self) -> std::result::Result<(), TransportError> {
        if self.hdr_need == CH_LEN {
            // Common header complete: learn the full header length.
            let t = self.hdr[0];
            if t == PduType::C2HTermReq as u8 {
                // Accepted in any state, even before the ICResp (TCP §3.6.2.5).
                let plen = farflash_wire::le::u32_at(&self.hdr, 4) as usize;
                if self.hdr[2] as usize != TERM_HLEN || plen < TERM_HLEN {
                    return Err(bad("C2HTermReq header", Fatal::field(2)));
                }
                self.hdr_need = TERM_HLEN;
                return Ok(());
            }
            let f = Framing::parse(&self.hdr[..CH_LEN], &self.neg, false)
                .map_err(|f| bad("common header", f))?;
            self.cur = Some(f);
            self.hdr_need = f.header_total();
            if self.hdr_need > CH_LEN {
                return Ok(());
            }
        }
        if self.hdr[0] == PduType::C2HTermReq as u8 {
            let t = TermReq::decode(&self.hdr[..TERM_HLEN]);
            return Err(TransportError::TermReq {
                fes: t.fes,
                fei: t.fei,
            });
        }
        let f = self.cur.ok_or(bad("header", Fatal::sequence()))?;
        if f.hdgst {
            let want = pdu::hdgst(&self.hdr[..f.hlen]);
            if self.hdr[f.hlen..f.hlen + DIGEST_LEN] != want {
                return Err(TransportError::HeaderDigest);
            }
        }
        match f.pdu_type {
            PduType::IcResp => self.on_icresp()?,
            PduType::CapsuleResp => self.on_capsule_resp()?,
            PduType::R2T => self.on_r2t()?,
            PduType::C2HData => return self.on_c2h_header(f),
            // Framing::parse lets only controller-to-host types through.
            _ => return Err(bad("unexpected PDU type", Fatal::field(0))),
        }
        self.next_pdu();
        Ok(())
    }

    fn next_pdu(&mut self) {
        self.rx = Rx::Header;
        self.hdr_have = 0;
        self.hdr_need = CH_LEN;
        self.cur = None;
    }

    /// TCP §3.6.2.3 plus what the Linux host checks (`nvme_tcp_init_connection`).
    fn on_icresp(&mut self) -> std::result::Result<(), TransportError> {
        let r = IcResp::decode(&self.hdr[..IC_HLEN]);
        if r.pfv != 0 {
            return Err(TransportError::BadIcResp("unsupported PFV"));
        }
        let want = if self.cfg.hdgst { DGST_HDGST } else { 0 }
            | if self.cfg.ddgst { DGST_DDGST } else { 0 };
        if r.dgst != want {
            return Err(TransportError::BadIcResp(
                "digest settings differ from the ICReq",
            ));
        }
        if r.cpda != 0 {
            // We send PDUs with data right after the header; padding for CPDA
            // is not implemented (the Linux host rejects CPDA != 0 too).
            return Err(TransportError::BadIcResp("CPDA != 0 is not supported"));
        }
        if r.maxh2cdata < MIN_MAXH2CDATA || !r.maxh2cdata.is_multiple_of(4) {
            return Err(TransportError::BadIcResp(
                "MAXH2CDATA below 4096 or not dword-aligned",
            ));
        }
        self.maxh2cdata = r.maxh2cdata;
        self.neg.initialized = true;
        Ok(())
    }

    fn busy_slot(
        &mut self,
        cid: u16,
        what: &'static str,
        fei: u32,
    ) -> std::result::Result<&mut Slot, TransportError> {
        match self.slots.get_mut(cid as usize) {
            Some(s) if s.busy && s.deferred.is_none() => Ok(s),
            _ => Err(bad(what, Fatal::field(fei))),
        }
    }

    fn on_capsule_resp(&mut self) -> std::result::Result<(), TransportError> {
        let mut c = [0u8; CQE_SIZE];
        c.copy_from_slice(&self.hdr[CH_LEN..CH_LEN + CQE_SIZE]);
        let cqe = Cqe::decode(&c);
        self.busy_slot(cqe.cid, "CapsuleResp for a CID not in flight", 20)?;
        self.complete(cqe.cid, cqe);
        Ok(())
    }

    fn complete(&mut self, cid: u16, cqe: Cqe) {
        let s = &mut self.slots[cid as usize];
        if s.tx_refs > 0 {
            // Data of this command is still queued: report once it is sent,
            // so the caller never reuses a buffer that is being transmitted.
            s.deferred = Some(cqe);
            return;
        }
        finish(s, cid, cqe, &mut self.done, &mut self.free);
    }

    /// R2T (TCP §3.6.2.10, §3.4.?): solicit `r2tl` bytes at `r2to`; answered with
    /// H2CData PDUs of at most MAXH2CDATA each, DATA_LAST on the last.
    fn on_r2t(&mut self) -> std::result::Result<(), TransportError> {
        let h = DataHeader::decode(&self.hdr[..DATA_HLEN]);
        let s = self.busy_slot(h.cccid, "R2T for a CID not in flight", 8)?;
        if s.dir != DataDir::ToCtrl || s.in_capsule {
            return Err(bad(
                "R2T for a command without solicited data",
                Fatal::field(8),
            ));
        }
        if h.length == 0 {
            return Err(bad("R2T with R2TL 0", Fatal::field(16)));
        }
        // One outstanding R2T per command (MAXR2T 0): the next must start where
        // the previous ended (the Linux host checks the same).
        if h.offset != s.xfer {
            return Err(bad("R2T offset out of sequence", Fatal::field(12)));
        }
        let end = h.offset as u64 + h.length as u64;
        if end > s.len as u64 {
            return Err(TransportError::BadPdu {
                what: "R2T beyond the command's data",
                fes: fes::DATA_TRANSFER_OUT_OF_RANGE,
                fei: 16,
            });
        }
        s.xfer = end as u32;
        let (hd, dd) = (self.neg.hdgst, self.neg.ddgst);
        let mut off = h.offset;
        let end = end as u32;
        while off < end {
            let n = (end - off).min(self.maxh2cdata);
            let last = off + n == end;
            let d = DataHeader {
                cccid: h.cccid,
                ttag: h.ttag,
                offset: off,
                length: n,
            };
            let b = self
                .tx
                .push_arena(DATA_HLEN + if hd { DIGEST_LEN } else { 0 });
            d.encode(
                b,
                PduType::H2CData,
                if last { flags::DATA_LAST } else { 0 },
                hd,
                dd,
                n as usize,
            );
            self.push_data(h.cccid, off as usize, (off + n) as usize);
            off += n;
        }
        Ok(())
    }

    /// C2HData header (TCP §3.6.2.9): data for a read, in order.
    fn on_c2h_header(&mut self, f: Framing) -> std::result::Result<(), TransportError> {
        let h = DataHeader::decode(&self.hdr[..DATA_HLEN]);
        let s = self.busy_slot(h.cccid, "C2HData for a CID not in flight", 8)?;
        if s.dir != DataDir::FromCtrl {
            return Err(bad(
                "C2HData for a command without read data",
                Fatal::field(8),
            ));
        }
        if h.length as usize != f.data_len {
            return Err(bad(
                "C2HData DATAL differs from the PDU length",
                Fatal::field(16),
            ));
        }
        if h.offset != s.xfer {
            return Err(bad("C2HData offset out of sequence", Fatal::field(12)));
        }
        if h.offset as u64 + h.length as u64 > s.len as u64 {
            return Err(TransportError::BadPdu {
                what: "C2HData beyond the command's data",
                fes: fes::DATA_TRANSFER_OUT_OF_RANGE,
                fei: 16,
            });
        }
        if f.flags & flags::DATA_SUCCESS != 0 && f.flags & flags::DATA_LAST == 0 {
            return Err(bad("C2HData SUCCESS without LAST", Fatal::field(1)));
        }
        self.crc = 0;
        self.ddgst_have = 0;
        let pad = f.data_off - f.header_total();
        self.hdr_have = 0;
        self.rx = if pad > 0 {
            Rx::Pad { left: pad }
        } else {
            self.payload_state(h.cccid, h.offset as usize, f.data_len)
        };
        Ok(())
    }

    fn payload_state(&mut self, cid: u16, pos: usize, len: usize) -> Rx {
        Rx::Payload {
            cid,
            pos,
            left: len,
        }
    }

    fn after_pad(&mut self) -> Rx {
        let h = DataHeader::decode(&self.hdr[..DATA_HLEN]);
        self.payload_state(h.cccid, h.offset as usize, h.length as usize)
    }

    fn payload_done(&mut self, cid: u16) {
        let Some(f) = self.cur else {
            self.next_pdu();
            return;
        };
        let s = &mut self.slots[cid as usize];
        s.xfer += f.data_len as u32;
        if f.ddgst {
            self.ddgst_have = 0;
            self.rx = Rx::DataDigest { cid };
        } else {
            self.data_pdu_done(cid);
        }
    }

    fn data_pdu_done(&mut self, cid: u16) {
        let fl = self.cur.map_or(0, |f| f.flags);
        if fl & flags::DATA_SUCCESS != 0 {
            // TCP §3.6.2.9: SUCCESS means no CapsuleResp follows; the command
            // completed with status 0 and DW0/DW1 = 0.
            let cqe = Cqe {
                cid,
                ..Cqe::default()
            };
            self.complete(cid, cqe);
        }
        self.next_pdu();
    }
}

fn finish(s: &mut Slot, cid: u16, cqe: Cqe, done: &mut Vec<Completion>, free: &mut Vec<u16>) {
    done.push(Completion {
        cid,
        cqe,
        dir: s.dir,
        expected: s.len,
        transferred: s.xfer,
        digest_error: s.digest_error,
    });
    s.busy = false;
    s.reserved = false;
    s.deferred = None;
    free.push(cid);
}

fn bad(what: &'static str, f: Fatal) -> TransportError {
    TransportError::BadPdu {
        what,
        fes: f.fes,
        fei: f.fei,
    }
}
