//! The key a host is given (`farflash ... --tls --tls-key KEY`): either a
//! configured PSK in the interchange format (`NVMeTLSkey-1:HH:...:`,
//! NVMe/TCP 1.0 §3.6.1.5), from which each connection derives its identity
//! and TLS PSK, or the lines of a key file as nvme-cli's `--keyfile`
//! (libnvme `append_keyfile`, nvme-cli 2.13) and `nvme tls-key --export`
//! write them: `<identity> NVMeTLSkey-<v>:<hh>:<base64(TLS PSK || CRC-32)>:`,
//! the TLS PSK already derived for that identity.
//!
//! [`HostKey::parse`] reads hostile text (a file anyone may have edited):
//! bounded, line by line, and no error repeats any part of a key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::fmt;
use zeroize::Zeroizing;

use crate::psk::{
    ConfiguredPsk, IdentityError, IdentityVersion, KeyFormatError, PskHash, PskIdentity, TlsPsk,
};

/// Longest key text read (a file of a few hundred identities).
pub const MAX_TEXT: usize = 256 * 1024;
/// Most key lines taken.
pub const MAX_LINES: usize = 1024;

/// Why key text was refused. Holds no key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    #[error("the key text is {0} bytes; at most {MAX_TEXT} are read")]
    TooLong(usize),
    #[error("no key in the key text (empty, or only comments)")]
    Empty,
    #[error("more than {MAX_LINES} key lines")]
    TooManyLines,
    #[error("line {line}: {source}")]
    Configured { line: usize, source: KeyFormatError },
    #[error("line {line}: the identity before the key: {source}")]
    Identity { line: usize, source: IdentityError },
    #[error("line {line}: the exported TLS PSK: {why}")]
    Exported { line: usize, why: String },
    #[error("line {line}: a configured key (NVMeTLSkey-1:HH:...:) alone on a line, or an identity followed by its exported TLS PSK; a line holds one or the other")]
    Mixed { line: usize },
    #[error("line {line}: identity '{identity}' is given twice")]
    Duplicate { line: usize, identity: String },
}

/// One key file line: an identity and the TLS PSK derived for it.
#[derive(Clone, Debug)]
pub struct DerivedKey {
    identity: PskIdentity,
    psk: TlsPsk,
}

impl DerivedKey {
    /// The identity the line is for.
    pub fn identity(&self) -> &PskIdentity {
        &self.identity
    }
    /// Its TLS PSK.
    pub fn psk(&self) -> &TlsPsk {
        &self.psk
    }
}

/// What `--tls-key` gave a host.
#[derive(Clone)]
pub enum HostKey {
    /// One configured PSK: every connection derives its identity and key.
    Configured(ConfiguredPsk),
    /// Key file lines: a connection takes the line of its identity.
    Derived(Vec<DerivedKey>),
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostKey::Configured(k) => write!(f, "HostKey::Configured({k:?})"),
            HostKey::Derived(v) => write!(f, "HostKey::Derived({} lines)", v.len()),
        }
    }
}

/// Reads an exported TLS PSK, `NVMeTLSkey-<v>:<hh>:<base64>:` with `v` the
/// identity's version (0 or 1) and `hh` its hash (01 or 02), as libnvme's
/// `nvme_export_tls_key_versioned` writes it for a key file: a key as long
/// as the hash, its CRC-32 (little-endian) after it.
pub fn parse_exported(s: &str) -> Result<(IdentityVersion, PskHash, TlsPsk), String> {
    let rest = s
        .strip_prefix("NVMeTLSkey-")
        .ok_or("it does not start with 'NVMeTLSkey-'")?;
    let mut parts = rest.splitn(4, ':');
    let version = match parts.next() {
        Some("0") => IdentityVersion::V0,
        Some("1") => IdentityVersion::V1,
        _ => return Err("its version is not 0 or 1".into()),
    };
    let hash = match parts.next() {
        Some("01") => PskHash::Sha256,
        Some("02") => PskHash::Sha384,
        _ => return Err("its hash is not 01 or 02".into()),
    };
    let b64 = parts.next().ok_or("it has no base64 part")?;
    if parts.next() != Some("") {
        return Err("it does not end with ':' after its base64 part".into());
    }
    if b64.len() > 72 {
        return Err("its base64 part is longer than a 48-byte key's".into());
    }
    let raw = Zeroizing::new(
        STANDARD
            .decode(b64)
            .map_err(|_| "its base64 part is not valid (standard alphabet, padded)")?,
    );
    if raw.len() != hash.len() + 4 {
        return Err(format!(
            "hash {:02} needs a {}-byte key, this one is {} bytes",
            hash.id(),
            hash.len(),
            raw.len().saturating_sub(4)
        ));
    }
    let (key, crc) = raw.split_at(hash.len());
    if crc32fast::hash(key).to_le_bytes() != crc {
        return Err("its CRC-32 does not match its key (mistyped or truncated?)".into());
    }
    let psk = TlsPsk::new(hash.suite(), key).map_err(|e| e.to_string())?;
    Ok((version, hash, psk))
}

impl HostKey {
    /// Parses key text: a configured key alone (the text may end with a
    /// newline), or key file lines. Empty lines and lines starting with
    /// `#` are skipped; surrounding spaces of a line are ignored.
    pub fn parse(text: &str) -> Result<HostKey, KeyFileError> {
        if text.len() > MAX_TEXT {
            return Err(KeyFileError::TooLong(text.len()));
        }
        let mut configured: Option<ConfiguredPsk> = None;
        let mut derived: Vec<DerivedKey> = Vec::new();
        let mut taken = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            taken += 1;
            if taken > MAX_LINES {
                return Err(KeyFileError::TooManyLines);
            }
            match l.rsplit_once(' ') {
                None => {
                    if configured.is_some() || !derived.is_empty() {
                        return Err(KeyFileError::Mixed { line });
                    }
                    configured = Some(
                        ConfiguredPsk::parse(l)
                            .map_err(|source| KeyFileError::Configured { line, source })?,
                    );
                }
                Some((id, key)) => {
                    if configured.is_some() {
                        return Err(KeyFileError::Mixed { line });
                    }
                    let identity = PskIdentity::parse(id.trim_end().as_bytes())
                        .map_err(|source| KeyFileError::Identity { line, source })?;
                    let (version, hash, psk) =
                        parse_exported(key).map_err(|why| KeyFileError::Exported { line, why })?;
                    if version != identity.version() || hash != identity.hash() {
                        return Err(KeyFileError::Exported {
                            line,
                            why: format!(
                                "it is exported as version {} hash {:02}, its identity is version {} hash {:02}",
                                version.number(),
                                hash.id(),
                                identity.version().number(),
                                identity.hash().id()
                            ),
                        });
                    }
                    if derived.iter().any(|d| d.identity == identity) {
                        return Err(KeyFileError::Duplicate {
                            line,
                            identity: identity.to_string(),
                        });
                    }
                    derived.push(DerivedKey { identity, psk });
                }
            }
        }
        match configured {
            Some(k) => Ok(HostKey::Configured(k)),
            None if derived.is_empty() => Err(KeyFileError::Empty),
            None => Ok(HostKey::Derived(derived)),
        }
    }

    /// The key file line for `hostnqn`/`subnqn` of `version` (of either
    /// hash, SHA-384 first as Linux's `nvme_tls_psk_default` prefers), if
    /// any; for messages, the identities there are otherwise.
    pub fn find<'a>(
        lines: &'a [DerivedKey],
        hostnqn: &str,
        subnqn: &str,
        version: IdentityVersion,
    ) -> Option<&'a DerivedKey> {
        [PskHash::Sha384, PskHash::Sha256].iter().find_map(|&h| {
            lines.iter().find(|d| {
                let id = &d.identity;
                id.version() == version
                    && id.hash() == h
                    && id.hostnqn() == hostnqn
                    && id.subnqn() == subnqn
                    && id.kind() == crate::psk::PskKind::Retained
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psk::Derivation;

    // libnvme test/psk.c's key, as in crates/tls's other tests.
    const KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const HOST: &str = "nqn.psk-test-host";
    const SUB: &str = "nqn.psk-test-subsys";

    fn line(v: IdentityVersion) -> String {
        let k = ConfiguredPsk::parse(KEY).unwrap();
        crate::keytool::keyfile_line(&k, HOST, SUB, v, Derivation::Libnvme110)
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_configured_key_alone() {
        let HostKey::Configured(k) = HostKey::parse(&format!("{KEY}\n")).unwrap() else {
            panic!("not a configured key");
        };
        assert_eq!(&k.to_interchange()[..], KEY);
    }

    #[test]
    fn nvme_cli_keyfile_lines_give_the_derived_keys() {
        let text = format!(
            "# keys\n\n{}{}",
            line(IdentityVersion::V0),
            line(IdentityVersion::V1)
        );
        let HostKey::Derived(lines) = HostKey::parse(&text).unwrap() else {
            panic!("not key file lines");
        };
        assert_eq!(lines.len(), 2);
        let k = ConfiguredPsk::parse(KEY).unwrap();
        for v in [IdentityVersion::V0, IdentityVersion::V1] {
            let (id, tls) = k.derive(HOST, SUB, v, Derivation::Libnvme110).unwrap();
            let d = HostKey::find(&lines, HOST, SUB, v).unwrap();
            assert_eq!(d.identity(), &id);
            assert_eq!(d.psk(), &tls);
        }
        assert!(HostKey::find(&lines, HOST, "nqn.other", IdentityVersion::V0).is_none());
        assert!(!format!("{:?}", HostKey::parse(&text).unwrap()).contains("NVMeTLSkey"));
    }

    #[test]
    fn refusals_name_the_line_and_never_the_key() {
        let l0 = line(IdentityVersion::V0);
        let exported = l0.trim_end().rsplit_once(' ').unwrap().1.to_string();
        let secret_part = exported.split(':').nth(2).unwrap().to_string();
        let cases = [
            (String::new(), "no key"),
            (format!("{KEY}\n{KEY}\n"), "line 2"),
            (format!("{l0}{KEY}\n"), "line 2"),
            (
                l0.replacen("NVMe0R01", "NVMe0R03", 1),
                "hash is not 01 or 02",
            ),
            (
                l0.replacen("NVMeTLSkey-0", "NVMeTLSkey-1", 1),
                "exported as version 1",
            ),
            (l0.replacen(&secret_part[..4], "AAAA", 1), "CRC-32"),
            (l0.replacen(":\n", "\n", 1), "end with ':'"),
            (format!("{l0}{l0}"), "given twice"),
            (format!("x{}", KEY.replacen("VRLb", "VRLc", 1)), "line 1"),
            ("x".repeat(MAX_TEXT + 1), "at most"),
        ];
        for (text, want) in cases {
            let e = HostKey::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            assert!(!e.contains(&secret_part[..12]), "{e}");
            assert!(!e.contains("VRLbtnN9"), "{e}");
        }
    }
}
