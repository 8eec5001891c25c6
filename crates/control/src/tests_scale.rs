//! Issue 33 at the command layer: a discovery log of 1,024 subsystems read
//! in pieces, namespace lists that change one namespace among thousands,
//! and the limits on subsystems and namespaces.

use crate::manage::{self, ManageError};
use crate::reload::build_subsystems;
use crate::reload::ApplyError;
use farflash_core::config::{BackendKind, Config, ConfigError, NamespaceConfig, SubsystemConfig};
use farflash_core::testing::{connect_to, queue, run, HOST};
use farflash_core::Completion;
use farflash_core::Target;
use farflash_wire::discovery::{decode_header, DiscEntry, DISC_ENTRY_LEN, DISC_HEADER_LEN};
use farflash_wire::fabrics::{PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::log::GetLogPage;
use farflash_wire::opcode::{admin, fctype, log_id};
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Sqe, Status};
use std::sync::Arc;

fn nqn(i: usize) -> String {
    format!("nqn.2026-11.io.farflash.scale:s{i:05}")
}

fn null_ns() -> NamespaceConfig {
    NamespaceConfig::sized(BackendKind::Null, 1 << 20)
}

fn config(subsystems: usize, per: usize) -> Config {
    Config {
        subsystems: (0..subsystems)
            .map(|i| SubsystemConfig::new(nqn(i), (0..per).map(|_| null_ns()).collect()))
            .collect(),
        ..Config::default()
    }
}

fn target_of(cfg: &Config) -> Arc<Target> {
    cfg.validate().unwrap();
    let subs = build_subsystems(cfg).unwrap();
    Target::new(
        subs,
        cfg.transport.clone(),
        vec!["127.0.0.1:4420".parse().unwrap()],
    )
}

/// A discovery controller's admin queue, enabled.
fn discovery_queue(t: &Arc<Target>) -> farflash_core::NvmeQueue {
    let mut q = queue(t);
    let c = connect_to(
        &mut q,
        farflash_wire::DISCOVERY_NQN,
        HOST,
        0,
        CNTLID_DYNAMIC,
    );
    assert_eq!(c.status, Status::SUCCESS);
    let en = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: props::cc::ENABLE_DEFAULT as u64,
    }
    .to_sqe(2, fctype::PROPERTY_SET);
    assert_eq!(run(&mut q, en, &[]).status, Status::SUCCESS);
    q
}

/// Get Log Page 70h: `len` bytes from `offset` (LPOL/LPOU, NUMDL/NUMDU).
fn get_log(q: &mut farflash_core::NvmeQueue, cid: u16, len: u32, offset: u64) -> Completion {
    let mut sqe = Sqe {
        opcode: admin::GET_LOG_PAGE,
        flags: PSDT_SGL,
        cid,
        dptr: SglDescriptor::transport(len),
        ..Sqe::default()
    };
    GetLogPage {
        lid: log_id::DISCOVERY,
        lsp: 0,
        rae: true,
        len: len as u64,
        offset,
    }
    .fill_sqe(&mut sqe);
    run(q, sqe, &[])
}

fn data(c: &Completion) -> Vec<u8> {
    assert_eq!(c.status, Status::SUCCESS);
    let (buf, len) = c.data.as_ref().expect("log data");
    buf.as_slice()[..*len as usize].to_vec()
}

/// As libnvme reads it: the header's first 20 bytes, the entries in 4 KiB
/// pieces from offset 1024, the header again. Returns (GENCTR before,
/// GENCTR after, entries).
fn read_in_pieces(
    q: &mut farflash_core::NvmeQueue,
    between: &mut dyn FnMut(usize),
) -> (u64, u64, Vec<DiscEntry>) {
    let (genctr, numrec) = decode_header(&data(&get_log(q, 1, 20, 0)));
    let total = numrec as usize * DISC_ENTRY_LEN;
    let mut entries = Vec::new();
    let mut off = 0;
    let mut piece = 0;
    while off < total {
        let n = (total - off).min(4096);
        let d = data(&get_log(q, 2, n as u32, (DISC_HEADER_LEN + off) as u64));
        assert_eq!(d.len(), n);
        entries.extend_from_slice(&d);
        off += n;
        piece += 1;
        between(piece);
    }
    let (again, _) = decode_header(&data(&get_log(q, 3, 20, 0)));
    let list = entries
        .chunks_exact(DISC_ENTRY_LEN)
        .map(DiscEntry::decode)
        .collect();
    (genctr, again, list)
}

#[test]
fn a_discovery_log_of_1024_subsystems_reads_whole_in_pieces() {
    let t = target_of(&config(1024, 1));
    let mut q = discovery_queue(&t);
    let (g1, g2, entries) = read_in_pieces(&mut q, &mut |_| {});
    assert_eq!(g1, g2, "nothing changed: GENCTR holds across the pieces");
    assert_eq!(
        entries.len(),
        1025,
        "every subsystem, then the discovery subsystem"
    );
    for (i, e) in entries.iter().take(1024).enumerate() {
        assert_eq!(e.subnqn, nqn(i));
        assert_eq!(
            (e.traddr.as_str(), e.trsvcid.as_str()),
            ("127.0.0.1", "4420")
        );
    }
    assert_eq!(entries[1024].subnqn, farflash_wire::DISCOVERY_NQN);

    // The whole log in one command (1 MiB + 1 KiB) is the same bytes.
    let whole = data(&get_log(
        &mut q,
        4,
        (DISC_HEADER_LEN + 1025 * DISC_ENTRY_LEN) as u32,
        0,
    ));
    let e512 = DISC_HEADER_LEN + 512 * DISC_ENTRY_LEN;
    assert_eq!(DiscEntry::decode(&whole[e512..]).subnqn, nqn(512));
    // Past the end: zeroes; an offset beyond the log or not a multiple of
    // 4 is an invalid field (Base §5.16).
    let tail = data(&get_log(&mut q, 5, 8192, (whole.len() - 1024) as u64));
    assert_eq!(&tail[..1024], &whole[whole.len() - 1024..]);
    assert!(tail[1024..].iter().all(|&b| b == 0));
    let past = get_log(&mut q, 6, 4096, whole.len() as u64 + 4);
    assert_eq!(past.status, Status::INVALID_FIELD.dnr());
    let odd = get_log(&mut q, 7, 4096, 1026);
    assert_eq!(odd.status, Status::INVALID_FIELD.dnr());
}

#[test]
fn a_change_between_pieces_moves_genctr_and_the_next_read_sees_it() {
    let t = target_of(&config(300, 1));
    let mut q = discovery_queue(&t);
    let t2 = t.clone();
    let (g1, g2, entries) = read_in_pieces(&mut q, &mut |piece| {
        if piece == 10 {
            let sc = SubsystemConfig::new(nqn(9999), vec![null_ns()]);
            manage::create_subsystem(&t2, sc).unwrap();
        }
    });
    assert!(g2 > g1, "the host must see that the log changed under it");
    // What it read was of one size; the next read has the new subsystem.
    assert_eq!(entries.len(), 301);
    let (g3, g4, entries) = read_in_pieces(&mut q, &mut |_| {});
    assert_eq!((g3, g4), (g2, g2));
    assert_eq!(entries.len(), 302);
    assert!(entries.iter().any(|e| e.subnqn == nqn(9999)));
}

#[test]
fn one_namespace_among_thousands_changes_alone() {
    let t = target_of(&config(4, 2000));
    let sub = t.subsystem(&nqn(2)).unwrap();
    let before = sub.namespaces();
    let (r, nsid) = manage::add_namespace(&t, &nqn(2), null_ns()).unwrap();
    assert_eq!(nsid, 2001);
    assert_eq!(r.changed, vec![(nqn(2), vec![2001])]);
    let after = sub.namespaces();
    assert_eq!(after.len(), 2001);
    for (a, b) in before.iter().zip(after.iter()) {
        assert!(Arc::ptr_eq(a, b), "namespace {} was rebuilt", a.nsid);
    }
    let r = manage::remove_namespace(&t, &nqn(2), 7).unwrap();
    assert_eq!(r.changed, vec![(nqn(2), vec![7])]);
    let r = manage::resize_namespace(&t, &nqn(2), 9, 2 << 20).unwrap();
    assert_eq!(r.changed, vec![(nqn(2), vec![9])]);
    assert_eq!(sub.namespace(9).unwrap().blocks, (2 << 20) / 512);
    // The other subsystems were not touched.
    for i in [0, 1, 3] {
        assert_eq!(t.subsystem(&nqn(i)).unwrap().generation(), 1);
    }
}

fn limit_message(e: ManageError) -> String {
    match e {
        ManageError::Apply(ApplyError::Invalid(ConfigError::Limit(m))) => m,
        other => panic!("not a limit: {other}"),
    }
}

#[test]
fn limits_refuse_with_the_setting_named_and_change_nothing() {
    let mut cfg = config(2, 3);
    cfg.transport.limits.max_subsystems = 2;
    cfg.transport.limits.max_namespaces_per_subsystem = 4;
    cfg.transport.limits.max_namespaces = 7;
    let t = target_of(&cfg);

    // A fourth namespace fits, a fifth does not.
    manage::add_namespace(&t, &nqn(0), null_ns()).unwrap();
    let m = limit_message(manage::add_namespace(&t, &nqn(0), null_ns()).unwrap_err());
    assert!(
        m.contains("transport.limits.max_namespaces_per_subsystem (4)"),
        "{m}"
    );
    // 4 + 3 = 7 in all; an eighth is over max_namespaces.
    let m = limit_message(manage::add_namespace(&t, &nqn(1), null_ns()).unwrap_err());
    assert!(m.contains("transport.limits.max_namespaces (7)"), "{m}");
    let sc = SubsystemConfig::new(nqn(5), vec![]);
    let m = limit_message(manage::create_subsystem(&t, sc).unwrap_err());
    assert!(m.contains("transport.limits.max_subsystems (2)"), "{m}");
    assert_eq!(t.subsystems().len(), 2);
    assert_eq!(t.subsystem(&nqn(0)).unwrap().namespaces().len(), 4);
    assert_eq!(t.subsystem(&nqn(1)).unwrap().namespaces().len(), 3);

    // A configuration over a limit is refused by name: as a file...
    let mut over = config(3, 1);
    over.transport.limits.max_subsystems = 2;
    let e = over.validate().unwrap_err();
    assert!(matches!(e, ConfigError::Limit(_)), "{e}");
    assert!(
        e.to_string()
            .contains("transport.limits.max_subsystems (2)"),
        "{e}"
    );
    let mut over = config(1, 5);
    over.transport.limits.max_namespaces_per_subsystem = 4;
    let e = over.validate().unwrap_err().to_string();
    assert!(
        e.contains(&nqn(0)) && e.contains("max_namespaces_per_subsystem (4)"),
        "{e}"
    );
    // ... and as a reload, against the running limits.
    let e = crate::reload::apply(&t, &config(3, 1)).unwrap_err();
    assert!(
        e.to_string()
            .contains("transport.limits.max_subsystems (2)"),
        "{e}"
    );
    assert_eq!(t.subsystems().len(), 2);
}

#[test]
fn the_changed_namespace_list_of_a_live_controller_stays_bounded() {
    let t = target_of(&config(1, 1));
    let mut admin = queue(&t);
    let c = connect_to(&mut admin, &nqn(0), HOST, 0, CNTLID_DYNAMIC);
    assert_eq!(c.status, Status::SUCCESS);
    let ctrl = t.controller(c.result as u16).unwrap();
    let mut cfg = crate::reload::current_config(&t);
    cfg.subsystems[0].namespaces = (0..3000).map(|_| null_ns()).collect();
    crate::reload::apply(&t, &cfg).unwrap();
    let n = ctrl.lock().changed_ns.len();
    assert_eq!(
        n,
        farflash_core::target::CHANGED_NS_MAX + 1,
        "more than 1024: the log's overflow mark"
    );
}
