//! Thin, safe wrappers over the system calls the file backend needs.

use crate::check::einval;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// `_IOR(0x12, 114, size_t)`: size of a block device in bytes. Not exported
/// by `libc`; the direction bits differ on a few architectures.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: u32 = 0x4008_1272;
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: u32 = 0x8008_1272;

/// `EIO`, for unexpected end of file and zero-progress writes.
pub(crate) fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// `-1` → the thread's `errno`.
fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Retries `f` while it fails with `EINTR`.
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

fn off(offset: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(offset).map_err(|_| einval())
}

/// Reads exactly `buf.len()` bytes at `offset` (short reads continue; end of
/// file before that is `EIO`).
pub(crate) fn pread_exact(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let at = off(offset + done as u64)?;
        let n = retry(|| {
            // SAFETY: `rest` is valid for writes of `rest.len()` bytes.
            cvt_size(unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), at) })
        })?;
        if n == 0 {
            return Err(eio());
        }
        done += n;
    }
    Ok(())
}

/// Writes all of `buf` at `offset` (short writes continue).
pub(crate) fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        let at = off(offset + done as u64)?;
        // SAFETY: `rest` is valid for reads of `rest.len()` bytes.
        let n =
            retry(|| cvt_size(unsafe { libc::pwrite(fd, rest.as_ptr().cast(), rest.len(), at) }))?;
        if n == 0 {
            return Err(eio());
        }
        done += n;
    }
    Ok(())
}

fn cvt_size(n: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// `fdatasync(2)`.
pub(crate) fn fdatasync(fd: RawFd) -> io::Result<()> {
    // SAFETY: no memory is passed to the kernel.
    retry(|| cvt(unsafe { libc::fdatasync(fd) })).map(drop)
}

/// `fallocate(2)` with `mode` on `offset..offset+len`.
pub(crate) fn fallocate(fd: RawFd, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let (offset, len) = (off(offset)?, off(len)?);
    // SAFETY: no memory is passed to the kernel.
    retry(|| cvt(unsafe { libc::fallocate(fd, mode, offset, len) })).map(drop)
}

/// Size in bytes of the block device open on `fd` (`BLKGETSIZE64`).
pub(crate) fn block_device_size(fd: RawFd) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points
    // to a live local.
    cvt(unsafe { libc::ioctl(fd, BLKGETSIZE64 as libc::Ioctl, &mut size as *mut u64) })?;
    Ok(size)
}

/// A non-blocking, close-on-exec eventfd.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no memory is passed to the kernel.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Resets an eventfd's counter (nothing to do when it is already zero).
pub(crate) fn eventfd_clear(fd: RawFd) {
    let mut value: u64 = 0;
    // SAFETY: reads 8 bytes into a live local; EAGAIN (counter already 0)
    // is the only expected failure and needs no handling.
    unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
}

/// Makes an eventfd readable.
pub(crate) fn eventfd_signal(fd: RawFd) {
    let value: u64 = 1;
    // SAFETY: writes 8 bytes from a live local. It can only fail when the
    // counter would overflow, in which case the fd is readable anyway.
    unsafe { libc::write(fd, (&value as *const u64).cast(), 8) };
}
