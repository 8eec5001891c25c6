//! NVMe/TCP's secure channel (NVMe TCP Transport Specification 1.0 §3.6,
//! TP 8011): TLS 1.3 with pre-shared keys.
//!
//! - [`psk`]: the key material, pure Rust: the interchange format
//!   `NVMeTLSkey-1:HH:...:`, the retained and TLS PSK derivations in every
//!   layout a peer uses ([`psk::Derivation`]: SPDK, each libnvme
//!   generation, Linux), PSK identities of versions 0 and 1.
//! - [`keytool`]: `gen-tls-key` and `check-tls-key` as nvme-cli 2.13 has
//!   them, returning the text they print.
//! - [`session`]: sans-I/O TLS 1.3 sessions over OpenSSL 3 (loaded at run
//!   time from `libssl.so.3`): external PSKs only, TLS_AES_128_GCM_SHA256
//!   and TLS_AES_256_GCM_SHA384 by the key's hash, (EC)DHE always; the
//!   server picks the key by the client's identity through a callback.
//! - [`record`]: record headers followed without decrypting (oversized
//!   records, unknown types, a peer stalled mid-record).
//!
//! Secrets live in zeroize-on-drop buffers and print (`Debug`) as their
//! kind and length only.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod keyfile;
pub mod keytool;
/// The key material, in its own crate (`farflash-psk`) so that the command
/// layer has it without the OpenSSL bindings.
pub use farflash_psk as psk;
pub mod record;
pub mod session;

pub use psk::{
    CipherSuite, ConfiguredPsk, Derivation, IdentityVersion, InputPsk, PskHash, PskIdentity,
    PskKind, TlsPsk,
};
pub use session::{ClientConfig, PskChoice, ServerConfig, Session, TlsError};
