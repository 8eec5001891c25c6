//! No module cycle in any crate (issue #41): parses the sources of the
//! binary (`src/main.rs`) and of every crate (`crates/*/src/lib.rs` and
//! `main.rs`) with `syn`, and fails naming each cycle.
//!
//! **The module tree** of a crate root is built from its `mod x;`
//! declarations (file `x.rs` or `x/mod.rs`, or the `#[path]` given) and
//! inline `mod x { ... }`. Modules and items under a `cfg` that needs
//! `test` (`#[cfg(test)]`, `#[cfg(any(test, ...))]`) are left out, with
//! their files.
//!
//! **Edges.** At each level of the tree, the modules under one parent
//! (siblings) form a graph: X -> Y when code anywhere in X's subtree names
//! a path into Y's subtree. A path names a module when it starts with
//! `crate::`, `super::` or `self::` (in expressions, types, patterns,
//! `use` trees, grouped ones like `use crate::{a, b::c}` included, and in
//! macro arguments, where a token sequence `crate :: a :: ...` counts),
//! or, in a `use` tree only, when its first segment is a child module of
//! the module the `use` is in (2018 paths: `use x::Y;` in `lib.rs`).
//! The path is resolved to an absolute module path; with P the longest
//! module prefix the reference's module and the target share, the edge
//! goes between P's two children on either side. Parent/child relations
//! (a module naming its ancestor or its descendant) are not edges.
//!
//! **Re-exports.** When a path goes through an item of P that is not a
//! module (`super::Foo`, `crate::Foo`), the `use` declarations of P are
//! looked up for the name `Foo` (`pub use x::Foo;`, `use self::x::{Foo}`,
//! `use x::Bar as Foo;`, also private ones, which children may name
//! too); when that points into a child of P, the path counts as an edge
//! to that child. Such lookups are followed a few hops (a re-export of a
//! re-export). NOT resolved: glob re-exports (`pub use x::*` then
//! `super::Foo`), glob imports (`use super::*` then a bare `Foo`), names
//! brought in by `use` and then used bare (the `use` itself is the edge),
//! paths inside strings (`#[serde(with = "crate::x")]`), and macro
//! expansions (`macro_rules!` bodies are scanned as tokens like any macro
//! argument, not expanded).
//!
//! **A cycle** is a strongly connected component (Tarjan) of two or more
//! siblings. The test fails listing each cycle not in [`ALLOWED`], with its
//! module paths and one example (`file:line: path`) per edge inside it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// Cycles known and kept, as the sorted module paths of the component
/// (`crate-root-relative-file: a::b, a::c`), with why. Any other cycle,
/// or a known one that grows, fails the test.
const ALLOWED: &[(&str, &str)] = &[];

/// A module path inside one crate root (`[]` is the root).
type ModPath = Vec<String>;

/// A path named in a module, before resolution.
#[derive(Debug, Clone)]
struct Ref {
    module: ModPath,
    segments: Vec<String>,
    /// Whether it comes from a `use` tree (bare first segments resolve).
    in_use: bool,
    at: String,
}

/// What the walk of one crate root found.
#[derive(Debug, Default)]
struct Crate {
    modules: BTreeSet<ModPath>,
    refs: Vec<Ref>,
    /// Per module: imported name -> the path of its `use` (non-glob).
    uses: BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
    files: usize,
}

/// Whether `attrs` hold a `#[cfg(...)]` that needs `test`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let mut test = false;
            let _ = a.parse_nested_meta(|m| {
                test |= m.path.is_ident("test");
                if m.input.peek(syn::token::Paren) && !m.path.is_ident("not") {
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

/// The `#[path = "..."]` of a module declaration.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item as I;
    match item {
        I::Const(i) => &i.attrs,
        I::Enum(i) => &i.attrs,
        I::ExternCrate(i) => &i.attrs,
        I::Fn(i) => &i.attrs,
        I::ForeignMod(i) => &i.attrs,
        I::Impl(i) => &i.attrs,
        I::Macro(i) => &i.attrs,
        I::Mod(i) => &i.attrs,
        I::Static(i) => &i.attrs,
        I::Struct(i) => &i.attrs,
        I::Trait(i) => &i.attrs,
        I::TraitAlias(i) => &i.attrs,
        I::Type(i) => &i.attrs,
        I::Union(i) => &i.attrs,
        I::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The walk of one file.
struct Scan<'c> {
    krate: &'c mut Crate,
    /// The file, as shown in messages.
    shown: String,
    /// The directory `mod x;` in this file resolves in.
    dir: PathBuf,
    /// The module this file is, then the inline modules we are inside.
    module: ModPath,
    inline: Vec<String>,
    /// Out-of-line child modules: (module path, file).
    children: Vec<(ModPath, PathBuf)>,
}

impl Scan<'_> {
    fn here(&self) -> ModPath {
        let mut m = self.module.clone();
        m.extend(self.inline.iter().cloned());
        m
    }

    fn push(&mut self, segments: Vec<String>, in_use: bool, line: usize) {
        if segments.is_empty() {
            return;
        }
        let at = format!("{}:{line}: {}", self.shown, segments.join("::"));
        self.krate.refs.push(Ref {
            module: self.here(),
            segments,
            in_use,
            at,
        });
    }

    /// Flattens a `use` tree into paths, noting the names it binds.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        let line = |i: &syn::Ident| i.span().start().line;
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, &n.ident, &n.ident, line(&n.ident)),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, &r.ident, &r.rename, line(&r.ident)),
            syn::UseTree::Glob(g) => {
                let l = g.star_token.span.start().line;
                self.push(prefix.clone(), true, l);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], ident: &syn::Ident, bound: &syn::Ident, line: usize) {
        let mut full = prefix.to_vec();
        // `use a::{self}` names `a` itself.
        if ident != "self" || full.is_empty() {
            full.push(ident.to_string());
        }
        let name = if bound == "self" {
            full.last().cloned().unwrap_or_default()
        } else {
            bound.to_string()
        };
        if bound != "_" {
            let here = self.here();
            (self.krate.uses.entry(here).or_default()).insert(name, full.clone());
        }
        self.push(full, true, line);
    }

    /// `crate :: a :: b` and the like inside a macro's tokens.
    fn tokens(&mut self, ts: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree as T;
        let toks: Vec<T> = ts.into_iter().collect();
        let mut i = 0;
        while i < toks.len() {
            if let T::Group(g) = &toks[i] {
                self.tokens(g.stream());
                i += 1;
                continue;
            }
            let starts = matches!(&toks[i], T::Ident(id) if id == "crate" || id == "super" || id == "self")
                && !(i > 0
                    && matches!(&toks[i - 1], T::Punct(p) if p.as_char() == ':' || p.as_char() == '$'));
            if !starts {
                i += 1;
                continue;
            }
            let line = toks[i].span().start().line;
            let mut segs = Vec::new();
            let mut j = i;
            while let Some(T::Ident(id)) = toks.get(j) {
                segs.push(id.to_string());
                let colons = matches!(toks.get(j + 1), Some(T::Punct(p)) if p.as_char() == ':')
                    && matches!(toks.get(j + 2), Some(T::Punct(p)) if p.as_char() == ':');
                if !colons {
                    break;
                }
                j += 3;
            }
            if segs.len() > 1 {
                self.push(segs, false, line);
            }
            i = j + 1;
        }
    }
}

impl<'ast> Visit<'ast> for Scan<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if !test_only(item_attrs(i)) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match i {
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            _ => &[],
        };
        if !test_only(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        let mut path = self.here();
        path.push(name.clone());
        self.krate.modules.insert(path.clone());
        match &m.content {
            Some(_) => {
                self.inline.push(name);
                syn::visit::visit_item_mod(self, m);
                self.inline.pop();
            }
            None => {
                let mut dir = self.dir.clone();
                dir.extend(&self.inline);
                let file = match path_attr(&m.attrs) {
                    Some(p) => dir.join(p),
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        if flat.exists() {
                            flat
                        } else {
                            dir.join(&name).join("mod.rs")
                        }
                    }
                };
                self.children.push((path, file));
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if p.leading_colon.is_none()
            && matches!(
                segs.first().map(String::as_str),
                Some("crate" | "super" | "self")
            )
            && segs.len() > 1
        {
            let line = p.segments[0].ident.span().start().line;
            self.push(segs, false, line);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// The directory `mod x;` declared in `file` resolves in.
fn decl_dir(file: &Path) -> PathBuf {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let parent = file.parent().unwrap_or(Path::new("."));
    if matches!(stem, "lib" | "mod" | "main") {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    }
}

/// Scans `src` as the file of `module`; returns its out-of-line children.
fn scan_source(
    krate: &mut Crate,
    src: &str,
    shown: String,
    dir: PathBuf,
    module: ModPath,
) -> Vec<(ModPath, PathBuf)> {
    let ast = syn::parse_file(src).unwrap_or_else(|e| panic!("{shown}: {e}"));
    let mut s = Scan {
        krate,
        shown,
        dir,
        module,
        inline: Vec::new(),
        children: Vec::new(),
    };
    s.visit_file(&ast);
    s.krate.files += 1;
    s.children
}

/// Walks the module tree of the crate root `root`.
fn walk(repo: &Path, root: &Path) -> Crate {
    let mut krate = Crate::default();
    krate.modules.insert(Vec::new());
    let mut todo = vec![(Vec::new(), root.to_path_buf())];
    while let Some((module, file)) = todo.pop() {
        let src =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let shown = file
            .strip_prefix(repo)
            .unwrap_or(&file)
            .display()
            .to_string();
        let children = scan_source(&mut krate, &src, shown, decl_dir(&file), module);
        todo.extend(children);
    }
    krate
}

/// `segments` named in `module`, as an absolute module path (from the
/// crate root), or None when it does not start inside this crate.
fn absolute(
    krate: &Crate,
    module: &[String],
    segments: &[String],
    in_use: bool,
) -> Option<ModPath> {
    let first = segments.first()?.as_str();
    match first {
        "crate" => Some(segments[1..].to_vec()),
        "self" => Some([module, &segments[1..]].concat()),
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let base = module.get(..module.len().checked_sub(ups)?)?;
            Some([base, &segments[ups..]].concat())
        }
        _ if in_use => {
            let mut child = module.to_vec();
            child.push(first.to_owned());
            krate
                .modules
                .contains(&child)
                .then(|| [module, segments].concat())
        }
        _ => None,
    }
}

/// The sibling edge a reference from `module` to `target` makes, if any.
fn edge(
    krate: &Crate,
    module: &[String],
    target: &[String],
    hops: usize,
) -> Option<(ModPath, ModPath)> {
    let p = module
        .iter()
        .zip(target)
        .take_while(|(a, b)| a == b)
        .count();
    if p == module.len() || p == target.len() {
        return None; // an ancestor, a descendant, or the module itself
    }
    let parent = &target[..p];
    let y = target[..=p].to_vec();
    if krate.modules.contains(&y) {
        return Some((module[..=p].to_vec(), y));
    }
    // An item of the common parent: a re-export of a child's item?
    if hops == 0 {
        return None;
    }
    let via = krate.uses.get(parent)?.get(&target[p])?;
    let resolved = absolute(krate, parent, via, true)?;
    let further = [&resolved[..], &target[p + 1..]].concat();
    edge(krate, module, &further, hops - 1)
}

/// Edges between siblings, with one example reference each.
fn edges(krate: &Crate) -> BTreeMap<(ModPath, ModPath), String> {
    let mut out = BTreeMap::new();
    for r in &krate.refs {
        let Some(t) = absolute(krate, &r.module, &r.segments, r.in_use) else {
            continue;
        };
        if let Some(e) = edge(krate, &r.module, &t, 4) {
            out.entry(e).or_insert_with(|| r.at.clone());
        }
    }
    out
}

/// Strongly connected components of two or more nodes (Tarjan).
fn cycles(edges: &BTreeMap<(ModPath, ModPath), String>) -> Vec<Vec<ModPath>> {
    let nodes: Vec<&ModPath> = (edges.keys())
        .flat_map(|(a, b)| [a, b])
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let id = |m: &ModPath| nodes.binary_search(&m).unwrap_or(0);
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges.keys() {
        adj[id(a)].push(id(b));
    }
    struct T {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn strong(t: &mut T, adj: &[Vec<usize>], v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &adj[v] {
            match t.index[w] {
                None => {
                    strong(t, adj, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let n = nodes.len();
    let mut t = T {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            strong(&mut t, &adj, v);
        }
    }
    let mut out: Vec<Vec<ModPath>> = (t.out.into_iter())
        .map(|scc| {
            let mut c: Vec<ModPath> = scc.into_iter().map(|i| nodes[i].clone()).collect();
            c.sort();
            c
        })
        .collect();
    out.sort();
    out
}

/// Each cycle of `krate` as (its allow-list key, the report of it).
fn report(shown: &str, krate: &Crate) -> Vec<(String, String)> {
    let edges = edges(krate);
    cycles(&edges)
        .into_iter()
        .map(|c| {
            let names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
            let key = format!("{shown}: {}", names.join(", "));
            let mut text = format!("cycle in {key}");
            for ((a, b), at) in &edges {
                if c.contains(a) && c.contains(b) {
                    text += &format!("\n    {} -> {}  ({at})", a.join("::"), b.join("::"));
                }
            }
            (key, text)
        })
        .collect()
}

/// The crate roots: `src/main.rs` and every crate's `lib.rs` / `main.rs`.
fn crate_roots(repo: &Path) -> Vec<PathBuf> {
    let mut roots = vec![repo.join("src/main.rs")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(repo.join("crates"))
        .expect("crates/ is readable")
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .collect();
    crates.sort();
    for c in crates {
        roots.extend(
            ["lib.rs", "main.rs"]
                .map(|f| c.join(f))
                .into_iter()
                .filter(|f| f.is_file()),
        );
    }
    roots
}

#[test]
fn no_crate_has_a_module_cycle() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = crate_roots(repo);
    // Every crate was found (a broken walk would check nothing).
    assert!(roots.len() > 20, "only {} crate roots", roots.len());
    let (mut found, mut files, mut refs) = (Vec::new(), 0, 0);
    for root in &roots {
        let shown = root
            .strip_prefix(repo)
            .unwrap_or(root)
            .display()
            .to_string();
        let krate = walk(repo, root);
        files += krate.files;
        refs += krate.refs.len();
        found.extend(report(&shown, &krate));
    }
    assert!(files > 200, "only {files} files walked");
    assert!(refs > 1000, "only {refs} paths seen");
    let keys: BTreeSet<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    let stale: Vec<&str> = (ALLOWED.iter().map(|(k, _)| *k))
        .filter(|k| !keys.contains(k))
        .collect();
    let new: Vec<&str> = (found.iter())
        .filter(|(k, _)| !ALLOWED.iter().any(|(a, _)| a == k))
        .map(|(_, t)| t.as_str())
        .collect();
    assert!(
        new.is_empty(),
        "module cycles (move what both sides use into a module of its own):\n{}",
        new.join("\n")
    );
    assert!(
        stale.is_empty(),
        "allowed cycles no longer found (remove them from ALLOWED): {stale:?}"
    );
}

#[test]
fn the_scanner_finds_a_cycle_and_not_a_parent_child_or_one_way_use() {
    let mut krate = Crate::default();
    krate.modules.insert(Vec::new());
    let lib = r#"
        mod a { pub fn f() { crate::b::g(); } }
        mod b { use super::Thing; pub fn g() {} }
        pub use self::a::{f as Thing};
        mod c { use crate::{d::deep::h}; pub fn i() { super::j(); } }
        mod d { pub mod deep { pub fn h() { crate::d::k(); super::super::j(); } } pub fn k() {} }
        pub fn j() { crate::c::i(); self::d::k(); }
        mod e { pub fn l() { format!("{}", crate::f::m()); } }
        mod f { pub fn m() { crate::e::l(); } }
        #[cfg(test)]
        mod tests { fn t() { crate::d::k(); crate::c::i(); } }
        mod g { #[cfg(test)] fn t() { crate::h::n(); } pub fn o() {} }
        mod h { pub fn n() { crate::g::o(); } }
    "#;
    let children = scan_source(
        &mut krate,
        lib,
        "lib.rs".into(),
        PathBuf::from("."),
        Vec::new(),
    );
    assert!(children.is_empty());
    let m = |s: &str| s.split("::").map(String::from).collect::<ModPath>();
    let e = edges(&krate);
    // a -> b directly; b -> a through the root's re-export of a::f.
    assert!(e.contains_key(&(m("a"), m("b"))), "{e:?}");
    assert!(
        e[&(m("b"), m("a"))].starts_with("lib.rs:3: super::Thing"),
        "{e:?}"
    );
    // c -> d one way only; deep -> d, root -> c and root -> d are
    // child/parent, not edges.
    assert!(e.contains_key(&(m("c"), m("d"))));
    assert!(!e.contains_key(&(m("d"), m("c"))));
    assert!(!e.keys().any(|(a, _)| a.len() > 1 || a.is_empty()));
    // e <-> f through a macro argument; test code (mod tests, a cfg(test)
    // fn) makes no edge.
    assert!(e.contains_key(&(m("e"), m("f"))));
    assert!(!e.contains_key(&(m("g"), m("h"))));
    assert!(!krate.modules.contains(&m("tests")));
    assert_eq!(cycles(&e), vec![vec![m("a"), m("b")], vec![m("e"), m("f")]]);
    let r = report("lib.rs", &krate);
    assert_eq!(r[0].0, "lib.rs: a, b");
    assert!(
        r[0].1.contains("a -> b  (lib.rs:2: crate::b::g)"),
        "{}",
        r[0].1
    );
}
