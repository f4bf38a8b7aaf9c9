//! Cursors of the PostgreSQL front door: `DECLARE name CURSOR … FOR
//! query`, `FETCH`/`MOVE` forward, `CLOSE` (psycopg's named cursors,
//! psql's `FETCH_COUNT`).
//!
//! A cursor's query runs when it is declared, in the session's scope and
//! bounds like any statement (every statement is its own read-only
//! snapshot, so running it then is what PostgreSQL's snapshot would
//! show); FETCH hands its rows out in order. Cursors scroll forward only,
//! as PostgreSQL's `NO SCROLL` ones do; a transaction's end closes those
//! not declared `WITH HOLD`; a connection holds at most
//! [`CURSORS_MAX`](super::CURSORS_MAX).

use std::sync::Arc;

use pgwire::error::{PgWireError, PgWireResult};

use super::{identifier, refused, sqlstate, Typed};

/// An open cursor.
pub(super) struct Cursor {
    pub typed: Typed,
    /// Its columns' types, decided from the whole result.
    pub types: Arc<[pgwire::api::Type]>,
    /// The next row FETCH returns.
    pub next: usize,
    /// Declared `WITH HOLD`: outlives its transaction.
    pub hold: bool,
}

impl Cursor {
    /// The next `count` rows (all that are left for `None`), moving past
    /// them. The last fetch of a result that was cut says so.
    pub fn take(&mut self, count: Option<usize>) -> Typed {
        let all = &self.typed.rows.rows;
        let end = count.map_or(all.len(), |n| self.next.saturating_add(n).min(all.len()));
        let start = self.next.min(end);
        self.next = end;
        self.slice(start, end, end == all.len() && self.typed.rows.truncated)
    }

    /// No rows, with the cursor's shape.
    pub fn take_none(&self) -> Typed {
        self.slice(0, 0, false)
    }

    fn slice(&self, start: usize, end: usize, truncated: bool) -> Typed {
        Typed {
            rows: tabos_store::Rows {
                rows: self.typed.rows.rows[start..end].to_vec(),
                columns: self.typed.rows.columns.clone(),
                truncated,
            },
            bools: self.typed.bools.clone(),
            arrays: self.typed.arrays.clone(),
            types: Some(self.types.clone()),
        }
    }
}

/// A `DECLARE` read.
pub(super) struct Declaration<'a> {
    pub name: String,
    pub hold: bool,
    /// The query, as written.
    pub query: &'a str,
}

/// A `FETCH` or `MOVE` read.
pub(super) struct Fetching {
    pub name: String,
    /// How many rows (`None`: all that are left).
    pub count: Option<usize>,
}

/// The next word of `s` (a quoted identifier whole) and what follows it.
fn word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = if let Some(quoted) = s.strip_prefix('"') {
        // To the closing quote ("" inside is a quote).
        let b = quoted.as_bytes();
        let mut i = 0;
        loop {
            match b.get(i) {
                None => break s.len(),
                Some(b'"') if b.get(i + 1) == Some(&b'"') => i += 2,
                Some(b'"') => break i + 2,
                Some(_) => i += 1,
            }
        }
    } else {
        s.find(char::is_whitespace).unwrap_or(s.len())
    };
    Some((&s[..end], &s[end..]))
}

fn syntax(what: &str) -> PgWireError {
    refused(sqlstate::SYNTAX_ERROR, what.to_string())
}

/// Reads `DECLARE name [BINARY] [ASENSITIVE | INSENSITIVE] [[NO] SCROLL]
/// CURSOR [{WITH | WITHOUT} HOLD] FOR query`.
pub(super) fn declaration(sql: &str) -> PgWireResult<Declaration<'_>> {
    const FORM: &str =
        "DECLARE name [NO SCROLL] CURSOR [{WITH | WITHOUT} HOLD] FOR query is what tabos reads";
    let (_, rest) = word(sql).ok_or_else(|| syntax(FORM))?;
    let (name, mut rest) = word(rest).ok_or_else(|| syntax(FORM))?;
    let mut hold = false;
    let mut last = String::new();
    loop {
        let (w, after) = word(rest).ok_or_else(|| syntax(FORM))?;
        let w = w.to_ascii_lowercase();
        rest = after;
        match w.as_str() {
            "for" => break,
            "binary" => {
                return Err(refused(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "a BINARY cursor: tabos's cursors return text",
                ))
            }
            "scroll" if last != "no" => {
                return Err(refused(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "a SCROLL cursor: tabos's cursors scroll forward only",
                ))
            }
            "hold" => hold = last == "with",
            "asensitive" | "insensitive" | "no" | "scroll" | "cursor" | "with" | "without" => {}
            _ => return Err(syntax(FORM)),
        }
        last = w;
    }
    let query = rest.trim().trim_end_matches(';').trim();
    if query.is_empty() {
        return Err(syntax(FORM));
    }
    Ok(Declaration {
        name: identifier(name),
        hold,
        query,
    })
}

/// Reads `FETCH [NEXT | FORWARD [n | ALL] | n | ALL] [FROM | IN] name`
/// (and `MOVE` the same way).
pub(super) fn fetching(sql: &str) -> PgWireResult<Fetching> {
    const FORM: &str = "FETCH [NEXT | FORWARD [count | ALL] | count | ALL] [FROM | IN] cursor";
    let sql = sql.trim().trim_end_matches(';');
    let (_, mut rest) = word(sql).ok_or_else(|| syntax(FORM))?;
    let mut words = Vec::new();
    while let Some((w, after)) = word(rest) {
        words.push(w);
        rest = after;
    }
    let name = words.pop().ok_or_else(|| syntax(FORM))?;
    let name = identifier(name);
    if matches!(words.last(), Some(w) if w.eq_ignore_ascii_case("from") || w.eq_ignore_ascii_case("in"))
    {
        words.pop();
    }
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let number = |w: &str| {
        w.parse::<i64>()
            .map_err(|_| syntax(FORM))
            .and_then(|n| match usize::try_from(n) {
                Ok(n) => Ok(Some(n)),
                Err(_) => Err(backward()),
            })
    };
    let count = match lower
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] | ["next"] | ["forward"] => Some(1),
        ["all"] | ["forward", "all"] => None,
        ["forward", n] => number(n)?,
        [n] if n.parse::<i64>().is_ok() => number(n)?,
        [w, ..]
            if matches!(
                *w,
                "prior" | "first" | "last" | "absolute" | "relative" | "backward"
            ) =>
        {
            return Err(backward())
        }
        _ => return Err(syntax(FORM)),
    };
    Ok(Fetching { name, count })
}

fn backward() -> PgWireError {
    refused(
        sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "cursor can only scan forward",
    )
}

/// The error for a cursor that is not open.
pub(super) fn no_cursor(name: &str) -> PgWireError {
    refused(
        sqlstate::INVALID_CURSOR_NAME,
        format!("cursor \"{name}\" does not exist"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_and_fetches_are_read_as_postgresql_reads_them() {
        let d =
            declaration("DECLARE \"my \"\"c\"\"\" NO SCROLL CURSOR WITH HOLD FOR SELECT 1 FOR_x;")
                .unwrap();
        assert_eq!(
            (d.name.as_str(), d.hold, d.query),
            ("my \"c\"", true, "SELECT 1 FOR_x")
        );
        let d = declaration("declare c cursor without hold for select 2").unwrap();
        assert_eq!((d.name.as_str(), d.hold, d.query), ("c", false, "select 2"));
        assert!(declaration("DECLARE c SCROLL CURSOR FOR SELECT 1").is_err());
        assert!(declaration("DECLARE c BINARY CURSOR FOR SELECT 1").is_err());
        assert!(declaration("DECLARE c CURSOR FOR").is_err());
        let f = |sql: &str| fetching(sql).map(|f| (f.name, f.count));
        assert_eq!(
            f("FETCH FORWARD 100 FROM \"C\"").unwrap(),
            ("C".into(), Some(100))
        );
        assert_eq!(f("fetch next in c").unwrap(), ("c".into(), Some(1)));
        assert_eq!(f("FETCH ALL c").unwrap(), ("c".into(), None));
        assert_eq!(f("FETCH 5 c").unwrap(), ("c".into(), Some(5)));
        assert_eq!(f("FETCH C").unwrap(), ("c".into(), Some(1)));
        assert!(f("FETCH PRIOR FROM c").is_err());
        assert!(f("FETCH -1 FROM c").is_err());
        assert!(f("FETCH").is_err());
    }
}
