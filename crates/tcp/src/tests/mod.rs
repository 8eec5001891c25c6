//! Drives a `QueuePair` with crafted PDUs, no socket: the protocol paths a
//! real host takes, and the hostile inputs it must survive.

use crate::QueuePair;
use farflash_control::build_subsystems;
use farflash_core::config::{Config, NamespaceConfig, SubsystemConfig, TransportConfig};
use farflash_core::Target;
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::identify::IdCtrl;
use farflash_wire::opcode::{admin, cns, fctype, io};
use farflash_wire::pdu::{
    self, fes, flags, DataHeader, Framing, IcReq, IcResp, Negotiated, PduType, TermReq,
};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Cqe, Sqe, Status};
use std::sync::Arc;

pub(super) const NQN: &str = "nqn.2026-11.io.farflash:test";
pub(super) const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:test-host";

/// An 8 MiB RAM namespace of 512-byte blocks (`None`: the next free NSID).
pub(super) fn ram_ns(nsid: Option<u32>) -> NamespaceConfig {
    NamespaceConfig {
        nsid,
        block_size: Some(512),
        ..NamespaceConfig::sized(farflash_core::config::BackendKind::Ram, 8 << 20)
    }
}

pub(super) fn target_with(allowed: Vec<String>, transport: TransportConfig) -> Arc<Target> {
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: transport.clone(),
        subsystems: vec![SubsystemConfig {
            allowed_hosts: allowed,
            ..SubsystemConfig::new(NQN, vec![ram_ns(None)])
        }],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).unwrap();
    Target::new(subs, transport, vec!["127.0.0.1:4420".parse().unwrap()])
}

pub(super) fn target() -> Arc<Target> {
    target_with(vec![], TransportConfig::default())
}

/// A minimal host: builds PDUs and parses what the queue sends back.
pub(super) struct Host {
    pub(super) q: QueuePair,
    hd: bool,
    dd: bool,
    cid: u16,
}

#[derive(Debug)]
pub(super) enum Rx {
    Resp(Cqe),
    Data(DataHeader, Vec<u8>, u8),
    R2T(DataHeader),
    Term(TermReq),
    IcResp(IcResp),
}

impl Host {
    pub(super) fn new(t: &Arc<Target>) -> Host {
        let a = "127.0.0.1:4420".parse().unwrap();
        let p = "127.0.0.1:50000".parse().unwrap();
        Host {
            q: QueuePair::new(t.clone(), a, p),
            hd: false,
            dd: false,
            cid: 0,
        }
    }

    pub(super) fn feed(&mut self, bytes: &[u8]) {
        // Feed in odd-sized pieces to exercise reassembly.
        for chunk in bytes.chunks(37) {
            push(&mut self.q, chunk);
        }
        self.q.commit();
        while self.q.in_flight() > 0 {
            self.q.poll_backends();
        }
    }

    pub(super) fn recv_all(&mut self) -> Vec<Rx> {
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

    pub(super) fn icreq(&mut self, hd: bool, dd: bool) -> IcResp {
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

    pub(super) fn capsule(&mut self, sqe: &Sqe, icd: &[u8]) -> Vec<u8> {
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

    pub(super) fn next_cid(&mut self) -> u16 {
        self.cid = self.cid.wrapping_add(1);
        self.cid
    }

    /// Sends one command and returns everything the queue answered.
    pub(super) fn cmd(&mut self, mut sqe: Sqe, icd: &[u8]) -> Vec<Rx> {
        sqe.cid = self.next_cid();
        let b = self.capsule(&sqe, icd);
        self.feed(&b);
        self.recv_all()
    }

    pub(super) fn resp(&mut self, sqe: Sqe, icd: &[u8]) -> Cqe {
        match self.cmd(sqe, icd).pop() {
            Some(Rx::Resp(c)) => c,
            other => panic!("no response: {other:?}"),
        }
    }

    /// Answers `r2t` with `data` in H2CData PDUs of 64 KiB (MAXH2CDATA),
    /// DATA_LAST on the last.
    pub(super) fn send_h2c(&mut self, r2t: &DataHeader, data: &[u8]) {
        let b = h2c_pdus(r2t, data, self.hd, self.dd);
        self.feed(&b);
    }

    /// Sends the capsule of a write that asks for an R2T and returns the R2T.
    pub(super) fn write_r2t(&mut self, sqe: &mut Sqe) -> DataHeader {
        sqe.cid = self.next_cid();
        let b = self.capsule(sqe, &[]);
        self.feed(&b);
        let rx = self.recv_all();
        let Some(Rx::R2T(r2t)) = rx.first() else {
            panic!("no R2T: {rx:?}")
        };
        *r2t
    }

    pub(super) fn connect(&mut self, qid: u16, cntlid: u16, host: &str) -> Cqe {
        self.connect_sq(qid, cntlid, host, 31)
    }

    pub(super) fn connect_sq(&mut self, qid: u16, cntlid: u16, host: &str, sqsize: u16) -> Cqe {
        self.connect_full(qid, cntlid, host, sqsize, 0)
    }

    pub(super) fn connect_full(
        &mut self,
        qid: u16,
        cntlid: u16,
        host: &str,
        sqsize: u16,
        cattr: u8,
    ) -> Cqe {
        let c = ConnectCmd {
            recfmt: 0,
            qid,
            sqsize,
            cattr,
            kato: 5000,
        };
        self.connect_with(c, NQN, cntlid, host, 1)
    }

    /// An admin-queue Connect (dynamic controller, SQSIZE 31) to any
    /// subsystem, as `host` with host identifier bytes `hostid`.
    pub(super) fn connect_admin(&mut self, subnqn: &str, host: &str, hostid: u8, kato: u32) -> Cqe {
        let c = ConnectCmd {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato,
        };
        self.connect_with(c, subnqn, CNTLID_DYNAMIC, host, hostid)
    }

    /// A Connect command with its 1024-byte data (Fabrics §6.3).
    fn connect_with(
        &mut self,
        c: ConnectCmd,
        subnqn: &str,
        cntlid: u16,
        host: &str,
        hostid: u8,
    ) -> Cqe {
        let d = ConnectData {
            hostid: [hostid; 16],
            cntlid,
            subnqn: subnqn.into(),
            hostnqn: host.into(),
        };
        let mut data = [0u8; 1024];
        d.encode(&mut data);
        self.resp(c.to_sqe(0), &data)
    }

    pub(super) fn prop_set_cc(&mut self, v: u32) -> Cqe {
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
    pub(super) fn bring_up(&mut self) -> u16 {
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

/// The C2HData payloads among `rx`, concatenated in order.
/// The H2CData PDUs answering `r2t` with `data` (64 KiB each, DATA_LAST on
/// the last), with header and data digests if `hd` / `dd`.
pub(super) fn h2c_pdus(r2t: &DataHeader, data: &[u8], hd: bool, dd: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, chunk) in data.chunks(65536).enumerate() {
        let last = (i + 1) * 65536 >= data.len();
        let mut p = vec![0u8; 24 + 8 + chunk.len()];
        let dh = DataHeader {
            cccid: r2t.cccid,
            ttag: r2t.ttag,
            offset: (i * 65536) as u32,
            length: chunk.len() as u32,
        };
        let fl = if last { flags::DATA_LAST } else { 0 };
        let (pdo, plen) = dh.encode(&mut p, PduType::H2CData, fl, hd, dd, chunk.len());
        p.truncate(plen);
        p[pdo..pdo + chunk.len()].copy_from_slice(chunk);
        if dd {
            let crc = farflash_wire::digest::crc32c(chunk).to_le_bytes();
            p[pdo + chunk.len()..].copy_from_slice(&crc);
        }
        out.extend_from_slice(&p);
    }
    out
}

/// Hands `bytes` to the queue as reads would: as much as each
/// `rx_space` offers (less than asked while a payload is received in place).
pub(super) fn push(q: &mut QueuePair, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let space = q.rx_space();
        let n = space.len().min(bytes.len());
        space[..n].copy_from_slice(&bytes[..n]);
        q.on_received(n);
        bytes = &bytes[n..];
    }
}

pub(super) fn data_of(rx: &[Rx]) -> Vec<u8> {
    rx.iter()
        .filter_map(|r| match r {
            Rx::Data(_, d, _) => Some(d.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

pub(super) fn admin_sqe(opcode: u8, nsid: u32, len: u32) -> Sqe {
    Sqe {
        opcode,
        flags: PSDT_SGL,
        nsid,
        dptr: SglDescriptor::transport(len),
        ..Sqe::default()
    }
}

pub(super) fn rw(opcode: u8, slba: u64, nlb: u16, len: u32, in_capsule: bool) -> Sqe {
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

pub(super) fn io_queue(t: &Arc<Target>, cntlid: u16) -> Host {
    let mut h = Host::new(t);
    h.icreq(false, false);
    let c = h.connect(1, cntlid, HOST);
    assert_eq!(c.status, Status::SUCCESS, "{c:?}");
    h
}

pub(super) trait Tap: Sized {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}
impl Tap for Host {}

mod budget;
mod connect;
mod hostile;
mod manage;
mod namespaces;
mod protocol;
mod storage;
