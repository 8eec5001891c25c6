//! The node's work on one volume; every step finds what an earlier call
//! left and goes on (idempotent), and the errors say which path or
//! command failed.

use super::cmd::{self, Connect};
use super::sys::{self, mounted_at, run, wait_for, KernelLog};
use super::{CONNECT_LIMIT, DEVICE_LIMIT, FS_LIMIT};
use crate::ids::VolumeId;
use crate::params::{SECRET_DHCHAP_CTRL_KEY, SECRET_DHCHAP_KEY, SECRET_TLS_PSK};
use crate::proto::volume_capability::AccessType;
use crate::proto::*;
use std::path::{Path, PathBuf};
use tonic::Status;

fn internal(e: String) -> Status {
    Status::internal(e)
}

/// The volume's NQN: from the publish context, else from its id.
fn nqn_of(
    volume_id: &str,
    context: &std::collections::HashMap<String, String>,
) -> Result<String, Status> {
    if let Some(n) = context.get("nqn") {
        return Ok(n.clone());
    }
    VolumeId::parse(volume_id)
        .map(|i| i.nqn())
        .map_err(|e| Status::not_found(e.to_string()))
}

/// The keys of a connect from the node-stage secrets; for TLS, the PSK
/// derived for this host and subsystem goes into the `.nvme` keyring
/// first (through keyctl's standard input).
fn keys(
    r: &NodeStageVolumeRequest,
    tls: bool,
    host: &str,
    hostid: Option<String>,
    nqn: &str,
) -> Result<cmd::Keys, Status> {
    let get = |k: &str| {
        r.secrets
            .get(k)
            .filter(|v| !v.is_empty())
            .map(|v| zeroize::Zeroizing::new(v.clone()))
    };
    let mut keys = cmd::Keys {
        hostid,
        dhchap_secret: get(SECRET_DHCHAP_KEY),
        dhchap_ctrl_secret: get(SECRET_DHCHAP_CTRL_KEY),
        tls_key: None,
    };
    if keys.dhchap_ctrl_secret.is_some() && keys.dhchap_secret.is_none() {
        return Err(Status::invalid_argument(format!(
            "secret key {SECRET_DHCHAP_KEY}: missing ({SECRET_DHCHAP_CTRL_KEY} is set: bidirectional DH-HMAC-CHAP needs both)"
        )));
    }
    if tls {
        let psk = get(SECRET_TLS_PSK).ok_or_else(|| {
            Status::invalid_argument(format!("secret key {SECRET_TLS_PSK}: missing (transport tls; set csi.storage.k8s.io/node-stage-secret-name)"))
        })?;
        keys.tls_key = Some(super::keyring::insert_psk(&psk, host, nqn)?);
    }
    Ok(keys)
}

/// Whether a failed connect was the keys' fault: the kernel's NVMe host
/// says so ("authentication failed", Linux host/auth.c; "TLS handshake
/// failed", host/tcp.c) or the write's errno is EKEYREJECTED, EKEYEXPIRED,
/// EACCES.
fn refused_keys(kernel: &[String], err: &str) -> bool {
    kernel.iter().any(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("authentication") || l.contains("tls handshake")
    }) || ["Key was rejected", "Key has expired", "Permission denied"]
        .iter()
        .any(|m| err.contains(m))
}

/// Connects every path of the volume not connected yet; the device.
fn connect(
    r: &NodeStageVolumeRequest,
    host: &str,
    hostid: Option<String>,
) -> Result<PathBuf, Status> {
    let nqn = nqn_of(&r.volume_id, &r.publish_context)?;
    let paths = r
        .publish_context
        .get("paths")
        .map(String::as_str)
        .unwrap_or("");
    if paths.is_empty() {
        return Err(Status::invalid_argument(
            "publish_context.paths: missing (published by farflash-csi's controller?)",
        ));
    }
    let mut ctx = r.volume_context.clone();
    if let Some(t) = r.publish_context.get("transport") {
        ctx.insert("transport".into(), t.clone());
    }
    drop_dead_controllers(&nqn, Path::new(&r.staging_target_path))?;
    let conns = paths
        .split(',')
        .map(|p| {
            Connect::new(p, &nqn, host, &ctx)
                .map_err(|e| Status::invalid_argument(format!("publish_context.{e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let todo: Vec<&Connect> = conns
        .iter()
        .filter(|c| !sys::has_path(&nqn, c.addr(), c.port()))
        .collect();
    let mut failed = Vec::new();
    let mut auth = false;
    if !todo.is_empty() {
        let keys = keys(r, todo[0].tls(), host, hostid, &nqn)?;
        for c in &todo {
            let opts = c.options(&keys).map_err(Status::invalid_argument)?;
            let mut log = KernelLog::now();
            match sys::fabrics_connect(opts, CONNECT_LIMIT) {
                Ok(a) => {
                    tracing::info!(volume = %r.volume_id, path = %c.describe(), controller = %a, "NodeStageVolume: connected");
                }
                Err(e) => {
                    let kernel = log.nvme_lines();
                    auth |= refused_keys(&kernel, &e);
                    let e = if kernel.is_empty() {
                        e
                    } else {
                        format!("{e}; kernel: {}", kernel.join(" | "))
                    };
                    tracing::warn!(volume = %r.volume_id, path = %c.describe(), "NodeStageVolume: connect failed: {e}");
                    failed.push(format!("{}: {e}", c.describe()));
                }
            }
        }
    }
    if failed.len() == conns.len() {
        // Nothing connected: no key of this volume stays in the keyring.
        super::keyring::remove_psks(host, &nqn)?;
        let why = failed.join("; ");
        return Err(if auth {
            Status::permission_denied(format!(
                "{nqn}: authentication failed (DH-HMAC-CHAP or TLS key refused; check the node-stage secret's {SECRET_DHCHAP_KEY}, {SECRET_DHCHAP_CTRL_KEY}, {SECRET_TLS_PSK}): {why}"
            ))
        } else {
            Status::unavailable(format!("no path of {nqn} connects: {why}"))
        });
    }
    wait_for(DEVICE_LIMIT, || sys::device(&nqn)).ok_or_else(|| {
        Status::deadline_exceeded(format!(
            "{nqn}: connected, but no namespace device within {} s",
            DEVICE_LIMIT.as_secs()
        ))
    })
}

pub fn stage(
    r: &NodeStageVolumeRequest,
    cap: &VolumeCapability,
    host: &str,
    hostid: Option<String>,
) -> Result<(), Status> {
    let dev = connect(r, host, hostid)?;
    let Some(AccessType::Mount(m)) = &cap.access_type else {
        // Raw block: publishing binds the device itself.
        return Ok(());
    };
    let fs = if m.fs_type.is_empty() {
        "ext4"
    } else {
        m.fs_type.as_str()
    };
    let staging = Path::new(&r.staging_target_path);
    format_and_mount(&dev.to_string_lossy(), staging, fs, &m.mount_flags)?;
    tracing::info!(volume = %r.volume_id, device = %dev.display(), staging = %staging.display(), "NodeStageVolume: mounted");
    Ok(())
}

/// Makes file system `fs` on `dev` when it holds none (another one is
/// refused) and mounts it on `staging` with `flags`; mounted already: done.
pub fn format_and_mount(
    dev: &str,
    staging: &Path,
    fs: &str,
    flags: &[String],
) -> Result<(), Status> {
    if let Some(have) = mounted_at(staging) {
        if sys::dev_number(dev).is_some_and(|n| n == have.dev) {
            return Ok(());
        }
        if sys::disk_live(&have.dev) {
            return Err(Status::failed_precondition(format!(
                "{}: {} is mounted there",
                staging.display(),
                have.source
            )));
        }
        // A mount of a disk that is gone (the node lost its controllers,
        // a reboot's leftovers): repaired, not refused.
        tracing::warn!(staging = %staging.display(), old = %have.source, "stale mount of a gone disk: unmounting it");
        unmount_stale(staging)?;
    }
    std::fs::create_dir_all(staging)
        .map_err(|e| internal(format!("{}: {e}", staging.display())))?;
    let probe = ["-p", "-o", "value", "-s", "TYPE", dev].map(String::from);
    match run("blkid", &probe, FS_LIMIT) {
        Ok(t) if !t.is_empty() && t != fs => {
            return Err(Status::failed_precondition(format!(
                "{dev} holds {t}, not the {fs} asked for"
            )));
        }
        Ok(t) if !t.is_empty() => {}
        // blkid: exit 2 when it finds nothing: the device is empty.
        _ => {
            let (prog, args) = cmd::mkfs(fs, dev).map_err(Status::invalid_argument)?;
            run(&prog, &args, FS_LIMIT).map_err(internal)?;
            tracing::info!(device = dev, fs, "file system made");
        }
    }
    let args = cmd::mount(fs, flags, dev, &staging.to_string_lossy());
    run("mount", &args, FS_LIMIT).map_err(internal)?;
    Ok(())
}

/// Unmounts the stale mounts on `dir` (lazily when the file system is
/// still busy: its disk is gone, nothing more can reach it).
fn unmount_stale(dir: &Path) -> Result<(), Status> {
    let d = dir.to_string_lossy().into_owned();
    while mounted_at(dir).is_some() {
        if run("umount", std::slice::from_ref(&d), FS_LIMIT).is_err() {
            run("umount", &["-l".to_owned(), d.clone()], FS_LIMIT).map_err(internal)?;
        }
    }
    Ok(())
}

/// Deletes the controllers of `nqn` that are not live (connecting to a
/// target that went away, left half made), unless the volume's disk is
/// mounted on `staging` (then the kernel's reconnects, within
/// ctrlLossTmo, are what keeps the file system): a repeated
/// NodeStageVolume then connects afresh.
fn drop_dead_controllers(nqn: &str, staging: &Path) -> Result<(), Status> {
    if mounted_at(staging).is_some_and(|m| sys::disk_live(&m.dev)) {
        return Ok(());
    }
    let dead: Vec<String> = sys::controllers(nqn)
        .into_iter()
        .map(|(c, _)| c)
        .filter(|c| sys::controller_state(c) != "live")
        .collect();
    for c in &dead {
        tracing::warn!(nqn, controller = %c, state = %sys::controller_state(c), "NodeStageVolume: a controller that is not live: deleting it to connect afresh");
        sys::delete_controller(c).map_err(internal)?;
    }
    if !dead.is_empty()
        && wait_for(DEVICE_LIMIT, || {
            let left = sys::controllers(nqn);
            (!left.iter().any(|(c, _)| dead.contains(c))).then_some(())
        })
        .is_none()
    {
        return Err(internal(format!("{nqn}: controllers {dead:?} not gone")));
    }
    Ok(())
}

/// Unmounts whatever is mounted on `dir` (stacked mounts too).
pub fn unmount_all(dir: &Path) -> Result<(), Status> {
    while mounted_at(dir).is_some() {
        run("umount", &[dir.to_string_lossy().into_owned()], FS_LIMIT).map_err(internal)?;
    }
    Ok(())
}

pub fn unstage(volume_id: &str, staging: &str, host: &str) -> Result<(), Status> {
    let dir = Path::new(staging);
    unmount_all(dir)?;
    let Ok(nqn) = nqn_of(volume_id, &Default::default()) else {
        // Not an id of ours: nothing of it was connected here.
        return Ok(());
    };
    if !sys::controllers(&nqn).is_empty() {
        run("nvme", &cmd::disconnect(&nqn), CONNECT_LIMIT).map_err(internal)?;
    }
    if wait_for(DEVICE_LIMIT, || {
        sys::controllers(&nqn).is_empty().then_some(())
    })
    .is_none()
    {
        return Err(Status::internal(format!(
            "{nqn}: controllers left after disconnect"
        )));
    }
    super::keyring::remove_psks(host, &nqn)?;
    let _ = std::fs::remove_dir(dir);
    tracing::info!(
        volume = volume_id,
        "NodeUnstageVolume: unmounted and disconnected"
    );
    Ok(())
}

pub fn publish(r: &NodePublishVolumeRequest, cap: &VolumeCapability) -> Result<(), Status> {
    let target = Path::new(&r.target_path);
    let from = match &cap.access_type {
        Some(AccessType::Block(_)) => {
            let nqn = nqn_of(&r.volume_id, &r.publish_context)?;
            let dev = sys::device(&nqn).ok_or_else(|| {
                Status::failed_precondition(format!("{nqn}: not staged (no device)"))
            })?;
            dev.to_string_lossy().into_owned()
        }
        _ => {
            mounted_at(Path::new(&r.staging_target_path)).ok_or_else(|| {
                Status::failed_precondition(format!("{}: not staged", r.staging_target_path))
            })?;
            r.staging_target_path.clone()
        }
    };
    let block = matches!(cap.access_type, Some(AccessType::Block(_)));
    bind_into(&from, target, block, r.readonly)?;
    tracing::info!(volume = %r.volume_id, target = %r.target_path, readonly = r.readonly, "NodePublishVolume: bound");
    Ok(())
}

/// Bind-mounts `from` (a staged directory, or with `block` a device) on
/// `target` (made: a directory, or a file for a device), read-only when
/// asked; bound already: done.
pub fn bind_into(from: &str, target: &Path, block: bool, readonly: bool) -> Result<(), Status> {
    if let Some(have) = mounted_at(target) {
        // (A bound device node shows devtmpfs's number: raw block is
        // bound once per device, nothing to compare.)
        let want = (!block)
            .then(|| mounted_at(Path::new(from)).map(|m| m.dev))
            .flatten();
        if want.is_none() || want.as_deref() == Some(have.dev.as_str()) {
            return Ok(());
        }
        // Bound from a disk that is gone (staged again since): rebound.
        tracing::warn!(target = %target.display(), "stale bind mount: unmounting it");
        unmount_stale(target)?;
    }
    let made = if block {
        let parent = target.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent).and_then(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(target)
                .map(drop)
        })
    } else {
        std::fs::create_dir_all(target)
    };
    made.map_err(|e| internal(format!("{}: {e}", target.display())))?;
    for args in cmd::bind(from, &target.to_string_lossy(), readonly) {
        run("mount", &args, FS_LIMIT).map_err(internal)?;
    }
    Ok(())
}

pub fn unpublish(target: &str) -> Result<(), Status> {
    let t = Path::new(target);
    unmount_all(t)?;
    if t.is_dir() {
        let _ = std::fs::remove_dir(t);
    } else if t.exists() {
        let _ = std::fs::remove_file(t);
    }
    tracing::info!(target, "NodeUnpublishVolume: unbound");
    Ok(())
}

fn not_there(p: &str) -> Status {
    Status::not_found(format!("volume_path {p}: not a mounted volume"))
}

pub fn stats(path: &str) -> Result<NodeGetVolumeStatsResponse, Status> {
    let p = Path::new(path);
    if !p.exists() {
        return Err(not_there(path));
    }
    let s = rustix::fs::statvfs(p).map_err(|e| internal(format!("{path}: {e}")))?;
    let f = s.f_frsize as i64;
    let usage = vec![
        VolumeUsage {
            available: s.f_bavail as i64 * f,
            total: s.f_blocks as i64 * f,
            used: (s.f_blocks - s.f_bfree) as i64 * f,
            unit: volume_usage::Unit::Bytes as i32,
        },
        VolumeUsage {
            available: s.f_favail as i64,
            total: s.f_files as i64,
            used: (s.f_files - s.f_ffree) as i64,
            unit: volume_usage::Unit::Inodes as i32,
        },
    ];
    Ok(NodeGetVolumeStatsResponse {
        usage,
        volume_condition: Some(VolumeCondition {
            abnormal: false,
            message: String::new(),
        }),
    })
}

/// The size in bytes of block device `dev` (/dev/NAME), from sysfs.
fn device_bytes(dev: &str) -> Option<i64> {
    let name = dev.trim_start_matches("/dev/");
    std::fs::read_to_string(format!("/sys/class/block/{name}/size"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .map(|sectors| sectors * 512)
}

/// Grows the file system mounted at `path` to its device, once the device
/// holds `required` bytes (the kernel takes the namespace's new size from
/// the target's Namespace Attribute Changed event a moment after
/// ControllerExpandVolume: wait for it, at most [`DEVICE_LIMIT`]).
pub fn expand(path: &str, required: i64) -> Result<NodeExpandVolumeResponse, Status> {
    let m = mounted_at(Path::new(path)).ok_or_else(|| not_there(path))?;
    let grown = wait_for(DEVICE_LIMIT, || {
        device_bytes(&m.source).filter(|b| *b >= required)
    });
    if grown.is_none() {
        return Err(Status::failed_precondition(format!(
            "{}: {} bytes after {} s, capacity_range.required_bytes {required} (has the controller expanded the volume?)",
            m.source,
            device_bytes(&m.source).unwrap_or(0),
            DEVICE_LIMIT.as_secs()
        )));
    }
    let (prog, args) = cmd::grow(&m.fstype, &m.source, path).map_err(Status::invalid_argument)?;
    run(&prog, &args, FS_LIMIT).map_err(|e| {
        if e.contains("Permission denied") {
            // ext4's online resize needs CAP_SYS_RESOURCE.
            internal(format!("{e} (growing a mounted file system needs CAP_SYS_RESOURCE: run the node plugin privileged)"))
        } else {
            internal(e)
        }
    })?;
    tracing::info!(path, device = %m.source, "NodeExpandVolume: file system grown");
    Ok(NodeExpandVolumeResponse {
        capacity_bytes: device_bytes(&m.source).unwrap_or(0),
    })
}
