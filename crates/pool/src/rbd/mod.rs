//! RBD pools: the volume API ([`VolumeStore`]) over one Ceph pool through
//! librbd, so one API (and one future Kubernetes driver) serves local and
//! Ceph storage (issue #42).
//!
//! | API | RBD |
//! |---|---|
//! | volume | image, created with layering, exclusive-lock, object-map, fast-diff and deep-flatten ([`FEATURES`]) |
//! | snapshot `VOL@SNAP` | RBD snapshot `SNAP` of image `VOL` (RBD's notation, unique in the pool), protected at creation |
//! | clone of `VOL@SNAP` | `rbd_clone2` of the protected snapshot (copy-on-write per object) |
//! | decouple | `rbd_flatten`: synchronous, copies every object the clone reads from its parent, O(size) |
//! | uuid | image metadata `farflash.uuid` (`farflash.uuid.snap.ID` for snapshot ID), set at create/snapshot/clone, or on first sight for images made outside farflash |
//! | open | the RBD namespace backend (`farflash_backend::open_rbd`): its own connection and image handle, as a namespace configured with `backend = "rbd"` |
//!
//! **Why snapshots are protected at creation**: Ceph 16 clones a snapshot
//! in clone format v1 unless the cluster requires mimic or newer clients
//! (`rbd_default_clone_format = auto`), and v1 refuses to clone an
//! unprotected snapshot. Protection also makes RBD itself refuse to remove
//! a snapshot that has clones (`rbd_snap_unprotect` fails with `EBUSY`), so
//! nothing but farflash's own check stands between a delete and a clone's
//! parent. Snapshots made outside farflash are protected when first cloned.
//!
//! **Space**: a volume's `allocated` is the bytes of the RADOS objects the
//! image holds itself (`rbd_diff_iterate2` over the image, object
//! granularity, read from the object map when fast-diff is valid, else
//! listed per object); `shared` is the bytes of objects a clone reads from
//! its parent (it has none of its own there) plus, for an image with
//! snapshots, the bytes of its objects not rewritten since the latest
//! snapshot (RADOS keeps snapshots copy-on-write per object, so those are
//! shared). The pool's `allocated` is `rados_ioctx_pool_stat`'s bytes and
//! its `free` is the cluster's raw available space (`rados_cluster_stat`,
//! not divided by the pool's replication); `cluster_size` is the object
//! size of new images (4 MiB).
//!
//! **In use**: a volume is exported while a backend [`RbdPool::open`] gave
//! is alive, and in use while any client has the image open read-write
//! (a watcher on its header: another gateway exporting it, a VM, `rbd
//! map`, or one of this process's closes still running). Delete, rename
//! and shrink are refused with [`PoolError::Exported`] then (before any
//! snapshot of a deleted volume is touched); grow, snapshot and flatten
//! are not (librbd has the lock owner do them).
//!
//! **Shrinking** is refused while the volume is in use (force or not),
//! and below the volume's *used* end unless forced: the end of the last
//! byte of data at or beyond the new size, own or read from a parent,
//! found by `rbd_diff_iterate2` over the part that would be cut (byte
//! extents: each object reports the bytes up to its last write).
//!
//! Unlike a local pool, an RBD image does not read through its snapshots:
//! only clones have a `parent`, and a snapshot's `clones` are its RBD
//! children (clones in the RBD trash are named with ` (in trash)`).
//!
//! Management calls are synchronous, serialized per pool, and bounded by
//! the connection's `rados_osd_op_timeout` per operation (20 s unless the
//! ceph.conf sets it); `decouple` takes one round of operations per object.

mod export;
mod ffi;
mod info;
mod names;
mod volumes;

use crate::{PoolError, PoolStats, VolumeInfo, VolumeStore};
use farflash_backend::{RadosPool, RbdOptions, SharedBackend};
use farflash_rbd_sys as sys;
use std::sync::{Mutex, MutexGuard};

/// The image metadata key holding a volume's stable UUID.
pub const UUID_KEY: &str = "farflash.uuid";

/// Features of images farflash creates: layering (clones),
/// exclusive-lock (the RBD namespaces' ANA handover, docs/rbd.md),
/// object-map and fast-diff (space accounting without listing objects),
/// deep-flatten (a flattened clone's snapshots no longer pin its parent).
pub const FEATURES: u64 = (sys::RBD_FEATURE_LAYERING
    | sys::RBD_FEATURE_EXCLUSIVE_LOCK
    | sys::RBD_FEATURE_OBJECT_MAP
    | sys::RBD_FEATURE_FAST_DIFF
    | sys::RBD_FEATURE_DEEP_FLATTEN) as u64;

/// The object size of the images farflash creates (RBD's default order 22).
const OBJECT_SIZE: u64 = 4 << 20;

/// One Ceph pool as a volume store.
pub struct RbdPool {
    /// How to reach the pool, and the block size of exported namespaces;
    /// `image` is unused (each call names its image).
    opts: RbdOptions,
    conn: RadosPool,
    exports: export::Exports,
    /// Serializes management calls: a check and the change it allows
    /// (no clones, then unprotect; not exported, then shrink) are not
    /// interleaved with another call of this pool.
    mgmt: Mutex<()>,
}

impl RbdPool {
    /// Connects to `opts.pool` with `opts.conf`, `opts.id` and
    /// `opts.keyring`; volumes open as namespaces of `opts.block_size`
    /// (512 or 4096). Errors name the ceph.conf, keyring, cluster or pool.
    pub fn connect(opts: &RbdOptions) -> Result<RbdPool, PoolError> {
        if opts.block_size != 512 && opts.block_size != 4096 {
            return Err(PoolError::invalid(
                "block_size",
                format!("{}: must be 512 or 4096", opts.block_size),
            ));
        }
        if opts.pool.is_empty() || opts.pool.contains(['\0', '/', '@']) {
            return Err(PoolError::invalid(
                "pool",
                format!("{:?} is not a Ceph pool name", opts.pool),
            ));
        }
        let conn = RadosPool::connect(opts).map_err(|err| PoolError::Io {
            what: format!("rbd pool {:?}", opts.pool),
            err,
        })?;
        Ok(RbdPool {
            opts: RbdOptions {
                image: String::new(),
                ..opts.clone()
            },
            conn,
            exports: export::Exports::default(),
            mgmt: Mutex::new(()),
        })
    }

    fn io(&self) -> sys::rados_ioctx_t {
        self.conn.ioctx()
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.mgmt.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl VolumeStore for RbdPool {
    fn kind(&self) -> &'static str {
        "rbd"
    }
    fn name(&self) -> &str {
        &self.opts.pool
    }
    fn stats(&self) -> PoolStats {
        let _g = self.lock();
        self.pool_stats()
    }
    fn create_volume(&self, name: &str, size: u64) -> Result<VolumeInfo, PoolError> {
        let _g = self.lock();
        self.create(name, size)
    }
    fn list(&self) -> Vec<VolumeInfo> {
        let _g = self.lock();
        self.list_all()
    }
    fn get(&self, name: &str) -> Result<VolumeInfo, PoolError> {
        let _g = self.lock();
        self.info(name)
    }
    fn rename(&self, name: &str, new_name: &str) -> Result<(), PoolError> {
        let _g = self.lock();
        self.rename_any(name, new_name)
    }
    fn resize(&self, name: &str, size: u64, force: bool) -> Result<(), PoolError> {
        let _g = self.lock();
        self.resize_volume(name, size, force)
    }
    fn delete(&self, name: &str) -> Result<(), PoolError> {
        let _g = self.lock();
        self.delete_any(name)
    }
    fn snapshot(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, PoolError> {
        let _g = self.lock();
        self.snapshot_volume(volume, snapshot)
    }
    fn clone_volume(&self, snapshot: &str, name: &str) -> Result<VolumeInfo, PoolError> {
        let _g = self.lock();
        self.clone_snapshot(snapshot, name)
    }
    fn decouple(&self, name: &str) -> Result<(), PoolError> {
        let _g = self.lock();
        self.flatten(name)
    }
    fn open(&self, name: &str) -> Result<SharedBackend, PoolError> {
        let _g = self.lock();
        let volume = names::volume("name", name)?;
        // Named errors for a missing image (open_rbd's is an io::Error).
        drop(ffi::Img::open_ro(self.io(), volume, None).map_err(self.fail(volume))?);
        // The namespace's NGUID/UUID (`Backend::stable_id`): the volume's.
        let uuid = self.info(volume)?.uuid;
        let opts = RbdOptions {
            image: volume.to_owned(),
            ..self.opts.clone()
        };
        let backend = farflash_backend::open_rbd(&opts).map_err(|err| PoolError::Io {
            what: format!("opening rbd {}/{volume}", self.opts.pool),
            err,
        })?;
        Ok(self.exports.wrap(volume, backend, *uuid.as_bytes()))
    }
}
