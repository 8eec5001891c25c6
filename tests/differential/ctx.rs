//! What a behaviour is written with: an SQE builder and a per-run context
//! (target address, NQNs, its own LBA range, the trace).

use super::client::{get16, Conn, Cpl, Data, Framing, Ic, Trace, ANSWER};
use std::time::{Duration, Instant};

/// Admin opcodes, I/O opcodes and Fabrics command types used by the corpus.
pub const FABRICS: u8 = 0x7F;
pub const FCT_PROP_SET: u8 = 0x00;
pub const FCT_CONNECT: u8 = 0x01;
pub const FCT_PROP_GET: u8 = 0x04;

/// CC with IOSQES = 6, IOCQES = 4, EN = 1, CSS = 000b, MPS = 0, AMS = 0.
pub const CC_ENABLE: u32 = 0x0046_0001;
pub const P_CAP: u32 = 0x00;
pub const P_VS: u32 = 0x08;
pub const P_CC: u32 = 0x14;
pub const P_CSTS: u32 = 0x1C;
pub const P_NSSR: u32 = 0x20;

/// Namespace size of both targets: 64 MiB of 512-byte blocks.
pub const NSZE: u64 = 131_072;

/// A 64-byte SQE under construction.
#[derive(Clone, Copy)]
pub struct S(pub [u8; 64]);

impl S {
    /// Opcode `opc`, PSDT = 01b (SGL, as Fabrics requires), a Transport SGL
    /// Data Block descriptor of length 0 (what Linux sends for no data).
    pub fn new(opc: u8) -> S {
        let mut b = [0u8; 64];
        b[0] = opc;
        b[1] = 0x40;
        b[39] = 0x5A;
        S(b)
    }
    pub fn flags(mut self, f: u8) -> S {
        self.0[1] = f;
        self
    }
    pub fn nsid(mut self, n: u32) -> S {
        self.0[4..8].copy_from_slice(&n.to_le_bytes());
        self
    }
    /// Dword `i` (2..=15) of the SQE.
    pub fn dw(mut self, i: usize, v: u32) -> S {
        self.0[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    pub fn byte(mut self, off: usize, v: u8) -> S {
        self.0[off] = v;
        self
    }
    /// Transport SGL Data Block (data moves with C2HData or R2T/H2CData).
    pub fn sgl_transport(mut self, len: u32) -> S {
        self.0[24..40].fill(0);
        self.0[32..36].copy_from_slice(&len.to_le_bytes());
        self.0[39] = 0x5A;
        self
    }
    /// Data Block, Offset subtype: in-capsule data at `off`.
    pub fn sgl_incap(mut self, off: u64, len: u32) -> S {
        self.0[24..40].fill(0);
        self.0[24..32].copy_from_slice(&off.to_le_bytes());
        self.0[32..36].copy_from_slice(&len.to_le_bytes());
        self.0[39] = 0x01;
        self
    }
    /// Any 16-byte descriptor.
    pub fn sgl_raw(mut self, d: [u8; 16]) -> S {
        self.0[24..40].copy_from_slice(&d);
        self
    }
    pub fn cid(mut self, c: u16) -> S {
        self.0[2..4].copy_from_slice(&c.to_le_bytes());
        self
    }
    pub fn get_cid(&self) -> u16 {
        get16(&self.0, 2)
    }
}

/// Fabrics Property Get (4 or 8 bytes).
pub fn prop_get(ofst: u32, size8: bool) -> S {
    S::new(FABRICS)
        .byte(4, FCT_PROP_GET)
        .dw(10, size8 as u32)
        .dw(11, ofst)
}

/// Fabrics Property Set.
pub fn prop_set(ofst: u32, size8: bool, v: u64) -> S {
    S::new(FABRICS)
        .byte(4, FCT_PROP_SET)
        .dw(10, size8 as u32)
        .dw(11, ofst)
        .dw(12, v as u32)
        .dw(13, (v >> 32) as u32)
}

pub fn identify(cns: u8, nsid: u32) -> S {
    S::new(0x06)
        .nsid(nsid)
        .dw(10, cns as u32)
        .sgl_transport(4096)
}

/// Get Log Page of `len` bytes (NUMD = len/4 - 1).
pub fn get_log(lid: u8, nsid: u32, len: u32) -> S {
    let numd = len / 4 - 1;
    S::new(0x02)
        .nsid(nsid)
        .dw(10, lid as u32 | (numd & 0xFFFF) << 16)
        .dw(11, numd >> 16)
        .sgl_transport(len)
}

/// A Read/Write/Compare-style I/O command on `nsid`.
pub fn rw(opc: u8, nsid: u32, slba: u64, nlb0: u16, len: u32) -> S {
    S::new(opc)
        .nsid(nsid)
        .dw(10, slba as u32)
        .dw(11, (slba >> 32) as u32)
        .dw(12, nlb0 as u32)
        .sgl_transport(len)
}

/// Connect SQE and data, to be tweaked.
pub struct ConnectArgs {
    pub qid: u16,
    pub sqsize: u16,
    pub cattr: u8,
    pub kato: u32,
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub sqe: S,
    pub data: Vec<u8>,
    /// Send the data on R2T instead of in the capsule.
    pub via_r2t: bool,
}

pub struct Ctx {
    pub addr: String,
    pub nqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// First LBA of this behaviour's own 128-block range.
    pub base: u64,
    pub t: Trace,
}

/// A pattern block of `n` bytes, different per `seed`.
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a of data, for compact trace lines.
pub fn fnv(d: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in d {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

impl Ctx {
    pub fn log(&self, s: impl Into<String>) {
        self.t.borrow_mut().push(s.into());
    }

    pub fn open(&self, ic: Ic) -> Conn {
        Conn::open(&self.addr, ic, &self.t)
    }

    pub fn connect_args(&self, qid: u16, cntlid: u16) -> ConnectArgs {
        ConnectArgs {
            qid,
            sqsize: 31,
            cattr: 0,
            kato: if qid == 0 { 120_000 } else { 0 },
            cntlid,
            subnqn: self.nqn.clone(),
            hostnqn: self.hostnqn.clone(),
            hostid: self.hostid,
            sqe: S::new(FABRICS).byte(4, FCT_CONNECT).sgl_incap(0, 1024),
            data: vec![0u8; 1024],
            via_r2t: false,
        }
    }

    /// Sends a Connect built from `a` and logs its completion. On success,
    /// DW0 (CNTLID) is implementation-defined and masked; on failure it is
    /// compared (IATTR/IPO, Fabrics 1.1 §3.3, Figure 22).
    pub fn connect_with(&self, c: &mut Conn, label: &str, a: &ConnectArgs) -> Option<Cpl> {
        let cid = c.cid();
        let mut s = a
            .sqe
            .dw(10, (a.qid as u32) << 16 | (get16(&a.sqe.0, 40) as u32))
            .dw(
                11,
                a.sqsize as u32 | (a.cattr as u32) << 16 | (a.sqe.0[47] as u32) << 24,
            )
            .dw(12, a.kato)
            .cid(cid);
        let mut d = a.data.clone();
        d[0..16].copy_from_slice(&a.hostid);
        d[16..18].copy_from_slice(&a.cntlid.to_le_bytes());
        d[256..512].fill(0);
        d[256..256 + a.subnqn.len()].copy_from_slice(a.subnqn.as_bytes());
        d[512..768].fill(0);
        d[512..512 + a.hostnqn.len()].copy_from_slice(a.hostnqn.as_bytes());
        let data = if a.via_r2t {
            s = s.sgl_transport(1024);
            Data::R2t(d)
        } else {
            Data::InCapsule(d)
        };
        c.send(&s.0, &data, Framing::default());
        let r = c.wait(cid);
        if let Some(r) = &r {
            if r.ok() {
                c.cntlid = r.dw0 as u16;
                c.log(format!("{label}: {} cntlid", r.status()));
            } else {
                c.log(format!("{label}: {} dw0={:08x}", r.status(), r.dw0));
            }
        }
        r
    }

    pub fn connect(&self, c: &mut Conn, qid: u16, cntlid: u16) -> Option<Cpl> {
        let a = self.connect_args(qid, cntlid);
        self.connect_with(c, "connect", &a)
    }

    /// Runs one command and logs `label: status dw0=...` (`dw0_mask` picks
    /// the bits that must agree) plus the data moved.
    pub fn exec_m(
        &self,
        c: &mut Conn,
        label: &str,
        s: S,
        data: Data,
        dw0_mask: u32,
    ) -> Option<Cpl> {
        let cid = c.cid();
        self.exec_cid(c, label, s.cid(cid), data, dw0_mask)
    }

    pub fn exec(&self, c: &mut Conn, label: &str, s: S, data: Data) -> Option<Cpl> {
        self.exec_m(c, label, s, data, u32::MAX)
    }

    /// As [`Ctx::exec_m`] with the SQE's own CID.
    pub fn exec_cid(
        &self,
        c: &mut Conn,
        label: &str,
        s: S,
        data: Data,
        dw0_mask: u32,
    ) -> Option<Cpl> {
        let cid = s.get_cid();
        c.send(&s.0, &data, Framing::default());
        let r = c.wait(cid);
        if let Some(r) = &r {
            self.log_cpl(label, r, dw0_mask);
        }
        r
    }

    pub fn log_cpl(&self, label: &str, r: &Cpl, dw0_mask: u32) {
        let mut l = format!("{label}: {}", r.status());
        if dw0_mask != 0 {
            l += &format!(" dw0={:08x}", r.dw0 & dw0_mask);
        }
        if !r.data.is_empty() {
            l += &format!(" c2h={}", r.data.len());
            if !r.aligned {
                l += " misaligned";
            }
        }
        if r.r2t > 0 {
            l += &format!(" r2t={}", r.r2t);
        }
        self.log(l);
    }

    /// A connected, enabled admin queue (KATO 120 s).
    pub fn admin(&self) -> Conn {
        self.admin_ic(Ic::default())
    }

    pub fn admin_ic(&self, ic: Ic) -> Conn {
        let mut c = self.open(ic);
        if c.alive() && self.connect(&mut c, 0, 0xFFFF).is_some_and(|r| r.ok()) {
            self.enable(&mut c, CC_ENABLE);
        }
        c
    }

    /// Property Set CC = `cc`, then polls CSTS until RDY or CFS (bounded).
    pub fn enable(&self, c: &mut Conn, cc: u32) -> u32 {
        let cid = c.cid();
        c.send(
            &prop_set(P_CC, false, cc as u64).cid(cid).0,
            &Data::None,
            Framing::default(),
        );
        match c.wait(cid) {
            Some(r) if r.ok() => {}
            Some(r) => {
                self.log(format!("enable: cc set {}", r.status()));
                return 0;
            }
            None => return 0,
        }
        let csts = self.poll_csts(c, |v| v & 0x3 != 0);
        if csts & 1 == 1 && csts & 2 == 0 {
            self.log("enabled");
        } else {
            self.log(format!("enable: csts={csts:#x}"));
        }
        csts
    }

    /// Reads CSTS until `done(csts)` (bounded: 10 s); returns the last value.
    pub fn poll_csts(&self, c: &mut Conn, done: impl Fn(u32) -> bool) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut pause = Duration::from_millis(2);
        loop {
            let cid = c.cid();
            c.send(
                &prop_get(P_CSTS, false).cid(cid).0,
                &Data::None,
                Framing::default(),
            );
            let v = match c.wait(cid) {
                Some(r) if r.ok() => r.dw0,
                Some(r) => {
                    self.log(format!("csts get {}", r.status()));
                    return 0;
                }
                None => return 0,
            };
            if done(v) || Instant::now() > deadline {
                return v;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// An I/O queue (QID 1) of the controller `admin` connected to.
    pub fn io(&self, admin: &Conn) -> Conn {
        self.io_ic(admin, Ic::default())
    }

    pub fn io_ic(&self, admin: &Conn, ic: Ic) -> Conn {
        let mut c = self.open(ic);
        if c.alive() && admin.alive() {
            self.connect(&mut c, 1, admin.cntlid);
        }
        c
    }

    /// Admin + I/O queue.
    pub fn pair(&self) -> (Conn, Conn) {
        let a = self.admin();
        let q = self.io(&a);
        (a, q)
    }

    /// Writes `n` blocks of pattern at `lba` (in-capsule when it fits in
    /// 8 KiB, else by R2T) and logs it.
    pub fn write(&self, q: &mut Conn, label: &str, lba: u64, n: u16, seed: u64) -> Option<Cpl> {
        let len = n as u32 * 512;
        let d = pattern(len as usize, seed);
        let s = rw(0x01, 1, lba, n - 1, len);
        if len <= 8192 {
            self.exec(q, label, s.sgl_incap(0, len), Data::InCapsule(d))
        } else {
            self.exec(q, label, s, Data::R2t(d))
        }
    }

    /// Reads `n` blocks at `lba` and logs status and a digest of the data.
    pub fn read(&self, q: &mut Conn, label: &str, lba: u64, n: u16) -> Option<Cpl> {
        let r = self.exec(
            q,
            label,
            rw(0x02, 1, lba, n - 1, n as u32 * 512),
            Data::None,
        );
        if let Some(r) = &r {
            if r.ok() {
                self.log(format!("{label} data {:016x}", fnv(&r.data)));
            }
        }
        r
    }

    /// Waits (bounded) for the target to close `c`; logs the outcome.
    pub fn expect_close(&self, c: &mut Conn, label: &str, within: Duration) {
        let closed = c.expect_close(within);
        self.log(format!(
            "{label}: {}",
            if closed { "closed" } else { "open" }
        ));
    }

    /// Logs whether `c` still answers a Property Get (CSTS).
    pub fn still_serving(&self, c: &mut Conn, label: &str) {
        if !c.alive() {
            self.log(format!("{label}: connection gone"));
            return;
        }
        let cid = c.cid();
        c.send(
            &prop_get(P_CSTS, false).cid(cid).0,
            &Data::None,
            Framing::default(),
        );
        match c.wait_for(cid, ANSWER) {
            Some(r) => self.log(format!("{label}: answers {}", r.status())),
            None => self.log(format!("{label}: no answer")),
        }
    }
}
