//! `target_connection`: whole target connections fed arbitrary bytes.
//!
//! Input: `[mode][params][limits][ns][body...]`. `limits`/`ns` shape the
//! target (see [`target_setup::build`]); `params` holds the digests (bits
//! 0-1), the HPDA (bits 2-3), whether bring-up disables SQ flow control
//! (bit 4: reads then end with a SUCCESS C2HData) and seeds the chunking. Modes (`mode % 7`):
//!
//! 0. raw: `body` is the host-to-controller byte stream of one connection
//!    (what the kernel-host seeds hold).
//! 1. ICReq first, then `body` raw.
//! 2. admin bring-up (ICReq, Connect, CC.EN), then `body` raw on it.
//! 3. bring-up plus an I/O queue connected to that controller; `body` raw
//!    on the I/O queue.
//! 4. admin bring-up, then `body` as operations (see [`Harness::op`]).
//! 5. admin and I/O queue, then operations on either.
//! 6. two raw connections: `body` is records `[queue][len: u16][bytes]`
//!    (the kernel's admin and I/O streams interleaved as captured).
//!
//! Checked: no panic; all output cuts into well-formed controller-to-host
//! PDUs with good digests; nothing follows a C2HTermReq; a queue that sent
//! one is closing; no backend I/O is left in flight.

use crate::build::{self, Digests};
use crate::input::{Input, Rng};
use crate::target_cmds;
use crate::target_conn::{Clock, Conn};
use crate::target_setup::{self, Shape};
use farflash_core::Target;
use farflash_wire::pdu::DataHeader;
use std::sync::Arc;

pub struct Harness {
    pub target: Arc<Target>,
    pub shape: Shape,
    pub conns: Vec<Conn>,
    pub cur: usize,
    pub rng: Rng,
    pub clock: Clock,
    /// Connect CATTR used by the structured bring-ups.
    pub cattr: u8,
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let mode = inp.u8() % 7;
    let params = inp.u8();
    let limits = inp.u8();
    let ns = inp.u8();
    let (target, shape) = target_setup::build(limits, ns);
    let d = Digests {
        hd: params & 1 != 0,
        dd: params & 2 != 0,
    };
    let hpda = [0, 0, 1, 31][(params as usize >> 2) & 3];
    let mut h = Harness {
        target,
        shape,
        conns: Vec::new(),
        cur: 0,
        rng: Rng::new(u64::from_le_bytes([params, limits, ns, mode, 0, 0, 0, 1])),
        clock: Clock::new(),
        cattr: if params & 0x10 != 0 {
            farflash_wire::fabrics::CATTR_DISABLE_SQ_FLOW_CONTROL
        } else {
            0
        },
    };
    h.add();
    match mode {
        0 => h.feed_raw(0, inp.rest()),
        1 => {
            h.conns[0].initialize(hpda, d, &mut h.rng);
            h.feed_raw(0, inp.rest());
        }
        2 | 4 => {
            h.conns[0].bring_up(hpda, d, &mut h.rng);
            if mode == 2 {
                h.feed_raw(0, inp.rest());
            }
        }
        3 | 5 => {
            let cntlid = h.conns[0].bring_up(hpda, d, &mut h.rng);
            h.add();
            let depth = h.shape.max_queue_depth;
            h.conns[1].connect_io(cntlid, depth, hpda, d, &mut h.rng);
            h.cur = 1;
            if mode == 3 {
                h.feed_raw(1, inp.rest());
            }
        }
        _ => {
            h.add();
            while !inp.is_empty() {
                let q = inp.u8();
                let len = inp.u16() as usize;
                let bytes = inp.take(len);
                h.feed_raw(q as usize & 1, bytes);
                if q & 2 != 0 {
                    h.tick(q as u64 * 100);
                }
            }
        }
    }
    if mode == 4 || mode == 5 {
        while !inp.is_empty() {
            h.op(&mut inp);
        }
    }
    h.finish();
}

impl Harness {
    fn add(&mut self) {
        let port = 40000 + self.conns.len() as u16;
        let mut c = Conn::new(&self.target, port, self.shape.max_c2h_data);
        c.cattr = self.cattr;
        self.conns.push(c);
    }

    fn feed_raw(&mut self, i: usize, bytes: &[u8]) {
        let c = &mut self.conns[i];
        let mut off = 0;
        while off < bytes.len() && c.qp.wants_read() {
            // Between socket reads, time passes now and then.
            let n = 1 + self.rng.below(64 * 1024) as usize;
            let end = bytes.len().min(off + n);
            c.feed(&bytes[off..end], &mut self.rng);
            off = end;
            if self.rng.below(8) == 0 {
                let now = self.clock.advance(self.rng.below(2000));
                c.qp.tick(now);
            }
        }
    }

    fn tick(&mut self, ms: u64) {
        let now = self.clock.advance(ms);
        for c in &mut self.conns {
            c.qp.tick(now);
            c.service(&mut self.rng);
        }
    }

    /// One operation from the input:
    /// 0 fuzzed command, 1 known-good command, 2 H2CData for the oldest
    /// R2T, 3 raw bytes, 4 time passes, 5 switch queue, 6 stop/resume
    /// reading output, 7 close or target shutdown.
    fn op(&mut self, inp: &mut Input) {
        let op = inp.u8();
        let ctl = inp.u8();
        let shape = self.shape;
        match op % 8 {
            0 | 1 => {
                let io = self.conns[self.cur].io;
                let (mut s, icd) = if op.is_multiple_of(8) {
                    target_cmds::fuzzed(inp, ctl, io, &shape)
                } else if io {
                    target_cmds::io_cmd(ctl, inp.u8(), &shape)
                } else {
                    target_cmds::admin_cmd(ctl, inp.u8())
                };
                let c = &mut self.conns[self.cur];
                if op % 8 == 1 || ctl & 0x20 == 0 {
                    s.cid = c.cid();
                }
                let pdu = build::capsule(&s, &icd, c.d, ctl & 0x40 != 0);
                c.feed(&pdu, &mut self.rng);
            }
            2 => self.h2c(inp, ctl),
            3 => {
                let n = inp.u16() as usize % 4096;
                let bytes = inp.take(n).to_vec();
                self.conns[self.cur].feed(&bytes, &mut self.rng);
            }
            4 => self.tick(ctl as u64 * ctl as u64 * 8),
            5 => self.cur = (self.cur + 1) % self.conns.len(),
            6 => {
                let c = &mut self.conns[self.cur];
                c.hold = !c.hold;
                c.service(&mut self.rng);
            }
            _ => {
                if ctl & 1 != 0 {
                    self.target.begin_shutdown();
                } else {
                    self.conns[self.cur].qp.close();
                }
                self.tick(0);
            }
        }
    }

    /// H2CData answering the oldest R2T, in pieces; `ctl` may break one
    /// rule: bit 0 TTAG, bit 1 offset, bit 2 LAST flag, bit 3 data digest,
    /// bit 4 stop after the first piece, bit 5 a piece over MAXH2CDATA.
    fn h2c(&mut self, inp: &mut Input, ctl: u8) {
        let max = if ctl & 0x20 != 0 {
            self.shape.max_h2c_data + 4
        } else {
            self.shape.max_h2c_data
        };
        let piece = (inp.u16() as u32 % max).max(1);
        let seed = inp.take(64).to_vec();
        let c = &mut self.conns[self.cur];
        if c.r2ts.is_empty() {
            return;
        }
        let r = c.r2ts.remove(0);
        let mut off = 0;
        while off < r.length {
            let n = piece.min(r.length - off);
            let data: Vec<u8> = (0..n as usize)
                .map(|i| seed.get(i).copied().unwrap_or(i as u8))
                .collect();
            let last = (off + n == r.length) != (ctl & 4 != 0);
            let h = DataHeader {
                cccid: r.cccid,
                ttag: r.ttag ^ (ctl & 1) as u16,
                offset: r.offset + off + ((ctl as u32 >> 1) & 1),
                length: n,
            };
            let pdu = build::h2c_data(&h, &data, last, c.d, ctl & 8 != 0);
            c.feed(&pdu, &mut self.rng);
            off += n;
            if ctl & 0x10 != 0 || !c.qp.wants_read() {
                break;
            }
        }
    }

    /// Sends what is left, then the teardown a closed socket causes.
    fn finish(mut self) {
        self.tick(1);
        for c in &mut self.conns {
            c.hold = false;
            c.service(&mut self.rng);
            if std::env::var_os("FUZZ_DEBUG").is_some() {
                let bad: Vec<_> = c.resps.iter().filter(|r| !r.status.is_success()).collect();
                eprintln!(
                    "conn io={} pdus={} resps={} c2h={} failed={:?} closing={} terminated={}",
                    c.io,
                    c.out.pdus,
                    c.resps.len(),
                    c.c2h_bytes,
                    bad,
                    c.qp.wants_close(),
                    c.out.terminated()
                );
            }
            assert_eq!(c.qp.output_len(), 0);
            assert_eq!(c.out.pending(), 0, "output ends inside a PDU");
            if c.qp.wants_close() {
                assert!(
                    c.qp.finished(),
                    "closing with nothing left, yet not finished"
                );
            }
        }
        // Dropping the queue pairs ends the association (I/O queues first,
        // as a host tearing down would).
        while let Some(c) = self.conns.pop() {
            drop(c);
        }
        assert_eq!(
            self.target.live_controllers(),
            0,
            "controller outlived its queues"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::run;

    /// Every known-good command on each queue, R2T writes answered, time
    /// passing, in every transport shape: the harness itself must hold up.
    #[test]
    fn known_good_commands_in_every_mode() {
        for params in [0u8, 3, 0x0c, 0x07, 0x10, 0x13] {
            for limits in [0u8, 0x55, 0xff] {
                for mode in 0..7u8 {
                    let mut v = vec![mode, params, limits, 7];
                    for k in 0..11u8 {
                        v.extend_from_slice(&[1, k, k.wrapping_mul(37)]);
                        v.extend_from_slice(&[2, 0, 0x00, 0x10]);
                        v.extend_from_slice(&[0xA5; 64]);
                    }
                    v.extend_from_slice(&[5, 0, 4, 200, 7, 0]);
                    run(&v);
                }
            }
        }
    }
}
