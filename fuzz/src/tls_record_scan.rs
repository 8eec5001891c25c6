//! `tls_record_scan`: `farflash_tls::record::RecordScan`, which the
//! target's secure channel (crates/transport `secure.rs`) runs over every
//! byte of ciphertext a peer sends before OpenSSL decrypts it, fed a
//! hostile stream in pieces. Byte 0 seeds the piece sizes (1 to 64 bytes,
//! or the whole stream); the rest is the stream.
//!
//! Checked against a reference that parses the whole stream at once: the
//! same error at the same record, the same count of whole records, and
//! `mid_record` exactly when the stream ends inside a header or body;
//! nothing panics whatever the cuts.

use farflash_tls::record::{RecordError, RecordScan, MAX_RECORD};

/// The stream parsed in one go: (whole records, the error, ends inside a record).
fn reference(s: &[u8]) -> (u64, Option<RecordError>, bool) {
    let mut at = 0;
    let mut records = 0;
    while at < s.len() {
        if s.len() - at < 5 {
            return (records, None, true);
        }
        let ty = s[at];
        if !(20..=23).contains(&ty) {
            return (records, Some(RecordError::ContentType(ty)), false);
        }
        let len = u16::from_be_bytes([s[at + 3], s[at + 4]]) as usize;
        if len > MAX_RECORD {
            return (records, Some(RecordError::Oversized(len)), false);
        }
        if s.len() - at - 5 < len {
            return (records, None, true);
        }
        at += 5 + len;
        records += 1;
    }
    (records, None, false)
}

pub fn run(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let (records, error, mid) = reference(stream);
    let mut scan = RecordScan::default();
    let mut rng = seed as u32 | 1;
    let mut at = 0;
    let mut got_err = None;
    while at < stream.len() {
        let n = if seed == 0 {
            stream.len()
        } else {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            1 + (rng % 64) as usize
        };
        let end = (at + n).min(stream.len());
        if let Err(e) = scan.feed(&stream[at..end]) {
            got_err = Some(e);
            break;
        }
        at = end;
    }
    assert_eq!(got_err, error, "error");
    assert_eq!(scan.records(), records, "records");
    if error.is_none() {
        assert_eq!(scan.mid_record(), mid, "mid_record");
    }
}
