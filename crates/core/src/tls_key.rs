//! A host's TLS pre-shared key in the configuration (NVMe/TCP 1.0 §3.6.1.5,
//! the configured PSK), and which derivation layouts the target accepts
//! for it (`farflash_psk::Derivation`, docs/tls.md).
//!
//! `tls_key` under `[[subsystem.host]]` is either the interchange string
//! `NVMeTLSkey-1:0x:<base64>:` or the path of a file holding one (SPDK's
//! `psk` file; like SPDK, a file others may read or write is refused). The
//! key is parsed when read, zeroized when dropped, and printed (`Debug`)
//! only as its hash and length; saving the configuration writes back what
//! was configured, the string or the path. The command layer reads no
//! file: a key file's text comes from the control plane
//! (`farflash_control::key_files`, [`TlsKey::load`]); until then the key
//! resolves no identity.

use farflash_psk::{ConfiguredPsk, Derivation, PskChoice, PskIdentity, TlsPsk};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// Where a key came from: what `save_config` writes back.
#[derive(Clone, PartialEq, Eq)]
enum Source {
    /// The interchange string itself (a secret: zeroized, never printed).
    Inline(Zeroizing<String>),
    /// A file holding the interchange string.
    File(PathBuf),
}

/// A configured PSK. Compared in constant time in the key bytes.
#[derive(Clone, PartialEq)]
pub struct TlsKey {
    /// None: a key file not read yet.
    key: Option<ConfiguredPsk>,
    source: Source,
}

impl TlsKey {
    /// Longest key file read (an interchange string and a newline, with room).
    pub const MAX_FILE: u64 = 4096;

    /// The interchange string, or (when it does not start with
    /// `NVMeTLSkey-`) the path of a file holding it, to be read by the
    /// control plane ([`TlsKey::unread_file`], [`TlsKey::load`]). Errors
    /// name what is wrong with the key, never the key.
    pub fn parse(s: &str) -> Result<TlsKey, String> {
        let s = s.trim();
        if s.starts_with("NVMeTLSkey-") {
            let key = ConfiguredPsk::parse(s).map_err(|e| format!("tls_key: {e}"))?;
            return Ok(TlsKey {
                key: Some(key),
                source: Source::Inline(Zeroizing::new(s.to_owned())),
            });
        }
        Ok(TlsKey {
            key: None,
            source: Source::File(PathBuf::from(s)),
        })
    }

    /// The configured PSK; None while its key file is unread.
    pub fn key(&self) -> Option<&ConfiguredPsk> {
        self.key.as_ref()
    }

    /// The key file still to read, if any.
    pub fn unread_file(&self) -> Option<&Path> {
        self.key.is_none().then(|| self.path()).flatten()
    }

    /// Takes the key file's text (read by the control plane): the
    /// interchange string, surrounding white space ignored. Errors name
    /// the file, never the key.
    pub fn load(&mut self, text: &str) -> Result<(), String> {
        let name = self
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let key =
            ConfiguredPsk::parse(text.trim()).map_err(|e| format!("tls_key file {name}: {e}"))?;
        self.key = Some(key);
        Ok(())
    }

    /// The key file, when the key came from one.
    pub fn path(&self) -> Option<&Path> {
        match &self.source {
            Source::File(p) => Some(p),
            Source::Inline(_) => None,
        }
    }
}

impl fmt::Debug for TlsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // ConfiguredPsk's Debug prints its hash and length only.
        let mut d = f.debug_struct("TlsKey");
        d.field("key", &self.key);
        if let Source::File(p) = &self.source {
            d.field("file", p);
        }
        d.finish()
    }
}

impl std::str::FromStr for TlsKey {
    type Err = String;
    fn from_str(s: &str) -> Result<TlsKey, String> {
        TlsKey::parse(s)
    }
}

impl Serialize for TlsKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.source {
            Source::Inline(k) => s.serialize_str(k),
            Source::File(p) => s.serialize_str(&p.to_string_lossy()),
        }
    }
}

impl<'de> Deserialize<'de> for TlsKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TlsKey, D::Error> {
        let s = Zeroizing::new(String::deserialize(d)?);
        TlsKey::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The derivations accepted when a host's `tls_derivation` is empty: Debian
/// 13's nvme-cli 2.13 (`libnvme-1.10`, which the Linux 6.12 host gets its
/// keys from) first, then the RFC 8446 layout (SPDK, nvme-cli ≥ 2.16). A
/// version 1 identity picks the one its digest matches; a version 0
/// identity takes the first.
pub const DEFAULT_DERIVATIONS: [Derivation; 2] = [Derivation::Libnvme110, Derivation::Rfc8446];

/// Parses `tls_derivation` names (empty: [`DEFAULT_DERIVATIONS`]).
pub fn derivations(names: &[String]) -> Result<Vec<Derivation>, String> {
    if names.is_empty() {
        return Ok(DEFAULT_DERIVATIONS.to_vec());
    }
    names
        .iter()
        .map(|n| {
            Derivation::from_name(n.trim()).ok_or_else(|| {
                let all: Vec<&str> = Derivation::ALL.iter().map(|d| d.name()).collect();
                format!("unknown tls_derivation {n:?} ({})", all.join(", "))
            })
        })
        .collect()
}

/// The TLS PSK for a ClientHello's identity, if `identity` names `subnqn`'s
/// host `hostnqn`, whose key is `key` and whose accepted derivations are
/// `derivations`. The tag identifies the key generation ([`key_tag`]).
pub fn choose(key: &TlsKey, derivations: &[Derivation], identity: &PskIdentity) -> Option<TlsPsk> {
    key.key()?
        .resolve(identity, derivations)
        .map(|(_, psk)| psk)
}

/// A tag that tells keys apart without revealing them (the CRC-32 the
/// interchange format carries anyway, and the hash): reported in logs and
/// by the management API as which key a connection uses.
pub fn key_tag(key: &ConfiguredPsk) -> u64 {
    (key.crc() as u64) | ((key.hash().id() as u64) << 32)
}

/// The TLS PSK and its [`PskChoice`] for a ClientHello's `identity`
/// ([`choose`]).
pub fn choice(
    key: &TlsKey,
    derivations: &[Derivation],
    identity: &PskIdentity,
) -> Option<PskChoice> {
    let psk = choose(key, derivations, identity)?;
    Some(PskChoice {
        psk,
        tag: key_tag(key.key()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_psk::IdentityVersion;

    const KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

    #[test]
    fn inline_key_round_trips_and_debug_hides_it() {
        let k = TlsKey::parse(KEY).unwrap();
        let dbg = format!("{k:?}");
        assert!(!dbg.contains("VRLb"), "{dbg}");
        #[derive(Serialize, Deserialize)]
        struct W {
            k: TlsKey,
        }
        let text = toml::to_string(&W { k: k.clone() }).unwrap();
        assert!(text.contains(KEY));
        let back: W = toml::from_str(&text).unwrap();
        assert!(back.k == k);
        let e = TlsKey::parse("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrY:")
            .unwrap_err();
        assert!(e.contains("CRC"), "{e}");
        assert!(!e.contains("VRLb"), "{e}");
    }

    #[test]
    fn a_key_file_is_read_by_the_control_plane() {
        let mut k = TlsKey::parse("/etc/farflash/psk").unwrap();
        assert_eq!(k.unread_file(), Some(Path::new("/etc/farflash/psk")));
        assert!(k.key().is_none(), "nothing read here");
        let e = k.load("NVMeTLSkey-1:01:garbage:").unwrap_err();
        assert!(
            e.contains("/etc/farflash/psk") && !e.contains("garbage"),
            "{e}"
        );
        k.load(&format!("{KEY}\n")).unwrap();
        assert_eq!(k.unread_file(), None);
        assert!(k.key() == TlsKey::parse(KEY).unwrap().key());
        assert_eq!(k.path(), Some(Path::new("/etc/farflash/psk")));
    }

    #[test]
    fn defaults_resolve_both_layouts_of_v1_identities() {
        let k = TlsKey::parse(KEY).unwrap();
        let ds = derivations(&[]).unwrap();
        for d in [Derivation::Libnvme110, Derivation::Rfc8446] {
            let (id, psk) = k
                .key()
                .unwrap()
                .derive(
                    "nqn.psk-test-host",
                    "nqn.psk-test-subsys",
                    IdentityVersion::V1,
                    d,
                )
                .unwrap();
            assert!(choose(&k, &ds, &id) == Some(psk), "{d:?}");
        }
        // v0 takes the first candidate.
        let (id, psk) = k
            .key()
            .unwrap()
            .derive(
                "nqn.h",
                "nqn.s",
                IdentityVersion::V0,
                Derivation::Libnvme110,
            )
            .unwrap();
        assert!(choose(&k, &ds, &id) == Some(psk));
        let only = derivations(&["rfc8446".into()]).unwrap();
        assert!(choose(&k, &only, &id).is_some_and(|p| p != psk_of(&k, &id)));
        let e = derivations(&["nope".into()]).unwrap_err();
        assert!(e.contains("libnvme-1.10"), "{e}");
    }

    fn psk_of(k: &TlsKey, id: &PskIdentity) -> TlsPsk {
        choose(k, &DEFAULT_DERIVATIONS, id).unwrap()
    }
}
