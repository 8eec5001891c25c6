//! `report.md`: summary, environment, figures, the point table, and how
//! each figure is measured.

use crate::plan::size_label;
use crate::results::{Mode, Results};
use std::fmt::Write as _;

/// How the figures are measured (shared with docs/sweep.md).
pub const METHOD: &str = "\
- **Points.** Each point is one `farflash perf --output-format=json` child process \
(command lines in `results.json`); local and remote runs of a point follow each other, \
so slow drift of a shared machine affects both alike. Rates and latency are perf's own \
(`aggregate` job; latency is perf's total latency `lat_ns` of the plan's direction, from \
preparing the command to its completion, as fio's `lat`, from perf's HDR histograms).
- **Local** runs read or write the backing file with `perf --filename` (io_uring, O_DIRECT \
where the file system supports it). **Remote** runs go over NVMe/TCP on 127.0.0.1 to a \
`farflash serve` exporting the same file.
- **CPU, in % of all the machine's CPUs** (100% = every CPU busy), over each point's \
measured interval (after ramp):
  - *host usr / sys*: the perf process's own `getrusage` (perf's `cpu` figures divided by \
the number of CPUs);
  - *host softirq / iowait*: machine-wide, from the delta of `/proc/stat` (perf's \
`sys_cpu`). Both sides share this machine, so these counters hold the softirq work \
of both (on loopback, the TCP stack of host and target); they are shown once, on the host side;
  - *target usr / sys*: the `farflash serve` process's utime/stime from \
`/proc/<pid>/stat`, sampled every 50 ms and interpolated to the same interval (the interval \
is taken as perf's measured runtime ending at perf's exit);
  - *machine split* (`cpu.system` in results.json, CSV `sys_*`): the sweep's own \
`/proc/stat` samples over the same interval, an independent check of perf's `sys_cpu`.
- **IOPS per CPU-%** = IOPS / (host usr + sys + softirq + target usr + sys), CPU in % of \
all CPUs; iowait is idle time and is not counted. Local runs have no target.
- **Target counters**: the target's SMART / Health log (Get Log Page 02h) read before and \
after each remote run; the deltas include ramp I/Os (perf's `total_ios + ramp_ios`).
- **Both sides share one machine**: the host's jobs and the target's event loops compete \
for the same CPUs, and any other load on the machine shows in the machine-wide counters \
and in the latency tails.";

fn esc(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The report text; `plots` says whether the images exist.
pub fn markdown(r: &Results, plots: bool) -> String {
    let mut s = String::new();
    let p = &r.plan;
    let e = &r.environment;
    let st = &r.settings;
    let _ = writeln!(s, "# farflash sweep: `{}`\n", p.name);
    let _ = writeln!(s, "{}.\n", p.description);
    if let Some(n) = &st.note {
        let _ = writeln!(s, "> **Note.** {n}\n");
    }
    let _ = writeln!(s, "## Summary\n");
    for line in crate::summary::sentences(r) {
        let _ = writeln!(s, "- {line}");
    }
    for k in &r.skipped {
        let _ = writeln!(s, "- **{} runs skipped**: {}", k.mode.name(), k.reason);
    }
    let _ = writeln!(s, "\n## Run\n\n| | |\n|---|---|");
    let rows: Vec<(&str, String)> = vec![
        ("date (UTC)", e.date.clone()),
        (
            "machine",
            format!(
                "{} CPUs, {}, {} MiB RAM, Linux {} ({})",
                e.nproc,
                e.cpu_model,
                e.mem_total_kib / 1024,
                e.kernel,
                e.hostname
            ),
        ),
        ("commit", format!("`{}`", e.commit)),
        ("farflash", e.farflash_version.clone()),
        (
            "per point",
            format!(
                "{} s measured after {} s ramp; perf `--poll {}`",
                st.runtime_s, st.ramp_s, st.perf_poll
            ),
        ),
        (
            "backing data",
            match &st.backing {
                Some(b) => format!(
                    "`{b}`, {} ({})",
                    size_label(st.backing_size),
                    if st.backing_created {
                        "created by the sweep, pseudo-random data, removed afterwards"
                    } else {
                        "given with --filename"
                    }
                ),
                None => "none (external target only)".into(),
            },
        ),
        (
            "target",
            match &st.target_command {
                Some(c) => format!("`{c}`"),
                None => format!("{} {} at {}", st.target_kind, st.target_nqn, st.target_addr),
            },
        ),
        (
            "plan",
            format!("`{}`", serde_json::to_string(p).unwrap_or_default()),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(s, "| {k} | {} |", esc(&v));
    }
    if plots {
        let _ = writeln!(s, "\n## Figures\n");
        for (stem, cap) in [
            (
                "latency",
                "Latency percentiles (p20, p50, p95, p99; submission to completion) per point, local vs remote.",
            ),
            ("throughput", "Bandwidth and IOPS per point."),
            (
                "cpu",
                "CPU utilization split into usr / sys / softirq / iowait, per side.",
            ),
            (
                "efficiency",
                "Protocol efficiency: IOPS per CPU-percent (host + target).",
            ),
        ] {
            let _ = writeln!(s, "![{stem}]({stem}.png)\n\n*{cap}* ([SVG]({stem}.svg))\n");
        }
    }
    let _ = writeln!(s, "## Points\n");
    let _ = writeln!(
        s,
        "CPU in % of all {} CPUs; latency in µs.\n\n| {} | side | IOPS | MiB/s | p20 | p50 | p95 | p99 | host usr+sys | soft | target usr+sys | IOPS/CPU-% |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        e.nproc,
        p.vary.name()
    );
    for i in 0..p.values.len() {
        for m in [Mode::Local, Mode::Remote] {
            let Some(pt) = r.point(m, i) else { continue };
            let f = &pt.figures;
            let l = &f.lat_us;
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
                pt.label,
                m.name(),
                f.iops,
                f.bw_mib_s,
                l.p20,
                l.p50,
                l.p95,
                l.p99,
                pt.cpu.host.usr + pt.cpu.host.sys,
                pt.cpu.host.soft.unwrap_or(0.0),
                pt.cpu
                    .target
                    .map(|t| format!("{:.1}", t.busy))
                    .unwrap_or_else(|| "-".into()),
                pt.iops_per_cpu_pct
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or_else(|| "-".into()),
            );
        }
    }
    let _ = writeln!(s, "\n## How each figure is measured\n\n{METHOD}\n");
    let _ = writeln!(
        s,
        "## Files\n\n`results.json` (every point with the whole perf report; schema \
`results.schema.json`), `results.csv` (one row per point), and each figure as PNG and SVG."
    );
    s
}
