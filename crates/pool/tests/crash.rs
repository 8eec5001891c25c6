//! Crash consistency, by the dm-log-writes method: a workload runs on a
//! recording device; then, for every prefix of the log (every cut point),
//! the images the device could have kept — everything up to the last
//! flush, plus all, none, a random subset, or a torn version of the
//! writes after it — are opened as pools and checked:
//!
//! * the pool opens, and `check` finds nothing wrong;
//! * every volume whose creation completed (and whose deletion had not
//!   started) exists, every one not created or durably deleted does not;
//! * every block reads back either the last write made durable before the
//!   cut (by a completed Flush, a management call, or FUA) or a write
//!   issued after it and before the cut — never anything else;
//! * space accounting adds up (pool used = what volumes hold).

mod common;

use common::*;
use farflash_backend::{BackendQueue, IoBuf, IoOp, IoRequest, SharedBackend};
use farflash_pool::format::{Superblock, BLOCK};
use farflash_pool::testing::{Image, MemDevice, Op};
use farflash_pool::{check_backends, LocalPool, VolumeStore};
use std::collections::{BTreeMap, HashMap};

const DEV: u64 = 16 << 20;
/// Two devices, the first small so that clusters land on both.
const TWO: [u64; 2] = [2 << 20, 16 << 20];
const KIB: u64 = 1024;

/// A write (or zeroing) of one block, between two log positions.
#[derive(Clone, Copy, Debug)]
struct Ev {
    start: usize,
    end: usize,
    id: u64,
    fua: bool,
}

#[derive(Clone, Default)]
struct MVol {
    blocks: BTreeMap<u64, Vec<Ev>>,
    size: u64,
}

/// The workload and what it expects.
struct Work {
    devs: Vec<MemDevice>,
    pool: Option<LocalPool>,
    open: HashMap<String, (SharedBackend, Box<dyn BackendQueue>)>,
    vols: HashMap<String, MVol>,
    /// Per name: (start, end, exists afterwards) of the calls that created
    /// or deleted it.
    life: HashMap<String, Vec<(usize, usize, bool)>>,
    durable: Vec<usize>,
    next_id: u64,
    rng: u64,
    /// Log length once the pool was created.
    created: usize,
}

impl Work {
    fn pos(&self) -> usize {
        self.devs[0].log_len()
    }

    fn pool(&self) -> &LocalPool {
        self.pool.as_ref().expect("pool")
    }

    fn rand(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    fn mgmt(&mut self, f: impl FnOnce(&LocalPool)) -> (usize, usize) {
        let start = self.pos();
        f(self.pool());
        let end = self.pos();
        self.durable.push(end);
        (start, end)
    }

    fn born(&mut self, name: &str, span: (usize, usize), exists: bool) {
        self.life
            .entry(name.to_owned())
            .or_default()
            .push((span.0, span.1, exists));
    }

    fn create(&mut self, name: &str, size: u64) {
        let span = self.mgmt(|p| drop(p.create_volume(name, size).expect("create")));
        self.born(name, span, true);
        self.vols.insert(
            name.to_owned(),
            MVol {
                size,
                ..MVol::default()
            },
        );
    }

    fn open(&mut self, name: &str) {
        let be = self.pool().open(name).expect("open");
        let q = be.open_queue(8).expect("queue");
        self.open.insert(name.to_owned(), (be, q));
    }

    fn close(&mut self, name: &str) {
        self.open.remove(name);
    }

    fn q(&mut self, name: &str) -> &mut dyn BackendQueue {
        self.open.get_mut(name).expect("opened").1.as_mut()
    }

    fn event(
        &mut self,
        name: &str,
        blocks: std::ops::Range<u64>,
        id: u64,
        span: (usize, usize),
        fua: bool,
    ) {
        let v = self.vols.get_mut(name).expect("model");
        for b in blocks {
            v.blocks.entry(b).or_default().push(Ev {
                start: span.0,
                end: span.1,
                id,
                fua,
            });
        }
    }

    fn write(&mut self, name: &str, block: u64, n: u64, fua: bool) {
        self.next_id += 1;
        let id = self.next_id;
        let start = self.pos();
        let q = self.q(name);
        if n == 1 {
            common::write(q, block, id, fua).expect("write");
        } else {
            write_span(q, block, n, id).expect("write span");
        }
        let end = self.pos();
        self.event(name, block..block + n, id, (start, end), fua);
    }

    fn random_writes(&mut self, name: &str, count: usize) {
        let blocks = self.vols[name].size / BS;
        for _ in 0..count * 3 {
            let b = self.rand(blocks);
            let fua = self.rand(8) == 0;
            let n = if self.rand(5) == 0 {
                (self.rand(20) + 1).min(blocks - b)
            } else {
                1
            };
            self.write(name, b, n, fua && n == 1);
        }
    }

    fn flush(&mut self, name: &str) {
        flush(self.q(name));
        let end = self.pos();
        self.durable.push(end);
    }

    fn zero(&mut self, name: &str, block: u64, n: u64, dealloc_op: bool, fua: bool) {
        let start = self.pos();
        let q = self.q(name);
        match dealloc_op {
            true => dealloc(q, block, n).expect("dealloc"),
            false => zeroes(q, block, n, fua).expect("write zeroes"),
        }
        let end = self.pos();
        self.event(name, block..block + n, 0, (start, end), fua);
    }

    fn snapshot(&mut self, vol: &str, snap: &str) {
        let span = self.mgmt(|p| drop(p.snapshot(vol, snap).expect("snapshot")));
        self.born(snap, span, true);
        let copy = self.vols[vol].clone();
        self.vols.insert(snap.to_owned(), copy);
    }

    fn clone_of(&mut self, snap: &str, name: &str) {
        let span = self.mgmt(|p| drop(p.clone_volume(snap, name).expect("clone")));
        self.born(name, span, true);
        let copy = self.vols[snap].clone();
        self.vols.insert(name.to_owned(), copy);
    }

    fn delete(&mut self, name: &str) {
        let span = self.mgmt(|p| p.delete(name).expect("delete"));
        self.born(name, span, false);
    }

    fn resize(&mut self, name: &str, size: u64, force: bool) {
        let span = self.mgmt(|p| p.resize(name, size, force).expect("resize"));
        let v = self.vols.get_mut(name).expect("model");
        if size < v.size {
            for b in size / BS..v.size / BS {
                v.blocks.entry(b).or_default().push(Ev {
                    start: span.0,
                    end: span.1,
                    id: 0,
                    fua: false,
                });
            }
        }
        v.size = size;
    }

    /// Two queues write to one cluster the volume does not own yet, at
    /// once: the preparation thread allocates and prepares it once, and
    /// neither write is lost.
    fn racing_first_writes(&mut self, name: &str, block: u64) {
        self.next_id += 2;
        let ids = [self.next_id - 1, self.next_id];
        let start = self.pos();
        let mut q2 = self.open[name].0.open_queue(4).expect("queue");
        for (k, id) in ids.into_iter().enumerate() {
            let b = block + k as u64;
            let req = IoRequest {
                tag: k as u64,
                op: IoOp::Write {
                    offset: b * BS,
                    len: BS as u32,
                    fua: false,
                },
                buf: IoBuf::from_slice(&pattern(id, b)),
            };
            match k {
                0 => self.q(name).submit(req),
                _ => q2.submit(req),
            }
        }
        let mut done = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while done.len() < 2 {
            assert!(std::time::Instant::now() < deadline, "racing writes hang");
            self.q(name).reap(&mut done);
            q2.reap(&mut done);
            std::thread::yield_now();
        }
        assert!(
            done.iter().all(|c| c.result.is_ok()),
            "racing writes failed"
        );
        let end = self.pos();
        for (k, id) in ids.into_iter().enumerate() {
            let b = block + k as u64;
            self.event(name, b..b + 1, id, (start, end), false);
        }
    }

    fn decouple(&mut self, name: &str) {
        self.mgmt(|p| p.decouple(name).expect("decouple"));
    }
}

fn workload(seed: u64, sizes: &[u64]) -> Work {
    let group = MemDevice::recording_group(sizes);
    let pool = LocalPool::create_with("crash", devs(&group), &opts()).expect("create");
    let mut w = Work {
        devs: group,
        pool: Some(pool),
        open: HashMap::new(),
        vols: HashMap::new(),
        life: HashMap::new(),
        durable: Vec::new(),
        next_id: 0,
        rng: seed,
        created: 0,
    };
    w.created = w.pos();
    w.create("v1", 1 << 20);
    w.open("v1");
    w.random_writes("v1", 12);
    w.write("v1", 14, 5, false); // across a cluster boundary
    w.flush("v1");
    w.random_writes("v1", 8);
    w.snapshot("v1", "s1");
    w.random_writes("v1", 8);
    w.write("v1", 32, 16, false); // a whole cluster, first written after the snapshot
    w.clone_of("s1", "c1");
    w.open("c1");
    w.racing_first_writes("c1", 80); // copy-on-write, two queues at once
    w.write("c1", 48, 16, false); // a whole cluster over the snapshot's
    w.random_writes("c1", 8);
    w.zero("v1", 16, 16, true, false); // a whole cluster
    w.zero("v1", 40, 3, true, false); // part of one
    w.zero("c1", 0, 20, false, true);
    w.flush("c1");
    w.resize("v1", 2 << 20, false);
    w.write("v1", 300, 1, false);
    w.random_writes("v1", 6);
    w.create("v2", 512 * KIB);
    w.open("v2");
    w.random_writes("v2", 6);
    w.close("v2");
    w.delete("v2");
    w.decouple("c1");
    w.decouple("v1");
    w.delete("s1");
    w.random_writes("c1", 6);
    w.close("v1");
    w.resize("v1", 768 * KIB, true);
    w.open("v1");
    w.random_writes("v1", 10);
    w.flush("v1");
    w.snapshot("c1", "s2");
    w.clone_of("s2", "c2");
    w.open("c2");
    w.random_writes("c2", 8);
    w.random_writes("c1", 8);
    w.flush("c2");
    w.random_writes("c2", 6);
    // Deleting a snapshot with one child merges it into the child, here
    // an open volume: s3 (over s2) into c2, then s2 into its clone c2.
    w.snapshot("c2", "s3");
    w.random_writes("c2", 6);
    w.delete("s3");
    w.random_writes("c2", 4);
    w.decouple("c1");
    w.delete("s2");
    w.random_writes("c2", 4);
    w.random_writes("v1", 6);
    // The unflushed tail stays unflushed: the pool is simply dropped
    // without a final commit reaching the log's last cut.
    w
}

/// What a block may read after a crash at log position `cut`.
fn acceptable(evs: &[Ev], cut: usize, durable_at: usize) -> Vec<u64> {
    let covered = |e: &Ev| e.end <= durable_at || (e.fua && e.end <= cut);
    let last = evs.iter().rposition(covered);
    let mut ok: Vec<u64> = match last {
        Some(k) => vec![evs[k].id],
        None => vec![0],
    };
    let from = last.map_or(0, |k| k + 1);
    ok.extend(evs[from..].iter().filter(|e| e.start < cut).map(|e| e.id));
    ok
}

/// Whether `name` must exist (Some(true)), must not (Some(false)), or may.
fn must_exist(life: &[(usize, usize, bool)], cut: usize) -> Option<bool> {
    let mut state = Some(false);
    for &(s, e, exists) in life {
        if e <= cut {
            state = Some(exists);
        } else if s < cut {
            return None;
        }
    }
    state
}

fn verify(w: &Work, imgs: &[Image], cut: usize, what: &str) {
    let group: Vec<MemDevice> = imgs
        .iter()
        .zip(&w.devs)
        .map(|(i, d)| MemDevice::from_image(farflash_backend::Backend::capacity(d), i.clone()))
        .collect();
    let report = check_backends(devs(&group));
    assert!(
        report.ok(),
        "cut {cut} ({what}): check: {:?}",
        report.problems
    );
    let pool = match LocalPool::open_with(devs(&group), &opts()) {
        Ok(p) => p,
        Err(e) => panic!("cut {cut} ({what}): open: {e}"),
    };
    let durable_at = w
        .durable
        .iter()
        .copied()
        .filter(|&d| d <= cut)
        .max()
        .unwrap_or(0);
    let listed = pool.list();
    let own: u64 = listed.iter().map(|v| v.allocated).sum();
    assert_eq!(
        own,
        pool.stats().allocated,
        "cut {cut} ({what}): accounting"
    );
    for v in &listed {
        assert!(
            w.life.contains_key(&v.name),
            "cut {cut} ({what}): unknown volume {}",
            v.name
        );
    }
    for (name, life) in &w.life {
        let found = listed.iter().find(|v| &v.name == name);
        match (must_exist(life, cut), found) {
            (Some(true), None) => panic!("cut {cut} ({what}): {name} lost"),
            (Some(false), Some(_)) => panic!("cut {cut} ({what}): {name} should not exist"),
            (Some(true), Some(info)) => {
                check_content(&pool, &w.vols[name], info.size, name, cut, durable_at, what)
            }
            _ => {}
        }
    }
}

fn check_content(
    pool: &LocalPool,
    m: &MVol,
    size: u64,
    name: &str,
    cut: usize,
    durable_at: usize,
    what: &str,
) {
    let be = pool.open(name).expect("open recovered volume");
    let mut q = be.open_queue(4).expect("queue");
    let blocks = size.min(m.size) / BS;
    let per = CS / BS;
    let mut c = 0;
    while c * per < blocks {
        let n = per.min(blocks - c * per);
        let data = read(q.as_mut(), c * per, n);
        for k in 0..n {
            let b = c * per + k;
            let got = decode(&data[(k * BS) as usize..((k + 1) * BS) as usize], b);
            let ok = m.blocks.get(&b).map_or(vec![0], |evs| {
                // Events issued after the cut are not there yet.
                acceptable(evs, cut, durable_at)
            });
            assert!(
                got.is_some_and(|g| ok.contains(&g)),
                "cut {cut} ({what}): {name} block {b} reads {got:?}, expected one of {ok:?}; events {:?}, durable at {durable_at}",
                m.blocks.get(&b)
            );
        }
        c += 1;
    }
}

/// Byte offset where data clusters start (metadata below it).
fn data_start(img: &Image) -> u64 {
    let dev = MemDevice::from_image(DEV, img.clone());
    let mut q = dev.backend().open_queue(1).expect("queue");
    let op = farflash_backend::IoOp::Read {
        offset: 0,
        len: 2 * BLOCK as u32,
    };
    let b = farflash_pool::testing::run(
        q.as_mut(),
        op,
        farflash_backend::IoBuf::with_capacity(2 * BLOCK),
    )
    .expect("read");
    let sb = Superblock::decode(&b[BLOCK..])
        .or_else(|_| Superblock::decode(&b[..BLOCK]))
        .expect("superblock");
    sb.meta_end()
        .expect("layout")
        .next_multiple_of(sb.cluster_size)
}

#[test]
fn every_cut_point_recovers() {
    replay_all(0x1234_5678_9abc_def1, &[DEV]);
}

#[test]
fn every_cut_point_recovers_other_seed() {
    replay_all(0x0bad_cafe_f00d_1234, &[DEV]);
}

#[test]
fn every_cut_point_recovers_two_devices() {
    replay_all(0x5eed_0002_0000_0001, &TWO);
}

/// Applies `ops` of device `d` from the shared log to `img`.
fn apply_dev(img: &mut Image, ops: &[(usize, Op)], d: usize) {
    ops.iter()
        .filter(|(x, _)| *x == d)
        .for_each(|(_, o)| img.apply(o));
}

fn replay_all(seed: u64, sizes: &[u64]) {
    let mut w = workload(seed, sizes);
    let log = w.devs[0].group_log();
    w.open.clear();
    // Drop the pool without letting its final commit into the log we test.
    let n = log.len();
    w.pool.take();
    let meta_below = data_start(&w.devs[0].image());
    let nd = sizes.len();
    let data_on = |d: usize| {
        log.iter()
            .any(|(x, o)| *x == d && matches!(o, Op::Write { offset, .. } if *offset >= CS))
    };
    assert!((0..nd).all(data_on), "data clusters on every device");
    assert!(
        log.iter().filter(|o| matches!(o.1, Op::Flush)).count() > 20,
        "a workload with flushes"
    );
    // Per device: the image of its ops up to its last flush, and where
    // that flush is in the log.
    let mut flushed: Vec<Image> = (0..nd).map(|_| Image::default()).collect();
    for (d, img) in flushed.iter_mut().enumerate() {
        apply_dev(img, &log[..w.created], d);
    }
    let mut f = vec![w.created; nd];
    let mut rng = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut cuts = 0;
    for cut in w.created + 1..=n {
        if let (d, Op::Flush) = &log[cut - 1] {
            apply_dev(&mut flushed[*d], &log[f[*d]..cut], *d);
            f[*d] = cut;
        }
        // Each device's unflushed tail.
        let tails: Vec<Vec<&Op>> = (0..nd)
            .map(|d| {
                log[f[d]..cut]
                    .iter()
                    .filter(|(x, _)| *x == d)
                    .map(|(_, o)| o)
                    .collect()
            })
            .collect();
        let keep = |pick: &mut dyn FnMut(usize, usize) -> bool| -> Vec<Image> {
            (0..nd)
                .map(|d| {
                    let mut img = flushed[d].clone();
                    for (k, op) in tails[d].iter().enumerate() {
                        if pick(d, k) {
                            img.apply(op);
                        }
                    }
                    img
                })
                .collect()
        };
        verify(&w, &keep(&mut |_, _| true), cut, "all kept");
        cuts += 1;
        if tails.iter().all(Vec::is_empty) {
            continue;
        }
        verify(&w, &keep(&mut |_, _| false), cut, "none kept");
        verify(&w, &keep(&mut |_, _| next() % 2 == 0), cut, "random subset");
        cuts += 2;
        // A torn metadata write: the last metadata write of device 0's
        // tail keeps only some of its 512-byte sectors.
        let last_meta = tails[0]
            .iter()
            .rposition(|op| matches!(op, Op::Write { offset, .. } if *offset < meta_below));
        if let Some(k) = last_meta {
            let mut imgs = keep(&mut |d, j| d != 0 || j < k);
            let bits = next();
            imgs[0].apply_sectors(tails[0][k], &mut |s| bits >> (s % 64) & 1 == 1);
            verify(&w, &imgs, cut, "torn metadata write");
            cuts += 1;
        }
    }
    assert!(cuts > 1200, "{cuts} images checked");
}
