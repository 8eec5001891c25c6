//! `farflash sweep`: every built-in plan with a tiny runtime against a
//! RAM-backed file (/dev/shm when present), checking the results folder:
//! schema-valid JSON, one CSV row per point, non-empty PNG and SVG per
//! plot, and figures that agree with the underlying perf JSON and with the
//! target's SMART counters. Also: a plan file, and an external target
//! without a local file (local runs skipped with a stated reason);
//! `--transport tcp` (the default, output as before) and `--transport
//! rdma` without an RDMA device (refused before anything starts). RDMA
//! runs themselves need Soft-RoCE: `tests/interop_rdma.rs`
//! (`farflash_sweep_tcp_and_rdma_in_guest`).

mod common;

use farflash_sweep::results::{Mode, Results, CSV_HEADER};
use farflash_sweep::{Kind, Transport};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory, RAM-backed when /dev/shm exists, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("ff-sweep-{tag}-{}", std::process::id()));
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

fn sweep(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .arg("sweep")
        .args(args)
        .output()
        .expect("run farflash sweep");
    assert!(
        out.status.success(),
        "farflash sweep {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a plan with 0.3 s per point (after a 0.1 s ramp: the first I/Os
/// of a fresh job can take longer than a tiny runtime) on a 16 MiB backing
/// file in `s`.
fn run_tiny(s: &Scratch, plan: &str) -> PathBuf {
    run_tiny_with(s, plan, &[])
}

/// `run_tiny` with more sweep options.
fn run_tiny_with(s: &Scratch, plan: &str, extra: &[&str]) -> PathBuf {
    let out = s.0.join("out");
    let dir = s.0.join("data");
    let mut args = vec![
        "--plan",
        plan,
        "--runtime",
        "0.3",
        "--ramp",
        "0.1",
        "--size",
        "16M",
        "--dir",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    sweep(&args);
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

/// Checks a results folder thoroughly; returns its results.
fn check_folder(dir: &Path, both_sides: bool) -> Results {
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    farflash_sweep::schema::validate_results(&text).unwrap();
    let r: Results = serde_json::from_str(&text).unwrap();
    let n = r.plan.values.len();
    let sides = usize::from(both_sides) + r.settings.transports.len();
    assert_eq!(r.points.len(), n * sides, "one point per value and side");
    for i in 0..n {
        for &t in &r.settings.transports {
            assert!(r.point_of(Kind::remote(t), i).is_some());
        }
        if both_sides {
            assert!(r.point(Mode::Local, i).is_some());
        }
    }
    // CSV: the header, then one row per point in the JSON's order.
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], CSV_HEADER);
    assert_eq!(rows.len(), r.points.len() + 1);
    let cols = CSV_HEADER.split(',').count();
    for (row, p) in rows[1..].iter().zip(&r.points) {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), cols, "{row}");
        assert_eq!(f[1], p.mode.name());
        assert_eq!(f[2], p.label);
        let iops: f64 = f[9].parse().unwrap();
        assert!(
            (iops - p.figures.iops).abs() <= 0.06,
            "{iops} vs {}",
            p.figures.iops
        );
    }
    for p in &r.points {
        check_point(&r, p);
    }
    // perf may report no I/O for a point whose tiny runtime ends before its
    // jobs' buffers are set up (large bs x iodepth in a debug build); most
    // points of each side must have done I/O all the same.
    for m in [Mode::Local, Mode::Remote] {
        let pts: Vec<_> = r.points.iter().filter(|p| p.mode == m).collect();
        let busy = pts.iter().filter(|p| p.figures.total_ios > 0).count();
        assert!(
            busy * 2 >= pts.len(),
            "{}: {busy} of {} points did I/O",
            m.name(),
            pts.len()
        );
    }
    let idle: Vec<_> = r
        .points
        .iter()
        .filter(|p| p.figures.total_ios == 0)
        .collect();
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for p in idle {
        assert!(report.contains(&format!(
            "{} {}={} did no I/O",
            p.mode.name(),
            r.plan.vary.name(),
            p.label
        )));
    }
    // Plots: a non-empty PNG and SVG each (the transport figure only with RDMA points).
    let plots = farflash_sweep::plot::plots(&r);
    assert_eq!(
        plots.contains(&farflash_sweep::plot::TRANSPORT_PLOT),
        r.has_rdma()
    );
    for stem in &plots {
        let png = std::fs::read(dir.join(format!("{stem}.png"))).unwrap();
        assert!(png.len() > 10_000, "{stem}.png is {} bytes", png.len());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("<text"), "{stem}.svg");
        assert!(svg.contains("local") || !both_sides);
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Summary"));
    for stem in &plots {
        assert!(
            report.contains(&format!("]({stem}.png)")),
            "{stem} in report"
        );
    }
    assert!(report.contains(&r.environment.commit));
    r
}

/// A point's figures against its own perf JSON and the target's counters.
fn check_point(r: &Results, p: &farflash_sweep::results::Point) {
    let perf = &p.perf;
    let agg = &perf["aggregate"];
    let dir = if r.plan.writes() { "write" } else { "read" };
    let f = &p.figures;
    let sum = |k: &str| agg["read"][k].as_f64().unwrap() + agg["write"][k].as_f64().unwrap();
    assert!(close(f.iops, sum("iops")));
    assert!(close(f.bw_bytes, sum("bw_bytes")));
    assert_eq!(f.total_ios as f64, sum("total_ios"));
    let pct = |k: &str| agg[dir]["lat_ns"]["percentile"][k].as_f64().unwrap() / 1e3;
    assert!(close(f.lat_us.p20, pct("20.000000")));
    assert!(close(f.lat_us.p50, pct("50.000000")));
    assert!(close(f.lat_us.p95, pct("95.000000")));
    assert!(close(f.lat_us.p99, pct("99.000000")));
    assert!(f.lat_us.p20 <= f.lat_us.p50 && f.lat_us.p50 <= f.lat_us.p95);
    assert!(f.lat_us.p95 <= f.lat_us.p99);
    // The point's parameters are what perf was asked.
    let o = &perf["options"];
    assert_eq!(o["rw"], Value::from(r.plan.rw.clone()));
    assert_eq!(o["bs_min"].as_u64(), Some(p.params.bs));
    assert_eq!(o["iodepth"].as_u64(), Some(p.params.iodepth));
    assert_eq!(o["numjobs"].as_u64(), Some(p.params.numjobs));
    assert_eq!(
        perf["jobs"].as_array().unwrap().len() as u64,
        p.params.numjobs
    );
    // CPU: host figures are perf's own, in % of all CPUs.
    let ncpu = r.environment.nproc as f64;
    assert!(close(
        p.cpu.host.usr,
        perf["cpu"]["usr_pct"].as_f64().unwrap() / ncpu
    ));
    assert!(close(
        p.cpu.host.soft.unwrap(),
        perf["sys_cpu"]["soft"].as_f64().unwrap()
    ));
    if let Some(e) = p.iops_per_cpu_pct {
        let busy = p.cpu.host.busy + p.cpu.target.map(|t| t.busy).unwrap_or(0.0);
        assert!(close(e, f.iops / busy));
    }
    match p.mode {
        Mode::Local => {
            assert!(p.cpu.target.is_none() && p.target_counters.is_none());
            assert!(p.command.contains("--filename"));
        }
        Mode::Remote => {
            let t = p.transport.unwrap_or(Transport::Tcp);
            assert!(
                p.command.contains(&format!(" -t {} ", t.name())),
                "{}",
                p.command
            );
            assert!(p.cpu.target.is_some(), "target CPU of a spawned target");
            // CPU per I/O: busy % of all CPUs x CPUs x runtime / I/Os, both sides.
            if f.total_ios > 0 {
                let c = r.cpu_per_io(p).expect("CPU per I/O");
                let secs = f.runtime_ms as f64 / 1e3;
                let per = |busy: f64| busy / 100.0 * ncpu * secs / f.total_ios as f64 * 1e6;
                assert!(close(c.host, per(p.cpu.host.busy)));
                assert!(close(c.target.unwrap(), per(p.cpu.target.unwrap().busy)));
                assert!(c.host > 0.0, "host CPU per I/O at {}", p.label);
            }
            let c = p.target_counters.expect("SMART counters");
            let cmds = if r.plan.writes() {
                c.host_write_commands
            } else {
                c.host_read_commands
            };
            assert_eq!(
                cmds,
                f.total_ios + f.ramp_ios,
                "target commands vs perf I/Os at {}",
                p.label
            );
            let bytes = (f.total_ios + f.ramp_ios) * p.params.bs;
            let units = if r.plan.writes() {
                c.data_units_written
            } else {
                c.data_units_read
            };
            // Thousands of 512-byte units, rounded up (per counter, so allow one).
            let want = bytes.div_ceil(512_000);
            assert!(units + 1 >= want && units <= want + 1, "{units} vs {want}");
        }
    }
}

fn builtin(plan: &str) {
    let s = Scratch::new(plan);
    let out = run_tiny(&s, plan);
    let r = check_folder(&out.join(plan), true);
    let want = farflash_sweep::Plan::builtin(plan).unwrap();
    assert_eq!(r.plan, want);
    assert_eq!(r.settings.runtime_s, 0.3);
    assert!(r.skipped.is_empty());
    // The backing file the sweep created is gone.
    let data = s.0.join("data");
    assert_eq!(std::fs::read_dir(&data).map(|d| d.count()).unwrap_or(0), 0);
}

#[test]
fn sweep_request_size_plan() {
    builtin("request-size");
}

#[test]
fn sweep_parallelism_plan() {
    builtin("parallelism");
}

#[test]
fn sweep_cpu_cost_plan() {
    builtin("cpu-cost");
}

#[test]
fn sweep_queue_depth_plan_pins_the_target() {
    builtin("queue-depth");
    // (the folder is checked in builtin; the target command is recorded there)
}

#[test]
fn sweep_plan_file_and_replot() {
    let s = Scratch::new("file");
    let plan = s.0.join("mini.toml");
    std::fs::write(
        &plan,
        "name = 'mini'\ndescription = 'random read, QD 1 and 4'\nrw = 'randread'\nvary = 'iodepth'\nvalues = [1, 4]\nbs = 8192\nnumjobs = 2\ntarget_threads = 1\n",
    )
    .unwrap();
    let out = run_tiny(&s, plan.to_str().unwrap());
    let dir = out.join("mini");
    let r = check_folder(&dir, true);
    assert!(r
        .settings
        .target_command
        .as_deref()
        .unwrap()
        .contains("--threads 1"));
    // --replot rebuilds plots and report from results.json alone, which it leaves as it is.
    let json = std::fs::read(dir.join("results.json")).unwrap();
    std::fs::remove_file(dir.join("latency.png")).unwrap();
    std::fs::remove_file(dir.join("report.md")).unwrap();
    sweep(&[
        "--plan",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--replot",
    ]);
    assert_eq!(std::fs::read(dir.join("results.json")).unwrap(), json);
    check_folder(&dir, true);
}

#[test]
fn sweep_external_target_without_file_skips_local_with_a_reason() {
    let s = Scratch::new("ext");
    let serve = common::Serve::start(&["--ram", "16M"]);
    let plan = s.0.join("one.toml");
    std::fs::write(
        &plan,
        "name = 'one'\nrw = 'read'\nvary = 'bs'\nvalues = [4096, 65536]\niodepth = 2\n",
    )
    .unwrap();
    let out = s.0.join("out");
    let pid = serve.child.id().to_string();
    sweep(&[
        "--plan",
        plan.to_str().unwrap(),
        "--runtime",
        "0.2",
        "--ramp",
        "0",
        "--target",
        &serve.addr,
        "--nqn",
        common::NQN,
        "--target-pid",
        &pid,
        "--out",
        out.to_str().unwrap(),
    ]);
    let dir = out.join("one");
    let r = check_folder(&dir, false);
    assert_eq!(r.settings.target_kind, "external");
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].mode, Mode::Local);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("local runs skipped"), "{report}");
}

#[test]
fn sweep_refuses_to_overwrite_a_given_file_with_a_write_plan() {
    let s = Scratch::new("refuse");
    let f = s.0.join("precious.img");
    std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["sweep", "--plan", "cpu-cost", "--filename"])
        .arg(&f)
        .args(["--out"])
        .arg(s.0.join("out"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-writes"));
    assert!(std::fs::read(&f).unwrap().iter().all(|&b| b == 7));
    let bad = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["sweep", "--plan", "no-such-plan"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("request-size"));
}

/// `--transport tcp` is the default: the same points, commands and files as
/// without it; each remote point says it ran over tcp, and results.json
/// without the transport fields (written before they existed) still
/// replots, read as tcp.
#[test]
fn sweep_transport_tcp_is_the_default_and_old_results_replot() {
    let s = Scratch::new("tcp");
    let plan = s.0.join("tcp.toml");
    std::fs::write(
        &plan,
        "name = 'tcp'\nrw = 'randread'\nvary = 'iodepth'\nvalues = [1, 4]\n",
    )
    .unwrap();
    let out = run_tiny_with(&s, plan.to_str().unwrap(), &["--transport", "tcp"]);
    let dir = out.join("tcp");
    let r = check_folder(&dir, true);
    assert_eq!(r.settings.transports, vec![Transport::Tcp]);
    assert_eq!(r.settings.target_rdma_addr, None);
    assert!(!r.has_rdma());
    for p in &r.points {
        match p.mode {
            Mode::Local => assert_eq!(p.transport, None),
            Mode::Remote => assert_eq!(p.transport, Some(Transport::Tcp)),
        }
    }
    let target = r.settings.target_command.as_deref().unwrap();
    assert!(target.contains("--listen 127.0.0.1:") && !target.contains("rdma:"));
    // Exactly the files of a sweep without --transport.
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let mut want: Vec<String> = [
        "report.md",
        "results.csv",
        "results.json",
        "results.schema.json",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(
        farflash_sweep::plot::PLOTS
            .iter()
            .flat_map(|p| [format!("{p}.png"), format!("{p}.svg")]),
    )
    .collect();
    want.sort();
    assert_eq!(files, want);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("| remote |") && !report.contains("remote tcp"));
    // An old results.json: no transport, transports, cpu_us_per_io.
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    doc["settings"]
        .as_object_mut()
        .unwrap()
        .remove("transports");
    for p in doc["points"].as_array_mut().unwrap() {
        let o = p.as_object_mut().unwrap();
        o.remove("transport");
        o.remove("cpu_us_per_io");
    }
    let old = serde_json::to_string_pretty(&doc).unwrap();
    std::fs::write(dir.join("results.json"), &old).unwrap();
    std::fs::remove_file(dir.join("cpu.png")).unwrap();
    sweep(&[
        "--plan",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--replot",
    ]);
    assert_eq!(
        std::fs::read_to_string(dir.join("results.json")).unwrap(),
        old
    );
    let again = check_folder(&dir, true);
    assert_eq!(again.settings.transports, vec![Transport::Tcp]);
    for p in again.points.iter().filter(|p| p.mode == Mode::Remote) {
        assert_eq!(p.kind(), Kind::Tcp);
        // CPU per I/O computed from the CPU split is what the run recorded.
        let was = r.point_of(Kind::Tcp, p.index).unwrap().cpu_us_per_io;
        let now = again.cpu_per_io(p);
        assert_eq!(now.is_some(), was.is_some());
        if let (Some(a), Some(b)) = (now, was) {
            assert!(close(a.host, b.host) && close(a.target.unwrap(), b.target.unwrap()));
        }
    }
    // Rendering of RDMA points (their runs need Soft-RoCE, tests/interop_rdma.rs):
    // the TCP points copied as RDMA points with half the target's CPU and a
    // lower p50 must give the transport figure, five CPU panels, RDMA rows
    // and the RDMA / TCP ratios of the summary.
    let mut r2 = r.clone();
    r2.settings.transports = vec![Transport::Tcp, Transport::Rdma];
    let copies: Vec<_> = r
        .points
        .iter()
        .filter(|p| p.mode == Mode::Remote)
        .map(|p| {
            let mut q = p.clone();
            q.transport = Some(Transport::Rdma);
            if let Some(t) = q.cpu.target.as_mut() {
                t.usr /= 2.0;
                t.sys /= 2.0;
                t.busy /= 2.0;
            }
            q.cpu_us_per_io = None;
            q.figures.lat_us.p50 *= 0.5;
            q
        })
        .collect();
    r2.points.extend(copies);
    let dir2 = out.join("tcp-rdma");
    std::fs::create_dir_all(&dir2).unwrap();
    std::fs::write(
        dir2.join("results.json"),
        serde_json::to_string_pretty(&r2).unwrap(),
    )
    .unwrap();
    farflash_sweep::output::replot(&dir2).unwrap();
    let png = std::fs::read(dir2.join("transport.png")).unwrap();
    assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG"));
    let svg = std::fs::read_to_string(dir2.join("transport.svg")).unwrap();
    assert!(svg.contains("NVMe/RDMA") && svg.contains("CPU per I/O"));
    assert!(std::fs::read_to_string(dir2.join("cpu.svg"))
        .unwrap()
        .contains("NVMe/RDMA run: target side"));
    let report = std::fs::read_to_string(dir2.join("report.md")).unwrap();
    assert!(report.contains("](transport.png)"), "{report}");
    assert!(report.contains("| remote rdma |") && report.contains("| remote tcp |"));
    for i in 0..r.plan.values.len() {
        let (t, d) = (
            r2.point_of(Kind::Tcp, i).unwrap(),
            r2.point_of(Kind::Rdma, i).unwrap(),
        );
        let (ct, cd) = (r2.cpu_per_io(t).unwrap(), r2.cpu_per_io(d).unwrap());
        let want = format!("RDMA / TCP at iodepth = {}", t.label);
        let line = report.lines().find(|l| l.contains(&want)).expect(&want);
        let target = cd.target.unwrap() / ct.target.unwrap();
        assert!((target - 0.5).abs() < 1e-9);
        assert!(
            line.contains("target 0.50x") && line.contains("p50 0.50x"),
            "{line}"
        );
        assert!(
            line.contains(&format!("host {:.2}x", cd.host / ct.host)),
            "{line}"
        );
    }
    let csv = std::fs::read_to_string(dir2.join("results.csv")).unwrap();
    assert_eq!(
        csv.lines().filter(|l| l.contains(",rdma,")).count(),
        r.plan.values.len()
    );
}

/// `--transport rdma` on an address without an RDMA device (this machine
/// has none on 127.0.0.1) fails before anything starts, with an error
/// naming the address; bad `--transport` values name the value.
#[test]
fn sweep_transport_rdma_without_a_device_fails_fast() {
    let s = Scratch::new("rdma-refused");
    let data = s.0.join("data");
    for t in ["rdma", "tcp,rdma"] {
        let started = std::time::Instant::now();
        refused(
            &s,
            &[
                "--plan",
                "request-size",
                "--transport",
                t,
                "--dir",
                data.to_str().unwrap(),
            ],
            Some("no RDMA device on 127.0.0.1"),
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "refused after {:?}",
            started.elapsed()
        );
        // No backing file was created, no target started.
        assert!(!data.exists());
    }
    refused(
        &s,
        &["--transport", "roce"],
        Some("\"roce\" is not tcp or rdma"),
    );
    refused(&s, &["--transport", "tcp,tcp"], Some("given twice"));
    refused(
        &s,
        &["--plan", "tenants", "--transport", "tcp,rdma"],
        Some("--transport"),
    );
    refused(
        &s,
        &[
            "--transport",
            "rdma",
            "--target",
            "127.0.0.1:4420",
            "--nqn",
            "nqn.2026-11.io.farflash:x",
        ],
        Some("--target"),
    );
}

#[test]
fn sweep_committed_results_are_complete_and_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sweep");
    for plan in farflash_sweep::BUILTIN {
        let r = check_folder(&root.join(plan), true);
        assert_eq!(r.plan, farflash_sweep::Plan::builtin(plan).unwrap());
        assert!(
            r.settings.runtime_s >= 3.0,
            "{plan}: a real run, not a test run"
        );
    }
}

/// Checks a tenants results folder: every tenant of every count run alone
/// and together, each phase's bytes and figures from its own perf JSON,
/// slowdown = together / alone runtime, CSV rows, plots, report; with
/// `baseline`, all of it for the iSCSI runs too.
fn check_tenants(
    dir: &Path,
    counts: &[usize],
    baseline: bool,
) -> farflash_sweep::tenants::results::TenantsResults {
    use farflash_sweep::tenants::results::{
        TenantsResults, ISCSI, NVME_TCP, TENANTS_CSV_HEADER, TENANTS_SCHEMA,
    };
    use farflash_sweep::tenants::{tenant_hostnqn, tenant_initiator, tenant_nqn};
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let r: TenantsResults = serde_json::from_str(&text).unwrap();
    assert_eq!(r.schema, TENANTS_SCHEMA);
    assert_eq!(r.plan.counts, counts);
    let transports: &[&str] = if baseline {
        &[NVME_TCP, ISCSI]
    } else {
        &[NVME_TCP]
    };
    assert_eq!(r.has_baseline(), baseline);
    let want_runs: usize = transports.len() * counts.iter().map(|c| 2 * c).sum::<usize>();
    assert_eq!(r.runs.len(), want_runs);
    assert_eq!(
        r.comparisons.len(),
        transports.len() * counts.iter().sum::<usize>()
    );
    for &tr in transports {
        for &c in counts {
            for t in 1..=c {
                for together in [false, true] {
                    let j = r
                        .runs
                        .iter()
                        .find(|j| {
                            j.transport == tr
                                && j.tenants == c
                                && j.tenant == t
                                && j.together == together
                        })
                        .unwrap_or_else(|| {
                            panic!("{tr}: tenants {c}: tenant {t} together={together}")
                        });
                    // Its own subsystem (target) and host (initiator).
                    let (sub, host) = if tr == ISCSI {
                        (
                            farflash_sweep::tgt::target_iqn(t as u32),
                            tenant_initiator(t),
                        )
                    } else {
                        (tenant_nqn(t), tenant_hostnqn(t))
                    };
                    assert_eq!(j.subsystem, sub);
                    assert_eq!(j.hostnqn, host);
                    assert_eq!(j.phases.len(), r.plan.phases.len());
                    let mut ms = 0;
                    for (p, ph) in j.phases.iter().zip(&r.plan.phases) {
                        assert_eq!(p.phase, ph.name);
                        if tr == ISCSI {
                            assert!(p.command.contains("--iscsi iscsi://127.0.0.1:"));
                            assert!(p.command.contains(&format!("/{sub}/1 --initiator {host}")));
                        } else {
                            assert!(p.command.contains(&format!("-n {sub}")));
                            assert!(p.command.contains(&format!("-q {host}")));
                        }
                        let agg = &p.perf["aggregate"];
                        let bytes = agg["read"]["io_bytes"].as_u64().unwrap()
                            + agg["write"]["io_bytes"].as_u64().unwrap();
                        assert_eq!(p.bytes, bytes);
                        assert_eq!(p.bytes, ph.size, "a phase does its whole size");
                        assert_eq!(Some(p.runtime_ms), agg["job_runtime"].as_u64());
                        assert!(p.p99_us > 0.0);
                        ms += p.runtime_ms;
                    }
                    assert_eq!(j.runtime_ms, ms);
                    assert!(j.runtime_ms > 0);
                    assert_eq!(j.bytes, r.plan.job_bytes());
                    let mib = j.bytes as f64 / 1048576.0 / (j.runtime_ms as f64 / 1e3);
                    assert!(close(j.throughput_mib_s, mib));
                }
                let c_ = r.comparison_on(tr, c, t).unwrap();
                let alone = r
                    .runs
                    .iter()
                    .find(|j| j.transport == tr && j.tenants == c && j.tenant == t && !j.together)
                    .unwrap();
                let tog = r
                    .runs
                    .iter()
                    .find(|j| j.transport == tr && j.tenants == c && j.tenant == t && j.together)
                    .unwrap();
                assert_eq!(c_.alone_runtime_ms, alone.runtime_ms);
                assert_eq!(c_.together_runtime_ms, tog.runtime_ms);
                assert!(close(
                    c_.slowdown,
                    tog.runtime_ms as f64 / alone.runtime_ms as f64
                ));
                assert!(close(c_.together_p99_us, tog.p99_us));
            }
        }
    }
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], TENANTS_CSV_HEADER);
    assert_eq!(rows.len(), want_runs + 1);
    for row in &rows[1..] {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), TENANTS_CSV_HEADER.split(',').count(), "{row}");
        // The together rows carry the slowdown.
        assert_eq!(f[2] == "true", !f[9].is_empty(), "{row}");
        assert!(transports.contains(&f[10]), "{row}");
    }
    let png = std::fs::read(dir.join("tenants.png")).unwrap();
    assert!(png.len() > 10_000);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(dir.join("tenants.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("together"));
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Summary") && report.contains("](tenants.png)"));
    for &c in counts {
        assert!(
            report.contains(&format!("**{c} tenant")),
            "{c} in the summary"
        );
    }
    assert!(report.contains(&r.environment.commit));
    assert_eq!(
        report.contains("## NVMe/TCP and the iSCSI baseline side by side"),
        baseline
    );
    if baseline {
        assert!(r
            .settings
            .baseline_command
            .as_deref()
            .unwrap_or("")
            .contains("tgtd"));
        for &c in counts {
            assert!(report.contains(&format!("\n| {c} | ")), "{c} side by side");
            let s = if c == 1 { "" } else { "s" };
            assert!(report.contains(&format!("**{c} tenant{s}**, iSCSI (tgtd): slowdown")));
        }
    }
    r
}

/// `sweep --plan tenants` of 2 MiB jobs in `data`, results in `out`, with `extra` flags.
fn run_tenants(out: &Path, data: &Path, extra: &[&str]) {
    let (out, data) = (out.to_str().unwrap(), data.to_str().unwrap());
    let common = [
        "--plan",
        "tenants",
        "--job-size",
        "2M",
        "--dir",
        data,
        "--out",
        out,
    ];
    sweep(&[&common[..], extra].concat());
}

/// `sweep --plan tenants --replot` of the results in `out`.
fn replot_tenants(out: &Path) {
    sweep(&[
        "--plan",
        "tenants",
        "--out",
        out.to_str().unwrap(),
        "--replot",
    ]);
}

/// `sweep ARGS` fails before writing anything, its error naming `names` if given.
fn refused(s: &Scratch, args: &[&str], names: Option<&str>) {
    let o = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .arg("sweep")
        .args(args)
        .arg("--out")
        .arg(s.0.join("bad"))
        .output()
        .unwrap();
    assert!(!o.status.success(), "{args:?}");
    assert!(!s.0.join("bad").exists(), "{args:?} wrote its folder");
    if let Some(n) = names {
        assert!(String::from_utf8_lossy(&o.stderr).contains(n), "{args:?}");
    }
}

#[test]
fn sweep_tenants_plan_runs_alone_then_together() {
    let s = Scratch::new("tenants");
    let out = s.0.join("out");
    let data = s.0.join("data");
    run_tenants(&out, &data, &["--tenants", "1,2,4"]);
    let dir = out.join("tenants");
    let r = check_tenants(&dir, &[1, 2, 4], false);
    assert_eq!(r.plan.file_size, 2 << 20);
    // The target exported one subsystem per tenant, each for its host only.
    for t in 1..=4 {
        assert!(r.settings.target_config.contains(&format!(
            "allowed_hosts = [\"{}\"]",
            farflash_sweep::tenants::tenant_hostnqn(t)
        )));
    }
    // The tenants' files are gone.
    assert_eq!(std::fs::read_dir(&data).map(|d| d.count()).unwrap_or(0), 0);
    // --replot rebuilds the figure and report from results.json.
    std::fs::remove_file(dir.join("tenants.png")).unwrap();
    std::fs::remove_file(dir.join("report.md")).unwrap();
    replot_tenants(&out);
    check_tenants(&dir, &[1, 2, 4], false);
    // Bad counts and sizes are refused before anything starts.
    for bad in [
        ["--tenants", "0"],
        ["--tenants", "1,x"],
        ["--job-size", "1000"],
    ] {
        refused(&s, &[&["--plan", "tenants"][..], &bad].concat(), None);
    }
}

/// `--baseline iscsi`: the same job over iSCSI (a private tgtd, libiscsi),
/// both transports in the results, each with its slowdowns.
#[test]
fn sweep_tenants_with_iscsi_baseline() {
    let s = Scratch::new("tenants-iscsi");
    let out = s.0.join("out");
    let data = s.0.join("data");
    run_tenants(&out, &data, &["--baseline", "iscsi", "--tenants", "1,2"]);
    let r = check_tenants(&out.join("tenants"), &[1, 2], true);
    for c in r.comparisons.iter().filter(|c| c.transport == "iscsi") {
        assert!(c.slowdown > 0.0 && c.alone_mib_s > 0.0 && c.together_p99_us > 0.0);
    }
    // The files and tgtd's log are gone; --replot keeps both transports.
    assert_eq!(std::fs::read_dir(&data).map(|d| d.count()).unwrap_or(0), 0);
    replot_tenants(&out);
    check_tenants(&out.join("tenants"), &[1, 2], true);
    // Only iscsi is a baseline, and only for the tenants plan.
    for bad in [
        ["--plan", "tenants", "--baseline", "nfs"],
        ["--plan", "request-size", "--baseline", "iscsi"],
    ] {
        refused(&s, &bad, Some("--baseline"));
    }
}

/// `docs/sweep/transport/`: the in-guest run of `--transport tcp,rdma`
/// (Soft-RoCE under TCG), labelled as such.
#[test]
fn sweep_committed_transport_results_are_complete() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sweep/transport");
    let r = check_folder(&root, true);
    assert_eq!(r.settings.transports, vec![Transport::Tcp, Transport::Rdma]);
    assert!(r.has_rdma() && r.settings.runtime_s >= 1.0, "a real run");
    let note = r.settings.note.as_deref().unwrap_or_default();
    assert!(note.contains("Soft-RoCE") && note.contains("TCG"), "{note}");
    let report = std::fs::read_to_string(root.join("report.md")).unwrap();
    assert!(report.contains("RDMA / TCP at iodepth = 1 "));
}

#[test]
fn sweep_committed_tenants_results_are_complete() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sweep/tenants");
    let r = check_tenants(&root, &[1, 2, 4], true);
    assert!(r.plan.file_size >= 64 << 20, "a real run, not a test run");
}

/// Checks a cpu-vs-load results folder: schema, one run per step of the
/// plan with the rate its saturation run set (and perf was given), figures
/// from each run's own perf JSON, achieved IOPS not above the offered rate
/// by more than what a ramp can leave behind, CPU within the machine, the
/// CSV, figures and report.
fn check_cpu_load(dir: &Path) -> farflash_sweep::cpuload::results::CpuLoadResults {
    use farflash_sweep::cpuload::plan::offered_rate;
    use farflash_sweep::cpuload::results::CPU_LOAD_CSV_HEADER;
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let r = farflash_sweep::cpuload::load(&text).unwrap();
    let schema = std::fs::read_to_string(dir.join("results.schema.json")).unwrap();
    assert_eq!(
        schema,
        farflash_sweep::cpuload::results::CPU_LOAD_SCHEMA_JSON
    );
    let steps = r.plan.steps();
    assert_eq!(r.runs.len(), steps.len(), "one run per step");
    let cores = r.environment.nproc as f64;
    let runtime = r.settings.runtime_s;
    let mut sat = 0.0;
    for (run, step) in r.runs.iter().zip(&steps) {
        assert_eq!(
            (run.target, run.iodepth, run.load_pct),
            (step.target, step.iodepth, step.load_pct)
        );
        let what = format!(
            "{} QD {} {:?}",
            run.target.name(),
            run.iodepth,
            run.load_pct
        );
        let agg = &run.perf["aggregate"]["read"];
        assert!(close(run.iops, agg["iops"].as_f64().unwrap()), "{what}");
        let p50 = agg["lat_ns"]["percentile"]["50.000000"].as_f64().unwrap() / 1e3;
        assert!(close(run.lat_us.p50, p50), "{what}");
        assert!(run.lat_us.p50 <= run.lat_us.p99, "{what}");
        let opts = &run.perf["options"];
        assert_eq!(opts["iodepth"].as_u64(), Some(run.iodepth), "{what}");
        match run.load_pct {
            None => {
                assert!(run.iops > 0.0, "{what}: the saturation run did I/O");
                assert!(run.offered_iops.is_none() && opts["rate_iops"].as_u64().is_none());
                sat = run.iops;
            }
            Some(p) => {
                let offered = run.offered_iops.unwrap();
                assert_eq!(offered, offered_rate(sat, p), "{what}");
                assert_eq!(opts["rate_iops"].as_u64(), Some(offered), "{what}");
                // Paced: perf issued at most the offered rate over its whole
                // run (ramp + runtime; its pacer starts when the job does),
                // 2 % for the clocks and a queue's worth. Inside the measured
                // interval alone it may make up what fell behind in the
                // ramp (docs/sweep.md), so that is not bounded as tightly.
                let ramp_ios = run.perf["aggregate"]["ramp_ios"].as_u64().unwrap();
                let issued = (run.total_ios + ramp_ios) as f64;
                let allowed = offered as f64 * (runtime + r.settings.ramp_s);
                let bound = allowed * 1.02 + run.iodepth as f64 + 1.0;
                assert!(issued <= bound, "{what}: {issued} I/Os, {allowed} offered");
                assert!(run.command.contains(&format!("--rate_iops {offered}")));
            }
        }
        let t = run.target_cpu_pct.expect("the target's CPU was read");
        for c in [t, run.host_cpu_pct] {
            assert!((0.0..=100.0 * cores + 1.0).contains(&c), "{what}: CPU {c}");
        }
        let (u, s) = (run.target_usr_pct.unwrap(), run.target_sys_pct.unwrap());
        assert!(close(u + s, t), "{what}");
        let host = opts_cpu(&run.perf);
        assert!(close(run.host_cpu_pct, host), "{what}");
        if t > 0.0 {
            assert!(close(run.iops_per_target_cpu_pct.unwrap(), run.iops / t));
        }
        assert!(run.command.contains("--cpus-allowed") && run.window.end > run.window.start);
    }
    // The lowest load is far below saturation: a loaded machine reaches it.
    let lo = r.plan.loads_pct[0];
    for t in r.targets() {
        for &qd in &r.plan.iodepths {
            let x = r.at(t, qd, lo).unwrap();
            assert!(
                x.iops >= 0.5 * x.offered_iops.unwrap() as f64,
                "{lo} % load reached"
            );
        }
    }
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], CPU_LOAD_CSV_HEADER);
    assert_eq!(rows.len(), r.runs.len() + 1);
    for (row, run) in rows[1..].iter().zip(&r.runs) {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), CPU_LOAD_CSV_HEADER.split(',').count());
        assert_eq!(f[0], run.target.name());
        assert!((f[4].parse::<f64>().unwrap() - run.iops).abs() <= 0.001);
    }
    for stem in farflash_sweep::cpuload::figures::CPU_LOAD_PLOTS {
        let png = std::fs::read(dir.join(format!("{stem}.png"))).unwrap();
        assert!(
            png.len() > 10_000 && png.starts_with(b"\x89PNG"),
            "{stem}.png"
        );
        let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("offered load"),
            "{stem}.svg"
        );
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for &qd in &r.plan.iodepths {
        assert!(
            report.contains(&format!("- **QD {qd}**: target CPU")),
            "summary of QD {qd}"
        );
    }
    assert_eq!(
        report.matches("\n| farflash --poll ").count() + report.matches("\n| SPDK ").count(),
        r.runs.len() + r.runs.iter().filter(|x| x.load_pct.is_none()).count(),
        "a row per run and one per saturation run"
    );
    assert!(report.contains(&r.environment.commit));
    r
}

/// perf's own CPU (usr + sys, % of one core).
fn opts_cpu(perf: &Value) -> f64 {
    perf["cpu"]["usr_pct"].as_f64().unwrap() + perf["cpu"]["sys_pct"].as_f64().unwrap()
}

/// `--plan cpu-vs-load`, tiny: farflash adaptive only, QD 1, two loads, 1 s
/// a run (the target's CPU time comes in 10 ms ticks); then `--replot` and
/// the refusals.
#[test]
fn sweep_cpu_vs_load_plan_end_to_end() {
    use farflash_sweep::cpuload::plan::TargetKind;
    let s = Scratch::new("cpuload");
    let out = s.0.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .env_remove("SPDK_DIR")
        .args(["sweep", "--plan", "cpu-vs-load", "--targets", "adaptive"])
        .args(["--iodepths", "1", "--loads", "10,50", "--runtime", "1"])
        .args(["--ramp", "0.2", "--note", "a test run"])
        .arg("--out")
        .arg(&out)
        .arg("--dir")
        .arg(&s.0)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = out.join("cpu-vs-load");
    let r = check_cpu_load(&dir);
    assert_eq!(r.plan.targets, vec![TargetKind::Adaptive]);
    assert_eq!(r.runs.len(), 3);
    let cmd = &r.settings.targets[0].command;
    assert!(cmd.contains("--null 1G") && cmd.contains("--threads 1 --cpus-allowed 0"));
    assert!(cmd.contains("--poll adaptive"), "{cmd}");
    assert_eq!(
        r.settings.spdk_skipped.as_deref(),
        Some("no SPDK build given (SPDK_DIR)")
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("**Note:** a test run"));
    // --replot rebuilds the figures and report from results.json alone.
    for f in ["report.md", "cpu.png", "results.csv"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    sweep(&[
        "--plan",
        "cpu-vs-load",
        "--replot",
        "--out",
        out.to_str().unwrap(),
    ]);
    check_cpu_load(&dir);
    assert_eq!(
        std::fs::read_to_string(dir.join("report.md")).unwrap(),
        report
    );
    // Refused before anything starts.
    let c = ["--plan", "cpu-vs-load"];
    refused(
        &s,
        &[&c[..], &["--loads", "50,10"]].concat(),
        Some("ascend"),
    );
    refused(
        &s,
        &[&c[..], &["--targets", "sometimes"]].concat(),
        Some("sometimes"),
    );
    refused(
        &s,
        &[&c[..], &["--iodepths", "0"]].concat(),
        Some("queue depth 0"),
    );
    refused(
        &s,
        &[&c[..], &["--transport", "rdma"]].concat(),
        Some("--transport"),
    );
    let o = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .env_remove("SPDK_DIR")
        .args([
            "sweep",
            "--plan",
            "cpu-vs-load",
            "--targets",
            "spdk",
            "--out",
        ])
        .arg(s.0.join("bad"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("SPDK_DIR"));
    // With a folder that is no SPDK build, it says what is missing.
    refused(
        &s,
        &[&c[..], &["--targets", "spdk", "--spdk-dir", "/nonexistent"]].concat(),
        Some("build/bin/nvmf_tgt"),
    );
}

/// `docs/sweep/cpu-vs-load/`: the built-in study with SPDK's target, from
/// the development VM with nothing else running, its note saying so.
#[test]
fn sweep_committed_cpu_vs_load_results_are_complete() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sweep/cpu-vs-load");
    let r = check_cpu_load(&root);
    assert_eq!(
        r.plan,
        farflash_sweep::cpuload::plan::CpuLoadPlan::builtin(true)
    );
    assert!(r.settings.runtime_s >= 2.0, "a real run, not a test run");
    let note = r.settings.note.as_deref().unwrap_or_default();
    assert!(note.contains("nothing else running"), "{note}");
}
