//! Per-queue I/O counters. Each queue pair owns one `QueueStats` and is its
//! only writer (relaxed stores on its own cache line, no contention); readers
//! (SMART log, shutdown summary) sum them when asked.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

#[derive(Default, Debug)]
#[repr(align(64))]
pub struct QueueStats {
    pub read_cmds: AtomicU64,
    pub write_cmds: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub media_errors: AtomicU64,
}

/// A plain snapshot of counters.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Totals {
    pub read_cmds: u64,
    pub write_cmds: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub media_errors: u64,
}

impl QueueStats {
    /// Single-writer increment: a load and a store, no read-modify-write bus lock.
    #[inline]
    pub fn bump(c: &AtomicU64, by: u64) {
        c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
    }
    pub fn snapshot(&self) -> Totals {
        Totals {
            read_cmds: self.read_cmds.load(Relaxed),
            write_cmds: self.write_cmds.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            media_errors: self.media_errors.load(Relaxed),
        }
    }
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, o: Totals) {
        self.read_cmds += o.read_cmds;
        self.write_cmds += o.write_cmds;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.media_errors += o.media_errors;
    }
}

/// The counters of a subsystem: live queues plus what closed queues left.
#[derive(Default, Debug)]
pub struct StatsRegistry {
    inner: Mutex<(Vec<Arc<QueueStats>>, Totals)>,
}

impl StatsRegistry {
    /// Registers a new queue's counters (at Connect, not on the I/O path).
    pub fn register(&self) -> Arc<QueueStats> {
        let s = Arc::new(QueueStats::default());
        if let Ok(mut g) = self.inner.lock() {
            g.0.push(s.clone());
        }
        s
    }
    /// Folds a closing queue's counters into the retired totals.
    pub fn retire(&self, s: &Arc<QueueStats>) {
        if let Ok(mut g) = self.inner.lock() {
            if let Some(i) = g.0.iter().position(|x| Arc::ptr_eq(x, s)) {
                let q = g.0.swap_remove(i);
                g.1 += q.snapshot();
            }
        }
    }
    pub fn totals(&self) -> Totals {
        match self.inner.lock() {
            Ok(g) => {
                let mut t = g.1;
                for q in &g.0 {
                    t += q.snapshot();
                }
                t
            }
            Err(_) => Totals::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_survive_retirement() {
        let r = StatsRegistry::default();
        let a = r.register();
        let b = r.register();
        QueueStats::bump(&a.read_cmds, 2);
        QueueStats::bump(&b.write_bytes, 4096);
        r.retire(&a);
        let t = r.totals();
        assert_eq!((t.read_cmds, t.write_bytes), (2, 4096));
        r.retire(&a); // twice is harmless
        assert_eq!(r.totals(), t);
    }
}
