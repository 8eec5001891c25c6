//! farflash-host: an NVMe over Fabrics (TCP) host.
//!
//! Layers, bottom up:
//! - [`QueuePair`]: a sans-I/O state machine for one NVMe/TCP connection
//!   (ICReq/ICResp, command capsules, R2T/H2CData, C2HData, digests,
//!   TermReq). Commands and received bytes go in; PDU bytes to send and
//!   completions come out. It never blocks, allocates on the data path or
//!   panics on what the network sends.
//! - [`socket`]: moving those bytes over a `TcpStream` (one `writev` per
//!   flush, optional receive straight into a read's buffer).
//! - [`AdminQueue`] / [`Controller`]: the blocking admin queue and the
//!   controller bring-up (Connect, properties, CC.EN, Identify, Number of
//!   Queues), log pages, discovery, Keep Alive, shutdown.
//! - [`IoQueue`]: a poll-driven I/O queue owned by one thread (submit
//!   CID-tagged reads/writes on preallocated slot buffers, poll completions),
//!   plus blocking helpers for one-off commands.

pub mod admin;
pub mod cmd;
pub mod controller;
pub mod discovery;
pub mod error;
pub mod io_queue;
pub mod keepalive;
pub mod logs;
pub mod options;
pub mod queue;
pub mod slot;
pub mod socket;
mod tx;

#[cfg(test)]
mod queue_tests;

pub use admin::AdminQueue;
pub use controller::{Controller, ControllerInfo};
pub use error::{HostError, Result, TransportError};
pub use io_queue::{IoQueue, IoQueueOptions};
pub use options::ConnectOptions;
pub use queue::{QueueConfig, QueuePair};
pub use slot::{Completion, DataDir};
