//! One event-loop thread and the connections it owns.

use farflash_target::{QueuePair, Target};
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const WAKE_TOKEN: Token = Token(usize::MAX);
/// Tokens at or above this are backend eventfds: `FD_BIT | connection`.
const FD_BIT: usize = 1 << 40;
/// Periodic work (keep-alive, teardown) at least this often.
const TICK: Duration = Duration::from_millis(100);

pub(crate) struct NewConn {
    pub sock: TcpStream,
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

struct Conn {
    sock: TcpStream,
    qp: QueuePair,
    /// Backend eventfds already registered with the poller.
    fds: Vec<RawFd>,
    /// The peer closed its side: nothing more to read, but what we owe it
    /// (a response, a TermReq) is still sent if the socket takes it.
    eof: bool,
    dead: bool,
}

pub(crate) struct Worker {
    target: Arc<Target>,
    poll: Poll,
    rx: Receiver<NewConn>,
    stop: Arc<AtomicBool>,
    drain: Duration,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    ready: Vec<usize>,
}

impl Worker {
    pub fn new(
        target: Arc<Target>,
        poll: Poll,
        rx: Receiver<NewConn>,
        stop: Arc<AtomicBool>,
        drain: Duration,
    ) -> Worker {
        Worker {
            target,
            poll,
            rx,
            stop,
            drain,
            conns: Vec::new(),
            free: Vec::new(),
            ready: Vec::new(),
        }
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut last_tick = Instant::now();
        let mut drain_deadline: Option<Instant> = None;
        loop {
            if let Err(e) = self.poll.poll(&mut events, Some(TICK)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("poll failed: {e}");
                    return;
                }
            }
            for ev in events.iter() {
                let t = ev.token();
                if t == WAKE_TOKEN {
                    self.accept_new();
                } else {
                    self.ready.push(t.0 & (FD_BIT - 1));
                }
            }
            let now = Instant::now();
            if now.duration_since(last_tick) >= TICK {
                last_tick = now;
                for i in 0..self.conns.len() {
                    if let Some(c) = self.conns[i].as_mut() {
                        c.qp.tick(now);
                        self.ready.push(i);
                    }
                }
            }
            let mut ready = std::mem::take(&mut self.ready);
            ready.sort_unstable();
            ready.dedup();
            for &i in &ready {
                self.drive(i);
            }
            ready.clear();
            self.ready = ready;
            if self.stop.load(Ordering::Acquire) {
                let deadline = *drain_deadline.get_or_insert(now + self.drain);
                if self.conns.iter().all(Option::is_none) {
                    return;
                }
                if now >= deadline {
                    tracing::warn!("shutdown: closing connections that did not drain in time");
                    return;
                }
                for c in self.conns.iter_mut().flatten() {
                    c.qp.tick(now);
                }
            }
        }
    }

    fn accept_new(&mut self) {
        while let Ok(nc) = self.rx.try_recv() {
            let i = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let mut sock = nc.sock;
            if let Err(e) = self.poll.registry().register(
                &mut sock,
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                tracing::warn!(peer = %nc.peer, "cannot register connection: {e}");
                self.free.push(i);
                continue;
            }
            tracing::debug!(peer = %nc.peer, local = %nc.local, "connection accepted");
            let qp = QueuePair::new(self.target.clone(), nc.local, nc.peer);
            self.conns[i] = Some(Conn {
                sock,
                qp,
                fds: Vec::new(),
                eof: false,
                dead: false,
            });
            self.ready.push(i);
        }
    }

    /// Moves a connection forward as far as it goes without blocking.
    fn drive(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        loop {
            let mut progress = false;
            // Receive: everything the socket has, PDUs processed as they complete.
            while c.qp.wants_read() && !c.dead && !c.eof {
                match c.sock.read(c.qp.rx_space()) {
                    Ok(0) => c.eof = true,
                    Ok(n) => {
                        c.qp.on_received(n);
                        progress = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => c.dead = true,
                }
            }
            c.qp.commit();
            if c.qp.poll_backends() {
                progress = true;
            }
            // Send: all PDUs this pass produced, in as few writes as the socket takes.
            while !c.qp.output().is_empty() && !c.dead {
                match c.sock.write(c.qp.output()) {
                    Ok(0) => c.dead = true,
                    Ok(n) => {
                        c.qp.consume_output(n);
                        progress = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => c.dead = true,
                }
            }
            if !progress || c.dead {
                break;
            }
        }
        // Watch new backend eventfds (opened lazily at a namespace's first I/O).
        let new: Vec<RawFd> = c.qp.notify_fds().filter(|fd| !c.fds.contains(fd)).collect();
        for fd in new {
            match self.poll.registry().register(
                &mut SourceFd(&fd),
                Token(FD_BIT | i),
                Interest::READABLE,
            ) {
                Ok(()) => c.fds.push(fd),
                Err(e) => tracing::warn!("cannot watch backend eventfd: {e}"),
            }
        }
        let drained = c.qp.output().is_empty() && c.qp.in_flight() == 0;
        if c.dead || c.qp.finished() || (c.eof && drained) {
            self.close(i);
        }
    }

    fn close(&mut self, i: usize) {
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        for fd in &c.fds {
            let _ = self.poll.registry().deregister(&mut SourceFd(fd));
        }
        let _ = self.poll.registry().deregister(&mut c.sock);
        if c.qp.in_flight() > 0 {
            // The backend queue waits for its in-flight requests when dropped.
            tracing::debug!(
                in_flight = c.qp.in_flight(),
                "closing a connection with backend I/O in flight"
            );
        }
        drop(c);
        self.free.push(i);
    }
}
