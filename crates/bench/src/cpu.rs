//! CPU accounting over the measured interval: this process's (or thread's)
//! user/system time from getrusage, and system-wide utilization split like
//! mpstat (usr, nice, sys, iowait, irq, soft, idle) from /proc/stat deltas.

use serde::Serialize;
use std::time::Instant;

/// A getrusage sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rusage {
    pub user_us: u64,
    pub sys_us: u64,
    /// Voluntary + involuntary context switches.
    pub ctx: u64,
}

fn tv_us(t: libc::timeval) -> u64 {
    (t.tv_sec as u64).saturating_mul(1_000_000) + t.tv_usec as u64
}

fn rusage(who: libc::c_int) -> Rusage {
    // SAFETY: rusage is plain data, zero is a valid initial value.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid, writable rusage for the call.
    if unsafe { libc::getrusage(who, &mut r) } != 0 {
        return Rusage::default();
    }
    Rusage {
        user_us: tv_us(r.ru_utime),
        sys_us: tv_us(r.ru_stime),
        ctx: (r.ru_nvcsw + r.ru_nivcsw) as u64,
    }
}

/// The whole process.
pub fn process_rusage() -> Rusage {
    rusage(libc::RUSAGE_SELF)
}
/// The calling thread only.
pub fn thread_rusage() -> Rusage {
    rusage(libc::RUSAGE_THREAD)
}

/// Process (or thread) CPU use over an interval, as in fio's `usr_cpu`/`sys_cpu`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct CpuUse {
    /// User time in % of the interval (100 = one core busy).
    pub usr_pct: f64,
    pub sys_pct: f64,
    pub user_s: f64,
    pub system_s: f64,
    pub ctx: u64,
}

pub fn cpu_use(a: Rusage, b: Rusage, secs: f64) -> CpuUse {
    let u = b.user_us.saturating_sub(a.user_us) as f64 / 1e6;
    let s = b.sys_us.saturating_sub(a.sys_us) as f64 / 1e6;
    let d = if secs > 0.0 { secs } else { 1.0 };
    CpuUse {
        usr_pct: 100.0 * u / d,
        sys_pct: 100.0 * s / d,
        user_s: u,
        system_s: s,
        ctx: b.ctx.saturating_sub(a.ctx),
    }
}

/// The aggregate `cpu` line of /proc/stat, in clock ticks.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStat {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
    pub at: Option<Instant>,
}

pub fn proc_stat() -> ProcStat {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_proc_stat(&s)
}

pub fn parse_proc_stat(s: &str) -> ProcStat {
    let line = s.lines().find(|l| l.starts_with("cpu ")).unwrap_or("");
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let g = |i: usize| v.get(i).copied().unwrap_or(0);
    ProcStat {
        user: g(0),
        nice: g(1),
        system: g(2),
        idle: g(3),
        iowait: g(4),
        irq: g(5),
        softirq: g(6),
        steal: g(7),
        at: Some(Instant::now()),
    }
}

/// System-wide utilization in %, mpstat's columns (guest time is inside usr/nice).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct SysCpu {
    pub usr: f64,
    pub nice: f64,
    pub sys: f64,
    pub iowait: f64,
    pub irq: f64,
    pub soft: f64,
    pub steal: f64,
    pub idle: f64,
}

pub fn sys_cpu(a: &ProcStat, b: &ProcStat) -> SysCpu {
    let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
    let parts = [
        d(a.user, b.user),
        d(a.nice, b.nice),
        d(a.system, b.system),
        d(a.iowait, b.iowait),
        d(a.irq, b.irq),
        d(a.softirq, b.softirq),
        d(a.steal, b.steal),
        d(a.idle, b.idle),
    ];
    let total: f64 = parts.iter().sum();
    if total <= 0.0 {
        return SysCpu::default();
    }
    let p = |x: f64| 100.0 * x / total;
    SysCpu {
        usr: p(parts[0]),
        nice: p(parts[1]),
        sys: p(parts[2]),
        iowait: p(parts[3]),
        irq: p(parts[4]),
        soft: p(parts[5]),
        steal: p(parts[6]),
        idle: p(parts[7]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_delta() {
        let a = parse_proc_stat("cpu  100 0 50 800 10 0 5 0 0 0\ncpu0 1 2 3\n");
        let b = parse_proc_stat("cpu  200 0 100 1000 10 0 15 0 0 0\n");
        let s = sys_cpu(&a, &b);
        assert!((s.usr - 100.0 * 100.0 / 360.0).abs() < 1e-9);
        assert!((s.idle - 100.0 * 200.0 / 360.0).abs() < 1e-9);
        let total = s.usr + s.nice + s.sys + s.iowait + s.irq + s.soft + s.steal + s.idle;
        assert!((total - 100.0).abs() < 1e-9);
        assert!(proc_stat().user > 0 || proc_stat().idle > 0);
        let r = process_rusage();
        let c = cpu_use(Rusage::default(), r, 1.0);
        assert!(c.usr_pct >= 0.0);
    }
}
