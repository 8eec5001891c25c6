//! The pool and volume methods (issue #42, docs/volumes.md): `pool_*`,
//! `volume_*`, `snapshot_create`. Pools live in
//! `farflash_control::pools`; what touches exported volumes goes through
//! `farflash_control::volumes`.

use super::{params, report_json, Api, MethodDef, Param};
use crate::jsonrpc::{self, RpcError};
use farflash_control::pools::{registry, PoolsError};
use farflash_control::volumes;
use farflash_core::config::{PoolConfig, RbdPoolConfig, Size};
use farflash_pool::{PoolError, VolumeInfo, VolumeStore};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;

const POOL: Param = Param::req("pool");
const NAME: Param = Param::req("name");

pub const METHODS: &[MethodDef] = &[
    MethodDef::new(
        "pool_create",
        "Creates a pool (docs/volumes.md). A local pool formats its devices (their content is lost; devices that hold a sound pool are refused); an RBD pool connects to an existing Ceph pool (docs/rbd.md: snapshots are named VOLUME@NAME).",
        &[NAME, Param::req("backend"), Param::opt("devices"), Param::opt("cluster_size"), Param::opt("rbd")],
        pool_create,
    )
    .with_human(human::pools),
    MethodDef::new(
        "pool_list",
        "The pools with their space (bytes).",
        &[Param::opt("name")],
        pool_list,
    )
    .with_human(human::pools)
    .read_only(),
    MethodDef::new(
        "pool_delete",
        "Closes a pool that holds no volume. A local pool's devices keep its data: a [[pool]] entry opens it again; wipe them to reuse them (pool_create refuses devices holding a sound pool).",
        &[NAME],
        pool_delete,
    )
    .with_human(human::deleted),
    MethodDef::new(
        "volume_create",
        "Creates a thin volume: nothing allocated until written.",
        &[POOL, NAME, Param::req("size")],
        volume_create,
    )
    .with_human(human::volume),
    MethodDef::new(
        "volume_get",
        "One volume or snapshot with its space.",
        &[POOL, NAME],
        volume_get,
    )
    .with_human(human::volume)
    .read_only(),
    MethodDef::new(
        "volume_list",
        "The volumes and snapshots of one pool, or of every pool.",
        &[Param::opt("pool")],
        volume_list,
    )
    .with_human(human::volumes)
    .read_only(),
    MethodDef::new(
        "volume_resize",
        "Resizes a volume. Grows online: an exported volume's namespace follows at once and hosts get a Namespace Attribute Changed event. A shrink is refused while exported (InUse) and below the highest written cluster unless force (InvalidConfig).",
        &[POOL, NAME, Param::req("size"), Param::opt("force")],
        volume_resize,
    )
    .with_human(human::volume),
    MethodDef::new(
        "volume_rename",
        "Renames a volume or snapshot (its UUID, hence an export's NGUID/UUID, stays). Refused while exported.",
        &[POOL, NAME, Param::req("new_name")],
        volume_rename,
    )
    .with_human(human::volume),
    MethodDef::new(
        "volume_delete",
        "Deletes a volume or snapshot and frees its clusters. A local pool's snapshot with one child (a clone, or the volume it was taken from) is merged into that child. Refused while exported, with more than one child, or, in an RBD pool, while it has clones (InUse, naming them).",
        &[POOL, NAME],
        volume_delete,
    )
    .with_human(human::deleted),
    MethodDef::new(
        "snapshot_create",
        "A read-only point-in-time snapshot of a volume (O(1)); the volume reads through it and copies a cluster on its first write after.",
        &[POOL, Param::req("volume"), NAME],
        snapshot_create,
    )
    .with_human(human::volume),
    MethodDef::new(
        "volume_clone",
        "A writable clone of a snapshot, copy-on-write per cluster.",
        &[POOL, Param::req("snapshot"), NAME],
        volume_clone,
    )
    .with_human(human::volume),
    MethodDef::new(
        "volume_decouple",
        "Copies what a clone reads from its snapshot into its own clusters and cuts it from the snapshot (which can then be deleted).",
        &[POOL, NAME],
        volume_decouple,
    )
    .with_human(human::volume),
];

/// The JSON-RPC code of a pool error.
pub fn code(e: &PoolsError) -> i64 {
    match e {
        PoolsError::NotFound(_) => jsonrpc::NOT_FOUND,
        PoolsError::Exists(_) => jsonrpc::EXISTS,
        PoolsError::InUse { .. } => jsonrpc::IN_USE,
        PoolsError::Invalid(_) => jsonrpc::INVALID_CONFIG,
        PoolsError::Pool { err, .. } => match err {
            PoolError::NotFound(_) => jsonrpc::NOT_FOUND,
            PoolError::Exists(_) => jsonrpc::EXISTS,
            PoolError::HasClones { .. } | PoolError::Exported(_) => jsonrpc::IN_USE,
            PoolError::NoSpace(_) => jsonrpc::NO_SPACE,
            PoolError::Io { err, .. } if farflash_pool::is_no_space(err) => jsonrpc::NO_SPACE,
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

fn store(pool: &str) -> Result<std::sync::Arc<dyn VolumeStore>, RpcError> {
    registry().get(pool).map_err(err)
}

fn in_pool(pool: &str) -> impl FnOnce(PoolError) -> RpcError + '_ {
    move |e| err(PoolsError::of(pool)(e))
}

fn pool_create(_: &Api, p: &Value) -> Result<Value, RpcError> {
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

fn pool_list(_: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: NameOpt = params(p)?;
    match a.name {
        Some(n) => Ok(json!([pool_json(&n, &*store(&n)?)])),
        None => Ok(Value::Array(
            (registry().all().iter())
                .map(|(n, s)| pool_json(n, &**s))
                .collect(),
        )),
    }
}

fn pool_delete(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Name = params(p)?;
    volumes::delete_pool(&api.target, &a.name).map_err(err)?;
    Ok(json!({"deleted": a.name, "data_kept": true}))
}

fn volume_create(_: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: CreateVol = params(p)?;
    let v = (store(&a.pool)?.create_volume(&a.name, a.size.0)).map_err(in_pool(&a.pool))?;
    Ok(volume_json(&a.pool, &v))
}

fn volume_get(_: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Vol = params(p)?;
    let v = (store(&a.pool)?.get(&a.name)).map_err(in_pool(&a.pool))?;
    Ok(volume_json(&a.pool, &v))
}

fn volume_list(_: &Api, p: &Value) -> Result<Value, RpcError> {
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

fn volume_resize(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: ResizeVol = params(p)?;
    let report = volumes::resize(&api.target, &a.pool, &a.name, a.size.0, a.force).map_err(err)?;
    let v = (store(&a.pool)?.get(&a.name)).map_err(in_pool(&a.pool))?;
    let mut out = volume_json(&a.pool, &v);
    if let Some(r) = report {
        out["namespaces_changed"] = report_json(&r)["namespaces_changed"].clone();
    }
    Ok(out)
}

fn volume_rename(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: RenameVol = params(p)?;
    volumes::rename(&api.target, &a.pool, &a.name, &a.new_name).map_err(err)?;
    let v = (store(&a.pool)?.get(&a.new_name)).map_err(in_pool(&a.pool))?;
    Ok(volume_json(&a.pool, &v))
}

fn volume_delete(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Vol = params(p)?;
    volumes::delete(&api.target, &a.pool, &a.name).map_err(err)?;
    Ok(json!({"deleted": format!("{}/{}", a.pool, a.name)}))
}

fn snapshot_create(_: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Snap = params(p)?;
    let v = (store(&a.pool)?.snapshot(&a.volume, &a.name)).map_err(in_pool(&a.pool))?;
    Ok(volume_json(&a.pool, &v))
}

fn volume_clone(_: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: CloneVol = params(p)?;
    let v = (store(&a.pool)?.clone_volume(&a.snapshot, &a.name)).map_err(in_pool(&a.pool))?;
    Ok(volume_json(&a.pool, &v))
}

fn volume_decouple(_: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Vol = params(p)?;
    let s = store(&a.pool)?;
    s.decouple(&a.name).map_err(in_pool(&a.pool))?;
    let v = s.get(&a.name).map_err(in_pool(&a.pool))?;
    Ok(volume_json(&a.pool, &v))
}

mod human;

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
