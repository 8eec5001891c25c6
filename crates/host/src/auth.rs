//! In-band authentication from the host (Base 2.0 §8.13, TP 8006; Linux
//! `nvme_queue_auth_work`): after a Connect whose response sets AUTHREQ ATR,
//! one DH-HMAC-CHAP transaction over Authentication Send (FCTYPE 05h) and
//! Receive (06h) on that queue, driven by `farflash_auth::HostAuth`.
//!
//! Errors carry the failure's fixed description and reason code
//! explanation, never key material.

use crate::error::{HostError, Result};
use crate::options::ConnectOptions;
use farflash_auth::{HostAuth, HostConfig, HostStep, OsRandom};
use farflash_wire::auth::{AuthCmd, Message, CONNECT_AUTHREQ_ASCR, CONNECT_AUTHREQ_ATR};
use farflash_wire::Sqe;
use std::sync::atomic::{AtomicU16, Ordering};

/// Authentication Receive allocation length (Linux's `CHAP_BUF_SIZE`).
pub const AUTH_RECEIVE_LEN: u32 = 4096;

/// Runs one Authentication command: `Some(data)` sends, `None` receives.
type AuthExec<'a> = dyn FnMut(Sqe, Option<&[u8]>) -> Result<Vec<u8>> + 'a;

/// Transaction IDs: a new one for every transaction of this process.
static NEXT_T_ID: AtomicU16 = AtomicU16::new(1);

/// What a queue must do after its Connect (response DW0, Fabrics §6.3).
pub(crate) fn needs_auth(opts: &ConnectOptions, qid: u16, dw0: u32) -> Result<bool> {
    if dw0 & CONNECT_AUTHREQ_ASCR != 0 {
        return Err(HostError::Controller(format!(
            "queue {qid}: the controller requires secure channel concatenation (TLS), not supported"
        )));
    }
    if dw0 & CONNECT_AUTHREQ_ATR != 0 {
        if opts.dhchap_secret.is_none() {
            return Err(HostError::Controller(format!(
                "queue {qid}: the controller requires in-band authentication (DH-HMAC-CHAP); give --dhchap-secret"
            )));
        }
        return Ok(true);
    }
    if opts.dhchap_ctrl_secret.is_some() {
        // The controller could not be verified: refuse, rather than carry on
        // with an unauthenticated controller the user asked to check.
        return Err(HostError::Controller(format!(
            "queue {qid}: --dhchap-ctrl-secret given but the controller did not ask for authentication"
        )));
    }
    Ok(false)
}

/// Runs one DH-HMAC-CHAP transaction on queue `qid`. `exec` runs one
/// Authentication command: `(sqe, Some(data))` sends, `(sqe, None)`
/// receives and returns the data.
pub(crate) fn authenticate(
    opts: &ConnectOptions,
    qid: u16,
    al: u32,
    mut exec: impl FnMut(Sqe, Option<&[u8]>) -> Result<Vec<u8>>,
) -> Result<()> {
    let Some(secret) = opts.dhchap_secret.clone() else {
        return Err(HostError::Invalid("no DH-HMAC-CHAP secret".into()));
    };
    let cfg = HostConfig::new(
        &opts.hostnqn,
        &opts.subnqn,
        secret,
        opts.dhchap_ctrl_secret.clone(),
    );
    let t_id = NEXT_T_ID.fetch_add(1, Ordering::Relaxed);
    let mut h = HostAuth::new(cfg, t_id);
    let send = |m: &Message, exec: &mut AuthExec| {
        let b = m.encode();
        exec(AuthCmd::dhchap(b.len() as u32).to_sqe(0, true), Some(&b)).map(|_| ())
    };
    send(&h.negotiate(), &mut exec)?;
    loop {
        let data = exec(AuthCmd::dhchap(al).to_sqe(0, false), None)?;
        match h.receive(&data, &mut OsRandom) {
            HostStep::Send(m) => send(&m, &mut exec)?,
            HostStep::Done(m) => {
                if let Some(m) = m {
                    send(&m, &mut exec)?;
                }
                return Ok(());
            }
            HostStep::Failed { failure, send: m } => {
                if let Some(m) = m {
                    // Best effort: the transaction failed either way.
                    let _ = send(&m, &mut exec);
                }
                return Err(HostError::Controller(format!("queue {qid}: {failure}")));
            }
        }
    }
}
