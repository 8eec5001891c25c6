//! The 16-byte Completion Queue Entry (Base §4.6 "Completion Queue Entry").

use crate::le::{put_u16, put_u32, u16_at, u32_at};
use crate::Status;

pub const CQE_SIZE: usize = 16;

/// A completion queue entry. On fabrics the phase tag is unused (0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific DW0 (e.g. Connect's CNTLID, Get Features' value).
    pub dw0: u32,
    pub dw1: u32,
    /// SQ Head Pointer (SQHD); 0xFFFF when SQ flow control is disabled.
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
}

impl Cqe {
    pub fn decode(b: &[u8; CQE_SIZE]) -> Self {
        Cqe {
            dw0: u32_at(b, 0),
            dw1: u32_at(b, 4),
            sqhd: u16_at(b, 8),
            sqid: u16_at(b, 10),
            cid: u16_at(b, 12),
            status: Status::from_cqe_field(u16_at(b, 14)),
        }
    }
    pub fn encode(&self, b: &mut [u8; CQE_SIZE]) {
        put_u32(b, 0, self.dw0);
        put_u32(b, 4, self.dw1);
        put_u16(b, 8, self.sqhd);
        put_u16(b, 10, self.sqid);
        put_u16(b, 12, self.cid);
        put_u16(b, 14, self.status.to_cqe_field(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_round_trip() {
        let c = Cqe {
            dw0: 0xAABB_CCDD,
            dw1: 1,
            sqhd: 5,
            sqid: 2,
            cid: 0x77,
            status: Status::INVALID_FIELD.dnr(),
        };
        let mut b = [0u8; CQE_SIZE];
        c.encode(&mut b);
        assert_eq!(u32_at(&b, 0), 0xAABB_CCDD);
        assert_eq!(u16_at(&b, 8), 5);
        assert_eq!(u16_at(&b, 10), 2);
        assert_eq!(u16_at(&b, 12), 0x77);
        assert_eq!(u16_at(&b, 14), (0x4002 << 1));
        assert_eq!(Cqe::decode(&b), c);
    }
}
