//! NVMe/TCP's secure channel (NVMe TCP Transport Specification 1.0 §3.6.1,
//! TP 8011) on the worker's event loop: one [`Secure`] per connection
//! accepted on a `tls:` or `tls-optional:` listener, driving a sans-I/O
//! `farflash_tls::Session` between the socket and the connection's
//! [`QueuePair`]. Ciphertext read from the socket is fed to the session;
//! the plaintext it gives goes into the queue pair's receive space, so
//! the NVMe/TCP framing (`farflash_tcp` rx.rs) is the plaintext path's;
//! the PDUs the queue pair wants sent are encrypted and the ciphertext
//! written. Plaintext connections never reach this module (the worker
//! branches once per pass on `Conn::secure`).
//!
//! The states, in one place ([`Phase`]):
//!
//! ```text
//! Detect --first byte 0x16--> Tls(handshaking) --Finished--> Tls(established)
//!    |  \--other byte, tls-optional--> (plaintext: Secure dropped)
//!    \--other byte, tls (required)--> refused: close
//! any --handshake not done in tls_handshake_timeout_ms--> close
//! Tls --record begun and not completed in tls_record_timeout_ms--> close
//! Tls --record header too long / not a TLS 1.3 type, or a session error--> alert, close
//! Tls --more than MAX_KEY_UPDATES post-handshake messages in KEY_UPDATE_WINDOW--> close_notify, close
//! ```
//!
//! Bounds: the session's ciphertext output stops taking plaintext at
//! [`OUT_HIGH_WATER`], so a peer that does not read leaves the PDUs in
//! the queue pair's output, whose own high-water mark stops reading
//! commands; the ciphertext a read brings is at most [`READ_CHUNK`], fed
//! to the session at once, and its plaintext is handed on only while the
//! queue pair wants to read (the rest waits in OpenSSL's buffer, bounded
//! by that one read).

use crate::inbound::Inbound;
use crate::sched::Pass;
use farflash_core::listen::SecureChannel;
use farflash_tcp::QueuePair;
use farflash_tls::record::{RecordScan, MAX_RECORD, TLS_HANDSHAKE_RECORD};
use farflash_tls::{ServerConfig, Session, TlsError};
use mio::net::TcpStream;
use std::io::{self, IoSlice, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Ciphertext waiting to be sent beyond which no more PDUs are encrypted.
pub(crate) const OUT_HIGH_WATER: usize = 256 * 1024;
/// Ciphertext read from the socket at once (four full records).
pub(crate) const READ_CHUNK: usize = 4 * MAX_RECORD;
/// KeyUpdate rate cap: at most this many post-handshake messages from the
/// peer per [`KEY_UPDATE_WINDOW`]. RFC 8446 §5.5 has a sender update its
/// AES-GCM keys after about 2^24.5 records; a host needs a handful an
/// hour, a flood only costs the target key derivations.
pub(crate) const MAX_KEY_UPDATES: u64 = 32;
pub(crate) const KEY_UPDATE_WINDOW: Duration = Duration::from_secs(10);
/// PDU slices encrypted per round.
const IOV: usize = 64;

/// Where a secure-channel connection is.
enum Phase {
    /// Waiting for the first byte (peeked, not read).
    Detect,
    /// A TLS session: handshaking, established, or failed / closing
    /// (the session says which).
    Tls(Box<Session>),
}

/// What the first byte said.
pub(crate) enum Detected {
    /// Nothing yet.
    Pending,
    /// The peer closed before sending anything.
    Eof,
    /// Not TLS, on a `tls-optional` listener: carry on in plaintext.
    Plain,
    /// TLS: the session is set up.
    Tls,
    /// Refused (the reason, for the log): close.
    Refused(&'static str),
}

/// For the log of a handshake that failed after the lookup found a key:
/// the identity offered (NQNs and a digest, no key material) and, for a
/// version 0 identity (which carries nothing of the key, so the host's
/// first `tls_derivation` was used), which layout each kind of host needs.
fn failed_handshake_identity(identity: Option<&[u8]>) -> String {
    let Some(id) = identity else {
        return String::new();
    };
    let id = String::from_utf8_lossy(id);
    let v0 = if id.starts_with("NVMe0") {
        "; a version 0 identity is keyed with the host's first tls_derivation: \
         SPDK and nvme-cli >= 2.16 hosts need rfc8446, nvme-cli 2.10-2.15 libnvme-1.10"
    } else {
        ""
    };
    format!(" (PSK identity '{id}'{v0})")
}

/// The handshake completed: logs it and binds the queue to the identity's
/// host and subsystem (checked at its Connect, `farflash_core` fabrics.rs).
fn established(peer: SocketAddr, s: &Session, qp: &mut QueuePair) {
    let id = s
        .identity()
        .and_then(|i| farflash_tls::PskIdentity::parse(i).ok());
    tracing::info!(
        %peer,
        suite = ?s.suite(),
        hostnqn = id.as_ref().map(|i| i.hostnqn()),
        subnqn = id.as_ref().map(|i| i.subnqn()),
        version = id.as_ref().map(|i| i.version().number()),
        "TLS: secure channel established"
    );
    let (_, q) = qp.parts_mut();
    match &id {
        Some(i) => q.set_tls_identity(i.hostnqn(), i.subnqn()),
        // The lookup parsed it to choose the key; should it not parse now,
        // no Connect matches.
        None => q.set_tls_identity("", ""),
    }
}

/// The secure channel of one connection.
pub(crate) struct Secure {
    mode: SecureChannel,
    phase: Phase,
    peer: SocketAddr,
    accepted: Instant,
    handshake_timeout: Duration,
    record_timeout: Duration,
    scan: RecordScan,
    /// When the record now arriving began (None between records).
    mid_record_since: Option<Instant>,
    /// Start of the current KeyUpdate window and the session's count then.
    ku_window: (Instant, u64),
    /// Ciphertext read buffer ([`READ_CHUNK`] once TLS started; one per
    /// connection, reused for every read).
    buf: Box<[u8]>,
    /// Set when this side decided to close (logged once).
    closing: Option<String>,
    logged_established: bool,
}

impl Secure {
    pub(crate) fn new(
        mode: SecureChannel,
        peer: SocketAddr,
        now: Instant,
        t: &farflash_core::config::TransportConfig,
    ) -> Secure {
        Secure {
            mode,
            phase: Phase::Detect,
            peer,
            accepted: now,
            handshake_timeout: Duration::from_millis(t.tls.tls_handshake_timeout_ms as u64),
            record_timeout: Duration::from_millis(t.tls.tls_record_timeout_ms as u64),
            scan: RecordScan::default(),
            mid_record_since: None,
            ku_window: (now, 0),
            // Allocated when TLS starts (a tls-optional connection that
            // turns out plaintext never needs it).
            buf: Box::default(),
            closing: None,
            logged_established: false,
        }
    }

    /// Whether the first byte is still awaited.
    pub(crate) fn detecting(&self) -> bool {
        matches!(self.phase, Phase::Detect)
    }

    /// Peeks at the first byte and starts the session on a TLS handshake
    /// record. `config`: the worker's server configuration (Err: OpenSSL
    /// is missing, said once per connection).
    pub(crate) fn detect(
        &mut self,
        sock: &TcpStream,
        config: Result<&ServerConfig, &str>,
    ) -> Detected {
        let mut b = [0u8; 1];
        let first = loop {
            match sock.peek(&mut b) {
                Ok(0) => return Detected::Eof,
                Ok(_) => break b[0],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Detected::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Detected::Eof,
            }
        };
        if first != TLS_HANDSHAKE_RECORD {
            // Linux nvmet-tcp (nvmet_tcp_try_peek_pdu): with TREQ "not
            // required" it peeks for an ICReq's common header (type 0,
            // HLEN and PLEN 128) and goes on in plaintext for one, TLS
            // otherwise; with TREQ "required" it does not peek and hands
            // the socket to tlshd, whose handshake fails on plaintext, and
            // closes. farflash decides by the TLS record type instead (a
            // ClientHello's record starts 16h; anything else goes to the
            // NVMe/TCP framing, which judges it), and on a required
            // listener closes at once: the peer speaks no TLS to send an
            // alert in, and no NVMe/TCP is spoken there (TCP §3.6.1.1).
            return match self.mode {
                SecureChannel::Optional => Detected::Plain,
                _ => Detected::Refused(
                    "not a TLS handshake on a listener that requires TLS (plaintext NVMe/TCP?)",
                ),
            };
        }
        let config = match config {
            Ok(c) => c,
            Err(_) => return Detected::Refused("TLS is not available (OpenSSL 3 missing)"),
        };
        match Session::server(config) {
            Ok(s) => {
                self.buf = vec![0; READ_CHUNK].into_boxed_slice();
                self.phase = Phase::Tls(Box::new(s));
                Detected::Tls
            }
            Err(_) => Detected::Refused("cannot set up a TLS session"),
        }
    }

    fn session(&mut self) -> Option<&mut Session> {
        match &mut self.phase {
            Phase::Tls(s) => Some(s),
            Phase::Detect => None,
        }
    }

    fn close_because(&mut self, why: String) {
        if self.closing.is_none() {
            tracing::warn!(peer = %self.peer, "TLS: closing the connection: {why}");
            self.closing = Some(why);
        }
    }

    fn on_error(&mut self, e: &TlsError) {
        let offered = match &self.phase {
            Phase::Tls(s) if s.suite().is_none() => failed_handshake_identity(s.identity()),
            _ => String::new(),
        };
        self.close_because(format!("{e}{offered}"));
    }

    /// Follows and feeds the `n` bytes just read into `buf`.
    fn take_ciphertext(&mut self, n: usize, now: Instant) {
        let scanned = self.scan.feed(&self.buf[..n]);
        let Phase::Tls(s) = &mut self.phase else {
            return;
        };
        // Fed even when the scan refused it: OpenSSL then sends the alert
        // the record deserves (record_overflow, unexpected_message ...).
        let fed = s.feed(&self.buf[..n]);
        if let Err(e) = fed {
            self.on_error(&e);
            return;
        }
        if let Err(e) = scanned {
            // The connection ends: OpenSSL reads on to the bad record (the
            // plaintext before it is dropped with the connection) and fails
            // with the alert RFC 8446 §5.1/§5.2 prescribe (unexpected_message,
            // record_overflow), which goes out before the close.
            if let Phase::Tls(s) = &mut self.phase {
                while let Ok(1..) = s.read_plaintext(&mut self.buf) {}
                if s.error().is_none() {
                    s.close();
                }
            }
            self.close_because(e.to_string());
            return;
        }
        self.mid_record_since = if self.scan.mid_record() {
            Some(self.mid_record_since.unwrap_or(now))
        } else {
            None
        };
    }

    /// Hands decrypted plaintext to `qp` while it wants to read.
    pub(crate) fn deliver(&mut self, qp: &mut QueuePair, now: Instant) {
        let Phase::Tls(s) = &mut self.phase else {
            return;
        };
        let mut failed = None;
        if !self.logged_established && !s.is_handshaking() && s.error().is_none() {
            self.logged_established = true;
            established(self.peer, s, qp);
        }
        while qp.wants_read() && s.error().is_none() {
            match s.read_plaintext(qp.rx_space()) {
                Ok(0) => break,
                Ok(k) => {
                    if !self.logged_established {
                        // The handshake ended inside this read.
                        self.logged_established = true;
                        established(self.peer, s, qp);
                    }
                    qp.on_received(k)
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if s.peer_closed() {
            // RFC 8446 §6.1: close_notify is answered with close_notify
            // (sent with this pass's output), then the connection closes.
            s.close();
        }
        let count = s.post_handshake_messages();
        if let Some(e) = failed {
            self.on_error(&e);
            return;
        }
        // Counted before the window moves on, so that a burst after a quiet
        // window is still seen whole.
        if count - self.ku_window.1 <= MAX_KEY_UPDATES {
            if now.duration_since(self.ku_window.0) >= KEY_UPDATE_WINDOW {
                self.ku_window = (now, count);
            }
        } else {
            if let Some(s) = self.session() {
                s.close();
            }
            self.close_because(format!(
                "more than {MAX_KEY_UPDATES} KeyUpdates within {KEY_UPDATE_WINDOW:?}"
            ));
        }
    }

    /// Encrypts `qp`'s output (while the ciphertext waiting stays under
    /// [`OUT_HIGH_WATER`]) and writes the ciphertext; returns whether the
    /// socket is full.
    pub(crate) fn send(&mut self, sock: &mut TcpStream, qp: &mut QueuePair, p: &mut Pass) -> bool {
        let Phase::Tls(s) = &mut self.phase else {
            return false;
        };
        let mut failed = None;
        loop {
            // Encrypt (nothing is taken while the handshake runs).
            while failed.is_none()
                && qp.output_len() > 0
                && s.ciphertext().len() < OUT_HIGH_WATER
                && !s.is_handshaking()
                && !s.wants_close()
            {
                let mut iov = [IoSlice::new(&[]); IOV];
                let n = qp.output_slices(&mut iov);
                // In full records: a response's header, data and capsule
                // share one.
                let taken = match s.write_vectored(&iov[..n], OUT_HIGH_WATER) {
                    Ok(k) => k,
                    Err(e) => {
                        failed = Some(e);
                        0
                    }
                };
                if taken == 0 {
                    break;
                }
                qp.consume_output(taken);
            }
            let ct = s.ciphertext();
            if ct.is_empty() {
                break;
            }
            let len = ct.len();
            match sock.write(ct) {
                Ok(0) => {
                    p.failed = true;
                    break;
                }
                Ok(n) => {
                    s.consume_ciphertext(n);
                    p.worked = true;
                    if n < len {
                        if let Some(e) = failed {
                            self.on_error(&e);
                        }
                        return true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Some(e) = failed {
                        self.on_error(&e);
                    }
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    p.failed = true;
                    break;
                }
            }
        }
        if let Some(e) = failed {
            self.on_error(&e);
        }
        false
    }

    /// Whether the connection is to be closed: this side refused, or the
    /// session ended (alert sent or received, close_notify), once what was
    /// to be sent (an alert, close_notify) has gone.
    pub(crate) fn wants_close(&mut self) -> bool {
        let ended = self.closing.is_some();
        match &mut self.phase {
            Phase::Detect => ended,
            Phase::Tls(s) => {
                if s.wants_close() && self.closing.is_none() {
                    let why = match s.error() {
                        Some(e) if s.suite().is_none() => {
                            format!("{e}{}", failed_handshake_identity(s.identity()))
                        }
                        Some(e) => e.to_string(),
                        None => "the peer ended the TLS session (close_notify)".to_owned(),
                    };
                    self.closing = Some(why.clone());
                    if s.error().is_some() {
                        tracing::warn!(peer = %self.peer, "TLS: closing the connection: {why}");
                    } else {
                        tracing::debug!(peer = %self.peer, "TLS: {why}");
                    }
                }
                self.closing.is_some() && s.ciphertext().is_empty()
            }
        }
    }

    /// Whether the session still has ciphertext to send (an alert to flush).
    pub(crate) fn has_output(&mut self) -> bool {
        self.session().is_some_and(|s| !s.ciphertext().is_empty())
    }

    /// The deadlines: Err (the reason) when the connection is to be closed
    /// now. Called at every tick (100 ms).
    pub(crate) fn check_deadlines(&mut self, now: Instant) -> Result<(), String> {
        let handshaking = match &self.phase {
            Phase::Detect => true,
            Phase::Tls(s) => s.is_handshaking(),
        };
        if handshaking && now.duration_since(self.accepted) >= self.handshake_timeout {
            let step = match &self.phase {
                Phase::Detect => "no data".to_owned(),
                Phase::Tls(s) => s.handshake_step(),
            };
            return Err(format!(
                "the TLS handshake did not complete within {:?} ({step})",
                self.handshake_timeout
            ));
        }
        if let Some(since) = self.mid_record_since {
            if now.duration_since(since) >= self.record_timeout {
                return Err(format!(
                    "a TLS record begun {:?} ago is still incomplete",
                    now.duration_since(since)
                ));
            }
        }
        Ok(())
    }
}

/// Ciphertext is read into the channel's buffer, fed to the session, and
/// what it decrypts handed to the queue pair ([`crate::conn::read_loop`]).
impl Inbound for Secure {
    fn space<'a>(&'a mut self, _qp: &'a mut QueuePair) -> &'a mut [u8] {
        &mut self.buf
    }

    fn received(&mut self, qp: &mut QueuePair, n: usize, now: Instant) {
        self.take_ciphertext(n, now);
        self.deliver(qp, now);
    }

    fn stopped(&self) -> bool {
        self.closing.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::failed_handshake_identity;

    #[test]
    fn a_failed_handshake_names_the_identity_and_for_v0_the_layouts() {
        assert_eq!(failed_handshake_identity(None), "");
        let m = failed_handshake_identity(Some(b"NVMe0R01 nqn.h nqn.s"));
        assert!(
            m.starts_with(" (PSK identity 'NVMe0R01 nqn.h nqn.s'; "),
            "{m}"
        );
        assert!(
            m.contains("SPDK and nvme-cli >= 2.16 hosts need rfc8446"),
            "{m}"
        );
        let m = failed_handshake_identity(Some(b"NVMe1R02 nqn.h nqn.s ZGln"));
        assert_eq!(m, " (PSK identity 'NVMe1R02 nqn.h nqn.s ZGln')");
    }
}
