//! The target's NVMe/TCP event loops.
//!
//! One acceptor hands each accepted connection to one worker thread, round
//! robin; a worker owns its connections outright (a [`QueuePair`] is never
//! shared), so the I/O path takes no lock shared between threads. Each
//! worker waits in epoll (mio) on its sockets and on the eventfds of its
//! backend queues, batches whatever a read brings, and sends everything the
//! batch produced in one write.

mod adaptive;
mod worker;

pub use farflash_core::config::PollMode;
use farflash_core::Target;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

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
}

/// Runs the target until `stop` is set, then drains connections (bounded by
/// `opts.drain`) and returns.
pub fn serve(
    target: Arc<Target>,
    listeners: Vec<std::net::TcpListener>,
    opts: &LoopOptions,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    let threads = opts.threads.max(1);
    let mut poll = Poll::new()?;
    let mut ls = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        l.set_nonblocking(true)?;
        let mut ml = TcpListener::from_std(l);
        poll.registry()
            .register(&mut ml, Token(i), Interest::READABLE)?;
        ls.push(ml);
    }
    let live = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for n in 0..threads {
        let (tx, rx) = mpsc::channel();
        let wpoll = Poll::new()?;
        let waker = Arc::new(Waker::new(wpoll.registry(), worker::WAKE_TOKEN)?);
        let t = target.clone();
        let st = stop.clone();
        let cpu = (!opts.cpus.is_empty()).then(|| opts.cpus[n % opts.cpus.len()]);
        let o = opts.clone();
        let lv = live.clone();
        let h = std::thread::Builder::new()
            .name(format!("farflash-io-{n}"))
            .spawn(move || {
                if let Some(c) = cpu {
                    if let Err(e) = worker::pin_to_cpu(c) {
                        tracing::warn!("cannot pin I/O thread {n} to CPU {c}: {e}");
                    }
                }
                worker::Worker::new(t, wpoll, rx, st, lv, &o).run()
            })?;
        workers.push((tx, waker, h));
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    while !stop.load(Ordering::Acquire) {
        match poll.poll(&mut events, Some(ACCEPT_POLL)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            let Some(l) = ls.get(ev.token().0) else {
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
                        let (tx, waker, _) = &workers[next % workers.len()];
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
    for (_, waker, _) in &workers {
        let _ = waker.wake();
    }
    for (tx, _, h) in workers {
        drop(tx);
        if h.join().is_err() {
            tracing::error!("an I/O thread panicked");
        }
    }
    Ok(())
}
