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
use farflash_backend::{BufPool, Chunk, IoBuf};
use farflash_core::{Begin, Binding, Completion, Connected, NvmeQueue, Target, Transport};
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::Cqe;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

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

/// NVMe/RDMA's state of one command (`Transport::Cmd`), kept in the
/// command's slot of the command layer's queue and handed back with its
/// completion: set once when the capsule arrives, read by the response.
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmaCmd {
    /// Where a read's data goes.
    write_to: Option<Remote>,
    /// The key to invalidate with the response.
    invalidate: Option<u32>,
}

/// The command layer's queue with NVMe/RDMA's state of each command in its slots.
type Queue = NvmeQueue<RdmaCmd>;

/// The NVMe/RDMA side of one queue pair: its geometry, the verbs work
/// waiting for send-queue entries and the receive buffers to post again.
/// Each command's remote buffers are in its slot ([`RdmaCmd`]); the command
/// layer's queue is beside it in the [`Binding`].
pub struct Rdma {
    geo: Geometry,
    /// Send-queue entries: all of them, and those free.
    sq_entries: usize,
    sq_free: usize,
    out: VecDeque<Work>,
    reposts: Vec<u32>,
    fault: Option<Fault>,
}

/// One NVMe/RDMA queue pair: the shared [`Binding`] over [`Rdma`]. The
/// binding's methods (storage hand-off, completions, ticks) are the same
/// for every transport; those here move capsules and verbs work.
#[derive(derive_more::Deref, derive_more::DerefMut)]
pub struct RdmaQueue {
    b: Binding<Rdma>,
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
        let t = Rdma {
            geo,
            sq_entries,
            sq_free: sq_entries,
            out: VecDeque::new(),
            reposts: Vec::new(),
            fault: None,
        };
        RdmaQueue {
            b: Binding::new(core, t),
        }
    }

    pub fn geometry(&self) -> Geometry {
        self.b.transport().geo
    }

    pub fn fault(&self) -> Option<Fault> {
        self.b.transport().fault
    }

    /// Every piece of work produced has been posted and has completed (all
    /// send-queue entries are free): a disconnect now loses no response. A
    /// disconnect moves the QP to the error state, which flushes posted
    /// work the device has not sent yet, such as the AUTH_Failure1 that
    /// ends an association.
    pub fn flushed(&self) -> bool {
        self.b.transport().drained()
    }

    /// Receive buffer `buf` completed with `msg` (its first `byte_len` bytes).
    pub fn on_recv(&mut self, buf: u32, msg: &[u8]) {
        if self.b.wants_close() {
            return;
        }
        self.b.with(|t, q| t.on_recv(q, buf, msg));
    }

    /// The data buffer an RDMA READ of `slot` fills.
    pub fn data_mut(&mut self, slot: u16) -> Option<&mut [u8]> {
        self.b.parts_mut().1.data_mut(slot)
    }

    /// The RDMA READ of `slot` finished: the command runs.
    pub fn on_read_done(&mut self, slot: u16) {
        self.b.with(|_, q| q.execute(slot));
    }

    /// `n` send-queue entries completed.
    pub fn on_send_done(&mut self, n: usize) {
        self.b.with(|t, _| t.sq_free += n);
    }

    /// The chunks the queue's buffers are carved from (none on the admin
    /// queue), oldest first: a new one is appended before a buffer from
    /// it is handed out.
    pub fn chunks(&mut self) -> &[Chunk] {
        self.b.parts_mut().1.pool().chunks()
    }

    /// The chunk holding `[addr, addr + len)` (a buffer of this queue's
    /// pool), if any.
    pub fn chunk_of(&mut self, addr: usize, len: usize) -> Option<Chunk> {
        self.b.parts_mut().1.pool().chunk_of(addr, len).cloned()
    }

    /// A response's data buffer, sent: back to the queue's pool.
    pub fn release(&mut self, buf: IoBuf) {
        self.b.parts_mut().1.pool().put(buf);
    }

    /// The next work that fits the free send-queue entries, oldest first.
    pub fn pop_work(&mut self) -> Option<Work> {
        let t = self.b.parts_mut().0;
        let need = t.out.front()?.entries();
        if need > t.sq_free {
            return None;
        }
        t.sq_free -= need;
        t.out.pop_front()
    }

    /// Work waiting for send-queue entries.
    pub fn pending_work(&self) -> usize {
        self.b.transport().out.len()
    }

    /// Receive buffers to post again (appends to `out`).
    pub fn take_reposts(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.b.parts_mut().0.reposts);
    }
}

impl Rdma {
    fn on_recv(&mut self, q: &mut Queue, buf: u32, msg: &[u8]) {
        let c = match capsule::parse(msg, self.geo.recv_bytes as usize) {
            Ok(c) => c,
            Err(e) => {
                self.fault = Some(Fault::Capsule(e));
                return;
            }
        };
        let (slot, xfer) = match q.begin(c.sqe) {
            Begin::Overrun => {
                self.fault = Some(Fault::Overrun);
                return;
            }
            Begin::Deleted | Begin::Answered => {
                self.reposts.push(buf);
                return;
            }
            Begin::Ready { slot, xfer } => (slot, xfer),
        };
        match sgl::plan(xfer, &c.dptr, c.icd.len()) {
            Err(st) => q.fail(slot, st),
            Ok(p) => {
                let write_to = match p.data {
                    Placement::Write(remote) => Some(remote),
                    _ => None,
                };
                if let Some(cmd) = q.cmd_mut(slot) {
                    *cmd = RdmaCmd {
                        write_to,
                        invalidate: p.invalidate,
                    };
                }
                match p.data {
                    Placement::None => q.execute(slot),
                    Placement::InCapsule { offset, len } => {
                        let src = &c.icd[offset as usize..(offset + len) as usize];
                        q.data_buf(slot).copy_from_slice(src);
                        q.execute(slot);
                    }
                    Placement::Read(remote) => {
                        q.data_buf(slot);
                        self.out.push_back(Work::Read { slot, remote });
                    }
                    Placement::Write(_) => q.execute(slot),
                }
            }
        }
        // The capsule is consumed (in-capsule data copied): its buffer can
        // take the next one.
        self.reposts.push(buf);
    }
}

impl Transport for Rdma {
    type Cmd = RdmaCmd;

    fn closing(&self) -> bool {
        self.fault.is_some()
    }

    fn drained(&self) -> bool {
        self.out.is_empty() && self.sq_free == self.sq_entries
    }

    fn connected(&mut self, _q: &mut Queue, c: Connected) {
        // RDMA §3.2: the Connect matches the CM Request it came over
        // (HSQSIZE is the Connect's SQSIZE): otherwise the host could
        // send more capsules than receive buffers are posted.
        if c.qid != self.geo.qid || c.sqsize as u32 + 1 != self.geo.recv_entries {
            self.fault = Some(Fault::ConnectMismatch);
        }
    }

    fn respond(&mut self, q: &mut Queue, c: Completion<RdmaCmd>, cqe: Cqe) {
        let cmd = c.cmd;
        let data = match (c.data, cmd.write_to) {
            (Some((buf, len)), Some(r)) if len > 0 && c.status.is_success() => {
                // Never more than the host's SGL named (sgl::plan checked
                // the transfer length against it).
                let len = len.min(r.len);
                Some((buf, len, Remote { len, ..r }))
            }
            (Some((buf, _)), _) => {
                q.pool().put(buf);
                None
            }
            (None, _) => None,
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
