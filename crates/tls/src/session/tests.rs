//! Client and server sessions talking to each other in memory. Where
//! OpenSSL 3 is not installed each test fails, naming the package, unless
//! `FARFLASH_SKIP_TLS=1` asks for a printed skip (tests/run.sh refuses to
//! run with it set).

use super::*;
use crate::psk::{ConfiguredPsk, Derivation, IdentityVersion, PskIdentity};
use std::io::IoSlice;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e";
const SUB: &str = "nqn.2026-11.io.farflash:default";

fn available() -> bool {
    match ClientConfig::new() {
        Ok(_) => true,
        Err(e) if std::env::var_os("FARFLASH_SKIP_TLS").is_some_and(|v| v == "1") => {
            println!("SKIPPED (FARFLASH_SKIP_TLS=1): {e}");
            false
        }
        Err(e) => {
            panic!("OpenSSL 3 is needed (Debian: libssl3); FARFLASH_SKIP_TLS=1 skips visibly: {e}")
        }
    }
}

fn key(hash: crate::PskHash) -> ConfiguredPsk {
    let bytes: Vec<u8> = (0..hash.len() as u8).map(|b| b.wrapping_mul(7)).collect();
    ConfiguredPsk::new(&bytes, Some(hash)).unwrap()
}

/// A server knowing one configured key for HOST, resolving identities of
/// both versions with both derivations, tag 7.
fn server_for(k: ConfiguredPsk) -> ServerConfig {
    ServerConfig::new(move |id: &[u8]| {
        let id = PskIdentity::parse(id).ok()?;
        if id.hostnqn() != HOST || id.subnqn() != SUB {
            return None;
        }
        let (_, psk) = k.resolve(&id, &[Derivation::Rfc8446, Derivation::Libnvme110])?;
        Some(PskChoice { psk, tag: 7 })
    })
    .unwrap()
}

fn client_for(k: &ConfiguredPsk, v: IdentityVersion, d: Derivation) -> Session {
    let (id, psk) = k.derive(HOST, SUB, v, d).unwrap();
    Session::client(
        &ClientConfig::new().unwrap(),
        id.to_string().as_bytes(),
        psk,
    )
    .unwrap()
}

/// Moves ciphertext both ways until neither side has any; the first error
/// of each side.
fn pump(a: &mut Session, b: &mut Session) -> (Option<TlsError>, Option<TlsError>) {
    let (mut ea, mut eb) = (None, None);
    for _ in 0..100 {
        let mut moved = false;
        let ca = a.ciphertext().to_vec();
        a.consume_ciphertext(ca.len());
        if !ca.is_empty() {
            moved = true;
            if let Err(e) = b.feed(&ca) {
                eb.get_or_insert(e);
            }
        }
        let cb = b.ciphertext().to_vec();
        b.consume_ciphertext(cb.len());
        if !cb.is_empty() {
            moved = true;
            if let Err(e) = a.feed(&cb) {
                ea.get_or_insert(e);
            }
        }
        if !moved {
            break;
        }
    }
    (ea, eb)
}

fn read_all(s: &mut Session) -> Result<Vec<u8>, TlsError> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read_plaintext(&mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn established(hash: crate::PskHash, v: IdentityVersion, d: Derivation) -> (Session, Session) {
    let k = key(hash);
    let mut c = client_for(&k, v, d);
    let mut s = Session::server(&server_for(k)).unwrap();
    assert_eq!(pump(&mut c, &mut s), (None, None));
    assert_eq!(c.state(), State::Established);
    assert_eq!(s.state(), State::Established);
    (c, s)
}

#[test]
fn both_suites_both_identity_versions_both_derivations() {
    if !available() {
        return;
    }
    for hash in [crate::PskHash::Sha256, crate::PskHash::Sha384] {
        for v in [IdentityVersion::V0, IdentityVersion::V1] {
            for d in [Derivation::Rfc8446, Derivation::Libnvme110] {
                if v == IdentityVersion::V0 && d == Derivation::Libnvme110 {
                    continue; // a v0 identity resolves to the server's first derivation
                }
                let (mut c, mut s) = established(hash, v, d);
                assert_eq!(c.suite(), Some(hash.suite()), "{hash:?} {v:?} {d}");
                assert_eq!(s.suite(), Some(hash.suite()));
                assert_eq!(s.tag(), Some(7));
                assert_eq!(s.identity(), c.identity());
                assert_eq!(s.psk(), c.psk());
                let id = PskIdentity::parse(s.identity().unwrap()).unwrap();
                assert_eq!(id.version(), v);
                // Application data both ways.
                assert_eq!(c.write_plaintext(b"ICReq").unwrap(), 5);
                pump(&mut c, &mut s);
                assert_eq!(read_all(&mut s).unwrap(), b"ICReq");
                assert_eq!(s.write_plaintext(b"ICResp").unwrap(), 6);
                pump(&mut c, &mut s);
                assert_eq!(read_all(&mut c).unwrap(), b"ICResp");
            }
        }
    }
}

#[test]
fn a_version_0_identity_of_another_derivation_fails_on_the_binder() {
    if !available() {
        return;
    }
    // The server resolves v0 identities with RFC 8446 first; a libnvme 1.13
    // host derived its TLS PSK otherwise: same identity, other key.
    let k = key(crate::PskHash::Sha256);
    let mut c = client_for(&k, IdentityVersion::V0, Derivation::Libnvme110);
    let mut s = Session::server(&server_for(k)).unwrap();
    let (ec, es) = pump(&mut c, &mut s);
    assert!(
        matches!(es, Some(TlsError::AlertSent { alert: 47, .. })),
        "{es:?}"
    );
    assert!(
        matches!(ec, Some(TlsError::AlertReceived { alert: 47, .. })),
        "{ec:?}"
    );
}

#[test]
fn wrong_key_alert_and_error_on_both_sides() {
    if !available() {
        return;
    }
    let good = key(crate::PskHash::Sha384);
    let wrong = ConfiguredPsk::new(&[0x42; 48], Some(crate::PskHash::Sha384)).unwrap();
    // The client uses the identity the server knows, with another key.
    let (id, _) = good
        .derive(HOST, SUB, IdentityVersion::V0, Derivation::Rfc8446)
        .unwrap();
    let (_, bad_psk) = wrong
        .derive(HOST, SUB, IdentityVersion::V0, Derivation::Rfc8446)
        .unwrap();
    let mut c = Session::client(
        &ClientConfig::new().unwrap(),
        id.to_string().as_bytes(),
        bad_psk,
    )
    .unwrap();
    let mut s = Session::server(&server_for(good)).unwrap();
    let (ec, es) = pump(&mut c, &mut s);
    let es = es.expect("server error");
    let ec = ec.expect("client error");
    assert!(matches!(es, TlsError::AlertSent { alert: 47, .. }), "{es}");
    assert!(es.to_string().contains("binder does not verify"), "{es}");
    assert!(ec.to_string().contains("illegal parameter"), "{ec}");
    assert!(
        matches!(ec, TlsError::AlertReceived { alert: 47, .. }),
        "{ec}"
    );
    for x in [&mut c, &mut s] {
        assert_eq!(x.state(), State::Failed);
        assert!(x.wants_close());
        // The error sticks.
        assert!(x.feed(b"more").is_err());
        assert!(x.write_plaintext(b"x").is_err());
    }
}

#[test]
fn unknown_identity_gets_handshake_failure() {
    if !available() {
        return;
    }
    let k = key(crate::PskHash::Sha256);
    let (_, psk) = k
        .derive(HOST, SUB, IdentityVersion::V0, Derivation::Rfc8446)
        .unwrap();
    let mut c = Session::client(
        &ClientConfig::new().unwrap(),
        b"NVMe0R01 nqn.2014-08.org.example:stranger nqn.2026-11.io.farflash:default",
        psk,
    )
    .unwrap();
    let mut s = Session::server(&server_for(k)).unwrap();
    let (ec, es) = pump(&mut c, &mut s);
    assert_eq!(
        es,
        Some(TlsError::UnknownIdentity {
            offered: 1,
            first: "NVMe0R01 nqn.2014-08.org.example:stranger nqn.2026-11.io.farflash:default"
                .into()
        })
    );
    assert!(
        matches!(ec, Some(TlsError::AlertReceived { alert: 40, .. })),
        "{ec:?}"
    );
    assert!(ec.unwrap().to_string().contains("handshake failure"));
    assert_eq!(s.identity(), None);
    assert_eq!(s.tag(), None);
}

#[test]
fn a_panicking_lookup_fails_the_handshake_not_the_process() {
    if !available() {
        return;
    }
    let cfg = ServerConfig::new(|_: &[u8]| -> Option<PskChoice> { panic!("lookup bug") }).unwrap();
    let mut s = Session::server(&cfg).unwrap();
    let k = key(crate::PskHash::Sha256);
    let mut c = client_for(&k, IdentityVersion::V0, Derivation::Rfc8446);
    let (ec, es) = pump(&mut c, &mut s);
    assert_eq!(es, Some(TlsError::Lookup));
    assert!(
        matches!(ec, Some(TlsError::AlertReceived { alert: 80, .. })),
        "{ec:?}"
    );
}

#[test]
fn a_corrupted_record_is_an_error_and_an_alert_not_a_panic() {
    if !available() {
        return;
    }
    let (mut c, mut s) = established(
        crate::PskHash::Sha256,
        IdentityVersion::V1,
        Derivation::Rfc8446,
    );
    c.write_plaintext(&[0xab; 1000]).unwrap();
    let mut rec = c.ciphertext().to_vec();
    c.consume_ciphertext(rec.len());
    rec[100] ^= 0x01; // inside the encrypted payload
    s.feed(&rec).unwrap();
    let e = read_all(&mut s).unwrap_err();
    assert!(matches!(e, TlsError::AlertSent { alert: 20, .. }), "{e}");
    assert!(s.wants_close());
    let alert = s.ciphertext().to_vec();
    assert!(!alert.is_empty(), "the alert is to be sent");
    c.feed(&alert).unwrap();
    let e = read_all(&mut c).unwrap_err();
    assert!(
        matches!(e, TlsError::AlertReceived { alert: 20, .. }),
        "{e}"
    );
}

#[test]
fn garbage_plaintext_and_oversized_records_fail_cleanly() {
    if !available() {
        return;
    }
    let k = key(crate::PskHash::Sha256);
    // A plaintext NVMe/TCP ICReq (PDU type 0, 128 bytes) to a TLS server.
    let mut icreq = vec![0u8; 128];
    icreq[2] = 128;
    icreq[4] = 128;
    let mut s = Session::server(&server_for(k.clone())).unwrap();
    let e = s.feed(&icreq).unwrap_err();
    assert!(s.wants_close(), "{e}");
    // A handshake record header claiming more than 2^14 + 256 bytes.
    let mut s = Session::server(&server_for(k.clone())).unwrap();
    let e = s.feed(&[0x16, 0x03, 0x01, 0xff, 0xff]).unwrap_err();
    assert!(
        matches!(e, TlsError::AlertSent { .. } | TlsError::Protocol(_)),
        "{e}"
    );
    // After the handshake: an application record that is too long.
    let (_, mut s) = established(
        crate::PskHash::Sha256,
        IdentityVersion::V0,
        Derivation::Rfc8446,
    );
    s.feed(&[0x17, 0x03, 0x03, 0x48, 0x00]).unwrap();
    let e = read_all(&mut s).unwrap_err();
    assert!(matches!(e, TlsError::AlertSent { alert: 22, .. }), "{e}");
    // Random bytes of every length never panic.
    let mut x = 0x12345678u32;
    for len in 0..300 {
        let mut s = Session::server(&server_for(k.clone())).unwrap();
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let _ = s.feed(&bytes);
        let _ = read_all(&mut s);
        let _ = s.ciphertext();
    }
}

#[test]
fn a_handshake_cut_anywhere_waits_for_more() {
    if !available() {
        return;
    }
    let k = key(crate::PskHash::Sha384);
    let mut c = client_for(&k, IdentityVersion::V1, Derivation::Rfc8446);
    let mut s = Session::server(&server_for(k)).unwrap();
    let mut steps = Vec::new();
    // Every flight delivered one byte at a time: before its last byte the
    // receiver only waits (no error, no output, still handshaking).
    for _flight in 0..3 {
        let (from, to) = if c.ciphertext().is_empty() {
            (&mut s, &mut c)
        } else {
            (&mut c, &mut s)
        };
        let bytes = from.ciphertext().to_vec();
        from.consume_ciphertext(bytes.len());
        if bytes.is_empty() {
            break;
        }
        for (i, b) in bytes.iter().enumerate() {
            to.feed(&[*b]).unwrap();
            if i + 1 < bytes.len() {
                assert!(to.ciphertext().is_empty() || to.role() == Role::Client);
                assert!(to.error().is_none());
                steps.push(to.handshake_step());
            }
        }
    }
    assert_eq!(c.state(), State::Established);
    assert_eq!(s.state(), State::Established);
    assert!(steps.iter().any(|st| st.contains("hello")), "{steps:?}");
    // A server that never gets the client's Finished stays Handshaking
    // with nothing to say: the caller's timeout closes it.
    let k = key(crate::PskHash::Sha256);
    let mut c = client_for(&k, IdentityVersion::V0, Derivation::Rfc8446);
    let mut s = Session::server(&server_for(k)).unwrap();
    let hello = c.ciphertext().to_vec();
    s.feed(&hello[..hello.len() / 2]).unwrap();
    assert!(s.is_handshaking() && s.ciphertext().is_empty());
    s.feed(&hello[hello.len() / 2..]).unwrap();
    assert!(s.is_handshaking() && !s.ciphertext().is_empty());
    let mut buf = [0u8; 16];
    assert_eq!(s.read_plaintext(&mut buf).unwrap(), 0);
    assert_eq!(s.write_plaintext(b"early").unwrap(), 0);
    assert_eq!(s.key_update(true), Err(TlsError::Handshaking));
}

#[test]
fn large_data_round_trips_in_many_records() {
    if !available() {
        return;
    }
    let (mut c, mut s) = established(
        crate::PskHash::Sha384,
        IdentityVersion::V0,
        Derivation::Rfc8446,
    );
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
    assert_eq!(c.write_plaintext(&data).unwrap(), data.len());
    let wire = c.ciphertext().len();
    // 300 000 bytes in 16 KiB records: 19 records of 22 bytes overhead.
    assert_eq!(wire, data.len() + 19 * (5 + 16 + 1));
    pump(&mut c, &mut s);
    assert_eq!(read_all(&mut s).unwrap(), data);
    // Back, fed in odd pieces.
    s.write_plaintext(&data[..70_001]).unwrap();
    let ct = s.ciphertext().to_vec();
    s.consume_ciphertext(ct.len());
    let mut got = Vec::new();
    for piece in ct.chunks(777) {
        c.feed(piece).unwrap();
        got.extend(read_all(&mut c).unwrap());
    }
    assert_eq!(got, &data[..70_001]);
}

#[test]
fn output_buffers_are_reused_not_regrown() {
    if !available() {
        return;
    }
    let (mut c, mut s) = established(
        crate::PskHash::Sha256,
        IdentityVersion::V0,
        Derivation::Rfc8446,
    );
    let block = vec![5u8; 16 * 1024];
    let mut caps = Vec::new();
    for _ in 0..20 {
        c.write_plaintext(&block).unwrap();
        // Sent in two partial writes.
        let n = c.ciphertext().len();
        c.consume_ciphertext(n / 2);
        let rest = c.ciphertext().len();
        c.consume_ciphertext(rest);
        caps.push(c.sink().buf.capacity());
    }
    assert!(caps.windows(2).all(|w| w[0] == w[1]), "{caps:?}");
    let _ = &mut s;
}

#[test]
fn key_update_both_ways_and_data_keeps_flowing() {
    if !available() {
        return;
    }
    let (mut c, mut s) = established(
        crate::PskHash::Sha256,
        IdentityVersion::V1,
        Derivation::Libnvme110,
    );
    for round in 0..5u8 {
        c.key_update(round % 2 == 0).unwrap();
        c.write_plaintext(&[round; 100]).unwrap();
        pump(&mut c, &mut s);
        assert_eq!(read_all(&mut s).unwrap(), vec![round; 100]);
        // A requested update makes the server update its keys too, sent
        // with its next data.
        s.write_plaintext(&[round + 100; 50]).unwrap();
        pump(&mut c, &mut s);
        assert_eq!(read_all(&mut c).unwrap(), vec![round + 100; 50]);
        s.key_update(false).unwrap();
        pump(&mut c, &mut s);
        assert_eq!(read_all(&mut c).unwrap(), b"");
    }
    let before = s.post_handshake_messages();
    assert!((5..=10).contains(&before), "{before}");
    // A flood of updates is processed, not refused (the caller caps the
    // rate by the count).
    for _ in 0..200 {
        c.key_update(true).unwrap();
    }
    c.write_plaintext(b"after the flood").unwrap();
    pump(&mut c, &mut s);
    assert_eq!(read_all(&mut s).unwrap(), b"after the flood");
    let flood = s.post_handshake_messages() - before;
    assert!((200..=400).contains(&flood), "{flood}");
    s.write_plaintext(b"ok").unwrap();
    pump(&mut c, &mut s);
    assert_eq!(read_all(&mut c).unwrap(), b"ok");
}

#[test]
fn close_notify_both_ways() {
    if !available() {
        return;
    }
    let (mut c, mut s) = established(
        crate::PskHash::Sha256,
        IdentityVersion::V0,
        Derivation::Rfc8446,
    );
    c.write_plaintext(b"last words").unwrap();
    c.close();
    assert!(c.wants_close());
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.write_plaintext(b"x"), Err(TlsError::Closed));
    pump(&mut c, &mut s);
    assert_eq!(read_all(&mut s).unwrap(), b"last words");
    assert!(s.peer_closed() && s.wants_close());
    assert!(s.error().is_none());
    s.close();
    pump(&mut c, &mut s);
    assert_eq!(read_all(&mut c).unwrap(), b"");
    assert!(c.peer_closed());
    // Closing twice sends nothing more.
    c.close();
    assert!(c.ciphertext().is_empty());
}

#[test]
fn sessions_print_no_key_material() {
    if !available() {
        return;
    }
    let (c, s) = established(
        crate::PskHash::Sha256,
        IdentityVersion::V0,
        Derivation::Rfc8446,
    );
    let key = c.psk().unwrap().expose_secret().to_vec();
    for x in [
        format!("{c:?}"),
        format!("{s:?}"),
        format!("{:?}", c.psk().unwrap()),
    ] {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!x.contains(&hex[..8]), "{x}");
        assert!(!x.contains(&format!("{}, {}", key[0], key[1])), "{x}");
    }
    assert!(
        format!("{s:?}").contains("TLS_AES_128_GCM_SHA256") || format!("{s:?}").contains("Aes128")
    );
}

#[test]
fn psk_extension_parsing_is_bounded() {
    // identities<7..>: one identity "ab" with its age, then binders.
    let ext = [0, 8, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 33];
    assert_eq!(psk_identities(&ext), Some(vec![&b"ab"[..]]));
    assert_eq!(psk_identities(&[]), None);
    assert_eq!(psk_identities(&[0]), None);
    assert_eq!(psk_identities(&[0, 9, 0, 2, b'a', b'b', 0, 0, 0, 0]), None);
    assert_eq!(
        psk_identities(&[0, 6, 0, 0, 0, 0, 0, 0]),
        None,
        "empty identity"
    );
    assert_eq!(psk_identities(&[0, 0]), None, "no identity");
    assert_eq!(
        psk_identities(&[0, 7, 0, 3, b'a', b'b', b'c', 0, 0, 0]),
        None
    );
}

#[test]
fn the_session_pem_holds_the_key_and_suite() {
    if !available() {
        return;
    }
    let psk = TlsPsk::new(CipherSuite::Aes256GcmSha384, &[3; 48]).unwrap();
    let pem = psk_session_pem(&psk).unwrap();
    assert!(
        pem.starts_with("-----BEGIN SSL SESSION PARAMETERS-----"),
        "{}",
        &pem[..]
    );
    assert!(pem
        .trim_end()
        .ends_with("-----END SSL SESSION PARAMETERS-----"));
}

/// The application-data records in `ct`: their ciphertext lengths.
fn records(ct: &[u8]) -> Vec<usize> {
    let mut lens = Vec::new();
    let mut at = 0;
    while at + 5 <= ct.len() {
        assert_eq!(ct[at], 0x17, "an application_data record at {at}");
        let len = u16::from_be_bytes([ct[at + 3], ct[at + 4]]) as usize;
        lens.push(len);
        at += 5 + len;
    }
    assert_eq!(at, ct.len(), "whole records");
    lens
}

#[test]
fn write_vectored_gathers_short_pieces_and_sends_long_ones_in_full_records() {
    if !available() {
        return;
    }
    let (mut c, mut s) = established(
        crate::PskHash::Sha256,
        IdentityVersion::V1,
        Derivation::Rfc8446,
    );
    let tag = 16 + 1; // AES-GCM tag and the inner content type (RFC 8446 §5.2)
                      // A C2HData header, 4 KiB of data and a response: one record.
    let (h, d, r) = ([1u8; 24], [2u8; 4096], [3u8; 16]);
    let iov = [IoSlice::new(&h), IoSlice::new(&d), IoSlice::new(&r)];
    assert_eq!(s.write_vectored(&iov, usize::MAX).unwrap(), 4136);
    assert_eq!(records(s.ciphertext()), [4136 + tag]);
    pump(&mut c, &mut s);
    let got = read_all(&mut c).unwrap();
    assert_eq!(got, [&h[..], &d[..], &r[..]].concat());

    // 40,000 bytes then 10: two full records straight from the piece, the
    // rest and the 10 bytes in a third.
    let big: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
    let tail = [9u8; 10];
    let iov = [IoSlice::new(&big), IoSlice::new(&tail)];
    assert_eq!(s.write_vectored(&iov, usize::MAX).unwrap(), 40_010);
    let full = MAX_PLAINTEXT + tag;
    assert_eq!(
        records(s.ciphertext()),
        [full, full, 40_010 - 2 * MAX_PLAINTEXT + tag]
    );
    pump(&mut c, &mut s);
    assert_eq!(read_all(&mut c).unwrap(), [&big[..], &tail[..]].concat());

    // The output limit is looked at on record boundaries: with 1 byte
    // allowed, one full record goes and the rest is left to the caller.
    let pieces = [[5u8; 10_000], [6u8; 10_000], [7u8; 10_000]];
    let iov: Vec<IoSlice> = pieces.iter().map(|p| IoSlice::new(p)).collect();
    assert_eq!(s.write_vectored(&iov, 1).unwrap(), MAX_PLAINTEXT);
    assert_eq!(records(s.ciphertext()), [full]);
    // Nothing more is taken while that is unsent.
    assert_eq!(s.write_vectored(&iov, 1).unwrap(), 0);

    // Nothing is taken during the handshake.
    let k = key(crate::PskHash::Sha256);
    let mut fresh = Session::server(&server_for(k)).unwrap();
    assert_eq!(fresh.write_vectored(&iov, usize::MAX).unwrap(), 0);
}

#[test]
fn the_sink_keeps_unsent_bytes_in_order_and_drops_sent_ones() {
    let mut k = Sink {
        buf: Vec::new(),
        pos: 0,
    };
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    k.append(&data[..100_000]);
    k.consume(70_000); // past SINK_COMPACT: the sent bytes go
    assert_eq!(k.pos, 0);
    assert_eq!(k.pending(), &data[70_000..100_000]);
    k.append(&data[100_000..]);
    k.consume(10);
    assert_eq!(k.pending(), &data[70_010..]);
    k.consume(usize::MAX);
    assert!(k.pending().is_empty());
    assert!(k.buf.is_empty(), "all sent: emptied");
    k.append(b"x");
    assert_eq!(k.pending(), b"x");
}
