//! Grace periods for freed clusters: a cluster a map stops using is
//! reused only once every request that was in flight when it was freed
//! has ended, on any volume of the pool (a read through a clone resolves
//! to an ancestor's cluster, so counting on the addressed volume alone is
//! not enough).
//!
//! The scheme is a two-phase epoch (sleepable RCU's): every request
//! counts itself, before it looks any map up, in its queue's shard under
//! the parity of the pool's epoch, and re-reads the epoch after counting
//! (so its parity is the epoch's at a moment before its lookup). The
//! epoch moves from `e` to `e + 1` only when no request counted under the
//! parity of `e - 1` is in flight. A cluster freed (its map change made)
//! while the epoch was `e` is reusable at epoch `e + 2`: every request
//! that could have resolved to it counted under `e` or earlier, and both
//! parities were seen drained since. Requests that start after a free
//! count under a newer epoch and do not hold it back, so frees complete
//! under continuous I/O.
//!
//! The hot path costs two uncontended atomic increments on the queue's
//! own cache line and one load of the epoch (written only when frees
//! wait).

use crate::layer::SHARDS;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
#[repr(align(64))]
struct Shard {
    issued: [AtomicU64; 2],
    completed: [AtomicU64; 2],
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

impl Grace {
    /// Counts a request of `shard` starting; returns its parity, for
    /// [`Grace::leave`]. The caller looks maps up only after this.
    #[inline]
    pub(crate) fn enter(&self, shard: usize) -> u8 {
        let s = &self.shards[shard % SHARDS];
        loop {
            let e = self.epoch.load(Ordering::SeqCst);
            let p = (e & 1) as usize;
            s.issued[p].fetch_add(1, Ordering::SeqCst);
            if self.epoch.load(Ordering::SeqCst) == e {
                return p as u8;
            }
            s.completed[p].fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts the request of `shard` that [`Grace::enter`] gave `parity`
    /// done.
    #[inline]
    pub(crate) fn leave(&self, shard: usize, parity: u8) {
        self.shards[shard % SHARDS].completed[usize::from(parity & 1)]
            .fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// No request counted under `parity` is in flight (`completed` read
    /// before `issued`, per shard).
    fn drained(&self, parity: usize) -> bool {
        self.shards.iter().all(|s| {
            let done = s.completed[parity].load(Ordering::SeqCst);
            done == s.issued[parity].load(Ordering::SeqCst)
        })
    }

    /// Moves the epoch on as far as it may (at most twice: further moves
    /// prove nothing more); returns it. Callers are serialized (the
    /// pool's state lock).
    pub(crate) fn advance(&self) -> u64 {
        for _ in 0..2 {
            let e = self.epoch();
            if !self.drained(((e + 1) & 1) as usize) {
                break;
            }
            let _ = self
                .epoch
                .compare_exchange(e, e + 1, Ordering::SeqCst, Ordering::SeqCst);
        }
        self.epoch()
    }

    /// Whether something freed at epoch `freed` may be reused now.
    pub(crate) fn passed(&self, freed: u64) -> bool {
        self.epoch() >= freed + 2
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
        // The free moves the epoch on (nothing under the previous parity).
        assert_eq!(g.advance(), freed + 1, "blocked by the old request");
        let new = g.enter(5);
        g.advance();
        assert!(!g.passed(freed), "the old request holds it");
        g.leave(3, old);
        assert!(g.advance() >= freed + 2);
        assert!(g.passed(freed), "the newer request does not hold it");
        g.leave(5, new);
        assert!(g.advance() >= freed + 3);
    }
}
