//! `farflash ctl pool|volume|snapshot ...`: the management API's pool and
//! volume methods (docs/volumes.md) with human output.

use super::ctl::size_param;
use anyhow::Result;
use clap::Subcommand;
use serde_json::{json, Value};
use std::io::Write;
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

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        v => v.to_string(),
    }
}

/// Bytes with a binary unit, for people.
fn bytes(v: &Value) -> String {
    let Some(n) = v.as_u64() else {
        return s(v);
    };
    for (u, m) in [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if n >= m {
            return format!("{:.1}{u}", n as f64 / m as f64);
        }
    }
    format!("{n}B")
}

fn volume_line(out: &mut impl Write, v: &Value) -> Result<()> {
    let kind = if v["snapshot"].as_bool() == Some(true) {
        "snapshot"
    } else {
        "volume"
    };
    let clones = v["clones"].as_array().map_or(String::new(), |c| {
        c.iter().map(s).collect::<Vec<_>>().join(",")
    });
    writeln!(
        out,
        "{:<24} {:<8} {:>9} {:>9} {:>9}  {:<8} {:<16} {:<16} {}",
        format!("{}/{}", s(&v["pool"]), s(&v["name"])),
        kind,
        bytes(&v["size"]),
        bytes(&v["allocated"]),
        bytes(&v["shared"]),
        if v["exported"].as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        },
        s(&v["parent"]),
        if clones.is_empty() { "-" } else { &clones },
        s(&v["uuid"]),
    )?;
    Ok(())
}

fn volume_header(out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "{:<24} {:<8} {:>9} {:>9} {:>9}  {:<8} {:<16} {:<16} uuid",
        "volume", "kind", "size", "allocated", "shared", "exported", "parent", "clones"
    )?;
    Ok(())
}

/// Human output of the pool and volume methods; false for other methods.
pub fn human(out: &mut impl Write, method: &str, r: &Value) -> Result<bool> {
    match method {
        "pool_list" | "pool_create" => {
            let list = match r {
                Value::Array(a) => a.clone(),
                v => vec![v.clone()],
            };
            writeln!(
                out,
                "{:<16} {:<6} {:>8} {:>9} {:>9} {:>9} volumes",
                "pool", "kind", "cluster", "size", "allocated", "free"
            )?;
            for p in &list {
                writeln!(
                    out,
                    "{:<16} {:<6} {:>8} {:>9} {:>9} {:>9} {}",
                    s(&p["name"]),
                    s(&p["backend"]),
                    bytes(&p["cluster_size"]),
                    bytes(&p["size"]),
                    bytes(&p["allocated"]),
                    bytes(&p["free"]),
                    s(&p["volumes"])
                )?;
            }
        }
        "pool_delete" => writeln!(
            out,
            "pool {} closed (its devices keep the data)",
            s(&r["deleted"])
        )?,
        "volume_delete" => writeln!(out, "{} deleted", s(&r["deleted"]))?,
        "volume_list" => {
            volume_header(out)?;
            for v in r.as_array().into_iter().flatten() {
                volume_line(out, v)?;
            }
        }
        "volume_get" | "volume_create" | "volume_resize" | "volume_rename" | "snapshot_create"
        | "volume_clone" | "volume_decouple" => {
            volume_header(out)?;
            volume_line(out, r)?;
            for c in r["namespaces_changed"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "{}: namespaces {} resized (hosts told)",
                    s(&c["nqn"]),
                    s(&c["nsids"])
                )?;
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_print_one_line_each() {
        let v = json!({"pool": "p", "name": "db", "uuid": "u", "size": 1u64 << 30,
            "allocated": 3u64 << 20, "shared": 0, "parent": null, "snapshot": false,
            "clones": ["c1"], "exported": true});
        let mut out = Vec::new();
        assert!(human(&mut out, "volume_list", &json!([v])).unwrap());
        let text = String::from_utf8(out).unwrap();
        let line = text.lines().nth(1).unwrap();
        for want in ["p/db", "1.0G", "3.0M", "yes", "c1"] {
            assert!(line.contains(want), "{line}");
        }
        assert!(!human(&mut Vec::new(), "stats", &json!({})).unwrap());
    }
}
