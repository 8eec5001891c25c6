//! Token buckets shared by the queues one limit governs.
//!
//! A [`Limiter`] holds up to six buckets (rw, r, w I/Os; rw, r, w bytes).
//! Queues never take a single I/O's tokens from it: they take a chunk
//! (`CHUNK` of a second's worth, or what the I/O needs if more) into a
//! reserve of their own and spend from that, so the lock is taken about
//! once per chunk. A bucket may go into debt by one I/O (a 128 KiB write
//! under a 64 KiB burst still passes, then waits are longer), as SPDK's QoS
//! lets one I/O overshoot its time slice.
//!
//! Queues that found a bucket empty line up: while any waits, tokens go to
//! the one that has waited longest, so a deep queue cannot take every
//! token the moment it appears and starve a shallow one under the same
//! limit.

use super::config::QosLimits;
use super::CHUNK;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A waiter that has not come back for this long has gone (its queue
/// closed without saying so): it loses its place.
const STALE: Duration = Duration::from_secs(1);
/// How soon a waiter behind another retries when tokens are there but the
/// one before it has not taken them yet.
const RETRY: Duration = Duration::from_micros(100);

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Tokens per second; 0: not limited.
    rate: f64,
    /// Most tokens held (the burst allowance).
    cap: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl Bucket {
    fn configure(&mut self, rate: Option<u64>, burst_ms: u64) {
        self.rate = rate.unwrap_or(0) as f64;
        self.cap = self.rate * burst_ms as f64 / 1000.0;
        if self.last.is_none() {
            self.tokens = self.cap;
        }
        self.tokens = self.tokens.min(self.cap);
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + self.rate * dt).min(self.cap);
        }
        self.last = Some(now);
    }
}

#[derive(Debug, Default)]
struct State {
    b: [Bucket; 6],
    /// Queues (gate ids) that found a bucket empty, oldest first, with
    /// when they last asked.
    waiters: VecDeque<(u64, Instant)>,
}

/// The buckets of one `[[subsystem.qos]]` entry.
#[derive(Debug)]
pub struct Limiter {
    state: Mutex<State>,
}

impl Limiter {
    pub fn new(l: &QosLimits) -> Limiter {
        let lim = Limiter {
            state: Mutex::new(State::default()),
        };
        lim.set(l);
        lim
    }

    /// New rates (a reload, the management API): tokens held are kept up
    /// to the new burst allowance.
    pub fn set(&self, l: &QosLimits) {
        let mut s = self.lock();
        for (b, r) in s.b.iter_mut().zip(l.rates()) {
            b.configure(r, l.burst_ms());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `id` is gone: it gives up its place in line.
    pub(crate) fn forget(&self, id: u64) {
        self.lock().waiters.retain(|(w, _)| *w != id);
    }

    /// Brings queue `id`'s `reserve` up to `need` in every bucket that
    /// limits it (unlimited ones get an infinite reserve), taking at least
    /// a chunk at a time. `Err(when)`: some bucket is empty, or another
    /// queue waits before this one, until about `when`; what was taken
    /// from the other buckets stays in `reserve`.
    pub(crate) fn fill(
        &self,
        id: u64,
        now: Instant,
        need: &[f64; 6],
        reserve: &mut [f64; 6],
    ) -> Result<(), Instant> {
        let mut s = self.lock();
        let s = &mut *s;
        while let Some(&(w, at)) = s.waiters.front() {
            if w != id && now.saturating_duration_since(at) > STALE {
                s.waiters.pop_front();
            } else {
                break;
            }
        }
        // Behind others in line: wait for them (roughly one I/O's worth of
        // tokens each), and keep the place.
        let pos = s.waiters.iter().position(|(w, _)| *w == id);
        let ahead = pos.unwrap_or(s.waiters.len());
        let mut wait: Option<Instant> = None;
        for i in 0..6 {
            if need[i] <= reserve[i] {
                continue;
            }
            let bk = &mut s.b[i];
            if bk.rate <= 0.0 {
                reserve[i] = f64::INFINITY;
                continue;
            }
            bk.refill(now);
            if bk.tokens <= 0.0 || ahead > 0 {
                // Empty (or in debt) until the rate has paid back the debt
                // and the shares of those in line before this queue.
                let owed = (-bk.tokens).max(0.0) + ahead as f64 * (need[i] - reserve[i]);
                let secs = (owed / bk.rate + 1e-6).min(3600.0);
                let at = now + Duration::from_secs_f64(secs).max(RETRY);
                wait = Some(wait.map_or(at, |w: Instant| w.max(at)));
                continue;
            }
            let give = (need[i] - reserve[i]).max(bk.tokens.min(bk.rate * CHUNK));
            bk.tokens -= give;
            reserve[i] += give;
        }
        match (wait, pos) {
            (Some(at), Some(p)) => {
                s.waiters[p].1 = now;
                Err(at)
            }
            (Some(at), None) => {
                s.waiters.push_back((id, now));
                Err(at)
            }
            (None, Some(p)) => {
                let _ = s.waiters.remove(p);
                Ok(())
            }
            (None, None) => Ok(()),
        }
    }

    /// The configured rates (None: not limited), for reports.
    pub fn rates(&self) -> [Option<u64>; 6] {
        let s = self.lock();
        std::array::from_fn(|i| (s.b[i].rate > 0.0).then_some(s.b[i].rate as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(ios: u64) -> QosLimits {
        QosLimits {
            rw_ios_per_sec: Some(ios),
            ..QosLimits::default()
        }
    }

    #[test]
    fn a_rate_holds_over_simulated_time() {
        let lim = Limiter::new(&limits(1000));
        let t0 = Instant::now();
        let mut reserve = [0.0; 6];
        let need = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let (mut now, mut done) = (t0, 0u64);
        let end = t0 + Duration::from_secs(10);
        while now < end {
            if reserve[0] >= 1.0 || lim.fill(1, now, &need, &mut reserve).is_ok() {
                reserve[0] -= 1.0;
                done += 1;
            } else {
                now += Duration::from_micros(100);
            }
        }
        // 10 s at 1000/s plus the initial burst (100 ms) and one chunk.
        assert!((10_000..=10_110).contains(&done), "{done}");
        // Unlimited buckets give an infinite reserve.
        assert!(reserve[1..].iter().all(|r| *r == 0.0));
        lim.fill(1, now, &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0], &mut reserve)
            .unwrap();
        assert_eq!(reserve[1], f64::INFINITY);
    }

    #[test]
    fn an_empty_bucket_says_when_it_refills_and_debt_is_repaid() {
        let lim = Limiter::new(&QosLimits {
            w_bytes_per_sec: Some(crate::config::Size(1 << 20)),
            burst_ms: Some(10),
            ..QosLimits::default()
        });
        let t0 = Instant::now();
        let mut reserve = [0.0; 6];
        // A 128 KiB write against a 10 KiB burst: passes, into debt.
        let need = [0.0, 0.0, 0.0, 0.0, 0.0, 131072.0];
        lim.fill(1, t0, &need, &mut reserve).unwrap();
        reserve[5] -= 131072.0;
        let when = lim.fill(1, t0, &need, &mut reserve).unwrap_err();
        let wait = when.duration_since(t0).as_secs_f64();
        // ~118 KiB of debt at 1 MiB/s.
        assert!((0.10..0.13).contains(&wait), "{wait}");
        assert!(lim.fill(1, when, &need, &mut reserve).is_ok());
    }
}
