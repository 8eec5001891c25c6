//! Loading and committing metadata: superblocks, checkpoint, journal.
//!
//! See the crate documentation for the layout and the commit protocol.

use crate::dev::Devices;
use crate::format::{
    open_block, pack, seal_all, Record, Superblock, BLOCK, HEADER, KIND_CHECKPOINT, KIND_JOURNAL,
};
use crate::state::Replay;
use farflash_backend::IoBuf;
use std::io;

/// Where the next journal block goes, and the live superblock.
pub(crate) struct Meta {
    pub(crate) sb: Superblock,
    /// Journal blocks used since the live checkpoint.
    pub(crate) used: u64,
    pub(crate) next_seq: u64,
    pub(crate) prev_crc: u32,
}

/// A random 32-bit chain seed.
pub(crate) fn nonce() -> u32 {
    let b = uuid::Uuid::new_v4().into_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Reads blocks `first..first + n` of device 0.
fn read_blocks(devs: &Devices, first: u64, n: u64) -> io::Result<IoBuf> {
    let len = usize::try_from(n * BLOCK as u64)
        .map_err(|_| io::Error::other("metadata read too large"))?;
    devs.read(0, first * BLOCK as u64, len)
}

/// Writes whole blocks at block `first` of device `dev`.
pub(crate) fn write_blocks(
    devs: &Devices,
    dev: usize,
    first: u64,
    blocks: &[[u8; BLOCK]],
) -> io::Result<()> {
    let mut buf = IoBuf::with_capacity(blocks.len() * BLOCK);
    buf.set_len(blocks.len() * BLOCK);
    for (i, b) in blocks.iter().enumerate() {
        buf[i * BLOCK..(i + 1) * BLOCK].copy_from_slice(b);
    }
    devs.write(dev, first * BLOCK as u64, buf).map(drop)
}

/// Reads the live checkpoint into `rep`; a damaged one is an error naming
/// the block.
pub(crate) fn load_checkpoint(
    devs: &Devices,
    sb: &Superblock,
    rep: &mut Replay,
) -> Result<(), String> {
    let start = sb.slot_start(sb.ckpt_slot);
    let mut prev = sb.ckpt_nonce;
    let mut recs = Vec::new();
    const CHUNK: u64 = 256;
    let mut i = 0;
    while i < sb.ckpt_blocks {
        let n = CHUNK.min(sb.ckpt_blocks - i);
        let buf =
            read_blocks(devs, start + i, n).map_err(|e| format!("reading the checkpoint: {e}"))?;
        for k in 0..n {
            let at = (start + i + k, (k as usize) * BLOCK);
            let b = &buf[at.1..at.1 + BLOCK];
            let bad = |why: String| {
                format!(
                    "checkpoint block {} (device 0 block {}): {why}",
                    i + k,
                    at.0
                )
            };
            let (h, crc) = open_block(b, &sb.uuid).map_err(|e| bad(e.0))?;
            let last = i + k + 1 == sb.ckpt_blocks;
            if h.kind != KIND_CHECKPOINT || h.seq != i + k || h.prev != prev || h.last != last {
                return Err(bad(
                    "not part of the live checkpoint (kind, index or chain)".into(),
                ));
            }
            prev = crc;
            recs.clear();
            Record::decode_all(&b[HEADER..HEADER + usize::from(h.used)], &mut recs)
                .map_err(|e| bad(e.0))?;
            for r in recs.drain(..) {
                rep.apply(r).map_err(&bad)?;
            }
        }
        i += n;
    }
    Ok(())
}

/// What the journal scan found.
pub(crate) struct JournalEnd {
    pub(crate) used: u64,
    pub(crate) next_seq: u64,
    pub(crate) prev_crc: u32,
    /// Why the scan stopped (for `check`).
    pub(crate) stop: String,
}

/// Replays whole committed transactions of the journal into `rep`.
/// Stops at the first block that is not the chain's next (an unwritten,
/// stale, torn or foreign block): nothing after it was committed.
pub(crate) fn replay_journal(
    devs: &Devices,
    sb: &Superblock,
    rep: &mut Replay,
) -> Result<JournalEnd, String> {
    let start = sb.journal_start();
    let mut end = JournalEnd {
        used: 0,
        next_seq: sb.journal_seq,
        prev_crc: sb.journal_nonce,
        stop: "end of journal".into(),
    };
    let (mut seq, mut prev) = (sb.journal_seq, sb.journal_nonce);
    let mut txn: Vec<Record> = Vec::new();
    const CHUNK: u64 = 64;
    let mut i = 0;
    'scan: while i < sb.journal_blocks {
        let n = CHUNK.min(sb.journal_blocks - i);
        let buf =
            read_blocks(devs, start + i, n).map_err(|e| format!("reading the journal: {e}"))?;
        for k in 0..n {
            let b = &buf[(k as usize) * BLOCK..(k as usize + 1) * BLOCK];
            let (h, crc) = match open_block(b, &sb.uuid) {
                Ok(x) => x,
                Err(e) => {
                    end.stop = format!("journal block {}: {e}", i + k);
                    break 'scan;
                }
            };
            if h.kind != KIND_JOURNAL || h.seq != seq || h.prev != prev {
                end.stop = format!("journal block {}: not the next of the chain", i + k);
                break 'scan;
            }
            let payload = &b[HEADER..HEADER + usize::from(h.used)];
            if let Err(e) = Record::decode_all(payload, &mut txn) {
                return Err(format!("journal block {} (sequence {seq}): {e}", i + k));
            }
            seq += 1;
            prev = crc;
            if h.last {
                for r in txn.drain(..) {
                    rep.apply(r)
                        .map_err(|e| format!("journal block {}: {e}", i + k))?;
                }
                end.used = i + k + 1;
                end.next_seq = seq;
                end.prev_crc = prev;
            }
        }
        i += n;
    }
    Ok(end)
}

impl Meta {
    /// Appends `recs` as one transaction; false when the journal is full.
    pub(crate) fn append(&mut self, devs: &Devices, recs: &[Record]) -> io::Result<bool> {
        let payloads = pack(recs);
        let n = payloads.len() as u64;
        if self.used + n > self.sb.journal_blocks {
            return Ok(false);
        }
        let blocks = seal_all(
            &payloads,
            KIND_JOURNAL,
            self.next_seq,
            self.prev_crc,
            &self.sb.uuid,
        );
        write_blocks(devs, 0, self.sb.journal_start() + self.used, &blocks)?;
        devs.run(0, farflash_backend::IoOp::Flush, IoBuf::with_capacity(0))?;
        self.used += n;
        self.next_seq += n;
        self.prev_crc = blocks.last().map_or(self.prev_crc, |b| {
            u32::from_le_bytes([b[4], b[5], b[6], b[7]])
        });
        Ok(true)
    }

    /// Writes the whole state `recs` into the other checkpoint slot, then
    /// a superblock naming it, and restarts the journal.
    pub(crate) fn checkpoint(&mut self, devs: &Devices, recs: &[Record]) -> io::Result<()> {
        let payloads = pack(recs);
        let n = payloads.len() as u64;
        if n > self.sb.slot_blocks {
            return Err(io::Error::other(format!(
                "checkpoint of {n} blocks exceeds its slot ({} blocks)",
                self.sb.slot_blocks
            )));
        }
        let slot = 1 - self.sb.ckpt_slot;
        let ckpt_nonce = nonce();
        let blocks = seal_all(&payloads, KIND_CHECKPOINT, 0, ckpt_nonce, &self.sb.uuid);
        write_blocks(devs, 0, self.sb.slot_start(slot), &blocks)?;
        devs.run(0, farflash_backend::IoOp::Flush, IoBuf::with_capacity(0))?;
        let mut sb = self.sb.clone();
        sb.generation += 1;
        sb.ckpt_slot = slot;
        sb.ckpt_blocks = n;
        sb.ckpt_nonce = ckpt_nonce;
        sb.journal_seq = self.next_seq;
        sb.journal_nonce = nonce();
        write_blocks(devs, 0, sb.generation % 2, &[sb.encode()])?;
        devs.run(0, farflash_backend::IoOp::Flush, IoBuf::with_capacity(0))?;
        self.used = 0;
        self.prev_crc = sb.journal_nonce;
        self.sb = sb;
        Ok(())
    }
}
