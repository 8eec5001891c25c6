//! RBD images (Ceph) as namespaces, through librbd's asynchronous API.
//!
//! One [`Backend`] holds one cluster connection and one image handle, shared
//! by every worker's queue: librbd's handle is thread-safe, and one handle
//! per process keeps RBD's exclusive lock in one owner (separate handles
//! would pass the lock back and forth between workers on every write; see
//! docs/rbd.md). Each worker's [`queue::RbdQueue`] gets its completions
//! through an eventfd of its own.
//!
//! The gateway keeps no write-back cache (`rbd_cache = false`): a write is
//! on the OSDs when it completes, so a second gateway on the same image
//! reads it; Flush and FUA still end in `rbd_aio_flush`.
//!
//! An open image is closed on a thread of its own (`close`): the close
//! takes round trips to the cluster, and the last reference to a removed
//! namespace's image is usually dropped by an event loop.

mod close;
mod cluster;
mod lock;
mod queue;

pub use close::wait_closed;
pub use cluster::{RadosPool, RbdOptions};
pub use lock::{is_not_lock_owner, NotLockOwner};

use crate::check::Geometry;
use crate::{Backend, BackendQueue, SharedBackend};
use cluster::Image;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The range librbd's compare-and-write accepts: inside one 512-byte
/// sector (librbd's `ImageCompareAndWriteRequest::prune_object_extents`,
/// Ceph 16 and before: a range crossing a sector, a stripe unit or an
/// object is `EINVAL`; a sector never crosses the latter two; a later Ceph
/// may accept more, every version accepts this). Wider fused pairs run
/// under the command layer's range exclusion (docs/rbd.md).
pub(crate) const COMPARE_AND_WRITE_UNIT: u32 = 512;

struct RbdBackend {
    image: Arc<Image>,
    /// Whether the image has the exclusive-lock feature (else every gateway
    /// writes and ANA changes do nothing here).
    locking: bool,
    /// The last ANA state the target reported ([`Backend::set_ana_optimized`]):
    /// only a change takes or releases the lock.
    optimized: Mutex<Option<bool>>,
    /// `pool/image`, for messages.
    name: String,
    /// The image's size rounded down to the block size; changes when the
    /// image is resized ([`Backend::refresh_capacity`]). The queues read it
    /// (written only on a resize, so the cache line stays shared).
    capacity: Arc<AtomicU64>,
    block_size: u32,
}

/// `size` rounded down to whole blocks.
fn whole_blocks(size: u64, bs: u32) -> u64 {
    size - size % u64::from(bs)
}

/// Connects to the cluster and opens `opts.pool`/`opts.image` as a
/// namespace's storage. Errors name the ceph.conf, keyring, cluster, pool or
/// image that is wrong; an unreachable cluster fails within
/// `client_mount_timeout` (10 s unless the ceph.conf sets it).
pub fn open_rbd(opts: &RbdOptions) -> io::Result<SharedBackend> {
    let bs = opts.block_size;
    if bs != 512 && bs != 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("block size {bs}: must be 512 or 4096"),
        ));
    }
    let image = Image::open(opts)?;
    let size = image.size()?;
    let capacity = whole_blocks(size, bs);
    if capacity == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "image {}/{} ({size} bytes) is smaller than one block",
                opts.pool, opts.image
            ),
        ));
    }
    let locking = image.has_exclusive_lock()?;
    if !locking {
        image.lock_owned.store(true, Ordering::Release);
    }
    Ok(Arc::new(RbdBackend {
        image: Arc::new(image),
        locking,
        optimized: Mutex::new(None),
        name: format!("{}/{}", opts.pool, opts.image),
        capacity: Arc::new(AtomicU64::new(capacity)),
        block_size: bs,
    }))
}

impl Backend for RbdBackend {
    fn kind(&self) -> &'static str {
        "rbd"
    }

    fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn volatile_write_cache(&self) -> bool {
        // rbd_cache is off (see the module comment).
        false
    }

    /// librbd's compare-and-write: the OSD compares and writes the object
    /// in one operation, atomic against every client of the image.
    fn compare_and_write_unit(&self) -> Option<u32> {
        Some(COMPARE_AND_WRITE_UNIT)
    }

    fn open_queue(&self, depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        let geometry = Geometry {
            capacity: self.capacity(),
            block_size: self.block_size,
            read_only: false,
        };
        Ok(Box::new(queue::RbdQueue::new(
            self.image.clone(),
            geometry,
            self.capacity.clone(),
            depth,
        )?))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.image.flush()
    }

    /// librbd keeps the image header current (its own watch on the image),
    /// so this asks it for the size, with no round trip in the usual case.
    fn refresh_capacity(&self) -> io::Result<bool> {
        let now = whole_blocks(self.image.size()?, self.block_size);
        if now == 0 {
            // Shrunk below one block: keep the namespace as it was.
            return Ok(false);
        }
        Ok(self.capacity.swap(now, Ordering::AcqRel) != now)
    }

    /// Optimized here: break any other gateway's lock (blocklisting it) and
    /// take it; no longer optimized: release it. Only a change acts.
    fn set_ana_optimized(&self, optimized: bool) -> io::Result<()> {
        if !self.locking {
            return Ok(());
        }
        let mut last = self.optimized.lock().unwrap_or_else(|p| p.into_inner());
        if *last == Some(optimized) {
            return Ok(());
        }
        if optimized {
            let broken = self.image.take_lock()?;
            for owner in broken {
                tracing::warn!(
                    "rbd {}: broke the exclusive lock of {owner} (now blocklisted) to serve as optimized",
                    self.name
                );
            }
            tracing::info!("rbd {}: exclusive lock acquired", self.name);
        } else {
            self.image.release_lock()?;
            tracing::info!("rbd {}: exclusive lock released", self.name);
        }
        *last = Some(optimized);
        Ok(())
    }
}
