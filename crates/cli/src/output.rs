//! Printing results: aligned tables for people, JSON for scripts.

use tabos_client::{QueryResult, Value};

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
pub fn table(columns: &[String], rows: &[Vec<String>]) -> String {
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
    line(columns, &mut out);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&rule.join("  "));
    out.push('\n');
    for r in rows {
        line(r, &mut out);
    }
    out
}

/// Prints a query result as a table (or JSON), with a row count.
pub fn print_result(result: &QueryResult, json: bool) {
    if json {
        let rows: Vec<serde_json::Value> = result
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
            .collect();
        let doc = serde_json::json!({
            "columns": result.columns,
            "rows": rows,
            "truncated": result.truncated,
        });
        println!("{doc}");
        return;
    }
    let rows: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|r| r.iter().map(cell).collect())
        .collect();
    print!("{}", table(&result.columns, &rows));
    let n = result.rows.len();
    println!(
        "({n} row{}{})",
        if n == 1 { "" } else { "s" },
        if result.truncated {
            ", truncated: use --max-rows or LIMIT"
        } else {
            ""
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(
            &["name".into(), "n".into()],
            &[
                vec!["a".into(), "10".into()],
                vec!["longer".into(), "2".into()],
            ],
        );
        assert_eq!(t, "name     n\n------  --\na       10\nlonger   2\n");
    }
}
