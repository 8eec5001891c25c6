//! Reports in fio's shapes: the normal text and a JSON document whose
//! schema is documented in docs/perf-json.md.

pub mod json;
pub mod text;

use crate::stats::DirStats;

/// Bandwidth in bytes/s and IOPS over `runtime_ns`.
pub fn rates(d: &DirStats, runtime_ns: u64) -> (f64, f64) {
    if runtime_ns == 0 {
        return (0.0, 0.0);
    }
    let s = runtime_ns as f64 / 1e9;
    (d.bytes as f64 / s, d.ios as f64 / s)
}
