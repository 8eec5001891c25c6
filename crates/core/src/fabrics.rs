//! Fabrics commands (Fabrics §6): Connect, Property Get/Set, Disconnect,
//! Authentication Send/Receive (`auth.rs`).

use crate::command::{FabricsCmd, Outcome, Xfer};
use crate::controller::Kind;
use crate::queue::NvmeQueue;
use farflash_wire::fabrics::{
    connect_data_off as doff, connect_invalid_param_dw0, connect_sqe_off as soff, ConnectCmd,
    ConnectData, PropertyCmd, CATTR_DISABLE_SQ_FLOW_CONTROL, CNTLID_DYNAMIC, CONNECT_DATA_LEN,
};
use farflash_wire::opcode::fctype;
use farflash_wire::props::{self, cc, csts};
use farflash_wire::{Sqe, Status, DISCOVERY_NQN};
use std::sync::Arc;

/// Admin queue entries we accept (Linux asks for 32, SPDK's minimum is 32).
const MAX_ADMIN_QUEUE_DEPTH: u32 = 128;
/// CAP.TO: 500 ms units the host may wait for CSTS.RDY (we are ready at once).
const CAP_TIMEOUT: u8 = 20;

/// Parses a Fabrics command once: which it is and what data it moves.
pub(crate) fn classify<C: Default>(
    q: &NvmeQueue<C>,
    sqe: &Sqe,
) -> Result<(Xfer, FabricsCmd), Status> {
    let cmd = match sqe.fctype() {
        fctype::CONNECT => FabricsCmd::Connect,
        fctype::PROPERTY_GET => FabricsCmd::PropertyGet,
        fctype::PROPERTY_SET => FabricsCmd::PropertySet,
        fctype::DISCONNECT => FabricsCmd::Disconnect,
        fctype::AUTH_SEND => FabricsCmd::AuthSend,
        fctype::AUTH_RECEIVE => FabricsCmd::AuthReceive,
        _ => return Err(Status::INVALID_OPCODE.dnr()),
    };
    Ok((xfer(q, sqe, cmd)?, cmd))
}

/// What data the Fabrics command moves, after checking it can run here.
fn xfer<C: Default>(q: &NvmeQueue<C>, sqe: &Sqe, cmd: FabricsCmd) -> Result<Xfer, Status> {
    use FabricsCmd::*;
    match cmd {
        // A queue connects once (Base §6.3); the spec names no status for
        // a Connect on a connected queue, so as Linux nvmet
        // (`nvmet_parse_fabrics_admin_cmd`, `nvmet_parse_fabrics_io_cmd`)
        // and SPDK (`nvmf_ctrlr_process_fabrics_cmd`) answer, and SPDK's
        // bdevio expects of opcode 7Fh on an I/O queue: Invalid Command
        // Opcode, before any data moves. Was: Command Sequence Error once
        // the 1024 bytes of data came, Data SGL Length Invalid without
        // them (docs/interop.md, issue 43).
        Connect if q.ctrl.is_some() => Err(Status::INVALID_OPCODE.dnr()),
        Connect => Ok(Xfer::H2C(CONNECT_DATA_LEN as u32)),
        PropertyGet | PropertySet if q.ctrl.is_none() => Err(Status::COMMAND_SEQUENCE_ERROR.dnr()),
        // Property Get/Set only on the admin queue (Fabrics §6.5, §6.6).
        PropertyGet | PropertySet if q.qid != 0 => Err(Status::INVALID_OPCODE.dnr()),
        PropertyGet | PropertySet => Ok(Xfer::None),
        Disconnect if q.ctrl.is_none() => Err(Status::COMMAND_SEQUENCE_ERROR.dnr()),
        // Base §6.4: a Disconnect names an I/O queue; on the Admin Queue it
        // fails with Invalid Queue Type (Linux nvmet and SPDK do not
        // implement Disconnect: Invalid Opcode). Was: the association ended.
        Disconnect if q.qid == 0 => Err(Status::INVALID_QUEUE_TYPE.dnr()),
        Disconnect => Ok(Xfer::None),
        AuthSend | AuthReceive => crate::auth::classify(q, sqe),
    }
}

/// Runs a Fabrics command `classify` parsed.
pub(crate) fn execute<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: FabricsCmd) -> Outcome {
    let sqe = q.slots[idx].sqe;
    match cmd {
        FabricsCmd::Connect => connect(q, idx, &sqe),
        FabricsCmd::PropertyGet => property_get(q, &sqe),
        FabricsCmd::PropertySet => property_set(q, idx, &sqe),
        FabricsCmd::Disconnect => {
            // Base §6.4: the I/O queue is deleted after the response.
            q.close();
            Outcome::Done(Status::SUCCESS, 0)
        }
        FabricsCmd::AuthSend => crate::auth::send(q, idx),
        FabricsCmd::AuthReceive => crate::auth::receive(q, idx),
    }
}

fn invalid(in_data: bool, offset: u16) -> Outcome {
    Outcome::Done(
        Status::CONNECT_INVALID_PARAMETERS.dnr(),
        connect_invalid_param_dw0(in_data, offset).into(),
    )
}

/// Connect (Fabrics §6.3): creates a controller (admin queue, CNTLID FFFFh)
/// or binds an I/O queue to one.
fn connect<C: Default>(q: &mut NvmeQueue<C>, idx: usize, sqe: &Sqe) -> Outcome {
    if q.ctrl.is_some() {
        // A queue connects once.
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
    }
    let c = ConnectCmd::from_sqe(sqe);
    if c.recfmt != 0 {
        return Outcome::Done(Status::CONNECT_INCOMPATIBLE_FORMAT.dnr(), 0);
    }
    let data = match q.slots[idx].buf.as_ref() {
        Some(b) => ConnectData::decode_or_field(b.as_slice()),
        None => Err(doff::SUBNQN),
    };
    let data = match data {
        Ok(d) => d,
        // Base §4.7: an NQN is UTF-8 and NUL-terminated within its field;
        // IPO names the one at fault (was: always SUBNQN).
        Err(off) => return invalid(true, off),
    };
    if let Some(refused) = tls_identity_refusal(q, &data) {
        return refused;
    }
    let t = q.target.clone();
    let discovery = data.subnqn == DISCOVERY_NQN;
    let sub = if discovery {
        None
    } else {
        t.subsystem(&data.subnqn)
    };
    if !discovery && sub.is_none() {
        tracing::info!(peer = %q.via.peer, subnqn = %data.subnqn, "connect to an unknown subsystem");
        return invalid(true, doff::SUBNQN);
    }
    if let Some(s) = &sub {
        if !s.host_allowed(&data.hostnqn) {
            tracing::info!(peer = %q.via.peer, hostnqn = %data.hostnqn, subnqn = %s.nqn, "connect refused: host not allowed");
            return Outcome::Done(Status::CONNECT_INVALID_HOST.dnr(), 0);
        }
    }
    if c.sqsize == 0 {
        // Fabrics §6.3: SQSIZE is 0's based and at least 1.
        return invalid(false, soff::SQSIZE);
    }
    if c.qid == 0 {
        connect_admin(q, &c, &data, sub)
    } else {
        connect_io(q, &c, &data, discovery)
    }
}

/// The host and subsystem of a Connect over TLS against the PSK identity
/// the secure channel was set up with: the refusal, if they differ.
fn tls_identity_refusal<C: Default>(q: &NvmeQueue<C>, data: &ConnectData) -> Option<Outcome> {
    let id = q.via.tls.as_ref()?;
    // TCP §3.6.1.3: the PSK identity names the host and the subsystem
    // the secure channel was set up for; the association is bound to
    // them (a key of one host does not admit another host's Connect).
    if id.0 != data.hostnqn {
        tracing::warn!(peer = %q.via.peer, hostnqn = %data.hostnqn, tls_hostnqn = %id.0, "connect refused: not the host of the TLS PSK identity");
        return Some(Outcome::Done(Status::CONNECT_INVALID_HOST.dnr(), 0));
    }
    if id.1 != data.subnqn {
        tracing::warn!(peer = %q.via.peer, subnqn = %data.subnqn, tls_subnqn = %id.1, "connect refused: not the subsystem of the TLS PSK identity");
        return Some(invalid(true, doff::SUBNQN));
    }
    None
}

/// An admin queue's Connect: a new controller (CNTLID FFFFh asked).
fn connect_admin<C: Default>(
    q: &mut NvmeQueue<C>,
    c: &ConnectCmd,
    data: &ConnectData,
    sub: Option<Arc<crate::subsystem::Subsystem>>,
) -> Outcome {
    let t = q.target.clone();
    let entries = c.sqsize as u32 + 1;
    let disable_flow = c.cattr & CATTR_DISABLE_SQ_FLOW_CONTROL != 0;
    if data.cntlid != CNTLID_DYNAMIC {
        return invalid(true, doff::CNTLID);
    }
    if entries > MAX_ADMIN_QUEUE_DEPTH {
        return invalid(false, soff::SQSIZE);
    }
    let kind = match sub {
        Some(s) => Kind::Io(s),
        None => Kind::Discovery,
    };
    let Some(ctrl) = t.create_controller(kind, data.hostnqn.clone(), data.hostid, c.kato) else {
        return Outcome::Done(Status::CONNECT_CONTROLLER_BUSY, 0);
    };
    // A management change may have disallowed the host or deleted the
    // subsystem since the checks above; it changes the lists before it
    // sweeps controllers, so checking again here leaves no controller
    // behind either way.
    if let Some(s) = ctrl.subsystem() {
        let current = t.subsystem(&s.nqn).is_some_and(|c| Arc::ptr_eq(&c, s));
        if !current || !s.host_allowed(&data.hostnqn) {
            t.remove_controller(&ctrl);
            return Outcome::Done(Status::CONNECT_INVALID_HOST.dnr(), 0);
        }
    }
    tracing::info!(peer = %q.via.peer, cntlid = ctrl.cntlid, subnqn = %data.subnqn, hostnqn = %data.hostnqn, kato_ms = c.kato, sq_flow_control = !disable_flow, "controller created");
    let cntlid = ctrl.cntlid as u32;
    let auth = ctrl.subsystem().and_then(|s| s.auth_for(&data.hostnqn));
    q.set_connected(ctrl, 0, c.sqsize, disable_flow);
    Outcome::Done(Status::SUCCESS, with_auth(q, auth, cntlid))
}

/// An I/O queue's Connect: it joins a live controller of the same
/// subsystem and host.
fn connect_io<C: Default>(
    q: &mut NvmeQueue<C>,
    c: &ConnectCmd,
    data: &ConnectData,
    discovery: bool,
) -> Outcome {
    let t = q.target.clone();
    let entries = c.sqsize as u32 + 1;
    let disable_flow = c.cattr & CATTR_DISABLE_SQ_FLOW_CONTROL != 0;
    let Some(ctrl) = t.controller(data.cntlid) else {
        return invalid(true, doff::CNTLID);
    };
    if ctrl.is_discovery()
        || discovery
        || ctrl.subsystem().map(|s| s.nqn.as_str()) != Some(data.subnqn.as_str())
    {
        return invalid(true, doff::CNTLID);
    }
    if ctrl.hostnqn != data.hostnqn {
        return invalid(true, doff::HOSTNQN);
    }
    // HOSTID is not compared with the admin queue's: the controller's Host
    // Identifier (reservations) stays the one the admin queue's Connect set
    // (Fabrics §6.3). Linux nvmet finds the controller by SUBNQN, HOSTNQN and
    // CNTLID only (`nvmet_ctrl_find_get`), SPDK by SUBNQN and CNTLID. Base
    // 2.1 Figure 546 (not the 2.0 we report in VS) adds: ignore 0h, abort a
    // non-zero mismatch with Connect Invalid Parameters; see docs/interop.md.
    // Was: any different HOSTID failed with Connect Invalid Parameters.
    if ctrl.hostid != data.hostid {
        t.tolerated.bump(crate::stats::Oddity::IoHostid);
        tracing::debug!(peer = %q.via.peer, cntlid = ctrl.cntlid, qid = c.qid, "I/O queue Connect with a HOSTID other than the admin queue's");
    }
    {
        let mut st = ctrl.lock();
        if st.cc & cc::EN == 0 || st.csts & csts::RDY == 0 {
            return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
        }
        // Any QID up to what the target supports: Linux nvmet checks against
        // its max_qid and SPDK against max_qpairs_per_ctrlr, which is also
        // what their Set Features Number of Queues grants, whatever was asked.
        // Base §5.27 (Number of Queues) tells the host what it was allocated, not
        // the controller to check Connect against it. Was: a QID beyond those
        // granted by Set Features Number of Queues: Connect Invalid Parameters.
        let max = t.transport.max_io_queues.min(u16::MAX as u32) as u16;
        if c.qid > max {
            return invalid(false, soff::QID);
        }
        if st.io_qids.contains(&c.qid) {
            // Base 2.1 §6.3 (Figure 546): a QID already in use is Invalid
            // Queue Identifier, SPDK's answer (Linux nvmet: Command Sequence
            // Error). Was: Connect Invalid Parameters.
            return Outcome::Done(Status::INVALID_QUEUE_IDENTIFIER.dnr(), 0);
        }
        if st.io_queues_set && c.qid > st.io_queues_granted {
            t.tolerated.bump(crate::stats::Oddity::QidBeyondGranted);
        }
        if entries > t.transport.max_queue_depth {
            return invalid(false, soff::SQSIZE);
        }
        st.io_qids.push(c.qid);
    }
    tracing::debug!(peer = %q.via.peer, cntlid = ctrl.cntlid, qid = c.qid, depth = entries, sq_flow_control = !disable_flow, "I/O queue connected");
    let cntlid = ctrl.cntlid as u32;
    let auth = ctrl.subsystem().and_then(|s| s.auth_for(&data.hostnqn));
    q.set_connected(ctrl, c.qid, c.sqsize, disable_flow);
    Outcome::Done(Status::SUCCESS, with_auth(q, auth, cntlid))
}

/// The Connect response DW0 (Fabrics §6.3): CNTLID, and AUTHREQ ATR when
/// the host has a secret here; the queue then must authenticate (every
/// queue, as Linux's `nvmet_execute_admin_connect` / `_io_connect` ask).
/// ASCR is never set: secure channel concatenation is not offered.
fn with_auth<C: Default>(
    q: &mut NvmeQueue<C>,
    auth: Option<farflash_auth::CtrlConfig>,
    cntlid: u32,
) -> u64 {
    match auth {
        Some(cfg) => {
            q.life.auth = Some(Box::new(farflash_auth::CtrlAuth::new(cfg)));
            q.life.auth_since = None;
            (cntlid | farflash_wire::auth::CONNECT_AUTHREQ_ATR).into()
        }
        None => cntlid.into(),
    }
}

/// CAP for this target (Base §3.1.3.1).
pub(crate) fn cap<C: Default>(q: &NvmeQueue<C>) -> u64 {
    let mqes = q.target.transport.max_queue_depth.min(65536) - 1;
    props::cap(mqes as u16, CAP_TIMEOUT)
}

/// Property Get (Fabrics §6.5): CAP (8 bytes), VS, CC, CSTS, CRTO (4 bytes).
fn property_get<C: Default>(q: &mut NvmeQueue<C>, sqe: &Sqe) -> Outcome {
    let p = PropertyCmd::from_sqe(sqe);
    let Some(ctrl) = q.ctrl.clone() else {
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
    };
    let st = ctrl.lock();
    let v: u64 = match (p.offset, p.size8) {
        (props::CAP, true) => cap(q),
        (props::CAP, false) => cap(q) & 0xFFFF_FFFF,
        (o, false) if o == props::CAP + 4 => cap(q) >> 32,
        (props::VS, false) => props::VERSION_2_0 as u64,
        (props::CC, false) => st.cc as u64,
        (props::CSTS, false) => st.csts as u64,
        // CRTO (Base §3.1.3.13, VS 2.0): CRWMT = CAP.TO, CRIMT 0, as SPDK
        // reports it; Linux nvmet reports it too. Was: Invalid Field.
        (props::CRTO, false) => CAP_TIMEOUT as u64,
        _ => return Outcome::Done(Status::INVALID_FIELD.dnr(), 0),
    };
    drop(st);
    // The 8-byte value spans CQE DW0 (low) and DW1 (high); a 4-byte one DW0.
    let v = if p.size8 { v } else { v & 0xFFFF_FFFF };
    Outcome::Done(Status::SUCCESS, v)
}

/// Whether CC.EN may be set with this CC.CSS (Base §3.1.3.5). CAP.CSS
/// reports the NVM Command Set only (bit 0), and it is the only I/O Command
/// Set here, so 110b ("All Supported I/O Command Sets") selects exactly what
/// 000b does. Base 2.0 gives 110b for a controller that sets CAP.CSS bit 6,
/// but tells the controller to do nothing particular with it otherwise, and
/// hosts write it: Linux nvmet accepts 000b and 110b (and reports bit 6),
/// SPDK accepts every value up to 110b whatever its CAP.CSS says.
/// Was: anything but 000b set CSTS.CFS. 111b (Admin only, CAP.CSS bit 7 not
/// set) and the reserved values still do, as in Linux nvmet.
fn css_supported(css: u32) -> bool {
    matches!(css, cc::CSS_NVM | cc::CSS_ALL_IO)
}

/// Property Set (Fabrics §6.6): only CC is writable. Enable sets CSTS.RDY at
/// once; clearing EN resets the controller; SHN emits one Flush per
/// namespace and the command completes (CSTS.SHST 01b -> 10b) when they have
/// (Base §3.6.2): no sync ever runs on the event loop.
fn property_set<C: Default>(q: &mut NvmeQueue<C>, idx: usize, sqe: &Sqe) -> Outcome {
    let p = PropertyCmd::from_sqe(sqe);
    if p.offset != props::CC || p.size8 {
        return Outcome::Done(Status::INVALID_FIELD.dnr(), 0);
    }
    let Some(ctrl) = q.ctrl.clone() else {
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
    };
    let new = p.value as u32;
    let mut flush = false;
    {
        let mut st = ctrl.lock();
        let old = st.cc;
        st.cc = new;
        if new & cc::EN != 0 && old & cc::EN == 0 {
            // Base §3.5.1: an I/O controller needs 64-byte SQEs and 16-byte CQEs.
            let bad_sizes = !ctrl.is_discovery() && (cc::iosqes(new) != 6 || cc::iocqes(new) != 4);
            // Base §3.1.3.5: CC.AMS selects only a mechanism CAP.AMS reports
            // (round robin alone here), as Linux nvmet (CSTS.CFS) and SPDK
            // refuse it. Was: any AMS enabled, and round robin ran.
            if bad_sizes || cc::mps(new) != 0 || cc::ams(new) != 0 || !css_supported(cc::css(new)) {
                st.csts |= csts::CFS;
            } else {
                st.csts = csts::RDY;
            }
        } else if new & cc::EN == 0 && old & cc::EN != 0 {
            // Controller reset: I/O queues of this association go away.
            st.csts &= !(csts::RDY | csts::SHST_MASK | csts::CFS);
            ctrl.reset_io_queues(&mut st);
        }
        if cc::shn(new) != 0 && cc::shn(old) == 0 {
            st.csts = (st.csts & !csts::SHST_MASK) | csts::SHST_OCCURRING;
            flush = true;
        }
        ctrl.set_ready(&st);
    }
    if flush {
        // Normal shutdown: make completed writes durable before reporting it.
        for pos in 0..q.ns.live_count() {
            let Some(key) = q.ns.live_key_at(pos) else {
                break;
            };
            let buf = q.pool.get(0);
            let req = farflash_backend::IoRequest {
                tag: idx as u64,
                op: farflash_backend::IoOp::Flush,
                buf,
            };
            // `submit` fails only for a namespace that is not live.
            let _ = q.submit(idx, key, req);
        }
        if q.slots[idx].state().pending() > 0 {
            return Outcome::Pending;
        }
        ctrl.shutdown_complete();
    }
    Outcome::Done(Status::SUCCESS, 0)
}

#[cfg(test)]
mod tests {
    use crate::tests::{connect_hostid, connect_to, queue, run, target, HOST, NQN};
    use farflash_wire::fabrics::{
        connect_data_off as doff, connect_invalid_param_dw0, PropertyCmd, CNTLID_DYNAMIC,
    };
    use farflash_wire::opcode::fctype;
    use farflash_wire::props::{self, cc, csts};
    use farflash_wire::Status;

    fn set_cc(q: &mut crate::NvmeQueue, cid: u16, value: u32) -> Status {
        let sqe = PropertyCmd {
            size8: false,
            offset: props::CC,
            value: value as u64,
        }
        .to_sqe(cid, fctype::PROPERTY_SET);
        run(q, sqe, &[]).status
    }

    fn get_csts(q: &mut crate::NvmeQueue, cid: u16) -> u32 {
        let sqe = PropertyCmd {
            size8: false,
            offset: props::CSTS,
            value: 0,
        }
        .to_sqe(cid, fctype::PROPERTY_GET);
        let c = run(q, sqe, &[]);
        assert_eq!(c.status, Status::SUCCESS);
        c.result as u32
    }

    /// CSTS after CC.EN = 1 with CC.CSS = `css` on a new controller.
    fn enable_with_css(css: u32) -> u32 {
        let (t, _) = target();
        let mut admin = queue(&t);
        let c = connect_to(&mut admin, NQN, HOST, 0, CNTLID_DYNAMIC);
        assert_eq!(c.status, Status::SUCCESS);
        assert_eq!(
            set_cc(&mut admin, 2, cc::ENABLE_DEFAULT | css << 4),
            Status::SUCCESS
        );
        get_csts(&mut admin, 3)
    }

    #[test]
    fn cc_css_all_io_command_sets_enables_the_controller() {
        // Base §3.1.3.5: 110b selects every supported I/O Command Set; here
        // that is the NVM Command Set, as 000b (Linux nvmet and SPDK agree).
        assert_eq!(enable_with_css(cc::CSS_NVM), csts::RDY);
        assert_eq!(enable_with_css(cc::CSS_ALL_IO), csts::RDY);
        // 111b needs CAP.CSS bit 7, which is not set; 001b-101b are reserved.
        assert_eq!(enable_with_css(cc::CSS_ADMIN_ONLY) & csts::CFS, csts::CFS);
        for css in 1..=5 {
            assert_eq!(enable_with_css(css) & csts::CFS, csts::CFS, "CSS {css}");
        }
    }

    #[test]
    fn io_queue_connect_beyond_the_queues_granted_up_to_the_maximum() {
        use crate::stats::Oddity;
        use farflash_wire::opcode::{admin, feature};
        let (t, _) = target();
        let max = t.transport.max_io_queues as u16;
        let mut admin_q = queue(&t);
        let c = connect_to(&mut admin_q, NQN, HOST, 0, CNTLID_DYNAMIC);
        let cntlid = c.result as u16;
        assert_eq!(set_cc(&mut admin_q, 2, cc::ENABLE_DEFAULT), Status::SUCCESS);
        // Ask for 2 I/O queues (NSQR = NCQR = 1, 0's based).
        let nq = farflash_wire::Sqe {
            opcode: admin::SET_FEATURES,
            flags: farflash_wire::sqe::PSDT_SGL,
            cid: 3,
            cdw10: feature::NUMBER_OF_QUEUES as u32,
            cdw11: 1 | 1 << 16,
            ..Default::default()
        };
        assert_eq!(run(&mut admin_q, nq, &[]).result, 1 | 1 << 16);
        // QID 3 and the last supported QID join (Linux nvmet and SPDK check
        // only their maximum); one beyond that still does not.
        let mut live = Vec::new();
        for qid in [3, max] {
            let before = t.tolerated.get(Oddity::QidBeyondGranted);
            let mut io = queue(&t);
            let c = connect_to(&mut io, NQN, HOST, qid, cntlid);
            assert_eq!(c.status, Status::SUCCESS, "QID {qid}");
            assert_eq!(t.tolerated.get(Oddity::QidBeyondGranted), before + 1);
            live.push(io);
        }
        let mut io = queue(&t);
        let c = connect_to(&mut io, NQN, HOST, max + 1, cntlid);
        assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
        // A QID already connected is still refused: Invalid Queue
        // Identifier (Base 2.1 §6.3, as SPDK).
        let mut io = queue(&t);
        let c = connect_to(&mut io, NQN, HOST, 3, cntlid);
        assert_eq!(c.status, Status::INVALID_QUEUE_IDENTIFIER.dnr());
    }

    #[test]
    fn property_get_crto() {
        let (t, _) = target();
        let mut admin_q = queue(&t);
        connect_to(&mut admin_q, NQN, HOST, 0, CNTLID_DYNAMIC);
        let sqe = PropertyCmd {
            size8: false,
            offset: props::CRTO,
            value: 0,
        }
        .to_sqe(2, fctype::PROPERTY_GET);
        let c = run(&mut admin_q, sqe, &[]);
        assert_eq!(c.status, Status::SUCCESS);
        // CRWMT (15:0) is CAP.TO, CRIMT (31:16) 0.
        assert_eq!(c.result, u64::from(super::CAP_TIMEOUT));
        // An 8-byte read of it is still an invalid field.
        let sqe = PropertyCmd {
            size8: true,
            offset: props::CRTO,
            value: 0,
        }
        .to_sqe(3, fctype::PROPERTY_GET);
        assert_eq!(
            run(&mut admin_q, sqe, &[]).status,
            Status::INVALID_FIELD.dnr()
        );
    }

    #[test]
    fn io_queue_connect_with_another_hostid_joins_the_controller() {
        let (t, _) = target();
        let mut admin = queue(&t);
        let c = connect_hostid(&mut admin, NQN, HOST, [0xA1; 16], 0, CNTLID_DYNAMIC);
        assert_eq!(c.status, Status::SUCCESS);
        let cntlid = c.result as u16;
        assert_eq!(set_cc(&mut admin, 2, cc::ENABLE_DEFAULT), Status::SUCCESS);
        // A non-zero HOSTID other than the admin queue's, and a zero one.
        for (qid, hostid) in [(1, [0xB2; 16]), (2, [0; 16])] {
            let mut io = queue(&t);
            let c = connect_hostid(&mut io, NQN, HOST, hostid, qid, cntlid);
            assert_eq!(c.status, Status::SUCCESS, "HOSTID {hostid:?}");
            assert_eq!(c.result as u16, cntlid);
            assert!(t.tolerated.get(crate::stats::Oddity::IoHostid) >= 1);
            // Reservations keep using the admin queue's Host Identifier.
            let ctrl = io.ctrl.clone().expect("connected");
            assert_eq!(ctrl.hostid, [0xA1; 16]);
        }
        // Another host NQN still cannot join this host's controller.
        let mut io = queue(&t);
        let other = "nqn.2014-08.org.nvmexpress:uuid:someone-else";
        let c = connect_hostid(&mut io, NQN, other, [0xA1; 16], 3, cntlid);
        assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
        assert_eq!(
            c.result,
            u64::from(connect_invalid_param_dw0(true, doff::HOSTNQN))
        );
    }
}
