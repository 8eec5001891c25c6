//! What to run: a fio-like job description.

use crate::engine::iscsi::IscsiTarget;
use crate::size::BlockSizes;
use farflash_host::ConnectOptions;
use std::path::PathBuf;
use std::time::Duration;

/// fio's `--rw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rw {
    Read,
    Write,
    RandRead,
    RandWrite,
    /// Sequential mixed (fio `rw`/`readwrite`).
    ReadWrite,
    RandRw,
}

impl Rw {
    pub fn parse(s: &str) -> Option<Rw> {
        Some(match s {
            "read" => Rw::Read,
            "write" => Rw::Write,
            "randread" => Rw::RandRead,
            "randwrite" => Rw::RandWrite,
            "rw" | "readwrite" => Rw::ReadWrite,
            "randrw" => Rw::RandRw,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::ReadWrite => "rw",
            Rw::RandRw => "randrw",
        }
    }
    pub fn random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite | Rw::RandRw)
    }
    /// Percentage of reads given `rwmixread`.
    pub fn read_pct(self, rwmixread: u32) -> u32 {
        match self {
            Rw::Read | Rw::RandRead => 100,
            Rw::Write | Rw::RandWrite => 0,
            Rw::ReadWrite | Rw::RandRw => rwmixread.min(100),
        }
    }
}

/// Where the I/O goes.
#[derive(Clone, Debug)]
pub enum Target {
    /// A local file or block device through the backend's io_uring engine;
    /// `direct`: O_DIRECT required (true), never (false), or where supported (None).
    Local { path: PathBuf, direct: Option<bool> },
    /// A namespace of a remote NVMe/TCP subsystem.
    Remote { opts: ConnectOptions, nsid: u32 },
    /// A LUN of an iSCSI target (libiscsi; one session per job).
    Iscsi(IscsiTarget),
}

/// How job threads wait for completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PollMode {
    /// The default: busy-poll, but sleep on a precise timeout through the
    /// part of a gap between completions that the recent gaps promise to
    /// be long against the wake-up cost (the target's `--poll hybrid`
    /// decision, `farflash-nap`; a host whose queue cannot sleep that
    /// precisely, NVMe/RDMA, spins), and until a paced job's next I/O.
    #[default]
    Hybrid,
    /// Busy-poll (non-blocking receive in a loop), like SPDK's perf.
    Spin,
    /// Sleep in poll(2) until something arrives.
    Block,
}

#[derive(Clone, Debug)]
pub struct JobSpec {
    pub target: Target,
    pub rw: Rw,
    pub rwmixread: u32,
    pub bs: BlockSizes,
    pub iodepth: u16,
    pub numjobs: u32,
    /// Time-based run length; `None` = do `size` bytes once.
    pub runtime: Option<Duration>,
    pub ramp_time: Duration,
    /// Bytes of the region (default: device size minus offset).
    pub size: Option<u64>,
    pub offset: u64,
    /// crc32c verify: write the region with a self-checking pattern, read it back.
    pub verify: bool,
    /// CPUs the job threads may run on.
    pub cpus_allowed: Option<Vec<usize>>,
    pub poll: PollMode,
    /// fio's `rate_iops`: at most this many I/Os a second per job, issued
    /// evenly spaced (fio's default `rate_process=linear`); None: as fast
    /// as completions allow.
    pub rate_iops: Option<u32>,
    pub seed: u64,
    /// Print a live progress line (stdout is a terminal and output is not JSON).
    pub progress: bool,
}
