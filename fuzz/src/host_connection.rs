//! `host_connection`: the host library's queue-pair state machine against a
//! hostile target: arbitrary controller-to-host bytes, interleaved with
//! commands being submitted and output being (partly) sent.
//!
//! Input: `[cfg][depth][sizes][ops...]`. `cfg`: bit 0/1 header/data
//! digests, bit 2 a valid ICResp first, bit 3 grow slot buffers on demand.
//! `sizes`: bits 0-1 max data, 2-3 in-capsule limit, 4-5 MAXH2CDATA of the
//! prefixed ICResp. Operations (`op % 8`, see [`Host::op`]) follow.
//!
//! Checked: no panic; receive errors are typed transport errors and stick;
//! every completion is for a submitted command with consistent counts; no
//! CID leaks; what the host sends cuts into well-formed host-to-controller
//! PDUs, and nothing follows its H2CTermReq.

use crate::input::Input;
use crate::stream::PduStream;
use farflash_host::queue::{QueueConfig, QueuePair};
use farflash_host::{Completion, DataDir, HostError};
use farflash_wire::pdu::{IcResp, DGST_DDGST, DGST_HDGST, IC_HLEN};
use farflash_wire::Sqe;
use std::collections::HashMap;
use std::io::IoSlice;

struct Host {
    q: QueuePair,
    tx: PduStream,
    /// Submitted, not yet completed: cid -> (direction, length).
    model: HashMap<u16, (DataDir, u32)>,
    done: Vec<Completion>,
    /// Output no longer checked (a tolerated known bug made it unparsable).
    unchecked: bool,
    completed: usize,
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let cfg = inp.u8();
    let depth = inp.u8() % 64 + 1;
    let sizes = inp.u8() as usize;
    let qc = QueueConfig {
        depth: depth as u16,
        slot_buf: if cfg & 8 != 0 { 0 } else { 4096 },
        max_data: [4096, 8192, 65536, 131072][sizes & 3],
        icd_max: [0, 4096, 8192, 8192][(sizes >> 2) & 3],
        hdgst: cfg & 1 != 0,
        ddgst: cfg & 2 != 0,
    };
    let mut h = Host {
        q: QueuePair::new(qc),
        tx: PduStream::new(true, qc.icd_max),
        model: HashMap::new(),
        done: Vec::new(),
        unchecked: false,
        completed: 0,
    };
    if cfg & 4 != 0 {
        let r = IcResp {
            pfv: 0,
            cpda: 0,
            dgst: if qc.hdgst { DGST_HDGST } else { 0 } | if qc.ddgst { DGST_DDGST } else { 0 },
            maxh2cdata: [4096, 8192, 4100, 131072][(sizes >> 4) & 3],
        };
        let mut b = [0u8; IC_HLEN];
        r.encode(&mut b);
        h.q.rx_feed(&b).expect("a valid ICResp");
        assert!(h.q.is_ready());
    }
    while !inp.is_empty() {
        h.op(&mut inp);
        h.check();
    }
    h.send(usize::MAX);
    if std::env::var_os("FUZZ_DEBUG").is_some() {
        eprintln!(
            "host: {} completions, {} in flight, dead {:?}, {} PDUs sent",
            h.completed,
            h.model.len(),
            h.q.dead(),
            h.tx.pdus
        );
    }
    assert!(
        h.unchecked || h.tx.pending() == 0,
        "host output ends inside a PDU"
    );
    h.complete();
}

impl Host {
    /// 0 bytes in, 1 submit, 2 send, 3 completions (also taken after every
    /// operation), 4 receive into the read
    /// buffer directly, 5 peer closed, 6 bytes in small pieces, 7 release a CID.
    fn op(&mut self, inp: &mut Input) {
        match inp.u8() % 8 {
            0 => {
                let n = inp.u16() as usize;
                let b = inp.take(n);
                self.feed(b);
            }
            1 => self.submit(inp),
            2 => {
                let n = inp.u16();
                self.send(if n == u16::MAX {
                    usize::MAX
                } else {
                    n as usize
                });
            }
            3 => self.complete(),
            4 => {
                let n = inp.u16() as usize;
                let b = inp.take(n);
                if let Some(buf) = self.q.rx_direct() {
                    let k = buf.len().min(b.len());
                    buf[..k].copy_from_slice(&b[..k]);
                    self.q.rx_direct_done(k);
                }
            }
            5 => {
                let e = self.q.closed();
                assert_eq!(self.q.dead(), Some(&e));
            }
            6 => {
                let n = inp.u16() as usize % 512;
                let b = inp.take(n);
                for piece in b.chunks(1 + n % 7) {
                    self.feed(piece);
                }
            }
            _ => self.q.release_cid(inp.u8() as u16),
        }
    }

    fn feed(&mut self, b: &[u8]) {
        let was_dead = self.q.dead().cloned();
        // Known bug (regressions/host_connection/h2ctermreq-after-partial-pdu):
        // a fatal error while a PDU is partly sent drops its rest and puts
        // the H2CTermReq right after the partial PDU.
        let mid_pdu = self.tx.pending() > 0;
        match self.q.rx_feed(b) {
            Ok(()) => assert!(was_dead.is_none()),
            Err(HostError::Transport(e)) => {
                // The first fatal error sticks; later calls report it again.
                assert_eq!(self.q.dead(), Some(&e));
                if let Some(w) = &was_dead {
                    assert_eq!(*w, e);
                }
                assert!(!self.q.is_ready());
                if was_dead.is_none() && mid_pdu && crate::tolerate("host-termreq-mid-pdu") {
                    self.unchecked = true;
                }
            }
            Err(other) => panic!("rx_feed returned a non-transport error: {other:?}"),
        }
        let max = self.q.maxh2cdata().max(self.q.config().icd_max);
        self.tx.set_max_data(max);
    }

    /// `[ctl][cid][dir][len: u32][opcode]`; ctl bit 0: use `cid` as is
    /// (else take one with `alloc_cid`).
    fn submit(&mut self, inp: &mut Input) {
        let ctl = inp.u8();
        let cid_in = inp.u8() as u16;
        let dir = [DataDir::None, DataDir::ToCtrl, DataDir::FromCtrl][inp.u8() as usize % 3];
        let len = inp.u32() % (2 * self.q.config().max_data + 1);
        let sqe = Sqe {
            opcode: inp.u8(),
            nsid: 1,
            ..Sqe::default()
        };
        let cid = if ctl & 1 != 0 {
            cid_in % (self.q.depth() + 1)
        } else {
            match self.q.alloc_cid() {
                Some(c) => c,
                None => return,
            }
        };
        let _ = self.q.ensure_buf(cid, len as usize);
        if let Some(b) = self.q.buf_mut(cid) {
            let n = b.len().min(len as usize);
            b[..n]
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = i as u8);
        }
        match self.q.submit(cid, sqe, dir, len) {
            Ok(()) => {
                let len = if dir == DataDir::None { 0 } else { len };
                assert!(
                    self.model.insert(cid, (dir, len)).is_none(),
                    "cid {cid} reused"
                );
            }
            Err(_) => {
                if ctl & 1 == 0 {
                    self.q.release_cid(cid);
                }
            }
        }
    }

    /// Hands up to `n` queued bytes to the "socket" and checks them.
    fn send(&mut self, n: usize) {
        let mut left = n;
        while left > 0 && self.q.tx_pending() > 0 {
            let mut iov = [IoSlice::new(&[]); 8];
            let cnt = self.q.tx_iovecs(&mut iov);
            let mut sent = 0;
            for s in &iov[..cnt] {
                let k = s.len().min(left - sent);
                if !self.unchecked {
                    self.tx.push(&s[..k]);
                }
                sent += k;
                if sent == left {
                    break;
                }
            }
            assert!(sent > 0 || cnt == 0, "pending bytes but empty iovecs");
            if sent == 0 {
                break;
            }
            self.q.tx_advance(sent);
            left -= sent;
        }
    }

    fn complete(&mut self) {
        self.q.take_completions(&mut self.done);
        for c in self.done.drain(..) {
            let (dir, len) = self
                .model
                .remove(&c.cid)
                .unwrap_or_else(|| panic!("completion for cid {} not in flight", c.cid));
            assert_eq!((c.dir, c.expected), (dir, len));
            assert!(c.transferred <= c.expected, "{c:?}");
            self.completed += 1;
            let _ = c.check();
        }
    }

    fn check(&mut self) {
        self.complete();
        // Reserved-but-unsubmitted CIDs are never held across operations.
        assert_eq!(self.q.outstanding(), self.model.len(), "CID accounting");
        assert!(self.q.dead().is_none() || !self.q.is_ready());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn smoke() {
        super::run(&[]);
        super::run(&[4, 3, 0x0b, 1, 0, 0, 2, 0, 16, 0, 0, 2, 2, 0xff, 0xff]);
    }
}
