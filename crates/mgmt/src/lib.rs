//! Operating a running target: the management API (JSON-RPC 2.0 over a
//! Unix socket, [`server`], [`methods`]; over TCP with mutual TLS, [`net`])
//! and Prometheus metrics
//! ([`metrics`]). Neither touches the I/O path: methods go through
//! `farflash_control::manage`, metrics read the per-queue counters at scrape
//! time.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod autosave;
pub mod jsonrpc;
pub mod methods;
pub mod metrics;
pub mod net;
mod saved;
pub mod server;

pub use methods::Api;
