//! Where the peer's ciphertext stream is, record by record (RFC 8446 §5.1
//! `TLSPlaintext` / §5.2 `TLSCiphertext` headers: type, legacy version,
//! length), without decrypting anything: enough to refuse a record that
//! is too long or of no TLS 1.3 type before it is buffered, and to know
//! when a peer stalls inside a record (an event loop driving a
//! [`crate::Session`] follows what it feeds). OpenSSL checks the same
//! again when it decrypts.

/// Content types a TLS 1.3 peer sends (RFC 8446 §5.1, §D.4 for
/// change_cipher_spec in middlebox compatibility mode).
const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
/// RFC 8446 §5.2: "The length MUST NOT exceed 2^14 + 256 bytes. An
/// endpoint that receives a record that exceeds this length MUST
/// terminate the connection with a "record_overflow" alert."
pub const MAX_RECORD: usize = (1 << 14) + 256;
/// The first byte of a ClientHello's record (TLS handshake record): how a
/// `tls-optional` listener tells TLS from an NVMe/TCP ICReq (PDU type 0).
pub const TLS_HANDSHAKE_RECORD: u8 = HANDSHAKE;

/// Why a record header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Longer than [`MAX_RECORD`] (record_overflow).
    #[error("a TLS record of {0} bytes (at most 16640)")]
    Oversized(usize),
    /// Not a TLS 1.3 content type (unexpected_message).
    #[error("a record of TLS content type {0}")]
    ContentType(u8),
}

/// The scanner: inside a header (`got` of its 5 bytes) or a body (`left`
/// bytes to come).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordScan {
    hdr: [u8; 5],
    got: u8,
    left: usize,
    records: u64,
}

impl RecordScan {
    /// Follows `bytes` (the next bytes of the stream). After an error the
    /// scanner stays where it was: the connection is to be closed.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), RecordError> {
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                self.left -= n;
                bytes = &bytes[n..];
                if self.left == 0 {
                    self.records += 1;
                }
                continue;
            }
            let need = 5 - self.got as usize;
            let n = need.min(bytes.len());
            self.hdr[self.got as usize..self.got as usize + n].copy_from_slice(&bytes[..n]);
            self.got += n as u8;
            bytes = &bytes[n..];
            if self.got < 5 {
                break;
            }
            let ty = self.hdr[0];
            if !matches!(
                ty,
                CHANGE_CIPHER_SPEC | ALERT | HANDSHAKE | APPLICATION_DATA
            ) {
                return Err(RecordError::ContentType(ty));
            }
            let len = u16::from_be_bytes([self.hdr[3], self.hdr[4]]) as usize;
            if len > MAX_RECORD {
                return Err(RecordError::Oversized(len));
            }
            self.got = 0;
            self.left = len;
            if len == 0 {
                self.records += 1;
            }
        }
        Ok(())
    }

    /// Part of a record (header or body) has arrived and the rest not.
    pub fn mid_record(&self) -> bool {
        self.got > 0 || self.left > 0
    }

    /// Whole records seen.
    pub fn records(&self) -> u64 {
        self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ty: u8, len: usize) -> Vec<u8> {
        let mut v = vec![ty, 3, 3, (len >> 8) as u8, len as u8];
        v.resize(5 + len, 0xAA);
        v
    }

    #[test]
    fn follows_records_split_anywhere() {
        let mut stream = rec(HANDSHAKE, 300);
        stream.extend(rec(APPLICATION_DATA, MAX_RECORD));
        stream.extend(rec(ALERT, 2));
        stream.extend(rec(APPLICATION_DATA, 0));
        for cut in [1, 2, 4, 5, 6, 304, 305, 306, 1000, stream.len()] {
            let mut s = RecordScan::default();
            let (a, b) = stream.split_at(cut.min(stream.len()));
            s.feed(a).unwrap();
            // 305: the end of the first record.
            if cut < stream.len() && cut != 305 {
                assert!(s.mid_record(), "cut at {cut}");
            }
            if cut == 305 {
                assert!(!s.mid_record());
                assert_eq!(s.records(), 1);
            }
            s.feed(b).unwrap();
            assert!(!s.mid_record());
            assert_eq!(s.records(), 4);
        }
        // Byte by byte.
        let mut s = RecordScan::default();
        for b in &stream {
            s.feed(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!(s.records(), 4);
    }

    #[test]
    fn refuses_oversized_records_and_unknown_types() {
        let mut s = RecordScan::default();
        assert_eq!(
            s.feed(&rec(APPLICATION_DATA, MAX_RECORD + 1)[..5]),
            Err(RecordError::Oversized(MAX_RECORD + 1))
        );
        let mut s = RecordScan::default();
        // A plaintext NVMe/TCP ICReq starts with PDU type 0.
        assert_eq!(s.feed(&[0, 0, 128, 0, 0]), Err(RecordError::ContentType(0)));
        let mut s = RecordScan::default();
        assert_eq!(s.feed(&[24, 3, 3, 0, 1]), Err(RecordError::ContentType(24)));
    }
}
