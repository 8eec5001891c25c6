//! The generator of the committed bindings in `crates/*-sys/src/bindings.rs`
//! and the check that they still match the installed headers.
//!
//! bindgen reads a crate's `wrapper.h` (which needs the Debian `-dev`
//! packages and libclang) and produces the types, constants and function
//! declarations. The declarations are then rewritten for run-time loading:
//!
//! - `pub struct Api` holds one function pointer per C function, with the
//!   C signature bindgen derived;
//! - `Api::load` resolves each of them by name in the crate's shared
//!   objects (`LIBRARIES`) through `farflash-dynload`;
//! - a free `pub unsafe fn` of the C name calls through the loaded table
//!   (`crate::api()`), so callers keep writing `sys::rbd_open(...)`.
//!
//! Only this crate's tests and `scripts/regen-bindings.sh` run it; a build
//! of farflash reads the committed output.

pub mod specs;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

/// A shared object and the functions farflash calls in it.
pub struct Library {
    /// The soname to `dlopen`, e.g. `librbd.so.1`.
    pub soname: &'static str,
    /// The exact C function names (bindgen allowlist entries).
    pub functions: &'static [&'static str],
}

/// What one `*-sys` crate binds.
pub struct Spec {
    /// The crate's directory (`env!("CARGO_MANIFEST_DIR")`), holding
    /// `wrapper.h` and `src/bindings.rs`.
    pub crate_dir: &'static str,
    /// Installed headers `wrapper.h` includes, to tell "headers absent".
    pub headers: &'static [&'static str],
    /// The Debian packages with those headers, for messages.
    pub dev_packages: &'static str,
    /// The libraries, in the order `Api::load` takes them.
    pub libraries: &'static [Library],
    /// Type allowlist (regular expressions) beyond what the functions use.
    pub types: &'static [&'static str],
    /// Constant allowlist (regular expressions).
    pub vars: &'static [&'static str],
    /// C enums as plain constants (`IBV_WR_SEND`) rather than prefixed ones.
    pub enums_as_consts: bool,
    /// `#[derive(Default)]` on the structs.
    pub derive_default: bool,
}

impl Spec {
    /// The committed bindings file.
    pub fn bindings_path(&self) -> PathBuf {
        Path::new(self.crate_dir).join("src").join("bindings.rs")
    }

    /// Why the check cannot run here, if it cannot: headers or libclang absent.
    pub fn missing_prerequisite(&self) -> Option<String> {
        for h in self.headers {
            if !Path::new(h).exists() {
                return Some(format!(
                    "{h} is not installed (Debian: {})",
                    self.dev_packages
                ));
            }
        }
        if !clang_available() {
            return Some("libclang is not installed (Debian: libclang-dev)".to_string());
        }
        None
    }
}

fn clang_available() -> bool {
    // bindgen's "runtime" feature dlopens libclang; find it as it would.
    std::panic::catch_unwind(bindgen::clang_version).is_ok_and(|v| v.parsed.is_some())
}

/// Runs bindgen over the crate's `wrapper.h` and rewrites its function
/// declarations for run-time loading; returns the file's text.
pub fn generate(spec: &Spec) -> Result<String, String> {
    let header = Path::new(spec.crate_dir).join("wrapper.h");
    let header = header
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", header.display()))?;
    let target = bindgen::RustTarget::stable(87, 0).map_err(|e| format!("rust target: {e}"))?;
    let mut builder = bindgen::Builder::default()
        .header(header)
        .rust_target(target)
        .formatter(bindgen::Formatter::None)
        .generate_comments(false)
        .generate_inline_functions(false)
        .merge_extern_blocks(true)
        .layout_tests(true)
        .derive_default(spec.derive_default);
    if spec.enums_as_consts {
        builder = builder
            .default_enum_style(bindgen::EnumVariation::Consts)
            .prepend_enum_name(false);
    }
    for lib in spec.libraries {
        for f in lib.functions {
            builder = builder.allowlist_function(format!("^{f}$"));
        }
    }
    for t in spec.types {
        builder = builder.allowlist_type(t);
    }
    for v in spec.vars {
        builder = builder.allowlist_var(v);
    }
    let code = builder
        .generate()
        .map_err(|e| format!("bindgen over {header} failed: {e}"))?
        .to_string();
    let file: syn::File =
        syn::parse_str(&code).map_err(|e| format!("bindgen's output does not parse: {e}"))?;
    rewrite(spec, file)
}

struct Function {
    name: Ident,
    symbol: String,
    library: usize,
    params: Vec<(Ident, syn::Type)>,
    output: syn::ReturnType,
}

fn rewrite(spec: &Spec, file: syn::File) -> Result<String, String> {
    let mut items = Vec::new();
    let mut functions = Vec::new();
    for item in file.items {
        let syn::Item::ForeignMod(block) = item else {
            items.push(item);
            continue;
        };
        for fi in block.items {
            let syn::ForeignItem::Fn(f) = fi else {
                return Err("a foreign item other than a function (extern static?) in the bindings: allowlist only functions".into());
            };
            functions.push(function(spec, f)?);
        }
    }
    for lib in spec.libraries {
        for name in lib.functions {
            if !functions.iter().any(|f| f.name == name) {
                return Err(format!(
                    "{name} (listed for {}) is not declared by the headers",
                    lib.soname
                ));
            }
        }
    }
    functions.sort_by_key(|f| f.name.to_string());

    let n = spec.libraries.len();
    let sonames = spec.libraries.iter().map(|l| l.soname);
    let fields = functions.iter().map(|f| {
        let name = &f.name;
        let tys = f.params.iter().map(|(_, t)| t);
        let out = &f.output;
        quote! { pub #name: unsafe extern "C" fn(#(#tys),*) #out }
    });
    let loads = functions.iter().map(|f| {
        let name = &f.name;
        let symbol = &f.symbol;
        let lib = f.library;
        quote! { #name: ::farflash_dynload::symbol(&libs[#lib], LIBRARIES[#lib], requirement, #symbol)? }
    });
    let wrappers = functions.iter().map(|f| {
        let name = &f.name;
        let params = f.params.iter().map(|(p, t)| quote! { #p: #t });
        let args = f.params.iter().map(|(p, _)| p);
        let out = &f.output;
        let doc = format!(
            " `{}` from `{}`, resolved at run time: call only after `crate::load()` succeeded.",
            f.symbol, spec.libraries[f.library].soname
        );
        quote! {
            #[doc = #doc]
            #[inline]
            pub unsafe fn #name(#(#params),*) #out { (crate::api().#name)(#(#args),*) }
        }
    });
    let tail: TokenStream = quote! {
        /// The shared objects `Api::load` resolves the functions in, in order.
        pub const LIBRARIES: [&str; #n] = [#(#sonames),*];

        /// The C functions farflash calls, resolved at run time.
        pub struct Api {
            #(#fields,)*
        }

        impl Api {
            /// Resolves every function in `libs`, the opened `LIBRARIES`.
            ///
            /// # Safety
            /// `libs[i]` must be `LIBRARIES[i]`, the library the headers
            /// these declarations were generated from describe.
            pub unsafe fn load(
                libs: &[::farflash_dynload::Library; #n],
                requirement: ::farflash_dynload::Requirement,
            ) -> Result<Self, ::farflash_dynload::LoadError> {
                Ok(Self { #(#loads,)* })
            }
        }

        #(#wrappers)*
    };
    let tail: syn::File =
        syn::parse2(tail).map_err(|e| format!("generated loader does not parse: {e}"))?;
    items.extend(tail.items);
    let out = syn::File {
        shebang: None,
        frontmatter: None,
        attrs: Vec::new(),
        items,
    };
    let mut text = String::new();
    let headers = spec.headers.join(", ");
    let _ = writeln!(
        text,
        "// Generated by scripts/regen-bindings.sh (crates/sys-gen, bindgen {}) from\n// {headers}; do not edit.\n// Checked against the installed headers by this crate's tests/bindings.rs.\n",
        BINDGEN_VERSION
    );
    text.push_str(&prettyplease::unparse(&out));
    Ok(text)
}

/// The bindgen release the committed files were made with (Cargo.lock).
pub const BINDGEN_VERSION: &str = "0.73";

fn function(spec: &Spec, f: syn::ForeignItemFn) -> Result<Function, String> {
    let name = f.sig.ident.clone();
    if f.sig.variadic.is_some() {
        return Err(format!(
            "{name} is variadic: a pointer to it cannot be called from Rust"
        ));
    }
    let mut symbol = name.to_string();
    for attr in &f.attrs {
        if attr.path().is_ident("link_name") {
            if let syn::Meta::NameValue(nv) = &attr.meta {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                {
                    symbol = s.value().trim_start_matches('\u{1}').to_string();
                }
            }
        }
    }
    let library = spec
        .libraries
        .iter()
        .position(|l| l.functions.iter().any(|n| name == n))
        .ok_or_else(|| format!("bindgen declared {name}, which no library lists"))?;
    let mut params = Vec::new();
    for (i, input) in f.sig.inputs.iter().enumerate() {
        let syn::FnArg::Typed(pt) = input else {
            return Err(format!("{name}: a receiver in a C declaration"));
        };
        let ident = match &*pt.pat {
            syn::Pat::Ident(p) => p.ident.clone(),
            _ => Ident::new(&format!("arg{}", i + 1), Span::call_site()),
        };
        params.push((ident, (*pt.ty).clone()));
    }
    Ok(Function {
        name,
        symbol,
        library,
        params,
        output: f.sig.output.clone(),
    })
}

/// The body of the tests in `tests/bindings.rs`: regenerates the
/// bindings from the installed headers and compares them with the committed
/// file.
///
/// Without the headers or libclang it prints why and returns, unless
/// `FARFLASH_REQUIRE_BINDINGS_CHECK=1` (set by tests/run.sh, which installs
/// them), in which case it fails.
pub fn check(spec: &Spec) {
    let path = spec.bindings_path();
    if let Some(why) = spec.missing_prerequisite() {
        if std::env::var_os("FARFLASH_REQUIRE_BINDINGS_CHECK").is_some_and(|v| v == "1") {
            panic!("cannot check {}: {why}", path.display());
        }
        println!("SKIPPED: cannot check {} here: {why}", path.display());
        return;
    }
    let fresh = generate(spec).unwrap_or_else(|e| panic!("{e}"));
    let committed =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    if committed != fresh {
        let line = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(fresh.lines().count()));
        let c = committed.lines().nth(line).unwrap_or("<end of file>");
        let f = fresh.lines().nth(line).unwrap_or("<end of file>");
        panic!(
            "{} differs from what the installed headers give, first at line {}:\n  committed: {c}\n  headers:   {f}\nregenerate with: bash scripts/regen-bindings.sh",
            path.display(),
            line + 1
        );
    }
    println!(
        "{} matches the installed headers ({} lines)",
        path.display(),
        fresh.lines().count()
    );
}
