//! What the event loop calls besides receiving and sending (`rx.rs`,
//! `tx.rs`): whether to read, and closing. Storage and offload hand-off,
//! completions, ticks and QoS resumes are the shared [`farflash_core::Binding`]'s.

use crate::queue::QueuePair;

impl QueuePair {
    /// Whether the transport should read more (false while closing or while
    /// the peer is not draining our output).
    pub fn wants_read(&self) -> bool {
        self.b.transport().wants_read(self.b.nvme())
    }

    /// Stops reading; what is queued is still sent.
    pub fn close(&mut self) {
        self.b.with(|t, _| t.closing = true);
    }
}
