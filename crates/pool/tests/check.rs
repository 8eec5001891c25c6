//! `check` names what is wrong in metadata that decodes (valid CRCs) but
//! describes an impossible pool, and `open` refuses it.

mod common;

use common::*;
use farflash_backend::{IoBuf, IoOp};
use farflash_pool::format::{
    pack, seal_all, Record, Superblock, VolRecord, BLOCK, KIND_CHECKPOINT, NO_PARENT,
};
use farflash_pool::testing::{run, Image, MemDevice, Op};
use farflash_pool::{check_backends, LocalPool, PoolError, VolumeStore};
use std::sync::Arc;

const MIB: u64 = 1 << 20;

fn vol(id: u32, name: &str, parent: u32, snapshot: bool) -> Record {
    Record::VolPut(VolRecord {
        id,
        uuid: [id as u8; 16],
        size: MIB,
        parent,
        snapshot,
        name: name.into(),
    })
}

/// A fresh pool's device with its state replaced by `recs` (a new
/// checkpoint and superblock generation).
fn forged(recs: &[Record]) -> MemDevice {
    let (pool, d) = new_pool(&[16 * MIB]);
    pool.create_volume("x", MIB).unwrap();
    drop(pool);
    let mut img: Image = d[0].image();
    let dev = MemDevice::from_image(16 * MIB, img.clone());
    let mut q = farflash_backend::Backend::open_queue(&dev, 1).unwrap();
    let b = run(
        q.as_mut(),
        IoOp::Read {
            offset: 0,
            len: 2 * BLOCK as u32,
        },
        IoBuf::with_capacity(2 * BLOCK),
    )
    .unwrap();
    let mut sb = [
        Superblock::decode(&b[..BLOCK]),
        Superblock::decode(&b[BLOCK..]),
    ]
    .into_iter()
    .flatten()
    .max_by_key(|s| s.generation)
    .unwrap();
    let blocks = seal_all(&pack(recs), KIND_CHECKPOINT, 0, 77, &sb.uuid);
    sb.generation += 1;
    sb.ckpt_slot = 1 - sb.ckpt_slot;
    sb.ckpt_blocks = blocks.len() as u64;
    sb.ckpt_nonce = 77;
    sb.journal_nonce = 78;
    for (i, blk) in blocks.iter().enumerate() {
        let at = (sb.slot_start(sb.ckpt_slot) + i as u64) * BLOCK as u64;
        img.apply(&Op::Write {
            offset: at,
            data: Arc::from(&blk[..]),
        });
    }
    img.apply(&Op::Write {
        offset: (sb.generation % 2) * BLOCK as u64,
        data: Arc::from(&sb.encode()[..]),
    });
    MemDevice::from_image(16 * MIB, img)
}

fn problems(recs: &[Record]) -> Vec<String> {
    let dev = forged(recs);
    let r = check_backends(vec![("m".into(), dev.backend())]);
    let open = LocalPool::open_with(vec![("m".into(), dev.backend())], &opts());
    assert_eq!(open.is_err(), !r.ok(), "open and check agree");
    if let Err(e) = open {
        assert!(matches!(e, PoolError::Corrupt { .. }), "{e}");
    }
    r.problems
}

#[test]
fn a_sound_forged_state_opens() {
    let recs = [
        vol(3, "s", NO_PARENT, true),
        Record::Map {
            id: 3,
            index: 0,
            value: 5,
        },
        vol(4, "c", 3, false),
    ];
    assert!(problems(&recs).is_empty());
    let dev = forged(&recs);
    let pool = LocalPool::open_with(vec![("m".into(), dev.backend())], &opts()).unwrap();
    assert_eq!(pool.get("c").unwrap().parent.as_deref(), Some("s"));
    assert_eq!(pool.get("c").unwrap().shared, CS);
}

#[test]
fn double_mapped_cluster_names_both_volumes() {
    let p = problems(&[
        vol(3, "a", NO_PARENT, false),
        vol(4, "b", NO_PARENT, false),
        Record::Map {
            id: 3,
            index: 1,
            value: 9,
        },
        Record::Map {
            id: 4,
            index: 2,
            value: 9,
        },
    ]);
    assert!(
        p.iter().any(|m| m.contains("cluster 8 mapped twice")
            && m.contains("\"a\"")
            && m.contains("\"b\"")),
        "{p:?}"
    );
}

#[test]
fn impossible_maps_and_parents_are_named() {
    let p = problems(&[
        vol(3, "a", NO_PARENT, false),
        Record::Map {
            id: 3,
            index: 99,
            value: 2,
        },
        Record::Map {
            id: 3,
            index: 0,
            value: 1 << 40,
        },
        vol(5, "orphan", 42, false),
        vol(6, "notsnap", 3, false),
    ]);
    let has = |s: &str| p.iter().any(|m| m.contains(s));
    assert!(
        has("\"a\" maps logical cluster 99 beyond its size"),
        "{p:?}"
    );
    assert!(has("beyond the pool"), "{p:?}");
    assert!(has("\"orphan\" has unknown parent id 42"), "{p:?}");
    assert!(has("\"notsnap\" has parent \"a\", not a snapshot"), "{p:?}");
    let p = problems(&[vol(3, "p", 4, true), vol(4, "q", 3, true)]);
    assert!(p.iter().any(|m| m.contains("parent cycle")), "{p:?}");
    let p = problems(&[
        vol(3, "same", NO_PARENT, false),
        vol(4, "same", NO_PARENT, false),
    ]);
    assert!(
        p.iter()
            .any(|m| m.contains("name \"same\" used by volume ids 3 and 4")),
        "{p:?}"
    );
}

#[test]
fn absurd_sizes_are_refused_before_any_allocation() {
    for size in [0, 1000, u64::MAX, (1 << 50) + 4096] {
        let r = Record::VolPut(VolRecord {
            id: 3,
            uuid: [1; 16],
            size,
            parent: NO_PARENT,
            snapshot: false,
            name: "big".into(),
        });
        let p = problems(&[r]);
        assert!(
            p.iter().any(|m| m.contains("\"big\" has size")),
            "{size}: {p:?}"
        );
    }
}
