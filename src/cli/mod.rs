//! Subcommands. Each module owns its clap arguments and a `run` function.

pub mod ctl;
pub mod ctl_volumes;
pub mod dhchap;
pub mod discover;
pub mod identify;
pub mod package;
pub mod perf;
pub mod pool;
pub mod serve;
pub mod sweep;
pub mod tls;
