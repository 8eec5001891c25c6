//! Atomic test-and-set under contention, as VMware ESXi locks VMFS on NVMe:
//! a fused Compare and Write (Base §3.4.2) on one LBA, while 4 KiB writes
//! go to the LBAs after it, at a fixed queue depth. Each host increments a
//! counter held in the ATS block: Compare with the value it last saw, Write
//! that value plus one; a miscompare (another host won) re-reads the block.
//! Every block read must be whole (not torn: each 16-byte word holds the
//! same value and its complement), and at the end the counter must equal
//! the sum of every host's wins: a pair that wrote without its compare
//! holding, or two pairs interleaved, breaks one or the other.

use farflash_host::slot::DataDir;
use farflash_host::{HostError, IoQueue};
use farflash_wire::Status;
use std::time::{Duration, Instant};

/// One host's run.
#[derive(Clone, Copy, Debug)]
pub struct AtsSpec {
    pub nsid: u32,
    /// The ATS block.
    pub lba: u64,
    /// Logical block size in bytes.
    pub block: u32,
    /// Fused pairs to issue.
    pub pairs: u64,
    /// Commands in flight at most (the pair's two, a re-read, and 4 KiB
    /// writes for the rest); at least 3.
    pub qd: u16,
    /// 4 KiB writes go to `lba + 1 ..`, over this many 4 KiB slots (0: none).
    pub neighbours: u64,
    /// Seeds the neighbour writes' offsets.
    pub seed: u64,
}

/// What one host saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtsResult {
    pub pairs: u64,
    /// Pairs whose Compare held: the counter went up by one.
    pub won: u64,
    /// Pairs that miscompared (another host moved the counter first).
    pub lost: u64,
    /// 4 KiB writes to the neighbouring LBAs.
    pub writes: u64,
    /// Summed latency of the pairs and of the neighbour writes.
    pub pair_ns: u64,
    pub write_ns: u64,
}

/// The ATS block holding `v`: every 16 bytes are `v` and `!v`.
pub fn encode(v: u64, b: &mut [u8]) {
    for w in b.chunks_exact_mut(16) {
        w[..8].copy_from_slice(&v.to_le_bytes());
        w[8..].copy_from_slice(&(!v).to_le_bytes());
    }
}

/// The value of an ATS block, or `None` when it is torn (or never written:
/// an all-zero block is torn too, since `!0` is not 0).
pub fn decode(b: &[u8]) -> Option<u64> {
    let mut words = b.chunks_exact(16);
    let first = words.next()?;
    let v = u64::from_le_bytes(first[..8].try_into().ok()?);
    let whole = u64::from_le_bytes(first[8..].try_into().ok()?) == !v && words.all(|w| w == first);
    whole.then_some(v)
}

/// Writes the starting value (before the hosts start).
pub fn init(q: &mut IoQueue, spec: &AtsSpec, v: u64) -> Result<(), HostError> {
    let mut b = vec![0u8; spec.block as usize];
    encode(v, &mut b);
    q.write_at(spec.nsid, spec.lba, 1, &b)
}

/// Reads the ATS block: its value, or an error naming a torn block.
pub fn read_value(q: &mut IoQueue, spec: &AtsSpec) -> Result<u64, HostError> {
    let mut b = vec![0u8; spec.block as usize];
    q.read_at(spec.nsid, spec.lba, 1, &mut b)?;
    decode(&b).ok_or_else(|| HostError::Invalid(format!("ATS block {} is torn", spec.lba)))
}

/// Where the run's pair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pair {
    /// None in flight: issue the next.
    Idle,
    /// In flight on slots (compare, write); statuses as they come.
    Out {
        c: u16,
        w: u16,
        cs: Option<Status>,
        ws: Option<Status>,
        t0: Instant,
    },
    /// Lost: re-reading the block on this slot.
    Reading(u16),
}

/// One host's loop (see the module comment); the queue must allow `qd`
/// commands of a block and of 4 KiB.
pub fn run(q: &mut IoQueue, spec: &AtsSpec) -> Result<AtsResult, HostError> {
    if spec.qd < 3 || spec.block == 0 || 4096 % spec.block != 0 {
        return Err(HostError::Invalid(
            "ATS needs a QD of 3 or more and a block size dividing 4 KiB".into(),
        ));
    }
    let mut r = AtsResult::default();
    let mut v = read_value(q, spec)?;
    let mut pair = Pair::Idle;
    let mut writes: Vec<(u16, Instant)> = Vec::with_capacity(spec.qd as usize);
    let mut rng = spec.seed | 1;
    let mut done = Vec::with_capacity(spec.qd as usize);
    let max_writes = if spec.neighbours == 0 {
        0
    } else {
        spec.qd as usize - 2
    };
    while r.pairs < spec.pairs || pair != Pair::Idle || !writes.is_empty() {
        if pair == Pair::Idle && r.pairs < spec.pairs {
            pair = issue_pair(q, spec, v)?;
            r.pairs += 1;
        }
        while r.pairs < spec.pairs && writes.len() < max_writes {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            writes.push((issue_write(q, spec, rng % spec.neighbours)?, Instant::now()));
        }
        done.clear();
        q.wait(&mut done, Duration::from_secs(1))?;
        for c in done.drain(..) {
            if let Some(i) = writes.iter().position(|&(cid, _)| cid == c.cid) {
                c.check()?;
                r.writes += 1;
                r.write_ns += writes.swap_remove(i).1.elapsed().as_nanos() as u64;
                continue;
            }
            pair = on_pair(q, spec, pair, &c, &mut v, &mut r)?;
        }
    }
    Ok(r)
}

fn issue_pair(q: &mut IoQueue, spec: &AtsSpec, v: u64) -> Result<Pair, HostError> {
    let (c, w) = (slot(q)?, slot(q)?);
    let n = spec.block as usize;
    for (cid, val) in [(c, v), (w, v.wrapping_add(1))] {
        let buf = q
            .buf_mut(cid)
            .ok_or(HostError::Invalid("slot in flight".into()))?;
        encode(val, &mut buf[..n]);
    }
    q.submit_compare_and_write((c, w), spec.nsid, spec.lba, 1, spec.block)?;
    Ok(Pair::Out {
        c,
        w,
        cs: None,
        ws: None,
        t0: Instant::now(),
    })
}

fn issue_write(q: &mut IoQueue, spec: &AtsSpec, k: u64) -> Result<u16, HostError> {
    let cid = slot(q)?;
    let per = 4096 / spec.block;
    let lba = spec.lba + 1 + k * per as u64;
    q.submit_write(cid, spec.nsid, lba, per, 4096)?;
    Ok(cid)
}

fn slot(q: &mut IoQueue) -> Result<u16, HostError> {
    q.alloc_cid()
        .ok_or_else(|| HostError::Invalid("no free command slot".into()))
}

/// A completion of the pair (or of its re-read) came.
fn on_pair(
    q: &mut IoQueue,
    spec: &AtsSpec,
    pair: Pair,
    c: &farflash_host::slot::Completion,
    v: &mut u64,
    r: &mut AtsResult,
) -> Result<Pair, HostError> {
    match pair {
        Pair::Reading(cid) if cid == c.cid => {
            c.check()?;
            *v = decode(&q.buf(cid)[..spec.block as usize])
                .ok_or_else(|| HostError::Invalid(format!("ATS block {} read torn", spec.lba)))?;
            Ok(Pair::Idle)
        }
        Pair::Out {
            c: cc,
            w,
            mut cs,
            mut ws,
            t0,
        } if c.cid == cc || c.cid == w => {
            if c.cid == cc {
                cs = Some(c.cqe.status);
            } else {
                ws = Some(c.cqe.status);
            }
            let (Some(cs), Some(ws)) = (cs, ws) else {
                return Ok(Pair::Out {
                    c: cc,
                    w,
                    cs,
                    ws,
                    t0,
                });
            };
            r.pair_ns += t0.elapsed().as_nanos() as u64;
            if cs.is_success() && ws.is_success() {
                r.won += 1;
                *v = v.wrapping_add(1);
                return Ok(Pair::Idle);
            }
            if cs == Status::COMPARE_FAILURE && ws.code() == Status::FUSED_FAILED {
                r.lost += 1;
                let cid = slot(q)?;
                q.submit(
                    cid,
                    farflash_host::cmd::rw(false, spec.nsid, spec.lba, 1),
                    DataDir::FromCtrl,
                    spec.block,
                )?;
                return Ok(Pair::Reading(cid));
            }
            Err(HostError::Invalid(format!(
                "fused pair answered {cs:?} / {ws:?}"
            )))
        }
        _ => Err(HostError::Invalid(format!(
            "a completion for CID {} nobody waits for",
            c.cid
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_torn_ones_are_seen() {
        let mut b = vec![0u8; 512];
        assert_eq!(decode(&b), None, "never written");
        encode(41, &mut b);
        assert_eq!(decode(&b), Some(41));
        let mut torn = b.clone();
        encode(42, &mut torn[256..]);
        assert_eq!(decode(&torn), None);
        torn[256..].copy_from_slice(&b[256..]);
        torn[7] ^= 1;
        assert_eq!(decode(&torn), None);
    }
}
