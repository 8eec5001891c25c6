//! Volume operations that concern the running target as well as the pool
//! (docs/volumes.md): a resize of an exported volume reaches its namespace
//! (hosts get Namespace Attribute Changed, as `namespace_resize` gives
//! them), a rename or delete never pulls a volume from under a namespace.
//! Each holds the management lock, so no namespace is added or removed
//! halfway through.

use crate::pools::{registry, PoolsError};
use crate::reload::ReloadReport;
use farflash_core::Target;
use farflash_pool::PoolError;
use std::time::{Duration, Instant};

/// How long a delete or shrink waits for a volume whose namespace is gone
/// but whose queues still hold it: each lets go at its next tick, within
/// 100 ms of a namespace change (docs/architecture.md), so this is ample.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Runs `op` on the pool under the management lock, refused while a
/// namespace exports `pool/name`. When no namespace names it but the pool
/// still counts it exported (a `namespace_remove` just returned, and queues
/// of the namespace have not let go yet), waits for them, the lock
/// released meanwhile, up to [`RELEASE_WAIT`]; then the pool's own
/// refusal stands.
fn once_released<T>(
    target: &Target,
    pool: &str,
    name: &str,
    mut op: impl FnMut() -> Result<T, PoolError>,
) -> Result<T, PoolsError> {
    let deadline = Instant::now() + RELEASE_WAIT;
    loop {
        {
            let _serial = target.manage_lock();
            let by = exported_as(target, pool, name);
            if !by.is_empty() {
                return Err(exported_error(pool, name, &by));
            }
            match op() {
                Err(PoolError::Exported(_)) if Instant::now() < deadline => {}
                r => return r.map_err(PoolsError::of(pool)),
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The namespaces exporting `pool/name`: (NQN, NSID).
pub fn exported_as(target: &Target, pool: &str, name: &str) -> Vec<(String, u32)> {
    let want = format!("{pool}/{name}");
    let mut out = Vec::new();
    for sub in target.subsystems().iter() {
        for ns in sub.namespaces().iter() {
            if ns.config.volume.as_deref() == Some(want.as_str()) {
                out.push((sub.nqn.clone(), ns.nsid));
            }
        }
    }
    out
}

fn exported_error(pool: &str, name: &str, by: &[(String, u32)]) -> PoolsError {
    let (nqn, nsid) = &by[0];
    PoolsError::of(pool)(PoolError::Exported(format!(
        "{name} (namespace {nsid} of {nqn}: remove it first)"
    )))
}

/// Resizes volume `name` of `pool`. Grows online: an exported volume's
/// namespace takes the new size at once and hosts get the Namespace
/// Attribute Changed event and the Changed Namespace List (Base §5.2,
/// §5.16.1.5). A shrink is refused while the volume is exported, and below its
/// highest written cluster unless `force`.
pub fn resize(
    target: &Target,
    pool: &str,
    name: &str,
    size: u64,
    force: bool,
) -> Result<Option<ReloadReport>, PoolsError> {
    let store = registry().get(pool)?;
    let info = store.get(name).map_err(PoolsError::of(pool))?;
    if size < info.size {
        // A shrink: never while exported.
        once_released(target, pool, name, || store.resize(name, size, force))?;
        return Ok(None);
    }
    let grown = {
        let _serial = target.manage_lock();
        let by = exported_as(target, pool, name);
        store
            .resize(name, size, force)
            .map_err(PoolsError::of(pool))?;
        !by.is_empty() && size != info.size
    };
    if !grown {
        return Ok(None);
    }
    // The same backend with a new capacity: the namespace is rebuilt
    // with its new size and its hosts are told (reload's resize path).
    crate::manage::modify(target, None, |_| Ok(()))
        .map(Some)
        .map_err(|e| PoolsError::Invalid(format!("pool {pool}: volume {name} resized, but: {e}")))
}

/// Renames a volume (refused while exported: the namespace names it).
pub fn rename(target: &Target, pool: &str, name: &str, new_name: &str) -> Result<(), PoolsError> {
    let store = registry().get(pool)?;
    once_released(target, pool, name, || store.rename(name, new_name))
}

/// Deletes a volume or snapshot (refused while exported or with clones;
/// right after its namespace's removal, it waits for the queues to let go).
pub fn delete(target: &Target, pool: &str, name: &str) -> Result<(), PoolsError> {
    let store = registry().get(pool)?;
    once_released(target, pool, name, || store.delete(name))
}

/// Closes a pool (refused while it holds volumes).
pub fn delete_pool(target: &Target, pool: &str) -> Result<(), PoolsError> {
    let _serial = target.manage_lock();
    registry().delete(pool)
}
