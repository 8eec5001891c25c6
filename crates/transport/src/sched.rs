//! The worker's scheduler: which connections a round serves and in what
//! order, how much each may read, which sockets the loop spins on, whether
//! it sleeps and until when, and when each connection's periodic work is
//! due. It performs no I/O and reads no clock: in the manner of
//! quinn-proto's connection, the shell (`worker.rs`) tells it what happened,
//! with the time ([`Scheduler::add`], [`Scheduler::on_event`],
//! [`Scheduler::wake`], [`Scheduler::on_driven`], [`Scheduler::close`]), and
//! asks what to do ([`Scheduler::wait`], [`Scheduler::next_round`],
//! [`Scheduler::budget`], [`Scheduler::poll_due`],
//! [`Scheduler::poll_timeout`]). Its tests run it on a simulated clock.
//! It knows connections by their index in the worker's one table, not by
//! transport: an RDMA queue pair's CQ events are reported as a socket's
//! readiness is, and its pass (polling the CQ) as a socket's (`worker.rs`).
//!
//! Fair sharing: a connection reads at most `fair_share` bytes per round and
//! unit of its host's weight, then waits for the next round ([`Rx::Backlog`]);
//! a round serves the connections without a backlog first, so a quiet
//! connection's command goes before a deep queue's next slice of data, and
//! while a quiet connection shares the loop with backlogged ones these read
//! short slices (`CONTENDED_DIVISOR`).
//!
//! Polling: with [`PollMode::Adaptive`] the loop spins while work keeps
//! arriving and for an idle window after the last of it ([`IdleWindow`]:
//! learnt from the gaps the hosts leave), or while a connection's output is
//! blocked and still moving, then sleeps in `epoll_wait` until the next
//! event or timer ([`Scheduler::poll_timeout`]); `Always` never sleeps and
//! `Never` always does. [`PollMode::Hybrid`] (the default) is adaptive
//! that, within the idle window, may also sleep on a precise timer through
//! the part of a gap the recent gaps promise ([`Wait::Sleep`]; the decision
//! is `farflash-nap`'s, and the shell reports how each sleep ended,
//! [`Scheduler::on_woken`]). Spinning `recv`s straight from the few connections
//! that worked lately (the hot set), with an `epoll_wait(0)` every
//! `DIRECT_SPINS` rounds for the rest.
//!
//! Timers: each connection's tick (keep-alive, AERs, teardown: the command
//! layer's `tick`) is due `TICK` after its last if the connection moved
//! anything since, else `IDLE_TICK` after it (an idle queue's tick finds
//! nothing to do, and a thousand of them cost a cache miss each, ten times
//! a second); ticks are on a `TICK_GRAIN` grid so that connections
//! accepted together share a wake-up. What an idle queue must still see
//! within a tick (its controller killed or reset, an event for its host, a
//! management change) moves a change counter the shell compares at every
//! [`Due::Scan`], `TICK` apart, ticking all its connections when it moved.
//! The worker's own housekeeping is a one-shot timer the shell re-arms.
//! Deadlines are pushed in order, one queue per period: two sorted queues,
//! touched per tick, never per I/O.

use farflash_core::config::PollMode;
use farflash_nap::{Decision, Nap, Woke};
use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

/// A connection's periodic work runs at most this long after its last
/// while it works, and the shell looks for changes this often.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// ... and this long after it once the connection moved nothing since.
/// Keep-alive expiry is then seen up to this much later (KATO + 1 s of
/// grace + this; Linux nvmet checks every KATO, so up to twice KATO).
pub(crate) const IDLE_TICK: Duration = Duration::from_secs(1);
/// Tick deadlines are rounded down to this grid (so they come `TICK -
/// TICK_GRAIN` to `TICK` apart): a coarse grid gathers many connections'
/// ticks into one wake-up (1,024 controllers' keep-alives otherwise wake an
/// idle loop at every grid point).
const TICK_GRAIN: Duration = Duration::from_millis(50);
/// Connections spun on directly (`recv` without asking epoll first) while
/// polling; with more busy connections than this, epoll alone finds them.
const HOT_MAX: usize = 4;
/// Direct spins over the hot connections between two `epoll_wait(0)`s
/// (which serve every other connection, backend eventfd and new arrival).
const DIRECT_SPINS: u32 = 16;
/// Adaptive polling spins through gaps of up to this many times `poll_idle`.
const IDLE_MAX_FACTOR: u32 = 20;
/// Expired windows in a row, each followed by a long sleep, before the
/// idle window shrinks.
const DECAY_AFTER: u32 = 4;
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

/// Where a connection is in its life, whatever its transport (an RDMA
/// queue pair's "socket" is its completion queue: `Unread` means completions
/// may wait there; it never reads an EOF or lingers as a zombie: it stays
/// open until nothing of it is out). Transitions happen in
/// [`Scheduler::on_driven`] and [`Scheduler::close`] only, and go forward:
/// `Open` -> `ReadClosed` -> `Failed` -> `Zombie` (steps may be skipped);
/// then the connection is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Reading and sending.
    Open(Rx),
    /// The peer closed its side: nothing more to read, but what is owed
    /// (a response, a TermReq) is still sent if the socket takes it.
    ReadClosed,
    /// The socket failed: nothing more moves; it closes after this pass.
    Failed,
    /// Closed with storage requests in flight: socket shut down, index
    /// kept (a completion may still name it) until they have completed.
    /// Never read; passes only route its completions.
    Zombie,
}

/// What an open connection's socket may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rx {
    /// Drained (the last read said EAGAIN or came short): a pass for other
    /// reasons (a completion, a tick) skips the `recv`.
    Drained,
    /// Maybe unread bytes: epoll reported it, the loop spins on it, or its
    /// last pass stopped before draining it.
    Unread,
    /// Its last pass used its share with data left: it goes after the
    /// connections without a backlog.
    Backlog,
}

impl State {
    /// Whether `self` may become `to` (forward only).
    fn may_become(self, to: State) -> bool {
        use State::*;
        matches!(
            (self, to),
            (Open(_), _)
                | (ReadClosed, ReadClosed | Failed | Zombie)
                | (Failed, Failed | Zombie)
                | (Zombie, Zombie)
        )
    }
}

/// How a connection's pass went: the shell's report to [`Scheduler::on_driven`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Anything moved.
    pub worked: bool,
    /// The socket may still hold bytes.
    pub unread: bool,
    /// The pass used its read budget with bytes left (implies `unread`).
    pub yielded: bool,
    /// The peer's EOF was read (or had been).
    pub eof: bool,
    /// The socket failed.
    pub failed: bool,
    /// The connection carries no I/O queue (an admin queue, or not yet
    /// connected): its work neither keeps the loop polling nor joins the
    /// hot set. Admin commands are not latency-critical, and a thousand
    /// hosts' keep-alives, a few milliseconds apart, would otherwise keep
    /// an idle target spinning (issue 33: idle CPU with 1,024 controllers).
    pub control: bool,
}

impl Pass {
    /// A pass starting in `state`.
    pub fn starting(state: State) -> Pass {
        Pass {
            unread: matches!(state, State::Open(Rx::Unread | Rx::Backlog)),
            eof: state == State::ReadClosed,
            failed: state == State::Failed,
            ..Pass::default()
        }
    }
}

/// How the shell waits before its next round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Do not ask epoll: the hot connections are queued, to be read directly.
    Direct,
    /// `epoll_wait` this long (zero: just look; None: until an event).
    Poll(Option<Duration>),
    /// Hybrid polling: `epoll_wait` until an event or a precise timer at
    /// this instant (then report [`Scheduler::on_woken`]), after which the
    /// loop polls for the rest of the expected gap.
    Sleep(Instant),
}

/// What a timer says is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// A connection's periodic work (`tick`); its next is scheduled.
    Tick(usize),
    /// The worker's own (closing orphaned storage queues); one-shot.
    Housekeeping,
    /// Look whether anything changed that every queue should see now
    /// (`farflash_core::controller::changes`); re-armed while there are
    /// connections.
    Scan,
}

/// The connections of one round, in the order to drive them.
pub(crate) struct Round {
    pub conns: Vec<usize>,
    /// Backlogged connections share the round with a quiet one: they read
    /// short slices ([`Scheduler::budget`]).
    pub contended: bool,
}

/// A connection's scheduling state.
#[derive(Clone, Copy, Debug)]
struct Slot {
    state: State,
    /// Its output is blocked (the shell waits for writability).
    blocked: bool,
    /// Last time a pass over it moved anything.
    last_work: Instant,
    /// No pass moved anything since its last tick (set as a tick is handed
    /// out, cleared by work): its next tick can wait `IDLE_TICK`.
    ticked_idle: bool,
}

pub(crate) struct Scheduler {
    mode: PollMode,
    /// Bytes per round and unit of weight; `usize::MAX`: no fair sharing.
    quantum: usize,
    idle: IdleWindow,
    /// The worker's connections (every transport) by index.
    slots: Vec<Option<Slot>>,
    /// Connections queued for the next round (duplicates allowed).
    ready: Vec<usize>,
    /// The other half of `ready`'s double buffer (no allocation per round).
    spare: Vec<usize>,
    /// Connections that worked within the idle window (at most `HOT_MAX`).
    hot: Vec<usize>,
    direct_spins: u32,
    /// Connections with output blocked: while it still moves, the loop
    /// keeps polling (sleeping until EPOLLOUT, which comes only once a third
    /// of the send buffer is free, cost deep queues a quarter of their speed).
    blocked: usize,
    /// Last time anything moved.
    last_work: Instant,
    /// The last [`Scheduler::wait`] let the loop sleep.
    slept: bool,
    /// Connections with commands waiting for QoS tokens, and when they may run.
    throttled: Vec<(usize, Instant)>,
    /// Pending timers due `TICK` after they were set, earliest first.
    timers: VecDeque<(Instant, Due)>,
    /// Ticks of connections that moved nothing, due `IDLE_TICK` after.
    idle_ticks: VecDeque<(Instant, Due)>,
    /// Origin of the tick grid.
    epoch: Instant,
    /// Hybrid polling's decision: the gaps between work, the wake-up
    /// cost, the bets and their back-off (`farflash-nap`).
    nap: Nap,
}

impl Scheduler {
    /// `poll_idle`: the idle window of an idle target; `fair_share`: bytes
    /// per round and unit of weight (0: no limit).
    pub(crate) fn new(
        mode: PollMode,
        poll_idle: Duration,
        fair_share: usize,
        now: Instant,
    ) -> Scheduler {
        Scheduler {
            mode,
            quantum: NonZeroUsize::new(fair_share).map_or(usize::MAX, NonZeroUsize::get),
            idle: IdleWindow::new(poll_idle, poll_idle * IDLE_MAX_FACTOR),
            slots: Vec::new(),
            ready: Vec::new(),
            spare: Vec::new(),
            hot: Vec::with_capacity(HOT_MAX),
            direct_spins: 0,
            blocked: 0,
            last_work: now,
            slept: false,
            throttled: Vec::new(),
            timers: VecDeque::new(),
            idle_ticks: VecDeque::new(),
            epoch: now,
            nap: Nap::new(now),
        }
    }

    // ---- events in -------------------------------------------------------

    /// A new connection `i`: its ticks start, and it is queued for a pass.
    pub(crate) fn add(&mut self, i: usize, now: Instant) {
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        debug_assert!(self.slots[i].is_none(), "connection {i} added twice");
        self.slots[i] = Some(Slot {
            state: State::Open(Rx::Unread),
            blocked: false,
            last_work: now,
            ticked_idle: false,
        });
        self.ready.push(i);
        // The scan runs while there are connections (re-armed as it fires);
        // the first connection after none arms it (housekeeping may be
        // pending then, so look for the scan itself).
        if !self.timers.iter().any(|&(_, d)| d == Due::Scan) {
            self.schedule(Due::Scan, now, TICK);
        }
        self.schedule(Due::Tick(i), now, TICK);
    }

    /// epoll reported connection `i` (`readable`: anything but mere
    /// writability); it is queued.
    pub(crate) fn on_event(&mut self, i: usize, readable: bool) {
        if readable {
            self.mark_unread(i);
        }
        self.ready.push(i);
    }

    /// Queues connection `i` for a pass (a completion came, a tick gave it
    /// output) without reading.
    pub(crate) fn wake(&mut self, i: usize) {
        self.ready.push(i);
    }

    /// Connection `i`'s pass went as `p`: its state follows, a backlog waits
    /// for the next round, work keeps it hot.
    pub(crate) fn on_driven(&mut self, i: usize, p: Pass, now: Instant) {
        let to = if p.failed {
            State::Failed
        } else if p.eof {
            State::ReadClosed
        } else if p.yielded {
            State::Open(Rx::Backlog)
        } else if p.unread {
            State::Open(Rx::Unread)
        } else {
            State::Open(Rx::Drained)
        };
        if !self.set_state(i, to) {
            return;
        }
        if p.worked {
            if let Some(s) = self.slot_mut(i) {
                s.ticked_idle = false;
            }
        }
        if to == State::Open(Rx::Backlog) {
            // Edge-triggered epoll will not report what is left unread.
            self.ready.push(i);
        }
        if p.worked && !p.control {
            self.on_worked(i, now);
        }
    }

    /// Something of connection `i`'s moved at `now` (it joins the hot set
    /// if there is room). The first work after a sleep teaches the idle
    /// window the gap.
    pub(crate) fn on_worked(&mut self, i: usize, now: Instant) {
        // The gap is measured only for the modes that learn from it (the
        // clock arithmetic is a per-read cost).
        if matches!(self.mode, PollMode::Adaptive | PollMode::Hybrid) {
            let gap = now.saturating_duration_since(self.last_work);
            if std::mem::take(&mut self.slept) {
                self.idle.woke_after(gap);
            }
            if self.mode == PollMode::Hybrid {
                self.nap.work(now);
            }
        } else {
            self.slept = false;
        }
        self.last_work = now;
        if self.mode == PollMode::Never {
            return;
        }
        if let Some(s) = self.slot_mut(i) {
            if s.state == State::Zombie {
                return;
            }
            s.last_work = now;
            if !self.hot.contains(&i) && self.hot.len() < HOT_MAX {
                self.hot.push(i);
            }
        }
    }

    /// Connection `i`'s output is blocked (or moves again).
    pub(crate) fn set_blocked(&mut self, i: usize, blocked: bool) {
        let slot = self.slots.get_mut(i).and_then(Option::as_mut);
        if let Some(s) = slot.filter(|s| s.blocked != blocked) {
            s.blocked = blocked;
            self.blocked = if blocked {
                self.blocked + 1
            } else {
                self.blocked - 1
            };
        }
    }

    /// Connection `i` has commands waiting for QoS tokens until `at` (None:
    /// none waits).
    pub(crate) fn set_throttle(&mut self, i: usize, at: Option<Instant>) {
        let live = matches!(self.state(i), Some(s) if s != State::Zombie);
        let at = at.filter(|_| live);
        let pos = self.throttled.iter().position(|&(j, _)| j == i);
        match (pos, at) {
            (Some(k), Some(at)) => self.throttled[k].1 = at,
            (Some(k), None) => {
                self.throttled.swap_remove(k);
            }
            (None, Some(at)) => self.throttled.push((i, at)),
            (None, None) => {}
        }
    }

    /// The worker's housekeeping is due a tick from `now` (unless it
    /// already is).
    pub(crate) fn schedule_housekeeping(&mut self, now: Instant) {
        if !self.timers.iter().any(|&(_, d)| d == Due::Housekeeping) {
            self.schedule(Due::Housekeeping, now, TICK);
        }
    }

    /// Connection `i` is closed: with requests in flight (`lingering`) it
    /// becomes a zombie, else it is removed and its timers with it.
    pub(crate) fn close(&mut self, i: usize, lingering: bool) {
        if lingering {
            if self.set_state(i, State::Zombie) {
                self.set_blocked(i, false);
                self.hot.retain(|&j| j != i);
                self.set_throttle(i, None);
            }
            return;
        }
        self.set_blocked(i, false);
        if let Some(s) = self.slots.get_mut(i) {
            *s = None;
        }
        self.hot.retain(|&j| j != i);
        self.ready.retain(|&j| j != i);
        self.set_throttle(i, None);
        self.timers.retain(|&(_, d)| d != Due::Tick(i));
        self.idle_ticks.retain(|&(_, d)| d != Due::Tick(i));
    }

    // ---- decisions out ---------------------------------------------------

    /// Connection `i`'s state (None: no such connection).
    pub(crate) fn state(&self, i: usize) -> Option<State> {
        self.slot(i).map(|s| s.state)
    }

    /// Whether connection `i`'s output is blocked.
    pub(crate) fn blocked(&self, i: usize) -> bool {
        self.slot(i).is_some_and(|s| s.blocked)
    }

    /// How the loop waits now: spin on the hot sockets, look at epoll
    /// without sleeping, or sleep until [`Scheduler::poll_timeout`].
    /// Throttled connections whose time has come are queued first.
    pub(crate) fn wait(&mut self, now: Instant) -> Wait {
        let ready = &mut self.ready;
        self.throttled.retain(|&(i, at)| {
            let due = at <= now;
            if due {
                ready.push(i);
            }
            !due
        });
        let spin = match self.mode {
            PollMode::Always => true,
            PollMode::Never => false,
            PollMode::Adaptive | PollMode::Hybrid => self.spin_until(now).is_some(),
        };
        self.slept = false;
        if spin && self.mode == PollMode::Hybrid && self.ready.is_empty() && self.blocked == 0 {
            // Sleep through the part of the gap the recent gaps promise
            // (`farflash-nap`), never past a timer or the idle window.
            if let Decision::Sleep(at) = self.nap.decide(now, self.poll_timeout(now)) {
                return Wait::Sleep(at);
            }
        }
        if spin && !self.hot.is_empty() && self.direct_spins < DIRECT_SPINS {
            self.direct_spins += 1;
            for k in 0..self.hot.len() {
                let i = self.hot[k];
                self.mark_unread(i);
                self.ready.push(i);
            }
            return Wait::Direct;
        }
        self.direct_spins = 0;
        if spin || !self.ready.is_empty() {
            return Wait::Poll(Some(Duration::ZERO));
        }
        self.slept = true;
        Wait::Poll(
            self.poll_timeout(now)
                .map(|t| t.saturating_duration_since(now)),
        )
    }

    /// When the loop must look again at the latest: the earliest timer, QoS
    /// wake-up, or (adaptive polling) end of the spin window still ahead.
    pub(crate) fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let spin = match self.mode {
            PollMode::Adaptive | PollMode::Hybrid => self.spin_until(now),
            _ => None,
        };
        [self.timer_deadline(), self.throttle_deadline(), spin]
            .into_iter()
            .flatten()
            .min()
    }

    /// The earliest timer.
    fn timer_deadline(&self) -> Option<Instant> {
        [self.timers.front(), self.idle_ticks.front()]
            .into_iter()
            .flatten()
            .map(|&(at, _)| at)
            .min()
    }

    /// The earliest QoS wake-up.
    fn throttle_deadline(&self) -> Option<Instant> {
        self.throttled.iter().map(|&(_, at)| at).min()
    }

    /// The loop is back from a [`Wait::Sleep`] at `now`, as `how` says
    /// (`Aborted`: it could not sleep); true when an arrival ended the
    /// sleep before its timer (a lost bet: counted, and the loop backs off).
    pub(crate) fn on_woken(&mut self, now: Instant, how: Woke) -> bool {
        self.nap.woke(now, how)
    }

    /// The next timer due by `now`, if any (call until None). A
    /// connection's next tick is scheduled as its tick is handed out.
    pub(crate) fn poll_due(&mut self, now: Instant) -> Option<Due> {
        let fast = self.timers.front().map(|&(at, _)| at);
        let slow = self.idle_ticks.front().map(|&(at, _)| at);
        let lane = match (fast, slow) {
            (Some(f), Some(s)) if s < f => &mut self.idle_ticks,
            (Some(_), _) => &mut self.timers,
            (None, Some(_)) => &mut self.idle_ticks,
            (None, None) => return None,
        };
        if lane.front()?.0 > now {
            return None;
        }
        let (_, due) = lane.pop_front()?;
        match due {
            Due::Tick(i) => {
                // Idle since its last tick: the next comes later.
                let idle = self
                    .slot_mut(i)
                    .map(|s| std::mem::replace(&mut s.ticked_idle, true));
                let period = if idle == Some(true) { IDLE_TICK } else { TICK };
                self.schedule(due, now, period);
            }
            Due::Scan if !(self.timers.is_empty() && self.idle_ticks.is_empty()) => {
                self.schedule(due, now, TICK)
            }
            Due::Scan | Due::Housekeeping => {}
        }
        Some(due)
    }

    /// Whether connections wait for a round.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The queued connections, each once, ordered for fair sharing: those
    /// without a backlog first, index order within each group. `held(i)`:
    /// connection `i`'s data-buffer bytes (asked only while some are
    /// backlogged). Give the round back with [`Scheduler::finish_round`].
    pub(crate) fn next_round(&mut self, held: impl Fn(usize) -> usize) -> Round {
        let spare = std::mem::take(&mut self.spare);
        let mut conns = std::mem::replace(&mut self.ready, spare);
        conns.sort_unstable();
        conns.dedup();
        let state = |i: usize| self.state(i);
        let contended = self.quantum != usize::MAX
            && order_round(
                &mut conns,
                &self.hot,
                |i| state(i) == Some(State::Open(Rx::Backlog)),
                |i| {
                    matches!(state(i), Some(State::Open(Rx::Drained | Rx::Unread)))
                        && held(i) <= QUIET_BYTES
                },
            );
        Round { conns, contended }
    }

    /// The round is over: its buffer is kept for the next; connections
    /// idle for the idle window leave the hot set (unless their output is
    /// blocked).
    pub(crate) fn finish_round(&mut self, mut round: Round, now: Instant) {
        round.conns.clear();
        self.spare = round.conns;
        let (slots, window) = (&self.slots, self.idle.cur);
        self.hot.retain(|&i| {
            slots
                .get(i)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.blocked || now.saturating_duration_since(s.last_work) < window)
        });
    }

    /// Bytes connection `i` may read in its turn of a round (`contended`:
    /// [`Round::contended`]), for a host of `weight`.
    pub(crate) fn budget(&self, i: usize, contended: bool, weight: u32) -> usize {
        let q = if contended && self.state(i) == Some(State::Open(Rx::Backlog)) {
            (self.quantum / CONTENDED_DIVISOR).max(CONTENDED_MIN)
        } else {
            self.quantum
        };
        q.saturating_mul(weight.max(1) as usize)
    }

    // ---- internals -------------------------------------------------------

    fn slot(&self, i: usize) -> Option<&Slot> {
        self.slots.get(i).and_then(Option::as_ref)
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut Slot> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    /// The one place a connection's state changes; false (and a debug
    /// panic) for a connection that is gone or a step back.
    fn set_state(&mut self, i: usize, to: State) -> bool {
        let Some(s) = self.slot_mut(i) else {
            return false;
        };
        let ok = s.state.may_become(to);
        debug_assert!(ok, "connection {i}: {:?} -> {to:?}", s.state);
        if ok {
            s.state = to;
        }
        ok
    }

    fn mark_unread(&mut self, i: usize) {
        if let Some(s) = self.slot_mut(i) {
            if s.state == State::Open(Rx::Drained) {
                s.state = State::Open(Rx::Unread);
            }
        }
    }

    /// Until when adaptive polling spins: the idle window after the last
    /// work (the longest window while output is blocked); None once past.
    fn spin_until(&self, now: Instant) -> Option<Instant> {
        let window = if self.blocked > 0 {
            self.idle.max
        } else {
            self.idle.cur
        };
        let end = self.last_work + window;
        (end > now).then_some(end)
    }

    /// Schedules `what` `period` (`TICK` or `IDLE_TICK`) from `now`,
    /// rounded down to the grid, in that period's queue.
    fn schedule(&mut self, what: Due, now: Instant, period: Duration) {
        let t = now + period;
        let off = t.saturating_duration_since(self.epoch).as_nanos() % TICK_GRAIN.as_nanos();
        let at = t - Duration::from_nanos(off as u64);
        let lane = if period == TICK {
            &mut self.timers
        } else {
            &mut self.idle_ticks
        };
        // Deadlines of one period come in order: this is the back but for
        // a clock step (then a search).
        if lane.back().is_none_or(|&(t, _)| t <= at) {
            lane.push_back((at, what));
        } else {
            let k = lane.partition_point(|&(t, _)| t <= at);
            lane.insert(k, (at, what));
        }
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

/// How long an adaptive event loop keeps polling after its last work.
///
/// A fixed window loses against any host whose gaps between batches are a
/// little longer than the window: every gap then costs a sleep and a wake-up
/// (an IPI, expensive in a VM), which lengthens the host's next gap too.
/// SPDK's initiator writing 4 KiB at QD 32 leaves 80–130 µs between
/// batches; with a 100 µs window the target slept 2,600 times a second and
/// ran at half the speed of busy polling.
///
/// So the window learns from the sleeps that should not have happened: when
/// work wakes the loop less than `max` after the last work, the window grows
/// to twice that gap (the next such gap is spun through). `DECAY_AFTER`
/// sleeps in a row that each last longer than `max` halve it again, down to
/// `base`. An idle target therefore spins `base` after each stray event (a
/// keep-alive), and a host whose gaps exceed `max` is served from sleep,
/// which at that rate costs little.
#[derive(Clone, Debug)]
struct IdleWindow {
    base: Duration,
    /// The longest the window can grow to.
    max: Duration,
    /// How long to keep polling after the last work.
    cur: Duration,
    long_sleeps: u32,
}

impl IdleWindow {
    /// `base`: the window of an idle target; `max`: the longest gap worth spinning through.
    fn new(base: Duration, max: Duration) -> IdleWindow {
        let max = max.max(base);
        IdleWindow {
            base,
            max,
            cur: base,
            long_sleeps: 0,
        }
    }

    /// The loop slept and work woke it `gap` after the previous work.
    fn woke_after(&mut self, gap: Duration) {
        if gap < self.max {
            self.cur = (gap * 2).clamp(self.base, self.max);
            self.long_sleeps = 0;
        } else {
            self.long_sleeps += 1;
            if self.long_sleeps >= DECAY_AFTER {
                self.long_sleeps = 0;
                self.cur = (self.cur / 2).max(self.base);
            }
        }
    }
}

#[cfg(test)]
mod sim;

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    const MS: Duration = Duration::from_millis(1);
    const IDLE: Duration = Duration::from_micros(100);

    fn sched(mode: PollMode, fair_share: usize) -> (Scheduler, Instant) {
        let t0 = Instant::now();
        (Scheduler::new(mode, IDLE, fair_share, t0), t0)
    }

    /// Takes a round (connections and whether it is contended) and gives
    /// it back at `now`.
    fn round(s: &mut Scheduler, held: impl Fn(usize) -> usize, now: Instant) -> (Vec<usize>, bool) {
        let r = s.next_round(held);
        let out = (r.conns.clone(), r.contended);
        s.finish_round(r, now);
        out
    }

    fn worked() -> Pass {
        Pass {
            worked: true,
            ..Pass::default()
        }
    }

    #[test]
    fn ticks_fire_at_their_deadlines_and_not_before() {
        let (mut s, t0) = sched(PollMode::Never, 0);
        // Accepted together: one grid point, one wake-up (2 may be an RDMA
        // queue pair: the scheduler does not tell transports apart).
        s.add(0, t0 + 3 * MS);
        s.add(2, t0 + 7 * MS);
        s.add(1, t0 + 65 * MS);
        assert_eq!(s.poll_timeout(t0 + 3 * MS), Some(t0 + 100 * MS));
        assert_eq!(s.poll_due(t0 + 100 * MS - US), None);
        assert_eq!(s.poll_due(t0 + 100 * MS), Some(Due::Scan));
        assert_eq!(s.poll_due(t0 + 100 * MS), Some(Due::Tick(0)));
        assert_eq!(s.poll_due(t0 + 100 * MS), Some(Due::Tick(2)));
        assert_eq!(s.poll_due(t0 + 100 * MS), None, "the next is not due");
        assert_eq!(s.poll_timeout(t0 + 100 * MS), Some(t0 + 150 * MS));
        assert_eq!(s.poll_due(t0 + 152 * MS), Some(Due::Tick(1)));
        // Connections that work: the next ticks follow a TICK after those,
        // on the grid, and a loop that wakes a little late keeps its phase:
        // never more than TICK apart.
        assert_eq!(s.poll_timeout(t0 + 152 * MS), Some(t0 + 200 * MS));
        let mut last = [t0 + 100 * MS, t0 + 100 * MS, t0 + 152 * MS, t0 + 100 * MS];
        let mut now = t0 + 152 * MS;
        for _ in 0..50 {
            now = s.poll_timeout(now).unwrap() + 700 * US;
            s.on_driven(0, worked(), now);
            s.on_driven(1, worked(), now);
            s.on_driven(2, worked(), now);
            while let Some(due) = s.poll_due(now) {
                let k = match due {
                    Due::Tick(0) => 0,
                    Due::Tick(2) => 1,
                    Due::Scan => 3,
                    _ => 2,
                };
                let id = due;
                assert!(
                    now - last[k] <= TICK + 700 * US,
                    "{id:?} waited {:?}",
                    now - last[k]
                );
                assert!(now - last[k] > TICK - TICK_GRAIN, "{id:?} early");
                last[k] = now;
            }
        }
        assert!(now > t0 + 5 * TICK);
    }

    #[test]
    fn idle_connections_tick_rarely_and_the_scan_goes_on() {
        let (mut s, t0) = sched(PollMode::Never, 0);
        s.add(0, t0);
        s.add(1, t0);
        round(&mut s, |_| 0, t0);
        let (mut ticks, mut scans) = ([Vec::new(), Vec::new()], Vec::new());
        let mut now = t0;
        while now < t0 + 5 * IDLE_TICK {
            now = s.poll_timeout(now).unwrap();
            // Connection 0 works all along; 1 only once, at 2.5 s.
            s.on_driven(0, worked(), now);
            if now >= t0 + 2500 * MS && ticks[1].last().is_some_and(|&t| t < t0 + 2500 * MS) {
                s.on_driven(1, worked(), now);
            }
            while let Some(due) = s.poll_due(now) {
                match due {
                    Due::Tick(i) => ticks[i].push(now),
                    Due::Scan => scans.push(now),
                    d => panic!("{d:?}"),
                }
            }
        }
        let gaps = |v: &[Instant]| v.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>();
        assert!(
            gaps(&ticks[0]).iter().all(|&g| g <= TICK),
            "a working connection: every TICK"
        );
        assert!(
            gaps(&scans).iter().all(|&g| g <= TICK),
            "the scan: every TICK"
        );
        // The idle one: a TICK after its first tick (which came a TICK
        // after it was added), then IDLE_TICK apart, but a TICK after it worked.
        let g1 = gaps(&ticks[1]);
        assert_eq!(g1[..2], [TICK, IDLE_TICK], "{g1:?}");
        assert!(g1.iter().all(|&g| g == TICK || g == IDLE_TICK), "{g1:?}");
        assert_eq!(g1.iter().filter(|&&g| g == TICK).count(), 2, "{g1:?}");
        assert!(
            ticks[1].len() <= 7 && ticks[0].len() >= 45,
            "{} {}",
            ticks[1].len(),
            ticks[0].len()
        );
        // Closing the last connection stops the scan after its next run.
        s.close(0, false);
        s.close(1, false);
        let at = s.poll_timeout(now).unwrap();
        assert_eq!(s.poll_due(at), Some(Due::Scan));
        assert_eq!(s.poll_timeout(at), None);
    }

    #[test]
    fn the_scan_is_armed_again_by_a_connection_after_none() {
        let (mut s, t0) = sched(PollMode::Never, 0);
        s.add(0, t0);
        s.close(0, false);
        // The scan fires once more and stops: nothing left to scan.
        assert_eq!(s.poll_due(t0 + 100 * MS), Some(Due::Scan));
        assert_eq!(s.poll_timeout(t0 + 100 * MS), None);
        // Housekeeping pending when the next connection comes: the scan
        // is armed all the same, once.
        s.schedule_housekeeping(t0 + 150 * MS);
        s.add(0, t0 + 160 * MS);
        s.add(1, t0 + 160 * MS);
        let due: Vec<Due> = std::iter::from_fn(|| s.poll_due(t0 + 260 * MS)).collect();
        assert_eq!(
            due.iter().filter(|&&d| d == Due::Scan).count(),
            1,
            "{due:?}"
        );
        assert!(due.contains(&Due::Housekeeping));
    }

    #[test]
    fn housekeeping_is_one_shot_and_armed_once() {
        let (mut s, t0) = sched(PollMode::Never, 0);
        assert_eq!(s.poll_timeout(t0), None, "nothing to wake for");
        s.schedule_housekeeping(t0);
        s.schedule_housekeeping(t0 + 50 * MS);
        assert_eq!(s.poll_due(t0 + 100 * MS), Some(Due::Housekeeping));
        assert_eq!(s.poll_due(t0 + 300 * MS), None, "once");
        assert_eq!(s.poll_timeout(t0), None);
    }

    #[test]
    fn poll_timeout_is_the_earliest_of_tick_throttle_and_spin_window() {
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.add(0, t0);
        // The spin window after the last work comes first...
        assert_eq!(s.poll_timeout(t0), Some(t0 + IDLE));
        // ...then the tick...
        assert_eq!(s.poll_timeout(t0 + 1 * MS), Some(t0 + 100 * MS));
        // ...unless a throttled command may run before it.
        s.set_throttle(0, Some(t0 + 30 * MS));
        assert_eq!(s.poll_timeout(t0 + 1 * MS), Some(t0 + 30 * MS));
        s.set_throttle(0, Some(t0 + 40 * MS));
        assert_eq!(
            s.poll_timeout(t0 + 1 * MS),
            Some(t0 + 40 * MS),
            "updated, not added"
        );
        // Work opens a new spin window.
        round(&mut s, |_| 0, t0 + 2 * MS);
        s.on_driven(0, worked(), t0 + 2 * MS);
        assert_eq!(s.poll_timeout(t0 + 2 * MS), Some(t0 + 2 * MS + IDLE));
        // The loop sleeps until then, the throttled wake-up being the earliest.
        s.hot.clear();
        assert_eq!(s.wait(t0 + 3 * MS), Wait::Poll(Some(37 * MS)));
        assert!(!s.has_ready());
        assert_eq!(
            s.wait(t0 + 40 * MS),
            Wait::Poll(Some(Duration::ZERO)),
            "released"
        );
        assert_eq!(round(&mut s, |_| 0, t0 + 40 * MS).0, [0]);
        assert_eq!(s.poll_timeout(t0 + 40 * MS), Some(t0 + 100 * MS));
    }

    #[test]
    fn idle_window_learns_from_sleeps() {
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.on_worked(0, t0);
        assert_eq!(
            s.wait(t0 + 50 * US),
            Wait::Poll(Some(Duration::ZERO)),
            "spinning"
        );
        // Past the window the loop sleeps; work 130 µs after the last
        // doubles the window to cover such a gap.
        assert!(matches!(s.wait(t0 + 120 * US), Wait::Poll(None)));
        s.on_worked(0, t0 + 130 * US);
        assert_eq!(s.idle.cur, 260 * US);
        assert_eq!(s.poll_timeout(t0 + 130 * US), Some(t0 + 390 * US));
        // Work while spinning teaches nothing.
        assert_eq!(s.wait(t0 + 300 * US), Wait::Poll(Some(Duration::ZERO)));
        s.on_worked(0, t0 + 300 * US);
        assert_eq!(s.idle.cur, 260 * US);
        // Long sleeps in a row shrink it back.
        let mut now = t0 + 300 * US;
        for _ in 0..DECAY_AFTER {
            assert!(matches!(s.wait(now + 1 * MS), Wait::Poll(None)));
            now += 5 * MS;
            s.on_worked(0, now);
        }
        assert_eq!(s.idle.cur, 130 * US);
        // Never and Always do not learn.
        for mode in [PollMode::Never, PollMode::Always] {
            let (mut s, t0) = sched(mode, 0);
            s.wait(t0 + 1 * MS);
            s.on_worked(0, t0 + 1 * MS + 10 * US);
            assert_eq!(s.idle.cur, IDLE);
        }
    }

    #[test]
    fn poll_modes() {
        let (mut s, t0) = sched(PollMode::Always, 0);
        assert_eq!(
            s.wait(t0 + 10 * MS),
            Wait::Poll(Some(Duration::ZERO)),
            "never sleeps"
        );
        assert_eq!(s.poll_timeout(t0 + 10 * MS), None, "no spin deadline");
        let (mut s, t0) = sched(PollMode::Never, 0);
        s.add(0, t0);
        round(&mut s, |_| 0, t0);
        s.on_driven(0, worked(), t0);
        assert!(s.hot.is_empty(), "nothing spun on");
        assert_eq!(s.wait(t0), Wait::Poll(Some(100 * MS)), "sleeps at once");
        // Blocked output keeps adaptive polling going up to the longest window.
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.add(0, t0);
        round(&mut s, |_| 0, t0);
        s.set_blocked(0, true);
        s.on_driven(0, worked(), t0);
        let max = IDLE * IDLE_MAX_FACTOR;
        assert_eq!(s.poll_timeout(t0), Some(t0 + max));
        assert_ne!(s.wait(t0 + max - US), Wait::Poll(None));
        s.set_blocked(0, false);
        assert_eq!(s.poll_timeout(t0), Some(t0 + IDLE));
    }

    /// A host whose commands come `gap` apart: each is read at `now` and
    /// worked on (the loop had spun or slept through the gap before).
    fn steady(s: &mut Scheduler, mut now: Instant, gap: Duration, n: usize) -> Instant {
        for _ in 0..n {
            now += gap;
            s.on_event(0, true);
            round(s, |_| 0, now);
            s.on_driven(0, worked(), now);
        }
        now
    }

    #[test]
    fn hybrid_bets_once_the_gaps_are_known_and_backs_off_after_a_lost_bet() {
        use farflash_nap::GAPS;
        let (mut s, t0) = sched(PollMode::Hybrid, 0);
        s.add(0, t0);
        round(&mut s, |_| 0, t0);
        // A paced host, a command every 60 µs (inside the idle window):
        // until GAPS gaps are known it polls ...
        let now = steady(&mut s, t0, 60 * US, GAPS - 1);
        assert!(!matches!(s.wait(now + US), Wait::Sleep(_)));
        let now = steady(&mut s, now, 60 * US, 1);
        // ... then it sleeps to 60 µs less the wake-up cost and a guard.
        let Wait::Sleep(at) = s.wait(now + US) else {
            panic!("no bet on steady gaps")
        };
        assert!(at > now + 40 * US && at < now + 60 * US, "{:?}", at - now);
        // Its timer wakes it: it polls for the arrival; no miss.
        assert!(!s.on_woken(at + 5 * US, Woke::Timer));
        assert!(!matches!(
            s.wait(at + 5 * US),
            Wait::Sleep(_) | Wait::Poll(None)
        ));
        let now = steady(&mut s, now, 60 * US, 1);
        // A command that ends the next sleep early: a miss ...
        assert!(matches!(s.wait(now + US), Wait::Sleep(_)));
        assert!(s.on_woken(now + 10 * US, Woke::Arrival));
        // ... after which the loop polls for a while (`farflash-nap`'s
        // hold-off: 100 wake-up costs after a first miss) ...
        let mut now = now;
        for _ in 0..8 {
            now = steady(&mut s, now, 60 * US, 1);
            assert!(!matches!(s.wait(now + US), Wait::Sleep(_)));
        }
        // ... then bets again.
        let now = steady(&mut s, now, 60 * US, 8);
        assert!(matches!(s.wait(now + US), Wait::Sleep(_)));
        // A sleep the worker could not take is forgotten.
        assert!(!s.on_woken(now + US, Woke::Aborted));
    }

    #[test]
    fn hybrid_does_not_sleep_at_full_load_nor_past_a_timer() {
        use farflash_nap::GAPS;
        let (mut s, t0) = sched(PollMode::Hybrid, 0);
        s.add(0, t0);
        round(&mut s, |_| 0, t0);
        // Full load: commands 3 µs apart; a sleep would cost more than it saves.
        let now = steady(&mut s, t0, 3 * US, 2 * GAPS);
        for idle in [0, 1, 2, 5, 20] {
            assert!(!matches!(s.wait(now + idle * US), Wait::Sleep(_)));
        }
        // Steady 60 µs, but a tick due sooner: the sleep ends at the tick.
        let (mut s, t0) = sched(PollMode::Hybrid, 0);
        s.add(0, t0);
        round(&mut s, |_| 0, t0);
        let start = t0 + TICK - 60 * US * GAPS as u32 - 30 * US;
        let now = steady(&mut s, start, 60 * US, GAPS);
        let tick = s.timer_deadline().unwrap();
        assert!(tick < now + 50 * US, "set up: a tick within the gap");
        assert_eq!(s.wait(now + US), Wait::Sleep(tick));
        // Adaptive never sleeps this way.
        let (mut a, t0) = sched(PollMode::Adaptive, 0);
        a.add(0, t0);
        round(&mut a, |_| 0, t0);
        let now = steady(&mut a, t0, 60 * US, 2 * GAPS);
        assert!(!matches!(a.wait(now + US), Wait::Sleep(_)));
    }

    #[test]
    fn admin_queue_work_neither_spins_nor_teaches_the_window() {
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.add(0, t0);
        round(&mut s, |_| 0, t0);
        // An idle loop: past its window, it sleeps until the next tick.
        let mut now = t0 + 10 * MS;
        assert!(matches!(s.wait(now), Wait::Poll(Some(d)) if d > Duration::ZERO));
        // Keep-alives from many hosts, 1 ms apart (shorter than the
        // longest window): each is served, none starts a spin...
        for _ in 0..50 {
            now += MS;
            s.on_event(0, true);
            round(&mut s, |_| 0, now);
            let control = Pass {
                control: true,
                ..worked()
            };
            s.on_driven(0, control, now);
            assert!(s.hot.is_empty(), "an admin queue joins no hot set");
            match s.wait(now) {
                Wait::Poll(Some(d)) => assert!(d > IDLE * IDLE_MAX_FACTOR, "slept {d:?}"),
                w => panic!("spun after a keep-alive: {w:?}"),
            }
        }
        // ...and the window an I/O queue then finds is still the base one.
        s.on_driven(0, worked(), now);
        assert_eq!(s.poll_timeout(now), Some(now + IDLE));
    }

    /// An RDMA queue pair is scheduled as a socket is (`rdma.rs`
    /// `Link::drive` is its pass): its completion channel's event queues it,
    /// a pass that polled its CQ empty and re-armed it leaves it drained,
    /// work makes it hot (the loop then polls its CQ directly, without
    /// epoll), it is quiet beside a backlogged socket (its data moves by
    /// RDMA READ and WRITE: it holds no socket bytes), and once idle it
    /// ticks `IDLE_TICK` apart.
    #[test]
    fn an_rdma_queue_is_scheduled_as_a_socket_is() {
        let (mut s, t0) = sched(PollMode::Adaptive, 256 * 1024);
        let (tcp, rdma) = (0, 1);
        s.add(tcp, t0);
        s.add(rdma, t0);
        assert_eq!(round(&mut s, |_| 0, t0).0, [tcp, rdma], "a first pass each");
        s.on_driven(tcp, Pass::default(), t0);
        s.on_driven(rdma, Pass::default(), t0);
        assert!(!s.has_ready());
        // A completion-channel event: queued; its CQ may hold completions.
        s.on_event(rdma, true);
        assert_eq!(s.state(rdma), Some(State::Open(Rx::Unread)));
        assert_eq!(round(&mut s, |_| 0, t0 + US).0, [rdma]);
        s.on_driven(rdma, worked(), t0 + US);
        assert_eq!(s.state(rdma), Some(State::Open(Rx::Drained)));
        assert_eq!(s.hot, [rdma], "it worked: hot");
        // Spinning: its CQ is polled directly.
        assert_eq!(s.wait(t0 + 2 * US), Wait::Direct);
        assert_eq!(round(&mut s, |_| 0, t0 + 2 * US).0, [rdma]);
        s.on_driven(rdma, Pass::default(), t0 + 2 * US);
        // Beside a socket with a backlog, the queue goes first and the
        // socket reads short slices.
        s.on_event(tcp, true);
        round(&mut s, |_| 0, t0 + 3 * US);
        let backlog = Pass {
            worked: true,
            unread: true,
            yielded: true,
            ..Pass::default()
        };
        s.on_driven(tcp, backlog, t0 + 3 * US);
        s.on_event(rdma, true);
        let held = |i: usize| if i == tcp { 1 << 20 } else { 0 };
        assert_eq!(round(&mut s, held, t0 + 4 * US), (vec![rdma, tcp], true));
        assert!(s.budget(tcp, true, 1) < s.budget(rdma, true, 1));
        // Idle from now on: after a tick that found it idle, ticks come
        // IDLE_TICK apart, as for an idle socket.
        s.on_driven(rdma, Pass::default(), t0 + 4 * US);
        let mut ticks = Vec::new();
        let mut now = t0 + 4 * US;
        while now < t0 + 4 * IDLE_TICK {
            now = s.poll_timeout(now).unwrap();
            s.on_driven(tcp, worked(), now);
            while let Some(due) = s.poll_due(now) {
                if due == Due::Tick(rdma) {
                    ticks.push(now);
                }
            }
        }
        let gaps: Vec<Duration> = ticks.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() >= 2, "{gaps:?}");
        assert!(gaps[1..].iter().all(|&g| g == IDLE_TICK), "{gaps:?}");
        // Closed once nothing of it is out: its timers go with it.
        s.close(rdma, false);
        assert_eq!(s.state(rdma), None);
        assert!(!s.hot.contains(&rdma));
    }

    #[test]
    fn a_hot_connection_is_spun_on_until_its_quiet_period_ends() {
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.add(0, t0);
        s.add(1, t0);
        assert_eq!(round(&mut s, |_| 0, t0).0, [0, 1]);
        s.on_driven(0, worked(), t0);
        s.on_driven(1, Pass::default(), t0);
        assert_eq!(s.hot, [0], "only what worked");
        assert_eq!(s.state(0), Some(State::Open(Rx::Drained)));
        // Spinning: the hot socket is read without asking epoll...
        assert_eq!(s.wait(t0 + 10 * US), Wait::Direct);
        assert_eq!(s.state(0), Some(State::Open(Rx::Unread)));
        assert_eq!(round(&mut s, |_| 0, t0 + 10 * US).0, [0]);
        // ...with an epoll look every DIRECT_SPINS spins.
        for _ in 1..DIRECT_SPINS {
            assert_eq!(s.wait(t0 + 20 * US), Wait::Direct);
        }
        assert_eq!(s.wait(t0 + 20 * US), Wait::Poll(Some(Duration::ZERO)));
        assert_eq!(s.wait(t0 + 20 * US), Wait::Direct);
        s.on_driven(0, Pass::default(), t0 + 20 * US);
        round(&mut s, |_| 0, t0 + 99 * US);
        assert_eq!(s.hot, [0], "still within the window");
        round(&mut s, |_| 0, t0 + IDLE);
        assert!(s.hot.is_empty(), "quiet for the window");
        assert!(matches!(s.wait(t0 + IDLE), Wait::Poll(_)));
        // At most HOT_MAX are hot.
        for i in 0..HOT_MAX + 2 {
            s.add(10 + i, t0 + MS);
            s.on_driven(10 + i, worked(), t0 + MS);
        }
        assert_eq!(s.hot.len(), HOT_MAX);
    }

    #[test]
    fn a_quiet_connections_command_goes_before_a_deep_queues_next_slice() {
        let share = 256 * 1024;
        let (mut s, t0) = sched(PollMode::Adaptive, share);
        s.add(0, t0);
        s.add(1, t0);
        let held = |i: usize| if i == 0 { 8 << 20 } else { 4096 };
        assert_eq!(round(&mut s, held, t0), (vec![0, 1], false));
        assert_eq!(s.budget(0, false, 1), share);
        // 0 used its share with data left; 1 drained its socket.
        s.on_driven(
            0,
            Pass {
                worked: true,
                unread: true,
                yielded: true,
                ..Pass::default()
            },
            t0,
        );
        s.on_driven(1, worked(), t0);
        assert_eq!(s.state(0), Some(State::Open(Rx::Backlog)));
        // 1's next command arrives: it goes first, and 0 reads a short slice.
        s.on_event(1, true);
        let r = s.next_round(held);
        assert_eq!((&r.conns[..], r.contended), (&[1, 0][..], true));
        assert_eq!(s.budget(0, r.contended, 1), share / CONTENDED_DIVISOR);
        assert_eq!(s.budget(1, r.contended, 1), share);
        assert_eq!(s.budget(0, r.contended, 3), 3 * share / CONTENDED_DIVISOR);
        s.finish_round(r, t0);
        // Bulk queues among themselves keep their full shares.
        s.on_driven(
            1,
            Pass {
                yielded: true,
                unread: true,
                ..worked()
            },
            t0,
        );
        s.on_driven(
            0,
            Pass {
                yielded: true,
                unread: true,
                ..worked()
            },
            t0,
        );
        assert_eq!(round(&mut s, |_| 8 << 20, t0), (vec![0, 1], false));
        // No fair sharing: no limit.
        let (s, _) = sched(PollMode::Adaptive, 0);
        assert_eq!(s.budget(0, true, 4), usize::MAX);
    }

    #[test]
    fn order_round_puts_quiet_first_and_contention_needs_one() {
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

    #[test]
    fn a_zombie_is_not_read_but_gets_its_completions() {
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.add(0, t0);
        round(&mut s, |_| 0, t0);
        s.set_blocked(0, true);
        s.set_throttle(0, Some(t0 + 5 * MS));
        s.on_driven(
            0,
            Pass {
                failed: true,
                ..worked()
            },
            t0,
        );
        assert_eq!(s.state(0), Some(State::Failed));
        s.close(0, true);
        assert_eq!(s.state(0), Some(State::Zombie));
        assert!(s.hot.is_empty() && s.blocked == 0 && s.throttled.is_empty());
        // epoll or a spin cannot make it readable...
        s.on_event(0, true);
        assert_eq!(s.state(0), Some(State::Zombie));
        assert_eq!(round(&mut s, |_| 0, t0).0, [0]);
        s.on_worked(0, t0);
        assert!(s.hot.is_empty(), "never spun on");
        // ...but a completion queues it, and its ticks go on.
        s.wake(0);
        assert_eq!(round(&mut s, |_| 0, t0).0, [0]);
        assert_eq!(s.poll_due(t0 + TICK), Some(Due::Scan));
        assert_eq!(s.poll_due(t0 + TICK), Some(Due::Tick(0)));
        // Its last request done, it goes.
        s.close(0, false);
        assert_eq!(s.state(0), None);
    }

    #[test]
    fn states_only_go_forward() {
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.add(0, t0);
        assert_eq!(s.state(0), Some(State::Open(Rx::Unread)));
        s.on_driven(
            0,
            Pass {
                eof: true,
                ..worked()
            },
            t0,
        );
        assert_eq!(s.state(0), Some(State::ReadClosed));
        // A pass of a read-closed connection starts read-closed.
        let p = Pass::starting(State::ReadClosed);
        assert!(p.eof && !p.unread);
        s.on_driven(0, p, t0);
        assert_eq!(s.state(0), Some(State::ReadClosed));
        assert!(!State::ReadClosed.may_become(State::Open(Rx::Unread)));
        assert!(!State::Failed.may_become(State::ReadClosed));
        assert!(!State::Zombie.may_become(State::Failed));
        assert!(State::Open(Rx::Backlog).may_become(State::Zombie));
        // A report for a connection that is gone changes nothing.
        s.close(0, false);
        s.on_driven(0, worked(), t0);
        assert_eq!(s.state(0), None);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "ReadClosed -> Open")]
    fn a_step_back_is_a_bug() {
        let (mut s, t0) = sched(PollMode::Adaptive, 0);
        s.add(0, t0);
        s.on_driven(
            0,
            Pass {
                eof: true,
                ..Pass::default()
            },
            t0,
        );
        s.on_driven(0, Pass::default(), t0);
    }

    #[test]
    fn removing_a_connection_cancels_its_timers() {
        let (mut s, t0) = sched(PollMode::Never, 0);
        s.add(0, t0);
        s.add(1, t0 + 50 * MS);
        s.set_throttle(0, Some(t0 + 20 * MS));
        s.close(0, false);
        assert_eq!(round(&mut s, |_| 0, t0).0, [1], "no round for it");
        // Left: the scan (connections remain) and the other's tick.
        assert_eq!(s.poll_timeout(t0), Some(t0 + 100 * MS));
        assert_eq!(
            s.wait(t0 + 20 * MS),
            Wait::Poll(Some(80 * MS)),
            "its throttle is gone"
        );
        assert!(!s.has_ready());
        assert_eq!(
            s.poll_due(t0 + 100 * MS),
            Some(Due::Scan),
            "connections remain"
        );
        assert_eq!(s.poll_due(t0 + 100 * MS), None, "its tick is gone");
        assert_eq!(s.poll_timeout(t0), Some(t0 + 150 * MS));
        s.close(1, false);
        assert_eq!(
            s.poll_timeout(t0),
            Some(t0 + 200 * MS),
            "the scan, once more"
        );
        assert_eq!(s.poll_due(t0 + 200 * MS), Some(Due::Scan));
        assert_eq!(s.poll_timeout(t0), None);
        assert_eq!(s.poll_due(t0 + 10 * TICK), None);
        // Its index is taken again afresh.
        s.add(0, t0 + 200 * MS);
        assert_eq!(s.state(0), Some(State::Open(Rx::Unread)));
        assert_eq!(s.poll_timeout(t0 + 200 * MS), Some(t0 + 300 * MS));
    }

    #[test]
    fn idle_window_grows_to_cover_short_gaps_and_is_capped() {
        let mut w = IdleWindow::new(100 * US, 2000 * US);
        assert_eq!(w.cur, 100 * US);
        // A sleep happens only once the window has expired, so the gap that
        // ends it is at least the window: the window at least doubles.
        w.woke_after(130 * US);
        assert_eq!(w.cur, 260 * US);
        w.woke_after(300 * US);
        assert_eq!(w.cur, 600 * US);
        w.woke_after(1500 * US);
        assert_eq!(w.cur, 2000 * US, "capped at max");
    }

    #[test]
    fn idle_window_long_sleeps_shrink_it_back_to_base() {
        let mut w = IdleWindow::new(100 * US, 2000 * US);
        w.woke_after(1500 * US);
        assert_eq!(w.cur, 2000 * US);
        for _ in 0..DECAY_AFTER - 1 {
            w.woke_after(Duration::from_secs(2));
        }
        assert_eq!(w.cur, 2000 * US, "one stray long sleep changes nothing");
        w.woke_after(Duration::from_secs(2));
        assert_eq!(w.cur, 1000 * US);
        for _ in 0..DECAY_AFTER * 8 {
            w.woke_after(Duration::from_secs(2));
        }
        assert_eq!(w.cur, 100 * US);
    }

    #[test]
    fn idle_window_max_below_base_is_base() {
        let mut w = IdleWindow::new(500 * US, 100 * US);
        w.woke_after(50 * US);
        assert_eq!(w.cur, 500 * US);
    }
}
