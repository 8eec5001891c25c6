//! The scheduler inside a simulated worker loop, over many rounds on a
//! simulated clock: connections hold bytes to read, a round reads what
//! each budget allows, reading costs time. What the unit tests in
//! `sched.rs` check one call at a time is checked here as it adds up:
//! weighted sharing between deep queues, a QD 1 neighbour's wait beside a
//! deep writer and the idle window handing the full share back, fairness
//! between equal connections, an RDMA queue's completion-queue events
//! waking the loop as a socket's readiness does, and ticks of many
//! connections gathered on the grid.

use super::*;

const IDLE: Duration = Duration::from_micros(100);
const SHARE: usize = 256 * 1024;
/// Reading costs 1 ns a byte (a 256 KiB share takes 262 µs).
const NS_PER_BYTE: u64 = 1;

/// A worker loop in miniature: the scheduler and, per connection, the
/// bytes its socket holds, its host's weight, what it holds of data
/// buffers, and what it read so far.
struct Sim {
    s: Scheduler,
    now: Instant,
    unread: Vec<usize>,
    weight: Vec<u32>,
    held: Vec<usize>,
    read: Vec<usize>,
    /// The connection's "socket" is a completion queue (an RDMA queue):
    /// a pass polls it empty and re-arms it, whatever the budget.
    cq: Vec<bool>,
}

/// One connection's turn of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Turn {
    conn: usize,
    bytes: usize,
    contended: bool,
}

impl Sim {
    fn new(mode: PollMode, conns: usize) -> Sim {
        let now = Instant::now();
        let mut s = Scheduler::new(mode, IDLE, SHARE, now);
        for i in 0..conns {
            s.add(i, now);
        }
        Sim {
            s,
            now,
            unread: vec![0; conns],
            weight: vec![1; conns],
            held: vec![0; conns],
            read: vec![0; conns],
            cq: vec![false; conns],
        }
    }

    /// `n` bytes arrive on connection `i` (epoll reports it).
    fn arrive(&mut self, i: usize, n: usize) {
        self.unread[i] += n;
        self.s.on_event(i, true);
    }

    /// One round: each queued connection reads what its budget allows.
    fn round(&mut self) -> Vec<Turn> {
        let held = self.held.clone();
        let r = self.s.next_round(|i| held[i]);
        let mut turns = Vec::new();
        for &i in &r.conns {
            let budget = match self.cq[i] {
                true => usize::MAX,
                false => self.s.budget(i, r.contended, self.weight[i]),
            };
            let n = budget.min(self.unread[i]);
            self.unread[i] -= n;
            self.read[i] += n;
            self.now += Duration::from_nanos(n as u64 * NS_PER_BYTE);
            let left = self.unread[i] > 0;
            let pass = Pass {
                worked: n > 0,
                unread: left,
                yielded: left && n == budget,
                ..Pass::default()
            };
            self.s.on_driven(i, pass, self.now);
            turns.push(Turn {
                conn: i,
                bytes: n,
                contended: r.contended,
            });
        }
        self.s.finish_round(r, self.now);
        turns
    }
}

/// What the loop does with nothing queued: how it waits.
fn idle_wait(sim: &mut Sim) -> Wait {
    sim.s.wait(sim.now)
}

#[test]
fn equal_connections_share_the_loop_equally_and_none_waits_beyond_its_round() {
    let n = 6;
    let mut sim = Sim::new(PollMode::Adaptive, n);
    // Deep writers with backlogs of different sizes.
    for i in 0..n {
        sim.held[i] = 8 << 20;
        sim.arrive(i, (i + 2) * 8 * SHARE);
    }
    // An event storm on one of them earns it no extra turn.
    for _ in 0..50 {
        sim.s.on_event(3, true);
    }
    for round in 0..16 {
        let turns = sim.round();
        let mut conns: Vec<usize> = turns.iter().map(|t| t.conn).collect();
        conns.sort_unstable();
        conns.dedup();
        assert_eq!(conns.len(), turns.len(), "round {round}: one turn each");
        // Every connection with bytes left is in every round.
        let left: Vec<usize> = (0..n)
            .filter(|&i| sim.unread[i] > 0 || conns.contains(&i))
            .collect();
        assert_eq!(conns, left, "round {round}");
        // While all are backlogged they read the same.
        assert!(
            turns.iter().all(|t| t.bytes == SHARE),
            "round {round}: {turns:?}"
        );
    }
    assert!(sim.read.iter().all(|&r| r == 16 * SHARE), "{:?}", sim.read);
    // A newcomer's command goes in the first round after its event, ahead
    // of every backlogged connection, and they lose their turn to nobody.
    let mut sim2 = Sim::new(PollMode::Adaptive, n + 1);
    for i in 0..n {
        sim2.held[i] = 8 << 20;
        sim2.arrive(i, 64 * SHARE);
    }
    sim2.round();
    sim2.held[n] = 0;
    sim2.arrive(n, 72);
    let turns = sim2.round();
    assert_eq!(turns[0].conn, n, "the quiet newcomer goes first: {turns:?}");
    assert_eq!(turns[0].bytes, 72);
    assert_eq!(turns.len(), n + 1, "no backlogged connection skipped");
}

#[test]
fn a_completion_queue_event_wakes_the_sleeping_loop_as_a_socket_event_does() {
    for mode in [PollMode::Never, PollMode::Adaptive] {
        // Two identical loops: connection 1 is a socket in one, an RDMA
        // queue (its completion channel's event) in the other.
        let mut trace = Vec::new();
        for cq in [false, true] {
            let mut sim = Sim::new(mode, 2);
            sim.cq[1] = cq;
            // The first passes, then nothing to do: the loop sleeps (until
            // a timer, never spinning on an empty CQ).
            sim.round();
            sim.now += 10 * IDLE;
            let asleep = idle_wait(&mut sim);
            let Wait::Poll(Some(t)) = asleep else {
                panic!("{mode:?} cq={cq}: an idle loop sleeps, got {asleep:?}");
            };
            assert!(t > IDLE, "{mode:?} cq={cq}: asleep for {t:?}");
            // A completion (a capsule) arrives: its event wakes the loop,
            // which looks at once and drives it in the next round.
            sim.arrive(1, 64);
            let woken = idle_wait(&mut sim);
            assert_eq!(woken, Wait::Poll(Some(Duration::ZERO)), "{mode:?} cq={cq}");
            let turns = sim.round();
            assert_eq!(
                turns.iter().map(|t| (t.conn, t.bytes)).collect::<Vec<_>>(),
                [(1, 64)]
            );
            // Polled empty (and re-armed): no further round without a
            // new event, in either.
            let next = idle_wait(&mut sim);
            trace.push((asleep, woken, next, sim.s.state(1), sim.s.hot.clone()));
        }
        assert_eq!(
            trace[0], trace[1],
            "{mode:?}: a CQ is scheduled as a socket is"
        );
    }
    // Beside a socket with a backlog, the RDMA queue's completions go
    // first and all at once (it reads no socket), and the socket reads
    // short slices while the queue is busy.
    let mut sim = Sim::new(PollMode::Adaptive, 2);
    sim.cq[1] = true;
    sim.held = vec![8 << 20, 0];
    sim.arrive(0, 1 << 30);
    sim.round();
    for _ in 0..100 {
        sim.arrive(1, 3 * SHARE);
        let turns = sim.round();
        assert_eq!(turns[0].conn, 1);
        assert_eq!(turns[0].bytes, 3 * SHARE, "a CQ pass polls it empty");
        assert!(turns[1].contended);
        assert_eq!(
            turns[1].bytes,
            (SHARE / CONTENDED_DIVISOR).max(CONTENDED_MIN)
        );
    }
}

#[test]
fn deep_queues_share_the_loop_by_weight_round_after_round_without_events() {
    let mut sim = Sim::new(PollMode::Adaptive, 3);
    sim.weight = vec![1, 3, 2];
    for i in 0..3 {
        sim.held[i] = 8 << 20;
        sim.arrive(i, 64 << 20);
    }
    // One event each, then every round re-queues them itself (their
    // sockets are edge-triggered: no event reports what is left).
    for _ in 0..20 {
        let turns = sim.round();
        assert_eq!(turns.iter().map(|t| t.conn).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(
            turns.iter().all(|t| !t.contended),
            "bulk queues keep full shares"
        );
    }
    assert_eq!(sim.read, [20 * SHARE, 60 * SHARE, 40 * SHARE]);
    // The one that drains leaves the round; the others go on.
    sim.unread[2] = 1000;
    let turns = sim.round();
    assert_eq!(turns[2].bytes, 1000);
    let turns = sim.round();
    assert_eq!(turns.iter().map(|t| t.conn).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn a_qd1_neighbour_waits_for_one_short_slice_and_the_deep_writer_gets_its_share_back_after_the_idle_window(
) {
    let mut sim = Sim::new(PollMode::Adaptive, 2);
    // 0: a deep writer (QD 64 × 128 KiB); 1: QD 1 reads (a 72-byte capsule).
    sim.held = vec![8 << 20, 4096];
    sim.arrive(0, 1 << 30);
    sim.round();
    let capsule = 72;
    let mut waits = Vec::new();
    for _ in 0..1000 {
        sim.arrive(1, capsule);
        // From its arrival to its read: what the loop reads before it.
        let turns = sim.round();
        let at = turns.iter().position(|t| t.conn == 1).unwrap();
        assert_eq!(turns[at].bytes, capsule);
        waits.push(turns[..at].iter().map(|t| t.bytes).sum::<usize>());
        // The deep writer's turn in a round shared with a quiet connection
        // is one short slice.
        let deep = turns.iter().find(|t| t.conn == 0).unwrap();
        assert!(deep.contended);
        assert_eq!(deep.bytes, (SHARE / CONTENDED_DIVISOR).max(CONTENDED_MIN));
    }
    // The quiet connection's command went first every time.
    assert!(waits.iter().all(|&w| w == 0), "{waits:?}");
    // Meanwhile the writer moved on, a slice per command.
    assert_eq!(sim.read[0], SHARE + 1000 * SHARE / CONTENDED_DIVISOR);
    // The QD 1 host goes quiet: while it is hot (within the idle window
    // of its last work) the writer still reads short slices; after it,
    // full shares again.
    let quiet_since = sim.now;
    let mut slices = Vec::new();
    while slices.len() < 40 {
        let t = sim.round();
        slices.push((sim.now - quiet_since, t[0].bytes));
    }
    let short = (SHARE / CONTENDED_DIVISOR).max(CONTENDED_MIN);
    for &(since, bytes) in &slices {
        if bytes == SHARE {
            assert!(
                since >= IDLE,
                "full share {since:?} after, inside the idle window"
            );
        } else {
            assert_eq!(bytes, short);
            assert!(
                since <= IDLE + Duration::from_nanos(short as u64),
                "{since:?}"
            );
        }
    }
    assert_eq!(slices.last().unwrap().1, SHARE);
}

#[test]
fn ticks_of_many_connections_gather_on_the_grid_and_none_is_skipped() {
    let t0 = Instant::now();
    let mut s = Scheduler::new(PollMode::Never, IDLE, 0, t0);
    // 300 connections accepted over a second, 3.3 ms apart; none works.
    let n = 300;
    for i in 0..n {
        s.add(i, t0 + Duration::from_micros(3_300 * i as u64));
    }
    let end = t0 + 6 * IDLE_TICK;
    let mut now = t0;
    let mut wakeups = 0;
    let mut ticks: Vec<Vec<Instant>> = vec![Vec::new(); n];
    while let Some(at) = s.poll_timeout(now).filter(|&at| at <= end) {
        now = now.max(at);
        wakeups += 1;
        while let Some(d) = s.poll_due(now) {
            if let Due::Tick(i) = d {
                ticks[i].push(now);
            }
        }
    }
    // Every tick is on the 50 ms grid.
    for t in ticks.iter().flatten() {
        assert_eq!(
            (*t - t0).as_nanos() % TICK_GRAIN.as_nanos(),
            0,
            "{:?}",
            *t - t0
        );
    }
    // Each connection: a TICK after it came (rounded down to the grid),
    // a TICK later (the first tick finds it had not been idle since a
    // tick), then IDLE_TICK apart; none skipped.
    for (i, t) in ticks.iter().enumerate() {
        let added = t0 + Duration::from_micros(3_300 * i as u64);
        let first = t[0] - added;
        assert!(first > TICK - TICK_GRAIN && first <= TICK, "{i}: {first:?}");
        assert_eq!(t[1] - t[0], TICK, "{i}");
        assert!(
            t[1..].windows(2).all(|w| w[1] - w[0] == IDLE_TICK),
            "{i}: {t:?}"
        );
        assert!(t.len() >= 5, "{i}: {} ticks", t.len());
    }
    // 1,500 ticks or more, in at most one wake-up per grid point (the
    // scan shares them too).
    let total: usize = ticks.iter().map(Vec::len).sum();
    assert!(total >= 5 * n);
    let grid_points = (6 * IDLE_TICK).as_millis() / TICK_GRAIN.as_millis() + 1;
    assert!(wakeups as u128 <= grid_points, "{wakeups} wake-ups");
}
