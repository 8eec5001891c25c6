//! The CSI Controller service: volumes, their publication to nodes,
//! snapshots, expansion, capacity and QoS, on the configured targets.
//! Each call checks its request (InvalidArgument naming the field), takes
//! the volume's name against concurrent calls (Aborted while another runs,
//! as the spec asks), then does its blocking work on the targets off the
//! runtime's threads. Every call is idempotent.

mod export;
#[cfg(test)]
mod flow_tests;
mod listing;
#[cfg(test)]
mod model;
mod publish;
mod snapshots;
mod volumes;

use crate::config::ControllerConfig;
use crate::ids::VolumeId;
use crate::proto::controller_server::Controller;
use crate::proto::controller_service_capability::rpc::Type as Cap;
use crate::proto::*;
use crate::target::Targets;
pub use export::Ops;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tonic::{Request, Response, Status};

/// The service.
pub struct ControllerService {
    ops: Ops,
    inflight: Arc<Mutex<HashSet<String>>>,
}

/// A name taken against concurrent calls until dropped.
pub struct Busy {
    set: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut s) = self.set.lock() {
            s.remove(&self.key);
        }
    }
}

impl ControllerService {
    pub fn new(config: Arc<ControllerConfig>, targets: Targets) -> ControllerService {
        ControllerService {
            ops: Ops::new(targets, config),
            inflight: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Takes `key` (a volume's or snapshot's name) or answers Aborted.
    fn busy(&self, key: &str) -> Result<Busy, Status> {
        let mut s = self
            .inflight
            .lock()
            .map_err(|_| Status::internal("lock poisoned"))?;
        if !s.insert(key.to_owned()) {
            return Err(Status::aborted(format!(
                "an operation on {key} is in progress; retry"
            )));
        }
        Ok(Busy {
            set: self.inflight.clone(),
            key: key.to_owned(),
        })
    }
}

/// Runs blocking work on the targets off the async runtime.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("worker thread: {e}")))?
}

pub fn invalid(m: impl Into<String>) -> Status {
    Status::invalid_argument(m.into())
}

/// A volume id from a request: one that cannot be ours names nothing
/// (here, not in `volumes`, since `publish` needs it too and `volumes`
/// uses `publish`: no module cycle).
pub fn parse_id(id: &str, what: &str) -> Result<VolumeId, Status> {
    VolumeId::parse(id).map_err(|e| Status::not_found(format!("{what}: {e}")))
}

/// The controller capabilities the driver has.
pub const CAPABILITIES: [Cap; 12] = [
    Cap::CreateDeleteVolume,
    Cap::PublishUnpublishVolume,
    Cap::ListVolumes,
    Cap::GetCapacity,
    Cap::CreateDeleteSnapshot,
    Cap::ListSnapshots,
    Cap::GetSnapshot,
    Cap::CloneVolume,
    Cap::PublishReadonly,
    Cap::ExpandVolume,
    Cap::GetVolume,
    Cap::ModifyVolume,
];

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn create_volume(
        &self,
        r: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let plan = volumes::plan_create(self.ops.config(), r.into_inner())?;
        let busy = self.busy(&plan.key())?;
        let ops = self.ops.clone();
        let v = blocking(move || {
            let _busy = busy;
            volumes::create(&ops, plan)
        })
        .await?;
        Ok(Response::new(CreateVolumeResponse { volume: Some(v) }))
    }

    async fn delete_volume(
        &self,
        r: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        let id = r.into_inner().volume_id;
        if id.is_empty() {
            return Err(invalid("volume_id: missing"));
        }
        let busy = self.busy(&id)?;
        let ops = self.ops.clone();
        blocking(move || {
            let _busy = busy;
            volumes::delete(&ops, &id)
        })
        .await?;
        Ok(Response::new(DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        r: Request<ControllerPublishVolumeRequest>,
    ) -> Result<Response<ControllerPublishVolumeResponse>, Status> {
        let req = publish::check_publish(r.into_inner())?;
        let busy = self.busy(&req.volume_id)?;
        let ops = self.ops.clone();
        let context = blocking(move || {
            let _busy = busy;
            publish::publish(&ops, req)
        })
        .await?;
        Ok(Response::new(ControllerPublishVolumeResponse {
            publish_context: context,
        }))
    }

    async fn controller_unpublish_volume(
        &self,
        r: Request<ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<ControllerUnpublishVolumeResponse>, Status> {
        let req = r.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("volume_id: missing"));
        }
        let busy = self.busy(&req.volume_id)?;
        let ops = self.ops.clone();
        blocking(move || {
            let _busy = busy;
            publish::unpublish(&ops, &req.volume_id, &req.node_id)
        })
        .await?;
        Ok(Response::new(ControllerUnpublishVolumeResponse {}))
    }

    async fn validate_volume_capabilities(
        &self,
        r: Request<ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<ValidateVolumeCapabilitiesResponse>, Status> {
        let ops = self.ops.clone();
        let a = blocking(move || volumes::validate(&ops, r.into_inner())).await?;
        Ok(Response::new(a))
    }

    async fn list_volumes(
        &self,
        r: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        let ops = self.ops.clone();
        let a = blocking(move || listing::list(&ops, r.into_inner())).await?;
        Ok(Response::new(a))
    }

    async fn get_capacity(
        &self,
        r: Request<GetCapacityRequest>,
    ) -> Result<Response<GetCapacityResponse>, Status> {
        let ops = self.ops.clone();
        let a = blocking(move || listing::capacity(&ops, r.into_inner())).await?;
        Ok(Response::new(a))
    }

    async fn controller_get_capabilities(
        &self,
        _r: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        let capabilities = CAPABILITIES
            .iter()
            .map(|c| ControllerServiceCapability {
                r#type: Some(controller_service_capability::Type::Rpc(
                    controller_service_capability::Rpc { r#type: *c as i32 },
                )),
            })
            .collect();
        Ok(Response::new(ControllerGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn create_snapshot(
        &self,
        r: Request<CreateSnapshotRequest>,
    ) -> Result<Response<CreateSnapshotResponse>, Status> {
        let req = r.into_inner();
        let (source, name) = snapshots::check_create(&req)?;
        let busy = self.busy(&source.to_string())?;
        let ops = self.ops.clone();
        let s = blocking(move || {
            let _busy = busy;
            snapshots::create(&ops, &source, &name)
        })
        .await?;
        Ok(Response::new(CreateSnapshotResponse { snapshot: Some(s) }))
    }

    async fn delete_snapshot(
        &self,
        r: Request<DeleteSnapshotRequest>,
    ) -> Result<Response<DeleteSnapshotResponse>, Status> {
        let id = r.into_inner().snapshot_id;
        if id.is_empty() {
            return Err(invalid("snapshot_id: missing"));
        }
        let busy = self.busy(&id)?;
        let ops = self.ops.clone();
        blocking(move || {
            let _busy = busy;
            snapshots::delete(&ops, &id)
        })
        .await?;
        Ok(Response::new(DeleteSnapshotResponse {}))
    }

    async fn list_snapshots(
        &self,
        r: Request<ListSnapshotsRequest>,
    ) -> Result<Response<ListSnapshotsResponse>, Status> {
        let ops = self.ops.clone();
        let a = blocking(move || snapshots::list(&ops, r.into_inner())).await?;
        Ok(Response::new(a))
    }

    async fn get_snapshot(
        &self,
        r: Request<GetSnapshotRequest>,
    ) -> Result<Response<GetSnapshotResponse>, Status> {
        let id = r.into_inner().snapshot_id;
        if id.is_empty() {
            return Err(invalid("snapshot_id: missing"));
        }
        let ops = self.ops.clone();
        let s = blocking(move || snapshots::get(&ops, &id)).await?;
        Ok(Response::new(GetSnapshotResponse { snapshot: Some(s) }))
    }

    async fn controller_expand_volume(
        &self,
        r: Request<ControllerExpandVolumeRequest>,
    ) -> Result<Response<ControllerExpandVolumeResponse>, Status> {
        let req = r.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("volume_id: missing"));
        }
        let busy = self.busy(&req.volume_id)?;
        let ops = self.ops.clone();
        let a = blocking(move || {
            let _busy = busy;
            volumes::expand(&ops, req)
        })
        .await?;
        Ok(Response::new(a))
    }

    async fn controller_get_volume(
        &self,
        r: Request<ControllerGetVolumeRequest>,
    ) -> Result<Response<ControllerGetVolumeResponse>, Status> {
        let id = r.into_inner().volume_id;
        if id.is_empty() {
            return Err(invalid("volume_id: missing"));
        }
        let ops = self.ops.clone();
        let a = blocking(move || volumes::get(&ops, &id)).await?;
        Ok(Response::new(a))
    }

    async fn controller_modify_volume(
        &self,
        r: Request<ControllerModifyVolumeRequest>,
    ) -> Result<Response<ControllerModifyVolumeResponse>, Status> {
        let req = r.into_inner();
        if req.volume_id.is_empty() {
            return Err(invalid("volume_id: missing"));
        }
        let qos = crate::params::parse_mutable(&req.mutable_parameters).map_err(invalid)?;
        let busy = self.busy(&req.volume_id)?;
        let ops = self.ops.clone();
        blocking(move || {
            let _busy = busy;
            volumes::modify(&ops, &req.volume_id, &qos)
        })
        .await?;
        Ok(Response::new(ControllerModifyVolumeResponse {}))
    }
}
