//! The CSI Node service: the node's host NQN as its ID; staging connects
//! the kernel's NVMe/TCP host to every path of the volume (native
//! multipath joins them), makes a file system on an empty device and
//! mounts it; publishing bind-mounts it (or the raw device) into the pod;
//! unstaging unmounts and disconnects, leaving nothing behind. A target
//! that does not answer fails staging within [`CONNECT_LIMIT`] per path,
//! with its address in the error.

pub mod cmd;
pub mod keyring;
pub mod sys;
pub mod volume;

use crate::controller::blocking;
use crate::proto::node_server::Node;
use crate::proto::node_service_capability::rpc::Type as Cap;
use crate::proto::*;
use std::path::PathBuf;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Longest an `nvme connect` of one path may take.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(30);
/// Longest a device may take to appear after its connect.
pub const DEVICE_LIMIT: Duration = Duration::from_secs(20);
/// Longest mkfs, mount, umount or a grower may take.
pub const FS_LIMIT: Duration = Duration::from_secs(300);

/// The service.
pub struct NodeService {
    hostnqn_file: PathBuf,
}

impl NodeService {
    /// `hostnqn_file`: where the node's host NQN is (/etc/nvme/hostnqn).
    pub fn new(hostnqn_file: PathBuf) -> NodeService {
        NodeService { hostnqn_file }
    }

    fn hostnqn(&self) -> Result<String, Status> {
        let f = &self.hostnqn_file;
        let n = std::fs::read_to_string(f).map_err(|e| {
            Status::failed_precondition(format!(
                "{}: {e} (make it with: nvme gen-hostnqn > {})",
                f.display(),
                f.display()
            ))
        })?;
        let n = n.trim().to_owned();
        if !n.starts_with("nqn.") {
            return Err(Status::failed_precondition(format!(
                "{}: not a host NQN",
                f.display()
            )));
        }
        Ok(n)
    }

    /// The node's host ID, as nvme-cli passes it: /etc/nvme/hostid beside
    /// the host NQN file, else the UUID of a `uuid:` host NQN (the kernel
    /// refuses one host NQN under two host IDs); else none (the kernel's).
    fn hostid(&self, hostnqn: &str) -> Option<String> {
        let file = self.hostnqn_file.with_file_name("hostid");
        std::fs::read_to_string(file)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .or_else(|| hostnqn.rsplit_once(":uuid:").map(|(_, u)| u.to_owned()))
    }
}

fn need(v: &str, field: &str) -> Result<(), Status> {
    if v.is_empty() {
        return Err(Status::invalid_argument(format!("{field}: missing")));
    }
    Ok(())
}

const CAPABILITIES: [Cap; 3] = [
    Cap::StageUnstageVolume,
    Cap::ExpandVolume,
    Cap::GetVolumeStats,
];

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        r: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let r = r.into_inner();
        need(&r.volume_id, "volume_id")?;
        need(&r.staging_target_path, "staging_target_path")?;
        let cap = r
            .volume_capability
            .clone()
            .ok_or_else(|| Status::invalid_argument("volume_capability: missing"))?;
        crate::caps::check(&cap, "volume_capability").map_err(Status::invalid_argument)?;
        let host = self.hostnqn()?;
        let hostid = self.hostid(&host);
        blocking(move || volume::stage(&r, &cap, &host, hostid)).await?;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        r: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let r = r.into_inner();
        need(&r.volume_id, "volume_id")?;
        need(&r.staging_target_path, "staging_target_path")?;
        let host = self.hostnqn()?;
        blocking(move || volume::unstage(&r.volume_id, &r.staging_target_path, &host)).await?;
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        r: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let r = r.into_inner();
        need(&r.volume_id, "volume_id")?;
        need(&r.staging_target_path, "staging_target_path")?;
        need(&r.target_path, "target_path")?;
        let cap = r
            .volume_capability
            .clone()
            .ok_or_else(|| Status::invalid_argument("volume_capability: missing"))?;
        crate::caps::check(&cap, "volume_capability").map_err(Status::invalid_argument)?;
        blocking(move || volume::publish(&r, &cap)).await?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        r: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let r = r.into_inner();
        need(&r.volume_id, "volume_id")?;
        need(&r.target_path, "target_path")?;
        blocking(move || volume::unpublish(&r.target_path)).await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        r: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let r = r.into_inner();
        need(&r.volume_id, "volume_id")?;
        need(&r.volume_path, "volume_path")?;
        let a = blocking(move || volume::stats(&r.volume_path)).await?;
        Ok(Response::new(a))
    }

    async fn node_expand_volume(
        &self,
        r: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let r = r.into_inner();
        need(&r.volume_id, "volume_id")?;
        need(&r.volume_path, "volume_path")?;
        // 0 (no capacity_range): the device's size, whatever it is.
        let required = r.capacity_range.as_ref().map_or(0, |c| c.required_bytes);
        let a = blocking(move || volume::expand(&r.volume_path, required)).await?;
        Ok(Response::new(a))
    }

    async fn node_get_capabilities(
        &self,
        _r: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let capabilities = CAPABILITIES
            .iter()
            .map(|c| NodeServiceCapability {
                r#type: Some(node_service_capability::Type::Rpc(
                    node_service_capability::Rpc { r#type: *c as i32 },
                )),
            })
            .collect();
        Ok(Response::new(NodeGetCapabilitiesResponse { capabilities }))
    }

    async fn node_get_info(
        &self,
        _r: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.hostnqn()?,
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}
