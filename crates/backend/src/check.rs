//! Request validation shared by every engine.
//!
//! The NVMe controller checks requests before they reach a backend, so a
//! failure here is a caller bug: it is reported as `EINVAL` in the
//! completion (never a panic), or `EROFS` for a write to a read-only backend.

use crate::{IoBuf, IoOp};
use std::io;

/// Size of one `(offset, len)` entry in a Deallocate buffer.
pub(crate) const RANGE_ENTRY: usize = 16;

/// The error every refused request completes with.
pub(crate) fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

/// The error of an operation the storage does not offer
/// ([`IoOp::CompareAndWrite`] where [`crate::Backend::compare_and_write_unit`] is `None`).
pub(crate) fn unsupported() -> io::Error {
    io::Error::from_raw_os_error(libc::EOPNOTSUPP)
}

/// Size and block size a request is checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub capacity: u64,
    pub block_size: u32,
    pub read_only: bool,
}

impl Geometry {
    /// Checks `op` and `buf` against the namespace geometry.
    pub(crate) fn validate(&self, op: &IoOp, buf: &IoBuf) -> io::Result<()> {
        let writes = !matches!(op, IoOp::Read { .. } | IoOp::Flush);
        if writes && self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        match *op {
            IoOp::Read { offset, len } => {
                self.check_range(offset, len.into())?;
                ok_if(len as usize <= buf.capacity())
            }
            IoOp::Write { offset, len, .. } => {
                self.check_range(offset, len.into())?;
                ok_if(len as usize <= buf.len())
            }
            IoOp::Flush => Ok(()),
            IoOp::WriteZeroes { offset, len, .. } => self.check_range(offset, len),
            // Only storage that offers it checks it (`validate_compare_and_write`).
            IoOp::CompareAndWrite { .. } => Err(unsupported()),
            IoOp::Deallocate { ranges } => {
                let bytes = (ranges as usize).checked_mul(RANGE_ENTRY);
                ok_if(bytes.is_some_and(|b| b <= buf.len()))?;
                (0..ranges).try_for_each(|i| {
                    let (offset, len) = dealloc_range(buf, i);
                    self.check_range(offset, len)
                })
            }
        }
    }

    /// Checks an [`IoOp::CompareAndWrite`] for storage that offers it inside
    /// `unit` bytes: the range is a valid write that does not cross a
    /// multiple of `unit`, and `buf` holds both halves' data.
    pub(crate) fn validate_compare_and_write(
        &self,
        op: &IoOp,
        buf: &IoBuf,
        unit: u64,
    ) -> io::Result<()> {
        let IoOp::CompareAndWrite { offset, len, .. } = *op else {
            return self.validate(op, buf);
        };
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        let len = u64::from(len);
        self.check_range(offset, len)?;
        ok_if(len > 0 && offset % unit + len <= unit)?;
        ok_if(2 * len <= buf.len() as u64)
    }

    /// `offset..offset+len` is block aligned and inside the capacity.
    fn check_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let bs = u64::from(self.block_size);
        let end = offset.checked_add(len);
        ok_if(aligned(offset, bs) && aligned(len, bs) && end.is_some_and(|e| e <= self.capacity))
    }
}

/// `x` is a multiple of `bs`, a power of two (block sizes are 512 or 4096).
pub(crate) fn aligned(x: u64, bs: u64) -> bool {
    x & (bs - 1) == 0
}

fn ok_if(cond: bool) -> io::Result<()> {
    if cond {
        Ok(())
    } else {
        Err(einval())
    }
}

/// Range `i` of a Deallocate buffer (native-endian `(offset, len)` byte
/// pairs, as [`dealloc_buf`] builds them; the caller checked the buffer
/// length).
pub fn dealloc_range(buf: &IoBuf, i: u32) -> (u64, u64) {
    let at = i as usize * RANGE_ENTRY;
    let entry = &buf.as_slice()[at..at + RANGE_ENTRY];
    let mut word = [0u8; 8];
    word.copy_from_slice(&entry[..8]);
    let offset = u64::from_ne_bytes(word);
    word.copy_from_slice(&entry[8..]);
    (offset, u64::from_ne_bytes(word))
}

/// Builds a Deallocate buffer from `(offset, len)` byte ranges (a helper for
/// callers and tests).
pub fn dealloc_buf(ranges: &[(u64, u64)]) -> IoBuf {
    let mut buf = IoBuf::with_capacity(ranges.len() * RANGE_ENTRY);
    buf.set_len(ranges.len() * RANGE_ENTRY);
    for (chunk, (offset, len)) in buf.as_mut_slice().chunks_exact_mut(RANGE_ENTRY).zip(ranges) {
        chunk[..8].copy_from_slice(&offset.to_ne_bytes());
        chunk[8..].copy_from_slice(&len.to_ne_bytes());
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEO: Geometry = Geometry {
        capacity: 1 << 20,
        block_size: 512,
        read_only: false,
    };

    fn errno(r: io::Result<()>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    #[test]
    fn accepts_valid_requests() {
        let buf = IoBuf::with_capacity(4096);
        assert!(GEO
            .validate(
                &IoOp::Read {
                    offset: 512,
                    len: 4096
                },
                &buf
            )
            .is_ok());
        assert!(GEO.validate(&IoOp::Flush, &buf).is_ok());
        let op = IoOp::WriteZeroes {
            offset: 0,
            len: 1 << 20,
            fua: false,
        };
        assert!(GEO.validate(&op, &buf).is_ok());
        let d = dealloc_buf(&[(0, 512), ((1 << 20) - 512, 512)]);
        assert_eq!(dealloc_range(&d, 1), ((1 << 20) - 512, 512));
        assert!(GEO.validate(&IoOp::Deallocate { ranges: 2 }, &d).is_ok());
    }

    #[test]
    fn refuses_bad_requests() {
        let buf = IoBuf::with_capacity(4096);
        let einval = Some(libc::EINVAL);
        let read = |offset, len| GEO.validate(&IoOp::Read { offset, len }, &buf);
        assert_eq!(errno(read(100, 512)), einval, "misaligned offset");
        assert_eq!(errno(read(0, 100)), einval, "misaligned length");
        assert_eq!(errno(read(1 << 20, 512)), einval, "past the end");
        assert_eq!(errno(read(0, 8192)), einval, "buffer too small");
        let w = IoOp::Write {
            offset: 0,
            len: 512,
            fua: false,
        };
        assert_eq!(
            errno(GEO.validate(&w, &buf)),
            einval,
            "write beyond buf.len()"
        );
        let z = IoOp::WriteZeroes {
            offset: u64::MAX - 511,
            len: 1024,
            fua: false,
        };
        assert_eq!(errno(GEO.validate(&z, &buf)), einval, "overflow");
        let d = dealloc_buf(&[(0, 512)]);
        let two = IoOp::Deallocate { ranges: 2 };
        assert_eq!(errno(GEO.validate(&two, &d)), einval, "short range list");
        let ro = Geometry {
            read_only: true,
            ..GEO
        };
        assert_eq!(errno(ro.validate(&z, &buf)), Some(libc::EROFS));
    }
}
