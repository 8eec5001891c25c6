//! `tls_key_format`: the NVMe TLS key parsers of `farflash_tls::psk` on
//! hostile text. Byte 0 picks the parser (even: the PSK interchange format,
//! `ConfiguredPsk::parse`; odd: a PSK identity as a ClientHello carries it,
//! `PskIdentity::parse`); the rest is the input.
//!
//! Checked: nothing panics; an accepted key is 32 or 48 bytes, as its hash
//! field requires, and formats back to the very input; every derivation of
//! it runs, and the identity each gives resolves back to the same TLS PSK;
//! an accepted identity is at most `PskIdentity::MAX_LEN` bytes, prints
//! back as the input, and resolving it against a fixed key never panics.

use farflash_tls::psk::{ConfiguredPsk, Derivation, IdentityVersion, PskIdentity, PskKind};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000f0320";
const SUBSYS: &str = "nqn.2026-11.io.farflash:fuzz";

pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        let Ok(k) = ConfiguredPsk::parse(text) else {
            return;
        };
        assert!(matches!(k.len(), 32 | 48), "{} bytes", k.len());
        if let Some(h) = k.transform() {
            assert_eq!(h.len(), k.len());
        }
        assert_eq!(&k.to_interchange()[..], text);
        for d in Derivation::ALL {
            for v in [IdentityVersion::V0, IdentityVersion::V1] {
                let Ok((id, tls)) = k.derive(HOST, SUBSYS, v, d) else {
                    continue;
                };
                assert_eq!(tls.suite(), k.hash().suite());
                let (_, again) = k
                    .resolve(&id, &[d])
                    .unwrap_or_else(|| panic!("{id} does not resolve under {d}"));
                assert_eq!(again, tls, "{id} {d}");
            }
        }
    } else {
        let Ok(id) = PskIdentity::parse(rest) else {
            return;
        };
        assert!(rest.len() <= PskIdentity::MAX_LEN);
        assert_eq!(id.to_string().as_bytes(), rest);
        assert_eq!(id.digest().is_some(), id.version() == IdentityVersion::V1);
        let key = ConfiguredPsk::new(&[0x42; 48], None).unwrap();
        if let Some((_, tls)) = key.resolve(&id, &Derivation::ALL) {
            assert_eq!(id.kind(), PskKind::Retained);
            assert_eq!(tls.suite(), id.hash().suite());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_reach_the_checks() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/tls_key_format");
        let mut accepted = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            super::run(&data);
            let rest = &data[1..];
            let ok = if data[0] & 1 == 0 {
                farflash_tls::ConfiguredPsk::parse(std::str::from_utf8(rest).unwrap()).is_ok()
            } else {
                farflash_tls::PskIdentity::parse(rest).is_ok()
            };
            accepted += ok as usize;
        }
        assert!(accepted >= 4, "{accepted} seeds accepted");
    }
}
