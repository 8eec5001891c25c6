//! The farflash control plane, above the command layer (`farflash-core`,
//! which does no I/O): reading configuration files ([`config`]) and TLS
//! key files ([`key_files`]), building
//! subsystems with their backends and PTPL files opened ([`provision`]),
//! applying a configuration to a running target ([`reload`]: `SIGHUP`,
//! `load_config`) and the management operations ([`manage`]).

#![forbid(unsafe_code)]

pub mod config;
pub mod key_files;
pub mod manage;
pub mod pools;
pub mod provision;
pub mod reload;
pub mod volumes;

pub use provision::{build_namespaces, build_subsystem, System};
pub use reload::build_subsystems;

#[cfg(test)]
mod tests_ha;
#[cfg(test)]
mod tests_listen;
#[cfg(test)]
mod tests_reload;
#[cfg(test)]
mod tests_scale;
