//! The queue's side of QoS (`crate::qos`): commands over a limit wait here,
//! in order, and run when their tokens come; the event loop learns when to
//! come back from [`NvmeQueue::throttle_wake`] and calls
//! [`NvmeQueue::resume_throttled`].

use super::{CmdState, Event, NvmeQueue};
use crate::command::IoCmd;
use crate::qos::Gate;
use crate::stats::QueueStats;
use std::time::Instant;

impl<C: Default> NvmeQueue<C> {
    /// Builds or refreshes the gate from the subsystem's current limits
    /// (at Connect and at every tick; a change is seen within one tick).
    pub(crate) fn refresh_qos(&mut self) {
        if self.qid == 0 {
            return;
        }
        let Some(ctrl) = &self.ctrl else { return };
        let Some(sub) = ctrl.subsystem() else { return };
        let g = sub.qos_generation();
        let changed = g != self.qos.gen;
        if changed {
            self.qos.gen = g;
            self.qos.weight = sub.qos().weight(&ctrl.hostnqn);
        }
        if let Some(gate) = self.qos.gate.as_mut() {
            // Counted as it accrues, so a queue that is always throttled
            // shows it too.
            if let Some(now) = self.life.clock {
                let t = gate.throttled_ns(now);
                self.count_throttled(t);
            }
        }
        match &mut self.qos.gate {
            Some(gate) if gate.gen == g && gate.idle_unlimited() => self.qos.gate = None,
            Some(gate) if gate.gen == g => {}
            Some(gate) => {
                gate.refresh(&sub.qos(), &ctrl.hostnqn, g);
                if gate.idle_unlimited() {
                    self.qos.gate = None;
                }
            }
            None if changed => {
                self.qos.gate = Gate::new(&sub.qos(), &ctrl.hostnqn, g).map(Box::new)
            }
            None => {}
        }
    }

    /// Whether the I/O command in `idx` may run now; false: it was parked
    /// behind the queue's waiting commands or over a limit.
    pub(crate) fn qos_admit(&mut self, idx: usize, cmd: IoCmd) -> bool {
        let Some(gate) = self.qos.gate.as_mut() else {
            return true;
        };
        // No clock yet (standalone use without `set_now`): nothing to pace by.
        let Some(now) = self.life.now.or(self.life.clock) else {
            return true;
        };
        let (class, bytes) = cmd.qos_cost();
        let nsid = self.slots[idx].sqe.nsid;
        if gate.parked.is_empty() && gate.admit(now, nsid, class, bytes) {
            return true;
        }
        if self.slots[idx].step(Event::Throttle) {
            gate.park(idx as u16, now);
        }
        false
    }

    /// The fair-sharing weight of this queue's host (`[[subsystem.qos]]`
    /// `weight`, default 1): the event loop serves each connection about
    /// this many quanta per round.
    pub fn share_weight(&self) -> u32 {
        self.qos.weight
    }

    /// When the oldest throttled command may find its tokens (None: none
    /// waits). The event loop wakes then and calls
    /// [`NvmeQueue::resume_throttled`].
    pub fn throttle_wake(&self) -> Option<Instant> {
        if self.nvm.has_held() {
            // Commands wait for a fused pair's range (`crate::nvm`): look
            // again soon; the pair lives on another queue.
            // The event loop sets the time before it asks.
            let now = self.life.now.or(self.life.clock);
            return now.map(|t| t + crate::nvm_state::HELD_POLL);
        }
        let g = self.qos.gate.as_ref()?;
        if g.parked.is_empty() {
            return None;
        }
        // Parked with a time (`qos_admit`), so a clock is there.
        g.wake.or(self.life.now).or(self.life.clock)
    }

    /// The oldest throttled command whose tokens have come, admitted
    /// (`Running`: the dispatcher runs it, [`NvmeQueue::resume_throttled`]).
    pub(crate) fn admit_throttled(&mut self) -> Option<usize> {
        let now = self.life.now.or(self.life.clock)?;
        if !self.qos.gate.as_ref().is_some_and(|g| g.due(now)) {
            return None;
        }
        while let Some(gate) = self.qos.gate.as_mut() {
            let Some(&slot) = gate.parked.front() else {
                break;
            };
            let idx = slot as usize;
            let s = &self.slots[idx];
            let Some(cmd) = s.cmd.io().filter(|_| s.state() == CmdState::Throttled) else {
                // Not waiting here (a bug `step` would have logged): forget it.
                let t = gate.unparked(now);
                self.count_throttled(t);
                continue;
            };
            let (class, bytes) = cmd.qos_cost();
            if !gate.admit(now, s.sqe.nsid, class, bytes) {
                break;
            }
            let t = gate.unparked(now);
            self.count_throttled(t);
            if self.slots[idx].step(Event::Admit) {
                return Some(idx);
            }
        }
        None
    }

    fn count_throttled(&self, ns: u64) {
        if let (Some(st), true) = (&self.stats, ns > 0) {
            QueueStats::bump(&st.throttled_ns, ns);
        }
    }
}
