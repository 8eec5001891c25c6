//! Serving the services over gRPC on the CSI endpoint, a Unix socket
//! (`unix:///csi/csi.sock`, or a plain path), until SIGTERM or SIGINT.

use crate::config::ControllerConfig;
use crate::controller::ControllerService;
use crate::identity::IdentityService;
use crate::node::NodeService;
use crate::proto::controller_server::ControllerServer;
use crate::proto::identity_server::IdentityServer;
use crate::proto::node_server::NodeServer;
use crate::target::Targets;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The socket path of a CSI endpoint.
pub fn socket_path(endpoint: &str) -> Result<PathBuf> {
    let p = match endpoint.strip_prefix("unix://") {
        Some(rest) => rest,
        None if endpoint.contains("://") => {
            bail!("--endpoint {endpoint:?}: only unix:// endpoints are served")
        }
        None => endpoint,
    };
    if p.is_empty() || !p.starts_with('/') {
        bail!("--endpoint {endpoint:?}: want unix:///ABSOLUTE/PATH");
    }
    Ok(PathBuf::from(p))
}

/// Removes a socket file left by an earlier run (the kubelet's plugin
/// directory outlives the container); anything else there is an error.
fn clear(path: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)
            .with_context(|| format!("removing the old socket {}", path.display())),
        Ok(_) => bail!("{} exists and is not a socket", path.display()),
    }
}

/// What to serve.
pub struct Services {
    controller: Option<ControllerService>,
    node: Option<NodeService>,
}

impl Services {
    /// The services a controller configuration (or none) and a node's host
    /// NQN file (or none) give.
    pub fn new(
        config: Option<ControllerConfig>,
        hostnqn_file: Option<PathBuf>,
    ) -> Result<Services> {
        let controller = match config {
            Some(c) => {
                let targets = Targets::new(&c).context("the controller's TLS files")?;
                for t in c.targets() {
                    tracing::info!(target = t.name(), management = t.management(), nvme = ?t.nvme(), "target configured");
                }
                Some(ControllerService::new(Arc::new(c), targets))
            }
            None => None,
        };
        let node = hostnqn_file.map(NodeService::new);
        if controller.is_none() && node.is_none() {
            bail!("nothing to serve: give --controller-config, --node, or both");
        }
        Ok(Services { controller, node })
    }
}

/// Serves `services` on `endpoint` until `stop` resolves.
pub async fn serve(
    endpoint: &str,
    services: Services,
    stop: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let path = socket_path(endpoint)?;
    clear(&path)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("binding {}", path.display()))?;
    let identity = IdentityService::new();
    tracing::info!(
        endpoint = %path.display(),
        controller = services.controller.is_some(),
        node = services.node.is_some(),
        "farflash CSI driver {} serving",
        env!("CARGO_PKG_VERSION")
    );
    tonic::transport::Server::builder()
        .add_service(IdentityServer::new(identity))
        .add_optional_service(services.controller.map(ControllerServer::new))
        .add_optional_service(services.node.map(NodeServer::new))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            stop,
        )
        .await
        .context("serving gRPC")?;
    let _ = std::fs::remove_file(&path);
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_sockets() {
        assert_eq!(
            socket_path("unix:///csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(
            socket_path("/run/csi.sock").unwrap(),
            PathBuf::from("/run/csi.sock")
        );
        for bad in ["tcp://127.0.0.1:10000", "unix://relative", "", "csi.sock"] {
            assert!(socket_path(bad).is_err(), "{bad}");
        }
    }
}
