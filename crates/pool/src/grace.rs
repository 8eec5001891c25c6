//! Grace periods for freed clusters: a cluster a map stops using is
//! reused only once every request that was in flight when it was freed
//! has ended, on any volume of the pool (a read through a clone resolves
//! to an ancestor's cluster, so counting on the addressed volume alone is
//! not enough).
//!
//! The scheme is an epoch ring (sleepable RCU's, with [`SLOTS`] slots
//! rather than two): every request counts itself, before it looks any
//! map up, in its queue's shard under the slot of the pool's epoch, and
//! re-reads the epoch after counting (so its epoch is the one current at
//! a moment before its lookup). The epoch moves from `e` to `e + 1` only
//! when no request of epoch `e + 1 - SLOTS` is in flight (its slot is
//! about to be reused), so the requests in flight belong to the last
//! `SLOTS` epochs. A free records the epoch current after its map change
//! and then moves the epoch on, so requests that start later count under
//! a newer epoch; the cluster is reusable once no request of that epoch
//! or an earlier one is in flight. Requests that start after a free do
//! not hold it back, so frees complete under continuous I/O.
//!
//! The hot path costs two uncontended atomic increments on the queue's
//! own cache line and a load of the epoch (written only when frees
//! happen).

use std::sync::atomic::{AtomicU64, Ordering};

/// Epochs whose requests are told apart.
const SLOTS: usize = 4;

/// Shards of the counters, pool-wide: queues of every volume spread over
/// them (a queue's shard number modulo this), one cache line each.
const SHARDS: usize = 64;

#[derive(Default)]
#[repr(align(64))]
struct Shard {
    issued: [AtomicU64; SLOTS],
    completed: [AtomicU64; SLOTS],
}

pub(crate) struct Grace {
    epoch: AtomicU64,
    shards: Box<[Shard]>,
}

impl Default for Grace {
    fn default() -> Self {
        Grace {
            epoch: AtomicU64::new(0),
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

fn slot(epoch: u64) -> usize {
    (epoch % SLOTS as u64) as usize
}

impl Grace {
    /// Counts a request of `shard` starting; returns its slot, for
    /// [`Grace::leave`]. The caller looks maps up only after this.
    #[inline]
    pub(crate) fn enter(&self, shard: usize) -> u8 {
        let s = &self.shards[shard % SHARDS];
        loop {
            let e = self.epoch.load(Ordering::SeqCst);
            let k = slot(e);
            s.issued[k].fetch_add(1, Ordering::SeqCst);
            if self.epoch.load(Ordering::SeqCst) == e {
                return k as u8;
            }
            s.completed[k].fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts the request of `shard` that [`Grace::enter`] gave `k` done.
    #[inline]
    pub(crate) fn leave(&self, shard: usize, k: u8) {
        self.shards[shard % SHARDS].completed[usize::from(k) % SLOTS]
            .fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// No request counted under slot `k` is in flight (`completed` read
    /// before `issued`, per shard).
    fn drained(&self, k: usize) -> bool {
        self.shards.iter().all(|s| {
            let done = s.completed[k].load(Ordering::SeqCst);
            done == s.issued[k].load(Ordering::SeqCst)
        })
    }

    /// Moves the epoch on by one when the slot it reuses is drained;
    /// returns the epoch. Callers are serialized (the pool's state lock).
    pub(crate) fn advance(&self) -> u64 {
        let e = self.epoch();
        if self.drained(slot(e + 1)) {
            let _ = self
                .epoch
                .compare_exchange(e, e + 1, Ordering::SeqCst, Ordering::SeqCst);
        }
        self.epoch()
    }

    /// Whether something freed at epoch `freed` may be reused now: no
    /// request of an epoch up to `freed` is in flight (those older than
    /// the last `SLOTS` epochs ended before the epoch could move on).
    pub(crate) fn passed(&self, freed: u64) -> bool {
        let e = self.epoch();
        let oldest = (e + 1).saturating_sub(SLOTS as u64);
        (oldest..=freed.min(e)).all(|x| self.drained(slot(x)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_requests_in_flight_at_the_free_only() {
        let g = Grace::default();
        let old = g.enter(3);
        let freed = g.epoch();
        assert_eq!(g.advance(), freed + 1, "a free moves the epoch on");
        let new = g.enter(5);
        assert!(!g.passed(freed), "the old request holds it");
        g.leave(3, old);
        assert!(g.passed(freed), "the newer request does not hold it");
        // A free while the newer one is in flight: the same again.
        let freed2 = g.epoch();
        g.advance();
        let newer = g.enter(7);
        assert!(!g.passed(freed2));
        g.leave(5, new);
        assert!(g.passed(freed2));
        // The epoch cannot lap a request in flight.
        for _ in 0..10 {
            g.advance();
        }
        assert_eq!(g.epoch(), freed2 + 1 + (SLOTS as u64 - 1));
        g.leave(7, newer);
        assert!(g.advance() > freed2 + SLOTS as u64);
    }
}
