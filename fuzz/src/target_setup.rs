//! The target under test: one subsystem with small RAM (and optionally
//! null) namespaces and small transport limits, chosen by one fuzz byte.

use crate::build::SUBNQN;
use farflash_control::build_subsystems;
use farflash_core::config::{
    BackendKind, Config, DataSizes, NamespaceConfig, Size, SubsystemConfig, TransportConfig,
};
use farflash_core::qos::QosConfig;
use farflash_core::Target;
use std::sync::Arc;

/// What the harness needs to know about the target it built.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub block_size: u32,
    pub icd: u32,
    pub max_h2c_data: u32,
    pub max_c2h_data: u32,
    pub max_io_size: u32,
    pub max_queue_depth: u32,
}

fn namespace(nsid: u32, backend: BackendKind, size: u64, bs: u32) -> NamespaceConfig {
    NamespaceConfig {
        nsid: Some(nsid),
        block_size: Some(bs),
        ..NamespaceConfig::sized(backend, size)
    }
}

/// `sel == 0` is close to the defaults (what the kernel-host seeds were
/// recorded against: queue depth 128, 8 KiB in-capsule data); other values
/// shrink the limits so that edge cases are cheap to reach. `ns` picks the
/// block size and extra namespaces (nsid 3: null, nsid 7: RAM, 4 KiB).
pub fn build(sel: u8, ns: u8) -> (Arc<Target>, Shape) {
    build_with(sel, ns, false)
}

/// [`build`], with `qos`: tight QoS limits on NSID 1 (a few I/Os and KiB
/// per second, 10 ms bursts), so that commands wait for tokens.
pub fn build_with(sel: u8, ns: u8, qos: bool) -> (Arc<Target>, Shape) {
    let pick = |shift: u8, v: [u32; 4]| v[(sel >> shift) as usize & 3];
    let transport = if sel == 0 {
        TransportConfig {
            threads: 1,
            ..TransportConfig::default()
        }
    } else {
        TransportConfig {
            data: DataSizes {
                in_capsule_data_size: pick(0, [8192, 0, 4096, 1024]),
                max_h2c_data: pick(6, [8192, 4096, 4100, 65536]),
                max_c2h_data: pick(6, [4096, 8192, 4097, 131072]),
            },
            max_queue_depth: pick(2, [128, 2, 4, 16]),
            max_io_queues: 2,
            max_io_size: pick(4, [65536, 4096, 8192, 262144]),
            keep_alive_granularity_ms: 1000,
            threads: 1,
            // Fields added later keep their defaults.
            ..TransportConfig::default()
        }
    };
    let bs = if ns & 1 != 0 { 4096 } else { 512 };
    let mut namespaces = vec![namespace(1, BackendKind::Ram, 4 << 20, bs)];
    if ns & 2 != 0 {
        namespaces.push(namespace(3, BackendKind::Null, 1 << 20, bs));
    }
    if ns & 4 != 0 {
        namespaces.push(namespace(7, BackendKind::Ram, 1 << 20, 4096));
    }
    let mut sub = SubsystemConfig::new(SUBNQN, namespaces);
    if qos {
        sub.qos = vec![QosConfig {
            nsid: Some(1),
            rw_ios_per_sec: Some(50),
            w_bytes_per_sec: Some(Size(64 << 10)),
            burst_ms: Some(10),
            ..QosConfig::default()
        }];
    }
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: transport.clone(),
        subsystems: vec![sub],
        pools: Vec::new(),
    };
    if let Err(e) = cfg.validate() {
        panic!("fuzz target config {sel:#x} is invalid: {e}");
    }
    let subs = build_subsystems(&cfg).expect("build the fuzz subsystem");
    let shape = Shape {
        block_size: bs,
        icd: transport.data.in_capsule_data_size,
        max_h2c_data: transport.data.max_h2c_data,
        max_c2h_data: transport.data.max_c2h_data,
        max_io_size: transport.max_io_size,
        max_queue_depth: transport.max_queue_depth,
    };
    let listen = "127.0.0.1:4420".parse().expect("address");
    (Target::new(subs, transport, vec![listen]), shape)
}
