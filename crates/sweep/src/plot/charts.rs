//! The figures of a results folder: latency, throughput, CPU split and
//! efficiency always; CPU per I/O and p50/p99 by transport when RDMA ran.

use super::panels::{
    bars, frame, legend, lines, log_range, nice_max, stacked, Axes, Key, Layer, Series,
};
use super::{perr, Figure};
use crate::perfjson::PERCENTILES;
use crate::results::{Point, Results};
use crate::transport::Kind;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

fn labels(r: &Results) -> Vec<String> {
    r.plan.values.iter().map(|&v| r.plan.label(v)).collect()
}

fn values(r: &Results, kind: Kind, f: impl Fn(&Point) -> Option<f64>) -> Vec<Option<f64>> {
    (0..r.plan.values.len())
        .map(|i| r.point_of(kind, i).and_then(&f))
        .collect()
}

/// Every kind that has points (local, TCP, RDMA).
fn series(r: &Results, f: impl Fn(&Point) -> Option<f64> + Copy) -> Vec<Series> {
    series_of(r, &r.kinds(), f)
}

/// The given kinds, those that have points.
fn series_of(r: &Results, kinds: &[Kind], f: impl Fn(&Point) -> Option<f64> + Copy) -> Vec<Series> {
    kinds
        .iter()
        .copied()
        .filter(|k| r.has_kind(*k))
        .map(|kind| Series {
            kind,
            values: values(r, kind, f),
        })
        .collect()
}

fn max_of(s: &[Series]) -> f64 {
    s.iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0, |a, &b| a.max(b))
}

fn min_of(s: &[Series]) -> f64 {
    s.iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(f64::INFINITY, |a, &b| a.min(b))
}

fn footer(r: &Results) -> String {
    let e = &r.environment;
    let commit: String = e.commit.chars().take(10).collect();
    format!(
        "farflash sweep --plan {} · {} s per point · {} CPUs ({}) · {} · commit {}",
        r.plan.name,
        r.settings.runtime_s,
        e.nproc,
        e.cpu_model,
        &e.date[..e.date.len().min(10)],
        commit
    )
}

fn mode_keys(r: &Results, line: bool) -> Vec<Key> {
    let mut k = Vec::new();
    for (m, t) in [
        (Kind::Local, "local: io_uring on the file"),
        (Kind::Tcp, "remote: NVMe/TCP to farflash serve"),
        (Kind::Rdma, "remote: NVMe/RDMA to farflash serve"),
    ] {
        if r.has_kind(m) {
            k.push(if line {
                Key::Line(m, t.into())
            } else {
                Key::Bar(m, t.into())
            });
        }
    }
    k
}

/// Latency percentiles (submission to completion), grouped bars, one panel per percentile.
pub struct LatencyFig<'a>(pub &'a Results);

impl Figure for LatencyFig<'_> {
    fn size(&self) -> (u32, u32) {
        (1300, 950)
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.0;
        let title = format!(
            "{}: latency percentiles ({})",
            r.plan.name, r.plan.description
        );
        let (top, body) = frame(root, &title, &footer(r))?;
        legend(&top, &mode_keys(r, false))?;
        let labels = labels(r);
        for (area, (name, _)) in body.split_evenly((2, 2)).iter().zip(PERCENTILES) {
            let s = series(r, |p| Some(p.figures.lat_us.get(name)));
            let t = format!("{name} latency");
            // Values spanning more than a decade and a half: a log axis keeps the small ones visible.
            let (lo, hi) = (min_of(&s), max_of(&s));
            let log = lo > 0.0 && hi / lo > 30.0;
            let a = Axes {
                title: &t,
                x: r.plan.vary.title(),
                y: if log {
                    "latency (µs, log scale)"
                } else {
                    "latency (µs)"
                },
                labels: &labels,
            };
            if log {
                let (ymin, ymax) = log_range(lo, hi);
                bars(area, &a, &s, ymax, Some(ymin))?;
            } else {
                bars(area, &a, &s, nice_max(hi), None)?;
            }
        }
        Ok(())
    }
}

/// Bandwidth and IOPS, lines.
pub struct ThroughputFig<'a>(pub &'a Results);

impl Figure for ThroughputFig<'_> {
    fn size(&self) -> (u32, u32) {
        (1300, 640)
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.0;
        let title = format!(
            "{}: bandwidth and IOPS ({})",
            r.plan.name, r.plan.description
        );
        let (top, body) = frame(root, &title, &footer(r))?;
        legend(&top, &mode_keys(r, true))?;
        let labels = labels(r);
        let panels = body.split_evenly((1, 2));
        let bw = series(r, |p| Some(p.figures.bw_mib_s));
        let a = Axes {
            title: "bandwidth",
            x: r.plan.vary.title(),
            y: "bandwidth (MiB/s)",
            labels: &labels,
        };
        lines(&panels[0], &a, &bw, nice_max(max_of(&bw)))?;
        let io = series(r, |p| Some(p.figures.iops / 1e3));
        let a = Axes {
            title: "IOPS",
            x: r.plan.vary.title(),
            y: "IOPS (thousands)",
            labels: &labels,
        };
        lines(&panels[1], &a, &io, nice_max(max_of(&io)))?;
        Ok(())
    }
}

/// CPU split per side, stacked bars.
pub struct CpuFig<'a>(pub &'a Results);

const USR: u8 = 25;
const SYS: u8 = 105;
const SOFT: u8 = 175;
const IOWAIT: u8 = 240;

impl Figure for CpuFig<'_> {
    fn size(&self) -> (u32, u32) {
        if self.0.has_rdma() {
            (1400, 1160)
        } else {
            (1400, 660)
        }
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.0;
        let title = format!(
            "{}: CPU utilization by side, % of all {} CPUs ({})",
            r.plan.name, r.environment.nproc, r.plan.description
        );
        let (top, body) = frame(root, &title, &footer(r))?;
        legend(
            &top,
            &[
                Key::Gray(USR, "usr".into()),
                Key::Gray(SYS, "sys".into()),
                Key::Gray(SOFT, "softirq (machine)".into()),
                Key::Gray(IOWAIT, "iowait (machine)".into()),
            ],
        )?;
        let labels = labels(r);
        let n = labels.len();
        let v = |k: Kind, f: &dyn Fn(&Point) -> f64| -> Vec<f64> {
            (0..n)
                .map(|i| r.point_of(k, i).map(f).unwrap_or(0.0))
                .collect()
        };
        let host = |k: Kind| -> Vec<Layer> {
            vec![
                layer("usr", USR, v(k, &|p| p.cpu.host.usr)),
                layer("sys", SYS, v(k, &|p| p.cpu.host.sys)),
                layer("soft", SOFT, v(k, &|p| p.cpu.host.soft.unwrap_or(0.0))),
                layer(
                    "iowait",
                    IOWAIT,
                    v(k, &|p| p.cpu.host.iowait.unwrap_or(0.0)),
                ),
            ]
        };
        let target = |k: Kind| -> Vec<Layer> {
            vec![
                layer(
                    "usr",
                    USR,
                    v(k, &|p| p.cpu.target.map(|t| t.usr).unwrap_or(0.0)),
                ),
                layer(
                    "sys",
                    SYS,
                    v(k, &|p| p.cpu.target.map(|t| t.sys).unwrap_or(0.0)),
                ),
            ]
        };
        let total = |ls: &[Layer]| {
            (0..n)
                .map(|i| ls.iter().map(|l| l.values[i]).sum::<f64>())
                .fold(0.0, f64::max)
        };
        let target_known = r.points.iter().any(|p| p.cpu.target.is_some());
        // Panels: the local host, then host and target of each remote
        // transport (NVMe/TCP alone: "remote run", as before RDMA existed).
        let mut specs: Vec<(String, Vec<Layer>, Option<String>)> = vec![(
            "local run: host side".into(),
            host(Kind::Local),
            (!r.has_kind(Kind::Local)).then(|| "local side not measured".into()),
        )];
        let remotes: Vec<Kind> = if r.has_rdma() {
            [Kind::Tcp, Kind::Rdma]
                .into_iter()
                .filter(|k| r.has_kind(*k))
                .collect()
        } else {
            vec![Kind::Tcp]
        };
        for (i, &k) in remotes.iter().enumerate() {
            if i > 0 {
                // The second row starts under the local panel: say why it is empty.
                specs.push((
                    String::new(),
                    Vec::new(),
                    Some("(local runs have no target)".into()),
                ));
            }
            let name = if r.has_rdma() {
                k.transport().map(|t| t.title()).unwrap_or("remote")
            } else {
                "remote"
            };
            specs.push((
                format!("{name} run: host side"),
                host(k),
                (!r.has_kind(k)).then(|| format!("{name} side not measured")),
            ));
            specs.push((
                format!("{name} run: target side"),
                target(k),
                (!target_known).then(|| "target CPU unknown".into()),
            ));
        }
        let ymax =
            nice_max(specs.iter().map(|(_, ls, _)| total(ls)).fold(0.0, f64::max)).min(110.0);
        let rows = specs.len().div_ceil(3);
        let panels = body.split_evenly((rows, 3));
        for (area, (t, ls, missing)) in panels.iter().zip(&specs) {
            let a = Axes {
                title: t,
                x: r.plan.vary.title(),
                y: "CPU (% of all CPUs)",
                labels: &labels,
            };
            stacked(area, &a, ls, ymax, missing.as_deref())?;
        }
        Ok(())
    }
}

/// A layer (the name documents the call site; the legend strip names the grays).
fn layer(_name: &str, gray: u8, values: Vec<f64>) -> Layer {
    Layer { gray, values }
}

/// IOPS per CPU-percent, lines.
pub struct EfficiencyFig<'a>(pub &'a Results);

impl Figure for EfficiencyFig<'_> {
    fn size(&self) -> (u32, u32) {
        (1100, 660)
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.0;
        let title = format!("{}: protocol efficiency, IOPS per CPU-%", r.plan.name);
        let (top, body) = frame(root, &title, &footer(r))?;
        legend(&top, &mode_keys(r, true))?;
        let labels = labels(r);
        let s = series(r, |p| p.iops_per_cpu_pct);
        let a = Axes {
            title: "IOPS / (host + target busy CPU, % of all CPUs)",
            x: r.plan.vary.title(),
            y: "IOPS per CPU-%",
            labels: &labels,
        };
        lines(&body, &a, &s, nice_max(max_of(&s)))?;
        body.present().map_err(perr)?;
        Ok(())
    }
}

/// CPU per I/O (host, target) and p50 / p99 latency per point, local, TCP
/// and RDMA side by side (written when RDMA ran).
pub struct TransportFig<'a>(pub &'a Results);

impl Figure for TransportFig<'_> {
    fn size(&self) -> (u32, u32) {
        (1300, 950)
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.0;
        let title = format!(
            "{}: CPU per I/O and latency by transport ({})",
            r.plan.name, r.plan.description
        );
        let (top, body) = frame(root, &title, &footer(r))?;
        legend(&top, &mode_keys(r, false))?;
        let labels = labels(r);
        let panels = body.split_evenly((2, 2));
        let host = series(r, |p| r.cpu_per_io(p).map(|c| c.host));
        let target = series_of(r, &[Kind::Tcp, Kind::Rdma], |p| {
            r.cpu_per_io(p).and_then(|c| c.target)
        });
        let p50 = series(r, |p| Some(p.figures.lat_us.p50));
        let p99 = series(r, |p| Some(p.figures.lat_us.p99));
        let specs: [(&str, &str, &Vec<Series>); 4] = [
            (
                "host CPU per I/O (perf usr + sys + softirq)",
                "µs of CPU per I/O",
                &host,
            ),
            (
                "target CPU per I/O (farflash serve usr + sys)",
                "µs of CPU per I/O",
                &target,
            ),
            ("p50 latency", "latency (µs)", &p50),
            ("p99 latency", "latency (µs)", &p99),
        ];
        for (area, (t, y, s)) in panels.iter().zip(specs) {
            // Local next to remote can span decades: then a log axis, as in the latency figure.
            let (lo, hi) = (min_of(s), max_of(s));
            let log = lo > 0.0 && hi / lo > 30.0;
            let ylog = format!("{y}, log scale");
            let a = Axes {
                title: t,
                x: r.plan.vary.title(),
                y: if log { &ylog } else { y },
                labels: &labels,
            };
            if log {
                let (mut ymin, ymax) = log_range(lo, hi);
                // A bar just above the axis' floor would not show: a decade more.
                if lo < 2.0 * ymin {
                    ymin /= 10.0;
                }
                bars(area, &a, s, ymax, Some(ymin))?;
            } else {
                bars(area, &a, s, nice_max(hi), None)?;
            }
        }
        Ok(())
    }
}
