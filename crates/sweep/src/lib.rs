//! `farflash sweep`: the NVMe-oF measurement studies in one command.
//!
//! A [`plan::Plan`] names a `perf` parameter to vary (request size, jobs,
//! queue depth) and the fixed rest. Every point runs twice, locally
//! (`farflash perf --filename` on a backing file, io_uring) and remotely
//! (`farflash perf -t tcp ...` against a `farflash serve` exporting the
//! same file), each as a child process whose JSON report
//! (docs/perf-json.md) is kept whole. While a point runs the sweep samples
//! `/proc/stat` and the target's `/proc/<pid>/stat`, and reads the
//! target's SMART counters before and after. The results folder holds
//! `results.json` (schema `results.schema.json`), `results.csv`, plots
//! (SVG and PNG) and `report.md`.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cpuload;
pub mod env;
pub mod output;
pub mod perfjson;
pub mod plan;
pub mod plot;
pub mod procfs;
pub mod progress;
pub mod report;
pub mod results;
pub mod runner;
pub mod schema;
pub mod spdk;
pub mod summary;
pub mod sweep;
pub mod target;
pub mod tenants;
pub mod tgt;
pub mod transport;

pub use plan::{Axis, Plan, BUILTIN};
pub use results::{Mode, Results};
pub use sweep::{run, SweepOptions};
pub use transport::{Kind, Transport};
