//! `farflash pool check|create`: a local pool's devices offline (no
//! target running on them: the devices' locks refuse an open pool).

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use farflash_pool::{LocalPool, VolumeStore};
use std::path::PathBuf;

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
}

pub fn run(a: PoolArgs) -> Result<()> {
    match a.verb {
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
