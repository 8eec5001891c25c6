//! Where a command's data is over RDMA (RDMA Transport Spec 1.0 §3.3 "Data
//! Transfer"; Base §4.3.2 "SGL"): in the capsule (Data Block, subtype
//! Offset) or in host memory named by a Keyed SGL Data Block (address,
//! 24-bit length, 32-bit key), moved by RDMA READ (host writes) or RDMA
//! WRITE (host reads). Sans-I/O: the checks only, answered with the status
//! the spec prescribes.

use farflash_core::Xfer;
use farflash_wire::sqe::SGL_DESC_SIZE;
use farflash_wire::status::Status;

pub use farflash_wire::keyed_sgl::{
    KeyedSgl, IN_CAPSULE, KEYED_ADDRESS, KEYED_INVALIDATE, KEYED_MAX_LEN,
};

/// Host memory to read from or write to with one RDMA operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    pub addr: u64,
    /// Bytes to move: the command's transfer length.
    pub len: u32,
    pub key: u32,
}

/// Where the data of one command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// No data.
    None,
    /// Host to controller, already here: `icd[offset..offset + len]`.
    InCapsule { offset: u32, len: u32 },
    /// Host to controller: RDMA READ it from the host first.
    Read(Remote),
    /// Controller to host: RDMA WRITE it before the response.
    Write(Remote),
}

/// The checked placement and the key to invalidate with the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub data: Placement,
    /// Send the response with SEND_WITH_INVALIDATE of this key.
    pub invalidate: Option<u32>,
}

/// Checks DPTR (`desc`) of a command whose transfer the command layer
/// classified as `xfer`, in a capsule that brought `icd_len` bytes after the
/// SQE. Errors are the command's status (DNR set).
pub fn plan(xfer: Xfer, desc: &[u8; SGL_DESC_SIZE], icd_len: usize) -> Result<Plan, Status> {
    let ty = desc[15];
    let keyed = ty == KEYED_ADDRESS || ty == KEYED_INVALIDATE;
    let none = Plan {
        data: Placement::None,
        invalidate: None,
    };
    match xfer {
        Xfer::None => {
            // Hosts fill DPTR of data-less commands variously; only data
            // nobody will read is an error.
            if icd_len != 0 {
                return Err(Status::INVALID_FIELD.dnr());
            }
            Ok(none)
        }
        Xfer::H2C(len) if ty == IN_CAPSULE => {
            let d = farflash_wire::sqe::SglDescriptor::decode(desc);
            // Base §4.3.2, SGLS bit 18: an SGL longer than the data is
            // supported (the rest is not moved). Was: exactly the data.
            if d.length < len {
                return Err(Status::SGL_INVALID_DATA_LENGTH.dnr());
            }
            // The offset is from the start of the in-capsule data (ICDOFF 0).
            match d.addr.checked_add(len as u64) {
                Some(end) if end <= icd_len as u64 => Ok(Plan {
                    data: Placement::InCapsule {
                        offset: d.addr as u32,
                        len,
                    },
                    invalidate: None,
                }),
                _ => Err(Status::SGL_INVALID_OFFSET.dnr()),
            }
        }
        Xfer::H2C(_) | Xfer::C2H(_) if !keyed => Err(Status::SGL_INVALID_TYPE.dnr()),
        Xfer::H2C(len) | Xfer::C2H(len) => {
            if icd_len != 0 {
                // In-capsule bytes that the descriptor does not name.
                return Err(Status::SGL_INVALID_TYPE.dnr());
            }
            let k = KeyedSgl::decode(desc);
            let write = matches!(xfer, Xfer::C2H(_));
            // The data fits in the SGL (Base §4.3.2: a shorter SGL is "Data
            // SGL Length Invalid"); a longer one is supported (SGLS bit 18),
            // and only the data moves. Was: host writes exactly the SGL.
            if k.length < len {
                return Err(Status::SGL_INVALID_DATA_LENGTH.dnr());
            }
            if k.addr.checked_add(len as u64).is_none() {
                return Err(Status::SGL_INVALID_OFFSET.dnr());
            }
            let r = Remote {
                addr: k.addr,
                len,
                key: k.key,
            };
            Ok(Plan {
                data: if len == 0 {
                    Placement::None
                } else if write {
                    Placement::Write(r)
                } else {
                    Placement::Read(r)
                },
                invalidate: k.invalidate.then_some(k.key),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(addr: u64, length: u32, key: u32, invalidate: bool) -> [u8; 16] {
        KeyedSgl {
            addr,
            length,
            key,
            invalidate,
        }
        .encode()
    }

    fn in_capsule(offset: u64, length: u32) -> [u8; 16] {
        let mut d = [0u8; 16];
        farflash_wire::sqe::SglDescriptor {
            addr: offset,
            length,
            sgl_type: IN_CAPSULE,
        }
        .encode(&mut d);
        d
    }

    #[test]
    fn keyed_descriptor_layout() {
        // Linux's nvme-rdma: addr, put_unaligned_le24(length), key, type 0x4F.
        let d = keyed(0x1122_3344_5566_7788, 0x0A_BB_CC, 0xDEAD_BEEF, true);
        assert_eq!(
            d,
            [
                0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xCC, 0xBB, 0x0A, 0xEF, 0xBE, 0xAD,
                0xDE, 0x4F
            ]
        );
        let k = KeyedSgl::decode(&d);
        assert_eq!(
            (k.length, k.key, k.invalidate),
            (0x0A_BBCC, 0xDEAD_BEEF, true)
        );
        assert_eq!(
            KeyedSgl::decode(&keyed(0, KEYED_MAX_LEN, 1, false)).length,
            KEYED_MAX_LEN
        );
    }

    #[test]
    fn host_write_by_rdma_read_and_invalidate() {
        let p = plan(Xfer::H2C(4096), &keyed(0x1000, 4096, 7, true), 0).unwrap();
        assert_eq!(
            p,
            Plan {
                data: Placement::Read(Remote {
                    addr: 0x1000,
                    len: 4096,
                    key: 7
                }),
                invalidate: Some(7)
            }
        );
        // A shorter SGL than the write: Data SGL Length Invalid; a longer
        // one (SGLS bit 18) moves only the write's data.
        let e = plan(Xfer::H2C(4096), &keyed(0x1000, 4095, 7, false), 0).unwrap_err();
        assert_eq!(e, Status::SGL_INVALID_DATA_LENGTH.dnr());
        let p = plan(Xfer::H2C(4096), &keyed(0x1000, 8192, 7, false), 0).unwrap();
        assert_eq!(
            p.data,
            Placement::Read(Remote {
                addr: 0x1000,
                len: 4096,
                key: 7
            })
        );
    }

    #[test]
    fn host_read_by_rdma_write() {
        let p = plan(Xfer::C2H(512), &keyed(0x2000, 4096, 9, false), 0).unwrap();
        assert_eq!(
            p.data,
            Placement::Write(Remote {
                addr: 0x2000,
                len: 512,
                key: 9
            })
        );
        assert_eq!(p.invalidate, None);
        assert_eq!(
            plan(Xfer::C2H(4096), &keyed(0x2000, 512, 9, false), 0),
            Err(Status::SGL_INVALID_DATA_LENGTH.dnr())
        );
        // Reads never come in the capsule.
        assert_eq!(
            plan(Xfer::C2H(512), &in_capsule(0, 512), 0),
            Err(Status::SGL_INVALID_TYPE.dnr())
        );
        // An address that wraps.
        assert_eq!(
            plan(Xfer::C2H(512), &keyed(u64::MAX - 10, 512, 9, false), 0),
            Err(Status::SGL_INVALID_OFFSET.dnr())
        );
    }

    #[test]
    fn in_capsule_offsets_are_bounded_by_what_arrived() {
        let p = plan(Xfer::H2C(512), &in_capsule(0, 512), 512).unwrap();
        assert_eq!(
            p.data,
            Placement::InCapsule {
                offset: 0,
                len: 512
            }
        );
        let p = plan(Xfer::H2C(512), &in_capsule(16, 512), 528).unwrap();
        assert_eq!(
            p.data,
            Placement::InCapsule {
                offset: 16,
                len: 512
            }
        );
        for (off, icd) in [(0, 511), (1, 512), (u64::MAX, 4096)] {
            assert_eq!(
                plan(Xfer::H2C(512), &in_capsule(off, 512), icd),
                Err(Status::SGL_INVALID_OFFSET.dnr()),
                "offset {off} icd {icd}"
            );
        }
        // Longer than the data (SGLS bit 18): the data is at the offset.
        assert_eq!(
            plan(Xfer::H2C(512), &in_capsule(0, 1024), 1024).map(|p| p.data),
            Ok(Placement::InCapsule {
                offset: 0,
                len: 512
            })
        );
        assert_eq!(
            plan(Xfer::H2C(512), &in_capsule(0, 511), 1024),
            Err(Status::SGL_INVALID_DATA_LENGTH.dnr())
        );
    }

    #[test]
    fn other_descriptors_and_stray_data() {
        let mut d = keyed(0, 512, 1, false);
        for ty in [0x00, 0x5A, 0x41, 0x20, 0xFF] {
            d[15] = ty;
            assert_eq!(
                plan(Xfer::H2C(512), &d, 0),
                Err(Status::SGL_INVALID_TYPE.dnr()),
                "type {ty:#x}"
            );
        }
        assert_eq!(
            plan(Xfer::H2C(512), &keyed(0, 512, 1, false), 64),
            Err(Status::SGL_INVALID_TYPE.dnr())
        );
        assert_eq!(
            plan(Xfer::None, &[0u8; 16], 8),
            Err(Status::INVALID_FIELD.dnr())
        );
        assert_eq!(
            plan(Xfer::None, &[0xAB; 16], 0).unwrap().data,
            Placement::None
        );
    }
}
