//! The layout's rules, checked on the sources (no cluster): modules depend one way (no
//! import cycle between files, nor between the top-level folders of a crate); a production
//! file over 600 lines says why at its top; a file name used in two places means the same
//! thing in both (the list below says what). `docs/design.md` describes the layout.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const CRATES: [&str; 4] = ["hub/src", "spoke/src", "shared/src", "e2e/src"];

/// The most lines of a file's production part (before `#[cfg(test)]`) without a
/// `Size:` paragraph in its module docs.
const MAX_LINES: usize = 600;

/// File names used more than once, and the one thing each means wherever it is.
const SHARED_NAMES: [(&str, &str); 14] = [
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
        "broker_pods.rs",
        "the broker pods of a Job the controller made: the hub's cache of them (watch/), the addresses of a relayed burst's (spoke's cluster/)",
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

/// The module path of `file` in its crate (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("in src").with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Every module of the crate that `file` (module `module`) names in code (comments left
/// out) through `crate::` or `super::` paths, as the longest module prefix of each path.
fn imports(
    text: &str,
    module: &[String],
    is_folder: bool,
    modules: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let code: String = production(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    for (i, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        // Only a path's first segment (not `foo::super::`, not `flux_shared::crate`).
        if i > 0
            && (bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':')
        {
            continue;
        }
        let path: Vec<&str> = code[i..]
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or("")
            .split("::")
            .filter(|s| !s.is_empty())
            .collect();
        let mut base: Vec<String> = Vec::new();
        let mut rest = &path[..];
        if rest.first() == Some(&"crate") {
            rest = &rest[1..];
        } else {
            base = module.to_vec();
            if !is_folder {
                base.pop();
            }
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        let full: Vec<String> = base
            .into_iter()
            .chain(rest.iter().map(|s| s.to_string()))
            .collect();
        if let Some(n) = (0..=full.len())
            .rev()
            .find(|n| modules.contains(&full[..*n]))
        {
            out.insert(full[..n].to_vec());
        }
    }
    out
}

/// Edges between modules that are not ancestor and descendant (a folder's `mod.rs`
/// re-exporting its children is not a cycle).
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let module = module_of(src, file);
        let is_folder = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        );
        let text = fs::read_to_string(file).expect("read");
        let to: BTreeSet<Vec<String>> = imports(&text, &module, is_folder, &modules)
            .into_iter()
            .filter(|m| !m.is_empty() && !m.starts_with(&module) && !module.starts_with(m))
            .collect();
        edges.insert(module, to);
    }
    edges
}

/// A cycle through `start`, if there is one.
fn cycle_from(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    start: &Vec<String>,
) -> Option<Vec<Vec<String>>> {
    let mut stack = vec![(start.clone(), vec![start.clone()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == start {
                return Some(path.clone());
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

fn show(path: &[Vec<String>]) -> String {
    path.iter()
        .map(|m| m.join("::"))
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut cycles = Vec::new();
    for krate in CRATES {
        let edges = graph(&root().join(krate));
        for module in edges.keys() {
            if let Some(path) = cycle_from(&edges, module) {
                cycles.push(format!("{krate}: {}", show(&path)));
            }
        }
        // The same between the crate's top-level folders.
        let mut top: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (from, tos) in &edges {
            for to in tos {
                if from[0] != to[0] {
                    top.entry(vec![from[0].clone()])
                        .or_default()
                        .insert(vec![to[0].clone()]);
                }
            }
        }
        for module in top.keys() {
            if let Some(path) = cycle_from(&top, module) {
                cycles.push(format!("{krate} (folders): {}", show(&path)));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
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

#[test]
fn the_cycle_check_finds_a_cycle() {
    // The checker itself: two modules importing each other are a cycle, a folder's mod.rs
    // naming its child is not.
    let modules: BTreeSet<Vec<String>> = [vec![], vec!["a".to_string()], vec!["b".to_string()]]
        .into_iter()
        .collect();
    let a = imports(
        "use crate::b::X;\n// crate::a::Y",
        &["a".into()],
        false,
        &modules,
    );
    assert_eq!(a, BTreeSet::from([vec!["b".to_string()]]));
    let b = imports("fn f() { super::a::g() }", &["b".into()], false, &modules);
    assert_eq!(b, BTreeSet::from([vec!["a".to_string()]]));
    let edges = BTreeMap::from([(vec!["a".to_string()], a), (vec!["b".to_string()], b)]);
    assert!(cycle_from(&edges, &vec!["a".to_string()]).is_some());
}
