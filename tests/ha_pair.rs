//! Two `farflash serve` processes export one subsystem over one file, as
//! docs/ha.md describes (issue 15): the same SUBNQN, serial number and
//! namespace NGUID through both, CNTLIDs from disjoint ranges (what Linux
//! native multipath needs to join them into one subsystem with two paths,
//! host/core.c `nvme_validate_cntlid`), data written through one read back
//! through the other, and a target killed with SIGKILL and restarted comes
//! back with the same identity and range.

mod common;

use common::Serve;
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use std::time::Duration;

const NQN: &str = "nqn.2026-11.io.farflash:ha-pair";
const SERIAL: &str = "FFHA0001";
const NGUID: &str = "6d1d2c3a4b5c4d6e8f90a1b2c3d4e5f6";

fn config(dir: &std::path::Path, img: &std::path::Path, min: u16, max: u16) -> String {
    let path = dir.join(format!("ha-{min}.toml"));
    let t = format!(
        "[[subsystem]]\nnqn = \"{NQN}\"\nserial = \"{SERIAL}\"\ncntlid_min = {min}\ncntlid_max = {max}\n\
         [[subsystem.namespace]]\nnsid = 1\nbackend = \"file\"\npath = \"{}\"\nnguid = \"{NGUID}\"\n",
        img.display()
    );
    std::fs::write(&path, t).expect("write the config");
    path.display().to_string()
}

fn connect(s: &Serve) -> Controller {
    let mut o = ConnectOptions::new(s.addr.clone(), NQN);
    o.command_timeout = Duration::from_secs(20);
    Controller::connect_with_queues(&o, 1).expect("connect")
}

fn io(c: &Controller) -> farflash_host::IoQueue {
    c.io_queue(
        1,
        IoQueueOptions {
            depth: 4,
            max_io: 64 << 10,
        },
    )
    .expect("I/O queue")
}

#[test]
fn two_targets_export_one_subsystem_with_disjoint_cntlids() {
    let dir = std::env::temp_dir().join(format!("farflash-ha-pair-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let img = dir.join("ha.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(4 << 20))
        .expect("create the shared file");
    let (cfg_a, cfg_b) = (config(&dir, &img, 1, 999), config(&dir, &img, 1000, 1999));
    let mut a = Serve::start(&["--config", &cfg_a]);
    let b = Serve::start(&["--config", &cfg_b]);

    let (ca, cb) = (connect(&a), connect(&b));
    let (ia, ib) = (ca.info(), cb.info());
    assert!((1..=999).contains(&ia.cntlid), "A's CNTLID {}", ia.cntlid);
    assert!(
        (1000..=1999).contains(&ib.cntlid),
        "B's CNTLID {}",
        ib.cntlid
    );
    assert_eq!((ia.id.sn.trim(), ib.id.sn.trim()), (SERIAL, SERIAL));
    assert_eq!((ia.id.subnqn.as_str(), ib.id.subnqn.as_str()), (NQN, NQN));
    let nguid = ca.identify_ns(1).expect("identify A").nguid;
    assert_eq!(nguid, cb.identify_ns(1).expect("identify B").nguid);
    assert_eq!(nguid[0], 0x6d);

    // Written through A, read through B: one file behind both paths.
    let (mut qa, mut qb) = (io(&ca), io(&cb));
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    qa.write_at(1, 16, 8, &data).expect("write through A");
    let mut back = vec![0u8; 4096];
    qb.read_at(1, 16, 8, &mut back).expect("read through B");
    assert_eq!(back, data);

    // SIGKILL A (no flush, no shutdown) and start it again from the same
    // configuration: same identity, a CNTLID from the same range, the data
    // B wrote meanwhile visible through it.
    drop(qa);
    drop(ca);
    a.child.kill().expect("SIGKILL target A");
    let _ = a.child.wait();
    let data2: Vec<u8> = data.iter().map(|b| !b).collect();
    qb.write_at(1, 16, 8, &data2)
        .expect("write through B while A is down");
    let a2 = Serve::start(&["--config", &cfg_a]);
    let ca2 = connect(&a2);
    let ia2 = ca2.info();
    assert!(
        (1..=999).contains(&ia2.cntlid),
        "restarted A's CNTLID {}",
        ia2.cntlid
    );
    assert_eq!(ia2.id.sn.trim(), SERIAL);
    assert_eq!(ca2.identify_ns(1).expect("identify A again").nguid, nguid);
    let mut qa2 = io(&ca2);
    qa2.read_at(1, 16, 8, &mut back)
        .expect("read through restarted A");
    assert_eq!(back, data2);
    drop((qa2, qb));
    let _ = ca2.shutdown();
    let _ = cb.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
