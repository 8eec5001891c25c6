//! `pdu_framing`: arbitrary bytes through `Framing::parse` under every
//! negotiated state, every per-type header decoder, and the encoders'
//! round trips.
//!
//! Input: `[sel][pda][max_data: u32 LE][bytes...]`. `sel` picks the state
//! used to cut `bytes` as a PDU stream; `pda`/`max_data` give the alignment
//! and data limit, which are also tried against fixed values.

use crate::input::Input;
use farflash_wire::pdu::{
    fes, flags, write_header, CommonHeader, DataHeader, Fatal, Framing, IcReq, IcResp, Negotiated,
    PduType, TermReq, CH_LEN, DIGEST_LEN, IC_HLEN, TERM_HLEN, TERM_MAX_DATA,
};
use farflash_wire::{digest, pdu};

const ALL_TYPES: [PduType; 9] = [
    PduType::IcReq,
    PduType::IcResp,
    PduType::H2CTermReq,
    PduType::C2HTermReq,
    PduType::CapsuleCmd,
    PduType::CapsuleResp,
    PduType::H2CData,
    PduType::C2HData,
    PduType::R2T,
];

fn neg_from(bits: u8, rx_pda: u32, max_data: u32) -> Negotiated {
    Negotiated {
        initialized: bits & 1 != 0,
        hdgst: bits & 2 != 0,
        ddgst: bits & 4 != 0,
        rx_pda,
        max_data,
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let sel = inp.u8();
    let pda_code = inp.u8();
    let max_data = inp.u32();
    let bytes = inp.rest();
    // Headers shorter than 8 bytes are never parsed by a receiver; pad them
    // (and give every per-type decoder the largest fixed header it reads).
    let mut hdr = [0u8; IC_HLEN + DIGEST_LEN + TERM_MAX_DATA];
    let n = bytes.len().min(hdr.len());
    hdr[..n].copy_from_slice(&bytes[..n]);

    let pda = if pda_code & 0x80 != 0 {
        0
    } else {
        (pda_code as u32 % 32 + 1) * 4
    };
    for bits in 0..16u8 {
        for rx_pda in [0, pda] {
            for max in [max_data, 8192, u32::MAX] {
                let neg = neg_from(bits, rx_pda, max);
                check_parse(&hdr, &neg, bits & 8 != 0);
            }
        }
    }
    decode_all(&hdr);
    round_trips(&hdr, bytes);
    let neg = neg_from(sel | 1, pda, max_data);
    cut_stream(bytes, &neg, sel & 8 != 0);
}

/// Every invariant a receiver relies on when `parse` says Ok.
fn check_parse(ch: &[u8], neg: &Negotiated, at_controller: bool) {
    let h = CommonHeader::decode(ch);
    let f = match Framing::parse(ch, neg, at_controller) {
        Ok(f) => f,
        Err(Fatal { fes: e, .. }) => {
            assert!((fes::INVALID_HEADER_FIELD..=fes::UNSUPPORTED_PARAMETER).contains(&e));
            return;
        }
    };
    let t = f.pdu_type;
    assert_eq!(t as u8, h.pdu_type);
    assert_eq!(t.host_to_controller(), at_controller);
    let is_ic = matches!(t, PduType::IcReq | PduType::IcResp);
    assert_eq!(is_ic, !neg.initialized);
    assert_eq!(f.hlen, t.hlen());
    assert_eq!(f.hlen, h.hlen as usize);
    assert_eq!(f.plen, h.plen as usize);
    assert!(f.plen >= CH_LEN);
    assert!(!f.hdgst || (neg.hdgst && t.takes_hdgst()));
    if t.takes_hdgst() {
        // The digest is there exactly when negotiated; a receiving host also
        // insists on HDGSTF matching, a controller ignores a stray HDGSTF
        // (TCP §3.3.1.1, as Linux nvmet and SPDK).
        assert_eq!(f.hdgst, neg.hdgst);
        if !at_controller || neg.hdgst {
            assert_eq!(f.hdgst, h.flags & flags::HDGSTF != 0);
        }
    }
    assert!(!f.ddgst || (neg.ddgst && t.takes_ddgst()));
    assert!(f.header_total() <= f.plen, "{f:?}");
    assert!(f.data_off + f.data_len <= f.plen, "{f:?}");
    let tail = if f.ddgst { DIGEST_LEN } else { 0 };
    if f.data_len > 0 {
        assert!(f.data_off >= f.header_total(), "{f:?}");
        assert_eq!(f.data_off + f.data_len + tail, f.plen, "{f:?}");
        if t.takes_ddgst() {
            assert!(f.data_len <= neg.max_data as usize, "{f:?}");
            assert_eq!(f.data_off, h.pdo as usize);
            if neg.rx_pda > 0 {
                assert_eq!(f.data_off % neg.rx_pda as usize, 0);
            }
        }
    } else {
        assert!(!f.ddgst);
        assert_eq!(f.plen, f.header_total(), "{f:?}");
    }
    if matches!(t, PduType::H2CTermReq | PduType::C2HTermReq) {
        assert_eq!(f.data_off, TERM_HLEN);
    }
}

/// The per-type decoders on a buffer holding the largest fixed header.
fn decode_all(hdr: &[u8]) {
    let ic = IcReq::decode(hdr);
    let mut b = [0u8; IC_HLEN];
    ic.encode(&mut b);
    assert_eq!(IcReq::decode(&b), ic);
    let f = Framing::parse(&b, &Negotiated::default(), true).expect("encoded ICReq");
    assert_eq!(f.plen, IC_HLEN);
    let r = IcResp::decode(hdr);
    r.encode(&mut b);
    assert_eq!(IcResp::decode(&b), r);
    assert!(Framing::parse(&b, &Negotiated::default(), false).is_ok());
    let _ = TermReq::decode(hdr);
    let _ = DataHeader::decode(hdr);
    for t in ALL_TYPES {
        assert_eq!(PduType::from_u8(t as u8), Some(t));
        assert!(t.hlen() >= CH_LEN && t.hlen() <= IC_HLEN);
    }
    if let Some(t) = PduType::from_u8(hdr[0]) {
        assert!(ALL_TYPES.contains(&t));
    }
}

/// Encoders produce what the decoders and `Framing::parse` accept.
fn round_trips(hdr: &[u8], bytes: &[u8]) {
    let mut inp = Input::new(bytes);
    let d = DataHeader::decode(hdr);
    let (hd, dd) = (hdr[1] & 1 != 0, hdr[1] & 2 != 0);
    let neg = Negotiated {
        initialized: true,
        hdgst: hd,
        ddgst: dd,
        rx_pda: 0,
        max_data: u32::MAX,
    };
    let data_len = (inp.u16() as usize) + 1;
    for (t, at_ctrl, len) in [
        (PduType::R2T, false, 0),
        (PduType::H2CData, true, data_len),
        (PduType::C2HData, false, data_len),
        (PduType::CapsuleCmd, true, data_len - 1),
    ] {
        let mut b = [0u8; 128];
        let (pdo, plen) = if t == PduType::CapsuleCmd {
            write_header(&mut b, t, 0, hd, dd, len)
        } else {
            d.encode(&mut b, t, hdr[2] & !3, hd, dd, len)
        };
        pdu::seal_header(&mut b, t, hd);
        let f = Framing::parse(&b, &neg, at_ctrl).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert_eq!((f.plen, f.data_len), (plen, len), "{t:?}");
        if len > 0 {
            assert_eq!(f.data_off, pdo);
        }
        if hd {
            assert_eq!(b[f.hlen..f.hlen + 4], pdu::hdgst(&b[..f.hlen]));
        }
        if t != PduType::CapsuleCmd {
            assert_eq!(DataHeader::decode(&b), d);
        }
    }
    let t = TermReq::decode(hdr);
    let mut b = [0u8; TERM_HLEN + TERM_MAX_DATA];
    for (ty, at_ctrl) in [(PduType::H2CTermReq, true), (PduType::C2HTermReq, false)] {
        let n = t.encode(&mut b, ty, bytes);
        assert_eq!(n, TERM_HLEN + bytes.len().min(TERM_MAX_DATA));
        assert_eq!(TermReq::decode(&b), t);
        let f = Framing::parse(&b, &neg, at_ctrl).expect("encoded TermReq");
        assert_eq!(f.plen, n);
    }
    // Digest helpers agree with each other.
    let cut = (hdr[3] as usize).min(bytes.len());
    let whole = digest::crc32c(bytes);
    let split = digest::crc32c_append(digest::crc32c(&bytes[..cut]), &bytes[cut..]);
    assert_eq!(whole, split);
}

/// Cuts `bytes` into PDUs as a receiver would; PLEN always moves forward.
fn cut_stream(bytes: &[u8], neg: &Negotiated, at_controller: bool) {
    let mut off = 0;
    while bytes.len() - off >= CH_LEN {
        let Ok(f) = Framing::parse(&bytes[off..off + CH_LEN], neg, at_controller) else {
            return;
        };
        assert!(f.plen >= CH_LEN);
        off = off.saturating_add(f.plen).min(bytes.len());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn smoke() {
        super::run(&[]);
        super::run(&[0xff; 300]);
        let mut v = vec![1, 0, 0, 0, 1, 0];
        v.extend_from_slice(&[4, 0, 72, 0, 72, 0, 0, 0]);
        v.resize(200, 0);
        super::run(&v);
    }
}
