//! CPU time from `/proc`: the machine's `cpu` line of `/proc/stat` and a
//! process's utime/stime from `/proc/<pid>/stat`, sampled on a timer so
//! that a point's measured interval can be cut out afterwards.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The `cpu` line of `/proc/stat`, in clock ticks (all CPUs summed).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SysTicks {
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub idle: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
}

/// The machine's CPU split over an interval, mpstat style: percent of all
/// CPUs, summing to 100.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SysSplit {
    pub usr: f64,
    pub nice: f64,
    pub sys: f64,
    pub iowait: f64,
    pub irq: f64,
    pub soft: f64,
    pub steal: f64,
    pub idle: f64,
}

impl SysTicks {
    /// Parses the first (`cpu `) line of a `/proc/stat` text.
    pub fn parse(stat: &str) -> Result<SysTicks> {
        let line = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .context("no cpu line in /proc/stat")?;
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse::<f64>().unwrap_or(0.0))
            .collect();
        if v.len() < 8 {
            bail!("short cpu line in /proc/stat: {line:?}");
        }
        // guest and guest_nice are already inside user and nice.
        Ok(SysTicks {
            user: v[0],
            nice: v[1],
            system: v[2],
            idle: v[3],
            iowait: v[4],
            irq: v[5],
            softirq: v[6],
            steal: v[7],
        })
    }

    /// Reads `/proc/stat` now.
    pub fn read() -> Result<SysTicks> {
        SysTicks::parse(&std::fs::read_to_string("/proc/stat")?)
    }

    fn fields(&self) -> [f64; 8] {
        [
            self.user,
            self.nice,
            self.system,
            self.iowait,
            self.irq,
            self.softirq,
            self.steal,
            self.idle,
        ]
    }

    /// Linear interpolation between two samples (`t` in 0..=1).
    pub fn lerp(&self, o: &SysTicks, t: f64) -> SysTicks {
        let (a, b) = (self.fields(), o.fields());
        let f = |i: usize| a[i] + (b[i] - a[i]) * t;
        SysTicks {
            user: f(0),
            nice: f(1),
            system: f(2),
            iowait: f(3),
            irq: f(4),
            softirq: f(5),
            steal: f(6),
            idle: f(7),
        }
    }

    /// The split between `self` (earlier) and `later`.
    pub fn split_to(&self, later: &SysTicks) -> SysSplit {
        let (a, b) = (self.fields(), later.fields());
        let d: Vec<f64> = (0..8).map(|i| (b[i] - a[i]).max(0.0)).collect();
        let total: f64 = d.iter().sum();
        let pct = |x: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
        SysSplit {
            usr: pct(d[0]),
            nice: pct(d[1]),
            sys: pct(d[2]),
            iowait: pct(d[3]),
            irq: pct(d[4]),
            soft: pct(d[5]),
            steal: pct(d[6]),
            idle: pct(d[7]),
        }
    }
}

/// A process's CPU time, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcTimes {
    pub user_s: f64,
    pub system_s: f64,
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Online CPUs.
pub fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

impl ProcTimes {
    /// Parses utime and stime (fields 14 and 15) of a `/proc/<pid>/stat` text.
    pub fn parse(stat: &str, tck: f64) -> Result<ProcTimes> {
        // The command name (field 2) may hold spaces and parentheses: start after the last ')'.
        let rest = stat
            .rfind(')')
            .map(|i| &stat[i + 1..])
            .context("malformed /proc/<pid>/stat")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // rest starts at field 3 (state): utime is field 14 -> index 11.
        if f.len() < 13 {
            bail!("short /proc/<pid>/stat");
        }
        let n = |i: usize| {
            f[i].parse::<f64>()
                .context("bad number in /proc/<pid>/stat")
        };
        Ok(ProcTimes {
            user_s: n(11)? / tck,
            system_s: n(12)? / tck,
        })
    }

    /// Reads `/proc/<pid>/stat` now.
    pub fn read(pid: u32) -> Result<ProcTimes> {
        ProcTimes::parse(
            &std::fs::read_to_string(format!("/proc/{pid}/stat"))?,
            clk_tck(),
        )
    }

    /// Linear interpolation between two samples.
    pub fn lerp(&self, o: &ProcTimes, t: f64) -> ProcTimes {
        ProcTimes {
            user_s: self.user_s + (o.user_s - self.user_s) * t,
            system_s: self.system_s + (o.system_s - self.system_s) * t,
        }
    }
}

/// Wall-clock seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One sample: wall time, the machine, and the watched process (if alive).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub t: f64,
    pub sys: SysTicks,
    pub proc_: Option<ProcTimes>,
}

/// Samples `/proc/stat` and one process every `period` on a thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<JoinHandle<()>>,
}

fn take(pid: Option<u32>) -> Option<Sample> {
    Some(Sample {
        t: unix_now(),
        sys: SysTicks::read().ok()?,
        proc_: pid.and_then(|p| ProcTimes::read(p).ok()),
    })
}

impl Sampler {
    /// Starts sampling (first sample taken before returning).
    pub fn start(pid: Option<u32>, period: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(take(pid).into_iter().collect::<Vec<_>>()));
        let (s2, v2) = (stop.clone(), samples.clone());
        let thread = std::thread::Builder::new()
            .name("sweep-sampler".into())
            .spawn(move || {
                while !s2.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    if let (Some(s), Ok(mut v)) = (take(pid), v2.lock()) {
                        v.push(s);
                    }
                }
            })
            .ok();
        Sampler {
            stop,
            samples,
            thread,
        }
    }

    /// Stops, takes a last sample and returns all of them in time order.
    pub fn finish(mut self, pid: Option<u32>) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut v = self.samples.lock().map(|v| v.clone()).unwrap_or_default();
        v.extend(take(pid));
        v
    }
}

/// The samples around `t`, interpolated: (machine, process) at `t`.
pub fn at(samples: &[Sample], t: f64) -> Option<(SysTicks, Option<ProcTimes>)> {
    let first = samples.first()?;
    if samples.len() == 1 || t <= first.t {
        return Some((first.sys, first.proc_));
    }
    for w in samples.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if t <= b.t {
            let f = if b.t > a.t {
                (t - a.t) / (b.t - a.t)
            } else {
                1.0
            };
            let p = match (a.proc_, b.proc_) {
                (Some(x), Some(y)) => Some(x.lerp(&y, f)),
                (x, y) => y.or(x),
            };
            return Some((a.sys.lerp(&b.sys, f), p));
        }
    }
    let last = samples.last()?;
    Some((last.sys, last.proc_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_and_pid_stat() {
        let s = SysTicks::parse("cpu  10 0 30 50 5 0 5 0 0 0\ncpu0 1 2 3\n").unwrap();
        let z = SysTicks::default();
        let sp = z.split_to(&s);
        assert!((sp.usr - 10.0).abs() < 1e-9 && (sp.idle - 50.0).abs() < 1e-9);
        assert!((sp.soft - 5.0).abs() < 1e-9 && (sp.iowait - 5.0).abs() < 1e-9);
        let p = ProcTimes::parse(
            "42 (a b) c) S 1 1 1 0 -1 0 0 0 0 0 250 100 0 0 20 0 1 0 0",
            100.0,
        )
        .unwrap();
        assert_eq!(p.user_s, 2.5);
        assert_eq!(p.system_s, 1.0);
    }

    #[test]
    fn interpolates_between_samples() {
        let mk = |t: f64, u: f64| Sample {
            t,
            sys: SysTicks {
                user: u,
                ..Default::default()
            },
            proc_: Some(ProcTimes {
                user_s: u,
                system_s: 0.0,
            }),
        };
        let v = vec![mk(0.0, 0.0), mk(1.0, 10.0), mk(2.0, 30.0)];
        let (s, p) = at(&v, 1.5).unwrap();
        assert_eq!(s.user, 20.0);
        assert_eq!(p.unwrap().user_s, 20.0);
        assert_eq!(at(&v, 9.0).unwrap().0.user, 30.0);
    }

    #[test]
    fn reads_this_machine() {
        SysTicks::read().unwrap();
        ProcTimes::read(std::process::id()).unwrap();
        assert!(nproc() >= 1);
    }
}
