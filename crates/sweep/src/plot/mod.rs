//! Plots with `plotters`, each written as SVG and PNG. Text uses an
//! embedded DejaVu Sans (no system fonts needed). Local and remote differ
//! in more than colour: local is solid black with filled circles (or black
//! bars), remote NVMe/TCP is dashed gray with hollow triangles (or light
//! bars with a black outline), remote NVMe/RDMA dotted black with hollow
//! squares (or mid-gray hatched bars), so they stay apart in grayscale.
//!
//! The sweep's own figures are drawn here (`charts.rs`); each other study
//! draws its figures in its own module (`cpuload/figures.rs`,
//! `tenants/figures.rs`) with this module's `Figure`, `save` and panels.

mod charts;
pub(crate) mod panels;

use crate::results::Results;
use anyhow::{anyhow, bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// DejaVu Sans (fonts-dejavu-core 2.37; license in assets/DejaVuSans-LICENSE.txt).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// The family name text styles use.
pub const FAMILY: &str = "sans-serif";

/// Registers the embedded font once.
fn fonts() -> Result<()> {
    static OK: OnceLock<bool> = OnceLock::new();
    if *OK.get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok()) {
        Ok(())
    } else {
        bail!("the embedded font could not be loaded")
    }
}

/// Maps a plotters error (generic over the backend) to anyhow.
pub(crate) fn perr<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plot: {e:?}")
}

/// A figure drawn the same way on any backend.
pub(crate) trait Figure {
    /// Pixel size (the SVG uses the same units).
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>;
}

/// Writes `dir/<stem>.svg` and `dir/<stem>.png`.
pub(crate) fn save(dir: &Path, stem: &str, fig: &impl Figure) -> Result<()> {
    fonts()?;
    let svg = dir.join(format!("{stem}.svg"));
    let png = dir.join(format!("{stem}.png"));
    {
        let root = SVGBackend::new(&svg, fig.size()).into_drawing_area();
        fig.draw(&root)?;
        root.present().map_err(perr)?;
    }
    {
        let root = BitMapBackend::new(&png, fig.size()).into_drawing_area();
        fig.draw(&root)?;
        root.present().map_err(perr)?;
    }
    Ok(())
}

/// The plots of every folder (file stems; each is written as `.svg` and `.png`).
pub const PLOTS: [&str; 4] = ["latency", "throughput", "cpu", "efficiency"];

/// The transports figure (CPU per I/O and p50/p99 of local, TCP and RDMA),
/// written when the results hold NVMe/RDMA points.
pub const TRANSPORT_PLOT: &str = "transport";

/// The plots of this folder: [`PLOTS`], and [`TRANSPORT_PLOT`] when RDMA ran.
pub fn plots(r: &Results) -> Vec<&'static str> {
    let mut v = PLOTS.to_vec();
    if r.has_rdma() {
        v.push(TRANSPORT_PLOT);
    }
    v
}

/// Writes every plot of a results folder ([`plots`]).
pub fn write_all(r: &Results, dir: &Path) -> Result<()> {
    save(dir, "latency", &charts::LatencyFig(r))?;
    save(dir, "throughput", &charts::ThroughputFig(r))?;
    save(dir, "cpu", &charts::CpuFig(r))?;
    save(dir, "efficiency", &charts::EfficiencyFig(r))?;
    if r.has_rdma() {
        save(dir, TRANSPORT_PLOT, &charts::TransportFig(r))?;
    }
    Ok(())
}
