//! The receive path: cutting bytes into PDUs (TCP §3.6) and running
//! ICReq, CapsuleCmd and H2CData.

use super::*;

impl QueuePair {
    pub(super) fn process_rx(&mut self) {
        let rx = std::mem::take(&mut self.rx);
        // PLEN of a validated PDU header whose body has not fully arrived.
        let mut need = 0;
        while !self.closing && self.out.len() < OUTPUT_HIGH_WATER {
            let avail = &rx[self.rx_start..self.rx_end];
            if avail.len() < CH_LEN {
                break;
            }
            let f = match Framing::parse(&avail[..CH_LEN], &self.neg, true) {
                Ok(f) => f,
                Err(e) => {
                    let n = avail.len().min(avail[2].max(CH_LEN as u8) as usize);
                    self.fatal(e, &avail[..n]);
                    break;
                }
            };
            if avail.len() < f.plen {
                need = f.plen;
                break;
            }
            let pdu = &avail[..f.plen];
            if let Err(e) = self.on_pdu(&f, pdu) {
                self.fatal(e, &pdu[..f.hlen]);
                break;
            }
            self.rx_start += f.plen;
        }
        self.rx = rx;
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        } else if need > self.rx.len() - self.rx_start {
            // Room for the whole PDU. PLEN was bounded by Framing::parse
            // (negotiated data limits), so this cannot be made to grow without bound.
            self.compact_rx();
            if need > self.rx.len() {
                self.rx.resize(need.next_power_of_two(), 0);
            }
        }
    }

    pub(super) fn on_pdu(&mut self, f: &Framing, pdu: &[u8]) -> Result<(), Fatal> {
        if f.hdgst {
            let want = farflash_wire::pdu::hdgst(&pdu[..f.hlen]);
            if pdu[f.hlen..f.hlen + DIGEST_LEN] != want {
                return Err(Fatal::hdgst());
            }
        }
        let data = &pdu[f.data_off..f.data_off + f.data_len];
        let ddgst_ok = !f.ddgst || {
            let at = f.data_off + f.data_len;
            digest::crc32c(data).to_le_bytes() == pdu[at..at + DIGEST_LEN]
        };
        match f.pdu_type {
            PduType::IcReq => self.on_icreq(pdu),
            PduType::H2CTermReq => {
                let t = TermReq::decode(pdu);
                tracing::warn!(peer = %self.peer, fes = t.fes, fei = t.fei, "host terminated the connection (H2CTermReq)");
                self.closing = true;
                Ok(())
            }
            PduType::CapsuleCmd => {
                if f.data_len > self.icd_size {
                    // TCP §3.6.2.6: more in-capsule data than we advertised.
                    return Err(Fatal::limit());
                }
                let mut raw = [0u8; SQE_SIZE];
                raw.copy_from_slice(&pdu[CH_LEN..CH_LEN + SQE_SIZE]);
                self.on_capsule(Sqe::decode(&raw), data, ddgst_ok)
            }
            PduType::H2CData => self.on_h2c_data(f, pdu, data, ddgst_ok),
            // Framing::parse only lets host-to-controller types through.
            _ => Err(Fatal::field(0)),
        }
    }

    /// ICReq → ICResp (TCP §3.6.2.2-3).
    pub(super) fn on_icreq(&mut self, pdu: &[u8]) -> Result<(), Fatal> {
        let r = IcReq::decode(pdu);
        if r.pfv != 0 {
            return Err(Fatal::field(8));
        }
        if r.hpda > 31 {
            return Err(Fatal::field(10));
        }
        let dgst = r.dgst & (DGST_HDGST | DGST_DDGST);
        self.neg.initialized = true;
        self.neg.hdgst = dgst & DGST_HDGST != 0;
        self.neg.ddgst = dgst & DGST_DDGST != 0;
        self.hpda_align = if r.hpda > 0 {
            (r.hpda as usize + 1) * 4
        } else {
            0
        };
        let resp = IcResp {
            pfv: 0,
            cpda: 0,
            dgst,
            maxh2cdata: self.maxh2cdata,
        };
        let mut b = [0u8; IC_HLEN];
        resp.encode(&mut b);
        self.out.extend(&b);
        Ok(())
    }

    pub(super) fn cid_test_and_set(&mut self, cid: u16) -> bool {
        let (w, b) = (cid as usize / 64, cid as usize % 64);
        let was = self.cid_busy[w] & (1 << b) != 0;
        self.cid_busy[w] |= 1 << b;
        was
    }

    pub(super) fn cid_clear(&mut self, cid: u16) {
        self.cid_busy[cid as usize / 64] &= !(1u64 << (cid % 64));
    }

    /// A host may give up an outstanding Asynchronous Event Request locally
    /// and reuse its CID (SPDK's initiator does so at detach, for the
    /// Property Get of CC). The Linux target and SPDK's accept the new
    /// command; so does this one: the parked AER is retired without a
    /// completion, since the host no longer waits for it.
    fn retire_parked_aer(&mut self, cid: u16) {
        let Some(pos) = self
            .aers
            .iter()
            .position(|&i| self.slots[i as usize].sqe.cid == cid)
        else {
            return;
        };
        let idx = self.aers.remove(pos) as usize;
        let s = &mut self.slots[idx];
        s.phase = Phase::Free;
        if let Some(b) = s.buf.take() {
            self.pool.put(b);
        }
        self.cid_clear(cid);
        self.free.push(idx as u16);
    }

    /// A command capsule (TCP §3.6.2.6): check it, collect its data, run it.
    pub(super) fn on_capsule(&mut self, sqe: Sqe, icd: &[u8], ddgst_ok: bool) -> Result<(), Fatal> {
        if self.qid != 0 {
            if let Some(c) = &self.ctrl {
                if !c.is_alive() || c.epoch() != self.epoch {
                    // A deleted I/O queue runs nothing more (Base §3.7.2).
                    self.closing = true;
                    return Ok(());
                }
            }
        }
        self.sqhd = (self.sqhd + 1) % (self.sqsize as u32 + 1) as u16;
        if self.qid == 0 {
            self.retire_parked_aer(sqe.cid);
        }
        if self.cid_test_and_set(sqe.cid) {
            // Base §4.6.1.2.1: a CID already in flight on this queue.
            self.respond(sqe.cid, Status::CID_CONFLICT.dnr(), 0);
            return Ok(());
        }
        let Some(idx) = self.free.pop() else {
            // More commands than the queue has entries: the host broke flow control.
            self.cid_clear(sqe.cid);
            return Err(Fatal::sequence());
        };
        let idx = idx as usize;
        let s = &mut self.slots[idx];
        s.sqe = sqe;
        s.phase = Phase::Exec;
        s.len = 0;
        s.io = None;
        s.pending = 0;
        s.status = Status::SUCCESS;
        s.reply = false;

        if self.target.is_shutting_down() && sqe.opcode != aop::FABRICS {
            self.finish(idx, Status::ABORT_REQUESTED, 0);
            return Ok(());
        }
        self.refresh_namespaces();
        let xfer = match self.classify(idx) {
            Ok(x) => x,
            Err(st) => {
                self.finish(idx, st, 0);
                return Ok(());
            }
        };
        let dptr = sqe.dptr;
        match xfer {
            Xfer::H2C(len) => {
                if dptr.length != len {
                    self.finish(idx, Status::SGL_INVALID_DATA_LENGTH.dnr(), 0);
                    return Ok(());
                }
                if dptr.sgl_type == sgl::IN_CAPSULE {
                    if dptr.addr != 0 {
                        self.finish(idx, Status::SGL_INVALID_OFFSET.dnr(), 0);
                    } else if icd.len() != len as usize {
                        self.finish(idx, Status::SGL_INVALID_DATA_LENGTH.dnr(), 0);
                    } else if !ddgst_ok {
                        self.finish(idx, TRANSIENT_TRANSPORT_ERROR, 0);
                    } else {
                        let mut buf = self.pool.get(len as usize);
                        buf.as_mut_slice().copy_from_slice(icd);
                        let s = &mut self.slots[idx];
                        s.buf = Some(buf);
                        s.len = len;
                        self.run(idx);
                    }
                } else if dptr.sgl_type == sgl::TRANSPORT && icd.is_empty() {
                    self.slots[idx].len = len;
                    if self.has_budget(len) {
                        self.start_r2t(idx);
                    } else {
                        self.slots[idx].phase = Phase::WaitBuf { r2t: true };
                        self.waiting.push_back(idx as u16);
                    }
                } else {
                    self.finish(idx, Status::SGL_INVALID_TYPE.dnr(), 0);
                }
            }
            Xfer::C2H(len) => {
                if !icd.is_empty() || dptr.sgl_type != sgl::TRANSPORT {
                    self.finish(idx, Status::SGL_INVALID_TYPE.dnr(), 0);
                } else if dptr.length < len {
                    self.finish(idx, Status::SGL_INVALID_DATA_LENGTH.dnr(), 0);
                } else {
                    self.slots[idx].len = len;
                    if self.qid == 0 || self.has_budget(len) {
                        self.charge(idx, len);
                        self.run(idx);
                    } else {
                        self.slots[idx].phase = Phase::WaitBuf { r2t: false };
                        self.waiting.push_back(idx as u16);
                    }
                }
            }
            Xfer::None => {
                if !icd.is_empty() {
                    self.finish(idx, Status::INVALID_FIELD.dnr(), 0);
                } else {
                    self.run(idx);
                }
            }
        }
        Ok(())
    }

    /// What data the command in `idx` moves, after checking it can run here.
    pub(super) fn classify(&mut self, idx: usize) -> Result<Xfer, Status> {
        let sqe = self.slots[idx].sqe;
        if sqe.flags & 0xC0 == 0 && sqe.opcode != aop::FABRICS {
            // Fabrics §2.? : commands must use SGLs (PSDT 01b or 10b).
            return Err(Status::INVALID_FIELD.dnr());
        }
        if sqe.opcode == aop::FABRICS {
            return fabrics::classify(self, &sqe);
        }
        if self.ctrl.is_none() {
            // Nothing but Connect before the queue is connected (Fabrics §3.?).
            return Err(Status::COMMAND_SEQUENCE_ERROR.dnr());
        }
        if self.qid == 0 {
            admin::classify(self, &sqe)
        } else {
            let (x, cmd) = io::classify(self, &sqe)?;
            self.slots[idx].io = Some(cmd);
            Ok(x)
        }
    }

    pub(super) fn run(&mut self, idx: usize) {
        let sqe = self.slots[idx].sqe;
        let outcome = if sqe.opcode == aop::FABRICS {
            fabrics::execute(self, idx)
        } else if let Some(cmd) = self.slots[idx].io {
            io::execute(self, idx, cmd)
        } else if self.qid == 0 {
            admin::execute(self, idx)
        } else {
            Outcome::Done(Status::INVALID_OPCODE.dnr(), 0)
        };
        match outcome {
            Outcome::Done(st, dw0) => self.finish(idx, st, dw0),
            Outcome::Pending | Outcome::Parked => {}
        }
    }

    /// H2CData (TCP §3.6.2.8): data for an R2T we sent.
    pub(super) fn on_h2c_data(
        &mut self,
        f: &Framing,
        pdu: &[u8],
        data: &[u8],
        ddgst_ok: bool,
    ) -> Result<(), Fatal> {
        let h = DataHeader::decode(pdu);
        // The TTAG is ours: it indexes the slot (never trust the CID for this, spdk#1546).
        let idx = h.ttag as usize;
        let Some(s) = self.slots.get(idx) else {
            return Err(Fatal::field(10));
        };
        let Phase::H2C { got } = s.phase else {
            return Err(Fatal::field(10));
        };
        if s.sqe.cid != h.cccid {
            return Err(Fatal::field(8));
        }
        if h.length as usize != f.data_len {
            return Err(Fatal::field(16));
        }
        if h.length > self.maxh2cdata {
            return Err(Fatal::limit());
        }
        if h.offset != got || h.offset as u64 + h.length as u64 > s.len as u64 {
            return Err(Fatal::out_of_range());
        }
        let end = got + h.length;
        let last = f.flags & flags::DATA_LAST != 0;
        if last != (end == s.len) {
            // DATA_LAST must mark exactly the PDU that ends the R2T's data.
            return Err(Fatal::sequence());
        }
        let s = &mut self.slots[idx];
        if let Some(buf) = s.buf.as_mut() {
            buf.as_mut_slice()[got as usize..end as usize].copy_from_slice(data);
        }
        if !ddgst_ok {
            s.status = TRANSIENT_TRANSPORT_ERROR;
        }
        s.phase = Phase::H2C { got: end };
        if end == s.len {
            s.phase = Phase::Exec;
            if s.status.is_success() {
                self.run(idx);
            } else {
                let st = s.status;
                self.finish(idx, st, 0);
            }
        }
        Ok(())
    }
}
