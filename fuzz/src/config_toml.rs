//! `config_toml`: bytes as a `--config` file (TOML) through
//! `Config::from_toml`, and as a `--rbd POOL/IMAGE` value through
//! `RbdConfig::from_str`. Invariants: nothing panics; a configuration that
//! is accepted is valid, and written back as TOML it reads back equal (what
//! `save_config` relies on), `rbd` tables included; an accepted
//! `POOL/IMAGE` has both parts non-empty and prints back as the input.
//! Nothing is opened: only parsing and validation run.

use farflash_core::config::{Config, RbdConfig};

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = text.parse::<RbdConfig>() {
        assert!(!r.pool.is_empty() && !r.image.is_empty(), "{text:?}");
        assert_eq!(format!("{}/{}", r.pool, r.image), text);
    }
    let Ok(cfg) = Config::from_toml(text, "fuzz") else {
        return;
    };
    cfg.validate().expect("an accepted configuration is valid");
    let back = toml::to_string(&cfg).expect("an accepted configuration serializes");
    let again = Config::from_toml(&back, "fuzz (written back)")
        .unwrap_or_else(|e| panic!("written back, it does not parse: {e}\n{back}"));
    assert_eq!(again, cfg, "round trip changed the configuration:\n{back}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds that must reach the round trip do parse (so the corpus
    /// replay checks it), and the `rbd` tables come back.
    #[test]
    fn accepted_seeds_reach_the_round_trip() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/config_toml");
        for name in ["example", "rbd"] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            Config::from_toml(&text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            run(text.as_bytes());
        }
        let text = std::fs::read_to_string(dir.join("rbd")).unwrap();
        let cfg = Config::from_toml(&text, "rbd").unwrap();
        let rbd: Vec<_> = cfg.subsystems[0]
            .namespaces
            .iter()
            .filter_map(|n| n.rbd.as_ref())
            .collect();
        assert_eq!(rbd.len(), 2);
        assert!(toml::to_string(&cfg)
            .unwrap()
            .contains("keyring = \"/etc/ceph/gw.keyring\""));
        for bad in ["rbd-with-size", "rbd-bad-fields"] {
            let text = std::fs::read_to_string(dir.join(bad)).unwrap();
            assert!(Config::from_toml(&text, bad).is_err(), "{bad} accepted");
        }
    }

    /// Listeners with a transport (strings and tables) reach the round
    /// trip; an unknown transport is refused.
    #[test]
    fn rdma_listener_seeds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/config_toml");
        let text = std::fs::read_to_string(dir.join("rdma-listeners")).unwrap();
        let cfg = Config::from_toml(&text, "rdma-listeners").unwrap();
        assert_eq!(cfg.listen[2], "rdma:[::1]:4420");
        run(text.as_bytes());
        let text = std::fs::read_to_string(dir.join("rdma-bad-transport")).unwrap();
        assert!(Config::from_toml(&text, "rdma-bad-transport").is_err());
    }

    /// ANA entries for one transport (field and prefix) reach the round
    /// trip with it; a prefix and a field that disagree are refused.
    #[test]
    fn ana_transport_seeds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/config_toml");
        let text = std::fs::read_to_string(dir.join("ana-transport")).unwrap();
        let cfg = Config::from_toml(&text, "ana-transport").unwrap();
        assert_eq!(cfg.subsystems[0].ana[1].transport.as_deref(), Some("rdma"));
        run(text.as_bytes());
        let text = std::fs::read_to_string(dir.join("ana-bad-transport")).unwrap();
        let e = Config::from_toml(&text, "ana-bad-transport").unwrap_err();
        assert!(e.to_string().contains("transport"), "{e}");
    }
}
