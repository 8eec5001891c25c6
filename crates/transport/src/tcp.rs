//! NVMe/TCP as the event loops see it: a TCP listener ([`Listener`]), an
//! accepted socket ([`Incoming`]) and the connection ([`Link`]: `conn.rs`
//! holds its I/O half, `secure.rs` its TLS channel).

use crate::conn::Conn;
use crate::link::{deliver, hand_out, After, Cx, Done, Incoming, Link, Listener, Sinks, Ticked};
use crate::sched::{Pass, State};
use crate::secure::{Detected, Secure};
use farflash_core::listen::{ListenTransport, SecureChannel};
use farflash_core::Target;
use farflash_tcp::QueuePair;
use farflash_tls::ServerConfig;
use mio::event::Event;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TCP listener and, once a connection came on a TLS listener, the TLS
/// server configuration its connections share (Err: OpenSSL 3 could not
/// be loaded; said once).
pub(crate) struct Tcp {
    l: TcpListener,
    tls: Option<Result<ServerConfig, String>>,
}

impl Tcp {
    pub(crate) fn new(l: std::net::TcpListener) -> io::Result<Tcp> {
        l.set_nonblocking(true)?;
        Ok(Tcp {
            l: TcpListener::from_std(l),
            tls: None,
        })
    }

    /// The TLS configuration for a connection to `local` (None: plaintext).
    fn tls_for(&mut self, target: &Arc<Target>, local: &SocketAddr) -> Option<Tls> {
        let mode = match target.secure_channel(local) {
            SecureChannel::None => return None,
            mode => mode,
        };
        let config = self.tls.get_or_insert_with(|| {
            let t = target.clone();
            ServerConfig::new(move |id: &[u8]| t.tls_psk(id)).map_err(|e| {
                tracing::error!("TLS listeners cannot work: {e}");
                e.to_string()
            })
        });
        Some(Tls {
            mode,
            config: config.clone(),
        })
    }
}

/// What a connection on a TLS listener starts with.
struct Tls {
    mode: SecureChannel,
    config: Result<ServerConfig, String>,
}

impl Listener for Tcp {
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(&mut self.l, token, Interest::READABLE)
    }

    fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(&mut self.l);
    }

    fn accept(&mut self, target: &Arc<Target>, out: &mut Vec<Box<dyn Incoming>>) {
        loop {
            match self.l.accept() {
                Ok((sock, peer)) => {
                    let local = sock.local_addr().unwrap_or(peer);
                    let _ = sock.set_nodelay(true);
                    let tls = self.tls_for(target, &local);
                    out.push(Box::new(Accepted {
                        sock,
                        local,
                        peer,
                        tls,
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: log, back off, keep serving.
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    return;
                }
            }
        }
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.l.local_addr().ok()
    }

    fn transport(&self) -> Option<ListenTransport> {
        Some(ListenTransport::Tcp)
    }
}

/// An accepted socket.
struct Accepted {
    sock: TcpStream,
    local: SocketAddr,
    peer: SocketAddr,
    tls: Option<Tls>,
}

impl Incoming for Accepted {
    fn peer(&self) -> Option<SocketAddr> {
        Some(self.peer)
    }

    fn open(self: Box<Self>, target: &Arc<Target>, now: Instant) -> Box<dyn Link> {
        let Accepted {
            sock,
            local,
            peer,
            tls,
        } = *self;
        tracing::debug!(%peer, %local, "connection accepted");
        let (secure, tls) = match tls {
            Some(Tls { mode, config }) => (
                Some(Box::new(Secure::new(mode, peer, now, &target.transport))),
                Some(config),
            ),
            None => (None, None),
        };
        Box::new(Conn {
            sock,
            qp: QueuePair::new(target.clone(), local, peer),
            hup: false,
            secure,
            tls,
            peer,
        })
    }
}

impl Link for Conn {
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry
            .register(&mut self.sock, token, Interest::READABLE)
            .inspect_err(|e| tracing::warn!(peer = %self.peer, "cannot register connection: {e}"))
    }

    fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(&mut self.sock);
    }

    fn on_event(&mut self, ev: &Event) -> bool {
        // EPOLLRDHUP: the peer's FIN may sit right behind the last data;
        // read on to the EOF instead of stopping at a short read.
        self.hup |= ev.is_read_closed();
        // Only writability (EPOLLOUT while output is blocked) leaves
        // nothing to read.
        !ev.is_writable() || ev.is_readable() || ev.is_read_closed() || ev.is_error()
    }

    fn tick(&mut self, now: Instant) -> Ticked {
        if let Some(s) = self.secure.as_mut() {
            if let Err(why) = s.check_deadlines(now) {
                tracing::warn!(peer = %self.peer, "TLS: closing the connection: {why}");
                return Ticked {
                    close: true,
                    ..Ticked::default()
                };
            }
        }
        self.qp.tick(now);
        Ticked {
            // Only connections the tick gave work (an AEN to send, a
            // close) need a pass; the rest wait for their events.
            wake: self.qp.output_len() > 0 || self.qp.wants_close(),
            // QoS limits may have changed.
            throttle: self.qp.throttle_wake(),
            close: false,
        }
    }

    /// Moves the connection forward as far as it goes without blocking
    /// (with fair sharing: as far as its budget for this round). Plaintext
    /// and TLS take the same pass (`conn.rs`).
    fn drive(&mut self, cx: &mut Cx<'_>) -> After {
        let state = cx.state();
        if self.secure.as_ref().is_some_and(|s| s.detecting()) {
            match self.detect_secure(cx, state) {
                Some(After::Open) => {}
                Some(After::Close) => return After::Close,
                None => return After::Open,
            }
        }
        let now = cx.now();
        let mut budget = cx.budget(self.qp.share_weight());
        let mut p = Pass::starting(state);
        p.control = self.qp.nvme().qid() == 0;
        loop {
            self.qp.set_now(now);
            p.worked |= self.qp.resume_throttled();
            // Receive: everything the socket has, PDUs processed as they complete.
            let more = self.receive(now, &mut budget, &mut p);
            p.worked |= cx.pump(self);
            let blocked = self.send(&mut p);
            watch_writable(cx, &mut self.sock, blocked, &mut p);
            // Sending may have freed buffer budget and started waiting commands.
            let completed = cx.pump(self);
            p.worked |= completed;
            if !(more || completed) || blocked || p.failed || p.yielded {
                break;
            }
            // Responses went out: the host's next commands may be here
            // already (a deep queue answers while this pass runs).
            p.unread = true;
        }
        let done = self.done(&p);
        cx.driven(p);
        if done {
            return After::Close;
        }
        cx.set_throttle(self.qp.throttle_wake());
        After::Open
    }

    fn pending_bytes(&self) -> usize {
        self.qp.pending_bytes()
    }

    fn in_flight(&self) -> usize {
        self.qp.in_flight()
    }

    fn hand_out(&mut self, owner: usize, to: Sinks<'_>) -> bool {
        hand_out(&mut self.qp, owner, to)
    }

    fn deliver(&mut self, now: Instant, done: Done) {
        deliver(&mut self.qp, now, done);
    }

    fn shut(&mut self) {
        if self.qp.in_flight() > 0 {
            tracing::debug!(
                in_flight = self.qp.in_flight(),
                "closing a connection with storage requests in flight"
            );
            let _ = self.sock.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Conn {
    /// A connection on a TLS listener, before its first byte: TLS or
    /// plaintext (`secure.rs`). Returns how the pass goes on (Open: TLS
    /// started, or plaintext on a `tls-optional` listener), None when it
    /// ends here.
    fn detect_secure(&mut self, cx: &mut Cx<'_>, state: State) -> Option<After> {
        let sec = self.secure.as_mut()?;
        let config = match &self.tls {
            Some(Ok(c)) => Ok(c),
            Some(Err(e)) => Err(e.as_str()),
            None => Err("no TLS configuration"),
        };
        match sec.detect(&self.sock, config) {
            Detected::Pending => {
                let p = Pass {
                    unread: false,
                    ..Pass::starting(state)
                };
                cx.driven(p);
                None
            }
            Detected::Eof => Some(After::Close),
            Detected::Refused(why) => {
                tracing::warn!(peer = %self.peer, "TLS: connection refused: {why}");
                Some(After::Close)
            }
            Detected::Plain => {
                tracing::debug!(peer = %self.peer, "tls-optional listener: plaintext NVMe/TCP");
                self.secure = None;
                Some(After::Open)
            }
            Detected::Tls => Some(After::Open),
        }
    }
}

/// Asks epoll for writability only while output is blocked (edge-triggered
/// EPOLLOUT on every ACK would wake the loop for nothing); a failure to
/// change the registration fails the pass.
fn watch_writable(cx: &mut Cx<'_>, sock: &mut TcpStream, blocked: bool, p: &mut Pass) {
    if blocked == cx.blocked() || p.failed {
        return;
    }
    let interest = if blocked {
        Interest::READABLE | Interest::WRITABLE
    } else {
        Interest::READABLE
    };
    match cx.registry().reregister(sock, Token(cx.index()), interest) {
        Ok(()) => cx.set_blocked(blocked),
        Err(_) => p.failed = true,
    }
}
