//! Byte sizes as configuration writes them (`512M`, `1G`, or plain bytes).

use serde::{Deserialize, Serialize};

/// A byte size written as a number or with a K/M/G/T suffix (powers of 1024).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SizeRepr", into = "u64")]
pub struct Size(pub u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Num(u64),
    Str(String),
}

impl TryFrom<SizeRepr> for Size {
    type Error = String;
    fn try_from(r: SizeRepr) -> Result<Size, String> {
        match r {
            SizeRepr::Num(n) => Ok(Size(n)),
            SizeRepr::Str(s) => s.parse(),
        }
    }
}

impl From<Size> for u64 {
    fn from(s: Size) -> u64 {
        s.0
    }
}

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        let t = s.trim();
        let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            None => (t, 1u64),
            Some((i, _)) => {
                let unit = t[i..].trim().to_ascii_uppercase();
                let m = match unit.trim_end_matches("IB").trim_end_matches('B') {
                    "" => 1,
                    "K" => 1 << 10,
                    "M" => 1 << 20,
                    "G" => 1 << 30,
                    "T" => 1 << 40,
                    _ => return Err(format!("bad size unit in {s:?} (use K, M, G, T)")),
                };
                (&t[..i], m)
            }
        };
        let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
        n.checked_mul(mult)
            .map(Size)
            .ok_or_else(|| format!("size {s:?} is too large"))
    }
}
