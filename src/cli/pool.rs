//! `farflash pool check|create|open`: a local pool's devices offline (no
//! target running on them: the devices' locks refuse an open pool).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use farflash_pool::{LocalPool, VolumeStore};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct PoolArgs {
    #[command(subcommand)]
    pub verb: PoolVerb,
}

#[derive(Subcommand, Debug)]
pub enum PoolVerb {
    /// Verify the pool on DEVICE... (read-only); exits non-zero naming
    /// what is wrong.
    Check {
        #[arg(required = true)]
        devices: Vec<PathBuf>,
    },
    /// Create pool NAME over DEVICE... (their content is lost); a
    /// `[[pool]]` entry of `serve --config` then opens it.
    Create {
        name: String,
        #[arg(required = true)]
        devices: Vec<PathBuf>,
        /// Power of two, 64K..64M (default 1M; docs/volumes.md).
        #[arg(long = "cluster-size", value_name = "SIZE")]
        cluster_size: Option<farflash_core::config::Size>,
    },
    /// Open the pool on DEVICE... as `serve` does (recovering it after a
    /// crash), report how long that took, its volumes and the memory the
    /// open pool holds, and close it (benches/pool.sh).
    Open {
        #[arg(required = true)]
        devices: Vec<PathBuf>,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// This process's resident set size in bytes (VmRSS, /proc/self/status).
fn rss_bytes() -> Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kib * 1024)
}

/// `farflash pool open`: the time `LocalPool::open` takes and the memory
/// the open pool holds (resident set growth over the open).
fn open(devices: &[PathBuf], json: bool) -> Result<()> {
    let before = rss_bytes()?;
    let t = Instant::now();
    let pool = LocalPool::open(devices)?;
    let took = t.elapsed();
    let after = rss_bytes()?;
    let s = pool.stats();
    let grown = after.saturating_sub(before);
    // No per-volume figure for an empty pool.
    let per_volume = (s.volumes > 0).then(|| grown / s.volumes as u64);
    if json {
        let o = serde_json::json!({
            "open_ms": took.as_secs_f64() * 1e3,
            "volumes": s.volumes,
            "allocated": s.allocated,
            "size": s.size,
            "rss_growth": grown,
            "rss_per_volume": per_volume,
        });
        println!("{o}");
    } else {
        let per = per_volume.map_or(String::new(), |p| format!(" ({p} per volume)"));
        println!(
            "opened in {:.1} ms: {} volumes, {} of {} bytes allocated; resident memory grew by {grown} bytes{per}",
            took.as_secs_f64() * 1e3,
            s.volumes,
            s.allocated,
            s.size
        );
    }
    Ok(())
}

pub fn run(a: PoolArgs) -> Result<()> {
    match a.verb {
        PoolVerb::Open { devices, json } => open(&devices, json),
        PoolVerb::Check { devices } => {
            let r = farflash_pool::check(&devices);
            for n in &r.notes {
                println!("note: {n}");
            }
            println!(
                "{} volumes, {} of {} clusters used",
                r.volumes, r.used_clusters, r.total_clusters
            );
            if !r.ok() {
                for p in &r.problems {
                    eprintln!("problem: {p}");
                }
                bail!("the pool has {} problem(s)", r.problems.len());
            }
            println!("ok");
            Ok(())
        }
        PoolVerb::Create {
            name,
            devices,
            cluster_size,
        } => {
            if farflash_pool::check(&devices).ok() {
                bail!("the devices hold a pool already: wipe them to reuse them");
            }
            let pool = LocalPool::create(&name, &devices, cluster_size.map(|s| s.0))?;
            let s = pool.stats();
            println!(
                "pool {name}: {} bytes in {} clusters of {} bytes",
                s.size,
                s.size / s.cluster_size.max(1),
                s.cluster_size
            );
            Ok(())
        }
    }
}
