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
