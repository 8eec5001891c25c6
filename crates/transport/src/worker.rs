//! One event-loop thread and the connections it owns.
//!
//! Waiting: with [`PollMode::Adaptive`] the loop polls without sleeping
//! while work keeps arriving and for a window after the last of it (from
//! `poll_idle` up to `IDLE_MAX_FACTOR` times that, learnt from the gaps the
//! hosts leave: [`IdleWindow`]), or while a connection's output is blocked
//! and still moving, then sleeps in `epoll_wait` until the next event or
//! tick; `Always` never sleeps and `Never` always does. Polling spins on the
//! sockets of the few connections that worked lately (`recv` straight away,
//! as a polled target would), with an `epoll_wait(0)` every `DIRECT_SPINS`
//! rounds for the rest.
//!
//! Storage: the worker owns one queue per namespace ([`QueueSet`]), shared
//! by all its connections. A connection's storage requests are taken after
//! each receive, tagged with their connection ([`Owner`], `route.rs`) above
//! the command's slot, and their completions are routed back by that tag,
//! the same way for TCP and RDMA. A connection closed with requests in flight stays
//! as a zombie (socket shut down) until they have completed, so its index is
//! never reused while a completion may still name it.

use crate::adaptive::IdleWindow;
use crate::offload::OffloadPort;
use crate::route::{deliver, hand_out, Done, Owner, Sinks};
use crate::{LoopOptions, PollMode};
use farflash_backend::{IoCompletion, QueueSet};
use farflash_core::Target;
use farflash_rdma_verbs::{Accepted, RdmaConn};
use farflash_tcp::QueuePair;
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::io::{self, IoSlice, Read, Write};
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
/// Tokens of the RDMA queues' fds (`RDMA_TOKEN + index`; TCP connections
/// count from 0).
const RDMA_TOKEN: usize = 1 << 40;
/// Depth the shared storage queues are opened with (io_uring rings of this
/// many entries; requests beyond it wait in the queue's overflow list).
const STORAGE_DEPTH: u32 = 1024;
/// Periodic work (keep-alive, teardown) at least this often.
const TICK: Duration = Duration::from_millis(100);
/// Connections spun on directly (`recv` without asking epoll first) while
/// polling; with more busy connections than this, epoll alone finds them.
const HOT_MAX: usize = 4;
/// `iovec`s per `writev`: a small array on the stack for the usual pass, up
/// to Linux's IOV_MAX when a deep queue's batch is waiting.
const SMALL_IOV: usize = 64;
const MAX_IOV: usize = 1024;
/// Direct spins over the hot connections between two `epoll_wait(0)`s
/// (which serve every other connection, backend eventfd and new arrival).
const DIRECT_SPINS: u32 = 16;
/// Adaptive polling spins through gaps of up to this many times `poll_idle`.
const IDLE_MAX_FACTOR: u32 = 20;
/// Fair sharing under contention: a backlogged connection reads this
/// fraction of its share per turn while a busy connection without a
/// backlog shares the loop (4 KiB of the default 256 KiB). A 128 KiB
/// write's payload is then received and copied in many short turns, each
/// followed by the quiet connections' turns, so a QD 1 neighbour waits for
/// at most one such slice instead of whole payloads (16 KiB slices kept
/// about half of a QD 1 victim's IOPS beside a QD 128 writer in noisy
/// short runs, 4 KiB ones about 0.6 on a quiet machine: docs/qos.md).
const CONTENDED_DIVISOR: usize = 64;
/// The smallest slice under contention (one 4 KiB block and its header).
const CONTENDED_MIN: usize = 4096;
/// A connection holding at most this many data-buffer bytes (commands'
/// buffers, unsent output) and no backlog is *quiet*: the short slices
/// protect it. The queues of a bulk host hold far more (QD x 128 KiB), so
/// they do not slow each other down.
const QUIET_BYTES: usize = 64 * 1024;

pub(crate) struct NewConn {
    pub sock: TcpStream,
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

struct Conn {
    sock: TcpStream,
    qp: QueuePair,
    /// Closed, waiting for its storage requests to complete.
    zombie: bool,
    /// The peer closed its side: nothing more to read, but what we owe it
    /// (a response, a TermReq) is still sent if the socket takes it.
    eof: bool,
    dead: bool,
    /// Registered for writability (only while output is blocked).
    want_write: bool,
    /// epoll reported the peer's half-close (EPOLLRDHUP).
    hup: bool,
    /// The socket may hold unread bytes: epoll reported it readable, the
    /// loop is spinning on it, the last read stopped before draining it, or
    /// this pass sent responses and goes round again. A pass for other
    /// reasons (a storage completion, a tick) then skips the `recv` that
    /// would only say EAGAIN.
    rx_ready: bool,
    /// Last time a pass over this connection moved anything.
    last_work: Instant,
    /// Fair sharing: its last pass ended with its share used and data left
    /// unread (a backlog). Rounds serve the connections without one first.
    backlogged: bool,
}

pub(crate) struct Worker {
    target: Arc<Target>,
    poll: Poll,
    rx: Receiver<NewConn>,
    stop: Arc<AtomicBool>,
    /// Connections alive on all workers (the acceptor enforces the cap).
    live: Arc<AtomicUsize>,
    mode: PollMode,
    /// Adaptive polling: how long to spin after the last work.
    idle: IdleWindow,
    /// Connections whose output the socket did not take: while their output
    /// still moves the loop keeps polling (sleeping until EPOLLOUT, which
    /// comes only once a third of the send buffer is free, cost deep queues
    /// a quarter of their speed).
    blocked: usize,
    drain: Duration,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    ready: Vec<usize>,
    /// The other half of `ready`'s double buffer (no allocation per round).
    spare: Vec<usize>,
    /// Connections that worked within `poll_idle` (at most `HOT_MAX`): while
    /// spinning, the loop `recv`s on these directly, which saves the
    /// `epoll_wait` round between a command's arrival and its read.
    hot: Vec<usize>,
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
    /// Connections with commands waiting for QoS tokens: the loop wakes
    /// when the first of them may run.
    throttled: Vec<usize>,
    /// Fair sharing: bytes read from one connection per round and unit of
    /// its host's weight before the worker's other connections get their
    /// turn (a round robin over sockets: a deep queue of large writes waits
    /// for the next round instead of holding a shallow neighbour's command
    /// behind megabytes of its own); `usize::MAX`: off.
    quantum: usize,
    /// The clock of the current pass, handed to the connections it drives
    /// (their latency samples; no clock read per command).
    now: Instant,
    /// NVMe/RDMA queue pairs the acceptor handed here, and free indices.
    rdma: Vec<Option<RdmaConn>>,
    rdma_free: Vec<usize>,
    rdma_rx: Option<Receiver<Accepted>>,
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
        Worker {
            target,
            poll,
            rx,
            stop,
            live,
            mode: opts.poll,
            idle: IdleWindow::new(opts.poll_idle, opts.poll_idle * IDLE_MAX_FACTOR),
            blocked: 0,
            drain: opts.drain,
            conns: Vec::new(),
            free: Vec::new(),
            ready: Vec::new(),
            spare: Vec::new(),
            hot: Vec::with_capacity(HOT_MAX),
            storage: QueueSet::new(STORAGE_DEPTH),
            offload,
            storage_fds: Vec::new(),
            storage_opened: 0,
            comps: Vec::new(),
            throttled: Vec::new(),
            quantum: if opts.fair_share == 0 {
                usize::MAX
            } else {
                opts.fair_share
            },
            now: Instant::now(),
            rdma: Vec::new(),
            rdma_free: Vec::new(),
            rdma_rx: None,
        }
    }

    /// Takes NVMe/RDMA queue pairs from `rx` too.
    pub fn with_rdma(mut self, rx: Receiver<Accepted>) -> Worker {
        self.rdma_rx = Some(rx);
        self
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut last_tick = Instant::now();
        let mut last_work = last_tick;
        let mut drain_deadline: Option<Instant> = None;
        let mut direct_spins = 0u32;
        loop {
            let now = Instant::now();
            let wake_at = self.due_throttled(now);
            let spin = match self.mode {
                PollMode::Always => true,
                PollMode::Never => false,
                PollMode::Adaptive => {
                    let quiet = now.duration_since(last_work);
                    // Blocked output keeps the loop polling while anything
                    // moves; a peer that stops reading lets it sleep.
                    quiet < self.idle.get() || (self.blocked > 0 && quiet < self.idle.max())
                }
            };
            let mut slept = false;
            if spin && !self.hot.is_empty() && direct_spins < DIRECT_SPINS {
                // Spin on the busy connections' sockets themselves.
                direct_spins += 1;
                for &i in &self.hot {
                    if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                        c.rx_ready = true;
                    }
                }
                self.ready.extend_from_slice(&self.hot);
            } else {
                direct_spins = 0;
                // Connections queued by a completion routed last round are
                // driven without sleeping first.
                let timeout = if spin || !self.ready.is_empty() {
                    Duration::ZERO
                } else {
                    slept = true;
                    let t = TICK.saturating_sub(now.duration_since(last_tick));
                    wake_at.map_or(t, |w| t.min(w.saturating_duration_since(now)))
                };
                if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                    if e.kind() != io::ErrorKind::Interrupted {
                        tracing::error!("poll failed: {e}");
                        return;
                    }
                }
                // Completions routed from the events are stamped after the wait.
                self.now = Instant::now();
                self.take_events(&events);
            }
            let now = Instant::now();
            self.now = now;
            if now.duration_since(last_tick) >= TICK {
                last_tick = now;
                if self.storage.collect() {
                    self.sync_storage_fds();
                }
                for i in 0..self.conns.len() {
                    if let Some(c) = self.conns[i].as_mut() {
                        c.qp.tick(now);
                        // Only connections the tick gave work (an AEN to send,
                        // a close) need a pass; the rest wait for epoll.
                        if c.qp.output_len() > 0 || c.qp.wants_close() {
                            self.ready.push(i);
                        }
                    }
                }
                for c in self.rdma.iter_mut().flatten() {
                    c.with_queue(|q| q.tick(now));
                }
            }
            if !self.ready.is_empty() {
                // Connections queued while these are driven (a completion
                // routed to them) land in `self.ready` for the next round.
                let spare = std::mem::take(&mut self.spare);
                let mut ready = std::mem::replace(&mut self.ready, spare);
                ready.sort_unstable();
                ready.dedup();
                let contended = self.quantum != usize::MAX && self.order_ready(&mut ready);
                let mut worked = false;
                for &i in &ready {
                    if self.drive(i, contended) {
                        worked = true;
                        self.mark_hot(i, now);
                    }
                }
                ready.clear();
                self.spare = ready;
                if worked {
                    if slept && self.mode == PollMode::Adaptive {
                        self.idle.woke_after(now.duration_since(last_work));
                    }
                    last_work = now;
                }
                self.prune_hot(now);
            }
            if !self.rdma.is_empty() && self.drive_rdma() {
                if slept && self.mode == PollMode::Adaptive {
                    self.idle.woke_after(now.duration_since(last_work));
                }
                last_work = now;
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
                    // Only writability (EPOLLOUT while output is blocked)
                    // leaves nothing to read.
                    c.rx_ready |= !ev.is_writable()
                        || ev.is_readable()
                        || ev.is_read_closed()
                        || ev.is_error();
                }
                self.ready.push(i);
            }
        }
    }

    /// Queues the throttled connections whose wait is over for a pass;
    /// returns when the next of the others may run.
    fn due_throttled(&mut self, now: Instant) -> Option<Instant> {
        if self.throttled.is_empty() {
            return None;
        }
        let mut next: Option<Instant> = None;
        let (conns, ready) = (&self.conns, &mut self.ready);
        self.throttled.retain(|&i| {
            match conns
                .get(i)
                .and_then(Option::as_ref)
                .and_then(|c| c.qp.throttle_wake())
            {
                Some(t) if t > now => {
                    next = Some(next.map_or(t, |n| n.min(t)));
                    true
                }
                Some(_) => {
                    ready.push(i);
                    false
                }
                None => false,
            }
        });
        next
    }

    /// Fair sharing: orders the round ([`order_round`]) by the connections'
    /// backlogs; returns whether it is contended.
    fn order_ready(&self, ready: &mut [usize]) -> bool {
        let conns = &self.conns;
        let conn = |i: usize| conns.get(i).and_then(Option::as_ref);
        order_round(
            ready,
            &self.hot,
            |i| conn(i).is_some_and(|c| c.backlogged),
            |i| conn(i).is_some_and(|c| !c.backlogged && c.qp.pending_bytes() <= QUIET_BYTES),
        )
    }

    /// Records that connection `i` worked; it joins the hot set if there is room.
    fn mark_hot(&mut self, i: usize, now: Instant) {
        if self.mode == PollMode::Never {
            return;
        }
        if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
            c.last_work = now;
            if !self.hot.contains(&i) && self.hot.len() < HOT_MAX {
                self.hot.push(i);
            }
        }
    }

    /// Drops closed connections and those idle for the spin window (unless
    /// their output is blocked) from the hot set.
    fn prune_hot(&mut self, now: Instant) {
        let conns = &self.conns;
        let idle = self.idle.get();
        self.hot.retain(|&i| {
            conns
                .get(i)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.want_write || now.duration_since(c.last_work) < idle)
        });
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
            self.conns[i] = Some(Conn {
                sock,
                qp,
                zombie: false,
                eof: false,
                dead: false,
                want_write: false,
                hup: false,
                rx_ready: true,
                last_work: Instant::now(),
                backlogged: false,
            });
            self.ready.push(i);
        }
    }

    /// Moves a connection forward as far as it goes without blocking (with
    /// fair sharing: as far as its share of this round); returns whether
    /// anything moved. `contended`: the round is shared with other busy
    /// connections, so a backlogged one reads only a short slice.
    fn drive(&mut self, i: usize, contended: bool) -> bool {
        match self.conns.get(i).and_then(Option::as_ref) {
            None => return false,
            Some(c) if c.zombie => {
                self.pump(i);
                self.close(i);
                return false;
            }
            Some(_) => {}
        }
        let mut worked = false;
        let now = self.now;
        let mut budget = match self.conns.get(i).and_then(Option::as_ref) {
            Some(c) => {
                let q = if contended && c.backlogged {
                    (self.quantum / CONTENDED_DIVISOR).max(CONTENDED_MIN)
                } else {
                    self.quantum
                };
                q.saturating_mul(c.qp.share_weight().max(1) as usize)
            }
            None => return false,
        };
        // This round's share was read: the rest waits for the next round.
        let mut yielded = false;
        loop {
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                return worked;
            };
            c.qp.set_now(now);
            worked |= c.qp.resume_throttled();
            // Receive: everything the socket has, PDUs processed as they complete.
            // `more` is set when a read filled the buffer (the socket may hold more)
            // or when reading stopped because our output backed up.
            let mut more = false;
            while !c.dead && !c.eof && c.rx_ready {
                if !c.qp.wants_read() {
                    more = !c.qp.wants_close();
                    break;
                }
                if budget == 0 {
                    yielded = true;
                    break;
                }
                let space = c.qp.rx_space();
                let room = space.len().min(budget);
                match c.sock.read(&mut space[..room]) {
                    Ok(0) => c.eof = true,
                    Ok(n) => {
                        c.qp.on_received(n);
                        budget -= n;
                        worked = true;
                        // A short read drained the socket: skip the read that
                        // would only say EAGAIN (epoll reports the next arrival).
                        if n < room && !c.hup {
                            c.rx_ready = false;
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        c.rx_ready = false;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => c.dead = true,
                }
            }
            worked |= self.pump(i);
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                return worked;
            };
            // Send: all PDUs this pass produced, in as few writes as the socket
            // takes (a deep queue's batch needs more iovecs than a shallow one's).
            let blocked = if c.qp.output_segments() <= SMALL_IOV {
                send_output::<SMALL_IOV>(c, &mut worked)
            } else {
                send_output::<MAX_IOV>(c, &mut worked)
            };
            // Ask epoll for writability only while output is blocked: edge-
            // triggered EPOLLOUT on every ACK would wake the loop for nothing.
            if blocked != c.want_write && !c.dead {
                let interest = if blocked {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                match self
                    .poll
                    .registry()
                    .reregister(&mut c.sock, Token(i), interest)
                {
                    Ok(()) => {
                        c.want_write = blocked;
                        if blocked {
                            self.blocked += 1;
                        } else {
                            self.blocked -= 1;
                        }
                    }
                    Err(_) => c.dead = true,
                }
            }
            let dead = c.dead;
            // Sending may have freed buffer budget and started waiting commands.
            let completed = self.pump(i);
            worked |= completed;
            if !(more || completed) || blocked || dead || yielded {
                break;
            }
            // Responses went out: the host's next commands may be here
            // already (a deep queue answers while this pass runs).
            if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                c.rx_ready = true;
            }
        }
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return worked;
        };
        let drained = c.qp.output_len() == 0 && c.qp.in_flight() == 0;
        if c.dead || c.qp.finished() || (c.eof && drained) {
            self.close(i);
        } else {
            if c.qp.throttle_wake().is_some() && !self.throttled.contains(&i) {
                self.throttled.push(i);
            }
            c.backlogged = yielded;
            if yielded {
                // Edge-triggered epoll will not report what is left unread.
                self.ready.push(i);
            }
        }
        worked
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
            hand_out(&mut c.qp, Owner::Tcp(i), to);
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
            let owner = Owner::of(c.tag);
            if self.route(owner, Done::Storage(c)) {
                if let Owner::Tcp(j) = owner {
                    if j != current {
                        self.ready.push(j);
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
            let owner = Owner::of(d.tag);
            if self.route(owner, Done::Offload(d)) {
                if let Owner::Tcp(j) = owner {
                    self.ready.push(j);
                }
            }
        }
    }

    /// Hands `done` to its connection; false when there is none (a bug:
    /// zombies keep their index until their requests complete).
    fn route(&mut self, owner: Owner, done: Done) -> bool {
        let now = self.now;
        match owner {
            Owner::Tcp(j) => match self.conns.get_mut(j).and_then(Option::as_mut) {
                Some(conn) => deliver(&mut conn.qp, now, done),
                None => {
                    tracing::error!(?owner, "completion for no connection");
                    return false;
                }
            },
            Owner::Rdma(k) => match self.rdma.get_mut(k).and_then(Option::as_mut) {
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
            if !ok {
                self.rdma[i] = Some(c);
                self.close_rdma(i);
                continue;
            }
            tracing::debug!(peer = %c.peer(), local = %c.local(), "RDMA queue pair accepted");
            self.rdma[i] = Some(c);
        }
        self.rdma_rx = Some(rx);
    }

    /// Polls every RDMA queue's CQ, hands their storage requests to the
    /// worker's queues and routes what completed; closes the finished
    /// ones. Returns whether anything moved.
    fn drive_rdma(&mut self) -> bool {
        let mut worked = false;
        for i in 0..self.rdma.len() {
            let Some(c) = self.rdma[i].as_mut() else {
                continue;
            };
            worked |= c.drive(self.now);
            // Authentication's DH and PTPL writes go to the helper thread
            // and storage to the worker's queues, as for TCP.
            let to = Sinks {
                offload: &self.offload,
                storage: &mut self.storage,
                failed: &mut self.comps,
            };
            if hand_out(c, Owner::Rdma(i), to) {
                if self.storage.len() != self.storage_opened {
                    self.sync_storage_fds();
                }
                self.storage.commit();
                worked = true;
            }
            if self.rdma[i].as_ref().is_some_and(|c| c.in_flight() > 0) {
                self.route_completions(usize::MAX);
            }
            if self.rdma[i].as_ref().is_some_and(RdmaConn::finished) {
                self.close_rdma(i);
            }
        }
        worked
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
        self.live.fetch_sub(1, Ordering::AcqRel);
        self.rdma_free.push(i);
    }

    /// Registers the eventfds of newly opened storage queues (closed ones
    /// left epoll when their fd closed).
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
    }

    /// Closes connection `i`; one with storage requests in flight becomes a
    /// zombie (socket shut down, index kept) until they complete.
    fn close(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if !c.zombie {
            let _ = self.poll.registry().deregister(&mut c.sock);
            if c.want_write {
                c.want_write = false;
                self.blocked -= 1;
            }
        }
        if c.qp.in_flight() > 0 {
            if !c.zombie {
                tracing::debug!(
                    in_flight = c.qp.in_flight(),
                    "closing a connection with storage requests in flight"
                );
                c.zombie = true;
                c.dead = true;
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
            }
            return;
        }
        self.conns[i] = None;
        self.live.fetch_sub(1, Ordering::AcqRel);
        self.free.push(i);
    }
}

/// Fair sharing: puts the round's connections without a backlog before the
/// backlogged ones (a quiet connection's command is served before the next
/// slice of a deep queue's data), keeping index order within each group.
/// Returns whether the round is contended: backlogged connections share the
/// loop with a busy `quiet` one (ready now, or in `hot`: worked lately; no
/// backlog, little pending work), whose commands short slices protect.
/// Otherwise (bulk queues among themselves) they keep their full share
/// (large reads, few syscalls).
fn order_round(
    ready: &mut [usize],
    hot: &[usize],
    deep: impl Fn(usize) -> bool,
    quiet: impl Fn(usize) -> bool,
) -> bool {
    let backlogged = ready.iter().filter(|&&i| deep(i)).count();
    if backlogged == 0 {
        return false;
    }
    if backlogged < ready.len() {
        // Index order within each group (indices are unique after the
        // dedup; an unstable sort allocates nothing).
        ready.sort_unstable_by_key(|&i| (deep(i), i));
    }
    ready.iter().chain(hot).any(|&i| quiet(i))
}

/// Writes the connection's output with `writev`s of up to `N` segments until
/// it is all sent or the socket is full; returns whether it blocked.
fn send_output<const N: usize>(c: &mut Conn, worked: &mut bool) -> bool {
    while c.qp.output_len() > 0 && !c.dead {
        let mut iov = [IoSlice::new(&[]); N];
        let n = c.qp.output_slices(&mut iov);
        let queued: usize = iov[..n].iter().map(|s| s.len()).sum();
        match c.sock.write_vectored(&iov[..n]) {
            Ok(0) => c.dead = true,
            Ok(n) => {
                c.qp.consume_output(n);
                *worked = true;
                if n < queued {
                    return true; // the socket buffer is full
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => c.dead = true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::order_round;

    #[test]
    fn quiet_connections_go_first_and_contention_needs_one() {
        let deep = |i: usize| i == 0 || i == 3;
        // 1 is busy but holds much (a bulk host's other queue): not quiet.
        let quiet = |i: usize| !deep(i) && i != 1;
        // A backlogged connection (0) and a quiet one (2): the quiet first, contended.
        let mut r = [0, 2];
        assert!(order_round(&mut r, &[], deep, quiet));
        assert_eq!(r, [2, 0]);
        // Groups keep their index order.
        let mut r = [0, 1, 2, 3];
        assert!(order_round(&mut r, &[], deep, quiet));
        assert_eq!(r, [1, 2, 0, 3]);
        // Only backlogged connections ready, but a quiet one worked lately: contended.
        let mut r = [0, 3];
        assert!(order_round(&mut r, &[0, 5], deep, quiet));
        assert_eq!(r, [0, 3]);
        // Only backlogged connections, none quiet: full shares.
        assert!(!order_round(&mut [0, 3], &[0, 3], deep, quiet));
        // Backlogged queues beside a busy one that is not quiet: full shares,
        // but the one without a backlog still goes first.
        let mut r = [0, 1];
        assert!(!order_round(&mut r, &[0, 1], deep, quiet));
        assert_eq!(r, [1, 0]);
        // No backlog: nothing to protect.
        let mut r = [2, 1];
        assert!(!order_round(&mut r, &[5], deep, quiet));
        assert_eq!(r, [2, 1]);
    }
}
