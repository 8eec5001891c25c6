//! Backend requests and their completions.

use super::*;

impl QueuePair {
    /// Submits a backend request for the command in `idx` on namespace `ns_idx`.
    pub(crate) fn submit(
        &mut self,
        idx: usize,
        ns_idx: usize,
        req: IoRequest,
    ) -> Result<(), Status> {
        let depth = self.slots.len() as u32;
        match self.ns.queue(ns_idx, depth) {
            Ok(q) => {
                q.submit(req);
                self.slots[idx].pending += 1;
                self.in_flight += 1;
                Ok(())
            }
            Err(e) => {
                // ENODEV: the namespace went away after the command was classified.
                let st = if e.raw_os_error() == Some(libc::ENODEV) {
                    Status::INVALID_NAMESPACE.dnr()
                } else {
                    tracing::error!("cannot open backend queue: {e}");
                    Status::INTERNAL_ERROR
                };
                self.pool.put(req.buf);
                Err(st)
            }
        }
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
            let st = s.status;
            io::account(self, idx);
            self.finish(idx, st, 0);
        }
    }
}
