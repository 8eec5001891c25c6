//! The acceptor: the listeners of every transport ([`Listener`]: TCP
//! sockets, RDMA CM ids, ...) in one poller, listeners added and removed
//! at run time, the connection cap, and the hand-off of each new
//! connection to a worker, round robin, through one channel per worker.

use crate::link::{Incoming, Listener};
use crate::ListenerCmd;
use farflash_core::listen::ListenTransport;
use farflash_core::Target;
use mio::{Events, Poll, Token, Waker};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

/// How a worker is handed new connections.
pub(crate) struct Handoff {
    pub tx: Sender<Box<dyn Incoming>>,
    pub waker: Arc<Waker>,
}

/// The listeners and where their connections go.
pub(crate) struct Acceptor {
    target: Arc<Target>,
    poll: Poll,
    /// Listeners by token; a removed one leaves its slot empty.
    listeners: Vec<Option<Box<dyn Listener>>>,
    /// Scratch for the connections one listener accepted.
    accepted: Vec<Box<dyn Incoming>>,
    /// Connections alive on all workers (released by the workers).
    live: Arc<AtomicUsize>,
    max_connections: usize,
    workers: Vec<Handoff>,
    next: usize,
}

impl Acceptor {
    pub(crate) fn new(
        target: Arc<Target>,
        live: Arc<AtomicUsize>,
        max_connections: usize,
        workers: Vec<Handoff>,
    ) -> io::Result<Acceptor> {
        Ok(Acceptor {
            target,
            poll: Poll::new()?,
            listeners: Vec::new(),
            accepted: Vec::new(),
            live,
            max_connections,
            workers,
            next: 0,
        })
    }

    /// Starts accepting on `l`.
    pub(crate) fn add(&mut self, mut l: Box<dyn Listener>) -> io::Result<()> {
        let token = Token(self.listeners.len());
        l.register(self.poll.registry(), token)?;
        self.listeners.push(Some(l));
        Ok(())
    }

    /// A listener change from the management API.
    pub(crate) fn control(&mut self, cmd: ListenerCmd) {
        match cmd {
            ListenerCmd::Add(l) => {
                let (addr, transport) = (l.local_addr(), l.transport());
                match self.add(l) {
                    Ok(()) => tracing::info!(?addr, ?transport, "listener added"),
                    Err(e) => tracing::warn!(?addr, ?transport, "new listener: {e}"),
                }
            }
            ListenerCmd::Remove(addr, transport, done) => {
                self.remove(addr, transport);
                let _ = done.send(());
            }
        }
    }

    /// Stops listening on `addr` with `transport`. Connections accepted
    /// there stay (an RDMA queue has a CM id of its own and closes at its
    /// next tick: `Target::serves_on`).
    fn remove(&mut self, addr: std::net::SocketAddr, transport: ListenTransport) {
        let reg = self.poll.registry();
        for slot in self.listeners.iter_mut() {
            let this = slot
                .as_ref()
                .is_some_and(|l| l.local_addr() == Some(addr) && l.transport() == Some(transport));
            if this {
                if let Some(mut l) = slot.take() {
                    l.deregister(reg);
                    tracing::info!(%addr, ?transport, "listener removed");
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
            self.accept(ev.token().0);
        }
        Ok(())
    }

    /// Takes what listener `k` has and hands each within the cap to a worker.
    fn accept(&mut self, k: usize) {
        let Some(l) = self.listeners.get_mut(k).and_then(Option::as_mut) else {
            return;
        };
        l.accept(&self.target, &mut self.accepted);
        let mut accepted = std::mem::take(&mut self.accepted);
        for a in accepted.drain(..) {
            if self.admit() {
                self.hand(a);
            } else {
                tracing::warn!(peer = ?a.peer(), max = self.max_connections, "connection refused: too many connections");
            }
        }
        self.accepted = accepted;
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
    fn hand(&mut self, nc: Box<dyn Incoming>) {
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
