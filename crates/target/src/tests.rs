//! Drives a `QueuePair` with crafted PDUs, no socket: the protocol paths a
//! real host takes, and the hostile inputs it must survive.

use crate::config::{Config, NamespaceConfig, Size, SubsystemConfig, TransportConfig};
use crate::subsystem::build_subsystems;
use crate::{QueuePair, Target};
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::identify::IdCtrl;
use farflash_wire::opcode::{admin, cns, fctype, io};
use farflash_wire::pdu::{
    self, fes, flags, DataHeader, Framing, IcReq, IcResp, Negotiated, PduType, TermReq,
};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Cqe, Sqe, Status};
use std::sync::Arc;

const NQN: &str = "nqn.2026-11.io.farflash:test";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:test-host";

fn target_with(allowed: Vec<String>, transport: TransportConfig) -> Arc<Target> {
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: transport.clone(),
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            serial: None,
            model: None,
            allowed_hosts: allowed,
            namespaces: vec![NamespaceConfig {
                nsid: None,
                backend: crate::config::BackendKind::Ram,
                path: None,
                size: Some(Size(8 << 20)),
                block_size: Some(512),
                uuid: None,
                nguid: None,
            }],
        }],
    };
    let subs = build_subsystems(&cfg).unwrap();
    Target::new(subs, transport, vec!["127.0.0.1:4420".parse().unwrap()])
}

fn target() -> Arc<Target> {
    target_with(vec![], TransportConfig::default())
}

/// A minimal host: builds PDUs and parses what the queue sends back.
struct Host {
    q: QueuePair,
    hd: bool,
    dd: bool,
    cid: u16,
}

#[derive(Debug)]
enum Rx {
    Resp(Cqe),
    Data(DataHeader, Vec<u8>, u8),
    R2T(DataHeader),
    Term(TermReq),
    IcResp(IcResp),
}

impl Host {
    fn new(t: &Arc<Target>) -> Host {
        let a = "127.0.0.1:4420".parse().unwrap();
        let p = "127.0.0.1:50000".parse().unwrap();
        Host {
            q: QueuePair::new(t.clone(), a, p),
            hd: false,
            dd: false,
            cid: 0,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        // Feed in odd-sized pieces to exercise reassembly.
        for chunk in bytes.chunks(37) {
            let space = self.q.rx_space();
            space[..chunk.len()].copy_from_slice(chunk);
            self.q.on_received(chunk.len());
        }
        self.q.commit();
        while self.q.in_flight() > 0 {
            self.q.poll_backends();
        }
    }

    fn recv_all(&mut self) -> Vec<Rx> {
        let out = self.q.take_output();
        let neg = Negotiated {
            initialized: true,
            hdgst: self.hd,
            ddgst: self.dd,
            rx_pda: 0,
            max_data: 1 << 24,
        };
        let mut v = Vec::new();
        let mut off = 0;
        while off < out.len() {
            let b = &out[off..];
            let ty = PduType::from_u8(b[0]).unwrap();
            let f = if ty == PduType::IcResp {
                Framing::parse(b, &Negotiated::default(), false).unwrap()
            } else {
                Framing::parse(b, &neg, false).unwrap()
            };
            let p = &b[..f.plen];
            if f.hdgst {
                assert_eq!(
                    &p[f.hlen..f.hlen + 4],
                    &pdu::hdgst(&p[..f.hlen]),
                    "header digest"
                );
            }
            let data = p[f.data_off..f.data_off + f.data_len].to_vec();
            if f.ddgst {
                let at = f.data_off + f.data_len;
                assert_eq!(
                    &p[at..at + 4],
                    &farflash_wire::digest::crc32c(&data).to_le_bytes(),
                    "data digest"
                );
            }
            v.push(match ty {
                PduType::IcResp => Rx::IcResp(IcResp::decode(p)),
                PduType::CapsuleResp => {
                    let mut raw = [0u8; 16];
                    raw.copy_from_slice(&p[8..24]);
                    Rx::Resp(Cqe::decode(&raw))
                }
                PduType::C2HData => Rx::Data(DataHeader::decode(p), data, f.flags),
                PduType::R2T => Rx::R2T(DataHeader::decode(p)),
                PduType::C2HTermReq => Rx::Term(TermReq::decode(p)),
                t => panic!("unexpected {t:?}"),
            });
            off += f.plen;
        }
        v
    }

    fn icreq(&mut self, hd: bool, dd: bool) -> IcResp {
        let mut b = [0u8; 128];
        IcReq {
            pfv: 0,
            hpda: 0,
            dgst: hd as u8 | (dd as u8) << 1,
            maxr2t: 0,
        }
        .encode(&mut b);
        self.feed(&b);
        self.hd = hd;
        self.dd = dd;
        match self.recv_all().pop() {
            Some(Rx::IcResp(r)) => r,
            other => panic!("no ICResp: {other:?}"),
        }
    }

    fn capsule(&mut self, sqe: &Sqe, icd: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 72 + 4 + icd.len() + 4];
        let (pdo, plen) =
            pdu::write_header(&mut b, PduType::CapsuleCmd, 0, self.hd, self.dd, icd.len());
        let mut raw = [0u8; 64];
        sqe.encode(&mut raw);
        b[8..72].copy_from_slice(&raw);
        pdu::seal_header(&mut b, PduType::CapsuleCmd, self.hd);
        if !icd.is_empty() {
            b[pdo..pdo + icd.len()].copy_from_slice(icd);
            if self.dd {
                let d = farflash_wire::digest::crc32c(icd).to_le_bytes();
                b[pdo + icd.len()..pdo + icd.len() + 4].copy_from_slice(&d);
            }
        }
        b.truncate(plen);
        b
    }

    fn next_cid(&mut self) -> u16 {
        self.cid = self.cid.wrapping_add(1);
        self.cid
    }

    /// Sends one command and returns everything the queue answered.
    fn cmd(&mut self, mut sqe: Sqe, icd: &[u8]) -> Vec<Rx> {
        sqe.cid = self.next_cid();
        let b = self.capsule(&sqe, icd);
        self.feed(&b);
        self.recv_all()
    }

    fn resp(&mut self, sqe: Sqe, icd: &[u8]) -> Cqe {
        match self.cmd(sqe, icd).pop() {
            Some(Rx::Resp(c)) => c,
            other => panic!("no response: {other:?}"),
        }
    }

    /// Answers `r2t` with `data` in H2CData PDUs of 64 KiB (MAXH2CDATA),
    /// DATA_LAST on the last.
    fn send_h2c(&mut self, r2t: &DataHeader, data: &[u8]) {
        for (i, chunk) in data.chunks(65536).enumerate() {
            let last = (i + 1) * 65536 >= data.len();
            let mut p = vec![0u8; 24 + chunk.len()];
            let dh = DataHeader {
                cccid: r2t.cccid,
                ttag: r2t.ttag,
                offset: (i * 65536) as u32,
                length: chunk.len() as u32,
            };
            let fl = if last { flags::DATA_LAST } else { 0 };
            let (pdo, _) = dh.encode(&mut p, PduType::H2CData, fl, false, false, chunk.len());
            p[pdo..].copy_from_slice(chunk);
            self.feed(&p);
        }
    }

    fn connect(&mut self, qid: u16, cntlid: u16, host: &str) -> Cqe {
        self.connect_sq(qid, cntlid, host, 31)
    }

    fn connect_sq(&mut self, qid: u16, cntlid: u16, host: &str, sqsize: u16) -> Cqe {
        let c = ConnectCmd {
            recfmt: 0,
            qid,
            sqsize,
            cattr: 0,
            kato: 5000,
        };
        let d = ConnectData {
            hostid: [1; 16],
            cntlid,
            subnqn: NQN.into(),
            hostnqn: host.into(),
        };
        let mut data = [0u8; 1024];
        d.encode(&mut data);
        self.resp(c.to_sqe(0), &data)
    }

    fn prop_set_cc(&mut self, v: u32) -> Cqe {
        self.resp(
            PropertyCmd {
                size8: false,
                offset: props::CC,
                value: v as u64,
            }
            .to_sqe(0, fctype::PROPERTY_SET),
            &[],
        )
    }

    /// ICReq, admin Connect, enable: returns the CNTLID.
    fn bring_up(&mut self) -> u16 {
        self.icreq(false, false);
        let c = self.connect(0, CNTLID_DYNAMIC, HOST);
        assert_eq!(c.status, Status::SUCCESS);
        assert_eq!(
            self.prop_set_cc(props::cc::ENABLE_DEFAULT).status,
            Status::SUCCESS
        );
        c.dw0 as u16
    }
}

fn admin_sqe(opcode: u8, nsid: u32, len: u32) -> Sqe {
    Sqe {
        opcode,
        flags: PSDT_SGL,
        nsid,
        dptr: SglDescriptor::transport(len),
        ..Sqe::default()
    }
}

fn rw(opcode: u8, slba: u64, nlb: u16, len: u32, in_capsule: bool) -> Sqe {
    Sqe {
        opcode,
        flags: PSDT_SGL,
        nsid: 1,
        dptr: if in_capsule {
            SglDescriptor::in_capsule(len)
        } else {
            SglDescriptor::transport(len)
        },
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: nlb as u32 - 1,
        ..Sqe::default()
    }
}

fn io_queue(t: &Arc<Target>, cntlid: u16) -> Host {
    let mut h = Host::new(t);
    h.icreq(false, false);
    let c = h.connect(1, cntlid, HOST);
    assert_eq!(c.status, Status::SUCCESS, "{c:?}");
    h
}

#[test]
fn icresp_fields_the_linux_host_checks() {
    let t = target();
    let mut h = Host::new(&t);
    let r = h.icreq(true, true);
    assert_eq!(r.pfv, 0);
    assert_eq!(r.cpda, 0);
    assert_eq!(r.dgst, 3);
    assert!(r.maxh2cdata >= 4096 && r.maxh2cdata.is_multiple_of(4));
    let r = Host::new(&t).icreq(false, true);
    assert_eq!(r.dgst, 2);
}

#[test]
fn identify_controller_passes_the_fabrics_checklist() {
    let t = target();
    let mut h = Host::new(&t);
    let cntlid = h.bring_up();
    let rx = h.cmd(
        Sqe {
            cdw10: cns::CONTROLLER as u32,
            ..admin_sqe(admin::IDENTIFY, 0, 4096)
        },
        &[],
    );
    let Rx::Data(hdr, data, fl) = &rx[0] else {
        panic!("{rx:?}")
    };
    assert_eq!(data.len(), 4096);
    assert_eq!(hdr.offset, 0);
    assert!(fl & flags::DATA_LAST != 0);
    let id = IdCtrl::decode(data);
    assert_eq!(id.cntlid, cntlid);
    assert!(id.kas > 0);
    assert!(id.ioccsz >= 4 && id.iorcsz >= 1);
    assert_eq!(id.icdoff, 0);
    assert!(id.sgls & 3 != 0);
    assert!(id.maxcmd > 0);
    assert_eq!(id.cntrltype, 1);
    assert_eq!(id.subnqn, NQN);
    assert_eq!(id.nn, 1);
    assert_eq!(id.msdbd, 1);
    assert!(matches!(rx[1], Rx::Resp(c) if c.status == Status::SUCCESS));
}

#[test]
fn write_in_capsule_and_by_r2t_then_read_back() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    // 4 KiB in capsule.
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(
        q.resp(rw(io::WRITE, 8, 8, 4096, true), &data).status,
        Status::SUCCESS
    );
    // 192 KiB through one R2T and several H2CData PDUs (MAXH2CDATA 64 KiB).
    let big: Vec<u8> = (0..196608u32).map(|i| (i % 251) as u8).collect();
    let mut sqe = rw(io::WRITE, 100, 384, big.len() as u32, false);
    sqe.cid = q.next_cid();
    let b = q.capsule(&sqe, &[]);
    q.feed(&b);
    let rx = q.recv_all();
    let Rx::R2T(r2t) = rx[0] else {
        panic!("{rx:?}")
    };
    assert_eq!(
        (r2t.cccid, r2t.offset, r2t.length),
        (sqe.cid, 0, big.len() as u32)
    );
    q.send_h2c(&r2t, &big);
    let rx = q.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.status == Status::SUCCESS && c.cid == sqe.cid),
        "{rx:?}"
    );
    // Read both back.
    let rx = q.cmd(rw(io::READ, 8, 8, 4096, false), &[]);
    let Rx::Data(_, d, _) = &rx[0] else {
        panic!("{rx:?}")
    };
    assert_eq!(d, &data);
    let rx = q.cmd(rw(io::READ, 100, 384, big.len() as u32, false), &[]);
    let got: Vec<u8> = rx
        .iter()
        .filter_map(|r| {
            if let Rx::Data(_, d, _) = r {
                Some(d.clone())
            } else {
                None
            }
        })
        .flatten()
        .collect();
    assert_eq!(got, big);
    assert!(rx.len() >= 3, "192 KiB read comes in several C2HData PDUs");
    let totals = t.subsystems[0].stats.totals();
    assert_eq!((totals.write_cmds, totals.read_cmds), (2, 2));
}

#[test]
fn digests_are_generated_and_checked() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = Host::new(&t);
    q.icreq(true, true);
    assert_eq!(q.connect(1, cntlid, HOST).status, Status::SUCCESS);
    let data = vec![0x5Au8; 4096];
    assert_eq!(
        q.resp(rw(io::WRITE, 0, 8, 4096, true), &data).status,
        Status::SUCCESS
    );
    // recv_all asserts both digests of the C2HData.
    let rx = q.cmd(rw(io::READ, 0, 8, 4096, false), &[]);
    assert!(matches!(&rx[0], Rx::Data(_, d, _) if d == &data));
    // A corrupted data digest fails the command with Transient Transport Error.
    let mut sqe = rw(io::WRITE, 0, 8, 4096, true);
    sqe.cid = q.next_cid();
    let mut b = q.capsule(&sqe, &data);
    let n = b.len();
    b[n - 1] ^= 0xFF;
    q.feed(&b);
    let rx = q.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.status.code() == crate::queue::TRANSIENT_TRANSPORT_ERROR),
        "{rx:?}"
    );
    // A corrupted header digest is fatal.
    let mut b = q.capsule(&sqe, &data);
    b[72] ^= 1;
    q.feed(&b);
    let rx = q.recv_all();
    assert!(
        matches!(rx[..], [Rx::Term(t)] if t.fes == fes::HEADER_DIGEST_ERROR),
        "{rx:?}"
    );
    assert!(q.q.wants_close());
}

#[test]
fn io_status_codes() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    let blocks = (8 << 20) / 512u64;
    let st = |c: Cqe| c.status;
    assert_eq!(
        st(q.resp(rw(io::READ, blocks - 1, 2, 1024, false), &[])),
        Status::LBA_OUT_OF_RANGE.dnr()
    );
    assert_eq!(
        st(q.resp(rw(io::READ, u64::MAX, 1, 512, false), &[])),
        Status::LBA_OUT_OF_RANGE.dnr()
    );
    let mut bad_ns = rw(io::READ, 0, 1, 512, false);
    bad_ns.nsid = 9;
    assert_eq!(st(q.resp(bad_ns, &[])), Status::INVALID_NAMESPACE.dnr());
    assert_eq!(
        st(q.resp(
            Sqe {
                opcode: 0x7E,
                flags: PSDT_SGL,
                nsid: 1,
                ..Sqe::default()
            },
            &[]
        )),
        Status::INVALID_OPCODE.dnr()
    );
    // Beyond MDTS (256 KiB): 1024 blocks of 512 = 512 KiB.
    assert_eq!(
        st(q.resp(rw(io::READ, 0, 1024, 512 * 1024, false), &[])),
        Status::INVALID_FIELD.dnr()
    );
    // SGL length disagreeing with NLB.
    assert_eq!(
        st(q.resp(rw(io::READ, 0, 8, 512, false), &[])),
        Status::SGL_INVALID_DATA_LENGTH.dnr()
    );
    // Write Zeroes past the end; Flush of all namespaces.
    let wz = Sqe {
        opcode: io::WRITE_ZEROES,
        flags: PSDT_SGL,
        nsid: 1,
        cdw10: blocks as u32,
        cdw12: 0,
        ..Sqe::default()
    };
    assert_eq!(st(q.resp(wz, &[])), Status::LBA_OUT_OF_RANGE.dnr());
    let fl = Sqe {
        opcode: io::FLUSH,
        flags: PSDT_SGL,
        nsid: u32::MAX,
        ..Sqe::default()
    };
    assert_eq!(st(q.resp(fl, &[])), Status::SUCCESS);
}

#[test]
fn write_zeroes_and_deallocate_read_back_zeroes() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    let data = vec![0xA5u8; 8192];
    assert_eq!(
        q.resp(rw(io::WRITE, 0, 16, 8192, true), &data).status,
        Status::SUCCESS
    );
    let wz = Sqe {
        opcode: io::WRITE_ZEROES,
        flags: PSDT_SGL,
        nsid: 1,
        cdw10: 2,
        cdw12: 1,
        ..Sqe::default()
    };
    assert_eq!(q.resp(wz, &[]).status, Status::SUCCESS);
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&4u32.to_le_bytes());
    range[8..16].copy_from_slice(&8u64.to_le_bytes());
    let dsm = Sqe {
        opcode: io::DATASET_MANAGEMENT,
        flags: PSDT_SGL,
        nsid: 1,
        cdw10: 0,
        cdw11: 1 << 2,
        dptr: SglDescriptor::in_capsule(16),
        ..Sqe::default()
    };
    assert_eq!(q.resp(dsm, &range).status, Status::SUCCESS);
    let rx = q.cmd(rw(io::READ, 0, 16, 8192, false), &[]);
    let Rx::Data(_, d, _) = &rx[0] else { panic!() };
    let blk = |i: usize| &d[i * 512..(i + 1) * 512];
    for i in 0..16 {
        let zero = (2..4).contains(&i) || (8..12).contains(&i);
        assert!(
            blk(i).iter().all(|&b| b == if zero { 0 } else { 0xA5 }),
            "block {i}"
        );
    }
}

#[test]
fn connect_rules() {
    let t = target_with(vec![HOST.into()], TransportConfig::default());
    // A host that is not allowed.
    let mut h = Host::new(&t);
    h.icreq(false, false);
    assert_eq!(
        h.connect(0, CNTLID_DYNAMIC, "nqn.other").status,
        Status::CONNECT_INVALID_HOST.dnr()
    );
    // Admin connect must ask for a dynamic controller.
    let c = Host::new(&t)
        .tap(|h| {
            h.icreq(false, false);
        })
        .connect(0, 5, HOST);
    assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
    assert_eq!(c.dw0, 1 << 16 | 16, "IATTR=data, IPO=cntlid");
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let open = |qid: u16, cntlid: u16, sqsize: u16| {
        let mut h = Host::new(&t);
        h.icreq(false, false);
        let c = h.connect_sq(qid, cntlid, HOST, sqsize);
        (h, c)
    };
    let io = |qid, cntlid, sqsize| open(qid, cntlid, sqsize).1;
    assert_eq!(
        io(1, cntlid.wrapping_add(1), 31).dw0,
        1 << 16 | 16,
        "wrong CNTLID"
    );
    assert_eq!(
        io(1, cntlid, 0).status,
        Status::CONNECT_INVALID_PARAMETERS.dnr(),
        "SQSIZE 0"
    );
    assert_eq!(io(1, cntlid, 4096).dw0, 44, "SQSIZE too large");
    assert_eq!(io(17, cntlid, 31).dw0, 42, "QID beyond the granted count");
    let (_first, c) = open(1, cntlid, 31);
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(io(1, cntlid, 31).dw0, 42, "QID already connected");
    drop(_first);
    assert_eq!(
        io(1, cntlid, 31).status,
        Status::SUCCESS,
        "a closed queue's QID is free again"
    );
    // Commands before Connect.
    let mut h = Host::new(&t);
    h.icreq(false, false);
    assert_eq!(
        h.resp(admin_sqe(admin::IDENTIFY, 0, 4096), &[]).status,
        Status::COMMAND_SEQUENCE_ERROR.dnr()
    );
}

#[test]
fn hostile_pdus_get_a_term_req() {
    let t = target();
    let fatal = |bytes: &[u8]| -> TermReq {
        let mut h = Host::new(&t);
        h.icreq(false, false);
        h.feed(bytes);
        let rx = h.recv_all();
        assert!(h.q.wants_close());
        match rx.last() {
            Some(Rx::Term(t)) => *t,
            other => panic!("no TermReq: {other:?}"),
        }
    };
    // Unknown PDU type, wrong HLEN, a second ICReq, C2H type from a host.
    assert_eq!(
        fatal(&[0x0A, 0, 24, 0, 24, 0, 0, 0]).fes,
        fes::INVALID_HEADER_FIELD
    );
    let mut caps = vec![0u8; 72];
    pdu::write_header(&mut caps, PduType::CapsuleCmd, 0, false, false, 0);
    caps[2] = 70;
    assert_eq!(
        fatal(&caps),
        TermReq {
            fes: fes::INVALID_HEADER_FIELD,
            fei: 2
        }
    );
    let mut ic = [0u8; 128];
    IcReq::default().encode(&mut ic);
    assert_eq!(fatal(&ic).fes, fes::PDU_SEQUENCE_ERROR);
    assert_eq!(
        fatal(&[0x07, 0, 24, 0, 24, 0, 0, 0]).fes,
        fes::INVALID_HEADER_FIELD
    );
    // H2CData for a TTAG that was never sent.
    let mut p = vec![0u8; 24 + 512];
    DataHeader {
        cccid: 1,
        ttag: 3,
        offset: 0,
        length: 512,
    }
    .encode(
        &mut p,
        PduType::H2CData,
        flags::DATA_LAST,
        false,
        false,
        512,
    );
    assert_eq!(fatal(&p).fes, fes::INVALID_HEADER_FIELD);
    // In-capsule data larger than the 8 KiB advertised.
    let mut h = Host::new(&t);
    h.icreq(false, false);
    let b = h.capsule(&rw(io::WRITE, 0, 24, 12288, true), &[0u8; 12288]);
    assert_eq!(fatal(&b).fes, fes::DATA_TRANSFER_LIMIT_EXCEEDED);
    // PDUs before ICReq.
    let mut h = Host::new(&t);
    h.feed(&caps);
    let out = h.q.take_output();
    assert_eq!(out[0], PduType::C2HTermReq as u8);
    assert_eq!(TermReq::decode(&out).fes, fes::PDU_SEQUENCE_ERROR);
    // Bad PFV and HPDA in ICReq.
    for (r, fei) in [
        (
            IcReq {
                pfv: 1,
                ..IcReq::default()
            },
            8,
        ),
        (
            IcReq {
                hpda: 32,
                ..IcReq::default()
            },
            10,
        ),
    ] {
        let mut h = Host::new(&t);
        let mut b = [0u8; 128];
        r.encode(&mut b);
        h.feed(&b);
        let out = h.q.take_output();
        assert_eq!(
            TermReq::decode(&out),
            TermReq {
                fes: fes::INVALID_HEADER_FIELD,
                fei
            }
        );
    }
}

#[test]
fn h2c_data_out_of_order_or_too_long_is_fatal() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    for (offset, len, fl, want) in [
        (
            4096u32,
            4096u32,
            flags::DATA_LAST,
            fes::DATA_TRANSFER_OUT_OF_RANGE,
        ),
        (0, 12288, flags::DATA_LAST, fes::DATA_TRANSFER_OUT_OF_RANGE),
        (0, 4096, flags::DATA_LAST, fes::PDU_SEQUENCE_ERROR),
    ] {
        let mut q = io_queue(&t, cntlid);
        let mut sqe = rw(io::WRITE, 0, 16, 8192, false);
        sqe.cid = q.next_cid();
        let b = q.capsule(&sqe, &[]);
        q.feed(&b);
        let Some(Rx::R2T(r2t)) = q.recv_all().pop() else {
            panic!()
        };
        let mut p = vec![0u8; 24 + len as usize];
        DataHeader {
            cccid: sqe.cid,
            ttag: r2t.ttag,
            offset,
            length: len,
        }
        .encode(&mut p, PduType::H2CData, fl, false, false, len as usize);
        q.feed(&p);
        let rx = q.recv_all();
        assert!(
            matches!(rx[..], [Rx::Term(t)] if t.fes == want),
            "{offset} {len}: {rx:?}"
        );
    }
}

#[test]
fn cid_conflict_and_keep_alive_teardown() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    // An AER stays outstanding; a second command with its CID conflicts.
    let mut aer = admin_sqe(admin::ASYNC_EVENT_REQUEST, 0, 0);
    aer.dptr = SglDescriptor::default();
    aer.cid = 500;
    let b = a.capsule(&aer, &[]);
    a.feed(&b);
    assert!(a.recv_all().is_empty(), "AER is parked");
    a.feed(&b);
    let rx = a.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.status == Status::CID_CONFLICT.dnr() && c.cid == 500),
        "{rx:?}"
    );
    // KATO 5 s: a tick 7 s later tears the controller down.
    let mut q = io_queue(&t, cntlid);
    a.q.tick(std::time::Instant::now() + std::time::Duration::from_secs(7));
    assert!(a.q.wants_close());
    assert!(t.controller(cntlid).is_none());
    q.q.tick(std::time::Instant::now());
    assert!(q.q.wants_close(), "I/O queues follow their controller");
}

#[test]
fn discovery_log_lists_allowed_subsystems() {
    let t = target_with(vec![HOST.into()], TransportConfig::default());
    let get = |host: &str| -> Vec<u8> {
        let mut h = Host::new(&t);
        h.icreq(false, false);
        let c = ConnectCmd {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato: 0,
        };
        let d = ConnectData {
            hostid: [2; 16],
            cntlid: CNTLID_DYNAMIC,
            subnqn: farflash_wire::DISCOVERY_NQN.into(),
            hostnqn: host.into(),
        };
        let mut data = [0u8; 1024];
        d.encode(&mut data);
        assert_eq!(h.resp(c.to_sqe(0), &data).status, Status::SUCCESS);
        assert_eq!(h.prop_set_cc(props::cc::EN).status, Status::SUCCESS);
        let mut sqe = admin_sqe(admin::GET_LOG_PAGE, 0, 3072);
        farflash_wire::log::GetLogPage {
            lid: 0x70,
            lsp: 0,
            rae: false,
            len: 3072,
            offset: 0,
        }
        .fill_sqe(&mut sqe);
        let rx = h.cmd(sqe, &[]);
        rx.into_iter()
            .filter_map(|r| {
                if let Rx::Data(_, d, _) = r {
                    Some(d)
                } else {
                    None
                }
            })
            .flatten()
            .collect()
    };
    let log = get(HOST);
    assert_eq!(farflash_wire::discovery::decode_header(&log), (1, 2));
    let e = farflash_wire::discovery::DiscEntry::decode(&log[1024..2048]);
    assert_eq!(
        (e.subnqn.as_str(), e.traddr.as_str(), e.trsvcid.as_str()),
        (NQN, "127.0.0.1", "4420")
    );
    let log = get("nqn.stranger");
    assert_eq!(
        farflash_wire::discovery::decode_header(&log).1,
        1,
        "only the discovery entry"
    );
}

trait Tap: Sized {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}
impl Tap for Host {}

#[test]
fn namespace_change_completes_the_aer_and_reaches_io_queues() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    // Enable Namespace Attribute Notices and park an AER.
    let aec = Sqe {
        opcode: admin::SET_FEATURES,
        flags: PSDT_SGL,
        cdw10: 0x0B,
        cdw11: 1 << 8,
        ..Sqe::default()
    };
    assert_eq!(a.resp(aec, &[]).status, Status::SUCCESS);
    let aer = Sqe {
        opcode: admin::ASYNC_EVENT_REQUEST,
        flags: PSDT_SGL,
        ..Sqe::default()
    };
    assert!(a.cmd(aer, &[]).is_empty());
    // Reload with a second namespace.
    let mut cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: t.transport.clone(),
        subsystems: vec![],
    };
    let mut sc = SubsystemConfig {
        nqn: NQN.into(),
        serial: None,
        model: None,
        allowed_hosts: vec![],
        namespaces: vec![],
    };
    let ram = |nsid: u32| NamespaceConfig {
        nsid: Some(nsid),
        backend: crate::config::BackendKind::Ram,
        path: None,
        size: Some(Size(8 << 20)),
        block_size: Some(512),
        uuid: None,
        nguid: None,
    };
    sc.namespaces = vec![ram(1), ram(2)];
    cfg.subsystems.push(sc.clone());
    let r = crate::reload::apply(&t, &cfg).unwrap();
    assert_eq!(r.changed, vec![(NQN.to_owned(), vec![2])]);
    // Namespace 1 was kept as it was (same configuration): its data survives.
    a.q.tick(std::time::Instant::now());
    let rx = a.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.dw0 == crate::target::AEN_NS_ATTR_CHANGED),
        "{rx:?}"
    );
    let mut glp = admin_sqe(admin::GET_LOG_PAGE, u32::MAX, 4096);
    farflash_wire::log::GetLogPage {
        lid: 0x04,
        lsp: 0,
        rae: false,
        len: 4096,
        offset: 0,
    }
    .fill_sqe(&mut glp);
    let rx = a.cmd(glp, &[]);
    let Rx::Data(_, log, _) = &rx[0] else {
        panic!("{rx:?}")
    };
    assert_eq!(&log[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);
    // The I/O queue sees namespace 2 at its next command.
    let mut r2 = rw(io::WRITE, 0, 1, 512, true);
    r2.nsid = 2;
    assert_eq!(q.resp(r2, &[7u8; 512]).status, Status::SUCCESS);
    // Remove namespace 1: I/O to it now fails with Invalid Namespace.
    cfg.subsystems[0].namespaces = vec![ram(2)];
    assert_eq!(
        crate::reload::apply(&t, &cfg).unwrap().changed,
        vec![(NQN.to_owned(), vec![1])]
    );
    assert_eq!(
        q.resp(rw(io::READ, 0, 1, 512, false), &[]).status,
        Status::INVALID_NAMESPACE.dnr()
    );
    // A reload that changes nothing reports nothing.
    assert!(crate::reload::apply(&t, &cfg).unwrap().changed.is_empty());
}

#[test]
fn controller_reset_deletes_io_queues() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    // CC.EN 1 -> 0: a reset.
    assert_eq!(a.prop_set_cc(0).status, Status::SUCCESS);
    // The old queue runs nothing more and closes.
    assert!(q.cmd(rw(io::READ, 0, 1, 512, false), &[]).is_empty());
    assert!(q.q.wants_close());
    // Re-enabled, QID 1 can connect again; the old queue's drop leaves it alone.
    assert_eq!(
        a.prop_set_cc(props::cc::ENABLE_DEFAULT).status,
        Status::SUCCESS
    );
    let mut q2 = io_queue(&t, cntlid);
    drop(q);
    assert_eq!(
        q2.resp(rw(io::READ, 0, 1, 512, false), &[]).status,
        Status::SUCCESS
    );
    let mut h = Host::new(&t);
    h.icreq(false, false);
    assert_eq!(
        h.connect(1, cntlid, HOST).dw0,
        42,
        "QID 1 is still taken by the new queue"
    );
}

#[test]
fn data_buffer_budget_defers_r2ts_and_reads() {
    let tc = TransportConfig {
        max_io_size: 256 * 1024,
        max_queue_buffer: 256 * 1024,
        ..TransportConfig::default()
    };
    let t = target_with(vec![], tc);
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    let len = 256 * 1024u32;
    // Three writes of 256 KiB without data: only the first gets an R2T.
    let mut cids = Vec::new();
    for i in 0..3u64 {
        let mut sqe = rw(io::WRITE, i * 512, 512, len, false);
        sqe.cid = q.next_cid();
        cids.push(sqe.cid);
        let b = q.capsule(&sqe, &[]);
        q.feed(&b);
    }
    let rx = q.recv_all();
    let r2ts: Vec<DataHeader> = rx
        .iter()
        .filter_map(|r| if let Rx::R2T(h) = r { Some(*h) } else { None })
        .collect();
    assert_eq!(r2ts.len(), 1, "one R2T within the budget: {rx:?}");
    assert_eq!(r2ts[0].cccid, cids[0]);
    // Each completed write lets the next one have its R2T.
    let mut r2t = r2ts[0];
    for k in 0..3 {
        q.send_h2c(&r2t, &vec![k as u8; len as usize]);
        let rx = q.recv_all();
        assert!(
            matches!(rx[0], Rx::Resp(c) if c.cid == cids[k] && c.status == Status::SUCCESS),
            "{rx:?}"
        );
        if k < 2 {
            let Some(Rx::R2T(next)) = rx.get(1) else {
                panic!("no R2T for the next write: {rx:?}")
            };
            assert_eq!(next.cccid, cids[k + 1]);
            r2t = *next;
        } else {
            assert_eq!(rx.len(), 1);
        }
    }
    // Two 256 KiB reads: the second runs only once the first's data was sent.
    let mut r1 = rw(io::READ, 0, 512, len, false);
    r1.cid = q.next_cid();
    let mut r2 = rw(io::READ, 512, 512, len, false);
    r2.cid = q.next_cid();
    let mut b = q.capsule(&r1, &[]);
    b.extend(q.capsule(&r2, &[]));
    q.feed(&b);
    assert!(
        q.q.output_len() >= len as usize && q.q.output_len() < 2 * len as usize,
        "only the first read's data is queued"
    );
    let first = q.recv_all();
    q.feed(&[]);
    let second = q.recv_all();
    let data = |rx: &[Rx]| -> Vec<u8> {
        rx.iter()
            .filter_map(|r| {
                if let Rx::Data(_, d, _) = r {
                    Some(d.clone())
                } else {
                    None
                }
            })
            .flatten()
            .collect()
    };
    let (d1, d2) = (data(&first), data(&second));
    assert!(
        d1.len() == len as usize && d1.iter().all(|&b| b == 0),
        "first read: {} bytes",
        d1.len()
    );
    assert!(
        d2.len() == len as usize && d2.iter().all(|&b| b == 1),
        "second read: {} bytes",
        d2.len()
    );
}

/// Found by the `target_connection` fuzzer (fuzz/regressions/target_connection/
/// capsuleresp-after-c2htermreq): a completion reaped after a fatal error used
/// to append a CapsuleResp behind the C2HTermReq.
#[test]
fn nothing_is_sent_after_a_c2htermreq() {
    let t = target();
    let mut h = Host::new(&t);
    let cntlid = h.bring_up();
    let mut q = io_queue(&t, cntlid);
    let mut b = q.capsule(&rw(io::WRITE, 0, 1, 512, true), &[0xAB; 512]);
    b.extend_from_slice(&[0xFF; 8]); // no such PDU type: fatal
    q.feed(&b);
    let rx = q.recv_all();
    assert!(matches!(rx.last(), Some(Rx::Term(_))), "{rx:?}");
    assert_eq!(q.q.in_flight(), 0, "the write still drained");
}
