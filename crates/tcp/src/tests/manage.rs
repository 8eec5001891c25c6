//! Management changes seen by connected hosts: hosts disallowed, namespaces
//! added and resized, the discovery log changing (farflash_control::manage,
//! the path of the JSON-RPC API and SIGHUP).

use super::*;
use farflash_control::manage;
use farflash_core::config::BackendKind;
use farflash_core::target::{AEN_DISCOVERY_CHANGED, AEN_NS_ATTR_CHANGED};
use std::time::Instant;

const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:other-host";

fn bring_up_as(h: &mut Host, subnqn: &str, host: &str) -> u16 {
    h.icreq(false, false);
    let r = h.connect_admin(subnqn, host, 2, 5000);
    assert_eq!(r.status, Status::SUCCESS, "{r:?}");
    assert_eq!(
        h.prop_set_cc(props::cc::ENABLE_DEFAULT).status,
        Status::SUCCESS
    );
    r.dw0 as u16
}

/// Set Features Asynchronous Event Configuration, then one parked AER.
fn arm_aer(h: &mut Host, aec: u32) {
    let set = Sqe {
        opcode: admin::SET_FEATURES,
        flags: PSDT_SGL,
        cdw10: 0x0B,
        cdw11: aec,
        ..Sqe::default()
    };
    assert_eq!(h.resp(set, &[]).status, Status::SUCCESS);
    let aer = Sqe {
        opcode: admin::ASYNC_EVENT_REQUEST,
        flags: PSDT_SGL,
        ..Sqe::default()
    };
    assert!(h.cmd(aer, &[]).is_empty(), "the AER is parked");
}

fn event(h: &mut Host) -> Option<u32> {
    h.q.tick(Instant::now());
    h.recv_all().iter().find_map(|r| match r {
        Rx::Resp(c) => Some(c.dw0),
        _ => None,
    })
}

#[test]
fn a_disallowed_host_loses_its_controllers_and_no_one_else_does() {
    let t = target_with(vec![HOST.into(), OTHER.into()], TransportConfig::default());
    let mut a = Host::new(&t);
    let ca = a.bring_up();
    let mut a_io = io_queue(&t, ca);
    let mut b = Host::new(&t);
    let cb = bring_up_as(&mut b, NQN, OTHER);
    let r = manage::disallow_host(&t, NQN, HOST).unwrap();
    assert_eq!(r.disconnected, 1);
    assert_eq!(r.hosts_changed, vec![NQN.to_owned()]);
    let now = Instant::now();
    for h in [&mut a, &mut a_io, &mut b] {
        h.q.tick(now);
    }
    assert!(
        a.q.wants_close() && a_io.q.wants_close(),
        "the disallowed host's queues close"
    );
    assert!(!b.q.wants_close(), "the other host keeps its controller");
    assert!(t.controller(ca).is_none());
    assert!(t.controller(cb).is_some());
    // It cannot come back.
    let mut again = Host::new(&t);
    again.icreq(false, false);
    assert_eq!(
        again.connect(0, CNTLID_DYNAMIC, HOST).status,
        Status::CONNECT_INVALID_HOST.dnr()
    );
    // The last host cannot be removed (that would open the subsystem to all).
    assert!(manage::disallow_host(&t, NQN, OTHER).is_err());
    assert!(t.controller(cb).is_some());
}

#[test]
fn a_read_only_grant_is_kept_refused_when_changed_and_changed_by_a_reload_explicitly() {
    let t = target_with(vec![OTHER.into()], TransportConfig::default());
    manage::allow_host(&t, NQN, HOST, None, true).unwrap();
    let sub = t.subsystem(NQN).unwrap();
    assert!(sub.host_read_only(HOST) && !sub.host_read_only(OTHER));
    assert_eq!(sub.to_config().read_only_hosts, [HOST]);
    let mut a = Host::new(&t);
    let ca = a.bring_up();
    assert!(t.controller(ca).unwrap().read_only());
    // The same grant again: EXISTS, as any host allowed already.
    assert!(matches!(
        manage::allow_host(&t, NQN, HOST, None, true),
        Err(manage::ManageError::Exists(_))
    ));
    // Another read_only: refused with the field named, nothing changed.
    for (host, ro) in [(HOST, false), (OTHER, true)] {
        match manage::allow_host(&t, NQN, host, None, ro) {
            Err(manage::ManageError::Conflict(m)) => {
                assert!(m.starts_with("read_only: ") && m.contains(host), "{m}")
            }
            other => panic!("{host}: {other:?}"),
        }
    }
    assert!(sub.host_read_only(HOST) && !sub.host_read_only(OTHER));
    assert!(
        t.controller(ca).is_some(),
        "a refused change disconnects no one"
    );
    // A configuration reloaded with the grant changed: the host's
    // controllers go (they were made under the old grant), others stay.
    let mut b = Host::new(&t);
    let cb = bring_up_as(&mut b, NQN, OTHER);
    let mut cfg = farflash_control::reload::current_config(&t);
    cfg.subsystems[0].read_only_hosts.clear();
    let r = farflash_control::reload::apply(&t, &cfg).unwrap();
    assert_eq!(r.disconnected, 1);
    assert!(t.controller(ca).is_none() && t.controller(cb).is_some());
    let mut again = Host::new(&t);
    let c2 = again.bring_up();
    assert!(!t.controller(c2).unwrap().read_only());
    // host_disallow takes the grant with the host.
    manage::disallow_host(&t, NQN, HOST).unwrap();
    manage::allow_host(&t, NQN, HOST, None, true).unwrap();
    manage::disallow_host(&t, NQN, HOST).unwrap();
    assert!(sub.read_only_hosts().is_empty());
}

#[test]
fn namespaces_added_and_resized_reach_the_host_through_one_event() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    arm_aer(&mut a, farflash_wire::identify::OAES_NS_ATTR);
    let (r, nsid) =
        manage::add_namespace(&t, NQN, NamespaceConfig::sized(BackendKind::Null, 1 << 20)).unwrap();
    assert_eq!(
        (nsid, r.changed.clone()),
        (2, vec![(NQN.to_owned(), vec![2])])
    );
    let r = manage::resize_namespace(&t, NQN, 2, 4 << 20).unwrap();
    assert_eq!(r.changed, vec![(NQN.to_owned(), vec![2])]);
    assert_eq!(event(&mut a), Some(AEN_NS_ATTR_CHANGED));
    // The Changed Namespace List names NSID 2 once.
    let mut glp = admin_sqe(admin::GET_LOG_PAGE, u32::MAX, 4096);
    farflash_wire::log::GetLogPage {
        lid: 0x04,
        lsp: 0,
        rae: false,
        len: 4096,
        offset: 0,
    }
    .fill_sqe(&mut glp);
    let log = data_of(&a.cmd(glp, &[]));
    assert_eq!(&log[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);
    // Identify Namespace reports the new size (NSZE, 512-byte blocks).
    let mut id = admin_sqe(admin::IDENTIFY, 2, 4096);
    id.cdw10 = cns::NAMESPACE as u32;
    let ns = data_of(&a.cmd(id, &[]));
    assert_eq!(
        u64::from_le_bytes(ns[..8].try_into().unwrap()),
        (4 << 20) / 512
    );
    // The I/O queue reaches the new blocks.
    let mut rd = rw(io::READ, (4 << 20) / 512 - 1, 1, 512, false);
    rd.nsid = 2;
    assert_eq!(q.resp(rd, &[]).status, Status::SUCCESS);
    // RAM cannot be resized in place; a wrong NSID is not found.
    assert!(matches!(
        manage::resize_namespace(&t, NQN, 1, 16 << 20),
        Err(manage::ManageError::Invalid(_))
    ));
    assert!(matches!(
        manage::remove_namespace(&t, NQN, 9),
        Err(manage::ManageError::NotFound(_))
    ));
    // Removing under I/O: commands to it fail cleanly, others go on.
    manage::remove_namespace(&t, NQN, 2).unwrap();
    let mut rd = rw(io::READ, 0, 1, 512, false);
    rd.nsid = 2;
    assert_eq!(q.resp(rd, &[]).status, Status::INVALID_NAMESPACE.dnr());
    assert_eq!(
        q.resp(rw(io::READ, 0, 1, 512, false), &[]).status,
        Status::SUCCESS
    );
}

#[test]
fn discovery_controllers_hear_of_discovery_log_changes() {
    let t = target();
    let mut d = Host::new(&t);
    bring_up_as(&mut d, farflash_wire::DISCOVERY_NQN, HOST);
    arm_aer(&mut d, farflash_wire::identify::OAES_DISCOVERY_CHANGE);
    let mut io_host = Host::new(&t);
    io_host.bring_up();
    arm_aer(&mut io_host, farflash_wire::identify::OAES_NS_ATTR);
    let before = t.genctr.load(std::sync::atomic::Ordering::Acquire);
    let sc = SubsystemConfig::new("nqn.2026-11.io.farflash:second", vec![ram_ns(None)]);
    let r = manage::create_subsystem(&t, sc).unwrap();
    assert_eq!(r.subsystems_added.len(), 1);
    assert_eq!(event(&mut d), Some(AEN_DISCOVERY_CHANGED));
    assert_eq!(
        event(&mut io_host),
        None,
        "an I/O controller has nothing to hear"
    );
    assert!(t.genctr.load(std::sync::atomic::Ordering::Acquire) > before);
    // Deleting it: its hosts are disconnected.
    let mut h2 = Host::new(&t);
    h2.icreq(false, false);
    assert_eq!(
        h2.connect_admin("nqn.2026-11.io.farflash:second", HOST, 3, 5000)
            .status,
        Status::SUCCESS
    );
    let r = manage::delete_subsystem(&t, "nqn.2026-11.io.farflash:second").unwrap();
    assert_eq!(r.disconnected, 1);
    h2.q.tick(Instant::now());
    assert!(h2.q.wants_close());
    // The last one goes too (as nvmet and SPDK allow): its controller is
    // disconnected and the target serves discovery alone (the discovery
    // log's generation moves on).
    let before = t.genctr.load(std::sync::atomic::Ordering::Acquire);
    let r = manage::delete_subsystem(&t, NQN).unwrap();
    assert_eq!(r.disconnected, 1);
    assert!(t.subsystems().is_empty());
    assert!(t.genctr.load(std::sync::atomic::Ordering::Acquire) > before);
    io_host.q.tick(Instant::now());
    assert!(io_host.q.wants_close());
    assert!(matches!(
        manage::delete_subsystem(&t, NQN),
        Err(manage::ManageError::NotFound(_))
    ));
}
