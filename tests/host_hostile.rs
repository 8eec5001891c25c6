//! The host against hostile or broken targets on 127.0.0.1 (a few lines of
//! fake controller each): every failure is a typed error, within the
//! timeout, never a hang or a panic.

use farflash_host::{ConnectOptions, Controller, HostError, TransportError};
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::pdu::{self, IcResp, PduType, TermReq, IC_HLEN};
use farflash_wire::{Cqe, Status};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Accepts one connection on a free port and hands it to `f` in a thread.
fn fake(f: impl FnOnce(TcpStream) + Send + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        if let Ok((s, _)) = l.accept() {
            f(s)
        }
    });
    addr
}

fn opts(addr: &str) -> ConnectOptions {
    let mut o = ConnectOptions::new(addr, "nqn.2026-11.io.farflash.test:hostile");
    o.command_timeout = Duration::from_millis(800);
    o.connect_timeout = Duration::from_secs(2);
    o
}

fn read_icreq(s: &mut TcpStream) {
    let mut b = [0u8; IC_HLEN];
    let _ = s.read_exact(&mut b);
}

fn icresp(pfv: u16, maxh2cdata: u32) -> [u8; IC_HLEN] {
    let mut b = [0u8; IC_HLEN];
    IcResp {
        pfv,
        cpda: 0,
        dgst: 0,
        maxh2cdata,
    }
    .encode(&mut b);
    b
}

fn capsule_resp(cid: u16, status: Status) -> [u8; 24] {
    let mut b = [0u8; 24];
    pdu::write_header(&mut b, PduType::CapsuleResp, 0, false, false, 0);
    let mut c = [0u8; CQE_SIZE];
    Cqe {
        cid,
        status,
        ..Cqe::default()
    }
    .encode(&mut c);
    b[8..24].copy_from_slice(&c);
    b
}

/// Reads one CapsuleCmd (72 bytes + in-capsule data) and returns its CID.
fn read_capsule(s: &mut TcpStream) -> Option<u16> {
    let mut ch = [0u8; 8];
    s.read_exact(&mut ch).ok()?;
    let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
    let mut rest = vec![0u8; plen.checked_sub(8)?];
    s.read_exact(&mut rest).ok()?;
    Some(u16::from_le_bytes([rest[2], rest[3]]))
}

fn connect_err(addr: &str) -> (HostError, Duration) {
    let t = Instant::now();
    match Controller::connect(&opts(addr)) {
        Ok(_) => panic!("connect to a hostile target succeeded"),
        Err(e) => (e, t.elapsed()),
    }
}

#[test]
fn silent_target_times_out() {
    let addr = fake(|mut s| {
        read_icreq(&mut s);
        std::thread::sleep(Duration::from_secs(5));
    });
    let (e, t) = connect_err(&addr);
    assert!(matches!(e, HostError::Timeout(_)), "{e}");
    assert!(t < Duration::from_secs(3), "{t:?}");
}

#[test]
fn target_closing_is_a_transport_error() {
    let addr = fake(drop);
    let (e, _) = connect_err(&addr);
    assert!(
        matches!(
            e,
            HostError::Transport(TransportError::Closed) | HostError::Io(_)
        ),
        "{e}"
    );
}

#[test]
fn bad_icresp_and_garbage_are_typed() {
    let addr = fake(|mut s| {
        read_icreq(&mut s);
        let _ = s.write_all(&icresp(7, 8192));
        std::thread::sleep(Duration::from_millis(500));
    });
    let (e, _) = connect_err(&addr);
    assert!(
        matches!(e, HostError::Transport(TransportError::BadIcResp(_))),
        "{e}"
    );

    let addr = fake(|mut s| {
        read_icreq(&mut s);
        let _ = s.write_all(&[0xEE; 300]);
        std::thread::sleep(Duration::from_millis(500));
    });
    let (e, _) = connect_err(&addr);
    assert!(
        matches!(e, HostError::Transport(TransportError::BadPdu { .. })),
        "{e}"
    );
}

#[test]
fn term_req_is_reported_with_fes_and_fei() {
    let addr = fake(|mut s| {
        read_icreq(&mut s);
        let mut b = [0u8; 64];
        let n = TermReq { fes: 1, fei: 10 }.encode(&mut b, PduType::C2HTermReq, &[0; 8]);
        let _ = s.write_all(&b[..n]);
        std::thread::sleep(Duration::from_millis(500));
    });
    let (e, _) = connect_err(&addr);
    assert!(
        matches!(
            e,
            HostError::Transport(TransportError::TermReq { fes: 1, fei: 10 })
        ),
        "{e}"
    );
}

#[test]
fn connect_status_and_wrong_cid() {
    // The admin Connect is refused: an NVMe status error.
    let addr = fake(|mut s| {
        read_icreq(&mut s);
        let _ = s.write_all(&icresp(0, 8192));
        if let Some(cid) = read_capsule(&mut s) {
            let _ = s.write_all(&capsule_resp(cid, Status::CONNECT_INVALID_HOST.dnr()));
        }
        std::thread::sleep(Duration::from_millis(500));
    });
    let (e, _) = connect_err(&addr);
    assert_eq!(
        e.status().map(|s| s.code()),
        Some(Status::CONNECT_INVALID_HOST),
        "{e}"
    );

    // A completion for a command never sent: a fatal PDU error.
    let addr = fake(|mut s| {
        read_icreq(&mut s);
        let _ = s.write_all(&icresp(0, 8192));
        if let Some(cid) = read_capsule(&mut s) {
            let _ = s.write_all(&capsule_resp(cid.wrapping_add(7), Status::SUCCESS));
        }
        std::thread::sleep(Duration::from_millis(500));
    });
    let (e, _) = connect_err(&addr);
    assert!(
        matches!(e, HostError::Transport(TransportError::BadPdu { .. })),
        "{e}"
    );
}

// ----- in-band authentication (DH-HMAC-CHAP) against hostile controllers

use farflash_auth::{DhGroup, Secret};
use farflash_wire::auth::{
    explanation as ex, Challenge, Failure, Message, Success1, CONNECT_AUTHREQ_ASCR,
    CONNECT_AUTHREQ_ATR, REASON_FAILED,
};
use farflash_wire::pdu::DataHeader;
use std::sync::mpsc;

/// One command capsule: CID, FCTYPE (for Fabrics commands) and its
/// in-capsule data.
fn read_command(s: &mut TcpStream) -> Option<(u16, u8, Vec<u8>)> {
    let mut ch = [0u8; 8];
    s.read_exact(&mut ch).ok()?;
    let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
    let mut rest = vec![0u8; plen.checked_sub(8)?];
    s.read_exact(&mut rest).ok()?;
    let cid = u16::from_le_bytes([rest[2], rest[3]]);
    let fctype = rest[4];
    let pdo = (ch[3] as usize).max(72);
    let data = rest.get(pdo - 8..).unwrap_or(&[]).to_vec();
    Some((cid, fctype, data))
}

fn resp_dw0(cid: u16, dw0: u32) -> [u8; 24] {
    let mut b = capsule_resp(cid, Status::SUCCESS);
    b[8..12].copy_from_slice(&dw0.to_le_bytes());
    b
}

fn c2h(cid: u16, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 24 + data.len()];
    let (pdo, plen) = DataHeader {
        cccid: cid,
        ttag: 0,
        offset: 0,
        length: data.len() as u32,
    }
    .encode(
        &mut b,
        PduType::C2HData,
        pdu::flags::DATA_LAST,
        false,
        false,
        data.len(),
    );
    b[pdo..pdo + data.len()].copy_from_slice(data);
    b.truncate(plen);
    b
}

/// A controller that answers the admin Connect with `dw0`, then each
/// Authentication Receive with the next of `answers` (given the host's
/// T_ID), and reports every Authentication Send's data.
fn auth_fake(dw0: u32, answers: Vec<fn(u16) -> Vec<u8>>) -> (String, mpsc::Receiver<Vec<u8>>) {
    let (tx, rx) = mpsc::channel();
    let addr = fake(move |mut s| {
        read_icreq(&mut s);
        let _ = s.write_all(&icresp(0, 8192));
        let Some((cid, _, _)) = read_command(&mut s) else {
            return;
        };
        let _ = s.write_all(&resp_dw0(cid, dw0));
        let mut answers = answers.into_iter();
        let mut t_id = 0;
        while let Some((cid, fctype, data)) = read_command(&mut s) {
            match fctype {
                0x05 => {
                    if let Ok(m) = Message::decode(&data) {
                        t_id = m.t_id();
                    }
                    let _ = tx.send(data);
                    let _ = s.write_all(&capsule_resp(cid, Status::SUCCESS));
                }
                0x06 => match answers.next() {
                    Some(a) => {
                        let mut d = a(t_id);
                        d.resize(4096, 0);
                        let _ = s.write_all(&c2h(cid, &d));
                        let _ = s.write_all(&capsule_resp(cid, Status::SUCCESS));
                    }
                    // Silence: the host's command timeout must end it.
                    None => std::thread::sleep(Duration::from_secs(3)),
                },
                _ => break,
            }
        }
    });
    (addr, rx)
}

fn auth_opts(addr: &str, ctrl: bool) -> ConnectOptions {
    let mut o = opts(addr);
    o.dhchap_secret = Some(Secret::new(&[1; 32], None).unwrap());
    if ctrl {
        o.dhchap_ctrl_secret = Some(Secret::new(&[2; 32], None).unwrap());
    }
    o
}

fn challenge(t_id: u16, hash_id: u8, dhgid: u8, dhv: Vec<u8>) -> Vec<u8> {
    Message::Challenge(Challenge {
        t_id,
        hash_id,
        dhgid,
        seqnum: 7,
        c1: vec![0x33; 32],
        dhv,
    })
    .encode()
}

/// The AUTH_Failure2 explanation among the host's sends, if any.
fn failure2(rx: &mpsc::Receiver<Vec<u8>>) -> Option<u8> {
    rx.try_iter().find_map(|d| match Message::decode(&d) {
        Ok(Message::Failure2(f)) => Some(f.explanation),
        _ => None,
    })
}

#[test]
fn authentication_required_without_a_secret_or_with_tls_is_refused() {
    let (addr, _rx) = auth_fake(CONNECT_AUTHREQ_ATR, vec![]);
    let (e, _) = connect_err(&addr);
    assert!(e.to_string().contains("--dhchap-secret"), "{e}");
    let (addr, _rx) = auth_fake(CONNECT_AUTHREQ_ATR | CONNECT_AUTHREQ_ASCR, vec![]);
    let e = Controller::connect(&auth_opts(&addr, false))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("secure channel"), "{e}");
    // A controller secret, and a controller that never asks: refused.
    let (addr, _rx) = auth_fake(0, vec![]);
    let e = Controller::connect(&auth_opts(&addr, true))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("did not ask"), "{e}");
}

#[test]
fn hostile_challenges_get_failure2_with_the_reason() {
    /// (row, the controller's answers, bidirectional, Failure2 explanation)
    type Row = (&'static str, Vec<fn(u16) -> Vec<u8>>, bool, Option<u8>);
    let rows: Vec<Row> = vec![
        (
            "garbage",
            vec![|_| vec![0xEE; 40]],
            false,
            Some(ex::INCORRECT_PROTOCOL_MESSAGE),
        ),
        (
            "HL not the hash length",
            vec![|t| {
                Message::Challenge(Challenge {
                    t_id: t,
                    hash_id: 1,
                    dhgid: 0,
                    seqnum: 7,
                    c1: vec![0x33; 48],
                    dhv: vec![],
                })
                .encode()
            }],
            false,
            Some(ex::HASH_UNUSABLE),
        ),
        (
            "wrong transaction ID",
            vec![|t| challenge(t ^ 0x55, 1, 0, vec![])],
            false,
            Some(ex::INCORRECT_PROTOCOL_MESSAGE),
        ),
        (
            "unknown hash",
            vec![|t| challenge(t, 0x7f, 0, vec![])],
            false,
            Some(ex::HASH_UNUSABLE),
        ),
        (
            "unknown DH group",
            vec![|t| challenge(t, 1, 0x7e, vec![])],
            false,
            Some(ex::DHGROUP_UNUSABLE),
        ),
        (
            "empty DH value",
            vec![|t| challenge(t, 1, 1, vec![])],
            false,
            Some(ex::DHGROUP_UNUSABLE),
        ),
        (
            "DH value p-1",
            vec![|t| {
                let mut v = DhGroup::Ffdhe2048.prime_bytes().unwrap();
                v[255] -= 1;
                challenge(t, 1, 1, v)
            }],
            false,
            Some(ex::INCORRECT_PAYLOAD),
        ),
        (
            "DH value with the null group",
            vec![|t| challenge(t, 1, 0, vec![5; 256])],
            false,
            Some(ex::INCORRECT_PAYLOAD),
        ),
        (
            "success1 before the challenge",
            vec![|t| {
                Message::Success1(Success1 {
                    t_id: t,
                    hl: 32,
                    response: None,
                })
                .encode()
            }],
            false,
            Some(ex::INCORRECT_PROTOCOL_MESSAGE),
        ),
        (
            "wrong controller response",
            vec![|t| challenge(t, 1, 0, vec![]), |t| {
                Message::Success1(Success1 {
                    t_id: t,
                    hl: 32,
                    response: Some(vec![9; 32]),
                })
                .encode()
            }],
            true,
            Some(ex::FAILED),
        ),
        (
            "missing controller response",
            vec![|t| challenge(t, 1, 0, vec![]), |t| {
                Message::Success1(Success1 {
                    t_id: t,
                    hl: 32,
                    response: None,
                })
                .encode()
            }],
            true,
            Some(ex::FAILED),
        ),
        (
            "AUTH_Failure1",
            vec![|t| {
                Message::Failure1(Failure {
                    t_id: t,
                    reason: REASON_FAILED,
                    explanation: ex::FAILED,
                })
                .encode()
            }],
            false,
            None,
        ),
    ];
    for (row, answers, bidi, want) in rows {
        let (addr, rx) = auth_fake(CONNECT_AUTHREQ_ATR, answers);
        let t = Instant::now();
        let e = Controller::connect(&auth_opts(&addr, bidi))
            .err()
            .unwrap_or_else(|| panic!("{row}: connect succeeded"));
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{row}: {:?}",
            t.elapsed()
        );
        let text = e.to_string();
        assert!(text.contains("DH-HMAC-CHAP failed"), "{row}: {text}");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(failure2(&rx), want, "{row}: AUTH_Failure2 sent ({text})");
    }
    // A controller that never answers the Receive: the command timeout.
    let (addr, _rx) = auth_fake(CONNECT_AUTHREQ_ATR, vec![]);
    let t = Instant::now();
    let e = Controller::connect(&auth_opts(&addr, false))
        .err()
        .expect("timed out");
    assert!(matches!(e, HostError::Timeout(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));
}
