//! One NVMe queue (a submission/completion queue pair) as the command layer
//! sees it, whatever transport carries it: command slots, the namespaces
//! the queue can reach, its controller, its buffers.
//!
//! A binding (NVMe/TCP in `farflash-tcp`) hands each arriving command to
//! [`NvmeQueue::begin`] (in `exec.rs`), puts the data in place and calls
//! [`NvmeQueue::execute`]; finished commands come out as
//! [`Completion`]s ([`NvmeQueue::take_completions`]) and storage work as
//! requests ([`NvmeQueue::take_storage`], `storage.rs`). Nothing here knows
//! a PDU, reads a clock (`tick` brings the time, `lifecycle.rs`) or
//! performs I/O. Nor does it name a command: the executors run on the queue
//! and the methods that call them (`begin`, `execute`, the dispatcher) are
//! `exec.rs`'s, above them.

use crate::command::{Cmd, Completion, Connected};
use crate::controller::Controller;
use crate::listen::ListenTransport;
use crate::nstable::NsTable;
use crate::stats::QueueStats;
use crate::target::Target;
use farflash_backend::{BufPool, IoBuf, IoCompletion, IoRequest, QueueSet};
use farflash_wire::{Cqe, Sqe, Status};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

mod lifecycle;
mod offload;
mod qos;
mod slots;
mod storage;

pub(crate) use offload::{Done, Job};
pub use offload::{Offload, OffloadDone};
pub(crate) use slots::{CmdState, Event};

/// Storage requests and offloads are tagged with their command's slot in
/// the low this-many bits; the event loop may use the rest (which of its
/// connections), and only the low part is read here ([`tag_slot`]).
pub const TAG_SLOT_BITS: u32 = 32;

/// The slot a storage request's or an offload's tag names.
pub(crate) fn tag_slot(tag: u64) -> usize {
    (tag & ((1 << TAG_SLOT_BITS) - 1)) as usize
}

/// Slots before Connect tells the queue size.
const PRE_CONNECT_SLOTS: usize = 4;

/// How often an idle queue's tick may reload its namespace table to let
/// removed namespaces go ([`NvmeQueue::release_removed_namespaces`]).
const RELEASE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// One command in flight: the command layer's state of it and the
/// transport's (`C`, `Transport::Cmd`), in one object with one index (the
/// slot number, also a transport's transfer tag) and one free list.
pub(crate) struct Slot<C = ()> {
    pub sqe: Sqe,
    /// Where the command is in its life; changed only by
    /// [`Slot::step`] (`slots.rs`).
    state: CmdState,
    /// The data buffer: host data (H2C) or the reply (C2H).
    pub buf: Option<IoBuf>,
    /// Data bytes: expected (H2C) or to send (C2H reply).
    pub len: u32,
    /// The command, parsed once at arrival (`exec.rs` `classify`).
    pub cmd: Cmd,
    /// The status to answer with once the requests still out are back (a
    /// storage error, or a request that could not be emitted).
    pub status: Status,
    /// Send `buf[..len]` to the host with the completion.
    pub reply: bool,
    /// Arrival time, for the latency histograms (only while timing is on).
    pub t0: Option<Instant>,
    /// The transport's state of the command (its data transfer, its
    /// response): reset when the slot is claimed, handed to the transport
    /// with the command's [`Completion`].
    pub xport: C,
}

impl<C: Default> Slot<C> {
    fn empty() -> Slot<C> {
        Slot {
            sqe: Sqe::default(),
            state: CmdState::Free,
            buf: None,
            len: 0,
            cmd: Cmd::Unparsed,
            status: Status::SUCCESS,
            reply: false,
            t0: None,
            xport: C::default(),
        }
    }
}

/// How the host reached a queue.
pub(crate) struct Via {
    /// The listener address (for the discovery log).
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// Transport type for the Error log (Fabrics TRTYPE).
    pub trtype: u8,
    /// The host and subsystem NQNs of the TLS PSK identity the secure
    /// channel was set up with (None: no secure channel).
    pub tls: Option<Box<(String, String)>>,
}

/// The command slots, the CIDs in flight and the parked AERs.
pub(crate) struct CmdSlots<C = ()> {
    entries: Vec<Slot<C>>,
    free: Vec<u16>,
    /// One bit per CID in flight.
    cid_busy: Vec<u64>,
    /// Admin queue: slots holding parked AERs, oldest first.
    pub aers: Vec<u16>,
}

impl<C> CmdSlots<C> {
    pub fn get(&self, idx: usize) -> Option<&Slot<C>> {
        self.entries.get(idx)
    }

    pub fn get_mut(&mut self, idx: usize) -> Option<&mut Slot<C>> {
        self.entries.get_mut(idx)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

impl<C> std::ops::Index<usize> for CmdSlots<C> {
    type Output = Slot<C>;
    fn index(&self, idx: usize) -> &Slot<C> {
        &self.entries[idx]
    }
}

impl<C> std::ops::IndexMut<usize> for CmdSlots<C> {
    fn index_mut(&mut self, idx: usize) -> &mut Slot<C> {
        &mut self.entries[idx]
    }
}

/// What keeps this queue's host from its namespaces; both empty in the
/// common case, so the I/O check is one branch. Re-read with the namespaces.
#[derive(Default)]
pub(crate) struct Blocks {
    /// ANA groups not accessible through this queue's listener, with their
    /// state (`crate::ana`).
    pub ana_blocked: Vec<(u32, farflash_wire::ana::AnaState)>,
    /// Namespaces (keys) whose reservation keeps the host from reading or
    /// writing (`crate::resv`; a reservation change moves the namespaces'
    /// generation).
    pub resv_block: Vec<(usize, crate::resv::Access)>,
}

/// Everything the queue emits for its owner to take: completions (with the
/// SQ head their CQEs carry), the Connect's outcome, storage requests and
/// offloads, and how many of those are out.
struct Outbox<C> {
    done: Vec<Completion<C>>,
    /// The other half of `done`'s double buffer ([`NvmeQueue::take_done`]).
    done_spare: Vec<Completion<C>>,
    connected: Option<Connected>,
    /// SQ Head Pointer: advanced by every command taken off the queue,
    /// reported in each CQE (Base §4.2.1) unless the host disabled SQ flow
    /// control (Fabrics §6.3, Connect CATTR bit 2, TP 8005).
    sqhd: u16,
    sq_flow_control: bool,
    /// Storage requests emitted and not yet taken: (namespace key, request
    /// tagged with its slot).
    storage_out: Vec<(usize, IoRequest)>,
    /// Standalone use only (`commit` / `poll_backends`): a private queue set.
    own_storage: Option<Box<QueueSet>>,
    storage_scratch: Vec<IoCompletion>,
    /// Slow work emitted and not yet taken (`offload.rs`).
    offload_out: Vec<Offload>,
    /// Storage requests and offloads emitted and not yet completed.
    in_flight: usize,
}

/// QoS on an I/O queue (`qos.rs`).
pub(crate) struct QosState {
    /// The limits and the commands waiting for them; None when nothing limits it.
    pub gate: Option<Box<crate::qos::Gate>>,
    /// The subsystem's QoS generation last adopted.
    pub gen: u64,
    /// The host's fair-sharing weight from it.
    pub weight: u32,
}

/// The queue's life in time: ticks, keep-alive, authentication's timer,
/// teardown (`lifecycle.rs`).
pub(crate) struct Life {
    /// The time of the first tick.
    started: Option<Instant>,
    /// The time of the last tick.
    pub clock: Option<Instant>,
    /// The event loop's clock for the current pass ([`NvmeQueue::set_now`]):
    /// latency samples are stamped with it, so the command layer itself
    /// reads no clock.
    pub now: Option<Instant>,
    /// Latency samples are taken (a metrics listener runs); the target's
    /// flag, copied at each tick so the I/O path reads nothing shared.
    pub timing: bool,
    /// Admin queue: the tick at or after the last Keep Alive.
    last_keep_alive: Option<Instant>,
    /// A Keep Alive (or Connect, or a new KATO) arrived since the last tick.
    keep_alive_seen: bool,
    /// The controller's reset epoch when this I/O queue connected.
    epoch: u32,
    /// The command layer wants the queue closed (Disconnect, deleted queue,
    /// keep-alive expiry, shutdown).
    closing: bool,
    /// The target's listener generation last seen (a removed listener
    /// closes the connections that came through it).
    listeners_gen: u64,
    /// DH-HMAC-CHAP state when the Connect asked the host to authenticate
    /// (`auth.rs`).
    pub auth: Option<Box<farflash_auth::CtrlAuth>>,
    /// The tick at or after the last authentication message (or the
    /// Connect): the transaction timeout counts from there.
    pub auth_since: Option<Instant>,
    /// The subsystem's `releases` when the namespace table was last loaded.
    ns_releases: u64,
    /// The last tick that reloaded the table to let removed namespaces go.
    ns_released_at: Option<Instant>,
}

/// `C`: a transport's state of one command, kept in the command's slot
/// (`Transport::Cmd`; `()` for a queue without a transport).
pub struct NvmeQueue<C = ()> {
    pub(crate) target: Arc<Target>,
    pub(crate) via: Via,
    pub(crate) qid: u16,
    pub(crate) ctrl: Option<Arc<Controller>>,
    pub(crate) sqsize: u16,
    pub(crate) slots: CmdSlots<C>,
    /// The subsystem's namespaces as this queue sees them.
    pub(crate) ns: NsTable,
    pub(crate) blocks: Blocks,
    pub(crate) pool: BufPool,
    out: Outbox<C>,
    pub(crate) qos: QosState,
    pub(crate) stats: Option<Arc<QueueStats>>,
    pub(crate) life: Life,
    /// Compare, Verify, Copy and fused pairs in progress (run by `crate::nvm`).
    pub(crate) nvm: crate::nvm_state::NvmState,
}

impl<C: Default> NvmeQueue<C> {
    /// A queue on a new connection from `peer` to listener `local`;
    /// `trtype` names the transport in the Error log.
    pub fn new(
        target: Arc<Target>,
        local: SocketAddr,
        peer: SocketAddr,
        trtype: u8,
    ) -> NvmeQueue<C> {
        let life = Life {
            started: None,
            clock: None,
            now: None,
            timing: target.latency_timing(),
            last_keep_alive: None,
            keep_alive_seen: false,
            epoch: 0,
            closing: false,
            listeners_gen: target.listeners_generation(),
            auth: None,
            auth_since: None,
            ns_releases: 0,
            ns_released_at: None,
        };
        let mut q = NvmeQueue {
            target,
            via: Via {
                local,
                peer,
                trtype,
                tls: None,
            },
            qid: 0,
            ctrl: None,
            sqsize: PRE_CONNECT_SLOTS as u16 - 1,
            slots: CmdSlots {
                entries: Vec::new(),
                free: Vec::new(),
                cid_busy: vec![0; 1024],
                aers: Vec::new(),
            },
            ns: NsTable::default(),
            blocks: Blocks::default(),
            pool: BufPool::new(),
            out: Outbox {
                done: Vec::new(),
                done_spare: Vec::new(),
                connected: None,
                sqhd: 0,
                sq_flow_control: true,
                storage_out: Vec::new(),
                own_storage: None,
                storage_scratch: Vec::new(),
                offload_out: Vec::new(),
                in_flight: 0,
            },
            qos: QosState {
                gate: None,
                gen: 0,
                weight: 1,
            },
            stats: None,
            life,
            nvm: crate::nvm_state::NvmState::default(),
        };
        q.grow_slots(PRE_CONNECT_SLOTS);
        q
    }

    /// The time of the event loop's current pass (taken once per pass,
    /// not per command): commands arriving and completing in it are
    /// stamped with it when latency is sampled.
    #[inline]
    pub fn set_now(&mut self, now: Instant) {
        self.life.now = Some(now);
    }

    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// The queue runs over a secure channel set up with a PSK identity
    /// naming `hostnqn` and `subnqn`: its Connect must name the same.
    pub fn set_tls_identity(&mut self, hostnqn: &str, subnqn: &str) {
        self.via.tls = Some(Box::new((hostnqn.to_owned(), subnqn.to_owned())));
    }

    /// 0's based queue size.
    pub fn sqsize(&self) -> u16 {
        self.sqsize
    }

    /// Whether a Connect bound the queue to a controller.
    pub fn is_connected(&self) -> bool {
        self.ctrl.is_some()
    }

    /// Command slots (indices a binding may use as transfer tags).
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The queue's buffer pool (bindings return sent buffers to it).
    pub fn pool(&mut self) -> &mut BufPool {
        &mut self.pool
    }

    /// Allocates the data buffer of the command in `slot` (its full transfer
    /// length) and returns it, for the binding to fill with host data.
    pub fn data_buf(&mut self, slot: u16) -> &mut [u8] {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return &mut [];
        };
        let buf = self.pool.get(s.len as usize);
        s.buf = Some(buf);
        match s.buf.as_mut() {
            Some(b) => &mut b.as_mut_slice()[..s.len as usize],
            None => &mut [],
        }
    }

    /// The data buffer [`NvmeQueue::data_buf`] allocated, if any.
    pub fn data_mut(&mut self, slot: u16) -> Option<&mut [u8]> {
        let s = self.slots.get_mut(slot as usize)?;
        let len = s.len as usize;
        s.buf.as_mut().map(|b| &mut b.as_mut_slice()[..len])
    }

    /// A command was taken off the submission queue: the head moves on,
    /// wrapping at the queue's size.
    pub(crate) fn advance_sqhd(&mut self) {
        self.out.sqhd = ((self.out.sqhd as u32 + 1) % (self.sqsize as u32 + 1)) as u16;
    }

    /// Whether the host left SQ flow control on (Connect CATTR bit 2 clear).
    pub fn sq_flow_control(&self) -> bool {
        self.out.sq_flow_control
    }

    /// The completion queue entry of `c` as it goes out now: its result,
    /// status and CID, this queue's SQID, and the SQ head, FFFFh when the
    /// host disabled SQ flow control (Base §4.2.1; Fabrics §6.3, TP 8005).
    pub fn cqe(&self, c: &Completion<C>) -> Cqe {
        Cqe {
            dw0: c.result as u32,
            dw1: (c.result >> 32) as u32,
            sqhd: if self.out.sq_flow_control {
                self.out.sqhd
            } else {
                0xFFFF
            },
            sqid: self.qid,
            cid: c.cid,
            status: c.status,
        }
    }

    /// Moves finished commands to `out` (appends).
    pub fn take_completions(&mut self, out: &mut Vec<Completion<C>>) {
        out.append(&mut self.out.done);
    }

    /// Whether completions wait for the binding driver.
    pub(crate) fn has_done(&self) -> bool {
        !self.out.done.is_empty()
    }

    /// The completions finished so far, for the binding driver to send;
    /// give the emptied vector back with [`NvmeQueue::give_back_done`] (a
    /// double buffer: no allocation per round).
    pub(crate) fn take_done(&mut self) -> Vec<Completion<C>> {
        let spare = std::mem::take(&mut self.out.done_spare);
        std::mem::replace(&mut self.out.done, spare)
    }

    /// Returns the vector [`NvmeQueue::take_done`] handed out, emptied.
    pub(crate) fn give_back_done(&mut self, mut v: Vec<Completion<C>>) {
        v.clear();
        self.out.done_spare = v;
    }

    /// What a Connect made of the queue, once (before its completion).
    pub fn take_connected(&mut self) -> Option<Connected> {
        self.out.connected.take()
    }

    /// Whether the queue must authenticate before it runs commands other
    /// than Fabrics ones (Base §8.13: Authentication Required).
    pub fn needs_auth(&self) -> bool {
        self.life.auth.as_ref().is_some_and(|a| !a.authenticated())
    }

    /// Stops the queue (Disconnect).
    pub fn close(&mut self) {
        self.life.closing = true;
    }

    /// Whether the command layer wants the queue closed.
    pub fn wants_close(&self) -> bool {
        self.life.closing
    }

    // ----- for the command modules -------------------------------------------

    /// A zeroed reply buffer of `len` bytes for the command in `idx`; the
    /// executor fills it, and the completion carries `min(len, transfer length)`.
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
    ) {
        self.qid = qid;
        self.sqsize = sqsize;
        // The Connect was the queue's first entry (Fabrics §6.3).
        self.out.sqhd = (1 % (sqsize as u32 + 1)) as u16;
        self.out.sq_flow_control = !disable_sq_flow;
        self.life.epoch = ctrl.epoch();
        if let Some(sub) = ctrl.subsystem() {
            self.life.ns_releases = sub.releases();
            self.ns.load(&sub.namespaces(), sub.generation());
            self.blocks.ana_blocked = sub.ana().blocked(
                ListenTransport::from_trtype(self.via.trtype),
                &self.via.local,
            );
            self.blocks.resv_block = self.resv_blocked(&ctrl.hostid);
            self.stats = Some(sub.stats.register(&ctrl.hostnqn));
        }
        self.ctrl = Some(ctrl);
        self.refresh_qos();
        self.life.keep_alive_seen = true;
        self.out.connected = Some(Connected {
            qid,
            sqsize,
            disable_sq_flow,
        });
        self.grow_slots(sqsize as usize + 1);
    }

    /// Grows the slot table (slots in use stay where they are).
    fn grow_slots(&mut self, n: usize) {
        let old = self.slots.len();
        if n > old {
            self.slots.entries.extend((old..n).map(|_| Slot::empty()));
            self.slots.free.extend((old as u16..n as u16).rev());
        }
    }

    /// The transport's state of the command in `slot` (None: no such slot).
    #[inline]
    pub fn cmd(&self, slot: u16) -> Option<&C> {
        self.slots.get(slot as usize).map(|s| &s.xport)
    }

    /// The transport's state of the command in `slot`, to change.
    #[inline]
    pub fn cmd_mut(&mut self, slot: u16) -> Option<&mut C> {
        self.slots.get_mut(slot as usize).map(|s| &mut s.xport)
    }

    /// A Keep Alive (Base §5.27) or a new KATO: the timer restarts at the next tick.
    pub(crate) fn note_keep_alive(&mut self) {
        self.life.keep_alive_seen = true;
    }

    pub(crate) fn namespace_index(&self, nsid: u32) -> Option<usize> {
        self.ns.key(nsid)
    }

    /// The host turned the volatile write cache off (Set Features 06h): each
    /// write is durable when it completes, as with FUA.
    #[inline]
    pub(crate) fn write_through(&self) -> bool {
        self.ctrl.as_ref().is_some_and(|c| c.write_through())
    }

    /// Picks up namespace changes of the subsystem (a reload) between commands.
    pub(crate) fn refresh_namespaces(&mut self) {
        if let Some(sub) = self.ctrl.as_ref().and_then(|c| c.subsystem()) {
            let g = sub.generation();
            if g != self.ns.generation() {
                // Read before the list: a removal after it is seen next time.
                self.life.ns_releases = sub.releases();
                let list = sub.namespaces();
                self.ns.load(&list, g);
                if self.out.storage_out.is_empty() {
                    // No emitted request names a tombstone: let removed
                    // namespaces go now (a queue that never does storage
                    // I/O, the admin queue, would hold them for its life,
                    // and with them their storage queues' descriptors).
                    self.ns.collect();
                }
                self.blocks.ana_blocked = sub.ana().blocked(
                    ListenTransport::from_trtype(self.via.trtype),
                    &self.via.local,
                );
                let h = self.ctrl.as_ref().map_or([0; 16], |c| c.hostid);
                self.blocks.resv_block = self.resv_blocked(&h);
            }
        }
    }

    /// The namespaces whose reservation limits this queue's host; none on
    /// the admin queue (reservations restrict I/O commands only, NVM Command
    /// Set 1.0 §7.6 table "Command Behavior in the Presence of a
    /// Reservation"): no walk of every namespace there.
    fn resv_blocked(&self, h: &crate::resv::HostId) -> Vec<(usize, crate::resv::Access)> {
        if self.qid == 0 {
            return Vec::new();
        }
        self.ns.resv_blocked(h)
    }

    /// At a tick: an idle queue lets namespaces removed from its subsystem
    /// (and their storage) go, by their flag ([`NsTable::release_left`]),
    /// not by reloading the list; only when some namespace left since the
    /// last look, and at most once every [`RELEASE_EVERY`] (counted from the
    /// queue's first tick, so queues connected at different times look at
    /// different ticks). A change ticks every queue of an event loop within
    /// 100 ms: reloading a list of thousands of namespaces on thousands of
    /// queues at every change held a loop, and its Keep Alives, for over a
    /// second during bursts of namespace_add and namespace_remove (issue 33,
    /// benches/scale.sh). Other changes (namespaces added, ANA,
    /// reservations) wait for the queue's next command, which loads the list
    /// first.
    pub(crate) fn release_removed_namespaces(&mut self, now: Instant) {
        let Some(sub) = self.ctrl.as_ref().and_then(|c| c.subsystem()) else {
            return;
        };
        let releases = sub.releases();
        let since = self.life.ns_released_at.or(self.life.started);
        if releases == self.life.ns_releases
            || since.is_some_and(|t| now.saturating_duration_since(t) < RELEASE_EVERY)
        {
            return;
        }
        // Read before the flags: a namespace leaving after it is seen next time.
        self.life.ns_releases = releases;
        self.life.ns_released_at = Some(now);
        if self.ns.release_left() && self.out.storage_out.is_empty() {
            self.ns.collect();
        }
    }

    /// Whether the I/O queue was deleted: its controller is gone or was
    /// reset since it connected (Base §3.7.2).
    pub(crate) fn deleted(&self) -> bool {
        self.qid != 0
            && self
                .ctrl
                .as_ref()
                .is_some_and(|c| !c.is_alive() || c.epoch() != self.life.epoch)
    }
}

impl<C> Drop for NvmeQueue<C> {
    fn drop(&mut self) {
        if let Some(st) = &self.stats {
            if let Some(sub) = self.ctrl.as_ref().and_then(|c| c.subsystem()) {
                sub.stats.retire(st);
            }
        }
        if let Some(c) = &self.ctrl {
            if self.qid == 0 {
                // The admin queue carries the association (Base 2.3 §3.1.2).
                tracing::info!(cntlid = c.cntlid, peer = %self.via.peer, local = %self.via.local, "controller association ended");
                self.target.remove_controller(c);
            } else if c.epoch() == self.life.epoch {
                // After a reset the QID may belong to a newer queue: leave it.
                let mut st = c.lock();
                st.io_qids.retain(|&q| q != self.qid);
            }
        }
    }
}
