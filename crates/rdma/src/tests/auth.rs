//! DH-HMAC-CHAP over an `RdmaQueue` (Base 2.0 §8.13.5; Fabrics 1.1 §6.2):
//! the host end is `farflash_auth::HostAuth`, its messages go by keyed SGL
//! (Authentication Send's data by RDMA READ, Receive's by RDMA WRITE) as
//! Linux's nvme-rdma sends them, and the DH exponentiations leave the queue
//! as offloads that the test runs and hands back, as the worker's helper
//! thread does.

use super::{rw, Host, HOST, NQN};
use crate::sgl::IN_CAPSULE;
use farflash_auth::{HostAuth, HostConfig, HostStep, OsRandom, Secret};
use farflash_control::build_subsystems;
use farflash_core::config::{
    BackendKind, Config, DhchapKey, HostAuthConfig, NamespaceConfig, SubsystemConfig,
};
use farflash_core::Target;
use farflash_wire::auth::{explanation as ex, AuthCmd, CONNECT_AUTHREQ_ATR};
use farflash_wire::fabrics::CNTLID_DYNAMIC;
use farflash_wire::opcode::{admin, cns, io};
use farflash_wire::sqe::SglDescriptor;
use farflash_wire::{Sqe, Status};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Host memory the messages go through.
const SEND_AT: u64 = 0x10000;
const RECV_AT: u64 = 0x20000;

fn key(b: u8) -> Secret {
    Secret::new(&[b; 32], None).unwrap()
}

/// A subsystem that requires HOST to authenticate with `key(1)`, group
/// ffdhe2048 (so every transaction has exponentiations to offload).
fn auth_target() -> Arc<Target> {
    let ns = NamespaceConfig {
        block_size: Some(512),
        ..NamespaceConfig::sized(BackendKind::Ram, 8 << 20)
    };
    let mut sc = SubsystemConfig::new(NQN, vec![ns]);
    sc.require_auth = true;
    sc.hosts = vec![HostAuthConfig {
        dhchap_key: Some(DhchapKey(key(1))),
        dhchap_dhgroup: vec!["ffdhe2048".into()],
        ..HostAuthConfig::new(HOST)
    }];
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: Default::default(),
        subsystems: vec![sc],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).unwrap();
    Target::new(
        subs,
        cfg.transport.clone(),
        vec!["127.0.0.1:4420".parse().unwrap()],
    )
}

/// One transaction on `h`'s queue: each message by Authentication Send
/// (keyed SGL: the target RDMA READs it), each answer by Authentication
/// Receive (keyed SGL with invalidate: the target RDMA WRITEs it).
fn authenticate(h: &mut Host, secret: Secret, t_id: u16) -> HostStep {
    let mut a = HostAuth::new(HostConfig::new(HOST, NQN, secret, None), t_id);
    let mut msg = a.negotiate().encode();
    loop {
        let len = msg.len() as u32;
        h.mem[SEND_AT as usize..][..msg.len()].copy_from_slice(&msg);
        let send = AuthCmd::dhchap(len).to_sqe(0, true);
        let r = h.keyed(send, SEND_AT, len, false);
        assert_eq!(r.cqe.status, Status::SUCCESS, "Authentication Send");
        h.written = 0;
        let recv = AuthCmd::dhchap(4096).to_sqe(0, false);
        let r = h.keyed(recv, RECV_AT, 4096, true);
        assert_eq!(r.cqe.status, Status::SUCCESS, "Authentication Receive");
        assert!(h.written > 0, "the answer came by RDMA WRITE");
        let answer = h.mem[RECV_AT as usize..][..h.written].to_vec();
        match a.receive(&answer, &mut OsRandom) {
            HostStep::Send(m) => msg = m.encode(),
            done => return done,
        }
    }
}

/// Identify Controller by RDMA WRITE (not a Fabrics command: gated by
/// authentication).
fn identify(h: &mut Host) -> Status {
    let id = Sqe {
        opcode: admin::IDENTIFY,
        cdw10: cns::CONTROLLER as u32,
        ..Sqe::default()
    };
    h.keyed(id, 0x30000, 4096, true).cqe.status
}

#[test]
fn rdma_queues_authenticate_through_offloads() {
    let t = auth_target();
    let mut admin = Host::new(&t, 0, 32, 0);
    let c = admin.connect(0, 31, CNTLID_DYNAMIC);
    assert_eq!(c.status, Status::SUCCESS);
    assert_ne!(c.dw0 & CONNECT_AUTHREQ_ATR, 0, "AUTHREQ ATR set");
    let cntlid = c.dw0 as u16;
    // Nothing but Fabrics commands before the queue authenticates.
    assert_eq!(identify(&mut admin), Status::AUTH_REQUIRED.dnr());
    assert_eq!(admin.offloads, 0);
    assert_eq!(authenticate(&mut admin, key(1), 1), HostStep::Done(None));
    assert!(admin.offloads >= 2, "both exponentiations were offloaded");
    // Authenticated, but not enabled yet (Base §3.5.1).
    assert_eq!(identify(&mut admin), Status::COMMAND_SEQUENCE_ERROR.dnr());
    assert_eq!(admin.enable(), Status::SUCCESS);
    assert_eq!(identify(&mut admin), Status::SUCCESS);

    // An I/O queue authenticates on its own, then carries data.
    let mut h = Host::new(&t, 1, 128, 8192);
    let c = h.connect(1, 127, cntlid);
    assert_eq!(c.status, Status::SUCCESS);
    assert_ne!(c.dw0 & CONNECT_AUTHREQ_ATR, 0);
    let w = h.next(rw(io::WRITE, 0, 8));
    let mut d = [0u8; 16];
    SglDescriptor {
        addr: 0,
        length: 4096,
        sgl_type: IN_CAPSULE,
    }
    .encode(&mut d);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 1) as u8).collect();
    h.send(&w, Some(d), &pattern);
    assert_eq!(h.reply().cqe.status, Status::AUTH_REQUIRED.dnr());
    assert_eq!(authenticate(&mut h, key(1), 2), HostStep::Done(None));
    let w = h.next(rw(io::WRITE, 0, 8));
    h.send(&w, Some(d), &pattern);
    assert_eq!(h.reply().cqe.status, Status::SUCCESS);
    let r = h.keyed(rw(io::READ, 0, 8), 0x40000, 4096, true);
    assert_eq!(r.cqe.status, Status::SUCCESS);
    assert_eq!(&h.mem[0x40000..0x41000], &pattern[..]);
    assert_eq!(t.auth_failures.load(Ordering::Relaxed), 0);
}

#[test]
fn a_wrong_key_over_rdma_fails_as_on_tcp() {
    let t = auth_target();
    let mut admin = Host::new(&t, 0, 32, 0);
    let c = admin.connect(0, 31, CNTLID_DYNAMIC);
    assert_eq!(c.status, Status::SUCCESS);
    match authenticate(&mut admin, key(9), 1) {
        HostStep::Failed { failure, send } => {
            assert!(failure.from_peer, "the controller sent AUTH_Failure1");
            assert_eq!(failure.explanation, ex::FAILED);
            assert!(send.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.auth_failures.load(Ordering::Relaxed), 1);
    assert_eq!(identify(&mut admin), Status::AUTH_REQUIRED.dnr());
    // A failure on the admin queue ends the association: the queue closes.
    admin.q.tick(std::time::Instant::now());
    assert!(admin.q.wants_close());
}
