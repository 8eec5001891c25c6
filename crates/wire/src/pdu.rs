//! NVMe/TCP PDUs (TCP §3.6): the 8-byte common header, the per-type
//! headers, and the framing rules both ends use to cut a byte stream into
//! PDUs. Receivers call [`Framing::parse`] on each common header; a
//! [`Fatal`] result names the Fatal Error Status and the offending byte,
//! ready to go into a TermReq before the connection is closed.

use crate::cqe::CQE_SIZE;
use crate::le::{put_u16, put_u32, u16_at, u32_at};
use crate::sqe::SQE_SIZE;

pub const CH_LEN: usize = 8;
pub const DIGEST_LEN: usize = 4;
/// ICReq / ICResp header length (TCP §3.6.2.2, §3.6.2.3).
pub const IC_HLEN: usize = 128;
/// CapsuleCmd header: common header + SQE (TCP §3.6.2.6).
pub const CAPSULE_CMD_HLEN: usize = CH_LEN + SQE_SIZE;
/// CapsuleResp header: common header + CQE (TCP §3.6.2.7).
pub const CAPSULE_RESP_HLEN: usize = CH_LEN + CQE_SIZE;
/// H2CData, C2HData and R2T headers (TCP §3.6.2.8-10).
pub const DATA_HLEN: usize = 24;
/// H2CTermReq / C2HTermReq header (TCP §3.6.2.4-5).
pub const TERM_HLEN: usize = 24;
/// Most bytes of the offending PDU header a TermReq carries (TCP §3.6.2.4).
pub const TERM_MAX_DATA: usize = 128;
/// Smallest MAXH2CDATA a controller may advertise (TCP §3.6.2.3).
pub const MIN_MAXH2CDATA: u32 = 4096;

/// PDU types (TCP §3.6.1 Figure "PDU-Type Values").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PduType {
    IcReq = 0x00,
    IcResp = 0x01,
    H2CTermReq = 0x02,
    C2HTermReq = 0x03,
    CapsuleCmd = 0x04,
    CapsuleResp = 0x05,
    H2CData = 0x06,
    C2HData = 0x07,
    R2T = 0x09,
}

impl PduType {
    pub fn from_u8(v: u8) -> Option<PduType> {
        Some(match v {
            0x00 => PduType::IcReq,
            0x01 => PduType::IcResp,
            0x02 => PduType::H2CTermReq,
            0x03 => PduType::C2HTermReq,
            0x04 => PduType::CapsuleCmd,
            0x05 => PduType::CapsuleResp,
            0x06 => PduType::H2CData,
            0x07 => PduType::C2HData,
            0x09 => PduType::R2T,
            _ => return None,
        })
    }
    /// The fixed header length of this type (TCP §3.6.2).
    pub fn hlen(self) -> usize {
        match self {
            PduType::IcReq | PduType::IcResp => IC_HLEN,
            PduType::H2CTermReq | PduType::C2HTermReq => TERM_HLEN,
            PduType::CapsuleCmd => CAPSULE_CMD_HLEN,
            PduType::CapsuleResp => CAPSULE_RESP_HLEN,
            PduType::H2CData | PduType::C2HData | PduType::R2T => DATA_HLEN,
        }
    }
    /// Whether a header digest may follow this type's header (never for the
    /// IC and TermReq PDUs, TCP §3.6.1).
    pub fn takes_hdgst(self) -> bool {
        !matches!(
            self,
            PduType::IcReq | PduType::IcResp | PduType::H2CTermReq | PduType::C2HTermReq
        )
    }
    /// Whether this type may carry data protected by a data digest.
    pub fn takes_ddgst(self) -> bool {
        matches!(
            self,
            PduType::CapsuleCmd | PduType::H2CData | PduType::C2HData
        )
    }
    /// Whether the host sends this type (true) or the controller does.
    pub fn host_to_controller(self) -> bool {
        matches!(
            self,
            PduType::IcReq | PduType::H2CTermReq | PduType::CapsuleCmd | PduType::H2CData
        )
    }
}

/// Common header flags (TCP §3.6.1).
pub mod flags {
    pub const HDGSTF: u8 = 0x01;
    pub const DDGSTF: u8 = 0x02;
    /// H2CData/C2HData: last PDU of this transfer.
    pub const DATA_LAST: u8 = 0x04;
    /// C2HData: command completed successfully, no CapsuleResp follows.
    pub const DATA_SUCCESS: u8 = 0x08;
}

/// Fatal Error Status values of a TermReq (TCP §3.6.2.4 Figure "FES").
pub mod fes {
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    pub const DATA_TRANSFER_OUT_OF_RANGE: u16 = 0x04;
    pub const DATA_TRANSFER_LIMIT_EXCEEDED: u16 = 0x05;
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// A fatal transport error: the connection is to be terminated with a
/// TermReq carrying `fes` and `fei` (the byte offset of the bad field for
/// INVALID_HEADER_FIELD), then closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fatal NVMe/TCP error: FES {fes:#x}, FEI {fei}")]
pub struct Fatal {
    pub fes: u16,
    pub fei: u32,
}

impl Fatal {
    pub const fn field(offset: u32) -> Fatal {
        Fatal {
            fes: fes::INVALID_HEADER_FIELD,
            fei: offset,
        }
    }
    pub const fn sequence() -> Fatal {
        Fatal {
            fes: fes::PDU_SEQUENCE_ERROR,
            fei: 0,
        }
    }
    pub const fn hdgst() -> Fatal {
        Fatal {
            fes: fes::HEADER_DIGEST_ERROR,
            fei: 0,
        }
    }
    pub const fn out_of_range() -> Fatal {
        Fatal {
            fes: fes::DATA_TRANSFER_OUT_OF_RANGE,
            fei: 0,
        }
    }
    pub const fn limit() -> Fatal {
        Fatal {
            fes: fes::DATA_TRANSFER_LIMIT_EXCEEDED,
            fei: 0,
        }
    }
    pub const fn unsupported(offset: u32) -> Fatal {
        Fatal {
            fes: fes::UNSUPPORTED_PARAMETER,
            fei: offset,
        }
    }
}

/// The 8-byte common header (TCP §3.6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonHeader {
    pub pdu_type: u8,
    pub flags: u8,
    pub hlen: u8,
    pub pdo: u8,
    pub plen: u32,
}

impl CommonHeader {
    pub fn decode(b: &[u8]) -> CommonHeader {
        CommonHeader {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32_at(b, 4),
        }
    }
    pub fn encode(&self, b: &mut [u8]) {
        b[0] = self.pdu_type;
        b[1] = self.flags;
        b[2] = self.hlen;
        b[3] = self.pdo;
        put_u32(b, 4, self.plen);
    }
}

/// What the receiving end has negotiated, for [`Framing::parse`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// True once ICReq/ICResp were exchanged.
    pub initialized: bool,
    pub hdgst: bool,
    pub ddgst: bool,
    /// Required data alignment of PDUs we receive, in bytes (CPDA or HPDA
    /// as (value + 1) * 4; 0 means none).
    pub rx_pda: u32,
    /// Largest data length accepted in one received PDU.
    pub max_data: u32,
}

/// How one received PDU is laid out, from its common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framing {
    pub pdu_type: PduType,
    pub flags: u8,
    /// Header length (fixed per type).
    pub hlen: usize,
    /// Whether a header digest follows the header.
    pub hdgst: bool,
    /// Offset of the data from the PDU start (0 when there is none).
    pub data_off: usize,
    /// Data length (excluding padding and digest).
    pub data_len: usize,
    /// Whether a data digest follows the data.
    pub ddgst: bool,
    /// Total PDU length (PLEN).
    pub plen: usize,
}

impl Framing {
    /// Validates a received common header against the negotiated state and
    /// the receiving side (`at_controller`), TCP §3.6.1 and §3.6.2.
    pub fn parse(ch: &[u8], neg: &Negotiated, at_controller: bool) -> Result<Framing, Fatal> {
        let h = CommonHeader::decode(ch);
        let t = PduType::from_u8(h.pdu_type).ok_or(Fatal::field(0))?;
        if t.host_to_controller() != at_controller {
            return Err(Fatal::field(0));
        }
        let is_ic = matches!(t, PduType::IcReq | PduType::IcResp);
        if is_ic == neg.initialized {
            // ICReq is the first PDU and only the first (TCP §3.3).
            return Err(Fatal::sequence());
        }
        let hlen = t.hlen();
        if h.hlen as usize != hlen {
            return Err(Fatal::field(2));
        }
        let plen = h.plen as usize;
        let hdgst = t.takes_hdgst() && neg.hdgst;
        let hdgstf = h.flags & flags::HDGSTF != 0;
        // TCP §3.3.1.1: with header digests on, every PDU carries HDGST and
        // sets HDGSTF (Linux nvmet refuses one without). With them off the
        // sender shall clear HDGSTF, but the PDU's length does not depend on
        // the flag: a controller ignores it, as Linux nvmet and SPDK do. Was:
        // FES 01h FEI 1. The farflash host still refuses it.
        if t.takes_hdgst() && hdgst != hdgstf && (hdgst || !at_controller) {
            return Err(Fatal::field(1));
        }
        let hend = hlen + if hdgst { DIGEST_LEN } else { 0 };
        let mut f = Framing {
            pdu_type: t,
            flags: h.flags,
            hlen,
            hdgst,
            data_off: 0,
            data_len: 0,
            ddgst: false,
            plen,
        };
        match t {
            PduType::IcReq | PduType::IcResp => {
                if plen != IC_HLEN {
                    return Err(Fatal::field(4));
                }
            }
            PduType::H2CTermReq | PduType::C2HTermReq => {
                if plen < hlen || plen > hlen + TERM_MAX_DATA + 24 {
                    return Err(Fatal::field(4));
                }
                f.data_off = hlen;
                f.data_len = plen - hlen;
            }
            PduType::CapsuleResp | PduType::R2T => {
                if plen != hend {
                    return Err(Fatal::field(4));
                }
            }
            PduType::CapsuleCmd | PduType::H2CData | PduType::C2HData => {
                let ddgst = neg.ddgst;
                if plen == hend {
                    // No data, so no data digest. TCP §3.6.2.6 defines PDO only
                    // as the offset of the PDU Data (a multiple of CPDA, which
                    // we advertise as 0), so with none it says nothing a
                    // receiver could check: a CapsuleCmd's PDO is ignored, as
                    // Linux nvmet and SPDK do (hosts send 0 or HLEN+HDGST).
                    // Was: PDO other than 0 was fatal (FES 01h, FEI 3).
                    // H2CData and C2HData exist to carry data (DATAL, TCP
                    // §3.6.2.8-9): one without is an invalid PLEN.
                    if t != PduType::CapsuleCmd {
                        return Err(if h.pdo != 0 {
                            Fatal::field(3)
                        } else {
                            Fatal::field(4)
                        });
                    }
                } else {
                    if plen < hend {
                        // PLEN shorter than the header (and its digest).
                        return Err(Fatal::field(4));
                    }
                    // TCP §3.3.1.1, as for HDGSTF above: DDGSTF missing while
                    // data digests are on is refused (Linux nvmet), DDGSTF set
                    // while they are off is ignored by a controller (Linux
                    // nvmet, SPDK). Was: FES 01h FEI 1 either way.
                    let ddgstf = h.flags & flags::DDGSTF != 0;
                    if ddgst != ddgstf && (ddgst || !at_controller) {
                        return Err(Fatal::field(1));
                    }
                    let pdo = h.pdo as usize;
                    if pdo < hend || pdo > plen {
                        return Err(Fatal::field(3));
                    }
                    if neg.rx_pda > 0 && !pdo.is_multiple_of(neg.rx_pda as usize) {
                        return Err(Fatal::field(3));
                    }
                    let tail = if ddgst { DIGEST_LEN } else { 0 };
                    if plen < pdo + tail + 1 {
                        return Err(Fatal::field(4));
                    }
                    f.data_off = pdo;
                    f.data_len = plen - pdo - tail;
                    f.ddgst = ddgst;
                    if f.data_len > neg.max_data as usize {
                        // TCP §3.6.2.4: FES 05h when a PDU carries more than the
                        // controller advertised (in-capsule size, MAXH2CDATA);
                        // C2HData has no negotiated limit, so more than the host
                        // can take is out of range of the command (04h).
                        return Err(if t == PduType::C2HData {
                            Fatal::out_of_range()
                        } else {
                            Fatal::limit()
                        });
                    }
                }
            }
        }
        Ok(f)
    }

    /// Bytes of header plus header digest.
    pub fn header_total(&self) -> usize {
        self.hlen + if self.hdgst { DIGEST_LEN } else { 0 }
    }
}

/// Header digest for bytes `hdr` (which are exactly the `hlen` header bytes).
pub fn hdgst(hdr: &[u8]) -> [u8; 4] {
    crate::digest::crc32c(hdr).to_le_bytes()
}

/// Writes the common header of a PDU of type `t`, with the HDGSTF/DDGSTF flags
/// derived from `hdgst` / `ddgst` and the data length. Returns the offset
/// where data starts (`pdo`) and the total length.
pub fn write_header(
    b: &mut [u8],
    t: PduType,
    extra_flags: u8,
    hdgst: bool,
    ddgst: bool,
    data_len: usize,
) -> (usize, usize) {
    let hlen = t.hlen();
    let hd = hdgst && t.takes_hdgst();
    let dd = ddgst && t.takes_ddgst() && data_len > 0;
    let hend = hlen + if hd { DIGEST_LEN } else { 0 };
    let pdo = if data_len > 0 { hend } else { 0 };
    let plen = hend + data_len + if dd { DIGEST_LEN } else { 0 };
    let mut fl = extra_flags;
    if hd {
        fl |= flags::HDGSTF;
    }
    if dd {
        fl |= flags::DDGSTF;
    }
    CommonHeader {
        pdu_type: t as u8,
        flags: fl,
        hlen: hlen as u8,
        pdo: pdo as u8,
        plen: plen as u32,
    }
    .encode(b);
    (if data_len > 0 { pdo } else { hend }, plen)
}

/// Appends the header digest after the header bytes in `b`, if enabled
/// for this PDU type. `b` must hold at least `hlen + 4` bytes.
pub fn seal_header(b: &mut [u8], t: PduType, hdgst_on: bool) {
    if hdgst_on && t.takes_hdgst() {
        let hlen = t.hlen();
        let d = hdgst(&b[..hlen]);
        b[hlen..hlen + DIGEST_LEN].copy_from_slice(&d);
    }
}

/// ICReq (TCP §3.6.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IcReq {
    pub pfv: u16,
    /// Host PDU Data Alignment: 0's based, in dwords.
    pub hpda: u8,
    /// Bit 0: header digest, bit 1: data digest.
    pub dgst: u8,
    /// Maximum outstanding R2Ts per command, 0's based.
    pub maxr2t: u32,
}

/// ICResp (TCP §3.6.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IcResp {
    pub pfv: u16,
    /// Controller PDU Data Alignment: 0's based, in dwords.
    pub cpda: u8,
    pub dgst: u8,
    /// Largest H2CData data length the controller accepts.
    pub maxh2cdata: u32,
}

pub const DGST_HDGST: u8 = 0x01;
pub const DGST_DDGST: u8 = 0x02;

impl IcReq {
    pub fn decode(b: &[u8]) -> IcReq {
        IcReq {
            pfv: u16_at(b, 8),
            hpda: b[10],
            dgst: b[11],
            maxr2t: u32_at(b, 12),
        }
    }
    pub fn encode(&self, b: &mut [u8; IC_HLEN]) {
        b.fill(0);
        write_header(b, PduType::IcReq, 0, false, false, 0);
        put_u16(b, 8, self.pfv);
        b[10] = self.hpda;
        b[11] = self.dgst;
        put_u32(b, 12, self.maxr2t);
    }
}

impl IcResp {
    pub fn decode(b: &[u8]) -> IcResp {
        IcResp {
            pfv: u16_at(b, 8),
            cpda: b[10],
            dgst: b[11],
            maxh2cdata: u32_at(b, 12),
        }
    }
    pub fn encode(&self, b: &mut [u8; IC_HLEN]) {
        b.fill(0);
        write_header(b, PduType::IcResp, 0, false, false, 0);
        put_u16(b, 8, self.pfv);
        b[10] = self.cpda;
        b[11] = self.dgst;
        put_u32(b, 12, self.maxh2cdata);
    }
}

/// The fields shared by H2CData, C2HData and R2T (TCP §3.6.2.8-10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DataHeader {
    /// Command Capsule CID.
    pub cccid: u16,
    /// Transfer tag (R2T, H2CData); reserved in C2HData.
    pub ttag: u16,
    /// Data offset (DATAO / R2TO).
    pub offset: u32,
    /// Data length (DATAL / R2TL).
    pub length: u32,
}

impl DataHeader {
    pub fn decode(b: &[u8]) -> DataHeader {
        DataHeader {
            cccid: u16_at(b, 8),
            ttag: u16_at(b, 10),
            offset: u32_at(b, 12),
            length: u32_at(b, 16),
        }
    }
    /// Writes a complete data-type header (common header included) into `b`
    /// and its header digest; returns the data offset and PDU length. `data_len`
    /// is the payload that will follow (0 for R2T).
    pub fn encode(
        &self,
        b: &mut [u8],
        t: PduType,
        extra_flags: u8,
        hdgst: bool,
        ddgst: bool,
        data_len: usize,
    ) -> (usize, usize) {
        let r = write_header(b, t, extra_flags, hdgst, ddgst, data_len);
        put_u16(b, 8, self.cccid);
        put_u16(b, 10, self.ttag);
        put_u32(b, 12, self.offset);
        put_u32(b, 16, self.length);
        b[20..24].fill(0);
        seal_header(b, t, hdgst);
        r
    }
}

/// H2CTermReq / C2HTermReq fields (TCP §3.6.2.4-5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TermReq {
    pub fes: u16,
    pub fei: u32,
}

impl TermReq {
    pub fn decode(b: &[u8]) -> TermReq {
        TermReq {
            fes: u16_at(b, 8),
            fei: u32_at(b, 10),
        }
    }
    /// Writes a TermReq of type `t` quoting up to 128 bytes of the offending
    /// header `bad`; returns its length.
    pub fn encode(&self, b: &mut [u8], t: PduType, bad: &[u8]) -> usize {
        let n = bad.len().min(TERM_MAX_DATA);
        CommonHeader {
            pdu_type: t as u8,
            flags: 0,
            hlen: TERM_HLEN as u8,
            pdo: 0,
            plen: (TERM_HLEN + n) as u32,
        }
        .encode(b);
        put_u16(b, 8, self.fes);
        put_u32(b, 10, self.fei);
        b[14..TERM_HLEN].fill(0);
        b[TERM_HLEN..TERM_HLEN + n].copy_from_slice(&bad[..n]);
        TERM_HLEN + n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn neg(hd: bool, dd: bool) -> Negotiated {
        Negotiated {
            initialized: true,
            hdgst: hd,
            ddgst: dd,
            rx_pda: 0,
            max_data: 1 << 20,
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(CAPSULE_CMD_HLEN, 72);
        assert_eq!(CAPSULE_RESP_HLEN, 24);
        assert_eq!(PduType::R2T.hlen(), 24);
        assert_eq!(PduType::from_u8(8), None);
    }

    #[test]
    fn icreq_round_trip_and_offsets() {
        let r = IcReq {
            pfv: 0,
            hpda: 0,
            dgst: 3,
            maxr2t: 0,
        };
        let mut b = [0u8; IC_HLEN];
        r.encode(&mut b);
        assert_eq!(&b[..8], &[0, 0, 128, 0, 128, 0, 0, 0]);
        assert_eq!(b[11], 3);
        assert_eq!(IcReq::decode(&b), r);
        let f = Framing::parse(&b, &Negotiated::default(), true).unwrap();
        assert_eq!(f.pdu_type, PduType::IcReq);
        // A second ICReq is a sequence error; an ICReq at the host is invalid.
        assert_eq!(
            Framing::parse(&b, &neg(false, false), true),
            Err(Fatal::sequence())
        );
        assert_eq!(
            Framing::parse(&b, &Negotiated::default(), false),
            Err(Fatal::field(0))
        );
        let resp = IcResp {
            pfv: 0,
            cpda: 0,
            dgst: 1,
            maxh2cdata: 131072,
        };
        resp.encode(&mut b);
        assert_eq!(crate::le::u32_at(&b, 12), 131072);
        assert_eq!(IcResp::decode(&b), resp);
    }

    #[test]
    fn capsule_before_icreq_is_sequence_error() {
        let mut b = [0u8; 72];
        write_header(&mut b, PduType::CapsuleCmd, 0, false, false, 0);
        assert_eq!(
            Framing::parse(&b, &Negotiated::default(), true),
            Err(Fatal::sequence())
        );
        assert!(Framing::parse(&b, &neg(false, false), true).is_ok());
    }

    #[test]
    fn capsule_with_data_and_digests() {
        let mut b = [0u8; 128];
        let (pdo, plen) = write_header(&mut b, PduType::CapsuleCmd, 0, true, true, 16);
        assert_eq!(pdo, 76);
        assert_eq!(plen, 72 + 4 + 16 + 4);
        assert_eq!(b[1], flags::HDGSTF | flags::DDGSTF);
        let f = Framing::parse(&b, &neg(true, true), true).unwrap();
        assert_eq!(
            (f.data_off, f.data_len, f.hdgst, f.ddgst),
            (76, 16, true, true)
        );
        // Flags for digests that were not negotiated are ignored by the
        // controller (TCP §3.3.1.1): the digests' bytes are then PAD / data.
        let f = Framing::parse(&b, &neg(false, true), true).unwrap();
        assert_eq!((f.hdgst, f.data_off, f.data_len), (false, 76, 16));
        let f = Framing::parse(&b, &neg(true, false), true).unwrap();
        assert_eq!((f.ddgst, f.data_off, f.data_len), (false, 76, 20));
        // A flag missing for a negotiated digest is not.
        let mut c = b;
        c[1] = flags::DDGSTF;
        assert_eq!(
            Framing::parse(&c, &neg(true, true), true),
            Err(Fatal::field(1))
        );
    }

    #[test]
    fn bad_lengths() {
        let mut b = [0u8; 72];
        write_header(&mut b, PduType::CapsuleCmd, 0, false, false, 0);
        b[2] = 71;
        assert_eq!(
            Framing::parse(&b, &neg(false, false), true),
            Err(Fatal::field(2))
        );
        b[2] = 72;
        b[3] = 0;
        put_u32(&mut b, 4, 60); // plen < hlen
        assert!(Framing::parse(&b, &neg(false, false), true).is_err());
        // Data beyond max_data.
        let mut n = neg(false, false);
        n.max_data = 8;
        write_header(&mut b, PduType::CapsuleCmd, 0, false, false, 9);
        assert_eq!(Framing::parse(&b, &n, true), Err(Fatal::limit()));
        // PDO pointing inside the header.
        write_header(&mut b, PduType::H2CData, 0, false, false, 9);
        b[3] = 8;
        assert_eq!(Framing::parse(&b, &n, true), Err(Fatal::field(3)));
        // Unknown type.
        b[0] = 0x0A;
        assert_eq!(Framing::parse(&b, &n, true), Err(Fatal::field(0)));
    }

    #[test]
    fn capsule_without_data_ignores_pdo() {
        // TCP §3.6.2.6: PDO locates PDU Data; a capsule without any may
        // carry 0, HLEN (what some hosts send), HLEN + HDGST, or anything.
        for (hd, pdos) in [(false, [0u8, 72, 76, 255]), (true, [0u8, 72, 76, 255])] {
            let mut b = [0u8; 76];
            write_header(&mut b, PduType::CapsuleCmd, 0, hd, false, 0);
            for pdo in pdos {
                b[3] = pdo;
                let f = Framing::parse(&b, &neg(hd, true), true).unwrap();
                assert_eq!((f.data_off, f.data_len, f.ddgst), (0, 0, false));
                assert_eq!(f.plen, if hd { 76 } else { 72 });
            }
        }
        // With data the PDO still has to lie between the header and PLEN.
        let mut b = [0u8; 128];
        write_header(&mut b, PduType::CapsuleCmd, 0, false, false, 16);
        b[3] = 40;
        assert_eq!(
            Framing::parse(&b, &neg(false, false), true),
            Err(Fatal::field(3))
        );
        // H2CData without data is still an invalid PDU, whatever its PDO.
        let mut b = [0u8; 24];
        write_header(&mut b, PduType::H2CData, 0, false, false, 0);
        assert_eq!(
            Framing::parse(&b, &neg(false, false), true),
            Err(Fatal::field(4))
        );
        b[3] = 24;
        assert_eq!(
            Framing::parse(&b, &neg(false, false), true),
            Err(Fatal::field(3))
        );
    }

    #[test]
    fn digest_flags_without_negotiated_digests_are_ignored_at_the_controller() {
        // TCP §3.3.1.1: HDGSTF/DDGSTF set although the digests are off.
        let mut b = [0u8; 72 + 16];
        write_header(&mut b, PduType::CapsuleCmd, 0, false, false, 16);
        b[1] |= flags::HDGSTF | flags::DDGSTF;
        let f = Framing::parse(&b, &neg(false, false), true).unwrap();
        assert_eq!(
            (f.hdgst, f.ddgst, f.data_off, f.data_len),
            (false, false, 72, 16)
        );
        // Without data too.
        let mut c = [0u8; 72];
        write_header(&mut c, PduType::CapsuleCmd, 0, false, false, 0);
        c[1] |= flags::HDGSTF;
        assert!(Framing::parse(&c, &neg(false, false), true).is_ok());
        // The host side keeps refusing them.
        let mut d = [0u8; 24];
        write_header(&mut d, PduType::R2T, flags::HDGSTF, false, false, 0);
        d[1] |= flags::HDGSTF;
        assert_eq!(
            Framing::parse(&d, &neg(false, false), false),
            Err(Fatal::field(1))
        );
        // A flag missing while its digest is on stays fatal.
        let mut e = [0u8; 128];
        write_header(&mut e, PduType::CapsuleCmd, 0, true, true, 16);
        e[1] &= !flags::HDGSTF;
        assert_eq!(
            Framing::parse(&e, &neg(true, true), true),
            Err(Fatal::field(1))
        );
        e[1] |= flags::HDGSTF;
        e[1] &= !flags::DDGSTF;
        assert_eq!(
            Framing::parse(&e, &neg(true, true), true),
            Err(Fatal::field(1))
        );
    }

    #[test]
    fn data_header_round_trip() {
        let d = DataHeader {
            cccid: 9,
            ttag: 3,
            offset: 4096,
            length: 8192,
        };
        let mut b = [0u8; 28];
        let (pdo, plen) = d.encode(&mut b, PduType::R2T, 0, true, false, 0);
        assert_eq!((pdo, plen), (28, 28));
        assert_eq!(DataHeader::decode(&b), d);
        assert_eq!(&b[24..28], &hdgst(&b[..24]));
        let f = Framing::parse(&b, &neg(true, false), false).unwrap();
        assert_eq!(f.pdu_type, PduType::R2T);
        let mut c = [0u8; 24];
        let (pdo, plen) = d.encode(
            &mut c,
            PduType::C2HData,
            flags::DATA_LAST,
            false,
            false,
            4096,
        );
        assert_eq!((pdo, plen), (24, 24 + 4096));
        assert_eq!(c[1], flags::DATA_LAST);
    }

    #[test]
    fn term_req() {
        let t = TermReq {
            fes: fes::INVALID_HEADER_FIELD,
            fei: 2,
        };
        let mut b = [0u8; 200];
        let bad = [0xAAu8; 200];
        let n = t.encode(&mut b, PduType::C2HTermReq, &bad);
        assert_eq!(n, 24 + 128);
        assert_eq!(TermReq::decode(&b), t);
        let f = Framing::parse(&b, &neg(true, true), false).unwrap();
        assert_eq!((f.data_off, f.data_len, f.hdgst), (24, 128, false));
    }
}
