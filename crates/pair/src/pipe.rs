//! One direction of a connection: bytes in flight, each write delivered
//! whole and in order (TCP reorders nothing and loses nothing short of
//! the connection), after a latency, or not at all while held.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct Pipe {
    /// Writes not yet delivered, with the time each arrives.
    queue: VecDeque<(Instant, Vec<u8>)>,
    /// A write's head start: what was written at `t` arrives at `t + latency`.
    latency: Duration,
    /// Nothing is delivered while held (a stalled path, a peer not reading).
    held: bool,
}

impl Pipe {
    pub(crate) fn write(&mut self, now: Instant, bytes: Vec<u8>) {
        if !bytes.is_empty() {
            self.queue.push_back((now + self.latency, bytes));
        }
    }

    pub(crate) fn set_latency(&mut self, d: Duration) {
        self.latency = d;
    }

    pub(crate) fn hold(&mut self, on: bool) {
        self.held = on;
    }

    /// The next write that has arrived by `now`, if any.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        match self.queue.front() {
            Some((at, _)) if !self.held && *at <= now => self.queue.pop_front().map(|(_, b)| b),
            _ => None,
        }
    }

    /// Puts back what the reader could not take yet (its receive space was full).
    pub(crate) fn unread(&mut self, now: Instant, rest: Vec<u8>) {
        if !rest.is_empty() {
            self.queue.push_front((now, rest));
        }
    }

    /// When the next write arrives (None while held or empty).
    pub(crate) fn next_arrival(&self) -> Option<Instant> {
        if self.held {
            return None;
        }
        self.queue.front().map(|(at, _)| *at)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops what is in flight (the connection is gone).
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_in_order_after_the_latency_and_not_while_held() {
        let t0 = Instant::now();
        let mut p = Pipe::default();
        p.set_latency(Duration::from_millis(5));
        p.write(t0, vec![1]);
        p.write(t0 + Duration::from_millis(1), vec![2, 3]);
        assert_eq!(p.pop_due(t0 + Duration::from_millis(4)), None);
        assert_eq!(p.next_arrival(), Some(t0 + Duration::from_millis(5)));
        p.hold(true);
        assert_eq!(p.pop_due(t0 + Duration::from_secs(1)), None);
        assert_eq!(p.next_arrival(), None);
        p.hold(false);
        let t = t0 + Duration::from_millis(6);
        assert_eq!(p.pop_due(t), Some(vec![1]));
        assert_eq!(p.pop_due(t), Some(vec![2, 3]));
        assert!(p.is_empty());
    }
}
