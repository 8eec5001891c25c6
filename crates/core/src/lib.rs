//! The farflash NVMe over Fabrics target core, with no I/O of its own.
//!
//! - [`config`]: what to export (flags and TOML build the same [`config::Config`]).
//! - [`subsystem`], [`target`], [`controller`]: subsystems, namespaces and
//!   the controllers of live associations.
//! - [`queue::QueuePair`]: one NVMe/TCP connection as a state machine fed
//!   bytes; it runs fabrics, admin and I/O commands (`fabrics`, `admin`,
//!   `io`) and talks to storage only through `farflash_backend` queues.
//!
//! The transport event loop lives in `farflash-transport`.

pub mod config;
pub mod controller;
pub mod queue;
pub mod reload;
pub mod stats;
pub mod subsystem;
pub mod target;

mod admin;
mod discovery;
mod fabrics;
mod identify;
mod io;
mod nstable;
mod outq;

pub use queue::QueuePair;
pub use target::Target;

#[cfg(test)]
mod tests;
