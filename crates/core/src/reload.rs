//! Applying a new configuration to a running target (`SIGHUP`): namespaces
//! of existing subsystems are added, removed or replaced, and every connected
//! host is told through the Changed Namespace List and an asynchronous event.

use crate::config::Config;
use crate::subsystem::{build_namespaces, BuildError};
use crate::Target;

/// What a reload did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// (subsystem NQN, changed NSIDs) for each subsystem that changed.
    pub changed: Vec<(String, Vec<u32>)>,
    /// Changes a reload cannot make (they need a restart).
    pub ignored: Vec<String>,
}

pub fn apply(target: &Target, cfg: &Config) -> Result<ReloadReport, BuildError> {
    let mut report = ReloadReport::default();
    // Build everything first, so a bad file changes nothing.
    let mut plans = Vec::new();
    for sc in &cfg.subsystems {
        match target.subsystem(&sc.nqn) {
            Some(sub) => {
                let new = build_namespaces(sc, &sub.namespaces())?;
                if sc.hosts != sub.hosts || sc.require_auth != sub.require_auth {
                    report
                        .ignored
                        .push(format!("{}: host keys (restart to change)", sc.nqn));
                }
                if sc.allowed_hosts != sub.allowed_hosts {
                    report
                        .ignored
                        .push(format!("{}: allowed_hosts (restart to change)", sc.nqn));
                }
                plans.push((sub.clone(), new));
            }
            None => report
                .ignored
                .push(format!("{}: new subsystem (restart to add)", sc.nqn)),
        }
    }
    for sub in &target.subsystems {
        if !cfg.subsystems.iter().any(|s| s.nqn == sub.nqn) {
            report.ignored.push(format!(
                "{}: removed subsystem (restart to remove)",
                sub.nqn
            ));
        }
    }
    if cfg.listen.len() != target.listeners.len() || cfg.transport != target.transport {
        report
            .ignored
            .push("listeners/transport (restart to change)".to_owned());
    }
    for (sub, new) in plans {
        let changed = sub.replace_namespaces(new);
        if !changed.is_empty() {
            target.namespaces_changed(&sub, &changed);
            report.changed.push((sub.nqn.clone(), changed));
        }
    }
    Ok(report)
}
