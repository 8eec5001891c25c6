//! What else the transport event loop calls: the connection's state,
//! periodic work, and standalone storage for tests (receiving is in
//! `rx.rs`; output and the storage hand-off in `tx.rs`).

use crate::queue::{QueuePair, OUTPUT_HIGH_WATER};
use std::time::Instant;

impl QueuePair {
    /// Whether the transport should read more (false while closing or while
    /// the peer is not draining our output).
    pub fn wants_read(&self) -> bool {
        !self.is_closing() && self.out.len() < OUTPUT_HIGH_WATER
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

    /// The event loop's clock for this pass (latency samples).
    #[inline]
    pub fn set_now(&mut self, now: Instant) {
        self.core.set_now(now);
    }

    /// The host's fair-sharing weight (QoS `weight`, default 1).
    pub fn share_weight(&self) -> u32 {
        self.core.share_weight()
    }

    /// When commands waiting for QoS tokens may run (None: none waits, or
    /// the connection is closing and they never will).
    pub fn throttle_wake(&self) -> Option<Instant> {
        if self.is_closing() {
            return None;
        }
        self.core.throttle_wake()
    }

    /// Runs the commands whose QoS tokens have come; returns whether any did.
    pub fn resume_throttled(&mut self) -> bool {
        if self.is_closing() {
            return false;
        }
        let any = self.core.resume_throttled();
        if any {
            self.flush_completions();
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
