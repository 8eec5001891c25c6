//! The transports a listen address can name (`[tcp:]ADDR:PORT`,
//! `rdma:ADDR:PORT`: `farflash_core::listen`), and how each binds: the one
//! place a configured transport is registered (the server binds its
//! configured listeners and the management API its new ones through
//! [`bind_listener`]). A transport used only through
//! [`crate::serve_listeners`] needs nothing here.

use crate::link::Listener;
use crate::rdma::{Rdma, RDMA_BACKLOG};
use crate::tcp::Tcp;
use farflash_core::listen::ListenTransport;
use farflash_rdma_verbs::RdmaListener;
use std::io;
use std::net::SocketAddr;

/// Binds a listener of `transport` on `sa` (in the caller's thread, so an
/// error is the caller's, naming the address); returns it and the address
/// it is bound to.
pub fn bind_listener(
    transport: ListenTransport,
    sa: SocketAddr,
) -> Result<(Box<dyn Listener>, SocketAddr), String> {
    match transport {
        ListenTransport::Tcp => {
            let fail = |e: io::Error| format!("cannot listen on {sa}: {e}");
            let l = std::net::TcpListener::bind(sa).map_err(fail)?;
            let bound = l.local_addr().map_err(fail)?;
            Ok((tcp(l).map_err(fail)?, bound))
        }
        ListenTransport::Rdma => {
            // Without libibverbs/librdmacm, say which packages (not "no device").
            farflash_rdma_verbs::load_libraries().map_err(|e| e.to_string())?;
            let l = RdmaListener::bind(sa, RDMA_BACKLOG).map_err(|e| {
                format!("cannot listen for NVMe/RDMA on {sa} (is there an RDMA device on it? rdma link): {e}")
            })?;
            let bound = l.local_addr();
            Ok((rdma(l), bound))
        }
    }
}

/// A bound TCP listener, as the acceptor takes it.
pub(crate) fn tcp(l: std::net::TcpListener) -> io::Result<Box<dyn Listener>> {
    Ok(Box::new(Tcp::new(l)?))
}

/// A bound RDMA listener, as the acceptor takes it.
pub(crate) fn rdma(l: RdmaListener) -> Box<dyn Listener> {
    Box::new(Rdma::new(l))
}
