//! The PSK interchange format (NVMe/TCP 1.0 §3.6.1.5):
//! `NVMeTLSkey-1:HH:<base64 of key || CRC-32(key), little-endian>:`.
//!
//! HH is 00 (no transform, 32- or 48-byte key), 01 (SHA-256, 32 bytes) or
//! 02 (SHA-384, 48 bytes). libnvme (`nvme_import_tls_key_versioned`,
//! `nvme_export_tls_key_versioned`) and SPDK
//! (`nvme_tcp_parse_interchange_psk`) read and write it so; the parser here
//! is as strict as the stricter of the two on each point (SPDK requires the
//! final `:`, libnvme the exact length) and names what is wrong without
//! repeating any of the key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use zeroize::Zeroizing;

use super::{ConfiguredPsk, PskHash};

/// Why a key string or key was refused. No variant holds any part of the
/// key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyFormatError {
    #[error("a TLS key starts with 'NVMeTLSkey-1:'")]
    Prefix,
    #[error("TLS key format version {0} is not supported (only NVMeTLSkey-1)")]
    Version(u8),
    #[error("a TLS key's hash field is 00, 01 or 02 followed by ':'")]
    Hash,
    #[error("a TLS key ends with ':' after its base64 part")]
    Trailer,
    #[error("the TLS key's base64 part is not valid (standard alphabet, padded)")]
    Base64,
    #[error("the TLS key is {0} bytes; it must be 32 or 48 (plus the 4-byte CRC-32)")]
    Length(usize),
    #[error("hash {hash:02} needs a {expected}-byte key, this one is {len} bytes")]
    HashLength {
        hash: u8,
        expected: usize,
        len: usize,
    },
    #[error("the TLS key's CRC-32 does not match its key (mistyped or truncated?)")]
    Crc,
}

const PREFIX: &str = "NVMeTLSkey-";

/// Longest valid string: prefix, version, ':', HH, ':', base64 of 52 bytes
/// (72 characters), ':'.
pub const MAX_INTERCHANGE_LEN: usize = 11 + 1 + 1 + 2 + 1 + 72 + 1;

impl ConfiguredPsk {
    /// Parses the interchange format. Strict: version 1 only, HH exactly 00,
    /// 01 or 02, canonical padded base64, a key of 32 or 48 bytes as HH
    /// requires, the CRC-32 checked, the final ':' present and nothing
    /// after it (no whitespace: trim before, if reading a file).
    pub fn parse(s: &str) -> Result<ConfiguredPsk, KeyFormatError> {
        let rest = s.strip_prefix(PREFIX).ok_or(KeyFormatError::Prefix)?;
        let (version, rest) = rest.split_once(':').ok_or(KeyFormatError::Prefix)?;
        match version {
            "1" => {}
            v => {
                return Err(match v.parse::<u8>() {
                    Ok(n) if v.len() == 1 => KeyFormatError::Version(n),
                    _ => KeyFormatError::Prefix,
                })
            }
        }
        let (hh, rest) = rest.split_once(':').ok_or(KeyFormatError::Hash)?;
        let transform = match hh {
            "00" => None,
            "01" => Some(PskHash::Sha256),
            "02" => Some(PskHash::Sha384),
            _ => return Err(KeyFormatError::Hash),
        };
        let b64 = rest.strip_suffix(':').ok_or(KeyFormatError::Trailer)?;
        if b64.contains(':') {
            return Err(KeyFormatError::Trailer);
        }
        // 52 bytes are 72 characters: refuse longer input before decoding.
        if b64.len() > 72 {
            return Err(KeyFormatError::Length(b64.len() / 4 * 3));
        }
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| KeyFormatError::Base64)?);
        if raw.len() < 4 {
            return Err(KeyFormatError::Length(0));
        }
        let (key, crc) = raw.split_at(raw.len() - 4);
        let k = ConfiguredPsk::new(key, transform)?;
        if k.crc().to_le_bytes() != crc {
            return Err(KeyFormatError::Crc);
        }
        Ok(k)
    }

    /// The interchange string, zeroized when dropped (libnvme
    /// `nvme_export_tls_key_versioned(1, HH, ...)`).
    pub fn to_interchange(&self) -> Zeroizing<String> {
        format_interchange(
            1,
            self.transform.map_or(0, PskHash::id),
            self.expose_secret(),
        )
    }
}

/// `NVMeTLSkey-<version>:<hh>:<base64(key || crc32 le)>:` for any key and
/// field values, as libnvme's `nvme_export_tls_key_versioned` writes it;
/// nvme-cli's key files store derived TLS PSKs so, with the identity's
/// version and hash (`append_keyfile`).
pub fn format_interchange(version: u8, hh: u8, key: &[u8]) -> Zeroizing<String> {
    let mut raw = Zeroizing::new(Vec::with_capacity(key.len() + 4));
    raw.extend_from_slice(key);
    raw.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
    let b64 = Zeroizing::new(STANDARD.encode(&raw[..]));
    Zeroizing::new(format!("{PREFIX}{version:x}:{hh:02x}:{}:", &b64[..]))
}
