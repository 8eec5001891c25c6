//! StorageClass parameters (CreateVolume), VolumeAttributesClass
//! parameters (ControllerModifyVolume) and the publish secrets, checked
//! with errors naming the parameter (InvalidArgument). docs/kubernetes.md
//! lists them.

use crate::config::ControllerConfig;
use crate::ids::valid_pool_name;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

/// Keys the CO's sidecars use for themselves (external-provisioner strips
/// most; any left are not ours to judge).
const RESERVED_PREFIX: &str = "csi.storage.k8s.io/";
/// QoS keys, as farflash's `qos_set` and `[[subsystem.qos]]` name them
/// (docs/qos.md), after `qos.` in a parameter's name.
const QOS_COUNTS: [&str; 4] = [
    "rw_ios_per_sec",
    "r_ios_per_sec",
    "w_ios_per_sec",
    "burst_ms",
];
const QOS_BYTES: [&str; 3] = ["rw_bytes_per_sec", "r_bytes_per_sec", "w_bytes_per_sec"];

/// How hosts reach the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    /// NVMe/TCP with TLS: the publish secret carries the host's PSK.
    Tls,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        }
    }
}

/// What a StorageClass asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeParams {
    targets: Vec<String>,
    pool: String,
    transport: Transport,
    dhchap: bool,
    qos: Map<String, Value>,
    node: BTreeMap<String, String>,
}

impl VolumeParams {
    pub fn targets(&self) -> &[String] {
        &self.targets
    }
    pub fn pool(&self) -> &str {
        &self.pool
    }
    pub fn transport(&self) -> Transport {
        self.transport
    }
    pub fn dhchap(&self) -> bool {
        self.dhchap
    }
    /// `qos_set`'s limit fields (empty: no limit).
    pub fn qos(&self) -> &Map<String, Value> {
        &self.qos
    }
    /// Adds (or replaces) QoS limits: a VolumeAttributesClass's.
    pub fn add_qos(&mut self, more: Map<String, Value>) {
        self.qos.extend(more);
    }
    /// What the node service needs, for the volume context.
    pub fn volume_context(&self) -> HashMap<String, String> {
        let mut c: HashMap<String, String> = self.node.clone().into_iter().collect();
        c.insert("transport".into(), self.transport.as_str().into());
        c.insert("dhchap".into(), self.dhchap.to_string());
        c
    }
}

fn invalid(key: &str, why: impl std::fmt::Display) -> String {
    format!("parameter {key}: {why}")
}

fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, format!("{v:?}: want true or false"))),
    }
}

fn parse_count(key: &str, v: &str, min: i64) -> Result<i64, String> {
    match v.trim().parse::<i64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(invalid(
            key,
            format!("{v:?}: want an integer of at least {min}"),
        )),
    }
}

/// One `qos.KEY` parameter into `qos`.
fn parse_qos_entry(key: &str, value: &str, qos: &mut Map<String, Value>) -> Result<(), String> {
    let Some(field) = key.strip_prefix("qos.") else {
        return Err(invalid(key, "unknown parameter"));
    };
    if QOS_COUNTS.contains(&field) {
        qos.insert(field.into(), Value::from(parse_count(key, value, 1)?));
    } else if QOS_BYTES.contains(&field) {
        let s: farflash_core::config::Size = value
            .trim()
            .parse()
            .map_err(|e| invalid(key, format!("{value:?}: {e}")))?;
        if s.0 == 0 {
            return Err(invalid(key, "must be above 0"));
        }
        qos.insert(field.into(), Value::from(s.0));
    } else {
        return Err(invalid(
            key,
            format!(
                "unknown QoS limit (known: {})",
                [&QOS_COUNTS[..], &QOS_BYTES[..]].concat().join(", ")
            ),
        ));
    }
    Ok(())
}

/// CreateVolume's parameters; `config` knows the targets.
pub fn parse(
    params: &HashMap<String, String>,
    config: &ControllerConfig,
) -> Result<VolumeParams, String> {
    let mut targets = None;
    let mut pool = None;
    let mut transport = Transport::Tcp;
    let mut dhchap = false;
    let mut qos = Map::new();
    let mut node = BTreeMap::new();
    let mut keys: Vec<&String> = params.keys().collect();
    keys.sort();
    for key in keys {
        let v = params[key].as_str();
        match key.as_str() {
            k if k.starts_with(RESERVED_PREFIX) => {}
            "targets" => targets = Some(parse_targets(v, config)?),
            "pool" => {
                if !valid_pool_name(v) {
                    return Err(invalid(
                        key,
                        format!("{v:?}: want 1-64 characters of [A-Za-z0-9._:@+-]"),
                    ));
                }
                pool = Some(v.to_owned());
            }
            "transport" => {
                transport = match v {
                    "tcp" => Transport::Tcp,
                    "tls" => Transport::Tls,
                    _ => return Err(invalid(key, format!("{v:?}: want tcp or tls"))),
                }
            }
            "dhchap" => dhchap = parse_bool(key, v)?,
            "ctrlLossTmo" => {
                node.insert(key.clone(), parse_count(key, v, -1)?.to_string());
            }
            "reconnectDelay" => {
                node.insert(key.clone(), parse_count(key, v, 1)?.to_string());
            }
            k => parse_qos_entry(k, v, &mut qos)?,
        }
    }
    Ok(VolumeParams {
        targets: targets
            .ok_or_else(|| invalid("targets", "missing (the targets' names, comma-separated)"))?,
        pool: pool.ok_or_else(|| invalid("pool", "missing (the pool's name on the targets)"))?,
        transport,
        dhchap,
        qos,
        node,
    })
}

fn parse_targets(v: &str, config: &ControllerConfig) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for t in v.split(',').map(str::trim) {
        if config.target(t).is_none() {
            let known: Vec<&str> = config.targets().iter().map(|t| t.name()).collect();
            return Err(invalid(
                "targets",
                format!(
                    "{t:?} is not in the controller's configuration (known: {})",
                    known.join(", ")
                ),
            ));
        }
        if out.iter().any(|o| o == t) {
            return Err(invalid("targets", format!("{t:?} named twice")));
        }
        out.push(t.to_owned());
    }
    Ok(out)
}

/// ControllerModifyVolume's mutable parameters: QoS limits only. An empty
/// map of limits removes them.
pub fn parse_mutable(params: &HashMap<String, String>) -> Result<Map<String, Value>, String> {
    let mut qos = Map::new();
    for (k, v) in params {
        parse_qos_entry(k, v, &mut qos)
            .map_err(|e| format!("{e} (only qos.* parameters can be modified)"))?;
    }
    Ok(qos)
}

/// Secret keys: in the controller-publish secret (the host's keys the
/// target checks) and the node-stage secret (the same keys, for the host).
pub const SECRET_DHCHAP_KEY: &str = "dhchapKey";
pub const SECRET_DHCHAP_CTRL_KEY: &str = "dhchapCtrlKey";
pub const SECRET_TLS_PSK: &str = "tlsPsk";

/// The keys `host_allow` takes for a volume, from the publish secrets.
/// Values are never put in an error or a log.
pub fn host_keys(
    p_dhchap: bool,
    transport: Transport,
    secrets: &HashMap<String, String>,
) -> Result<Map<String, Value>, String> {
    let mut m = Map::new();
    let get = |k: &str| secrets.get(k).filter(|v| !v.is_empty());
    if p_dhchap {
        let key = get(SECRET_DHCHAP_KEY).ok_or_else(|| {
            format!("secret key {SECRET_DHCHAP_KEY}: missing (the StorageClass has dhchap: \"true\"; set csi.storage.k8s.io/controller-publish-secret-name)")
        })?;
        if !key.starts_with("DHHC-1:") {
            return Err(format!("secret key {SECRET_DHCHAP_KEY}: not a DHHC-1 secret (nvme gen-dhchap-key makes one)"));
        }
        m.insert("dhchap_key".into(), Value::from(key.as_str()));
        if let Some(c) = get(SECRET_DHCHAP_CTRL_KEY) {
            if !c.starts_with("DHHC-1:") {
                return Err(format!(
                    "secret key {SECRET_DHCHAP_CTRL_KEY}: not a DHHC-1 secret"
                ));
            }
            m.insert("dhchap_ctrl_key".into(), Value::from(c.as_str()));
        }
    }
    if transport == Transport::Tls {
        let psk = get(SECRET_TLS_PSK).ok_or_else(|| {
            format!("secret key {SECRET_TLS_PSK}: missing (the StorageClass has transport: tls; set csi.storage.k8s.io/controller-publish-secret-name)")
        })?;
        if !psk.starts_with("NVMeTLSkey-1:") {
            return Err(format!(
                "secret key {SECRET_TLS_PSK}: not an NVMeTLSkey-1 PSK (nvme gen-tls-key makes one)"
            ));
        }
        m.insert("psk".into(), Value::from(psk.as_str()));
    }
    Ok(m)
}

#[cfg(test)]
#[path = "params_tests.rs"]
mod tests;
