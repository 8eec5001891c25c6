//! The NVMe/RDMA binding of farflash's target (NVMe RDMA Transport
//! Specification 1.0), sans-I/O part: it decides, the verbs layer moves.
//!
//! - [`cm`]: RDMA CM private data (Request: RECFMT, QID, HRQSIZE, HSQSIZE;
//!   Accept: CRQSIZE; Reject: STS) and the queue geometry it grants.
//! - [`sgl`]: a command's data placement: in-capsule data or a Keyed SGL
//!   moved by RDMA READ / RDMA WRITE, and the key to invalidate.
//! - [`capsule`]: a received command capsule cut into SQE and in-capsule
//!   data.
//! - [`queue`]: the target queue: a [`farflash_core::Binding`] over RDMA.
//!
//! The host side (a host queue pair's command slots, the capsules it sends
//! and the responses it takes) is `farflash_host::rdma`, as NVMe/TCP's host
//! is in `farflash-host`; the Keyed SGL descriptor both use is
//! `farflash_wire::keyed_sgl`.
//!
//! See docs/rdma.md for what exists and what does not yet.

#![forbid(unsafe_code)]

pub mod capsule;
pub mod cm;
pub mod queue;
pub mod sgl;

#[cfg(test)]
mod tests;
