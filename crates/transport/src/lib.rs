//! The target's NVMe/TCP event loops.
//!
//! One acceptor hands each accepted connection to one worker thread, round
//! robin; a worker owns its connections outright (a [`QueuePair`] is never
//! shared), so the I/O path takes no lock shared between threads. Each
//! worker waits in epoll (mio) on its sockets and on the eventfds of its
//! backend queues, batches whatever a read brings, and sends everything the
//! batch produced in one write.

#![deny(clippy::undocumented_unsafe_blocks)]

mod conn;
mod offload;
mod sched;
mod secure;
mod sleep;
mod worker;

pub use farflash_core::config::PollMode;
use farflash_core::listen::{split_listen, ListenTransport};
use farflash_core::Target;
pub use farflash_rdma_verbs::RdmaListener;
use farflash_rdma_verbs::{Accepted, Staging};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// How often the acceptor looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);
/// Acceptor tokens of the RDMA listeners (`RDMA_LISTEN + k`); TCP
/// listeners count from 0.
const RDMA_LISTEN: usize = 1 << 40;
/// Connection requests an RDMA listener queues (`rdma_listen` backlog).
pub const RDMA_BACKLOG: i32 = 128;

/// How the event loops run.
#[derive(Clone, Debug)]
pub struct LoopOptions {
    /// Event-loop threads.
    pub threads: usize,
    /// CPUs to pin them to, round robin (empty: no pinning).
    pub cpus: Vec<usize>,
    pub poll: PollMode,
    /// Adaptive polling: spin this long after the last work, then sleep.
    pub poll_idle: Duration,
    /// How long shutdown waits for in-flight commands.
    pub drain: Duration,
    /// Connections served at once; more are closed as soon as accepted.
    pub max_connections: usize,
    /// Fair sharing: bytes read from one connection per round and unit of
    /// its host's weight (0: no limit).
    pub fair_share: usize,
}

/// What the management API asks of the acceptor.
enum ListenerCmd {
    Add(std::net::TcpListener),
    AddRdma(RdmaListener),
    Remove(std::net::SocketAddr, ListenTransport, mpsc::Sender<()>),
}

/// Starts and stops listeners of a running [`serve_with`]: binds in the
/// caller's thread (so an error is the caller's), hands the socket to the
/// acceptor.
#[derive(Clone)]
pub struct ListenerHandle {
    tx: mpsc::Sender<ListenerCmd>,
}

/// The acceptor's end of a [`ListenerHandle`].
pub struct ListenerControlRx(mpsc::Receiver<ListenerCmd>);

/// A handle for listener changes and the receiver `serve_with` takes.
pub fn listener_control() -> (ListenerHandle, ListenerControlRx) {
    let (tx, rx) = mpsc::channel();
    (ListenerHandle { tx }, ListenerControlRx(rx))
}

impl farflash_control::reload::ListenerControl for ListenerHandle {
    fn add(&self, addr: &str) -> Result<std::net::SocketAddr, String> {
        use std::net::ToSocketAddrs;
        let (transport, addr) = split_listen(addr)?;
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| format!("bad address (want ADDR:PORT): {e}"))?
            .next()
            .ok_or_else(|| "the address resolves to nothing".to_owned())?;
        let (cmd, bound) = match transport {
            ListenTransport::Tcp => {
                let l =
                    std::net::TcpListener::bind(sa).map_err(|e| format!("cannot listen: {e}"))?;
                let bound = l.local_addr().map_err(|e| e.to_string())?;
                (ListenerCmd::Add(l), bound)
            }
            ListenTransport::Rdma => {
                let l = RdmaListener::bind(sa, RDMA_BACKLOG).map_err(|e| {
                    format!("cannot listen for NVMe/RDMA (is there an RDMA device on it? rdma link): {e}")
                })?;
                let bound = l.local_addr();
                (ListenerCmd::AddRdma(l), bound)
            }
        };
        self.tx
            .send(cmd)
            .map_err(|_| "the target is stopping".to_owned())?;
        Ok(bound)
    }
    fn remove(&self, addr: std::net::SocketAddr, transport: ListenTransport) {
        let (tx, rx) = mpsc::channel();
        if self
            .tx
            .send(ListenerCmd::Remove(addr, transport, tx))
            .is_ok()
        {
            // The acceptor looks every ACCEPT_POLL; when it is gone, so is the socket.
            let _ = rx.recv_timeout(Duration::from_secs(2));
        }
    }
}

/// Runs the target until `stop` is set, then drains connections (bounded by
/// `opts.drain`) and returns.
pub fn serve(
    target: Arc<Target>,
    listeners: Vec<std::net::TcpListener>,
    opts: &LoopOptions,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    serve_with(target, listeners, opts, stop, None)
}

/// [`serve`], with listeners added and removed at run time through the
/// [`ListenerHandle`] that goes with `control`.
pub fn serve_with(
    target: Arc<Target>,
    listeners: Vec<std::net::TcpListener>,
    opts: &LoopOptions,
    stop: Arc<AtomicBool>,
    control: Option<ListenerControlRx>,
) -> io::Result<()> {
    serve_all(target, listeners, Vec::new(), opts, stop, control)
}

/// [`serve_with`], with NVMe/RDMA listeners too: the acceptor takes their
/// connection requests and hands each accepted queue pair to a worker,
/// round robin with the TCP connections.
pub fn serve_all(
    target: Arc<Target>,
    listeners: Vec<std::net::TcpListener>,
    rdma: Vec<RdmaListener>,
    opts: &LoopOptions,
    stop: Arc<AtomicBool>,
    control: Option<ListenerControlRx>,
) -> io::Result<()> {
    let threads = opts.threads.max(1);
    let mut poll = Poll::new()?;
    let mut ls: Vec<Option<TcpListener>> = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        l.set_nonblocking(true)?;
        let mut ml = TcpListener::from_std(l);
        poll.registry()
            .register(&mut ml, Token(i), Interest::READABLE)?;
        ls.push(Some(ml));
    }
    // RDMA listeners by token (`RDMA_LISTEN + k`); a removed one leaves
    // its slot empty, as TCP listeners do.
    let mut rdma: Vec<Option<RdmaListener>> = rdma.into_iter().map(Some).collect();
    for (k, l) in rdma.iter().flatten().enumerate() {
        poll.registry().register(
            &mut mio::unix::SourceFd(&l.fd()),
            Token(RDMA_LISTEN + k),
            Interest::READABLE,
        )?;
    }
    let t = &target.transport;
    let limits = farflash_rdma::cm::Limits {
        max_qid: t.max_io_queues.min(u16::MAX as u32) as u16,
        max_io_entries: t.max_queue_depth,
        max_admin_entries: 32,
        icd_bytes: t.in_capsule_data_size,
    };
    let staging = Staging {
        io_slots: (t.max_queue_depth as usize).min(16),
        admin_slots: 2,
        slot_bytes: t.max_io_size as usize,
    };
    let mut accepted: Vec<Accepted> = Vec::new();
    let live = Arc::new(AtomicUsize::new(0));
    let offloader = offload::Offloader::spawn()?;
    let mut workers = Vec::new();
    for n in 0..threads {
        let (tx, rx) = mpsc::channel();
        let (rdma_tx, rdma_rx) = mpsc::channel::<Accepted>();
        let wpoll = Poll::new()?;
        let waker = Arc::new(Waker::new(wpoll.registry(), worker::WAKE_TOKEN)?);
        let t = target.clone();
        let st = stop.clone();
        let cpu = (!opts.cpus.is_empty()).then(|| opts.cpus[n % opts.cpus.len()]);
        let o = opts.clone();
        let lv = live.clone();
        let port = offloader.port(waker.clone());
        let h = std::thread::Builder::new()
            .name(format!("farflash-io-{n}"))
            .spawn(move || {
                if let Some(c) = cpu {
                    if let Err(e) = worker::pin_to_cpu(c) {
                        tracing::warn!("cannot pin I/O thread {n} to CPU {c}: {e}");
                    }
                }
                worker::Worker::new(t, wpoll, rx, st, lv, port, &o)
                    .with_rdma(rdma_rx)
                    .run()
            })?;
        workers.push((tx, waker, h, rdma_tx));
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    while !stop.load(Ordering::Acquire) {
        if let Some(ctl) = &control {
            while let Ok(cmd) = ctl.0.try_recv() {
                match cmd {
                    ListenerCmd::Add(l) => {
                        let mut ml = match l.set_nonblocking(true) {
                            Ok(()) => TcpListener::from_std(l),
                            Err(e) => {
                                tracing::warn!("new listener: {e}");
                                continue;
                            }
                        };
                        let i = ls.len();
                        match poll
                            .registry()
                            .register(&mut ml, Token(i), Interest::READABLE)
                        {
                            Ok(()) => {
                                tracing::info!(addr = ?ml.local_addr().ok(), "listener added");
                                ls.push(Some(ml));
                            }
                            Err(e) => tracing::warn!("new listener: {e}"),
                        }
                    }
                    ListenerCmd::AddRdma(l) => {
                        let k = rdma.len();
                        match poll.registry().register(
                            &mut mio::unix::SourceFd(&l.fd()),
                            Token(RDMA_LISTEN + k),
                            Interest::READABLE,
                        ) {
                            Ok(()) => {
                                tracing::info!(addr = %l.local_addr(), "RDMA listener added");
                                rdma.push(Some(l));
                            }
                            Err(e) => tracing::warn!("new RDMA listener: {e}"),
                        }
                    }
                    ListenerCmd::Remove(addr, ListenTransport::Tcp, done) => {
                        for slot in ls.iter_mut() {
                            if slot.as_ref().and_then(|l| l.local_addr().ok()) == Some(addr) {
                                if let Some(mut l) = slot.take() {
                                    let _ = poll.registry().deregister(&mut l);
                                    tracing::info!(%addr, "listener removed");
                                }
                            }
                        }
                        let _ = done.send(());
                    }
                    ListenerCmd::Remove(addr, ListenTransport::Rdma, done) => {
                        // Its CM id goes; the queues accepted through it
                        // have ids of their own and close at their next
                        // tick (Target::serves_on), TCP ones on the same
                        // address stay.
                        for slot in rdma.iter_mut() {
                            if slot.as_ref().map(RdmaListener::local_addr) == Some(addr) {
                                if let Some(l) = slot.take() {
                                    let _ = poll
                                        .registry()
                                        .deregister(&mut mio::unix::SourceFd(&l.fd()));
                                    tracing::info!(%addr, "RDMA listener removed");
                                }
                            }
                        }
                        let _ = done.send(());
                    }
                }
            }
        }
        match poll.poll(&mut events, Some(ACCEPT_POLL)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            if let Some(l) = ev
                .token()
                .0
                .checked_sub(RDMA_LISTEN)
                .and_then(|k| rdma.get_mut(k))
                .and_then(Option::as_mut)
            {
                l.accept(&limits, &staging, &mut accepted);
                for a in accepted.drain(..) {
                    // Connection cap: as for TCP, released by the worker.
                    if live.fetch_add(1, Ordering::AcqRel) >= opts.max_connections {
                        live.fetch_sub(1, Ordering::AcqRel);
                        tracing::warn!(peer = %a.peer, max = opts.max_connections, "RDMA queue dropped: too many connections");
                        continue;
                    }
                    let (_, waker, _, rtx) = &workers[next % workers.len()];
                    next += 1;
                    if rtx.send(a).is_ok() {
                        let _ = waker.wake();
                    }
                }
                continue;
            }
            let Some(l) = ls.get(ev.token().0).and_then(Option::as_ref) else {
                continue;
            };
            loop {
                match l.accept() {
                    Ok((sock, peer)) => {
                        // Connection cap: counted at accept, released by the worker at close.
                        if live.fetch_add(1, Ordering::AcqRel) >= opts.max_connections {
                            live.fetch_sub(1, Ordering::AcqRel);
                            tracing::warn!(%peer, max = opts.max_connections, "connection refused: too many connections");
                            drop(sock);
                            continue;
                        }
                        let local = sock.local_addr().unwrap_or(peer);
                        let _ = sock.set_nodelay(true);
                        let (tx, waker, _, _) = &workers[next % workers.len()];
                        next += 1;
                        if tx.send(worker::NewConn { sock, local, peer }).is_ok() {
                            let _ = waker.wake();
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE and friends: log, back off, keep serving.
                        tracing::warn!("accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                        break;
                    }
                }
            }
        }
    }
    drop(ls);
    target.begin_shutdown();
    for (_, waker, _, _) in &workers {
        let _ = waker.wake();
    }
    for (tx, _, h, rtx) in workers {
        drop(tx);
        drop(rtx);
        if h.join().is_err() {
            tracing::error!("an I/O thread panicked");
        }
    }
    Ok(())
}
