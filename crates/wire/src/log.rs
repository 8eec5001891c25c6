//! Log pages (Base §5.16.1): Error Information (01h), SMART / Health
//! Information (02h), Firmware Slot Information (03h), Changed Namespace
//! List (04h); the Get Log Page command fields.

use crate::le::{put_u128, put_u16, put_u32, put_u64};
use crate::sqe::Sqe;

pub const ERROR_ENTRY_LEN: usize = 64;
pub const SMART_LEN: usize = 512;
/// The Commands Supported and Effects log page (Base §5.16.1.6): 256 admin
/// entries, then 256 I/O entries, 32 bits each.
pub const CMD_EFFECTS_LEN: usize = 4096;
/// Commands Supported and Effects entry bit 0: the command is supported.
pub const CSUPP: u32 = 1 << 0;
/// Entry bit 1: the command may change logical block content.
pub const LBCC: u32 = 1 << 1;

/// Writes the Commands Supported and Effects log page: `(opcode, effects)`
/// of each supported admin and I/O command.
pub fn encode_cmd_effects(b: &mut [u8], admin: &[(u8, u32)], io: &[(u8, u32)]) {
    for (base, list) in [(0, admin), (1024, io)] {
        for &(op, e) in list {
            put_u32(b, base + op as usize * 4, e);
        }
    }
}
pub const FW_SLOT_LEN: usize = 512;
pub const CHANGED_NS_LEN: usize = 4096;

/// Get Log Page fields (Base §5.16): LID (CDW10 7:0), LSP, RAE (bit 15),
/// NUMD (NUMDL CDW10 31:16, NUMDU CDW11 15:0, 0's based dwords), LPO (CDW12-13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetLogPage {
    pub lid: u8,
    pub lsp: u8,
    pub rae: bool,
    /// Transfer length in bytes.
    pub len: u64,
    /// Log page offset in bytes.
    pub offset: u64,
}

impl GetLogPage {
    pub fn from_sqe(s: &Sqe) -> GetLogPage {
        let numd = ((s.cdw11 & 0xFFFF) << 16 | s.cdw10 >> 16) as u64 + 1;
        GetLogPage {
            lid: s.cdw10 as u8,
            lsp: ((s.cdw10 >> 8) & 0x7F) as u8,
            rae: s.cdw10 & (1 << 15) != 0,
            len: numd * 4,
            offset: (s.cdw13 as u64) << 32 | s.cdw12 as u64,
        }
    }
    /// Sets the fields in `s` (length must be a non-zero multiple of 4).
    pub fn fill_sqe(&self, s: &mut Sqe) {
        let numd = (self.len / 4).saturating_sub(1) as u32;
        s.cdw10 = self.lid as u32
            | (self.lsp as u32 & 0x7F) << 8
            | (self.rae as u32) << 15
            | (numd & 0xFFFF) << 16;
        s.cdw11 = numd >> 16;
        s.cdw12 = self.offset as u32;
        s.cdw13 = (self.offset >> 32) as u32;
    }
}

/// One Error Information Log entry (Base §5.16.1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorEntry {
    pub error_count: u64,
    pub sqid: u16,
    pub cid: u16,
    /// Status field as in CQE DW3 31:17 shifted to bits 15:1 (phase 0).
    pub status: u16,
    /// Parameter Error Location: byte (7:0) and bit (10:8) in the command.
    pub param_loc: u16,
    pub lba: u64,
    pub nsid: u32,
    /// Transport type (3 = TCP).
    pub trtype: u8,
}

impl ErrorEntry {
    pub fn encode(&self, b: &mut [u8]) {
        b[..ERROR_ENTRY_LEN].fill(0);
        put_u64(b, 0, self.error_count);
        put_u16(b, 8, self.sqid);
        put_u16(b, 10, self.cid);
        put_u16(b, 12, self.status);
        put_u16(b, 14, self.param_loc);
        put_u64(b, 16, self.lba);
        put_u32(b, 24, self.nsid);
        b[29] = self.trtype;
        // Log page version 1 (byte 43... ) left 0 as NVMe 1.4 readers accept.
    }
}

/// SMART / Health Information (Base §5.16.1.3), the fields farflash counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Smart {
    /// Composite temperature in kelvins.
    pub temperature: u16,
    pub available_spare: u8,
    pub spare_threshold: u8,
    /// In thousands of 512-byte units, rounded up (Base: "Data Units Read").
    pub data_units_read: u128,
    pub data_units_written: u128,
    pub host_read_commands: u128,
    pub host_write_commands: u128,
    pub power_cycles: u128,
    pub power_on_hours: u128,
    pub unsafe_shutdowns: u128,
    pub media_errors: u128,
    pub error_log_entries: u128,
}

impl Smart {
    pub fn encode(&self, b: &mut [u8]) {
        b[..SMART_LEN].fill(0);
        put_u16(b, 1, self.temperature);
        b[3] = self.available_spare;
        b[4] = self.spare_threshold;
        put_u128(b, 32, self.data_units_read);
        put_u128(b, 48, self.data_units_written);
        put_u128(b, 64, self.host_read_commands);
        put_u128(b, 80, self.host_write_commands);
        put_u128(b, 112, self.power_cycles);
        put_u128(b, 128, self.power_on_hours);
        put_u128(b, 144, self.unsafe_shutdowns);
        put_u128(b, 160, self.media_errors);
        put_u128(b, 176, self.error_log_entries);
    }
    /// Bytes to "data units" (1000 × 512 bytes, rounded up).
    pub fn data_units(bytes: u64) -> u128 {
        (bytes as u128).div_ceil(512_000)
    }
}

/// Firmware Slot Information (Base §5.16.1.4): slot 1 active with `fr`.
pub fn encode_fw_slot(b: &mut [u8], fr: &str) {
    b[..FW_SLOT_LEN].fill(0);
    b[0] = 1; // AFI: slot 1 active
    crate::le::put_str(b, 8, 8, fr, b' ');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::le::{u16_at, u64_at};

    #[test]
    fn get_log_page_round_trip() {
        let g = GetLogPage {
            lid: 0x70,
            lsp: 0,
            rae: true,
            len: 3 * 1024 * 1024,
            offset: 1024,
        };
        let mut s = Sqe::default();
        g.fill_sqe(&mut s);
        assert_eq!(GetLogPage::from_sqe(&s), g);
        assert_eq!(s.cdw10 & 0xFF, 0x70);
    }

    #[test]
    fn smart_offsets() {
        let s = Smart {
            data_units_read: 7,
            host_write_commands: 9,
            temperature: 300,
            ..Smart::default()
        };
        let mut b = vec![0u8; SMART_LEN];
        s.encode(&mut b);
        assert_eq!(u16_at(&b, 1), 300);
        assert_eq!(u64_at(&b, 32), 7);
        assert_eq!(u64_at(&b, 80), 9);
        assert_eq!(Smart::data_units(1), 1);
        assert_eq!(Smart::data_units(512_000), 1);
        assert_eq!(Smart::data_units(512_001), 2);
    }

    #[test]
    fn error_entry_offsets() {
        let e = ErrorEntry {
            error_count: 5,
            sqid: 1,
            cid: 2,
            status: 0x4004,
            param_loc: 0x28,
            lba: 9,
            nsid: 3,
            trtype: 3,
        };
        let mut b = [0u8; ERROR_ENTRY_LEN];
        e.encode(&mut b);
        assert_eq!(u64_at(&b, 0), 5);
        assert_eq!(u16_at(&b, 12), 0x4004);
        assert_eq!(u64_at(&b, 16), 9);
        assert_eq!(b[29], 3);
    }
}
