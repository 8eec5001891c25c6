//! A whole transport in one file (issue #41: "adding a transport means one
//! trait impl"): an in-memory loopback that carries NVMe/TCP PDUs between
//! farflash's host and the target's event loops through byte queues in
//! this process, woken by eventfds instead of sockets. Its target side is
//! a [`Listener`], the [`Incoming`] connections it accepts and the
//! [`Link`] a worker drives; its host side is a `farflash_host`
//! [`Connector`]. Nothing else in farflash knows it: its only registration
//! is one [`register`] call, naming it `loop` and saying how it binds.
//!
//! The test registers it, reads a configuration whose listener is
//! `loop:ADDR:PORT` and binds it as the server does (the listen address
//! split by `farflash_core::listen`, bound by [`bind_listener`]), adds and
//! removes a second one through the management functions, connects a
//! controller and an I/O queue over it (accept, the Fabrics Connect, the
//! controller's bring-up), writes and reads back a pattern, closes, and
//! checks the target dropped every connection.

use farflash_control::build_subsystems;
use farflash_control::manage::{add_listener, remove_listener};
use farflash_control::reload::current_config;
use farflash_core::config::PollMode;
use farflash_core::listen::{split_listen, ListenTransport};
use farflash_core::target::Listener as Listening;
use farflash_core::Target;
use farflash_host::transport::HostTransport;
use farflash_host::{
    Completion, ConnectOptions, Connector, Controller, DataDir, HostError, IoQueueOptions,
    QueueConfig,
};
use farflash_transport::{
    bind_listener, deliver, hand_out, listener_control, register, serve_listeners, After,
    BindResult, Cx, Done, Incoming, Link, Listener, LoopOptions, Pass, Sinks, Ticked,
};
use farflash_wire::Sqe;
use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.farflash:loopback";
/// The configured listener's address (no socket: a name for a backlog).
const LOCAL: &str = "127.0.0.1:4420";
/// The one the management API adds.
const ADDED: &str = "127.0.0.1:4421";

/// The transport as listen addresses name it. It carries NVMe/TCP's PDUs
/// through farflash_tcp's queue pair, whose queues report TRTYPE 3 (TCP),
/// so its listeners are of that TRTYPE too (`Target::serves_on` matches
/// a queue to its listener by TRTYPE and address).
const LOOP: ListenTransport = ListenTransport::new("loop", farflash_wire::discovery::TRTYPE_TCP);

/// An eventfd: what wakes epoll for a queue with no socket.
#[derive(Debug)]
struct Bell(OwnedFd);

impl Bell {
    fn new() -> Bell {
        // SAFETY: eventfd has no memory arguments; the fd is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd: {}", io::Error::last_os_error());
        // SAFETY: a fresh fd that nothing else owns.
        Bell(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer (EAGAIN: already rung).
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    fn clear(&self) {
        let mut b = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer (EAGAIN: not rung).
        unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    }

    fn register(&self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(
            &mut SourceFd(&self.0.as_raw_fd()),
            token,
            Interest::READABLE,
        )
    }

    fn deregister(&self, registry: &Registry) {
        let _ = registry.deregister(&mut SourceFd(&self.0.as_raw_fd()));
    }
}

/// One connection's two byte queues and who has closed.
#[derive(Debug, Default)]
struct Bytes {
    up: VecDeque<u8>,
    down: VecDeque<u8>,
    host_closed: bool,
    target_closed: bool,
    target_dropped: bool,
}

/// A connection's wire: the bytes, the target's doorbell, the host's wait.
#[derive(Debug)]
struct Wire {
    bytes: Mutex<Bytes>,
    bell: Bell,
    host: Condvar,
}

impl Wire {
    fn lock(&self) -> std::sync::MutexGuard<'_, Bytes> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The target's side is gone (closed or dropped): the host sees EOF.
    fn target_gone(&self, dropped: bool) {
        let mut b = self.lock();
        b.target_closed = true;
        b.target_dropped |= dropped;
        self.host.notify_all();
    }
}

/// The listener's backlog: wires the host opened, not yet accepted.
#[derive(Debug)]
struct Backlog {
    wires: Mutex<Vec<Arc<Wire>>>,
    bell: Bell,
    /// Every wire ever opened (the test looks at how each ended).
    all: Mutex<Vec<Arc<Wire>>>,
}

/// The loopback's "network": the backlog of every bound address.
#[derive(Debug, Default)]
struct Net(Mutex<Vec<(SocketAddr, Arc<Backlog>)>>);

impl Net {
    /// The transport's binder ([`register`]): a listener with a backlog of
    /// its own on `sa`, unless one is bound there.
    fn bind(&self, sa: SocketAddr) -> BindResult {
        let mut bound = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if bound.iter().any(|(a, _)| *a == sa) {
            return Err(format!("cannot listen on loop:{sa}: in use"));
        }
        let backlog = Arc::new(Backlog {
            wires: Mutex::default(),
            bell: Bell::new(),
            all: Mutex::default(),
        });
        bound.push((sa, backlog.clone()));
        Ok((Box::new(LoopListener { backlog, addr: sa }), sa))
    }

    /// The backlog bound on `addr`.
    fn at(&self, addr: &str) -> Arc<Backlog> {
        let sa: SocketAddr = addr.parse().expect("address");
        let bound = self.0.lock().expect("lock");
        let found = bound.iter().find(|(a, _)| *a == sa).expect("bound");
        found.1.clone()
    }
}

/// The transport's listener: the acceptor watches its backlog's bell.
struct LoopListener {
    backlog: Arc<Backlog>,
    addr: SocketAddr,
}

impl Listener for LoopListener {
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        self.backlog.bell.register(registry, token)
    }

    fn deregister(&mut self, registry: &Registry) {
        self.backlog.bell.deregister(registry);
    }

    fn accept(&mut self, _target: &Arc<Target>, out: &mut Vec<Box<dyn Incoming>>) {
        self.backlog.bell.clear();
        let mut wires = self.backlog.wires.lock().unwrap_or_else(|e| e.into_inner());
        for w in wires.drain(..) {
            out.push(Box::new(LoopIncoming(w, self.addr)));
        }
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(self.addr)
    }

    fn transport(&self) -> Option<ListenTransport> {
        Some(LOOP)
    }
}

/// An accepted wire on its way to a worker, and its listener's address.
struct LoopIncoming(Arc<Wire>, SocketAddr);

impl Incoming for LoopIncoming {
    fn peer(&self) -> Option<SocketAddr> {
        None
    }

    fn open(self: Box<Self>, target: &Arc<Target>, _now: Instant) -> Box<dyn Link> {
        let local = self.1;
        Box::new(LoopLink {
            wire: self.0,
            qp: farflash_tcp::QueuePair::new(target.clone(), local, local),
        })
    }
}

/// The target's end: NVMe/TCP's queue pair over the wire's byte queues.
struct LoopLink {
    wire: Arc<Wire>,
    qp: farflash_tcp::QueuePair,
}

impl LoopLink {
    /// Feeds what the host sent to the queue pair; returns (moved, eof).
    fn receive(&mut self) -> (bool, bool) {
        let mut b = self.wire.lock();
        let mut moved = false;
        while !b.up.is_empty() && self.qp.wants_read() {
            let space = self.qp.rx_space();
            let n = space.len().min(b.up.len());
            for (d, s) in space[..n].iter_mut().zip(b.up.drain(..n)) {
                *d = s;
            }
            self.qp.on_received(n);
            moved = true;
        }
        (moved, b.host_closed && b.up.is_empty())
    }

    /// Moves the queue pair's output to the host; returns whether any went.
    fn send(&mut self) -> bool {
        let mut moved = false;
        while self.qp.output_len() > 0 {
            let mut iov = [IoSlice::new(&[]); 64];
            let n = self.qp.output_slices(&mut iov);
            let mut b = self.wire.lock();
            let mut total = 0;
            for s in &iov[..n] {
                b.down.extend(s.iter());
                total += s.len();
            }
            drop(b);
            self.qp.consume_output(total);
            moved = true;
        }
        if moved {
            self.wire.host.notify_all();
        }
        moved
    }
}

impl Link for LoopLink {
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        self.wire.bell.register(registry, token)
    }

    fn deregister(&mut self, registry: &Registry) {
        self.wire.bell.deregister(registry);
    }

    fn on_event(&mut self, _ev: &Event) -> bool {
        self.wire.bell.clear();
        true
    }

    fn tick(&mut self, now: Instant) -> Ticked {
        self.qp.tick(now);
        Ticked {
            wake: self.qp.output_len() > 0 || self.qp.wants_close(),
            throttle: self.qp.throttle_wake(),
            close: false,
        }
    }

    fn drive(&mut self, cx: &mut Cx<'_>) -> After {
        let mut p = Pass::starting(cx.state());
        p.control = self.qp.nvme().qid() == 0;
        self.qp.set_now(cx.now());
        p.worked |= self.qp.resume_throttled();
        loop {
            let (received, eof) = self.receive();
            p.eof |= eof;
            p.worked |= cx.pump(self);
            p.worked |= self.send() | received;
            let completed = cx.pump(self);
            p.worked |= completed;
            if !(received || completed) {
                break;
            }
        }
        // The queue was read empty; the host's next write rings the bell.
        p.unread = false;
        let drained = self.qp.output_len() == 0 && self.qp.in_flight() == 0;
        let close = self.qp.finished() || (p.eof && drained);
        cx.driven(p);
        if close {
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
        self.wire.target_gone(false);
    }
}

impl Drop for LoopLink {
    fn drop(&mut self) {
        self.wire.target_gone(true);
    }
}

/// The host's end: its sans-I/O NVMe/TCP queue pair over the same wire.
struct LoopHost {
    wire: Arc<Wire>,
    qp: farflash_host::QueuePair,
}

impl LoopHost {
    /// Takes what the target sent; an error once it closed and all is read.
    fn take_in(&mut self) -> farflash_host::Result<()> {
        let (bytes, closed) = {
            let mut b = self.wire.lock();
            (b.down.drain(..).collect::<Vec<u8>>(), b.target_closed)
        };
        if !bytes.is_empty() {
            self.qp.rx_feed(&bytes)?;
        } else if closed {
            return Err(HostError::Transport(self.qp.closed()));
        }
        Ok(())
    }
}

impl HostTransport for LoopHost {
    fn depth(&self) -> u16 {
        self.qp.depth()
    }
    fn outstanding(&self) -> usize {
        self.qp.outstanding()
    }
    fn alloc_cid(&mut self) -> Option<u16> {
        self.qp.alloc_cid()
    }
    fn release_cid(&mut self, cid: u16) {
        self.qp.release_cid(cid)
    }
    fn buf(&self, cid: u16) -> &[u8] {
        self.qp.buf(cid)
    }
    fn buf_mut(&mut self, cid: u16) -> Option<&mut [u8]> {
        self.qp.buf_mut(cid)
    }
    fn ensure_buf(&mut self, cid: u16, len: usize) -> farflash_host::Result<()> {
        self.qp.ensure_buf(cid, len)
    }
    fn submit(&mut self, cid: u16, sqe: Sqe, dir: DataDir, len: u32) -> farflash_host::Result<()> {
        self.qp.submit(cid, sqe, dir, len)
    }
    fn send_queued(&mut self) -> farflash_host::Result<bool> {
        let mut sent = false;
        while self.qp.tx_pending() > 0 {
            let mut iov = [IoSlice::new(&[]); 64];
            let n = self.qp.tx_iovecs(&mut iov);
            let mut b = self.wire.lock();
            if b.target_closed {
                return Err(HostError::Transport(self.qp.closed()));
            }
            let total: usize = iov[..n].iter().map(|s| s.len()).sum();
            for s in &iov[..n] {
                b.up.extend(s.iter());
            }
            drop(b);
            self.qp.tx_advance(total);
            sent = true;
        }
        if sent {
            self.wire.bell.ring();
        }
        Ok(true)
    }
    fn progress(&mut self, out: &mut Vec<Completion>) -> farflash_host::Result<()> {
        self.send_queued()?;
        self.take_in()?;
        // What the input asked for (H2CData for an R2T) goes out at once.
        self.send_queued()?;
        self.qp.take_completions(out);
        Ok(())
    }
    fn wait_ready(&mut self, ms: i32) -> farflash_host::Result<()> {
        let b = self.wire.lock();
        let timeout = Duration::from_millis(ms.max(0) as u64);
        let _ = self
            .wire
            .host
            .wait_timeout_while(b, timeout, |b| b.down.is_empty() && !b.target_closed);
        Ok(())
    }
    fn close(&mut self, _timeout: Duration) {
        self.wire.lock().host_closed = true;
        self.wire.bell.ring();
    }
    fn maxh2cdata(&self) -> u32 {
        self.qp.maxh2cdata()
    }
}

/// The host's connector: each queue is a new wire in the backlog.
#[derive(Debug)]
struct LoopConnector(Arc<Backlog>);

impl Connector for LoopConnector {
    fn name(&self) -> &'static str {
        "loop"
    }

    fn open(
        &self,
        opts: &ConnectOptions,
        _qid: u16,
        cfg: QueueConfig,
    ) -> farflash_host::Result<Box<dyn HostTransport>> {
        let wire = Arc::new(Wire {
            bytes: Mutex::default(),
            bell: Bell::new(),
            host: Condvar::new(),
        });
        self.0.all.lock().expect("lock").push(wire.clone());
        self.0.wires.lock().expect("lock").push(wire.clone());
        self.0.bell.ring();
        let mut h = LoopHost {
            wire,
            qp: farflash_host::QueuePair::new(cfg),
        };
        // The ICReq goes out; the queue is ready at the ICResp.
        let deadline = Instant::now() + opts.command_timeout;
        let mut none = Vec::new();
        while !h.qp.is_ready() {
            if Instant::now() >= deadline {
                return Err(HostError::Timeout("ICResp"));
            }
            h.progress(&mut none)?;
            h.wait_ready(10)?;
        }
        Ok(Box::new(h))
    }
}

/// The configuration the test serves: `listen` as given, a RAM namespace.
fn config_text(listen: &str) -> String {
    format!(
        "listen = [{listen}]\n[[subsystem]]\nnqn = '{NQN}'\n\
         [[subsystem.namespace]]\nbackend = 'ram'\nsize = '1M'\n"
    )
}

/// Connects a controller and an I/O queue through the listener on `addr`,
/// writes a pattern and reads it back, shuts down, and waits until the
/// target dropped both connections.
fn exchange(net: &Net, addr: &str) {
    let backlog = net.at(addr);
    let mut copts = ConnectOptions::new("loopback", NQN);
    copts.command_timeout = Duration::from_secs(10);
    copts.connector = Some(Arc::new(LoopConnector(backlog.clone())));
    let ctrl = Controller::connect(&copts).expect("connect over the loopback");
    let mut q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth: 8,
                max_io: 64 * 1024,
            },
        )
        .expect("I/O queue");
    // A write spanning several PDUs and a read of it back.
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 + 3) as u8).collect();
    q.write_at(1, 16, 128, &data).expect("write");
    let mut back = vec![0u8; data.len()];
    q.read_at(1, 16, 128, &mut back).expect("read");
    assert_eq!(back, data, "what was read is what was written");
    let mut other = vec![0xAAu8; 512];
    q.read_at(1, 0, 1, &mut other).expect("read");
    assert_eq!(other, vec![0u8; 512], "an unwritten block reads zeroes");

    // Close: the host closes the I/O queue and shuts the controller down;
    // the target drops both connections (their links' Drop).
    drop(q);
    ctrl.shutdown().expect("shutdown");
    let wires = backlog.all.lock().expect("lock").clone();
    assert_eq!(
        wires.len(),
        2,
        "an admin and an I/O connection were accepted on {addr}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    for w in &wires {
        let mut b = w.lock();
        while !b.target_dropped {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the target kept a closed connection");
            b = w.host.wait_timeout(b, left).expect("wait").0;
        }
    }
}

#[test]
fn a_transport_in_one_file_is_configured_accepts_moves_data_and_closes() {
    // The transport's one registration: its name and how it binds.
    let net = Arc::new(Net::default());
    {
        let net = net.clone();
        register(LOOP, move |sa| net.bind(sa)).expect("register");
    }

    // Its listen address, as a string and as a table, parses as any
    // other transport's; an unknown one is still refused, naming it.
    let text = config_text(&format!("'loop:{LOCAL}'"));
    let cfg = farflash_control::config::from_toml(&text, "loop.toml").expect("config");
    assert_eq!(cfg.listen, [format!("loop:{LOCAL}")]);
    let table = config_text(&format!("{{ address = '{LOCAL}', transport = 'loop' }}"));
    let same = farflash_control::config::from_toml(&table, "table.toml").expect("table");
    assert_eq!(same.listen, cfg.listen);
    let e = farflash_control::config::from_toml(&text.replace("loop:", "roce:"), "bad.toml")
        .expect_err("an unknown transport");
    let e = e.to_string();
    assert!(e.contains("\"roce\"") && e.contains("loop"), "{e}");

    // Bound as the server binds a configured listener
    // (crates/server/src/listen.rs): split, resolve, bind.
    let (mut listeners, mut described) = (Vec::new(), Vec::new());
    for c in &cfg.listen {
        let (t, a) = split_listen(c).expect("a known transport");
        assert_eq!(t, LOOP);
        let (l, addr) = bind_listener(t, a.parse().expect("address")).expect("bind");
        listeners.push(l);
        described.push(Listening {
            config: c.clone(),
            addr,
            transport: t,
        });
    }
    let e = bind_listener(LOOP, LOCAL.parse().expect("address")).err();
    assert!(e.is_some_and(|e| e.contains("in use")), "a second bind");
    let subs = build_subsystems(&cfg).expect("subsystem");
    let t = Target::with_listeners(subs, cfg.transport.clone(), described);
    let stop = Arc::new(AtomicBool::new(false));
    let opts = LoopOptions {
        threads: 2,
        cpus: vec![],
        poll: PollMode::Adaptive,
        poll_idle: Duration::from_micros(100),
        drain: Duration::from_secs(2),
        max_connections: 64,
        fair_share: 256 * 1024,
    };
    let (handle, control) = listener_control();
    let server = {
        let (t, stop) = (t.clone(), stop.clone());
        std::thread::spawn(move || serve_listeners(t, listeners, &opts, stop, Some(control)))
    };

    // The management API's listener_add / listener_remove, and
    // save_config's listen list, with no transport-specific code.
    let added = format!("loop:{ADDED}");
    add_listener(&t, &handle, &added).expect("listener_add");
    assert_eq!(
        current_config(&t).listen,
        [format!("loop:{LOCAL}"), added.clone()]
    );
    exchange(&net, ADDED);
    remove_listener(&t, &handle, &added).expect("listener_remove");
    assert_eq!(current_config(&t).listen, [format!("loop:{LOCAL}")]);

    exchange(&net, LOCAL);
    stop.store(true, Ordering::Release);
    server.join().expect("server thread").expect("served");
}
