//! How `farflash ctl` prints the pool and volume methods' results.

use serde_json::Value;
use std::io::{Result, Write};

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        v => v.to_string(),
    }
}

/// Bytes with a binary unit, for people.
fn bytes(v: &Value) -> String {
    let Some(n) = v.as_u64() else {
        return s(v);
    };
    for (u, m) in [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if n >= m {
            return format!("{:.1}{u}", n as f64 / m as f64);
        }
    }
    format!("{n}B")
}

/// `pool_list` (an array) or `pool_create` (one pool).
pub fn pools(out: &mut dyn Write, r: &Value) -> Result<()> {
    let list = match r {
        Value::Array(a) => a.clone(),
        v => vec![v.clone()],
    };
    writeln!(
        out,
        "{:<16} {:<6} {:>8} {:>9} {:>9} {:>9} volumes",
        "pool", "kind", "cluster", "size", "allocated", "free"
    )?;
    for p in &list {
        writeln!(
            out,
            "{:<16} {:<6} {:>8} {:>9} {:>9} {:>9} {}",
            s(&p["name"]),
            s(&p["backend"]),
            bytes(&p["cluster_size"]),
            bytes(&p["size"]),
            bytes(&p["allocated"]),
            bytes(&p["free"]),
            s(&p["volumes"])
        )?;
    }
    Ok(())
}

/// `pool_delete`, `volume_delete`.
pub fn deleted(out: &mut dyn Write, r: &Value) -> Result<()> {
    match r["data_kept"].as_bool() {
        Some(true) => writeln!(
            out,
            "pool {} closed (its devices keep the data)",
            s(&r["deleted"])
        ),
        _ => writeln!(out, "{} deleted", s(&r["deleted"])),
    }
}

fn header(out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{:<24} {:<8} {:>9} {:>9} {:>9}  {:<8} {:<16} {:<16} uuid",
        "volume", "kind", "size", "allocated", "shared", "exported", "parent", "clones"
    )
}

fn line(out: &mut dyn Write, v: &Value) -> Result<()> {
    let kind = match v["snapshot"].as_bool() {
        Some(true) => "snapshot",
        _ => "volume",
    };
    let clones: Vec<String> = v["clones"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    let clones = match clones.is_empty() {
        true => "-".to_owned(),
        false => clones.join(","),
    };
    let exported = match v["exported"].as_bool() {
        Some(true) => "yes",
        _ => "no",
    };
    writeln!(
        out,
        "{:<24} {:<8} {:>9} {:>9} {:>9}  {:<8} {:<16} {:<16} {}",
        format!("{}/{}", s(&v["pool"]), s(&v["name"])),
        kind,
        bytes(&v["size"]),
        bytes(&v["allocated"]),
        bytes(&v["shared"]),
        exported,
        s(&v["parent"]),
        clones,
        s(&v["uuid"]),
    )
}

/// `volume_list`.
pub fn volumes(out: &mut dyn Write, r: &Value) -> Result<()> {
    header(out)?;
    for v in r.as_array().into_iter().flatten() {
        line(out, v)?;
    }
    Ok(())
}

/// One volume (`volume_get`, `volume_create`, ...), with the namespaces a
/// resize changed.
pub fn volume(out: &mut dyn Write, r: &Value) -> Result<()> {
    header(out)?;
    line(out, r)?;
    for c in r["namespaces_changed"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "{}: namespaces {} resized (hosts told)",
            s(&c["nqn"]),
            s(&c["nsids"])
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn volumes_print_one_line_each() {
        let v = json!({"pool": "p", "name": "db", "uuid": "u", "size": 1u64 << 30,
            "allocated": 3u64 << 20, "shared": 0, "parent": null, "snapshot": false,
            "clones": ["c1"], "exported": true});
        let mut out = Vec::new();
        volumes(&mut out, &json!([v])).unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = text.lines().nth(1).unwrap();
        for want in ["p/db", "1.0G", "3.0M", "yes", "c1"] {
            assert!(row.contains(want), "{row}");
        }
        let mut out = Vec::new();
        deleted(&mut out, &json!({"deleted": "tank", "data_kept": true})).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("keep the data"));
    }
}
