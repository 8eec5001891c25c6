//! What the transport event loop calls: receive space, output, backend
//! polling, periodic work.

use super::*;

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

    pub(super) fn compact_rx(&mut self) {
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
        !self.closing && self.out.len() < OUTPUT_HIGH_WATER
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
        self.out.consume(n, &mut self.pool);
        if !self.waiting.is_empty() {
            self.resume_waiting();
        }
        // Reading may have stopped at the high-water mark.
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
    }

    /// Everything waiting to be sent, as one buffer, consumed (tests, fuzzers).
    pub fn take_output(&mut self) -> Vec<u8> {
        let v = self.out.take_all(&mut self.pool);
        if !self.waiting.is_empty() {
            self.resume_waiting();
        }
        if self.rx_end > self.rx_start && self.wants_read() {
            self.process_rx();
        }
        v
    }

    /// True once the connection should be closed (after its output is sent).
    pub fn wants_close(&self) -> bool {
        self.closing
    }

    /// True when closing and nothing more needs to go out or come back.
    pub fn finished(&self) -> bool {
        self.closing && self.out.is_empty() && self.in_flight == 0
    }

    /// Storage requests emitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Standalone use (tests, fuzzers, benchmarks; the event loop uses its
    /// shared per-thread queues instead): runs the emitted storage requests
    /// on a private queue set and hands them to the kernel.
    pub fn commit(&mut self) {
        let mut set = self
            .own_storage
            .take()
            .unwrap_or_else(|| Box::new(QueueSet::new(1024)));
        let mut failed = std::mem::take(&mut self.completions);
        self.take_storage(|be, req| set.submit(be, req, &mut failed));
        set.commit();
        self.own_storage = Some(set);
        for c in failed.drain(..) {
            self.on_storage_completion(c);
        }
        self.completions = failed;
    }

    /// Standalone use: reaps the private queue set and turns completions
    /// into responses. Returns whether anything completed.
    pub fn poll_backends(&mut self) -> bool {
        let mut any = false;
        // Completing a command can start others (budget freed, waiting
        // commands resumed); synchronous backends finish those at once.
        while self.in_flight > 0 {
            let Some(mut set) = self.own_storage.take() else {
                break;
            };
            let mut comps = std::mem::take(&mut self.completions);
            set.reap(&mut comps);
            self.own_storage = Some(set);
            if comps.is_empty() {
                self.completions = comps;
                break;
            }
            any = true;
            for c in comps.drain(..) {
                self.on_storage_completion(c);
            }
            self.completions = comps;
            self.commit();
        }
        any
    }

    /// Periodic work: keep-alive expiry, AER delivery, teardown, timeouts.
    pub fn tick(&mut self, now: Instant) {
        self.clock = Some(now);
        let started = *self.started.get_or_insert(now);
        if self.keep_alive_seen || self.last_keep_alive.is_none() {
            self.keep_alive_seen = false;
            self.last_keep_alive = Some(now);
        }
        if self.closing {
            return;
        }
        let Some(ctrl) = self.ctrl.clone() else {
            if now.saturating_duration_since(started) > CONNECT_TIMEOUT {
                tracing::info!(peer = %self.peer, "no ICReq and Connect within {CONNECT_TIMEOUT:?}; closing");
                self.closing = true;
            }
            return;
        };
        if !ctrl.is_alive() || (self.qid != 0 && ctrl.epoch() != self.epoch) {
            // The association ended, or a controller reset deleted this I/O queue.
            self.closing = true;
            return;
        }
        if self.qid == 0 {
            let kato = ctrl.lock().kato_ms;
            // Base §3.9: no Keep Alive within KATO ends the association. A
            // little grace absorbs a slow host's timer jitter.
            let limit = Duration::from_millis(kato as u64) + KEEP_ALIVE_GRACE;
            let since = now.saturating_duration_since(self.last_keep_alive.unwrap_or(now));
            if kato > 0 && since > limit {
                tracing::warn!(peer = %self.peer, cntlid = ctrl.cntlid, "keep-alive timeout ({kato} ms); tearing the controller down");
                self.target.remove_controller(&ctrl);
                self.closing = true;
                return;
            }
            admin::deliver_events(self);
        }
        if self.target.is_shutting_down() && self.in_flight == 0 {
            self.closing = true;
        }
    }

    /// Stops reading; what is queued is still sent.
    pub fn close(&mut self) {
        self.closing = true;
    }
}
