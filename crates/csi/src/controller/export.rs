//! What the targets hold for a volume: the volume in its pool (the
//! volumes JSON-RPC contract) and one subsystem per volume on each of its
//! targets, with the volume as namespace 1. Every step is idempotent: a
//! retried call finds what an earlier one made and goes on.

use crate::config::ControllerConfig;
use crate::ids::VolumeId;
use crate::target::{CallError, Targets};
use farflash_mgmt::jsonrpc as rpc;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Namespace ID of the volume in its subsystem.
pub const NSID: u32 = 1;
/// ANA group of the volume's namespace.
pub const ANAGRPID: u32 = 1;
/// CNTLIDs each target of a volume hands out (disjoint ranges: docs/ha.md).
const CNTLID_SPAN: u16 = 1000;
/// Model string of the subsystems the driver makes.
pub const MODEL: &str = "farflash-csi";
/// A subsystem with no allowed host admits any host: each volume's
/// subsystem is made with one host of this prefix and a random UUID,
/// which no node uses, so that only published nodes get in; it is not a
/// node and never shown as one.
pub const NOBODY: &str = "nqn.2026-11.io.farflash.csi:nobody:";

/// A volume as `volume_get` and `volume_list` describe it.
#[derive(Debug, Clone, Deserialize)]
pub struct Vol {
    pub pool: String,
    pub name: String,
    pub uuid: String,
    pub size: u64,
    #[serde(default)]
    pub snapshot: bool,
}

fn bad_answer(target: &str, method: &str, e: impl std::fmt::Display) -> CallError {
    CallError::Rpc {
        target: target.to_owned(),
        method: method.to_owned(),
        code: rpc::INTERNAL_ERROR,
        message: format!("unexpected answer: {e}"),
    }
}

/// Treats NOT_FOUND as "nothing there".
pub fn absent_ok<T>(r: Result<T, CallError>) -> Result<Option<T>, CallError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is(rpc::NOT_FOUND) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Treats EXISTS as done.
pub fn exists_ok(r: Result<Value, CallError>) -> Result<(), CallError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is(rpc::EXISTS) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The driver's calls into the targets, blocking.
#[derive(Clone)]
pub struct Ops {
    targets: Targets,
    config: Arc<ControllerConfig>,
}

impl Ops {
    pub fn new(targets: Targets, config: Arc<ControllerConfig>) -> Ops {
        Ops { targets, config }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    pub fn call(&self, target: &str, method: &str, params: Value) -> Result<Value, CallError> {
        self.targets.call(target, method, params)
    }

    /// The volume (or snapshot) `id` names, on its primary target.
    pub fn volume(&self, id: &VolumeId) -> Result<Option<Vol>, CallError> {
        let t = id.primary();
        let v = absent_ok(self.call(
            t,
            "volume_get",
            json!({"pool": id.pool(), "name": id.name()}),
        ))?;
        v.map(|v| serde_json::from_value(v).map_err(|e| bad_answer(t, "volume_get", e)))
            .transpose()
    }

    /// Every volume and snapshot of `target` (all pools).
    pub fn list(&self, target: &str) -> Result<Vec<Vol>, CallError> {
        let v = self.call(target, "volume_list", json!({}))?;
        serde_json::from_value(v).map_err(|e| bad_answer(target, "volume_list", e))
    }

    /// The hosts allowed on the volume's subsystem on `target` (None: no
    /// subsystem there).
    pub fn allowed_hosts(
        &self,
        target: &str,
        id: &VolumeId,
    ) -> Result<Option<Vec<String>>, CallError> {
        let v = self.call(target, "subsystem_list", json!({"nqn": id.nqn()}))?;
        let Some(sub) = v.as_array().and_then(|a| a.first()) else {
            return Ok(None);
        };
        let hosts = sub["allowed_hosts"]
            .as_array()
            .ok_or_else(|| bad_answer(target, "subsystem_list", "no allowed_hosts"))?;
        Ok(Some(
            hosts
                .iter()
                .filter_map(|h| h.as_str())
                .filter(|h| !h.starts_with(NOBODY))
                .map(str::to_owned)
                .collect(),
        ))
    }

    /// Makes the volume's subsystem on every target of `id`, with the
    /// volume as its namespace, QoS limits `qos` (none: leaves them), the
    /// first target's paths ANA optimized and the others' non-optimized.
    pub fn export(
        &self,
        id: &VolumeId,
        vol: &Vol,
        qos: &Map<String, Value>,
    ) -> Result<(), CallError> {
        let nqn = id.nqn();
        // One serial on every target (multipath joins on it): from the UUID.
        let serial: String = vol
            .uuid
            .chars()
            .filter(|c| c.is_ascii_hexdigit())
            .take(20)
            .collect();
        for (i, t) in id.targets().iter().enumerate() {
            let lo = 1 + CNTLID_SPAN * i as u16;
            exists_ok(self.call(
                t,
                "subsystem_create",
                json!({"nqn": nqn, "serial": serial, "model": MODEL,
                       "cntlid_min": lo, "cntlid_max": lo + CNTLID_SPAN - 1,
                       "allowed_hosts": [format!("{NOBODY}{}", uuid::Uuid::new_v4())]}),
            ))?;
            let ns = self.call(
                t,
                "namespace_add",
                json!({"nqn": nqn, "nsid": NSID, "backend": "volume", "volume": id.pool_path(),
                       "uuid": vol.uuid, "anagrpid": ANAGRPID}),
            );
            exists_ok(ns)?;
            if !qos.is_empty() {
                self.set_qos(t, &nqn, qos)?;
            }
            if i > 0 {
                for listen in self.config.target(t).map(|e| e.nvme()).unwrap_or_default() {
                    self.call(
                        t,
                        "ana_state_set",
                        json!({"nqn": nqn, "listen": listen, "anagrpid": ANAGRPID, "state": "non-optimized"}),
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Replaces the volume's namespace QoS entry on `target` (an empty
    /// `qos` removes the limits).
    pub fn set_qos(
        &self,
        target: &str,
        nqn: &str,
        qos: &Map<String, Value>,
    ) -> Result<(), CallError> {
        let mut p = qos.clone();
        p.insert("nqn".into(), json!(nqn));
        p.insert("nsid".into(), json!(NSID));
        self.call(target, "qos_set", Value::Object(p)).map(|_| ())
    }

    /// Removes the volume's subsystem from every target (gone already: fine).
    pub fn unexport(&self, id: &VolumeId) -> Result<(), CallError> {
        for t in id.targets() {
            absent_ok(self.call(t, "subsystem_delete", json!({"nqn": id.nqn()})))?;
        }
        Ok(())
    }
}
