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
    let staging = Path::new(&r.staging_target_path);
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
    let dev_s = dev.to_string_lossy().into_owned();
    if let Some(have) = mounted_at(staging) {
        if have.source == dev_s {
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
    let found = run(
        "blkid",
        &[
            "-p".into(),
            "-o".into(),
            "value".into(),
            "-s".into(),
            "TYPE".into(),
            dev_s.clone(),
        ],
        FS_LIMIT,
    );
    match found {
        Ok(t) if !t.is_empty() && t != fs => {
            return Err(Status::failed_precondition(format!(
                "{dev_s} holds {t}, not the {fs} asked for"
            )));
        }
        Ok(t) if !t.is_empty() => {}
        // blkid: exit 2 when it finds nothing: the device is empty.
        _ => {
            let (prog, args) = cmd::mkfs(fs, &dev_s).map_err(Status::invalid_argument)?;
            run(&prog, &args, FS_LIMIT).map_err(internal)?;
            tracing::info!(volume = %r.volume_id, device = %dev_s, fs, "NodeStageVolume: file system made");
        }
    }
    let args = cmd::mount(fs, &m.mount_flags, &dev_s, &r.staging_target_path);
    run("mount", &args, FS_LIMIT).map_err(internal)?;
    tracing::info!(volume = %r.volume_id, device = %dev_s, staging = %staging.display(), "NodeStageVolume: mounted");
    Ok(())
}

pub fn unstage(volume_id: &str, staging: &str) -> Result<(), Status> {
    let dir = Path::new(staging);
    while mounted_at(dir).is_some() {
        run("umount", &[staging.to_owned()], FS_LIMIT).map_err(internal)?;
    }
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
    if mounted_at(target).is_some() {
        return Ok(());
    }
    let from = match &cap.access_type {
        Some(AccessType::Block(_)) => {
            let nqn = nqn_of(&r.volume_id, &r.publish_context)?;
            let dev = sys::device(&nqn).ok_or_else(|| {
                Status::failed_precondition(format!("{nqn}: not staged (no device)"))
            })?;
            if let Some(d) = target.parent() {
                std::fs::create_dir_all(d)
                    .map_err(|e| internal(format!("{}: {e}", d.display())))?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(target)
                .map_err(|e| internal(format!("{}: {e}", target.display())))?;
            dev.to_string_lossy().into_owned()
        }
        _ => {
            mounted_at(Path::new(&r.staging_target_path)).ok_or_else(|| {
                Status::failed_precondition(format!("{}: not staged", r.staging_target_path))
            })?;
            std::fs::create_dir_all(target)
                .map_err(|e| internal(format!("{}: {e}", target.display())))?;
            r.staging_target_path.clone()
        }
    };
    for args in cmd::bind(&from, &r.target_path, r.readonly) {
        run("mount", &args, FS_LIMIT).map_err(internal)?;
    }
    tracing::info!(volume = %r.volume_id, target = %r.target_path, readonly = r.readonly, "NodePublishVolume: bound");
    Ok(())
}

pub fn unpublish(target: &str) -> Result<(), Status> {
    let t = Path::new(target);
    while mounted_at(t).is_some() {
        run("umount", &[target.to_owned()], FS_LIMIT).map_err(internal)?;
    }
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

pub fn expand(path: &str) -> Result<NodeExpandVolumeResponse, Status> {
    let m = mounted_at(Path::new(path)).ok_or_else(|| not_there(path))?;
    let (prog, args) = cmd::grow(&m.fstype, &m.source, path).map_err(Status::invalid_argument)?;
    run(&prog, &args, FS_LIMIT).map_err(internal)?;
    let dev = m.source.trim_start_matches("/dev/");
    let sectors = std::fs::read_to_string(format!("/sys/class/block/{dev}/size"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0);
    tracing::info!(path, device = %m.source, "NodeExpandVolume: file system grown");
    Ok(NodeExpandVolumeResponse {
        capacity_bytes: sectors * 512,
    })
}
