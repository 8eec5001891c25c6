//! The four figures of a results folder.

use super::panels::{
    bars, frame, legend, lines, log_range, nice_max, stacked, Axes, Key, Layer, Series,
};
use super::{perr, Figure};
use crate::perfjson::PERCENTILES;
use crate::results::{Mode, Point, Results};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

fn labels(r: &Results) -> Vec<String> {
    r.plan.values.iter().map(|&v| r.plan.label(v)).collect()
}

fn values(r: &Results, mode: Mode, f: impl Fn(&Point) -> Option<f64>) -> Vec<Option<f64>> {
    (0..r.plan.values.len())
        .map(|i| r.point(mode, i).and_then(&f))
        .collect()
}

/// Both modes that have points, local first.
fn series(r: &Results, f: impl Fn(&Point) -> Option<f64> + Copy) -> Vec<Series> {
    [Mode::Local, Mode::Remote]
        .into_iter()
        .filter(|m| r.has(*m))
        .map(|mode| Series {
            mode,
            values: values(r, mode, f),
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
        (Mode::Local, "local: io_uring on the file"),
        (Mode::Remote, "remote: NVMe/TCP to farflash serve"),
    ] {
        if r.has(m) {
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
        (1400, 660)
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
        let host = |m: Mode| -> Vec<Layer> {
            let v = |f: &dyn Fn(&Point) -> f64| -> Vec<f64> {
                (0..n)
                    .map(|i| r.point(m, i).map(f).unwrap_or(0.0))
                    .collect()
            };
            vec![
                layer("usr", USR, v(&|p| p.cpu.host.usr)),
                layer("sys", SYS, v(&|p| p.cpu.host.sys)),
                layer("soft", SOFT, v(&|p| p.cpu.host.soft.unwrap_or(0.0))),
                layer("iowait", IOWAIT, v(&|p| p.cpu.host.iowait.unwrap_or(0.0))),
            ]
        };
        let target: Vec<Layer> = {
            let v = |f: &dyn Fn(&Point) -> f64| -> Vec<f64> {
                (0..n)
                    .map(|i| r.point(Mode::Remote, i).map(f).unwrap_or(0.0))
                    .collect()
            };
            vec![
                layer(
                    "usr",
                    USR,
                    v(&|p| p.cpu.target.map(|t| t.usr).unwrap_or(0.0)),
                ),
                layer(
                    "sys",
                    SYS,
                    v(&|p| p.cpu.target.map(|t| t.sys).unwrap_or(0.0)),
                ),
            ]
        };
        let (lh, rh) = (host(Mode::Local), host(Mode::Remote));
        let total = |ls: &[Layer]| {
            (0..n)
                .map(|i| ls.iter().map(|l| l.values[i]).sum::<f64>())
                .fold(0.0, f64::max)
        };
        let ymax = nice_max(total(&lh).max(total(&rh)).max(total(&target))).min(110.0);
        let panels = body.split_evenly((1, 3));
        let target_known = r.points.iter().any(|p| p.cpu.target.is_some());
        let specs: [(&str, &[Layer], Option<&str>); 3] = [
            (
                "local run: host side",
                &lh,
                (!r.has(Mode::Local)).then_some("local side not measured"),
            ),
            (
                "remote run: host side",
                &rh,
                (!r.has(Mode::Remote)).then_some("remote side not measured"),
            ),
            (
                "remote run: target side",
                &target,
                (!target_known).then_some("target CPU unknown"),
            ),
        ];
        for (area, (t, ls, missing)) in panels.iter().zip(specs) {
            let a = Axes {
                title: t,
                x: r.plan.vary.title(),
                y: "CPU (% of all CPUs)",
                labels: &labels,
            };
            stacked(area, &a, ls, ymax, missing)?;
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
