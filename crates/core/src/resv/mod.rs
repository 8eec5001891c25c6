//! Reservations (Base 2.0 §8.19) of one namespace within one target
//! process: registrants keyed by Host Identifier (the Connect data's
//! HOSTID), the reservation holder and type, and the access rules of
//! Figure "Command Behavior in the Presence of a Reservation". Sans-I/O:
//! each operation changes the state and says whom to notify; the command
//! glue (`cmd.rs`) runs it and the PTPL file (`ptpl.rs`) keeps it across
//! restarts.

pub mod ptpl;

use farflash_wire::resv::{RegCtl, ResvStatus, ResvType, NOTICE_RESERVATION_RELEASED};
use farflash_wire::Status;

pub type HostId = [u8; 16];

/// A namespace's reservations and their PTPL file. Reservation commands
/// take the lock; the I/O path never does (queues cache their host's
/// access when the subsystem's namespace generation moves).
pub struct NsResv {
    state: std::sync::Mutex<ResvCell>,
    /// Where PTPL keeps the state (None: PTPL is not supported here).
    pub file: Option<std::sync::Arc<dyn ptpl::PtplFile>>,
    written: std::sync::Arc<std::sync::Mutex<u64>>,
}

pub struct ResvCell {
    pub r: Reservations,
    /// Bumped at every change that goes to the PTPL file.
    seq: u64,
}

impl NsResv {
    /// The state of a namespace at start: loaded from `file` when PTPL
    /// was set there (`ptpl::load`; a corrupt file is an error).
    pub fn open(file: Option<std::sync::Arc<dyn ptpl::PtplFile>>) -> Result<NsResv, String> {
        let r = match &file {
            Some(f) => ptpl::load(&**f)?,
            None => Reservations::default(),
        };
        Ok(NsResv {
            state: std::sync::Mutex::new(ResvCell { r, seq: 0 }),
            file,
            written: Default::default(),
        })
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, ResvCell> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> Reservations {
        self.lock().r.clone()
    }
}

impl ResvCell {
    /// The write that keeps the state just changed (with `was_ptpl`, the
    /// PTPL state before the change), when there is one to make.
    pub fn persist(&mut self, res: &NsResv, was_ptpl: bool) -> Option<ptpl::PtplWrite> {
        let file = res.file.clone()?;
        if !self.r.ptpl && !was_ptpl {
            return None;
        }
        self.seq += 1;
        Some(ptpl::PtplWrite {
            file,
            seq: self.seq,
            data: ptpl::encode(&self.r),
            written: res.written.clone(),
        })
    }
}

/// One registrant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registrant {
    pub hostid: HostId,
    pub key: u64,
    /// The controller that registered (reported in Reservation Report).
    pub cntlid: u16,
}

/// The reservation state of one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reservations {
    pub registrants: Vec<Registrant>,
    /// The holder (for "all registrants" types every registrant holds it;
    /// this is then the host that acquired it).
    pub holder: Option<HostId>,
    pub rtype: Option<ResvType>,
    /// Generation (Reservation Report GEN): bumped by every successful
    /// Register, Unregister, Replace and every preemption or clear.
    pub gen: u32,
    /// Persist Through Power Loss state (CPTPL).
    pub ptpl: bool,
}

/// A notification for the Reservation Notification log page: which host
/// gets which type (Base §5.16.1.25).
pub type Notice = (HostId, u8);

/// What the I/O path needs: whether a command of the host may read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub read: bool,
    pub write: bool,
}

impl Reservations {
    fn find(&self, h: &HostId) -> Option<usize> {
        self.registrants.iter().position(|r| r.hostid == *h)
    }

    pub fn is_registered(&self, h: &HostId) -> bool {
        self.find(h).is_some()
    }

    /// Whether `h` holds the reservation (every registrant does for the
    /// "all registrants" types).
    pub fn holds(&self, h: &HostId) -> bool {
        match self.rtype {
            Some(t) if t.all_registrants() => self.is_registered(h),
            Some(_) => self.holder.as_ref() == Some(h),
            None => false,
        }
    }

    /// Whether a reservation or any registration exists (the I/O path
    /// then checks access).
    pub fn active(&self) -> bool {
        self.rtype.is_some()
    }

    /// Base §8.19, Figure "Command Behavior in the Presence of a
    /// Reservation": what host `h` may do.
    pub fn access(&self, h: &HostId) -> Access {
        let Some(t) = self.rtype else {
            return Access {
                read: true,
                write: true,
            };
        };
        let ok = self.holds(h) || (t.registrants_access() && self.is_registered(h));
        Access {
            read: ok || !t.exclusive_access(),
            write: ok,
        }
    }

    /// The current key of `h`, checked against `crkey` unless `iekey`.
    fn check_key(&self, h: &HostId, crkey: u64, iekey: bool) -> Result<usize, Status> {
        let i = self.find(h).ok_or(Status::RESERVATION_CONFLICT)?;
        if !iekey && self.registrants[i].key != crkey {
            return Err(Status::RESERVATION_CONFLICT);
        }
        Ok(i)
    }

    /// Removes registrant `i`; a holder leaving releases a reservation that
    /// is not "all registrants" (or is, and was the last registrant).
    /// Returns notices for the registrants left (Reservation Released, for
    /// the registrants-only and all-registrants types).
    fn remove(&mut self, i: usize, notices: &mut Vec<Notice>) {
        let r = self.registrants.remove(i);
        let Some(t) = self.rtype else {
            return;
        };
        let released = if t.all_registrants() {
            self.registrants.is_empty()
        } else {
            self.holder == Some(r.hostid)
        };
        if released {
            self.holder = None;
            self.rtype = None;
            if t.registrants_access() {
                for o in &self.registrants {
                    notices.push((o.hostid, NOTICE_RESERVATION_RELEASED));
                }
            }
        } else if t.all_registrants() && self.holder == Some(r.hostid) {
            self.holder = self.registrants.first().map(|o| o.hostid);
        }
    }

    /// Reservation Register (NVM Command Set §3.2.6): RREGA 0 register,
    /// 1 unregister, 2 replace.
    pub fn register(
        &mut self,
        h: HostId,
        cntlid: u16,
        action: u8,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
    ) -> Result<Vec<Notice>, Status> {
        use farflash_wire::resv::*;
        let mut notices = Vec::new();
        match action {
            RREGA_REGISTER => match self.find(&h) {
                // Registering again with the same key succeeds; another
                // key is a conflict (Base 2.0, "Reservations").
                Some(i) if self.registrants[i].key == nrkey => return Ok(notices),
                Some(_) => return Err(Status::RESERVATION_CONFLICT),
                None if nrkey == 0 => return Err(Status::INVALID_FIELD.dnr()),
                None => self.registrants.push(Registrant {
                    hostid: h,
                    key: nrkey,
                    cntlid,
                }),
            },
            RREGA_UNREGISTER => {
                let i = self.check_key(&h, crkey, iekey)?;
                self.remove(i, &mut notices);
            }
            RREGA_REPLACE => {
                if nrkey == 0 {
                    return Err(Status::INVALID_FIELD.dnr());
                }
                let i = self.check_key(&h, crkey, iekey)?;
                self.registrants[i].key = nrkey;
            }
            _ => return Err(Status::INVALID_FIELD.dnr()),
        }
        self.gen = self.gen.wrapping_add(1);
        Ok(notices)
    }

    /// Reservation Acquire (NVM Command Set §3.2.4): RACQA 0 acquire, 1
    /// preempt, 2 preempt and abort.
    pub fn acquire(
        &mut self,
        h: HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    ) -> Result<Vec<Notice>, Status> {
        use farflash_wire::resv::*;
        let t = ResvType::from_u8(rtype).ok_or(Status::INVALID_FIELD.dnr())?;
        if action > RACQA_PREEMPT_ABORT {
            return Err(Status::INVALID_FIELD.dnr());
        }
        self.check_key(&h, crkey, iekey)?;
        let mut notices = Vec::new();
        if action == RACQA_ACQUIRE {
            return match self.rtype {
                None => {
                    self.holder = Some(h);
                    self.rtype = Some(t);
                    Ok(notices)
                }
                // Acquiring what one holds, with the same type, succeeds.
                Some(cur) if cur == t && self.holds(&h) => Ok(notices),
                Some(_) => Err(Status::RESERVATION_CONFLICT),
            };
        }
        // Preempt (Base §8.19.8).
        let all = self.rtype.is_some_and(|c| c.all_registrants());
        let holder_key = self
            .holder
            .and_then(|x| self.find(&x))
            .map(|i| self.registrants[i].key);
        let take_over = match self.rtype {
            None => false,
            Some(_) if all => prkey == 0,
            Some(_) => holder_key == Some(prkey),
        };
        if prkey == 0 && !take_over {
            // A zero PRKEY only preempts an "all registrants" reservation.
            return Err(Status::INVALID_FIELD.dnr());
        }
        // Registrants to remove: those with PRKEY (all others for a zero
        // PRKEY on an all-registrants reservation); never the requester,
        // which may preempt itself to change the type.
        let victims: Vec<HostId> = self
            .registrants
            .iter()
            .filter(|r| r.hostid != h && (r.key == prkey || (all && prkey == 0)))
            .map(|r| r.hostid)
            .collect();
        self.registrants.retain(|r| !victims.contains(&r.hostid));
        for v in &victims {
            notices.push((*v, NOTICE_REGISTRATION_PREEMPTED));
        }
        if take_over {
            let old = self.rtype;
            self.holder = Some(h);
            self.rtype = Some(t);
            if old != Some(t) {
                for r in self.registrants.iter().filter(|r| r.hostid != h) {
                    notices.push((r.hostid, NOTICE_RESERVATION_PREEMPTED));
                }
            }
        }
        self.gen = self.gen.wrapping_add(1);
        Ok(notices)
    }

    /// Reservation Release (NVM Command Set §3.2.7): RRELA 0 release, 1 clear.
    pub fn release(
        &mut self,
        h: HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
    ) -> Result<Vec<Notice>, Status> {
        use farflash_wire::resv::*;
        self.check_key(&h, crkey, iekey)?;
        let mut notices = Vec::new();
        match action {
            RRELA_RELEASE => {
                let Some(cur) = self.rtype else {
                    return Ok(notices);
                };
                if !self.holds(&h) {
                    // Not the holder: nothing happens (Base 2.0, "Reservations").
                    return Ok(notices);
                }
                if cur as u8 != rtype {
                    return Err(Status::INVALID_FIELD.dnr());
                }
                self.holder = None;
                self.rtype = None;
                if cur.registrants_access() {
                    for r in self.registrants.iter().filter(|r| r.hostid != h) {
                        notices.push((r.hostid, NOTICE_RESERVATION_RELEASED));
                    }
                }
            }
            RRELA_CLEAR => {
                for r in self.registrants.iter().filter(|r| r.hostid != h) {
                    notices.push((r.hostid, NOTICE_RESERVATION_PREEMPTED));
                }
                self.registrants.clear();
                self.holder = None;
                self.rtype = None;
                self.gen = self.gen.wrapping_add(1);
            }
            _ => return Err(Status::INVALID_FIELD.dnr()),
        }
        Ok(notices)
    }

    /// The Reservation Status data structure.
    pub fn report(&self) -> ResvStatus {
        ResvStatus {
            gen: self.gen,
            rtype: self.rtype.map_or(0, |t| t as u8),
            ptpls: self.ptpl,
            regctls: self
                .registrants
                .iter()
                .map(|r| RegCtl {
                    cntlid: r.cntlid,
                    holds: self.holds(&r.hostid),
                    hostid: r.hostid,
                    rkey: r.key,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
