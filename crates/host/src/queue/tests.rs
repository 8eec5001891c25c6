//! Unit tests of the queue-pair state machine: crafted controller PDUs in,
//! typed errors or completions out; never a panic.

use crate::cmd;
use crate::error::{HostError, TransportError};
use crate::queue::{QueueConfig, QueuePair};
use crate::slot::DataDir;
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::pdu::{
    self, fes, flags, DataHeader, Framing, IcResp, Negotiated, PduType, TermReq, IC_HLEN,
};
use farflash_wire::sqe::{sgl, SQE_SIZE};
use farflash_wire::{Cqe, Sqe, Status};
use std::io::IoSlice;

fn cfg(hd: bool, dd: bool) -> QueueConfig {
    QueueConfig {
        depth: 4,
        slot_buf: 64 * 1024,
        max_data: 64 * 1024,
        icd_max: 8192,
        hdgst: hd,
        ddgst: dd,
    }
}

fn icresp_bytes(pfv: u16, cpda: u8, dgst: u8, maxh2cdata: u32) -> Vec<u8> {
    let mut b = [0u8; IC_HLEN];
    IcResp {
        pfv,
        cpda,
        dgst,
        maxh2cdata,
    }
    .encode(&mut b);
    b.to_vec()
}

/// Drains everything the host queued to send.
fn sent(q: &mut QueuePair) -> Vec<u8> {
    let mut out = vec![];
    while q.tx_pending() > 0 {
        let mut iov = [IoSlice::new(&[]); 16];
        let n = q.tx_iovecs(&mut iov);
        let bytes: usize = iov[..n].iter().map(|s| s.len()).sum();
        for s in &iov[..n] {
            out.extend_from_slice(s);
        }
        q.tx_advance(bytes);
    }
    out
}

/// A PDU the host sent, as the controller would parse it.
#[derive(Debug)]
struct Sent {
    f: Framing,
    hdr: Vec<u8>,
    data: Vec<u8>,
}

fn parse_sent(mut b: &[u8], hd: bool, dd: bool) -> Vec<Sent> {
    let neg = Negotiated {
        initialized: true,
        hdgst: hd,
        ddgst: dd,
        rx_pda: 0,
        max_data: 1 << 20,
    };
    let mut v = vec![];
    while !b.is_empty() {
        let f = if b[0] == PduType::IcReq as u8 {
            Framing::parse(b, &Negotiated::default(), true).unwrap()
        } else {
            Framing::parse(b, &neg, true).unwrap()
        };
        if f.hdgst {
            assert_eq!(&b[f.hlen..f.hlen + 4], &pdu::hdgst(&b[..f.hlen]));
        }
        let data = b[f.data_off..f.data_off + f.data_len].to_vec();
        if f.ddgst {
            let e = f.data_off + f.data_len;
            assert_eq!(
                &b[e..e + 4],
                &farflash_wire::digest::crc32c(&data).to_le_bytes()
            );
        }
        v.push(Sent {
            f,
            hdr: b[..f.hlen].to_vec(),
            data,
        });
        b = &b[f.plen..];
    }
    v
}

fn ready(hd: bool, dd: bool) -> QueuePair {
    let mut q = QueuePair::new(cfg(hd, dd));
    let ic = sent(&mut q);
    assert_eq!(ic.len(), IC_HLEN);
    assert_eq!(ic[0], PduType::IcReq as u8);
    assert_eq!(ic[11], (hd as u8) | (dd as u8) << 1);
    q.rx_feed(&icresp_bytes(0, 0, (hd as u8) | (dd as u8) << 1, 8192))
        .unwrap();
    assert!(q.is_ready());
    q
}

fn capsule_resp(cid: u16, status: Status, dw0: u32, hd: bool) -> Vec<u8> {
    let mut b = vec![0u8; 24 + 4];
    pdu::write_header(&mut b, PduType::CapsuleResp, 0, hd, false, 0);
    let mut c = [0u8; CQE_SIZE];
    Cqe {
        dw0,
        cid,
        status,
        ..Cqe::default()
    }
    .encode(&mut c);
    b[8..24].copy_from_slice(&c);
    pdu::seal_header(&mut b, PduType::CapsuleResp, hd);
    b.truncate(if hd { 28 } else { 24 });
    b
}

#[allow(clippy::too_many_arguments)]
fn data_pdu(
    t: PduType,
    cid: u16,
    ttag: u16,
    off: u32,
    data: &[u8],
    fl: u8,
    hd: bool,
    dd: bool,
) -> Vec<u8> {
    let hend = 24 + if hd { 4 } else { 0 };
    let mut b = vec![0u8; hend];
    let len = if t == PduType::R2T { 0 } else { data.len() };
    DataHeader {
        cccid: cid,
        ttag,
        offset: off,
        length: data.len() as u32,
    }
    .encode(&mut b, t, fl, hd, dd, len);
    if len > 0 {
        b.extend_from_slice(data);
        if dd {
            b.extend_from_slice(&farflash_wire::digest::crc32c(data).to_le_bytes());
        }
    }
    b
}

fn r2t(cid: u16, ttag: u16, off: u32, len: u32, hd: bool) -> Vec<u8> {
    let hend = 24 + if hd { 4 } else { 0 };
    let mut b = vec![0u8; hend];
    DataHeader {
        cccid: cid,
        ttag,
        offset: off,
        length: len,
    }
    .encode(&mut b, PduType::R2T, 0, hd, false, 0);
    b
}

fn term_req(fes: u16, fei: u32) -> Vec<u8> {
    let mut b = vec![0u8; 24 + 8];
    let n = TermReq { fes, fei }.encode(&mut b, PduType::C2HTermReq, &[1, 2, 3, 4, 5, 6, 7, 8]);
    b.truncate(n);
    b
}

fn submit_read(q: &mut QueuePair, len: u32) -> u16 {
    let cid = q.alloc_cid().unwrap();
    q.submit(cid, cmd::rw(false, 1, 0, len / 512), DataDir::FromCtrl, len)
        .unwrap();
    cid
}

fn submit_write(q: &mut QueuePair, data: &[u8]) -> u16 {
    let cid = q.alloc_cid().unwrap();
    q.buf_mut(cid).unwrap()[..data.len()].copy_from_slice(data);
    q.submit(
        cid,
        cmd::rw(true, 1, 0, 1),
        DataDir::ToCtrl,
        data.len() as u32,
    )
    .unwrap();
    cid
}

fn transport_err(r: Result<(), HostError>) -> TransportError {
    match r {
        Err(HostError::Transport(t)) => t,
        other => panic!("expected a transport error, got {other:?}"),
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn icresp_bad_fields_are_typed_errors() {
    let cases: [(Vec<u8>, &str); 5] = [
        (icresp_bytes(1, 0, 0, 8192), "PFV"),
        (icresp_bytes(0, 0, 1, 8192), "digest"),
        (icresp_bytes(0, 0, 0, 1024), "MAXH2CDATA"),
        (icresp_bytes(0, 0, 0, 8190), "MAXH2CDATA"),
        (icresp_bytes(0, 2, 0, 8192), "CPDA"),
    ];
    for (b, what) in cases {
        let mut q = QueuePair::new(cfg(false, false));
        sent(&mut q);
        match transport_err(q.rx_feed(&b)) {
            TransportError::BadIcResp(m) => assert!(m.contains(what), "{m} / {what}"),
            e => panic!("{e:?}"),
        }
        assert!(!q.is_ready());
        // Dead for good: later calls keep failing, submit too.
        assert!(q.rx_feed(&[0]).is_err());
        assert!(q.submit(0, Sqe::default(), DataDir::None, 0).is_err());
    }
    // Wrong PLEN, and a CapsuleResp before the ICResp.
    let mut q = QueuePair::new(cfg(false, false));
    let mut b = icresp_bytes(0, 0, 0, 8192);
    b[4] = 129;
    assert!(matches!(
        transport_err(q.rx_feed(&b)),
        TransportError::BadPdu { .. }
    ));
    let mut q = QueuePair::new(cfg(false, false));
    let e = transport_err(q.rx_feed(&capsule_resp(0, Status::SUCCESS, 0, false)));
    assert!(
        matches!(
            e,
            TransportError::BadPdu {
                fes: fes::PDU_SEQUENCE_ERROR,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn term_req_before_and_after_icresp() {
    let mut q = QueuePair::new(cfg(false, false));
    assert_eq!(
        transport_err(q.rx_feed(&term_req(fes::UNSUPPORTED_PARAMETER, 11))),
        TransportError::TermReq { fes: 6, fei: 11 }
    );
    let mut q = ready(true, true);
    submit_read(&mut q, 4096);
    assert_eq!(
        transport_err(q.rx_feed(&term_req(fes::HEADER_DIGEST_ERROR, 0))),
        TransportError::TermReq { fes: 3, fei: 0 }
    );
}

#[test]
fn read_split_over_c2hdata_pdus_byte_by_byte() {
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut q = ready(hd, dd);
        let cid = submit_read(&mut q, 12288);
        let out = parse_sent(&sent(&mut q), hd, dd);
        assert_eq!(out.len(), 1);
        let sqe = Sqe::decode(out[0].hdr[8..72].try_into().unwrap());
        assert_eq!(sqe.dptr.sgl_type, sgl::TRANSPORT);
        assert_eq!(sqe.dptr.length, 12288);
        assert_eq!(sqe.cid, cid);
        let d = pattern(12288);
        let mut stream = vec![];
        stream.extend(data_pdu(PduType::C2HData, cid, 0, 0, &d[..5000], 0, hd, dd));
        stream.extend(data_pdu(
            PduType::C2HData,
            cid,
            0,
            5000,
            &d[5000..9000],
            0,
            hd,
            dd,
        ));
        stream.extend(data_pdu(
            PduType::C2HData,
            cid,
            0,
            9000,
            &d[9000..],
            flags::DATA_LAST,
            hd,
            dd,
        ));
        stream.extend(capsule_resp(cid, Status::SUCCESS, 0, hd));
        for b in stream.chunks(1) {
            q.rx_feed(b).unwrap();
        }
        let c = q.pop_completion().unwrap();
        assert_eq!(c.check().unwrap(), 0);
        assert_eq!(c.transferred, 12288);
        assert_eq!(&q.buf(cid)[..12288], &d[..]);
        assert_eq!(q.outstanding(), 0);
    }
}

#[test]
fn c2hdata_success_completes_without_capsule_resp() {
    let mut q = ready(false, false);
    let cid = submit_read(&mut q, 4096);
    let d = pattern(4096);
    q.rx_feed(&data_pdu(
        PduType::C2HData,
        cid,
        0,
        0,
        &d,
        flags::DATA_LAST | flags::DATA_SUCCESS,
        false,
        false,
    ))
    .unwrap();
    let c = q.pop_completion().unwrap();
    assert!(c.check().is_ok());
    // A CapsuleResp for it now is for a CID not in flight: fatal.
    assert!(q
        .rx_feed(&capsule_resp(cid, Status::SUCCESS, 0, false))
        .is_err());
}

#[test]
fn bad_c2hdata_is_fatal_and_answered_with_h2ctermreq() {
    let d = pattern(4096);
    type Case = (fn(u16, &[u8]) -> Vec<u8>, u16);
    let cases: [Case; 5] = [
        // SUCCESS without LAST.
        (
            |cid, d| {
                data_pdu(
                    PduType::C2HData,
                    cid,
                    0,
                    0,
                    d,
                    flags::DATA_SUCCESS,
                    false,
                    false,
                )
            },
            fes::INVALID_HEADER_FIELD,
        ),
        // Out-of-order offset.
        (
            |cid, d| data_pdu(PduType::C2HData, cid, 0, 512, &d[..512], 0, false, false),
            fes::INVALID_HEADER_FIELD,
        ),
        // Beyond the command's length.
        (
            |cid, d| {
                data_pdu(
                    PduType::C2HData,
                    cid,
                    0,
                    0,
                    &[d, d].concat(),
                    0,
                    false,
                    false,
                )
            },
            fes::DATA_TRANSFER_OUT_OF_RANGE,
        ),
        // Unknown CID.
        (
            |cid, d| data_pdu(PduType::C2HData, cid + 1, 0, 0, d, 0, false, false),
            fes::INVALID_HEADER_FIELD,
        ),
        // An R2T for a read.
        (
            |cid, _| r2t(cid, 1, 0, 512, false),
            fes::INVALID_HEADER_FIELD,
        ),
    ];
    for (mk, want) in cases {
        let mut q = ready(false, false);
        let cid = submit_read(&mut q, 4096);
        sent(&mut q);
        match transport_err(q.rx_feed(&mk(cid, &d))) {
            TransportError::BadPdu { fes, .. } => assert_eq!(fes, want),
            e => panic!("{e:?}"),
        }
        let out = parse_sent(&sent(&mut q), false, false);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].f.pdu_type, PduType::H2CTermReq);
        assert_eq!(TermReq::decode(&out[0].hdr).fes, want);
    }
}

#[test]
fn in_capsule_write() {
    let mut q = ready(true, true);
    let d = pattern(4096);
    let cid = submit_write(&mut q, &d);
    let out = parse_sent(&sent(&mut q), true, true);
    assert_eq!(out.len(), 1);
    let sqe = Sqe::decode(out[0].hdr[8..8 + SQE_SIZE].try_into().unwrap());
    assert_eq!(sqe.dptr.sgl_type, sgl::IN_CAPSULE);
    assert_eq!(sqe.dptr.length, 4096);
    assert_eq!(out[0].data, d);
    // An R2T for in-capsule data is a protocol error.
    assert!(q.rx_feed(&r2t(cid, 1, 0, 4096, true)).is_err());
}

#[test]
fn r2t_write_split_by_maxh2cdata_with_data_last() {
    for (hd, dd) in [(false, false), (true, true)] {
        let mut q = ready(hd, dd); // MAXH2CDATA 8192, in-capsule up to 8192
        let d = pattern(20000);
        let cid = submit_write(&mut q, &d);
        let out = parse_sent(&sent(&mut q), hd, dd);
        assert_eq!(out.len(), 1);
        let sqe = Sqe::decode(out[0].hdr[8..72].try_into().unwrap());
        assert_eq!(sqe.dptr.sgl_type, sgl::TRANSPORT);
        assert!(out[0].data.is_empty());
        // Two R2Ts, each answered by H2CData of <= MAXH2CDATA, LAST on the last of each.
        let mut got = vec![];
        for (off, len, ttag) in [(0u32, 12000u32, 7u16), (12000, 8000, 9)] {
            q.rx_feed(&r2t(cid, ttag, off, len, hd)).unwrap();
            let pdus = parse_sent(&sent(&mut q), hd, dd);
            let n = pdus.len();
            assert_eq!(n, (len as usize).div_ceil(8192));
            let mut expect = off;
            for (i, p) in pdus.iter().enumerate() {
                assert_eq!(p.f.pdu_type, PduType::H2CData);
                let h = DataHeader::decode(&p.hdr);
                assert_eq!((h.cccid, h.ttag, h.offset), (cid, ttag, expect));
                assert!(h.length <= 8192);
                assert_eq!(h.length as usize, p.data.len());
                assert_eq!(p.f.flags & flags::DATA_LAST != 0, i == n - 1);
                expect += h.length;
                got.extend_from_slice(&p.data);
            }
            assert_eq!(expect, off + len);
        }
        assert_eq!(got, d);
        q.rx_feed(&capsule_resp(cid, Status::SUCCESS, 0, hd))
            .unwrap();
        assert!(q.pop_completion().unwrap().check().is_ok());
    }
}

#[test]
fn bad_r2t_sequences() {
    let cases: [(u32, u32); 3] = [(4096, 4096), (0, 0), (0, 20001)];
    for (off, len) in cases {
        let mut q = ready(false, false);
        let cid = submit_write(&mut q, &pattern(20000));
        sent(&mut q);
        let e = transport_err(q.rx_feed(&r2t(cid, 1, off, len, false)));
        assert!(matches!(e, TransportError::BadPdu { .. }), "{e:?}");
    }
}

#[test]
fn completion_waits_until_queued_data_is_sent() {
    let mut q = ready(false, false);
    let cid = submit_write(&mut q, &pattern(20000));
    sent(&mut q);
    q.rx_feed(&r2t(cid, 1, 0, 20000, false)).unwrap();
    // The controller answers (an error, say) before our H2CData left.
    q.rx_feed(&capsule_resp(cid, Status::INVALID_FIELD.dnr(), 0, false))
        .unwrap();
    assert!(q.pop_completion().is_none());
    assert!(q.buf_mut(cid).is_none(), "buffer still owned by the queue");
    sent(&mut q);
    let c = q.pop_completion().unwrap();
    match c.check() {
        Err(HostError::Nvme { status, .. }) => assert_eq!(status.code(), Status::INVALID_FIELD),
        e => panic!("{e:?}"),
    }
}

#[test]
fn header_digest_error_is_fatal_data_digest_error_is_not() {
    let mut q = ready(true, true);
    let cid = submit_read(&mut q, 4096);
    sent(&mut q);
    let mut b = capsule_resp(cid, Status::SUCCESS, 0, true);
    b[25] ^= 0xFF;
    assert_eq!(transport_err(q.rx_feed(&b)), TransportError::HeaderDigest);
    let out = parse_sent(&sent(&mut q), true, true);
    assert_eq!(TermReq::decode(&out[0].hdr).fes, fes::HEADER_DIGEST_ERROR);

    let mut q = ready(true, true);
    let cid = submit_read(&mut q, 4096);
    let mut b = data_pdu(
        PduType::C2HData,
        cid,
        0,
        0,
        &pattern(4096),
        flags::DATA_LAST,
        true,
        true,
    );
    let n = b.len();
    b[n - 1] ^= 1;
    q.rx_feed(&b).unwrap();
    q.rx_feed(&capsule_resp(cid, Status::SUCCESS, 0, true))
        .unwrap();
    assert!(matches!(
        q.pop_completion().unwrap().check(),
        Err(HostError::DataDigest { .. })
    ));
    // The connection is still usable.
    let cid = submit_read(&mut q, 512);
    q.rx_feed(&data_pdu(
        PduType::C2HData,
        cid,
        0,
        0,
        &[5; 512],
        flags::DATA_LAST,
        true,
        true,
    ))
    .unwrap();
    q.rx_feed(&capsule_resp(cid, Status::SUCCESS, 0, true))
        .unwrap();
    assert!(q.pop_completion().unwrap().check().is_ok());
}

#[test]
fn short_read_and_nvme_status_are_typed() {
    let mut q = ready(false, false);
    let cid = submit_read(&mut q, 4096);
    q.rx_feed(&data_pdu(
        PduType::C2HData,
        cid,
        0,
        0,
        &[1; 1024],
        flags::DATA_LAST,
        false,
        false,
    ))
    .unwrap();
    q.rx_feed(&capsule_resp(cid, Status::SUCCESS, 0, false))
        .unwrap();
    assert!(matches!(
        q.pop_completion().unwrap().check(),
        Err(HostError::ShortTransfer {
            transferred: 1024,
            ..
        })
    ));
    let cid = submit_read(&mut q, 4096);
    q.rx_feed(&capsule_resp(cid, Status::LBA_OUT_OF_RANGE.dnr(), 0, false))
        .unwrap();
    let e = q.pop_completion().unwrap().check().unwrap_err();
    assert_eq!(e.status().map(|s| s.code()), Some(Status::LBA_OUT_OF_RANGE));
}

#[test]
fn queue_depth_and_slot_rules() {
    let mut q = ready(false, false);
    let cids: Vec<u16> = (0..4).map(|_| q.alloc_cid().unwrap()).collect();
    assert!(q.alloc_cid().is_none());
    for c in &cids {
        q.release_cid(*c);
    }
    let cid = submit_read(&mut q, 512);
    assert!(
        q.submit(cid, Sqe::default(), DataDir::None, 0).is_err(),
        "CID in flight"
    );
    assert!(q.submit(99, Sqe::default(), DataDir::None, 0).is_err());
    let c2 = q.alloc_cid().unwrap();
    assert!(q
        .submit(c2, Sqe::default(), DataDir::FromCtrl, 1 << 20)
        .is_err());
}

/// A tiny deterministic generator for the robustness tests.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn hostile_bytes_never_panic() {
    let mut r = Lcg(1);
    for round in 0..3000 {
        let (hd, dd) = (round % 2 == 0, round % 3 == 0);
        let mut q = ready(hd, dd);
        let _ = submit_read(&mut q, 8192);
        let _ = submit_write(&mut q, &pattern(20000));
        // Start from valid PDUs, then corrupt some bytes, or send pure noise.
        let mut b = vec![];
        b.extend(data_pdu(
            PduType::C2HData,
            0,
            0,
            0,
            &pattern(4096),
            0,
            hd,
            dd,
        ));
        b.extend(r2t(1, 3, 0, 20000, hd));
        b.extend(capsule_resp(0, Status::SUCCESS, 0, hd));
        if round % 5 == 0 {
            for x in b.iter_mut() {
                *x = r.next() as u8;
            }
        } else {
            for _ in 0..1 + r.next() % 4 {
                let i = (r.next() as usize) % b.len();
                b[i] = r.next() as u8;
            }
        }
        let mut at = 0;
        while at < b.len() {
            let n = 1 + (r.next() as usize % 200);
            let e = (at + n).min(b.len());
            if q.rx_feed(&b[at..e]).is_err() {
                break;
            }
            at = e;
        }
        sent(&mut q);
        while let Some(c) = q.pop_completion() {
            let _ = c.check();
        }
    }
}

#[test]
fn connect_capsule_carries_1024_bytes_in_capsule() {
    let mut q = ready(false, false);
    let cid = q.alloc_cid().unwrap();
    q.buf_mut(cid).unwrap()[..1024].fill(0xAB);
    q.submit(cid, cmd::connect(0, 32, 5000), DataDir::ToCtrl, 1024)
        .unwrap();
    let out = parse_sent(&sent(&mut q), false, false);
    assert_eq!(out[0].f.plen, 72 + 1024);
    let sqe = Sqe::decode(out[0].hdr[8..72].try_into().unwrap());
    assert_eq!(sqe.opcode, 0x7F);
    assert_eq!(sqe.dptr.sgl_type, sgl::IN_CAPSULE);
    q.rx_feed(&capsule_resp(cid, Status::SUCCESS, 7, false))
        .unwrap();
    assert_eq!(q.pop_completion().unwrap().check().unwrap(), 7);
}

/// Fuzz regression (fuzz/regressions/host_connection/h2ctermreq-after-partial-pdu):
/// a fatal receive error while a PDU is partly sent must not put the
/// H2CTermReq in the middle of that PDU.
#[test]
fn h2ctermreq_never_lands_inside_a_partly_sent_pdu() {
    let mut q = ready(false, false);
    let data = pattern(16384);
    let cid = submit_write(&mut q, &data);
    let mut wire = sent(&mut q); // the command capsule
    q.rx_feed(&r2t(cid, 1, 0, 16384, false)).unwrap();
    // A short write: 100 bytes of the first H2CData PDU reach the socket.
    let mut iov = [IoSlice::new(&[]); 16];
    let n = q.tx_iovecs(&mut iov);
    let mut part = vec![];
    for s in &iov[..n] {
        part.extend_from_slice(s);
    }
    wire.extend_from_slice(&part[..100]);
    q.tx_advance(100);
    // Then the controller sends a malformed PDU (bad HLEN).
    let mut bad = capsule_resp(cid, Status::SUCCESS, 0, false);
    bad[2] = 0;
    assert!(q.rx_feed(&bad).is_err());
    wire.extend_from_slice(&sent(&mut q));
    // The controller must be able to cut what it received into whole PDUs.
    let mut off = 0;
    while off < wire.len() {
        let plen = u32::from_le_bytes(wire[off + 4..off + 8].try_into().unwrap()) as usize;
        assert!(
            off + plen <= wire.len(),
            "PDU at {off} (type {}) cut short: {} of {plen} bytes, then the stream ends",
            wire[off],
            wire.len() - off
        );
        off += plen;
    }
    // ... and the last one is our H2CTermReq.
    let last = parse_sent(&wire[wire.len() - 24 - 8..], false, false);
    assert_eq!(last[0].f.pdu_type, PduType::H2CTermReq);
}

/// The same with the ICReq partly sent when the error arrives (the input
/// the fuzzer found: 1 byte of ICReq on the wire, then a bad C2HTermReq).
#[test]
fn h2ctermreq_after_a_partly_sent_icreq() {
    let mut q = QueuePair::new(cfg(false, false));
    q.tx_advance(1);
    q.rx_feed(&icresp_bytes(0, 0, 0, 8192)).unwrap();
    let e = q.rx_feed(&[0x03, 0xff, 0xff, 0x01, 0, 0, 0, 0]);
    assert!(e.is_err());
    let rest = sent(&mut q);
    assert_eq!(
        rest.len(),
        127 + 24 + 8,
        "rest of the ICReq, then the H2CTermReq"
    );
    assert_eq!(rest[127], PduType::H2CTermReq as u8);
}
