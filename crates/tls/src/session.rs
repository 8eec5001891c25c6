//! TLS 1.3 sessions with external pre-shared keys, sans I/O, over OpenSSL 3
//! (`libssl.so.3`, opened at run time).
//!
//! A [`Session`] is fed the ciphertext that arrived from the peer
//! ([`Session::feed`]), hands out the plaintext it decrypted
//! ([`Session::read_plaintext`]), takes plaintext to send
//! ([`Session::write_vectored`], [`Session::write_plaintext`]) and holds
//! the ciphertext to write to the peer ([`Session::ciphertext`],
//! [`Session::consume_ciphertext`]). It never
//! blocks and never touches a socket: OpenSSL reads from and writes to two
//! memory BIOs. An event loop drives it as:
//!
//! ```text
//! on readable:   n = read(fd, buf); s.feed(&buf[..n])?;
//!                while let k @ 1.. = s.read_plaintext(&mut pt)? { handle(&pt[..k]) }
//! to send:       s.write_vectored(&pdus, limit)?    (bytes taken, in full records;
//!                                                    0 while s.is_handshaking())
//! on writable:   let c = s.ciphertext(); n = write(fd, c); s.consume_ciphertext(n);
//! after each:    if s.wants_close() && s.ciphertext().is_empty() { close(fd) }
//! ```
//!
//! What it negotiates (NVMe/TCP 1.0 §3.6.1, TP 8011): TLS 1.3 only; PSK
//! with (EC)DHE (`psk_dhe_ke`; OpenSSL refuses `psk_ke` unless told
//! otherwise); the cipher suite of the key's hash (SHA-256:
//! TLS_AES_128_GCM_SHA256, SHA-384: TLS_AES_256_GCM_SHA384); no
//! certificates (a client refuses any certificate a server sends, as it
//! has no trust anchors), no session tickets, no early data.
//!
//! The server chooses the key by the client's identity: OpenSSL's
//! ClientHello callback reads the identities of the `pre_shared_key`
//! extension and asks the [`ServerConfig`]'s lookup (Rust code, called
//! through `catch_unwind`) for each in turn; the first known one fixes the
//! key and narrows the server's cipher suites to the key's, before
//! OpenSSL chooses a suite, so that a client offering both suites gets the
//! one its key is for. The find-session callback then hands OpenSSL that
//! key (SPDK does the same with `SSL_set_psk_find_session_callback`). No
//! known identity, or no PSK at all: a `handshake_failure` alert (RFC 8446
//! also allows `unknown_psk_identity`; the alert tells the client nothing
//! about which of its identities exist). A known identity with the wrong
//! key: the binder does not verify, and OpenSSL 3 sends
//! `illegal_parameter` (RFC 8446 §6.2 would have `decrypt_error`).
//!
//! No allocation per record: the ciphertext output buffer and OpenSSL's
//! record and BIO buffers grow to their working size once and are reused;
//! plaintext goes into the caller's buffer.

use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::os::raw::{c_int, c_uchar, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Arc;

use farflash_dynload::LoadError;
use farflash_ssl_sys as sys;
use zeroize::Zeroizing;

use crate::psk::{CipherSuite, TlsPsk};
pub use farflash_psk::PskChoice;

/// Finds the key of an identity a client offers. Runs inside OpenSSL's
/// handshake (from [`Session::feed`]); a panic is caught and fails that
/// handshake with an `internal_error` alert.
pub trait PskLookup: Send + Sync {
    /// The key for `identity` (raw bytes from the ClientHello: parse with
    /// [`crate::PskIdentity::parse`]), or None if there is none.
    fn lookup(&self, identity: &[u8]) -> Option<PskChoice>;
}

impl<F> PskLookup for F
where
    F: Fn(&[u8]) -> Option<PskChoice> + Send + Sync,
{
    fn lookup(&self, identity: &[u8]) -> Option<PskChoice> {
        self(identity)
    }
}

/// Why a session failed. Holds no key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// OpenSSL 3 is not installed (the message names the package).
    #[error("{0}")]
    Unavailable(String),
    /// OpenSSL refused to set up a context or connection.
    #[error("TLS set-up failed: {0}")]
    Setup(String),
    /// The ClientHello had no `pre_shared_key` extension.
    #[error("the TLS client offered no pre-shared key (NVMe/TCP uses TLS with PSKs only)")]
    NoPsk,
    /// The ClientHello's PSK identities are malformed.
    #[error("the TLS client's pre_shared_key extension is malformed")]
    MalformedPskExtension,
    /// None of the client's identities has a key here.
    #[error("no PSK for the TLS client's identity {first:?}{}", if *offered > 1 { format!(" (nor its {} others)", offered - 1) } else { String::new() })]
    UnknownIdentity {
        /// How many identities the client offered.
        offered: usize,
        /// The first, printable characters only, shortened.
        first: String,
    },
    /// The PSK lookup panicked.
    #[error("the PSK lookup failed (panicked) during the handshake")]
    Lookup,
    /// The peer sent a fatal alert.
    #[error("the TLS peer sent the alert '{description}' ({alert})")]
    AlertReceived {
        /// RFC 8446 §6 AlertDescription.
        alert: u8,
        /// OpenSSL's name for it.
        description: String,
    },
    /// This side failed and sent the peer an alert.
    #[error("TLS failure ({reason}); sent the alert '{description}' ({alert})")]
    AlertSent {
        /// RFC 8446 §6 AlertDescription.
        alert: u8,
        /// OpenSSL's name for it.
        description: String,
        /// OpenSSL's error queue.
        reason: String,
    },
    /// A failure without an alert (e.g. the peer closed mid-handshake).
    #[error("TLS failure: {0}")]
    Protocol(String),
    /// The server completed the handshake without the PSK (a certificate
    /// handshake is never accepted).
    #[error("the TLS server did not use the pre-shared key")]
    NotPsk,
    /// Data written after close.
    #[error("the TLS session is closed")]
    Closed,
    /// An operation that needs the handshake complete.
    #[error("the TLS handshake is not complete")]
    Handshaking,
}

impl From<LoadError> for TlsError {
    fn from(e: LoadError) -> Self {
        TlsError::Unavailable(e.to_string())
    }
}

/// Drains OpenSSL's (per-thread) error queue into one line.
fn error_queue() -> String {
    let mut parts = Vec::new();
    loop {
        // SAFETY: no arguments; the library is loaded (every caller holds a
        // context or session).
        let code = unsafe { sys::ERR_get_error() };
        if code == 0 {
            break;
        }
        let mut buf = [0 as c_char; 256];
        // SAFETY: buf is writable for its length; OpenSSL NUL-terminates.
        unsafe { sys::ERR_error_string_n(code, buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated within buf, as above.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        parts.push(s.to_string_lossy().into_owned());
    }
    if parts.is_empty() {
        "no detail from OpenSSL".to_string()
    } else {
        parts.join("; ")
    }
}

/// Empties this thread's OpenSSL error queue (SSL_get_error needs it empty
/// before each call), looking first: clearing walks all its slots, and it
/// is nearly always empty already (a failure's entries are drained).
fn clear_errors() {
    // SAFETY: no arguments; the library is loaded.
    if unsafe { sys::ERR_peek_error() } != 0 {
        // SAFETY: as above.
        unsafe { sys::ERR_clear_error() };
    }
}

fn alert_name(alert: u8) -> String {
    // SAFETY: SSL_alert_desc_string_long takes any value and returns a
    // static NUL-terminated string.
    let p = unsafe { sys::SSL_alert_desc_string_long(alert as c_int) };
    if p.is_null() {
        return "unknown".to_string();
    }
    // SAFETY: p points to a static C string in libssl.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Printable ASCII of an identity, shortened, for messages.
fn printable(id: &[u8]) -> String {
    let mut s: String = id
        .iter()
        .take(120)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    if id.len() > 120 {
        s.push_str("...");
    }
    s
}

/// An `SSL_CTX`, freed when the last configuration holding it goes.
struct Ctx(*mut sys::SSL_CTX);

// SAFETY: an SSL_CTX is reference counted and locked internally; OpenSSL
// documents creating SSL objects from one context on several threads as
// safe, and farflash changes no setting after construction.
unsafe impl Send for Ctx {}
// SAFETY: as above: after construction it is only passed to SSL_new.
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the context came from SSL_CTX_new and is freed once; SSL
        // objects made from it hold their own reference.
        unsafe { sys::SSL_CTX_free(self.0) };
    }
}

const BOTH_SUITES: &CStr = c"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";

impl Ctx {
    fn new(server: bool) -> Result<Ctx, TlsError> {
        sys::load()?;
        clear_errors();
        // SAFETY: TLS_method returns a static method table.
        let ctx = unsafe { sys::SSL_CTX_new(sys::TLS_method()) };
        if ctx.is_null() {
            return Err(TlsError::Setup(error_queue()));
        }
        let ctx = Ctx(ctx);
        let v = sys::TLS1_3_VERSION as c_int;
        // SAFETY: ctx.0 is a live context; the strings are NUL-terminated;
        // the callbacks are extern "C" functions of the declared types that
        // never unwind.
        let ok = unsafe {
            sys::SSL_CTX_set_min_proto_version(ctx.0, v) == 1
                && sys::SSL_CTX_set_max_proto_version(ctx.0, v) == 1
                && sys::SSL_CTX_set_ciphersuites(ctx.0, BOTH_SUITES.as_ptr()) == 1
                && sys::SSL_CTX_set_num_tickets(ctx.0, 0) == 1
        };
        if !ok {
            return Err(TlsError::Setup(error_queue()));
        }
        if server {
            // SAFETY: as above.
            unsafe {
                sys::SSL_CTX_set_client_hello_cb(ctx.0, Some(client_hello_cb), ptr::null_mut())
            };
        } else {
            // Verify any certificate a server sends, against no trust
            // anchors: a server that does not take the PSK and offers a
            // certificate instead fails the handshake.
            // SAFETY: as above.
            unsafe { sys::SSL_CTX_set_verify(ctx.0, sys::SSL_VERIFY_PEER as c_int, None) };
        }
        Ok(ctx)
    }
}

/// What client sessions share: an OpenSSL context. Cheap to clone.
#[derive(Clone)]
pub struct ClientConfig {
    ctx: Arc<Ctx>,
}

impl ClientConfig {
    /// Loads OpenSSL (once per process) and makes a client context.
    pub fn new() -> Result<ClientConfig, TlsError> {
        Ok(ClientConfig {
            ctx: Arc::new(Ctx::new(false)?),
        })
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientConfig")
    }
}

/// What server sessions share: an OpenSSL context and the PSK lookup.
/// Cheap to clone.
#[derive(Clone)]
pub struct ServerConfig {
    ctx: Arc<Ctx>,
    lookup: Arc<dyn PskLookup>,
    max_identities: usize,
}

impl ServerConfig {
    /// At most this many of a ClientHello's identities are looked up.
    pub const DEFAULT_MAX_IDENTITIES: usize = 8;

    /// Loads OpenSSL (once per process) and makes a server context whose
    /// sessions find keys with `lookup`.
    pub fn new(lookup: impl PskLookup + 'static) -> Result<ServerConfig, TlsError> {
        Ok(ServerConfig {
            ctx: Arc::new(Ctx::new(true)?),
            lookup: Arc::new(lookup),
            max_identities: Self::DEFAULT_MAX_IDENTITIES,
        })
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("max_identities", &self.max_identities)
            .finish_non_exhaustive()
    }
}

/// Which end of the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Accepts (the NVMe controller).
    Server,
    /// Connects (the NVMe host).
    Client,
}

/// Why the ClientHello callback refused.
#[derive(Clone, Debug)]
enum Refusal {
    NoPsk,
    Malformed,
    Unknown { offered: usize, first: String },
    Lookup,
}

struct Chosen {
    identity: Vec<u8>,
    psk: TlsPsk,
    tag: u64,
}

/// What the callbacks reach through the SSL object's application data.
struct Shared {
    lookup: Option<Arc<dyn PskLookup>>,
    max_identities: usize,
    chosen: Option<Chosen>,
    refusal: Option<Refusal>,
    client: Option<(Vec<u8>, TlsPsk)>,
    alert_sent: Option<u8>,
    alert_received: Option<u8>,
    /// Set once the handshake completed: handshake messages after it are
    /// post-handshake ones.
    established: bool,
    /// Inside SSL_read (so an exchange that ends is the peer's).
    reading: bool,
    /// Post-handshake messages received (with external PSKs and no
    /// tickets a server only receives KeyUpdate; RFC 8446 §4.6).
    post_handshake: u64,
}

/// Where a session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The handshake is under way (waiting for the peer's next flight, or
    /// for the rest of a record).
    Handshaking,
    /// Application data flows.
    Established,
    /// close_notify was sent, received, or both.
    Closed,
    /// A fatal error; [`Session::error`] says which.
    Failed,
}

/// One TLS connection, either end. See the module documentation.
pub struct Session {
    role: Role,
    ssl: *mut sys::SSL,
    rbio: *mut sys::BIO,
    shared: *mut Shared,
    /// The ciphertext to send, written there by the write BIO ([`Sink`]).
    sink: *mut Sink,
    /// Short pieces gathered into one record ([`Session::write_vectored`]).
    stage: Vec<u8>,
    state: State,
    error: Option<TlsError>,
    close_sent: bool,
    peer_closed: bool,
}

// SAFETY: the SSL object, its BIOs and the Shared block are owned by this
// Session alone and used only through &mut self; OpenSSL allows an SSL
// object to move between threads when it is not used concurrently. Shared
// holds Send + Sync data only (Arc<dyn PskLookup>, keys, bytes).
unsafe impl Send for Session {}

const OUT_CAPACITY: usize = 32 * 1024;
/// The most plaintext one record carries (RFC 8446 §5.1: 2^14 bytes).
pub const MAX_PLAINTEXT: usize = 16 * 1024;
/// A run of full records handed to OpenSSL at once by
/// [`Session::write_vectored`] before the output limit is looked at again.
const DIRECT_RUN: usize = 4 * MAX_PLAINTEXT;

impl Session {
    /// A server session: waits for a ClientHello.
    pub fn server(config: &ServerConfig) -> Result<Session, TlsError> {
        let shared = Shared {
            lookup: Some(config.lookup.clone()),
            max_identities: config.max_identities,
            chosen: None,
            refusal: None,
            client: None,
            alert_sent: None,
            alert_received: None,
            established: false,
            reading: false,
            post_handshake: 0,
        };
        Session::new(&config.ctx, Role::Server, shared)
    }

    /// A client session offering `identity` with `psk` (and only the
    /// cipher suite of `psk`); its ClientHello is ready in
    /// [`Session::ciphertext`] on return.
    pub fn client(
        config: &ClientConfig,
        identity: &[u8],
        psk: TlsPsk,
    ) -> Result<Session, TlsError> {
        if identity.is_empty() || identity.len() > u16::MAX as usize {
            return Err(TlsError::Setup(format!(
                "a PSK identity is 1 to 65535 bytes, not {}",
                identity.len()
            )));
        }
        let suite = CString::new(psk.suite().name()).unwrap_or_default();
        let shared = Shared {
            lookup: None,
            max_identities: 0,
            chosen: None,
            refusal: None,
            client: Some((identity.to_vec(), psk)),
            alert_sent: None,
            alert_received: None,
            established: false,
            reading: false,
            post_handshake: 0,
        };
        let mut s = Session::new(&config.ctx, Role::Client, shared)?;
        // SAFETY: s.ssl is live; suite is NUL-terminated.
        if unsafe { sys::SSL_set_ciphersuites(s.ssl, suite.as_ptr()) } != 1 {
            return Err(TlsError::Setup(error_queue()));
        }
        s.step_handshake()?;
        Ok(s)
    }

    fn new(ctx: &Ctx, role: Role, shared: Shared) -> Result<Session, TlsError> {
        clear_errors();
        // SAFETY: ctx.0 is a live context.
        let ssl = unsafe { sys::SSL_new(ctx.0) };
        if ssl.is_null() {
            return Err(TlsError::Setup(error_queue()));
        }
        let method = sink_method()?;
        // SAFETY: BIO_s_mem returns a static method table; `method` is the
        // process's sink method table, never freed.
        let (rbio, wbio) = unsafe { (sys::BIO_new(sys::BIO_s_mem()), sys::BIO_new(method)) };
        if rbio.is_null() || wbio.is_null() {
            let e = TlsError::Setup(error_queue());
            // SAFETY: all three are ours alone (the BIOs not yet given to
            // the SSL object), each freed once; BIO_free takes NULL.
            unsafe {
                sys::BIO_free(rbio);
                sys::BIO_free(wbio);
                sys::SSL_free(ssl);
            }
            return Err(e);
        }
        let s = Session {
            role,
            ssl,
            rbio,
            shared: Box::into_raw(Box::new(shared)),
            sink: Box::into_raw(Box::new(Sink {
                buf: Vec::with_capacity(OUT_CAPACITY),
                pos: 0,
            })),
            stage: Vec::new(),
            state: State::Handshaking,
            error: None,
            close_sent: false,
            peer_closed: false,
        };
        // SAFETY: ssl, rbio and wbio are live; SSL_set_bio takes ownership
        // of both BIOs (freed with the SSL object). An empty memory BIO
        // reports "retry" rather than end of file. The write BIO appends to
        // s.sink, which, like s.shared, stays valid until Session's Drop,
        // which frees the SSL object (and with it the BIOs) first, so
        // neither the BIO nor the callbacks ever see them dangling. The
        // callbacks are extern "C" functions of the declared types that
        // never unwind.
        let ok = unsafe {
            sys::BIO_set_mem_eof_return(rbio, -1);
            sys::BIO_set_data(wbio, s.sink.cast());
            sys::BIO_set_init(wbio, 1);
            sys::SSL_set_bio(ssl, rbio, wbio);
            sys::SSL_set_info_callback(ssl, Some(info_cb));
            match role {
                Role::Server => {
                    sys::SSL_set_accept_state(ssl);
                    sys::SSL_set_psk_find_session_callback(ssl, Some(find_session_cb));
                }
                Role::Client => {
                    sys::SSL_set_connect_state(ssl);
                    sys::SSL_set_psk_use_session_callback(ssl, Some(use_session_cb));
                }
            }
            sys::SSL_set_ex_data(ssl, 0, s.shared.cast()) == 1
        };
        if !ok {
            return Err(TlsError::Setup(error_queue()));
        }
        Ok(s)
    }

    fn shared(&self) -> &Shared {
        // SAFETY: shared is a live Box (freed only in Drop); no OpenSSL call
        // (hence no callback writing to it) runs while this borrow lives,
        // as every method takes &self or &mut self for the whole call.
        unsafe { &*self.shared }
    }

    fn shared_mut(&mut self) -> &mut Shared {
        // SAFETY: as in shared(); &mut self excludes any other borrow, and
        // no OpenSSL call runs while this one lives.
        unsafe { &mut *self.shared }
    }

    /// How many post-handshake messages (KeyUpdate: RFC 8446 §4.6.3) the
    /// peer's records carried so far, for a caller that caps their rate.
    pub fn post_handshake_messages(&self) -> u64 {
        self.shared().post_handshake
    }

    /// Which end this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Where the session is.
    pub fn state(&self) -> State {
        if self.error.is_some() {
            State::Failed
        } else if self.close_sent || self.peer_closed {
            State::Closed
        } else {
            self.state
        }
    }

    /// True until the handshake completes (or fails).
    pub fn is_handshaking(&self) -> bool {
        self.state() == State::Handshaking
    }

    /// True once the connection should be closed after
    /// [`Session::ciphertext`] is flushed: a fatal error (whose alert is in
    /// the ciphertext), or close_notify sent or received.
    pub fn wants_close(&self) -> bool {
        self.error.is_some() || self.close_sent || self.peer_closed
    }

    /// True once the peer's close_notify arrived.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// The error that ended the session, if one did.
    pub fn error(&self) -> Option<&TlsError> {
        self.error.as_ref()
    }

    /// OpenSSL's name of the handshake state (`SSLv3/TLS read client
    /// hello` ...), for logs of a handshake that stalls.
    pub fn handshake_step(&self) -> String {
        // SAFETY: ssl is live; the result is a static C string.
        let p = unsafe { sys::SSL_state_string_long(self.ssl) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a static NUL-terminated string in libssl.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The negotiated cipher suite, once established.
    pub fn suite(&self) -> Option<CipherSuite> {
        if self.state == State::Handshaking {
            return None;
        }
        // SAFETY: ssl is live; the cipher pointer, if any, is static.
        let c = unsafe { sys::SSL_get_current_cipher(self.ssl) };
        if c.is_null() {
            return None;
        }
        // SAFETY: c is a live cipher.
        CipherSuite::from_wire(unsafe { sys::SSL_CIPHER_get_protocol_id(c) })
    }

    /// The PSK identity in use: the one the server chose from the
    /// ClientHello, or the one the client offers.
    pub fn identity(&self) -> Option<&[u8]> {
        let sh = self.shared();
        match self.role {
            Role::Server => sh.chosen.as_ref().map(|c| &c.identity[..]),
            Role::Client => sh.client.as_ref().map(|c| &c.0[..]),
        }
    }

    /// The server's [`PskChoice::tag`] of the chosen identity.
    pub fn tag(&self) -> Option<u64> {
        self.shared().chosen.as_ref().map(|c| c.tag)
    }

    /// The key in use (server: chosen; client: offered).
    pub fn psk(&self) -> Option<&TlsPsk> {
        let sh = self.shared();
        match self.role {
            Role::Server => sh.chosen.as_ref().map(|c| &c.psk),
            Role::Client => sh.client.as_ref().map(|c| &c.1),
        }
    }

    fn check(&self) -> Result<(), TlsError> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Gives the session ciphertext received from the peer. Runs the
    /// handshake as far as the bytes allow; application data stays
    /// buffered for [`Session::read_plaintext`].
    pub fn feed(&mut self, ciphertext: &[u8]) -> Result<(), TlsError> {
        self.check()?;
        if ciphertext.is_empty() || self.peer_closed {
            return Ok(());
        }
        let mut n = 0usize;
        // SAFETY: rbio is live (owned by ssl); the slice is readable for its
        // length; a memory BIO copies it.
        let ok = unsafe {
            sys::BIO_write_ex(
                self.rbio,
                ciphertext.as_ptr().cast(),
                ciphertext.len(),
                &mut n,
            )
        };
        if ok != 1 || n != ciphertext.len() {
            return Err(self.fail_with(TlsError::Setup(format!(
                "memory BIO took {n} of {} bytes",
                ciphertext.len()
            ))));
        }
        if self.state == State::Handshaking {
            self.step_handshake()?;
        }
        Ok(())
    }

    fn step_handshake(&mut self) -> Result<(), TlsError> {
        clear_errors();
        // SAFETY: ssl is live; callbacks reach Shared through the pointer
        // registered in new(), and no Rust reference to Shared is held here.
        let r = unsafe { sys::SSL_do_handshake(self.ssl) };
        if r == 1 {
            // SAFETY: ssl is live.
            if self.role == Role::Client && unsafe { sys::SSL_session_reused(self.ssl) } != 1 {
                return Err(self.fail_with(TlsError::NotPsk));
            }
            self.state = State::Established;
            self.shared_mut().established = true;
            return Ok(());
        }
        self.after_error(r).map(|_| ())
    }

    /// Handles a failed SSL_* call's return value: Ok(false) when it only
    /// needs more input (or the peer closed cleanly), Err when fatal.
    fn after_error(&mut self, r: c_int) -> Result<bool, TlsError> {
        // SAFETY: ssl is live; r is the return of the call just made on it.
        let e = unsafe { sys::SSL_get_error(self.ssl, r) } as u32;
        match e {
            sys::SSL_ERROR_WANT_READ | sys::SSL_ERROR_WANT_WRITE => Ok(false),
            sys::SSL_ERROR_ZERO_RETURN if self.state == State::Established => {
                self.peer_closed = true;
                Ok(false)
            }
            sys::SSL_ERROR_ZERO_RETURN => Err(self.fail_with(TlsError::Protocol(
                "the peer closed (close_notify) during the handshake".into(),
            ))),
            _ => {
                let reason = error_queue();
                let sh = self.shared();
                let err = if let Some(r) = &sh.refusal {
                    match r {
                        Refusal::NoPsk => TlsError::NoPsk,
                        Refusal::Malformed => TlsError::MalformedPskExtension,
                        Refusal::Unknown { offered, first } => TlsError::UnknownIdentity {
                            offered: *offered,
                            first: first.clone(),
                        },
                        Refusal::Lookup => TlsError::Lookup,
                    }
                } else if let Some(a) = sh.alert_received.filter(|&a| a != 0) {
                    TlsError::AlertReceived {
                        alert: a,
                        description: alert_name(a),
                    }
                } else if let Some(a) = sh.alert_sent {
                    TlsError::AlertSent {
                        alert: a,
                        description: alert_name(a),
                        reason,
                    }
                } else {
                    TlsError::Protocol(reason)
                };
                Err(self.fail_with(err))
            }
        }
    }

    fn fail_with(&mut self, err: TlsError) -> TlsError {
        clear_errors();
        self.error = Some(err.clone());
        self.state = State::Failed;
        err
    }

    fn sink(&self) -> &Sink {
        // SAFETY: sink is a live Box (freed only in Drop); the write BIO
        // appends to it only inside an OpenSSL call, and none runs while
        // this borrow lives (every method takes &self or &mut self for the
        // whole call).
        unsafe { &*self.sink }
    }

    fn sink_mut(&mut self) -> &mut Sink {
        // SAFETY: as in sink(); &mut self excludes any other borrow.
        unsafe { &mut *self.sink }
    }

    /// Whether anything received is still to be processed: ciphertext in
    /// the read BIO, or a record (part) or plaintext buffered in OpenSSL.
    /// When neither, a read can only say "want read": it is skipped.
    fn has_pending_input(&self) -> bool {
        // SAFETY: rbio and ssl are live.
        unsafe { sys::BIO_ctrl_pending(self.rbio) > 0 || sys::SSL_has_pending(self.ssl) == 1 }
    }

    /// Decrypts received application data into `buf`: the number of bytes
    /// (at most one record's), or 0 when there is nothing now (the
    /// handshake is still running, a record is incomplete, or the peer
    /// closed: see [`Session::peer_closed`]). KeyUpdate and other
    /// post-handshake messages are handled here; call until it returns 0
    /// after each [`Session::feed`].
    pub fn read_plaintext(&mut self, buf: &mut [u8]) -> Result<usize, TlsError> {
        self.check()?;
        if self.state == State::Handshaking {
            self.step_handshake()?;
            if self.state == State::Handshaking {
                return Ok(0);
            }
        }
        if buf.is_empty() || self.peer_closed || !self.has_pending_input() {
            return Ok(0);
        }
        clear_errors();
        let mut n = 0usize;
        self.shared_mut().reading = true;
        // SAFETY: ssl is live; buf is writable for its length.
        let r = unsafe { sys::SSL_read_ex(self.ssl, buf.as_mut_ptr().cast(), buf.len(), &mut n) };
        self.shared_mut().reading = false;
        if r == 1 {
            return Ok(n);
        }
        self.after_error(r)?;
        Ok(0)
    }

    /// Encrypts `data` as application data (in records of at most 16 KiB)
    /// into the output: returns `data.len()`, or 0 while the handshake is
    /// running (nothing taken). The output grows without bound: an event
    /// loop should stop writing while [`Session::ciphertext`] is long.
    pub fn write_plaintext(&mut self, data: &[u8]) -> Result<usize, TlsError> {
        self.check()?;
        if self.close_sent {
            return Err(TlsError::Closed);
        }
        if self.state == State::Handshaking || data.is_empty() {
            return Ok(0);
        }
        clear_errors();
        let mut n = 0usize;
        // SAFETY: ssl is live; data is readable for its length.
        let r = unsafe { sys::SSL_write_ex(self.ssl, data.as_ptr().cast(), data.len(), &mut n) };
        if r == 1 {
            return Ok(n);
        }
        self.after_error(r)?;
        Ok(0)
    }

    /// Encrypts the bytes of `iov`, in order, as application data in as
    /// few records as they fit: short pieces are gathered into one record
    /// (a PDU header, its data and the next response in one record rather
    /// than three: every record costs a header, a tag and a cipher call),
    /// and a long piece goes to OpenSSL in whole records without a copy.
    /// Stops taking, at a record boundary, once the ciphertext waiting is
    /// `out_limit` bytes or more. Returns the bytes taken (0 while the
    /// handshake runs): the caller drops that many from the front of what
    /// it sends.
    pub fn write_vectored(
        &mut self,
        iov: &[std::io::IoSlice<'_>],
        out_limit: usize,
    ) -> Result<usize, TlsError> {
        self.check()?;
        if self.close_sent {
            return Err(TlsError::Closed);
        }
        if self.state == State::Handshaking {
            return Ok(0);
        }
        let mut stage = std::mem::take(&mut self.stage);
        stage.clear();
        let r = self.write_records(iov, out_limit, &mut stage);
        self.stage = stage;
        r
    }

    fn write_records(
        &mut self,
        iov: &[std::io::IoSlice<'_>],
        out_limit: usize,
        stage: &mut Vec<u8>,
    ) -> Result<usize, TlsError> {
        let mut taken = 0;
        for piece in iov {
            let mut b: &[u8] = piece;
            while !b.is_empty() {
                if stage.is_empty() {
                    if self.sink().pending().len() >= out_limit {
                        return Ok(taken);
                    }
                    if b.len() >= MAX_PLAINTEXT {
                        let n = (b.len() - b.len() % MAX_PLAINTEXT).min(DIRECT_RUN);
                        self.write_all(&b[..n])?;
                        taken += n;
                        b = &b[n..];
                        continue;
                    }
                }
                let n = b.len().min(MAX_PLAINTEXT - stage.len());
                stage.extend_from_slice(&b[..n]);
                b = &b[n..];
                if stage.len() == MAX_PLAINTEXT {
                    self.write_all(stage)?;
                    taken += stage.len();
                    stage.clear();
                }
            }
        }
        if !stage.is_empty() {
            self.write_all(stage)?;
            taken += stage.len();
            stage.clear();
        }
        Ok(taken)
    }

    /// Encrypts all of `data` (established, not closed: checked by the caller).
    fn write_all(&mut self, data: &[u8]) -> Result<(), TlsError> {
        match self.write_plaintext(data)? {
            n if n == data.len() => Ok(()),
            n => Err(self.fail_with(TlsError::Setup(format!(
                "OpenSSL took {n} of {} bytes of application data",
                data.len()
            )))),
        }
    }

    /// The ciphertext waiting to be sent to the peer (handshake messages,
    /// records, alerts).
    pub fn ciphertext(&mut self) -> &[u8] {
        self.sink().pending()
    }

    /// Marks the first `n` bytes of [`Session::ciphertext`] as sent.
    pub fn consume_ciphertext(&mut self, n: usize) {
        self.sink_mut().consume(n);
    }

    /// Sends a KeyUpdate (RFC 8446 §4.6.3): new traffic keys for what this
    /// side sends, and with `request_peer` the peer is asked to do the
    /// same. The message is in [`Session::ciphertext`] on return.
    pub fn key_update(&mut self, request_peer: bool) -> Result<(), TlsError> {
        self.check()?;
        if self.state != State::Established || self.close_sent || self.peer_closed {
            return Err(if self.state == State::Handshaking {
                TlsError::Handshaking
            } else {
                TlsError::Closed
            });
        }
        let kind = if request_peer {
            sys::SSL_KEY_UPDATE_REQUESTED
        } else {
            sys::SSL_KEY_UPDATE_NOT_REQUESTED
        } as c_int;
        clear_errors();
        // SAFETY: ssl is live and established.
        if unsafe { sys::SSL_key_update(self.ssl, kind) } != 1 {
            let e = TlsError::Protocol(error_queue());
            return Err(self.fail_with(e));
        }
        // SSL_key_update only schedules the message; a handshake call sends
        // it (SSL_key_update(3)).
        // SAFETY: ssl is live.
        let r = unsafe { sys::SSL_do_handshake(self.ssl) };
        if r != 1 {
            self.after_error(r)?;
        }
        Ok(())
    }

    /// Sends close_notify (once); the session takes no more data. The
    /// alert is in [`Session::ciphertext`] on return.
    pub fn close(&mut self) {
        if self.close_sent || self.error.is_some() {
            return;
        }
        self.close_sent = true;
        if self.state != State::Established {
            // Nothing to close cleanly mid-handshake: the caller drops the
            // connection.
            return;
        }
        clear_errors();
        // SAFETY: ssl is live; the first call writes close_notify to wbio.
        unsafe { sys::SSL_shutdown(self.ssl) };
        clear_errors();
    }
}

/// The ciphertext waiting for the socket. OpenSSL's write BIO is a sink of
/// our own that appends each record here as it is made (a memory BIO
/// would hold it for another copy out).
struct Sink {
    buf: Vec<u8>,
    /// Bytes of `buf` already sent.
    pos: usize,
}

/// Sent bytes kept at the front of a sink before they are dropped while
/// more waits behind them.
const SINK_COMPACT: usize = 64 * 1024;

impl Sink {
    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.buf.len());
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos >= SINK_COMPACT {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// (Never after everything was sent: `consume` empties it then.)
    fn append(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }
}

/// The process's method table for [`Sink`] BIOs (made once, never freed,
/// as OpenSSL's own static tables).
struct SinkMethod(*mut sys::BIO_METHOD);
// SAFETY: the table is only read by OpenSSL once made, from any thread.
unsafe impl Send for SinkMethod {}
// SAFETY: as above.
unsafe impl Sync for SinkMethod {}

fn sink_method() -> Result<*mut sys::BIO_METHOD, TlsError> {
    static METHOD: std::sync::OnceLock<Result<SinkMethod, String>> = std::sync::OnceLock::new();
    let m = METHOD.get_or_init(|| {
        // SAFETY: the library is loaded (a context exists); the name is a
        // static NUL-terminated string; the callbacks match the declared
        // types and never unwind.
        unsafe {
            let index = sys::BIO_get_new_index();
            if index == -1 {
                return Err(error_queue());
            }
            let m = sys::BIO_meth_new(
                index | sys::BIO_TYPE_SOURCE_SINK as c_int,
                c"farflash ciphertext sink".as_ptr(),
            );
            if m.is_null()
                || sys::BIO_meth_set_write_ex(m, Some(sink_write)) != 1
                || sys::BIO_meth_set_ctrl(m, Some(sink_ctrl)) != 1
            {
                return Err(error_queue());
            }
            Ok(SinkMethod(m))
        }
    });
    match m {
        Ok(m) => Ok(m.0),
        Err(e) => Err(TlsError::Setup(format!(
            "cannot make the ciphertext BIO: {e}"
        ))),
    }
}

/// The sink BIO's write: appends the record OpenSSL made to the session's
/// [`Sink`]; never refuses (the event loop bounds what it encrypts).
unsafe extern "C" fn sink_write(
    b: *mut sys::BIO,
    data: *const c_char,
    len: usize,
    written: *mut usize,
) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: b is a sink BIO whose data is its session's live Sink
        // (set in Session::new, freed after the BIO); no Rust borrow of it
        // is held during an OpenSSL call.
        let sink = unsafe { sys::BIO_get_data(b) }.cast::<Sink>();
        if sink.is_null() || (data.is_null() && len > 0) {
            return 0;
        }
        if len > 0 {
            // SAFETY: OpenSSL passes `len` readable bytes at `data`.
            let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
            // SAFETY: as above.
            unsafe { &mut *sink }.append(bytes);
        }
        if !written.is_null() {
            // SAFETY: OpenSSL passes a writable size_t.
            unsafe { *written = len };
        }
        1
    }))
    .unwrap_or(0)
}

/// The sink BIO's control: a flush (after a flight of handshake messages)
/// succeeds, as nothing is held back; everything else is unsupported (0).
unsafe extern "C" fn sink_ctrl(
    _b: *mut sys::BIO,
    cmd: c_int,
    _num: std::os::raw::c_long,
    _ptr: *mut c_void,
) -> std::os::raw::c_long {
    (cmd == sys::BIO_CTRL_FLUSH as c_int) as std::os::raw::c_long
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: ssl came from SSL_new and is freed once, with the BIOs it
        // owns (the cleanse of the session's key is OpenSSL's); no callback
        // and no BIO write runs after SSL_free, so Shared and the Sink are
        // freed after it, once each, from the Boxes they were made from.
        unsafe {
            sys::SSL_free(self.ssl);
            drop(Box::from_raw(self.shared));
            drop(Box::from_raw(self.sink));
        }
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("role", &self.role)
            .field("state", &self.state())
            .field("suite", &self.suite())
            .field("identity", &self.identity().map(printable))
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// The Shared block of an SSL object, from its application data.
///
/// # Safety
/// `ssl` is an SSL object made by [`Session::new`], inside one of its
/// callbacks (so the Session, and its Shared block, are alive and no other
/// reference to Shared is in use).
unsafe fn shared_of<'a>(ssl: *const sys::SSL) -> Option<&'a mut Shared> {
    // SAFETY: the caller's contract; index 0 holds the Box pointer.
    let p = unsafe { sys::SSL_get_ex_data(ssl, 0) } as *mut Shared;
    // SAFETY: as above; p is null only if set-up failed before ex_data.
    unsafe { p.as_mut() }
}

/// `SSL_SESSION` for an external PSK: the key, its cipher, TLS 1.3.
///
/// # Safety
/// `ssl` is a live SSL object (for the cipher lookup).
unsafe fn psk_session(ssl: *mut sys::SSL, psk: &TlsPsk) -> *mut sys::SSL_SESSION {
    let id = psk.suite().wire_id();
    // SAFETY: ssl is live; id points to the 2 bytes SSL_CIPHER_find reads.
    let cipher = unsafe { sys::SSL_CIPHER_find(ssl, id.as_ptr()) };
    if cipher.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: no arguments.
    let s = unsafe { sys::SSL_SESSION_new() };
    if s.is_null() {
        return s;
    }
    let key = psk.expose_secret();
    // SAFETY: s is a new session we own; the key slice is readable for its
    // length (at most 48 bytes, TlsPsk::MAX_LEN) and copied; cipher is a
    // static table entry.
    let ok = unsafe {
        sys::SSL_SESSION_set1_master_key(s, key.as_ptr(), key.len()) == 1
            && sys::SSL_SESSION_set_cipher(s, cipher) == 1
            && sys::SSL_SESSION_set_protocol_version(s, sys::TLS1_3_VERSION as c_int) == 1
    };
    if !ok {
        // SAFETY: s is ours and not handed out.
        unsafe { sys::SSL_SESSION_free(s) };
        return ptr::null_mut();
    }
    s
}

/// The identities of a `pre_shared_key` extension (RFC 8446 §4.2.11):
/// `identities<7..2^16-1>` of `opaque identity<1..2^16-1>; uint32 age`,
/// then the binders (not read here; OpenSSL checks them).
fn psk_identities(ext: &[u8]) -> Option<Vec<&[u8]>> {
    let total = u16::from_be_bytes([*ext.first()?, *ext.get(1)?]) as usize;
    let mut list = ext.get(2..2 + total)?;
    let mut ids = Vec::new();
    while !list.is_empty() {
        let len = u16::from_be_bytes([*list.first()?, *list.get(1)?]) as usize;
        let id = list.get(2..2 + len)?;
        if id.is_empty() {
            return None;
        }
        // The 4-byte obfuscated_ticket_age follows.
        list = list.get(2 + len + 4..)?;
        ids.push(id);
    }
    (!ids.is_empty()).then_some(ids)
}

const SUCCESS: c_int = sys::SSL_CLIENT_HELLO_SUCCESS as c_int;
const ERROR: c_int = sys::SSL_CLIENT_HELLO_ERROR as c_int;

/// The server's ClientHello callback: chooses the PSK by identity and
/// narrows the suites to its suite. Never unwinds.
unsafe extern "C" fn client_hello_cb(
    ssl: *mut sys::SSL,
    al: *mut c_int,
    _arg: *mut c_void,
) -> c_int {
    let run = || -> Result<(), u32> {
        // SAFETY: OpenSSL calls this with the SSL object of a Session.
        let Some(sh) = (unsafe { shared_of(ssl) }) else {
            return Err(sys::SSL_AD_INTERNAL_ERROR);
        };
        let mut p: *const c_uchar = ptr::null();
        let mut len = 0usize;
        // SAFETY: ssl is in its ClientHello callback; p and len are
        // writable; the extension bytes stay valid during the callback.
        let present =
            unsafe { sys::SSL_client_hello_get0_ext(ssl, sys::TLSEXT_TYPE_psk, &mut p, &mut len) };
        if present != 1 || p.is_null() {
            sh.refusal = Some(Refusal::NoPsk);
            return Err(sys::SSL_AD_HANDSHAKE_FAILURE);
        }
        // SAFETY: OpenSSL's pointer to `len` bytes of the extension.
        let ext = unsafe { std::slice::from_raw_parts(p, len) };
        let Some(ids) = psk_identities(ext) else {
            sh.refusal = Some(Refusal::Malformed);
            return Err(sys::SSL_AD_DECODE_ERROR);
        };
        let lookup = sh.lookup.clone();
        for id in ids.iter().take(sh.max_identities) {
            let Some(choice) = lookup.as_ref().and_then(|l| l.lookup(id)) else {
                continue;
            };
            let suite = CString::new(choice.psk.suite().name()).unwrap_or_default();
            // SAFETY: ssl is live; suite is NUL-terminated. Setting the
            // suites here, before OpenSSL chooses one, makes it choose the
            // key's.
            if unsafe { sys::SSL_set_ciphersuites(ssl, suite.as_ptr()) } != 1 {
                return Err(sys::SSL_AD_INTERNAL_ERROR);
            }
            sh.chosen = Some(Chosen {
                identity: id.to_vec(),
                psk: choice.psk,
                tag: choice.tag,
            });
            return Ok(());
        }
        sh.refusal = Some(Refusal::Unknown {
            offered: ids.len(),
            first: printable(ids[0]),
        });
        Err(sys::SSL_AD_HANDSHAKE_FAILURE)
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(alert)) => {
            // SAFETY: OpenSSL passes a writable alert slot.
            unsafe { *al = alert as c_int };
            ERROR
        }
        Err(_) => {
            // The lookup panicked: record it if the block is reachable.
            let _ = catch_unwind(|| {
                // SAFETY: as above.
                if let Some(sh) = unsafe { shared_of(ssl) } {
                    sh.refusal = Some(Refusal::Lookup);
                }
            });
            // SAFETY: as above.
            unsafe { *al = sys::SSL_AD_INTERNAL_ERROR as c_int };
            ERROR
        }
    }
}

/// The server's find-session callback: the key chosen in the ClientHello
/// callback, for that identity only. Never unwinds.
unsafe extern "C" fn find_session_cb(
    ssl: *mut sys::SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut sys::SSL_SESSION,
) -> c_int {
    let run = || -> c_int {
        // SAFETY: OpenSSL passes a writable session slot.
        unsafe { *sess = ptr::null_mut() };
        // SAFETY: OpenSSL calls this with the SSL object of a Session.
        let Some(sh) = (unsafe { shared_of(ssl) }) else {
            return 0;
        };
        let Some(chosen) = &sh.chosen else {
            return 1;
        };
        if identity.is_null() {
            return 1;
        }
        // SAFETY: OpenSSL's pointer to the identity's bytes.
        let offered = unsafe { std::slice::from_raw_parts(identity, identity_len) };
        if offered != &chosen.identity[..] {
            return 1;
        }
        // SAFETY: ssl is live.
        let s = unsafe { psk_session(ssl, &chosen.psk) };
        if s.is_null() {
            return 0;
        }
        // SAFETY: as above; OpenSSL takes ownership of the session.
        unsafe { *sess = s };
        1
    };
    catch_unwind(AssertUnwindSafe(run)).unwrap_or(0)
}

/// The client's use-session callback: its identity and key. Never unwinds.
unsafe extern "C" fn use_session_cb(
    ssl: *mut sys::SSL,
    _md: *const sys::EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut sys::SSL_SESSION,
) -> c_int {
    let run = || -> c_int {
        // SAFETY: OpenSSL passes writable slots.
        unsafe {
            *sess = ptr::null_mut();
            *id = ptr::null();
            *idlen = 0;
        }
        // SAFETY: OpenSSL calls this with the SSL object of a Session.
        let Some(sh) = (unsafe { shared_of(ssl) }) else {
            return 0;
        };
        let Some((identity, psk)) = &sh.client else {
            return 0;
        };
        // Only the key's suite is offered, so after a HelloRetryRequest the
        // negotiated hash (`_md`) is the key's.
        // SAFETY: ssl is live.
        let s = unsafe { psk_session(ssl, psk) };
        if s.is_null() {
            return 0;
        }
        // SAFETY: writable slots; the identity bytes live in Shared, which
        // outlives the SSL object; OpenSSL takes ownership of the session.
        unsafe {
            *sess = s;
            *id = identity.as_ptr();
            *idlen = identity.len();
        }
        1
    };
    catch_unwind(AssertUnwindSafe(run)).unwrap_or(0)
}

/// Records the alerts sent and received. Never unwinds.
unsafe extern "C" fn info_cb(ssl: *const sys::SSL, where_: c_int, ret: c_int) {
    let w = where_ as u32;
    if w & sys::SSL_CB_EXIT != 0 && ret == 1 {
        // The end of a handshake-message exchange: after the handshake,
        // while reading, that is one post-handshake message of the peer's
        // handled (OpenSSL 3 runs each KeyUpdate as such an exchange).
        let _ = catch_unwind(|| {
            // SAFETY: OpenSSL calls this with the SSL object of a Session.
            if let Some(sh) = unsafe { shared_of(ssl) } {
                if sh.established && sh.reading {
                    sh.post_handshake += 1;
                }
            }
        });
        return;
    }
    if w & sys::SSL_CB_ALERT == 0 {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: OpenSSL calls this with the SSL object of a Session.
        if let Some(sh) = unsafe { shared_of(ssl) } {
            let desc = (ret & 0xff) as u8;
            if where_ as u32 & sys::SSL_CB_READ != 0 {
                sh.alert_received = Some(desc);
            } else {
                sh.alert_sent = Some(desc);
            }
        }
    });
}

/// A PEM `SSL_SESSION` holding `psk`, for `openssl s_client -psk_session`
/// and `s_server -psk_session` (which can use a TLS_AES_256_GCM_SHA384 key
/// only so). Holds the key: zeroized on drop.
pub fn psk_session_pem(psk: &TlsPsk) -> Result<Zeroizing<String>, TlsError> {
    let config = ClientConfig::new()?;
    let s = Session::new(
        &config.ctx,
        Role::Client,
        Shared {
            lookup: None,
            max_identities: 0,
            chosen: None,
            refusal: None,
            client: None,
            alert_sent: None,
            alert_received: None,
            established: false,
            reading: false,
            post_handshake: 0,
        },
    )?;
    // SAFETY: s.ssl is live.
    let sess = unsafe { psk_session(s.ssl, psk) };
    if sess.is_null() {
        return Err(TlsError::Setup(error_queue()));
    }
    // SAFETY: a new memory BIO, freed below.
    let bio = unsafe { sys::BIO_new(sys::BIO_s_mem()) };
    if bio.is_null() {
        // SAFETY: sess is ours.
        unsafe { sys::SSL_SESSION_free(sess) };
        return Err(TlsError::Setup(error_queue()));
    }
    let mut text = Zeroizing::new(Vec::new());
    // SAFETY: bio and sess are live and ours; the data pointer is valid
    // until the BIO is next used, and copied at once.
    let ok = unsafe {
        let ok = sys::PEM_write_bio_SSL_SESSION(bio, sess) == 1;
        if ok {
            let mut p: *mut c_char = ptr::null_mut();
            let n = sys::BIO_get_mem_data(bio, &mut p);
            if n > 0 && !p.is_null() {
                text.extend_from_slice(std::slice::from_raw_parts(p as *const u8, n as usize));
            }
        }
        sys::BIO_free(bio);
        sys::SSL_SESSION_free(sess);
        ok
    };
    if !ok {
        return Err(TlsError::Setup(error_queue()));
    }
    Ok(Zeroizing::new(String::from_utf8_lossy(&text).into_owned()))
}

#[cfg(test)]
mod tests;
