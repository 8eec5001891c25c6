//! ANA through the command layer (Base §8.20): Identify fields, the ANA
//! log page, the ANA Change event and the path-related status on I/O when
//! the management API changes a group's state on the queue's listener.

use crate::tests::{completions, io_queue, run, rw, target};
use crate::Begin;
use farflash_wire::ana::{decode_ana_log, AnaState, LSP_RGO};
use farflash_wire::identify::{IdCtrl, IdNs, CMIC_ANA, OAES_ANA_CHANGE};
use farflash_wire::log::GetLogPage;
use farflash_wire::opcode::{admin as aop, cns, feature, io, log_id};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{Sqe, Status};
use std::time::Instant;

const NQN: &str = crate::tests::NQN;

fn admin_cmd(opcode: u8, cid: u16, len: u32) -> Sqe {
    Sqe {
        opcode,
        flags: PSDT_SGL,
        cid,
        dptr: SglDescriptor::transport(len),
        ..Sqe::default()
    }
}

fn ana_log(admin: &mut crate::NvmeQueue, cid: u16, rgo: bool) -> Vec<u8> {
    let mut s = admin_cmd(aop::GET_LOG_PAGE, cid, 4096);
    GetLogPage {
        lid: log_id::ANA,
        lsp: if rgo { LSP_RGO } else { 0 },
        rae: false,
        len: 4096,
        offset: 0,
    }
    .fill_sqe(&mut s);
    let c = run(admin, s, &[]);
    assert_eq!(c.status, Status::SUCCESS);
    let (buf, n) = c.data.expect("log data");
    buf.as_slice()[..n as usize].to_vec()
}

#[test]
fn ana_state_changes_reach_identify_log_aen_and_io() {
    let (t, _script) = target();
    let (mut admin, mut q) = io_queue(&t);

    // Identify: CMIC.ANA, ANACAP, ANAGRPMAX, the namespace's ANAGRPID.
    let mut s = admin_cmd(aop::IDENTIFY, 10, 4096);
    s.cdw10 = cns::CONTROLLER as u32;
    let c = run(&mut admin, s, &[]);
    let id = IdCtrl::decode(c.data.as_ref().unwrap().0.as_slice());
    assert_ne!(id.cmic & CMIC_ANA, 0);
    assert_ne!(id.oaes & OAES_ANA_CHANGE, 0);
    assert_eq!(
        (id.anagrpmax, id.nanagrpid, id.anacap & 0x1F),
        (128, 128, 0x1F)
    );
    assert!(id.anatt > 0);
    assert!(id.mnan >= 1 && id.mnan <= id.nn, "Linux checks MNAN");
    let mut s = admin_cmd(aop::IDENTIFY, 11, 4096);
    s.nsid = 1;
    let c = run(&mut admin, s, &[]);
    let ns = IdNs::decode(c.data.as_ref().unwrap().0.as_slice());
    assert_eq!((ns.anagrpid, ns.nmic), (1, 1));

    // The host enables ANA Change Notices and parks an AER.
    let mut s = admin_cmd(aop::SET_FEATURES, 12, 0);
    s.cdw10 = feature::ASYNC_EVENT_CONFIG as u32;
    s.cdw11 = OAES_ANA_CHANGE;
    assert_eq!(run(&mut admin, s, &[]).status, Status::SUCCESS);
    let Begin::Ready { slot, .. } = admin.begin(admin_cmd(aop::ASYNC_EVENT_REQUEST, 13, 0)) else {
        panic!("AER not accepted");
    };
    admin.execute(slot);
    assert!(completions(&mut admin).is_empty(), "the AER waits");

    let (cnt0, g) = decode_ana_log(&ana_log(&mut admin, 14, false)).unwrap();
    assert_eq!(g.len(), 1);
    assert_eq!(
        (g[0].anagrpid, g[0].state, &g[0].nsids[..]),
        (1, AnaState::Optimized, &[1][..])
    );

    // Inaccessible through this listener: the AER completes, the log says
    // so, and I/O gets ANA Inaccessible without DNR.
    crate::manage::set_ana_state(&t, NQN, "127.0.0.1:4420", 1, "inaccessible").unwrap();
    admin.tick(Instant::now());
    let aen = completions(&mut admin);
    assert_eq!(aen.len(), 1);
    assert_eq!(
        (aen[0].cid, aen[0].result as u32),
        (13, crate::ana::AEN_ANA_CHANGE)
    );
    let (cnt1, g) = decode_ana_log(&ana_log(&mut admin, 15, false)).unwrap();
    assert!(cnt1 > cnt0);
    assert_eq!(g[0].state, AnaState::Inaccessible);
    let (_, g) = decode_ana_log(&ana_log(&mut admin, 16, true)).unwrap();
    assert!(g[0].nsids.is_empty(), "RGO: no NSIDs");
    let c = run(&mut q, rw(io::READ, 20, 0, 512), &[]);
    assert_eq!(c.status, Status::ANA_INACCESSIBLE);
    assert!(!c.status.is_dnr());
    let c = run(&mut q, rw(io::WRITE, 21, 0, 512), &[]);
    assert_eq!(c.status, Status::ANA_INACCESSIBLE);

    // Change (transition), persistent loss, non-optimized, then back.
    for (state, want) in [
        ("change", Some(Status::ANA_TRANSITION)),
        ("persistent-loss", Some(Status::ANA_PERSISTENT_LOSS)),
        ("non-optimized", None),
        ("optimized", None),
    ] {
        crate::manage::set_ana_state(&t, NQN, "127.0.0.1:4420", 1, state).unwrap();
        let c = run(&mut q, rw(io::READ, 22, 0, 512), &[]);
        assert_eq!(c.status, want.unwrap_or(Status::SUCCESS), "{state}");
    }
    assert!(
        t.subsystem(NQN).unwrap().ana().config.is_empty(),
        "optimized is the default"
    );
    let rows = crate::manage::ana_states(&t, NQN).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].anagrpid, rows[0].state), (1, AnaState::Optimized));
}

#[test]
fn bad_ana_requests_change_nothing() {
    let (t, _script) = target();
    let set = |l: &str, g: u32, s: &str| crate::manage::set_ana_state(&t, NQN, l, g, s);
    assert!(matches!(
        set("127.0.0.1:9", 1, "inaccessible"),
        Err(crate::manage::ManageError::NotFound(_))
    ));
    let e = set("127.0.0.1:4420", 0, "inaccessible")
        .unwrap_err()
        .to_string();
    assert!(e.contains("anagrpid 0"), "{e}");
    let e = set("127.0.0.1:4420", 129, "inaccessible")
        .unwrap_err()
        .to_string();
    assert!(e.contains("anagrpid 129"), "{e}");
    let e = set("127.0.0.1:4420", 1, "gone").unwrap_err().to_string();
    assert!(e.contains("state"), "{e}");
    assert!(crate::manage::set_ana_state(&t, "nqn.none", "127.0.0.1:4420", 1, "change").is_err());
    assert!(t.subsystem(NQN).unwrap().ana().config.is_empty());
    // A group with no namespace may be set (its namespaces may come later).
    set("127.0.0.1:4420", 128, "inaccessible").unwrap();
    let rows = crate::manage::ana_states(&t, NQN).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.anagrpid).collect::<Vec<_>>(),
        vec![1, 128]
    );
}
