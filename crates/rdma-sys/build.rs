//! Generates the bindings with bindgen over the system's rdma-core headers.
//! The verbs data path (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq` ...) is `static inline` in verbs.h: bindgen's
//! `wrap_static_fns` emits a C file with an exported wrapper for each, which
//! `cc` compiles into this crate.

use std::env;
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let header = manifest.join("wrapper.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let wrappers = out.join("static_wrappers");

    let bindings = bindgen::Builder::default()
        .header(header.to_str().expect("UTF-8 path"))
        .allowlist_function("ibv_.*")
        .allowlist_function("rdma_.*")
        .allowlist_type("ibv_.*")
        .allowlist_type("rdma_.*")
        .allowlist_var("IBV_.*")
        .allowlist_var("RDMA_.*")
        // Unions and bitfields of the verbs structs stay as bindgen makes
        // them; enums as plain constants (the kernel ABI adds values).
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            panic!("bindgen over rdma-core's headers failed ({e}); install libibverbs-dev, librdmacm-dev and libclang-dev")
        });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    cc::Build::new()
        .file(wrappers.with_extension("c"))
        .include(&manifest)
        .warnings(false)
        .compile("farflash_rdma_static_wrappers");
    println!("cargo:rustc-link-lib=ibverbs");
    println!("cargo:rustc-link-lib=rdmacm");
}
