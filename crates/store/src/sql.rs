//! The house SQL dialect and its translation.
//!
//! Procedures write parameters PostgreSQL-style, `$1`, `$2`, ..., because
//! PostgreSQL accepts nothing else. SQLite would read `$1` as a *named*
//! parameter numbered by first appearance, which silently mis-binds
//! `SET v = $2 WHERE k = $1` if bound by position. Kernel statements keep
//! their text (the prepared statement is cached under it) and are bound by
//! name, `$N` to the index SQLite gave it (`sqlite::bind_named`); tenant SQL
//! and ad-hoc queries, prepared and bound by position, have every `$N`
//! outside string literals, quoted identifiers and comments rewritten to
//! the positional `?N` here.

use std::borrow::Cow;

/// Rewrites `$N` parameters to SQLite's `?N`. Returns the input untouched when
/// it holds no `$`.
pub fn to_sqlite(sql: &str) -> Cow<'_, str> {
    if !sql.contains('$') {
        return Cow::Borrowed(sql);
    }
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'\'' | b'"' | b'`') => {
                // Skip to the closing quote; a doubled quote is an escaped one
                // and is handled by simply continuing the scan.
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += 1;
                }
                i += 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'$' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                out.push_str(&sql[copied..i]);
                out.push('?');
                i += 1;
                copied = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied.min(sql.len())..]);
    Cow::Owned(out)
}

/// The first keyword of a statement, upper-cased, skipping whitespace and
/// comments; empty if there is none.
pub fn first_keyword(sql: &str) -> String {
    let mut rest = sql;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, after)| after);
        } else {
            break;
        }
    }
    rest.chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase()
}

/// Statements that change the database or the session by their first
/// keyword alone; a read-only path refuses them before preparing anything.
pub fn is_write_keyword(keyword: &str) -> bool {
    matches!(
        keyword,
        "INSERT"
            | "UPDATE"
            | "DELETE"
            | "REPLACE"
            | "UPSERT"
            | "MERGE"
            | "CREATE"
            | "DROP"
            | "ALTER"
            | "TRUNCATE"
            | "ATTACH"
            | "DETACH"
            | "VACUUM"
            | "REINDEX"
            | "ANALYZE"
            | "BEGIN"
            | "COMMIT"
            | "END"
            | "ROLLBACK"
            | "SAVEPOINT"
            | "RELEASE"
            | "GRANT"
            | "REVOKE"
            | "COPY"
            | "LOCK"
            | "SET"
            | "RESET"
            | "LISTEN"
            | "NOTIFY"
            | "CALL"
            | "DO"
            | "COMMENT"
            | "CLUSTER"
            | "REFRESH"
            | "PREPARE"
            | "EXECUTE"
            | "DEALLOCATE"
            | "DISCARD"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_keywords() {
        assert_eq!(first_keyword("  select 1"), "SELECT");
        assert_eq!(first_keyword("-- c\n/* d */ Drop table x"), "DROP");
        assert_eq!(first_keyword("/* unterminated"), "");
        assert!(is_write_keyword(&first_keyword("insert into t values (1)")));
        assert!(!is_write_keyword(&first_keyword(
            "WITH x AS (SELECT 1) SELECT * FROM x"
        )));
    }

    #[test]
    fn rewrites_parameters_but_not_literals_or_comments() {
        assert_eq!(to_sqlite("select 1"), "select 1");
        assert_eq!(
            to_sqlite("update t set v = $2 where k = $1"),
            "update t set v = ?2 where k = ?1"
        );
        assert_eq!(
            to_sqlite("select '$1', \"$2\", $3 -- $4\n, $10 /* $5 */"),
            "select '$1', \"$2\", ?3 -- $4\n, ?10 /* $5 */"
        );
        assert_eq!(to_sqlite("select 'it''s $1', $1"), "select 'it''s $1', ?1");
        assert_eq!(to_sqlite("select $x, $"), "select $x, $");
        // An unterminated literal must not make the scanner run past the end.
        assert_eq!(to_sqlite("select '$1"), "select '$1");
    }
}
