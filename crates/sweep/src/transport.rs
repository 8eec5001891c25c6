//! The remote transports a sweep compares (`--transport tcp,rdma`) and
//! what a point measured: local, remote over NVMe/TCP, remote over
//! NVMe/RDMA.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// A fabric transport of the remote runs (`perf -t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Rdma,
}

impl Transport {
    /// `tcp` or `rdma`, as `perf -t` and nvme-cli spell it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }

    /// `NVMe/TCP` or `NVMe/RDMA`.
    pub fn title(self) -> &'static str {
        match self {
            Transport::Tcp => "NVMe/TCP",
            Transport::Rdma => "NVMe/RDMA",
        }
    }
}

/// The default of `Settings::transports` (results written before
/// `--transport` existed ran over TCP only).
pub fn tcp_only() -> Vec<Transport> {
    vec![Transport::Tcp]
}

/// Parses `--transport`: a comma list of `tcp` and `rdma`, each at most
/// once, in the order the remote runs of a point follow each other.
pub fn parse_transports(s: &str) -> Result<Vec<Transport>> {
    let mut v = Vec::new();
    for item in s.split(',') {
        let t = match item.trim() {
            "tcp" => Transport::Tcp,
            "rdma" => Transport::Rdma,
            "" => bail!("--transport {s:?}: an empty entry (expected tcp, rdma or tcp,rdma)"),
            other => bail!("--transport {s:?}: {other:?} is not tcp or rdma"),
        };
        if v.contains(&t) {
            bail!("--transport {s:?}: {} is given twice", t.name());
        }
        v.push(t);
    }
    Ok(v)
}

/// What a point measured; the series of the plots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// io_uring on the backing file.
    Local,
    /// NVMe/TCP to the target.
    Tcp,
    /// NVMe/RDMA to the target.
    Rdma,
}

impl Kind {
    /// Every kind, in the order the plots and tables show them.
    pub const ALL: [Kind; 3] = [Kind::Local, Kind::Tcp, Kind::Rdma];

    /// The kind of a remote run over `t`.
    pub fn remote(t: Transport) -> Kind {
        match t {
            Transport::Tcp => Kind::Tcp,
            Transport::Rdma => Kind::Rdma,
        }
    }

    /// The transport of a remote kind.
    pub fn transport(self) -> Option<Transport> {
        match self {
            Kind::Local => None,
            Kind::Tcp => Some(Transport::Tcp),
            Kind::Rdma => Some(Transport::Rdma),
        }
    }

    /// `local`, `remote tcp`, `remote rdma`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Tcp => "remote tcp",
            Kind::Rdma => "remote rdma",
        }
    }
}

/// µs of CPU per I/O: a side's busy CPU in % of all `nproc` CPUs over
/// `runtime_s` seconds, divided by the I/Os of that interval:
/// `busy / 100 × nproc × runtime_s / ios × 10⁶`. None without I/Os or time.
pub fn cpu_us_per_io(busy_pct: f64, nproc: usize, runtime_s: f64, ios: u64) -> Option<f64> {
    (ios > 0 && runtime_s > 0.0 && busy_pct.is_finite())
        .then(|| busy_pct / 100.0 * nproc as f64 * runtime_s / ios as f64 * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_parse() {
        assert_eq!(parse_transports("tcp").unwrap(), vec![Transport::Tcp]);
        assert_eq!(parse_transports("rdma").unwrap(), vec![Transport::Rdma]);
        assert_eq!(
            parse_transports("tcp,rdma").unwrap(),
            vec![Transport::Tcp, Transport::Rdma]
        );
        assert_eq!(
            parse_transports("rdma, tcp").unwrap(),
            vec![Transport::Rdma, Transport::Tcp]
        );
        let e = parse_transports("tcp,roce").unwrap_err().to_string();
        assert!(e.contains("\"roce\" is not tcp or rdma"), "{e}");
        let e = parse_transports("tcp,tcp").unwrap_err().to_string();
        assert!(e.contains("tcp is given twice"), "{e}");
        assert!(parse_transports("").is_err());
        assert!(parse_transports("tcp,").is_err());
        assert!(parse_transports("TCP").is_err());
    }

    #[test]
    fn kinds_and_transports() {
        for t in [Transport::Tcp, Transport::Rdma] {
            assert_eq!(Kind::remote(t).transport(), Some(t));
        }
        assert_eq!(Kind::Local.transport(), None);
        let j = serde_json::to_string(&Transport::Rdma).unwrap();
        assert_eq!(j, "\"rdma\"");
        assert_eq!(
            serde_json::from_str::<Transport>("\"tcp\"").unwrap(),
            Transport::Tcp
        );
    }

    #[test]
    fn cpu_per_io_arithmetic() {
        // 25% of 4 CPUs for 2 s = 2 CPU-seconds over 100 000 I/Os = 20 µs.
        let v = cpu_us_per_io(25.0, 4, 2.0, 100_000).unwrap();
        assert!((v - 20.0).abs() < 1e-9, "{v}");
        // 50% of 2 CPUs for 0.3 s = 0.3 CPU-s over 3000 I/Os = 100 µs.
        let v = cpu_us_per_io(50.0, 2, 0.3, 3000).unwrap();
        assert!((v - 100.0).abs() < 1e-9, "{v}");
        assert_eq!(cpu_us_per_io(10.0, 2, 1.0, 0), None);
        assert_eq!(cpu_us_per_io(10.0, 2, 0.0, 5), None);
        assert_eq!(cpu_us_per_io(0.0, 2, 1.0, 5), Some(0.0));
    }
}
