//! farflash-host: an NVMe over Fabrics host (NVMe/TCP built in; other
//! transports plug in through [`transport::Connector`]).
//!
//! Layers, bottom up:
//! - [`QueuePair`]: a sans-I/O state machine for one NVMe/TCP connection
//!   (ICReq/ICResp, command capsules, R2T/H2CData, C2HData, digests,
//!   TermReq). Commands and received bytes go in; PDU bytes to send and
//!   completions come out. It never blocks, allocates on the data path or
//!   panics on what the network sends.
//! - [`socket`]: moving those bytes over a `TcpStream` (one `writev` per
//!   flush, optional receive straight into a read's buffer).
//! - [`transport`]: the seam: [`HostTransport`] (one queue pair: submit on
//!   a CID slot, progress, completions, slot buffers) and [`Connector`]
//!   (opens one); everything above is written against it only.
//! - [`AdminQueue`] / [`Controller`]: the blocking admin queue and the
//!   controller bring-up (Connect, properties, CC.EN, Identify, Number of
//!   Queues), log pages, discovery, Keep Alive, shutdown.
//! - [`auth`]: DH-HMAC-CHAP after each Connect that asks for it
//!   (`ConnectOptions::dhchap_secret`, `dhchap_ctrl_secret`).
//! - [`IoQueue`]: a poll-driven I/O queue owned by one thread (submit
//!   CID-tagged reads/writes on preallocated slot buffers, poll completions),
//!   plus blocking helpers for one-off commands.
//!
//! ```no_run
//! use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
//!
//! let opts = ConnectOptions::new("127.0.0.1:4420", "nqn.2026-11.io.farflash:default");
//! let mut ctrl = Controller::connect_with_queues(&opts, 1)?;
//! ctrl.start_keep_alive()?; // Keep Alive every KATO/2 on the admin queue
//! let mut q = ctrl.io_queue(1, IoQueueOptions { depth: 32, max_io: 128 << 10 })?;
//!
//! // Blocking, for tools:
//! let mut block = vec![0u8; 4096];
//! q.read_at(1, 0, 8, &mut block)?;
//!
//! // Poll-driven, for benchmarks: submit on CID slots, poll completions.
//! let cid = q.alloc_cid().expect("a free slot");
//! q.submit_read(cid, 1, 8, 8, 4096)?;
//! let mut done = Vec::new();
//! while done.is_empty() {
//!     q.poll(&mut done)?;
//! }
//! done[0].check()?;
//! let _data = &q.buf(cid)[..4096];
//!
//! drop(q);
//! ctrl.shutdown()?; // CC.SHN, wait for CSTS.SHST, close
//! # Ok::<(), farflash_host::HostError>(())
//! ```

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod admin;
pub mod auth;
pub mod cids;
pub mod cmd;
pub mod controller;
pub mod discovery;
pub mod error;
pub mod info;
pub mod io_queue;
pub mod keepalive;
pub mod logs;
pub mod options;
pub mod queue;
pub mod rdma;
pub mod slot;
pub mod socket;
pub mod tls;
pub mod transport;
mod tx;

pub use admin::AdminQueue;
pub use controller::Controller;
pub use error::{HostError, Result, TransportError};
pub use info::ControllerInfo;
pub use io_queue::{IoQueue, IoQueueOptions};
pub use options::{ConnectOptions, Connector};
pub use queue::{QueueConfig, QueuePair};
pub use slot::{Completion, DataDir};
pub use transport::{HostTransport, Napped};
