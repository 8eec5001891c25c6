//! Aligned I/O buffers and a per-thread recycling pool.
//!
//! [`IoBuf`] is the unit of data exchanged with every backend: an owned heap
//! allocation aligned to [`IO_ALIGN`], which satisfies the memory alignment
//! `O_DIRECT` asks for on every Linux block device and file system.
//! [`BufPool`] recycles them by power-of-two size class so that the I/O path
//! does not allocate. A chunked pool ([`BufPool::chunked`]) carves its
//! buffers from a few large [`Chunk`]s it keeps for its life, so that an
//! RDMA queue registers each chunk once instead of each buffer.

use crate::chunk::{self, Chunk};
use std::alloc::{self, Layout};
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

pub use crate::chunk::IO_ALIGN;

/// An owned, [`IO_ALIGN`]-aligned heap buffer with a capacity and a length.
///
/// The whole capacity is always initialized (zeroed when allocated, then
/// whatever was last written), so the length can be moved freely within it
/// with [`IoBuf::set_len`]. `Deref` gives the first `len()` bytes.
pub struct IoBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
    /// The chunk the buffer was carved from (a chunked pool's), or None for
    /// a buffer of its own from the allocator.
    home: Option<Chunk>,
}

// SAFETY: `IoBuf` uniquely owns its allocation (like `Box<[u8]>`); nothing
// else holds the pointer, so moving it to another thread is sound.
unsafe impl Send for IoBuf {}
// SAFETY: a shared `&IoBuf` only allows reading the bytes; mutation requires
// `&mut IoBuf`, so sharing references between threads is sound.
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// Allocates a zeroed buffer of at least `cap` bytes, with length 0.
    ///
    /// The capacity is rounded up to a multiple of [`IO_ALIGN`] (and is at
    /// least `IO_ALIGN`, so a zero-capacity request still yields a usable
    /// buffer).
    ///
    /// # Panics
    /// Like `Vec`, on capacity overflow; aborts if the allocator fails.
    pub fn with_capacity(cap: usize) -> Self {
        let cap = cap
            .max(1)
            .checked_next_multiple_of(IO_ALIGN)
            .expect("IoBuf capacity overflow");
        let layout = Self::layout(cap);
        // SAFETY: `layout` has a non-zero size (cap >= IO_ALIGN).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        IoBuf {
            ptr,
            cap,
            len: 0,
            home: None,
        }
    }

    /// Allocates a buffer holding a copy of `data` (`len() == data.len()`).
    pub fn from_slice(data: &[u8]) -> Self {
        let mut buf = Self::with_capacity(data.len());
        buf.set_len(data.len());
        buf.copy_from_slice(data);
        buf
    }

    fn layout(cap: usize) -> Layout {
        Layout::from_size_align(cap, IO_ALIGN).expect("IoBuf capacity overflow")
    }

    /// Total usable bytes (a multiple of [`IO_ALIGN`]).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Number of meaningful bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the number of meaningful bytes. The bytes between the old and
    /// the new length keep whatever they held (always initialized).
    ///
    /// # Panics
    /// If `len > capacity()`.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.cap,
            "IoBuf::set_len({len}) beyond capacity {}",
            self.cap
        );
        self.len = len;
    }

    /// The first `len()` bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `cap >= len` initialized bytes owned by
        // `self`, and the shared borrow of `self` prevents mutation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The first `len()` bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; the exclusive borrow of `self` makes
        // this the only live reference to the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The whole capacity, mutably (independent of `len()`), e.g. to fill a
    /// buffer before calling [`IoBuf::set_len`].
    pub fn as_mut_capacity(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is valid for `cap` initialized bytes owned by `self`;
        // the exclusive borrow makes this the only live reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    /// Start of the allocation (aligned to [`IO_ALIGN`]).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Start of the allocation, for writing (e.g. by the kernel).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The chunk the buffer was carved from, if a chunked pool's.
    pub fn chunk(&self) -> Option<&Chunk> {
        self.home.as_ref()
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        match self.home.take() {
            // Carved from a chunk: never freed alone; its place goes back
            // to the chunk for the pool to reuse, and the chunk's memory
            // lives while this reference or any other does.
            Some(c) => c.give_back(self.ptr, self.cap),
            // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly this
            // layout (the capacity never changes) and is freed only here.
            None => unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) },
        }
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for IoBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoBuf")
            .field("len", &self.len)
            .field("capacity", &self.cap)
            .field("ptr", &self.ptr)
            .finish()
    }
}

/// Smallest pooled size class (4 KiB).
const MIN_CLASS_SHIFT: u32 = 12;
/// Largest pooled size class (4 MiB).
const MAX_CLASS_SHIFT: u32 = 22;
const CLASSES: usize = (MAX_CLASS_SHIFT - MIN_CLASS_SHIFT + 1) as usize;
/// Default bytes cached per size class (the count limit is derived from it).
const DEFAULT_CLASS_BUDGET: usize = 4 << 20;
/// Default bounds on the number of cached buffers per class.
const DEFAULT_MIN_PER_CLASS: usize = 2;
const DEFAULT_MAX_PER_CLASS: usize = 256;

/// A per-thread pool of [`IoBuf`]s by power-of-two size class, from 4 KiB
/// to [`BufPool::MAX_POOLED`].
///
/// Not `Sync` and lock-free by construction: each event-loop thread owns its
/// own pool. Each class caches a bounded number of buffers (by default
/// about 4 MiB worth, between 2 and 256 buffers), so memory held by the pool
/// is bounded (about 43 MiB worst case with the defaults); buffers beyond
/// the bound, or larger than the largest class, are simply freed by
/// [`BufPool::put`].
///
/// Recycled buffers keep their old contents: callers must fill (or read
/// into) `buf[..len]` before use.
///
/// A chunked pool ([`BufPool::chunked`]) carves buffers from chunks it
/// keeps (see [`Chunk`]) up to a bound, so that their memory can stay
/// registered with an RDMA device; its carved buffers are always kept
/// (their memory is bounded by the chunks), and buffers it cannot carve
/// come from the allocator as in a plain pool.
pub struct BufPool {
    classes: [Vec<IoBuf>; CLASSES],
    limits: [usize; CLASSES],
    chunked: Option<Box<Chunked>>,
    _not_sync: PhantomData<Cell<()>>,
}

/// A chunked pool's chunks.
struct Chunked {
    owner: u64,
    chunk_bytes: usize,
    max_chunks: usize,
    chunks: Vec<Chunk>,
    /// Bytes carved from the last chunk.
    bump: usize,
    /// Reclaimed places, reused across reclaims.
    scratch: Vec<(usize, usize)>,
}

impl Chunked {
    /// A buffer of `size` bytes (a class size) from the last chunk's
    /// uncarved tail, from buffers dropped outside the pool (which go to
    /// their class lists), or from a new chunk; None once the bound is
    /// reached and nothing fits.
    fn carve(&mut self, size: usize, classes: &mut [Vec<IoBuf>; CLASSES]) -> Option<IoBuf> {
        if let Some(b) = self.carve_tail(size) {
            return Some(b);
        }
        for c in &self.chunks {
            c.take_returned(&mut self.scratch);
            for (off, cap) in self.scratch.drain(..) {
                if let Some(class) = class_of_capacity(cap) {
                    classes[class].push(IoBuf::carved(c, off, cap));
                }
            }
        }
        if let Some(b) = class_of_capacity(size).and_then(|k| classes[k].pop()) {
            return Some(b);
        }
        if self.chunks.len() < self.max_chunks && size <= self.chunk_bytes {
            self.chunks.push(Chunk::new(self.chunk_bytes, self.owner));
            self.bump = 0;
            return self.carve_tail(size);
        }
        None
    }

    fn carve_tail(&mut self, size: usize) -> Option<IoBuf> {
        let c = self.chunks.last()?;
        if c.len() - self.bump < size {
            return None;
        }
        let b = IoBuf::carved(c, self.bump, size);
        self.bump += size;
        Some(b)
    }
}

impl IoBuf {
    /// The buffer at `off` of chunk `c`, `cap` bytes (handed out once).
    fn carved(c: &Chunk, off: usize, cap: usize) -> IoBuf {
        IoBuf {
            ptr: c.ptr_at(off),
            cap,
            len: 0,
            home: Some(c.clone()),
        }
    }
}

impl BufPool {
    /// Largest capacity the pool caches (4 MiB).
    pub const MAX_POOLED: usize = 1 << MAX_CLASS_SHIFT;

    /// A pool with the default per-class bounds.
    pub fn new() -> Self {
        let limits = std::array::from_fn(|i| {
            (DEFAULT_CLASS_BUDGET / class_size(i))
                .clamp(DEFAULT_MIN_PER_CLASS, DEFAULT_MAX_PER_CLASS)
        });
        Self::with_limits(limits)
    }

    /// A pool caching at most `max` buffers in every size class.
    pub fn with_max_per_class(max: usize) -> Self {
        Self::with_limits([max; CLASSES])
    }

    fn with_limits(limits: [usize; CLASSES]) -> Self {
        BufPool {
            classes: std::array::from_fn(|_| Vec::new()),
            limits,
            chunked: None,
            _not_sync: PhantomData,
        }
    }

    /// A pool carving its buffers from chunks of `chunk_bytes` (rounded up
    /// to [`IO_ALIGN`]), at most `max_chunks` of them, the first allocated
    /// now; a request no chunk can serve (larger than a chunk, or the bound
    /// reached with nothing free in its class) gets a buffer from the
    /// allocator. Chunks stay allocated while the pool or any buffer carved
    /// from them lives.
    pub fn chunked(chunk_bytes: usize, max_chunks: usize) -> Self {
        let chunk_bytes = chunk_bytes.max(1).next_multiple_of(IO_ALIGN);
        let mut pool = Self::new();
        let owner = chunk::new_owner();
        let first = (max_chunks > 0).then(|| Chunk::new(chunk_bytes, owner));
        pool.chunked = Some(Box::new(Chunked {
            owner,
            chunk_bytes,
            max_chunks,
            chunks: first.into_iter().collect(),
            bump: 0,
            scratch: Vec::new(),
        }));
        pool
    }

    /// The chunks of a chunked pool (empty for a plain one), oldest first:
    /// a new chunk is appended before a buffer is carved from it.
    pub fn chunks(&self) -> &[Chunk] {
        self.chunked.as_ref().map_or(&[], |c| &c.chunks)
    }

    /// The chunk holding `[addr, addr + len)`, if any.
    pub fn chunk_of(&self, addr: usize, len: usize) -> Option<&Chunk> {
        self.chunks().iter().find(|c| c.contains(addr, len))
    }

    /// A buffer with `len() == min_len` and a power-of-two capacity of at
    /// least max(`min_len`, 4 KiB), recycled when possible. Requests larger
    /// than [`BufPool::MAX_POOLED`] get a fresh, unpooled allocation.
    pub fn get(&mut self, min_len: usize) -> IoBuf {
        let mut buf = match class_of_len(min_len) {
            Some(class) => match self.classes[class].pop() {
                Some(b) => b,
                None => self.fresh(class),
            },
            None => IoBuf::with_capacity(min_len),
        };
        buf.set_len(min_len);
        buf
    }

    /// A buffer of class `class` when its list is empty: carved when the
    /// pool is chunked and can, else from the allocator.
    #[cold]
    fn fresh(&mut self, class: usize) -> IoBuf {
        if let Some(ch) = self.chunked.as_deref_mut() {
            if let Some(b) = ch.carve(class_size(class), &mut self.classes) {
                return b;
            }
        }
        IoBuf::with_capacity(class_size(class))
    }

    /// Returns a buffer to the pool; it is freed instead when its capacity
    /// is not a pooled class or its class is full. A buffer carved from
    /// this pool's chunks is always kept; one carved from another pool's
    /// goes back to that pool's chunk.
    pub fn put(&mut self, buf: IoBuf) {
        if let Some(home) = &buf.home {
            let mine = self.chunked.as_ref().map(|c| c.owner) == Some(home.owner());
            if let (true, Some(class)) = (mine, class_of_capacity(buf.capacity())) {
                self.classes[class].push(buf);
            }
            return;
        }
        if let Some(class) = class_of_capacity(buf.capacity()) {
            let list = &mut self.classes[class];
            if list.len() < self.limits[class] {
                list.push(buf);
            }
        }
    }

    /// Number of buffers currently cached.
    pub fn cached(&self) -> usize {
        self.classes.iter().map(Vec::len).sum()
    }

    /// Bytes currently cached.
    pub fn cached_bytes(&self) -> usize {
        self.classes.iter().flatten().map(IoBuf::capacity).sum()
    }

    /// Frees every cached buffer.
    pub fn clear(&mut self) {
        self.classes.iter_mut().for_each(Vec::clear);
    }
}

impl Default for BufPool {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for BufPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufPool")
            .field("cached", &self.cached())
            .field("cached_bytes", &self.cached_bytes())
            .field("chunks", &self.chunks().len())
            .finish()
    }
}

fn class_size(class: usize) -> usize {
    1 << (MIN_CLASS_SHIFT as usize + class)
}

/// The class serving a request of `len` bytes, if it is pooled.
fn class_of_len(len: usize) -> Option<usize> {
    if len > BufPool::MAX_POOLED {
        return None;
    }
    let size = len.max(1 << MIN_CLASS_SHIFT).next_power_of_two();
    Some((size.trailing_zeros() - MIN_CLASS_SHIFT) as usize)
}

/// The class a buffer of capacity `cap` belongs to, if exactly one.
fn class_of_capacity(cap: usize) -> Option<usize> {
    let shift = cap.trailing_zeros();
    (cap.is_power_of_two() && (MIN_CLASS_SHIFT..=MAX_CLASS_SHIFT).contains(&shift))
        .then(|| (shift - MIN_CLASS_SHIFT) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn iobuf_alignment_len_and_zeroed() {
        assert_send::<IoBuf>();
        for cap in [0, 1, 511, 4096, 4097, 65536, 1 << 20] {
            let mut b = IoBuf::with_capacity(cap);
            assert_eq!(b.as_ptr() as usize % IO_ALIGN, 0);
            assert!(b.capacity() >= cap.max(1));
            assert_eq!(b.capacity() % IO_ALIGN, 0);
            assert_eq!(b.len(), 0);
            assert!(b.is_empty());
            assert!(b.as_mut_capacity().iter().all(|&x| x == 0));
            b.set_len(b.capacity());
            assert_eq!(b.as_slice().len(), b.capacity());
        }
    }

    #[test]
    fn iobuf_slices_follow_len() {
        let mut b = IoBuf::with_capacity(8192);
        b.as_mut_capacity()[..4].copy_from_slice(b"abcd");
        b.set_len(3);
        assert_eq!(b.as_slice(), b"abc");
        b.as_mut_slice()[0] = b'x';
        assert_eq!(&b[..], b"xbc");
        let c = IoBuf::from_slice(b"hello");
        assert_eq!(c.as_slice(), b"hello");
        assert_eq!(c.capacity(), IO_ALIGN);
    }

    #[test]
    #[should_panic(expected = "beyond capacity")]
    fn iobuf_set_len_beyond_capacity_panics() {
        IoBuf::with_capacity(4096).set_len(4097);
    }

    #[test]
    fn iobuf_debug_does_not_dump_bytes() {
        let b = IoBuf::from_slice(&[0xab; 64]);
        let s = format!("{b:?}");
        assert!(s.contains("len: 64"), "{s}");
        assert!(s.len() < 100, "{s}");
    }

    #[test]
    fn pool_classes() {
        assert_eq!(class_of_len(0), Some(0));
        assert_eq!(class_of_len(4096), Some(0));
        assert_eq!(class_of_len(4097), Some(1));
        assert_eq!(class_of_len(4 << 20), Some(CLASSES - 1));
        assert_eq!(class_of_len((4 << 20) + 1), None);
        assert_eq!(class_of_capacity(8192), Some(1));
        assert_eq!(class_of_capacity(12288), None);
        assert_eq!(class_of_capacity(8 << 20), None);
    }

    #[test]
    fn pool_zero_length_and_sizes() {
        let mut pool = BufPool::new();
        let b = pool.get(0);
        assert_eq!((b.len(), b.capacity()), (0, 4096));
        let b = pool.get(5000);
        assert_eq!((b.len(), b.capacity()), (5000, 8192));
        let big = pool.get((4 << 20) + 1);
        assert_eq!(big.len(), (4 << 20) + 1);
        pool.put(big);
        assert_eq!(pool.cached(), 0, "oversized buffers are not pooled");
    }

    #[test]
    fn pool_reuses_buffers() {
        let mut pool = BufPool::new();
        let b = pool.get(100);
        let p = b.as_ptr();
        pool.put(b);
        assert_eq!(pool.cached(), 1);
        let b = pool.get(4096);
        assert_eq!(b.as_ptr(), p, "same class reuses the cached buffer");
        assert_eq!(b.len(), 4096);
        assert_eq!(pool.cached(), 0);
        let other = pool.get(64 << 10);
        assert_ne!(other.as_ptr(), p);
    }

    #[test]
    fn pool_is_bounded() {
        let mut pool = BufPool::with_max_per_class(3);
        let bufs: Vec<_> = (0..10).map(|_| pool.get(4096)).collect();
        bufs.into_iter().for_each(|b| pool.put(b));
        assert_eq!(pool.cached(), 3);
        assert_eq!(pool.cached_bytes(), 3 * 4096);

        let mut pool = BufPool::new();
        let bufs: Vec<_> = (0..100).map(|_| pool.get(4 << 20)).collect();
        bufs.into_iter().for_each(|b| pool.put(b));
        assert!(pool.cached_bytes() <= 16 << 20, "{pool:?}");
        pool.clear();
        assert_eq!(pool.cached(), 0);
    }

    /// A chunked pool of one 64 KiB chunk (miri-sized), at most `n` chunks.
    fn small(n: usize) -> BufPool {
        BufPool::chunked(64 << 10, n)
    }

    #[test]
    fn chunked_carves_within_its_chunks() {
        let mut pool = small(2);
        assert_eq!(pool.chunks().len(), 1, "the first chunk exists at once");
        let c = pool.chunks()[0].clone();
        assert_eq!((c.len(), c.addr() % IO_ALIGN), (64 << 10, 0));
        let bufs: Vec<_> = [100, 4096, 8192, 5000].map(|n| pool.get(n)).into();
        let mut spans: Vec<_> = bufs
            .iter()
            .map(|b| (b.as_ptr() as usize, b.capacity()))
            .collect();
        for (b, &(a, cap)) in bufs.iter().zip(&spans) {
            assert!(c.contains(a, cap), "{b:?} in {c:?}");
            assert_eq!(b.chunk().map(Chunk::addr), Some(c.addr()));
            assert_eq!(pool.chunk_of(a, b.len()).map(Chunk::addr), Some(c.addr()));
        }
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "no overlap: {spans:?}");
        }
        assert!(pool.chunk_of(c.addr() + c.len() - 10, 20).is_none());
        assert!(BufPool::new().chunks().is_empty());
        assert!(BufPool::new().get(4096).chunk().is_none());
    }

    #[test]
    fn chunked_recycles_and_grows_to_its_bound() {
        let mut pool = small(2);
        let b = pool.get(4096);
        let p = b.as_ptr();
        pool.put(b);
        assert_eq!(pool.get(4096).as_ptr(), p, "a put buffer is reused");
        // Two chunks of 64 KiB hold eight 16 KiB buffers; one is out above.
        let bufs: Vec<_> = (0..8).map(|_| pool.get(16 << 10)).collect();
        assert_eq!(pool.chunks().len(), 2, "grown on demand");
        let carved = bufs.iter().filter(|b| b.chunk().is_some()).count();
        assert_eq!(carved, 7, "the 4 KiB buffer took the first chunk's head");
        assert!(
            bufs.iter().any(|b| b.chunk().is_none()),
            "beyond the bound: the allocator"
        );
        assert!(pool.get(128 << 10).chunk().is_none(), "larger than a chunk");
        for b in bufs {
            pool.put(b);
        }
        assert_eq!(pool.chunks().len(), 2, "never more than the bound");
        // Carved buffers are kept whatever the class limit.
        let mut pool = BufPool::chunked(64 << 10, 1);
        pool.limits = [1; CLASSES];
        let bufs: Vec<_> = (0..4).map(|_| pool.get(4096)).collect();
        bufs.into_iter().for_each(|b| pool.put(b));
        assert_eq!(pool.cached(), 4);
    }

    #[test]
    fn chunked_buffer_dropped_on_another_thread_comes_back() {
        let mut pool = small(1);
        let bufs: Vec<_> = (0..16).map(|_| pool.get(4096)).collect();
        let mut addrs: Vec<_> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
        std::thread::spawn(move || drop(bufs))
            .join()
            .expect("thread");
        // The chunk is full: the next buffers are the dropped ones, each
        // handed out once.
        let again: Vec<_> = (0..16).map(|_| pool.get(4096)).collect();
        assert!(again.iter().all(|b| b.chunk().is_some()));
        let mut got: Vec<_> = again.iter().map(|b| b.as_ptr() as usize).collect();
        addrs.sort();
        got.sort();
        assert_eq!(addrs, got);
        assert!(pool.get(4096).chunk().is_none(), "each place once");
    }

    #[test]
    fn chunked_buffer_outlives_its_pool() {
        let mut pool = small(1);
        let mut b = pool.get(4096);
        b.as_mut_slice().fill(0x5a);
        let c = pool.chunks()[0].clone();
        assert_eq!(c.refs(), 3, "pool, buffer, this handle");
        drop(pool);
        assert_eq!(c.refs(), 2);
        let t = std::thread::spawn(move || {
            assert!(b.iter().all(|&x| x == 0x5a), "memory still valid");
            drop(b);
        });
        t.join().expect("thread");
        assert_eq!(c.refs(), 1, "only this handle keeps the chunk");
        drop(c); // frees the chunk (miri checks for leaks and double frees)
    }

    #[test]
    fn chunked_buffer_put_into_another_pool_goes_home() {
        let mut a = small(1);
        let mut b = small(1);
        let x = a.get(4096);
        let p = x.as_ptr();
        b.put(x);
        assert_eq!(b.cached(), 0, "not kept by a foreign pool");
        let _fill: Vec<_> = (1..16).map(|_| a.get(4096)).collect();
        assert_eq!(a.get(4096).as_ptr(), p, "back in its own chunk");
        let mut plain = BufPool::new();
        let y = b.get(8192);
        assert!(y.chunk().is_some());
        plain.put(y);
        assert_eq!(plain.cached(), 0, "nor by a plain pool");
        a.clear();
    }
}
