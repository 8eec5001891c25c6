//! How `farflash ctl` prints each method's result as text (`--json`
//! prints the result as the target sent it). A method's [`MethodDef`]
//! names its printer; [`change`] is the default, for the methods that
//! change the target and answer with a reload report.
//!
//! [`MethodDef`]: super::MethodDef

use serde_json::Value;
use std::io::{Result, Write};

/// A JSON value as text: strings bare, null as `-`.
fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        v => v.to_string(),
    }
}

/// A change: what it did, line by line (a reload report, with `nsid` for
/// `namespace_add`).
pub fn change(out: &mut dyn Write, r: &Value) -> Result<()> {
    let mut said = false;
    if let Some(n) = r.get("nsid") {
        writeln!(out, "namespace {} added", s(n))?;
        said = true;
    }
    for c in r["namespaces_changed"].as_array().into_iter().flatten() {
        if r.get("nsid").is_none() {
            writeln!(
                out,
                "{}: namespaces changed: {}",
                s(&c["nqn"]),
                s(&c["nsids"])
            )?;
            said = true;
        }
    }
    for (k, what) in [
        ("subsystems_added", "subsystem added"),
        ("subsystems_removed", "subsystem removed"),
        ("hosts_changed", "allowed hosts changed"),
        ("qos_changed", "QoS limits changed"),
        ("ana_changed", "ANA states changed"),
        ("listeners_added", "listener added"),
        ("listeners_removed", "listener removed"),
        ("ignored", "not applied (restart to change)"),
    ] {
        for v in r[k].as_array().into_iter().flatten() {
            writeln!(out, "{what}: {}", s(v))?;
            said = true;
        }
    }
    if let Some(n) = r["controllers_disconnected"].as_u64().filter(|n| *n > 0) {
        writeln!(out, "controllers disconnected: {n}")?;
        said = true;
    }
    if !said {
        writeln!(out, "ok (nothing changed)")?;
    }
    Ok(())
}

/// The result as indented JSON.
pub fn json(out: &mut dyn Write, r: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    writeln!(out, "{text}")
}

/// An array, one element a line.
pub fn lines(out: &mut dyn Write, r: &Value) -> Result<()> {
    for v in r.as_array().into_iter().flatten() {
        writeln!(out, "{}", s(v))?;
    }
    Ok(())
}

pub fn subsystem_list(out: &mut dyn Write, r: &Value) -> Result<()> {
    for sub in r.as_array().into_iter().flatten() {
        let ro = sub["read_only_hosts"].as_array();
        let read_only = |h: &Value| ro.is_some_and(|r| r.contains(h));
        let hosts = sub["allowed_hosts"].as_array().map(|h| {
            h.iter()
                .map(|h| match read_only(h) {
                    true => format!("{} (read-only)", s(h)),
                    false => s(h),
                })
                .collect::<Vec<_>>()
                .join(", ")
        });
        let hosts = match hosts {
            Some(h) if !h.is_empty() => h,
            _ => "any host".to_owned(),
        };
        writeln!(
            out,
            "{}  serial {}  controllers {}  allowed: {hosts}",
            s(&sub["nqn"]),
            s(&sub["serial"]),
            s(&sub["controllers"])
        )?;
        for n in sub["namespaces"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "  nsid {:>3}  {:>14} bytes  {:>4}B blocks  {}  uuid {}",
                s(&n["nsid"]),
                s(&n["size"]),
                s(&n["block_size"]),
                s(&n["describe"]),
                s(&n["uuid"])
            )?;
        }
    }
    Ok(())
}

pub fn ana_state_get(out: &mut dyn Write, r: &Value) -> Result<()> {
    for a in r.as_array().into_iter().flatten() {
        writeln!(
            out,
            "{} group {}: {} (namespaces {})",
            s(&a["listen"]),
            s(&a["anagrpid"]),
            s(&a["state"]),
            s(&a["nsids"])
        )?;
    }
    Ok(())
}

pub fn listener_list(out: &mut dyn Write, r: &Value) -> Result<()> {
    for l in r.as_array().into_iter().flatten() {
        writeln!(out, "{} {}", s(&l["trtype"]), s(&l["addr"]))?;
    }
    Ok(())
}

pub fn controller_list(out: &mut dyn Write, r: &Value) -> Result<()> {
    writeln!(
        out,
        "{:>6}  {:>9}  {:<40} host",
        "cntlid", "io_queues", "subsystem"
    )?;
    for c in r.as_array().into_iter().flatten() {
        writeln!(
            out,
            "{:>6}  {:>9}  {:<40} {}{}",
            s(&c["cntlid"]),
            s(&c["io_queues"]),
            s(&c["nqn"]),
            s(&c["host"]),
            if c["read_only"] == Value::Bool(true) {
                " (read-only)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

pub fn stats(out: &mut dyn Write, r: &Value) -> Result<()> {
    for sub in r["subsystems"].as_array().into_iter().flatten() {
        writeln!(out, "{}", s(&sub["nqn"]))?;
        for h in sub["hosts"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "  {}: reads {} ({} bytes), writes {} ({} bytes), in flight {}, errors {}",
                s(&h["host"]),
                s(&h["read_cmds"]),
                s(&h["read_bytes"]),
                s(&h["write_cmds"]),
                s(&h["write_bytes"]),
                s(&h["outstanding"]),
                s(&h["errors"])
            )?;
        }
    }
    writeln!(
        out,
        "controllers {}, keep-alive expiries {}",
        s(&r["controllers"]),
        s(&r["keep_alive_expiries"])
    )?;
    for w in r["workers"].as_array().into_iter().flatten() {
        let ms = w["slept_ns"].as_u64().unwrap_or(0) as f64 / 1e6;
        writeln!(
            out,
            "worker {}: timed sleeps {} ({} cut short), idle sleeps {}, asleep {ms:.1} ms",
            s(&w["worker"]),
            s(&w["timed_sleeps"]),
            s(&w["missed_sleeps"]),
            s(&w["idle_sleeps"]),
        )?;
    }
    Ok(())
}

pub fn save_config(out: &mut dyn Write, r: &Value) -> Result<()> {
    match r["path"].as_str() {
        Some(p) => writeln!(out, "saved to {p}"),
        None => {
            write!(out, "{}", r["toml"].as_str().unwrap_or(""))?;
            if r["secrets_redacted"].as_bool() == Some(true) {
                writeln!(
                    out,
                    "# DH-HMAC-CHAP secrets redacted: save to a file to keep them"
                )?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(f: fn(&mut dyn Write, &Value) -> Result<()>, v: Value) -> String {
        let mut out = Vec::new();
        f(&mut out, &v).expect("writing to a Vec");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn a_change_says_what_it_did_or_that_nothing_changed() {
        let r = json!({"namespaces_changed": [{"nqn": "nqn.a", "nsids": [1, 2]}],
            "subsystems_added": ["nqn.b"], "controllers_disconnected": 2, "ignored": []});
        assert_eq!(
            text(change, r),
            "nqn.a: namespaces changed: [1,2]\nsubsystem added: nqn.b\ncontrollers disconnected: 2\n"
        );
        let added = json!({"nsid": 7, "namespaces_changed": [{"nqn": "nqn.a", "nsids": [7]}]});
        assert_eq!(text(change, added), "namespace 7 added\n");
        assert_eq!(text(change, json!({})), "ok (nothing changed)\n");
    }

    #[test]
    fn lists_print_a_line_per_object_and_survive_odd_shapes() {
        let subs = json!([{"nqn": "nqn.a", "serial": "S1", "controllers": 1, "allowed_hosts": [],
            "namespaces": [{"nsid": 1, "size": 4096, "block_size": 512, "describe": "RAM", "uuid": "u"}]}]);
        let t = text(subsystem_list, subs);
        assert!(
            t.starts_with("nqn.a  serial S1  controllers 1  allowed: any host\n"),
            "{t}"
        );
        assert!(t.contains("nsid   1") && t.contains("RAM  uuid u"), "{t}");
        let ro = json!([{"nqn": "nqn.a", "serial": "S1", "controllers": 0,
            "allowed_hosts": ["nqn.h1", "nqn.h2"], "read_only_hosts": ["nqn.h2"]}]);
        assert!(
            text(subsystem_list, ro).contains("allowed: nqn.h1, nqn.h2 (read-only)\n"),
            "{}",
            text(subsystem_list, json!([]))
        );
        // A result of another shape prints what it can, without panicking.
        for f in [
            subsystem_list,
            ana_state_get,
            listener_list,
            controller_list,
            stats,
            save_config,
            lines,
        ] {
            text(f, json!("unexpected"));
            text(f, json!(null));
        }
        assert_eq!(text(save_config, json!({"path": "/x"})), "saved to /x\n");
    }
}
