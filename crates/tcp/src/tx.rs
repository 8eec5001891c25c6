//! The transmit path: completions as C2HData + CapsuleResp, R2T,
//! C2HTermReq; what the binding driver calls after every command
//! ([`Transport`]); commands waiting for data-buffer budget started as
//! output drains; and the output queue the event loop's `writev` takes.

use crate::cmd::{Event, Phase, TcpCmd};
use crate::queue::{Queue, QueuePair, Tcp, ADMIN_ICD};
use farflash_backend::IoBuf;
use farflash_core::{Completion, Connected, Transport};
use farflash_wire::cqe::{Cqe, CQE_SIZE};
use farflash_wire::digest;
use farflash_wire::pdu::{
    flags, write_header, DataHeader, Fatal, PduType, TermReq, CH_LEN, DIGEST_LEN,
};

impl QueuePair {
    /// Bytes waiting to be sent.
    pub fn output_len(&self) -> usize {
        self.b.transport().out.len()
    }

    /// How many `iovec`s the waiting output takes.
    pub fn output_segments(&self) -> usize {
        self.b.transport().out.segments()
    }

    /// Fills `iov` with what is waiting to be sent (for one `writev`);
    /// returns how many slices were filled.
    pub fn output_slices<'a>(&'a self, iov: &mut [std::io::IoSlice<'a>]) -> usize {
        self.b.transport().out.slices(iov)
    }

    /// `n` bytes of the output were sent.
    pub fn consume_output(&mut self, n: usize) {
        self.b.with(|t, q| {
            t.out.consume(n, q.pool());
            t.after_output(q);
        });
    }

    /// Everything waiting to be sent, as one buffer, consumed (tests, fuzzers).
    pub fn take_output(&mut self) -> Vec<u8> {
        self.b.with(|t, q| {
            let v = t.out.take_all(q.pool());
            t.after_output(q);
            v
        })
    }
}

impl Tcp {
    /// Output went out: commands waiting for the buffer budget it held may
    /// start, and reading may go on past the high-water mark.
    fn after_output(&mut self, q: &mut Queue) {
        if !self.waiting.is_empty() {
            self.resume_waiting(q);
        }
        if self.rx_end > self.rx_start && self.wants_read(q) {
            self.process_rx(q);
        }
    }

    /// One completion: reply data (if any) as C2HData PDUs, then the
    /// CapsuleResp. When the host disabled SQ flow control, a successful
    /// data transfer whose CQE would carry nothing but the CID ends with a
    /// SUCCESS C2HData instead of a CapsuleResp (TCP §3.6.2.9 / Fabrics §6.3
    /// CATTR: SQHD is not needed).
    pub(crate) fn send_completion(&mut self, q: &mut Queue, c: Completion<TcpCmd>, cqe: Cqe) {
        // Its transfer state left its slot with it: its budget is free.
        self.charged -= c.cmd.charged() as usize;
        let mut responded = false;
        if let Some((buf, len)) = c.data {
            let success = !q.sq_flow_control() && c.result == 0;
            self.send_c2h(q, c.cid, buf, len as usize, success);
            responded = success;
        }
        if !responded {
            self.respond(&cqe);
        }
    }

    /// Sends a CapsuleResp (TCP §3.6.2.7) carrying `cqe`.
    pub(crate) fn respond(&mut self, cqe: &Cqe) {
        if self.terminated() {
            return;
        }
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

    pub(crate) fn send_r2t(&mut self, cid: u16, ttag: u16, offset: u32, len: u32) {
        if self.terminated() {
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
    /// (TCP §3.6.2.9); `success` sets SUCCESS on the last one (no
    /// CapsuleResp follows). The data is not copied: the output queue holds
    /// the buffer until the socket has taken it.
    pub(crate) fn send_c2h(
        &mut self,
        q: &mut Queue,
        cid: u16,
        buf: IoBuf,
        len: usize,
        success: bool,
    ) {
        if self.terminated() {
            q.pool().put(buf);
            return;
        }
        let chunk = self.target.transport.data.max_c2h_data as usize;
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
            let fl = match (last, success) {
                (true, true) => flags::DATA_LAST | flags::DATA_SUCCESS,
                (true, false) => flags::DATA_LAST,
                (false, _) => 0,
            };
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
    pub(crate) fn fatal(&mut self, e: Fatal, bad_header: &[u8]) {
        tracing::warn!(peer = %self.peer, fes = e.fes, fei = e.fei, "fatal transport error; sending C2HTermReq");
        let mut b = [0u8; 24 + 128];
        let n = TermReq {
            fes: e.fes,
            fei: e.fei,
        }
        .encode(&mut b, PduType::C2HTermReq, bad_header);
        if let Some(t) = self.tx_state.next() {
            self.out.extend(&b[..n]);
            self.tx_state = t;
        }
        self.close();
    }
}

impl Tcp {
    /// Starts the commands that wait for data-buffer budget, oldest first,
    /// while the budget allows (after output went out or commands finished).
    pub(crate) fn resume_waiting(&mut self, q: &mut Queue) {
        while let Some(&slot) = self.waiting.front() {
            let Some(&c) = q.cmd(slot) else {
                self.waiting.pop_front();
                continue;
            };
            let len = c.len();
            let used = self.charged + self.out.held_bytes();
            if used != 0 && used + len as usize > self.target.transport.max_queue_buffer as usize {
                break;
            }
            self.waiting.pop_front();
            match c.phase() {
                Phase::WaitBuf { r2t: true } => self.start_r2t(q, slot),
                Phase::WaitBuf { r2t: false } => {
                    self.charge(q, slot, len);
                    self.run(q, slot, Event::Budget);
                }
                _ => {}
            }
        }
    }
}

impl QueuePair {
    /// Data-buffer bytes this queue holds now (commands' buffers and unsent
    /// output): how much work it has pending. Fair sharing protects queues
    /// that hold little (a QD 1 tenant) from those that hold much.
    pub fn pending_bytes(&self) -> usize {
        let t = self.b.transport();
        t.charged + t.out.held_bytes()
    }
}

impl Transport for Tcp {
    type Cmd = TcpCmd;

    fn closing(&self) -> bool {
        self.closed()
    }

    fn drained(&self) -> bool {
        self.out.is_empty()
    }

    /// A Connect succeeded: the queue's in-capsule data size follows it
    /// (Fabrics §6.3, TCP §3.6.2.6).
    fn connected(&mut self, _q: &mut Queue, c: Connected) {
        self.icd_size = if c.qid == 0 {
            ADMIN_ICD
        } else {
            self.target.transport.data.in_capsule_data_size as usize
        };
        self.neg.max_data = (self.icd_size as u32).max(self.maxh2cdata);
    }

    fn respond(&mut self, q: &mut Queue, c: Completion<TcpCmd>, cqe: Cqe) {
        self.send_completion(q, c, cqe);
    }

    fn responded(&mut self, q: &mut Queue) {
        self.resume_waiting(q);
    }
}
