//! What every transport binding shares, written once: a [`Binding`] is an
//! [`NvmeQueue`] and a [`Transport`] (NVMe/TCP's framing and output queue,
//! NVMe/RDMA's work queue), and after every call into the command layer
//! it sends what the command layer finished: the Connect's new geometry
//! first, then each completion with its CQE ([`NvmeQueue::cqe`]: SQHD and
//! SQID filled in), until nothing more completes.
//!
//! A transport only moves capsules, data and responses. Its receive path
//! runs inside [`Binding::with`], which drains afterwards; the event loop's
//! other calls (storage and offload hand-off and completions, ticks, QoS
//! resumes) are the binding's own methods, the same for every transport.

use crate::command::{Completion, Connected};
use crate::queue::{NvmeQueue, Offload, OffloadDone};
use farflash_backend::{IoCompletion, IoRequest, SharedBackend};
use farflash_wire::Cqe;
use std::time::Instant;

/// What a transport binding does differently from the others.
pub trait Transport: Sized {
    /// The transport's state of one command (its data transfer, its
    /// response), kept in the command's slot beside the command layer's:
    /// reset when a command takes the slot, handed back with its
    /// [`Completion`].
    type Cmd: Default;

    /// The transport wants the queue closed (a fatal transport error, the
    /// host's termination): nothing more is read or run.
    fn closing(&self) -> bool;

    /// Nothing of the transport's is left to send (or, for RDMA, still
    /// posted on the device): a closing queue may be dropped.
    fn drained(&self) -> bool;

    /// A Connect succeeded, before its completion goes out: the queue's
    /// size, SQ flow control and data limits follow it.
    fn connected(&mut self, q: &mut NvmeQueue<Self::Cmd>, c: Connected);

    /// One finished command to the host: its data (`c.data`), if any, then
    /// its response carrying `cqe`.
    fn respond(&mut self, q: &mut NvmeQueue<Self::Cmd>, c: Completion<Self::Cmd>, cqe: Cqe);

    /// After a round of responses (NVMe/TCP starts the commands that
    /// waited for the buffer budget those freed). Anything it completes is
    /// sent in the next round.
    fn responded(&mut self, _q: &mut NvmeQueue<Self::Cmd>) {}
}

/// One queue of one transport: the command layer's [`NvmeQueue`] and the
/// transport's state, with the drain rule kept in one place.
pub struct Binding<T: Transport> {
    q: NvmeQueue<T::Cmd>,
    t: T,
}

impl<T: Transport> Binding<T> {
    pub fn new(q: NvmeQueue<T::Cmd>, t: T) -> Binding<T> {
        Binding { q, t }
    }

    /// The command layer's queue (tests and tools look at it).
    pub fn nvme(&self) -> &NvmeQueue<T::Cmd> {
        &self.q
    }

    /// The transport's state.
    pub fn transport(&self) -> &T {
        &self.t
    }

    /// The transport and the queue, without the drain: only for access that
    /// runs no command (a receive buffer to fill); everything else goes
    /// through [`Binding::with`].
    pub fn parts_mut(&mut self) -> (&mut T, &mut NvmeQueue<T::Cmd>) {
        (&mut self.t, &mut self.q)
    }

    /// Runs `f` on the transport and the queue (a receive, a transfer that
    /// finished, output the peer took), then sends what completed.
    pub fn with<R>(&mut self, f: impl FnOnce(&mut T, &mut NvmeQueue<T::Cmd>) -> R) -> R {
        let r = f(&mut self.t, &mut self.q);
        self.drain();
        r
    }

    /// Closing for either layer's reason.
    pub fn wants_close(&self) -> bool {
        self.t.closing() || self.q.wants_close()
    }

    /// Closing, and nothing left to send or to come back: the queue may go.
    pub fn finished(&self) -> bool {
        self.wants_close() && self.q.in_flight() == 0 && self.t.drained()
    }

    /// Storage requests and offloads emitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.q.in_flight()
    }

    /// Whether storage requests wait to be taken.
    pub fn has_storage_requests(&self) -> bool {
        self.q.has_storage_requests()
    }

    /// Hands the emitted storage requests to `run` (see
    /// [`NvmeQueue::take_storage`]); requests for a namespace that vanished
    /// complete at once.
    pub fn take_storage(&mut self, run: impl FnMut(&SharedBackend, IoRequest)) {
        self.q.take_storage(run);
        self.drain();
    }

    /// A storage request finished: its command completes into the output.
    pub fn on_storage_completion(&mut self, c: IoCompletion) {
        self.q.on_storage_completion(c);
        self.drain();
    }

    /// Whether slow work (authentication's DH, a PTPL write) waits to be taken.
    pub fn has_offloads(&self) -> bool {
        self.q.has_offloads()
    }

    /// Hands the slow work to `run`; each comes back, once, through
    /// [`Binding::on_offload_completion`].
    pub fn take_offloads(&mut self, run: impl FnMut(Offload)) {
        self.q.take_offloads(run);
    }

    /// Slow work finished: its command goes on.
    pub fn on_offload_completion(&mut self, d: OffloadDone) {
        self.q.on_offload_completion(d);
        self.drain();
    }

    /// The event loop's clock for this pass (latency samples).
    #[inline]
    pub fn set_now(&mut self, now: Instant) {
        self.q.set_now(now);
    }

    /// The host's fair-sharing weight (QoS `weight`, default 1).
    pub fn share_weight(&self) -> u32 {
        self.q.share_weight()
    }

    /// When commands waiting for QoS tokens may run (None: none waits, or
    /// the queue is closing and they never will).
    pub fn throttle_wake(&self) -> Option<Instant> {
        if self.t.closing() {
            return None;
        }
        self.q.throttle_wake()
    }

    /// Runs the commands whose QoS tokens have come; returns whether any did.
    pub fn resume_throttled(&mut self) -> bool {
        if self.t.closing() {
            return false;
        }
        let any = self.q.resume_throttled();
        if any {
            self.drain();
        }
        any
    }

    /// Periodic work of the command layer (keep-alive, AERs, teardown).
    pub fn tick(&mut self, now: Instant) {
        if self.t.closing() {
            return;
        }
        self.q.tick(now);
        self.drain();
    }

    /// Standalone use (tests, fuzzers, benchmarks): runs the storage
    /// requests and offloads on the queue's private queue set.
    pub fn commit(&mut self) {
        self.q.commit();
        self.drain();
    }

    /// Standalone use: reaps the private queue set until nothing completes
    /// (completions may resume waiting commands, whose requests are
    /// committed in turn). Returns whether anything completed.
    pub fn poll_backends(&mut self) -> bool {
        let mut any = false;
        while self.q.in_flight() > 0 && self.q.poll_backends() {
            any = true;
            self.drain();
            self.commit();
        }
        any
    }

    /// Sends what the command layer finished ([`drain`]).
    fn drain(&mut self) {
        drain(&mut self.q, &mut self.t);
    }
}

/// Sends what the command layer finished: the Connect's geometry, then
/// every completion with its CQE, round after round until none is left.
/// [`Binding`] runs it after every call, once however many commands the
/// call handled (NVMe/TCP: the PDUs of one receive): a completed command's
/// transport state left its slot with its [`Completion`], so a slot the
/// command layer freed may take a new command before the old one is sent.
fn drain<T: Transport>(q: &mut NvmeQueue<T::Cmd>, t: &mut T) {
    if let Some(c) = q.take_connected() {
        t.connected(q, c);
    }
    while q.has_done() {
        let mut done = q.take_done();
        for c in done.drain(..) {
            let cqe = q.cqe(&c);
            t.respond(q, c, cqe);
        }
        q.give_back_done(done);
        t.responded(q);
    }
}
