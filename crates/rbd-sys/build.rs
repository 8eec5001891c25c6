//! Generates the librados/librbd bindings with bindgen from the system
//! headers (Debian: librbd-dev, librados-dev; bindgen needs libclang-dev).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rustc-link-lib=rbd");
    println!("cargo:rustc-link-lib=rados");
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        // Only the two libraries' own API, not libc's declarations.
        .allowlist_function("rados_.*")
        .allowlist_function("rbd_.*")
        .allowlist_type("rados_.*")
        .allowlist_type("rbd_.*")
        .allowlist_var("RBD_.*")
        .allowlist_var("LIBRADOS_.*")
        .allowlist_var("EVENT_TYPE_.*")
        .allowlist_var("LIBRBD_.*")
        .generate()
        .unwrap_or_else(|e| {
            panic!("bindgen over librados/librbd failed ({e}): install librbd-dev, librados-dev and libclang-dev")
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}
