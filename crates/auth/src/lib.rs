//! NVMe in-band authentication, DH-HMAC-CHAP (NVM Express Base 2.0 §8.13,
//! TP 8006), without I/O.
//!
//! - [`Secret`]: the `DHHC-1:0X:<base64 key + CRC-32>:` representation
//!   (nvme-cli, Linux), its key transformation, zeroized and compared in
//!   constant time, never printed.
//! - [`HashId`], [`DhGroup`]: SHA-256/384/512 and HMAC (RustCrypto), the
//!   RFC 7919 ffdhe groups and the null group.
//! - [`chap`]: the response and augmented-challenge computations, each
//!   mirroring a named Linux function.
//! - [`HostAuth`] and [`CtrlAuth`]: the two ends of one transaction, fed
//!   message bytes and answering with messages or an [`AuthFailure`].
//!
//! Randomness comes in through [`Random`] so that tests are deterministic.
#![forbid(unsafe_code)]

pub mod chap;
mod ctrl;
pub mod dh;
mod dh_primes;
mod hash;
mod host;
mod job;
pub mod secret;
#[cfg(test)]
mod tests;

pub use ctrl::{CtrlAuth, CtrlConfig, CtrlEvent, Sent};
pub use dh::DhGroup;
pub use hash::HashId;
pub use host::{HostAuth, HostConfig, HostStep};
pub use job::{DhDone, DhJob};
pub use secret::{Secret, SecretError};

use farflash_wire::auth::{explanation, Failure, REASON_FAILED};

/// A source of random bytes (challenges, sequence numbers, DH exponents).
pub trait Random {
    fn fill(&mut self, buf: &mut [u8]);
}

/// The operating system's generator.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsRandom;

impl Random for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) {
        // Without randomness no challenge is safe to send: stop.
        if let Err(e) = getrandom::fill(buf) {
            panic!("the operating system's random generator failed: {e}");
        }
    }
}

/// How a transaction failed: the AUTH_Failure reason code explanation
/// (Base §8.13.4.3) and a fixed description that never holds key material.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DH-HMAC-CHAP failed: {what} (reason code explanation {explanation:#04x})")]
pub struct AuthFailure {
    /// One of `farflash_wire::auth::explanation`.
    pub explanation: u8,
    pub what: &'static str,
    /// The peer reported the failure (AUTH_Failure1/2 received).
    pub from_peer: bool,
}

impl AuthFailure {
    pub(crate) const fn local(explanation: u8, what: &'static str) -> AuthFailure {
        AuthFailure {
            explanation,
            what,
            from_peer: false,
        }
    }

    pub(crate) fn payload(what: &'static str) -> AuthFailure {
        AuthFailure::local(explanation::INCORRECT_PAYLOAD, what)
    }

    pub(crate) fn message(what: &'static str) -> AuthFailure {
        AuthFailure::local(explanation::INCORRECT_PROTOCOL_MESSAGE, what)
    }

    pub(crate) fn peer(f: &Failure) -> AuthFailure {
        AuthFailure {
            explanation: f.explanation,
            what: "the peer sent an AUTH_Failure",
            from_peer: true,
        }
    }

    /// The AUTH_Failure body that reports this failure in transaction `t_id`.
    pub fn to_wire(&self, t_id: u16) -> Failure {
        Failure {
            t_id,
            reason: REASON_FAILED,
            explanation: self.explanation,
        }
    }
}

/// How long the controller keeps an unfinished transaction (Base §8.13.5:
/// it ends the transaction when no next message arrives in time). Linux's
/// target uses the Keep Alive Timeout, or 120 s without one.
pub fn transaction_timeout(kato_ms: u32) -> std::time::Duration {
    if kato_ms == 0 {
        std::time::Duration::from_secs(120)
    } else {
        std::time::Duration::from_millis(kato_ms as u64)
    }
}
