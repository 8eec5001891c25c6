//! `farflash perf`: fio-style workloads on a local file/block device
//! (`--filename`, the io_uring baseline) or a remote NVMe/TCP namespace
//! (`-t tcp|rdma -a ADDR -s PORT -n NQN`). Option names and meanings follow fio.

use super::discover::{FabricsArgs, OutputFormat, IO_PORT};
use anyhow::{bail, Context};
use farflash_bench::engine::iscsi::IscsiTarget;
use farflash_bench::size::{block_sizes, parse_size};
use farflash_bench::{JobSpec, PollMode, Rw, Target};
use std::io::IsTerminal;
use std::time::Duration;

#[derive(clap::Args, Debug, Default)]
pub struct PerfArgs {
    /// Local file or block device (the local baseline) instead of a remote namespace.
    #[arg(long = "filename")]
    pub filename: Option<std::path::PathBuf>,
    /// With --filename: 1 = O_DIRECT required, 0 = page cache (default: O_DIRECT where supported).
    #[arg(long = "direct")]
    pub direct: Option<u8>,
    /// An iSCSI LUN instead (the sweep's baseline, through libiscsi):
    /// iscsi://HOST:PORT/TARGET-IQN/LUN, one session per job.
    #[arg(long = "iscsi", value_name = "URL")]
    pub iscsi: Option<String>,
    /// With --iscsi: the initiator name to log in with.
    #[arg(long = "initiator", value_name = "IQN")]
    pub initiator: Option<String>,
    #[command(flatten)]
    pub fabrics: FabricsArgs,
    /// Subsystem NQN (remote).
    #[arg(short = 'n', long = "nqn")]
    pub nqn: Option<String>,
    /// Namespace ID (remote).
    #[arg(long = "nsid", default_value_t = 1)]
    pub nsid: u32,
    /// read, write, randread, randwrite, rw (readwrite), randrw.
    #[arg(long = "rw", alias = "readwrite", default_value = "read")]
    pub rw: String,
    /// Percentage of reads in mixed workloads.
    #[arg(long = "rwmixread", default_value_t = 50)]
    pub rwmixread: u32,
    /// Block size (4k, 128K, ...).
    #[arg(long = "bs", alias = "blocksize")]
    pub bs: Option<String>,
    /// Block size range MIN-MAX (e.g. 4k-256k), sizes in multiples of MIN.
    #[arg(long = "bsrange")]
    pub bsrange: Option<String>,
    /// Block size split SIZE/PCT:SIZE/PCT... (e.g. 4k/50:64k/30:256k/20).
    #[arg(long = "bssplit")]
    pub bssplit: Option<String>,
    /// I/Os in flight per job.
    #[arg(long = "iodepth", default_value_t = 1)]
    pub iodepth: u16,
    /// Jobs: each its own thread and its own I/O queue.
    #[arg(long = "numjobs", default_value_t = 1)]
    pub numjobs: u32,
    /// Run for this long (time-based: 10, 10s, 500ms, 1m); without it, do --size once.
    #[arg(long = "runtime")]
    pub runtime: Option<String>,
    /// Accepted for fio compatibility: --runtime always means time-based here.
    #[arg(long = "time_based", alias = "time-based")]
    pub time_based: bool,
    /// At most this many I/Os a second per job, evenly spaced (fio's
    /// `rate_iops`; offers a load below saturation).
    #[arg(long = "rate_iops", alias = "rate-iops")]
    pub rate_iops: Option<u32>,
    /// Run this long before measuring.
    #[arg(long = "ramp_time", alias = "ramp-time")]
    pub ramp_time: Option<String>,
    /// Bytes of the region each job works on (default: the device from --offset).
    #[arg(long = "size")]
    pub size: Option<String>,
    /// Start of the region.
    #[arg(long = "offset", default_value = "0")]
    pub offset: String,
    /// `crc32c`: write the region with a self-checking pattern, then read it back.
    #[arg(long = "verify")]
    pub verify: Option<String>,
    /// CPUs the job threads may run on (1, 0-1, 0,2).
    #[arg(long = "cpus-allowed", alias = "cpus_allowed")]
    pub cpus_allowed: Option<String>,
    /// How job threads wait for completions: hybrid (the default: busy-poll, sleeping on a precise timeout through the part of a gap it expects to be long, as the target's --poll hybrid), spin (busy-poll) or block.
    #[arg(long = "poll", default_value = "hybrid")]
    pub poll: String,
    /// Seed for offsets and data (default: from the clock).
    #[arg(long = "randseed")]
    pub randseed: Option<u64>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

/// `10` (seconds), `10s`, `500ms`, `2m`, `1h`, `250us`.
fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().with_context(|| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => bail!("bad duration unit in {s:?}"),
    };
    if !(0.0..1e9).contains(&secs) {
        bail!("duration {s:?} out of range");
    }
    Ok(Duration::from_secs_f64(secs))
}

fn spec(a: &PerfArgs) -> anyhow::Result<JobSpec> {
    if a.initiator.is_some() && a.iscsi.is_none() {
        bail!("--initiator is for --iscsi");
    }
    let target = match (&a.filename, &a.fabrics.traddr) {
        _ if a.iscsi.is_some() && (a.filename.is_some() || a.fabrics.traddr.is_some()) => {
            bail!("give one of --filename, -a/--traddr or --iscsi")
        }
        (None, None) if a.iscsi.is_some() => {
            let url = a.iscsi.as_deref().unwrap_or_default();
            let mut t = IscsiTarget::parse(url)?;
            if let Some(i) = &a.initiator {
                t.initiator = i.clone();
            }
            Target::Iscsi(t)
        }
        (Some(_), Some(_)) => bail!("give either --filename or -a/--traddr, not both"),
        (Some(p), None) => Target::Local {
            path: p.clone(),
            direct: a.direct.map(|d| d != 0),
        },
        (None, Some(_)) => {
            let nqn = a.nqn.as_deref().context("remote perf needs -n/--nqn")?;
            let mut opts = a.fabrics.options(nqn, IO_PORT)?;
            // Queues run flat out: allow plenty of time before calling a command lost.
            opts.command_timeout = Duration::from_secs(30);
            Target::Remote { opts, nsid: a.nsid }
        }
        (None, None) => {
            bail!("give --filename PATH, -t tcp|rdma -a ADDR -s PORT -n NQN or --iscsi URL")
        }
    };
    let rw = Rw::parse(&a.rw).with_context(|| format!("unknown --rw {:?}", a.rw))?;
    let verify = match a.verify.as_deref() {
        None | Some("0") | Some("none") => false,
        Some("crc32c") => true,
        Some(v) => bail!("--verify={v}: only crc32c is supported"),
    };
    if a.iodepth == 0 || a.numjobs == 0 {
        bail!("--iodepth and --numjobs must be at least 1");
    }
    if a.rwmixread > 100 {
        bail!("--rwmixread must be 0..=100");
    }
    if a.rate_iops == Some(0) {
        bail!("--rate_iops must be at least 1");
    }
    Ok(JobSpec {
        target,
        rw,
        rwmixread: a.rwmixread,
        bs: block_sizes(a.bs.as_deref(), a.bsrange.as_deref(), a.bssplit.as_deref())?,
        iodepth: a.iodepth,
        numjobs: a.numjobs,
        runtime: a.runtime.as_deref().map(parse_duration).transpose()?,
        ramp_time: a
            .ramp_time
            .as_deref()
            .map(parse_duration)
            .transpose()?
            .unwrap_or_default(),
        size: a.size.as_deref().map(parse_size).transpose()?,
        offset: parse_size(&a.offset)?,
        verify,
        cpus_allowed: a
            .cpus_allowed
            .as_deref()
            .map(farflash_bench::cpus::parse_cpu_list)
            .transpose()?,
        poll: match a.poll.as_str() {
            "hybrid" => PollMode::Hybrid,
            "spin" => PollMode::Spin,
            "block" => PollMode::Block,
            p => bail!("--poll={p}: expected hybrid, spin or block"),
        },
        rate_iops: a.rate_iops,
        seed: a.randseed.unwrap_or_else(farflash_bench::rng::time_seed),
        progress: a.output_format == OutputFormat::Normal && std::io::stdout().is_terminal(),
    })
}

pub fn run(args: PerfArgs) -> anyhow::Result<()> {
    let spec = spec(&args)?;
    let r = farflash_bench::run(&spec)?;
    let text = match args.output_format {
        OutputFormat::Normal => farflash_bench::report::text::report(&spec, &r),
        OutputFormat::Json => {
            serde_json::to_string_pretty(&farflash_bench::report::json::report(&spec, &r))? + "\n"
        }
    };
    // A closed pipe (e.g. `| head`) is not worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    if r.total.verify_errors > 0 {
        bail!(
            "verify failed: {} mismatching blocks (listed on stderr)",
            r.total.verify_errors
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("5d").is_err());
    }
}
