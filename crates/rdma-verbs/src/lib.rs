//! The verbs layer of farflash's NVMe/RDMA target and host: it moves what
//! the sans-I/O parts (`farflash-rdma` for the target, `farflash_host::rdma`
//! for the host) decide, with rdma-core's
//! libibverbs and librdmacm (`farflash-rdma-sys`). A crate of its own so
//! that `farflash-rdma` and the fuzzers stay free of C libraries.
//!
//! - [`RdmaListener`]: an RDMA CM listener on a non-blocking event channel;
//!   checks each connection request's private data, rejects with its STS or
//!   builds the queue pair and accepts with CRQSIZE ([`Accepted`]).
//! - [`RdmaConn`]: one accepted queue pair, driven by a worker's event loop
//!   (CQ polling, the CM and completion channels' fds for epoll).
//! - [`RdmaConnector`] / [`RdmaHostQueue`]: the host side, one queue pair
//!   of `farflash-host` over RDMA CM (`-t rdma`).
//!
//! See docs/rdma.md.

#![deny(clippy::undocumented_unsafe_blocks)]

mod cm;
mod conn;
mod host;
mod listener;
mod qp;

pub use conn::RdmaConn;
pub use host::{RdmaConnector, RdmaHostQueue};
pub use listener::{Accepted, RdmaListener, Staging};

/// Opens libibverbs and librdmacm (once per process; every listener and
/// host connection does it too). Without them: `NotFound`, with a message
/// that names the Debian packages to install.
pub fn load_libraries() -> std::io::Result<()> {
    farflash_rdma_sys::load()
        .map(|_| ())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::NotFound, e))
}
