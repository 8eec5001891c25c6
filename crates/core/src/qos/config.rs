//! `[[subsystem.qos]]`: one entry per limited namespace or host.
//!
//! ```toml
//! [[subsystem.qos]]
//! nsid = 1                      # every host together, on namespace 1
//! rw_ios_per_sec = 20000
//! w_bytes_per_sec = "200M"      # sizes as elsewhere: K/M/G suffixes
//!
//! [[subsystem.qos]]
//! host = "nqn.2014-08.org.nvmexpress:uuid:…"   # all of one host's queues
//! weight = 2                    # fair-sharing weight (default 1)
//! r_ios_per_sec = 5000
//! burst_ms = 50                 # burst allowance (default 100 ms of each rate)
//! ```

use crate::size::Size;
use serde::{Deserialize, Serialize};

/// Upper bounds that keep the arithmetic exact and catch typos.
const MAX_IOS: u64 = 1_000_000_000;
const MAX_BYTES: u64 = 1 << 50;
const MAX_BURST_MS: u64 = 60_000;
const MAX_WEIGHT: u32 = 1000;

/// The limits of one entry; absent fields do not limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rw_ios_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_ios_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w_ios_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rw_bytes_per_sec: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_bytes_per_sec: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w_bytes_per_sec: Option<Size>,
    /// Tokens a bucket holds at most, as milliseconds of its rate (100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_ms: Option<u64>,
}

/// One `[[subsystem.qos]]` entry: `nsid` or `host`, the limits, a weight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Fair-sharing weight of the host (host entries only; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    // The limits, as in [`QosLimits`] (serde cannot flatten them into a
    // struct that refuses unknown fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rw_ios_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_ios_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w_ios_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rw_bytes_per_sec: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_bytes_per_sec: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w_bytes_per_sec: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_ms: Option<u64>,
}

/// What an entry governs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosKind<'a> {
    Namespace(u32),
    Host(&'a str),
}

impl QosLimits {
    /// The six rates, in the order [`crate::qos::Limiter`] keeps its
    /// buckets: rw, r, w I/Os; rw, r, w bytes.
    pub fn rates(&self) -> [Option<u64>; 6] {
        let b = |s: &Option<Size>| s.map(|s| s.0);
        [
            self.rw_ios_per_sec,
            self.r_ios_per_sec,
            self.w_ios_per_sec,
            b(&self.rw_bytes_per_sec),
            b(&self.r_bytes_per_sec),
            b(&self.w_bytes_per_sec),
        ]
    }

    pub fn is_empty(&self) -> bool {
        self.rates().iter().all(Option::is_none)
    }

    pub fn burst_ms(&self) -> u64 {
        self.burst_ms.unwrap_or(100)
    }

    /// Checks every field; the error names it.
    pub fn validate(&self) -> Result<(), String> {
        const NAMES: [&str; 6] = [
            "rw_ios_per_sec",
            "r_ios_per_sec",
            "w_ios_per_sec",
            "rw_bytes_per_sec",
            "r_bytes_per_sec",
            "w_bytes_per_sec",
        ];
        for (i, (name, v)) in NAMES.iter().zip(self.rates()).enumerate() {
            let max = if i < 3 { MAX_IOS } else { MAX_BYTES };
            match v {
                Some(0) => {
                    return Err(format!(
                        "{name} must be at least 1 (leave it out for no limit)"
                    ))
                }
                Some(v) if v > max => {
                    return Err(format!("{name} is {v}, above the largest accepted, {max}"))
                }
                _ => {}
            }
        }
        if let Some(b) = self.burst_ms {
            if !(1..=MAX_BURST_MS).contains(&b) {
                return Err(format!(
                    "burst_ms must be within 1..={MAX_BURST_MS}, not {b}"
                ));
            }
        }
        Ok(())
    }
}

impl QosConfig {
    /// An entry for `kind` with `limits`.
    pub fn new(kind: QosKind<'_>, weight: Option<u32>, l: &QosLimits) -> QosConfig {
        let (nsid, host) = match kind {
            QosKind::Namespace(n) => (Some(n), None),
            QosKind::Host(h) => (None, Some(h.to_owned())),
        };
        QosConfig {
            nsid,
            host,
            weight,
            rw_ios_per_sec: l.rw_ios_per_sec,
            r_ios_per_sec: l.r_ios_per_sec,
            w_ios_per_sec: l.w_ios_per_sec,
            rw_bytes_per_sec: l.rw_bytes_per_sec,
            r_bytes_per_sec: l.r_bytes_per_sec,
            w_bytes_per_sec: l.w_bytes_per_sec,
            burst_ms: l.burst_ms,
        }
    }

    /// The entry's limits.
    pub fn limits(&self) -> QosLimits {
        QosLimits {
            rw_ios_per_sec: self.rw_ios_per_sec,
            r_ios_per_sec: self.r_ios_per_sec,
            w_ios_per_sec: self.w_ios_per_sec,
            rw_bytes_per_sec: self.rw_bytes_per_sec,
            r_bytes_per_sec: self.r_bytes_per_sec,
            w_bytes_per_sec: self.w_bytes_per_sec,
            burst_ms: self.burst_ms,
        }
    }

    pub fn kind(&self) -> QosKind<'_> {
        match (&self.host, self.nsid) {
            (Some(h), _) => QosKind::Host(h),
            (None, n) => QosKind::Namespace(n.unwrap_or(0)),
        }
    }

    /// Checks the entry (after `validate`, `kind` is one or the other).
    pub fn validate(&self) -> Result<(), String> {
        match (&self.host, self.nsid) {
            (Some(_), Some(_)) => {
                return Err("a qos entry names either nsid or host, not both".into())
            }
            (None, None) => return Err("a qos entry needs nsid or host".into()),
            (None, Some(0)) | (None, Some(0xFFFF_FFFF)) => {
                return Err("qos nsid must be a namespace's NSID (1..=FFFFFFFEh)".into())
            }
            (Some(h), None) if h.is_empty() || h.len() > 223 => {
                return Err("qos host must be a host NQN (1 to 223 bytes)".into())
            }
            _ => {}
        }
        match self.weight {
            Some(_) if self.host.is_none() => {
                return Err("weight applies to host entries only".into())
            }
            Some(w) if !(1..=MAX_WEIGHT).contains(&w) => {
                return Err(format!("weight must be within 1..={MAX_WEIGHT}, not {w}"))
            }
            _ => {}
        }
        self.limits().validate()
    }
}

/// `nsid=1,rw_ios_per_sec=1000,w_bytes_per_sec=10M` (the `--qos` flag):
/// the same keys as the TOML entry; the error names the key.
impl std::str::FromStr for QosConfig {
    type Err = String;
    fn from_str(s: &str) -> Result<QosConfig, String> {
        let mut c = QosConfig::default();
        for kv in s.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("{kv:?} is not KEY=VALUE"))?;
            let (k, v) = (k.trim(), v.trim());
            let int = |v: &str| -> Result<u64, String> {
                v.parse()
                    .map_err(|_| format!("{k} must be a whole number ≥ 1, not {v:?}"))
            };
            let size =
                |v: &str| -> Result<Size, String> { v.parse().map_err(|e| format!("{k}: {e}")) };
            let dup = match k {
                "nsid" => c
                    .nsid
                    .replace(u32::try_from(int(v)?).map_err(|_| format!("nsid {v} is too large"))?)
                    .is_some(),
                "host" => c.host.replace(v.to_owned()).is_some(),
                "weight" => c
                    .weight
                    .replace(
                        u32::try_from(int(v)?).map_err(|_| format!("weight {v} is too large"))?,
                    )
                    .is_some(),
                "rw_ios_per_sec" => c.rw_ios_per_sec.replace(int(v)?).is_some(),
                "r_ios_per_sec" => c.r_ios_per_sec.replace(int(v)?).is_some(),
                "w_ios_per_sec" => c.w_ios_per_sec.replace(int(v)?).is_some(),
                "rw_bytes_per_sec" => c.rw_bytes_per_sec.replace(size(v)?).is_some(),
                "r_bytes_per_sec" => c.r_bytes_per_sec.replace(size(v)?).is_some(),
                "w_bytes_per_sec" => c.w_bytes_per_sec.replace(size(v)?).is_some(),
                "burst_ms" => c.burst_ms.replace(int(v)?).is_some(),
                _ => return Err(format!("unknown key {k:?}")),
            };
            if dup {
                return Err(format!("{k} is given twice"));
            }
        }
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_form_parses_and_names_bad_keys() {
        let c: QosConfig = "host=nqn.h,weight=2,r_bytes_per_sec=10M".parse().unwrap();
        assert_eq!(c.kind(), QosKind::Host("nqn.h"));
        assert_eq!(c.r_bytes_per_sec, Some(Size(10 << 20)));
        assert_eq!(c.weight, Some(2));
        for (bad, key) in [
            ("nsid=1,rw_ios_per_sec=-1", "rw_ios_per_sec"),
            ("nsid=1,rw_ios_per_sec=1.5", "rw_ios_per_sec"),
            ("nsid=1,rw_ios_per_sec=0", "rw_ios_per_sec"),
            (
                "nsid=1,rw_ios_per_sec=99999999999999999999",
                "rw_ios_per_sec",
            ),
            ("nsid=1,iops=5", "iops"),
            ("nsid=1,nsid=2", "nsid"),
            ("nsid=5000000000", "nsid"),
            ("nsid", "KEY=VALUE"),
        ] {
            let e = bad.parse::<QosConfig>().unwrap_err();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    fn parse(s: &str) -> Result<QosConfig, String> {
        let c: QosConfig = toml::from_str(s).map_err(|e| e.to_string())?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn good_entries_parse() {
        let c = parse("nsid = 1\nrw_ios_per_sec = 1000\nw_bytes_per_sec = \"10M\"").unwrap();
        assert_eq!(c.kind(), QosKind::Namespace(1));
        assert_eq!(
            c.limits().rates(),
            [Some(1000), None, None, None, None, Some(10 << 20)]
        );
        let c = parse("host = \"nqn.x\"\nweight = 3\nr_ios_per_sec = 5\nburst_ms = 20").unwrap();
        assert_eq!(c.kind(), QosKind::Host("nqn.x"));
        assert_eq!(c.limits().burst_ms(), 20);
    }

    /// Zero, negative, fractional, overflowing, unknown: each error names
    /// the field.
    #[test]
    fn bad_entries_name_the_field() {
        let rows = [
            ("nsid = 1\nrw_ios_per_sec = 0", "rw_ios_per_sec"),
            ("nsid = 1\nr_ios_per_sec = -5", "r_ios_per_sec"),
            ("nsid = 1\nw_ios_per_sec = 1.5", "w_ios_per_sec"),
            ("nsid = 1\nrw_ios_per_sec = 1000000000001", "rw_ios_per_sec"),
            (
                "nsid = 1\nrw_bytes_per_sec = \"9999999999T\"",
                "rw_bytes_per_sec",
            ),
            ("nsid = 1\nr_bytes_per_sec = \"lots\"", "r_bytes_per_sec"),
            ("nsid = 1\nburst_ms = 0", "burst_ms"),
            ("nsid = 1\nrw_iops = 5", "rw_iops"),
            ("nsid = 1\nhost = \"h\"", "not both"),
            ("rw_ios_per_sec = 5", "nsid or host"),
            ("nsid = 0", "nsid"),
            ("nsid = 1\nweight = 2", "weight"),
            ("host = \"h\"\nweight = 0", "weight"),
        ];
        for (text, field) in rows {
            match parse(text) {
                Ok(c) => panic!("{text:?} accepted: {c:?}"),
                Err(e) => assert!(e.contains(field), "{text:?}: {e}"),
            }
        }
    }
}
