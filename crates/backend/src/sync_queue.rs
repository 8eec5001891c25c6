//! A queue for engines that complete every request inside `submit`.
//!
//! Used by the RAM and null backends, and by the file backend when io_uring
//! is not available. Completions wait in a `Vec` until reaped; there is no
//! notification fd because nothing is ever pending in the background.

use crate::check::Geometry;
use crate::{BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest};
use std::io;
use std::os::fd::RawFd;

/// Executes one validated request synchronously.
pub(crate) trait SyncEngine {
    /// The geometry requests are validated against before `execute`.
    fn geometry(&self) -> Geometry;
    /// Performs `op` on `buf` (already validated). For reads, `buf.len()`
    /// has been set to the read length.
    fn execute(&self, op: IoOp, buf: &mut IoBuf) -> io::Result<()>;
}

/// Validates and executes one request on `engine`.
pub(crate) fn run_sync<E: SyncEngine>(engine: &E, req: IoRequest) -> IoCompletion {
    let IoRequest { tag, op, mut buf } = req;
    let result = engine.geometry().validate(&op, &buf).and_then(|()| {
        if let IoOp::Read { len, .. } = op {
            buf.set_len(len as usize);
        }
        engine.execute(op, &mut buf)
    });
    IoCompletion { tag, buf, result }
}

/// A [`BackendQueue`] over a [`SyncEngine`].
pub(crate) struct SyncQueue<E> {
    engine: E,
    done: Vec<IoCompletion>,
}

impl<E: SyncEngine> SyncQueue<E> {
    pub(crate) fn new(engine: E, depth: u32) -> Self {
        SyncQueue {
            engine,
            done: Vec::with_capacity(depth.min(1024) as usize),
        }
    }
}

impl<E: SyncEngine> BackendQueue for SyncQueue<E> {
    fn submit(&mut self, req: IoRequest) {
        let c = run_sync(&self.engine, req);
        self.done.push(c);
    }

    fn commit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let n = self.done.len();
        out.append(&mut self.done);
        n
    }

    fn notify_fd(&self) -> Option<RawFd> {
        None
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }
}
