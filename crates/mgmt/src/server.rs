//! The management socket: JSON-RPC 2.0, one request (or batch) per line,
//! over a Unix stream socket of mode 0600 (only its owner, and root, may
//! manage the target). Plain threads: management is rare and never on the
//! I/O path.
//!
//! Hostile clients: a line longer than [`MAX_REQUEST`] is answered with an
//! error and the connection closed; a client idle for [`IDLE`] or that stops
//! reading for [`WRITE_TIMEOUT`] is dropped; at most [`MAX_CLIENTS`] are
//! served at once (more are told so and closed). Calls that change the
//! target are serialized by the target's management lock.

use crate::jsonrpc::{self, handle_line, MAX_REQUEST};
use crate::methods::Api;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zeroize::{Zeroize, Zeroizing};

pub const MAX_CLIENTS: usize = 16;
pub const IDLE: Duration = Duration::from_secs(60);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The read timeout [`serve_client`] expects its stream to have: idle time
/// is counted in these ticks, and a stop is noticed within one.
pub const READ_TICK: Duration = Duration::from_millis(200);
/// How often an idle accept loop looks at its stop flag.
const ACCEPT_POLL_MS: i32 = 250;

/// Waits until `fd` is readable or `ms` pass (no busy loop while idle).
pub(crate) fn wait_readable(fd: std::os::fd::RawFd, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// The default socket: `$XDG_RUNTIME_DIR/farflash.sock`, else
/// `/run/farflash.sock` for root, else `/tmp/farflash-UID.sock`.
pub fn default_socket_path() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&d).join("farflash.sock");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        PathBuf::from("/run/farflash.sock")
    } else {
        PathBuf::from(format!("/tmp/farflash-{uid}.sock"))
    }
}

/// A running management socket; dropping it stops the server and removes
/// the socket file (if it is still this server's).
pub struct RpcServer {
    path: PathBuf,
    ino: u64,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RpcServer {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Clears the way for a socket at `path`: a socket file nobody listens on
/// (left by a dead process) is removed; a live one, or anything that is not
/// a socket, is an error.
fn clear_stale(path: &Path) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{} is served by another process", path.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing a stale management socket");
            std::fs::remove_file(path)
        }
        Err(e) => Err(e),
    }
}

/// Binds `path` (mode 0600) and serves `api` on it in a thread.
pub fn start(api: Arc<Api>, path: &Path) -> io::Result<RpcServer> {
    clear_stale(path)?;
    // The socket is created with mode 0600 (umask 0177 around bind), so no
    // other user can connect even for an instant.
    // SAFETY: umask has no preconditions; it is restored right after bind.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let ino = std::fs::symlink_metadata(path)?.ino();
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("farflash-rpc".into())
        .spawn(move || accept_loop(listener, api, st))?;
    Ok(RpcServer {
        path: path.to_owned(),
        ino,
        stop,
        thread: Some(thread),
    })
}

/// The clients a management listener serves at once, at most
/// [`MAX_CLIENTS`], each on a thread of its own (the Unix socket and the TLS
/// endpoint, [`crate::net`], count theirs apart).
#[derive(Clone, Default)]
pub(crate) struct Clients(Arc<AtomicUsize>);

impl Clients {
    /// Takes a place for one more client; false when [`MAX_CLIENTS`] are
    /// served already.
    pub(crate) fn admit(&self) -> bool {
        if self.0.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Runs `serve` on a thread named `name` in the place [`Clients::admit`]
    /// took, and gives the place back when it returns (or when no thread
    /// could be started).
    pub(crate) fn run(&self, name: &str, serve: impl FnOnce() + Send + 'static) {
        let place = self.0.clone();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                serve();
                place.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// After a failed accept: nothing for a listener's spurious wake-ups, a
/// warning and a short pause for anything else (descriptors exhausted).
pub(crate) fn accept_failed(what: &str, e: &io::Error) {
    if !matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    ) {
        tracing::warn!("{what}: accept failed: {e}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn accept_loop(listener: UnixListener, api: Arc<Api>, stop: Arc<AtomicBool>) {
    use std::os::fd::AsRawFd;
    let clients = Clients::default();
    while !stop.load(Ordering::Acquire) {
        wait_readable(listener.as_raw_fd(), ACCEPT_POLL_MS);
        match listener.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
                // Short reads so a stop is noticed; idle time is counted across them.
                let _ = s.set_read_timeout(Some(READ_TICK));
                if !clients.admit() {
                    let e = jsonrpc::failure(
                        serde_json::Value::Null,
                        &jsonrpc::RpcError::new(jsonrpc::FAILED, "too many management clients"),
                    );
                    let _ = writeln!(s, "{e}");
                    continue;
                }
                let (api, st) = (api.clone(), stop.clone());
                clients.run("farflash-rpc-client", move || serve_client(s, &api, &st));
            }
            Err(e) => accept_failed("management socket", &e),
        }
    }
}

/// Serves one client until it closes, misbehaves or the server stops. The
/// stream's reads time out after [`READ_TICK`] and its writes after
/// [`WRITE_TIMEOUT`] (the caller sets both): the Unix socket and the TLS
/// endpoint ([`crate::net`]) apply the same limits through this loop.
pub fn serve_client<S: Read + Write>(mut s: S, api: &Api, stop: &AtomicBool) {
    // Requests may carry secrets (DH-HMAC-CHAP keys, TLS PSKs): every buffer
    // that held one is zeroized before it is freed or reused.
    let mut buf: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    let mut chunk = Zeroizing::new([0u8; 16384]);
    let mut idle = Duration::ZERO;
    loop {
        // Answer every complete line already buffered.
        let mut took = false;
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            took = true;
            let line: Zeroizing<Vec<u8>> = Zeroizing::new(buf.drain(..=nl).collect());
            let line = trim(&line[..line.len() - 1]);
            if line.is_empty() {
                continue;
            }
            if let Some(answer) = handle_line(line, |r| api.call(r)) {
                if send_line(&mut s, &answer).is_err() {
                    return; // gone, or not reading (write timeout)
                }
            }
        }
        if took {
            // drain() moved the rest to the front and left the old bytes
            // past it: keep the rest in a fresh buffer, zeroize the old.
            let old = std::mem::take(&mut *buf);
            append_zeroizing(&mut buf, &old);
            drop(Zeroizing::new(old));
        }
        if buf.len() > MAX_REQUEST {
            let e = jsonrpc::failure(
                serde_json::Value::Null,
                &jsonrpc::RpcError::new(
                    jsonrpc::INVALID_REQUEST,
                    format!("request longer than {MAX_REQUEST} bytes"),
                ),
            );
            let _ = send_line(&mut s, &e);
            return;
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        match s.read(&mut chunk[..]) {
            Ok(0) => {
                // The client closed its side: a last request without a newline still counts.
                let line = trim(&buf);
                if !line.is_empty() {
                    if let Some(answer) = handle_line(line, |r| api.call(r)) {
                        let _ = send_line(&mut s, &answer);
                    }
                }
                return;
            }
            Ok(n) => {
                idle = Duration::ZERO;
                append_zeroizing(&mut buf, &chunk[..n]);
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                idle += READ_TICK;
                if idle >= IDLE {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Appends `data` to `buf`, moving to a larger allocation by hand when it
/// must grow so that the old one is zeroized before it is freed (a `Vec`
/// growing on its own frees the old bytes as they are).
fn append_zeroizing(buf: &mut Vec<u8>, data: &[u8]) {
    if buf.capacity() - buf.len() < data.len() {
        let want = (buf.len() + data.len()).max(2 * buf.capacity()).max(4096);
        let mut grown = Vec::with_capacity(want);
        grown.extend_from_slice(buf);
        std::mem::replace(buf, grown).zeroize();
    }
    buf.extend_from_slice(data);
}

/// Writes `v` and a newline in one `write_all`: `writeln!` on the socket
/// would make a system call per piece the JSON formatter hands over (one
/// per escape: tens of thousands for a saved configuration's text). A
/// client's request may carry a secret, so the text is built in a buffer
/// that grows by [`append_zeroizing`] and is zeroized when sent.
pub(crate) fn send_line<W: Write>(s: &mut W, v: &serde_json::Value) -> io::Result<()> {
    struct Text(Zeroizing<Vec<u8>>);
    impl Write for Text {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            append_zeroizing(&mut self.0, b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut text = Text(Zeroizing::new(Vec::with_capacity(4096)));
    serde_json::to_writer(&mut text, v)?;
    append_zeroizing(&mut text.0, b"\n");
    s.write_all(&text.0)?;
    // A TLS stream may hold the last records until flushed.
    s.flush()
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// A client: sends one request and reads its answer (`farflash ctl`).
pub fn call(path: &Path, method: &str, params: serde_json::Value) -> io::Result<serde_json::Value> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot connect to {} ({e}); is farflash serve running, and is this its --rpc-socket?", path.display()),
        )
    })?;
    s.set_read_timeout(Some(CALL_TIMEOUT))?;
    exchange(&mut s, method, params)
}

/// How long a client waits for an answer (a `load_config` of a large
/// configuration, or an RBD namespace whose cluster is slow, take seconds).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Sends one request on `s` and reads its answer line.
pub(crate) fn exchange<S: Read + Write>(
    s: &mut S,
    method: &str,
    params: serde_json::Value,
) -> io::Result<serde_json::Value> {
    let mut req =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let sent = send_line(s, &req);
    jsonrpc::scrub(&mut req);
    sent?;
    let mut out = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
        if out.last() == Some(&b'\n') {
            break;
        }
        if out.len() > 64 << 20 {
            return Err(io::Error::other("answer too large"));
        }
    }
    serde_json::from_slice(&out)
        .map_err(|e| io::Error::other(format!("bad answer from the target: {e}")))
}

#[cfg(test)]
mod zeroizing_tests {
    use super::append_zeroizing;

    #[test]
    fn append_zeroizing_grows_and_keeps_the_bytes_in_order() {
        let mut buf = Vec::new();
        let mut want = Vec::new();
        for i in 0..300u32 {
            let piece: Vec<u8> = (0..(i % 97) as u8).map(|b| b ^ i as u8).collect();
            append_zeroizing(&mut buf, &piece);
            want.extend_from_slice(&piece);
        }
        assert_eq!(buf, want);
    }
}
