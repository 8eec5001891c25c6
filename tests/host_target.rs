//! The farflash host (library and CLI) against `farflash serve`: discover,
//! identify, connect with digests on/off, R2T writes, several queues,
//! Flush / Write Zeroes / DSM, keep-alive, perf --verify with mixed sizes,
//! and perf's honesty checked against the target's SMART counters.

mod host_support;

use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use host_support::{cli, cli_ok, json, Serve};
use std::time::Duration;

fn opts(s: &Serve, hd: bool, dd: bool) -> ConnectOptions {
    let mut o = ConnectOptions::new(s.addr(), &s.nqn);
    o.hdr_digest = hd;
    o.data_digest = dd;
    o.command_timeout = Duration::from_secs(20);
    o
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 9) as u8)
        .collect()
}

#[test]
fn discover_lists_the_subsystem() {
    let s = Serve::start("16M", &[]);
    let port = s.port.to_string();
    let out = cli_ok(&["discover", "-t", "tcp", "-a", "127.0.0.1", "-s", &port]);
    assert!(out.contains("Discovery Log Number of Records"), "{out}");
    assert!(out.contains(&format!("subnqn:  {}", s.nqn)), "{out}");
    assert!(out.contains("trtype:  tcp"), "{out}");
    let v = json(&cli_ok(&[
        "discover",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "--output-format=json",
    ]));
    assert!(v["genctr"].is_u64());
    let recs = v["records"].as_array().expect("records");
    let r = recs
        .iter()
        .find(|r| r["subnqn"] == s.nqn.as_str())
        .expect("our subsystem");
    assert_eq!(r["trtype"], "tcp");
    assert_eq!(r["adrfam"], "ipv4");
    assert_eq!(r["subtype"], "nvme subsystem");
    assert_eq!(r["trsvcid"], port.as_str());
    assert_eq!(r["traddr"], "127.0.0.1");
    assert!(r["portid"].is_u64() && r["treq"].is_string());
}

#[test]
fn identify_controller_and_namespace() {
    let s = Serve::start("16M", &[]);
    let port = s.port.to_string();
    let out = cli_ok(&["identify", "-a", "127.0.0.1", "-s", &port, "-n", &s.nqn]);
    assert!(out.contains("NVME Identify Controller:"), "{out}");
    assert!(out.contains(&format!("subnqn    : {}", s.nqn)), "{out}");
    let v = json(&cli_ok(&[
        "identify",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        &s.nqn,
        "--nsid",
        "1",
        "-o",
        "json",
    ]));
    let c = &v["controller"];
    assert_eq!(c["subnqn"], s.nqn.as_str());
    for f in [
        "vid", "cntlid", "ver", "mdts", "nn", "sgls", "kas", "maxcmd", "ioccsz", "iorcsz",
    ] {
        assert!(c[f].is_u64(), "controller field {f}: {c}");
    }
    assert!(c["kas"].as_u64().unwrap() > 0 && c["ioccsz"].as_u64().unwrap() >= 4);
    let n = &v["namespace"];
    assert_eq!(n["nsze"].as_u64(), Some(16 << 20 >> 9));
    assert_eq!(n["lbafs"][0]["ds"].as_u64(), Some(9));
    assert_eq!(n["nguid"].as_str().map(str::len), Some(32));
    // A bad NQN is refused with a Connect error, not a hang or a panic.
    let o = cli(&[
        "identify",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        "nqn.nope:x",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("error"));
}

/// Writes (in-capsule and R2T sized), reads back and compares on queue 1
/// with every digest combination.
#[test]
fn connect_with_digests_on_and_off_and_r2t_writes() {
    let s = Serve::start("16M", &[]);
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        let ctrl = Controller::connect_with_queues(&opts(&s, hd, dd), 1).expect("connect");
        let info = ctrl.info().clone();
        assert!(info.io_queues >= 1);
        let icd = info.icd_max() as usize;
        let big = (info.max_transfer() as usize).min(256 << 10);
        assert!(big > icd, "need a write larger than in-capsule ({icd})");
        let mut q = ctrl
            .io_queue(
                1,
                IoQueueOptions {
                    // QD 1 (Connect SQSIZE 1) on some rounds.
                    depth: if hd { 1 } else { 8 },
                    max_io: big as u32,
                },
            )
            .expect("I/O queue");
        for (i, len) in [512usize, 4096, icd, icd + 512, big]
            .into_iter()
            .enumerate()
        {
            let data = pattern(len, i as u8 + hd as u8 * 2 + dd as u8 * 4);
            let slba = (i as u64) * 1024;
            q.write_at(1, slba, (len / 512) as u32, &data)
                .expect("write");
            let mut back = vec![0u8; len];
            q.read_at(1, slba, (len / 512) as u32, &mut back)
                .expect("read");
            assert!(back == data, "len {len} hd {hd} dd {dd}: data differs");
        }
        drop(q);
        ctrl.shutdown().expect("shutdown");
    }
}

#[test]
fn several_queues_flush_write_zeroes_deallocate() {
    let s = Serve::start("16M", &[]);
    let ctrl = Controller::connect_with_queues(&opts(&s, false, false), 4).expect("connect");
    assert!(ctrl.info().io_queues >= 4);
    let mut qs: Vec<_> = (1..=4)
        .map(|qid| {
            ctrl.io_queue(
                qid,
                IoQueueOptions {
                    depth: 16,
                    max_io: 8192,
                },
            )
            .expect("queue")
        })
        .collect();
    // Each queue writes its own block concurrently (submit on all, then poll all).
    for (i, q) in qs.iter_mut().enumerate() {
        let cid = q.alloc_cid().unwrap();
        q.buf_mut(cid).unwrap()[..4096].copy_from_slice(&pattern(4096, i as u8));
        q.submit_write(cid, 1, i as u64 * 8, 8, 4096).unwrap();
    }
    for q in qs.iter_mut() {
        let mut out = vec![];
        while out.is_empty() {
            q.wait(&mut out, Duration::from_secs(5)).unwrap();
        }
        out[0].check().unwrap();
    }
    for (i, q) in qs.iter_mut().enumerate() {
        let mut b = vec![0u8; 4096];
        // Read through another queue than the writer's.
        let _ = i;
        q.read_at(1, ((i + 1) % 4) as u64 * 8, 8, &mut b).unwrap();
        assert_eq!(b, pattern(4096, ((i + 1) % 4) as u8));
    }
    let q = &mut qs[0];
    q.flush(1).expect("flush");
    q.write_zeroes(1, 0, 8).expect("write zeroes");
    let mut b = vec![1u8; 4096];
    q.read_at(1, 0, 8, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0), "write zeroes");
    q.deallocate(1, &[(8, 8), (16, 8)]).expect("deallocate");
    q.read_at(1, 8, 8, &mut b).unwrap();
    assert!(
        b.iter().all(|&x| x == 0),
        "deallocated blocks read as zeroes (DLFEAT)"
    );
    // Beyond the namespace: a typed NVMe status error.
    let e = q.read_at(1, 1 << 40, 8, &mut b).unwrap_err();
    assert!(e.status().is_some(), "{e}");
    drop(qs);
    ctrl.shutdown().unwrap();
}

/// KATO 1 s with the keep-alive thread: the association survives 3 idle seconds.
#[test]
fn keep_alive_keeps_the_controller() {
    let s = Serve::start("16M", &[]);
    let mut o = opts(&s, false, false);
    o.kato_ms = 1000;
    let mut ctrl = Controller::connect_with_queues(&o, 1).expect("connect");
    ctrl.start_keep_alive().unwrap();
    let mut q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth: 2,
                max_io: 4096,
            },
        )
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let mut b = vec![0u8; 4096];
    q.read_at(1, 0, 8, &mut b).expect("I/O after 3 s idle");
    assert!(ctrl.keep_alive_failure().is_none());
    let _ = ctrl.smart_log().expect("admin still alive");
}

#[test]
fn perf_verify_crc32c_with_mixed_block_sizes() {
    let s = Serve::start("64M", &[]);
    let port = s.port.to_string();
    for (rw, sizes, extra) in [
        (
            "randwrite",
            "--bssplit=4k/40:64k/30:256k/30",
            vec!["--numjobs", "2"],
        ),
        ("write", "--bsrange=4k-128k", vec!["-g", "-G"]),
    ] {
        let mut args = vec![
            "perf",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
            "-n",
            &s.nqn,
            "--rw",
            rw,
            sizes,
            "--iodepth",
            "16",
            "--size",
            "16M",
            "--verify=crc32c",
            "--output-format=json",
        ];
        args.extend(extra.iter());
        let v = json(&cli_ok(&args));
        let a = &v["aggregate"];
        assert_eq!(a["verify_errors"], 0);
        let w = a["write"]["io_bytes"].as_u64().unwrap();
        let r = a["read"]["io_bytes"].as_u64().unwrap();
        assert_eq!(w, 16 << 20, "every byte of the region written once");
        assert_eq!(r, w, "and read back once");
    }
}

fn smart(s: &Serve) -> farflash_host::logs::SmartLog {
    let ctrl = Controller::connect_with_queues(&opts(s, false, false), 0).expect("connect");
    let l = ctrl.smart_log().expect("SMART log");
    ctrl.shutdown().unwrap();
    l
}

/// What perf reports it did is what the target counted (SMART log 02h).
#[test]
fn perf_counts_match_the_targets_smart_log() {
    let s = Serve::start("64M", &[]);
    let port = s.port.to_string();
    let before = smart(&s);
    let v = json(&cli_ok(&[
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        &s.nqn,
        "--rw",
        "randrw",
        "--rwmixread",
        "60",
        "--bsrange",
        "4k-64k",
        "--iodepth",
        "8",
        "--numjobs",
        "2",
        "--runtime",
        "2",
        "-o",
        "json",
    ]));
    let after = smart(&s);
    let a = &v["aggregate"];
    let (rio, wio) = (
        a["read"]["total_ios"].as_u64().unwrap(),
        a["write"]["total_ios"].as_u64().unwrap(),
    );
    let (rb, wb) = (
        a["read"]["io_bytes"].as_u64().unwrap(),
        a["write"]["io_bytes"].as_u64().unwrap(),
    );
    assert!(rio > 0 && wio > 0);
    assert_latency_split(&a["read"]);
    assert_latency_split(&a["write"]);
    assert_eq!(v["schema_version"], 2);
    assert_eq!(
        after.host_read_commands - before.host_read_commands,
        rio,
        "read commands"
    );
    assert_eq!(
        after.host_write_commands - before.host_write_commands,
        wio,
        "write commands"
    );
    // Data units: thousands of 512-byte units, rounded up: the delta can be
    // one off the exact quotient either way.
    for (du, bytes) in [
        (after.data_units_read - before.data_units_read, rb),
        (after.data_units_written - before.data_units_written, wb),
    ] {
        let exact = bytes as f64 / 512_000.0;
        assert!(
            (du as f64 - exact).abs() <= 1.0,
            "data units {du} vs {exact:.2} ({bytes} bytes)"
        );
    }
}

/// `--rate_iops` (fio's option): each job issues at most that many I/Os a
/// second; the target counts exactly what perf reports. Only the upper
/// bound is exact (a loaded machine may fall short of the rate).
#[test]
fn perf_rate_iops_caps_each_job() {
    let s = Serve::start("16M", &[]);
    let port = s.port.to_string();
    let before = smart(&s);
    let v = json(&cli_ok(&[
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        &s.nqn,
        "--rw",
        "randread",
        "--bs",
        "4k",
        "--iodepth",
        "4",
        "--numjobs",
        "2",
        "--runtime",
        "1",
        "--rate_iops",
        "300",
        "--poll",
        "block",
        "-o",
        "json",
    ]));
    let after = smart(&s);
    assert_eq!(v["options"]["rate_iops"], 300);
    let ios = v["aggregate"]["read"]["total_ios"].as_u64().unwrap();
    // Job runtimes in ms (fio's); the pacer starts just before measuring.
    let ms = (0..2)
        .map(|j| v["jobs"][j]["job_runtime"].as_u64().unwrap())
        .max()
        .unwrap();
    let secs = ms.max(1000) as f64 / 1000.0 + 0.05;
    // Per job: one at the start, then one per 1/300 s.
    let most = 2.0 * (300.0 * secs + 1.0);
    assert!(
        ios > 0 && ios as f64 <= most,
        "{ios} I/Os in {secs} s, at most {most}"
    );
    assert_eq!(after.host_read_commands - before.host_read_commands, ios);
}

#[test]
fn perf_rejects_bad_arguments_without_panicking() {
    let s = Serve::start("16M", &[]);
    let port = s.port.to_string();
    for bad in [
        vec!["--bs", "1000"],
        vec!["--bs", "1M"], // beyond MDTS
        vec!["--iodepth", "60000"],
        vec!["--rw", "sideways"],
        vec!["--nsid", "9"],
        vec!["--rate_iops", "0"],
    ] {
        let mut args = vec![
            "perf",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
            "-n",
            &s.nqn,
            "--size",
            "1M",
        ];
        args.extend(bad.iter());
        let o = cli(&args);
        assert!(!o.status.success(), "{bad:?} should fail");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
    }
}

/// Verify must catch a target that loses data: writes to a null namespace
/// are discarded, so every block reads back wrong; perf exits non-zero and
/// names the LBAs.
#[test]
fn perf_verify_reports_mismatches_with_their_lba() {
    let s = Serve::start("16M", &["--null", "16M"]);
    let port = s.port.to_string();
    let o = cli(&[
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        &s.nqn,
        "--nsid",
        "2",
        "--rw",
        "write",
        "--bs",
        "4k",
        "--iodepth",
        "4",
        "--size",
        "64k",
        "--verify=crc32c",
    ]);
    assert!(
        !o.status.success(),
        "verify against a null namespace must fail"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    // 64 KiB of 512-byte blocks: 128 mismatches, from LBA 0 to LBA 127.
    assert!(err.contains("mismatch at LBA 0 "), "{err}");
    assert!(err.contains("mismatch at LBA 127 "), "{err}");
    assert!(
        err.contains("verify failed: 128 mismatching blocks"),
        "{err}"
    );
}

/// The local baseline: a file through the backend's io_uring engine.
#[test]
fn perf_local_file_verify_and_json() {
    let dir = std::env::temp_dir().join(format!("farflash-host-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("disk.img");
    let path = f.to_str().unwrap();
    let v = json(&cli_ok(&[
        "perf",
        "--filename",
        path,
        "--size",
        "8M",
        "--rw",
        "randwrite",
        "--bssplit=4k/50:64k/50",
        "--iodepth",
        "8",
        "--verify=crc32c",
        "-o",
        "json",
    ]));
    assert_eq!(v["aggregate"]["verify_errors"], 0);
    assert_eq!(v["aggregate"]["read"]["io_bytes"].as_u64(), Some(8 << 20));
    let v = json(&cli_ok(&[
        "perf",
        "--filename",
        path,
        "--rw",
        "randread",
        "--bs",
        "4k",
        "--iodepth",
        "4",
        "--runtime",
        "1",
        "--cpus-allowed",
        "0",
        "-o",
        "json",
    ]));
    let r = &v["jobs"][0]["read"];
    assert!(r["total_ios"].as_u64().unwrap() > 0);
    assert!(
        r["clat_ns"]["percentile"]["99.990000"].as_u64().unwrap()
            >= r["clat_ns"]["min"].as_u64().unwrap()
    );
    assert_latency_split(r);
    assert!(v["sys_cpu"]["idle"].is_number() && v["cpu"]["usr_pct"].is_number());
    let _ = std::fs::remove_dir_all(&dir);
}

/// fio's split in a DIR object: slat, clat and lat cover every I/O, and per
/// I/O lat = slat + clat, so the means add up and lat bounds both parts.
fn assert_latency_split(r: &serde_json::Value) {
    let n = r["total_ios"].as_u64().unwrap();
    let f = |k: &str, f: &str| r[k][f].as_f64().unwrap();
    for k in ["slat_ns", "clat_ns", "lat_ns"] {
        assert_eq!(r[k]["N"].as_u64(), Some(n), "{k}.N");
        assert!(
            f(k, "min") <= f(k, "mean") && f(k, "mean") <= f(k, "max"),
            "{k}"
        );
    }
    let sum = f("slat_ns", "mean") + f("clat_ns", "mean");
    assert!(
        (f("lat_ns", "mean") - sum).abs() <= 1e-6 * sum + 1.0,
        "lat mean"
    );
    assert!(f("lat_ns", "min") >= f("clat_ns", "min") && f("lat_ns", "max") >= f("clat_ns", "max"));
    assert!(f("lat_ns", "min") >= f("slat_ns", "min"));
    let p50 = |k: &str| r[k]["percentile"]["50.000000"].as_u64().unwrap();
    assert!(p50("lat_ns") >= p50("clat_ns"));
    assert!(r["slat_ns"].get("percentile").is_none());
}
