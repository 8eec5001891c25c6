//! Configuration files: read here, parsed and checked by the command
//! layer's [`Config::from_toml`].

use farflash_core::config::{Config, ConfigError};
use std::path::Path;

/// Reads and parses the configuration file at `path`, and the TLS key
/// files it names.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let p = path.display().to_string();
    // Inline secrets (dhchap_key, tls_key) are in the text: zeroized
    // when it goes.
    let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|source| {
        ConfigError::Read {
            path: p.clone(),
            source,
        }
    })?);
    from_toml(&text, &p)
}

/// Parses configuration `text` (`name` in messages) and reads the TLS key
/// files it names.
pub fn from_toml(text: &str, name: &str) -> Result<Config, ConfigError> {
    let mut cfg = Config::from_toml(text, name)?;
    crate::key_files::read_all(&mut cfg)?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let p = std::env::temp_dir().join(format!("ff-no-config-{}.toml", std::process::id()));
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
    }
}
