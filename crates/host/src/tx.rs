//! The outgoing byte queue of a queue pair: PDU headers (and digests) live
//! in a small arena, data is referenced in place in the command's slot
//! buffer, and the whole queue is handed to the socket as one `writev`.

use std::collections::VecDeque;
use std::io::IoSlice;

/// One piece of the outgoing stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    /// `arena[start..end]`.
    Arena { start: usize, end: usize },
    /// `slot_buf[cid][start..end]`.
    Data { cid: u16, start: usize, end: usize },
}

impl Seg {
    fn len(&self) -> usize {
        match *self {
            Seg::Arena { start, end } | Seg::Data { start, end, .. } => end - start,
        }
    }
}

/// Arena size above which consumed bytes are compacted away.
const COMPACT_AT: usize = 64 * 1024;

#[derive(Debug, Default)]
pub(crate) struct TxQueue {
    arena: Vec<u8>,
    segs: VecDeque<Seg>,
    /// Bytes of the first segment already written.
    head_done: usize,
    /// Total bytes still to send.
    pending: usize,
}

impl TxQueue {
    pub(crate) fn with_capacity(arena: usize, segs: usize) -> TxQueue {
        TxQueue {
            arena: Vec::with_capacity(arena),
            segs: VecDeque::with_capacity(segs),
            head_done: 0,
            pending: 0,
        }
    }

    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Appends `n` zeroed arena bytes as one segment and returns them for
    /// the caller to fill.
    pub(crate) fn push_arena(&mut self, n: usize) -> &mut [u8] {
        let start = self.arena.len();
        self.arena.resize(start + n, 0);
        self.push_seg(Seg::Arena {
            start,
            end: start + n,
        });
        &mut self.arena[start..start + n]
    }

    pub(crate) fn push_data(&mut self, cid: u16, start: usize, end: usize) {
        if end > start {
            self.push_seg(Seg::Data { cid, start, end });
        }
    }

    fn push_seg(&mut self, s: Seg) {
        // Adjacent arena pieces merge, keeping the iovec count low.
        if let (Some(Seg::Arena { end, .. }), Seg::Arena { start, end: e2 }) =
            (self.segs.back_mut(), s)
        {
            if *end == start {
                *end = e2;
                self.pending += e2 - start;
                return;
            }
        }
        self.pending += s.len();
        self.segs.push_back(s);
    }

    /// Fills `iov` with the pending bytes (as many segments as fit);
    /// `data(cid)` gives a slot's buffer. Returns the number used.
    pub(crate) fn fill<'a>(
        &'a self,
        iov: &mut [IoSlice<'a>],
        data: impl Fn(u16) -> &'a [u8],
    ) -> usize {
        let mut n = 0;
        for (i, s) in self.segs.iter().enumerate() {
            if n == iov.len() {
                break;
            }
            let skip = if i == 0 { self.head_done } else { 0 };
            let bytes = match *s {
                Seg::Arena { start, end } => &self.arena[start + skip..end],
                Seg::Data { cid, start, end } => &data(cid)[start + skip..end],
            };
            iov[n] = IoSlice::new(bytes);
            n += 1;
        }
        n
    }

    /// Marks `n` bytes as sent; calls `released(cid)` for every data
    /// segment fully sent.
    pub(crate) fn advance(&mut self, mut n: usize, mut released: impl FnMut(u16)) {
        debug_assert!(n <= self.pending);
        n = n.min(self.pending);
        self.pending -= n;
        while n > 0 {
            let Some(s) = self.segs.front() else { break };
            let left = s.len() - self.head_done;
            if n < left {
                self.head_done += n;
                break;
            }
            n -= left;
            self.head_done = 0;
            if let Some(Seg::Data { cid, .. }) = self.segs.pop_front() {
                released(cid);
            }
        }
        self.compact();
    }

    fn compact(&mut self) {
        if self.segs.is_empty() {
            self.arena.clear();
            return;
        }
        if self.arena.len() < COMPACT_AT {
            return;
        }
        let first = self.segs.iter().find_map(|s| match *s {
            Seg::Arena { start, .. } => Some(start),
            Seg::Data { .. } => None,
        });
        let Some(first) = first else {
            self.arena.clear();
            return;
        };
        if first == 0 {
            return;
        }
        self.arena.drain(..first);
        for s in self.segs.iter_mut() {
            if let Seg::Arena { start, end } = s {
                *start -= first;
                *end -= first;
            }
        }
    }

    /// Drops everything queued (the connection is going away); data
    /// segments are reported through `released`.
    pub(crate) fn clear(&mut self, mut released: impl FnMut(u16)) {
        for s in self.segs.drain(..) {
            if let Seg::Data { cid, .. } = s {
                released(cid);
            }
        }
        self.arena.clear();
        self.head_done = 0;
        self.pending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_advance_and_release() {
        let data = [vec![1u8; 10], vec![2u8; 10]];
        let mut q = TxQueue::default();
        q.push_arena(3).copy_from_slice(b"abc");
        q.push_arena(2).copy_from_slice(b"de");
        q.push_data(1, 2, 6);
        q.push_arena(1)[0] = b'z';
        assert_eq!(q.pending(), 10);
        {
            let mut iov = [IoSlice::new(&[]); 8];
            let n = q.fill(&mut iov, |c| &data[c as usize]);
            assert_eq!(n, 3);
            assert_eq!(&*iov[0], b"abcde");
            assert_eq!(&*iov[1], &[2, 2, 2, 2]);
        }
        let mut rel = vec![];
        q.advance(7, |c| rel.push(c));
        assert!(rel.is_empty());
        {
            let mut iov = [IoSlice::new(&[]); 8];
            let n = q.fill(&mut iov, |c| &data[c as usize]);
            assert_eq!(n, 2);
            assert_eq!(iov[0].len(), 2);
        }
        q.advance(3, |c| rel.push(c));
        assert_eq!(rel, vec![1]);
        assert!(q.pending() == 0);
    }

    #[test]
    fn compaction_keeps_pending_bytes() {
        let mut q = TxQueue::default();
        for i in 0..10_000u32 {
            q.push_arena(8).copy_from_slice(&(i as u64).to_le_bytes());
            q.push_data(0, 0, 1);
            q.advance(9.min(q.pending()), |_| {});
        }
        q.push_arena(8).copy_from_slice(b"12345678");
        q.push_data(0, 0, 1);
        q.push_arena(8).copy_from_slice(b"abcdefgh");
        q.advance(4, |_| {});
        let data = [0u8; 1];
        let mut iov = [IoSlice::new(&[]); 4];
        let n = q.fill(&mut iov, |_| &data);
        assert_eq!(n, 3);
        assert_eq!(&*iov[0], b"5678");
        assert_eq!(&*iov[2], b"abcdefgh");
        assert!(q.arena.len() < 100);
    }
}
