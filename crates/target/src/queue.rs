//! One NVMe/TCP connection = one queue pair, as a sans-I/O state machine.
//!
//! The transport reads socket bytes into [`QueuePair::rx_space`] and calls
//! [`QueuePair::on_received`]; the queue cuts them into PDUs (TCP §3.6),
//! runs the commands, and leaves PDUs to send in [`QueuePair::output`].
//! Backend completions come in through [`QueuePair::poll_backends`]. Nothing
//! here touches a socket, so every path can be driven from a unit test.

use crate::controller::Controller;
use crate::nstable::NsTable;
use crate::outq::OutQueue;
use crate::stats::QueueStats;
use crate::target::Target;
use crate::{admin, fabrics, io};
use farflash_backend::{BufPool, IoBuf, IoCompletion, IoRequest};
use farflash_wire::cqe::{Cqe, CQE_SIZE};
use farflash_wire::log::ErrorEntry;
use farflash_wire::opcode::admin as aop;
use farflash_wire::pdu::{
    flags, write_header, DataHeader, Fatal, Framing, IcReq, IcResp, Negotiated, PduType, TermReq,
    CH_LEN, DGST_DDGST, DGST_HDGST, DIGEST_LEN, IC_HLEN,
};
use farflash_wire::sqe::{sgl, SQE_SIZE};
use farflash_wire::{digest, Sqe, Status};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// In-capsule data the admin queue accepts: the Linux host sends up to 8 KiB
/// there whatever IOCCSZ says (host/tcp.c NVME_TCP_ADMIN_CCSZ).
pub const ADMIN_ICD: usize = 8192;
/// Slots before Connect tells the queue size.
const PRE_CONNECT_SLOTS: usize = 4;
/// A peer that has not completed ICReq and Connect by then is dropped.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack added to KATO before a controller is declared dead.
const KEEP_ALIVE_GRACE: Duration = Duration::from_secs(1);
/// Output beyond this stops reading new PDUs until the peer drains it.
const OUTPUT_HIGH_WATER: usize = 4 << 20;
/// Transient Transport Error (Base §4.6.1.2.1, 22h): a data digest mismatch.
pub const TRANSIENT_TRANSPORT_ERROR: Status = Status::new(0, 0x22);

/// Where a command's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Xfer {
    None,
    /// Host to controller, this many bytes.
    H2C(u32),
    /// Controller to host, at most this many bytes.
    C2H(u32),
}

/// What running a command did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Send the completion now (with the slot's reply data, if any).
    Done(Status, u32),
    /// Backend requests are in flight; they complete the command.
    Pending,
    /// Held until an event (AER).
    Parked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Free,
    /// Waiting for H2CData after an R2T; `got` bytes so far.
    H2C {
        got: u32,
    },
    Exec,
    /// Waiting for data-buffer budget before its R2T (`r2t`) or its execution.
    WaitBuf {
        r2t: bool,
    },
}

pub(crate) struct Slot {
    pub sqe: Sqe,
    phase: Phase,
    pub buf: Option<IoBuf>,
    /// Data bytes: expected (H2C) or to send (C2H reply).
    pub len: u32,
    pub ns_idx: usize,
    /// Backend requests still in flight.
    pub pending: u16,
    pub status: Status,
    /// Send `buf[..len]` to the host before the response.
    pub reply: bool,
    /// Data-buffer bytes charged to this command's budget.
    charged: u32,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            sqe: Sqe::default(),
            phase: Phase::Free,
            buf: None,
            len: 0,
            ns_idx: 0,
            pending: 0,
            status: Status::SUCCESS,
            reply: false,
            charged: 0,
        }
    }
}

pub struct QueuePair {
    pub(crate) target: Arc<Target>,
    /// The listener address the host reached (for the discovery log).
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    neg: Negotiated,
    /// Alignment of C2HData PDO required by the host (HPDA), 0 = none.
    hpda_align: usize,
    icd_size: usize,
    maxh2cdata: u32,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    out: OutQueue,
    closing: bool,
    started: Instant,
    pub(crate) qid: u16,
    pub(crate) ctrl: Option<Arc<Controller>>,
    pub(crate) sqsize: u16,
    sq_flow_control: bool,
    sqhd: u16,
    pub(crate) slots: Vec<Slot>,
    free: Vec<u16>,
    cid_busy: Vec<u64>,
    /// The subsystem's namespaces as this queue sees them, with backend queues.
    pub(crate) ns: NsTable,
    pub(crate) pool: BufPool,
    completions: Vec<IoCompletion>,
    pub(crate) stats: Option<Arc<QueueStats>>,
    /// Admin queue: when the last Keep Alive arrived.
    pub(crate) last_keep_alive: Instant,
    /// Admin queue: slots holding parked AERs.
    pub(crate) aers: Vec<u16>,
    in_flight: usize,
    /// The controller's reset epoch when this I/O queue connected.
    epoch: u32,
    /// Data-buffer bytes charged to commands in flight (reads' data waiting
    /// in the output queue is counted there).
    charged: usize,
    /// Commands waiting for data-buffer budget, oldest first.
    waiting: std::collections::VecDeque<u16>,
    /// A C2HTermReq went out: nothing may follow it (TCP §3.6.2.5); commands
    /// still finish internally so their buffers and backend I/O drain.
    term_sent: bool,
    /// CQE DW1 of the next response (8-byte Property Get).
    pub(crate) respond_dw1: u32,
}

impl QueuePair {
    pub fn new(target: Arc<Target>, local: SocketAddr, peer: SocketAddr) -> QueuePair {
        let maxh2cdata = target.transport.max_h2c_data;
        let now = Instant::now();
        let mut q = QueuePair {
            target,
            local,
            peer,
            neg: Negotiated::default(),
            hpda_align: 0,
            icd_size: ADMIN_ICD,
            maxh2cdata,
            rx: vec![0; 16 * 1024],
            rx_start: 0,
            rx_end: 0,
            out: OutQueue::default(),
            closing: false,
            started: now,
            qid: 0,
            ctrl: None,
            sqsize: PRE_CONNECT_SLOTS as u16 - 1,
            sq_flow_control: true,
            sqhd: 0,
            slots: Vec::new(),
            free: Vec::new(),
            cid_busy: vec![0; 1024],
            ns: NsTable::default(),
            pool: BufPool::new(),
            completions: Vec::new(),
            stats: None,
            last_keep_alive: now,
            aers: Vec::new(),
            in_flight: 0,
            epoch: 0,
            charged: 0,
            waiting: std::collections::VecDeque::new(),
            term_sent: false,
            respond_dw1: 0,
        };
        q.resize_slots(PRE_CONNECT_SLOTS);
        q.neg.max_data = (ADMIN_ICD as u32).max(maxh2cdata);
        q
    }

    pub(crate) fn resize_slots(&mut self, n: usize) {
        self.slots = (0..n).map(|_| Slot::empty()).collect();
        self.free = (0..n as u16).rev().collect();
    }

    // ----- transport interface -------------------------------------------------

    /// Space to receive into; at least 16 KiB.
    pub fn rx_space(&mut self) -> &mut [u8] {
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

    fn compact_rx(&mut self) {
        if self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
    }

    /// `n` bytes were written into [`Self::rx_space`]: process every whole PDU.
    pub fn on_received(&mut self, n: usize) {
        self.rx_end = (self.rx_end + n).min(self.rx.len());
        self.process_rx();
    }

    /// Whether the transport should read more (false while closing or while
    /// the peer is not draining our output).
    pub fn wants_read(&self) -> bool {
        !self.closing && self.out.len() < OUTPUT_HIGH_WATER
    }

    /// Bytes waiting to be sent.
    pub fn output_len(&self) -> usize {
        self.out.len()
    }

    /// Fills `iov` with what is waiting to be sent (for one `writev`);
    /// returns how many slices were filled.
    pub fn output_slices<'a>(&'a self, iov: &mut [std::io::IoSlice<'a>]) -> usize {
        self.out.slices(iov)
    }

    /// `n` bytes of the output were sent.
    pub fn consume_output(&mut self, n: usize) {
        self.out.consume(n, &mut self.pool);
        if !self.waiting.is_empty() {
            self.resume_waiting();
        }
        // Reading may have stopped at the high-water mark.
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
    }

    /// Everything waiting to be sent, as one buffer, consumed (tests, fuzzers).
    pub fn take_output(&mut self) -> Vec<u8> {
        let v = self.out.take_all(&mut self.pool);
        if !self.waiting.is_empty() {
            self.resume_waiting();
        }
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
        v
    }

    /// True once the connection should be closed (after its output is sent).
    pub fn wants_close(&self) -> bool {
        self.closing
    }

    /// True when closing and nothing more needs to go out or come back.
    pub fn finished(&self) -> bool {
        self.closing && self.out.is_empty() && self.in_flight == 0
    }

    /// File descriptors to watch for backend completions.
    pub fn notify_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.ns.notify_fds()
    }

    /// Backend requests in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Hands queued backend requests to the kernel (one call per batch).
    pub fn commit(&mut self) {
        for e in self.ns.commit() {
            tracing::warn!(peer = %self.peer, "backend submit failed: {e}");
        }
    }

    /// Reaps backend completions and turns them into responses. Returns
    /// whether anything completed.
    pub fn poll_backends(&mut self) -> bool {
        let mut any = false;
        // Completing a command can start others (budget freed, waiting
        // commands resumed); synchronous backends finish those at once.
        while self.in_flight > 0 {
            let mut comps = std::mem::take(&mut self.completions);
            self.ns.reap(&mut comps);
            if comps.is_empty() {
                self.completions = comps;
                break;
            }
            any = true;
            for c in comps.drain(..) {
                self.in_flight -= 1;
                self.on_backend_completion(c);
            }
            self.completions = comps;
            self.commit();
        }
        any
    }

    /// Periodic work: keep-alive expiry, AER delivery, teardown, timeouts.
    pub fn tick(&mut self, now: Instant) {
        if self.closing {
            return;
        }
        let Some(ctrl) = self.ctrl.clone() else {
            if now.duration_since(self.started) > CONNECT_TIMEOUT {
                tracing::info!(peer = %self.peer, "no ICReq and Connect within {CONNECT_TIMEOUT:?}; closing");
                self.closing = true;
            }
            return;
        };
        if !ctrl.is_alive() || (self.qid != 0 && ctrl.epoch() != self.epoch) {
            // The association ended, or a controller reset deleted this I/O queue.
            self.closing = true;
            return;
        }
        if self.qid == 0 {
            let kato = ctrl.lock().kato_ms;
            // Base §3.9: no Keep Alive within KATO ends the association. A
            // little grace absorbs a slow host's timer jitter.
            let limit = Duration::from_millis(kato as u64) + KEEP_ALIVE_GRACE;
            if kato > 0 && now.duration_since(self.last_keep_alive) > limit {
                tracing::warn!(peer = %self.peer, cntlid = ctrl.cntlid, "keep-alive timeout ({kato} ms); tearing the controller down");
                self.target.remove_controller(&ctrl);
                self.closing = true;
                return;
            }
            admin::deliver_events(self);
        }
        if self.target.is_shutting_down() && self.in_flight == 0 {
            self.closing = true;
        }
    }

    /// Stops reading; what is queued is still sent.
    pub fn close(&mut self) {
        self.closing = true;
    }

    // ----- receive path -------------------------------------------------------

    fn process_rx(&mut self) {
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

    fn on_pdu(&mut self, f: &Framing, pdu: &[u8]) -> Result<(), Fatal> {
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
    fn on_icreq(&mut self, pdu: &[u8]) -> Result<(), Fatal> {
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

    fn cid_test_and_set(&mut self, cid: u16) -> bool {
        let (w, b) = (cid as usize / 64, cid as usize % 64);
        let was = self.cid_busy[w] & (1 << b) != 0;
        self.cid_busy[w] |= 1 << b;
        was
    }

    fn cid_clear(&mut self, cid: u16) {
        self.cid_busy[cid as usize / 64] &= !(1u64 << (cid % 64));
    }

    /// A command capsule (TCP §3.6.2.6): check it, collect its data, run it.
    fn on_capsule(&mut self, sqe: Sqe, icd: &[u8], ddgst_ok: bool) -> Result<(), Fatal> {
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
        s.ns_idx = 0;
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
    fn classify(&mut self, idx: usize) -> Result<Xfer, Status> {
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
            let (x, ns_idx) = io::classify(self, &sqe)?;
            self.slots[idx].ns_idx = ns_idx;
            Ok(x)
        }
    }

    fn run(&mut self, idx: usize) {
        let sqe = self.slots[idx].sqe;
        let outcome = if sqe.opcode == aop::FABRICS {
            fabrics::execute(self, idx)
        } else if self.qid == 0 {
            admin::execute(self, idx)
        } else {
            io::execute(self, idx)
        };
        match outcome {
            Outcome::Done(st, dw0) => self.finish(idx, st, dw0),
            Outcome::Pending | Outcome::Parked => {}
        }
    }

    /// H2CData (TCP §3.6.2.8): data for an R2T we sent.
    fn on_h2c_data(
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

    // ----- backend ------------------------------------------------------------

    /// Submits a backend request for the command in `idx` on namespace `ns_idx`.
    pub(crate) fn submit(
        &mut self,
        idx: usize,
        ns_idx: usize,
        req: IoRequest,
    ) -> Result<(), Status> {
        let depth = self.slots.len() as u32;
        match self.ns.queue(ns_idx, depth) {
            Ok(q) => {
                q.submit(req);
                self.slots[idx].pending += 1;
                self.in_flight += 1;
                Ok(())
            }
            Err(e) => {
                // ENODEV: the namespace went away after the command was classified.
                let st = if e.raw_os_error() == Some(libc::ENODEV) {
                    Status::INVALID_NAMESPACE.dnr()
                } else {
                    tracing::error!("cannot open backend queue: {e}");
                    Status::INTERNAL_ERROR
                };
                self.pool.put(req.buf);
                Err(st)
            }
        }
    }

    fn on_backend_completion(&mut self, c: IoCompletion) {
        let idx = c.tag as usize;
        let Some(s) = self.slots.get_mut(idx) else {
            self.pool.put(c.buf);
            return;
        };
        if let Err(e) = &c.result {
            let write = matches!(
                s.sqe.opcode,
                farflash_wire::opcode::io::WRITE | farflash_wire::opcode::io::WRITE_ZEROES
            );
            tracing::warn!(
                cid = s.sqe.cid,
                opcode = s.sqe.opcode,
                "backend I/O failed: {e}"
            );
            s.status = match e.raw_os_error() {
                Some(libc::ENOSPC) => Status::CAPACITY_EXCEEDED,
                Some(libc::EIO) if write => Status::WRITE_FAULT,
                Some(libc::EIO) => Status::UNRECOVERED_READ_ERROR,
                _ => Status::INTERNAL_ERROR,
            };
            if let Some(st) = &self.stats {
                QueueStats::bump(&st.media_errors, 1);
            }
        }
        // Keep the buffer that carries a read's data; recycle the others.
        if s.reply && s.buf.is_none() {
            s.buf = Some(c.buf);
        } else {
            self.pool.put(c.buf);
        }
        let s = &mut self.slots[idx];
        s.pending = s.pending.saturating_sub(1);
        if s.pending == 0 {
            let st = s.status;
            io::account(self, idx);
            self.finish(idx, st, 0);
        }
    }

    // ----- transmit path ------------------------------------------------------

    /// Completes the command in `idx`: reply data (if any and successful) as
    /// C2HData PDUs, then the CapsuleResp; frees the slot.
    pub(crate) fn finish(&mut self, idx: usize, status: Status, dw0: u32) {
        let (cid, reply, len, sqe) = {
            let s = &self.slots[idx];
            (s.sqe.cid, s.reply, s.len, s.sqe)
        };
        if status.is_success() && reply && len > 0 {
            if let Some(buf) = self.slots[idx].buf.take() {
                self.send_c2h(cid, buf, len as usize);
            }
        }
        if !status.is_success() {
            if let Some(c) = &self.ctrl {
                c.record_error(ErrorEntry {
                    sqid: self.qid,
                    cid,
                    status: status.to_cqe_field(false),
                    nsid: sqe.nsid,
                    trtype: farflash_wire::discovery::TRTYPE_TCP,
                    ..ErrorEntry::default()
                });
            }
        }
        self.respond(cid, status, dw0);
        let s = &mut self.slots[idx];
        if let Some(b) = s.buf.take() {
            self.pool.put(b);
        }
        s.phase = Phase::Free;
        self.charged -= s.charged as usize;
        s.charged = 0;
        self.cid_clear(cid);
        self.free.push(idx as u16);
        self.resume_waiting();
    }

    // ----- data-buffer budget ---------------------------------------------------

    /// Whether a command needing `len` data-buffer bytes may start now. One
    /// command may always start, so a transfer larger than the budget still
    /// makes progress.
    fn has_budget(&self, len: u32) -> bool {
        let used = self.charged + self.out.held_bytes();
        used == 0
            || (self.waiting.is_empty()
                && used + len as usize <= self.target.transport.max_queue_buffer as usize)
    }

    fn charge(&mut self, idx: usize, len: u32) {
        self.slots[idx].charged += len;
        self.charged += len as usize;
    }

    /// TCP §3.6.2.10: allocate the buffer and ask for the data with one R2T
    /// for the whole transfer.
    fn start_r2t(&mut self, idx: usize) {
        let len = self.slots[idx].len;
        self.charge(idx, len);
        let buf = self.pool.get(len as usize);
        let s = &mut self.slots[idx];
        s.buf = Some(buf);
        s.phase = Phase::H2C { got: 0 };
        let cid = s.sqe.cid;
        self.send_r2t(cid, idx as u16, 0, len);
    }

    /// Starts waiting commands, oldest first, while the budget allows.
    fn resume_waiting(&mut self) {
        while let Some(&i) = self.waiting.front() {
            let idx = i as usize;
            let len = self.slots[idx].len;
            let used = self.charged + self.out.held_bytes();
            if used != 0 && used + len as usize > self.target.transport.max_queue_buffer as usize {
                break;
            }
            self.waiting.pop_front();
            match self.slots[idx].phase {
                Phase::WaitBuf { r2t: true } => self.start_r2t(idx),
                Phase::WaitBuf { r2t: false } => {
                    self.slots[idx].phase = Phase::Exec;
                    self.charge(idx, len);
                    self.run(idx);
                }
                _ => {}
            }
        }
    }

    /// Sends a CapsuleResp (TCP §3.6.2.7).
    pub(crate) fn respond(&mut self, cid: u16, status: Status, dw0: u32) {
        if self.term_sent {
            return;
        }
        let cqe = Cqe {
            dw0,
            dw1: std::mem::take(&mut self.respond_dw1),
            // Fabrics §? : SQHD is FFFFh when SQ flow control is disabled.
            sqhd: if self.sq_flow_control {
                self.sqhd
            } else {
                0xFFFF
            },
            sqid: self.qid,
            cid,
            status,
        };
        let hd = self.neg.hdgst;
        let b = self
            .out
            .append(CH_LEN + CQE_SIZE + if hd { DIGEST_LEN } else { 0 });
        write_header(b, PduType::CapsuleResp, 0, hd, false, 0);
        let mut raw = [0u8; CQE_SIZE];
        cqe.encode(&mut raw);
        b[CH_LEN..CH_LEN + CQE_SIZE].copy_from_slice(&raw);
        farflash_wire::pdu::seal_header(b, PduType::CapsuleResp, hd);
    }

    fn send_r2t(&mut self, cid: u16, ttag: u16, offset: u32, len: u32) {
        if self.term_sent {
            return;
        }
        let hd = self.neg.hdgst;
        let b = self.out.append(24 + if hd { DIGEST_LEN } else { 0 });
        DataHeader {
            cccid: cid,
            ttag,
            offset,
            length: len,
        }
        .encode(b, PduType::R2T, 0, hd, false, 0);
    }

    /// Sends `buf[..len]` as C2HData PDUs of at most max_c2h_data bytes
    /// (TCP §3.6.2.9). The data is not copied: the output queue holds the
    /// buffer until the socket has taken it.
    fn send_c2h(&mut self, cid: u16, buf: IoBuf, len: usize) {
        if self.term_sent {
            self.pool.put(buf);
            return;
        }
        let chunk = self.target.transport.max_c2h_data as usize;
        let (hd, dd) = (self.neg.hdgst, self.neg.ddgst);
        let hend = 24 + if hd { DIGEST_LEN } else { 0 };
        // PDO honours the host's HPDA (TCP §3.6.2.9); padding bytes are zero.
        let pdo = if self.hpda_align > 0 {
            hend.div_ceil(self.hpda_align) * self.hpda_align
        } else {
            hend
        };
        let pieces = len.div_ceil(chunk) as u32;
        let held = self.out.hold(buf, pieces);
        let mut off = 0;
        while off < len {
            let n = chunk.min(len - off);
            let last = off + n == len;
            let total = pdo + n + if dd { DIGEST_LEN } else { 0 };
            let b = self.out.append(pdo);
            let fl = if last { flags::DATA_LAST } else { 0 };
            DataHeader {
                cccid: cid,
                ttag: 0,
                offset: off as u32,
                length: n as u32,
            }
            .encode(b, PduType::C2HData, fl, hd, dd, n);
            if pdo != hend {
                b[3] = pdo as u8;
                farflash_wire::le::put_u32(b, 4, total as u32);
                farflash_wire::pdu::seal_header(b, PduType::C2HData, hd);
            }
            self.out.push_data(held, off, off + n);
            if dd {
                let d = digest::crc32c(self.out.held(held, off, off + n));
                self.out.extend(&d.to_le_bytes());
            }
            off += n;
        }
    }

    /// Sends a C2HTermReq and closes (TCP §3.6.2.5).
    fn fatal(&mut self, e: Fatal, bad_header: &[u8]) {
        tracing::warn!(peer = %self.peer, fes = e.fes, fei = e.fei, "fatal transport error; sending C2HTermReq");
        let mut b = [0u8; 24 + 128];
        let n = TermReq {
            fes: e.fes,
            fei: e.fei,
        }
        .encode(&mut b, PduType::C2HTermReq, bad_header);
        if !self.term_sent {
            self.out.extend(&b[..n]);
        }
        self.term_sent = true;
        self.closing = true;
    }

    // ----- helpers for the executors -------------------------------------------

    /// A zeroed reply buffer of `len` bytes for the command in `idx`; the
    /// executor fills it, and `finish` sends `min(len, transfer length)`.
    pub(crate) fn reply_buf(&mut self, idx: usize, len: usize) -> &mut [u8] {
        let want = self.slots[idx].len as usize;
        let mut buf = self.pool.get(len.max(want));
        buf.as_mut_slice().fill(0);
        let s = &mut self.slots[idx];
        s.len = want.min(len) as u32;
        s.reply = true;
        s.buf = Some(buf);
        match s.buf.as_mut() {
            Some(b) => &mut b.as_mut_slice()[..len],
            None => &mut [],
        }
    }

    pub(crate) fn set_connected(
        &mut self,
        ctrl: Arc<Controller>,
        qid: u16,
        sqsize: u16,
        disable_sq_flow: bool,
        icd: usize,
    ) {
        self.qid = qid;
        self.sqsize = sqsize;
        self.sq_flow_control = !disable_sq_flow;
        self.icd_size = icd;
        self.neg.max_data = (icd as u32).max(self.maxh2cdata);
        self.sqhd = 1 % (sqsize as u32 + 1) as u16;
        self.epoch = ctrl.epoch();
        if let Some(sub) = ctrl.subsystem() {
            self.ns.load(&sub.namespaces(), sub.generation());
            self.stats = Some(sub.stats.register());
        }
        self.ctrl = Some(ctrl);
        self.last_keep_alive = Instant::now();
    }

    /// Grows the slot table to the connected queue's size; the Connect
    /// command's slot (index `keep`) stays where it is.
    pub(crate) fn grow_slots(&mut self, n: usize) {
        let old = self.slots.len();
        if n > old {
            self.slots.extend((old..n).map(|_| Slot::empty()));
            self.free.extend((old as u16..n as u16).rev());
        }
    }

    pub(crate) fn namespace_index(&self, nsid: u32) -> Option<usize> {
        self.ns.key(nsid)
    }

    /// Picks up namespace changes of the subsystem (a reload) between commands.
    fn refresh_namespaces(&mut self) {
        if let Some(sub) = self.ctrl.as_ref().and_then(|c| c.subsystem()) {
            let g = sub.generation();
            if g != self.ns.generation() {
                let list = sub.namespaces();
                self.ns.load(&list, g);
            }
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if let Some(st) = &self.stats {
            if let Some(sub) = self.ctrl.as_ref().and_then(|c| c.subsystem()) {
                sub.stats.retire(st);
            }
        }
        if let Some(c) = &self.ctrl {
            if self.qid == 0 {
                // The admin queue carries the association (Fabrics §3.?).
                tracing::info!(cntlid = c.cntlid, peer = %self.peer, local = %self.local, "controller association ended");
                self.target.remove_controller(c);
            } else if c.epoch() == self.epoch {
                // After a reset the QID may belong to a newer queue: leave it.
                let mut st = c.lock();
                st.io_qids.retain(|&q| q != self.qid);
            }
        }
    }
}
