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

use std::os::fd::RawFd;
use std::sync::Arc;

struct Entry {
    backend: SharedBackend,
    queue: Box<dyn BackendQueue>,
}

/// The storage queues of one thread.
pub struct QueueSet {
    entries: Vec<Entry>,
    /// Depth each queue is opened with (they are shared, so this covers
    /// every connection of the thread; io_uring queues overflow beyond it).
    depth: u32,
}

impl QueueSet {
    pub fn new(depth: u32) -> QueueSet {
        QueueSet {
            entries: Vec::new(),
            depth,
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
        let pos = self
            .entries
            .iter()
            .position(|e| Arc::ptr_eq(&e.backend, backend));
        let pos = match pos {
            Some(p) => p,
            None => match backend.open_queue(self.depth) {
                Ok(queue) => {
                    self.entries.push(Entry {
                        backend: backend.clone(),
                        queue,
                    });
                    self.entries.len() - 1
                }
                Err(e) => {
                    tracing::error!("cannot open a backend queue: {e}");
                    failed.push(IoCompletion {
                        tag: req.tag,
                        buf: req.buf,
                        result: Err(e),
                    });
                    return;
                }
            },
        };
        self.entries[pos].queue.submit(req);
    }

    /// Hands what was submitted to the kernel (one call per queue with work).
    pub fn commit(&mut self) {
        for e in &mut self.entries {
            if let Err(err) = e.queue.commit() {
                tracing::warn!(kind = e.backend.kind(), "backend submit failed: {err}");
            }
        }
    }

    /// Appends every ready completion to `out`; returns how many. Queues
    /// with nothing in flight are skipped (an io_uring reap clears its
    /// eventfd, a system call).
    pub fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        self.entries
            .iter_mut()
            .filter(|e| e.queue.in_flight() > 0)
            .map(|e| e.queue.reap(out))
            .sum()
    }

    /// Requests submitted and not reaped, over all queues.
    pub fn in_flight(&self) -> usize {
        self.entries.iter().map(|e| e.queue.in_flight()).sum()
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
        let before = self.entries.len();
        self.entries
            .retain(|e| e.queue.in_flight() > 0 || Arc::strong_count(&e.backend) > 1);
        self.entries.len() != before
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
