//! Volumes: create (empty, from a snapshot, from a volume), delete,
//! validate, list, get, expand, modify (QoS), and the pools' capacity.

use super::export::{absent_ok, Ops, Vol};
use super::{invalid, parse_id, publish};
use crate::caps;
use crate::ids::{snapshot_name, volume_name, VolumeId};
use crate::params::{self, VolumeParams};
use crate::proto::volume_content_source::{SnapshotSource, Type as Source, VolumeSource};
use crate::proto::*;
use farflash_mgmt::jsonrpc as rpc;
use serde_json::{json, Map, Value};
use tonic::Status;

/// Size of a volume whose request names none.
pub const DEFAULT_SIZE: u64 = 1 << 30;

/// A checked CreateVolume.
pub struct CreatePlan {
    csi_name: String,
    id: VolumeId,
    params: VolumeParams,
    size: u64,
    required: u64,
    limit: Option<u64>,
    source: Option<Source>,
}

impl CreatePlan {
    /// What concurrent calls for the same volume contend on.
    pub fn key(&self) -> String {
        self.id.to_string()
    }
}

fn not_found(what: &str, id: &str) -> Status {
    Status::not_found(format!("{what} {id} does not exist"))
}

/// (required, limit) from a capacity range; errors name the field.
pub fn range(r: Option<&CapacityRange>) -> Result<(u64, Option<u64>), Status> {
    let Some(r) = r else { return Ok((0, None)) };
    let req = u64::try_from(r.required_bytes)
        .map_err(|_| invalid("capacity_range.required_bytes: negative"))?;
    let lim = u64::try_from(r.limit_bytes)
        .map_err(|_| invalid("capacity_range.limit_bytes: negative"))?;
    let lim = (lim > 0).then_some(lim);
    if lim.is_some_and(|l| l < req) {
        return Err(Status::out_of_range(
            "capacity_range: limit_bytes below required_bytes",
        ));
    }
    Ok((req, lim))
}

pub fn plan_create(
    config: &crate::config::ControllerConfig,
    r: CreateVolumeRequest,
) -> Result<CreatePlan, Status> {
    if r.name.is_empty() {
        return Err(invalid("name: missing"));
    }
    caps::check_all(&r.volume_capabilities).map_err(invalid)?;
    let mut params = params::parse(&r.parameters, config).map_err(invalid)?;
    // A VolumeAttributesClass's parameters: QoS limits over the class's.
    let mutable = params::parse_mutable(&r.mutable_parameters).map_err(invalid)?;
    params.add_qos(mutable);
    let (required, limit) = range(r.capacity_range.as_ref())?;
    let size = match (required, limit) {
        (0, Some(l)) => l.min(DEFAULT_SIZE),
        (0, None) => DEFAULT_SIZE,
        (n, _) => n,
    };
    let id = VolumeId::new(
        params.targets().to_vec(),
        params.pool(),
        &volume_name(&r.name),
    );
    let source = r.volume_content_source.and_then(|s| s.r#type);
    Ok(CreatePlan {
        csi_name: r.name,
        id,
        params,
        size,
        required,
        limit,
        source,
    })
}

/// The pool-side source of a clone: (snapshot name, a temporary snapshot
/// of a source volume to remove afterwards).
fn source_snapshot(ops: &Ops, p: &CreatePlan) -> Result<Option<(String, bool)>, Status> {
    let (src_id, volume) = match &p.source {
        None => return Ok(None),
        Some(Source::Snapshot(SnapshotSource { snapshot_id })) => (snapshot_id, false),
        Some(Source::Volume(VolumeSource { volume_id })) => (volume_id, true),
    };
    let what = if volume {
        "source volume"
    } else {
        "source snapshot"
    };
    let src = parse_id(src_id, what)?;
    if src.pool() != p.id.pool() || src.primary() != p.id.primary() {
        return Err(invalid(format!(
            "volume_content_source: {what} {src_id} is in another pool or on other targets than parameters pool/targets ({}/{})",
            p.id.primary(),
            p.id.pool()
        )));
    }
    let v = ops.volume(&src)?.ok_or_else(|| not_found(what, src_id))?;
    if v.snapshot == volume {
        return Err(not_found(what, src_id));
    }
    if v.size > p.size && p.limit.is_some_and(|l| l < v.size) {
        return Err(Status::out_of_range(format!(
            "capacity_range.limit_bytes: below the {what}'s size {}",
            v.size
        )));
    }
    if !volume {
        return Ok(Some((src.name().to_owned(), false)));
    }
    // A volume: cloned through a snapshot of its own, removed once the
    // clone is decoupled from it.
    let tmp = snapshot_name(&format!("clone:{}", p.csi_name), src.name());
    let made = ops.call(
        src.primary(),
        "snapshot_create",
        json!({"pool": src.pool(), "volume": src.name(), "name": tmp}),
    );
    match made {
        Err(e) if !e.is(rpc::EXISTS) => Err(e.into()),
        _ => Ok(Some((tmp, true))),
    }
}

/// Whether an existing volume satisfies the request; AlreadyExists if not.
/// (Its content source is not compared: a volume's parent changes when it
/// is snapshotted or decoupled, so the pool cannot tell it afterwards.)
fn compatible(p: &CreatePlan, v: &Vol) -> Result<(), Status> {
    let clash = |why: String| Status::already_exists(format!("volume {} exists with {why}", p.id));
    if v.snapshot {
        return Err(clash("a snapshot's name".into()));
    }
    if v.size < p.required || p.limit.is_some_and(|l| v.size > l) {
        return Err(clash(format!("size {} outside the capacity range", v.size)));
    }
    Ok(())
}

pub fn create(ops: &Ops, p: CreatePlan) -> Result<Volume, Status> {
    let id = &p.id;
    let vol = match ops.volume(id)? {
        Some(v) => {
            compatible(&p, &v)?;
            tracing::info!(volume = %id, "CreateVolume {}: exists already", p.csi_name);
            v
        }
        None => make(ops, &p)?,
    };
    for t in &id.targets()[1..] {
        let seen = absent_ok(ops.call(
            t,
            "volume_get",
            json!({"pool": id.pool(), "name": id.name()}),
        ))?;
        if seen.is_none() {
            return Err(Status::failed_precondition(format!(
                "target {t}: pool {} does not hold volume {} (a volume on several targets needs a pool they all reach, e.g. rbd)",
                id.pool(),
                id.name()
            )));
        }
    }
    ops.export(id, &vol, p.params.qos())?;
    let mut ctx = p.params.volume_context();
    ctx.insert("nqn".into(), id.nqn());
    Ok(Volume {
        capacity_bytes: vol.size as i64,
        volume_id: id.to_string(),
        volume_context: ctx,
        content_source: p
            .source
            .clone()
            .map(|t| VolumeContentSource { r#type: Some(t) }),
        accessible_topology: vec![],
    })
}

/// Makes the volume in its pool (empty or a clone) at the planned size.
fn make(ops: &Ops, p: &CreatePlan) -> Result<Vol, Status> {
    let id = &p.id;
    let t = id.primary();
    match source_snapshot(ops, p)? {
        None => {
            ops.call(
                t,
                "volume_create",
                json!({"pool": id.pool(), "name": id.name(), "size": p.size}),
            )?;
        }
        Some((snap, temporary)) => {
            let cloned = ops.call(
                t,
                "volume_clone",
                json!({"pool": id.pool(), "snapshot": snap, "name": id.name()}),
            );
            match cloned {
                Err(e) if !e.is(rpc::EXISTS) => return Err(e.into()),
                _ => {}
            }
            if temporary {
                ops.call(
                    t,
                    "volume_decouple",
                    json!({"pool": id.pool(), "name": id.name()}),
                )?;
                absent_ok(ops.call(t, "volume_delete", json!({"pool": id.pool(), "name": snap})))?;
            }
        }
    }
    let mut v = ops
        .volume(id)?
        .ok_or_else(|| Status::internal(format!("volume {id} vanished after its creation")))?;
    if v.size < p.size {
        ops.call(
            t,
            "volume_resize",
            json!({"pool": id.pool(), "name": id.name(), "size": p.size}),
        )?;
        v.size = p.size;
    }
    tracing::info!(volume = %id, size = v.size, "CreateVolume {}: created", p.csi_name);
    Ok(v)
}

pub fn delete(ops: &Ops, raw: &str) -> Result<(), Status> {
    let Ok(id) = VolumeId::parse(raw) else {
        tracing::info!("DeleteVolume {raw}: not a farflash volume id; nothing to delete");
        return Ok(());
    };
    ops.unexport(&id)?;
    let gone = absent_ok(delete_unexported(ops, &id))?;
    match gone {
        Some(_) => tracing::info!(volume = %id, "DeleteVolume: deleted"),
        None => tracing::info!(volume = %id, "DeleteVolume: gone already"),
    }
    Ok(())
}

/// How long DeleteVolume waits for a volume whose subsystem it just
/// deleted to be released: the target answers subsystem_delete at once,
/// and drops the namespace when the subsystem's last connection closes
/// (a node's disconnect moments before, as csi-sanity's cleanup and the
/// kubelet's NodeUnstage then the attacher's ControllerUnpublish do).
const RELEASE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// volume_delete of a volume no subsystem exports any more: InUse
/// (-32006) is retried until [`RELEASE_LIMIT`].
fn delete_unexported(ops: &Ops, id: &VolumeId) -> Result<Value, crate::target::CallError> {
    let deadline = std::time::Instant::now() + RELEASE_LIMIT;
    loop {
        let r = ops.call(
            id.primary(),
            "volume_delete",
            json!({"pool": id.pool(), "name": id.name()}),
        );
        match r {
            Err(e) if e.is(rpc::IN_USE) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

pub fn validate(
    ops: &Ops,
    r: ValidateVolumeCapabilitiesRequest,
) -> Result<ValidateVolumeCapabilitiesResponse, Status> {
    if r.volume_id.is_empty() {
        return Err(invalid("volume_id: missing"));
    }
    if r.volume_capabilities.is_empty() {
        return Err(invalid("volume_capabilities: missing"));
    }
    let id = parse_id(&r.volume_id, "volume")?;
    ops.volume(&id)?
        .filter(|v| !v.snapshot)
        .ok_or_else(|| not_found("volume", &r.volume_id))?;
    if let Err(m) = caps::check_all(&r.volume_capabilities) {
        return Ok(ValidateVolumeCapabilitiesResponse {
            confirmed: None,
            message: m,
        });
    }
    if !r.parameters.is_empty() {
        if let Err(m) = params::parse(&r.parameters, ops.config()) {
            return Ok(ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: m,
            });
        }
    }
    Ok(ValidateVolumeCapabilitiesResponse {
        confirmed: Some(validate_volume_capabilities_response::Confirmed {
            volume_context: r.volume_context,
            volume_capabilities: r.volume_capabilities,
            parameters: r.parameters,
            mutable_parameters: r.mutable_parameters,
        }),
        message: String::new(),
    })
}

pub fn expand(
    ops: &Ops,
    r: ControllerExpandVolumeRequest,
) -> Result<ControllerExpandVolumeResponse, Status> {
    let (required, limit) = range(r.capacity_range.as_ref())?;
    if r.capacity_range.is_none() {
        return Err(invalid("capacity_range: missing"));
    }
    let id = parse_id(&r.volume_id, "volume")?;
    let v = ops
        .volume(&id)?
        .filter(|v| !v.snapshot)
        .ok_or_else(|| not_found("volume", &r.volume_id))?;
    let node = r.volume_capability.as_ref().is_none_or(caps::is_mount);
    if v.size >= required {
        if limit.is_some_and(|l| v.size > l) {
            return Err(Status::out_of_range(format!(
                "capacity_range.limit_bytes: below the size {}",
                v.size
            )));
        }
        return Ok(ControllerExpandVolumeResponse {
            capacity_bytes: v.size as i64,
            node_expansion_required: node,
        });
    }
    ops.call(
        id.primary(),
        "volume_resize",
        json!({"pool": id.pool(), "name": id.name(), "size": required}),
    )?;
    tracing::info!(volume = %id, from = v.size, to = required, "ControllerExpandVolume: grown");
    Ok(ControllerExpandVolumeResponse {
        capacity_bytes: required as i64,
        node_expansion_required: node,
    })
}

pub fn get(ops: &Ops, raw: &str) -> Result<ControllerGetVolumeResponse, Status> {
    let id = parse_id(raw, "volume")?;
    let v = ops
        .volume(&id)?
        .filter(|v| !v.snapshot)
        .ok_or_else(|| not_found("volume", raw))?;
    let nodes = publish::published_nodes(ops, &id)?;
    Ok(ControllerGetVolumeResponse {
        volume: Some(Volume {
            capacity_bytes: v.size as i64,
            volume_id: id.to_string(),
            ..Default::default()
        }),
        status: Some(controller_get_volume_response::VolumeStatus {
            published_node_ids: nodes,
            volume_condition: Some(VolumeCondition {
                abnormal: false,
                message: "the targets hold it".into(),
            }),
        }),
    })
}

pub fn modify(ops: &Ops, raw: &str, qos: &Map<String, Value>) -> Result<(), Status> {
    let id = parse_id(raw, "volume")?;
    ops.volume(&id)?
        .filter(|v| !v.snapshot)
        .ok_or_else(|| not_found("volume", raw))?;
    for t in id.targets() {
        ops.set_qos(t, &id.nqn(), qos)?;
    }
    let limits = Value::Object(qos.clone());
    tracing::info!(volume = %id, %limits, "ControllerModifyVolume: QoS set");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_ranges_are_checked() {
        let r = |req, lim| CapacityRange {
            required_bytes: req,
            limit_bytes: lim,
        };
        assert_eq!(range(None).unwrap(), (0, None));
        assert_eq!(range(Some(&r(10, 0))).unwrap(), (10, None));
        assert_eq!(range(Some(&r(10, 20))).unwrap(), (10, Some(20)));
        assert_eq!(
            range(Some(&r(30, 20))).unwrap_err().code(),
            tonic::Code::OutOfRange
        );
        let e = range(Some(&r(-1, 0))).unwrap_err();
        assert!(e.message().contains("required_bytes"), "{}", e.message());
    }
}
