//! In-band authentication (Base 2.0 §8.13, TP 8006): the Authentication
//! Send / Receive command fields and the DH-HMAC-CHAP message formats.
//!
//! Decoders never panic: every slice is length-checked first and a bad
//! message is an [`AuthWireError`] naming the field, which maps to the
//! AUTH_Failure reason code explanation the peer must be sent
//! ([`AuthWireError::explanation`]). Messages a controller returns through
//! Authentication Receive may be zero-padded up to the host's allocation
//! length (Linux's target does so), so decoders accept trailing bytes.

mod msg;
#[cfg(test)]
mod tests;

pub use msg::{Challenge, Failure, Message, Negotiate, Reply, Success1, Success2};

use crate::opcode::{admin, fctype};
use crate::sqe::{Sqe, PSDT_SGL};

/// SECP of DH-HMAC-CHAP in Authentication Send/Receive (Fabrics §6.2.1, TP 8006).
pub const SECP_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 for DH-HMAC-CHAP (Fabrics §6.2.1).
pub const SPSP0_DHCHAP: u8 = 0x01;
pub const SPSP1_DHCHAP: u8 = 0x01;

/// Connect response DW0 AUTHREQ bits (Fabrics §6.3, TP 8006): ATR, the
/// host must authenticate (Linux `NVME_CONNECT_AUTHREQ_ATR`); ASCR, secure
/// channel concatenation is required.
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;
pub const CONNECT_AUTHREQ_ASCR: u32 = 1 << 18;
/// Authentication Required: SCT 1h (command specific), SC 91h (Base §4.2,
/// Linux `NVME_SC_AUTH_REQUIRED` = 191h), for commands on a queue that has
/// not authenticated.
pub const SCT_COMMAND_SPECIFIC: u8 = 0x1;
pub const SC_AUTH_REQUIRED: u8 = 0x91;

/// AUTH-TYPE: common messages (negotiate, failures) (Base §8.13.4).
pub const AUTH_TYPE_COMMON: u8 = 0x00;
/// AUTH-TYPE: DH-HMAC-CHAP messages (Base §8.13.5).
pub const AUTH_TYPE_DHCHAP: u8 = 0x01;

/// AUTH-ID values (Base §8.13.4.1, §8.13.5).
pub mod auth_id {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xF0;
    pub const FAILURE1: u8 = 0xF1;
}

/// AUTHID of the DH-HMAC-CHAP protocol descriptor (Base §8.13.4.2).
pub const AUTHID_DHCHAP: u8 = 0x01;
/// SC_C: no secure channel concatenation (Base §8.13.4.2).
pub const SC_C_NONE: u8 = 0x00;
/// Hash and DH group identifier slots in a protocol descriptor's IDLIST
/// (Base §8.13.4.2: hash IDs in bytes 4..34, DH group IDs in 34..64).
pub const MAX_HASH_IDS: usize = 30;
pub const MAX_DH_IDS: usize = 30;

/// Hash function identifiers (Base §8.13.5.1, Figure "HashID").
pub mod hash_id {
    pub const SHA256: u8 = 0x01;
    pub const SHA384: u8 = 0x02;
    pub const SHA512: u8 = 0x03;
}

/// Diffie-Hellman group identifiers (Base §8.13.5.1, Figure "DhGroupID").
pub mod dhgroup_id {
    pub const NULL: u8 = 0x00;
    pub const FFDHE2048: u8 = 0x01;
    pub const FFDHE3072: u8 = 0x02;
    pub const FFDHE4096: u8 = 0x03;
    pub const FFDHE6144: u8 = 0x04;
    pub const FFDHE8192: u8 = 0x05;
}

/// AUTH_Failure reason code (Base §8.13.4.3): the only one defined.
pub const REASON_FAILED: u8 = 0x01;

/// AUTH_Failure reason code explanations (Base §8.13.4.3).
pub mod explanation {
    pub const FAILED: u8 = 0x01;
    pub const PROTOCOL_UNUSABLE: u8 = 0x02;
    pub const CONCAT_MISMATCH: u8 = 0x03;
    pub const HASH_UNUSABLE: u8 = 0x04;
    pub const DHGROUP_UNUSABLE: u8 = 0x05;
    pub const INCORRECT_PAYLOAD: u8 = 0x06;
    pub const INCORRECT_PROTOCOL_MESSAGE: u8 = 0x07;
}

/// Header lengths (Base §8.13.4, §8.13.5 figures).
pub const NEGOTIATE_HEADER_LEN: usize = 8;
pub const DESCRIPTOR_LEN: usize = 64;
pub const DHCHAP_HEADER_LEN: usize = 16;
pub const FAILURE_LEN: usize = 8;
/// Largest hash output (SHA-512), the largest HL a message may carry.
pub const MAX_HASH_LEN: usize = 64;

/// A malformed authentication message, naming the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthWireError {
    /// The message is shorter than its header or its length fields say.
    #[error("authentication message too short for {field}: {len} bytes, need {need}")]
    Short {
        field: &'static str,
        len: usize,
        need: usize,
    },
    /// A field holds a value the format does not allow.
    #[error("authentication message field {field} has invalid value {value:#x}")]
    Field { field: &'static str, value: u32 },
    /// AUTH-TYPE / AUTH-ID name no message.
    #[error("unknown authentication message {auth_type:#04x}/{auth_id:#04x}")]
    Unknown { auth_type: u8, auth_id: u8 },
}

impl AuthWireError {
    /// The AUTH_Failure reason code explanation for this error (Base §8.13.4.3).
    pub fn explanation(&self) -> u8 {
        match self {
            AuthWireError::Unknown { .. } => explanation::INCORRECT_PROTOCOL_MESSAGE,
            _ => explanation::INCORRECT_PAYLOAD,
        }
    }
}

/// The security fields of Authentication Send / Receive (Fabrics §6.2.1,
/// §6.2.2): CDW10 holds SPSP0 (15:8), SPSP1 (23:16) and SECP (31:24);
/// CDW11 holds TL (Send) or AL (Receive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthCmd {
    pub secp: u8,
    pub spsp0: u8,
    pub spsp1: u8,
    /// Transfer length (Send) or allocation length (Receive), in bytes.
    pub len: u32,
}

impl AuthCmd {
    /// The fields of a DH-HMAC-CHAP command moving `len` bytes.
    pub fn dhchap(len: u32) -> AuthCmd {
        AuthCmd {
            secp: SECP_DHCHAP,
            spsp0: SPSP0_DHCHAP,
            spsp1: SPSP1_DHCHAP,
            len,
        }
    }

    pub fn from_sqe(s: &Sqe) -> AuthCmd {
        AuthCmd {
            spsp0: (s.cdw10 >> 8) as u8,
            spsp1: (s.cdw10 >> 16) as u8,
            secp: (s.cdw10 >> 24) as u8,
            len: s.cdw11,
        }
    }

    /// A Fabrics command SQE for Authentication Send (`send`) or Receive;
    /// the transport fills in DPTR.
    pub fn to_sqe(&self, cid: u16, send: bool) -> Sqe {
        Sqe {
            opcode: admin::FABRICS,
            flags: PSDT_SGL,
            cid,
            nsid: if send {
                fctype::AUTH_SEND
            } else {
                fctype::AUTH_RECEIVE
            } as u32,
            cdw10: (self.spsp0 as u32) << 8 | (self.spsp1 as u32) << 16 | (self.secp as u32) << 24,
            cdw11: self.len,
            ..Sqe::default()
        }
    }

    /// Whether SECP/SPSP0/SPSP1 select DH-HMAC-CHAP; otherwise the field in error.
    pub fn check_dhchap(&self) -> Result<(), AuthWireError> {
        let bad = |field, value: u8| {
            Err(AuthWireError::Field {
                field,
                value: value as u32,
            })
        };
        if self.secp != SECP_DHCHAP {
            return bad("SECP", self.secp);
        }
        if self.spsp0 != SPSP0_DHCHAP {
            return bad("SPSP0", self.spsp0);
        }
        if self.spsp1 != SPSP1_DHCHAP {
            return bad("SPSP1", self.spsp1);
        }
        Ok(())
    }
}
