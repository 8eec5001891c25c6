//! Range exclusion across every queue of a namespace, for the fused
//! Compare and Write (Base §3.4.2: the pair is atomic with respect to every
//! other command on the namespace). The queues of a namespace live on
//! different worker threads, so this is the one piece of I/O state they share.
//!
//! While no fused pair exists, a write costs one store to its own queue's
//! [`Tally`] (a cache line only that queue's thread writes), a fence and a
//! load of [`Exclusion`]'s pair count: no lock, no shared write. A pair
//! raises the count first; from then on every write takes the slow path
//! (the mutex): it waits while it overlaps a pair's range, or is listed as
//! in flight. A pair is granted its range once no earlier pair overlaps it,
//! no listed write overlaps it, and every queue's fast-path writes (those
//! that began before the count rose) have drained. The store-fence-load on
//! the write side and the raise-then-read on the pair's side (Dekker's
//! pattern) make sure no write slips past both checks. Models: SPDK's bdev
//! range locks (a lock waits for the I/O in flight on every channel and
//! holds back new overlapping I/O); Linux nvmet offers no fused operation.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// One queue's writes that took the fast path and are not done yet.
/// Written only by the queue's own thread; read by a pair waiting for its
/// range.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Tally {
    inflight: AtomicU64,
}

impl Tally {
    /// A fast-path write of this queue is done.
    pub(crate) fn done(&self) {
        self.add(-1);
    }

    fn add(&self, by: i64) {
        let v = self.inflight.load(Ordering::Relaxed);
        self.inflight
            .store(v.wrapping_add(by as u64), Ordering::Release);
    }
}

/// A byte range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    pub(crate) fn new(offset: u64, len: u64) -> Range {
        Range {
            start: offset,
            end: offset.saturating_add(len),
        }
    }

    /// Everything (a command whose ranges are not one extent).
    pub(crate) const ALL: Range = Range {
        start: 0,
        end: u64::MAX,
    };

    fn overlaps(self, o: Range) -> bool {
        self.start < o.end && o.start < self.end
    }
}

/// How a write entered the namespace ([`Exclusion::enter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Counted in the queue's tally: [`Tally::done`] when done.
    Fast,
    /// Listed under this id: [`Exclusion::leave_slow`] when done.
    Slow(u64),
    /// It overlaps a pair's range: try again later; nothing to undo.
    Wait,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// Pairs holding or waiting for a range, in arrival order.
    locks: Vec<(u64, Range, bool)>,
    /// Writes admitted on the slow path and not done.
    writes: Vec<(u64, Range)>,
    /// Every queue that wrote to the namespace (their fast-path writes).
    tallies: Vec<Weak<Tally>>,
}

/// The range exclusion of one namespace (see the module comment).
#[derive(Debug, Default)]
pub struct Exclusion {
    /// Pairs holding or waiting for a range (0: writes take the fast path).
    pairs: AtomicU32,
    inner: Mutex<Inner>,
}

impl Exclusion {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding it leaves plain lists behind:
        // still consistent, so go on with them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists a queue's tally (once per queue and namespace, not per I/O).
    pub(crate) fn join(&self, t: &Arc<Tally>) {
        let mut g = self.lock();
        g.tallies.retain(|w| w.strong_count() > 0);
        g.tallies.push(Arc::downgrade(t));
    }

    /// A write over `r` wants to start (its queue's tally `t`, joined).
    pub(crate) fn enter(&self, t: &Tally, r: Range) -> Entry {
        t.add(1);
        fence(Ordering::SeqCst);
        if self.pairs.load(Ordering::Relaxed) == 0 {
            return Entry::Fast;
        }
        t.add(-1);
        self.enter_slow(r)
    }

    #[cold]
    fn enter_slow(&self, r: Range) -> Entry {
        let mut g = self.lock();
        if g.locks.iter().any(|&(_, l, _)| l.overlaps(r)) {
            return Entry::Wait;
        }
        g.next_id += 1;
        let id = g.next_id;
        g.writes.push((id, r));
        Entry::Slow(id)
    }

    pub(crate) fn leave_slow(&self, id: u64) {
        self.lock().writes.retain(|&(w, _)| w != id);
    }

    /// A fused pair asks for `r`: queued behind earlier pairs; writes take
    /// the slow path from now on. Returns its id for [`Exclusion::grant`].
    pub(crate) fn request(&self, r: Range) -> u64 {
        let mut g = self.lock();
        self.pairs.fetch_add(1, Ordering::SeqCst);
        g.next_id += 1;
        let id = g.next_id;
        g.locks.push((id, r, false));
        id
    }

    /// Whether the pair `id` holds its range now (taking it when it can).
    pub(crate) fn grant(&self, id: u64) -> bool {
        fence(Ordering::SeqCst);
        let mut g = self.lock();
        let Some(pos) = g.locks.iter().position(|&(l, _, _)| l == id) else {
            return false;
        };
        let (_, r, held) = g.locks[pos];
        if held {
            return true;
        }
        let free = !g.locks[..pos].iter().any(|&(_, l, _)| l.overlaps(r))
            && !g.writes.iter().any(|&(_, w)| w.overlaps(r))
            && g.tallies.iter().all(|w| {
                w.upgrade()
                    .is_none_or(|t| t.inflight.load(Ordering::SeqCst) == 0)
            });
        if free {
            g.locks[pos].2 = true;
        }
        free
    }

    /// The pair `id` is done (or gone): its range is free.
    pub(crate) fn release(&self, id: u64) {
        let mut g = self.lock();
        let before = g.locks.len();
        g.locks.retain(|&(l, _, _)| l != id);
        if g.locks.len() < before {
            self.pairs.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Pairs holding or waiting (tests, metrics).
    pub fn pairs(&self) -> u32 {
        self.pairs.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_fast_until_a_pair_comes_and_wait_while_it_holds() {
        let ex = Exclusion::default();
        let (t1, t2) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
        ex.join(&t1);
        ex.join(&t2);
        let a = Range::new(0, 4096);
        assert_eq!(ex.enter(&t1, a), Entry::Fast);
        let p = ex.request(a);
        // A fast write of t1 is in flight: not granted yet.
        assert!(!ex.grant(p));
        // Writes now take the slow path; an overlapping one waits, another goes.
        assert_eq!(ex.enter(&t2, a), Entry::Wait);
        let Entry::Slow(w) = ex.enter(&t2, Range::new(8192, 4096)) else {
            panic!("a write beside the pair's range is admitted");
        };
        t1.done();
        assert!(ex.grant(p), "every earlier write done");
        assert!(ex.grant(p), "granted stays granted");
        ex.leave_slow(w);
        assert_eq!(ex.enter(&t2, a), Entry::Wait);
        ex.release(p);
        assert_eq!(ex.pairs(), 0);
        assert_eq!(ex.enter(&t2, a), Entry::Fast);
        t2.done();
    }

    #[test]
    fn pairs_on_one_range_go_in_arrival_order_and_wait_for_listed_writes() {
        let ex = Exclusion::default();
        let t = Arc::new(Tally::default());
        ex.join(&t);
        let a = Range::new(512, 512);
        let first = ex.request(Range::new(0, 1 << 20));
        let Entry::Slow(w) = ex.enter(&t, Range::new(2 << 20, 512)) else {
            panic!("outside every pair's range");
        };
        let second = ex.request(Range::new(2 << 20, 4096));
        let third = ex.request(a);
        assert!(ex.grant(first));
        assert!(!ex.grant(second), "a listed write overlaps it");
        assert!(!ex.grant(third), "an earlier pair overlaps it");
        ex.leave_slow(w);
        assert!(ex.grant(second));
        ex.release(first);
        assert!(ex.grant(third));
        ex.release(second);
        ex.release(third);
        ex.release(third); // twice: no underflow
        assert_eq!(ex.pairs(), 0);
    }

    #[test]
    fn a_dropped_queue_does_not_hold_pairs_back() {
        let ex = Exclusion::default();
        let t = Arc::new(Tally::default());
        ex.join(&t);
        assert_eq!(ex.enter(&t, Range::ALL), Entry::Fast);
        drop(t);
        let p = ex.request(Range::new(0, 512));
        assert!(ex.grant(p));
    }

    #[test]
    fn racing_writers_and_pairs_never_overlap() {
        // Two threads: one takes a pair's range, the other writes into it;
        // the writer must never be inside while the pair holds.
        use std::sync::atomic::AtomicBool;
        let ex = Arc::new(Exclusion::default());
        let inside = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(false));
        let r = Range::new(0, 4096);
        let w = {
            let (ex, inside, held) = (ex.clone(), inside.clone(), held.clone());
            std::thread::spawn(move || {
                let t = Arc::new(Tally::default());
                ex.join(&t);
                let mut writes = 0;
                while writes < 20_000 {
                    match ex.enter(&t, r) {
                        Entry::Wait => std::thread::yield_now(),
                        e => {
                            inside.store(true, Ordering::SeqCst);
                            assert!(!held.load(Ordering::SeqCst), "write inside a held range");
                            inside.store(false, Ordering::SeqCst);
                            match e {
                                Entry::Fast => t.done(),
                                Entry::Slow(id) => ex.leave_slow(id),
                                Entry::Wait => {}
                            }
                            writes += 1;
                        }
                    }
                }
            })
        };
        for _ in 0..2_000 {
            let p = ex.request(r);
            while !ex.grant(p) {
                std::thread::yield_now();
            }
            held.store(true, Ordering::SeqCst);
            assert!(!inside.load(Ordering::SeqCst), "pair granted over a write");
            held.store(false, Ordering::SeqCst);
            ex.release(p);
        }
        w.join().unwrap();
    }
}
