//! DH-HMAC-CHAP secrets in the `DHHC-1:0X:<base64>:` representation
//! (Base 2.0 §8.13.5.8, as nvme-cli and Linux write it).
//!
//! The base64 part is the key (32, 48 or 64 bytes) followed by the CRC-32
//! (IEEE, little-endian) of the key. `X` selects the key transformation:
//! 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::HashId;

/// Why a secret string was refused. No variant holds any part of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("secret does not start with 'DHHC-1:'")]
    Header,
    #[error("secret's transformation field is not 00, 01, 02 or 03")]
    Hmac,
    #[error("secret's key is not valid base64")]
    Base64,
    #[error("secret's key is {0} bytes, must be 32, 48 or 64 plus the 4-byte CRC")]
    Length(usize),
    #[error("secret's CRC-32 does not match its key")]
    Crc,
}

/// A DH-HMAC-CHAP secret: zeroized on drop, compared in constant time,
/// printed as `Secret(DHHC-1:0X, N bytes)` only.
#[derive(Clone)]
pub struct Secret {
    hmac: Option<HashId>,
    key: Zeroizing<Vec<u8>>,
}

impl Secret {
    /// A secret from raw key bytes (32, 48 or 64) and a transformation.
    pub fn new(key: &[u8], hmac: Option<HashId>) -> Result<Secret, SecretError> {
        if !matches!(key.len(), 32 | 48 | 64) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Secret {
            hmac,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// Parses `DHHC-1:0X:<base64>:` as Linux's `nvme_auth_parse_key` and
    /// `nvme_auth_extract_key` do: the base64 part ends at the last `:`
    /// (which, like Linux, may be missing), decodes to 36, 52 or 68 bytes,
    /// and its last four are the key's CRC-32, little-endian.
    pub fn parse(s: &str) -> Result<Secret, SecretError> {
        let rest = s.strip_prefix("DHHC-1:").ok_or(SecretError::Header)?;
        let (x, rest) = (
            rest.get(..2).ok_or(SecretError::Hmac)?,
            rest.get(2..).unwrap_or(""),
        );
        let rest = rest.strip_prefix(':').ok_or(SecretError::Hmac)?;
        let hmac = match x {
            "00" => None,
            "01" => Some(HashId::Sha256),
            "02" => Some(HashId::Sha384),
            "03" => Some(HashId::Sha512),
            _ => return Err(SecretError::Hmac),
        };
        let b64 = match rest.rfind(':') {
            Some(i) => &rest[..i],
            None => rest,
        };
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| SecretError::Base64)?);
        if !matches!(raw.len(), 36 | 52 | 68) {
            return Err(SecretError::Length(raw.len().saturating_sub(4)));
        }
        let (key, crc) = raw.split_at(raw.len() - 4);
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(SecretError::Crc);
        }
        Secret::new(key, hmac)
    }

    /// The `DHHC-1:0X:<base64>:` string, zeroized when dropped.
    pub fn to_dhhc(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(self.key.to_vec());
        raw.extend_from_slice(&self.crc().to_le_bytes());
        Zeroizing::new(format!(
            "DHHC-1:{:02x}:{}:",
            self.hmac.map_or(0, HashId::id),
            STANDARD.encode(&raw[..])
        ))
    }

    /// The transformation the `0X` field selects.
    pub fn hmac(&self) -> Option<HashId> {
        self.hmac
    }

    /// Key length in bytes.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Always false: a secret holds 32, 48 or 64 bytes.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// CRC-32 (IEEE) of the key, as stored after it.
    pub fn crc(&self) -> u32 {
        crc32fast::hash(&self.key)
    }

    /// The raw key bytes (for key generation tools; handle with care).
    pub fn expose_key(&self) -> &[u8] {
        &self.key
    }

    /// The transformed key (Base §8.13.5.7; Linux `nvme_auth_transform_key`):
    /// the key itself when `X` is 0, else
    /// HMAC-H(key, NQN || "NVMe-over-Fabrics") with H the hash `X` selects.
    /// The host transforms its secret with the host NQN, the controller's
    /// with the subsystem NQN. nvme-cli's `gen-dhchap-key` applies the same
    /// function to the secret it generates.
    pub fn transform(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.hmac {
            None => self.key.clone(),
            Some(h) => h.hmac(&self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }
}

impl PartialEq for Secret {
    /// Constant time in the key bytes (lengths and `X` are not secret).
    fn eq(&self, other: &Secret) -> bool {
        self.hmac == other.hmac && bool::from(self.key[..].ct_eq(&other.key[..]))
    }
}
impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Secret(DHHC-1:{:02x}, {} bytes)",
            self.hmac.map_or(0, HashId::id),
            self.key.len()
        )
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Produced by nvme-cli 2.3: `nvme gen-dhchap-key -s 000102..1f -m 0`
    // and `-m 1 -n nqn.2014-08.org.example:host1`.
    const PLAIN: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    const SHA256: &str = "DHHC-1:01:1wWhDeGRxTcjvLIclMHvVmyLF4rH+aG7AtuOoUZmKwLX2OkT:";
    const NQN: &str = "nqn.2014-08.org.example:host1";

    fn counting() -> Vec<u8> {
        (0u8..32).collect()
    }

    #[test]
    fn parses_and_formats_nvme_cli_keys() {
        let s = Secret::parse(PLAIN).unwrap();
        assert_eq!(s.expose_key(), &counting()[..]);
        assert_eq!(s.hmac(), None);
        assert_eq!(s.crc(), 0x9126_7e8a);
        assert_eq!(&s.to_dhhc()[..], PLAIN);
        assert_eq!(
            Secret::parse(&PLAIN[..PLAIN.len() - 1]),
            Ok(s.clone()),
            "no final ':'"
        );
        let t = Secret::parse(SHA256).unwrap();
        assert_eq!(t.hmac(), Some(HashId::Sha256));
        assert_eq!(&t.to_dhhc()[..], SHA256);
    }

    #[test]
    fn transform_matches_nvme_cli_generation() {
        // gen-dhchap-key -m 1 stores HMAC-SHA-256(secret, NQN || "NVMe-over-Fabrics").
        let raw = Secret::new(&counting(), Some(HashId::Sha256)).unwrap();
        let t = Secret::parse(SHA256).unwrap();
        assert_eq!(&raw.transform(NQN)[..], t.expose_key());
        let plain = Secret::parse(PLAIN).unwrap();
        assert_eq!(&plain.transform(NQN)[..], &counting()[..]);
    }

    #[test]
    fn refusals() {
        use SecretError::*;
        let bad_crc = PLAIN.replace("KfiaR", "KfiaS");
        for (s, e) in [
            ("junk", Header),
            ("DHHC-2:00:AAAA:", Header),
            (
                "DHHC-1:04:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
                Hmac,
            ),
            (
                "DHHC-1:0:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
                Hmac,
            ),
            ("DHHC-1:0", Hmac),
            (
                "DHHC-1:00:!!ECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
                Base64,
            ),
            ("DHHC-1:00:AAEC:", Length(0)),
            ("DHHC-1:00::", Length(0)),
            (&bad_crc, Crc),
        ] {
            assert_eq!(Secret::parse(s), Err(e), "{s}");
        }
        assert_eq!(Secret::new(&[0; 33], None).unwrap_err(), Length(33));
    }

    #[test]
    fn never_printed_and_constant_time_eq() {
        let s = Secret::parse(PLAIN).unwrap();
        let b64 = &PLAIN[10..PLAIN.len() - 1];
        for text in [
            format!("{s:?}"),
            format!("{s}"),
            format!("{:?}", Some(s.clone())),
        ] {
            assert!(!text.contains(&b64[..8]), "{text}");
            assert!(text.contains("32 bytes"));
        }
        let mut other = counting();
        other[31] ^= 1;
        assert_ne!(s, Secret::new(&other, None).unwrap());
        assert_ne!(s, Secret::new(&counting(), Some(HashId::Sha256)).unwrap());
        assert_eq!(s, Secret::new(&counting(), None).unwrap());
        for e in [
            SecretError::Crc,
            SecretError::Base64,
            SecretError::Length(3),
        ] {
            assert!(!e.to_string().contains(&b64[..8]));
        }
    }
}
