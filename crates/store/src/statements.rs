//! Kernel statements prepared once per SQLite connection (issue 18, item 1).
//!
//! A kernel statement's text is a `&'static str` ([`crate::Tx::execute`]):
//! its address and length name it for the life of the process, so the
//! cache is keyed by them — no hashing or comparing of the text per call.
//! Each entry keeps what a call would otherwise recompute: the prepared
//! statement, the SQLite index of each `$N` parameter, and the column names
//! shared by every row it returns.
//!
//! The statements borrow their connection, which the cache's owner keeps
//! in a `Box` (a stable address) and drops after the cache (see
//! [`Conn`]). Statements built at run time take rusqlite's text-keyed cache
//! instead ([`crate::Tx::execute_text`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::Connection;

use crate::error::{Error, Result, SqlCode};

/// Most kernel statements cached per connection (there are a few hundred
/// in the code; past this the cache starts over).
pub(crate) const KERNEL_STATEMENTS_MAX: usize = 1_024;

/// Most parameters a kernel statement binds (`$1` … `$64`).
pub(crate) const NAMED_PARAMS_MAX: usize = 64;

/// A connection and its kernel statements. Fields drop in order: the
/// statements before the connection they borrow.
pub(crate) struct Conn {
    statements: RefCell<HashMap<(usize, usize), Prepared>>,
    conn: Box<Connection>,
}

// SAFETY: a `Conn` moves between threads whole — its statements with the
// connection they belong to — and is used by one thread at a time (it is
// `!Sync`): exactly what makes rusqlite's own `Connection` (with its
// statement cache inside) `Send`.
unsafe impl Send for Conn {}

/// One prepared kernel statement.
pub(crate) struct Prepared {
    pub(crate) stmt: rusqlite::Statement<'static>,
    /// `index[k]`: SQLite's index of parameter `$k+1`.
    index: Vec<usize>,
    pub(crate) columns: Arc<[String]>,
}

impl std::ops::Deref for Conn {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl Conn {
    pub(crate) fn new(conn: Connection) -> Conn {
        Conn {
            statements: RefCell::new(HashMap::new()),
            conn: Box::new(conn),
        }
    }

    /// Runs `f` on kernel statement `sql`, prepared on first use, with
    /// `params` bound to its `$N`s.
    pub(crate) fn with<T>(
        &self,
        sql: &'static str,
        params: &[crate::Value],
        f: impl FnOnce(&mut rusqlite::Statement<'static>, &Arc<[String]>) -> Result<T>,
    ) -> Result<T> {
        let key = (sql.as_ptr() as usize, sql.len());
        // A statement run from inside another's use (none does today) finds
        // the cache borrowed and prepares its own copy rather than alias it.
        let Ok(mut cache) = self.statements.try_borrow_mut() else {
            let mut p = self.prepare(sql)?;
            return bind(&mut p, sql, params).and_then(|()| f(&mut p.stmt, &p.columns));
        };
        if !cache.contains_key(&key) && cache.len() >= KERNEL_STATEMENTS_MAX {
            cache.clear();
        }
        let p = match cache.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(self.prepare(sql)?),
        };
        let out = bind(p, sql, params).and_then(|()| f(&mut p.stmt, &p.columns));
        // Stepping reset it (rusqlite resets on a finished execute and on
        // dropping its rows); a large value bound stays no longer than this.
        p.stmt.clear_bindings();
        out
    }

    fn prepare(&self, sql: &'static str) -> Result<Prepared> {
        // SAFETY: the statement borrows `*self.conn`, which lives in a Box
        // owned by `self` and dropped after `self.statements` (field
        // order), and is never moved out or borrowed mutably: statements
        // reach it only through `&Connection`.
        let conn: &'static Connection = unsafe { &*std::ptr::from_ref::<Connection>(&self.conn) };
        let stmt = conn
            .prepare(sql)
            .map_err(|e| crate::sqlite::map_err(e, sql))?;
        let n = stmt.parameter_count();
        if n > NAMED_PARAMS_MAX {
            return Err(Error::sql(
                sql,
                SqlCode::None,
                format!("a kernel statement binds at most {NAMED_PARAMS_MAX} parameters, not {n}"),
                None,
            ));
        }
        let mut index = Vec::with_capacity(n);
        for k in 1..=n {
            let name = format!("${k}");
            let i = stmt
                .parameter_index(&name)
                .map_err(|e| crate::sqlite::map_err(e, sql))?
                .ok_or_else(|| {
                    Error::sql(
                        sql,
                        SqlCode::None,
                        format!("parameter {name} is not used by the statement (parameters are $1..${n})"),
                        None,
                    )
                })?;
            index.push(i);
        }
        let columns: Arc<[String]> = stmt.column_names().into_iter().map(String::from).collect();
        Ok(Prepared {
            stmt,
            index,
            columns,
        })
    }
}

/// Binds `params` to `p`'s `$N`s (SQLite numbers named parameters by first
/// appearance, so `SET v = $2 WHERE k = $1` is bound through the index).
fn bind(p: &mut Prepared, sql: &str, params: &[crate::Value]) -> Result<()> {
    if params.len() != p.index.len() {
        return Err(Error::sql(
            sql,
            SqlCode::None,
            format!(
                "the statement takes {} parameters, {} given",
                p.index.len(),
                params.len()
            ),
            None,
        ));
    }
    for (&i, v) in p.index.iter().zip(params) {
        p.stmt
            .raw_bind_parameter(i, crate::sqlite::Param(v))
            .map_err(|e| crate::sqlite::map_err(e, sql))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    fn conn() -> Conn {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
            .unwrap();
        Conn::new(c)
    }

    const INSERT: &str = "INSERT INTO t (v, k) VALUES ($2, $1)";
    const SELECT: &str = "SELECT k, v AS value FROM t WHERE k >= $1 ORDER BY k";

    fn rows(c: &Conn, from: i64) -> Vec<(i64, String)> {
        c.with(SELECT, &[Value::Int(from)], |stmt, columns| {
            assert_eq!(columns.to_vec(), ["k", "value"]);
            let mut out = Vec::new();
            let mut rows = stmt.raw_query();
            while let Some(r) = rows.next().unwrap() {
                out.push((r.get(0).unwrap(), r.get(1).unwrap()));
            }
            Ok(out)
        })
        .unwrap()
    }

    #[test]
    fn statements_are_prepared_once_and_bound_by_name() {
        let c = conn();
        for k in 1..=3 {
            let n = c
                .with(
                    INSERT,
                    &[Value::Int(k), Value::Text(format!("v{k}"))],
                    |s, _| Ok(s.raw_execute().unwrap()),
                )
                .unwrap();
            assert_eq!(n, 1);
        }
        assert_eq!(c.statements.borrow().len(), 1, "one entry for three calls");
        assert_eq!(rows(&c, 2), [(2, "v2".to_string()), (3, "v3".to_string())]);
        assert_eq!(rows(&c, 1).len(), 3);
        assert_eq!(c.statements.borrow().len(), 2);
    }

    #[test]
    fn bad_parameters_are_refused_and_the_statement_stays_usable() {
        let c = conn();
        let e = c.with(SELECT, &[], |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("takes 1 parameters, 0 given"), "{e}");
        let gap = "SELECT $1, $3";
        let e = c
            .with(gap, &[Value::Int(1), Value::Int(2)], |_, _| Ok(()))
            .unwrap_err();
        assert!(e.to_string().contains("$2 is not used"), "{e}");
        assert!(rows(&c, 0).is_empty());
    }
}
