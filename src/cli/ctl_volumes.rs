//! `farflash ctl pool|volume|snapshot ...`: the management API's pool and
//! volume methods (docs/volumes.md); the method table prints their results
//! (`farflash_mgmt::methods`).

use anyhow::Result;
use clap::Subcommand;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum PoolVerb {
    /// Pools with their space.
    List { name: Option<String> },
    /// Create a local pool over DEVICE... (their content is lost).
    Create {
        name: String,
        #[arg(required = true)]
        devices: Vec<PathBuf>,
        /// Power of two, 64K..64M (default 1M).
        #[arg(long = "cluster-size", value_name = "SIZE")]
        cluster_size: Option<String>,
    },
    /// Close a pool that holds no volume (its devices keep the data).
    Delete { name: String },
}

#[derive(Subcommand, Debug)]
pub enum VolumeVerb {
    /// Volumes and snapshots of POOL (or of every pool).
    List {
        pool: Option<String>,
    },
    Get {
        pool: String,
        name: String,
    },
    /// A thin volume of SIZE (nothing allocated until written).
    Create {
        pool: String,
        name: String,
        size: String,
    },
    /// Grow (online, exported or not) or shrink (not exported).
    Resize {
        pool: String,
        name: String,
        size: String,
        /// Shrink below written data (it is lost).
        #[arg(long)]
        force: bool,
    },
    Rename {
        pool: String,
        name: String,
        new_name: String,
    },
    /// Delete a volume or snapshot (not exported, without clones).
    Delete {
        pool: String,
        name: String,
    },
    /// A writable clone NAME of SNAPSHOT.
    Clone {
        pool: String,
        snapshot: String,
        name: String,
    },
    /// Copy what a clone reads from its snapshot and cut it from it.
    Decouple {
        pool: String,
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum SnapshotVerb {
    /// A read-only snapshot NAME of VOLUME.
    Create {
        pool: String,
        volume: String,
        name: String,
    },
}

impl PoolVerb {
    pub fn request(&self) -> Result<(&'static str, Value)> {
        Ok(match self {
            PoolVerb::List { name } => ("pool_list", json!({ "name": name })),
            PoolVerb::Create {
                name,
                devices,
                cluster_size,
            } => {
                let cs = cluster_size.as_deref().map(size_param).transpose()?;
                let p = json!({"name": name, "backend": "local", "devices": devices, "cluster_size": cs});
                ("pool_create", p)
            }
            PoolVerb::Delete { name } => ("pool_delete", json!({ "name": name })),
        })
    }
}

impl VolumeVerb {
    pub fn request(&self) -> Result<(&'static str, Value)> {
        Ok(match self {
            VolumeVerb::List { pool } => ("volume_list", json!({ "pool": pool })),
            VolumeVerb::Get { pool, name } => ("volume_get", json!({"pool": pool, "name": name})),
            VolumeVerb::Create { pool, name, size } => (
                "volume_create",
                json!({"pool": pool, "name": name, "size": size_param(size)?}),
            ),
            VolumeVerb::Resize {
                pool,
                name,
                size,
                force,
            } => (
                "volume_resize",
                json!({"pool": pool, "name": name, "size": size_param(size)?, "force": force}),
            ),
            VolumeVerb::Rename {
                pool,
                name,
                new_name,
            } => (
                "volume_rename",
                json!({"pool": pool, "name": name, "new_name": new_name}),
            ),
            VolumeVerb::Delete { pool, name } => {
                ("volume_delete", json!({"pool": pool, "name": name}))
            }
            VolumeVerb::Clone {
                pool,
                snapshot,
                name,
            } => (
                "volume_clone",
                json!({"pool": pool, "snapshot": snapshot, "name": name}),
            ),
            VolumeVerb::Decouple { pool, name } => {
                ("volume_decouple", json!({"pool": pool, "name": name}))
            }
        })
    }
}

impl SnapshotVerb {
    pub fn request(&self) -> Result<(&'static str, Value)> {
        let SnapshotVerb::Create { pool, volume, name } = self;
        Ok((
            "snapshot_create",
            json!({"pool": pool, "volume": volume, "name": name}),
        ))
    }
}

/// A size argument (`1G`, `512M`, bytes) as the JSON number of bytes. It
/// lives here, not in `ctl`, which uses this module: no module cycle.
pub(crate) fn size_param(s: &str) -> Result<Value> {
    let n: farflash_core::config::Size = s.parse().map_err(anyhow::Error::msg)?;
    Ok(json!(n.0))
}
