//! The Keyed SGL Data Block descriptor NVMe/RDMA names host memory with
//! (Base §4.3.2 "SGL"; RDMA Transport Spec 1.0 §3.3 "Data Transfer"):
//! address, 24-bit length, 32-bit remote key. Host and target both use it.

use crate::sqe::{sgl, SGL_DESC_SIZE};

/// Keyed SGL Data Block subtypes (Base §4.3.2 "SGL Descriptor Sub Type").
pub const KEYED_ADDRESS: u8 = sgl::KEYED_DATA_BLOCK << 4;
/// Address, and invalidate the key when the command completes: the
/// response is then sent with SEND_WITH_INVALIDATE (RDMA §3.3.2).
pub const KEYED_INVALIDATE: u8 = sgl::KEYED_DATA_BLOCK << 4 | 0xF;
/// In-capsule data: Data Block, subtype Offset.
pub const IN_CAPSULE: u8 = sgl::IN_CAPSULE;
/// The largest keyed length (24 bits).
pub const KEYED_MAX_LEN: u32 = (1 << 24) - 1;

/// A Keyed SGL Data Block descriptor, decoded from DPTR's 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyedSgl {
    pub addr: u64,
    /// Bytes 10:08 (24 bits).
    pub length: u32,
    /// Bytes 14:11: the host memory region's remote key.
    pub key: u32,
    pub invalidate: bool,
}

impl KeyedSgl {
    pub fn decode(d: &[u8; SGL_DESC_SIZE]) -> KeyedSgl {
        KeyedSgl {
            addr: u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]),
            length: u32::from_le_bytes([d[8], d[9], d[10], 0]),
            key: u32::from_le_bytes([d[11], d[12], d[13], d[14]]),
            invalidate: d[15] == KEYED_INVALIDATE,
        }
    }

    pub fn encode(&self) -> [u8; SGL_DESC_SIZE] {
        let mut d = [0u8; SGL_DESC_SIZE];
        d[0..8].copy_from_slice(&self.addr.to_le_bytes());
        d[8..11].copy_from_slice(&self.length.to_le_bytes()[..3]);
        d[11..15].copy_from_slice(&self.key.to_le_bytes());
        d[15] = if self.invalidate {
            KEYED_INVALIDATE
        } else {
            KEYED_ADDRESS
        };
        d
    }
}
