//! The transports a listen address can name (`[tcp:]ADDR:PORT`,
//! `rdma:ADDR:PORT`, `NAME:ADDR:PORT` of a registered one:
//! `farflash_core::listen`), and how each binds: the one place a
//! configured transport is registered (the server binds its configured
//! listeners and the management API its new ones through
//! [`bind_listener`]). NVMe/TCP and NVMe/RDMA are built in; another
//! transport calls [`register`] once, before the configuration is read. A
//! transport used only through [`crate::serve_listeners`] needs nothing
//! here.

use crate::link::Listener;
use crate::rdma::{Rdma, RDMA_BACKLOG};
use crate::tcp::Tcp;
use farflash_core::listen::ListenTransport;
use farflash_rdma_verbs::RdmaListener;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// What binding a listener gives: it, and the address it is bound to.
pub type BindResult = Result<(Box<dyn Listener>, SocketAddr), String>;

/// How a transport binds a listener on an address (in the caller's
/// thread; an error names the address).
pub type Bind = dyn Fn(SocketAddr) -> BindResult + Send + Sync;

/// A built-in transport's binder.
type BindFn = fn(SocketAddr) -> BindResult;

/// The built-in transports' binders.
const BUILT_IN: [(ListenTransport, BindFn); 2] = [
    (ListenTransport::Tcp, bind_tcp),
    (ListenTransport::Rdma, bind_rdma),
];

/// The binders of the [`register`]ed transports.
static REGISTERED: RwLock<Vec<(ListenTransport, Arc<Bind>)>> = RwLock::new(Vec::new());

/// Makes transport `kind` a listen address can name: its name parses
/// wherever a listen address does (`farflash_core::listen::register`:
/// config files, `--listen`, the management API, `save_config`), and
/// [`bind_listener`] binds its listeners with `bind`. Registering a
/// transport again replaces its binder; a built-in one cannot be.
pub fn register(
    kind: ListenTransport,
    bind: impl Fn(SocketAddr) -> BindResult + Send + Sync + 'static,
) -> Result<(), String> {
    if BUILT_IN.iter().any(|(k, _)| k.name() == kind.name()) {
        return Err(format!("transport {:?} is built in", kind.name()));
    }
    farflash_core::listen::register(kind)?;
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    reg.retain(|(k, _)| *k != kind);
    reg.push((kind, Arc::new(bind)));
    Ok(())
}

/// Binds a listener of `transport` on `sa` (in the caller's thread, so an
/// error is the caller's, naming the address); returns it and the address
/// it is bound to.
pub fn bind_listener(transport: ListenTransport, sa: SocketAddr) -> BindResult {
    if let Some((_, bind)) = BUILT_IN.iter().find(|(k, _)| *k == transport) {
        return bind(sa);
    }
    let bind = {
        let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
        let found = reg.iter().find(|(k, _)| *k == transport);
        found.map(|(_, b)| b.clone())
    };
    match bind {
        Some(bind) => bind(sa),
        None => Err(format!(
            "cannot listen on {sa}: transport {transport} has no listener (farflash_transport::register)"
        )),
    }
}

fn bind_tcp(sa: SocketAddr) -> BindResult {
    let fail = |e: io::Error| format!("cannot listen on {sa}: {e}");
    let l = std::net::TcpListener::bind(sa).map_err(fail)?;
    let bound = l.local_addr().map_err(fail)?;
    Ok((tcp(l).map_err(fail)?, bound))
}

fn bind_rdma(sa: SocketAddr) -> BindResult {
    // Without libibverbs/librdmacm, say which packages (not "no device").
    farflash_rdma_verbs::load_libraries().map_err(|e| e.to_string())?;
    let l = RdmaListener::bind(sa, RDMA_BACKLOG).map_err(|e| {
        format!(
            "cannot listen for NVMe/RDMA on {sa} (is there an RDMA device on it? rdma link): {e}"
        )
    })?;
    let bound = l.local_addr();
    Ok((rdma(l), bound))
}

/// A bound TCP listener, as the acceptor takes it.
pub(crate) fn tcp(l: std::net::TcpListener) -> io::Result<Box<dyn Listener>> {
    Ok(Box::new(Tcp::new(l)?))
}

/// A bound RDMA listener, as the acceptor takes it.
pub(crate) fn rdma(l: RdmaListener) -> Box<dyn Listener> {
    Box::new(Rdma::new(l))
}
