//! Reservations (Base 2.0 §8.19; NVM Command Set §3.2.4-3.2.7): the fields
//! of Reservation Register (0Dh), Report (0Eh), Acquire (11h) and Release
//! (15h), the Reservation Status data structures (standard and extended)
//! and the Reservation Notification log page (80h).

use crate::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::sqe::Sqe;

/// Reservation types (RTYPE, Base §7.2 Figure "Reservation Type Encoding").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResvType {
    WriteExclusive = 1,
    ExclusiveAccess = 2,
    WriteExclusiveRegistrantsOnly = 3,
    ExclusiveAccessRegistrantsOnly = 4,
    WriteExclusiveAllRegistrants = 5,
    ExclusiveAccessAllRegistrants = 6,
}

impl ResvType {
    pub fn from_u8(v: u8) -> Option<ResvType> {
        use ResvType::*;
        Some(match v {
            1 => WriteExclusive,
            2 => ExclusiveAccess,
            3 => WriteExclusiveRegistrantsOnly,
            4 => ExclusiveAccessRegistrantsOnly,
            5 => WriteExclusiveAllRegistrants,
            6 => ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }
    /// Every registrant holds an "all registrants" reservation.
    pub fn all_registrants(self) -> bool {
        matches!(
            self,
            ResvType::WriteExclusiveAllRegistrants | ResvType::ExclusiveAccessAllRegistrants
        )
    }
    /// Registrants (not only the holder) may write.
    pub fn registrants_access(self) -> bool {
        !matches!(self, ResvType::WriteExclusive | ResvType::ExclusiveAccess)
    }
    /// Non-holders (or, for the registrants types, non-registrants) may
    /// not read either.
    pub fn exclusive_access(self) -> bool {
        matches!(
            self,
            ResvType::ExclusiveAccess
                | ResvType::ExclusiveAccessRegistrantsOnly
                | ResvType::ExclusiveAccessAllRegistrants
        )
    }
}

/// Reservation Register CDW10: RREGA (2:0), IEKEY (3), CPTPL (31:30); data CRKEY, NRKEY.
pub const RREGA_REGISTER: u8 = 0;
pub const RREGA_UNREGISTER: u8 = 1;
pub const RREGA_REPLACE: u8 = 2;
/// CPTPL: 00b no change, 10b clear PTPL (state 0), 11b set PTPL (state 1).
pub const CPTPL_NO_CHANGE: u8 = 0;
pub const CPTPL_CLEAR: u8 = 2;
pub const CPTPL_SET: u8 = 3;
/// Reservation Acquire CDW10: RACQA (2:0), IEKEY (3), RTYPE (15:8); data CRKEY, PRKEY.
pub const RACQA_ACQUIRE: u8 = 0;
pub const RACQA_PREEMPT: u8 = 1;
pub const RACQA_PREEMPT_ABORT: u8 = 2;
/// Reservation Release CDW10: RRELA (2:0), IEKEY (3), RTYPE (15:8); data CRKEY.
pub const RRELA_RELEASE: u8 = 0;
pub const RRELA_CLEAR: u8 = 1;

/// Data lengths: Register and Acquire carry two keys, Release one.
pub const KEYS_LEN: u32 = 16;
pub const KEY_LEN: u32 = 8;

/// The action (RREGA / RACQA / RRELA), IEKEY, RTYPE and CPTPL of CDW10.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResvCdw10 {
    pub action: u8,
    pub iekey: bool,
    pub rtype: u8,
    pub cptpl: u8,
}

impl ResvCdw10 {
    pub fn from_sqe(s: &Sqe) -> ResvCdw10 {
        ResvCdw10 {
            action: (s.cdw10 & 7) as u8,
            iekey: s.cdw10 & (1 << 3) != 0,
            rtype: (s.cdw10 >> 8) as u8,
            cptpl: (s.cdw10 >> 30) as u8,
        }
    }
    pub fn to_cdw10(self) -> u32 {
        (self.action as u32 & 7)
            | (self.iekey as u32) << 3
            | (self.rtype as u32) << 8
            | (self.cptpl as u32 & 3) << 30
    }
}

/// The two keys of Register (CRKEY, NRKEY) or Acquire (CRKEY, PRKEY), or
/// Release's CRKEY (the second is 0).
pub fn keys(data: &[u8]) -> (u64, u64) {
    let a = if data.len() >= 8 { u64_at(data, 0) } else { 0 };
    let b = if data.len() >= 16 { u64_at(data, 8) } else { 0 };
    (a, b)
}

/// Reservation Report: NUMD (CDW10, 0's based dwords), EDS (CDW11 bit 0).
pub fn report_len(s: &Sqe) -> u64 {
    (s.cdw10 as u64 + 1) * 4
}
pub fn report_eds(s: &Sqe) -> bool {
    s.cdw11 & 1 != 0
}

/// Reservation Status header: 24 bytes (standard), 64 (extended).
pub const REPORT_HDR_LEN: usize = 24;
pub const REPORT_EXT_HDR_LEN: usize = 64;
/// Registered Controller data structure: 24 bytes (standard, 64-bit host
/// ID), 64 bytes (extended, 128-bit host ID).
pub const REGCTL_LEN: usize = 24;
pub const REGCTL_EXT_LEN: usize = 64;

/// One registrant as the report shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegCtl {
    pub cntlid: u16,
    /// RCSTS bit 0: this registrant holds the reservation.
    pub holds: bool,
    pub hostid: [u8; 16],
    pub rkey: u64,
}

/// The Reservation Status data structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResvStatus {
    pub gen: u32,
    /// 0: no reservation.
    pub rtype: u8,
    pub ptpls: bool,
    pub regctls: Vec<RegCtl>,
}

impl ResvStatus {
    pub fn len(&self, eds: bool) -> usize {
        if eds {
            REPORT_EXT_HDR_LEN + REGCTL_EXT_LEN * self.regctls.len()
        } else {
            REPORT_HDR_LEN + REGCTL_LEN * self.regctls.len()
        }
    }
    pub fn is_empty(&self) -> bool {
        self.regctls.is_empty()
    }
    /// Writes the structure into `b` (at least `len(eds)` bytes).
    pub fn encode(&self, b: &mut [u8], eds: bool) {
        b[..self.len(eds)].fill(0);
        put_u32(b, 0, self.gen);
        b[4] = self.rtype;
        put_u16(b, 5, self.regctls.len() as u16);
        b[9] = self.ptpls as u8;
        let (mut off, step) = if eds {
            (REPORT_EXT_HDR_LEN, REGCTL_EXT_LEN)
        } else {
            (REPORT_HDR_LEN, REGCTL_LEN)
        };
        for r in &self.regctls {
            put_u16(b, off, r.cntlid);
            b[off + 2] = r.holds as u8;
            if eds {
                put_u64(b, off + 8, r.rkey);
                b[off + 16..off + 32].copy_from_slice(&r.hostid);
            } else {
                b[off + 8..off + 16].copy_from_slice(&r.hostid[..8]);
                put_u64(b, off + 16, r.rkey);
            }
            off += step;
        }
    }
    /// Parses an extended structure (for tests and the host side).
    pub fn decode_ext(b: &[u8]) -> Option<ResvStatus> {
        if b.len() < REPORT_EXT_HDR_LEN {
            return None;
        }
        let n = u16_at(b, 5) as usize;
        let mut regctls = Vec::new();
        for i in 0..n {
            let off = REPORT_EXT_HDR_LEN + i * REGCTL_EXT_LEN;
            let e = b.get(off..off + REGCTL_EXT_LEN)?;
            let mut hostid = [0u8; 16];
            hostid.copy_from_slice(&e[16..32]);
            regctls.push(RegCtl {
                cntlid: u16_at(e, 0),
                holds: e[2] & 1 != 0,
                hostid,
                rkey: u64_at(e, 8),
            });
        }
        Some(ResvStatus {
            gen: u32_at(b, 0),
            rtype: b[4],
            ptpls: b[9] & 1 != 0,
            regctls,
        })
    }
}

/// Reservation Notification log page types (Base §5.16.1.25).
pub const NOTICE_REGISTRATION_PREEMPTED: u8 = 1;
pub const NOTICE_RESERVATION_RELEASED: u8 = 2;
pub const NOTICE_RESERVATION_PREEMPTED: u8 = 3;
/// The log page: one 64-byte entry.
pub const NOTICE_LOG_LEN: usize = 64;

/// Writes one Reservation Notification log page: Log Page Count, type,
/// Number of Available Log Pages (those still queued after this one), NSID.
pub fn encode_notice(b: &mut [u8], count: u64, kind: u8, available: u8, nsid: u32) {
    b[..NOTICE_LOG_LEN].fill(0);
    put_u64(b, 0, count);
    b[8] = kind;
    b[9] = available;
    put_u32(b, 12, nsid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdw10_and_keys() {
        let c = ResvCdw10 {
            action: RACQA_PREEMPT,
            iekey: true,
            rtype: 4,
            cptpl: CPTPL_SET,
        };
        let s = Sqe {
            cdw10: c.to_cdw10(),
            ..Sqe::default()
        };
        assert_eq!(s.cdw10, 0xC000_0409);
        assert_eq!(ResvCdw10::from_sqe(&s), c);
        let mut d = [0u8; 16];
        d[0] = 1;
        d[8] = 2;
        assert_eq!(keys(&d), (1, 2));
        assert_eq!(keys(&d[..8]), (1, 0));
        assert_eq!(ResvType::from_u8(0), None);
        assert_eq!(ResvType::from_u8(7), None);
        assert!(ResvType::from_u8(6).unwrap().all_registrants());
    }

    /// Offsets of Base 2.0 Figure "Reservation Status Data Structure" and
    /// "Registered Controller Extended Data Structure" (Linux
    /// `struct nvme_reservation_status_ext` / `nvme_registered_ctrl_ext`).
    #[test]
    fn report_layout() {
        let s = ResvStatus {
            gen: 5,
            rtype: 2,
            ptpls: true,
            regctls: vec![RegCtl {
                cntlid: 7,
                holds: true,
                hostid: [9; 16],
                rkey: 0xABCD,
            }],
        };
        let mut b = vec![0u8; s.len(true)];
        assert_eq!(b.len(), 128);
        s.encode(&mut b, true);
        assert_eq!(u32_at(&b, 0), 5);
        assert_eq!(b[4], 2);
        assert_eq!(u16_at(&b, 5), 1);
        assert_eq!(b[9], 1);
        assert_eq!(u16_at(&b, 64), 7);
        assert_eq!(b[66], 1);
        assert_eq!(u64_at(&b, 72), 0xABCD);
        assert_eq!(&b[80..96], &[9; 16]);
        assert_eq!(ResvStatus::decode_ext(&b), Some(s.clone()));
        let mut b = vec![0u8; s.len(false)];
        assert_eq!(b.len(), 48);
        s.encode(&mut b, false);
        assert_eq!(u64_at(&b, 24 + 16), 0xABCD);
        let mut n = [0u8; 64];
        encode_notice(&mut n, 3, NOTICE_RESERVATION_PREEMPTED, 1, 9);
        assert_eq!((u64_at(&n, 0), n[8], n[9], u32_at(&n, 12)), (3, 3, 1, 9));
    }
}
