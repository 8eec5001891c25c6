//! Creating and opening a local pool: the new pool's superblocks, the
//! devices identified by their labels, recovery (checkpoint and journal
//! replayed, then checked by `recover.rs`), and starting the pool's
//! stages (preparation thread, committer).

use crate::dev::Devices;
use crate::error::PoolError;
use crate::format::{
    valid_name, Superblock, BLOCK, MAP_RECORD, MAX_CLUSTER, MAX_DEVICES, MAX_RECORD, MIN_CLUSTER,
    PAYLOAD,
};
use crate::meta::{self, Meta};
use crate::pool::PoolInner;
use crate::recover::{self, Bounds};
use crate::state::{Replay, State};
use farflash_backend::{IoOp, SharedBackend};
use std::sync::Arc;
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
    let pool = PoolInner::new(name.to_owned(), devs, state, m);
    Ok(start(pool, opts))
}

/// Starts the stages of `pool`: the preparation thread, and the
/// committer unless `opts` says to commit only when asked.
fn start(pool: PoolInner, opts: &PoolOptions) -> Arc<PoolInner> {
    let pool = Arc::new(pool);
    let weak = Arc::downgrade(&pool);
    pool.prep.start(weak.clone());
    if let Some(every) = opts.commit_interval {
        pool.committer.start(weak, every);
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
    Ok(start(PoolInner::new(name, devs, state, m), opts))
}
