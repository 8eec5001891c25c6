//! The I/O engines a job drives: a remote NVMe-oF I/O queue (NVMe/TCP or
//! NVMe/RDMA, whichever transport the host library's queue runs on), a local
//! file through the backend crate's io_uring queue, or an iSCSI LUN through
//! libiscsi (the sweep's baseline). All expose slots with
//! preallocated buffers, submit-by-slot and non-blocking completion polling.

use std::time::Duration;

pub mod iscsi;
pub mod local;
pub mod remote;

/// One finished I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub slot: u16,
    /// `None` on success, else a short description of the failure.
    pub error: Option<ErrorKind>,
}

/// Why an I/O failed (kept `Copy` so completions need no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// NVMe status (the raw 15-bit value).
    Status(u16),
    DataDigest,
    ShortTransfer,
    /// A local I/O error (errno).
    Os(i32),
    /// A failed iSCSI task: libiscsi's status, sense key and ASC/ASCQ.
    Scsi {
        status: u32,
        key: u8,
        ascq: u16,
    },
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorKind::Status(s) => write!(f, "NVMe status {}", farflash_wire::Status(*s)),
            ErrorKind::DataDigest => write!(f, "data digest error"),
            ErrorKind::ShortTransfer => write!(f, "short data transfer"),
            ErrorKind::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            ErrorKind::Scsi { status, key, ascq } => {
                write!(f, "{}", iscsi::describe(*status, *key, *ascq))
            }
        }
    }
}

pub trait Engine {
    /// Logical block size in bytes.
    fn block_size(&self) -> u32;
    /// Usable bytes.
    fn capacity(&self) -> u64;
    /// A free slot, if any (at most `iodepth` are in flight).
    fn alloc_slot(&mut self) -> Option<u16>;
    /// The slot's buffer, for filling write data (slot allocated, not in flight).
    fn buf_mut(&mut self, slot: u16) -> &mut [u8];
    /// The slot's buffer (read data after its completion, until the slot is reused).
    fn buf(&self, slot: u16) -> &[u8];
    /// Queues a read or write of `len` bytes at byte `offset` on `slot`.
    fn submit(&mut self, slot: u16, write: bool, offset: u64, len: u32) -> anyhow::Result<()>;
    /// Hands the queued requests to the kernel now (the `writev` of their
    /// commands, or `io_uring_enter`), like fio's `commit`; never blocks.
    /// The job takes each command's issue time when this returns.
    fn commit(&mut self) -> anyhow::Result<()>;
    /// Sends queued work and appends what completed to `out`; never blocks.
    fn poll(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize>;
    /// Blocking mode's `poll`: sends queued work, sleeps until something
    /// completes (bounded; then returns 0) and appends it to `out`.
    fn wait(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize>;
    /// Hybrid mode's nap: sends queued work, sleeps until something
    /// completes or `timeout` passes (precisely: tens of microseconds) and
    /// appends what completed to `out`; how many, and whether something
    /// arrived first (`Some(true)`), the timeout passed (`Some(false)`),
    /// or the engine cannot nap and only polled (`None`, the default).
    fn nap(
        &mut self,
        out: &mut Vec<Done>,
        timeout: Duration,
    ) -> anyhow::Result<(usize, Option<bool>)> {
        let _ = timeout;
        Ok((self.poll(out)?, None))
    }
    /// Returns a slot taken with `alloc_slot` after it completed (slots are
    /// recycled automatically by `poll` for the remote engine).
    fn release(&mut self, slot: u16);
}
