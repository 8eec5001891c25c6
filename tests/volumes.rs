//! Volumes of a local pool exported by a real `farflash serve` (issue #42):
//! created, snapshotted, cloned, resized online and deleted through the
//! management API while farflash's host reads and writes them; thin
//! reclaim (Deallocate) visible in the space accounting; a full pool
//! failing only the writes that need a cluster (Capacity Exceeded);
//! restarts keeping NGUID/UUID and data; `save_config` round trips; bad
//! input; SIGKILL with writes in flight: every write made durable (Flush,
//! FUA) reads back. Pools live on sparse files in a temporary directory.

mod common;

use common::{eventually, free_port, seed_from_env, Rng, Serve, TempDir, NQN};
use farflash_host::{ConnectOptions, Controller, IoQueue, IoQueueOptions};
use farflash_wire::Status;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BS: usize = 4096;
const MIB: u64 = 1 << 20;

fn farflash(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(args)
        .output()
        .expect("run farflash")
}

fn sparse(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

/// `farflash pool create` (offline); panics with its output on failure.
fn pool_create(name: &str, devs: &[&Path], cluster: Option<&str>) {
    let mut args = vec!["pool", "create", name];
    let devs: Vec<&str> = devs.iter().map(|d| d.to_str().unwrap()).collect();
    args.extend(&devs);
    if let Some(c) = cluster {
        args.extend(["--cluster-size", c]);
    }
    let o = farflash(&args);
    assert!(o.status.success(), "pool create: {o:?}");
}

/// A configuration: one subsystem with a small RAM namespace (NSID 1),
/// the `pools` and volume namespaces given.
fn config(dir: &Path, pools: &[(&str, &Path)], volumes: &[&str]) -> PathBuf {
    let mut t = format!("[[subsystem]]\nnqn = \"{NQN}\"\n[[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"1M\"\n");
    for v in volumes {
        t += &format!("[[subsystem.namespace]]\nbackend = \"volume\"\nvolume = \"{v}\"\n");
    }
    for (name, dev) in pools {
        t += &format!(
            "[[pool]]\nname = \"{name}\"\ndevices = [\"{}\"]\n",
            dev.display()
        );
    }
    let p = dir.join("farflash.toml");
    std::fs::write(&p, t).unwrap();
    p
}

struct Target {
    serve: Serve,
    sock: PathBuf,
    log: PathBuf,
}

fn start(dir: &Path, cfg: &Path, extra: &[&str]) -> Target {
    let sock = dir.join("rpc.sock");
    let log = dir.join("serve.log");
    let mut args = vec![
        "--config",
        cfg.to_str().unwrap(),
        "--rpc-socket",
        sock.to_str().unwrap(),
        "--threads",
        "1",
    ];
    args.extend(extra);
    let serve = Serve::start_logged(&args, "info", &log);
    Target { serve, sock, log }
}

fn rpc(t: &Target, method: &str, params: Value) -> Value {
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    common::rpc_exchange(&t.sock, req.to_string().as_bytes()).0
}

fn ok(t: &Target, method: &str, params: Value) -> Value {
    let a = rpc(t, method, params);
    assert!(
        a.get("error").is_none(),
        "{method}: {a}; log:\n{}",
        Serve::log_tail(&t.log, 20)
    );
    a["result"].clone()
}

/// The error code of a failed call, after checking its message names `what`.
fn fails(t: &Target, method: &str, params: Value, what: &str) -> i64 {
    let a = rpc(t, method, params);
    let msg = a["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(what), "{method}: {a} should name {what:?}");
    a["error"]["code"].as_i64().expect("an error code")
}

fn connect(addr: &str, max_io: u32) -> (Controller, IoQueue) {
    let mut o = ConnectOptions::new(addr.to_owned(), NQN);
    o.command_timeout = Duration::from_secs(20);
    let ctrl = Controller::connect(&o).expect("connect");
    let q = ctrl
        .io_queue(1, IoQueueOptions { depth: 16, max_io })
        .expect("I/O queue");
    (ctrl, q)
}

fn pattern(tag: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * BS)
        .map(|i| tag ^ (i / BS) as u8 ^ (i as u8).rotate_left(3))
        .collect()
}

fn read(q: &mut IoQueue, nsid: u32, lba: u64, blocks: usize) -> Vec<u8> {
    let mut b = vec![0u8; blocks * BS];
    q.read_at(nsid, lba, blocks as u32, &mut b).expect("read");
    b
}

fn hex_nguid(uuid: &str) -> [u8; 16] {
    let h: String = uuid.chars().filter(|c| *c != '-').collect();
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// What is refused while `db` is exported, with a snapshot `monday` that
/// has a clone `db-test`: each error names its object.
fn refusals(t: &Target) {
    // What is refused, each naming its object; nothing else is touched.
    let shrink = json!({"pool": "tank", "name": "db", "size": "32M"});
    assert_eq!(fails(t, "volume_resize", shrink, "db"), -32006);
    let del = json!({"pool": "tank", "name": "db"});
    assert_eq!(fails(t, "volume_delete", del, "db"), -32006);
    let del = json!({"pool": "tank", "name": "monday"});
    assert_eq!(fails(t, "volume_delete", del, "db-test"), -32006);
    let ren = json!({"pool": "tank", "name": "db", "new_name": "x"});
    assert_eq!(fails(t, "volume_rename", ren, "db"), -32006);
    let dup = json!({"pool": "tank", "name": "db", "size": "1M"});
    assert_eq!(fails(t, "volume_create", dup, "db"), -32002);
    let nopool = json!({"pool": "nope", "name": "db"});
    assert_eq!(fails(t, "volume_get", nopool, "nope"), -32001);
    let novol = json!({"pool": "tank", "name": "ghost"});
    assert_eq!(fails(t, "volume_get", novol, "ghost"), -32001);
    assert_eq!(
        fails(t, "pool_delete", json!({"name": "tank"}), "tank"),
        -32006
    );
    let big = json!({"pool": "tank", "name": "huge", "size": "1T"});
    let code = rpc(t, "volume_create", big)["error"]["code"].as_i64();
    assert!(code.is_none() || code == Some(-32003) || code == Some(-32007));
    let _ = rpc(t, "volume_delete", json!({"pool": "tank", "name": "huge"}));
}

/// `farflash ctl` human output and the Prometheus gauges.
fn ctl_and_metrics(t: &Target, mport: u16) {
    // farflash ctl, human output.
    let o = farflash(&[
        "ctl",
        "--rpc-socket",
        t.sock.to_str().unwrap(),
        "volume",
        "list",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("tank/db-test"),
        "{text}"
    );
    let o = farflash(&[
        "ctl",
        "--rpc-socket",
        t.sock.to_str().unwrap(),
        "pool",
        "list",
    ]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("tank"), "{o:?}");

    // Prometheus: per pool and per volume.
    let m = scrape(mport);
    for want in [
        "farflash_pool_size_bytes{pool=\"tank\"}",
        "farflash_pool_free_bytes{pool=\"tank\"}",
        "farflash_volume_allocated_bytes{pool=\"tank\",volume=\"db\"} 2097152",
        "farflash_volume_shared_bytes{pool=\"tank\",volume=\"db\"} 1048576",
    ] {
        assert!(m.contains(want), "{want} not in the metrics:\n{m}");
    }
}

/// `save_config`, a restart from the saved file: the same NGUID, size and
/// data; then a decouple keeps the clone's data.
fn restart_from_saved_config(
    dir: &Path,
    t: Target,
    (ctrl, mut q): (Controller, IoQueue),
    uuid: &str,
    (a, b): (&[u8], &[u8]),
) {
    // save_config, restart from it: same identities, same data.
    let saved = dir.join("saved.toml");
    ok(&t, "save_config", json!({"path": saved}));
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(
        text.contains("[[pool]]") && text.contains("tank/db-test"),
        "{text}"
    );
    q.flush(2).unwrap();
    drop(q);
    let _ = ctrl.shutdown();
    drop(t);
    let t = start(dir, &saved, &[]);
    let (ctrl, mut q) = connect(&t.serve.addr, 64 * BS as u32);
    assert_eq!(ctrl.identify_ns(2).unwrap().nguid, hex_nguid(uuid));
    assert_eq!(ctrl.identify_ns(2).unwrap().nsze, 128 * MIB / BS as u64);
    assert_eq!(read(&mut q, 2, 0, 64), b);
    assert_eq!(read(&mut q, 3, 0, 64), a);
    assert_eq!(read(&mut q, 2, 128 * 256 - 8, 8), b[..8 * BS].to_vec());
    let v = ok(&t, "volume_list", json!({"pool": "tank"}));
    assert_eq!(v.as_array().unwrap().len(), 3, "{v}");

    // Decouple the clone, then the snapshot's last child is db.
    ok(
        &t,
        "volume_decouple",
        json!({"pool": "tank", "name": "db-test"}),
    );
    assert_eq!(
        read(&mut q, 3, 0, 64),
        a,
        "a decoupled clone keeps its data"
    );
    let d = ok(&t, "volume_get", json!({"pool": "tank", "name": "db-test"}));
    assert_eq!(
        (d["parent"].clone(), d["shared"].as_u64()),
        (Value::Null, Some(0))
    );
    drop(q);
    let _ = ctrl.shutdown();
}

/// Deallocating the clone's (NSID 3) own cluster frees it, visibly.
fn thin_reclaim(t: &Target, q: &mut IoQueue, a: &[u8]) {
    // Thin reclaim: deallocating the clone's own cluster frees it.
    q.write_at(3, 8192, 8, &a[..8 * BS]).unwrap();
    q.flush(3).unwrap();
    let before = ok(t, "pool_list", json!({"name": "tank"}))[0]["allocated"]
        .as_u64()
        .unwrap();
    q.deallocate(3, &[(8192, 256)]).unwrap();
    q.flush(3).unwrap();
    assert_eq!(
        read(q, 3, 8192, 8),
        vec![0u8; 8 * BS],
        "deallocated reads zeroes"
    );
    let v = ok(t, "volume_get", json!({"pool": "tank", "name": "db-test"}));
    assert_eq!(v["allocated"], 0, "{v}");
    let freed = eventually(Duration::from_secs(20), || {
        let p = &ok(t, "pool_list", json!({"name": "tank"}))[0];
        p["allocated"].as_u64() == Some(before - MIB)
    });
    assert!(freed, "the pool got the cluster back");
}

/// Growing the exported `db` (NSID 2): the namespace follows, hosts are told.
fn grow_online(t: &Target, ctrl: &Controller, q: &mut IoQueue, b: &[u8]) {
    // Grow online: the namespace follows, hosts are told.
    let r = ok(
        t,
        "volume_resize",
        json!({"pool": "tank", "name": "db", "size": "128M"}),
    );
    assert_eq!(r["namespaces_changed"][0]["nsids"], json!([2]), "{r}");
    assert_eq!(ctrl.identify_ns(2).unwrap().nsze, 128 * MIB / BS as u64);
    let changed = ctrl.get_log_page(0x04, 0xFFFF_FFFF, 4096, 0).unwrap();
    assert_eq!(
        &changed[..4],
        &2u32.to_le_bytes(),
        "Changed Namespace List names NSID 2"
    );
    q.write_at(2, 128 * 256 - 8, 8, &b[..8 * BS]).unwrap();
}

#[test]
fn volumes_are_exported_snapshotted_cloned_resized_and_reclaimed() {
    let dir = TempDir::new("volumes-life");
    let dev = sparse(&dir.0, "tank0.img", 512 * MIB);
    pool_create("tank", &[&dev], None);
    let cfg = config(&dir.0, &[("tank", &dev)], &[]);
    let mport = free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let t = start(&dir.0, &cfg, &["--metrics", &maddr]);

    let pool = &ok(&t, "pool_list", json!({}))[0];
    assert_eq!(pool["name"], "tank");
    assert_eq!(pool["cluster_size"], MIB, "the default cluster: 1 MiB");
    assert_eq!(pool["allocated"], 0);
    let v = ok(
        &t,
        "volume_create",
        json!({"pool": "tank", "name": "db", "size": "64M"}),
    );
    assert_eq!(
        (v["size"].as_u64(), v["allocated"].as_u64()),
        (Some(64 * MIB), Some(0))
    );
    let uuid = v["uuid"].as_str().unwrap().to_owned();
    let r = ok(
        &t,
        "namespace_add",
        json!({"nqn": NQN, "backend": "volume", "volume": "tank/db"}),
    );
    assert_eq!(r["nsid"], 2);
    assert_eq!(
        ok(&t, "volume_get", json!({"pool": "tank", "name": "db"}))["exported"],
        true
    );

    let (ctrl, mut q) = connect(&t.serve.addr, 64 * BS as u32);
    let id = ctrl.identify_ns(2).unwrap();
    assert_eq!(id.nsze, 64 * MIB / BS as u64);
    assert_eq!(id.lbads, 12, "a volume's blocks are 4 KiB");
    assert_eq!(id.nguid, hex_nguid(&uuid), "NGUID from the volume's UUID");
    assert_eq!(id.dlfeat & 7, 1, "deallocated blocks read as zeroes");
    assert_eq!(id.nsfeat & 0x10, 0x10, "OPTPERF: NPDG/NPDA defined");
    assert_eq!(
        (id.npdg, id.npda),
        (255, 255),
        "one 1 MiB cluster in 4 KiB blocks, 0's based"
    );

    // Pattern A at LBA 0 (cluster 0) and at 16 MiB (cluster 16).
    let a = pattern(0xA0, 64);
    q.write_at(2, 0, 64, &a).unwrap();
    q.write_at(2, 4096, 64, &a).unwrap();
    q.flush(2).unwrap();
    let v = ok(&t, "volume_get", json!({"pool": "tank", "name": "db"}));
    assert_eq!(v["allocated"], 2 * MIB, "two clusters written");

    // Snapshot, then overwrite: the clone of the snapshot reads A, db reads B.
    let s = ok(
        &t,
        "snapshot_create",
        json!({"pool": "tank", "volume": "db", "name": "monday"}),
    );
    assert_eq!(s["snapshot"], true);
    let b = pattern(0xB0, 64);
    q.write_at(2, 0, 64, &b).unwrap();
    q.flush(2).unwrap();
    let c = ok(
        &t,
        "volume_clone",
        json!({"pool": "tank", "snapshot": "monday", "name": "db-test"}),
    );
    assert_eq!(c["parent"], "monday");
    let r = ok(
        &t,
        "namespace_add",
        json!({"nqn": NQN, "backend": "volume", "volume": "tank/db-test"}),
    );
    assert_eq!(r["nsid"], 3);
    drop(q);
    let _ = ctrl.shutdown();
    let (ctrl, mut q) = connect(&t.serve.addr, 64 * BS as u32);
    assert_eq!(
        read(&mut q, 3, 0, 64),
        a,
        "the clone reads the snapshot's data"
    );
    assert_eq!(read(&mut q, 2, 0, 64), b, "the volume reads its new data");
    assert_eq!(read(&mut q, 3, 4096, 64), a);
    let v = ok(&t, "volume_get", json!({"pool": "tank", "name": "db"}));
    assert_eq!(
        v["shared"], MIB,
        "cluster 16 is read through from the snapshot"
    );
    assert_eq!(v["allocated"], MIB, "cluster 0 was copied on write");

    thin_reclaim(&t, &mut q, &a);
    grow_online(&t, &ctrl, &mut q, &b);
    refusals(&t);
    assert_eq!(read(&mut q, 2, 0, 64), b, "db untouched by the refusals");
    ctl_and_metrics(&t, mport);

    restart_from_saved_config(&dir.0, t, (ctrl, q), &uuid, (&a, &b));
}

#[test]
fn a_full_pool_fails_only_the_writes_that_need_a_cluster() {
    let dir = TempDir::new("volumes-full");
    let dev = sparse(&dir.0, "small.img", 24 * MIB);
    pool_create("small", &[&dev], Some("64K"));
    let cfg = config(&dir.0, &[("small", &dev)], &[]);
    let t = start(&dir.0, &cfg, &[]);
    let pool = ok(&t, "pool_list", json!({}))[0].clone();
    let clusters = pool["free"].as_u64().unwrap() / (64 << 10);
    assert!(clusters > 4, "{pool}");
    // Thin: a volume far larger than the pool.
    ok(
        &t,
        "volume_create",
        json!({"pool": "small", "name": "big", "size": "1G"}),
    );
    ok(
        &t,
        "namespace_add",
        json!({"nqn": NQN, "backend": "volume", "volume": "small/big"}),
    );
    let (ctrl, mut q) = connect(&t.serve.addr, 16 * BS as u32);
    let data = pattern(0x5A, 16);
    let per = (64 << 10) / BS as u64; // blocks per cluster
    let mut written = 0u64;
    let status = loop {
        match q.write_at(2, written * per, 16, &data) {
            Ok(()) => written += 1,
            Err(e) => break e.status(),
        }
        assert!(
            written <= clusters,
            "more clusters written than the pool has"
        );
    };
    assert_eq!(
        status,
        Some(Status::CAPACITY_EXCEEDED),
        "the host sees Capacity Exceeded"
    );
    assert!(
        written + 2 >= clusters,
        "{written} of {clusters} clusters written before full"
    );
    // Everything else keeps working: reads, rewrites of allocated clusters, Flush.
    let other = pattern(0x33, 16);
    q.write_at(2, 0, 16, &other).unwrap();
    q.flush(2).unwrap();
    assert_eq!(read(&mut q, 2, 0, 16), other);
    assert_eq!(read(&mut q, 2, per, 16), data);
    let p = &ok(&t, "pool_list", json!({}))[0];
    assert_eq!(p["free"], 0, "{p}");
    // Deallocating gives the space back: the write that failed now succeeds.
    q.deallocate(2, &[(per, per as u32)]).unwrap();
    q.flush(2).unwrap();
    let back = eventually(Duration::from_secs(20), || {
        q.write_at(2, written * per, 16, &data).is_ok()
    });
    assert!(back, "a freed cluster is allocated again");
    assert_eq!(read(&mut q, 2, written * per, 16), data);
    drop(q);
    let _ = ctrl.shutdown();
}

#[test]
fn bad_pools_at_start_and_pool_check_name_what_is_wrong() {
    let dir = TempDir::new("volumes-bad");
    let dev = sparse(&dir.0, "p0.img", 64 * MIB);
    pool_create("p", &[&dev], None);
    let dev_s = dev.to_str().unwrap();
    let o = farflash(&["pool", "check", dev_s]);
    assert!(o.status.success(), "{o:?}");
    // Creating over a pool is refused.
    let o = farflash(&["pool", "create", "again", dev_s]);
    assert!(!o.status.success());
    let serve_fails = |cfg: &Path, what: &str| {
        let o = farflash(&[
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--rpc-socket",
            "none",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(what),
            "{what} not named: {err}"
        );
    };
    // A volume of an unknown pool; a missing device; a device of another size.
    let cfg = config(&dir.0, &[("p", &dev)], &["other/v"]);
    serve_fails(&cfg, "other");
    let gone = dir.0.join("gone.img");
    let cfg = config(&dir.0, &[("p", &gone)], &[]);
    serve_fails(&cfg, gone.to_str().unwrap());
    let copy = dir.0.join("copy.img");
    std::fs::copy(&dev, &copy).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&copy)
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();
    let cfg = config(&dir.0, &[("p", &copy)], &[]);
    serve_fails(&cfg, copy.to_str().unwrap());
    // Corrupt metadata: both superblock copies overwritten.
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::options().write(true).open(&copy).unwrap();
    f.set_len(64 * MIB).unwrap();
    f.write_all_at(&[0x5Au8; 8192], 0).unwrap();
    drop(f);
    let o = farflash(&["pool", "check", copy.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("problem"), "{o:?}");
    let cfg = config(&dir.0, &[("p", &copy)], &[]);
    serve_fails(&cfg, copy.to_str().unwrap());
    // The sound pool still opens and serves.
    let cfg = config(&dir.0, &[("p", &dev)], &[]);
    let t = start(&dir.0, &cfg, &[]);
    assert_eq!(ok(&t, "pool_list", json!({}))[0]["name"], "p");
    // A second pool_create on its devices, names: EXISTS for the name.
    let again = json!({"name": "p", "backend": "local", "devices": [dev_s]});
    assert_eq!(fails(&t, "pool_create", again, "\"p\""), -32002);
    let bad = json!({"name": "a/b", "backend": "local", "devices": [dev_s]});
    assert_eq!(fails(&t, "pool_create", bad, "a/b"), -32003);
    let noext = json!({"nqn": NQN, "backend": "volume", "volume": "p/none"});
    let r = rpc(&t, "namespace_add", noext);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("none"),
        "{r}"
    );
}

/// Writes of `blocks` at `lba` carrying (lba, generation) in every block.
fn stamp(buf: &mut [u8], lba: u64, gen: u64) {
    for (i, b) in buf.chunks_mut(BS).enumerate() {
        b.fill(0);
        b[0..8].copy_from_slice(&(lba + i as u64).to_le_bytes());
        b[8..16].copy_from_slice(&gen.to_le_bytes());
        b[16..24].copy_from_slice(b"FFVOLBLK");
    }
}

/// One SIGKILL round: a host writes (random LBAs over several clusters,
/// some FUA, a Flush every few writes, several in flight) until the target
/// is killed; after a restart every block made durable holds its durable
/// generation or a later one it was sent.
fn sigkill_round(dir: &Path, cfg: &Path, rng: &mut Rng, round: u32) {
    use farflash_host::cmd;
    use farflash_host::slot::DataDir;
    use std::collections::HashMap;
    const SPAN: u64 = 64 * 256; // 64 MiB in 4 KiB blocks
    let t = start(dir, cfg, &[]);
    let mut target = t.serve;
    let (ctrl, mut q) = connect(&target.addr, 4 * BS as u32);
    let mut issued: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut durable: HashMap<u64, u64> = HashMap::new();
    let mut since_flush: Vec<(u64, u64)> = Vec::new();
    let mut inflight: HashMap<u16, (u64, u64, bool)> = HashMap::new();
    let mut flush: Option<(u16, Vec<(u64, u64)>)> = None;
    let kill_after = 200 + rng.below(400);
    let mut gen = (round as u64) << 32;
    let mut acked = 0u64;
    let mut comps = Vec::new();
    let end = 'run: loop {
        if acked >= kill_after {
            // SAFETY: kill(2) on our own child's PID.
            unsafe { libc::kill(target.pid() as i32, libc::SIGKILL) };
        }
        while inflight.len() < 8 && acked < kill_after + 1000 {
            let lba = rng.below(SPAN);
            if inflight.values().any(|w| w.0 == lba) {
                break;
            }
            gen += 1;
            let fua = rng.below(6) == 0;
            let Some(cid) = q.alloc_cid() else { break };
            stamp(&mut q.buf_mut(cid).unwrap()[..BS], lba, gen);
            let mut sqe = cmd::rw(true, 2, lba, 1);
            if fua {
                sqe.cdw12 |= 1 << 30;
            }
            issued.entry(lba).or_default().push(gen);
            if let Err(e) = q.submit(cid, sqe, DataDir::ToCtrl, BS as u32) {
                break 'run e.to_string();
            }
            inflight.insert(cid, (lba, gen, fua));
        }
        if flush.is_none() && since_flush.len() >= 12 {
            if let Some(cid) = q.alloc_cid() {
                if let Err(e) = q.submit(cid, cmd::flush(2), DataDir::None, 0) {
                    break e.to_string();
                }
                flush = Some((cid, std::mem::take(&mut since_flush)));
            }
        }
        comps.clear();
        if let Err(e) = q.wait(&mut comps, Duration::from_secs(2)) {
            break e.to_string();
        }
        let mut failed = None;
        for c in &comps {
            if let Some((lba, g, fua)) = inflight.remove(&c.cid) {
                if let Err(e) = c.check() {
                    failed = Some(e.to_string());
                    break;
                }
                acked += 1;
                if fua {
                    durable.insert(lba, g.max(durable.get(&lba).copied().unwrap_or(0)));
                } else {
                    since_flush.push((lba, g));
                }
            } else if flush.as_ref().is_some_and(|f| f.0 == c.cid) {
                if let Err(e) = c.check() {
                    failed = Some(e.to_string());
                    break;
                }
                for (lba, g) in flush.take().map(|f| f.1).unwrap_or_default() {
                    durable.insert(lba, g.max(durable.get(&lba).copied().unwrap_or(0)));
                }
            }
        }
        if let Some(e) = failed {
            break e;
        }
    };
    assert!(
        acked >= kill_after,
        "round {round}: the host stopped early: {end}"
    );
    drop(q);
    drop(ctrl);
    assert!(
        target.signal(libc::SIGKILL).is_some(),
        "the target did not die"
    );
    drop(target);
    let t = start(dir, cfg, &[]);
    let (ctrl, mut q) = connect(&t.serve.addr, 4 * BS as u32);
    let mut checked = 0;
    for (lba, need) in &durable {
        let b = read(&mut q, 2, *lba, 1);
        let at = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let g = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let ok = &b[16..24] == b"FFVOLBLK"
            && at == *lba
            && g >= *need
            && issued.get(lba).is_some_and(|v| v.contains(&g));
        assert!(
            ok,
            "round {round}: LBA {lba} holds (lba {at}, gen {g:#x}), durable was {need:#x}; issued {:?}",
            issued.get(lba)
        );
        checked += 1;
    }
    eprintln!("  round {round}: {acked} writes acknowledged, {checked} durable blocks read back; host ended: {end}");
    drop(q);
    let _ = ctrl.shutdown();
}

#[test]
fn every_durable_write_survives_sigkill() {
    let dir = TempDir::new("volumes-kill");
    let dev = sparse(&dir.0, "k.img", 256 * MIB);
    pool_create("k", &[&dev], None);
    let cfg = config(&dir.0, &[("k", &dev)], &[]);
    let t = start(&dir.0, &cfg, &[]);
    ok(
        &t,
        "volume_create",
        json!({"pool": "k", "name": "v", "size": "64M"}),
    );
    drop(t);
    let cfg = config(&dir.0, &[("k", &dev)], &["k/v"]);
    let mut rng = Rng(seed_from_env("FARFLASH_VOLUMES_SEED"));
    for round in 0..4 {
        sigkill_round(&dir.0, &cfg, &mut rng, round);
    }
    let o = farflash(&["pool", "check", dev.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
}

#[test]
fn concurrent_calls_on_one_volume_each_get_an_answer_and_touch_no_other() {
    let dir = TempDir::new("volumes-concurrent");
    let dev = sparse(&dir.0, "c.img", 256 * MIB);
    pool_create("c", &[&dev], None);
    let cfg = config(&dir.0, &[("c", &dev)], &[]);
    let t = start(&dir.0, &cfg, &[]);
    ok(
        &t,
        "volume_create",
        json!({"pool": "c", "name": "a", "size": "16M"}),
    );
    ok(
        &t,
        "volume_create",
        json!({"pool": "c", "name": "other", "size": "8M"}),
    );
    ok(
        &t,
        "namespace_add",
        json!({"nqn": NQN, "backend": "volume", "volume": "c/other"}),
    );
    let (ctrl, mut q) = connect(&t.serve.addr, 16 * BS as u32);
    let data = pattern(0x77, 16);
    q.write_at(2, 0, 16, &data).unwrap();
    q.flush(2).unwrap();
    drop(q);
    let _ = ctrl.shutdown();
    // Eight clients at once on volume "a": snapshots of one name, resizes,
    // renames to one name. Each call succeeds or fails naming what it acted on.
    let sock = t.sock.clone();
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let (m, p) = match i % 4 {
                    0 => (
                        "snapshot_create",
                        json!({"pool": "c", "volume": "a", "name": "s"}),
                    ),
                    1 => (
                        "volume_resize",
                        json!({"pool": "c", "name": "a", "size": format!("{}M", 16 + 4 * i)}),
                    ),
                    2 => (
                        "volume_rename",
                        json!({"pool": "c", "name": "a", "new_name": "a2"}),
                    ),
                    _ => ("volume_get", json!({"pool": "c", "name": "a"})),
                };
                let req = json!({"jsonrpc": "2.0", "id": i, "method": m, "params": p});
                (m, common::rpc_exchange(&sock, req.to_string().as_bytes()).0)
            })
        })
        .collect();
    let mut renamed = 0;
    for c in calls {
        let (m, a) = c.join().expect("client thread");
        match a.get("error") {
            None => renamed += (m == "volume_rename") as u32,
            Some(e) => {
                let msg = e["message"].as_str().unwrap_or_default();
                assert!(
                    msg.contains("\"a\"") || msg.contains("\"s\"") || msg.contains("a2"),
                    "{m}: {a}"
                );
                assert!(
                    [-32001, -32002].contains(&e["code"].as_i64().unwrap_or(0)),
                    "{m}: {a}"
                );
            }
        }
    }
    assert_eq!(renamed, 1, "exactly one rename wins");
    let v = ok(&t, "volume_get", json!({"pool": "c", "name": "other"}));
    assert_eq!(
        (v["size"].as_u64(), v["allocated"].as_u64()),
        (Some(8 * MIB), Some(MIB))
    );
    let (ctrl, mut q) = connect(&t.serve.addr, 16 * BS as u32);
    assert_eq!(
        read(&mut q, 2, 0, 16),
        data,
        "the other volume is untouched"
    );
    drop(q);
    let _ = ctrl.shutdown();

    // Shrinking below written data needs force; not exported, it is allowed.
    ok(
        &t,
        "volume_create",
        json!({"pool": "c", "name": "w", "size": "8M"}),
    );
    ok(
        &t,
        "namespace_add",
        json!({"nqn": NQN, "nsid": 5, "backend": "volume", "volume": "c/w"}),
    );
    let (ctrl, mut q) = connect(&t.serve.addr, 16 * BS as u32);
    q.write_at(5, 1536, 16, &data).unwrap(); // at 6 MiB
    q.flush(5).unwrap();
    drop(q);
    let _ = ctrl.shutdown();
    ok(&t, "namespace_remove", json!({"nqn": NQN, "nsid": 5}));
    let unexported = eventually(Duration::from_secs(20), || {
        ok(&t, "volume_get", json!({"pool": "c", "name": "w"}))["exported"] == false
    });
    assert!(unexported, "the namespace let the volume go");
    let shrink = json!({"pool": "c", "name": "w", "size": "4M"});
    assert_eq!(fails(&t, "volume_resize", shrink, "w"), -32003);
    let v = ok(
        &t,
        "volume_resize",
        json!({"pool": "c", "name": "w", "size": "4M", "force": true}),
    );
    assert_eq!(v["size"], 4 * MIB);

    // Deleted right after its namespace's removal, a host still connected
    // and its queues still holding the volume: the delete waits for them
    // to let go (at their next tick) instead of answering "exported".
    ok(
        &t,
        "volume_create",
        json!({"pool": "c", "name": "gone", "size": "8M"}),
    );
    ok(
        &t,
        "namespace_add",
        json!({"nqn": NQN, "nsid": 6, "backend": "volume", "volume": "c/gone"}),
    );
    let (ctrl, mut q) = connect(&t.serve.addr, 16 * BS as u32);
    q.write_at(6, 0, 16, &data).unwrap();
    ok(&t, "namespace_remove", json!({"nqn": NQN, "nsid": 6}));
    ok(&t, "volume_delete", json!({"pool": "c", "name": "gone"}));
    drop(q);
    let _ = ctrl.shutdown();
}
