//! Storage requests (outputs) and their completions (one entry point).

use super::*;

/// Tags carry the slot index in their low 32 bits; the event loop may use
/// the high 32 bits (its connection index) and must hand them back cleared
/// or not: only the low half is read here.
const SLOT_MASK: u64 = 0xFFFF_FFFF;

impl QueuePair {
    /// Emits a storage request for the command in `idx` on namespace `ns_idx`.
    pub(crate) fn submit(
        &mut self,
        idx: usize,
        ns_idx: usize,
        req: IoRequest,
    ) -> Result<(), Status> {
        if self.ns.get(ns_idx).is_none() {
            // The namespace went away after the command was classified.
            self.pool.put(req.buf);
            return Err(Status::INVALID_NAMESPACE.dnr());
        }
        self.storage_out.push((ns_idx, req));
        self.slots[idx].pending += 1;
        self.in_flight += 1;
        Ok(())
    }

    /// Whether storage requests wait to be taken.
    pub fn has_storage_requests(&self) -> bool {
        !self.storage_out.is_empty()
    }

    /// Hands every emitted storage request to `run` with the backend it
    /// targets. Each must come back, once, through
    /// [`QueuePair::on_storage_completion`] (failed or not).
    pub fn take_storage(&mut self, mut run: impl FnMut(&SharedBackend, IoRequest)) {
        if self.storage_out.is_empty() {
            return;
        }
        let mut out = std::mem::take(&mut self.storage_out);
        let mut lost = false;
        for (key, req) in out.drain(..) {
            match self.ns.backend(key) {
                Some(be) => run(be, req),
                None => {
                    // Unreachable while tombstones outlive the emitted
                    // requests; complete the request rather than lose it.
                    lost = true;
                    self.completions.push(IoCompletion {
                        tag: req.tag,
                        buf: req.buf,
                        result: Err(std::io::Error::from_raw_os_error(libc::ENODEV)),
                    });
                }
            }
        }
        self.storage_out = out;
        self.ns.collect();
        if lost {
            let mut comps = std::mem::take(&mut self.completions);
            for c in comps.drain(..) {
                self.on_storage_completion(c);
            }
            self.completions = comps;
        }
    }

    /// A storage request finished: the one entry point for completions.
    pub fn on_storage_completion(&mut self, mut c: IoCompletion) {
        c.tag &= SLOT_MASK;
        self.in_flight = self.in_flight.saturating_sub(1);
        self.on_backend_completion(c);
    }

    pub(super) fn on_backend_completion(&mut self, c: IoCompletion) {
        let idx = c.tag as usize;
        let Some(s) = self.slots.get_mut(idx) else {
            self.pool.put(c.buf);
            return;
        };
        if let Err(e) = &c.result {
            let write = matches!(
                s.sqe.opcode,
                farflash_wire::opcode::io::WRITE | farflash_wire::opcode::io::WRITE_ZEROES
            );
            tracing::warn!(
                cid = s.sqe.cid,
                opcode = s.sqe.opcode,
                "backend I/O failed: {e}"
            );
            s.status = match e.raw_os_error() {
                Some(libc::ENOSPC) => Status::CAPACITY_EXCEEDED,
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
        let s = &mut self.slots[idx];
        s.pending = s.pending.saturating_sub(1);
        if s.pending == 0 {
            if s.sqe.opcode == aop::FABRICS {
                // The Flushes of a controller shutdown (Property Set CC.SHN):
                // a failure was logged above; the shutdown still completes.
                fabrics::shutdown_complete(self);
                self.finish(idx, Status::SUCCESS, 0);
                return;
            }
            let st = s.status;
            io::account(self, idx);
            self.finish(idx, st, 0);
        }
    }
}
