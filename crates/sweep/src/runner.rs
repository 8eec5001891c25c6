//! Running one point: `farflash perf --output-format=json` as a child
//! process, with the machine (and the target process) sampled from /proc
//! while it runs, and the target's SMART counters read before and after.

use crate::perfjson::{figures, Figures};
use crate::plan::{Plan, PointParams};
use crate::procfs::{self, nproc, Sampler};
use crate::results::{Cpu, CpuPerIo, Mode, Point, Side, Window};
use crate::target::{RemoteAddr, SmartCounters};
use crate::transport::Transport;
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How often /proc is sampled while a point runs.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// What a point runs against.
#[derive(Clone, Debug)]
pub enum Where {
    /// `perf --filename PATH` (io_uring).
    Local(PathBuf),
    /// `perf -t tcp|rdma -a .. -s .. -n .. --nsid ..`.
    Remote(Remote),
}

/// A remote side of a point: the target, and the transport and address perf uses.
#[derive(Clone, Debug)]
pub struct Remote {
    /// The target (its TCP address: the SMART log is read there), its subsystem and namespace.
    pub target: RemoteAddr,
    /// The target's PID, if known (for its CPU time).
    pub pid: Option<u32>,
    pub transport: Transport,
    /// `ip:port` of the listener of `transport`.
    pub addr: String,
}

/// Per-point timing and perf options common to a sweep.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// The `farflash` binary.
    pub farflash: PathBuf,
    pub runtime_s: f64,
    pub ramp_s: f64,
    /// `perf --poll`.
    pub perf_poll: String,
}

/// Splits `host:port` / `[v6]:port`.
pub fn split_addr(addr: &str) -> Result<(String, u16)> {
    let (h, p) = addr
        .rsplit_once(':')
        .with_context(|| format!("address {addr:?}: expected HOST:PORT"))?;
    let port: u16 = p
        .parse()
        .with_context(|| format!("address {addr:?}: bad port"))?;
    Ok((
        h.trim_start_matches('[').trim_end_matches(']').to_owned(),
        port,
    ))
}

/// The perf arguments of a point (after `farflash`).
pub fn perf_args(w: &Where, rw: &str, p: &PointParams, s: &RunSettings) -> Result<Vec<String>> {
    let mut a: Vec<String> = vec!["perf".into()];
    match w {
        Where::Local(path) => a.extend(["--filename".into(), path.display().to_string()]),
        Where::Remote(r) => {
            let (host, port) = split_addr(&r.addr)?;
            a.extend([
                "-t".into(),
                r.transport.name().into(),
                "-a".into(),
                host,
                "-s".into(),
                port.to_string(),
                "-n".into(),
                r.target.nqn.clone(),
                "--nsid".into(),
                r.target.nsid.to_string(),
            ]);
        }
    }
    a.extend([
        "--rw".into(),
        rw.into(),
        "--bs".into(),
        p.bs.to_string(),
        "--iodepth".into(),
        p.iodepth.to_string(),
        "--numjobs".into(),
        p.numjobs.to_string(),
        "--runtime".into(),
        format!("{:.3}", s.runtime_s),
        "--poll".into(),
        s.perf_poll.clone(),
        "--output-format".into(),
        "json".into(),
    ]);
    if s.ramp_s > 0.0 {
        a.extend(["--ramp_time".into(), format!("{:.3}", s.ramp_s)]);
    }
    Ok(a)
}

/// Runs perf and returns its stdout, its end time (Unix seconds) and the /proc samples.
pub(crate) fn run_perf(
    farflash: &Path,
    args: &[String],
    target_pid: Option<u32>,
    limit: Duration,
) -> Result<(String, f64, Vec<procfs::Sample>)> {
    let sampler = Sampler::start(target_pid, SAMPLE_PERIOD);
    let mut child = Command::new(farflash)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} perf", farflash.display()))?;
    let mut out = String::new();
    let mut err = String::new();
    let mut so = child.stdout.take().context("perf stdout")?;
    let mut se = child.stderr.take().context("perf stderr")?;
    let errt = std::thread::spawn(move || {
        let _ = se.read_to_string(&mut err);
        err
    });
    // A watchdog: perf must end within `limit` (runtime + connect + drain).
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit).is_err() {
            // SAFETY: kill(2) on our own child's PID has no memory effects.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    so.read_to_string(&mut out)?;
    let end = procfs::unix_now();
    let status = child.wait()?;
    let _ = done_tx.send(());
    let _ = dog.join();
    let samples = sampler.finish(target_pid);
    let err = errt.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "farflash {} failed ({status}): {}",
            args.join(" "),
            err.trim()
        );
    }
    Ok((out, end, samples))
}

/// One perf run measured: its JSON report, figures, measured interval
/// and CPU split.
pub struct Measured {
    pub perf: serde_json::Value,
    pub figures: Figures,
    pub window: Window,
    pub cpu: Cpu,
}

/// Runs perf with `args` (a JSON report), sampling `/proc` and the target
/// process `target_pid`, and cuts the CPU split out of the measured interval;
/// `write` picks the direction whose latency is reported.
pub fn measure(
    s: &RunSettings,
    args: &[String],
    target_pid: Option<u32>,
    write: bool,
) -> Result<Measured> {
    let limit = Duration::from_secs_f64(s.runtime_s + s.ramp_s + 60.0);
    let (out, end, samples) = run_perf(&s.farflash, args, target_pid, limit)?;
    let perf: serde_json::Value =
        serde_json::from_str(&out).context("perf printed no JSON document")?;
    let figures = figures(&perf, write)?;
    // The measured interval ends at the last completion, just before perf
    // disconnects and prints: take the runtime back from perf's exit.
    let start = end - figures.runtime_ms as f64 / 1e3;
    let window = Window { start, end };
    let cpu = cpu_split(&figures, &samples, window, target_pid.is_some());
    Ok(Measured {
        perf,
        figures,
        window,
        cpu,
    })
}

/// Runs one point and assembles its record.
pub fn run_point(
    plan: &Plan,
    index: usize,
    params: &PointParams,
    w: &Where,
    s: &RunSettings,
) -> Result<Point> {
    let args = perf_args(w, &plan.rw, params, s)?;
    let (remote, target_pid, transport) = match w {
        Where::Remote(r) => (Some(&r.target), r.pid, Some(r.transport)),
        Where::Local(_) => (None, None, None),
    };
    let before = remote.map(SmartCounters::read).transpose()?;
    let Measured {
        perf,
        figures: f,
        window,
        cpu,
    } = measure(s, &args, target_pid, plan.writes())?;
    let after = remote.map(SmartCounters::read).transpose()?;
    let busy = cpu.host.busy + cpu.target.map(|t| t.busy).unwrap_or(0.0);
    let iops_per_cpu_pct =
        (busy > 0.0 && (remote.is_none() || cpu.target.is_some())).then(|| f.iops / busy);
    let cpu_us_per_io = CpuPerIo::of(&cpu, &f, nproc());
    Ok(Point {
        index,
        mode: if remote.is_some() {
            Mode::Remote
        } else {
            Mode::Local
        },
        transport,
        value: match plan.vary {
            crate::plan::Axis::Bs => params.bs,
            crate::plan::Axis::Iodepth => params.iodepth,
            crate::plan::Axis::Numjobs => params.numjobs,
        },
        label: plan.label(plan.values[index]),
        rw: plan.rw.clone(),
        params: *params,
        command: format!("farflash {}", args.join(" ")),
        window,
        figures: f,
        cpu,
        iops_per_cpu_pct,
        cpu_us_per_io,
        target_counters: before.zip(after).map(|(b, a)| b.delta(&a)),
        perf,
    })
}

/// The CPU split of a point: host from perf's own report, target and the
/// machine from the sweep's /proc samples over the same window.
pub fn cpu_split(f: &Figures, samples: &[procfs::Sample], w: Window, has_target: bool) -> Cpu {
    let n = nproc() as f64;
    let host = Side {
        usr: f.proc_usr_pct / n,
        sys: f.proc_sys_pct / n,
        iowait: Some(f.sys_cpu.iowait),
        soft: Some(f.sys_cpu.soft),
        busy: (f.proc_usr_pct + f.proc_sys_pct) / n + f.sys_cpu.soft,
    };
    let (a, b) = (procfs::at(samples, w.start), procfs::at(samples, w.end));
    let system = match (a, b) {
        (Some((x, _)), Some((y, _))) => x.split_to(&y),
        _ => Default::default(),
    };
    let secs = (w.end - w.start).max(1e-6);
    let target = match (a, b) {
        (Some((_, Some(x))), Some((_, Some(y)))) if has_target => {
            let usr = 100.0 * (y.user_s - x.user_s).max(0.0) / secs / n;
            let sys = 100.0 * (y.system_s - x.system_s).max(0.0) / secs / n;
            Some(Side {
                usr,
                sys,
                iowait: None,
                soft: None,
                busy: usr + sys,
            })
        }
        _ => None,
    };
    Cpu {
        host,
        target,
        system,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_args() {
        assert_eq!(
            split_addr("127.0.0.1:4420").unwrap(),
            ("127.0.0.1".into(), 4420)
        );
        assert_eq!(split_addr("[::1]:9").unwrap(), ("::1".into(), 9));
        assert!(split_addr("nohost").is_err());
        let s = RunSettings {
            farflash: "farflash".into(),
            runtime_s: 0.25,
            ramp_s: 0.0,
            perf_poll: "block".into(),
        };
        let p = PointParams {
            bs: 4096,
            iodepth: 2,
            numjobs: 3,
        };
        let a = perf_args(&Where::Local("/x".into()), "read", &p, &s).unwrap();
        assert_eq!(a.join(" "), "perf --filename /x --rw read --bs 4096 --iodepth 2 --numjobs 3 --runtime 0.250 --poll block --output-format json");
        let target = RemoteAddr {
            addr: "10.0.2.15:4420".into(),
            nqn: "nqn.x:y".into(),
            nsid: 1,
        };
        for (t, addr) in [
            (Transport::Tcp, "10.0.2.15:4420"),
            (Transport::Rdma, "10.0.2.15:4421"),
        ] {
            let w = Where::Remote(Remote {
                target: target.clone(),
                pid: None,
                transport: t,
                addr: addr.into(),
            });
            let a = perf_args(&w, "randread", &p, &s).unwrap().join(" ");
            let want = format!(
                "perf -t {} -a 10.0.2.15 -s {} -n nqn.x:y --nsid 1 --rw randread",
                t.name(),
                &addr[10..]
            );
            assert!(a.starts_with(&want), "{a}");
        }
    }
}
