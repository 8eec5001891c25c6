//! Panel drawers shared by the figures: grouped bars, lines and stacked
//! bars over a categorical x axis (one category per plan point), plus the
//! figure frame (title, legend strip, footer).

use super::{perr, FAMILY};
use crate::transport::Kind;
use anyhow::Result;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Local: near-black fills and solid lines.
pub const LOCAL: RGBColor = RGBColor(25, 25, 25);
/// Remote (NVMe/TCP): light fills with black outlines, dashed dark-gray lines.
pub const REMOTE_FILL: RGBColor = RGBColor(195, 195, 195);
pub const REMOTE_LINE: RGBColor = RGBColor(95, 95, 95);
/// Remote over NVMe/RDMA: mid-gray fills with black outlines and a
/// diagonal hatch, dotted black lines with hollow squares.
pub const RDMA_FILL: RGBColor = RGBColor(120, 120, 120);

/// The fill of a kind's bars.
fn fill(k: Kind) -> RGBColor {
    match k {
        Kind::Local => LOCAL,
        Kind::Tcp => REMOTE_FILL,
        Kind::Rdma => RDMA_FILL,
    }
}

/// One curve or bar group member.
pub struct Series {
    pub kind: Kind,
    pub values: Vec<Option<f64>>,
}

/// One layer of a stacked bar, with its gray level.
pub struct Layer {
    pub gray: u8,
    pub values: Vec<f64>,
}

/// Axis texts and categories of a panel.
pub struct Axes<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
    pub labels: &'a [String],
}

/// A round-ish upper bound with head room above `max`.
pub fn nice_max(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let m = max * 1.12;
    let p = 10f64.powf(m.log10().floor());
    for s in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if s * p >= m {
            return s * p;
        }
    }
    10.0 * p
}

/// Tick text for a value on an axis reaching `top`.
fn tick(v: f64, top: f64) -> String {
    if top >= 20.0 {
        format!("{v:.0}")
    } else if top >= 2.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws axes, ticks and labels of a chart whose x positions are the categories.
macro_rules! mesh {
    ($c:expr, $a:expr, $yfmt:expr) => {{
        let labels = $a.labels.to_vec();
        let xfmt = move |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        $c.configure_mesh()
            .disable_x_mesh()
            // Steps of 0.5 or 1: every category's integer position gets a tick.
            .x_labels($a.labels.len() * 2 + 2)
            .x_label_formatter(&xfmt)
            .y_label_formatter(&$yfmt)
            .y_labels(8)
            .x_desc($a.x)
            .y_desc($a.y)
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 16))
            .bold_line_style(RGBColor(215, 215, 215))
            .light_line_style(RGBColor(245, 245, 245))
            .draw()
            .map_err(perr)?;
    }};
}

fn builder<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    a: &Axes,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.caption(a.title, (FAMILY, 21))
        .margin(10)
        .margin_right(18)
        .x_label_area_size(54)
        .y_label_area_size(78);
    b
}

fn chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    a: &Axes,
    ymax: f64,
) -> Result<Chart<'a, DB>> {
    let n = a.labels.len().max(1) as f64;
    let mut c = builder(area, a)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..ymax)
        .map_err(perr)?;
    let yfmt = move |y: &f64| tick(*y, ymax);
    mesh!(c, a, yfmt);
    Ok(c)
}

/// The y range of a log-scale panel holding `lo..=hi` (powers of ten).
pub fn log_range(lo: f64, hi: f64) -> (f64, f64) {
    let lo = lo.max(1e-3);
    let hi = hi.max(lo * 10.0);
    (
        10f64.powf(lo.log10().floor()),
        10f64.powf((hi * 1.2).log10().ceil()),
    )
}

/// Grouped bars: at each point one bar per series (local black, remote
/// light with outline). With `log = Some(ymin)` the y axis is logarithmic
/// from `ymin` (for values spanning decades).
pub fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    a: &Axes,
    series: &[Series],
    ymax: f64,
    log: Option<f64>,
) -> Result<()> {
    match log {
        None => {
            let mut c = chart(area, a, ymax)?;
            draw_bars(&mut c, series, 0.0, ymax)
        }
        Some(ymin) => {
            let n = a.labels.len().max(1) as f64;
            let mut c = builder(area, a)
                .build_cartesian_2d(-0.5f64..n - 0.5, (ymin..ymax).log_scale())
                .map_err(perr)?;
            let yfmt = |y: &f64| {
                if *y >= 1.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y}")
                }
            };
            mesh!(c, a, yfmt);
            draw_bars(&mut c, series, ymin, ymax)
        }
    }
}

fn draw_bars<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    c: &mut ChartContext<DB, Cartesian2d<RangedCoordf64, Y>>,
    series: &[Series],
    base: f64,
    ymax: f64,
) -> Result<()> {
    let m = series.len().max(1) as f64;
    let w = 0.72 / m;
    for (k, s) in series.iter().enumerate() {
        for (i, v) in s.values.iter().enumerate() {
            let Some(v) = *v else { continue };
            let x0 = i as f64 - 0.36 + k as f64 * w + 0.01;
            let x1 = x0 + w - 0.02;
            let top = v.clamp(base, ymax);
            let r = [(x0, base), (x1, top)];
            c.draw_series([
                Rectangle::new(r, fill(s.kind).filled()),
                Rectangle::new(r, BLACK.stroke_width(1)),
            ])
            .map_err(perr)?;
            if s.kind == Kind::Rdma {
                hatch(c, x0, x1, base, top)?;
            }
        }
    }
    Ok(())
}

/// White diagonal hatch lines across the bar `x0..x1`, `base..top`, drawn
/// in pixels so that they look the same on linear and log axes.
fn hatch<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    c: &mut ChartContext<DB, Cartesian2d<RangedCoordf64, Y>>,
    x0: f64,
    x1: f64,
    base: f64,
    top: f64,
) -> Result<()> {
    let (px0, py0) = c.backend_coord(&(x0, base));
    let (px1, py1) = c.backend_coord(&(x1, top));
    let (w, h) = (px1 - px0, py0 - py1);
    if w < 4 || h < 4 {
        return Ok(());
    }
    let area = c.plotting_area().strip_coord_spec();
    let (bx, by) = area.get_base_pixel();
    let style = WHITE.stroke_width(2);
    // Lines x - y = k (pixels, y upwards) every 10 px, clipped to the bar.
    let mut k = -h;
    while k < w {
        let (a0, a1) = (k.max(0), (k + h).min(w));
        if a1 > a0 {
            let p = |a: i32| (px0 + a - bx, py0 - (a - k) - by);
            area.draw(&PathElement::new(vec![p(a0), p(a1)], style))
                .map_err(perr)?;
        }
        k += 10;
    }
    Ok(())
}

/// Lines: local solid with filled circles, TCP dashed with hollow
/// triangles, RDMA dotted with hollow squares.
pub fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    a: &Axes,
    series: &[Series],
    ymax: f64,
) -> Result<()> {
    let mut c = chart(area, a, ymax)?;
    for s in series {
        let pts: Vec<(f64, f64)> = s
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i as f64, v)))
            .collect();
        match s.kind {
            Kind::Local => {
                c.draw_series(LineSeries::new(pts.clone(), LOCAL.stroke_width(3)))
                    .map_err(perr)?;
                c.draw_series(pts.iter().map(|&p| Circle::new(p, 6, LOCAL.filled())))
                    .map_err(perr)?;
            }
            Kind::Rdma => {
                c.draw_series(DashedLineSeries::new(
                    pts.clone(),
                    3,
                    6,
                    BLACK.stroke_width(3),
                ))
                .map_err(perr)?;
                c.draw_series(pts.iter().map(|&p| {
                    EmptyElement::at(p)
                        + Rectangle::new([(-6, -6), (6, 6)], WHITE.filled())
                        + Rectangle::new([(-6, -6), (6, 6)], BLACK.stroke_width(2))
                }))
                .map_err(perr)?;
            }
            Kind::Tcp => {
                c.draw_series(DashedLineSeries::new(
                    pts.clone(),
                    12,
                    7,
                    REMOTE_LINE.stroke_width(3),
                ))
                .map_err(perr)?;
                c.draw_series(pts.iter().flat_map(|&p| {
                    [
                        TriangleMarker::new(p, 9, WHITE.filled()),
                        TriangleMarker::new(p, 9, BLACK.stroke_width(2)),
                    ]
                }))
                .map_err(perr)?;
            }
        }
    }
    Ok(())
}

/// Stacked bars, one per point, layers bottom-up in the given order.
pub fn stacked<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    a: &Axes,
    layers: &[Layer],
    ymax: f64,
    missing: Option<&str>,
) -> Result<()> {
    let c = chart(area, a, ymax)?;
    if let Some(why) = missing {
        let (w, h) = area.dim_in_pixel();
        area.draw(&Text::new(
            why.to_owned(),
            ((w as i32) / 2 - 110, (h as i32) / 2),
            (FAMILY, 16).into_font().color(&BLACK),
        ))
        .map_err(perr)?;
        return Ok(());
    }
    let mut c = c;
    let n = a.labels.len();
    let mut base = vec![0.0; n];
    for l in layers {
        for (i, v) in l.values.iter().enumerate().take(n) {
            let top = base[i] + v.max(0.0);
            let r = [(i as f64 - 0.33, base[i]), (i as f64 + 0.33, top.min(ymax))];
            c.draw_series([
                Rectangle::new(r, RGBColor(l.gray, l.gray, l.gray).filled()),
                Rectangle::new(r, BLACK.stroke_width(1)),
            ])
            .map_err(perr)?;
            base[i] = top;
        }
    }
    Ok(())
}

/// A legend entry of a figure-level legend strip.
pub enum Key {
    /// A bar swatch: local (dark), TCP (light, outlined), RDMA (mid-gray, hatched).
    Bar(Kind, String),
    /// A line sample with its marker.
    Line(Kind, String),
    /// A stacked-bar layer swatch.
    Gray(u8, String),
}

/// Draws the entries left to right, centered in `area`.
pub fn legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, keys: &[Key]) -> Result<()> {
    let font = (FAMILY, 17).into_font().color(&BLACK);
    let text_w = |s: &str| area.estimate_text_size(s, &font).map(|(w, _)| w as i32);
    let mut widths = Vec::new();
    for k in keys {
        let (Key::Bar(_, t) | Key::Line(_, t) | Key::Gray(_, t)) = k;
        widths.push(46 + text_w(t).map_err(perr)? + 30);
    }
    let (w, h) = area.dim_in_pixel();
    let mut x = (w as i32 - widths.iter().sum::<i32>()).max(0) / 2;
    let y = h as i32 / 2;
    for (k, kw) in keys.iter().zip(widths) {
        let sw = [(x, y - 9), (x + 36, y + 9)];
        match k {
            Key::Bar(Kind::Local, _) => area.draw(&Rectangle::new(sw, LOCAL.filled())),
            Key::Bar(Kind::Tcp, _) => area
                .draw(&Rectangle::new(sw, REMOTE_FILL.filled()))
                .and_then(|_| area.draw(&Rectangle::new(sw, BLACK.stroke_width(1)))),
            Key::Bar(Kind::Rdma, _) => area
                .draw(&Rectangle::new(sw, RDMA_FILL.filled()))
                .and_then(|_| {
                    // The hatch of the bars: x - y = k every 10 px, in the 36 x 18 swatch.
                    (-18..36).step_by(10).try_for_each(|k: i32| {
                        let (a0, a1) = (k.max(0), (k + 18).min(36));
                        let p = |a: i32| (x + a, y + 9 - (a - k));
                        area.draw(&PathElement::new(vec![p(a0), p(a1)], WHITE.stroke_width(2)))
                    })
                })
                .and_then(|_| area.draw(&Rectangle::new(sw, BLACK.stroke_width(1)))),
            Key::Gray(g, _) => area
                .draw(&Rectangle::new(sw, RGBColor(*g, *g, *g).filled()))
                .and_then(|_| area.draw(&Rectangle::new(sw, BLACK.stroke_width(1)))),
            Key::Line(Kind::Local, _) => area
                .draw(&PathElement::new(
                    vec![(x, y), (x + 36, y)],
                    LOCAL.stroke_width(3),
                ))
                .and_then(|_| area.draw(&Circle::new((x + 18, y), 6, LOCAL.filled()))),
            Key::Line(Kind::Rdma, _) => area
                .draw(&PathElement::new(
                    vec![(x, y), (x + 4, y)],
                    BLACK.stroke_width(3),
                ))
                .and_then(|_| {
                    area.draw(&PathElement::new(
                        vec![(x + 32, y), (x + 36, y)],
                        BLACK.stroke_width(3),
                    ))
                })
                .and_then(|_| {
                    area.draw(&Rectangle::new(
                        [(x + 12, y - 6), (x + 24, y + 6)],
                        WHITE.filled(),
                    ))
                })
                .and_then(|_| {
                    area.draw(&Rectangle::new(
                        [(x + 12, y - 6), (x + 24, y + 6)],
                        BLACK.stroke_width(2),
                    ))
                }),
            Key::Line(Kind::Tcp, _) => area
                .draw(&PathElement::new(
                    vec![(x, y), (x + 10, y)],
                    REMOTE_LINE.stroke_width(3),
                ))
                .and_then(|_| {
                    area.draw(&PathElement::new(
                        vec![(x + 26, y), (x + 36, y)],
                        REMOTE_LINE.stroke_width(3),
                    ))
                })
                .and_then(|_| area.draw(&TriangleMarker::new((x + 18, y), 9, WHITE.filled())))
                .and_then(|_| {
                    area.draw(&TriangleMarker::new((x + 18, y), 9, BLACK.stroke_width(2)))
                }),
        }
        .map_err(perr)?;
        let (Key::Bar(_, t) | Key::Line(_, t) | Key::Gray(_, t)) = k;
        area.draw(&Text::new(t.clone(), (x + 46, y - 10), font.clone()))
            .map_err(perr)?;
        x += kw;
    }
    Ok(())
}

/// Splits a figure into (legend strip, body, footer) under a title, and
/// writes the title and footer text.
pub fn frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    footer: &str,
) -> Result<(DrawingArea<DB, Shift>, DrawingArea<DB, Shift>)> {
    root.fill(&WHITE).map_err(perr)?;
    let inner = root
        .titled(title, (FAMILY, 25).into_font().color(&BLACK))
        .map_err(perr)?;
    let (_, h) = inner.dim_in_pixel();
    let (top, rest) = inner.split_vertically(40);
    let (body, foot) = rest.split_vertically(h.saturating_sub(40 + 28));
    foot.draw(&Text::new(
        footer.to_owned(),
        (10, 4),
        (FAMILY, 14).into_font().color(&RGBColor(70, 70, 70)),
    ))
    .map_err(perr)?;
    Ok((top, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_maxima() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(90.0), 120.0);
        assert_eq!(nice_max(1000.0), 1200.0);
        assert_eq!(nice_max(3.0), 4.0);
        assert_eq!(tick(12.0, 100.0), "12");
        assert_eq!(tick(1.5, 3.0), "1.5");
        assert_eq!(log_range(161.0, 15000.0), (100.0, 100000.0));
        assert_eq!(log_range(20.0, 90.0), (10.0, 1000.0));
    }
}
