//! Listeners added and removed at run time with two transports on one
//! address: `listeners.add` / `listeners.remove` and a reload ask the
//! event loops (a recording `ListenerControl` here) for exactly the
//! transport named, and only that transport's queues lose their listener.

use crate::manage::{add_listener, remove_listener};
use crate::reload::build_subsystems;
use crate::reload::{apply_with, current_config, ListenerControl};
use farflash_core::config::{
    BackendKind, Config, NamespaceConfig, SubsystemConfig, TransportConfig,
};
use farflash_core::listen::ListenTransport;
use farflash_core::target::{Listener, Target};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

const TCP: u8 = farflash_wire::discovery::TRTYPE_TCP;
const RDMA: u8 = farflash_wire::discovery::TRTYPE_RDMA;

/// What the target asked of the event loops.
#[derive(Default)]
struct Recorder {
    added: Mutex<Vec<String>>,
    removed: Mutex<Vec<(SocketAddr, ListenTransport)>>,
}

impl ListenerControl for Recorder {
    fn add(&self, addr: &str) -> Result<SocketAddr, String> {
        let (_, a) = farflash_core::listen::split_listen(addr)?;
        self.added.lock().unwrap().push(addr.to_owned());
        a.parse().map_err(|e| format!("{e}"))
    }
    fn remove(&self, addr: SocketAddr, transport: ListenTransport) {
        self.removed.lock().unwrap().push((addr, transport));
    }
}

/// TCP and RDMA on 10.0.2.15:4420.
fn target() -> Arc<Target> {
    let cfg = Config {
        listen: vec!["10.0.2.15:4420".into(), "rdma:10.0.2.15:4420".into()],
        transport: TransportConfig::default(),
        subsystems: vec![SubsystemConfig::new(
            "nqn.2026-11.io.farflash:listen",
            vec![NamespaceConfig::sized(BackendKind::Null, 1 << 20)],
        )],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).unwrap();
    let addr: SocketAddr = "10.0.2.15:4420".parse().unwrap();
    let ls = [ListenTransport::Tcp, ListenTransport::Rdma]
        .into_iter()
        .map(|t| Listener {
            config: farflash_core::listen::join_listen(t, "10.0.2.15:4420"),
            addr,
            transport: t,
        })
        .collect();
    Target::with_listeners(subs, cfg.transport.clone(), ls)
}

#[test]
fn the_saved_configuration_keeps_each_listeners_transport() {
    let t = target();
    assert_eq!(
        current_config(&t).listen,
        ["10.0.2.15:4420", "rdma:10.0.2.15:4420"]
    );
    // Applying it again changes no listener.
    let ctl = Recorder::default();
    let r = apply_with(&t, &current_config(&t), Some(&ctl)).unwrap();
    assert!(r.is_empty(), "{r:?}");
    assert!(ctl.added.lock().unwrap().is_empty());
}

#[test]
fn rdma_listeners_are_added_and_removed_at_run_time() {
    let t = target();
    let a: SocketAddr = "10.0.2.15:4420".parse().unwrap();
    let new: SocketAddr = "10.0.2.15:4422".parse().unwrap();
    let ctl = Recorder::default();
    let r = add_listener(&t, &ctl, "rdma:10.0.2.15:4422").unwrap();
    assert_eq!(r.listeners_added, [new]);
    assert_eq!(*ctl.added.lock().unwrap(), ["rdma:10.0.2.15:4422"]);
    assert!(t.serves_on(RDMA, &new));
    assert!(!t.serves_on(TCP, &new), "an RDMA listener is not a TCP one");

    // Removing the RDMA listener of the shared address: only it goes, and
    // only RDMA queues that reached it lose their listener.
    let gen = t.listeners_generation();
    let r = remove_listener(&t, &ctl, "rdma:10.0.2.15:4420").unwrap();
    assert_eq!(r.listeners_removed, [a]);
    assert_eq!(
        *ctl.removed.lock().unwrap(),
        [(a, ListenTransport::Rdma)],
        "the TCP listener on the same address stays"
    );
    assert_ne!(t.listeners_generation(), gen);
    assert!(!t.serves_on(RDMA, &a));
    assert!(t.serves_on(TCP, &a));
    assert!(t.serves_on(RDMA, &new));

    // A plain address names the TCP listener.
    ctl.removed.lock().unwrap().clear();
    remove_listener(&t, &ctl, "10.0.2.15:4420").unwrap();
    assert_eq!(*ctl.removed.lock().unwrap(), [(a, ListenTransport::Tcp)]);
    assert!(!t.serves_on(TCP, &a));
    assert!(t.serves_on(RDMA, &new));
    // Gone: an error naming it.
    let e = remove_listener(&t, &ctl, "rdma:10.0.2.15:4420").unwrap_err();
    assert!(e.to_string().contains("rdma:10.0.2.15:4420"), "{e}");
}

#[test]
fn a_reload_removes_an_rdma_listener_by_its_transport() {
    let t = target();
    let a: SocketAddr = "10.0.2.15:4420".parse().unwrap();
    let ctl = Recorder::default();
    let mut cfg = current_config(&t);
    cfg.listen = vec!["rdma:10.0.2.15:4420".into(), "rdma:10.0.2.15:4423".into()];
    let r = apply_with(&t, &cfg, Some(&ctl)).unwrap();
    assert_eq!(r.listeners_added, ["10.0.2.15:4423".parse().unwrap()]);
    assert_eq!(r.listeners_removed, [a]);
    assert_eq!(*ctl.removed.lock().unwrap(), [(a, ListenTransport::Tcp)]);
    assert!(t.serves_on(RDMA, &a));
    assert!(!t.serves_on(TCP, &a));
}

#[test]
fn ana_states_set_per_transport_through_management() {
    use crate::manage::{ana_states, set_ana_state};
    use farflash_wire::ana::AnaState;
    let t = target();
    let nqn = "nqn.2026-11.io.farflash:listen";
    let states = |t: &Target| -> Vec<(String, AnaState)> {
        ana_states(t, nqn)
            .unwrap()
            .into_iter()
            .filter(|r| r.anagrpid == 1)
            .map(|r| (r.listen, r.state))
            .collect()
    };
    let row = |l: &str, s| (l.to_owned(), s);
    let (tcp, rdma) = ("10.0.2.15:4420", "rdma:10.0.2.15:4420");
    set_ana_state(&t, nqn, rdma, 1, "inaccessible").unwrap();
    assert_eq!(
        states(&t),
        [
            row(tcp, AnaState::Optimized),
            row(rdma, AnaState::Inaccessible)
        ]
    );
    // The plain address: both transports, replacing the RDMA entry.
    set_ana_state(&t, nqn, tcp, 1, "non-optimized").unwrap();
    assert_eq!(
        states(&t),
        [
            row(tcp, AnaState::NonOptimized),
            row(rdma, AnaState::NonOptimized)
        ]
    );
    assert_eq!(t.subsystem(nqn).unwrap().ana().config.len(), 1);
    // One transport back to optimized: an explicit entry, as one for
    // both would apply otherwise.
    set_ana_state(&t, nqn, rdma, 1, "optimized").unwrap();
    assert_eq!(
        states(&t),
        [
            row(tcp, AnaState::NonOptimized),
            row(rdma, AnaState::Optimized)
        ]
    );
    // Both optimized: no entry left.
    set_ana_state(&t, nqn, tcp, 1, "optimized").unwrap();
    assert!(t.subsystem(nqn).unwrap().ana().config.is_empty());
    // A transport the address does not have.
    let e = set_ana_state(&t, nqn, "rdma:10.0.2.15:4421", 1, "change").unwrap_err();
    assert!(e.to_string().contains("rdma:10.0.2.15:4421"), "{e}");
}
