//! A running farflash target, as a library: [`Server::start`] builds the
//! subsystems from a [`Config`], binds the listeners, starts the event
//! loops, the management endpoints and the metrics, and the watches (the
//! RBD size watch, `SIGHUP` when asked); [`Server::reload`] re-reads the
//! configuration and applies it (what `SIGHUP` does; `load_config` over
//! the management API takes the same path); [`Server::shutdown`] (or
//! [`Server::wait`], after a stop signal) stops the event loops, flushes
//! every namespace and waits for the RBD images being closed.
//!
//! `farflash serve` (src/cli/serve.rs) turns its flags into a [`Config`]
//! and [`Options`] and calls this; tests start it in-process.
//!
//! Above `control`, `transport` and `mgmt` (it starts their threads), so
//! none of them depends on it.

mod listen;
mod mgmt;
pub mod notify;
mod reload;
mod shutdown;
mod watch;

pub use reload::log_report;
pub use shutdown::Totals;

use anyhow::{Context, Result};
use farflash_control::reload::ReloadReport;
use farflash_core::config::{parse_cpu_list, Config};
use farflash_core::Target;
use farflash_transport::LoopOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long shutdown waits for in-flight commands.
const DRAIN: Duration = Duration::from_secs(5);

/// Where the configuration comes from at start and at every reload (the
/// file and the flags, for `farflash serve`).
pub type ConfigSource = Box<dyn Fn() -> Result<Config> + Send + Sync>;

/// The management socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcSocket {
    /// None.
    Off,
    /// The default path ([`farflash_mgmt::server::default_socket_path`]);
    /// when another target holds it, a warning and no socket.
    Default,
    /// This path; an error when it cannot be had.
    Path(PathBuf),
}

/// What a server needs beside its configuration.
pub struct Options {
    source: ConfigSource,
    rpc_socket: RpcSocket,
    metrics: Option<SocketAddr>,
    sighup: bool,
    autosave: Option<PathBuf>,
}

impl Options {
    /// A server whose configuration comes from `source`; no management
    /// socket, no metrics, no `SIGHUP` handler unless asked for.
    pub fn new(source: ConfigSource) -> Options {
        Options {
            source,
            rpc_socket: RpcSocket::Off,
            metrics: None,
            sighup: false,
            autosave: None,
        }
    }

    /// Writes the configuration to `path` after every change made through
    /// the management API (`farflash serve --autosave`: the `--config`
    /// file, so a restart finds the changes).
    pub fn autosave(mut self, path: Option<PathBuf>) -> Options {
        self.autosave = path;
        self
    }

    pub fn rpc_socket(mut self, socket: RpcSocket) -> Options {
        self.rpc_socket = socket;
        self
    }

    /// Prometheus metrics on `addr`.
    pub fn metrics(mut self, addr: Option<SocketAddr>) -> Options {
        self.metrics = addr;
        self
    }

    /// Reload on `SIGHUP` (a process-wide handler: for `farflash serve`,
    /// not for tests that run several servers).
    pub fn reload_on_sighup(mut self, on: bool) -> Options {
        self.sighup = on;
        self
    }
}

/// A running target.
pub struct Server {
    target: Arc<Target>,
    addrs: Vec<SocketAddr>,
    loop_opts: LoopOptions,
    stop: Arc<AtomicBool>,
    serving: Option<JoinHandle<std::io::Result<()>>>,
    reloader: reload::Reloader,
    size_watch: Option<JoinHandle<()>>,
    endpoints: mgmt::Endpoints,
}

impl Server {
    /// Starts a target: the configuration from `opts`' source, then
    /// everything it names. On an error nothing is left running, and RBD
    /// images opened meanwhile are closed before this returns.
    pub fn start(opts: Options) -> Result<Server> {
        let r = Server::start_inner(opts);
        if r.is_err() {
            shutdown::wait_images_closed();
        }
        r
    }

    fn start_inner(opts: Options) -> Result<Server> {
        let cfg = (opts.source)()?;
        shutdown::raise_fd_limit(&cfg);
        let subsystems = farflash_control::build_subsystems(&cfg)?;
        let bound = listen::bind_all(&cfg.listen)?;
        let loop_opts = loop_options(&cfg)?;
        let target = Target::with_listeners(subsystems, cfg.transport.clone(), bound.described());
        target.set_started(std::time::Instant::now());
        // Storage shared with other targets follows ANA (RBD's exclusive lock).
        farflash_control::reload::claim_storage(&target)?;
        let (listener_ctl, listener_rx) = farflash_transport::listener_control();
        let endpoints = mgmt::Endpoints::start(
            &target,
            &listener_ctl,
            &opts.rpc_socket,
            opts.metrics,
            opts.autosave.as_deref(),
        )?;
        let reloader = reload::Reloader::new(target.clone(), opts.source, listener_ctl);
        let reloader = if opts.sighup {
            reloader.on_sighup()?
        } else {
            reloader
        };
        let stop = Arc::new(AtomicBool::new(false));
        let size_watch = watch::spawn_size_watch(target.clone(), stop.clone())?;
        let addrs = bound.addrs.clone();
        let serving = {
            let (target, stop, lo) = (target.clone(), stop.clone(), loop_opts.clone());
            std::thread::Builder::new()
                .name("farflash-acceptor".into())
                .spawn(move || {
                    farflash_transport::serve_listeners(
                        target,
                        bound.listeners,
                        &lo,
                        stop,
                        Some(listener_rx),
                    )
                })
                .context("starting the acceptor thread")?
        };
        Ok(Server {
            target,
            addrs,
            loop_opts,
            stop,
            serving: Some(serving),
            reloader,
            size_watch: Some(size_watch),
            endpoints,
        })
    }

    /// The target (subsystems, listeners, controllers).
    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// The listeners' bound addresses, in the configured order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The event loops' settings.
    pub fn loop_options(&self) -> &LoopOptions {
        &self.loop_opts
    }

    /// The management socket's path, when there is one.
    pub fn rpc_socket(&self) -> Option<&Path> {
        self.endpoints.rpc_socket()
    }

    /// The network management endpoint's address, when there is one.
    pub fn rpc_net_addr(&self) -> Option<SocketAddr> {
        self.endpoints.rpc_net_addr()
    }

    /// The metrics listener's address, when there is one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.endpoints.metrics_addr()
    }

    /// Stop (as [`Server::shutdown`] does) when one of `signals` arrives;
    /// [`Server::wait`] then returns.
    pub fn stop_on(&self, signals: &[i32]) -> Result<()> {
        for &sig in signals {
            signal_hook::flag::register(sig, self.stop.clone())
                .context("installing signal handlers")?;
        }
        Ok(())
    }

    /// Re-reads the configuration from the source and applies all of it
    /// (what `SIGHUP` does); nothing changes when it fails.
    pub fn reload(&self) -> Result<ReloadReport> {
        self.reloader.reload()
    }

    /// Stops now and shuts down (see [`Server::wait`]).
    pub fn shutdown(self) -> Result<Totals> {
        self.stop.store(true, Ordering::Release);
        self.wait()
    }

    /// Serves until a stop (a signal of [`Server::stop_on`], or the event
    /// loops failing), then shuts down: the watches and the management
    /// endpoints stop, every namespace is flushed (acknowledged writes
    /// survive), and the RBD images being closed are waited for, so that
    /// their exclusive locks are released before this returns. The totals
    /// served, or the first error.
    pub fn wait(mut self) -> Result<Totals> {
        let served = match self.serving.take().map(|t| t.join()) {
            Some(Ok(r)) => r.context("serving"),
            Some(Err(_)) => Err(anyhow::anyhow!("the acceptor thread panicked")),
            None => Ok(()),
        };
        self.stop.store(true, Ordering::Release);
        farflash_backend::notify_changed();
        if let Some(w) = self.size_watch.take() {
            let _ = w.join();
        }
        // Stopped and joined, so that the target (and the images of its
        // namespaces) goes with this thread's last reference.
        self.reloader.close();
        self.endpoints.close();
        let result = served.and_then(|_| shutdown::flush_and_count(&self.target));
        drop(self);
        shutdown::wait_images_closed();
        result
    }
}

impl Drop for Server {
    /// A server dropped without [`Server::shutdown`] (a test that failed)
    /// still stops its threads; the endpoints and the reloader stop on
    /// their own drop.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        farflash_backend::notify_changed();
        if let Some(t) = self.serving.take() {
            let _ = t.join();
        }
        if let Some(w) = self.size_watch.take() {
            let _ = w.join();
        }
    }
}

/// The event loops' settings from the configuration.
fn loop_options(cfg: &Config) -> Result<LoopOptions> {
    let cpus = parse_cpu_list(&cfg.transport.cpus_allowed).map_err(anyhow::Error::msg)?;
    let threads = match cfg.transport.threads {
        0 if !cpus.is_empty() => cpus.len(),
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        n => n as usize,
    };
    Ok(LoopOptions {
        threads,
        cpus,
        poll: cfg.transport.poll,
        poll_idle: Duration::from_micros(cfg.transport.poll_idle_us as u64),
        drain: DRAIN,
        max_connections: cfg.transport.max_connections as usize,
        fair_share: cfg.transport.fair_share_kib as usize * 1024,
    })
}
