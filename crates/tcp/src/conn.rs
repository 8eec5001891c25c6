//! What the transport event loop calls: receive space, output, storage
//! hand-off, periodic work.

use crate::queue::{QueuePair, OUTPUT_HIGH_WATER};
use farflash_backend::{IoCompletion, IoRequest, SharedBackend};
use std::time::Instant;

impl QueuePair {
    /// Space to receive into; at least 16 KiB.
    pub fn rx_space(&mut self) -> &mut [u8] {
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        }
        if self.rx.len() - self.rx_end < 16 * 1024 {
            self.compact_rx();
            if self.rx.len() - self.rx_end < 16 * 1024 {
                let want = self.rx.len() * 2;
                self.rx.resize(want, 0);
            }
        }
        &mut self.rx[self.rx_end..]
    }

    pub(crate) fn compact_rx(&mut self) {
        if self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
    }

    /// `n` bytes were written into [`Self::rx_space`]: process every whole PDU.
    pub fn on_received(&mut self, n: usize) {
        self.rx_end = (self.rx_end + n).min(self.rx.len());
        self.process_rx();
    }

    /// Whether the transport should read more (false while closing or while
    /// the peer is not draining our output).
    pub fn wants_read(&self) -> bool {
        !self.is_closing() && self.out.len() < OUTPUT_HIGH_WATER
    }

    /// Bytes waiting to be sent.
    pub fn output_len(&self) -> usize {
        self.out.len()
    }

    /// How many `iovec`s the waiting output takes.
    pub fn output_segments(&self) -> usize {
        self.out.segments()
    }

    /// Fills `iov` with what is waiting to be sent (for one `writev`);
    /// returns how many slices were filled.
    pub fn output_slices<'a>(&'a self, iov: &mut [std::io::IoSlice<'a>]) -> usize {
        self.out.slices(iov)
    }

    /// `n` bytes of the output were sent.
    pub fn consume_output(&mut self, n: usize) {
        self.out.consume(n, self.core.pool());
        if !self.waiting.is_empty() {
            self.resume_waiting();
            self.flush_completions();
        }
        // Reading may have stopped at the high-water mark.
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
    }

    /// Everything waiting to be sent, as one buffer, consumed (tests, fuzzers).
    pub fn take_output(&mut self) -> Vec<u8> {
        let v = self.out.take_all(self.core.pool());
        if !self.waiting.is_empty() {
            self.resume_waiting();
            self.flush_completions();
        }
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
        v
    }

    /// True once the connection should be closed (after its output is sent).
    pub fn wants_close(&self) -> bool {
        self.is_closing()
    }

    /// True when closing and nothing more needs to go out or come back.
    pub fn finished(&self) -> bool {
        self.is_closing() && self.out.is_empty() && self.core.in_flight() == 0
    }

    /// Storage requests emitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.core.in_flight()
    }

    /// Whether storage requests wait to be taken.
    pub fn has_storage_requests(&self) -> bool {
        self.core.has_storage_requests()
    }

    /// Hands the emitted storage requests to `run` (see
    /// [`farflash_core::NvmeQueue::take_storage`]).
    pub fn take_storage(&mut self, run: impl FnMut(&SharedBackend, IoRequest)) {
        self.core.take_storage(run);
        // Requests for a namespace that vanished complete at once.
        self.flush_completions();
    }

    /// A storage request finished: its command completes into the output.
    pub fn on_storage_completion(&mut self, c: IoCompletion) {
        self.core.on_storage_completion(c);
        self.flush_completions();
    }

    /// Standalone use (tests, fuzzers, benchmarks): runs the storage
    /// requests on the queue's private queue set.
    pub fn commit(&mut self) {
        self.core.commit();
        self.flush_completions();
    }

    /// Standalone use: reaps the private queue set until nothing completes
    /// (completions may resume waiting commands, whose requests are
    /// committed in turn). Returns whether anything completed.
    pub fn poll_backends(&mut self) -> bool {
        let mut any = false;
        while self.core.in_flight() > 0 && self.core.poll_backends() {
            any = true;
            self.flush_completions();
            self.commit();
        }
        any
    }

    /// Periodic work: the command layer's (keep-alive, AERs, teardown).
    pub fn tick(&mut self, now: Instant) {
        if self.closing {
            return;
        }
        self.core.tick(now);
        self.flush_completions();
    }

    /// Stops reading; what is queued is still sent.
    pub fn close(&mut self) {
        self.closing = true;
    }
}
