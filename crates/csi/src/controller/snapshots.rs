//! Snapshots: made in the source volume's pool on its primary target,
//! named `VOLUME@s-HASH` (crate::ids), so that a snapshot's id tells its
//! source.

use super::export::{absent_ok, Ops, Vol};
use super::invalid;
use super::listing::{all, page};
use crate::ids::{snapshot_name, VolumeId};
use crate::proto::*;
use serde_json::json;
use tonic::Status;

/// The source volume and the CSI name of a CreateSnapshot.
pub fn check_create(r: &CreateSnapshotRequest) -> Result<(VolumeId, String), Status> {
    if r.name.is_empty() {
        return Err(invalid("name: missing"));
    }
    if r.source_volume_id.is_empty() {
        return Err(invalid("source_volume_id: missing"));
    }
    if let Some(k) = r
        .parameters
        .keys()
        .find(|k| !k.starts_with("csi.storage.k8s.io/"))
    {
        return Err(invalid(format!(
            "parameter {k}: unknown (VolumeSnapshotClass parameters: none)"
        )));
    }
    let src = VolumeId::parse(&r.source_volume_id)
        .map_err(|e| Status::not_found(format!("source_volume_id: {e}")))?;
    Ok((src, r.name.clone()))
}

/// A snapshot as CSI describes it. The pool keeps no creation time: the
/// time of the answer is given (ready at once: a snapshot is a metadata
/// change in the pool).
fn describe(id: &VolumeId, v: &Vol) -> Snapshot {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Snapshot {
        size_bytes: v.size as i64,
        snapshot_id: id.to_string(),
        source_volume_id: id
            .snapshot_source()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        creation_time: Some(prost_types::Timestamp {
            seconds: now.as_secs() as i64,
            nanos: now.subsec_nanos() as i32,
        }),
        ready_to_use: true,
        group_snapshot_id: String::new(),
    }
}

pub fn create(ops: &Ops, src: &VolumeId, csi_name: &str) -> Result<Snapshot, Status> {
    let vol = ops.volume(src)?.filter(|v| !v.snapshot);
    vol.ok_or_else(|| Status::not_found(format!("source volume {src} does not exist")))?;
    let name = snapshot_name(csi_name, src.name());
    let id = src.sibling(&name);
    // The same CSI name taken of another volume: a clash.
    let (_, stem) = name.split_once('@').unwrap_or(("", &name));
    let clash = ops.list(src.primary())?.into_iter().find(|v| {
        v.pool == src.pool()
            && v.snapshot
            && v.name
                .split_once('@')
                .is_some_and(|(vol, s)| s == stem && vol != src.name())
    });
    if let Some(other) = clash {
        return Err(Status::already_exists(format!(
            "snapshot {csi_name} exists already, of volume {}",
            other.name.split_once('@').map_or("?", |(v, _)| v)
        )));
    }
    let snap = match ops.volume(&id)? {
        Some(s) => s,
        None => {
            let made = ops.call(
                src.primary(),
                "snapshot_create",
                json!({"pool": src.pool(), "volume": src.name(), "name": name}),
            )?;
            tracing::info!(snapshot = %id, "CreateSnapshot {csi_name}: taken of {src}");
            serde_json::from_value(made).map_err(|e| {
                Status::internal(format!(
                    "target {}: snapshot_create: unexpected answer: {e}",
                    src.primary()
                ))
            })?
        }
    };
    Ok(describe(&id, &snap))
}

pub fn delete(ops: &Ops, raw: &str) -> Result<(), Status> {
    let Some(id) = VolumeId::parse(raw)
        .ok()
        .filter(|i| i.snapshot_source().is_some())
    else {
        tracing::info!("DeleteSnapshot {raw}: not a farflash snapshot id; nothing to delete");
        return Ok(());
    };
    let gone = absent_ok(ops.call(
        id.primary(),
        "volume_delete",
        json!({"pool": id.pool(), "name": id.name()}),
    ))?;
    tracing::info!(snapshot = %id, "DeleteSnapshot: {}", if gone.is_some() { "deleted" } else { "gone already" });
    Ok(())
}

pub fn get(ops: &Ops, raw: &str) -> Result<Snapshot, Status> {
    let id = VolumeId::parse(raw)
        .ok()
        .filter(|i| i.snapshot_source().is_some())
        .ok_or_else(|| Status::not_found(format!("snapshot {raw} does not exist")))?;
    let v = ops.volume(&id)?.filter(|v| v.snapshot);
    let v = v.ok_or_else(|| Status::not_found(format!("snapshot {raw} does not exist")))?;
    Ok(describe(&id, &v))
}

pub fn list(ops: &Ops, r: ListSnapshotsRequest) -> Result<ListSnapshotsResponse, Status> {
    super::listing::check_page(r.max_entries, &r.starting_token)?;
    let mut items: Vec<(String, Vol)> = if !r.snapshot_id.is_empty() {
        // One snapshot, or none (an id that is not ours names nothing).
        match get(ops, &r.snapshot_id) {
            Ok(_) => all(ops, true)?
                .into_iter()
                .filter(|(id, _)| *id == r.snapshot_id)
                .collect(),
            Err(e) if e.code() == tonic::Code::NotFound => vec![],
            Err(e) => return Err(e),
        }
    } else {
        all(ops, true)?.into_iter().collect()
    };
    if !r.source_volume_id.is_empty() {
        items.retain(|(id, _)| {
            VolumeId::parse(id)
                .ok()
                .and_then(|i| i.snapshot_source())
                .is_some_and(|s| s.to_string() == r.source_volume_id)
        });
    }
    let (items, next_token) = page(items, r.max_entries, &r.starting_token)?;
    let entries = items
        .into_iter()
        .filter_map(|(id, v)| VolumeId::parse(&id).ok().map(|i| describe(&i, &v)))
        .map(|s| list_snapshots_response::Entry { snapshot: Some(s) })
        .collect();
    Ok(ListSnapshotsResponse {
        entries,
        next_token,
    })
}
