//! One connection of the target harness: a `QueuePair` driven the way the
//! transport's event loop drives it (read into `rx_space`, `on_received`,
//! `commit`, `poll_backends`, send `output`), with every byte it sends
//! checked by a [`PduStream`] as the host would receive it.

use crate::build::{self, Digests};
use crate::input::Rng;
use crate::stream::{Event, PduStream};
use farflash_core::Target;
use farflash_tcp::QueuePair;
use farflash_wire::pdu::DataHeader;
use farflash_wire::Cqe;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Conn {
    pub qp: QueuePair,
    pub out: PduStream,
    pub d: Digests,
    /// An I/O queue (else the admin queue).
    pub io: bool,
    pub next_cid: u16,
    /// R2Ts received and not answered yet, oldest first.
    pub r2ts: Vec<DataHeader>,
    pub resps: Vec<Cqe>,
    /// Leave output unsent (a host that stopped reading).
    pub hold: bool,
    /// Read data received (C2HData payload bytes).
    pub c2h_bytes: u64,
    /// Connect CATTR for `bring_up` / `connect_io` (bit 2: no SQ flow
    /// control, so successful reads end with a SUCCESS C2HData).
    pub cattr: u8,
}

impl Conn {
    pub fn new(t: &Arc<Target>, port: u16, max_c2h_data: u32) -> Conn {
        let local: SocketAddr = ([127, 0, 0, 1], 4420).into();
        let peer: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut out = PduStream::new(false, max_c2h_data);
        // Known bug (regressions/target_connection/capsuleresp-after-c2htermreq):
        // backend completions reaped after a fatal error still respond.
        out.ignore_after_term = crate::tolerate("target-resp-after-termreq");
        Conn {
            qp: QueuePair::new(t.clone(), local, peer),
            out,
            d: Digests::default(),
            io: false,
            next_cid: 0x100,
            r2ts: Vec::new(),
            resps: Vec::new(),
            hold: false,
            c2h_bytes: 0,
            cattr: 0,
        }
    }

    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Delivers `bytes` as the socket would, in chunks `rng` picks; stops
    /// when the queue no longer reads (closing). Returns the bytes taken.
    pub fn feed(&mut self, bytes: &[u8], rng: &mut Rng) -> usize {
        let mut off = 0;
        while off < bytes.len() && self.qp.wants_read() {
            let want = match rng.below(8) {
                0 => 1 + rng.below(8) as usize,
                1 => 1 + rng.below(200) as usize,
                _ => usize::MAX,
            };
            let space = self.qp.rx_space();
            // The receive buffer offers at least 16 KiB; an H2CData payload
            // received in place offers exactly what is left of it.
            assert!(!space.is_empty(), "empty rx_space");
            let n = want.min(space.len()).min(bytes.len() - off);
            space[..n].copy_from_slice(&bytes[off..off + n]);
            self.qp.on_received(n);
            off += n;
            // The event loop reads until EAGAIN before it services backends.
            if rng.below(4) != 0 {
                self.service(rng);
            }
        }
        self.service(rng);
        off
    }

    /// Backend submission and completion, then sending.
    pub fn service(&mut self, rng: &mut Rng) {
        self.qp.commit();
        self.qp.poll_backends();
        // RAM and null backends complete inside submit: nothing stays in flight.
        assert_eq!(self.qp.in_flight(), 0, "backend I/O left in flight");
        if self.hold {
            if rng.below(4) == 0 {
                let n = rng.below(64) as usize;
                self.drain(n);
            }
        } else {
            self.drain(usize::MAX);
        }
    }

    /// Sends up to `n` output bytes the way the event loop does (`writev` of
    /// `output_slices`, possibly short), or all of it with `take_output`.
    pub fn drain(&mut self, n: usize) {
        if n == usize::MAX && self.qp.output_len() % 3 == 1 {
            let all = self.qp.take_output();
            self.out.push(&all);
        }
        let mut left = n;
        while left > 0 && self.qp.output_len() > 0 {
            let mut iov = [IoSlice::new(&[]); 8];
            let cnt = self.qp.output_slices(&mut iov);
            let total: usize = iov[..cnt].iter().map(|s| s.len()).sum();
            let len = self.qp.output_len();
            assert!(
                total <= len && (cnt == iov.len() || total == len),
                "slices {total} of {len}"
            );
            let mut sent = 0;
            for s in &iov[..cnt] {
                let k = s.len().min(left - sent);
                self.out.push(&s[..k]);
                sent += k;
                if sent == left {
                    break;
                }
            }
            assert!(sent > 0, "{len} bytes to send but no slices");
            self.qp.consume_output(sent);
            if n != usize::MAX {
                left -= sent;
            }
        }
        for ev in self.out.events.drain(..) {
            match ev {
                Event::R2T(h) => self.r2ts.push(h),
                Event::Resp(c) => self.resps.push(c),
                Event::C2HData(h, _) => self.c2h_bytes += h.length as u64,
                _ => {}
            }
        }
        if self.out.terminated() {
            assert!(self.qp.wants_close(), "C2HTermReq sent but not closing");
        }
    }

    /// The response to `cid`, which must have come and succeeded.
    pub fn expect_ok(&mut self, cid: u16, what: &str) -> Cqe {
        let c = self.resps.iter().rev().find(|c| c.cid == cid).copied();
        match c {
            Some(c) if c.status.is_success() => c,
            other => panic!("{what}: a well-behaved host got {other:?}"),
        }
    }

    /// ICReq and its ICResp.
    pub fn initialize(&mut self, hpda: u8, d: Digests, rng: &mut Rng) {
        self.d = d;
        if hpda > 0 {
            self.out.set_pda((hpda as usize + 1) * 4);
        }
        self.feed(&build::icreq(hpda, d), rng);
        assert!(self.out.pdus >= 1, "no ICResp to a valid ICReq");
    }

    /// Admin bring-up: ICReq, Connect, CC.EN. Returns the CNTLID.
    pub fn bring_up(&mut self, hpda: u8, d: Digests, rng: &mut Rng) -> u16 {
        self.initialize(hpda, d, rng);
        self.feed(&build::admin_connect(1, d, self.cattr), rng);
        let cntlid = self.expect_ok(1, "admin Connect").dw0 as u16;
        let en = farflash_wire::props::cc::ENABLE_DEFAULT;
        self.feed(&build::set_cc(en, 2, d), rng);
        self.expect_ok(2, "CC.EN");
        cntlid
    }

    /// I/O queue 1 joining `cntlid`.
    pub fn connect_io(&mut self, cntlid: u16, depth: u32, hpda: u8, d: Digests, rng: &mut Rng) {
        self.initialize(hpda, d, rng);
        self.io = true;
        let sqsize = depth.clamp(2, 64) as u16 - 1;
        self.feed(&build::connect(1, cntlid, sqsize, 1, d, self.cattr), rng);
        self.expect_ok(1, "I/O queue Connect");
    }
}

/// Virtual time for `tick`: the harness moves it forward, never back.
pub struct Clock {
    base: Instant,
    off: Duration,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            base: Instant::now(),
            off: Duration::ZERO,
        }
    }
    pub fn advance(&mut self, ms: u64) -> Instant {
        self.off += Duration::from_millis(ms);
        self.base + self.off
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
