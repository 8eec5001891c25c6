//! Storage requests (outputs) and their completions (one entry point).
//!
//! Commands emit requests tagged with their slot; whoever owns the storage
//! queues (the event loop: one queue per namespace per thread) takes them
//! with [`NvmeQueue::take_storage`] and hands every completion back through
//! [`NvmeQueue::on_storage_completion`]. `commit` / `poll_backends` do the
//! same on a private queue set, for tests, fuzzers and benchmarks.

use super::{tag_slot, CmdState, Event, NvmeQueue};
use crate::command::IoCmd;
use crate::stats::QueueStats;
use farflash_backend::{IoCompletion, IoRequest, QueueSet, SharedBackend};
use farflash_wire::Status;

impl<C: Default> NvmeQueue<C> {
    /// Emits a storage request for the command in `idx` on namespace `ns_idx`.
    pub(crate) fn submit(
        &mut self,
        idx: usize,
        ns_idx: usize,
        req: IoRequest,
    ) -> Result<(), Status> {
        if self.ns.get(ns_idx).is_none() {
            // The namespace went away after the command was parsed.
            self.pool.put(req.buf);
            return Err(Status::INVALID_NAMESPACE.dnr());
        }
        if !self.slots[idx].step(Event::Emit) {
            self.pool.put(req.buf);
            return Err(Status::INTERNAL_ERROR);
        }
        self.out.storage_out.push((ns_idx, req));
        self.out.in_flight += 1;
        Ok(())
    }

    /// Storage requests emitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.out.in_flight
    }

    /// Whether storage requests wait to be taken.
    pub fn has_storage_requests(&self) -> bool {
        !self.out.storage_out.is_empty()
    }

    /// Hands every emitted storage request to `run` with the backend it
    /// targets; a request whose namespace is gone completes at once, into
    /// `lost` (see [`NvmeQueue::take_storage`]).
    pub(crate) fn hand_out_storage(
        &mut self,
        mut run: impl FnMut(&SharedBackend, IoRequest),
        lost: &mut Vec<IoCompletion>,
    ) {
        let mut out = std::mem::take(&mut self.out.storage_out);
        for (key, req) in out.drain(..) {
            match self.ns.backend(key) {
                Some(be) => run(be, req),
                // Unreachable while tombstones outlive the emitted requests;
                // complete the request rather than lose it.
                None => lost.push(IoCompletion {
                    tag: req.tag,
                    buf: req.buf,
                    result: Err(std::io::Error::from_raw_os_error(libc::ENODEV)),
                }),
            }
        }
        self.out.storage_out = out;
        self.ns.collect();
    }

    /// A completion scratch vector (reused: no allocation per batch).
    pub(crate) fn scratch(&mut self) -> Vec<IoCompletion> {
        std::mem::take(&mut self.out.storage_scratch)
    }

    /// Gives the scratch vector back, empty.
    pub(crate) fn put_scratch(&mut self, v: Vec<IoCompletion>) {
        self.out.storage_scratch = v;
    }

    /// A storage request finished: its status and data are kept; returns
    /// the command's slot when it was the last one out (the dispatcher
    /// goes on with it, [`NvmeQueue::on_storage_completion`]).
    pub(crate) fn storage_done(&mut self, c: IoCompletion) -> Option<usize> {
        self.out.in_flight = self.out.in_flight.saturating_sub(1);
        let idx = tag_slot(c.tag);
        let Some(s) = self
            .slots
            .get_mut(idx)
            .filter(|s| matches!(s.state(), CmdState::Waiting { .. }))
        else {
            self.pool.put(c.buf);
            return None;
        };
        let compares = matches!(s.cmd.io(), Some(IoCmd::Nvm(c)) if c.compares);
        if let Some(e) = c
            .result
            .as_ref()
            .err()
            .filter(|e| farflash_backend::is_not_lock_owner(e))
        {
            // Shared storage owned by another target (an RBD image's lock,
            // docs/rbd.md): ANA Transition, no DNR, so the host retries on
            // another path (Base §8.20.3.5).
            tracing::debug!(cid = s.sqe.cid, opcode = s.sqe.opcode, "{e}");
            s.status = Status::ANA_TRANSITION;
        } else if let Some(e) =
            (c.result.as_ref().err()).filter(|e| e.raw_os_error() == Some(libc::ENOSPC))
        {
            // Thin storage out of space (a full volume pool): Capacity
            // Exceeded (Base 2.0 §4.2.3.1, Generic Command Status 81h),
            // neither a media error nor worth a warning per write.
            tracing::debug!(cid = s.sqe.cid, opcode = s.sqe.opcode, "{e}");
            s.status = Status::CAPACITY_EXCEEDED;
        } else if let Some(e) =
            (c.result.as_ref().err()).filter(|e| e.raw_os_error() == Some(libc::EILSEQ) && compares)
        {
            // Storage's own compare-and-write miscompared (for a command
            // whose parser said so, `NvmCmd::compares`: a fused pair
            // offloaded by nvm/fused.rs): Compare Failure (NVM Command Set
            // §3.2.1, Media and Data Integrity Errors 85h), not a media error.
            tracing::debug!(cid = s.sqe.cid, opcode = s.sqe.opcode, "{e}");
            s.status = Status::COMPARE_FAILURE;
        } else if let Err(e) = &c.result {
            let write = s.cmd.io().is_some_and(|io| io.writes());
            tracing::warn!(
                cid = s.sqe.cid,
                opcode = s.sqe.opcode,
                "storage I/O failed: {e}"
            );
            s.status = match e.raw_os_error() {
                Some(libc::EIO) if write => Status::WRITE_FAULT,
                Some(libc::EIO) => Status::UNRECOVERED_READ_ERROR,
                _ => Status::INTERNAL_ERROR,
            };
            if let Some(st) = &self.stats {
                QueueStats::bump(&st.media_errors, 1);
            }
        }
        // Keep the buffer that carries a read's data; recycle the others.
        if s.reply && s.buf.is_none() {
            s.buf = Some(c.buf);
        } else {
            self.pool.put(c.buf);
        }
        let last =
            self.slots[idx].step(Event::Reap) && self.slots[idx].state() == CmdState::Running;
        last.then_some(idx)
    }

    /// Counts a finished Read or Write in the queue's statistics (SMART log).
    pub(crate) fn account(&self, idx: usize) {
        let s = &self.slots[idx];
        if !s.status.is_success() {
            return;
        }
        let (Some(st), Some((write, len))) = (&self.stats, s.cmd.io().and_then(|c| c.counted()))
        else {
            return;
        };
        let ns = st.ns(s.sqe.nsid);
        if write {
            QueueStats::bump(&ns.write_cmds, 1);
            QueueStats::bump(&ns.write_bytes, len as u64);
        } else {
            QueueStats::bump(&ns.read_cmds, 1);
            QueueStats::bump(&ns.read_bytes, len as u64);
        }
        if let (Some(t0), Some(now)) = (s.t0, self.life.now) {
            st.latency(write, now.saturating_duration_since(t0).as_nanos() as u64);
        }
    }
}

impl<C: Default> NvmeQueue<C> {
    /// Standalone use: the private queue set (made on first use).
    pub(crate) fn own_storage(&mut self) -> Box<QueueSet> {
        self.out
            .own_storage
            .take()
            .unwrap_or_else(|| Box::new(QueueSet::new(1024)))
    }

    /// Standalone use: puts the private queue set back.
    pub(crate) fn put_own_storage(&mut self, set: Box<QueueSet>) {
        self.out.own_storage = Some(set);
    }

    /// Standalone use: whether a private queue set was made.
    pub(crate) fn has_own_storage(&self) -> bool {
        self.out.own_storage.is_some()
    }
}
