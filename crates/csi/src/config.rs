//! The controller's configuration file (a ConfigMap in Kubernetes): its
//! client certificate for the targets' management endpoints and the
//! targets, each by name (what StorageClasses say), management address and
//! the NVMe/TCP addresses hosts connect to. docs/management.md,
//! docs/kubernetes.md.

use crate::ids::valid_target_name;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    tls: TlsSection,
    #[serde(rename = "target")]
    targets: Vec<TargetEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSection {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// One target the controller manages.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetEntry {
    name: String,
    management: String,
    #[serde(default)]
    server_name: Option<String>,
    nvme: Vec<String>,
}

impl TargetEntry {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// HOST:PORT of its management endpoint.
    pub fn management(&self) -> &str {
        &self.management
    }
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }
    /// ADDR:PORT of its NVMe/TCP listeners hosts connect to.
    pub fn nvme(&self) -> &[String] {
        &self.nvme
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl ControllerConfig {
    pub fn load(path: &Path) -> Result<ControllerConfig, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        ControllerConfig::from_toml(&text, &p)
    }

    pub fn from_toml(text: &str, path: &str) -> Result<ControllerConfig, ConfigError> {
        let c: ControllerConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
        c.validate().map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(c)
    }

    fn validate(&self) -> Result<(), String> {
        if self.targets.is_empty() {
            return Err("no [[target]]: the controller needs at least one".into());
        }
        for (i, t) in self.targets.iter().enumerate() {
            if !valid_target_name(&t.name) {
                return Err(format!(
                    "target[{i}].name {:?}: want 1-63 characters of [A-Za-z0-9._-]",
                    t.name
                ));
            }
            if self.targets[..i].iter().any(|o| o.name == t.name) {
                return Err(format!("target[{i}].name {:?}: named twice", t.name));
            }
            if !t.management.contains(':') {
                return Err(format!(
                    "target[{i}].management {:?}: want HOST:PORT",
                    t.management
                ));
            }
            if t.nvme.is_empty() {
                return Err(format!(
                    "target[{i}].nvme: at least one ADDR:PORT hosts connect to"
                ));
            }
            for a in &t.nvme {
                if a.parse::<std::net::SocketAddr>().is_err() {
                    return Err(format!("target[{i}].nvme {a:?}: want IP:PORT"));
                }
            }
        }
        Ok(())
    }

    pub fn targets(&self) -> &[TargetEntry] {
        &self.targets
    }

    pub fn target(&self, name: &str) -> Option<&TargetEntry> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The controller's client certificate, key and the CA of the targets.
    pub fn tls_files(&self) -> farflash_mgmt::net::TlsFiles {
        farflash_mgmt::net::TlsFiles::new(&self.tls.cert, &self.tls.key, &self.tls.ca)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[tls]
cert = "/tls/tls.crt"
key = "/tls/tls.key"
ca = "/tls/ca.crt"

[[target]]
name = "target-a"
management = "10.0.0.5:4430"
nvme = ["10.0.0.5:4420"]

[[target]]
name = "target-b"
management = "target-b:4430"
server_name = "target-b"
nvme = ["10.0.0.6:4420", "[fd00::6]:4420"]
"#;

    #[test]
    fn a_good_file_is_read() {
        let c = ControllerConfig::from_toml(GOOD, "c.toml").unwrap();
        assert_eq!(c.targets().len(), 2);
        let b = c.target("target-b").unwrap();
        assert_eq!(b.management(), "target-b:4430");
        assert_eq!(b.server_name(), Some("target-b"));
        assert_eq!(b.nvme().len(), 2);
        assert!(c.target("target-c").is_none());
    }

    #[test]
    fn the_deployed_example_is_read() {
        let yaml = include_str!("../../../deploy/kubernetes/configmap.yaml");
        let (_, block) = yaml.split_once("controller.toml: |\n").unwrap();
        let toml: String = block
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
            .collect();
        let c = ControllerConfig::from_toml(&toml, "configmap.yaml").unwrap();
        assert_eq!(c.targets()[0].name(), "target-a");
    }

    #[test]
    fn errors_name_the_field() {
        let e = |t: &str| {
            ControllerConfig::from_toml(t, "c.toml")
                .unwrap_err()
                .to_string()
        };
        assert!(
            e(&GOOD.replace("name = \"target-b\"", "name = \"target-a\""))
                .contains("target[1].name \"target-a\": named twice")
        );
        assert!(
            e(&GOOD.replace("target-a\"\nmanagement", "a/b\"\nmanagement"))
                .contains("target[0].name \"a/b\"")
        );
        assert!(e(&GOOD.replace("10.0.0.5:4430", "10.0.0.5")).contains("target[0].management"));
        assert!(e(&GOOD.replace("[\"10.0.0.5:4420\"]", "[]")).contains("target[0].nvme"));
        assert!(e(&GOOD.replace("[\"10.0.0.5:4420\"]", "[\"somewhere\"]"))
            .contains("target[0].nvme \"somewhere\""));
        assert!(e(&GOOD.replace("ca = \"/tls/ca.crt\"", "")).contains("ca"));
        assert!(e(&GOOD.replace("[tls]", "[tls]\nport = 1")).contains("port"));
        assert!(e("target = []\n[tls]\ncert='a'\nkey='b'\nca='c'\n").contains("no [[target]]"));
    }
}
