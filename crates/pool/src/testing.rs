//! Test support: an in-memory device that records every write and flush
//! (the dm-log-writes method), and images rebuilt from any subset of the
//! log, so crash tests can open a pool from whatever a device could have
//! kept. The device can also hold requests, for tests of what waits for
//! what: flushes, everything a named thread asks (the pool's preparation
//! thread), and reads of one length, parked in their queue until
//! released (run then, so they see what the device holds then).

use farflash_backend::{
    Backend, BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest, SharedBackend,
};
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

const PAGE: u64 = 4096;
/// Sector size a torn write is cut at.
pub const SECTOR: u64 = 512;

/// One thing a device was asked to do.
#[derive(Debug, Clone)]
pub enum Op {
    Write { offset: u64, data: Arc<[u8]> },
    Zero { offset: u64, len: u64 },
    Flush,
}

/// Device content: 4 KiB pages, absent ones zero.
#[derive(Clone, Default)]
pub struct Image {
    pages: HashMap<u64, Box<[u8]>>,
}

impl Image {
    fn page(&mut self, p: u64) -> &mut [u8] {
        self.pages
            .entry(p)
            .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice())
    }

    /// Applies `op` whole.
    pub fn apply(&mut self, op: &Op) {
        self.apply_sectors(op, &mut |_| true);
    }

    /// Applies the 512-byte sectors of `op` that `keep` selects (by index
    /// within the op): a torn write.
    pub fn apply_sectors(&mut self, op: &Op, keep: &mut dyn FnMut(u64) -> bool) {
        match op {
            Op::Write { offset, data } => {
                for s in 0..(data.len() as u64).div_ceil(SECTOR) {
                    if keep(s) {
                        let at = offset + s * SECTOR;
                        let src = &data[(s * SECTOR) as usize
                            ..((s + 1) * SECTOR).min(data.len() as u64) as usize];
                        let pg = self.page(at / PAGE);
                        let o = (at % PAGE) as usize;
                        pg[o..o + src.len()].copy_from_slice(src);
                    }
                }
            }
            Op::Zero { offset, len } => {
                for s in 0..len.div_ceil(SECTOR) {
                    if keep(s) {
                        let at = offset + s * SECTOR;
                        if self.pages.contains_key(&(at / PAGE)) {
                            let o = (at % PAGE) as usize;
                            self.page(at / PAGE)[o..o + SECTOR as usize].fill(0);
                        }
                    }
                }
            }
            Op::Flush => {}
        }
    }

    /// The pages holding data: (byte offset, 4 KiB).
    pub fn pages(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.pages.iter().map(|(p, b)| (p * PAGE, &b[..]))
    }

    fn read(&self, offset: u64, out: &mut [u8]) {
        for (k, chunk) in out.chunks_mut(PAGE as usize).enumerate() {
            let at = offset + k as u64 * PAGE;
            match self.pages.get(&(at / PAGE)) {
                Some(pg) => chunk.copy_from_slice(&pg[..chunk.len()]),
                None => chunk.fill(0),
            }
        }
    }
}

/// A log several devices share, each entry tagged with its device.
type Log = Arc<Mutex<Vec<(usize, Op)>>>;

/// What the device holds back.
#[derive(Default)]
struct Gate {
    /// Requests executed on a thread of this name wait.
    thread: Option<String>,
    /// How many wait so.
    waiting: usize,
    /// Reads of this length are parked in their queue.
    park_len: Option<u32>,
    /// Reads parked so far, and how many of the first may run.
    parked: u64,
    released: u64,
}

struct Inner {
    /// While true, Flush requests wait (tests of what blocks on a flush).
    hold: Mutex<bool>,
    gate: Mutex<Gate>,
    gate_cv: std::sync::Condvar,
    released: std::sync::Condvar,
    size: u64,
    image: Mutex<Image>,
    log: Log,
    index: usize,
    record: bool,
    /// Reports itself as a block device (Write Zeroes zeroes in place).
    block: std::sync::atomic::AtomicBool,
}

/// An in-memory device (4 KiB blocks, synchronous, volatile cache).
#[derive(Clone)]
pub struct MemDevice(Arc<Inner>);

impl MemDevice {
    /// A zeroed device that records what it is asked to do.
    pub fn recording(size: u64) -> MemDevice {
        Self::with_image(size, Image::default(), true, Log::default(), 0)
    }

    /// Zeroed devices recording into one log, in order (a flush on one
    /// device does not flush the others).
    pub fn recording_group(sizes: &[u64]) -> Vec<MemDevice> {
        let log = Log::default();
        sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| Self::with_image(s, Image::default(), true, log.clone(), i))
            .collect()
    }

    /// A device holding `image` (not recording).
    pub fn from_image(size: u64, image: Image) -> MemDevice {
        Self::with_image(size, image, false, Log::default(), 0)
    }

    fn with_image(size: u64, image: Image, record: bool, log: Log, index: usize) -> MemDevice {
        MemDevice(Arc::new(Inner {
            hold: Mutex::new(false),
            released: std::sync::Condvar::new(),
            gate: Mutex::new(Gate::default()),
            gate_cv: std::sync::Condvar::new(),
            size,
            image: Mutex::new(image),
            log,
            index,
            record,
            block: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Reports the device as a block device (`kind() == "block"`) from
    /// now on, for a pool created or opened after.
    pub fn claim_block_device(&self) {
        self.0
            .block
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// This device's entries of the log so far.
    pub fn log(&self) -> Vec<Op> {
        let log = self.0.log.lock().unwrap_or_else(|p| p.into_inner());
        log.iter()
            .filter(|(d, _)| *d == self.0.index)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The whole (shared) log so far: (device index in its group, op).
    pub fn group_log(&self) -> Vec<(usize, Op)> {
        self.0.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Entries in the (shared) log so far.
    pub fn log_len(&self) -> usize {
        self.0.log.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The current content.
    pub fn image(&self) -> Image {
        self.0
            .image
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes Flush requests wait (`true`) until released (`false`).
    pub fn hold_flushes(&self, on: bool) {
        *self.0.hold.lock().unwrap_or_else(|p| p.into_inner()) = on;
        self.0.released.notify_all();
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.0.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes every request executed on a thread named `name` wait, until
    /// called with `None`.
    pub fn hold_thread(&self, name: Option<&str>) {
        self.gate().thread = name.map(str::to_owned);
        self.0.gate_cv.notify_all();
    }

    /// Requests waiting because of [`MemDevice::hold_thread`].
    pub fn held(&self) -> usize {
        self.gate().waiting
    }

    /// Parks reads of exactly `len` bytes in their queue (not run, not
    /// completed) from now on; `None` stops parking new ones.
    pub fn park_reads(&self, len: Option<u32>) {
        self.gate().park_len = len;
    }

    /// Reads parked so far.
    pub fn parked(&self) -> u64 {
        self.gate().parked
    }

    /// Lets the first `n` reads ever parked run and complete (at their
    /// queue's next reap).
    pub fn release_parked(&self, n: u64) {
        let mut g = self.gate();
        g.released = g.released.max(n);
    }

    /// Waits while the calling thread is held.
    fn wait_gate(&self) {
        let me = std::thread::current();
        let Some(name) = me.name() else { return };
        let mut g = self.gate();
        if g.thread.as_deref() != Some(name) {
            return;
        }
        g.waiting += 1;
        let mut g = self
            .0
            .gate_cv
            .wait_while(g, |g| g.thread.as_deref() == Some(name))
            .unwrap_or_else(|p| p.into_inner());
        g.waiting -= 1;
    }

    /// As a backend.
    pub fn backend(&self) -> SharedBackend {
        Arc::new(self.clone())
    }

    fn exec(&self, op: IoOp, buf: &mut IoBuf) -> io::Result<()> {
        self.wait_gate();
        let inner = &self.0;
        if matches!(op, IoOp::Flush) {
            let held = inner.hold.lock().unwrap_or_else(|p| p.into_inner());
            let wait = inner.released.wait_while(held, |h| *h);
            drop(wait.unwrap_or_else(|p| p.into_inner()));
        }
        let ok = |o: u64, l: u64| {
            o.is_multiple_of(PAGE)
                && l.is_multiple_of(PAGE)
                && o.checked_add(l).is_some_and(|e| e <= inner.size)
        };
        let mut img = inner.image.lock().unwrap_or_else(|p| p.into_inner());
        let mut ops = Vec::new();
        match op {
            IoOp::Read { offset, len } => {
                if !ok(offset, len.into()) || len as usize > buf.capacity() {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                buf.set_len(len as usize);
                img.read(offset, buf);
                return Ok(());
            }
            IoOp::Write { offset, len, fua } => {
                if !ok(offset, len.into()) || len as usize > buf.len() {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                ops.push(Op::Write {
                    offset,
                    data: Arc::from(&buf[..len as usize]),
                });
                if fua {
                    ops.push(Op::Flush);
                }
            }
            IoOp::Flush => ops.push(Op::Flush),
            IoOp::CompareAndWrite { .. } => {
                return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
            }
            IoOp::WriteZeroes { offset, len, .. } => {
                if !ok(offset, len) {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                ops.push(Op::Zero { offset, len });
            }
            IoOp::Deallocate { ranges } => {
                for i in 0..ranges as usize {
                    let e = buf
                        .get(i * 16..i * 16 + 16)
                        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
                    let o = u64::from_ne_bytes(e[..8].try_into().unwrap_or([0; 8]));
                    let l = u64::from_ne_bytes(e[8..].try_into().unwrap_or([0; 8]));
                    if !ok(o, l) {
                        return Err(io::Error::from_raw_os_error(libc::EINVAL));
                    }
                    ops.push(Op::Zero { offset: o, len: l });
                }
            }
        }
        for o in &ops {
            img.apply(o);
        }
        if inner.record {
            let i = inner.index;
            let mut log = inner.log.lock().unwrap_or_else(|p| p.into_inner());
            log.extend(ops.into_iter().map(|o| (i, o)));
        }
        Ok(())
    }
}

impl Backend for MemDevice {
    fn kind(&self) -> &'static str {
        match self.0.block.load(std::sync::atomic::Ordering::SeqCst) {
            true => "block",
            false => "mem",
        }
    }
    fn capacity(&self) -> u64 {
        self.0.size
    }
    fn block_size(&self) -> u32 {
        PAGE as u32
    }
    fn volatile_write_cache(&self) -> bool {
        true
    }
    fn open_queue(&self, _depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        Ok(Box::new(MemQueue {
            dev: self.clone(),
            done: Vec::new(),
            parked: Vec::new(),
        }))
    }
    fn sync_all(&self) -> io::Result<()> {
        let mut b = IoBuf::with_capacity(0);
        self.exec(IoOp::Flush, &mut b)
    }
}

struct MemQueue {
    dev: MemDevice,
    done: Vec<IoCompletion>,
    /// Parked reads, by parking order.
    parked: Vec<(u64, IoRequest)>,
}

impl MemQueue {
    /// Runs the parked reads released meanwhile.
    fn run_released(&mut self) {
        if self.parked.is_empty() {
            return;
        }
        let released = self.dev.gate().released;
        let mut i = 0;
        while i < self.parked.len() {
            if self.parked[i].0 < released {
                let (_, IoRequest { tag, op, mut buf }) = self.parked.remove(i);
                let result = self.dev.exec(op, &mut buf);
                self.done.push(IoCompletion { tag, buf, result });
            } else {
                i += 1;
            }
        }
    }
}

impl BackendQueue for MemQueue {
    fn submit(&mut self, req: IoRequest) {
        if let IoOp::Read { len, .. } = req.op {
            let mut g = self.dev.gate();
            if g.park_len == Some(len) {
                let seq = g.parked;
                g.parked += 1;
                drop(g);
                self.parked.push((seq, req));
                return;
            }
        }
        let IoRequest { tag, op, mut buf } = req;
        let result = self.dev.exec(op, &mut buf);
        self.done.push(IoCompletion { tag, buf, result });
    }
    fn commit(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        self.run_released();
        let n = self.done.len();
        out.append(&mut self.done);
        n
    }
    fn notify_fd(&self) -> Option<RawFd> {
        None
    }
    fn in_flight(&self) -> usize {
        self.done.len() + self.parked.len()
    }
}

/// Runs one request on `q` (any backend queue) and waits for it.
pub fn run(q: &mut dyn BackendQueue, op: IoOp, buf: IoBuf) -> io::Result<IoBuf> {
    crate::dev::run_one(q, op, buf)
}
