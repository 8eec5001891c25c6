//! What the tenants study measured: every job run (each tenant alone, then
//! all together, for each tenant count) and the per-tenant comparison.

use super::plan::TenantsPlan;
use crate::results::Environment;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// The `schema` field of a tenants results.json.
pub const TENANTS_SCHEMA: &str = "farflash-sweep-tenants/1";

/// One phase of one job run: one perf run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseRun {
    pub phase: String,
    /// The perf command line.
    pub command: String,
    /// perf's measured interval (`aggregate.job_runtime`), ms.
    pub runtime_ms: u64,
    /// Bytes read and written (`io_bytes` of both directions).
    pub bytes: u64,
    pub iops: f64,
    pub bw_mib_s: f64,
    /// Total latency p99 of the phase's directions (the larger of read and
    /// write for a mixed phase), µs.
    pub p99_us: f64,
    /// The whole perf JSON report.
    pub perf: Value,
}

/// One tenant's job, once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRun {
    /// How many tenants the study point has.
    pub tenants: usize,
    /// This tenant (1-based).
    pub tenant: usize,
    /// false: the tenant ran alone; true: beside the point's other tenants.
    pub together: bool,
    pub subsystem: String,
    pub hostnqn: String,
    pub phases: Vec<PhaseRun>,
    /// Sum of the phases' runtimes, ms.
    pub runtime_ms: u64,
    /// Bytes moved by the whole job.
    pub bytes: u64,
    /// bytes / runtime, MiB/s.
    pub throughput_mib_s: f64,
    /// The worst phase p99, µs.
    pub p99_us: f64,
}

impl JobRun {
    /// Sums the phases into the job's figures.
    pub fn new(
        tenants: usize,
        tenant: usize,
        together: bool,
        subsystem: String,
        hostnqn: String,
        phases: Vec<PhaseRun>,
    ) -> JobRun {
        let runtime_ms: u64 = phases.iter().map(|p| p.runtime_ms).sum();
        let bytes: u64 = phases.iter().map(|p| p.bytes).sum();
        let p99_us = phases.iter().map(|p| p.p99_us).fold(0.0, f64::max);
        JobRun {
            tenants,
            tenant,
            together,
            subsystem,
            hostnqn,
            phases,
            runtime_ms,
            bytes,
            throughput_mib_s: mib_s(bytes, runtime_ms),
            p99_us,
        }
    }
}

/// MiB/s of `bytes` in `ms` (0 when no time was measured).
pub fn mib_s(bytes: u64, ms: u64) -> f64 {
    if ms == 0 {
        0.0
    } else {
        bytes as f64 / (1024.0 * 1024.0) / (ms as f64 / 1e3)
    }
}

/// One tenant of one study point: alone against together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub tenants: usize,
    pub tenant: usize,
    pub alone_runtime_ms: u64,
    pub together_runtime_ms: u64,
    pub alone_mib_s: f64,
    pub together_mib_s: f64,
    pub alone_p99_us: f64,
    pub together_p99_us: f64,
    /// together / alone runtime (1.0: no slowdown).
    pub slowdown: f64,
}

/// How the study ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantsSettings {
    /// The `farflash serve` command and its configuration file's text.
    pub target_command: String,
    pub target_config: String,
    /// Where the tenants' backing files were.
    pub backing_dir: String,
    pub perf_poll: String,
    pub note: Option<String>,
}

/// The whole study (results.json).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantsResults {
    pub schema: String,
    pub plan: TenantsPlan,
    pub environment: Environment,
    pub settings: TenantsSettings,
    /// Every job run, in the order run.
    pub runs: Vec<JobRun>,
    /// Per study point and tenant: alone against together.
    pub comparisons: Vec<Comparison>,
}

/// Pairs each tenant's alone and together runs of every study point.
pub fn compare(runs: &[JobRun]) -> Vec<Comparison> {
    let mut out = Vec::new();
    for t in runs.iter().filter(|r| r.together) {
        let Some(a) = runs
            .iter()
            .find(|r| !r.together && r.tenants == t.tenants && r.tenant == t.tenant)
        else {
            continue;
        };
        out.push(Comparison {
            tenants: t.tenants,
            tenant: t.tenant,
            alone_runtime_ms: a.runtime_ms,
            together_runtime_ms: t.runtime_ms,
            alone_mib_s: a.throughput_mib_s,
            together_mib_s: t.throughput_mib_s,
            alone_p99_us: a.p99_us,
            together_p99_us: t.p99_us,
            slowdown: if a.runtime_ms == 0 {
                0.0
            } else {
                t.runtime_ms as f64 / a.runtime_ms as f64
            },
        });
    }
    out.sort_by_key(|c| (c.tenants, c.tenant));
    out
}

/// The CSV's header: one row per job run.
pub const TENANTS_CSV_HEADER: &str =
    "tenants,tenant,together,subsystem,hostnqn,runtime_ms,bytes,throughput_mib_s,p99_us,slowdown";

impl TenantsResults {
    /// The comparison of one tenant of one study point.
    pub fn comparison(&self, tenants: usize, tenant: usize) -> Option<&Comparison> {
        self.comparisons
            .iter()
            .find(|c| c.tenants == tenants && c.tenant == tenant)
    }

    /// One row per job run; `slowdown` on the together rows.
    pub fn csv(&self) -> String {
        let mut s = format!("{TENANTS_CSV_HEADER}\n");
        for r in &self.runs {
            let slow = if r.together {
                self.comparison(r.tenants, r.tenant)
                    .map(|c| format!("{:.4}", c.slowdown))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{:.3},{:.3},{}",
                r.tenants,
                r.tenant,
                r.together,
                r.subsystem,
                r.hostnqn,
                r.runtime_ms,
                r.bytes,
                r.throughput_mib_s,
                r.p99_us,
                slow
            );
        }
        s
    }

    /// Writes results.json and results.csv into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(self)? + "\n",
        )?;
        std::fs::write(dir.join("results.csv"), self.csv())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(ms: u64, bytes: u64, p99: f64) -> PhaseRun {
        PhaseRun {
            phase: "p".into(),
            command: String::new(),
            runtime_ms: ms,
            bytes,
            iops: 0.0,
            bw_mib_s: 0.0,
            p99_us: p99,
            perf: Value::Null,
        }
    }

    #[test]
    fn jobs_sum_phases_and_comparisons_pair_runs() {
        let j = |n, t, tog, ms| {
            JobRun::new(
                n,
                t,
                tog,
                "s".into(),
                "h".into(),
                vec![phase(ms, 1 << 20, 10.0), phase(ms, 1 << 20, 30.0)],
            )
        };
        let a = j(2, 1, false, 500);
        assert_eq!(a.runtime_ms, 1000);
        assert_eq!(a.bytes, 2 << 20);
        assert_eq!(a.throughput_mib_s, 2.0);
        assert_eq!(a.p99_us, 30.0);
        let runs = vec![
            a,
            j(2, 2, false, 500),
            j(2, 1, true, 750),
            j(2, 2, true, 1000),
        ];
        let c = compare(&runs);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].slowdown, 1.5);
        assert_eq!(c[1].slowdown, 2.0);
        assert_eq!(c[1].alone_runtime_ms, 1000);
        assert_eq!(mib_s(1, 0), 0.0);
    }
}
