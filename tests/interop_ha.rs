//! Linux native NVMe multipath against two farflash targets (issue 15,
//! docs/ha.md): both export one subsystem over one file with the same
//! NQN, serial and NGUID and disjoint CNTLID ranges; the guest kernel (QEMU
//! VM, tests/linux-host) must see one subsystem with two controllers and one
//! namespace head, and fio verify on it must pass
//! (tests/linux-host/guest/multipath.sh). `#[ignore]`d like the other VM
//! tests: `cargo test --test interop_ha -- --ignored --nocapture`.

mod common;

use common::Serve;
use std::path::Path;
use std::process::Command;

const NQN: &str = "nqn.2026-11.io.farflash:ha-multipath";

fn config(dir: &Path, img: &Path, min: u16, max: u16) -> String {
    let path = dir.join(format!("ha-{min}.toml"));
    let t = format!(
        "[[subsystem]]\nnqn = \"{NQN}\"\nserial = \"FFHA0002\"\ncntlid_min = {min}\ncntlid_max = {max}\n\
         [[subsystem.namespace]]\nnsid = 1\nbackend = \"file\"\npath = \"{}\"\nnguid = \"0f1e2d3c4b5a69788796a5b4c3d2e1f0\"\n",
        img.display()
    );
    std::fs::write(&path, t).expect("write the config");
    path.display().to_string()
}

#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn linux_multipath_joins_two_farflash_targets() {
    let dir = std::env::temp_dir().join(format!("farflash-interop-ha-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let img = dir.join("ha.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(16 << 20))
        .expect("create the shared file");
    let a = Serve::start(&["--config", &config(&dir, &img, 1, 999)]);
    let b = Serve::start(&["--config", &config(&dir, &img, 1000, 1999)]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("tests/linux-host/run-linux-host"))
        .args(["-t", "600"])
        .args(["-p", &format!("{}:{}", a.port, a.port)])
        .args(["-p", &format!("{}:{}", b.port, b.port)])
        .args(["-e", &format!("NQN={NQN}")])
        .arg(root.join("tests/linux-host/guest/multipath.sh"))
        .output()
        .expect("run run-linux-host");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && text.lines().any(|l| l.starts_with("PASS: multipath ")),
        "multipath.sh did not pass ({})",
        out.status
    );
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
