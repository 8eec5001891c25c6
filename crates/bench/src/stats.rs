//! Per-job, per-direction counters and an HDR latency histogram
//! (completion latency, submission to completion, in ns). Each job owns
//! its own; they are merged after the threads end, so the I/O path takes
//! no lock and touches no shared cache line.

use hdrhistogram::Histogram;

/// Latencies above this are clamped (the histogram's top).
pub const MAX_LAT_NS: u64 = 3_600_000_000_000;

/// The percentiles fio prints.
pub const PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

#[derive(Clone, Debug)]
pub struct DirStats {
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub sum_ns: u128,
    pub sumsq_ns: f64,
    pub hist: Histogram<u64>,
}

impl Default for DirStats {
    fn default() -> Self {
        DirStats {
            ios: 0,
            bytes: 0,
            errors: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            sum_ns: 0,
            sumsq_ns: 0.0,
            // 3 significant digits, 1 ns .. 1 h: ~200 KiB per histogram.
            hist: Histogram::new_with_bounds(1, MAX_LAT_NS, 3)
                .expect("static histogram bounds are valid"),
        }
    }
}

impl DirStats {
    #[inline]
    pub fn record(&mut self, bytes: u32, lat_ns: u64) {
        let l = lat_ns.clamp(1, MAX_LAT_NS);
        self.ios += 1;
        self.bytes += bytes as u64;
        self.min_ns = self.min_ns.min(l);
        self.max_ns = self.max_ns.max(l);
        self.sum_ns += l as u128;
        self.sumsq_ns += (l as f64) * (l as f64);
        // Within bounds after the clamp, so this cannot fail.
        let _ = self.hist.record(l);
    }

    pub fn merge(&mut self, o: &DirStats) {
        self.ios += o.ios;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        self.sum_ns += o.sum_ns;
        self.sumsq_ns += o.sumsq_ns;
        let _ = self.hist.add(&o.hist);
    }

    pub fn mean_ns(&self) -> f64 {
        if self.ios == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.ios as f64
        }
    }

    /// Population standard deviation of the latencies (as fio).
    pub fn stddev_ns(&self) -> f64 {
        if self.ios < 2 {
            return 0.0;
        }
        let n = self.ios as f64;
        let m = self.mean_ns();
        (self.sumsq_ns / n - m * m).max(0.0).sqrt()
    }

    pub fn min(&self) -> u64 {
        if self.ios == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Latency at percentile `p` (0..100).
    pub fn percentile(&self, p: f64) -> u64 {
        if self.ios == 0 {
            0
        } else {
            self.hist.value_at_percentile(p)
        }
    }
}

/// What one job measured.
#[derive(Clone, Debug, Default)]
pub struct JobStats {
    pub read: DirStats,
    pub write: DirStats,
    /// Measured interval (after ramp) in ns.
    pub runtime_ns: u64,
    pub cpu: crate::cpu::CpuUse,
    /// I/Os completed during the ramp (not in the stats above).
    pub ramp_ios: u64,
    pub ramp_bytes: u64,
    pub verify_errors: u64,
}

impl JobStats {
    pub fn merge(&mut self, o: &JobStats) {
        self.read.merge(&o.read);
        self.write.merge(&o.write);
        self.runtime_ns = self.runtime_ns.max(o.runtime_ns);
        self.ramp_ios += o.ramp_ios;
        self.ramp_bytes += o.ramp_bytes;
        self.verify_errors += o.verify_errors;
        self.cpu.user_s += o.cpu.user_s;
        self.cpu.system_s += o.cpu.system_s;
        self.cpu.ctx += o.cpu.ctx;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_merge_and_percentiles() {
        let mut a = DirStats::default();
        for l in 1..=1000u64 {
            a.record(4096, l * 1000);
        }
        let mut b = DirStats::default();
        b.record(4096, 5_000_000);
        a.merge(&b);
        assert_eq!(a.ios, 1001);
        assert_eq!(a.bytes, 1001 * 4096);
        assert_eq!(a.min(), 1000);
        assert_eq!(a.max_ns, 5_000_000);
        let p50 = a.percentile(50.0);
        assert!((499_000..=502_000).contains(&p50), "{p50}");
        assert!(a.stddev_ns() > 0.0);
        assert_eq!(DirStats::default().percentile(50.0), 0);
        a.record(1, 0);
        assert_eq!(a.min(), 1);
    }
}
