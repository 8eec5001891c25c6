//! report.md of the tenants study.

use super::results::{transport_label, Comparison, TenantsResults, ISCSI, NVME_TCP};
use crate::plan::size_label;
use std::fmt::Write as _;

/// How the figures are measured (the report's last section).
pub const METHOD: &str = "\
- Each tenant has its own subsystem, host NQN (the only host the subsystem
  allows) and file namespace on one `farflash serve` the sweep starts.
- A job is its phases run one after the other, each one `farflash perf`
  process doing a fixed number of bytes (`--size`, no `--runtime`), so a
  slowed tenant shows as a longer runtime.
- **runtime** = the sum of the phases' measured intervals (perf's
  `job_runtime`, from the first submission to the last completion; the
  connect and disconnect of each perf process are not counted).
- **throughput** = the job's bytes (perf's `io_bytes`, read + write) / runtime.
- **p99** = the worst phase's p99 of total latency (submission to
  completion; for the mixed phase the larger of reads and writes).
- **slowdown** = together runtime / alone runtime of the same tenant at the
  same tenant count (1.00: a neighbour costs nothing).
- Before the study every tenant's job runs once, unmeasured (warm-up).
- *Alone* runs go one tenant at a time; *together* starts every tenant's
  job at once (a barrier), each tenant's perf processes being separate
  hosts as far as the target can tell. Initiators and target share the
  machine's CPUs, so part of a slowdown can be the hosts' own contention.
- **iSCSI baseline** (`--baseline iscsi`, when present): after the NVMe/TCP
  study and with `farflash serve` stopped, a private tgtd (Linux SCSI
  target framework, user space) exports the same files, one iSCSI target
  and LUN per tenant, and the same job runs the same way with
  `farflash perf --iscsi` (libiscsi, one session per perf process, the same
  queue depths and latency accounting). tgtd is an event-driven target
  with a small pool of I/O threads, not a polling one; it is not the SAN
  of the seed study.
";

/// (mean, worst) slowdown and the summed together throughput of one count.
fn point(cs: &[&Comparison]) -> (f64, f64, f64, f64) {
    let max = cs.iter().map(|x| x.slowdown).fold(0.0, f64::max);
    let mean = cs.iter().map(|x| x.slowdown).sum::<f64>() / cs.len() as f64;
    let agg_alone: f64 = cs.iter().map(|x| x.alone_mib_s).sum::<f64>() / cs.len() as f64;
    let agg_tog: f64 = cs.iter().map(|x| x.together_mib_s).sum();
    (mean, max, agg_tog, agg_alone)
}

/// The Summary: slowdown per tenant count and transport, and NVMe/TCP
/// beside the iSCSI baseline when there is one.
fn write_summary(s: &mut String, r: &TenantsResults) {
    let _ = writeln!(s, "## Summary\n");
    let transports: &[&str] = if r.has_baseline() {
        &[NVME_TCP, ISCSI]
    } else {
        &[NVME_TCP]
    };
    for &t in transports {
        for &c in &r.plan.counts {
            let cs: Vec<_> = r
                .comparisons
                .iter()
                .filter(|x| x.tenants == c && x.transport == t)
                .collect();
            if cs.is_empty() {
                continue;
            }
            let (mean, max, agg_tog, agg_alone) = point(&cs);
            let _ = writeln!(
                s,
                "- **{c} tenant{}**, {}: slowdown (together / alone runtime) mean {mean:.2}x, worst {max:.2}x; \
                 together they moved {agg_tog:.0} MiB/s in all (one alone: {agg_alone:.0} MiB/s on average).",
                if c == 1 { "" } else { "s" },
                transport_label(t)
            );
        }
    }
    if r.has_baseline() {
        let _ = writeln!(s, "\n## NVMe/TCP and the iSCSI baseline side by side\n");
        let _ = writeln!(
            s,
            "| tenants | NVMe/TCP slowdown mean | worst | together MiB/s | p99 together (µs, worst) | iSCSI slowdown mean | worst | together MiB/s | p99 together (µs, worst) |\n|---|---|---|---|---|---|---|---|---|"
        );
        for &c in &r.plan.counts {
            let mut row = format!("| {c} |");
            for t in [NVME_TCP, ISCSI] {
                let cs: Vec<_> = r
                    .comparisons
                    .iter()
                    .filter(|x| x.tenants == c && x.transport == t)
                    .collect();
                if cs.is_empty() {
                    row.push_str(" – | – | – | – |");
                    continue;
                }
                let (mean, max, agg_tog, _) = point(&cs);
                let p99 = cs.iter().map(|x| x.together_p99_us).fold(0.0, f64::max);
                let _ = write!(row, " {mean:.2}x | {max:.2}x | {agg_tog:.0} | {p99:.0} |");
            }
            let _ = writeln!(s, "{row}");
        }
    }
}

/// The tables per tenant and per phase.
fn write_tables(s: &mut String, r: &TenantsResults) {
    let _ = writeln!(s, "\n## Per tenant\n");
    let _ = writeln!(
        s,
        "| transport | tenants | tenant | runtime alone (ms) | together (ms) | slowdown | MiB/s alone | together | p99 alone (µs) | together |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for c in &r.comparisons {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.2} | {:.1} | {:.1} | {:.0} | {:.0} |",
            transport_label(&c.transport),
            c.tenants,
            c.tenant,
            c.alone_runtime_ms,
            c.together_runtime_ms,
            c.slowdown,
            c.alone_mib_s,
            c.together_mib_s,
            c.alone_p99_us,
            c.together_p99_us
        );
    }
    let _ = writeln!(s, "\n## Per phase\n");
    let _ = writeln!(
        s,
        "| transport | tenants | tenant | run | phase | runtime (ms) | MiB/s | IOPS | p99 (µs) |\n|---|---|---|---|---|---|---|---|---|"
    );
    for j in &r.runs {
        for p in &j.phases {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.1} | {:.0} | {:.0} |",
                transport_label(&j.transport),
                j.tenants,
                j.tenant,
                if j.together { "together" } else { "alone" },
                p.phase,
                p.runtime_ms,
                p.bw_mib_s,
                p.iops,
                p.p99_us
            );
        }
    }
}

/// The whole report.
pub fn markdown(r: &TenantsResults, plots: bool) -> String {
    let mut s = String::new();
    let e = &r.environment;
    let _ = writeln!(s, "# farflash sweep: {}\n", r.plan.name);
    let _ = writeln!(s, "{}.\n", r.plan.description);
    write_summary(&mut s, r);
    if let Some(n) = &r.settings.note {
        let _ = writeln!(s, "\nNote: {n}");
    }
    let _ = writeln!(s, "\n## The job\n");
    let _ = writeln!(
        s,
        "Every tenant: a {} file, and these phases in order:\n",
        size_label(r.plan.file_size)
    );
    let _ = writeln!(
        s,
        "| phase | rw | request | QD | bytes |\n|---|---|---|---|---|"
    );
    for p in &r.plan.phases {
        let rw = match p.rwmixread {
            Some(m) => format!("{} ({m} % reads)", p.rw),
            None => p.rw.clone(),
        };
        let _ = writeln!(
            s,
            "| {} | {rw} | {} | {} | {} |",
            p.name,
            size_label(p.bs),
            p.iodepth,
            size_label(p.size)
        );
    }
    if plots {
        let _ = writeln!(s, "\n## Figures\n\n![tenants](tenants.png)\n");
    }
    write_tables(&mut s, r);
    let _ = writeln!(s, "\n## Run details\n");
    let _ = writeln!(
        s,
        "- {} · {} CPUs ({}) · {} KiB RAM · kernel {} · farflash {} · commit {}",
        e.date, e.nproc, e.cpu_model, e.mem_total_kib, e.kernel, e.farflash_version, e.commit
    );
    let _ = writeln!(s, "- target: `{}`", r.settings.target_command);
    if let Some(b) = &r.settings.baseline_command {
        let _ = writeln!(
            s,
            "- iSCSI baseline target: `{b}` (one target per tenant file, LUN 1)"
        );
    }
    let _ = writeln!(
        s,
        "- backing files in {} · perf --poll {}",
        r.settings.backing_dir, r.settings.perf_poll
    );
    let _ = writeln!(
        s,
        "\nThe target's configuration:\n\n```toml\n{}```",
        r.settings.target_config
    );
    let _ = writeln!(s, "\n## How each figure is measured\n\n{METHOD}");
    s
}
