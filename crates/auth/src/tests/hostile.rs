//! Hostile-peer rows: replay, order, T_ID, DH values, negotiate and
//! challenge refusals, re-authentication, secrets in texts.

use farflash_wire::auth::{explanation as ex, Message, Reply};

use super::*;
use crate::*;

#[test]
fn replay_and_order() {
    let mut rng = TestRng(5);
    let (mut h, mut c) = pair(false, HashId::Sha256, DhGroup::Ffdhe2048);
    let neg = h.negotiate().encode();
    // A reply before any negotiate, and success2 before the reply.
    let (_, mut fresh) = pair(false, HashId::Sha256, DhGroup::Null);
    assert!(
        matches!(fresh.send(&[1, 4, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::INCORRECT_PROTOCOL_MESSAGE)
    );
    c.send(&neg, &mut rng);
    let challenge = c.receive().unwrap().encode();
    let HostStep::Send(reply) = h.receive(&challenge, &mut rng) else {
        panic!()
    };
    assert_eq!(c.send(&reply.encode(), &mut rng), CtrlEvent::Authenticated);
    let s1 = c.receive().unwrap().encode();
    assert_eq!(h.receive(&s1, &mut rng), HostStep::Done(None));
    // Replayed reply after success: incorrect protocol message, unauthenticated.
    assert!(
        matches!(c.send(&reply.encode(), &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::INCORRECT_PROTOCOL_MESSAGE)
    );
    assert!(!c.authenticated());
    // The old reply in a new transaction (new C1): failed.
    c.send(&neg, &mut rng);
    c.receive().unwrap();
    assert!(
        matches!(c.send(&reply.encode(), &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::FAILED)
    );
    // Host: a second challenge or a challenge before negotiate.
    host_fails(
        h.receive(&challenge, &mut rng),
        ex::INCORRECT_PROTOCOL_MESSAGE,
    );
    let (mut h2, _) = pair(false, HashId::Sha256, DhGroup::Null);
    host_fails(
        h2.receive(&challenge, &mut rng),
        ex::INCORRECT_PROTOCOL_MESSAGE,
    );
    let (mut h3, _) = pair(false, HashId::Sha256, DhGroup::Null);
    h3.negotiate();
    host_fails(h3.receive(&s1, &mut rng), ex::INCORRECT_PROTOCOL_MESSAGE);
}

#[test]
fn wrong_transaction_id() {
    let mut rng = TestRng(6);
    let (mut h, mut c) = pair(false, HashId::Sha512, DhGroup::Null);
    c.send(&h.negotiate().encode(), &mut rng);
    let Message::Challenge(mut ch) = c.receive().unwrap() else {
        panic!()
    };
    ch.t_id = 43;
    host_fails(
        h.receive(&Message::Challenge(ch.clone()).encode(), &mut rng),
        ex::INCORRECT_PROTOCOL_MESSAGE,
    );
    let (mut h, _) = pair(false, HashId::Sha512, DhGroup::Null);
    h.negotiate();
    ch.t_id = 42;
    let HostStep::Send(Message::Reply(mut r)) =
        h.receive(&Message::Challenge(ch).encode(), &mut rng)
    else {
        panic!()
    };
    r.t_id = 7;
    assert!(
        matches!(c.send(&Message::Reply(r).encode(), &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::INCORRECT_PAYLOAD)
    );
}

/// The controller's challenge with its DH value replaced.
fn bad_dh_values(group: DhGroup) -> Vec<Vec<u8>> {
    let len = group.value_len();
    let p = num_bigint::BigUint::parse_bytes(crate::dh_primes::FFDHE2048.as_bytes(), 16)
        .unwrap()
        .to_bytes_be();
    let mut pm1 = p.clone();
    pm1[len - 1] -= 1;
    let mut one = vec![0u8; len];
    one[len - 1] = 1;
    vec![
        vec![0; len],
        one,
        pm1,
        p,
        vec![],
        vec![2; len - 1],
        vec![2; len + 1],
    ]
}

#[test]
fn hostile_dh_values() {
    let mut rng = TestRng(7);
    let g = DhGroup::Ffdhe2048;
    for (i, v) in bad_dh_values(g).into_iter().enumerate() {
        let (mut h, mut c) = pair(false, HashId::Sha256, g);
        c.send(&h.negotiate().encode(), &mut rng);
        let Message::Challenge(mut ch) = c.receive().unwrap() else {
            panic!()
        };
        let good = ch.dhv.clone();
        ch.dhv = v.clone();
        let want = if v.is_empty() {
            ex::DHGROUP_UNUSABLE
        } else {
            ex::INCORRECT_PAYLOAD
        };
        host_fails(
            h.receive(&Message::Challenge(ch.clone()).encode(), &mut rng),
            want,
        );
        // The same value in the host's reply.
        let (mut h, _) = pair(false, HashId::Sha256, g);
        h.negotiate();
        ch.dhv = good;
        let HostStep::Send(Message::Reply(r)) =
            h.receive(&Message::Challenge(ch).encode(), &mut rng)
        else {
            panic!()
        };
        let want = if v.is_empty() {
            ex::INCORRECT_PAYLOAD
        } else {
            ex::DHGROUP_UNUSABLE
        };
        let bad = Reply { dhv: v, ..r };
        assert!(
            matches!(c.send(&Message::Reply(bad).encode(), &mut rng), CtrlEvent::Failed(f) if f.explanation == want),
            "value {i}"
        );
    }
}

#[test]
fn negotiate_refusals() {
    let mut rng = TestRng(8);
    let (mut h, mut c) = pair(false, HashId::Sha384, DhGroup::Ffdhe3072);
    let Message::Negotiate(n) = h.negotiate() else {
        panic!()
    };
    for (m, want) in [
        (
            farflash_wire::auth::Negotiate {
                hash_ids: vec![1, 3, 9],
                ..n.clone()
            },
            ex::HASH_UNUSABLE,
        ),
        (
            farflash_wire::auth::Negotiate {
                dh_ids: vec![0, 1, 7],
                ..n.clone()
            },
            ex::DHGROUP_UNUSABLE,
        ),
        (
            farflash_wire::auth::Negotiate {
                authid: 2,
                ..n.clone()
            },
            ex::INCORRECT_PAYLOAD,
        ),
        (
            farflash_wire::auth::Negotiate {
                sc_c: 1,
                ..n.clone()
            },
            ex::CONCAT_MISMATCH,
        ),
    ] {
        assert!(
            matches!(c.send(&Message::Negotiate(m).encode(), &mut rng), CtrlEvent::Failed(f) if f.explanation == want)
        );
        assert!(
            matches!(c.receive(), Some(Message::Failure1(f)) if f.explanation == want && f.t_id == 42)
        );
    }
    let mut two = Message::Negotiate(n).encode();
    two[7] = 2;
    two.extend_from_slice(&[0; 64]);
    assert!(
        matches!(c.send(&two, &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::HASH_UNUSABLE)
    );
    assert!(
        matches!(c.send(&[0, 0, 0], &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::INCORRECT_PAYLOAD)
    );
    assert!(
        matches!(c.send(&[7, 7, 0, 0, 0, 0, 0, 0], &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::INCORRECT_PROTOCOL_MESSAGE)
    );
}

#[test]
fn host_refuses_unoffered_or_bad_challenges() {
    let mut rng = TestRng(9);
    let (mut h, mut c) = pair(false, HashId::Sha256, DhGroup::Null);
    c.send(&h.negotiate().encode(), &mut rng);
    let Message::Challenge(ch) = c.receive().unwrap() else {
        panic!()
    };
    let cases = [
        (
            farflash_wire::auth::Challenge {
                hash_id: 9,
                ..ch.clone()
            },
            ex::HASH_UNUSABLE,
        ),
        (
            farflash_wire::auth::Challenge {
                c1: vec![0; 48],
                ..ch.clone()
            },
            ex::HASH_UNUSABLE,
        ),
        (
            farflash_wire::auth::Challenge {
                dhgid: 6,
                ..ch.clone()
            },
            ex::DHGROUP_UNUSABLE,
        ),
        (
            farflash_wire::auth::Challenge {
                dhv: vec![2; 16],
                ..ch.clone()
            },
            ex::INCORRECT_PAYLOAD,
        ),
    ];
    for (bad, want) in cases {
        let (mut h, _) = pair(false, HashId::Sha256, DhGroup::Null);
        h.negotiate();
        host_fails(h.receive(&Message::Challenge(bad).encode(), &mut rng), want);
    }
    host_fails(h.receive(&[1, 1, 0], &mut rng), ex::INCORRECT_PAYLOAD);
}

#[test]
fn reauthentication_and_expiry() {
    let mut rng = TestRng(10);
    let (mut h, mut c) = pair(true, HashId::Sha256, DhGroup::Ffdhe2048);
    assert_eq!(run(&mut h, &mut c, &mut rng), HostStep::Done(None));
    let (mut h2, _) = pair(true, HashId::Sha256, DhGroup::Ffdhe2048);
    h2.negotiate();
    c.send(&h2.negotiate().encode(), &mut rng);
    assert!(
        c.authenticated() && c.in_progress(),
        "still authenticated while re-authenticating"
    );
    c.expire();
    assert!(!c.in_progress() && c.receive().is_none());
    let mut h3 = HostAuth::new(
        HostConfig::new(
            HOST,
            SUBSYS,
            secret(1, Some(HashId::Sha256)),
            Some(secret(2, None)),
        ),
        43,
    );
    assert_eq!(run(&mut h3, &mut c, &mut rng), HostStep::Done(None));
    assert!(c.authenticated());
}

#[test]
fn failures_never_show_secrets() {
    let s = secret(0xab, None);
    let cfg = HostConfig::new(HOST, SUBSYS, s.clone(), Some(s.clone()));
    let text = format!(
        "{cfg:?} {}",
        AuthFailure::local(ex::FAILED, "host response wrong")
    );
    let key = &s.to_dhhc()[10..30];
    assert!(!text.contains(key) && !text.contains("171, 171"), "{text}");
}

#[test]
fn host_refusing_success1_unauthenticates_the_queue() {
    let mut rng = TestRng(11);
    let (mut h, mut c) = pair(false, HashId::Sha256, DhGroup::Null);
    c.send(&h.negotiate().encode(), &mut rng);
    let HostStep::Send(reply) = h.receive(&c.receive().unwrap().encode(), &mut rng) else {
        panic!()
    };
    assert_eq!(c.send(&reply.encode(), &mut rng), CtrlEvent::Authenticated);
    let Some(Message::Success1(mut s1)) = c.receive() else {
        panic!()
    };
    s1.hl = 48;
    let step = h.receive(&Message::Success1(s1).encode(), &mut rng);
    let HostStep::Failed {
        failure,
        send: Some(f2),
    } = step
    else {
        panic!("{step:?}")
    };
    assert_eq!(failure.explanation, ex::HASH_UNUSABLE);
    assert!(matches!(c.send(&f2.encode(), &mut rng), CtrlEvent::Failed(f) if f.from_peer));
    assert!(!c.authenticated());
    assert_eq!(c.receive(), None);
}
