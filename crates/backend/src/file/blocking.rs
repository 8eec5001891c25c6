//! Synchronous file engine (`pread`/`pwrite`), used when io_uring cannot be
//! set up (old kernels, seccomp sandboxes, `io_uring_disabled`).

use super::sys;
use super::zero::{is_unsupported, ZeroMethod, ZERO_CHUNK};
use super::FileInner;
use crate::check::{dealloc_range, Geometry};
use crate::sync_queue::SyncEngine;
use crate::{IoBuf, IoOp};
use std::io;
use std::sync::Arc;

/// Executes every request inside `submit` with blocking system calls.
pub(crate) struct BlockingEngine(pub(crate) Arc<FileInner>);

impl SyncEngine for BlockingEngine {
    fn geometry(&self) -> Geometry {
        self.0.geometry
    }

    fn execute(&self, op: IoOp, buf: &mut IoBuf) -> io::Result<()> {
        let fd = self.0.fd();
        match op {
            IoOp::Read { offset, len } => {
                sys::pread_exact(fd, &mut buf.as_mut_slice()[..len as usize], offset)
            }
            IoOp::Write { offset, len, fua } => {
                sys::pwrite_all(fd, &buf.as_slice()[..len as usize], offset)?;
                sync_if(fua, fd)
            }
            IoOp::Flush => sys::fdatasync(fd),
            IoOp::WriteZeroes { offset, len, fua } => {
                self.zero(offset, len, false)?;
                sync_if(fua, fd)
            }
            IoOp::Deallocate { ranges } => (0..ranges).try_for_each(|i| {
                let (offset, len) = dealloc_range(buf, i);
                self.zero(offset, len, true)
            }),
            IoOp::CompareAndWrite { .. } => Err(crate::check::unsupported()),
        }
    }
}

impl BlockingEngine {
    /// Makes `offset..offset+len` read back as zeroes (see `zero.rs`).
    fn zero(&self, offset: u64, len: u64, dealloc: bool) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let fd = self.0.fd();
        let mut method = self.0.zero.first(dealloc);
        while let Some(mode) = method.fallocate_mode() {
            match sys::fallocate(fd, mode, offset, len) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error().is_some_and(is_unsupported) => {
                    method = self.0.zero.next(dealloc, method);
                }
                Err(e) => return Err(e),
            }
        }
        debug_assert_eq!(method, ZeroMethod::Write);
        let mut zeroes = IoBuf::with_capacity(len.min(ZERO_CHUNK as u64) as usize);
        zeroes.set_len(zeroes.capacity());
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(zeroes.len() as u64) as usize;
            sys::pwrite_all(fd, &zeroes[..chunk], offset + done)?;
            done += chunk as u64;
        }
        Ok(())
    }
}

fn sync_if(fua: bool, fd: std::os::fd::RawFd) -> io::Result<()> {
    if fua {
        sys::fdatasync(fd)
    } else {
        Ok(())
    }
}
