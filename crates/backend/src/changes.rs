//! Storage that changes outside farflash (an RBD image resized in Ceph)
//! says so here, so that the target re-reads sizes when something changed
//! instead of polling: librbd's update-watch callback calls
//! [`notify_changed`]; a thread of the target waits in [`wait_changed`] and
//! then asks each namespace's `Backend::refresh_capacity`. One signal for
//! the whole process (a change of any image wakes the thread once, and it
//! checks them all): changes are rare, and a check costs no round trip.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

static PENDING: Mutex<bool> = Mutex::new(false);
static WAKE: Condvar = Condvar::new();

/// Something may have changed: wakes [`wait_changed`] (or makes its next
/// call return at once). Cheap; never blocks for long (safe in librbd's
/// callback thread).
pub fn notify_changed() {
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    *p = true;
    WAKE.notify_all();
}

/// Waits until [`notify_changed`] was called since the last return, or
/// `timeout` passed; returns whether it was called.
pub fn wait_changed(timeout: Duration) -> bool {
    let p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    let (mut p, _) = WAKE
        .wait_timeout_while(p, timeout, |pending| !*pending)
        .unwrap_or_else(|e| e.into_inner());
    std::mem::take(&mut *p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_notice_wakes_the_waiter_once_and_none_is_lost() {
        // A notice before the wait is kept.
        notify_changed();
        assert!(wait_changed(Duration::from_secs(5)));
        // Consumed: the next wait times out.
        let t = Instant::now();
        assert!(!wait_changed(Duration::from_millis(50)));
        assert!(t.elapsed() >= Duration::from_millis(50));
        // A notice from another thread wakes a waiter at once.
        let n = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            notify_changed();
        });
        let t = Instant::now();
        assert!(wait_changed(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(4));
        n.join().unwrap();
    }
}
