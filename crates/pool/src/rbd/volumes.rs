//! The changing calls of an RBD pool: create, rename, resize, delete,
//! snapshot, clone, flatten. Each runs under the pool's management lock
//! (`RbdPool::lock`, taken by the `VolumeStore` impl).

use super::ffi::{self, Errno, Img};
use super::names::{self, Name};
use super::{RbdPool, FEATURES, UUID_KEY};
use crate::{PoolError, VolumeInfo};

/// Sizes the API accepts (as local pools do): positive multiples of 4096
/// below 2^56.
fn check_size(size: u64) -> Result<(), PoolError> {
    if size > 0 && size.is_multiple_of(4096) && size <= 1 << 56 {
        return Ok(());
    }
    Err(PoolError::invalid(
        "size",
        format!("{size} is not a positive multiple of 4096 below 2^56"),
    ))
}

impl RbdPool {
    /// The usual meaning of a librbd error about `subject` (a volume or
    /// `VOL@SNAP`): missing, existing, pool full, or an I/O error naming it.
    pub(super) fn fail<'a>(&'a self, subject: &'a str) -> impl Fn(Errno) -> PoolError + 'a {
        move |e| match e.code {
            libc::ENOENT => PoolError::NotFound(subject.to_owned()),
            libc::EEXIST => PoolError::Exists(subject.to_owned()),
            libc::ENOSPC | libc::EDQUOT => PoolError::NoSpace(self.opts.pool.clone()),
            _ => PoolError::Io {
                what: format!("rbd {}/{subject}", self.opts.pool),
                err: e.io(),
            },
        }
    }

    /// Refuses with [`PoolError::Exported`] while `v` is exported through
    /// this pool or open read-write by any other client (another gateway,
    /// a VM, `rbd map`: a watcher on the image header). The image must not
    /// be open read-write by this call yet (its own watch would count).
    fn check_idle(&self, v: &str) -> Result<(), PoolError> {
        if self.exports.is_exported(v) {
            return Err(PoolError::Exported(v.to_owned()));
        }
        let img = Img::open_ro(self.io(), v, None).map_err(self.fail(v))?;
        let watchers = img.watchers().map_err(self.fail(v))?;
        if !watchers.is_empty() {
            tracing::info!(
                "rbd pool {}: {v:?} is open elsewhere (watchers {})",
                self.opts.pool,
                watchers.join(", ")
            );
            return Err(PoolError::Exported(v.to_owned()));
        }
        Ok(())
    }

    /// Records `uuid` as the image's (with its data prefix, so a clone
    /// made outside farflash, which copies its parent's metadata, is told
    /// apart from the parent). `key` is [`UUID_KEY`] or a snapshot's.
    pub(super) fn set_uuid(&self, img: &Img, key: &str, uuid: uuid::Uuid) -> Result<(), Errno> {
        let prefix = img.block_prefix()?;
        img.meta_set(key, &format!("{uuid} {prefix}"))
    }

    pub(super) fn create(&self, name: &str, size: u64) -> Result<VolumeInfo, PoolError> {
        names::check_new("name", name)?;
        check_size(size)?;
        ffi::create(self.io(), name, size, FEATURES).map_err(self.fail(name))?;
        let tagged = Img::open(self.io(), name)
            .and_then(|img| self.set_uuid(&img, UUID_KEY, uuid::Uuid::new_v4()));
        if let Err(e) = tagged {
            self.undo_image(name);
            return Err(self.fail(name)(e));
        }
        self.info(name)
    }

    /// Removes an image this call made and could not finish.
    fn undo_image(&self, name: &str) {
        if let Err(e) = ffi::remove(self.io(), name) {
            tracing::warn!(
                "rbd pool {}: could not remove the half-made image {name:?}: {}",
                self.opts.pool,
                e.io()
            );
        }
    }

    pub(super) fn rename_any(&self, name: &str, new_name: &str) -> Result<(), PoolError> {
        match names::parse("name", name)? {
            Name::Volume(v) => {
                names::check_new("new_name", new_name)?;
                self.check_idle(v)?;
                ffi::rename(self.io(), v, new_name).map_err(|e| match e.code {
                    libc::EEXIST => PoolError::Exists(new_name.to_owned()),
                    _ => self.fail(v)(e),
                })
            }
            Name::Snapshot { volume, snap } => {
                let to = match names::parse("new_name", new_name)? {
                    Name::Snapshot { volume: v2, snap } if v2 == volume => snap,
                    _ => {
                        return Err(PoolError::invalid(
                            "new_name",
                            format!("{new_name:?}: a snapshot is renamed within its volume, to {volume}@NEW"),
                        ))
                    }
                };
                names::check_new("new_name", to)?;
                let img = Img::open(self.io(), volume).map_err(self.fail(volume))?;
                img.snap_rename(snap, to).map_err(|e| match e.code {
                    libc::EEXIST => PoolError::Exists(new_name.to_owned()),
                    _ => self.fail(name)(e),
                })
            }
        }
    }

    pub(super) fn resize_volume(
        &self,
        name: &str,
        size: u64,
        force: bool,
    ) -> Result<(), PoolError> {
        let v = names::volume("name", name)?;
        check_size(size)?;
        let cur = Img::open_ro(self.io(), v, None)
            .and_then(|img| img.size())
            .map_err(self.fail(v))?;
        if size < cur {
            self.check_idle(v)?;
        }
        let img = Img::open(self.io(), v).map_err(self.fail(v))?;
        if size < cur && !force {
            // Data (own or the parent's) in the part that would go.
            let used = img
                .extents(None, size, cur - size, true, false)
                .map_err(self.fail(v))?;
            if used.bytes > 0 {
                return Err(PoolError::BelowUsed {
                    name: v.to_owned(),
                    size,
                    highest_written: used.end,
                });
            }
        }
        if size != cur {
            img.resize(size, size < cur).map_err(self.fail(v))?;
        }
        Ok(())
    }

    pub(super) fn delete_any(&self, name: &str) -> Result<(), PoolError> {
        match names::parse("name", name)? {
            Name::Volume(v) => self.delete_volume(v),
            Name::Snapshot { volume, snap } => {
                let img = Img::open(self.io(), volume).map_err(self.fail(volume))?;
                self.delete_snapshot(&img, volume, snap)
            }
        }
    }

    /// `VOL@SNAP: a, b` for each snapshot of `volume` with clones.
    fn clones_of(&self, img: &Img, volume: &str) -> Result<Vec<String>, PoolError> {
        let mut out = Vec::new();
        for s in img.snaps().map_err(self.fail(volume))? {
            let full = names::join(volume, &s.name);
            let children = self.children(volume, &s.name).map_err(self.fail(&full))?;
            if !children.is_empty() {
                out.push(format!("{full}: {}", children.join(", ")));
            }
        }
        Ok(out)
    }

    fn delete_volume(&self, v: &str) -> Result<(), PoolError> {
        self.check_idle(v)?;
        let img = Img::open(self.io(), v).map_err(self.fail(v))?;
        let busy = self.clones_of(&img, v)?;
        if !busy.is_empty() {
            return Err(PoolError::HasClones {
                name: v.to_owned(),
                children: busy.join("; "),
            });
        }
        for s in img.snaps().map_err(self.fail(v))? {
            self.delete_snapshot(&img, v, &s.name)?;
        }
        drop(img);
        ffi::remove(self.io(), v).map_err(|e| match e.code {
            // Watchers: another client (a gateway elsewhere) has it open.
            libc::EBUSY => PoolError::Exported(v.to_owned()),
            _ => self.fail(v)(e),
        })
    }

    fn delete_snapshot(&self, head: &Img, volume: &str, snap: &str) -> Result<(), PoolError> {
        let full = names::join(volume, snap);
        let id = head.snap_id(snap).map_err(self.fail(&full))?;
        let children = self.children(volume, snap).map_err(self.fail(&full))?;
        if !children.is_empty() {
            return Err(PoolError::HasClones {
                name: full,
                children: children.join(", "),
            });
        }
        if head.snap_is_protected(snap).map_err(self.fail(&full))? {
            head.snap_unprotect(snap).map_err(|e| match e.code {
                // A clone appeared since the check (another client).
                libc::EBUSY => PoolError::HasClones {
                    name: full.clone(),
                    children: "clones made meanwhile".into(),
                },
                _ => self.fail(&full)(e),
            })?;
        }
        head.snap_remove(snap).map_err(self.fail(&full))?;
        head.meta_remove(&names::snap_uuid_key(id))
            .map_err(self.fail(volume))
    }

    pub(super) fn snapshot_volume(
        &self,
        volume: &str,
        snapshot: &str,
    ) -> Result<VolumeInfo, PoolError> {
        let v = names::volume("volume", volume)?;
        // `SNAP`, or `VOL@SNAP` of this volume.
        let snap = match snapshot.split_once('@') {
            Some((sv, s)) if sv == v => s,
            _ => snapshot,
        };
        names::check_new("snapshot", snap)?;
        let full = names::join(v, snap);
        let img = Img::open(self.io(), v).map_err(self.fail(v))?;
        img.snap_create(snap).map_err(self.fail(&full))?;
        let done = img.snap_protect(snap).and_then(|()| {
            let id = img.snap_id(snap)?;
            self.set_uuid(&img, &names::snap_uuid_key(id), uuid::Uuid::new_v4())
        });
        if let Err(e) = done {
            let undo = img
                .snap_unprotect(snap)
                .or_else(|u| {
                    if u.code == libc::EINVAL {
                        Ok(())
                    } else {
                        Err(u)
                    }
                })
                .and_then(|()| img.snap_remove(snap));
            if let Err(u) = undo {
                tracing::warn!(
                    "rbd pool {}: could not remove the half-made snapshot {full:?}: {}",
                    self.opts.pool,
                    u.io()
                );
            }
            return Err(self.fail(&full)(e));
        }
        drop(img);
        self.info(&full)
    }

    pub(super) fn clone_snapshot(
        &self,
        snapshot: &str,
        name: &str,
    ) -> Result<VolumeInfo, PoolError> {
        let (v, s) = names::snapshot("snapshot", snapshot)?;
        names::check_new("name", name)?;
        let head = Img::open(self.io(), v).map_err(self.fail(v))?;
        if !head.snap_is_protected(s).map_err(self.fail(snapshot))? {
            // A snapshot made outside farflash: clone format v1 needs it.
            head.snap_protect(s).map_err(self.fail(snapshot))?;
            tracing::info!(
                "rbd pool {}: protected snapshot {snapshot:?} to clone it",
                self.opts.pool
            );
        }
        drop(head);
        ffi::clone(self.io(), v, s, name, FEATURES).map_err(|e| match e.code {
            libc::EEXIST => PoolError::Exists(name.to_owned()),
            _ => self.fail(snapshot)(e),
        })?;
        let tagged = Img::open(self.io(), name)
            .and_then(|img| self.set_uuid(&img, UUID_KEY, uuid::Uuid::new_v4()));
        if let Err(e) = tagged {
            self.undo_image(name);
            return Err(self.fail(name)(e));
        }
        self.info(name)
    }

    pub(super) fn flatten(&self, name: &str) -> Result<(), PoolError> {
        let v = names::volume("name", name)?;
        let img = Img::open(self.io(), v).map_err(self.fail(v))?;
        if img.parent().map_err(self.fail(v))?.is_none() {
            return Err(PoolError::NoParent(v.to_owned()));
        }
        img.flatten().map_err(self.fail(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked_like_local_pools() {
        assert!(check_size(4096).is_ok());
        assert!(check_size(1 << 56).is_ok());
        for bad in [0, 4095, 4097, (1 << 56) + 4096] {
            let e = check_size(bad).unwrap_err();
            assert!(e.to_string().starts_with("invalid size:"), "{bad}: {e}");
        }
    }
}
