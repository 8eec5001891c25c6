//! The NVMe/TCP binding of the farflash target (NVMe/TCP Transport
//! Specification 1.1): one connection as a sans-I/O state machine that moves
//! bytes for a transport-neutral [`farflash_core::NvmeQueue`].
//!
//! - [`QueuePair`] (`queue.rs`): the connection's state and its types.
//! - `cmd.rs`: NVMe/TCP's state of one command ([`TcpCmd`], kept in the
//!   command's slot) and the one table of its transfer's phases.
//! - `link.rs`: the connection's receive state (PDUs, a payload received
//!   in place, closed) and send state (open, terminated), each one table.
//! - `rx.rs`: framing (TCP §3.6), ICReq, CapsuleCmd, H2CData, digests, and
//!   the per-queue data-buffer budget a command is charged on arrival.
//! - `tx.rs`: completions as CapsuleResp / C2HData, R2T, C2HTermReq, the
//!   [`farflash_core::Transport`] the binding driver calls, the waiting
//!   commands started as budget frees, and the output queue (headers
//!   inline, read data by reference).
//!
//! The command layer never sees a PDU; this crate never runs a command.

#![forbid(unsafe_code)]

mod cmd;
mod link;
mod out;
mod queue;
mod rx;
mod tx;

pub use cmd::TcpCmd;
pub use queue::{QueuePair, Tcp, ADMIN_ICD, TRANSIENT_TRANSPORT_ERROR};

#[cfg(test)]
mod tests;
