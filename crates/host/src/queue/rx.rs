//! The receive side of a queue pair: cutting the byte stream into PDUs
//! (TCP §3.6.1), checking every header field and length against the
//! command it names, and turning CapsuleResp / R2T / C2HData / C2HTermReq
//! into completions, H2CData to send, or a fatal error.

use super::{finish, QueuePair, Rx};
use crate::error::{Result, TransportError};
use crate::slot::{DataDir, Slot};
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::digest;
use farflash_wire::pdu::{
    self, fes, flags, DataHeader, Fatal, Framing, IcResp, PduType, TermReq, CH_LEN, DATA_HLEN,
    DGST_DDGST, DGST_HDGST, DIGEST_LEN, IC_HLEN, MIN_MAXH2CDATA, TERM_HLEN, TERM_MAX_DATA,
};
use farflash_wire::Cqe;

impl QueuePair {
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
                    self.payload_advanced(cid, pos, left, n);
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
                // Nothing else may follow a TermReq: drop what was queued,
                // except the rest of a PDU already partly on the wire.
                self.tx.clear(|cid| {
                    let s = &mut slots[cid as usize];
                    s.tx_refs = s.tx_refs.saturating_sub(1);
                });
                self.tx.begin_pdu();
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
        let busy = self.cids.in_flight(cid);
        match self.slots.get_mut(cid as usize) {
            Some(s) if busy && s.deferred.is_none() => Ok(s),
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
        finish(s, cid, cqe, &mut self.done, &mut self.cids);
    }

    /// R2T (TCP §3.6.2.10, §3.3.2.2): solicit `r2tl` bytes at `r2to`; answered with
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
            self.tx.begin_pdu();
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

    /// `n` more bytes of `cid`'s payload are in its buffer at `pos`, of the
    /// `left` still expected; the payload ends when they were all of it.
    pub(super) fn payload_advanced(&mut self, cid: u16, pos: usize, left: usize, n: usize) {
        self.rx = Rx::Payload {
            cid,
            pos: pos + n,
            left: left - n,
        };
        if n == left {
            self.payload_done(cid);
        }
    }

    pub(super) fn payload_done(&mut self, cid: u16) {
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

fn bad(what: &'static str, f: Fatal) -> TransportError {
    TransportError::BadPdu {
        what,
        fes: f.fes,
        fei: f.fei,
    }
}
