//! `COPY (query) TO STDOUT` and `COPY table [(columns)] TO STDOUT` on the
//! PostgreSQL front door, in PostgreSQL's text format or CSV (psql's
//! `\copy … to`, psycopg's `cursor.copy()`, pandas and ETL tools).
//!
//! The query runs as any statement of the session does (its scope and
//! bounds); its rows are written as PostgreSQL 15 writes them: text
//! format with `\N` for NULL and backslash escapes, CSV quoted where a
//! value needs it, booleans `t`/`f`, floats as PostgreSQL prints them,
//! bytea as `\x…` hex. What the door cannot do — COPY FROM (it only
//! reads), a file or a program, binary — is refused by
//! [`tabos_store::dialect::copy_out`], which reads the statement.

use pgwire::api::results::CopyResponse;
use pgwire::api::Type;
use pgwire::messages::copy::CopyData;
use tabos_store::dialect::CopyOut;
use tabos_store::Value;

use super::{column_type, float_text, time_text, time_us, Typed};

/// `typed`'s rows as `copy` writes them, one CopyData message a line.
pub(super) fn copy_response(typed: &Typed, copy: &CopyOut) -> CopyResponse {
    let types: Vec<Type> = (0..typed.rows.columns.len())
        .map(|i| column_type(typed, i))
        .collect();
    let mut lines = Vec::with_capacity(typed.rows.rows.len() + 1);
    if copy.header {
        let names: Vec<Option<String>> = typed.rows.columns.iter().cloned().map(Some).collect();
        lines.push(line(&names, copy));
    }
    for r in typed.rows.rows.iter() {
        let fields: Vec<Option<String>> = r
            .values()
            .iter()
            .zip(&types)
            .map(|(v, t)| text(v, t))
            .collect();
        lines.push(line(&fields, copy));
    }
    let data = lines
        .into_iter()
        .map(|l| Ok(CopyData::new(bytes::Bytes::from(l))));
    CopyResponse::new(0, types.len(), futures::stream::iter(data))
}

/// A value's text as PostgreSQL's output function gives it (`None`:
/// NULL).
fn text(v: &Value, ty: &Type) -> Option<String> {
    Some(match v {
        Value::Null => return None,
        Value::Int(i) if *ty == Type::BOOL => if *i != 0 { "t" } else { "f" }.into(),
        Value::Int(i) if *ty == Type::FLOAT8 => float_text(*i as f64),
        Value::Int(i) => i.to_string(),
        Value::Real(r) => float_text(*r),
        Value::Text(t) if *ty == Type::TIMESTAMPTZ => match time_us(t) {
            Some(us) => time_text(us),
            None => t.clone(),
        },
        Value::Text(t) => t.clone(),
        Value::Blob(b) if *ty == Type::BYTEA => {
            let mut s = String::with_capacity(2 + 2 * b.len());
            s.push_str("\\x");
            for byte in b {
                s.push_str(&format!("{byte:02x}"));
            }
            s
        }
        Value::Blob(b) => String::from_utf8_lossy(b).into_owned(),
    })
}

/// One line of `fields` in `copy`'s format, with its newline.
fn line(fields: &[Option<String>], copy: &CopyOut) -> Vec<u8> {
    let mut out = String::new();
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(copy.delimiter);
        }
        match f {
            None => out.push_str(&copy.null),
            Some(v) if copy.csv => csv_field(&mut out, v, copy),
            Some(v) => text_field(&mut out, v, copy.delimiter),
        }
    }
    out.push('\n');
    out.into_bytes()
}

/// A text-format field: backslash, newline, carriage return, tab and the
/// delimiter escaped.
fn text_field(out: &mut String, v: &str, delimiter: char) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == delimiter => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
}

/// A CSV field: quoted when it holds the delimiter, the quote, a line
/// break, or would read as NULL (the empty string when NULL is written
/// empty); the quote and escape characters inside escaped.
fn csv_field(out: &mut String, v: &str, copy: &CopyOut) {
    let needs = v == copy.null
        || v.starts_with("\\.")
        || v.chars()
            .any(|c| c == copy.delimiter || c == copy.quote || c == '\n' || c == '\r');
    if !needs {
        out.push_str(v);
        return;
    }
    out.push(copy.quote);
    for c in v.chars() {
        if c == copy.quote || c == copy.escape {
            out.push(copy.escape);
        }
        out.push(c);
    }
    out.push(copy.quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(sql: &str) -> CopyOut {
        tabos_store::dialect::copy_out(sql).unwrap().unwrap()
    }

    #[test]
    fn lines_are_written_as_postgresql_writes_them() {
        let plain = copy("COPY (SELECT 1) TO STDOUT");
        let fields = [Some("a\tb\\c\nd".to_string()), None, Some(String::new())];
        assert_eq!(line(&fields, &plain), b"a\\tb\\\\c\\nd\t\\N\t\n".to_vec());
        let csv = copy("COPY (SELECT 1) TO STDOUT WITH (FORMAT csv, HEADER)");
        assert!(csv.header);
        let fields = [
            Some("plain".to_string()),
            Some("with, comma".to_string()),
            Some("say \"hi\"".to_string()),
            None,
            Some(String::new()),
        ];
        assert_eq!(
            String::from_utf8(line(&fields, &csv)).unwrap(),
            "plain,\"with, comma\",\"say \"\"hi\"\"\",,\"\"\n"
        );
        let legacy = copy("COPY ps (pid, state) TO STDOUT CSV HEADER");
        assert_eq!((legacy.csv, legacy.header), (true, true));
        assert_eq!(legacy.query, "SELECT pid, state FROM ps");
        let tabbed = copy("COPY ps TO STDOUT (DELIMITER '|', NULL 'nil')");
        assert_eq!((tabbed.delimiter, tabbed.null.as_str()), ('|', "nil"));
        assert_eq!(
            text(&Value::Blob(vec![0xde, 0xad]), &Type::BYTEA).unwrap(),
            "\\xdead"
        );
        assert_eq!(text(&Value::Int(1), &Type::BOOL).unwrap(), "t");
        assert_eq!(text(&Value::Real(5.0), &Type::FLOAT8).unwrap(), "5");
        let at = Value::Text("2026-11-27T19:30:00.500000Z".into());
        assert_eq!(
            text(&at, &Type::TIMESTAMPTZ).unwrap(),
            "2026-11-27 19:30:00.5+00"
        );
        for (refused, code) in [
            ("COPY ps FROM STDIN", "25006"),
            ("COPY ps TO '/etc/passwd'", "42501"),
            ("COPY ps TO PROGRAM 'sh'", "42501"),
            ("COPY ps TO STDOUT (FORMAT binary)", "0A000"),
        ] {
            let got = tabos_store::dialect::copy_out(refused).unwrap();
            assert_eq!(got.unwrap_err().0, code, "{refused}");
        }
        assert!(tabos_store::dialect::copy_out("SELECT 1").is_none());
    }
}
