//! One worker's queue on an RBD image: librbd asynchronous I/O whose
//! completions come back to the worker without a thread of ours.
//!
//! librbd runs each completion's callback on its own finisher thread. The
//! callback only records the result in the request's slot and, when the
//! request's last sub-operation is done, sends the slot index down this
//! queue's channel (lock-free) and writes the queue's eventfd, once per batch
//! (`signaled` suppresses the write while the worker has not reaped yet). The
//! worker's `reap` drains the channel: no lock and no allocation of ours per
//! I/O (librbd allocates its completion object), and nothing shared with
//! another worker's queue.

use super::cluster::Image;
use crate::check::{dealloc_range, Geometry};
use crate::file::sys::{eventfd, eventfd_clear, eventfd_signal};
use crate::{BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest};
use farflash_rbd_sys as sys;
use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ceph's errno for a blocklisted client (`EBLOCKLISTED`, defined as
/// `ESHUTDOWN` in Ceph's headers).
const EBLOCKLISTED: i32 = libc::ESHUTDOWN;

/// Where finished slots are announced (shared with librbd's callback thread).
struct Notifier {
    done: Sender<u32>,
    signaled: AtomicBool,
    eventfd: OwnedFd,
}

impl Notifier {
    fn announce(&self, index: u32) {
        // The receiver lives as long as the queue, and the queue outlives
        // every request it submitted (see `Drop`).
        let _ = self.done.send(index);
        self.wake();
    }

    /// Makes the eventfd readable unless it already is for the next reap:
    /// one write per batch, and `reap` reads the eventfd only after one.
    fn wake(&self) {
        if !self.signaled.swap(true, Ordering::AcqRel) {
            eventfd_signal(self.eventfd.as_raw_fd());
        }
    }

    /// Called by the worker before it drains the channel: clears the flag
    /// and, only when a wake set it, the eventfd (no empty read otherwise).
    /// The swap comes before the drain, so a completion sent after it finds
    /// `signaled` clear and writes the eventfd again. (A wake whose write
    /// lands just after this swap leaves a count behind with `signaled`
    /// clear: harmless, the worker's epoll is edge-triggered and the next
    /// wake's reap reads it.) Returns whether the eventfd was read.
    fn take_wake(&self) -> bool {
        let woken = self.signaled.swap(false, Ordering::AcqRel);
        if woken {
            eventfd_clear(self.eventfd.as_raw_fd());
        }
        woken
    }
}

/// The part of a request slot librbd's callback touches. Boxed, so its
/// address (the callback argument) stays put while the slot vector grows.
struct SlotShared {
    notifier: Arc<Notifier>,
    index: u32,
    /// librbd operations still outstanding for the request.
    pending: AtomicU32,
    /// The first negative result, or 0.
    error: AtomicI64,
    /// Where librbd writes a compare-and-write's mismatch offset (unused:
    /// the NVMe Compare Failure status carries none).
    mismatch: AtomicU64,
}

impl SlotShared {
    fn finish_one(&self, result: i64) {
        if result < 0 {
            let _ = self
                .error
                .compare_exchange(0, result, Ordering::AcqRel, Ordering::Acquire);
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.notifier.announce(self.index);
        }
    }
}

/// librbd's completion callback.
unsafe extern "C" fn on_complete(comp: sys::rbd_completion_t, arg: *mut c_void) {
    // SAFETY: `arg` is the `SlotShared` this completion was created with; the
    // queue keeps it alive until its request is reaped (which needs this
    // very call to finish first).
    let slot = unsafe { &*(arg as *const SlotShared) };
    // SAFETY: librbd hands a live completion to its callback; we release it
    // here and never touch it again.
    let r = unsafe {
        let r = sys::rbd_aio_get_return_value(comp);
        sys::rbd_aio_release(comp);
        r
    };
    slot.finish_one(r as i64);
}

/// The worker-side part of a slot.
#[derive(Default)]
struct SlotState {
    tag: u64,
    buf: Option<IoBuf>,
    /// A FUA write or write-zeroes: flush once it succeeded.
    then_flush: bool,
    busy: bool,
}

pub(crate) struct RbdQueue {
    image: Arc<Image>,
    geometry: Geometry,
    /// The backend's current capacity (an image can be resized).
    capacity: Arc<AtomicU64>,
    notifier: Arc<Notifier>,
    done: Receiver<u32>,
    // Boxed: librbd holds their addresses while the vector may grow.
    #[allow(clippy::vec_box)]
    shared: Vec<Box<SlotShared>>,
    state: Vec<SlotState>,
    free: Vec<u32>,
    /// Requests refused at submission, completed at the next reap.
    refused: Vec<IoCompletion>,
    /// Scratch list of a Deallocate's ranges (kept to reuse its memory).
    ranges: Vec<(u64, u64)>,
    in_flight: usize,
}

impl RbdQueue {
    pub(crate) fn new(
        image: Arc<Image>,
        geometry: Geometry,
        capacity: Arc<AtomicU64>,
        depth: u32,
    ) -> io::Result<RbdQueue> {
        let (tx, rx) = channel();
        let mut q = RbdQueue {
            image,
            geometry,
            capacity,
            notifier: Arc::new(Notifier {
                done: tx,
                signaled: AtomicBool::new(false),
                eventfd: eventfd()?,
            }),
            done: rx,
            shared: Vec::new(),
            state: Vec::new(),
            free: Vec::new(),
            refused: Vec::new(),
            ranges: Vec::new(),
            in_flight: 0,
        };
        for _ in 0..depth.clamp(1, 4096) {
            q.grow();
        }
        Ok(q)
    }

    /// Adds one slot to the free list (at open, or when more requests than
    /// the depth are in flight).
    fn grow(&mut self) {
        let index = self.shared.len() as u32;
        self.shared.push(Box::new(SlotShared {
            notifier: self.notifier.clone(),
            index,
            pending: AtomicU32::new(0),
            error: AtomicI64::new(0),
            mismatch: AtomicU64::new(0),
        }));
        self.state.push(SlotState::default());
        self.free.push(index);
    }

    fn refuse(&mut self, tag: u64, buf: IoBuf, e: io::Error) {
        self.refused.push(IoCompletion {
            tag,
            buf,
            result: Err(e),
        });
        self.notifier.wake();
    }

    /// Starts one librbd operation for slot `idx`; `start` gets the new
    /// completion and returns librbd's immediate result. A refusal counts as
    /// that operation finishing with the error.
    fn issue(&mut self, idx: u32, start: impl FnOnce(sys::rbd_completion_t) -> i32) {
        let slot: &SlotShared = &self.shared[idx as usize];
        let arg = slot as *const SlotShared as *mut c_void;
        let mut comp: sys::rbd_completion_t = std::ptr::null_mut();
        // SAFETY: `arg` stays valid until the callback ran (see `on_complete`);
        // librbd writes the new completion into `comp`.
        let rc = unsafe { sys::rbd_aio_create_completion(arg, Some(on_complete), &mut comp) };
        if rc < 0 {
            slot.finish_one(rc.into());
            return;
        }
        let rc = start(comp);
        if rc < 0 {
            // SAFETY: librbd refused the operation and kept no reference to
            // the completion, which is ours to release.
            unsafe { sys::rbd_aio_release(comp) };
            slot.finish_one(rc.into());
        }
    }

    /// librbd's compare-and-write for slot `idx`: `ptr` holds the compare
    /// data, then the write data (`validate` checked the buffer holds both
    /// and stays in the slot until completion). librbd answers a
    /// miscompare with EILSEQ, passed on as is (the command layer's Compare
    /// Failure).
    fn compare_and_write(&mut self, idx: u32, offset: u64, len: u32, ptr: *const u8) {
        let image = self.image.handle;
        let mismatch = self.shared[idx as usize].mismatch.as_ptr();
        let data = ptr.wrapping_add(len as usize);
        self.issue(idx, |c| {
            // SAFETY: the image is open; `ptr` and `data` point at `len`
            // bytes each of the slot's buffer, which stays in the slot until
            // the operation completed; `mismatch` points into the slot's
            // boxed shared part, alive until the callback ran.
            let rc = unsafe {
                sys::rbd_aio_compare_and_write(
                    image,
                    offset,
                    len as usize,
                    ptr.cast(),
                    data.cast(),
                    c,
                    mismatch,
                    0,
                )
            };
            i32::try_from(rc).unwrap_or(-libc::EIO)
        });
    }

    fn flush(&mut self, idx: u32) {
        let image = self.image.handle;
        self.shared[idx as usize]
            .pending
            .store(1, Ordering::Release);
        // SAFETY: the image is open (the queue holds it); `c` is a fresh completion.
        self.issue(idx, |c| unsafe { sys::rbd_aio_flush(image, c) });
    }

    /// Completes slot `idx` (its operations all finished) into `out`.
    fn complete(&mut self, idx: u32, out: &mut Vec<IoCompletion>) -> bool {
        let err = self.shared[idx as usize].error.swap(0, Ordering::AcqRel);
        let st = &mut self.state[idx as usize];
        if !st.busy {
            return false;
        }
        if err == 0 && st.then_flush {
            st.then_flush = false;
            self.flush(idx);
            return false;
        }
        st.busy = false;
        let Some(buf) = st.buf.take() else {
            return false;
        };
        // The bare errno, which the command layer maps to an NVMe status.
        let result = if err == -i64::from(EBLOCKLISTED) {
            // Another gateway broke our lock and blocklisted this client:
            // nothing more goes through it (docs/rbd.md).
            self.image.lock_owned.store(false, Ordering::Release);
            Err(super::lock::not_owner())
        } else if err == -i64::from(libc::EROFS) {
            // librbd refused a write without the lock (released while the
            // request was on its way): another path may take it.
            Err(super::lock::not_owner())
        } else if err < 0 {
            Err(io::Error::from_raw_os_error(
                i32::try_from(-err).unwrap_or(libc::EIO),
            ))
        } else {
            Ok(())
        };
        out.push(IoCompletion {
            tag: st.tag,
            buf,
            result,
        });
        self.free.push(idx);
        true
    }
}

impl BackendQueue for RbdQueue {
    fn submit(&mut self, req: IoRequest) {
        self.in_flight += 1;
        let IoRequest { tag, op, mut buf } = req;
        self.geometry.capacity = self.capacity.load(Ordering::Acquire);
        let unit = u64::from(super::COMPARE_AND_WRITE_UNIT);
        if let Err(e) = self.geometry.validate_compare_and_write(&op, &buf, unit) {
            return self.refuse(tag, buf, e);
        }
        // Writes need the exclusive lock, which only ANA hands out here
        // (lock.rs): librbd must not fetch it from another gateway.
        let writes = matches!(
            op,
            IoOp::Write { .. }
                | IoOp::WriteZeroes { .. }
                | IoOp::Deallocate { .. }
                | IoOp::CompareAndWrite { .. }
        );
        if (writes || op == IoOp::Flush) && !self.image.lock_owned.load(Ordering::Acquire) {
            if writes {
                return self.refuse(tag, buf, super::lock::not_owner());
            }
            // Nothing of ours to flush: writes complete on the OSDs (no
            // cache), and the release flushed librbd before letting go
            // (librbd itself refuses a Flush without the lock, EROFS).
            self.refused.push(IoCompletion {
                tag,
                buf,
                result: Ok(()),
            });
            return self.notifier.wake();
        }
        if self.free.is_empty() {
            self.grow();
        }
        let Some(idx) = self.free.pop() else {
            return self.refuse(tag, buf, io::Error::from_raw_os_error(libc::EBUSY));
        };
        let image = self.image.handle;
        // Sub-operations: one per Deallocate range, else one.
        let ops = match op {
            IoOp::Deallocate { ranges } => ranges,
            _ => 1,
        };
        if ops == 0 {
            // Nothing to deallocate: done, through the same path as a refusal.
            self.free.push(idx);
            self.refused.push(IoCompletion {
                tag,
                buf,
                result: Ok(()),
            });
            return self.notifier.wake();
        }
        if let IoOp::Read { len, .. } = op {
            buf.set_len(len as usize);
        }
        let ptr = buf.as_mut_ptr();
        // Deallocate's ranges, read before the buffer moves into the slot.
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        if let IoOp::Deallocate { ranges: n } = op {
            ranges.extend((0..n).map(|i| dealloc_range(&buf, i)));
        }
        let shared = &self.shared[idx as usize];
        shared.pending.store(ops, Ordering::Release);
        shared.error.store(0, Ordering::Release);
        self.state[idx as usize] = SlotState {
            tag,
            buf: Some(buf),
            then_flush: matches!(
                op,
                IoOp::Write { fua: true, .. }
                    | IoOp::WriteZeroes { fua: true, .. }
                    | IoOp::CompareAndWrite { fua: true, .. }
            ),
            busy: true,
        };
        // SAFETY (all arms): the image is open; `ptr` points into the slot's
        // buffer, which stays in the slot (unmoved heap memory) until the
        // operation completed; lengths were checked against it by `validate`.
        match op {
            IoOp::Read { offset, len } => self.issue(idx, |c| {
                // SAFETY: as above.
                unsafe { sys::rbd_aio_read(image, offset, len as usize, ptr.cast(), c) }
            }),
            IoOp::Write { offset, len, .. } => self.issue(idx, |c| {
                // SAFETY: as above.
                unsafe { sys::rbd_aio_write(image, offset, len as usize, ptr.cast(), c) }
            }),
            IoOp::Flush => self.issue(idx, |c| {
                // SAFETY: as above.
                unsafe { sys::rbd_aio_flush(image, c) }
            }),
            // The compare data, then the write data.
            IoOp::CompareAndWrite { offset, len, .. } => {
                self.compare_and_write(idx, offset, len, ptr.cast_const())
            }
            IoOp::WriteZeroes { offset, len, .. } => self.issue(idx, |c| {
                // SAFETY: as above.
                unsafe { sys::rbd_aio_write_zeroes(image, offset, len as usize, c, 0, 0) }
            }),
            // Write Zeroes rather than discard: librbd skips the parts of a
            // discard smaller than an object, and deallocated blocks must
            // read back as zeroes (DLFEAT); librbd still deallocates whole
            // objects.
            IoOp::Deallocate { .. } => {
                for &(offset, len) in &ranges {
                    self.issue(idx, |c| {
                        // SAFETY: as above.
                        unsafe { sys::rbd_aio_write_zeroes(image, offset, len as usize, c, 0, 0) }
                    });
                }
            }
        }
        self.ranges = ranges;
    }

    fn commit(&mut self) -> io::Result<()> {
        // librbd dispatches each request when it is submitted.
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        // The worker reaps after each pass that submitted (twice per QD 1
        // read, measured with strace), not only when the eventfd fired:
        // an empty read(2) per reap would be a syscall for nothing.
        self.notifier.take_wake();
        let mut n = self.refused.len();
        out.append(&mut self.refused);
        while let Ok(idx) = self.done.try_recv() {
            if self.complete(idx, out) {
                n += 1;
            }
        }
        self.in_flight -= n;
        n
    }

    fn notify_fd(&self) -> Option<RawFd> {
        Some(self.notifier.eventfd.as_raw_fd())
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for RbdQueue {
    /// Waits for the requests still inside librbd (their callbacks point at
    /// this queue's slots). Each is bounded by the OSD operation timeout; if
    /// librbd still holds some after twice that, the slots are leaked rather
    /// than freed under a callback.
    fn drop(&mut self) {
        let mut busy = self.state.iter().filter(|s| s.busy).count();
        let limit = self.image.osd_op_timeout.max(Duration::from_secs(5)) * 2;
        let deadline = Instant::now() + limit;
        while busy > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(idx) = self.done.recv_timeout(left) else {
                tracing::error!(
                    "{busy} RBD requests still in librbd after {limit:?}; leaking their slots"
                );
                std::mem::forget(std::mem::take(&mut self.shared));
                return;
            };
            let st = &mut self.state[idx as usize];
            if st.busy {
                st.busy = false;
                busy -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eventfd's count, 0 when it is not readable (a non-blocking read,
    /// which clears it).
    fn count(n: &Notifier) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live local from the notifier's eventfd.
        let r = unsafe { libc::read(n.eventfd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if r == 8 {
            v
        } else {
            0
        }
    }

    fn notifier() -> (Notifier, Receiver<u32>) {
        let (tx, rx) = channel();
        let n = Notifier {
            done: tx,
            signaled: AtomicBool::new(false),
            eventfd: eventfd().expect("eventfd"),
        };
        (n, rx)
    }

    #[test]
    fn the_eventfd_is_written_once_per_batch_and_read_only_after_a_wake() {
        let (n, rx) = notifier();
        // Nothing announced: the reap reads nothing.
        assert!(!n.take_wake());
        assert_eq!(count(&n), 0);
        // Two completions and a refusal before the worker reaps: one
        // eventfd write.
        n.announce(3);
        n.announce(5);
        n.wake();
        assert_eq!(count(&n), 1);
        // (`count` consumed it; the flag still says a wake happened.)
        assert!(n.take_wake(), "the reap after a wake reads the eventfd");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![3, 5]);
        // A completion after the reap wakes the worker again, and the
        // reap clears the eventfd.
        n.announce(7);
        assert!(n.take_wake());
        assert_eq!(count(&n), 0, "the reap cleared the eventfd");
        assert_eq!(rx.try_recv(), Ok(7));
        // A second reap with nothing new reads nothing.
        assert!(!n.take_wake());
    }
}
