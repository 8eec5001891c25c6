//! The NVMe/TCP binding of the farflash target (NVMe/TCP Transport
//! Specification 1.1): one connection as a sans-I/O state machine that moves
//! bytes for a transport-neutral [`farflash_core::NvmeQueue`].
//!
//! - [`QueuePair`] (`queue.rs`): the connection's state; `conn.rs`: what the
//!   event loop calls (receive space, output, storage hand-off, ticks).
//! - `rx.rs`: framing (TCP §3.6), ICReq, CapsuleCmd, H2CData, digests.
//! - `tx.rs`: completions as CapsuleResp / C2HData, R2T, C2HTermReq.
//! - `budget.rs`: the per-queue data-buffer budget (R2T and reads wait).
//! - `outq.rs`: the output queue (headers inline, read data by reference).
//!
//! The command layer never sees a PDU; this crate never runs a command.

#![forbid(unsafe_code)]

mod budget;
mod conn;
mod outq;
mod queue;
mod rx;
mod tx;

pub use queue::{QueuePair, Tcp, ADMIN_ICD, TRANSIENT_TRANSPORT_ERROR};

#[cfg(test)]
mod tests;
