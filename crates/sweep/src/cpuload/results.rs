//! What the cpu-vs-load study measured: every perf run (saturation and
//! paced) with its rates, latency and the CPU of target and host, in % of
//! one core.

use super::plan::{CpuLoadPlan, TargetKind};
use crate::perfjson::{Figures, Latency};
use crate::results::{Environment, Window};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// The `schema` field of a cpu-vs-load results.json.
pub const CPU_LOAD_SCHEMA: &str = "farflash-sweep-cpu-vs-load/1";

/// Its JSON Schema (draft 2020-12), written beside it as results.schema.json.
pub const CPU_LOAD_SCHEMA_JSON: &str = include_str!("../../cpu-vs-load.schema.json");

/// One perf run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadRun {
    pub target: TargetKind,
    pub iodepth: u64,
    /// Offered load, % of the saturation run's IOPS; null for the saturation run.
    pub load_pct: Option<u32>,
    /// `perf --rate_iops` (the offered IOPS); null for the saturation run.
    pub offered_iops: Option<u64>,
    /// Achieved IOPS over perf's measured interval.
    pub iops: f64,
    /// I/Os completed in the measured interval.
    pub total_ios: u64,
    /// perf's measured interval, ms.
    pub runtime_ms: u64,
    /// Total latency (submission to completion), µs.
    pub lat_us: Latency,
    /// The target process's user + system CPU over the measured interval,
    /// % of one core (100 = one core busy); null if it could not be read.
    pub target_cpu_pct: Option<f64>,
    /// Its user and system parts.
    pub target_usr_pct: Option<f64>,
    pub target_sys_pct: Option<f64>,
    /// The perf process's user + system CPU (its JSON's `cpu`), % of one core.
    pub host_cpu_pct: f64,
    /// IOPS / target CPU %.
    pub iops_per_target_cpu_pct: Option<f64>,
    /// IOPS / (target + host CPU %).
    pub iops_per_cpu_pct: Option<f64>,
    /// The perf command line.
    pub command: String,
    pub window: Window,
    /// The whole perf JSON report.
    pub perf: Value,
}

/// `a / b` when `b` is positive.
fn per(a: f64, b: Option<f64>) -> Option<f64> {
    b.filter(|&b| b > 0.0).map(|b| a / b)
}

impl LoadRun {
    /// Assembles a run from perf's figures and the target's CPU (usr, sys
    /// in % of one core).
    pub fn new(
        target: TargetKind,
        iodepth: u64,
        load_pct: Option<u32>,
        offered_iops: Option<u64>,
        f: &Figures,
        target_cpu: Option<(f64, f64)>,
    ) -> LoadRun {
        let tcpu = target_cpu.map(|(u, s)| u + s);
        let host = f.proc_usr_pct + f.proc_sys_pct;
        LoadRun {
            target,
            iodepth,
            load_pct,
            offered_iops,
            iops: f.iops,
            total_ios: f.total_ios,
            runtime_ms: f.runtime_ms,
            lat_us: f.lat_us,
            target_cpu_pct: tcpu,
            target_usr_pct: target_cpu.map(|c| c.0),
            target_sys_pct: target_cpu.map(|c| c.1),
            host_cpu_pct: host,
            iops_per_target_cpu_pct: per(f.iops, tcpu),
            iops_per_cpu_pct: per(f.iops, tcpu.map(|t| t + host)),
            command: String::new(),
            window: Window::default(),
            perf: Value::Null,
        }
    }

    /// Achieved IOPS / offered IOPS (null for a saturation run).
    pub fn achieved_ratio(&self) -> Option<f64> {
        self.offered_iops
            .filter(|&o| o > 0)
            .map(|o| self.iops / o as f64)
    }
}

/// A target as started for the study.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetStart {
    pub kind: TargetKind,
    pub command: String,
}

/// How the study ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuLoadSettings {
    pub runtime_s: f64,
    pub ramp_s: f64,
    /// `perf --poll`.
    pub perf_poll: String,
    /// `perf --cpus-allowed` and the target's CPU.
    pub host_cpus: String,
    pub target_cpus: String,
    /// Each target's command line.
    pub targets: Vec<TargetStart>,
    /// The SPDK build's folder and version, when its target ran.
    pub spdk: Option<String>,
    /// Why SPDK's target did not run, when it did not.
    pub spdk_skipped: Option<String>,
    pub note: Option<String>,
    /// `/proc/loadavg` (1, 5, 15 minutes) before the first run and after the last.
    pub load_average_before: Option<String>,
    pub load_average_after: Option<String>,
}

/// The whole study (results.json).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuLoadResults {
    pub schema: String,
    pub plan: CpuLoadPlan,
    pub environment: Environment,
    pub settings: CpuLoadSettings,
    /// Every run in the order run.
    pub runs: Vec<LoadRun>,
}

/// The CSV's header: one row per run.
pub const CPU_LOAD_CSV_HEADER: &str = "target,iodepth,load_pct,offered_iops,iops,achieved_pct_of_offered,p50_us,p99_us,mean_us,target_cpu_pct,target_usr_pct,target_sys_pct,host_cpu_pct,iops_per_target_cpu_pct,iops_per_cpu_pct,runtime_ms,total_ios";

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn opt3(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_default()
}

impl CpuLoadResults {
    /// The saturation run of a target and queue depth.
    pub fn saturation(&self, t: TargetKind, qd: u64) -> Option<&LoadRun> {
        self.runs
            .iter()
            .find(|r| r.target == t && r.iodepth == qd && r.load_pct.is_none())
    }

    /// The run at `pct` % of a target's saturation at `qd`.
    pub fn at(&self, t: TargetKind, qd: u64, pct: u32) -> Option<&LoadRun> {
        self.runs
            .iter()
            .find(|r| r.target == t && r.iodepth == qd && r.load_pct == Some(pct))
    }

    /// The targets that have runs, in [`TargetKind::ALL`] order.
    pub fn targets(&self) -> Vec<TargetKind> {
        TargetKind::ALL
            .into_iter()
            .filter(|&k| self.runs.iter().any(|r| r.target == k))
            .collect()
    }

    /// One row per run.
    pub fn csv(&self) -> String {
        let mut s = format!("{CPU_LOAD_CSV_HEADER}\n");
        for r in &self.runs {
            let _ = writeln!(
                s,
                "{},{},{},{},{:.3},{},{:.3},{:.3},{:.3},{},{},{},{:.3},{},{},{},{}",
                r.target.name(),
                r.iodepth,
                opt(r.load_pct),
                opt(r.offered_iops),
                r.iops,
                opt3(r.achieved_ratio().map(|x| 100.0 * x)),
                r.lat_us.p50,
                r.lat_us.p99,
                r.lat_us.mean,
                opt3(r.target_cpu_pct),
                opt3(r.target_usr_pct),
                opt3(r.target_sys_pct),
                r.host_cpu_pct,
                opt3(r.iops_per_target_cpu_pct),
                opt3(r.iops_per_cpu_pct),
                r.runtime_ms,
                r.total_ios
            );
        }
        s
    }

    /// Writes results.json, results.schema.json and results.csv into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(self)? + "\n",
        )?;
        std::fs::write(dir.join("results.schema.json"), CPU_LOAD_SCHEMA_JSON)?;
        std::fs::write(dir.join("results.csv"), self.csv())?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A run with these figures (for the report's and plots' tests too).
    pub(crate) fn run(
        t: TargetKind,
        qd: u64,
        load: Option<u32>,
        offered: Option<u64>,
        iops: f64,
        tcpu: f64,
    ) -> LoadRun {
        let f = Figures {
            iops,
            total_ios: (iops * 2.0) as u64,
            runtime_ms: 2000,
            lat_us: Latency {
                mean: 20.0,
                p20: 15.0,
                p50: 18.0,
                p95: 30.0,
                p99: 40.0,
                max: 90.0,
            },
            proc_usr_pct: 10.0,
            proc_sys_pct: 20.0,
            ..Default::default()
        };
        LoadRun::new(t, qd, load, offered, &f, Some((tcpu * 0.75, tcpu * 0.25)))
    }

    pub(crate) fn results(runs: Vec<LoadRun>) -> CpuLoadResults {
        CpuLoadResults {
            schema: CPU_LOAD_SCHEMA.into(),
            plan: CpuLoadPlan::builtin(false),
            environment: Environment::default(),
            settings: CpuLoadSettings::default(),
            runs,
        }
    }

    #[test]
    fn ratios_lookups_and_csv() {
        let a = TargetKind::Adaptive;
        let r = results(vec![
            run(a, 1, None, None, 80_000.0, 96.0),
            run(a, 1, Some(50), Some(40_000), 39_990.0, 50.0),
            run(TargetKind::Never, 1, Some(50), Some(30_000), 30_000.0, 0.0),
        ]);
        let sat = r.saturation(a, 1).unwrap();
        assert_eq!(sat.target_cpu_pct, Some(96.0));
        assert_eq!(sat.host_cpu_pct, 30.0);
        assert_eq!(sat.iops_per_target_cpu_pct, Some(80_000.0 / 96.0));
        assert_eq!(sat.iops_per_cpu_pct, Some(80_000.0 / 126.0));
        assert_eq!(sat.achieved_ratio(), None);
        let half = r.at(a, 1, 50).unwrap();
        assert!((half.achieved_ratio().unwrap() - 0.99975).abs() < 1e-9);
        // No target CPU measured: no ratio rather than infinity.
        let never = r.at(TargetKind::Never, 1, 50).unwrap();
        assert_eq!(never.iops_per_target_cpu_pct, None);
        assert!(r.at(a, 4, 50).is_none());
        assert_eq!(r.targets(), vec![a, TargetKind::Never]);
        let csv = r.csv();
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0], CPU_LOAD_CSV_HEADER);
        let cols = CPU_LOAD_CSV_HEADER.split(',').count();
        assert!(rows.iter().all(|l| l.split(',').count() == cols));
        assert!(
            rows[1].starts_with("adaptive,1,,,80000.000,,"),
            "{}",
            rows[1]
        );
        assert!(
            rows[2].starts_with("adaptive,1,50,40000,39990.000,99.975,"),
            "{}",
            rows[2]
        );
        let back: CpuLoadResults =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
