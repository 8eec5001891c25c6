//! `farflash sweep`'s CPU split against /proc read independently: while a
//! sweep runs, this test samples /proc/stat and the target process's
//! /proc/<pid>/stat itself (its own parser, its own clock), then recomputes
//! each point's split over the point's recorded window and compares.

use farflash_sweep::results::{Mode, Results};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// (unix seconds, cpu line fields, target (utime+stime ticks, utime, stime) if found)
type Sample = (f64, Vec<f64>, Option<(f64, f64)>);

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn cpu_line() -> Vec<f64> {
    let s = std::fs::read_to_string("/proc/stat").unwrap();
    s.lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap())
        .collect()
}

/// The PID of the `farflash serve` whose command line mentions `marker`.
fn find_serve(marker: &str) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(" serve ") && cmd.contains(marker) {
            return Some(pid);
        }
    }
    None
}

/// utime and stime in ticks.
fn proc_ticks(pid: u32) -> Option<(f64, f64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split(' ').collect();
    Some((f[11].parse().ok()?, f[12].parse().ok()?))
}

/// Linear interpolation of the samples at `t`.
fn at(v: &[Sample], t: f64) -> (Vec<f64>, Option<(f64, f64)>) {
    let i = v
        .iter()
        .position(|s| s.0 >= t)
        .unwrap_or(v.len() - 1)
        .max(1);
    let (a, b) = (&v[i - 1], &v[i]);
    let k = ((t - a.0) / (b.0 - a.0)).clamp(0.0, 1.0);
    let sys = a.1.iter().zip(&b.1).map(|(x, y)| x + (y - x) * k).collect();
    let p = match (a.2, b.2) {
        (Some(x), Some(y)) => Some((x.0 + (y.0 - x.0) * k, x.1 + (y.1 - x.1) * k)),
        _ => None,
    };
    (sys, p)
}

#[test]
fn sweep_cpu_split_matches_independent_proc_stat() {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let scratch = base.join(format!("ff-sweep-cpu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let plan = scratch.join("cpu.toml");
    std::fs::write(
        &plan,
        "name = 'cpu'\nrw = 'randread'\nvary = 'iodepth'\nvalues = [2, 16]\nnumjobs = 2\n",
    )
    .unwrap();
    let data = scratch.join("data");
    let marker = data.to_string_lossy().to_string();

    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampler = {
        let (stop, samples) = (stop.clone(), samples.clone());
        std::thread::spawn(move || {
            let mut pid = None;
            while !stop.load(Ordering::Relaxed) {
                if pid.is_none() {
                    pid = find_serve(&marker);
                }
                let t = now();
                let s = (t, cpu_line(), pid.and_then(proc_ticks));
                samples.lock().unwrap().push(s);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let out = scratch.join("out");
    let st = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .arg("sweep")
        .args(["--plan", plan.to_str().unwrap()])
        .args([
            "--runtime",
            "1",
            "--ramp",
            "0",
            "--size",
            "16M",
            "--no-plots",
        ])
        .arg("--dir")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert!(st.success());
    let r: Results =
        serde_json::from_str(&std::fs::read_to_string(out.join("cpu/results.json")).unwrap())
            .unwrap();
    let v = samples.lock().unwrap().clone();
    let tck = 100.0; // USER_HZ on Linux
    let ncpu = r.environment.nproc as f64;
    for p in &r.points {
        let (a, ap) = at(&v, p.window.start);
        let (b, bp) = at(&v, p.window.end);
        let d: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y - x).collect();
        let total: f64 = d.iter().sum();
        let pct = |i: usize| 100.0 * d[i] / total;
        // /proc/stat order: user nice system idle iowait irq softirq steal
        let (usr, sys, idle, iowait, soft) = (pct(0), pct(2), pct(3), pct(4), pct(6));
        let what = format!("{} {}", p.mode.name(), p.label);
        let tol = 10.0;
        // perf's own machine split (plotted) and the sweep's own samples.
        let ps = &p.figures.sys_cpu;
        for (name, mine, theirs) in [
            ("usr", usr, ps.usr),
            ("sys", sys, ps.sys),
            ("idle", idle, ps.idle),
            ("iowait", iowait, p.cpu.host.iowait.unwrap()),
            ("soft", soft, p.cpu.host.soft.unwrap()),
            ("sweep usr", usr, p.cpu.system.usr),
            ("sweep sys", sys, p.cpu.system.sys),
            ("sweep soft", soft, p.cpu.system.soft),
            ("sweep idle", idle, p.cpu.system.idle),
        ] {
            assert!(
                (mine - theirs).abs() <= tol,
                "{what}: {name} {theirs:.1}% vs independent {mine:.1}%"
            );
        }
        // Processes cannot use more than the machine was busy.
        let procs = p.cpu.host.usr + p.cpu.host.sys + p.cpu.target.map(|t| t.busy).unwrap_or(0.0);
        assert!(
            procs <= 100.0 - idle - iowait + tol,
            "{what}: processes {procs:.1}% > machine busy {:.1}%",
            100.0 - idle - iowait
        );
        if p.mode == Mode::Remote {
            let (Some(x), Some(y)) = (ap, bp) else {
                panic!("{what}: the test did not find the target process");
            };
            let secs = p.window.end - p.window.start;
            let tusr = 100.0 * (y.0 - x.0) / tck / secs / ncpu;
            let tsys = 100.0 * (y.1 - x.1) / tck / secs / ncpu;
            let t = p.cpu.target.unwrap();
            assert!(
                (t.usr - tusr).abs() <= 5.0 && (t.sys - tsys).abs() <= 5.0,
                "{what}: target usr/sys {:.1}/{:.1} vs independent {tusr:.1}/{tsys:.1}",
                t.usr,
                t.sys
            );
            assert!(t.busy > 0.0, "{what}: the target did work");
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
