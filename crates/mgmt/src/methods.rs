//! The management API's methods, named after the objects they act on
//! (`subsystem_create`, `namespace_resize`, ...). The schema is
//! docs/rpc-schema.json; every change goes through
//! `farflash_control::manage` (and so through the path `SIGHUP` takes).

use crate::jsonrpc::{self, Request, RpcError};
use farflash_control::manage::{self, ManageError};
use farflash_control::reload::{self, ApplyError, ListenerControl, ReloadReport};
use farflash_core::config::{
    BackendKind, ConfigError, DhchapKey, HostAuthConfig, NamespaceConfig, RbdConfig, Size,
    SubsystemConfig,
};
use farflash_core::qos::QosConfig;
use farflash_core::subsystem::BuildError;
use farflash_core::tls_key::TlsKey;
use farflash_core::Target;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

/// Every method, in the order `rpc_methods` lists them.
pub const METHODS: &[&str] = &[
    "rpc_methods",
    "subsystem_list",
    "subsystem_create",
    "subsystem_delete",
    "namespace_add",
    "namespace_remove",
    "namespace_resize",
    "host_allow",
    "host_disallow",
    "host_psk_set",
    "host_psk_remove",
    "qos_set",
    "qos_get",
    "ana_state_set",
    "ana_state_get",
    "listener_list",
    "listener_add",
    "listener_remove",
    "controller_list",
    "controller_disconnect",
    "stats",
    "save_config",
    "load_config",
];

/// What the methods act on.
pub struct Api {
    pub target: Arc<Target>,
    /// Listener changes (None: `listener_add`/`listener_remove` refuse).
    pub listeners: Option<Box<dyn ListenerControl + Send + Sync>>,
}

fn params<T: DeserializeOwned>(p: &Value) -> Result<T, RpcError> {
    T::deserialize(p).map_err(|e| RpcError::params(format!("invalid params: {e}")))
}

fn manage_err(e: ManageError) -> RpcError {
    let code = match &e {
        ManageError::NotFound(_) => jsonrpc::NOT_FOUND,
        ManageError::Exists(_) => jsonrpc::EXISTS,
        ManageError::Apply(
            ApplyError::Invalid(ConfigError::Limit(_))
            | ApplyError::Build(BuildError::Descriptors(_)),
        ) => jsonrpc::LIMIT_EXCEEDED,
        ManageError::Apply(ApplyError::Pools(p)) => crate::volumes::code(p),
        ManageError::Invalid(_) | ManageError::Apply(ApplyError::Invalid(_)) => {
            jsonrpc::INVALID_CONFIG
        }
        ManageError::Apply(_) => jsonrpc::FAILED,
    };
    RpcError::new(code, e.to_string())
}

/// A reload report as JSON.
pub fn report_json(r: &ReloadReport) -> Value {
    json!({
        "namespaces_changed": r.changed.iter().map(|(nqn, ids)| json!({"nqn": nqn, "nsids": ids})).collect::<Vec<_>>(),
        "subsystems_added": r.subsystems_added,
        "subsystems_removed": r.subsystems_removed,
        "hosts_changed": r.hosts_changed,
        "qos_changed": r.qos_changed,
        "ana_changed": r.ana_changed,
        "controllers_disconnected": r.disconnected,
        "listeners_added": r.listeners_added.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "listeners_removed": r.listeners_removed.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "ignored": r.ignored,
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn uuid_str(b: &[u8; 16]) -> String {
    let h = hex(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Nqn {
    nqn: String,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NqnOpt {
    #[serde(default)]
    nqn: Option<String>,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveConfig {
    #[serde(default)]
    path: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadConfig {
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    toml: Option<String>,
}

impl Api {
    pub fn new(target: Arc<Target>) -> Api {
        Api {
            target,
            listeners: None,
        }
    }

    fn listener_ctl(&self) -> Result<&dyn ListenerControl, RpcError> {
        match &self.listeners {
            Some(l) => Ok(l.as_ref()),
            None => Err(RpcError::new(
                jsonrpc::FAILED,
                "listeners cannot be changed here",
            )),
        }
    }

    /// Runs one request.
    pub fn call(&self, req: &Request) -> Result<Value, RpcError> {
        let p = &req.params;
        let t = &self.target;
        let rep =
            |r: Result<ReloadReport, ManageError>| r.map(|r| report_json(&r)).map_err(manage_err);
        // Pools and volumes (volumes.rs).
        if let Some(r) = crate::volumes::call(t, &req.method, p) {
            return r;
        }
        match req.method.as_str() {
            "rpc_methods" => Ok(json!(METHODS
                .iter()
                .chain(crate::volumes::METHODS)
                .collect::<Vec<_>>())),
            "subsystem_list" => {
                let a: NqnOpt = params(p)?;
                Ok(self.subsystem_list(a.nqn.as_deref()))
            }
            "subsystem_create" => {
                let a: CreateSubsystem = params(p)?;
                let mut sc = SubsystemConfig::new(a.nqn, a.namespaces);
                sc.serial = a.serial;
                sc.model = a.model;
                (sc.cntlid_min, sc.cntlid_max) = (a.cntlid_min, a.cntlid_max);
                sc.allowed_hosts = a.allowed_hosts;
                rep(manage::create_subsystem(t, sc))
            }
            "subsystem_delete" => {
                let a: Nqn = params(p)?;
                rep(manage::delete_subsystem(t, &a.nqn))
            }
            "namespace_add" => {
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
                let (r, nsid) = manage::add_namespace(t, &a.nqn, nc).map_err(manage_err)?;
                let mut v = report_json(&r);
                v["nsid"] = json!(nsid);
                Ok(v)
            }
            "namespace_remove" => {
                let a: NsRef = params(p)?;
                rep(manage::remove_namespace(t, &a.nqn, a.nsid))
            }
            "namespace_resize" => {
                let a: Resize = params(p)?;
                rep(manage::resize_namespace(t, &a.nqn, a.nsid, a.size.0))
            }
            "host_allow" => {
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
                rep(manage::allow_host(t, &a.nqn, &a.host, keys))
            }
            "host_disallow" => {
                let a: HostRef = params(p)?;
                rep(manage::disallow_host(t, &a.nqn, &a.host))
            }
            "host_psk_set" => {
                let a: HostPsk = params(p)?;
                rep(manage::set_host_psk(
                    t,
                    &a.nqn,
                    &a.host,
                    a.psk,
                    a.tls_derivation,
                ))
            }
            "host_psk_remove" => {
                let a: HostOnly = params(p)?;
                rep(manage::remove_host_psk(t, &a.nqn, &a.host))
            }
            "qos_set" => {
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
                    // serde_json names a field only when it is unknown:
                    // find the one whose value is wrong.
                    let bad = (rest.as_object().into_iter().flatten())
                        .find(|(k, v)| QosConfig::deserialize(&json!({k.as_str(): v})).is_err())
                        .map(|(k, _)| format!("{k}: "));
                    RpcError::params(format!("invalid params: {}{e}", bad.unwrap_or_default()))
                })?;
                rep(manage::set_qos(t, &nqn, entry))
            }
            "qos_get" => {
                let a: Nqn = params(p)?;
                let sub = (t.subsystems().iter())
                    .find(|s| s.nqn == a.nqn)
                    .cloned()
                    .ok_or_else(|| {
                        manage_err(ManageError::NotFound(format!("no subsystem {}", a.nqn)))
                    })?;
                let q = sub.qos();
                let hosts = sub.stats.by_host();
                Ok(json!({
                    "entries": q.config,
                    "throttled_seconds": hosts.iter().map(|(h, t)| (h.clone(), json!(t.throttled_ns as f64 / 1e9))).collect::<serde_json::Map<String, Value>>(),
                }))
            }
            "ana_state_set" => {
                let a: AnaSet = params(p)?;
                rep(manage::set_ana_state(
                    t, &a.nqn, &a.listen, a.anagrpid, &a.state,
                ))
            }
            "ana_state_get" => {
                let a: Nqn = params(p)?;
                let rows = manage::ana_states(t, &a.nqn).map_err(manage_err)?;
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
            "listener_list" => {
                params::<NqnOpt>(p)?;
                Ok(json!(t
                    .listeners()
                    .iter()
                    .map(|l| json!({"addr": l.addr.to_string(), "configured": l.config, "trtype": "tcp"}))
                    .collect::<Vec<_>>()))
            }
            "listener_add" => {
                let a: Addr = params(p)?;
                rep(manage::add_listener(t, self.listener_ctl()?, &a.addr))
            }
            "listener_remove" => {
                let a: Addr = params(p)?;
                rep(manage::remove_listener(t, self.listener_ctl()?, &a.addr))
            }
            "controller_list" => {
                let a: NqnOpt = params(p)?;
                Ok(json!(t
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
                    }))
                    .collect::<Vec<_>>()))
            }
            "controller_disconnect" => {
                let a: Cntlid = params(p)?;
                if t.disconnect_controller(a.cntlid) {
                    Ok(json!({"controllers_disconnected": 1}))
                } else {
                    Err(RpcError::new(
                        jsonrpc::NOT_FOUND,
                        format!("no live controller {}", a.cntlid),
                    ))
                }
            }
            "stats" => {
                let a: NqnOpt = params(p)?;
                Ok(self.stats(a.nqn.as_deref()))
            }
            "save_config" => {
                let a: SaveConfig = params(p)?;
                self.save_config(a.path)
            }
            "load_config" => {
                let a: LoadConfig = params(p)?;
                let cfg = match (a.path, a.toml) {
                    (Some(path), None) => farflash_control::config::load(&path),
                    (None, Some(text)) => farflash_control::config::from_toml(&text, "load_config"),
                    _ => return Err(RpcError::params("give one of \"path\" and \"toml\"")),
                }
                .map_err(|e| {
                    let code = match e {
                        ConfigError::Limit(_) => jsonrpc::LIMIT_EXCEEDED,
                        _ => jsonrpc::INVALID_CONFIG,
                    };
                    RpcError::new(code, e.to_string())
                })?;
                let ctl = self.listeners.as_deref().map(|l| l as &dyn ListenerControl);
                reload::apply_with(t, &cfg, ctl)
                    .map(|r| report_json(&r))
                    .map_err(|e| manage_err(ManageError::Apply(e)))
            }
            m => Err(RpcError::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!(
                    "no method {:?} (rpc_methods lists them)",
                    m.chars().take(64).collect::<String>()
                ),
            )),
        }
    }

    fn subsystem_list(&self, nqn: Option<&str>) -> Value {
        let ctrls = self.target.controllers();
        let subs = self.target.subsystems();
        let list: Vec<Value> = subs
            .iter()
            .filter(|s| nqn.is_none_or(|n| n == s.nqn))
            .map(|s| {
                json!({
                    "nqn": s.nqn,
                    "serial": s.serial,
                    "model": s.model,
                    "allowed_hosts": s.allowed_hosts(),
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
        Value::Array(list)
    }

    fn stats(&self, nqn: Option<&str>) -> Value {
        let subs = self.target.subsystems();
        let list: Vec<Value> = subs
            .iter()
            .filter(|s| nqn.is_none_or(|n| n == s.nqn))
            .map(|s| {
                let hosts: Vec<Value> = s
                    .stats
                    .by_host()
                    .iter()
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
        json!({
            "subsystems": list,
            "controllers": self.target.live_controllers(),
            "keep_alive_expiries": self.target.keep_alive_expiries.load(std::sync::atomic::Ordering::Relaxed),
            "authentication_failures": self.target.auth_failures.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    fn save_config(&self, path: Option<PathBuf>) -> Result<Value, RpcError> {
        let cfg = {
            let _serial = self.target.manage_lock();
            reload::current_config(&self.target)
        };
        let text = toml::to_string_pretty(&cfg).map_err(|e| {
            RpcError::new(jsonrpc::INTERNAL_ERROR, format!("cannot write TOML: {e}"))
        })?;
        let text = format!(
            "# farflash configuration saved by save_config; farflash serve --config FILE\n{text}"
        );
        if let Some(p) = &path {
            write_private(p, text.as_bytes()).map_err(|e| {
                RpcError::new(
                    jsonrpc::FAILED,
                    format!("cannot write {}: {e}", p.display()),
                )
            })?;
        }
        // DH-HMAC-CHAP secrets go into the 0600 file only, never into an
        // answer (which `farflash ctl` prints).
        let (mut shown, redacted) = redact_secrets(&text);
        // Belt and braces: whatever layout the TOML writer chose, no key's
        // base64 may be left in the answer.
        let leaked = cfg.subsystems.iter().flat_map(|s| &s.hosts).any(|h| {
            let dhchap = (h.dhchap_key.iter())
                .chain(h.dhchap_ctrl_key.as_ref())
                .any(|k| {
                    let dhhc = k.0.to_dhhc();
                    let b64 = dhhc.trim_end_matches(':').rsplit(':').next().unwrap_or("");
                    !b64.is_empty() && shown.contains(b64)
                });
            let psk = h.tls_key.as_ref().is_some_and(|k| {
                let Some(text) = k.key().map(|k| k.to_interchange()) else {
                    return false;
                };
                let b64 = text.trim_end_matches(':').rsplit(':').next().unwrap_or("");
                !b64.is_empty() && shown.contains(b64)
            });
            dhchap || psk
        });
        if leaked {
            shown =
                "# secrets (DH-HMAC-CHAP, TLS PSK) redacted: the configuration is in the saved file only\n"
                    .to_owned();
        }
        Ok(json!({"toml": shown, "path": path, "secrets_redacted": redacted || leaked}))
    }
}

/// `text` with the value of every `dhchap_key` / `dhchap_ctrl_key` line
/// replaced; and whether there was one.
fn redact_secrets(text: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut any = false;
    for line in text.lines() {
        let key = line.trim_start().split('=').next().unwrap_or("").trim();
        let secret = matches!(key, "dhchap_key" | "dhchap_ctrl_key" | "tls_key");
        if secret && line.contains('=') {
            any = true;
            out.push_str(key);
            out.push_str(" = \"<redacted: written to the saved file only>\"");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    (out, any)
}

/// Writes `data` to `path` through a temporary file and a rename, mode 0600
/// (a configuration may name hosts and, with authentication, hold keys).
fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let r = f.write_all(data).and_then(|_| f.sync_all());
    if let Err(e) = r.and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_configuration_answers_never_hold_a_secret() {
        let text = "[[subsystem.host]]\nnqn = \"nqn.h\"\ndhchap_key = \"DHHC-1:00:abc:\"\n  dhchap_ctrl_key = \"DHHC-1:01:def:\"\ndhchap_hash = []\n";
        let (shown, any) = redact_secrets(text);
        assert!(any);
        assert!(!shown.contains("abc") && !shown.contains("def"), "{shown}");
        assert!(shown.contains("nqn = \"nqn.h\"") && shown.contains("dhchap_hash = []"));
        assert_eq!(
            redact_secrets("nqn = \"x\"\n"),
            ("nqn = \"x\"\n".to_owned(), false)
        );
    }

    #[test]
    fn the_schema_documents_every_method_and_error_code() {
        let doc: Value =
            serde_json::from_str(include_str!("../../../docs/rpc-schema.json")).unwrap();
        let names: Vec<&str> = doc["methods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        let all: Vec<&str> = METHODS
            .iter()
            .chain(crate::volumes::METHODS)
            .copied()
            .collect();
        assert_eq!(names, all);
        let codes: Vec<i64> = doc["components"]["errors"]
            .as_object()
            .unwrap()
            .values()
            .map(|e| e["code"].as_i64().unwrap())
            .collect();
        for c in [
            jsonrpc::PARSE_ERROR,
            jsonrpc::INVALID_REQUEST,
            jsonrpc::METHOD_NOT_FOUND,
            jsonrpc::INVALID_PARAMS,
            jsonrpc::NOT_FOUND,
            jsonrpc::EXISTS,
            jsonrpc::INVALID_CONFIG,
            jsonrpc::FAILED,
            jsonrpc::LIMIT_EXCEEDED,
            jsonrpc::IN_USE,
            jsonrpc::NO_SPACE,
        ] {
            assert!(codes.contains(&c), "{c} undocumented");
        }
    }
}
