//! Controller properties (Base §3.1.3 "Controller Properties"): offsets and
//! the CAP, CC and CSTS fields the enable/reset/shutdown sequence uses.

pub const CAP: u32 = 0x00;
pub const VS: u32 = 0x08;
pub const INTMS: u32 = 0x0C;
pub const INTMC: u32 = 0x10;
pub const CC: u32 = 0x14;
pub const CSTS: u32 = 0x1C;
pub const NSSR: u32 = 0x20;
pub const AQA: u32 = 0x24;
pub const ASQ: u32 = 0x28;
pub const ACQ: u32 = 0x30;
pub const CRTO: u32 = 0x68;

/// NVMe version 2.0.0 (VS register layout: major 31:16, minor 15:8).
pub const VERSION_2_0: u32 = 0x0002_0000;

/// Builds CAP (Base §3.1.3.1): MQES (0's based), CQR=1, TO (500 ms units),
/// CSS bit 37 (NVM command set), MPSMIN=MPSMAX=0 (4 KiB pages).
pub fn cap(mqes: u16, timeout_500ms: u8) -> u64 {
    mqes as u64 | 1 << 16 | (timeout_500ms as u64) << 24 | 1 << 37
}
pub fn cap_mqes(cap: u64) -> u16 {
    cap as u16
}
pub fn cap_to(cap: u64) -> u8 {
    (cap >> 24) as u8
}

/// CC fields (Base §3.1.3.5).
pub mod cc {
    pub const EN: u32 = 1;
    pub fn css(cc: u32) -> u32 {
        (cc >> 4) & 7
    }
    /// CC.CSS 000b: NVM Command Set.
    pub const CSS_NVM: u32 = 0b000;
    /// CC.CSS 110b: All Supported I/O Command Sets.
    pub const CSS_ALL_IO: u32 = 0b110;
    /// CC.CSS 111b: Admin Command Set only.
    pub const CSS_ADMIN_ONLY: u32 = 0b111;
    pub fn mps(cc: u32) -> u32 {
        (cc >> 7) & 0xF
    }
    pub fn ams(cc: u32) -> u32 {
        (cc >> 11) & 7
    }
    /// Shutdown Notification: 00b none, 01b normal, 10b abrupt.
    pub fn shn(cc: u32) -> u32 {
        (cc >> 14) & 3
    }
    pub fn iosqes(cc: u32) -> u32 {
        (cc >> 16) & 0xF
    }
    pub fn iocqes(cc: u32) -> u32 {
        (cc >> 20) & 0xF
    }
    /// What hosts write to enable: IOSQES=6 (64 B), IOCQES=4 (16 B), EN.
    pub const ENABLE_DEFAULT: u32 = 6 << 16 | 4 << 20 | EN;
    pub const SHN_NORMAL: u32 = 1 << 14;
}

/// CSTS fields (Base §3.1.3.6).
pub mod csts {
    pub const RDY: u32 = 1;
    pub const CFS: u32 = 1 << 1;
    /// Shutdown Status: 01b = shutdown processing occurring.
    pub const SHST_OCCURRING: u32 = 1 << 2;
    /// Shutdown Status: 10b = shutdown processing complete.
    pub const SHST_COMPLETE: u32 = 2 << 2;
    pub const SHST_MASK: u32 = 3 << 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_fields() {
        let c = cap(127, 20);
        assert_eq!(cap_mqes(c), 127);
        assert_eq!(cap_to(c), 20);
        assert_eq!(c >> 37 & 1, 1);
        assert_eq!(c >> 48 & 0xF, 0); // MPSMIN 4 KiB
        assert_eq!(cc::iosqes(cc::ENABLE_DEFAULT), 6);
        assert_eq!(cc::iocqes(cc::ENABLE_DEFAULT), 4);
        assert_eq!(cc::shn(cc::SHN_NORMAL), 1);
    }
}
