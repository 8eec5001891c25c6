//! What an RBD pool reports: volumes and snapshots ([`VolumeInfo`]), with
//! their stable UUIDs and space, and the pool's space ([`PoolStats`]).

use super::ffi::{self, Errno, Img, Linked};
use super::names::{self, Name};
use super::{RbdPool, OBJECT_SIZE, UUID_KEY};
use crate::{PoolError, PoolStats, VolumeInfo};

impl RbdPool {
    /// A volume (`VOL`) or snapshot (`VOL@SNAP`).
    pub(super) fn info(&self, name: &str) -> Result<VolumeInfo, PoolError> {
        match names::parse("name", name)? {
            Name::Volume(v) => {
                let img = Img::open_ro(self.io(), v, None).map_err(self.fail(v))?;
                self.volume_info(&img, v)
            }
            Name::Snapshot { volume, snap } => {
                let head = Img::open_ro(self.io(), volume, None).map_err(self.fail(volume))?;
                self.snap_info(&head, volume, snap)
            }
        }
    }

    fn volume_info(&self, img: &Img, v: &str) -> Result<VolumeInfo, PoolError> {
        let fail = self.fail(v);
        let uuid = self.uuid_of(img, v, UUID_KEY)?;
        let size = img.size().map_err(&fail)?;
        let own = img.extents(None, 0, size, false, true).map_err(&fail)?;
        let parent = img.parent().map_err(&fail)?;
        let mut shared = 0;
        if parent.is_some() {
            // Objects only the parent holds: read through from it.
            let all = img.extents(None, 0, size, true, true).map_err(&fail)?;
            shared += all.bytes.saturating_sub(own.bytes);
        }
        if let Some(last) = img.snaps().map_err(&fail)?.last() {
            // Objects not rewritten since the latest snapshot share it.
            let changed = img
                .extents(Some(&last.name), 0, size, false, true)
                .map_err(&fail)?;
            shared += own.bytes.saturating_sub(changed.bytes);
        }
        Ok(VolumeInfo {
            name: v.to_owned(),
            uuid,
            size,
            allocated: own.bytes,
            shared,
            parent: parent.map(|(p, s)| self.parent_name(&p, &s)),
            is_snapshot: false,
            clones: Vec::new(),
            exported: self.exports.is_exported(v),
        })
    }

    fn snap_info(&self, head: &Img, volume: &str, snap: &str) -> Result<VolumeInfo, PoolError> {
        let full = names::join(volume, snap);
        let fail = self.fail(&full);
        let id = head.snap_id(snap).map_err(&fail)?;
        let uuid = self.uuid_of(head, volume, &names::snap_uuid_key(id))?;
        let at = Img::open_ro(self.io(), volume, Some(snap)).map_err(&fail)?;
        let size = at.size().map_err(&fail)?;
        let own = at.extents(None, 0, size, false, true).map_err(&fail)?;
        let parent = at.parent().map_err(&fail)?;
        let shared = match parent {
            Some(_) => at
                .extents(None, 0, size, true, true)
                .map_err(&fail)?
                .bytes
                .saturating_sub(own.bytes),
            None => 0,
        };
        let clones = self.children(volume, snap).map_err(&fail)?;
        Ok(VolumeInfo {
            name: full.clone(),
            uuid,
            size,
            allocated: own.bytes,
            shared,
            parent: parent.map(|(p, s)| self.parent_name(&p, &s)),
            is_snapshot: true,
            clones,
            exported: false,
        })
    }

    /// `IMAGE@SNAP` in this pool, `POOL/IMAGE@SNAP` in another.
    fn parent_name(&self, p: &Linked, snap: &str) -> String {
        if p.pool == self.opts.pool {
            names::join(&p.image, snap)
        } else {
            format!("{}/{}", p.pool, names::join(&p.image, snap))
        }
    }

    /// The clones of `volume@snap`, by name.
    pub(super) fn children(&self, volume: &str, snap: &str) -> Result<Vec<String>, Errno> {
        let at = Img::open_ro(self.io(), volume, Some(snap))?;
        let list = at.children()?;
        Ok(list
            .iter()
            .map(|c| {
                let name = match c.pool == self.opts.pool {
                    true => c.image.clone(),
                    false => format!("{}/{}", c.pool, c.image),
                };
                match c.trash {
                    true => format!("{name} (in trash)"),
                    false => name,
                }
            })
            .collect())
    }

    /// The UUID under `key` of image `v` (opened as `img`); one is made
    /// and stored when the image has none yet (made outside farflash), or
    /// has one recorded for another image (a clone made outside farflash
    /// copies its parent's metadata).
    fn uuid_of(&self, img: &Img, v: &str, key: &str) -> Result<uuid::Uuid, PoolError> {
        let fail = self.fail(v);
        let prefix = img.block_prefix().map_err(&fail)?;
        if let Some(value) = img.meta_get(key).map_err(&fail)? {
            let (u, owner) = value.split_once(' ').unwrap_or((&value, ""));
            let uuid = uuid::Uuid::parse_str(u).map_err(|_| PoolError::Corrupt {
                what: format!(
                    "rbd {}/{v}: metadata {key} is {value:?}, not \"UUID PREFIX\"",
                    self.opts.pool
                ),
            })?;
            if owner == prefix {
                return Ok(uuid);
            }
        }
        let uuid = uuid::Uuid::new_v4();
        // The lookup opened the image read-only; storing needs it writable.
        let rw = Img::open(self.io(), v).map_err(&fail)?;
        self.set_uuid(&rw, key, uuid).map_err(&fail)?;
        tracing::info!(
            "rbd pool {}: {v} ({key}) had no farflash UUID; gave it {uuid}",
            self.opts.pool
        );
        Ok(uuid)
    }

    /// Every volume and snapshot. An image that cannot be described (one
    /// removed meanwhile, a broken one) is left out with a warning naming it.
    pub(super) fn list_all(&self) -> Vec<VolumeInfo> {
        let images = match ffi::list_images(self.io()) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("rbd pool {}: listing images: {}", self.opts.pool, e.io());
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for v in images {
            if let Err(e) = self.list_image(&v, &mut out) {
                tracing::warn!(
                    "rbd pool {}: left {v:?} out of the list: {e}",
                    self.opts.pool
                );
            }
        }
        out
    }

    fn list_image(&self, v: &str, out: &mut Vec<VolumeInfo>) -> Result<(), PoolError> {
        let img = Img::open_ro(self.io(), v, None).map_err(self.fail(v))?;
        out.push(self.volume_info(&img, v)?);
        for s in img.snaps().map_err(self.fail(v))? {
            out.push(self.snap_info(&img, v, &s.name)?);
        }
        Ok(())
    }

    /// The pool's space (see the module comment); what cannot be read is
    /// reported as 0 with a warning naming the pool.
    pub(super) fn pool_stats(&self) -> PoolStats {
        let space = ffi::space(self.conn.cluster(), self.io()).unwrap_or_else(|e| {
            tracing::warn!("rbd pool {}: space: {}", self.opts.pool, e.io());
            ffi::Space::default()
        });
        let volumes = ffi::list_images(self.io()).map_or_else(
            |e| {
                tracing::warn!("rbd pool {}: listing images: {}", self.opts.pool, e.io());
                0
            },
            |v| v.len(),
        );
        PoolStats {
            size: space.pool_used.saturating_add(space.cluster_avail),
            allocated: space.pool_used,
            free: space.cluster_avail,
            freeing: 0,
            cluster_size: OBJECT_SIZE,
            volumes,
        }
    }
}
