//! The per-queue data-buffer budget: commands whose buffers would exceed
//! `transport.max_queue_buffer` wait, in order, for earlier ones to finish.

use crate::queue::{Phase, QueuePair, Tcp};
use farflash_core::NvmeQueue;

impl Tcp {
    /// Whether a command needing `len` data-buffer bytes may start now. One
    /// command may always start, so a transfer larger than the budget still
    /// makes progress.
    pub(crate) fn has_budget(&self, len: u32) -> bool {
        let used = self.charged + self.out.held_bytes();
        used == 0
            || (self.waiting.is_empty()
                && used + len as usize <= self.target.transport.max_queue_buffer as usize)
    }

    pub(crate) fn charge(&mut self, idx: usize, len: u32) {
        self.cmds[idx].charged += len;
        self.charged += len as usize;
    }

    /// TCP §3.6.2.10: allocate the buffer and ask for the data with one R2T
    /// for the whole transfer.
    pub(crate) fn start_r2t(&mut self, q: &mut NvmeQueue, idx: usize) {
        let len = self.cmds[idx].len;
        self.charge(idx, len);
        q.data_buf(idx as u16);
        let c = &mut self.cmds[idx];
        c.phase = Phase::H2C { got: 0 };
        let cid = c.cid;
        self.send_r2t(cid, idx as u16, 0, len);
    }

    /// Starts waiting commands, oldest first, while the budget allows.
    pub(crate) fn resume_waiting(&mut self, q: &mut NvmeQueue) {
        while let Some(&i) = self.waiting.front() {
            let idx = i as usize;
            let len = self.cmds[idx].len;
            let used = self.charged + self.out.held_bytes();
            if used != 0 && used + len as usize > self.target.transport.max_queue_buffer as usize {
                break;
            }
            self.waiting.pop_front();
            match self.cmds[idx].phase {
                Phase::WaitBuf { r2t: true } => self.start_r2t(q, idx),
                Phase::WaitBuf { r2t: false } => {
                    self.cmds[idx].phase = Phase::Exec;
                    self.charge(idx, len);
                    q.execute(i);
                }
                _ => {}
            }
        }
    }
}

impl QueuePair {
    /// Data-buffer bytes this queue holds now (commands' buffers and unsent
    /// output): how much work it has pending. Fair sharing protects queues
    /// that hold little (a QD 1 tenant) from those that hold much.
    pub fn pending_bytes(&self) -> usize {
        let t = self.b.transport();
        t.charged + t.out.held_bytes()
    }
}
