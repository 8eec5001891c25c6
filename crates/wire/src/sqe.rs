//! The 64-byte Submission Queue Entry (Base §4.2 "Submission Queue Entry")
//! and the 16-byte SGL descriptor in its DPTR (Base §4.3.2).

use crate::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};

pub const SQE_SIZE: usize = 64;
pub const SGL_DESC_SIZE: usize = 16;

/// SGL descriptor types (Base §4.3.2 Figure "SGL Descriptor Type"), the
/// high nibble of byte 15; the low nibble is the subtype.
pub mod sgl {
    pub const DATA_BLOCK: u8 = 0x0;
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
    pub const SUBTYPE_ADDRESS: u8 = 0x0;
    pub const SUBTYPE_OFFSET: u8 = 0x1;
    pub const SUBTYPE_TRANSPORT: u8 = 0xA;
    /// In-capsule data: Data Block, subtype Offset (TCP §3.4: "01h").
    pub const IN_CAPSULE: u8 = DATA_BLOCK << 4 | SUBTYPE_OFFSET;
    /// Data moved by R2T/H2CData or C2HData: Transport Data Block (5Ah).
    pub const TRANSPORT: u8 = TRANSPORT_DATA_BLOCK << 4 | SUBTYPE_TRANSPORT;
}

/// SGL Data Block descriptor: address (or in-capsule offset), length, type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SglDescriptor {
    pub addr: u64,
    pub length: u32,
    /// Byte 15: descriptor type (7:4) and subtype (3:0).
    pub sgl_type: u8,
}

impl SglDescriptor {
    pub fn in_capsule(length: u32) -> Self {
        SglDescriptor {
            addr: 0,
            length,
            sgl_type: sgl::IN_CAPSULE,
        }
    }
    pub fn transport(length: u32) -> Self {
        SglDescriptor {
            addr: 0,
            length,
            sgl_type: sgl::TRANSPORT,
        }
    }
    pub fn decode(b: &[u8]) -> Self {
        SglDescriptor {
            addr: u64_at(b, 0),
            length: u32_at(b, 8),
            sgl_type: b[15],
        }
    }
    pub fn encode(&self, b: &mut [u8]) {
        put_u64(b, 0, self.addr);
        put_u32(b, 8, self.length);
        b[12..15].fill(0);
        b[15] = self.sgl_type;
    }
}

/// A submission queue entry, decoded into dwords. Fabrics commands overlay
/// their own fields on the same bytes (see [`crate::fabrics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    pub opcode: u8,
    /// CDW0 bits 15:8: FUSE (1:0) and PSDT (7:6; 01b/10b = SGLs).
    pub flags: u8,
    pub cid: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub mptr: u64,
    pub dptr: SglDescriptor,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
}

/// CDW0 PSDT: SGLs for data transfer (Base §4.2). Fabrics requires SGLs.
pub const PSDT_SGL: u8 = 0x40;

impl Sqe {
    pub fn decode(b: &[u8; SQE_SIZE]) -> Self {
        Sqe {
            opcode: b[0],
            flags: b[1],
            cid: u16_at(b, 2),
            nsid: u32_at(b, 4),
            cdw2: u32_at(b, 8),
            cdw3: u32_at(b, 12),
            mptr: u64_at(b, 16),
            dptr: SglDescriptor::decode(&b[24..40]),
            cdw10: u32_at(b, 40),
            cdw11: u32_at(b, 44),
            cdw12: u32_at(b, 48),
            cdw13: u32_at(b, 52),
            cdw14: u32_at(b, 56),
            cdw15: u32_at(b, 60),
        }
    }

    pub fn encode(&self, b: &mut [u8; SQE_SIZE]) {
        b[0] = self.opcode;
        b[1] = self.flags;
        put_u16(b, 2, self.cid);
        put_u32(b, 4, self.nsid);
        put_u32(b, 8, self.cdw2);
        put_u32(b, 12, self.cdw3);
        put_u64(b, 16, self.mptr);
        self.dptr.encode(&mut b[24..40]);
        put_u32(b, 40, self.cdw10);
        put_u32(b, 44, self.cdw11);
        put_u32(b, 48, self.cdw12);
        put_u32(b, 52, self.cdw13);
        put_u32(b, 56, self.cdw14);
        put_u32(b, 60, self.cdw15);
    }

    /// Fabrics command type (byte 4, FCTYPE) for opcode 7Fh.
    pub fn fctype(&self) -> u8 {
        self.nsid as u8
    }

    /// NVM Read/Write/Write Zeroes: Starting LBA (CDW10-11).
    pub fn slba(&self) -> u64 {
        (self.cdw11 as u64) << 32 | self.cdw10 as u64
    }
    /// NVM Read/Write/Write Zeroes: Number of Logical Blocks, 0's based (CDW12 15:0).
    pub fn nlb(&self) -> u16 {
        self.cdw12 as u16
    }
    /// Force Unit Access (CDW12 bit 30).
    pub fn fua(&self) -> bool {
        self.cdw12 & (1 << 30) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_round_trip() {
        let s = Sqe {
            opcode: 0x02,
            flags: PSDT_SGL,
            cid: 0x1234,
            nsid: 7,
            cdw2: 1,
            cdw3: 2,
            mptr: 3,
            dptr: SglDescriptor::transport(8192),
            cdw10: 0x1111_1111,
            cdw11: 0x2222_2222,
            cdw12: 0x4000_0007,
            cdw13: 0,
            cdw14: 5,
            cdw15: 6,
        };
        let mut b = [0u8; SQE_SIZE];
        s.encode(&mut b);
        assert_eq!(b[0], 0x02);
        assert_eq!(b[1], 0x40);
        assert_eq!(&b[2..4], &[0x34, 0x12]);
        assert_eq!(b[4], 7);
        assert_eq!(u32_at(&b, 32), 8192); // SGL length at DPTR + 8
        assert_eq!(b[39], 0x5A); // SGL type at DPTR + 15
        assert_eq!(u32_at(&b, 48), 0x4000_0007);
        assert_eq!(Sqe::decode(&b), s);
        assert_eq!(s.slba(), 0x2222_2222_1111_1111);
        assert_eq!(s.nlb(), 7);
        assert!(s.fua());
        assert_eq!(sgl::IN_CAPSULE, 0x01);
        assert_eq!(sgl::TRANSPORT, 0x5A);
    }
}
