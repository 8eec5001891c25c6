//! The pool's preparation thread: the slow part of the data path, off
//! the event loops.
//!
//! A write to a cluster its volume does not own yet (allocation, then
//! one write of the cluster's image: zeroes or the parent's data with the
//! request's data merged in; or, for a write spanning clusters, zeroing
//! or copying first), Write Zeroes and Deallocate are
//! handed here as [`Task`]s and `submit` returns at once. The thread runs
//! tasks in order (so requests from several queues for the same cluster
//! find it prepared by the first: one allocation, no lost write), then
//! posts each outcome to its queue's [`Inbox`] and wakes the queue
//! through its eventfd; the queue finishes the request at its next reap
//! (a write whose clusters are now owned goes down the ordinary path).
//! The request stays counted (on its layer and in the grace epoch) while
//! here. Without the thread (it could not start), tasks run on the
//! submitting thread.
//!
//! This module is the machinery (tasks, the thread, inboxes); the work
//! itself is the pool's (`work.rs`), which the thread calls through
//! [`Worker`].

use crate::committer::Wake;
use crate::layer::Layer;
use crate::lock::lock;
use farflash_backend::{IoBuf, IoOp};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};

/// What a task does.
pub(crate) enum Work {
    /// Own (allocate and prepare) every cluster `offset..offset + len`
    /// touches, then send the write down the ordinary path again.
    Own { offset: u64, len: u64 },
    /// The first write of the cluster `offset..offset + len` lies in:
    /// write it with the rest of the cluster's content (zeroes or the
    /// parent's data; none when it covers the whole cluster) in one write
    /// and map it (`PoolInner::first_write`).
    First { offset: u64, len: u64, fua: bool },
    /// Write Zeroes or Deallocate (the request's op).
    Zero,
}

/// A request handed to the thread.
pub(crate) struct Task<T> {
    pub(crate) layer: Arc<Layer>,
    pub(crate) work: Work,
    pub(crate) tag: u64,
    pub(crate) op: IoOp,
    /// The queue's record of the request's counts, returned untouched.
    pub(crate) ticket: T,
    pub(crate) buf: IoBuf,
    pub(crate) inbox: Arc<Inbox<T>>,
}

/// How a task ended.
pub(crate) enum Outcome {
    /// Submit the request again (its clusters are owned now, or the
    /// volume's layer was replaced meanwhile).
    Again,
    /// The whole-cluster write is on the device and mapped.
    Wrote,
    Finished(io::Result<()>),
}

/// A task's outcome, back to its queue.
pub(crate) struct Done<T> {
    pub(crate) tag: u64,
    pub(crate) op: IoOp,
    pub(crate) ticket: T,
    pub(crate) buf: IoBuf,
    pub(crate) outcome: Outcome,
}

/// Where a queue's finished tasks wait for its reap.
pub(crate) struct Inbox<T> {
    done: Mutex<Vec<Done<T>>>,
    ready: AtomicBool,
    arrived: Condvar,
    wake: Arc<dyn Wake>,
}

impl<T> Inbox<T> {
    pub(crate) fn new(wake: Arc<dyn Wake>) -> Inbox<T> {
        Inbox {
            done: Mutex::new(Vec::new()),
            ready: AtomicBool::new(false),
            arrived: Condvar::new(),
            wake,
        }
    }

    fn deliver(&self, d: Done<T>) {
        lock(&self.done).push(d);
        self.ready.store(true, Ordering::SeqCst);
        self.arrived.notify_all();
        self.wake.wake();
    }

    /// Moves what arrived into `out` (cheap when nothing did).
    pub(crate) fn take(&self, out: &mut Vec<Done<T>>) {
        if self.ready.swap(false, Ordering::SeqCst) {
            out.append(&mut lock(&self.done));
        }
    }

    /// Waits until `n` outcomes wait here (a queue closing with `n`
    /// tasks out), then moves them into `out`.
    pub(crate) fn wait_for(&self, n: usize, out: &mut Vec<Done<T>>) {
        let g = lock(&self.done);
        let mut g = self
            .arrived
            .wait_while(g, |d| d.len() < n)
            .unwrap_or_else(|p| p.into_inner());
        self.ready.store(false, Ordering::SeqCst);
        out.append(&mut g);
    }
}

/// What does a task's work (the pool, in `work.rs`).
pub(crate) trait Worker: Send + Sync {
    /// Does `work` for a request (`op`, `buf`) in `layer`; returns the
    /// buffer and how the request ended.
    fn run_work(&self, layer: &Arc<Layer>, work: Work, op: IoOp, buf: IoBuf) -> (IoBuf, Outcome);
}

/// A task with its queue's ticket type erased.
trait Run: Send {
    fn run(self: Box<Self>, pool: &dyn Worker);
}

impl<T: Send + 'static> Run for Task<T> {
    fn run(self: Box<Self>, pool: &dyn Worker) {
        let Task {
            layer,
            work,
            tag,
            op,
            ticket,
            buf,
            inbox,
        } = *self;
        let (buf, outcome) = pool.run_work(&layer, work, op, buf);
        inbox.deliver(Done {
            tag,
            op,
            ticket,
            buf,
            outcome,
        });
    }
}

#[derive(Default)]
struct Ctl {
    tasks: VecDeque<Box<dyn Run>>,
    stop: bool,
}

/// The thread and its task queue.
#[derive(Default)]
pub(crate) struct Preparer {
    ctl: Mutex<Ctl>,
    cv: Condvar,
    running: AtomicBool,
}

impl Preparer {
    /// Starts the thread for `pool`.
    pub(crate) fn start(self: &Arc<Self>, pool: Weak<dyn Worker>) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("pool-prep".into())
            .spawn(move || me.run(pool));
        match spawned {
            Ok(_) => self.running.store(true, Ordering::SeqCst),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the pool's preparation thread; cluster preparation runs on the submitting thread")
            }
        }
    }

    fn run(&self, pool: Weak<dyn Worker>) {
        loop {
            let task = {
                let g = lock(&self.ctl);
                let g = self.cv.wait_while(g, |c| c.tasks.is_empty() && !c.stop);
                let mut g = g.unwrap_or_else(|p| p.into_inner());
                match g.tasks.pop_front() {
                    Some(t) => t,
                    None => break,
                }
            };
            // Queues hold the pool, so it lives while they have tasks.
            let Some(p) = pool.upgrade() else { break };
            task.run(&*p);
        }
        self.running.store(false, Ordering::SeqCst);
    }

    /// Hands `task` to the thread, or, without one, runs it now on `pool`;
    /// its outcome arrives in its inbox.
    pub(crate) fn submit<T: Send + 'static>(&self, task: Task<T>, pool: &dyn Worker) {
        let task: Box<dyn Run> = Box::new(task);
        if self.running.load(Ordering::SeqCst) {
            lock(&self.ctl).tasks.push_back(task);
            self.cv.notify_one();
        } else {
            task.run(pool);
        }
    }

    pub(crate) fn stop(&self) {
        lock(&self.ctl).stop = true;
        self.cv.notify_all();
    }
}
