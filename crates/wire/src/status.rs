//! Completion status (Base §4.6.1 "Status Field"): Status Code (SC, bits 7:0),
//! Status Code Type (SCT, bits 10:8), CRD, More (M) and Do Not Retry (DNR),
//! as they sit in CQE DW3 bits 31:17 (the phase tag bit 16 is not included).

/// A 15-bit NVMe status: `SC | SCT << 8 | CRD << 11 | M << 13 | DNR << 14`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(pub u16);

/// Status Code Types (Base §4.6.1.1).
pub mod sct {
    pub const GENERIC: u8 = 0;
    pub const COMMAND_SPECIFIC: u8 = 1;
    pub const MEDIA: u8 = 2;
    pub const PATH: u8 = 3;
}

impl Status {
    pub const SUCCESS: Status = Status(0);

    pub const fn new(sct: u8, sc: u8) -> Status {
        Status(((sct as u16 & 7) << 8) | sc as u16)
    }
    /// The same status with Do Not Retry set: the spec-mandated errors that
    /// retrying cannot fix (invalid field, out of range, ...).
    pub const fn dnr(self) -> Status {
        Status(self.0 | 1 << 14)
    }
    pub const fn sc(self) -> u8 {
        self.0 as u8
    }
    pub const fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }
    pub const fn is_dnr(self) -> bool {
        self.0 & (1 << 14) != 0
    }
    pub const fn is_success(self) -> bool {
        self.0 & 0x7ff == 0
    }
    /// Status without the CRD/M/DNR bits, for comparisons.
    pub const fn code(self) -> Status {
        Status(self.0 & 0x7ff)
    }
    /// The value of CQE DW3 bits 31:16 with phase tag `p`.
    pub const fn to_cqe_field(self, phase: bool) -> u16 {
        (self.0 << 1) | phase as u16
    }
    pub const fn from_cqe_field(v: u16) -> Status {
        Status(v >> 1)
    }

    // Generic Command Status (Base §4.6.1.2.1).
    pub const INVALID_OPCODE: Status = Status::new(sct::GENERIC, 0x01);
    pub const INVALID_FIELD: Status = Status::new(sct::GENERIC, 0x02);
    pub const CID_CONFLICT: Status = Status::new(sct::GENERIC, 0x03);
    pub const DATA_TRANSFER_ERROR: Status = Status::new(sct::GENERIC, 0x04);
    pub const INTERNAL_ERROR: Status = Status::new(sct::GENERIC, 0x06);
    pub const ABORT_REQUESTED: Status = Status::new(sct::GENERIC, 0x07);
    pub const ABORTED_SQ_DELETION: Status = Status::new(sct::GENERIC, 0x08);
    pub const INVALID_NAMESPACE: Status = Status::new(sct::GENERIC, 0x0B);
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::new(sct::GENERIC, 0x0C);
    pub const SGL_INVALID_DATA_LENGTH: Status = Status::new(sct::GENERIC, 0x0F);
    pub const SGL_INVALID_TYPE: Status = Status::new(sct::GENERIC, 0x11);
    pub const SGL_INVALID_OFFSET: Status = Status::new(sct::GENERIC, 0x16);
    pub const KEEP_ALIVE_INVALID: Status = Status::new(sct::GENERIC, 0x19);
    pub const LBA_OUT_OF_RANGE: Status = Status::new(sct::GENERIC, 0x80);
    pub const CAPACITY_EXCEEDED: Status = Status::new(sct::GENERIC, 0x81);
    pub const NAMESPACE_NOT_READY: Status = Status::new(sct::GENERIC, 0x82);

    // Command Specific Status (Base §4.6.1.2.2; for Fabrics commands from 80h, Base 2.2 Figure
    // "Status Code – Command Specific Status Values, Fabrics Commands").
    pub const INVALID_QUEUE_IDENTIFIER: Status = Status::new(sct::COMMAND_SPECIFIC, 0x01);
    pub const INVALID_QUEUE_SIZE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x02);
    /// Disconnect on the Admin Queue (Base §6.4): 85h Invalid Queue Type.
    pub const INVALID_QUEUE_TYPE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x85);
    pub const ABORT_LIMIT_EXCEEDED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x03);
    pub const AER_LIMIT_EXCEEDED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x05);
    pub const INVALID_LOG_PAGE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x09);
    pub const FEATURE_NOT_SAVEABLE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x0D);
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x0E);
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::new(sct::COMMAND_SPECIFIC, 0x80);
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::new(sct::COMMAND_SPECIFIC, 0x81);
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::new(sct::COMMAND_SPECIFIC, 0x82);
    pub const CONNECT_RESTART_DISCOVERY: Status = Status::new(sct::COMMAND_SPECIFIC, 0x83);
    pub const CONNECT_INVALID_HOST: Status = Status::new(sct::COMMAND_SPECIFIC, 0x84);
    /// Authentication Required (Base 2.0 §4.6.1.2.1, TP 8006; Linux
    /// `NVME_SC_AUTH_REQUIRED`): a command other than a Fabrics one on a
    /// queue that has not authenticated.
    pub const AUTH_REQUIRED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x91);
    /// NVM command set, Dataset Management etc. (NVM Command Set §3.1 Figure "Status Code –
    /// Command Specific Status Values": 80h).
    pub const CONFLICTING_ATTRIBUTES: Status = Status::new(sct::COMMAND_SPECIFIC, 0x80);

    /// Host Identifier Inconsistent Format (Base §4.6.1.2.1, 18h): a
    /// Reservation Report without EDS where host identifiers are 128-bit.
    pub const HOST_ID_INCONSISTENT: Status = Status::new(sct::GENERIC, 0x18);
    /// Namespace is Write Protected (Base 2.0 §4.6.1.2.1 Figure "Generic
    /// Command Status Values", 20h; Linux `NVME_SC_NS_WRITE_PROTECTED`): a
    /// command that would modify a namespace the controller sees write
    /// protected (Identify Namespace NSATTR bit 0).
    pub const NS_WRITE_PROTECTED: Status = Status::new(sct::GENERIC, 0x20);
    /// Reservation Conflict (Base §4.6.1.2.1, 83h).
    pub const RESERVATION_CONFLICT: Status = Status::new(sct::GENERIC, 0x83);

    // Path Related Status (Base §4.6.1.2.4): the host retries on another path.
    pub const ANA_PERSISTENT_LOSS: Status = Status::new(sct::PATH, 0x01);
    pub const ANA_INACCESSIBLE: Status = Status::new(sct::PATH, 0x02);
    pub const ANA_TRANSITION: Status = Status::new(sct::PATH, 0x03);

    // Media and Data Integrity Errors (Base §4.6.1.2.3).
    pub const WRITE_FAULT: Status = Status::new(sct::MEDIA, 0x80);
    pub const UNRECOVERED_READ_ERROR: Status = Status::new(sct::MEDIA, 0x81);
    /// Compare Failure (Base §4.6.1.2.3, 85h): a Compare (alone or the
    /// first half of a fused Compare and Write) found different data.
    pub const COMPARE_FAILURE: Status = Status::new(sct::MEDIA, 0x85);
    /// Command Aborted due to Failed Fused Command (Base §4.6.1.2.1, 09h):
    /// the Write half of a Compare and Write whose Compare failed.
    pub const FUSED_FAILED: Status = Status::new(sct::GENERIC, 0x09);
    /// Command Aborted due to Missing Fused Command (Base §4.6.1.2.1, 0Ah):
    /// one half of a fused operation without the other next to it.
    pub const FUSED_MISSING: Status = Status::new(sct::GENERIC, 0x0A);
    /// Command Size Limit Exceeded (NVM Command Set §3.1 Figure "Status Code –
    /// Command Specific Status Values", 83h): a Copy beyond MSSRL, MCL or MSRC.
    pub const COMMAND_SIZE_LIMIT_EXCEEDED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x83);

    /// A short human-readable name, for logs and the host's error messages.
    pub fn name(self) -> &'static str {
        match (self.sct(), self.sc()) {
            (0, 0x00) => "Success",
            (0, 0x01) => "Invalid Command Opcode",
            (0, 0x02) => "Invalid Field in Command",
            (0, 0x03) => "Command ID Conflict",
            (0, 0x04) => "Data Transfer Error",
            (0, 0x06) => "Internal Error",
            (0, 0x07) => "Command Abort Requested",
            (0, 0x08) => "Command Aborted due to SQ Deletion",
            (0, 0x09) => "Command Aborted due to Failed Fused Command",
            (0, 0x0A) => "Command Aborted due to Missing Fused Command",
            (0, 0x0B) => "Invalid Namespace or Format",
            (0, 0x0C) => "Command Sequence Error",
            (0, 0x0F) => "Data SGL Length Invalid",
            (0, 0x11) => "SGL Descriptor Type Invalid",
            (0, 0x16) => "SGL Offset Invalid",
            (0, 0x19) => "Keep Alive Timeout Invalid",
            (0, 0x20) => "Namespace is Write Protected",
            (0, 0x80) => "LBA Out of Range",
            (0, 0x81) => "Capacity Exceeded",
            (0, 0x82) => "Namespace Not Ready",
            (0, 0x83) => "Reservation Conflict",
            (0, 0x18) => "Host Identifier Inconsistent Format",
            (1, 0x01) => "Invalid Queue Identifier",
            (1, 0x91) => "Authentication Required",
            (1, 0x02) => "Invalid Queue Size",
            (1, 0x03) => "Abort Command Limit Exceeded",
            (1, 0x05) => "Asynchronous Event Request Limit Exceeded",
            (1, 0x09) => "Invalid Log Page",
            (1, 0x0D) => "Feature Identifier Not Saveable",
            (1, 0x0E) => "Feature Not Changeable",
            (1, 0x80) => "Connect Incompatible Format / Conflicting Attributes",
            (1, 0x81) => "Connect Controller Busy",
            (1, 0x82) => "Connect Invalid Parameters",
            (1, 0x83) => "Connect Restart Discovery",
            (1, 0x84) => "Connect Invalid Host",
            (2, 0x80) => "Write Fault",
            (3, 0x01) => "Asymmetric Access Persistent Loss",
            (3, 0x02) => "Asymmetric Access Inaccessible",
            (3, 0x03) => "Asymmetric Access Transition",
            (2, 0x81) => "Unrecovered Read Error",
            _ => "Unknown status",
        }
    }
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (sct {:#x} sc {:#04x}{})",
            self.name(),
            self.sct(),
            self.sc(),
            if self.is_dnr() { " dnr" } else { "" }
        )
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        // Linux prints Connect Invalid Host as 0x184 (SCT 1, SC 0x84).
        assert_eq!(Status::CONNECT_INVALID_HOST.0, 0x184);
        assert_eq!(Status::LBA_OUT_OF_RANGE.dnr().0, 0x4080);
        assert!(Status::LBA_OUT_OF_RANGE.dnr().is_dnr());
        assert_eq!(Status::INVALID_FIELD.dnr().code(), Status::INVALID_FIELD);
        let f = Status::INVALID_NAMESPACE.dnr().to_cqe_field(true);
        assert_eq!(f & 1, 1);
        assert_eq!(Status::from_cqe_field(f), Status::INVALID_NAMESPACE.dnr());
        assert!(Status::SUCCESS.is_success());
        // Linux: NVME_SC_ANA_INACCESSIBLE 0x302, NVME_SC_RESERVATION_CONFLICT 0x83.
        assert_eq!(Status::ANA_INACCESSIBLE.0, 0x302);
        assert_eq!(Status::ANA_TRANSITION.0, 0x303);
        assert_eq!(Status::RESERVATION_CONFLICT.0, 0x83);
        // Linux: NVME_SC_NS_WRITE_PROTECTED 0x20.
        assert_eq!(Status::NS_WRITE_PROTECTED.0, 0x20);
        assert_eq!(
            Status::NS_WRITE_PROTECTED.name(),
            "Namespace is Write Protected"
        );
        assert_eq!(
            format!("{}", Status::INVALID_OPCODE),
            "Invalid Command Opcode (sct 0x0 sc 0x01)"
        );
    }
}
