//! The iSCSI engine of `farflash perf` (libiscsi) against a real peer:
//! tgt's user-space target (`tgtd`, installed by tests/run.sh) on
//! 127.0.0.1, a free port and its own control socket, exporting a file as
//! LUN 1. A crc32c verify job writes a self-checking pattern through the
//! engine at queue depth 8 and reads it back; `farflash perf --iscsi` then
//! reads the LUN and reports the bytes in its JSON. tgtd is killed (and the
//! file removed) on success and on failure alike (drop guards).

use farflash_bench::engine::iscsi::{Iscsi, IscsiTarget};
use farflash_bench::engine::{Done, Engine};
use farflash_bench::size::BlockSizes;
use farflash_bench::{JobSpec, PollMode, Rw, Target};
use farflash_sweep::tgt::Tgtd;
use std::path::PathBuf;
use std::process::Command;

const SIZE: u64 = 8 << 20;

/// A scratch folder removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("ff-iscsi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spec(t: &IscsiTarget, rw: Rw, verify: bool) -> JobSpec {
    JobSpec {
        rate_iops: None,
        target: Target::Iscsi(t.clone()),
        rw,
        rwmixread: 50,
        bs: BlockSizes::Fixed(16384),
        iodepth: 8,
        numjobs: 1,
        runtime: None,
        ramp_time: std::time::Duration::ZERO,
        size: Some(SIZE),
        offset: 0,
        verify,
        cpus_allowed: None,
        poll: PollMode::Block,
        seed: 7,
        progress: false,
    }
}

#[test]
fn verify_through_tgtd_and_perf_cli() {
    let dir = Scratch::new("verify");
    let file = dir.0.join("lun.img");
    std::fs::write(&file, vec![0u8; SIZE as usize]).unwrap();
    let tgtd = Tgtd::start(&dir.0).expect("starting tgtd");
    let url = tgtd.add_target(1, &file).expect("creating the target");
    let t = IscsiTarget::parse(&url).unwrap();

    // Write the pattern (random order) and read it back, checking every block.
    let r = farflash_bench::run(&spec(&t, Rw::RandWrite, true)).expect("verify job");
    assert_eq!(r.capacity, SIZE, "READ CAPACITY (16) of the LUN");
    assert_eq!(r.block_size, 512);
    assert_eq!(r.total.verify_errors, 0);
    assert_eq!(r.total.write.errors + r.total.read.errors, 0);
    assert_eq!(r.total.write.bytes, SIZE, "the whole region written");
    assert_eq!(r.total.read.bytes, SIZE, "and read back");
    assert!(r.total.write.clat.n > 0 && r.total.write.clat.max_ns > 0);

    // The engine by hand: a write and a read of the same block at QD 2,
    // slots recycled, then an engine dropped with reads still in flight
    // (its tasks are cancelled and freed, nothing is left behind).
    {
        let mut e = Iscsi::new(&t, 2, 4096).unwrap();
        assert_eq!((e.block_size(), e.capacity()), (512, SIZE));
        let w = e.alloc_slot().unwrap();
        e.buf_mut(w)[..4096].fill(0xA5);
        e.submit(w, true, 1 << 20, 4096).unwrap();
        e.commit().unwrap();
        let mut done: Vec<Done> = Vec::new();
        while done.is_empty() {
            e.wait(&mut done).unwrap();
        }
        assert_eq!(
            done[0],
            Done {
                slot: w,
                error: None
            }
        );
        e.release(w);
        let r = e.alloc_slot().unwrap();
        e.buf_mut(r)[..4096].fill(0);
        e.submit(r, false, 1 << 20, 4096).unwrap();
        e.commit().unwrap();
        done.clear();
        while done.is_empty() {
            e.wait(&mut done).unwrap();
        }
        assert_eq!(done[0].error, None);
        assert!(e.buf(r)[..4096].iter().all(|&b| b == 0xA5));
        e.release(r);
        // Not whole blocks: refused before anything is sent.
        let s = e.alloc_slot().unwrap();
        assert!(e.submit(s, false, 100, 512).is_err());
        e.release(s);
    }
    {
        let mut e = Iscsi::new(&t, 4, 65536).unwrap();
        for k in 0..4u64 {
            let s = e.alloc_slot().unwrap();
            e.submit(s, false, k * 65536, 65536).unwrap();
        }
        assert_eq!(e.alloc_slot(), None);
        e.commit().unwrap();
    }

    // The pattern reached tgt's backing file (it was all zeros).
    let on_disk = std::fs::read(&file).unwrap();
    let zero_blocks = on_disk
        .chunks(512)
        .filter(|b| b.iter().all(|&x| x == 0))
        .count();
    assert!(
        zero_blocks < 4,
        "{zero_blocks} blocks still zero in the file"
    );

    // The CLI path: a sequential read job with a JSON report.
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args([
            "perf",
            "--iscsi",
            &url,
            "--rw",
            "read",
            "--bs",
            "64k",
            "--iodepth",
            "4",
            "--size",
            "4m",
            "--poll",
            "block",
            "--output-format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perf --iscsi: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let read = &v["jobs"][0]["read"];
    assert_eq!(read["io_bytes"].as_u64(), Some(4 << 20), "{v}");
    assert!(
        read["clat_ns"]["percentile"]["99.000000"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );
}

#[test]
fn wrong_target_name_is_a_clear_error() {
    let dir = Scratch::new("badname");
    let file = dir.0.join("lun2.img");
    std::fs::write(&file, vec![0u8; 1 << 20]).unwrap();
    let tgtd = Tgtd::start(&dir.0).expect("starting tgtd");
    tgtd.add_target(1, &file).unwrap();
    let t = IscsiTarget::parse(&format!(
        "iscsi://{}/iqn.2026-11.io.farflash:nobody/1",
        tgtd.portal
    ))
    .unwrap();
    let e = farflash_bench::run(&spec(&t, Rw::Read, false)).unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains("iSCSI login"), "{e}");
}
