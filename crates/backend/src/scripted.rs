//! A scripted backend for tests (feature `testing`): memory-backed, whose
//! completions a test can hold back, reorder, delay or fail, so that the
//! layers above can be tested against out-of-order, late and failed
//! completions without io_uring.
//!
//! The test keeps the [`Script`] returned by [`open_scripted`] and changes it
//! at any time (it is shared with every queue of the backend). Delayed or
//! held completions make the queue's notification fd (a timerfd) readable
//! when they are due, so an event loop sleeping in epoll wakes up for them.

use crate::check::Geometry;
use crate::{Backend, BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest, SharedBackend};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Which operation a script rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    Flush,
    WriteZeroes,
    Deallocate,
    CompareAndWrite,
}

impl OpKind {
    pub fn of(op: &IoOp) -> OpKind {
        match op {
            IoOp::Read { .. } => OpKind::Read,
            IoOp::Write { .. } => OpKind::Write,
            IoOp::Flush => OpKind::Flush,
            IoOp::WriteZeroes { .. } => OpKind::WriteZeroes,
            IoOp::Deallocate { .. } => OpKind::Deallocate,
            IoOp::CompareAndWrite { .. } => OpKind::CompareAndWrite,
        }
    }
}

#[derive(Default)]
struct Rules {
    delays: Vec<(OpKind, Duration)>,
    /// (kind, errno, how many more requests fail).
    failures: Vec<(OpKind, i32, u32)>,
    hold: bool,
    reverse: bool,
    submitted: Vec<OpKind>,
    /// [`Backend::compare_and_write_unit`]: `None` (default), not offered.
    cmpxchg_unit: Option<u32>,
}

/// What a test controls.
#[derive(Default)]
pub struct Script {
    rules: Mutex<Rules>,
}

impl Script {
    fn rules(&self) -> MutexGuard<'_, Rules> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Requests of `kind` complete no earlier than `d` after submission.
    pub fn delay(&self, kind: OpKind, d: Duration) {
        let mut r = self.rules();
        r.delays.retain(|&(k, _)| k != kind);
        r.delays.push((kind, d));
    }
    /// The next `count` requests of `kind` fail with `errno` (no data moves).
    pub fn fail(&self, kind: OpKind, errno: i32, count: u32) {
        self.rules().failures.push((kind, errno, count));
    }
    /// While held, no completion is handed out.
    pub fn hold(&self, on: bool) {
        self.rules().hold = on;
    }
    /// Hand out each batch of ready completions newest first.
    pub fn reverse(&self, on: bool) {
        self.rules().reverse = on;
    }
    /// Offers [`IoOp::CompareAndWrite`] inside `unit` bytes (as an RBD
    /// image does), or not (`None`, the default).
    pub fn offer_compare_and_write(&self, unit: Option<u32>) {
        self.rules().cmpxchg_unit = unit;
    }
    /// The operations submitted so far, in order.
    pub fn submitted(&self) -> Vec<OpKind> {
        self.rules().submitted.clone()
    }
}

struct Inner {
    geometry: Geometry,
    data: Mutex<Vec<u8>>,
    script: Arc<Script>,
}

/// The backend; its queues share its [`Inner`].
struct Scripted(Arc<Inner>);

/// A scripted backend of `capacity` bytes (zeroed) and its script.
pub fn open_scripted(capacity: u64, block_size: u32) -> (SharedBackend, Arc<Script>) {
    let script = Arc::new(Script::default());
    let b = Scripted(Arc::new(Inner {
        geometry: Geometry {
            capacity,
            block_size,
            read_only: false,
        },
        data: Mutex::new(vec![0; capacity as usize]),
        script: script.clone(),
    }));
    (Arc::new(b), script)
}

impl Inner {
    fn run(&self, op: IoOp, buf: &mut IoBuf) -> io::Result<()> {
        match self.script.rules().cmpxchg_unit {
            Some(u) => (self.geometry).validate_compare_and_write(&op, buf, u.into())?,
            None => self.geometry.validate(&op, buf)?,
        }
        let mut d = self.data.lock().unwrap_or_else(|p| p.into_inner());
        match op {
            IoOp::Read { offset, len } => {
                buf.set_len(len as usize);
                let o = offset as usize;
                buf.as_mut_slice().copy_from_slice(&d[o..o + len as usize]);
            }
            IoOp::Write { offset, len, .. } => {
                let o = offset as usize;
                d[o..o + len as usize].copy_from_slice(&buf.as_slice()[..len as usize]);
            }
            IoOp::WriteZeroes { offset, len, .. } => {
                d[offset as usize..(offset + len) as usize].fill(0);
            }
            IoOp::Deallocate { ranges } => {
                for i in 0..ranges {
                    let (o, l) = crate::check::dealloc_range(buf, i);
                    d[o as usize..(o + l) as usize].fill(0);
                }
            }
            IoOp::Flush => {}
            IoOp::CompareAndWrite { offset, len, .. } => {
                let (o, n) = (offset as usize, len as usize);
                if d[o..o + n] != buf.as_slice()[..n] {
                    // librbd's answer to a miscompare.
                    return Err(io::Error::from_raw_os_error(libc::EILSEQ));
                }
                d[o..o + n].copy_from_slice(&buf.as_slice()[n..2 * n]);
            }
        }
        Ok(())
    }
}

impl Backend for Scripted {
    fn kind(&self) -> &'static str {
        "scripted"
    }
    fn capacity(&self) -> u64 {
        self.0.geometry.capacity
    }
    fn block_size(&self) -> u32 {
        self.0.geometry.block_size
    }
    fn volatile_write_cache(&self) -> bool {
        true
    }
    fn open_queue(&self, _depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        // SAFETY: timerfd_create has no memory arguments; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let timer = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Box::new(ScriptedQueue {
            inner: self.0.clone(),
            pending: Vec::new(),
            timer,
        }))
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn compare_and_write_unit(&self) -> Option<u32> {
        self.0.script.rules().cmpxchg_unit
    }
}

/// A queue on a [`Scripted`] backend.
struct ScriptedQueue {
    inner: Arc<Inner>,
    pending: Vec<(Instant, IoCompletion)>,
    timer: OwnedFd,
}

impl ScriptedQueue {
    /// Arms the timerfd to fire after `d` (at least 1 µs: zero disarms).
    fn arm(&self, d: Duration) {
        let d = d.max(Duration::from_micros(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old value is not requested.
        unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }

    fn clear(&self) {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into `n`; the fd is non-blocking (EAGAIN when not expired).
        unsafe { libc::read(self.timer.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

impl BackendQueue for ScriptedQueue {
    fn submit(&mut self, req: IoRequest) {
        let IoRequest { tag, op, mut buf } = req;
        let kind = OpKind::of(&op);
        let (delay, failure) = {
            let mut r = self.inner.script.rules();
            r.submitted.push(kind);
            let delay = r
                .delays
                .iter()
                .find(|&&(k, _)| k == kind)
                .map_or(Duration::ZERO, |&(_, d)| d);
            let mut failure = None;
            if let Some(f) = r.failures.iter_mut().find(|f| f.0 == kind && f.2 > 0) {
                f.2 -= 1;
                failure = Some(f.1);
            }
            (delay, failure)
        };
        let result = match failure {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => self.inner.run(op, &mut buf),
        };
        let due = Instant::now() + delay;
        if delay > Duration::ZERO {
            self.arm(delay);
        }
        self.pending.push((due, IoCompletion { tag, buf, result }));
    }

    fn commit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        self.clear();
        let (hold, reverse) = {
            let r = self.inner.script.rules();
            (r.hold, r.reverse)
        };
        if hold {
            if !self.pending.is_empty() {
                // Look again soon: the test may release them from another thread.
                self.arm(Duration::from_millis(1));
            }
            return 0;
        }
        let now = Instant::now();
        let start = out.len();
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].0 <= now {
                out.push(self.pending.remove(i).1);
            } else {
                i += 1;
            }
        }
        if reverse {
            out[start..].reverse();
        }
        if let Some(next) = self.pending.iter().map(|p| p.0).min() {
            self.arm(next.saturating_duration_since(now));
        }
        out.len() - start
    }

    fn notify_fd(&self) -> Option<RawFd> {
        Some(self.timer.as_raw_fd())
    }

    fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(tag: u64, op: IoOp, data: &[u8]) -> IoRequest {
        let mut buf = IoBuf::with_capacity(4096);
        buf.set_len(data.len());
        buf.as_mut_slice().copy_from_slice(data);
        IoRequest { tag, op, buf }
    }

    #[test]
    fn holds_reverses_fails_and_delays() {
        let (b, script) = open_scripted(1 << 16, 512);
        let mut q = b.open_queue(4).unwrap();
        let mut out = Vec::new();
        script.hold(true);
        script.reverse(true);
        script.fail(OpKind::Write, libc::EIO, 1);
        let w = |off| IoOp::Write {
            offset: off,
            len: 512,
            fua: false,
        };
        q.submit(req(1, w(0), &[1; 512]));
        q.submit(req(2, w(512), &[2; 512]));
        assert_eq!(q.reap(&mut out), 0, "held");
        script.hold(false);
        assert_eq!(q.reap(&mut out), 2);
        assert_eq!(out[0].tag, 2, "newest first");
        assert!(out[0].result.is_ok());
        assert_eq!(
            out[1].result.as_ref().unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        out.clear();
        script.delay(OpKind::Read, Duration::from_millis(30));
        let t0 = Instant::now();
        q.submit(req(
            3,
            IoOp::Read {
                offset: 512,
                len: 512,
            },
            &[],
        ));
        while q.reap(&mut out) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert_eq!(
            out[0].buf.as_slice(),
            &[2; 512][..],
            "the write that succeeded"
        );
        assert_eq!(
            script.submitted(),
            [OpKind::Write, OpKind::Write, OpKind::Read]
        );
    }
}
