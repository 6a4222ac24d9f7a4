//! The workspace's layering, checked: no module of a crate imports (through `crate::`) a
//! module that imports it back, directly or around a loop. Crates cannot form cycles (cargo
//! refuses them), but modules can, and a cycle is where one concept leaks into another
//! (`docs/architecture.md`). Test modules (`#[cfg(test)]` and below) do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → modules of the same crate it refers to with `crate::…`.
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<_> = std::fs::read_dir(src)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut out = BTreeMap::new();
    for f in &files {
        let me = f.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut deps = BTreeSet::new();
        for line in code.lines().map(str::trim_start) {
            if line.starts_with("//") {
                continue;
            }
            let mut rest = line;
            while let Some(i) = rest.find("crate::") {
                let before = rest[..i].chars().last();
                rest = &rest[i + "crate::".len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue; // `rsagg_crate::`, not `crate::`
                }
                if let Some(group) = rest.strip_prefix('{') {
                    let group = group.split('}').next().unwrap_or_default();
                    for item in group.split(',') {
                        let name: String = item
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        deps.insert(name);
                    }
                } else {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    deps.insert(name);
                }
            }
        }
        deps.retain(|d| modules.contains(d) && *d != me);
        out.insert(me, deps);
    }
    out
}

/// A cycle through `start`, if there is one.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_owned(), vec![start.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((m, path)) = stack.pop() {
        for d in g.get(&m).into_iter().flatten() {
            if d == start {
                return Some(path.clone());
            }
            if seen.insert(d.clone()) {
                let mut p = path.clone();
                p.push(d.clone());
                stack.push((d.clone(), p));
            }
        }
    }
    None
}

#[test]
fn no_crate_has_a_module_import_cycle() {
    let root = rsagg_e2e::repo_root();
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.join("tests/src"));
    assert!(dirs.len() >= 10, "{dirs:?}");
    let mut cycles = Vec::new();
    for dir in &dirs {
        let g = edges(dir);
        for m in g.keys() {
            if let Some(c) = cycle(&g, m) {
                cycles.push(format!("{}: {}", dir.display(), c.join(" → ")));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "module import cycles:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_checker_sees_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.path().join("a.rs"), "use crate::b::X;\n").unwrap();
    std::fs::write(
        dir.path().join("b.rs"),
        "use crate::{a, Error};\n#[cfg(test)]\nuse crate::c;\n",
    )
    .unwrap();
    let g = edges(dir.path());
    assert_eq!(cycle(&g, "a"), Some(vec!["a".to_owned(), "b".to_owned()]));
    std::fs::write(dir.path().join("b.rs"), "use rsagg_crate::a;\n").unwrap();
    assert_eq!(cycle(&edges(dir.path()), "a"), None);
}

/// Crate → the rsagg crates its `[dependencies]` name (dev-dependencies do not count), from
/// the `Cargo.toml` files; `tests/` is `e2e`.
fn crate_dependencies(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut manifests: Vec<_> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("Cargo.toml"))
        .filter(|p| p.is_file())
        .collect();
    manifests.push(root.join("tests/Cargo.toml"));
    let short = |package: &str| package.trim_start_matches("rsagg-").to_owned();
    manifests
        .iter()
        .map(|m| {
            let doc: toml::Table = std::fs::read_to_string(m).unwrap().parse().unwrap();
            let name = doc["package"]["name"].as_str().unwrap();
            let deps = doc
                .get("dependencies")
                .and_then(toml::Value::as_table)
                .map(|t| {
                    t.keys()
                        .filter(|k| k.starts_with("rsagg-"))
                        .map(|k| short(k))
                        .collect()
                })
                .unwrap_or_default();
            (short(name), deps)
        })
        .collect()
}

/// The list in `docs/architecture.md` between the `crate-dependencies` markers: one line
/// per crate, its name then the crates it uses (`(none)` for none).
fn documented_dependencies(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let block = doc
        .split("<!-- crate-dependencies: begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- crate-dependencies: end -->").next())
        .expect("docs/architecture.md has the crate-dependencies markers");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("```"))
        .map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next().unwrap().to_owned();
            (
                name,
                words
                    .filter(|w| *w != "(none)")
                    .map(str::to_owned)
                    .collect(),
            )
        })
        .collect()
}

/// The dependency list in `docs/architecture.md` is the one the `Cargo.toml` files declare,
/// and in an order where every crate uses only crates listed above it (so the list also
/// shows that dependencies point one way).
#[test]
fn the_documented_crate_dependencies_are_the_cargo_ones() {
    let root = rsagg_e2e::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let documented = documented_dependencies(&doc);
    let mut actual = crate_dependencies(&root);
    // The end-to-end harness is a test crate, not part of the product's graph.
    let e2e = actual.remove("e2e").unwrap();
    assert!(e2e.iter().all(|d| actual.contains_key(d)), "{e2e:?}");
    let listed: BTreeMap<_, _> = documented.iter().cloned().collect();
    assert_eq!(
        listed, actual,
        "docs/architecture.md's crate-dependencies list differs from the Cargo.toml files"
    );
    let mut above = BTreeSet::from(["e2e".to_owned()]);
    for (name, uses) in &documented {
        let later: Vec<_> = uses.difference(&above).collect();
        assert!(
            later.is_empty(),
            "{name} uses {later:?}, listed below it in docs/architecture.md"
        );
        above.insert(name.clone());
    }
}

#[test]
fn the_dependency_check_sees_a_difference() {
    let doc = "x\n<!-- crate-dependencies: begin -->\n```text\nmodel     (none)\nstore     model\n```\n<!-- crate-dependencies: end -->\n";
    let d = documented_dependencies(doc);
    assert_eq!(d[0], ("model".to_owned(), BTreeSet::new()));
    assert_eq!(
        d[1],
        ("store".to_owned(), BTreeSet::from(["model".to_owned()]))
    );
}
