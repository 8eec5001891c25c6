//! The Discovery Log Page (LID 70h, Fabrics §5.3 / Base §5.16.1.23): a
//! 1024-byte header followed by 1024-byte entries.

use crate::le::{put_str, put_u16, put_u64, str_at, u16_at, u64_at};

pub const DISC_HEADER_LEN: usize = 1024;
pub const DISC_ENTRY_LEN: usize = 1024;

/// Transport types (TRTYPE).
pub const TRTYPE_RDMA: u8 = 1;
pub const TRTYPE_TCP: u8 = 3;
/// RDMA TSAS (Fabrics "Transport Specific Address Subtype" for RDMA): QP
/// type reliable connected, provider type not specified, CM rdma_cm.
pub const RDMA_QPTYPE_CONNECTED: u8 = 1;
pub const RDMA_PRTYPE_NOT_SPECIFIED: u8 = 1;
pub const RDMA_CMS_RDMA_CM: u8 = 1;
/// Address family (ADRFAM).
pub const ADRFAM_IPV4: u8 = 1;
pub const ADRFAM_IPV6: u8 = 2;
/// Subsystem types (SUBTYPE).
pub const SUBTYPE_REFERRAL: u8 = 1;
pub const SUBTYPE_NVM: u8 = 2;
pub const SUBTYPE_CURRENT_DISCOVERY: u8 = 3;
/// TREQ: secure channel not specified (00b), SQ flow control disable supported
/// is bit 2 ("not required": 0 means the controller requires SQ flow control).
pub const TREQ_NOT_SPECIFIED: u8 = 0;
/// TREQ bit 2: the controller lets a host disable SQ flow control (Connect
/// CATTR bit 2); Linux nvmet sets it on every port.
pub const TREQ_DISABLE_SQFLOW: u8 = 1 << 2;
/// TREQ bits 1:0, secure channel (Fabrics "TREQ"; Linux include/linux/nvme.h
/// NVMF_TREQ_REQUIRED / NVMF_TREQ_NOT_REQUIRED, read by libnvme's
/// `nvmf_treq_str` and nvme-cli's `connect-all`): the host must set up a
/// secure channel (01b), or may (10b); 00b is "not specified".
pub const TREQ_SECURE_CHANNEL_REQUIRED: u8 = 1;
pub const TREQ_SECURE_CHANNEL_NOT_REQUIRED: u8 = 2;
/// TCP TSAS byte 0, SECTYPE (NVMe TCP Transport Specification 1.0 §3.6.1.1, as
/// Linux NVMF_TCP_SECTYPE_*): 0 none, 1 TLS 1.2 (not used by NVMe/TCP
/// 1.0, which requires TLS 1.3), 2 TLS 1.3.
pub const TCP_SECTYPE_NONE: u8 = 0;
pub const TCP_SECTYPE_TLS13: u8 = 2;

/// One Discovery Log Page Entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    pub cntlid: u16,
    pub asqsz: u16,
    pub eflags: u16,
    pub trsvcid: String,
    pub subnqn: String,
    pub traddr: String,
    /// TSAS byte 0: SECTYPE for TCP (0 = none), RDMA_QPTYPE for RDMA.
    pub sectype: u8,
    /// RDMA TSAS bytes 1 and 2: RDMA_PRTYPE and RDMA_CMS (0 for TCP).
    pub rdma_prtype: u8,
    pub rdma_cms: u8,
}

impl DiscEntry {
    pub fn encode(&self, b: &mut [u8]) {
        b[..DISC_ENTRY_LEN].fill(0);
        b[0] = self.trtype;
        b[1] = self.adrfam;
        b[2] = self.subtype;
        b[3] = self.treq;
        put_u16(b, 4, self.portid);
        put_u16(b, 6, self.cntlid);
        put_u16(b, 8, self.asqsz);
        put_u16(b, 10, self.eflags);
        put_str(b, 32, 32, &self.trsvcid, b' ');
        put_str(b, 256, 256, &self.subnqn, 0);
        put_str(b, 512, 256, &self.traddr, b' ');
        b[768] = self.sectype;
        b[769] = self.rdma_prtype;
        b[770] = self.rdma_cms;
    }
    pub fn decode(b: &[u8]) -> DiscEntry {
        let s = |off, len| str_at(b, off, len).unwrap_or("").trim().to_owned();
        DiscEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: u16_at(b, 4),
            cntlid: u16_at(b, 6),
            asqsz: u16_at(b, 8),
            eflags: u16_at(b, 10),
            trsvcid: s(32, 32),
            subnqn: s(256, 256),
            traddr: s(512, 256),
            sectype: b[768],
            rdma_prtype: b[769],
            rdma_cms: b[770],
        }
    }
}

/// Builds the whole log page (header + entries).
pub fn encode_log(genctr: u64, entries: &[DiscEntry]) -> Vec<u8> {
    let mut v = vec![0u8; DISC_HEADER_LEN + entries.len() * DISC_ENTRY_LEN];
    put_u64(&mut v, 0, genctr);
    put_u64(&mut v, 8, entries.len() as u64);
    put_u16(&mut v, 16, 0); // RECFMT
    for (i, e) in entries.iter().enumerate() {
        let off = DISC_HEADER_LEN + i * DISC_ENTRY_LEN;
        e.encode(&mut v[off..off + DISC_ENTRY_LEN]);
    }
    v
}

/// Reads GENCTR and NUMREC from a header.
pub fn decode_header(b: &[u8]) -> (u64, u64) {
    (u64_at(b, 0), u64_at(b, 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_offsets() {
        let e = DiscEntry {
            trtype: TRTYPE_TCP,
            adrfam: ADRFAM_IPV4,
            subtype: SUBTYPE_NVM,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            trsvcid: "4420".into(),
            subnqn: "nqn.a:b".into(),
            traddr: "127.0.0.1".into(),
            ..DiscEntry::default()
        };
        let log = encode_log(3, &[e.clone(), e.clone()]);
        assert_eq!(log.len(), 3 * 1024);
        assert_eq!(decode_header(&log), (3, 2));
        let b = &log[1024..2048];
        assert_eq!(b[0], 3);
        assert_eq!(&b[32..36], b"4420");
        assert_eq!(b[36], b' ');
        assert_eq!(&b[512..521], b"127.0.0.1");
        assert_eq!(DiscEntry::decode(b), e);
    }
}
