//! No struct above [`MAX_FIELDS`] fields in the command layer (issue #41):
//! a struct that large holds several jobs, and its fields become every
//! function's business. This test parses `crates/core`'s sources with
//! `syn`, following the module tree from `lib.rs` (modules and items under
//! `#[cfg(test)]` left out), and fails naming every struct over the limit
//! with its field count.

use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The most fields a struct of the command layer may have.
const MAX_FIELDS: usize = 15;

/// Whether `attrs` hold a `#[cfg(...)]` that needs `test`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let mut test = false;
            let _ = a.parse_nested_meta(|m| {
                test |= m.path.is_ident("test");
                // any(test, ...) / all(test, ...): look inside too.
                if m.input.peek(syn::token::Paren) {
                    let _ = m.parse_nested_meta(|inner| {
                        test |= inner.path.is_ident("test");
                        Ok(())
                    });
                }
                Ok(())
            });
            test
        }
    })
}

/// Structs over the limit, and the files of the modules declared in one.
struct Scan {
    file: PathBuf,
    /// The directory `mod x;` in this file resolves in.
    dir: PathBuf,
    /// Inline modules we are inside (they add to `dir`).
    inline: Vec<String>,
    over: Vec<String>,
    children: Vec<PathBuf>,
}

impl<'ast> Visit<'ast> for Scan {
    fn visit_item_struct(&mut self, s: &'ast syn::ItemStruct) {
        if test_only(&s.attrs) {
            return;
        }
        let n = s.fields.len();
        if n > MAX_FIELDS {
            self.over.push(format!(
                "{}: struct {} has {n} fields (at most {MAX_FIELDS})",
                self.file.display(),
                s.ident
            ));
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if test_only(&m.attrs) {
            return;
        }
        let name = m.ident.to_string();
        match &m.content {
            Some(_) => {
                self.inline.push(name);
                syn::visit::visit_item_mod(self, m);
                self.inline.pop();
            }
            None => {
                let mut dir = self.dir.clone();
                dir.extend(&self.inline);
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(&name).join("mod.rs");
                self.children
                    .push(if flat.exists() { flat } else { nested });
            }
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !test_only(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !test_only(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
}

/// Scans `file` and, through their declarations, its child modules.
fn scan(file: &Path, over: &mut Vec<String>, files: &mut usize) {
    let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let ast = syn::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let parent = file.parent().unwrap_or(Path::new("."));
    // lib.rs and mod.rs declare modules beside them; foo.rs in foo/.
    let dir = if matches!(stem, "lib" | "mod" | "main") {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    };
    let mut s = Scan {
        file: file.to_path_buf(),
        dir,
        inline: Vec::new(),
        over: Vec::new(),
        children: Vec::new(),
    };
    s.visit_file(&ast);
    *files += 1;
    over.append(&mut s.over);
    for child in s.children {
        scan(&child, over, files);
    }
}

#[test]
fn no_struct_of_the_command_layer_has_more_than_fifteen_fields() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let mut over = Vec::new();
    let mut files = 0;
    scan(&lib, &mut over, &mut files);
    // The module tree was followed (a broken walk would check nothing).
    assert!(
        files > 20,
        "only {files} files found from {}",
        lib.display()
    );
    assert!(over.is_empty(), "split these:\n{}", over.join("\n"));
}

#[test]
fn the_scan_counts_fields_and_leaves_test_code_out() {
    let src = r#"
        struct Small { a: u8 }
        struct Tuple(u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8);
        #[cfg(test)]
        struct TestOnly { a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8, h: u8, i: u8, j: u8, k: u8, l: u8, m: u8, n: u8, o: u8, p: u8 }
        mod inner { pub struct Big { a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8, h: u8, i: u8, j: u8, k: u8, l: u8, m: u8, n: u8, o: u8, p: u8 } }
    "#;
    let mut s = Scan {
        file: PathBuf::from("x.rs"),
        dir: PathBuf::from("."),
        inline: Vec::new(),
        over: Vec::new(),
        children: Vec::new(),
    };
    s.visit_file(&syn::parse_file(src).expect("parses"));
    assert_eq!(s.over.len(), 2, "{:?}", s.over);
    assert!(s.over[0].contains("struct Tuple has 16 fields"));
    assert!(s.over[1].contains("struct Big has 16 fields"));
}
