//! A real Prometheus (Debian's `prometheus` package, installed by
//! tests/run.sh) scrapes `farflash serve --metrics` while `farflash perf`
//! reads; Prometheus's HTTP API must then report the read count perf made
//! and a read rate that matches perf's IOPS, and `promtool check metrics`
//! must accept the exposition.
//!
//! `cargo test --test prometheus -- --ignored` (needs /usr/bin/prometheus
//! and /usr/bin/promtool).

mod common;

use common::{eventually, free_port, Serve, NQN};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query's single value (None: no result yet).
fn query(prom: &str, q: &str, at: f64) -> Option<f64> {
    let body = http_get(
        prom,
        &format!("/api/v1/query?query={}&time={at:.3}", encode(q)),
    )?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let r = v["data"]["result"].as_array()?.first()?.clone();
    r["value"][1].as_str()?.parse().ok()
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs Debian's prometheus package; run by tests/run.sh"]
fn prometheus_scrapes_what_perf_did() {
    let dir = std::env::temp_dir().join(format!("ff-prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mport = free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let sock = dir.join("rpc.sock");
    let serve = Serve::start(&[
        "--ram",
        "64M",
        "--metrics",
        &maddr,
        "--rpc-socket",
        sock.to_str().unwrap(),
    ]);
    let pport = free_port();
    let paddr = format!("127.0.0.1:{pport}");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: farflash\n    static_configs:\n      - targets: ['{maddr}']\n"
        ),
    )
    .unwrap();
    let prom = Kill(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={paddr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus (apt-get install prometheus)"),
    );
    assert!(
        eventually(Duration::from_secs(60), || query(
            &paddr,
            "up{job=\"farflash\"}",
            now()
        ) == Some(1.0)),
        "Prometheus never scraped farflash: {}",
        std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
    );

    let t0 = now();
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args([
            "perf",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &serve.port.to_string(),
            "-n",
            NQN,
        ])
        .args([
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            "8",
            "--runtime",
            "6",
        ])
        .arg("--output-format=json")
        .output()
        .unwrap();
    let t1 = now();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ios = j["aggregate"]["read"]["total_ios"].as_f64().unwrap();
    let iops = j["aggregate"]["read"]["iops"].as_f64().unwrap();
    assert!(ios > 1000.0, "{ios}");

    // The count: exactly what perf did, once a scrape after the run landed.
    let total = "sum(farflash_commands_total{op=\"read\"})";
    assert!(
        eventually(Duration::from_secs(20), || query(&paddr, total, now())
            == Some(ios)),
        "Prometheus has {:?} reads, perf made {ios}",
        query(&paddr, total, now())
    );
    // The read rate Prometheus recorded over the run (from the last
    // scrape before any read to the first that saw them all, 1 s apart)
    // matches perf's IOPS.
    let body = http_get(
        &paddr,
        &format!(
            "/api/v1/query_range?query={}&start={:.3}&end={:.3}&step=1",
            encode("sum(farflash_commands_total{op=\"read\"}) or vector(0)"),
            t0 - 3.0,
            t1 + 3.0
        ),
    )
    .expect("query_range");
    let v: Value = serde_json::from_str(&body).unwrap();
    let samples: Vec<(f64, f64)> = v["data"]["result"][0]["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(|p| {
            (
                p[0].as_f64().unwrap(),
                p[1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let before = samples
        .iter()
        .rev()
        .find(|s| s.1 == 0.0)
        .expect("a sample before the run");
    let after = samples
        .iter()
        .find(|s| s.1 == ios)
        .expect("a sample after the run");
    let rate = ios / (after.0 - before.0);
    let ratio = rate / iops;
    eprintln!(
        "perf: {ios} reads, {iops:.0} IOPS; Prometheus: {ios} reads over {:.0} s, {rate:.0}/s (ratio {ratio:.2})",
        after.0 - before.0
    );
    // The interval is the run plus up to one scrape interval at each end.
    assert!((0.6..=1.1).contains(&ratio), "rate {rate} vs perf {iops}");
    let bytes = query(&paddr, "sum(farflash_data_bytes_total{op=\"read\"})", now()).unwrap();
    assert_eq!(bytes, ios * 4096.0);
    let lat = query(
        &paddr,
        "sum(farflash_latency_seconds_count{op=\"read\"})",
        now(),
    )
    .unwrap();
    assert_eq!(lat, ios, "every read has a latency sample");

    // promtool accepts the exposition.
    let text = http_get(&maddr, "/metrics").unwrap();
    assert!(text.contains("farflash_latency_seconds_bucket"));
    assert!(text.contains("process_cpu_seconds_total"));
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let r = check.wait_with_output().unwrap();
    assert!(
        r.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );

    // Every query of the Grafana dashboard is valid PromQL for this
    // Prometheus, and every metric it names is in the exposition.
    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string("docs/grafana-dashboard.json").unwrap())
            .unwrap();
    let mut n = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let q = expr
                .replace("$__rate_interval", "1m")
                .replace("$subsystem", ".*")
                .replace("$host", ".*")
                .replace("$job", ".*");
            let body = http_get(&paddr, &format!("/api/v1/query?query={}", encode(&q)))
                .unwrap_or_else(|| panic!("Prometheus refused the dashboard query {q}"));
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["status"], "success", "{q}: {body}");
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("farflash_") || word.starts_with("process_") {
                    let family = word
                        .trim_end_matches("_bucket")
                        .trim_end_matches("_total")
                        .to_owned();
                    assert!(
                        text.contains(&format!("# TYPE {family}")),
                        "the dashboard names {word}, which /metrics does not have"
                    );
                }
            }
            n += 1;
        }
    }
    assert!(n >= 10, "{n} dashboard queries");
    drop(prom);
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
}
