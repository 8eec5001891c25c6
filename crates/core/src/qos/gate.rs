//! A queue's side of QoS: the limiters that govern it (its host's, and its
//! namespaces'), its reserves of their tokens, and its FIFO of commands
//! that wait for tokens. One per I/O queue of a subsystem with limits;
//! owned by the queue's thread, so admitting a command with tokens in
//! reserve touches nothing shared.

use super::{Limiter, QosTable};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Gate ids, for the limiters' lines of waiting queues.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a command spends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Read,
    Write,
    /// Flush, Dataset Management: not limited, but queued behind waiting
    /// commands (none overtakes an earlier one of its queue).
    Other,
}

struct Held {
    lim: Arc<Limiter>,
    /// The gate's id.
    id: u64,
    reserve: [f64; 6],
}

impl Held {
    fn new(lim: &Arc<Limiter>, id: u64) -> Held {
        Held {
            lim: lim.clone(),
            id,
            reserve: [0.0; 6],
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.lim.forget(self.id);
    }
}

pub(crate) struct Gate {
    id: u64,
    /// The subsystem's QoS generation this was built from.
    pub gen: u64,
    host: Option<Held>,
    /// (NSID, limiter) for the limited namespaces.
    ns: Vec<(u32, Held)>,
    /// Slots of commands waiting for tokens, oldest first.
    pub parked: VecDeque<u16>,
    /// When the oldest waiting command may find tokens.
    pub wake: Option<Instant>,
    /// Since when commands have been waiting (for the throttled-time counter).
    since: Option<Instant>,
}

/// Tokens a command needs from each bucket (rw, r, w I/Os; rw, r, w bytes).
fn need(class: Class, bytes: u64) -> [f64; 6] {
    let b = bytes as f64;
    match class {
        Class::Read => [1.0, 1.0, 0.0, b, b, 0.0],
        Class::Write => [1.0, 0.0, 1.0, b, 0.0, b],
        Class::Other => [0.0; 6],
    }
}

impl Gate {
    /// The gate of a queue of `host`, or None when nothing limits it.
    pub fn new(table: &QosTable, host: &str, gen: u64) -> Option<Gate> {
        let host_lim = table.for_host(host);
        if host_lim.is_none() && table.ns.is_empty() {
            return None;
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Some(Gate {
            id,
            gen,
            host: host_lim.map(|l| Held::new(l, id)),
            ns: table
                .ns
                .iter()
                .map(|(n, l)| (*n, Held::new(l, id)))
                .collect(),
            parked: VecDeque::new(),
            wake: None,
            since: None,
        })
    }

    /// Adopts a changed table, keeping what waits (its tokens come from
    /// the new limits).
    pub fn refresh(&mut self, table: &QosTable, host: &str, gen: u64) {
        let id = self.id;
        self.gen = gen;
        self.host = table.for_host(host).map(|l| Held::new(l, id));
        self.ns = table
            .ns
            .iter()
            .map(|(n, l)| (*n, Held::new(l, id)))
            .collect();
        self.wake = None;
    }

    /// Nothing limits the queue any more and nothing waits: the gate can go.
    pub fn idle_unlimited(&self) -> bool {
        self.host.is_none() && self.ns.is_empty() && self.parked.is_empty()
    }

    /// Whether a command may run now (the caller checked that nothing
    /// waits before it): every limit has its tokens, which are then spent.
    /// False: it must wait until `self.wake`; no limit's tokens are spent.
    pub fn admit(&mut self, now: Instant, nsid: u32, class: Class, bytes: u64) -> bool {
        if class == Class::Other {
            return true;
        }
        let need = need(class, bytes);
        let mut wait: Option<Instant> = None;
        let ns = self.ns.iter_mut().find(|(n, _)| *n == nsid).map(|(_, h)| h);
        for h in self.host.iter_mut().chain(ns) {
            let short = h.reserve.iter().zip(need).any(|(r, n)| *r < n);
            if short {
                if let Err(at) = h.lim.fill(h.id, now, &need, &mut h.reserve) {
                    wait = Some(wait.map_or(at, |w: Instant| w.max(at)));
                }
            }
        }
        if let Some(at) = wait {
            self.wake = Some(at);
            return false;
        }
        let ns = self.ns.iter_mut().find(|(n, _)| *n == nsid).map(|(_, h)| h);
        for h in self.host.iter_mut().chain(ns) {
            for (r, n) in h.reserve.iter_mut().zip(need) {
                *r -= n;
            }
        }
        true
    }

    /// `slot` waits (after those already waiting).
    pub fn park(&mut self, slot: u16, now: Instant) {
        if self.parked.is_empty() {
            self.since = Some(now);
        }
        self.parked.push_back(slot);
    }

    /// The oldest waiting command left the queue; returns the nanoseconds
    /// spent throttled since last counted.
    pub fn unparked(&mut self, now: Instant) -> u64 {
        self.parked.pop_front();
        let t = self.throttled_ns(now);
        if self.parked.is_empty() {
            self.wake = None;
            self.since = None;
        }
        t
    }

    /// Nanoseconds spent with commands waiting since last counted.
    pub fn throttled_ns(&mut self, now: Instant) -> u64 {
        match self.since.as_mut() {
            Some(s) => {
                let t = now.saturating_duration_since(*s).as_nanos() as u64;
                *s = now;
                t
            }
            None => 0,
        }
    }

    /// Whether a command may be retried at `now`.
    pub fn due(&self, now: Instant) -> bool {
        !self.parked.is_empty() && self.wake.is_none_or(|w| now >= w)
    }
}
