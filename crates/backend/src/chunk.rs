//! Chunks: large, [`IO_ALIGN`]-aligned allocations a chunked [`BufPool`]
//! carves its buffers from, so that memory registered once with an RDMA
//! device (one registration per chunk) stays valid for every buffer carved
//! from it.
//!
//! A chunk is reference-counted: the pool holds one reference, and every
//! buffer carved from it another. Its memory goes back to the allocator
//! only when the last of them is gone, so a buffer never outlives its
//! memory, whichever thread drops it and whether or not its pool still
//! lives. A buffer dropped outside [`BufPool::put`] (on another thread, or
//! on an error path) records its place in the chunk's returned list, from
//! which the pool takes it back; nothing carved is ever freed on its own.
//!
//! [`BufPool`]: crate::BufPool
//! [`BufPool::put`]: crate::BufPool::put

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Alignment (and capacity granule) of every `IoBuf` (and of a chunk's
/// memory), in bytes. Defined here, which `buf` builds on, so that the two
/// modules do not name each other.
pub const IO_ALIGN: usize = 4096;

/// One chunk's memory and the places of buffers dropped outside their pool.
struct ChunkMem {
    base: NonNull<u8>,
    len: usize,
    /// The pool the chunk belongs to (a process-unique id).
    owner: u64,
    /// (offset, capacity) of carved buffers dropped instead of put back.
    /// Touched only on that path and when the pool runs dry, never per I/O.
    returned: Mutex<Vec<(usize, usize)>>,
}

// SAFETY: the memory is owned by this value alone (carved regions are
// handed out once each, see `BufPool`); the returned list is behind a
// mutex. Sending or sharing the handle between threads is sound.
unsafe impl Send for ChunkMem {}
// SAFETY: as above: `&ChunkMem` reads only immutable fields or the mutex.
unsafe impl Sync for ChunkMem {}

impl Drop for ChunkMem {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed` with this layout; the last
        // reference is gone, so no buffer carved from it remains.
        unsafe { alloc::dealloc(self.base.as_ptr(), layout(self.len)) }
    }
}

fn layout(len: usize) -> Layout {
    Layout::from_size_align(len, IO_ALIGN).expect("chunk size overflow")
}

/// A handle on a chunk (cheap to clone): its address range, e.g. to
/// register it with an RDMA protection domain. Holding a handle keeps the
/// chunk's memory allocated.
#[derive(Clone)]
pub struct Chunk(Arc<ChunkMem>);

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// A process-unique id for a chunked pool.
pub(crate) fn new_owner() -> u64 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

impl Chunk {
    /// A zeroed chunk of `len` bytes (a multiple of [`IO_ALIGN`]) for the
    /// pool `owner`.
    pub(crate) fn new(len: usize, owner: u64) -> Chunk {
        assert!(len > 0 && len.is_multiple_of(IO_ALIGN), "chunk size {len}");
        let l = layout(len);
        // SAFETY: `l` has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(l) };
        let Some(base) = NonNull::new(raw) else {
            alloc::handle_alloc_error(l)
        };
        Chunk(Arc::new(ChunkMem {
            base,
            len,
            owner,
            returned: Mutex::new(Vec::new()),
        }))
    }

    /// Start address of the chunk's memory.
    pub fn addr(&self) -> usize {
        self.0.base.as_ptr() as usize
    }

    /// Bytes of the chunk.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Never true (chunks have a size); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Whether `[addr, addr + len)` lies within the chunk.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr() && addr.saturating_add(len) <= self.addr() + self.0.len
    }

    pub(crate) fn owner(&self) -> u64 {
        self.0.owner
    }

    /// The pointer at `off` (within the chunk).
    pub(crate) fn ptr_at(&self, off: usize) -> NonNull<u8> {
        debug_assert!(off < self.0.len);
        // SAFETY: `off` is within the allocation.
        unsafe { NonNull::new_unchecked(self.0.base.as_ptr().add(off)) }
    }

    /// A carved buffer at `ptr` of `cap` bytes was dropped outside its
    /// pool: its place goes on the returned list.
    pub(crate) fn give_back(&self, ptr: NonNull<u8>, cap: usize) {
        let off = ptr.as_ptr() as usize - self.addr();
        let mut l = self.0.returned.lock().unwrap_or_else(|e| e.into_inner());
        l.push((off, cap));
    }

    /// Takes the returned places.
    pub(crate) fn take_returned(&self, out: &mut Vec<(usize, usize)>) {
        let mut l = self.0.returned.lock().unwrap_or_else(|e| e.into_inner());
        out.append(&mut l);
    }

    /// References alive (the pool's, carved buffers', other handles').
    #[cfg(test)]
    pub(crate) fn refs(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.0.len)
            .finish()
    }
}
