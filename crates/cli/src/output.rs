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
    outln!("{}", serde_json::Value::Array(row_objects(result)));
}

pub fn print_result(result: &QueryResult, json: bool) {
    if json {
        let doc = serde_json::json!({
            "columns": result.columns,
            "rows": row_objects(result),
            "truncated": result.truncated,
        });
        outln!("{doc}");
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

static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `--json` was given (anywhere on the command line).
pub fn set_json(on: bool) {
    JSON.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the output is JSON.
pub fn json() -> bool {
    JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Prints `value` as JSON under `--json`, else `text`.
pub fn emit(text: impl FnOnce() -> String, value: impl FnOnce() -> serde_json::Value) {
    if json() {
        outln!("{}", value());
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
        return writeln!(out, "{}", serde_json::json!({"entries": v, "more": more}));
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
}
