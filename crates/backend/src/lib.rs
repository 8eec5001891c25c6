//! Storage backends behind one completion-queue interface.
//!
//! A [`Backend`] is one namespace's storage, shared (`Arc`) by every queue
//! pair that can reach it. Each event-loop thread opens its own
//! [`BackendQueue`] from it (for files: its own io_uring), so the I/O path
//! never takes a lock shared between threads. Requests carry a caller tag
//! (the target uses it to find the NVMe command) and an owned, aligned
//! [`IoBuf`] that comes back in the [`IoCompletion`]: no per-I/O allocation
//! when buffers are recycled through a [`BufPool`].
//!
//! Offsets and lengths are in bytes; the caller (the NVMe controller) has
//! already checked them against [`Backend::capacity`] and the block size.
//! Backends check again and complete a request they refuse (outside the
//! capacity, not block-aligned, buffer too small) with `EINVAL`
//! (`ErrorKind::InvalidInput`), and modifying requests on a read-only
//! backend with `EROFS`; they never panic on a bad request.
//!
//! Backends: [`open_ram`] (lazily committed memory), [`open_null`] (zeroes,
//! discards writes), [`open_file`] (regular file or block device, io_uring,
//! `O_DIRECT` when available), [`open_rbd`] (a Ceph RBD image through
//! librbd's asynchronous API); with the `testing` feature, [`open_scripted`]
//! (completions held, reordered, delayed or failed on a test's command).

#![deny(clippy::undocumented_unsafe_blocks)]

mod buf;
mod changes;
mod check;
mod chunk;
mod file;
pub mod limits;
mod null;
mod queue_set;
mod ram;
mod rbd;
#[cfg(any(test, feature = "testing"))]
mod scripted;
mod sync_queue;

#[cfg(test)]
mod test_util;

pub use buf::{BufPool, IoBuf, IO_ALIGN};
pub use changes::{notify_changed, wait_changed};
pub use check::{dealloc_buf, dealloc_range};
pub use chunk::Chunk;
pub use file::{open_file, DirectMode, FileOptions};
pub use null::open_null;
pub use queue_set::QueueSet;
pub use ram::{open_ram, open_ram_committed};
pub use rbd::{is_not_lock_owner, open_rbd, wait_closed, NotLockOwner, RadosPool, RbdOptions};
#[cfg(any(test, feature = "testing"))]
pub use scripted::{open_scripted, OpKind, Script};

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

/// One namespace's storage.
pub trait Backend: Send + Sync + 'static {
    /// "ram", "file", "block", "null": for logs and `nvme list` model strings.
    fn kind(&self) -> &'static str;
    /// Usable size in bytes (a multiple of `block_size`).
    fn capacity(&self) -> u64;
    /// Logical block size in bytes (512 or 4096).
    fn block_size(&self) -> u32;
    /// True when completed writes may sit in a volatile cache until a flush
    /// (page cache for buffered files, a device cache): the controller then
    /// reports a Volatile Write Cache (Identify Controller VWC).
    fn volatile_write_cache(&self) -> bool;
    /// Opens a per-thread queue able to hold `depth` requests in flight.
    fn open_queue(&self, depth: u32) -> io::Result<Box<dyn BackendQueue>>;
    /// Makes every completed write durable (used at shutdown).
    fn sync_all(&self) -> io::Result<()>;
    /// Re-reads the size of storage that can change outside farflash (an
    /// RBD image resized in Ceph) and returns whether [`Backend::capacity`]
    /// changed. Storage whose size only farflash changes returns false.
    fn refresh_capacity(&self) -> io::Result<bool> {
        Ok(false)
    }
    /// Tells the storage whether the namespace's ANA group is now optimized
    /// through at least one listener of this target (the command layer
    /// calls it on every configuration change, before hosts see a
    /// promotion and after they see a demotion). Storage shared by several
    /// targets takes or gives up ownership (an RBD image's exclusive lock,
    /// docs/rbd.md); an error refuses the promotion. Others do nothing.
    fn set_ana_optimized(&self, _optimized: bool) -> io::Result<()> {
        Ok(())
    }
    /// A persistent identity of the storage (a pool volume's UUID), from
    /// which the namespace's NGUID and UUID derive when none is configured,
    /// so they follow the storage across restarts and subsystems. `None`:
    /// they derive from the subsystem NQN and NSID.
    fn stable_id(&self) -> Option<[u8; 16]> {
        None
    }
    /// The unit in bytes that Deallocate frees whole (a pool's cluster),
    /// reported as NPDG/NPDA in Identify Namespace; `None`: any block.
    fn deallocate_granularity(&self) -> Option<u64> {
        None
    }
    /// Storage that runs [`IoOp::CompareAndWrite`] itself, atomically
    /// against every writer (an RBD image exported by several gateways):
    /// the unit in bytes, a power of two, that such a request's range must
    /// stay inside. `None`: not offered, and the command layer runs a fused
    /// Compare and Write under its own range exclusion (atomic against this
    /// process only).
    fn compare_and_write_unit(&self) -> Option<u32> {
        None
    }
}

/// A per-thread submission/completion queue on a [`Backend`].
pub trait BackendQueue {
    /// Queues one request. It completes later through [`BackendQueue::reap`],
    /// even when it fails (the error is in the completion). Synchronous
    /// engines (RAM, null) may complete it before returning.
    fn submit(&mut self, req: IoRequest);
    /// Hands everything submitted so far to the kernel in one call, if the
    /// engine batches (io_uring `submit`). Cheap when nothing is pending.
    fn commit(&mut self) -> io::Result<()>;
    /// Moves the completions that are ready into `out` (appends); returns how many.
    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize;
    /// A file descriptor that becomes readable when completions are waiting
    /// (an eventfd registered with io_uring), or `None` when every request
    /// completes inside `submit`/`commit`. It can also stay readable after
    /// a reap took everything: a waiter reaps again after each wake-up and
    /// should wait edge-triggered, as the target's loop does.
    fn notify_fd(&self) -> Option<RawFd>;
    /// Requests submitted and not yet reaped.
    fn in_flight(&self) -> usize;
}

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Read `len` bytes at `offset` into `buf[..len]`. `buf.capacity()` must
    /// be at least `len`; the buffer comes back with `len() == len`.
    Read { offset: u64, len: u32 },
    /// Write `buf[..len]` at `offset` (`buf.len()` must be at least `len`);
    /// with `fua` the data is durable before completion.
    Write { offset: u64, len: u32, fua: bool },
    /// Make every write completed so far durable (fdatasync).
    Flush,
    /// Make `len` bytes at `offset` read back as zeroes.
    WriteZeroes { offset: u64, len: u64, fua: bool },
    /// Deallocate `ranges` byte ranges listed in `buf` as native-endian
    /// `(offset: u64, len: u64)` pairs (16 bytes each). Deallocated ranges
    /// read back as zeroes (DLFEAT = 001b).
    Deallocate { ranges: u32 },
    /// Atomically against every writer of the storage (other targets
    /// included): compare the `len` bytes at `offset` with `buf[..len]` and,
    /// only when they are equal, write `buf[len..2 * len]` there (durable
    /// before completion with `fua`). A miscompare completes with `EILSEQ`
    /// and writes nothing. Only storage whose
    /// [`Backend::compare_and_write_unit`] is `Some` runs it, for a range
    /// inside one such unit; others complete it with `EOPNOTSUPP`.
    CompareAndWrite { offset: u64, len: u32, fua: bool },
}

/// One request: a caller tag, an operation and the buffer it uses.
#[derive(Debug)]
pub struct IoRequest {
    pub tag: u64,
    pub op: IoOp,
    pub buf: IoBuf,
}

/// A finished request: its tag, its buffer back, and the outcome.
#[derive(Debug)]
pub struct IoCompletion {
    pub tag: u64,
    pub buf: IoBuf,
    pub result: io::Result<()>,
}

/// A shared handle on a backend.
pub type SharedBackend = Arc<dyn Backend>;
