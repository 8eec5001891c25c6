//! `farflash sweep --plan tenants`: what a neighbour does to a tenant of a
//! shared target. One `farflash serve` exports one subsystem per tenant
//! (its own host NQN, the only one allowed, and its own file namespace);
//! every tenant runs the same job ([`plan::TenantsPlan`]), first each
//! alone, then all together, for 1, 2 and 4 tenants. Per tenant: runtime,
//! throughput, p99 and slowdown = together / alone.
//!
//! With `--baseline iscsi` the same job then runs the same way over iSCSI:
//! a private tgtd ([`crate::tgt`]) exports each tenant's file as its own
//! target, and every phase is `farflash perf --iscsi` (libiscsi).

pub mod figures;
pub mod plan;
pub mod report;
pub mod results;

use crate::progress::Progress;
use crate::runner::{run_perf, split_addr};
use crate::target::{free_port, Backing, RemoteAddr, Serve};
use anyhow::{bail, Context, Result};
use plan::{Phase, TenantsPlan};
use results::{
    compare, JobRun, PhaseRun, TenantsResults, TenantsSettings, ISCSI, NVME_TCP, TENANTS_SCHEMA,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// How the tenants study runs.
#[derive(Clone, Debug)]
pub struct TenantsOptions {
    /// The `farflash` binary.
    pub farflash: PathBuf,
    pub plan: TenantsPlan,
    /// Results go to `out/tenants/`.
    pub out: PathBuf,
    /// Where the tenants' backing files are created (removed at the end).
    pub dir: PathBuf,
    /// `perf --poll`.
    pub perf_poll: String,
    /// `serve --poll`.
    pub serve_poll: Option<String>,
    pub progress_bar: bool,
    pub plots: bool,
    pub note: Option<String>,
    /// Also run the job over iSCSI (tgtd + libiscsi) for comparison.
    pub baseline_iscsi: bool,
}

/// How the tenants reach their files.
#[derive(Clone, Debug)]
pub enum Route {
    /// `farflash serve` at this address, one subsystem per tenant.
    NvmeTcp { addr: String },
    /// tgtd: tenant i's LUN at `urls[i - 1]`.
    Iscsi { urls: Vec<String> },
}

impl Route {
    fn transport(&self) -> &'static str {
        match self {
            Route::NvmeTcp { .. } => NVME_TCP,
            Route::Iscsi { .. } => ISCSI,
        }
    }
    /// Tenant i's (target name, host name).
    fn names(&self, i: usize) -> (String, String) {
        match self {
            Route::NvmeTcp { .. } => (tenant_nqn(i), tenant_hostnqn(i)),
            Route::Iscsi { .. } => (crate::tgt::target_iqn(i as u32), tenant_initiator(i)),
        }
    }
}

/// Initiator IQN of tenant `i` (1-based) in the iSCSI baseline.
pub fn tenant_initiator(i: usize) -> String {
    format!("iqn.2026-11.io.farflash:tenant{i}-initiator")
}

/// Subsystem NQN of tenant `i` (1-based).
pub fn tenant_nqn(i: usize) -> String {
    format!("nqn.2026-11.io.farflash:tenant{i}")
}

/// Host NQN of tenant `i` (1-based).
pub fn tenant_hostnqn(i: usize) -> String {
    format!("nqn.2026-11.io.farflash:tenant{i}-host")
}

/// The target's configuration: one subsystem per tenant, each allowing
/// only its tenant's host and exporting its file as namespace 1.
pub fn serve_config(addr: &str, files: &[PathBuf], threads: u32) -> String {
    let mut s = format!("listen = [\"{addr}\"]\n\n[transport]\nthreads = {threads}\n");
    for (i, f) in files.iter().enumerate() {
        let _ = write!(
            s,
            "\n[[subsystem]]\nnqn = \"{}\"\nallowed_hosts = [\"{}\"]\n\n  [[subsystem.namespace]]\n  nsid = 1\n  backend = \"file\"\n  path = \"{}\"\n",
            tenant_nqn(i + 1),
            tenant_hostnqn(i + 1),
            f.display()
        );
    }
    s
}

/// The perf arguments of one phase of tenant `i`.
pub fn phase_args(addr: &str, i: usize, ph: &Phase, poll: &str) -> Result<Vec<String>> {
    let (host, port) = split_addr(addr)?;
    let mut a: Vec<String> = vec![
        "perf".into(),
        "-t".into(),
        "tcp".into(),
        "-a".into(),
        host,
        "-s".into(),
        port.to_string(),
        "-n".into(),
        tenant_nqn(i),
        "-q".into(),
        tenant_hostnqn(i),
        "--nsid".into(),
        "1".into(),
    ];
    a.extend(job_args(ph, poll));
    Ok(a)
}

/// The perf arguments of one phase of tenant `i` over iSCSI (LUN `url`).
pub fn iscsi_phase_args(url: &str, i: usize, ph: &Phase, poll: &str) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "perf".into(),
        "--iscsi".into(),
        url.into(),
        "--initiator".into(),
        tenant_initiator(i),
    ];
    a.extend(job_args(ph, poll));
    a
}

/// The job part of a phase's perf arguments, the same for both transports.
fn job_args(ph: &Phase, poll: &str) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--rw".into(),
        ph.rw.clone(),
        "--bs".into(),
        ph.bs.to_string(),
        "--iodepth".into(),
        ph.iodepth.to_string(),
        "--numjobs".into(),
        "1".into(),
        "--size".into(),
        ph.size.to_string(),
        "--poll".into(),
        poll.into(),
        "--output-format".into(),
        "json".into(),
    ];
    if let Some(m) = ph.rwmixread {
        a.extend(["--rwmixread".into(), m.to_string()]);
    }
    a
}

fn io_bytes(perf: &serde_json::Value) -> u64 {
    ["read", "write"]
        .iter()
        .filter_map(|d| perf["aggregate"][d]["io_bytes"].as_u64())
        .sum()
}

/// Runs one phase for tenant `i` and reads its figures.
fn run_phase(farflash: &Path, route: &Route, i: usize, ph: &Phase, poll: &str) -> Result<PhaseRun> {
    let args = match route {
        Route::NvmeTcp { addr } => phase_args(addr, i, ph, poll)?,
        Route::Iscsi { urls } => {
            let url = urls.get(i - 1).context("no iSCSI target for this tenant")?;
            iscsi_phase_args(url, i, ph, poll)
        }
    };
    // A fixed amount of work: allow a slow, shared machine plenty of time.
    let (out, _end, _samples) = run_perf(farflash, &args, None, Duration::from_secs(600))?;
    let perf: serde_json::Value =
        serde_json::from_str(&out).context("perf printed no JSON document")?;
    let (r, w) = ph.directions();
    let mut p99: f64 = 0.0;
    let mut f = None;
    for (on, write) in [(r, false), (w, true)] {
        if on {
            let x = crate::perfjson::figures(&perf, write)?;
            p99 = p99.max(x.lat_us.p99);
            f = Some(x);
        }
    }
    let f = f.context("phase with no direction")?;
    let bytes = io_bytes(&perf);
    if bytes != ph.size {
        bail!(
            "tenant {i} phase {}: perf moved {bytes} bytes, the phase is {} bytes",
            ph.name,
            ph.size
        );
    }
    Ok(PhaseRun {
        phase: ph.name.clone(),
        command: format!("farflash {}", args.join(" ")),
        runtime_ms: f.runtime_ms,
        bytes,
        iops: f.iops,
        bw_mib_s: f.bw_mib_s,
        p99_us: p99,
        perf,
    })
}

/// Runs the job of tenant `i` (1-based), phase after phase.
fn run_job(
    o: &TenantsOptions,
    route: &Route,
    tenants: usize,
    i: usize,
    together: bool,
) -> Result<JobRun> {
    let mut phases = Vec::new();
    for ph in &o.plan.phases {
        phases.push(
            run_phase(&o.farflash, route, i, ph, &o.perf_poll).with_context(|| {
                format!(
                    "{}: tenant {i} of {tenants}, phase {}",
                    route.transport(),
                    ph.name
                )
            })?,
        );
    }
    let (subsystem, host) = route.names(i);
    let mut r = JobRun::new(tenants, i, together, subsystem, host, phases);
    r.transport = route.transport().into();
    Ok(r)
}

/// The study over one route: a warm-up job per tenant (not measured: first
/// touch of its file, the target's buffers, the page cache), then for each
/// tenant count every tenant alone, then all together (a barrier).
fn study(
    o: &TenantsOptions,
    route: &Route,
    progress: &mut Progress,
    runs: &mut Vec<JobRun>,
) -> Result<()> {
    let n = o.plan.max_tenants();
    let t = route.transport();
    for i in 1..=n {
        let r = run_job(o, route, n, i, false)?;
        progress.step(&format!("{t}: warm-up: tenant {i}: {} ms", r.runtime_ms));
    }
    for &c in &o.plan.counts {
        for i in 1..=c {
            let r = run_job(o, route, c, i, false)?;
            progress.step(&format!(
                "{t}: tenants {c}: tenant {i} alone: {} ms, {:.1} MiB/s, p99 {:.0} µs",
                r.runtime_ms, r.throughput_mib_s, r.p99_us
            ));
            runs.push(r);
        }
        let barrier = Arc::new(Barrier::new(c));
        let together: Vec<Result<JobRun>> = std::thread::scope(|s| {
            let hs: Vec<_> = (1..=c)
                .map(|i| {
                    let b = barrier.clone();
                    s.spawn(move || {
                        b.wait();
                        run_job(o, route, c, i, true)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a tenant's thread panicked")))
                })
                .collect()
        });
        let mut line = format!("{t}: tenants {c}: together:");
        for r in together {
            let r = r?;
            let _ = write!(line, " t{} {} ms", r.tenant, r.runtime_ms);
            runs.push(r);
        }
        progress.step(&line);
    }
    Ok(())
}

/// Runs the study and writes `out/tenants/`; returns that folder.
pub fn run(o: &TenantsOptions) -> Result<PathBuf> {
    o.plan.validate()?;
    if o.baseline_iscsi {
        // Before anything runs: a missing tgt is an error naming the package.
        crate::tgt::check_installed()?;
    }
    let n = o.plan.max_tenants();
    // Each tenant's file in its own folder (Backing names files by PID).
    let mut backings = Vec::new();
    for i in 1..=n {
        let d = o
            .dir
            .join(format!("farflash-tenants-{}", std::process::id()));
        let d = d.join(format!("tenant{i}"));
        backings.push(
            Backing::create(&d, o.plan.file_size)
                .with_context(|| format!("creating tenant {i}'s file in {}", d.display()))?,
        );
    }
    let files: Vec<PathBuf> = backings.iter().map(|b| b.path.clone()).collect();
    let root = files[0]
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let addr = format!("127.0.0.1:{}", free_port()?);
    let config = serve_config(&addr, &files, o.plan.target_threads);
    let cfg_path = o
        .dir
        .join(format!("farflash-tenants-{}.toml", std::process::id()));
    std::fs::write(&cfg_path, &config)
        .with_context(|| format!("writing {}", cfg_path.display()))?;
    let remote = RemoteAddr {
        addr: addr.clone(),
        nqn: tenant_nqn(1),
        nsid: 1,
    };
    let serve = Serve::start_config(&o.farflash, &cfg_path, remote, o.serve_poll.as_deref());
    let _ = std::fs::remove_file(&cfg_path);
    let mut serve = serve?;
    let per_study: usize = n + o.plan.counts.iter().map(|c| c + 1).sum::<usize>();
    let total = per_study * if o.baseline_iscsi { 2 } else { 1 };
    let per_job = o.plan.job_bytes() as f64 / 300e6 + 0.5;
    let mut progress = Progress::new(total as u64, per_job, o.progress_bar);
    let mut runs = Vec::new();
    let result = study(
        o,
        &Route::NvmeTcp { addr: addr.clone() },
        &mut progress,
        &mut runs,
    );
    serve.stop();
    let command = serve.command.clone();
    // The baseline: the same files, one tgtd target each, after the
    // NVMe/TCP target has stopped (never both at once).
    let mut baseline_command = None;
    let result = result.and_then(|()| {
        if !o.baseline_iscsi {
            return Ok(());
        }
        let log_dir = o
            .dir
            .join(format!("farflash-tenants-{}", std::process::id()));
        let tgtd = crate::tgt::Tgtd::start(&log_dir)?;
        baseline_command = Some(tgtd.command.clone());
        let urls = files
            .iter()
            .enumerate()
            .map(|(k, f)| tgtd.add_target(k as u32 + 1, f))
            .collect::<Result<Vec<_>>>()?;
        study(o, &Route::Iscsi { urls }, &mut progress, &mut runs)
    });
    drop(backings);
    if let Some(r) = root {
        let _ = std::fs::remove_dir_all(r);
    }
    result?;
    progress.finish();
    let version = runs
        .first()
        .and_then(|r| r.phases.first())
        .and_then(|p| p.perf.get("farflash_version"))
        .and_then(|v| v.as_str())
        .unwrap_or("unknown")
        .to_owned();
    let res = TenantsResults {
        schema: TENANTS_SCHEMA.into(),
        plan: o.plan.clone(),
        environment: crate::env::capture(&version),
        settings: TenantsSettings {
            target_command: command,
            target_config: config,
            backing_dir: o.dir.display().to_string(),
            perf_poll: o.perf_poll.clone(),
            note: o.note.clone(),
            baseline_command,
        },
        comparisons: compare(&runs),
        runs,
    };
    let dir = o.out.join(&o.plan.name);
    write_folder(&res, &dir, o.plots)?;
    Ok(dir)
}

impl crate::output::Study for TenantsResults {
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

/// Writes results.json, results.csv, the plots (when `plots`) and report.md.
pub fn write_folder(r: &TenantsResults, dir: &Path, plots: bool) -> Result<()> {
    crate::output::write_study(r, dir, plots)
}

/// Rebuilds the plots and report of `dir/results.json`.
pub fn replot(dir: &Path) -> Result<()> {
    let p = dir.join("results.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let r: TenantsResults =
        serde_json::from_str(&text).with_context(|| format!("{}", p.display()))?;
    if r.schema != TENANTS_SCHEMA {
        bail!(
            "{}: schema {:?}, expected {TENANTS_SCHEMA}",
            p.display(),
            r.schema
        );
    }
    figures::write(&r, dir)?;
    std::fs::write(dir.join("report.md"), report::markdown(&r, true))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_args() {
        let c = serve_config("127.0.0.1:9", &["/a".into(), "/b".into()], 1);
        let v: toml::Value = toml::from_str(&c).unwrap();
        let subs = v["subsystem"].as_array().unwrap();
        assert_eq!(subs.len(), 2);
        assert_eq!(subs[1]["nqn"].as_str(), Some(tenant_nqn(2).as_str()));
        assert_eq!(
            subs[1]["allowed_hosts"][0].as_str(),
            Some(tenant_hostnqn(2).as_str())
        );
        assert_eq!(subs[0]["namespace"][0]["path"].as_str(), Some("/a"));
        let p = TenantsPlan::builtin(vec![1], 1 << 20);
        let a = phase_args("127.0.0.1:9", 2, &p.phases[1], "block").unwrap();
        let a = a.join(" ");
        assert!(a.contains("-q nqn.2026-11.io.farflash:tenant2-host"), "{a}");
        assert!(
            a.contains("--rw randrw") && a.ends_with("--rwmixread 70"),
            "{a}"
        );
        assert!(a.contains("--size 131072"), "{a}");
        // The baseline: the same job arguments after its LUN and initiator.
        let b = iscsi_phase_args("iscsi://127.0.0.1:9/iqn.x:t2/1", 2, &p.phases[1], "block");
        let b = b.join(" ");
        assert!(b.starts_with("perf --iscsi iscsi://127.0.0.1:9/iqn.x:t2/1 --initiator iqn.2026-11.io.farflash:tenant2-initiator --rw randrw"), "{b}");
        assert!(a.ends_with(b.split_once(" --rw ").unwrap().1), "{a} / {b}");
    }
}
