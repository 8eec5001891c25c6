//! The target's helper thread for work too slow for an event loop: the
//! DH exponentiations of in-band authentication ([`Offload`]; ~20 ms each
//! for ffdhe8192, and any host that claims a keyed NQN can ask for them).
//!
//! Workers send each job with their way back (a channel and the worker's
//! waker); the thread runs jobs one at a time, in arrival order, at the
//! lowest CPU priority (nice 19). A flood of authentications therefore
//! takes the I/O threads' idle time and little else: against a busy I/O
//! thread on the same core it gets about 1.5 % of it (CFS weight 15 against
//! 1024), so under full load a transaction slows rather than the I/O. Each
//! queue has at most one job out, so the backlog is bounded by the
//! connection cap.

use farflash_core::{Offload, OffloadDone};
use mio::Waker;
use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

/// Nice value of the helper thread.
const NICE: libc::c_int = 19;

struct Job {
    work: Offload,
    back: Sender<OffloadDone>,
    waker: Arc<Waker>,
}

/// The helper thread's queue; it ends when this and every port are gone.
pub(crate) struct Offloader {
    jobs: Sender<Job>,
}

/// A worker's end: where its jobs go and its results come back.
pub(crate) struct OffloadPort {
    jobs: Sender<Job>,
    back_tx: Sender<OffloadDone>,
    back: Receiver<OffloadDone>,
    waker: Arc<Waker>,
}

impl Offloader {
    pub(crate) fn spawn() -> io::Result<Offloader> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("farflash-offload".into())
            .spawn(move || {
                lower_priority();
                while let Ok(j) = rx.recv() {
                    if j.back.send(j.work.run()).is_ok() {
                        // A failed wake means the worker is gone too.
                        let _ = j.waker.wake();
                    }
                }
            })?;
        Ok(Offloader { jobs })
    }

    /// A port for the worker that `waker` wakes.
    pub(crate) fn port(&self, waker: Arc<Waker>) -> OffloadPort {
        let (back_tx, back) = mpsc::channel();
        OffloadPort {
            jobs: self.jobs.clone(),
            back_tx,
            back,
            waker,
        }
    }
}

impl OffloadPort {
    /// Sends `work` to the helper thread; if that thread is gone (it cannot
    /// panic short of a bug), runs it here rather than lose the command.
    pub(crate) fn submit(&self, work: Offload) {
        let job = Job {
            work,
            back: self.back_tx.clone(),
            waker: self.waker.clone(),
        };
        if let Err(mpsc::SendError(j)) = self.jobs.send(job) {
            tracing::warn!("offload thread gone: running the work on the I/O thread");
            let _ = self.back_tx.send(j.work.run());
        }
    }

    /// A finished job, if any.
    pub(crate) fn try_recv(&self) -> Option<OffloadDone> {
        self.back.try_recv().ok()
    }
}

/// SCHED_IDLE for the calling thread (on Linux a scheduling policy is per
/// thread); nice 19 if that is refused.
fn lower_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0
    // is the calling thread; gettid and setpriority take and return plain
    // integers.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc == 0 {
        return;
    }
    let e = io::Error::last_os_error();
    // SAFETY: as above.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE) };
    if rc != 0 {
        tracing::warn!(
            "cannot lower the offload thread's priority: {e}; {}",
            io::Error::last_os_error()
        );
    }
}
