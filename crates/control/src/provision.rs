//! Opening what the command layer's subsystems need from the world:
//! backends (RAM, null, file/block, Ceph RBD) and PTPL files. The command
//! layer builds subsystems and namespaces (`farflash_core::subsystem`)
//! through [`Provision`], implemented here by [`System`].

use farflash_backend::{
    open_file, open_null, open_ram, open_ram_committed, open_rbd, FileOptions, RbdOptions,
    SharedBackend,
};
use farflash_core::config::{split_volume, BackendKind, NamespaceConfig, SubsystemConfig};
use farflash_core::resv::ptpl::PtplFile;
use farflash_core::subsystem::{human, BuildError, Namespace, Provision, Subsystem};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The real world: backends opened as configured, PTPL files on disk.
#[derive(Clone, Copy, Debug, Default)]
pub struct System;

impl Provision for System {
    fn open_backend(
        &self,
        nqn: &str,
        nc: &NamespaceConfig,
        nsid: u32,
    ) -> Result<(SharedBackend, String), BuildError> {
        let bs = nc.block_size.unwrap_or(512);
        let size = nc.size.map(|s| s.0);
        let err = |what: &str, cause| BuildError::Backend {
            nqn: nqn.to_owned(),
            nsid,
            what: what.to_owned(),
            cause,
        };
        let (backend, describe) = match nc.backend {
            BackendKind::Ram => {
                let sz = size.unwrap_or(0);
                // Lazily committed (pages on first write), so that a first run
                // on a small machine does not take the whole namespace's memory;
                // `commit = true` (serve --ram-commit) faults it all in up front,
                // as SPDK's malloc bdev, when it fits in half of MemAvailable.
                let fits = || mem_available().is_some_and(|avail| sz <= avail / 2);
                let commit = nc.commit && fits();
                if nc.commit && !commit {
                    tracing::warn!(
                        nqn,
                        nsid,
                        size = sz,
                        "RAM namespace not committed up front: more than half of MemAvailable"
                    );
                }
                let open = if commit { open_ram_committed } else { open_ram };
                (
                    open(sz, bs).map_err(|e| err("RAM backend", e))?,
                    format!(
                        "ram {}{}",
                        human(sz),
                        if commit { " (committed)" } else { "" }
                    ),
                )
            }
            BackendKind::Null => {
                let sz = size.unwrap_or(0);
                (
                    open_null(sz, bs).map_err(|e| err("null backend", e))?,
                    format!("null {}", human(sz)),
                )
            }
            BackendKind::File => {
                let path = nc.path.clone().unwrap_or_default();
                let opts = FileOptions {
                    block_size: bs,
                    create_size: size,
                    ..FileOptions::default()
                };
                let b = open_file(&path, &opts)
                    .map_err(|e| err(&format!("file {}", path.display()), e))?;
                let d = format!("{} {} ({})", b.kind(), path.display(), human(b.capacity()));
                (b, d)
            }
            BackendKind::Rbd => {
                let Some(r) = &nc.rbd else {
                    return Err(BuildError::Invalid {
                        nqn: nqn.to_owned(),
                        nsid,
                        msg: "rbd namespace without an rbd table".into(),
                    });
                };
                let opts = RbdOptions {
                    pool: r.pool.clone(),
                    image: r.image.clone(),
                    conf: r.conf.clone(),
                    id: r.id.clone(),
                    keyring: r.keyring.clone(),
                    block_size: bs,
                };
                let name = format!("rbd {}/{}", r.pool, r.image);
                let b = open_rbd(&opts).map_err(|e| err(&name, e))?;
                let d = format!("{name} ({})", human(b.capacity()));
                (b, d)
            }
            BackendKind::Volume => open_volume(nqn, nc, nsid)?,
        };

        Ok((backend, describe))
    }

    fn ptpl_file(&self, path: &Path) -> Arc<dyn PtplFile> {
        Arc::new(DiskPtpl(path.to_owned()))
    }
}

/// Exports the volume `nc.volume` (`POOL/NAME`) of an open pool
/// ([`crate::pools`]); it counts as exported while the backend lives.
fn open_volume(
    nqn: &str,
    nc: &NamespaceConfig,
    nsid: u32,
) -> Result<(SharedBackend, String), BuildError> {
    let invalid = |msg: String| BuildError::Invalid {
        nqn: nqn.to_owned(),
        nsid,
        msg,
    };
    let v = nc.volume.as_deref().unwrap_or_default();
    let (pool, name) = split_volume(v).map_err(invalid)?;
    let store = crate::pools::registry()
        .get(pool)
        .map_err(|e| invalid(format!("volume {v}: {e}")))?;
    let b = store
        .open(name)
        .map_err(|e| invalid(format!("volume {v}: {e}")))?;
    let d = format!("volume {v} ({})", human(b.capacity()));
    Ok((b, d))
}

/// Opens one subsystem's backends.
pub fn build_subsystem(sc: &SubsystemConfig, index: u8) -> Result<Arc<Subsystem>, BuildError> {
    farflash_core::subsystem::build_subsystem(sc, index, &System)
}

/// Builds a subsystem's namespaces, reusing those of `current` whose
/// configuration and NSID are unchanged.
pub fn build_namespaces(
    sc: &SubsystemConfig,
    current: &[Arc<Namespace>],
) -> Result<Vec<Arc<Namespace>>, BuildError> {
    farflash_core::subsystem::build_namespaces(sc, current, &System)
}

/// A PTPL file on disk (`farflash_core::resv::ptpl`): written to a
/// temporary file, fsync, rename, fsync of the directory.
#[derive(Debug)]
struct DiskPtpl(PathBuf);

impl PtplFile for DiskPtpl {
    fn path(&self) -> &Path {
        &self.0
    }

    fn read(&self) -> std::io::Result<Option<Vec<u8>>> {
        match std::fs::read(&self.0) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write(&self, data: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let path = &self.0;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        std::fs::File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
    }
}

/// MemAvailable of /proc/meminfo in bytes (None where it cannot be read).
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_core::resv::ptpl::{encode, load, PtplWrite};
    use farflash_core::resv::Reservations;
    use std::sync::Mutex;

    #[test]
    fn ram_is_committed_only_when_asked() {
        let mut nc = NamespaceConfig::sized(BackendKind::Ram, 4 << 20);
        let lazy = farflash_core::subsystem::build_namespace("nqn.t", &nc, 1, &System).unwrap();
        assert_eq!(lazy.describe, "ram 4M");
        nc.commit = true;
        let committed =
            farflash_core::subsystem::build_namespace("nqn.t", &nc, 1, &System).unwrap();
        assert_eq!(committed.describe, "ram 4M (committed)");
    }

    #[test]
    fn ptpl_files_missing_corrupt_and_written() {
        let dir = std::env::temp_dir().join(format!("farflash-ptpl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("ns1.ptpl");
        let _ = std::fs::remove_file(&f);
        let file = System.ptpl_file(&f);
        assert_eq!(
            load(&*file),
            Ok(Reservations::default()),
            "missing: clean state"
        );
        let r = Reservations {
            ptpl: true,
            ..Reservations::default()
        };
        let w = PtplWrite {
            file: file.clone(),
            seq: 1,
            data: encode(&r),
            written: Arc::new(Mutex::new(0)),
        };
        w.run().unwrap();
        assert!(!dir.join("ns1.ptpl.tmp").exists(), "renamed into place");
        assert_eq!(load(&*file), Ok(r));
        std::fs::write(&f, b"FFPTPL garbage").unwrap();
        let e = load(&*file).unwrap_err();
        assert!(e.contains("ns1.ptpl"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
