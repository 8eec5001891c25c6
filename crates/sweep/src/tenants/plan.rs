//! The tenants study's plan: how many tenants at once, and the job each
//! tenant runs (a Terasort-like sequence of phases, each a fixed amount of
//! work, so that a slower tenant shows as a longer runtime).

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// One phase of a tenant's job: one `farflash perf` run doing `size` bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Short name for tables and plots.
    pub name: String,
    /// `perf --rw`: read, write, randrw, ...
    pub rw: String,
    /// `perf --rwmixread` (percent reads) for mixed phases.
    pub rwmixread: Option<u32>,
    /// Request size, bytes.
    pub bs: u64,
    /// I/Os in flight.
    pub iodepth: u64,
    /// Bytes of work (and of the region worked on, from offset 0).
    pub size: u64,
}

impl Phase {
    /// Whether the phase issues reads and writes (its p99 covers both).
    pub fn directions(&self) -> (bool, bool) {
        match self.rw.as_str() {
            "read" | "randread" => (true, false),
            "write" | "randwrite" => (false, true),
            _ => (true, true),
        }
    }
}

/// The study: tenant counts and the job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantsPlan {
    /// Always `tenants` (the results folder's name).
    pub name: String,
    pub description: String,
    /// How many tenants run together, in order (1, 2, 4 by default).
    pub counts: Vec<usize>,
    /// Size of each tenant's backing file, bytes.
    pub file_size: u64,
    /// The job every tenant runs, phase after phase.
    pub phases: Vec<Phase>,
    /// Event-loop threads of the target (`transport.threads`; 0: one per CPU).
    pub target_threads: u32,
}

const K: u64 = 1024;
const M: u64 = K * K;

impl TenantsPlan {
    /// The built-in study for tenant files of `job_size` bytes: the whole
    /// file read sequentially in 128 KiB requests (QD 16), then 4 KiB random
    /// reads and writes (70 % reads, QD 16) over the first eighth of it,
    /// then the whole file written sequentially in 128 KiB requests (QD 16):
    /// read the input, shuffle, write the output.
    pub fn builtin(counts: Vec<usize>, job_size: u64) -> TenantsPlan {
        let phase = |name: &str, rw: &str, mix, bs, size| Phase {
            name: name.into(),
            rw: rw.into(),
            rwmixread: mix,
            bs,
            iodepth: 16,
            size,
        };
        TenantsPlan {
            name: "tenants".into(),
            description: "Terasort-like job per tenant (sequential read, mixed random, sequential write), alone then together".into(),
            counts,
            file_size: job_size,
            phases: vec![
                phase("seq-read", "read", None, 128 * K, job_size),
                phase("mixed", "randrw", Some(70), 4 * K, job_size / 8),
                phase("seq-write", "write", None, 128 * K, job_size),
            ],
            target_threads: 0,
        }
    }

    /// The largest tenant count (the number of subsystems and files).
    pub fn max_tenants(&self) -> usize {
        self.counts.iter().copied().max().unwrap_or(0)
    }

    /// Checks counts, sizes and phases.
    pub fn validate(&self) -> Result<()> {
        if self.counts.is_empty() {
            bail!("tenants: give at least one tenant count");
        }
        if let Some(c) = self.counts.iter().find(|&&c| c == 0 || c > 16) {
            bail!("tenants: count {c} out of range 1..=16");
        }
        if self.file_size < M || !self.file_size.is_multiple_of(128 * K) {
            bail!(
                "job size {}: at least 1M and a multiple of 128K",
                self.file_size
            );
        }
        for p in &self.phases {
            if p.bs == 0 || !p.bs.is_multiple_of(512) || p.size < p.bs || p.size > self.file_size {
                bail!(
                    "phase {}: bs {} and size {} must be multiples of 512 within the file",
                    p.name,
                    p.bs,
                    p.size
                );
            }
            if p.iodepth == 0 || p.iodepth > 128 {
                bail!("phase {}: iodepth {} out of 1..=128", p.name, p.iodepth);
            }
        }
        Ok(())
    }

    /// Bytes one job moves (all phases).
    pub fn job_bytes(&self) -> u64 {
        self.phases.iter().map(|p| p.size).sum()
    }
}

/// `1,2,4` -> [1, 2, 4].
pub fn parse_counts(s: &str) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',') {
        let n: usize = match part.trim().parse() {
            Ok(n) => n,
            Err(_) => bail!("--tenants {s:?}: expected counts like 1,2,4"),
        };
        v.push(n);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_is_valid_and_checks_catch_bad_values() {
        let p = TenantsPlan::builtin(vec![1, 2, 4], 64 * M);
        p.validate().unwrap();
        assert_eq!(p.max_tenants(), 4);
        assert_eq!(p.job_bytes(), 64 * M + 8 * M + 64 * M);
        assert_eq!(p.phases[1].directions(), (true, true));
        assert_eq!(p.phases[0].directions(), (true, false));
        assert!(TenantsPlan::builtin(vec![], 64 * M).validate().is_err());
        assert!(TenantsPlan::builtin(vec![0], 64 * M).validate().is_err());
        assert!(TenantsPlan::builtin(vec![17], 64 * M).validate().is_err());
        assert!(TenantsPlan::builtin(vec![1], 1000).validate().is_err());
        assert_eq!(parse_counts("1, 2,4").unwrap(), vec![1, 2, 4]);
        assert!(parse_counts("1,x").is_err());
        assert!(parse_counts("-1").is_err());
    }
}
