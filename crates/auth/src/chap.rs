//! The DH-HMAC-CHAP computations (Base 2.0 §8.13.5.2 .. §8.13.5.7), each
//! the same bytes in the same order as the Linux function it names.

use zeroize::Zeroizing;

use crate::{HashId, Secret};

/// The challenge actually hashed: C itself without DH, else the augmented
/// challenge Ca = HMAC-H(H(Ks), C) (Base §8.13.5.3; Linux
/// `nvme_auth_augmented_challenge`: hash the session key with the selected
/// hash, key an HMAC with it, run it over the challenge).
pub fn challenge_value(h: HashId, session_key: Option<&[u8]>, c: &[u8]) -> Zeroizing<Vec<u8>> {
    match session_key {
        None => Zeroizing::new(c.to_vec()),
        Some(ks) => h.hmac(&h.digest(ks), &[c]),
    }
}

/// The values both ends put into one response.
pub struct ResponseInput<'a> {
    pub hash: HashId,
    /// C1 (host response) or C2 (controller response), HL bytes.
    pub challenge: &'a [u8],
    /// Ks when a DH group other than null was selected.
    pub session_key: Option<&'a [u8]>,
    /// S1 (host response) or S2 (controller response).
    pub seqnum: u32,
    pub t_id: u16,
    /// SC_C of the AUTH_Negotiate (0: no secure channel).
    pub sc_c: u8,
    pub host_nqn: &'a str,
    pub subsys_nqn: &'a str,
}

/// The host's response R1 (Base §8.13.5.4): HMAC-H(Kh', Ca1 || S1 || T_ID
/// || SC_C || "HostHost" || NQNh || 00h || NQNc), with Kh' the host secret
/// transformed with the host NQN. Linux: host `nvme_auth_dhchap_setup_host_response`,
/// target `nvmet_auth_host_hash`. S1 is 4 bytes and T_ID 2, little-endian.
pub fn host_response(secret: &Secret, i: &ResponseInput<'_>) -> Zeroizing<Vec<u8>> {
    let key = secret.transform(i.host_nqn);
    let c = challenge_value(i.hash, i.session_key, i.challenge);
    i.hash.hmac(
        &key,
        &[
            &c,
            &i.seqnum.to_le_bytes(),
            &i.t_id.to_le_bytes(),
            &[i.sc_c],
            b"HostHost",
            i.host_nqn.as_bytes(),
            &[0],
            i.subsys_nqn.as_bytes(),
        ],
    )
}

/// The controller's response R2 (Base §8.13.5.5): HMAC-H(Kc', Ca2 || S2 ||
/// T_ID || 00h || "Controller" || NQNc || 00h || NQNh), with Kc' the
/// controller secret transformed with the subsystem NQN. Linux: host
/// `nvme_auth_dhchap_setup_ctrl_response`, target `nvmet_auth_ctrl_hash`.
pub fn ctrl_response(secret: &Secret, i: &ResponseInput<'_>) -> Zeroizing<Vec<u8>> {
    let key = secret.transform(i.subsys_nqn);
    let c = challenge_value(i.hash, i.session_key, i.challenge);
    i.hash.hmac(
        &key,
        &[
            &c,
            &i.seqnum.to_le_bytes(),
            &i.t_id.to_le_bytes(),
            &[0],
            b"Controller",
            i.subsys_nqn.as_bytes(),
            &[0],
            i.host_nqn.as_bytes(),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Independent restatement with one concatenated buffer, so a swapped
    /// or missing part in the functions above shows.
    #[test]
    fn byte_layout() {
        let s = Secret::new(&[7u8; 48], Some(HashId::Sha384)).unwrap();
        let i = ResponseInput {
            hash: HashId::Sha256,
            challenge: &[0xc1; 32],
            session_key: None,
            seqnum: 0x0102_0304,
            t_id: 0x0506,
            sc_c: 0,
            host_nqn: "nqn.h",
            subsys_nqn: "nqn.c",
        };
        let mut m = vec![0xc1u8; 32];
        m.extend_from_slice(&[4, 3, 2, 1, 6, 5, 0]);
        m.extend_from_slice(b"HostHostnqn.h\0nqn.c");
        let key = HashId::Sha384.hmac(&[7u8; 48], &[b"nqn.h", b"NVMe-over-Fabrics"]);
        assert_eq!(*host_response(&s, &i), *HashId::Sha256.hmac(&key, &[&m]));
        let mut m = vec![0xc1u8; 32];
        m.extend_from_slice(&[4, 3, 2, 1, 6, 5, 0]);
        m.extend_from_slice(b"Controllernqn.c\0nqn.h");
        let key = HashId::Sha384.hmac(&[7u8; 48], &[b"nqn.c", b"NVMe-over-Fabrics"]);
        assert_eq!(*ctrl_response(&s, &i), *HashId::Sha256.hmac(&key, &[&m]));
        let ks = [9u8; 256];
        let aug = challenge_value(HashId::Sha512, Some(&ks), &[1; 64]);
        let hk = HashId::Sha512.digest(&ks);
        assert_eq!(*aug, *HashId::Sha512.hmac(&hk, &[&[1u8; 64]]));
    }
}
