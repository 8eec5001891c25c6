//! The output queue: what a queue pair has to send, PDU header bytes
//! inline and read data by reference to the backend buffer it was read
//! into, so a transport can hand it all to one `writev` without copying the
//! data first. In a module of its own since the queue pair (`queue.rs`)
//! holds it and the transmit path (`tx.rs`) uses the queue pair: no module
//! cycle.

use farflash_backend::{BufPool, IoBuf};
use std::collections::VecDeque;
use std::io::IoSlice;

enum Seg {
    /// The next `len` bytes of the inline buffer.
    Inline(usize),
    /// `start..end` of data buffer `buf` (an index into `bufs`).
    Data {
        buf: usize,
        start: usize,
        end: usize,
    },
}

#[derive(Default)]
pub(crate) struct OutQueue {
    bytes: Vec<u8>,
    /// Start of the unsent inline bytes.
    head: usize,
    segs: VecDeque<Seg>,
    /// Bytes of the front segment already sent.
    front_done: usize,
    /// Data buffers with the number of segments still referring to them.
    bufs: Vec<Option<(IoBuf, u32)>>,
    free_bufs: Vec<usize>,
    len: usize,
    /// Bytes of the data buffers held.
    held_bytes: usize,
}

impl OutQueue {
    /// Segments waiting (one `iovec` each).
    pub fn segments(&self) -> usize {
        self.segs.len()
    }

    /// Bytes waiting to be sent.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of read data held until the socket takes them.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Appends `n` zeroed inline bytes and returns them for filling.
    pub fn append(&mut self, n: usize) -> &mut [u8] {
        let start = self.bytes.len();
        self.bytes.resize(start + n, 0);
        match self.segs.back_mut() {
            Some(Seg::Inline(l)) => *l += n,
            _ => self.segs.push_back(Seg::Inline(n)),
        }
        self.len += n;
        &mut self.bytes[start..]
    }

    pub fn extend(&mut self, b: &[u8]) {
        self.append(b.len()).copy_from_slice(b);
    }

    /// Takes ownership of `buf` for `refs` data segments added with [`Self::push_data`].
    pub fn hold(&mut self, buf: IoBuf, refs: u32) -> usize {
        self.held_bytes += buf.len();
        match self.free_bufs.pop() {
            Some(i) => {
                self.bufs[i] = Some((buf, refs));
                i
            }
            None => {
                self.bufs.push(Some((buf, refs)));
                self.bufs.len() - 1
            }
        }
    }

    /// Bytes `start..end` of held buffer `buf` (empty if it is not held).
    pub fn held(&self, buf: usize, start: usize, end: usize) -> &[u8] {
        match self.bufs.get(buf) {
            Some(Some((b, _))) => &b.as_slice()[start..end],
            _ => &[],
        }
    }

    /// Queues `start..end` of a held buffer.
    pub fn push_data(&mut self, buf: usize, start: usize, end: usize) {
        self.segs.push_back(Seg::Data { buf, start, end });
        self.len += end - start;
    }

    /// Fills `iov` with the unsent bytes, in order; returns how many slices.
    pub fn slices<'a>(&'a self, iov: &mut [IoSlice<'a>]) -> usize {
        let mut pos = self.head;
        let mut n = 0;
        for (i, seg) in self.segs.iter().enumerate() {
            if n == iov.len() {
                break;
            }
            let skip = if i == 0 { self.front_done } else { 0 };
            let s: &[u8] = match *seg {
                Seg::Inline(l) => {
                    let s = &self.bytes[pos + skip..pos + l];
                    pos += l;
                    s
                }
                Seg::Data { buf, start, end } => match &self.bufs[buf] {
                    Some((b, _)) => &b.as_slice()[start + skip..end],
                    None => &[],
                },
            };
            iov[n] = IoSlice::new(s);
            n += 1;
        }
        n
    }

    /// `n` bytes were sent: drops what they covered, returning finished
    /// data buffers to `pool`.
    pub fn consume(&mut self, mut n: usize, pool: &mut BufPool) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let Some(seg) = self.segs.front() else { break };
            let seg_len = match *seg {
                Seg::Inline(l) => l,
                Seg::Data { start, end, .. } => end - start,
            };
            let left = seg_len - self.front_done;
            if n < left {
                self.front_done += n;
                break;
            }
            n -= left;
            self.front_done = 0;
            match self.segs.pop_front() {
                Some(Seg::Inline(l)) => self.head += l,
                Some(Seg::Data { buf, .. }) => self.release(buf, pool),
                None => {}
            }
        }
        if self.segs.is_empty() {
            self.bytes.clear();
            self.head = 0;
        } else if self.head > 1 << 20 && self.front_done == 0 {
            self.bytes.drain(..self.head);
            self.head = 0;
        }
    }

    fn release(&mut self, buf: usize, pool: &mut BufPool) {
        if let Some(slot) = self.bufs.get_mut(buf) {
            if let Some((_, refs)) = slot.as_mut() {
                *refs -= 1;
                if *refs == 0 {
                    if let Some((b, _)) = slot.take() {
                        self.held_bytes -= b.len();
                        pool.put(b);
                    }
                    self.free_bufs.push(buf);
                }
            }
        }
    }

    /// Everything unsent, copied out and consumed (for tests and fuzzers).
    pub fn take_all(&mut self, pool: &mut BufPool) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        while self.len > 0 {
            let before = v.len();
            {
                let mut iov = [IoSlice::new(&[]); 64];
                let n = self.slices(&mut iov);
                for s in &iov[..n] {
                    v.extend_from_slice(s);
                }
            }
            let took = v.len() - before;
            self.consume(took, pool);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_data_in_order_across_partial_sends() {
        let mut pool = BufPool::new();
        let mut q = OutQueue::default();
        q.extend(b"hdr1");
        let mut b = pool.get(8);
        b.as_mut_slice().copy_from_slice(b"ABCDEFGH");
        let id = q.hold(b, 2);
        q.push_data(id, 0, 4);
        q.extend(b"hdr2");
        q.push_data(id, 4, 8);
        q.extend(b"!");
        assert_eq!(q.len(), 4 + 4 + 4 + 4 + 1);
        {
            let mut iov = [IoSlice::new(&[]); 8];
            assert_eq!(q.slices(&mut iov), 5);
        }
        // Send 6 bytes, then look again.
        q.consume(6, &mut pool);
        let mut iov = [IoSlice::new(&[]); 8];
        let n = q.slices(&mut iov);
        let rest: Vec<u8> = iov[..n].iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(rest, b"CDhdr2EFGH!");
        assert_eq!(pool.cached(), 0);
        assert_eq!(q.take_all(&mut pool), b"CDhdr2EFGH!");
        assert!(q.is_empty());
        assert_eq!(pool.cached(), 1, "the data buffer went back to the pool");
    }
}
