//! Reloads: the configuration re-read from its source and applied whole
//! (`farflash_control::reload::apply_with`, the path `load_config` takes),
//! on [`crate::Server::reload`] and, when asked, on `SIGHUP`.

use crate::notify::notify;
use crate::ConfigSource;
use anyhow::{Context, Result};
use farflash_control::reload::{apply_with, ReloadReport};
use farflash_core::Target;
use farflash_transport::ListenerHandle;
use signal_hook::iterator::{Handle, Signals};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What a reload needs.
struct Inner {
    target: Arc<Target>,
    source: ConfigSource,
    listeners: ListenerHandle,
}

impl Inner {
    fn reload(&self) -> Result<ReloadReport> {
        let cfg = (self.source)()?;
        let r = apply_with(&self.target, &cfg, Some(&self.listeners))?;
        log_report("reload", &r);
        Ok(r)
    }
}

/// Applies the configuration on demand and, with [`Reloader::on_sighup`],
/// on every `SIGHUP`.
pub(crate) struct Reloader {
    inner: Arc<Inner>,
    sighup: Option<(Handle, JoinHandle<()>)>,
}

impl Reloader {
    pub(crate) fn new(
        target: Arc<Target>,
        source: ConfigSource,
        listeners: ListenerHandle,
    ) -> Reloader {
        Reloader {
            inner: Arc::new(Inner {
                target,
                source,
                listeners,
            }),
            sighup: None,
        }
    }

    /// Also reloads on every `SIGHUP` (telling systemd `RELOADING=1`, then
    /// `READY=1`), on a thread of its own until [`Reloader::close`].
    pub(crate) fn on_sighup(mut self) -> Result<Reloader> {
        let mut signals =
            Signals::new([signal_hook::consts::SIGHUP]).context("installing SIGHUP handler")?;
        let handle = signals.handle();
        let inner = self.inner.clone();
        let thread = std::thread::Builder::new()
            .name("farflash-reload".into())
            .spawn(move || {
                for _ in signals.forever() {
                    notify("RELOADING=1");
                    if let Err(e) = inner.reload() {
                        tracing::error!("reload failed, nothing changed: {e:#}");
                    }
                    notify("READY=1");
                }
            })?;
        self.sighup = Some((handle, thread));
        Ok(self)
    }

    pub(crate) fn reload(&self) -> Result<ReloadReport> {
        self.inner.reload()
    }

    /// Stops the `SIGHUP` thread and joins it.
    pub(crate) fn close(&mut self) {
        if let Some((handle, thread)) = self.sighup.take() {
            handle.close();
            let _ = thread.join();
        }
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.close();
    }
}

/// Logs what a configuration change did.
pub fn log_report(what: &str, r: &ReloadReport) {
    for (nqn, ids) in &r.changed {
        tracing::info!(subnqn = %nqn, nsids = ?ids, "{what}: namespaces changed");
    }
    let lists = [
        (&r.subsystems_added, "subsystem added"),
        (&r.subsystems_removed, "subsystem removed"),
        (&r.hosts_changed, "allowed hosts changed"),
        (&r.qos_changed, "QoS limits changed"),
        (&r.ana_changed, "ANA states changed"),
    ];
    for (names, happened) in lists {
        for n in names {
            tracing::info!(subnqn = %n, "{what}: {happened}");
        }
    }
    if r.disconnected > 0 {
        tracing::info!(
            controllers = r.disconnected,
            "{what}: controllers disconnected"
        );
    }
    for a in &r.listeners_added {
        tracing::info!(%a, "{what}: listener added");
    }
    for a in &r.listeners_removed {
        tracing::info!(%a, "{what}: listener removed");
    }
    for w in &r.ignored {
        tracing::warn!("{what}: not applied: {w}");
    }
    if r.is_empty() {
        tracing::info!("{what}: nothing changed");
    }
}
