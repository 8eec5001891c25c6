//! Per-command state of a queue pair, indexed by CID: each slot owns a
//! preallocated data buffer, so the I/O path never allocates.

use farflash_wire::Cqe;

/// Which way a command's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDir {
    /// No data (Flush, Keep Alive, Set Features...).
    None,
    /// Host to controller (Write, Connect, DSM ranges).
    ToCtrl,
    /// Controller to host (Read, Identify, Get Log Page).
    FromCtrl,
}

#[derive(Debug)]
pub(crate) struct Slot {
    pub dir: DataDir,
    /// Data length of the command in bytes.
    pub len: u32,
    /// FromCtrl: bytes received so far. ToCtrl via R2T: bytes solicited so far.
    pub xfer: u32,
    /// ToCtrl: the data went in the capsule (an R2T for it is an error).
    pub in_capsule: bool,
    /// A data digest error was seen on this command's data.
    pub digest_error: bool,
    /// Data segments of this slot still queued for sending.
    pub tx_refs: u32,
    /// The completion arrived while `tx_refs > 0`: reported once they drain.
    pub deferred: Option<Cqe>,
    pub buf: Vec<u8>,
}

impl Slot {
    pub fn new(buf_len: usize) -> Slot {
        Slot {
            dir: DataDir::None,
            len: 0,
            xfer: 0,
            in_capsule: false,
            digest_error: false,
            tx_refs: 0,
            deferred: None,
            buf: vec![0; buf_len],
        }
    }

    pub fn start(&mut self, dir: DataDir, len: u32) {
        self.dir = dir;
        self.len = len;
        self.xfer = 0;
        self.in_capsule = false;
        self.digest_error = false;
        self.deferred = None;
    }
}

/// A finished command as the queue pair reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub cid: u16,
    pub cqe: Cqe,
    pub dir: DataDir,
    /// Data bytes the command was issued with.
    pub expected: u32,
    /// Data bytes actually moved (received for reads).
    pub transferred: u32,
    pub digest_error: bool,
}

impl Completion {
    /// Ok(DW0) when the command succeeded with all its data, else the typed error.
    pub fn check(&self) -> crate::Result<u32> {
        if !self.cqe.status.is_success() {
            return Err(crate::HostError::Nvme {
                status: self.cqe.status,
                cid: self.cid,
                dw0: self.cqe.dw0,
            });
        }
        if self.digest_error {
            return Err(crate::HostError::DataDigest { cid: self.cid });
        }
        if self.dir != DataDir::None && self.transferred < self.expected {
            return Err(crate::HostError::ShortTransfer {
                cid: self.cid,
                transferred: self.transferred,
                expected: self.expected,
            });
        }
        Ok(self.cqe.dw0)
    }
}
