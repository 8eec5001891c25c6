//! One event-loop thread and the connections it owns: the I/O shell around
//! the scheduler (`sched.rs`). Each pass it asks the scheduler how to wait
//! (spin on the hot sockets, look at epoll, or sleep in `epoll_wait` until
//! [`Scheduler::poll_timeout`]), runs the ticks that are due, and drives
//! the round the scheduler orders: `recv` within the connection's budget,
//! hand the storage requests out, `writev` what the pass produced. Then it
//! reports how each pass went.
//!
//! One connection table for every transport ([`Link`]: an NVMe/TCP
//! connection or an NVMe/RDMA queue pair), scheduled the same way: a
//! socket's readiness and an RDMA queue's CQ events (its completion
//! channel's fd) both queue the connection for a round, and a round drives
//! each in the order the scheduler gave.
//!
//! Storage: the worker owns one queue per namespace ([`QueueSet`]), shared
//! by all its connections. A connection's storage requests and offloads
//! are taken after each pass's work (`link.rs` `hand_out`), tagged with the
//! connection's index above the command's slot, and their completions are
//! routed back by that tag (`deliver`), the same way for every transport. A
//! TCP connection closed with requests in flight stays as a zombie (socket
//! shut down) until they have completed, and an RDMA queue stays until none
//! is out, so an index is never reused while a completion may still name it.

use crate::conn::Conn;
use crate::link::{owner_of, Done, Link, Sinks};
use crate::offload::OffloadPort;
use crate::sched::{Due, Pass, Scheduler, State, Wait};
use crate::secure::{Detected, Secure};
use crate::sleep::SleepTimer;
use crate::LoopOptions;
use farflash_backend::{IoCompletion, QueueSet};
use farflash_core::config::PollMode;
use farflash_core::listen::SecureChannel;
use farflash_core::stats::LoopCounters;
use farflash_core::Target;
use farflash_nap::Woke;
use farflash_rdma_verbs::{Accepted, RdmaConn};
use farflash_tcp::QueuePair;
use farflash_tls::ServerConfig;
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
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

/// A connection the acceptor hands to a worker.
pub(crate) enum NewConn {
    Tcp {
        sock: TcpStream,
        local: SocketAddr,
        peer: SocketAddr,
    },
    Rdma(Accepted),
}

pub(crate) struct Worker {
    target: Arc<Target>,
    poll: Poll,
    rx: Receiver<NewConn>,
    stop: Arc<AtomicBool>,
    /// Connections alive on all workers (the acceptor enforces the cap).
    live: Arc<AtomicUsize>,
    drain: Duration,
    sched: Scheduler,
    /// Every connection, whatever its transport, by index (also its token
    /// and the connection half of its storage tags); free indices.
    conns: Vec<Option<Link>>,
    free: Vec<usize>,
    /// One storage queue per namespace, shared by every connection here.
    storage: QueueSet,
    /// Slow work (authentication's DH) goes to the helper thread and comes
    /// back here, tagged like storage requests (`offload.rs`).
    offload: OffloadPort,
    /// Storage eventfds registered with the poller.
    storage_fds: Vec<RawFd>,
    /// Queues open when `storage_fds` was last brought up to date.
    storage_opened: usize,
    /// Completion scratch (reused: no allocation per batch).
    comps: Vec<IoCompletion>,
    /// The clock of the current pass, handed to the connections it drives
    /// (their latency samples; no clock read per command).
    now: Instant,
    /// TLS server configuration, made at the first TLS connection (Err:
    /// OpenSSL 3 could not be loaded; said once).
    tls: Option<Result<ServerConfig, String>>,
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
        rx: Receiver<NewConn>,
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
            storage: QueueSet::new(STORAGE_DEPTH),
            offload,
            storage_fds: Vec::new(),
            storage_opened: 0,
            comps: Vec::new(),
            now,
            tls: None,
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
                        .map_or(usize::MAX, Link::pending_bytes)
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
                self.route_offloads();
            } else if t == STORAGE_TOKEN {
                self.route_completions(usize::MAX);
            } else {
                let i = t.0;
                let readable = match self.conns.get_mut(i).and_then(Option::as_mut) {
                    Some(Link::Tcp(c)) => {
                        // EPOLLRDHUP: the peer's FIN may sit right behind
                        // the last data; read on to the EOF instead of
                        // stopping at a short read.
                        c.hup |= ev.is_read_closed();
                        // Only writability (EPOLLOUT while output is
                        // blocked) leaves nothing to read.
                        !ev.is_writable()
                            || ev.is_readable()
                            || ev.is_read_closed()
                            || ev.is_error()
                    }
                    Some(Link::Rdma(r)) => {
                        // Its CM channel or its completion channel: CM
                        // events taken, the CQ to poll (and re-arm).
                        r.on_events();
                        true
                    }
                    None => continue,
                };
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
                if self.storage.collect() {
                    self.sync_storage_fds();
                }
                if !self.storage.is_empty() {
                    self.sched.schedule_housekeeping(now);
                }
            }
        }
    }

    /// A connection's periodic work (the command layer's `tick`).
    fn tick(&mut self, i: usize, now: Instant) {
        let wake = match self.conns.get_mut(i).and_then(Option::as_mut) {
            None => return,
            Some(Link::Tcp(c)) => {
                if let Some(s) = c.secure.as_mut() {
                    if let Err(why) = s.check_deadlines(now) {
                        tracing::warn!(peer = %c.peer, "TLS: closing the connection: {why}");
                        self.close(i);
                        return;
                    }
                }
                c.qp.tick(now);
                // QoS limits may have changed.
                self.sched.set_throttle(i, c.qp.throttle_wake());
                c.qp.output_len() > 0 || c.qp.wants_close()
            }
            Some(Link::Rdma(r)) => {
                // What the tick answered (an AEN) is posted at once.
                r.with_queue(|q| q.tick(now));
                let at = r.queue().throttle_wake();
                self.sched.set_throttle(i, at);
                r.wants_close()
            }
        };
        // Only connections the tick gave work (an AEN to send, a close)
        // need a pass; the rest wait for their events.
        if wake {
            self.sched.wake(i);
        }
    }

    /// Takes the connections the acceptor handed over: registers their fds
    /// (a socket, or an RDMA queue's CM and completion channels) under
    /// their index, and queues them for a first pass.
    fn accept_new(&mut self) {
        while let Ok(nc) = self.rx.try_recv() {
            let i = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let link = match nc {
                NewConn::Tcp { sock, local, peer } => self.new_tcp(i, sock, local, peer),
                NewConn::Rdma(a) => self.new_rdma(i, a),
            };
            match link {
                Some(l) => {
                    self.conns[i] = Some(l);
                    self.sched.add(i, self.now);
                }
                None => {
                    self.live.fetch_sub(1, Ordering::AcqRel);
                    self.free.push(i);
                }
            }
        }
    }

    /// A new NVMe/TCP connection as connection `i` (None: it could not be
    /// watched, and is dropped).
    fn new_tcp(
        &mut self,
        i: usize,
        mut sock: TcpStream,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Option<Link> {
        let interest = Interest::READABLE;
        if let Err(e) = self.poll.registry().register(&mut sock, Token(i), interest) {
            tracing::warn!(%peer, "cannot register connection: {e}");
            return None;
        }
        tracing::debug!(%peer, %local, "connection accepted");
        let qp = QueuePair::new(self.target.clone(), local, peer);
        let secure = match self.target.secure_channel(&local) {
            SecureChannel::None => None,
            mode => Some(Box::new(Secure::new(
                mode,
                peer,
                self.now,
                &self.target.transport,
            ))),
        };
        Some(Link::Tcp(Conn {
            sock,
            qp,
            hup: false,
            secure,
            peer,
        }))
    }

    /// A new NVMe/RDMA queue pair as connection `i`: its CM and completion
    /// channels are watched under its index (None: they could not be).
    fn new_rdma(&mut self, i: usize, a: Accepted) -> Option<Link> {
        let c = RdmaConn::new(a, self.target.clone());
        let fds = c.fds();
        for (k, fd) in fds.iter().enumerate() {
            let r = self
                .poll
                .registry()
                .register(&mut SourceFd(fd), Token(i), Interest::READABLE);
            if let Err(e) = r {
                tracing::warn!(peer = %c.peer(), "cannot watch an RDMA queue: {e}");
                for fd in &fds[..k] {
                    let _ = self.poll.registry().deregister(&mut SourceFd(fd));
                }
                return None;
            }
        }
        tracing::debug!(peer = %c.peer(), local = %c.local(), "RDMA queue pair accepted");
        Some(Link::Rdma(c))
    }

    /// Drives connection `i` in its turn of a round: its transport's pass.
    fn drive(&mut self, i: usize, contended: bool) -> bool {
        match self.conns.get(i).and_then(Option::as_ref) {
            Some(Link::Tcp(_)) => self.drive_tcp(i, contended),
            Some(Link::Rdma(_)) => self.drive_rdma(i),
            None => false,
        }
    }

    /// An RDMA queue's pass: polls its CQ until it is empty and armed
    /// (feeding the queue, posting what it produced), runs the commands
    /// whose QoS tokens came, hands its storage requests out and routes
    /// what completed; closes it once finished. Returns whether anything
    /// moved.
    fn drive_rdma(&mut self, i: usize) -> bool {
        let now = self.now;
        let Some(state) = self.sched.state(i) else {
            return false;
        };
        let Some(Link::Rdma(c)) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return false;
        };
        let mut p = Pass::starting(state);
        p.control = c.queue().nvme().qid() == 0;
        p.worked |= c.with_queue(|q| {
            q.set_now(now);
            q.resume_throttled()
        });
        p.worked |= c.drive(now);
        p.worked |= self.pump(i);
        let Some(Link::Rdma(c)) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return p.worked;
        };
        // The CQ was polled empty and re-armed: the next completion signals.
        p.unread = false;
        let finished = c.finished();
        let at = c.queue().throttle_wake();
        self.sched.on_driven(i, p, now);
        if finished {
            self.close(i);
        } else {
            self.sched.set_throttle(i, at);
        }
        p.worked
    }

    /// Moves a TCP connection forward as far as it goes without blocking (with
    /// fair sharing: as far as its budget for this round); returns whether
    /// anything moved. `contended`: [`Round::contended`](crate::sched::Round::contended).
    /// Plaintext and TLS take the same pass (`conn.rs`).
    fn drive_tcp(&mut self, i: usize, contended: bool) -> bool {
        let (Some(c), Some(state)) = (self.tcp(i), self.sched.state(i)) else {
            return false;
        };
        if state == State::Zombie {
            self.pump(i);
            self.close(i);
            return false;
        }
        if c.secure.as_ref().is_some_and(|s| s.detecting()) && !self.detect_secure(i, state) {
            return false;
        }
        let Some(c) = self.tcp(i) else {
            return false;
        };
        let now = self.now;
        let mut budget = self.sched.budget(i, contended, c.qp.share_weight());
        let mut p = Pass::starting(state);
        p.control = c.qp.nvme().qid() == 0;
        loop {
            let Some(c) = self.tcp_mut(i) else {
                return p.worked;
            };
            c.qp.set_now(now);
            p.worked |= c.qp.resume_throttled();
            // Receive: everything the socket has, PDUs processed as they complete.
            let more = c.receive(now, &mut budget, &mut p);
            p.worked |= self.pump(i);
            let Some(Link::Tcp(c)) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                return p.worked;
            };
            let blocked = c.send(&mut p);
            watch_writable(&self.poll, &mut self.sched, &mut c.sock, i, blocked, &mut p);
            // Sending may have freed buffer budget and started waiting commands.
            let completed = self.pump(i);
            p.worked |= completed;
            if !(more || completed) || blocked || p.failed || p.yielded {
                break;
            }
            // Responses went out: the host's next commands may be here
            // already (a deep queue answers while this pass runs).
            p.unread = true;
        }
        let Some(c) = self.tcp_mut(i) else {
            return p.worked;
        };
        let done = c.done(&p);
        let at = c.qp.throttle_wake();
        self.sched.on_driven(i, p, now);
        if done {
            self.close(i);
        } else {
            self.sched.set_throttle(i, at);
        }
        p.worked
    }

    /// TCP connection `i`, if it is one.
    fn tcp(&self, i: usize) -> Option<&Conn> {
        match self.conns.get(i).and_then(Option::as_ref) {
            Some(Link::Tcp(c)) => Some(c),
            _ => None,
        }
    }

    fn tcp_mut(&mut self, i: usize) -> Option<&mut Conn> {
        match self.conns.get_mut(i).and_then(Option::as_mut) {
            Some(Link::Tcp(c)) => Some(c),
            _ => None,
        }
    }

    /// A connection on a TLS listener, before its first byte: TLS or
    /// plaintext (`secure.rs`). Returns whether the pass goes on (TLS
    /// started, or plaintext on a `tls-optional` listener).
    fn detect_secure(&mut self, i: usize, state: State) -> bool {
        let Some(Link::Tcp(c)) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return false;
        };
        let Some(sec) = c.secure.as_mut() else {
            return true;
        };
        let target = &self.target;
        let config = self.tls.get_or_insert_with(|| {
            let t = target.clone();
            ServerConfig::new(move |id: &[u8]| t.tls_psk(id)).map_err(|e| {
                tracing::error!("TLS listeners cannot work: {e}");
                e.to_string()
            })
        });
        match sec.detect(&c.sock, config.as_ref().map_err(String::as_str)) {
            Detected::Pending => {
                let p = Pass {
                    unread: false,
                    ..Pass::starting(state)
                };
                self.sched.on_driven(i, p, self.now);
                false
            }
            Detected::Eof => {
                self.close(i);
                false
            }
            Detected::Refused(why) => {
                tracing::warn!(peer = %c.peer, "TLS: connection refused: {why}");
                self.close(i);
                false
            }
            Detected::Plain => {
                tracing::debug!(peer = %c.peer, "tls-optional listener: plaintext NVMe/TCP");
                c.secure = None;
                true
            }
            Detected::Tls => true,
        }
    }

    /// Hands connection `i`'s storage requests to the worker's queues and
    /// routes every completion that is ready, until none comes back; returns
    /// whether anything completed.
    fn pump(&mut self, i: usize) -> bool {
        let mut any = false;
        loop {
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                return any;
            };
            if c.in_flight() == 0 {
                // Nothing of this connection's to hand out or reap: others'
                // completions wake the loop through the queues' eventfds.
                return any;
            }
            let to = Sinks {
                offload: &self.offload,
                storage: &mut self.storage,
                failed: &mut self.comps,
            };
            // Authentication's DH and PTPL writes go to the helper thread,
            // storage to the worker's queues.
            c.hand_out(i, to);
            if self.storage.len() != self.storage_opened {
                self.sync_storage_fds();
            }
            self.storage.commit();
            if !self.route_completions(i) {
                return any;
            }
            any = true;
        }
    }

    /// Reaps the storage queues and hands each completion to the connection
    /// its tag names; connections other than `current` are queued for a
    /// pass. Returns whether anything was routed.
    fn route_completions(&mut self, current: usize) -> bool {
        let mut comps = std::mem::take(&mut self.comps);
        self.storage.reap(&mut comps);
        let any = !comps.is_empty();
        for c in comps.drain(..) {
            let owner = owner_of(c.tag);
            if self.route(owner, Done::Storage(c)) && owner != current {
                self.sched.wake(owner);
            }
        }
        self.comps = comps;
        any
    }

    /// Hands finished offloads to the connections their tags name and
    /// queues those for a pass.
    fn route_offloads(&mut self) {
        while let Some(d) = self.offload.try_recv() {
            let owner = owner_of(d.tag);
            if self.route(owner, Done::Offload(d)) {
                self.sched.wake(owner);
            }
        }
    }

    /// Hands `done` to connection `owner`; false when there is none (a bug:
    /// connections keep their index until their requests complete).
    fn route(&mut self, owner: usize, done: Done) -> bool {
        match self.conns.get_mut(owner).and_then(Option::as_mut) {
            Some(c) => {
                c.deliver(self.now, done);
                true
            }
            None => {
                tracing::error!(owner, "completion for no connection");
                false
            }
        }
    }

    /// Registers the eventfds of newly opened storage queues (closed ones
    /// left epoll when their fd closed); open queues get housekeeping.
    fn sync_storage_fds(&mut self) {
        let fds: Vec<RawFd> = self.storage.notify_fds().collect();
        for fd in &fds {
            if self.storage_fds.contains(fd) {
                continue;
            }
            if let Err(e) =
                self.poll
                    .registry()
                    .register(&mut SourceFd(fd), STORAGE_TOKEN, Interest::READABLE)
            {
                tracing::warn!("cannot watch a storage queue's eventfd: {e}");
            }
        }
        self.storage_fds = fds;
        self.storage_opened = self.storage.len();
        if !self.storage.is_empty() {
            self.sched.schedule_housekeeping(self.now);
        }
    }

    /// Closes connection `i`. A TCP connection with storage requests in
    /// flight becomes a zombie (socket shut down, index kept) until they
    /// complete; an RDMA queue is closed only once none is out
    /// (`RdmaConn::finished`), and its QP, CQ and channels are destroyed.
    fn close(&mut self, i: usize) {
        match self.conns.get_mut(i).and_then(Option::as_mut) {
            None => return,
            Some(Link::Rdma(r)) => {
                for fd in r.fds() {
                    let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
                }
            }
            Some(Link::Tcp(c)) => {
                let zombie = self.sched.state(i) == Some(State::Zombie);
                if !zombie {
                    let _ = self.poll.registry().deregister(&mut c.sock);
                }
                if c.qp.in_flight() > 0 {
                    if !zombie {
                        tracing::debug!(
                            in_flight = c.qp.in_flight(),
                            "closing a connection with storage requests in flight"
                        );
                        let _ = c.sock.shutdown(std::net::Shutdown::Both);
                        self.sched.close(i, true);
                    }
                    return;
                }
            }
        }
        self.sched.close(i, false);
        // An RDMA queue's drop logs how its data moved (`RdmaConn`'s Drop).
        self.conns[i] = None;
        self.live.fetch_sub(1, Ordering::AcqRel);
        self.free.push(i);
    }
}

/// Asks epoll for writability only while output is blocked (edge-triggered
/// EPOLLOUT on every ACK would wake the loop for nothing); a failure to
/// change the registration fails the pass.
fn watch_writable(
    poll: &Poll,
    sched: &mut Scheduler,
    sock: &mut TcpStream,
    i: usize,
    blocked: bool,
    p: &mut Pass,
) {
    if blocked == sched.blocked(i) || p.failed {
        return;
    }
    let interest = if blocked {
        Interest::READABLE | Interest::WRITABLE
    } else {
        Interest::READABLE
    };
    match poll.registry().reregister(sock, Token(i), interest) {
        Ok(()) => sched.set_blocked(i, blocked),
        Err(_) => p.failed = true,
    }
}
