//! One event-loop thread and the connections it owns: the I/O shell around
//! the scheduler (`sched.rs`). Each pass it asks the scheduler how to wait
//! (spin on the hot connections, look at epoll, or sleep in `epoll_wait`
//! until [`Scheduler::poll_timeout`]), runs the ticks that are due, and
//! drives the round the scheduler orders, each connection through its
//! transport's [`Link::drive`]. Then it reports how each pass went.
//!
//! One connection table for every transport ([`Link`]: an NVMe/TCP
//! connection, an NVMe/RDMA queue pair, or any other [`Link`]), scheduled
//! the same way: whatever fd a connection registered (a socket, an RDMA
//! queue's completion channel) queues it for a round when epoll reports
//! it, and a round drives each in the order the scheduler gave. Nothing
//! here names a transport.
//!
//! Storage: the worker owns one queue per namespace ([`Routes`]), shared
//! by all its connections. A connection's storage requests and offloads
//! are taken after each pass's work ([`Cx::pump`]), tagged with the
//! connection's index above the command's slot, and their completions are
//! routed back by that tag, the same way for every transport. A
//! connection closed with requests in flight stays as a zombie (its fds
//! deregistered, [`Link::shut`]) until they have completed, so an index is
//! never reused while a completion may still name it.

use crate::link::{After, Cx, Incoming, Link, Routes, Table};
use crate::offload::OffloadPort;
use crate::sched::{Due, Scheduler, State, Wait};
use crate::sleep::SleepTimer;
use crate::LoopOptions;
use farflash_backend::QueueSet;
use farflash_core::config::PollMode;
use farflash_core::stats::LoopCounters;
use farflash_core::Target;
use farflash_nap::Woke;
use mio::{Events, Poll, Token};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// New connections and finished offloads.
pub(crate) const WAKE_TOKEN: Token = Token(usize::MAX);
/// The eventfds of the worker's storage queues.
const STORAGE_TOKEN: Token = Token(usize::MAX - 1);
/// Token of hybrid polling's timer (`sleep.rs`); connections' tokens are
/// their indices.
const SLEEP_TOKEN: Token = Token(usize::MAX - 2);
/// Depth the shared storage queues are opened with (io_uring rings of this
/// many entries; requests beyond it wait in the queue's overflow list).
const STORAGE_DEPTH: u32 = 1024;

pub(crate) struct Worker {
    target: Arc<Target>,
    poll: Poll,
    rx: Receiver<Box<dyn Incoming>>,
    stop: Arc<AtomicBool>,
    /// Connections alive on all workers (the acceptor enforces the cap).
    live: Arc<AtomicUsize>,
    drain: Duration,
    sched: Scheduler,
    /// Every connection, whatever its transport, by index (also its token
    /// and the connection half of its storage tags); free indices.
    conns: Table,
    free: Vec<usize>,
    /// The storage queues and the offload helper, shared by every
    /// connection here, and the routing of their completions.
    routes: Routes,
    /// The clock of the current pass, handed to the connections it drives
    /// (their latency samples; no clock read per command).
    now: Instant,
    /// `farflash_core::controller::changes` at the last scan.
    changes: u64,
    /// Hybrid polling's timer (`--poll hybrid` only).
    sleep: Option<SleepTimer>,
    /// This loop's sleeps (`stats`, metrics).
    slept: Arc<LoopCounters>,
}

/// Pins the calling thread to one CPU.
pub(crate) fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set, and CPU_SET
    // bounds-checks `cpu` against the set's size (it is below 1024, checked
    // when the CPU list was parsed).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Worker {
    pub fn new(
        target: Arc<Target>,
        poll: Poll,
        rx: Receiver<Box<dyn Incoming>>,
        stop: Arc<AtomicBool>,
        live: Arc<AtomicUsize>,
        offload: OffloadPort,
        opts: &LoopOptions,
    ) -> Worker {
        let now = Instant::now();
        let sleep = (opts.poll == PollMode::Hybrid)
            .then(|| SleepTimer::new(poll.registry(), SLEEP_TOKEN))
            .and_then(|t| {
                t.map_err(|e| {
                    tracing::warn!("hybrid polling without its timer ({e}): polling instead")
                })
                .ok()
            });
        let slept = target.loops.register();
        Worker {
            target,
            poll,
            rx,
            stop,
            live,
            drain: opts.drain,
            sched: Scheduler::new(opts.poll, opts.poll_idle, opts.fair_share, now),
            conns: Vec::new(),
            free: Vec::new(),
            routes: Routes::new(QueueSet::new(STORAGE_DEPTH), offload),
            now,
            changes: farflash_core::controller::changes(),
            sleep,
            slept,
        }
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut drain_deadline: Option<Instant> = None;
        loop {
            if !self.wait(&mut events) {
                return;
            }
            let now = Instant::now();
            self.now = now;
            while let Some(due) = self.sched.poll_due(now) {
                self.on_due(due, now);
            }
            if self.sched.has_ready() {
                // Connections queued while these are driven (a completion
                // routed to them) wait for the next round.
                let conns = &self.conns;
                let round = self.sched.next_round(|i| {
                    conns
                        .get(i)
                        .and_then(Option::as_ref)
                        .map_or(usize::MAX, |c| c.pending_bytes())
                });
                for &i in &round.conns {
                    self.drive(i, round.contended);
                }
                self.sched.finish_round(round, now);
            }
            if self.stop.load(Ordering::Acquire) {
                let deadline = *drain_deadline.get_or_insert(now + self.drain);
                if self.conns.iter().all(Option::is_none) {
                    return;
                }
                if now >= deadline {
                    tracing::warn!("shutdown: closing connections that did not drain in time");
                    return;
                }
                // Ticks close what shutdown ends; those with something to
                // send or to close get a pass (an RDMA queue closes in its
                // pass once flushed).
                for i in 0..self.conns.len() {
                    self.tick(i, now);
                }
            }
        }
    }

    /// Waits as the scheduler says (spin, look, sleep until an event or
    /// the next timer, or a bet's precise timer), takes the events in and
    /// counts the sleeps; false when epoll failed (the loop ends).
    fn wait(&mut self, events: &mut Events) -> bool {
        let now = Instant::now();
        let (timeout, timed) = match self.sched.wait(now) {
            Wait::Sleep(at) => match self
                .sleep
                .as_ref()
                .map(|t| t.arm(at.saturating_duration_since(now)))
            {
                // Until an event or the timer (which is never after
                // `poll_timeout`: that bound only guards the timer), then poll.
                Some(Ok(())) => {
                    let bound = self.sched.poll_timeout(now);
                    (bound.map(|t| t.saturating_duration_since(now)), true)
                }
                _ => {
                    self.sched.on_woken(now, Woke::Aborted);
                    (Some(Duration::ZERO), false)
                }
            },
            Wait::Poll(timeout) => (timeout, false),
            Wait::Direct => return true,
        };
        if let Err(e) = self.poll.poll(events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("poll failed: {e}");
                return false;
            }
        }
        // Completions routed from the events are stamped after the wait.
        self.now = Instant::now();
        let slept = (self.now - now).as_nanos() as u64;
        if timed {
            let arrival = events.iter().any(|e| e.token() != SLEEP_TOKEN);
            let how = if arrival { Woke::Arrival } else { Woke::Timer };
            let missed = self.sched.on_woken(self.now, how);
            self.slept.slept(true, missed, slept);
        } else if timeout != Some(Duration::ZERO) {
            self.slept.slept(false, false, slept);
        }
        self.take_events(events);
        true
    }

    /// Queues the connections epoll reported (new arrivals on the wake token).
    fn take_events(&mut self, events: &Events) {
        for ev in events.iter() {
            let t = ev.token();
            if t == SLEEP_TOKEN {
                continue;
            }
            if t == WAKE_TOKEN {
                self.accept_new();
                self.routes
                    .route_offloads(&mut self.conns, &mut self.sched, self.now);
            } else if t == STORAGE_TOKEN {
                self.routes.route_storage::<dyn Link>(
                    None,
                    &mut self.conns,
                    &mut self.sched,
                    self.now,
                );
            } else {
                let i = t.0;
                let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                    continue;
                };
                let readable = c.on_event(ev);
                self.sched.on_event(i, readable);
            }
        }
    }

    /// Runs a timer the scheduler says is due.
    fn on_due(&mut self, due: Due, now: Instant) {
        match due {
            Due::Tick(id) => self.tick(id, now),
            Due::Scan => {
                // Something every queue should see soon changed (a
                // controller killed, an event, a management change): idle
                // queues, whose own ticks are a second apart, tick now.
                let changes = farflash_core::controller::changes();
                if changes != self.changes {
                    self.changes = changes;
                    for i in 0..self.conns.len() {
                        self.tick(i, now);
                    }
                }
            }
            Due::Housekeeping => {
                if self.routes.storage.collect() {
                    self.routes.sync_fds(
                        self.poll.registry(),
                        STORAGE_TOKEN,
                        &mut self.sched,
                        self.now,
                    );
                }
                if !self.routes.storage.is_empty() {
                    self.sched.schedule_housekeeping(now);
                }
            }
        }
    }

    /// A connection's periodic work (the command layer's `tick`).
    fn tick(&mut self, i: usize, now: Instant) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let t = c.tick(now);
        if t.close {
            self.close(i);
            return;
        }
        self.sched.set_throttle(i, t.throttle);
        // Only connections the tick gave work (an AEN to send, a close)
        // need a pass; the rest wait for their events.
        if t.wake {
            self.sched.wake(i);
        }
    }

    /// Takes the connections the acceptor handed over: opens each as its
    /// transport says, registers its fds under its index, and queues it
    /// for a first pass.
    fn accept_new(&mut self) {
        while let Ok(nc) = self.rx.try_recv() {
            let i = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let mut c = nc.open(&self.target, self.now);
            match c.register(self.poll.registry(), Token(i)) {
                Ok(()) => {
                    self.conns[i] = Some(c);
                    self.sched.add(i, self.now);
                }
                Err(_) => {
                    // The transport said why; the connection is dropped.
                    self.live.fetch_sub(1, Ordering::AcqRel);
                    self.free.push(i);
                }
            }
        }
    }

    /// Drives connection `i` in its turn of a round: its transport's pass,
    /// out of the table while it runs (completions routed meanwhile reach
    /// it directly). A zombie's pass only routes its completions.
    fn drive(&mut self, i: usize, contended: bool) {
        let Some(state) = self.sched.state(i) else {
            return;
        };
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        let mut cx = Cx::new(
            i,
            self.now,
            contended,
            self.poll.registry(),
            STORAGE_TOKEN,
            &mut self.sched,
            &mut self.routes,
            &mut self.conns,
        );
        let after = if state == State::Zombie {
            cx.pump(&mut *c);
            After::Close
        } else {
            c.drive(&mut cx)
        };
        self.conns[i] = Some(c);
        if after == After::Close {
            self.close(i);
        }
    }

    /// Closes connection `i`: its fds leave epoll and its I/O stops; with
    /// storage requests in flight it becomes a zombie (index kept) until
    /// they complete, then it is dropped.
    fn close(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let zombie = self.sched.state(i) == Some(State::Zombie);
        if !zombie {
            c.deregister(self.poll.registry());
            c.shut();
        }
        if c.in_flight() > 0 {
            if !zombie {
                self.sched.close(i, true);
            }
            return;
        }
        self.sched.close(i, false);
        // An RDMA queue's drop logs how its data moved (`RdmaConn`'s Drop).
        self.conns[i] = None;
        self.live.fetch_sub(1, Ordering::AcqRel);
        self.free.push(i);
    }
}
