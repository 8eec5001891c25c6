//! The TLS endpoint against real rustls clients, with certificates made by
//! rcgen: accepted with a good certificate; refused with none, one from
//! another CA, or an expired one; the Unix socket's limits hold.

use super::*;
use crate::jsonrpc::{self, MAX_BATCH, MAX_REQUEST};
use farflash_core::config::TransportConfig;
use farflash_core::target::Target;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use std::io::{Read, Write};
use std::path::PathBuf;

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A leaf certificate and its key, as PEM.
    fn leaf(&self, sans: &[&str], expired: bool) -> (String, String) {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, "leaf");
        if expired {
            p.not_before = rcgen::date_time_ymd(2001, 1, 1);
            p.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A directory of PEM files for one test.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("farflash-net-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    /// Files for a side holding `pair` and trusting `ca`.
    fn files(&self, tag: &str, pair: &(String, String), ca: &Ca) -> TlsFiles {
        TlsFiles::new(
            self.write(&format!("{tag}.crt"), &pair.0),
            self.write(&format!("{tag}.key"), &pair.1),
            self.write(&format!("{tag}-ca.crt"), &ca.issuer.pem()),
        )
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Setup {
    _dir: Dir,
    ca: Ca,
    server: NetServer,
    good: Arc<ClientConfig>,
}

fn setup(name: &str) -> Setup {
    let dir = Dir::new(name);
    let ca = Ca::new("farflash test CA");
    let server_pair = ca.leaf(&["127.0.0.1", "target.test"], false);
    let tls = dir
        .files("server", &server_pair, &ca)
        .server_config()
        .unwrap();
    let api = Arc::new(Api::new(Target::new(
        vec![],
        TransportConfig::default(),
        vec![],
    )));
    let server = start(api, "127.0.0.1:0".parse().unwrap(), tls).unwrap();
    let good = dir
        .files("client", &ca.leaf(&["csi-controller"], false), &ca)
        .client_config()
        .unwrap();
    Setup {
        _dir: dir,
        ca,
        server,
        good,
    }
}

impl Setup {
    fn client(&self, tls: Arc<ClientConfig>) -> NetClient {
        NetClient::new(&self.server.addr().to_string(), None, tls).unwrap()
    }

    /// A client whose certificate comes from `ca` and who trusts the test CA.
    fn client_from(&self, ca: &Ca, expired: bool, tag: &str) -> NetClient {
        let pair = ca.leaf(&["someone"], expired);
        let mut files = self._dir.files(tag, &pair, &self.ca);
        files.ca = self
            ._dir
            .write(&format!("{tag}-trust.crt"), &self.ca.issuer.pem());
        self.client(files.client_config().unwrap())
    }

    fn good_call(&self) {
        let a = self
            .client(self.good.clone())
            .call("rpc_methods", json!({}))
            .unwrap();
        assert!(a["result"].as_array().is_some_and(|m| !m.is_empty()), "{a}");
    }

    /// An open, authenticated connection (its first call answered).
    fn open(&self) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        let tcp = TcpStream::connect(self.server.addr()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(self.good.clone(), name).unwrap();
        let mut s = rustls::StreamOwned::new(conn, tcp);
        let a = crate::server::exchange(&mut s, "rpc_methods", json!({})).unwrap();
        assert!(a["result"].is_array(), "{a}");
        s
    }
}

use serde_json::json;

#[test]
fn a_client_with_a_certificate_from_the_ca_is_served() {
    let s = setup("good");
    s.good_call();
    // By the server's DNS name too, when the client is told it.
    let by_name = NetClient::new(
        &s.server.addr().to_string(),
        Some("target.test"),
        s.good.clone(),
    )
    .unwrap();
    let a = by_name.call("subsystem_list", json!({})).unwrap();
    assert_eq!(a["result"], json!([]), "{a}");
}

#[test]
fn a_client_without_a_certificate_is_refused() {
    let s = setup("none");
    let trust = s._dir.write("trust.crt", &s.ca.issuer.pem());
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots("CA", &trust).unwrap())
        .with_no_client_auth();
    let e = s
        .client(Arc::new(cfg))
        .call("rpc_methods", json!({}))
        .unwrap_err();
    assert!(
        e.to_string().contains("management endpoint 127.0.0.1:")
            && e.to_string().contains("CertificateRequired"),
        "{e}"
    );
    s.good_call(); // and the endpoint still serves
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let s = setup("otherca");
    let other = Ca::new("someone else's CA");
    let e = s
        .client_from(&other, false, "other")
        .call("rpc_methods", json!({}))
        .unwrap_err();
    assert!(e.to_string().contains("UnknownCA"), "{e}");
    s.good_call();
}

#[test]
fn an_expired_certificate_is_refused() {
    let s = setup("expired");
    // The same CA: only the dates are wrong (and the same CA, not expired, passes).
    s.client_from(&s.ca, false, "fresh")
        .call("rpc_methods", json!({}))
        .unwrap();
    let e = s
        .client_from(&s.ca, true, "old")
        .call("rpc_methods", json!({}))
        .unwrap_err();
    assert!(e.to_string().contains("CertificateExpired"), "{e}");
    s.good_call();
}

#[test]
fn a_server_the_client_does_not_trust_is_refused_by_the_client() {
    let s = setup("untrusted");
    let other = Ca::new("another CA");
    let pair = s.ca.leaf(&["csi"], false);
    let files = s._dir.files("c", &pair, &other);
    let e = s
        .client(files.client_config().unwrap())
        .call("rpc_methods", json!({}))
        .unwrap_err();
    assert!(e.to_string().contains("certificate"), "{e}");
    // A name the server's certificate lacks: refused too.
    let wrong = NetClient::new(
        &s.server.addr().to_string(),
        Some("elsewhere.test"),
        s.good.clone(),
    )
    .unwrap();
    let e = wrong.call("rpc_methods", json!({})).unwrap_err();
    assert!(e.to_string().contains("certificate"), "{e}");
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let d = Dir::new("badfiles");
    let junk = d.write("junk.pem", "not a certificate\n");
    let files = TlsFiles::new(&junk, &junk, &junk);
    let e = files.server_config().unwrap_err().to_string();
    assert!(e.contains("junk.pem") && e.contains("client CA"), "{e}");
    let missing = TlsFiles::new(
        "/nonexistent/c.pem",
        "/nonexistent/k.pem",
        "/nonexistent/ca.pem",
    );
    let e = missing.client_config().unwrap_err().to_string();
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
}

#[test]
fn a_line_over_the_limit_is_answered_and_closed() {
    let s = setup("line");
    let mut c = s.open();
    let big = vec![b'x'; MAX_REQUEST + 2];
    // The server answers and closes while we may still be writing.
    let _ = c.write_all(&big).and_then(|_| c.flush());
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains(&jsonrpc::INVALID_REQUEST.to_string()) && text.contains("longer than"),
        "{text}"
    );
}

#[test]
fn a_batch_over_the_limit_is_refused() {
    let s = setup("batch");
    let mut c = s.open();
    let batch: Vec<_> = (0..=MAX_BATCH)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "rpc_methods"}))
        .collect();
    let line = format!("{}\n", serde_json::Value::Array(batch));
    c.write_all(line.as_bytes()).unwrap();
    c.flush().unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(b"\n") {
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "closed without an answer");
        got.extend_from_slice(&chunk[..n]);
    }
    let a: serde_json::Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(a["error"]["code"], json!(jsonrpc::INVALID_REQUEST), "{a}");
}

#[test]
fn clients_past_the_limit_are_closed_and_a_freed_place_is_reused() {
    let s = setup("count");
    let mut held: Vec<_> = (0..MAX_CLIENTS).map(|_| s.open()).collect();
    let e = s
        .client(s.good.clone())
        .call("rpc_methods", json!({}))
        .unwrap_err();
    // Closed before its handshake: the client sees the connection end.
    assert!(
        e.to_string().contains("end of file") || e.to_string().contains("reset"),
        "{e}"
    );
    drop(held.pop());
    // The server sees the close at its next read: retry until the place is free.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match s.client(s.good.clone()).call("rpc_methods", json!({})) {
            Ok(a) => {
                assert!(a["result"].is_array(), "{a}");
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "no place freed: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_silent_connection_is_dropped_after_the_handshake_timeout() {
    let s = setup("silent");
    let mut tcp = TcpStream::connect(s.server.addr()).unwrap();
    tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT * 12)).unwrap();
    let t0 = Instant::now();
    let mut b = [0u8; 64];
    // Closed by the server (EOF or reset), not by our read timeout.
    match tcp.read(&mut b) {
        Ok(n) => assert_eq!(n, 0, "the server sent bytes to a silent client"),
        Err(e) => assert!(!is_timeout(&e), "{e}"),
    }
    assert!(t0.elapsed() >= HANDSHAKE_TIMEOUT - Duration::from_millis(300));
}
