//! Sets up the target (a remote controller with one I/O queue per job, or
//! a local backend), runs the job threads, and collects their statistics
//! and the CPU accounting of the measured interval.

use crate::cpu::{cpu_use, proc_stat, process_rusage, sys_cpu, CpuUse, ProcStat, Rusage, SysCpu};
use crate::engine::iscsi::{probe, Iscsi};
use crate::engine::local::Local;
use crate::engine::remote::Remote;
use crate::engine::Engine;
use crate::job::{JobRun, Progress, PROGRESS_PERIOD};
use crate::spec::{JobSpec, Target};
use crate::stats::JobStats;
use crate::workload::Region;
use anyhow::{bail, Context};
use farflash_backend::{open_file, DirectMode, FileOptions, SharedBackend};
use farflash_host::{Controller, ControllerInfo, IoQueueOptions};
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Everything a report needs.
#[derive(Debug)]
pub struct RunResult {
    pub jobs: Vec<JobStats>,
    pub total: JobStats,
    /// Process CPU over the measured interval.
    pub cpu: CpuUse,
    /// System-wide CPU (mpstat split) over the measured interval.
    pub sys_cpu: SysCpu,
    pub block_size: u32,
    pub capacity: u64,
    /// Human description of the target.
    pub target: String,
}

enum Setup {
    Remote {
        ctrl: Box<Controller>,
        info: Box<ControllerInfo>,
        nsid: u32,
        lba: u32,
        capacity: u64,
    },
    Local(SharedBackend),
    /// Block size and capacity read at a probe login; each job logs in itself.
    Iscsi {
        lba: u32,
        capacity: u64,
    },
}

fn setup(spec: &JobSpec) -> anyhow::Result<Setup> {
    match &spec.target {
        Target::Remote { opts, nsid } => {
            let n = u16::try_from(spec.numjobs).context("--numjobs too large")?;
            let mut ctrl = Controller::connect_with_queues(opts, n)
                .with_context(|| format!("connecting to {}", opts.describe()))?;
            ctrl.start_keep_alive()?;
            let info = ctrl.info().clone();
            if info.io_queues < n {
                bail!(
                    "the controller granted {} I/O queues, --numjobs={} needs one each",
                    info.io_queues,
                    n
                );
            }
            let ns = ctrl
                .identify_ns(*nsid)
                .with_context(|| format!("Identify Namespace {nsid}"))?;
            if ns.nsze == 0 {
                bail!("namespace {nsid} is not active (NSZE 0)");
            }
            if !(9..=16).contains(&ns.lbads) {
                bail!("namespace {nsid}: unsupported LBA data size 2^{}", ns.lbads);
            }
            let lba = 1u32 << ns.lbads;
            Ok(Setup::Remote {
                ctrl: Box::new(ctrl),
                info: Box::new(info),
                nsid: *nsid,
                lba,
                capacity: ns.nsze.saturating_mul(lba as u64),
            })
        }
        Target::Iscsi(t) => {
            let (lba, capacity) = probe(t)?;
            Ok(Setup::Iscsi { lba, capacity })
        }
        Target::Local { path, direct } => {
            let need = spec.size.map(|s| spec.offset + s);
            let exists = path.exists();
            let regular = std::fs::metadata(path).map(|m| m.is_file()).unwrap_or(true);
            let opts = FileOptions {
                create_size: if regular { need } else { None },
                direct: match direct {
                    None => DirectMode::Auto,
                    Some(true) => DirectMode::Always,
                    Some(false) => DirectMode::Never,
                },
                ..FileOptions::default()
            };
            if !exists && need.is_none() {
                bail!(
                    "{} does not exist: give --size to create it",
                    path.display()
                );
            }
            let b =
                open_file(path, &opts).with_context(|| format!("opening {}", path.display()))?;
            Ok(Setup::Local(b))
        }
    }
}

/// Runs `spec`.
pub fn run(spec: &JobSpec) -> anyhow::Result<RunResult> {
    let setup = setup(spec)?;
    let (lba, capacity) = match &setup {
        Setup::Remote { lba, capacity, .. } => (*lba, *capacity),
        Setup::Local(b) => (b.block_size(), b.capacity()),
        Setup::Iscsi { lba, capacity } => (*lba, *capacity),
    };
    let target = describe(spec, &setup);
    let len = check_range(spec, lba, capacity)?;
    let regions = regions(spec, len, lba)?;
    let max_io = spec.bs.max();
    if let Setup::Remote { info, .. } = &setup {
        if max_io > info.max_transfer() {
            bail!(
                "block size {max_io} exceeds the controller's maximum transfer (MDTS) {}",
                info.max_transfer()
            );
        }
    }

    let n = spec.numjobs as usize;
    let barrier = Arc::new(Barrier::new(n + 1));
    let progress: Vec<Progress> = (0..n).map(|_| Progress::default()).collect();
    let result = std::thread::scope(|s| -> anyhow::Result<RunResult> {
        let mut handles = vec![];
        for (j, region) in regions.iter().enumerate() {
            let barrier = barrier.clone();
            let setup = &setup;
            let prog = spec.progress.then_some(&progress[j]);
            let region = *region;
            let h = std::thread::Builder::new()
                .name(format!("perf-job{j}"))
                .spawn_scoped(s, move || -> anyhow::Result<JobStats> {
                    let engine = (|| -> anyhow::Result<Box<dyn Engine>> {
                        if let Some(c) = &spec.cpus_allowed {
                            crate::cpus::pin_current_thread(c).context("--cpus-allowed")?;
                        }
                        make_engine(setup, spec, j, max_io)
                    })();
                    barrier.wait();
                    let mut engine = engine?;
                    let start = Instant::now();
                    let run = JobRun {
                        index: j,
                        spec,
                        region,
                        seed: spec.seed.wrapping_add(j as u64 * 0x9E37_79B9),
                        progress: prog,
                    };
                    run.run(engine.as_mut(), start)
                })?;
            handles.push(h);
        }
        barrier.wait();
        let cpu_a = watch(&handles, spec, &progress);
        let cpu_b = (process_rusage(), proc_stat(), Instant::now());
        let jobs = join(handles)?;
        let mut total = JobStats::default();
        for j in &jobs {
            total.merge(j);
        }
        let secs = cpu_b.2.saturating_duration_since(cpu_a.2).as_secs_f64();
        Ok(RunResult {
            jobs,
            total,
            cpu: cpu_use(cpu_a.0, cpu_b.0, secs),
            sys_cpu: sys_cpu(&cpu_a.1, &cpu_b.1),
            block_size: lba,
            capacity,
            target: target.clone(),
        })
    });
    // Queues are closed by now (each job dropped its engine); shut the controller down.
    if let Setup::Remote { ctrl, .. } = setup {
        let ka = ctrl.keep_alive_failure();
        let shut = ctrl.shutdown();
        if let Some(f) = ka {
            eprintln!("perf: keep-alive failed during the run: {f}");
        }
        if let (Ok(_), Err(e)) = (&result, shut) {
            eprintln!("perf: controller shutdown: {e}");
        }
    }
    result
}

/// What `spec` runs against, for the report.
fn describe(spec: &JobSpec, setup: &Setup) -> String {
    match (&spec.target, setup) {
        (Target::Remote { opts, nsid }, _) => {
            format!("{} nsid {nsid} at {}", opts.subnqn, opts.addr)
        }
        (Target::Local { path, .. }, Setup::Local(b)) => {
            format!("{} ({})", path.display(), b.kind())
        }
        (Target::Local { path, .. }, _) => path.display().to_string(),
        (Target::Iscsi(t), _) => t.to_string(),
    }
}

/// Checks the block size, `--offset` and `--size` against the device;
/// the length of the range the run covers.
fn check_range(spec: &JobSpec, lba: u32, capacity: u64) -> anyhow::Result<u64> {
    spec.bs.check(lba)?;
    if !spec.offset.is_multiple_of(lba as u64) {
        bail!(
            "--offset {} is not a multiple of the {lba}-byte block",
            spec.offset
        );
    }
    if spec.offset >= capacity {
        bail!(
            "--offset {} is beyond the device's {capacity} bytes",
            spec.offset
        );
    }
    let len = spec.size.unwrap_or(capacity - spec.offset);
    if spec.offset + len > capacity {
        bail!(
            "--offset + --size ({}) exceed the device's {capacity} bytes",
            spec.offset + len
        );
    }
    Ok(len)
}

/// Waits for the jobs to finish, printing progress; the CPU sample taken
/// when the ramp ended (or at the start, without a ramp).
fn watch<T>(
    handles: &[std::thread::ScopedJoinHandle<'_, T>],
    spec: &JobSpec,
    progress: &[Progress],
) -> (Rusage, ProcStat, Instant) {
    let start = Instant::now();
    let ramp_end = start + spec.ramp_time;
    let mut cpu_a = (process_rusage(), proc_stat(), start);
    let mut sampled = spec.ramp_time.is_zero();
    let mut last_print = start;
    let mut printed = false;
    let mut last_totals = [0u64; 4];
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if !sampled && now >= ramp_end {
            cpu_a = (process_rusage(), proc_stat(), now);
            sampled = true;
        }
        if spec.progress && now - last_print >= PROGRESS_PERIOD {
            let totals = progress_totals(progress);
            print_progress(totals, last_totals, now - last_print, now - start, spec);
            last_totals = totals;
            last_print = now;
            printed = true;
        }
    }
    if printed {
        print!("\r\x1b[K");
        let _ = std::io::stdout().flush();
    }
    cpu_a
}

/// Joins the jobs: their statistics, or the first error.
fn join(
    handles: Vec<std::thread::ScopedJoinHandle<'_, anyhow::Result<JobStats>>>,
) -> anyhow::Result<Vec<JobStats>> {
    let mut jobs = vec![];
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(j)) => jobs.push(j),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(anyhow::anyhow!("a job thread panicked"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(jobs),
    }
}

fn make_engine(
    setup: &Setup,
    spec: &JobSpec,
    j: usize,
    max_io: u32,
) -> anyhow::Result<Box<dyn Engine>> {
    match setup {
        Setup::Remote {
            ctrl,
            nsid,
            lba,
            capacity,
            ..
        } => {
            let q = ctrl
                .io_queue(
                    j as u16 + 1,
                    IoQueueOptions {
                        depth: spec.iodepth,
                        max_io,
                    },
                )
                .with_context(|| format!("job {j}: connecting I/O queue {}", j + 1))?;
            Ok(Box::new(Remote::new(q, *nsid, *lba, *capacity)))
        }
        Setup::Local(b) => Ok(Box::new(Local::new(b.clone(), spec.iodepth, max_io)?)),
        Setup::Iscsi { .. } => {
            let Target::Iscsi(t) = &spec.target else {
                bail!("internal: iSCSI setup without an iSCSI target");
            };
            let e = Iscsi::new(t, spec.iodepth, max_io)
                .with_context(|| format!("job {j}: iSCSI session"))?;
            Ok(Box::new(e))
        }
    }
}

/// Each job's region: the whole `[offset, offset+len)` for every job (as
/// fio), except with verify where jobs get disjoint slices so that their
/// patterns do not overwrite each other.
fn regions(spec: &JobSpec, len: u64, lba: u32) -> anyhow::Result<Vec<Region>> {
    let n = spec.numjobs.max(1) as u64;
    let max_bs = spec.bs.max() as u64;
    let v: Vec<Region> = if spec.verify {
        let per = len / n / lba as u64 * lba as u64;
        (0..n)
            .map(|i| Region {
                start: spec.offset + i * per,
                len: per,
            })
            .collect()
    } else {
        (0..n)
            .map(|_| Region {
                start: spec.offset,
                len,
            })
            .collect()
    };
    if v.iter().any(|r| r.len < max_bs) {
        bail!("the region per job is smaller than the largest block size {max_bs}");
    }
    Ok(v)
}

/// Totals published by the jobs: (read ios, write ios, read bytes, write bytes).
fn progress_totals(p: &[Progress]) -> [u64; 4] {
    use std::sync::atomic::Ordering::Relaxed;
    p.iter().fold([0; 4], |a, x| {
        [
            a[0] + x.read_ios.load(Relaxed),
            a[1] + x.write_ios.load(Relaxed),
            a[2] + x.read_bytes.load(Relaxed),
            a[3] + x.write_bytes.load(Relaxed),
        ]
    })
}

/// One fio-like status line: rates over the last period, time left.
fn print_progress(now: [u64; 4], prev: [u64; 4], dt: Duration, elapsed: Duration, spec: &JobSpec) {
    let s = dt.as_secs_f64().max(1e-3);
    let d = |i: usize| now[i].saturating_sub(prev[i]) as f64 / s;
    let eta = spec
        .runtime
        .map(|r| {
            (spec.ramp_time + r)
                .saturating_sub(elapsed)
                .as_secs_f64()
                .ceil()
        })
        .map_or(String::new(), |t| format!(" [eta {t:.0}s]"));
    print!(
        "\r\x1b[Kperf: {:.0}s [r={:.1}MiB/s,w={:.1}MiB/s][r={:.0},w={:.0} IOPS]{eta}",
        elapsed.as_secs_f64(),
        d(2) / 1048576.0,
        d(3) / 1048576.0,
        d(0),
        d(1),
    );
    let _ = std::io::stdout().flush();
}
