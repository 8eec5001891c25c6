//! A TCP connection's I/O half: its socket, its queue pair and, on a TLS
//! listener, its secure channel (`secure.rs`). One pass's receive and send
//! are the same loop for plaintext and TLS: the secure channel only stands
//! between the socket and the queue pair ([`Inbound`]).

use crate::inbound::Inbound;
use crate::sched::Pass;
use crate::secure::Secure;
use farflash_tcp::QueuePair;
use mio::net::TcpStream;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

/// `iovec`s per `writev`: a small array on the stack for the usual pass, up
/// to Linux's IOV_MAX when a deep queue's batch is waiting.
const SMALL_IOV: usize = 64;
const MAX_IOV: usize = 1024;

/// A TCP connection's I/O half (its scheduling state is the scheduler's).
pub(crate) struct Conn {
    pub sock: TcpStream,
    pub qp: QueuePair,
    /// epoll reported the peer's half-close (EPOLLRDHUP).
    pub hup: bool,
    /// The secure channel of a connection on a TLS listener (None: plaintext).
    pub secure: Option<Box<Secure>>,
    /// A TLS listener's server configuration, for the secure channel's
    /// first byte (Err: OpenSSL 3 could not be loaded).
    pub tls: Option<Result<farflash_tls::ServerConfig, String>>,
    pub peer: SocketAddr,
}

/// Plaintext: straight into the queue pair's receive space (PDUs are
/// processed as they complete; large H2CData lands in its command's buffer).
struct Plain;

impl Inbound for Plain {
    fn space<'a>(&'a mut self, qp: &'a mut QueuePair) -> &'a mut [u8] {
        qp.rx_space()
    }

    fn received(&mut self, qp: &mut QueuePair, n: usize, _now: Instant) {
        qp.on_received(n);
    }

    fn stopped(&self) -> bool {
        false
    }
}

/// Reads everything the socket has (at most `budget` bytes: fair sharing)
/// into `to`. Returns `more`: reading stopped because the queue pair's
/// output backed up (it takes no commands until it drains), so the pass
/// goes round again once it sent.
fn read_loop(
    to: &mut impl Inbound,
    sock: &mut TcpStream,
    qp: &mut QueuePair,
    hup: bool,
    now: Instant,
    budget: &mut usize,
    p: &mut Pass,
) -> bool {
    while !p.failed && !p.eof && p.unread && !to.stopped() {
        if !qp.wants_read() {
            return !qp.wants_close();
        }
        if *budget == 0 {
            // This round's share was read: the rest waits for the next round.
            p.yielded = true;
            break;
        }
        let space = to.space(qp);
        let room = space.len().min(*budget);
        match sock.read(&mut space[..room]) {
            Ok(0) => p.eof = true,
            Ok(n) => {
                *budget -= n;
                p.worked = true;
                to.received(qp, n, now);
                // A short read drained the socket: skip the read that
                // would only say EAGAIN (epoll reports the next arrival).
                if n < room && !hup {
                    p.unread = false;
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                p.unread = false;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => p.failed = true,
        }
    }
    false
}

impl Conn {
    /// Receives what the socket has, within `budget`; see [`read_loop`].
    pub(crate) fn receive(&mut self, now: Instant, budget: &mut usize, p: &mut Pass) -> bool {
        let Conn {
            sock,
            qp,
            hup,
            secure,
            ..
        } = self;
        match secure.as_deref_mut() {
            Some(s) => {
                // Plaintext the session decrypted while the queue pair took
                // no more goes first.
                s.deliver(qp, now);
                read_loop(s, sock, qp, *hup, now, budget, p)
            }
            None => read_loop(&mut Plain, sock, qp, *hup, now, budget, p),
        }
    }

    /// Sends all PDUs this pass produced (encrypted on a secure channel);
    /// returns whether the socket is full.
    pub(crate) fn send(&mut self, p: &mut Pass) -> bool {
        match self.secure.as_deref_mut() {
            Some(s) => s.send(&mut self.sock, &mut self.qp, p),
            // In as few writes as the socket takes (a deep queue's batch
            // needs more iovecs than a shallow one's).
            None if self.qp.output_segments() <= SMALL_IOV => {
                send_output::<SMALL_IOV>(&mut self.sock, &mut self.qp, p)
            }
            None => send_output::<MAX_IOV>(&mut self.sock, &mut self.qp, p),
        }
    }

    /// After a pass: whether the connection is to be closed (the socket
    /// failed, the queue or the secure channel ended and what it had to
    /// send went, or the peer closed and nothing is left to do).
    pub(crate) fn done(&mut self, p: &Pass) -> bool {
        let (tls_done, tls_pending) = match self.secure.as_mut() {
            Some(s) => (s.wants_close(), s.has_output()),
            None => (false, false),
        };
        let drained = self.qp.output_len() == 0 && self.qp.in_flight() == 0 && !tls_pending;
        p.failed || tls_done || (self.qp.finished() && !tls_pending) || (p.eof && drained)
    }
}

/// Writes the queue pair's output with `writev`s of up to `N` segments until
/// it is all sent or the socket is full; returns whether it blocked.
fn send_output<const N: usize>(sock: &mut TcpStream, qp: &mut QueuePair, p: &mut Pass) -> bool {
    while qp.output_len() > 0 && !p.failed {
        let mut iov = [IoSlice::new(&[]); N];
        let n = qp.output_slices(&mut iov);
        let queued: usize = iov[..n].iter().map(|s| s.len()).sum();
        match sock.write_vectored(&iov[..n]) {
            Ok(0) => p.failed = true,
            Ok(n) => {
                qp.consume_output(n);
                p.worked = true;
                if n < queued {
                    return true; // the socket buffer is full
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => p.failed = true,
        }
    }
    false
}
