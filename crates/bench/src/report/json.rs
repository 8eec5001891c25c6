//! The JSON report (schema: docs/perf-json.md), close to fio's
//! `--output-format=json`: `jobs[].read|write.{io_bytes, bw_bytes, iops,
//! total_ios, slat_ns{min,max,mean,stddev,N}, clat_ns{..,percentile{"50.000000":..}},
//! lat_ns{..,percentile}}`.

use super::rates;
use crate::run::RunResult;
use crate::spec::JobSpec;
use crate::stats::{DirStats, JobStats, Lat, PERCENTILES};
use serde_json::{json, Map, Value};

/// Version of this document's layout (bumped on incompatible changes).
/// 2: `clat_ns` starts when the command reached the socket (fio's split),
/// no longer when it was prepared; `slat_ns` and `lat_ns` added.
pub const SCHEMA_VERSION: u32 = 2;

/// One latency object, with `percentile` when the series keeps a histogram
/// (clat and lat; fio prints lat's with `lat_percentiles=1`, slat's never).
fn lat(l: &Lat) -> Value {
    let mut v = json!({
        "min": l.min(),
        "max": l.max_ns,
        "mean": l.mean_ns(),
        "stddev": l.stddev_ns(),
        "N": l.n,
    });
    if l.hist.is_some() {
        let mut pct = Map::new();
        for p in PERCENTILES {
            pct.insert(format!("{p:.6}"), json!(l.percentile(p)));
        }
        if let Some(o) = v.as_object_mut() {
            o.insert("percentile".into(), Value::Object(pct));
        }
    }
    v
}

fn dir(d: &DirStats, runtime_ns: u64) -> Value {
    let (bw, iops) = rates(d, runtime_ns);
    json!({
        "io_bytes": d.bytes,
        "io_kbytes": d.bytes / 1024,
        "bw_bytes": bw.round() as u64,
        "bw": (bw / 1024.0).round() as u64,
        "iops": iops,
        "runtime": runtime_ns / 1_000_000,
        "total_ios": d.ios,
        "slat_ns": lat(&d.slat),
        "clat_ns": lat(&d.clat),
        "lat_ns": lat(&d.lat),
    })
}

fn job(name: &str, j: &JobStats) -> Value {
    json!({
        "jobname": name,
        "job_runtime": j.runtime_ns / 1_000_000,
        "read": dir(&j.read, j.runtime_ns),
        "write": dir(&j.write, j.runtime_ns),
        "usr_cpu": j.cpu.usr_pct,
        "sys_cpu": j.cpu.sys_pct,
        "ctx": j.cpu.ctx,
        "ramp_ios": j.ramp_ios,
        "verify_errors": j.verify_errors,
    })
}

/// CPU percentages of the summed job threads over the longest job runtime;
/// 0 when no job completed an I/O in its measured window (runtime 0), rather
/// than a division by (almost) zero.
fn aggregate_cpu_pct(runtime_ns: u64, user_s: f64, system_s: f64) -> (f64, f64) {
    if runtime_ns == 0 {
        return (0.0, 0.0);
    }
    let secs = runtime_ns as f64 / 1e9;
    (100.0 * user_s / secs, 100.0 * system_s / secs)
}

pub fn report(spec: &JobSpec, r: &RunResult) -> Value {
    let jobs: Vec<Value> = r
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| job(&format!("job{i}"), j))
        .collect();
    let mut total = job("all", &r.total);
    // Aggregate CPU: thread times summed, over the longest job runtime.
    if let Some(o) = total.as_object_mut() {
        let (usr, sys) =
            aggregate_cpu_pct(r.total.runtime_ns, r.total.cpu.user_s, r.total.cpu.system_s);
        o.insert("usr_cpu".into(), json!(usr));
        o.insert("sys_cpu".into(), json!(sys));
    }
    json!({
        "farflash_version": env!("CARGO_PKG_VERSION"),
        "schema_version": SCHEMA_VERSION,
        "timestamp": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        "target": r.target,
        "block_size": r.block_size,
        "capacity": r.capacity,
        "options": {
            "rw": spec.rw.name(),
            "rwmixread": spec.rwmixread,
            "bs_min": spec.bs.min(),
            "bs_max": spec.bs.max(),
            "iodepth": spec.iodepth,
            "numjobs": spec.numjobs,
            "runtime": spec.runtime.map(|d| d.as_secs_f64()),
            "ramp_time": spec.ramp_time.as_secs_f64(),
            "size": spec.size,
            "offset": spec.offset,
            "verify": if spec.verify { "crc32c" } else { "none" },
            "cpus_allowed": spec.cpus_allowed,
            "rate_iops": spec.rate_iops,
        },
        "jobs": jobs,
        "aggregate": total,
        "cpu": r.cpu,
        "sys_cpu": r.sys_cpu,
    })
}

#[cfg(test)]
mod cpu_tests {
    use super::aggregate_cpu_pct;

    #[test]
    fn no_measured_interval_means_no_cpu_percentage() {
        assert_eq!(aggregate_cpu_pct(0, 0.25, 0.5), (0.0, 0.0));
        let (u, s) = aggregate_cpu_pct(2_000_000_000, 0.5, 1.0);
        assert!((u - 25.0).abs() < 1e-9 && (s - 50.0).abs() < 1e-9);
    }
}
