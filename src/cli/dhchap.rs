//! `farflash gen-dhchap-key` and `farflash check-dhchap-key`: nvme-cli's
//! commands of the same names (options, output and checks as nvme-cli 2.3
//! in Debian 12), on `farflash_auth::Secret`. Unlike nvme-cli, no error
//! text repeats the secret or key it refuses.

use anyhow::{bail, Context};
use farflash_auth::{HashId, OsRandom, Random, Secret};
use zeroize::Zeroizing;

/// Where nvme-cli (libnvme) keeps the host NQN.
const HOSTNQN_FILE: &str = "/etc/nvme/hostnqn";

#[derive(clap::Args, Debug, Default)]
pub struct GenArgs {
    /// Optional secret (in hexadecimal characters) to be used to initialize the host key.
    #[arg(short = 's', long = "secret")]
    pub secret: Option<String>,
    /// Length of the resulting key (32, 48, or 64 bytes).
    #[arg(short = 'l', long = "key-length", default_value_t = 0)]
    pub key_length: u32,
    /// Host NQN to use for key transformation (default: /etc/nvme/hostnqn).
    #[arg(short = 'n', long = "nqn")]
    pub nqn: Option<String>,
    /// HMAC function to use for key transformation (0 = none, 1 = SHA-256, 2 = SHA-384, 3 = SHA-512).
    #[arg(short = 'm', long = "hmac", default_value_t = 0)]
    pub hmac: u32,
}

#[derive(clap::Args, Debug, Default)]
pub struct CheckArgs {
    /// DH-HMAC-CHAP key (DHHC-1:0X:<base64>:) to be validated.
    #[arg(short = 'k', long = "key")]
    pub key: String,
}

fn hmac_of(id: u32) -> anyhow::Result<Option<HashId>> {
    match id {
        0 => Ok(None),
        1..=3 => Ok(HashId::from_id(id as u8)),
        _ => bail!("Invalid HMAC identifier {id}"),
    }
}

fn hex_key(s: &str) -> anyhow::Result<Zeroizing<Vec<u8>>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        bail!("Invalid secret (not an even number of hexadecimal characters)");
    }
    let mut out = Zeroizing::new(Vec::with_capacity(b.len() / 2));
    for pair in b.chunks(2) {
        let digit = |c: u8| (c as char).to_digit(16);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
            _ => bail!("Invalid secret (not hexadecimal)"),
        }
    }
    Ok(out)
}

/// The key `gen-dhchap-key` prints, as a string (tests call this).
pub fn generate(args: &GenArgs, rng: &mut dyn Random) -> anyhow::Result<Zeroizing<String>> {
    let hmac = hmac_of(args.hmac)?;
    let len = match (args.key_length, hmac) {
        (0, Some(h)) => h.output_len(),
        (0, None) => 32,
        (l @ (32 | 48 | 64), None) => l as usize,
        (l, Some(h)) if l as usize == h.output_len() => l as usize,
        (l, Some(h)) => bail!("Invalid key length {l} for SHA({})", h.output_len() * 8),
        (l, None) => bail!("Invalid key length {l}"),
    };
    let raw = match &args.secret {
        Some(s) => {
            let k = hex_key(s)?;
            if k.len() != len {
                bail!("Invalid key length ({} bytes)", k.len());
            }
            k
        }
        None => {
            let mut k = Zeroizing::new(vec![0u8; len]);
            rng.fill(&mut k);
            k
        }
    };
    let key = match hmac {
        None => Secret::new(&raw, None)?,
        Some(h) => {
            let nqn = match &args.nqn {
                Some(n) => n.clone(),
                None => std::fs::read_to_string(HOSTNQN_FILE)
                    .map(|s| s.trim().to_string())
                    .ok()
                    .filter(|s| !s.is_empty())
                    .context("Could not read host NQN")?,
            };
            let transformed = Secret::new(&raw, Some(h))?.transform(&nqn);
            Secret::new(&transformed, Some(h))?
        }
    };
    Ok(key.to_dhhc())
}

/// The line `check-dhchap-key` prints for a usable key.
pub fn check(key: &str) -> anyhow::Result<String> {
    let s = Secret::parse(key)?;
    if let Some(h) = s.hmac() {
        if s.len() != h.output_len() {
            bail!("Invalid key length for SHA({})", h.output_len() * 8);
        }
    }
    Ok(format!(
        "Key is valid (HMAC {}, length {}, CRC {:08x})",
        s.hmac().map_or(0, HashId::id),
        s.len(),
        s.crc()
    ))
}

pub fn run_gen(args: GenArgs) -> anyhow::Result<()> {
    println!("{}", &*generate(&args, &mut OsRandom)?);
    Ok(())
}

pub fn run_check(args: CheckArgs) -> anyhow::Result<()> {
    println!("{}", check(&args.key)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn gen(secret: Option<&str>, l: u32, m: u32) -> anyhow::Result<Zeroizing<String>> {
        let a = GenArgs {
            secret: secret.map(str::to_string),
            key_length: l,
            nqn: Some("nqn.2014-08.org.example:host1".into()),
            hmac: m,
        };
        generate(&a, &mut OsRandom)
    }

    #[test]
    fn matches_nvme_cli_outputs() {
        // nvme-cli 2.3 output for the same options.
        let k = gen(Some(S), 0, 0).unwrap();
        assert_eq!(
            &k[..],
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
        );
        let k = gen(Some(&S.to_uppercase()), 32, 1).unwrap();
        assert_eq!(
            &k[..],
            "DHHC-1:01:1wWhDeGRxTcjvLIclMHvVmyLF4rH+aG7AtuOoUZmKwLX2OkT:"
        );
        assert_eq!(
            check(&k).unwrap(),
            "Key is valid (HMAC 1, length 32, CRC 13e9d8d7)"
        );
        for (l, m) in [(0, 2), (48, 0), (64, 3), (0, 0)] {
            check(&gen(None, l, m).unwrap()).unwrap();
        }
    }

    #[test]
    fn refusals_like_nvme_cli_without_the_secret() {
        let e = |r: anyhow::Result<Zeroizing<String>>| r.unwrap_err().to_string();
        assert_eq!(e(gen(None, 0, 4)), "Invalid HMAC identifier 4");
        assert_eq!(e(gen(None, 40, 0)), "Invalid key length 40");
        assert_eq!(e(gen(None, 64, 1)), "Invalid key length 64 for SHA(256)");
        assert_eq!(e(gen(Some(S), 0, 2)), "Invalid key length (32 bytes)");
        assert!(!e(gen(Some(&format!("zz{S}")), 0, 0)).contains(S));
        assert!(check("DHHC-1:03:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:").is_err());
        let bad = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaS:";
        assert!(!check(bad).unwrap_err().to_string().contains("AAECAw"));
    }
}
