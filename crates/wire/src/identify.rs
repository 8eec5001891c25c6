//! Identify data structures (Base §5.17.2): Controller (CNS 01h), Namespace
//! (CNS 00h, NVM Command Set §4.1.5.1), Namespace Identification Descriptor
//! list (CNS 03h) and the active NSID list (CNS 02h). Field offsets are the
//! spec's byte offsets; `IdCtrl`/`IdNs` fill a 4096-byte page.

use crate::le::{put_str, put_u16, put_u32, put_u64, str_at, u16_at, u32_at, u64_at};

pub const IDENTIFY_LEN: usize = 4096;

/// Identify Controller byte offsets (Base Figure "Identify – Identify Controller Data Structure").
pub mod ctrl_off {
    pub const VID: usize = 0;
    pub const SSVID: usize = 2;
    pub const SN: usize = 4;
    pub const MN: usize = 24;
    pub const FR: usize = 64;
    pub const RAB: usize = 72;
    pub const IEEE: usize = 73;
    pub const CMIC: usize = 76;
    pub const MDTS: usize = 77;
    pub const CNTLID: usize = 78;
    pub const VER: usize = 80;
    pub const OAES: usize = 92;
    pub const CTRATT: usize = 96;
    pub const CNTRLTYPE: usize = 111;
    pub const OACS: usize = 256;
    pub const ACL: usize = 258;
    pub const AERL: usize = 259;
    pub const FRMW: usize = 260;
    pub const LPA: usize = 261;
    pub const ELPE: usize = 262;
    pub const KAS: usize = 320;
    pub const ANATT: usize = 342;
    pub const ANACAP: usize = 343;
    pub const ANAGRPMAX: usize = 344;
    pub const NANAGRPID: usize = 348;
    pub const SQES: usize = 512;
    pub const CQES: usize = 513;
    pub const MAXCMD: usize = 514;
    pub const NN: usize = 516;
    pub const ONCS: usize = 520;
    pub const FUSES: usize = 522;
    pub const VWC: usize = 525;
    pub const AWUPF: usize = 528;
    pub const ACWU: usize = 532;
    pub const OCFS: usize = 534;
    pub const SGLS: usize = 536;
    pub const MNAN: usize = 540;
    pub const SUBNQN: usize = 768;
    pub const IOCCSZ: usize = 1792;
    pub const IORCSZ: usize = 1796;
    pub const ICDOFF: usize = 1800;
    pub const FCATT: usize = 1802;
    pub const MSDBD: usize = 1803;
    pub const OFCS: usize = 1804;
}

/// Controller types (CNTRLTYPE).
pub const CNTRLTYPE_IO: u8 = 1;
pub const CNTRLTYPE_DISCOVERY: u8 = 2;

/// ONCS bits (Base §5.17.2.1): Write Zeroes and Dataset Management.
pub const ONCS_DSM: u16 = 1 << 2;
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
/// OAES bit 8: Namespace Attribute Notices; bit 31: Discovery Log Change.
pub const OAES_NS_ATTR: u32 = 1 << 8;
pub const OAES_DISCOVERY_CHANGE: u32 = 1 << 31;
/// CTRATT bit 0: 128-bit Host Identifier.
pub const CTRATT_HID128: u32 = 1;
/// CMIC bit 1: may have two or more controllers in the subsystem.
pub const CMIC_MULTI_CTRL: u8 = 1 << 1;
/// CMIC bit 3: ANA reporting supported (Base §8.20; Linux `NVME_CTRL_CMIC_ANA`).
pub const CMIC_ANA: u8 = 1 << 3;
/// OAES bit 11: ANA Change Notices (Linux `NVME_AEN_CFG_ANA_CHANGE`).
pub const OAES_ANA_CHANGE: u32 = 1 << 11;
/// ANACAP (Base §5.17.2.1): bits 0-4 report the optimized, non-optimized,
/// inaccessible, persistent loss and change states; bit 6: a namespace's
/// ANAGRPID does not change while it is attached.
pub const ANACAP_ALL_STATES: u8 = 0x1F;
pub const ANACAP_GRPID_STATIC: u8 = 1 << 6;
/// ONCS bit 5: Reservations supported.
pub const ONCS_RESERVATIONS: u16 = 1 << 5;
/// ONCS bit 0: Compare; bit 7: Verify; bit 8: Copy (Base §5.17.2.1).
pub const ONCS_COMPARE: u16 = 1;
pub const ONCS_VERIFY: u16 = 1 << 7;
pub const ONCS_COPY: u16 = 1 << 8;
/// FUSES bit 0: the Compare and Write fused operation (Base §5.17.2.1).
pub const FUSES_COMPARE_AND_WRITE: u16 = 1;
/// OCFS bit 0: Copy source range descriptor format 0 (NVM Command Set §3.2.2).
pub const OCFS_FORMAT0: u16 = 1;
/// LPA bit 0: SMART / Health Information per namespace.
pub const LPA_SMART_PER_NS: u8 = 1;
/// SGLS bits: 1:0 = 01b SGLs supported (byte-aligned), bit 20 = Offset
/// subtype for in-capsule data.
pub const SGLS_SUPPORTED: u32 = 1;
/// SGLS bit 2: Keyed SGL Data Block descriptor supported (mandatory for
/// NVMe/RDMA; Linux's nvme-rdma refuses a controller without it).
pub const SGLS_KEYED: u32 = 1 << 2;
pub const SGLS_OFFSET: u32 = 1 << 20;
/// SGLS bit 18: an SGL longer than the data it describes is supported.
pub const SGLS_LONGER: u32 = 1 << 18;
/// LPA bit 1: the Commands Supported and Effects log page (05h).
pub const LPA_CMD_EFFECTS: u8 = 1 << 1;
/// LPA bit 2: extended data for Get Log Page (NUMDU, LPO).
pub const LPA_EXTENDED: u8 = 1 << 2;

/// What a controller reports in Identify Controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdCtrl {
    pub vid: u16,
    pub ssvid: u16,
    pub sn: String,
    pub mn: String,
    pub fr: String,
    pub rab: u8,
    pub cmic: u8,
    /// Maximum Data Transfer Size as a power of two of the 4 KiB page (0 = no limit).
    pub mdts: u8,
    pub cntlid: u16,
    pub ver: u32,
    pub oaes: u32,
    pub ctratt: u32,
    pub cntrltype: u8,
    pub oacs: u16,
    pub acl: u8,
    pub aerl: u8,
    pub frmw: u8,
    pub lpa: u8,
    pub elpe: u8,
    /// Keep Alive Support granularity in 100 ms units (0 = no keep-alive).
    pub kas: u16,
    /// ANA Transition Time in seconds, capabilities, largest group ID and
    /// number of group IDs (Base §5.17.2.1).
    pub anatt: u8,
    pub anacap: u8,
    pub anagrpmax: u32,
    pub nanagrpid: u32,
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    pub nn: u32,
    pub oncs: u16,
    /// Fused Operation Support (FUSES_*).
    pub fuses: u16,
    pub vwc: u8,
    /// Atomic Compare & Write Unit, logical blocks, 0's based.
    pub acwu: u16,
    /// Optional Copy Formats Supported (OCFS_*).
    pub ocfs: u16,
    pub sgls: u32,
    /// Maximum Number of Allowed Namespaces (Linux refuses 0 or more than
    /// NN when the controller reports ANA).
    pub mnan: u32,
    pub subnqn: String,
    /// I/O Queue Command Capsule Supported Size, in 16-byte units.
    pub ioccsz: u32,
    /// I/O Queue Response Capsule Supported Size, in 16-byte units.
    pub iorcsz: u32,
    pub icdoff: u16,
    pub fcatt: u8,
    pub msdbd: u8,
}

impl IdCtrl {
    pub fn encode(&self, b: &mut [u8]) {
        use ctrl_off::*;
        b[..IDENTIFY_LEN].fill(0);
        put_u16(b, VID, self.vid);
        put_u16(b, SSVID, self.ssvid);
        put_str(b, SN, 20, &self.sn, b' ');
        put_str(b, MN, 40, &self.mn, b' ');
        put_str(b, FR, 8, &self.fr, b' ');
        b[RAB] = self.rab;
        b[CMIC] = self.cmic;
        b[MDTS] = self.mdts;
        put_u16(b, CNTLID, self.cntlid);
        put_u32(b, VER, self.ver);
        put_u32(b, OAES, self.oaes);
        put_u32(b, CTRATT, self.ctratt);
        b[CNTRLTYPE] = self.cntrltype;
        put_u16(b, OACS, self.oacs);
        b[ACL] = self.acl;
        b[AERL] = self.aerl;
        b[FRMW] = self.frmw;
        b[LPA] = self.lpa;
        b[ELPE] = self.elpe;
        put_u16(b, KAS, self.kas);
        b[ANATT] = self.anatt;
        b[ANACAP] = self.anacap;
        put_u32(b, ANAGRPMAX, self.anagrpmax);
        put_u32(b, NANAGRPID, self.nanagrpid);
        b[SQES] = self.sqes;
        b[CQES] = self.cqes;
        put_u16(b, MAXCMD, self.maxcmd);
        put_u32(b, NN, self.nn);
        put_u16(b, ONCS, self.oncs);
        put_u16(b, FUSES, self.fuses);
        b[VWC] = self.vwc;
        put_u16(b, ACWU, self.acwu);
        put_u16(b, OCFS, self.ocfs);
        put_u32(b, SGLS, self.sgls);
        put_u32(b, MNAN, self.mnan);
        put_str(b, SUBNQN, 256, &self.subnqn, 0);
        put_u32(b, IOCCSZ, self.ioccsz);
        put_u32(b, IORCSZ, self.iorcsz);
        put_u16(b, ICDOFF, self.icdoff);
        b[FCATT] = self.fcatt;
        b[MSDBD] = self.msdbd;
    }

    pub fn decode(b: &[u8]) -> IdCtrl {
        use ctrl_off::*;
        let s = |off, len| str_at(b, off, len).unwrap_or("").to_owned();
        IdCtrl {
            vid: u16_at(b, VID),
            ssvid: u16_at(b, SSVID),
            sn: s(SN, 20),
            mn: s(MN, 40),
            fr: s(FR, 8),
            rab: b[RAB],
            cmic: b[CMIC],
            mdts: b[MDTS],
            cntlid: u16_at(b, CNTLID),
            ver: u32_at(b, VER),
            oaes: u32_at(b, OAES),
            ctratt: u32_at(b, CTRATT),
            cntrltype: b[CNTRLTYPE],
            oacs: u16_at(b, OACS),
            acl: b[ACL],
            aerl: b[AERL],
            frmw: b[FRMW],
            lpa: b[LPA],
            elpe: b[ELPE],
            kas: u16_at(b, KAS),
            anatt: b[ANATT],
            anacap: b[ANACAP],
            anagrpmax: u32_at(b, ANAGRPMAX),
            nanagrpid: u32_at(b, NANAGRPID),
            sqes: b[SQES],
            cqes: b[CQES],
            maxcmd: u16_at(b, MAXCMD),
            nn: u32_at(b, NN),
            oncs: u16_at(b, ONCS),
            fuses: u16_at(b, FUSES),
            vwc: b[VWC],
            acwu: u16_at(b, ACWU),
            ocfs: u16_at(b, OCFS),
            sgls: u32_at(b, SGLS),
            mnan: u32_at(b, MNAN),
            subnqn: s(SUBNQN, 256),
            ioccsz: u32_at(b, IOCCSZ),
            iorcsz: u32_at(b, IORCSZ),
            icdoff: u16_at(b, ICDOFF),
            fcatt: b[FCATT],
            msdbd: b[MSDBD],
        }
    }
}

/// Identify Namespace byte offsets (NVM Command Set, "Identify Namespace Data Structure").
pub mod ns_off {
    pub const NSZE: usize = 0;
    pub const NCAP: usize = 8;
    pub const NUSE: usize = 16;
    pub const NSFEAT: usize = 24;
    pub const NLBAF: usize = 25;
    pub const FLBAS: usize = 26;
    pub const NMIC: usize = 30;
    pub const RESCAP: usize = 31;
    pub const DLFEAT: usize = 33;
    pub const NPWG: usize = 64;
    pub const NPWA: usize = 66;
    pub const NPDG: usize = 68;
    pub const NPDA: usize = 70;
    pub const NOWS: usize = 72;
    pub const MSSRL: usize = 74;
    pub const MCL: usize = 76;
    pub const MSRC: usize = 80;
    pub const ANAGRPID: usize = 92;
    pub const NSATTR: usize = 99;
    pub const NGUID: usize = 104;
    pub const EUI64: usize = 120;
    pub const LBAF0: usize = 128;
}

/// NSFEAT bit 2: Deallocated or Unwritten Logical Block error support... we
/// use bit 3 (NSFEAT.OPTPERF) not at all; DLFEAT 001b: deallocated blocks read as zeroes.
pub const DLFEAT_READ_ZEROES: u8 = 0x01;
/// NSFEAT bit 4 (OPTPERF, NVM Command Set §4.1.5.1): NPWG, NPWA, NPDG,
/// NPDA and NOWS are defined.
pub const NSFEAT_OPTPERF: u8 = 0x10;
/// NSATTR bit 0 (NVM Command Set §4.1.5.1, Namespace Attributes): the
/// namespace is write protected (Linux: `NVME_NS_ATTR_RO`, the disk is then
/// set read-only in `nvme_update_disk_info` / `nvme_update_ns_info`).
pub const NSATTR_WRITE_PROTECTED: u8 = 0x01;

/// What a namespace reports in Identify Namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdNs {
    /// Size, capacity and utilization in logical blocks.
    pub nsze: u64,
    pub ncap: u64,
    pub nuse: u64,
    pub nsfeat: u8,
    pub nmic: u8,
    /// Reservation Capabilities (NVM Command Set §4.1.5.1 RESCAP).
    pub rescap: u8,
    pub dlfeat: u8,
    /// Namespace Preferred Deallocate Granularity and Alignment, in
    /// logical blocks, 0's based (meaningful with NSFEAT.OPTPERF).
    pub npdg: u16,
    pub npda: u16,
    /// Copy limits (NVM Command Set §4.1.5.1): Maximum Single Source Range
    /// Length and Maximum Copy Length in logical blocks, Maximum Source
    /// Range Count (0's based).
    pub mssrl: u16,
    pub mcl: u32,
    pub msrc: u8,
    /// ANA Group Identifier (0: not in an ANA group).
    pub anagrpid: u32,
    /// Namespace Attributes (bit 0: [`NSATTR_WRITE_PROTECTED`]).
    pub nsattr: u8,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    /// log2 of the logical block size (LBAF0.LBADS).
    pub lbads: u8,
}

impl IdNs {
    pub fn encode(&self, b: &mut [u8]) {
        use ns_off::*;
        b[..IDENTIFY_LEN].fill(0);
        put_u64(b, NSZE, self.nsze);
        put_u64(b, NCAP, self.ncap);
        put_u64(b, NUSE, self.nuse);
        b[NSFEAT] = self.nsfeat;
        b[NLBAF] = 0; // one format, 0's based
        b[FLBAS] = 0;
        b[NMIC] = self.nmic;
        b[RESCAP] = self.rescap;
        b[DLFEAT] = self.dlfeat;
        put_u16(b, NPDG, self.npdg);
        put_u16(b, NPDA, self.npda);
        put_u16(b, MSSRL, self.mssrl);
        put_u32(b, MCL, self.mcl);
        b[MSRC] = self.msrc;
        put_u32(b, ANAGRPID, self.anagrpid);
        b[NSATTR] = self.nsattr;
        b[NGUID..NGUID + 16].copy_from_slice(&self.nguid);
        b[EUI64..EUI64 + 8].copy_from_slice(&self.eui64);
        // LBAF0: MS (15:0) = 0, LBADS (23:16), RP (25:24) = 0 (best).
        b[LBAF0 + 2] = self.lbads;
    }

    pub fn decode(b: &[u8]) -> IdNs {
        use ns_off::*;
        let flbas = (b[FLBAS] & 0xF) as usize;
        let mut nguid = [0u8; 16];
        nguid.copy_from_slice(&b[NGUID..NGUID + 16]);
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&b[EUI64..EUI64 + 8]);
        IdNs {
            nsze: u64_at(b, NSZE),
            ncap: u64_at(b, NCAP),
            nuse: u64_at(b, NUSE),
            nsfeat: b[NSFEAT],
            nmic: b[NMIC],
            rescap: b[RESCAP],
            dlfeat: b[DLFEAT],
            npdg: u16_at(b, NPDG),
            npda: u16_at(b, NPDA),
            mssrl: u16_at(b, MSSRL),
            mcl: u32_at(b, MCL),
            msrc: b[MSRC],
            anagrpid: u32_at(b, ANAGRPID),
            nsattr: b[NSATTR],
            nguid,
            eui64,
            lbads: b[LBAF0 + flbas * 4 + 2],
        }
    }
}

/// Namespace Identification Descriptor types (Base §5.17.2.3).
pub mod nidt {
    pub const EUI64: u8 = 1;
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

/// Writes the CNS 03h descriptor list: NGUID, UUID and CSI (NVM).
pub fn encode_ns_descriptors(b: &mut [u8], nguid: &[u8; 16], uuid: &[u8; 16]) {
    b[..IDENTIFY_LEN].fill(0);
    let mut off = 0;
    for (t, v) in [
        (nidt::NGUID, &nguid[..]),
        (nidt::UUID, &uuid[..]),
        (nidt::CSI, &[0u8][..]),
    ] {
        b[off] = t;
        b[off + 1] = v.len() as u8;
        b[off + 4..off + 4 + v.len()].copy_from_slice(v);
        off += 4 + v.len();
    }
}

/// Parses a CNS 03h descriptor list into (type, value) pairs.
pub fn decode_ns_descriptors(b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= b.len() {
        let (t, l) = (b[off], b[off + 1] as usize);
        if t == 0 || off + 4 + l > b.len() {
            break;
        }
        out.push((t, b[off + 4..off + 4 + l].to_vec()));
        off += 4 + l;
    }
    out
}

/// Writes the CNS 02h list: active NSIDs greater than `after`, ascending, up to 1024.
pub fn encode_active_ns_list(b: &mut [u8], nsids: impl Iterator<Item = u32>, after: u32) {
    b[..IDENTIFY_LEN].fill(0);
    for (i, id) in nsids
        .filter(|&n| n > after)
        .take(IDENTIFY_LEN / 4)
        .enumerate()
    {
        put_u32(b, i * 4, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_offsets_the_linux_host_checks() {
        let c = IdCtrl {
            sn: "SN1".into(),
            mn: "farflash".into(),
            fr: "0.1.0".into(),
            cmic: CMIC_MULTI_CTRL,
            mdts: 5,
            cntlid: 0x21,
            ver: 0x20000,
            ctratt: CTRATT_HID128,
            cntrltype: CNTRLTYPE_IO,
            kas: 10,
            anatt: 10,
            anacap: ANACAP_ALL_STATES | ANACAP_GRPID_STATIC,
            anagrpmax: 128,
            nanagrpid: 128,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 128,
            nn: 4,
            sgls: SGLS_SUPPORTED | SGLS_OFFSET,
            subnqn: "nqn.x".into(),
            ioccsz: 4 + 512,
            iorcsz: 1,
            msdbd: 1,
            ..IdCtrl::default()
        };
        let mut b = vec![0u8; IDENTIFY_LEN];
        c.encode(&mut b);
        assert_eq!(&b[24..32], b"farflash");
        assert_eq!(b[24 + 8], b' ');
        assert_eq!(b[76], CMIC_MULTI_CTRL);
        assert_eq!(b[77], 5);
        assert_eq!(u16_at(&b, 78), 0x21);
        assert_eq!(b[111], 1);
        assert_eq!(u16_at(&b, 320), 10);
        // Linux struct nvme_id_ctrl: rsvd338[4], anatt, anacap, anagrpmax, nanagrpid.
        assert_eq!((b[342], b[343]), (10, 0x5F));
        assert_eq!((u32_at(&b, 344), u32_at(&b, 348)), (128, 128));
        assert_eq!(b[512], 0x66);
        assert_eq!(u16_at(&b, 514), 128);
        assert_eq!(u32_at(&b, 516), 4);
        assert_eq!(u32_at(&b, 536), 0x0010_0001);
        assert_eq!(&b[768..773], b"nqn.x");
        assert_eq!(u32_at(&b, 1792), 516);
        assert_eq!(u32_at(&b, 1796), 1);
        assert_eq!(u16_at(&b, 1800), 0);
        assert_eq!(b[1803], 1);
        assert_eq!(IdCtrl::decode(&b), c);
        // FUSES 523:522, ACWU 533:532, OCFS 535:534.
        let c = IdCtrl {
            fuses: FUSES_COMPARE_AND_WRITE,
            acwu: 7,
            ocfs: OCFS_FORMAT0,
            ..IdCtrl::default()
        };
        c.encode(&mut b);
        assert_eq!(
            (u16_at(&b, 522), u16_at(&b, 532), u16_at(&b, 534)),
            (1, 7, 1)
        );
        assert_eq!(IdCtrl::decode(&b), c);
    }

    #[test]
    fn ns_round_trip() {
        let n = IdNs {
            nsze: 1 << 21,
            ncap: 1 << 21,
            nuse: 1 << 21,
            dlfeat: 1,
            npdg: 255,
            npda: 255,
            nsfeat: NSFEAT_OPTPERF,
            nmic: 1,
            rescap: 0xFF,
            anagrpid: 7,
            nsattr: NSATTR_WRITE_PROTECTED,
            nguid: [3; 16],
            eui64: [0; 8],
            lbads: 9,
            mssrl: 256,
            mcl: 4096,
            msrc: 127,
        };
        let mut b = vec![0u8; IDENTIFY_LEN];
        n.encode(&mut b);
        // NVM Command Set Identify Namespace: MSSRL 75:74, MCL 79:76, MSRC 80.
        assert_eq!((u16_at(&b, 74), u32_at(&b, 76), b[80]), (256, 4096, 127));
        // NSATTR: byte 99.
        assert_eq!(b[99], 1);
        assert_eq!(u64_at(&b, 0), 1 << 21);
        assert_eq!(b[130], 9);
        assert_eq!((b[30], b[31]), (1, 0xFF));
        assert_eq!(u32_at(&b, 92), 7);
        assert_eq!(&b[104..120], &[3; 16]);
        assert_eq!(IdNs::decode(&b), n);
    }

    #[test]
    fn descriptors() {
        let mut b = vec![0u8; IDENTIFY_LEN];
        encode_ns_descriptors(&mut b, &[1; 16], &[2; 16]);
        assert_eq!(&b[0..4], &[2, 16, 0, 0]);
        assert_eq!(&b[20..24], &[3, 16, 0, 0]);
        let d = decode_ns_descriptors(&b);
        assert_eq!(d.len(), 3);
        assert_eq!(d[2], (nidt::CSI, vec![0]));
        encode_active_ns_list(&mut b, [1u32, 2, 5].into_iter(), 1);
        assert_eq!(u32_at(&b, 0), 2);
        assert_eq!(u32_at(&b, 4), 5);
        assert_eq!(u32_at(&b, 8), 0);
    }
}
