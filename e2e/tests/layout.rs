//! The layout's rules, checked on the sources (no cluster): modules depend one way (no
//! import cycle between files, nor between the top-level folders of a crate); a production
//! file over 600 lines says why at its top; a file name used in two places means the same
//! thing in both (the list below says what). `docs/design.md` describes the layout.
//!
//! Size: the cycle check reads Rust itself (a small lexer, the module tree from `mod`
//! declarations, path resolution: about 550 lines) and is tested here on in-memory crates
//! (about 130); one file, as it is one test's machinery and nothing else uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const CRATES: [&str; 4] = ["hub/src", "spoke/src", "shared/src", "e2e/src"];

/// The most lines of a file's production part (before `#[cfg(test)]`) without a
/// `Size:` paragraph in its module docs.
const MAX_LINES: usize = 600;

/// File names used more than once, and the one thing each means wherever it is.
const SHARED_NAMES: [(&str, &str); 16] = [
    ("mod.rs", "a folder's module"),
    ("tests.rs", "a module's unit tests, beside it"),
    ("lib.rs", "a crate's library"),
    ("main.rs", "a crate's binary"),
    (
        "containers.rs",
        "the containers of a MiniCluster spec, in convert/, render/, validate/",
    ),
    (
        "volumes.rs",
        "the volumes of a MiniCluster spec, in convert/, render/, validate/",
    ),
    (
        "flux.rs",
        "the flux section of a MiniCluster spec, in convert/, validate/",
    ),
    (
        "spec.rs",
        "a MiniCluster spec: its types (api/) and its conversion (convert/)",
    ),
    (
        "document.rs",
        "the YAML a user gives, parsed and checked (a MiniCluster, a policy)",
    ),
    (
        "ownership.rs",
        "which objects are ours: the hub's (apply/) or a spoke's (federation/)",
    ),
    ("metrics.rs", "a binary's Prometheus metrics"),
    (
        "error.rs",
        "a module's error types, beside the code that returns them (spoke apply/, curve/, validate/)",
    ),
    (
        "broker_pods.rs",
        "the broker pods of a Job the controller made: the hub's cache of them (watch/), the addresses of a relayed burst's (spoke's cluster/)",
    ),
    (
        "path.rs",
        "which path a burst's brokers take to the lead broker: decided (federation/), read for the decision and applied to the plan (controller/federate/)",
    ),
    (
        "placement.rs",
        "where bursts that name candidates run: decided (federation/), read for the decision and applied to the plan (controller/federate/), shown in the status (controller/status/)",
    ),
    (
        "limits.rs",
        "bounds on what crosses a trust line: a spec's sizes (validate/), a spoke's relayed rates (relay/)",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The part of a file before its unit tests.
fn production(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

// The cycle check. It reads the crate as rustc does, on the file texts alone: the module
// tree from `mod` declarations (`#[path]` included, `#[cfg(test)]` items left out), and
// every path the code names resolved to the module of the item it lands on, through
// `crate::`, `self::`, `super::` chains, `use` bindings and groups, globs and the
// re-exports of other modules (`pub use`), so `use super::Thing; impl Thing { .. }`
// depends on the file that defines `Thing`, not on the parent re-exporting it.

/// A token of code: comments are gone, string literals kept (for `#[path = ".."]`).
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    /// `::`
    Sep,
    Punct(char),
}

fn tokens(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let word = |i: usize| at(i).is_alphanumeric() || at(i) == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            // An ordinary string: up to the first unescaped quote.
            let start = i + 1;
            i = start;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            out.push(Tok::Str(c[start..i.min(c.len())].iter().collect()));
            i += 1;
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                // '\n', '\'', '\u{..}'
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime: the name after it is no path.
                out.push(Tok::Punct('\''));
                i += 1;
            }
        } else if word(i) {
            let start = i;
            while word(i) {
                i += 1;
            }
            let w: String = c[start..i].iter().collect();
            let prefix = matches!(w.as_str(), "r" | "b" | "br" | "c" | "cr");
            if prefix && (at(i) == '#' || at(i) == '"') && w.contains('r') {
                // A raw string: r"..", r#".."#, ...
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                if at(i + hashes) != '"' {
                    // r#ident
                    i += 1;
                    continue;
                }
                i += hashes + 1;
                let start = i;
                let close: Vec<char> = std::iter::once('"')
                    .chain("#".repeat(hashes).chars())
                    .collect();
                while i < c.len() && !c[i..].starts_with(&close) {
                    i += 1;
                }
                out.push(Tok::Str(c[start..i.min(c.len())].iter().collect()));
                i += close.len();
            } else if (prefix && at(i) == '"') || (w == "b" && at(i) == '\'') {
                // b"..", c"..", b'.': the quote is read on the next turn.
            } else if c[start].is_ascii_digit() {
                out.push(Tok::Punct('0'));
            } else {
                out.push(Tok::Ident(w));
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Tok::Sep);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// What a module's code says: the names its `use`s bind (`None`: a glob) and the paths
/// it names elsewhere.
#[derive(Debug, Default)]
struct Scope {
    uses: Vec<(Option<String>, Vec<String>)>,
    paths: Vec<Vec<String>>,
}

/// A `mod name;` of a file: under which inline modules of the file, and its `#[path]`.
#[derive(Debug)]
struct ModDecl {
    inline: Vec<String>,
    name: String,
    path: Option<String>,
}

/// A file read: its modules (its own at `[]`, inline `mod x { .. }` ones below) and the
/// files it declares.
#[derive(Debug, Default)]
struct Parsed {
    scopes: BTreeMap<Vec<String>, Scope>,
    decls: Vec<ModDecl>,
}

fn is(toks: &[Tok], i: usize, want: &[&str]) -> bool {
    want.iter().enumerate().all(|(k, w)| match toks.get(i + k) {
        Some(Tok::Ident(s)) => s == w,
        Some(Tok::Punct(p)) => w.len() == 1 && w.starts_with(*p),
        Some(Tok::Sep) => *w == "::",
        _ => false,
    })
}

/// The index after the item at `i` (its attributes, then up to its `;` or its block).
fn skip_item(toks: &[Tok], mut i: usize) -> usize {
    let mut depth = 0usize;
    while let Some(t) = toks.get(i) {
        match t {
            Tok::Punct('{' | '(' | '[') => depth += 1,
            Tok::Punct(close @ ('}' | ')' | ']')) => {
                if depth == 0 {
                    return i; // the end of what holds the item
                }
                depth -= 1;
                if depth == 0 && *close == '}' {
                    return i + 1;
                }
            }
            Tok::Punct(';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Reads the use tree at `i` under `prefix` into `out`; returns the index after it.
fn use_tree(
    toks: &[Tok],
    mut i: usize,
    mut path: Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) -> usize {
    loop {
        match toks.get(i) {
            Some(Tok::Sep) => i += 1,
            Some(Tok::Ident(s)) if s != "as" => {
                path.push(s.clone());
                i += 1;
                if toks.get(i) != Some(&Tok::Sep) {
                    break;
                }
            }
            Some(Tok::Punct('*')) => {
                out.push((None, path));
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while !matches!(toks.get(i), None | Some(Tok::Punct('}'))) {
                    i = use_tree(toks, i, path.clone(), out);
                    if toks.get(i) == Some(&Tok::Punct(',')) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => return i,
        }
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    let mut name = path.last().cloned();
    if is(toks, i, &["as"]) {
        if let Some(Tok::Ident(alias)) = toks.get(i + 1) {
            name = Some(alias.clone());
        }
        i += 2;
    }
    if let Some(name) = name {
        out.push((Some(name), path));
    }
    i
}

fn parse(text: &str) -> Parsed {
    let toks = tokens(text);
    let mut parsed = Parsed::default();
    parsed.scopes.insert(vec![], Scope::default());
    if is(&toks, 0, &["#", "!", "[", "cfg", "(", "test", ")", "]"]) {
        return parsed; // the whole file is tests
    }
    // Inline modules open around `i`, with the bracket depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut path_attr = None;
    let mut i = 0;
    while i < toks.len() {
        let here: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
        let after_path_sep =
            i > 0 && matches!(toks[i - 1], Tok::Sep | Tok::Punct('.' | '\'' | '$'));
        match &toks[i] {
            Tok::Punct('#') if is(&toks, i, &["#", "[", "cfg", "(", "test", ")", "]"]) => {
                i = skip_item(&toks, i + 7);
            }
            Tok::Punct('#') if is(&toks, i, &["#", "[", "path", "="]) => {
                if let Some(Tok::Str(p)) = toks.get(i + 4) {
                    path_attr = Some(p.clone());
                }
                i += 6;
            }
            Tok::Ident(m) if m == "mod" && !after_path_sep => {
                let Some(Tok::Ident(name)) = toks.get(i + 1) else {
                    i += 1;
                    continue;
                };
                if toks.get(i + 2) == Some(&Tok::Punct('{')) {
                    depth += 1;
                    inline.push((name.clone(), depth));
                    parsed
                        .scopes
                        .entry([here, vec![name.clone()]].concat())
                        .or_default();
                } else {
                    parsed.decls.push(ModDecl {
                        inline: here,
                        name: name.clone(),
                        path: path_attr.take(),
                    });
                }
                i += 3;
            }
            Tok::Ident(u) if u == "use" && !after_path_sep => {
                let scope = parsed.scopes.get_mut(&here).expect("scope");
                i = use_tree(&toks, i + 1, Vec::new(), &mut scope.uses);
            }
            Tok::Ident(first) if !after_path_sep => {
                let mut path = vec![first.clone()];
                i += 1;
                while let (Some(Tok::Sep), Some(Tok::Ident(s))) = (toks.get(i), toks.get(i + 1)) {
                    path.push(s.clone());
                    i += 2;
                }
                parsed
                    .scopes
                    .get_mut(&here)
                    .expect("scope")
                    .paths
                    .push(path);
            }
            Tok::Punct('{' | '(' | '[') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}' | ')' | ']') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    parsed
}

/// A module of a crate: the file it is in (inline modules share their file's), that
/// file's module, and what its code says.
struct Module {
    file: String,
    home: Vec<String>,
    scope: Scope,
}

type Modules = BTreeMap<Vec<String>, Module>;

/// `a/./b/../c` as `a/c`.
fn normal(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

fn dir_of(file: &str) -> String {
    file.rsplit_once('/').map_or("", |(d, _)| d).to_string()
}

/// The modules of the crate whose root is `root`, among `files` (path in the source
/// folder → text), found from the root's `mod` declarations as rustc finds them.
fn crate_modules(files: &BTreeMap<String, String>, root: &str) -> Modules {
    let mut modules = Modules::new();
    // (file, its module, whether its children are in its own folder: mod.rs, a crate
    // root, a file named by #[path])
    let mut queue = vec![(root.to_string(), Vec::<String>::new(), true)];
    while let Some((file, module, owns_dir)) = queue.pop() {
        let Some(text) = files.get(&file) else {
            continue;
        };
        let parsed = parse(text);
        let stem = file
            .rsplit('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs");
        let dir = dir_of(&file);
        let children_dir = if owns_dir {
            dir.clone()
        } else {
            format!("{dir}/{stem}")
        };
        for decl in parsed.decls {
            let inline = decl.inline.join("/");
            let base = normal(&format!("{children_dir}/{inline}"));
            let found = match &decl.path {
                Some(p) if decl.inline.is_empty() => Some((normal(&format!("{dir}/{p}")), true)),
                Some(p) => Some((normal(&format!("{base}/{p}")), true)),
                None => [
                    (normal(&format!("{base}/{}.rs", decl.name)), false),
                    (normal(&format!("{base}/{}/mod.rs", decl.name)), true),
                ]
                .into_iter()
                .find(|(f, _)| files.contains_key(f)),
            };
            if let Some((child, owns)) = found {
                let path = [module.clone(), decl.inline, vec![decl.name]].concat();
                queue.push((child, path, owns));
            }
        }
        for (inline, scope) in parsed.scopes {
            let home = module.clone();
            modules.insert(
                [module.clone(), inline].concat(),
                Module {
                    file: file.clone(),
                    home,
                    scope,
                },
            );
        }
    }
    modules
}

/// The path a `use` in module `at` binds `name` to.
fn binding<'m>(modules: &'m Modules, at: &[String], name: &str) -> Option<&'m Vec<String>> {
    let scope = &modules.get(at)?.scope;
    scope
        .uses
        .iter()
        .find(|(n, _)| n.as_deref() == Some(name))
        .map(|(_, p)| p)
}

/// The module of the item `path`, named in module `at`, is in (following `use`s, the
/// module's and those of the modules the path goes through); None outside the crate.
fn resolve(modules: &Modules, at: &[String], path: &[String], depth: usize) -> Option<Vec<String>> {
    if depth > 16 {
        return None; // `use serde;` binds `serde` to itself
    }
    let child = |m: &[String], name: &str| -> Option<Vec<String>> {
        let c = [m, &[name.to_string()]].concat();
        modules.contains_key(&c).then_some(c)
    };
    let (mut at_module, rest): (Vec<String>, &[String]) = match path.first()?.as_str() {
        "crate" => (vec![], &path[1..]),
        "self" => (at.to_vec(), &path[1..]),
        "super" => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            (
                at.get(..at.len().checked_sub(supers)?)?.to_vec(),
                &path[supers..],
            )
        }
        name => {
            if let Some(target) = binding(modules, at, name) {
                let full = [target.clone(), path[1..].to_vec()].concat();
                return resolve(modules, at, &full, depth + 1);
            }
            if let Some(c) = child(at, name) {
                (c, &path[1..])
            } else {
                // A name a glob brings: a module or a binding of the glob's module.
                let globs = modules
                    .get(at)?
                    .scope
                    .uses
                    .iter()
                    .filter(|(n, _)| n.is_none());
                return globs
                    .filter_map(|(_, g)| resolve(modules, at, g, depth + 1))
                    .filter(|g| modules.contains_key(g))
                    .find(|g| child(g, name).is_some() || binding(modules, g, name).is_some())
                    .and_then(|g| resolve(modules, &g, path, depth + 1));
            }
        }
    };
    for (k, seg) in rest.iter().enumerate() {
        if let Some(c) = child(&at_module, seg) {
            at_module = c;
        } else if binding(modules, &at_module, seg).is_some() {
            return resolve(modules, &at_module, &rest[k..], depth + 1);
        } else {
            break;
        }
    }
    Some(at_module)
}

/// File → the files its code depends on, for every crate root among `files` (paths in
/// the crate's source folder): `lib.rs`, `main.rs`, `bin/*.rs`. A file and a file of an
/// ancestor or descendant module are not a dependency (a folder's `mod.rs` names its
/// children; a child may use what its parent defines).
fn dependencies(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let files: BTreeMap<String, String> = files.iter().cloned().collect();
    let roots = files.keys().filter(|f| {
        matches!(f.as_str(), "lib.rs" | "main.rs")
            || f.strip_prefix("bin/")
                .is_some_and(|b| !b.contains('/') || b.ends_with("/main.rs"))
    });
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for root in roots {
        let modules = crate_modules(&files, root);
        for (at, module) in &modules {
            let from = edges.entry(module.file.clone()).or_default();
            let scope = &module.scope;
            let named = scope.paths.iter().chain(scope.uses.iter().map(|(_, p)| p));
            for to in named.filter_map(|p| resolve(&modules, at, p, 0)) {
                let to = &modules[&to];
                if !to.home.starts_with(&module.home) && !module.home.starts_with(&to.home) {
                    from.insert(to.file.clone());
                }
            }
        }
    }
    edges
}

/// The groups of nodes that reach each other (the cycles), each sorted.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(at) = todo.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|n| (n, reach(n))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for (node, from_node) in &reaches {
        if groups.iter().flatten().any(|n| n == *node) || !from_node.contains(*node) {
            continue;
        }
        let group = from_node
            .iter()
            .filter(|m| reaches.get(m).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        groups.push(group);
    }
    groups
}

/// The cycles between a crate's files, and between its top-level folders (a file's first
/// path segment): each as its members, then the edges among them.
fn layout_cycles(files: &[(String, String)]) -> Vec<String> {
    let edges = dependencies(files);
    let top = |f: &str| {
        f.split('/')
            .next()
            .unwrap_or(f)
            .trim_end_matches(".rs")
            .to_string()
    };
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &edges {
        for to in tos {
            if top(from) != top(to) {
                folders.entry(top(from)).or_default().insert(top(to));
            }
        }
    }
    let show = |edges: &BTreeMap<String, BTreeSet<String>>, group: Vec<String>, what: &str| {
        let inner: Vec<String> = group
            .iter()
            .flat_map(|f| {
                edges[f]
                    .iter()
                    .filter(|t| group.contains(t))
                    .map(move |t| format!("{f} -> {t}"))
            })
            .collect();
        format!("{what}{} ({})", group.join(" <-> "), inner.join(", "))
    };
    let mut out: Vec<String> = cycles(&edges)
        .into_iter()
        .map(|g| show(&edges, g, ""))
        .collect();
    out.extend(
        cycles(&folders)
            .into_iter()
            .map(|g| show(&folders, g, "folders: ")),
    );
    out
}

/// The `.rs` files of `src`, as (path in `src`, text).
fn read_crate(src: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(src)
                .expect("in src")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, fs::read_to_string(f).expect("read"))
        })
        .collect()
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for krate in CRATES {
        let cycles = layout_cycles(&read_crate(&root().join(krate)));
        found.extend(cycles.into_iter().map(|c| format!("{krate}: {c}")));
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn long_files_say_why() {
    let mut unexplained = Vec::new();
    for krate in CRATES {
        let mut files = Vec::new();
        rust_files(&root().join(krate), &mut files);
        for file in files {
            let text = fs::read_to_string(&file).expect("read");
            let lines = production(&text).lines().count();
            let says_why = text
                .lines()
                .take_while(|l| l.starts_with("//!") || l.is_empty())
                .any(|l| l.starts_with("//! Size:"));
            if lines > MAX_LINES && !says_why {
                unexplained.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "over {MAX_LINES} production lines without a `//! Size:` paragraph:\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn a_file_name_used_twice_means_one_thing() {
    let mut by_name: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for krate in CRATES {
        let mut files = Vec::new();
        rust_files(&root().join(krate), &mut files);
        for file in files {
            let name = file
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            by_name.entry(name).or_default().push(file);
        }
    }
    let known: BTreeSet<&str> = SHARED_NAMES.iter().map(|(n, _)| *n).collect();
    let unlisted: Vec<String> = by_name
        .iter()
        .filter(|(name, files)| files.len() > 1 && !known.contains(name.as_str()))
        .map(|(name, files)| format!("{name}: {files:?}"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "file names used twice: rename one, or say in SHARED_NAMES what the name means in both:\n{}",
        unlisted.join("\n")
    );
    // Names listed but no longer shared are taken off the list.
    for (name, _) in SHARED_NAMES {
        assert!(
            by_name.get(name).is_some_and(|f| f.len() > 1),
            "{name} is in SHARED_NAMES but used once"
        );
    }
}

// The checker itself, on small crates in memory.

fn krate(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

fn deps(files: &[(&str, &str)], of: &str) -> Vec<String> {
    dependencies(&krate(files))[of].iter().cloned().collect()
}

#[test]
fn super_in_a_file_that_is_not_mod_rs_is_its_folders_module() {
    // a/b.rs is a::b: its `super::c` is a::c (a/c.rs), whose `super::b` is a::b.
    let files = [
        ("lib.rs", "mod a;"),
        ("a/mod.rs", "mod b;\nmod c;"),
        ("a/b.rs", "use super::c::C;\npub struct B(C);"),
        (
            "a/c.rs",
            // A test-only item mid-file is left out, the code after it is read.
            "pub struct C;\n#[cfg(test)]\nfn t() {}\npub fn b() -> super::b::B { super::b::B }",
        ),
    ];
    assert_eq!(
        layout_cycles(&krate(&files)),
        ["a/b.rs <-> a/c.rs (a/b.rs -> a/c.rs, a/c.rs -> a/b.rs)"]
    );
    // The same from a folder's mod.rs (a/b/mod.rs is a::b too), and through two supers.
    let files = [
        ("lib.rs", "mod a;\nmod d;"),
        ("a/mod.rs", "mod b;\nmod c;"),
        ("a/b/mod.rs", "mod e;\nfn f() { super::c::g() }"),
        (
            "a/b/e.rs",
            "use super::super::c;\nuse crate::{d::{self, D as Dee}};",
        ),
        ("a/c.rs", "pub fn g() {}"),
        ("d.rs", "pub struct D;"),
    ];
    assert_eq!(deps(&files, "a/b/mod.rs"), ["a/c.rs"]);
    assert_eq!(deps(&files, "a/b/e.rs"), ["a/c.rs", "d.rs"]);
}

#[test]
fn an_impl_for_another_modules_type_depends_on_that_module() {
    // Agent is defined in agent.rs and re-exported by lib.rs; report.rs implements it,
    // naming it through the re-export (a glob, a `use`, a full path).
    for report in [
        "use super::*;\nimpl<C> Agent<C> { fn report(&self) {} }",
        "use crate::Agent as A;\nimpl<C> A<C> { fn report(&self) {} }",
        "impl<C> super::agent::Agent<C> { fn report(&self) {} }",
    ] {
        let files = [
            ("lib.rs", "mod agent;\nmod report;\npub use agent::Agent;"),
            ("agent.rs", "pub struct Agent<C>(C);"),
            ("report.rs", report),
        ];
        assert_eq!(deps(&files, "report.rs"), ["agent.rs"], "{report}");
    }
    // In a folder, through the parent's re-export.
    let files = [
        ("lib.rs", "pub mod spoke;"),
        (
            "spoke/mod.rs",
            "mod agent;\nmod report;\npub use agent::Agent;",
        ),
        (
            "spoke/agent.rs",
            "pub struct Agent<C>(C);\nfn f() { crate::spoke::report::g() }",
        ),
        (
            "spoke/report.rs",
            "use super::Agent;\nimpl<C> Agent<C> {}\npub fn g() {}",
        ),
    ];
    assert_eq!(
        layout_cycles(&krate(&files)),
        [
            "spoke/agent.rs <-> spoke/report.rs (spoke/agent.rs -> spoke/report.rs, spoke/report.rs -> spoke/agent.rs)"
        ]
    );
}

#[test]
fn one_way_imports_pass() {
    // b uses c; c names b only in comments, strings and its tests; a/mod.rs re-exports
    // both and its own items are used by them (parent and child are no cycle).
    let files = [
        ("lib.rs", "mod a;\n#[path = \"other/place.rs\"]\nmod p;"),
        (
            "a/mod.rs",
            "mod b;\nmod c;\npub use b::B;\npub use c::C;\npub struct Shared;",
        ),
        (
            "a/b.rs",
            "use super::{c::C, Shared};\npub struct B(C, Shared);",
        ),
        (
            "a/c.rs",
            "//! Used by [`super::b`].\npub struct C; /* super::b::B */\nconst S: &str = \"super::b\";\n\
             const Q: char = '\"';\nconst R: &str = r#\"a \"quoted\" super::b\"#;\n\
             #[cfg(test)]\nmod tests {\n    use super::super::b::B;\n}\n",
        ),
        ("other/place.rs", "use crate::a::B;"),
    ];
    assert_eq!(layout_cycles(&krate(&files)), Vec::<String>::new());
    assert_eq!(deps(&files, "a/b.rs"), ["a/c.rs"]);
    assert_eq!(deps(&files, "a/c.rs"), Vec::<String>::new());
    assert_eq!(deps(&files, "other/place.rs"), ["a/b.rs"]);
}

#[test]
fn folders_that_import_each_other_are_a_cycle() {
    let files = [
        ("lib.rs", "mod a;\nmod b;"),
        ("a/mod.rs", "mod x;\nmod y;"),
        ("a/x.rs", "use crate::b::y::Y;"),
        ("a/y.rs", "pub struct Y;"),
        ("b/mod.rs", "pub mod x;\npub mod y;"),
        ("b/x.rs", "use crate::a::y::Y;"),
        ("b/y.rs", "pub struct Y;"),
    ];
    assert_eq!(
        layout_cycles(&krate(&files)),
        ["folders: a <-> b (a -> b, b -> a)"]
    );
}
