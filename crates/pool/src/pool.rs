//! A local pool: creation, opening, commits, and cluster allocation.

use crate::committer::{Commits, Committer};
use crate::dev::Devices;
use crate::error::{no_space, PoolError};
use crate::format::{
    pack, valid_name, Superblock, BLOCK, MAP_RECORD, MAX_CLUSTER, MAX_DEVICES, MAX_RECORD,
    MIN_CLUSTER, PAYLOAD,
};
use crate::grace::Grace;
use crate::layer::{Layer, Source};
use crate::lock::lock;
use crate::meta::{self, Meta};
use crate::prep::Preparer;
use crate::recover::{self, Bounds};
use crate::state::{Replay, State};
use farflash_backend::{IoBuf, IoOp, SharedBackend};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The default cluster size: 1 MiB (see the crate documentation).
pub const DEFAULT_CLUSTER: u64 = 1 << 20;

/// How a pool is created and run.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Cluster size (power of two, 64 KiB..=64 MiB); default 1 MiB.
    pub cluster_size: Option<u64>,
    /// Most volumes and snapshots (sizes the checkpoint slots).
    pub max_volumes: u32,
    /// Journal length in 4 KiB blocks.
    pub journal_blocks: u64,
    /// How often mappings are committed without a Flush; `None`: only at
    /// Flush, FUA and management calls (tests).
    pub commit_interval: Option<Duration>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            cluster_size: None,
            max_volumes: 16384,
            journal_blocks: 2048,
            commit_interval: Some(Duration::from_secs(1)),
        }
    }
}

/// What every handle on a pool shares.
pub(crate) struct PoolInner {
    pub(crate) name: String,
    pub(crate) devs: Devices,
    pub(crate) state: Mutex<State>,
    meta: Mutex<Meta>,
    /// Changes made (mirror of `State::change_seq`) and committed.
    pub(crate) changed: AtomicU64,
    pub(crate) durable: AtomicU64,
    /// Serializes management calls.
    pub(crate) mgmt: Mutex<()>,
    pub(crate) committer: Arc<Committer>,
    /// The preparation thread (allocations, Write Zeroes, Deallocate).
    pub(crate) prep: Arc<Preparer>,
    /// Requests in flight, for freed clusters (the state's own).
    pub(crate) grace: Arc<Grace>,
    /// Device locks held while the pool lives (pools opened from paths).
    locks: Mutex<Vec<std::fs::File>>,
}

/// What a newly allocated cluster is filled with before it is mapped.
pub(crate) enum Fill<'a> {
    /// What the logical cluster read so far: zeroes, or the parent's data.
    Prepare,
    /// A write of the whole cluster: its data (taken and given back).
    Data {
        buf: &'a mut Option<IoBuf>,
        fua: bool,
    },
}

/// Why an allocation did not happen.
pub(crate) enum Alloc {
    /// The layer was replaced: look the volume's layer up again.
    Retry,
    Failed(io::Error),
}

impl PoolInner {
    pub(crate) fn cluster_size(&self) -> u64 {
        self.devs.cluster_size
    }

    /// Keeps `locks` for the pool's life.
    pub(crate) fn hold(&self, locks: Vec<std::fs::File>) {
        lock(&self.locks).extend(locks);
    }

    /// Commits every change up to `target` (durable when it returns).
    pub(crate) fn commit_to(&self, target: u64) -> io::Result<()> {
        let mut m = lock(&self.meta);
        if self.durable.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let (recs, upto, full) = {
            let mut st = lock(&self.state);
            let (recs, upto) = st.take_pending();
            let need = pack(&recs).len() as u64;
            let full = (m.used + need > m.sb.journal_blocks).then(|| st.checkpoint());
            (recs, upto, full)
        };
        let res = self.devs.flush_all().and_then(|()| match &full {
            Some(all) => m.checkpoint(&self.devs, all),
            None if recs.is_empty() => Ok(()),
            None => m.append(&self.devs, &recs).and_then(|ok| match ok {
                true => Ok(()),
                false => Err(io::Error::other("journal full after the check")),
            }),
        });
        match res {
            Ok(()) => {
                self.durable.fetch_max(upto, Ordering::SeqCst);
                self.reclaim(upto);
                Ok(())
            }
            Err(e) => {
                lock(&self.state).restore_pending(recs);
                tracing::error!(pool = %self.name, error = %e, "metadata commit failed");
                Err(e)
            }
        }
    }

    /// Frees the clusters whose release `upto` committed: punched out of
    /// their device first (thin reclaim on the file or device; they are
    /// not allocatable meanwhile), then handed to the allocator.
    fn reclaim(&self, upto: u64) {
        let mut freed = lock(&self.state).take_releasable(upto);
        freed.sort_unstable();
        let cs = self.cluster_size();
        let mut runs: Vec<(usize, Vec<(u64, u64)>)> = Vec::new();
        for &p in &freed {
            let Some((d, off)) = self.devs.locate(p) else {
                continue;
            };
            match runs.iter_mut().find(|(x, _)| *x == d) {
                Some((_, r)) => match r.last_mut() {
                    Some(last) if last.0 + last.1 == off => last.1 += cs,
                    _ => r.push((off, cs)),
                },
                None => runs.push((d, vec![(off, cs)])),
            }
        }
        for (d, ranges) in runs {
            for chunk in ranges.chunks(256) {
                let buf = farflash_backend::dealloc_buf(chunk);
                let op = IoOp::Deallocate {
                    ranges: chunk.len() as u32,
                };
                if let Err(e) = self.devs.run(d, op, buf) {
                    tracing::debug!(pool = %self.name, device = d, error = %e, "punching freed clusters failed");
                }
            }
        }
        lock(&self.state).release(&freed);
    }

    /// Commits everything changed so far.
    pub(crate) fn commit(&self) -> io::Result<()> {
        self.commit_to(self.changed.load(Ordering::SeqCst))
    }

    /// Whether freed clusters wait.
    pub(crate) fn freeing(&self) -> bool {
        lock(&self.state).freeing() > 0
    }

    /// Frees the committed clusters whose grace period has passed (the
    /// committer calls it while frees wait, commits or not).
    pub(crate) fn reclaim_now(&self) {
        let _m = lock(&self.meta);
        self.reclaim(self.durable.load(Ordering::SeqCst));
    }

    /// Makes every completed write and mapping durable: a commit when
    /// mappings changed, else a flush of every device.
    pub(crate) fn make_durable(&self) -> io::Result<()> {
        match self.dirty() {
            true => self.commit(),
            false => self.devs.flush_all(),
        }
    }

    /// Whether changes wait for a commit.
    pub(crate) fn dirty(&self) -> bool {
        self.changed.load(Ordering::SeqCst) > self.durable.load(Ordering::SeqCst)
    }

    /// Notes the state's change sequence (caller holds the state lock).
    pub(crate) fn note(&self, st: &State) {
        self.changed.fetch_max(st.change_seq, Ordering::SeqCst);
    }

    /// Gives logical cluster `i` of `layer` a cluster of its own, prepared
    /// (zeroed, or the parent's data copied in) before it is mapped.
    /// Returns it and the change sequence of its mapping.
    pub(crate) fn own_cluster(&self, layer: &Arc<Layer>, i: u64) -> Result<(u64, u64), Alloc> {
        self.own_cluster_with(layer, i, Fill::Prepare)
            .map(|(p, seq, _)| (p, seq))
    }

    /// [`PoolInner::own_cluster`] in a snapshot's layer (retired since the
    /// snapshot was taken, but with no writer that could race): decouple.
    pub(crate) fn own_snapshot_cluster(
        &self,
        layer: &Arc<Layer>,
        i: u64,
    ) -> Result<(u64, u64), Alloc> {
        self.own_cluster_in(layer, i, Fill::Prepare, true)
            .map(|(p, seq, _)| (p, seq))
    }

    /// [`PoolInner::own_cluster`], filled as `fill` says; also returns
    /// whether `fill`'s data was written (false when the cluster turned
    /// out to be owned already).
    pub(crate) fn own_cluster_with(
        &self,
        layer: &Arc<Layer>,
        i: u64,
        fill: Fill<'_>,
    ) -> Result<(u64, u64, bool), Alloc> {
        self.own_cluster_in(layer, i, fill, false)
    }

    fn own_cluster_in(
        &self,
        layer: &Arc<Layer>,
        i: u64,
        fill: Fill<'_>,
        retired_ok: bool,
    ) -> Result<(u64, u64, bool), Alloc> {
        let mut st = lock(&self.state);
        if layer.is_retired() && !retired_ok {
            return Err(Alloc::Retry);
        }
        let src = layer.resolve(i);
        if let Source::Own(p) = src {
            return Ok((p, 0, false));
        }
        let p = match st.fits(0, 1) {
            true => st.alloc(self.durable.load(Ordering::SeqCst)),
            false => None,
        };
        let Some(p) = p else {
            return Err(Alloc::Failed(no_space()));
        };
        let (filled, wrote) = match fill {
            Fill::Prepare => (self.prepare(p, src), false),
            Fill::Data { buf, fua } => (self.write_whole(p, buf, fua), true),
        };
        if let Err(e) = filled {
            st.unalloc(p);
            return Err(Alloc::Failed(e));
        }
        st.set_entry(layer, i, p + 1);
        self.note(&st);
        Ok((p, st.change_seq, wrote))
    }

    /// Writes a whole cluster's data (the buffer goes out and comes back
    /// in `slot`; a failed write loses it).
    fn write_whole(&self, p: u64, slot: &mut Option<IoBuf>, fua: bool) -> io::Result<()> {
        let cs = self.cluster_size();
        let (dev, off) = self
            .devs
            .locate(p)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        let buf = slot
            .take()
            .ok_or_else(|| io::Error::other("no data buffer"))?;
        let op = IoOp::Write {
            offset: off,
            len: cs as u32,
            fua,
        };
        *slot = Some(self.devs.run(dev, op, buf)?);
        Ok(())
    }

    /// Makes cluster `p` hold what `src` reads.
    fn prepare(&self, p: u64, src: Source) -> io::Result<()> {
        let cs = self.cluster_size();
        let (dev, off) = self
            .devs
            .locate(p)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        match src {
            Source::Own(_) => Ok(()),
            Source::Zero => self.devs.zero(dev, off, cs),
            Source::Inherited(q) => {
                let (qd, qoff) = self
                    .devs
                    .locate(q)
                    .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
                let buf = self.devs.read(qd, qoff, cs as usize)?;
                self.devs.write(dev, off, buf).map(drop)
            }
        }
    }

    /// Device and byte offset of byte `within` of physical cluster `p`.
    pub(crate) fn locate(&self, p: u64, within: u64) -> Option<(usize, u64)> {
        self.devs.locate(p).map(|(d, off)| (d, off + within))
    }
}

impl Commits for PoolInner {
    fn dirty(&self) -> bool {
        PoolInner::dirty(self)
    }
    fn commit(&self) -> io::Result<()> {
        PoolInner::commit(self)
    }
    fn freeing(&self) -> bool {
        PoolInner::freeing(self)
    }
    fn reclaim_now(&self) {
        PoolInner::reclaim_now(self)
    }
}

impl Drop for PoolInner {
    /// Commits what is left and stops the committer.
    fn drop(&mut self) {
        if self.dirty() {
            if let Err(e) = self.commit() {
                tracing::error!(pool = %self.name, error = %e, "final commit failed");
            }
        }
        self.committer.stop();
        self.prep.stop();
    }
}

/// The superblock and device layout a new pool gets.
fn new_superblock(name: &str, sizes: &[u64], opts: &PoolOptions) -> Result<Superblock, PoolError> {
    let cs = opts.cluster_size.unwrap_or(DEFAULT_CLUSTER);
    if !cs.is_power_of_two() || !(MIN_CLUSTER..=MAX_CLUSTER).contains(&cs) {
        return Err(PoolError::invalid(
            "cluster_size",
            format!("{cs} is not a power of two in 64 KiB..=64 MiB"),
        ));
    }
    let est: u64 = sizes.iter().map(|s| s / cs).sum();
    let bytes = u64::from(opts.max_volumes) * MAX_RECORD as u64 + 2 * est * MAP_RECORD as u64;
    let slot_blocks = bytes.div_ceil((PAYLOAD - MAX_RECORD) as u64) + 1;
    let b = uuid::Uuid::new_v4().into_bytes();
    let sb = Superblock {
        uuid: b,
        generation: 1,
        name: name.to_owned(),
        cluster_size: cs,
        dev_index: 0,
        dev_sizes: sizes.to_vec(),
        max_volumes: opts.max_volumes,
        slot_blocks,
        journal_blocks: opts.journal_blocks.max(4),
        ckpt_slot: 0,
        ckpt_blocks: 0,
        ckpt_nonce: meta::nonce(),
        journal_seq: 1,
        journal_nonce: meta::nonce(),
    };
    let meta_end = sb.meta_end().unwrap_or(u64::MAX);
    if meta_end.next_multiple_of(cs).saturating_add(cs) > sizes[0] {
        return Err(PoolError::invalid(
            "devices",
            format!(
                "device 0 ({} bytes) cannot hold the metadata ({meta_end} bytes) and one cluster",
                sizes[0]
            ),
        ));
    }
    Ok(sb)
}

/// Creates a pool on `devices` (label, backend), index order.
pub(crate) fn create(
    name: &str,
    devices: Vec<(String, SharedBackend)>,
    opts: &PoolOptions,
) -> Result<Arc<PoolInner>, PoolError> {
    if !valid_name(name) {
        return Err(PoolError::invalid(
            "pool name",
            format!("{name:?} is not 1-64 bytes of [A-Za-z0-9._:@+-]"),
        ));
    }
    if devices.is_empty() || devices.len() > MAX_DEVICES {
        return Err(PoolError::invalid(
            "devices",
            format!("{} given, 1..={MAX_DEVICES} allowed", devices.len()),
        ));
    }
    for (label, b) in &devices {
        if !(BLOCK as u32).is_multiple_of(b.block_size()) {
            return Err(PoolError::invalid(
                "devices",
                format!(
                    "{label}: block size {} does not divide 4096",
                    b.block_size()
                ),
            ));
        }
    }
    let sizes: Vec<u64> = devices.iter().map(|(_, b)| b.capacity()).collect();
    let sb = new_superblock(name, &sizes, opts)?;
    let meta_end = sb.meta_end().unwrap_or(u64::MAX);
    let backends = devices.into_iter().map(|(_, b)| b).collect();
    let devs = Devices::new(backends, sb.cluster_size, meta_end);
    for i in 0..devs.devs.len() {
        let label = Superblock {
            dev_index: i as u32,
            ..sb.clone()
        };
        // Both copies: generation 0 in block 0, 1 in block 1 (another
        // pool's old copy must not survive in either).
        let zero = Superblock {
            generation: 0,
            ..label.clone()
        };
        meta::write_blocks(&devs, i, 0, &[zero.encode(), label.encode()])
            .map_err(PoolError::io("writing superblocks"))?;
    }
    devs.flush_all()
        .map_err(PoolError::io("flushing the new pool"))?;
    let state = State::new(devs.total, sb.max_volumes, sb.slot_blocks);
    let m = Meta {
        used: 0,
        next_seq: sb.journal_seq,
        prev_crc: sb.journal_nonce,
        sb,
    };
    Ok(finish(name.to_owned(), devs, state, m, opts))
}

fn finish(
    name: String,
    devs: Devices,
    state: State,
    m: Meta,
    opts: &PoolOptions,
) -> Arc<PoolInner> {
    let committer = Arc::new(Committer::default());
    let prep = Arc::new(Preparer::default());
    let grace = state.grace();
    let pool = Arc::new(PoolInner {
        name,
        devs,
        state: Mutex::new(state),
        meta: Mutex::new(m),
        changed: AtomicU64::new(0),
        durable: AtomicU64::new(0),
        mgmt: Mutex::new(()),
        committer: committer.clone(),
        prep: prep.clone(),
        grace,
        locks: Mutex::new(Vec::new()),
    });
    let weak = Arc::downgrade(&pool);
    prep.start(weak.clone());
    if let Some(every) = opts.commit_interval {
        committer.start(weak, every);
    }
    pool
}

/// What reading the labels of a set of devices found.
pub(crate) struct Found {
    pub(crate) sb: Superblock,
    pub(crate) devs: Devices,
    /// Per superblock copy that did not decode: a sentence.
    pub(crate) damaged: Vec<String>,
}

/// The best superblock of one device, and complaints about bad copies.
fn read_label(
    label: &str,
    b: &SharedBackend,
    damaged: &mut Vec<String>,
) -> Result<Superblock, PoolError> {
    let mut q = b
        .open_queue(2)
        .map_err(PoolError::io(format!("{label}: opening")))?;
    let buf = crate::dev::run_one(
        q.as_mut(),
        IoOp::Read {
            offset: 0,
            len: 2 * BLOCK as u32,
        },
        farflash_backend::IoBuf::with_capacity(2 * BLOCK),
    )
    .map_err(PoolError::io(format!("{label}: reading the superblocks")))?;
    let copies = [
        Superblock::decode(&buf[..BLOCK]),
        Superblock::decode(&buf[BLOCK..]),
    ];
    let mut best: Option<Superblock> = None;
    let mut why = Vec::new();
    for (i, c) in copies.into_iter().enumerate() {
        match c {
            Ok(sb) => {
                if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                    best = Some(sb);
                }
            }
            Err(e) => why.push(format!("{label}: superblock copy at block {i}: {e}")),
        }
    }
    match best {
        Some(sb) => {
            damaged.extend(why);
            Ok(sb)
        }
        None => Err(PoolError::Corrupt {
            what: format!("{label}: no valid superblock ({})", why.join("; ")),
        }),
    }
}

/// Identifies the devices (any order) and lays them out.
pub(crate) fn identify(devices: Vec<(String, SharedBackend)>) -> Result<Found, PoolError> {
    let mut damaged = Vec::new();
    let mut labelled = Vec::with_capacity(devices.len());
    for (label, b) in devices {
        let sb = read_label(&label, &b, &mut damaged)?;
        labelled.push((label, b, sb));
    }
    let Some(first) = labelled.iter().find(|(_, _, sb)| sb.dev_index == 0) else {
        return Err(PoolError::invalid(
            "devices",
            "none of them is the pool's device 0".to_string(),
        ));
    };
    let sb = first.2.clone();
    let n = sb.dev_sizes.len();
    let mut ordered: Vec<Option<SharedBackend>> = vec![None; n];
    for (label, b, s) in labelled {
        if s.uuid != sb.uuid {
            return Err(PoolError::invalid(
                "devices",
                format!("{label} belongs to another pool ({:?})", s.name),
            ));
        }
        let i = s.dev_index as usize;
        if i >= n || ordered[i].is_some() {
            return Err(PoolError::invalid(
                "devices",
                format!("{label}: device index {i} given twice or out of range"),
            ));
        }
        if b.capacity() != sb.dev_sizes[i] {
            return Err(PoolError::invalid(
                "devices",
                format!(
                    "{label} is {} bytes; pool {:?} recorded {} for its device {i}",
                    b.capacity(),
                    sb.name,
                    sb.dev_sizes[i]
                ),
            ));
        }
        ordered[i] = Some(b);
    }
    if let Some(i) = ordered.iter().position(Option::is_none) {
        return Err(PoolError::invalid(
            "devices",
            format!(
                "pool {:?} device {i} ({} bytes) is missing",
                sb.name, sb.dev_sizes[i]
            ),
        ));
    }
    let meta_end = sb.meta_end().unwrap_or(u64::MAX);
    let devs = Devices::new(
        ordered.into_iter().flatten().collect(),
        sb.cluster_size,
        meta_end,
    );
    Ok(Found { sb, devs, damaged })
}

/// Loads checkpoint and journal; the state and where the journal ends.
pub(crate) fn load(found: &Found, problems: &mut Vec<String>) -> Option<(State, meta::JournalEnd)> {
    let sb = &found.sb;
    let mut rep = Replay::default();
    if let Err(e) = meta::load_checkpoint(&found.devs, sb, &mut rep) {
        problems.push(e);
        return None;
    }
    let end = match meta::replay_journal(&found.devs, sb, &mut rep) {
        Ok(end) => end,
        Err(e) => {
            problems.push(e);
            return None;
        }
    };
    let bounds = Bounds {
        total: found.devs.total,
        cluster_size: sb.cluster_size,
        max_volumes: sb.max_volumes,
        slot_blocks: sb.slot_blocks,
    };
    Some((recover::build(rep, &bounds, problems), end))
}

/// Opens an existing pool.
pub(crate) fn open(
    devices: Vec<(String, SharedBackend)>,
    opts: &PoolOptions,
) -> Result<Arc<PoolInner>, PoolError> {
    let found = identify(devices)?;
    let mut problems = Vec::new();
    let loaded = load(&found, &mut problems);
    let (state, end) = match (loaded, problems.first()) {
        (Some(x), None) => x,
        (_, Some(p)) => return Err(PoolError::Corrupt { what: p.clone() }),
        (None, None) => {
            return Err(PoolError::Corrupt {
                what: "unreadable metadata".into(),
            })
        }
    };
    let Found { sb, devs, .. } = found;
    let m = Meta {
        used: end.used,
        next_seq: end.next_seq,
        prev_crc: end.prev_crc,
        sb,
    };
    let name = m.sb.name.clone();
    Ok(finish(name, devs, state, m, opts))
}
