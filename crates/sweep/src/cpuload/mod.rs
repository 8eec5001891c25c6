//! `farflash sweep --plan cpu-vs-load` (issue 34): does a target's CPU
//! follow the work? Each target kind runs alone on one core (`farflash
//! serve --null --threads 1 --cpus-allowed 0 --poll MODE` for every polling
//! mode, and SPDK's `nvmf_tgt` on that core when an SPDK build is given),
//! `farflash perf` on another core. Per queue depth a saturation run (no
//! rate) measures S IOPS, then runs offered 5 .. 100 % of S
//! (`perf --rate_iops`) record achieved IOPS, p50/p99 and the CPU of
//! target (`/proc/<pid>/stat` over perf's measured interval) and host
//! (perf's own `cpu`), both in % of one core.

pub mod figures;
pub mod plan;
pub mod report;
pub mod results;

use crate::plan::{size_label, PointParams};
use crate::procfs::nproc;
use crate::progress::Progress;
use crate::runner::{measure, perf_args, Measured, Remote, RunSettings, Where};
use crate::spdk::{SpdkBuild, SpdkTgt};
use crate::target::{RemoteAddr, Serve, ServeConfig};
use crate::transport::Transport;
use anyhow::{bail, Context, Result};
use plan::{offered_rate, CpuLoadPlan, Step, TargetKind};
use results::{CpuLoadResults, CpuLoadSettings, LoadRun, TargetStart, CPU_LOAD_SCHEMA};
use std::path::{Path, PathBuf};

/// How the study runs.
#[derive(Clone, Debug)]
pub struct CpuLoadOptions {
    /// The `farflash` binary.
    pub farflash: PathBuf,
    pub plan: CpuLoadPlan,
    /// Results go to `out/cpu-vs-load/`.
    pub out: PathBuf,
    /// Scratch space (SPDK's config, log and RPC socket).
    pub work_dir: PathBuf,
    pub runtime_s: f64,
    pub ramp_s: f64,
    /// `perf --poll` (block: the host's CPU follows the load too).
    pub perf_poll: String,
    /// The SPDK build, when its target is in the plan.
    pub spdk: Option<SpdkBuild>,
    /// Why SPDK's target is not in the plan (for the report).
    pub spdk_skipped: Option<String>,
    pub progress_bar: bool,
    pub plots: bool,
    pub note: Option<String>,
}

/// The target's CPU and the host's (`perf --cpus-allowed`): 0 and 1, or
/// both 0 on a one-CPU machine.
pub fn cpus() -> (u32, u32) {
    (0, if nproc() >= 2 { 1 } else { 0 })
}

/// A started target of either kind.
enum Running {
    Farflash(Serve),
    Spdk(SpdkTgt),
}

impl Running {
    fn start(o: &CpuLoadOptions, kind: TargetKind, cpu: u32) -> Result<Running> {
        match (kind.poll(), &o.spdk) {
            (Some(poll), _) => {
                let cfg = ServeConfig {
                    threads: Some(1),
                    cpus: Some(cpu.to_string()),
                    poll: Some(poll.into()),
                    ..Default::default()
                };
                let ns = ["--null".to_string(), size_label(o.plan.namespace_size)];
                Ok(Running::Farflash(Serve::start_with(
                    &o.farflash,
                    &ns,
                    &cfg,
                )?))
            }
            (None, Some(b)) => Ok(Running::Spdk(SpdkTgt::start(
                b,
                cpu,
                o.plan.namespace_size,
                &o.work_dir,
            )?)),
            (None, None) => {
                bail!("the plan has SPDK's target but no SPDK build was given (SPDK_DIR)")
            }
        }
    }
    fn remote(&self) -> &RemoteAddr {
        match self {
            Running::Farflash(s) => &s.remote,
            Running::Spdk(s) => &s.remote,
        }
    }
    fn pid(&self) -> u32 {
        match self {
            Running::Farflash(s) => s.pid(),
            Running::Spdk(s) => s.pid(),
        }
    }
    fn command(&self) -> String {
        match self {
            Running::Farflash(s) => s.command.clone(),
            Running::Spdk(s) => s.command.clone(),
        }
    }
    fn stop(&mut self) {
        match self {
            Running::Farflash(s) => s.stop(),
            Running::Spdk(s) => s.stop(),
        }
    }
}

/// The perf arguments of one step against `remote` (`rate`: `--rate_iops`).
pub fn step_args(
    plan: &CpuLoadPlan,
    step: &Step,
    remote: &RemoteAddr,
    rs: &RunSettings,
    host_cpu: u32,
    rate: Option<u64>,
) -> Result<Vec<String>> {
    let w = Where::Remote(Remote {
        target: remote.clone(),
        pid: None,
        transport: Transport::Tcp,
        addr: remote.addr.clone(),
    });
    let params = PointParams {
        bs: plan.bs,
        iodepth: step.iodepth,
        numjobs: 1,
    };
    let mut a = perf_args(&w, &plan.rw, &params, rs)?;
    a.extend(["--cpus-allowed".into(), host_cpu.to_string()]);
    if let Some(r) = rate {
        a.extend(["--rate_iops".into(), r.to_string()]);
    }
    Ok(a)
}

/// Runs one step and records it.
fn run_step(
    o: &CpuLoadOptions,
    t: &Running,
    step: &Step,
    rate: Option<u64>,
    rs: &RunSettings,
) -> Result<LoadRun> {
    let args = step_args(&o.plan, step, t.remote(), rs, cpus().1, rate)?;
    let Measured {
        perf,
        figures,
        window,
        cpu,
    } = measure(rs, &args, Some(t.pid()), o.plan.rw.contains("write"))?;
    // cpu.target is in % of all CPUs: back to % of one core.
    let n = nproc() as f64;
    let tcpu = cpu.target.map(|s| (s.usr * n, s.sys * n));
    let mut r = LoadRun::new(
        step.target,
        step.iodepth,
        step.load_pct,
        rate,
        &figures,
        tcpu,
    );
    r.command = format!("farflash {}", args.join(" "));
    r.window = window;
    r.perf = perf;
    Ok(r)
}

/// Every step of one (started) target; a saturation run sets the rates of
/// the loads after it.
fn run_target(
    o: &CpuLoadOptions,
    t: &Running,
    kind: TargetKind,
    progress: &mut Progress,
    runs: &mut Vec<LoadRun>,
) -> Result<()> {
    let rs = RunSettings {
        farflash: o.farflash.clone(),
        runtime_s: o.runtime_s,
        ramp_s: o.ramp_s,
        perf_poll: o.perf_poll.clone(),
    };
    let mut sat = 0.0;
    for step in o.plan.steps().iter().filter(|s| s.target == kind) {
        let rate = step.load_pct.map(|p| offered_rate(sat, p));
        let what = match step.load_pct {
            None => format!("{} QD {}: saturation", kind.name(), step.iodepth),
            Some(p) => format!("{} QD {}: {p} %", kind.name(), step.iodepth),
        };
        let r = run_step(o, t, step, rate, &rs).with_context(|| what.clone())?;
        if step.load_pct.is_none() {
            if r.iops <= 0.0 {
                bail!("{what}: no I/O completed, so there is no rate to offer fractions of");
            }
            sat = r.iops;
        }
        progress.step(&format!(
            "{what}: {:.0} IOPS (offered {}), p50 {:.1} µs, target CPU {}, host CPU {:.0} %",
            r.iops,
            rate.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            r.lat_us.p50,
            r.target_cpu_pct
                .map(|c| format!("{c:.0} %"))
                .unwrap_or_else(|| "?".into()),
            r.host_cpu_pct
        ));
        runs.push(r);
    }
    Ok(())
}

fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// Runs the study and writes `out/cpu-vs-load/`; returns that folder.
pub fn run(o: &CpuLoadOptions) -> Result<PathBuf> {
    o.plan.validate()?;
    if o.runtime_s <= 0.0 || o.ramp_s < 0.0 {
        bail!("--runtime must be positive and --ramp not negative");
    }
    if o.plan.targets.contains(&TargetKind::Spdk) && o.spdk.is_none() {
        bail!("target spdk needs an SPDK build: set SPDK_DIR (or --spdk-dir)");
    }
    let steps = o.plan.steps().len();
    let mut progress = Progress::new(steps as u64, o.runtime_s + o.ramp_s + 0.5, o.progress_bar);
    let load_before = loadavg();
    let (tcpu, hcpu) = cpus();
    let mut runs = Vec::new();
    let mut starts = Vec::new();
    for &kind in &o.plan.targets {
        let mut t =
            Running::start(o, kind, tcpu).with_context(|| format!("starting {}", kind.label()))?;
        starts.push(TargetStart {
            kind,
            command: t.command(),
        });
        let r = run_target(o, &t, kind, &mut progress, &mut runs);
        t.stop();
        r?;
    }
    progress.finish();
    let version = runs
        .first()
        .and_then(|r| r.perf.get("farflash_version"))
        .and_then(|v| v.as_str())
        .unwrap_or("unknown")
        .to_owned();
    let res = CpuLoadResults {
        schema: CPU_LOAD_SCHEMA.into(),
        plan: o.plan.clone(),
        environment: crate::env::capture(&version),
        settings: CpuLoadSettings {
            runtime_s: o.runtime_s,
            ramp_s: o.ramp_s,
            perf_poll: o.perf_poll.clone(),
            host_cpus: hcpu.to_string(),
            target_cpus: tcpu.to_string(),
            targets: starts,
            spdk: o.spdk.as_ref().map(|b| {
                format!(
                    "{} ({})",
                    b.dir.display(),
                    b.version().unwrap_or_else(|| "unknown version".into())
                )
            }),
            spdk_skipped: o.spdk_skipped.clone(),
            note: o.note.clone(),
            load_average_before: load_before,
            load_average_after: loadavg(),
        },
        runs,
    };
    let dir = o.out.join(&o.plan.name);
    write_folder(&res, &dir, o.plots)?;
    Ok(dir)
}

impl crate::output::Study for CpuLoadResults {
    fn write_data(&self, dir: &Path) -> Result<()> {
        self.write(dir)
    }
    fn write_plots(&self, dir: &Path) -> Result<()> {
        figures::write(self, dir)
    }
    fn report(&self, plots: bool) -> String {
        report::markdown(self, plots)
    }
}

/// Writes results.json, results.schema.json, results.csv, the plots (when
/// `plots`) and report.md.
pub fn write_folder(r: &CpuLoadResults, dir: &Path, plots: bool) -> Result<()> {
    crate::output::write_study(r, dir, plots)
}

/// Checks a results.json text against the study's schema and reads it.
pub fn load(text: &str) -> Result<CpuLoadResults> {
    let schema: serde_json::Value = serde_json::from_str(results::CPU_LOAD_SCHEMA_JSON)?;
    let doc: serde_json::Value = serde_json::from_str(text).context("results.json is not JSON")?;
    crate::schema::validate(&schema, &doc)?;
    Ok(serde_json::from_value(doc)?)
}

/// Rebuilds results.csv, the plots and report.md of `dir/results.json`.
pub fn replot(dir: &Path) -> Result<()> {
    let p = dir.join("results.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let r = load(&text).with_context(|| format!("{}", p.display()))?;
    write_folder(&r, dir, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_arguments_of_a_paced_step() {
        let plan = CpuLoadPlan::builtin(false);
        let rs = RunSettings {
            farflash: "farflash".into(),
            runtime_s: 2.0,
            ramp_s: 0.5,
            perf_poll: "block".into(),
        };
        let remote = RemoteAddr {
            addr: "127.0.0.1:4801".into(),
            nqn: "nqn.x:y".into(),
            nsid: 1,
        };
        let step = plan.steps()[9];
        let a = step_args(&plan, &step, &remote, &rs, 1, Some(1234))
            .unwrap()
            .join(" ");
        assert!(a.starts_with("perf -t tcp -a 127.0.0.1 -s 4801 -n nqn.x:y --nsid 1 --rw randread --bs 4096 --iodepth 4 --numjobs 1 --runtime 2.000 --poll block"), "{a}");
        assert!(
            a.ends_with("--ramp_time 0.500 --cpus-allowed 1 --rate_iops 1234"),
            "{a}"
        );
        let sat = step_args(&plan, &plan.steps()[0], &remote, &rs, 1, None)
            .unwrap()
            .join(" ");
        assert!(
            !sat.contains("--rate_iops") && sat.contains("--iodepth 1 "),
            "{sat}"
        );
    }
}
