//! Admin commands (Base §5) for I/O and discovery controllers.

use crate::command::{AdminCmd, Outcome, Xfer};
use crate::controller::{Controller, AER_LIMIT};
use crate::queue::NvmeQueue;
use crate::stats::Totals;
use crate::{discovery, identify};
use farflash_wire::ana as wlog_ana;
use farflash_wire::identify::{IDENTIFY_LEN, OAES_ANA_CHANGE, OAES_DISCOVERY_CHANGE, OAES_NS_ATTR};
use farflash_wire::log::{self as wlog, GetLogPage, Smart, ERROR_ENTRY_LEN};
use farflash_wire::opcode::{admin as op, cns, feature as fid, log_id};
use farflash_wire::{Sqe, Status};

/// The admin commands an I/O controller supports, and their effects (the
/// Commands Supported and Effects log page; Fabrics commands are not listed).
const ADMIN_EFFECTS: [(u8, u32); 7] = [
    (op::GET_LOG_PAGE, wlog::CSUPP),
    (op::IDENTIFY, wlog::CSUPP),
    (op::ABORT, wlog::CSUPP),
    (op::SET_FEATURES, wlog::CSUPP),
    (op::GET_FEATURES, wlog::CSUPP),
    (op::ASYNC_EVENT_REQUEST, wlog::CSUPP),
    (op::KEEP_ALIVE, wlog::CSUPP),
];

/// Largest log page transfer we build in one command.
const MAX_LOG_LEN: u64 = 4 << 20;
/// The extended (128-bit) Host Identifier, the only one Fabrics has.
const HOSTID_LEN: usize = 16;
/// Get Features Host Identifier CDW11 bit 0: Enable Extended Host Identifier.
const EXHID: u32 = 1;

fn is_discovery<C: Default>(q: &NvmeQueue<C>) -> bool {
    q.ctrl.as_ref().is_some_and(|c| c.is_discovery())
}

/// Parses an admin command once: which it is and what data it moves.
pub(crate) fn classify<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
) -> Result<(Xfer, AdminCmd), Status> {
    let disc = is_discovery(q);
    Ok(match sqe.opcode {
        op::IDENTIFY => (Xfer::C2H(IDENTIFY_LEN as u32), AdminCmd::Identify),
        op::GET_LOG_PAGE => {
            let g = GetLogPage::from_sqe(sqe);
            if g.len > MAX_LOG_LEN {
                return Err(Status::INVALID_FIELD.dnr());
            }
            (Xfer::C2H(g.len as u32), AdminCmd::GetLogPage)
        }
        // Get Features Host Identifier returns the 128-bit HOSTID as data.
        // (SEL 011b, the capabilities, has no data.)
        op::GET_FEATURES
            if !disc && sqe.cdw10 as u8 == fid::HOST_IDENTIFIER && (sqe.cdw10 >> 8) & 7 != 3 =>
        {
            (Xfer::C2H(HOSTID_LEN as u32), AdminCmd::GetFeatures)
        }
        op::GET_FEATURES => (Xfer::None, AdminCmd::GetFeatures),
        op::SET_FEATURES => (Xfer::None, AdminCmd::SetFeatures),
        op::KEEP_ALIVE => (Xfer::None, AdminCmd::KeepAlive),
        op::ASYNC_EVENT_REQUEST => (Xfer::None, AdminCmd::AsyncEventRequest),
        op::ABORT if !disc => (Xfer::None, AdminCmd::Abort),
        _ => return Err(Status::INVALID_OPCODE.dnr()),
    })
}

/// Runs an admin command `classify` parsed.
pub(crate) fn execute<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: AdminCmd) -> Outcome {
    let sqe = q.slots[idx].sqe;
    let Some(ctrl) = q.ctrl.clone() else {
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
    };
    match cmd {
        AdminCmd::Identify => identify_cmd(q, idx, &ctrl, &sqe),
        AdminCmd::GetLogPage => get_log_page(q, idx, &ctrl, &sqe),
        AdminCmd::SetFeatures => set_features(q, &ctrl, &sqe),
        AdminCmd::GetFeatures => get_features(q, idx, &ctrl, &sqe),
        AdminCmd::KeepAlive => {
            q.note_keep_alive();
            Outcome::Done(Status::SUCCESS, 0)
        }
        AdminCmd::AsyncEventRequest => {
            if q.slots.aers.len() >= AER_LIMIT {
                return Outcome::Done(Status::AER_LIMIT_EXCEEDED, 0);
            }
            Outcome::Parked
        }
        AdminCmd::Abort => {
            // A minimal Abort (Base §5.1): commands in flight are not aborted;
            // DW0 bit 0 = 1 says so, and the host lets them finish.
            Outcome::Done(Status::SUCCESS, 1)
        }
    }
}

fn identify_cmd<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ctrl: &Controller,
    sqe: &Sqe,
) -> Outcome {
    let cns_v = sqe.cdw10 as u8;
    let csi = (sqe.cdw11 >> 24) as u8;
    let disc = ctrl.is_discovery();
    if disc && cns_v != cns::CONTROLLER {
        return Outcome::Done(Status::INVALID_FIELD.dnr(), 0);
    }
    let nsid = sqe.nsid;
    let ns = q.namespace_index(nsid).and_then(|i| q.ns.get(i)).cloned();
    let st = match cns_v {
        cns::CONTROLLER => {
            let c = identify::controller(q, ctrl);
            c.encode(q.reply_buf(idx, IDENTIFY_LEN));
            Status::SUCCESS
        }
        cns::NAMESPACE => match ns {
            Some(ns) => {
                identify::namespace(&ns, ctrl).encode(q.reply_buf(idx, IDENTIFY_LEN));
                Status::SUCCESS
            }
            // Base §5.17.2.1: an inactive but valid NSID returns zeroes.
            None if nsid != 0 && nsid != u32::MAX => {
                q.reply_buf(idx, IDENTIFY_LEN);
                Status::SUCCESS
            }
            None => Status::INVALID_NAMESPACE.dnr(),
        },
        cns::ACTIVE_NS_LIST | cns::CSI_ACTIVE_NS_LIST => {
            if nsid >= 0xFFFF_FFFE {
                // Base §5.17 (CNS 02h, 07h): NSID FFFFFFFEh and FFFFFFFFh are invalid
                // here: Invalid Namespace or Format, as Linux nvmet answers
                // (was Invalid Field, the same refusal with another status).
                Status::INVALID_NAMESPACE.dnr()
            } else if cns_v == cns::CSI_ACTIVE_NS_LIST && csi != 0 {
                Status::INVALID_FIELD.dnr()
            } else {
                let ids: Vec<u32> = q.ns.nsids().collect();
                farflash_wire::identify::encode_active_ns_list(
                    q.reply_buf(idx, IDENTIFY_LEN),
                    ids.into_iter(),
                    nsid,
                );
                Status::SUCCESS
            }
        }
        cns::NS_ID_DESCRIPTORS => match ns {
            Some(ns) => {
                farflash_wire::identify::encode_ns_descriptors(
                    q.reply_buf(idx, IDENTIFY_LEN),
                    &ns.nguid,
                    &ns.uuid,
                );
                Status::SUCCESS
            }
            None => Status::INVALID_NAMESPACE.dnr(),
        },
        // I/O Command Set specific structures for the NVM command set (CSI 0):
        // no limits beyond the common ones, so all fields are zero.
        cns::CSI_CONTROLLER if csi == 0 => {
            q.reply_buf(idx, IDENTIFY_LEN);
            Status::SUCCESS
        }
        cns::CSI_NAMESPACE if csi == 0 => match ns {
            Some(_) => {
                q.reply_buf(idx, IDENTIFY_LEN);
                Status::SUCCESS
            }
            None => Status::INVALID_NAMESPACE.dnr(),
        },
        _ => Status::INVALID_FIELD.dnr(),
    };
    Outcome::Done(st, 0)
}

/// What the SMART log counts: the whole subsystem (NSID 0h or FFFFFFFFh),
/// or one namespace (LPA bit 0), from the per-namespace counters of every
/// queue. Media errors are counted per queue, not per namespace: the
/// controller-wide count is reported either way.
fn smart_totals<C: Default>(
    q: &NvmeQueue<C>,
    ctrl: &Controller,
    nsid: u32,
) -> Result<Totals, Status> {
    let Some(sub) = ctrl.subsystem() else {
        return Ok(Totals::default());
    };
    let mut t = sub.stats.totals();
    if nsid == 0 || nsid == u32::MAX {
        return Ok(t);
    }
    if q.namespace_index(nsid).is_none() {
        // Base §5.16: an NSID that is not active.
        return Err(Status::INVALID_NAMESPACE.dnr());
    }
    let slot = crate::stats::ns_slot(nsid).ok_or(Status::INVALID_FIELD.dnr())?;
    let mut n = [0u64; 4];
    for h in sub.stats.by_host().values() {
        for (a, b) in n.iter_mut().zip(h.ns[slot]) {
            *a += b;
        }
    }
    (t.read_cmds, t.write_cmds, t.read_bytes, t.write_bytes) = (n[0], n[1], n[2], n[3]);
    Ok(t)
}

fn get_log_page<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ctrl: &Controller,
    sqe: &Sqe,
) -> Outcome {
    let g = GetLogPage::from_sqe(sqe);
    let disc = ctrl.is_discovery();
    let page: Vec<u8> = match g.lid {
        // Shared, one build per generation (`discovery::log_page`).
        log_id::DISCOVERY if disc => {
            let page = discovery::log_page(q, ctrl);
            return copy_log(q, idx, &g, &page);
        }
        log_id::ERROR => {
            let st = ctrl.lock();
            let mut v = vec![0u8; ERROR_ENTRY_LEN * crate::controller::ERROR_LOG_ENTRIES];
            for (i, e) in st.errors.iter().enumerate() {
                e.encode(&mut v[i * ERROR_ENTRY_LEN..]);
            }
            v
        }
        log_id::SMART if !disc => {
            let t = match smart_totals(q, ctrl, sqe.nsid) {
                Ok(t) => t,
                Err(st) => return Outcome::Done(st, 0),
            };
            let errors = ctrl.lock().error_count;
            // Base §5.16.1.3: farflash has no temperature sensor and no
            // spare capacity; Composite Temperature, Available Spare and
            // its threshold are 0, as Linux nvmet reports them (no
            // critical warning: a spare of 0% is not below a threshold of
            // 0%). Was: 35 °C and 100% invented.
            let smart = Smart {
                data_units_read: Smart::data_units(t.read_bytes),
                data_units_written: Smart::data_units(t.write_bytes),
                host_read_commands: t.read_cmds as u128,
                host_write_commands: t.write_cmds as u128,
                power_cycles: 1,
                power_on_hours: q.life.clock.map_or(0, |c| {
                    c.saturating_duration_since(q.target.started(c)).as_secs() / 3600
                }) as u128,
                media_errors: t.media_errors as u128,
                error_log_entries: errors as u128,
                ..Smart::default()
            };
            let mut v = vec![0u8; wlog::SMART_LEN];
            smart.encode(&mut v);
            v
        }
        // Base §5.16.1.6 (LPA bit 1): the commands an I/O controller runs,
        // for the NVM Command Set (CSI 00h, CDW14 bits 31:24); Linux nvmet
        // and SPDK return it too. Was: Invalid Log Page.
        log_id::COMMANDS_SUPPORTED if !disc => {
            if sqe.cdw14 >> 24 != 0 {
                return Outcome::Done(Status::INVALID_LOG_PAGE.dnr(), 0);
            }
            let mut v = vec![0u8; wlog::CMD_EFFECTS_LEN];
            wlog::encode_cmd_effects(&mut v, &ADMIN_EFFECTS, &crate::io::EFFECTS);
            v
        }
        log_id::FIRMWARE_SLOT if !disc => {
            let mut v = vec![0u8; wlog::FW_SLOT_LEN];
            wlog::encode_fw_slot(&mut v, identify::FIRMWARE_REVISION);
            v
        }
        log_id::CHANGED_NS_LIST if !disc => {
            let mut st = ctrl.lock();
            let mut v = vec![0u8; wlog::CHANGED_NS_LEN];
            if st.changed_ns.len() > crate::target::CHANGED_NS_MAX {
                // Base §5.16.1.5: more than 1024 changes → first entry FFFFFFFFh.
                v[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            } else {
                for (i, id) in st.changed_ns.iter().enumerate() {
                    v[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
                }
            }
            st.changed_ns.clear();
            v
        }
        log_id::RESERVATION_NOTIFICATION if !disc => {
            // Base §5.16.1.25: one page per read, the oldest; zeroes when none.
            let mut st = ctrl.lock();
            let mut v = vec![0u8; farflash_wire::resv::NOTICE_LOG_LEN];
            if let Some((n, kind, nsid)) = st.resv_log.pop_front() {
                let left = st.resv_log.len().min(255) as u8;
                farflash_wire::resv::encode_notice(&mut v, n, kind, left, nsid);
            }
            v
        }
        log_id::ANA if !disc => {
            let Some(sub) = ctrl.subsystem() else {
                return Outcome::Done(Status::INVALID_LOG_PAGE.dnr(), 0);
            };
            // Base §5.16.1.12: LSP bit 0 (RGO) asks for the groups only.
            let rgo = g.lsp & wlog_ana::LSP_RGO != 0;
            let chgcnt = sub.ana_chgcnt();
            let list = sub.namespaces();
            let groups = crate::ana::log_groups(
                &sub.ana(),
                list.iter().map(|n| (n.nsid, n.anagrpid)),
                crate::listen::ListenTransport::from_trtype(q.via.trtype),
                &q.via.local,
                chgcnt,
            );
            let mut v = vec![0u8; wlog_ana::ana_log_len(&groups, rgo)];
            wlog_ana::encode_ana_log(&mut v, chgcnt, &groups, rgo);
            v
        }
        _ => return Outcome::Done(Status::INVALID_LOG_PAGE.dnr(), 0),
    };
    copy_log(q, idx, &g, &page)
}

/// Answers a Get Log Page with the `g.len` bytes of `page` from `g.offset`
/// (LPOL/LPOU; zeroes past the end): a host reads a large log in pieces.
fn copy_log<C: Default>(q: &mut NvmeQueue<C>, idx: usize, g: &GetLogPage, page: &[u8]) -> Outcome {
    if !g.offset.is_multiple_of(4) || g.offset > page.len() as u64 {
        // Base §5.16: an offset beyond the log page is an invalid field.
        return Outcome::Done(Status::INVALID_FIELD.dnr(), 0);
    }
    let start = g.offset as usize;
    let n = (page.len() - start).min(g.len as usize);
    let out = q.reply_buf(idx, g.len as usize);
    out[..n].copy_from_slice(&page[start..start + n]);
    Outcome::Done(Status::SUCCESS, 0)
}

fn set_features<C: Default>(q: &mut NvmeQueue<C>, ctrl: &Controller, sqe: &Sqe) -> Outcome {
    let f = sqe.cdw10 as u8;
    if sqe.cdw10 & (1 << 31) != 0 {
        // SV: nothing here is saved across power cycles.
        return Outcome::Done(Status::FEATURE_NOT_SAVEABLE.dnr(), 0);
    }
    let disc = ctrl.is_discovery();
    let mut st = ctrl.lock();
    match f {
        fid::NUMBER_OF_QUEUES if !disc => {
            let (nsqr, ncqr) = (sqe.cdw11 & 0xFFFF, sqe.cdw11 >> 16);
            if nsqr == 0xFFFF || ncqr == 0xFFFF {
                return Outcome::Done(Status::INVALID_FIELD.dnr(), 0);
            }
            let max = q.target.transport.max_io_queues;
            let granted = (nsqr.max(ncqr) + 1).min(max);
            st.io_queues_granted = granted as u16;
            st.io_queues_set = true;
            let v = granted - 1;
            Outcome::Done(Status::SUCCESS, (v | v << 16).into())
        }
        fid::KEEP_ALIVE_TIMER => {
            st.kato_ms = sqe.cdw11;
            q.note_keep_alive();
            Outcome::Done(Status::SUCCESS, 0)
        }
        fid::ASYNC_EVENT_CONFIG => {
            let supported = if disc {
                OAES_DISCOVERY_CHANGE
            } else {
                OAES_NS_ATTR | OAES_ANA_CHANGE
            };
            st.aec = sqe.cdw11 & (supported | 0xFF);
            Outcome::Done(Status::SUCCESS, 0)
        }
        // Base §5.27.1.4: the feature exists only when Identify Controller
        // VWC bit 0 is set; otherwise Invalid Field, as Linux nvmet answers.
        // Off: writes go through (`io.rs`). Was: accepted with VWC 0.
        fid::VOLATILE_WRITE_CACHE
            if !disc
                && ctrl
                    .subsystem()
                    .is_some_and(|s| identify::volatile_write_cache(s)) =>
        {
            ctrl.set_write_cache(&mut st, sqe.cdw11 & 1 != 0);
            Outcome::Done(Status::SUCCESS, 0)
        }
        fid::VOLATILE_WRITE_CACHE => Outcome::Done(Status::INVALID_FIELD.dnr(), 0),
        fid::RESERVATION_NOTIFICATION_MASK if !disc => {
            // One mask for every namespace of the controller (docs/ha.md).
            st.resv_mask = sqe.cdw11 & 0b1110;
            Outcome::Done(Status::SUCCESS, 0)
        }
        fid::ARBITRATION
        | fid::POWER_MANAGEMENT
        | fid::TEMPERATURE_THRESHOLD
        | fid::ERROR_RECOVERY
        | fid::INTERRUPT_COALESCING
        | fid::WRITE_ATOMICITY
            if !disc =>
        {
            Outcome::Done(Status::FEATURE_NOT_CHANGEABLE.dnr(), 0)
        }
        // Base §5.27: on Fabrics the Host Identifier comes with Connect; a
        // Set Features of it is a Command Sequence Error (as Linux nvmet).
        fid::HOST_IDENTIFIER if !disc => Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0),
        _ => Outcome::Done(Status::INVALID_FIELD.dnr(), 0),
    }
}

fn get_features<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ctrl: &Controller,
    sqe: &Sqe,
) -> Outcome {
    let f = sqe.cdw10 as u8;
    let sel = (sqe.cdw10 >> 8) & 7;
    let disc = ctrl.is_discovery();
    if sel == 3 {
        // Supported capabilities: changeable where Set Features accepts it
        // (a discovery controller: Keep Alive and AEC only; Volatile Write
        // Cache only where Identify reports one, §5.27.1.4).
        let changeable = match f {
            fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG => true,
            fid::NUMBER_OF_QUEUES | fid::RESERVATION_NOTIFICATION_MASK => !disc,
            fid::VOLATILE_WRITE_CACHE => {
                !disc
                    && ctrl
                        .subsystem()
                        .is_some_and(|s| identify::volatile_write_cache(s))
            }
            _ => false,
        };
        return Outcome::Done(Status::SUCCESS, u64::from(changeable) << 2);
    }
    if f == fid::HOST_IDENTIFIER && !disc {
        // Base §5.27: Fabrics host identifiers are 128-bit: EXHID must be set
        // (Linux nvmet and SPDK answer the same way).
        if sqe.cdw11 & EXHID == 0 {
            return Outcome::Done(Status::INVALID_FIELD.dnr(), 0);
        }
        let hostid = ctrl.hostid;
        q.reply_buf(idx, HOSTID_LEN).copy_from_slice(&hostid);
        return Outcome::Done(Status::SUCCESS, 0);
    }
    let st = ctrl.lock();
    let v = match f {
        fid::NUMBER_OF_QUEUES if !disc => {
            let n = if st.io_queues_set {
                st.io_queues_granted as u32
            } else {
                q.target.transport.max_io_queues
            } - 1;
            n | n << 16
        }
        fid::KEEP_ALIVE_TIMER => st.kato_ms,
        fid::ASYNC_EVENT_CONFIG => st.aec,
        fid::VOLATILE_WRITE_CACHE if !disc => st.vwc_enabled as u32,
        fid::RESERVATION_NOTIFICATION_MASK if !disc => st.resv_mask,
        // Reservation Persistence: the namespace's PTPL state (CPTPL sets it).
        fid::RESERVATION_PERSISTENCE if !disc => match q.namespace_index(sqe.nsid) {
            Some(k) => q.ns.get(k).is_some_and(|n| n.resv.lock().r.ptpl) as u32,
            None => return Outcome::Done(Status::INVALID_NAMESPACE.dnr(), 0),
        },
        fid::ARBITRATION
        | fid::POWER_MANAGEMENT
        | fid::ERROR_RECOVERY
        | fid::INTERRUPT_COALESCING
        | fid::WRITE_ATOMICITY
            if !disc =>
        {
            0
        }
        // Over-temperature threshold: 80 °C in kelvins.
        fid::TEMPERATURE_THRESHOLD if !disc => 273 + 80,
        _ => return Outcome::Done(Status::INVALID_FIELD.dnr(), 0),
    };
    Outcome::Done(Status::SUCCESS, v.into())
}
