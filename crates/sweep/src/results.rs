//! The results folder's data: `results.json` (schema:
//! `results.schema.json`, written beside it) and `results.csv`.

use crate::perfjson::Figures;
use crate::plan::{Plan, PointParams};
use crate::procfs::SysSplit;
use crate::target::SmartCounters;
use crate::transport::{cpu_us_per_io, tcp_only, Kind, Transport};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// `schema` of `results.json`; bumped on incompatible changes.
pub const SCHEMA: &str = "farflash-sweep/1";

/// The JSON Schema (draft 2020-12) of `results.json`.
pub const SCHEMA_JSON: &str = include_str!("../results.schema.json");

/// Local (io_uring on the backing file) or remote (NVMe/TCP or NVMe/RDMA
/// to the target; the point's `transport` says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Local,
    Remote,
}

impl Mode {
    /// `local` or `remote`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::Remote => "remote",
        }
    }
}

/// The machine and the code a sweep ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// UTC, ISO 8601.
    pub date: String,
    pub hostname: String,
    pub nproc: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub mem_total_kib: u64,
    pub farflash_version: String,
    /// `git rev-parse HEAD` of the working directory (`+dirty` with local changes), or `unknown`.
    pub commit: String,
}

/// How the sweep ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Measured seconds per point (`--runtime`).
    pub runtime_s: f64,
    /// Unmeasured warm-up seconds per point (`--ramp`).
    pub ramp_s: f64,
    /// `perf --poll` (block or spin).
    pub perf_poll: String,
    /// The backing file or device, and its size in bytes.
    pub backing: Option<String>,
    pub backing_size: u64,
    /// Whether the sweep created the backing file (and removed it afterwards).
    pub backing_created: bool,
    /// `spawned` (a `farflash serve` the sweep started) or `external`.
    pub target_kind: String,
    pub target_addr: String,
    pub target_nqn: String,
    pub target_nsid: u32,
    /// The target's command line when spawned.
    pub target_command: Option<String>,
    /// Whether the target's CPU time could be read (its PID is known).
    pub target_cpu_known: bool,
    /// Free text for the report (`--note`), e.g. what else loaded the machine.
    #[serde(default)]
    pub note: Option<String>,
    /// The remote runs' transports, in the order each point ran them
    /// (`--transport`; results written before it existed: tcp).
    #[serde(default = "tcp_only")]
    pub transports: Vec<Transport>,
    /// The started target's NVMe/RDMA listener (`ip:port`), when RDMA was swept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rdma_addr: Option<String>,
}

/// A side's CPU split in percent of all the machine's CPUs (100 = every
/// CPU busy). `iowait` and `soft` are machine-wide counters, reported once,
/// on the host side (null on the target side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub usr: f64,
    pub sys: f64,
    pub iowait: Option<f64>,
    pub soft: Option<f64>,
    /// usr + sys + soft: the CPU the side spent (iowait is idle time).
    pub busy: f64,
}

/// CPU over a point's measured interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    /// The perf process (its getrusage) plus the machine's iowait and softirq.
    pub host: Side,
    /// The target process (/proc/<pid>/stat deltas); null for local runs or an unknown PID.
    pub target: Option<Side>,
    /// The machine's split from the sweep's own /proc/stat samples over the same interval.
    pub system: SysSplit,
}

/// The measured interval in Unix seconds (wall clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub start: f64,
    pub end: f64,
}

/// µs of CPU per I/O over a point's measured interval (see
/// [`cpu_us_per_io`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuPerIo {
    /// The host side: perf's usr + sys and the machine's softirq.
    pub host: f64,
    /// The target process's usr + sys; null when its CPU is unknown or the run is local.
    pub target: Option<f64>,
}

impl CpuPerIo {
    /// From a point's CPU split, its runtime and I/O count; None without I/Os.
    pub fn of(cpu: &Cpu, f: &Figures, nproc: usize) -> Option<CpuPerIo> {
        let secs = f.runtime_ms as f64 / 1e3;
        Some(CpuPerIo {
            host: cpu_us_per_io(cpu.host.busy, nproc, secs, f.total_ios)?,
            target: cpu
                .target
                .and_then(|t| cpu_us_per_io(t.busy, nproc, secs, f.total_ios)),
        })
    }
}

/// One perf run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Position on the plan's axis (0-based).
    pub index: usize,
    pub mode: Mode,
    /// The transport of a remote run (absent on local runs; results
    /// written before `--transport` existed have none and ran over tcp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    /// The axis value (bytes for request size) and its label (`4K`).
    pub value: u64,
    pub label: String,
    pub rw: String,
    pub params: PointParams,
    /// The perf command line.
    pub command: String,
    pub window: Window,
    pub figures: Figures,
    pub cpu: Cpu,
    /// IOPS / (host busy + target busy), CPU in % of the machine.
    pub iops_per_cpu_pct: Option<f64>,
    /// µs of CPU per I/O, host and target (null without I/Os; absent in
    /// results written before it existed, and then computed from `cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_io: Option<CpuPerIo>,
    /// SMART counter deltas over the run, ramp included (remote only).
    pub target_counters: Option<SmartCounters>,
    /// The whole `farflash perf --output-format=json` document.
    pub perf: Value,
}

/// A side that did not run, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub mode: Mode,
    pub reason: String,
}

/// Everything a sweep of one plan produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub schema: String,
    pub plan: Plan,
    pub environment: Environment,
    pub settings: Settings,
    pub skipped: Vec<Skipped>,
    pub points: Vec<Point>,
}

impl Point {
    /// Local, or remote over its transport (tcp when the results predate `transport`).
    pub fn kind(&self) -> Kind {
        match self.mode {
            Mode::Local => Kind::Local,
            Mode::Remote => Kind::remote(self.transport.unwrap_or(Transport::Tcp)),
        }
    }
}

impl Results {
    /// The point of `kind` at axis position `index`.
    pub fn point_of(&self, kind: Kind, index: usize) -> Option<&Point> {
        self.points
            .iter()
            .find(|p| p.kind() == kind && p.index == index)
    }

    /// Whether any point of `kind` exists.
    pub fn has_kind(&self, kind: Kind) -> bool {
        self.points.iter().any(|p| p.kind() == kind)
    }

    /// The kinds that have points, in plot order.
    pub fn kinds(&self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|k| self.has_kind(*k))
            .collect()
    }

    /// Whether remote runs went over more than NVMe/TCP (RDMA points exist).
    pub fn has_rdma(&self) -> bool {
        self.has_kind(Kind::Rdma)
    }

    /// The name of a kind in tables and messages: `local`, and `remote`
    /// while every remote run is NVMe/TCP, else `remote tcp` / `remote rdma`.
    pub fn kind_name(&self, kind: Kind) -> &'static str {
        match kind {
            Kind::Tcp if !self.has_rdma() => "remote",
            k => k.name(),
        }
    }

    /// The kind the local-vs-remote comparison uses: TCP, or RDMA when there is no TCP.
    pub fn primary_remote(&self) -> Option<Kind> {
        [Kind::Tcp, Kind::Rdma]
            .into_iter()
            .find(|k| self.has_kind(*k))
    }

    /// µs of CPU per I/O of a point: recorded, or computed from its CPU split.
    pub fn cpu_per_io(&self, p: &Point) -> Option<CpuPerIo> {
        p.cpu_us_per_io
            .or_else(|| CpuPerIo::of(&p.cpu, &p.figures, self.environment.nproc))
    }

    /// The point of `mode` at axis position `index` (the first remote transport).
    pub fn point(&self, mode: Mode, index: usize) -> Option<&Point> {
        self.points
            .iter()
            .find(|p| p.mode == mode && p.index == index)
    }

    /// Whether any point of `mode` exists.
    pub fn has(&self, mode: Mode) -> bool {
        self.points.iter().any(|p| p.mode == mode)
    }

    /// Writes `results.json`, `results.schema.json` and `results.csv` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(self)? + "\n",
        )?;
        std::fs::write(dir.join("results.schema.json"), SCHEMA_JSON)?;
        std::fs::write(dir.join("results.csv"), self.csv())?;
        Ok(())
    }

    /// One header line and one row per point.
    pub fn csv(&self) -> String {
        let mut s = String::from(CSV_HEADER);
        s.push('\n');
        let o = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_default();
        for p in &self.points {
            let f = &p.figures;
            let l = &f.lat_us;
            let h = &p.cpu.host;
            let t = p.cpu.target;
            let c = p.target_counters;
            let sy = &p.cpu.system;
            let cpi = self.cpu_per_io(p);
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{:.1},{:.3},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.3},{:.3},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{},{},{},{}",
                self.plan.name,
                p.mode.name(),
                p.label,
                p.rw,
                p.params.bs,
                p.params.iodepth,
                p.params.numjobs,
                f.runtime_ms,
                f.total_ios,
                f.iops,
                f.bw_mib_s,
                l.mean,
                l.p20,
                l.p50,
                l.p95,
                l.p99,
                l.max,
                h.usr,
                h.sys,
                o(h.iowait),
                o(h.soft),
                o(t.map(|t| t.usr)),
                o(t.map(|t| t.sys)),
                sy.usr,
                sy.sys,
                sy.iowait,
                sy.soft,
                sy.idle,
                o(p.iops_per_cpu_pct),
                c.map(|c| c.host_read_commands.to_string()).unwrap_or_default(),
                c.map(|c| c.host_write_commands.to_string()).unwrap_or_default(),
                c.map(|c| c.data_units_read.to_string()).unwrap_or_default(),
                c.map(|c| c.data_units_written.to_string()).unwrap_or_default(),
                p.transport.map(Transport::name).unwrap_or_default(),
                o(cpi.map(|c| c.host)),
                o(cpi.and_then(|c| c.target)),
            );
        }
        s
    }
}

/// The CSV columns (CPU in % of all CPUs, latency in µs).
pub const CSV_HEADER: &str = "plan,mode,point,rw,bs,iodepth,numjobs,runtime_ms,total_ios,iops,bw_mib_s,lat_mean_us,lat_p20_us,lat_p50_us,lat_p95_us,lat_p99_us,lat_max_us,host_usr_pct,host_sys_pct,host_iowait_pct,host_soft_pct,target_usr_pct,target_sys_pct,sys_usr_pct,sys_sys_pct,sys_iowait_pct,sys_soft_pct,sys_idle_pct,iops_per_cpu_pct,target_read_cmds,target_write_cmds,target_data_units_read,target_data_units_written,transport,host_cpu_us_per_io,target_cpu_us_per_io";

#[cfg(test)]
mod tests {
    use super::*;

    fn point(index: usize, mode: Mode, transport: Option<Transport>, busy: f64) -> Point {
        let figures = Figures {
            total_ios: 2000,
            runtime_ms: 500,
            ..Default::default()
        };
        let cpu = Cpu {
            host: Side {
                busy,
                ..Default::default()
            },
            target: (mode == Mode::Remote).then(|| Side {
                busy: busy / 2.0,
                ..Default::default()
            }),
            system: SysSplit::default(),
        };
        Point {
            index,
            mode,
            transport,
            value: 1,
            label: "1".into(),
            rw: "randread".into(),
            params: PointParams {
                bs: 4096,
                iodepth: 1,
                numjobs: 1,
            },
            command: String::new(),
            window: Window::default(),
            cpu_us_per_io: CpuPerIo::of(&cpu, &figures, 2),
            figures,
            cpu,
            iops_per_cpu_pct: None,
            target_counters: None,
            perf: Value::Null,
        }
    }

    fn results(points: Vec<Point>) -> Results {
        Results {
            schema: SCHEMA.into(),
            plan: Plan::builtin("request-size").unwrap(),
            environment: Environment {
                nproc: 2,
                ..Default::default()
            },
            settings: Settings::default(),
            skipped: Vec::new(),
            points,
        }
    }

    #[test]
    fn transport_fields_and_kinds() {
        let r = results(vec![
            point(0, Mode::Local, None, 10.0),
            point(0, Mode::Remote, Some(Transport::Tcp), 20.0),
            point(0, Mode::Remote, Some(Transport::Rdma), 40.0),
        ]);
        assert_eq!(r.kinds(), vec![Kind::Local, Kind::Tcp, Kind::Rdma]);
        assert!(r.has_rdma());
        assert_eq!(r.kind_name(Kind::Tcp), "remote tcp");
        assert_eq!(r.point_of(Kind::Rdma, 0).unwrap().cpu.host.busy, 40.0);
        // 40% of 2 CPUs for 0.5 s = 0.4 CPU-s over 2000 I/Os = 200 µs; target half.
        let c = r.cpu_per_io(r.point_of(Kind::Rdma, 0).unwrap()).unwrap();
        assert!((c.host - 200.0).abs() < 1e-9 && (c.target.unwrap() - 100.0).abs() < 1e-9);
        let local = r.cpu_per_io(r.point_of(Kind::Local, 0).unwrap()).unwrap();
        assert_eq!(local.target, None);
        // The CSV's last columns: transport and CPU per I/O.
        let csv = r.csv();
        let rows: Vec<&str> = csv.lines().collect();
        assert!(rows[0].ends_with(",transport,host_cpu_us_per_io,target_cpu_us_per_io"));
        assert!(rows[1].ends_with(",,50.000,"), "{}", rows[1]);
        assert!(rows[3].ends_with(",rdma,200.000,100.000"), "{}", rows[3]);
        let cols = rows[0].split(',').count();
        assert!(rows.iter().all(|r| r.split(',').count() == cols));
        // TCP alone is still "remote" in tables.
        let tcp = results(vec![point(0, Mode::Remote, Some(Transport::Tcp), 20.0)]);
        assert_eq!(tcp.kind_name(Kind::Tcp), "remote");
        assert_eq!(tcp.primary_remote(), Some(Kind::Tcp));
    }

    #[test]
    fn results_without_the_new_fields_read_as_tcp() {
        let r = results(vec![point(0, Mode::Remote, Some(Transport::Tcp), 20.0)]);
        let mut v = serde_json::to_value(&r).unwrap();
        v["settings"].as_object_mut().unwrap().remove("transports");
        let p = v["points"][0].as_object_mut().unwrap();
        p.remove("transport");
        p.remove("cpu_us_per_io");
        let old: Results = serde_json::from_value(v).unwrap();
        assert_eq!(old.settings.transports, vec![Transport::Tcp]);
        assert_eq!(old.settings.target_rdma_addr, None);
        let p = &old.points[0];
        assert_eq!((p.transport, p.kind()), (None, Kind::Tcp));
        assert_eq!(p.cpu_us_per_io, None);
        // Computed from the CPU split as the run would have recorded it.
        assert_eq!(old.cpu_per_io(p), r.points[0].cpu_us_per_io);
        // New results: the fields are written (local points have no transport).
        let l = serde_json::to_value(point(0, Mode::Local, None, 1.0)).unwrap();
        assert!(l.get("transport").is_none() && l.get("cpu_us_per_io").is_some());
        let t = serde_json::to_value(&r.points[0]).unwrap();
        assert_eq!(t["transport"], "tcp");
    }
}
