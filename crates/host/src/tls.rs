//! The host's secure channel (NVMe/TCP 1.0 §3.6.1, TP 8011): TLS 1.3 with
//! a pre-shared key, set up on each queue's TCP connection before the
//! ICReq (§3.6.1: TLS is set up once the TCP connection is, before the
//! connection's first PDU). The records are moved by [`crate::socket::Conn`].
//!
//! [`TlsOptions`] holds what `--tls-key` gave (a configured PSK, or key
//! file lines with TLS PSKs already derived), the identity version and the
//! derivation layout (`farflash_tls::Derivation`), and an OpenSSL client
//! context shared by all queues. No key material reaches `Debug` or an
//! error message.

use crate::error::{HostError, Result, TransportError};
use crate::queue::QueuePair;
use farflash_tls::keyfile::HostKey;
use farflash_tls::{ClientConfig, Derivation, IdentityVersion, Session, TlsError};
use std::fmt;
use std::io::IoSlice;
use std::time::Duration;

/// nvme-cli 2.13's layout (libnvme 1.10 to 1.15): what the Linux host's
/// keyring holds when nvme-cli 2.13 inserted the key (docs/tls.md).
pub const DEFAULT_DERIVATION: Derivation = Derivation::Libnvme110;
/// nvme-cli's `gen-tls-key`/`check-tls-key --identity` default (0).
pub const DEFAULT_IDENTITY: IdentityVersion = IdentityVersion::V0;
/// Bound on one queue's handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a host's queues set up TLS. Cheap to share (`Arc`).
pub struct TlsOptions {
    key: HostKey,
    version: IdentityVersion,
    derivation: Derivation,
    handshake_timeout: Duration,
    config: ClientConfig,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("key", &self.key)
            .field("version", &self.version)
            .field("derivation", &self.derivation)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

/// One queue's client session, and the identity it offers (for messages).
pub struct ClientSession {
    session: Session,
    identity: String,
    timeout: Duration,
}

impl ClientSession {
    /// The identity offered.
    pub fn identity(&self) -> &str {
        &self.identity
    }
}

impl TlsOptions {
    /// Loads OpenSSL (an error names the missing package) and keeps `key`.
    pub fn new(
        key: HostKey,
        version: IdentityVersion,
        derivation: Derivation,
    ) -> Result<TlsOptions> {
        let config = ClientConfig::new().map_err(|e| HostError::Invalid(format!("--tls: {e}")))?;
        Ok(TlsOptions {
            key,
            version,
            derivation,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            config,
        })
    }

    /// Bounds each queue's handshake (default 10 s).
    pub fn with_handshake_timeout(mut self, d: Duration) -> TlsOptions {
        self.handshake_timeout = d;
        self
    }

    pub fn version(&self) -> IdentityVersion {
        self.version
    }
    pub fn derivation(&self) -> Derivation {
        self.derivation
    }

    /// A client session for a queue of `hostnqn` to `subnqn`: the identity
    /// of the chosen version and its TLS PSK, derived from the configured
    /// key or taken from the key file line of that identity.
    pub fn session(&self, hostnqn: &str, subnqn: &str) -> Result<ClientSession> {
        let (identity, psk) = match &self.key {
            HostKey::Configured(k) => k
                .derive(hostnqn, subnqn, self.version, self.derivation)
                .map_err(|e| {
                    HostError::Invalid(format!(
                        "TLS PSK for host {hostnqn} and subsystem {subnqn}: {e}"
                    ))
                })?,
            HostKey::Derived(lines) => {
                let d = HostKey::find(lines, hostnqn, subnqn, self.version).ok_or_else(|| {
                    let have: Vec<String> = lines
                        .iter()
                        .take(8)
                        .map(|d| d.identity().to_string())
                        .collect();
                    HostError::Invalid(format!(
                        "the TLS key file has no version {} identity for host {hostnqn} and \
                         subsystem {subnqn} (it has: {})",
                        self.version.number(),
                        have.join("; ")
                    ))
                })?;
                (d.identity().clone(), d.psk().clone())
            }
        };
        let identity = identity.to_string();
        let session = Session::client(&self.config, identity.as_bytes(), psk)
            .map_err(|e| HostError::Invalid(format!("TLS: {e}")))?;
        Ok(ClientSession {
            session,
            identity,
            timeout: self.handshake_timeout,
        })
    }
}

/// The message for a handshake that failed: what the target did, in
/// words, with the identity offered (never the key).
pub fn handshake_failure(e: &TlsError, identity: &str) -> String {
    match e {
        TlsError::AlertReceived { alert, description } => {
            let why = match alert {
                // RFC 8446 §6.2: handshake_failure, unknown_psk_identity.
                40 | 115 => "it has no key for that identity",
                // illegal_parameter (OpenSSL 3 on a binder that does not
                // verify), decrypt_error (RFC 8446 §4.2.11), bad_record_mac.
                47 | 51 | 20 => "its key for that identity is not ours (binder does not verify: another key, hash or derivation)",
                70 => "it does not speak TLS 1.3",
                // SPDK v25.09's target fails its PSK lookup of an identity it
                // does not know with internal_error; it builds version 0
                // identities only (`nvme_tcp_generate_psk_identity`).
                80 if identity.starts_with("NVMe1") => {
                    "it failed the handshake (SPDK's target answers a version 1 identity \
                     this way: it knows version 0 ones only; try --tls-identity 0 \
                     --tls-derivation rfc8446)"
                }
                _ => "it failed the handshake",
            };
            format!(
                "the target refused the PSK identity '{identity}' with the TLS alert \
                 '{description}' ({alert}): {why}"
            )
        }
        TlsError::NotPsk => format!(
            "the target did not take the PSK identity '{identity}' and offered a certificate \
             instead (NVMe/TCP uses PSKs only)"
        ),
        TlsError::Protocol(_) => format!(
            "TLS handshake offering the PSK identity '{identity}' failed: {e} (the target \
             answered with something that is not TLS: a port without TLS?)"
        ),
        other => format!("TLS handshake offering the PSK identity '{identity}' failed: {other}"),
    }
}

/// Plaintext read at once (one record's worth: TLS's largest).
const RECORD: usize = farflash_tls::session::MAX_PLAINTEXT;
/// Stop encrypting while this much ciphertext waits for the socket.
const CIPHERTEXT_HIGH: usize = 256 * 1024;
/// Receive straight into a read's buffer when this much payload is left.
const DIRECT_MIN: usize = 8 * 1024;

/// A queue's TLS session on its socket: PDUs in, records out, and back.
/// PDUs go out in full records ([`farflash_tls::Session::write_vectored`]): capsules and
/// headers gathered, large data to OpenSSL as it lies in the slot buffer.
pub(crate) struct TlsLink {
    session: Session,
    identity: String,
    timeout: Duration,
    plain: Box<[u8]>,
    /// Ciphertext not yet written to the socket (for `poll`'s POLLOUT).
    unsent: usize,
}

impl TlsLink {
    pub(crate) fn new(c: ClientSession) -> TlsLink {
        TlsLink {
            session: c.session,
            identity: c.identity,
            timeout: c.timeout,
            plain: vec![0; RECORD].into_boxed_slice(),
            unsent: 0,
        }
    }

    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.timeout
    }
    pub(crate) fn is_handshaking(&self) -> bool {
        self.session.is_handshaking()
    }
    /// Whether there is something to write: ciphertext, or PDUs of
    /// `qp_pending` bytes once the handshake is done.
    pub(crate) fn wants_write(&self, qp_pending: usize) -> bool {
        self.unsent > 0 || (qp_pending > 0 && !self.session.is_handshaking())
    }

    /// The error of a handshake that did not end within its bound.
    pub(crate) fn stalled(&self) -> HostError {
        HostError::Transport(TransportError::Tls(format!(
            "no TLS handshake with the target within {:?} (offering the PSK identity '{}'; \
             last step: {})",
            self.timeout,
            self.identity,
            self.session.handshake_step()
        )))
    }

    /// The error of a connection the target closed mid-handshake (tlshd
    /// does so, without an alert, on any refusal).
    pub(crate) fn closed(&self) -> HostError {
        HostError::Transport(TransportError::Tls(format!(
            "the target closed the connection during the TLS handshake, after our ClientHello \
             offering the PSK identity '{}': it has no key for that identity, its key differs, \
             it cannot use that key's cipher suite, or the port does not speak TLS",
            self.identity
        )))
    }

    fn fail(&self, e: TlsError) -> HostError {
        let m = if self.session.suite().is_none() {
            handshake_failure(&e, &self.identity)
        } else {
            format!("TLS record layer: {e}")
        };
        HostError::Transport(TransportError::Tls(m))
    }

    /// Encrypts what `qp` has queued, until the ciphertext backlog is
    /// large; nothing before the handshake is done.
    pub(crate) fn encrypt(&mut self, qp: &mut QueuePair) -> Result<()> {
        if self.session.is_handshaking() {
            self.unsent = self.session.ciphertext().len();
            return Ok(());
        }
        while qp.tx_pending() > 0 && self.session.ciphertext().len() < CIPHERTEXT_HIGH {
            let mut iov = [IoSlice::new(&[]); 64];
            let n = qp.tx_iovecs(&mut iov);
            let taken = match self.session.write_vectored(&iov[..n], CIPHERTEXT_HIGH) {
                Ok(k) => k,
                Err(e) => return Err(self.fail(e)),
            };
            if taken == 0 {
                break;
            }
            qp.tx_advance(taken);
        }
        self.unsent = self.session.ciphertext().len();
        Ok(())
    }

    /// The ciphertext to write now.
    pub(crate) fn ciphertext(&mut self) -> &[u8] {
        self.session.ciphertext()
    }
    /// `n` bytes of [`TlsLink::ciphertext`] were written.
    pub(crate) fn sent(&mut self, n: usize) {
        self.session.consume_ciphertext(n);
        self.unsent = self.session.ciphertext().len();
    }

    /// Takes ciphertext from the socket: runs the handshake, or decrypts
    /// records into `qp` (large C2HData payloads straight into the read's
    /// buffer).
    pub(crate) fn receive(&mut self, ct: &[u8], qp: &mut QueuePair) -> Result<()> {
        if let Err(e) = self.session.feed(ct) {
            return Err(self.fail(e));
        }
        loop {
            let r = match qp.rx_direct() {
                Some(dst) if dst.len() >= DIRECT_MIN => match self.session.read_plaintext(dst) {
                    Ok(k) => {
                        if k > 0 {
                            qp.rx_direct_done(k);
                        }
                        Ok(k)
                    }
                    Err(e) => Err(e),
                },
                _ => match self.session.read_plaintext(&mut self.plain) {
                    Ok(0) => Ok(0),
                    Ok(k) => {
                        qp.rx_feed(&self.plain[..k])?;
                        Ok(k)
                    }
                    Err(e) => Err(e),
                },
            };
            match r {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
        self.unsent = self.session.ciphertext().len();
        if self.session.peer_closed() {
            return Err(HostError::Transport(qp.closed()));
        }
        Ok(())
    }

    /// Queues close_notify (the caller flushes it).
    pub(crate) fn close(&mut self) {
        self.session.close();
        self.unsent = self.session.ciphertext().len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_tls::ConfiguredPsk;

    const KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

    #[test]
    fn debug_and_errors_hold_no_key() {
        let k = HostKey::Configured(ConfiguredPsk::parse(KEY).unwrap());
        let t = TlsOptions::new(k, IdentityVersion::V1, Derivation::Rfc8446).expect("libssl.so.3");
        let d = format!("{t:?}");
        assert!(!d.contains("VRLb") && d.contains("Rfc8446"), "{d}");
        let s = t.session("nqn.h", "nqn.s").unwrap();
        assert!(
            s.identity.starts_with("NVMe1R01 nqn.h nqn.s "),
            "{}",
            s.identity
        );
        let e = TlsError::AlertReceived {
            alert: 40,
            description: "handshake failure".into(),
        };
        let m = handshake_failure(&e, s.identity());
        assert!(
            m.contains("refused the PSK identity 'NVMe1R01 nqn.h nqn.s "),
            "{m}"
        );
        assert!(m.contains("no key for that identity"), "{m}");
    }

    #[test]
    fn internal_error_to_a_version_1_identity_points_at_spdk() {
        let e = TlsError::AlertReceived {
            alert: 80,
            description: "internal error".into(),
        };
        let m = handshake_failure(&e, "NVMe1R01 nqn.h nqn.s ZGlnZXN0");
        assert!(m.contains("'internal error' (80)"), "{m}");
        assert!(
            m.contains("SPDK's target answers a version 1 identity"),
            "{m}"
        );
        assert!(
            m.contains("--tls-identity 0 --tls-derivation rfc8446"),
            "{m}"
        );
        // To a version 0 identity the alert says nothing more.
        let m = handshake_failure(&e, "NVMe0R01 nqn.h nqn.s");
        assert!(m.ends_with("(80): it failed the handshake"), "{m}");
    }

    #[test]
    fn a_key_file_without_the_identity_names_what_it_has() {
        let k = ConfiguredPsk::parse(KEY).unwrap();
        let line = farflash_tls::keytool::keyfile_line(
            &k,
            "nqn.h",
            "nqn.s",
            DEFAULT_IDENTITY,
            DEFAULT_DERIVATION,
        )
        .unwrap();
        let key = HostKey::parse(&line).unwrap();
        let t = TlsOptions::new(key, DEFAULT_IDENTITY, DEFAULT_DERIVATION).expect("libssl.so.3");
        assert_eq!(
            t.session("nqn.h", "nqn.s").unwrap().identity,
            "NVMe0R01 nqn.h nqn.s"
        );
        let e = t.session("nqn.h", "nqn.other").err().unwrap().to_string();
        assert!(
            e.contains("no version 0 identity for host nqn.h and subsystem nqn.other"),
            "{e}"
        );
        assert!(e.contains("(it has: NVMe0R01 nqn.h nqn.s)"), "{e}");
    }
}
