//! Per-queue I/O counters. Each queue pair owns one `QueueStats` and is its
//! only writer (relaxed stores, no read-modify-write, no cache line written
//! by two cores); readers (SMART log, Prometheus scrape, shutdown summary)
//! sum them when asked.
//!
//! Counted per queue: reads and writes with their bytes per namespace
//! (NSIDs 1..=[`NS_SLOTS`] apart, higher ones together), commands in
//! flight, failed commands by status, and, while latency timing is on
//! (`Target::set_latency_timing`, the `--metrics` listener), read and write
//! latency histograms.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// NSIDs counted apart; commands to higher NSIDs are counted in slot 0
/// (reported as namespace "other").
pub const NS_SLOTS: usize = 32;

/// Latency histogram buckets: upper bounds of 2^k microseconds,
/// k = 0..LAT_BUCKETS-1 (1 µs .. ~1 s), plus +Inf.
pub const LAT_BUCKETS: usize = 21;

/// Upper bound of bucket `k` in seconds (Prometheus `le`).
pub fn lat_bound_secs(k: usize) -> f64 {
    (1u64 << k) as f64 * 1e-6
}

/// The bucket of a latency of `ns` nanoseconds (`LAT_BUCKETS` = +Inf).
#[inline]
pub fn lat_bucket(ns: u64) -> usize {
    // Smallest k with ns <= 1000 * 2^k.
    let us = ns.div_ceil(1000);
    if us <= 1 {
        return 0;
    }
    let k = (64 - (us - 1).leading_zeros()) as usize;
    k.min(LAT_BUCKETS)
}

/// The counter slot of NSID `nsid` when it has one of its own (1..=NS_SLOTS).
pub fn ns_slot(nsid: u32) -> Option<usize> {
    let i = nsid as usize;
    (1..=NS_SLOTS).contains(&i).then_some(i)
}

#[derive(Default, Debug)]
pub struct NsCounters {
    pub read_cmds: AtomicU64,
    pub write_cmds: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
}

/// A latency histogram written by one thread.
#[derive(Default, Debug)]
pub struct LatHist {
    /// Per bucket (not cumulative); the last is +Inf.
    pub buckets: [AtomicU64; LAT_BUCKETS + 1],
    pub sum_ns: AtomicU64,
}

#[derive(Debug)]
#[repr(align(64))]
pub struct QueueStats {
    /// The host NQN of the queue's controller.
    pub host: String,
    /// Slot i: NSID i (1..=NS_SLOTS); slot 0: any higher NSID.
    pub ns: [NsCounters; NS_SLOTS + 1],
    pub media_errors: AtomicU64,
    /// I/O commands holding a slot (gauge).
    pub outstanding: AtomicU64,
    /// Nanoseconds the queue had commands waiting for QoS tokens.
    pub throttled_ns: AtomicU64,
    /// [read, write].
    pub lat: [LatHist; 2],
    /// Failed commands by status (SCT << 8 | SC); errors are rare, so the
    /// lock is off the path of successful commands.
    pub errors: Mutex<BTreeMap<u16, u64>>,
}

/// A plain snapshot of counters.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Totals {
    pub read_cmds: u64,
    pub write_cmds: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub media_errors: u64,
}

/// Everything one host did on one subsystem (live queues plus closed ones).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTotals {
    /// Per NSID slot (see [`QueueStats::ns`]): read, write cmds, read, write bytes.
    pub ns: [[u64; 4]; NS_SLOTS + 1],
    pub media_errors: u64,
    pub outstanding: u64,
    /// Time the host's queues had commands waiting for QoS tokens (summed
    /// over queues), in ns.
    pub throttled_ns: u64,
    /// [read, write] × buckets (not cumulative), and the sums in ns.
    pub lat: [[u64; LAT_BUCKETS + 1]; 2],
    pub lat_sum_ns: [u64; 2],
    pub errors: BTreeMap<u16, u64>,
}

impl Default for HostTotals {
    fn default() -> Self {
        HostTotals {
            ns: [[0; 4]; NS_SLOTS + 1],
            media_errors: 0,
            outstanding: 0,
            throttled_ns: 0,
            lat: [[0; LAT_BUCKETS + 1]; 2],
            lat_sum_ns: [0; 2],
            errors: BTreeMap::new(),
        }
    }
}

impl HostTotals {
    fn add_queue(&mut self, q: &QueueStats, live: bool) {
        for (t, c) in self.ns.iter_mut().zip(&q.ns) {
            t[0] += c.read_cmds.load(Relaxed);
            t[1] += c.write_cmds.load(Relaxed);
            t[2] += c.read_bytes.load(Relaxed);
            t[3] += c.write_bytes.load(Relaxed);
        }
        self.media_errors += q.media_errors.load(Relaxed);
        self.throttled_ns += q.throttled_ns.load(Relaxed);
        if live {
            self.outstanding += q.outstanding.load(Relaxed);
        }
        for d in 0..2 {
            for (t, b) in self.lat[d].iter_mut().zip(&q.lat[d].buckets) {
                *t += b.load(Relaxed);
            }
            self.lat_sum_ns[d] += q.lat[d].sum_ns.load(Relaxed);
        }
        if let Ok(e) = q.errors.lock() {
            for (k, v) in e.iter() {
                *self.errors.entry(*k).or_default() += v;
            }
        }
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            media_errors: self.media_errors,
            ..Totals::default()
        };
        for n in &self.ns {
            t.read_cmds += n[0];
            t.write_cmds += n[1];
            t.read_bytes += n[2];
            t.write_bytes += n[3];
        }
        t
    }
}

impl QueueStats {
    pub fn new(host: &str) -> QueueStats {
        QueueStats {
            host: host.to_owned(),
            ns: std::array::from_fn(|_| NsCounters::default()),
            media_errors: AtomicU64::new(0),
            outstanding: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            lat: Default::default(),
            errors: Mutex::new(BTreeMap::new()),
        }
    }
    /// Single-writer increment: a load and a store, no read-modify-write bus lock.
    #[inline]
    pub fn bump(c: &AtomicU64, by: u64) {
        c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
    }
    /// Single-writer decrement (saturating).
    #[inline]
    pub fn drop_one(c: &AtomicU64) {
        c.store(c.load(Relaxed).saturating_sub(1), Relaxed);
    }
    /// The counters of NSID `nsid`.
    #[inline]
    pub fn ns(&self, nsid: u32) -> &NsCounters {
        let i = nsid as usize;
        &self.ns[if i <= NS_SLOTS { i } else { 0 }]
    }
    /// One latency sample.
    #[inline]
    pub fn latency(&self, write: bool, ns: u64) {
        let h = &self.lat[write as usize];
        Self::bump(&h.buckets[lat_bucket(ns)], 1);
        Self::bump(&h.sum_ns, ns);
    }
    /// A command failed with `status` (SCT << 8 | SC).
    pub fn error(&self, status: u16) {
        if let Ok(mut e) = self.errors.lock() {
            *e.entry(status).or_default() += 1;
        }
    }
    pub fn snapshot(&self) -> Totals {
        let mut h = HostTotals::default();
        h.add_queue(self, true);
        h.totals()
    }
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, o: Totals) {
        self.read_cmds += o.read_cmds;
        self.write_cmds += o.write_cmds;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.media_errors += o.media_errors;
    }
}

/// Host NQNs whose closed queues are remembered apart; beyond that (hosts
/// inventing NQNs) what they did is kept under [`OTHER_HOSTS`], so memory
/// stays bounded.
pub const MAX_RETIRED_HOSTS: usize = 1024;
/// The host label of the counters of hosts beyond [`MAX_RETIRED_HOSTS`].
pub const OTHER_HOSTS: &str = "(other)";

/// The counters of a subsystem: live queues plus what closed queues left,
/// by host NQN.
#[derive(Default, Debug)]
pub struct StatsRegistry {
    inner: Mutex<Inner>,
}

#[derive(Default, Debug)]
struct Inner {
    live: Vec<Arc<QueueStats>>,
    retired: BTreeMap<String, HostTotals>,
}

impl StatsRegistry {
    /// Registers a new queue's counters (at Connect, not on the I/O path).
    pub fn register(&self, host: &str) -> Arc<QueueStats> {
        let s = Arc::new(QueueStats::new(host));
        if let Ok(mut g) = self.inner.lock() {
            g.live.push(s.clone());
        }
        s
    }
    /// Folds a closing queue's counters into the retired totals.
    pub fn retire(&self, s: &Arc<QueueStats>) {
        if let Ok(mut g) = self.inner.lock() {
            if let Some(i) = g.live.iter().position(|x| Arc::ptr_eq(x, s)) {
                let q = g.live.swap_remove(i);
                let key = if g.retired.len() < MAX_RETIRED_HOSTS || g.retired.contains_key(&q.host)
                {
                    q.host.clone()
                } else {
                    OTHER_HOSTS.to_owned()
                };
                g.retired.entry(key).or_default().add_queue(&q, false);
            }
        }
    }
    /// Everything counted so far, by host NQN.
    pub fn by_host(&self) -> BTreeMap<String, HostTotals> {
        match self.inner.lock() {
            Ok(g) => {
                let mut out = g.retired.clone();
                for q in &g.live {
                    out.entry(q.host.clone()).or_default().add_queue(q, true);
                }
                out
            }
            Err(_) => BTreeMap::new(),
        }
    }
    /// Queues (connections) counted now.
    pub fn live_queues(&self) -> usize {
        self.inner.lock().map(|g| g.live.len()).unwrap_or(0)
    }
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for h in self.by_host().values() {
            t += h.totals();
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_survive_retirement() {
        let r = StatsRegistry::default();
        let a = r.register("h1");
        let b = r.register("h2");
        QueueStats::bump(&a.ns(1).read_cmds, 2);
        QueueStats::bump(&b.ns(40).write_bytes, 4096);
        QueueStats::bump(&a.outstanding, 3);
        a.error(0x0281);
        a.latency(false, 1500);
        r.retire(&a);
        let t = r.totals();
        assert_eq!((t.read_cmds, t.write_bytes), (2, 4096));
        r.retire(&a); // twice is harmless
        assert_eq!(r.totals(), t);
        let h = r.by_host();
        assert_eq!(h["h1"].ns[1][0], 2);
        assert_eq!(
            h["h1"].outstanding, 0,
            "a closed queue has nothing in flight"
        );
        assert_eq!(h["h1"].errors.get(&0x0281), Some(&1));
        assert_eq!(h["h1"].lat[0][lat_bucket(1500)], 1);
        assert_eq!(h["h2"].ns[0][3], 4096, "NSID 40 is counted in slot 0");
    }

    #[test]
    fn hosts_inventing_nqns_cannot_grow_the_totals_without_bound() {
        let r = StatsRegistry::default();
        for i in 0..MAX_RETIRED_HOSTS + 50 {
            let q = r.register(&format!("nqn.h{i}"));
            QueueStats::bump(&q.ns(1).read_cmds, 1);
            r.retire(&q);
        }
        let h = r.by_host();
        assert_eq!(h.len(), MAX_RETIRED_HOSTS + 1);
        assert_eq!(h[OTHER_HOSTS].ns[1][0], 50);
        assert_eq!(r.totals().read_cmds, MAX_RETIRED_HOSTS as u64 + 50);
    }

    #[test]
    fn latency_buckets() {
        assert_eq!(lat_bucket(0), 0);
        assert_eq!(lat_bucket(1000), 0);
        assert_eq!(lat_bucket(1001), 1);
        assert_eq!(lat_bucket(2000), 1);
        assert_eq!(lat_bucket(2001), 2);
        assert_eq!(lat_bucket(1_000_000), 10); // 1 ms <= 1024 µs
        assert_eq!(lat_bucket(u64::MAX), LAT_BUCKETS);
        for ns in [1u64, 999, 5000, 77_777, 3_000_000] {
            let k = lat_bucket(ns);
            assert!(ns as f64 * 1e-9 <= lat_bound_secs(k) + 1e-12);
            if k > 0 {
                assert!(ns as f64 * 1e-9 > lat_bound_secs(k - 1));
            }
        }
    }
}

/// Things a host sent that the specifications tell it not to, or leave to
/// the controller, and that the target accepts as Linux nvmet and SPDK do
/// (docs/interop.md, "Receive-side checks"). Counted so that an operator can
/// tell an odd host from a broken one; `farflash_tolerated_total{what}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Oddity {
    /// A CapsuleCmd without data whose PDO is not 0 (TCP §3.6.2.6).
    PdoWithoutData,
    /// HDGSTF or DDGSTF set although that digest is off (TCP §3.3.1.1).
    DigestFlag,
    /// LAST_PDU not set on exactly the H2CData that ends the R2T (TCP §3.3.2.2).
    DataLast,
    /// An I/O queue Connect with another HOSTID than the admin queue's.
    IoHostid,
    /// An I/O queue Connect with a QID beyond the Number of Queues granted.
    QidBeyondGranted,
}

impl Oddity {
    pub const ALL: [Oddity; 5] = [
        Oddity::PdoWithoutData,
        Oddity::DigestFlag,
        Oddity::DataLast,
        Oddity::IoHostid,
        Oddity::QidBeyondGranted,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Oddity::PdoWithoutData => "pdo_without_data",
            Oddity::DigestFlag => "digest_flag_without_digest",
            Oddity::DataLast => "h2c_last_pdu_flag",
            Oddity::IoHostid => "io_connect_other_hostid",
            Oddity::QidBeyondGranted => "io_connect_qid_beyond_granted",
        }
    }
}

/// One counter per [`Oddity`].
#[derive(Debug, Default)]
pub struct Tolerated([AtomicU64; 5]);

impl Tolerated {
    pub fn bump(&self, o: Oddity) {
        self.0[o as usize].fetch_add(1, Relaxed);
    }

    pub fn get(&self, o: Oddity) -> u64 {
        self.0[o as usize].load(Relaxed)
    }
}

/// One event loop's sleeps (a target worker's): how often and how long it
/// slept, and how many of its timed sleeps (the default polling's bets,
/// `farflash-nap`) an arrival cut short. A loop that sleeps at full load
/// shows here (`stats`, `farflash_worker_*` metrics).
#[derive(Debug, Default)]
pub struct LoopCounters {
    /// Sleeps in `epoll_wait` on a bet's timer.
    timed_sleeps: AtomicU64,
    /// Sleeps in `epoll_wait` until an event or the next tick (idle).
    idle_sleeps: AtomicU64,
    /// Nanoseconds spent in both.
    slept_ns: AtomicU64,
    /// Timed sleeps an arrival ended before the timer.
    missed: AtomicU64,
}

/// A snapshot of [`LoopCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopTotals {
    pub timed_sleeps: u64,
    pub idle_sleeps: u64,
    pub slept_ns: u64,
    pub missed: u64,
}

impl LoopCounters {
    /// A sleep of `ns` nanoseconds: `timed` on a bet (then `missed` if an
    /// arrival ended it), else idle.
    pub fn slept(&self, timed: bool, missed: bool, ns: u64) {
        let n = if timed {
            &self.timed_sleeps
        } else {
            &self.idle_sleeps
        };
        n.fetch_add(1, Relaxed);
        self.slept_ns.fetch_add(ns, Relaxed);
        if missed {
            self.missed.fetch_add(1, Relaxed);
        }
    }

    pub fn totals(&self) -> LoopTotals {
        LoopTotals {
            timed_sleeps: self.timed_sleeps.load(Relaxed),
            idle_sleeps: self.idle_sleeps.load(Relaxed),
            slept_ns: self.slept_ns.load(Relaxed),
            missed: self.missed.load(Relaxed),
        }
    }
}

/// The target's event loops' counters, in the order they registered.
#[derive(Debug, Default)]
pub struct Loops(Mutex<Vec<Arc<LoopCounters>>>);

impl Loops {
    /// A new loop's counters (its index in [`Loops::totals`] is its number).
    pub fn register(&self) -> Arc<LoopCounters> {
        let c = Arc::new(LoopCounters::default());
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c.clone());
        c
    }

    /// Every loop's totals, by registration order.
    pub fn totals(&self) -> Vec<LoopTotals> {
        let l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.iter().map(|c| c.totals()).collect()
    }
}
