//! RBD pools (farflash-pool's `RbdPool`, issue #42) against a real
//! single-node Ceph cluster (tests/ceph/cluster.sh, started once for the
//! file: one test runs every step in order):
//!
//! - create, list, get, resize (grow while exported, the open namespace
//!   sees it; shrink refused while exported and below the data unless
//!   forced), rename, delete; the images' features;
//! - a snapshot (`VOL@SNAP`, protected) of an exported volume, a write
//!   after it not in the snapshot (`rbd export`), a clone reading the data
//!   written before the snapshot, the snapshot's and the volume's delete
//!   refused naming the clone, allowed after flatten;
//! - errors: an unknown pool, name collisions, bad names and sizes, calls
//!   on the wrong kind of name;
//! - UUIDs stable across reconnects, given on first sight to images made
//!   outside farflash, not inherited by an `rbd clone` made outside.
//!
//! `cargo test --test rbd_pool -- --ignored --test-threads=1` (tests/run.sh).

mod ceph;

use ceph::Cluster;
use farflash_backend::{IoBuf, IoOp, RbdOptions, SharedBackend};
use farflash_pool::{PoolError, RbdPool, VolumeInfo, VolumeStore};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn opts(c: &Cluster, pool: &str) -> RbdOptions {
    RbdOptions {
        pool: pool.into(),
        image: String::new(),
        conf: Some(c.conf().into()),
        id: None,
        keyring: None,
        block_size: 4096,
    }
}

fn pattern(n: u64, seed: u8) -> Vec<u8> {
    (0..n as usize)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 12) as u8)
        .collect()
}

fn write(b: &SharedBackend, offset: u64, data: &[u8]) {
    let mut q = b.open_queue(4).expect("queue");
    let len = u32::try_from(data.len()).expect("small write");
    let op = IoOp::Write {
        offset,
        len,
        fua: true,
    };
    farflash_pool::testing::run(q.as_mut(), op, IoBuf::from_slice(data)).expect("write");
}

fn read(b: &SharedBackend, offset: u64, len: u64) -> Vec<u8> {
    let mut q = b.open_queue(4).expect("queue");
    let len32 = u32::try_from(len).expect("small read");
    let op = IoOp::Read { offset, len: len32 };
    let buf = IoBuf::with_capacity(len as usize);
    let out = farflash_pool::testing::run(q.as_mut(), op, buf).expect("read");
    out.as_slice().to_vec()
}

/// Opens `name` as a namespace would and takes the image's lock (what an
/// optimized ANA state does at start), so it can be written.
fn export(pool: &RbdPool, name: &str) -> SharedBackend {
    let b = pool.open(name).expect("open");
    b.set_ana_optimized(true).expect("take the exclusive lock");
    b
}

/// The bytes `[offset, offset + len)` of `spec` (`pool/image[@snap]`),
/// as `rbd export` writes them.
fn rbd_export(c: &Cluster, spec: &str, offset: u64, len: u64) -> Vec<u8> {
    let dir = tempdir(c, spec);
    let file = dir.join("export");
    c.rbd(&["export", spec, file.to_str().expect("utf-8")]);
    let all = std::fs::read(&file).expect("read the export");
    let _ = std::fs::remove_dir_all(&dir);
    all[offset as usize..(offset + len) as usize].to_vec()
}

fn tempdir(_c: &Cluster, spec: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "ff-rbdpool-{}-{}",
        std::process::id(),
        spec.replace(['/', '@'], "_")
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Waits for the images dropped so far to be closed (closes run on
/// threads of their own; until then the image has a watcher and counts as
/// in use).
fn closed() {
    let left = farflash_backend::wait_closed(Duration::from_secs(60));
    assert_eq!(left, 0, "image closes still running after 60 s");
}

fn find<'a>(list: &'a [VolumeInfo], name: &str) -> &'a VolumeInfo {
    list.iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("{name} not listed in {list:?}"))
}

#[test]
#[ignore = "starts a Ceph cluster (Debian's ceph packages); run by tests/run.sh"]
fn rbd_pool_volume_api_on_a_real_cluster() {
    let c = Cluster::start("pool");
    let pool = RbdPool::connect(&opts(&c, "rbd")).expect("connect to pool rbd");
    assert_eq!((pool.kind(), pool.name()), ("rbd", "rbd"));
    let t = Instant::now();
    lifecycle(&c, &pool);
    eprintln!("lifecycle done at {:.1?}", t.elapsed());
    snapshots_clones_and_flatten(&c, &pool);
    eprintln!("snapshots and clones done at {:.1?}", t.elapsed());
    refusals(&c, &pool);
    eprintln!("refusals done at {:.1?}", t.elapsed());
    uuids_stay(&c, pool);
    eprintln!("uuids done at {:.1?}", t.elapsed());
}

fn lifecycle(c: &Cluster, pool: &RbdPool) {
    let before = pool.stats();
    assert_eq!(before.volumes, 1, "cluster.sh makes rbd/test: {before:?}");
    assert!(before.free > 0 && before.size >= before.free, "{before:?}");
    assert_eq!(before.cluster_size, 4 * MIB);

    let v = pool.create_volume("v1", 64 * MIB).expect("create v1");
    assert_eq!((v.name.as_str(), v.size, v.allocated), ("v1", 64 * MIB, 0));
    assert!(!v.is_snapshot && !v.exported && v.parent.is_none() && !v.uuid.is_nil());
    let info = String::from_utf8_lossy(&c.rbd(&["info", "rbd/v1"]).stdout).into_owned();
    assert!(
        info.contains("features: layering, exclusive-lock, object-map, fast-diff, deep-flatten"),
        "{info}"
    );
    assert_eq!(pool.get("v1").expect("get v1"), v);
    let list = pool.list();
    assert_eq!(find(&list, "v1"), &v);
    assert!(!find(&list, "test").is_snapshot);
    assert_eq!(pool.stats().volumes, 2);

    // Exported: data written through the namespace backend is counted.
    let b = export(pool, "v1");
    let data = pattern(MIB, 1);
    write(&b, 0, &data);
    let v = pool.get("v1").expect("get v1");
    assert!(v.exported);
    assert_eq!(v.allocated, 4 * MIB, "one object written: {v:?}");
    assert!(matches!(pool.delete("v1"), Err(PoolError::Exported(n)) if n == "v1"));
    assert!(matches!(pool.rename("v1", "v9"), Err(PoolError::Exported(n)) if n == "v1"));
    for force in [false, true] {
        let r = pool.resize("v1", 32 * MIB, force);
        assert!(
            matches!(r, Err(PoolError::Exported(ref n)) if n == "v1"),
            "{r:?}"
        );
    }
    // Growing an exported volume: the namespace follows (librbd's update
    // watch wakes `wait_changed`, as it wakes the target's size check).
    pool.resize("v1", 96 * MIB, false)
        .expect("grow v1 while exported");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        b.refresh_capacity().expect("refresh");
        if b.capacity() == 96 * MIB {
            break;
        }
        assert!(Instant::now() < deadline, "capacity {}", b.capacity());
        farflash_backend::wait_changed(Duration::from_millis(200));
    }
    assert_eq!(read(&b, 0, MIB), data);
    drop(b);
    closed();
    assert!(!pool.get("v1").expect("get").exported);

    // Shrink: below the data only with force.
    match pool.resize("v1", MIB / 2, false) {
        Err(PoolError::BelowUsed {
            name,
            size,
            highest_written,
        }) => assert_eq!((name.as_str(), size, highest_written), ("v1", MIB / 2, MIB)),
        r => panic!("shrink below the data: {r:?}"),
    }
    pool.resize("v1", 2 * MIB, false)
        .expect("shrink above the data");
    assert_eq!(pool.get("v1").expect("get").size, 2 * MIB);
    pool.resize("v1", MIB / 2, true).expect("forced shrink");
    assert_eq!(pool.get("v1").expect("get").size, MIB / 2);
    assert_eq!(
        rbd_export(c, "rbd/v1", 0, MIB / 2),
        data[..(MIB / 2) as usize]
    );

    pool.rename("v1", "v2").expect("rename");
    assert!(matches!(pool.get("v1"), Err(PoolError::NotFound(n)) if n == "v1"));
    assert_eq!(pool.get("v2").expect("renamed").uuid, v.uuid);
    pool.delete("v2").expect("delete");
    assert!(matches!(pool.get("v2"), Err(PoolError::NotFound(_))));
    let ls = String::from_utf8_lossy(&c.rbd(&["ls", "rbd"]).stdout).into_owned();
    assert_eq!(ls.trim(), "test");
}

fn snapshots_clones_and_flatten(c: &Cluster, pool: &RbdPool) {
    pool.create_volume("base", 16 * MIB).expect("create base");
    let b = export(pool, "base");
    let (a0, a8) = (pattern(MIB, 2), pattern(MIB, 3));
    write(&b, 0, &a0);
    write(&b, 8 * MIB, &a8);
    // A snapshot of an exported volume (librbd asks the lock owner).
    let s = pool.snapshot("base", "s1").expect("snapshot");
    assert_eq!((s.name.as_str(), s.size), ("base@s1", 16 * MIB));
    assert!(s.is_snapshot && !s.exported && s.clones.is_empty() && !s.uuid.is_nil());
    assert_eq!(s.allocated, 8 * MIB, "objects 0 and 2: {s:?}");
    let snap_info = String::from_utf8_lossy(&c.rbd(&["info", "rbd/base@s1"]).stdout).into_owned();
    assert!(snap_info.contains("protected: True"), "{snap_info}");
    let head = pool.get("base").expect("get base");
    assert_eq!(head.shared, 8 * MIB, "nothing rewritten since s1: {head:?}");

    // A write after the snapshot is in the volume, not in the snapshot.
    let b0 = pattern(MIB, 4);
    write(&b, 0, &b0);
    assert_eq!(read(&b, 0, MIB), b0);
    assert_eq!(rbd_export(c, "rbd/base@s1", 0, MIB), a0);
    assert_eq!(rbd_export(c, "rbd/base", 0, MIB), b0);
    assert_eq!(
        pool.get("base").expect("get").shared,
        4 * MIB,
        "object 0 rewritten"
    );

    let cl = pool.clone_volume("base@s1", "c1").expect("clone");
    assert_eq!(cl.parent.as_deref(), Some("base@s1"));
    assert_eq!((cl.size, cl.allocated, cl.shared), (16 * MIB, 0, 8 * MIB));
    assert_ne!(cl.uuid, head.uuid);
    assert_eq!(pool.get("base@s1").expect("snap").clones, ["c1"]);
    let cb = export(pool, "c1");
    assert_eq!(read(&cb, 0, MIB), a0, "the clone reads the data of s1");
    assert_eq!(read(&cb, 8 * MIB, MIB), a8);
    let c4 = pattern(MIB, 5);
    write(&cb, 4 * MIB, &c4);
    drop(cb);

    match pool.delete("base@s1") {
        Err(PoolError::HasClones { name, children }) => {
            assert_eq!((name.as_str(), children.as_str()), ("base@s1", "c1"))
        }
        r => panic!("delete of a snapshot with a clone: {r:?}"),
    }
    drop(b);
    closed();
    match pool.delete("base") {
        Err(PoolError::HasClones { name, children }) => {
            assert_eq!((name.as_str(), children.as_str()), ("base", "base@s1: c1"))
        }
        r => panic!("delete of a volume whose snapshot has a clone: {r:?}"),
    }

    pool.decouple("c1").expect("flatten c1");
    let flat = pool.get("c1").expect("get c1");
    assert!(flat.parent.is_none(), "{flat:?}");
    assert_eq!((flat.allocated, flat.shared), (12 * MIB, 0), "{flat:?}");
    assert!(matches!(pool.decouple("c1"), Err(PoolError::NoParent(n)) if n == "c1"));
    assert!(pool.get("base@s1").expect("snap").clones.is_empty());
    let cb = pool.open("c1").expect("open c1");
    assert_eq!(read(&cb, 0, MIB), a0, "flattened data");
    assert_eq!(read(&cb, 4 * MIB, MIB), c4);
    drop(cb);
    closed();

    pool.delete("base@s1")
        .expect("delete the snapshot once it has no clone");
    let snaps = String::from_utf8_lossy(&c.rbd(&["snap", "ls", "rbd/base"]).stdout).into_owned();
    assert!(snaps.trim().is_empty(), "{snaps}");
    // A volume's snapshots without clones go with it.
    pool.snapshot("c1", "c1@k")
        .expect("snapshot named VOL@SNAP");
    pool.delete("c1").expect("delete c1 and its snapshot");
    pool.delete("base").expect("delete base");
    assert_eq!(pool.list().len(), 1, "only rbd/test is left");
}

fn refusals(c: &Cluster, pool: &RbdPool) {
    let e = RbdPool::connect(&opts(c, "nopool"))
        .err()
        .expect("unknown pool");
    let msg = e.to_string();
    assert!(
        msg.contains("\"nopool\"") && msg.contains("No such file"),
        "{msg}"
    );
    assert!(matches!(pool.create_volume("test", MIB), Err(PoolError::Exists(n)) if n == "test"));
    for (name, size, field) in [
        ("a@b", MIB, "name"),
        ("a/b", MIB, "name"),
        ("ok", 1000, "size"),
    ] {
        match pool.create_volume(name, size) {
            Err(PoolError::Invalid { field: f, .. }) => assert_eq!(f, field, "{name} {size}"),
            r => panic!("create {name:?} {size}: {r:?}"),
        }
    }
    pool.create_volume("x", 8 * MIB).expect("create x");
    pool.snapshot("x", "s").expect("snapshot x@s");
    assert!(matches!(pool.snapshot("x", "s"), Err(PoolError::Exists(n)) if n == "x@s"));
    assert!(matches!(pool.clone_volume("x@s", "test"), Err(PoolError::Exists(n)) if n == "test"));
    assert!(matches!(pool.get("missing"), Err(PoolError::NotFound(n)) if n == "missing"));
    assert!(matches!(pool.get("x@nope"), Err(PoolError::NotFound(n)) if n == "x@nope"));
    assert!(
        matches!(pool.clone_volume("x@nope", "y"), Err(PoolError::NotFound(n)) if n == "x@nope")
    );
    assert!(matches!(pool.clone_volume("x", "y"), Err(PoolError::NotSnapshot(n)) if n == "x"));
    assert!(matches!(pool.resize("x@s", MIB, false), Err(PoolError::ReadOnly(n)) if n == "x@s"));
    assert!(matches!(pool.open("x@s"), Err(PoolError::ReadOnly(n)) if n == "x@s"));
    assert!(matches!(pool.open("missing"), Err(PoolError::NotFound(n)) if n == "missing"));
    assert!(matches!(pool.decouple("x"), Err(PoolError::NoParent(n)) if n == "x"));
    assert!(matches!(pool.delete("missing"), Err(PoolError::NotFound(n)) if n == "missing"));
    // Open read-write by another client (a gateway elsewhere): in use.
    let elsewhere = farflash_backend::open_rbd(&RbdOptions {
        image: "x".into(),
        ..opts(c, "rbd")
    })
    .expect("open x outside the pool");
    assert!(
        !pool.get("x").expect("get x").exported,
        "not exported by this pool"
    );
    assert!(matches!(pool.delete("x"), Err(PoolError::Exported(n)) if n == "x"));
    assert!(matches!(pool.rename("x", "x2"), Err(PoolError::Exported(n)) if n == "x"));
    assert!(matches!(pool.resize("x", 4 * MIB, true), Err(PoolError::Exported(n)) if n == "x"));
    pool.resize("x", 12 * MIB, false)
        .expect("grow x while open elsewhere");
    assert!(
        pool.get("x@s").is_ok(),
        "the refused delete kept the snapshot"
    );
    drop(elsewhere);
    closed();
    match pool.rename("x@s", "test@s") {
        Err(PoolError::Invalid { field, .. }) => assert_eq!(field, "new_name"),
        r => panic!("rename a snapshot to another volume: {r:?}"),
    }
    pool.rename("x@s", "x@t").expect("rename a snapshot");
    assert_eq!(pool.get("x@t").expect("renamed snapshot").name, "x@t");
    assert!(matches!(pool.rename("x", "test"), Err(PoolError::Exists(n)) if n == "test"));
    pool.delete("x").expect("delete x");

    // A hostile UUID in an image's metadata: named, and only that image
    // is left out of the list.
    c.rbd(&[
        "image-meta",
        "set",
        "rbd/test",
        "farflash.uuid",
        "not-a-uuid",
    ]);
    match pool.get("test") {
        Err(e @ PoolError::Corrupt { .. }) => {
            let m = e.to_string();
            assert!(m.contains("rbd/test") && m.contains("farflash.uuid"), "{m}");
        }
        r => panic!("get with a broken UUID: {r:?}"),
    }
    pool.create_volume("y", MIB).expect("create y");
    let names: Vec<String> = pool.list().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["y"]);
    pool.delete("y").expect("delete y");
    c.rbd(&["image-meta", "remove", "rbd/test", "farflash.uuid"]);
}

fn uuids_stay(c: &Cluster, pool: RbdPool) {
    let u = pool.create_volume("u1", 8 * MIB).expect("create").uuid;
    let s = pool.snapshot("u1", "s").expect("snapshot").uuid;
    let k = pool.clone_volume("u1@s", "u1c").expect("clone").uuid;
    let outside = pool.get("test").expect("get test").uuid;
    let all = [u, s, k, outside];
    for (i, a) in all.iter().enumerate() {
        assert!(!all[..i].contains(a), "UUIDs repeat: {all:?}");
    }
    drop(pool);
    let pool = RbdPool::connect(&opts(c, "rbd")).expect("reconnect");
    let list = pool.list();
    for (name, uuid) in [("u1", u), ("u1@s", s), ("u1c", k), ("test", outside)] {
        assert_eq!(pool.get(name).expect("get").uuid, uuid, "{name}");
        assert_eq!(find(&list, name).uuid, uuid, "{name} listed");
    }
    let meta = c.rbd(&["image-meta", "get", "rbd/test", "farflash.uuid"]);
    let meta = String::from_utf8_lossy(&meta.stdout).into_owned();
    assert!(meta.starts_with(&outside.to_string()), "{meta}");

    // A snapshot made outside farflash: a UUID on first sight, protected
    // when first cloned.
    c.rbd(&["snap", "create", "rbd/test@outside"]);
    let ts = pool.get("test@outside").expect("outside snapshot");
    assert!(ts.is_snapshot && !all.contains(&ts.uuid));
    assert_eq!(pool.get("test@outside").expect("again").uuid, ts.uuid);
    pool.clone_volume("test@outside", "tc")
        .expect("clone an outside snapshot");
    let info = c.rbd(&["info", "rbd/test@outside"]);
    assert!(String::from_utf8_lossy(&info.stdout).contains("protected: True"));
    assert_eq!(
        pool.get("tc").expect("tc").parent.as_deref(),
        Some("test@outside")
    );

    // `rbd clone` copies the parent's metadata: the clone gets its own UUID.
    c.rbd(&["clone", "rbd/u1@s", "rbd/outside"]);
    let o = pool.get("outside").expect("get outside").uuid;
    assert!(!all.contains(&o), "{o} repeats one of {all:?}");
    assert_eq!(pool.get("outside").expect("again").uuid, o);
    assert_eq!(pool.get("u1").expect("u1").uuid, u);
}
