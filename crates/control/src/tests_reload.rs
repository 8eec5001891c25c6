//! Reloads of a live subsystem's settings that cannot change.

use crate::reload::build_subsystems;
use farflash_core::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig};
use farflash_core::Target;

/// A reload cannot move the CNTLID range of a live subsystem; it says so.
#[test]
fn a_reload_keeps_a_live_subsystems_cntlid_range() {
    const NQN: &str = "nqn.2026-11.io.farflash:cntlid";
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: Default::default(),
        subsystems: vec![SubsystemConfig {
            cntlid_min: Some(100),
            cntlid_max: Some(101),
            ..SubsystemConfig::new(
                NQN,
                vec![NamespaceConfig::sized(BackendKind::Null, 1 << 20)],
            )
        }],
        pools: Vec::new(),
    };
    cfg.validate().unwrap();
    let subs = build_subsystems(&cfg).unwrap();
    let addr = "127.0.0.1:4420".parse().unwrap();
    let t = Target::new(subs, cfg.transport.clone(), vec![addr]);
    let mut moved = cfg.clone();
    moved.subsystems[0].cntlid_min = Some(200);
    moved.subsystems[0].cntlid_max = Some(300);
    let report = crate::reload::apply(&t, &moved).unwrap();
    assert!(
        report.ignored.iter().any(|m| m.contains("cntlid_min")),
        "{report:?}"
    );
    let kept = t.subsystems()[0].cntlids;
    assert!(kept.contains(100) && kept.contains(101) && !kept.contains(200));
    let same = crate::reload::apply(&t, &cfg).unwrap();
    assert!(same.ignored.is_empty(), "{same:?}");
}
