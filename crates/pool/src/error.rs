//! Errors of pool and volume management.

use std::io;

/// What a management call on a pool or volume can fail with; the message
/// names the pool, volume or field.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("volume {0:?} not found")]
    NotFound(String),
    #[error("volume {0:?} already exists")]
    Exists(String),
    #[error("{name:?} has clones or children: {children}")]
    HasClones { name: String, children: String },
    #[error("volume {0:?} is exported (in use)")]
    Exported(String),
    #[error("volume {name:?}: new size {size} is below its highest written byte {highest_written} (use force)")]
    BelowUsed {
        name: String,
        size: u64,
        highest_written: u64,
    },
    #[error("pool {0:?} has no space left")]
    NoSpace(String),
    #[error("pool metadata is corrupt: {what}")]
    Corrupt { what: String },
    /// `err` is in the message, so it is not also a `source`.
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
    #[error("invalid {field}: {why}")]
    Invalid { field: &'static str, why: String },
    #[error("{0:?} is a snapshot (read-only)")]
    ReadOnly(String),
    #[error("{0:?} is not a snapshot")]
    NotSnapshot(String),
    #[error("{0:?} has no parent to decouple from")]
    NoParent(String),
}

impl PoolError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> PoolError {
        let what = what.into();
        move |err| PoolError::Io { what, err }
    }

    pub(crate) fn invalid(field: &'static str, why: impl Into<String>) -> PoolError {
        PoolError::Invalid {
            field,
            why: why.into(),
        }
    }
}

/// The error a write that needs a new cluster completes with when the pool
/// is full: `ENOSPC` (the command layer maps it to NVMe Capacity Exceeded,
/// SCT 0 / SC 81h).
pub fn no_space() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

/// Whether a completion error is the pool-full error ([`no_space`]).
pub fn is_no_space(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC)
}
