//! The on-disk encodings: superblock, metadata blocks and records.
//!
//! Pure functions of bytes (no I/O), so the fuzz target `pool_metadata`
//! can drive every decoder. All integers are little-endian. Decoders never
//! panic: hostile bytes give a [`FormatError`] naming the field.

use std::fmt;

/// Metadata block size: superblocks, checkpoint and journal blocks.
pub const BLOCK: usize = 4096;
/// Bytes of a metadata block header.
pub const HEADER: usize = 32;
/// Payload bytes of a metadata block.
pub const PAYLOAD: usize = BLOCK - HEADER;
/// Superblock magic (bytes 0..8).
pub const SB_MAGIC: &[u8; 8] = b"FFPOOLSB";
/// On-disk format version.
pub const VERSION: u32 = 1;
/// Most devices in one pool.
pub const MAX_DEVICES: usize = 16;
/// Longest volume or pool name, in bytes.
pub const MAX_NAME: usize = 64;
/// Metadata block magic.
pub const BLOCK_MAGIC: u32 = 0x4246_4d46; // "FMFB"
/// Block kinds.
pub const KIND_JOURNAL: u8 = 1;
pub const KIND_CHECKPOINT: u8 = 2;
/// Block flag: the last block of a journal transaction or of a checkpoint.
pub const FLAG_LAST: u8 = 1;
/// "No parent" in a volume record.
pub const NO_PARENT: u32 = u32::MAX;
/// Map value: never written here (read through the parent).
pub const UNMAPPED: u64 = 0;
/// Map value: reads zeroes, hiding the parent (deallocated over a parent).
pub const ZERO: u64 = u64::MAX;
/// Largest volume (1 PiB: a map's top array stays within 1 MiB); a
/// record of a larger one is corrupt.
pub const MAX_SIZE: u64 = 1 << 50;

/// Why bytes do not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, FormatError> {
    Err(FormatError(msg.into()))
}

/// A little-endian cursor that fails instead of panicking.
struct Rd<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return err(format!("truncated {what}"));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FormatError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
    fn u8(&mut self, what: &str) -> Result<u8, FormatError> {
        Ok(self.arr::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.arr(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }
}

/// The superblock: one per device in blocks 0 and 1 (two copies, written
/// alternately by generation; the valid one with the highest generation
/// wins). Only device 0's copies change after creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub uuid: [u8; 16],
    pub generation: u64,
    pub name: String,
    pub cluster_size: u64,
    /// This device's index in the pool and every device's size in bytes.
    pub dev_index: u32,
    pub dev_sizes: Vec<u64>,
    pub max_volumes: u32,
    /// Blocks per checkpoint slot, and in the journal.
    pub slot_blocks: u64,
    pub journal_blocks: u64,
    /// The live checkpoint: slot (0 or 1), length, and the chain seed.
    pub ckpt_slot: u8,
    pub ckpt_blocks: u64,
    pub ckpt_nonce: u32,
    /// The journal after that checkpoint: first sequence number (at journal
    /// block 0) and the chain seed of its first block.
    pub journal_seq: u64,
    pub journal_nonce: u32,
}

impl Superblock {
    /// Encodes into one block; the CRC32C (bytes 12..16) covers 16..4096.
    pub fn encode(&self) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        let mut w = Wr { b: &mut b, at: 0 };
        w.put(SB_MAGIC);
        w.put(&VERSION.to_le_bytes());
        w.put(&0u32.to_le_bytes()); // CRC, below
        w.put(&self.uuid);
        w.put(&self.generation.to_le_bytes());
        w.put(&self.cluster_size.to_le_bytes());
        w.put(&self.dev_index.to_le_bytes());
        w.put(&(self.dev_sizes.len() as u32).to_le_bytes());
        for s in self.dev_sizes.iter().take(MAX_DEVICES) {
            w.put(&s.to_le_bytes());
        }
        w.at = 64 + MAX_DEVICES * 8;
        w.put(&self.max_volumes.to_le_bytes());
        w.put(&self.slot_blocks.to_le_bytes());
        w.put(&self.journal_blocks.to_le_bytes());
        w.put(&[self.ckpt_slot]);
        w.put(&self.ckpt_blocks.to_le_bytes());
        w.put(&self.ckpt_nonce.to_le_bytes());
        w.put(&self.journal_seq.to_le_bytes());
        w.put(&self.journal_nonce.to_le_bytes());
        let name = self.name.as_bytes();
        let n = name.len().min(MAX_NAME);
        w.put(&[n as u8]);
        w.put(&name[..n]);
        let crc = crc32c::crc32c(&b[16..]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks one superblock copy.
    pub fn decode(b: &[u8]) -> Result<Superblock, FormatError> {
        if b.len() < BLOCK {
            return err("superblock shorter than a block");
        }
        let mut r = Rd {
            b: &b[..BLOCK],
            at: 0,
        };
        if r.take(8, "magic")? != SB_MAGIC {
            return err("no superblock magic");
        }
        let version = r.u32("version")?;
        if version != VERSION {
            return err(format!(
                "superblock version {version} (this build reads {VERSION})"
            ));
        }
        let crc = r.u32("crc")?;
        if crc != crc32c::crc32c(&b[16..BLOCK]) {
            return err("superblock checksum mismatch");
        }
        let uuid = r.arr::<16>("uuid")?;
        let generation = r.u64("generation")?;
        let cluster_size = r.u64("cluster_size")?;
        let dev_index = r.u32("dev_index")?;
        let ndev = r.u32("dev_count")? as usize;
        if ndev == 0 || ndev > MAX_DEVICES || dev_index as usize >= ndev {
            return err(format!(
                "device count {ndev} / index {dev_index} out of range"
            ));
        }
        let mut dev_sizes = Vec::with_capacity(ndev);
        for _ in 0..ndev {
            dev_sizes.push(r.u64("dev_size")?);
        }
        r.at = 64 + MAX_DEVICES * 8;
        let sb = Superblock {
            uuid,
            generation,
            cluster_size,
            dev_index,
            dev_sizes,
            max_volumes: r.u32("max_volumes")?,
            slot_blocks: r.u64("slot_blocks")?,
            journal_blocks: r.u64("journal_blocks")?,
            ckpt_slot: r.u8("ckpt_slot")?,
            ckpt_blocks: r.u64("ckpt_blocks")?,
            ckpt_nonce: r.u32("ckpt_nonce")?,
            journal_seq: r.u64("journal_seq")?,
            journal_nonce: r.u32("journal_nonce")?,
            name: {
                let n = r.u8("name length")? as usize;
                if n > MAX_NAME {
                    return err("pool name longer than 64 bytes");
                }
                name_from(r.take(n, "name")?)?
            },
        };
        sb.check_geometry()?;
        Ok(sb)
    }

    /// Field ranges a decoded superblock must respect.
    fn check_geometry(&self) -> Result<(), FormatError> {
        let cs = self.cluster_size;
        if !cs.is_power_of_two() || !(MIN_CLUSTER..=MAX_CLUSTER).contains(&cs) {
            return err(format!(
                "cluster_size {cs} is not a power of two in 64 KiB..=64 MiB"
            ));
        }
        if self.ckpt_slot > 1 {
            return err(format!("ckpt_slot {} is not 0 or 1", self.ckpt_slot));
        }
        if self.ckpt_blocks > self.slot_blocks {
            return err(format!(
                "ckpt_blocks {} exceeds slot_blocks {}",
                self.ckpt_blocks, self.slot_blocks
            ));
        }
        if self.slot_blocks == 0 || self.journal_blocks == 0 {
            return err("empty checkpoint slot or journal");
        }
        let meta = self.meta_end();
        let dev0 = self.dev_sizes[0];
        if meta.is_none_or(|m| m > dev0) {
            return err(format!(
                "metadata area does not fit device 0 ({dev0} bytes)"
            ));
        }
        Ok(())
    }

    /// First block of checkpoint slot `s`.
    pub fn slot_start(&self, s: u8) -> u64 {
        2 + u64::from(s) * self.slot_blocks
    }

    /// First block of the journal.
    pub fn journal_start(&self) -> u64 {
        2 + 2 * self.slot_blocks
    }

    /// Byte end of the metadata area on device 0 (None on overflow).
    pub fn meta_end(&self) -> Option<u64> {
        self.slot_blocks
            .checked_mul(2)?
            .checked_add(self.journal_blocks)?
            .checked_add(2)?
            .checked_mul(BLOCK as u64)
    }
}

/// Smallest and largest cluster sizes.
pub const MIN_CLUSTER: u64 = 64 << 10;
pub const MAX_CLUSTER: u64 = 64 << 20;

fn name_from(b: &[u8]) -> Result<String, FormatError> {
    match std::str::from_utf8(b) {
        Ok(s) if valid_name(s) => Ok(s.to_owned()),
        _ => err("name is not 1-64 bytes of [A-Za-z0-9._:@+-]"),
    }
}

/// Names of pools and volumes: 1-64 bytes of `[A-Za-z0-9._:@+-]`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._:@+-".contains(&c))
}

struct Wr<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl Wr<'_> {
    fn put(&mut self, s: &[u8]) {
        self.b[self.at..self.at + s.len()].copy_from_slice(s);
        self.at += s.len();
    }
}

/// A metadata block's header.
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `FMFB` |
/// | 4..8 | CRC32C of the pool UUID then bytes 8..4096 |
/// | 8..16 | sequence (journal) or index (checkpoint) |
/// | 16..20 | CRC of the previous block of the chain (or the chain seed) |
/// | 20 | kind: 1 journal, 2 checkpoint |
/// | 21 | flags: bit 0 last block of the transaction / checkpoint |
/// | 22..24 | payload bytes used |
/// | 24..32 | reserved (zero) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub seq: u64,
    pub prev: u32,
    pub kind: u8,
    pub last: bool,
    pub used: u16,
}

/// Seals a block: writes `h` and the CRC; returns the CRC (the next
/// block's `prev`).
pub fn seal_block(b: &mut [u8; BLOCK], h: &BlockHeader, uuid: &[u8; 16]) -> u32 {
    b[0..4].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&h.seq.to_le_bytes());
    b[16..20].copy_from_slice(&h.prev.to_le_bytes());
    b[20] = h.kind;
    b[21] = u8::from(h.last) * FLAG_LAST;
    b[22..24].copy_from_slice(&h.used.to_le_bytes());
    b[24..32].fill(0);
    let crc = block_crc(b, uuid);
    b[4..8].copy_from_slice(&crc.to_le_bytes());
    crc
}

fn block_crc(b: &[u8], uuid: &[u8; 16]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(uuid), &b[8..BLOCK])
}

/// Checks a block's magic and CRC (for pool `uuid`) and decodes its
/// header; returns it with the block's CRC.
pub fn open_block(b: &[u8], uuid: &[u8; 16]) -> Result<(BlockHeader, u32), FormatError> {
    if b.len() < BLOCK {
        return err("metadata block shorter than 4096 bytes");
    }
    let mut r = Rd { b, at: 0 };
    if r.u32("magic")? != BLOCK_MAGIC {
        return err("bad metadata block magic");
    }
    let crc = r.u32("crc")?;
    if crc != block_crc(b, uuid) {
        return err("metadata block checksum mismatch");
    }
    let seq = r.u64("seq")?;
    let prev = r.u32("prev")?;
    let kind = r.u8("kind")?;
    let flags = r.u8("flags")?;
    let used = r.u16("used")?;
    if usize::from(used) > PAYLOAD {
        return err(format!("payload length {used} exceeds {PAYLOAD}"));
    }
    let last = flags & FLAG_LAST != 0;
    Ok((
        BlockHeader {
            seq,
            prev,
            kind,
            last,
            used,
        },
        crc,
    ))
}

/// One change to the pool's state (journal) or one piece of it
/// (checkpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A volume or snapshot, created or changed (tag 1).
    VolPut(VolRecord),
    /// A volume or snapshot deleted, with its map (tag 2).
    VolDel { id: u32 },
    /// Logical cluster `index` of volume `id` now holds `value`:
    /// [`UNMAPPED`], [`ZERO`] or a physical cluster + 1 (tag 3).
    Map { id: u32, index: u64, value: u64 },
}

/// A volume's or snapshot's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolRecord {
    pub id: u32,
    pub uuid: [u8; 16],
    pub size: u64,
    pub parent: u32,
    pub snapshot: bool,
    pub name: String,
}

/// Longest encoded record.
pub const MAX_RECORD: usize = 1 + 4 + 16 + 8 + 4 + 1 + 1 + MAX_NAME;
/// Bytes of a `Map` record.
pub const MAP_RECORD: usize = 1 + 4 + 8 + 8;

impl Record {
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Record::VolPut(v) => {
                out.push(1);
                out.extend_from_slice(&v.id.to_le_bytes());
                out.extend_from_slice(&v.uuid);
                out.extend_from_slice(&v.size.to_le_bytes());
                out.extend_from_slice(&v.parent.to_le_bytes());
                out.push(u8::from(v.snapshot));
                let n = v.name.len().min(MAX_NAME);
                out.push(n as u8);
                out.extend_from_slice(&v.name.as_bytes()[..n]);
            }
            Record::VolDel { id } => {
                out.push(2);
                out.extend_from_slice(&id.to_le_bytes());
            }
            Record::Map { id, index, value } => {
                out.push(3);
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&index.to_le_bytes());
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
    }

    /// Encoded length.
    pub fn len(&self) -> usize {
        match self {
            Record::VolPut(v) => MAX_RECORD - MAX_NAME + v.name.len().min(MAX_NAME),
            Record::VolDel { .. } => 5,
            Record::Map { .. } => MAP_RECORD,
        }
    }

    /// Whether `len()` is zero (never).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Decodes every record of a block payload.
    pub fn decode_all(payload: &[u8], out: &mut Vec<Record>) -> Result<(), FormatError> {
        let mut r = Rd { b: payload, at: 0 };
        while r.at < payload.len() {
            let rec = match r.u8("record tag")? {
                1 => Record::VolPut(VolRecord {
                    id: r.u32("volume id")?,
                    uuid: r.arr("volume uuid")?,
                    size: r.u64("volume size")?,
                    parent: r.u32("volume parent")?,
                    snapshot: match r.u8("volume flags")? {
                        0 => false,
                        1 => true,
                        f => return err(format!("volume flags {f:#x} unknown")),
                    },
                    name: {
                        let n = r.u8("volume name length")? as usize;
                        if n > MAX_NAME {
                            return err("volume name longer than 64 bytes");
                        }
                        name_from(r.take(n, "volume name")?)?
                    },
                }),
                2 => Record::VolDel {
                    id: r.u32("deleted volume id")?,
                },
                3 => Record::Map {
                    id: r.u32("map volume id")?,
                    index: r.u64("map index")?,
                    value: r.u64("map value")?,
                },
                t => return err(format!("unknown record tag {t}")),
            };
            out.push(rec);
        }
        Ok(())
    }
}

/// Packs records into block payloads (records never span blocks).
pub fn pack(records: &[Record]) -> Vec<Vec<u8>> {
    let mut blocks = vec![Vec::with_capacity(PAYLOAD)];
    for r in records {
        let cur = blocks.last_mut().filter(|b| b.len() + r.len() <= PAYLOAD);
        match cur {
            Some(b) => r.encode(b),
            None => {
                let mut b = Vec::with_capacity(PAYLOAD);
                r.encode(&mut b);
                blocks.push(b);
            }
        }
    }
    blocks
}

/// Builds sealed blocks of `kind` from payloads: sequence numbers from
/// `seq`, chained from `prev`, the last flagged. Returns the blocks.
pub fn seal_all(
    payloads: &[Vec<u8>],
    kind: u8,
    seq: u64,
    prev: u32,
    uuid: &[u8; 16],
) -> Vec<[u8; BLOCK]> {
    let mut prev = prev;
    let n = payloads.len();
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut b = [0u8; BLOCK];
            b[HEADER..HEADER + p.len()].copy_from_slice(p);
            let h = BlockHeader {
                seq: seq + i as u64,
                prev,
                kind,
                last: i + 1 == n,
                used: p.len() as u16,
            };
            prev = seal_block(&mut b, &h, uuid);
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            uuid: [7; 16],
            generation: 3,
            name: "p0".into(),
            cluster_size: 1 << 20,
            dev_index: 0,
            dev_sizes: vec![1 << 30, 2 << 30],
            max_volumes: 100,
            slot_blocks: 10,
            journal_blocks: 20,
            ckpt_slot: 1,
            ckpt_blocks: 2,
            ckpt_nonce: 9,
            journal_seq: 44,
            journal_nonce: 5,
        }
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let b = sb().encode();
        assert_eq!(Superblock::decode(&b), Ok(sb()));
        for at in [0, 9, 13, 20, 200, 4000] {
            let mut d = b;
            d[at] ^= 1;
            assert!(Superblock::decode(&d).is_err(), "flip at {at}");
        }
        let mut bad = sb();
        bad.cluster_size = 3 << 20;
        let e = Superblock::decode(&bad.encode()).unwrap_err();
        assert!(e.0.contains("cluster_size"), "{e}");
        assert!(Superblock::decode(&b[..100]).is_err());
    }

    #[test]
    fn records_pack_seal_and_decode() {
        let mut recs = vec![Record::VolPut(VolRecord {
            id: 1,
            uuid: [1; 16],
            size: 1 << 30,
            parent: NO_PARENT,
            snapshot: false,
            name: "vol-1".into(),
        })];
        recs.extend((0..400).map(|i| Record::Map {
            id: 1,
            index: i,
            value: i + 1,
        }));
        recs.push(Record::VolDel { id: 1 });
        let payloads = pack(&recs);
        assert!(payloads.len() >= 2);
        let blocks = seal_all(&payloads, KIND_JOURNAL, 10, 77, &[3; 16]);
        let mut prev = 77;
        let mut back = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            let (h, crc) = open_block(b, &[3; 16]).unwrap();
            assert_eq!(
                (h.seq, h.prev, h.last),
                (10 + i as u64, prev, i + 1 == blocks.len())
            );
            prev = crc;
            Record::decode_all(&b[HEADER..HEADER + h.used as usize], &mut back).unwrap();
        }
        assert_eq!(back, recs);
        assert!(
            open_block(&blocks[0], &[4; 16]).is_err(),
            "another pool's block"
        );
        let e = Record::decode_all(&[9], &mut back).unwrap_err();
        assert!(e.0.contains("tag 9"));
        assert!(Record::decode_all(&[3, 1, 2], &mut back).is_err());
    }
}
