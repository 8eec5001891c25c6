//! What the node service gives the kernel and the commands it runs, built
//! as option strings and argument lists (no shell): the connect options
//! for /dev/nvme-fabrics (where the secrets go: never into an argv),
//! nvme-cli's disconnect, keyctl for the TLS PSK in the kernel keyring,
//! mkfs, mount, and the file systems' growers. Pure functions, so every
//! flag is checked by a unit test.

use std::collections::HashMap;
use zeroize::Zeroizing;

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

    /// The option string written to /dev/nvme-fabrics (the kernel's
    /// `nvmf_parse_options`, drivers/nvme/host/fabrics.c): the same
    /// options `nvme connect` builds, with the secrets in it, so they are
    /// never in a process's argv (/proc/PID/cmdline is world-readable).
    /// Every value is checked not to carry a separator (`,` or a line
    /// break) that would smuggle in another option; errors name the field,
    /// never a secret's value.
    pub fn options(&self, keys: &Keys) -> Result<Zeroizing<String>, String> {
        let tmo = self.ctrl_loss_tmo.as_deref().unwrap_or(CTRL_LOSS_TMO);
        tmo.parse::<i32>().map_err(|_| {
            format!("volume_context.ctrlLossTmo {tmo:?}: want an integer (seconds, -1: for ever)")
        })?;
        let mut o = Zeroizing::new(String::new());
        let mut add = |k: &str, v: &str, field: &str| -> Result<(), String> {
            if v.is_empty()
                || v.contains([',', '\n', '\r', '\0'])
                || v.chars().any(char::is_whitespace)
            {
                return Err(format!("{field}: empty or holds a separator"));
            }
            if !o.is_empty() {
                o.push(',');
            }
            o.push_str(k);
            o.push('=');
            o.push_str(v);
            Ok(())
        };
        add("transport", "tcp", "transport")?;
        add("traddr", &self.addr, "publish_context.paths")?;
        add("trsvcid", &self.port, "publish_context.paths")?;
        add("nqn", &self.nqn, "publish_context.nqn")?;
        add("hostnqn", &self.hostnqn, "hostnqn")?;
        if let Some(id) = &keys.hostid {
            add("hostid", id, "hostid")?;
        }
        add("ctrl_loss_tmo", tmo, "volume_context.ctrlLossTmo")?;
        if let Some(d) = &self.reconnect_delay {
            d.parse::<u32>()
                .map_err(|_| format!("volume_context.reconnectDelay {d:?}: want seconds"))?;
            add("reconnect_delay", d, "volume_context.reconnectDelay")?;
        }
        if let Some(k) = &keys.dhchap_secret {
            check_dhchap(k, crate::params::SECRET_DHCHAP_KEY)?;
            add("dhchap_secret", k, crate::params::SECRET_DHCHAP_KEY)?;
        }
        if let Some(k) = &keys.dhchap_ctrl_secret {
            check_dhchap(k, crate::params::SECRET_DHCHAP_CTRL_KEY)?;
            add(
                "dhchap_ctrl_secret",
                k,
                crate::params::SECRET_DHCHAP_CTRL_KEY,
            )?;
        }
        if self.tls {
            let serial = keys.tls_key.ok_or_else(|| {
                format!(
                    "secret key {}: missing (transport tls)",
                    crate::params::SECRET_TLS_PSK
                )
            })?;
            add("tls_key", &serial.to_string(), "tls_key")?;
            o.push_str(",tls");
        }
        Ok(o)
    }

    /// The target's address (IPv6 without brackets), as sysfs shows it.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The target's port.
    pub fn port(&self) -> &str {
        &self.port
    }

    /// Whether the path is NVMe/TCP over TLS.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// What a log may show of this path.
    pub fn describe(&self) -> String {
        format!("{}:{}", self.addr, self.port)
    }
}

/// The keys of one connect, none of them ever in an argument list.
#[derive(Default)]
pub struct Keys {
    /// The node's host ID (/etc/nvme/hostid, as nvme-cli passes it).
    pub hostid: Option<String>,
    /// DH-HMAC-CHAP: the host's secret (`DHHC-1:..`).
    pub dhchap_secret: Option<Zeroizing<String>>,
    /// DH-HMAC-CHAP, bidirectional: the controller's secret.
    pub dhchap_ctrl_secret: Option<Zeroizing<String>>,
    /// TLS: the serial of the TLS PSK in the `.nvme` keyring.
    pub tls_key: Option<i32>,
}

/// A DH-HMAC-CHAP secret in the representation NVMe Base 2.1 §8.3.5.5.8
/// gives (`DHHC-1:HH:base64:`): nothing else may reach the option string.
fn check_dhchap(k: &str, field: &str) -> Result<(), String> {
    let ok = k.strip_prefix("DHHC-1:").is_some_and(|r| {
        r.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"+/=:".contains(&c))
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "secret key {field}: not a DHHC-1 secret (nvme gen-dhchap-key makes one)"
        ))
    }
}

/// `keyctl padd psk IDENTITY KEYRING`: the TLS PSK (given on standard
/// input, never as an argument) into the kernel keyring `keyring` (the
/// `.nvme` one, by its serial) under its PSK identity, where the Linux
/// host's `tls_key=` and tlshd find it; prints the key's serial.
pub fn psk_add(identity: &str, keyring: &str) -> Vec<String> {
    vec!["padd".into(), "psk".into(), identity.into(), keyring.into()]
}

/// `keyctl unlink KEY KEYRING`.
pub fn key_unlink(key: &str, keyring: &str) -> Vec<String> {
    vec!["unlink".into(), key.into(), keyring.into()]
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

    const DH: &str = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
    const DHC: &str = "DHHC-1:01:cOJT4HP8nJ5vH7ATSpWQW1ZqFcGkuVuBJ+qkBzhc9L3M3Q39:";

    fn keys(dh: Option<&str>, ctrl: Option<&str>, tls: Option<i32>) -> Keys {
        Keys {
            hostid: Some("f81d4fae-7dec-11d0-a765-00a0c91e6bf6".into()),
            dhchap_secret: dh.map(|k| Zeroizing::new(k.to_owned())),
            dhchap_ctrl_secret: ctrl.map(|k| Zeroizing::new(k.to_owned())),
            tls_key: tls,
        }
    }

    #[test]
    fn connect_options_carry_the_path_the_host_and_the_keys() {
        let c = Connect::new(
            "10.0.0.5:4420",
            "nqn.2026-11.io.farflash.csi:fast:pvc-1",
            "nqn.2014-08.org.nvmexpress:uuid:h",
            &ctx(&[("ctrlLossTmo", "-1"), ("reconnectDelay", "2")]),
        )
        .unwrap();
        assert_eq!(
            &c.options(&Keys::default()).unwrap()[..],
            "transport=tcp,traddr=10.0.0.5,trsvcid=4420,\
             nqn=nqn.2026-11.io.farflash.csi:fast:pvc-1,\
             hostnqn=nqn.2014-08.org.nvmexpress:uuid:h,ctrl_loss_tmo=-1,reconnect_delay=2"
        );
        let tls = Connect::new("[fd00::5]:4421", "n", "h", &ctx(&[("transport", "tls")])).unwrap();
        let o = tls.options(&keys(Some(DH), Some(DHC), Some(912))).unwrap();
        assert_eq!(
            &o[..],
            format!(
                "transport=tcp,traddr=fd00::5,trsvcid=4421,nqn=n,hostnqn=h,\
                 hostid=f81d4fae-7dec-11d0-a765-00a0c91e6bf6,ctrl_loss_tmo=600,\
                 dhchap_secret={DH},dhchap_ctrl_secret={DHC},tls_key=912,tls"
            )
        );
        assert_eq!(tls.describe(), "fd00::5:4421");
        // TLS without its key in the keyring is refused, naming the secret key.
        assert!(tls
            .options(&Keys::default())
            .unwrap_err()
            .contains("tlsPsk"));
        assert!(Connect::new("target-a:4420", "n", "h", &HashMap::new())
            .unwrap_err()
            .contains("IP:PORT"));
    }

    #[test]
    fn connect_options_refuse_smuggled_options_without_echoing_secrets() {
        let c = Connect::new("10.0.0.5:4420", "n", "h", &HashMap::new()).unwrap();
        let bad = "DHHC-1:00:abc,nqn=other:";
        let e = c.options(&keys(Some(bad), None, None)).unwrap_err();
        assert!(e.contains("dhchapKey") && !e.contains("abc"), "{e}");
        let e = c.options(&keys(None, Some("plain"), None)).unwrap_err();
        assert!(e.contains("dhchapCtrlKey") && !e.contains("plain"), "{e}");
        let nqn = Connect::new("10.0.0.5:4420", "n,hostnqn=x", "h", &HashMap::new()).unwrap();
        assert!(nqn
            .options(&Keys::default())
            .unwrap_err()
            .contains("publish_context.nqn"));
        let tmo =
            Connect::new("10.0.0.5:4420", "n", "h", &ctx(&[("ctrlLossTmo", "5,tls")])).unwrap();
        assert!(tmo
            .options(&Keys::default())
            .unwrap_err()
            .contains("ctrlLossTmo"));
        let delay =
            Connect::new("10.0.0.5:4420", "n", "h", &ctx(&[("reconnectDelay", "x")])).unwrap();
        assert!(delay
            .options(&Keys::default())
            .unwrap_err()
            .contains("reconnectDelay"));
    }

    /// Every argument list the node runs for a volume with keys: none holds
    /// a secret (the secrets go to /dev/nvme-fabrics and keyctl's stdin).
    #[test]
    fn no_argument_list_holds_a_secret() {
        let psk = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let identity = "NVMe1R01 h n digest=";
        let lists = [
            psk_add(identity, "0x2a"),
            key_unlink("0x51", "0x2a"),
            disconnect("n"),
            mount("ext4", &[], "/dev/nvme0n1", "/s"),
        ];
        for a in &lists {
            for arg in a {
                for secret in [DH, DHC, psk, "VRLbtnN9AQb2", "ia6zGodOr4"] {
                    assert!(!arg.contains(secret), "{arg:?} holds a secret");
                }
            }
        }
        assert_eq!(psk_add(identity, "0x2a"), ["padd", "psk", identity, "0x2a"]);
        // And the options do hold them: they are where the keys go.
        let c = Connect::new("10.0.0.5:4420", "n", "h", &HashMap::new()).unwrap();
        assert!(c.options(&keys(Some(DH), None, None)).unwrap().contains(DH));
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
        assert_eq!(key_unlink("7", "0x2a"), ["unlink", "7", "0x2a"]);
    }
}
