//! farflash's host over TLS 1.3 (issue 32) on 127.0.0.1, without a VM:
//! a TLS front written here (farflash_tls's server session, OpenSSL 3,
//! keys found by identity as a target does) terminates TLS and relays the
//! plaintext to `farflash serve`. Covers what the Linux target's tlshd
//! cannot (a SHA-384 key: TLS_AES_256_GCM_SHA384), large reads spread over
//! many records, the alerts of a wrong key and of an unknown identity, a
//! handshake that never finishes (bounded), and TLS to a plaintext port.
//! tests/host_kernel_target.rs has the Linux nvmet + tlshd side.

mod common;
mod host_support;

use farflash_host::tls::TlsOptions;
use farflash_host::{ConnectOptions, Controller};
use farflash_tls::keyfile::HostKey;
use farflash_tls::{
    CipherSuite, ConfiguredPsk, Derivation, IdentityVersion, PskChoice, PskHash, PskIdentity,
    ServerConfig, Session,
};
use host_support::{cli, cli_ok, json, Serve};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn random_key(hash: PskHash) -> ConfiguredPsk {
    let mut b = vec![0u8; hash.len()];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("urandom");
    ConfiguredPsk::new(&b, Some(hash)).unwrap()
}

/// A TLS-terminating front on 127.0.0.1: each accepted connection gets a
/// server session whose lookup takes the configured key of the identity's
/// hash (nvme-cli 2.13's derivation), and a thread relaying plaintext to
/// `upstream`. Records which suite each handshake negotiated.
struct Front {
    port: u16,
    stop: Arc<AtomicBool>,
    suites: Arc<Mutex<Vec<CipherSuite>>>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn front(upstream: u16, keys: Vec<ConfiguredPsk>) -> Front {
    let keys = Arc::new(keys);
    let lookup = move |raw: &[u8]| -> Option<PskChoice> {
        let id = PskIdentity::parse(raw).ok()?;
        keys.iter().find_map(|k| {
            k.resolve(&id, &[Derivation::Libnvme110])
                .map(|(_, psk)| PskChoice { psk, tag: 0 })
        })
    };
    let config = ServerConfig::new(lookup).expect("libssl.so.3");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let suites = Arc::new(Mutex::new(Vec::new()));
    let (s, su) = (stop.clone(), suites.clone());
    std::thread::spawn(move || {
        for c in listener.incoming() {
            if s.load(Ordering::SeqCst) {
                break;
            }
            let Ok(c) = c else { continue };
            let session = Session::server(&config).unwrap();
            let (s, su) = (s.clone(), su.clone());
            std::thread::spawn(move || relay(c, session, upstream, &s, &su));
        }
    });
    Front { port, stop, suites }
}

fn poll2(a: &TcpStream, a_out: bool, b: Option<&TcpStream>) {
    let mut p = [
        libc::pollfd {
            fd: a.as_raw_fd(),
            events: libc::POLLIN | if a_out { libc::POLLOUT } else { 0 },
            revents: 0,
        },
        libc::pollfd {
            fd: b.map_or(-1, |b| b.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two initialized pollfds that outlive the call; a negative fd
    // is ignored by poll(2).
    unsafe { libc::poll(p.as_mut_ptr(), 2, 20) };
}

/// Moves bytes until either side closes or the session fails.
fn relay(
    client: TcpStream,
    mut s: Session,
    upstream: u16,
    stop: &AtomicBool,
    suites: &Mutex<Vec<CipherSuite>>,
) {
    client.set_nonblocking(true).unwrap();
    let mut up: Option<TcpStream> = None;
    let mut to_up: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut pt = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let pending = !s.ciphertext().is_empty();
        poll2(&client, pending, up.as_ref());
        match (&client).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if s.feed(&buf[..n]).is_err() {
                    let _ = (&client).write_all(s.ciphertext());
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        loop {
            match s.read_plaintext(&mut pt) {
                Ok(0) => break,
                Ok(k) => to_up.extend_from_slice(&pt[..k]),
                Err(_) => {
                    let _ = (&client).write_all(s.ciphertext());
                    return;
                }
            }
        }
        if up.is_none() && !s.is_handshaking() {
            if let Some(suite) = s.suite() {
                suites.lock().unwrap().push(suite);
            }
            let u = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            u.set_nonblocking(true).unwrap();
            u.set_nodelay(true).unwrap();
            up = Some(u);
        }
        if let Some(u) = up.as_ref() {
            while !to_up.is_empty() {
                match (&*u).write(&to_up) {
                    Ok(n) => {
                        to_up.drain(..n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return,
                }
            }
            match (&*u).read(&mut buf) {
                Ok(0) => {
                    s.close();
                    let _ = (&client).write_all(s.ciphertext());
                    return;
                }
                Ok(n) => {
                    if s.write_plaintext(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        let c = s.ciphertext();
        if !c.is_empty() {
            match (&client).write(c) {
                Ok(n) => s.consume_ciphertext(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if s.wants_close() && s.ciphertext().is_empty() {
            return;
        }
    }
}

fn tls_args<'a>(port: &'a str, key: &'a str, v: &'a str) -> Vec<&'a str> {
    vec![
        "-a",
        "127.0.0.1",
        "-s",
        port,
        "--tls",
        "--tls-key",
        key,
        "--tls-identity",
        v,
    ]
}

#[test]
fn host_over_tls_both_suites_both_identities_verified_io() {
    let serve = Serve::start("64M", &[]);
    let (k256, k384) = (random_key(PskHash::Sha256), random_key(PskHash::Sha384));
    let f = front(serve.port, vec![k256.clone(), k384.clone()]);
    let p = f.port.to_string();
    for (k, suite) in [
        (&k256, CipherSuite::Aes128GcmSha256),
        (&k384, CipherSuite::Aes256GcmSha384),
    ] {
        let key = k.to_interchange();
        for v in ["0", "1"] {
            f.suites.lock().unwrap().clear();
            let mut a = vec!["discover"];
            a.extend(tls_args(&p, &key, v));
            a.extend(["-o", "json"]);
            let d = json(&cli_ok(&a));
            assert!(
                d["records"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["subnqn"] == serve.nqn.as_str()),
                "{d}"
            );
            let mut a = vec!["identify"];
            a.extend(tls_args(&p, &key, v));
            a.extend(["-n", &serve.nqn, "--nsid", "1", "-o", "json"]);
            let id = json(&cli_ok(&a));
            assert_eq!(id["namespace"]["nsze"].as_u64(), Some((64 << 20) >> 9));
            // 4 KiB to 256 KiB: in-capsule and R2T writes, reads of many
            // records (straight into the slot buffer past 8 KiB), 2 queues.
            let mut a = vec!["perf"];
            a.extend(tls_args(&p, &key, v));
            a.extend([
                "-n",
                &serve.nqn,
                "--rw",
                "randwrite",
                "--bsrange=4k-256k",
                "--iodepth",
                "8",
                "--numjobs",
                "2",
                "--size",
                "8M",
                "--verify=crc32c",
                "-o",
                "json",
            ]);
            let r = json(&cli_ok(&a));
            assert_eq!(r["aggregate"]["verify_errors"], 0);
            assert_eq!(r["aggregate"]["read"]["io_bytes"].as_u64(), Some(8 << 20));
            let got = f.suites.lock().unwrap().clone();
            // discover (1 queue), identify (1), perf (admin + 2 I/O queues)
            assert!(got.len() >= 5, "{got:?}");
            assert!(got.iter().all(|s| *s == suite), "{got:?}");
        }
    }
}

#[test]
fn wrong_key_unknown_identity_and_plaintext_port_are_named() {
    let serve = Serve::start("16M", &[]);
    let k256 = random_key(PskHash::Sha256);
    let f = front(serve.port, vec![k256.clone()]);
    let p = f.port.to_string();
    let fails = |a: Vec<String>, want: &[&str]| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = cli(&a);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{a:?} succeeded");
        for w in want {
            assert!(err.contains(w), "{a:?}: {err} lacks {w:?}");
        }
        assert!(!err.contains("NVMeTLSkey-1:0"), "a key in {err}");
    };
    let with = |key: &str, v: &str, port: &str| -> Vec<String> {
        let mut a = vec!["identify".to_string()];
        a.extend(tls_args(port, key, v).iter().map(|s| s.to_string()));
        a.extend(["-n", "nqn.2014-08.org.nvmexpress.discovery"].map(String::from));
        a
    };
    let wrong = random_key(PskHash::Sha256).to_interchange();
    let other = random_key(PskHash::Sha384).to_interchange();
    let right = k256.to_interchange();
    // v0 with another key: the binder does not verify (OpenSSL 3 sends
    // illegal_parameter).
    fails(
        with(&wrong, "0", &p),
        &[
            "refused the PSK identity 'NVMe0R01 ",
            "illegal parameter",
            "(47)",
        ],
    );
    // v1 with another key: its digest matches no key: handshake_failure.
    fails(
        with(&wrong, "1", &p),
        &[
            "refused the PSK identity 'NVMe1R01 ",
            "(40)",
            "no key for that identity",
        ],
    );
    // A SHA-384 identity the front has no key for.
    fails(with(&other, "0", &p), &["'NVMe0R02 ", "(40)"]);
    // The right key in another layout.
    let mut a = with(&right, "0", &p);
    a.extend(["--tls-derivation", "rfc8446"].map(String::from));
    fails(a, &["illegal parameter"]);
    // TLS to a plaintext port: the target takes the ClientHello for a PDU.
    fails(
        with(&right, "0", &serve.port.to_string()),
        &["wrong version number", "a port without TLS?"],
    );
    // Bad key text and a key file naming other subsystems: refused before
    // connecting, without the key.
    fails(
        with("NVMeTLSkey-1:01:abc:", "0", &p),
        &["--tls-key", "base64"],
    );
    let dir = common::TempDir::new("host-tls-keys");
    let file = dir.0.join("keys");
    let line = farflash_tls::keytool::keyfile_line(
        &k256,
        "nqn.h",
        "nqn.s",
        IdentityVersion::V0,
        Derivation::Libnvme110,
    )
    .unwrap();
    std::fs::write(&file, &line[..]).unwrap();
    fails(
        with(file.to_str().unwrap(), "0", &p),
        &["no version 0 identity for host", "NVMe0R01 nqn.h nqn.s"],
    );
}

/// A target that accepts and never answers the ClientHello: the handshake
/// ends at its bound, naming the identity and the step.
#[test]
fn a_stalled_handshake_is_bounded() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let held = std::thread::spawn(move || l.accept().map(|(s, _)| s));
    let key = HostKey::Configured(random_key(PskHash::Sha256));
    let t = TlsOptions::new(key, IdentityVersion::V0, Derivation::Libnvme110)
        .unwrap()
        .with_handshake_timeout(Duration::from_millis(300));
    let mut o = ConnectOptions::new(format!("127.0.0.1:{port}"), "nqn.2026-11.io.farflash:x");
    o.tls = Some(Arc::new(t));
    let t0 = Instant::now();
    let e = Controller::connect(&o)
        .err()
        .expect("no handshake")
        .to_string();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(
        e.contains("no TLS handshake with the target within 300ms"),
        "{e}"
    );
    assert!(e.contains("'NVMe0R01 "), "{e}");
    drop(held.join());
}
