//! Namespaces changing at run time (reload, AEN, Changed Namespace List).

use super::*;

#[test]
fn namespace_change_completes_the_aer_and_reaches_io_queues() {
    let t = target();
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    // Enable Namespace Attribute Notices and park an AER.
    let aec = Sqe {
        opcode: admin::SET_FEATURES,
        flags: PSDT_SGL,
        cdw10: 0x0B,
        cdw11: 1 << 8,
        ..Sqe::default()
    };
    assert_eq!(a.resp(aec, &[]).status, Status::SUCCESS);
    let aer = Sqe {
        opcode: admin::ASYNC_EVENT_REQUEST,
        flags: PSDT_SGL,
        ..Sqe::default()
    };
    assert!(a.cmd(aer, &[]).is_empty());
    // Reload with a second namespace.
    let mut cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: t.transport.clone(),
        subsystems: vec![],
        pools: Vec::new(),
    };
    let mut sc = SubsystemConfig::new(NQN, vec![]);
    let ram = |nsid: u32| ram_ns(Some(nsid));
    sc.namespaces = vec![ram(1), ram(2)];
    cfg.subsystems.push(sc.clone());
    let r = farflash_control::reload::apply(&t, &cfg).unwrap();
    assert_eq!(r.changed, vec![(NQN.to_owned(), vec![2])]);
    // Namespace 1 was kept as it was (same configuration): its data survives.
    a.q.tick(std::time::Instant::now());
    let rx = a.recv_all();
    assert!(
        matches!(rx[..], [Rx::Resp(c)] if c.dw0 == farflash_core::target::AEN_NS_ATTR_CHANGED),
        "{rx:?}"
    );
    let mut glp = admin_sqe(admin::GET_LOG_PAGE, u32::MAX, 4096);
    farflash_wire::log::GetLogPage {
        lid: 0x04,
        lsp: 0,
        rae: false,
        len: 4096,
        offset: 0,
    }
    .fill_sqe(&mut glp);
    let rx = a.cmd(glp, &[]);
    let Rx::Data(_, log, _) = &rx[0] else {
        panic!("{rx:?}")
    };
    assert_eq!(&log[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);
    // The I/O queue sees namespace 2 at its next command.
    let mut r2 = rw(io::WRITE, 0, 1, 512, true);
    r2.nsid = 2;
    assert_eq!(q.resp(r2, &[7u8; 512]).status, Status::SUCCESS);
    // Remove namespace 1: I/O to it now fails with Invalid Namespace.
    cfg.subsystems[0].namespaces = vec![ram(2)];
    assert_eq!(
        farflash_control::reload::apply(&t, &cfg).unwrap().changed,
        vec![(NQN.to_owned(), vec![1])]
    );
    assert_eq!(
        q.resp(rw(io::READ, 0, 1, 512, false), &[]).status,
        Status::INVALID_NAMESPACE.dnr()
    );
    // A reload that changes nothing reports nothing.
    assert!(farflash_control::reload::apply(&t, &cfg)
        .unwrap()
        .changed
        .is_empty());
}
