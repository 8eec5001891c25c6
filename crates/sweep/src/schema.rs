//! A small JSON Schema validator for the keywords `results.schema.json`
//! uses (`type`, `required`, `properties`, `additionalProperties: false`,
//! `items`, `minItems`, `enum`, `const`, `minimum`, `anyOf`, local `$ref`),
//! so that a results folder can be checked without extra dependencies.
//! Any draft 2020-12 validator accepts the same documents.

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Validates `doc` against `schema`; the error lists the first problems.
pub fn validate(schema: &Value, doc: &Value) -> Result<()> {
    let mut errs = Vec::new();
    check(schema, schema, doc, "$", &mut errs)?;
    if !errs.is_empty() {
        let n = errs.len();
        errs.truncate(10);
        bail!("{n} schema violation(s): {}", errs.join("; "));
    }
    Ok(())
}

/// Validates a `results.json` text against the built-in schema.
pub fn validate_results(json_text: &str) -> Result<()> {
    let schema: Value = serde_json::from_str(crate::results::SCHEMA_JSON)?;
    let doc: Value = serde_json::from_str(json_text).context("results.json is not JSON")?;
    validate(&schema, &doc)
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_u64() || v.is_i64(),
        _ => false,
    }
}

fn resolve<'a>(root: &'a Value, r: &str) -> Result<&'a Value> {
    let ptr = r
        .strip_prefix('#')
        .with_context(|| format!("only local $ref is supported: {r}"))?;
    root.pointer(ptr)
        .with_context(|| format!("$ref {r} not found"))
}

fn check(root: &Value, s: &Value, v: &Value, at: &str, errs: &mut Vec<String>) -> Result<()> {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        return check(root, resolve(root, r)?, v, at, errs);
    }
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        let ok = any.iter().any(|sub| {
            let mut e = Vec::new();
            check(root, sub, v, at, &mut e).is_ok() && e.is_empty()
        });
        if !ok {
            errs.push(format!("{at}: matches no anyOf branch"));
        }
    }
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)),
            _ => true,
        };
        if !ok {
            errs.push(format!("{at}: expected type {t}, got {v}"));
            return Ok(());
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            errs.push(format!("{at}: expected {c}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errs.push(format!("{at}: {v} not in {}", Value::Array(e.clone())));
        }
    }
    if let (Some(min), Some(x)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            errs.push(format!("{at}: {x} < minimum {min}"));
        }
    }
    if let Some(o) = v.as_object() {
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(k) = r.as_str() {
                if !o.contains_key(k) {
                    errs.push(format!("{at}: missing {k}"));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, val) in o {
            match props.and_then(|p| p.get(k)) {
                Some(sub) => check(root, sub, val, &format!("{at}.{k}"), errs)?,
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    errs.push(format!("{at}: unexpected property {k}"))
                }
                None => {}
            }
        }
    }
    if let Some(a) = v.as_array() {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
            if (a.len() as u64) < min {
                errs.push(format!("{at}: fewer than {min} items"));
            }
        }
        if let Some(items) = s.get("items") {
            for (i, x) in a.iter().enumerate() {
                check(root, items, x, &format!("{at}[{i}]"), errs)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keywords() {
        let s = json!({"$defs": {"n": {"type": "integer", "minimum": 1}},
            "type": "object", "required": ["a"], "additionalProperties": false,
            "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"type": "array", "minItems": 1,
                "items": {"enum": ["x", "y"]}}, "c": {"anyOf": [{"type": "null"}, {"const": 3}]}}});
        validate(&s, &json!({"a": 2, "b": ["x"], "c": null})).unwrap();
        validate(&s, &json!({"a": 2, "c": 3})).unwrap();
        assert!(validate(&s, &json!({"a": 0})).is_err());
        assert!(validate(&s, &json!({"b": ["x"]})).is_err());
        assert!(validate(&s, &json!({"a": 1, "b": []})).is_err());
        assert!(validate(&s, &json!({"a": 1, "b": ["z"]})).is_err());
        assert!(validate(&s, &json!({"a": 1, "d": 1})).is_err());
        assert!(validate(&s, &json!({"a": 1, "c": 4})).is_err());
        assert!(validate(&s, &json!({"a": 1.5})).is_err());
    }

    #[test]
    fn the_results_schema_is_json() {
        let s: Value = serde_json::from_str(crate::results::SCHEMA_JSON).unwrap();
        assert_eq!(s["properties"]["schema"]["const"], crate::results::SCHEMA);
    }
}
