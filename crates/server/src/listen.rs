//! Binding the configured listeners of every transport (TCP plaintext or
//! TLS, NVMe/RDMA, any registered with `farflash_transport::register`), in
//! the configured order (the discovery log's).

use anyhow::{Context, Result};
use farflash_core::listen::{join_listen, split_listen, ListenTransport};
use farflash_core::target::Listener;
use std::net::{SocketAddr, ToSocketAddrs};

/// The bound listeners.
pub(crate) struct Bound {
    /// Of every transport, for the acceptor.
    pub(crate) listeners: Vec<Box<dyn farflash_transport::Listener>>,
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
        listeners: Vec::new(),
        addrs: Vec::new(),
        configs: listen.to_vec(),
        kinds: Vec::new(),
    };
    for c in listen {
        let (t, a) = split_listen(c).map_err(anyhow::Error::msg)?;
        let (l, addr) =
            farflash_transport::bind_listener(t, resolve(t, a)?).map_err(anyhow::Error::msg)?;
        b.listeners.push(l);
        b.addrs.push(addr);
        b.kinds.push(t);
    }
    Ok(b)
}

/// The socket address a listen address names.
fn resolve(t: ListenTransport, addr: &str) -> Result<SocketAddr> {
    let shown = join_listen(t, addr);
    addr.to_socket_addrs()
        .with_context(|| format!("bad listen address {shown:?} (want ADDR:PORT)"))?
        .next()
        .with_context(|| format!("listen address {shown:?} resolves to nothing"))
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
