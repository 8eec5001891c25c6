//! The host library against broken or hostile targets, as a table. Each
//! row is a fake controller (a `std::net::TcpListener` thread on 127.0.0.1
//! scripted with farflash-wire) that answers correctly up to some point and
//! then misbehaves: garbage instead of an ICResp, a malformed ICResp, a
//! stall, a close in the middle of a PDU, a C2HTermReq, a completion for a
//! command never sent, a bad digest.
//!
//! For every row `Controller::connect` (command timeout 800 ms) must return
//! the typed `HostError` the row names, within a bounded time, without
//! panicking or hanging; and what the host sends afterwards is checked too:
//! an H2CTermReq naming the error when the host found a fatal PDU error
//! after initialization (NVMe/TCP §3.6.2.4), otherwise nothing but a close.

use farflash_host::{ConnectOptions, Controller, HostError, TransportError};
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::identify::IDENTIFY_LEN;
use farflash_wire::opcode::{admin, fctype};
use farflash_wire::pdu::{
    self, fes, flags, DataHeader, IcReq, IcResp, PduType, TermReq, DGST_DDGST, DGST_HDGST,
    DIGEST_LEN, IC_HLEN,
};
use farflash_wire::{props, Cqe, Sqe, Status};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const COMMAND_TIMEOUT: Duration = Duration::from_millis(800);
/// Every row's error must arrive within this.
const BOUND: Duration = Duration::from_secs(3);
const CNTLID: u16 = 1;

/// The fake controller's side of one connection.
struct Fake {
    s: TcpStream,
    /// Header digests negotiated (the fake echoes the host's ICReq).
    hd: bool,
    dd: bool,
}

impl Fake {
    fn write(&mut self, b: &[u8]) {
        let _ = self.s.write_all(b);
    }

    fn icreq(&mut self) -> IcReq {
        let mut b = [0u8; IC_HLEN];
        self.s.read_exact(&mut b).expect("ICReq from the host");
        IcReq::decode(&b)
    }

    fn icresp_bytes(r: IcResp) -> [u8; IC_HLEN] {
        let mut b = [0u8; IC_HLEN];
        r.encode(&mut b);
        b
    }

    /// Reads the ICReq and answers with a valid ICResp echoing its digests.
    fn init(&mut self) {
        let r = self.icreq();
        self.hd = r.dgst & DGST_HDGST != 0;
        self.dd = r.dgst & DGST_DDGST != 0;
        self.write(&Self::icresp_bytes(IcResp {
            pfv: 0,
            cpda: 0,
            dgst: r.dgst & 3,
            maxh2cdata: 65536,
        }));
    }

    /// The next command capsule's SQE.
    fn capsule(&mut self) -> Sqe {
        let mut ch = [0u8; 8];
        self.s.read_exact(&mut ch).expect("a capsule from the host");
        assert_eq!(ch[0], PduType::CapsuleCmd as u8, "want a CapsuleCmd");
        let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
        let mut rest = vec![0u8; plen - 8];
        self.s.read_exact(&mut rest).expect("the capsule's body");
        let mut raw = [0u8; 64];
        raw.copy_from_slice(&rest[..64]);
        Sqe::decode(&raw)
    }

    fn resp_bytes(&self, cid: u16, status: Status, dw0: u32, dw1: u32) -> Vec<u8> {
        let mut b = vec![0u8; 24 + DIGEST_LEN];
        let (_, plen) = pdu::write_header(&mut b, PduType::CapsuleResp, 0, self.hd, false, 0);
        let mut c = [0u8; CQE_SIZE];
        Cqe {
            dw0,
            dw1,
            sqhd: 0,
            sqid: 0,
            cid,
            status,
        }
        .encode(&mut c);
        b[8..24].copy_from_slice(&c);
        pdu::seal_header(&mut b, PduType::CapsuleResp, self.hd);
        b.truncate(plen);
        b
    }

    fn resp(&mut self, cid: u16, status: Status, dw0: u32, dw1: u32) {
        let b = self.resp_bytes(cid, status, dw0, dw1);
        self.write(&b);
    }

    fn c2h_bytes(&self, cid: u16, data: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 24 + DIGEST_LEN + data.len() + DIGEST_LEN];
        let (pdo, plen) = DataHeader {
            cccid: cid,
            ttag: 0,
            offset: 0,
            length: data.len() as u32,
        }
        .encode(
            &mut b,
            PduType::C2HData,
            flags::DATA_LAST,
            self.hd,
            self.dd,
            data.len(),
        );
        b[pdo..pdo + data.len()].copy_from_slice(data);
        if self.dd {
            let d = farflash_wire::digest::crc32c(data).to_le_bytes();
            b[pdo + data.len()..pdo + data.len() + DIGEST_LEN].copy_from_slice(&d);
        }
        b.truncate(plen);
        b
    }

    /// Answers `sqe` the way a correct controller would (the bring-up subset).
    fn answer(&mut self, sqe: &Sqe) {
        let ok = Status::SUCCESS;
        match (sqe.opcode, sqe.fctype()) {
            (admin::FABRICS, fctype::CONNECT) => self.resp(sqe.cid, ok, CNTLID as u32, 0),
            (admin::FABRICS, fctype::PROPERTY_GET) => {
                let v: u64 = match sqe.cdw11 {
                    props::CAP => props::cap(127, 2),
                    props::VS => props::VERSION_2_0 as u64,
                    props::CSTS => props::csts::RDY as u64,
                    _ => 0,
                };
                self.resp(sqe.cid, ok, v as u32, (v >> 32) as u32)
            }
            (admin::IDENTIFY, _) => {
                let mut id = vec![0u8; IDENTIFY_LEN];
                id[78..80].copy_from_slice(&CNTLID.to_le_bytes());
                let b = self.c2h_bytes(sqe.cid, &id);
                self.write(&b);
                self.resp(sqe.cid, ok, 0, 0);
            }
            _ => self.resp(sqe.cid, ok, 0, 0),
        }
    }

    /// Answers the next `n` commands correctly.
    fn serve(&mut self, n: usize) {
        for _ in 0..n {
            let sqe = self.capsule();
            self.answer(&sqe);
        }
    }

    /// Waits for the host to give up (stall) and returns what it sent.
    fn tail(mut self) -> Vec<u8> {
        self.s
            .set_read_timeout(Some(Duration::from_secs(8)))
            .unwrap();
        let mut out = Vec::new();
        let mut b = [0u8; 4096];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return out,
            }
        }
    }
}

/// The bring-up steps a fake answers before misbehaving: Connect, Property
/// Get CAP, Property Get VS, Property Set CC, Property Get CSTS, Identify.
const BEFORE_IDENTIFY: usize = 5;

/// What the row expects `Controller::connect` to return.
#[derive(Clone, Copy, Debug)]
enum Want {
    Timeout,
    /// The controller closed (or reset) the connection.
    Closed,
    BadIcResp,
    /// A fatal PDU error found before initialization (no ICResp accepted
    /// yet): the host just closes, as Linux does, without an H2CTermReq.
    BadIcPdu {
        fes: u16,
        fei: u32,
    },
    /// A fatal PDU error after initialization: an H2CTermReq follows.
    BadPdu {
        fes: u16,
        fei: u32,
    },
    /// A data digest error: the command fails, the connection is not fatal.
    DataDigest,
    /// A successful completion that moved less data than asked for.
    ShortTransfer,
    TermReq {
        fes: u16,
        fei: u32,
    },
    HeaderDigest,
    Status(Status),
    /// `HostError::Controller` (something the host cannot work with).
    Controller,
}

impl Want {
    fn matches(&self, e: &HostError) -> bool {
        use TransportError as T;
        match (*self, e) {
            (Want::Timeout, HostError::Timeout(_)) => true,
            (Want::Closed, HostError::Transport(T::Closed)) => true,
            (Want::Closed, HostError::Io(io)) => matches!(
                io.kind(),
                ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted
            ),
            (Want::BadIcResp, HostError::Transport(T::BadIcResp(_))) => true,
            (
                Want::BadPdu { fes, fei } | Want::BadIcPdu { fes, fei },
                HostError::Transport(T::BadPdu { fes: f, fei: i, .. }),
            ) => (fes, fei) == (*f, *i),
            (Want::DataDigest, HostError::DataDigest { .. }) => true,
            (Want::ShortTransfer, HostError::ShortTransfer { .. }) => true,
            (Want::TermReq { fes, fei }, HostError::Transport(T::TermReq { fes: f, fei: i })) => {
                (fes, fei) == (*f, *i)
            }
            (Want::HeaderDigest, HostError::Transport(T::HeaderDigest)) => true,
            (Want::Status(s), HostError::Nvme { status, .. }) => *status == s,
            (Want::Controller, HostError::Controller(_)) => true,
            _ => false,
        }
    }

    /// The H2CTermReq the host owes the controller after this error:
    /// Some(Some(..)) a TermReq, Some(None) nothing, None: not checked (the
    /// fake closed first).
    fn host_term(&self) -> Option<Option<(u16, u32)>> {
        match *self {
            Want::BadPdu { fes, fei } => Some(Some((fes, fei))),
            Want::HeaderDigest => Some(Some((fes::HEADER_DIGEST_ERROR, 0))),
            Want::Closed => None,
            _ => Some(None),
        }
    }
}

struct Case {
    name: &'static str,
    /// Ask for header and data digests.
    digests: bool,
    fake: fn(&mut Fake),
    want: Want,
}

fn bare(t: PduType, plen: u32) -> Vec<u8> {
    let mut b = vec![0u8; plen as usize];
    b[0] = t as u8;
    b[2] = t.hlen() as u8;
    b[4..8].copy_from_slice(&plen.to_le_bytes());
    b
}

fn term_bytes(fes: u16, fei: u32) -> Vec<u8> {
    let mut b = [0u8; 24 + 8];
    let n = TermReq { fes, fei }.encode(&mut b, PduType::C2HTermReq, &[0; 8]);
    b[..n].to_vec()
}

fn cases() -> Vec<Case> {
    vec![
        // (a) garbage instead of an ICResp
        Case {
            name: "128 bytes of garbage instead of an ICResp",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&[0xEE; 128]);
            },
            want: Want::BadIcPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 0,
            },
        },
        Case {
            name: "a CapsuleResp instead of an ICResp",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&bare(PduType::CapsuleResp, 24));
            },
            want: Want::BadIcPdu {
                fes: fes::PDU_SEQUENCE_ERROR,
                fei: 0,
            },
        },
        Case {
            name: "a C2HData instead of an ICResp",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&bare(PduType::C2HData, 24 + 512));
            },
            want: Want::BadIcPdu {
                fes: fes::PDU_SEQUENCE_ERROR,
                fei: 0,
            },
        },
        Case {
            name: "the host's own ICReq echoed back",
            digests: false,
            fake: |f| {
                let r = f.icreq();
                let mut b = [0u8; IC_HLEN];
                r.encode(&mut b);
                f.write(&b);
            },
            want: Want::BadIcPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 0,
            },
        },
        Case {
            name: "an ICResp with PLEN 4 GiB - 1",
            digests: false,
            fake: |f| {
                f.icreq();
                let mut b = Fake::icresp_bytes(IcResp {
                    maxh2cdata: 65536,
                    ..IcResp::default()
                });
                b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
                f.write(&b);
            },
            want: Want::BadIcPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 4,
            },
        },
        Case {
            name: "an ICResp with HLEN 24",
            digests: false,
            fake: |f| {
                f.icreq();
                let mut b = Fake::icresp_bytes(IcResp {
                    maxh2cdata: 65536,
                    ..IcResp::default()
                });
                b[2] = 24;
                f.write(&b);
            },
            want: Want::BadIcPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 2,
            },
        },
        // (b) malformed ICResp (TCP §3.6.2.3 and what Linux checks)
        Case {
            name: "ICResp with PFV 1",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&Fake::icresp_bytes(IcResp {
                    pfv: 1,
                    maxh2cdata: 65536,
                    ..IcResp::default()
                }));
            },
            want: Want::BadIcResp,
        },
        Case {
            name: "ICResp with CPDA 1",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&Fake::icresp_bytes(IcResp {
                    cpda: 1,
                    maxh2cdata: 65536,
                    ..IcResp::default()
                }));
            },
            want: Want::BadIcResp,
        },
        Case {
            name: "ICResp with MAXH2CDATA 2048 (< 4096)",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&Fake::icresp_bytes(IcResp {
                    maxh2cdata: 2048,
                    ..IcResp::default()
                }));
            },
            want: Want::BadIcResp,
        },
        Case {
            name: "ICResp with MAXH2CDATA 0",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&Fake::icresp_bytes(IcResp::default()));
            },
            want: Want::BadIcResp,
        },
        Case {
            name: "ICResp with MAXH2CDATA 4098 (not a multiple of 4)",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&Fake::icresp_bytes(IcResp {
                    maxh2cdata: 4098,
                    ..IcResp::default()
                }));
            },
            want: Want::BadIcResp,
        },
        Case {
            name: "ICResp turning on a header digest the host did not ask for",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&Fake::icresp_bytes(IcResp {
                    dgst: DGST_HDGST,
                    maxh2cdata: 65536,
                    ..IcResp::default()
                }));
            },
            want: Want::BadIcResp,
        },
        Case {
            name: "ICResp refusing the digests the host asked for",
            digests: true,
            fake: |f| {
                f.icreq();
                f.write(&Fake::icresp_bytes(IcResp {
                    dgst: 0,
                    maxh2cdata: 65536,
                    ..IcResp::default()
                }));
            },
            want: Want::BadIcResp,
        },
        // (c) stalls
        Case {
            name: "no answer to the ICReq",
            digests: false,
            fake: |f| {
                f.icreq();
            },
            want: Want::Timeout,
        },
        Case {
            name: "no answer to the admin Connect",
            digests: false,
            fake: |f| {
                f.init();
                f.capsule();
            },
            want: Want::Timeout,
        },
        Case {
            name: "half a CapsuleResp, then silence",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                let b = f.resp_bytes(sqe.cid, Status::SUCCESS, 1, 0);
                f.write(&b[..10]);
            },
            want: Want::Timeout,
        },
        Case {
            name: "no answer to Property Get CAP after a good Connect",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(1);
                f.capsule();
            },
            want: Want::Timeout,
        },
        Case {
            name: "Identify data that stops half way, then silence",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let b = f.c2h_bytes(sqe.cid, &[0; IDENTIFY_LEN]);
                f.write(&b[..100]);
            },
            want: Want::Timeout,
        },
        // (d) closes mid-PDU
        Case {
            name: "close right after accepting",
            digests: false,
            fake: |f| {
                let _ = f.s.shutdown(std::net::Shutdown::Both);
            },
            want: Want::Closed,
        },
        Case {
            name: "half an ICResp, then close",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(
                    &Fake::icresp_bytes(IcResp {
                        maxh2cdata: 65536,
                        ..IcResp::default()
                    })[..60],
                );
                let _ = f.s.shutdown(std::net::Shutdown::Both);
            },
            want: Want::Closed,
        },
        Case {
            name: "half the Connect's CapsuleResp, then close",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                let b = f.resp_bytes(sqe.cid, Status::SUCCESS, 1, 0);
                f.write(&b[..12]);
                let _ = f.s.shutdown(std::net::Shutdown::Both);
            },
            want: Want::Closed,
        },
        Case {
            name: "Identify data cut off by a close",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let b = f.c2h_bytes(sqe.cid, &[0; IDENTIFY_LEN]);
                f.write(&b[..1000]);
                let _ = f.s.shutdown(std::net::Shutdown::Both);
            },
            want: Want::Closed,
        },
        // (e) C2HTermReq
        Case {
            name: "a C2HTermReq instead of the ICResp",
            digests: false,
            fake: |f| {
                f.icreq();
                f.write(&term_bytes(fes::UNSUPPORTED_PARAMETER, 11));
            },
            want: Want::TermReq {
                fes: fes::UNSUPPORTED_PARAMETER,
                fei: 11,
            },
        },
        Case {
            name: "a C2HTermReq in answer to the Connect",
            digests: false,
            fake: |f| {
                f.init();
                f.capsule();
                f.write(&term_bytes(fes::INVALID_HEADER_FIELD, 10));
            },
            want: Want::TermReq {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 10,
            },
        },
        Case {
            name: "a C2HTermReq with HLEN 8",
            digests: false,
            fake: |f| {
                f.init();
                f.capsule();
                let mut b = term_bytes(fes::PDU_SEQUENCE_ERROR, 0);
                b[2] = 8;
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 2,
            },
        },
        // (f) completions and data for commands never sent; digests
        Case {
            name: "a CapsuleResp for a CID that is not in flight",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                f.resp(sqe.cid.wrapping_add(7), Status::SUCCESS, 1, 0);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 20,
            },
        },
        Case {
            name: "C2HData for a CID that is not in flight",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                let b = f.c2h_bytes(sqe.cid.wrapping_add(3), &[0; 512]);
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 8,
            },
        },
        Case {
            name: "C2HData for the Connect (a command without read data)",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                let b = f.c2h_bytes(sqe.cid, &[0; 512]);
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 8,
            },
        },
        Case {
            name: "an R2T for the Connect, whose data went in the capsule",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                let mut b = vec![0u8; 24];
                DataHeader {
                    cccid: sqe.cid,
                    ttag: 1,
                    offset: 0,
                    length: 1024,
                }
                .encode(&mut b, PduType::R2T, 0, false, false, 0);
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 8,
            },
        },
        Case {
            name: "more Identify data than asked for (8 KiB for 4 KiB)",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let b = f.c2h_bytes(sqe.cid, &[0; 2 * IDENTIFY_LEN]);
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::DATA_TRANSFER_OUT_OF_RANGE,
                fei: 16,
            },
        },
        Case {
            name: "a CapsuleResp with a corrupted header digest",
            digests: true,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                let mut b = f.resp_bytes(sqe.cid, Status::SUCCESS, 1, 0);
                b[24] ^= 1;
                f.write(&b);
            },
            want: Want::HeaderDigest,
        },
        Case {
            name: "a CapsuleResp without HDGSTF although header digests are on",
            digests: true,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                f.hd = false;
                f.resp(sqe.cid, Status::SUCCESS, 1, 0);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 1,
            },
        },
        Case {
            name: "Identify data with a bad data digest",
            digests: true,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let mut b = f.c2h_bytes(sqe.cid, &[0; IDENTIFY_LEN]);
                let n = b.len();
                b[n - 1] ^= 0xFF;
                f.write(&b);
                f.resp(sqe.cid, Status::SUCCESS, 0, 0);
            },
            want: Want::DataDigest,
        },
        Case {
            name: "Identify completed successfully after half its data",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let b = f.c2h_bytes(sqe.cid, &[0; IDENTIFY_LEN / 2]);
                f.write(&b);
                f.resp(sqe.cid, Status::SUCCESS, 0, 0);
            },
            want: Want::ShortTransfer,
        },
        Case {
            name: "C2HData with PDO inside its header",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let mut b = f.c2h_bytes(sqe.cid, &[0; IDENTIFY_LEN]);
                b[3] = 8;
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 3,
            },
        },
        Case {
            name: "C2HData announcing 1 GiB of Identify data",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let mut b = f.c2h_bytes(sqe.cid, &[0; IDENTIFY_LEN]);
                b[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes());
                b[16..20].copy_from_slice(&((1u32 << 30) - 24).to_le_bytes());
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::DATA_TRANSFER_OUT_OF_RANGE,
                fei: 0,
            },
        },
        Case {
            name: "a CapsuleResp with PLEN 28 (no digest negotiated)",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                let mut b = f.resp_bytes(sqe.cid, Status::SUCCESS, 1, 0);
                b[4..8].copy_from_slice(&28u32.to_le_bytes());
                b.extend_from_slice(&[0; 4]);
                f.write(&b);
            },
            want: Want::BadPdu {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 4,
            },
        },
        Case {
            name: "a C2HTermReq announcing PLEN 1 GiB",
            digests: false,
            fake: |f| {
                f.init();
                f.capsule();
                let mut b = term_bytes(fes::PDU_SEQUENCE_ERROR, 0);
                b[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes());
                f.write(&b);
            },
            want: Want::TermReq {
                fes: fes::PDU_SEQUENCE_ERROR,
                fei: 0,
            },
        },
        // statuses and values a host cannot work with
        Case {
            name: "the Connect refused: Connect Invalid Host",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                f.resp(sqe.cid, Status::CONNECT_INVALID_HOST.dnr(), 0, 0);
            },
            want: Want::Status(Status::CONNECT_INVALID_HOST.dnr()),
        },
        Case {
            name: "the Connect demands in-band authentication (AUTHREQ ATR) and no secret is given",
            digests: false,
            fake: |f| {
                f.init();
                let sqe = f.capsule();
                // AUTHREQ ATR is DW0 bit 17 (Fabrics §6.3, TP 8006).
                f.resp(sqe.cid, Status::SUCCESS, 1 | 1 << 17, 0);
            },
            want: Want::Controller,
        },
        Case {
            name: "Identify names another CNTLID than Connect",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(BEFORE_IDENTIFY);
                let sqe = f.capsule();
                let mut id = vec![0u8; IDENTIFY_LEN];
                id[78] = 9;
                let b = f.c2h_bytes(sqe.cid, &id);
                f.write(&b);
                f.resp(sqe.cid, Status::SUCCESS, 0, 0);
            },
            want: Want::Controller,
        },
        Case {
            name: "CSTS.CFS instead of CSTS.RDY",
            digests: false,
            fake: |f| {
                f.init();
                f.serve(4);
                let sqe = f.capsule();
                f.resp(sqe.cid, Status::SUCCESS, props::csts::CFS, 0);
            },
            want: Want::Controller,
        },
    ]
}

/// Runs one row: returns Err with what went wrong.
fn run(case: &Case) -> Result<(), String> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let fake = case.fake;
    let fake_thread = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        let mut f = Fake {
            s,
            hd: false,
            dd: false,
        };
        fake(&mut f);
        f.tail()
    });
    let mut o = ConnectOptions::new(addr, "nqn.2026-11.io.farflash.test:hostile-target");
    o.command_timeout = COMMAND_TIMEOUT;
    o.connect_timeout = Duration::from_secs(2);
    o.hdr_digest = case.digests;
    o.data_digest = case.digests;
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(|| Controller::connect(&o).map(drop));
        let _ = tx.send(r);
    });
    let r = rx
        .recv_timeout(BOUND + Duration::from_secs(5))
        .map_err(|_| "the host hung".to_string())?;
    let took = t0.elapsed();
    let e = match r {
        Err(_) => return Err("the host panicked".into()),
        Ok(Ok(())) => return Err("Controller::connect succeeded".into()),
        Ok(Err(e)) => e,
    };
    if !case.want.matches(&e) {
        return Err(format!("got {e:?} ({e}), want {:?}", case.want));
    }
    if took > BOUND {
        return Err(format!("the error took {took:?}"));
    }
    let tail = fake_thread
        .join()
        .map_err(|_| "the fake target panicked (the host sent something unexpected)")?;
    match case.want.host_term() {
        None => {}
        Some(Some((fes, fei))) => {
            if tail.len() < 24 || tail[0] != PduType::H2CTermReq as u8 {
                return Err(format!(
                    "want an H2CTermReq from the host, it sent {} bytes: {:?}",
                    tail.len(),
                    &tail[..tail.len().min(24)]
                ));
            }
            let t = TermReq::decode(&tail);
            let plen = u32::from_le_bytes([tail[4], tail[5], tail[6], tail[7]]) as usize;
            if (t.fes, t.fei) != (fes, fei) || plen != tail.len() || plen > 24 + 128 {
                return Err(format!(
                    "H2CTermReq FES {:#x} FEI {} PLEN {plen} ({} bytes sent), want FES {fes:#x} FEI {fei}",
                    t.fes,
                    t.fei,
                    tail.len()
                ));
            }
        }
        Some(None) if !tail.is_empty() => {
            return Err(format!(
                "the host sent {} unexpected bytes after the error",
                tail.len()
            ));
        }
        Some(None) => {}
    }
    Ok(())
}

#[test]
fn hostile_targets_give_typed_errors_in_bounded_time() {
    let table = cases();
    // Rows run four at a time: most of them wait for a timeout.
    let results: Vec<(usize, Result<(), String>)> = std::thread::scope(|sc| {
        let table = &table;
        let handles: Vec<_> = (0..4)
            .map(|k| {
                sc.spawn(move || {
                    (k..table.len())
                        .step_by(4)
                        .map(|i| (i, run(&table[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("row thread"))
            .collect()
    });
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("{}: {e}", table[*i].name)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n  {}",
        failures.len(),
        table.len(),
        failures.join("\n  ")
    );
}
