//! The CSI calls of `node_vm.rs`, through the crate's generated gRPC
//! clients: the controller on the host (its socket bridged to TCP) and the
//! node service in the guest (bridged to TCP, forwarded by QEMU).

use farflash_csi::proto::controller_client::ControllerClient;
use farflash_csi::proto::node_client::NodeClient;
use farflash_csi::proto::volume_capability::{access_mode, AccessMode, AccessType, MountVolume};
use farflash_csi::proto::*;
use std::collections::HashMap;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

pub type Map = HashMap<String, String>;

pub fn map(kv: &[(&str, &str)]) -> Map {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn ext4() -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode {
            mode: access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "ext4".into(),
            ..Default::default()
        })),
    }
}

fn range(bytes: i64) -> Option<CapacityRange> {
    Some(CapacityRange {
        required_bytes: bytes,
        limit_bytes: 0,
    })
}

/// A volume as CreateVolume returned it, and what publishing gave.
pub struct Vol {
    pub id: String,
    pub context: Map,
    pub publish: Map,
    /// The secrets the CO passes (controller-publish and node-stage
    /// secrets: one Kubernetes Secret for both here).
    pub secrets: Map,
}

pub struct Csi {
    rt: tokio::runtime::Runtime,
    ctrl: ControllerClient<Channel>,
    node: NodeClient<Channel>,
}

fn channel(rt: &tokio::runtime::Runtime, port: u16) -> Channel {
    let e = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(600));
    rt.block_on(e.connect())
        .unwrap_or_else(|e| panic!("gRPC to 127.0.0.1:{port}: {e}"))
}

impl Csi {
    pub fn connect(controller_port: u16, node_port: u16) -> Csi {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let ctrl = ControllerClient::new(channel(&rt, controller_port));
        let node = NodeClient::new(channel(&rt, node_port));
        Csi { rt, ctrl, node }
    }

    pub fn node_id(&self) -> String {
        let mut n = self.node.clone();
        let r = self.rt.block_on(n.node_get_info(NodeGetInfoRequest {}));
        r.expect("NodeGetInfo").into_inner().node_id
    }

    /// CreateVolume of `bytes` in the test's pool (from `snapshot` when
    /// given).
    pub fn create(&self, name: &str, bytes: i64, params: &Map, snapshot: Option<&str>) -> Vol {
        let src = snapshot.map(|s| VolumeContentSource {
            r#type: Some(volume_content_source::Type::Snapshot(
                volume_content_source::SnapshotSource {
                    snapshot_id: s.into(),
                },
            )),
        });
        let req = CreateVolumeRequest {
            name: name.into(),
            capacity_range: range(bytes),
            volume_capabilities: vec![ext4()],
            parameters: params.clone(),
            volume_content_source: src,
            ..Default::default()
        };
        let mut c = self.ctrl.clone();
        let v = self
            .rt
            .block_on(c.create_volume(req))
            .unwrap_or_else(|e| panic!("CreateVolume {name}: {e}"))
            .into_inner()
            .volume
            .expect("volume");
        assert!(
            v.capacity_bytes >= bytes,
            "CreateVolume {name}: {} bytes, asked {bytes}",
            v.capacity_bytes
        );
        Vol {
            id: v.volume_id,
            context: v.volume_context,
            publish: Map::new(),
            secrets: Map::new(),
        }
    }

    pub fn publish(&self, v: &mut Vol, node: &str) {
        let req = ControllerPublishVolumeRequest {
            volume_id: v.id.clone(),
            node_id: node.into(),
            volume_capability: Some(ext4()),
            volume_context: v.context.clone(),
            secrets: v.secrets.clone(),
            ..Default::default()
        };
        let mut c = self.ctrl.clone();
        v.publish = self
            .rt
            .block_on(c.controller_publish_volume(req))
            .unwrap_or_else(|e| panic!("ControllerPublishVolume {}: {e}", v.id))
            .into_inner()
            .publish_context;
    }

    pub fn unpublish(&self, v: &Vol, node: &str) {
        let req = ControllerUnpublishVolumeRequest {
            volume_id: v.id.clone(),
            node_id: node.into(),
            ..Default::default()
        };
        let mut c = self.ctrl.clone();
        self.rt
            .block_on(c.controller_unpublish_volume(req))
            .unwrap_or_else(|e| panic!("ControllerUnpublishVolume {}: {e}", v.id));
    }

    pub fn delete(&self, id: &str) {
        let mut c = self.ctrl.clone();
        let req = DeleteVolumeRequest {
            volume_id: id.into(),
            ..Default::default()
        };
        self.rt
            .block_on(c.delete_volume(req))
            .unwrap_or_else(|e| panic!("DeleteVolume {id}: {e}"));
    }

    pub fn snapshot(&self, source: &str, name: &str) -> String {
        let mut c = self.ctrl.clone();
        let req = CreateSnapshotRequest {
            source_volume_id: source.into(),
            name: name.into(),
            ..Default::default()
        };
        let s = self
            .rt
            .block_on(c.create_snapshot(req))
            .unwrap_or_else(|e| panic!("CreateSnapshot {name} of {source}: {e}"))
            .into_inner()
            .snapshot
            .expect("snapshot");
        assert!(s.ready_to_use, "snapshot {name} is not ready to use");
        s.snapshot_id
    }

    pub fn delete_snapshot(&self, id: &str) {
        let mut c = self.ctrl.clone();
        let req = DeleteSnapshotRequest {
            snapshot_id: id.into(),
            ..Default::default()
        };
        self.rt
            .block_on(c.delete_snapshot(req))
            .unwrap_or_else(|e| panic!("DeleteSnapshot {id}: {e}"));
    }

    /// ControllerExpandVolume: (capacity, node expansion required).
    pub fn expand(&self, v: &Vol, bytes: i64) -> (i64, bool) {
        let mut c = self.ctrl.clone();
        let req = ControllerExpandVolumeRequest {
            volume_id: v.id.clone(),
            capacity_range: range(bytes),
            volume_capability: Some(ext4()),
            ..Default::default()
        };
        let r = self
            .rt
            .block_on(c.controller_expand_volume(req))
            .unwrap_or_else(|e| panic!("ControllerExpandVolume {}: {e}", v.id))
            .into_inner();
        (r.capacity_bytes, r.node_expansion_required)
    }

    /// NodeStageVolume; its error as it came.
    pub fn try_stage(&self, v: &Vol, staging: &str) -> Result<(), tonic::Status> {
        let mut n = self.node.clone();
        let req = NodeStageVolumeRequest {
            volume_id: v.id.clone(),
            publish_context: v.publish.clone(),
            staging_target_path: staging.into(),
            volume_capability: Some(ext4()),
            volume_context: v.context.clone(),
            secrets: v.secrets.clone(),
        };
        self.rt.block_on(n.node_stage_volume(req)).map(drop)
    }

    pub fn stage(&self, v: &Vol, staging: &str) {
        self.try_stage(v, staging)
            .unwrap_or_else(|e| panic!("NodeStageVolume {} at {staging}: {e}", v.id));
    }

    pub fn unstage(&self, v: &Vol, staging: &str) {
        let mut n = self.node.clone();
        let req = NodeUnstageVolumeRequest {
            volume_id: v.id.clone(),
            staging_target_path: staging.into(),
        };
        self.rt
            .block_on(n.node_unstage_volume(req))
            .unwrap_or_else(|e| panic!("NodeUnstageVolume {}: {e}", v.id));
    }

    pub fn node_publish(&self, v: &Vol, staging: &str, target: &str) {
        let mut n = self.node.clone();
        let req = NodePublishVolumeRequest {
            volume_id: v.id.clone(),
            publish_context: v.publish.clone(),
            staging_target_path: staging.into(),
            target_path: target.into(),
            volume_capability: Some(ext4()),
            volume_context: v.context.clone(),
            ..Default::default()
        };
        self.rt
            .block_on(n.node_publish_volume(req))
            .unwrap_or_else(|e| panic!("NodePublishVolume {} at {target}: {e}", v.id));
    }

    pub fn node_unpublish(&self, v: &Vol, target: &str) {
        let mut n = self.node.clone();
        let req = NodeUnpublishVolumeRequest {
            volume_id: v.id.clone(),
            target_path: target.into(),
        };
        self.rt
            .block_on(n.node_unpublish_volume(req))
            .unwrap_or_else(|e| panic!("NodeUnpublishVolume {}: {e}", v.id));
    }

    /// NodeExpandVolume: the capacity it reports.
    pub fn node_expand(&self, v: &Vol, path: &str, staging: &str, bytes: i64) -> i64 {
        let mut n = self.node.clone();
        let req = NodeExpandVolumeRequest {
            volume_id: v.id.clone(),
            volume_path: path.into(),
            capacity_range: range(bytes),
            staging_target_path: staging.into(),
            volume_capability: Some(ext4()),
            ..Default::default()
        };
        self.rt
            .block_on(n.node_expand_volume(req))
            .unwrap_or_else(|e| panic!("NodeExpandVolume {} at {path}: {e}", v.id))
            .into_inner()
            .capacity_bytes
    }

    /// NodeGetVolumeStats: (total bytes, used bytes).
    pub fn stats(&self, v: &Vol, path: &str) -> (i64, i64) {
        let mut n = self.node.clone();
        let req = NodeGetVolumeStatsRequest {
            volume_id: v.id.clone(),
            volume_path: path.into(),
            staging_target_path: String::new(),
        };
        let r = self
            .rt
            .block_on(n.node_get_volume_stats(req))
            .unwrap_or_else(|e| panic!("NodeGetVolumeStats {} at {path}: {e}", v.id))
            .into_inner();
        let bytes = r
            .usage
            .iter()
            .find(|u| u.unit == volume_usage::Unit::Bytes as i32)
            .unwrap_or_else(|| panic!("NodeGetVolumeStats {path}: no bytes usage in {r:?}"));
        (bytes.total, bytes.used)
    }
}
