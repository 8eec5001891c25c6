//! report.md of the cpu-vs-load study.

use super::results::{CpuLoadResults, LoadRun};
use crate::plan::size_label;
use std::fmt::Write as _;

/// How the figures are measured (the report's last section).
pub const METHOD: &str = "\
- Each target runs alone, on one core (`target_cpus`), with a null
  namespace (reads return zeroes; no storage work): `farflash serve --null
  --threads 1 --cpus-allowed N --poll MODE`, or SPDK's `nvmf_tgt -m MASK
  --no-huge` with a null bdev. One `farflash perf` job on another core
  (`host_cpus`) reads from it over NVMe/TCP on 127.0.0.1.
- Per queue depth, a **saturation** run (no rate limit) measures S IOPS; then
  each load runs with `perf --rate_iops` = load x S (evenly spaced I/Os; what
  falls behind goes at once, up to the queue depth). Loads run in ascending
  order right after their saturation run.
- **IOPS**, **p50**, **p99**: perf's, over its measured interval (after
  `--ramp_time`); latency is total latency, submission to completion.
- **target CPU**: the target process's user + system time from
  `/proc/<pid>/stat`, sampled every 50 ms and interpolated to perf's measured
  interval, in % of one core (100 % = one core busy all the time). Clock
  ticks are 10 ms, so a 2 s run resolves about 0.5 %.
- **host CPU**: perf's own `cpu` (getrusage of the perf process: its job
  thread and its main thread), % of one core. With `perf --poll block` the
  job sleeps between paced I/Os, so the host's CPU follows the load too;
  with `spin` it is 100 % of its core at any load.
- **IOPS per target CPU-%** = achieved IOPS / target CPU %; **IOPS per
  CPU-%** adds the host's CPU to the denominator.
- **achieved / offered** below 100 % means the target and host could not
  keep the offered pace (or, for the run at 100 %, that S itself varies from
  run to run). Above 100 %: perf's pacer runs from the job's start (ramp
  included) and issues what fell behind at once, up to the queue depth, so
  I/Os held up in the ramp (a stalled target or host) are made up inside
  the measured interval; and a stall across the ramp's end starts that
  interval late (perf starts it at the first completion after the ramp),
  shortening it (`runtime_ms` below the asked runtime) around the catch-up.
  Over the whole run (ramp + measured), perf never issues more than offered.
";

fn f0(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".into())
}

fn f1(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".into())
}

/// `12345` -> `12.3 k`.
fn kiops(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.1} k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

/// The summary line of one queue depth: target CPU per target at the lowest
/// and the highest load, and each target's saturation.
pub fn summary_line(r: &CpuLoadResults, qd: u64) -> Option<String> {
    let (lo, hi) = (*r.plan.loads_pct.first()?, *r.plan.loads_pct.last()?);
    let ts = r.targets();
    let at = |pct: u32| {
        ts.iter()
            .map(|&t| {
                format!(
                    "{} {} %",
                    t.name(),
                    f0(r.at(t, qd, pct).and_then(|x| x.target_cpu_pct))
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sat = ts
        .iter()
        .filter_map(|&t| {
            r.saturation(t, qd)
                .map(|s| format!("{} {} IOPS", t.name(), kiops(s.iops)))
        })
        .collect::<Vec<_>>()
        .join(", ");
    if sat.is_empty() {
        return None;
    }
    let mut s = format!(
        "**QD {qd}**: target CPU (% of a core) at {lo} % of saturation: {}",
        at(lo)
    );
    if hi != lo {
        let _ = write!(s, "; at {hi} %: {}", at(hi));
    }
    let _ = write!(s, ". Saturation: {sat}.");
    Some(s)
}

/// A row of the runs table.
fn row(r: &LoadRun) -> String {
    format!(
        "| {} | {} | {} | {} | {:.0} | {} | {:.1} | {:.1} | {} | {:.0} | {} |",
        r.target.label(),
        r.iodepth,
        r.load_pct
            .map(|p| format!("{p} %"))
            .unwrap_or_else(|| "saturation".into()),
        r.offered_iops
            .map(|o| o.to_string())
            .unwrap_or_else(|| "–".into()),
        r.iops,
        f1(r.achieved_ratio().map(|x| 100.0 * x)),
        r.lat_us.p50,
        r.lat_us.p99,
        f1(r.target_cpu_pct),
        r.host_cpu_pct,
        f0(r.iops_per_target_cpu_pct),
    )
}

/// Runs whose achieved / offered ratio is outside `range`.
pub fn runs_outside(r: &CpuLoadResults, range: std::ops::Range<f64>) -> Vec<&LoadRun> {
    r.runs
        .iter()
        .filter(|x| x.achieved_ratio().is_some_and(|a| !range.contains(&a)))
        .collect()
}

/// Runs that fell short of their offered rate by more than 5 %.
pub fn short_runs(r: &CpuLoadResults) -> Vec<&LoadRun> {
    runs_outside(r, 0.95..f64::INFINITY)
}

/// `adaptive QD 1 at 100 % (88 %), ...` of runs.
fn list(runs: &[&LoadRun]) -> String {
    runs.iter()
        .map(|x| {
            format!(
                "{} QD {} at {} % ({:.0} %)",
                x.target.name(),
                x.iodepth,
                x.load_pct.unwrap_or(0),
                100.0 * x.achieved_ratio().unwrap_or(0.0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The whole report.
pub fn markdown(r: &CpuLoadResults, plots: bool) -> String {
    let mut s = String::new();
    let e = &r.environment;
    let st = &r.settings;
    let _ = writeln!(s, "# farflash sweep: {}\n", r.plan.name);
    let _ = writeln!(s, "{}.\n", r.plan.description);
    if let Some(n) = &st.note {
        let _ = writeln!(s, "**Note:** {n}\n");
    }
    let _ = writeln!(s, "## Summary\n");
    for &qd in &r.plan.iodepths {
        if let Some(l) = summary_line(r, qd) {
            let _ = writeln!(s, "- {l}");
        }
    }
    let short = short_runs(r);
    if short.is_empty() {
        let _ = writeln!(
            s,
            "- Every paced run reached at least 95 % of its offered rate."
        );
    } else {
        let _ = writeln!(s, "- Below 95 % of the offered rate: {}.", list(&short));
    }
    let over = runs_outside(r, 0.0..1.02);
    if !over.is_empty() {
        let _ = writeln!(
            s,
            "- Above 102 % of the offered rate in the measured interval (perf made up there \
             what fell behind in the ramp; see below): {}.",
            list(&over)
        );
    }
    if let Some(why) = &st.spdk_skipped {
        let _ = writeln!(s, "- SPDK's target did not run: {why}.");
    }
    if plots {
        let _ = writeln!(
            s,
            "\n## Figures\n\n![CPU against offered load](cpu.png)\n\n![IOPS per CPU-% against offered load](efficiency.png)\n\n![latency against offered load](latency.png)"
        );
    }
    let _ = writeln!(s, "\n## Saturation and light load\n");
    let mid = r.plan.loads_pct.iter().copied().find(|&l| l >= 50);
    let lo = r.plan.loads_pct.first().copied();
    let _ = writeln!(
        s,
        "| target | QD | saturation IOPS | target CPU at saturation (%) | target CPU at {lo} % (%) | target CPU at {mid} % (%) | p50 at {lo} % (µs) | IOPS per target CPU-% at {mid} % |\n|---|---|---|---|---|---|---|---|",
        lo = lo.map(|x| x.to_string()).unwrap_or_default(),
        mid = mid.map(|x| x.to_string()).unwrap_or_else(|| "–".into()),
    );
    for t in r.targets() {
        for &qd in &r.plan.iodepths {
            let Some(sat) = r.saturation(t, qd) else {
                continue;
            };
            let at = |p: Option<u32>| p.and_then(|p| r.at(t, qd, p));
            let _ = writeln!(
                s,
                "| {} | {qd} | {:.0} | {} | {} | {} | {} | {} |",
                t.label(),
                sat.iops,
                f1(sat.target_cpu_pct),
                f1(at(lo).and_then(|x| x.target_cpu_pct)),
                f1(at(mid).and_then(|x| x.target_cpu_pct)),
                f1(at(lo).map(|x| x.lat_us.p50)),
                f0(at(mid).and_then(|x| x.iops_per_target_cpu_pct)),
            );
        }
    }
    let _ = writeln!(s, "\n## Every run\n");
    let _ = writeln!(
        s,
        "| target | QD | load | offered IOPS | IOPS | achieved / offered (%) | p50 (µs) | p99 (µs) | target CPU (%) | host CPU (%) | IOPS per target CPU-% |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for x in &r.runs {
        let _ = writeln!(s, "{}", row(x));
    }
    let _ = writeln!(s, "\n## Run details\n");
    let _ = writeln!(
        s,
        "- {} · {} CPUs ({}) · {} KiB RAM · kernel {} · farflash {} · commit {}",
        e.date, e.nproc, e.cpu_model, e.mem_total_kib, e.kernel, e.farflash_version, e.commit
    );
    let _ = writeln!(
        s,
        "- {} s measured per run after a {} s ramp · {} {} requests, one job · null namespace of {} · perf --poll {} on CPU {} · targets on CPU {}",
        st.runtime_s,
        st.ramp_s,
        r.plan.rw,
        size_label(r.plan.bs),
        size_label(r.plan.namespace_size),
        st.perf_poll,
        st.host_cpus,
        st.target_cpus
    );
    if st.load_average_before.is_some() || st.load_average_after.is_some() {
        let _ = writeln!(
            s,
            "- load average (1, 5, 15 min) before: {}; after: {}",
            st.load_average_before.as_deref().unwrap_or("?"),
            st.load_average_after.as_deref().unwrap_or("?")
        );
    }
    if let Some(b) = &st.spdk {
        let _ = writeln!(s, "- SPDK: {b}");
    }
    for t in &st.targets {
        let _ = writeln!(s, "- {}: `{}`", t.kind.label(), t.command);
    }
    let _ = writeln!(s, "\n## How each figure is measured\n\n{METHOD}");
    s
}

#[cfg(test)]
mod tests {
    use super::super::results::tests::{results, run};
    use super::*;
    use crate::cpuload::plan::TargetKind;

    #[test]
    fn summary_table_and_short_runs() {
        let (a, n) = (TargetKind::Adaptive, TargetKind::Never);
        let mut r = results(vec![
            run(a, 1, None, None, 80_000.0, 96.0),
            run(a, 1, Some(5), Some(4_000), 4_000.0, 95.0),
            run(a, 1, Some(100), Some(80_000), 70_000.0, 96.0),
            run(n, 1, None, None, 50_000.0, 57.0),
            run(n, 1, Some(5), Some(2_500), 2_500.0, 3.0),
            run(n, 1, Some(100), Some(50_000), 49_000.0, 57.0),
        ]);
        r.plan.iodepths = vec![1];
        r.plan.loads_pct = vec![5, 100];
        let l = summary_line(&r, 1).unwrap();
        assert_eq!(
            l,
            "**QD 1**: target CPU (% of a core) at 5 % of saturation: adaptive 95 %, never 3 %; \
             at 100 %: adaptive 96 %, never 57 %. Saturation: adaptive 80.0 k IOPS, never 50.0 k IOPS."
        );
        assert!(summary_line(&r, 4).is_none());
        let short = short_runs(&r);
        assert_eq!(short.len(), 1);
        assert_eq!((short[0].target, short[0].load_pct), (a, Some(100)));
        let md = markdown(&r, true);
        assert!(
            md.contains("Below 95 % of the offered rate: adaptive QD 1 at 100 % (88 %)"),
            "{md}"
        );
        assert!(md.contains("](cpu.png)") && md.contains("](efficiency.png)"));
        // One row per run, and the light-load table's row of `never`:
        // saturation, CPU there, at 5 %, at 100 % (the first load >= 50), p50, IOPS/CPU-%.
        assert_eq!(md.matches("| farflash --poll never | 1 |").count(), 4);
        assert!(
            md.contains("| farflash --poll never | 1 | 50000 | 57.0 | 3.0 | 57.0 | 18.0 | 860 |"),
            "{md}"
        );
        assert!(md.contains("| farflash --poll adaptive | 1 | 5 % | 4000 | 4000 | 100.0 | 18.0 | 40.0 | 95.0 | 30 | 42 |"), "{md}");
    }
}
