//! What bring-up learnt about a controller (CAP, VS, Identify, granted queues).

use farflash_wire::identify::{IdCtrl, CNTRLTYPE_DISCOVERY};
use farflash_wire::props;
use std::time::Duration;

/// What bring-up learnt about the controller.
#[derive(Clone, Debug)]
pub struct ControllerInfo {
    pub cntlid: u16,
    pub cap: u64,
    pub vs: u32,
    pub id: IdCtrl,
    /// I/O queues the controller granted (Set Features Number of Queues);
    /// 0 for a discovery controller.
    pub io_queues: u16,
    /// MAXH2CDATA of the admin connection's ICResp (NVMe/TCP; 0 on RDMA).
    pub maxh2cdata: u32,
}

impl ControllerInfo {
    /// CAP.TO in 500 ms units (Base §3.1.3.1), at least 500 ms.
    pub fn ready_timeout(&self) -> Duration {
        Duration::from_millis(500 * (props::cap_to(self.cap).max(1) as u64))
    }
    /// Memory page size CAP.MPSMIN (the unit of MDTS).
    pub fn page_size(&self) -> u64 {
        4096u64 << ((self.cap >> 48) & 0xF)
    }
    /// Largest I/O queue depth: CAP.MQES+1, bounded by MAXCMD when set.
    pub fn max_queue_depth(&self) -> u16 {
        let mqes = props::cap_mqes(self.cap) as u32 + 1;
        let d = if self.id.maxcmd > 0 {
            mqes.min(self.id.maxcmd as u32)
        } else {
            mqes
        };
        d.min(u16::MAX as u32) as u16
    }
    /// Largest data transfer of one command (MDTS; 0 = unlimited, capped at 32 MiB here).
    pub fn max_transfer(&self) -> u32 {
        const CAP: u64 = 32 << 20;
        if self.id.mdts == 0 || self.id.mdts > 20 {
            return CAP as u32;
        }
        (self.page_size() << self.id.mdts).min(CAP) as u32
    }
    /// Largest write sent in-capsule on I/O queues: IOCCSZ*16 - 64 (Base §5.17 "IOCCSZ";
    /// TCP §3.3.1 Figure "NVMe/TCP Capsule Size").
    pub fn icd_max(&self) -> u32 {
        self.id.ioccsz.saturating_mul(16).saturating_sub(64)
    }
    pub fn is_discovery(&self) -> bool {
        self.id.cntrltype == CNTRLTYPE_DISCOVERY
    }
}
