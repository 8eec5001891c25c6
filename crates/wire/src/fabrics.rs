//! Fabrics commands (Fabrics §6): Connect and its 1024-byte data, Property
//! Get/Set, Disconnect. Their fields overlay the SQE's dwords.

use crate::le::{put_str, put_u16, str_at, u16_at};
use crate::opcode::{admin, fctype};
use crate::sqe::{SglDescriptor, Sqe, PSDT_SGL};

/// Connect data length (Fabrics §6.3 Figure "Connect Command – Data").
pub const CONNECT_DATA_LEN: usize = 1024;
/// CNTLID a host puts in an admin Connect to ask for any controller
/// (dynamic controller model, Fabrics §6.3).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// Connect CATTR bit 2: disable SQ flow control (Fabrics §6.3).
pub const CATTR_DISABLE_SQ_FLOW_CONTROL: u8 = 0x04;

/// The Connect command's fields (Fabrics §6.3 Figure "Connect Command – SQE").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ConnectCmd {
    /// Record format (CDW10 15:0); must be 0.
    pub recfmt: u16,
    /// Queue ID (CDW10 31:16): 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0's based (CDW11 15:0).
    pub sqsize: u16,
    /// Connect attributes (CDW11 23:16).
    pub cattr: u8,
    /// Keep Alive Timeout in milliseconds (CDW12), admin queue only.
    pub kato: u32,
}

impl ConnectCmd {
    pub fn from_sqe(s: &Sqe) -> ConnectCmd {
        ConnectCmd {
            recfmt: s.cdw10 as u16,
            qid: (s.cdw10 >> 16) as u16,
            sqsize: s.cdw11 as u16,
            cattr: (s.cdw11 >> 16) as u8,
            kato: s.cdw12,
        }
    }
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        Sqe {
            opcode: admin::FABRICS,
            flags: PSDT_SGL,
            cid,
            nsid: fctype::CONNECT as u32,
            dptr: SglDescriptor::in_capsule(CONNECT_DATA_LEN as u32),
            cdw10: self.recfmt as u32 | (self.qid as u32) << 16,
            cdw11: self.sqsize as u32 | (self.cattr as u32) << 16,
            cdw12: self.kato,
            ..Sqe::default()
        }
    }
}

/// Byte offsets in the Connect SQE, for Invalid Parameter reports (IPO).
pub mod connect_sqe_off {
    pub const QID: u16 = 42;
    pub const SQSIZE: u16 = 44;
    pub const CATTR: u16 = 46;
    pub const KATO: u16 = 48;
}
/// Byte offsets in the Connect data.
pub mod connect_data_off {
    pub const HOSTID: u16 = 0;
    pub const CNTLID: u16 = 16;
    pub const SUBNQN: u16 = 256;
    pub const HOSTNQN: u16 = 512;
}

/// The Connect command data (Fabrics §6.3).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ConnectData {
    pub hostid: [u8; 16],
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
}

impl ConnectData {
    /// Decodes the 1024 bytes; `None` when an NQN is not UTF-8 or not
    /// NUL-terminated within its 256 bytes.
    pub fn decode(b: &[u8]) -> Option<ConnectData> {
        ConnectData::decode_or_field(b).ok()
    }

    /// [`ConnectData::decode`], or the offset of the field at fault
    /// (SUBNQN for data too short to hold it).
    pub fn decode_or_field(b: &[u8]) -> Result<ConnectData, u16> {
        use connect_data_off::{HOSTNQN, SUBNQN};
        if b.len() < CONNECT_DATA_LEN {
            return Err(SUBNQN);
        }
        let nqn = |off: u16| -> Result<String, u16> {
            let at = off as usize;
            let f = &b[at..at + 256];
            f.iter().position(|&c| c == 0).ok_or(off)?;
            str_at(b, at, 256).map(str::to_owned).ok_or(off)
        };
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[0..16]);
        Ok(ConnectData {
            hostid,
            cntlid: u16_at(b, 16),
            subnqn: nqn(SUBNQN)?,
            hostnqn: nqn(HOSTNQN)?,
        })
    }
    pub fn encode(&self, b: &mut [u8]) {
        b[..CONNECT_DATA_LEN].fill(0);
        b[0..16].copy_from_slice(&self.hostid);
        put_u16(b, 16, self.cntlid);
        put_str(b, 256, 255, &self.subnqn, 0);
        put_str(b, 512, 255, &self.hostnqn, 0);
    }
}

/// Connect response DW0 on success: the CNTLID (Fabrics §6.3 Figure "Connect Response").
/// On Connect Invalid Parameters: IPO (15:0) is the byte offset of the bad
/// field and IATTR (bit 16) is 1 when it lies in the data, 0 in the SQE.
pub fn connect_invalid_param_dw0(in_data: bool, offset: u16) -> u32 {
    offset as u32 | (in_data as u32) << 16
}

/// Property Get/Set (Fabrics §6.4, §6.5): ATTRIB bit 0 gives the size
/// (0 = 4 bytes, 1 = 8 bytes), OFST the property offset, VALUE (Set only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PropertyCmd {
    pub size8: bool,
    pub offset: u32,
    pub value: u64,
}

impl PropertyCmd {
    pub fn from_sqe(s: &Sqe) -> PropertyCmd {
        PropertyCmd {
            size8: s.cdw10 & 1 != 0,
            offset: s.cdw11,
            value: (s.cdw13 as u64) << 32 | s.cdw12 as u64,
        }
    }
    pub fn to_sqe(&self, cid: u16, fct: u8) -> Sqe {
        Sqe {
            opcode: admin::FABRICS,
            flags: PSDT_SGL,
            cid,
            nsid: fct as u32,
            cdw10: self.size8 as u32,
            cdw11: self.offset,
            cdw12: self.value as u32,
            cdw13: (self.value >> 32) as u32,
            ..Sqe::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqe::SQE_SIZE;

    #[test]
    fn connect_sqe_offsets() {
        let c = ConnectCmd {
            recfmt: 0,
            qid: 3,
            sqsize: 127,
            cattr: 4,
            kato: 15000,
        };
        let s = c.to_sqe(1);
        let mut b = [0u8; SQE_SIZE];
        s.encode(&mut b);
        assert_eq!(b[0], 0x7F);
        assert_eq!(b[4], fctype::CONNECT);
        assert_eq!(u16_at(&b, connect_sqe_off::QID as usize), 3);
        assert_eq!(u16_at(&b, connect_sqe_off::SQSIZE as usize), 127);
        assert_eq!(b[connect_sqe_off::CATTR as usize], 4);
        assert_eq!(crate::le::u32_at(&b, connect_sqe_off::KATO as usize), 15000);
        assert_eq!(ConnectCmd::from_sqe(&Sqe::decode(&b)), c);
    }

    #[test]
    fn connect_data_round_trip() {
        let d = ConnectData {
            hostid: [7; 16],
            cntlid: 0xFFFF,
            subnqn: "nqn.a".into(),
            hostnqn: "nqn.b".into(),
        };
        let mut b = [0u8; CONNECT_DATA_LEN];
        d.encode(&mut b);
        assert_eq!(u16_at(&b, 16), 0xFFFF);
        assert_eq!(&b[256..261], b"nqn.a");
        assert_eq!(&b[512..517], b"nqn.b");
        assert_eq!(ConnectData::decode(&b), Some(d.clone()));
        // An NQN filling all 256 bytes has no terminator.
        b[256..512].fill(b'x');
        assert_eq!(ConnectData::decode(&b), None);
        assert_eq!(ConnectData::decode_or_field(&b), Err(256));
        assert_eq!(ConnectData::decode(&b[..100]), None);
        // The field at fault is named: a bad HOSTNQN is not the SUBNQN's fault.
        d.encode(&mut b);
        b[512..768].fill(b'y');
        assert_eq!(ConnectData::decode_or_field(&b), Err(512));
        d.encode(&mut b);
        b[512] = 0xFF; // not UTF-8
        assert_eq!(ConnectData::decode_or_field(&b), Err(512));
    }

    #[test]
    fn property_round_trip() {
        let p = PropertyCmd {
            size8: true,
            offset: 0,
            value: 0x1_0000_0002,
        };
        let s = p.to_sqe(4, fctype::PROPERTY_SET);
        assert_eq!(PropertyCmd::from_sqe(&s), p);
        assert_eq!(s.fctype(), fctype::PROPERTY_SET);
    }
}
