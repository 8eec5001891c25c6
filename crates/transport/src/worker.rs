//! One event-loop thread and the connections it owns: the I/O shell around
//! the scheduler (`sched.rs`). Each pass it asks the scheduler how to wait
//! (spin on the hot sockets, look at epoll, or sleep in `epoll_wait` until
//! [`Scheduler::poll_timeout`]), runs the ticks that are due, and drives
//! the round the scheduler orders: `recv` within the connection's budget,
//! hand the storage requests out, `writev` what the pass produced. Then it
//! reports how each pass went.
//!
//! Storage: the worker owns one queue per namespace ([`QueueSet`]), shared
//! by all its connections. A connection's storage requests and offloads
//! are taken after each receive ([`hand_out`]), tagged with their
//! connection ([`ConnId::tag_bits`]) above the command's slot, and their
//! completions are routed back by that tag ([`deliver`]), the same way for
//! TCP and RDMA. A connection closed with requests in flight stays as a
//! zombie (socket shut down) until they have completed, so its index is
//! never reused while a completion may still name it.

use crate::conn::Conn;
use crate::offload::OffloadPort;
use crate::sched::{ConnId, Due, Pass, Scheduler, State, Wait};
use crate::secure::{Detected, Secure};
use crate::sleep::SleepTimer;
use crate::LoopOptions;
use farflash_backend::{IoCompletion, QueueSet};
use farflash_core::config::PollMode;
use farflash_core::listen::SecureChannel;
use farflash_core::{Binding, OffloadDone, Target, Transport, TAG_SLOT_BITS};
use farflash_rdma::queue::Rdma;
use farflash_rdma_verbs::{Accepted, RdmaConn};
use farflash_tcp::{QueuePair, Tcp};
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
/// Token of hybrid polling's timer (`sleep.rs`).
const SLEEP_TOKEN: Token = Token(usize::MAX - 2);
/// Tokens of the RDMA queues' fds (`RDMA_TOKEN + index`; TCP connections
/// count from 0).
const RDMA_TOKEN: usize = 1 << 40;
/// Depth the shared storage queues are opened with (io_uring rings of this
/// many entries; requests beyond it wait in the queue's overflow list).
const STORAGE_DEPTH: u32 = 1024;

pub(crate) struct NewConn {
    pub sock: TcpStream,
    pub local: SocketAddr,
    pub peer: SocketAddr,
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
    conns: Vec<Option<Conn>>,
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
    /// NVMe/RDMA queue pairs the acceptor handed here, and free indices.
    rdma: Vec<Option<RdmaConn>>,
    rdma_free: Vec<usize>,
    rdma_rx: Option<Receiver<Accepted>>,
    /// The earliest an RDMA queue's held commands (core `nvm`: waiting for
    /// a fused pair's range) want another look; the wait is cut to it.
    rdma_wake: Option<Instant>,
    /// TLS server configuration, made at the first TLS connection (Err:
    /// OpenSSL 3 could not be loaded; said once).
    tls: Option<Result<ServerConfig, String>>,
    /// `farflash_core::controller::changes` at the last scan.
    changes: u64,
    /// Hybrid polling's timer (`--poll hybrid` only).
    sleep: Option<SleepTimer>,
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
            rdma: Vec::new(),
            rdma_free: Vec::new(),
            rdma_rx: None,
            rdma_wake: None,
            tls: None,
            changes: farflash_core::controller::changes(),
            sleep,
        }
    }

    /// Takes NVMe/RDMA queue pairs from `rx` too.
    pub fn with_rdma(mut self, rx: Receiver<Accepted>) -> Worker {
        self.rdma_rx = Some(rx);
        self
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut drain_deadline: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let mut hybrid_sleep = false;
            let wait = match self.sched.wait(now) {
                Wait::Sleep(at) => {
                    // Hybrid polling: until an event or the timer, then poll.
                    match self
                        .sleep
                        .as_ref()
                        .map(|t| t.arm(at.saturating_duration_since(now)))
                    {
                        Some(Ok(())) => {
                            hybrid_sleep = true;
                            Some(
                                self.sched
                                    .poll_timeout(now)
                                    .map(|t| t.saturating_duration_since(now)),
                            )
                        }
                        _ => Some(Some(Duration::ZERO)),
                    }
                }
                Wait::Poll(timeout) => Some(timeout),
                Wait::Direct => None,
            };
            let wait = match (wait, self.rdma_wake.take()) {
                (Some(t), Some(at)) => {
                    let held = at.saturating_duration_since(now);
                    Some(Some(t.map_or(held, |t| t.min(held))))
                }
                (w, _) => w,
            };
            if let Some(timeout) = wait {
                if let Err(e) = self.poll.poll(&mut events, timeout) {
                    if e.kind() != io::ErrorKind::Interrupted {
                        tracing::error!("poll failed: {e}");
                        return;
                    }
                }
                // Completions routed from the events are stamped after the wait.
                self.now = Instant::now();
                if hybrid_sleep {
                    let timer = events.iter().any(|e| e.token() == SLEEP_TOKEN);
                    self.sched.on_woken(self.now, timer);
                }
                self.take_events(&events);
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
                        .map_or(usize::MAX, |c| c.qp.pending_bytes())
                });
                for &i in &round.conns {
                    self.drive(i, round.contended);
                }
                self.sched.finish_round(round, now);
            }
            if !self.rdma.is_empty() {
                self.drive_rdma();
            }
            if self.stop.load(Ordering::Acquire) {
                let deadline = *drain_deadline.get_or_insert(now + self.drain);
                if self.conns.iter().all(Option::is_none) && self.rdma.iter().all(Option::is_none) {
                    return;
                }
                if now >= deadline {
                    tracing::warn!("shutdown: closing connections that did not drain in time");
                    return;
                }
                for c in self.conns.iter_mut().flatten() {
                    c.qp.tick(now);
                }
                for c in self.rdma.iter_mut().flatten() {
                    c.with_queue(|q| q.tick(now));
                }
            }
        }
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
                self.accept_rdma();
                self.route_offloads();
            } else if t == STORAGE_TOKEN {
                self.route_completions(usize::MAX);
            } else if let Some(i) = t.0.checked_sub(RDMA_TOKEN) {
                if let Some(c) = self.rdma.get_mut(i).and_then(Option::as_mut) {
                    c.on_events();
                }
            } else {
                let i = t.0;
                if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                    // EPOLLRDHUP: the peer's FIN may sit right behind the
                    // last data; read on to the EOF instead of stopping
                    // at a short read.
                    c.hup |= ev.is_read_closed();
                }
                // Only writability (EPOLLOUT while output is blocked)
                // leaves nothing to read.
                let readable =
                    !ev.is_writable() || ev.is_readable() || ev.is_read_closed() || ev.is_error();
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
                        self.tick(ConnId::Tcp(i), now);
                    }
                    for k in 0..self.rdma.len() {
                        self.tick(ConnId::Rdma(k), now);
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
    fn tick(&mut self, id: ConnId, now: Instant) {
        match id {
            ConnId::Tcp(i) => {
                let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                    return;
                };
                if let Some(s) = c.secure.as_mut() {
                    if let Err(why) = s.check_deadlines(now) {
                        tracing::warn!(peer = %c.peer, "TLS: closing the connection: {why}");
                        self.close(i);
                        return;
                    }
                }
                c.qp.tick(now);
                // Only connections the tick gave work (an AEN to send, a
                // close) need a pass; the rest wait for epoll.
                if c.qp.output_len() > 0 || c.qp.wants_close() {
                    self.sched.wake(i);
                }
                // QoS limits may have changed.
                self.sched.set_throttle(i, c.qp.throttle_wake());
            }
            ConnId::Rdma(k) => {
                if let Some(c) = self.rdma.get_mut(k).and_then(Option::as_mut) {
                    c.with_queue(|q| q.tick(now));
                }
            }
        }
    }

    fn accept_new(&mut self) {
        while let Ok(nc) = self.rx.try_recv() {
            let i = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let mut sock = nc.sock;
            let interest = Interest::READABLE;
            if let Err(e) = self.poll.registry().register(&mut sock, Token(i), interest) {
                tracing::warn!(peer = %nc.peer, "cannot register connection: {e}");
                self.live.fetch_sub(1, Ordering::AcqRel);
                self.free.push(i);
                continue;
            }
            tracing::debug!(peer = %nc.peer, local = %nc.local, "connection accepted");
            let qp = QueuePair::new(self.target.clone(), nc.local, nc.peer);
            let secure = match self.target.secure_channel(&nc.local) {
                SecureChannel::None => None,
                mode => Some(Box::new(Secure::new(
                    mode,
                    nc.peer,
                    self.now,
                    &self.target.transport,
                ))),
            };
            self.conns[i] = Some(Conn {
                sock,
                qp,
                hup: false,
                secure,
                peer: nc.peer,
            });
            self.sched.add(ConnId::Tcp(i), self.now);
        }
    }

    /// Moves a connection forward as far as it goes without blocking (with
    /// fair sharing: as far as its budget for this round); returns whether
    /// anything moved. `contended`: [`Round::contended`](crate::sched::Round::contended).
    /// Plaintext and TLS take the same pass (`conn.rs`).
    fn drive(&mut self, i: usize, contended: bool) -> bool {
        let (Some(c), Some(state)) = (
            self.conns.get(i).and_then(Option::as_ref),
            self.sched.state(i),
        ) else {
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
        let Some(c) = self.conns.get(i).and_then(Option::as_ref) else {
            return false;
        };
        let now = self.now;
        let mut budget = self.sched.budget(i, contended, c.qp.share_weight());
        let mut p = Pass::starting(state);
        p.control = c.qp.nvme().qid() == 0;
        loop {
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                return p.worked;
            };
            c.qp.set_now(now);
            p.worked |= c.qp.resume_throttled();
            // Receive: everything the socket has, PDUs processed as they complete.
            let more = c.receive(now, &mut budget, &mut p);
            p.worked |= self.pump(i);
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
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
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return p.worked;
        };
        self.sched.on_driven(i, p, now);
        if c.done(&p) {
            self.close(i);
        } else {
            self.sched.set_throttle(i, c.qp.throttle_wake());
        }
        p.worked
    }

    /// A connection on a TLS listener, before its first byte: TLS or
    /// plaintext (`secure.rs`). Returns whether the pass goes on (TLS
    /// started, or plaintext on a `tls-optional` listener).
    fn detect_secure(&mut self, i: usize, state: State) -> bool {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
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
            if c.qp.in_flight() == 0 {
                // Nothing of this connection's to reap: others' completions
                // wake the loop through the queues' eventfds.
                return any;
            }
            let to = Sinks {
                offload: &self.offload,
                storage: &mut self.storage,
                failed: &mut self.comps,
            };
            hand_out(&mut c.qp, ConnId::Tcp(i), to);
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
    /// its tag names; TCP connections other than `current` are queued for a
    /// pass. Returns whether anything was routed.
    fn route_completions(&mut self, current: usize) -> bool {
        let mut comps = std::mem::take(&mut self.comps);
        self.storage.reap(&mut comps);
        let any = !comps.is_empty();
        for c in comps.drain(..) {
            let owner = ConnId::of_tag(c.tag);
            if self.route(owner, Done::Storage(c)) {
                if let ConnId::Tcp(j) = owner {
                    if j != current {
                        self.sched.wake(j);
                    }
                }
            }
        }
        self.comps = comps;
        any
    }

    /// Hands finished offloads to the connections their tags name and
    /// queues those for a pass.
    fn route_offloads(&mut self) {
        while let Some(d) = self.offload.try_recv() {
            let owner = ConnId::of_tag(d.tag);
            if self.route(owner, Done::Offload(d)) {
                if let ConnId::Tcp(j) = owner {
                    self.sched.wake(j);
                }
            }
        }
    }

    /// Hands `done` to its connection; false when there is none (a bug:
    /// zombies keep their index until their requests complete).
    fn route(&mut self, owner: ConnId, done: Done) -> bool {
        let now = self.now;
        match owner {
            ConnId::Tcp(j) => match self.conns.get_mut(j).and_then(Option::as_mut) {
                Some(conn) => deliver(&mut conn.qp, now, done),
                None => {
                    tracing::error!(?owner, "completion for no connection");
                    return false;
                }
            },
            ConnId::Rdma(k) => match self.rdma.get_mut(k).and_then(Option::as_mut) {
                Some(r) => deliver(r, now, done),
                None => {
                    tracing::error!(?owner, "completion for no RDMA queue");
                    return false;
                }
            },
        }
        true
    }

    /// Takes the RDMA queue pairs the acceptor handed over and watches
    /// their CM and completion channels.
    fn accept_rdma(&mut self) {
        let Some(rx) = self.rdma_rx.take() else {
            return;
        };
        while let Ok(a) = rx.try_recv() {
            let c = RdmaConn::new(a, self.target.clone());
            let i = self.rdma_free.pop().unwrap_or_else(|| {
                self.rdma.push(None);
                self.rdma.len() - 1
            });
            let mut ok = true;
            for fd in c.fds() {
                if let Err(e) = self.poll.registry().register(
                    &mut SourceFd(&fd),
                    Token(RDMA_TOKEN + i),
                    Interest::READABLE,
                ) {
                    tracing::warn!(peer = %c.peer(), "cannot watch an RDMA queue: {e}");
                    ok = false;
                }
            }
            self.rdma[i] = Some(c);
            self.sched.add(ConnId::Rdma(i), self.now);
            if !ok {
                self.close_rdma(i);
                continue;
            }
            if let Some(c) = &self.rdma[i] {
                tracing::debug!(peer = %c.peer(), local = %c.local(), "RDMA queue pair accepted");
            }
        }
        self.rdma_rx = Some(rx);
    }

    /// Polls every RDMA queue's CQ, hands their storage requests to the
    /// worker's queues and routes what completed; closes the finished ones.
    fn drive_rdma(&mut self) {
        let now = self.now;
        for i in 0..self.rdma.len() {
            let Some(c) = self.rdma[i].as_mut() else {
                continue;
            };
            let mut worked = c.drive(now);
            // Commands held for a fused pair's range (core `nvm`) retry;
            // while any wait, the worker looks again soon.
            worked |= c.with_queue(|q| q.resume_throttled());
            if let Some(at) = c.with_queue(|q| q.throttle_wake()) {
                self.rdma_wake = Some(self.rdma_wake.map_or(at, |w| w.min(at)));
            }
            // Authentication's DH and PTPL writes go to the helper thread
            // and storage to the worker's queues, as for TCP.
            let to = Sinks {
                offload: &self.offload,
                storage: &mut self.storage,
                failed: &mut self.comps,
            };
            if hand_out(c, ConnId::Rdma(i), to) {
                if self.storage.len() != self.storage_opened {
                    self.sync_storage_fds();
                }
                self.storage.commit();
                worked = true;
            }
            if worked {
                self.sched.on_worked(ConnId::Rdma(i), now);
            }
            if self.rdma[i].as_ref().is_some_and(|c| c.in_flight() > 0) {
                self.route_completions(usize::MAX);
            }
            if self.rdma[i].as_ref().is_some_and(RdmaConn::finished) {
                self.close_rdma(i);
            }
        }
    }

    /// Drops RDMA queue `i` (its QP, CQ and channels are destroyed).
    fn close_rdma(&mut self, i: usize) {
        let Some(c) = self.rdma.get_mut(i).and_then(Option::take) else {
            return;
        };
        for fd in c.fds() {
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
        }
        // Its drop logs how its data moved (`RdmaConn`'s Drop).
        drop(c);
        self.sched.close(ConnId::Rdma(i), false);
        self.live.fetch_sub(1, Ordering::AcqRel);
        self.rdma_free.push(i);
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

    /// Closes connection `i`; one with storage requests in flight becomes a
    /// zombie (socket shut down, index kept) until they complete.
    fn close(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
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
                self.sched.close(ConnId::Tcp(i), true);
            }
            return;
        }
        self.sched.close(ConnId::Tcp(i), false);
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

// ---- routing: a connection's work out, its completions back ---------------

/// Storage tags: the command layer keeps the command's slot in the tag's
/// low [`TAG_SLOT_BITS`]; the connection is the rest.
impl ConnId {
    /// Marks an RDMA queue's index in the connection half of a tag.
    const RDMA_TAG: u64 = 1 << 31;

    /// The tag bits to OR into a request's tag.
    fn tag_bits(self) -> u64 {
        let hi = match self {
            ConnId::Tcp(i) => i as u64,
            ConnId::Rdma(i) => i as u64 | ConnId::RDMA_TAG,
        };
        hi << TAG_SLOT_BITS
    }

    /// Whose request `tag` is.
    fn of_tag(tag: u64) -> ConnId {
        let hi = tag >> TAG_SLOT_BITS;
        if hi & ConnId::RDMA_TAG != 0 {
            ConnId::Rdma((hi & !ConnId::RDMA_TAG) as usize)
        } else {
            ConnId::Tcp(hi as usize)
        }
    }
}

/// A connection whose binding the worker hands work out for and routes
/// completions back to.
trait Routed {
    type T: Transport;

    /// Runs `f` on the connection's binding, then moves what it produced
    /// (RDMA posts its work; TCP's output waits for the next send).
    fn with_binding<R>(&mut self, f: impl FnOnce(&mut Binding<Self::T>) -> R) -> R;
}

impl Routed for QueuePair {
    type T = Tcp;

    fn with_binding<R>(&mut self, f: impl FnOnce(&mut Binding<Tcp>) -> R) -> R {
        f(self)
    }
}

impl Routed for RdmaConn {
    type T = Rdma;

    fn with_binding<R>(&mut self, f: impl FnOnce(&mut Binding<Rdma>) -> R) -> R {
        self.with_queue(f)
    }
}

/// Where the worker sends a connection's work.
struct Sinks<'a> {
    offload: &'a OffloadPort,
    storage: &'a mut QueueSet,
    /// Requests a storage queue refused, completed with their error.
    failed: &'a mut Vec<IoCompletion>,
}

/// Hands `c`'s offloads and storage requests out, tagged for `owner`;
/// returns whether it had any.
fn hand_out<C: Routed>(c: &mut C, owner: ConnId, to: Sinks<'_>) -> bool {
    let hi = owner.tag_bits();
    c.with_binding(|b| {
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
    })
}

/// What came back for one of a connection's commands.
enum Done {
    Storage(IoCompletion),
    Offload(OffloadDone),
}

/// Hands `done` to `c`, stamped with the pass's clock.
fn deliver<C: Routed>(c: &mut C, now: Instant, done: Done) {
    c.with_binding(|b| {
        b.set_now(now);
        match done {
            Done::Storage(s) => b.on_storage_completion(s),
            Done::Offload(o) => b.on_offload_completion(o),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::ConnId;
    use farflash_core::TAG_SLOT_BITS;

    #[test]
    fn owners_survive_the_tag_and_leave_the_slot_alone() {
        for owner in [
            ConnId::Tcp(0),
            ConnId::Tcp(7),
            ConnId::Rdma(0),
            ConnId::Rdma(3),
            ConnId::Tcp((1 << 31) - 1),
            ConnId::Rdma((1 << 31) - 1),
        ] {
            let slot = 0xABCD_u64;
            let tag = owner.tag_bits() | slot;
            assert_eq!(ConnId::of_tag(tag), owner);
            assert_eq!(tag & ((1 << TAG_SLOT_BITS) - 1), slot);
        }
        assert_ne!(ConnId::Tcp(1).tag_bits(), ConnId::Rdma(1).tag_bits());
    }
}
