//! The CSI Identity service: the driver's name and version, what it
//! offers, and whether it is ready.

use crate::proto::identity_server::Identity;
use crate::proto::plugin_capability::{service, volume_expansion, Service, Type, VolumeExpansion};
use crate::proto::*;
use tonic::{Request, Response, Status};

/// The driver's name (CSIDriver object, StorageClass `provisioner`).
pub const DRIVER_NAME: &str = "csi.farflash.io";

/// The driver as a whole, whichever services this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdentityService;

impl IdentityService {
    pub fn new() -> IdentityService {
        IdentityService
    }
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _r: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: DRIVER_NAME.into(),
            vendor_version: env!("CARGO_PKG_VERSION").into(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _r: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        // CSI spec, GetPluginCapabilities: the capabilities of the Plugin
        // "as a whole"; all instances of one version "SHALL return the same
        // set of capabilities, regardless of ... which RPCs an instance is
        // serving". A node-only instance (the DaemonSet) reports the
        // controller too; csi-sanity run against the node's socket with
        // --csi.controllerendpoint publishes volumes only then.
        let capabilities = vec![
            PluginCapability {
                r#type: Some(Type::VolumeExpansion(VolumeExpansion {
                    r#type: volume_expansion::Type::Online as i32,
                })),
            },
            PluginCapability {
                r#type: Some(Type::Service(Service {
                    r#type: service::Type::ControllerService as i32,
                })),
            },
        ];
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(&self, _r: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        // Ready once serving: the configuration and certificates were read
        // at start; a target that is down fails the calls that need it,
        // with its name, rather than the whole driver.
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}
