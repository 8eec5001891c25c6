//! Per-job, per-direction counters and HDR latency histograms (submission,
//! completion and total latency, in ns, as fio splits them). Each job owns
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

/// One latency series: exact min/max/mean/stddev, and (unless built with
/// [`Lat::summary_only`]) percentiles from an HDR histogram (3 significant
/// digits, 1 ns .. 1 h).
#[derive(Clone, Debug)]
pub struct Lat {
    pub n: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub sum_ns: u128,
    pub sumsq_ns: f64,
    pub hist: Option<Histogram<u64>>,
}

impl Default for Lat {
    fn default() -> Self {
        Lat {
            // ~200 KiB per histogram.
            hist: Some(
                Histogram::new_with_bounds(1, MAX_LAT_NS, 3)
                    .expect("static histogram bounds are valid"),
            ),
            ..Lat::summary_only()
        }
    }
}

impl Lat {
    /// No histogram (no percentiles): for submission latency, where fio
    /// reports none either and the I/O path saves a histogram update.
    pub fn summary_only() -> Lat {
        Lat {
            n: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            sum_ns: 0,
            sumsq_ns: 0.0,
            hist: None,
        }
    }

    #[inline]
    pub fn record(&mut self, ns: u64) {
        let l = ns.clamp(1, MAX_LAT_NS);
        self.n += 1;
        self.min_ns = self.min_ns.min(l);
        self.max_ns = self.max_ns.max(l);
        self.sum_ns += l as u128;
        self.sumsq_ns += (l as f64) * (l as f64);
        if let Some(h) = &mut self.hist {
            // Within bounds after the clamp, so this cannot fail.
            let _ = h.record(l);
        }
    }

    pub fn merge(&mut self, o: &Lat) {
        self.n += o.n;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        self.sum_ns += o.sum_ns;
        self.sumsq_ns += o.sumsq_ns;
        if let (Some(h), Some(oh)) = (&mut self.hist, &o.hist) {
            let _ = h.add(oh);
        }
    }

    pub fn mean_ns(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.n as f64
        }
    }

    /// Population standard deviation (as fio).
    pub fn stddev_ns(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        let m = self.mean_ns();
        (self.sumsq_ns / n - m * m).max(0.0).sqrt()
    }

    pub fn min(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Latency at percentile `p` (0..100); 0 without a histogram.
    pub fn percentile(&self, p: f64) -> u64 {
        match &self.hist {
            Some(h) if self.n > 0 => h.value_at_percentile(p),
            _ => 0,
        }
    }
}

/// One direction's counters and its three latencies, split as fio splits
/// them (§ "What is measured" in docs/perf-json.md):
/// `slat` = preparing the command until the engine's commit returned (the
/// `writev` that hands it to the socket, or `io_uring_enter`), `clat` = from
/// there to the poll that received its completion, `lat` = `slat + clat`.
#[derive(Clone, Debug)]
pub struct DirStats {
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub slat: Lat,
    pub clat: Lat,
    pub lat: Lat,
}

impl Default for DirStats {
    fn default() -> Self {
        DirStats {
            ios: 0,
            bytes: 0,
            errors: 0,
            slat: Lat::summary_only(),
            clat: Lat::default(),
            lat: Lat::default(),
        }
    }
}

impl DirStats {
    #[inline]
    pub fn record(&mut self, bytes: u32, slat_ns: u64, clat_ns: u64) {
        self.ios += 1;
        self.bytes += bytes as u64;
        self.slat.record(slat_ns);
        self.clat.record(clat_ns);
        self.lat.record(slat_ns + clat_ns);
    }

    pub fn merge(&mut self, o: &DirStats) {
        self.ios += o.ios;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.slat.merge(&o.slat);
        self.clat.merge(&o.clat);
        self.lat.merge(&o.lat);
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
            a.record(4096, 100, l * 1000);
        }
        let mut b = DirStats::default();
        b.record(4096, 300, 5_000_000);
        a.merge(&b);
        assert_eq!(a.ios, 1001);
        assert_eq!(a.bytes, 1001 * 4096);
        assert_eq!(a.clat.min(), 1000);
        assert_eq!(a.clat.max_ns, 5_000_000);
        let p50 = a.clat.percentile(50.0);
        assert!((499_000..=502_000).contains(&p50), "{p50}");
        assert!(a.clat.stddev_ns() > 0.0);
        assert_eq!((a.slat.min(), a.slat.max_ns), (100, 300));
        assert!(a.slat.hist.is_none() && a.slat.percentile(50.0) == 0);
        // lat = slat + clat, per I/O.
        assert_eq!((a.lat.min(), a.lat.max_ns), (1100, 5_000_300));
        let lp50 = a.lat.percentile(50.0);
        assert!((499_000..=502_200).contains(&lp50), "{lp50}");
        assert_eq!(a.lat.n, a.clat.n);
        assert_eq!(DirStats::default().clat.percentile(50.0), 0);
        a.record(1, 0, 0);
        assert_eq!(a.clat.min(), 1);
    }
}
