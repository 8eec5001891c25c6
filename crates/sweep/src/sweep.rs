//! One plan end to end: backing data, target, every point local and
//! remote (interleaved, so drift of a shared machine hits both alike),
//! then the results folder.

use crate::plan::Plan;
use crate::progress::Progress;
use crate::results::{Mode, Point, Results, Settings, Skipped, SCHEMA};
use crate::runner::{run_point, Remote, RunSettings, Where};
use crate::target::{Backing, RemoteAddr, Serve, ServeConfig};
use crate::transport::Transport;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Everything `farflash sweep` was asked.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// The `farflash` binary (perf and serve are run from it).
    pub farflash: PathBuf,
    pub plans: Vec<Plan>,
    /// Results go to `out/<plan name>/`.
    pub out: PathBuf,
    pub runtime_s: f64,
    pub ramp_s: f64,
    /// Where the sweep creates its backing file.
    pub dir: PathBuf,
    /// Size of the backing file the sweep creates, bytes.
    pub size: u64,
    /// An existing file or device instead (local runs, and the spawned target's namespace).
    pub filename: Option<PathBuf>,
    /// Let write plans write to `filename`.
    pub allow_writes: bool,
    /// An existing target instead of a spawned one.
    pub target: Option<RemoteAddr>,
    /// Its PID, when it runs on this machine (for its CPU time).
    pub target_pid: Option<u32>,
    /// Run only this side.
    pub only: Option<Mode>,
    /// `perf --poll`.
    pub perf_poll: String,
    /// `serve --poll` of the spawned target.
    pub serve_poll: Option<String>,
    /// Show a progress bar (else plain lines on stderr).
    pub progress_bar: bool,
    /// Write PNG and SVG plots.
    pub plots: bool,
    /// Free text for the report.
    pub note: Option<String>,
    /// The remote runs' transports (`--transport`), each point runs them in this order.
    pub transports: Vec<Transport>,
    /// The started target's listen address (`--address`; default 127.0.0.1).
    pub address: Option<String>,
}

/// Runs every plan; returns the results folders.
pub fn run(o: &SweepOptions) -> Result<Vec<PathBuf>> {
    if o.runtime_s <= 0.0 || o.ramp_s < 0.0 {
        bail!("--runtime must be positive and --ramp not negative");
    }
    if o.transports.is_empty() {
        bail!("--transport: give tcp, rdma or tcp,rdma");
    }
    if o.target.is_some() && o.transports.contains(&Transport::Rdma) {
        bail!("--transport rdma needs the target the sweep starts: an existing target (--target) is measured over NVMe/TCP only");
    }
    if let (Some(f), false) = (&o.filename, o.allow_writes) {
        if let Some(p) = o.plans.iter().find(|p| p.writes()) {
            bail!(
                "plan {} writes, and would overwrite {}: pass --allow-writes to accept that",
                p.name,
                f.display()
            );
        }
    }
    let per_plan_runs: Vec<usize> = o.plans.iter().map(|p| p.values.len() * sides(o)).collect();
    let total: usize = per_plan_runs.iter().sum();
    let per_run = o.runtime_s + o.ramp_s + 0.4;
    let mut progress = Progress::new(total as u64, per_run, o.progress_bar);
    let mut dirs = Vec::new();
    for plan in &o.plans {
        let dir = o.out.join(&plan.name);
        let r = run_plan(o, plan, &mut progress)?;
        crate::output::write_folder(&r, &dir, o.plots)?;
        progress.println(&format!("{}: results in {}", plan.name, dir.display()));
        dirs.push(dir);
    }
    progress.finish();
    Ok(dirs)
}

/// perf runs per point: local, and one remote run per transport.
fn sides(o: &SweepOptions) -> usize {
    match o.only {
        Some(Mode::Local) => 1,
        Some(Mode::Remote) => o.transports.len(),
        None => 1 + o.transports.len(),
    }
}

/// The modes a sweep leaves out, and why.
fn skipped_modes(o: &SweepOptions, has_backing: bool) -> Vec<Skipped> {
    let mut skipped = Vec::new();
    let want = |m: Mode| o.only.is_none_or(|x| x == m);
    if want(Mode::Local) && !has_backing {
        skipped.push(Skipped {
            mode: Mode::Local,
            reason: "an existing target was given (--target) without --filename, so there is no local file to compare with".into(),
        });
    }
    for m in [Mode::Local, Mode::Remote] {
        if !want(m) {
            skipped.push(Skipped {
                mode: m,
                reason: format!("--only {} was given", o.only.map(Mode::name).unwrap_or("")),
            });
        }
    }
    skipped
}

/// Runs every point of `plan` in every place, reporting progress.
fn run_points(
    plan: &Plan,
    wheres: &[Where],
    rs: &RunSettings,
    progress: &mut Progress,
) -> Result<Vec<Point>> {
    let mut points = Vec::new();
    for (i, params) in plan.points().iter().enumerate() {
        for w in wheres {
            let p = run_point(plan, i, params, w, rs).with_context(|| {
                format!("plan {} point {}", plan.name, plan.label(plan.values[i]))
            })?;
            progress.step(&format!(
                "{} {} {}={}: {:.0} IOPS, {:.1} MiB/s, p50 {:.0} µs",
                plan.name,
                p.kind().name(),
                plan.vary.name(),
                p.label,
                p.figures.iops,
                p.figures.bw_mib_s,
                p.figures.lat_us.p50
            ));
            points.push(p);
        }
    }
    Ok(points)
}

/// Runs one plan and returns its results (not yet written).
pub fn run_plan(o: &SweepOptions, plan: &Plan, progress: &mut Progress) -> Result<Results> {
    plan.validate()?;
    let want = |m: Mode| o.only.is_none_or(|x| x == m);
    // Backing data: given, or created (unless only an external target is measured).
    let backing = match (&o.filename, &o.target) {
        (Some(f), _) => Some(Backing::existing(f)?),
        (None, Some(_)) => None,
        (None, None) => Some(
            Backing::create(&o.dir, o.size)
                .with_context(|| format!("creating the backing file in {}", o.dir.display()))?,
        ),
    };
    let skipped = skipped_modes(o, backing.is_some());
    // The remote side: an existing target, or one the sweep starts on the backing file.
    let mut serve = None;
    let remote = match (&o.target, &backing) {
        (Some(t), _) => Some((t.clone(), o.target_pid)),
        (None, Some(b)) if want(Mode::Remote) => {
            let cfg = ServeConfig {
                threads: plan.target_threads,
                cpus: plan.target_cpus.clone(),
                poll: o.serve_poll.clone(),
                address: o.address.clone(),
                rdma: o.transports.contains(&Transport::Rdma),
            };
            let s = Serve::start(&o.farflash, &b.path, &cfg)?;
            let r = (s.remote.clone(), Some(s.pid()));
            serve = Some(s);
            Some(r)
        }
        _ => None,
    };
    let rs = RunSettings {
        farflash: o.farflash.clone(),
        runtime_s: o.runtime_s,
        ramp_s: o.ramp_s,
        perf_poll: o.perf_poll.clone(),
    };
    let mut wheres = Vec::new();
    if let (true, Some(b)) = (want(Mode::Local), &backing) {
        wheres.push(Where::Local(b.path.clone()));
    }
    let rdma_addr = serve.as_ref().and_then(|s| s.rdma_addr.clone());
    if let (true, Some((r, pid))) = (want(Mode::Remote), &remote) {
        for &t in &o.transports {
            let addr = match t {
                Transport::Tcp => r.addr.clone(),
                Transport::Rdma => rdma_addr
                    .clone()
                    .context("the started target has no RDMA listener")?,
            };
            wheres.push(Where::Remote(Remote {
                target: r.clone(),
                pid: *pid,
                transport: t,
                addr,
            }));
        }
    }
    let points = run_points(plan, &wheres, &rs, progress)?;
    let farflash_version = points
        .first()
        .and_then(|p| p.perf.get("farflash_version"))
        .and_then(|v| v.as_str())
        .unwrap_or("unknown")
        .to_owned();
    let (target_addr, target_nqn, target_nsid) = remote
        .as_ref()
        .map(|(r, _)| (r.addr.clone(), r.nqn.clone(), r.nsid))
        .unwrap_or_default();
    let settings = Settings {
        runtime_s: o.runtime_s,
        ramp_s: o.ramp_s,
        perf_poll: o.perf_poll.clone(),
        backing: backing.as_ref().map(|b| b.path.display().to_string()),
        backing_size: backing.as_ref().map(|b| b.size).unwrap_or(0),
        backing_created: backing.as_ref().is_some_and(|b| b.owned),
        target_kind: if o.target.is_some() {
            "external"
        } else {
            "spawned"
        }
        .into(),
        target_addr,
        target_nqn,
        target_nsid: target_nsid.max(1),
        target_command: serve.as_ref().map(|s| s.command.clone()),
        target_cpu_known: remote.as_ref().is_some_and(|(_, pid)| pid.is_some()),
        note: o.note.clone(),
        transports: o.transports.clone(),
        target_rdma_addr: rdma_addr,
    };
    if let Some(mut s) = serve {
        s.stop();
    }
    Ok(Results {
        schema: SCHEMA.into(),
        plan: plan.clone(),
        environment: crate::env::capture(&farflash_version),
        settings,
        skipped,
        points,
    })
}

/// The default results root: `sweep-results` in the working directory.
pub fn default_out() -> PathBuf {
    Path::new("sweep-results").to_owned()
}
