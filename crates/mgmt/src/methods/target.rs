//! The target as a whole: `rpc_methods`, listeners, controllers, `stats`.

use super::subsystems::NqnOpt;
use super::{human, names, params, report, uuid_str, Api, MethodDef, Param};
use crate::jsonrpc::{self, RpcError};
use farflash_control::manage;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

/// `rpc_methods`, first in its list.
pub const INTROSPECTION: &[MethodDef] = &[MethodDef::new(
    "rpc_methods",
    "The methods this target serves.",
    &[],
    rpc_methods,
)
.with_human(human::lines)
.read_only()];

pub const METHODS: &[MethodDef] = &[
    MethodDef::new("listener_list", "Listeners.", &[], listener_list)
        .with_human(human::listener_list)
    .read_only(),
    MethodDef::new(
        "listener_add",
        "Starts listening on ADDR:PORT (port 0: any free port, reported).",
        &[Param::req("addr")],
        listener_add,
    ),
    MethodDef::new(
        "listener_remove",
        "Stops listening; connections that came through it close within 100 ms. The last listener cannot be removed.",
        &[Param::req("addr")],
        listener_remove,
    ),
    MethodDef::new(
        "controller_list",
        "Live controllers.",
        &[Param::opt("nqn")],
        controller_list,
    )
    .with_human(human::controller_list)
    .read_only(),
    MethodDef::new(
        "controller_disconnect",
        "Ends a controller's association; its queues close.",
        &[Param::req("cntlid")],
        controller_disconnect,
    ),
    MethodDef::new(
        "stats",
        "I/O counters per subsystem and host, and each event loop's sleeps (the same counters /metrics exports).",
        &[Param::opt("nqn")],
        stats,
    )
    .with_human(human::stats)
    .read_only(),
];

/// A method without parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Addr {
    addr: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cntlid {
    cntlid: u16,
}

fn rpc_methods(_: &Api, _: &Value) -> Result<Value, RpcError> {
    Ok(json!(names()))
}

fn listener_list(api: &Api, p: &Value) -> Result<Value, RpcError> {
    params::<NoParams>(p)?;
    Ok(json!(api
        .target
        .listeners()
        .iter()
        .map(|l| json!({"addr": l.addr.to_string(), "configured": l.config, "trtype": l.transport.name()}))
        .collect::<Vec<_>>()))
}

fn listener_add(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Addr = params(p)?;
    report(manage::add_listener(
        &api.target,
        api.listener_ctl()?,
        &a.addr,
    ))
}

fn listener_remove(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Addr = params(p)?;
    report(manage::remove_listener(
        &api.target,
        api.listener_ctl()?,
        &a.addr,
    ))
}

fn controller_list(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: NqnOpt = params(p)?;
    Ok(json!(api
        .target
        .controllers()
        .iter()
        .filter(|c| a.nqn.as_ref().is_none_or(|n| *n == c.subnqn))
        .map(|c| json!({
            "cntlid": c.cntlid,
            "nqn": c.subnqn,
            "host": c.hostnqn,
            "hostid": uuid_str(&c.hostid),
            "io_queues": c.io_queues,
            "kato_ms": c.kato_ms,
            "read_only": c.read_only,
        }))
        .collect::<Vec<_>>()))
}

fn controller_disconnect(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Cntlid = params(p)?;
    if api.target.disconnect_controller(a.cntlid) {
        Ok(json!({"controllers_disconnected": 1}))
    } else {
        Err(RpcError::new(
            jsonrpc::NOT_FOUND,
            format!("no live controller {}", a.cntlid),
        ))
    }
}

fn stats(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: NqnOpt = params(p)?;
    let nqn = a.nqn.as_deref();
    let t = &api.target;
    let list: Vec<Value> = (t.subsystems().iter())
        .filter(|s| nqn.is_none_or(|n| n == s.nqn))
        .map(|s| {
            let hosts: Vec<Value> = (s.stats.by_host().iter())
                .map(|(h, t)| {
                    let tot = t.totals();
                    json!({
                        "host": h,
                        "read_cmds": tot.read_cmds,
                        "write_cmds": tot.write_cmds,
                        "read_bytes": tot.read_bytes,
                        "write_bytes": tot.write_bytes,
                        "media_errors": tot.media_errors,
                        "outstanding": t.outstanding,
                        "errors": t.errors.iter().map(|(k, v)| (format!("0x{k:03x}"), json!(v))).collect::<serde_json::Map<_, _>>(),
                    })
                })
                .collect();
            json!({"nqn": s.nqn, "hosts": hosts})
        })
        .collect();
    Ok(json!({
        "subsystems": list,
        "controllers": t.live_controllers(),
        "keep_alive_expiries": t.keep_alive_expiries.load(Ordering::Relaxed),
        "authentication_failures": t.auth_failures.load(Ordering::Relaxed),
        "workers": t.loops.totals().iter().enumerate().map(|(i, l)| json!({
            "worker": i,
            "timed_sleeps": l.timed_sleeps,
            "missed_sleeps": l.missed,
            "idle_sleeps": l.idle_sleeps,
            "slept_ns": l.slept_ns,
        })).collect::<Vec<_>>(),
    }))
}
