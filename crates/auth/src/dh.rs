//! Diffie-Hellman groups of DH-HMAC-CHAP (Base 2.0 §8.13.5.1): the null
//! group and RFC 7919's ffdhe2048..ffdhe8192 (generator 2), with
//! `num-bigint` doing the modular exponentiation.
//!
//! Public values travel big-endian, zero-padded to the prime's length, as
//! Linux's `crypto_kpp` writes them (`nvme_auth_gen_pubkey`), and so does
//! the shared secret used as session key (`nvme_auth_gen_shared_secret`).

use num_bigint::BigUint;
use zeroize::Zeroizing;

use crate::{dh_primes, Random};
use farflash_wire::auth::dhgroup_id;

/// A DH group a DH-HMAC-CHAP transaction may select.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DhGroup {
    Null,
    Ffdhe2048,
    Ffdhe3072,
    Ffdhe4096,
    Ffdhe6144,
    Ffdhe8192,
}

/// Private exponent length in bytes: 512 bits, above twice the security
/// strength of every group (RFC 7919 §5.2; ffdhe8192 needs 400).
const PRIVATE_LEN: usize = 64;

/// Why a peer's public value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    #[error("DH value is {0} bytes, the group needs its prime's length")]
    Length(usize),
    #[error("DH value is outside 2..=p-2")]
    Range,
}

impl DhGroup {
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// From the wire DHGID (Base §8.13.5.1); None for any other value.
    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }

    pub fn id(self) -> u8 {
        match self {
            DhGroup::Null => dhgroup_id::NULL,
            DhGroup::Ffdhe2048 => dhgroup_id::FFDHE2048,
            DhGroup::Ffdhe3072 => dhgroup_id::FFDHE3072,
            DhGroup::Ffdhe4096 => dhgroup_id::FFDHE4096,
            DhGroup::Ffdhe6144 => dhgroup_id::FFDHE6144,
            DhGroup::Ffdhe8192 => dhgroup_id::FFDHE8192,
        }
    }

    /// The kernel's name (`nvme_auth_dhgroup_name`).
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Length of public values and of the session key (0 for null).
    pub fn value_len(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }

    fn prime(self) -> Option<BigUint> {
        let hex = match self {
            DhGroup::Null => return None,
            DhGroup::Ffdhe2048 => dh_primes::FFDHE2048,
            DhGroup::Ffdhe3072 => dh_primes::FFDHE3072,
            DhGroup::Ffdhe4096 => dh_primes::FFDHE4096,
            DhGroup::Ffdhe6144 => dh_primes::FFDHE6144,
            DhGroup::Ffdhe8192 => dh_primes::FFDHE8192,
        };
        BigUint::parse_bytes(hex.as_bytes(), 16)
    }

    /// The group's prime p, big-endian (`value_len` bytes); None for the
    /// null group. Public: tests build hostile values (p - 1, p) from it.
    pub fn prime_bytes(self) -> Option<Vec<u8>> {
        Some(pad(&self.prime()?, self.value_len()))
    }

    /// A fresh key pair: the private exponent and g^x mod p, padded.
    /// None for the null group.
    pub fn keypair(self, rng: &mut dyn Random) -> Option<KeyPair> {
        self.keypair_from(PrivateExponent::draw(rng))
    }

    /// The key pair of an exponent drawn earlier: the costly g^x mod p
    /// (a [`crate::DhJob`] runs it away from the event loop).
    pub(crate) fn keypair_from(self, x: PrivateExponent) -> Option<KeyPair> {
        let p = self.prime()?;
        let x = x.0;
        let private = BigUint::from_bytes_be(&x[..]);
        let public = pad(&BigUint::from(2u32).modpow(&private, &p), self.value_len());
        Some(KeyPair {
            group: self,
            private: Zeroizing::new(x.to_vec()),
            public,
        })
    }

    /// Checks a peer's public value: the prime's length and 2 <= y <= p-2,
    /// which for a safe prime also rules out the small subgroups {1, p-1}.
    pub fn check_public(self, y: &[u8]) -> Result<BigUint, DhError> {
        let p = self.prime().ok_or(DhError::Length(y.len()))?;
        if y.len() != self.value_len() {
            return Err(DhError::Length(y.len()));
        }
        let y = BigUint::from_bytes_be(y);
        if y < BigUint::from(2u32) || y > &p - 2u32 {
            return Err(DhError::Range);
        }
        Ok(y)
    }
}

/// A private exponent, drawn where the random generator is (cheap) and
/// used where the exponentiation runs.
pub(crate) struct PrivateExponent(Zeroizing<[u8; PRIVATE_LEN]>);

impl PrivateExponent {
    pub(crate) fn draw(rng: &mut dyn Random) -> PrivateExponent {
        let mut x = Zeroizing::new([0u8; PRIVATE_LEN]);
        rng.fill(&mut x[..]);
        x[0] |= 0x80; // full-length exponent
        PrivateExponent(x)
    }
}

/// One end's DH key pair for one transaction.
pub struct KeyPair {
    group: DhGroup,
    private: Zeroizing<Vec<u8>>,
    /// g^x mod p, big-endian, padded to the prime's length.
    pub public: Vec<u8>,
}

impl KeyPair {
    /// The session key Ks = (peer value)^x mod p, padded (Linux
    /// `nvme_auth_gen_shared_secret`), after [`DhGroup::check_public`].
    pub fn shared(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let y = self.group.check_public(peer)?;
        let p = self.group.prime().ok_or(DhError::Range)?;
        let x = BigUint::from_bytes_be(&self.private);
        Ok(Zeroizing::new(pad(
            &y.modpow(&x, &p),
            self.group.value_len(),
        )))
    }
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPair({})", self.group.name())
    }
}

fn pad(v: &BigUint, len: usize) -> Vec<u8> {
    let b = v.to_bytes_be();
    let mut out = vec![0u8; len.saturating_sub(b.len())];
    out.extend_from_slice(&b);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::TestRng;

    #[test]
    fn primes_are_rfc7919() {
        for g in &DhGroup::ALL[1..] {
            let p = g.prime().unwrap();
            assert_eq!(p.bits() as usize, g.value_len() * 8, "{}", g.name());
            let ones = BigUint::from(u64::MAX);
            assert_eq!(&p & &ones, ones, "low 64 bits");
            assert_eq!(&p >> (p.bits() - 64), ones, "high 64 bits");
            // 2 is a quadratic residue mod a safe prime p = 7 mod 8.
            assert_eq!(
                BigUint::from(2u32).modpow(&((&p - 1u32) >> 1), &p),
                BigUint::from(1u32)
            );
            assert_eq!(DhGroup::from_id(g.id()), Some(*g));
        }
        assert_eq!(DhGroup::from_id(6), None);
    }

    #[test]
    fn agreement_and_value_checks() {
        let mut rng = TestRng(7);
        let g = DhGroup::Ffdhe2048;
        let a = g.keypair(&mut rng).unwrap();
        let b = g.keypair(&mut rng).unwrap();
        assert_eq!(a.public.len(), 256);
        assert_eq!(*a.shared(&b.public).unwrap(), *b.shared(&a.public).unwrap());
        let p = pad(&g.prime().unwrap(), 256);
        let mut pm1 = p.clone();
        pm1[255] -= 1;
        let mut one = vec![0u8; 256];
        one[255] = 1;
        for bad in [vec![0u8; 256], one, pm1, p, vec![0xff; 256]] {
            assert_eq!(a.shared(&bad).unwrap_err(), DhError::Range);
        }
        for len in [0, 1, 255, 257, 512] {
            assert_eq!(a.shared(&vec![5u8; len]).unwrap_err(), DhError::Length(len));
        }
        assert!(DhGroup::Null.keypair(&mut rng).is_none());
        assert_eq!(format!("{a:?}"), "KeyPair(ffdhe2048)");
    }
}
