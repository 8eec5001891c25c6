//! RDMA CM private data of the NVMe/RDMA binding (RDMA Transport Spec 1.0
//! §3.2 "RDMA Connection Management"): the host's Request, the controller's
//! Accept (CRQSIZE) and Reject (STS). All little endian, RECFMT 0.

/// Length of the Request and Accept private data (the Reject's is 4).
pub const CM_REQ_LEN: usize = 32;
pub const CM_REP_LEN: usize = 32;
pub const CM_REJ_LEN: usize = 4;
/// The only record format defined (RECFMT 0).
pub const RECFMT_1_0: u16 = 0;

/// Reject status codes (RDMA §3.2, "RDMA_CM_REJECT Private Data" STS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum RejectStatus {
    InvalidLength = 0x01,
    InvalidRecfmt = 0x02,
    InvalidQid = 0x03,
    InvalidHsqsize = 0x04,
    InvalidHrqsize = 0x05,
    NoResources = 0x06,
    InvalidIrd = 0x07,
    InvalidOrd = 0x08,
}

/// The host's RDMA_CM_REQUEST private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRequest {
    pub recfmt: u16,
    /// Queue ID: 0 for the admin queue.
    pub qid: u16,
    /// Host Receive Queue Size: responses the host can take (1's based).
    pub hrqsize: u16,
    /// Host Send Queue Size: the NVMe SQSIZE (0's based, as in Connect).
    pub hsqsize: u16,
    /// CNTLID (bytes 09:08, added after 1.0; reserved before, so informative).
    pub cntlid: u16,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl CmRequest {
    /// Decodes `b` (the CM's private data, which may be padded past 32
    /// bytes by the CM). Shorter than 32 bytes: INVALID_LEN; RECFMT not 0:
    /// INVALID_RECFMT.
    pub fn decode(b: &[u8]) -> Result<CmRequest, RejectStatus> {
        if b.len() < CM_REQ_LEN {
            return Err(RejectStatus::InvalidLength);
        }
        let r = CmRequest {
            recfmt: le16(b, 0),
            qid: le16(b, 2),
            hrqsize: le16(b, 4),
            hsqsize: le16(b, 6),
            cntlid: le16(b, 8),
        };
        if r.recfmt != RECFMT_1_0 {
            return Err(RejectStatus::InvalidRecfmt);
        }
        Ok(r)
    }

    pub fn encode(&self) -> [u8; CM_REQ_LEN] {
        let mut b = [0u8; CM_REQ_LEN];
        for (i, v) in [
            self.recfmt,
            self.qid,
            self.hrqsize,
            self.hsqsize,
            self.cntlid,
        ]
        .into_iter()
        .enumerate()
        {
            b[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// What the target allows; see [`Limits::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Highest I/O queue ID accepted (the target's queue count).
    pub max_qid: u16,
    /// Largest I/O queue, in entries (MQES + 1).
    pub max_io_entries: u32,
    /// Largest admin queue, in entries (Fabrics: at most 4096; 32 here as
    /// in Linux's nvmet).
    pub max_admin_entries: u32,
    /// In-capsule data bytes each I/O queue receive buffer holds (the
    /// IOCCSZ advertised is `(64 + this) / 16`).
    pub icd_bytes: u32,
}

/// The queue's geometry once a Request is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub qid: u16,
    /// Receive buffers the target posts (one per SQ entry): CRQSIZE.
    pub recv_entries: u32,
    /// Bytes of each receive buffer: 64 (the SQE) plus in-capsule data on
    /// I/O queues; the admin queue takes none.
    pub recv_bytes: u32,
    /// Responses in flight at most (the host's receive queue).
    pub send_entries: u32,
}

impl Limits {
    /// Validates a Request against the target's limits (RDMA §3.2: the
    /// controller rejects with the STS naming the field).
    pub fn check(&self, r: &CmRequest) -> Result<Geometry, RejectStatus> {
        if r.qid > self.max_qid {
            return Err(RejectStatus::InvalidQid);
        }
        let max = if r.qid == 0 {
            self.max_admin_entries
        } else {
            self.max_io_entries
        };
        // HSQSIZE is 0's based; an SQ needs at least 2 entries (Base §4.1.3).
        let entries = r.hsqsize as u32 + 1;
        if r.hsqsize == 0 || entries > max {
            return Err(RejectStatus::InvalidHsqsize);
        }
        // The host must be able to take a response for every command.
        if (r.hrqsize as u32) < entries {
            return Err(RejectStatus::InvalidHrqsize);
        }
        let icd = if r.qid == 0 { 0 } else { self.icd_bytes };
        Ok(Geometry {
            qid: r.qid,
            recv_entries: entries,
            recv_bytes: 64 + icd,
            send_entries: entries,
        })
    }
}

/// The controller's RDMA_CM_ACCEPT private data: RECFMT and CRQSIZE.
pub fn encode_accept(g: &Geometry) -> [u8; CM_REP_LEN] {
    let mut b = [0u8; CM_REP_LEN];
    b[0..2].copy_from_slice(&RECFMT_1_0.to_le_bytes());
    // recv_entries <= max entries, which fit the 16-bit HSQSIZE + 1 ... but
    // 65536 entries would not fit CRQSIZE: clamp (never reached with MQES).
    let crq = g.recv_entries.min(u16::MAX as u32) as u16;
    b[2..4].copy_from_slice(&crq.to_le_bytes());
    b
}

/// The controller's RDMA_CM_REJECT private data: RECFMT and STS.
pub fn encode_reject(sts: RejectStatus) -> [u8; CM_REJ_LEN] {
    let mut b = [0u8; CM_REJ_LEN];
    b[0..2].copy_from_slice(&RECFMT_1_0.to_le_bytes());
    b[2..4].copy_from_slice(&(sts as u16).to_le_bytes());
    b
}

impl RejectStatus {
    /// The status of an STS value, if defined (RDMA §3.2).
    pub fn from_code(sts: u16) -> Option<RejectStatus> {
        use RejectStatus::*;
        Some(match sts {
            0x01 => InvalidLength,
            0x02 => InvalidRecfmt,
            0x03 => InvalidQid,
            0x04 => InvalidHsqsize,
            0x05 => InvalidHrqsize,
            0x06 => NoResources,
            0x07 => InvalidIrd,
            0x08 => InvalidOrd,
            _ => return None,
        })
    }

    /// The spec's meaning of the status, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            RejectStatus::InvalidLength => "invalid private data length",
            RejectStatus::InvalidRecfmt => "invalid RECFMT",
            RejectStatus::InvalidQid => "invalid QID",
            RejectStatus::InvalidHsqsize => "invalid HSQSIZE",
            RejectStatus::InvalidHrqsize => "invalid HRQSIZE",
            RejectStatus::NoResources => "no resources",
            RejectStatus::InvalidIrd => "invalid IRD",
            RejectStatus::InvalidOrd => "invalid ORD",
        }
    }
}

/// Decodes a Reject's private data (the host side): its STS, or `None`
/// when it is shorter than 4 bytes or its RECFMT is not 0 (a reject by
/// the CM itself, e.g. no listener, carries no NVMe private data).
pub fn decode_reject(b: &[u8]) -> Option<u16> {
    if b.len() < CM_REJ_LEN || le16(b, 0) != RECFMT_1_0 {
        return None;
    }
    Some(le16(b, 2))
}

/// Decodes an Accept (the host side): CRQSIZE.
pub fn decode_accept(b: &[u8]) -> Result<u16, RejectStatus> {
    if b.len() < 4 {
        return Err(RejectStatus::InvalidLength);
    }
    if le16(b, 0) != RECFMT_1_0 {
        return Err(RejectStatus::InvalidRecfmt);
    }
    Ok(le16(b, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        max_qid: 4,
        max_io_entries: 128,
        max_admin_entries: 32,
        icd_bytes: 8192,
    };

    fn req(qid: u16, hrqsize: u16, hsqsize: u16) -> CmRequest {
        CmRequest {
            recfmt: 0,
            qid,
            hrqsize,
            hsqsize,
            cntlid: 0xffff,
        }
    }

    #[test]
    fn linux_io_queue_request_is_accepted() {
        // What Linux's nvme-rdma sends for an I/O queue of 128 entries:
        // hrqsize = queue size, hsqsize = sqsize (0's based).
        let b = req(1, 128, 127).encode();
        let r = CmRequest::decode(&b).unwrap();
        assert_eq!(r, req(1, 128, 127));
        let g = LIM.check(&r).unwrap();
        assert_eq!(
            g,
            Geometry {
                qid: 1,
                recv_entries: 128,
                recv_bytes: 64 + 8192,
                send_entries: 128
            }
        );
        let acc = encode_accept(&g);
        assert_eq!(decode_accept(&acc), Ok(128));
        assert_eq!(&acc[4..], &[0u8; 28]);
    }

    #[test]
    fn admin_queue_has_no_in_capsule_data() {
        let g = LIM.check(&req(0, 32, 31)).unwrap();
        assert_eq!(g.recv_bytes, 64);
        assert_eq!(
            LIM.check(&req(0, 33, 32)),
            Err(RejectStatus::InvalidHsqsize)
        );
    }

    #[test]
    fn short_or_foreign_private_data_is_rejected() {
        let b = req(1, 8, 7).encode();
        for n in 0..CM_REQ_LEN {
            assert_eq!(CmRequest::decode(&b[..n]), Err(RejectStatus::InvalidLength));
        }
        // Padded by the CM past 32 bytes: fine.
        let mut long = [0u8; 56];
        long[..32].copy_from_slice(&b);
        assert!(CmRequest::decode(&long).is_ok());
        let mut bad = b;
        bad[0] = 1;
        assert_eq!(CmRequest::decode(&bad), Err(RejectStatus::InvalidRecfmt));
    }

    #[test]
    fn wrong_qid_or_sizes_name_the_field() {
        assert_eq!(LIM.check(&req(5, 8, 7)), Err(RejectStatus::InvalidQid));
        assert_eq!(LIM.check(&req(1, 8, 0)), Err(RejectStatus::InvalidHsqsize));
        assert_eq!(
            LIM.check(&req(1, 200, 128)),
            Err(RejectStatus::InvalidHsqsize)
        );
        assert_eq!(LIM.check(&req(1, 7, 7)), Err(RejectStatus::InvalidHrqsize));
        assert_eq!(LIM.check(&req(1, 0, 7)), Err(RejectStatus::InvalidHrqsize));
        assert!(LIM.check(&req(4, 8, 7)).is_ok());
    }

    #[test]
    fn reject_carries_recfmt_and_sts() {
        assert_eq!(encode_reject(RejectStatus::InvalidQid), [0, 0, 3, 0]);
        assert_eq!(encode_reject(RejectStatus::NoResources), [0, 0, 6, 0]);
    }

    #[test]
    fn host_side_decodes_reject_and_accept() {
        for sts in [
            RejectStatus::InvalidLength,
            RejectStatus::InvalidRecfmt,
            RejectStatus::InvalidQid,
            RejectStatus::InvalidHsqsize,
            RejectStatus::InvalidHrqsize,
            RejectStatus::NoResources,
            RejectStatus::InvalidIrd,
            RejectStatus::InvalidOrd,
        ] {
            let code = decode_reject(&encode_reject(sts)).unwrap();
            assert_eq!(code, sts as u16);
            assert_eq!(RejectStatus::from_code(code), Some(sts));
            assert!(!sts.describe().is_empty());
        }
        assert_eq!(RejectStatus::from_code(0), None);
        assert_eq!(RejectStatus::from_code(9), None);
        // Too short, or another RECFMT: not NVMe private data.
        assert_eq!(decode_reject(&[0, 0, 3]), None);
        assert_eq!(decode_reject(&[1, 0, 3, 0]), None);
        // The CM pads private data: extra bytes are ignored.
        assert_eq!(decode_reject(&[0, 0, 3, 0, 0xAA, 0xBB]), Some(3));
        let g = Geometry {
            qid: 1,
            recv_entries: 128,
            recv_bytes: 64 + 8192,
            send_entries: 128,
        };
        assert_eq!(decode_accept(&encode_accept(&g)), Ok(128));
        assert_eq!(decode_accept(&[0, 0]), Err(RejectStatus::InvalidLength));
        assert_eq!(
            decode_accept(&[2, 0, 1, 0]),
            Err(RejectStatus::InvalidRecfmt)
        );
    }
}
