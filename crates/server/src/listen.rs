//! Binding the configured listeners: TCP (plaintext or TLS) and NVMe/RDMA,
//! in the configured order (the discovery log's).

use anyhow::{Context, Result};
use farflash_core::listen::{split_listen, ListenTransport};
use farflash_core::target::Listener;
use farflash_transport::RdmaListener;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// The bound listeners.
pub(crate) struct Bound {
    pub(crate) tcp: Vec<TcpListener>,
    pub(crate) rdma: Vec<RdmaListener>,
    /// Every listener's bound address, in the configured order.
    pub(crate) addrs: Vec<SocketAddr>,
    configs: Vec<String>,
    kinds: Vec<ListenTransport>,
}

impl Bound {
    /// The listeners as the target describes them.
    pub(crate) fn described(&self) -> Vec<Listener> {
        (self.configs.iter().zip(&self.addrs).zip(&self.kinds))
            .map(|((c, a), t)| Listener {
                config: c.clone(),
                addr: *a,
                transport: *t,
            })
            .collect()
    }
}

/// Binds every configured listener; the first that fails is the error.
pub(crate) fn bind_all(listen: &[String]) -> Result<Bound> {
    let mut b = Bound {
        tcp: Vec::new(),
        rdma: Vec::new(),
        addrs: Vec::new(),
        configs: listen.to_vec(),
        kinds: Vec::new(),
    };
    for c in listen {
        let (t, a) = split_listen(c).map_err(anyhow::Error::msg)?;
        match t {
            ListenTransport::Tcp => {
                let l = bind(a)?;
                b.addrs.push(l.local_addr()?);
                b.tcp.push(l);
            }
            ListenTransport::Rdma => {
                let l = bind_rdma(a)?;
                b.addrs.push(l.local_addr());
                b.rdma.push(l);
            }
        }
        b.kinds.push(t);
    }
    Ok(b)
}

fn bind(addr: &str) -> Result<TcpListener> {
    let sa: SocketAddr = addr
        .to_socket_addrs()
        .with_context(|| format!("bad listen address {addr:?} (want ADDR:PORT)"))?
        .next()
        .with_context(|| format!("listen address {addr:?} resolves to nothing"))?;
    TcpListener::bind(sa).with_context(|| format!("cannot listen on {sa}"))
}

/// An NVMe/RDMA listener (RDMA CM) on `addr`, which must be an address of
/// an RDMA device's network interface (or unspecified).
fn bind_rdma(addr: &str) -> Result<RdmaListener> {
    let sa: SocketAddr = addr
        .to_socket_addrs()
        .with_context(|| format!("bad listen address rdma:{addr} (want rdma:ADDR:PORT)"))?
        .next()
        .with_context(|| format!("listen address rdma:{addr} resolves to nothing"))?;
    // Without libibverbs/librdmacm, say which packages (not "no device").
    farflash_rdma_verbs::load_libraries()?;
    RdmaListener::bind(sa, farflash_transport::RDMA_BACKLOG).with_context(|| {
        format!("cannot listen for NVMe/RDMA on {sa} (is there an RDMA device on it? rdma link)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_bind_in_order_and_errors_name_the_address() {
        let b = bind_all(&["127.0.0.1:0".into(), "127.0.0.1:0".into()]).expect("bind");
        assert_eq!(b.addrs.len(), 2);
        assert_ne!(b.addrs[0], b.addrs[1]);
        let d = b.described();
        assert_eq!(d[1].addr, b.addrs[1]);
        assert_eq!(d[0].config, "127.0.0.1:0");
        let taken = b.addrs[0].to_string();
        let e = bind_all(std::slice::from_ref(&taken))
            .err()
            .expect("in use");
        assert!(format!("{e:#}").contains(&taken), "{e:#}");
        let e = bind_all(&["nowhere".into()]).err().expect("bad address");
        assert!(format!("{e:#}").contains("nowhere"), "{e:#}");
    }
}
