//! Engine over a remote namespace: one farflash-host I/O queue, over
//! whichever transport it was connected with (`-t tcp` or `-t rdma`: the
//! queue's `HostTransport`), with the same slots, latency accounting and
//! `--verify` on both.

use super::{Done, Engine, ErrorKind};
use farflash_host::{Completion, HostError, IoQueue, Napped};
use std::time::Duration;

pub struct Remote {
    q: IoQueue,
    nsid: u32,
    lba_shift: u32,
    capacity: u64,
    completions: Vec<Completion>,
}

impl Remote {
    pub fn new(q: IoQueue, nsid: u32, lba_size: u32, capacity: u64) -> Remote {
        let depth = q.depth() as usize;
        Remote {
            q,
            nsid,
            lba_shift: lba_size.trailing_zeros(),
            capacity,
            completions: Vec::with_capacity(depth),
        }
    }
}

impl Engine for Remote {
    fn block_size(&self) -> u32 {
        1 << self.lba_shift
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn alloc_slot(&mut self) -> Option<u16> {
        self.q.alloc_cid()
    }
    fn buf_mut(&mut self, slot: u16) -> &mut [u8] {
        self.q.buf_mut(slot).unwrap_or(&mut [])
    }
    fn buf(&self, slot: u16) -> &[u8] {
        self.q.buf(slot)
    }
    fn submit(&mut self, slot: u16, write: bool, offset: u64, len: u32) -> anyhow::Result<()> {
        let slba = offset >> self.lba_shift;
        let nlb = len >> self.lba_shift;
        if write {
            self.q.submit_write(slot, self.nsid, slba, nlb, len)?;
        } else {
            self.q.submit_read(slot, self.nsid, slba, nlb, len)?;
        }
        Ok(())
    }
    fn commit(&mut self) -> anyhow::Result<()> {
        self.q.send_queued()?;
        Ok(())
    }
    fn poll(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize> {
        self.q.poll(&mut self.completions)?;
        Ok(self.take(out))
    }
    fn wait(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize> {
        self.q
            .wait(&mut self.completions, Duration::from_millis(100))?;
        Ok(self.take(out))
    }
    fn nap(
        &mut self,
        out: &mut Vec<Done>,
        timeout: Duration,
    ) -> anyhow::Result<(usize, Option<bool>)> {
        let (_, how) = self.q.nap(&mut self.completions, timeout)?;
        let woken = match how {
            Napped::Woken => Some(true),
            Napped::Timeout => Some(false),
            Napped::Unsupported => None,
        };
        Ok((self.take(out), woken))
    }
    fn release(&mut self, slot: u16) {
        self.q.release_cid(slot);
    }
}

impl Remote {
    /// Moves the queue's completions to `out`; returns how many.
    fn take(&mut self, out: &mut Vec<Done>) -> usize {
        let n = self.completions.len();
        for c in self.completions.drain(..) {
            let error = match c.check() {
                Ok(_) => None,
                Err(HostError::Nvme { status, .. }) => Some(ErrorKind::Status(status.0)),
                Err(HostError::DataDigest { .. }) => Some(ErrorKind::DataDigest),
                Err(_) => Some(ErrorKind::ShortTransfer),
            };
            out.push(Done { slot: c.cid, error });
        }
        n
    }
}
