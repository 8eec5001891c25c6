//! For tests: a management endpoint over mutual TLS (rustls, certificates
//! from rcgen) answering the volumes JSON-RPC contract and the subsystem,
//! host, QoS and ANA methods from an in-memory model, with the targets'
//! error codes, so that the controller's flows can be driven end to end
//! before the targets' volume API exists. Every call is recorded.

use farflash_mgmt::jsonrpc as rpc;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Default)]
pub struct ModelVolume {
    pub uuid: String,
    pub size: u64,
    pub snapshot: bool,
    pub parent: Option<String>,
    pub exported: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ModelSubsystem {
    pub hosts: Vec<(String, Value)>,
    /// Hosts allowed with `read_only` (the target's read-only grant).
    pub read_only: Vec<String>,
    pub volume: Option<String>,
    pub cntlid: (u64, u64),
    pub serial: String,
}

/// What a model target holds.
#[derive(Debug, Default)]
pub struct Model {
    pub pools: BTreeMap<String, u64>,
    pub volumes: BTreeMap<(String, String), ModelVolume>,
    pub subsystems: BTreeMap<String, ModelSubsystem>,
    pub qos: BTreeMap<String, Value>,
    pub ana: Vec<Value>,
    pub calls: Vec<String>,
    next_uuid: u32,
}

type Answer = Result<Value, (i64, String)>;

fn s<'a>(p: &'a Value, k: &str) -> Result<&'a str, (i64, String)> {
    p[k].as_str()
        .ok_or((rpc::INVALID_PARAMS, format!("{k}: missing")))
}

impl Model {
    fn vol_json(&self, pool: &str, name: &str, v: &ModelVolume) -> Value {
        let clones: Vec<&str> = self
            .volumes
            .iter()
            .filter(|((p, _), c)| p == pool && c.parent.as_deref() == Some(name))
            .map(|((_, n), _)| n.as_str())
            .collect();
        json!({"pool": pool, "name": name, "uuid": v.uuid, "size": v.size, "allocated": 0, "shared": 0,
               "parent": v.parent, "snapshot": v.snapshot, "clones": clones, "exported": v.exported})
    }

    fn get(&self, p: &Value) -> Result<(String, String, ModelVolume), (i64, String)> {
        let (pool, name) = (s(p, "pool")?, s(p, "name")?);
        if !self.pools.contains_key(pool) {
            return Err((rpc::NOT_FOUND, format!("pool {pool}: no such pool")));
        }
        let v = self.volumes.get(&(pool.into(), name.into()));
        let v = v.ok_or((rpc::NOT_FOUND, format!("{pool}/{name}: no such volume")))?;
        Ok((pool.into(), name.into(), v.clone()))
    }

    fn add(
        &mut self,
        pool: &str,
        name: &str,
        size: u64,
        snapshot: bool,
        parent: Option<String>,
    ) -> Answer {
        if !self.pools.contains_key(pool) {
            return Err((rpc::NOT_FOUND, format!("pool {pool}: no such pool")));
        }
        if self.volumes.contains_key(&(pool.into(), name.into())) {
            return Err((rpc::EXISTS, format!("{pool}/{name} exists")));
        }
        let free = self.pools[pool];
        if !snapshot && parent.is_none() && size > free {
            return Err((
                rpc::NO_SPACE,
                format!("pool {pool}: {size} bytes asked, {free} free"),
            ));
        }
        self.next_uuid += 1;
        let v = ModelVolume {
            uuid: format!("00000000-0000-4000-8000-{:012x}", self.next_uuid),
            size,
            snapshot,
            parent,
            exported: false,
        };
        let j = self.vol_json(pool, name, &v);
        self.volumes.insert((pool.into(), name.into()), v);
        Ok(j)
    }

    fn volume_call(&mut self, m: &str, p: &Value) -> Option<Answer> {
        Some(match m {
            "pool_list" => Ok(json!(self
                .pools
                .iter()
                .map(|(n, f)| json!({"name": n, "free": f}))
                .collect::<Vec<_>>())),
            "volume_get" => self
                .get(p)
                .map(|(pool, name, v)| self.vol_json(&pool, &name, &v)),
            "volume_list" => Ok(json!(self
                .volumes
                .iter()
                .map(|((pool, n), v)| self.vol_json(pool, n, v))
                .collect::<Vec<_>>())),
            "volume_create" => self.add(
                s(p, "pool").ok()?,
                s(p, "name").ok()?,
                p["size"].as_u64()?,
                false,
                None,
            ),
            "snapshot_create" => {
                let (pool, vol, _) = self
                    .get(&json!({"pool": p["pool"], "name": p["volume"]}))
                    .ok()?;
                let size = self.volumes[&(pool.clone(), vol.clone())].size;
                self.add(&pool, s(p, "name").ok()?, size, true, Some(vol))
            }
            "volume_clone" => match self.get(&json!({"pool": p["pool"], "name": p["snapshot"]})) {
                Ok((pool, snap, v)) if v.snapshot => {
                    self.add(&pool, s(p, "name").ok()?, v.size, false, Some(snap))
                }
                Ok(_) => Err((rpc::INVALID_CONFIG, "not a snapshot".into())),
                Err(e) => Err(e),
            },
            "volume_decouple" => self.get(p).map(|(pool, name, _)| {
                if let Some(v) = self.volumes.get_mut(&(pool, name)) {
                    v.parent = None;
                }
                Value::Null
            }),
            "volume_resize" => self.get(p).map(|(pool, name, _)| {
                if let Some(v) = self.volumes.get_mut(&(pool, name)) {
                    v.size = p["size"].as_u64().unwrap_or(v.size);
                }
                Value::Null
            }),
            "volume_delete" => match self.get(p) {
                Ok((pool, name, v)) => {
                    // As a local pool: a snapshot with one child is merged
                    // into it (the child's parent becomes the snapshot's).
                    let children: Vec<String> = self
                        .volumes
                        .iter()
                        .filter(|((pp, _), c)| *pp == pool && c.parent.as_deref() == Some(&name))
                        .map(|((_, n), _)| n.clone())
                        .collect();
                    if v.exported || children.len() > 1 {
                        Err((
                            rpc::IN_USE,
                            format!("{pool}/{name}: exported or has clones"),
                        ))
                    } else {
                        if let Some(child) = children.first() {
                            let grandparent = v.parent.clone();
                            if let Some(c) = self.volumes.get_mut(&(pool.clone(), child.clone())) {
                                c.parent = grandparent;
                            }
                        }
                        self.volumes.remove(&(pool, name));
                        Ok(Value::Null)
                    }
                }
                Err(e) => Err(e),
            },
            _ => return None,
        })
    }

    fn subsystem_call(&mut self, m: &str, p: &Value) -> Answer {
        let nqn = s(p, "nqn")?.to_owned();
        let missing = || (rpc::NOT_FOUND, format!("{nqn}: no such subsystem"));
        match m {
            "subsystem_create" => {
                if self.subsystems.contains_key(&nqn) {
                    return Err((rpc::EXISTS, format!("{nqn} exists")));
                }
                let hosts = p["allowed_hosts"].as_array().cloned().unwrap_or_default();
                let hosts = hosts
                    .iter()
                    .filter_map(|h| h.as_str())
                    .map(|h| (h.to_owned(), json!({})))
                    .collect();
                let cntlid = (
                    p["cntlid_min"].as_u64().unwrap_or(1),
                    p["cntlid_max"].as_u64().unwrap_or(65519),
                );
                let serial = p["serial"].as_str().unwrap_or("").to_owned();
                let sub = ModelSubsystem {
                    hosts,
                    read_only: Vec::new(),
                    volume: None,
                    cntlid,
                    serial,
                };
                self.subsystems.insert(nqn, sub);
                Ok(Value::Null)
            }
            "subsystem_delete" => {
                let sub = self.subsystems.remove(&nqn).ok_or_else(missing)?;
                if let Some(vol) = sub.volume {
                    let (pool, name) = vol.split_once('/').unwrap_or_default();
                    if let Some(v) = self.volumes.get_mut(&(pool.into(), name.into())) {
                        v.exported = false;
                    }
                }
                self.qos.remove(&nqn);
                Ok(Value::Null)
            }
            "subsystem_list" => Ok(json!(self
                .subsystems
                .get(&nqn)
                .map(|sub| vec![json!({"nqn": nqn,
                "allowed_hosts": sub.hosts.iter().map(|(h, _)| h).collect::<Vec<_>>()})])
                .unwrap_or_default())),
            "namespace_add" => {
                let vol = s(p, "volume")?.to_owned();
                let (pool, name) = vol.split_once('/').unwrap_or_default();
                let v = self
                    .volumes
                    .get_mut(&(pool.into(), name.into()))
                    .ok_or((rpc::NOT_FOUND, format!("volume {vol}")))?;
                let sub = self.subsystems.get_mut(&nqn).ok_or_else(missing)?;
                if sub.volume.is_some() {
                    return Err((rpc::EXISTS, "nsid 1 exists".into()));
                }
                v.exported = true;
                sub.volume = Some(vol);
                Ok(Value::Null)
            }
            "host_allow" => {
                let sub = self.subsystems.get_mut(&nqn).ok_or_else(missing)?;
                let host = s(p, "host")?.to_owned();
                let mut keys = p.clone();
                keys.as_object_mut().map(|o| {
                    o.remove("nqn");
                    o.remove("read_only");
                    o.remove("host")
                });
                let read_only = p["read_only"].as_bool().unwrap_or(false);
                // As the target (control's manage::allow_host): a host
                // allowed already keeps its read-only grant (another one:
                // CONFLICT) and only takes new keys; without keys: EXISTS.
                let listed = sub.hosts.iter().any(|(h, _)| *h == host);
                let granted = sub.read_only.contains(&host);
                if listed && granted != read_only {
                    return Err((
                        rpc::CONFLICT,
                        format!("read_only: {nqn}: {host} is allowed already with read_only = {granted}"),
                    ));
                }
                let keyless = keys.as_object().is_none_or(|o| o.is_empty());
                if keyless && listed {
                    return Err((rpc::EXISTS, format!("{nqn}: {host} is allowed already")));
                }
                if read_only && !granted {
                    sub.read_only.push(host.clone());
                }
                sub.hosts.retain(|(h, _)| *h != host);
                sub.hosts.push((host, keys));
                Ok(Value::Null)
            }
            "host_disallow" => {
                let sub = self.subsystems.get_mut(&nqn).ok_or_else(missing)?;
                let host = s(p, "host")?;
                if !sub.hosts.iter().any(|(h, _)| h == host) {
                    return Err((rpc::NOT_FOUND, format!("{host} is not allowed")));
                }
                if sub.hosts.len() == 1 {
                    return Err((
                        rpc::INVALID_CONFIG,
                        "removing the last allowed host would allow any host".into(),
                    ));
                }
                sub.hosts.retain(|(h, _)| h != host);
                sub.read_only.retain(|h| h != host);
                Ok(Value::Null)
            }
            "qos_set" => {
                self.subsystems.get(&nqn).ok_or_else(missing)?;
                self.qos.insert(nqn, p.clone());
                Ok(Value::Null)
            }
            "ana_state_set" => {
                self.subsystems.get(&nqn).ok_or_else(missing)?;
                self.ana.push(p.clone());
                Ok(Value::Null)
            }
            _ => Err((rpc::METHOD_NOT_FOUND, format!("no method {m:?}"))),
        }
    }

    pub fn handle(&mut self, m: &str, p: &Value) -> Answer {
        self.calls.push(m.to_owned());
        match self.volume_call(m, p) {
            Some(a) => a,
            None => self.subsystem_call(m, p),
        }
    }
}

/// A model target behind a mutual-TLS endpoint, and the client files.
pub struct ModelTarget {
    pub model: Arc<Mutex<Model>>,
    pub addr: String,
    pub dir: PathBuf,
}

impl Drop for ModelTarget {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn leaf(issuer: &CertifiedIssuer<'static, KeyPair>, sans: Vec<String>) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(sans)
        .unwrap()
        .signed_by(&key, issuer)
        .unwrap();
    (cert.pem(), key.serialize_pem())
}

impl ModelTarget {
    /// Starts one with `pools` (name, free bytes); `tag` names its files.
    pub fn start(tag: &str, pools: &[(&str, u64)]) -> ModelTarget {
        let dir = std::env::temp_dir().join(format!("ff-csi-model-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let w = |n: &str, t: &str| std::fs::write(dir.join(n), t).unwrap();
        w("ca.crt", &ca.pem());
        let (c, k) = leaf(&ca, vec!["127.0.0.1".into()]);
        w("server.crt", &c);
        w("server.key", &k);
        let (c, k) = leaf(&ca, vec!["csi".into()]);
        w("client.crt", &c);
        w("client.key", &k);
        let files = farflash_mgmt::net::TlsFiles::new(
            dir.join("server.crt"),
            dir.join("server.key"),
            dir.join("ca.crt"),
        );
        let (model, addr) = listen(&files, pools);
        ModelTarget { model, addr, dir }
    }

    /// Another model target with the same certificates (both on
    /// 127.0.0.1), for volumes on two targets: its model and address.
    pub fn sibling(&self, pools: &[(&str, u64)]) -> (Arc<Mutex<Model>>, String) {
        let d = &self.dir;
        let files = farflash_mgmt::net::TlsFiles::new(
            d.join("server.crt"),
            d.join("server.key"),
            d.join("ca.crt"),
        );
        listen(&files, pools)
    }

    /// A `[[target]]` entry and the `[tls]` section for it.
    pub fn config(&self, name: &str, nvme: &str) -> String {
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\nca = {:?}\n[[target]]\nname = {name:?}\nmanagement = {:?}\nnvme = [{nvme:?}]\n",
            self.dir.join("client.crt"),
            self.dir.join("client.key"),
            self.dir.join("ca.crt"),
            self.addr
        )
    }
}

/// Serves a new model with `pools` on a free 127.0.0.1 port.
fn listen(
    files: &farflash_mgmt::net::TlsFiles,
    pools: &[(&str, u64)],
) -> (Arc<Mutex<Model>>, String) {
    let tls = files.server_config().unwrap();
    let model = Arc::new(Mutex::new(Model::default()));
    for (p, free) in pools {
        model.lock().unwrap().pools.insert(p.to_string(), *free);
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let m = model.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let (m, tls) = (m.clone(), tls.clone());
            std::thread::spawn(move || serve(tcp, tls, &m));
        }
    });
    (model, addr)
}

fn serve(tcp: std::net::TcpStream, tls: Arc<rustls::ServerConfig>, model: &Mutex<Model>) {
    let Ok(conn) = rustls::ServerConnection::new(tls) else {
        return;
    };
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let mut line = String::new();
    if BufReader::new(&mut s).read_line(&mut line).is_err() {
        return;
    }
    let Ok(req) = serde_json::from_str::<Value>(&line) else {
        return;
    };
    let method = req["method"].as_str().unwrap_or("");
    let answer = match model.lock().unwrap().handle(method, &req["params"]) {
        Ok(r) => json!({"jsonrpc": "2.0", "id": req["id"], "result": r}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": req["id"], "error": {"code": code, "message": message}})
        }
    };
    let _ = writeln!(s, "{answer}");
    let _ = s.flush();
    s.conn.send_close_notify();
    let _ = s.flush();
}
