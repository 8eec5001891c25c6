//! No function above [`MAX_LINES`] lines outside tests and generated code
//! (issue #41): scans the sources of the binary (`src/`) and of every crate
//! (`crates/*/src`), and fails naming each function over the limit.
//!
//! A function's length is counted from the line of its `fn` to the line of
//! its closing brace. Test code is left out: `#[test]` functions, items
//! under a `cfg` that needs `test` (`#[cfg(test)]`,
//! `#[cfg(any(test, feature = "testing"))]`), and the files of modules
//! declared so. Generated files are left out only when listed in
//! [`GENERATED`] and their first line says they were generated.
//!
//! The scanner knows enough Rust for this: comments (nested block comments
//! too), string, byte-string, raw-string and character literals (told from
//! lifetimes), and braces.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The longest a function may be.
const MAX_LINES: usize = 120;

/// Generated files (bindgen output), relative to the repository.
const GENERATED: &[&str] = &[
    "crates/iscsi-sys/src/bindings.rs",
    "crates/rbd-sys/src/bindings.rs",
    "crates/rdma-sys/src/bindings.rs",
    "crates/ssl-sys/src/bindings.rs",
];

/// What the scanner sees: a word, a punctuation character, or a literal.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Punct(char),
    Literal,
}

/// A token and the line (1-based) it starts on.
#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// Splits Rust source into tokens, dropping comments and whitespace.
fn tokenize(src: &str) -> Vec<Token> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        let start_line = line;
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i = skip_block_comment(b, i, &mut line);
        } else if let Some(end) = raw_string_end(b, i, &mut line) {
            i = end;
            out.push(Token {
                tok: Tok::Literal,
                line: start_line,
            });
        } else if c == b'"' || (c == b'b' && b.get(i + 1) == Some(&b'"')) {
            i = skip_quoted(b, i + if c == b'b' { 2 } else { 1 }, b'"', &mut line);
            out.push(Token {
                tok: Tok::Literal,
                line: start_line,
            });
        } else if c == b'\'' || (c == b'b' && b.get(i + 1) == Some(&b'\'')) {
            let from = i + if c == b'b' { 2 } else { 1 };
            i = match char_literal_end(b, from) {
                Some(end) => {
                    out.push(Token {
                        tok: Tok::Literal,
                        line: start_line,
                    });
                    end
                }
                // A lifetime or a label: the quote alone.
                None => from,
            };
        } else if c == b'_' || c.is_ascii_alphanumeric() {
            let s = i;
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Word(String::from_utf8_lossy(&b[s..i]).into_owned()),
                line,
            });
        } else {
            // Whole UTF-8 characters, so a multi-byte one is one token.
            let ch = src[i..].chars().next().unwrap_or('?');
            i += ch.len_utf8().max(1);
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
        }
    }
    out
}

fn skip_block_comment(b: &[u8], mut i: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            if b[i] == b'\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    i
}

/// After the opening quote at `i`: the index past the closing `quote`.
fn skip_quoted(b: &[u8], mut i: usize, quote: u8, line: &mut usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'\n' => {
                *line += 1;
                i += 1;
            }
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// `r"..."`, `r#"..."#`, `br"..."` starting at `i`: the index past its end.
fn raw_string_end(b: &[u8], i: usize, line: &mut usize) -> Option<usize> {
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    // Not the tail of an identifier (`for"` cannot happen; `bar#` can't either).
    if i > 0 && (b[i - 1] == b'_' || b[i - 1].is_ascii_alphanumeric()) {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    j += 1;
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    while j < b.len() {
        if b[j..].starts_with(&close) {
            return Some(j + close.len());
        }
        if b[j] == b'\n' {
            *line += 1;
        }
        j += 1;
    }
    Some(j)
}

/// After a `'` at `from - 1`: the index past a character literal's closing
/// quote, or None when this is a lifetime or a label.
fn char_literal_end(b: &[u8], from: usize) -> Option<usize> {
    if b.get(from) == Some(&b'\\') {
        // The escaped character (itself possibly a quote), then the quote.
        let close = b.get(from + 2..)?.iter().position(|&c| c == b'\'')?;
        return Some(from + 2 + close + 1);
    }
    // One character (possibly several UTF-8 bytes), then the quote.
    let len = std::str::from_utf8(&b[from..b.len().min(from + 4)])
        .or_else(|e| std::str::from_utf8(&b[from..from + e.valid_up_to()]))
        .ok()?
        .chars()
        .next()?
        .len_utf8();
    (b.get(from + len) == Some(&b'\'')).then_some(from + len + 1)
}

/// A function over the limit.
#[derive(Debug)]
struct Long {
    name: String,
    line: usize,
    lines: usize,
}

/// What one file holds: its long functions (test code left out), and the
/// modules it declares as test code (`#[cfg(test)] mod name;`).
#[derive(Debug, Default)]
struct Scan {
    long: Vec<Long>,
    test_modules: Vec<(String, Option<String>)>,
}

/// Whether the attribute starting at `toks[i]` (`#`) marks test code, and
/// the index past it.
fn attribute(toks: &[Token], i: usize) -> (bool, usize) {
    let mut j = i + 1;
    if toks.get(j).map(|t| &t.tok) == Some(&Tok::Punct('!')) {
        j += 1;
    }
    if toks.get(j).map(|t| &t.tok) != Some(&Tok::Punct('[')) {
        return (false, i + 1);
    }
    let end = matching(toks, j).unwrap_or(toks.len() - 1);
    let words: Vec<&str> = (toks[j..end].iter())
        .filter_map(|t| match &t.tok {
            Tok::Word(w) => Some(w.as_str()),
            _ => None,
        })
        .collect();
    let is_test = match words.first() {
        Some(&"test") => words.len() == 1,
        Some(&"cfg") => words.contains(&"test") && !words.contains(&"not"),
        _ => false,
    };
    (is_test, end + 1)
}

/// The index of the bracket closing the one at `open`.
fn matching(toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0i64;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('{' | '[' | '(') => depth += 1,
            Tok::Punct('}' | ']' | ')') => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// The index past the item starting at `i`: its `;`, or its body's `}`.
fn item_end(toks: &[Token], i: usize) -> usize {
    let mut k = i;
    while k < toks.len() {
        match toks[k].tok {
            Tok::Punct(';') => return k + 1,
            Tok::Punct('{') => return matching(toks, k).map_or(toks.len(), |e| e + 1),
            Tok::Punct('(' | '[') => k = matching(toks, k).map_or(toks.len(), |e| e + 1),
            _ => k += 1,
        }
    }
    toks.len()
}

fn word(toks: &[Token], i: usize) -> Option<&str> {
    match toks.get(i).map(|t| &t.tok) {
        Some(Tok::Word(w)) => Some(w),
        _ => None,
    }
}

/// Scans one file's source.
fn scan(src: &str) -> Scan {
    let toks = tokenize(src);
    let mut out = Scan::default();
    let mut path_attr: Option<String> = None;
    let mut i = 0;
    while i < toks.len() {
        if toks[i].tok == Tok::Punct('#') {
            let (is_test, next) = attribute(&toks, i);
            if word(&toks, i + 2) == Some("path") {
                path_attr = src_literal_after(src, &toks, i);
            }
            if is_test {
                // Skip the attributes that follow, then the item itself,
                // noting an out-of-line test module.
                let mut k = next;
                while toks.get(k).map(|t| &t.tok) == Some(&Tok::Punct('#')) {
                    if word(&toks, k + 2) == Some("path") {
                        path_attr = src_literal_after(src, &toks, k);
                    }
                    k = attribute(&toks, k).1;
                }
                let end = item_end(&toks, k);
                if let Some(m) = (k..end).find(|&m| word(&toks, m) == Some("mod")) {
                    if toks.get(end - 1).map(|t| &t.tok) == Some(&Tok::Punct(';')) {
                        if let Some(name) = word(&toks, m + 1) {
                            out.test_modules.push((name.to_owned(), path_attr.take()));
                        }
                    }
                }
                i = end;
            } else {
                i = next;
            }
            continue;
        }
        if word(&toks, i) == Some("fn") {
            if let Some(name) = word(&toks, i + 1) {
                let end = item_end(&toks, i);
                let closed = toks.get(end - 1).map(|t| &t.tok) == Some(&Tok::Punct('}'));
                if closed {
                    let lines = toks[end - 1].line - toks[i].line + 1;
                    if lines > MAX_LINES {
                        out.long.push(Long {
                            name: name.to_owned(),
                            line: toks[i].line,
                            lines,
                        });
                    }
                }
            }
        }
        path_attr = None;
        i += 1;
    }
    out
}

/// The string of a `#[path = "..."]` attribute starting at `toks[i]`.
fn src_literal_after(src: &str, toks: &[Token], i: usize) -> Option<String> {
    let line = src.lines().nth(toks[i].line - 1)?;
    let (_, rest) = line.split_once("path")?;
    let rest = rest.split_once('"')?.1;
    Some(rest.split_once('"')?.0.to_owned())
}

/// Where `mod name;` declared in `file` lives.
fn module_files(file: &Path, name: &str, path_attr: Option<&str>) -> Vec<PathBuf> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if let Some(p) = path_attr {
        return vec![dir.join(p)];
    }
    let base = if matches!(stem, "mod" | "lib" | "main") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    vec![
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
}

/// The Rust files under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every long function in the sources under `roots`, as `path:line: name
/// (n lines)`, test modules' files and listed generated files left out.
fn long_functions(repo: &Path, roots: &[PathBuf]) -> Vec<String> {
    let mut files = Vec::new();
    for r in roots {
        rust_files(r, &mut files);
    }
    let mut scans = Vec::new();
    let mut test_files = BTreeSet::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let s = scan(&src);
        for (name, path) in &s.test_modules {
            test_files.extend(module_files(f, name, path.as_deref()));
        }
        scans.push((f.clone(), src, s));
    }
    let mut found = Vec::new();
    // A test module's own child modules are test code too.
    let mut changed = true;
    while changed {
        changed = false;
        for (f, _, s) in &scans {
            if test_files.contains(f) {
                for (name, path) in &s.test_modules {
                    for m in module_files(f, name, path.as_deref()) {
                        changed |= test_files.insert(m);
                    }
                }
            }
        }
    }
    for (f, src, s) in &scans {
        let rel = f.strip_prefix(repo).unwrap_or(f);
        let rel_str = rel.to_string_lossy();
        let generated = GENERATED.contains(&rel_str.as_ref())
            && src.lines().next().is_some_and(|l| l.contains("Generated"));
        if generated || test_files.contains(f) {
            continue;
        }
        for l in &s.long {
            found.push(format!(
                "{rel_str}:{}: fn {} ({} lines)",
                l.line, l.name, l.lines
            ));
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_the_limit_outside_tests_and_generated_code() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec![repo.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(repo.join("crates"))
        .expect("crates/ is readable")
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .collect();
    crates.sort();
    roots.extend(crates);
    for g in GENERATED {
        assert!(
            repo.join(g).is_file(),
            "{g} is listed as generated but absent"
        );
    }
    let found = long_functions(repo, &roots);
    assert!(
        found.is_empty(),
        "functions over {MAX_LINES} lines (split them into named steps):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_counts_functions_and_leaves_out_test_code() {
    let body = "    let x = 1;\n".repeat(MAX_LINES);
    let src = format!(
        "/* fn not_code() {{ */\n\
         const S: &str = \"fn in_a_string() {{\";\n\
         const R: &str = r#\"}} fn raw() {{\"#;\n\
         fn lifetimes<'a>(x: &'a str) -> char {{ let _ = x; '{{' }}\n\
         fn long_one() {{\n{body}}}\n\
         fn short_one() {{\n    let c = '}}';\n}}\n\
         trait T {{ fn declared(&self); }}\n\
         #[test]\nfn long_test() {{\n{body}}}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_helper() {{\n{body}    }}\n}}\n\
         #[cfg(not(test))]\nfn long_not_test() {{\n{body}}}\n\
         #[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod x;\n"
    );
    let s = scan(&src);
    let names: Vec<&str> = s.long.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["long_one", "long_not_test"]);
    assert_eq!(s.long[0].lines, MAX_LINES + 2);
    assert_eq!(s.long[0].line, 5);
    assert_eq!(
        s.test_modules,
        [("x".to_owned(), Some("x_tests.rs".to_owned()))]
    );
    let files = module_files(Path::new("a/b.rs"), "t", None);
    assert_eq!(files[0], Path::new("a/b/t.rs"));
    let files = module_files(Path::new("a/mod.rs"), "t", None);
    assert_eq!(files[0], Path::new("a/t.rs"));
}
