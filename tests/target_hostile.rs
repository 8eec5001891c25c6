//! Malformed input on one connection must never crash the target nor
//! disturb other connections: hostile raw-TCP peers run while a
//! well-behaved host (farflash's host library) does verified I/O.

mod common;

use common::{Serve, NQN};
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use farflash_wire::pdu::{fes, flags, write_header, DataHeader, IcReq, PduType, TermReq};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sends `bytes` (optionally after a valid ICReq) and returns what the target
/// answered before it closed the connection.
fn hostile(addr: &str, icreq: bool, bytes: &[u8]) -> Vec<u8> {
    hostile_then(addr, icreq, bytes, false)
}

/// Like [`hostile`]; with `half_close` the peer also shuts its sending side.
fn hostile_then(addr: &str, icreq: bool, bytes: &[u8], half_close: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    if icreq {
        let mut b = [0u8; 128];
        IcReq::default().encode(&mut b);
        s.write_all(&b).unwrap();
        let mut resp = [0u8; 128];
        s.read_exact(&mut resp).expect("ICResp");
        assert_eq!(resp[0], PduType::IcResp as u8);
    }
    let _ = s.write_all(bytes);
    if half_close {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("the target neither answered nor closed: {e}"),
        }
    }
    out
}

fn term_req(out: &[u8]) -> TermReq {
    assert!(
        out.len() >= 24,
        "expected a C2HTermReq, got {} bytes",
        out.len()
    );
    assert_eq!(out[0], PduType::C2HTermReq as u8, "expected a C2HTermReq");
    TermReq::decode(out)
}

#[test]
fn hostile_peers_do_not_disturb_a_working_host() {
    let mut serve = Serve::start(&["--ram", "32M"]);
    let addr = serve.addr.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let good = {
        let (addr, stop) = (addr.clone(), stop.clone());
        std::thread::spawn(move || -> Result<u64, String> {
            let opts = ConnectOptions::new(addr, NQN);
            let mut ctrl = Controller::connect(&opts).map_err(|e| e.to_string())?;
            ctrl.start_keep_alive().map_err(|e| e.to_string())?;
            let mut q = ctrl
                .io_queue(1, IoQueueOptions::default())
                .map_err(|e| e.to_string())?;
            let mut ops = 0u64;
            let mut back = vec![0u8; 8192];
            while !stop.load(Ordering::Acquire) {
                let lba = (ops * 16) % 60_000;
                let data: Vec<u8> = (0..8192u64).map(|i| (i ^ ops) as u8).collect();
                q.write_at(1, lba, 16, &data)
                    .map_err(|e| format!("write {ops}: {e}"))?;
                q.read_at(1, lba, 16, &mut back)
                    .map_err(|e| format!("read {ops}: {e}"))?;
                if back != data {
                    return Err(format!("data mismatch at LBA {lba}"));
                }
                ops += 1;
            }
            ctrl.shutdown().map_err(|e| e.to_string())?;
            Ok(ops)
        })
    };
    let t0 = Instant::now();
    // Garbage before ICReq: the first PDU must be an ICReq.
    let t = term_req(&hostile(&addr, false, &[0xFF; 64]));
    assert_eq!(t.fes, fes::INVALID_HEADER_FIELD);
    // A CapsuleCmd before ICReq.
    let mut caps = vec![0u8; 72];
    write_header(&mut caps, PduType::CapsuleCmd, 0, false, false, 0);
    assert_eq!(
        term_req(&hostile(&addr, false, &caps)).fes,
        fes::PDU_SEQUENCE_ERROR
    );
    // Wrong HLEN after ICReq.
    caps[2] = 71;
    assert_eq!(
        term_req(&hostile(&addr, true, &caps)),
        TermReq {
            fes: fes::INVALID_HEADER_FIELD,
            fei: 2
        }
    );
    // A huge PLEN for a capsule (more in-capsule data than advertised).
    let mut big = vec![0u8; 72];
    write_header(&mut big, PduType::CapsuleCmd, 0, false, false, 0);
    big[3] = 72;
    big[4..8].copy_from_slice(&(64u32 << 20).to_le_bytes());
    assert_eq!(
        term_req(&hostile(&addr, true, &big)).fes,
        fes::DATA_TRANSFER_LIMIT_EXCEEDED
    );
    // H2CData for a transfer tag that was never given out.
    let mut h2c = vec![0u8; 24 + 512];
    DataHeader {
        cccid: 1,
        ttag: 7,
        offset: 0,
        length: 512,
    }
    .encode(
        &mut h2c,
        PduType::H2CData,
        flags::DATA_LAST,
        false,
        false,
        512,
    );
    assert_eq!(
        term_req(&hostile(&addr, true, &h2c)).fes,
        fes::INVALID_HEADER_FIELD
    );
    // A peer that sends half a header and goes away gets closed.
    assert!(hostile_then(&addr, true, &caps[..5], true).is_empty());
    // One that sends garbage and half-closes still gets its TermReq.
    let out = hostile_then(&addr, true, &[0x0B; 24], true);
    assert_eq!(term_req(&out).fes, fes::INVALID_HEADER_FIELD);
    // Many at once.
    let storm: Vec<_> = (0..16)
        .map(|i| {
            let a = addr.clone();
            std::thread::spawn(move || hostile(&a, i % 2 == 0, &[i as u8; 300]))
        })
        .collect();
    for h in storm {
        let out = h.join().expect("hostile thread");
        term_req(&out);
    }
    // Let the good host run a little longer than the attacks took.
    std::thread::sleep(Duration::from_millis(500).max(t0.elapsed() / 4));
    stop.store(true, Ordering::Release);
    let ops = good
        .join()
        .expect("good thread")
        .expect("the well-behaved host saw an error");
    assert!(
        ops > 10,
        "the well-behaved host made little progress: {ops} ops"
    );
    assert!(serve.alive(), "the target died");
    // And a new host still gets served.
    let ctrl =
        Controller::connect(&ConnectOptions::new(addr, NQN)).expect("connect after the storm");
    ctrl.shutdown().expect("shutdown");
}

#[test]
fn sigterm_exits_cleanly() {
    let mut serve = Serve::start(&["--ram", "8M"]);
    let ctrl = Controller::connect(&ConnectOptions::new(serve.addr.clone(), NQN)).expect("connect");
    let st = serve
        .signal(libc::SIGTERM)
        .expect("farflash serve did not exit after SIGTERM");
    assert!(st.success(), "exit status {st:?}");
    drop(ctrl);
}

#[test]
fn connections_beyond_the_cap_are_refused_and_slots_come_back() {
    let dir = std::env::temp_dir().join(format!("ff-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("cap.toml");
    std::fs::write(
        &cfg,
        "[transport]\nmax_connections = 2\n[[subsystem]]\nnqn = 'nqn.2026-11.io.farflash:default'\n[[subsystem.namespace]]\nbackend = 'ram'\nsize = '8M'\n",
    )
    .unwrap();
    let serve = Serve::start(&["--config", cfg.to_str().unwrap()]);
    let icreq = |s: &mut TcpStream| -> bool {
        let mut b = [0u8; 128];
        IcReq::default().encode(&mut b);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if s.write_all(&b).is_err() {
            return false;
        }
        let mut resp = [0u8; 128];
        s.read_exact(&mut resp).is_ok() && resp[0] == PduType::IcResp as u8
    };
    let mut a = TcpStream::connect(&serve.addr).unwrap();
    let mut b = TcpStream::connect(&serve.addr).unwrap();
    assert!(icreq(&mut a) && icreq(&mut b));
    let mut c = TcpStream::connect(&serve.addr).unwrap();
    assert!(!icreq(&mut c), "a third connection must be refused");
    drop(a);
    // The slot comes back once the target has seen the close.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut d = TcpStream::connect(&serve.addr).unwrap();
        if icreq(&mut d) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed connection's slot never came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(b);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_fin_right_behind_the_last_bytes_closes_promptly() {
    let serve = Serve::start(&["--ram", "8M"]);
    for icreq in [false, true] {
        let t0 = Instant::now();
        let mut half = vec![0u8; 72];
        write_header(&mut half, PduType::CapsuleCmd, 0, false, false, 0);
        // Half a header with the FIN in the same burst: no further epoll
        // event follows, so the target must notice the EOF by itself.
        let out = hostile_then(&serve.addr, icreq, &half[..5], true);
        assert!(out.is_empty(), "nothing is owed for half a header");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "took {:?} to close (icreq {icreq})",
            t0.elapsed()
        );
    }
}

/// Hostile DH-HMAC-CHAP peers (Base §8.13) against `serve --dhchap-key`:
/// every bad message gets the spec's AUTH_Failure1 reason code explanation
/// and ends that association; commands before authentication get
/// Authentication Required; a flood of re-authentications and all of it
/// leave a host without a key doing verified I/O undisturbed; no secret
/// reaches the log.
#[test]
fn hostile_authentication_gets_failure_reasons_and_disturbs_nobody() {
    use common::raw::{Peer, HOSTID, HOSTNQN};
    use farflash_auth::{DhGroup, HostAuth, HostConfig, HostStep, OsRandom, Secret};
    use farflash_wire::auth::{
        explanation as ex, AuthCmd, Failure, Message, Negotiate, Reply, AUTHID_DHCHAP,
        CONNECT_AUTHREQ_ATR,
    };
    use farflash_wire::sqe::SglDescriptor;
    use farflash_wire::{Sqe, Status};

    let secret = Secret::new(&[0x42; 32], None).unwrap();
    let dhhc = secret.to_dhhc().to_string();
    let log =
        std::env::temp_dir().join(format!("farflash-auth-hostile-{}.log", std::process::id()));
    let serve = Serve::start_logged(
        &[
            "--ram",
            "32M",
            "--dhchap-key",
            &format!("{HOSTNQN}={dhhc}"),
            "--dhchap-dhgroup",
            "ffdhe2048,null",
        ],
        "info",
        &log,
    );
    let addr = serve.addr.clone();
    let io = common::VerifiedIo::start(ConnectOptions::new(addr.clone(), NQN), 0, 4096);

    let send = |p: &mut Peer, b: &[u8]| -> Status {
        let (c, _) = p.call(AuthCmd::dhchap(b.len() as u32).to_sqe(0, true), b);
        c.status
    };
    let receive = |p: &mut Peer| -> (Status, Vec<u8>) {
        let mut sqe = AuthCmd::dhchap(4096).to_sqe(0, false);
        sqe.dptr = SglDescriptor::transport(4096);
        let (c, d) = p.call(sqe, &[]);
        (c.status, d)
    };
    let negotiate = |t_id: u16, hashes: &[u8], groups: &[u8]| {
        Message::Negotiate(Negotiate {
            t_id,
            sc_c: 0,
            napd: 1,
            authid: AUTHID_DHCHAP,
            hash_ids: hashes.to_vec(),
            dh_ids: groups.to_vec(),
        })
        .encode()
    };
    let admin = || {
        let mut p = Peer::ic(&addr, false, false);
        let c = p.admin_connect(5000);
        assert!(c.status.is_success());
        assert_ne!(c.dw0 & CONNECT_AUTHREQ_ATR, 0, "ATR set for a keyed host");
        p
    };
    // Each row: what the host sends after an optional honest negotiate;
    // the Failure1 explanation that must follow; then the association ends.
    let expect_failure1 = |p: &mut Peer, want: u8, row: &str| {
        let (st, d) = receive(p);
        assert_eq!(st, Status::SUCCESS, "{row}");
        match Message::decode(&d) {
            Ok(Message::Failure1(Failure { explanation, .. })) => {
                assert_eq!(explanation, want, "{row}: explanation")
            }
            other => panic!("{row}: expected AUTH_Failure1, got {other:?}"),
        }
        p.expect_closed(Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("{row}: the association did not end: {e}"));
    };
    let challenge = |p: &mut Peer, t_id: u16, group: u8| -> farflash_wire::auth::Challenge {
        assert_eq!(send(p, &negotiate(t_id, &[1], &[group])), Status::SUCCESS);
        let (st, d) = receive(p);
        assert_eq!(st, Status::SUCCESS);
        match Message::decode(&d) {
            Ok(Message::Challenge(c)) => c,
            other => panic!("expected a challenge, got {other:?}"),
        }
    };
    let reply = |c: &farflash_wire::auth::Challenge, t_id: u16, dhv: Vec<u8>| {
        Message::Reply(Reply {
            t_id,
            cvalid: false,
            seqnum: 0,
            response: vec![0; c.c1.len()],
            c2: vec![0; c.c1.len()],
            dhv,
        })
        .encode()
    };

    // Commands before authentication: Authentication Required (1h/91h).
    let mut p = admin();
    let (c, _) = p.call(
        Sqe {
            opcode: farflash_wire::opcode::admin::IDENTIFY,
            cdw10: 1,
            dptr: SglDescriptor::transport(4096),
            ..Sqe::default()
        },
        &[],
    );
    assert_eq!(c.status.code(), Status::AUTH_REQUIRED);
    // Field errors: SECP, TL 0, AL 0; receive with nothing under way.
    let mut bad = AuthCmd::dhchap(8).to_sqe(0, true);
    bad.cdw10 &= 0x00FF_FFFF;
    assert_eq!(p.call(bad, &[0; 8]).0.status.code(), Status::INVALID_FIELD);
    let tl0 = AuthCmd::dhchap(0).to_sqe(0, true);
    assert_eq!(p.call(tl0, &[]).0.status.code(), Status::INVALID_FIELD);
    let al0 = AuthCmd::dhchap(0).to_sqe(0, false);
    assert_eq!(p.call(al0, &[]).0.status.code(), Status::INVALID_FIELD);
    assert_eq!(receive(&mut p).0.code(), Status::COMMAND_SEQUENCE_ERROR);
    drop(p);

    type Row<'a> = (&'a str, Box<dyn Fn(&mut Peer) + 'a>, u8);
    let rows: Vec<Row> = vec![
        (
            "short message",
            Box::new(|p| assert_eq!(send(p, &[0, 0, 1, 0]), Status::SUCCESS)),
            ex::INCORRECT_PAYLOAD,
        ),
        (
            "unknown AUTH-TYPE",
            Box::new(|p| assert_eq!(send(p, &[9; 16]), Status::SUCCESS)),
            ex::INCORRECT_PROTOCOL_MESSAGE,
        ),
        (
            "unknown hash IDs",
            Box::new(|p| assert_eq!(send(p, &negotiate(1, &[0x7f], &[0])), Status::SUCCESS)),
            ex::HASH_UNUSABLE,
        ),
        (
            "unknown DH group IDs",
            Box::new(|p| assert_eq!(send(p, &negotiate(1, &[1], &[0x7e])), Status::SUCCESS)),
            ex::DHGROUP_UNUSABLE,
        ),
        (
            "reply before negotiate",
            Box::new(|p| {
                let c = farflash_wire::auth::Challenge {
                    t_id: 1,
                    hash_id: 1,
                    dhgid: 0,
                    seqnum: 1,
                    c1: vec![0; 32],
                    dhv: vec![],
                };
                assert_eq!(send(p, &reply(&c, 1, vec![])), Status::SUCCESS)
            }),
            ex::INCORRECT_PROTOCOL_MESSAGE,
        ),
        (
            "wrong transaction ID",
            Box::new(|p| {
                let c = challenge(p, 5, 0);
                assert_eq!(send(p, &reply(&c, 6, vec![])), Status::SUCCESS)
            }),
            ex::INCORRECT_PAYLOAD,
        ),
        (
            "empty DH value",
            Box::new(|p| {
                let c = challenge(p, 5, 1);
                assert_eq!(send(p, &reply(&c, 5, vec![])), Status::SUCCESS)
            }),
            ex::INCORRECT_PAYLOAD,
        ),
        (
            "oversized DH value",
            Box::new(|p| {
                let c = challenge(p, 5, 1);
                assert_eq!(send(p, &reply(&c, 5, vec![7; 300])), Status::SUCCESS)
            }),
            ex::DHGROUP_UNUSABLE,
        ),
        (
            "DH value 0",
            Box::new(|p| {
                let c = challenge(p, 5, 1);
                assert_eq!(send(p, &reply(&c, 5, vec![0; 256])), Status::SUCCESS)
            }),
            ex::DHGROUP_UNUSABLE,
        ),
        (
            "DH value 1",
            Box::new(|p| {
                let c = challenge(p, 5, 1);
                let mut one = vec![0; 256];
                one[255] = 1;
                assert_eq!(send(p, &reply(&c, 5, one)), Status::SUCCESS)
            }),
            ex::DHGROUP_UNUSABLE,
        ),
        (
            "DH value p-1",
            Box::new(|p| {
                let c = challenge(p, 5, 1);
                let mut pm1 = DhGroup::Ffdhe2048.prime_bytes().unwrap();
                pm1[255] -= 1;
                assert_eq!(send(p, &reply(&c, 5, pm1)), Status::SUCCESS)
            }),
            ex::DHGROUP_UNUSABLE,
        ),
        (
            "wrong response (secret)",
            Box::new(|p| {
                let c = challenge(p, 5, 0);
                assert_eq!(send(p, &reply(&c, 5, vec![])), Status::SUCCESS)
            }),
            ex::FAILED,
        ),
        (
            "replayed reply",
            Box::new(|p| {
                let mut h = HostAuth::new(
                    HostConfig::new(HOSTNQN, NQN, Secret::new(&[0x42; 32], None).unwrap(), None),
                    9,
                );
                assert_eq!(send(p, &h.negotiate().encode()), Status::SUCCESS);
                let (_, d) = receive(p);
                let HostStep::Send(r) = h.receive(&d, &mut OsRandom) else {
                    panic!("no reply")
                };
                assert_eq!(send(p, &r.encode()), Status::SUCCESS);
                let (_, d) = receive(p);
                assert!(matches!(h.receive(&d, &mut OsRandom), HostStep::Done(None)));
                assert_eq!(send(p, &r.encode()), Status::SUCCESS);
            }),
            ex::INCORRECT_PROTOCOL_MESSAGE,
        ),
    ];
    for (row, act, want) in &rows {
        let mut p = admin();
        act(&mut p);
        expect_failure1(&mut p, *want, row);
    }

    // Authentication on another host's controller: its I/O queue Connect
    // as a different host NQN is refused.
    let mut a = Peer::ic(&addr, false, false);
    let cntlid = a.admin_connect(5000).dw0 as u16;
    let mut other = Peer::ic(&addr, false, false);
    let d = Peer::connect_data(cntlid, NQN, "nqn.2014-08.org.nvmexpress:uuid:0ther", HOSTID);
    let (c, _) = other.call(Peer::connect_sqe(1, 31, 0), &d);
    assert_eq!(c.status.code(), Status::CONNECT_INVALID_PARAMETERS);
    // A flood of re-authentications on one authenticated queue (ffdhe2048
    // each): answered in turn, while the other host's I/O goes on.
    let mut h = HostAuth::new(HostConfig::new(HOSTNQN, NQN, secret.clone(), None), 100);
    let run = |p: &mut Peer, h: &mut HostAuth| {
        assert_eq!(send(p, &h.negotiate().encode()), Status::SUCCESS);
        loop {
            let (st, d) = receive(p);
            assert_eq!(st, Status::SUCCESS);
            match h.receive(&d, &mut OsRandom) {
                HostStep::Send(m) => assert_eq!(send(p, &m.encode()), Status::SUCCESS),
                HostStep::Done(_) => return,
                f => panic!("{f:?}"),
            }
        }
    };
    run(&mut a, &mut h);
    let t0 = Instant::now();
    for t_id in 101..141u16 {
        let mut h = HostAuth::new(HostConfig::new(HOSTNQN, NQN, secret.clone(), None), t_id);
        run(&mut a, &mut h);
    }
    let flood = t0.elapsed();
    // Authentication commands on a queue that needs none: the other host.
    let _ = other;
    let mut free = Peer::ic(&addr, false, false);
    let d = Peer::connect_data(
        0xFFFF,
        NQN,
        "nqn.2014-08.org.nvmexpress:uuid:no-key",
        HOSTID,
    );
    let (c, _) = free.call(Peer::connect_sqe(0, 31, 5000), &d);
    assert!(c.status.is_success());
    assert_eq!(c.dw0 & CONNECT_AUTHREQ_ATR, 0);
    assert_eq!(
        send(&mut free, &negotiate(1, &[1], &[0])).code(),
        Status::COMMAND_SEQUENCE_ERROR
    );

    let stats = io
        .finish()
        .expect("the host without a key kept doing verified I/O");
    assert!(stats.ops > 0);
    println!(
        "40 re-authentications (ffdhe2048) in {flood:?}; other host: {} ops, slowest {:?}",
        stats.ops, stats.max_op
    );
    assert!(
        stats.max_op < Duration::from_secs(2),
        "the other host's I/O stalled for {:?}",
        stats.max_op
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let b64 = dhhc.trim_end_matches(':').rsplit(':').next().unwrap();
    assert!(!text.contains(b64), "the secret reached the log");
    assert!(
        text.contains("authentication failed"),
        "failures are logged"
    );
    let _ = std::fs::remove_file(&log);
}
