//! The seam between the host's NVMe logic and its transports: a
//! [`HostTransport`] is one queue pair of some NVMe-oF binding (submit a
//! capsule on a CID slot with its data, collect completions, read data
//! back from the slot), and a [`Connector`] opens one. The admin queue,
//! controller bring-up, discovery, Identify and the I/O queue
//! ([`crate::AdminQueue`], [`crate::Controller`], [`crate::IoQueue`]) are
//! written against these traits only.
//!
//! NVMe/TCP ([`crate::socket::Conn`]) is built in and used when
//! [`crate::ConnectOptions::connector`] is `None`; other bindings (RDMA:
//! `farflash_rdma_verbs::RdmaConnector`) live in crates of their own and
//! are handed in through that field, so this crate links no C library.

use crate::error::{HostError, Result};
use crate::slot::{Completion, DataDir};
use farflash_wire::Sqe;
use std::time::{Duration, Instant};

/// One queue pair, owned by one thread at a time. CIDs are `0..depth`;
/// each has a data buffer preallocated (or grown, on the admin queue,
/// by [`HostTransport::ensure_buf`]) so that the I/O path never allocates.
pub trait HostTransport: Send {
    /// Command slots (the queue depth).
    fn depth(&self) -> u16;
    /// Commands taken with `alloc_cid` or submitted and not yet completed.
    fn outstanding(&self) -> usize;
    /// Takes a free CID, if any.
    fn alloc_cid(&mut self) -> Option<u16>;
    /// Returns a CID taken with `alloc_cid` but never submitted.
    fn release_cid(&mut self, cid: u16);
    /// The slot buffer of `cid` (read data after completion).
    fn buf(&self, cid: u16) -> &[u8];
    /// The slot buffer of an idle `cid`, for write data; `None` in flight.
    fn buf_mut(&mut self, cid: u16) -> Option<&mut [u8]>;
    /// Grows an idle slot's buffer to at least `len` bytes.
    fn ensure_buf(&mut self, cid: u16, len: usize) -> Result<()>;
    /// Queues the command `sqe` on `cid` with `len` bytes moving in `dir`
    /// (write data is taken from the slot buffer). Nothing need reach the
    /// wire before [`HostTransport::send_queued`] or `progress`.
    fn submit(&mut self, cid: u16, sqe: Sqe, dir: DataDir, len: u32) -> Result<()>;
    /// Hands what is queued to the wire now, without receiving; true when
    /// all of it went out.
    fn send_queued(&mut self) -> Result<bool>;
    /// Sends what is queued, takes in what arrived and appends finished
    /// commands to `out`. Never blocks.
    fn progress(&mut self, out: &mut Vec<Completion>) -> Result<()>;
    /// Sleeps until `progress` may find something (or bytes may be sent),
    /// at most `ms` milliseconds.
    fn wait_ready(&mut self, ms: i32) -> Result<()>;
    /// Sends what is queued, sleeps until something arrives (at most `ms`
    /// milliseconds), takes it in and appends finished commands to `out`:
    /// `send_queued`, `wait_ready`, `progress`, which a transport may do in
    /// fewer system calls (a blocking NVMe/TCP host's whole wait is one
    /// `poll(2)`).
    fn wait_progress(&mut self, ms: i32, out: &mut Vec<Completion>) -> Result<()> {
        self.send_queued()?;
        self.wait_ready(ms)?;
        self.progress(out)
    }
    /// Sends what is queued, sleeps until something arrives or `timeout`
    /// passes, with the transport's precision (a hybrid-polling host's
    /// nap: tens of microseconds), takes it in and appends finished
    /// commands to `out`. `Unsupported` (the default): the transport
    /// cannot sleep that precisely; it did one `progress` instead.
    fn nap_progress(&mut self, timeout: Duration, out: &mut Vec<Completion>) -> Result<Napped> {
        let _ = timeout;
        self.progress(out)?;
        Ok(Napped::Unsupported)
    }
    /// Best effort orderly close within `timeout`.
    fn close(&mut self, timeout: Duration);
    /// NVMe/TCP's MAXH2CDATA from the ICResp; 0 on other transports.
    fn maxh2cdata(&self) -> u32 {
        0
    }
}

/// How a [`HostTransport::nap_progress`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Napped {
    /// Something arrived (or the socket became writable) before the timeout.
    Woken,
    /// The timeout passed first.
    Timeout,
    /// The transport cannot sleep precisely; it did not sleep.
    Unsupported,
}

/// Drives `t` until `cid` completes or `deadline` passes; completions of
/// other commands are appended to `others`.
pub fn wait_for(
    t: &mut dyn HostTransport,
    cid: u16,
    deadline: Instant,
    what: &'static str,
    others: &mut Vec<Completion>,
) -> Result<Completion> {
    loop {
        let start = others.len();
        t.progress(others)?;
        if let Some(i) = others[start..].iter().position(|c| c.cid == cid) {
            return Ok(others.remove(start + i));
        }
        if others.len() == start {
            let now = Instant::now();
            if now >= deadline {
                return Err(HostError::Timeout(what));
            }
            let ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
            t.wait_ready(ms)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_wire::{Cqe, Status};

    /// A queue pair whose completions arrive on a script: `arrivals[i]`
    /// is what the i-th `progress` finds.
    struct Scripted {
        arrivals: Vec<Vec<u16>>,
        calls: usize,
        waits: usize,
    }

    impl HostTransport for Scripted {
        fn depth(&self) -> u16 {
            4
        }
        fn outstanding(&self) -> usize {
            0
        }
        fn alloc_cid(&mut self) -> Option<u16> {
            None
        }
        fn release_cid(&mut self, _: u16) {}
        fn buf(&self, _: u16) -> &[u8] {
            &[]
        }
        fn buf_mut(&mut self, _: u16) -> Option<&mut [u8]> {
            None
        }
        fn ensure_buf(&mut self, _: u16, _: usize) -> Result<()> {
            Ok(())
        }
        fn submit(&mut self, _: u16, _: Sqe, _: DataDir, _: u32) -> Result<()> {
            Ok(())
        }
        fn send_queued(&mut self) -> Result<bool> {
            Ok(true)
        }
        fn progress(&mut self, out: &mut Vec<Completion>) -> Result<()> {
            if let Some(cids) = self.arrivals.get(self.calls) {
                out.extend(cids.iter().map(|&cid| Completion {
                    cid,
                    cqe: Cqe {
                        cid,
                        status: Status(0),
                        ..Default::default()
                    },
                    dir: DataDir::None,
                    expected: 0,
                    transferred: 0,
                    digest_error: false,
                }));
            }
            self.calls += 1;
            Ok(())
        }
        fn wait_ready(&mut self, ms: i32) -> Result<()> {
            assert!(ms >= 1);
            self.waits += 1;
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        }
        fn close(&mut self, _: Duration) {}
    }

    #[test]
    fn wait_for_keeps_other_completions_and_sleeps_only_when_idle() {
        let mut t = Scripted {
            arrivals: vec![vec![], vec![3, 1], vec![], vec![0, 2]],
            calls: 0,
            waits: 0,
        };
        let mut others = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let c = wait_for(&mut t, 0, deadline, "cid 0", &mut others).unwrap();
        assert_eq!(c.cid, 0);
        // 3 and 1 came first, 2 with 0: all kept, in arrival order.
        let rest: Vec<u16> = others.iter().map(|c| c.cid).collect();
        assert_eq!(rest, [3, 1, 2]);
        // It slept after the two empty polls only.
        assert_eq!(t.waits, 2);
    }

    #[test]
    fn wait_for_ends_with_a_timeout_naming_the_wait() {
        let mut t = Scripted {
            arrivals: vec![vec![1]],
            calls: 0,
            waits: 0,
        };
        let mut others = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(20);
        let e = wait_for(&mut t, 0, deadline, "the answer", &mut others).unwrap_err();
        assert!(matches!(e, HostError::Timeout("the answer")), "{e}");
        assert_eq!(others.len(), 1);
        assert!(t.waits >= 1);
    }
}
