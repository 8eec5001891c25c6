//! Time-driven work of a queue: connect timeout, keep-alive expiry (Base
//! §3.9), AER delivery, teardown after a reset or at shutdown. The time
//! comes from the caller: the command layer reads no clock.

use super::NvmeQueue;
use crate::controller::Controller;
use std::time::{Duration, Instant};

/// A peer that has not connected by then is dropped.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack added to KATO before a controller is declared dead.
const KEEP_ALIVE_GRACE: Duration = Duration::from_secs(1);

impl<C: Default> NvmeQueue<C> {
    /// Periodic work (the event loop calls it every 100 ms with the time).
    pub fn tick(&mut self, now: Instant) {
        self.life.clock = Some(now);
        self.life.timing = self.target.latency_timing();
        let started = *self.life.started.get_or_insert(now);
        // While our own work for the association (authentication's DH) is
        // out, the host waits for us: that is no keep-alive silence.
        let busy = self.ctrl.as_ref().is_some_and(|c| c.offloads_pending());
        if self.life.keep_alive_seen || self.life.last_keep_alive.is_none() || busy {
            self.life.keep_alive_seen = false;
            self.life.last_keep_alive = Some(now);
        }
        if self.life.closing {
            return;
        }
        let g = self.target.listeners_generation();
        if g != self.life.listeners_gen {
            self.life.listeners_gen = g;
            if !self.target.serves_on(self.via.trtype, &self.via.local) {
                tracing::info!(peer = %self.via.peer, local = %self.via.local, "listener removed; closing its connection");
                self.life.closing = true;
                return;
            }
        }
        let Some(ctrl) = self.ctrl.clone() else {
            if now.saturating_duration_since(started) > CONNECT_TIMEOUT {
                tracing::info!(peer = %self.via.peer, "not connected within {CONNECT_TIMEOUT:?}; closing");
                self.life.closing = true;
            }
            return;
        };
        if !ctrl.is_alive() || self.deleted() {
            // The association ended, or a controller reset deleted this I/O queue.
            self.life.closing = true;
            return;
        }
        if self.auth_expired(now, &ctrl) {
            return;
        }
        self.refresh_qos();
        // An idle queue lets removed namespaces (and their storage) go too.
        self.release_removed_namespaces(now);
        if self.qid == 0 {
            let kato = ctrl.lock().kato_ms;
            // Base §3.9: no Keep Alive within KATO ends the association. A
            // little grace absorbs a slow host's timer jitter.
            let limit = Duration::from_millis(kato as u64) + KEEP_ALIVE_GRACE;
            let since = now.saturating_duration_since(self.life.last_keep_alive.unwrap_or(now));
            if kato > 0 && since > limit {
                tracing::warn!(peer = %self.via.peer, cntlid = ctrl.cntlid, "keep-alive timeout ({kato} ms); tearing the controller down");
                self.target
                    .keep_alive_expiries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.target.remove_controller(&ctrl);
                self.life.closing = true;
                return;
            }
            self.deliver_events();
        }
        if self.target.is_shutting_down() && self.out.in_flight == 0 {
            self.life.closing = true;
        }
    }

    /// Base §8.13.5: a transaction whose next message does not come within
    /// `transaction_timeout(KATO)` ends (Linux `nvmet_auth_expired_work`);
    /// a queue that has not authenticated by then is closed (the whole
    /// association for the admin queue). True when the queue closes.
    fn auth_expired(&mut self, now: Instant, ctrl: &Controller) -> bool {
        let Some(auth) = self.life.auth.as_mut() else {
            return false;
        };
        if (!auth.in_progress() && auth.authenticated()) || auth.computing() {
            // While our own DH work is out, the host is waiting for us.
            self.life.auth_since = None;
            return false;
        }
        let since = *self.life.auth_since.get_or_insert(now);
        let limit = farflash_auth::transaction_timeout(ctrl.lock().kato_ms);
        if now.saturating_duration_since(since) <= limit {
            return false;
        }
        self.life.auth_since = None;
        if auth.in_progress() {
            self.target
                .auth_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(peer = %self.via.peer, cntlid = ctrl.cntlid, qid = self.qid, "authentication transaction timed out");
            auth.expire();
        }
        if auth.authenticated() {
            return false;
        }
        tracing::warn!(peer = %self.via.peer, cntlid = ctrl.cntlid, qid = self.qid, "not authenticated within {limit:?}; closing");
        if self.qid == 0 {
            ctrl.kill();
        }
        self.life.closing = true;
        true
    }
}
