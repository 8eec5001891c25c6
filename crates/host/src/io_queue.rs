//! A poll-driven I/O queue (one queue pair of any transport, one thread: `Send`, not
//! `Sync`). Reads and writes are submitted on CID slots whose buffers are
//! preallocated at connect time; [`IoQueue::poll`] sends everything queued
//! (one `writev` on TCP, one chain of work requests on RDMA), receives what
//! arrived and returns completions. No
//! allocation happens on that path. Blocking helpers cover one-off
//! commands (Flush, Write Zeroes, DSM) for tools and tests.

use crate::cmd;
use crate::error::{HostError, Result};
use crate::info::ControllerInfo;
use crate::options::ConnectOptions;
use crate::queue::QueueConfig;
use crate::slot::{Completion, DataDir};
use crate::transport::{self, HostTransport, Napped};
use farflash_wire::fabrics::{ConnectData, CONNECT_DATA_LEN};
use farflash_wire::{Sqe, Status};
use std::time::{Duration, Instant};

/// Per-queue settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoQueueOptions {
    /// Commands in flight at most (Connect SQSIZE = depth - 1).
    pub depth: u16,
    /// Bytes preallocated per slot: the largest read or write.
    pub max_io: u32,
}

impl Default for IoQueueOptions {
    fn default() -> Self {
        IoQueueOptions {
            depth: 32,
            max_io: 128 * 1024,
        }
    }
}

/// Polls without any completion before the clock is checked for a timeout.
const IDLE_POLLS_PER_CLOCK_CHECK: u32 = 1024;

pub struct IoQueue {
    conn: Box<dyn HostTransport>,
    qid: u16,
    max_io: u32,
    timeout: Duration,
    idle_polls: u32,
    idle_since: Option<Instant>,
    held: Vec<Completion>,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl IoQueue {
    /// Connects I/O queue `qid` of the controller described by `info`
    /// (Fabrics §6.3: Connect with QID, SQSIZE and the admin queue's CNTLID).
    pub fn connect(
        opts: &ConnectOptions,
        info: &ControllerInfo,
        qid: u16,
        o: IoQueueOptions,
    ) -> Result<IoQueue> {
        if qid == 0 || qid > info.io_queues {
            return Err(HostError::Invalid(format!(
                "I/O queue {qid} not in 1..={} granted by the controller",
                info.io_queues
            )));
        }
        let max_depth = info.max_queue_depth();
        if o.depth == 0 || o.depth > max_depth {
            return Err(HostError::Invalid(format!(
                "queue depth {} not in 1..={max_depth} (CAP.MQES+1, MAXCMD)",
                o.depth
            )));
        }
        if o.max_io > info.max_transfer() {
            return Err(HostError::Invalid(format!(
                "I/O size {} exceeds the controller's MDTS limit {}",
                o.max_io,
                info.max_transfer()
            )));
        }
        let buf = o.max_io.max(CONNECT_DATA_LEN as u32);
        let cfg = QueueConfig {
            depth: o.depth,
            slot_buf: buf as usize,
            max_data: buf,
            icd_max: info.icd_max(),
            hdgst: opts.hdr_digest,
            ddgst: opts.data_digest,
        };
        let conn = opts.open_queue(qid, cfg)?;
        let mut q = IoQueue {
            conn,
            qid,
            max_io: o.max_io,
            timeout: opts.command_timeout,
            idle_polls: 0,
            idle_since: None,
            held: Vec::with_capacity(o.depth as usize),
            _not_sync: std::marker::PhantomData,
        };
        let data = ConnectData {
            hostid: opts.hostid,
            cntlid: info.cntlid,
            subnqn: opts.subnqn.clone(),
            hostnqn: opts.hostnqn.clone(),
        };
        let mut b = [0u8; CONNECT_DATA_LEN];
        data.encode(&mut b);
        // The 1024-byte Connect data goes in-capsule when IOCCSZ allows,
        // else by R2T/H2CData (the queue pair decides, as for any write).
        let cattr = if opts.disable_sqflow {
            farflash_wire::fabrics::CATTR_DISABLE_SQ_FLOW_CONTROL
        } else {
            0
        };
        let dw0 = q
            .execute(
                cmd::connect_cattr(qid, o.depth, 0, cattr),
                DataDir::ToCtrl,
                &b,
                0,
            )?
            .check()
            .map_err(|e| match e {
                HostError::Nvme { status, .. } => {
                    HostError::Controller(format!("I/O queue {qid} Connect failed: {status}"))
                }
                e => e,
            })?;
        if crate::auth::needs_auth(opts, qid, dw0)? {
            q.authenticate(opts)?;
        }
        Ok(q)
    }

    /// One DH-HMAC-CHAP transaction on this queue (after Connect, or to
    /// re-authenticate; no other command may be in flight).
    pub fn authenticate(&mut self, opts: &ConnectOptions) -> Result<()> {
        // The slot buffers hold max(max_io, Connect data) bytes.
        let buf = self.max_io.max(CONNECT_DATA_LEN as u32);
        let al = crate::auth::AUTH_RECEIVE_LEN.min(buf);
        let qid = self.qid;
        crate::auth::authenticate(opts, qid, al, |sqe, data| {
            let (dir, d, len) = match data {
                Some(d) => (DataDir::ToCtrl, d, 0),
                None => (DataDir::FromCtrl, &[][..], al),
            };
            let c = self.execute(sqe, dir, d, len)?;
            let r = c.check();
            let n = (c.transferred as usize).min(len as usize);
            r.map(|_| self.buf(c.cid)[..n].to_vec())
        })
    }

    pub fn qid(&self) -> u16 {
        self.qid
    }
    pub fn depth(&self) -> u16 {
        self.conn.depth()
    }
    pub fn max_io(&self) -> u32 {
        self.max_io
    }
    pub fn maxh2cdata(&self) -> u32 {
        self.conn.maxh2cdata()
    }
    /// Commands in flight (submitted, completion not yet returned).
    pub fn outstanding(&self) -> usize {
        self.conn.outstanding()
    }
    pub fn alloc_cid(&mut self) -> Option<u16> {
        self.conn.alloc_cid()
    }
    pub fn release_cid(&mut self, cid: u16) {
        self.conn.release_cid(cid)
    }
    /// A slot's buffer (read data after its completion).
    pub fn buf(&self, cid: u16) -> &[u8] {
        self.conn.buf(cid)
    }
    /// A slot's buffer for filling write data; `None` while in flight.
    pub fn buf_mut(&mut self, cid: u16) -> Option<&mut [u8]> {
        self.conn.buf_mut(cid)
    }

    /// Queues any command on `cid`; nothing is sent before the next poll.
    pub fn submit(&mut self, cid: u16, sqe: Sqe, dir: DataDir, len: u32) -> Result<()> {
        self.conn.submit(cid, sqe, dir, len)
    }
    /// Queues a Read of `nlb` blocks at `slba` into slot `cid` (`len` = nlb × block size).
    pub fn submit_read(
        &mut self,
        cid: u16,
        nsid: u32,
        slba: u64,
        nlb: u32,
        len: u32,
    ) -> Result<()> {
        self.submit(cid, cmd::rw(false, nsid, slba, nlb), DataDir::FromCtrl, len)
    }
    /// Queues a Write of the first `len` bytes of slot `cid`.
    pub fn submit_write(
        &mut self,
        cid: u16,
        nsid: u32,
        slba: u64,
        nlb: u32,
        len: u32,
    ) -> Result<()> {
        self.submit(cid, cmd::rw(true, nsid, slba, nlb), DataDir::ToCtrl, len)
    }

    /// Queues a fused Compare and Write (Base §3.4.2) of `nlb` blocks at
    /// `slba`: the Compare on slot `c` (its first `len` bytes: the expected
    /// data) and, next to it, the Write on slot `w` (the new data).
    pub fn submit_compare_and_write(
        &mut self,
        (c, w): (u16, u16),
        nsid: u32,
        slba: u64,
        nlb: u32,
        len: u32,
    ) -> Result<()> {
        let (cmp, wr) = cmd::compare_and_write(nsid, slba, nlb);
        self.submit(c, cmp, DataDir::ToCtrl, len)?;
        self.submit(w, wr, DataDir::ToCtrl, len)
    }

    /// Blocking fused Compare and Write: `Ok(true)` when the blocks held
    /// `expected` and now hold `new`, `Ok(false)` on a miscompare (nothing
    /// written); any other status is an error.
    pub fn compare_and_write(
        &mut self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        expected: &[u8],
        new: &[u8],
    ) -> Result<bool> {
        if expected.len() != new.len() {
            return Err(HostError::Invalid(
                "expected and new data differ in length".into(),
            ));
        }
        let (c, w) = self.fill_pair(expected, new)?;
        let len = expected.len() as u32;
        if let Err(e) = self.submit_compare_and_write((c, w), nsid, slba, nlb, len) {
            self.release_cid(c);
            self.release_cid(w);
            return Err(e);
        }
        let deadline = Instant::now() + self.timeout;
        let cc = transport::wait_for(&mut *self.conn, c, deadline, "compare", &mut self.held)?;
        // The Write's completion may have come with the Compare's.
        let wc = match self.held.iter().position(|x| x.cid == w) {
            Some(i) => self.held.remove(i),
            None => transport::wait_for(&mut *self.conn, w, deadline, "write", &mut self.held)?,
        };
        let (cs, ws) = (cc.cqe.status, wc.cqe.status);
        if cs == Status::COMPARE_FAILURE && ws.code() == Status::FUSED_FAILED {
            return Ok(false);
        }
        cc.check()?;
        wc.check()?;
        Ok(true)
    }

    /// Two free slots holding `a` and `b`.
    fn fill_pair(&mut self, a: &[u8], b: &[u8]) -> Result<(u16, u16)> {
        let mut cids = [0u16; 2];
        for (k, d) in [a, b].into_iter().enumerate() {
            let Some(cid) = self.alloc_cid() else {
                if k == 1 {
                    self.release_cid(cids[0]);
                }
                return Err(HostError::Invalid("no free command slot".into()));
            };
            cids[k] = cid;
            match self.buf_mut(cid) {
                Some(buf) if buf.len() >= d.len() => buf[..d.len()].copy_from_slice(d),
                _ => {
                    for &c in &cids[..=k] {
                        self.release_cid(c);
                    }
                    return Err(HostError::Invalid(
                        "data larger than the slot buffer".into(),
                    ));
                }
            }
        }
        Ok((cids[0], cids[1]))
    }

    /// Sends what is queued now (TCP: one `writev` per 64 segments; RDMA:
    /// one chain of SENDs) without receiving; returns true when all of it
    /// went out. [`IoQueue::poll`] does this too; calling it first lets a
    /// caller timestamp the moment its commands reached the transport
    /// (fio's submission/completion split).
    pub fn send_queued(&mut self) -> Result<bool> {
        self.conn.send_queued()
    }

    /// Sends what is queued (as `send_queued`), receives what arrived,
    /// appends completions to `out`; returns how many. Never blocks.
    /// Errors if commands are outstanding and nothing completed for the
    /// command timeout.
    pub fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        out.append(&mut self.held);
        self.conn.progress(out)?;
        let n = out.len() - before;
        if n > 0 || self.outstanding() == 0 {
            self.idle_polls = 0;
            self.idle_since = None;
        } else {
            self.idle_polls += 1;
            if self.idle_polls >= IDLE_POLLS_PER_CLOCK_CHECK {
                self.idle_polls = 0;
                self.check_idle()?;
            }
        }
        Ok(n)
    }

    fn check_idle(&mut self) -> Result<()> {
        let now = Instant::now();
        match self.idle_since {
            None => self.idle_since = Some(now),
            Some(t) if now.duration_since(t) > self.timeout => {
                return Err(HostError::Timeout("I/O completions"))
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Like [`IoQueue::poll`] but sleeps in `poll(2)` until at least one
    /// completion arrives or `timeout` passes (then returns 0).
    pub fn wait(&mut self, out: &mut Vec<Completion>, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout.min(self.timeout);
        let before = out.len();
        out.append(&mut self.held);
        loop {
            let n = out.len() - before;
            if n > 0 || self.outstanding() == 0 {
                self.idle_polls = 0;
                self.idle_since = None;
                return Ok(n);
            }
            let now = Instant::now();
            if now >= deadline {
                self.check_idle()?;
                return Ok(0);
            }
            let ms = (deadline - now).as_millis().clamp(1, 1000) as i32;
            // Sends what is queued, sleeps, takes in what came: no poll
            // without a wait before it (a QD 1 read costs its `writev`,
            // one `poll` and one `recv`).
            self.conn.wait_progress(ms, out)?;
        }
    }

    /// A hybrid-polling host's nap: like [`IoQueue::wait`], but for at
    /// most `timeout` with the transport's precision (NVMe/TCP: `ppoll`,
    /// nanoseconds), once; how it ended ([`Napped::Unsupported`]: the
    /// transport cannot, and it polled instead). Appends completions to
    /// `out`; returns how many.
    pub fn nap(&mut self, out: &mut Vec<Completion>, timeout: Duration) -> Result<(usize, Napped)> {
        let before = out.len();
        out.append(&mut self.held);
        if out.len() > before || self.outstanding() == 0 {
            return Ok((out.len() - before, Napped::Woken));
        }
        let how = self.conn.nap_progress(timeout, out)?;
        let n = out.len() - before;
        if n > 0 {
            self.idle_polls = 0;
            self.idle_since = None;
        } else {
            self.check_idle()?;
        }
        Ok((n, how))
    }

    /// Runs one command to completion (blocking, bounded by the command
    /// timeout). `data` is written for ToCtrl; `len` bytes are read for
    /// FromCtrl (then in [`IoQueue::buf`] of the returned CID).
    pub fn execute(&mut self, sqe: Sqe, dir: DataDir, data: &[u8], len: u32) -> Result<Completion> {
        let cid = self
            .alloc_cid()
            .ok_or_else(|| HostError::Invalid("no free command slot".into()))?;
        let len = if dir == DataDir::ToCtrl {
            match self.buf_mut(cid) {
                Some(b) if b.len() >= data.len() => b[..data.len()].copy_from_slice(data),
                _ => {
                    self.release_cid(cid);
                    return Err(HostError::Invalid(
                        "data larger than the slot buffer".into(),
                    ));
                }
            }
            data.len() as u32
        } else {
            len
        };
        if let Err(e) = self.submit(cid, sqe, dir, len) {
            self.release_cid(cid);
            return Err(e);
        }
        let deadline = Instant::now() + self.timeout;
        transport::wait_for(
            &mut *self.conn,
            cid,
            deadline,
            "command completion",
            &mut self.held,
        )
    }

    /// Blocking Read of `nlb` blocks into `out` (whose length is the transfer size).
    pub fn read_at(&mut self, nsid: u32, slba: u64, nlb: u32, out: &mut [u8]) -> Result<()> {
        let c = self.execute(
            cmd::rw(false, nsid, slba, nlb),
            DataDir::FromCtrl,
            &[],
            out.len() as u32,
        )?;
        c.check()?;
        out.copy_from_slice(&self.buf(c.cid)[..out.len()]);
        Ok(())
    }
    /// Blocking Write of `data` (`nlb` blocks).
    pub fn write_at(&mut self, nsid: u32, slba: u64, nlb: u32, data: &[u8]) -> Result<()> {
        self.execute(cmd::rw(true, nsid, slba, nlb), DataDir::ToCtrl, data, 0)?
            .check()
            .map(|_| ())
    }
    /// Blocking Flush.
    pub fn flush(&mut self, nsid: u32) -> Result<()> {
        self.execute(cmd::flush(nsid), DataDir::None, &[], 0)?
            .check()
            .map(|_| ())
    }
    /// Blocking Write Zeroes of `nlb` blocks.
    pub fn write_zeroes(&mut self, nsid: u32, slba: u64, nlb: u32) -> Result<()> {
        self.execute(cmd::write_zeroes(nsid, slba, nlb), DataDir::None, &[], 0)?
            .check()
            .map(|_| ())
    }
    /// Blocking Copy (NVM Command Set §3.2.2) of `(slba, nlb)` source
    /// ranges (1..=256, `nlb` 1..=65536) to consecutive LBAs from `sdlba`.
    pub fn copy(&mut self, nsid: u32, sdlba: u64, ranges: &[(u64, u32)]) -> Result<()> {
        if ranges.is_empty() || ranges.len() > 256 {
            return Err(HostError::Invalid("Copy takes 1..=256 ranges".into()));
        }
        let mut b = vec![0u8; ranges.len() * cmd::COPY_RANGE_LEN];
        for (i, &(slba, nlb)) in ranges.iter().enumerate() {
            cmd::put_copy_range(&mut b, i, slba, nlb);
        }
        self.execute(
            cmd::copy(nsid, sdlba, ranges.len() as u32),
            DataDir::ToCtrl,
            &b,
            0,
        )?
        .check()
        .map(|_| ())
    }

    /// Blocking Dataset Management deallocate of `(slba, nlb)` ranges (at most 256).
    pub fn deallocate(&mut self, nsid: u32, ranges: &[(u64, u32)]) -> Result<()> {
        if ranges.is_empty() || ranges.len() > 256 {
            return Err(HostError::Invalid("DSM takes 1..=256 ranges".into()));
        }
        let mut b = vec![0u8; ranges.len() * cmd::DSM_RANGE_LEN];
        for (i, &(slba, nlb)) in ranges.iter().enumerate() {
            cmd::put_dsm_range(&mut b, i, slba, nlb);
        }
        self.execute(
            cmd::dsm_deallocate(nsid, ranges.len() as u32),
            DataDir::ToCtrl,
            &b,
            0,
        )?
        .check()
        .map(|_| ())
    }
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        self.conn.close(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An I/O queue moves to its job thread (Send); sharing one between
    /// threads is not possible (not Sync, by a `Cell` marker).
    #[test]
    fn io_queue_is_send() {
        fn send<T: Send>() {}
        send::<IoQueue>();
        send::<crate::Controller>();
        assert_eq!(IoQueueOptions::default().depth, 32);
    }
}
