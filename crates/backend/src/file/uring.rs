//! The io_uring engine: one ring per queue (per event-loop thread).
//!
//! Each request lives in a slab slot, keyed by the SQE `user_data`, from
//! `submit` until its completion is reaped; the slot owns the [`IoBuf`] the
//! kernel reads or writes, so the memory stays valid while the operation is
//! in flight. A request may take several SQEs in sequence (the remainder of
//! a short read/write, one `fallocate` per Deallocate range, zero-write
//! chunks, a final `fdatasync`): each completion advances the slot's
//! [`Stage`] and pushes the next SQE.
//!
//! At most `sq_entries` SQEs are in the ring at once (the CQ holds twice
//! that, so it can never overflow); the rest wait in an overflow queue and
//! are pushed as completions free room. An eventfd registered with the ring
//! is the queue's notification fd; requests that complete without the
//! kernel (validation errors, zero-length requests) signal it by hand.

use super::slab::Slab;
use super::sys;
use super::zero::{is_unsupported, ZeroMethod, ZeroSupport, ZERO_CHUNK};
use super::FileInner;
use crate::check::dealloc_range;
use crate::{BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest};
use io_uring::{opcode, squeue, types, IoUring};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Largest ring requested, whatever the queue depth.
const MAX_RING_ENTRIES: u32 = 4096;

/// Reaps finding nothing that skip reading the eventfd before one reads it.
const IDLE_REAPS_PER_CLEAR: u32 = 64;

/// A [`BackendQueue`] on its own io_uring.
pub(crate) struct UringQueue {
    ring: IoUring,
    eventfd: OwnedFd,
    inner: Arc<FileInner>,
    slots: Slab<Slot>,
    /// SQEs waiting for room in the ring, in submission order.
    overflow: VecDeque<squeue::Entry>,
    /// SQEs pushed to the ring whose CQE has not been reaped.
    in_ring: usize,
    /// Most SQEs allowed in the ring at once.
    ring_limit: usize,
    /// Completions not yet handed out by `reap`.
    ready: Vec<IoCompletion>,
    /// Scratch copy of the CQ, reused by `reap`.
    cqes: Vec<(u64, i32)>,
    /// Source of the zero-write fallback, allocated on first use.
    zero_buf: Option<IoBuf>,
    /// Reaps that found nothing since the eventfd was last read.
    idle_reaps: u32,
}

/// One request in flight.
struct Slot {
    tag: u64,
    buf: IoBuf,
    stage: Stage,
}

/// Where a request is in its sequence of SQEs.
#[derive(Debug, Clone, Copy)]
enum Stage {
    Read {
        offset: u64,
        len: u32,
        done: u32,
    },
    Write {
        offset: u64,
        len: u32,
        done: u32,
        fua: bool,
    },
    Flush,
    Zero(ZeroJob),
    /// The `fdatasync` that ends a FUA Write Zeroes.
    Sync,
}

/// Progress of a Write Zeroes (one range) or Deallocate (ranges in the
/// buffer).
#[derive(Debug, Clone, Copy)]
struct ZeroJob {
    dealloc: bool,
    /// Number of ranges and the current one.
    count: u32,
    index: u32,
    method: ZeroMethod,
    /// Bytes of the current range already zeroed (zero-write method).
    pos: u64,
    /// The Write Zeroes range (Deallocate reads its ranges from the buffer).
    range: (u64, u64),
    fua: bool,
}

impl Stage {
    fn new(op: IoOp, zero: &ZeroSupport) -> io::Result<Stage> {
        let job = |dealloc, count, range, fua| {
            Stage::Zero(ZeroJob {
                dealloc,
                count,
                index: 0,
                method: zero.first(dealloc),
                pos: 0,
                range,
                fua,
            })
        };
        Ok(match op {
            IoOp::Read { offset, len } => Stage::Read {
                offset,
                len,
                done: 0,
            },
            IoOp::Write { offset, len, fua } => Stage::Write {
                offset,
                len,
                done: 0,
                fua,
            },
            IoOp::Flush => Stage::Flush,
            IoOp::WriteZeroes { offset, len, fua } => job(false, 1, (offset, len), fua),
            IoOp::Deallocate { ranges } => job(true, ranges, (0, 0), false),
            IoOp::CompareAndWrite { .. } => return Err(crate::check::unsupported()),
        })
    }
}

/// What to do after a stage has seen a result.
enum Step {
    /// Send this SQE (its `user_data` is set by the caller).
    Push(squeue::Entry),
    /// The request is finished.
    Done(io::Result<()>),
}

impl UringQueue {
    /// Sets up a ring for `depth` requests with an eventfd registered.
    pub(crate) fn new(inner: Arc<FileInner>, depth: u32) -> io::Result<Self> {
        let entries = depth.clamp(1, MAX_RING_ENTRIES).next_power_of_two();
        let ring = IoUring::builder().setup_clamp().build(entries)?;
        let eventfd = sys::eventfd()?;
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        let ring_limit = ring.params().sq_entries() as usize;
        Ok(UringQueue {
            ring,
            eventfd,
            inner,
            slots: Slab::with_capacity(depth as usize),
            overflow: VecDeque::new(),
            in_ring: 0,
            ring_limit,
            ready: Vec::new(),
            cqes: Vec::with_capacity(ring_limit * 2),
            zero_buf: None,
            idle_reaps: 0,
        })
    }

    /// Feeds a result (or `None` to start) to the request in slot `key`,
    /// then queues its next SQE or moves it to `ready`.
    fn advance(&mut self, key: usize, res: Option<i32>) {
        let Some(slot) = self.slots.get_mut(key) else {
            tracing::warn!(key, "io_uring completion for an unknown request");
            return;
        };
        match next_step(slot, res, &self.inner, &mut self.zero_buf) {
            Step::Push(sqe) => self.push(sqe.user_data(key as u64)),
            Step::Done(result) => {
                if let Some(Slot { tag, buf, .. }) = self.slots.remove(key) {
                    self.ready.push(IoCompletion { tag, buf, result });
                }
            }
        }
    }

    /// Puts `sqe` in the ring if there is room, else in the overflow queue.
    fn push(&mut self, sqe: squeue::Entry) {
        if self.overflow.is_empty() && self.in_ring < self.ring_limit && self.push_to_ring(&sqe) {
            return;
        }
        self.overflow.push_back(sqe);
    }

    fn push_to_ring(&mut self, sqe: &squeue::Entry) -> bool {
        // SAFETY: the memory an SQE points to is the heap allocation of an
        // `IoBuf` owned by a slot (or `zero_buf`) of this queue. It is not
        // freed or reused until the request's last CQE has been reaped: a
        // slot is removed only in `advance` after its final completion, and
        // `Drop` waits for every SQE in the ring before freeing anything.
        // Moving the `IoBuf` value (slab growth) does not move its heap data.
        let pushed = unsafe { self.ring.submission().push(sqe) }.is_ok();
        self.in_ring += usize::from(pushed);
        pushed
    }

    /// Moves overflowed SQEs into the ring and submits whatever it holds.
    fn submit_pending(&mut self) -> io::Result<()> {
        while self.in_ring < self.ring_limit {
            let Some(sqe) = self.overflow.pop_front() else {
                break;
            };
            if !self.push_to_ring(&sqe) {
                self.overflow.push_front(sqe);
                break;
            }
        }
        if self.ring.submission().is_empty() {
            return Ok(());
        }
        loop {
            match self.ring.submit() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other.map(drop),
            }
        }
    }
}

/// Advances `slot` past result `res` (`None` when starting, or to reissue
/// the same step after `EINTR`/`EAGAIN`) and returns what to do next.
fn next_step(
    slot: &mut Slot,
    res: Option<i32>,
    inner: &FileInner,
    zero_buf: &mut Option<IoBuf>,
) -> Step {
    let fd = types::Fd(inner.fd());
    let res = res.filter(|&r| r != -libc::EINTR && r != -libc::EAGAIN);
    match slot.stage {
        Stage::Read {
            offset,
            len,
            mut done,
        } => {
            if let Some(r) = res {
                match progress(r) {
                    Ok(n) => done = done.saturating_add(n),
                    Err(e) => return Step::Done(Err(e)),
                }
            }
            slot.stage = Stage::Read { offset, len, done };
            if done >= len {
                return Step::Done(Ok(()));
            }
            let ptr = slot.buf.as_mut_capacity()[done as usize..].as_mut_ptr();
            let at = offset + u64::from(done);
            Step::Push(opcode::Read::new(fd, ptr, len - done).offset(at).build())
        }
        Stage::Write {
            offset,
            len,
            mut done,
            fua,
        } => {
            if let Some(r) = res {
                match progress(r) {
                    Ok(n) => done = done.saturating_add(n),
                    Err(e) => return Step::Done(Err(e)),
                }
            }
            slot.stage = Stage::Write {
                offset,
                len,
                done,
                fua,
            };
            if done >= len {
                return Step::Done(Ok(()));
            }
            let ptr = slot.buf.as_slice()[done as usize..].as_ptr();
            let flags = if fua { libc::RWF_DSYNC } else { 0 };
            let at = offset + u64::from(done);
            Step::Push(
                opcode::Write::new(fd, ptr, len - done)
                    .offset(at)
                    .rw_flags(flags)
                    .build(),
            )
        }
        Stage::Flush | Stage::Sync => match res {
            None => Step::Push(datasync(fd)),
            Some(r) => Step::Done(status(r)),
        },
        Stage::Zero(mut job) => {
            if let Some(r) = res {
                if let Err(e) = job.absorb(r, &inner.zero) {
                    return Step::Done(Err(e));
                }
            }
            let step = job.next_sqe(fd, &slot.buf, &inner.zero, zero_buf);
            slot.stage = Stage::Zero(job);
            match step {
                Some(sqe) => Step::Push(sqe),
                None if job.fua => {
                    slot.stage = Stage::Sync;
                    Step::Push(datasync(fd))
                }
                None => Step::Done(Ok(())),
            }
        }
    }
}

impl ZeroJob {
    /// Takes the result of the last SQE into account.
    fn absorb(&mut self, res: i32, zero: &ZeroSupport) -> io::Result<()> {
        if self.method == ZeroMethod::Write {
            self.pos += u64::from(progress(res)?);
        } else if res >= 0 {
            self.next_range(zero);
        } else if is_unsupported(-res) {
            self.method = zero.next(self.dealloc, self.method);
        } else {
            return Err(io::Error::from_raw_os_error(-res));
        }
        Ok(())
    }

    fn next_range(&mut self, zero: &ZeroSupport) {
        self.index += 1;
        self.pos = 0;
        self.method = zero.first(self.dealloc);
    }

    /// The SQE for the rest of the current range, or `None` when all
    /// ranges are zeroed.
    fn next_sqe(
        &mut self,
        fd: types::Fd,
        buf: &IoBuf,
        zero: &ZeroSupport,
        zero_buf: &mut Option<IoBuf>,
    ) -> Option<squeue::Entry> {
        while self.index < self.count {
            let (offset, len) = if self.dealloc {
                dealloc_range(buf, self.index)
            } else {
                self.range
            };
            if self.pos >= len {
                self.next_range(zero);
                continue;
            }
            let (at, rest) = (offset + self.pos, len - self.pos);
            return Some(match self.method.fallocate_mode() {
                Some(mode) => opcode::Fallocate::new(fd, rest)
                    .offset(at)
                    .mode(mode)
                    .build(),
                None => {
                    let zeroes = zero_buf.get_or_insert_with(|| IoBuf::with_capacity(ZERO_CHUNK));
                    let chunk = rest.min(zeroes.capacity() as u64) as u32;
                    opcode::Write::new(fd, zeroes.as_ptr(), chunk)
                        .offset(at)
                        .build()
                }
            });
        }
        None
    }
}

fn datasync(fd: types::Fd) -> squeue::Entry {
    opcode::Fsync::new(fd)
        .flags(types::FsyncFlags::DATASYNC)
        .build()
}

/// Bytes moved by a read/write CQE; 0 (end of file, no progress) is `EIO`.
fn progress(res: i32) -> io::Result<u32> {
    match u32::try_from(res) {
        Ok(0) => Err(sys::eio()),
        Ok(n) => Ok(n),
        Err(_) => Err(io::Error::from_raw_os_error(-res)),
    }
}

fn status(res: i32) -> io::Result<()> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(())
    }
}

impl BackendQueue for UringQueue {
    fn submit(&mut self, req: IoRequest) {
        let IoRequest { tag, op, mut buf } = req;
        let ready_before = self.ready.len();
        let staged = (self.inner.geometry.validate(&op, &buf))
            .and_then(|()| Stage::new(op, &self.inner.zero));
        match staged {
            Err(e) => self.ready.push(IoCompletion {
                tag,
                buf,
                result: Err(e),
            }),
            Ok(stage) => {
                if let IoOp::Read { len, .. } = op {
                    buf.set_len(len as usize);
                }
                let key = self.slots.insert(Slot { tag, buf, stage });
                self.advance(key, None);
            }
        }
        if self.ready.len() > ready_before {
            // Completed without the kernel: wake whoever polls the eventfd.
            sys::eventfd_signal(self.eventfd.as_raw_fd());
        }
    }

    fn commit(&mut self) -> io::Result<()> {
        self.submit_pending()
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        // A pass finding nothing makes no system call: a busy queue is
        // reaped several times per completion, and reading the eventfd each
        // time took a fifth of a saturated core. A CQE's signal can land
        // after the entry was reaped, leaving the eventfd readable with
        // nothing to reap: edge-triggered waiters (the target's loop) do
        // not see that, and a level-triggered one spins for at most
        // IDLE_REAPS_PER_CLEAR reaps before a reap reads it.
        // Entries pushed since the last submit (follow-ups pushed by a
        // caller's reap) still go to the kernel below.
        if self.ready.is_empty()
            && self.overflow.is_empty()
            && self.ring.submission().is_empty()
            && self.ring.completion().is_empty()
        {
            self.idle_reaps += 1;
            if self.idle_reaps < IDLE_REAPS_PER_CLEAR {
                return 0;
            }
        }
        self.idle_reaps = 0;
        // Clear first: a CQE posted from now on signals the eventfd again.
        sys::eventfd_clear(self.eventfd.as_raw_fd());
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(key, res) in &cqes {
            self.in_ring = self.in_ring.saturating_sub(1);
            self.advance(key as usize, Some(res));
        }
        self.cqes = cqes;
        // Follow-up SQEs and overflowed requests must reach the kernel even
        // if the caller does not commit again before waiting.
        if let Err(e) = self.submit_pending() {
            tracing::warn!(error = %e, "io_uring submit failed while reaping");
        }
        let n = self.ready.len();
        out.append(&mut self.ready);
        n
    }

    fn notify_fd(&self) -> Option<RawFd> {
        Some(self.eventfd.as_raw_fd())
    }

    fn in_flight(&self) -> usize {
        self.slots.len() + self.ready.len()
    }
}

impl Drop for UringQueue {
    /// Waits until the kernel is done with every buffer before they are
    /// freed. If waiting fails, the buffers are leaked rather than risk the
    /// kernel writing into freed memory.
    fn drop(&mut self) {
        self.overflow.clear(); // never reached the kernel
        while self.in_ring > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::error!(error = %e, in_ring = self.in_ring, "cannot drain io_uring; leaking its buffers");
                    std::mem::forget(std::mem::replace(&mut self.slots, Slab::with_capacity(0)));
                    std::mem::forget(self.zero_buf.take());
                    return;
                }
            }
            let reaped = self.ring.completion().count();
            self.in_ring = self.in_ring.saturating_sub(reaped);
        }
    }
}
