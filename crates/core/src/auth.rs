//! In-band authentication on the target (Base 2.0 §8.13, TP 8006;
//! Fabrics 1.1 §6.2): Authentication Send (FCTYPE 05h) and Receive (06h)
//! drive one `farflash_auth::CtrlAuth` per queue, as Linux's
//! `nvmet_execute_auth_send` / `nvmet_execute_auth_receive` do.
//!
//! - A Connect by a host with a `dhchap_key` sets the response's AUTHREQ
//!   ATR bit (`fabrics.rs`); until that queue authenticates, every command
//!   but a Fabrics one gets Authentication Required (`exec.rs`).
//! - A failure reported through AUTH_Failure1 (once the host fetched it),
//!   or an AUTH_Failure2 from the host, on the admin queue ends the
//!   association (Linux `nvmet_ctrl_fatal_error`); on an I/O queue the
//!   queue stays unauthenticated.
//! - A transaction with no next message within
//!   `farflash_auth::transaction_timeout(KATO)` is forgotten; a queue not
//!   authenticated by then is closed (`queue/lifecycle.rs`).
//!
//! - The DH exponentiations (up to ~20 ms each for ffdhe8192) leave the
//!   event loop: Authentication Send emits them as an offload
//!   (`queue/offload.rs`) and completes when the result comes back
//!   ([`computed`]); another Authentication Send on that queue meanwhile
//!   gets Command Sequence Error.
//!
//! Secrets never reach a log: only the failure's fixed description is logged.

use crate::command::{Outcome, Xfer};
use crate::queue::NvmeQueue;
use farflash_auth::{CtrlEvent, DhDone, OsRandom, Sent};
use farflash_wire::auth::{AuthCmd, Message};
use farflash_wire::opcode::fctype;
use farflash_wire::{Sqe, Status};

/// Largest Authentication Send transfer accepted: the largest message (a
/// DH-HMAC-CHAP_Reply with SHA-512 and ffdhe8192) is 1,168 bytes.
pub(crate) const MAX_SEND_LEN: u32 = 8192;
/// Largest Authentication Receive allocation honoured (Linux's host asks
/// for 4,096); the reply is at most the message, cut to AL.
pub(crate) const MAX_RECEIVE_LEN: u32 = 65536;

/// Parse-time checks (Fabrics §6.2.1, §6.2.2): the security protocol
/// fields, a non-zero length, and a queue that asked for authentication.
pub(crate) fn classify<C: Default>(q: &NvmeQueue<C>, sqe: &Sqe) -> Result<Xfer, Status> {
    if q.ctrl.is_none() {
        return Err(Status::COMMAND_SEQUENCE_ERROR.dnr());
    }
    if q.life.auth.is_none() {
        // The Connect response did not ask for authentication.
        return Err(Status::COMMAND_SEQUENCE_ERROR.dnr());
    }
    let c = AuthCmd::from_sqe(sqe);
    if c.check_dhchap().is_err() || c.len == 0 {
        return Err(Status::INVALID_FIELD.dnr());
    }
    if sqe.fctype() == fctype::AUTH_SEND {
        if c.len > MAX_SEND_LEN {
            return Err(Status::INVALID_FIELD.dnr());
        }
        Ok(Xfer::H2C(c.len))
    } else {
        Ok(Xfer::C2H(c.len.min(MAX_RECEIVE_LEN)))
    }
}

/// Authentication Send: the message goes to the queue's state machine.
/// The command succeeds even when the message fails the transaction: the
/// host learns that from the AUTH_Failure1 it receives next.
pub(crate) fn send<C: Default>(q: &mut NvmeQueue<C>, idx: usize) -> Outcome {
    let len = q.slots[idx].len as usize;
    let data = match q.slots[idx].buf.as_ref() {
        Some(b) if b.as_slice().len() >= len => b.as_slice()[..len].to_vec(),
        _ => return Outcome::Done(Status::INVALID_FIELD.dnr(), 0),
    };
    if q.life.auth.as_ref().is_some_and(|a| !a.in_progress()) {
        // A new transaction (a re-authentication, say after the host's key
        // was rotated): it uses the subsystem's keys as they are now.
        let current = q
            .ctrl
            .as_ref()
            .and_then(|c| c.subsystem().and_then(|s| s.auth_for(&c.hostnqn)));
        if let (Some(cfg), Some(auth)) = (current, q.life.auth.as_mut()) {
            auth.set_config(cfg);
        }
    }
    let Some(auth) = q.life.auth.as_mut() else {
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
    };
    if auth.computing() {
        // The previous message's DH work is still out.
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR, 0);
    }
    let sent = auth.send_deferred(&data, &mut OsRandom);
    q.life.auth_since = None;
    match sent {
        Sent::Event(ev) => report(q, ev),
        Sent::Compute(job) => {
            q.offload(idx, crate::queue::Job::Dh(job));
            return Outcome::Pending;
        }
    }
    Outcome::Done(Status::SUCCESS, 0)
}

/// The DH work of the Authentication Send in slot `idx` came back: the
/// transaction goes on and the command completes.
pub(crate) fn computed<C: Default>(q: &mut NvmeQueue<C>, done: DhDone) -> Outcome {
    // None: the transaction expired or failed meanwhile (already reported).
    let ev = q.life.auth.as_mut().and_then(|a| a.computed(done));
    if let Some(ev) = ev {
        report(q, ev);
    }
    q.life.auth_since = None;
    Outcome::Done(Status::SUCCESS, 0)
}

/// Logs and counts what an Authentication Send did.
fn report<C: Default>(q: &mut NvmeQueue<C>, ev: CtrlEvent) {
    let cntlid = q.ctrl.as_ref().map(|c| c.cntlid).unwrap_or(0);
    match ev {
        CtrlEvent::Continue => {}
        CtrlEvent::Authenticated => {
            tracing::info!(peer = %q.via.peer, cntlid, qid = q.qid, "host authenticated (DH-HMAC-CHAP)");
        }
        CtrlEvent::Failed(f) => {
            // Rare (one per failed transaction): a shared counter is fine here.
            q.target
                .auth_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(peer = %q.via.peer, cntlid, qid = q.qid, reason = f.what, explanation = f.explanation, from_host = f.from_peer, "authentication failed");
            if f.from_peer {
                fatal_if_admin(q);
            }
        }
    }
}

/// Authentication Receive: the next message of the transaction, in AL bytes;
/// Command Sequence Error when none is due.
pub(crate) fn receive<C: Default>(q: &mut NvmeQueue<C>, idx: usize) -> Outcome {
    let Some(auth) = q.life.auth.as_mut() else {
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
    };
    let Some(msg) = auth.receive() else {
        return Outcome::Done(Status::COMMAND_SEQUENCE_ERROR.dnr(), 0);
    };
    q.life.auth_since = None;
    let failure = matches!(msg, Message::Failure1(_));
    let bytes = msg.encode();
    // Zero-padded to AL, as Linux's target returns it (hosts may count
    // on the whole allocation moving); cut to AL when shorter.
    let al = q.slots[idx].len as usize;
    let n = bytes.len().min(al);
    q.reply_buf(idx, al.max(n))[..n].copy_from_slice(&bytes[..n]);
    if failure {
        fatal_if_admin(q);
    }
    Outcome::Done(Status::SUCCESS, 0)
}

/// After a failed authentication on the admin queue the controller stops
/// (Linux `nvmet_ctrl_fatal_error`): every queue of the association closes
/// at its next tick, once this completion has gone out.
fn fatal_if_admin<C: Default>(q: &mut NvmeQueue<C>) {
    if q.qid != 0 {
        return;
    }
    if let Some(c) = &q.ctrl {
        tracing::warn!(peer = %q.via.peer, cntlid = c.cntlid, "authentication failed on the admin queue; ending the association");
        c.kill();
    }
}

#[cfg(test)]
mod tests {
    use crate::command::{Begin, Completion};
    use crate::config::{
        BackendKind, Config, DhchapKey, HostAuthConfig, NamespaceConfig, SubsystemConfig,
        TransportConfig,
    };
    use crate::testing::build_subsystems;
    use crate::{NvmeQueue, Target};
    use farflash_auth::{HostAuth, HostConfig, HostStep, OsRandom, Secret};
    use farflash_wire::auth::{
        explanation as ex, AuthCmd, Message, CONNECT_AUTHREQ_ATR, SECP_DHCHAP,
    };
    use farflash_wire::fabrics::{PropertyCmd, CNTLID_DYNAMIC};
    use farflash_wire::opcode::{admin, fctype};
    use farflash_wire::props;
    use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
    use farflash_wire::{Sqe, Status};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const NQN: &str = "nqn.2026-11.io.farflash:auth-test";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:auth-test";
    const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:no-key";

    fn key(b: u8) -> Secret {
        Secret::new(&[b; 32], None).unwrap()
    }

    fn target(ctrl_key: bool, require: bool, groups: &[&str]) -> Arc<Target> {
        let mut sub =
            SubsystemConfig::new(NQN, vec![NamespaceConfig::sized(BackendKind::Ram, 1 << 20)]);
        sub.require_auth = require;
        sub.hosts = vec![HostAuthConfig {
            dhchap_key: Some(DhchapKey(key(1))),
            dhchap_ctrl_key: ctrl_key.then(|| DhchapKey(key(2))),
            dhchap_hash: vec!["hmac(sha384)".into()],
            dhchap_dhgroup: groups.iter().map(|g| g.to_string()).collect(),
            ..HostAuthConfig::new(HOST)
        }];
        let cfg = Config {
            listen: vec!["127.0.0.1:4420".into()],
            transport: TransportConfig::default(),
            subsystems: vec![sub],
            pools: Vec::new(),
        };
        cfg.validate().unwrap();
        let subs = build_subsystems(&cfg).unwrap();
        Target::new(subs, cfg.transport, vec!["127.0.0.1:4420".parse().unwrap()])
    }

    use crate::tests::queue;

    /// Runs one command; returns its completion and the data it returned.
    fn run(q: &mut NvmeQueue, sqe: Sqe, data: &[u8]) -> (Completion, Vec<u8>) {
        let c = crate::tests::run(q, sqe, data);
        let d = c
            .data
            .as_ref()
            .map(|(b, n)| b.as_slice()[..*n as usize].to_vec())
            .unwrap_or_default();
        (c, d)
    }

    fn connect(q: &mut NvmeQueue, host: &str, qid: u16, cntlid: u16) -> Completion {
        crate::tests::connect_to(q, NQN, host, qid, cntlid)
    }

    /// Identify Controller on the admin queue `q`, enabled first (CC.EN) as
    /// a host does once it has authenticated: before that, both commands
    /// wait for authentication.
    fn identify(q: &mut NvmeQueue) -> Status {
        let en = farflash_wire::fabrics::PropertyCmd {
            size8: false,
            offset: farflash_wire::props::CC,
            value: farflash_wire::props::cc::ENABLE_DEFAULT as u64,
        }
        .to_sqe(8, farflash_wire::opcode::fctype::PROPERTY_SET);
        run(q, en, &[]);
        let sqe = Sqe {
            opcode: admin::IDENTIFY,
            flags: PSDT_SGL,
            cid: 9,
            dptr: SglDescriptor::transport(4096),
            cdw10: 1,
            ..Sqe::default()
        };
        run(q, sqe, &[]).0.status
    }

    fn auth_send(q: &mut NvmeQueue, msg: &Message) -> Status {
        let b = msg.encode();
        let sqe = AuthCmd::dhchap(b.len() as u32).to_sqe(3, true);
        run(q, sqe, &b).0.status
    }

    fn auth_receive(q: &mut NvmeQueue) -> (Status, Vec<u8>) {
        let (c, d) = run(q, AuthCmd::dhchap(4096).to_sqe(4, false), &[]);
        (c.status, d)
    }

    /// One whole transaction as a host would run it; the host's last step.
    fn authenticate(
        q: &mut NvmeQueue,
        secret: Secret,
        ctrl: Option<Secret>,
        t_id: u16,
    ) -> HostStep {
        let mut h = HostAuth::new(HostConfig::new(HOST, NQN, secret, ctrl), t_id);
        assert_eq!(auth_send(q, &h.negotiate()), Status::SUCCESS);
        loop {
            let (st, data) = auth_receive(q);
            assert_eq!(st, Status::SUCCESS);
            match h.receive(&data, &mut OsRandom) {
                HostStep::Send(m) => assert_eq!(auth_send(q, &m), Status::SUCCESS),
                HostStep::Done(Some(m)) => {
                    assert_eq!(auth_send(q, &m), Status::SUCCESS);
                    return HostStep::Done(None);
                }
                other => {
                    if let HostStep::Failed { send: Some(m), .. } = &other {
                        assert_eq!(auth_send(q, m), Status::SUCCESS);
                    }
                    return other;
                }
            }
        }
    }

    #[test]
    fn connect_asks_for_authentication_and_commands_wait_for_it() {
        let t = target(false, false, &["null"]);
        let mut q = queue(&t);
        let c = connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        assert_eq!(c.status, Status::SUCCESS);
        assert_ne!(c.result as u32 & CONNECT_AUTHREQ_ATR, 0);
        assert_eq!(identify(&mut q), Status::AUTH_REQUIRED.dnr());
        assert_eq!(authenticate(&mut q, key(1), None, 1), HostStep::Done(None));
        assert_eq!(identify(&mut q), Status::SUCCESS);
        // Re-authentication of an authenticated queue (a new T_ID).
        assert_eq!(authenticate(&mut q, key(1), None, 2), HostStep::Done(None));
        assert_eq!(identify(&mut q), Status::SUCCESS);
    }

    /// With a DH group the exponentiations leave the queue as offloads:
    /// Authentication Send stays pending (in flight) until the result comes
    /// back; another Authentication Send meanwhile gets Command Sequence
    /// Error; a queue closed meanwhile still takes the result.
    #[test]
    fn dh_work_is_offloaded_and_its_command_waits() {
        let t = target(false, false, &["ffdhe2048"]);
        let mut q = queue(&t);
        connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        let mut h = HostAuth::new(HostConfig::new(HOST, NQN, key(1), None), 11);
        let neg = h.negotiate().encode();
        let start = |q: &mut NvmeQueue, cid: u16| {
            let sqe = AuthCmd::dhchap(neg.len() as u32).to_sqe(cid, true);
            let Begin::Ready { slot, .. } = q.begin(sqe) else {
                panic!("not runnable")
            };
            q.data_buf(slot).copy_from_slice(&neg);
            q.execute(slot);
        };
        start(&mut q, 20);
        let mut c = Vec::new();
        q.take_completions(&mut c);
        assert!(c.is_empty(), "completed before the DH work: {c:?}");
        assert!(q.has_offloads());
        assert_eq!(q.in_flight(), 1);
        start(&mut q, 21);
        q.take_completions(&mut c);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].cid, c[0].status),
            (21, Status::COMMAND_SEQUENCE_ERROR)
        );
        c.clear();
        let mut jobs = Vec::new();
        q.take_offloads(|o| jobs.push(o));
        assert_eq!(jobs.len(), 1);
        let done = std::thread::spawn(move || jobs.remove(0).run())
            .join()
            .unwrap();
        q.on_offload_completion(done);
        assert_eq!(q.in_flight(), 0);
        q.take_completions(&mut c);
        assert_eq!((c[0].cid, c[0].status), (20, Status::SUCCESS));
        let (st, d) = auth_receive(&mut q);
        assert_eq!(st, Status::SUCCESS);
        assert!(matches!(Message::decode(&d), Ok(Message::Challenge(_))));

        // Neither the keep-alive timer (KATO 5 s) nor the transaction
        // timeout runs while our own work is out: the host waits for us.
        start(&mut q, 23);
        let t0 = Instant::now();
        q.tick(t0);
        q.tick(t0 + Duration::from_secs(60));
        assert!(!q.wants_close(), "closed while the target was computing");
        let mut jobs = Vec::new();
        q.take_offloads(|o| jobs.push(o));
        q.on_offload_completion(jobs.remove(0).run());
        q.take_completions(&mut c);
        assert_eq!(
            c.last().map(|c| (c.cid, c.status)),
            Some((23, Status::SUCCESS))
        );
        q.tick(t0 + Duration::from_secs(61));
        assert!(!q.wants_close());
        // Then silence is silence again.
        q.tick(t0 + Duration::from_secs(70));
        assert!(
            q.wants_close(),
            "keep-alive expiry after the work came back"
        );

        // Closed while the work is out: the queue waits for it.
        let mut q = queue(&t);
        connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        start(&mut q, 22);
        q.close();
        assert_eq!(q.in_flight(), 1);
        let mut jobs = Vec::new();
        q.take_offloads(|o| jobs.push(o));
        q.on_offload_completion(jobs.remove(0).run());
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn bidirectional_with_a_dh_group() {
        let t = target(true, false, &["ffdhe2048"]);
        let mut q = queue(&t);
        let cntlid = connect(&mut q, HOST, 0, CNTLID_DYNAMIC).result as u16;
        assert_eq!(
            authenticate(&mut q, key(1), Some(key(2)), 7),
            HostStep::Done(None)
        );
        assert_eq!(identify(&mut q), Status::SUCCESS);
        let en = PropertyCmd {
            size8: false,
            offset: props::CC,
            value: props::cc::ENABLE_DEFAULT as u64,
        }
        .to_sqe(2, fctype::PROPERTY_SET);
        assert_eq!(run(&mut q, en, &[]).0.status, Status::SUCCESS);
        // Every I/O queue authenticates on its own.
        let mut io = queue(&t);
        let c = connect(&mut io, HOST, 1, cntlid);
        assert_eq!(c.status, Status::SUCCESS);
        assert_ne!(c.result as u32 & CONNECT_AUTHREQ_ATR, 0);
        let read = Sqe {
            opcode: farflash_wire::opcode::io::READ,
            flags: PSDT_SGL,
            cid: 5,
            nsid: 1,
            dptr: SglDescriptor::transport(512),
            ..Sqe::default()
        };
        assert_eq!(
            run(&mut io, read, &[]).0.status,
            Status::AUTH_REQUIRED.dnr()
        );
        assert_eq!(
            authenticate(&mut io, key(1), Some(key(2)), 8),
            HostStep::Done(None)
        );
        assert_eq!(run(&mut io, read, &[]).0.status, Status::SUCCESS);
    }

    #[test]
    fn a_wrong_host_key_ends_the_association_after_failure1() {
        let t = target(false, false, &["null"]);
        let mut q = queue(&t);
        connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        match authenticate(&mut q, key(9), None, 1) {
            HostStep::Failed { failure, send } => {
                assert!(failure.from_peer);
                assert_eq!(failure.explanation, ex::FAILED);
                assert!(send.is_none());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            t.auth_failures.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "counted for the metrics"
        );
        assert_eq!(identify(&mut q), Status::AUTH_REQUIRED.dnr());
        q.tick(Instant::now());
        assert!(q.wants_close());
    }

    #[test]
    fn a_key_rotated_at_run_time_applies_from_the_next_transaction() {
        let t = target(false, false, &["null"]);
        let mut q = queue(&t);
        connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        assert_eq!(authenticate(&mut q, key(1), None, 1), HostStep::Done(None));
        // The host's key changes (SIGHUP, load_config or host_allow: the
        // control plane's reload replaces the subsystem's host access).
        let sub = t.subsystems()[0].clone();
        let mut sc = sub.to_config();
        sc.hosts[0].dhchap_key = Some(DhchapKey(key(7)));
        sub.set_access(crate::subsystem::HostAccess::of(&sc));
        // The live queue keeps working, and re-authenticates with the new key.
        assert_eq!(identify(&mut q), Status::SUCCESS);
        assert_eq!(authenticate(&mut q, key(7), None, 2), HostStep::Done(None));
        assert_eq!(identify(&mut q), Status::SUCCESS);
    }

    #[test]
    fn a_wrong_controller_key_is_refused_by_the_host() {
        let t = target(true, false, &["null"]);
        let mut q = queue(&t);
        connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        match authenticate(&mut q, key(1), Some(key(3)), 1) {
            HostStep::Failed { failure, send } => {
                assert!(!failure.from_peer);
                assert!(send.is_some(), "the host sends AUTH_Failure2");
            }
            other => panic!("{other:?}"),
        }
        // The controller authenticated the host, then got Failure2.
        assert_eq!(identify(&mut q), Status::AUTH_REQUIRED.dnr());
        q.tick(Instant::now());
        assert!(q.wants_close());
    }

    #[test]
    fn hosts_without_a_key_connect_without_authentication_unless_required() {
        let t = target(false, false, &["null"]);
        let mut q = queue(&t);
        let c = connect(&mut q, OTHER, 0, CNTLID_DYNAMIC);
        assert_eq!(c.status, Status::SUCCESS);
        assert_eq!(c.result as u32 & CONNECT_AUTHREQ_ATR, 0);
        assert_eq!(identify(&mut q), Status::SUCCESS);
        // Authentication commands on a queue that was not asked to authenticate.
        let neg = HostAuth::new(HostConfig::new(OTHER, NQN, key(1), None), 1).negotiate();
        assert_eq!(
            auth_send(&mut q, &neg),
            Status::COMMAND_SEQUENCE_ERROR.dnr()
        );
        assert_eq!(auth_receive(&mut q).0, Status::COMMAND_SEQUENCE_ERROR.dnr());

        let t = target(false, true, &["null"]);
        let mut q = queue(&t);
        assert_eq!(
            connect(&mut q, OTHER, 0, CNTLID_DYNAMIC).status,
            Status::CONNECT_INVALID_HOST.dnr()
        );
    }

    #[test]
    fn bad_auth_commands_get_the_fields_status() {
        let t = target(false, false, &["null"]);
        let mut q = queue(&t);
        connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        // Receive before any negotiate: nothing to return.
        assert_eq!(auth_receive(&mut q).0, Status::COMMAND_SEQUENCE_ERROR.dnr());
        for (cdw10, len) in [
            (0u32, 64u32),                                       // SECP 0
            ((SECP_DHCHAP as u32) << 24 | 0x0101 << 8, 0),       // TL 0
            ((SECP_DHCHAP as u32) << 24 | 0x0201 << 8, 64),      // SPSP1 2
            ((SECP_DHCHAP as u32) << 24 | 0x0101 << 8, 1 << 20), // TL too big
        ] {
            let mut sqe = AuthCmd::dhchap(len).to_sqe(3, true);
            sqe.cdw10 = cdw10;
            assert_eq!(run(&mut q, sqe, &[]).0.status, Status::INVALID_FIELD.dnr());
        }
        // Garbage as a message: the send succeeds, the Failure1 follows.
        let sqe = AuthCmd::dhchap(5).to_sqe(3, true);
        assert_eq!(run(&mut q, sqe, &[1, 2, 3, 4, 5]).0.status, Status::SUCCESS);
        let (st, data) = auth_receive(&mut q);
        assert_eq!(st, Status::SUCCESS);
        match Message::decode(&data) {
            Ok(Message::Failure1(f)) => assert_eq!(f.explanation, ex::INCORRECT_PAYLOAD),
            other => panic!("{other:?}"),
        }
        q.tick(Instant::now());
        assert!(q.wants_close(), "a failure on the admin queue is fatal");
    }

    #[test]
    fn an_unfinished_transaction_times_out_and_the_queue_closes() {
        let t = target(false, false, &["null"]);
        let mut q = queue(&t);
        connect(&mut q, HOST, 0, CNTLID_DYNAMIC);
        let mut h = HostAuth::new(HostConfig::new(HOST, NQN, key(1), None), 1);
        auth_send(&mut q, &h.negotiate());
        let t0 = Instant::now();
        q.tick(t0);
        // KATO is 5 s: the transaction timeout.
        q.tick(t0 + Duration::from_secs(4));
        assert!(!q.wants_close());
        q.tick(t0 + Duration::from_secs(6));
        assert!(q.wants_close());
        assert_eq!(auth_receive(&mut q).0, Status::COMMAND_SEQUENCE_ERROR.dnr());
    }
}
