//! `tls_key_file`: the text a host's `--tls-key` reads (a configured key, or
//! nvme-cli `--keyfile` lines of identities and exported TLS PSKs) through
//! `farflash_tls::keyfile::HostKey::parse`, and the exported-key parser
//! `parse_exported` on the same text.
//!
//! Checked: nothing panics; a configured key formats back to a string that
//! parses to the same key; every accepted line's key is as long as its
//! identity's hash and exported with the identity's version and hash; the
//! lines, written back as nvme-cli writes them, parse to the same keys;
//! `HostKey::find` finds a line for its own identity's host, subsystem and
//! version; no error message holds the base64 of an accepted key.

use farflash_tls::keyfile::{parse_exported, HostKey, KeyFileError};
use farflash_tls::psk::format_interchange;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((v, h, psk)) = parse_exported(text.trim()) {
        assert_eq!(psk.len(), h.len());
        let again = format_interchange(v.number(), h.id(), psk.expose_secret());
        assert_eq!(parse_exported(&again).map(|(_, _, p)| p).ok(), Some(psk));
    }
    match HostKey::parse(text) {
        Ok(HostKey::Configured(k)) => {
            let s = k.to_interchange();
            match HostKey::parse(&s) {
                Ok(HostKey::Configured(k2)) => assert_eq!(k2, k),
                other => panic!("{s:?} parses back as {other:?}"),
            }
        }
        Ok(HostKey::Derived(lines)) => {
            assert!(!lines.is_empty());
            let mut back = String::new();
            for d in &lines {
                let id = d.identity();
                assert_eq!(d.psk().len(), id.hash().len());
                assert_eq!(d.psk().suite(), id.hash().suite());
                let f = HostKey::find(&lines, id.hostnqn(), id.subnqn(), id.version())
                    .expect("a line for its own identity");
                assert_eq!(f.identity().hostnqn(), id.hostnqn());
                let e = format_interchange(
                    id.version().number(),
                    id.hash().id(),
                    d.psk().expose_secret(),
                );
                back.push_str(&format!("{id} {}\n", &e[..]));
            }
            match HostKey::parse(&back) {
                Ok(HostKey::Derived(again)) => {
                    assert_eq!(again.len(), lines.len());
                    for (a, b) in again.iter().zip(&lines) {
                        assert_eq!(a.identity(), b.identity());
                        assert_eq!(a.psk(), b.psk());
                    }
                }
                other => panic!("the lines written back parse as {other:?}"),
            }
        }
        // (a duplicate's message names its identity, which may hold anything)
        Err(e) if matches!(e, KeyFileError::Duplicate { .. }) => {}
        Err(e) => {
            let m = e.to_string();
            assert!(!m.contains("NVMeTLSkey-"), "an error repeats key text: {m}");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_reach_the_checks() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/tls_key_file");
        let (mut configured, mut derived) = (0, 0);
        for e in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            super::run(&data);
            match farflash_tls::keyfile::HostKey::parse(std::str::from_utf8(&data).unwrap()) {
                Ok(farflash_tls::keyfile::HostKey::Configured(_)) => configured += 1,
                Ok(farflash_tls::keyfile::HostKey::Derived(_)) => derived += 1,
                Err(_) => {}
            }
        }
        assert!(configured >= 1 && derived >= 2, "{configured} {derived}");
    }
}
