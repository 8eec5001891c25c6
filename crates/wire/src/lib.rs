//! NVMe and NVMe/TCP wire formats, with no I/O.
//!
//! Everything here is a pure function of bytes: decoders take slices and
//! return typed values or a [`pdu::Fatal`] error naming the field that was
//! wrong (so the caller can answer with a C2HTermReq / H2CTermReq), and
//! encoders write into caller-owned buffers. Every structure's size and
//! field offsets are asserted by the unit tests next to it.
//!
//! Specifications: NVM Express Base 2.0 ("Base"), NVMe over Fabrics 1.1
//! ("Fabrics"), NVMe/TCP Transport Binding 1.0 ("TCP").

#![forbid(unsafe_code)]

pub mod ana;
pub mod auth;
pub mod cqe;
pub mod digest;
pub mod discovery;
pub mod fabrics;
pub mod identify;
pub mod keyed_sgl;
pub mod le;
pub mod log;
pub mod opcode;
pub mod pdu;
pub mod props;
pub mod resv;
pub mod sqe;
pub mod status;

pub use cqe::Cqe;
pub use sqe::{SglDescriptor, Sqe};
pub use status::Status;

/// The well-known NQN of the discovery subsystem (Base 2.3 §3.1.3.3 "Discovery Controller" /
/// Fabrics §5).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Largest NQN, including its terminating NUL (Base §4.5: 223 bytes + NUL fit in 256).
pub const NQN_MAX: usize = 256;
