//! One event-loop thread's storage queues: one [`BackendQueue`] per backend,
//! shared by every connection on that thread.
//!
//! Requests name their backend by the [`SharedBackend`] they target; the set
//! opens that backend's queue at its first request (holding one `Arc` clone
//! for the queue's life, never one per I/O) and keeps it until nothing is in
//! flight and nobody else holds the backend ([`QueueSet::collect`]). Tags are
//! the caller's: the event loop puts the connection in the high bits so that
//! completions find their way back.

use crate::{BackendQueue, IoCompletion, IoRequest, SharedBackend};

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::Arc;

struct Entry {
    backend: SharedBackend,
    queue: Box<dyn BackendQueue>,
    /// In `QueueSet::dirty`.
    dirty: bool,
    /// In `QueueSet::busy`.
    busy: bool,
}

/// The storage queues of one thread.
///
/// A thread may hold thousands of queues (one per namespace it served);
/// every per-request step costs what the queues with work hold, not what
/// the thread holds: a queue is found by its backend's address, `commit`
/// visits the queues submitted to since the last one, `reap` and
/// `in_flight` those with requests out.
pub struct QueueSet {
    entries: Vec<Entry>,
    /// Entry index by the backend's address (its `Arc` allocation).
    by_backend: HashMap<usize, usize>,
    /// Entries submitted to since the last `commit`.
    dirty: Vec<usize>,
    /// Entries that may have requests in flight (submitted to and not yet
    /// seen empty by `reap`).
    busy: Vec<usize>,
    /// Depth each queue is opened with (they are shared, so this covers
    /// every connection of the thread; io_uring queues overflow beyond it).
    depth: u32,
    /// A queue could not be opened (logged once until one opens again).
    open_failed: bool,
}

fn key(backend: &SharedBackend) -> usize {
    Arc::as_ptr(backend).cast::<()>() as usize
}

/// Opens `backend`'s queue, unless it leaves fewer than
/// [`crate::limits::QUEUE_RESERVE`] descriptors free (then `EMFILE`).
fn open_queue(backend: &SharedBackend, depth: u32) -> std::io::Result<Box<dyn BackendQueue>> {
    let queue = backend.open_queue(depth)?;
    match queue.notify_fd() {
        Some(fd) if crate::limits::near_limit(fd) => {
            drop(queue);
            Err(std::io::Error::from_raw_os_error(libc::EMFILE))
        }
        _ => Ok(queue),
    }
}

impl QueueSet {
    pub fn new(depth: u32) -> QueueSet {
        QueueSet {
            entries: Vec::new(),
            by_backend: HashMap::new(),
            dirty: Vec::new(),
            busy: Vec::new(),
            depth,
            open_failed: false,
        }
    }

    /// Queues `req` on `backend`'s queue, opening it first if needed. When it
    /// cannot be opened the request completes at once with that error (in
    /// `failed`), so every request still completes exactly once.
    pub fn submit(
        &mut self,
        backend: &SharedBackend,
        req: IoRequest,
        failed: &mut Vec<IoCompletion>,
    ) {
        let pos = match self.by_backend.get(&key(backend)) {
            Some(&p) => p,
            None => match open_queue(backend, self.depth) {
                Ok(queue) => {
                    self.open_failed = false;
                    self.entries.push(Entry {
                        backend: backend.clone(),
                        queue,
                        dirty: false,
                        busy: false,
                    });
                    let p = self.entries.len() - 1;
                    self.by_backend.insert(key(backend), p);
                    p
                }
                Err(e) => {
                    if !std::mem::replace(&mut self.open_failed, true) {
                        if crate::limits::is_exhausted(&e) {
                            tracing::error!(
                                queues = self.entries.len(),
                                "cannot open a storage queue: {e}: the open-file limit \
                                 (RLIMIT_NOFILE) is reached (storage queues leave 64 free); each \
                                 file namespace with I/O takes 2 descriptors per event loop: \
                                 raise the limit (ulimit -n, systemd LimitNOFILE=); requests to \
                                 namespaces without a queue here fail meanwhile"
                            );
                        } else {
                            tracing::error!("cannot open a backend queue: {e}");
                        }
                    }
                    failed.push(IoCompletion {
                        tag: req.tag,
                        buf: req.buf,
                        result: Err(e),
                    });
                    return;
                }
            },
        };
        let e = &mut self.entries[pos];
        e.queue.submit(req);
        if !std::mem::replace(&mut e.dirty, true) {
            self.dirty.push(pos);
        }
        if !std::mem::replace(&mut e.busy, true) {
            self.busy.push(pos);
        }
    }

    /// Hands what was submitted to the kernel (one call per queue with work).
    pub fn commit(&mut self) {
        for pos in self.dirty.drain(..) {
            let e = &mut self.entries[pos];
            e.dirty = false;
            if let Err(err) = e.queue.commit() {
                tracing::warn!(kind = e.backend.kind(), "backend submit failed: {err}");
            }
        }
    }

    /// Appends every ready completion to `out`; returns how many. Queues
    /// with nothing in flight are skipped (an io_uring reap clears its
    /// eventfd, a system call).
    pub fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let mut n = 0;
        let entries = &mut self.entries;
        self.busy.retain(|&pos| {
            let e = &mut entries[pos];
            if e.queue.in_flight() > 0 {
                n += e.queue.reap(out);
            }
            e.busy = e.queue.in_flight() > 0;
            e.busy
        });
        n
    }

    /// Requests submitted and not reaped, over all queues.
    pub fn in_flight(&self) -> usize {
        self.busy
            .iter()
            .map(|&pos| self.entries[pos].queue.in_flight())
            .sum()
    }

    /// How many queues are open.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The completion eventfds of the open queues (those that have one).
    pub fn notify_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.entries.iter().filter_map(|e| e.queue.notify_fd())
    }

    /// Closes queues with nothing in flight whose backend nobody else holds
    /// (its namespace was removed); returns whether any closed.
    pub fn collect(&mut self) -> bool {
        let idle_orphan =
            |e: &Entry| e.queue.in_flight() == 0 && Arc::strong_count(&e.backend) == 1;
        if !self.entries.iter().any(idle_orphan) {
            return false;
        }
        // Uncommitted work goes out first: indices change below.
        self.commit();
        self.entries.retain(|e| !idle_orphan(e));
        self.by_backend = (self.entries.iter().enumerate())
            .map(|(i, e)| (key(&e.backend), i))
            .collect();
        self.busy.clear();
        for (i, e) in self.entries.iter_mut().enumerate() {
            e.busy = e.queue.in_flight() > 0;
            if e.busy {
                self.busy.push(i);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{open_null, IoBuf, IoOp};

    #[test]
    fn one_queue_per_backend_and_idle_orphans_close() {
        let a = open_null(1 << 20, 512).unwrap();
        let b = open_null(1 << 20, 512).unwrap();
        let mut set = QueueSet::new(8);
        let mut done = Vec::new();
        for (tag, be) in [(1, &a), (2, &b), (3, &a)] {
            let req = IoRequest {
                tag,
                op: IoOp::Read {
                    offset: 0,
                    len: 512,
                },
                buf: IoBuf::with_capacity(512),
            };
            set.submit(be, req, &mut done);
        }
        assert_eq!(set.len(), 2, "one queue per backend, not per request");
        set.commit();
        assert_eq!(set.reap(&mut done), 3);
        let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
        tags.sort_unstable();
        assert_eq!(tags, [1, 2, 3]);
        assert!(!set.collect(), "both backends are still held");
        drop(b);
        assert!(set.collect());
        assert_eq!(set.len(), 1);
    }
}
