//! The host end of one DH-HMAC-CHAP transaction (Base 2.0 §8.13.5; Linux
//! `nvme_queue_auth_work`): negotiate → challenge → reply → success1 →
//! success2 (bidirectional) or failure2.

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use farflash_wire::auth::{
    explanation as ex, Challenge, Message, Negotiate, Reply, Success1, Success2, AUTHID_DHCHAP,
    SC_C_NONE,
};

use crate::chap::{ctrl_response, host_response, ResponseInput};
use crate::{AuthFailure, DhGroup, HashId, Random, Secret};

/// What the host authenticates with.
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub host_nqn: String,
    pub subsys_nqn: String,
    /// `--dhchap-secret`.
    pub secret: Secret,
    /// `--dhchap-ctrl-secret`: when set, the controller must prove itself.
    pub ctrl_secret: Option<Secret>,
    /// Offered in AUTH_Negotiate, in this order.
    pub hashes: Vec<HashId>,
    pub groups: Vec<DhGroup>,
}

impl HostConfig {
    /// Offers every hash and group, as Linux does.
    pub fn new(host_nqn: &str, subsys_nqn: &str, secret: Secret, ctrl: Option<Secret>) -> Self {
        HostConfig {
            host_nqn: host_nqn.to_string(),
            subsys_nqn: subsys_nqn.to_string(),
            secret,
            ctrl_secret: ctrl,
            hashes: HashId::ALL.to_vec(),
            groups: DhGroup::ALL.to_vec(),
        }
    }
}

/// What the host does next.
#[derive(Debug, PartialEq, Eq)]
pub enum HostStep {
    /// Send this (Authentication Send), then receive the next message.
    Send(Message),
    /// Authenticated. Send the DH-HMAC-CHAP_Success2 first when present.
    Done(Option<Message>),
    /// Failed; send the AUTH_Failure2 when present. The queue stays
    /// unauthenticated.
    Failed {
        failure: AuthFailure,
        send: Option<Message>,
    },
}

enum State {
    Start,
    AwaitChallenge,
    AwaitSuccess1 {
        hash: HashId,
        /// R2 the controller must send (bidirectional only).
        expect: Option<Zeroizing<Vec<u8>>>,
    },
    Over,
}

/// One transaction on one queue.
pub struct HostAuth {
    cfg: HostConfig,
    t_id: u16,
    state: State,
}

impl HostAuth {
    /// `t_id` must differ from the queue's previous transactions (Linux
    /// counts per controller).
    pub fn new(cfg: HostConfig, t_id: u16) -> HostAuth {
        HostAuth {
            cfg,
            t_id,
            state: State::Start,
        }
    }

    pub fn t_id(&self) -> u16 {
        self.t_id
    }

    /// The AUTH_Negotiate that opens the transaction (Base §8.13.4.2).
    pub fn negotiate(&mut self) -> Message {
        self.state = State::AwaitChallenge;
        Message::Negotiate(Negotiate {
            t_id: self.t_id,
            sc_c: SC_C_NONE,
            napd: 1,
            authid: AUTHID_DHCHAP,
            hash_ids: self.cfg.hashes.iter().map(|h| h.id()).collect(),
            dh_ids: self.cfg.groups.iter().map(|g| g.id()).collect(),
        })
    }

    /// Feeds the data one Authentication Receive returned.
    pub fn receive(&mut self, data: &[u8], rng: &mut dyn Random) -> HostStep {
        match self.step(data, rng) {
            Ok(s) => s,
            Err((failure, send_failure2)) => {
                self.state = State::Over;
                let send = send_failure2.then(|| Message::Failure2(failure.to_wire(self.t_id)));
                HostStep::Failed { failure, send }
            }
        }
    }

    fn step(&mut self, data: &[u8], rng: &mut dyn Random) -> Result<HostStep, (AuthFailure, bool)> {
        if matches!(self.state, State::Start | State::Over) {
            return Err((AuthFailure::message("no transaction in progress"), false));
        }
        let msg = Message::decode(data).map_err(|e| {
            (
                AuthFailure::local(e.explanation(), "malformed message"),
                true,
            )
        })?;
        if let Message::Failure1(f) = &msg {
            return Err((AuthFailure::peer(f), false));
        }
        match (&self.state, msg) {
            (State::AwaitChallenge, Message::Challenge(c)) => {
                self.check_t_id(c.t_id)?;
                self.challenge(&c, rng).map_err(|f| (f, true))
            }
            (State::AwaitSuccess1 { .. }, Message::Success1(s)) => {
                self.check_t_id(s.t_id)?;
                self.success1(&s).map_err(|f| (f, true))
            }
            _ => Err((AuthFailure::message("message out of order"), true)),
        }
    }

    fn check_t_id(&self, t_id: u16) -> Result<(), (AuthFailure, bool)> {
        if t_id != self.t_id {
            return Err((AuthFailure::message("wrong transaction ID"), true));
        }
        Ok(())
    }

    /// Linux `nvme_auth_process_dhchap_challenge`, `nvme_auth_dhchap_exponential`,
    /// `nvme_auth_dhchap_setup_host_response`, `nvme_auth_set_dhchap_reply_data`.
    fn challenge(&mut self, c: &Challenge, rng: &mut dyn Random) -> Result<HostStep, AuthFailure> {
        let hash = HashId::from_id(c.hash_id)
            .filter(|h| self.cfg.hashes.contains(h))
            .ok_or(AuthFailure::local(ex::HASH_UNUSABLE, "hash not offered"))?;
        if c.c1.len() != hash.output_len() {
            return Err(AuthFailure::local(
                ex::HASH_UNUSABLE,
                "HL is not the hash length",
            ));
        }
        let group = DhGroup::from_id(c.dhgid)
            .filter(|g| self.cfg.groups.contains(g))
            .ok_or(AuthFailure::local(
                ex::DHGROUP_UNUSABLE,
                "DH group not offered",
            ))?;
        let (session_key, public) = match group {
            DhGroup::Null if !c.dhv.is_empty() => {
                return Err(AuthFailure::payload("DH value with the null group"))
            }
            DhGroup::Null => (None, Vec::new()),
            _ if c.dhv.is_empty() => {
                return Err(AuthFailure::local(ex::DHGROUP_UNUSABLE, "empty DH value"))
            }
            g => {
                let kp = g
                    .keypair(rng)
                    .ok_or(AuthFailure::local(ex::DHGROUP_UNUSABLE, "no key pair"))?;
                let ks = kp
                    .shared(&c.dhv)
                    .map_err(|_| AuthFailure::payload("controller DH value refused"))?;
                (Some(ks), kp.public)
            }
        };
        let input = ResponseInput {
            hash,
            challenge: &c.c1,
            session_key: session_key.as_deref().map(|k| &k[..]),
            seqnum: c.seqnum,
            t_id: self.t_id,
            sc_c: SC_C_NONE,
            host_nqn: &self.cfg.host_nqn,
            subsys_nqn: &self.cfg.subsys_nqn,
        };
        let response = host_response(&self.cfg.secret, &input);
        let (mut c2, mut s2, mut expect) = (vec![0u8; hash.output_len()], 0u32, None);
        if let Some(cs) = &self.cfg.ctrl_secret {
            rng.fill(&mut c2);
            let mut s = [0u8; 4];
            while s2 == 0 {
                rng.fill(&mut s);
                s2 = u32::from_le_bytes(s);
            }
            let i2 = ResponseInput {
                challenge: &c2,
                seqnum: s2,
                ..input
            };
            expect = Some(ctrl_response(cs, &i2));
        }
        self.state = State::AwaitSuccess1 { hash, expect };
        Ok(HostStep::Send(Message::Reply(Reply {
            t_id: self.t_id,
            cvalid: self.cfg.ctrl_secret.is_some(),
            seqnum: s2,
            response: response.to_vec(),
            c2,
            dhv: public,
        })))
    }

    /// Linux `nvme_auth_process_dhchap_success1` (but a missing R2 fails
    /// when one was asked for; Linux accepts it).
    fn success1(&mut self, s: &Success1) -> Result<HostStep, AuthFailure> {
        let State::AwaitSuccess1 { hash, expect } = &self.state else {
            return Err(AuthFailure::message("message out of order"));
        };
        if s.hl as usize != hash.output_len() {
            return Err(AuthFailure::local(
                ex::HASH_UNUSABLE,
                "HL is not the hash length",
            ));
        }
        let done = match (expect, &s.response) {
            (None, None) => HostStep::Done(None),
            (Some(want), Some(got)) if bool::from(want[..].ct_eq(&got[..])) => {
                HostStep::Done(Some(Message::Success2(Success2 { t_id: self.t_id })))
            }
            (Some(_), Some(_)) => {
                return Err(AuthFailure::local(ex::FAILED, "controller response wrong"))
            }
            (Some(_), None) => {
                return Err(AuthFailure::local(
                    ex::FAILED,
                    "controller response missing",
                ))
            }
            (None, Some(_)) => {
                return Err(AuthFailure::payload("controller response not asked for"))
            }
        };
        self.state = State::Over;
        Ok(done)
    }
}
