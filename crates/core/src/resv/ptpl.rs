//! Persist Through Power Loss (Base 2.0 §7.3: CPTPL): a namespace's
//! reservations kept in a file (`ptpl_file` in its configuration) that a
//! restarted target loads. The format is small and versioned:
//!
//! ```text
//! magic "FFPTPL" | version u16 (1) | payload length u32 | CRC32C of the payload u32 | payload
//! payload: PTPL u8 | RTYPE u8 (0: none) | holder present u8 | 0 u8 | GEN u32 |
//!          holder HOSTID [16] | count u32 | count × (HOSTID [16], RKEY u64, CNTLID u16)
//! ```
//!
//! All integers little-endian. A missing file is a clean state (no
//! reservation); a file that is cut short, has another magic or version,
//! or fails its checksum is an error naming the file, and the target does
//! not start (silently dropping reservations would undo a host's fencing).
//! The file itself is the control plane's ([`PtplFile`], implemented in
//! `farflash-control`: a temporary file, fsync, rename, fsync of the
//! directory); writes run on the offload thread (`queue/offload.rs`),
//! never on an event loop. This module only encodes, decodes and orders.

use super::{Registrant, Reservations};
use farflash_wire::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use farflash_wire::resv::ResvType;
use std::path::Path;
use std::sync::{Arc, Mutex};

const MAGIC: &[u8; 6] = b"FFPTPL";
const VERSION: u16 = 1;
const HDR: usize = 16;
const ENTRY: usize = 26;
/// More registrants than this is not a file we wrote.
const MAX_ENTRIES: usize = 65_536;

/// The file's bytes for `r`.
pub fn encode(r: &Reservations) -> Vec<u8> {
    let n = r.registrants.len();
    let mut p = vec![0u8; 28 + n * ENTRY];
    p[0] = r.ptpl as u8;
    p[1] = r.rtype.map_or(0, |t| t as u8);
    p[2] = r.holder.is_some() as u8;
    put_u32(&mut p, 4, r.gen);
    p[8..24].copy_from_slice(&r.holder.unwrap_or([0; 16]));
    put_u32(&mut p, 24, n as u32);
    for (i, e) in r.registrants.iter().enumerate() {
        let o = 28 + i * ENTRY;
        p[o..o + 16].copy_from_slice(&e.hostid);
        put_u64(&mut p, o + 16, e.key);
        put_u16(&mut p, o + 24, e.cntlid);
    }
    let mut out = vec![0u8; HDR];
    out[..6].copy_from_slice(MAGIC);
    put_u16(&mut out, 6, VERSION);
    put_u32(&mut out, 8, p.len() as u32);
    put_u32(&mut out, 12, farflash_wire::digest::crc32c(&p));
    out.extend_from_slice(&p);
    out
}

/// Parses a file's bytes; the error says what is wrong.
pub fn decode(b: &[u8]) -> Result<Reservations, String> {
    if b.len() < HDR || &b[..6] != MAGIC {
        return Err("not a farflash PTPL file (bad magic or too short)".into());
    }
    let v = u16_at(b, 6);
    if v != VERSION {
        return Err(format!("version {v} is not supported (1 is)"));
    }
    let len = u32_at(b, 8) as usize;
    let p = &b[HDR..];
    if p.len() != len || len < 28 {
        return Err(format!(
            "payload is {} bytes, the header says {len}",
            p.len()
        ));
    }
    if farflash_wire::digest::crc32c(p) != u32_at(b, 12) {
        return Err("checksum mismatch (the file is corrupt)".into());
    }
    let n = u32_at(p, 24) as usize;
    if n > MAX_ENTRIES || len != 28 + n * ENTRY {
        return Err(format!("{n} registrants do not fit the payload"));
    }
    let rtype = match p[1] {
        0 => None,
        t => Some(ResvType::from_u8(t).ok_or_else(|| format!("reservation type {t} is invalid"))?),
    };
    let mut holder = [0u8; 16];
    holder.copy_from_slice(&p[8..24]);
    let registrants = (0..n)
        .map(|i| {
            let o = 28 + i * ENTRY;
            let mut hostid = [0u8; 16];
            hostid.copy_from_slice(&p[o..o + 16]);
            Registrant {
                hostid,
                key: u64_at(p, o + 16),
                cntlid: u16_at(p, o + 24),
            }
        })
        .collect();
    let r = Reservations {
        registrants,
        holder: (p[2] != 0).then_some(holder),
        rtype,
        gen: u32_at(p, 4),
        ptpl: p[0] != 0,
    };
    if r.rtype.is_some() && r.holder.is_none_or(|h| !r.is_registered(&h)) {
        return Err("the reservation holder is not a registrant".into());
    }
    Ok(r)
}

/// Where a namespace's PTPL state lives. The command layer does no I/O:
/// the control plane implements this over a file (`farflash-control`).
pub trait PtplFile: Send + Sync + std::fmt::Debug {
    /// The file's path, for messages.
    fn path(&self) -> &Path;
    /// The stored bytes; None when there is no file yet.
    fn read(&self) -> std::io::Result<Option<Vec<u8>>>;
    /// Replaces the stored bytes durably.
    fn write(&self, data: &[u8]) -> std::io::Result<()>;
}

/// The state a namespace starts with: the file's when it exists and has
/// PTPL set, otherwise none. Errors name the file.
pub fn load(file: &dyn PtplFile) -> Result<Reservations, String> {
    let path = file.path().display();
    match file.read() {
        Ok(Some(b)) => {
            let r = decode(&b).map_err(|e| format!("PTPL file {path}: {e}"))?;
            Ok(if r.ptpl { r } else { Reservations::default() })
        }
        Ok(None) => Ok(Reservations::default()),
        Err(e) => Err(format!("PTPL file {path}: {e}")),
    }
}

/// One write of a PTPL file, run off the event loop. Writes of one file
/// carry increasing sequence numbers; an older one that arrives late is
/// dropped, so the file always ends with the newest state.
#[derive(Debug)]
pub struct PtplWrite {
    pub file: Arc<dyn PtplFile>,
    pub seq: u64,
    pub data: Vec<u8>,
    pub written: Arc<Mutex<u64>>,
}

impl PtplWrite {
    pub fn run(self) -> std::io::Result<()> {
        let mut last = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if self.seq <= *last {
            return Ok(());
        }
        self.file.write(&self.data)?;
        *last = self.seq;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_wire::resv::*;

    fn sample() -> Reservations {
        let mut r = Reservations {
            ptpl: true,
            ..Reservations::default()
        };
        r.register([1; 16], 5, RREGA_REGISTER, false, 0, 0x11)
            .unwrap();
        r.register([2; 16], 1005, RREGA_REGISTER, false, 0, 0x22)
            .unwrap();
        r.acquire([1; 16], RACQA_ACQUIRE, false, 5, 0x11, 0)
            .unwrap();
        r
    }

    #[test]
    fn round_trip_and_corruption() {
        let r = sample();
        let b = encode(&r);
        assert_eq!(&b[..6], b"FFPTPL");
        assert_eq!(b.len(), 16 + 28 + 2 * 26);
        assert_eq!(decode(&b), Ok(r));
        for i in [0, 6, 9, 13, 16, 17, 30, b.len() - 1] {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(decode(&c).is_err(), "byte {i} flipped");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
        assert!(decode(&[]).is_err());
        // A consistent checksum over a bad holder is still refused.
        let mut bad = sample();
        bad.holder = Some([9; 16]);
        assert!(decode(&encode(&bad)).unwrap_err().contains("holder"));
    }

    /// A PTPL file in memory.
    #[derive(Debug, Default)]
    struct Mem(Mutex<Option<Vec<u8>>>);

    impl PtplFile for Mem {
        fn path(&self) -> &Path {
            Path::new("ns1.ptpl")
        }
        fn read(&self) -> std::io::Result<Option<Vec<u8>>> {
            Ok(self.0.lock().unwrap().clone())
        }
        fn write(&self, data: &[u8]) -> std::io::Result<()> {
            *self.0.lock().unwrap() = Some(data.to_vec());
            Ok(())
        }
    }

    #[test]
    fn missing_corrupt_and_ordered_writes() {
        let f = Arc::new(Mem::default());
        assert_eq!(
            load(&*f),
            Ok(Reservations::default()),
            "missing: clean state"
        );
        let written = Arc::new(Mutex::new(0));
        let w = |seq, r: &Reservations| PtplWrite {
            file: f.clone(),
            seq,
            data: encode(r),
            written: written.clone(),
        };
        let r = sample();
        w(2, &r).run().unwrap();
        w(1, &Reservations::default()).run().unwrap(); // older: dropped
        assert_eq!(load(&*f), Ok(r.clone()));
        // PTPL cleared: the file says so and a restart starts clean.
        let off = Reservations { ptpl: false, ..r };
        w(3, &off).run().unwrap();
        assert_eq!(load(&*f), Ok(Reservations::default()));
        *f.0.lock().unwrap() = Some(b"FFPTPL garbage".to_vec());
        let e = load(&*f).unwrap_err();
        assert!(e.contains("ns1.ptpl"), "{e}");
    }
}
