//! The management API's pool and volume methods (issue #42,
//! docs/volumes.md): `pool_*`, `volume_*`, `snapshot_create`. The
//! dispatcher ([`crate::methods`]) hands them here by name ([`METHODS`]).
//! Pools live in `farflash_control::pools`; what touches exported
//! volumes goes through `farflash_control::volumes`.

use crate::jsonrpc::{self, RpcError};
use farflash_control::pools::{registry, PoolsError};
use farflash_control::volumes;
use farflash_core::config::{PoolConfig, RbdPoolConfig, Size};
use farflash_core::Target;
use farflash_pool::{PoolError, VolumeInfo, VolumeStore};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The methods answered here, in the order `rpc_methods` lists them.
pub const METHODS: &[&str] = &[
    "pool_create",
    "pool_list",
    "pool_delete",
    "volume_create",
    "volume_get",
    "volume_list",
    "volume_resize",
    "volume_rename",
    "volume_delete",
    "snapshot_create",
    "volume_clone",
    "volume_decouple",
];

fn params<T: DeserializeOwned>(p: &Value) -> Result<T, RpcError> {
    T::deserialize(p).map_err(|e| RpcError::params(format!("invalid params: {e}")))
}

/// The JSON-RPC code of a pool error.
pub fn code(e: &PoolsError) -> i64 {
    match e {
        PoolsError::NotFound(_) => jsonrpc::NOT_FOUND,
        PoolsError::Exists(_) => jsonrpc::EXISTS,
        PoolsError::InUse { .. } => jsonrpc::IN_USE,
        PoolsError::Invalid(_) => jsonrpc::INVALID_CONFIG,
        PoolsError::Pool { source, .. } => match source {
            PoolError::NotFound(_) => jsonrpc::NOT_FOUND,
            PoolError::Exists(_) => jsonrpc::EXISTS,
            PoolError::HasClones { .. } | PoolError::Exported(_) => jsonrpc::IN_USE,
            PoolError::NoSpace(_) => jsonrpc::NO_SPACE,
            PoolError::Io { source, .. } if farflash_pool::is_no_space(source) => jsonrpc::NO_SPACE,
            PoolError::Corrupt { .. } | PoolError::Io { .. } => jsonrpc::FAILED,
            PoolError::BelowUsed { .. }
            | PoolError::Invalid { .. }
            | PoolError::ReadOnly(_)
            | PoolError::NotSnapshot(_)
            | PoolError::NoParent(_) => jsonrpc::INVALID_CONFIG,
        },
    }
}

fn err(e: PoolsError) -> RpcError {
    RpcError::new(code(&e), e.to_string())
}

/// `Pool` of docs/rpc-schema.json.
pub fn pool_json(name: &str, p: &dyn VolumeStore) -> Value {
    let s = p.stats();
    json!({
        "name": name,
        "backend": p.kind(),
        "cluster_size": s.cluster_size,
        "size": s.size,
        "allocated": s.allocated,
        "free": s.free,
        "volumes": s.volumes,
    })
}

/// `Volume` of docs/rpc-schema.json.
pub fn volume_json(pool: &str, v: &VolumeInfo) -> Value {
    json!({
        "pool": pool,
        "name": v.name,
        "uuid": v.uuid.hyphenated().to_string(),
        "size": v.size,
        "allocated": v.allocated,
        "shared": v.shared,
        "parent": v.parent,
        "snapshot": v.is_snapshot,
        "clones": v.clones,
        "exported": v.exported,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreatePool {
    name: String,
    backend: String,
    #[serde(default)]
    devices: Vec<PathBuf>,
    #[serde(default)]
    cluster_size: Option<Size>,
    #[serde(default)]
    rbd: Option<RbdPoolConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Name {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameOpt {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolOpt {
    #[serde(default)]
    pool: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Vol {
    pool: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateVol {
    pool: String,
    name: String,
    size: Size,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResizeVol {
    pool: String,
    name: String,
    size: Size,
    #[serde(default)]
    force: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RenameVol {
    pool: String,
    name: String,
    new_name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Snap {
    pool: String,
    volume: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloneVol {
    pool: String,
    snapshot: String,
    name: String,
}

/// Answers `method` when it is one of [`METHODS`]; `None` otherwise.
pub fn call(target: &Target, method: &str, p: &Value) -> Option<Result<Value, RpcError>> {
    let r = match method {
        "pool_create" | "pool_list" | "pool_delete" => pools(target, method, p),
        "volume_create" | "volume_get" | "volume_list" | "volume_decouple" => {
            volume_reads(method, p)
        }
        "volume_resize" | "volume_rename" | "volume_delete" => volume_changes(target, method, p),
        "snapshot_create" | "volume_clone" => snapshots(method, p),
        _ => return None,
    };
    Some(r)
}

fn pools(target: &Target, method: &str, p: &Value) -> Result<Value, RpcError> {
    match method {
        "pool_create" => {
            let a: CreatePool = params(p)?;
            let cfg = PoolConfig {
                name: a.name,
                backend: a.backend,
                devices: a.devices,
                cluster_size: a.cluster_size.map(|s| s.0),
                rbd: a.rbd,
            };
            let name = cfg.name.clone();
            let store = registry().create(cfg).map_err(err)?;
            Ok(pool_json(&name, &*store))
        }
        "pool_list" => {
            let a: NameOpt = params(p)?;
            match a.name {
                Some(n) => {
                    let store = registry().get(&n).map_err(err)?;
                    Ok(json!([pool_json(&n, &*store)]))
                }
                None => Ok(Value::Array(
                    (registry().all().iter())
                        .map(|(n, s)| pool_json(n, &**s))
                        .collect(),
                )),
            }
        }
        _ => {
            let a: Name = params(p)?;
            volumes::delete_pool(target, &a.name).map_err(err)?;
            Ok(json!({"deleted": a.name, "data_kept": true}))
        }
    }
}

fn store(pool: &str) -> Result<std::sync::Arc<dyn VolumeStore>, RpcError> {
    registry().get(pool).map_err(err)
}

fn volume_reads(method: &str, p: &Value) -> Result<Value, RpcError> {
    match method {
        "volume_create" => {
            let a: CreateVol = params(p)?;
            let v = (store(&a.pool)?.create_volume(&a.name, a.size.0))
                .map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            Ok(volume_json(&a.pool, &v))
        }
        "volume_get" => {
            let a: Vol = params(p)?;
            let v = (store(&a.pool)?.get(&a.name)).map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            Ok(volume_json(&a.pool, &v))
        }
        "volume_list" => {
            let a: PoolOpt = params(p)?;
            let stores = match &a.pool {
                Some(n) => vec![(n.clone(), store(n)?)],
                None => registry().all(),
            };
            let list = (stores.iter())
                .flat_map(|(n, s)| s.list().into_iter().map(move |v| volume_json(n, &v)))
                .collect();
            Ok(Value::Array(list))
        }
        _ => {
            let a: Vol = params(p)?;
            (store(&a.pool)?.decouple(&a.name)).map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            let v = (store(&a.pool)?.get(&a.name)).map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            Ok(volume_json(&a.pool, &v))
        }
    }
}

fn volume_changes(target: &Target, method: &str, p: &Value) -> Result<Value, RpcError> {
    match method {
        "volume_resize" => {
            let a: ResizeVol = params(p)?;
            let report = volumes::resize(target, &a.pool, &a.name, a.size.0, a.force);
            let report = report.map_err(err)?;
            let v = (store(&a.pool)?.get(&a.name)).map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            let mut out = volume_json(&a.pool, &v);
            if let Some(r) = report {
                out["namespaces_changed"] =
                    crate::methods::report_json(&r)["namespaces_changed"].clone();
            }
            Ok(out)
        }
        "volume_rename" => {
            let a: RenameVol = params(p)?;
            volumes::rename(target, &a.pool, &a.name, &a.new_name).map_err(err)?;
            let v =
                (store(&a.pool)?.get(&a.new_name)).map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            Ok(volume_json(&a.pool, &v))
        }
        _ => {
            let a: Vol = params(p)?;
            volumes::delete(target, &a.pool, &a.name).map_err(err)?;
            Ok(json!({"deleted": format!("{}/{}", a.pool, a.name)}))
        }
    }
}

fn snapshots(method: &str, p: &Value) -> Result<Value, RpcError> {
    match method {
        "snapshot_create" => {
            let a: Snap = params(p)?;
            let v = (store(&a.pool)?.snapshot(&a.volume, &a.name))
                .map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            Ok(volume_json(&a.pool, &v))
        }
        _ => {
            let a: CloneVol = params(p)?;
            let v = (store(&a.pool)?.clone_volume(&a.snapshot, &a.name))
                .map_err(|e| err(PoolsError::of(&a.pool)(e)))?;
            Ok(volume_json(&a.pool, &v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pool_error_has_its_code() {
        let of = |e| code(&PoolsError::of("p")(e));
        assert_eq!(of(PoolError::NotFound("v".into())), jsonrpc::NOT_FOUND);
        assert_eq!(of(PoolError::Exists("v".into())), jsonrpc::EXISTS);
        assert_eq!(of(PoolError::Exported("v".into())), jsonrpc::IN_USE);
        let clones = PoolError::HasClones {
            name: "s".into(),
            children: "c".into(),
        };
        assert_eq!(of(clones), jsonrpc::IN_USE);
        assert_eq!(of(PoolError::NoSpace("p".into())), jsonrpc::NO_SPACE);
        let below = PoolError::BelowUsed {
            name: "v".into(),
            size: 1,
            highest_written: 2,
        };
        assert_eq!(of(below), jsonrpc::INVALID_CONFIG);
        let corrupt = PoolError::Corrupt { what: "x".into() };
        assert_eq!(of(corrupt), jsonrpc::FAILED);
        assert_eq!(
            code(&PoolsError::InUse {
                name: "p".into(),
                volumes: "v".into()
            }),
            jsonrpc::IN_USE
        );
        assert_eq!(code(&PoolsError::NotFound("p".into())), jsonrpc::NOT_FOUND);
    }
}
