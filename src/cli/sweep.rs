//! `farflash sweep`: run a study (a plan of `perf` points, each local and
//! remote) and write a results folder with JSON, CSV, plots and a report.
//! The engine is the `farflash-sweep` crate; see docs/sweep.md.

use anyhow::{bail, Context};
use farflash_bench::size::parse_size;
use farflash_sweep::cpuload::plan::{parse_list, CpuLoadPlan, TargetKind, NAME as CPU_LOAD};
use farflash_sweep::cpuload::CpuLoadOptions;
use farflash_sweep::spdk::SpdkBuild;
use farflash_sweep::target::RemoteAddr;
use farflash_sweep::tenants::plan::{parse_counts, TenantsPlan};
use farflash_sweep::tenants::TenantsOptions;
use farflash_sweep::transport::parse_transports;
use farflash_sweep::{Mode, Plan, SweepOptions, Transport, BUILTIN};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct SweepArgs {
    /// Plan: request-size, parallelism, cpu-cost, queue-depth, all (those four), tenants, cpu-vs-load, or a TOML plan file (repeatable).
    #[arg(
        long = "plan",
        value_name = "NAME|FILE",
        default_value = "request-size"
    )]
    pub plan: Vec<String>,
    /// Results root: each plan writes OUT/<plan>/.
    #[arg(long = "out", value_name = "DIR", default_value = "sweep-results")]
    pub out: PathBuf,
    /// Measured time per point (e.g. 3, 500ms).
    #[arg(long = "runtime", value_name = "TIME", default_value = "3")]
    pub runtime: String,
    /// Unmeasured warm-up per point.
    #[arg(
        long = "ramp",
        alias = "ramp_time",
        value_name = "TIME",
        default_value = "0.5"
    )]
    pub ramp: String,
    /// Where the sweep creates its backing file (default: the temp directory).
    #[arg(long = "dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Size of the backing file the sweep creates.
    #[arg(long = "size", value_name = "SIZE", default_value = "1G")]
    pub size: String,
    /// Use this file or block device instead (local runs and the started target's namespace).
    #[arg(long = "filename", value_name = "PATH")]
    pub filename: Option<PathBuf>,
    /// Let write plans (cpu-cost) overwrite --filename.
    #[arg(long = "allow-writes")]
    pub allow_writes: bool,
    /// Measure an existing target at ADDR:PORT instead of starting one.
    #[arg(long = "target", value_name = "ADDR:PORT", requires = "nqn")]
    pub target: Option<String>,
    /// Subsystem NQN of --target.
    #[arg(long = "nqn", value_name = "NQN")]
    pub nqn: Option<String>,
    /// Namespace of --target.
    #[arg(long = "nsid", default_value_t = 1)]
    pub nsid: u32,
    /// PID of --target when it runs on this machine (for its CPU time).
    #[arg(long = "target-pid", value_name = "PID")]
    pub target_pid: Option<u32>,
    /// Run only one side: local or remote.
    #[arg(long = "only", value_name = "local|remote")]
    pub only: Option<String>,
    /// How perf's job threads wait: block (default; fair on few CPUs) or spin.
    #[arg(long = "perf-poll", value_name = "MODE", default_value = "block")]
    pub perf_poll: String,
    /// `serve --poll` of the started target: adaptive, always, never.
    #[arg(long = "serve-poll", value_name = "MODE")]
    pub serve_poll: Option<String>,
    /// Skip the PNG/SVG plots.
    #[arg(long = "no-plots")]
    pub no_plots: bool,
    /// A note for the report (e.g. what else was running on the machine).
    #[arg(long = "note", value_name = "TEXT")]
    pub note: Option<String>,
    /// tenants plan: also run the same job over iSCSI, the comparison's
    /// baseline (`iscsi`: a private tgtd, libiscsi initiator).
    #[arg(long = "baseline", value_name = "iscsi")]
    pub baseline: Option<String>,
    /// tenants plan: tenant counts, each run alone then together.
    #[arg(long = "tenants", value_name = "N,N,..", default_value = "1,2,4")]
    pub tenants: String,
    /// tenants plan: each tenant's file size (the sequential phases move all of it, the mixed one an eighth).
    #[arg(long = "job-size", value_name = "SIZE", default_value = "256M")]
    pub job_size: String,
    /// tenants plan: event-loop threads of the started target (0: one per CPU).
    #[arg(long = "target-threads", value_name = "N", default_value_t = 0)]
    pub target_threads: u32,
    /// Remote transports, each point runs over each: tcp, rdma, or tcp,rdma.
    #[arg(
        long = "transport",
        value_name = "tcp|rdma|tcp,rdma",
        default_value = "tcp"
    )]
    pub transport: String,
    /// Listen address of the started target (RDMA: an address of an RDMA
    /// device's interface; default 127.0.0.1).
    #[arg(long = "address", value_name = "ADDR")]
    pub address: Option<String>,
    /// cpu-vs-load plan: the targets, each alone on one core (adaptive,
    /// always, never, hybrid: farflash serve --poll; spdk: SPDK's nvmf_tgt).
    /// Default: the four farflash modes, and spdk when SPDK_DIR is set.
    #[arg(long = "targets", value_name = "T,T,..")]
    pub targets: Option<String>,
    /// cpu-vs-load plan: queue depths.
    #[arg(long = "iodepths", value_name = "N,N,..", default_value = "1,4,32")]
    pub iodepths: String,
    /// cpu-vs-load plan: offered loads, % of the saturation measured first.
    #[arg(
        long = "loads",
        value_name = "PCT,PCT,..",
        default_value = "5,10,25,50,75,90,100"
    )]
    pub loads: String,
    /// cpu-vs-load plan: an SPDK build with build/bin/nvmf_tgt (default: $SPDK_DIR).
    #[arg(long = "spdk-dir", value_name = "DIR")]
    pub spdk_dir: Option<PathBuf>,
    /// Redo only the plots and report of existing results folders (OUT/<plan>/results.json).
    #[arg(long = "replot")]
    pub replot: bool,
}

/// `3` (seconds), `500ms`, `1.5s`, `2m`.
fn seconds(s: &str) -> anyhow::Result<f64> {
    let t = s.trim();
    let (num, mul) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("bad duration {s:?}"))?;
    if !(0.0..1e6).contains(&v) {
        bail!("duration {s:?} out of range");
    }
    Ok(v * mul)
}

/// Fails unless an RDMA CM id can be bound on `address` (an RDMA device's
/// interface), so that a sweep over RDMA stops before it starts anything.
fn check_rdma_address(address: &str) -> anyhow::Result<()> {
    let ip: std::net::IpAddr = address
        .parse()
        .with_context(|| format!("--address {address:?}: expected an IP address"))?;
    farflash_rdma_verbs::RdmaListener::bind(std::net::SocketAddr::new(ip, 0), 1).map_err(|e| {
        anyhow::anyhow!(
            "--transport rdma: no RDMA device on {ip} ({e}); give --address an address of an \
             RDMA device's network interface (`rdma link` lists them; Soft-RoCE: \
             `rdma link add rxe0 type rxe netdev IFACE`)"
        )
    })?;
    Ok(())
}

fn plans(names: &[String]) -> anyhow::Result<Vec<Plan>> {
    let mut v = Vec::new();
    for n in names {
        if n == "all" {
            v.extend(BUILTIN.iter().filter_map(|b| Plan::builtin(b)));
        } else {
            v.push(Plan::resolve(n)?);
        }
    }
    Ok(v)
}

/// The cpu-vs-load study's options (`--plan cpu-vs-load`).
fn cpu_load_options(a: &SweepArgs, farflash: &std::path::Path) -> anyhow::Result<CpuLoadOptions> {
    if a.target.is_some() || a.filename.is_some() || a.only.is_some() || a.address.is_some() {
        bail!("--plan cpu-vs-load starts its own targets on null namespaces over NVMe/TCP on 127.0.0.1: --target, --filename, --only and --address do not apply");
    }
    if a.transport != "tcp" || a.serve_poll.is_some() {
        bail!("--plan cpu-vs-load runs over NVMe/TCP and sets each target's polling itself (--targets): --transport and --serve-poll do not apply");
    }
    let spdk_dir = a.spdk_dir.clone().or_else(|| {
        std::env::var_os("SPDK_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let mut plan = CpuLoadPlan::builtin(spdk_dir.is_some());
    if let Some(t) = &a.targets {
        plan.targets = t
            .split(',')
            .map(TargetKind::parse)
            .collect::<anyhow::Result<_>>()
            .with_context(|| format!("--targets {t:?}"))?;
    }
    plan.iodepths = parse_list("--iodepths", &a.iodepths)?;
    plan.loads_pct = parse_list("--loads", &a.loads)?;
    plan.validate()?;
    let wants_spdk = plan.targets.contains(&TargetKind::Spdk);
    let (spdk, spdk_skipped) = match (&spdk_dir, wants_spdk) {
        (Some(d), true) => (Some(SpdkBuild::find(d)?), None),
        (None, true) => bail!("--targets spdk needs an SPDK build: set SPDK_DIR or --spdk-dir"),
        (Some(_), false) => (None, Some("not in --targets".to_string())),
        (None, false) => (None, Some("no SPDK build given (SPDK_DIR)".to_string())),
    };
    Ok(CpuLoadOptions {
        farflash: farflash.to_owned(),
        plan,
        out: a.out.clone(),
        work_dir: a.dir.clone().unwrap_or_else(std::env::temp_dir),
        runtime_s: seconds(&a.runtime)?,
        ramp_s: seconds(&a.ramp)?,
        perf_poll: a.perf_poll.clone(),
        spdk,
        spdk_skipped,
        progress_bar: std::io::stderr().is_terminal(),
        plots: !a.no_plots,
        note: a.note.clone(),
    })
}

/// `--replot`: the plots and reports of the plans' results in `out`
/// drawn again, nothing run.
fn replot(out: &Path, tenants: bool, cpu_load: bool, plans: &[Plan]) -> anyhow::Result<()> {
    if cpu_load {
        let dir = out.join(CPU_LOAD);
        farflash_sweep::cpuload::replot(&dir)?;
        println!("{}", dir.display());
    }
    if tenants {
        let dir = out.join("tenants");
        farflash_sweep::tenants::replot(&dir)?;
        println!("{}", dir.display());
    }
    for p in plans {
        let dir = out.join(&p.name);
        farflash_sweep::output::replot(&dir)?;
        println!("{}", dir.display());
    }
    Ok(())
}

/// `--plan tenants`: its options, checked against the other flags.
fn tenants_options(
    a: &SweepArgs,
    transports: &[Transport],
    farflash: &Path,
    dir: &Path,
) -> anyhow::Result<TenantsOptions> {
    if a.target.is_some() || a.filename.is_some() || a.only.is_some() {
        bail!("--plan tenants starts its own target on files of its own: --target, --filename and --only do not apply");
    }
    if transports != [Transport::Tcp] || a.address.is_some() {
        bail!("--plan tenants runs over NVMe/TCP on 127.0.0.1 (and iSCSI with --baseline): --transport {} and --address do not apply", a.transport);
    }
    let baseline_iscsi = match a.baseline.as_deref() {
        None => false,
        Some("iscsi") => true,
        Some(b) => bail!("--baseline {b:?}: the only baseline is iscsi"),
    };
    let plan = TenantsPlan::builtin(parse_counts(&a.tenants)?, parse_size(&a.job_size)?);
    let plan = TenantsPlan {
        target_threads: a.target_threads,
        ..plan
    };
    plan.validate()?;
    Ok(TenantsOptions {
        farflash: farflash.to_path_buf(),
        plan,
        out: a.out.clone(),
        dir: dir.to_path_buf(),
        perf_poll: a.perf_poll.clone(),
        serve_poll: a.serve_poll.clone(),
        progress_bar: std::io::stderr().is_terminal(),
        plots: !a.no_plots,
        note: a.note.clone(),
        baseline_iscsi,
    })
}

pub fn run(a: SweepArgs) -> anyhow::Result<()> {
    let tenants = a.plan.iter().any(|p| p == "tenants");
    let cpu_load = a.plan.iter().any(|p| p == CPU_LOAD);
    let others: Vec<String> = a
        .plan
        .iter()
        .filter(|p| *p != "tenants" && *p != CPU_LOAD)
        .cloned()
        .collect();
    let plans = plans(&others)?;
    if a.replot {
        return replot(&a.out, tenants, cpu_load, &plans);
    }
    let transports = parse_transports(&a.transport)?;
    let only = match a.only.as_deref() {
        None => None,
        Some("local") => Some(Mode::Local),
        Some("remote") => Some(Mode::Remote),
        Some(o) => bail!("--only {o}: expected local or remote"),
    };
    if !["block", "spin"].contains(&a.perf_poll.as_str()) {
        bail!("--perf-poll {}: expected block or spin", a.perf_poll);
    }
    let target = match (&a.target, &a.nqn) {
        (Some(t), Some(n)) => Some(RemoteAddr {
            addr: t.clone(),
            nqn: n.clone(),
            nsid: a.nsid,
        }),
        _ => None,
    };
    let farflash = std::env::current_exe().context("locating the farflash binary")?;
    let cpu_load = if cpu_load {
        Some(cpu_load_options(&a, &farflash)?)
    } else {
        None
    };
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tenants = if tenants {
        Some(tenants_options(&a, &transports, &farflash, &dir)?)
    } else {
        if a.baseline.is_some() {
            bail!("--baseline is for --plan tenants");
        }
        None
    };
    let rdma = transports.contains(&Transport::Rdma);
    if !plans.is_empty() && rdma && only != Some(Mode::Local) {
        if a.target.is_some() {
            bail!("--transport rdma needs the target the sweep starts: an existing target (--target) is measured over NVMe/TCP only");
        }
        check_rdma_address(a.address.as_deref().unwrap_or("127.0.0.1"))?;
    }
    if a.address.is_some() && a.target.is_some() {
        bail!("--address is the started target's; --target names an existing one");
    }
    let o = SweepOptions {
        farflash,
        plans,
        out: a.out,
        runtime_s: seconds(&a.runtime)?,
        ramp_s: seconds(&a.ramp)?,
        dir,
        size: parse_size(&a.size)?,
        filename: a.filename,
        allow_writes: a.allow_writes,
        target,
        target_pid: a.target_pid,
        only,
        perf_poll: a.perf_poll,
        serve_poll: a.serve_poll,
        progress_bar: std::io::stderr().is_terminal(),
        plots: !a.no_plots,
        note: a.note,
        transports,
        address: a.address,
    };
    if !o.plans.is_empty() {
        for d in farflash_sweep::run(&o)? {
            println!("{}", d.join("report.md").display());
        }
    }
    if let Some(t) = tenants {
        let d = farflash_sweep::tenants::run(&t)?;
        println!("{}", d.join("report.md").display());
    }
    if let Some(c) = cpu_load {
        let d = farflash_sweep::cpuload::run(&c)?;
        println!("{}", d.join("report.md").display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_plans() {
        assert_eq!(seconds("3").unwrap(), 3.0);
        assert_eq!(seconds("250ms").unwrap(), 0.25);
        assert_eq!(seconds("0.5s").unwrap(), 0.5);
        assert!(seconds("x").is_err());
        assert_eq!(plans(&["all".into()]).unwrap().len(), 4);
        assert!(plans(&["nope".into()]).is_err());
        // 192.0.2.1 (TEST-NET-1) is no interface's address, so no RDMA
        // device's either: the bind fails (ENODEV without any device,
        // EADDRNOTAVAIL with one) and the error names the address. Nothing
        // is sent anywhere.
        let e = check_rdma_address("192.0.2.1").unwrap_err().to_string();
        assert!(e.contains("no RDMA device on 192.0.2.1"), "{e}");
        assert!(e.contains("rdma link"), "{e}");
        let e = check_rdma_address("not-an-ip").unwrap_err().to_string();
        assert!(e.contains("--address \"not-an-ip\""), "{e}");
    }
}
