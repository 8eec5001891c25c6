//! `command_decode`: a 64-byte SQE plus data through every command-level
//! decoder: SQE/CQE round trips, the fabrics overlays (Connect, Property
//! Get/Set), Get Log Page, Connect data, and the data structures a host
//! decodes from a (possibly hostile) controller: Identify, log pages,
//! discovery log, the ANA log page and the Reservation Status data
//! structure; and the PTPL file a restarted target reads (docs/ha.md).
//!
//! Input: `[sel][sqe: 64][data...]`. With `sel` bit 0 set, byte 0 of the
//! SQE is mapped onto a known admin (bit 1 clear) or I/O opcode, and a
//! fabrics command's FCTYPE onto a known one, so every opcode is reached.

use crate::input::Input;
use crate::opcodes;
use farflash_core::resv::ptpl;
use farflash_host::discovery::read_log;
use farflash_host::logs::SmartLog;
use farflash_host::ControllerInfo;
use farflash_wire::ana::{ana_log_len, decode_ana_log, encode_ana_log};
use farflash_wire::discovery::{decode_header, DiscEntry, DISC_ENTRY_LEN};
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CONNECT_DATA_LEN};
use farflash_wire::identify::{decode_ns_descriptors, IdCtrl, IdNs, IDENTIFY_LEN};
use farflash_wire::log::GetLogPage;
use farflash_wire::opcode::{admin, fctype};
use farflash_wire::resv::ResvStatus;
use farflash_wire::sqe::SQE_SIZE;
use farflash_wire::{Cqe, Sqe};

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let sel = inp.u8();
    let mut raw: [u8; SQE_SIZE] = inp.array();
    let payload = inp.rest();
    if sel & 1 != 0 {
        raw[0] = opcodes::pick(raw[0], sel & 2 != 0);
        if raw[0] == admin::FABRICS {
            raw[4] = opcodes::pick_fctype(raw[4]);
        }
    }
    let sqe = sqe_round_trip(&raw);
    cqe_round_trip(&raw);
    overlays(&sqe, sel);
    connect_data(payload);
    host_side(&raw, payload);
}

fn sqe_round_trip(raw: &[u8; SQE_SIZE]) -> Sqe {
    let sqe = Sqe::decode(raw);
    let mut b = [0u8; SQE_SIZE];
    sqe.encode(&mut b);
    assert_eq!(Sqe::decode(&b), sqe);
    // Only the DPTR's reserved bytes 12..15 are not carried.
    let mut want = *raw;
    want[36..39].fill(0);
    assert_eq!(b, want);
    let _ = (sqe.slba(), sqe.nlb(), sqe.fua(), sqe.fctype());
    sqe
}

fn cqe_round_trip(raw: &[u8; SQE_SIZE]) {
    let mut c = [0u8; 16];
    c.copy_from_slice(&raw[..16]);
    let cqe = Cqe::decode(&c);
    let mut b = [0u8; 16];
    cqe.encode(&mut b);
    assert_eq!(Cqe::decode(&b), cqe);
    // The phase tag (bit 0 of byte 14) is not part of the status.
    c[14] &= !1;
    assert_eq!(b, c);
    let s = cqe.status;
    assert_eq!(s.dnr().code(), s.code());
    assert!(!format!("{s}").is_empty());
    let _ = (s.sc(), s.sct(), s.is_success(), s.is_dnr(), s.name());
}

/// Command-specific views of the SQE re-encode to the same fields.
fn overlays(sqe: &Sqe, sel: u8) {
    match (sqe.opcode, sqe.fctype()) {
        (admin::FABRICS, fctype::CONNECT) => {
            let c = ConnectCmd::from_sqe(sqe);
            assert_eq!(ConnectCmd::from_sqe(&c.to_sqe(sqe.cid)), c);
        }
        (admin::FABRICS, f @ (fctype::PROPERTY_GET | fctype::PROPERTY_SET)) => {
            let p = PropertyCmd::from_sqe(sqe);
            let s = p.to_sqe(sqe.cid, f);
            assert_eq!(PropertyCmd::from_sqe(&s), p);
            assert_eq!(s.fctype(), f);
        }
        (admin::GET_LOG_PAGE, _) => {
            let g = GetLogPage::from_sqe(sqe);
            assert!(g.len >= 4 && g.len.is_multiple_of(4) && g.len <= 1 << 34);
            let mut s = Sqe::default();
            g.fill_sqe(&mut s);
            assert_eq!(GetLogPage::from_sqe(&s), g);
        }
        _ => {}
    }
    let _ = sel;
}

/// Connect data: decode, and decoding what was re-encoded is stable.
fn connect_data(payload: &[u8]) {
    let Some(d) = ConnectData::decode(payload) else {
        return;
    };
    assert!(payload.len() >= CONNECT_DATA_LEN);
    assert!(d.subnqn.len() < 256 && d.hostnqn.len() < 256);
    let mut b = [0u8; CONNECT_DATA_LEN];
    d.encode(&mut b);
    assert_eq!(ConnectData::decode(&b), Some(d));
}

/// What a host decodes from controller data: stable across re-encoding.
fn host_side(raw: &[u8; SQE_SIZE], payload: &[u8]) {
    let mut page = vec![0u8; IDENTIFY_LEN];
    let n = payload.len().min(IDENTIFY_LEN);
    page[..n].copy_from_slice(&payload[..n]);

    let id = IdCtrl::decode(&page);
    let mut b = vec![0u8; IDENTIFY_LEN];
    id.encode(&mut b);
    assert_eq!(IdCtrl::decode(&b), id);
    let ns = IdNs::decode(&page);
    ns.encode(&mut b);
    assert_eq!(IdNs::decode(&b), ns);

    let descs = decode_ns_descriptors(payload);
    let used: usize = descs.iter().map(|(_, v)| 4 + v.len()).sum();
    assert!(used <= payload.len());

    let e = DiscEntry::decode(&page[..DISC_ENTRY_LEN]);
    e.encode(&mut b);
    assert_eq!(DiscEntry::decode(&b[..DISC_ENTRY_LEN]), e);
    let _ = decode_header(&page);
    // ANA log page and extended Reservation Status: what decodes
    // re-encodes to something that decodes equal.
    if let Some((cnt, groups)) = decode_ana_log(payload) {
        let mut b = vec![0u8; ana_log_len(&groups, false)];
        encode_ana_log(&mut b, cnt, &groups, false);
        assert_eq!(decode_ana_log(&b), Some((cnt, groups)));
    }
    if let Some(st) = ResvStatus::decode_ext(payload) {
        let mut b = vec![0u8; st.len(true)];
        st.encode(&mut b, true);
        assert_eq!(ResvStatus::decode_ext(&b), Some(st));
    }
    // A PTPL file (hostile like any file): refused with a reason, or a
    // state that round-trips.
    if let Ok(r) = ptpl::decode(payload) {
        assert_eq!(ptpl::decode(&ptpl::encode(&r)), Ok(r));
    }
    if let Some(s) = SmartLog::decode(payload) {
        assert_eq!(s.temperature, u16::from_le_bytes([payload[1], payload[2]]));
    }
    // The discovery log reader bounds NUMREC and never reads past the data.
    let _ = read_log(|len, off| {
        let start = (off as usize).min(payload.len());
        let end = start.saturating_add(len as usize).min(payload.len());
        Ok(payload[start..end].to_vec())
    });
    let info = ControllerInfo {
        cntlid: id.cntlid,
        cap: u64::from_le_bytes(raw[8..16].try_into().unwrap_or_default()),
        vs: id.ver,
        id,
        io_queues: 0,
        maxh2cdata: 4096,
    };
    let _ = (
        info.ready_timeout(),
        info.page_size(),
        info.max_queue_depth(),
    );
    let _ = (info.max_transfer(), info.icd_max(), info.is_discovery());
}

#[cfg(test)]
mod tests {
    #[test]
    fn smoke() {
        super::run(&[]);
        for sel in 0..=255u8 {
            let mut v = vec![sel; 1200];
            v[1] = sel / 3;
            super::run(&v);
        }
    }

    /// The HA seeds reach the decoders they are for (a valid structure
    /// after the selector byte and the SQE).
    #[test]
    fn ha_seeds_decode() {
        let ana = include_bytes!("../corpus/command_decode/ana-log");
        let (cnt, g) = super::decode_ana_log(&ana[65..]).expect("ANA log seed");
        assert_eq!((cnt, g.len(), g[0].nsids.len()), (7, 2, 2));
        let rs = include_bytes!("../corpus/command_decode/resv-report-ext");
        let st = super::ResvStatus::decode_ext(&rs[65..]).expect("report seed");
        assert_eq!((st.rtype, st.regctls.len()), (1, 2));
        let f = include_bytes!("../corpus/command_decode/ptpl-file");
        let r = super::ptpl::decode(&f[65..]).expect("PTPL seed");
        assert_eq!((r.registrants.len(), r.ptpl), (2, true));
        for seed in [&ana[..], &rs[..], &f[..]] {
            super::run(seed);
        }
    }
}
