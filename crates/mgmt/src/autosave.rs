//! `farflash serve --autosave`: the configuration written back to its file
//! after every change made through the management API (what `save_config
//! PATH` writes, atomically and durably), so that a target restarted after
//! a crash or a reboot comes back with the subsystems, hosts and
//! namespaces a CSI controller or an operator added at run time. nvmet's
//! configfs and SPDK keep such changes in memory only; ceph-nvmeof keeps
//! them in its own state object.

use crate::saved::{config_text, write_private};
use farflash_core::Target;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Mutex;

/// Where changes go, and what was written last (a change that leaves the
/// configuration as it was writes nothing).
pub struct Autosave {
    path: PathBuf,
    last: Mutex<Option<String>>,
}

impl Autosave {
    pub fn new(path: impl Into<PathBuf>) -> Autosave {
        Autosave {
            path: path.into(),
            last: Mutex::new(None),
        }
    }

    /// Writes the target's configuration when it differs from what was
    /// written last; returns whether it wrote. Saves are serialised, and
    /// each reads the configuration after taking its turn, so the file
    /// never goes back to an older state. The error names the file.
    pub fn save(&self, target: &Target) -> Result<bool, String> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let (_, text) = config_text(target)?;
        if last.as_deref() == Some(text.as_str()) {
            return Ok(false);
        }
        write_private(&self.path, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        *last = Some(text);
        Ok(true)
    }
}

/// Adds a failed save to a method's answer: `autosave_error` in an object,
/// or an object holding only that in place of a null answer.
pub(crate) fn report(answer: &mut Value, error: String) {
    match answer {
        Value::Object(o) => {
            o.insert("autosave_error".into(), Value::String(error));
        }
        Value::Null => *answer = serde_json::json!({ "autosave_error": error }),
        _ => {}
    }
}
