//! The node's work on one volume; every step finds what an earlier call
//! left and goes on (idempotent), and the errors say which path or
//! command failed.

use super::cmd::{self, Connect};
use super::sys::{self, mounted_at, run, wait_for};
use super::{CONNECT_LIMIT, DEVICE_LIMIT, FS_LIMIT};
use crate::ids::VolumeId;
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

/// Connects every path of the volume not connected yet; the device.
fn connect(r: &NodeStageVolumeRequest, host: &str) -> Result<PathBuf, Status> {
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
    let mut failed = Vec::new();
    let mut up = 0;
    for p in paths.split(',') {
        let c = Connect::new(p, &nqn, host, &ctx)
            .map_err(|e| Status::invalid_argument(format!("publish_context.{e}")))?;
        let (addr, port) = p.rsplit_once(':').unwrap_or((p, ""));
        if sys::has_path(&nqn, addr.trim_matches(['[', ']']), port) {
            up += 1;
            continue;
        }
        if ctx.get("transport").is_some_and(|t| t == "tls") {
            let psk = r.secrets.get(crate::params::SECRET_TLS_PSK).ok_or_else(|| {
                Status::invalid_argument("secret key tlsPsk: missing (transport tls; set csi.storage.k8s.io/node-stage-secret-name)")
            })?;
            run("nvme", &cmd::tls_key_insert(psk, host, &nqn), CONNECT_LIMIT).map_err(internal)?;
        }
        match run("nvme", &c.args(&r.secrets), CONNECT_LIMIT) {
            Ok(_) => {
                up += 1;
                tracing::info!(volume = %r.volume_id, path = %c.describe(), "NodeStageVolume: connected");
            }
            Err(e) => {
                tracing::warn!(volume = %r.volume_id, path = %c.describe(), "NodeStageVolume: connect failed: {e}");
                failed.push(format!("{}: {e}", c.describe()));
            }
        }
    }
    if up == 0 {
        return Err(Status::unavailable(format!(
            "no path of {nqn} connects: {}",
            failed.join("; ")
        )));
    }
    wait_for(DEVICE_LIMIT, || sys::device(&nqn)).ok_or_else(|| {
        Status::deadline_exceeded(format!(
            "{nqn}: connected, but no namespace device within {} s",
            DEVICE_LIMIT.as_secs()
        ))
    })
}

pub fn stage(r: &NodeStageVolumeRequest, cap: &VolumeCapability, host: &str) -> Result<(), Status> {
    let dev = connect(r, host)?;
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
        if have.source == dev {
            return Ok(());
        }
        return Err(Status::failed_precondition(format!(
            "{}: {} is mounted there",
            staging.display(),
            have.source
        )));
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

/// Unmounts whatever is mounted on `dir` (stacked mounts too).
pub fn unmount_all(dir: &Path) -> Result<(), Status> {
    while mounted_at(dir).is_some() {
        run("umount", &[dir.to_string_lossy().into_owned()], FS_LIMIT).map_err(internal)?;
    }
    Ok(())
}

pub fn unstage(volume_id: &str, staging: &str) -> Result<(), Status> {
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
    if mounted_at(target).is_some() {
        return Ok(());
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
