//! Locks: advisory locks on a pool's device files (one process, one pool
//! instance, at a time writes a pool; `check` reads only a pool nobody
//! has open), and the pool's mutexes.

use crate::error::PoolError;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// Locks `m`, going on when a thread panicked holding it (poisoned).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks every path (`flock`, exclusive or shared, never waiting); the
/// locks last as long as the returned files.
pub(crate) fn lock_devices(paths: &[PathBuf], exclusive: bool) -> Result<Vec<File>, PoolError> {
    paths
        .iter()
        .map(|p| {
            let label = p.display().to_string();
            let f = File::open(p).map_err(PoolError::io(format!("opening device {label}")))?;
            let mode = if exclusive {
                libc::LOCK_EX
            } else {
                libc::LOCK_SH
            };
            // SAFETY: flock on a descriptor this function owns; no memory
            // is passed.
            let r = unsafe { libc::flock(f.as_raw_fd(), mode | libc::LOCK_NB) };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::EWOULDBLOCK) => PoolError::invalid(
                        "devices",
                        format!("{label} is in use by another pool instance (locked)"),
                    ),
                    _ => PoolError::io(format!("locking device {label}"))(e),
                });
            }
            Ok(f)
        })
        .collect()
}
