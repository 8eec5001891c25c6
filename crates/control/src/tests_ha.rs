//! ANA through the command layer (Base §8.20): Identify fields, the ANA
//! log page, the ANA Change event and the path-related status on I/O when
//! the management API changes a group's state on the queue's listener.

use farflash_core::testing::{completions, io_queue, run, rw, target};
use farflash_core::Begin;
use farflash_wire::ana::{decode_ana_log, AnaState, LSP_RGO};
use farflash_wire::identify::{IdCtrl, IdNs, CMIC_ANA, OAES_ANA_CHANGE};
use farflash_wire::log::GetLogPage;
use farflash_wire::opcode::{admin as aop, cns, feature, io, log_id};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{Sqe, Status};
use std::time::Instant;

const NQN: &str = farflash_core::testing::NQN;

fn admin_cmd(opcode: u8, cid: u16, len: u32) -> Sqe {
    Sqe {
        opcode,
        flags: PSDT_SGL,
        cid,
        dptr: SglDescriptor::transport(len),
        ..Sqe::default()
    }
}

fn ana_log(admin: &mut farflash_core::NvmeQueue, cid: u16, rgo: bool) -> Vec<u8> {
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
        (13, farflash_core::ana::AEN_ANA_CHANGE)
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

// ----- reservations -------------------------------------------------------

use farflash_wire::fabrics::{PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::fctype;
use farflash_wire::props;
use farflash_wire::resv::{self as wr, ResvCdw10, ResvStatus};

fn connect_as(
    q: &mut farflash_core::NvmeQueue,
    qid: u16,
    cntlid: u16,
    host: &str,
    hostid: [u8; 16],
) -> farflash_core::Completion {
    farflash_core::testing::connect_hostid(q, NQN, host, hostid, qid, cntlid)
}

/// An enabled controller of host `hostid` and one I/O queue.
fn host(
    t: &std::sync::Arc<farflash_core::Target>,
    n: u8,
) -> (farflash_core::NvmeQueue, farflash_core::NvmeQueue) {
    let nqn = format!("nqn.2014-08.org.nvmexpress:uuid:host-{n}");
    let mut admin = farflash_core::testing::queue(t);
    let c = connect_as(&mut admin, 0, CNTLID_DYNAMIC, &nqn, [n; 16]);
    assert_eq!(c.status, Status::SUCCESS);
    let en = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: props::cc::ENABLE_DEFAULT as u64,
    }
    .to_sqe(2, fctype::PROPERTY_SET);
    assert_eq!(run(&mut admin, en, &[]).status, Status::SUCCESS);
    let mut q = farflash_core::testing::queue(t);
    let c2 = connect_as(&mut q, 1, c.result as u16, &nqn, [n; 16]);
    assert_eq!(c2.status, Status::SUCCESS);
    (admin, q)
}

fn resv(q: &mut farflash_core::NvmeQueue, opcode: u8, c: ResvCdw10, k1: u64, k2: u64) -> Status {
    let len = if opcode == io::RESERVATION_RELEASE {
        8
    } else {
        16
    };
    let s = Sqe {
        opcode,
        flags: PSDT_SGL,
        cid: 40,
        nsid: 1,
        dptr: SglDescriptor::transport(len),
        cdw10: c.to_cdw10(),
        ..Sqe::default()
    };
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&k1.to_le_bytes());
    d[8..].copy_from_slice(&k2.to_le_bytes());
    run(q, s, &d[..len as usize]).status
}

fn cdw(action: u8, rtype: u8) -> ResvCdw10 {
    ResvCdw10 {
        action,
        iekey: false,
        rtype,
        cptpl: 0,
    }
}

fn report(q: &mut farflash_core::NvmeQueue, eds: bool) -> (Status, Option<ResvStatus>) {
    let s = Sqe {
        opcode: io::RESERVATION_REPORT,
        flags: PSDT_SGL,
        cid: 41,
        nsid: 1,
        dptr: SglDescriptor::transport(4096),
        cdw10: 4096 / 4 - 1,
        cdw11: eds as u32,
        ..Sqe::default()
    };
    let c = run(q, s, &[]);
    let st = c
        .data
        .and_then(|(b, n)| ResvStatus::decode_ext(&b.as_slice()[..n as usize]));
    (c.status, st)
}

#[test]
fn two_hosts_register_acquire_conflict_report_and_notices() {
    let (t, _script) = target();
    let (mut admin_a, mut qa) = host(&t, 0xA);
    let (admin_b, mut qb) = host(&t, 0xB);
    // Identify: ONCS.Reservations, RESCAP (no PTPL file here).
    let mut s = admin_cmd(aop::IDENTIFY, 10, 4096);
    s.nsid = 1;
    let c = run(&mut admin_a, s, &[]);
    assert_eq!(
        IdNs::decode(c.data.as_ref().unwrap().0.as_slice()).rescap,
        0xFE
    );

    assert_eq!(
        resv(
            &mut qa,
            io::RESERVATION_REGISTER,
            cdw(wr::RREGA_REGISTER, 0),
            0,
            0xAA
        ),
        Status::SUCCESS
    );
    assert_eq!(
        resv(
            &mut qb,
            io::RESERVATION_REGISTER,
            cdw(wr::RREGA_REGISTER, 0),
            0,
            0xBB
        ),
        Status::SUCCESS
    );
    // PTPL without a file: invalid field.
    let set = ResvCdw10 {
        cptpl: wr::CPTPL_SET,
        ..cdw(wr::RREGA_REGISTER, 0)
    };
    assert_eq!(
        resv(&mut qa, io::RESERVATION_REGISTER, set, 0, 0xAA),
        Status::INVALID_FIELD.dnr()
    );
    // A takes Write Exclusive: B reads but may not write.
    assert_eq!(
        resv(
            &mut qa,
            io::RESERVATION_ACQUIRE,
            cdw(wr::RACQA_ACQUIRE, 1),
            0xAA,
            0
        ),
        Status::SUCCESS
    );
    assert_eq!(
        run(&mut qb, rw(io::WRITE, 50, 0, 512), &[0; 512]).status,
        Status::RESERVATION_CONFLICT
    );
    assert_eq!(
        run(&mut qb, rw(io::READ, 51, 0, 512), &[]).status,
        Status::SUCCESS
    );
    assert_eq!(
        run(&mut qa, rw(io::WRITE, 52, 0, 512), &[7; 512]).status,
        Status::SUCCESS
    );
    // Report: EDS only (128-bit host identifiers); both registrants, A holds.
    assert_eq!(report(&mut qb, false).0, Status::HOST_ID_INCONSISTENT.dnr());
    let (st, r) = report(&mut qb, true);
    assert_eq!(st, Status::SUCCESS);
    let r = r.unwrap();
    assert_eq!((r.rtype, r.regctls.len()), (1, 2));
    let a = r.regctls.iter().find(|x| x.hostid == [0xA; 16]).unwrap();
    assert!(a.holds && a.rkey == 0xAA);
    // B may not release A's reservation; a wrong key conflicts.
    assert_eq!(
        resv(
            &mut qb,
            io::RESERVATION_RELEASE,
            cdw(wr::RRELA_RELEASE, 1),
            0x99,
            0
        ),
        Status::RESERVATION_CONFLICT
    );
    // B parks an AER; A is preempted by B: A's host gets the notice.
    let Begin::Ready { slot, .. } = admin_a.begin(admin_cmd(aop::ASYNC_EVENT_REQUEST, 60, 0))
    else {
        panic!("AER");
    };
    admin_a.execute(slot);
    assert_eq!(
        resv(
            &mut qb,
            io::RESERVATION_ACQUIRE,
            cdw(wr::RACQA_PREEMPT_ABORT, 2),
            0xBB,
            0xAA
        ),
        Status::SUCCESS
    );
    admin_a.tick(Instant::now());
    let ev = completions(&mut admin_a);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        ev[0].result as u32,
        farflash_core::target::AEN_RESERVATION_LOG
    );
    let mut s = admin_cmd(aop::GET_LOG_PAGE, 61, 64);
    GetLogPage {
        lid: log_id::RESERVATION_NOTIFICATION,
        lsp: 0,
        rae: false,
        len: 64,
        offset: 0,
    }
    .fill_sqe(&mut s);
    let c = run(&mut admin_a, s, &[]);
    let page = c.data.unwrap().0.as_slice()[..64].to_vec();
    assert_eq!(
        (
            page[8],
            u32::from_le_bytes(page[12..16].try_into().unwrap())
        ),
        (wr::NOTICE_REGISTRATION_PREEMPTED, 1)
    );
    // A, preempted and unregistered, may neither read nor write (Exclusive Access).
    assert_eq!(
        run(&mut qa, rw(io::READ, 53, 0, 512), &[]).status,
        Status::RESERVATION_CONFLICT
    );
    assert_eq!(
        resv(
            &mut qa,
            io::RESERVATION_REGISTER,
            cdw(wr::RREGA_UNREGISTER, 0),
            0xAA,
            0
        ),
        Status::RESERVATION_CONFLICT
    );
    // B clears: everyone may do I/O again.
    assert_eq!(
        resv(
            &mut qb,
            io::RESERVATION_RELEASE,
            cdw(wr::RRELA_CLEAR, 0),
            0xBB,
            0
        ),
        Status::SUCCESS
    );
    assert_eq!(
        run(&mut qa, rw(io::WRITE, 54, 0, 512), &[1; 512]).status,
        Status::SUCCESS
    );
    drop(admin_b);
}

#[test]
fn ptpl_keeps_a_reservation_across_a_restart() {
    use farflash_core::config::{
        BackendKind, Config, NamespaceConfig, SubsystemConfig, TransportConfig,
    };
    let dir = std::env::temp_dir().join(format!("farflash-ptpl-core-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ns1.ptpl");
    let _ = std::fs::remove_file(&file);
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: TransportConfig::default(),
        subsystems: vec![SubsystemConfig::new(
            NQN,
            vec![NamespaceConfig {
                nsid: Some(1),
                ptpl_file: Some(file.clone()),
                ..NamespaceConfig::sized(BackendKind::Ram, 1 << 20)
            }],
        )],
        pools: Vec::new(),
    };
    let start = || {
        let subs = crate::reload::build_subsystems(&cfg).unwrap();
        farflash_core::Target::new(
            subs,
            TransportConfig::default(),
            vec!["127.0.0.1:4420".parse().unwrap()],
        )
    };
    let t = start();
    let (_admin, mut qa) = host(&t, 0xA);
    let set = ResvCdw10 {
        cptpl: wr::CPTPL_SET,
        ..cdw(wr::RREGA_REGISTER, 0)
    };
    assert_eq!(
        resv(&mut qa, io::RESERVATION_REGISTER, set, 0, 0xAA),
        Status::SUCCESS
    );
    assert_eq!(
        resv(
            &mut qa,
            io::RESERVATION_ACQUIRE,
            cdw(wr::RACQA_ACQUIRE, 3),
            0xAA,
            0
        ),
        Status::SUCCESS
    );
    drop((qa, _admin, t));
    // "Restart": the namespace is built again from the file.
    let t = start();
    let r = t
        .subsystem(NQN)
        .unwrap()
        .namespace(1)
        .unwrap()
        .resv
        .snapshot();
    assert!(r.ptpl);
    assert_eq!(
        (r.holder, r.rtype.map(|x| x as u8)),
        (Some([0xA; 16]), Some(3))
    );
    let (_admin_b, mut qb) = host(&t, 0xB);
    assert_eq!(
        run(&mut qb, rw(io::WRITE, 5, 0, 512), &[0; 512]).status,
        Status::RESERVATION_CONFLICT
    );
    let (_, rep) = report(&mut qb, true);
    assert!(rep.unwrap().ptpls);
    // A corrupt file: the namespace does not build, the error names the file.
    std::fs::write(&file, b"FFPTPL\x01\x00junk").unwrap();
    let e = crate::reload::build_subsystems(&cfg)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("ns1.ptpl") && e.contains("PTPL"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Storage shared by several targets (an RBD image, docs/rbd.md) hears of
/// ANA changes through `Backend::set_ana_optimized`: at start
/// (`claim_storage`), promotions before hosts can see them, demotions after,
/// and a storage that cannot take ownership refuses the promotion.
#[test]
fn ana_changes_reach_storage_that_follows_them() {
    use farflash_backend::{Backend, BackendQueue, SharedBackend};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// Records each call with the state hosts saw at that moment.
    struct Owner {
        inner: SharedBackend,
        sub: Mutex<Option<Arc<farflash_core::subsystem::Subsystem>>>,
        calls: Mutex<Vec<(bool, AnaState)>>,
        refuse: AtomicBool,
    }
    impl Backend for Owner {
        fn kind(&self) -> &'static str {
            "owner"
        }
        fn capacity(&self) -> u64 {
            self.inner.capacity()
        }
        fn block_size(&self) -> u32 {
            self.inner.block_size()
        }
        fn volatile_write_cache(&self) -> bool {
            false
        }
        fn open_queue(&self, depth: u32) -> std::io::Result<Box<dyn BackendQueue>> {
            self.inner.open_queue(depth)
        }
        fn sync_all(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn set_ana_optimized(&self, optimized: bool) -> std::io::Result<()> {
            if optimized && self.refuse.load(Ordering::Acquire) {
                return Err(std::io::Error::other("the lock is held elsewhere"));
            }
            let seen = self
                .sub
                .lock()
                .unwrap()
                .as_ref()
                .map_or(AnaState::Optimized, |s| {
                    s.ana().state(
                        farflash_core::listen::ListenTransport::Tcp,
                        &"127.0.0.1:4420".parse().unwrap(),
                        1,
                    )
                });
            self.calls.lock().unwrap().push((optimized, seen));
            Ok(())
        }
    }

    let (t, _script) = target();
    let sub = t.subsystem(NQN).unwrap();
    let old = sub.namespace(1).unwrap();
    let owner = Arc::new(Owner {
        inner: old.backend.clone(),
        sub: Mutex::new(Some(sub.clone())),
        calls: Mutex::new(Vec::new()),
        refuse: AtomicBool::new(false),
    });
    sub.replace_namespaces(vec![Arc::new(
        farflash_core::subsystem::Namespace::with_backend(&old, owner.clone(), "owner"),
    )]);
    let calls = || std::mem::take(&mut *owner.calls.lock().unwrap());

    crate::reload::claim_storage(&t).unwrap();
    assert_eq!(
        calls(),
        [(true, AnaState::Optimized)],
        "start: optimized here"
    );
    // Demoted: told after hosts see the new state.
    crate::manage::set_ana_state(&t, NQN, "127.0.0.1:4420", 1, "inaccessible").unwrap();
    assert_eq!(calls(), [(false, AnaState::Inaccessible)]);
    // Promoted: told before hosts see it (they still see inaccessible).
    crate::manage::set_ana_state(&t, NQN, "127.0.0.1:4420", 1, "optimized").unwrap();
    assert_eq!(calls(), [(true, AnaState::Inaccessible)]);
    // Non-optimized is not optimized: the storage lets go.
    crate::manage::set_ana_state(&t, NQN, "127.0.0.1:4420", 1, "non-optimized").unwrap();
    assert_eq!(calls(), [(false, AnaState::NonOptimized)]);
    // A promotion the storage refuses changes nothing, and says which namespace.
    owner.refuse.store(true, Ordering::Release);
    let e = crate::manage::set_ana_state(&t, NQN, "127.0.0.1:4420", 1, "optimized")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("namespace 1") && e.contains("held elsewhere"),
        "{e}"
    );
    assert_eq!(
        sub.ana().state(
            farflash_core::listen::ListenTransport::Tcp,
            &"127.0.0.1:4420".parse().unwrap(),
            1,
        ),
        AnaState::NonOptimized
    );
    assert!(calls().is_empty());
    *owner.sub.lock().unwrap() = None;
}

/// CPTPL (NVM §3.2.6): 01b is reserved and changes nothing, as in Linux
/// nvmet and SPDK; clearing PTPL without a PTPL file changes nothing (as
/// SPDK); setting it without one is Invalid Field (as SPDK).
#[test]
fn cptpl_reserved_and_clear_change_nothing_set_needs_a_file() {
    let (t, _script) = target();
    let (_admin, mut q) = host(&t, 0xC);
    let with = |cptpl: u8| ResvCdw10 {
        cptpl,
        ..cdw(wr::RREGA_REGISTER, 0)
    };
    assert_eq!(
        resv(&mut q, io::RESERVATION_REGISTER, with(0b01), 0, 0x11),
        Status::SUCCESS
    );
    let replace = |cptpl: u8| ResvCdw10 {
        cptpl,
        ..cdw(wr::RREGA_REPLACE, 0)
    };
    assert_eq!(
        resv(
            &mut q,
            io::RESERVATION_REGISTER,
            replace(wr::CPTPL_CLEAR),
            0x11,
            0x22
        ),
        Status::SUCCESS
    );
    assert_eq!(
        resv(
            &mut q,
            io::RESERVATION_REGISTER,
            replace(wr::CPTPL_SET),
            0x22,
            0x33
        ),
        Status::INVALID_FIELD.dnr()
    );
    // The refused command changed nothing: the key is still 0x22.
    let (st, r) = report(&mut q, true);
    assert_eq!(st, Status::SUCCESS);
    let r = r.unwrap();
    assert_eq!(r.regctls.len(), 1);
    assert_eq!(r.regctls[0].rkey, 0x22);
    assert!(!r.ptpls);
}
