//! The protocol paths a real host takes: ICResp, the Identify checklist,
//! in-capsule and R2T writes, reads, digests, status codes.

use super::*;

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
    let r2t = q.write_r2t(&mut sqe);
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
    let got = data_of(&rx);
    assert_eq!(got, big);
    assert!(rx.len() >= 3, "192 KiB read comes in several C2HData PDUs");
    let totals = t.subsystems()[0].stats.totals();
    assert_eq!((totals.write_cmds, totals.read_cmds), (2, 2));
}

/// With SQ flow control disabled at Connect (CATTR bit 2), a successful read
/// ends with a C2HData carrying LAST and SUCCESS and no CapsuleResp (TCP
/// §3.6.2.9); failures and data-less commands still get a CapsuleResp, with
/// SQHD FFFFh. With flow control on, every command gets its CapsuleResp.
#[test]
fn c2hdata_success_replaces_the_capsule_resp_without_sq_flow_control() {
    use farflash_wire::fabrics::CATTR_DISABLE_SQ_FLOW_CONTROL;
    let t = target_with(
        vec![],
        TransportConfig {
            data: farflash_core::config::DataSizes {
                max_c2h_data: 8192,
                ..Default::default()
            },
            ..TransportConfig::default()
        },
    );
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = Host::new(&t);
    q.icreq(false, false);
    let c = q.connect_full(1, cntlid, HOST, 31, CATTR_DISABLE_SQ_FLOW_CONTROL);
    assert_eq!(c.status, Status::SUCCESS, "{c:?}");
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
    // A write has no C2HData: its CapsuleResp stays, SQHD FFFFh.
    let w = q.resp(rw(io::WRITE, 0, 8, 4096, true), &data);
    assert_eq!((w.status, w.sqhd), (Status::SUCCESS, 0xFFFF));
    // 4 KiB read: one C2HData, LAST | SUCCESS, nothing after it.
    let rx = q.cmd(rw(io::READ, 0, 8, 4096, false), &[]);
    match &rx[..] {
        [Rx::Data(h, d, fl)] => {
            assert_eq!(*fl, flags::DATA_LAST | flags::DATA_SUCCESS);
            assert_eq!((h.offset, d), (0, &data));
        }
        other => panic!("{other:?}"),
    }
    // 20 KiB read in 8 KiB PDUs: SUCCESS only on the last one.
    let rx = q.cmd(rw(io::READ, 0, 40, 20480, false), &[]);
    let fl: Vec<u8> = rx
        .iter()
        .map(|r| match r {
            Rx::Data(_, _, f) => *f,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(fl, [0, 0, flags::DATA_LAST | flags::DATA_SUCCESS]);
    // A failing read (LBA out of range) gets a CapsuleResp with its status.
    let rx = q.cmd(rw(io::READ, 1 << 30, 8, 4096, false), &[]);
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.status == Status::LBA_OUT_OF_RANGE.dnr() && c.sqhd == 0xFFFF),
        "{rx:?}"
    );
    // Flow control on (the default): LAST only, then the CapsuleResp.
    let mut q2 = Host::new(&t);
    q2.icreq(false, false);
    assert_eq!(q2.connect(2, cntlid, HOST).status, Status::SUCCESS);
    let rx = q2.cmd(rw(io::READ, 0, 8, 4096, false), &[]);
    assert!(
        matches!(&rx[..], [Rx::Data(_, _, f), Rx::Resp(c)]
            if *f == flags::DATA_LAST && c.status == Status::SUCCESS && c.sqhd != 0xFFFF),
        "{rx:?}"
    );
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
        matches!(rx[..], [Rx::Resp(c)] if c.status.code() == crate::TRANSIENT_TRANSPORT_ERROR),
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

/// A large H2CData payload goes from the "socket" straight into the
/// command's buffer once its header is in (no staging in the receive
/// buffer, which stays smaller than one payload), whatever the read sizes, with
/// the next command's capsule right behind it in the same reads; with a data
/// digest (checked over the whole payload) it is staged as before. A bad
/// header is caught before any payload is placed.
#[test]
fn h2c_payloads_are_received_in_place() {
    for (hd, dd) in [(false, false), (true, false), (true, true)] {
        for first in [24usize, 31, 100, 5000] {
            let t = target();
            let mut a = Host::new(&t);
            let cntlid = a.bring_up();
            let mut q = Host::new(&t);
            q.icreq(hd, dd);
            assert_eq!(q.connect(1, cntlid, HOST).status, Status::SUCCESS);
            let big: Vec<u8> = (0..131072u32)
                .map(|i| (i % 253) as u8 ^ first as u8)
                .collect();
            let mut sqe = rw(io::WRITE, 64, 256, big.len() as u32, false);
            let r2t = q.write_r2t(&mut sqe);
            // Both payloads, then a read of what they wrote, in one stream:
            // a first read of `first` bytes, then reads as large as offered.
            let mut stream = h2c_pdus(&r2t, &big, hd, dd);
            let mut rd = rw(io::READ, 64, 256, big.len() as u32, false);
            rd.cid = q.next_cid();
            stream.extend_from_slice(&q.capsule(&rd, &[]));
            push(&mut q.q, &stream[..first]);
            let in_place = q.q.transport().receiving_in_place();
            push(&mut q.q, &stream[first..]);
            assert!(!q.q.transport().receiving_in_place());
            q.q.commit();
            while q.q.in_flight() > 0 {
                q.q.poll_backends();
            }
            let rx = q.recv_all();
            assert!(
                matches!(rx.last(), Some(Rx::Resp(c)) if c.status == Status::SUCCESS && c.cid == rd.cid),
                "{hd} {dd} {first}: {rx:?}"
            );
            assert!(
                rx.iter().any(
                    |r| matches!(r, Rx::Resp(c) if c.status == Status::SUCCESS && c.cid == sqe.cid)
                ),
                "{rx:?}"
            );
            assert_eq!(data_of(&rx), big, "{hd} {dd} {first}");
            let header = if hd { 28 } else { 24 };
            // Staged only with a data digest.
            assert_eq!(in_place, !dd && first >= header, "{hd} {dd} {first}");
            if !dd {
                // (it holds the next reads' 16 KiB; a staged 64 KiB PDU would have grown it)
                assert!(
                    q.q.transport().rx.len() < 65536,
                    "{hd} {dd} {first}: payload staged"
                );
            }
        }
    }
    // A wrong TTAG in the header of a payload that would be received in
    // place: C2HTermReq before any of it is taken.
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    let mut r2t = q.write_r2t(&mut rw(io::WRITE, 0, 256, 131072, false));
    r2t.ttag ^= 0x55;
    let stream = h2c_pdus(&r2t, &vec![1u8; 131072], false, false);
    push(&mut q.q, &stream[..100]);
    assert!(!q.q.transport().receiving_in_place());
    let rx = q.recv_all();
    assert!(matches!(rx[..], [Rx::Term(_)]), "{rx:?}");
    assert!(q.q.wants_close());
}

/// Base §4.3.2 with SGLS bits 18 and 20: an in-capsule Data Block at an
/// offset into the in-capsule data, and SGLs longer than the data (only the
/// data moves); a shorter SGL, or an offset past what arrived, is refused.
/// (The differential harness found nvmet honouring the offset where
/// farflash refused it while reporting bit 20.)
#[test]
fn in_capsule_offsets_and_longer_sgls() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    let block: Vec<u8> = (0..512u32).map(|i| (i * 3 + 1) as u8).collect();
    // The block at offset 512 of 1024 in-capsule bytes.
    let mut icd = vec![0xEEu8; 1024];
    icd[512..].copy_from_slice(&block);
    let mut w = rw(io::WRITE, 4, 1, 512, true);
    w.dptr.addr = 512;
    assert_eq!(q.resp(w, &icd).status, Status::SUCCESS);
    let read_back = |q: &mut Host, sgl_len: u32| {
        let mut r = rw(io::READ, 4, 1, 512, false);
        r.dptr.length = sgl_len;
        data_of(&q.cmd(r, &[]))
    };
    assert_eq!(read_back(&mut q, 512), block);
    // A read with an SGL twice the data: the data, no more.
    assert_eq!(read_back(&mut q, 1024), block);
    // A write whose transport SGL is longer: the R2T asks for the data only.
    let mut w = rw(io::WRITE, 5, 1, 512, false);
    w.dptr.length = 4096;
    let r2t = q.write_r2t(&mut w);
    assert_eq!(r2t.length, 512);
    q.send_h2c(&r2t, &block);
    assert!(matches!(q.recv_all()[..], [Rx::Resp(c)] if c.status == Status::SUCCESS));
    // Refused: an offset past the in-capsule data, a shorter SGL.
    let mut w = rw(io::WRITE, 4, 1, 512, true);
    w.dptr.addr = 768;
    assert_eq!(q.resp(w, &icd).status, Status::SGL_INVALID_OFFSET.dnr());
    let mut w = rw(io::WRITE, 4, 1, 512, false);
    w.dptr.length = 511;
    assert_eq!(q.resp(w, &[]).status, Status::SGL_INVALID_DATA_LENGTH.dnr());
    assert_eq!(
        read_back(&mut q, 512),
        block,
        "the refused writes wrote nothing"
    );
}

/// A command the command layer answers at once frees its slot inside the
/// receive that brought it; the next capsule of the same receive may take
/// that slot. The old command's transfer state left the slot with its
/// completion (sent after the receive's PDUs), so the new write's R2T and
/// H2CData find their slot. (Seen with the Linux 6.12 host
/// re-authenticating I/O queues when the state was a table beside the
/// slots: an H2CData for a reused slot got a C2HTermReq, FEI 10.)
#[test]
fn a_slot_freed_and_taken_in_one_receive_keeps_the_new_commands_transfer() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    // A read of a namespace that does not exist (answered at once), then a
    // write by R2T, in one receive.
    let mut bad = rw(io::READ, 0, 1, 512, false);
    bad.nsid = 9;
    bad.cid = q.next_cid();
    let mut write = rw(io::WRITE, 6, 1, 512, false);
    write.cid = q.next_cid();
    let mut batch = q.capsule(&bad, &[]);
    batch.extend(q.capsule(&write, &[]));
    push(&mut q.q, &batch);
    let rx = q.recv_all();
    // The R2T goes out as its capsule is read; completions after the receive.
    let [Rx::R2T(r2t), Rx::Resp(c)] = &rx[..] else {
        panic!("{rx:?}")
    };
    assert_eq!(
        (c.cid, c.status),
        (bad.cid, Status::INVALID_NAMESPACE.dnr())
    );
    assert_eq!((r2t.cccid, r2t.length), (write.cid, 512));
    let block: Vec<u8> = (0..512u32).map(|i| (i * 5) as u8).collect();
    q.send_h2c(r2t, &block);
    let rx = q.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.cid == write.cid && c.status == Status::SUCCESS),
        "{rx:?}"
    );
    let got = data_of(&q.cmd(rw(io::READ, 6, 1, 512, false), &[]));
    assert_eq!(got, block);
}
