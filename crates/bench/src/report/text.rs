//! The normal text report, laid out like fio's.

use super::rates;
use crate::run::RunResult;
use crate::spec::JobSpec;
use crate::stats::{DirStats, JobStats, PERCENTILES};
use std::fmt::Write;

/// `123k`, `1234`, `1.2M` like fio's IOPS figures.
fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn bw(v: f64) -> String {
    if v >= 1024.0 * 1048576.0 {
        format!("{:.2}GiB/s ({:.1}GB/s)", v / 1073741824.0, v / 1e9)
    } else {
        format!("{:.1}MiB/s ({:.1}MB/s)", v / 1048576.0, v / 1e6)
    }
}

fn dir(out: &mut String, name: &str, d: &DirStats, runtime_ns: u64) {
    if d.ios == 0 {
        return;
    }
    let (b, iops) = rates(d, runtime_ns);
    let _ = writeln!(
        out,
        "  {name}: IOPS={}, BW={} ({:.1}MiB/{}msec)",
        si(iops),
        bw(b),
        d.bytes as f64 / 1048576.0,
        runtime_ns / 1_000_000
    );
    for (label, l) in [("slat", &d.slat), ("clat", &d.clat), ("lat", &d.lat)] {
        let _ = writeln!(
            out,
            "    {label:>4} (nsec): min={}, max={}, avg={:.2}, stdev={:.2}",
            l.min(),
            l.max_ns,
            l.mean_ns(),
            l.stddev_ns()
        );
    }
    let _ = writeln!(out, "    clat percentiles (nsec):");
    for row in PERCENTILES.chunks(4) {
        let cells: Vec<String> = row
            .iter()
            .map(|&p| format!("{:>6}th=[{:>8}]", format!("{p:.2}"), d.clat.percentile(p)))
            .collect();
        let _ = writeln!(out, "     | {}", cells.join(", "));
    }
}

fn job(out: &mut String, name: &str, j: &JobStats) {
    let _ = writeln!(out, "{name}: verify_errors={}", j.verify_errors);
    dir(out, "read", &j.read, j.runtime_ns);
    dir(out, "write", &j.write, j.runtime_ns);
    let _ = writeln!(
        out,
        "  cpu          : usr={:.2}%, sys={:.2}%, ctx={}",
        j.cpu.usr_pct, j.cpu.sys_pct, j.cpu.ctx
    );
}

pub fn report(spec: &JobSpec, r: &RunResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "perf: rw={}, bs={}-{}, iodepth={}, numjobs={} on {} ({} bytes, {}-byte blocks)",
        spec.rw.name(),
        spec.bs.min(),
        spec.bs.max(),
        spec.iodepth,
        spec.numjobs,
        r.target,
        r.capacity,
        r.block_size
    );
    if let Some(rate) = spec.rate_iops {
        let _ = writeln!(out, "  offered: rate_iops={rate} per job");
    }
    for (i, j) in r.jobs.iter().enumerate() {
        job(&mut out, &format!("job{i}"), j);
    }
    if r.jobs.len() > 1 {
        let _ = writeln!(out, "\nRun status (all jobs):");
        dir(&mut out, "read", &r.total.read, r.total.runtime_ns);
        dir(&mut out, "write", &r.total.write, r.total.runtime_ns);
    }
    let _ = writeln!(
        out,
        "process cpu  : usr={:.2}%, sys={:.2}% (user {:.3}s, system {:.3}s), ctx={}",
        r.cpu.usr_pct, r.cpu.sys_pct, r.cpu.user_s, r.cpu.system_s, r.cpu.ctx
    );
    let s = &r.sys_cpu;
    let _ = writeln!(
        out,
        "system cpu   : %usr={:.2} %nice={:.2} %sys={:.2} %iowait={:.2} %irq={:.2} %soft={:.2} %steal={:.2} %idle={:.2}",
        s.usr, s.nice, s.sys, s.iowait, s.irq, s.soft, s.steal, s.idle
    );
    if r.total.verify_errors > 0 {
        let _ = writeln!(out, "verify: {} mismatching blocks", r.total.verify_errors);
    }
    out
}
