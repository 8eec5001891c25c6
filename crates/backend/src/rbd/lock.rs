//! RBD's exclusive lock, driven by ANA (docs/rbd.md, "Two gateways"): a
//! gateway owns an image's lock only while the namespace's ANA group is
//! optimized on it. Promotion breaks the lock of any other owner (librbd's
//! `rbd_lock_break` blocklists that client, so a gateway that lost the
//! lock, dead or partitioned, cannot write any more) and acquires it in
//! librbd's exclusive mode (the lock is then never handed to another
//! client on request); demotion releases it. A queue refuses writes while
//! its image's lock is not owned ([`NotLockOwner`], ANA Transition to the
//! host) instead of letting librbd fetch the lock from the owner.

use super::cluster::{ceph_err, Image};
use farflash_rbd_sys as sys;
use std::ffi::{c_char, CStr};
use std::io;
use std::ptr;
use std::sync::atomic::Ordering;

/// The storage error of an I/O that this gateway may not do because
/// another one owns the image's exclusive lock (or broke ours): the command
/// layer answers it with ANA Transition (303h), so the host retries on
/// another path (`farflash_backend::is_not_lock_owner`).
#[derive(Debug)]
pub struct NotLockOwner;

impl std::fmt::Display for NotLockOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("another gateway owns the RBD image's exclusive lock")
    }
}

impl std::error::Error for NotLockOwner {}

/// The error a queue completes an I/O with when the lock is not ours.
pub(crate) fn not_owner() -> io::Error {
    io::Error::other(NotLockOwner)
}

/// Whether `e` is [`NotLockOwner`].
pub fn is_not_lock_owner(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|x| x.is::<NotLockOwner>())
}

/// The most lock owners asked for at once (an exclusive lock has one).
const MAX_OWNERS: usize = 8;

impl Image {
    /// Whether the image has the exclusive-lock feature (without it there
    /// is no lock to manage and every gateway may write).
    pub(crate) fn has_exclusive_lock(&self) -> io::Result<bool> {
        let mut features = 0u64;
        // SAFETY: the image handle is open; librbd writes one u64.
        let rc = unsafe { sys::rbd_get_features(self.handle, &mut features) };
        if rc < 0 {
            return Err(ceph_err(rc.into(), "rbd_get_features"));
        }
        Ok(features & u64::from(sys::RBD_FEATURE_EXCLUSIVE_LOCK) != 0)
    }

    /// Whether this handle owns the exclusive lock (librbd's local view, no
    /// round trip).
    pub(crate) fn is_lock_owner(&self) -> io::Result<bool> {
        let mut owner = 0;
        // SAFETY: the image handle is open; librbd writes one int.
        let rc = unsafe { sys::rbd_is_exclusive_lock_owner(self.handle, &mut owner) };
        if rc < 0 {
            return Err(ceph_err(rc.into(), "rbd_is_exclusive_lock_owner"));
        }
        Ok(owner != 0)
    }

    /// The clients owning the lock now (`client.4123` ...), none when free.
    pub(crate) fn lock_owners(&self) -> io::Result<Vec<String>> {
        let mut mode: sys::rbd_lock_mode_t = sys::rbd_lock_mode_t_RBD_LOCK_MODE_EXCLUSIVE;
        let mut owners: [*mut c_char; MAX_OWNERS] = [ptr::null_mut(); MAX_OWNERS];
        let mut count = MAX_OWNERS;
        // SAFETY: the image handle is open; librbd fills at most `count`
        // pointers of `owners` and writes the number it filled.
        let rc = unsafe {
            sys::rbd_lock_get_owners(self.handle, &mut mode, owners.as_mut_ptr(), &mut count)
        };
        if rc == -libc::ENOENT {
            return Ok(Vec::new());
        }
        if rc < 0 {
            return Err(ceph_err(rc.into(), "rbd_lock_get_owners"));
        }
        let count = count.min(MAX_OWNERS);
        let names = owners[..count]
            .iter()
            .filter(|p| !p.is_null())
            // SAFETY: librbd returned `count` NUL-terminated strings.
            .map(|p| unsafe { CStr::from_ptr(*p) }.to_string_lossy().into_owned())
            .collect();
        // SAFETY: the `count` strings librbd allocated, freed once.
        unsafe { sys::rbd_lock_get_owners_cleanup(owners.as_mut_ptr(), count) };
        Ok(names)
    }

    /// Takes the lock for this gateway: breaks (and so blocklists) every
    /// other owner, then acquires in exclusive mode. Returns the owners
    /// broken.
    pub(crate) fn take_lock(&self) -> io::Result<Vec<String>> {
        if self.is_lock_owner()? {
            self.lock_owned.store(true, Ordering::Release);
            return Ok(Vec::new());
        }
        let owners = self.lock_owners()?;
        for o in &owners {
            let c = std::ffi::CString::new(o.as_str()).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, "lock owner with a NUL byte")
            })?;
            // SAFETY: the image handle is open; `c` is a valid C string.
            let rc = unsafe {
                sys::rbd_lock_break(
                    self.handle,
                    sys::rbd_lock_mode_t_RBD_LOCK_MODE_EXCLUSIVE,
                    c.as_ptr(),
                )
            };
            // -ENOENT: the owner let go meanwhile.
            if rc < 0 && rc != -libc::ENOENT {
                return Err(ceph_err(
                    rc.into(),
                    format!("breaking the exclusive lock of {o}"),
                ));
            }
        }
        // SAFETY: the image handle is open.
        let rc = unsafe {
            sys::rbd_lock_acquire(self.handle, sys::rbd_lock_mode_t_RBD_LOCK_MODE_EXCLUSIVE)
        };
        if rc < 0 {
            return Err(ceph_err(rc.into(), "acquiring the exclusive lock"));
        }
        self.lock_owned.store(true, Ordering::Release);
        Ok(owners)
    }

    /// Gives the lock up (writes still in librbd finish first). Queues
    /// refuse writes from now on.
    pub(crate) fn release_lock(&self) -> io::Result<()> {
        self.lock_owned.store(false, Ordering::Release);
        if !self.is_lock_owner()? {
            return Ok(());
        }
        // SAFETY: the image handle is open.
        let rc = unsafe { sys::rbd_lock_release(self.handle) };
        if rc < 0 {
            return Err(ceph_err(rc.into(), "releasing the exclusive lock"));
        }
        Ok(())
    }
}
