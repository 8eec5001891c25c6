//! `farflash gen-tls-key` and `farflash check-tls-key`: nvme-cli 2.13's
//! commands of the same names (options and output); the logic is
//! `farflash_tls::keytool`'s, which documents the differences.

use anyhow::anyhow;
use farflash_tls::keytool::{self, CheckTlsKey, GenTlsKey, NVME_CLI_2_13};
use farflash_tls::Derivation;

pub fn derivation(name: &str) -> Result<Derivation, String> {
    Derivation::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Derivation::ALL.iter().map(|d| d.name()).collect();
        format!("one of {} (or spdk, compat)", names.join(", "))
    })
}

/// Options nvme-cli has that mean nothing here (the kernel keyring, its
/// output formats); accepted so that nvme-cli command lines run unchanged.
#[derive(clap::Args, Debug, Default)]
pub struct Ignored {
    /// Keyring for the retained key (nvme-cli; farflash has no keyring: ignored).
    #[arg(short = 'k', long = "keyring", default_value = ".nvme")]
    pub keyring: String,
    /// Key type of the retained key (nvme-cli; ignored).
    #[arg(short = 't', long = "keytype", default_value = "psk")]
    pub keytype: String,
    /// Output format (nvme-cli; these commands print plain text: ignored).
    #[arg(short = 'o', long = "output-format", default_value = "normal")]
    pub output_format: String,
    /// Increase output verbosity (nvme-cli; ignored).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The options both commands take: whose key, which identity, where it
/// goes, which derivation.
#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    /// Host NQN for the retained key (default: $LIBNVME_HOSTNQN or /etc/nvme/hostnqn).
    #[arg(short = 'n', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// Subsystem NQN for the retained key.
    #[arg(short = 'c', long = "subsysnqn")]
    pub subsysnqn: Option<String>,
    /// TLS identity version to use (0 = NVMe TCP 1.0c, 1 = NVMe TCP 2.0).
    #[arg(short = 'I', long = "identity", default_value_t = 0)]
    pub identity: u8,
    /// Append the derived TLS PSK and its identity to --keyfile (farflash has no kernel keyring).
    #[arg(short = 'i', long = "insert")]
    pub insert: bool,
    /// Update key file with the derived TLS PSK (with --insert).
    #[arg(short = 'f', long = "keyfile")]
    pub keyfile: Option<std::path::PathBuf>,
    /// Use the non-RFC 8446 derivation of older implementations (nvme-cli 2.16's flag; nvme-cli 2.13's default).
    #[arg(short = 'C', long = "compat", conflicts_with = "derivation")]
    pub compat: bool,
    /// Derivation of the retained and TLS PSKs: rfc8446 (SPDK, nvme-cli >= 2.16), libnvme-1.10 (nvme-cli 2.10-2.15, the default), ...
    #[arg(long = "derivation", value_parser = derivation)]
    pub derivation: Option<Derivation>,
    #[command(flatten)]
    pub ignored: Ignored,
}

#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// Optional secret (in hexadecimal characters) to be used for the TLS key.
    #[arg(short = 's', long = "secret")]
    pub secret: Option<String>,
    /// HMAC function to use for the retained key (1 = SHA-256, 2 = SHA-384).
    #[arg(short = 'm', long = "hmac", default_value_t = 1)]
    pub hmac: u8,
    #[command(flatten)]
    pub key: KeyArgs,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// TLS key (in PSK Interchange format) to be validated.
    #[arg(short = 'd', long = "keydata")]
    pub keydata: Option<String>,
    #[command(flatten)]
    pub key: KeyArgs,
}

fn print(out: keytool::Output) {
    eprint!("{}", out.stderr);
    print!("{}", &out.stdout[..]);
}

pub fn run_gen(a: GenArgs) -> anyhow::Result<()> {
    let opts = GenTlsKey {
        secret: a.secret,
        hmac: a.hmac,
        identity: a.key.identity,
        hostnqn: a.key.hostnqn,
        subsysnqn: a.key.subsysnqn,
        insert: a.key.insert,
        keyfile: a.key.keyfile,
        derivation: a.key.derivation.unwrap_or(NVME_CLI_2_13),
    };
    let out = keytool::gen_tls_key(&opts, &mut keytool::os_random, &keytool::default_hostnqn)
        .map_err(|e| anyhow!(e))?;
    print(out);
    Ok(())
}

pub fn run_check(a: CheckArgs) -> anyhow::Result<()> {
    let opts = CheckTlsKey {
        keydata: a.keydata,
        identity: a.key.identity,
        hostnqn: a.key.hostnqn,
        subsysnqn: a.key.subsysnqn,
        insert: a.key.insert,
        keyfile: a.key.keyfile,
        derivation: a.key.derivation.unwrap_or(NVME_CLI_2_13),
    };
    let out = keytool::check_tls_key(&opts, &keytool::default_hostnqn).map_err(|e| anyhow!(e))?;
    print(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser, Debug)]
    enum Cmd {
        GenTlsKey(super::GenArgs),
        CheckTlsKey(super::CheckArgs),
    }

    #[test]
    fn nvme_cli_command_lines_parse() {
        let Cmd::GenTlsKey(g) = Cmd::try_parse_from([
            "x",
            "gen-tls-key",
            "-n",
            "h",
            "-c",
            "s",
            "-m",
            "2",
            "-I",
            "1",
            "-i",
            "-f",
            "/tmp/k",
            "-k",
            ".nvme",
            "-t",
            "psk",
            "-o",
            "json",
            "-v",
            "-s",
            "00",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!((g.hmac, g.key.identity, g.key.insert), (2, 1, true));
        assert_eq!(g.key.hostnqn.as_deref(), Some("h"));
        assert_eq!(g.key.subsysnqn.as_deref(), Some("s"));
        let Cmd::CheckTlsKey(c) = Cmd::try_parse_from([
            "x",
            "check-tls-key",
            "--keydata=NVMeTLSkey-1:01:x:",
            "--identity=1",
            "--subsysnqn=s",
            "--derivation=rfc8446",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.key.derivation, Some(farflash_tls::Derivation::Rfc8446));
        assert!(
            Cmd::try_parse_from(["x", "check-tls-key", "-C", "--derivation", "rfc8446"]).is_err()
        );
        assert!(Cmd::try_parse_from(["x", "check-tls-key", "--derivation", "nope"]).is_err());
    }
}
