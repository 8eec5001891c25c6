//! The blocking file engine off the event loop: when io_uring cannot be set
//! up, a queue's `pread`/`pwrite`/`fdatasync`/`fallocate` calls run on one
//! helper thread of its own, and completions come back through an eventfd,
//! so that a slow sync never blocks the thread that owns the queue.

use super::sys;
use crate::sync_queue::{run_sync, SyncEngine};
use crate::{BackendQueue, IoCompletion, IoRequest};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A [`BackendQueue`] whose requests run on a helper thread.
pub(crate) struct PoolQueue {
    requests: Option<Sender<IoRequest>>,
    done: Receiver<IoCompletion>,
    eventfd: Arc<OwnedFd>,
    in_flight: usize,
    /// Requests failed without reaching the thread.
    failed: Vec<IoCompletion>,
    worker: Option<JoinHandle<()>>,
}

impl PoolQueue {
    pub(crate) fn new<E: SyncEngine + Send + 'static>(engine: E) -> io::Result<PoolQueue> {
        let eventfd = Arc::new(sys::eventfd()?);
        let (req_tx, req_rx) = channel::<IoRequest>();
        let (done_tx, done_rx) = channel::<IoCompletion>();
        let fd = eventfd.clone();
        let worker = std::thread::Builder::new()
            .name("farflash-file-io".into())
            .spawn(move || {
                for req in req_rx {
                    if done_tx.send(run_sync(&engine, req)).is_err() {
                        break;
                    }
                    sys::eventfd_signal(fd.as_raw_fd());
                }
            })?;
        Ok(PoolQueue {
            requests: Some(req_tx),
            done: done_rx,
            eventfd,
            in_flight: 0,
            failed: Vec::new(),
            worker: Some(worker),
        })
    }
}

impl BackendQueue for PoolQueue {
    fn submit(&mut self, req: IoRequest) {
        self.in_flight += 1;
        if let Some(Err(e)) = self.requests.as_ref().map(|t| t.send(req)) {
            // The helper thread is gone (it panicked): the request still
            // completes, with an error.
            let IoRequest { tag, buf, .. } = e.0;
            tracing::error!("file I/O thread gone; failing request {tag}");
            self.failed.push(IoCompletion {
                tag,
                buf,
                result: Err(sys::eio()),
            });
            sys::eventfd_signal(self.eventfd.as_raw_fd());
        }
    }

    fn commit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        sys::eventfd_clear(self.eventfd.as_raw_fd());
        let mut n = self.failed.len();
        out.append(&mut self.failed);
        while let Ok(c) = self.done.try_recv() {
            out.push(c);
            n += 1;
        }
        self.in_flight -= n;
        n
    }

    fn notify_fd(&self) -> Option<RawFd> {
        Some(self.eventfd.as_raw_fd())
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for PoolQueue {
    /// Lets the helper thread finish what was submitted, then joins it.
    fn drop(&mut self) {
        self.requests = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
