//! farflash-bench: the engine behind `farflash perf`.
//!
//! fio's vocabulary ([`spec::JobSpec`]: rw, bs/bsrange/bssplit, iodepth,
//! numjobs, runtime, ramp_time, size, offset, verify=crc32c,
//! cpus_allowed) over two engines: a remote NVMe/TCP namespace (one
//! farflash-host I/O queue per job) or a local file/block device (the
//! backend crate's io_uring queue). Each job thread records completion
//! latency in its own HDR histogram; histograms merge at the end. CPU is
//! accounted per thread and process (getrusage) and system-wide
//! (/proc/stat, mpstat's split) over the measured interval.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod ats;
pub mod cpu;
pub mod cpus;
pub mod engine;
pub mod job;
pub mod report;
pub mod rng;
pub mod run;
pub mod size;
pub mod spec;
pub mod stats;
pub mod verify;
pub mod workload;

pub use run::{run, RunResult};
pub use spec::{JobSpec, PollMode, Rw, Target};
