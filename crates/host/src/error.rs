//! Typed host errors: an NVMe status from the controller, a transport
//! error (TermReq received, malformed PDU, digest), an I/O error, a timeout.

use farflash_wire::Status;
use std::io;

/// A fatal transport-level error: the queue pair is unusable afterwards
/// (TCP §3.6.2.4: on a fatal error the connection is terminated).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The controller sent a C2HTermReq (TCP §3.6.2.5).
    #[error("controller terminated the connection (C2HTermReq FES {fes:#x}, FEI {fei:#x})")]
    TermReq { fes: u16, fei: u32 },
    /// A PDU broke a framing or sequencing rule; `fes`/`fei` are what the
    /// host puts in its H2CTermReq.
    #[error("bad PDU from controller: {what} (FES {fes:#x}, FEI {fei})")]
    BadPdu {
        what: &'static str,
        fes: u16,
        fei: u32,
    },
    /// The ICResp was unacceptable (TCP §3.6.2.3).
    #[error("bad ICResp: {0}")]
    BadIcResp(&'static str),
    /// The header digest of a received PDU did not match (TCP §3.6.1).
    #[error("header digest error")]
    HeaderDigest,
    /// The controller closed the connection.
    #[error("connection closed by the controller")]
    Closed,
    /// The TLS secure channel failed (TCP §3.6.1): the handshake (the
    /// message names the identity offered and what the target did) or a
    /// record (bad MAC, alert, close mid-record).
    #[error("{0}")]
    Tls(String),
    /// A queue pair of another binding (RDMA) failed: a failed work
    /// completion, a disconnect, a response that breaks the binding's rules.
    #[error("RDMA: {0}")]
    Rdma(String),
}

/// Everything a host operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The command completed with a non-success NVMe status.
    #[error("NVMe status: {status} (cid {cid}, dw0 {dw0:#x})")]
    Nvme { status: Status, cid: u16, dw0: u32 },
    /// The data of a command arrived with a bad data digest (TCP §3.6.1):
    /// the command failed, the connection is still usable.
    #[error("data digest error on cid {cid}")]
    DataDigest { cid: u16 },
    /// The controller completed a command successfully without moving all its data.
    #[error("short data transfer on cid {cid}: {transferred} of {expected} bytes")]
    ShortTransfer {
        cid: u16,
        transferred: u32,
        expected: u32,
    },
    /// (Displayed with its cause inline, so `{:#}` chains do not repeat it.)
    #[error("transport error: {0}")]
    Transport(TransportError),
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The controller reported something the host cannot work with
    /// (mismatching CNTLID, not ready, unsupported capability...).
    #[error("controller: {0}")]
    Controller(String),
    /// The caller asked for something impossible (queue full, bad length...).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl From<TransportError> for HostError {
    fn from(e: TransportError) -> Self {
        HostError::Transport(e)
    }
}

impl HostError {
    /// The NVMe status, when this is a status error.
    pub fn status(&self) -> Option<Status> {
        match self {
            HostError::Nvme { status, .. } => Some(*status),
            _ => None,
        }
    }
}

pub type Result<T, E = HostError> = std::result::Result<T, E>;
