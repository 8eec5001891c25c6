//! The pool's preparation thread: the slow part of the data path, off
//! the event loops.
//!
//! A write to a cluster its volume does not own yet (allocation, then
//! zeroing it or copying the parent's data in, or a whole-cluster first
//! write that is its own preparation), Write Zeroes and Deallocate are
//! handed here as [`Task`]s and `submit` returns at once. The thread runs
//! tasks in order (so requests from several queues for the same cluster
//! find it prepared by the first: one allocation, no lost write), then
//! posts each outcome to its queue's [`Inbox`] and wakes the queue
//! through its eventfd; the queue finishes the request at its next reap
//! (a write whose clusters are now owned goes down the ordinary path).
//! The request stays counted (on its layer and in the grace epoch) while
//! here. Without the thread (it could not start), tasks run on the
//! submitting thread.

use crate::committer::Wake;
use crate::error::no_space;
use crate::format::{UNMAPPED, ZERO};
use crate::layer::{Layer, Source};
use crate::lock::lock;
use crate::pool::{Alloc, Fill, PoolInner};
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
    /// Write the buffer as the whole cluster at `offset` (its first
    /// write: no zeroing or copy) and map it.
    Whole { offset: u64, fua: bool },
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

/// A task with its queue's ticket type erased.
trait Run: Send {
    fn run(self: Box<Self>, pool: &PoolInner);
}

impl<T: Send + 'static> Run for Task<T> {
    fn run(self: Box<Self>, pool: &PoolInner) {
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
    pub(crate) fn start(self: &Arc<Self>, pool: Weak<PoolInner>) {
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

    fn run(&self, pool: Weak<PoolInner>) {
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
            task.run(&p);
        }
        self.running.store(false, Ordering::SeqCst);
    }

    pub(crate) fn stop(&self) {
        lock(&self.ctl).stop = true;
        self.cv.notify_all();
    }
}

impl PoolInner {
    /// Hands `task` to the preparation thread (or, without one, runs it
    /// now); its outcome arrives in its inbox.
    pub(crate) fn prepare_later<T: Send + 'static>(&self, task: Task<T>) {
        let task: Box<dyn Run> = Box::new(task);
        if self.prep.running.load(Ordering::SeqCst) {
            lock(&self.prep.ctl).tasks.push_back(task);
            self.prep.cv.notify_one();
        } else {
            task.run(self);
        }
    }

    fn run_work(&self, layer: &Arc<Layer>, work: Work, op: IoOp, buf: IoBuf) -> (IoBuf, Outcome) {
        match work {
            Work::Own { offset, len } => (buf, self.own_range(layer, offset, len)),
            Work::Whole { offset, fua } => {
                let mut slot = Some(buf);
                let fill = Fill::Data {
                    buf: &mut slot,
                    fua,
                };
                let r = self.own_cluster_with(layer, offset / self.cluster_size(), fill);
                let buf = slot.take().unwrap_or_else(|| IoBuf::with_capacity(0));
                let outcome = match r {
                    Ok((_, _, true)) => Outcome::Wrote,
                    Ok((_, _, false)) | Err(Alloc::Retry) => Outcome::Again,
                    Err(Alloc::Failed(e)) => Outcome::Finished(Err(e)),
                };
                (buf, outcome)
            }
            Work::Zero => {
                let outcome = match self.zero_request(layer, op, &buf) {
                    Ok(true) => Outcome::Finished(Ok(())),
                    Ok(false) => Outcome::Again,
                    Err(e) => Outcome::Finished(Err(e)),
                };
                (buf, outcome)
            }
        }
    }

    /// Owns every cluster of `offset..offset + len` in `layer`.
    fn own_range(&self, layer: &Arc<Layer>, offset: u64, len: u64) -> Outcome {
        let cs = self.cluster_size();
        let (first, last) = (offset / cs, (offset + len).div_ceil(cs));
        for i in first..last {
            if matches!(layer.resolve(i), Source::Own(_)) {
                continue;
            }
            match self.own_cluster(layer, i) {
                Ok(_) | Err(Alloc::Retry) => {}
                Err(Alloc::Failed(e)) => return Outcome::Finished(Err(e)),
            }
        }
        Outcome::Again
    }

    /// Write Zeroes or Deallocate in `layer`; false when the layer was
    /// replaced meanwhile (submit again: zeroing twice is harmless).
    fn zero_request(&self, layer: &Arc<Layer>, op: IoOp, buf: &IoBuf) -> io::Result<bool> {
        match op {
            IoOp::WriteZeroes { offset, len, .. } => self.zero_range(layer, offset, len),
            IoOp::Deallocate { ranges } => {
                for i in 0..ranges {
                    let (o, l) = farflash_backend::dealloc_range(buf, i);
                    if !self.zero_range(layer, o, l)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    /// Whole clusters are unmapped (freed once committed), parts zeroed
    /// in place.
    fn zero_range(&self, layer: &Arc<Layer>, offset: u64, len: u64) -> io::Result<bool> {
        let cs = self.cluster_size();
        let mut at = offset;
        while at < offset + len {
            let (index, within) = (at / cs, at % cs);
            let n = (cs - within).min(offset + len - at);
            if !self.zero_piece(layer, index, within, n)? {
                return Ok(false);
            }
            at += n;
        }
        Ok(true)
    }

    fn zero_piece(&self, layer: &Arc<Layer>, index: u64, within: u64, n: u64) -> io::Result<bool> {
        let cs = self.cluster_size();
        if n == cs {
            let mut st = lock(&self.state);
            if layer.is_retired() {
                return Ok(false);
            }
            let below = layer
                .parent
                .as_ref()
                .is_some_and(|a| a.resolve(index) != Source::Zero);
            match layer.resolve(index) {
                Source::Own(q) => {
                    st.set_entry(layer, index, if below { ZERO } else { UNMAPPED });
                    st.defer_free(q);
                }
                Source::Inherited(_) => {
                    if !st.fits(0, 1) {
                        return Err(no_space());
                    }
                    st.set_entry(layer, index, ZERO);
                }
                Source::Zero => {}
            }
            self.note(&st);
            return Ok(true);
        }
        let q = match layer.resolve(index) {
            Source::Zero => return Ok(true),
            Source::Own(q) => q,
            Source::Inherited(_) => match self.own_cluster(layer, index) {
                Ok((q, _)) => q,
                Err(Alloc::Retry) => return Ok(false),
                Err(Alloc::Failed(e)) => return Err(e),
            },
        };
        let (d, off) = self
            .locate(q, within)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        self.devs.zero(d, off, n)?;
        Ok(true)
    }
}
