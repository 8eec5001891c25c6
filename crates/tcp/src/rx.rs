//! The receive path: cutting bytes into PDUs (TCP §3.6), ICReq, and the
//! data of CapsuleCmd and H2CData, checked against the command layer's view
//! of each command before it runs.

use crate::cmd::{Event, Phase, TcpCmd};
use crate::link::{DirectRx, RxEvent, RxState};
use crate::queue::{Queue, QueuePair, Tcp, OUTPUT_HIGH_WATER, TRANSIENT_TRANSPORT_ERROR};
use farflash_core::stats::Oddity;
use farflash_core::{Begin, Xfer};
use farflash_wire::pdu::{
    flags, DataHeader, Fatal, Framing, IcReq, IcResp, PduType, TermReq, CH_LEN, DGST_DDGST,
    DGST_HDGST, DIGEST_LEN, IC_HLEN,
};
use farflash_wire::sqe::{sgl, SQE_SIZE};
use farflash_wire::{digest, Sqe, Status};

/// H2CData payloads of at least this size are received in place (smaller
/// ones are staged with the PDUs around them: fewer reads).
const DIRECT_MIN: usize = 4096;

impl Tcp {
    /// Space to receive into: the rest of an H2CData payload being received
    /// in place, else the receive buffer (at least 16 KiB).
    pub(crate) fn rx_space<'a>(&'a mut self, q: &'a mut Queue) -> &'a mut [u8] {
        if let RxState::Data(d) = self.rx_state {
            let (at, end) = (d.at as usize, d.end as usize);
            if let Some(buf) = q.data_mut(d.slot) {
                return &mut buf[at..end];
            }
            // No buffer to fill (cannot happen while the command waits for
            // its data): the payload is read and dropped.
            let n = (end - at).min(self.rx.len());
            return &mut self.rx[..n];
        }
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        }
        if self.rx.len() - self.rx_end < 16 * 1024 {
            self.compact_rx();
            if self.rx.len() - self.rx_end < 16 * 1024 {
                let want = self.rx.len() * 2;
                self.rx.resize(want, 0);
            }
        }
        &mut self.rx[self.rx_end..]
    }

    pub(crate) fn compact_rx(&mut self) {
        if self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
    }

    /// `n` bytes were written into [`Self::rx_space`]: process every whole PDU.
    pub(crate) fn on_received(&mut self, q: &mut Queue, n: usize) {
        if let RxState::Data(d) = self.rx_state {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            if self.rx_step(RxEvent::Received(n))
                && self.rx_state == RxState::Pdus
                && !self.is_closing(q)
            {
                self.h2c_arrived(q, d.slot, d.end, true);
            }
            return;
        }
        self.rx_end = (self.rx_end + n).min(self.rx.len());
        self.process_rx(q);
    }

    pub(crate) fn process_rx(&mut self, q: &mut Queue) {
        let rx = std::mem::take(&mut self.rx);
        // Bytes of a validated PDU header's PDU that must be here at once
        // (all of it, or its header when its payload is received in place).
        let mut need = 0;
        while !self.is_closing(q) && self.out.len() < OUTPUT_HIGH_WATER {
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
                if in_place(&f) && avail.len() < f.data_off {
                    // Only its header is needed here.
                    need = f.data_off;
                    break;
                }
                if in_place(&f) {
                    // The rest of this PDU is its payload: receive it in place.
                    let (hdr, data) = avail.split_at(f.data_off);
                    self.note_oddities(&f, hdr);
                    if let Err(e) = self.start_direct(q, &f, hdr, data) {
                        self.fatal(e, &hdr[..f.hlen]);
                        break;
                    }
                    self.rx_start = self.rx_end;
                    break;
                }
                need = f.plen;
                break;
            }
            let pdu = &avail[..f.plen];
            // Once per PDU: a header is parsed again while its PDU is incomplete.
            self.note_oddities(&f, pdu);
            if let Err(e) = self.on_pdu(q, &f, pdu) {
                self.fatal(e, &pdu[..f.hlen]);
                break;
            }
            self.rx_start += f.plen;
            // What the PDUs finished goes out after the loop (`Binding::with`):
            // a completed command took its transfer state out of its slot
            // with its completion, so a new command may take the slot at once.
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

    pub(crate) fn on_pdu(&mut self, q: &mut Queue, f: &Framing, pdu: &[u8]) -> Result<(), Fatal> {
        check_hdgst(f, pdu)?;
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
                self.close();
                Ok(())
            }
            PduType::CapsuleCmd => {
                if f.data_len > self.icd_size {
                    // TCP §3.6.2.6: more in-capsule data than we advertised.
                    return Err(Fatal::limit());
                }
                let mut raw = [0u8; SQE_SIZE];
                raw.copy_from_slice(&pdu[CH_LEN..CH_LEN + SQE_SIZE]);
                self.on_capsule(q, Sqe::decode(&raw), data, ddgst_ok)
            }
            PduType::H2CData => self.on_h2c_data(q, f, pdu, data, ddgst_ok),
            // Framing::parse only lets host-to-controller types through.
            _ => Err(Fatal::field(0)),
        }
    }

    /// Counts what [`Framing::parse`] accepted although the host should
    /// not have sent it (`farflash_tolerated_total`).
    fn note_oddities(&self, f: &Framing, ch: &[u8]) {
        let pdo = ch[3];
        let fl = ch[1];
        if f.pdu_type == PduType::CapsuleCmd && f.data_len == 0 && pdo != 0 {
            self.oddity(Oddity::PdoWithoutData);
        }
        let hd = !f.hdgst && f.pdu_type.takes_hdgst() && fl & flags::HDGSTF != 0;
        let dd = !f.ddgst && f.pdu_type.takes_ddgst() && fl & flags::DDGSTF != 0;
        if hd || dd {
            self.oddity(Oddity::DigestFlag);
        }
    }

    fn oddity(&self, o: Oddity) {
        self.target.tolerated.bump(o);
    }

    /// ICReq → ICResp (TCP §3.6.2.2-3).
    pub(crate) fn on_icreq(&mut self, pdu: &[u8]) -> Result<(), Fatal> {
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

    /// A command capsule (TCP §3.6.2.6): the command layer parses and checks
    /// it; its data descriptor (SGL) and data are checked here, then it runs.
    pub(crate) fn on_capsule(
        &mut self,
        q: &mut Queue,
        sqe: Sqe,
        icd: &[u8],
        ddgst_ok: bool,
    ) -> Result<(), Fatal> {
        let (slot, xfer) = match q.begin(sqe) {
            // More commands than the queue has entries: the host broke flow control.
            Begin::Overrun => return Err(Fatal::sequence()),
            Begin::Deleted => {
                self.close();
                return Ok(());
            }
            Begin::Answered => return Ok(()),
            Begin::Ready { slot, xfer } => (slot, xfer),
        };
        if let Some(c) = q.cmd_mut(slot) {
            *c = TcpCmd::arrived(sqe.cid, xfer.len());
        }
        let dptr = sqe.dptr;
        match xfer {
            Xfer::H2C(len) => {
                // Base §4.3.2: an SGL at least as long as the data (SGLS bit
                // 18: longer ones are supported, the rest is not moved) at an
                // offset into the in-capsule data (SGLS bit 20). Was: the
                // length exactly the data's and the offset 0, while bit 20
                // was reported (Linux nvmet honours the offset).
                let start = dptr.addr.min(usize::MAX as u64) as usize;
                let in_capsule = start
                    .checked_add(len as usize)
                    .and_then(|end| icd.get(start..end));
                if dptr.length < len {
                    q.fail(slot, Status::SGL_INVALID_DATA_LENGTH.dnr());
                } else if dptr.sgl_type == sgl::IN_CAPSULE {
                    if let Some(data) = in_capsule.filter(|_| ddgst_ok) {
                        q.data_buf(slot).copy_from_slice(data);
                        self.run(q, slot, Event::Ready);
                    } else if in_capsule.is_none() && start == 0 {
                        // Less in-capsule data than the command's.
                        q.fail(slot, Status::SGL_INVALID_DATA_LENGTH.dnr());
                    } else if in_capsule.is_none() {
                        // The offset puts the data past what arrived.
                        q.fail(slot, Status::SGL_INVALID_OFFSET.dnr());
                    } else {
                        q.fail(slot, TRANSIENT_TRANSPORT_ERROR);
                    }
                } else if dptr.sgl_type == sgl::TRANSPORT && icd.is_empty() {
                    if self.has_budget(len) {
                        self.start_r2t(q, slot);
                    } else {
                        self.wait(q, slot, true);
                    }
                } else {
                    q.fail(slot, Status::SGL_INVALID_TYPE.dnr());
                }
            }
            Xfer::C2H(len) => {
                if !icd.is_empty() || dptr.sgl_type != sgl::TRANSPORT {
                    q.fail(slot, Status::SGL_INVALID_TYPE.dnr());
                } else if dptr.length < len {
                    q.fail(slot, Status::SGL_INVALID_DATA_LENGTH.dnr());
                } else if q.qid() == 0 || self.has_budget(len) {
                    self.charge(q, slot, len);
                    self.run(q, slot, Event::Ready);
                } else {
                    self.wait(q, slot, false);
                }
            }
            Xfer::None => {
                if !icd.is_empty() {
                    q.fail(slot, Status::INVALID_FIELD.dnr());
                } else {
                    self.run(q, slot, Event::Ready);
                }
            }
        }
        Ok(())
    }

    /// H2CData (TCP §3.6.2.8): data for an R2T we sent.
    pub(crate) fn on_h2c_data(
        &mut self,
        q: &mut Queue,
        f: &Framing,
        pdu: &[u8],
        data: &[u8],
        ddgst_ok: bool,
    ) -> Result<(), Fatal> {
        let (slot, got, end) = self.check_h2c(q, f, pdu)?;
        if let Some(buf) = q.data_mut(slot) {
            buf[got as usize..end as usize].copy_from_slice(data);
        }
        self.h2c_arrived(q, slot, end, ddgst_ok);
        Ok(())
    }

    /// Checks an H2CData PDU's header (`hdr`: up to its data) as
    /// [`Self::on_h2c_data`] would, stores the part of its payload already
    /// here, and receives the rest into the command's buffer.
    fn start_direct(
        &mut self,
        q: &mut Queue,
        f: &Framing,
        hdr: &[u8],
        data: &[u8],
    ) -> Result<(), Fatal> {
        check_hdgst(f, hdr)?;
        let (slot, got, end) = self.check_h2c(q, f, hdr)?;
        let at = got as usize + data.len();
        if let Some(buf) = q.data_mut(slot) {
            buf[got as usize..at].copy_from_slice(data);
        }
        self.rx_step(RxEvent::InPlace(DirectRx {
            slot,
            at: at as u32,
            end,
        }));
        Ok(())
    }

    /// The checks of an H2CData header (TCP §3.6.2.8) against the R2T it
    /// answers; returns the command's slot and where its data goes.
    fn check_h2c(&self, q: &Queue, f: &Framing, hdr: &[u8]) -> Result<(u16, u32, u32), Fatal> {
        let h = DataHeader::decode(hdr);
        // The TTAG is ours: it indexes the slot (never trust the CID for this, spdk#1546).
        let Some(c) = q.cmd(h.ttag) else {
            return Err(Fatal::field(10));
        };
        let Phase::H2C { got } = c.phase() else {
            return Err(Fatal::field(10));
        };
        if c.cid() != h.cccid {
            return Err(Fatal::field(8));
        }
        if h.length as usize != f.data_len {
            return Err(Fatal::field(16));
        }
        if h.length > self.maxh2cdata {
            return Err(Fatal::limit());
        }
        if h.offset != got || h.offset as u64 + h.length as u64 > c.len() as u64 {
            return Err(Fatal::out_of_range());
        }
        let end = got + h.length;
        // TCP §3.3.2.2: the host sets LAST_PDU on the H2CData that ends an
        // R2T's data. Where the data ends follows from DATAO and DATAL (we
        // send one R2T for all of it), so the flag is not judged, as neither
        // Linux nvmet nor SPDK does. Was: a flag at odds with the data offset
        // was a PDU Sequence Error.
        if (f.flags & flags::DATA_LAST != 0) != (end == c.len()) {
            self.oddity(Oddity::DataLast);
        }
        Ok((h.ttag, got, end))
    }

    /// An H2CData PDU's payload is in the command's buffer up to `end`; the
    /// command runs once all its data is there.
    pub(crate) fn h2c_arrived(&mut self, q: &mut Queue, slot: u16, end: u32, ddgst_ok: bool) {
        let Some(c) = q.cmd_mut(slot) else {
            return;
        };
        if !ddgst_ok {
            c.note_bad_digest();
        }
        if c.step(Event::Data { end }) && c.phase() == Phase::Exec {
            if c.bad_digest() {
                q.fail(slot, TRANSIENT_TRANSPORT_ERROR);
            } else {
                q.execute(slot);
            }
        }
    }

    /// The command in `slot` has its data in place (`ev`): it runs.
    pub(crate) fn run(&mut self, q: &mut Queue, slot: u16, ev: Event) {
        if q.cmd_mut(slot).is_some_and(|c| c.step(ev)) {
            q.execute(slot);
        }
    }

    /// The command in `slot` waits for data-buffer budget, for its R2T
    /// (`r2t`) or to run (`tx.rs` `resume_waiting` starts it).
    fn wait(&mut self, q: &mut Queue, slot: u16, r2t: bool) {
        if q.cmd_mut(slot).is_some_and(|c| c.step(Event::Wait { r2t })) {
            self.waiting.push_back(slot);
        }
    }
}

/// Whether a PDU's payload is received in place ([`DirectRx`]) once its
/// header is here: an H2CData payload of at least [`DIRECT_MIN`] bytes with
/// nothing after it (no data digest, which is checked over the whole payload
/// as staged).
fn in_place(f: &Framing) -> bool {
    f.pdu_type == PduType::H2CData
        && !f.ddgst
        && f.plen == f.data_off + f.data_len
        && f.data_len >= DIRECT_MIN
}

/// The header digest of a PDU whose header (`pdu`, at least up to its data) is here.
fn check_hdgst(f: &Framing, pdu: &[u8]) -> Result<(), Fatal> {
    if f.hdgst && pdu[f.hlen..f.hlen + DIGEST_LEN] != farflash_wire::pdu::hdgst(&pdu[..f.hlen]) {
        return Err(Fatal::hdgst());
    }
    Ok(())
}

impl QueuePair {
    /// Space to receive into (see [`Tcp::rx_space`]).
    pub fn rx_space(&mut self) -> &mut [u8] {
        let (t, q) = self.b.parts_mut();
        t.rx_space(q)
    }

    /// `n` bytes were written into [`QueuePair::rx_space`]: every whole PDU
    /// is processed, and what completed is sent.
    pub fn on_received(&mut self, n: usize) {
        self.b.with(|t, q| t.on_received(q, n));
    }
}

// Whether to read on, and the per-queue data-buffer budget: commands whose
// buffers would exceed `transport.max_queue_buffer` wait, in order, for
// earlier ones to finish (`tx.rs` `resume_waiting` starts them).
impl Tcp {
    /// Closing for either layer's reason.
    pub(crate) fn is_closing(&self, q: &Queue) -> bool {
        self.closed() || q.wants_close()
    }

    /// Whether the transport should read more (false while closing or while
    /// the peer is not draining our output).
    pub(crate) fn wants_read(&self, q: &Queue) -> bool {
        !self.is_closing(q) && self.out.len() < OUTPUT_HIGH_WATER
    }

    /// Whether a command needing `len` data-buffer bytes may start now. One
    /// command may always start, so a transfer larger than the budget still
    /// makes progress.
    pub(crate) fn has_budget(&self, len: u32) -> bool {
        let used = self.charged + self.out.held_bytes();
        used == 0
            || (self.waiting.is_empty()
                && used + len as usize <= self.target.transport.max_queue_buffer as usize)
    }

    /// Charges `len` data-buffer bytes to the command in `slot`.
    pub(crate) fn charge(&mut self, q: &mut Queue, slot: u16, len: u32) {
        if let Some(c) = q.cmd_mut(slot) {
            c.charge(len);
            self.charged += len as usize;
        }
    }

    /// TCP §3.6.2.10: allocate the buffer and ask for the data with one R2T
    /// for the whole transfer.
    pub(crate) fn start_r2t(&mut self, q: &mut Queue, slot: u16) {
        let Some(c) = q.cmd_mut(slot) else {
            return;
        };
        if !c.step(Event::R2t) {
            return;
        }
        let (cid, len) = (c.cid(), c.len());
        self.charge(q, slot, len);
        q.data_buf(slot);
        self.send_r2t(cid, slot, 0, len);
    }
}

impl QueuePair {
    /// Whether the transport should read more (false while closing or while
    /// the peer is not draining our output).
    pub fn wants_read(&self) -> bool {
        self.b.transport().wants_read(self.b.nvme())
    }
}
