//! Behaviours seeded from captures of a real host: tests/differential/seeds/
//! holds host-to-target byte streams of the Linux 6.1 kernel's nvme-tcp
//! host (nvme discover / connect / identify / I/O through the block layer)
//! against `farflash serve --ram 64M`, captured with tcpdump
//! (fuzz/tools/capture-kernel-traffic.sh, pcap_to_corpus.py; one stream per
//! TCP connection). They are replayed command by command:
//! - the ICReq's PFV/HPDA/digest flags/MAXR2T are kept;
//! - an I/O queue stream gets an admin queue of its own first (the
//!   captured host NQN and HOST ID, CC.EN = 1), and its Connect's CNTLID is
//!   rewritten to the one that admin queue got;
//! - H2CData PDUs are sent when the target asks (R2T), with its TTAGs and
//!   its MAXH2CDATA; digests are recomputed;
//! - every command waits for its completion, except AERs.
//!
//! The trace keeps, per command, its opcode, status and data length, and
//! a digest of the data of I/O Reads; DW0 and controller data are the
//! target's own (CNTLID, CAP, VS, Identify) and are compared by the
//! synthetic behaviours instead.

use super::client::{get16, get32, Data, Framing, Ic};
use super::corpus::Behaviour;
use super::ctx::{fnv, Ctx, CC_ENABLE};
use std::path::{Path, PathBuf};

pub fn seed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/seeds")
}

struct Pdu {
    ty: u8,
    hdr: Vec<u8>,
    data: Vec<u8>,
}

fn parse(stream: &[u8]) -> Vec<Pdu> {
    let mut v = vec![];
    let mut o = 0;
    while o + 8 <= stream.len() {
        let (ty, flags, hlen, pdo) = (
            stream[o],
            stream[o + 1],
            stream[o + 2] as usize,
            stream[o + 3] as usize,
        );
        let plen = get32(stream, o + 4) as usize;
        if plen < 8 || o + plen > stream.len() {
            break;
        }
        let p = &stream[o..o + plen];
        let dd = flags & 0x02 != 0;
        let data = if pdo > 0 && pdo < plen {
            p[pdo..plen - if dd { 4 } else { 0 }].to_vec()
        } else {
            vec![]
        };
        v.push(Pdu {
            ty,
            hdr: p[..hlen.min(plen)].to_vec(),
            data,
        });
        o += plen;
    }
    v
}

pub fn seeds() -> Vec<Behaviour> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(seed_dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "bin"));
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).expect("seed file");
            Behaviour {
                name: format!("seed/{name}"),
                cat: "seed",
                run: Box::new(move |x: &mut Ctx| replay(x, &bytes)),
            }
        })
        .collect()
}

fn replay(x: &mut Ctx, stream: &[u8]) {
    let pdus = parse(stream);
    let Some(first) = pdus.first().filter(|p| p.ty == 0 && p.hdr.len() >= 16) else {
        x.log("seed does not start with an ICReq");
        return;
    };
    let ic = Ic {
        pfv: get16(&first.hdr, 8),
        hpda: first.hdr[10],
        dgst: first.hdr[11],
        maxr2t: get32(&first.hdr, 12),
        ..Ic::default()
    };
    // The captured Connect: queue and host identity.
    let connect = pdus
        .iter()
        .find(|p| p.ty == 4 && p.hdr[8] == 0x7F && p.hdr[12] == 1);
    let mut admin = None;
    if let Some(cn) = connect {
        let qid = get16(&cn.hdr, 8 + 42);
        if qid != 0 && cn.data.len() >= 1024 {
            x.hostid.copy_from_slice(&cn.data[0..16]);
            x.hostnqn = String::from_utf8_lossy(&cn.data[512..768])
                .trim_end_matches('\0')
                .to_string();
            let mut a = x.open(Ic::default());
            if x.connect(&mut a, 0, 0xFFFF).is_some_and(|r| r.ok()) {
                x.enable(&mut a, CC_ENABLE);
            }
            admin = Some(a);
        }
    }
    let mut c = x.open(ic);
    let mut used = vec![false; pdus.len()];
    for i in 1..pdus.len() {
        if used[i] || !c.alive() {
            continue;
        }
        let p = &pdus[i];
        match p.ty {
            4 if p.hdr.len() >= 72 => {
                let mut sqe = [0u8; 64];
                sqe.copy_from_slice(&p.hdr[8..72]);
                let opc = sqe[0];
                let cid = get16(&sqe, 2);
                let mut incap = p.data.clone();
                if opc == 0x7F && sqe[4] == 1 && incap.len() >= 18 && get16(&sqe, 42) != 0 {
                    if let Some(a) = &admin {
                        incap[16..18].copy_from_slice(&a.cntlid.to_le_bytes());
                    }
                }
                // Data the host sent later for this command, on R2T.
                let sgl_type = sqe[39];
                let mut later = vec![];
                if incap.is_empty() && sgl_type == 0x5A && opc & 1 == 1 {
                    for (j, q) in pdus.iter().enumerate().skip(i + 1) {
                        if q.ty == 6 && q.hdr.len() >= 24 && get16(&q.hdr, 8) == cid && !used[j] {
                            let off = get32(&q.hdr, 12) as usize;
                            if later.len() < off + q.data.len() {
                                later.resize(off + q.data.len(), 0);
                            }
                            later[off..off + q.data.len()].copy_from_slice(&q.data);
                            used[j] = true;
                        }
                    }
                }
                let data = if !incap.is_empty() {
                    Data::InCapsule(incap)
                } else if !later.is_empty() {
                    Data::R2t(later)
                } else {
                    Data::None
                };
                c.send(&sqe, &data, Framing::default());
                let fct = if opc == 0x7F {
                    format!(" fct={:02x}", sqe[4])
                } else {
                    String::new()
                };
                let label = format!("#{i} opc={opc:02x}{fct}");
                if opc == 0x0C && admin.is_none() {
                    continue; // an AER stays outstanding
                }
                if let Some(r) = c.wait(cid) {
                    let mut l = format!("{label}: {}", r.status());
                    if !r.data.is_empty() {
                        l += &format!(" c2h={}", r.data.len());
                        if opc == 0x02 && admin.is_some() {
                            l += &format!(" data={:016x}", fnv(&r.data));
                        }
                    }
                    x.log(l);
                }
            }
            6 => x.log(format!("#{i} h2cdata without a command")),
            ty => {
                c.raw(&p.hdr);
                x.log(format!("#{i} sent pdu type {ty:#x}"));
            }
        }
    }
    drop(admin);
}
