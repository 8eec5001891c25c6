//! The volume pools a target holds (issue #42, docs/volumes.md): opened
//! at start from the configuration's `[[pool]]` entries, created and
//! closed through the management API, written back by `save_config`.
//! `backend = "volume"` namespaces open their volume here
//! ([`crate::provision`]).
//!
//! One registry per process ([`registry`]): a process runs one target.

use farflash_backend::RbdOptions;
use farflash_core::config::PoolConfig;
use farflash_pool::{LocalPool, PoolError, RbdPool, VolumeStore};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Why a pool operation failed; the message names the pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolsError {
    #[error("no pool {0:?}")]
    NotFound(String),
    #[error("pool {0:?} exists already")]
    Exists(String),
    #[error("pool {name:?} holds volumes ({volumes}): delete them first")]
    InUse { name: String, volumes: String },
    #[error("{0}")]
    Invalid(String),
    /// `err` is in the message, so it is not also a `source` (an error
    /// chain would print it twice).
    #[error("pool {pool}: {err}")]
    Pool { pool: String, err: PoolError },
}

impl PoolsError {
    /// Wraps an error of pool `pool`'s store.
    pub fn of(pool: &str) -> impl FnOnce(PoolError) -> PoolsError + '_ {
        move |err| PoolsError::Pool {
            pool: pool.to_owned(),
            err,
        }
    }
}

struct Entry {
    config: PoolConfig,
    store: Arc<dyn VolumeStore>,
}

/// The pools of the target, by name.
#[derive(Default)]
pub struct Pools {
    open: Mutex<BTreeMap<String, Entry>>,
}

/// The process's pools.
pub fn registry() -> &'static Pools {
    static POOLS: OnceLock<Pools> = OnceLock::new();
    POOLS.get_or_init(Pools::default)
}

fn lock(m: &Mutex<BTreeMap<String, Entry>>) -> MutexGuard<'_, BTreeMap<String, Entry>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Opens the pool `cfg` describes (its devices must hold a pool of that
/// name, every one present and of the size the pool recorded).
fn open_store(cfg: &PoolConfig) -> Result<Arc<dyn VolumeStore>, PoolsError> {
    cfg.validate().map_err(PoolsError::Invalid)?;
    match cfg.backend.as_str() {
        "local" => {
            let pool = LocalPool::open(&cfg.devices).map_err(PoolsError::of(&cfg.name))?;
            if pool.name() != cfg.name {
                return Err(PoolsError::Invalid(format!(
                    "pool {:?}: its devices hold pool {:?} (the name is the one given at creation)",
                    cfg.name,
                    pool.name()
                )));
            }
            Ok(Arc::new(pool))
        }
        _ => {
            // PoolConfig::validate: an rbd pool has its table.
            let Some(r) = &cfg.rbd else {
                return Err(PoolsError::Invalid(format!(
                    "pool {}: an rbd pool needs rbd = {{ pool = ... }}",
                    cfg.name
                )));
            };
            let opts = RbdOptions {
                pool: r.pool.clone(),
                image: String::new(),
                conf: r.conf.clone(),
                id: r.id.clone(),
                keyring: r.keyring.clone(),
                // Volume namespaces have 4 KiB blocks, local or RBD.
                block_size: 4096,
            };
            Ok(Arc::new(
                RbdPool::connect(&opts).map_err(PoolsError::of(&cfg.name))?,
            ))
        }
    }
}

impl Pools {
    /// Opens every pool of `cfgs` not open yet (at start and on a reload);
    /// an error names the pool and what is wrong, and leaves the pools
    /// opened before it open. Pools open and not listed stay open (close
    /// them with [`Pools::delete`]).
    pub fn open_configured(&self, cfgs: &[PoolConfig]) -> Result<(), PoolsError> {
        for cfg in cfgs {
            if lock(&self.open).contains_key(&cfg.name) {
                continue;
            }
            let store = open_store(cfg)?;
            let s = store.stats();
            tracing::info!(
                pool = %cfg.name,
                size = s.size,
                allocated = s.allocated,
                volumes = s.volumes,
                "pool opened"
            );
            self.insert(cfg.clone(), store)?;
        }
        Ok(())
    }

    fn insert(&self, config: PoolConfig, store: Arc<dyn VolumeStore>) -> Result<(), PoolsError> {
        let mut open = lock(&self.open);
        if open.contains_key(&config.name) {
            return Err(PoolsError::Exists(config.name));
        }
        open.insert(config.name.clone(), Entry { config, store });
        Ok(())
    }

    /// Creates a pool: a local pool formats its devices (their content is
    /// lost; devices that hold a sound pool already are refused); an RBD
    /// pool connects to its existing Ceph pool.
    pub fn create(&self, mut cfg: PoolConfig) -> Result<Arc<dyn VolumeStore>, PoolsError> {
        cfg.validate().map_err(PoolsError::Invalid)?;
        if lock(&self.open).contains_key(&cfg.name) {
            return Err(PoolsError::Exists(cfg.name));
        }
        if cfg.backend != "local" {
            let store = open_store(&cfg)?;
            self.insert(cfg, store.clone())?;
            return Ok(store);
        }
        let found = farflash_pool::check(&cfg.devices);
        if found.ok() {
            return Err(PoolsError::Invalid(format!(
                "pool {:?}: the devices hold a pool already ({} volumes): open it with a [[pool]] entry, or wipe the devices to reuse them",
                cfg.name, found.volumes
            )));
        }
        let pool = LocalPool::create(&cfg.name, &cfg.devices, cfg.cluster_size)
            .map_err(PoolsError::of(&cfg.name))?;
        cfg.cluster_size = Some(pool.stats().cluster_size);
        let store: Arc<dyn VolumeStore> = Arc::new(pool);
        self.insert(cfg, store.clone())?;
        Ok(store)
    }

    /// The open pool `name`.
    pub fn get(&self, name: &str) -> Result<Arc<dyn VolumeStore>, PoolsError> {
        (lock(&self.open).get(name))
            .map(|e| e.store.clone())
            .ok_or_else(|| PoolsError::NotFound(name.to_owned()))
    }

    /// Every open pool with its name (an RBD pool's may differ from its
    /// Ceph pool's, `VolumeStore::name`), by name.
    pub fn all(&self) -> Vec<(String, Arc<dyn VolumeStore>)> {
        (lock(&self.open).iter())
            .map(|(n, e)| (n.clone(), e.store.clone()))
            .collect()
    }

    /// The configuration of every open pool (what `save_config` writes).
    pub fn configs(&self) -> Vec<PoolConfig> {
        lock(&self.open)
            .values()
            .map(|e| e.config.clone())
            .collect()
    }

    /// Closes pool `name` (refused while it holds volumes); a local
    /// pool's devices keep its data (a `[[pool]]` entry opens it again).
    pub fn delete(&self, name: &str) -> Result<(), PoolsError> {
        let mut open = lock(&self.open);
        let e = open
            .get(name)
            .ok_or_else(|| PoolsError::NotFound(name.to_owned()))?;
        let vols = e.store.list();
        if !vols.is_empty() {
            let names: Vec<&str> = vols.iter().take(8).map(|v| v.name.as_str()).collect();
            return Err(PoolsError::InUse {
                name: name.to_owned(),
                volumes: names.join(", "),
            });
        }
        open.remove(name);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn sparse(dir: &std::path::Path, name: &str, size: u64) -> PathBuf {
        let p = dir.join(name);
        std::fs::File::create(&p).unwrap().set_len(size).unwrap();
        p
    }

    fn local(name: &str, devices: Vec<PathBuf>) -> PoolConfig {
        PoolConfig {
            name: name.into(),
            backend: "local".into(),
            devices,
            cluster_size: None,
            rbd: None,
        }
    }

    #[test]
    fn create_open_delete_and_bad_devices() {
        let dir = std::env::temp_dir().join(format!("ff-pools-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dev = sparse(&dir, "d0", 256 << 20);
        let pools = Pools::default();
        let cfg = local("p1", vec![dev.clone()]);
        let store = pools.create(cfg.clone()).unwrap();
        assert_eq!(store.stats().cluster_size, farflash_pool::DEFAULT_CLUSTER);
        assert!(matches!(
            pools.create(cfg.clone()).map(|_| ()),
            Err(PoolsError::Exists(n)) if n == "p1"
        ));
        store.create_volume("v", 8 << 20).unwrap();
        let e = pools.delete("p1").unwrap_err().to_string();
        assert!(e.contains("holds volumes (v)"), "{e}");
        store.delete("v").unwrap();
        drop(store);
        pools.delete("p1").unwrap();
        assert!(matches!(
            pools.get("p1").map(|_| ()),
            Err(PoolsError::NotFound(_))
        ));
        // The devices kept the pool: it opens again; a second create is refused.
        let e = pools
            .create(cfg.clone())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("hold a pool already"), "{e}");
        pools.open_configured(&[cfg]).unwrap();
        assert_eq!(pools.configs()[0].name, "p1");
        pools.delete("p1").unwrap();
        // Another name than the devices hold; a missing device; another size.
        let e = (pools.open_configured(&[local("other", vec![dev.clone()])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"p1\""), "{e}");
        let gone = dir.join("missing");
        let e = (pools.open_configured(&[local("p1", vec![gone.clone()])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&gone.display().to_string()), "{e}");
        std::fs::File::options()
            .write(true)
            .open(&dev)
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        let e = (pools.open_configured(&[local("p1", vec![dev.clone()])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&dev.display().to_string()), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `serve` prints an error with its sources (`{:#}`): a device that
    /// holds no pool is named once, not once per wrapping layer.
    #[test]
    fn an_error_chain_says_each_thing_once() {
        let dir = std::env::temp_dir().join(format!("ff-pools-chain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dev = sparse(&dir, "blank", 64 << 20);
        let e = Pools::default()
            .open_configured(&[local("p1", vec![dev])])
            .unwrap_err();
        let e = crate::reload::ApplyError::from(e);
        let mut chain = e.to_string();
        let mut next = std::error::Error::source(&e);
        while let Some(s) = next {
            chain = format!("{chain}: {s}");
            next = s.source();
        }
        assert_eq!(chain.matches("no valid superblock").count(), 1, "{chain}");
        assert!(chain.starts_with("pool p1: "), "{chain}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
