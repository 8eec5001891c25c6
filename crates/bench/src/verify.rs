//! `--verify=crc32c`: every written extent carries a header and a CRC32C so
//! that reading it back proves where the data came from and that it is
//! intact. Layout of an extent of `len` bytes written at byte `offset`:
//!
//! | bytes | content |
//! |---|---|
//! | 0..8 | magic `FFVERIFY` |
//! | 8..16 | offset (u64 LE) |
//! | 16..20 | len (u32 LE) |
//! | 20..28 | seed (u64 LE) |
//! | 28..32 | CRC32C of bytes 0..28 and 32..len |
//! | 32..len | pseudo-random bytes from (seed, offset) |

use crate::rng::Rng;

pub const MAGIC: &[u8; 8] = b"FFVERIFY";
pub const HEADER_LEN: usize = 32;

/// Fills `b` (the whole extent) with the pattern for (`offset`, `seed`).
pub fn fill(b: &mut [u8], offset: u64, seed: u64) {
    let len = b.len();
    Rng::new(seed ^ offset.rotate_left(17)).fill(&mut b[HEADER_LEN.min(len)..]);
    if len < HEADER_LEN {
        return;
    }
    b[0..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..20].copy_from_slice(&(len as u32).to_le_bytes());
    b[20..28].copy_from_slice(&seed.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&b[0..28]), &b[HEADER_LEN..]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
}

/// Checks an extent read back; `Ok` or the byte offsets (relative to the
/// extent) of every `lba`-sized block that differs from what was written.
/// `scratch` must hold at least `got.len()` bytes.
pub fn check(
    got: &[u8],
    offset: u64,
    seed: u64,
    lba: usize,
    scratch: &mut [u8],
) -> Result<(), Vec<usize>> {
    let len = got.len();
    if len >= HEADER_LEN {
        let header_ok = &got[0..8] == MAGIC
            && got[8..16] == offset.to_le_bytes()
            && got[16..20] == (len as u32).to_le_bytes()
            && got[20..28] == seed.to_le_bytes();
        let crc = crc32c::crc32c_append(crc32c::crc32c(&got[0..28]), &got[HEADER_LEN..]);
        if header_ok && got[28..32] == crc.to_le_bytes() {
            return Ok(());
        }
    }
    // Find which blocks are wrong by regenerating the expected extent.
    let want = &mut scratch[..len];
    fill(want, offset, seed);
    let bad: Vec<usize> = (0..len)
        .step_by(lba.max(1))
        .filter(|&o| {
            let e = (o + lba).min(len);
            got[o..e] != want[o..e]
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_detection() {
        let mut b = vec![0u8; 8192];
        fill(&mut b, 4096 * 7, 42);
        let mut scratch = vec![0u8; 8192];
        assert_eq!(check(&b, 4096 * 7, 42, 512, &mut scratch), Ok(()));
        // Wrong place (data written for another offset) is caught by the header.
        assert!(check(&b, 4096 * 8, 42, 512, &mut scratch).is_err());
        b[5000] ^= 1;
        assert_eq!(check(&b, 4096 * 7, 42, 512, &mut scratch), Err(vec![4608]));
        let z = vec![0u8; 1024];
        assert_eq!(check(&z, 0, 1, 512, &mut scratch), Err(vec![0, 512]));
    }
}
