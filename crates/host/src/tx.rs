//! The outgoing byte queue of a queue pair: PDU headers (and digests) live
//! in a small arena, data is referenced in place in the command's slot
//! buffer, and the whole queue is handed to the socket as one `writev`.
//! PDU boundaries are remembered (as stream offsets), so that dropping the
//! queue on a fatal error never cuts a PDU that is partly on the wire.

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
    /// Stream offset (bytes ever pushed) of the end of the queue.
    pushed: u64,
    /// Stream offsets where the PDUs not yet fully sent begin, oldest first;
    /// the first one is the PDU in progress (or the next to go).
    pdu_starts: VecDeque<u64>,
}

impl TxQueue {
    pub(crate) fn with_capacity(arena: usize, segs: usize) -> TxQueue {
        TxQueue {
            arena: Vec::with_capacity(arena),
            segs: VecDeque::with_capacity(segs),
            head_done: 0,
            pending: 0,
            pushed: 0,
            pdu_starts: VecDeque::with_capacity(segs),
        }
    }

    /// Bytes ever sent (stream offset of the next byte to send).
    fn sent(&self) -> u64 {
        self.pushed - self.pending as u64
    }

    /// Marks the start of a PDU: call before pushing its first segment.
    pub(crate) fn begin_pdu(&mut self) {
        self.pdu_starts.push_back(self.pushed);
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
                self.pushed += (e2 - start) as u64;
                return;
            }
        }
        self.pending += s.len();
        self.pushed += s.len() as u64;
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
        let sent = self.sent();
        while self.pdu_starts.len() >= 2 && self.pdu_starts[1] <= sent {
            self.pdu_starts.pop_front();
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

    /// Drops what is queued because the connection is going away, except
    /// the rest of a PDU already partly sent (the peer must be able to cut
    /// the stream into whole PDUs, TCP §3.6.1). Data segments dropped are
    /// reported through `released`.
    pub(crate) fn clear(&mut self, mut released: impl FnMut(u16)) {
        let sent = self.sent();
        // Bytes to keep: up to the end of the PDU in progress, if any.
        let keep = match self.pdu_starts.front() {
            Some(&start) if start < sent => {
                let end = self.pdu_starts.get(1).copied().unwrap_or(self.pushed);
                (end - sent) as usize
            }
            _ => 0,
        };
        let mut left = keep;
        let mut kept = VecDeque::with_capacity(self.segs.len().min(4));
        for (i, mut seg) in self.segs.drain(..).enumerate() {
            let skip = if i == 0 { self.head_done } else { 0 };
            let avail = seg.len() - skip;
            if left == 0 {
                if let Seg::Data { cid, .. } = seg {
                    released(cid);
                }
                continue;
            }
            if avail > left {
                // The PDU ends inside this (merged arena) segment: cut it there.
                match &mut seg {
                    Seg::Arena { start, end } | Seg::Data { start, end, .. } => {
                        *end = *start + skip + left;
                    }
                }
            }
            left -= avail.min(left);
            kept.push_back(seg);
        }
        self.segs = kept;
        if self.segs.is_empty() {
            self.arena.clear();
            self.head_done = 0;
        }
        self.pending = keep;
        self.pushed = sent + keep as u64;
        self.pdu_starts.clear();
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
    fn clear_keeps_the_rest_of_a_partly_sent_pdu() {
        let data = [vec![7u8; 100]];
        let mut q = TxQueue::default();
        // PDU 1: 8-byte header + 100 data bytes; PDU 2 and 3: headers only
        // (merged into one arena segment with PDU 1's... no: after data).
        q.begin_pdu();
        q.push_arena(8).fill(1);
        q.push_data(0, 0, 100);
        q.begin_pdu();
        q.push_arena(8).fill(2);
        q.begin_pdu();
        q.push_arena(8).fill(3);
        q.advance(50, |_| {});
        let mut rel = vec![];
        q.clear(|c| rel.push(c));
        assert!(rel.is_empty(), "the data segment in progress is kept");
        assert_eq!(q.pending(), 58);
        q.begin_pdu();
        q.push_arena(4).fill(9);
        let mut out = vec![];
        {
            let mut iov = [IoSlice::new(&[]); 8];
            let n = q.fill(&mut iov, |c| &data[c as usize]);
            for s in &iov[..n] {
                out.extend_from_slice(s);
            }
        }
        assert_eq!(out.len(), 62);
        assert_eq!(&out[58..], &[9; 4]);
        q.advance(62, |c| rel.push(c));
        assert_eq!(rel, vec![0]);

        // At a PDU boundary everything goes; a merged arena segment is cut
        // at the end of the PDU in progress.
        let mut q = TxQueue::default();
        q.begin_pdu();
        q.push_arena(8).fill(1);
        q.begin_pdu();
        q.push_arena(8).fill(2);
        q.advance(8, |_| {});
        q.clear(|_| {});
        assert_eq!(q.pending(), 0);
        let mut q = TxQueue::default();
        q.begin_pdu();
        q.push_arena(8).fill(1);
        q.begin_pdu();
        q.push_arena(8).fill(2);
        q.advance(3, |_| {});
        q.clear(|_| {});
        assert_eq!(q.pending(), 5);
        let mut iov = [IoSlice::new(&[]); 4];
        let n = q.fill(&mut iov, |_| &[]);
        assert_eq!((n, &*iov[0]), (1, &[1u8; 5][..]));
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
