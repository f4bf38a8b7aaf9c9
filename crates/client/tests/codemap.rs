//! Issue 37, item 5: ARCHITECTURE.md is a code map, and a map that names
//! a file the tree does not have is wrong. This test reads the map and
//! fails on any path it names that does not exist: repository paths
//! (`crates/…`, `sdk/…`, `docs/…`) from the root, and a crate's own paths
//! (`src/…`, `tests/…`, `schema/…`, `proto/…`) from the crate of the
//! section they are in (a `### \`crates/x\`` heading).

use std::path::{Path, PathBuf};

/// Where paths that start so are found: from the repository's root.
const ROOT_PREFIXES: &[&str] = &[
    "crates/",
    "sdk/",
    "docs/",
    ".ci/",
    "examples/",
    "tools/",
    ".cargo/",
];
/// Where paths that start so are found: from the section's crate.
const CRATE_PREFIXES: &[&str] = &["src/", "tests/", "schema/", "proto/"];

/// Every path the map names, each with the directory it is relative to
/// (`None`: the section names no crate, and the path needs one).
fn named_paths(map: &str) -> Vec<(Option<String>, String)> {
    let mut base: Option<String> = None;
    let mut out = Vec::new();
    for line in map.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            // One crate named alone sets the base; anything else clears it.
            let inner = heading.trim().trim_matches('`');
            base = (!inner.contains('`') && !inner.contains(' ')).then(|| inner.to_string());
        } else if line.starts_with("## ") {
            base = None;
        }
        for (i, token) in line.split('`').enumerate() {
            let is_code = i % 2 == 1;
            let pathlike = !token.is_empty()
                && token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
                && token.contains('/')
                && !token.starts_with("..");
            if !is_code || !pathlike {
                continue;
            }
            if ROOT_PREFIXES.iter().any(|p| token.starts_with(p)) {
                out.push((Some(String::new()), token.to_string()));
            } else if CRATE_PREFIXES.iter().any(|p| token.starts_with(p)) {
                out.push((base.clone(), token.to_string()));
            }
        }
    }
    out
}

fn missing(root: &Path, paths: &[(Option<String>, String)]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|(base, path)| match base {
            None => Some(format!("{path} (in a section that names no crate)")),
            Some(base) => {
                let full: PathBuf = root.join(base).join(path);
                (!full.exists()).then(|| format!("{path} (looked for {})", full.display()))
            }
        })
        .collect()
}

#[test]
fn every_path_the_map_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let lines = map.lines().count();
    assert!(
        lines <= 500,
        "ARCHITECTURE.md is a map of a few hundred lines, not {lines}: details go in the \
         modules' docs"
    );
    let paths = named_paths(&map);
    assert!(
        paths.len() > 100,
        "only {} paths found in the map",
        paths.len()
    );
    let gone = missing(&root, &paths);
    assert!(
        gone.is_empty(),
        "ARCHITECTURE.md names what does not exist:\n{}",
        gone.join("\n")
    );
}

/// The reader finds paths and their crates, and a missing one fails (a
/// test that cannot fail proves nothing).
#[test]
fn a_path_that_is_not_there_is_caught() {
    let map = "## Code map\n### `crates/client`\n- `src/lib.rs` and `src/nope.rs`; \
               `crates/store/src/lib.rs`; `not/a/prefix`\n## Other\n`src/orphan.rs`\n";
    let paths = named_paths(map);
    assert_eq!(
        paths,
        vec![
            // A heading's own path is checked too.
            (Some(String::new()), "crates/client".to_string()),
            (Some("crates/client".to_string()), "src/lib.rs".to_string()),
            (Some("crates/client".to_string()), "src/nope.rs".to_string()),
            (Some(String::new()), "crates/store/src/lib.rs".to_string()),
            (None, "src/orphan.rs".to_string()),
        ]
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let gone = missing(&root, &paths);
    assert_eq!(gone.len(), 2, "{gone:?}");
    assert!(gone[0].starts_with("src/nope.rs"));
    assert!(gone[1].starts_with("src/orphan.rs"));
}
