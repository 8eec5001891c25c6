//! Issue 29: three things hosts send that the specifications allow (or leave
//! to the controller) and that Linux nvmet and SPDK accept, which farflash
//! used to refuse. Each test replays, over TCP on 127.0.0.1 against
//! `farflash serve`, the PDU sequence such a host sends from its ICReq to
//! its first I/O, and then does verified I/O on that connection: writes a
//! pattern (in-capsule and by R2T/H2CData), reads it back and compares.
//!
//! 1. CapsuleCmd PDUs without data whose PDO is the header length (72), not
//!    0 (TCP §3.6.2.6): was a C2HTermReq, FES 01h FEI 3.
//! 2. CC.EN = 1 with CC.CSS = 110b, "All Supported I/O Command Sets"
//!    (Base §3.1.3.5): was CSTS.CFS.
//! 3. An I/O queue Connect whose HOSTID is not the admin queue's
//!    (Fabrics §6.3): was Connect Invalid Parameters (HOSTID).

mod common;

use common::raw::{Got, Pdu, Peer, HOSTID, HOSTNQN};
use common::{Serve, NQN};
use farflash_host::cmd;
use farflash_wire::fabrics::CNTLID_DYNAMIC;
use farflash_wire::identify::{IdCtrl, IdNs};
use farflash_wire::opcode::{cns, feature};
use farflash_wire::pdu::{self, PduType};
use farflash_wire::props::{self, cc, csts};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{Sqe, Status};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// What the replayed host does differently from farflash's own host.
#[derive(Clone, Copy, Debug)]
struct Host {
    /// PDO of every CapsuleCmd that carries no data.
    pdo_no_data: u8,
    /// CC.CSS written with CC.EN.
    css: u32,
    /// HOSTID of the I/O queue's Connect (the admin queue uses [`HOSTID`]).
    io_hostid: [u8; 16],
    /// Header and data digests on both connections.
    digests: bool,
}

const PLAIN: Host = Host {
    pdo_no_data: 0,
    css: cc::CSS_NVM,
    io_hostid: HOSTID,
    digests: false,
};

/// Sends `sqe` (fresh CID, PSDT SGL) with in-capsule data `icd`; a capsule
/// without data gets `pdo` in its PDO (and its header digest recomputed).
fn submit(p: &mut Peer, mut sqe: Sqe, icd: &[u8], pdo: u8) -> u16 {
    sqe.cid = p.next_cid();
    sqe.flags |= PSDT_SGL;
    if !icd.is_empty() && sqe.dptr == SglDescriptor::default() {
        sqe.dptr = SglDescriptor::in_capsule(icd.len() as u32);
    }
    let mut b = p.capsule(&sqe, icd);
    if icd.is_empty() {
        assert_eq!(b.len(), pdu::CAPSULE_CMD_HLEN + 4 * p.hd as usize);
        b[3] = pdo;
        pdu::seal_header(&mut b, PduType::CapsuleCmd, p.hd);
    }
    p.send(&b);
    sqe.cid
}

/// [`submit`] and the completion (with any C2HData before it); the status
/// must be `SUCCESS`.
fn call(p: &mut Peer, h: &Host, what: &str, sqe: Sqe, icd: &[u8]) -> (u64, Vec<u8>) {
    let cid = submit(p, sqe, icd, h.pdo_no_data);
    let (c, data) = p.expect_resp(cid);
    assert_eq!(c.status, Status::SUCCESS, "{what} ({h:?})");
    (c.dw0 as u64 | (c.dw1 as u64) << 32, data)
}

/// `sqe` with a Command Data Buffer of `len` bytes (TCP §3.3.2).
fn c2h(mut sqe: Sqe, len: u32) -> Sqe {
    sqe.dptr = SglDescriptor::transport(len);
    sqe
}

/// The block pattern of LBA `lba` in pass `pass`.
fn pattern(lba: u64, pass: u8, bs: usize) -> Vec<u8> {
    (0..bs)
        .map(|i| (i as u8).wrapping_mul(31) ^ (lba as u8).wrapping_mul(7) ^ pass)
        .collect()
}

/// The whole sequence: admin queue bring-up as the host does it, an I/O
/// queue, then verified I/O on it. Returns the number of blocks verified.
fn replay(addr: &str, h: Host) -> usize {
    // Admin queue: ICReq, Connect (its 1 KiB of data in the capsule).
    let mut admin = Peer::ic(addr, h.digests, h.digests);
    let d = Peer::connect_data(CNTLID_DYNAMIC, NQN, HOSTNQN, HOSTID);
    let (dw0, _) = call(
        &mut admin,
        &h,
        "admin Connect",
        Peer::connect_sqe(0, 31, 30_000),
        &d,
    );
    let cntlid = dw0 as u16;
    // Property Get CAP (8 bytes) and VS, Property Set CC, Property Get CSTS:
    // capsules without data.
    let (cap, _) = call(
        &mut admin,
        &h,
        "Property Get CAP",
        cmd::property_get(props::CAP, true),
        &[],
    );
    assert_ne!(cap >> 37 & 1, 0, "CAP.CSS: NVM Command Set");
    let (vs, _) = call(
        &mut admin,
        &h,
        "Property Get VS",
        cmd::property_get(props::VS, false),
        &[],
    );
    assert_eq!(vs as u32, props::VERSION_2_0);
    call(
        &mut admin,
        &h,
        "Property Set CC.EN",
        cmd::property_set(props::CC, cc::ENABLE_DEFAULT | h.css << 4),
        &[],
    );
    let (st, _) = call(
        &mut admin,
        &h,
        "Property Get CSTS",
        cmd::property_get(props::CSTS, false),
        &[],
    );
    assert_eq!(st as u32 & (csts::RDY | csts::CFS), csts::RDY, "{h:?}");
    let (cc_now, _) = call(
        &mut admin,
        &h,
        "Property Get CC",
        cmd::property_get(props::CC, false),
        &[],
    );
    assert_eq!(cc::css(cc_now as u32), h.css, "CC reads back as written");
    // Identify Controller and Namespace 1, Number of Queues, Keep Alive.
    let (_, id) = call(
        &mut admin,
        &h,
        "Identify Controller",
        c2h(cmd::identify(cns::CONTROLLER, 0), 4096),
        &[],
    );
    let ctrl = IdCtrl::decode(&id);
    assert_eq!(ctrl.cntlid, cntlid);
    let (_, id) = call(
        &mut admin,
        &h,
        "Identify Namespace",
        c2h(cmd::identify(cns::NAMESPACE, 1), 4096),
        &[],
    );
    let ns = IdNs::decode(&id);
    let bs = 1usize << ns.lbads;
    assert!(ns.nsze >= 64, "namespace 1 has {} blocks", ns.nsze);
    call(
        &mut admin,
        &h,
        "Set Features Number of Queues",
        cmd::set_features(feature::NUMBER_OF_QUEUES, 0),
        &[],
    );
    call(&mut admin, &h, "Keep Alive", cmd::keep_alive(), &[]);
    // Get Features Host Identifier (EXHID): the admin queue's HOSTID.
    let mut hid = cmd::get_features(feature::HOST_IDENTIFIER);
    hid.cdw11 = 1;
    let (_, got) = call(
        &mut admin,
        &h,
        "Get Features Host Identifier",
        c2h(hid, 16),
        &[],
    );
    assert_eq!(got, HOSTID, "the Host Identifier is the admin queue's");

    // I/O queue 1: ICReq, Connect with the I/O queue's HOSTID.
    let mut io = Peer::ic(addr, h.digests, h.digests);
    let d = Peer::connect_data(cntlid, NQN, HOSTNQN, h.io_hostid);
    let (dw0, _) = call(
        &mut io,
        &h,
        "I/O queue Connect",
        Peer::connect_sqe(1, 31, 0),
        &d,
    );
    assert_eq!(dw0 as u16, cntlid);

    // Verified I/O: one block in the capsule, eight by R2T, read both back.
    let icd_blocks = ((ctrl.ioccsz as usize * 16).saturating_sub(64) / bs).clamp(1, 4);
    let mut verified = 0;
    for pass in 0..2u8 {
        let base = 8 + pass as u64 * 16;
        let data: Vec<u8> = (0..icd_blocks as u64)
            .flat_map(|i| pattern(base + i, pass, bs))
            .collect();
        call(
            &mut io,
            &h,
            "in-capsule Write",
            cmd::rw(true, 1, base, icd_blocks as u32),
            &data,
        );
        let r2t_base = base + icd_blocks as u64;
        let big: Vec<u8> = (0..8u64)
            .flat_map(|i| pattern(r2t_base + i, pass, bs))
            .collect();
        let mut w = cmd::rw(true, 1, r2t_base, 8);
        w.dptr = SglDescriptor::transport(big.len() as u32);
        let cid = submit(&mut io, w, &[], h.pdo_no_data);
        let r2t = match io.recv() {
            Got::Pdu(Pdu::R2T(r)) => r,
            other => panic!("expected an R2T for CID {cid}: {other:?}"),
        };
        assert_eq!((r2t.cccid, r2t.offset, r2t.length), (cid, 0, 8 * bs as u32));
        let b = io.h2c(cid, r2t.ttag, 0, &big, true);
        io.send(&b);
        let (c, _) = io.expect_resp(cid);
        assert_eq!(c.status, Status::SUCCESS, "R2T Write ({h:?})");
        call(&mut io, &h, "Flush", cmd::flush(1), &[]);
        // Read both extents back in one command and compare.
        let n = icd_blocks as u32 + 8;
        let r = c2h(cmd::rw(false, 1, base, n), n * bs as u32);
        let (_, got) = call(&mut io, &h, "Read", r, &[]);
        let want: Vec<u8> = data.iter().chain(big.iter()).copied().collect();
        assert_eq!(got.len(), want.len(), "Read length");
        assert!(
            got == want,
            "read back differs from what was written ({h:?})"
        );
        verified += n as usize;
    }
    // Both connections still answer on their admin queue.
    call(&mut admin, &h, "Keep Alive", cmd::keep_alive(), &[]);
    verified
}

fn serve() -> Serve {
    Serve::start(&["--ram", "16M"])
}

#[test]
fn capsules_without_data_with_pdo_at_the_header_length() {
    let s = serve();
    // PDO = HLEN, as the third-party host sends; with header digests on, both
    // HLEN and HLEN + HDGST (the end of the header) are what hosts may mean.
    for (pdo, digests) in [(72, false), (72, true), (76, true)] {
        let h = Host {
            pdo_no_data: pdo,
            digests,
            ..PLAIN
        };
        assert!(replay(&s.addr, h) > 0);
    }
}

#[test]
fn cc_css_all_supported_io_command_sets() {
    let s = serve();
    let h = Host {
        css: cc::CSS_ALL_IO,
        ..PLAIN
    };
    assert!(replay(&s.addr, h) > 0);
}

#[test]
fn io_queue_connect_with_a_different_hostid() {
    let s = serve();
    let mut other = HOSTID;
    other[15] ^= 0xFF;
    let h = Host {
        io_hostid: other,
        ..PLAIN
    };
    assert!(replay(&s.addr, h) > 0);
}

/// The `/metrics` text of a `farflash serve --metrics` at `addr`.
fn scrape(addr: &str) -> String {
    let get = || -> Option<String> {
        let mut s = TcpStream::connect(addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.starts_with("HTTP/1.1 200").then_some(out)
    };
    let mut text = None;
    let up = common::eventually(Duration::from_secs(10), || {
        text = get();
        text.is_some()
    });
    assert!(up, "no /metrics at {addr}");
    text.unwrap_or_default()
}

/// The value of `farflash_tolerated_total{what="..."}` in a scrape.
fn tolerated(text: &str, what: &str) -> Option<u64> {
    let key = format!("farflash_tolerated_total{{what=\"{what}\"}}");
    text.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn the_third_party_host_with_all_three() {
    let mport = common::free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let s = Serve::start(&["--ram", "16M", "--metrics", &maddr]);
    let text = scrape(&maddr);
    assert_eq!(tolerated(&text, "pdo_without_data"), Some(0), "{text}");
    let h = Host {
        pdo_no_data: 72,
        css: cc::CSS_ALL_IO,
        io_hostid: [0x42; 16],
        digests: false,
    };
    assert!(replay(&s.addr, h) > 0);
    // The oddities are counted for the operator.
    let text = scrape(&maddr);
    let pdo = tolerated(&text, "pdo_without_data").unwrap_or(0);
    assert!(pdo >= 10, "PDO 72 capsules counted: {pdo}\n{text}");
    assert_eq!(tolerated(&text, "io_connect_other_hostid"), Some(1));
    assert_eq!(tolerated(&text, "digest_flag_without_digest"), Some(0));
}
