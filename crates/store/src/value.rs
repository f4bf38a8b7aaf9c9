//! Typed parameters and typed rows, the same on both backends.
//!
//! The store speaks five value types — the SQLite storage classes — and maps
//! PostgreSQL's richer types onto them (`BOOL` → `Int`, `NUMERIC` → `Int` or
//! `Real`, `VARCHAR` → `Text`, ...). Keeping one small type set is what lets a
//! procedure run unchanged on SQLite and PostgreSQL.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// One SQL value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Int(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Real(r) => write!(f, "{r}"),
            Value::Text(s) => write!(f, "{s}"),
            Value::Blob(b) => {
                write!(f, "x'")?;
                for byte in b {
                    write!(f, "{byte:02x}")?;
                }
                write!(f, "'")
            }
        }
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value { Value::Int(i64::from(v)) }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32, bool);

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value::Blob(v)
    }
}
impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Value {
        Value::Blob(v.to_vec())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Builds a `&[Value]` parameter list: `params![pid, "name", 3.5]`.
#[macro_export]
macro_rules! params {
    () => { &[] as &[$crate::Value] };
    ($($v:expr),+ $(,)?) => { &[$($crate::Value::from($v)),+] as &[$crate::Value] };
}

/// Conversion of a column value into a Rust type.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Result<Self>;
}

fn mismatch(want: &str, got: &Value) -> Error {
    Error::Type(format!(
        "expected {want}, found {} ({got})",
        got.type_name()
    ))
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Result<Self> {
        match v {
            Value::Int(i) => Ok(*i),
            other => Err(mismatch("integer", other)),
        }
    }
}
impl FromValue for u32 {
    fn from_value(v: &Value) -> Result<Self> {
        let i = i64::from_value(v)?;
        u32::try_from(i).map_err(|_| Error::Type(format!("{i} does not fit in u32")))
    }
}
impl FromValue for i32 {
    fn from_value(v: &Value) -> Result<Self> {
        let i = i64::from_value(v)?;
        i32::try_from(i).map_err(|_| Error::Type(format!("{i} does not fit in i32")))
    }
}
impl FromValue for u64 {
    fn from_value(v: &Value) -> Result<Self> {
        let i = i64::from_value(v)?;
        u64::try_from(i).map_err(|_| Error::Type(format!("{i} does not fit in u64")))
    }
}
impl FromValue for bool {
    fn from_value(v: &Value) -> Result<Self> {
        Ok(i64::from_value(v)? != 0)
    }
}
impl FromValue for f64 {
    fn from_value(v: &Value) -> Result<Self> {
        match v {
            Value::Real(r) => Ok(*r),
            Value::Int(i) => Ok(*i as f64),
            other => Err(mismatch("real", other)),
        }
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> Result<Self> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            other => Err(mismatch("text", other)),
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Result<Self> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            Value::Text(s) => Ok(s.as_bytes().to_vec()),
            other => Err(mismatch("blob", other)),
        }
    }
}
impl FromValue for Value {
    fn from_value(v: &Value) -> Result<Self> {
        Ok(v.clone())
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Self> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One result row; the column names are shared by all rows of a result.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    columns: Arc<[String]>,
    values: Vec<Value>,
}

impl Row {
    pub fn new(columns: Arc<[String]>, values: Vec<Value>) -> Row {
        debug_assert_eq!(columns.len(), values.len());
        Row { columns, values }
    }

    /// The value of column `idx`, converted.
    pub fn get<T: FromValue>(&self, idx: usize) -> Result<T> {
        let v = self.values.get(idx).ok_or_else(|| {
            Error::Invalid(format!(
                "column index {idx} out of range ({} columns)",
                self.values.len()
            ))
        })?;
        T::from_value(v).map_err(|e| Error::Type(format!("column {}: {e}", self.columns[idx])))
    }

    /// The value of the column called `name`, converted.
    pub fn get_named<T: FromValue>(&self, name: &str) -> Result<T> {
        let idx = self
            .columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| Error::Invalid(format!("no column named {name:?}")))?;
        self.get(idx)
    }

    pub fn values(&self) -> &[Value] {
        &self.values
    }

    pub fn into_values(self) -> Vec<Value> {
        self.values
    }

    pub fn columns(&self) -> &[String] {
        &self.columns
    }
}

/// The rows of one query, with their column names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rows {
    /// Shared with every row (and, for a kernel statement, with every call).
    pub columns: Arc<[String]>,
    pub rows: Vec<Row>,
    /// The query had more rows than were asked for
    /// ([`Store::query_capped`](crate::Store::query_capped)).
    pub truncated: bool,
}

/// Bounds on one read-path query: its rows, the bytes of its result, the
/// time it may run and a flag that cancels it (its client went away). A
/// query past its deadline or cancelled stops at SQLite's next progress
/// check (or PostgreSQL's `statement_timeout`) and fails; one past its
/// bytes is cut like one past its rows.
#[derive(Debug, Clone)]
pub struct ReadLimits {
    pub cap: Cap,
    /// Most bytes of values in the result (a number counts 8).
    pub bytes_max: usize,
    /// Longest the query may run.
    pub time_max: Option<std::time::Duration>,
    /// Raised when nobody waits for the result any more.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Whose rows the query sees.
    pub scope: ReadScope,
    /// Which engine may answer it ([`crate::columnar`]).
    pub engine: crate::columnar::Engine,
}

/// Whose rows a read-path query sees.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ReadScope {
    /// Every row of every table: the kernel's own reads and an operator's.
    #[default]
    All,
    /// One realm's: the tables and views the schema's `tenant_view` table
    /// names, each holding only the rows whose `realm` column is this
    /// realm, and the realm's tenant tables (`<realm>/<name>`, SQLite).
    /// Nothing else is there — not other tables, not the catalogue — and
    /// nothing in the statement's text reaches past it (see
    /// docs/internals.md, "Realm-scoped SQL").
    Realm(String),
}

/// Most bytes of a result when the caller does not say: the largest reply
/// a node sends.
pub const RESULT_BYTES_MAX: usize = 16 << 20;

impl ReadLimits {
    /// A kernel statement's bounds in a procedure: every row (at most
    /// [`QUERY_ROWS_MAX`](crate::QUERY_ROWS_MAX), more fails), no deadline.
    pub(crate) const KERNEL: ReadLimits = ReadLimits::rows(Cap::Fail(crate::QUERY_ROWS_MAX));

    /// Only a cap on rows (the kernel's own queries).
    pub const fn rows(cap: Cap) -> ReadLimits {
        ReadLimits {
            cap,
            bytes_max: usize::MAX,
            time_max: None,
            cancel: None,
            scope: ReadScope::All,
            engine: crate::columnar::Engine::RowStore,
        }
    }

    /// Whether the query should stop now: past its deadline or cancelled.
    pub(crate) fn stop(&self, started: std::time::Instant) -> bool {
        self.time_max.is_some_and(|t| started.elapsed() >= t) || self.cancelled()
    }

    /// Whether nobody waits for the result any more.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The error of a query stopped by [`stop`](ReadLimits::stop).
    pub(crate) fn stopped(&self, sql: &str) -> Error {
        if self.cancelled() {
            Error::Cancelled(format!("the query's client went away: {sql}"))
        } else {
            Error::Timeout(format!(
                "the query ran past its limit of {} ms and was stopped: {sql}",
                self.time_max.map_or(0, |t| t.as_millis())
            ))
        }
    }
}

/// Counts a result's bytes against [`ReadLimits::bytes_max`].
#[derive(Debug, Default)]
pub(crate) struct ByteBudget {
    used: usize,
}

impl ByteBudget {
    /// Adds a row; `Ok(false)` when the row does not fit a truncating cap
    /// (the result is marked truncated), an error for a failing one.
    pub(crate) fn admit(
        &mut self,
        limits: &ReadLimits,
        values: &[Value],
        sql: &str,
        rows: &mut Rows,
    ) -> Result<bool> {
        let bytes: usize = values
            .iter()
            .map(|v| match v {
                Value::Text(t) => t.len(),
                Value::Blob(b) => b.len(),
                _ => 8,
            })
            .sum();
        self.used = self.used.saturating_add(bytes);
        if self.used <= limits.bytes_max {
            return Ok(true);
        }
        match limits.cap {
            Cap::Fail(_) => Err(Error::Limit {
                what: "query result",
                limit: limits.bytes_max as u64,
                detail: format!("bytes from: {sql}"),
            }),
            Cap::Truncate(_) => {
                rows.truncated = true;
                Ok(false)
            }
        }
    }
}

/// What to do when a query has more rows than its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// Fail with [`Error::Limit`]: a procedure must see all of its rows.
    Fail(usize),
    /// Stop there and mark the result truncated: a person browsing.
    Truncate(usize),
}

impl Cap {
    pub(crate) fn rows(self) -> usize {
        match self {
            Cap::Fail(n) | Cap::Truncate(n) => n,
        }
    }

    /// Called when one more row than the cap exists.
    pub(crate) fn exceeded(self, sql: &str, rows: &mut Rows) -> Result<()> {
        match self {
            Cap::Fail(n) => Err(Error::Limit {
                what: "query result",
                limit: n as u64,
                detail: format!("rows from: {sql}"),
            }),
            Cap::Truncate(_) => {
                rows.truncated = true;
                Ok(())
            }
        }
    }
}

impl Rows {
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    pub fn iter(&self) -> std::slice::Iter<'_, Row> {
        self.rows.iter()
    }
}

impl IntoIterator for Rows {
    type Item = Row;
    type IntoIter = std::vec::IntoIter<Row>;
    fn into_iter(self) -> Self::IntoIter {
        self.rows.into_iter()
    }
}

impl<'a> IntoIterator for &'a Rows {
    type Item = &'a Row;
    type IntoIter = std::slice::Iter<'a, Row>;
    fn into_iter(self) -> Self::IntoIter {
        self.rows.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_and_mismatch_is_an_error() {
        let cols: Arc<[String]> = vec!["a".to_string(), "b".to_string(), "c".to_string()].into();
        let row = Row::new(
            cols,
            vec![Value::Int(7), Value::Null, Value::Text("x".into())],
        );
        assert_eq!(row.get::<i64>(0).unwrap(), 7);
        assert_eq!(row.get::<Option<i64>>(1).unwrap(), None);
        assert_eq!(row.get_named::<String>("c").unwrap(), "x");
        assert!(matches!(row.get::<i64>(2), Err(Error::Type(_))));
        assert!(matches!(row.get::<i64>(9), Err(Error::Invalid(_))));
        assert!(matches!(row.get_named::<i64>("zz"), Err(Error::Invalid(_))));
        assert_eq!(Value::from(Some(3u32)), Value::Int(3));
        assert_eq!(Value::from(None::<i64>), Value::Null);
    }
}
