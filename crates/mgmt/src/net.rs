//! The management API over the network, never unauthenticated: TLS 1.3
//! (rustls) on TCP, the client's certificate checked against a configured
//! CA and refused without one; the server's certificate checked by the
//! client against the same kind of CA. Behind the handshake each client is
//! served by the Unix socket's loop ([`crate::server::serve_client`]), with
//! its limits: the line size, the batch size, the client count, the idle
//! and write timeouts. A TLS handshake not done within [`HANDSHAKE_TIMEOUT`]
//! is dropped; a client over [`MAX_CLIENTS`] is closed before its
//! handshake (while one is in progress it holds a place).
//!
//! Why client certificates: they authenticate the caller before a single
//! byte of JSON is read, need no secret on the wire, are made and rotated
//! with the openssl CLI (docs/management.md), and are what Kubernetes tools
//! already carry (a Secret of type kubernetes.io/tls).

use crate::methods::Api;
use crate::server::{
    accept_failed, serve_client, wait_readable, Clients, MAX_CLIENTS, READ_TICK, WRITE_TIMEOUT,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client waits for the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const ACCEPT_POLL_MS: i32 = 250;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn bad(what: &str, path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} {}: {e}", path.display()),
    )
}

/// The certificates of a PEM file (a chain: leaf first).
fn certs(what: &str, path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let list = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(what, path, e))?;
    if list.is_empty() {
        return Err(bad(what, path, "no CERTIFICATE block in the file"));
    }
    Ok(list)
}

fn private_key(what: &str, path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| bad(what, path, e))
}

fn roots(what: &str, path: &Path) -> io::Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    for c in certs(what, path)? {
        store.add(c).map_err(|e| bad(what, path, e))?;
    }
    Ok(store)
}

/// Where an endpoint's or a client's certificate, key and CA come from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    ca: std::path::PathBuf,
}

impl TlsFiles {
    /// `cert`: this side's certificate chain (PEM, leaf first); `key` its
    /// private key (PEM: PKCS#8, PKCS#1 or SEC1); `ca` the CA certificates
    /// (PEM) the peer's certificate must chain to.
    pub fn new(
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
        ca: impl Into<std::path::PathBuf>,
    ) -> TlsFiles {
        TlsFiles {
            cert: cert.into(),
            key: key.into(),
            ca: ca.into(),
        }
    }

    /// The endpoint's configuration: TLS 1.3 only, a client certificate
    /// that chains to `ca` (and is valid now) required.
    pub fn server_config(&self) -> io::Result<Arc<ServerConfig>> {
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots("client CA", &self.ca)?),
            provider(),
        )
        .build()
        .map_err(|e| bad("client CA", &self.ca, e))?;
        let cfg = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(io::Error::other)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                certs("certificate", &self.cert)?,
                private_key("key", &self.key)?,
            )
            .map_err(|e| bad("certificate and key", &self.cert, e))?;
        Ok(Arc::new(cfg))
    }

    /// A client's configuration: TLS 1.3, the server's certificate checked
    /// against `ca`, this side's certificate presented.
    pub fn client_config(&self) -> io::Result<Arc<ClientConfig>> {
        let cfg = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(io::Error::other)?
            .with_root_certificates(roots("CA", &self.ca)?)
            .with_client_auth_cert(
                certs("certificate", &self.cert)?,
                private_key("key", &self.key)?,
            )
            .map_err(|e| bad("certificate and key", &self.cert, e))?;
        Ok(Arc::new(cfg))
    }
}

/// A running TLS endpoint; dropping it stops it.
pub struct NetServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NetServer {
    /// The bound address (the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for NetServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds `addr` and serves `api` on it, over TLS with `tls`, in a thread.
pub fn start(api: Arc<Api>, addr: SocketAddr, tls: Arc<ServerConfig>) -> io::Result<NetServer> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("farflash-rpc-tls".into())
        .spawn(move || accept_loop(listener, api, tls, st))?;
    tracing::info!(%addr, "management endpoint (TLS 1.3, client certificates required)");
    Ok(NetServer {
        addr,
        stop,
        thread: Some(thread),
    })
}

fn accept_loop(
    listener: TcpListener,
    api: Arc<Api>,
    tls: Arc<ServerConfig>,
    stop: Arc<AtomicBool>,
) {
    use std::os::fd::AsRawFd;
    let clients = Clients::default();
    while !stop.load(Ordering::Acquire) {
        wait_readable(listener.as_raw_fd(), ACCEPT_POLL_MS);
        match listener.accept() {
            Ok((s, peer)) => {
                if !clients.admit() {
                    tracing::warn!(%peer, "management endpoint: {MAX_CLIENTS} clients already; connection closed");
                    continue;
                }
                let (api, st, tls) = (api.clone(), stop.clone(), tls.clone());
                clients.run("farflash-rpc-tls-client", move || {
                    serve_tls(s, peer, tls, &api, &st)
                });
            }
            Err(e) => accept_failed("management endpoint", &e),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Runs the server's side of the handshake within [`HANDSHAKE_TIMEOUT`].
fn handshake(
    tcp: &mut TcpStream,
    conn: &mut rustls::ServerConnection,
    stop: &AtomicBool,
) -> io::Result<()> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    while conn.is_handshaking() {
        match conn.complete_io(tcp) {
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {
                if Instant::now() >= deadline || stop.load(Ordering::Acquire) {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "TLS handshake not done in time",
                    ));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn serve_tls(
    mut tcp: TcpStream,
    peer: SocketAddr,
    tls: Arc<ServerConfig>,
    api: &Api,
    stop: &AtomicBool,
) {
    let set = tcp
        .set_nonblocking(false)
        .and_then(|_| tcp.set_nodelay(true))
        .and_then(|_| tcp.set_write_timeout(Some(WRITE_TIMEOUT)))
        .and_then(|_| tcp.set_read_timeout(Some(READ_TICK)));
    let mut conn =
        match set.and_then(|_| rustls::ServerConnection::new(tls).map_err(io::Error::other)) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%peer, "management endpoint: {e}");
                return;
            }
        };
    if let Err(e) = handshake(&mut tcp, &mut conn, stop) {
        tracing::warn!(%peer, "management endpoint: client refused: {e}");
        return;
    }
    tracing::debug!(%peer, "management client authenticated");
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    serve_client(&mut stream, api, stop);
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

/// A client of a TLS endpoint (`farflash ctl --rpc-connect`, the CSI
/// controller): one connection per call.
#[derive(Clone)]
pub struct NetClient {
    addr: String,
    name: ServerName<'static>,
    tls: Arc<ClientConfig>,
}

impl std::fmt::Debug for NetClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetClient")
            .field("addr", &self.addr)
            .finish()
    }
}

/// The host part of `HOST:PORT` or `[V6]:PORT`.
fn host_of(addr: &str) -> Option<&str> {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split_once(']').map(|(h, _)| h);
    }
    addr.rsplit_once(':')
        .map(|(h, _)| h)
        .filter(|h| !h.is_empty())
}

impl NetClient {
    /// `addr`: HOST:PORT; `server_name`: the name (DNS or IP) the target's
    /// certificate must carry (default: HOST).
    pub fn new(
        addr: &str,
        server_name: Option<&str>,
        tls: Arc<ClientConfig>,
    ) -> io::Result<NetClient> {
        let host = match server_name {
            Some(n) => n,
            None => host_of(addr).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("management address {addr:?}: want HOST:PORT"),
                )
            })?,
        };
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("server name {host:?}: {e}"),
            )
        })?;
        Ok(NetClient {
            addr: addr.to_owned(),
            name,
            tls,
        })
    }

    /// The address this client calls.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn connect(&self) -> io::Result<TcpStream> {
        let mut last = None;
        for sa in self.addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the address resolves to nothing")))
    }

    /// Sends one request and reads its answer (the JSON-RPC response).
    pub fn call(&self, method: &str, params: serde_json::Value) -> io::Result<serde_json::Value> {
        let ctx = |e: io::Error| {
            io::Error::new(e.kind(), format!("management endpoint {}: {e}", self.addr))
        };
        let tcp = self.connect().map_err(ctx)?;
        tcp.set_read_timeout(Some(crate::server::CALL_TIMEOUT))
            .map_err(ctx)?;
        tcp.set_write_timeout(Some(crate::server::CALL_TIMEOUT))
            .map_err(ctx)?;
        tcp.set_nodelay(true).map_err(ctx)?;
        let conn = rustls::ClientConnection::new(self.tls.clone(), self.name.clone())
            .map_err(|e| ctx(io::Error::other(e)))?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        let answer = crate::server::exchange(&mut s, method, params).map_err(ctx)?;
        s.conn.send_close_notify();
        let _ = s.flush();
        Ok(answer)
    }
}

#[cfg(test)]
#[path = "net_tests.rs"]
mod tests;
