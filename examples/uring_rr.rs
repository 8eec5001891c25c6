//! The `tcp_rr` server (../shared/limits/tcp_rr.c) rebuilt on io_uring, to
//! measure whether io_uring sockets would beat the engine's busy-polled
//! `recv` + `writev` here (benches/uring-vs-epoll.sh, docs/performance.md).
//! For every REQ-byte request it sends a RESP-byte response, batched per
//! receive like `tcp_rr`; after each receive, the response's send and the
//! next receive go to the kernel in one `io_uring_enter`, and completions
//! are busy-polled with `io_uring_enter(GETEVENTS)` on a ring set up with
//! DEFER_TASKRUN and SINGLE_ISSUER (completions run in that call, no IPI to
//! the spinning thread), so a round trip costs the server one system call
//! instead of two.
//!
//! cargo run --release --example uring_rr -- PORT REQ RESP

use io_uring::{opcode, types, IoUring};
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

const RECV: u64 = 1;
const SEND: u64 = 2;
/// IORING_ENTER_GETEVENTS.
const GETEVENTS: u32 = 1;

/// Requests in the ring, so that nothing is left pointing at our buffers.
struct Ring {
    ring: IoUring,
    in_flight: usize,
}

impl Ring {
    /// Queues `e`; the buffers it names must stay alive until its completion
    /// has been reaped (the caller's contract, see `serve`).
    fn push(&mut self, e: &io_uring::squeue::Entry) -> io::Result<()> {
        // SAFETY: the entry's buffers outlive its completion: `serve` owns
        // them and reaps every request before it returns or frees them.
        unsafe { self.ring.submission().push(e) }.map_err(io::Error::other)?;
        self.in_flight += 1;
        Ok(())
    }

    /// One `io_uring_enter` (submit what is queued, wait for `want`
    /// completions), then the completions reaped into `done`; returns how many.
    fn enter(&mut self, want: usize, done: &mut [(u64, i32); 4]) -> io::Result<usize> {
        let queued = self.ring.submission().len() as u32;
        // SAFETY: a plain io_uring_enter on our own ring, no argument struct;
        // GETEVENTS also runs the deferred task work that posts completions.
        unsafe {
            self.ring
                .submitter()
                .enter::<()>(queued, want as u32, GETEVENTS, None)?;
        }
        let mut n = 0;
        for e in self.ring.completion().take(done.len()) {
            done[n] = (e.user_data(), e.result());
            n += 1;
        }
        self.in_flight -= n;
        Ok(n)
    }
}

fn run(
    r: &mut Ring,
    fd: types::Fd,
    inbuf: &mut [u8],
    out: &[u8],
    req: usize,
    resp: usize,
) -> io::Result<()> {
    let (mut have, mut owed, mut sending) = (0usize, 0usize, 0usize);
    let mut done = [(0u64, 0i32); 4];
    let recv = opcode::Recv::new(fd, inbuf.as_mut_ptr(), inbuf.len() as u32)
        .build()
        .user_data(RECV);
    r.push(&recv)?;
    loop {
        let got = r.enter(0, &mut done)?;
        for &(tag, res) in &done[..got] {
            if res < 0 {
                return Err(io::Error::from_raw_os_error(-res));
            }
            let n = res as usize;
            if tag == SEND {
                sending -= n.min(sending);
                owed = owed.saturating_sub(n);
            } else {
                if n == 0 {
                    return Ok(());
                }
                have += n;
                owed += have / req * resp;
                have %= req;
                r.push(&recv)?;
            }
        }
        if sending == 0 && owed > 0 {
            let k = owed.min(out.len());
            let send = opcode::Send::new(fd, out.as_ptr(), k as u32)
                .build()
                .user_data(SEND);
            r.push(&send)?;
            sending = k;
        }
    }
}

fn serve(c: &TcpStream, req: usize, resp: usize) -> io::Result<()> {
    c.set_nodelay(true)?;
    let mut inbuf = vec![0u8; 4 << 20];
    let out = vec![0u8; 256 * resp.max(req)];
    let mut r = Ring {
        // Completions are only posted when this thread enters the kernel
        // (no IPI to a spinning thread), by this thread alone.
        ring: IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(8)?,
        in_flight: 0,
    };
    let res = run(
        &mut r,
        types::Fd(c.as_raw_fd()),
        &mut inbuf,
        &out,
        req,
        resp,
    );
    // Reap what is still in flight before the buffers go: shutting the
    // socket down completes a pending Recv (0) and fails a pending Send.
    let _ = c.shutdown(std::net::Shutdown::Both);
    let mut done = [(0u64, 0i32); 4];
    while r.in_flight > 0 {
        if r.enter(1, &mut done).is_err() {
            // Cannot tell when the kernel is done with them: leak, not free.
            std::mem::forget(inbuf);
            std::mem::forget(out);
            break;
        }
    }
    res
}

fn main() -> io::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 {
        eprintln!("usage: uring_rr PORT REQ RESP");
        std::process::exit(2);
    }
    let parse = |s: &str| {
        s.parse::<usize>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (req, resp) = (parse(&a[2])?.max(1), parse(&a[3])?.max(1));
    let l = TcpListener::bind(("127.0.0.1", parse(&a[1])? as u16))?;
    for c in l.incoming() {
        if let Err(e) = serve(&c?, req, resp) {
            eprintln!("uring_rr: {e}");
        }
    }
    Ok(())
}
