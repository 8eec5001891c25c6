//! The reservation state machine against Base 2.0 §8.19: the access table
//! for all six types, keys, IEKEY, preemption (also of oneself), zero keys.

use super::*;
use farflash_wire::resv::*;

const A: HostId = [0xA; 16];
const B: HostId = [0xB; 16];
const C: HostId = [0xC; 16];

fn two_registered() -> Reservations {
    let mut r = Reservations::default();
    r.register(A, 1, RREGA_REGISTER, false, 0, 0xAA).unwrap();
    r.register(B, 2, RREGA_REGISTER, false, 0, 0xBB).unwrap();
    r
}

/// Figure "Command Behavior in the Presence of a Reservation": (read,
/// write) for the holder, another registrant and a non-registrant.
#[test]
fn access_table_for_every_type() {
    let yes = Access {
        read: true,
        write: true,
    };
    let ro = Access {
        read: true,
        write: false,
    };
    let no = Access {
        read: false,
        write: false,
    };
    for (t, registrant, other) in [
        (1, ro, ro),  // Write Exclusive
        (2, no, no),  // Exclusive Access
        (3, yes, ro), // WE Registrants Only
        (4, yes, no), // EA Registrants Only
        (5, yes, ro), // WE All Registrants
        (6, yes, no), // EA All Registrants
    ] {
        let mut r = two_registered();
        assert_eq!(r.access(&C), yes, "no reservation: anyone");
        r.acquire(A, RACQA_ACQUIRE, false, t, 0xAA, 0).unwrap();
        assert_eq!(r.access(&A), yes, "type {t}: holder");
        assert_eq!(r.access(&B), registrant, "type {t}: registrant");
        assert_eq!(r.access(&C), other, "type {t}: non-registrant");
        let s = r.report();
        assert_eq!(s.rtype, t);
        assert_eq!(s.regctls.len(), 2);
        assert_eq!(
            s.regctls[1].holds,
            t >= 5,
            "type {t}: all registrants hold it"
        );
    }
}

#[test]
fn register_unregister_replace_and_keys() {
    let mut r = two_registered();
    let g = r.gen;
    // Same key again: success; another key: conflict; a zero key: invalid.
    r.register(A, 1, RREGA_REGISTER, false, 0, 0xAA).unwrap();
    assert_eq!(
        r.register(A, 1, RREGA_REGISTER, false, 0, 0x11),
        Err(Status::RESERVATION_CONFLICT)
    );
    assert_eq!(
        r.register(C, 3, RREGA_REGISTER, false, 0, 0),
        Err(Status::INVALID_FIELD.dnr())
    );
    // Replace needs the current key unless IEKEY; NRKEY 0 is invalid.
    assert_eq!(
        r.register(A, 1, RREGA_REPLACE, false, 0x99, 0xA2),
        Err(Status::RESERVATION_CONFLICT)
    );
    assert_eq!(
        r.register(A, 1, RREGA_REPLACE, false, 0xAA, 0),
        Err(Status::INVALID_FIELD.dnr())
    );
    r.register(A, 1, RREGA_REPLACE, false, 0xAA, 0xA2).unwrap();
    r.register(A, 1, RREGA_REPLACE, true, 0x1234, 0xA3).unwrap();
    assert_eq!(r.registrants[0].key, 0xA3);
    // Unregister: wrong key conflicts, IEKEY ignores it; not registered conflicts.
    assert_eq!(
        r.register(B, 2, RREGA_UNREGISTER, false, 0x1, 0),
        Err(Status::RESERVATION_CONFLICT)
    );
    r.register(B, 2, RREGA_UNREGISTER, true, 0x1, 0).unwrap();
    assert_eq!(
        r.register(B, 2, RREGA_UNREGISTER, true, 0, 0),
        Err(Status::RESERVATION_CONFLICT)
    );
    assert_eq!(
        r.register(A, 1, 3, false, 0, 1),
        Err(Status::INVALID_FIELD.dnr()),
        "RREGA 3"
    );
    assert!(r.gen > g);
    assert_eq!(r.registrants.len(), 1);
}

#[test]
fn acquire_needs_a_registration_and_the_key() {
    let mut r = two_registered();
    assert_eq!(
        r.acquire(C, RACQA_ACQUIRE, false, 1, 0, 0),
        Err(Status::RESERVATION_CONFLICT)
    );
    assert_eq!(
        r.acquire(A, RACQA_ACQUIRE, false, 1, 0xBB, 0),
        Err(Status::RESERVATION_CONFLICT)
    );
    assert_eq!(
        r.acquire(A, RACQA_ACQUIRE, false, 0, 0xAA, 0),
        Err(Status::INVALID_FIELD.dnr())
    );
    assert_eq!(
        r.acquire(A, RACQA_ACQUIRE, false, 7, 0xAA, 0),
        Err(Status::INVALID_FIELD.dnr())
    );
    assert_eq!(
        r.acquire(A, 3, false, 1, 0xAA, 0),
        Err(Status::INVALID_FIELD.dnr())
    );
    r.acquire(A, RACQA_ACQUIRE, false, 1, 0xAA, 0).unwrap();
    r.acquire(A, RACQA_ACQUIRE, false, 1, 0xAA, 0).unwrap();
    assert_eq!(
        r.acquire(A, RACQA_ACQUIRE, false, 2, 0xAA, 0),
        Err(Status::RESERVATION_CONFLICT),
        "another type"
    );
    assert_eq!(
        r.acquire(B, RACQA_ACQUIRE, false, 1, 0xBB, 0),
        Err(Status::RESERVATION_CONFLICT)
    );
    assert_eq!(
        r.acquire(B, RACQA_ACQUIRE, true, 1, 0, 0),
        Err(Status::RESERVATION_CONFLICT)
    );
}

#[test]
fn preempt_takes_over_and_unregisters_the_holder() {
    let mut r = two_registered();
    r.acquire(A, RACQA_ACQUIRE, false, 1, 0xAA, 0).unwrap();
    // B preempts A (PRKEY = A's key): A is unregistered, B holds type 2.
    let n = r.acquire(B, RACQA_PREEMPT, false, 2, 0xBB, 0xAA).unwrap();
    assert_eq!(n, vec![(A, NOTICE_REGISTRATION_PREEMPTED)]);
    assert!(!r.is_registered(&A));
    assert_eq!(
        (r.holder, r.rtype),
        (Some(B), Some(ResvType::ExclusiveAccess))
    );
    // Zero PRKEY on a reservation that is not all-registrants: invalid.
    assert_eq!(
        r.acquire(B, RACQA_PREEMPT, false, 2, 0xBB, 0),
        Err(Status::INVALID_FIELD.dnr())
    );
    // Preempting oneself changes the type and keeps the registration.
    r.acquire(B, RACQA_PREEMPT_ABORT, false, 4, 0xBB, 0xBB)
        .unwrap();
    assert_eq!(
        (r.holder, r.rtype),
        (Some(B), Some(ResvType::ExclusiveAccessRegistrantsOnly))
    );
    assert!(r.is_registered(&B));
    // A PRKEY that is not the holder's only removes registrants with it.
    r.register(C, 3, RREGA_REGISTER, false, 0, 0xCC).unwrap();
    r.acquire(B, RACQA_PREEMPT, false, 4, 0xBB, 0xCC).unwrap();
    assert!(!r.is_registered(&C));
    assert_eq!(r.holder, Some(B));
    // Preempt with no reservation: removes the PRKEY registrants only.
    let mut r = two_registered();
    r.acquire(A, RACQA_PREEMPT, false, 1, 0xAA, 0xBB).unwrap();
    assert!(!r.is_registered(&B));
    assert_eq!(r.rtype, None);
}

#[test]
fn all_registrants_preempt_with_zero_key_and_unregistering_holders() {
    let mut r = two_registered();
    r.register(C, 3, RREGA_REGISTER, false, 0, 0xCC).unwrap();
    r.acquire(A, RACQA_ACQUIRE, false, 6, 0xAA, 0).unwrap();
    assert!(r.holds(&B) && r.holds(&C));
    // B acquiring the same all-registrants type succeeds (it holds it).
    r.acquire(B, RACQA_ACQUIRE, false, 6, 0xBB, 0).unwrap();
    // A leaving does not release it while registrants remain.
    r.register(A, 1, RREGA_UNREGISTER, false, 0xAA, 0).unwrap();
    assert_eq!(r.rtype, Some(ResvType::ExclusiveAccessAllRegistrants));
    // Zero PRKEY: every other registrant goes, B holds type 1.
    let n = r.acquire(B, RACQA_PREEMPT, false, 1, 0xBB, 0).unwrap();
    assert!(n.contains(&(C, NOTICE_REGISTRATION_PREEMPTED)));
    assert_eq!(r.registrants.len(), 1);
    assert_eq!(
        (r.holder, r.rtype),
        (Some(B), Some(ResvType::WriteExclusive))
    );
    // The holder of a type-1 reservation unregistering releases it.
    r.register(B, 2, RREGA_UNREGISTER, false, 0xBB, 0).unwrap();
    assert_eq!((r.holder, r.rtype), (None, None));
}

#[test]
fn release_and_clear() {
    let mut r = two_registered();
    r.release(A, RRELA_RELEASE, false, 1, 0xAA).unwrap(); // nothing held: success
    r.acquire(A, RACQA_ACQUIRE, false, 3, 0xAA, 0).unwrap();
    assert_eq!(
        r.release(A, RRELA_RELEASE, false, 3, 0x00),
        Err(Status::RESERVATION_CONFLICT)
    );
    r.release(B, RRELA_RELEASE, false, 3, 0xBB).unwrap(); // not the holder: no effect
    assert_eq!(r.rtype, Some(ResvType::WriteExclusiveRegistrantsOnly));
    assert_eq!(
        r.release(A, RRELA_RELEASE, false, 1, 0xAA),
        Err(Status::INVALID_FIELD.dnr()),
        "wrong type"
    );
    let n = r.release(A, RRELA_RELEASE, false, 3, 0xAA).unwrap();
    assert_eq!(n, vec![(B, NOTICE_RESERVATION_RELEASED)]);
    assert_eq!(r.rtype, None);
    r.acquire(A, RACQA_ACQUIRE, false, 2, 0xAA, 0).unwrap();
    assert_eq!(
        r.release(C, RRELA_CLEAR, true, 0, 0),
        Err(Status::RESERVATION_CONFLICT)
    );
    let n = r.release(B, RRELA_CLEAR, false, 0, 0xBB).unwrap();
    assert_eq!(n, vec![(A, NOTICE_RESERVATION_PREEMPTED)]);
    assert!(r.registrants.is_empty() && r.rtype.is_none());
    assert_eq!(
        r.release(A, 2, true, 0, 0),
        Err(Status::RESERVATION_CONFLICT),
        "not registered first"
    );
}
