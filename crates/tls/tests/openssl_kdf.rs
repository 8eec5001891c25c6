//! The PSK derivations against OpenSSL's own HKDF (`openssl kdf ... HKDF`),
//! live: the `info` bytes are laid out here by hand, as each anchor's
//! source lays them out (SPDK `nvme_tcp_derive_retained_psk` /
//! `nvme_tcp_derive_tls_psk`; libnvme 1.13 `derive_retained_key` /
//! `derive_tls_key`), and OpenSSL computes HKDF-Extract-and-Expand with an
//! empty salt. Without the `openssl` command the test says so and passes.

use std::process::Command;

use farflash_tls::psk::{ConfiguredPsk, Derivation, IdentityVersion, PskHash};

fn openssl_hkdf(digest: &str, key: &[u8], info: &[u8], len: usize) -> Option<Vec<u8>> {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let out = Command::new("openssl")
        .args([
            "kdf",
            "-keylen",
            &len.to_string(),
            "-kdfopt",
            &format!("digest:{digest}"),
            "-kdfopt",
            &format!("hexkey:{}", hex(key)),
            "-kdfopt",
            &format!("hexinfo:{}", hex(info)),
            "HKDF",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let digits: String = text.chars().filter(char::is_ascii_hexdigit).collect();
    Some(
        (0..digits.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
            .collect(),
    )
}

/// RFC 8446 HkdfLabel.
fn hkdf_label(len: usize, label: &str, context: &[u8]) -> Vec<u8> {
    let mut v = (len as u16).to_be_bytes().to_vec();
    v.push(6 + label.len() as u8);
    v.extend_from_slice(b"tls13 ");
    v.extend_from_slice(label.as_bytes());
    v.push(context.len() as u8);
    v.extend_from_slice(context);
    v
}

/// libnvme 1.10-1.15: host-order (little-endian) length, no length bytes.
fn libnvme_label(len: usize, label: &str, context: &[u8]) -> Vec<u8> {
    let mut v = (len as u16).to_le_bytes().to_vec();
    v.extend_from_slice(b"tls13 ");
    v.extend_from_slice(label.as_bytes());
    v.extend_from_slice(context);
    v
}

#[test]
fn derivations_agree_with_openssl_hkdf() {
    if openssl_hkdf("SHA256", b"k", b"i", 32).is_none() {
        println!("SKIPPED: no `openssl kdf` (apt install openssl)");
        return;
    }
    let host = "nqn.2014-08.org.nvmexpress:uuid:c0ffee00-0000-4000-8000-000000000001";
    let sub = "nqn.2026-11.io.farflash:kdf";
    for (hash, digest) in [(PskHash::Sha256, "SHA256"), (PskHash::Sha384, "SHA384")] {
        let raw: Vec<u8> = (0..hash.len()).map(|i| (i * 13 + 1) as u8).collect();
        let k = ConfiguredPsk::new(&raw, Some(hash)).unwrap();
        let n = hash.len();

        // Retained PSKs.
        let want = openssl_hkdf(digest, &raw, &hkdf_label(n, "HostNQN", host.as_bytes()), n);
        let r_rfc = k.retained(host, Derivation::Rfc8446).unwrap();
        assert_eq!(Some(r_rfc.expose_secret().to_vec()), want, "{digest}");
        let want = openssl_hkdf(
            digest,
            &raw,
            &libnvme_label(n, "HostNQN", host.as_bytes()),
            n,
        );
        let r_nvme = k.retained(host, Derivation::Libnvme110).unwrap();
        assert_eq!(Some(r_nvme.expose_secret().to_vec()), want, "{digest}");

        // TLS PSKs, version 0 (context: the identity) and version 1
        // (context: "0h <digest>").
        let (id0, tls) = k
            .derive(host, sub, IdentityVersion::V0, Derivation::Rfc8446)
            .unwrap();
        let ctx = id0.to_string();
        let want = openssl_hkdf(
            digest,
            r_rfc.expose_secret(),
            &hkdf_label(n, "nvme-tls-psk", ctx.as_bytes()),
            n,
        );
        assert_eq!(Some(tls.expose_secret().to_vec()), want, "{digest} {ctx}");

        let (id1, tls) = k
            .derive(host, sub, IdentityVersion::V1, Derivation::Libnvme110)
            .unwrap();
        let ctx = format!("{:02} {}", hash.id(), id1.digest().unwrap());
        let want = openssl_hkdf(
            digest,
            r_nvme.expose_secret(),
            &libnvme_label(n, "nvme-tls-psk", ctx.as_bytes()),
            n,
        );
        assert_eq!(Some(tls.expose_secret().to_vec()), want, "{digest} {ctx}");
    }
}
