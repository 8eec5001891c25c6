//! The thinnest NVMe/TCP host there can be, timed like the kernel-TCP floor
//! (`../shared/limits/tcp_rr.c`): one 4 KiB Read at a time on one I/O queue,
//! busy-polling `recv`, latency from the return of the `send` of a capsule to
//! the `recv` that completes its data. Set beside `tcp_rr` and `farflash
//! perf`, it splits the pair's QD 1 latency into the target's share (probe
//! minus floor) and the host library's and perf's share (perf minus probe):
//! see benches/probe.sh and docs/performance.md.
//!
//! cargo run --release --example qd1_probe -- ADDR:PORT NQN SECONDS
//!
//! Asks for SQ flow control to be disabled, as farflash's host does, so a
//! read's reply is one C2HData with SUCCESS (falls back to a trailing
//! CapsuleResp otherwise). Namespace 1, 512-byte or larger blocks.

use farflash_wire::fabrics::{
    ConnectCmd, ConnectData, PropertyCmd, CATTR_DISABLE_SQ_FLOW_CONTROL, CNTLID_DYNAMIC,
};
use farflash_wire::opcode::{fctype, io};
use farflash_wire::pdu::{self, flags, IcReq, PduType, IC_HLEN};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Cqe, Sqe, Status};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:9e0b0b43-5d2a-4c1e-9f3d-1f2f3a4b5c6d";
/// Capsule header (8) + SQE (64).
const CAPSULE: usize = 72;
/// C2HData header.
const C2H_HDR: usize = 24;
/// CapsuleResp: header (8) + CQE (16).
const RESP: usize = 24;
const IO_SIZE: usize = 4096;

fn capsule(sqe: &Sqe, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; CAPSULE + data.len()];
    let (pdo, plen) = pdu::write_header(&mut b, PduType::CapsuleCmd, 0, false, false, data.len());
    let mut raw = [0u8; 64];
    sqe.encode(&mut raw);
    b[8..CAPSULE].copy_from_slice(&raw);
    b[pdo..plen].copy_from_slice(data);
    b
}

/// Reads exactly `buf.len()` bytes, spinning on a non-blocking socket.
fn recv_exact(s: &mut TcpStream, buf: &mut [u8]) -> Res<()> {
    let mut have = 0;
    while have < buf.len() {
        match s.read(&mut buf[have..]) {
            Ok(0) => return Err("connection closed".into()),
            Ok(n) => have += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Sends one command capsule and returns its CQE (commands without data to the host).
fn command(s: &mut TcpStream, sqe: &Sqe, data: &[u8]) -> Res<Cqe> {
    s.write_all(&capsule(sqe, data))?;
    let mut r = [0u8; RESP];
    recv_exact(s, &mut r)?;
    if r[0] != PduType::CapsuleResp as u8 {
        return Err(format!("expected a CapsuleResp, got PDU type {:#x}", r[0]).into());
    }
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&r[8..RESP]);
    Ok(Cqe::decode(&raw))
}

fn check(what: &str, c: Cqe) -> Res<Cqe> {
    if c.status == Status::SUCCESS {
        Ok(c)
    } else {
        Err(format!("{what}: {}", c.status).into())
    }
}

/// TCP connection, ICReq/ICResp, Connect to queue `qid`.
fn queue(addr: &str, nqn: &str, qid: u16, cntlid: u16) -> Res<(TcpStream, Cqe)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let mut ic = [0u8; IC_HLEN];
    IcReq {
        pfv: 0,
        hpda: 0,
        dgst: 0,
        maxr2t: 0,
    }
    .encode(&mut ic);
    s.write_all(&ic)?;
    recv_exact(&mut s, &mut ic)?;
    let connect = ConnectCmd {
        recfmt: 0,
        qid,
        sqsize: 31,
        cattr: CATTR_DISABLE_SQ_FLOW_CONTROL,
        kato: if qid == 0 { 30_000 } else { 0 },
    };
    let mut data = [0u8; 1024];
    ConnectData {
        hostid: [0x5a; 16],
        cntlid,
        subnqn: nqn.into(),
        hostnqn: HOSTNQN.into(),
    }
    .encode(&mut data);
    let c = check("Connect", command(&mut s, &connect.to_sqe(0), &data)?)?;
    Ok((s, c))
}

fn main() -> Res<()> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 {
        return Err("usage: qd1_probe ADDR:PORT NQN SECONDS".into());
    }
    let secs: f64 = a[3].parse()?;
    let (mut admin, c) = queue(&a[1], &a[2], 0, CNTLID_DYNAMIC)?;
    let cntlid = c.dw0 as u16;
    let enable = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: props::cc::ENABLE_DEFAULT as u64,
    };
    check(
        "Property Set CC",
        command(&mut admin, &enable.to_sqe(1, fctype::PROPERTY_SET), &[])?,
    )?;
    std::thread::sleep(Duration::from_millis(10)); // CSTS.RDY follows CC.EN at once here
    let (mut q, _) = queue(&a[1], &a[2], 1, cntlid)?;

    let mut read = Sqe {
        opcode: io::READ,
        flags: PSDT_SGL,
        nsid: 1,
        dptr: SglDescriptor::transport(IO_SIZE as u32),
        ..Sqe::default()
    };
    let mut reply = vec![0u8; C2H_HDR + IO_SIZE + RESP];
    let mut lat = Vec::with_capacity(1 << 22);
    let mut lba = 0x9e37_79b9_7f4a_7c15u64;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut ops = 0u64;
    let mut pdu = capsule(&read, &[]);
    while Instant::now() < end {
        // A fresh CID and a random 4 KiB-aligned LBA in the first GiB (512-byte blocks).
        lba = lba
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        read.cid = (ops & 0xff) as u16;
        read.cdw10 = ((lba >> 33) % (1 << 21)) as u32 & !7;
        read.cdw12 = (IO_SIZE / 512 - 1) as u32;
        let mut raw = [0u8; 64];
        read.encode(&mut raw);
        pdu[8..CAPSULE].copy_from_slice(&raw);
        q.write_all(&pdu)?;
        let sent = Instant::now();
        recv_exact(&mut q, &mut reply[..C2H_HDR + IO_SIZE])?;
        if reply[0] != PduType::C2HData as u8 {
            return Err(format!("expected C2HData, got PDU type {:#x}", reply[0]).into());
        }
        if reply[1] & flags::DATA_SUCCESS == 0 {
            recv_exact(&mut q, &mut reply[C2H_HDR + IO_SIZE..])?;
        }
        lat.push(sent.elapsed().as_secs_f64() * 1e6);
        ops += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |p: usize| lat.get(lat.len() * p / 100).copied().unwrap_or(0.0);
    println!(
        "qd1_probe ops/s={:.0} p50_us={:.1} p99_us={:.1}",
        ops as f64 / el,
        pct(50),
        pct(99)
    );
    Ok(())
}
