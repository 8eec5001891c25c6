//! Host against controller: every hash × group, uni- and bidirectional,
//! wrong keys; `hostile.rs` has the protocol-level hostile rows.

mod hostile;

use farflash_wire::auth::{explanation as ex, Message};

use crate::*;

/// Deterministic, not cryptographic (xorshift64*).
pub(crate) struct TestRng(pub u64);

impl Random for TestRng {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
        }
    }
}

pub(crate) const HOST: &str =
    "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
pub(crate) const SUBSYS: &str = "nqn.2026-01.io.farflash:test";

pub(crate) fn secret(fill: u8, hmac: Option<HashId>) -> Secret {
    Secret::new(&[fill; 32], hmac).unwrap()
}

pub(crate) fn pair(bidi: bool, hash: HashId, group: DhGroup) -> (HostAuth, CtrlAuth) {
    let hs = secret(1, Some(HashId::Sha256));
    pair_with(bidi, hash, group, hs, Some(secret(2, None)))
}

/// The controller knows `hs` and `cs`; the host has the right keys.
pub(crate) fn pair_with(
    bidi: bool,
    hash: HashId,
    group: DhGroup,
    hs: Secret,
    cs: Option<Secret>,
) -> (HostAuth, CtrlAuth) {
    let host = HostConfig::new(
        HOST,
        SUBSYS,
        secret(1, Some(HashId::Sha256)),
        bidi.then(|| secret(2, None)),
    );
    let ctrl = CtrlConfig {
        subsys_nqn: SUBSYS.into(),
        host_nqn: HOST.into(),
        host_secret: hs,
        ctrl_secret: cs,
        hashes: vec![hash],
        groups: vec![group],
    };
    (HostAuth::new(host, 42), CtrlAuth::new(ctrl))
}

/// Runs host and controller to the end; returns the host's last step.
pub(crate) fn run(h: &mut HostAuth, c: &mut CtrlAuth, rng: &mut TestRng) -> HostStep {
    let neg = h.negotiate().encode();
    assert_eq!(c.send(&neg, rng), CtrlEvent::Continue);
    loop {
        let out = c.receive().expect("controller message").encode();
        match h.receive(&out, rng) {
            HostStep::Send(m) => {
                let ev = c.send(&m.encode(), rng);
                assert!(!matches!(ev, CtrlEvent::Failed(_)), "{ev:?}");
            }
            HostStep::Done(Some(m)) => {
                assert_eq!(c.send(&m.encode(), rng), CtrlEvent::Authenticated);
                return HostStep::Done(None);
            }
            other => return other,
        }
    }
}

#[test]
fn every_hash_and_group_both_directions() {
    let mut rng = TestRng(1);
    for hash in HashId::ALL {
        for group in DhGroup::ALL {
            for bidi in [false, true] {
                let (mut h, mut c) = pair(bidi, hash, group);
                assert_eq!(
                    run(&mut h, &mut c, &mut rng),
                    HostStep::Done(None),
                    "{hash:?} {group:?} {bidi}"
                );
                assert!(c.authenticated());
                assert!(!c.in_progress());
                assert_eq!(c.receive(), None);
            }
        }
    }
}

pub(crate) fn host_fails(step: HostStep, explanation: u8) {
    match step {
        HostStep::Failed { failure, .. } => {
            assert_eq!(failure.explanation, explanation, "{failure}")
        }
        other => panic!("expected failure, got {other:?}"),
    }
}

#[test]
fn wrong_host_key_fails_with_failed() {
    let mut rng = TestRng(2);
    let wrong = secret(9, Some(HashId::Sha256));
    let (mut h, mut c) = pair_with(false, HashId::Sha256, DhGroup::Ffdhe2048, wrong, None);
    c.send(&h.negotiate().encode(), &mut rng);
    let HostStep::Send(reply) = h.receive(&c.receive().unwrap().encode(), &mut rng) else {
        panic!()
    };
    let CtrlEvent::Failed(f) = c.send(&reply.encode(), &mut rng) else {
        panic!()
    };
    assert_eq!(f.explanation, ex::FAILED);
    assert!(!c.authenticated());
    let fail1 = c.receive().unwrap();
    assert!(
        matches!(fail1, Message::Failure1(ref x) if x.explanation == ex::FAILED && x.t_id == 42)
    );
    let step = h.receive(&fail1.encode(), &mut rng);
    assert!(matches!(step, HostStep::Failed { failure, send: None } if failure.from_peer));
}

#[test]
fn wrong_ctrl_key_fails_on_the_host() {
    let mut rng = TestRng(3);
    let hs = secret(1, Some(HashId::Sha256));
    let (mut h, mut c) = pair_with(
        true,
        HashId::Sha384,
        DhGroup::Null,
        hs,
        Some(secret(8, None)),
    );
    c.send(&h.negotiate().encode(), &mut rng);
    let HostStep::Send(reply) = h.receive(&c.receive().unwrap().encode(), &mut rng) else {
        panic!()
    };
    assert_eq!(c.send(&reply.encode(), &mut rng), CtrlEvent::Continue);
    let step = h.receive(&c.receive().unwrap().encode(), &mut rng);
    let HostStep::Failed {
        failure,
        send: Some(Message::Failure2(f2)),
    } = step
    else {
        panic!("{step:?}")
    };
    assert_eq!(
        (failure.explanation, f2.explanation, f2.t_id),
        (ex::FAILED, ex::FAILED, 42)
    );
    assert!(
        matches!(c.send(&Message::Failure2(f2).encode(), &mut rng), CtrlEvent::Failed(f) if f.from_peer)
    );
    assert!(!c.authenticated());
    assert_eq!(c.receive(), None);
}

#[test]
fn bidirectional_without_ctrl_secret_fails() {
    let mut rng = TestRng(4);
    let hs = secret(1, Some(HashId::Sha256));
    let (mut h, mut c) = pair_with(true, HashId::Sha256, DhGroup::Null, hs, None);
    c.send(&h.negotiate().encode(), &mut rng);
    let HostStep::Send(reply) = h.receive(&c.receive().unwrap().encode(), &mut rng) else {
        panic!()
    };
    assert!(
        matches!(c.send(&reply.encode(), &mut rng), CtrlEvent::Failed(f) if f.explanation == ex::FAILED)
    );
}

/// The deferred path: each DH group's two exponentiations come out as jobs,
/// run on another thread, and the transaction ends as the inline one does;
/// the null group needs none.
#[test]
fn deferred_jobs_run_on_another_thread() {
    let mut rng = TestRng(7);
    for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
        let (mut h, mut c) = pair(true, HashId::Sha256, group);
        let mut jobs = 0;
        let mut feed =
            |c: &mut CtrlAuth, msg: &[u8], rng: &mut TestRng| match c.send_deferred(msg, rng) {
                Sent::Event(ev) => ev,
                Sent::Compute(job) => {
                    jobs += 1;
                    assert!(c.computing());
                    assert_eq!(c.receive(), None, "no message while computing");
                    let done = std::thread::spawn(move || job.run()).join().unwrap();
                    c.computed(done).expect("a current job")
                }
            };
        assert_eq!(
            feed(&mut c, &h.negotiate().encode(), &mut rng),
            CtrlEvent::Continue
        );
        let mut last = None;
        while let Some(m) = c.receive() {
            match h.receive(&m.encode(), &mut rng) {
                HostStep::Send(m) => last = Some(feed(&mut c, &m.encode(), &mut rng)),
                HostStep::Done(Some(m)) => last = Some(feed(&mut c, &m.encode(), &mut rng)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(last, Some(CtrlEvent::Authenticated), "{group:?}");
        assert_eq!(jobs, if group == DhGroup::Null { 0 } else { 2 });
    }
}

/// A result that comes back after its transaction expired, or after a
/// message that arrived meanwhile failed it, is dropped; a message during a
/// computation fails the transaction.
#[test]
fn stale_and_overlapping_computations() {
    let mut rng = TestRng(9);
    let (mut h, mut c) = pair(false, HashId::Sha256, DhGroup::Ffdhe2048);
    let neg = h.negotiate().encode();
    let Sent::Compute(job) = c.send_deferred(&neg, &mut rng) else {
        panic!("no job")
    };
    c.expire();
    assert!(!c.computing());
    assert_eq!(c.computed(job.run()), None);
    assert_eq!(c.receive(), None);

    let Sent::Compute(job) = c.send_deferred(&neg, &mut rng) else {
        panic!("no job")
    };
    let Sent::Event(CtrlEvent::Failed(f)) = c.send_deferred(&neg, &mut rng) else {
        panic!("a message during a computation was accepted")
    };
    assert_eq!(f.explanation, ex::INCORRECT_PROTOCOL_MESSAGE);
    assert_eq!(c.computed(job.run()), None);
    assert!(matches!(c.receive(), Some(Message::Failure1(_))));
    // A new transaction after all that succeeds.
    assert_eq!(run(&mut h, &mut c, &mut rng), HostStep::Done(None));
}
