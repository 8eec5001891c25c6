//! The machine and code a sweep runs on, for the report.

use crate::procfs::nproc;
use crate::results::Environment;
use std::process::Command;

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds (proleptic Gregorian, UTC).
pub fn iso_utc(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// The commit of the working directory's repository, `+dirty` when
/// tracked files differ from it; `unknown` outside a repository.
pub fn commit() -> String {
    match git(&["rev-parse", "HEAD"]) {
        Some(h) if !h.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .map(|s| !s.is_empty())
                .unwrap_or(false);
            if dirty {
                format!("{h}+dirty")
            } else {
                h
            }
        }
        _ => "unknown".into(),
    }
}

/// Captures the environment now.
pub fn capture(farflash_version: &str) -> Environment {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    let mem_total_kib = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Environment {
        date: iso_utc(crate::procfs::unix_now() as i64),
        hostname: read("/proc/sys/kernel/hostname"),
        nproc: nproc(),
        cpu_model,
        kernel: read("/proc/sys/kernel/osrelease"),
        mem_total_kib,
        farflash_version: farflash_version.to_owned(),
        commit: commit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso_utc(1_795_000_000), "2026-11-18T11:06:40Z");
    }
}
