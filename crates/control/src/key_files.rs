//! TLS PSK files (`tls_key` naming a file, NVMe/TCP 1.0 §3.6.1.5): read
//! here, parsed by the command layer ([`TlsKey::load`]). Like SPDK, a file
//! others may read or write is refused.

use farflash_core::config::{Config, ConfigError};
use farflash_core::tls_key::TlsKey;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use zeroize::Zeroizing;

/// Reads `key`'s file when it names one not read yet. Errors name the
/// file, never the key.
pub fn read(key: &mut TlsKey) -> Result<(), String> {
    let Some(path) = key.unread_file() else {
        return Ok(());
    };
    let text = read_private(path)?;
    key.load(&text)
}

/// Reads every key file `cfg`'s hosts name.
pub fn read_all(cfg: &mut Config) -> Result<(), ConfigError> {
    for s in &mut cfg.subsystems {
        for h in &mut s.hosts {
            if let Some(k) = &mut h.tls_key {
                read(k)
                    .map_err(|e| ConfigError::Invalid(format!("{}: host {}: {e}", s.nqn, h.nqn)))?;
            }
        }
    }
    Ok(())
}

/// The text of the key file at `path`: a regular file, private to its
/// owner, at most [`TlsKey::MAX_FILE`] bytes.
fn read_private(path: &Path) -> Result<Zeroizing<String>, String> {
    let name = path.display();
    let f = std::fs::File::open(path).map_err(|e| format!("tls_key file {name}: {e}"))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("tls_key file {name}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("tls_key file {name}: not a regular file"));
    }
    // SPDK (`nvmf_tcp_subsystem_add_host`, lib/nvmf/tcp.c before keyrings)
    // refuses a PSK file with group or other permissions; so does this.
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "tls_key file {name}: readable or writable by others (mode {:o}); chmod 600",
            meta.permissions().mode() & 0o777
        ));
    }
    let mut text = Zeroizing::new(String::new());
    f.take(TlsKey::MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("tls_key file {name}: {e}"))?;
    if text.len() as u64 > TlsKey::MAX_FILE {
        return Err(format!(
            "tls_key file {name}: longer than {} bytes",
            TlsKey::MAX_FILE
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

    #[test]
    fn key_files_must_be_private() {
        let dir = std::env::temp_dir().join(format!("ff-tlskey-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("psk");
        std::fs::write(&p, format!("{KEY}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut k = TlsKey::parse(p.to_str().unwrap()).unwrap();
        let e = read(&mut k).unwrap_err();
        assert!(e.contains("chmod 600"), "{e}");
        assert!(k.key().is_none());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        read(&mut k).unwrap();
        assert_eq!(k.path(), Some(p.as_path()));
        assert!(k.key() == TlsKey::parse(KEY).unwrap().key());
        let mut none = TlsKey::parse(dir.join("none").to_str().unwrap()).unwrap();
        let e = read(&mut none).unwrap_err();
        assert!(e.contains("tls_key file"), "{e}");
        std::fs::write(&p, "x".repeat(5000)).unwrap();
        let mut long = TlsKey::parse(p.to_str().unwrap()).unwrap();
        assert!(read(&mut long).unwrap_err().contains("longer than"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
