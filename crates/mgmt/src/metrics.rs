//! Prometheus metrics (prometheus-client), gathered at scrape time from the
//! per-queue counters: nothing is added to the I/O path but the counters
//! each queue already owns (and, while this listener runs, latency samples).
//! Served over plain HTTP/1.1 (`GET /metrics`) by a small thread.

use farflash_core::stats::{lat_bound_secs, HostTotals, LAT_BUCKETS, NS_SLOTS};
use farflash_core::Target;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MAX_CLIENTS: usize = 8;
const MAX_HEADER: usize = 8192;
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads the target's counters at every scrape.
pub struct TargetCollector {
    target: Arc<Target>,
}

impl std::fmt::Debug for TargetCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TargetCollector")
    }
}

struct Enc<'a, 'b>(&'a mut DescriptorEncoder<'b>);

type Labels<'a> = Vec<(&'static str, &'a str)>;

impl Enc<'_, '_> {
    fn counter<V: prometheus_client::encoding::EncodeCounterValue + Copy>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        rows: &[(Labels<'_>, V)],
    ) -> Result<(), std::fmt::Error> {
        let mut m = self
            .0
            .encode_descriptor(name, help, unit, MetricType::Counter)?;
        for (l, v) in rows {
            if l.is_empty() {
                ConstCounter::new(*v).encode(m)?;
                return Ok(());
            }
            ConstCounter::new(*v).encode(m.encode_family(l)?)?;
        }
        Ok(())
    }
    fn gauge(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        rows: &[(Labels<'_>, i64)],
    ) -> Result<(), std::fmt::Error> {
        let mut m = self
            .0
            .encode_descriptor(name, help, unit, MetricType::Gauge)?;
        for (l, v) in rows {
            if l.is_empty() {
                ConstGauge::new(*v).encode(m)?;
                return Ok(());
            }
            ConstGauge::new(*v).encode(m.encode_family(l)?)?;
        }
        Ok(())
    }
}

fn ns_label(slot: usize) -> String {
    if slot == 0 {
        "other".to_owned()
    } else {
        slot.to_string()
    }
}

/// Every host's counters, by subsystem NQN and host NQN.
type ByHost = Vec<(String, Vec<(String, HostTotals)>)>;

impl Collector for TargetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let t = &self.target;
        // Everything by (subsystem, host).
        let data: ByHost = (t.subsystems().iter())
            .map(|s| (s.nqn.clone(), s.stats.by_host().into_iter().collect()))
            .collect();
        io_counters(&mut Enc(&mut encoder), &data)?;
        latency(&mut encoder, &data)?;
        let mut e = Enc(&mut encoder);
        target_gauges(&mut e, t)?;
        target_counters(&mut e, t)?;
        loop_counters(&mut e, t)?;
        pool_metrics(&mut e)?;
        process_metrics(&mut e)
    }
}

/// Rows of one I/O counter: labels and value.
type Rows<'a, V> = Vec<(Labels<'a>, V)>;

/// Commands and bytes by (subsystem, namespace, host, op); errors, media
/// errors, throttled time and commands in flight by (subsystem, host).
fn io_counters(e: &mut Enc<'_, '_>, data: &ByHost) -> Result<(), std::fmt::Error> {
    let ns_names: Vec<String> = (0..=NS_SLOTS).map(ns_label).collect();
    let (mut cmds, mut bytes): (Rows<u64>, Rows<u64>) = (Vec::new(), Vec::new());
    let mut outstanding: Rows<i64> = Vec::new();
    let mut media: Rows<u64> = Vec::new();
    let mut throttled: Rows<f64> = Vec::new();
    let mut errors: Vec<(&str, &str, String, u64)> = Vec::new();
    for (sub, hosts) in data {
        for (host, h) in hosts {
            for (slot, c) in h.ns.iter().enumerate() {
                if c.iter().all(|v| *v == 0) {
                    continue;
                }
                let n = ns_names[slot].as_str();
                let labels = |op| {
                    vec![
                        ("subsystem", sub.as_str()),
                        ("namespace", n),
                        ("host", host.as_str()),
                        ("op", op),
                    ]
                };
                cmds.push((labels("read"), c[0]));
                cmds.push((labels("write"), c[1]));
                bytes.push((labels("read"), c[2]));
                bytes.push((labels("write"), c[3]));
            }
            let labels = || vec![("subsystem", sub.as_str()), ("host", host.as_str())];
            outstanding.push((labels(), h.outstanding as i64));
            media.push((labels(), h.media_errors));
            throttled.push((labels(), h.throttled_ns as f64 / 1e9));
            for (st, n) in &h.errors {
                errors.push((sub, host, format!("0x{st:03x}"), *n));
            }
        }
    }
    e.counter(
        "farflash_commands",
        "Read and Write commands completed successfully",
        None,
        &cmds,
    )?;
    e.counter(
        "farflash_data",
        "Bytes read and written by successful commands",
        Some(&Unit::Bytes),
        &bytes,
    )?;
    let err_rows: Rows<u64> = (errors.iter())
        .map(|(s, h, st, n)| {
            let labels = vec![("subsystem", *s), ("host", *h), ("status", st.as_str())];
            (labels, *n)
        })
        .collect();
    e.counter(
        "farflash_command_errors",
        "Failed commands by NVMe status (SCT << 8 | SC)",
        None,
        &err_rows,
    )?;
    e.counter(
        "farflash_media_errors",
        "Storage I/O that failed (SMART media errors)",
        None,
        &media,
    )?;
    e.counter(
        "farflash_throttled",
        "Time the host's queues had commands waiting for QoS tokens (summed over its queues)",
        Some(&Unit::Seconds),
        &throttled,
    )?;
    e.gauge(
        "farflash_outstanding_commands",
        "I/O commands in flight",
        None,
        &outstanding,
    )
}

/// Latency histograms, by (subsystem, host, op).
fn latency(encoder: &mut DescriptorEncoder<'_>, data: &ByHost) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(
        "farflash_latency",
        "Read and Write latency in the target, from the command's arrival to its completion",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for (sub, hosts) in data {
        for (host, h) in hosts {
            for (d, op) in ["read", "write"].iter().enumerate() {
                let count: u64 = h.lat[d].iter().sum();
                if count == 0 {
                    continue;
                }
                let mut buckets: Vec<(f64, u64)> = (0..LAT_BUCKETS)
                    .map(|k| (lat_bound_secs(k), h.lat[d][k]))
                    .collect();
                buckets.push((f64::MAX, h.lat[d][LAT_BUCKETS]));
                let labels: Labels<'_> = vec![
                    ("subsystem", sub.as_str()),
                    ("host", host.as_str()),
                    ("op", op),
                ];
                m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    h.lat_sum_ns[d] as f64 * 1e-9,
                    count,
                    &buckets,
                    None,
                )?;
            }
        }
    }
    Ok(())
}

/// Connections and controllers per subsystem, namespace sizes.
fn target_gauges(e: &mut Enc<'_, '_>, t: &Target) -> Result<(), std::fmt::Error> {
    let subs = t.subsystems();
    let conns: Rows<i64> = (subs.iter())
        .map(|s| {
            let labels = vec![("subsystem", s.nqn.as_str())];
            (labels, s.stats.live_queues() as i64)
        })
        .collect();
    e.gauge(
        "farflash_connections",
        "Connected queues (admin and I/O) per subsystem",
        None,
        &conns,
    )?;
    let mut by_sub: Vec<(String, i64)> = subs.iter().map(|s| (s.nqn.clone(), 0)).collect();
    by_sub.push((farflash_wire::DISCOVERY_NQN.to_owned(), 0));
    for c in &t.controllers() {
        if let Some(e) = by_sub.iter_mut().find(|(n, _)| *n == c.subnqn) {
            e.1 += 1;
        }
    }
    let ctrl_rows: Rows<i64> = (by_sub.iter())
        .map(|(n, v)| (vec![("subsystem", n.as_str())], *v))
        .collect();
    e.gauge(
        "farflash_controllers",
        "Live controllers (associations) per subsystem",
        None,
        &ctrl_rows,
    )?;
    let ns_rows: Vec<(String, String, i64)> = (subs.iter())
        .flat_map(|s| {
            (s.namespaces().iter())
                .map(|n| {
                    let bytes = (n.blocks * n.block_size as u64) as i64;
                    (s.nqn.clone(), n.nsid.to_string(), bytes)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let ns_rows: Rows<i64> = (ns_rows.iter())
        .map(|(s, n, v)| {
            let labels = vec![("subsystem", s.as_str()), ("namespace", n.as_str())];
            (labels, *v)
        })
        .collect();
    e.gauge(
        "farflash_namespace_size",
        "Namespace capacity",
        Some(&Unit::Bytes),
        &ns_rows,
    )
}

/// The target's own counters: keep-alive expiries, authentication
/// failures, what was tolerated; and its listeners.
fn target_counters(e: &mut Enc<'_, '_>, t: &Target) -> Result<(), std::fmt::Error> {
    e.counter(
        "farflash_keep_alive_expiries",
        "Controllers torn down because no Keep Alive arrived within KATO",
        None,
        &[(vec![], t.keep_alive_expiries.load(Ordering::Relaxed))],
    )?;
    e.counter(
        "farflash_authentication_failures",
        "DH-HMAC-CHAP transactions that failed: a wrong or malformed message, an AUTH_Failure2 from the host, or the transaction timeout",
        None,
        &[(vec![], t.auth_failures.load(Ordering::Relaxed))],
    )?;
    let tolerated: Rows<u64> = (farflash_core::stats::Oddity::ALL.iter())
        .map(|&o| (vec![("what", o.name())], t.tolerated.get(o)))
        .collect();
    e.counter(
        "farflash_tolerated",
        "Things hosts sent that the specifications advise against or leave to the controller, accepted as Linux nvmet and SPDK accept them (docs/interop.md)",
        None,
        &tolerated,
    )?;
    e.gauge(
        "farflash_listeners",
        "Listening sockets",
        None,
        &[(vec![], t.listeners().len() as i64)],
    )
}

/// Each event loop's sleeps: a loop that sleeps at full load (a polling
/// regression) shows as timed sleeps, and lost bets, where the load is high.
fn loop_counters(e: &mut Enc<'_, '_>, t: &Target) -> Result<(), std::fmt::Error> {
    let loops = t.loops.totals();
    let names: Vec<String> = (0..loops.len()).map(|i| i.to_string()).collect();
    let rows = |f: fn(&farflash_core::stats::LoopTotals) -> u64, kind: Option<&'static str>| {
        (loops.iter().zip(&names))
            .map(|(l, n)| {
                let mut labels = vec![("worker", n.as_str())];
                labels.extend(kind.map(|k| ("kind", k)));
                (labels, f(l))
            })
            .collect::<Rows<'_, u64>>()
    };
    let mut sleeps = rows(|l| l.timed_sleeps, Some("timed"));
    sleeps.extend(rows(|l| l.idle_sleeps, Some("idle")));
    e.counter(
        "farflash_worker_sleeps",
        "Event-loop sleeps: timed (hybrid polling's bets on the gap to the next command) and idle (until an event or a timer)",
        None,
        &sleeps,
    )?;
    e.counter(
        "farflash_worker_missed_sleeps",
        "Timed sleeps a command cut short (a lost bet: the loop then polls for a while)",
        None,
        &rows(|l| l.missed, None),
    )?;
    let slept: Rows<f64> = (loops.iter().zip(&names))
        .map(|(l, n)| (vec![("worker", n.as_str())], l.slept_ns as f64 / 1e9))
        .collect();
    e.counter(
        "farflash_worker_slept",
        "Time event loops spent asleep",
        Some(&Unit::Seconds),
        &slept,
    )
}

/// Space per pool and per volume (docs/volumes.md), read at scrape time.
fn pool_metrics(e: &mut Enc<'_, '_>) -> Result<(), std::fmt::Error> {
    let pools = farflash_control::pools::registry().all();
    if pools.is_empty() {
        // No pool, no pool families (a target without volumes lists none).
        return Ok(());
    }
    let stats: Vec<_> = (pools.iter())
        .map(|(n, p)| (n.as_str(), p.stats()))
        .collect();
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for (name, help, f) in [
        (
            "farflash_pool_size",
            "Bytes of a pool's data clusters",
            (|s| s.size) as fn(&farflash_pool::PoolStats) -> u64,
        ),
        (
            "farflash_pool_allocated",
            "Bytes of a pool's clusters held by volumes and snapshots",
            |s| s.allocated,
        ),
        (
            "farflash_pool_free",
            "Bytes of a pool's free clusters",
            |s| s.free,
        ),
    ] {
        let rows: Vec<(Labels<'_>, i64)> = (stats.iter())
            .map(|(n, s)| (vec![("pool", *n)], gauge(f(s))))
            .collect();
        e.gauge(name, help, Some(&Unit::Bytes), &rows)?;
    }
    let vols: Vec<(&str, farflash_pool::VolumeInfo)> = (pools.iter())
        .flat_map(|(n, p)| p.list().into_iter().map(move |v| (n.as_str(), v)))
        .collect();
    for (name, help, f) in [
        (
            "farflash_volume_size",
            "A volume's or snapshot's size",
            (|v| v.size) as fn(&farflash_pool::VolumeInfo) -> u64,
        ),
        (
            "farflash_volume_allocated",
            "Bytes of clusters a volume holds itself",
            |v| v.allocated,
        ),
        (
            "farflash_volume_shared",
            "Bytes a volume reads through from its snapshots",
            |v| v.shared,
        ),
    ] {
        let rows: Vec<(Labels<'_>, i64)> = (vols.iter())
            .map(|(p, v)| (vec![("pool", *p), ("volume", v.name.as_str())], gauge(f(v))))
            .collect();
        e.gauge(name, help, Some(&Unit::Bytes), &rows)?;
    }
    Ok(())
}

/// The usual process metrics (Prometheus client conventions), from /proc.
fn process_metrics(e: &mut Enc<'_, '_>) -> Result<(), std::fmt::Error> {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Ok(());
    };
    // Fields after the command name (which may hold spaces, inside parentheses).
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return Ok(());
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    // Indices into `f`: field N of proc(5) is f[N - 3].
    let cpu = (num(11) + num(12)) as f64 / tck;
    let threads = num(17);
    let start_ticks = num(19);
    let vsize = num(20);
    let rss = num(21) * page;
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines().find_map(|l| {
            l.strip_prefix("btime ")
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
    });
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    let m = e.0.encode_descriptor(
        "process_cpu",
        "User and system CPU time",
        Some(&Unit::Seconds),
        MetricType::Counter,
    )?;
    ConstCounter::new(cpu).encode(m)?;
    e.gauge(
        "process_resident_memory",
        "Resident memory size",
        Some(&Unit::Bytes),
        &[(vec![], rss as i64)],
    )?;
    e.gauge(
        "process_virtual_memory",
        "Virtual memory size",
        Some(&Unit::Bytes),
        &[(vec![], vsize as i64)],
    )?;
    e.gauge(
        "process_open_fds",
        "Open file descriptors",
        None,
        &[(vec![], fds as i64)],
    )?;
    e.gauge(
        "process_threads",
        "OS threads",
        None,
        &[(vec![], threads as i64)],
    )?;
    if let Some(b) = boot {
        e.gauge(
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Some(&Unit::Seconds),
            &[(vec![], (b as f64 + start_ticks as f64 / tck) as i64)],
        )?;
    }
    Ok(())
}

/// The registry with the target's collector.
pub fn registry(target: Arc<Target>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(TargetCollector { target }));
    r
}

/// The text exposition of `registry`.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}

/// The Prometheus text format (0.0.4) of an OpenMetrics exposition, for
/// scrapers that do not ask for OpenMetrics (curl, `promtool check
/// metrics`): counter families are named with their `_total` suffix, and
/// the `# UNIT` and `# EOF` lines go.
pub fn to_prometheus_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l.starts_with("# UNIT ") || l == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = l.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        match renamed {
            Some(r) => out.push_str(&r),
            None => out.push_str(l),
        }
        out.push('\n');
    }
    out
}

/// A running metrics listener; dropping it stops the thread.
pub struct MetricsServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `GET /metrics` on `addr` and turns latency sampling on.
pub fn start(target: Arc<Target>, addr: SocketAddr) -> io::Result<MetricsServer> {
    let l = TcpListener::bind(addr)?;
    let bound = l.local_addr()?;
    l.set_nonblocking(true)?;
    target.set_latency_timing(true);
    let reg = Arc::new(registry(target.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("farflash-metrics".into())
        .spawn(move || {
            use std::os::fd::AsRawFd;
            let clients = Arc::new(AtomicUsize::new(0));
            while !st.load(Ordering::Acquire) {
                crate::server::wait_readable(l.as_raw_fd(), 250);
                match l.accept() {
                    Ok((s, _)) => {
                        if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                            clients.fetch_sub(1, Ordering::AcqRel);
                            continue; // dropped: closed
                        }
                        let (reg, cl) = (reg.clone(), clients.clone());
                        let r = std::thread::Builder::new()
                            .name("farflash-metrics-client".into())
                            .spawn(move || {
                                let _ = serve_http(s, &reg);
                                cl.fetch_sub(1, Ordering::AcqRel);
                            });
                        if r.is_err() {
                            clients.fetch_sub(1, Ordering::AcqRel);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            target.set_latency_timing(false);
        })?;
    Ok(MetricsServer {
        addr: bound,
        stop,
        thread: Some(thread),
    })
}

/// One HTTP/1.1 exchange (then close).
fn serve_http(mut s: TcpStream, reg: &Registry) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    s.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut req = Vec::new();
    let mut chunk = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        req.extend_from_slice(&chunk[..n]);
        if req.len() > MAX_HEADER {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"too large\n",
            );
        }
    }
    let line = req.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = render(reg);
            // Prometheus asks for OpenMetrics; anyone else gets the classic text format.
            let head = String::from_utf8_lossy(&req).to_ascii_lowercase();
            if head.contains("application/openmetrics-text") {
                respond(
                    &mut s,
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body.as_bytes(),
                )
            } else {
                let text = to_prometheus_text(&body);
                respond(
                    &mut s,
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    text.as_bytes(),
                )
            }
        }
        ("GET", "/") => respond(
            &mut s,
            "200 OK",
            "text/plain",
            b"farflash: metrics at /metrics\n",
        ),
        ("GET", _) => respond(&mut s, "404 Not Found", "text/plain", b"not found\n"),
        _ => respond(
            &mut s,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
        ),
    }
}

fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &[u8]) -> io::Result<()> {
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_names_counters_with_total() {
        let om = "# HELP a_x Help.\n# TYPE a_x counter\na_x_total{l=\"1\"} 3\n# HELP g G.\n# TYPE g gauge\n# UNIT g bytes\ng 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_x_total Help.\n# TYPE a_x_total counter\na_x_total{l=\"1\"} 3\n# HELP g G.\n# TYPE g gauge\ng 1\n"
        );
    }
}
