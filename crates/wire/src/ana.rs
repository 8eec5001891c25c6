//! Asymmetric Namespace Access (Base 2.0 §8.20): the ANA states and the
//! ANA log page (LID 0Ch, Base §5.16.1.12), laid out as Linux's
//! `struct nvme_ana_rsp_hdr` (16 bytes) and `struct nvme_ana_group_desc`
//! (32 bytes, followed by its NSIDs).

use crate::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};

/// ANA log page header: CHGCNT (u64), NGRPS (u16), reserved to 16 bytes.
pub const ANA_HDR_LEN: usize = 16;
/// One ANA Group Descriptor before its NSID list: ANAGRPID, NNSIDS,
/// CHGCNT, ANA state, reserved to 32 bytes.
pub const ANA_DESC_LEN: usize = 32;
/// Get Log Page LSP bit 0 for LID 0Ch: Return Groups Only (no NSIDs).
pub const LSP_RGO: u8 = 1;
/// Most ANA groups a subsystem has (ANAGRPMAX = NANAGRPID).
pub const ANAGRPMAX: u32 = 128;

/// ANA states (Base §8.20.3, the ANA state field of a group descriptor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AnaState {
    #[default]
    Optimized,
    NonOptimized,
    Inaccessible,
    PersistentLoss,
    Change,
}

impl AnaState {
    pub const ALL: [AnaState; 5] = [
        AnaState::Optimized,
        AnaState::NonOptimized,
        AnaState::Inaccessible,
        AnaState::PersistentLoss,
        AnaState::Change,
    ];

    /// The value in the log page (01h, 02h, 03h, 04h, 0Fh).
    pub const fn code(self) -> u8 {
        match self {
            AnaState::Optimized => 0x01,
            AnaState::NonOptimized => 0x02,
            AnaState::Inaccessible => 0x03,
            AnaState::PersistentLoss => 0x04,
            AnaState::Change => 0x0F,
        }
    }

    pub fn from_code(c: u8) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|s| s.code() == c)
    }

    /// The name in configurations and the management API (as Linux's
    /// sysfs `ana_state` spells them).
    pub const fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }

    pub fn from_name(s: &str) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|x| x.name() == s)
    }

    /// Whether commands that access the namespace's data run on a path in
    /// this state (Base §8.20.3.1-5: optimized and non-optimized do).
    pub const fn accessible(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }
}

/// One ANA group as the log page reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaGroup {
    pub anagrpid: u32,
    pub chgcnt: u64,
    pub state: AnaState,
    /// The group's NSIDs, ascending (left out with RGO).
    pub nsids: Vec<u32>,
}

/// The length of the log page for `groups` (NSIDs counted unless `rgo`).
pub fn ana_log_len(groups: &[AnaGroup], rgo: bool) -> usize {
    ANA_HDR_LEN
        + groups
            .iter()
            .map(|g| ANA_DESC_LEN + if rgo { 0 } else { 4 * g.nsids.len() })
            .sum::<usize>()
}

/// Writes the ANA log page into `b` (at least [`ana_log_len`] bytes).
/// With `rgo` (Return Groups Only) every NNSIDS is 0 and no NSID follows.
pub fn encode_ana_log(b: &mut [u8], chgcnt: u64, groups: &[AnaGroup], rgo: bool) {
    let len = ana_log_len(groups, rgo);
    b[..len].fill(0);
    put_u64(b, 0, chgcnt);
    put_u16(b, 8, groups.len() as u16);
    let mut off = ANA_HDR_LEN;
    for g in groups {
        put_u32(b, off, g.anagrpid);
        let n = if rgo { 0 } else { g.nsids.len() };
        put_u32(b, off + 4, n as u32);
        put_u64(b, off + 8, g.chgcnt);
        b[off + 16] = g.state.code();
        off += ANA_DESC_LEN;
        for &id in g.nsids.iter().take(n) {
            put_u32(b, off, id);
            off += 4;
        }
    }
}

/// Parses an ANA log page: (CHGCNT, groups); `None` when it is cut short
/// or names an unknown state.
pub fn decode_ana_log(b: &[u8]) -> Option<(u64, Vec<AnaGroup>)> {
    if b.len() < ANA_HDR_LEN {
        return None;
    }
    let chgcnt = u64_at(b, 0);
    let n = u16_at(b, 8) as usize;
    let mut off = ANA_HDR_LEN;
    let mut out = Vec::with_capacity(n.min(ANAGRPMAX as usize));
    for _ in 0..n {
        let d = b.get(off..off + ANA_DESC_LEN)?;
        let nn = u32_at(d, 4) as usize;
        let ids =
            b.get(off + ANA_DESC_LEN..(off + ANA_DESC_LEN).checked_add(nn.checked_mul(4)?)?)?;
        out.push(AnaGroup {
            anagrpid: u32_at(d, 0),
            chgcnt: u64_at(d, 8),
            state: AnaState::from_code(d[16])?,
            nsids: ids.chunks_exact(4).map(|c| u32_at(c, 0)).collect(),
        });
        off += ANA_DESC_LEN + 4 * nn;
    }
    Some((chgcnt, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of Linux's include/linux/nvme.h `struct nvme_ana_rsp_hdr`
    /// { __le64 chgcnt; __le16 ngrps; __le16 rsvd10[3]; } and
    /// `struct nvme_ana_group_desc` { __le32 grpid; __le32 nnsids; __le64
    /// chgcnt; __u8 state; __u8 rsvd17[15]; __le32 nsids[]; }, which
    /// drivers/nvme/host/multipath.c `nvme_parse_ana_log` walks.
    #[test]
    fn layout_matches_linux() {
        assert_eq!(ANA_HDR_LEN, 8 + 2 + 6);
        assert_eq!(ANA_DESC_LEN, 4 + 4 + 8 + 1 + 15);
        let groups = vec![
            AnaGroup {
                anagrpid: 1,
                chgcnt: 7,
                state: AnaState::Optimized,
                nsids: vec![1, 3],
            },
            AnaGroup {
                anagrpid: 2,
                chgcnt: 7,
                state: AnaState::Inaccessible,
                nsids: vec![2],
            },
        ];
        let len = ana_log_len(&groups, false);
        assert_eq!(len, 16 + 32 + 8 + 32 + 4);
        let mut b = vec![0xAAu8; len];
        encode_ana_log(&mut b, 7, &groups, false);
        assert_eq!(u64_at(&b, 0), 7);
        assert_eq!(u16_at(&b, 8), 2);
        assert_eq!(&b[10..16], &[0; 6]);
        assert_eq!(u32_at(&b, 16), 1);
        assert_eq!(u32_at(&b, 20), 2);
        assert_eq!(u64_at(&b, 24), 7);
        assert_eq!(b[32], 0x01);
        assert_eq!(&b[33..48], &[0; 15]);
        assert_eq!((u32_at(&b, 48), u32_at(&b, 52)), (1, 3));
        assert_eq!(u32_at(&b, 56), 2);
        assert_eq!(b[56 + 16], 0x03);
        assert_eq!(u32_at(&b, 88), 2);
        assert_eq!(decode_ana_log(&b), Some((7, groups.clone())));

        // RGO: descriptors only, NNSIDS 0.
        let len = ana_log_len(&groups, true);
        assert_eq!(len, 16 + 64);
        encode_ana_log(&mut b, 7, &groups, true);
        assert_eq!(u32_at(&b, 20), 0);
        assert_eq!(u32_at(&b, 48), 2);
        let (_, g) = decode_ana_log(&b[..len]).unwrap();
        assert!(g.iter().all(|g| g.nsids.is_empty()));
    }

    #[test]
    fn states_and_short_pages() {
        for s in AnaState::ALL {
            assert_eq!(AnaState::from_code(s.code()), Some(s));
            assert_eq!(AnaState::from_name(s.name()), Some(s));
        }
        assert_eq!(AnaState::Change.code(), 0x0F);
        assert_eq!(AnaState::from_code(5), None);
        assert!(!AnaState::Inaccessible.accessible());
        assert!(AnaState::NonOptimized.accessible());
        assert_eq!(decode_ana_log(&[0; 8]), None);
        let mut b = [0u8; 16];
        b[8] = 1; // one group announced, none present
        assert_eq!(decode_ana_log(&b), None);
        let mut b = [0u8; 48];
        b[8] = 1;
        b[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        b[32] = 1;
        assert_eq!(decode_ana_log(&b), None);
    }
}
