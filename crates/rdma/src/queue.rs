//! One NVMe/RDMA queue pair as a sans-I/O state machine (RDMA Transport
//! Spec 1.0 §3.3): received capsules in, verbs work out.
//!
//! The verbs layer reports each receive completion with
//! [`RdmaQueue::on_recv`] and executes what [`RdmaQueue::pop_work`] hands
//! it: RDMA READs of host data, and responses (an optional RDMA WRITE of
//! reply data, then a SEND of the CQE, with invalidate when the host asked
//! for it). Receive buffers come back with [`RdmaQueue::take_reposts`] once
//! their capsule is consumed. Send-queue entries are credits: work that
//! does not fit waits, in order, until [`RdmaQueue::on_send_done`] returns
//! them. Nothing here touches verbs, so every path runs in a unit test.

use crate::capsule::{self, CapsuleError};
use crate::cm::Geometry;
use crate::sgl::{self, Placement, Remote};
use farflash_backend::{BufPool, Chunk, IoBuf, IoCompletion, IoRequest, SharedBackend};
use farflash_core::{Begin, Completion, NvmeQueue, Offload, OffloadDone, Target};
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::Cqe;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Transport type RDMA (Fabrics TRTYPE 1, Base "Discovery Log Page Entry").
pub const TRTYPE_RDMA: u8 = 1;

/// An I/O queue's data buffers are carved from chunks of this size (every
/// pooled size class fits one), so that the verbs layer registers each
/// chunk once and moves data to and from the buffers themselves.
pub const CHUNK_BYTES: usize = BufPool::MAX_POOLED;
/// At most this many chunks per I/O queue (32 MiB), grown on demand.
pub const MAX_CHUNKS: usize = 8;

/// A verbs operation for the queue pair's send queue.
#[derive(Debug)]
pub enum Work {
    /// RDMA READ `remote` into the data buffer of `slot`
    /// ([`RdmaQueue::data_mut`]); then [`RdmaQueue::on_read_done`].
    Read { slot: u16, remote: Remote },
    /// A response: RDMA WRITE of `data` (buffer, bytes, where) when there
    /// is any, then a SEND of `cqe` — SEND_WITH_INVALIDATE of the key in
    /// `invalidate`. The buffer goes back with [`RdmaQueue::release`].
    Respond {
        cqe: [u8; CQE_SIZE],
        invalidate: Option<u32>,
        data: Option<(IoBuf, u32, Remote)>,
    },
}

impl Work {
    /// Send-queue entries the work takes.
    pub fn entries(&self) -> usize {
        match self {
            Work::Read { .. } => 1,
            Work::Respond { data, .. } => 1 + data.is_some() as usize,
        }
    }
}

/// Why the queue closed on its own (the verbs layer disconnects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Capsule(CapsuleError),
    /// More commands than the queue has entries.
    Overrun,
    /// The Connect's QID or SQSIZE differs from the CM Request's.
    ConnectMismatch,
}

/// The binding's view of one command slot.
#[derive(Clone, Copy, Debug, Default)]
struct Cmd {
    /// Where a read's data goes.
    write_to: Option<Remote>,
    /// The key to invalidate with the response.
    invalidate: Option<u32>,
}

pub struct RdmaQueue {
    core: NvmeQueue,
    geo: Geometry,
    cmds: Vec<Cmd>,
    sqhd: u16,
    sq_flow_control: bool,
    /// Send-queue entries free.
    sq_free: usize,
    out: VecDeque<Work>,
    reposts: Vec<u32>,
    fault: Option<Fault>,
    done: Vec<Completion>,
}

impl RdmaQueue {
    /// A queue the CM accepted with geometry `geo`; `sq_entries` is the
    /// send queue's depth.
    pub fn new(
        target: Arc<Target>,
        local: SocketAddr,
        peer: SocketAddr,
        geo: Geometry,
        sq_entries: usize,
    ) -> RdmaQueue {
        let mut core = NvmeQueue::new(target, local, peer, TRTYPE_RDMA);
        if geo.qid != 0 {
            // I/O queues: buffers from chunks the verbs layer registers
            // once. The admin queue's few small transfers stay on the
            // plain pool (and the verbs layer's staging slots).
            *core.pool() = BufPool::chunked(CHUNK_BYTES, MAX_CHUNKS);
        }
        RdmaQueue {
            cmds: vec![Cmd::default(); core.slot_count()],
            core,
            geo,
            sqhd: 0,
            sq_flow_control: true,
            sq_free: sq_entries,
            out: VecDeque::new(),
            reposts: Vec::new(),
            fault: None,
            done: Vec::new(),
        }
    }

    /// The command layer's queue.
    pub fn nvme(&self) -> &NvmeQueue {
        &self.core
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }

    /// Closing for either layer's reason.
    pub fn wants_close(&self) -> bool {
        self.fault.is_some() || self.core.wants_close()
    }

    /// Closing, no storage request in flight and no work outstanding.
    pub fn finished(&self, sq_entries: usize) -> bool {
        self.wants_close() && self.core.in_flight() == 0 && self.flushed(sq_entries)
    }

    /// Every piece of work produced has been posted and has completed (of
    /// `sq_entries` send-queue entries, all are free): a disconnect now
    /// loses no response. A disconnect moves the QP to the error state,
    /// which flushes posted work the device has not sent yet, such as the
    /// AUTH_Failure1 that ends an association.
    pub fn flushed(&self, sq_entries: usize) -> bool {
        self.out.is_empty() && self.sq_free == sq_entries
    }

    /// Receive buffer `buf` completed with `msg` (its first `byte_len` bytes).
    pub fn on_recv(&mut self, buf: u32, msg: &[u8]) {
        if self.wants_close() {
            return;
        }
        let c = match capsule::parse(msg, self.geo.recv_bytes as usize) {
            Ok(c) => c,
            Err(e) => {
                self.fault = Some(Fault::Capsule(e));
                return;
            }
        };
        self.sqhd = ((self.sqhd as u32 + 1) % (self.core.sqsize() as u32 + 1)) as u16;
        let (slot, xfer) = match self.core.begin(c.sqe) {
            Begin::Overrun => {
                self.fault = Some(Fault::Overrun);
                return;
            }
            Begin::Deleted => {
                self.reposts.push(buf);
                return;
            }
            Begin::Answered => {
                self.reposts.push(buf);
                self.flush_completions();
                return;
            }
            Begin::Ready { slot, xfer } => (slot, xfer),
        };
        if slot as usize >= self.cmds.len() {
            self.cmds.resize(self.core.slot_count(), Cmd::default());
        }
        self.cmds[slot as usize] = Cmd::default();
        match sgl::plan(xfer, &c.dptr, c.icd.len()) {
            Err(st) => self.core.fail(slot, st),
            Ok(p) => {
                self.cmds[slot as usize].invalidate = p.invalidate;
                match p.data {
                    Placement::None => self.core.execute(slot),
                    Placement::InCapsule { offset, len } => {
                        let src = &c.icd[offset as usize..(offset + len) as usize];
                        self.core.data_buf(slot).copy_from_slice(src);
                        self.core.execute(slot);
                    }
                    Placement::Read(remote) => {
                        self.core.data_buf(slot);
                        self.out.push_back(Work::Read { slot, remote });
                    }
                    Placement::Write(remote) => {
                        self.cmds[slot as usize].write_to = Some(remote);
                        self.core.execute(slot);
                    }
                }
            }
        }
        // The capsule is consumed (in-capsule data copied): its buffer can
        // take the next one.
        self.reposts.push(buf);
        self.flush_completions();
    }

    /// The data buffer an RDMA READ of `slot` fills.
    pub fn data_mut(&mut self, slot: u16) -> Option<&mut [u8]> {
        self.core.data_mut(slot)
    }

    /// The RDMA READ of `slot` finished: the command runs.
    pub fn on_read_done(&mut self, slot: u16) {
        self.core.execute(slot);
        self.flush_completions();
    }

    /// `n` send-queue entries completed.
    pub fn on_send_done(&mut self, n: usize) {
        self.sq_free += n;
    }

    /// The chunks the queue's buffers are carved from (none on the admin
    /// queue), oldest first: a new one is appended before a buffer from
    /// it is handed out.
    pub fn chunks(&mut self) -> &[Chunk] {
        self.core.pool().chunks()
    }

    /// The chunk holding `[addr, addr + len)` (a buffer of this queue's
    /// pool), if any.
    pub fn chunk_of(&mut self, addr: usize, len: usize) -> Option<Chunk> {
        self.core.pool().chunk_of(addr, len).cloned()
    }

    /// A response's data buffer, sent: back to the queue's pool.
    pub fn release(&mut self, buf: IoBuf) {
        self.core.pool().put(buf);
    }

    /// The next work that fits the free send-queue entries, oldest first.
    pub fn pop_work(&mut self) -> Option<Work> {
        let need = self.out.front()?.entries();
        if need > self.sq_free {
            return None;
        }
        self.sq_free -= need;
        self.out.pop_front()
    }

    /// Work waiting for send-queue entries.
    pub fn pending_work(&self) -> usize {
        self.out.len()
    }

    /// Receive buffers to post again (appends to `out`).
    pub fn take_reposts(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.reposts);
    }

    pub fn has_storage_requests(&self) -> bool {
        self.core.has_storage_requests()
    }

    pub fn take_storage(&mut self, run: impl FnMut(&SharedBackend, IoRequest)) {
        self.core.take_storage(run);
        self.flush_completions();
    }

    pub fn on_storage_completion(&mut self, c: IoCompletion) {
        self.core.on_storage_completion(c);
        self.flush_completions();
    }

    pub fn in_flight(&self) -> usize {
        self.core.in_flight()
    }

    /// Whether slow work (authentication's DH, a PTPL write) waits to be
    /// taken, as on a TCP queue.
    pub fn has_offloads(&self) -> bool {
        self.core.has_offloads()
    }

    /// Hands the slow work to `run` (the worker's helper thread); each
    /// comes back once through [`RdmaQueue::on_offload_completion`].
    pub fn take_offloads(&mut self, run: impl FnMut(Offload)) {
        self.core.take_offloads(run);
    }

    /// Offloaded work finished: its command goes on (its response, or the
    /// next step of the exchange, becomes work).
    pub fn on_offload_completion(&mut self, d: OffloadDone) {
        self.core.on_offload_completion(d);
        self.flush_completions();
    }

    /// Standalone use (tests, fuzzers): runs storage on the queue's own set.
    pub fn commit(&mut self) {
        self.core.commit();
        self.flush_completions();
    }

    /// Standalone use: reaps the private queue set until nothing completes.
    pub fn poll_backends(&mut self) -> bool {
        let mut any = false;
        while self.core.in_flight() > 0 && self.core.poll_backends() {
            any = true;
            self.flush_completions();
            self.commit();
        }
        any
    }

    #[inline]
    pub fn set_now(&mut self, now: Instant) {
        self.core.set_now(now);
    }

    /// Periodic work of the command layer (keep-alive, AERs, teardown).
    pub fn tick(&mut self, now: Instant) {
        if self.wants_close() {
            return;
        }
        self.core.tick(now);
        self.flush_completions();
    }

    fn flush_completions(&mut self) {
        if let Some(c) = self.core.take_connected() {
            // RDMA §3.2: the Connect matches the CM Request it came over
            // (HSQSIZE is the Connect's SQSIZE): otherwise the host could
            // send more capsules than receive buffers are posted.
            if c.qid != self.geo.qid || c.sqsize as u32 + 1 != self.geo.recv_entries {
                self.fault = Some(Fault::ConnectMismatch);
            }
            self.sq_flow_control = !c.disable_sq_flow;
            self.cmds.resize(self.core.slot_count(), Cmd::default());
        }
        loop {
            self.core.take_completions(&mut self.done);
            if self.done.is_empty() {
                break;
            }
            let mut done = std::mem::take(&mut self.done);
            for c in done.drain(..) {
                self.respond(c);
            }
            self.done = done;
        }
    }

    fn respond(&mut self, c: Completion) {
        let cmd = c
            .slot
            .and_then(|s| self.cmds.get_mut(s as usize))
            .map(std::mem::take)
            .unwrap_or_default();
        let data = match (c.data, cmd.write_to) {
            (Some((buf, len)), Some(r)) if len > 0 && c.status.is_success() => {
                // Never more than the host's SGL named (sgl::plan checked
                // the transfer length against it).
                let len = len.min(r.len);
                Some((buf, len, Remote { len, ..r }))
            }
            (Some((buf, _)), _) => {
                self.core.pool().put(buf);
                None
            }
            (None, _) => None,
        };
        let cqe = Cqe {
            dw0: c.result as u32,
            dw1: (c.result >> 32) as u32,
            // Fabrics: SQHD is FFFFh when SQ flow control is disabled.
            sqhd: if self.sq_flow_control {
                self.sqhd
            } else {
                0xFFFF
            },
            sqid: self.core.qid(),
            cid: c.cid,
            status: c.status,
        };
        let mut raw = [0u8; CQE_SIZE];
        cqe.encode(&mut raw);
        self.out.push_back(Work::Respond {
            cqe: raw,
            invalidate: cmd.invalidate,
            data,
        });
    }
}
