//! Plots with `plotters`, each written as SVG and PNG. Text uses an
//! embedded DejaVu Sans (no system fonts needed). Local and remote differ
//! in more than colour: local is solid black with filled circles (or black
//! bars), remote NVMe/TCP is dashed gray with hollow triangles (or light
//! bars with a black outline), remote NVMe/RDMA dotted black with hollow
//! squares (or mid-gray hatched bars), so they stay apart in grayscale.

mod charts;
mod cpuload;
mod panels;
mod tenants;

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

/// Writes every plot of a results folder.
pub fn write_all(r: &Results, dir: &Path) -> Result<()> {
    save(dir, "latency", &charts::LatencyFig(r))?;
    save(dir, "throughput", &charts::ThroughputFig(r))?;
    save(dir, "cpu", &charts::CpuFig(r))?;
    save(dir, "efficiency", &charts::EfficiencyFig(r))?;
    if r.has_rdma() {
        save(dir, crate::output::TRANSPORT_PLOT, &charts::TransportFig(r))?;
    }
    Ok(())
}

/// Writes the tenants study's figure (`tenants.svg`, `tenants.png`).
pub fn write_tenants(r: &crate::tenants::results::TenantsResults, dir: &Path) -> Result<()> {
    save(dir, "tenants", &tenants::TenantsFig(r))
}

/// The cpu-vs-load study's figures (file stems).
pub const CPU_LOAD_PLOTS: [&str; 3] = ["cpu", "efficiency", "latency"];

/// Writes the cpu-vs-load study's figures ([`CPU_LOAD_PLOTS`]).
pub fn write_cpu_load(r: &crate::cpuload::results::CpuLoadResults, dir: &Path) -> Result<()> {
    let figs = [
        (
            "target and host CPU against offered load",
            &cpuload::CPU_ROWS[..],
        ),
        (
            "IOPS per CPU-% against offered load",
            &cpuload::EFFICIENCY_ROWS[..],
        ),
        ("latency against offered load", &cpuload::LATENCY_ROWS[..]),
    ];
    for (stem, (title, rows)) in CPU_LOAD_PLOTS.iter().zip(figs) {
        save(dir, stem, &cpuload::LoadFig { r, title, rows })?;
    }
    Ok(())
}
