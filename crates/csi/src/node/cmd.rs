//! The commands the node service runs, built as argument lists (no shell):
//! nvme-cli's connect and disconnect with the kernel host, the TLS key
//! into the kernel keyring, mkfs, mount, and the file systems' growers.
//! Pure functions, so every flag is checked by a unit test.

use std::collections::HashMap;

/// How the node connects to one path of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    addr: String,
    port: String,
    nqn: String,
    hostnqn: String,
    tls: bool,
    ctrl_loss_tmo: Option<String>,
    reconnect_delay: Option<String>,
}

/// Default seconds the kernel keeps retrying a lost controller before it
/// gives the path up (Linux's own default is 600).
pub const CTRL_LOSS_TMO: &str = "600";

impl Connect {
    /// `path`: IP:PORT (IPv6 as `[ADDR]:PORT`); `context`: the volume
    /// context (ctrlLossTmo, reconnectDelay, transport).
    pub fn new(
        path: &str,
        nqn: &str,
        hostnqn: &str,
        context: &HashMap<String, String>,
    ) -> Result<Connect, String> {
        let sa: std::net::SocketAddr = path
            .parse()
            .map_err(|_| format!("path {path:?}: want IP:PORT"))?;
        Ok(Connect {
            addr: sa.ip().to_string(),
            port: sa.port().to_string(),
            nqn: nqn.to_owned(),
            hostnqn: hostnqn.to_owned(),
            tls: context.get("transport").is_some_and(|t| t == "tls"),
            ctrl_loss_tmo: context.get("ctrlLossTmo").cloned(),
            reconnect_delay: context.get("reconnectDelay").cloned(),
        })
    }

    /// `nvme connect ...`: the secrets are passed as nvme-cli takes them
    /// (its arguments); the caller never logs the list.
    pub fn args(&self, secrets: &HashMap<String, String>) -> Vec<String> {
        let mut a: Vec<String> = [
            "connect",
            "--transport=tcp",
            &format!("--traddr={}", self.addr),
            &format!("--trsvcid={}", self.port),
            &format!("--nqn={}", self.nqn),
            &format!("--hostnqn={}", self.hostnqn),
            &format!(
                "--ctrl-loss-tmo={}",
                self.ctrl_loss_tmo.as_deref().unwrap_or(CTRL_LOSS_TMO)
            ),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(d) = &self.reconnect_delay {
            a.push(format!("--reconnect-delay={d}"));
        }
        if let Some(k) = secrets.get(crate::params::SECRET_DHCHAP_KEY) {
            a.push(format!("--dhchap-secret={k}"));
        }
        if let Some(k) = secrets.get(crate::params::SECRET_DHCHAP_CTRL_KEY) {
            a.push(format!("--dhchap-ctrl-secret={k}"));
        }
        if self.tls {
            a.push("--tls".into());
        }
        a
    }

    /// What a log may show of this path.
    pub fn describe(&self) -> String {
        format!("{}:{}", self.addr, self.port)
    }
}

/// `nvme check-tls-key --insert`: the PSK into the kernel's `.nvme`
/// keyring for this host and subsystem (nvme-cli 2.4 and later), before a
/// `--tls` connect.
pub fn tls_key_insert(key: &str, hostnqn: &str, nqn: &str) -> Vec<String> {
    vec![
        "check-tls-key".into(),
        "--insert".into(),
        format!("--keydata={key}"),
        format!("--hostnqn={hostnqn}"),
        format!("--subsysnqn={nqn}"),
    ]
}

/// `nvme disconnect --nqn`: every path of the subsystem.
pub fn disconnect(nqn: &str) -> Vec<String> {
    vec!["disconnect".into(), format!("--nqn={nqn}")]
}

/// mkfs for an empty device.
pub fn mkfs(fs: &str, dev: &str) -> Result<(String, Vec<String>), String> {
    match fs {
        "ext4" => Ok((
            "mkfs.ext4".into(),
            vec![
                "-F".into(),
                "-m0".into(),
                "-E".into(),
                "nodiscard".into(),
                dev.into(),
            ],
        )),
        "xfs" => Ok(("mkfs.xfs".into(), vec!["-K".into(), dev.into()])),
        _ => Err(format!("fs_type {fs:?}: not supported (ext4 or xfs)")),
    }
}

/// `mount -t FS -o OPTS DEV DIR` (OPTS may be empty).
pub fn mount(fs: &str, opts: &[String], dev: &str, dir: &str) -> Vec<String> {
    let mut a = vec!["-t".to_owned(), fs.to_owned()];
    if !opts.is_empty() {
        a.push("-o".into());
        a.push(opts.join(","));
    }
    a.push(dev.into());
    a.push(dir.into());
    a
}

/// A bind mount of `from` on `to`, read-only when asked (a bind mount
/// takes `ro` only on a remount, so it is two commands).
pub fn bind(from: &str, to: &str, readonly: bool) -> Vec<Vec<String>> {
    let mut v = vec![vec!["--bind".to_owned(), from.to_owned(), to.to_owned()]];
    if readonly {
        v.push(vec!["-o".into(), "remount,bind,ro".into(), to.to_owned()]);
    }
    v
}

/// The command that grows a mounted file system to its device.
pub fn grow(fs: &str, dev: &str, dir: &str) -> Result<(String, Vec<String>), String> {
    match fs {
        "ext4" => Ok(("resize2fs".into(), vec![dev.into()])),
        "xfs" => Ok(("xfs_growfs".into(), vec![dir.into()])),
        _ => Err(format!("file system {fs:?}: cannot grow it (ext4 or xfs)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn connect_carries_the_path_the_host_and_the_keys() {
        let c = Connect::new(
            "10.0.0.5:4420",
            "nqn.2026-11.io.farflash.csi:fast:pvc-1",
            "nqn.2014-08.org.nvmexpress:uuid:h",
            &ctx(&[("ctrlLossTmo", "-1"), ("reconnectDelay", "2")]),
        )
        .unwrap();
        assert_eq!(
            c.args(&HashMap::new()),
            [
                "connect",
                "--transport=tcp",
                "--traddr=10.0.0.5",
                "--trsvcid=4420",
                "--nqn=nqn.2026-11.io.farflash.csi:fast:pvc-1",
                "--hostnqn=nqn.2014-08.org.nvmexpress:uuid:h",
                "--ctrl-loss-tmo=-1",
                "--reconnect-delay=2",
            ]
        );
        let tls = Connect::new("[fd00::5]:4421", "n", "h", &ctx(&[("transport", "tls")])).unwrap();
        let keys = ctx(&[
            ("dhchapKey", "DHHC-1:00:k:"),
            ("dhchapCtrlKey", "DHHC-1:00:c:"),
        ]);
        let a = tls.args(&keys);
        assert!(
            a.contains(&"--traddr=fd00::5".to_string())
                && a.contains(&"--trsvcid=4421".to_string())
        );
        assert!(a.contains(&"--ctrl-loss-tmo=600".to_string()));
        assert!(a.contains(&"--dhchap-secret=DHHC-1:00:k:".to_string()));
        assert!(a.contains(&"--dhchap-ctrl-secret=DHHC-1:00:c:".to_string()));
        assert_eq!(a.last().unwrap(), "--tls");
        assert_eq!(tls.describe(), "fd00::5:4421");
        assert!(Connect::new("target-a:4420", "n", "h", &HashMap::new())
            .unwrap_err()
            .contains("IP:PORT"));
    }

    #[test]
    fn file_system_commands() {
        assert_eq!(
            mkfs("xfs", "/dev/nvme0n1").unwrap(),
            ("mkfs.xfs".into(), vec!["-K".into(), "/dev/nvme0n1".into()])
        );
        assert_eq!(mkfs("ext4", "/dev/x").unwrap().0, "mkfs.ext4");
        assert!(mkfs("btrfs", "/dev/x").unwrap_err().contains("btrfs"));
        assert_eq!(
            mount("ext4", &[], "/dev/x", "/s"),
            ["-t", "ext4", "/dev/x", "/s"]
        );
        assert_eq!(
            mount("xfs", &["noatime".into(), "nouuid".into()], "/dev/x", "/s"),
            ["-t", "xfs", "-o", "noatime,nouuid", "/dev/x", "/s"]
        );
        assert_eq!(bind("/s", "/p", false), [vec!["--bind", "/s", "/p"]]);
        assert_eq!(bind("/s", "/p", true)[1], ["-o", "remount,bind,ro", "/p"]);
        assert_eq!(
            grow("ext4", "/dev/x", "/s").unwrap(),
            ("resize2fs".into(), vec!["/dev/x".into()])
        );
        assert_eq!(
            grow("xfs", "/dev/x", "/s").unwrap(),
            ("xfs_growfs".into(), vec!["/s".into()])
        );
        assert_eq!(disconnect("n"), ["disconnect", "--nqn=n"]);
        assert_eq!(tls_key_insert("K", "h", "n")[2], "--keydata=K");
    }
}
