//! The pool's committer thread: commits about every `commit_interval`,
//! and at once when a queue asks (a Flush or FUA write waiting for its
//! mappings), then wakes the queues that wait, through their eventfds,
//! so no event loop blocks on a commit.
//!
//! The thread drives what it commits through [`Commits`] (the pool
//! implements it), so this module knows nothing of the pool.

use crate::lock::lock;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// Something to wake when a commit ends (a volume queue's eventfd).
pub(crate) trait Wake: Send + Sync {
    fn wake(&self);
}

/// What the committer thread commits (the pool).
pub(crate) trait Commits: Send + Sync {
    /// Whether changes wait for a commit.
    fn dirty(&self) -> bool;
    /// Commits everything changed so far (durable when it returns).
    fn commit(&self) -> io::Result<()>;
    /// Whether freed clusters wait (for their grace period).
    fn freeing(&self) -> bool;
    /// Frees the committed clusters whose grace period has passed.
    fn reclaim_now(&self);
}

#[derive(Default)]
struct Ctl {
    stop: bool,
    kicked: bool,
}

#[derive(Default)]
pub(crate) struct Committer {
    ctl: Mutex<Ctl>,
    cv: Condvar,
    running: AtomicBool,
    waiters: Mutex<Vec<Weak<dyn Wake>>>,
    failures: AtomicU64,
}

impl Committer {
    /// Starts the thread for `pool`.
    pub(crate) fn start(self: &Arc<Self>, pool: Weak<dyn Commits>, every: Duration) {
        let me = self.clone();
        let run = move || me.run(pool, every);
        match std::thread::Builder::new()
            .name("pool-commit".into())
            .spawn(run)
        {
            Ok(_) => self.running.store(true, Ordering::SeqCst),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the pool committer; Flush commits on the caller's thread")
            }
        }
    }

    fn run(&self, pool: Weak<dyn Commits>, every: Duration) {
        loop {
            let kicked = {
                let g = lock(&self.ctl);
                let wait = self
                    .cv
                    .wait_timeout_while(g, every, |c| !c.stop && !c.kicked);
                let (mut g, _) = wait.unwrap_or_else(|p| p.into_inner());
                if g.stop {
                    break;
                }
                std::mem::take(&mut g.kicked)
            };
            let Some(p) = pool.upgrade() else { break };
            let dirty = p.dirty();
            if dirty && p.commit().is_err() {
                self.failures.fetch_add(1, Ordering::SeqCst);
            } else if !dirty && p.freeing() {
                // Frees wait for requests that were in flight: retry.
                p.reclaim_now();
            }
            drop(p);
            if kicked || dirty {
                self.wake_all();
            }
        }
        self.running.store(false, Ordering::SeqCst);
        self.wake_all();
    }

    /// Whether the thread runs (queues may then wait for it).
    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Asks for a commit now.
    pub(crate) fn kick(&self) {
        lock(&self.ctl).kicked = true;
        self.cv.notify_all();
    }

    pub(crate) fn stop(&self) {
        lock(&self.ctl).stop = true;
        self.cv.notify_all();
    }

    /// Wakes `w` after every commit while it lives.
    pub(crate) fn register(&self, w: Weak<dyn Wake>) {
        lock(&self.waiters).push(w);
    }

    /// Commits that failed so far (a waiting request fails when this
    /// moves).
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    fn wake_all(&self) {
        let mut ws = lock(&self.waiters);
        ws.retain(|w| match w.upgrade() {
            Some(w) => {
                w.wake();
                true
            }
            None => false,
        });
    }
}
