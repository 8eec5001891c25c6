//! What a transport is to the event loops: a [`Listener`] the acceptor
//! watches, the [`Incoming`] connections it accepts, and the [`Link`] a
//! worker drives. The worker's one connection table, its scheduler, its
//! storage queues and the acceptor are written against these traits only:
//! adding a transport means implementing them (`tcp.rs` and `rdma.rs` are
//! the built-in ones; `tests/loopback.rs` is a whole transport in one
//! file) and registering it, so listen addresses can name it
//! ([`crate::register`]), or handing its listeners to
//! [`crate::serve_listeners`].
//!
//! A connection is a trait object: the worker calls it once per event,
//! tick and pass (per wake-up, not per PDU); inside its pass the
//! transport's own code runs with static calls, and hands its storage
//! requests out and takes their completions back through [`Cx::pump`],
//! monomorphised for it.
//!
//! Routing: a connection's storage requests and offloads go out tagged
//! with its index in the worker's table ([`tag_bits`]), and their
//! completions come back by that tag ([`owner_of`]) to
//! [`Link::deliver`].

use crate::offload::OffloadPort;
use crate::sched::{Pass, Scheduler, State};
use farflash_backend::{IoCompletion, QueueSet};
use farflash_core::listen::ListenTransport;
use farflash_core::{Binding, OffloadDone, Target, Transport, TAG_SLOT_BITS};
use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

/// A listening endpoint of some transport, owned by the acceptor.
pub trait Listener: Send {
    /// Watches the listener's fd(s) under `token` (readable: something to
    /// accept).
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()>;
    /// Stops watching them.
    fn deregister(&mut self, registry: &Registry);
    /// Takes every connection that is waiting, appending them to `out`;
    /// errors are the listener's to log (it is not removed).
    fn accept(&mut self, target: &Arc<Target>, out: &mut Vec<Box<dyn Incoming>>);
    /// The address it listens on, if it has one.
    fn local_addr(&self) -> Option<SocketAddr>;
    /// Which configured transport it is (the management API removes a
    /// listener by address and transport); None: none of those.
    fn transport(&self) -> Option<ListenTransport>;
}

/// An accepted connection on its way to a worker (made on the acceptor's
/// thread, opened on the worker's).
pub trait Incoming: Send {
    /// Who connected, for the log.
    fn peer(&self) -> Option<SocketAddr>;
    /// The worker's connection, clocked from `now`.
    fn open(self: Box<Self>, target: &Arc<Target>, now: Instant) -> Box<dyn Link>;
}

/// One connection of a worker, whatever its transport.
pub trait Link {
    /// Watches the connection's fds under `token` (the worker's index of
    /// it); on failure nothing stays registered.
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()>;
    /// Stops watching them.
    fn deregister(&mut self, registry: &Registry);
    /// epoll reported `ev` for it: take what the transport must take at
    /// once (a half-close, CM events); returns whether it may have
    /// something to read (a pass is due).
    fn on_event(&mut self, ev: &Event) -> bool;
    /// Its periodic work (the command layer's `tick`).
    fn tick(&mut self, now: Instant) -> Ticked;
    /// Its turn of a round: move as far as it goes without blocking (within
    /// [`Cx::budget`] if it reads a byte stream), report the pass
    /// ([`Cx::driven`]) and say whether it is to be closed.
    fn drive(&mut self, cx: &mut Cx<'_>) -> After;
    /// Data-buffer bytes it holds (fair sharing: a quiet connection holds
    /// little).
    fn pending_bytes(&self) -> usize {
        0
    }
    /// Storage requests and offloads out and not yet completed.
    fn in_flight(&self) -> usize;
    /// Hands its offloads and storage requests out, tagged for connection
    /// `owner` (usually [`hand_out`] on its binding); whether it had any.
    fn hand_out(&mut self, owner: usize, to: Sinks<'_>) -> bool;
    /// Takes back one completion (usually [`deliver`] on its binding).
    fn deliver(&mut self, now: Instant, done: Done);
    /// It is being closed (already deregistered): stop its I/O (a socket is
    /// shut down). It stays in the table until nothing is in flight.
    fn shut(&mut self) {}
}

/// What a connection's tick asks of the worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticked {
    /// It has something to do (an AEN to send, a close): a pass.
    pub wake: bool,
    /// When its QoS throttle lifts, if it is throttled.
    pub throttle: Option<Instant>,
    /// Close it now.
    pub close: bool,
}

/// What becomes of a connection after its pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    Open,
    Close,
}

/// The tag bits to OR into a request of connection `i`: the command layer
/// keeps the command's slot in the tag's low [`TAG_SLOT_BITS`]; the
/// connection's index is the rest.
pub(crate) fn tag_bits(i: usize) -> u64 {
    (i as u64) << TAG_SLOT_BITS
}

/// Whose request `tag` is.
pub(crate) fn owner_of(tag: u64) -> usize {
    (tag >> TAG_SLOT_BITS) as usize
}

/// Where the worker sends a connection's work.
pub struct Sinks<'a> {
    offload: &'a OffloadPort,
    storage: &'a mut QueueSet,
    /// Requests a storage queue refused, completed with their error.
    failed: &'a mut Vec<IoCompletion>,
}

/// Hands binding `b`'s offloads and storage requests out, tagged for
/// connection `owner`; returns whether it had any.
pub fn hand_out<T: Transport>(b: &mut Binding<T>, owner: usize, to: Sinks<'_>) -> bool {
    let hi = tag_bits(owner);
    let any = b.has_offloads() || b.has_storage_requests();
    if b.has_offloads() {
        b.take_offloads(|mut o| {
            o.tag |= hi;
            to.offload.submit(o);
        });
    }
    if b.has_storage_requests() {
        b.take_storage(|backend, mut req| {
            req.tag |= hi;
            to.storage.submit(backend, req, to.failed);
        });
    }
    any
}

/// What came back for one of a connection's commands.
pub enum Done {
    Storage(IoCompletion),
    Offload(OffloadDone),
}

/// Hands `done` to binding `b`, stamped with the pass's clock.
pub fn deliver<T: Transport>(b: &mut Binding<T>, now: Instant, done: Done) {
    b.set_now(now);
    match done {
        Done::Storage(s) => b.on_storage_completion(s),
        Done::Offload(o) => b.on_offload_completion(o),
    }
}

/// The worker's connection table: every connection by index (also its
/// token and the connection half of its storage tags).
pub(crate) type Table = Vec<Option<Box<dyn Link>>>;

/// The worker's storage side, shared by its connections: one queue per
/// namespace, the offload helper, and the completions being routed.
pub(crate) struct Routes {
    pub storage: QueueSet,
    /// Slow work (authentication's DH) goes to the helper thread and comes
    /// back here, tagged like storage requests (`offload.rs`).
    pub offload: OffloadPort,
    /// Storage eventfds registered with the poller.
    fds: Vec<RawFd>,
    /// Queues open when `fds` was last brought up to date.
    opened: usize,
    /// Completion scratch (reused: no allocation per batch).
    comps: Vec<IoCompletion>,
}

impl Routes {
    pub(crate) fn new(storage: QueueSet, offload: OffloadPort) -> Routes {
        Routes {
            storage,
            offload,
            fds: Vec::new(),
            opened: 0,
            comps: Vec::new(),
        }
    }

    /// Registers the eventfds of newly opened storage queues under `token`
    /// (closed ones left epoll when their fd closed); open queues get
    /// housekeeping.
    pub(crate) fn sync_fds(
        &mut self,
        registry: &Registry,
        token: Token,
        sched: &mut Scheduler,
        now: Instant,
    ) {
        let fds: Vec<RawFd> = self.storage.notify_fds().collect();
        for fd in &fds {
            if self.fds.contains(fd) {
                continue;
            }
            if let Err(e) = registry.register(&mut SourceFd(fd), token, Interest::READABLE) {
                tracing::warn!("cannot watch a storage queue's eventfd: {e}");
            }
        }
        self.fds = fds;
        self.opened = self.storage.len();
        if !self.storage.is_empty() {
            sched.schedule_housekeeping(now);
        }
    }

    /// Reaps the storage queues and hands each completion to the connection
    /// its tag names: `current` (the one being driven, out of the table)
    /// directly, others through the table, queued for a pass. Returns
    /// whether anything was routed.
    pub(crate) fn route_storage<L: Link + ?Sized>(
        &mut self,
        mut current: Option<(usize, &mut L)>,
        table: &mut Table,
        sched: &mut Scheduler,
        now: Instant,
    ) -> bool {
        let mut comps = std::mem::take(&mut self.comps);
        self.storage.reap(&mut comps);
        let any = !comps.is_empty();
        for c in comps.drain(..) {
            let owner = owner_of(c.tag);
            match current.as_mut() {
                Some((i, me)) if *i == owner => me.deliver(now, Done::Storage(c)),
                _ => {
                    if route(table, owner, now, Done::Storage(c)) {
                        sched.wake(owner);
                    }
                }
            }
        }
        self.comps = comps;
        any
    }

    /// Hands finished offloads to the connections their tags name and
    /// queues those for a pass.
    pub(crate) fn route_offloads(
        &mut self,
        table: &mut Table,
        sched: &mut Scheduler,
        now: Instant,
    ) {
        while let Some(d) = self.offload.try_recv() {
            let owner = owner_of(d.tag);
            if route(table, owner, now, Done::Offload(d)) {
                sched.wake(owner);
            }
        }
    }
}

/// Hands `done` to connection `owner`; false when there is none (a bug:
/// connections keep their index until their requests complete).
fn route(table: &mut Table, owner: usize, now: Instant, done: Done) -> bool {
    match table.get_mut(owner).and_then(Option::as_mut) {
        Some(c) => {
            c.deliver(now, done);
            true
        }
        None => {
            tracing::error!(owner, "completion for no connection");
            false
        }
    }
}

/// What a connection's pass may use of its worker: the clock, its
/// scheduling, its fds' registration, and the storage queues.
pub struct Cx<'a> {
    i: usize,
    now: Instant,
    contended: bool,
    registry: &'a Registry,
    /// The token the storage eventfds are registered under.
    storage_token: Token,
    sched: &'a mut Scheduler,
    routes: &'a mut Routes,
    /// The table, this connection taken out of it.
    others: &'a mut Table,
}

impl<'a> Cx<'a> {
    #[expect(
        clippy::too_many_arguments,
        reason = "the worker's parts, lent for one pass"
    )]
    pub(crate) fn new(
        i: usize,
        now: Instant,
        contended: bool,
        registry: &'a Registry,
        storage_token: Token,
        sched: &'a mut Scheduler,
        routes: &'a mut Routes,
        others: &'a mut Table,
    ) -> Cx<'a> {
        Cx {
            i,
            now,
            contended,
            registry,
            storage_token,
            sched,
            routes,
            others,
        }
    }

    /// The pass's clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The connection's index in its worker's table (its token).
    pub fn index(&self) -> usize {
        self.i
    }

    /// The connection's scheduling state at the start of the pass.
    pub fn state(&self) -> State {
        self.sched.state(self.i).unwrap_or(State::Failed)
    }

    /// Bytes it may read this pass, for a host of QoS weight `weight`.
    pub fn budget(&self, weight: u32) -> usize {
        self.sched.budget(self.i, self.contended, weight)
    }

    /// The poller its fds are registered with (to change its interest).
    pub fn registry(&self) -> &Registry {
        self.registry
    }

    /// Whether its output is blocked (it waits for writability).
    pub fn blocked(&self) -> bool {
        self.sched.blocked(self.i)
    }

    /// Its output blocked or unblocked (after changing its interest).
    pub fn set_blocked(&mut self, blocked: bool) {
        self.sched.set_blocked(self.i, blocked);
    }

    /// How its pass went (the scheduler's report).
    pub fn driven(&mut self, p: Pass) {
        self.sched.on_driven(self.i, p, self.now);
    }

    /// When its QoS throttle lifts (None: not throttled).
    pub fn set_throttle(&mut self, at: Option<Instant>) {
        self.sched.set_throttle(self.i, at);
    }

    /// Hands `me`'s storage requests to the worker's queues and routes
    /// every completion that is ready, until none comes back; returns
    /// whether anything completed.
    pub fn pump<L: Link + ?Sized>(&mut self, me: &mut L) -> bool {
        let mut any = false;
        loop {
            if me.in_flight() == 0 {
                // Nothing of this connection's to hand out or reap: others'
                // completions wake the loop through the queues' eventfds.
                return any;
            }
            let r = &mut *self.routes;
            let to = Sinks {
                offload: &r.offload,
                storage: &mut r.storage,
                failed: &mut r.comps,
            };
            // Authentication's DH and PTPL writes go to the helper thread,
            // storage to the worker's queues.
            me.hand_out(self.i, to);
            if r.storage.len() != r.opened {
                r.sync_fds(self.registry, self.storage_token, self.sched, self.now);
            }
            r.storage.commit();
            if !r.route_storage(Some((self.i, &mut *me)), self.others, self.sched, self.now) {
                return any;
            }
            any = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{owner_of, tag_bits};
    use farflash_core::TAG_SLOT_BITS;

    #[test]
    fn owners_survive_the_tag_and_leave_the_slot_alone() {
        for owner in [0, 3, 7, (1 << 31) - 1, u32::MAX as usize] {
            let slot = 0xABCD_u64;
            let tag = tag_bits(owner) | slot;
            assert_eq!(owner_of(tag), owner);
            assert_eq!(tag & ((1 << TAG_SLOT_BITS) - 1), slot);
        }
        assert_ne!(tag_bits(1), tag_bits(2));
    }
}
