//! Which command identifiers of one queue are free, taken by a caller, or
//! in flight. A CID names one outstanding command of its submission queue
//! (NVMe Base 2.0 §4.2); every transport's host queue keeps its slots
//! `0..depth` here and its per-command data beside them.

/// Where one CID is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Free,
    /// Taken with [`Cids::alloc`], not submitted yet.
    Taken,
    /// Submitted; free again when its command finishes.
    InFlight,
}

/// The CIDs `0..depth` of one queue and a free list (no allocation after
/// construction).
#[derive(Debug)]
pub struct Cids {
    state: Vec<State>,
    free: Vec<u16>,
}

impl Cids {
    /// CIDs `0..depth` (at least one), all free; `alloc` hands out the
    /// lowest first.
    pub fn new(depth: u16) -> Cids {
        let d = depth.max(1);
        Cids {
            state: vec![State::Free; d as usize],
            free: (0..d).rev().collect(),
        }
    }
    /// Number of CIDs (the queue depth).
    pub fn depth(&self) -> u16 {
        self.state.len() as u16
    }
    /// CIDs taken or in flight.
    pub fn outstanding(&self) -> usize {
        self.state.len() - self.free.len()
    }
    /// Takes a free CID, if any.
    pub fn alloc(&mut self) -> Option<u16> {
        let cid = self.free.pop()?;
        self.state[cid as usize] = State::Taken;
        Some(cid)
    }
    /// Gives back a CID taken with [`Cids::alloc`] and never submitted;
    /// any other CID is left as it is.
    pub fn release(&mut self, cid: u16) {
        if let Some(s) = self.state.get_mut(cid as usize) {
            if *s == State::Taken {
                *s = State::Free;
                self.free.push(cid);
            }
        }
    }
    /// Whether `cid` is in flight (false out of range).
    pub fn in_flight(&self, cid: u16) -> bool {
        self.state.get(cid as usize) == Some(&State::InFlight)
    }
    /// Whether any command is in flight.
    pub fn any_in_flight(&self) -> bool {
        self.state.contains(&State::InFlight)
    }
    /// Marks `cid` in flight; a CID submitted without [`Cids::alloc`]
    /// leaves the free list. The caller has checked that `cid` is in range
    /// and not in flight; anything else is ignored.
    pub fn start(&mut self, cid: u16) {
        let Some(s) = self.state.get_mut(cid as usize) else {
            return;
        };
        match *s {
            State::InFlight => return,
            State::Taken => {}
            State::Free => {
                if let Some(i) = self.free.iter().rposition(|&c| c == cid) {
                    self.free.swap_remove(i);
                }
            }
        }
        *s = State::InFlight;
    }
    /// The command on `cid` finished: the CID is free again. Ignored unless
    /// `cid` is in flight.
    pub fn finish(&mut self, cid: u16) {
        if let Some(s) = self.state.get_mut(cid as usize) {
            if *s == State::InFlight {
                *s = State::Free;
                self.free.push(cid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cids;

    #[test]
    fn alloc_release_start_finish() {
        let mut c = Cids::new(3);
        assert_eq!((c.depth(), c.outstanding()), (3, 0));
        assert_eq!(c.alloc(), Some(0));
        assert_eq!(c.alloc(), Some(1));
        assert_eq!(c.outstanding(), 2);
        // Released before submission: free again, handed out next.
        c.release(1);
        assert_eq!(c.outstanding(), 1);
        assert_eq!(c.alloc(), Some(1));
        c.start(0);
        assert!(c.in_flight(0) && !c.in_flight(1) && c.any_in_flight());
        // An in-flight CID cannot be released, only finished.
        c.release(0);
        assert!(c.in_flight(0));
        c.finish(0);
        assert!(!c.in_flight(0));
        c.finish(0);
        assert_eq!(c.outstanding(), 1);
        // Submitted without alloc: it leaves the free list.
        c.start(2);
        assert_eq!(c.outstanding(), 2);
        assert_eq!(c.alloc(), Some(0));
        assert_eq!(c.alloc(), None);
        c.finish(2);
        c.release(1);
        c.release(0);
        assert_eq!((c.outstanding(), c.any_in_flight()), (0, false));
        // Out of range: ignored.
        c.start(7);
        c.finish(7);
        c.release(7);
        assert!(!c.in_flight(7));
        assert_eq!(Cids::new(0).depth(), 1);
    }
}
