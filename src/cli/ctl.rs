//! `farflash ctl`: manage a running `farflash serve` through its management
//! socket, with verbs like nvmetcli's and rpc.py's; `farflash rpc` sends one
//! raw JSON-RPC method. Human output by default, `--json` for the result as
//! the target sent it.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use farflash_core::config::RbdConfig;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CtlArgs {
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Print the JSON result instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub verb: Verb,
}

#[derive(Subcommand, Debug)]
pub enum Verb {
    /// Subsystems: list, create, delete.
    #[command(subcommand)]
    Subsystem(SubsystemVerb),
    /// Namespaces: add, remove, resize.
    #[command(subcommand)]
    Namespace(NamespaceVerb),
    /// Hosts allowed to connect to a subsystem.
    #[command(subcommand)]
    Host(HostVerb),
    /// Listeners (ADDR:PORT).
    #[command(subcommand)]
    Listener(ListenerVerb),
    /// Live controllers.
    #[command(subcommand)]
    Controller(ControllerVerb),
    /// ANA states per listener and group (docs/ha.md).
    #[command(subcommand)]
    Ana(AnaVerb),
    /// Volume pools (docs/volumes.md): create, list, delete.
    #[command(subcommand)]
    Pool(crate::cli::ctl_volumes::PoolVerb),
    /// Volumes of pools: create, list, get, resize, rename, delete, clone, decouple.
    #[command(subcommand)]
    Volume(crate::cli::ctl_volumes::VolumeVerb),
    /// Snapshots of volumes: create (list, delete and clone them as volumes).
    #[command(subcommand)]
    Snapshot(crate::cli::ctl_volumes::SnapshotVerb),
    /// I/O statistics per subsystem and host.
    Stats {
        #[arg(long)]
        nqn: Option<String>,
    },
    /// Write the running configuration as TOML (to PATH on the target's
    /// side, or to standard output).
    SaveConfig {
        /// File the target writes (mode 0600).
        path: Option<PathBuf>,
    },
    /// Apply a configuration file (the target reads PATH) or, with `-`, the
    /// TOML on standard input.
    LoadConfig { path: PathBuf },
}

#[derive(Subcommand, Debug)]
pub enum SubsystemVerb {
    List,
    Create {
        nqn: String,
        #[arg(long)]
        serial: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// Allow only these hosts (repeatable; default: any host).
        #[arg(long = "allow-host", value_name = "HOSTNQN")]
        allow_host: Vec<String>,
    },
    Delete {
        nqn: String,
    },
}

/// `namespace add --rbd`: the image and how to reach its cluster.
#[derive(Args, Debug)]
pub struct RbdFlags {
    /// A Ceph RBD image (docs/rbd.md), with --ceph-conf, --ceph-id, --ceph-keyring.
    #[arg(long, value_name = "POOL/IMAGE", group = "backend")]
    rbd: Option<RbdConfig>,
    #[arg(long = "ceph-conf", value_name = "PATH", requires = "rbd")]
    ceph_conf: Option<PathBuf>,
    #[arg(long = "ceph-id", value_name = "ID", requires = "rbd")]
    ceph_id: Option<String>,
    #[arg(long = "ceph-keyring", value_name = "PATH", requires = "rbd")]
    ceph_keyring: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum NamespaceVerb {
    /// Add a namespace: one of --ram SIZE, --null SIZE, --file PATH, --rbd POOL/IMAGE, --volume POOL/NAME.
    Add {
        nqn: String,
        #[arg(long)]
        nsid: Option<u32>,
        #[arg(long, value_name = "SIZE", group = "backend")]
        ram: Option<String>,
        #[arg(long, value_name = "SIZE", group = "backend")]
        null: Option<String>,
        #[arg(long, value_name = "PATH", group = "backend")]
        file: Option<PathBuf>,
        #[command(flatten)]
        rbd: Box<RbdFlags>,
        /// A volume of a pool (docs/volumes.md).
        #[arg(long, value_name = "POOL/NAME", group = "backend")]
        volume: Option<String>,
        /// With --file: create or extend the file to SIZE.
        #[arg(long, value_name = "SIZE")]
        size: Option<String>,
        #[arg(long = "block-size", value_name = "512|4096")]
        block_size: Option<u32>,
        #[arg(long)]
        uuid: Option<String>,
        #[arg(long)]
        nguid: Option<String>,
    },
    Remove {
        nqn: String,
        nsid: u32,
    },
    /// Grow a file namespace, or resize a null one (hosts are told).
    Resize {
        nqn: String,
        nsid: u32,
        size: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum HostVerb {
    /// Allow a host NQN to connect.
    Allow {
        nqn: String,
        host: String,
        /// Grant read-only access: the host's controllers see every
        /// namespace write protected (writes fail; Linux sets the disk
        /// read-only). A host allowed already keeps its grant.
        #[arg(long)]
        read_only: bool,
    },
    /// Remove a host from the allowed list; its controllers are disconnected.
    Disallow { nqn: String, host: String },
    /// Set or replace a host's TLS PSK (rotation: connected queues keep
    /// running, new connections use the new key); its DH-HMAC-CHAP keys stay.
    PskSet {
        nqn: String,
        host: String,
        /// `NVMeTLSkey-1:0x:...:`, or the path of a 0600 file holding it as
        /// the target reads it (better: a command line is visible to
        /// other users in /proc).
        #[arg(long, value_name = "KEY|FILE")]
        psk: SecretArg,
        /// Derivation layouts accepted, in order (default
        /// libnvme-1.10,rfc8446; docs/tls.md).
        #[arg(long = "tls-derivation", value_name = "LIST", value_delimiter = ',')]
        tls_derivation: Vec<String>,
    },
    /// Remove a host's TLS PSK (its DH-HMAC-CHAP keys stay).
    PskRemove { nqn: String, host: String },
}

/// A command-line secret: `Debug` prints no key material.
#[derive(Clone)]
pub struct SecretArg(zeroize::Zeroizing<String>);

impl std::str::FromStr for SecretArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<SecretArg, Self::Err> {
        Ok(SecretArg(zeroize::Zeroizing::new(s.to_owned())))
    }
}

impl std::fmt::Debug for SecretArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretArg(<redacted>)")
    }
}

#[derive(Subcommand, Debug)]
pub enum ListenerVerb {
    List,
    Add {
        addr: String,
    },
    /// Stop listening; connections that came through it close.
    Remove {
        addr: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum ControllerVerb {
    List {
        #[arg(long)]
        nqn: Option<String>,
    },
    Disconnect {
        cntlid: u16,
    },
}

#[derive(Subcommand, Debug)]
pub enum AnaVerb {
    /// Every group's state through every listener.
    Get { nqn: String },
    /// Set a group's state through one listener: optimized, non-optimized,
    /// inaccessible, persistent-loss or change (hosts get an ANA Change event).
    Set {
        nqn: String,
        /// A listener, ADDR:PORT.
        listen: String,
        anagrpid: u32,
        state: String,
    },
}

/// Where the target's management API is: its Unix socket, or its network
/// endpoint (TLS with a client certificate; docs/management.md).
#[derive(Args, Debug, Clone)]
pub struct Endpoint {
    /// The target's management socket (default: as `farflash serve`'s).
    #[arg(long = "rpc-socket", short = 's', value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,
    /// The target's network management endpoint (`serve --rpc-listen`),
    /// HOST:PORT; needs --rpc-cert, --rpc-key and --rpc-ca.
    #[arg(long = "rpc-connect", value_name = "HOST:PORT", global = true)]
    pub connect: Option<String>,
    /// This client's certificate (PEM), signed by the target's client CA.
    #[arg(long = "rpc-cert", value_name = "FILE", global = true)]
    pub cert: Option<PathBuf>,
    /// This client's private key (PEM).
    #[arg(long = "rpc-key", value_name = "FILE", global = true)]
    pub key: Option<PathBuf>,
    /// The CA (PEM) the target's certificate must chain to.
    #[arg(long = "rpc-ca", value_name = "FILE", global = true)]
    pub ca: Option<PathBuf>,
    /// The name the target's certificate must carry (default: HOST of --rpc-connect).
    #[arg(long = "rpc-server-name", value_name = "NAME", global = true)]
    pub server_name: Option<String>,
}

impl Endpoint {
    /// Sends one request; the JSON-RPC answer, error or not.
    fn call_raw(&self, method: &str, params: Value) -> Result<Value> {
        let Some(addr) = &self.connect else {
            if self.cert.is_some() || self.key.is_some() || self.ca.is_some() {
                bail!("--rpc-cert, --rpc-key and --rpc-ca go with --rpc-connect");
            }
            let sock =
                (self.socket.clone()).unwrap_or_else(farflash_mgmt::server::default_socket_path);
            return Ok(farflash_mgmt::server::call(&sock, method, params)?);
        };
        if self.socket.is_some() {
            bail!("--rpc-socket and --rpc-connect: give one");
        }
        let (Some(cert), Some(key), Some(ca)) = (&self.cert, &self.key, &self.ca) else {
            bail!("--rpc-connect needs --rpc-cert, --rpc-key and --rpc-ca (the endpoint refuses clients without a certificate)");
        };
        let tls = farflash_mgmt::net::TlsFiles::new(cert, key, ca).client_config()?;
        let client = farflash_mgmt::net::NetClient::new(addr, self.server_name.as_deref(), tls)?;
        Ok(client.call(method, params)?)
    }
}

#[derive(Args, Debug)]
pub struct RpcArgs {
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Method name (`rpc_methods` lists them).
    pub method: String,
    /// Parameters as a JSON object (default {}).
    pub params: Option<String>,
}

/// Sends one call; a JSON-RPC error becomes an error.
fn call(ep: &Endpoint, method: &str, params: Value) -> Result<Value> {
    let answer = ep.call_raw(method, params)?;
    if let Some(e) = answer.get("error") {
        bail!(
            "{} (error {})",
            e["message"].as_str().unwrap_or("?"),
            e["code"].as_i64().unwrap_or(0)
        );
    }
    Ok(answer.get("result").cloned().unwrap_or(Value::Null))
}

pub(crate) fn size_param(s: &str) -> Result<Value> {
    let n: farflash_core::config::Size = s.parse().map_err(anyhow::Error::msg)?;
    Ok(json!(n.0))
}

pub fn run_rpc(a: RpcArgs) -> Result<()> {
    let params: Value = match &a.params {
        Some(p) => serde_json::from_str(p).context("params must be JSON")?,
        None => json!({}),
    };
    let answer = a.endpoint.call_raw(&a.method, params)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(&answer)?)?;
    if answer.get("error").is_some() {
        std::process::exit(1);
    }
    Ok(())
}

pub fn run(a: CtlArgs) -> Result<()> {
    let (method, params) = request(&a.verb)?;
    let params = strip_nulls(params);
    let result = call(&a.endpoint, method, params)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&result)?)?;
        return Ok(());
    }
    farflash_mgmt::methods::print_human(&mut out, method, &result)?;
    Ok(())
}

/// The method a verb calls, and its parameters.
fn request(verb: &Verb) -> Result<(&'static str, Value)> {
    Ok(match verb {
        Verb::Subsystem(SubsystemVerb::List) => ("subsystem_list", json!({})),
        Verb::Subsystem(SubsystemVerb::Create {
            nqn,
            serial,
            model,
            allow_host,
        }) => (
            "subsystem_create",
            json!({"nqn": nqn, "serial": serial, "model": model, "allowed_hosts": allow_host}),
        ),
        Verb::Subsystem(SubsystemVerb::Delete { nqn }) => ("subsystem_delete", json!({"nqn": nqn})),
        Verb::Namespace(add @ NamespaceVerb::Add { .. }) => ("namespace_add", namespace_add(add)?),
        Verb::Namespace(NamespaceVerb::Remove { nqn, nsid }) => {
            ("namespace_remove", json!({"nqn": nqn, "nsid": nsid}))
        }
        Verb::Namespace(NamespaceVerb::Resize { nqn, nsid, size }) => (
            "namespace_resize",
            json!({"nqn": nqn, "nsid": nsid, "size": size_param(size)?}),
        ),
        Verb::Host(HostVerb::Allow {
            nqn,
            host,
            read_only,
        }) => (
            "host_allow",
            json!({"nqn": nqn, "host": host, "read_only": read_only}),
        ),
        Verb::Host(HostVerb::PskSet {
            nqn,
            host,
            psk,
            tls_derivation,
        }) => (
            "host_psk_set",
            json!({"nqn": nqn, "host": host, "psk": psk.0.as_str(), "tls_derivation": tls_derivation}),
        ),
        Verb::Host(HostVerb::PskRemove { nqn, host }) => {
            ("host_psk_remove", json!({"nqn": nqn, "host": host}))
        }
        Verb::Host(HostVerb::Disallow { nqn, host }) => {
            ("host_disallow", json!({"nqn": nqn, "host": host}))
        }
        Verb::Listener(ListenerVerb::List) => ("listener_list", json!({})),
        Verb::Listener(ListenerVerb::Add { addr }) => ("listener_add", json!({"addr": addr})),
        Verb::Listener(ListenerVerb::Remove { addr }) => ("listener_remove", json!({"addr": addr})),
        Verb::Controller(ControllerVerb::List { nqn }) => ("controller_list", json!({"nqn": nqn})),
        Verb::Controller(ControllerVerb::Disconnect { cntlid }) => {
            ("controller_disconnect", json!({"cntlid": cntlid}))
        }
        Verb::Ana(AnaVerb::Get { nqn }) => ("ana_state_get", json!({"nqn": nqn})),
        Verb::Ana(AnaVerb::Set {
            nqn,
            listen,
            anagrpid,
            state,
        }) => (
            "ana_state_set",
            json!({"nqn": nqn, "listen": listen, "anagrpid": anagrpid, "state": state}),
        ),
        Verb::Pool(v) => v.request()?,
        Verb::Volume(v) => v.request()?,
        Verb::Snapshot(v) => v.request()?,
        Verb::Stats { nqn } => ("stats", json!({"nqn": nqn})),
        Verb::SaveConfig { path } => ("save_config", json!({"path": path})),
        Verb::LoadConfig { path } if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
            ("load_config", json!({"toml": text}))
        }
        Verb::LoadConfig { path } => {
            // The target reads the file: make a relative path absolute here.
            let p = std::path::absolute(path)?;
            ("load_config", json!({"path": p}))
        }
    })
}

/// `namespace add`'s parameters: one backend and what it needs.
fn namespace_add(verb: &NamespaceVerb) -> Result<Value> {
    let NamespaceVerb::Add {
        nqn,
        nsid,
        ram,
        null,
        file,
        rbd,
        volume,
        size,
        block_size,
        uuid,
        nguid,
    } = verb
    else {
        bail!("not namespace add");
    };
    let mut p =
        json!({"nqn": nqn, "nsid": nsid, "block_size": block_size, "uuid": uuid, "nguid": nguid});
    let RbdFlags {
        rbd,
        ceph_conf,
        ceph_id,
        ceph_keyring,
    } = &**rbd;
    match (ram, null, file, rbd) {
        _ if volume.is_some() => {
            p["backend"] = json!("volume");
            p["volume"] = json!(volume);
        }
        (None, None, None, Some(r)) => {
            p["backend"] = json!("rbd");
            p["rbd"] = json!({"pool": r.pool, "image": r.image, "conf": ceph_conf, "id": ceph_id, "keyring": ceph_keyring});
        }
        (Some(s), None, None, None) => {
            p["backend"] = json!("ram");
            p["size"] = size_param(s)?;
        }
        (None, Some(s), None, None) => {
            p["backend"] = json!("null");
            p["size"] = size_param(s)?;
        }
        (None, None, Some(f), None) => {
            p["backend"] = json!("file");
            p["path"] = json!(f);
            if let Some(s) = size {
                p["size"] = size_param(s)?;
            }
        }
        _ => bail!("give one of --ram SIZE, --null SIZE, --file PATH, --rbd POOL/IMAGE, --volume POOL/NAME"),
    }
    Ok(p)
}

/// Optional parameters left out rather than sent as null.
fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        v => v,
    }
}
