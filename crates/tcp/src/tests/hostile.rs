//! Hostile input: fatal PDUs get a C2HTermReq and nothing after it.

use super::*;

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

/// TCP §3.3.2.2: LAST_PDU marks the H2CData that ends an R2T's data; the
/// target goes by DATAO and DATAL instead (Linux nvmet, SPDK), so a host that
/// sets it early or never still gets its write done (and it is counted).
#[test]
fn h2c_data_last_pdu_flag_is_not_judged() {
    use farflash_core::stats::Oddity;
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    for (first, second) in [(flags::DATA_LAST, flags::DATA_LAST), (0, 0)] {
        let before = t.tolerated.get(Oddity::DataLast);
        let mut q = io_queue(&t, cntlid);
        let mut sqe = rw(io::WRITE, 0, 16, 8192, false);
        sqe.cid = q.next_cid();
        let b = q.capsule(&sqe, &[]);
        q.feed(&b);
        let Some(Rx::R2T(r2t)) = q.recv_all().pop() else {
            panic!("no R2T")
        };
        for (offset, fl) in [(0u32, first), (4096, second)] {
            let mut p = vec![0u8; 24 + 4096];
            DataHeader {
                cccid: sqe.cid,
                ttag: r2t.ttag,
                offset,
                length: 4096,
            }
            .encode(&mut p, PduType::H2CData, fl, false, false, 4096);
            p[24..].fill(0x3C);
            q.feed(&p);
        }
        let rx = q.recv_all();
        assert!(
            matches!(rx[..], [Rx::Resp(c)] if c.cid == sqe.cid && c.status == Status::SUCCESS),
            "{first:#x} {second:#x}: {rx:?}"
        );
        assert_eq!(t.tolerated.get(Oddity::DataLast), before + 1);
    }
}

/// TCP §3.6.2.6: a CapsuleCmd without data whose PDO is the header length
/// runs (issue 29), and is counted once although it arrives in pieces.
#[test]
fn capsule_without_data_with_pdo_runs_and_is_counted_once() {
    use farflash_core::stats::Oddity;
    let t = target();
    let mut a = Host::new(&t);
    a.bring_up();
    for (n, pdo) in [(1u64, 72u8), (2, 255)] {
        let sqe = Sqe {
            opcode: farflash_wire::opcode::admin::KEEP_ALIVE,
            flags: farflash_wire::sqe::PSDT_SGL,
            cid: a.next_cid(),
            ..Sqe::default()
        };
        let mut b = a.capsule(&sqe, &[]);
        b[3] = pdo;
        a.feed(&b);
        let rx = a.recv_all();
        assert!(
            matches!(rx[..], [Rx::Resp(c)] if c.cid == sqe.cid && c.status == Status::SUCCESS),
            "{rx:?}"
        );
        assert_eq!(t.tolerated.get(Oddity::PdoWithoutData), n);
    }
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
