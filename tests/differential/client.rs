//! A deliberately literal NVMe/TCP host for the differential harness: every
//! byte it sends is chosen by the behaviour (reserved fields, PDO, flags,
//! digests), and everything the target answers is written down as a
//! normalized trace line, so that two targets can be compared line by line.
//!
//! Normalization (what the harness treats as implementation-defined, not as
//! a difference):
//! - C2HData and R2T PDU boundaries: only the total bytes per command are
//!   kept (PDU sizes follow each target's MAXH2CDATA and its own chunking);
//! - a C2HData with SUCCESS set stands for a successful completion with
//!   DW0 = 0 (NVMe/TCP 1.0 §3.6.2.9, §3.5.4, "success optimization");
//! - SQHD (flow control state) and the Phase Tag are not compared.

use farflash_wire::digest::crc32c;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::rc::Rc;
use std::time::{Duration, Instant};

pub type Trace = Rc<RefCell<Vec<String>>>;

/// How long a target may take to answer one command (TCG VM, loaded host).
pub const ANSWER: Duration = Duration::from_secs(8);

pub const T_ICREQ: u8 = 0x00;
pub const T_ICRESP: u8 = 0x01;
pub const T_C2HTERM: u8 = 0x03;
pub const T_CAPSULE_CMD: u8 = 0x04;
pub const T_CAPSULE_RESP: u8 = 0x05;
pub const T_H2CDATA: u8 = 0x06;
pub const T_C2HDATA: u8 = 0x07;
pub const T_R2T: u8 = 0x09;

pub const F_HDGST: u8 = 0x01;
pub const F_DDGST: u8 = 0x02;
pub const F_LAST: u8 = 0x04;
pub const F_SUCCESS: u8 = 0x08;

/// ICReq fields a behaviour may choose.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ic {
    pub pfv: u16,
    pub hpda: u8,
    pub dgst: u8,
    pub maxr2t: u32,
    /// Fill the reserved bytes 16..127 with a pattern.
    pub reserved: bool,
    /// Flags byte of the common header (reserved for ICReq).
    pub ch_flags: u8,
}

/// One completion as the host saw it.
#[derive(Clone, Debug, Default)]
pub struct Cpl {
    pub cid: u16,
    pub sct: u8,
    pub sc: u8,
    pub dnr: bool,
    pub more: bool,
    pub dw0: u32,
    pub dw1: u32,
    /// C2HData gathered for this command (by offset).
    pub data: Vec<u8>,
    /// Total bytes the target asked for with R2Ts.
    pub r2t: u64,
    /// Whether every C2HData's PDO honoured the host's HPDA.
    pub aligned: bool,
    pub via_success_flag: bool,
}

impl Cpl {
    pub fn ok(&self) -> bool {
        self.sct == 0 && self.sc == 0
    }
    /// `SCT/SC[ dnr]`. The More bit is not compared: it says that the
    /// Error Information log page has an entry for this command (NVMe Base
    /// 2.0 §4.6.1, §5.16.1.2), and which errors a controller logs there is
    /// its own choice (Linux nvmet logs every error with a known location,
    /// farflash none). FARFLASH_DIFF_IGNORE_DNR=1 leaves DNR out too, for
    /// a peer that never sets it (SPDK), so that its table shows the rest.
    pub fn status(&self) -> String {
        let dnr = self.dnr && std::env::var_os("FARFLASH_DIFF_IGNORE_DNR").is_none();
        format!(
            "{:x}/{:02x}{}",
            self.sct,
            self.sc,
            if dnr { " dnr" } else { "" }
        )
    }
}

/// What a command carries to the target.
#[derive(Clone, Debug)]
pub enum Data {
    None,
    /// In-capsule data (the SQE's SGL is the behaviour's business).
    InCapsule(Vec<u8>),
    /// Data the host sends in H2CData PDUs when the target asks (R2T).
    R2t(Vec<u8>),
}

/// Bytes of a capsule, with knobs for unusual framing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Framing {
    /// Force this PDO (otherwise: 0 without data, aligned header end with).
    pub pdo: Option<u8>,
    /// Extra common header flag bits.
    pub flags: u8,
    /// Extra pad bytes between the header and in-capsule data (PDO grows).
    pub pad: usize,
}

pub struct Conn {
    s: Option<TcpStream>,
    pub hd: bool,
    pub dd: bool,
    pub cpda: u8,
    pub hpda: u8,
    pub maxh2c: u32,
    pub t: Trace,
    next_cid: u16,
    out: HashMap<u16, Vec<u8>>,
    got: HashMap<u16, Cpl>,
    done: VecDeque<Cpl>,
    /// R2Ts for commands the host gave no data for (the behaviour answers).
    r2ts: VecDeque<(u16, u16, u32, u32)>,
    pub cntlid: u16,
}

fn put16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn get16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
pub fn get32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
pub fn get64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

enum Rx {
    Pdu {
        ty: u8,
        flags: u8,
        hdr: Vec<u8>,
        pdo: usize,
        data: Vec<u8>,
    },
    Closed,
    Timeout,
}

impl Conn {
    /// Connects and exchanges ICReq/ICResp; logs `icresp ...` or what
    /// happened instead.
    fn blank(t: &Trace, hpda: u8) -> Conn {
        Conn {
            s: None,
            hd: false,
            dd: false,
            cpda: 0,
            hpda,
            maxh2c: 4096,
            t: t.clone(),
            next_cid: 0x10,
            out: HashMap::new(),
            got: HashMap::new(),
            done: VecDeque::new(),
            r2ts: VecDeque::new(),
            cntlid: 0xFFFF,
        }
    }

    pub fn open(addr: &str, ic: Ic, t: &Trace) -> Conn {
        let mut c = Conn::blank(t, ic.hpda);
        let s = match TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                c.log(format!("connect failed: {}", e.kind()));
                return c;
            }
        };
        let _ = s.set_nodelay(true);
        c.s = Some(s);
        let mut b = [0u8; 128];
        b[0] = T_ICREQ;
        b[1] = ic.ch_flags;
        b[2] = 128;
        b[3] = 0;
        put32(&mut b, 4, 128);
        put16(&mut b, 8, ic.pfv);
        b[10] = ic.hpda;
        b[11] = ic.dgst;
        put32(&mut b, 12, ic.maxr2t);
        if ic.reserved {
            for (i, x) in b[16..].iter_mut().enumerate() {
                *x = 0xA5 ^ i as u8;
            }
        }
        c.raw(&b);
        match c.rx(Instant::now() + ANSWER) {
            Rx::Pdu {
                ty: T_ICRESP, hdr, ..
            } if hdr.len() >= 128 => {
                c.cpda = hdr[10];
                c.hd = hdr[11] & 1 != 0;
                c.dd = hdr[11] & 2 != 0;
                c.maxh2c = get32(&hdr, 12);
                // PFV and the digests granted must agree; CPDA and MAXH2CDATA
                // are the target's own choice (TCP 1.0 §3.6.2.3).
                c.log(format!("icresp pfv={} dgst={}", get16(&hdr, 8), hdr[11]));
            }
            other => c.note_rx(other),
        }
        c
    }

    /// A TCP connection without ICReq.
    pub fn open_raw(addr: &str, t: &Trace) -> Conn {
        let mut c = Conn::blank(t, 0);
        match TcpStream::connect(addr) {
            Ok(s) => c.s = Some(s),
            Err(e) => c.log(format!("connect failed: {}", e.kind())),
        }
        c
    }

    /// Waits for an R2T for a command sent without data:
    /// `(cccid, ttag, offset, length)` minus the CID.
    pub fn next_r2t(&mut self, within: Duration) -> Option<(u16, u32, u32)> {
        let deadline = Instant::now() + within;
        loop {
            if let Some((_, ttag, off, len)) = self.r2ts.pop_front() {
                return Some((ttag, off, len));
            }
            if !self.alive() || !self.pump(deadline) {
                return None;
            }
        }
    }

    pub fn alive(&self) -> bool {
        self.s.is_some()
    }

    pub fn log(&self, s: String) {
        self.t.borrow_mut().push(s);
    }

    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    pub fn raw(&mut self, b: &[u8]) {
        if let Some(s) = self.s.as_mut() {
            // A write error shows up as "closed" on the next read.
            let _ = s.write_all(b);
        }
    }

    /// Half-closes the host's sending side.
    pub fn shutdown_write(&mut self) {
        if let Some(s) = self.s.as_ref() {
            let _ = s.shutdown(Shutdown::Write);
        }
    }

    pub fn close(&mut self) {
        if let Some(s) = self.s.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn dead(&mut self) {
        self.s = None;
    }

    /// Builds a CapsuleCmd PDU.
    pub fn capsule(&self, sqe: &[u8; 64], incap: &[u8], f: Framing) -> Vec<u8> {
        let hlen = 72usize;
        let hend = hlen + if self.hd { 4 } else { 0 };
        let mut pdo = if incap.is_empty() {
            0
        } else {
            align_up(hend, (self.cpda as usize + 1) * 4) + f.pad
        };
        if let Some(p) = f.pdo {
            pdo = p as usize;
        }
        let dstart = if incap.is_empty() {
            hend
        } else {
            pdo.max(hend)
        };
        let dd = self.dd && !incap.is_empty();
        let plen = dstart + incap.len() + if dd { 4 } else { 0 };
        let mut b = vec![0u8; plen];
        b[0] = T_CAPSULE_CMD;
        b[1] = f.flags | if self.hd { F_HDGST } else { 0 } | if dd { F_DDGST } else { 0 };
        b[2] = hlen as u8;
        b[3] = pdo as u8;
        put32(&mut b, 4, plen as u32);
        b[8..72].copy_from_slice(sqe);
        if self.hd {
            let d = crc32c(&b[..72]);
            put32(&mut b, 72, d);
        }
        b[dstart..dstart + incap.len()].copy_from_slice(incap);
        if dd {
            let d = crc32c(incap);
            put32(&mut b, plen - 4, d);
        }
        b
    }

    /// Sends a command (SQE bytes as given, CID included) without waiting.
    pub fn send(&mut self, sqe: &[u8; 64], data: &Data, f: Framing) {
        let cid = get16(sqe, 2);
        let incap: &[u8] = match data {
            Data::InCapsule(d) => d,
            Data::R2t(d) => {
                self.out.insert(cid, d.clone());
                &[]
            }
            Data::None => &[],
        };
        let b = self.capsule(sqe, incap, f);
        self.raw(&b);
    }

    /// One H2CData PDU (as the behaviour wants it; no R2T bookkeeping).
    pub fn h2c(&mut self, cccid: u16, ttag: u16, off: u32, data: &[u8], last: bool) {
        let hend = 24 + if self.hd { 4 } else { 0 };
        let pdo = align_up(hend, (self.cpda as usize + 1) * 4);
        let dd = self.dd && !data.is_empty();
        let plen = pdo + data.len() + if dd { 4 } else { 0 };
        let mut b = vec![0u8; plen];
        b[0] = T_H2CDATA;
        b[1] = if last { F_LAST } else { 0 }
            | if self.hd { F_HDGST } else { 0 }
            | if dd { F_DDGST } else { 0 };
        b[2] = 24;
        b[3] = pdo as u8;
        put32(&mut b, 4, plen as u32);
        put16(&mut b, 8, cccid);
        put16(&mut b, 10, ttag);
        put32(&mut b, 12, off);
        put32(&mut b, 16, data.len() as u32);
        if self.hd {
            let d = crc32c(&b[..24]);
            put32(&mut b, 24, d);
        }
        b[pdo..pdo + data.len()].copy_from_slice(data);
        if dd {
            let d = crc32c(data);
            put32(&mut b, plen - 4, d);
        }
        self.raw(&b);
    }

    fn rx(&mut self, deadline: Instant) -> Rx {
        let Some(s) = self.s.as_mut() else {
            return Rx::Closed;
        };
        let mut ch = [0u8; 8];
        match read_full(s, &mut ch, deadline) {
            Ok(()) => {}
            Err(ErrorKind::TimedOut) => return Rx::Timeout,
            Err(_) => return Rx::Closed,
        }
        let plen = get32(&ch, 4) as usize;
        if !(8..=(1 << 24)).contains(&plen) {
            return Rx::Pdu {
                ty: ch[0],
                flags: ch[1],
                hdr: ch.to_vec(),
                pdo: 0,
                data: vec![],
            };
        }
        let mut rest = vec![0u8; plen - 8];
        if read_full(s, &mut rest, deadline).is_err() {
            return Rx::Closed;
        }
        let mut all = ch.to_vec();
        all.extend_from_slice(&rest);
        let hlen = (ch[2] as usize).min(plen);
        let pdo = ch[3] as usize;
        let hd = ch[1] & F_HDGST != 0 && matches!(ch[0], T_CAPSULE_RESP | T_C2HDATA | T_R2T);
        let dd = ch[1] & F_DDGST != 0;
        let data = if pdo > 0 && pdo <= plen {
            let end = plen - if dd { 4 } else { 0 };
            all[pdo..end.max(pdo)].to_vec()
        } else {
            vec![]
        };
        if hd && hlen + 4 <= plen && crc32c(&all[..hlen]) != get32(&all, hlen) {
            self.log("bad header digest from target".into());
        }
        if dd && !data.is_empty() && crc32c(&data) != get32(&all, plen - 4) {
            self.log("bad data digest from target".into());
        }
        Rx::Pdu {
            ty: ch[0],
            flags: ch[1],
            hdr: all[..hlen].to_vec(),
            pdo,
            data,
        }
    }

    /// Logs an answer that was not the one expected, and reads to the end
    /// of a terminated connection.
    fn note_rx(&mut self, r: Rx) {
        match r {
            Rx::Pdu {
                ty: T_C2HTERM, hdr, ..
            } => {
                let fes = get16(&hdr, 8);
                let fei = get32(&hdr, 10);
                self.log(format!("c2htermreq fes={fes:#x} fei={fei}"));
                self.drain_to_close();
            }
            Rx::Pdu { ty, .. } => self.log(format!("unexpected pdu type {ty:#x}")),
            Rx::Closed => {
                self.log("closed".into());
                self.dead();
            }
            Rx::Timeout => self.log("no answer".into()),
        }
    }

    /// After a C2HTermReq: the target must close (TCP 1.0 §3.6.2.4).
    fn drain_to_close(&mut self) {
        let deadline = Instant::now() + ANSWER;
        loop {
            match self.rx(deadline) {
                Rx::Closed => {
                    self.log("closed".into());
                    break;
                }
                Rx::Timeout => {
                    self.log("not closed after termreq".into());
                    break;
                }
                Rx::Pdu { ty, .. } => self.log(format!("pdu {ty:#x} after termreq")),
            }
        }
        self.dead();
    }

    /// Processes one incoming PDU; completions go to `done`.
    fn pump(&mut self, deadline: Instant) -> bool {
        let r = self.rx(deadline);
        match r {
            Rx::Pdu {
                ty: T_CAPSULE_RESP,
                hdr,
                ..
            } if hdr.len() >= 24 => {
                let cqe = &hdr[8..24];
                let cid = get16(cqe, 12);
                let st = get16(cqe, 14) >> 1;
                let mut c = self.got.remove(&cid).unwrap_or(Cpl {
                    aligned: true,
                    ..Cpl::default()
                });
                c.cid = cid;
                c.dw0 = get32(cqe, 0);
                c.dw1 = get32(cqe, 4);
                c.sc = st as u8;
                c.sct = ((st >> 8) & 7) as u8;
                c.more = st & (1 << 13) != 0;
                c.dnr = st & (1 << 14) != 0;
                self.out.remove(&cid);
                self.done.push_back(c);
                true
            }
            Rx::Pdu {
                ty: T_C2HDATA,
                flags,
                hdr,
                pdo,
                data,
            } if hdr.len() >= 24 => {
                let cid = get16(&hdr, 8);
                let off = get32(&hdr, 12) as usize;
                let hpda = (self.hpda as usize + 1) * 4;
                let e = self.got.entry(cid).or_insert(Cpl {
                    aligned: true,
                    ..Cpl::default()
                });
                if pdo % hpda != 0 {
                    e.aligned = false;
                }
                if e.data.len() < off + data.len() {
                    e.data.resize(off + data.len(), 0);
                }
                e.data[off..off + data.len()].copy_from_slice(&data);
                if flags & F_SUCCESS != 0 {
                    let mut c = self.got.remove(&cid).unwrap();
                    c.cid = cid;
                    c.via_success_flag = true;
                    self.done.push_back(c);
                }
                true
            }
            Rx::Pdu { ty: T_R2T, hdr, .. } if hdr.len() >= 24 => {
                let cid = get16(&hdr, 8);
                let ttag = get16(&hdr, 10);
                let off = get32(&hdr, 12) as usize;
                let len = get32(&hdr, 16) as usize;
                self.got
                    .entry(cid)
                    .or_insert(Cpl {
                        aligned: true,
                        ..Cpl::default()
                    })
                    .r2t += len as u64;
                let Some(buf) = self.out.get(&cid).cloned() else {
                    self.r2ts.push_back((cid, ttag, off as u32, len as u32));
                    return true;
                };
                let chunk = (self.maxh2c as usize).max(512);
                let mut o = off;
                let end = (off + len).min(buf.len());
                while o < end {
                    let n = chunk.min(end - o);
                    let last = o + n == end;
                    self.h2c(cid, ttag, o as u32, &buf[o..o + n], last);
                    o += n;
                }
                true
            }
            other => {
                self.note_rx(other);
                false
            }
        }
    }

    /// Waits for the completion of `cid`; `None` (and a trace line) when
    /// the connection ends or nothing comes.
    pub fn wait(&mut self, cid: u16) -> Option<Cpl> {
        self.wait_for(cid, ANSWER)
    }

    pub fn wait_for(&mut self, cid: u16, within: Duration) -> Option<Cpl> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = self.done.iter().position(|c| c.cid == cid) {
                return self.done.remove(i);
            }
            if !self.alive() {
                return None;
            }
            if !self.pump(deadline) {
                return None;
            }
        }
    }

    /// The next completion, whatever its CID.
    pub fn next(&mut self, within: Duration) -> Option<Cpl> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(c) = self.done.pop_front() {
                return Some(c);
            }
            if !self.alive() || !self.pump(deadline) {
                return None;
            }
        }
    }

    /// Waits until the target closes the connection (or `within` passes);
    /// completions that arrive meanwhile are logged.
    pub fn expect_close(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if let Some(c) = self.done.pop_front() {
                self.log(format!("cqe cid={:#x} {}", c.cid, c.status()));
                continue;
            }
            let Some(s) = self.s.as_mut() else {
                return true;
            };
            let mut b = [0u8; 8];
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let _ = s.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            match s.peek(&mut b) {
                Ok(0) => {
                    self.dead();
                    return true;
                }
                Ok(_) => {
                    if !self.pump(deadline) && !self.alive() {
                        return true;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return false
                }
                Err(_) => {
                    self.dead();
                    return true;
                }
            }
        }
    }
}

fn read_full(s: &mut TcpStream, b: &mut [u8], deadline: Instant) -> Result<(), ErrorKind> {
    let mut n = 0;
    while n < b.len() {
        let now = Instant::now();
        if now >= deadline {
            return Err(ErrorKind::TimedOut);
        }
        let _ = s.set_read_timeout(Some(deadline - now));
        match s.read(&mut b[n..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof),
            Ok(k) => n += k,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ErrorKind::TimedOut)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.kind()),
        }
    }
    Ok(())
}
