//! The controller end of DH-HMAC-CHAP on one queue (Base 2.0 §8.13.5;
//! Linux `nvmet_execute_auth_send` / `nvmet_execute_auth_receive`):
//! Authentication Send data goes to [`CtrlAuth::send`], Authentication
//! Receive takes its data from [`CtrlAuth::receive`].
//!
//! The DH exponentiations may run elsewhere: [`CtrlAuth::send_deferred`]
//! answers with a [`DhJob`] where [`CtrlAuth::send`] would compute, and the
//! transaction goes on when [`CtrlAuth::computed`] gets the result.

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use farflash_wire::auth::{
    explanation as ex, Challenge, Message, Negotiate, Reply, Success1, AUTHID_DHCHAP, SC_C_NONE,
};

use crate::chap::{ctrl_response, host_response, ResponseInput};
use crate::dh::{KeyPair, PrivateExponent};
use crate::job::{DhDone, DhJob, Output, Work};
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

/// What [`CtrlAuth::send_deferred`] did with a message.
#[derive(Debug)]
pub enum Sent {
    /// Handled.
    Event(CtrlEvent),
    /// Handled up to a DH exponentiation: run the job (anywhere) and hand
    /// its result to [`CtrlAuth::computed`]; until then no message is due.
    Compute(DhJob),
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
    /// A [`DhJob`] is out (for the challenge or for the reply's check).
    Computing,
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
    /// Numbers the jobs handed out; the one awaited while `Computing`.
    gen: u32,
    /// The Reply whose session key is being computed.
    held_reply: Option<Reply>,
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
            gen: 0,
            held_reply: None,
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

    /// Whether a [`DhJob`] handed out has not come back yet.
    pub fn computing(&self) -> bool {
        self.state == State::Computing
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
        self.held_reply = None;
    }

    /// Authentication Send data, the DH work done here and now.
    pub fn send(&mut self, data: &[u8], rng: &mut dyn Random) -> CtrlEvent {
        match self.send_deferred(data, rng) {
            Sent::Event(ev) => ev,
            Sent::Compute(job) => self
                .computed(job.run())
                .unwrap_or_else(|| self.fail(AuthFailure::message("computation lost"))),
        }
    }

    /// Authentication Send data; DH work comes back as a job to run.
    pub fn send_deferred(&mut self, data: &[u8], rng: &mut dyn Random) -> Sent {
        if self.state == State::Computing {
            // The previous message is still being worked on.
            return Sent::Event(self.fail(AuthFailure::message("message during a computation")));
        }
        match self.step(data, rng) {
            Ok(s) => s,
            Err(f) => Sent::Event(self.fail(f)),
        }
    }

    /// The result of the job [`CtrlAuth::send_deferred`] handed out; None
    /// for a stale one (the transaction failed or expired meanwhile).
    pub fn computed(&mut self, done: DhDone) -> Option<CtrlEvent> {
        if self.state != State::Computing || done.gen != self.gen {
            return None;
        }
        let r = match done.out {
            Output::KeyPair(kp) => self.challenge(kp),
            Output::Shared(key) => match (self.held_reply.take(), key) {
                (Some(r), Ok(key)) => self.finish_reply(&r, Some(&key)),
                (None, _) => Err(AuthFailure::message("no transaction")),
                (_, Err(_)) => Err(AuthFailure::local(
                    ex::DHGROUP_UNUSABLE,
                    "host DH value refused",
                )),
            },
        };
        Some(r.unwrap_or_else(|f| self.fail(f)))
    }

    /// Hands out `work` as the next job.
    fn compute(&mut self, work: Work) -> Sent {
        self.gen = self.gen.wrapping_add(1);
        self.state = State::Computing;
        Sent::Compute(DhJob {
            gen: self.gen,
            work,
        })
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
        self.held_reply = None;
        if f.from_peer {
            self.pending = None;
            self.state = State::Idle;
        } else {
            self.pending = Some(Message::Failure1(f.to_wire(self.t_id)));
            self.state = State::Failure1Out;
        }
        CtrlEvent::Failed(f)
    }

    fn step(&mut self, data: &[u8], rng: &mut dyn Random) -> Result<Sent, AuthFailure> {
        let msg = Message::decode(data)
            .map_err(|e| AuthFailure::local(e.explanation(), "malformed message"))?;
        match (&self.state, msg) {
            (_, Message::Negotiate(n)) => self.negotiate(&n, rng),
            // The host gave up (in any state, also after a success1 it refused).
            (_, Message::Failure2(f)) => Err(AuthFailure::peer(&f)),
            (State::AwaitReply, Message::Reply(r)) => {
                self.check_t_id(r.t_id)?;
                self.reply(r)
            }
            (State::AwaitSuccess2, Message::Success2(s)) => {
                self.check_t_id(s.t_id)?;
                self.state = State::Idle;
                self.txn = None;
                self.authenticated = true;
                Ok(Sent::Event(CtrlEvent::Authenticated))
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
    fn negotiate(&mut self, n: &Negotiate, rng: &mut dyn Random) -> Result<Sent, AuthFailure> {
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
        self.txn = Some(Txn {
            hash,
            group,
            c1,
            s1,
            keypair: None,
        });
        if group == DhGroup::Null {
            return self.challenge(None).map(Sent::Event);
        }
        let x = PrivateExponent::draw(rng);
        Ok(self.compute(Work::KeyPair { group, x }))
    }

    /// The challenge, once the controller's key pair (if any) exists.
    fn challenge(&mut self, keypair: Option<KeyPair>) -> Result<CtrlEvent, AuthFailure> {
        let t = (self.txn.as_mut()).ok_or(AuthFailure::message("no transaction"))?;
        if keypair.is_none() != (t.group == DhGroup::Null) {
            return Err(AuthFailure::local(ex::DHGROUP_UNUSABLE, "no key pair"));
        }
        self.pending = Some(Message::Challenge(Challenge {
            t_id: self.t_id,
            hash_id: t.hash.id(),
            dhgid: t.group.id(),
            seqnum: t.s1,
            c1: t.c1.to_vec(),
            dhv: (keypair.as_ref())
                .map(|k| k.public.clone())
                .unwrap_or_default(),
        }));
        t.keypair = keypair;
        self.state = State::ChallengeOut;
        Ok(CtrlEvent::Continue)
    }

    /// Linux `nvmet_auth_reply` and `nvmet_auth_success1`.
    fn reply(&mut self, mut r: Reply) -> Result<Sent, AuthFailure> {
        let t = (self.txn.as_mut()).ok_or(AuthFailure::message("no transaction"))?;
        if r.response.len() != t.hash.output_len() {
            return Err(AuthFailure::payload("HL is not the hash length"));
        }
        match (t.keypair.take(), r.dhv.is_empty()) {
            (None, true) => self.finish_reply(&r, None).map(Sent::Event),
            (None, false) => Err(AuthFailure::payload("DH value with the null group")),
            (Some(_), true) => Err(AuthFailure::payload("DH value missing")),
            (Some(keypair), false) => {
                let peer = std::mem::take(&mut r.dhv);
                self.held_reply = Some(r);
                Ok(self.compute(Work::Shared { keypair, peer }))
            }
        }
    }

    /// The rest of a Reply's handling, with the session key computed.
    fn finish_reply(
        &mut self,
        r: &Reply,
        session_key: Option<&[u8]>,
    ) -> Result<CtrlEvent, AuthFailure> {
        let t = (self.txn.as_ref()).ok_or(AuthFailure::message("no transaction"))?;
        debug_assert_eq!(t.group == DhGroup::Null, session_key.is_none());
        let input = ResponseInput {
            hash: t.hash,
            challenge: &t.c1,
            session_key,
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
