//! One NVMe/TCP connection = one queue pair, as a sans-I/O state machine.
//!
//! The transport reads socket bytes into [`QueuePair::rx_space`] and calls
//! [`QueuePair::on_received`]; the queue cuts them into PDUs (TCP §3.6),
//! runs the commands, and leaves PDUs to send in [`QueuePair::output`].
//! Storage requests are outputs too: the event loop takes them with
//! [`QueuePair::take_storage`], runs them on its own per-thread queues and
//! hands each completion back through [`QueuePair::on_storage_completion`]
//! (`commit` / `poll_backends` do the same on a private queue set for tests,
//! fuzzers and benchmarks). Nothing here touches a socket or a storage
//! queue, so every path can be driven from a unit test.

use crate::controller::Controller;
use crate::nstable::NsTable;
use crate::outq::OutQueue;
use crate::stats::QueueStats;
use crate::target::Target;
use crate::{admin, fabrics, io};

mod backend;
mod budget;
mod rx;
mod transport;
mod tx;
use farflash_backend::{BufPool, IoBuf, IoCompletion, IoRequest, QueueSet, SharedBackend};
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
    /// Send the completion now (with the slot's reply data, if any): status
    /// and the command-specific result, CQE DW0 in the low and DW1 in the
    /// high half (Base §4.2.1; Linux nvmet's `union nvme_result`).
    Done(Status, u64),
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
    /// The parsed I/O command (I/O queues; `None` until classified).
    pub io: Option<io::IoCmd>,
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
            io: None,
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
    /// The time of the first tick (the core reads no clock: `tick` brings it).
    started: Option<Instant>,
    /// The time of the last tick.
    pub(crate) clock: Option<Instant>,
    pub(crate) qid: u16,
    pub(crate) ctrl: Option<Arc<Controller>>,
    pub(crate) sqsize: u16,
    sq_flow_control: bool,
    sqhd: u16,
    pub(crate) slots: Vec<Slot>,
    free: Vec<u16>,
    cid_busy: Vec<u64>,
    /// The subsystem's namespaces as this queue sees them.
    pub(crate) ns: NsTable,
    pub(crate) pool: BufPool,
    /// Storage requests emitted and not yet taken: (namespace key, request
    /// tagged with its slot).
    storage_out: Vec<(usize, IoRequest)>,
    /// Standalone use only (`commit` / `poll_backends`): a private queue set
    /// and its completion scratch.
    own_storage: Option<Box<QueueSet>>,
    completions: Vec<IoCompletion>,
    pub(crate) stats: Option<Arc<QueueStats>>,
    /// Admin queue: the tick at or after the last Keep Alive.
    last_keep_alive: Option<Instant>,
    /// A Keep Alive (or Connect, or a new KATO) arrived since the last tick.
    keep_alive_seen: bool,
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
}

impl QueuePair {
    pub fn new(target: Arc<Target>, local: SocketAddr, peer: SocketAddr) -> QueuePair {
        let maxh2cdata = target.transport.max_h2c_data;
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
            started: None,
            clock: None,
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
            storage_out: Vec::new(),
            own_storage: None,
            completions: Vec::new(),
            stats: None,
            last_keep_alive: None,
            keep_alive_seen: false,
            aers: Vec::new(),
            in_flight: 0,
            epoch: 0,
            charged: 0,
            waiting: std::collections::VecDeque::new(),
            term_sent: false,
        };
        q.resize_slots(PRE_CONNECT_SLOTS);
        q.neg.max_data = (ADMIN_ICD as u32).max(maxh2cdata);
        q
    }

    pub(crate) fn resize_slots(&mut self, n: usize) {
        self.slots = (0..n).map(|_| Slot::empty()).collect();
        self.free = (0..n as u16).rev().collect();
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
        self.keep_alive_seen = true;
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

    /// A Keep Alive (Base §5.27) or a new KATO: the timer restarts at the next tick.
    pub(crate) fn note_keep_alive(&mut self) {
        self.keep_alive_seen = true;
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
