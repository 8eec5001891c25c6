//! report.md of the tenants study.

use super::results::TenantsResults;
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
";

/// The whole report.
pub fn markdown(r: &TenantsResults, plots: bool) -> String {
    let mut s = String::new();
    let e = &r.environment;
    let _ = writeln!(s, "# farflash sweep: {}\n", r.plan.name);
    let _ = writeln!(s, "{}.\n", r.plan.description);
    let _ = writeln!(s, "## Summary\n");
    for &c in &r.plan.counts {
        let cs: Vec<_> = r.comparisons.iter().filter(|x| x.tenants == c).collect();
        if cs.is_empty() {
            continue;
        }
        let max = cs.iter().map(|x| x.slowdown).fold(0.0, f64::max);
        let mean = cs.iter().map(|x| x.slowdown).sum::<f64>() / cs.len() as f64;
        let agg_alone: f64 = cs.iter().map(|x| x.alone_mib_s).sum::<f64>() / cs.len() as f64;
        let agg_tog: f64 = cs.iter().map(|x| x.together_mib_s).sum();
        let _ = writeln!(
            s,
            "- **{c} tenant{}**: slowdown (together / alone runtime) mean {mean:.2}x, worst {max:.2}x; \
             together they moved {agg_tog:.0} MiB/s in all (one alone: {agg_alone:.0} MiB/s on average).",
            if c == 1 { "" } else { "s" }
        );
    }
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
    let _ = writeln!(s, "\n## Per tenant\n");
    let _ = writeln!(
        s,
        "| tenants | tenant | runtime alone (ms) | together (ms) | slowdown | MiB/s alone | together | p99 alone (µs) | together |\n|---|---|---|---|---|---|---|---|---|"
    );
    for c in &r.comparisons {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.1} | {:.1} | {:.0} | {:.0} |",
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
        "| tenants | tenant | run | phase | runtime (ms) | MiB/s | IOPS | p99 (µs) |\n|---|---|---|---|---|---|---|---|"
    );
    for j in &r.runs {
        for p in &j.phases {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.1} | {:.0} | {:.0} |",
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
    let _ = writeln!(s, "\n## Run details\n");
    let _ = writeln!(
        s,
        "- {} · {} CPUs ({}) · {} KiB RAM · kernel {} · farflash {} · commit {}",
        e.date, e.nproc, e.cpu_model, e.mem_total_kib, e.kernel, e.farflash_version, e.commit
    );
    let _ = writeln!(s, "- target: `{}`", r.settings.target_command);
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
