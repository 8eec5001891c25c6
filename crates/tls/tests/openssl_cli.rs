//! farflash's TLS sessions against an independent TLS stack: the `openssl`
//! command line (`s_server`, `s_client`) over 127.0.0.1, with the NVMe
//! TLS PSKs and identities of `farflash_tls::psk`. Without the `openssl`
//! command or libssl.so.3 each test says why it cannot run and passes
//! (tests/run.sh installs both).
//!
//! The command line takes a TLS_AES_128_GCM_SHA256 key with `-psk` and a
//! TLS_AES_256_GCM_SHA384 one only as a PEM session (`-psk_session`),
//! which `farflash_tls::session::psk_session_pem` writes.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use farflash_tls::psk::{ConfiguredPsk, Derivation, IdentityVersion, PskHash};
use farflash_tls::session::{psk_session_pem, PskChoice};
use farflash_tls::{ClientConfig, ServerConfig, Session, TlsError, TlsPsk};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e";
const SUB: &str = "nqn.2026-11.io.farflash:interop";
const TIMEOUT: Duration = Duration::from_secs(20);

fn ready() -> bool {
    let cli = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !cli {
        println!("SKIPPED: no openssl command (apt install openssl)");
        return false;
    }
    if let Err(e) = ClientConfig::new() {
        println!("SKIPPED: {e}");
        return false;
    }
    true
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The NVMe identity and TLS PSK of a configured key of `hash`.
fn nvme_key(hash: PskHash) -> (String, TlsPsk) {
    let bytes: Vec<u8> = (0..hash.len() as u8).map(|b| b ^ 0x5c).collect();
    let k = ConfiguredPsk::new(&bytes, Some(hash)).unwrap();
    let (id, psk) = k
        .derive(HOST, SUB, IdentityVersion::V0, Derivation::Rfc8446)
        .unwrap();
    (id.to_string(), psk)
}

/// A child process killed (if still running) when the test ends, with its
/// output collected by reader threads.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new("openssl")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("openssl runs");
        let out = Arc::new(Mutex::new(String::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = out.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut o = out.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        let stdin = child.stdin.take();
        Proc { child, stdin, out }
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn wait_for(&self, what: &str) {
        let t = Instant::now();
        while !self.output().contains(what) {
            assert!(
                t.elapsed() < TIMEOUT,
                "openssl never printed {what:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit (killing it after the timeout).
    fn finish(&mut self) -> Option<i32> {
        self.stdin.take();
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                // Let the reader threads take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return st.code();
            }
            if t.elapsed() > TIMEOUT {
                let _ = self.child.kill();
                panic!("openssl did not exit:\n{}", self.output());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Moves bytes between the session and the socket until `done` holds, the
/// session fails, or the peer closes the socket. Returns the plaintext
/// received on the way.
fn run(
    s: &mut Session,
    sock: &mut TcpStream,
    mut done: impl FnMut(&Session, &[u8]) -> bool,
) -> Result<Vec<u8>, TlsError> {
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let t = Instant::now();
    let mut plain = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let out = s.ciphertext().to_vec();
        if !out.is_empty() {
            if sock.write_all(&out).is_err() {
                return Err(s.error().cloned().unwrap_or(TlsError::Closed));
            }
            s.consume_ciphertext(out.len());
        }
        if let Some(e) = s.error() {
            return Err(e.clone());
        }
        if done(s, &plain) {
            return Ok(plain);
        }
        assert!(t.elapsed() < TIMEOUT, "stalled at {}", s.handshake_step());
        match sock.read(&mut buf) {
            Ok(0) => return Ok(plain),
            Ok(n) => {
                s.feed(&buf[..n])?;
                loop {
                    let k = s.read_plaintext(&mut buf)?;
                    if k == 0 {
                        break;
                    }
                    plain.extend_from_slice(&buf[..k]);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(plain),
            Err(e) => panic!("socket: {e}"),
        }
    }
}

fn connect(port: u16) -> TcpStream {
    let t = Instant::now();
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(_) if t.elapsed() < TIMEOUT => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("connect 127.0.0.1:{port}: {e}"),
        }
    }
}

fn write_pem(name: &str, psk: &TlsPsk) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("farflash-tls-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, psk_session_pem(psk).unwrap().as_bytes()).unwrap();
    path
}

/// farflash's client against `openssl s_server -rev` (which sends each
/// line back reversed), in both suites.
#[test]
fn farflash_client_with_openssl_s_server() {
    if !ready() {
        return;
    }
    for hash in [PskHash::Sha256, PskHash::Sha384] {
        let (identity, psk) = nvme_key(hash);
        let port = free_port();
        let accept = format!("127.0.0.1:{port}");
        let key_hex = hex(psk.expose_secret());
        let pem;
        let mut args = vec![
            "s_server",
            "-accept",
            &accept,
            "-naccept",
            "1",
            "-tls1_3",
            "-nocert",
            "-rev",
            "-psk_identity",
            &identity,
            "-ciphersuites",
            psk.suite().name(),
        ];
        match hash {
            PskHash::Sha256 => args.extend(["-psk", &key_hex]),
            PskHash::Sha384 => {
                pem = write_pem("server-384.pem", &psk).display().to_string();
                args.extend(["-psk_session", &pem]);
            }
        }
        let mut server = Proc::spawn(&args);
        server.wait_for("ACCEPT");
        let mut sock = connect(port);
        let mut c = Session::client(
            &ClientConfig::new().unwrap(),
            identity.as_bytes(),
            psk.clone(),
        )
        .unwrap();
        run(&mut c, &mut sock, |s, _| !s.is_handshaking()).unwrap();
        assert_eq!(c.suite(), Some(hash.suite()));
        c.write_plaintext(b"hello farflash\n").unwrap();
        let got = run(&mut c, &mut sock, |_, p| p.ends_with(b"\n")).unwrap();
        assert_eq!(got, b"hsalfraf olleh\n", "{}", server.output());
        // A KeyUpdate the server must follow, then more data.
        c.key_update(true).unwrap();
        c.write_plaintext(b"after key update\n").unwrap();
        let got = run(&mut c, &mut sock, |_, p| p.ends_with(b"\n")).unwrap();
        assert_eq!(got, b"etadpu yek retfa\n", "{}", server.output());
        c.close();
        let _ = run(&mut c, &mut sock, |s, _| s.peer_closed());
        drop(sock);
        server.finish();
        // s_server's own account of the connection.
        let out = server.output();
        assert!(
            out.contains(&format!("Ciphersuite: {}", hash.suite().name())),
            "{out}"
        );
        assert!(out.contains("Protocol version: TLSv1.3"), "{out}");
        assert!(out.contains("No peer certificate"), "{out}");
    }
}

/// `openssl s_client` against farflash's server: the server replies to a
/// line and closes with close_notify; s_client prints the suite it got.
fn serve_one(
    args_for: impl FnOnce(u16) -> Vec<String>,
    keys: Vec<(String, TlsPsk)>,
) -> (Result<Session, TlsError>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = ServerConfig::new(move |id: &[u8]| {
        keys.iter()
            .position(|(k, _)| k.as_bytes() == id)
            .map(|i| PskChoice {
                psk: keys[i].1.clone(),
                tag: i as u64,
            })
    })
    .unwrap();
    let args = args_for(port);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut client = Proc::spawn(&argv);
    client.stdin.as_mut().unwrap().write_all(b"ping\n").unwrap();
    listener.set_nonblocking(false).unwrap();
    let (mut sock, _) = listener.accept().unwrap();
    let mut s = Session::server(&cfg).unwrap();
    let r = run(&mut s, &mut sock, |_, p| p.ends_with(b"\n")).and_then(|got| {
        assert_eq!(got, b"ping\n");
        s.write_plaintext(b"pong from farflash\n")?;
        s.close();
        run(&mut s, &mut sock, |_, _| true)?; // flushes the reply and close_notify
        Ok(())
    });
    // Flush whatever alert the session has, then let s_client finish.
    let rest = s.ciphertext().to_vec();
    let _ = sock.write_all(&rest);
    drop(sock);
    client.finish();
    (r.map(|_| s), client.output())
}

fn s_client_args(port: u16, identity: &str, psk: &TlsPsk, suites: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "s_client",
        "-connect",
        &format!("127.0.0.1:{port}"),
        "-tls1_3",
        "-psk_identity",
        identity,
        "-ciphersuites",
        suites,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    match psk.suite().hash() {
        PskHash::Sha256 => a.extend(["-psk".to_string(), hex(psk.expose_secret())]),
        PskHash::Sha384 => a.extend([
            "-psk_session".to_string(),
            write_pem("client-384.pem", psk).display().to_string(),
        ]),
    }
    a
}

#[test]
fn openssl_s_client_with_farflash_server() {
    if !ready() {
        return;
    }
    let k256 = nvme_key(PskHash::Sha256);
    let k384 = nvme_key(PskHash::Sha384);
    let both = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";
    for (key, suites) in [
        (&k256, "TLS_AES_128_GCM_SHA256"),
        (&k384, "TLS_AES_256_GCM_SHA384"),
        // The client offers both suites (AES-128 first): the server must
        // pick the one of the key's hash.
        (&k256, both),
        (&k384, both),
    ] {
        let (id, psk) = key.clone();
        let (r, out) = serve_one(
            |port| s_client_args(port, &id, &psk, suites),
            vec![k256.clone(), k384.clone()],
        );
        let s = r.unwrap_or_else(|e| panic!("{e}\n{out}"));
        let name = psk.suite().name();
        assert_eq!(s.suite(), Some(psk.suite()));
        assert_eq!(s.identity(), Some(id.as_bytes()));
        assert!(out.contains(&format!("Cipher is {name}")), "{out}");
        assert!(out.contains("pong from farflash"), "{out}");
        assert!(out.contains("TLSv1.3"), "{out}");
    }
}

#[test]
fn openssl_s_client_refused_for_a_wrong_key_an_unknown_identity_or_no_psk() {
    if !ready() {
        return;
    }
    let (id, psk) = nvme_key(PskHash::Sha256);
    let wrong = TlsPsk::new(psk.suite(), &[0x11; 32]).unwrap();
    let (r, out) = serve_one(
        |port| s_client_args(port, &id, &wrong, "TLS_AES_128_GCM_SHA256"),
        vec![(id.clone(), psk.clone())],
    );
    let e = r.unwrap_err();
    assert!(matches!(e, TlsError::AlertSent { alert: 47, .. }), "{e}");
    assert!(
        out.contains("alert") && out.contains("illegal parameter"),
        "{out}"
    );

    let (r, out) = serve_one(
        |port| {
            s_client_args(
                port,
                "NVMe0R01 nqn.2014-08.org.example:stranger nqn.x",
                &psk,
                "TLS_AES_128_GCM_SHA256",
            )
        },
        vec![(id.clone(), psk.clone())],
    );
    assert!(
        matches!(r, Err(TlsError::UnknownIdentity { offered: 1, .. })),
        "{r:?}"
    );
    assert!(out.contains("handshake failure"), "{out}");

    let (r, out) = serve_one(
        |port| {
            vec![
                "s_client".into(),
                "-connect".into(),
                format!("127.0.0.1:{port}"),
                "-tls1_3".into(),
            ]
        },
        vec![(id, psk)],
    );
    assert!(matches!(r, Err(TlsError::NoPsk)), "{r:?}");
    assert!(out.contains("handshake failure"), "{out}");
}

#[test]
fn farflash_client_refused_by_openssl_s_server_for_a_wrong_key() {
    if !ready() {
        return;
    }
    let (identity, psk) = nvme_key(PskHash::Sha256);
    let port = free_port();
    let accept = format!("127.0.0.1:{port}");
    let mut server = Proc::spawn(&[
        "s_server",
        "-accept",
        &accept,
        "-naccept",
        "1",
        "-tls1_3",
        "-nocert",
        "-psk_identity",
        &identity,
        "-psk",
        &"ab".repeat(32),
    ]);
    server.wait_for("ACCEPT");
    let mut sock = connect(port);
    let mut c = Session::client(&ClientConfig::new().unwrap(), identity.as_bytes(), psk).unwrap();
    let e = run(&mut c, &mut sock, |s, _| !s.is_handshaking()).unwrap_err();
    assert!(
        matches!(e, TlsError::AlertReceived { alert: 47, .. }),
        "{e}\n{}",
        server.output()
    );
    drop(sock);
    server.finish();
}
