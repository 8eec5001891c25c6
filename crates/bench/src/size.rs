//! fio-style sizes: `4k`, `128K`, `1M`, `2g`, plain bytes; `--bsrange=4k-256k`;
//! `--bssplit=4k/50:64k/30:256k/20`. Suffixes are powers of 1024, as in fio
//! (`kb_base=1024`).

use anyhow::{bail, Context};

/// Parses `4k`, `128K`, `1m`, `1G`, `512` (bytes); `KiB`/`KB`/`B` also accepted.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let stripped = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, mult) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        Some('t') => (&stripped[..stripped.len() - 1], 1 << 40),
        _ => (stripped, 1),
    };
    let n: u64 = digits
        .parse()
        .with_context(|| format!("bad size {s:?} (expected e.g. 4k, 128K, 1G)"))?;
    n.checked_mul(mult)
        .with_context(|| format!("size {s:?} overflows"))
}

/// How block sizes are chosen for each I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockSizes {
    Fixed(u32),
    /// Uniform in `[min, max]`, in multiples of `min` (fio's bsrange with blockalign=min).
    Range {
        min: u32,
        max: u32,
    },
    /// Sizes with weights in percent (fio's bssplit).
    Split(Vec<(u32, u32)>),
}

impl BlockSizes {
    pub fn min(&self) -> u32 {
        match self {
            BlockSizes::Fixed(b) => *b,
            BlockSizes::Range { min, .. } => *min,
            BlockSizes::Split(v) => v.iter().map(|x| x.0).min().unwrap_or(4096),
        }
    }
    pub fn max(&self) -> u32 {
        match self {
            BlockSizes::Fixed(b) => *b,
            BlockSizes::Range { max, .. } => *max,
            BlockSizes::Split(v) => v.iter().map(|x| x.0).max().unwrap_or(4096),
        }
    }
    /// Picks a size from a uniform random `r`.
    pub fn pick(&self, r: u64) -> u32 {
        match self {
            BlockSizes::Fixed(b) => *b,
            BlockSizes::Range { min, max } => {
                let steps = (max / min) as u64;
                min * (1 + (r % steps) as u32)
            }
            BlockSizes::Split(v) => {
                let total: u32 = v.iter().map(|x| x.1).sum::<u32>().max(1);
                let mut x = (r % total as u64) as u32;
                for &(b, w) in v {
                    if x < w {
                        return b;
                    }
                    x -= w;
                }
                v.last().map_or(4096, |x| x.0)
            }
        }
    }
    /// Checks every size is a positive multiple of `lba`.
    pub fn check(&self, lba: u32) -> anyhow::Result<()> {
        let sizes: Vec<u32> = match self {
            BlockSizes::Fixed(b) => vec![*b],
            BlockSizes::Range { min, max } => vec![*min, *max],
            BlockSizes::Split(v) => v.iter().map(|x| x.0).collect(),
        };
        for b in sizes {
            if b == 0 || b % lba != 0 {
                bail!("block size {b} is not a multiple of the {lba}-byte logical block");
            }
        }
        Ok(())
    }
}

fn parse_u32_size(s: &str) -> anyhow::Result<u32> {
    let v = parse_size(s)?;
    u32::try_from(v).with_context(|| format!("block size {s:?} too large"))
}

/// `--bs`, `--bsrange` and `--bssplit` combined (the last two win over `--bs`).
pub fn block_sizes(
    bs: Option<&str>,
    bsrange: Option<&str>,
    bssplit: Option<&str>,
) -> anyhow::Result<BlockSizes> {
    if let Some(split) = bssplit {
        let mut v = vec![];
        for part in split.split(':').filter(|p| !p.is_empty()) {
            let (b, w) = part.split_once('/').unwrap_or((part, ""));
            let w: u32 = if w.is_empty() {
                0
            } else {
                w.parse()
                    .with_context(|| format!("bad bssplit weight in {part:?}"))?
            };
            v.push((parse_u32_size(b)?, w));
        }
        if v.is_empty() {
            bail!("empty --bssplit");
        }
        // fio: entries without a weight share what is left of 100%.
        let given: u32 = v.iter().map(|x| x.1).sum();
        let blanks = v.iter().filter(|x| x.1 == 0).count() as u32;
        if let Some(each) = 100u32.saturating_sub(given).checked_div(blanks) {
            for x in v.iter_mut().filter(|x| x.1 == 0) {
                x.1 = each.max(1);
            }
        }
        return Ok(BlockSizes::Split(v));
    }
    if let Some(r) = bsrange {
        let (a, b) = r
            .split_once('-')
            .with_context(|| format!("--bsrange {r:?}: expected MIN-MAX"))?;
        let (min, max) = (parse_u32_size(a)?, parse_u32_size(b)?);
        if min == 0 || max < min {
            bail!("--bsrange {r:?}: need 0 < MIN <= MAX");
        }
        return Ok(BlockSizes::Range { min, max });
    }
    Ok(BlockSizes::Fixed(parse_u32_size(bs.unwrap_or("4k"))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("128K").unwrap(), 131072);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999k").is_err());
    }

    #[test]
    fn ranges_and_splits() {
        let r = block_sizes(None, Some("4k-16k"), None).unwrap();
        assert_eq!(
            r,
            BlockSizes::Range {
                min: 4096,
                max: 16384
            }
        );
        let picks: std::collections::BTreeSet<u32> = (0..100).map(|i| r.pick(i)).collect();
        assert_eq!(
            picks.into_iter().collect::<Vec<_>>(),
            vec![4096, 8192, 12288, 16384]
        );
        let s = block_sizes(Some("4k"), None, Some("4k/50:64k/30:256k")).unwrap();
        assert_eq!(
            s,
            BlockSizes::Split(vec![(4096, 50), (65536, 30), (262144, 20)])
        );
        assert_eq!(s.pick(0), 4096);
        assert_eq!(s.pick(55), 65536);
        assert_eq!(s.pick(99), 262144);
        assert_eq!((s.min(), s.max()), (4096, 262144));
        assert!(s.check(512).is_ok());
        assert!(BlockSizes::Fixed(1000).check(512).is_err());
        assert!(block_sizes(None, Some("8k-4k"), None).is_err());
    }
}
