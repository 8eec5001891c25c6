//! farflash's volume store: thin-provisioned volumes, snapshots and clones
//! in a *local pool* over one or more files or block devices (the model
//! is SPDK's blobstore/lvol store and Linux dm-thin; no code is shared).
//!
//! The control plane manages pools through [`VolumeStore`] (implemented
//! here by [`LocalPool`], later by RBD pools) and exports a volume as a
//! namespace with [`VolumeStore::open`], which returns a
//! [`farflash_backend::SharedBackend`] like any other backend.
//!
//! # Clusters
//!
//! Space is handed out in clusters, chosen at creation (power of two,
//! 64 KiB..=64 MiB). The default is **1 MiB**: dm-thin's 64 KiB needs a
//! mapping per 64 KiB (16x the metadata and 16x the allocations of a
//! sequential fill) and SPDK's 4 MiB copies 4 MiB for the first 4 KiB
//! write after a snapshot and zeroes 4 MiB per first write; ZFS's 128 KiB
//! recordsize is a checksum/compression unit, not an allocation map. At
//! 1 MiB a 1 TiB pool has 1 Mi clusters (8 MiB of map in memory, 21 MiB
//! of checkpoint at most), a first write or a copy-on-write moves at most
//! 1 MiB, and 128 KiB I/O stays inside one cluster 7 times out of 8.
//!
//! # Layout
//!
//! Device 0 (4 KiB blocks):
//!
//! | blocks | what |
//! |---|---|
//! | 0, 1 | superblock copies ([`format::Superblock`]), written alternately: generation g goes to block g mod 2 |
//! | 2 .. 2+S | checkpoint slot 0 (S = `slot_blocks`) |
//! | 2+S .. 2+2S | checkpoint slot 1 |
//! | 2+2S .. 2+2S+J | journal (J = `journal_blocks`) |
//! | from the next cluster boundary | data clusters |
//!
//! Other devices: blocks 0 and 1 hold a label (the same superblock with
//! the device's index, generation 1, never rewritten), data clusters
//! start at the first cluster boundary. Physical cluster numbers run over
//! the devices in index order.
//!
//! The superblock (CRC32C over bytes 16..4096) holds the pool UUID and
//! name, cluster size, every device's size (a device of another size at
//! open is refused, naming it), the sizes of the metadata areas, which
//! checkpoint slot is live with its block count and chain seed, and the
//! journal's first sequence number and chain seed.
//!
//! Checkpoint and journal blocks share one header ([`format::BlockHeader`]:
//! magic, CRC32C seeded with the pool UUID, sequence, the CRC of the
//! previous block of the chain, kind, last-block flag, payload length)
//! and carry records that never span blocks ([`format::Record`]):
//!
//! | tag | record | fields (little-endian) |
//! |---|---|---|
//! | 1 | VolPut | id u32, uuid (16 bytes), size u64, parent id u32 (FFFFFFFFh none), flags u8 (1 snapshot), name length u8, name |
//! | 2 | VolDel | id u32 |
//! | 3 | Map | id u32, logical cluster u64, value u64: 0 unmapped (read the parent), FFFF..FF zero (hide the parent), else physical cluster + 1 |
//!
//! A checkpoint is the whole state as records (each volume's VolPut and
//! its Map records); a journal transaction is the changes of one commit.
//! Free space is not stored: a cluster is used when a map holds it, so
//! recovery rebuilds the allocator from the maps and a crash cannot leak
//! a cluster.
//!
//! # Commit protocol
//!
//! Changes (allocations, unmaps, management calls) are made in memory and
//! queued as records. A commit (at Flush, at a FUA write that allocated,
//! at every management call, and about once a second):
//!
//! 1. takes the queued records (and, when they do not fit the journal,
//!    the whole state) under the state lock;
//! 2. flushes every device: the data and cluster preparation the records
//!    refer to are durable before any mapping that exposes them;
//! 3. appends the records as one transaction (blocks chained by CRC, the
//!    last flagged) at the journal's head and flushes device 0; or, when
//!    the journal is full, writes the whole state to the idle checkpoint
//!    slot, flushes, writes the next superblock generation (naming that
//!    slot and restarting the journal with a new seed) to the other copy,
//!    and flushes;
//! 4. only then lets clusters freed by those records be allocated again
//!    (and only once every request that was in flight when they were
//!    freed, on any volume, has ended: `grace.rs`), after punching them
//!    out of their device (Deallocate: a hole in a file, a discard on a
//!    device), so freed space is given back below the pool.
//!
//! Recovery reads the superblock copies (the valid one with the highest
//! generation wins: a torn superblock write leaves the other), the live
//! checkpoint (every block checked), then journal transactions until the
//! first block that is not the chain's next (torn, stale, foreign or
//! never written); a transaction without its last block is dropped. Its
//! cost is the checkpoint plus the journal since it, not the device size.
//!
//! # Data path
//!
//! See [`volume`]: one atomic map lookup and one io_uring request per
//! I/O inside an allocated cluster. The first write to a cluster, Write
//! Zeroes and Deallocate go to the pool's preparation thread (`prep.rs`;
//! `submit` returns at once and the request completes through the
//! queue's eventfd like any other), which allocates the cluster under the
//! pool lock and prepares it before mapping it (a new cluster never shows
//! earlier data: zeroed with Write Zeroes, or the parent's data copied
//! in; a whole-cluster first write is its own preparation). A full pool
//! fails only writes that need a new cluster, with `ENOSPC`
//! ([`no_space`], NVMe Capacity Exceeded).
//!
//! # Modules
//!
//! In layers: each names only modules below it (no module cycle:
//! `tests/module_cycles.rs`).
//!
//! 1. [`format`] (on-disk encodings), `error.rs`, `lock.rs` (device
//!    locks, the mutex helper).
//! 2. `layer.rs` (a volume's cluster map, chained to its parent's),
//!    `grace.rs` (grace epochs), `state.rs` (volumes, allocator, pending
//!    records), `dev.rs` (the devices), `meta.rs` (reading and writing
//!    checkpoints, journal and superblocks), `recover.rs` (replayed
//!    records to a checked state).
//! 3. The stages' machinery, which knows nothing of the pool: `committer.rs`
//!    (the commit thread, driving the pool through its `Commits` trait)
//!    and `prep.rs` (the preparation thread, its tasks and the queues'
//!    inboxes, doing the work through its `Worker` trait).
//! 4. `pool.rs`: `PoolInner`, what every handle shares (the state lock,
//!    commits, cluster allocation and preparation); it implements
//!    `Commits`.
//! 5. Above it: `work.rs` (what preparation tasks do: first writes, Write
//!    Zeroes, Deallocate; implements `Worker`), `open.rs` (creating and
//!    opening a pool: superblocks, device labels, recovery, starting the
//!    stages), [`volume`] (the data path), `ops.rs` (management calls,
//!    which open volumes), `check.rs` (offline check); `lib.rs`
//!    ([`LocalPool`]) on top. Apart: [`rbd`] (RBD pools), [`testing`]
//!    (in-memory devices for tests).
//!
//! # Using it
//!
//! ```no_run
//! use farflash_pool::{LocalPool, VolumeStore};
//! # fn main() -> Result<(), farflash_pool::PoolError> {
//! let devs = ["/dev/nvme1n1".into(), "/dev/nvme2n1".into()];
//! let pool = LocalPool::create("fast", &devs, None)?; // 1 MiB clusters
//! let vol = pool.create_volume("db", 100 << 30)?;      // thin: nothing allocated
//! let backend = pool.open("db")?;                      // a namespace's SharedBackend
//! pool.snapshot("db", "db-monday")?;                   // O(1), point in time
//! pool.clone_volume("db-monday", "db-test")?;
//! # let _ = (vol, backend); Ok(()) }
//! ```
//!
//! A pool opened from paths holds an exclusive `flock` on every device
//! while it, or a volume exported from it, lives; [`check`] takes shared
//! locks, so it reads only a pool nobody has open.
//!
//! # Known limits
//!
//! * One preparation thread per pool does every allocation, zeroing and
//!   copy-on-write, one at a time and holding the pool's state lock
//!   through each (as the event loops did before it took the work): first
//!   writes of all volumes are serialized behind it, and a commit (so a
//!   Flush that needs one) can wait for the preparation under way. Event
//!   loops do not wait for it. Without a committer
//!   (`commit_interval: None`) a Flush or FUA write that needs a commit
//!   commits on the submitting thread.
//! * A first write to part of a cluster zeroes (or copies) the whole
//!   cluster before writing (on the preparation thread).
//! * Deleting a snapshot with one child (a clone, or the volume it was
//!   taken of) merges it into the child, online, in one metadata
//!   transaction (as SPDK's blobstore does): the child takes the clusters
//!   it did not overwrite and the snapshot's parent, the others are freed.
//!   The child's map (and those of its descendants) is rebuilt, which
//!   costs time in proportion to their entries, under the state lock.
//!   With two or more children it is refused (naming them): decouple or
//!   delete all but one first.
//! * Metadata lives on device 0 only; other devices carry labels.
//! * A freed cluster waits for every request in flight when it was freed,
//!   on any volume of the pool (not only those that could read it), so
//!   one request held long anywhere (a stuck device) delays the reuse of
//!   everything freed after it started, never correctness (`grace.rs`).
//!   A full pool retries the frees that wait before it fails a write with
//!   `ENOSPC`; otherwise they are retried at commits (about once a
//!   second).
//! * Closing a queue waits for its requests on the preparation thread.

#![deny(clippy::undocumented_unsafe_blocks)]

mod check;
mod committer;
mod dev;
mod error;
pub mod format;
mod grace;
mod layer;
mod lock;
mod meta;
mod open;
mod ops;
mod pool;
mod prep;
pub mod rbd;
mod recover;
mod state;
pub mod testing;
pub mod volume;
mod work;

pub use check::{check, check_backends, Report};
pub use error::{is_no_space, no_space, PoolError};
pub use open::{PoolOptions, DEFAULT_CLUSTER};
pub use rbd::RbdPool;

use farflash_backend::{DirectMode, FileOptions, SharedBackend};
use std::path::PathBuf;
use std::sync::Arc;

/// A volume's or snapshot's description (serializes for management
/// replies; the UUID as its hyphenated string).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VolumeInfo {
    pub name: String,
    /// Stable and persisted; the namespace's NGUID/UUID derive from it.
    #[serde(serialize_with = "uuid_string")]
    pub uuid: uuid::Uuid,
    pub size: u64,
    /// Bytes of clusters the volume holds itself.
    pub allocated: u64,
    /// Bytes read through from snapshots (shared with them).
    pub shared: u64,
    /// The snapshot this volume or clone reads through, if any.
    pub parent: Option<String>,
    /// Snapshots are read-only.
    pub is_snapshot: bool,
    /// Volumes (clones, or the snapshot's origin) reading through this one.
    pub clones: Vec<String>,
    /// Opened with [`VolumeStore::open`] and not dropped yet.
    pub exported: bool,
}

fn uuid_string<S: serde::Serializer>(u: &uuid::Uuid, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&u.hyphenated())
}

/// A pool's space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub size: u64,
    pub allocated: u64,
    pub free: u64,
    /// Part of `allocated` freed and waiting for its commit.
    pub freeing: u64,
    pub cluster_size: u64,
    pub volumes: usize,
}

/// A store of volumes: local pools now, RBD pools later.
pub trait VolumeStore: Send + Sync + 'static {
    /// "local" | "rbd".
    fn kind(&self) -> &'static str;
    fn name(&self) -> &str;
    fn stats(&self) -> PoolStats;
    fn create_volume(&self, name: &str, size: u64) -> Result<VolumeInfo, PoolError>;
    fn list(&self) -> Vec<VolumeInfo>;
    fn get(&self, name: &str) -> Result<VolumeInfo, PoolError>;
    fn rename(&self, name: &str, new_name: &str) -> Result<(), PoolError>;
    /// Grows online; shrinks only when not exported, and below the highest
    /// written cluster only with `force`.
    fn resize(&self, name: &str, size: u64, force: bool) -> Result<(), PoolError>;
    /// Deletes a volume, or a snapshot: one with a single child (a clone
    /// or the volume it was taken of) is merged into it (the child keeps
    /// its data and inherits from the snapshot's parent); one with more
    /// is refused, naming them. An exported volume is refused.
    fn delete(&self, name: &str) -> Result<(), PoolError>;
    /// A read-only, point-in-time snapshot of `volume` (O(1): the map
    /// moves to the snapshot).
    fn snapshot(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, PoolError>;
    /// A writable child of `snapshot`, copy-on-write per cluster.
    fn clone_volume(&self, snapshot: &str, name: &str) -> Result<VolumeInfo, PoolError>;
    /// Copies the parent's clusters in and cuts the volume from it.
    fn decouple(&self, name: &str) -> Result<(), PoolError>;
    /// Exports the volume; it counts as exported until the backend drops.
    fn open(&self, name: &str) -> Result<SharedBackend, PoolError>;
}

/// A pool of thin volumes over local files or block devices. Opened
/// from paths, it holds an exclusive `flock` on each device while it (or
/// any volume exported from it) lives.
pub struct LocalPool {
    inner: Arc<pool::PoolInner>,
}

fn open_devices(
    devices: &[PathBuf],
    read_only: bool,
) -> Result<Vec<(String, SharedBackend)>, PoolError> {
    let opts = FileOptions {
        block_size: 4096,
        direct: DirectMode::Auto,
        create_size: None,
        read_only,
    };
    devices
        .iter()
        .map(|p| {
            let label = p.display().to_string();
            farflash_backend::open_file(p, &opts)
                .map(|b| (label.clone(), b))
                .map_err(PoolError::io(format!("opening device {label}")))
        })
        .collect()
}

impl LocalPool {
    /// Creates a pool named `name` over `devices` (their content is lost).
    pub fn create(
        name: &str,
        devices: &[PathBuf],
        cluster_size: Option<u64>,
    ) -> Result<LocalPool, PoolError> {
        let opts = PoolOptions {
            cluster_size,
            ..PoolOptions::default()
        };
        Self::create_opts(name, devices, &opts)
    }

    /// Opens the pool on `devices` (any order).
    pub fn open(devices: &[PathBuf]) -> Result<LocalPool, PoolError> {
        Self::open_opts(devices, &PoolOptions::default())
    }

    /// [`LocalPool::create`] with every option.
    pub fn create_opts(
        name: &str,
        devices: &[PathBuf],
        opts: &PoolOptions,
    ) -> Result<LocalPool, PoolError> {
        let locks = lock::lock_devices(devices, true)?;
        let pool = Self::create_with(name, open_devices(devices, false)?, opts)?;
        pool.inner.hold(locks);
        Ok(pool)
    }

    /// [`LocalPool::open`] with options (`cluster_size`, `max_volumes` and
    /// `journal_blocks` are the pool's own and ignored here).
    pub fn open_opts(devices: &[PathBuf], opts: &PoolOptions) -> Result<LocalPool, PoolError> {
        let locks = lock::lock_devices(devices, true)?;
        let pool = Self::open_with(open_devices(devices, false)?, opts)?;
        pool.inner.hold(locks);
        Ok(pool)
    }

    /// [`LocalPool::create`] over backends, each with a label for errors.
    pub fn create_with(
        name: &str,
        devices: Vec<(String, SharedBackend)>,
        opts: &PoolOptions,
    ) -> Result<LocalPool, PoolError> {
        Ok(LocalPool {
            inner: open::create(name, devices, opts)?,
        })
    }

    /// [`LocalPool::open`] over backends.
    pub fn open_with(
        devices: Vec<(String, SharedBackend)>,
        opts: &PoolOptions,
    ) -> Result<LocalPool, PoolError> {
        Ok(LocalPool {
            inner: open::open(devices, opts)?,
        })
    }

    /// Commits every change now (what a Flush does).
    pub fn commit(&self) -> Result<(), PoolError> {
        self.inner
            .commit()
            .map_err(PoolError::io("committing metadata"))?;
        self.inner.reclaim_now();
        Ok(())
    }

    /// Whether changes (new mappings, frees) wait for a commit.
    pub fn uncommitted(&self) -> bool {
        self.inner.dirty()
    }
}

impl VolumeStore for LocalPool {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn name(&self) -> &str {
        &self.inner.name
    }
    fn stats(&self) -> PoolStats {
        self.inner.stats()
    }
    fn create_volume(&self, name: &str, size: u64) -> Result<VolumeInfo, PoolError> {
        self.inner.create_volume(name, size)
    }
    fn list(&self) -> Vec<VolumeInfo> {
        self.inner.list()
    }
    fn get(&self, name: &str) -> Result<VolumeInfo, PoolError> {
        self.inner.get(name)
    }
    fn rename(&self, name: &str, new_name: &str) -> Result<(), PoolError> {
        self.inner.rename(name, new_name)
    }
    fn resize(&self, name: &str, size: u64, force: bool) -> Result<(), PoolError> {
        self.inner.resize(name, size, force)
    }
    fn delete(&self, name: &str) -> Result<(), PoolError> {
        self.inner.delete(name)
    }
    fn snapshot(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, PoolError> {
        self.inner.snapshot(volume, snapshot)
    }
    fn clone_volume(&self, snapshot: &str, name: &str) -> Result<VolumeInfo, PoolError> {
        self.inner.clone_volume(snapshot, name)
    }
    fn decouple(&self, name: &str) -> Result<(), PoolError> {
        self.inner.decouple(name)
    }
    fn open(&self, name: &str) -> Result<SharedBackend, PoolError> {
        self.inner.open_volume(name)
    }
}
