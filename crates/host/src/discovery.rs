//! Discovery log retrieval (Fabrics §5.3 / Base §5.16.1.23, as nvme-cli
//! does it): read the 1024-byte header, then the whole log, and start over
//! when GENCTR changed in between.

use crate::error::{HostError, Result};
use farflash_wire::discovery::{decode_header, DiscEntry, DISC_ENTRY_LEN, DISC_HEADER_LEN};

/// Most entries accepted (bounds what a hostile NUMREC makes us read).
pub const MAX_RECORDS: u64 = 4096;
/// Attempts before giving up on a log that keeps changing.
const RETRIES: usize = 10;

/// `get(len, offset)` reads `len` bytes of log 70h from byte `offset`.
pub fn read_log(mut get: impl FnMut(u32, u64) -> Result<Vec<u8>>) -> Result<(u64, Vec<DiscEntry>)> {
    for _ in 0..RETRIES {
        let h = get(DISC_HEADER_LEN as u32, 0)?;
        if h.len() < DISC_HEADER_LEN {
            return Err(HostError::Controller("short discovery log header".into()));
        }
        let (genctr, numrec) = decode_header(&h);
        if numrec > MAX_RECORDS {
            return Err(HostError::Controller(format!(
                "discovery log claims {numrec} records (limit {MAX_RECORDS})"
            )));
        }
        let total = DISC_HEADER_LEN + numrec as usize * DISC_ENTRY_LEN;
        let log = get(total as u32, 0)?;
        if log.len() < total {
            return Err(HostError::Controller("short discovery log".into()));
        }
        let (g2, n2) = decode_header(&log);
        if g2 != genctr || n2 != numrec {
            continue;
        }
        let entries = log[DISC_HEADER_LEN..total]
            .chunks_exact(DISC_ENTRY_LEN)
            .map(DiscEntry::decode)
            .collect();
        return Ok((genctr, entries));
    }
    Err(HostError::Controller(
        "discovery log kept changing (GENCTR) while being read".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_wire::discovery::encode_log;

    #[test]
    fn rereads_when_genctr_changes() {
        let e = DiscEntry {
            subnqn: "nqn.x".into(),
            ..DiscEntry::default()
        };
        let logs = [
            encode_log(1, std::slice::from_ref(&e)),
            encode_log(2, &[e.clone(), e.clone()]),
        ];
        let mut calls = 0;
        let r = read_log(|len, off| {
            calls += 1;
            // The first full read sees a newer generation than its header did.
            let l = if calls == 1 { &logs[0] } else { &logs[1] };
            Ok(l[off as usize..(off as usize + len as usize).min(l.len())].to_vec())
        })
        .unwrap();
        assert_eq!(r.0, 2);
        assert_eq!(r.1.len(), 2);
        assert_eq!(r.1[0].subnqn, "nqn.x");
        assert!(calls >= 4);
    }

    #[test]
    fn hostile_numrec_is_refused() {
        let mut l = encode_log(1, &[]);
        l[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_log(|_, _| Ok(l.clone())).is_err());
        assert!(read_log(|_, _| Ok(vec![0; 10])).is_err());
    }
}
