//! Submission queue entries for the commands the host sends (Base §5
//! admin, NVM Command Set §3 I/O, Fabrics §6).

use farflash_wire::fabrics::{ConnectCmd, PropertyCmd};
use farflash_wire::log::GetLogPage;
use farflash_wire::opcode::{admin, fctype, io};
use farflash_wire::Sqe;

/// Identify (Base §5.17): CNS in CDW10 7:0, CNTID 31:16.
pub fn identify(cns: u8, nsid: u32) -> Sqe {
    Sqe {
        opcode: admin::IDENTIFY,
        nsid,
        cdw10: cns as u32,
        ..Sqe::default()
    }
}

/// Get Log Page (Base §5.16) of `len` bytes at byte `offset`.
pub fn get_log_page(lid: u8, nsid: u32, len: u32, offset: u64) -> Sqe {
    let mut s = Sqe {
        opcode: admin::GET_LOG_PAGE,
        nsid,
        ..Sqe::default()
    };
    GetLogPage {
        lid,
        lsp: 0,
        rae: false,
        len: len as u64,
        offset,
    }
    .fill_sqe(&mut s);
    s
}

/// Set Features (Base §5.27): FID in CDW10 7:0, value in CDW11.
pub fn set_features(fid: u8, cdw11: u32) -> Sqe {
    Sqe {
        opcode: admin::SET_FEATURES,
        cdw10: fid as u32,
        cdw11,
        ..Sqe::default()
    }
}

/// Get Features (Base §5.15), current value (SEL 0).
pub fn get_features(fid: u8) -> Sqe {
    Sqe {
        opcode: admin::GET_FEATURES,
        cdw10: fid as u32,
        ..Sqe::default()
    }
}

/// Keep Alive (Base §5.19).
pub fn keep_alive() -> Sqe {
    Sqe {
        opcode: admin::KEEP_ALIVE,
        ..Sqe::default()
    }
}

/// Property Get (Fabrics §6.4); `size8` for 8-byte properties (CAP).
pub fn property_get(offset: u32, size8: bool) -> Sqe {
    PropertyCmd {
        size8,
        offset,
        value: 0,
    }
    .to_sqe(0, fctype::PROPERTY_GET)
}

/// Property Set (Fabrics §6.5) of a 4-byte property.
pub fn property_set(offset: u32, value: u32) -> Sqe {
    PropertyCmd {
        size8: false,
        offset,
        value: value as u64,
    }
    .to_sqe(0, fctype::PROPERTY_SET)
}

/// Connect (Fabrics §6.3); SQSIZE is 0's based and at least 1 (a queue
/// has two entries or more: SQSIZE 0 is an Invalid Parameter).
pub fn connect(qid: u16, depth: u16, kato_ms: u32) -> Sqe {
    connect_cattr(qid, depth, kato_ms, 0)
}

/// Connect with connection attributes (CATTR, e.g. disable SQ flow control).
pub fn connect_cattr(qid: u16, depth: u16, kato_ms: u32, cattr: u8) -> Sqe {
    ConnectCmd {
        recfmt: 0,
        qid,
        sqsize: depth.saturating_sub(1).max(1),
        cattr,
        kato: kato_ms,
    }
    .to_sqe(0)
}

/// Read / Write (NVM §3.2.4, §3.2.6): SLBA in CDW10-11, NLB 0's based in CDW12.
pub fn rw(write: bool, nsid: u32, slba: u64, nlb: u32) -> Sqe {
    Sqe {
        opcode: if write { io::WRITE } else { io::READ },
        nsid,
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: nlb.saturating_sub(1) & 0xFFFF,
        ..Sqe::default()
    }
}

/// Compare (NVM §3.2.1) of `nlb` blocks at `slba` with the command's data.
pub fn compare(nsid: u32, slba: u64, nlb: u32) -> Sqe {
    Sqe {
        opcode: io::COMPARE,
        ..rw(false, nsid, slba, nlb)
    }
}

/// CDW0 FUSE (Base §3.4.2): the first half (a Compare) and the second half
/// (a Write) of a fused Compare and Write, next to each other in one SQ.
pub const FUSE_FIRST: u8 = 0x01;
pub const FUSE_SECOND: u8 = 0x02;

/// The two halves of a Compare and Write of `nlb` blocks at `slba`.
pub fn compare_and_write(nsid: u32, slba: u64, nlb: u32) -> (Sqe, Sqe) {
    let mut c = compare(nsid, slba, nlb);
    c.flags |= FUSE_FIRST;
    let mut w = rw(true, nsid, slba, nlb);
    w.flags |= FUSE_SECOND;
    (c, w)
}

/// Copy (NVM Command Set §3.2.2) of `nr` source ranges (format 0, the
/// command's data) to consecutive LBAs from `sdlba`.
pub fn copy(nsid: u32, sdlba: u64, nr: u32) -> Sqe {
    Sqe {
        opcode: io::COPY,
        nsid,
        cdw10: sdlba as u32,
        cdw11: (sdlba >> 32) as u32,
        // NR 0's based (7:0); descriptor format 0 (11:8).
        cdw12: nr.saturating_sub(1) & 0xFF,
        ..Sqe::default()
    }
}

/// Bytes of one Copy source range, format 0.
pub const COPY_RANGE_LEN: usize = 32;

/// Writes Copy source range `i` (format 0: SLBA at 8, NLB 0's based at 16).
pub fn put_copy_range(b: &mut [u8], i: usize, slba: u64, nlb: u32) {
    let r = &mut b[i * COPY_RANGE_LEN..(i + 1) * COPY_RANGE_LEN];
    r.fill(0);
    r[8..16].copy_from_slice(&slba.to_le_bytes());
    r[16..18].copy_from_slice(&(nlb.saturating_sub(1) as u16).to_le_bytes());
}

/// Flush (NVM §3.2.2).
pub fn flush(nsid: u32) -> Sqe {
    Sqe {
        opcode: io::FLUSH,
        nsid,
        ..Sqe::default()
    }
}

/// Write Zeroes (NVM §3.2.8) of `nlb` blocks (1..=65536).
pub fn write_zeroes(nsid: u32, slba: u64, nlb: u32) -> Sqe {
    Sqe {
        opcode: io::WRITE_ZEROES,
        ..rw(false, nsid, slba, nlb)
    }
}

/// Dataset Management (NVM §3.2.3) with attribute Deallocate (AD, CDW11 bit 2)
/// over `nr` ranges (NR 0's based in CDW10 7:0); the ranges are the data.
pub fn dsm_deallocate(nsid: u32, nr: u32) -> Sqe {
    Sqe {
        opcode: io::DATASET_MANAGEMENT,
        nsid,
        cdw10: nr.saturating_sub(1) & 0xFF,
        cdw11: 1 << 2,
        ..Sqe::default()
    }
}

/// Bytes of one DSM range (Context Attributes, NLB, SLBA).
pub const DSM_RANGE_LEN: usize = 16;

/// Writes DSM range `i` into `b`.
pub fn put_dsm_range(b: &mut [u8], i: usize, slba: u64, nlb: u32) {
    let r = &mut b[i * DSM_RANGE_LEN..(i + 1) * DSM_RANGE_LEN];
    r[0..4].fill(0);
    r[4..8].copy_from_slice(&nlb.to_le_bytes());
    r[8..16].copy_from_slice(&slba.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let s = rw(true, 1, 0x1_0000_0002, 8);
        assert_eq!((s.opcode, s.cdw10, s.cdw11, s.cdw12), (1, 2, 1, 7));
        assert_eq!(connect(1, 1, 0).cdw11 & 0xFFFF, 1);
        let s = connect(3, 128, 0);
        assert_eq!(s.cdw10 >> 16, 3);
        assert_eq!(s.cdw11 & 0xFFFF, 127);
        let s = get_log_page(0x70, 0, 1024, 0);
        assert_eq!(s.cdw10, 0x70 | 255 << 16);
        let mut b = [0u8; 32];
        put_dsm_range(&mut b, 1, 9, 4);
        assert_eq!(&b[20..24], &4u32.to_le_bytes());
        assert_eq!(dsm_deallocate(1, 2).cdw10, 1);
    }
}
