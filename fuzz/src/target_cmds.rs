//! Commands a harness builds from a few fuzz bytes: either a fuzzed SQE
//! with fix-ups that make it plausible, or a known-good command of every
//! kind the target implements. Both come with their in-capsule data.

use crate::input::Input;
use crate::opcodes;
use crate::target_setup::Shape;
use farflash_wire::fabrics::PropertyCmd;
use farflash_wire::log::GetLogPage;
use farflash_wire::opcode::{admin, cns, fctype, feature, io, log_id};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL, SQE_SIZE};
use farflash_wire::{props, Sqe};

/// Bytes of data the command moves, as the target will compute it.
fn data_len(s: &Sqe, io_queue: bool, bs: u32) -> u32 {
    match (io_queue, s.opcode) {
        (true, io::READ | io::WRITE | io::COMPARE) => (s.nlb() as u32 + 1).saturating_mul(bs),
        (true, io::DATASET_MANAGEMENT) => ((s.cdw10 & 0xFF) + 1) * 16,
        (false, admin::IDENTIFY) => 4096,
        (false, admin::GET_LOG_PAGE) => GetLogPage::from_sqe(s).len.min(u32::MAX as u64) as u32,
        (_, admin::FABRICS) if s.fctype() == fctype::CONNECT => 1024,
        _ => s.dptr.length,
    }
}

/// A fuzzed SQE, fixed up according to `ctl`:
/// bit 0 known opcode, bit 1 SGL PSDT, bit 2 DPTR matching the data,
/// bit 3 small valid LBA range on NSID 1, bit 4 in-capsule data when it fits.
pub fn fuzzed(inp: &mut Input, ctl: u8, io_queue: bool, shape: &Shape) -> (Sqe, Vec<u8>) {
    let mut raw: [u8; SQE_SIZE] = inp.array();
    if ctl & 1 != 0 {
        raw[0] = opcodes::pick(raw[0], io_queue);
        if raw[0] == admin::FABRICS {
            raw[4] = opcodes::pick_fctype(raw[4]);
        }
    }
    let mut s = Sqe::decode(&raw);
    if ctl & 2 != 0 {
        s.flags = (s.flags & !0xC0) | PSDT_SGL;
    }
    if ctl & 8 != 0 && s.opcode != admin::FABRICS {
        s.nsid = 1;
        s.cdw10 %= 64;
        s.cdw11 = 0;
        s.cdw12 &= 0xC000_000F;
    }
    let mut icd = Vec::new();
    if ctl & 4 != 0 {
        let len = data_len(&s, io_queue, shape.block_size);
        let fits = len <= shape.icd.max(8192) && len <= 1 << 16;
        if ctl & 16 != 0 && fits {
            icd = filled(inp, len as usize);
            s.dptr = SglDescriptor::in_capsule(len);
        } else {
            s.dptr = SglDescriptor::transport(len);
        }
    } else {
        let n = inp.u16() as usize % 9000;
        icd = inp.take(n).to_vec();
    }
    (s, icd)
}

/// `len` bytes: fuzz input first, then a pattern.
fn filled(inp: &mut Input, len: usize) -> Vec<u8> {
    let mut v = inp.take(len.min(64)).to_vec();
    v.extend((v.len()..len).map(|i| (i * 7 + 3) as u8));
    v
}

fn sqe(opcode: u8, nsid: u32, len: u32) -> Sqe {
    Sqe {
        opcode,
        flags: PSDT_SGL,
        nsid,
        dptr: SglDescriptor::transport(len),
        ..Sqe::default()
    }
}

fn rw(opcode: u8, nsid: u32, slba: u64, nlb: u16, bs: u32) -> Sqe {
    let len = (nlb as u32 + 1) * bs;
    Sqe {
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: nlb as u32,
        ..sqe(opcode, nsid, len)
    }
}

fn property(fct: u8, offset: u32, size8: bool, value: u64) -> Sqe {
    PropertyCmd {
        size8,
        offset,
        value,
    }
    .to_sqe(0, fct)
}

/// A known-good admin command picked by `k`, with argument byte `a`.
pub fn admin_cmd(k: u8, a: u8) -> (Sqe, Vec<u8>) {
    let cnses = [0, 1, 2, 3, 5, 6, 7, 8, cns::CONTROLLER];
    let lids = [1, 2, 3, 4, 5, log_id::DISCOVERY, 0xC0];
    let fids = [7, 0x0F, 0x0B, 6, 1, 2, 4, 5, 8, 0x0A, 0x0E, 0x16];
    let ccs = [props::cc::ENABLE_DEFAULT, 0, props::cc::SHN_NORMAL | 1, 1];
    let s = match k % 11 {
        0 => Sqe {
            cdw10: cnses[a as usize % cnses.len()] as u32,
            cdw11: (a as u32 >> 7) << 24,
            ..sqe(
                admin::IDENTIFY,
                [0, 1, 2, 3, 7, u32::MAX][a as usize / 16 % 6],
                4096,
            )
        },
        1 => {
            let g = GetLogPage {
                lid: lids[a as usize % lids.len()],
                lsp: 0,
                rae: a & 8 != 0,
                len: [512, 64, 4096, 4 << 20][(a as usize >> 4) & 3],
                offset: [0, 4, 512, 1 << 40][(a as usize >> 6) & 3],
            };
            let mut s = sqe(admin::GET_LOG_PAGE, u32::MAX, g.len as u32);
            g.fill_sqe(&mut s);
            s
        }
        2 => Sqe {
            cdw10: fids[a as usize % fids.len()] as u32,
            cdw11: [0x0001_0001, 0, 30_000, u32::MAX][(a as usize >> 4) & 3],
            ..sqe(admin::SET_FEATURES, 0, 0)
        },
        3 => Sqe {
            cdw10: fids[a as usize % fids.len()] as u32 | ((a as u32 >> 4) & 7) << 8,
            ..sqe(admin::GET_FEATURES, 0, 0)
        },
        4 => sqe(admin::KEEP_ALIVE, 0, 0),
        5 => sqe(admin::ASYNC_EVENT_REQUEST, 0, 0),
        6 => {
            let (off, size8) = [
                (props::CAP, true),
                (props::CAP, false),
                (props::CAP + 4, false),
                (props::VS, false),
                (props::CC, false),
                (props::CSTS, false),
                (props::AQA, false),
            ][a as usize % 7];
            property(fctype::PROPERTY_GET, off, size8, 0)
        }
        7 => property(
            fctype::PROPERTY_SET,
            props::CC,
            false,
            ccs[a as usize % 4] as u64,
        ),
        8 => sqe(admin::ABORT, 0, 0),
        9 => property(fctype::DISCONNECT, 0, false, 0),
        _ => Sqe {
            cdw10: feature::NUMBER_OF_QUEUES as u32,
            cdw11: a as u32 | (a as u32) << 16,
            ..sqe(admin::SET_FEATURES, 0, 0)
        },
    };
    (s, Vec::new())
}

/// A known-good I/O command picked by `k` with argument byte `a`.
pub fn io_cmd(k: u8, a: u8, shape: &Shape) -> (Sqe, Vec<u8>) {
    let bs = shape.block_size;
    let slba = a as u64 % 32;
    let nlb = (a >> 5) as u16;
    let nsid = [1, 1, 1, 3, 7, 2][a as usize % 6];
    match k % 9 {
        0 => (rw(io::READ, nsid, slba, nlb, bs), Vec::new()),
        1 => {
            let mut s = rw(io::WRITE, 1, slba, nlb, bs);
            let len = s.dptr.length;
            s.dptr = SglDescriptor::in_capsule(len);
            (s, (0..len).map(|i| (i ^ a as u32) as u8).collect())
        }
        2 => (rw(io::WRITE, nsid, slba, nlb, bs), Vec::new()),
        3 => (
            sqe(io::FLUSH, [1, u32::MAX, 3][a as usize % 3], 0),
            Vec::new(),
        ),
        4 => (rw(io::WRITE_ZEROES, nsid, slba, nlb, 0), Vec::new()),
        5 => {
            let nr = (a % 3) as u32 + 1;
            let mut ranges = Vec::new();
            for i in 0..nr {
                ranges.extend_from_slice(&0u32.to_le_bytes());
                ranges.extend_from_slice(&(8 * i + a as u32 % 9).to_le_bytes());
                ranges.extend_from_slice(&(slba * (i as u64 + 1)).to_le_bytes());
            }
            let mut s = Sqe {
                cdw10: nr - 1,
                cdw11: 1 << 2,
                ..sqe(io::DATASET_MANAGEMENT, 1, nr * 16)
            };
            s.dptr = SglDescriptor::in_capsule(nr * 16);
            (s, ranges)
        }
        6 => (rw(io::COMPARE, 1, slba, nlb, bs), Vec::new()),
        7 => (
            rw(io::READ, 1, 0, (shape.max_io_size / bs) as u16, bs),
            Vec::new(),
        ),
        _ => (
            rw(io::READ, 1, (4 << 20) / bs as u64 - 1, nlb, bs),
            Vec::new(),
        ),
    }
}
