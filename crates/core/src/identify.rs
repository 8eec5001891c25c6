//! Identify Controller / Namespace contents (Base §5.17.2). The fields the
//! Linux host checks before it accepts a controller (host/core.c
//! `nvme_check_ctrl_fabric_info`, host/tcp.c) are pinned by the tests below.

use crate::controller::{Controller, AER_LIMIT, ERROR_LOG_ENTRIES};
use crate::queue::NvmeQueue;
use crate::subsystem::{Namespace, Subsystem};
use farflash_wire::identify::{self as wid, IdCtrl, IdNs};
use farflash_wire::props;

pub const FIRMWARE_REVISION: &str = env!("CARGO_PKG_VERSION");
/// Keep Alive Support granularity unit: 100 ms (Base §5.17.2.1 KAS).
const KAS_UNIT_MS: u32 = 100;

pub(crate) fn controller<C: Default>(q: &NvmeQueue<C>, ctrl: &Controller) -> IdCtrl {
    let t = &q.target.transport;
    let kas = (t.keep_alive_granularity_ms / KAS_UNIT_MS).clamp(1, u16::MAX as u32) as u16;
    let mut c = IdCtrl {
        vid: 0,
        ssvid: 0,
        fr: FIRMWARE_REVISION.to_owned(),
        cntlid: ctrl.cntlid,
        ver: props::VERSION_2_0,
        ctratt: wid::CTRATT_HID128,
        kas,
        maxcmd: t.max_queue_depth as u16,
        sgls: wid::SGLS_SUPPORTED
            | wid::SGLS_OFFSET
            | wid::SGLS_LONGER
            | if q.via.trtype == farflash_wire::discovery::TRTYPE_RDMA {
                wid::SGLS_KEYED
            } else {
                0
            },
        // TCP and RDMA: in-capsule data starts right after the SQE (ICDOFF 0), one SGL descriptor.
        icdoff: 0,
        msdbd: 1,
        ioccsz: (64 + t.data.in_capsule_data_size) / 16,
        iorcsz: 1,
        // An I/O controller also has the Commands Supported and Effects log.
        // LPA bit 0: SMART per namespace (counted per NSID, `stats.rs`).
        lpa: wid::LPA_EXTENDED
            | if ctrl.is_discovery() {
                0
            } else {
                wid::LPA_CMD_EFFECTS | wid::LPA_SMART_PER_NS
            },
        elpe: (ERROR_LOG_ENTRIES - 1) as u8,
        aerl: (AER_LIMIT - 1) as u8,
        frmw: 1 << 1 | 1, // one slot, slot 1 read-only
        acl: 3,
        sqes: 0x66,
        cqes: 0x44,
        ..IdCtrl::default()
    };
    match ctrl.subsystem() {
        Some(sub) => {
            c.sn = sub.serial.clone();
            c.mn = sub.model.clone();
            c.subnqn = sub.nqn.clone();
            c.cntrltype = wid::CNTRLTYPE_IO;
            // Base §8.20: ANA reporting, every state, static group IDs.
            c.cmic = wid::CMIC_MULTI_CTRL | wid::CMIC_ANA;
            c.anatt = crate::ana::ANATT_SECS;
            c.anacap = wid::ANACAP_ALL_STATES | wid::ANACAP_GRPID_STATIC;
            c.anagrpmax = farflash_wire::ana::ANAGRPMAX;
            c.nanagrpid = farflash_wire::ana::ANAGRPMAX;
            // MDTS in units of the minimum page size (4 KiB), as a power of two.
            c.mdts = (t.max_io_size / 4096).trailing_zeros() as u8;
            // Linux (`nvme_mpath_init_identify`) wants 1 <= MNAN <= NN
            // from a controller that reports ANA.
            c.nn = sub.max_nsid().max(1);
            c.mnan = c.nn;
            // Each bit is a command `io.rs` / `crate::nvm` runs (tests:
            // `nvm/tests_caps.rs`).
            c.oncs = crate::io::ONCS;
            // What `crate::nvm`'s commands report (Copy's OCFS).
            crate::nvm::identify_controller(&mut c);
            // Base §3.4.2: Compare and Write, atomic over its whole range
            // (the namespace's range exclusion), so ACWU is the largest
            // transfer in the smallest block size (0's based).
            c.fuses = wid::FUSES_COMPARE_AND_WRITE;
            let min_shift = sub
                .namespaces()
                .iter()
                .map(|n| n.lba_shift)
                .min()
                .unwrap_or(12);
            c.acwu = ((t.max_io_size >> min_shift).clamp(1, 1 << 16) - 1) as u16;
            // Storage that compares and writes itself (an RBD image other
            // gateways write too) is atomic across them only within its
            // unit (`Backend::compare_and_write_unit`; wider pairs are atomic
            // within this process): ACWU says no more than that.
            if let Some(unit) = sub
                .namespaces()
                .iter()
                .filter_map(|n| Some((n.backend.compare_and_write_unit()? >> n.lba_shift).max(1)))
                .min()
            {
                c.acwu = c.acwu.min((unit.min(1 << 16) - 1) as u16);
            }
            c.oaes = wid::OAES_NS_ATTR | wid::OAES_ANA_CHANGE;
            c.vwc = volatile_write_cache(sub) as u8;
        }
        None => {
            c.sn = "farflash-discovery".to_owned();
            c.mn = "farflash discovery".to_owned();
            c.subnqn = farflash_wire::DISCOVERY_NQN.to_owned();
            c.cntrltype = wid::CNTRLTYPE_DISCOVERY;
            c.oaes = wid::OAES_DISCOVERY_CHANGE;
            c.maxcmd = 32;
        }
    }
    c
}

/// Identify Controller VWC bit 0: some namespace's backend has a volatile
/// write cache (a Flush does something).
pub(crate) fn volatile_write_cache(sub: &Subsystem) -> bool {
    sub.namespaces()
        .iter()
        .any(|n| n.backend.volatile_write_cache())
}

/// Identify Namespace (CNS 00h) of `ns` as `ctrl` sees it: NSATTR bit 0
/// (write protected) when the controller is a read-only host's (NVM Command
/// Set §4.1.5.1; the Linux host then sets the disk read-only,
/// `nvme_update_ns_info`).
pub(crate) fn namespace(ns: &Namespace, ctrl: &Controller) -> IdNs {
    // NVM Command Set §4.1.5.1 NPDG/NPDA: Deallocate frees whole units of
    // the storage's granularity (a pool's cluster), in blocks, 0's based;
    // NSFEAT.OPTPERF says they are defined. Not reported when a unit is
    // not a whole number of blocks or exceeds the 16-bit field.
    let npdg = (ns.backend.deallocate_granularity())
        .filter(|g| g.is_multiple_of(ns.block_size as u64))
        .map(|g| g >> ns.lba_shift)
        .and_then(|blocks| u16::try_from(blocks.checked_sub(1)?).ok());
    let mut id = IdNs {
        nsze: ns.blocks,
        ncap: ns.blocks,
        nuse: ns.blocks,
        nsfeat: if npdg.is_some() {
            wid::NSFEAT_OPTPERF
        } else {
            0
        },
        npdg: npdg.unwrap_or(0),
        npda: npdg.unwrap_or(0),
        nmic: 1, // may be attached to several controllers
        // NVM Command Set §4.1.5.1 RESCAP: all six types (bits 1-6), IEKEY
        // as NVMe 1.3 defines it (bit 7), PTPL (bit 0) with a PTPL file.
        rescap: 0xFE | ns.resv.file.is_some() as u8,
        dlfeat: wid::DLFEAT_READ_ZEROES,
        anagrpid: ns.anagrpid,
        nsattr: if ctrl.read_only() {
            wid::NSATTR_WRITE_PROTECTED
        } else {
            0
        },
        nguid: ns.nguid,
        eui64: [0; 8],
        lbads: ns.lba_shift as u8,
        ..IdNs::default()
    };
    // What the multi-request NVM commands report (the Copy limits).
    crate::nvm::identify_namespace(ns, &mut id);
    id
}
