//! The cpu-vs-load study's figures: a metric against the offered load (%
//! of saturation), one panel per queue depth (columns) and metric (rows),
//! one line per target. Five targets need more than the local/remote
//! styles: each has its own colour, dash pattern and marker, so the lines
//! stay apart in grayscale too.

use super::plan::TargetKind;
use super::results::{CpuLoadResults, LoadRun};
use crate::plot::panels::{frame, nice_max};
use crate::plot::{perr, save, Figure, FAMILY};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The study's figures (file stems).
pub const CPU_LOAD_PLOTS: [&str; 3] = ["cpu", "efficiency", "latency"];

/// Writes the study's figures ([`CPU_LOAD_PLOTS`]).
pub fn write(r: &CpuLoadResults, dir: &Path) -> Result<()> {
    let figs = [
        ("target and host CPU against offered load", &CPU_ROWS[..]),
        ("IOPS per CPU-% against offered load", &EFFICIENCY_ROWS[..]),
        ("latency against offered load", &LATENCY_ROWS[..]),
    ];
    for (stem, (title, rows)) in CPU_LOAD_PLOTS.iter().zip(figs) {
        save(dir, stem, &LoadFig { r, title, rows })?;
    }
    Ok(())
}

/// One row of panels: a metric of a run.
pub struct Metric {
    pub title: &'static str,
    pub y: &'static str,
    pub value: fn(&LoadRun) -> Option<f64>,
    /// The y axis reaches at least this (100 for CPU %).
    pub floor: f64,
}

/// A figure of `rows` metrics.
pub struct LoadFig<'a> {
    pub r: &'a CpuLoadResults,
    pub title: &'static str,
    pub rows: &'a [Metric],
}

/// Target CPU and host CPU (`cpu.png`).
pub const CPU_ROWS: [Metric; 2] = [
    Metric {
        title: "target CPU",
        y: "target CPU (% of a core)",
        value: |r| r.target_cpu_pct,
        floor: 100.0,
    },
    Metric {
        title: "host CPU (farflash perf)",
        y: "host CPU (% of a core)",
        value: |r| Some(r.host_cpu_pct),
        floor: 100.0,
    },
];

/// IOPS per target CPU-% and per CPU-% of both sides (`efficiency.png`).
pub const EFFICIENCY_ROWS: [Metric; 2] = [
    Metric {
        title: "IOPS per target CPU-%",
        y: "IOPS / target CPU %",
        value: |r| r.iops_per_target_cpu_pct,
        floor: 0.0,
    },
    Metric {
        title: "IOPS per CPU-% (target + host)",
        y: "IOPS / (target + host) CPU %",
        value: |r| r.iops_per_cpu_pct,
        floor: 0.0,
    },
];

/// p50 and p99 latency (`latency.png`).
pub const LATENCY_ROWS: [Metric; 2] = [
    Metric {
        title: "p50 latency",
        y: "p50 (µs)",
        value: |r| Some(r.lat_us.p50),
        floor: 0.0,
    },
    Metric {
        title: "p99 latency",
        y: "p99 (µs)",
        value: |r| Some(r.lat_us.p99),
        floor: 0.0,
    },
];

/// Colour and dash (None: solid) of a target's line.
fn style(t: TargetKind) -> (RGBColor, Option<(u32, u32)>) {
    match t {
        TargetKind::Adaptive => (RGBColor(20, 20, 20), None),
        TargetKind::Always => (RGBColor(200, 30, 30), Some((12, 7))),
        TargetKind::Never => (RGBColor(30, 90, 200), Some((3, 6))),
        TargetKind::Hybrid => (RGBColor(20, 140, 60), Some((20, 5))),
        TargetKind::Spdk => (RGBColor(130, 130, 130), None),
    }
}

/// Draws a target's marker at pixel `p` of `area`.
fn marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    t: TargetKind,
    (x, y): (i32, i32),
) -> Result<()> {
    let (c, _) = style(t);
    let st = c.stroke_width(2);
    match t {
        TargetKind::Adaptive => area.draw(&Circle::new((x, y), 5, c.filled())),
        TargetKind::Always => area
            .draw(&TriangleMarker::new((x, y), 8, WHITE.filled()))
            .and_then(|_| area.draw(&TriangleMarker::new((x, y), 8, st))),
        TargetKind::Never => area
            .draw(&Rectangle::new(
                [(x - 5, y - 5), (x + 5, y + 5)],
                WHITE.filled(),
            ))
            .and_then(|_| area.draw(&Rectangle::new([(x - 5, y - 5), (x + 5, y + 5)], st))),
        TargetKind::Hybrid => area.draw(&Cross::new((x, y), 6, st)),
        TargetKind::Spdk => area.draw(&Rectangle::new(
            [(x - 5, y - 5), (x + 5, y + 5)],
            c.filled(),
        )),
    }
    .map_err(perr)
}

/// A line sample and the target's label, left to right across `area`.
fn legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, ts: &[TargetKind]) -> Result<()> {
    let font = (FAMILY, 17).into_font().color(&BLACK);
    let (w, h) = area.dim_in_pixel();
    let step = (w as i32 / ts.len().max(1) as i32).max(120);
    let y = h as i32 / 2;
    for (i, &t) in ts.iter().enumerate() {
        let x = 20 + i as i32 * step;
        let (c, dash) = style(t);
        let segs: Vec<(i32, i32)> = match dash {
            None => vec![(0, 40)],
            Some((on, off)) => (0..40)
                .step_by((on + off) as usize)
                .map(|a| (a, (a + on as i32).min(40)))
                .collect(),
        };
        for (a, b) in segs {
            area.draw(&PathElement::new(
                vec![(x + a, y), (x + b, y)],
                c.stroke_width(3),
            ))
            .map_err(perr)?;
        }
        marker(area, t, (x + 20, y))?;
        area.draw(&Text::new(t.label(), (x + 48, y - 10), font.clone()))
            .map_err(perr)?;
    }
    Ok(())
}

/// The points (offered load %, value) of one target, QD and metric.
fn points(r: &CpuLoadResults, t: TargetKind, qd: u64, m: &Metric) -> Vec<(f64, f64)> {
    r.runs
        .iter()
        .filter(|x| x.target == t && x.iodepth == qd)
        .filter_map(|x| Some((f64::from(x.load_pct?), (m.value)(x)?)))
        .collect()
}

impl Figure for LoadFig<'_> {
    fn size(&self) -> (u32, u32) {
        let cols = self.r.plan.iodepths.len().max(1) as u32;
        (
            (80 + 520 * cols).max(960),
            140 + 380 * self.rows.len() as u32,
        )
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.r;
        let e = &r.environment;
        let commit: String = e.commit.chars().take(10).collect();
        let footer = format!(
            "farflash sweep --plan cpu-vs-load · {} s per run · {} CPUs ({}) · {} · commit {}",
            r.settings.runtime_s,
            e.nproc,
            e.cpu_model,
            &e.date[..e.date.len().min(10)],
            commit
        );
        let (strip, body) = frame(root, self.title, &footer)?;
        let ts = r.targets();
        legend(&strip, &ts)?;
        let qds = &r.plan.iodepths;
        let panels = body.split_evenly((self.rows.len(), qds.len().max(1)));
        for (ri, m) in self.rows.iter().enumerate() {
            for (ci, &qd) in qds.iter().enumerate() {
                let area = &panels[ri * qds.len() + ci];
                // Each panel its own y range (IOPS per CPU-% grows tenfold
                // from QD 1 to QD 32); CPU panels all reach 100 %.
                let ymax = nice_max(
                    ts.iter()
                        .flat_map(|&t| points(r, t, qd, m))
                        .fold(m.floor, |a, (_, v)| a.max(v)),
                );
                let mut c = ChartBuilder::on(area)
                    .caption(format!("QD {qd}: {}", m.title), (FAMILY, 20))
                    .margin(10)
                    .margin_right(18)
                    .x_label_area_size(48)
                    .y_label_area_size(72)
                    .build_cartesian_2d(0f64..105f64, 0f64..ymax)
                    .map_err(perr)?;
                c.configure_mesh()
                    .x_desc("offered load (% of saturation)")
                    .y_desc(m.y)
                    .x_labels(8)
                    .y_labels(8)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .y_label_formatter(&|y| format!("{y:.0}"))
                    .label_style((FAMILY, 14))
                    .axis_desc_style((FAMILY, 15))
                    .bold_line_style(RGBColor(215, 215, 215))
                    .light_line_style(RGBColor(245, 245, 245))
                    .draw()
                    .map_err(perr)?;
                for &t in &ts {
                    let pts = points(r, t, qd, m);
                    let (col, dash) = style(t);
                    let line = col.stroke_width(3);
                    match dash {
                        None => c.draw_series(LineSeries::new(pts.clone(), line)),
                        Some((on, off)) => {
                            c.draw_series(DashedLineSeries::new(pts.clone(), on, off, line))
                        }
                    }
                    .map_err(perr)?;
                    let plot = c.plotting_area().strip_coord_spec();
                    let (bx, by) = plot.get_base_pixel();
                    for p in &pts {
                        let (x, y) = c.backend_coord(p);
                        marker(&plot, t, (x - bx, y - by))?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::results::tests::{results, run};
    use super::*;

    #[test]
    fn points_skip_saturation_and_missing_values() {
        let a = TargetKind::Adaptive;
        let mut none = run(a, 1, Some(10), Some(100), 100.0, 0.0);
        none.target_cpu_pct = None;
        let r = results(vec![
            run(a, 1, None, None, 1000.0, 90.0),
            run(a, 1, Some(5), Some(50), 50.0, 20.0),
            none,
            run(a, 4, Some(5), Some(50), 50.0, 30.0),
        ]);
        assert_eq!(points(&r, a, 1, &CPU_ROWS[0]), vec![(5.0, 20.0)]);
        assert_eq!(points(&r, a, 1, &CPU_ROWS[1]).len(), 2);
        assert!(points(&r, TargetKind::Spdk, 1, &CPU_ROWS[0]).is_empty());
        let dir = std::env::temp_dir().join(format!("ff-cpuload-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write(&r, &dir).unwrap();
        for stem in CPU_LOAD_PLOTS {
            assert!(
                std::fs::metadata(dir.join(format!("{stem}.png")))
                    .unwrap()
                    .len()
                    > 5000
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
