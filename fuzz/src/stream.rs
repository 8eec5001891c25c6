//! Checks a byte stream one side sends, as its peer would receive it: it
//! must cut into well-formed PDUs (`Framing::parse` from the receiver's
//! side), with correct header and data digests, consistent data headers,
//! and nothing at all after a TermReq. Any violation panics, which
//! libFuzzer reports as a crash.

use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::pdu::{
    flags, hdgst, CommonHeader, DataHeader, Framing, IcReq, IcResp, Negotiated, PduType, TermReq,
    CH_LEN, DGST_DDGST, DGST_HDGST, DIGEST_LEN, TERM_MAX_DATA,
};
use farflash_wire::sqe::SQE_SIZE;
use farflash_wire::{digest, Cqe, Sqe};

/// What a checked PDU said, for harnesses that react to the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    IcReq(IcReq),
    IcResp(IcResp),
    Capsule(Sqe, usize),
    Resp(Cqe),
    R2T(DataHeader),
    H2CData(DataHeader),
    C2HData(DataHeader, u8),
    Term(TermReq),
}

pub struct PduStream {
    /// True when the receiver is the controller (checking what a host sends).
    at_controller: bool,
    neg: Negotiated,
    /// Required PDO alignment of data PDUs (the peer's PDA), 0 = any.
    pda: usize,
    buf: Vec<u8>,
    terminated: bool,
    pub events: Vec<Event>,
    pub pdus: usize,
    /// Ignore (rather than fail on) bytes after a TermReq: set only to look
    /// past a known bug with `FUZZ_TOLERATE`.
    pub ignore_after_term: bool,
}

fn hex(b: &[u8]) -> String {
    b.iter().take(160).map(|x| format!("{x:02x}")).collect()
}

impl PduStream {
    /// `max_data`: the largest data one PDU of this stream may carry.
    pub fn new(at_controller: bool, max_data: u32) -> PduStream {
        PduStream {
            at_controller,
            neg: Negotiated {
                max_data,
                ..Negotiated::default()
            },
            pda: 0,
            buf: Vec::new(),
            terminated: false,
            events: Vec::new(),
            pdus: 0,
            ignore_after_term: false,
        }
    }

    /// Requires data PDUs to start at a multiple of `align` bytes.
    pub fn set_pda(&mut self, align: usize) {
        self.pda = align;
    }

    /// Changes the largest data one PDU may carry (e.g. once MAXH2CDATA is known).
    pub fn set_max_data(&mut self, max_data: u32) {
        self.neg.max_data = max_data;
    }

    pub fn terminated(&self) -> bool {
        self.terminated
    }

    /// Bytes received that do not yet form a whole PDU.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Appends sent bytes and checks every PDU they complete.
    pub fn push(&mut self, bytes: &[u8]) {
        if bytes.is_empty() || (self.terminated && self.ignore_after_term) {
            return;
        }
        assert!(
            !self.terminated,
            "{} bytes sent after a TermReq: {}",
            bytes.len(),
            hex(bytes)
        );
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(bytes);
        let mut off = 0;
        while buf.len() - off >= CH_LEN && !self.terminated {
            let b = &buf[off..];
            // A TermReq may also come before the IC exchange (TCP §3.6.2.4-5).
            let term = b[0] == PduType::H2CTermReq as u8 || b[0] == PduType::C2HTermReq as u8;
            let neg = Negotiated {
                initialized: self.neg.initialized || term,
                ..self.neg
            };
            let f = Framing::parse(&b[..CH_LEN], &neg, self.at_controller)
                .unwrap_or_else(|e| panic!("PDU #{} malformed ({e}): {}", self.pdus, hex(b)));
            assert!(f.plen >= CH_LEN, "PLEN {} below the common header", f.plen);
            if b.len() < f.plen {
                break;
            }
            let ev = self.check(&f, &b[..f.plen]);
            self.events.push(ev);
            self.pdus += 1;
            off += f.plen;
        }
        buf.drain(..off);
        self.buf = buf;
        if self.ignore_after_term && self.terminated {
            self.buf.clear();
        }
        assert!(
            !self.terminated || self.buf.is_empty(),
            "bytes sent after a TermReq: {}",
            hex(&self.buf)
        );
    }

    fn check(&mut self, f: &Framing, p: &[u8]) -> Event {
        if f.hdgst {
            assert_eq!(p[f.hlen..f.hlen + DIGEST_LEN], hdgst(&p[..f.hlen]), "hdgst");
        }
        assert!(f.data_off + f.data_len <= f.plen);
        let data = &p[f.data_off..f.data_off + f.data_len];
        if f.ddgst {
            let at = f.data_off + f.data_len;
            let want = digest::crc32c(data).to_le_bytes();
            assert_eq!(p[at..at + DIGEST_LEN], want, "ddgst");
        }
        if f.data_len > 0 && self.pda > 0 && f.pdu_type != PduType::C2HTermReq {
            assert_eq!(f.data_off % self.pda, 0, "PDO {} not aligned", f.data_off);
        }
        match f.pdu_type {
            PduType::IcReq => {
                let r = IcReq::decode(p);
                self.initialized(r.dgst);
                Event::IcReq(r)
            }
            PduType::IcResp => {
                let r = IcResp::decode(p);
                self.initialized(r.dgst);
                Event::IcResp(r)
            }
            PduType::H2CTermReq | PduType::C2HTermReq => {
                let t = TermReq::decode(p);
                assert!((1..=6).contains(&t.fes), "TermReq FES {:#x}", t.fes);
                assert!(f.data_len <= TERM_MAX_DATA, "TermReq quotes {}", f.data_len);
                self.terminated = true;
                Event::Term(t)
            }
            PduType::CapsuleCmd => {
                let mut raw = [0u8; SQE_SIZE];
                raw.copy_from_slice(&p[CH_LEN..CH_LEN + SQE_SIZE]);
                Event::Capsule(Sqe::decode(&raw), f.data_len)
            }
            PduType::CapsuleResp => {
                let mut raw = [0u8; CQE_SIZE];
                raw.copy_from_slice(&p[CH_LEN..CH_LEN + CQE_SIZE]);
                Event::Resp(Cqe::decode(&raw))
            }
            PduType::R2T => {
                let h = DataHeader::decode(p);
                assert!(h.length > 0, "R2T with R2TL 0");
                Event::R2T(h)
            }
            PduType::H2CData | PduType::C2HData => {
                let h = DataHeader::decode(p);
                assert_eq!(h.length as usize, f.data_len, "DATAL vs PDU length");
                let fl = CommonHeader::decode(p).flags;
                if fl & flags::DATA_SUCCESS != 0 {
                    assert!(fl & flags::DATA_LAST != 0, "SUCCESS without LAST");
                }
                if f.pdu_type == PduType::H2CData {
                    Event::H2CData(h)
                } else {
                    Event::C2HData(h, fl)
                }
            }
        }
    }

    fn initialized(&mut self, dgst: u8) {
        self.neg.initialized = true;
        self.neg.hdgst = dgst & DGST_HDGST != 0;
        self.neg.ddgst = dgst & DGST_DDGST != 0;
    }
}
