//! `tls_record`: a farflash TLS 1.3 server session
//! (`farflash_tls::Session::server`, OpenSSL 3 through `farflash-ssl-sys`)
//! fed hostile ciphertext. Without libssl.so.3 every input passes unread.
//!
//! Byte 0: bits 0-1 pick the mode, bit 2 the key's hash (SHA-256 or
//! SHA-384); the rest of the input is `data`.
//! - 0: `data` is all the client ever sends, from the first byte;
//! - 1: an honest farflash client's ClientHello with `data` XORed over it
//!   (cycled), so that the parser gets past the record layer and into the
//!   ClientHello callback (identities, binders);
//! - 2: the handshake completed in memory with an honest client, then
//!   `data` as further records;
//! - 3: as 2, then the client's records of `data` (as plaintext), with
//!   one byte flipped at the position `data[0]` picks.
//!
//! Ciphertext is fed in pieces of 1 to 64 bytes (sizes from `data`), and
//! the plaintext read after each. Checked: nothing panics; a failed session
//! wants to close, keeps returning the same error, and has at most a few
//! alerts to send; without the key no plaintext ever comes out (modes 0, 1
//! and 2), and in mode 3 only the client's bytes do.

use std::sync::OnceLock;

use farflash_tls::psk::{ConfiguredPsk, Derivation, IdentityVersion, PskHash};
use farflash_tls::session::PskChoice;
use farflash_tls::{ClientConfig, ServerConfig, Session, TlsPsk};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000f0321";
const SUBSYS: &str = "nqn.2026-11.io.farflash:fuzz";

struct Setup {
    client: ClientConfig,
    server: ServerConfig,
    keys: [(String, TlsPsk); 2],
}

/// Whether OpenSSL 3 is here, so that inputs are really run (the replay
/// test fails without it, `fuzz/tests/replay.rs`).
pub fn available() -> bool {
    setup().is_some()
}

fn setup() -> Option<&'static Setup> {
    static S: OnceLock<Option<Setup>> = OnceLock::new();
    S.get_or_init(|| {
        let key = |h: PskHash| {
            let k = ConfiguredPsk::new(&vec![0x5a; h.len()], Some(h)).unwrap();
            let (id, psk) = k
                .derive(HOST, SUBSYS, IdentityVersion::V1, Derivation::Rfc8446)
                .unwrap();
            (id.to_string(), psk)
        };
        let keys = [key(PskHash::Sha256), key(PskHash::Sha384)];
        let table = keys.clone();
        let server = ServerConfig::new(move |id: &[u8]| {
            table
                .iter()
                .position(|(k, _)| k.as_bytes() == id)
                .map(|i| PskChoice {
                    psk: table[i].1.clone(),
                    tag: i as u64,
                })
        })
        .ok()?;
        Some(Setup {
            client: ClientConfig::new().ok()?,
            server,
            keys,
        })
    })
    .as_ref()
}

/// Feeds `bytes` in pieces sized by `sizes`, reading plaintext after each.
fn feed(s: &mut Session, bytes: &[u8], sizes: &[u8], plain: &mut Vec<u8>) {
    let mut at = 0;
    let mut i = 0;
    let mut buf = [0u8; 4096];
    while at < bytes.len() {
        let n = (sizes.get(i % sizes.len().max(1)).copied().unwrap_or(63) as usize % 64 + 1)
            .min(bytes.len() - at);
        i += 1;
        let r = s.feed(&bytes[at..at + n]);
        at += n;
        if let Err(e) = r {
            check_failed(s, &e);
            return;
        }
        loop {
            match s.read_plaintext(&mut buf) {
                Ok(0) => break,
                Ok(k) => plain.extend_from_slice(&buf[..k]),
                Err(e) => {
                    check_failed(s, &e);
                    return;
                }
            }
        }
    }
}

fn check_failed(s: &mut Session, e: &farflash_tls::TlsError) {
    assert!(s.wants_close(), "{e}");
    assert_eq!(s.error(), Some(e));
    assert_eq!(s.feed(b"\x17\x03\x03\x00\x01x").as_ref().err(), Some(e));
    let mut buf = [0u8; 16];
    assert_eq!(s.read_plaintext(&mut buf).as_ref().err(), Some(e));
    // An alert record or two, never a stream.
    assert!(
        s.ciphertext().len() <= 4096,
        "{} bytes after {e}",
        s.ciphertext().len()
    );
}

fn pump(c: &mut Session, s: &mut Session) {
    for _ in 0..10 {
        let a = c.ciphertext().to_vec();
        c.consume_ciphertext(a.len());
        let _ = s.feed(&a);
        let b = s.ciphertext().to_vec();
        s.consume_ciphertext(b.len());
        let _ = c.feed(&b);
        if a.is_empty() && b.is_empty() {
            break;
        }
    }
}

pub fn run(input: &[u8]) {
    let Some(setup) = setup() else {
        return;
    };
    let Some((&sel, data)) = input.split_first() else {
        return;
    };
    let (id, psk) = &setup.keys[(sel >> 2 & 1) as usize];
    let mut s = Session::server(&setup.server).unwrap();
    let mut plain = Vec::new();
    match sel & 3 {
        0 => feed(&mut s, data, data, &mut plain),
        1 => {
            let mut c = Session::client(&setup.client, id.as_bytes(), psk.clone()).unwrap();
            let mut hello = c.ciphertext().to_vec();
            for (i, b) in hello.iter_mut().enumerate() {
                if !data.is_empty() {
                    *b ^= data[i % data.len()];
                }
            }
            feed(&mut s, &hello, data, &mut plain);
        }
        mode => {
            let mut c = Session::client(&setup.client, id.as_bytes(), psk.clone()).unwrap();
            pump(&mut c, &mut s);
            assert!(!s.is_handshaking() && s.error().is_none(), "{s:?}");
            if mode == 2 {
                feed(&mut s, data, data, &mut plain);
            } else {
                c.write_plaintext(data).unwrap();
                let mut rec = c.ciphertext().to_vec();
                if let Some(&at) = data.first() {
                    if !rec.is_empty() {
                        let at = at as usize % rec.len();
                        rec[at] ^= 0x80;
                    }
                }
                feed(&mut s, &rec, data, &mut plain);
                assert!(data.starts_with(&plain), "plaintext not the client's");
                return;
            }
        }
    }
    assert!(
        plain.is_empty(),
        "{} bytes of plaintext without the key",
        plain.len()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_mode_runs() {
        for sel in 0..8u8 {
            super::run(&[sel]);
            super::run(&[sel, 1, 2, 3, 0x16, 3, 1, 0, 4, 1, 0, 0, 0]);
        }
    }
}
