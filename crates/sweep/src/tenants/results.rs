//! What the tenants study measured: every job run (each tenant alone, then
//! all together, for each tenant count) and the per-tenant comparison.

use super::plan::TenantsPlan;
use crate::results::Environment;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// `transport` of the runs through `farflash serve` (NVMe/TCP).
pub const NVME_TCP: &str = "nvme-tcp";
/// `transport` of the `--baseline iscsi` runs (libiscsi against tgtd).
pub const ISCSI: &str = "iscsi";

fn nvme_tcp() -> String {
    NVME_TCP.into()
}

/// How a transport is named in reports.
pub fn transport_label(t: &str) -> &str {
    match t {
        NVME_TCP => "NVMe/TCP",
        ISCSI => "iSCSI (tgtd)",
        other => other,
    }
}

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
    /// [`NVME_TCP`] or [`ISCSI`] (results from before the baseline: NVMe/TCP).
    #[serde(default = "nvme_tcp")]
    pub transport: String,
    /// How many tenants the study point has.
    pub tenants: usize,
    /// This tenant (1-based).
    pub tenant: usize,
    /// false: the tenant ran alone; true: beside the point's other tenants.
    pub together: bool,
    /// The subsystem NQN (NVMe/TCP) or target IQN (iSCSI).
    pub subsystem: String,
    /// The host NQN (NVMe/TCP) or initiator IQN (iSCSI).
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
            transport: nvme_tcp(),
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
    #[serde(default = "nvme_tcp")]
    pub transport: String,
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
    /// With `--baseline iscsi`: the tgtd command line.
    #[serde(default)]
    pub baseline_command: Option<String>,
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
        let Some(a) = runs.iter().find(|r| {
            !r.together
                && r.transport == t.transport
                && r.tenants == t.tenants
                && r.tenant == t.tenant
        }) else {
            continue;
        };
        out.push(Comparison {
            transport: t.transport.clone(),
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
    // NVMe/TCP first, then the baseline; by tenant count and tenant.
    out.sort_by_key(|c| (c.transport != NVME_TCP, c.tenants, c.tenant));
    out
}

/// The CSV's header: one row per job run.
pub const TENANTS_CSV_HEADER: &str =
    "tenants,tenant,together,subsystem,hostnqn,runtime_ms,bytes,throughput_mib_s,p99_us,slowdown,transport";

impl TenantsResults {
    /// The NVMe/TCP comparison of one tenant of one study point.
    pub fn comparison(&self, tenants: usize, tenant: usize) -> Option<&Comparison> {
        self.comparison_on(NVME_TCP, tenants, tenant)
    }

    /// The comparison of one tenant of one study point over `transport`.
    pub fn comparison_on(
        &self,
        transport: &str,
        tenants: usize,
        tenant: usize,
    ) -> Option<&Comparison> {
        self.comparisons
            .iter()
            .find(|c| c.transport == transport && c.tenants == tenants && c.tenant == tenant)
    }

    /// Whether the iSCSI baseline ran.
    pub fn has_baseline(&self) -> bool {
        self.runs.iter().any(|r| r.transport == ISCSI)
    }

    /// One row per job run; `slowdown` on the together rows.
    pub fn csv(&self) -> String {
        let mut s = format!("{TENANTS_CSV_HEADER}\n");
        for r in &self.runs {
            let slow = if r.together {
                self.comparison_on(&r.transport, r.tenants, r.tenant)
                    .map(|c| format!("{:.4}", c.slowdown))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{:.3},{:.3},{},{}",
                r.tenants,
                r.tenant,
                r.together,
                r.subsystem,
                r.hostnqn,
                r.runtime_ms,
                r.bytes,
                r.throughput_mib_s,
                r.p99_us,
                slow,
                r.transport
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
        // The baseline's runs pair among themselves and sort after NVMe/TCP.
        let mut runs = runs;
        for (ms, tog) in [(400, false), (800, true)] {
            let mut r = j(2, 1, tog, ms);
            r.transport = ISCSI.into();
            runs.insert(0, r);
        }
        let c = compare(&runs);
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].slowdown, 1.5);
        assert_eq!((c[2].transport.as_str(), c[2].slowdown), (ISCSI, 2.0));
        // Results written before the baseline existed read as NVMe/TCP.
        let mut v = serde_json::to_value(&c[0]).unwrap();
        v.as_object_mut().unwrap().remove("transport");
        let old: Comparison = serde_json::from_value(v).unwrap();
        assert_eq!(old.transport, NVME_TCP);
    }
}
