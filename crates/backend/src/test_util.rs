//! Helpers shared by the unit tests: drive a queue to completion with a
//! bounded wait, deterministic data, temporary files.

use crate::{BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Longest a test waits for its completions before failing.
const DEADLINE: Duration = Duration::from_secs(30);

/// `len` bytes of a pattern that differs per position and per `seed`.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(i as u32 >> 9) as u8 ^ seed)
        .collect()
}

/// Submits `reqs`, commits once and reaps until all completed (waiting on
/// the notification fd, if any, with `poll`). Completions sorted by tag.
pub(crate) fn run_all(q: &mut dyn BackendQueue, reqs: Vec<IoRequest>) -> Vec<IoCompletion> {
    let want = reqs.len();
    for req in reqs {
        q.submit(req);
    }
    q.commit().expect("commit");
    let mut done = Vec::with_capacity(want);
    let start = Instant::now();
    while done.len() < want {
        if q.reap(&mut done) == 0 {
            assert!(
                start.elapsed() < DEADLINE,
                "timed out: {}/{want} done",
                done.len()
            );
            wait_readable(q.notify_fd(), 100);
        }
    }
    assert_eq!(q.in_flight(), 0);
    done.sort_by_key(|c| c.tag);
    done
}

/// Runs one request; returns its buffer on success.
pub(crate) fn run_one(q: &mut dyn BackendQueue, op: IoOp, buf: IoBuf) -> io::Result<IoBuf> {
    let mut done = run_all(q, vec![IoRequest { tag: 7, op, buf }]);
    let c = done.pop().expect("one completion");
    assert_eq!(c.tag, 7);
    c.result.map(|()| c.buf)
}

/// Waits up to `ms` for `fd` to become readable (sleeps briefly without
/// one); returns whether it did.
pub(crate) fn wait_readable(fd: Option<i32>, ms: i32) -> bool {
    match fd {
        Some(fd) => {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
        }
        None => {
            std::thread::sleep(Duration::from_millis(1));
            false
        }
    }
}

/// A unique path in `dir`, removed (if it exists) on drop.
pub(crate) struct TempPath(PathBuf);

impl TempPath {
    pub(crate) fn new(dir: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("farflash-backend-test-{}-{n}", std::process::id());
        TempPath(Path::new(dir).join(name))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
