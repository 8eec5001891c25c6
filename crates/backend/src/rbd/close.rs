//! Closing open images off the thread that lets go of them last.
//!
//! Closing an image takes round trips to the cluster: `rbd_close` drops the
//! header watch and releases the exclusive lock, `rados_shutdown` ends the
//! session and joins librados's threads; 100-300 ms from a cluster 100 ms
//! away (tests/rbd.rs), up to the OSD operation timeout from a sick one.
//! Whoever drops the last reference to an image pays that, and after a
//! namespace is removed that is usually an event loop (its queues let a
//! removed namespace go at their next command or tick, its storage queue
//! holds the image too), which would hold up every controller it serves,
//! their Keep Alives included (issue 33). So an open image is closed on a
//! thread of its own; [`wait_closed`] lets the process finish those closes
//! before it exits (the lock is released, not left for another gateway to
//! break).

use farflash_rbd_sys as sys;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The handles of one image; dropping closes them, image before pool
/// context before cluster, each only if it was opened (non-null).
pub(crate) struct Handles {
    pub(crate) cluster: sys::rados_t,
    pub(crate) ioctx: sys::rados_ioctx_t,
    pub(crate) image: sys::rbd_image_t,
    pub(crate) update_watch: Option<u64>,
}

// SAFETY: librados and librbd handles may be used from any thread; a
// `Handles` is built from an `Image` being dropped, so it is their only
// owner and nothing else uses them while they close.
unsafe impl Send for Handles {}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: each handle is closed once (this is their only owner),
        // the update watch before the image, the image before the pool
        // context before the cluster; null ones were never opened.
        unsafe {
            if let Some(w) = self.update_watch {
                sys::rbd_update_unwatch(self.image, w);
            }
            if !self.image.is_null() {
                sys::rbd_close(self.image);
            }
            if !self.ioctx.is_null() {
                sys::rados_ioctx_destroy(self.ioctx);
            }
            if !self.cluster.is_null() {
                sys::rados_shutdown(self.cluster);
            }
        }
    }
}

/// How many closes are still running on their threads.
static PENDING: Mutex<usize> = Mutex::new(0);
/// Signalled when a close finishes.
static CLOSED: Condvar = Condvar::new();

fn pending() -> MutexGuard<'static, usize> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

fn finished() {
    let mut n = pending();
    *n = n.saturating_sub(1);
    CLOSED.notify_all();
}

/// Closes `h` on a thread of its own (one per close: closes are rare, and
/// one stuck on a sick cluster holds up no other). Without a thread, here.
pub(crate) fn close_elsewhere(h: Handles) {
    *pending() += 1;
    let spawned = std::thread::Builder::new()
        .name("farflash-rbd-close".into())
        .spawn(move || {
            drop(h);
            finished();
        });
    if let Err(e) = spawned {
        // The closure, and with it the handles, was dropped by `spawn`:
        // the image is closed already, on this thread.
        tracing::warn!("no thread to close an RBD image ({e}); closed it in place");
        finished();
    }
}

/// Waits up to `limit` for the images being closed ([`close_elsewhere`]);
/// returns how many are still closing.
pub fn wait_closed(limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    let mut n = pending();
    while *n > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        n = CLOSED
            .wait_timeout(n, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    *n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    #[test]
    fn closes_elsewhere_are_counted_until_done() {
        assert_eq!(wait_closed(Duration::ZERO), 0, "nothing is closing");
        // Handles of an image that never opened: the close calls nothing.
        for _ in 0..4 {
            close_elsewhere(Handles {
                cluster: ptr::null_mut(),
                ioctx: ptr::null_mut(),
                image: ptr::null_mut(),
                update_watch: None,
            });
        }
        assert_eq!(wait_closed(Duration::from_secs(30)), 0);
    }
}
