//! What to do next: offsets, sizes and directions for a timed or
//! size-bounded run, and the extent plan of a verify run.

use crate::rng::Rng;
use crate::size::BlockSizes;
use crate::spec::Rw;

/// A job's region of the device, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub len: u64,
}

/// Generates I/Os for `--rw` over a region.
pub struct Workload {
    random: bool,
    read_pct: u32,
    bs: BlockSizes,
    align: u64,
    region: Region,
    cursor: u64,
    rng: Rng,
}

impl Workload {
    pub fn new(rw: Rw, rwmixread: u32, bs: BlockSizes, region: Region, seed: u64) -> Workload {
        let align = bs.min().max(1) as u64;
        Workload {
            random: rw.random(),
            read_pct: rw.read_pct(rwmixread),
            bs,
            align,
            region,
            cursor: 0,
            rng: Rng::new(seed),
        }
    }

    /// (write, byte offset, length). The region must hold the largest block.
    #[inline]
    pub fn next_io(&mut self) -> (bool, u64, u32) {
        let write = match self.read_pct {
            100 => false,
            0 => true,
            p => self.rng.below(100) >= p as u64,
        };
        let len = (self.bs.pick(self.rng.next_u64()) as u64).min(self.region.len);
        let pos = if self.random {
            let slots = (self.region.len - len) / self.align + 1;
            self.rng.below(slots) * self.align
        } else {
            if self.cursor + len > self.region.len {
                self.cursor = 0;
            }
            let p = self.cursor;
            self.cursor += len;
            p
        };
        (write, self.region.start + pos, len as u32)
    }
}

/// Cuts the region into extents with sizes drawn from `bs` (the last one
/// shortened to fit, in whole `lba` blocks), shuffled when `random`.
pub fn verify_plan(
    region: Region,
    bs: &BlockSizes,
    lba: u32,
    random: bool,
    seed: u64,
) -> Vec<(u64, u32)> {
    let mut rng = Rng::new(seed ^ 0x5EED);
    let lba = lba.max(1) as u64;
    let mut v = Vec::new();
    let mut pos = 0u64;
    let end = region.len / lba * lba;
    while pos < end {
        let len = (bs.pick(rng.next_u64()) as u64).min(end - pos);
        v.push((region.start + pos, len as u32));
        pos += len;
    }
    if random {
        for i in (1..v.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_stays_inside_and_aligned() {
        let r = Region {
            start: 1 << 20,
            len: 1 << 20,
        };
        let mut w = Workload::new(
            Rw::RandRw,
            70,
            BlockSizes::Range {
                min: 4096,
                max: 65536,
            },
            r,
            1,
        );
        let mut reads = 0;
        for _ in 0..10_000 {
            let (wr, off, len) = w.next_io();
            assert!(off >= r.start && off + len as u64 <= r.start + r.len);
            assert_eq!(off % 4096, 0);
            reads += (!wr) as u32;
        }
        assert!((6500..7500).contains(&reads), "{reads}");
    }

    #[test]
    fn sequential_wraps() {
        let r = Region {
            start: 0,
            len: 16384,
        };
        let mut w = Workload::new(Rw::Read, 50, BlockSizes::Fixed(8192), r, 1);
        let offs: Vec<u64> = (0..4).map(|_| w.next_io().1).collect();
        assert_eq!(offs, vec![0, 8192, 0, 8192]);
    }

    #[test]
    fn plan_covers_region_exactly() {
        let r = Region {
            start: 4096,
            len: 1 << 20,
        };
        let bs = BlockSizes::Split(vec![(4096, 50), (65536, 30), (262144, 20)]);
        let mut p = verify_plan(r, &bs, 512, true, 3);
        p.sort();
        let mut pos = r.start;
        for &(o, l) in &p {
            assert_eq!(o, pos);
            pos += l as u64;
        }
        assert_eq!(pos, r.start + r.len);
        assert!(p.iter().any(|x| x.1 == 4096) && p.iter().any(|x| x.1 > 4096));
    }
}
