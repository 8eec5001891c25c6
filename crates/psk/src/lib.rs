//! NVMe/TCP TLS pre-shared keys (NVMe TCP Transport Specification 1.0
//! §3.6.1, TP 8011; identities version 1 from TP 8018), without I/O and
//! without the OpenSSL bindings: the key material the command layer
//! (`farflash-core`) and the TLS sessions (`farflash-tls`) share.
//!
//! The chain a host and a controller each run from one configured key:
//!
//! ```text
//! NVMeTLSkey-1:HH:<base64>:   --parse-->      ConfiguredPsk (HH: 00 none, 01 SHA-256, 02 SHA-384)
//! ConfiguredPsk --retained(hostnqn)-->        InputPsk      (§3.6.1.2: HKDF with label "HostNQN";
//!                                                            HH 00: the configured key itself)
//! InputPsk --identity(v0|v1, hostnqn, subnqn)--> PskIdentity "NVMe0R0h <hostnqn> <subnqn>"
//!                                                          | "NVMe1R0h <hostnqn> <subnqn> <digest>"
//! InputPsk --tls_psk(identity)-->             TlsPsk        (§3.6.1.3: HKDF with label "nvme-tls-psk";
//!                                                            the key the TLS handshake uses)
//! ```
//!
//! The hash `h` of the identity, which also selects the cipher suite
//! (SHA-256: TLS_AES_128_GCM_SHA256, SHA-384: TLS_AES_256_GCM_SHA384), is
//! HH when the key is transformed and follows the key's length (32 or 48
//! bytes) when HH is 00; libnvme (`derive_nvme_keys`, `default_hmac`) and
//! SPDK (`nvmf_tcp_subsystem_add_host`, `nvme_tcp_generate_psk_identity`)
//! agree on that.
//!
//! Where the anchors disagree is the byte layout of the HKDF `info`
//! ("HkdfLabel") and, for version 1 identities, the HKDF context: see
//! [`Derivation`], one variant per layout with the peers that use it.
//!
//! Every key type keeps its bytes in zeroize-on-drop storage, compares in
//! constant time and prints (`Debug`) only its kind and length.

#![forbid(unsafe_code)]

mod identity;
mod interchange;

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use farflash_auth::HashId;
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

pub use identity::{IdentityError, IdentityVersion, PskIdentity, PskKind, NQN_MAX_LEN};
pub use interchange::{format_interchange, KeyFormatError, MAX_INTERCHANGE_LEN};

/// The server's answer for one identity: the TLS PSK and a value of the
/// caller's choosing (which host, which key generation ...) that the
/// session reports back (`farflash_tls::Session::tag`).
#[derive(Clone, Debug)]
pub struct PskChoice {
    /// The key, and with it the cipher suite.
    pub psk: TlsPsk,
    /// Reported by the TLS session once this identity is chosen.
    pub tag: u64,
}

/// The hash of a PSK: the "hash specifier" of an identity, the `HH` of a
/// transformed interchange key, and the hash of the TLS cipher suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PskHash {
    /// `01`: SHA-256, 32-byte keys, TLS_AES_128_GCM_SHA256.
    Sha256,
    /// `02`: SHA-384, 48-byte keys, TLS_AES_256_GCM_SHA384.
    Sha384,
}

impl PskHash {
    /// From the two-digit specifier's value (1 or 2).
    pub fn from_id(id: u8) -> Option<PskHash> {
        match id {
            1 => Some(PskHash::Sha256),
            2 => Some(PskHash::Sha384),
            _ => None,
        }
    }

    /// The specifier's value: 1 (SHA-256) or 2 (SHA-384).
    pub fn id(self) -> u8 {
        match self {
            PskHash::Sha256 => 1,
            PskHash::Sha384 => 2,
        }
    }

    /// Output length in bytes, which is also the length of every key of
    /// this hash (configured, retained, TLS PSK).
    pub fn len(self) -> usize {
        match self {
            PskHash::Sha256 => 32,
            PskHash::Sha384 => 48,
        }
    }

    /// Never true (for clippy's `len_without_is_empty`).
    pub fn is_empty(self) -> bool {
        false
    }

    /// The hash whose output is `len` bytes (32 or 48): how an untransformed
    /// (`HH` 00) key picks its cipher suite.
    pub fn for_key_len(len: usize) -> Option<PskHash> {
        match len {
            32 => Some(PskHash::Sha256),
            48 => Some(PskHash::Sha384),
            _ => None,
        }
    }

    /// The TLS 1.3 cipher suite of this hash (TP 8011; tlshd and SPDK pick
    /// the same).
    pub fn suite(self) -> CipherSuite {
        match self {
            PskHash::Sha256 => CipherSuite::Aes128GcmSha256,
            PskHash::Sha384 => CipherSuite::Aes256GcmSha384,
        }
    }

    /// HMAC-H(key, parts[0] || parts[1] || ...), DH-HMAC-CHAP's HMAC.
    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        let h = match self {
            PskHash::Sha256 => HashId::Sha256,
            PskHash::Sha384 => HashId::Sha384,
        };
        h.hmac(key, parts)
    }

    /// HKDF-Expand(HKDF-Extract(0, ikm), info[0] || info[1] || ..., len)
    /// (RFC 5869; the all-zero salt of HashLen bytes is what OpenSSL's
    /// empty salt and Linux's `default_salt` amount to).
    fn hkdf(self, ikm: &[u8], info: &[&[u8]], len: usize) -> Zeroizing<Vec<u8>> {
        let mut okm = Zeroizing::new(vec![0u8; len]);
        // len is at most 255 * HashLen (it is HashLen here): cannot fail.
        let r = match self {
            PskHash::Sha256 => Hkdf::<Sha256>::new(None, ikm).expand_multi_info(info, &mut okm),
            PskHash::Sha384 => Hkdf::<Sha384>::new(None, ikm).expand_multi_info(info, &mut okm),
        };
        r.unwrap_or_else(|_| unreachable!("HKDF output of {len} bytes"));
        okm
    }
}

/// The two TLS 1.3 cipher suites NVMe/TCP uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// TLS_AES_128_GCM_SHA256 (0x13, 0x01).
    Aes128GcmSha256,
    /// TLS_AES_256_GCM_SHA384 (0x13, 0x02).
    Aes256GcmSha384,
}

impl CipherSuite {
    /// The IANA name, which is also OpenSSL's.
    pub fn name(self) -> &'static str {
        match self {
            CipherSuite::Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            CipherSuite::Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
        }
    }

    /// The two bytes of the suite on the wire (RFC 8446 §B.4).
    pub fn wire_id(self) -> [u8; 2] {
        match self {
            CipherSuite::Aes128GcmSha256 => [0x13, 0x01],
            CipherSuite::Aes256GcmSha384 => [0x13, 0x02],
        }
    }

    /// From the wire value (`0x1301`, `0x1302`).
    pub fn from_wire(id: u16) -> Option<CipherSuite> {
        match id {
            0x1301 => Some(CipherSuite::Aes128GcmSha256),
            0x1302 => Some(CipherSuite::Aes256GcmSha384),
            _ => None,
        }
    }

    /// The suite's hash, which a PSK used with it must have.
    pub fn hash(self) -> PskHash {
        match self {
            CipherSuite::Aes128GcmSha256 => PskHash::Sha256,
            CipherSuite::Aes256GcmSha384 => PskHash::Sha384,
        }
    }
}

impl fmt::Display for CipherSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a peer lays out the HKDF `info` of the retained and TLS PSK
/// derivations (and, for version 1 identities, which context it hashes).
///
/// NVMe/TCP 1.0 §3.6.1.2 and §3.6.1.3 specify HKDF-Expand-Label of RFC 8446
/// §7.1, whose `info` is the `HkdfLabel` structure: a big-endian 16-bit
/// length, the label `"tls13 " + Label` preceded by its length byte, and
/// the context preceded by its length byte. Not every implementation wrote
/// it so, and each layout is in use by the peers named below. The PRK is
/// always HKDF-Extract with an all-zero salt; the output is always as long
/// as the key (32 or 48 bytes).
///
/// | variant | info of `Label`, `Context`, length `L` | v1 TLS PSK context |
/// |---|---|---|
/// | `Rfc8446` | `be16(L) ‖ len ‖ "tls13 " Label ‖ len ‖ Context` | `"0h <digest>"` |
/// | `Libnvme110` | `le16(L) ‖ "tls13 " Label ‖ Context` | `"0h <digest>"` |
/// | `Libnvme17` | `le16(L) ‖ "tls13 " Label ‖ Context` | the whole identity |
/// | `Libnvme14` | `"tls13 " Label ‖ Context` | (no v1 identities) |
/// | `Libnvme110OpensslBug` | `Context` | `"<digest>"` |
/// | `Libnvme17OpensslBug` | `Context` | the whole identity |
/// | `Linux614` | `be16(L) ‖ "tls13 " Label ‖ Context` | `"0h <digest>"` |
///
/// The v0 TLS PSK context is always the identity string
/// (`NVMe0R0h <hostnqn> <subnqn>`); the retained PSK's Label is `HostNQN`
/// and its Context the host NQN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Derivation {
    /// RFC 8446 `HkdfLabel`, as the specification says. Used by SPDK
    /// (include/spdk_internal/nvme_tcp.h `nvme_tcp_derive_retained_psk`,
    /// `nvme_tcp_derive_tls_psk`: target and initiator, every release with
    /// TLS up to v25.09 and later, v0 identities only); by libnvme 1.16 and
    /// later (src/nvme/linux.c `derive_retained_key`, `derive_tls_key`,
    /// Chris Leech's "TLS PSK derivation fixes", libnvme PR 1040/1051) and
    /// so by nvme-cli 2.16 and later without `--compat`; and by Linux's
    /// `nvme_auth_derive_tls_psk` (drivers/nvme/common/auth.c) since
    /// `hkdf_expand_label()` replaced its open-coded info (August 2025).
    Rfc8446,
    /// libnvme 1.10 to 1.15 (nvme-cli 2.10 to 2.15, so Debian 13's nvme-cli
    /// 2.13 and the keys it gives tlshd and the Linux host), and libnvme
    /// 1.16+ `*_compat` (nvme-cli `--compat`): the 16-bit length in host
    /// (little-endian) order, label and context without their length bytes
    /// (libnvme issue 735, PR 737; `derive_retained_key_compat`,
    /// `derive_tls_key_compat`). Built with an OpenSSL whose
    /// `EVP_PKEY_CTX_add1_hkdf_info` appends (1.1.1, 3.0.14+, 3.1.6+,
    /// 3.2.2+, 3.3.1+); see [`Derivation::Libnvme110OpensslBug`] otherwise.
    Libnvme110,
    /// libnvme 1.7 to 1.9 (nvme-cli 2.7 to 2.9): as [`Derivation::Libnvme110`],
    /// but a version 1 identity's TLS PSK hashes the whole identity string
    /// as its context (corrected in libnvme 1.10, issue 870, PR 871).
    Libnvme17,
    /// libnvme 1.4 to 1.6 (nvme-cli 2.4 to 2.6): no length field at all
    /// (added in 1.7 by PR 737, issue 735); version 0 identities only.
    Libnvme14,
    /// libnvme 1.10 to 1.15 linked against OpenSSL 3.0.0–3.0.13,
    /// 3.1.0–3.1.5, 3.2.0–3.2.1 or 3.3.0, whose
    /// `EVP_PKEY_CTX_add1_hkdf_info` replaced the info instead of appending
    /// (OpenSSL issue 23448; libnvme issue 1053, PR 1055 and 1073): of the
    /// pieces libnvme added one by one only the last counts, the host NQN
    /// (retained PSK), the identity (v0) or the digest (v1).
    Libnvme110OpensslBug,
    /// libnvme 1.4 to 1.9 on such an OpenSSL: as
    /// [`Derivation::Libnvme110OpensslBug`], but the last piece of a
    /// version 1 TLS PSK is the whole identity.
    Libnvme17OpensslBug,
    /// Linux 6.14 up to `hkdf_expand_label()` (August 2025):
    /// `nvme_auth_derive_tls_psk` with a big-endian length but label and
    /// context without length bytes. Linux derives TLS PSKs only from the
    /// *generated* PSKs of secure channel concatenation (TP 8018, `NVMe1G`
    /// identities); configured keys reach the kernel already derived by
    /// libnvme, so no peer derives a retained PSK this way (the same layout
    /// is applied for completeness).
    Linux614,
}

impl Derivation {
    /// Every variant, in the order [`ConfiguredPsk::resolve`] tries them
    /// when asked to try all.
    pub const ALL: [Derivation; 7] = [
        Derivation::Rfc8446,
        Derivation::Libnvme110,
        Derivation::Libnvme17,
        Derivation::Libnvme14,
        Derivation::Libnvme110OpensslBug,
        Derivation::Libnvme17OpensslBug,
        Derivation::Linux614,
    ];

    /// The name used in configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Derivation::Rfc8446 => "rfc8446",
            Derivation::Libnvme110 => "libnvme-1.10",
            Derivation::Libnvme17 => "libnvme-1.7",
            Derivation::Libnvme14 => "libnvme-1.4",
            Derivation::Libnvme110OpensslBug => "libnvme-1.10-openssl-bug",
            Derivation::Libnvme17OpensslBug => "libnvme-1.7-openssl-bug",
            Derivation::Linux614 => "linux-6.14",
        }
    }

    /// From [`Derivation::name`]; also `spdk` (= rfc8446) and `compat`
    /// (= libnvme-1.10, what nvme-cli's `--compat` selects).
    pub fn from_name(name: &str) -> Option<Derivation> {
        match name {
            "spdk" => return Some(Derivation::Rfc8446),
            "compat" => return Some(Derivation::Libnvme110),
            _ => {}
        }
        Derivation::ALL.into_iter().find(|d| d.name() == name)
    }

    fn layout(self) -> Layout {
        match self {
            Derivation::Rfc8446 => Layout::Rfc8446,
            Derivation::Libnvme110 | Derivation::Libnvme17 => Layout::LittleEndianBare,
            Derivation::Libnvme14 => Layout::NoLength,
            Derivation::Libnvme110OpensslBug | Derivation::Libnvme17OpensslBug => {
                Layout::ContextOnly
            }
            Derivation::Linux614 => Layout::BigEndianBare,
        }
    }

    /// HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, len) in this
    /// variant's layout.
    fn expand_label(
        self,
        hash: PskHash,
        ikm: &[u8],
        label: &str,
        context: &[u8],
        len: usize,
    ) -> Result<Zeroizing<Vec<u8>>, DeriveError> {
        const PREFIX: &[u8] = b"tls13 ";
        let l16 = len as u16;
        let be = l16.to_be_bytes();
        let le = l16.to_le_bytes();
        Ok(match self.layout() {
            Layout::Rfc8446 => {
                // opaque label<7..255>, opaque context<0..255>: as SPDK,
                // libnvme 1.16 and Linux, longer ones are refused.
                if context.len() > 255 {
                    return Err(DeriveError::ContextTooLong(context.len()));
                }
                let label_len = [(PREFIX.len() + label.len()) as u8];
                let context_len = [context.len() as u8];
                hash.hkdf(
                    ikm,
                    &[
                        &be,
                        &label_len,
                        PREFIX,
                        label.as_bytes(),
                        &context_len,
                        context,
                    ],
                    len,
                )
            }
            Layout::LittleEndianBare => {
                hash.hkdf(ikm, &[&le, PREFIX, label.as_bytes(), context], len)
            }
            Layout::BigEndianBare => hash.hkdf(ikm, &[&be, PREFIX, label.as_bytes(), context], len),
            Layout::NoLength => hash.hkdf(ikm, &[PREFIX, label.as_bytes(), context], len),
            Layout::ContextOnly => hash.hkdf(ikm, &[context], len),
        })
    }
}

impl fmt::Display for Derivation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy)]
enum Layout {
    Rfc8446,
    LittleEndianBare,
    BigEndianBare,
    NoLength,
    ContextOnly,
}

/// Why a derivation could not be made. No variant holds key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeriveError {
    #[error("the HKDF context is {0} bytes; RFC 8446's HkdfLabel holds at most 255 (NQNs too long for a version 0 identity)")]
    ContextTooLong(usize),
    #[error("{0} has no version 1 identities")]
    NoVersion1(Derivation),
    #[error("the identity's hash (SHA-{identity}) is not the key's (SHA-{key})")]
    HashMismatch { identity: u16, key: u16 },
    #[error("the identity is a {identity:?} PSK's, the key a {key:?} one")]
    KindMismatch { identity: PskKind, key: PskKind },
}

fn bits(h: PskHash) -> u16 {
    (h.len() * 8) as u16
}

/// A configured PSK (§3.6.1.1): the key an administrator gives both ends,
/// 32 or 48 bytes, and the hash it is to be transformed with (`HH`).
#[derive(Clone)]
pub struct ConfiguredPsk {
    transform: Option<PskHash>,
    key: Zeroizing<Vec<u8>>,
}

impl ConfiguredPsk {
    /// A key from its bytes: 32 or 48 of them, and, with a transform, as
    /// many as the hash's output (libnvme's `nvme_export_tls_key_versioned`
    /// and SPDK's `nvme_tcp_parse_interchange_psk` accept no other).
    pub fn new(key: &[u8], transform: Option<PskHash>) -> Result<ConfiguredPsk, KeyFormatError> {
        if PskHash::for_key_len(key.len()).is_none() {
            return Err(KeyFormatError::Length(key.len()));
        }
        if let Some(h) = transform {
            if h.len() != key.len() {
                return Err(KeyFormatError::HashLength {
                    hash: h.id(),
                    expected: h.len(),
                    len: key.len(),
                });
            }
        }
        Ok(ConfiguredPsk {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// `HH`: the hash the key is transformed with into a retained PSK, or
    /// None (00) when the configured key is used as the retained key.
    pub fn transform(&self) -> Option<PskHash> {
        self.transform
    }

    /// The hash of the identities and the cipher suite: `HH`, or by length.
    pub fn hash(&self) -> PskHash {
        match self.transform {
            Some(h) => h,
            None => PskHash::for_key_len(self.key.len()).unwrap_or(PskHash::Sha256),
        }
    }

    /// Key length in bytes (32 or 48).
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Never true: a key holds 32 or 48 bytes.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// CRC-32 (IEEE) of the key, as the interchange format stores it.
    pub fn crc(&self) -> u32 {
        crc32fast::hash(&self.key)
    }

    /// The raw key bytes (for key tools; handle with care).
    pub fn expose_secret(&self) -> &[u8] {
        &self.key
    }

    /// The retained PSK for `hostnqn` (§3.6.1.2): HKDF-Expand-Label(
    /// HKDF-Extract(0, key), "HostNQN", hostnqn, len) with the hash `HH`, in
    /// `derivation`'s layout; the key itself when `HH` is 00 (SPDK
    /// `nvmf_tcp_subsystem_add_host`, libnvme `derive_retained_key`).
    pub fn retained(&self, hostnqn: &str, derivation: Derivation) -> Result<InputPsk, DeriveError> {
        let key = match self.transform {
            None => self.key.clone(),
            Some(h) => {
                derivation.expand_label(h, &self.key, "HostNQN", hostnqn.as_bytes(), self.len())?
            }
        };
        Ok(InputPsk {
            kind: PskKind::Retained,
            hash: self.hash(),
            key,
        })
    }

    /// The whole chain for one (host, subsystem) pair, as libnvme's
    /// `derive_nvme_keys` runs it for `nvme_insert_tls_key_versioned` and
    /// `nvme_generate_tls_key_identity`: the identity of `version` and the
    /// TLS PSK the handshake uses with it.
    pub fn derive(
        &self,
        hostnqn: &str,
        subnqn: &str,
        version: IdentityVersion,
        derivation: Derivation,
    ) -> Result<(PskIdentity, TlsPsk), PskError> {
        let input = self.retained(hostnqn, derivation)?;
        let identity = input.identity(version, hostnqn, subnqn)?;
        let tls = input.tls_psk(&identity, derivation)?;
        Ok((identity, tls))
    }

    /// The TLS PSK for an identity a client offered, if this key (the one
    /// configured for the identity's host) can have produced it under one
    /// of `candidates`, tried in order.
    ///
    /// A version 1 identity carries a digest of the retained PSK, which
    /// tells the derivations apart when their retained PSKs differ: the
    /// first candidate whose digest matches is taken (Rfc8446 against
    /// Libnvme110, for instance, is decided this way). A version 0 identity
    /// carries nothing of the key, so the first candidate is taken; the
    /// handshake then fails (binder mismatch) if the host derived
    /// differently. Identities of another hash or of generated PSKs are
    /// refused.
    pub fn resolve(
        &self,
        identity: &PskIdentity,
        candidates: &[Derivation],
    ) -> Option<(Derivation, TlsPsk)> {
        if identity.hash() != self.hash() || identity.kind() != PskKind::Retained {
            return None;
        }
        for &d in candidates {
            let Ok(input) = self.retained(identity.hostnqn(), d) else {
                continue;
            };
            if let Some(offered) = identity.digest() {
                let mine = input.digest(identity.hostnqn(), identity.subnqn());
                if !bool::from(offered.as_bytes().ct_eq(mine.as_bytes())) {
                    continue;
                }
            }
            if let Ok(tls) = input.tls_psk(identity, d) {
                return Some((d, tls));
            }
        }
        None
    }
}

impl PartialEq for ConfiguredPsk {
    /// Constant time in the key bytes (lengths and `HH` are not secret).
    fn eq(&self, other: &ConfiguredPsk) -> bool {
        self.transform == other.transform && bool::from(self.key[..].ct_eq(&other.key[..]))
    }
}
impl Eq for ConfiguredPsk {}

impl fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConfiguredPsk(NVMeTLSkey-1:{:02x}, {} bytes)",
            self.transform.map_or(0, PskHash::id),
            self.key.len()
        )
    }
}

/// An input PSK of the TLS PSK derivation (§3.6.1.3): a retained PSK (from
/// a configured one) or a generated PSK (from DH-HMAC-CHAP, secure channel
/// concatenation).
#[derive(Clone)]
pub struct InputPsk {
    kind: PskKind,
    hash: PskHash,
    key: Zeroizing<Vec<u8>>,
}

impl InputPsk {
    /// A retained PSK from its bytes, e.g. one stored earlier; as long as
    /// `hash`'s output.
    pub fn retained_from_bytes(hash: PskHash, key: &[u8]) -> Result<InputPsk, KeyFormatError> {
        if key.len() != hash.len() {
            return Err(KeyFormatError::HashLength {
                hash: hash.id(),
                expected: hash.len(),
                len: key.len(),
            });
        }
        Ok(InputPsk {
            kind: PskKind::Retained,
            hash,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// The generated PSK of secure channel concatenation (Base 2.1
    /// §8.3.5.5.9, Linux `nvme_auth_generate_psk`): HMAC-H(KS, C1 || C2),
    /// with H the DH-HMAC-CHAP hash, KS the session key and C1, C2 the two
    /// challenges.
    pub fn generated(hash: PskHash, session_key: &[u8], c1: &[u8], c2: &[u8]) -> InputPsk {
        InputPsk {
            kind: PskKind::Generated,
            hash,
            key: hash.hmac(session_key, &[c1, c2]),
        }
    }

    /// Retained or generated.
    pub fn kind(&self) -> PskKind {
        self.kind
    }

    /// The key's hash.
    pub fn hash(&self) -> PskHash {
        self.hash
    }

    /// The raw key bytes (handle with care).
    pub fn expose_secret(&self) -> &[u8] {
        &self.key
    }

    /// The PSK digest of a version 1 identity (TP 8018 §3.6.1.3; libnvme
    /// `derive_psk_digest`, Linux `nvme_auth_generate_digest`):
    /// Base64(HMAC-H(PSK, hostnqn || " " || subnqn || " " ||
    /// "NVMe-over-Fabrics")), 44 characters for SHA-256, 64 for SHA-384.
    pub fn digest(&self, hostnqn: &str, subnqn: &str) -> String {
        let mac = self.hash.hmac(
            &self.key,
            &[
                hostnqn.as_bytes(),
                b" ",
                subnqn.as_bytes(),
                b" ",
                b"NVMe-over-Fabrics",
            ],
        );
        STANDARD.encode(&mac[..])
    }

    /// The identity of `version` for this key (libnvme `gen_tls_identity`,
    /// SPDK `nvme_tcp_generate_psk_identity`).
    pub fn identity(
        &self,
        version: IdentityVersion,
        hostnqn: &str,
        subnqn: &str,
    ) -> Result<PskIdentity, IdentityError> {
        let digest = match version {
            IdentityVersion::V0 => None,
            IdentityVersion::V1 => Some(self.digest(hostnqn, subnqn)),
        };
        PskIdentity::new(version, self.kind, self.hash, hostnqn, subnqn, digest)
    }

    /// The TLS PSK for `identity` (§3.6.1.3): HKDF-Expand-Label(
    /// HKDF-Extract(0, PSK), "nvme-tls-psk", context, L) with the identity's
    /// hash, where the context is the identity string (version 0) or
    /// `"0h <digest>"` (version 1), as laid out by `derivation`.
    pub fn tls_psk(
        &self,
        identity: &PskIdentity,
        derivation: Derivation,
    ) -> Result<TlsPsk, DeriveError> {
        if identity.hash() != self.hash {
            return Err(DeriveError::HashMismatch {
                identity: bits(identity.hash()),
                key: bits(self.hash),
            });
        }
        if identity.kind() != self.kind {
            return Err(DeriveError::KindMismatch {
                identity: identity.kind(),
                key: self.kind,
            });
        }
        let whole = identity.to_string();
        let context: String = match (identity.digest(), derivation) {
            (None, _) => whole,
            (Some(_), Derivation::Libnvme14) => return Err(DeriveError::NoVersion1(derivation)),
            (Some(_), Derivation::Libnvme17 | Derivation::Libnvme17OpensslBug) => whole,
            (Some(d), Derivation::Libnvme110OpensslBug) => d.to_string(),
            (Some(d), Derivation::Rfc8446 | Derivation::Libnvme110 | Derivation::Linux614) => {
                format!("{:02} {d}", self.hash.id())
            }
        };
        let key = derivation.expand_label(
            self.hash,
            &self.key,
            "nvme-tls-psk",
            context.as_bytes(),
            self.hash.len(),
        )?;
        Ok(TlsPsk {
            suite: self.hash.suite(),
            key,
        })
    }
}

impl PartialEq for InputPsk {
    fn eq(&self, other: &InputPsk) -> bool {
        self.kind == other.kind
            && self.hash == other.hash
            && bool::from(self.key[..].ct_eq(&other.key[..]))
    }
}
impl Eq for InputPsk {}

impl fmt::Debug for InputPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "InputPsk({:?}, SHA-{}, {} bytes)",
            self.kind,
            bits(self.hash),
            self.key.len()
        )
    }
}

/// The key a TLS 1.3 handshake uses as its external PSK, and the cipher
/// suite it is to be used with.
#[derive(Clone)]
pub struct TlsPsk {
    suite: CipherSuite,
    key: Zeroizing<Vec<u8>>,
}

impl TlsPsk {
    /// Longest external PSK OpenSSL takes (`SSL_MAX_MASTER_KEY_LENGTH`).
    pub const MAX_LEN: usize = 48;

    /// A TLS PSK from raw bytes (1 to 48; NVMe's are as long as the suite's
    /// hash), e.g. the hex key of `openssl s_server -psk`.
    pub fn new(suite: CipherSuite, key: &[u8]) -> Result<TlsPsk, KeyFormatError> {
        if key.is_empty() || key.len() > Self::MAX_LEN {
            return Err(KeyFormatError::Length(key.len()));
        }
        Ok(TlsPsk {
            suite,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// The cipher suite the key is used with.
    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// Key length in bytes.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// The raw key bytes (handle with care).
    pub fn expose_secret(&self) -> &[u8] {
        &self.key
    }
}

impl PartialEq for TlsPsk {
    fn eq(&self, other: &TlsPsk) -> bool {
        self.suite == other.suite && bool::from(self.key[..].ct_eq(&other.key[..]))
    }
}
impl Eq for TlsPsk {}

impl fmt::Debug for TlsPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlsPsk({}, {} bytes)", self.suite, self.key.len())
    }
}

/// Any failure of [`ConfiguredPsk::derive`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    #[error(transparent)]
    Derive(#[from] DeriveError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

#[cfg(test)]
mod tests;
