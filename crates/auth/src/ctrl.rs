//! The controller end of DH-HMAC-CHAP on one queue (Base 2.0 §8.13.5;
//! Linux `nvmet_execute_auth_send` / `nvmet_execute_auth_receive`):
//! Authentication Send data goes to [`CtrlAuth::send`], Authentication
//! Receive takes its data from [`CtrlAuth::receive`].

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use farflash_wire::auth::{
    explanation as ex, Challenge, Message, Negotiate, Reply, Success1, AUTHID_DHCHAP, SC_C_NONE,
};

use crate::chap::{ctrl_response, host_response, ResponseInput};
use crate::dh::KeyPair;
use crate::{AuthFailure, DhGroup, HashId, Random, Secret};

/// What the controller knows about one host.
#[derive(Clone, Debug)]
pub struct CtrlConfig {
    pub subsys_nqn: String,
    pub host_nqn: String,
    /// The host's secret (`dhchap_key`).
    pub host_secret: Secret,
    /// The controller's own secret (`dhchap_ctrl_key`), for bidirectional
    /// authentication when the host asks for it.
    pub ctrl_secret: Option<Secret>,
    /// Acceptable hashes and groups, most preferred first: the first one the
    /// host also offers is selected.
    pub hashes: Vec<HashId>,
    pub groups: Vec<DhGroup>,
}

/// The outcome of one Authentication Send.
#[derive(Debug, PartialEq, Eq)]
pub enum CtrlEvent {
    /// Accepted; the host fetches the next message.
    Continue,
    /// The host is authenticated (the queue may carry commands).
    Authenticated,
    /// The transaction failed: an AUTH_Failure1 waits for the next
    /// Authentication Receive unless the host sent the failure.
    Failed(AuthFailure),
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Idle,
    /// Negotiate accepted; the challenge waits for Authentication Receive.
    ChallengeOut,
    AwaitReply,
    /// Success1 waits; then Success2 is awaited when bidirectional.
    Success1Out {
        bidirectional: bool,
    },
    AwaitSuccess2,
    Failure1Out,
}

struct Txn {
    hash: HashId,
    group: DhGroup,
    c1: Zeroizing<Vec<u8>>,
    s1: u32,
    keypair: Option<KeyPair>,
}

/// DH-HMAC-CHAP state of one queue.
pub struct CtrlAuth {
    cfg: CtrlConfig,
    state: State,
    t_id: u16,
    authenticated: bool,
    pending: Option<Message>,
    txn: Option<Txn>,
}

impl CtrlAuth {
    pub fn new(cfg: CtrlConfig) -> CtrlAuth {
        CtrlAuth {
            cfg,
            state: State::Idle,
            t_id: 0,
            authenticated: false,
            pending: None,
            txn: None,
        }
    }

    /// Whether the queue has been authenticated (and no later transaction
    /// failed). Stays true during a re-authentication until it fails.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether a transaction is under way (its timeout should run).
    pub fn in_progress(&self) -> bool {
        self.state != State::Idle
    }

    /// New secrets and limits (a key rotated at run time) for the next
    /// transaction; one under way keeps the ones it started with.
    pub fn set_config(&mut self, cfg: CtrlConfig) {
        if self.state == State::Idle {
            self.cfg = cfg;
        }
    }

    /// The transaction timed out ([`crate::transaction_timeout`]): forget
    /// it, as Linux's `nvmet_auth_expired_work` does.
    pub fn expire(&mut self) {
        self.state = State::Idle;
        self.pending = None;
        self.txn = None;
    }

    /// Authentication Send data.
    pub fn send(&mut self, data: &[u8], rng: &mut dyn Random) -> CtrlEvent {
        match self.step(data, rng) {
            Ok(ev) => ev,
            Err(f) => self.fail(f),
        }
    }

    /// The data for an Authentication Receive; None when no transaction is
    /// under way (the command then fails with Command Sequence Error).
    pub fn receive(&mut self) -> Option<Message> {
        let out = match self.pending.take() {
            Some(m) => m,
            None if matches!(self.state, State::AwaitReply | State::AwaitSuccess2) => {
                // Linux answers an early receive with AUTH_Failure1.
                self.fail(AuthFailure::message("no message to return"));
                self.pending.take()?
            }
            None => return None,
        };
        self.state = match self.state {
            State::ChallengeOut => State::AwaitReply,
            State::Success1Out {
                bidirectional: true,
            } => State::AwaitSuccess2,
            _ => {
                self.txn = None;
                State::Idle
            }
        };
        Some(out)
    }

    fn fail(&mut self, f: AuthFailure) -> CtrlEvent {
        self.authenticated = false;
        self.txn = None;
        if f.from_peer {
            self.pending = None;
            self.state = State::Idle;
        } else {
            self.pending = Some(Message::Failure1(f.to_wire(self.t_id)));
            self.state = State::Failure1Out;
        }
        CtrlEvent::Failed(f)
    }

    fn step(&mut self, data: &[u8], rng: &mut dyn Random) -> Result<CtrlEvent, AuthFailure> {
        let msg = Message::decode(data)
            .map_err(|e| AuthFailure::local(e.explanation(), "malformed message"))?;
        match (&self.state, msg) {
            (_, Message::Negotiate(n)) => self.negotiate(&n, rng),
            // The host gave up (in any state, also after a success1 it refused).
            (_, Message::Failure2(f)) => Err(AuthFailure::peer(&f)),
            (State::AwaitReply, Message::Reply(r)) => {
                self.check_t_id(r.t_id)?;
                self.reply(&r)
            }
            (State::AwaitSuccess2, Message::Success2(s)) => {
                self.check_t_id(s.t_id)?;
                self.state = State::Idle;
                self.txn = None;
                self.authenticated = true;
                Ok(CtrlEvent::Authenticated)
            }
            _ => Err(AuthFailure::message("message out of order")),
        }
    }

    /// Linux answers a wrong T_ID with Incorrect Payload (`nvmet_execute_auth_send`).
    fn check_t_id(&self, t_id: u16) -> Result<(), AuthFailure> {
        if t_id != self.t_id {
            return Err(AuthFailure::payload("wrong transaction ID"));
        }
        Ok(())
    }

    /// Linux `nvmet_auth_negotiate` (reason codes as there), then
    /// `nvmet_auth_challenge`. A negotiate restarts any transaction, which
    /// is how a host re-authenticates a queue.
    fn negotiate(&mut self, n: &Negotiate, rng: &mut dyn Random) -> Result<CtrlEvent, AuthFailure> {
        self.t_id = n.t_id;
        self.pending = None;
        self.txn = None;
        if n.sc_c != SC_C_NONE {
            return Err(AuthFailure::local(
                ex::CONCAT_MISMATCH,
                "secure channel concatenation",
            ));
        }
        if n.napd != 1 {
            return Err(AuthFailure::local(ex::HASH_UNUSABLE, "NAPD is not 1"));
        }
        if n.authid != AUTHID_DHCHAP {
            return Err(AuthFailure::payload("AUTHID is not DH-HMAC-CHAP"));
        }
        let hash = (self.cfg.hashes.iter())
            .find(|h| n.hash_ids.contains(&h.id()))
            .copied()
            .ok_or(AuthFailure::local(ex::HASH_UNUSABLE, "no common hash"))?;
        let group = (self.cfg.groups.iter())
            .find(|g| n.dh_ids.contains(&g.id()))
            .copied()
            .ok_or(AuthFailure::local(
                ex::DHGROUP_UNUSABLE,
                "no common DH group",
            ))?;
        let mut c1 = Zeroizing::new(vec![0u8; hash.output_len()]);
        rng.fill(&mut c1);
        let mut s = [0u8; 4];
        rng.fill(&mut s);
        let s1 = u32::from_le_bytes(s);
        let keypair = group.keypair(rng);
        self.pending = Some(Message::Challenge(Challenge {
            t_id: self.t_id,
            hash_id: hash.id(),
            dhgid: group.id(),
            seqnum: s1,
            c1: c1.to_vec(),
            dhv: keypair
                .as_ref()
                .map(|k| k.public.clone())
                .unwrap_or_default(),
        }));
        self.txn = Some(Txn {
            hash,
            group,
            c1,
            s1,
            keypair,
        });
        self.state = State::ChallengeOut;
        Ok(CtrlEvent::Continue)
    }

    /// Linux `nvmet_auth_reply` and `nvmet_auth_success1`.
    fn reply(&mut self, r: &Reply) -> Result<CtrlEvent, AuthFailure> {
        let t = self
            .txn
            .as_ref()
            .ok_or(AuthFailure::message("no transaction"))?;
        if r.response.len() != t.hash.output_len() {
            return Err(AuthFailure::payload("HL is not the hash length"));
        }
        let session_key =
            match (&t.keypair, r.dhv.is_empty()) {
                (None, true) => None,
                (None, false) => return Err(AuthFailure::payload("DH value with the null group")),
                (Some(_), true) => return Err(AuthFailure::payload("DH value missing")),
                (Some(kp), false) => Some(kp.shared(&r.dhv).map_err(|_| {
                    AuthFailure::local(ex::DHGROUP_UNUSABLE, "host DH value refused")
                })?),
            };
        debug_assert_eq!(t.group == DhGroup::Null, session_key.is_none());
        let input = ResponseInput {
            hash: t.hash,
            challenge: &t.c1,
            session_key: session_key.as_deref().map(|k| &k[..]),
            seqnum: t.s1,
            t_id: self.t_id,
            sc_c: SC_C_NONE,
            host_nqn: &self.cfg.host_nqn,
            subsys_nqn: &self.cfg.subsys_nqn,
        };
        let want = host_response(&self.cfg.host_secret, &input);
        if !bool::from(want[..].ct_eq(&r.response[..])) {
            return Err(AuthFailure::local(ex::FAILED, "host response wrong"));
        }
        // SEQNUM 0 with CVALID asks for no controller response (Base §8.13.5.4).
        let bidirectional = r.cvalid && r.seqnum != 0;
        let response = match (&self.cfg.ctrl_secret, bidirectional) {
            (_, false) => None,
            (None, true) => return Err(AuthFailure::local(ex::FAILED, "no controller secret")),
            (Some(cs), true) => {
                let i2 = ResponseInput {
                    challenge: &r.c2,
                    seqnum: r.seqnum,
                    ..input
                };
                Some(ctrl_response(cs, &i2).to_vec())
            }
        };
        self.pending = Some(Message::Success1(Success1 {
            t_id: self.t_id,
            hl: t.hash.output_len() as u8,
            response,
        }));
        self.state = State::Success1Out { bidirectional };
        if bidirectional {
            return Ok(CtrlEvent::Continue);
        }
        self.authenticated = true;
        Ok(CtrlEvent::Authenticated)
    }
}
