//! `--autosave` through [`Api::call`]: what is written back, when, and a
//! failed write.

use crate::autosave::Autosave;
use crate::jsonrpc::Request;
use crate::methods::Api;
use farflash_core::config::Config;
use farflash_core::Target;
use serde_json::json;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn api(path: &Path) -> Api {
    let cfg = Config::from_toml("listen = ['127.0.0.1:4420']\n", "t").expect("a listener");
    let subs = farflash_control::build_subsystems(&cfg).expect("an empty target builds");
    let mut api = Api::new(Target::new(
        subs,
        cfg.transport,
        vec!["127.0.0.1:4420".parse().expect("an address")],
    ));
    api.autosave = Some(Autosave::new(path));
    api
}

fn call(api: &Api, method: &str, params: Value) -> Result<Value, crate::jsonrpc::RpcError> {
    api.call(&Request {
        id: None,
        method: method.into(),
        params,
    })
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("farflash-autosave-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a scratch directory");
    d
}

#[test]
fn changes_are_written_back_and_reads_write_nothing() {
    let dir = scratch("changes");
    let file = dir.join("farflash.toml");
    let api = api(&file);
    let nqn = "nqn.2026-11.io.farflash:autosave";
    call(&api, "subsystem_create", json!({"nqn": nqn})).expect("created");
    let text = std::fs::read_to_string(&file).expect("written after the change");
    let saved = Config::from_toml(&text, "autosave").expect("what serve --config reads");
    assert_eq!(saved.subsystems.len(), 1);
    assert_eq!(saved.subsystems[0].nqn, nqn);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file)
        .expect("the file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "it may hold keys");
    // A read, a failed change and a change to nothing saved leave the
    // file alone (removed here to see it is not written again).
    std::fs::remove_file(&file).expect("removed");
    call(&api, "subsystem_list", json!({})).expect("listed");
    let e = call(&api, "subsystem_create", json!({"nqn": nqn})).expect_err("exists");
    assert_eq!(e.code, crate::jsonrpc::EXISTS);
    call(&api, "controller_disconnect", json!({"cntlid": 1})).ok();
    assert!(!file.exists(), "nothing to write");
    // The next change writes the whole configuration again.
    call(&api, "subsystem_delete", json!({"nqn": nqn})).expect("deleted");
    let text = std::fs::read_to_string(&file).expect("written after the delete");
    let saved = Config::from_toml(&text, "autosave").expect("what serve --config reads");
    assert!(saved.subsystems.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_save_is_reported_and_the_change_stands() {
    let dir = scratch("failed");
    let file = dir.join("missing-dir").join("farflash.toml");
    let api = api(&file);
    let nqn = "nqn.2026-11.io.farflash:unsaved";
    let answer = call(&api, "subsystem_create", json!({"nqn": nqn})).expect("applied");
    let e = answer["autosave_error"]
        .as_str()
        .expect("the failure in the answer");
    assert!(e.contains("missing-dir"), "{e}");
    assert!(api.target.subsystems().iter().any(|s| s.nqn == nqn));
    let _ = std::fs::remove_dir_all(&dir);
}
