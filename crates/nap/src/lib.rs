//! When a polling event loop may sleep: the decision of farflash's default
//! polling (`--poll hybrid`), shared by the target's workers
//! (`crates/transport`, `sched.rs`) and the host's `perf` job threads
//! (`crates/bench`, `job.rs`). Pure: it reads no clock and sleeps itself
//! never; the loop tells it what happened, with the time ([`Nap::work`],
//! [`Nap::woke`]), and asks ([`Nap::decide`]). Its tests run it on a
//! simulated clock (`tests.rs`).
//!
//! The rule. Gaps between work (from one piece of work to the next, busy
//! stretches included as short gaps) are remembered, the last [`GAPS`] of
//! them. Idle for `idle` now, the loop bets that the next arrival comes no
//! sooner than the shortest of the remembered gaps longer than `idle`, and
//! only when at least [`MIN_SURVIVORS`] are (an arrival this late must have
//! happened at least one time in eight) and no remembered gap ended within
//! a wake-up cost before `idle` (past the short kind of a host with two
//! kinds of gaps by a margin: one a little longer than any remembered
//! would otherwise end the sleep). It sleeps until
//! then, less the wake-up cost and a guard, and only if the sleep is long
//! compared with the wake-up cost (at least `FAR_FACTOR` times it): a
//! shorter sleep saves less CPU than the wake-up charges, and risks that
//! cost on the next command's latency. The wake-up cost is measured: how
//! late each timer wake-up came, tracked as its median (the cost) and its
//! 90th percentile (what a bet plans for: on a machine whose wake-ups
//! jitter by more than the guard, planning for the average loses every
//! other bet). A bet lost while the loop was still asleep past its planned
//! wake-up teaches that the lateness lies above it: on a machine whose
//! wake-ups cost three times the first guess (a timer sleep 16-26 µs late,
//! docs/benchmarks.md), the first bets are all lost to the timer, and
//! without that the loop would hold off ever longer and never learn why.
//!
//! Two regimes went wrong under the earlier rule (`GapPredictor`: the
//! second-shortest of 16 gaps, on two samples): a saturating host whose
//! gaps jitter (QD 1, a 12-16 µs cycle, and QD 4, bursts of short gaps with
//! 20-40 µs bubbles) offered a thin basis for bets that then lost; every
//! sleep an arrival ends early costs a wake-up (5-10 µs here) on the
//! critical path. So, second, the rule backs off: a sleep that an arrival
//! ended (it came before the loop was back) is a *miss*, and the loop then
//! polls, betting no more, for `penalty` x [`HOLD_PER_WAKE`] wake-up costs
//! (600 µs at a 6 µs wake-up): a miss costs about one wake-up, so misses
//! then cost at most 1 % of the time, whatever the load. Counted in time,
//! not in arrivals: at a low rate a hold-off of thousands of arrivals would
//! poll for seconds. The penalty doubles at each miss (up to
//! [`PENALTY_MAX`]) and halves every [`HIT_RUN`] good bets: where more than
//! about one bet in 17 loses, it grows until the loop all but stops betting
//! (at saturation, misses then cost a thousandth of a percent: nothing
//! measurable); where fewer lose (a paced host, the timer's rare late
//! wake-up), it stays low. A wake-up cost measured high (a loaded machine)
//! stops the bets it makes too short; it decays back towards its initial
//! value every [`DECAY_WORKS`] works without a timer wake-up, so the loop
//! tries again.
//!
//! The states, and every transition (all in [`Nap::work`],
//! [`Nap::decide`] and [`Nap::woke`]):
//!
//! ```text
//!   Learning --work (GAPS gaps known)--> Ready
//!   Ready | Awake --decide: a far bet--> Asleep{since, until}
//!   Asleep --woke(Timer)--> Awake          (the lateness is measured)
//!   Asleep --woke(Arrival) | work--> Holdoff{until}     (a miss)
//!   Asleep --woke(Aborted)--> Ready        (the loop could not sleep)
//!   Awake --work--> Ready                  (a hit)
//!   Holdoff{until} --work or decide, at or after until--> Ready
//! ```

use std::time::{Duration, Instant};

/// Gaps remembered.
pub const GAPS: usize = 32;
/// Remembered gaps longer than the idle time so far needed for a bet.
pub const MIN_SURVIVORS: usize = 4;
/// A sleep must last at least this many times the wake-up cost.
const FAR_FACTOR: u32 = 2;
/// ... and at least this long.
const MIN_SLEEP: Duration = Duration::from_micros(4);
/// Margin between the planned wake-up (lateness included) and the bet.
const GUARD: Duration = Duration::from_micros(2);
/// The wake-up cost before any is measured (this VM's timer sleep: 4-5 µs
/// late at p50, `examples/timer_cost`).
const LATE_INITIAL: Duration = Duration::from_micros(6);
/// One descheduled wake-up counts as at most this late.
const LATE_CAP: Duration = Duration::from_micros(100);
/// A miss holds betting off for this many wake-up costs, times the penalty ...
pub const HOLD_PER_WAKE: u32 = 100;
/// ... which is this after the first miss ...
pub const PENALTY_MIN: u32 = 1;
/// ... and at most this, after misses in a row.
pub const PENALTY_MAX: u32 = 1024;
/// Good bets that halve the penalty.
pub const HIT_RUN: u32 = 16;
/// Works without a timer wake-up after which the wake-up cost decays an
/// eighth of the way back to its initial value.
pub const DECAY_WORKS: u32 = 256;

/// Where the loop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Fewer than [`GAPS`] gaps seen: no basis for a bet; polls.
    Learning,
    /// Polling; may bet at each idle check.
    Ready,
    /// A sleep was decided at `since`, its timer set for `until`.
    Asleep { since: Instant, until: Instant },
    /// Back from a timer, polling for the arrival bet on.
    Awake,
    /// A bet was lost: polls, betting no more, until then.
    Holdoff { until: Instant },
}

/// What the loop does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep polling.
    Poll,
    /// Sleep until an event or a precise timer at this instant, then
    /// report [`Nap::woke`].
    Sleep(Instant),
}

/// What ended a sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// The timer alone.
    Timer,
    /// Work (an event), with or without the timer: it came before the
    /// loop was back.
    Arrival,
    /// The loop did not sleep after all (the timer could not be set).
    Aborted,
}

/// What the loop's sleeps came to (for metrics: a regression that sleeps
/// at full load shows here).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NapStats {
    /// Sleeps taken on a bet.
    pub sleeps: u64,
    /// Time spent in them.
    pub slept: Duration,
    /// Of them, those an arrival ended early.
    pub misses: u64,
}

/// The last [`GAPS`] gaps between work.
#[derive(Clone, Debug)]
struct Gaps {
    ring: [Duration; GAPS],
    /// Gaps recorded (saturating at `GAPS`) and the next to overwrite.
    n: usize,
    next: usize,
}

impl Gaps {
    fn push(&mut self, gap: Duration) {
        self.ring[self.next] = gap;
        self.next = (self.next + 1) % GAPS;
        self.n = (self.n + 1).min(GAPS);
    }

    /// The bet, idle for `idle`: the shortest remembered gap longer than
    /// it; None with fewer than [`MIN_SURVIVORS`] of them, or while a
    /// remembered gap ended less than `clear` ago (the loop is still in
    /// the tail of a shorter kind of gap: one a little longer than any
    /// remembered would end the sleep). A linear pass: this runs per spin.
    fn bet(&self, idle: Duration, clear: Duration) -> Option<Duration> {
        let (mut count, mut shortest, mut below) = (0, Duration::MAX, Duration::ZERO);
        for &g in &self.ring[..self.n] {
            if g > idle {
                count += 1;
                shortest = shortest.min(g);
            } else {
                below = below.max(g);
            }
        }
        let clear_of_shorter = below.is_zero() || idle - below >= clear;
        (count >= MIN_SURVIVORS && clear_of_shorter).then_some(shortest)
    }
}

/// A timer wake-up's lateness: its median and 90th percentile, each
/// tracked by steps of a thirty-second of itself (up when a sample lies above,
/// down when below; the high one nine steps up for one down), which a rare
/// descheduled wake-up moves by a step, not by a share of its size.
#[derive(Clone, Copy, Debug)]
struct Late {
    median: Duration,
    high: Duration,
}

impl Late {
    fn new() -> Late {
        Late {
            median: LATE_INITIAL,
            high: LATE_INITIAL,
        }
    }

    fn step(d: Duration) -> Duration {
        (d / 32).max(Duration::from_nanos(100))
    }

    /// A wake-up came `late` after its timer (`exact`), or at least that
    /// late (a lost bet, still asleep past its planned wake-up: it says
    /// only that the lateness lies above what it passed).
    fn learn(&mut self, late: Duration, exact: bool) {
        let late = late.min(LATE_CAP);
        if late > self.median {
            self.median = (self.median + Late::step(self.median)).min(LATE_CAP);
        } else if exact {
            self.median = self.median.saturating_sub(Late::step(self.median));
        }
        if late > self.high {
            self.high = (self.high + Late::step(self.high) * 9).min(LATE_CAP);
        } else if exact {
            self.high = self.high.saturating_sub(Late::step(self.high));
        }
        self.high = self.high.max(self.median);
    }

    /// No timer wake-up for a while: an eighth of the way back to the
    /// initial guess, so a cost measured on a loaded machine does not stop
    /// the bets for good.
    fn decay(&mut self) {
        for d in [&mut self.median, &mut self.high] {
            if *d > LATE_INITIAL {
                *d = (*d * 7 + LATE_INITIAL) / 8;
            }
        }
    }
}

/// The decision's state: see the crate's documentation.
#[derive(Clone, Debug)]
pub struct Nap {
    phase: Phase,
    gaps: Gaps,
    last_work: Instant,
    /// A timer wake-up's lateness, tracked as its median (the wake-up
    /// cost: how long a sleep must be to pay, how long a hold-off lasts)
    /// and its 90th percentile (what a bet plans for, so a machine whose
    /// wake-ups jitter by more than [`GUARD`] does not lose every other
    /// bet): [`Late`].
    late: Late,
    /// The next miss's hold-off, in units of `HOLD_PER_WAKE` wake-up costs.
    penalty: u32,
    /// Good bets since the penalty last halved.
    hits: u32,
    /// Works since the last timer wake-up (or the last decay).
    unwoken: u32,
    stats: NapStats,
}

impl Nap {
    pub fn new(now: Instant) -> Nap {
        Nap {
            phase: Phase::Learning,
            gaps: Gaps {
                ring: [Duration::ZERO; GAPS],
                n: 0,
                next: 0,
            },
            last_work: now,
            late: Late::new(),
            penalty: PENALTY_MIN,
            hits: 0,
            unwoken: 0,
            stats: NapStats::default(),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn stats(&self) -> NapStats {
        self.stats
    }

    /// The measured wake-up cost (the median lateness).
    pub fn wake_cost(&self) -> Duration {
        self.late.median
    }

    /// What a bet plans for the wake-up: its 90th percentile lateness and
    /// [`GUARD`].
    pub fn wake_margin(&self) -> Duration {
        self.late.high + GUARD
    }

    /// Hold-off after the next miss, in units of `HOLD_PER_WAKE` wake-up costs.
    pub fn penalty(&self) -> u32 {
        self.penalty
    }

    /// Something moved at `now`: the gap since the last work is learnt,
    /// and a bet pending is settled.
    pub fn work(&mut self, now: Instant) {
        self.gaps
            .push(now.saturating_duration_since(self.last_work));
        self.last_work = now;
        self.unwoken += 1;
        if self.unwoken >= DECAY_WORKS {
            self.unwoken = 0;
            self.late.decay();
        }
        self.phase = match self.phase {
            Phase::Learning if self.gaps.n < GAPS => Phase::Learning,
            Phase::Learning | Phase::Ready => Phase::Ready,
            // Work while a sleep is unreported: the arrival came first.
            Phase::Asleep { since, .. } => self.missed(now, since),
            Phase::Awake => {
                self.hits += 1;
                if self.hits >= HIT_RUN {
                    self.hits = 0;
                    self.penalty = (self.penalty / 2).max(PENALTY_MIN);
                }
                Phase::Ready
            }
            Phase::Holdoff { until } if now < until => Phase::Holdoff { until },
            Phase::Holdoff { .. } => Phase::Ready,
        };
    }

    /// Idle at `now`: poll, or sleep until when; never past `limit` (the
    /// loop's next timer). Deciding to sleep moves to `Asleep`: report
    /// [`Nap::woke`] next.
    pub fn decide(&mut self, now: Instant, limit: Option<Instant>) -> Decision {
        if matches!(self.phase, Phase::Holdoff { until } if now >= until) {
            self.phase = Phase::Ready;
        }
        if !matches!(self.phase, Phase::Ready | Phase::Awake) {
            return Decision::Poll;
        }
        let idle = now.saturating_duration_since(self.last_work);
        let Some(bet) = self.gaps.bet(idle, self.late.median) else {
            return Decision::Poll;
        };
        let Some(wake) = bet
            .checked_sub(self.wake_margin())
            .map(|d| self.last_work + d)
        else {
            return Decision::Poll;
        };
        let until = limit.map_or(wake, |l| l.min(wake));
        let far = MIN_SLEEP.max(self.late.median * FAR_FACTOR);
        if until.saturating_duration_since(now) < far {
            return Decision::Poll;
        }
        self.phase = Phase::Asleep { since: now, until };
        Decision::Sleep(until)
    }

    /// The sleep decided last ended at `now`, as `how` says; true when it
    /// was a miss (an arrival ended it).
    pub fn woke(&mut self, now: Instant, how: Woke) -> bool {
        let Phase::Asleep { since, until } = self.phase else {
            return false;
        };
        self.phase = match how {
            Woke::Aborted => Phase::Ready,
            Woke::Timer => {
                self.count_sleep(now, since);
                self.late.learn(now.saturating_duration_since(until), true);
                self.unwoken = 0;
                Phase::Awake
            }
            Woke::Arrival => {
                // Still asleep past the planned wake-up: the timer was at
                // least this late. Learnt only when it says the cost is
                // higher than thought; without it, a machine whose
                // wake-ups are dearer than the first guess loses every bet
                // to the timer and never learns why.
                self.late.learn(now.saturating_duration_since(until), false);
                self.missed(now, since)
            }
        };
        how == Woke::Arrival
    }

    fn count_sleep(&mut self, now: Instant, since: Instant) {
        self.stats.sleeps += 1;
        self.stats.slept += now.saturating_duration_since(since);
    }

    /// A lost bet: counted, and the loop polls for `penalty` hold-off
    /// units, twice as many after the next.
    fn missed(&mut self, now: Instant, since: Instant) -> Phase {
        self.count_sleep(now, since);
        self.stats.misses += 1;
        let until = now + self.late.median * HOLD_PER_WAKE * self.penalty;
        self.penalty = (self.penalty * 2).min(PENALTY_MAX);
        Phase::Holdoff { until }
    }
}

#[cfg(test)]
mod tests;
