//! Helpers shared by the pool's integration tests.
#![allow(dead_code)]

use farflash_backend::{BackendQueue, IoBuf, IoOp, SharedBackend};
use farflash_pool::testing::{run, MemDevice};
use farflash_pool::{LocalPool, PoolOptions};

pub const CS: u64 = 64 << 10;
pub const BS: u64 = 4096;

/// Small pools: 64 KiB clusters, few volumes, a short journal (so
/// checkpoints happen), no background commits.
pub fn opts() -> PoolOptions {
    PoolOptions {
        cluster_size: Some(CS),
        max_volumes: 64,
        journal_blocks: 24,
        commit_interval: None,
    }
}

pub fn devs(d: &[MemDevice]) -> Vec<(String, SharedBackend)> {
    d.iter()
        .enumerate()
        .map(|(i, m)| (format!("mem{i}"), m.backend()))
        .collect()
}

pub fn new_pool(sizes: &[u64]) -> (LocalPool, Vec<MemDevice>) {
    let d: Vec<MemDevice> = sizes.iter().map(|&s| MemDevice::recording(s)).collect();
    let p = LocalPool::create_with("p", devs(&d), &opts()).expect("create pool");
    (p, d)
}

/// A block whose content names `id` and `block` (id 0: zeroes).
pub fn pattern(id: u64, block: u64) -> Vec<u8> {
    if id == 0 {
        return vec![0; BS as usize];
    }
    let mut v = vec![0u8; BS as usize];
    for (k, c) in v.chunks_mut(8).enumerate() {
        let x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ block.wrapping_mul(31) ^ k as u64;
        c.copy_from_slice(&x.to_le_bytes());
    }
    v[..8].copy_from_slice(&id.to_le_bytes());
    v[8..16].copy_from_slice(&block.to_le_bytes());
    v
}

/// The id a block's content names (0 for zeroes), or None for garbage.
pub fn decode(b: &[u8], block: u64) -> Option<u64> {
    if b.iter().all(|&x| x == 0) {
        return Some(0);
    }
    let id = u64::from_le_bytes(b[..8].try_into().ok()?);
    (pattern(id, block) == b).then_some(id)
}

pub fn write(q: &mut dyn BackendQueue, block: u64, id: u64, fua: bool) -> std::io::Result<()> {
    let data = pattern(id, block);
    let op = IoOp::Write {
        offset: block * BS,
        len: BS as u32,
        fua,
    };
    run(q, op, IoBuf::from_slice(&data)).map(drop)
}

/// Writes `n` blocks at `block` (one request), each its own pattern.
pub fn write_span(q: &mut dyn BackendQueue, block: u64, n: u64, id: u64) -> std::io::Result<()> {
    let mut data = Vec::new();
    for b in block..block + n {
        data.extend(pattern(id, b));
    }
    let op = IoOp::Write {
        offset: block * BS,
        len: (n * BS) as u32,
        fua: false,
    };
    run(q, op, IoBuf::from_slice(&data)).map(drop)
}

pub fn read(q: &mut dyn BackendQueue, block: u64, n: u64) -> Vec<u8> {
    let op = IoOp::Read {
        offset: block * BS,
        len: (n * BS) as u32,
    };
    run(q, op, IoBuf::with_capacity((n * BS) as usize))
        .expect("read")
        .to_vec()
}

pub fn read_id(q: &mut dyn BackendQueue, block: u64) -> Option<u64> {
    decode(&read(q, block, 1), block)
}

pub fn flush(q: &mut dyn BackendQueue) {
    run(q, IoOp::Flush, IoBuf::with_capacity(0)).expect("flush");
}

pub fn dealloc(q: &mut dyn BackendQueue, block: u64, n: u64) -> std::io::Result<()> {
    let buf = farflash_backend::dealloc_buf(&[(block * BS, n * BS)]);
    run(q, IoOp::Deallocate { ranges: 1 }, buf).map(drop)
}

pub fn zeroes(q: &mut dyn BackendQueue, block: u64, n: u64, fua: bool) -> std::io::Result<()> {
    let op = IoOp::WriteZeroes {
        offset: block * BS,
        len: n * BS,
        fua,
    };
    run(q, op, IoBuf::with_capacity(0)).map(drop)
}
