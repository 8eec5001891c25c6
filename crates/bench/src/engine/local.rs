//! Engine over a local file or block device: a farflash-backend queue
//! (io_uring, O_DIRECT where supported). Buffers are aligned `IoBuf`s, one
//! per slot, moved into each request and back with its completion.

use super::{Done, Engine, ErrorKind};
use farflash_backend::{BackendQueue, IoBuf, IoCompletion, IoOp, IoRequest, SharedBackend};

pub struct Local {
    _backend: SharedBackend,
    q: Box<dyn BackendQueue>,
    bufs: Vec<Option<IoBuf>>,
    free: Vec<u16>,
    reaped: Vec<IoCompletion>,
    block_size: u32,
    capacity: u64,
}

impl Local {
    pub fn new(backend: SharedBackend, depth: u16, max_io: u32) -> anyhow::Result<Local> {
        let q = backend.open_queue(depth as u32)?;
        let mut bufs = Vec::with_capacity(depth as usize);
        for _ in 0..depth {
            let mut b = IoBuf::with_capacity(max_io as usize);
            b.set_len(max_io as usize);
            bufs.push(Some(b));
        }
        Ok(Local {
            block_size: backend.block_size(),
            capacity: backend.capacity(),
            _backend: backend,
            q,
            bufs,
            free: (0..depth).rev().collect(),
            reaped: Vec::with_capacity(depth as usize),
        })
    }
}

impl Engine for Local {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn alloc_slot(&mut self) -> Option<u16> {
        self.free.pop()
    }
    fn buf_mut(&mut self, slot: u16) -> &mut [u8] {
        match self.bufs.get_mut(slot as usize) {
            Some(Some(b)) => b.as_mut_capacity(),
            _ => &mut [],
        }
    }
    fn buf(&self, slot: u16) -> &[u8] {
        match self.bufs.get(slot as usize) {
            Some(Some(b)) => b.as_slice(),
            _ => &[],
        }
    }
    fn submit(&mut self, slot: u16, write: bool, offset: u64, len: u32) -> anyhow::Result<()> {
        let Some(mut buf) = self.bufs.get_mut(slot as usize).and_then(Option::take) else {
            anyhow::bail!("slot {slot} is in flight");
        };
        buf.set_len(len as usize);
        let op = if write {
            IoOp::Write {
                offset,
                len,
                fua: false,
            }
        } else {
            IoOp::Read { offset, len }
        };
        self.q.submit(IoRequest {
            tag: slot as u64,
            op,
            buf,
        });
        Ok(())
    }
    fn commit(&mut self) -> anyhow::Result<()> {
        self.q.commit()?;
        Ok(())
    }
    fn poll(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize> {
        self.q.commit()?;
        self.q.reap(&mut self.reaped);
        let n = self.reaped.len();
        for c in self.reaped.drain(..) {
            let slot = c.tag as u16;
            let error = c
                .result
                .err()
                .map(|e| ErrorKind::Os(e.raw_os_error().unwrap_or(libc::EIO)));
            if let Some(s) = self.bufs.get_mut(slot as usize) {
                *s = Some(c.buf);
            }
            out.push(Done { slot, error });
        }
        Ok(n)
    }
    fn wait(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize> {
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        if let Some(fd) = self.q.notify_fd() {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, count 1, bounded timeout.
            unsafe { libc::poll(&mut p, 1, 100) };
        }
        self.poll(out)
    }
    fn release(&mut self, slot: u16) {
        if self.bufs.get(slot as usize).is_some_and(Option::is_some) {
            self.free.push(slot);
        }
    }
}
