//! `pool_metadata`: hostile on-disk metadata of a local pool
//! (`farflash-pool`).
//!
//! Input: byte 0 picks a mode, the rest is its data.
//!
//! * 0: raw bytes through the decoders (`Superblock::decode`,
//!   `open_block`, `Record::decode_all`); what decodes must re-encode to
//!   something that decodes equal.
//! * 1: the bytes as the records of a checkpoint: a fresh pool's device
//!   gets a checkpoint holding them (blocks cut where the input says,
//!   with valid CRCs and chain, so the records themselves are what is
//!   hostile) and a superblock naming it.
//! * 2: the same as journal transactions over an empty checkpoint (a
//!   block ends a transaction when its first byte is odd).
//! * 3: raw overwrites of a fresh pool's metadata area: (offset u16 in
//!   512-byte units, length u8, bytes) triples.
//!
//! Invariants: nothing panics; `check` and `open` agree (a pool that opens
//! checks clean); an opened pool's volumes can be listed, opened, read
//! and written, and accounting holds (allocated = what volumes hold).

use farflash_backend::{IoBuf, IoOp};
use farflash_pool::format::{
    open_block, seal_all, Record, Superblock, BLOCK, HEADER, KIND_CHECKPOINT, KIND_JOURNAL, PAYLOAD,
};
use farflash_pool::testing::{run as run_io, Image, MemDevice, Op};
use farflash_pool::{check_backends, LocalPool, PoolOptions, VolumeStore};
use std::sync::Arc;

const DEV: u64 = 4 << 20;

fn opts() -> PoolOptions {
    PoolOptions {
        cluster_size: Some(64 << 10),
        max_volumes: 16,
        journal_blocks: 16,
        commit_interval: None,
    }
}

pub fn run(data: &[u8]) {
    outcome(data);
}

/// Runs one input; the volumes of the pool it opened, if it opened one.
fn outcome(data: &[u8]) -> Option<Vec<String>> {
    let (&mode, rest) = data.split_first()?;
    match mode % 4 {
        0 => {
            decoders(rest);
            None
        }
        1 => forged(rest, true),
        2 => forged(rest, false),
        _ => overwrite(rest),
    }
}

fn decoders(b: &[u8]) {
    let mut block = [0u8; BLOCK];
    let n = b.len().min(BLOCK);
    block[..n].copy_from_slice(&b[..n]);
    if let Ok(sb) = Superblock::decode(&block) {
        assert_eq!(Superblock::decode(&sb.encode()).as_ref(), Ok(&sb));
    }
    let _ = open_block(&block, &[0; 16]);
    let mut recs = Vec::new();
    if Record::decode_all(b, &mut recs).is_ok() {
        let mut enc = Vec::new();
        recs.iter().for_each(|r| r.encode(&mut enc));
        let mut again = Vec::new();
        Record::decode_all(&enc, &mut again).expect("re-encoded records decode");
        assert_eq!(again, recs);
    }
}

/// A fresh pool with one written volume; returns its device.
fn fresh() -> MemDevice {
    let dev = MemDevice::recording(DEV);
    let pool =
        LocalPool::create_with("f", vec![("f".into(), dev.backend())], &opts()).expect("create");
    pool.create_volume("v", 1 << 20).expect("volume");
    let be = pool.open("v").expect("open");
    let mut q = be.open_queue(2).expect("queue");
    let w = IoOp::Write {
        offset: 0,
        len: 4096,
        fua: true,
    };
    run_io(q.as_mut(), w, IoBuf::from_slice(&[7; 4096])).expect("write");
    dev
}

fn superblock(img: &Image) -> Superblock {
    let dev = MemDevice::from_image(DEV, img.clone());
    let mut q = farflash_backend::Backend::open_queue(&dev, 1).expect("queue");
    let op = IoOp::Read {
        offset: 0,
        len: 2 * BLOCK as u32,
    };
    let b = run_io(q.as_mut(), op, IoBuf::with_capacity(2 * BLOCK)).expect("read");
    let copies = [
        Superblock::decode(&b[..BLOCK]),
        Superblock::decode(&b[BLOCK..]),
    ];
    copies
        .into_iter()
        .flatten()
        .max_by_key(|s| s.generation)
        .expect("a fresh pool's superblock")
}

fn put(img: &mut Image, block: u64, bytes: &[u8]) {
    img.apply(&Op::Write {
        offset: block * BLOCK as u64,
        data: Arc::from(bytes),
    });
}

/// Cuts `b` into block payloads: each piece's length is taken from its
/// first two bytes (clamped to a block's payload).
fn pieces(b: &[u8]) -> Vec<(bool, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 2 <= b.len() && out.len() < 32 {
        let want = usize::from(u16::from_le_bytes([b[at], b[at + 1]])) % (PAYLOAD + 1);
        let end = (at + 2 + want).min(b.len());
        out.push((b[at] & 1 == 1, b[at + 2..end].to_vec()));
        at = end;
    }
    out
}

fn forged(b: &[u8], checkpoint: bool) -> Option<Vec<String>> {
    let mut img = fresh().image();
    let mut sb = superblock(&img);
    let parts = pieces(b);
    let payloads: Vec<Vec<u8>> = parts.iter().map(|p| p.1.clone()).collect();
    sb.generation += 1;
    sb.ckpt_slot = 1 - sb.ckpt_slot;
    sb.ckpt_nonce = 0x1111_2222;
    sb.journal_seq = 1000;
    sb.journal_nonce = 0x3333_4444;
    if checkpoint {
        let n = payloads.len().min(sb.slot_blocks as usize);
        let blocks = seal_all(&payloads[..n], KIND_CHECKPOINT, 0, sb.ckpt_nonce, &sb.uuid);
        sb.ckpt_blocks = n as u64;
        for (i, blk) in blocks.iter().enumerate() {
            put(&mut img, sb.slot_start(sb.ckpt_slot) + i as u64, blk);
        }
    } else {
        sb.ckpt_blocks = 0;
        let (mut seq, mut prev) = (sb.journal_seq, sb.journal_nonce);
        for (i, (last, p)) in parts.iter().enumerate().take(sb.journal_blocks as usize) {
            let mut blk = seal_all(std::slice::from_ref(p), KIND_JOURNAL, seq, prev, &sb.uuid)[0];
            if !last {
                // Not the end of its transaction: clear the flag, re-seal.
                let h = farflash_pool::format::BlockHeader {
                    seq,
                    prev,
                    kind: KIND_JOURNAL,
                    last: false,
                    used: p.len() as u16,
                };
                blk[HEADER..].fill(0);
                blk[HEADER..HEADER + p.len()].copy_from_slice(p);
                farflash_pool::format::seal_block(&mut blk, &h, &sb.uuid);
            }
            prev = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
            seq += 1;
            put(&mut img, sb.journal_start() + i as u64, &blk);
        }
    }
    put(&mut img, sb.generation % 2, &sb.encode());
    exercise(img)
}

fn overwrite(b: &[u8]) -> Option<Vec<String>> {
    let mut img = fresh().image();
    let sb = superblock(&img);
    let meta = sb.meta_end().unwrap_or(0);
    let mut at = 0;
    while at + 3 <= b.len() {
        let off = u64::from(u16::from_le_bytes([b[at], b[at + 1]])) * 512 % meta.max(1);
        let n = usize::from(b[at + 2]).min(b.len() - at - 3);
        let bytes = &b[at + 3..at + 3 + n];
        // The image works in whole sectors: merge into the sector.
        let mut sector = [0u8; 512];
        let dev = MemDevice::from_image(DEV, img.clone());
        let mut q = farflash_backend::Backend::open_queue(&dev, 1).expect("queue");
        let base = off / 4096 * 4096;
        let rd = run_io(
            q.as_mut(),
            IoOp::Read {
                offset: base,
                len: 4096,
            },
            IoBuf::with_capacity(4096),
        )
        .expect("read");
        let within = (off - base) as usize;
        sector.copy_from_slice(&rd[within..within + 512]);
        let k = n.min(512);
        sector[..k].copy_from_slice(&bytes[..k]);
        let mut page = rd.to_vec();
        page[within..within + 512].copy_from_slice(&sector);
        img.apply(&Op::Write {
            offset: base,
            data: Arc::from(page),
        });
        at += 3 + n;
    }
    exercise(img)
}

/// Opens the image as a pool (or not) and uses it; its volume names.
fn exercise(img: Image) -> Option<Vec<String>> {
    let dev = MemDevice::from_image(DEV, img);
    let report = check_backends(vec![("d".into(), dev.backend())]);
    let pool = match LocalPool::open_with(vec![("d".into(), dev.backend())], &opts()) {
        Ok(p) => p,
        Err(_) => {
            assert!(!report.ok(), "open refused what check passed");
            return None;
        }
    };
    assert!(
        report.ok(),
        "check refused what open accepted: {:?}",
        report.problems
    );
    let vols = pool.list();
    let own: u64 = vols.iter().map(|v| v.allocated).sum();
    let st = pool.stats();
    assert_eq!(own, st.allocated, "accounting");
    assert!(st.allocated <= st.size);
    for v in vols.iter().take(4) {
        let be = pool.open(&v.name).expect("open listed volume");
        let mut q = be.open_queue(2).expect("queue");
        let last = (v.size / 4096).saturating_sub(1) * 4096;
        for off in [0, last] {
            let r = IoOp::Read {
                offset: off,
                len: 4096,
            };
            run_io(q.as_mut(), r, IoBuf::with_capacity(4096)).expect("read a listed volume");
            if !v.is_snapshot {
                let w = IoOp::Write {
                    offset: off,
                    len: 4096,
                    fua: false,
                };
                let _ = run_io(q.as_mut(), w, IoBuf::from_slice(&[1; 4096]));
            }
        }
    }
    let _ = pool.create_volume("new", 1 << 20);
    let _ = pool.commit();
    let mut names: Vec<String> = vols.into_iter().map(|v| v.name).collect();
    names.sort();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::outcome;

    fn seed(name: &str) -> Vec<u8> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus/pool_metadata")
            .join(name);
        std::fs::read(p).expect("seed")
    }

    #[test]
    fn seeds_reach_the_checks() {
        let opened = |n: &str| outcome(&seed(n));
        assert_eq!(opened("checkpoint-volume"), Some(vec!["x".to_string()]));
        assert_eq!(
            opened("checkpoint-snapshot-clone"),
            Some(vec!["c".to_string(), "s".to_string()])
        );
        assert_eq!(opened("journal-two-blocks"), Some(vec!["j".to_string()]));
        for refused in [
            "checkpoint-double-map",
            "checkpoint-cycle",
            "checkpoint-beyond",
            "journal-unknown-id",
            "checkpoint-huge-size",
            "overwrite-superblock",
        ] {
            assert_eq!(opened(refused), None, "{refused}");
        }
    }

    #[test]
    fn random_inputs_smoke() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200u64 {
            let len = (next() % 600) as usize;
            let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(b) = data.first_mut() {
                *b = (i % 4) as u8;
            }
            outcome(&data);
        }
    }
}
