//! Column snapshots of kernel tables: what the columnar engine scans.
//!
//! A [`TableSnap`] is every row of one kernel table, over all partitions,
//! as of one read transaction: a column per name the queries asked for,
//! each one contiguous vector (text as `u32` codes into the table's
//! [`Dict`]) walked in chunks of [`CHUNK_ROWS`] — NautDB's "columnar,
//! chunk-oriented" layout. A column's memory is asked of the kernel as
//! transparent huge pages (`MADV_HUGEPAGE`) before it is first touched,
//! NautDB's answer to the TLB misses of its Table 1.
//!
//! Snapshots never change once built; a query holds an `Arc` to the ones
//! it reads, so a reload for a newer query never disturbs an older one.

use std::sync::Arc;

use hashbrown::HashMap;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

use crate::error::{Error, Result};

/// Rows an operator takes at once: NautDB's chunk of 8,192 elements.
pub const CHUNK_ROWS: usize = 8_192;
/// Most rows of one table a snapshot holds (row ids are `u32`, and
/// [`NO_ROW`] is kept apart).
pub const TABLE_ROWS_MAX: usize = 200_000_000;
/// Rows loaded between checks of the query's deadline.
const LOAD_CHECK_ROWS: usize = 65_536;

/// A text value's code when the value is NULL.
pub const NULL_CODE: u32 = u32::MAX;
/// The code of a text not in a dictionary: equal to nothing in it.
pub const ABSENT_CODE: u32 = u32::MAX - 1;
/// The row id of the missing side of an outer join's unmatched row.
pub const NO_ROW: u32 = u32::MAX;

/// Why the engine passes a query to SQLite instead: not an error, the
/// row store answers it.
#[derive(Debug)]
pub struct Unsupported(pub String);

/// A failure of the columnar path: a real error (deadline, limit) the
/// caller sees, or a construct the row store must answer.
#[derive(Debug)]
pub enum Fail {
    Unsupported(Unsupported),
    Error(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Error(e)
    }
}

impl From<Unsupported> for Fail {
    fn from(u: Unsupported) -> Fail {
        Fail::Unsupported(u)
    }
}

/// A bound of the engine reached: SQLite answers instead under
/// `Engine::Auto` (within the query's own deadline), and a forced
/// columnar query is refused with this reason.
pub fn past(what: &str, limit: usize) -> Fail {
    Fail::Unsupported(Unsupported(format!(
        "{what} past the engine's limit of {limit}"
    )))
}

/// Shorthand for an [`Unsupported`] failure.
pub fn unsupported<T>(why: impl Into<String>) -> std::result::Result<T, Fail> {
    Err(Fail::Unsupported(Unsupported(why.into())))
}

pub type FResult<T> = std::result::Result<T, Fail>;

/// Interned texts: each distinct text once, coded by its position.
#[derive(Debug, Default)]
pub struct Dict {
    strings: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
    bytes: usize,
}

impl Dict {
    pub fn new() -> Dict {
        Dict::default()
    }

    /// The code of `s`, added if new.
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&c) = self.index.get(s) {
            return c;
        }
        let c = self.strings.len() as u32;
        debug_assert!(c < ABSENT_CODE);
        let a: Arc<str> = Arc::from(s);
        self.bytes += s.len() + 48;
        self.strings.push(a.clone());
        self.index.insert(a, c);
        c
    }

    /// The code of `s`, or [`ABSENT_CODE`].
    pub fn code(&self, s: &str) -> u32 {
        self.index.get(s).copied().unwrap_or(ABSENT_CODE)
    }

    /// The text of code `c` (a code of this dictionary, not NULL).
    pub fn get(&self, c: u32) -> &str {
        &self.strings[c as usize]
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What a column holds, from its declared type's affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Int,
    Real,
    Text,
}

impl Ty {
    /// SQLite's affinity rules (section 3.1 of "Datatypes In SQLite"),
    /// for the three kinds the engine holds; `None` for BLOB and NUMERIC.
    pub fn of_declared(decl: &str) -> Option<Ty> {
        let d = decl.to_ascii_uppercase();
        if d.contains("INT") {
            Some(Ty::Int)
        } else if d.contains("CHAR") || d.contains("CLOB") || d.contains("TEXT") {
            Some(Ty::Text)
        } else if d.contains("REAL") || d.contains("FLOA") || d.contains("DOUB") {
            Some(Ty::Real)
        } else {
            None
        }
    }
}

/// One column's values, row id order.
#[derive(Debug)]
pub enum Data {
    Int(Vec<i64>),
    Real(Vec<f64>),
    Text(Vec<u32>),
}

#[derive(Debug)]
pub struct Column {
    pub data: Data,
    /// `Some` when a number is NULL somewhere (text codes say it
    /// themselves, [`NULL_CODE`]).
    pub nulls: Option<Vec<bool>>,
}

impl Column {
    pub fn ty(&self) -> Ty {
        match self.data {
            Data::Int(_) => Ty::Int,
            Data::Real(_) => Ty::Real,
            Data::Text(_) => Ty::Text,
        }
    }

    fn bytes(&self) -> usize {
        let n = match &self.data {
            Data::Int(v) => v.len() * 8,
            Data::Real(v) => v.len() * 8,
            Data::Text(v) => v.len() * 4,
        };
        n + self.nulls.as_ref().map_or(0, Vec::len)
    }
}

/// A table's rows as columns, as of one read transaction.
#[derive(Debug)]
pub struct TableSnap {
    pub name: String,
    pub rows: usize,
    /// Column name → column; only the columns loaded.
    pub columns: HashMap<String, Column>,
    pub dict: Arc<Dict>,
    /// The table's change count ([`super::changes`]) read before loading.
    pub generation: u64,
    /// Queries that read it after the one that loaded it.
    pub uses: std::sync::atomic::AtomicU64,
}

impl TableSnap {
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.get(name)
    }

    pub fn bytes(&self) -> usize {
        self.columns.values().map(Column::bytes).sum::<usize>() + self.dict.bytes()
    }
}

/// The declared columns of kernel table `table` (name, kind; `None` for
/// a kind the engine does not hold), from partition 0's catalogue.
pub fn declared_columns(conn: &Connection, table: &str) -> Result<Vec<(String, Option<Ty>)>> {
    let sql = "SELECT name, type FROM pragma_table_info(?1, 'main')";
    let mut stmt = conn
        .prepare_cached(sql)
        .map_err(|e| crate::sqlite::map_err(e, sql))?;
    let rows = stmt
        .query_map([table], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(|e| crate::sqlite::map_err(e, sql))?;
    let mut out = Vec::new();
    for r in rows {
        let (name, decl) = r.map_err(|e| crate::sqlite::map_err(e, sql))?;
        out.push((name, Ty::of_declared(&decl)));
    }
    Ok(out)
}

/// A vector whose memory is asked for as huge pages before it is
/// touched, holding `values` (returned as is when under 4 MiB).
pub fn huge_pages<T: Copy>(values: Vec<T>) -> Vec<T> {
    let bytes = values.len() * std::mem::size_of::<T>();
    if bytes < (4 << 20) {
        return values;
    }
    let mut out: Vec<T> = Vec::with_capacity(values.len());
    advise_huge(out.as_mut_ptr() as *mut u8, bytes);
    out.extend_from_slice(&values);
    out
}

/// `MADV_HUGEPAGE` over the whole 2 MiB pages inside `[ptr, ptr+bytes)`:
/// a hint, so its failure (no THP in this kernel) changes nothing.
fn advise_huge(ptr: *mut u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    let start = (ptr as usize).div_ceil(HUGE) * HUGE;
    let end = (ptr as usize + bytes) / HUGE * HUGE;
    if end > start {
        // SAFETY: [start, end) lies inside the allocation `ptr` points to
        // (rounded inwards to whole huge pages); madvise with
        // MADV_HUGEPAGE changes no contents and no mapping, only how the
        // kernel backs it.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

/// Loads columns `wanted` of kernel table `table` over every partition
/// (`schemas`: `main`, `p1` …, attached to `conn`) in one statement, so
/// in one read snapshot. `check` is asked every [`LOAD_CHECK_ROWS`] rows
/// whether to go on (the query's deadline); `bytes_max` bounds the
/// snapshot. A value of another kind than its column declares (SQLite
/// lets one in) makes the table one for the row store.
pub fn load(
    conn: &Connection,
    schemas: &[String],
    table: &str,
    wanted: &[(String, Ty)],
    generation: u64,
    bytes_max: usize,
    check: &dyn Fn() -> Result<()>,
) -> FResult<TableSnap> {
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let list = if wanted.is_empty() {
        "1".to_string()
    } else {
        wanted
            .iter()
            .map(|(c, _)| q(c))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sql = schemas
        .iter()
        .map(|s| format!("SELECT {list} FROM {s}.{}", q(table)))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut stmt = conn
        .prepare(&sql)
        .map_err(|e| crate::sqlite::map_err(e, &sql))?;
    let mut dict = Dict::new();
    enum Build {
        Int(Vec<i64>, Vec<bool>, bool),
        Real(Vec<f64>, Vec<bool>, bool),
        Text(Vec<u32>),
    }
    let mut cols: Vec<Build> = wanted
        .iter()
        .map(|(_, ty)| match ty {
            Ty::Int => Build::Int(Vec::new(), Vec::new(), false),
            Ty::Real => Build::Real(Vec::new(), Vec::new(), false),
            Ty::Text => Build::Text(Vec::new()),
        })
        .collect();
    let mut rows = stmt.raw_query();
    let mut n = 0usize;
    let per_row = wanted.len() * 8 + 8;
    while let Some(row) = rows.next().map_err(|e| crate::sqlite::map_err(e, &sql))? {
        n += 1;
        if n.is_multiple_of(LOAD_CHECK_ROWS) {
            check()?;
            if n.saturating_mul(per_row) + dict.bytes() > bytes_max {
                return Err(past(
                    &format!("bytes of table {table}'s snapshot"),
                    bytes_max,
                ));
            }
        }
        if n > TABLE_ROWS_MAX {
            return unsupported(format!("{table} has more than {TABLE_ROWS_MAX} rows"));
        }
        for (i, b) in cols.iter_mut().enumerate() {
            let v = row
                .get_ref(i)
                .map_err(|e| crate::sqlite::map_err(e, &sql))?;
            match (b, v) {
                (Build::Int(vals, nulls, _), ValueRef::Integer(x)) => {
                    vals.push(x);
                    nulls.push(false);
                }
                (Build::Int(vals, nulls, any), ValueRef::Null) => {
                    vals.push(0);
                    nulls.push(true);
                    *any = true;
                }
                (Build::Real(vals, nulls, _), ValueRef::Real(x)) => {
                    vals.push(x);
                    nulls.push(false);
                }
                (Build::Real(vals, nulls, _), ValueRef::Integer(x)) => {
                    // REAL affinity stores a whole number as an integer
                    // on disk; it reads back as the real it is.
                    vals.push(x as f64);
                    nulls.push(false);
                }
                (Build::Real(vals, nulls, any), ValueRef::Null) => {
                    vals.push(0.0);
                    nulls.push(true);
                    *any = true;
                }
                (Build::Text(codes), ValueRef::Text(t)) => match std::str::from_utf8(t) {
                    Ok(s) => codes.push(dict.intern(s)),
                    Err(_) => return unsupported(format!("{table} holds text that is not UTF-8")),
                },
                (Build::Text(codes), ValueRef::Null) => codes.push(NULL_CODE),
                (_, _) => {
                    return unsupported(format!(
                        "column {} of {table} holds a value of another kind than it declares",
                        wanted[i].0
                    ))
                }
            }
        }
    }
    let mut columns = HashMap::new();
    for ((name, _), b) in wanted.iter().zip(cols) {
        let col = match b {
            Build::Int(v, nulls, any) => Column {
                data: Data::Int(huge_pages(v)),
                nulls: any.then_some(nulls),
            },
            Build::Real(v, nulls, any) => Column {
                data: Data::Real(huge_pages(v)),
                nulls: any.then_some(nulls),
            },
            Build::Text(v) => Column {
                data: Data::Text(huge_pages(v)),
                nulls: None,
            },
        };
        columns.insert(name.clone(), col);
    }
    let snap = TableSnap {
        name: table.to_string(),
        rows: n,
        columns,
        dict: Arc::new(dict),
        generation,
        uses: std::sync::atomic::AtomicU64::new(0),
    };
    if snap.bytes() > bytes_max {
        return Err(past(
            &format!("bytes of table {table}'s snapshot"),
            bytes_max,
        ));
    }
    Ok(snap)
}
