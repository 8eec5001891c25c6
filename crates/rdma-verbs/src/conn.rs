//! One accepted NVMe/RDMA queue pair driven by a worker: completions
//! polled from its CQ feed the sans-I/O [`RdmaQueue`], whose work is posted
//! back as chained send work requests (RDMA READ into the command's buffer,
//! RDMA WRITE from it, SEND of the CQE, inline where the device allows),
//! and whose consumed receive buffers are posted again in one chain. No
//! allocation or registration per I/O: work requests, completions and
//! staging are sized at accept, and the I/O queue's buffers are carved from
//! its pool's chunks, each registered once (`Qp::register_chunk`, at accept
//! or when the pool grows one). A buffer no registered chunk holds (the
//! admin queue's, one larger than a chunk, one from the allocator once the
//! pool is at its bound) moves through a registered staging slot with one
//! copy. A failed work completion or a CM DISCONNECTED closes this queue
//! alone.

use crate::listener::Accepted;
use crate::qp::Qp;
use farflash_backend::IoBuf;
use farflash_core::{Binding, Target};
use farflash_rdma::queue::{Rdma, RdmaQueue, Work};
use farflash_rdma::sgl::Remote;
use farflash_rdma_sys as sys;
use farflash_wire::cqe::CQE_SIZE;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::Instant;

/// Completions taken per `ibv_poll_cq`.
const POLL_BATCH: usize = 32;
/// wr_id of send-queue work: kind in the top byte, `DIRECT` (bit 48) when
/// the transfer uses the command's buffer itself, staging slot (or, for a
/// direct WRITE, the index of the buffer held until it completes) in bits
/// 47:32, command slot in 15:0. Receive work requests carry the buffer
/// index alone (top byte 0).
const KIND_READ: u64 = 1 << 56;
const KIND_WRITE: u64 = 2 << 56;
const KIND_SEND: u64 = 3 << 56;
const KIND_MASK: u64 = 0xFF << 56;
const DIRECT: u64 = 1 << 48;

pub struct RdmaConn {
    /// First: dropped first, so the QP is destroyed (no more DMA) and the
    /// chunks deregistered before the queue's buffers go.
    qp: Qp,
    q: RdmaQueue,
    local: SocketAddr,
    peer: SocketAddr,
    recv_entries: u32,
    recv_bytes: usize,
    /// Free staging slots, and the bytes each slot's operation moves.
    stage_free: Vec<u16>,
    stage_len: Vec<u32>,
    /// Work popped but waiting for a staging slot (its send-queue entries
    /// are already counted).
    held: Option<Work>,
    /// Response buffers an RDMA WRITE sends from directly, held until it
    /// completes (at most one per send-queue entry), and the free indices.
    wbufs: Vec<Option<IoBuf>>,
    wbuf_free: Vec<u16>,
    /// Transfers (RDMA READ or WRITE) from or to the command's buffer
    /// itself, and through a staging slot.
    direct: u64,
    staged: u64,
    /// Next CQE slot of the registered response area (non-inline sends).
    cqe_next: usize,
    wcs: Vec<sys::ibv_wc>,
    wrs: Vec<sys::ibv_send_wr>,
    sges: Vec<sys::ibv_sge>,
    reposts: Vec<u32>,
    /// The CQ's notification is armed (reset by a completion-channel event).
    armed: bool,
    /// A failed completion, a failed post or a CM disconnect.
    dead: bool,
    disconnect_sent: bool,
}

impl RdmaConn {
    pub fn new(a: Accepted, target: Arc<Target>) -> RdmaConn {
        let sq = a.qp.sq_depth;
        let slots = a.qp.stage.buf.len() / a.qp.stage_bytes.max(1);
        let q = RdmaQueue::new(target, a.local, a.peer, a.geo, sq);
        let mut c = RdmaConn {
            q,
            local: a.local,
            peer: a.peer,
            recv_entries: a.geo.recv_entries,
            recv_bytes: a.geo.recv_bytes as usize,
            stage_free: (0..slots as u16).rev().collect(),
            stage_len: vec![0; slots],
            held: None,
            wbufs: (0..sq).map(|_| None).collect(),
            wbuf_free: (0..sq.min(u16::MAX as usize) as u16).rev().collect(),
            direct: 0,
            staged: 0,
            cqe_next: 0,
            // SAFETY: ibv_wc and ibv_send_wr are plain data; zero is valid.
            wcs: vec![unsafe { std::mem::zeroed() }; POLL_BATCH],
            // SAFETY: as above.
            wrs: vec![unsafe { std::mem::zeroed() }; sq],
            sges: vec![sys::ibv_sge::default(); sq],
            reposts: Vec::with_capacity(a.geo.recv_entries as usize),
            armed: true,
            dead: false,
            disconnect_sent: false,
            qp: a.qp,
        };
        // The chunks the pool has now; later ones when first seen.
        for i in 0..c.q.chunks().len() {
            let ch = c.q.chunks()[i].clone();
            if c.qp.chunk_lkey(ch.addr(), ch.len()).is_none() {
                c.qp.register_chunk(ch);
            }
        }
        c
    }

    /// Transfers that used the command's buffer directly, and those that
    /// went through a staging slot (with a copy), so far.
    pub fn transfers(&self) -> (u64, u64) {
        (self.direct, self.staged)
    }

    /// The lkey of the registered chunk holding `[addr, addr + len)`; a
    /// chunk of the queue's pool not seen yet (the pool grew) is registered
    /// now, once. None: not in a chunk (or its registration failed).
    fn lkey_for(&mut self, addr: usize, len: usize) -> Option<u32> {
        match self.qp.chunk_lkey(addr, len) {
            Some(k) => k,
            None => {
                let c = self.q.chunk_of(addr, len)?;
                self.qp.register_chunk(c)
            }
        }
    }

    /// Where `w`'s data moves directly: the command buffer's address, the
    /// lkey of its chunk, and for a response the index it is held at.
    fn direct_target(&mut self, w: &Work) -> Option<(u64, u32, u16)> {
        match w {
            Work::Read { slot, remote } => {
                let len = remote.len as usize;
                let at = self
                    .q
                    .data_mut(*slot)
                    .filter(|d| d.len() >= len)
                    .map(|d| d.as_mut_ptr() as usize)?;
                let key = self.lkey_for(at, len)?;
                Some((at as u64, key, 0))
            }
            Work::Respond {
                data: Some((buf, len, _)),
                ..
            } => {
                let at = buf.as_ptr() as usize;
                if self.wbuf_free.is_empty() || (*len as usize) > buf.capacity() {
                    return None;
                }
                let key = self.lkey_for(at, *len as usize)?;
                let wb = self.wbuf_free.pop()?;
                Some((at as u64, key, wb))
            }
            Work::Respond { data: None, .. } => None,
        }
    }

    /// The CM event channel's fd and the completion channel's fd.
    pub fn fds(&self) -> [RawFd; 2] {
        [self.qp.ch.fd(), self.qp.comp_fd()]
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn local(&self) -> SocketAddr {
        self.local
    }

    pub fn queue(&mut self) -> &mut RdmaQueue {
        &mut self.q
    }

    /// One of the fds fired: takes CM events (a disconnect closes the
    /// queue) and completion-channel events (the CQ needs re-arming).
    pub fn on_events(&mut self) {
        loop {
            match self.qp.ch.next() {
                Ok(Some(ev)) => match ev.kind() {
                    sys::RDMA_CM_EVENT_ESTABLISHED => {}
                    k => {
                        tracing::debug!(peer = %self.peer, kind = k, "RDMA queue: CM event, closing");
                        self.dead = true;
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(peer = %self.peer, "RDMA queue CM channel: {e}");
                    self.dead = true;
                    break;
                }
            }
        }
        if self.qp.take_cq_events() > 0 {
            self.armed = false;
        }
    }

    /// Polls the CQ until it is empty and armed, feeding the queue and
    /// posting what it produced; returns whether anything moved.
    pub fn drive(&mut self, now: Instant) -> bool {
        self.q.set_now(now);
        let mut worked = false;
        loop {
            let n = self.qp.poll(&mut self.wcs);
            if n == 0 {
                if self.armed || self.dead {
                    break;
                }
                // Arm, then poll once more: a completion that arrived in
                // between would not signal the channel.
                if self.qp.arm().is_err() {
                    self.dead = true;
                    break;
                }
                self.armed = true;
                continue;
            }
            worked = true;
            for k in 0..n {
                let wc = self.wcs[k];
                self.on_wc(&wc);
            }
            self.post();
        }
        worked |= self.post();
        // A queue the command layer closes sends what it already answered
        // first (the disconnect would flush it); a dead one goes at once.
        if !self.disconnect_sent && (self.dead || (self.q.wants_close() && self.flushed())) {
            self.disconnect_sent = true;
            tracing::debug!(peer = %self.peer, fault = ?self.q.fault(), "RDMA queue closing");
            self.qp.disconnect();
        }
        worked
    }

    fn on_wc(&mut self, wc: &sys::ibv_wc) {
        let ok = wc.status == sys::IBV_WC_SUCCESS;
        tracing::trace!(
            wr_id = wc.wr_id,
            status = wc.status,
            len = wc.byte_len,
            "RDMA completion"
        );
        if !ok && !self.dead {
            // Flushes after a disconnect are expected; anything else is
            // the peer's or the device's error: this queue closes.
            tracing::debug!(peer = %self.peer, status = wc.status, "RDMA work completion failed; closing the queue");
            self.dead = true;
        }
        let kind = wc.wr_id & KIND_MASK;
        if kind == 0 {
            if !ok || self.dead {
                return;
            }
            let i = wc.wr_id as u32;
            if i >= self.recv_entries {
                self.dead = true;
                return;
            }
            let start = i as usize * self.recv_bytes;
            let len = (wc.byte_len as usize).min(self.recv_bytes);
            let msg = &self.qp.recv.buf[start..start + len];
            self.q.on_recv(i, msg);
            return;
        }
        self.q.on_send_done(1);
        let stage = ((wc.wr_id >> 32) & 0xFFFF) as u16;
        let slot = (wc.wr_id & 0xFFFF) as u16;
        if wc.wr_id & DIRECT != 0 {
            match kind {
                KIND_READ if ok && !self.dead => self.q.on_read_done(slot),
                KIND_WRITE => {
                    if let Some(buf) = self.wbufs.get_mut(stage as usize).and_then(Option::take) {
                        self.q.release(buf);
                        self.wbuf_free.push(stage);
                    }
                }
                _ => {}
            }
            return;
        }
        match kind {
            KIND_READ => {
                self.stage_free.push(stage);
                if !ok || self.dead {
                    return;
                }
                let len = self.stage_len[stage as usize] as usize;
                let off = stage as usize * self.qp.stage_bytes;
                let src = &self.qp.stage.buf[off..off + len];
                match self.q.data_mut(slot) {
                    Some(dst) if dst.len() >= len => dst[..len].copy_from_slice(src),
                    _ => {
                        self.dead = true;
                        return;
                    }
                }
                self.q.on_read_done(slot);
            }
            KIND_WRITE => self.stage_free.push(stage),
            _ => {}
        }
    }

    /// Posts the consumed receive buffers and the work that fits; returns
    /// whether anything was posted.
    fn post(&mut self) -> bool {
        if self.dead {
            return false;
        }
        self.q.take_reposts(&mut self.reposts);
        let mut any = false;
        if !self.reposts.is_empty() {
            any = true;
            if self.qp.post_recvs(&self.reposts, self.recv_bytes).is_err() {
                self.dead = true;
                return true;
            }
            self.reposts.clear();
        }
        let mut n = 0;
        loop {
            let w = match self.held.take() {
                Some(w) => w,
                None => match self.q.pop_work() {
                    Some(w) => w,
                    None => break,
                },
            };
            let direct = self.direct_target(&w);
            let needs_stage = direct.is_none()
                && matches!(w, Work::Read { .. } | Work::Respond { data: Some(_), .. });
            if needs_stage && self.stage_free.is_empty() {
                self.held = Some(w);
                break;
            }
            match w {
                Work::Read { slot, remote } if direct.is_some() => {
                    let (addr, lkey, _) = direct.unwrap_or_default();
                    let wr_id = KIND_READ | DIRECT | slot as u64;
                    self.fill(n, wr_id, sys::IBV_WR_RDMA_READ, addr, remote.len, lkey, 0);
                    self.set_remote(n, &remote);
                    self.direct += 1;
                    n += 1;
                }
                Work::Read { slot, remote } => {
                    self.staged += 1;
                    let Some(st) = self.take_stage(remote.len) else {
                        return true;
                    };
                    let wr_id = KIND_READ | (st as u64) << 32 | slot as u64;
                    let (addr, lkey) = (self.stage_addr(st), self.qp.stage.lkey());
                    self.fill(n, wr_id, sys::IBV_WR_RDMA_READ, addr, remote.len, lkey, 0);
                    self.set_remote(n, &remote);
                    n += 1;
                }
                Work::Respond {
                    cqe,
                    invalidate,
                    data,
                } => match self.fill_respond(n, cqe, invalidate, data, direct) {
                    Some(next) => n = next,
                    None => return true,
                },
            }
        }
        if n == 0 {
            return any;
        }
        self.send_chain(n);
        true
    }

    /// Fills the work requests of a response from entry `n` on: the RDMA
    /// WRITE of its data (from the buffer itself, or staged), then the
    /// SEND of its CQE. The next free entry, or None when no staging
    /// slot could be had (the queue is dead).
    fn fill_respond(
        &mut self,
        mut n: usize,
        cqe: [u8; CQE_SIZE],
        invalidate: Option<u32>,
        data: Option<(IoBuf, u32, Remote)>,
        direct: Option<(u64, u32, u16)>,
    ) -> Option<usize> {
        match (data, direct) {
            (Some((buf, len, remote)), Some((addr, lkey, wb))) => {
                // Sent from the buffer itself, held until the
                // WRITE completes.
                let wr_id = KIND_WRITE | DIRECT | (wb as u64) << 32;
                self.fill(n, wr_id, sys::IBV_WR_RDMA_WRITE, addr, len, lkey, 0);
                self.set_remote(n, &remote);
                self.wbufs[wb as usize] = Some(buf);
                self.direct += 1;
                n += 1;
            }
            (Some((buf, len, remote)), None) => {
                self.staged += 1;
                let Some(st) = self.take_stage(len) else {
                    self.q.release(buf);
                    return None;
                };
                let off = st as usize * self.qp.stage_bytes;
                let len = len as usize;
                self.qp.stage.buf[off..off + len].copy_from_slice(&buf.as_slice()[..len]);
                self.q.release(buf);
                let wr_id = KIND_WRITE | (st as u64) << 32;
                let (addr, lkey) = (self.stage_addr(st), self.qp.stage.lkey());
                self.fill(n, wr_id, sys::IBV_WR_RDMA_WRITE, addr, len as u32, lkey, 0);
                self.set_remote(n, &remote);
                n += 1;
            }
            (None, _) => {}
        }
        let c = self.cqe_next;
        self.cqe_next = (c + 1) % self.qp.sq_depth;
        self.qp.cqes.buf[c * CQE_SIZE..(c + 1) * CQE_SIZE].copy_from_slice(&cqe);
        let (addr, lkey) = (self.qp.cqes.addr(c * CQE_SIZE), self.qp.cqes.lkey());
        let flags = if self.qp.inline {
            sys::IBV_SEND_INLINE
        } else {
            0
        };
        let op = match invalidate {
            Some(_) => sys::IBV_WR_SEND_WITH_INV,
            None => sys::IBV_WR_SEND,
        };
        self.fill(n, KIND_SEND, op, addr, CQE_SIZE as u32, lkey, flags);
        if let Some(key) = invalidate {
            self.wrs[n].__bindgen_anon_1.invalidate_rkey = key;
        }
        Some(n + 1)
    }

    /// Chains the first `n` work requests and posts them.
    fn send_chain(&mut self, n: usize) {
        for k in 0..n {
            let next: *mut sys::ibv_send_wr = if k + 1 < n {
                &mut self.wrs[k + 1]
            } else {
                null_mut()
            };
            self.wrs[k].next = next;
            self.wrs[k].sg_list = &mut self.sges[k];
        }
        tracing::trace!(n, "RDMA post_send");
        if let Err(e) = self.qp.post_send(&mut self.wrs[0]) {
            tracing::debug!(peer = %self.peer, "ibv_post_send: {e}; closing the queue");
            self.dead = true;
        }
    }

    /// A staging slot for `len` bytes (a transfer above MDTS closes the
    /// queue: `sgl::plan` never lets one through).
    fn take_stage(&mut self, len: u32) -> Option<u16> {
        if len as usize > self.qp.stage_bytes {
            self.dead = true;
            return None;
        }
        let st = self.stage_free.pop()?;
        self.stage_len[st as usize] = len;
        Some(st)
    }

    fn stage_addr(&self, st: u16) -> u64 {
        self.qp.stage.addr(st as usize * self.qp.stage_bytes)
    }

    #[allow(clippy::too_many_arguments)]
    fn fill(&mut self, n: usize, wr_id: u64, op: u32, addr: u64, len: u32, lkey: u32, flags: u32) {
        self.sges[n] = sys::ibv_sge {
            addr,
            length: len,
            lkey,
        };
        // SAFETY: ibv_send_wr is plain data; zero is valid.
        self.wrs[n] = unsafe { std::mem::zeroed() };
        let wr = &mut self.wrs[n];
        wr.wr_id = wr_id;
        wr.num_sge = 1;
        wr.opcode = op;
        wr.send_flags = flags | sys::IBV_SEND_SIGNALED;
    }

    fn set_remote(&mut self, n: usize, r: &Remote) {
        self.wrs[n].wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: r.addr,
            rkey: r.key,
        };
    }

    /// Runs `f` on the queue's binding (storage and offload hand-off and
    /// completions, ticks: see [`farflash_core::Binding`]), then posts the
    /// work it produced.
    pub fn with_queue<R>(&mut self, f: impl FnOnce(&mut Binding<Rdma>) -> R) -> R {
        let r = f(&mut self.q);
        self.post();
        r
    }

    /// Storage requests and offloads out and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.q.in_flight()
    }

    pub fn wants_close(&self) -> bool {
        self.dead || self.q.wants_close()
    }

    /// Closing, no storage request in flight, and dead or every response
    /// sent: the queue may be dropped (destroying the QP first makes the
    /// device drop posted work).
    pub fn finished(&self) -> bool {
        self.wants_close() && self.q.in_flight() == 0 && (self.dead || self.flushed())
    }

    /// Nothing produced is waiting or unsent (see [`RdmaQueue::flushed`]).
    fn flushed(&self) -> bool {
        self.held.is_none() && self.q.flushed()
    }
}

impl Drop for RdmaConn {
    fn drop(&mut self) {
        // Once per queue: how its data moved (tests/interop_rdma.rs checks
        // that an I/O queue's transfers used no staging slot).
        tracing::info!(
            peer = %self.peer,
            qid = self.q.geometry().qid,
            direct = self.direct,
            staged = self.staged,
            chunks = self.qp.chunks_registered(),
            "RDMA queue closed"
        );
    }
}
