//! Little-endian field access on fixed-offset byte layouts.
//!
//! Callers index fixed-size headers whose length was checked when they were
//! sliced, so an out-of-bounds offset is a programming error, not bad input.

#[inline]
pub fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
#[inline]
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u128(b: &mut [u8], off: usize, v: u128) {
    b[off..off + 16].copy_from_slice(&v.to_le_bytes());
}

/// Writes `s` into a fixed ASCII field padded with `pad` (spaces for SN/MN/FR,
/// NULs for NQNs), truncating if needed.
pub fn put_str(b: &mut [u8], off: usize, len: usize, s: &str, pad: u8) {
    let field = &mut b[off..off + len];
    field.fill(pad);
    let n = s.len().min(len);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Reads a NUL- or space-padded ASCII field, trimming the padding.
/// Returns `None` when the bytes are not UTF-8.
pub fn str_at(b: &[u8], off: usize, len: usize) -> Option<&str> {
    let field = &b[off..off + len];
    let end = field.iter().position(|&c| c == 0).unwrap_or(len);
    std::str::from_utf8(&field[..end])
        .ok()
        .map(|s| s.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut b = [0u8; 32];
        put_u16(&mut b, 1, 0xBEEF);
        put_u32(&mut b, 3, 0xDEAD_BEEF);
        put_u64(&mut b, 7, 0x0123_4567_89AB_CDEF);
        assert_eq!(u16_at(&b, 1), 0xBEEF);
        assert_eq!(u32_at(&b, 3), 0xDEAD_BEEF);
        assert_eq!(u64_at(&b, 7), 0x0123_4567_89AB_CDEF);
        assert_eq!(b[1], 0xEF);
    }

    #[test]
    fn strings() {
        let mut b = [0u8; 16];
        put_str(&mut b, 0, 8, "abc", b' ');
        assert_eq!(&b[..8], b"abc     ");
        assert_eq!(str_at(&b, 0, 8), Some("abc"));
        put_str(&mut b, 8, 4, "toolong", 0);
        assert_eq!(&b[8..12], b"tool");
        assert_eq!(str_at(&[0xff, 0], 0, 2), None);
    }
}
