//! Test vectors. Where they come from:
//!
//! - libnvme's test/psk.c (`test_data_psk`, `test_data_identity`,
//!   `test_data_identity_compat`, libnvme 1.16): the interchange strings of
//!   its 32- and 48-byte keys and the version 1 identities of both
//!   derivations, whose digests are HMACs keyed with the retained PSK, so
//!   they check the retained derivations end to end;
//! - SPDK's test/unit/lib/nvmf/tcp.c/tcp_ut.c (`psk_id_reference`) and
//!   test/nvmf/host/async_init.sh (an interchange key);
//! - nvme-cli's Documentation/nvme-tls-key.txt (an interchange key);
//! - the TLS PSKs (which no anchor's tests print) and retained PSKs of
//!   every variant: OpenSSL 3.0's HKDF through `openssl kdf` on the info
//!   bytes laid out as each anchor's source does (see
//!   tests/openssl_kdf.rs, which recomputes a few of them live); the same
//!   script reproduces libnvme's identity vectors above.

use super::*;

const KEY32: [u8; 32] = [
    0x55, 0x12, 0xDB, 0xB6, 0x73, 0x7D, 0x01, 0x06, 0xF6, 0x59, 0x75, 0xB7, 0x73, 0xDF, 0xB0, 0x11,
    0xFF, 0xC3, 0x44, 0xBC, 0xF4, 0x42, 0xE2, 0xDD, 0x6D, 0x8B, 0xC4, 0x87, 0x0B, 0x5D, 0x5B, 0x03,
];

fn key48() -> Vec<u8> {
    let mut k = KEY32.to_vec();
    k.extend_from_slice(&KEY32[16..]);
    k
}

const HOST: &str = "nqn.psk-test-host";
const SUBSYS: &str = "nqn.psk-test-subsys";

// libnvme test/psk.c, test_data_psk.
const LIBNVME_00: &str = "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
const LIBNVME_01: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
const LIBNVME_02: &str =
    "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";

// libnvme test/psk.c, test_data_identity (RFC 8446 derivation) and
// test_data_identity_compat (libnvme <= 1.15 derivation).
const ID1_SHA256: &str =
    "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=";
const ID1_SHA384: &str = "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a";
const ID1_SHA256_COMPAT: &str =
    "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys 66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM=";
const ID1_SHA384_COMPAT: &str = "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn k01() -> ConfiguredPsk {
    ConfiguredPsk::parse(LIBNVME_01).unwrap()
}

fn k02() -> ConfiguredPsk {
    ConfiguredPsk::parse(LIBNVME_02).unwrap()
}

#[test]
fn interchange_parses_and_formats_libnvme_vectors() {
    let k = ConfiguredPsk::parse(LIBNVME_00).unwrap();
    assert_eq!(k.expose_secret(), &KEY32[..]);
    assert_eq!(k.transform(), None);
    assert_eq!(k.hash(), PskHash::Sha256);
    assert_eq!(&k.to_interchange()[..], LIBNVME_00);

    let k = k01();
    assert_eq!(k.expose_secret(), &KEY32[..]);
    assert_eq!(k.transform(), Some(PskHash::Sha256));
    assert_eq!(&k.to_interchange()[..], LIBNVME_01);
    assert_eq!(k.crc().to_le_bytes(), [0x5f, 0xf4, 0xba, 0xd9]);

    let k = k02();
    assert_eq!(k.expose_secret(), &key48()[..]);
    assert_eq!(k.transform(), Some(PskHash::Sha384));
    assert_eq!(&k.to_interchange()[..], LIBNVME_02);

    let k = ConfiguredPsk::new(&key48(), None).unwrap();
    assert_eq!(k.hash(), PskHash::Sha384);
    assert!(k.to_interchange().starts_with("NVMeTLSkey-1:00:VRLbtnN9"));
}

#[test]
fn interchange_parses_spdk_and_nvme_cli_examples() {
    // SPDK test/nvmf/host/async_init.sh: the ASCII of a hex string as key.
    let k =
        ConfiguredPsk::parse("NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:")
            .unwrap();
    assert_eq!(k.expose_secret(), b"00112233445566778899aabbccddeeff");
    // nvme-cli Documentation/nvme-tls-key.txt.
    let doc = "NVMeTLSkey-1:01:/b9tVz2OXJVISnoFgrPAygyS86XYJWkAapQeULns6PMpM8wv:";
    let k = ConfiguredPsk::parse(doc).unwrap();
    assert_eq!(
        k.expose_secret(),
        &hex("fdbf6d573d8e5c95484a7a0582b3c0ca0c92f3a5d82569006a941e50b9ece8f3")[..]
    );
    assert_eq!(&k.to_interchange()[..], doc);
}

#[test]
fn interchange_refusals_name_the_fault_and_never_the_key() {
    use KeyFormatError as E;
    let cases: &[(&str, E)] = &[
        ("", E::Prefix),
        ("NVMeTLSKey-1:01:x:", E::Prefix),
        (
            "DHHC-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            E::Prefix,
        ),
        (
            "NVMeTLSkey-2:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            E::Version(2),
        ),
        (
            "NVMeTLSkey-01:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            E::Prefix,
        ),
        (
            "NVMeTLSkey-1:03:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            E::Hash,
        ),
        (
            "NVMeTLSkey-1:1:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            E::Hash,
        ),
        ("NVMeTLSkey-1:01", E::Hash),
        (
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ",
            E::Trailer,
        ),
        (
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:\n",
            E::Trailer,
        ),
        (
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ::",
            E::Trailer,
        ),
        (
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9Lr*:",
            E::Base64,
        ),
        (
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ=:",
            E::Base64,
        ),
        (
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrY:",
            E::Crc,
        ),
        ("NVMeTLSkey-1:01::", E::Length(0)),
        ("NVMeTLSkey-1:01:AAAAAAAA:", E::Length(2)),
        (
            LIBNVME_02.replace(":02:", ":01:").leak(),
            E::HashLength {
                hash: 1,
                expected: 32,
                len: 48,
            },
        ),
        (
            LIBNVME_01.replace(":01:", ":02:").leak(),
            E::HashLength {
                hash: 2,
                expected: 48,
                len: 32,
            },
        ),
    ];
    for (s, want) in cases {
        let got = ConfiguredPsk::parse(s).unwrap_err();
        assert_eq!(&got, want, "{s:?}");
        let msg = got.to_string();
        assert!(!msg.contains("VRLbtn") && !msg.contains("5512"), "{msg}");
    }
    // Far too long: refused on its length before decoding.
    let long = format!("NVMeTLSkey-1:00:{}:", "A".repeat(4000));
    assert!(matches!(ConfiguredPsk::parse(&long), Err(E::Length(_))));
    assert!(ConfiguredPsk::new(&[7; 40], None).is_err());
}

#[test]
fn retained_psks_of_every_variant() {
    // openssl kdf HKDF over each layout (module docs).
    let want32: &[(Derivation, &str)] = &[
        (
            Derivation::Rfc8446,
            "073311dec37e219ff3acd43f130130c5bdd443c066e1cc3424e49030234ff7d5",
        ),
        (
            Derivation::Libnvme110,
            "ad4cdadfcbaf4e353fcbd09aac891c4d75c5300fe5ee7bb04ae87726a312eddc",
        ),
        (
            Derivation::Libnvme17,
            "ad4cdadfcbaf4e353fcbd09aac891c4d75c5300fe5ee7bb04ae87726a312eddc",
        ),
        (
            Derivation::Libnvme14,
            "e786992c701ed4920ec1a950428859889e77c76593c394cae529f4b6655979aa",
        ),
        (
            Derivation::Libnvme110OpensslBug,
            "2b972fc3cf9597f8d053c73ff6556e1fa0c016bfeaa578d8afe9836cb933d79a",
        ),
        (
            Derivation::Libnvme17OpensslBug,
            "2b972fc3cf9597f8d053c73ff6556e1fa0c016bfeaa578d8afe9836cb933d79a",
        ),
        (
            Derivation::Linux614,
            "b725bcce36b3faa6103586c71ddc0e9912db80df0fc3d746e801f57f05b12858",
        ),
    ];
    for (d, want) in want32 {
        let r = k01().retained(HOST, *d).unwrap();
        assert_eq!(r.expose_secret(), &hex(want)[..], "{d}");
        assert_eq!(r.kind(), PskKind::Retained);
    }
    let want48: &[(Derivation, &str)] = &[
        (Derivation::Rfc8446, "73973a1b51a9acdde29a0610ac6a3ef852cf45936cca6830a661d18f68502f1a4c7a8ecb37524e0b1f7087cb4d680ad9"),
        (Derivation::Libnvme110, "12d2452bc4783f50286bf940ad1caa05a304065e379024d9278ca7c9d8a42400c47029f198bfcdf5f14c07cb04eb7306"),
        (Derivation::Libnvme14, "36789ab2ccb4e806f9d9789db92b4e6aaea112b7bbe62fd99c93c88a3f4b78465833ee0c00067b2ce9f975cd0918a4f4"),
        (Derivation::Libnvme110OpensslBug, "b5d47e8a741d003b2eeb7c8665d62b6cc7a30b859ab051a4f339c044e31750f0054940e22d1a0b6e479a494556582fc1"),
        (Derivation::Linux614, "4f8fdaa8bfa06b27f691b06708569cc4a9f1cde6523974cc1bd466f60bb9fd48c9945378b01c5ff1c3561989ecdd7e61"),
    ];
    for (d, want) in want48 {
        assert_eq!(
            k02().retained(HOST, *d).unwrap().expose_secret(),
            &hex(want)[..],
            "{d}"
        );
    }
    // HH 00: the configured key is the retained key, in every variant.
    let plain = ConfiguredPsk::parse(LIBNVME_00).unwrap();
    for d in Derivation::ALL {
        assert_eq!(plain.retained(HOST, d).unwrap().expose_secret(), &KEY32[..]);
    }
}

#[test]
fn version_1_identities_match_libnvme() {
    for (k, d, want) in [
        (k01(), Derivation::Rfc8446, ID1_SHA256),
        (k02(), Derivation::Rfc8446, ID1_SHA384),
        (k01(), Derivation::Libnvme110, ID1_SHA256_COMPAT),
        (k02(), Derivation::Libnvme110, ID1_SHA384_COMPAT),
        (k01(), Derivation::Libnvme17, ID1_SHA256_COMPAT),
    ] {
        let (id, _) = k.derive(HOST, SUBSYS, IdentityVersion::V1, d).unwrap();
        assert_eq!(id.to_string(), want, "{d}");
        assert_eq!(PskIdentity::parse(want.as_bytes()).unwrap(), id);
    }
    // Digest lengths as TP 8018 says: 44 characters for SHA-256, 64 for SHA-384.
    let id = PskIdentity::parse(ID1_SHA384.as_bytes()).unwrap();
    assert_eq!(id.digest().unwrap().len(), 64);
}

#[test]
fn version_0_identity_matches_spdk() {
    // SPDK tcp_ut.c test_nvmf_tcp_tls_generate_psk_id.
    let k =
        ConfiguredPsk::parse("NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:")
            .unwrap();
    let (id, tls) = k
        .derive(
            "nqn.2016-06.io.spdk:host1",
            "nqn.2016-06.io.spdk:cnode1",
            IdentityVersion::V0,
            Derivation::Rfc8446,
        )
        .unwrap();
    assert_eq!(
        id.to_string(),
        "NVMe0R01 nqn.2016-06.io.spdk:host1 nqn.2016-06.io.spdk:cnode1"
    );
    assert_eq!(
        k.retained("nqn.2016-06.io.spdk:host1", Derivation::Rfc8446)
            .unwrap()
            .expose_secret(),
        &hex("1fec2d4b69d3cb88e56214d464f00b168d2a635024b7a893aa6fad2840f49f2a")[..]
    );
    assert_eq!(
        tls.expose_secret(),
        &hex("45956d30221db43e664e8d6e78a79c31a81824cbd12acfdaca0e6032b335bbd9")[..]
    );
    assert_eq!(tls.suite(), CipherSuite::Aes128GcmSha256);
}

#[test]
fn tls_psks_of_every_variant() {
    // (key, derivation, identity version, TLS PSK) from openssl kdf.
    let v: &[(u8, Derivation, u8, &str)] = &[
        (1, Derivation::Rfc8446, 0, "05c6503551ad136e6ee32e6eeb3f6d500b69701d84ec71e328f65c7f51566f68"),
        (1, Derivation::Rfc8446, 1, "8fc3c0badfd4c0c66fa3ca33aadd0314f85536cc9bc47338b60f3e6e563786ca"),
        (1, Derivation::Libnvme110, 0, "09fb1983ac6d6d0353e7cae4f23daddd651c367fa347c59d9cf6936f5a83eafb"),
        (1, Derivation::Libnvme110, 1, "b9f5ab2a41ba6e72a23a12066302a2f775fa6c0942c8e0b18ca8ac07edf305e2"),
        (1, Derivation::Libnvme17, 0, "09fb1983ac6d6d0353e7cae4f23daddd651c367fa347c59d9cf6936f5a83eafb"),
        (1, Derivation::Libnvme17, 1, "3a18e5f719d469d055102758a9c3c3a2f6f4e856f11c54d4c350adfa449d8a3c"),
        (1, Derivation::Libnvme14, 0, "03186a88bb7a5cc1705025cdb2b75969816d73cf82f8d0d7b694e2929999c2e7"),
        (1, Derivation::Libnvme110OpensslBug, 0, "c45ffd126b73c01299c932a315772290f626038b92ca2ff01248de7807a160d8"),
        (1, Derivation::Libnvme110OpensslBug, 1, "1d822f4a3b1f3da94354bc23c899a5dc8c1db901d0e0604ec1ac5fb9476b4e80"),
        (1, Derivation::Libnvme17OpensslBug, 1, "bea6eb0052262a67a56c1106c917db9523b9cc7e61674ed712a90f5e20ddcf55"),
        (1, Derivation::Linux614, 0, "3c684992478893cb87daac825e7a30d0eaa065d809ecd979ca316d369b261888"),
        (1, Derivation::Linux614, 1, "5d64f213c1d219dc97e57e0f15d319e18f3b9a8b04f4ff3bb5b3923912f2063e"),
        (2, Derivation::Rfc8446, 0, "f42ba63824cdfe421914c582921f85b5b5b7e2d4df084caeedc9be20b212e8bb0fe8a23e9d59a1c8fc6449da4970a78d"),
        (2, Derivation::Rfc8446, 1, "a2b2f943f479fc682555cec89857c80ed004ce92f32a973d5764155bb7e36b17a85368a0666d250afac9282dda2e62ca"),
        (2, Derivation::Libnvme110, 0, "2ee4754186a625b28a3936ef4a40d839c3ad958b2e017562ee07e2501f172ce999dc9c29033ea7ee33f814f192c13f47"),
        (2, Derivation::Libnvme110, 1, "fcefe2e2a2e682b1447dcabf1ec268f78f08c63cd075753abcc8bda2c5c34d48d3014aa8d76ad80107e4f5c9f27e2149"),
        (2, Derivation::Libnvme17, 1, "62cfd49ace938d85965c3d3950aaa1ecbc7749b4e72fdad220be08d22173e8ba047705c9b43b0166f6f97941372f5d7f"),
        (2, Derivation::Libnvme14, 0, "a393faeeae291eea32086d3c14eb8c783abedd10dfe2d07b847ac5903a4fd9141e4c9f85712b6119579e3f8c914022b6"),
        (2, Derivation::Libnvme110OpensslBug, 0, "10a715cf116ba0c3068b2ba7278e7678bebdcc77fcb4c0b7b509dea46395881d6f90f408517c2c69e4f771f04f0fbcd1"),
        (2, Derivation::Libnvme110OpensslBug, 1, "f5887cac40cafd177fdd53039d179a125800103f922e3d99e5847231b98b023cd663a97f717d05326e3933255db96100"),
        (2, Derivation::Libnvme17OpensslBug, 1, "9758ac216ecaf962bf42db594d2845ccc0d70a42b2f913a80701ded8ebbd4eab183927dd8d95ac2760b3e604badc369e"),
        (2, Derivation::Linux614, 1, "b5fdd9eef99f17e4c57d5a1d50335b89e7c925e9cc702389af00133c07df1a77bf7f6e2a283030052e9f1be0f3b12285"),
    ];
    for &(h, d, ver, want) in v {
        let k = if h == 1 { k01() } else { k02() };
        let version = IdentityVersion::from_number(ver).unwrap();
        let (id, tls) = k.derive(HOST, SUBSYS, version, d).unwrap();
        assert_eq!(tls.expose_secret(), &hex(want)[..], "{d} v{ver} hash {h}");
        assert_eq!(tls.suite(), k.hash().suite());
        assert_eq!(id.version(), version);
    }
    // Untransformed keys (HH 00): the key is the input PSK.
    for (s, d, want) in [
        (
            LIBNVME_00,
            Derivation::Rfc8446,
            "ec85300ba827726bd3bc4fc07f3a34aec5fe7c8ccac05fefc2f021c74e0df9ef",
        ),
        (
            LIBNVME_00,
            Derivation::Libnvme110,
            "e2b16189378b34adba9fec995ab479040cedec0bc7c6b47728ee4d8de6ff52ba",
        ),
    ] {
        let (id, tls) = ConfiguredPsk::parse(s)
            .unwrap()
            .derive(HOST, SUBSYS, IdentityVersion::V0, d)
            .unwrap();
        assert_eq!(
            id.to_string(),
            "NVMe0R01 nqn.psk-test-host nqn.psk-test-subsys"
        );
        assert_eq!(tls.expose_secret(), &hex(want)[..], "{d}");
    }
    let k = ConfiguredPsk::new(&key48(), None).unwrap();
    let (id, tls) = k
        .derive(HOST, SUBSYS, IdentityVersion::V0, Derivation::Libnvme110)
        .unwrap();
    assert_eq!(id.hash(), PskHash::Sha384);
    assert_eq!(tls.expose_secret(), &hex("9cb989c1d40fdcdc1bb729d6691901bfcd0b310f060f558d4a63c7afc2a0923f2d0610073fded349d25d6b3f91980826")[..]);
    assert_eq!(tls.suite(), CipherSuite::Aes256GcmSha384);
    // libnvme 1.4-1.6 had no version 1 identities.
    assert_eq!(
        k01().derive(HOST, SUBSYS, IdentityVersion::V1, Derivation::Libnvme14),
        Err(PskError::Derive(DeriveError::NoVersion1(
            Derivation::Libnvme14
        )))
    );
}

#[test]
fn generated_psk_and_linux_secure_concatenation() {
    // HMAC-SHA-256(KS, C1 || C2) and the TLS PSKs of its NVMe1G01 identity
    // (python3 hmac, openssl kdf).
    let ks: Vec<u8> = (0u8..32).collect();
    let c1: Vec<u8> = (0x20u8..0x40).collect();
    let c2: Vec<u8> = (0x40u8..0x60).collect();
    let g = InputPsk::generated(PskHash::Sha256, &ks, &c1, &c2);
    assert_eq!(
        g.expose_secret(),
        &hex("66cd0ee63055effd24c52b90779f9a43e1e1532844604980435267fcb4517027")[..]
    );
    let id = g.identity(IdentityVersion::V1, HOST, SUBSYS).unwrap();
    assert_eq!(
        id.to_string(),
        "NVMe1G01 nqn.psk-test-host nqn.psk-test-subsys cLWE+gEuQvUx5kj/milcDXP5yqyT1ga59W3Ld/N7NP4="
    );
    assert_eq!(
        g.tls_psk(&id, Derivation::Linux614)
            .unwrap()
            .expose_secret(),
        &hex("43e2922766c496d8415b616962c16a8b1daf8058e3216cf1c22250bf3352d845")[..]
    );
    assert_eq!(
        g.tls_psk(&id, Derivation::Rfc8446).unwrap().expose_secret(),
        &hex("fc29bef9ada4ec118b838e56554985d451b3c8ec8e6f32bd9ff56c1380b4893d")[..]
    );
    // A generated PSK does not answer a retained identity, nor the reverse.
    let r = k01().retained(HOST, Derivation::Rfc8446).unwrap();
    assert!(matches!(
        r.tls_psk(&id, Derivation::Rfc8446),
        Err(DeriveError::KindMismatch { .. })
    ));
}

#[test]
fn long_nqns_are_refused_by_rfc8446_as_by_its_implementations() {
    let host = format!("nqn.2014-08.org.example:{}", "h".repeat(180));
    let sub = format!("nqn.2014-08.org.example:{}", "s".repeat(180));
    assert_eq!(
        k01().derive(&host, &sub, IdentityVersion::V0, Derivation::Rfc8446),
        Err(PskError::Derive(DeriveError::ContextTooLong(
            8 + 2 + 2 * 204
        )))
    );
    // libnvme 1.10-1.15 had no such limit.
    assert!(k01()
        .derive(&host, &sub, IdentityVersion::V0, Derivation::Libnvme110)
        .is_ok());
    // A version 1 context is short whatever the NQNs.
    assert!(k01()
        .derive(&host, &sub, IdentityVersion::V1, Derivation::Rfc8446)
        .is_ok());
}

#[test]
fn resolve_tells_derivations_apart_by_the_v1_digest() {
    let both = [Derivation::Rfc8446, Derivation::Libnvme110];
    let k = k01();
    let (d, tls) = k
        .resolve(
            &PskIdentity::parse(ID1_SHA256_COMPAT.as_bytes()).unwrap(),
            &both,
        )
        .unwrap();
    assert_eq!(d, Derivation::Libnvme110);
    assert_eq!(
        tls.expose_secret(),
        &hex("b9f5ab2a41ba6e72a23a12066302a2f775fa6c0942c8e0b18ca8ac07edf305e2")[..]
    );
    let (d, _) = k
        .resolve(&PskIdentity::parse(ID1_SHA256.as_bytes()).unwrap(), &both)
        .unwrap();
    assert_eq!(d, Derivation::Rfc8446);
    // Version 0: nothing to tell them apart, the first candidate.
    let v0 = PskIdentity::parse(b"NVMe0R01 nqn.psk-test-host nqn.psk-test-subsys").unwrap();
    assert_eq!(k.resolve(&v0, &both).unwrap().0, Derivation::Rfc8446);
    assert_eq!(
        k.resolve(&v0, &[Derivation::Libnvme110]).unwrap().0,
        Derivation::Libnvme110
    );
    // Another key, another hash, a digest no candidate gives: none.
    let other = ConfiguredPsk::new(&[9u8; 32], Some(PskHash::Sha256)).unwrap();
    let v1 = PskIdentity::parse(ID1_SHA256.as_bytes()).unwrap();
    assert!(other.resolve(&v1, &Derivation::ALL).is_none());
    assert!(k02().resolve(&v1, &Derivation::ALL).is_none());
    assert!(k.resolve(&v1, &[Derivation::Libnvme110]).is_none());
}

#[test]
fn identities_parse_strictly() {
    let ok = [
        "NVMe0R01 nqn.psk-test-host nqn.psk-test-subsys",
        "NVMe0R02 nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e nqn.x",
        "NVMe0G01 a b",
        ID1_SHA256,
        ID1_SHA384,
    ];
    for s in ok {
        let id = PskIdentity::parse(s.as_bytes()).unwrap();
        assert_eq!(id.to_string(), s);
    }
    let id = PskIdentity::parse(ok[0].as_bytes()).unwrap();
    assert_eq!(id.version(), IdentityVersion::V0);
    assert_eq!(id.kind(), PskKind::Retained);
    assert_eq!(id.hash(), PskHash::Sha256);
    assert_eq!(id.hostnqn(), HOST);
    assert_eq!(id.subnqn(), SUBSYS);
    assert_eq!(id.digest(), None);

    use IdentityError as E;
    let nqn = |which, why| E::Nqn { which, why };
    let bad: &[(&[u8], E)] = &[
        (b"", E::Prefix),
        (b"NVMe", E::Prefix),
        (b"nvme0R01 a b", E::Prefix),
        (b"NVMe2R01 a b", E::Prefix),
        (b"NVMe0X01 a b", E::Kind),
        (b"NVMe0R03 a b", E::Hash),
        (b"NVMe0R1 a b", E::Hash),
        (
            b"NVMe0R01",
            E::Fields {
                version: 0,
                expected: 2,
                found: 0,
            },
        ),
        (
            b"NVMe0R01a b",
            E::Fields {
                version: 0,
                expected: 2,
                found: 0,
            },
        ),
        (
            b"NVMe0R01 a",
            E::Fields {
                version: 0,
                expected: 2,
                found: 1,
            },
        ),
        (
            b"NVMe0R01 a b c",
            E::Fields {
                version: 0,
                expected: 2,
                found: 3,
            },
        ),
        (
            b"NVMe0R01 a b ",
            E::Fields {
                version: 0,
                expected: 2,
                found: 3,
            },
        ),
        (
            b"NVMe0R01  a b",
            E::Fields {
                version: 0,
                expected: 2,
                found: 3,
            },
        ),
        (
            b"NVMe1R01 a b",
            E::Fields {
                version: 1,
                expected: 3,
                found: 2,
            },
        ),
        (
            b"NVMe0R01 a b\0",
            nqn("subsystem", "holds a control or space character"),
        ),
        (
            b"NVMe0R01 a\tx b",
            nqn("host", "holds a control or space character"),
        ),
        (b"NVMe0R01 \xff b", E::NotUtf8),
        (
            b"NVMe1R01 a b iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU",
            E::Digest { bytes: 32 },
        ),
        (
            b"NVMe1R02 a b iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=",
            E::Digest { bytes: 48 },
        ),
        (
            b"NVMe1R01 a b iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lE*=",
            E::Digest { bytes: 32 },
        ),
    ];
    for (b, want) in bad {
        assert_eq!(
            &PskIdentity::parse(b).unwrap_err(),
            want,
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
    let long = format!("NVMe0R01 {} b", "a".repeat(224));
    assert_eq!(
        PskIdentity::parse(long.as_bytes()).unwrap_err(),
        nqn("host", "is longer than 223 bytes")
    );
    let huge = vec![b'N'; 70_000];
    assert_eq!(PskIdentity::parse(&huge).unwrap_err(), E::TooLong(70_000));
    // The longest valid identity fits MAX_LEN.
    let longest = format!(
        "NVMe1R02 {} {} {}",
        "h".repeat(223),
        "s".repeat(223),
        PskIdentity::parse(ID1_SHA384.as_bytes())
            .unwrap()
            .digest()
            .unwrap()
    );
    assert_eq!(longest.len(), PskIdentity::MAX_LEN);
    assert!(PskIdentity::parse(longest.as_bytes()).is_ok());
}

#[test]
fn debug_prints_no_key_material() {
    let k = k02();
    let r = k.retained(HOST, Derivation::Rfc8446).unwrap();
    let (_, tls) = k
        .derive(HOST, SUBSYS, IdentityVersion::V0, Derivation::Rfc8446)
        .unwrap();
    let texts = [format!("{k:?}"), format!("{r:?}"), format!("{tls:?}")];
    assert_eq!(texts[0], "ConfiguredPsk(NVMeTLSkey-1:02, 48 bytes)");
    assert_eq!(texts[1], "InputPsk(Retained, SHA-384, 48 bytes)");
    assert_eq!(texts[2], "TlsPsk(TLS_AES_256_GCM_SHA384, 48 bytes)");
    for (t, key) in texts
        .iter()
        .zip([k.expose_secret(), r.expose_secret(), tls.expose_secret()])
    {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let b64 = STANDARD.encode(key);
        for window in [&hex[..8], &b64[..8]] {
            assert!(!t.contains(window), "{t}");
        }
        // No byte list either.
        assert!(!t.contains(&format!("{}, {}", key[0], key[1])), "{t}");
    }
}

#[test]
fn keys_compare_by_value() {
    assert_eq!(
        k01(),
        ConfiguredPsk::new(&KEY32, Some(PskHash::Sha256)).unwrap()
    );
    assert_ne!(k01(), ConfiguredPsk::new(&KEY32, None).unwrap());
    let a = TlsPsk::new(CipherSuite::Aes128GcmSha256, &[1; 32]).unwrap();
    assert_eq!(
        a,
        TlsPsk::new(CipherSuite::Aes128GcmSha256, &[1; 32]).unwrap()
    );
    assert_ne!(
        a,
        TlsPsk::new(CipherSuite::Aes128GcmSha256, &[2; 32]).unwrap()
    );
    assert_ne!(
        a,
        TlsPsk::new(CipherSuite::Aes256GcmSha384, &[1; 32]).unwrap()
    );
    assert!(TlsPsk::new(CipherSuite::Aes128GcmSha256, &[]).is_err());
    assert!(TlsPsk::new(CipherSuite::Aes128GcmSha256, &[0; 49]).is_err());
}

#[test]
fn names_and_wire_values() {
    for d in Derivation::ALL {
        assert_eq!(Derivation::from_name(d.name()), Some(d));
    }
    assert_eq!(Derivation::from_name("spdk"), Some(Derivation::Rfc8446));
    assert_eq!(
        Derivation::from_name("compat"),
        Some(Derivation::Libnvme110)
    );
    assert_eq!(Derivation::from_name("nope"), None);
    assert_eq!(
        CipherSuite::from_wire(0x1301),
        Some(CipherSuite::Aes128GcmSha256)
    );
    assert_eq!(
        CipherSuite::from_wire(0x1302),
        Some(CipherSuite::Aes256GcmSha384)
    );
    assert_eq!(CipherSuite::from_wire(0x1303), None);
    assert_eq!(CipherSuite::Aes256GcmSha384.wire_id(), [0x13, 0x02]);
    assert_eq!(PskHash::Sha384.suite().name(), "TLS_AES_256_GCM_SHA384");
    assert_eq!(format_interchange(0, 1, &[0; 32]).len(), 65);
}
