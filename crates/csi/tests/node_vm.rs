//! farflash-csi's Node service in a real Linux guest (Debian 12's 6.1
//! kernel under QEMU, tests/linux-host), against `farflash serve` with a
//! local pool on this machine and the CSI controller beside it (issue 45):
//!
//! * `node_in_linux_guest_multipath_on`: csi-sanity's Node Service specs
//!   (run in the guest, next to the node's socket, with the controller's
//!   socket bridged to the guest); then, through the crate's gRPC client:
//!   create, publish, stage (nvme connect, mkfs ext4, mount), publish into
//!   a pod path, write files, snapshot, clone from it, stage the clone,
//!   files equal; controller and node expansion with the file system seen
//!   to grow (df); volume stats; a target restart with a staged volume
//!   (writes during and after the outage succeed, within ctrlLossTmo) and
//!   staging against the stopped target failing in bounded time with its
//!   address; teardown leaving no volume, subsystem or allowed host on the
//!   target (management API) and no controller in the guest.
//! * `node_in_linux_guest_multipath_off`: `nvme_core.multipath=N` on the
//!   guest's kernel command line: staging, writing, reading back and
//!   unstaging on the controller's own namespace device; and a node
//!   reboot as kubelet handles it (NodeStageVolume and NodePublishVolume
//!   again, the data back), from stale mounts of a gone disk, from a clean
//!   state, and from a controller connected but nothing mounted.
//!
//! * `node_in_linux_guest_612_keys`: the 6.12 guest (`--kernel 6.12
//!   --tls`: Debian 13's kernel, tlshd, keyctl), the target listening
//!   `tls-optional:`: a volume with bidirectional DH-HMAC-CHAP and one
//!   over TLS (PSK), the keys in the CSI secrets maps as Kubernetes passes
//!   a Secret named by the StorageClass; a wrong key first (staging fails,
//!   PermissionDenied "authentication failed", no controller and no key
//!   left), then the right one (writes read back), unstaging leaving no
//!   key in the guest's keyrings and nothing on the target.
//!
//! One VM boot per test. Needs the VM harness's prerequisites, socat,
//! openssl, e2fsprogs and util-linux on this machine, csi-sanity (`bash
//! tests/csi-sanity.sh --build-only`) and `farflash` built (`cargo build -p
//! farflash --bin farflash`); a missing one fails the test. Run by
//! tests/run.sh:
//! `cargo test -p farflash-csi --test node_vm -- --ignored --test-threads=1 --nocapture`.

#[path = "node_vm/csi.rs"]
mod csi;
#[path = "node_vm/harness.rs"]
mod harness;

use csi::{map, Csi, Map, Vol};
use harness::{Host, Vm, HOST_ALIAS, POOL};
use serde_json::json;
use std::time::{Duration, Instant};

const MIB: i64 = 1 << 20;

/// The StorageClass parameters: the target, the pool, and how long the
/// guest's kernel keeps a lost controller (its reconnect every second).
fn params() -> Map {
    map(&[
        ("targets", "target-a"),
        ("pool", POOL),
        ("ctrlLossTmo", "120"),
        ("reconnectDelay", "1"),
    ])
}

fn staging(name: &str) -> String {
    format!("/var/lib/kubelet/plugins/kubernetes.io/csi/farflash/{name}/globalmount")
}

fn target(name: &str) -> String {
    format!("/var/lib/kubelet/pods/{name}/volumes/kubernetes.io~csi/pvc/mount")
}

/// The guest's NVMe controllers (/sys/class/nvme), "name state" each.
fn controllers(vm: &Vm) -> Vec<String> {
    let out = vm.ok(
        "list /sys/class/nvme",
        "for c in /sys/class/nvme/nvme*; do [ -e \"$c\" ] && echo \"${c##*/} $(cat $c/state)\"; done; true",
    );
    out.lines().map(str::to_string).collect()
}

/// The file system size in KiB that df reports for `dir`.
fn df_kib(vm: &Vm, dir: &str) -> i64 {
    let out = vm.ok(
        &format!("df {dir}"),
        &format!("df -k -P {dir} | awk 'NR == 2 {{ print $2 }}'"),
    );
    out.parse()
        .unwrap_or_else(|_| panic!("df -k -P {dir}: {out:?}"))
}

/// sha256 of every file under `dir` (relative names), lost+found aside.
fn digests(vm: &Vm, dir: &str) -> String {
    vm.ok(
        &format!("checksums under {dir}"),
        &format!("cd {dir} && find . -path ./lost+found -prune -o -type f -print | sort | xargs sha256sum"),
    )
}

/// What the target holds for the CSI driver: (volumes in the pool,
/// subsystems of CSI volumes, subsystems allowing `host`).
fn target_state(host: &Host, node: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let vols = host.rpc("volume_list", json!({ "pool": POOL }));
    let vols = vols
        .as_array()
        .expect("volume_list: an array")
        .iter()
        .map(|v| v["name"].as_str().unwrap_or("?").to_string())
        .collect();
    let subs = host.rpc("subsystem_list", json!({}));
    let subs = subs.as_array().expect("subsystem_list: an array");
    let nqn = |s: &serde_json::Value| s["nqn"].as_str().unwrap_or("?").to_string();
    let csi = subs
        .iter()
        .filter(|s| nqn(s).contains(".csi:"))
        .map(nqn)
        .collect();
    let allowing = subs
        .iter()
        .filter(|s| s.to_string().contains(node))
        .map(nqn)
        .collect();
    (vols, csi, allowing)
}

/// What the block device mounted on volume `name`'s staging path belongs
/// to: "head" (a native multipath head: its device is the NVMe subsystem)
/// or "controller" (multipath off: the controller's own namespace).
fn staged_on(vm: &Vm, name: &str) -> String {
    vm.ok(
        &format!("the device staged for {name}"),
        &format!(
            "d=$(awk '$2 == \"{}\" {{ print $1 }}' /proc/mounts); d=${{d#/dev/}}; [ -n \"$d\" ] || exit 1; \
             if [ -e /sys/block/$d/device/transport ]; then echo controller; \
             elif [ -e /sys/block/$d/device/subsysnqn ]; then echo head; else ls -l /sys/block/$d/device/; exit 1; fi",
            staging(name)
        ),
    )
}

/// csi-sanity's Node Service specs, in the guest.
fn sanity_in_guest(vm: &Vm, host: &Host) {
    let t0 = Instant::now();
    let (rc, out) = vm.sh(&format!(
        "printf 'targets: target-a\\npool: {POOL}\\n' >/tmp/params.yaml\n\
         \"$CSI_SANITY\" --csi.endpoint /run/csi/csi.sock \
         --csi.controllerendpoint {HOST_ALIAS}:{} \
         --csi.testvolumeparameters /tmp/params.yaml \
         --csi.testvolumesize 67108864 --csi.testvolumeexpandsize 134217728 \
         --csi.stagingdir /tmp/csi-staging --csi.mountdir /tmp/csi-mount \
         --ginkgo.focus 'Node Service' --ginkgo.v --ginkgo.no-color",
        host.bridge_port
    ));
    println!("{out}");
    let summary = out
        .lines()
        .find(|l| l.contains(" Passed | "))
        .unwrap_or("no summary");
    let ran = out
        .lines()
        .find(|l| l.starts_with("Ran "))
        .unwrap_or("no Ran line");
    let by_caps = out.lines().filter(|l| l.starts_with("S [SKIPPED]")).count();
    println!(
        "[node_vm] csi-sanity Node Service in the guest: {ran}; {summary}; \
         skipped for a capability not advertised: {by_caps} ({} s)",
        t0.elapsed().as_secs()
    );
    assert_eq!(
        rc, 0,
        "csi-sanity's Node Service specs failed in the guest: {summary}"
    );
    let passed: u32 = summary
        .split(" Passed")
        .next()
        .and_then(|s| s.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed > 0, "csi-sanity ran no Node Service spec: {ran}");
}

/// Stage and publish `v` under `name`; the pod's path.
fn attach(c: &Csi, node: &str, v: &mut Vol, name: &str) -> String {
    c.publish(v, node);
    c.stage(v, &staging(name));
    c.node_publish(v, &staging(name), &target(name));
    target(name)
}

fn detach(c: &Csi, node: &str, v: &Vol, name: &str) {
    c.node_unpublish(v, &target(name));
    c.unstage(v, &staging(name));
    c.unpublish(v, node);
}

/// Snapshot a written volume, clone it, stage the clone: same files.
fn snapshot_and_clone(c: &Csi, vm: &Vm, node: &str, a: &Vol, pod_a: &str) -> (String, Vol) {
    vm.ok(
        "write files into volume a",
        &format!(
            "mkdir -p {pod_a}/dir && for i in 1 2 3; do head -c $((i * 512 * 1024)) /dev/urandom >{pod_a}/dir/f$i; done \
             && echo 'written by node_vm' >{pod_a}/hello && sync"
        ),
    );
    let want = digests(vm, pod_a);
    assert_eq!(want.lines().count(), 4, "files in volume a: {want}");
    let snap = c.snapshot(&a.id, "node-vm-snap");
    let mut clone = c.create("node-vm-clone", 64 * MIB, &params(), Some(&snap));
    let pod_c = attach(c, node, &mut clone, "clone");
    let got = digests(vm, &pod_c);
    assert_eq!(
        got, want,
        "the clone of snapshot {snap} holds other files than volume a"
    );
    (snap, clone)
}

/// Grow volume a (controller, then node): df in the guest follows.
fn expand(c: &Csi, vm: &Vm, a: &Vol, pod_a: &str) {
    let before = df_kib(vm, pod_a);
    let (cap, node_needed) = c.expand(a, 128 * MIB);
    assert!(
        cap >= 128 * MIB && node_needed,
        "ControllerExpandVolume: {cap} bytes, node expansion required {node_needed}"
    );
    let got = c.node_expand(a, pod_a, &staging("a"), 128 * MIB);
    assert!(
        got >= 128 * MIB,
        "NodeExpandVolume reports {got} bytes, want at least {}",
        128 * MIB
    );
    let after = df_kib(vm, pod_a);
    assert!(
        after > before + 48 * 1024,
        "df of volume a: {before} KiB before the expansion, {after} KiB after (want about 64 MiB more)"
    );
    let (total, used) = c.stats(a, pod_a);
    assert_eq!(
        total / 1024,
        after,
        "NodeGetVolumeStats total {total} bytes against df's {after} KiB"
    );
    assert!(
        used >= 3 * MIB,
        "NodeGetVolumeStats used {used} bytes after 3 MiB written"
    );
    println!(
        "[node_vm] volume a grew: df {before} KiB -> {after} KiB; stats total {total}, used {used}"
    );
}

/// The target stops and starts again while volume a is staged: a write
/// during the outage and one after it succeed; staging volume `down`
/// while the target is stopped fails in bounded time naming it.
fn restart_target(c: &Csi, vm: &Vm, host: &mut Host, pod_a: &str, down: &Vol) {
    let addr = format!("{HOST_ALIAS}:{}", host.nvme_port);
    host.stop_target();
    assert!(
        harness::wait_until(Duration::from_secs(30), || controllers(vm)
            .iter()
            .any(|l| !l.ends_with(" live"))),
        "the guest's controller stayed live with the target stopped: {:?}",
        controllers(vm)
    );
    vm.ok(
        "start a write during the outage",
        &format!(
            "setsid bash -c 'head -c 1048576 /dev/urandom >{pod_a}/during && sync \
             && sha256sum {pod_a}/during >/tmp/during.sha && touch /tmp/during.done' \
             >/tmp/during.log 2>&1 </dev/null &"
        ),
    );
    let t0 = Instant::now();
    let e = c
        .try_stage(down, &staging("down"))
        .expect_err("NodeStageVolume succeeded with the target stopped");
    let took = t0.elapsed();
    assert!(
        took < farflash_csi::node::CONNECT_LIMIT + Duration::from_secs(30),
        "NodeStageVolume with the target down took {} s",
        took.as_secs()
    );
    assert!(
        e.message().contains(&addr) && e.code() == tonic::Code::Unavailable,
        "NodeStageVolume with the target down: {:?} {:?}, want Unavailable naming {addr}",
        e.code(),
        e.message()
    );
    println!(
        "[node_vm] staging with the target down failed in {} ms: {}",
        took.as_millis(),
        e.message()
    );
    unreachable_target(c, down);
    let nqn = down.publish.get("nqn").expect("publish_context.nqn");
    vm.ok(
        "no controller left of the failed staging",
        &format!("! grep -lx '{nqn}' /sys/class/nvme/nvme*/subsysnqn"),
    );
    let t0 = Instant::now();
    host.restart_target();
    vm.ok(
        "the write during the outage completes after the restart",
        "for i in $(seq 1200); do [ -e /tmp/during.done ] && exit 0; sleep 0.1; done; cat /tmp/during.log; exit 1",
    );
    let state = controllers(vm);
    assert!(
        state.len() == 1 && state[0].ends_with(" live"),
        "after the restart the guest's controllers are {state:?}, want one live"
    );
    vm.ok(
        "write and read back after the restart",
        &format!(
            "head -c 1048576 /dev/urandom >{pod_a}/after && sync && echo 3 >/proc/sys/vm/drop_caches \
             && sha256sum -c /tmp/during.sha && grep -q ' {pod_a} ext4 rw' /proc/mounts"
        ),
    );
    println!(
        "[node_vm] the target restarted; the guest's I/O resumed {} ms after the start",
        t0.elapsed().as_millis()
    );
}

/// A path to an address nobody answers (the guest's SYNs are dropped:
/// QEMU's restricted user network): NodeStageVolume gives up after
/// CONNECT_LIMIT, naming the path, and leaves no controller.
fn unreachable_target(c: &Csi, down: &Vol) {
    let path = "10.0.2.99:4420";
    let mut publish = down.publish.clone();
    publish.insert("paths".into(), path.into());
    let v = Vol {
        id: down.id.clone(),
        context: down.context.clone(),
        publish,
        secrets: Map::new(),
    };
    let t0 = Instant::now();
    let e = c
        .try_stage(&v, &staging("unreachable"))
        .expect_err("NodeStageVolume succeeded against an unreachable address");
    let took = t0.elapsed();
    assert!(
        took < farflash_csi::node::CONNECT_LIMIT + Duration::from_secs(30),
        "NodeStageVolume against {path} took {} s",
        took.as_secs()
    );
    assert!(
        e.message().contains(path) && e.code() == tonic::Code::Unavailable,
        "NodeStageVolume against {path}: {:?} {:?}, want Unavailable naming it",
        e.code(),
        e.message()
    );
    println!(
        "[node_vm] staging against unreachable {path} failed in {} ms: {}",
        took.as_millis(),
        e.message()
    );
}

/// A node reboot, as kubelet sees it: NodeStageVolume and
/// NodePublishVolume called again for a volume staged and published
/// before. Three states of the node, each brought back with the volume's
/// data (`/tmp/data.sha`, written before):
/// 1. its controllers gone under the mounts (`nvme disconnect-all` with
///    the staging and pod paths still mounted: stale mounts of a gone
///    disk), repaired, not refused;
/// 2. a clean reboot (nothing mounted, no controller);
/// 3. half done: a controller of the volume connected (with the node's
///    host NQN and its path) but nothing mounted.
fn node_reboot(c: &Csi, vm: &Vm, v: &Vol, name: &str) {
    let (st, pod) = (staging(name), target(name));
    let nqn = v.publish.get("nqn").expect("publish_context.nqn");
    let again = |what: &str| {
        let t0 = Instant::now();
        c.stage(v, &st);
        c.node_publish(v, &st, &pod);
        vm.ok(
            &format!("{what}: the data is back"),
            &format!(
                "echo 3 >/proc/sys/vm/drop_caches; cd {pod} && sha256sum -c /tmp/data.sha \
                 && test $(awk '$2 == \"{st}\"' /proc/mounts | wc -l) = 1 \
                 && test $(awk '$2 == \"{pod}\"' /proc/mounts | wc -l) = 1 \
                 && touch {pod}/after-{}",
                what.split(' ').next().unwrap_or("x")
            ),
        );
        let ctrls = controllers(vm);
        assert!(
            ctrls.len() == 1 && ctrls[0].ends_with(" live"),
            "{what}: the guest's controllers are {ctrls:?}, want one live"
        );
        println!(
            "[node_vm] {what}: staged and published again in {} ms",
            t0.elapsed().as_millis()
        );
    };
    vm.ok(
        "controllers gone under the mounts",
        &format!("sync && nvme disconnect-all && ! grep -qlx '{nqn}' /sys/class/nvme/nvme*/subsysnqn && grep -q ' {st} ' /proc/mounts"),
    );
    again("stale mounts of a gone disk");
    vm.ok(
        "a clean reboot: nothing mounted, no controller",
        &format!("sync && umount {pod} && umount {st} && nvme disconnect-all && test -d {st}"),
    );
    again("clean reboot");
    let (addr, port) = v.publish["paths"]
        .split(',')
        .next()
        .and_then(|p| p.rsplit_once(':'))
        .expect("publish_context.paths");
    vm.ok(
        "half done: connected, not mounted",
        &format!(
            "sync && umount {pod} && umount {st} && nvme disconnect-all \
             && nvme connect -t tcp -a {addr} -s {port} -n {nqn} --hostnqn=$(cat /etc/nvme/hostnqn) \
             && for i in $(seq 200); do ls /sys/class/nvme/nvme*/nvme*n1 >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"
        ),
    );
    again("half-connected");
}

/// Nothing of the CSI driver left on the target or in the guest.
fn nothing_left(host: &Host, vm: &Vm, node: &str) {
    let (vols, subs, allowing) = target_state(host, node);
    assert!(
        vols.is_empty() && subs.is_empty() && allowing.is_empty(),
        "left on the target: volumes {vols:?}, CSI subsystems {subs:?}, subsystems allowing the node {allowing:?}"
    );
    let saved = host.rpc("save_config", json!({}));
    let toml = saved["toml"].as_str().unwrap_or("");
    assert!(
        !toml.contains(node) && !toml.contains("dhchap") && !toml.contains("psk"),
        "the target's configuration still names the node or a key:\n{toml}"
    );
    let ctrls = controllers(vm);
    assert!(
        ctrls.is_empty(),
        "NVMe controllers left in the guest: {ctrls:?}"
    );
    vm.ok(
        "no mount of the driver left",
        "! grep -E 'kubelet|csi-staging|csi-mount' /proc/mounts",
    );
}

#[test]
#[ignore = "boots a Linux VM (TCG, minutes); run by tests/run.sh"]
fn node_in_linux_guest_multipath_on() {
    let t0 = Instant::now();
    let mut host = Host::start("mp-on");
    let vm = Vm::boot(&host, true, &[]);
    let c = Csi::connect(host.bridge_port, vm.node_port);
    let node = c.node_id();
    assert_eq!(node, vm.hostnqn, "NodeGetInfo's node id");

    sanity_in_guest(&vm, &host);
    let (vols, subs, _) = target_state(&host, &node);
    assert!(
        vols.is_empty() && subs.is_empty(),
        "csi-sanity left volumes {vols:?} and subsystems {subs:?}"
    );
    let left = controllers(&vm);
    assert!(
        left.is_empty(),
        "csi-sanity left NVMe controllers in the guest: {left:?}"
    );

    let t1 = Instant::now();
    let mut a = c.create("node-vm-a", 64 * MIB, &params(), None);
    let pod_a = attach(&c, &node, &mut a, "a");
    let (_, _, allowing) = target_state(&host, &node);
    assert_eq!(
        allowing.len(),
        1,
        "subsystems allowing the node: {allowing:?}"
    );
    assert_eq!(
        staged_on(&vm, "a"),
        "head",
        "multipath on: the staged device of volume a"
    );
    let (snap, clone) = snapshot_and_clone(&c, &vm, &node, &a, &pod_a);
    expand(&c, &vm, &a, &pod_a);
    detach(&c, &node, &clone, "clone");
    assert_eq!(
        controllers(&vm).len(),
        1,
        "controllers after unstaging the clone"
    );
    let mut down = c.create("node-vm-down", 64 * MIB, &params(), None);
    c.publish(&mut down, &node);
    restart_target(&c, &vm, &mut host, &pod_a, &down);
    c.unpublish(&down, &node);
    detach(&c, &node, &a, "a");
    c.delete(&clone.id);
    c.delete(&down.id);
    c.delete_snapshot(&snap);
    c.delete(&a.id);
    nothing_left(&host, &vm, &node);
    println!(
        "[node_vm] end to end in {} s (sanity and boot included: {} s)",
        t1.elapsed().as_secs(),
        t0.elapsed().as_secs()
    );
    assert!(
        !host.controller_log().contains("panicked"),
        "the controller panicked"
    );
    vm.finish();
}

#[test]
#[ignore = "boots a Linux VM (TCG, minutes); run by tests/run.sh"]
fn node_in_linux_guest_multipath_off() {
    let t0 = Instant::now();
    let host = Host::start("mp-off");
    let vm = Vm::boot(&host, false, &[]);
    let c = Csi::connect(host.bridge_port, vm.node_port);
    let node = c.node_id();
    let mut a = c.create("node-vm-nomp", 64 * MIB, &params(), None);
    let pod = attach(&c, &node, &mut a, "nomp");
    assert_eq!(
        staged_on(&vm, "nomp"),
        "controller",
        "multipath off: the staged device of volume nomp"
    );
    vm.ok(
        "write and read back without multipath",
        &format!(
            "head -c 2097152 /dev/urandom >{pod}/data && sha256sum {pod}/data >/tmp/data.sha && sync \
             && echo 3 >/proc/sys/vm/drop_caches && sha256sum -c /tmp/data.sha"
        ),
    );
    node_reboot(&c, &vm, &a, "nomp");
    detach(&c, &node, &a, "nomp");
    c.delete(&a.id);
    nothing_left(&host, &vm, &node);
    println!("[node_vm] multipath off: {} s", t0.elapsed().as_secs());
    vm.finish();
}

/// A random 32-byte key.
fn random_key() -> Vec<u8> {
    let mut k = vec![0u8; 32];
    let mut f = std::fs::File::open("/dev/urandom").expect("/dev/urandom");
    std::io::Read::read_exact(&mut f, &mut k).expect("random bytes");
    k
}

/// A DH-HMAC-CHAP secret (`DHHC-1:00:...:`, as `nvme gen-dhchap-key`).
fn dhchap_secret() -> String {
    let s = farflash_auth::Secret::new(&random_key(), None).expect("a secret");
    s.to_dhhc().to_string()
}

/// A configured TLS PSK (`NVMeTLSkey-1:01:...:`, as `nvme gen-tls-key`).
fn tls_psk() -> String {
    farflash_psk::format_interchange(1, 1, &random_key()).to_string()
}

/// The guest's TLS PSKs in its keyrings (/proc/keys lines of type psk).
fn guest_psks(vm: &Vm) -> Vec<String> {
    let out = vm.ok("psk keys", "awk '$8 == \"psk\"' /proc/keys");
    out.lines().map(str::to_string).collect()
}

/// Staging `v` with `wrong` in place of its secrets fails, naming the
/// authentication failure, and leaves no controller and no key; then it
/// stages with its own, and a write reads back.
fn keys_wrong_then_right(c: &Csi, vm: &Vm, v: &Vol, wrong: Map, name: &str) -> String {
    let bad = Vol {
        id: v.id.clone(),
        context: v.context.clone(),
        publish: v.publish.clone(),
        secrets: wrong,
    };
    let t0 = Instant::now();
    let e = c
        .try_stage(&bad, &staging(name))
        .expect_err("NodeStageVolume succeeded with a wrong key");
    assert!(
        e.code() == tonic::Code::PermissionDenied && e.message().contains("authentication failed"),
        "{name}: a wrong key: {:?} {:?}, want PermissionDenied naming the authentication failure",
        e.code(),
        e.message()
    );
    for s in bad.secrets.values() {
        assert!(
            !e.message().contains(s.as_str()),
            "the error shows a secret"
        );
    }
    println!(
        "[node_vm] {name}: a wrong key failed staging in {} ms: {}",
        t0.elapsed().as_millis(),
        e.message()
    );
    let nqn = v.publish.get("nqn").expect("publish_context.nqn");
    vm.ok(
        &format!("{name}: no controller of {nqn} left"),
        &format!("! grep -lx '{nqn}' /sys/class/nvme/nvme*/subsysnqn"),
    );
    assert!(
        guest_psks(vm).is_empty(),
        "{name}: keys left: {:?}",
        guest_psks(vm)
    );
    c.stage(v, &staging(name));
    c.node_publish(v, &staging(name), &target(name));
    let pod = target(name);
    vm.ok(
        &format!("{name}: write and read back"),
        &format!(
            "head -c 1048576 /dev/urandom >{pod}/data && sha256sum {pod}/data >/tmp/{name}.sha && sync \
             && echo 3 >/proc/sys/vm/drop_caches && sha256sum -c /tmp/{name}.sha"
        ),
    );
    pod
}

#[test]
#[ignore = "boots a Linux VM (TCG, minutes); run by tests/run.sh"]
fn node_in_linux_guest_612_keys() {
    let t0 = Instant::now();
    let host = Host::start_tls_optional("keys");
    let vm = Vm::boot_kernel(&host, true, true, &[]);
    let c = Csi::connect(host.bridge_port, vm.node_port);
    let node = c.node_id();

    // DH-HMAC-CHAP, bidirectional.
    let mut p = params();
    p.insert("dhchap".into(), "true".into());
    let mut dh = c.create("node-vm-dhchap", 64 * MIB, &p, None);
    dh.secrets = map(&[
        ("dhchapKey", &dhchap_secret()),
        ("dhchapCtrlKey", &dhchap_secret()),
    ]);
    c.publish(&mut dh, &node);
    let mut wrong = dh.secrets.clone();
    wrong.insert("dhchapKey".into(), dhchap_secret());
    keys_wrong_then_right(&c, &vm, &dh, wrong, "dhchap");
    vm.ok(
        "the controller authenticated both ways",
        "for c in /sys/class/nvme/nvme*; do test -s $c/dhchap_secret && test -s $c/dhchap_ctrl_secret || exit 1; done",
    );

    // TLS with a PSK.
    let mut p = params();
    p.insert("transport".into(), "tls".into());
    let mut tls = c.create("node-vm-tls", 64 * MIB, &p, None);
    tls.secrets = map(&[("tlsPsk", &tls_psk())]);
    c.publish(&mut tls, &node);
    let wrong = map(&[("tlsPsk", &tls_psk())]);
    keys_wrong_then_right(&c, &vm, &tls, wrong, "tls");
    let psks = guest_psks(&vm);
    let nqn = tls.publish.get("nqn").expect("nqn");
    assert!(
        psks.len() == 1 && psks[0].contains(nqn.as_str()) && psks[0].contains(" NVMe1R01 "),
        "the TLS PSK in the guest's keyring: {psks:?}"
    );
    vm.ok(
        "the TLS controller uses that key",
        &format!("grep -lx '{nqn}' /sys/class/nvme/nvme*/subsysnqn | while read f; do d=${{f%/subsysnqn}}; test -n \"$(cat $d/tls_key)\" || exit 1; done"),
    );

    detach(&c, &node, &dh, "dhchap");
    detach(&c, &node, &tls, "tls");
    assert!(
        guest_psks(&vm).is_empty(),
        "keys left after unstaging: {:?}",
        guest_psks(&vm)
    );
    c.delete(&dh.id);
    c.delete(&tls.id);
    nothing_left(&host, &vm, &node);
    println!("[node_vm] 6.12 keys: {} s", t0.elapsed().as_secs());
    vm.finish();
}
