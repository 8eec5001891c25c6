//! The method table against docs/rpc-schema.json and against the
//! parameter structs its handlers parse.

use super::*;
use std::collections::BTreeSet;

fn schema() -> Value {
    serde_json::from_str(include_str!("../../../../docs/rpc-schema.json"))
        .expect("docs/rpc-schema.json is JSON")
}

fn api() -> Api {
    let cfg = farflash_core::config::Config::default();
    let subs = farflash_control::build_subsystems(&cfg).expect("the default configuration builds");
    Api::new(Target::new(subs, cfg.transport, Vec::new()))
}

#[test]
fn the_schema_documents_every_method_as_the_table_declares_it() {
    let doc = schema();
    let methods = doc["methods"].as_array().expect("methods is an array");
    let names: Vec<&str> = methods.iter().filter_map(|m| m["name"].as_str()).collect();
    assert_eq!(names, super::names(), "docs/rpc-schema.json's methods");
    for (m, def) in methods.iter().zip(all()) {
        assert_eq!(m["summary"].as_str(), Some(def.summary()), "{}", def.name());
        let documented: Vec<(&str, bool)> = (m["params"].as_array().into_iter().flatten())
            .map(|p| {
                let name = p["name"].as_str().unwrap_or("?");
                (name, p["required"].as_bool().unwrap_or(false))
            })
            .collect();
        let declared: Vec<(&str, bool)> = def
            .params()
            .iter()
            .map(|p| (p.name(), p.required()))
            .collect();
        assert_eq!(documented, declared, "{}'s params", def.name());
    }
}

#[test]
fn the_schema_documents_every_error_code() {
    let doc = schema();
    let codes: Vec<i64> = (doc["components"]["errors"]
        .as_object()
        .into_iter()
        .flatten())
    .filter_map(|(_, e)| e["code"].as_i64())
    .collect();
    for c in [
        jsonrpc::PARSE_ERROR,
        jsonrpc::INVALID_REQUEST,
        jsonrpc::METHOD_NOT_FOUND,
        jsonrpc::INVALID_PARAMS,
        jsonrpc::NOT_FOUND,
        jsonrpc::EXISTS,
        jsonrpc::INVALID_CONFIG,
        jsonrpc::FAILED,
        jsonrpc::LIMIT_EXCEEDED,
        jsonrpc::IN_USE,
        jsonrpc::NO_SPACE,
        jsonrpc::CONFLICT,
    ] {
        assert!(codes.contains(&c), "{c} undocumented");
    }
}

/// The field names serde lists after "expected one of" (or "expected") in
/// an unknown-field error.
fn expected_fields(message: &str) -> Option<BTreeSet<String>> {
    let (_, list) = message.split_once("expected")?;
    let fields = list.split('`').skip(1).step_by(2).map(str::to_owned);
    Some(fields.collect())
}

#[test]
fn each_method_accepts_exactly_the_params_it_declares() {
    let api = api();
    for def in all() {
        let declared: BTreeSet<String> = def.params().iter().map(|p| p.name().into()).collect();
        let probe = json!({"zz_not_a_param": 1});
        let message = match def.call(&api, &probe) {
            Ok(_) => {
                // Only a method without parameters may ignore them.
                assert!(declared.is_empty(), "{} took an unknown param", def.name());
                continue;
            }
            Err(e) => e.message,
        };
        if def.name() == "qos_set" {
            // Its NQN is taken out first; the rest is a QoS entry, whose
            // fields the schema test above checks.
            assert!(message.contains("nqn"), "{message}");
            continue;
        }
        assert!(
            message.contains("zz_not_a_param"),
            "{}: {message}",
            def.name()
        );
        match expected_fields(&message) {
            Some(fields) => assert_eq!(fields, declared, "{}", def.name()),
            None => assert!(declared.is_empty(), "{}: {message}", def.name()),
        }
    }
}

#[test]
fn an_unknown_method_is_refused_and_printed_as_a_change() {
    let req = Request {
        id: None,
        method: "no_such_method".into(),
        params: json!({}),
    };
    let e = api().call(&req).expect_err("no such method");
    assert_eq!(e.code, jsonrpc::METHOD_NOT_FOUND);
    let mut out = Vec::new();
    print_human(&mut out, "no_such_method", &json!({})).expect("printing to a Vec");
    assert_eq!(out, b"ok (nothing changed)\n");
}

#[test]
fn rpc_methods_answers_the_table_and_dispatch_finds_each_method() {
    let api = api();
    let listed = find("rpc_methods")
        .expect("rpc_methods is declared")
        .call(&api, &json!({}))
        .expect("rpc_methods answers");
    assert_eq!(listed, json!(names()));
    let mut seen = BTreeSet::new();
    for name in names() {
        assert!(seen.insert(name), "{name} is declared twice");
        assert_eq!(find(name).map(|m| m.name()), Some(name));
    }
    let stats = api
        .call(&Request {
            id: None,
            method: "stats".into(),
            params: json!({}),
        })
        .expect("stats answers");
    assert_eq!(stats["controllers"], json!(0));
}
