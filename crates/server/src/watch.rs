//! The size watch: RBD images resized in Ceph give their namespaces the
//! new size.

use crate::reload::log_report;
use farflash_core::Target;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long the size check sleeps without a notice from the storage
/// (librbd's update watch wakes it at once; this bounds a missed one).
const SIZE_WATCH: Duration = Duration::from_secs(30);

/// Watches the size of RBD namespaces: when an image was resized in Ceph
/// (librbd's update watch, `farflash_backend::notify_changed`), re-applies
/// the running configuration, which gives the namespace its new size and
/// tells the hosts (Namespace Attribute Changed). Stops with `stop` (and a
/// `notify_changed`).
pub(crate) fn spawn_size_watch(
    target: Arc<Target>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("farflash-size-watch".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                farflash_backend::wait_changed(SIZE_WATCH);
                if stop.load(Ordering::Acquire) {
                    break;
                }
                if refresh_sizes(&target) {
                    match farflash_control::manage::modify(&target, None, |_| Ok(())) {
                        Ok(r) => log_report("resize", &r),
                        Err(e) => tracing::error!("applying a resize failed: {e:#}"),
                    }
                }
            }
        })
}

/// Reads every namespace's size from its storage; whether one changed.
fn refresh_sizes(target: &Target) -> bool {
    let mut resized = false;
    for sub in target.subsystems().iter() {
        for ns in sub.namespaces().iter() {
            match ns.backend.refresh_capacity() {
                Ok(true) => {
                    tracing::info!(
                        subnqn = %sub.nqn,
                        nsid = ns.nsid,
                        bytes = ns.backend.capacity(),
                        "{} was resized",
                        ns.describe
                    );
                    resized = true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    subnqn = %sub.nqn,
                    nsid = ns.nsid,
                    "cannot read the size of {}: {e}",
                    ns.describe
                ),
            }
        }
    }
    resized
}
