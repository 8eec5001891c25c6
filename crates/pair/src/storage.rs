//! The storage engine of a pair: the requests the target's queues emit are
//! held until their (simulated) completion time, then run on a queue set
//! (RAM completes inside `submit`) and handed back to the queue that
//! emitted them. A delay rule, set by the test, decides when each
//! completes: later requests may complete first.

use farflash_backend::{IoCompletion, IoOp, IoRequest, QueueSet, SharedBackend};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long the `n`-th request (counting from 0 over the pair's life)
/// takes; `op` is what it does.
pub type DelayRule = Box<dyn FnMut(u64, &IoOp) -> Duration>;

/// One storage request completed, as the log keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// The connection whose queue emitted it (its index in the pair).
    pub conn: usize,
    /// The queue's tag of it.
    pub tag: u64,
    /// Its number in the order requests were emitted (from 0).
    pub emitted: u64,
}

pub(crate) struct Storage {
    set: QueueSet,
    /// Requests not yet due: when, which connection, the backend, the
    /// request, its number in emission order.
    waiting: Vec<(Instant, usize, SharedBackend, IoRequest, u64)>,
    /// The queue set's tag of a request running → (connection, the
    /// queue's own tag, its number).
    running: HashMap<u64, (usize, u64, u64)>,
    serial: u64,
    /// The queue set's tags, unique over the pair's life.
    next_tag: u64,
    delay: DelayRule,
    /// Requests completed so far, in completion order.
    log: Vec<Done>,
}

impl Storage {
    pub(crate) fn new() -> Storage {
        Storage {
            set: QueueSet::new(256),
            waiting: Vec::new(),
            running: HashMap::new(),
            serial: 0,
            next_tag: 0,
            delay: Box::new(|_, _| Duration::ZERO),
            log: Vec::new(),
        }
    }

    pub(crate) fn set_delay(&mut self, rule: DelayRule) {
        self.delay = rule;
    }

    /// A request emitted by connection `conn` at `now`.
    pub(crate) fn emit(&mut self, now: Instant, conn: usize, be: &SharedBackend, req: IoRequest) {
        let d = (self.delay)(self.serial, &req.op);
        self.serial += 1;
        self.waiting
            .push((now + d, conn, be.clone(), req, self.serial - 1));
    }

    /// When the next request is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.0).min()
    }

    /// Runs the requests due by `now`, earliest first (ties in emission
    /// order), and returns their completions as (connection, completion).
    pub(crate) fn complete_due(&mut self, now: Instant) -> Vec<(usize, IoCompletion)> {
        let mut due: Vec<_> = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].0 <= now {
                due.push(self.waiting.remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|w| w.0);
        let mut out = Vec::new();
        for (_, conn, be, req, n) in due {
            let tag = self.serial_tag();
            self.running.insert(tag, (conn, req.tag, n));
            let mut failed = Vec::new();
            self.set.submit(&be, IoRequest { tag, ..req }, &mut failed);
            self.set.commit();
            let mut done = failed;
            self.set.reap(&mut done);
            for c in done {
                if let Some((conn, own, n)) = self.running.remove(&c.tag) {
                    self.log.push(Done {
                        conn,
                        tag: own,
                        emitted: n,
                    });
                    out.push((conn, IoCompletion { tag: own, ..c }));
                }
            }
        }
        out
    }

    fn serial_tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    /// Requests emitted and not yet completed.
    pub(crate) fn pending(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// The completions so far, in order.
    pub(crate) fn log(&self) -> &[Done] {
        &self.log
    }
}
