//! A command capsule as one RDMA SEND brings it (RDMA Transport Spec 1.0
//! §3.3.1 "Capsules"): the 64-byte SQE, then in-capsule data up to the
//! receive buffer's size. A message shorter than an SQE or larger than the
//! buffer posted is a transport error: the queue is disconnected.

use farflash_wire::sqe::{Sqe, SGL_DESC_SIZE, SQE_SIZE};

/// Why a received message is not a capsule: the binding closes the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapsuleError {
    /// Fewer bytes than an SQE.
    Short(usize),
    /// More bytes than the queue's receive buffers hold (a verbs provider
    /// reports this as a local length error; checked here as well).
    TooLarge { len: usize, max: usize },
}

/// One received capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capsule<'a> {
    pub sqe: Sqe,
    /// DPTR's 16 raw bytes: a Keyed SGL is not the plain descriptor
    /// `Sqe::dptr` decodes (24-bit length, then the key).
    pub dptr: [u8; SGL_DESC_SIZE],
    /// The in-capsule data (empty on the admin queue).
    pub icd: &'a [u8],
}

/// Cuts `msg` (the bytes the receive completion reports) for a queue whose
/// receive buffers hold `recv_bytes`.
pub fn parse(msg: &[u8], recv_bytes: usize) -> Result<Capsule<'_>, CapsuleError> {
    if msg.len() > recv_bytes {
        return Err(CapsuleError::TooLarge {
            len: msg.len(),
            max: recv_bytes,
        });
    }
    let Some((head, icd)) = msg.split_first_chunk::<SQE_SIZE>() else {
        return Err(CapsuleError::Short(msg.len()));
    };
    let mut dptr = [0u8; SGL_DESC_SIZE];
    // DPTR is bytes 39:24 of the SQE (Base §4.2).
    dptr.copy_from_slice(&head[24..40]);
    Ok(Capsule {
        sqe: Sqe::decode(head),
        dptr,
        icd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqe_bytes(opcode: u8, cid: u16) -> [u8; SQE_SIZE] {
        let mut b = [0u8; SQE_SIZE];
        Sqe {
            opcode,
            cid,
            nsid: 1,
            ..Sqe::default()
        }
        .encode(&mut b);
        b
    }

    #[test]
    fn sqe_and_in_capsule_data() {
        let mut msg = sqe_bytes(0x01, 7).to_vec();
        msg[24..40].copy_from_slice(&[0xA5; 16]);
        msg.extend_from_slice(&[9u8; 100]);
        let c = parse(&msg, 64 + 8192).unwrap();
        assert_eq!((c.sqe.opcode, c.sqe.cid, c.sqe.nsid), (0x01, 7, 1));
        assert_eq!(c.dptr, [0xA5; 16]);
        assert_eq!(c.icd, &[9u8; 100][..]);
        let c = parse(&msg[..64], 64).unwrap();
        assert!(c.icd.is_empty());
    }

    #[test]
    fn short_and_oversized_messages() {
        let msg = [0u8; 200];
        for n in [0, 1, 63] {
            assert_eq!(parse(&msg[..n], 64), Err(CapsuleError::Short(n)));
        }
        assert_eq!(
            parse(&msg[..65], 64),
            Err(CapsuleError::TooLarge { len: 65, max: 64 })
        );
    }
}
