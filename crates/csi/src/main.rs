//! `farflash-csi`: the CSI driver's process (docs/kubernetes.md).

use anyhow::{Context, Result};
use clap::Parser;
use farflash_csi::config::ControllerConfig;
use farflash_csi::serve::{serve, Services};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "farflash-csi",
    version,
    about = "farflash's CSI driver: Identity, Controller and Node services on a Unix socket"
)]
struct Args {
    /// The CSI endpoint: unix:///PATH (the sidecars' --csi-address).
    #[arg(long, default_value = "unix:///csi/csi.sock")]
    endpoint: String,
    /// Run the Controller service with this configuration (targets and
    /// the client certificate for their management endpoints).
    #[arg(long = "controller-config", value_name = "FILE")]
    controller_config: Option<PathBuf>,
    /// Run the Node service (on every node: a DaemonSet), as the host whose
    /// NQN --hostnqn-file holds.
    #[arg(long)]
    node: bool,
    /// The node's host NQN (nvme gen-hostnqn makes one).
    #[arg(
        long = "hostnqn-file",
        value_name = "FILE",
        default_value = "/etc/nvme/hostnqn"
    )]
    hostnqn_file: PathBuf,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long = "log-level", default_value = "info")]
    log_level: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .with_context(|| format!("--log-level {:?}", args.log_level))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let config = match &args.controller_config {
        Some(p) => Some(ControllerConfig::load(p)?),
        None => None,
    };
    let services = Services::new(config, args.node.then(|| args.hostnqn_file.clone()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let stop = async {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!("cannot watch SIGTERM: {e}");
                        std::future::pending::<()>().await;
                        return;
                    }
                };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
            }
        };
        serve(&args.endpoint, services, stop).await
    })
}
