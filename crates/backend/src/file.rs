//! File and block-device backend.
//!
//! A regular file (optionally created or extended to a given size) or a
//! block device, opened with `O_DIRECT` when the file system supports it.
//! Each queue is its own io_uring ring ([`uring`]); when io_uring cannot be
//! set up, queues fall back to blocking `pread`/`pwrite` ([`blocking`]) run
//! on a helper thread per queue ([`pool`]), never on the caller's thread.

mod blocking;
mod pool;
mod slab;
pub(crate) mod sys;
mod uring;
mod zero;

#[cfg(test)]
mod tests;

use crate::check::Geometry;
use crate::sync_queue::SyncQueue;
use crate::{Backend, BackendQueue, IoBuf, SharedBackend, IO_ALIGN};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use zero::ZeroSupport;

/// Whether to bypass the page cache with `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectMode {
    /// Use `O_DIRECT` when the file system accepts it (open and an aligned
    /// probe read both succeed), else buffered I/O.
    #[default]
    Auto,
    /// Require `O_DIRECT`; opening fails where it is not supported.
    Always,
    /// Always go through the page cache.
    Never,
}

/// How [`open_file`] opens its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Logical block size exposed to hosts: 512 or 4096.
    pub block_size: u32,
    /// `O_DIRECT` policy.
    pub direct: DirectMode,
    /// For a regular file: create it, or extend it, to at least this many
    /// bytes. Ignored for block devices.
    pub create_size: Option<u64>,
    /// Open read-only; writes, Write Zeroes and Deallocate then fail with
    /// `EROFS`.
    pub read_only: bool,
}

impl Default for FileOptions {
    /// 512-byte blocks, [`DirectMode::Auto`], no creation, read-write.
    fn default() -> Self {
        FileOptions {
            block_size: 512,
            direct: DirectMode::Auto,
            create_size: None,
            read_only: false,
        }
    }
}

/// Opens a regular file or block device as a namespace.
///
/// The capacity is the file size (or device size, `BLKGETSIZE64`) rounded
/// down to the block size; it must hold at least one block. See
/// [`DirectMode`] for how `O_DIRECT` is chosen. Both kinds report a volatile
/// write cache, so hosts send Flush (fdatasync).
pub fn open_file(path: &Path, opts: &FileOptions) -> io::Result<SharedBackend> {
    Ok(Arc::new(FileBackend(open_inner(path, opts)?)))
}

fn open_inner(path: &Path, opts: &FileOptions) -> io::Result<Arc<FileInner>> {
    if opts.block_size != 512 && opts.block_size != 4096 {
        return Err(invalid("block size must be 512 or 4096".into()));
    }
    let is_block = prepare(path, opts)?;
    let bs = u64::from(opts.block_size);
    let capacity_of = |file: &File| -> io::Result<u64> {
        let size = if is_block {
            sys::block_device_size(file.as_raw_fd())?
        } else {
            file.metadata()?.len()
        };
        match size / bs * bs {
            0 => Err(invalid(format!(
                "{} is smaller than one {bs}-byte block",
                path.display()
            ))),
            capacity => Ok(capacity),
        }
    };
    let (file, direct) = choose_direct(
        opts.direct,
        |direct| open_data(path, opts.read_only, direct),
        |file| probe_direct(file, capacity_of(file)?, opts.block_size),
    )?;
    let capacity = capacity_of(&file)?;
    let kind = if is_block { "block" } else { "file" };
    tracing::info!(path = %path.display(), kind, capacity, block_size = opts.block_size, direct, "opened file backend");
    Ok(Arc::new(FileInner {
        file,
        path: path.to_owned(),
        kind,
        direct,
        geometry: Geometry {
            capacity,
            block_size: opts.block_size,
            read_only: opts.read_only,
        },
        zero: ZeroSupport::default(),
        fallback_logged: AtomicBool::new(false),
    }))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Checks what `path` is and applies `create_size`; returns true for a
/// block device.
fn prepare(path: &Path, opts: &FileOptions) -> io::Result<bool> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound && opts.create_size.is_some() => None,
        Err(e) => return Err(e),
    };
    if let Some(meta) = &meta {
        if meta.file_type().is_block_device() {
            return Ok(true);
        }
        if !meta.is_file() {
            let msg = format!("{} is not a regular file or block device", path.display());
            return Err(invalid(msg));
        }
    }
    let Some(want) = opts.create_size else {
        return Ok(false);
    };
    if meta.as_ref().is_some_and(|m| m.len() >= want) {
        return Ok(false);
    }
    if opts.read_only {
        let msg = format!(
            "{} is smaller than create_size and read-only",
            path.display()
        );
        return Err(invalid(msg));
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if file.metadata()?.len() < want {
        file.set_len(want)?;
        tracing::info!(path = %path.display(), size = want, "created/extended backing file");
    }
    Ok(false)
}

/// Opens with `open(direct)` according to `mode`, checking an `O_DIRECT`
/// descriptor with `probe`. With [`DirectMode::Auto`], `EINVAL` from either
/// (the file system or the device sector size does not allow `O_DIRECT` at
/// this block size) falls back to a buffered descriptor. Returns the
/// descriptor and whether it is `O_DIRECT`.
fn choose_direct<F>(
    mode: DirectMode,
    open: impl Fn(bool) -> io::Result<F>,
    probe: impl Fn(&F) -> io::Result<()>,
) -> io::Result<(F, bool)> {
    if mode == DirectMode::Never {
        return Ok((open(false)?, false));
    }
    let refused =
        |e: &io::Error| mode == DirectMode::Auto && e.raw_os_error() == Some(libc::EINVAL);
    match open(true) {
        Ok(file) => match probe(&file) {
            Ok(()) => Ok((file, true)),
            Err(e) if refused(&e) => {
                tracing::info!("O_DIRECT read refused; using buffered I/O");
                Ok((open(false)?, false))
            }
            Err(e) => Err(e),
        },
        Err(e) if refused(&e) => {
            tracing::info!("O_DIRECT open refused; using buffered I/O");
            Ok((open(false)?, false))
        }
        Err(e) => Err(e),
    }
}

/// Opens the descriptor used for I/O.
fn open_data(path: &Path, read_only: bool, direct: bool) -> io::Result<File> {
    let flags = if direct { libc::O_DIRECT } else { 0 };
    OpenOptions::new()
        .read(true)
        .write(!read_only)
        .custom_flags(flags)
        .open(path)
}

/// One aligned `block_size` read at a block-aligned, non-zero offset when
/// possible: `EINVAL` means this file system (or device sector size) cannot
/// do `O_DIRECT` at this block size.
fn probe_direct(file: &File, capacity: u64, block_size: u32) -> io::Result<()> {
    let bs = u64::from(block_size);
    let offset = if capacity >= 2 * bs { bs } else { 0 };
    let mut buf = IoBuf::with_capacity(IO_ALIGN.max(block_size as usize));
    buf.set_len(block_size as usize);
    sys::pread_exact(file.as_raw_fd(), buf.as_mut_slice(), offset)
}

/// State shared by a file backend and all its queues.
pub(crate) struct FileInner {
    file: File,
    path: PathBuf,
    kind: &'static str,
    direct: bool,
    geometry: Geometry,
    zero: ZeroSupport,
    fallback_logged: AtomicBool,
}

impl FileInner {
    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

struct FileBackend(Arc<FileInner>);

impl FileBackend {
    /// A queue on the blocking engine, whatever io_uring's availability: on
    /// a helper thread of its own, or (if no thread can be started) inline.
    fn blocking_queue(&self, depth: u32) -> Box<dyn BackendQueue> {
        let engine = blocking::BlockingEngine(Arc::clone(&self.0));
        match pool::PoolQueue::new(engine) {
            Ok(q) => Box::new(q),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a file I/O thread; blocking I/O runs inline");
                Box::new(SyncQueue::new(
                    blocking::BlockingEngine(Arc::clone(&self.0)),
                    depth,
                ))
            }
        }
    }
}

impl Backend for FileBackend {
    fn kind(&self) -> &'static str {
        self.0.kind
    }
    fn capacity(&self) -> u64 {
        self.0.geometry.capacity
    }
    fn block_size(&self) -> u32 {
        self.0.geometry.block_size
    }
    /// Always true: buffered writes sit in the page cache, and even with
    /// `O_DIRECT` a completed write may sit in the device's (or the host
    /// file system's) cache until fdatasync.
    fn volatile_write_cache(&self) -> bool {
        true
    }
    fn open_queue(&self, depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        match uring::UringQueue::new(Arc::clone(&self.0), depth) {
            Ok(queue) => Ok(Box::new(queue)),
            // Out of descriptors is no reason to leave io_uring: a helper
            // thread per queue would follow (and need descriptors too).
            Err(e) if crate::limits::is_exhausted(&e) => Err(e),
            Err(e) => {
                if !self.0.fallback_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(path = %self.0.path.display(), error = %e,
                        "io_uring unavailable; using pread/pwrite on a helper thread");
                }
                Ok(self.blocking_queue(depth))
            }
        }
    }
    fn sync_all(&self) -> io::Result<()> {
        sys::fdatasync(self.0.fd())
    }
}

impl std::fmt::Debug for FileInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileInner")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("direct", &self.direct)
            .field("geometry", &self.geometry)
            .finish()
    }
}
