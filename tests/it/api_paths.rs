//! One canonical path per public item.
//!
//! Reads the crate's module tree from `src/` (the `mod` declarations, from `src/lib.rs` down)
//! and every module-level `pub use` of an item of this crate, follows re-export chains to the
//! item's home, and counts the paths a user can name: the home (when its module is public all
//! the way up) plus every re-export in a public module. More than one fails, naming them all.
//!
//! What the reader relies on (rustfmt guarantees it; anything else fails the test rather than
//! passing silently): module-level `mod`/`pub mod`/`pub use` start at column 0, `mod` items
//! point at `name.rs` or `name/mod.rs` (no `#[path]`), no inline `pub mod name { .. }`, no glob
//! re-export of this crate's items. `#[cfg]` is ignored: every feature counts. Re-exports of
//! other crates (`pub use ndarray;`, `record`'s `serde_json` types) are not this crate's items.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path from the crate root, whether a user can name it, its source file.
#[derive(Debug)]
struct Module {
    path: Vec<String>,
    public: bool,
    file: PathBuf,
}

/// `pub use` aliases: (module path, name) → (module path of the source, source name).
type Aliases = BTreeMap<(Vec<String>, String), (Vec<String>, String)>;

/// Reads the module tree and the re-exports; `read` returns a file's text (None: no file).
fn scan(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Result<(Vec<Module>, Aliases), String> {
    let mut modules = vec![Module {
        path: vec![],
        public: true,
        file: root.join("lib.rs"),
    }];
    let mut aliases = Aliases::new();
    let mut i = 0;
    while i < modules.len() {
        let (path, public, file) = (
            modules[i].path.clone(),
            modules[i].public,
            modules[i].file.clone(),
        );
        let text = read(&file).ok_or_else(|| format!("cannot read {}", file.display()))?;
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs") | Some("mod.rs") => file.parent().unwrap().to_path_buf(),
            _ => file.with_extension(""),
        };
        let mut children = BTreeSet::new();
        let mut statements = Vec::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let (vis_pub, rest) = if let Some(r) = line.strip_prefix("pub ") {
                (true, r)
            } else if let Some(r) = line
                .strip_prefix("pub(crate) ")
                .or(line.strip_prefix("pub(super) "))
            {
                (false, r)
            } else {
                (false, line)
            };
            if let Some(m) = rest.strip_prefix("mod ") {
                let Some(name) = m.strip_suffix(';') else {
                    if vis_pub {
                        return Err(format!("{}: inline `{line}`: not supported", file.display()));
                    }
                    continue; // a private inline module (tests, sealed traits): nothing public inside
                };
                let candidates = [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")];
                let child = candidates
                    .iter()
                    .find(|p| read(p).is_some())
                    .ok_or_else(|| format!("{}: no file for `mod {name}`", file.display()))?;
                let mut child_path = path.clone();
                child_path.push(name.to_string());
                modules.push(Module {
                    path: child_path,
                    public: public && vis_pub,
                    file: child.clone(),
                });
                children.insert(name.to_string());
            } else if vis_pub && rest.starts_with("use ") {
                let mut statement = rest["use ".len()..].to_string();
                while !statement.contains(';') {
                    let next = lines
                        .next()
                        .ok_or_else(|| format!("{}: unterminated `{line}`", file.display()))?;
                    statement.push(' ');
                    statement.push_str(next.trim());
                }
                statements.push(statement.trim_end_matches(';').to_string());
            }
        }
        for statement in statements {
            for (source, name) in leaves(&statement)? {
                let Some(source) = resolve(&path, &children, &source) else {
                    continue; // another crate's item
                };
                let (item, module) = source.split_last().unwrap();
                if item == "*" {
                    return Err(format!(
                        "{}: glob re-export `pub use {statement}`",
                        file.display()
                    ));
                }
                aliases.insert((path.clone(), name), (module.to_vec(), item.clone()));
            }
        }
        i += 1;
    }
    Ok((modules, aliases))
}

/// Expands `a::{b, c::{d as e}}` into (["a", "b"], "b"), (["a", "c", "d"], "e").
fn leaves(statement: &str) -> Result<Vec<(Vec<String>, String)>, String> {
    fn tree(s: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) -> Result<(), String> {
        let s = s.trim();
        if let Some(open) = s.find('{') {
            let head: Vec<String> = s[..open]
                .trim_end_matches("::")
                .split("::")
                .filter(|p| !p.is_empty())
                .map(|p| p.trim().to_string())
                .collect();
            let inner = s[open + 1..]
                .strip_suffix('}')
                .ok_or_else(|| format!("unbalanced `{s}`"))?;
            let mut prefix = prefix.to_vec();
            prefix.extend(head);
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tree(&inner[start..i], &prefix, out)?;
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            if !inner[start..].trim().is_empty() {
                tree(&inner[start..], &prefix, out)?;
            }
        } else if !s.is_empty() {
            let (path, alias) = match s.split_once(" as ") {
                Some((p, a)) => (p.trim(), Some(a.trim())),
                None => (s, None),
            };
            let mut full = prefix.to_vec();
            full.extend(path.split("::").map(|p| p.trim().to_string()));
            if full.last().map(String::as_str) == Some("self") {
                full.pop();
            }
            let name = alias
                .map(str::to_string)
                .unwrap_or_else(|| full.last().unwrap().clone());
            out.push((full, name));
        }
        Ok(())
    }
    let mut out = Vec::new();
    tree(statement, &[], &mut out)?;
    Ok(out)
}

/// The crate-relative path of a `use` path written in module `module`; None for other crates.
fn resolve(module: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut base = match first.as_str() {
        "crate" => return Some(rest.to_vec()),
        "self" => module.to_vec(),
        "super" => module[..module.len() - 1].to_vec(),
        name if children.contains(name) => {
            let mut m = module.to_vec();
            m.push(name.to_string());
            m
        }
        _ => return None,
    };
    let mut rest = rest;
    while let Some(("super", r)) = rest.split_first().map(|(f, r)| (f.as_str(), r)) {
        base.pop();
        rest = r;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Every public item with more than one nameable path, as "home: path, path".
fn duplicates(modules: &[Module], aliases: &Aliases) -> Result<Vec<String>, String> {
    let public: BTreeSet<&Vec<String>> = modules.iter().filter(|m| m.public).map(|m| &m.path).collect();
    let known: BTreeSet<&Vec<String>> = modules.iter().map(|m| &m.path).collect();
    let name = |module: &[String], item: &str| {
        let mut p = vec!["beacon_rl".to_string()];
        p.extend(module.iter().cloned());
        p.push(item.to_string());
        p.join("::")
    };
    let mut paths: BTreeMap<(Vec<String>, String), BTreeSet<String>> = BTreeMap::new();
    for (alias, target) in aliases {
        let mut home = target.clone();
        let mut hops = 0;
        while let Some(next) = aliases.get(&home) {
            home = next.clone();
            hops += 1;
            if hops > 64 {
                return Err(format!("re-export cycle at {}", name(&alias.0, &alias.1)));
            }
        }
        let mut as_module = home.0.clone();
        as_module.push(home.1.clone());
        if known.contains(&as_module) && public.contains(&alias.0) {
            return Err(format!(
                "{} re-exports the module {}",
                name(&alias.0, &alias.1),
                name(&home.0, &home.1)
            ));
        }
        let entry = paths.entry(home.clone()).or_default();
        if public.contains(&home.0) {
            entry.insert(name(&home.0, &home.1));
        }
        if public.contains(&alias.0) {
            entry.insert(name(&alias.0, &alias.1));
        }
    }
    Ok(paths
        .iter()
        .filter(|(_, p)| p.len() > 1)
        .map(|((module, item), p)| {
            format!(
                "{}: {}",
                name(module, item),
                p.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect())
}

#[test]
fn every_public_item_has_one_path() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (modules, aliases) = scan(&src, &|p| std::fs::read_to_string(p).ok()).unwrap();
    // The reader found the tree: a public area, a private file, and the root's re-exports.
    let find = |p: &[&str]| {
        modules
            .iter()
            .find(|m| m.path.iter().map(String::as_str).eq(p.iter().copied()))
    };
    assert!(find(&["estimator"]).unwrap().public);
    assert!(!find(&["estimator", "beacon"]).unwrap().public);
    assert!(!find(&["estimator", "config"]).unwrap().public);
    assert!(!find(&["batch"]).unwrap().public);
    assert!(aliases.contains_key(&(vec![], "RolloutBatch".to_string())));
    let dups = duplicates(&modules, &aliases).unwrap();
    assert!(
        dups.is_empty(),
        "items with more than one public path:\n{}",
        dups.join("\n")
    );
}

/// The check on a small crate that has each kind of duplicate, and each allowed shape.
#[test]
fn a_second_path_is_reported() {
    let files: BTreeMap<PathBuf, &str> = [
        (
            "src/lib.rs",
            "pub mod area;\nmod hidden;\npub use area::Twice;\npub use hidden::Once;\npub use ndarray;\n\
             pub use area::family::{\n    Deep as Renamed,\n};\nmod tests {\n    pub use super::area::Twice;\n}\n",
        ),
        ("src/area/mod.rs", "pub mod family;\nmod role;\npub use role::{Flat, Chained};\npub struct Twice;\n"),
        ("src/area/family.rs", "pub struct Deep;\n"),
        ("src/area/role.rs", "pub struct Flat;\npub use crate::hidden::Once as Chained;\n"),
        ("src/hidden.rs", "pub struct Once;\n"),
    ]
    .into_iter()
    .map(|(p, t)| (PathBuf::from(p), t))
    .collect();
    let read = |p: &Path| files.get(p).map(|t| t.to_string());
    let (modules, aliases) = scan(Path::new("src"), &read).unwrap();
    let dups = duplicates(&modules, &aliases).unwrap();
    assert_eq!(
        dups,
        [
            "beacon_rl::area::Twice: beacon_rl::Twice, beacon_rl::area::Twice",
            "beacon_rl::area::family::Deep: beacon_rl::Renamed, beacon_rl::area::family::Deep",
            "beacon_rl::hidden::Once: beacon_rl::Once, beacon_rl::area::Chained",
        ]
    );

    // Shapes the reader refuses instead of passing.
    let glob = |p: &Path| {
        (p == Path::new("src/lib.rs"))
            .then(|| "mod a;\npub use a::*;\n".to_string())
            .or_else(|| (p == Path::new("src/a.rs")).then(String::new))
    };
    assert!(scan(Path::new("src"), &glob).unwrap_err().contains("glob"));
    let inline = |p: &Path| (p == Path::new("src/lib.rs")).then(|| "pub mod a {\n}\n".to_string());
    assert!(scan(Path::new("src"), &inline).unwrap_err().contains("inline"));
    let missing = |p: &Path| (p == Path::new("src/lib.rs")).then(|| "pub mod a;\n".to_string());
    assert!(scan(Path::new("src"), &missing).unwrap_err().contains("no file"));
}

/// Every consuming `with_*` setter (`fn with_x(self, ..) -> Self`) is `#[must_use]`: the
/// builders are values (`EstimatorInput` is even `Copy`), so a setter whose result is dropped
/// would otherwise compile without a warning and lose the column or parameter it sets.
#[test]
fn consuming_setters_are_must_use() {
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut paths);
    let (mut setters, mut missing) = (0, Vec::new());
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let l = line.trim_start();
            let consuming = l.starts_with("pub fn with_")
                && (l.contains("(mut self") || l.contains("(self"))
                && l.contains("-> Self");
            if !consuming {
                continue;
            }
            setters += 1;
            // The attributes directly above the signature (doc comments end before them).
            let attrs = lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.trim_start().starts_with("#["))
                .any(|l| l.trim_start().starts_with("#[must_use"));
            if !attrs {
                missing.push(format!("{}:{}", path.display(), i + 1));
            }
        }
    }
    // The generated config setters (src/setters.rs) and EstimatorInput's, at least.
    assert!(
        setters >= 15,
        "found only {setters} setters: has the source layout changed?"
    );
    assert!(missing.is_empty(), "setters without #[must_use]: {missing:#?}");
}
