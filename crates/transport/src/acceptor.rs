//! The acceptor: the listeners of every transport (TCP sockets, RDMA CM
//! ids) in one poller, listeners added and removed at run time, the
//! connection cap, and the hand-off of each new connection (a socket or an
//! RDMA queue pair) to a worker, round robin, through one channel per
//! worker.

use crate::worker::NewConn;
use crate::{ListenerCmd, RDMA_LISTEN};
use farflash_core::listen::ListenTransport;
use farflash_core::Target;
use farflash_rdma::cm::Limits;
use farflash_rdma_verbs::{Accepted, RdmaListener, Staging};
use mio::net::TcpListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

/// How a worker is handed new connections.
pub(crate) struct Handoff {
    pub tx: Sender<NewConn>,
    pub waker: Arc<Waker>,
}

/// The listeners and where their connections go.
pub(crate) struct Acceptor {
    poll: Poll,
    /// TCP listeners by token; a removed one leaves its slot empty.
    tcp: Vec<Option<TcpListener>>,
    /// RDMA listeners by token (`RDMA_LISTEN + k`), the same way.
    rdma: Vec<Option<RdmaListener>>,
    /// What an RDMA connection request may ask for, and the verbs
    /// layer's staging slots.
    limits: Limits,
    staging: Staging,
    /// Scratch for the queue pairs one RDMA listener accepted.
    accepted: Vec<Accepted>,
    /// Connections alive on all workers (released by the workers).
    live: Arc<AtomicUsize>,
    max_connections: usize,
    workers: Vec<Handoff>,
    next: usize,
}

impl Acceptor {
    pub(crate) fn new(
        target: &Target,
        live: Arc<AtomicUsize>,
        max_connections: usize,
        workers: Vec<Handoff>,
    ) -> io::Result<Acceptor> {
        let t = &target.transport;
        Ok(Acceptor {
            poll: Poll::new()?,
            tcp: Vec::new(),
            rdma: Vec::new(),
            limits: Limits {
                max_qid: t.max_io_queues.min(u16::MAX as u32) as u16,
                max_io_entries: t.max_queue_depth,
                max_admin_entries: 32,
                icd_bytes: t.in_capsule_data_size,
            },
            staging: Staging {
                io_slots: (t.max_queue_depth as usize).min(16),
                admin_slots: 2,
                slot_bytes: t.max_io_size as usize,
            },
            accepted: Vec::new(),
            live,
            max_connections,
            workers,
            next: 0,
        })
    }

    /// Starts accepting on TCP listener `l`.
    pub(crate) fn add_tcp(&mut self, l: std::net::TcpListener) -> io::Result<()> {
        l.set_nonblocking(true)?;
        let mut ml = TcpListener::from_std(l);
        let token = Token(self.tcp.len());
        self.poll
            .registry()
            .register(&mut ml, token, Interest::READABLE)?;
        self.tcp.push(Some(ml));
        Ok(())
    }

    /// Starts taking connection requests on RDMA listener `l`.
    pub(crate) fn add_rdma(&mut self, l: RdmaListener) -> io::Result<()> {
        let token = Token(RDMA_LISTEN + self.rdma.len());
        self.poll
            .registry()
            .register(&mut SourceFd(&l.fd()), token, Interest::READABLE)?;
        self.rdma.push(Some(l));
        Ok(())
    }

    /// A listener change from the management API.
    pub(crate) fn control(&mut self, cmd: ListenerCmd) {
        match cmd {
            ListenerCmd::Add(l) => match self.add_tcp(l) {
                Ok(()) => {
                    let addr = self.tcp.last().and_then(Option::as_ref);
                    tracing::info!(addr = ?addr.and_then(|l| l.local_addr().ok()), "listener added");
                }
                Err(e) => tracing::warn!("new listener: {e}"),
            },
            ListenerCmd::AddRdma(l) => {
                let addr = l.local_addr();
                match self.add_rdma(l) {
                    Ok(()) => tracing::info!(%addr, "RDMA listener added"),
                    Err(e) => tracing::warn!("new RDMA listener: {e}"),
                }
            }
            ListenerCmd::Remove(addr, transport, done) => {
                self.remove(addr, transport);
                let _ = done.send(());
            }
        }
    }

    /// Stops listening on `addr`. An RDMA listener's queues have CM ids of
    /// their own and close at their next tick (`Target::serves_on`); TCP
    /// connections on the same address stay.
    fn remove(&mut self, addr: std::net::SocketAddr, transport: ListenTransport) {
        let reg = self.poll.registry();
        match transport {
            ListenTransport::Tcp => {
                for slot in self.tcp.iter_mut() {
                    if slot.as_ref().and_then(|l| l.local_addr().ok()) == Some(addr) {
                        if let Some(mut l) = slot.take() {
                            let _ = reg.deregister(&mut l);
                            tracing::info!(%addr, "listener removed");
                        }
                    }
                }
            }
            ListenTransport::Rdma => {
                for slot in self.rdma.iter_mut() {
                    if slot.as_ref().map(RdmaListener::local_addr) == Some(addr) {
                        if let Some(l) = slot.take() {
                            let _ = reg.deregister(&mut SourceFd(&l.fd()));
                            tracing::info!(%addr, "RDMA listener removed");
                        }
                    }
                }
            }
        }
    }

    /// Waits up to `timeout` for connections and hands them out.
    pub(crate) fn poll(&mut self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        match self.poll.poll(events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            let t = ev.token().0;
            match t.checked_sub(RDMA_LISTEN) {
                Some(k) => self.accept_rdma(k),
                None => self.accept_tcp(t),
            }
        }
        Ok(())
    }

    /// Takes the connection requests of RDMA listener `k`.
    fn accept_rdma(&mut self, k: usize) {
        let Some(l) = self.rdma.get_mut(k).and_then(Option::as_mut) else {
            return;
        };
        l.accept(&self.limits, &self.staging, &mut self.accepted);
        let mut accepted = std::mem::take(&mut self.accepted);
        for a in accepted.drain(..) {
            if self.admit() {
                self.hand(NewConn::Rdma(a));
            } else {
                tracing::warn!(peer = %a.peer, max = self.max_connections, "RDMA queue dropped: too many connections");
            }
        }
        self.accepted = accepted;
    }

    /// Accepts what TCP listener `k` has.
    fn accept_tcp(&mut self, k: usize) {
        loop {
            let Some(l) = self.tcp.get(k).and_then(Option::as_ref) else {
                return;
            };
            match l.accept() {
                Ok((sock, peer)) => {
                    if !self.admit() {
                        tracing::warn!(%peer, max = self.max_connections, "connection refused: too many connections");
                        continue;
                    }
                    let local = sock.local_addr().unwrap_or(peer);
                    let _ = sock.set_nodelay(true);
                    self.hand(NewConn::Tcp { sock, local, peer });
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

    /// The connection cap: counted at accept, released by the worker at close.
    fn admit(&self) -> bool {
        if self.live.fetch_add(1, Ordering::AcqRel) >= self.max_connections {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Hands `nc` to the next worker, round robin.
    fn hand(&mut self, nc: NewConn) {
        let w = &self.workers[self.next % self.workers.len()];
        self.next += 1;
        if w.tx.send(nc).is_ok() {
            let _ = w.waker.wake();
        }
    }

    /// Stops listening; the workers' hand-offs remain, for the shutdown.
    pub(crate) fn close(self) -> Vec<Handoff> {
        self.workers
    }
}
