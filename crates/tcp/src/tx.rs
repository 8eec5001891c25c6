//! The transmit path: output for the event loop's `writev`, storage
//! requests out and their completions in, completions as C2HData +
//! CapsuleResp, R2T, C2HTermReq.

use crate::queue::{Phase, QueuePair};
use farflash_backend::{IoBuf, IoCompletion, IoRequest, SharedBackend};
use farflash_core::{Completion, Offload, OffloadDone};
use farflash_wire::cqe::{Cqe, CQE_SIZE};
use farflash_wire::pdu::{
    flags, write_header, DataHeader, Fatal, PduType, TermReq, CH_LEN, DIGEST_LEN,
};
use farflash_wire::{digest, Status};

impl QueuePair {
    /// Bytes waiting to be sent.
    pub fn output_len(&self) -> usize {
        self.out.len()
    }

    /// How many `iovec`s the waiting output takes.
    pub fn output_segments(&self) -> usize {
        self.out.segments()
    }

    /// Fills `iov` with what is waiting to be sent (for one `writev`);
    /// returns how many slices were filled.
    pub fn output_slices<'a>(&'a self, iov: &mut [std::io::IoSlice<'a>]) -> usize {
        self.out.slices(iov)
    }

    /// `n` bytes of the output were sent.
    pub fn consume_output(&mut self, n: usize) {
        self.out.consume(n, self.core.pool());
        if !self.waiting.is_empty() {
            self.resume_waiting();
            self.flush_completions();
        }
        // Reading may have stopped at the high-water mark.
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
    }

    /// Everything waiting to be sent, as one buffer, consumed (tests, fuzzers).
    pub fn take_output(&mut self) -> Vec<u8> {
        let v = self.out.take_all(self.core.pool());
        if !self.waiting.is_empty() {
            self.resume_waiting();
            self.flush_completions();
        }
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
        v
    }

    /// Whether storage requests wait to be taken.
    pub fn has_storage_requests(&self) -> bool {
        self.core.has_storage_requests()
    }

    /// Hands the emitted storage requests to `run` (see
    /// [`farflash_core::NvmeQueue::take_storage`]).
    pub fn take_storage(&mut self, run: impl FnMut(&SharedBackend, IoRequest)) {
        self.core.take_storage(run);
        // Requests for a namespace that vanished complete at once.
        self.flush_completions();
    }

    /// Whether slow work (authentication's DH) waits to be taken.
    pub fn has_offloads(&self) -> bool {
        self.core.has_offloads()
    }

    /// Hands the emitted slow work to `run` (see
    /// [`farflash_core::NvmeQueue::take_offloads`]).
    pub fn take_offloads(&mut self, run: impl FnMut(Offload)) {
        self.core.take_offloads(run);
    }

    /// Slow work finished: its command completes into the output.
    pub fn on_offload_completion(&mut self, d: OffloadDone) {
        self.core.on_offload_completion(d);
        self.flush_completions();
    }

    /// A storage request finished: its command completes into the output.
    pub fn on_storage_completion(&mut self, c: IoCompletion) {
        self.core.on_storage_completion(c);
        self.flush_completions();
    }

    /// Sends every completion the command layer has, then starts commands
    /// that waited for the buffer budget they freed (which may complete
    /// more). Called after every call into the command layer.
    pub(crate) fn flush_completions(&mut self) {
        if let Some(c) = self.core.take_connected() {
            // Before the Connect's own completion: it already follows the
            // new queue's SQ flow control setting.
            self.apply_connect(c);
        }
        loop {
            self.core.take_completions(&mut self.done);
            if self.done.is_empty() {
                break;
            }
            let mut done = std::mem::take(&mut self.done);
            for c in done.drain(..) {
                self.send_completion(c);
            }
            self.done = done;
            self.resume_waiting();
        }
    }

    /// One completion: reply data (if any) as C2HData PDUs, then the
    /// CapsuleResp. When the host disabled SQ flow control, a successful
    /// data transfer whose CQE would carry nothing but the CID ends with a
    /// SUCCESS C2HData instead of a CapsuleResp (TCP §3.6.2.9 / Fabrics §6.3
    /// CATTR: SQHD is not needed).
    fn send_completion(&mut self, c: Completion) {
        if let Some(cmd) = c.slot.and_then(|s| self.cmds.get_mut(s as usize)) {
            self.charged -= cmd.charged as usize;
            cmd.charged = 0;
            cmd.phase = Phase::Free;
        }
        let mut responded = false;
        if let Some((buf, len)) = c.data {
            let success = !self.sq_flow_control && c.result == 0;
            self.send_c2h(c.cid, buf, len as usize, success);
            responded = success;
        }
        if !responded {
            self.respond(c.cid, c.status, c.result);
        }
    }

    /// Sends a CapsuleResp (TCP §3.6.2.7).
    /// `result`: CQE DW0 (low half) and DW1 (high half).
    pub(crate) fn respond(&mut self, cid: u16, status: Status, result: u64) {
        if self.term_sent {
            return;
        }
        let cqe = Cqe {
            dw0: result as u32,
            dw1: (result >> 32) as u32,
            // Fabrics §? : SQHD is FFFFh when SQ flow control is disabled.
            sqhd: if self.sq_flow_control {
                self.sqhd
            } else {
                0xFFFF
            },
            sqid: self.core.qid(),
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

    pub(crate) fn send_r2t(&mut self, cid: u16, ttag: u16, offset: u32, len: u32) {
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
    /// (TCP §3.6.2.9); `success` sets SUCCESS on the last one (no
    /// CapsuleResp follows). The data is not copied: the output queue holds
    /// the buffer until the socket has taken it.
    pub(crate) fn send_c2h(&mut self, cid: u16, buf: IoBuf, len: usize, success: bool) {
        if self.term_sent {
            self.core.pool().put(buf);
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
        if !self.term_sent {
            self.out.extend(&b[..n]);
        }
        self.term_sent = true;
        self.closing = true;
    }
}
