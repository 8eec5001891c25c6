//! The generated summary: a few sentences comparing remote with local,
//! and NVMe/RDMA with NVMe/TCP when both ran.

use crate::plan::{size_label, PointParams};
use crate::results::Results;
use crate::transport::Kind;

/// `4K QD 1, 8 jobs`.
pub fn point_desc(p: &PointParams) -> String {
    format!(
        "{} QD {}, {} job{}",
        size_label(p.bs),
        p.iodepth,
        p.numjobs,
        if p.numjobs == 1 { "" } else { "s" }
    )
}

fn us(d: f64) -> String {
    if d.abs() >= 100.0 {
        format!("{d:.0} µs")
    } else {
        format!("{d:.1} µs")
    }
}

fn adds(d: f64) -> String {
    if d >= 0.0 {
        format!("adds {}", us(d))
    } else {
        format!("is {} faster", us(-d))
    }
}

/// Summary sentences (Markdown list items without the bullet).
pub fn sentences(r: &Results) -> Vec<String> {
    let mut out = comparison(r);
    out.extend(rdma_vs_tcp(r));
    for p in r.points.iter().filter(|p| p.figures.total_ios == 0) {
        out.push(format!(
            "**warning**: {} {}={} did no I/O in its measured interval (perf reported 0 I/Os; \
             the runtime may be too short for its jobs to start)",
            r.kind_name(p.kind()),
            r.plan.vary.name(),
            p.label
        ));
    }
    out
}

/// `0.85x (12.3 / 14.5 µs)`: a ratio and its two values, or `-` without them.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x ({} / {})", a / b, us(a), us(b)),
        _ => "-".into(),
    }
}

/// Per point: RDMA / TCP of CPU per I/O (host, target) and of p50.
fn rdma_vs_tcp(r: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..r.plan.values.len() {
        let (Some(t), Some(d)) = (r.point_of(Kind::Tcp, i), r.point_of(Kind::Rdma, i)) else {
            continue;
        };
        let (ct, cd) = (r.cpu_per_io(t), r.cpu_per_io(d));
        out.push(format!(
            "RDMA / TCP at {} = {} ({}): CPU per I/O host {}, target {}; p50 {}",
            r.plan.vary.name(),
            t.label,
            point_desc(&t.params),
            ratio(cd.map(|c| c.host), ct.map(|c| c.host)),
            ratio(cd.and_then(|c| c.target), ct.and_then(|c| c.target)),
            ratio(Some(d.figures.lat_us.p50), Some(t.figures.lat_us.p50)),
        ));
    }
    out
}

fn comparison(r: &Results) -> Vec<String> {
    let n = r.plan.values.len();
    let remote = r.primary_remote().unwrap_or(Kind::Tcp);
    let pairs: Vec<_> = (0..n)
        .filter_map(|i| Some((r.point_of(Kind::Local, i)?, r.point_of(remote, i)?)))
        .collect();
    let mut out = Vec::new();
    if pairs.is_empty() {
        for k in Kind::ALL {
            let best = r
                .points
                .iter()
                .filter(|p| p.kind() == k)
                .max_by(|a, b| a.figures.iops.total_cmp(&b.figures.iops));
            if let Some(p) = best {
                out.push(format!(
                    "{} only: peak {:.0} IOPS ({:.1} MiB/s) at {}, p50 {}",
                    r.kind_name(k),
                    p.figures.iops,
                    p.figures.bw_mib_s,
                    point_desc(&p.params),
                    us(p.figures.lat_us.p50)
                ));
            }
        }
        return out;
    }
    let rn = r.kind_name(remote);
    let (l0, r0) = pairs[0];
    let d50 = r0.figures.lat_us.p50 - l0.figures.lat_us.p50;
    let d99 = r0.figures.lat_us.p99 - l0.figures.lat_us.p99;
    out.push(format!(
        "{rn} {} at p50 for {} ({} local, {} {rn}); at p99 it {}",
        adds(d50),
        point_desc(&l0.params),
        us(l0.figures.lat_us.p50),
        us(r0.figures.lat_us.p50),
        adds(d99)
    ));
    let deltas: Vec<f64> = pairs
        .iter()
        .map(|(l, r)| r.figures.lat_us.p50 - l.figures.lat_us.p50)
        .collect();
    if pairs.len() > 1 {
        let lo = deltas.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = deltas.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        out.push(format!(
            "over all {} points the p50 difference ({rn} - local) lies between {} and {}",
            pairs.len(),
            us(lo),
            us(hi)
        ));
    }
    let ratios: Vec<(f64, &str)> = pairs
        .iter()
        .filter(|(l, _)| l.figures.bw_bytes > 0.0)
        .map(|(l, r)| (r.figures.bw_bytes / l.figures.bw_bytes, l.label.as_str()))
        .collect();
    if let Some(&(worst, at)) = ratios.iter().min_by(|a, b| a.0.total_cmp(&b.0)) {
        let best = ratios.iter().map(|x| x.0).fold(0.0, f64::max);
        if worst < 1.0 {
            out.push(format!(
                "bandwidth penalty at most {:.0}% (at {} = {at}); {rn} reaches {:.0}%..{:.0}% of local bandwidth",
                100.0 * (1.0 - worst),
                r.plan.vary.name(),
                100.0 * worst,
                100.0 * best
            ));
        } else {
            out.push(format!(
                "no bandwidth penalty: {rn} reaches {:.0}%..{:.0}% of local bandwidth",
                100.0 * worst,
                100.0 * best
            ));
        }
    }
    let eff: Vec<(f64, &str)> = pairs
        .iter()
        .filter_map(|(l, r)| Some((l.iops_per_cpu_pct? / r.iops_per_cpu_pct?, l.label.as_str())))
        .filter(|(x, _)| x.is_finite())
        .collect();
    if let (Some(lo), Some(hi)) = (
        eff.iter().min_by(|a, b| a.0.total_cmp(&b.0)),
        eff.iter().max_by(|a, b| a.0.total_cmp(&b.0)),
    ) {
        out.push(format!(
            "CPU per I/O: {rn} (host + target) costs {:.1}x local at {} = {} and {:.1}x at {} = {}",
            lo.0,
            r.plan.vary.name(),
            lo.1,
            hi.0,
            r.plan.vary.name(),
            hi.1
        ));
    }
    let peak_target = r
        .points
        .iter()
        .filter_map(|p| Some((p.cpu.target?.busy, p.label.as_str())))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((t, at)) = peak_target {
        out.push(format!(
            "the target process used at most {t:.0}% of all {} CPUs (at {} = {at})",
            r.environment.nproc,
            r.plan.vary.name()
        ));
    }
    out
}
