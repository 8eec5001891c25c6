//! The pool's devices and their layout.
//!
//! Every byte the pool writes, data and metadata, goes through a device's
//! [`SharedBackend`]: production pools open files and block devices with
//! farflash-backend's io_uring engine, and the crash tests put a recorder
//! in their place ([`crate::testing`]). Metadata and cluster preparation
//! use [`Devices::run`], which waits for one request; a volume's data path
//! opens queues of its own.

use crate::format::BLOCK;
use farflash_backend::{
    Backend, BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest, SharedBackend,
};
use std::cell::RefCell;
use std::io;
use std::sync::{Arc, Weak};

/// One device: its backend and where its clusters are.
pub(crate) struct Dev {
    pub(crate) backend: SharedBackend,
    /// Byte offset of the device's first cluster.
    pub(crate) data_start: u64,
    /// First global cluster number on this device, and how many.
    pub(crate) first: u64,
    pub(crate) clusters: u64,
    /// A block device: Write Zeroes zeroes its blocks in place (with the
    /// device's own command where it has one), where on a file it leaves
    /// unwritten extents that later writes must convert.
    zeroes_in_place: bool,
}

/// The devices of a pool, in index order.
pub(crate) struct Devices {
    pub(crate) devs: Vec<Dev>,
    pub(crate) cluster_size: u64,
    pub(crate) total: u64,
}

impl Devices {
    /// Lays out `backends` (index order) with device 0's metadata ending
    /// at `meta_end` bytes; others keep only their two label blocks.
    pub(crate) fn new(backends: Vec<SharedBackend>, cluster_size: u64, meta_end: u64) -> Self {
        let mut devs = Vec::with_capacity(backends.len());
        let mut first = 0;
        for (i, backend) in backends.into_iter().enumerate() {
            let reserved = if i == 0 { meta_end } else { 2 * BLOCK as u64 };
            let data_start = reserved.next_multiple_of(cluster_size);
            let clusters = backend.capacity().saturating_sub(data_start) / cluster_size;
            devs.push(Dev {
                zeroes_in_place: backend.kind() == "block",
                backend,
                data_start,
                first,
                clusters,
            });
            first += clusters;
        }
        Devices {
            devs,
            cluster_size,
            total: first,
        }
    }

    /// The device and byte offset of physical cluster `phys`.
    pub(crate) fn locate(&self, phys: u64) -> Option<(usize, u64)> {
        self.devs.iter().enumerate().find_map(|(i, d)| {
            (phys >= d.first && phys - d.first < d.clusters)
                .then(|| (i, d.data_start + (phys - d.first) * self.cluster_size))
        })
    }

    /// Whether Write Zeroes on device `dev` zeroes in place (a block
    /// device), rather than leaving blocks to be converted later (a file).
    pub(crate) fn zeroes_in_place(&self, dev: usize) -> bool {
        self.devs.get(dev).is_some_and(|d| d.zeroes_in_place)
    }

    /// Runs one request on device `dev` and waits for it (the pool's slow
    /// path: metadata, cluster preparation), on this thread's queue for
    /// the device (queues belong to a thread).
    pub(crate) fn run(&self, dev: usize, op: IoOp, buf: IoBuf) -> io::Result<IoBuf> {
        let d = self
            .devs
            .get(dev)
            .ok_or_else(|| io::Error::other("no such device"))?;
        with_queue(&d.backend, |q| run_one(q, op, buf))
    }

    /// Reads `len` bytes at `offset` of device `dev`.
    pub(crate) fn read(&self, dev: usize, offset: u64, len: usize) -> io::Result<IoBuf> {
        let len32 = u32::try_from(len).map_err(|_| io::Error::other("read too large"))?;
        self.run(
            dev,
            IoOp::Read { offset, len: len32 },
            IoBuf::with_capacity(len),
        )
    }

    /// Writes `buf` at `offset` of device `dev`.
    pub(crate) fn write(&self, dev: usize, offset: u64, buf: IoBuf) -> io::Result<IoBuf> {
        let len = u32::try_from(buf.len()).map_err(|_| io::Error::other("write too large"))?;
        self.run(
            dev,
            IoOp::Write {
                offset,
                len,
                fua: false,
            },
            buf,
        )
    }

    /// Makes `len` bytes at `offset` of device `dev` read back as zeroes.
    pub(crate) fn zero(&self, dev: usize, offset: u64, len: u64) -> io::Result<()> {
        let op = IoOp::WriteZeroes {
            offset,
            len,
            fua: false,
        };
        self.run(dev, op, IoBuf::with_capacity(0)).map(drop)
    }

    /// Flushes every device.
    pub(crate) fn flush_all(&self) -> io::Result<()> {
        (0..self.devs.len())
            .try_for_each(|i| self.run(i, IoOp::Flush, IoBuf::with_capacity(0)).map(drop))
    }
}

/// A device (while it lives) and this thread's queue on it.
type Held = (Weak<dyn Backend>, Box<dyn BackendQueue>);

thread_local! {
    /// This thread's slow-path queues, by device; a dead device's queue
    /// goes at the next lookup.
    static QUEUES: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's queue for `backend` (opened on first use).
fn with_queue<T>(
    backend: &SharedBackend,
    f: impl FnOnce(&mut dyn BackendQueue) -> io::Result<T>,
) -> io::Result<T> {
    let taken = QUEUES.with(|qs| {
        let mut qs = qs.borrow_mut();
        qs.retain(|(w, _)| w.strong_count() > 0);
        let i = qs
            .iter()
            .position(|(w, _)| w.upgrade().is_some_and(|b| Arc::ptr_eq(&b, backend)))?;
        Some(qs.swap_remove(i).1)
    });
    // Taken out while in use, so a nested call (none today) would open
    // its own rather than find it borrowed.
    let mut q = match taken {
        Some(q) => q,
        None => backend.open_queue(2)?,
    };
    let r = f(q.as_mut());
    if r.is_ok() && q.in_flight() == 0 {
        QUEUES.with(|qs| qs.borrow_mut().push((Arc::downgrade(backend), q)));
    }
    r
}

/// Submits one request and waits for its completion.
pub(crate) fn run_one(q: &mut dyn BackendQueue, op: IoOp, buf: IoBuf) -> io::Result<IoBuf> {
    const TAG: u64 = 0x5051_4f4f_4c00_0001;
    q.submit(IoRequest { tag: TAG, op, buf });
    q.commit()?;
    let mut out: Vec<IoCompletion> = Vec::with_capacity(1);
    loop {
        q.reap(&mut out);
        if let Some(i) = out.iter().position(|c| c.tag == TAG) {
            let c = out.swap_remove(i);
            return c.result.map(|()| c.buf);
        }
        match q.notify_fd() {
            Some(fd) => wait_readable(fd),
            None if q.in_flight() == 0 => {
                return Err(io::Error::other("request lost by the device queue"))
            }
            None => std::thread::yield_now(),
        }
    }
}

/// Waits up to 100 ms for `fd` to become readable.
fn wait_readable(fd: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is a valid pollfd for the duration of the call and the
    // count is 1; poll does not keep the pointer.
    unsafe { libc::poll(&mut p, 1, 100) };
}
