//! The DH-HMAC-CHAP hash functions (Base 2.0 §8.13.5.1): SHA-256/384/512
//! and their HMACs, from RustCrypto's `sha2` and `hmac`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

use farflash_wire::auth::hash_id;

/// A hash function a DH-HMAC-CHAP transaction may select.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashId {
    Sha256,
    Sha384,
    Sha512,
}

impl HashId {
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    /// From the wire HashID (Base §8.13.5.1); None for any other value.
    pub fn from_id(id: u8) -> Option<HashId> {
        match id {
            hash_id::SHA256 => Some(HashId::Sha256),
            hash_id::SHA384 => Some(HashId::Sha384),
            hash_id::SHA512 => Some(HashId::Sha512),
            _ => None,
        }
    }

    /// The wire HashID; also the `0X` of a `DHHC-1:0X:` secret.
    pub fn id(self) -> u8 {
        match self {
            HashId::Sha256 => hash_id::SHA256,
            HashId::Sha384 => hash_id::SHA384,
            HashId::Sha512 => hash_id::SHA512,
        }
    }

    /// Output length in bytes (the HL of the messages).
    pub fn output_len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }

    /// The name the kernel's tables use (`hmac(sha256)` without `hmac()`).
    pub fn name(self) -> &'static str {
        match self {
            HashId::Sha256 => "sha256",
            HashId::Sha384 => "sha384",
            HashId::Sha512 => "sha512",
        }
    }

    /// H(data).
    pub fn digest(self, data: &[u8]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            HashId::Sha256 => Sha256::digest(data).to_vec(),
            HashId::Sha384 => Sha384::digest(data).to_vec(),
            HashId::Sha512 => Sha512::digest(data).to_vec(),
        })
    }

    /// HMAC(key, parts[0] || parts[1] || ...).
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC takes keys of any length (RFC 2104 §2): this cannot fail.
            let mut m = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        Zeroizing::new(match self {
            HashId::Sha256 => run::<Hmac<Sha256>>(key, parts),
            HashId::Sha384 => run::<Hmac<Sha384>>(key, parts),
            HashId::Sha512 => run::<Hmac<Sha512>>(key, parts),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_case2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let m = HashId::Sha256.hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            m[..8],
            [0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e],
            "HMAC-SHA-256"
        );
        for h in HashId::ALL {
            assert_eq!(h.hmac(b"k", &[b"x"]).len(), h.output_len());
            assert_eq!(h.digest(b"x").len(), h.output_len());
            assert_eq!(HashId::from_id(h.id()), Some(h));
        }
        assert_eq!(HashId::from_id(0), None);
        assert_eq!(HashId::from_id(4), None);
    }
}
