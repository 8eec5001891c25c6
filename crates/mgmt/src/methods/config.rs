//! The configuration as a whole: `save_config`, `load_config` (the TOML
//! `--config` reads; `load_config` runs the code `SIGHUP` runs).

use super::{human, manage_err, params, report_json, Api, MethodDef, Param};
use crate::jsonrpc::{self, RpcError};
use crate::saved::{config_text, write_private};
use farflash_control::manage::ManageError;
use farflash_control::reload::{self, ListenerControl};
use farflash_core::config::ConfigError;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;

pub const METHODS: &[MethodDef] = &[
    MethodDef::new(
        "save_config",
        "The running configuration as the TOML `farflash serve --config` reads (restarting with it gives the same target); with path, also written there (mode 0600, atomically). DH-HMAC-CHAP secrets are written to the file only: in the answer their values are redacted and secrets_redacted is true.",
        &[Param::opt("path")],
        save_config,
    )
    .with_human(human::save_config)
    .read_only(),
    MethodDef::new(
        "load_config",
        "Applies a configuration (a file the target reads, or TOML text): the difference to the running target, through the code SIGHUP runs. Transport settings need a restart (reported as ignored).",
        &[Param::opt("path"), Param::opt("toml")],
        load_config,
    ),
];

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

fn load_config(api: &Api, p: &Value) -> Result<Value, RpcError> {
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
    let ctl = api.listeners.as_deref().map(|l| l as &dyn ListenerControl);
    reload::apply_with(&api.target, &cfg, ctl)
        .map(|r| report_json(&r))
        .map_err(|e| manage_err(ManageError::Apply(e)))
}

fn save_config(api: &Api, p: &Value) -> Result<Value, RpcError> {
    let SaveConfig { path } = params(p)?;
    let (cfg, text) =
        config_text(&api.target).map_err(|e| RpcError::new(jsonrpc::INTERNAL_ERROR, e))?;
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
}
