//! Generates the libiscsi bindings with bindgen from the system headers
//! (Debian: libiscsi-dev; bindgen needs libclang-dev).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rustc-link-lib=iscsi");
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        // Only libiscsi's own API, not libc's declarations.
        .allowlist_function("iscsi_.*")
        .allowlist_function("scsi_.*")
        .allowlist_type("iscsi_.*")
        .allowlist_type("scsi_.*")
        .allowlist_var("SCSI_.*")
        .allowlist_var("ISCSI_.*")
        .allowlist_var("LIBISCSI_.*")
        .generate()
        .unwrap_or_else(|e| {
            panic!("bindgen over libiscsi failed ({e}): install libiscsi-dev and libclang-dev")
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}
