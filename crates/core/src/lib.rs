//! The farflash NVMe over Fabrics command layer: transport-neutral, with no
//! I/O of its own (no socket, no storage call, no clock read).
//!
//! - [`config`]: what to export (flags and TOML build the same [`config::Config`]).
//! - [`subsystem`], [`target`], [`controller`]: subsystems, namespaces and
//!   the controllers of live associations.
//! - [`NvmeQueue`]: one NVMe queue. A transport binding (NVMe/TCP:
//!   `farflash-tcp`, NVMe/RDMA: `farflash-rdma`) hands it commands
//!   ([`NvmeQueue::begin`], [`NvmeQueue::execute`], `exec.rs`); storage work
//!   leaves as tagged requests and comes back through
//!   [`NvmeQueue::on_storage_completion`] (`queue/storage.rs`, `exec.rs`). Each
//!   command's life is one state enum (`queue/slots.rs`).
//! - [`Binding`]: what every transport shares: a queue and a
//!   [`Transport`], and the completions sent after every call (`binding.rs`).
//! - Command sets: `fabrics` (with `auth`, in-band authentication), `admin`
//!   (with `identify`, `discovery`), `io` (with `resv_cmd` and `nvm`, whose
//!   typed commands and per-queue state are `nvm_state`). They run on the
//!   queue, below them; `exec.rs`, above them all, dispatches to them.
//!
//! The control plane (configuration files, opening backends, reloads,
//! management) is `farflash-control`, above this crate; the event loops
//! live in `farflash-transport`.

#![forbid(unsafe_code)]

pub mod ana;
pub mod binding;
pub mod cntlid;
pub mod config;
pub mod controller;
pub mod exclusion;
pub mod listen;
pub mod qos;
pub mod resv;
pub mod stats;
pub mod subsystem;
pub mod target;
pub mod tls_key;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

mod admin;
mod auth;
mod command;
mod discovery;
mod discovery_cache;
mod exec;
mod fabrics;
mod identify;
mod io;
mod nstable;
mod nvm;
mod nvm_state;
mod queue;
mod resv_cmd;
mod size;
mod standalone;

pub use binding::{Binding, Transport};
pub use command::{Begin, Completion, Connected, Outcome, Xfer};
pub use queue::{NvmeQueue, Offload, OffloadDone, TAG_SLOT_BITS};
pub use target::Target;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_read_only;
