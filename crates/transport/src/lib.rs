//! The target's event loops, for every transport (NVMe/TCP, NVMe/RDMA).
//!
//! A transport is what `link.rs` says one is: a [`Listener`], the
//! [`Incoming`] connections it accepts and the [`Link`] a worker drives
//! (`tcp.rs`, `rdma.rs`); `transports.rs` binds the ones a listen address
//! can pick: the built-in ones and those given to [`register`]. One acceptor (`acceptor.rs`) hands each accepted connection
//! to one worker thread, round robin; a worker owns its connections
//! outright, in one table for every transport, so the I/O path takes no
//! lock shared between threads. Each worker waits in epoll (mio) on its
//! connections' fds and on the eventfds of its backend queues, and drives
//! the connections the scheduler (`sched.rs`) orders.

#![deny(clippy::undocumented_unsafe_blocks)]

mod acceptor;
mod conn;
mod inbound;
mod link;
mod offload;
mod rdma;
mod sched;
mod secure;
mod sleep;
mod tcp;
mod transports;
mod worker;

use acceptor::{Acceptor, Handoff};
pub use farflash_core::config::PollMode;
use farflash_core::listen::{split_listen, ListenTransport};
use farflash_core::Target;
pub use link::{deliver, hand_out, After, Cx, Done, Incoming, Link, Listener, Sinks, Ticked};
use mio::{Events, Poll, Waker};
pub use rdma::RDMA_BACKLOG;
pub use sched::{Pass, Rx, State};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
pub use transports::{bind_listener, register, Bind, BindResult};

/// How often the acceptor looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

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
pub(crate) enum ListenerCmd {
    Add(Box<dyn Listener>),
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
        let (l, bound) = transports::bind_listener(transport, sa)?;
        let cmd = ListenerCmd::Add(l);
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
    let mut all = Vec::with_capacity(listeners.len());
    for l in listeners {
        all.push(transports::tcp(l)?);
    }
    serve_listeners(target, all, opts, stop, control)
}

/// [`serve_with`] over listeners of any transport ([`Listener`]; the
/// configured ones come from [`bind_listener`]): the acceptor takes their
/// connections and hands each to a worker, round robin.
pub fn serve_listeners(
    target: Arc<Target>,
    listeners: Vec<Box<dyn Listener>>,
    opts: &LoopOptions,
    stop: Arc<AtomicBool>,
    control: Option<ListenerControlRx>,
) -> io::Result<()> {
    let live = Arc::new(AtomicUsize::new(0));
    let (handoffs, threads) = spawn_workers(&target, opts, &stop, &live)?;
    let mut acceptor = Acceptor::new(target.clone(), live, opts.max_connections, handoffs)?;
    for l in listeners {
        acceptor.add(l)?;
    }
    let mut events = Events::with_capacity(64);
    let served = loop {
        if stop.load(Ordering::Acquire) {
            break Ok(());
        }
        if let Some(ctl) = &control {
            while let Ok(cmd) = ctl.0.try_recv() {
                acceptor.control(cmd);
            }
        }
        if let Err(e) = acceptor.poll(&mut events, ACCEPT_POLL) {
            break Err(e);
        }
    };
    let handoffs = acceptor.close();
    target.begin_shutdown();
    for h in &handoffs {
        let _ = h.waker.wake();
    }
    drop(handoffs);
    for h in threads {
        if h.join().is_err() {
            tracing::error!("an I/O thread panicked");
        }
    }
    served
}

/// Starts the event-loop threads (with the offload helper they share):
/// how to hand each new connections, and their join handles.
fn spawn_workers(
    target: &Arc<Target>,
    opts: &LoopOptions,
    stop: &Arc<AtomicBool>,
    live: &Arc<AtomicUsize>,
) -> io::Result<(Vec<Handoff>, Vec<std::thread::JoinHandle<()>>)> {
    let offloader = offload::Offloader::spawn()?;
    let mut handoffs = Vec::new();
    let mut threads = Vec::new();
    for n in 0..opts.threads.max(1) {
        let (tx, rx) = mpsc::channel();
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
                worker::Worker::new(t, wpoll, rx, st, lv, port, &o).run()
            })?;
        handoffs.push(Handoff { tx, waker });
        threads.push(h);
    }
    Ok((handoffs, threads))
}
