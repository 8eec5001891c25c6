//! The target's own protocol cost per command, without sockets: a
//! `QueuePair` on a null namespace is fed batches of 4 KiB Read and Write
//! capsules (as one receive would bring them) and its output is drained.
//! This isolates farflash's user-space work per I/O from kernel TCP.
//!
//! cargo bench --bench queue_pair            (prints ns per command)

use farflash_control::build_subsystems;
use farflash_core::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig};
use farflash_core::Target;
use farflash_tcp::QueuePair;
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::{fctype, io};
use farflash_wire::pdu::{self, IcReq, PduType};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Cqe, Sqe};
use std::sync::Arc;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.farflash:bench";

fn capsule(sqe: &Sqe, icd: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + 72 + icd.len(), 0);
    let (pdo, _) = pdu::write_header(
        &mut out[start..],
        PduType::CapsuleCmd,
        0,
        false,
        false,
        icd.len(),
    );
    let mut raw = [0u8; 64];
    sqe.encode(&mut raw);
    out[start + 8..start + 72].copy_from_slice(&raw);
    out[start + pdo..start + pdo + icd.len()].copy_from_slice(icd);
}

fn feed(q: &mut QueuePair, bytes: &[u8]) {
    let mut off = 0;
    while off < bytes.len() {
        let space = q.rx_space();
        let n = space.len().min(bytes.len() - off);
        space[..n].copy_from_slice(&bytes[off..off + n]);
        q.on_received(n);
        off += n;
    }
    q.commit();
    while q.in_flight() > 0 {
        q.poll_backends();
    }
}

fn connect(t: &Arc<Target>, qid: u16, cntlid: u16) -> (QueuePair, u16) {
    let a = "127.0.0.1:4420".parse().unwrap_or_else(|_| unreachable!());
    let mut q = QueuePair::new(t.clone(), a, a);
    let mut b = [0u8; 128];
    IcReq::default().encode(&mut b);
    feed(&mut q, &b);
    q.take_output();
    let d = ConnectData {
        hostid: [1; 16],
        cntlid,
        subnqn: NQN.into(),
        hostnqn: "nqn.bench".into(),
    };
    let mut data = [0u8; 1024];
    d.encode(&mut data);
    let mut v = Vec::new();
    capsule(
        &ConnectCmd {
            recfmt: 0,
            qid,
            sqsize: 127,
            cattr: 0,
            kato: 0,
        }
        .to_sqe(1),
        &data,
        &mut v,
    );
    feed(&mut q, &v);
    let out = q.take_output();
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&out[8..24]);
    let c = Cqe::decode(&raw);
    assert!(c.status.is_success(), "connect failed: {:?}", c.status);
    (q, c.dw0 as u16)
}

fn main() {
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: Default::default(),
        subsystems: vec![SubsystemConfig::new(
            NQN,
            vec![NamespaceConfig {
                block_size: Some(4096),
                ..NamespaceConfig::sized(BackendKind::Null, 1 << 30)
            }],
        )],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).expect("subsystem");
    let t = Target::new(subs, cfg.transport.clone(), vec![]);
    let (mut admin, cntlid) = connect(&t, 0, CNTLID_DYNAMIC);
    let mut v = Vec::new();
    capsule(
        &PropertyCmd {
            size8: false,
            offset: props::CC,
            value: props::cc::ENABLE_DEFAULT as u64,
        }
        .to_sqe(2, fctype::PROPERTY_SET),
        &[],
        &mut v,
    );
    feed(&mut admin, &v);
    admin.take_output();
    let (mut q, _) = connect(&t, 1, cntlid);

    let data = vec![0x5Au8; 4096];
    for (name, write) in [("4 KiB read", false), ("4 KiB write (in-capsule)", true)] {
        // One batch = 32 commands, as one receive at QD 32 would bring them.
        let mut batch = Vec::new();
        for i in 0..32u16 {
            let sqe = Sqe {
                opcode: if write { io::WRITE } else { io::READ },
                flags: PSDT_SGL,
                cid: i,
                nsid: 1,
                dptr: if write {
                    SglDescriptor::in_capsule(4096)
                } else {
                    SglDescriptor::transport(4096)
                },
                cdw10: i as u32 * 8,
                ..Sqe::default()
            };
            capsule(&sqe, if write { &data } else { &[] }, &mut batch);
        }
        let mut run = |rounds: u32| {
            let t0 = Instant::now();
            for _ in 0..rounds {
                feed(&mut q, &batch);
                // Drain the output the way the transport's writev would.
                while q.output_len() > 0 {
                    let bytes: usize = {
                        let mut iov = [std::io::IoSlice::new(&[]); 64];
                        let n = q.output_slices(&mut iov);
                        iov[..n].iter().map(|s| s.len()).sum()
                    };
                    q.consume_output(bytes);
                }
            }
            t0.elapsed()
        };
        run(2_000); // warm the buffer pools
        let mut samples: Vec<f64> = (0..7)
            .map(|_| run(20_000).as_nanos() as f64 / (20_000.0 * 32.0))
            .collect();
        samples.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{name:<26} {:>7.1} ns/command (median of 7; min {:.1})",
            samples[3], samples[0]
        );
    }
}
