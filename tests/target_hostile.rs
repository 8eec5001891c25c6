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
