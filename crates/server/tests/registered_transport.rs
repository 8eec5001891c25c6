//! A transport registered with `farflash_transport::register` goes through
//! the whole server with nothing in core, control, server or mgmt naming
//! it: its listen address in the configuration binds at `Server::start`,
//! `save_config` writes it back as configured, and the management API's
//! `listener_add` / `listener_remove` take its addresses; an unknown
//! transport is still refused, naming it. The transport here accepts
//! nothing; one that carries connections is crates/transport/tests/loopback.rs.

use anyhow::Result;
use farflash_core::config::Config;
use farflash_core::listen::ListenTransport;
use farflash_core::Target;
use farflash_server::{Options, RpcSocket, Server};
use farflash_transport::{register, Incoming, Listener};
use mio::{Registry, Token};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.farflash:registered-transport";

/// Fabrics TRTYPE 254: Intra Host Transport.
const QUIET: ListenTransport = ListenTransport::new("quiet", 254);

/// The addresses the transport's live listeners are on.
static BOUND: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

/// The transport's listener: bound to a name, accepting nothing.
struct Quiet(SocketAddr);

impl Listener for Quiet {
    fn register(&mut self, _registry: &Registry, _token: Token) -> std::io::Result<()> {
        Ok(())
    }
    fn deregister(&mut self, _registry: &Registry) {}
    fn accept(&mut self, _target: &Arc<Target>, _out: &mut Vec<Box<dyn Incoming>>) {}
    fn local_addr(&self) -> Option<SocketAddr> {
        Some(self.0)
    }
    fn transport(&self) -> Option<ListenTransport> {
        Some(QUIET)
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        let mut b = BOUND.lock().unwrap_or_else(|e| e.into_inner());
        b.retain(|a| *a != self.0);
    }
}

fn bound(a: &str) -> bool {
    let a: SocketAddr = a.parse().expect("address");
    BOUND.lock().expect("lock").contains(&a)
}

fn config(listen: &str) -> String {
    format!(
        "listen = [{listen}]\n[transport]\nthreads = 1\n[[subsystem]]\nnqn = '{NQN}'\n\
         [[subsystem.namespace]]\nbackend = 'ram'\nsize = '1M'\n"
    )
}

fn call(sock: &Path, method: &str, params: Value) -> Value {
    farflash_mgmt::server::call(sock, method, params).expect("management call")
}

#[test]
fn a_registered_transport_is_configured_saved_added_and_removed() -> Result<()> {
    register(QUIET, |sa| {
        BOUND.lock().unwrap_or_else(|e| e.into_inner()).push(sa);
        Ok((Box::new(Quiet(sa)), sa))
    })
    .map_err(anyhow::Error::msg)?;
    let dir = std::env::temp_dir().join(format!("ff-server-{}-registered", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sock = dir.join("rpc.sock");
    let text = config("'127.0.0.1:0', { address = '127.0.0.1:4420', transport = 'quiet' }");
    let source = Box::new(move || {
        Ok::<Config, anyhow::Error>(farflash_control::config::from_toml(&text, "test")?)
    });
    let opts = Options::new(source).rpc_socket(RpcSocket::Path(sock.clone()));
    let server = Server::start(opts)?;

    // Bound at start, as configured (the table form is stored prefixed).
    assert!(bound("127.0.0.1:4420"));
    let ls = server.target().listeners();
    assert_eq!(ls.len(), 2);
    assert_eq!(ls[1].transport, QUIET);
    assert_eq!(ls[1].config, "quiet:127.0.0.1:4420");
    assert_eq!(server.addrs()[1], "127.0.0.1:4420".parse()?);
    let saved = call(&sock, "save_config", json!({})).to_string();
    assert!(saved.contains("quiet:127.0.0.1:4420"), "{saved}");
    // listener_list names each listener's own transport.
    let list = call(&sock, "listener_list", json!({}));
    let kinds: Vec<(&str, &str)> = (list["result"].as_array().expect("a list").iter())
        .map(|l| {
            (
                l["configured"].as_str().unwrap_or(""),
                l["trtype"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(kinds.contains(&("quiet:127.0.0.1:4420", "quiet")), "{list}");
    assert!(kinds.iter().any(|&(_, t)| t == "tcp"), "{list}");

    // Added and removed over the management API.
    let added = call(
        &sock,
        "listener_add",
        json!({"addr": "quiet:127.0.0.1:4421"}),
    );
    assert!(added.get("error").is_none(), "{added}");
    assert!(bound("127.0.0.1:4421"));
    let saved = call(&sock, "save_config", json!({})).to_string();
    assert!(saved.contains("quiet:127.0.0.1:4421"), "{saved}");
    let removed = call(
        &sock,
        "listener_remove",
        json!({"addr": "quiet:127.0.0.1:4421"}),
    );
    assert!(removed.get("error").is_none(), "{removed}");
    let t0 = Instant::now();
    while bound("127.0.0.1:4421") {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the listener stayed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.target().listeners().len(), 2);

    // An unknown transport: refused, the error naming it and the known ones.
    let bad = call(
        &sock,
        "listener_add",
        json!({"addr": "roce:127.0.0.1:4422"}),
    );
    let msg = bad["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("\"roce\"") && msg.contains("quiet"), "{bad}");
    let bad = call(
        &sock,
        "load_config",
        json!({"toml": config("{ address = '127.0.0.1:4422', transport = 'roce' }")}),
    );
    let msg = bad["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("transport \"roce\""), "{bad}");
    assert_eq!(server.target().listeners().len(), 2);

    server.shutdown()?;
    assert!(!bound("127.0.0.1:4420"), "shutdown closes the listener");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
