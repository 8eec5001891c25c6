//! How long an adaptive event loop keeps polling after its last work.
//!
//! A fixed window loses against any host whose gaps between batches are a
//! little longer than the window: every gap then costs a sleep and a wake-up
//! (an IPI, expensive in a VM), which lengthens the host's next gap too. SPDK's
//! initiator writing 4 KiB at QD 32 leaves 80–130 µs between batches; with a
//! 100 µs window the target slept 2,600 times a second and ran at half the
//! speed of busy polling.
//!
//! So the window learns from the sleeps that should not have happened: when
//! work wakes the loop less than `max` after the last work, the window grows
//! to twice that gap (the next such gap is spun through). `DECAY_AFTER`
//! sleeps in a row that each last longer than `max` halve it again, down to
//! `base`. An idle
//! target therefore spins `base` after each stray event (a keep-alive), and a
//! host whose gaps exceed `max` is served from sleep, which at that rate costs
//! little.

use std::time::Duration;

/// Expired windows in a row, each followed by a long sleep, before the window shrinks.
const DECAY_AFTER: u32 = 4;

#[derive(Clone, Debug)]
pub(crate) struct IdleWindow {
    base: Duration,
    max: Duration,
    cur: Duration,
    long_sleeps: u32,
}

impl IdleWindow {
    /// `base`: the window of an idle target; `max`: the longest gap worth spinning through.
    pub(crate) fn new(base: Duration, max: Duration) -> IdleWindow {
        let max = max.max(base);
        IdleWindow {
            base,
            max,
            cur: base,
            long_sleeps: 0,
        }
    }

    /// How long to keep polling after the last work.
    pub(crate) fn get(&self) -> Duration {
        self.cur
    }

    /// The longest the window can grow to.
    pub(crate) fn max(&self) -> Duration {
        self.max
    }

    /// The loop slept and work woke it `gap` after the previous work.
    pub(crate) fn woke_after(&mut self, gap: Duration) {
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
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn grows_to_cover_short_gaps_and_is_capped() {
        let mut w = IdleWindow::new(100 * US, 2000 * US);
        assert_eq!(w.get(), 100 * US);
        // A sleep happens only once the window has expired, so the gap that
        // ends it is at least the window: the window at least doubles.
        w.woke_after(130 * US);
        assert_eq!(w.get(), 260 * US);
        w.woke_after(300 * US);
        assert_eq!(w.get(), 600 * US);
        w.woke_after(1500 * US);
        assert_eq!(w.get(), 2000 * US, "capped at max");
    }

    #[test]
    fn long_sleeps_shrink_it_back_to_base() {
        let mut w = IdleWindow::new(100 * US, 2000 * US);
        w.woke_after(1500 * US);
        assert_eq!(w.get(), 2000 * US);
        for _ in 0..DECAY_AFTER - 1 {
            w.woke_after(Duration::from_secs(2));
        }
        assert_eq!(w.get(), 2000 * US, "one stray long sleep changes nothing");
        w.woke_after(Duration::from_secs(2));
        assert_eq!(w.get(), 1000 * US);
        for _ in 0..DECAY_AFTER * 8 {
            w.woke_after(Duration::from_secs(2));
        }
        assert_eq!(w.get(), 100 * US);
    }

    #[test]
    fn max_below_base_is_base() {
        let mut w = IdleWindow::new(500 * US, 100 * US);
        w.woke_after(50 * US);
        assert_eq!(w.get(), 500 * US);
    }
}
