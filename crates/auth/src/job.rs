//! The two modular exponentiations of a controller's transaction as jobs
//! that may run away from the event loop (ffdhe8192 costs ~20 ms each with
//! `num-bigint`, and any host that claims a keyed NQN can start one).
//!
//! [`crate::CtrlAuth::send_deferred`] hands out a [`DhJob`] instead of
//! computing; [`DhJob::run`] does the work wherever the caller likes (a
//! helper thread); [`crate::CtrlAuth::computed`] takes the [`DhDone`] back.
//! A job carries the private exponent, so neither type prints its contents.

use zeroize::Zeroizing;

use crate::dh::{DhError, KeyPair, PrivateExponent};
use crate::DhGroup;

/// One exponentiation, with everything it needs (owned, `Send`).
pub struct DhJob {
    pub(crate) gen: u32,
    pub(crate) work: Work,
}

pub(crate) enum Work {
    /// The controller's key pair: g^x mod p (for the challenge's DH value).
    KeyPair { group: DhGroup, x: PrivateExponent },
    /// The session key: (host's DH value)^x mod p, after the value's checks.
    Shared { keypair: KeyPair, peer: Vec<u8> },
}

/// A finished [`DhJob`].
pub struct DhDone {
    pub(crate) gen: u32,
    pub(crate) out: Output,
}

pub(crate) enum Output {
    KeyPair(Option<KeyPair>),
    Shared(Result<Zeroizing<Vec<u8>>, DhError>),
}

impl DhJob {
    /// Does the exponentiation (the only costly step of a transaction).
    pub fn run(self) -> DhDone {
        let out = match self.work {
            Work::KeyPair { group, x } => Output::KeyPair(group.keypair_from(x)),
            Work::Shared { keypair, peer } => Output::Shared(keypair.shared(&peer)),
        };
        DhDone { gen: self.gen, out }
    }
}

impl std::fmt::Debug for DhJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.work {
            Work::KeyPair { group, .. } => format!("key pair, {}", group.name()),
            Work::Shared { keypair, .. } => format!("shared secret, {keypair:?}"),
        };
        write!(f, "DhJob({what})")
    }
}

impl std::fmt::Debug for DhDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DhDone")
    }
}
