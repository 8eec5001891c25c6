//! Reading `farflash perf --output-format=json` (schema: docs/perf-json.md).
//! The whole document is kept in the results; these are the figures the
//! plots and the summary use, taken from its `aggregate` job.

use crate::procfs::SysSplit;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The latency percentiles the study reports (keys of `lat_ns.percentile`).
pub const PERCENTILES: [(&str, &str); 4] = [
    ("p20", "20.000000"),
    ("p50", "50.000000"),
    ("p95", "95.000000"),
    ("p99", "99.000000"),
];

/// Total latency (fio's `lat`: submission to completion) of the measured direction, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub mean: f64,
    pub p20: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    /// The value of a percentile by its short name (`p20` .. `p99`).
    pub fn get(&self, name: &str) -> f64 {
        match name {
            "p20" => self.p20,
            "p50" => self.p50,
            "p95" => self.p95,
            "p99" => self.p99,
            "max" => self.max,
            _ => self.mean,
        }
    }
}

/// What one perf run measured (read and write summed for rates).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// I/Os per second.
    pub iops: f64,
    /// Bytes per second.
    pub bw_bytes: f64,
    /// MiB per second.
    pub bw_mib_s: f64,
    /// I/Os completed in the measured interval.
    pub total_ios: u64,
    /// I/Os completed during `ramp_time` (not in `total_ios`).
    pub ramp_ios: u64,
    /// The measured interval, milliseconds (aggregate `job_runtime`).
    pub runtime_ms: u64,
    /// Latency of the plan's direction (reads for read plans, writes otherwise), µs.
    pub lat_us: Latency,
    /// The perf process's CPU (`cpu`, getrusage) in % of one CPU.
    pub proc_usr_pct: f64,
    pub proc_sys_pct: f64,
    /// The machine's split over the measured interval (`sys_cpu`, /proc/stat).
    pub sys_cpu: SysSplit,
}

fn num(v: &Value, path: &[&str]) -> Result<f64> {
    let mut cur = v;
    for k in path {
        cur = cur
            .get(k)
            .with_context(|| format!("perf JSON has no {}", path.join(".")))?;
    }
    cur.as_f64()
        .with_context(|| format!("perf JSON: {} is not a number", path.join(".")))
}

/// The `schema_version` of `farflash perf`'s JSON this reads (docs/perf-json.md).
pub const PERF_SCHEMA: u32 = 2;

/// Extracts the figures; `write` picks the direction whose latency is reported.
pub fn figures(doc: &Value, write: bool) -> Result<Figures> {
    let ver = num(doc, &["schema_version"])?;
    if ver != PERF_SCHEMA as f64 {
        bail!("perf JSON schema_version {ver}: this sweep reads version {PERF_SCHEMA}");
    }
    let agg = doc.get("aggregate").context("perf JSON has no aggregate")?;
    let dir = if write { "write" } else { "read" };
    // Total latency (fio's `lat`: submission + completion). A buffered
    // local write can finish inside its `io_uring_enter`, leaving almost
    // nothing in `clat`; local and remote compare fairly only on the whole.
    let pct = |key: &str| num(agg, &[dir, "lat_ns", "percentile", key]).map(|ns| ns / 1e3);
    let lat = Latency {
        mean: num(agg, &[dir, "lat_ns", "mean"])? / 1e3,
        p20: pct(PERCENTILES[0].1)?,
        p50: pct(PERCENTILES[1].1)?,
        p95: pct(PERCENTILES[2].1)?,
        p99: pct(PERCENTILES[3].1)?,
        max: num(agg, &[dir, "lat_ns", "max"])? / 1e3,
    };
    let both = |k: &str| -> Result<f64> { Ok(num(agg, &["read", k])? + num(agg, &["write", k])?) };
    let sys: SysSplit = serde_json::from_value(
        doc.get("sys_cpu")
            .cloned()
            .context("perf JSON has no sys_cpu")?,
    )
    .context("perf JSON sys_cpu")?;
    let bw = both("bw_bytes")?;
    Ok(Figures {
        iops: both("iops")?,
        bw_bytes: bw,
        bw_mib_s: bw / (1024.0 * 1024.0),
        total_ios: both("total_ios")? as u64,
        ramp_ios: num(agg, &["ramp_ios"])? as u64,
        runtime_ms: num(agg, &["job_runtime"])? as u64,
        lat_us: lat,
        proc_usr_pct: num(doc, &["cpu", "usr_pct"])?,
        proc_sys_pct: num(doc, &["cpu", "sys_pct"])?,
        sys_cpu: sys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir(iops: f64, p50: u64) -> Value {
        json!({"iops": iops, "bw_bytes": iops * 4096.0, "total_ios": 100,
               "lat_ns": {"mean": 30000.0, "max": 90000, "percentile": {
                   "20.000000": 20000, "50.000000": p50, "95.000000": 60000, "99.000000": 80000}}})
    }

    #[test]
    fn reads_the_documented_shape() {
        let doc = json!({
            "schema_version": PERF_SCHEMA,
            "aggregate": {"read": dir(1000.0, 30000), "write": dir(0.0, 0),
                          "job_runtime": 2000, "ramp_ios": 7},
            "cpu": {"usr_pct": 10.0, "sys_pct": 20.0},
            "sys_cpu": {"usr": 1.0, "nice": 0.0, "sys": 2.0, "iowait": 0.0, "irq": 0.0,
                        "soft": 3.0, "steal": 0.0, "idle": 94.0}
        });
        let f = figures(&doc, false).unwrap();
        assert_eq!(f.iops, 1000.0);
        assert_eq!(f.lat_us.p50, 30.0);
        assert_eq!(f.total_ios, 200);
        assert_eq!(f.ramp_ios, 7);
        assert_eq!(f.sys_cpu.soft, 3.0);
        assert!(figures(&json!({"schema_version": 1}), false).is_err());
    }
}
