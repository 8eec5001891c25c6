//! What Identify, the SMART log and Set Features report about these
//! commands is what runs (issue 43: a capability reported is a behaviour).

use crate::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig, TransportConfig};
use crate::testing::build_subsystems;
use crate::tests::{identify_ctrl, io_queue, run, rw, target, NQN};
use crate::{NvmeQueue, Target};
use farflash_wire::identify::{self as wid, IdCtrl, IdNs};
use farflash_wire::opcode::{admin, feature, io, log_id};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{Sqe, Status};
use std::sync::Arc;

fn id_ctrl(a: &mut NvmeQueue) -> IdCtrl {
    let c = run(a, identify_ctrl(3), &[]);
    assert_eq!(c.status, Status::SUCCESS);
    IdCtrl::decode(c.data.as_ref().expect("identify data").0.as_slice())
}

fn smart(a: &mut NvmeQueue, nsid: u32) -> (Status, Option<Vec<u8>>) {
    let sqe = Sqe {
        opcode: admin::GET_LOG_PAGE,
        flags: PSDT_SGL,
        cid: 9,
        nsid,
        dptr: SglDescriptor::transport(512),
        cdw10: log_id::SMART as u32 | (512 / 4 - 1) << 16,
        ..Sqe::default()
    };
    let c = run(a, sqe, &[]);
    (
        c.status,
        c.data.map(|(b, n)| b.as_slice()[..n as usize].to_vec()),
    )
}

fn set_vwc(a: &mut NvmeQueue, on: bool) -> Status {
    let sqe = Sqe {
        opcode: admin::SET_FEATURES,
        flags: PSDT_SGL,
        cid: 11,
        cdw10: feature::VOLATILE_WRITE_CACHE as u32,
        cdw11: on as u32,
        ..Sqe::default()
    };
    run(a, sqe, &[]).status
}

#[test]
fn identify_reports_compare_verify_copy_and_the_fused_pair() {
    let (t, script) = target();
    let (mut a, mut q) = io_queue(&t);
    let id = id_ctrl(&mut a);
    for bit in [wid::ONCS_COMPARE, wid::ONCS_VERIFY, wid::ONCS_COPY] {
        assert_ne!(id.oncs & bit, 0, "ONCS {bit:#x}");
    }
    assert_eq!(id.fuses, wid::FUSES_COMPARE_AND_WRITE);
    assert_eq!(id.ocfs, wid::OCFS_FORMAT0);
    // 512-byte blocks, 256 KiB transfers: 512 blocks, 0's based.
    assert_eq!(id.acwu, 511);
    // Storage atomic across gateways only within 512 bytes (RBD): one block.
    script.offer_compare_and_write(Some(512));
    assert_eq!(id_ctrl(&mut a).acwu, 0);
    script.offer_compare_and_write(None);
    assert_ne!(id.lpa & wid::LPA_SMART_PER_NS, 0);
    let c = run(
        &mut a,
        Sqe {
            opcode: admin::IDENTIFY,
            flags: PSDT_SGL,
            cid: 4,
            nsid: 1,
            dptr: SglDescriptor::transport(4096),
            cdw10: 0,
            ..Sqe::default()
        },
        &[],
    );
    let ns = IdNs::decode(c.data.expect("identify ns").0.as_slice());
    // 1 GiB of 512-byte blocks; ranges of at most 65535 blocks, 128 ranges.
    assert_eq!((ns.mssrl, ns.mcl, ns.msrc), (u16::MAX, 1 << 21, 127));
    // Each one runs (the details are in `nvm/tests.rs`).
    let d = vec![0u8; 512];
    assert_eq!(
        run(&mut q, rw(io::COMPARE, 5, 0, 512), &d).status,
        Status::SUCCESS
    );
    assert_eq!(
        run(&mut q, rw(io::VERIFY, 6, 0, 512), &[]).status,
        Status::SUCCESS
    );
}

#[test]
fn smart_per_namespace_counts_that_namespace_only() {
    let (t, _) = target();
    let (mut a, mut q) = io_queue(&t);
    for cid in 0..3 {
        assert_eq!(
            run(&mut q, rw(io::WRITE, cid, 0, 1024), &[7u8; 1024]).status,
            Status::SUCCESS
        );
    }
    let (st, page) = smart(&mut a, 1);
    assert_eq!(st, Status::SUCCESS);
    let page = page.expect("SMART data");
    let u128_at = |o: usize| u128::from_le_bytes(page[o..o + 16].try_into().unwrap());
    // Host Write Commands (80), Data Units Written (48, 512,000 bytes each).
    assert_eq!((u128_at(80), u128_at(48)), (3, 1));
    // No temperature sensor, no spare: reported as 0, no critical warning.
    assert_eq!(
        (page[0], page[1], page[2], page[3], page[4]),
        (0, 0, 0, 0, 0)
    );
    // The whole subsystem, NSID FFFFFFFFh: the same writes.
    let (st, all) = smart(&mut a, u32::MAX);
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(all.expect("SMART data")[80], 3);
    // An NSID that is not active.
    assert_eq!(smart(&mut a, 2).0, Status::INVALID_NAMESPACE.dnr());
    // A Compare is a read command (Base §5.16.1.3); a failed one is not counted.
    let reads = |a: &mut NvmeQueue| {
        let p = smart(a, 1).1.expect("SMART data");
        u128::from_le_bytes(p[64..80].try_into().unwrap())
    };
    let before = reads(&mut a);
    let d = [7u8; 1024];
    let c = run(&mut q, rw(io::COMPARE, 20, 0, 1024), &d);
    assert_eq!(c.status, Status::SUCCESS);
    let c = run(&mut q, rw(io::COMPARE, 21, 0, 1024), &[8u8; 1024]);
    assert_eq!(c.status, Status::COMPARE_FAILURE);
    assert_eq!(reads(&mut a), before + 1);
}

fn ram_target() -> Arc<Target> {
    let transport = TransportConfig::default();
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: transport.clone(),
        subsystems: vec![SubsystemConfig::new(
            NQN,
            vec![NamespaceConfig {
                nsid: Some(1),
                block_size: Some(512),
                ..NamespaceConfig::sized(BackendKind::Ram, 1 << 20)
            }],
        )],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).unwrap();
    Target::new(subs, transport, vec!["127.0.0.1:4420".parse().unwrap()])
}

/// Get Features Volatile Write Cache, SEL 011b (supported capabilities):
/// CDW0.
fn vwc_capabilities(a: &mut NvmeQueue) -> u64 {
    let sqe = Sqe {
        opcode: admin::GET_FEATURES,
        flags: PSDT_SGL,
        cid: 12,
        cdw10: feature::VOLATILE_WRITE_CACHE as u32 | 3 << 8,
        ..Sqe::default()
    };
    let c = run(a, sqe, &[]);
    assert_eq!(c.status, Status::SUCCESS);
    c.result
}

#[test]
fn the_write_cache_feature_exists_only_with_a_volatile_write_cache() {
    // RAM: nothing volatile behind a completed write; VWC 0 and the
    // feature refused, as Linux nvmet answers.
    let t = ram_target();
    let (mut a, _q) = io_queue(&t);
    assert_eq!(id_ctrl(&mut a).vwc, 0);
    assert_eq!(set_vwc(&mut a, false), Status::INVALID_FIELD.dnr());
    // Get Features SEL 011b agrees: not changeable (CDW0 bit 2 clear).
    assert_eq!(vwc_capabilities(&mut a), 0);
    // The scripted backend reports a volatile cache: the host may turn it
    // off, and its writes then go through (FUA).
    let (t, _) = target();
    let (mut a, mut q) = io_queue(&t);
    assert_eq!(id_ctrl(&mut a).vwc, 1);
    assert_eq!(vwc_capabilities(&mut a), 1 << 2, "changeable");
    assert_eq!(set_vwc(&mut a, false), Status::SUCCESS);
    let Some(crate::command::IoCmd::Write { fua, .. }) = classify_write(&mut q) else {
        panic!("a write");
    };
    assert!(fua, "written through with the cache off");
    assert_eq!(set_vwc(&mut a, true), Status::SUCCESS);
    let Some(crate::command::IoCmd::Write { fua, .. }) = classify_write(&mut q) else {
        panic!("a write");
    };
    assert!(!fua);
}

/// A Write's parsed form (begun, then failed so the slot is free again).
fn classify_write(q: &mut NvmeQueue) -> Option<crate::command::IoCmd> {
    let crate::command::Begin::Ready { slot, .. } = q.begin(rw(io::WRITE, 60, 0, 512)) else {
        return None;
    };
    let cmd = q.slots[slot as usize].cmd.io();
    q.fail(slot, Status::DATA_TRANSFER_ERROR);
    let _ = crate::tests::completions(q);
    cmd
}

/// Get Log Page `lid` for `nsid`: `len` bytes from `offset`.
fn log_page(a: &mut NvmeQueue, lid: u8, nsid: u32, len: u32, offset: u64) -> (Status, Vec<u8>) {
    let mut sqe = Sqe {
        opcode: admin::GET_LOG_PAGE,
        flags: PSDT_SGL,
        cid: 12,
        nsid,
        dptr: SglDescriptor::transport(len),
        ..Sqe::default()
    };
    farflash_wire::log::GetLogPage {
        lid,
        lsp: 0,
        rae: false,
        len: len as u64,
        offset,
    }
    .fill_sqe(&mut sqe);
    let c = run(a, sqe, &[]);
    let data = c
        .data
        .map(|(b, n)| b.as_slice()[..n as usize].to_vec())
        .unwrap_or_default();
    (c.status, data)
}

#[test]
fn the_error_log_holds_each_failed_command_newest_first() {
    // Base §5.16.1.2 (ELPE + 1 entries); SMART counts the entries logged.
    let (t, _) = target();
    let (mut a, mut q) = io_queue(&t);
    let elpe = id_ctrl(&mut a).elpe as usize;
    let (st, page) = log_page(&mut a, log_id::ERROR, 0, 64 * (elpe as u32 + 1), 0);
    assert_eq!(st, Status::SUCCESS);
    assert!(page.iter().all(|&b| b == 0), "no error yet");
    // Two failed commands: a Read past the end, a Compare that differs.
    let past = run(&mut q, rw(io::READ, 30, 1 << 20, 512), &[]);
    assert_eq!(past.status, Status::LBA_OUT_OF_RANGE.dnr());
    let cmp = run(&mut q, rw(io::COMPARE, 31, 0, 512), &[9u8; 512]);
    assert_eq!(cmp.status, Status::COMPARE_FAILURE);
    let (st, page) = log_page(&mut a, log_id::ERROR, 0, 128, 0);
    assert_eq!(st, Status::SUCCESS);
    let u16_at = |o: usize| u16::from_le_bytes([page[o], page[o + 1]]);
    let u64_at = |o: usize| u64::from_le_bytes(page[o..o + 8].try_into().unwrap());
    // Error Count, SQID, CID, Status Field (bits 15:1), NSID.
    assert_eq!((u64_at(0), u16_at(8), u16_at(10)), (2, 1, 31));
    assert_eq!(
        u16_at(12) >> 1,
        Status::COMPARE_FAILURE.to_cqe_field(false) >> 1
    );
    assert_eq!(u32::from_le_bytes(page[24..28].try_into().unwrap()), 1);
    assert_eq!((u64_at(64), u16_at(64 + 10)), (1, 30));
    let (_, smart) = log_page(&mut a, log_id::SMART, u32::MAX, 512, 0);
    // Number of Error Information Log Entries (bytes 176:191).
    assert_eq!(smart[176], 2);
}

#[test]
fn the_firmware_slot_log_names_the_running_revision() {
    // Base §5.16.1.4: FRMW says one slot, read-only; AFI names slot 1, and
    // FRS1 is Identify's FR. OACS bit 2 is clear: no Firmware Commit or
    // Image Download.
    let (t, _) = target();
    let (mut a, _q) = io_queue(&t);
    let id = id_ctrl(&mut a);
    assert_eq!(id.frmw, 0x03);
    let (st, page) = log_page(&mut a, log_id::FIRMWARE_SLOT, u32::MAX, 512, 0);
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(page[0], 1, "AFI: slot 1 active");
    assert_eq!(
        String::from_utf8_lossy(&page[8..16]).trim_end(),
        id.fr.trim_end()
    );
    assert!(page[16..].iter().all(|&b| b == 0), "slots 2-7 empty");
}

#[test]
fn oacs_reports_no_optional_admin_command_and_each_is_refused() {
    // Base §5.17.2.1 OACS: every bit clear; each command it would cover is
    // an Invalid Command Opcode (Security Send/Receive, Format NVM,
    // Firmware Commit/Image Download, Namespace Management/Attachment,
    // Device Self-test, Directives, NVMe-MI, Virtualization Management,
    // Doorbell Buffer Config, Get LBA Status, Lockdown).
    let (t, _) = target();
    let (mut a, _q) = io_queue(&t);
    assert_eq!(id_ctrl(&mut a).oacs, 0);
    let opcodes = [
        0x81, 0x82, 0x80, 0x10, 0x11, 0x0D, 0x15, 0x14, 0x19, 0x1A, 0x1D, 0x1E, 0x1C, 0x7C, 0x86,
        0x24,
    ];
    for (i, opcode) in opcodes.into_iter().enumerate() {
        let sqe = Sqe {
            opcode,
            flags: PSDT_SGL,
            cid: 20 + i as u16,
            nsid: 1,
            ..Sqe::default()
        };
        assert_eq!(
            run(&mut a, sqe, &[]).status,
            Status::INVALID_OPCODE.dnr(),
            "admin opcode {opcode:#04x}"
        );
    }
}

#[test]
fn lpa_extended_data_serves_the_smart_log_from_an_offset() {
    // Base §5.16 / LPA bit 2: LPOL/LPOU; a dword-aligned offset inside the
    // page returns the rest, an unaligned one or one past the page is
    // Invalid Field in Command.
    let (t, _) = target();
    let (mut a, mut q) = io_queue(&t);
    assert_ne!(id_ctrl(&mut a).lpa & wid::LPA_EXTENDED, 0);
    for cid in 0..5 {
        assert_eq!(
            run(&mut q, rw(io::WRITE, cid, 0, 512), &[1u8; 512]).status,
            Status::SUCCESS
        );
    }
    let (st, whole) = log_page(&mut a, log_id::SMART, u32::MAX, 512, 0);
    assert_eq!(st, Status::SUCCESS);
    let (st, tail) = log_page(&mut a, log_id::SMART, u32::MAX, 448, 64);
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(tail, whole[64..], "the page from byte 64");
    assert_eq!(tail[16], 5, "Host Write Commands");
    for bad in [2u64, 516] {
        assert_eq!(
            log_page(&mut a, log_id::SMART, u32::MAX, 4, bad).0,
            Status::INVALID_FIELD.dnr(),
            "offset {bad}"
        );
    }
}
