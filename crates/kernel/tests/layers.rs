//! The kernel's modules import each other one way (ARCHITECTURE.md, "the
//! kernel's layers"): a module names only modules of lower layers. Read
//! from the sources, so a new upward import fails here, not in review.

use std::collections::BTreeMap;
use std::path::Path;

/// Bottom first; a module may name modules of earlier entries only.
/// (`ids` and the crate root's helpers are below everything.)
const LAYERS: &[&[&str]] = &[
    &["seqs", "nodes", "cron"],
    &["realms"],
    &["auth", "sched"],
    &["names", "kv"],
    &["procs"],
    &["ipc", "fs"],
    &["procedures", "alloc", "workflows", "logs"],
    &["graphs"],
    &["teardown", "backup", "retention"],
    &["cluster"],
];

/// The source text of `module` (a file, or a directory of files), without
/// comments: a doc link to a higher module is not an import.
fn code_of(src: &Path, module: &str) -> String {
    let file = src.join(format!("{module}.rs"));
    let files: Vec<_> = if file.exists() {
        vec![file]
    } else {
        std::fs::read_dir(src.join(module))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .collect()
    };
    let mut code = String::new();
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let line = line.split("//").next().unwrap_or("");
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// Whether `code` names kernel module `m` (`crate::m`, or `m` in a
/// `use crate::{…}` list).
fn names_module(code: &str, m: &str) -> bool {
    if code.contains(&format!("crate::{m}::")) || code.contains(&format!("crate::{m};")) {
        return true;
    }
    code.split("use crate::{").skip(1).any(|rest| {
        let list = rest.split('}').next().unwrap_or("");
        list.split(',').any(|item| {
            let item = item.trim();
            item == m || item.starts_with(&format!("{m}::"))
        })
    })
}

#[test]
fn kernel_modules_import_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, ms)| ms.iter().map(move |m| (*m, i)))
        .collect();
    // Every module of lib.rs, public or not, is placed in a layer (a new
    // one must be).
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    for m in lib
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            l.strip_suffix(';')
        })
        .filter(|m| *m != "ids")
    {
        assert!(
            layer_of.contains_key(m),
            "module {m} has no layer in LAYERS"
        );
    }
    let mut upward = Vec::new();
    for (m, &layer) in &layer_of {
        let code = code_of(&src, m);
        for (other, &other_layer) in &layer_of {
            if other != m && other_layer >= layer && names_module(&code, other) {
                upward.push(format!(
                    "{m} (layer {layer}) imports {other} (layer {other_layer})"
                ));
            }
        }
    }
    assert!(upward.is_empty(), "imports against the layers: {upward:#?}");
}

#[test]
fn the_check_sees_an_import() {
    assert!(names_module("let x = crate::procs::get_tx(tx);", "procs"));
    assert!(names_module("use crate::{auth, fs, procs};", "fs"));
    assert!(names_module(
        "use crate::{\n    fs::files::Files,\n};",
        "fs"
    ));
    assert!(!names_module("use crate::{fsx, Error};", "fs"));
    assert!(!names_module("let procs = 3;", "procs"));
}
