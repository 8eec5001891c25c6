//! Moving a [`QueuePair`]'s bytes over a non-blocking `TcpStream`: all
//! queued PDUs go out in one `writev`; received bytes are fed to the state
//! machine, large C2HData payloads straight into the read's buffer.
//! Every wait is bounded by a deadline (`poll(2)`).
//!
//! With TLS (TCP §3.6.1), the same loop carries records: the handshake
//! runs before the ICReq, PDUs are encrypted into the session's output and
//! that is written in one `write`, received ciphertext is decrypted into
//! the state machine ([`crate::tls`]). One branch on each path; no thread.

use crate::error::{HostError, Result, TransportError};
use crate::queue::{QueueConfig, QueuePair};
use crate::slot::Completion;
use crate::tls::{ClientSession, TlsLink};
use crate::transport::Napped;
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Bytes staged per `recv` when not receiving directly into a slot buffer.
const STAGING: usize = 64 * 1024;
/// Payload left in a C2HData above which we `recv` straight into the slot buffer.
const DIRECT_MIN: usize = 8 * 1024;
/// Iovecs per `writev`.
const IOV_BATCH: usize = 64;

/// One NVMe/TCP connection: a socket and its queue-pair state machine.
pub struct Conn {
    stream: TcpStream,
    pub qp: QueuePair,
    staging: Vec<u8>,
    tls: Option<Box<TlsLink>>,
}

/// Resolves `addr` (`host:port`), loopback or otherwise, to socket addresses.
pub fn resolve(addr: &str) -> Result<Vec<SocketAddr>> {
    let v: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| HostError::Invalid(format!("address {addr:?}: {e}")))?
        .collect();
    if v.is_empty() {
        return Err(HostError::Invalid(format!(
            "address {addr:?} resolves to nothing"
        )));
    }
    Ok(v)
}

impl Conn {
    /// Connects, runs the TLS handshake when given a session, sends the
    /// ICReq and waits for a valid ICResp.
    pub fn open(
        addr: &str,
        cfg: QueueConfig,
        connect_timeout: Duration,
        timeout: Duration,
        tls: Option<ClientSession>,
    ) -> Result<Conn> {
        let mut last = None;
        let mut stream = None;
        for a in resolve(addr)? {
            match TcpStream::connect_timeout(&a, connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match stream {
            Some(s) => s,
            None => {
                return Err(last
                    .unwrap_or_else(|| io::Error::other("no address to connect to"))
                    .into())
            }
        };
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        let mut c = Conn {
            stream,
            qp: QueuePair::new(cfg),
            staging: vec![0; STAGING],
            tls: tls.map(|t| Box::new(TlsLink::new(t))),
        };
        c.handshake()?;
        let deadline = Instant::now() + timeout;
        while !c.qp.is_ready() {
            c.flush()?;
            c.wait_io(deadline, "ICResp")?;
            c.recv()?;
        }
        Ok(c)
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// The TLS handshake, bounded by its timeout; nothing to do without TLS.
    fn handshake(&mut self) -> Result<()> {
        let Some(timeout) = self.tls.as_deref().map(TlsLink::handshake_timeout) else {
            return Ok(());
        };
        let deadline = Instant::now() + timeout;
        let handshaking = |c: &Conn| c.tls.as_deref().is_some_and(TlsLink::is_handshaking);
        while handshaking(self) {
            self.flush()?;
            let r = self
                .wait_io(deadline, "the TLS handshake")
                .and_then(|_| self.recv());
            match (r, self.tls.as_deref()) {
                (Err(HostError::Timeout(_)), Some(t)) => return Err(t.stalled()),
                (Err(HostError::Transport(TransportError::Closed) | HostError::Io(_)), Some(t))
                    if t.is_handshaking() =>
                {
                    return Err(t.closed())
                }
                (r, _) => r?,
            };
        }
        self.flush()?;
        Ok(())
    }

    /// TLS: encrypts what is queued and writes the records (one `write`
    /// of the session's output at a time).
    fn flush_tls(&mut self) -> Result<bool> {
        let Some(t) = self.tls.as_deref_mut() else {
            return Ok(true);
        };
        loop {
            t.encrypt(&mut self.qp)?;
            let c = t.ciphertext();
            if c.is_empty() {
                return Ok(self.qp.tx_pending() == 0);
            }
            match (&self.stream).write(c) {
                Ok(0) => return Err(HostError::Transport(self.qp.closed())),
                Ok(w) => t.sent(w),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Bytes (plaintext PDUs or ciphertext) still to be written.
    fn out_pending(&self) -> bool {
        match self.tls.as_deref() {
            None => self.qp.tx_pending() > 0,
            Some(t) => t.wants_write(self.qp.tx_pending()),
        }
    }

    /// Writes as much of the queued bytes as the socket takes now, in
    /// `writev` batches. Returns true when everything was sent.
    pub fn flush(&mut self) -> Result<bool> {
        if self.tls.is_some() {
            return self.flush_tls();
        }
        while self.qp.tx_pending() > 0 {
            let mut iov = [IoSlice::new(&[]); IOV_BATCH];
            let n = self.qp.tx_iovecs(&mut iov);
            match (&self.stream).write_vectored(&iov[..n]) {
                Ok(0) => return Err(HostError::Transport(self.qp.closed())),
                Ok(w) => self.qp.tx_advance(w),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// One non-blocking receive; returns the bytes taken (0 when nothing was waiting).
    pub fn recv(&mut self) -> Result<usize> {
        self.recv_once().map(|(n, _)| n)
    }

    /// One non-blocking receive: (bytes taken, whether the read came back
    /// short, i.e. the socket is probably drained).
    fn recv_once(&mut self) -> Result<(usize, bool)> {
        if let Some(t) = self.tls.as_deref_mut() {
            return match (&self.stream).read(&mut self.staging) {
                Ok(0) => Err(HostError::Transport(self.qp.closed())),
                Ok(n) => {
                    t.receive(&self.staging[..n], &mut self.qp)?;
                    Ok((n, n < self.staging.len()))
                }
                Err(e) => self.recv_error(e).map(|n| (n, true)),
            };
        }
        if let Some(dst) = self.qp.rx_direct() {
            if dst.len() >= DIRECT_MIN {
                let want = dst.len();
                return match (&self.stream).read(dst) {
                    Ok(0) => Err(HostError::Transport(self.qp.closed())),
                    Ok(n) => {
                        self.qp.rx_direct_done(n);
                        Ok((n, n < want))
                    }
                    Err(e) => self.recv_error(e).map(|n| (n, true)),
                };
            }
        }
        match (&self.stream).read(&mut self.staging) {
            Ok(0) => Err(HostError::Transport(self.qp.closed())),
            Ok(n) => {
                self.qp.rx_feed(&self.staging[..n])?;
                Ok((n, n < self.staging.len()))
            }
            Err(e) => self.recv_error(e).map(|n| (n, true)),
        }
    }

    fn recv_error(&mut self, e: io::Error) -> Result<usize> {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
                Err(HostError::Transport(self.qp.closed()))
            }
            _ => Err(e.into()),
        }
    }

    /// Receives what is waiting (bounded number of reads). Stops after a
    /// short read rather than paying one more `recv` just to see EAGAIN.
    pub fn recv_all(&mut self) -> Result<usize> {
        let mut total = 0;
        for _ in 0..64 {
            let (n, drained) = self.recv_once()?;
            total += n;
            if drained {
                break;
            }
        }
        Ok(total)
    }

    /// Sleeps until the socket is readable (or writable while bytes are
    /// queued), at most until `deadline`. `what` names the wait in the
    /// timeout error.
    pub fn wait_io(&mut self, deadline: Instant, what: &'static str) -> Result<()> {
        let now = Instant::now();
        if now >= deadline {
            return Err(HostError::Timeout(what));
        }
        let ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
        self.poll_fd(ms)?;
        Ok(())
    }

    /// Whether a `recv` would find data (or the peer's close): `poll(2)`
    /// with no wait. Unlike an empty `recv`, it does not take the socket
    /// lock, which the peer's loopback transmit needs to deliver into this
    /// socket: a busy-polling host that spins on `recv` slows its target.
    pub fn readable(&self) -> Result<bool> {
        self.poll_events(libc::POLLIN, 0)
    }

    /// `poll(2)` on the socket for up to `ms` milliseconds; true when ready.
    pub fn poll_fd(&self, ms: i32) -> Result<bool> {
        let mut events = libc::POLLIN;
        if self.out_pending() {
            events |= libc::POLLOUT;
        }
        self.poll_events(events, ms)
    }

    /// `poll(2)` on the socket for `events`, up to `ms` milliseconds; true
    /// when one of them (or an error or hang-up) is reported.
    fn poll_events(&self, events: libc::c_short, ms: i32) -> Result<bool> {
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: `p` is one valid, initialized pollfd that outlives the call,
        // and we pass a count of exactly 1.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e.into());
        }
        Ok(r > 0)
    }

    /// `ppoll(2)` on the socket for `events`, up to `timeout` (nanosecond
    /// resolution); true when one of them (or an error or hang-up) is
    /// reported.
    fn ppoll_events(&self, events: libc::c_short, timeout: Duration) -> Result<bool> {
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `p` is one valid pollfd and `ts` a valid timespec, both
        // outliving the call; no signal mask is passed (null).
        let r = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e.into());
        }
        Ok(r > 0)
    }

    /// Best effort: sends what is queued (e.g. an H2CTermReq) within
    /// `timeout`, then shuts the socket down.
    pub fn close(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        if let Some(t) = self.tls.as_deref_mut() {
            t.close();
        }
        while self.out_pending() {
            match self.flush() {
                Ok(true) | Err(_) => break,
                Ok(false) => {
                    if self.wait_io(deadline, "close").is_err() {
                        break;
                    }
                }
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// The transport error that killed this connection, if any.
    pub fn dead(&self) -> Option<&TransportError> {
        self.qp.dead()
    }
}

impl crate::transport::HostTransport for Conn {
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
    fn ensure_buf(&mut self, cid: u16, len: usize) -> Result<()> {
        self.qp.ensure_buf(cid, len)
    }
    fn submit(
        &mut self,
        cid: u16,
        sqe: farflash_wire::Sqe,
        dir: crate::slot::DataDir,
        len: u32,
    ) -> Result<()> {
        self.qp.submit(cid, sqe, dir, len)
    }
    fn send_queued(&mut self) -> Result<bool> {
        self.flush()
    }
    /// One `writev` batch of what is queued, then `recv` only when
    /// `poll(2)` says something is waiting (see [`Conn::readable`]).
    fn progress(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        self.flush()?;
        if self.readable()? {
            self.recv_all()?;
        }
        self.qp.take_completions(out);
        Ok(())
    }
    fn wait_ready(&mut self, ms: i32) -> Result<()> {
        self.poll_fd(ms).map(|_| ())
    }
    /// One `writev` of what is queued, one `poll(2)` that sleeps, and the
    /// `recv`s it announced: no second `poll` to ask what the first one said.
    fn wait_progress(&mut self, ms: i32, out: &mut Vec<Completion>) -> Result<()> {
        self.flush()?;
        if self.poll_fd(ms)? {
            self.recv_all()?;
        }
        self.qp.take_completions(out);
        Ok(())
    }
    /// One `writev`, one `ppoll(2)` with a nanosecond timeout (the
    /// caller's timer slack decides how precise), the `recv`s it announced.
    fn nap_progress(&mut self, timeout: Duration, out: &mut Vec<Completion>) -> Result<Napped> {
        self.flush()?;
        let mut events = libc::POLLIN;
        if self.out_pending() {
            events |= libc::POLLOUT;
        }
        let woken = self.ppoll_events(events, timeout)?;
        if woken {
            self.recv_all()?;
        }
        self.qp.take_completions(out);
        Ok(if woken {
            Napped::Woken
        } else {
            Napped::Timeout
        })
    }
    fn close(&mut self, timeout: Duration) {
        Conn::close(self, timeout)
    }
    fn maxh2cdata(&self) -> u32 {
        self.qp.maxh2cdata()
    }
}
