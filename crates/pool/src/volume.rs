//! A volume as a [`Backend`]: the data path.
//!
//! A read or write of an allocated cluster is one atomic load of the map
//! entry (the layer, cached per queue and re-fetched only when the
//! volume's epoch moves) and one request on the device's io_uring queue,
//! carrying the caller's own buffer when the request stays in one cluster
//! (a request that spans clusters is split over bounce buffers from the
//! queue's [`BufPool`]). A write to a cluster the volume does not own yet
//! goes to the pool's preparation thread (`prep.rs`), which
//! allocates it, writes it whole (the request's data merged into zeroes
//! or the parent's data) and maps it, then wakes the queue, which
//! completes the write (a write spanning clusters, or one on a block
//! device that zeroes in place, goes down the ordinary path after its
//! clusters are prepared); Write Zeroes and Deallocate go there too, so `submit`
//! never waits for a device. The mapping is committed at the next Flush,
//! FUA write or periodic commit, not before the write completes. A Flush
//! or FUA write that needs a commit waits for the pool's committer
//! thread, which wakes the queue through its eventfd (an epoll set over
//! the device queues' eventfds and its own).
//!
//! Each request (read, write, zeroing) also bumps two counters of its
//! layer (issued, completed), in a cache-line shard of the queue's own
//! (16 shards per layer): a snapshot or another layer switch waits on
//! them for the requests that looked the old map up. It is also counted
//! in the pool's grace epoch (`grace.rs`): a freed cluster is
//! reused only once every request in flight when it was freed, on any
//! volume, has ended.

use crate::committer::Wake;
use crate::layer::{Layer, Source};
use crate::pool::PoolInner;
use crate::prep::{Done, Inbox, Outcome, Task, Work};
use crate::state::Handle;
use farflash_backend::{
    dealloc_range, Backend, BackendQueue, BufPool, IoBuf, IoCompletion, IoOp, IoRequest,
};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Block size volumes expose.
pub(crate) const VOLUME_BLOCK: u32 = 4096;
/// Shards handed to queues in turn.
static NEXT_SHARD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Segment index of a request passed through with the caller's buffer.
const PASS: u64 = 0xffff;

pub(crate) struct VolumeBackend {
    pool: Arc<PoolInner>,
    handle: Arc<Handle>,
    seen_size: AtomicU64,
    /// The volume's persistent UUID (the namespace's identity).
    uuid: [u8; 16],
}

impl VolumeBackend {
    /// Exports the volume until the backend drops.
    pub(crate) fn new(pool: Arc<PoolInner>, handle: Arc<Handle>, uuid: [u8; 16]) -> VolumeBackend {
        handle.exported.fetch_add(1, Ordering::SeqCst);
        let size = handle.size.load(Ordering::SeqCst);
        VolumeBackend {
            pool,
            handle,
            seen_size: AtomicU64::new(size),
            uuid,
        }
    }
}

impl Drop for VolumeBackend {
    fn drop(&mut self) {
        self.handle.exported.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Backend for VolumeBackend {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn capacity(&self) -> u64 {
        self.handle.size.load(Ordering::SeqCst)
    }
    fn block_size(&self) -> u32 {
        VOLUME_BLOCK
    }
    /// True: completed writes and their new mappings are durable only
    /// after a Flush (or with FUA).
    fn volatile_write_cache(&self) -> bool {
        true
    }
    fn open_queue(&self, depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        Ok(Box::new(VolumeQueue::new(
            self.pool.clone(),
            self.handle.clone(),
            depth,
        )?))
    }
    fn sync_all(&self) -> io::Result<()> {
        self.pool.devs.flush_all()?;
        self.pool.make_durable()
    }
    fn refresh_capacity(&self) -> io::Result<bool> {
        let now = self.capacity();
        Ok(self.seen_size.swap(now, Ordering::SeqCst) != now)
    }
    fn stable_id(&self) -> Option<[u8; 16]> {
        Some(self.uuid)
    }
    fn deallocate_granularity(&self) -> Option<u64> {
        Some(self.pool.cluster_size())
    }
}

/// Part of a request split over clusters.
struct Seg {
    at: usize,
    len: usize,
    read: bool,
}

/// How a request in flight is counted: the slot of `VolumeQueue::held`
/// whose layer counts it, and its grace epoch's slot.
#[derive(Clone, Copy)]
pub(crate) struct Ticket {
    slot: usize,
    epoch_slot: u8,
}

/// A request in flight.
struct Job {
    tag: u64,
    buf: Option<IoBuf>,
    pending: u32,
    result: io::Result<()>,
    held: Option<Ticket>,
    fua: bool,
    segs: Vec<Seg>,
}

/// The queue's wake-up: an epoll set over the device queues' eventfds and
/// its own eventfd (for requests completed without a device).
struct Notify {
    epoll: OwnedFd,
    own: OwnedFd,
    /// Set after each write to `own`: a reap reads `own` only then, not
    /// once per reap (a system call per pass of a busy queue).
    pending: AtomicBool,
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Wake for Notify {
    fn wake(&self) {
        self.signal_own();
    }
}

impl Notify {
    fn new(fds: &[RawFd]) -> io::Result<Notify> {
        // SAFETY: plain system calls; each fd returned is checked and owned
        // by exactly one OwnedFd.
        let epoll = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        // SAFETY: as above.
        let own = unsafe {
            OwnedFd::from_raw_fd(cvt(libc::eventfd(
                0,
                libc::EFD_NONBLOCK | libc::EFD_CLOEXEC,
            ))?)
        };
        for &fd in fds.iter().chain([own.as_raw_fd()].iter()) {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: `ev` is valid for the call; the kernel copies it.
            cvt(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        }
        Ok(Notify {
            epoll,
            own,
            pending: AtomicBool::new(false),
        })
    }

    fn signal_own(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our own eventfd.
        unsafe { libc::write(self.own.as_raw_fd(), one.as_ptr().cast(), 8) };
        // After the write: a reap that misses this flag leaves the eventfd
        // readable, so the next one comes and reads it; what the signal was
        // for (a ready completion, an inbox entry) was posted before it.
        self.pending.store(true, Ordering::Release);
    }

    fn clear(&self) {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer (non-blocking fd).
        unsafe { libc::read(self.own.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    }
}

pub(crate) struct VolumeQueue {
    pool: Arc<PoolInner>,
    handle: Arc<Handle>,
    layer: Arc<Layer>,
    epoch: u64,
    devs: Vec<Box<dyn BackendQueue>>,
    jobs: Vec<Option<Job>>,
    free: Vec<usize>,
    spare_segs: Vec<Vec<Seg>>,
    ready: Vec<IoCompletion>,
    scratch: Vec<IoCompletion>,
    bounce: BufPool,
    notify: Arc<Notify>,
    /// Where the preparation thread posts this queue's finished tasks,
    /// how many are out, and scratch to take them into.
    inbox: Arc<Inbox<Ticket>>,
    at_worker: usize,
    arrived: Vec<Done<Ticket>>,
    /// Requests waiting for a commit: (tag, buffer, change sequence,
    /// committer failures seen when they started waiting).
    waiting: Vec<(u64, IoBuf, u64, u64)>,
    /// Scratch: the physical clusters of a write's pieces.
    phys: Vec<u64>,
    /// This queue's shard of the layers' in-flight counters.
    shard: usize,
    /// Layers with requests of this queue in flight, and how many (the
    /// current one stays): requests name a slot, not an `Arc`, so the
    /// I/O path does not touch a shared reference count.
    held: Vec<Option<(Arc<Layer>, u32)>>,
    /// Inside `reap`, which hands `ready` over at its end: completing
    /// needs no wake-up then.
    reaping: bool,
    /// This thread signalled `notify` since the last reap.
    signalled: bool,
}

/// One piece of a request inside one cluster.
#[derive(Clone, Copy)]
struct Piece {
    index: u64,
    within: u64,
    len: u64,
    /// Offset in the request.
    at: u64,
}

fn pieces(offset: u64, len: u64, cs: u64) -> impl Iterator<Item = Piece> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let o = offset + at;
        let n = (cs - o % cs).min(len - at);
        let p = Piece {
            index: o / cs,
            within: o % cs,
            len: n,
            at,
        };
        at += n;
        Some(p)
    })
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl VolumeQueue {
    fn new(pool: Arc<PoolInner>, handle: Arc<Handle>, depth: u32) -> io::Result<VolumeQueue> {
        let devs = pool
            .devs
            .devs
            .iter()
            .map(|d| d.backend.open_queue(depth))
            .collect::<io::Result<Vec<_>>>()?;
        let fds: Vec<RawFd> = devs.iter().filter_map(|q| q.notify_fd()).collect();
        // Requests complete later (device queues, the preparation thread,
        // commits left to the committer): the queue has a wake-up.
        let notify = Arc::new(Notify::new(&fds)?);
        let wake: Arc<dyn Wake> = notify.clone();
        pool.committer.register(Arc::downgrade(&wake));
        let (layer, epoch) = handle.current();
        Ok(VolumeQueue {
            pool,
            handle,
            layer,
            epoch,
            devs,
            jobs: Vec::with_capacity(depth as usize),
            free: Vec::with_capacity(depth as usize),
            spare_segs: Vec::with_capacity(depth as usize),
            ready: Vec::with_capacity(depth as usize),
            scratch: Vec::with_capacity(depth as usize),
            bounce: BufPool::new(),
            notify,
            inbox: Arc::new(Inbox::new(wake)),
            at_worker: 0,
            arrived: Vec::with_capacity(depth as usize),
            waiting: Vec::with_capacity(depth as usize),
            phys: Vec::with_capacity(64),
            shard: NEXT_SHARD.fetch_add(1, Ordering::Relaxed),
            held: Vec::with_capacity(2),
            reaping: false,
            signalled: false,
        })
    }

    /// Re-reads the volume's layer when its epoch moved.
    #[inline]
    fn refresh(&mut self) {
        if self.handle.epoch() != self.epoch {
            (self.layer, self.epoch) = self.handle.current();
            // Replaced layers this queue has nothing in flight on go.
            for h in &mut self.held {
                if h.as_ref()
                    .is_some_and(|(l, n)| *n == 0 && !Arc::ptr_eq(l, &self.layer))
                {
                    *h = None;
                }
            }
        }
    }

    fn complete(&mut self, tag: u64, buf: IoBuf, result: io::Result<()>) {
        self.ready.push(IoCompletion { tag, buf, result });
        // One wake-up per batch completed outside a reap, not a system
        // call per completion (126,527 writes in 2 s at 62k reads/s).
        if !self.reaping && !self.signalled {
            self.signalled = true;
            self.notify.signal_own();
        }
    }

    fn new_job(&mut self, tag: u64, buf: IoBuf, fua: bool) -> usize {
        let job = Job {
            tag,
            buf: Some(buf),
            pending: 0,
            result: Ok(()),
            held: None,
            fua,
            segs: self
                .spare_segs
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(4)),
        };
        match self.free.pop() {
            Some(i) => {
                self.jobs[i] = Some(job);
                i
            }
            None => {
                self.jobs.push(Some(job));
                self.jobs.len() - 1
            }
        }
    }

    /// Checks a request against the volume's size and block size.
    fn validate(&self, op: &IoOp, buf: &IoBuf) -> io::Result<()> {
        let cap = self.handle.size.load(Ordering::SeqCst);
        let bs = u64::from(VOLUME_BLOCK);
        let range = |o: u64, l: u64| {
            o.is_multiple_of(bs)
                && l.is_multiple_of(bs)
                && o.checked_add(l).is_some_and(|e| e <= cap)
        };
        if matches!(op, IoOp::CompareAndWrite { .. }) {
            // Not offered (`compare_and_write_unit` is `None`).
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let writes = !matches!(op, IoOp::Read { .. } | IoOp::Flush);
        if writes && self.handle.read_only.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        let ok = match *op {
            IoOp::Read { offset, len } => {
                range(offset, len.into()) && len as usize <= buf.capacity()
            }
            IoOp::Write { offset, len, .. } => {
                range(offset, len.into()) && len as usize <= buf.len()
            }
            IoOp::Flush => true,
            IoOp::CompareAndWrite { .. } => false,
            IoOp::WriteZeroes { offset, len, .. } => range(offset, len),
            IoOp::Deallocate { ranges } => {
                (ranges as usize)
                    .checked_mul(16)
                    .is_some_and(|b| b <= buf.len())
                    && (0..ranges).all(|i| {
                        let (o, l) = dealloc_range(buf, i);
                        range(o, l)
                    })
            }
        };
        if ok {
            Ok(())
        } else {
            Err(einval())
        }
    }

    /// Sends a piece of job `j` to its device: with the caller's buffer
    /// when it is the whole request, else through a bounce buffer.
    fn issue(&mut self, j: usize, p: Piece, phys: u64, op: IoOp, whole: bool) -> io::Result<()> {
        let (dev, off) = self
            .pool
            .locate(phys, p.within)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        let Some(job) = self.jobs[j].as_mut() else {
            return Err(io::Error::other("job vanished"));
        };
        let (read, fua) = match op {
            IoOp::Write { fua, .. } => (false, fua),
            _ => (true, false),
        };
        let len = p.len as u32;
        let dop = if read {
            IoOp::Read { offset: off, len }
        } else {
            IoOp::Write {
                offset: off,
                len,
                fua,
            }
        };
        let (seg, buf) = if whole {
            (
                PASS,
                job.buf
                    .take()
                    .ok_or_else(|| io::Error::other("buffer vanished"))?,
            )
        } else {
            let mut b = self.bounce.get(p.len as usize);
            if let (false, Some(src)) = (read, job.buf.as_ref()) {
                b.copy_from_slice(&src[p.at as usize..(p.at + p.len) as usize]);
            }
            job.segs.push(Seg {
                at: p.at as usize,
                len: p.len as usize,
                read,
            });
            ((job.segs.len() - 1) as u64, b)
        };
        job.pending += 1;
        self.devs[dev].submit(IoRequest {
            tag: ((j as u64) << 16) | seg,
            op: dop,
            buf,
        });
        Ok(())
    }

    /// Counts a request in the grace epoch and on the volume's current
    /// layer before it looks the map up, then checks the layer's epoch: a
    /// layer switch (snapshot, resize, decouple) either sees the request
    /// in flight on the old layer or the request sees the new one.
    fn enter(&mut self) -> Ticket {
        let epoch_slot = self.pool.grace.enter(self.shard);
        loop {
            self.refresh();
            self.layer.begin(self.shard);
            if self.handle.epoch() == self.epoch {
                break;
            }
            self.layer.end(self.shard);
        }
        let same = |h: &Option<(Arc<Layer>, u32)>| {
            h.as_ref().is_some_and(|(l, _)| Arc::ptr_eq(l, &self.layer))
        };
        let i = match self.held.iter().position(same) {
            Some(i) => i,
            None => match self.held.iter().position(Option::is_none) {
                Some(i) => {
                    self.held[i] = Some((self.layer.clone(), 0));
                    i
                }
                None => {
                    self.held.push(Some((self.layer.clone(), 0)));
                    self.held.len() - 1
                }
            },
        };
        if let Some((_, n)) = self.held[i].as_mut() {
            *n += 1;
        }
        Ticket {
            slot: i,
            epoch_slot,
        }
    }

    /// Ends a request counted by [`VolumeQueue::enter`].
    fn leave(&mut self, t: Ticket) {
        self.pool.grace.leave(self.shard, t.epoch_slot);
        let i = t.slot;
        let Some((l, n)) = self.held.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        l.end(self.shard);
        *n -= 1;
        if *n == 0 && !Arc::ptr_eq(l, &self.layer) {
            self.held[i] = None;
        }
    }

    fn start_read(&mut self, tag: u64, mut buf: IoBuf, offset: u64, len: u32) {
        let h = self.enter();
        buf.set_len(len as usize);
        let cs = self.pool.cluster_size();
        let one = offset % cs + u64::from(len) <= cs;
        let j = self.new_job(tag, buf, false);
        if let Some(job) = self.jobs[j].as_mut() {
            job.held = Some(h);
        }
        let mut res = Ok(());
        for p in pieces(offset, len.into(), cs) {
            match self.layer.resolve(p.index) {
                Source::Zero => {
                    if let Some(b) = self.jobs[j].as_mut().and_then(|x| x.buf.as_mut()) {
                        b[p.at as usize..(p.at + p.len) as usize].fill(0);
                    }
                }
                Source::Own(q) | Source::Inherited(q) => {
                    let op = IoOp::Read { offset: 0, len: 0 };
                    if let Err(e) = self.issue(j, p, q, op, one) {
                        res = Err(e);
                        break;
                    }
                }
            }
        }
        self.settle(j, res);
    }

    fn start_write(&mut self, tag: u64, buf: IoBuf, offset: u64, len: u32, fua: bool) {
        let h = self.enter();
        let cs = self.pool.cluster_size();
        let mut phys = std::mem::take(&mut self.phys);
        phys.clear();
        for p in pieces(offset, len.into(), cs) {
            match self.layer.resolve(p.index) {
                Source::Own(q) => phys.push(q),
                _ => break,
            }
        }
        let n = pieces(offset, len.into(), cs).count();
        if phys.len() < n {
            // A cluster to allocate: the preparation thread does it.
            self.phys = phys;
            let work = match n {
                1 => Work::First {
                    offset,
                    len: len.into(),
                    fua,
                },
                _ => Work::Own {
                    offset,
                    len: len.into(),
                },
            };
            let op = IoOp::Write { offset, len, fua };
            return self.hand_over(h, work, tag, op, buf);
        }
        let one = offset % cs + u64::from(len) <= cs;
        let j = self.new_job(tag, buf, fua);
        if let Some(job) = self.jobs[j].as_mut() {
            job.held = Some(h);
        }
        let mut res = Ok(());
        for (p, &q) in pieces(offset, len.into(), cs).zip(phys.iter()) {
            let op = IoOp::Write {
                offset: 0,
                len: 0,
                fua,
            };
            if let Err(e) = self.issue(j, p, q, op, one) {
                res = Err(e);
                break;
            }
        }
        self.phys = phys;
        self.settle(j, res);
    }

    /// Hands a request (counted by `h`) to the preparation thread.
    fn hand_over(&mut self, h: Ticket, work: Work, tag: u64, op: IoOp, buf: IoBuf) {
        self.at_worker += 1;
        self.pool.prepare_later(Task {
            layer: self.layer.clone(),
            work,
            tag,
            op,
            ticket: h,
            buf,
            inbox: self.inbox.clone(),
        });
    }

    /// Finishes the requests the preparation thread is done with.
    fn take_arrived(&mut self) {
        let mut arrived = std::mem::take(&mut self.arrived);
        self.inbox.take(&mut arrived);
        for d in arrived.drain(..) {
            self.at_worker -= 1;
            self.leave(d.ticket);
            match (d.outcome, d.op) {
                (Outcome::Again, op) => self.dispatch(d.tag, op, d.buf),
                (Outcome::Wrote, IoOp::Write { fua: true, .. }) if self.pool.dirty() => {
                    self.after_commit(d.tag, d.buf)
                }
                (Outcome::Wrote, _) => self.complete(d.tag, d.buf, Ok(())),
                (Outcome::Finished(Ok(())), IoOp::WriteZeroes { fua: true, .. }) => {
                    self.start_flush(d.tag, d.buf)
                }
                (Outcome::Finished(r), _) => self.complete(d.tag, d.buf, r),
            }
        }
        self.arrived = arrived;
    }

    /// After issuing: records a failure, and finishes a job with nothing
    /// left in flight.
    fn settle(&mut self, j: usize, res: io::Result<()>) {
        let Some(job) = self.jobs[j].as_mut() else {
            return;
        };
        if let Err(e) = res {
            if job.result.is_ok() {
                job.result = Err(e);
            }
        }
        if job.pending == 0 {
            self.finish(j);
        }
    }

    fn finish(&mut self, j: usize) {
        let Some(mut job) = self.jobs[j].take() else {
            return;
        };
        self.free.push(j);
        if let Some(h) = job.held.take() {
            self.leave(h);
        }
        job.segs.clear();
        self.spare_segs.push(std::mem::take(&mut job.segs));
        let buf = job.buf.take().unwrap_or_else(|| IoBuf::with_capacity(0));
        // FUA: the data is durable (device FUA); its mapping must be too,
        // whichever write created it, so pending mappings are committed.
        if job.result.is_ok() && job.fua && self.pool.dirty() {
            return self.after_commit(job.tag, buf);
        }
        self.complete(job.tag, buf, job.result);
    }

    fn on_device(&mut self, c: IoCompletion) {
        let (j, seg) = ((c.tag >> 16) as usize, c.tag & 0xffff);
        let Some(job) = self.jobs.get_mut(j).and_then(Option::as_mut) else {
            tracing::warn!(tag = c.tag, "device completion for an unknown request");
            return;
        };
        if c.result.is_err() && job.result.is_ok() {
            job.result = c.result;
        }
        if seg == PASS {
            job.buf = Some(c.buf);
        } else if let Some(s) = job.segs.get_mut(seg as usize) {
            if s.read && job.result.is_ok() {
                if let Some(dst) = job.buf.as_mut() {
                    dst[s.at..s.at + s.len].copy_from_slice(&c.buf[..s.len]);
                }
            }
            self.bounce.put(c.buf);
        }
        job.pending -= 1;
        if job.pending == 0 {
            self.finish(j);
        }
    }

    /// Completes the request once every change made so far is committed:
    /// the committer does it and wakes this queue (or, without a
    /// committer, this thread does it now).
    fn after_commit(&mut self, tag: u64, buf: IoBuf) {
        let target = self.pool.changed.load(Ordering::SeqCst);
        if !self.pool.committer.running() {
            let r = self.pool.commit_to(target);
            return self.complete(tag, buf, r);
        }
        let failures = self.pool.committer.failures();
        self.waiting.push((tag, buf, target, failures));
        self.pool.committer.kick();
    }

    /// Completes the waiting requests whose commit happened (or failed).
    fn check_waiting(&mut self) {
        let durable = self.pool.durable.load(Ordering::SeqCst);
        let failures = self.pool.committer.failures();
        let running = self.pool.committer.running();
        let mut i = 0;
        while i < self.waiting.len() {
            let (_, _, target, seen) = self.waiting[i];
            let result = if durable >= target {
                Ok(())
            } else if failures > seen || !running {
                Err(io::Error::from_raw_os_error(libc::EIO))
            } else {
                i += 1;
                continue;
            };
            let (tag, buf, _, _) = self.waiting.swap_remove(i);
            self.ready.push(IoCompletion { tag, buf, result });
        }
    }

    /// Flush: a commit when mappings changed (it flushes the devices
    /// first), else a flush of every device.
    fn start_flush(&mut self, tag: u64, buf: IoBuf) {
        if self.pool.dirty() {
            return self.after_commit(tag, buf);
        }
        let j = self.new_job(tag, buf, false);
        let n = self.devs.len();
        if let Some(job) = self.jobs[j].as_mut() {
            job.pending = n as u32;
        }
        for q in self.devs.iter_mut() {
            let b = IoBuf::with_capacity(0);
            q.submit(IoRequest {
                tag: ((j as u64) << 16) | 0xfffe,
                op: IoOp::Flush,
                buf: b,
            });
        }
    }

    /// Write Zeroes and Deallocate: on the preparation thread.
    fn start_zero(&mut self, tag: u64, buf: IoBuf, op: IoOp) {
        let h = self.enter();
        self.hand_over(h, Work::Zero, tag, op, buf);
    }

    fn dispatch(&mut self, tag: u64, op: IoOp, buf: IoBuf) {
        match op {
            IoOp::Read { offset, len } => self.start_read(tag, buf, offset, len),
            IoOp::Write { offset, len, fua } => self.start_write(tag, buf, offset, len, fua),
            IoOp::Flush => self.start_flush(tag, buf),
            IoOp::WriteZeroes { .. } | IoOp::Deallocate { .. } => self.start_zero(tag, buf, op),
            IoOp::CompareAndWrite { .. } => self.complete(
                tag,
                buf,
                Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
            ),
        }
    }
}

impl Drop for VolumeQueue {
    /// Device queues first (they wait for the kernel to finish with every
    /// buffer), and the preparation thread's tasks, then the writes that
    /// were in flight stop counting on their layers, so snapshots and
    /// frees do not wait for them.
    fn drop(&mut self) {
        self.devs.clear();
        let mut arrived = Vec::new();
        self.inbox.take(&mut arrived);
        self.inbox
            .wait_for(self.at_worker - arrived.len(), &mut arrived);
        for d in arrived {
            self.leave(d.ticket);
        }
        let held: Vec<Ticket> = self
            .jobs
            .iter_mut()
            .filter_map(Option::take)
            .filter_map(|j| j.held)
            .collect();
        for h in held {
            self.leave(h);
        }
    }
}

impl BackendQueue for VolumeQueue {
    fn submit(&mut self, req: IoRequest) {
        let IoRequest { tag, op, buf } = req;
        if let Err(e) = self.validate(&op, &buf) {
            return self.complete(tag, buf, Err(e));
        }
        self.dispatch(tag, op, buf);
    }

    fn commit(&mut self) -> io::Result<()> {
        self.devs.iter_mut().try_for_each(|q| q.commit())
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        self.notify.clear();
        self.signalled = false;
        self.reaping = true;
        if self.at_worker > 0 {
            self.take_arrived();
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        for q in 0..self.devs.len() {
            self.devs[q].reap(&mut scratch);
            for c in scratch.drain(..) {
                self.on_device(c);
            }
        }
        self.scratch = scratch;
        if !self.waiting.is_empty() {
            self.check_waiting();
        }
        self.reaping = false;
        let n = self.ready.len();
        out.append(&mut self.ready);
        n
    }

    fn notify_fd(&self) -> Option<RawFd> {
        Some(self.notify.epoll.as_raw_fd())
    }

    fn in_flight(&self) -> usize {
        self.jobs.len() - self.free.len() + self.ready.len() + self.waiting.len() + self.at_worker
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::MemDevice;
    use crate::{LocalPool, PoolOptions, VolumeStore};
    use farflash_backend::{IoBuf, IoOp};
    use std::sync::Arc;

    #[test]
    fn a_queue_lets_go_of_replaced_layers() {
        let d = MemDevice::recording(16 << 20);
        let opts = PoolOptions {
            cluster_size: Some(64 << 10),
            max_volumes: 16,
            journal_blocks: 16,
            commit_interval: None,
        };
        let pool = LocalPool::create_with("h", vec![("m".into(), d.backend())], &opts).unwrap();
        pool.create_volume("v", 1 << 20).unwrap();
        let be = pool.open("v").unwrap();
        let mut q = be.open_queue(4).unwrap();
        let read = |q: &mut dyn farflash_backend::BackendQueue| {
            crate::testing::run(
                q,
                IoOp::Read {
                    offset: 0,
                    len: 4096,
                },
                IoBuf::with_capacity(4096),
            )
            .unwrap();
        };
        read(q.as_mut());
        let first = pool.inner.handle_layer("v");
        for size in 2..6u64 {
            pool.resize("v", size << 20, false).unwrap();
            read(q.as_mut());
        }
        assert_eq!(
            Arc::strong_count(&first),
            1,
            "only this test holds the first layer"
        );
    }
}
