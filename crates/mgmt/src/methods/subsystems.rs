//! Subsystems and their namespaces: `subsystem_*`, `namespace_*`.

use super::{hex, human, manage_err, params, report, report_json, uuid_str, Api, MethodDef, Param};
use crate::jsonrpc::RpcError;
use farflash_control::manage;
use farflash_core::config::{BackendKind, NamespaceConfig, RbdConfig, Size, SubsystemConfig};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;

pub const METHODS: &[MethodDef] = &[
    MethodDef::new(
        "subsystem_list",
        "Subsystems with their namespaces, allowed hosts and controller count.",
        &[Param::opt("nqn")],
        subsystem_list,
    )
    .with_human(human::subsystem_list)
    .read_only(),
    MethodDef::new(
        "subsystem_create",
        "Creates a subsystem (discovery controllers get a Discovery Log Page Change event).",
        &[
            Param::req("nqn"),
            Param::opt("serial"),
            Param::opt("model"),
            Param::opt("cntlid_min"),
            Param::opt("cntlid_max"),
            Param::opt("allowed_hosts"),
            Param::opt("namespaces"),
        ],
        subsystem_create,
    ),
    MethodDef::new(
        "subsystem_delete",
        "Deletes a subsystem; its controllers are disconnected. The last one may go: the target then serves discovery only.",
        &[Param::req("nqn")],
        subsystem_delete,
    ),
    MethodDef::new(
        "namespace_add",
        "Adds a namespace (the next free NSID when none is given); hosts get a Namespace Attribute Changed event and the Changed Namespace List.",
        &[
            Param::req("nqn"),
            Param::opt("nsid"),
            Param::req("backend"),
            Param::opt("path"),
            Param::opt("size"),
            Param::opt("block_size"),
            Param::opt("uuid"),
            Param::opt("nguid"),
            Param::opt("anagrpid"),
            Param::opt("ptpl_file"),
            Param::opt("rbd"),
            Param::opt("volume"),
        ],
        namespace_add,
    ),
    MethodDef::new(
        "namespace_remove",
        "Removes a namespace; commands in flight complete, later ones get Invalid Namespace; hosts are told.",
        &[Param::req("nqn"), Param::req("nsid")],
        namespace_remove,
    ),
    MethodDef::new(
        "namespace_resize",
        "Resizes a namespace keeping its data: a file namespace grows (its file is extended), a null one takes any size; RAM namespaces cannot. Hosts are told.",
        &[Param::req("nqn"), Param::req("nsid"), Param::req("size")],
        namespace_resize,
    ),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Nqn {
    pub(super) nqn: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NqnOpt {
    #[serde(default)]
    pub(super) nqn: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSubsystem {
    nqn: String,
    #[serde(default)]
    serial: Option<String>,
    #[serde(default)]
    model: Option<String>,
    /// CNTLID range (docs/ha.md).
    #[serde(default)]
    cntlid_min: Option<u16>,
    #[serde(default)]
    cntlid_max: Option<u16>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    namespaces: Vec<NamespaceConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddNamespace {
    nqn: String,
    #[serde(default)]
    nsid: Option<u32>,
    backend: BackendKind,
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    size: Option<Size>,
    #[serde(default)]
    block_size: Option<u32>,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    nguid: Option<String>,
    /// ANA group (docs/ha.md), 1 when absent.
    #[serde(default)]
    anagrpid: Option<u32>,
    /// PTPL file for reservations (docs/ha.md).
    #[serde(default)]
    ptpl_file: Option<PathBuf>,
    /// For `backend: "rbd"`: `{pool, image, conf?, id?, keyring?}`.
    #[serde(default)]
    rbd: Option<RbdConfig>,
    /// For `backend: "volume"`: `POOL/NAME` (docs/volumes.md).
    #[serde(default)]
    volume: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NsRef {
    nqn: String,
    nsid: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resize {
    nqn: String,
    nsid: u32,
    size: Size,
}

fn subsystem_list(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: NqnOpt = params(p)?;
    let nqn = a.nqn.as_deref();
    let ctrls = api.target.controllers();
    let subs = api.target.subsystems();
    let list: Vec<Value> = subs
        .iter()
        .filter(|s| nqn.is_none_or(|n| n == s.nqn))
        .map(|s| {
            json!({
                "nqn": s.nqn,
                "serial": s.serial,
                "model": s.model,
                "allowed_hosts": s.allowed_hosts(),
                "read_only_hosts": s.read_only_hosts(),
                "controllers": ctrls.iter().filter(|c| c.subnqn == s.nqn).count(),
                "namespaces": s.namespaces().iter().map(|n| json!({
                    "nsid": n.nsid,
                    "backend": n.config.backend,
                    "path": n.config.path,
                    "size": n.blocks * n.block_size as u64,
                    "block_size": n.block_size,
                    "uuid": uuid_str(&n.uuid),
                    "nguid": hex(&n.nguid),
                    "describe": n.describe,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Value::Array(list))
}

fn subsystem_create(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: CreateSubsystem = params(p)?;
    let mut sc = SubsystemConfig::new(a.nqn, a.namespaces);
    sc.serial = a.serial;
    sc.model = a.model;
    (sc.cntlid_min, sc.cntlid_max) = (a.cntlid_min, a.cntlid_max);
    sc.allowed_hosts = a.allowed_hosts;
    report(manage::create_subsystem(&api.target, sc))
}

fn subsystem_delete(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Nqn = params(p)?;
    report(manage::delete_subsystem(&api.target, &a.nqn))
}

fn namespace_add(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: AddNamespace = params(p)?;
    let nc = NamespaceConfig {
        nsid: a.nsid,
        backend: a.backend,
        path: a.path,
        size: a.size,
        block_size: a.block_size,
        uuid: a.uuid,
        nguid: a.nguid,
        anagrpid: a.anagrpid,
        ptpl_file: a.ptpl_file,
        rbd: a.rbd,
        volume: a.volume,
        commit: false,
    };
    let (r, nsid) = manage::add_namespace(&api.target, &a.nqn, nc).map_err(manage_err)?;
    let mut v = report_json(&r);
    v["nsid"] = json!(nsid);
    Ok(v)
}

fn namespace_remove(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: NsRef = params(p)?;
    report(manage::remove_namespace(&api.target, &a.nqn, a.nsid))
}

fn namespace_resize(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Resize = params(p)?;
    report(manage::resize_namespace(
        &api.target,
        &a.nqn,
        a.nsid,
        a.size.0,
    ))
}
