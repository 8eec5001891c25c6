//! Writing a results folder: data, plots and the report.

use crate::results::Results;
use anyhow::{Context, Result};
use std::path::Path;

/// A study's results, as a folder: data files, figures, report.md.
pub trait Study {
    /// Writes the data files (results.json and the like) into `dir`.
    fn write_data(&self, dir: &Path) -> Result<()>;
    /// Writes the figures into `dir`.
    fn write_plots(&self, dir: &Path) -> Result<()>;
    /// The report (`plots`: whether it shows the figures).
    fn report(&self, plots: bool) -> String;
}

/// Writes a study's data, its figures (when `plots`) and `report.md` into
/// `dir` (created if missing).
pub fn write_study(r: &impl Study, dir: &Path, plots: bool) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    r.write_data(dir)?;
    if plots {
        r.write_plots(dir)?;
    }
    std::fs::write(dir.join("report.md"), r.report(plots))?;
    Ok(())
}

impl Study for Results {
    fn write_data(&self, dir: &Path) -> Result<()> {
        self.write(dir)
    }
    fn write_plots(&self, dir: &Path) -> Result<()> {
        crate::plot::write_all(self, dir)
    }
    fn report(&self, plots: bool) -> String {
        crate::report::markdown(self, plots)
    }
}

/// Writes `results.json`, `results.schema.json`, `results.csv`, the plots
/// (when `plots`) and `report.md` into `dir` (created if missing).
pub fn write_folder(r: &Results, dir: &Path, plots: bool) -> Result<()> {
    write_study(r, dir, plots)
}

/// Reads `dir/results.json` back and rewrites its plots, report and
/// `results.csv` (derived from the JSON; results.json is left as it is).
pub fn replot(dir: &Path) -> Result<()> {
    let p = dir.join("results.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    crate::schema::validate_results(&text).with_context(|| format!("{}", p.display()))?;
    let r: Results = serde_json::from_str(&text).with_context(|| format!("{}", p.display()))?;
    std::fs::write(dir.join("results.csv"), r.csv())?;
    crate::plot::write_all(&r, dir)?;
    std::fs::write(dir.join("report.md"), crate::report::markdown(&r, true))?;
    Ok(())
}
