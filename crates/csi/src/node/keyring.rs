//! The TLS PSKs of staged volumes in the kernel's `.nvme` keyring
//! (nvme-keyring, Linux 6.7+), where the Linux host's `tls_key=` option
//! and tlshd take them from. The node derives the TLS PSK from the
//! node-stage secret's configured PSK as Debian 13's nvme-cli 2.13 does
//! (`check-tls-key --insert --identity=1`: libnvme 1.10's layout, which a
//! farflash target accepts by default) and hands it to `keyctl` on
//! standard input: no key is ever in an argument list.

use super::cmd;
use super::sys::{self, run, run_input};
use super::CONNECT_LIMIT;
use crate::params::SECRET_TLS_PSK;
use farflash_psk::{ConfiguredPsk, Derivation, IdentityVersion};
use tonic::Status;

/// NVMe TCP 1.0 §3.6.1.3 (TP 8018): version 1 identities carry a digest of
/// the retained PSK, so a target that accepts several derivations picks
/// the right one.
const IDENTITY: IdentityVersion = IdentityVersion::V1;
/// nvme-cli 2.10-2.15's derivation; first of farflash's defaults
/// (`farflash_core::tls_key::DEFAULT_DERIVATIONS`).
const DERIVATION: Derivation = Derivation::Libnvme110;

fn keyring() -> Result<String, Status> {
    sys::nvme_keyring().ok_or_else(|| {
        Status::failed_precondition(
            "no .nvme keyring in /proc/keys (TLS needs Linux 6.7+ with nvme-keyring loaded: modprobe nvme-keyring)",
        )
    })
}

/// Puts the TLS PSK of `hostnqn` and `subnqn` into `.nvme`; its serial.
pub fn insert_psk(psk: &str, hostnqn: &str, subnqn: &str) -> Result<i32, Status> {
    let bad = |why: String| Status::invalid_argument(format!("secret key {SECRET_TLS_PSK}: {why}"));
    let key = ConfiguredPsk::parse(psk.trim()).map_err(|e| {
        bad(format!(
            "not an NVMeTLSkey-1 PSK ({e}; nvme gen-tls-key makes one)"
        ))
    })?;
    let (identity, tls) = key
        .derive(hostnqn, subnqn, IDENTITY, DERIVATION)
        .map_err(|e| bad(format!("no TLS PSK for {hostnqn} and {subnqn}: {e}")))?;
    let ring = keyring()?;
    let out = run_input(
        "keyctl",
        &cmd::psk_add(&identity.to_string(), &ring),
        Some(tls.expose_secret()),
        CONNECT_LIMIT,
    )
    .map_err(|e| Status::internal(format!("TLS PSK into the .nvme keyring: {e}")))?;
    let serial = out
        .trim()
        .parse::<i32>()
        .map_err(|_| Status::internal(format!("keyctl padd printed {out:?}, not a key serial")))?;
    tracing::info!(%identity, serial, "TLS PSK in the .nvme keyring");
    Ok(serial)
}

/// Unlinks every TLS PSK of `hostnqn` and `subnqn` from `.nvme` (none
/// there, or no such keyring: nothing to do).
pub fn remove_psks(hostnqn: &str, subnqn: &str) -> Result<(), Status> {
    let keys = sys::psk_keys(hostnqn, subnqn);
    if keys.is_empty() {
        return Ok(());
    }
    let ring = keyring()?;
    for k in keys {
        run("keyctl", &cmd::key_unlink(&k, &ring), CONNECT_LIMIT)
            .map_err(|e| Status::internal(format!("TLS PSK {k} out of .nvme: {e}")))?;
        tracing::info!(key = %k, subnqn, "TLS PSK unlinked from the .nvme keyring");
    }
    Ok(())
}
