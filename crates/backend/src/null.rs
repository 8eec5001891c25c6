//! Null backend: reads return zeroes, writes are discarded.
//!
//! Useful to measure the network and protocol path without any storage
//! cost. Requests are still validated like on a real backend, and every
//! request completes inside `submit`.

use crate::check::Geometry;
use crate::ram::validate_geometry;
use crate::sync_queue::{SyncEngine, SyncQueue};
use crate::{Backend, BackendQueue, IoBuf, IoOp, SharedBackend};
use std::io;
use std::sync::Arc;

/// Opens a null namespace of `size_bytes` with `block_size`-byte blocks
/// (same validation as [`crate::open_ram`]).
pub fn open_null(size_bytes: u64, block_size: u32) -> io::Result<SharedBackend> {
    validate_geometry(size_bytes, block_size)?;
    Ok(Arc::new(NullBackend(Geometry {
        capacity: size_bytes,
        block_size,
        read_only: false,
    })))
}

struct NullBackend(Geometry);

impl Backend for NullBackend {
    fn kind(&self) -> &'static str {
        "null"
    }
    fn capacity(&self) -> u64 {
        self.0.capacity
    }
    fn block_size(&self) -> u32 {
        self.0.block_size
    }
    fn volatile_write_cache(&self) -> bool {
        false
    }
    fn open_queue(&self, depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        Ok(Box::new(SyncQueue::new(NullEngine(self.0), depth)))
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
}

struct NullEngine(Geometry);

impl SyncEngine for NullEngine {
    fn geometry(&self) -> Geometry {
        self.0
    }

    fn execute(&self, op: IoOp, buf: &mut IoBuf) -> io::Result<()> {
        if let IoOp::Read { len, .. } = op {
            buf.as_mut_slice()[..len as usize].fill(0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::dealloc_buf;
    use crate::test_util::run_one;

    #[test]
    fn reads_zeroes_and_discards_writes() {
        let b = open_null(1 << 30, 4096).unwrap();
        assert_eq!(
            (b.kind(), b.capacity(), b.block_size()),
            ("null", 1 << 30, 4096)
        );
        assert!(!b.volatile_write_cache());
        let mut q = b.open_queue(4).unwrap();
        assert!(q.notify_fd().is_none());
        let write = IoOp::Write {
            offset: 0,
            len: 8192,
            fua: true,
        };
        run_one(&mut *q, write, IoBuf::from_slice(&[0xff; 8192])).unwrap();
        let mut dirty = IoBuf::with_capacity(8192);
        dirty.as_mut_capacity().fill(0xee);
        let back = run_one(
            &mut *q,
            IoOp::Read {
                offset: 0,
                len: 8192,
            },
            dirty,
        )
        .unwrap();
        assert_eq!(back.len(), 8192);
        assert!(back.iter().all(|&x| x == 0));
        run_one(&mut *q, IoOp::Flush, IoBuf::with_capacity(0)).unwrap();
        let d = dealloc_buf(&[(0, 4096)]);
        run_one(&mut *q, IoOp::Deallocate { ranges: 1 }, d).unwrap();
        let zeroes = IoOp::WriteZeroes {
            offset: 0,
            len: 1 << 30,
            fua: false,
        };
        run_one(&mut *q, zeroes, IoBuf::with_capacity(0)).unwrap();
    }

    #[test]
    fn validates_like_a_real_backend() {
        assert!(open_null(0, 512).is_err());
        let b = open_null(1 << 20, 512).unwrap();
        let mut q = b.open_queue(1).unwrap();
        let read = IoOp::Read {
            offset: 1 << 20,
            len: 512,
        };
        assert!(run_one(&mut *q, read, IoBuf::with_capacity(512)).is_err());
    }
}
