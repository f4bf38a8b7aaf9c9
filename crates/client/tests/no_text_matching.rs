//! Issue 37, item 3: no client, SDK or door decides on an error's words
//! or on a state's spelling. An error's message is for people; programs
//! act on its code and its typed reason (`tabos_client::fault`). States,
//! kinds, classes, statuses and roles are proto enums: in Rust a field is
//! an enum's number, so comparing it with text does not compile; in the
//! Python SDK nothing stops it, so this test reads the SDK (and the Rust
//! client library, the CLI, the node and the kernel, their non-test code,
//! for error text) and fails on any such comparison.

use std::path::{Path, PathBuf};

/// Rust: comparing a status's message, or an error's rendering.
const RUST: &[&str] = &[
    ".message().starts_with(",
    ".message().contains(",
    ".message().ends_with(",
    ".message() ==",
    "to_string().starts_with(",
    "to_string().contains(",
    "to_string().ends_with(",
    "if m.contains(",
    "if m.starts_with(",
    "if m.ends_with(",
];

/// Python: the same in the SDK.
const PYTHON: &[&str] = &[
    ".message.startswith(",
    ".message.endswith(",
    "in e.message",
    "in str(e)",
    ".details().startswith(",
    "in e.details()",
];

/// The API's enum fields, as the SDK reads them off a message.
const ENUM_FIELDS: &[&str] = &[
    "state",
    "status",
    "kind",
    "class",
    "role",
    "op",
    "type",
    "manager",
    "stream",
    "mode",
    "scheduler",
];

/// Python: a comparison of an enum field with text (`w.status == "x"`,
/// `o.kind != 'y'`, `s.state in ("a", "b")`).
fn compares_enum_text(line: &str) -> bool {
    ENUM_FIELDS.iter().any(|f| {
        ["==", "!=", "in", "not in"].iter().any(|op| {
            ["\"", "'", "(\"", "('", "[\"", "['"]
                .iter()
                .any(|q| line.contains(&format!(".{f} {op} {q}")))
        })
    })
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "_proto") {
                files(&path, ext, out);
            }
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// The code of a Rust file before its unit tests.
fn non_test(text: &str) -> &str {
    match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

#[test]
fn no_error_text_is_compared() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut offences = Vec::new();
    let mut scanned = 0;
    for (dir, ext, patterns) in [
        ("crates/client/src", "rs", RUST),
        ("crates/cli/src", "rs", RUST),
        ("crates/node/src", "rs", RUST),
        ("crates/kernel/src", "rs", RUST),
        ("sdk/python/tabos", "py", PYTHON),
    ] {
        let mut found = Vec::new();
        files(&root.join(dir), ext, &mut found);
        assert!(!found.is_empty(), "no .{ext} files under {dir}");
        for path in found {
            scanned += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            let code = if ext == "rs" { non_test(&text) } else { &text };
            for (n, line) in code.lines().enumerate() {
                for p in patterns {
                    if line.contains(p) {
                        offences.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(scanned > 60, "only {scanned} files read");
    assert!(
        offences.is_empty(),
        "error text compared (use the error's reason, tabos_client::fault):\n{}",
        offences.join("\n")
    );
}

#[test]
fn no_sdk_code_compares_an_enum_with_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python/tabos");
    let mut found = Vec::new();
    files(&root, "py", &mut found);
    assert!(found.len() >= 3, "only {} SDK files", found.len());
    let mut offences = Vec::new();
    for path in found {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            // Docstrings may show users what they can write.
            if compares_enum_text(line) && !line.contains("``") {
                offences.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "an enum compared as text (compare the pb enum's value):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_enum_scan_catches_a_comparison() {
    assert!(compares_enum_text(r#"if o.status == "success":"#));
    assert!(compares_enum_text(
        r#"return self.status in ("success", "error")"#
    ));
    assert!(compares_enum_text("if e.kind != 'dir':"));
    assert!(!compares_enum_text(
        "if o.status == pb.STEP_STATUS_SUCCESS:"
    ));
}

/// The scanner finds what it looks for (a test that cannot fail proves
/// nothing).
#[test]
fn the_scan_catches_a_comparison() {
    let sample =
        "if s.message().starts_with(\"stale epoch\") {}\n#[cfg(test)]\nx.message().contains(\"y\")";
    let code = non_test(sample);
    assert!(RUST.iter().any(|p| code.contains(p)));
    assert_eq!(code.matches(".message().").count(), 1, "tests are skipped");
}
