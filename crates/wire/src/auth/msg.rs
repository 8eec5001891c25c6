//! The authentication messages (Base 2.0 §8.13.4 common, §8.13.5 DH-HMAC-CHAP).

use super::*;
use crate::le::{put_u16, put_u32, u16_at, u32_at};

/// AUTH_Negotiate with one DH-HMAC-CHAP protocol descriptor (Base §8.13.4.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiate {
    /// T_ID: transaction identifier (bytes 5:4).
    pub t_id: u16,
    /// SC_C: secure channel concatenation (byte 6).
    pub sc_c: u8,
    /// NAPD: number of protocol descriptors (byte 7); encode writes 1.
    pub napd: u8,
    /// AUTHID of the first descriptor (byte 8).
    pub authid: u8,
    /// HASH IDs of the first descriptor (HALEN of them, at most 30).
    pub hash_ids: Vec<u8>,
    /// DH group IDs of the first descriptor (DHLEN of them, at most 30).
    pub dh_ids: Vec<u8>,
}

/// DH-HMAC-CHAP_Challenge (Base §8.13.5.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub t_id: u16,
    /// HASHID (byte 10).
    pub hash_id: u8,
    /// DHGID (byte 11).
    pub dhgid: u8,
    /// SEQNUM S1 (bytes 15:12).
    pub seqnum: u32,
    /// Challenge C1: HL bytes (HL is byte 6).
    pub c1: Vec<u8>,
    /// DH value g^x mod p: DHVLEN (bytes 11:10) bytes, after C1.
    pub dhv: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply (Base §8.13.5.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub t_id: u16,
    /// CVALID (byte 8): C2 carries a challenge for the controller.
    pub cvalid: bool,
    /// SEQNUM S2 (bytes 15:12); 0 when not bidirectional.
    pub seqnum: u32,
    /// Response R1: HL bytes.
    pub response: Vec<u8>,
    /// Challenge C2: HL bytes on the wire (zeros when !cvalid).
    pub c2: Vec<u8>,
    /// DH value g^y mod p: DHVLEN bytes.
    pub dhv: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1 (Base §8.13.5.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Success1 {
    pub t_id: u16,
    /// HL (byte 6).
    pub hl: u8,
    /// Response R2 when RVALID (byte 8) is set: HL bytes.
    pub response: Option<Vec<u8>>,
}

/// DH-HMAC-CHAP_Success2 (Base §8.13.5.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Success2 {
    pub t_id: u16,
}

/// AUTH_Failure1 / AUTH_Failure2 (Base §8.13.4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub t_id: u16,
    /// REASON CODE (byte 6).
    pub reason: u8,
    /// REASON CODE EXPLANATION (byte 7).
    pub explanation: u8,
}

/// Any authentication message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Negotiate(Negotiate),
    Challenge(Challenge),
    Reply(Reply),
    Success1(Success1),
    Success2(Success2),
    Failure1(Failure),
    Failure2(Failure),
}

fn need(b: &[u8], n: usize, field: &'static str) -> Result<(), AuthWireError> {
    if b.len() < n {
        return Err(AuthWireError::Short {
            field,
            len: b.len(),
            need: n,
        });
    }
    Ok(())
}

fn header(b: &mut [u8], auth_type: u8, id: u8, t_id: u16) {
    b[0] = auth_type;
    b[1] = id;
    put_u16(b, 4, t_id);
}

impl Message {
    /// Checked decode of one message; trailing bytes are ignored.
    pub fn decode(b: &[u8]) -> Result<Message, AuthWireError> {
        need(b, 2, "AUTH-TYPE/AUTH-ID")?;
        match (b[0], b[1]) {
            (AUTH_TYPE_COMMON, auth_id::NEGOTIATE) => decode_negotiate(b).map(Message::Negotiate),
            (AUTH_TYPE_COMMON, auth_id::FAILURE1) => decode_failure(b).map(Message::Failure1),
            (AUTH_TYPE_COMMON, auth_id::FAILURE2) => decode_failure(b).map(Message::Failure2),
            (AUTH_TYPE_DHCHAP, auth_id::CHALLENGE) => decode_challenge(b).map(Message::Challenge),
            (AUTH_TYPE_DHCHAP, auth_id::REPLY) => decode_reply(b).map(Message::Reply),
            (AUTH_TYPE_DHCHAP, auth_id::SUCCESS1) => decode_success1(b).map(Message::Success1),
            (AUTH_TYPE_DHCHAP, auth_id::SUCCESS2) => {
                need(b, DHCHAP_HEADER_LEN, "Success2 header")?;
                Ok(Message::Success2(Success2 { t_id: u16_at(b, 4) }))
            }
            (auth_type, auth_id) => Err(AuthWireError::Unknown { auth_type, auth_id }),
        }
    }

    /// T_ID of any message.
    pub fn t_id(&self) -> u16 {
        match self {
            Message::Negotiate(m) => m.t_id,
            Message::Challenge(m) => m.t_id,
            Message::Reply(m) => m.t_id,
            Message::Success1(m) => m.t_id,
            Message::Success2(m) => m.t_id,
            Message::Failure1(m) | Message::Failure2(m) => m.t_id,
        }
    }

    /// The message's bytes, exactly as long as its length fields say.
    /// Lists longer than their wire fields allow are cut to fit; HL and
    /// DHVLEN come from the value lengths (callers keep them consistent).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Negotiate(m) => {
                let mut b = vec![0u8; NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN];
                header(&mut b, AUTH_TYPE_COMMON, auth_id::NEGOTIATE, m.t_id);
                b[6] = m.sc_c;
                b[7] = 1;
                let h = &m.hash_ids[..m.hash_ids.len().min(MAX_HASH_IDS)];
                let d = &m.dh_ids[..m.dh_ids.len().min(MAX_DH_IDS)];
                b[8] = m.authid;
                b[10] = h.len() as u8;
                b[11] = d.len() as u8;
                b[12..12 + h.len()].copy_from_slice(h);
                b[12 + MAX_HASH_IDS..12 + MAX_HASH_IDS + d.len()].copy_from_slice(d);
                b
            }
            Message::Challenge(m) => {
                let mut b = dhchap(auth_id::CHALLENGE, m.t_id, &[&m.c1, &m.dhv]);
                b[6] = m.c1.len() as u8;
                b[8] = m.hash_id;
                b[9] = m.dhgid;
                put_u16(&mut b, 10, m.dhv.len() as u16);
                put_u32(&mut b, 12, m.seqnum);
                b
            }
            Message::Reply(m) => {
                let hl = m.response.len();
                let mut c2 = m.c2.clone();
                c2.resize(hl, 0);
                let mut b = dhchap(auth_id::REPLY, m.t_id, &[&m.response, &c2, &m.dhv]);
                b[6] = hl as u8;
                b[8] = m.cvalid as u8;
                put_u16(&mut b, 10, m.dhv.len() as u16);
                put_u32(&mut b, 12, m.seqnum);
                b
            }
            Message::Success1(m) => {
                let r = m.response.as_deref().unwrap_or(&[]);
                let mut b = dhchap(auth_id::SUCCESS1, m.t_id, &[r]);
                b[6] = m.hl;
                b[8] = m.response.is_some() as u8;
                b
            }
            Message::Success2(m) => dhchap(auth_id::SUCCESS2, m.t_id, &[]),
            Message::Failure1(m) => failure(auth_id::FAILURE1, m),
            Message::Failure2(m) => failure(auth_id::FAILURE2, m),
        }
    }
}

fn dhchap(id: u8, t_id: u16, parts: &[&[u8]]) -> Vec<u8> {
    let mut b = vec![0u8; DHCHAP_HEADER_LEN];
    header(&mut b, AUTH_TYPE_DHCHAP, id, t_id);
    for p in parts {
        b.extend_from_slice(p);
    }
    b
}

fn failure(id: u8, m: &Failure) -> Vec<u8> {
    let mut b = vec![0u8; FAILURE_LEN];
    header(&mut b, AUTH_TYPE_COMMON, id, m.t_id);
    b[6] = m.reason;
    b[7] = m.explanation;
    b
}

fn decode_negotiate(b: &[u8]) -> Result<Negotiate, AuthWireError> {
    need(b, NEGOTIATE_HEADER_LEN, "Negotiate header")?;
    let napd = b[7];
    if napd == 0 {
        return Err(AuthWireError::Field {
            field: "NAPD",
            value: 0,
        });
    }
    need(
        b,
        NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN * napd as usize,
        "Negotiate protocol descriptors",
    )?;
    let (halen, dhlen) = (b[10] as usize, b[11] as usize);
    if halen > MAX_HASH_IDS {
        return Err(AuthWireError::Field {
            field: "HALEN",
            value: halen as u32,
        });
    }
    if dhlen > MAX_DH_IDS {
        return Err(AuthWireError::Field {
            field: "DHLEN",
            value: dhlen as u32,
        });
    }
    Ok(Negotiate {
        t_id: u16_at(b, 4),
        sc_c: b[6],
        napd,
        authid: b[8],
        hash_ids: b[12..12 + halen].to_vec(),
        dh_ids: b[12 + MAX_HASH_IDS..12 + MAX_HASH_IDS + dhlen].to_vec(),
    })
}

fn decode_challenge(b: &[u8]) -> Result<Challenge, AuthWireError> {
    need(b, DHCHAP_HEADER_LEN, "Challenge header")?;
    let hl = b[6] as usize;
    let dhvlen = u16_at(b, 10) as usize;
    need(b, DHCHAP_HEADER_LEN + hl + dhvlen, "Challenge C1/DH value")?;
    let c = DHCHAP_HEADER_LEN;
    Ok(Challenge {
        t_id: u16_at(b, 4),
        hash_id: b[8],
        dhgid: b[9],
        seqnum: u32_at(b, 12),
        c1: b[c..c + hl].to_vec(),
        dhv: b[c + hl..c + hl + dhvlen].to_vec(),
    })
}

fn decode_reply(b: &[u8]) -> Result<Reply, AuthWireError> {
    need(b, DHCHAP_HEADER_LEN, "Reply header")?;
    let hl = b[6] as usize;
    let dhvlen = u16_at(b, 10) as usize;
    need(
        b,
        DHCHAP_HEADER_LEN + 2 * hl + dhvlen,
        "Reply R1/C2/DH value",
    )?;
    let cvalid = match b[8] {
        0 => false,
        1 => true,
        v => {
            return Err(AuthWireError::Field {
                field: "CVALID",
                value: v as u32,
            })
        }
    };
    let c = DHCHAP_HEADER_LEN;
    Ok(Reply {
        t_id: u16_at(b, 4),
        cvalid,
        seqnum: u32_at(b, 12),
        response: b[c..c + hl].to_vec(),
        c2: b[c + hl..c + 2 * hl].to_vec(),
        dhv: b[c + 2 * hl..c + 2 * hl + dhvlen].to_vec(),
    })
}

fn decode_success1(b: &[u8]) -> Result<Success1, AuthWireError> {
    need(b, DHCHAP_HEADER_LEN, "Success1 header")?;
    let hl = b[6];
    let response = match b[8] {
        0 => None,
        1 => {
            need(b, DHCHAP_HEADER_LEN + hl as usize, "Success1 R2")?;
            Some(b[DHCHAP_HEADER_LEN..DHCHAP_HEADER_LEN + hl as usize].to_vec())
        }
        v => {
            return Err(AuthWireError::Field {
                field: "RVALID",
                value: v as u32,
            })
        }
    };
    Ok(Success1 {
        t_id: u16_at(b, 4),
        hl,
        response,
    })
}

fn decode_failure(b: &[u8]) -> Result<Failure, AuthWireError> {
    need(b, FAILURE_LEN, "Failure message")?;
    Ok(Failure {
        t_id: u16_at(b, 4),
        reason: b[6],
        explanation: b[7],
    })
}
