use super::*;
use crate::sqe::SQE_SIZE;

fn all_messages() -> Vec<Message> {
    vec![
        Message::Negotiate(Negotiate {
            t_id: 0x1234,
            sc_c: SC_C_NONE,
            napd: 1,
            authid: AUTHID_DHCHAP,
            hash_ids: vec![hash_id::SHA256, hash_id::SHA384, hash_id::SHA512],
            dh_ids: vec![
                dhgroup_id::NULL,
                dhgroup_id::FFDHE2048,
                dhgroup_id::FFDHE8192,
            ],
        }),
        Message::Challenge(Challenge {
            t_id: 7,
            hash_id: hash_id::SHA384,
            dhgid: dhgroup_id::FFDHE2048,
            seqnum: 0xdead_beef,
            c1: vec![0xc1; 48],
            dhv: vec![0xd1; 256],
        }),
        Message::Reply(Reply {
            t_id: 7,
            cvalid: true,
            seqnum: 99,
            response: vec![0xaa; 32],
            c2: vec![0xc2; 32],
            dhv: vec![0x55; 384],
        }),
        Message::Success1(Success1 {
            t_id: 7,
            hl: 64,
            response: Some(vec![0x77; 64]),
        }),
        Message::Success1(Success1 {
            t_id: 7,
            hl: 32,
            response: None,
        }),
        Message::Success2(Success2 { t_id: 0xffff }),
        Message::Failure1(Failure {
            t_id: 3,
            reason: REASON_FAILED,
            explanation: explanation::HASH_UNUSABLE,
        }),
        Message::Failure2(Failure {
            t_id: 4,
            reason: REASON_FAILED,
            explanation: explanation::FAILED,
        }),
    ]
}

#[test]
fn sizes_match_the_spec_figures() {
    let m = all_messages();
    assert_eq!(m[0].encode().len(), NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN);
    assert_eq!(NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN, 72);
    assert_eq!(m[1].encode().len(), 16 + 48 + 256);
    assert_eq!(m[2].encode().len(), 16 + 2 * 32 + 384);
    assert_eq!(m[3].encode().len(), 16 + 64);
    assert_eq!(m[4].encode().len(), 16);
    assert_eq!(m[5].encode().len(), 16);
    assert_eq!(m[6].encode().len(), FAILURE_LEN);
    assert_eq!(FAILURE_LEN, 8);
}

#[test]
fn field_offsets() {
    let m = all_messages();
    let n = m[0].encode();
    assert_eq!(&n[..8], &[0x00, 0x00, 0, 0, 0x34, 0x12, 0, 1]);
    assert_eq!(&n[8..12], &[AUTHID_DHCHAP, 0, 3, 3]);
    assert_eq!(&n[12..15], &[1, 2, 3]);
    assert_eq!(&n[42..45], &[0, 1, 5]);
    let c = m[1].encode();
    assert_eq!(&c[..2], &[AUTH_TYPE_DHCHAP, auth_id::CHALLENGE]);
    assert_eq!(
        (c[6], c[8], c[9]),
        (48, hash_id::SHA384, dhgroup_id::FFDHE2048)
    );
    assert_eq!(&c[10..16], &[0x00, 0x01, 0xef, 0xbe, 0xad, 0xde]);
    let r = m[2].encode();
    assert_eq!((r[1], r[6], r[8]), (auth_id::REPLY, 32, 1));
    assert_eq!(&r[10..12], &384u16.to_le_bytes());
    assert_eq!(&r[12..16], &99u32.to_le_bytes());
    assert_eq!((r[16], r[48], r[80]), (0xaa, 0xc2, 0x55));
    let s1 = m[3].encode();
    assert_eq!((s1[1], s1[6], s1[8]), (auth_id::SUCCESS1, 64, 1));
    let f = m[7].encode();
    assert_eq!(&f[..], &[0x00, 0xF0, 0, 0, 4, 0, 1, 1]);
    assert_eq!(m[6].encode()[1], 0xF1);
}

#[test]
fn round_trips_and_padding() {
    for m in all_messages() {
        let mut b = m.encode();
        assert_eq!(Message::decode(&b), Ok(m.clone()));
        b.resize(b.len() + 100, 0);
        assert_eq!(Message::decode(&b), Ok(m.clone()), "padded");
        assert_eq!(Message::decode(&b).map(|x| x.t_id()), Ok(m.t_id()));
    }
}

#[test]
fn every_truncation_is_short_never_panics() {
    for m in all_messages() {
        let b = m.encode();
        for n in 0..b.len() {
            match Message::decode(&b[..n]) {
                Err(e @ AuthWireError::Short { .. }) => {
                    assert_eq!(e.explanation(), explanation::INCORRECT_PAYLOAD)
                }
                Ok(Message::Success1(s)) if n >= 16 => assert!(s.response.is_none()),
                other => panic!("{m:?} cut to {n}: {other:?}"),
            }
        }
    }
}

#[test]
fn malformed_fields() {
    let m = all_messages();
    let mut n = m[0].encode();
    n[7] = 0;
    assert_eq!(
        Message::decode(&n),
        Err(AuthWireError::Field {
            field: "NAPD",
            value: 0
        })
    );
    n[7] = 2;
    assert!(matches!(
        Message::decode(&n),
        Err(AuthWireError::Short { .. })
    ));
    n[7] = 1;
    n[10] = 31;
    assert!(matches!(
        Message::decode(&n),
        Err(AuthWireError::Field { field: "HALEN", .. })
    ));
    n[10] = 3;
    n[11] = 31;
    assert!(matches!(
        Message::decode(&n),
        Err(AuthWireError::Field { field: "DHLEN", .. })
    ));
    let mut r = m[2].encode();
    r[8] = 2;
    assert!(matches!(
        Message::decode(&r),
        Err(AuthWireError::Field {
            field: "CVALID",
            ..
        })
    ));
    let mut s = m[3].encode();
    s[8] = 9;
    assert!(matches!(
        Message::decode(&s),
        Err(AuthWireError::Field {
            field: "RVALID",
            ..
        })
    ));
    let mut c = m[1].encode();
    c[10] = 0xff;
    assert!(matches!(
        Message::decode(&c),
        Err(AuthWireError::Short { .. })
    ));
}

#[test]
fn unknown_messages() {
    for (t, i) in [(0u8, 1u8), (0, 2), (1, 0), (1, 0xF0), (2, 0), (0xff, 0xff)] {
        let e = Message::decode(&[t, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(
            e,
            AuthWireError::Unknown {
                auth_type: t,
                auth_id: i
            }
        );
        assert_eq!(e.explanation(), explanation::INCORRECT_PROTOCOL_MESSAGE);
    }
}

#[test]
fn oversized_lists_are_cut_on_encode() {
    let n = Message::Negotiate(Negotiate {
        t_id: 0,
        sc_c: 0,
        napd: 1,
        authid: AUTHID_DHCHAP,
        hash_ids: vec![1; 40],
        dh_ids: vec![2; 40],
    })
    .encode();
    assert_eq!(n.len(), 72);
    assert_eq!((n[10], n[11]), (30, 30));
}

#[test]
fn auth_command_fields() {
    let c = AuthCmd::dhchap(72);
    let s = c.to_sqe(9, true);
    let mut b = [0u8; SQE_SIZE];
    s.encode(&mut b);
    assert_eq!(b[0], 0x7F);
    assert_eq!(b[4], fctype::AUTH_SEND);
    assert_eq!(&b[40..48], &[0, 0x01, 0x01, 0xE9, 72, 0, 0, 0]);
    assert_eq!(AuthCmd::from_sqe(&Sqe::decode(&b)), c);
    assert_eq!(c.to_sqe(9, false).fctype(), fctype::AUTH_RECEIVE);
    assert_eq!(c.check_dhchap(), Ok(()));
    assert_eq!(
        (CONNECT_AUTHREQ_ATR, CONNECT_AUTHREQ_ASCR),
        (0x2_0000, 0x4_0000)
    );
    assert_eq!(
        (SCT_COMMAND_SPECIFIC as u16) << 8 | SC_AUTH_REQUIRED as u16,
        0x191
    );
    let bad = [
        ("SECP", AuthCmd { secp: 0, ..c }),
        ("SPSP0", AuthCmd { spsp0: 0, ..c }),
        ("SPSP1", AuthCmd { spsp1: 0, ..c }),
    ];
    for (f, cmd) in bad {
        assert!(
            matches!(cmd.check_dhchap(), Err(AuthWireError::Field { field, .. }) if field == f)
        );
    }
}
