//! How a file backend makes a range read back as zeroes.
//!
//! Deallocate and Write Zeroes both end in one of three methods, tried in
//! order until one works; a method the file (system) refuses is remembered
//! so later requests skip it:
//!
//! * Deallocate: punch a hole, else zero the range, else write zeroes.
//! * Write Zeroes: zero the range, else punch a hole, else write zeroes.
//!
//! On a block device `fallocate` maps to the block layer: `PUNCH_HOLE`
//! becomes a Write Zeroes/discard that guarantees zeroes (refused with
//! `EOPNOTSUPP` when the device cannot), and `ZERO_RANGE` zeroes with the
//! kernel's own fallback to writing zeroes. Either way the DLFEAT promise
//! (deallocated blocks read back as zeroes) holds.

use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes written per request by the [`ZeroMethod::Write`] fallback.
pub(crate) const ZERO_CHUNK: usize = 1 << 20;

/// One way of zeroing a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZeroMethod {
    /// `fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)`.
    ZeroRange,
    /// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`.
    PunchHole,
    /// Plain writes from a zeroed buffer, [`ZERO_CHUNK`] at a time.
    Write,
}

impl ZeroMethod {
    /// The `fallocate` mode, or `None` for [`ZeroMethod::Write`].
    pub(crate) fn fallocate_mode(self) -> Option<i32> {
        match self {
            ZeroMethod::ZeroRange => Some(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE),
            ZeroMethod::PunchHole => Some(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE),
            ZeroMethod::Write => None,
        }
    }
}

/// True when an `fallocate` error means "this mode is not available here"
/// (rather than an I/O error): the next method is tried. `EINVAL` is
/// included because requests are validated beforehand, so the kernel only
/// returns it for an unsupported mode (or an io_uring without the opcode).
pub(crate) fn is_unsupported(errno: i32) -> bool {
    matches!(
        errno,
        libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS | libc::ENOTTY
    )
}

/// Which `fallocate` modes a backend has found to be unsupported.
#[derive(Debug, Default)]
pub(crate) struct ZeroSupport {
    no_zero_range: AtomicBool,
    no_punch_hole: AtomicBool,
}

impl ZeroSupport {
    /// The method to start a range with.
    pub(crate) fn first(&self, dealloc: bool) -> ZeroMethod {
        let order = if dealloc {
            [ZeroMethod::PunchHole, ZeroMethod::ZeroRange]
        } else {
            [ZeroMethod::ZeroRange, ZeroMethod::PunchHole]
        };
        order
            .into_iter()
            .find(|&m| self.usable(m))
            .unwrap_or(ZeroMethod::Write)
    }

    /// Records that `failed` is unsupported and returns the method to try
    /// next.
    pub(crate) fn next(&self, dealloc: bool, failed: ZeroMethod) -> ZeroMethod {
        match failed {
            ZeroMethod::ZeroRange => self.no_zero_range.store(true, Ordering::Relaxed),
            ZeroMethod::PunchHole => self.no_punch_hole.store(true, Ordering::Relaxed),
            ZeroMethod::Write => return ZeroMethod::Write,
        }
        tracing::debug!(?failed, "fallocate mode unsupported; falling back");
        self.first(dealloc)
    }

    fn usable(&self, m: ZeroMethod) -> bool {
        match m {
            ZeroMethod::ZeroRange => !self.no_zero_range.load(Ordering::Relaxed),
            ZeroMethod::PunchHole => !self.no_punch_hole.load(Ordering::Relaxed),
            ZeroMethod::Write => true,
        }
    }

    /// Forces the plain-write fallback (tests).
    #[cfg(test)]
    pub(crate) fn disable_fallocate(&self) {
        self.no_zero_range.store(true, Ordering::Relaxed);
        self.no_punch_hole.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ZeroMethod::*;

    #[test]
    fn method_order_and_fallback() {
        let s = ZeroSupport::default();
        assert_eq!(s.first(true), PunchHole);
        assert_eq!(s.first(false), ZeroRange);
        assert_eq!(s.next(false, ZeroRange), PunchHole);
        assert_eq!(
            s.first(true),
            PunchHole,
            "dealloc no longer tries ZeroRange"
        );
        assert_eq!(s.next(true, PunchHole), Write);
        assert_eq!(s.first(false), Write);
        assert_eq!(s.next(false, Write), Write);
        assert!(PunchHole.fallocate_mode().is_some() && Write.fallocate_mode().is_none());
    }
}
