//! Printing results: aligned tables for people, JSON for scripts.

use tabos_client::{QueryResult, Value};

/// The exit status of a command whose output's reader went away: what a
/// shell reports for a process ended by SIGPIPE (128 + 13).
pub const CLOSED_PIPE_STATUS: u8 = 141;

/// Writes the command's output (`out!`, `outln!`); a reader that has
/// gone ends the process quietly with [`CLOSED_PIPE_STATUS`] (Rust ignores
/// SIGPIPE — a node must not die of a client's closed socket — so std's
/// `println!` would panic instead).
pub fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(i32::from(CLOSED_PIPE_STATUS));
        }
        // Any other failure to print (a full disk) is as fatal as std's.
        eprintln!("error: cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// Whether `e` is, at bottom, output into a pipe whose reader has gone.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A value as a table cell.
pub fn cell(v: &Option<Value>) -> String {
    match v {
        None | Some(Value::Null(_)) => "NULL".to_string(),
        Some(Value::Int(i)) => i.to_string(),
        Some(Value::Real(r)) => format!("{r}"),
        Some(Value::Text(t)) => t.clone(),
        Some(Value::Blob(b)) => {
            let hex: String = b.iter().take(32).map(|x| format!("{x:02x}")).collect();
            if b.len() > 32 {
                format!("x'{hex}…' ({} bytes)", b.len())
            } else {
                format!("x'{hex}'")
            }
        }
    }
}

fn json_value(v: &Option<Value>) -> serde_json::Value {
    match v {
        None | Some(Value::Null(_)) => serde_json::Value::Null,
        Some(Value::Int(i)) => (*i).into(),
        Some(Value::Real(r)) => (*r).into(),
        Some(Value::Text(t)) => t.clone().into(),
        Some(Value::Blob(b)) => b
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
            .into(),
    }
}

/// Renders rows as an aligned table with a header rule; numbers right-aligned.
pub fn table(columns: &[impl AsRef<str>], rows: &[Vec<String>]) -> String {
    let columns: Vec<String> = columns.iter().map(|c| c.as_ref().to_string()).collect();
    let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let numeric: Vec<bool> = (0..columns.len())
        .map(|i| {
            !rows.is_empty()
                && rows.iter().all(|r| {
                    r.get(i)
                        .is_some_and(|c| c == "NULL" || c.parse::<f64>().is_ok())
                })
        })
        .collect();
    let line = |cells: &[String], out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = widths[i].saturating_sub(c.chars().count());
                if numeric[i] {
                    format!("{}{c}", " ".repeat(pad))
                } else {
                    format!("{c}{}", " ".repeat(pad))
                }
            })
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    let mut out = String::new();
    line(&columns, &mut out);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&rule.join("  "));
    out.push('\n');
    for r in rows {
        line(r, &mut out);
    }
    out
}

/// Prints a query result as a table (or JSON), with a row count.
/// Each row of `result` as an object of its columns.
fn row_objects(result: &QueryResult) -> Vec<serde_json::Value> {
    result
        .rows
        .iter()
        .map(|r| {
            let obj: serde_json::Map<String, serde_json::Value> = result
                .columns
                .iter()
                .cloned()
                .zip(r.iter().map(json_value))
                .collect();
            serde_json::Value::Object(obj)
        })
        .collect()
}

/// The rows of a listing (`ps`) as a JSON array of objects.
pub fn print_rows_json(result: &QueryResult) {
    doc(&serde_json::Value::Array(row_objects(result)));
}

pub fn print_result(result: &QueryResult, json: bool) {
    if json {
        let doc = serde_json::json!({
            "columns": result.columns,
            "rows": row_objects(result),
            "truncated": result.truncated,
        });
        self::doc(&doc);
        return;
    }
    let rows: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|r| r.iter().map(cell).collect())
        .collect();
    out!("{}", table(&result.columns, &rows));
    let n = result.rows.len();
    outln!(
        "({n} row{}{})",
        if n == 1 { "" } else { "s" },
        if result.truncated {
            ", truncated: use --max-rows or LIMIT"
        } else {
            ""
        }
    );
}

/// How a command prints its results (`--json`, `-o wide|json|yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables and lines for people (the default)
    Text,
    /// Text, with more columns where a listing has them (ps, nodes)
    Wide,
    /// JSON: one object or array (a stream, one per line); numbers as
    /// numbers, times in RFC 3339
    Json,
    /// The same documents as JSON, as YAML (a stream, separated by `---`)
    Yaml,
}

/// The chosen [`Format`] (set once, before any output).
static FORMAT: std::sync::OnceLock<Format> = std::sync::OnceLock::new();
/// YAML documents printed so far (the second and later are preceded by
/// `---`, so that a stream is a valid YAML stream).
static DOCS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets the output format (`--json` is `-o json`).
pub fn set_format(f: Format) {
    let _ = FORMAT.set(f);
}

fn format() -> Format {
    FORMAT.get().copied().unwrap_or(Format::Text)
}

/// Whether the output is documents (JSON or YAML) rather than text: the
/// commands build one `serde_json::Value` and [`doc`] prints it.
pub fn json() -> bool {
    matches!(format(), Format::Json | Format::Yaml)
}

/// Whether `-o wide` asked for a listing's extra columns.
pub fn wide() -> bool {
    format() == Format::Wide
}

/// Prints one document in the chosen format: a line of JSON, or YAML.
pub fn doc(value: &serde_json::Value) {
    if format() == Format::Yaml {
        let n = DOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut text = String::new();
        if n > 0 {
            text.push_str("---\n");
        }
        yaml(value, 0, &mut text);
        out!("{text}");
    } else {
        outln!("{value}");
    }
}

/// Writes `v` as block-style YAML at `indent`, ending with a newline.
/// Strings are always double-quoted with JSON's escapes (a YAML
/// double-quoted scalar accepts them), so no string is read back as a
/// number, a boolean or null, and keys are quoted only when plain would
/// misread them.
fn yaml(v: &serde_json::Value, indent: usize, out: &mut String) {
    use serde_json::Value as V;
    let pad = " ".repeat(indent);
    match v {
        V::Object(m) if !m.is_empty() => {
            for (k, item) in m {
                out.push_str(&pad);
                out.push_str(&yaml_key(k));
                out.push(':');
                yaml_nested(item, indent, out);
            }
        }
        V::Array(a) if !a.is_empty() => {
            for item in a {
                out.push_str(&pad);
                out.push('-');
                match item {
                    // A mapping's first key on the dash's line, the rest
                    // under it: `- a: 1\n  b: 2`.
                    V::Object(m) if !m.is_empty() => {
                        let mut inner = String::new();
                        yaml(item, indent + 2, &mut inner);
                        out.push(' ');
                        out.push_str(&inner[indent + 2..]);
                    }
                    _ => yaml_nested(item, indent, out),
                }
            }
        }
        _ => {
            out.push_str(&pad);
            out.push_str(&yaml_scalar(v));
            out.push('\n');
        }
    }
}

/// After `key:` or `-`: a scalar (or an empty collection) on the same
/// line, a collection on the lines below, indented.
fn yaml_nested(v: &serde_json::Value, indent: usize, out: &mut String) {
    use serde_json::Value as V;
    match v {
        V::Object(m) if !m.is_empty() => {
            out.push('\n');
            yaml(v, indent + 2, out);
        }
        V::Array(a) if !a.is_empty() => {
            out.push('\n');
            yaml(v, indent + 2, out);
        }
        _ => {
            out.push(' ');
            out.push_str(&yaml_scalar(v));
            out.push('\n');
        }
    }
}

fn yaml_scalar(v: &serde_json::Value) -> String {
    use serde_json::Value as V;
    match v {
        V::Null => "null".into(),
        V::Object(_) => "{}".into(),
        V::Array(_) => "[]".into(),
        // JSON's own text: a number, true/false, or a double-quoted string.
        other => other.to_string(),
    }
}

fn yaml_key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        && !k.starts_with(['-', '.'])
        && k.parse::<f64>().is_err()
        && !matches!(
            k.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n" | "~"
        );
    if plain {
        k.to_string()
    } else {
        serde_json::Value::from(k).to_string()
    }
}

/// Prints `value` as a document under `--json`/`-o json|yaml`, else `text`.
pub fn emit(text: impl FnOnce() -> String, value: impl FnOnce() -> serde_json::Value) {
    if json() {
        doc(&value());
    } else {
        outln!("{}", text());
    }
}

/// Prints a directory listing (files' or names'): a line an entry and a
/// note when there are more than one listing holds; under `--json`,
/// `{"entries": […], "more": …}`.
pub fn listing<E>(
    entries: &[E],
    more: bool,
    line: impl Fn(&E) -> String,
    json_of: impl Fn(&E) -> serde_json::Value,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json() {
        let v: Vec<_> = entries.iter().map(json_of).collect();
        drop(out);
        doc(&serde_json::json!({"entries": v, "more": more}));
        return Ok(());
    }
    for e in entries {
        writeln!(out, "{}", line(e))?;
    }
    if more {
        writeln!(out, "(more entries than one listing holds)")?;
    }
    Ok(())
}

/// A time in µs since the epoch as RFC 3339 in UTC, to the µs
/// (`2026-11-24T21:04:38.123456Z`).
pub fn rfc3339(us: i64) -> String {
    tabos_store::rfc3339(us, true)
}

/// How long ago `us` (µs since the epoch) was, as kubectl shows ages:
/// `45s`, `12m`, `3h`, `4d` (the largest unit, truncated).
pub fn age(us: i64) -> String {
    duration(tabos_store::now_us().saturating_sub(us).max(0) / 1_000_000)
}

/// A span in whole seconds as kubectl shows it (see [`age`]).
pub fn duration(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            super::rfc3339(1_795_556_278_123_456),
            "2026-11-24T21:37:58.123456Z"
        );
        assert_eq!(
            super::rfc3339(951_782_400_000_001),
            "2000-02-29T00:00:00.000001Z"
        );
        assert_eq!(super::rfc3339(-1), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn ages_read_like_kubectls() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(119), "119s");
        assert_eq!(duration(150), "2m");
        assert_eq!(duration(7_199), "119m");
        assert_eq!(duration(7_200), "2h");
        assert_eq!(duration(3 * 86_400 + 5), "3d");
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["name", "n"],
            &[
                vec!["a".into(), "10".into()],
                vec!["longer".into(), "2".into()],
            ],
        );
        assert_eq!(t, "name     n\n------  --\na       10\nlonger   2\n");
    }

    #[test]
    fn yaml_is_block_style_with_every_string_quoted() {
        let v = serde_json::json!({
            "pid": "p1", "exit": 3, "none": null, "n": "42", "yes": "no",
            "weird key": "a: b\n\"q\"",
            "list": [1, {"a": 1, "b": [true]}, [], {}],
            "nested": {"x": [{"y": "z"}]},
        });
        let mut text = String::new();
        yaml(&v, 0, &mut text);
        assert_eq!(
            text,
            "exit: 3\n\
             list:\n  - 1\n  - a: 1\n    b:\n      - true\n  - []\n  - {}\n\
             \"n\": \"42\"\n\
             nested:\n  x:\n    - \"y\": \"z\"\n\
             none: null\n\
             pid: \"p1\"\n\
             \"weird key\": \"a: b\\n\\\"q\\\"\"\n\
             \"yes\": \"no\"\n"
        );
    }
}
