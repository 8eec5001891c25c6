//! `report.md`: summary, environment, figures, the point table, and how
//! each figure is measured.

use crate::plan::size_label;
use crate::results::Results;
use std::fmt::Write as _;

/// How the figures are measured (shared with docs/sweep.md).
pub const METHOD: &str = "\
- **Points.** Each point is one `farflash perf --output-format=json` child process \
(command lines in `results.json`); local and remote runs of a point follow each other, \
so slow drift of a shared machine affects both alike. Rates and latency are perf's own \
(`aggregate` job; latency is perf's total latency `lat_ns` of the plan's direction, from \
preparing the command to its completion, as fio's `lat`, from perf's HDR histograms).
- **Local** runs read or write the backing file with `perf --filename` (io_uring, O_DIRECT \
where the file system supports it). **Remote** runs go to a `farflash serve` exporting the \
same file, on 127.0.0.1 or `--address`: over NVMe/TCP (`perf -t tcp`), and with \
`--transport tcp,rdma` also over NVMe/RDMA (`perf -t rdma` to the same target's RDMA \
listener), one run after the other for each point. The SMART log is read over the TCP \
listener either way.
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
- **CPU per I/O** (µs of CPU per I/O, `cpu_us_per_io` in results.json, CSV \
`host_cpu_us_per_io` / `target_cpu_us_per_io`), per side: the side's busy CPU in % of all \
CPUs / 100 × the number of CPUs × the measured interval (perf's runtime) / the I/Os \
completed in it (perf's `total_ios`). Host = perf's usr + sys + the machine's softirq \
(so the softirq work of both sides, on one machine, is counted once, on the host); \
target = the `farflash serve` process's usr + sys. Soft-RoCE (rdma_rxe) does its RDMA \
work in the kernel, largely in softirq: it lands on the host side too.
- **Target counters**: the target's SMART / Health log (Get Log Page 02h) read before and \
after each remote run; the deltas include ramp I/Os (perf's `total_ios + ramp_ios`).
- **Both sides share one machine**: the host's jobs and the target's event loops compete \
for the same CPUs, and any other load on the machine shows in the machine-wide counters \
and in the latency tails.";

fn esc(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The rows of the report's Run table.
fn run_rows(r: &Results) -> Vec<(&'static str, String)> {
    let (p, e, st) = (&r.plan, &r.environment, &r.settings);
    vec![
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
                Some(c) => format!(
                    "`{c}` (remote runs over {})",
                    st.transports
                        .iter()
                        .map(|t| t.title())
                        .collect::<Vec<_>>()
                        .join(", then ")
                ),
                None => format!("{} {} at {}", st.target_kind, st.target_nqn, st.target_addr),
            },
        ),
        (
            "plan",
            format!("`{}`", serde_json::to_string(p).unwrap_or_default()),
        ),
    ]
}

/// The Figures section: each plot drawn, with its caption.
fn write_figures(s: &mut String, r: &Results) {
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
        (
            "transport",
            "CPU per I/O (µs of CPU, host and target) and p50 / p99 latency per point: local, NVMe/TCP and NVMe/RDMA side by side.",
        ),
    ] {
        if !crate::plot::plots(r).contains(&stem) {
            continue;
        }
        let _ = writeln!(s, "![{stem}]({stem}.png)\n\n*{cap}* ([SVG]({stem}.svg))\n");
    }
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
    let rows = run_rows(r);
    for (k, v) in rows {
        let _ = writeln!(s, "| {k} | {} |", esc(&v));
    }
    if plots {
        write_figures(&mut s, r);
    }
    let _ = writeln!(s, "## Points\n");
    let _ = writeln!(
        s,
        "CPU in % of all {} CPUs; latency and CPU per I/O in µs.\n\n| {} | side | IOPS | MiB/s | p20 | p50 | p95 | p99 | host usr+sys | soft | target usr+sys | IOPS/CPU-% | host CPU/I/O | target CPU/I/O |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        e.nproc,
        p.vary.name()
    );
    for i in 0..p.values.len() {
        for k in r.kinds() {
            let Some(pt) = r.point_of(k, i) else { continue };
            let f = &pt.figures;
            let l = &f.lat_us;
            let cpi = r.cpu_per_io(pt);
            let dash = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} |",
                pt.label,
                r.kind_name(k),
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
                dash(cpi.map(|c| c.host)),
                dash(cpi.and_then(|c| c.target)),
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
