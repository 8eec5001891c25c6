//! RAM backend: a lazily committed anonymous mapping.
//!
//! The namespace is one private anonymous `mmap` with `MAP_NORESERVE` and
//! `MADV_HUGEPAGE`: pages (2 MiB ones where transparent huge pages are
//! available) are committed on first write, never-written ranges read back as
//! zeroes without using memory, and Deallocate / Write Zeroes give whole
//! pages back with `madvise(MADV_DONTNEED)`. Every request completes inside
//! `submit` (a plain memory copy).
//!
//! [`open_ram_committed`] also commits the whole mapping before returning
//! (`MADV_POPULATE_WRITE`, which faults pages in without changing their
//! contents): first writes then find their pages present instead of faulting
//! (and zeroing a 2 MiB page) on the event-loop thread, as SPDK's malloc
//! bdev, zeroed at creation, never does. 1 GiB takes about 0.2 s.

use crate::check::{aligned, dealloc_range, einval, Geometry};
use crate::sync_queue::{SyncEngine, SyncQueue};
use crate::{Backend, BackendQueue, IoBuf, IoOp, SharedBackend};
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

/// Opens a RAM namespace of `size_bytes` with `block_size`-byte blocks.
///
/// `size_bytes` must be a non-zero multiple of `block_size`, which must be
/// 512 or 4096 (`InvalidInput` otherwise). Memory is committed lazily.
pub fn open_ram(size_bytes: u64, block_size: u32) -> io::Result<SharedBackend> {
    let map = checked_mapping(size_bytes, block_size)?;
    tracing::debug!(size_bytes, block_size, "opened RAM backend");
    Ok(Arc::new(RamBackend {
        map: Arc::new(map),
        block_size,
    }))
}

/// [`open_ram`], with every page committed before it returns (see the
/// module note). On a kernel without `MADV_POPULATE_WRITE` (before 5.14)
/// memory stays lazily committed.
pub fn open_ram_committed(size_bytes: u64, block_size: u32) -> io::Result<SharedBackend> {
    let map = checked_mapping(size_bytes, block_size)?;
    match map.populate(0, map.len) {
        Ok(()) => tracing::debug!(size_bytes, block_size, "opened RAM backend, committed"),
        Err(e) => tracing::debug!("RAM namespace stays lazily committed: {e}"),
    }
    Ok(Arc::new(RamBackend {
        map: Arc::new(map),
        block_size,
    }))
}

/// A lazily committed mapping of `size_bytes`, after checking the geometry.
fn checked_mapping(size_bytes: u64, block_size: u32) -> io::Result<Mapping> {
    validate_geometry(size_bytes, block_size)?;
    let len =
        usize::try_from(size_bytes).map_err(|_| invalid("RAM size exceeds the address space"))?;
    Mapping::new(len)
}

/// Checks the size/block size pair shared by the RAM and null backends.
pub(crate) fn validate_geometry(size_bytes: u64, block_size: u32) -> io::Result<()> {
    if block_size != 512 && block_size != 4096 {
        return Err(invalid("block size must be 512 or 4096"));
    }
    if size_bytes == 0 || !aligned(size_bytes, u64::from(block_size)) {
        return Err(invalid(
            "size must be a non-zero multiple of the block size",
        ));
    }
    Ok(())
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

struct RamBackend {
    map: Arc<Mapping>,
    block_size: u32,
}

impl Backend for RamBackend {
    fn kind(&self) -> &'static str {
        "ram"
    }
    fn capacity(&self) -> u64 {
        self.map.len as u64
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn volatile_write_cache(&self) -> bool {
        false
    }
    fn open_queue(&self, depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        let engine = RamEngine {
            map: Arc::clone(&self.map),
            block_size: self.block_size,
        };
        Ok(Box::new(SyncQueue::new(engine, depth)))
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
}

/// One queue's handle on the shared mapping.
struct RamEngine {
    map: Arc<Mapping>,
    block_size: u32,
}

impl SyncEngine for RamEngine {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.map.len as u64,
            block_size: self.block_size,
            read_only: false,
        }
    }

    fn execute(&self, op: IoOp, buf: &mut IoBuf) -> io::Result<()> {
        match op {
            IoOp::Read { offset, len } => self
                .map
                .read(offset as usize, &mut buf.as_mut_slice()[..len as usize]),
            IoOp::Write { offset, len, .. } => self
                .map
                .write(offset as usize, &buf.as_slice()[..len as usize]),
            // Memory is as durable as it gets for the lifetime of the process.
            IoOp::Flush => Ok(()),
            IoOp::WriteZeroes { offset, len, .. } => self.map.zero(offset as usize, len as usize),
            IoOp::Deallocate { ranges } => (0..ranges).try_for_each(|i| {
                let (offset, len) = dealloc_range(buf, i);
                self.map.zero(offset as usize, len as usize)
            }),
            IoOp::CompareAndWrite { .. } => Err(crate::check::unsupported()),
        }
    }
}

/// An anonymous private mapping of `len` bytes, unmapped on drop.
///
/// All accesses go through raw-pointer copies after a bounds check; no Rust
/// reference to the mapped memory is ever created.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
    page: usize,
}

// SAFETY: the mapping is plain bytes with no validity invariant, owned by
// this struct for its whole life. Several queues (threads) copy into and out
// of it concurrently through raw pointers only (`ptr::copy_nonoverlapping`,
// `ptr::write_bytes`, `madvise`), never through references, so no `&`/`&mut`
// aliasing rule is involved. Overlapping concurrent requests race on the
// bytes exactly like concurrent DMA into an SSD's media: the result is torn
// data, which NVMe allows (it does not order overlapping commands), and the
// target never relies on anything else. This is the same contract as a
// shared-memory mapping between processes.
unsafe impl Send for Mapping {}
// SAFETY: see `Send` above; every method takes `&self` and only performs
// bounds-checked raw copies.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh anonymous mapping at an address of the kernel's
        // choosing; no existing memory is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Transparent huge pages where the kernel has them: random 4 KiB
        // reads over a large namespace otherwise miss the TLB on nearly
        // every copy. Advice only; failing it changes nothing.
        // SAFETY: advice on the mapping just created, covering exactly it.
        let _ = unsafe { libc::madvise(raw, len, libc::MADV_HUGEPAGE) };
        let base = NonNull::new(raw.cast::<u8>()).ok_or_else(einval)?;
        Ok(Mapping {
            base,
            len,
            page: page_size(),
        })
    }

    /// Pointer to byte `offset`, after checking `offset..offset+len` fits
    /// (requests are validated before, so this is a second line of defence).
    fn at(&self, offset: usize, len: usize) -> io::Result<*mut u8> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => return Err(einval()),
        }
        // SAFETY: `offset <= self.len`, so the result stays inside (or one
        // past the end of) the mapping.
        Ok(unsafe { self.base.as_ptr().add(offset) })
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> io::Result<()> {
        let src = self.at(offset, dst.len())?;
        // SAFETY: `src` is valid for `dst.len()` bytes (checked by `at`);
        // `dst` is a distinct heap buffer, so they cannot overlap. See the
        // `Send`/`Sync` impls for concurrent access.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> io::Result<()> {
        let dst = self.at(offset, src.len())?;
        // SAFETY: as in `read`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Makes `offset..offset+len` read back as zeroes, returning whole pages
    /// to the kernel and clearing the partial pages at both edges.
    fn zero(&self, offset: usize, len: usize) -> io::Result<()> {
        let end = offset.checked_add(len).ok_or_else(einval)?;
        let first_page = offset.next_multiple_of(self.page).min(end);
        let last_page = (end / self.page * self.page).max(first_page);
        self.fill_zero(offset, first_page - offset)?;
        if last_page > first_page && self.discard(first_page, last_page - first_page).is_err() {
            self.fill_zero(first_page, last_page - first_page)?;
        }
        self.fill_zero(last_page, end - last_page)
    }

    fn fill_zero(&self, offset: usize, len: usize) -> io::Result<()> {
        let dst = self.at(offset, len)?;
        // SAFETY: `dst` is valid for `len` bytes (checked by `at`).
        unsafe { std::ptr::write_bytes(dst, 0, len) };
        Ok(())
    }

    /// Faults in the pages of `offset..offset+len` for writing without
    /// changing their contents (MADV_POPULATE_WRITE, Linux 5.14): populating
    /// reads and writes no byte, so even a racing write or discard keeps its
    /// effect.
    fn populate(&self, offset: usize, len: usize) -> io::Result<()> {
        self.advise(offset, len, libc::MADV_POPULATE_WRITE)
    }

    /// Drops the pages of a page-aligned range: a private anonymous mapping
    /// reads back zero-filled pages afterwards (MADV_DONTNEED only replaces
    /// the contents with zero pages, which every reader tolerates: no
    /// references into the mapping exist).
    fn discard(&self, offset: usize, len: usize) -> io::Result<()> {
        self.advise(offset, len, libc::MADV_DONTNEED)
    }

    /// `madvise(advice)` on a page-aligned range of the mapping.
    fn advise(&self, offset: usize, len: usize, advice: libc::c_int) -> io::Result<()> {
        let addr = self.at(offset, len)?;
        // SAFETY: a range inside our own mapping (checked by `at`; callers
        // pass page-aligned ranges); the two advices used change no byte a
        // reader could not already see (see `populate` and `discard`).
        let rc = unsafe { libc::madvise(addr.cast(), len, advice) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `new`; every queue
        // holds an `Arc<Mapping>`, so nothing can access it any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::dealloc_buf;
    use crate::test_util::{pattern, run_one};

    #[test]
    fn rejects_bad_geometry() {
        for (size, bs) in [(0, 512), (1000, 512), (4096, 1024), (512, 4096)] {
            let err = open_ram(size, bs).err().map(|e| e.kind());
            assert_eq!(err, Some(io::ErrorKind::InvalidInput), "{size}/{bs}");
        }
    }

    #[test]
    fn properties() {
        let b = open_ram(1 << 20, 4096).unwrap();
        assert_eq!(
            (b.kind(), b.capacity(), b.block_size()),
            ("ram", 1 << 20, 4096)
        );
        assert!(!b.volatile_write_cache());
        assert!(b.sync_all().is_ok());
        let q = b.open_queue(8).unwrap();
        assert!(q.notify_fd().is_none());
    }

    #[test]
    fn round_trip_at_various_offsets() {
        let b = open_ram(4 << 20, 512).unwrap();
        let mut q = b.open_queue(16).unwrap();
        for (i, (offset, len)) in [
            (0, 512),
            (512, 4096),
            (8192 - 512, 1024),
            ((4 << 20) - 65536, 65536),
        ]
        .into_iter()
        .enumerate()
        {
            let data = pattern(len, i as u8);
            let op = IoOp::Write {
                offset,
                len: len as u32,
                fua: i % 2 == 0,
            };
            run_one(&mut *q, op, IoBuf::from_slice(&data)).unwrap();
            let back = run_one(
                &mut *q,
                IoOp::Read {
                    offset,
                    len: len as u32,
                },
                IoBuf::with_capacity(len),
            )
            .unwrap();
            assert_eq!(back.as_slice(), &data[..], "offset {offset}");
        }
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn out_of_range_is_an_error() {
        let b = open_ram(1 << 20, 512).unwrap();
        let mut q = b.open_queue(4).unwrap();
        let op = IoOp::Read {
            offset: 1 << 20,
            len: 512,
        };
        let err = run_one(&mut *q, op, IoBuf::with_capacity(512)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        let op = IoOp::WriteZeroes {
            offset: 512,
            len: 1 << 20,
            fua: false,
        };
        assert!(run_one(&mut *q, op, IoBuf::with_capacity(0)).is_err());
    }

    /// Resident pages of the mapping behind `b` (via mincore), exact and
    /// unaffected by other tests running in the same process.
    fn resident_pages(map: &Mapping) -> usize {
        let pages = map.len.div_ceil(map.page);
        let mut vec = vec![0u8; pages];
        // SAFETY: `base..base+len` is our mapping; `vec` has one byte per page.
        let rc = unsafe { libc::mincore(map.base.as_ptr().cast(), map.len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        vec.iter().filter(|&&v| v & 1 != 0).count()
    }

    fn rss_bytes() -> Option<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * page_size() as u64)
    }

    #[test]
    fn memory_is_committed_lazily() {
        let rss_before = rss_bytes();
        let map = Arc::new(Mapping::new(1 << 30).unwrap());
        let engine = RamEngine {
            map: Arc::clone(&map),
            block_size: 4096,
        };
        let mut q = SyncQueue::new(engine, 4);
        let op = IoOp::Write {
            offset: 512 << 20,
            len: 4096,
            fua: false,
        };
        run_one(&mut q, op, IoBuf::from_slice(&[7; 4096])).unwrap();
        let read = IoOp::Read {
            offset: 0,
            len: 4096,
        };
        let back = run_one(&mut q, read, IoBuf::with_capacity(4096)).unwrap();
        assert!(back.iter().all(|&x| x == 0));
        // The write commits one page and the read maps the zero page: 4 KiB
        // each, or 2 MiB each where transparent huge pages are on
        // (MADV_HUGEPAGE; mincore counts the huge zero page as resident).
        let huge = (2 << 20) / page_size();
        assert!(
            resident_pages(&map) <= 2 * huge + 4,
            "{} pages resident",
            resident_pages(&map)
        );
        // Other tests allocate concurrently: only rule out an eager 1 GiB commit.
        if let (Some(before), Some(after)) = (rss_before, rss_bytes()) {
            assert!(
                after.saturating_sub(before) < 256 << 20,
                "{before} -> {after}"
            );
        }
    }

    #[test]
    fn committing_keeps_contents_and_makes_every_page_resident() {
        let len = 8 << 20;
        let map = Mapping::new(len).unwrap();
        map.write(4096 * 3 + 17, &[9; 100]).unwrap();
        map.populate(0, len).unwrap();
        assert_eq!(resident_pages(&map), len / page_size(), "all committed");
        let mut back = [0u8; 102];
        map.read(4096 * 3 + 16, &mut back).unwrap();
        assert_eq!(back[0], 0);
        assert!(back[1..101].iter().all(|&x| x == 9));
        assert_eq!(back[101], 0);
        let b = open_ram_committed(len as u64, 4096).unwrap();
        assert_eq!(b.capacity(), len as u64);
    }

    #[test]
    fn deallocate_and_write_zeroes_free_memory_and_read_zeroes() {
        let map = Arc::new(Mapping::new(16 << 20).unwrap());
        let engine = RamEngine {
            map: Arc::clone(&map),
            block_size: 512,
        };
        let mut q = SyncQueue::new(engine, 4);
        let len = 8 << 20;
        let write = IoOp::Write {
            offset: 0,
            len,
            fua: false,
        };
        run_one(&mut q, write, IoBuf::from_slice(&pattern(len as usize, 3))).unwrap();
        let before = resident_pages(&map);
        assert!(before >= (8 << 20) / map.page, "{before}");

        // Deallocate [512, 4 MiB - 512) and zero [4 MiB + 1024, 8 MiB):
        // unaligned edges are cleared by hand, whole pages given back.
        let dealloc = dealloc_buf(&[(512, (4 << 20) - 1024), (0, 0)]);
        run_one(&mut q, IoOp::Deallocate { ranges: 2 }, dealloc).unwrap();
        let zeroes = IoOp::WriteZeroes {
            offset: (4 << 20) + 1024,
            len: (4 << 20) - 1024,
            fua: true,
        };
        run_one(&mut q, zeroes, IoBuf::with_capacity(0)).unwrap();
        // The write commits one page and the read maps the zero page: 4 KiB
        // each, or 2 MiB each where transparent huge pages are on
        // (MADV_HUGEPAGE; mincore counts the huge zero page as resident).
        let huge = (2 << 20) / page_size();
        assert!(
            resident_pages(&map) <= 2 * huge + 4,
            "{} pages resident",
            resident_pages(&map)
        );

        let read = IoOp::Read { offset: 0, len };
        let back = run_one(&mut q, read, IoBuf::with_capacity(len as usize)).unwrap();
        let expect = pattern(len as usize, 3);
        for (i, (&got, &want)) in back.iter().zip(&expect).enumerate() {
            let kept = i < 512 || ((4 << 20) - 512..(4 << 20) + 1024).contains(&i);
            assert_eq!(got, if kept { want } else { 0 }, "byte {i}");
        }
    }
}
