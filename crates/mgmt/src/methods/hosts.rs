//! Who may connect and how they are served: `host_*` (allowed hosts,
//! DH-HMAC-CHAP keys, TLS PSKs), `qos_*` (docs/qos.md), `ana_state_*`
//! (docs/ha.md).

use super::subsystems::Nqn;
use super::{human, manage_err, params, report, Api, MethodDef, Param};
use crate::jsonrpc::RpcError;
use farflash_control::manage::{self, ManageError};
use farflash_core::config::{DhchapKey, HostAuthConfig};
use farflash_core::qos::QosConfig;
use farflash_core::tls_key::TlsKey;
use serde::Deserialize;
use serde_json::{json, Value};

pub const METHODS: &[MethodDef] = &[
    MethodDef::new(
        "host_allow",
        "Allows a host NQN to connect. With dhchap_key (DHHC-1 secret, as `nvme gen-dhchap-key` prints it) the host must authenticate with DH-HMAC-CHAP; dhchap_ctrl_key adds bidirectional authentication; with psk (a configured TLS PSK, `NVMeTLSkey-1:0x:...:` as `nvme gen-tls-key` prints it, or a 0600 key file's path; SPDK's nvmf_subsystem_add_host name) the host may connect over TLS listeners; a host allowed already only takes the new keys, all of them replaced (from its next authentication / handshake). Keys are never logged or echoed; save_config writes them to its 0600 file. With read_only true the host's controllers see every namespace write protected (NSATTR bit 0; writes get Namespace is Write Protected); a host allowed already keeps its grant: asking another read_only is refused (-32008 Conflict, naming read_only) until host_disallow.",
        &[
            Param::req("nqn"),
            Param::req("host"),
            Param::opt("read_only"),
            Param::opt("dhchap_key"),
            Param::opt("dhchap_ctrl_key"),
            Param::opt("dhchap_hash"),
            Param::opt("dhchap_dhgroup"),
            Param::opt("psk"),
            Param::opt("tls_derivation"),
        ],
        host_allow,
    ),
    MethodDef::new(
        "host_disallow",
        "Removes a host from the allowed list; its controllers are disconnected at once. The last allowed host cannot be removed (that would allow any host). Its keys are removed too.",
        &[Param::req("nqn"), Param::req("host")],
        host_disallow,
    ),
    MethodDef::new(
        "host_psk_set",
        "Sets or replaces a host's TLS PSK (and the derivation layouts accepted for it), keeping its DH-HMAC-CHAP keys: key rotation. Queues connected with the old key keep running; new connections (TLS handshakes) use the new key. A subsystem with an allowed-hosts list must list the host. The key is never logged or echoed.",
        &[
            Param::req("nqn"),
            Param::req("host"),
            Param::req("psk"),
            Param::opt("tls_derivation"),
        ],
        host_psk_set,
    ),
    MethodDef::new(
        "host_psk_remove",
        "Removes a host's TLS PSK (its DH-HMAC-CHAP keys stay); connected queues keep running, new TLS handshakes for the host fail.",
        &[Param::req("nqn"), Param::req("host")],
        host_psk_remove,
    ),
    MethodDef::new(
        "qos_set",
        "Sets the QoS entry for one namespace or host of a subsystem, replacing the one there was; with neither limits nor a weight it removes the entry. Live queues adopt it within 100 ms; no connection drops. A bad value is refused with the field named.",
        &[
            Param::req("nqn"),
            Param::opt("nsid"),
            Param::opt("host"),
            Param::opt("weight"),
            Param::opt("rw_ios_per_sec"),
            Param::opt("r_ios_per_sec"),
            Param::opt("w_ios_per_sec"),
            Param::opt("rw_bytes_per_sec"),
            Param::opt("r_bytes_per_sec"),
            Param::opt("w_bytes_per_sec"),
            Param::opt("burst_ms"),
        ],
        qos_set,
    ),
    MethodDef::new(
        "qos_get",
        "The subsystem's QoS entries and, per host NQN, the seconds its queues spent with commands waiting for QoS tokens.",
        &[Param::req("nqn")],
        qos_get,
    )
    .with_human(human::json)
    .read_only(),
    MethodDef::new(
        "ana_state_set",
        "Sets the ANA state (Base 2.0 §8.20) of one ANA group of the subsystem as seen through one listener; 'optimized' (the default) removes the entry. Controllers of the subsystem that enabled ANA Change Notices get an asynchronous event; queues apply the state before their next command (I/O on an inaccessible, persistent-loss or change path gets the path-related status 302h, 301h or 303h). See docs/ha.md.",
        &[
            Param::req("nqn"),
            Param::req("listen"),
            Param::req("anagrpid"),
            Param::req("state"),
        ],
        ana_state_set,
    ),
    MethodDef::new(
        "ana_state_get",
        "The ANA state of every ANA group of the subsystem (those holding namespaces and those configured) through every listener.",
        &[Param::req("nqn")],
        ana_state_get,
    )
    .with_human(human::ana_state_get)
    .read_only(),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostRef {
    nqn: String,
    host: String,
    /// The host's DH-HMAC-CHAP secret (`DHHC-1:...`, as `nvme
    /// gen-dhchap-key` prints it); parsed here, never logged or echoed.
    #[serde(default)]
    dhchap_key: Option<DhchapKey>,
    /// The controller's secret, for bidirectional authentication.
    #[serde(default)]
    dhchap_ctrl_key: Option<DhchapKey>,
    /// Hashes and DH groups the controller may select (empty: all).
    #[serde(default)]
    dhchap_hash: Vec<String>,
    #[serde(default)]
    dhchap_dhgroup: Vec<String>,
    /// The host's configured TLS PSK (`NVMeTLSkey-1:0x:...:` or a key
    /// file's path; SPDK's `nvmf_subsystem_add_host` calls it `psk`);
    /// parsed here, never logged or echoed.
    #[serde(default)]
    psk: Option<TlsKey>,
    /// Derivation layouts accepted for `psk` (empty: libnvme-1.10, rfc8446).
    #[serde(default)]
    tls_derivation: Vec<String>,
    /// Read-only access: the host's controllers see every namespace write
    /// protected (docs/management.md, "Read-only hosts").
    #[serde(default)]
    read_only: bool,
}

/// `host_psk_set`: a host's TLS PSK alone (its DH-HMAC-CHAP keys stay).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostPsk {
    nqn: String,
    host: String,
    /// `NVMeTLSkey-1:0x:...:` or a key file's path; never logged or echoed.
    psk: TlsKey,
    #[serde(default)]
    tls_derivation: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostOnly {
    nqn: String,
    host: String,
}

/// `ana_state_set` (docs/ha.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnaSet {
    nqn: String,
    listen: String,
    anagrpid: u32,
    state: String,
}

fn host_allow(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: HostRef = params(p)?;
    if a.dhchap_key.is_none()
        && (a.dhchap_ctrl_key.is_some()
            || !a.dhchap_hash.is_empty()
            || !a.dhchap_dhgroup.is_empty())
    {
        return Err(RpcError::params(
            "dhchap_ctrl_key, dhchap_hash and dhchap_dhgroup need dhchap_key",
        ));
    }
    if a.psk.is_none() && !a.tls_derivation.is_empty() {
        return Err(RpcError::params("tls_derivation needs psk"));
    }
    let keys = (a.dhchap_key.is_some() || a.psk.is_some()).then(|| HostAuthConfig {
        dhchap_key: a.dhchap_key,
        dhchap_ctrl_key: a.dhchap_ctrl_key,
        dhchap_hash: a.dhchap_hash,
        dhchap_dhgroup: a.dhchap_dhgroup,
        tls_key: a.psk,
        tls_derivation: a.tls_derivation,
        ..HostAuthConfig::new(a.host.clone())
    });
    report(manage::allow_host(
        &api.target,
        &a.nqn,
        &a.host,
        keys,
        a.read_only,
    ))
}

fn host_disallow(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: HostOnly = params(p)?;
    report(manage::disallow_host(&api.target, &a.nqn, &a.host))
}

fn host_psk_set(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: HostPsk = params(p)?;
    report(manage::set_host_psk(
        &api.target,
        &a.nqn,
        &a.host,
        a.psk,
        a.tls_derivation,
    ))
}

fn host_psk_remove(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: HostOnly = params(p)?;
    report(manage::remove_host_psk(&api.target, &a.nqn, &a.host))
}

fn qos_set(api: &Api, p: &Value) -> Result<Value, RpcError> {
    // The entry's own fields, beside the subsystem's NQN.
    let mut rest = p.clone();
    let nqn = match rest.as_object_mut().and_then(|o| o.remove("nqn")) {
        Some(Value::String(s)) => s,
        _ => {
            return Err(RpcError::params(
                "invalid params: nqn (a string) is required",
            ))
        }
    };
    let entry: QosConfig = QosConfig::deserialize(&rest).map_err(|e| {
        // serde_json names a field only when it is unknown: find the one
        // whose value is wrong.
        let bad = (rest.as_object().into_iter().flatten())
            .find(|(k, v)| QosConfig::deserialize(&json!({k.as_str(): v})).is_err())
            .map(|(k, _)| format!("{k}: "));
        RpcError::params(format!("invalid params: {}{e}", bad.unwrap_or_default()))
    })?;
    report(manage::set_qos(&api.target, &nqn, entry))
}

fn qos_get(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Nqn = params(p)?;
    let sub = (api.target.subsystems().iter())
        .find(|s| s.nqn == a.nqn)
        .cloned()
        .ok_or_else(|| manage_err(ManageError::NotFound(format!("no subsystem {}", a.nqn))))?;
    let q = sub.qos();
    let hosts = sub.stats.by_host();
    Ok(json!({
        "entries": q.config,
        "throttled_seconds": hosts.iter().map(|(h, t)| (h.clone(), json!(t.throttled_ns as f64 / 1e9))).collect::<serde_json::Map<String, Value>>(),
    }))
}

fn ana_state_set(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: AnaSet = params(p)?;
    report(manage::set_ana_state(
        &api.target,
        &a.nqn,
        &a.listen,
        a.anagrpid,
        &a.state,
    ))
}

fn ana_state_get(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let a: Nqn = params(p)?;
    let rows = manage::ana_states(&api.target, &a.nqn).map_err(manage_err)?;
    Ok(json!(rows
        .iter()
        .map(|r| json!({
            "listen": r.listen,
            "anagrpid": r.anagrpid,
            "state": r.state.name(),
            "nsids": r.nsids,
        }))
        .collect::<Vec<_>>()))
}
