//! The management endpoints (the Unix socket, the network endpoint over
//! mutual TLS) and the metrics listener of a server.

use crate::RpcSocket;
use anyhow::{Context, Result};
use farflash_core::config::ManagementEndpoint;
use farflash_core::Target;
use farflash_mgmt::metrics::MetricsServer;
use farflash_mgmt::net::NetServer;
use farflash_mgmt::server::RpcServer;
use farflash_mgmt::Api;
use farflash_transport::ListenerHandle;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;

/// What serves management and metrics; each stops when dropped.
pub(crate) struct Endpoints {
    rpc: Option<RpcServer>,
    rpc_net: Option<NetServer>,
    metrics: Option<MetricsServer>,
}

impl Endpoints {
    pub(crate) fn start(
        target: &Arc<Target>,
        listeners: &ListenerHandle,
        socket: &RpcSocket,
        metrics: Option<SocketAddr>,
        autosave: Option<&Path>,
    ) -> Result<Endpoints> {
        let api = Arc::new(Api {
            target: target.clone(),
            listeners: Some(Box::new(listeners.clone())),
            autosave: autosave.map(farflash_mgmt::autosave::Autosave::new),
        });
        let rpc_net = start_rpc_net(&target.transport.management, api.clone())?;
        let rpc = start_rpc(socket, api)?;
        let metrics = match metrics {
            Some(sa) => Some(
                farflash_mgmt::metrics::start(target.clone(), sa)
                    .with_context(|| format!("cannot serve metrics on {sa}"))?,
            ),
            None => None,
        };
        Ok(Endpoints {
            rpc,
            rpc_net,
            metrics,
        })
    }

    pub(crate) fn rpc_socket(&self) -> Option<&Path> {
        self.rpc.as_ref().map(|r| r.path())
    }

    pub(crate) fn rpc_net_addr(&self) -> Option<SocketAddr> {
        self.rpc_net.as_ref().map(|n| n.addr())
    }

    pub(crate) fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// Stops them all (their threads are joined).
    pub(crate) fn close(&mut self) {
        drop(self.rpc.take());
        drop(self.rpc_net.take());
        drop(self.metrics.take());
    }
}

/// Starts the management endpoint on the network, when configured.
fn start_rpc_net(m: &ManagementEndpoint, api: Arc<Api>) -> Result<Option<NetServer>> {
    let (Some(listen), Some(cert), Some(key), Some(ca)) =
        (&m.listen, &m.cert, &m.key, &m.client_ca)
    else {
        return Ok(None);
    };
    let tls = farflash_mgmt::net::TlsFiles::new(cert, key, ca)
        .server_config()
        .context("management endpoint (--rpc-listen)")?;
    let sa = listen
        .to_socket_addrs()
        .with_context(|| format!("bad --rpc-listen address {listen:?} (want ADDR:PORT)"))?
        .next()
        .with_context(|| format!("--rpc-listen address {listen:?} resolves to nothing"))?;
    farflash_mgmt::net::start(api, sa, tls)
        .map(Some)
        .with_context(|| format!("cannot serve the management endpoint on {sa}"))
}

/// Starts the management socket: at a given path (an error if it cannot
/// be had), or at the default path (a warning if another target holds it).
fn start_rpc(socket: &RpcSocket, api: Arc<Api>) -> Result<Option<RpcServer>> {
    match socket {
        RpcSocket::Off => Ok(None),
        RpcSocket::Path(p) => farflash_mgmt::server::start(api, p)
            .map(Some)
            .with_context(|| format!("management socket {}", p.display())),
        RpcSocket::Default => {
            let p = farflash_mgmt::server::default_socket_path();
            match farflash_mgmt::server::start(api, &p) {
                Ok(s) => Ok(Some(s)),
                Err(e) => {
                    tracing::warn!(
                        "no management socket: {}: {e} (use --rpc-socket PATH)",
                        p.display()
                    );
                    Ok(None)
                }
            }
        }
    }
}
