//! PostgreSQL's dialect on SQLite (issue 38, item 1).
//!
//! SQL a user writes — `tabos sql`, the PostgreSQL front door, the
//! dashboard's console, a stored procedure's `tabos.query`/`exec` — is
//! PostgreSQL's on both backends. On PostgreSQL it runs as written; on
//! SQLite, [`translate`] parses it with `sqlparser`'s PostgreSQL dialect and
//! prints it back as SQLite: casts (`::`, `CAST`) to booleans, timestamps,
//! dates and intervals, `now()`, `to_timestamp`, `extract`/`date_part`,
//! `date_trunc`, interval arithmetic on timestamps, `ILIKE`,
//! `generate_series` in `FROM`, `GREATEST`/`LEAST`, `string_agg`,
//! `array_agg`, `ARRAY[…]` and `= ANY(ARRAY[…])`, `AT TIME ZONE 'UTC'`,
//! `DISTINCT ON` (a window function), and a tenant table's `serial` and
//! default expressions.
//! What SQLite already reads the same way (`COALESCE`, `NULLIF`,
//! `FILTER (WHERE …)`, JSON `->`/`->>`, `true`/`false`) passes through. A
//! construct with no SQLite form (`DISTINCT ON` with `*` or in a union, a
//! set-returning function in a select list, a cast to a type SQLite cannot
//! hold) is refused with its name, as SQLSTATE 0A000.
//!
//! Translation happens before SQLite compiles the statement, so the
//! authorizer, the read path's limits and the realm's scope see the
//! translated statement — it comes before them, never instead of them.
//! A statement sqlparser cannot read (SQLite's own syntax: `GLOB`, `==`,
//! `INSERT OR REPLACE` …) is passed on unchanged, for SQLite to accept or
//! refuse; one the translation does not change is passed on byte for byte.
//!
//! Times on SQLite are text, RFC 3339 in UTC to the µs
//! (`2026-11-27T19:30:00.123456Z`), which orders as the times do;
//! intervals are integers of µs. The functions that work on them
//! (`pg_ts`, `pg_interval`, `pg_ts_add` …) and the catalog's session
//! functions (`version()`, `current_database()`, `current_schema()`,
//! `current_setting`, `set_config`) are installed on every connection by
//! [`install`].
//!
//! Translations are cached per statement text ([`CACHE_ENTRIES_MAX`]).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::Connection;
use sqlparser::ast::visit_expressions_mut;
use sqlparser::ast::{
    self, BinaryOperator, CastKind, Distinct, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, SelectItem,
    SetExpr, Statement, TableFactor, UnaryOperator, Value, VisitMut, VisitorMut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::{Error, SqlCode, SqlError};

/// Most statement texts whose translation is kept.
pub const CACHE_ENTRIES_MAX: usize = 4_096;
/// Longest statement kept in the cache, in bytes (longer ones are
/// translated each time).
pub const CACHE_STATEMENT_BYTES_MAX: usize = 4_096;
/// Deepest nesting of expressions and subqueries the parser follows.
pub const NESTING_MAX: usize = 64;
/// Most rows one `generate_series` in `FROM` yields.
pub const SERIES_ROWS_MAX: i64 = 10_000_000;

/// The PostgreSQL version the front door and `version()` report (the
/// front door's `server_version`: clients read the leading number).
pub const SERVER_VERSION: &str = "15.0 (tabos)";

/// The session settings clients ask for (`SHOW`, `current_setting`), as
/// PostgreSQL 15 reports them for a read-only UTF-8 session in UTC.
pub fn setting(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "server_version" => SERVER_VERSION,
        "server_version_num" => "150000",
        "server_encoding" | "client_encoding" => "UTF8",
        "standard_conforming_strings" => "on",
        "datestyle" => "ISO, MDY",
        "timezone" | "time zone" => "UTC",
        "intervalstyle" => "postgres",
        // SHOW's own spellings of two of them.
        "transaction_isolation"
        | "default_transaction_isolation"
        | "transaction isolation level" => "repeatable read",
        "transaction_read_only" | "default_transaction_read_only" => "on",
        "search_path" => "public",
        "integer_datetimes" => "on",
        "max_identifier_length" => "63",
        "application_name" => "",
        "lc_collate" | "lc_ctype" => "C",
        "is_superuser" => "off",
        _ => return None,
    })
}

/// What `version()` says.
pub fn version() -> String {
    format!(
        "PostgreSQL 15.0 on tabos {}, SQLite {} backend",
        env!("CARGO_PKG_VERSION"),
        rusqlite::version()
    )
}

/// What one statement text comes to, worked out from one parse: its
/// SQLite form (or why it has none) and which result columns are booleans.
struct Reading {
    sqlite: Result<Arc<str>, Error>,
    bools: Arc<[bool]>,
    /// [`output_names`]'s answer.
    names: Option<Vec<String>>,
    /// [`array_columns`]'s answer.
    arrays: Arc<[bool]>,
}

type Cache = Mutex<HashMap<String, Reading>>;

/// How a statement is read: a user's, or one a front door answers from
/// its own copy of PostgreSQL's catalog.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// A user's statement on the store: a cast to a type SQLite cannot
    /// hold is refused.
    User,
    /// A catalog statement (pg_dump's, SQLAlchemy's inspector's …) run on
    /// a catalog database: a cast to one of the catalog's own types
    /// (`regclass`, `regtype`, `oid`, `name`, `"char"` …) becomes the
    /// catalog function `pg_cast_<type>` when there is one
    /// ([`CATALOG_CASTS`]), else the value as it is — oids are integers
    /// there and names text.
    Catalog,
}

/// The catalog's casts that change a value (an oid printed as the name
/// it stands for, a name looked up as its oid): the front door's catalog
/// database defines `pg_cast_<type>` for each.
pub const CATALOG_CASTS: &[&str] = &["regclass", "regtype", "regnamespace", "regproc", "regrole"];

fn cache(mode: Mode) -> &'static Cache {
    static USER: OnceLock<Cache> = OnceLock::new();
    static CATALOG: OnceLock<Cache> = OnceLock::new();
    match mode {
        Mode::User => &USER,
        Mode::Catalog => &CATALOG,
    }
    .get_or_init(|| Mutex::new(HashMap::new()))
}

/// `f` of `sql`'s [`Reading`], from the cache or made (and kept) now.
fn with_reading<T>(sql: &str, f: impl FnOnce(&Reading) -> T) -> T {
    with_reading_as(Mode::User, sql, f)
}

fn with_reading_as<T>(mode: Mode, sql: &str, f: impl FnOnce(&Reading) -> T) -> T {
    if sql.len() > CACHE_STATEMENT_BYTES_MAX {
        return f(&read(sql, mode));
    }
    if let Some(hit) = lock(cache(mode)).get(sql) {
        return f(hit);
    }
    let made = read(sql, mode);
    let out = f(&made);
    let mut c = lock(cache(mode));
    if c.len() >= CACHE_ENTRIES_MAX {
        // Statements are mostly the same few (prepared, or a client's own
        // catalog queries): starting over is as good as evicting well.
        c.clear();
    }
    c.insert(sql.to_string(), made);
    out
}

/// `sql` (PostgreSQL's dialect) as SQLite runs it; see the module doc.
/// The same text always gives the same answer, kept after the first time.
pub fn translate(sql: &str) -> Result<Arc<str>, Error> {
    with_reading(sql, |r| r.sqlite.clone())
}

/// [`translate`] for a catalog statement ([`Mode::Catalog`]).
pub fn translate_catalog(sql: &str) -> Result<Arc<str>, Error> {
    with_reading_as(Mode::Catalog, sql, |r| r.sqlite.clone())
}

/// Which result columns of catalog statement `sql` are arrays by their
/// select item (`array_agg(…)`, `ARRAY[…]`, `ARRAY(SELECT …)`): on SQLite
/// their values are JSON arrays, which a front door sends as PostgreSQL
/// arrays.
pub fn array_columns(sql: &str) -> Arc<[bool]> {
    with_reading_as(Mode::Catalog, sql, |r| r.arrays.clone())
}

/// The names PostgreSQL gives the result columns of `sql` when it is
/// one query whose select items can all be named without running it (no
/// `*`): an alias, a column's own name, a function's name, `?column?`
/// for anything else. A catalog statement answered with no rows still
/// has its columns (a client reads a result's shape before its rows).
pub fn output_names(sql: &str) -> Option<Vec<String>> {
    with_reading_as(Mode::Catalog, sql, |r| r.names.clone())
}

/// Which result columns of `sql` are booleans by what the statement says
/// at the top of each select item — a comparison, `AND`/`OR`/`NOT`, `IS
/// …`, `LIKE`, `IN`, `BETWEEN`, `EXISTS`, `true`/`false`, a cast to
/// boolean — so that a front door can type them (SQLite has no boolean;
/// the store reads PostgreSQL's as an integer). Empty when it cannot tell
/// (a `*`, not one SELECT). Cached with [`translate`]'s answer.
pub fn bool_columns(sql: &str) -> Arc<[bool]> {
    with_reading(sql, |r| r.bools.clone())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`translate`] without the cache (what the benchmark's uncached figure
/// measures).
pub fn translate_uncached(sql: &str) -> Result<Arc<str>, Error> {
    read(sql, Mode::User).sqlite
}

/// Parses `sql` once and works out its [`Reading`].
fn read(sql: &str, mode: Mode) -> Reading {
    let parsed = Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(NESTING_MAX)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements());
    let Ok(mut statements) = parsed else {
        // Not PostgreSQL as sqlparser reads it: SQLite's own syntax, or a
        // mistake SQLite will name.
        return Reading {
            sqlite: Ok(Arc::from(sql)),
            bools: Arc::from([]),
            names: None,
            arrays: Arc::from([]),
        };
    };
    // Before translation rewrites the select items.
    let bools = Arc::from(bools_of(&statements));
    let names = names_of(&statements);
    let arrays = Arc::from(arrays_of(&statements));
    let mut t = Translator {
        changed: false,
        mode,
    };
    let sqlite = if let ControlFlow::Break(construct) = statements.visit(&mut t) {
        Err(unsupported(sql, &construct))
    } else if !t.changed {
        Ok(Arc::from(sql))
    } else {
        let text = statements
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        Ok(Arc::from(text))
    };
    Reading {
        sqlite,
        bools,
        names,
        arrays,
    }
}

/// The column name PostgreSQL gives a cast of an unnamed value to type
/// `t` (as sqlparser prints it): the type's internal name.
fn type_column_name(t: &str) -> String {
    let t = t.to_ascii_lowercase();
    let base = t.split(['(', '[']).next().unwrap_or("").trim();
    match base {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "real" | "float4" => "float4",
        "double precision" | "float8" | "float" | "double" => "float8",
        "bool" | "boolean" => "bool",
        "character varying" | "varchar" => "varchar",
        "character" | "char" | "bpchar" => "bpchar",
        "timestamp with time zone" | "timestamptz" => "timestamptz",
        "timestamp" | "timestamp without time zone" => "timestamp",
        other => return other.rsplit('.').next().unwrap_or(other).to_string(),
    }
    .to_string()
}

/// [`array_columns`] of parsed `statements`.
fn arrays_of(statements: &[Statement]) -> Vec<bool> {
    let Some(select) = only_select(statements) else {
        return Vec::new();
    };
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => is_array(e),
            _ => false,
        })
        .collect()
}

/// Whether `e` builds an array: `ARRAY[…]`, `array_agg`, `ARRAY(…)`, or a
/// scalar subquery of one of them.
fn is_array(e: &Expr) -> bool {
    match unnested(e) {
        Expr::Array(_) => true,
        Expr::Subquery(q) => match q.body.as_ref() {
            SetExpr::Select(s) => matches!(
                s.projection.as_slice(),
                [SelectItem::UnnamedExpr(i) | SelectItem::ExprWithAlias { expr: i, .. }] if is_array(i)
            ),
            _ => false,
        },
        e => fn_named(e, &["array_agg", "array"]),
    }
}

/// The one SELECT of `statements` (a UNION's first arm), if that is what
/// they are.
fn only_select(statements: &[Statement]) -> Option<&ast::Select> {
    let [Statement::Query(q)] = statements else {
        return None;
    };
    let mut body = q.body.as_ref();
    while let SetExpr::SetOperation { left, .. } = body {
        body = left.as_ref();
    }
    match body {
        SetExpr::Select(select) => Some(select),
        _ => None,
    }
}

/// The relations `sql` names (tables, views, CTEs — lower-cased, last
/// part of a qualified name), or `None` when PostgreSQL's parser cannot
/// read it: a front door decides from them which scope a statement
/// needs.
pub fn relations_named(sql: &str) -> Option<Vec<String>> {
    let statements = Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(NESTING_MAX)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .ok()?;
    let mut names = Vec::new();
    let _ = ast::visit_relations(&statements, |r| {
        if let Some(ObjectNamePart::Identifier(i)) = r.0.last() {
            names.push(i.value.to_ascii_lowercase());
        }
        ControlFlow::<()>::Continue(())
    });
    Some(names)
}

/// `PREPARE name [(types)] AS statement` (SQL's, as pg_dump sends it):
/// the name, folded as PostgreSQL folds an identifier, and the statement.
pub fn prepare_of(sql: &str) -> Option<(String, String)> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    let [Statement::Prepare {
        name, statement, ..
    }] = statements.as_slice()
    else {
        return None;
    };
    Some((folded(name), statement.to_string()))
}

/// `EXECUTE name [(arguments)]`: the name and the arguments' values
/// (`Err` names what is not a literal); `None` when `sql` is not one.
pub fn execute_of(sql: &str) -> Option<Result<(String, Vec<crate::Value>), String>> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    let [Statement::Execute {
        name: Some(name),
        parameters,
        immediate: false,
        ..
    }] = statements.as_slice()
    else {
        return None;
    };
    let name = match name.0.as_slice() {
        [ObjectNamePart::Identifier(i)] => folded(i),
        _ => return Some(Err(format!("EXECUTE {name}"))),
    };
    Some(
        parameters
            .iter()
            .map(literal)
            .collect::<Result<Vec<_>, _>>()
            .map(|values| (name, values)),
    )
}

/// An identifier as PostgreSQL reads it: quoted as is, else lower case.
fn folded(i: &Ident) -> String {
    match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_ascii_lowercase(),
    }
}

/// A literal argument's value (a cast of one is the literal).
fn literal(e: &Expr) -> Result<crate::Value, String> {
    Ok(match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => crate::Value::Text(s.clone()),
            Value::Number(n, _) => match n.parse::<i64>() {
                Ok(i) => crate::Value::Int(i),
                Err(_) => crate::Value::Real(n.parse().map_err(|_| format!("the number {n}"))?),
            },
            Value::Boolean(b) => crate::Value::Int(i64::from(*b)),
            Value::Null => crate::Value::Null,
            other => return Err(format!("the argument {other}")),
        },
        Expr::Cast { expr, .. } | Expr::Nested(expr) => literal(expr)?,
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal(expr)? {
            crate::Value::Int(i) => crate::Value::Int(-i),
            crate::Value::Real(r) => crate::Value::Real(-r),
            _ => return Err(format!("the argument {e}")),
        },
        other => return Err(format!("the argument {other}, which is not a literal")),
    })
}

/// A `COPY … TO STDOUT` as a front door runs it: the query whose rows it
/// writes, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyOut {
    /// The rows' query, in PostgreSQL's dialect (`COPY t (a, b)` is
    /// `SELECT a, b FROM t`).
    pub query: String,
    /// CSV, not PostgreSQL's text format.
    pub csv: bool,
    /// A first line of column names.
    pub header: bool,
    pub delimiter: char,
    /// How NULL is written.
    pub null: String,
    /// CSV's quote and escape characters.
    pub quote: char,
    pub escape: char,
}

/// What a `COPY` statement asks of a front door that only reads: `None`
/// when `sql` is not a `COPY`; `Some(Err((sqlstate, why)))` when it is one
/// that cannot be served — into a table (`FROM`), to or from a file or a
/// program, binary.
pub fn copy_out(sql: &str) -> Option<Result<CopyOut, (&'static str, String)>> {
    let statements = Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(NESTING_MAX)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .ok()?;
    let [Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    }] = statements.as_slice()
    else {
        return None;
    };
    Some(copy_of(source, *to, target, options, legacy_options))
}

fn copy_of(
    source: &ast::CopySource,
    to: bool,
    target: &ast::CopyTarget,
    options: &[ast::CopyOption],
    legacy: &[ast::CopyLegacyOption],
) -> Result<CopyOut, (&'static str, String)> {
    use ast::{CopyLegacyCsvOption as Csv, CopyLegacyOption as Legacy, CopyOption as Opt};
    const READ_ONLY: &str = "25006";
    const PRIVILEGE: &str = "42501";
    const UNSUPPORTED: &str = "0A000";
    if !to {
        return Err((
            READ_ONLY,
            "cannot execute COPY FROM: tabos's SQL is read-only".into(),
        ));
    }
    if !matches!(target, ast::CopyTarget::Stdout) {
        return Err((
            PRIVILEGE,
            "COPY to a file or a program is not allowed: use COPY … TO STDOUT".into(),
        ));
    }
    // `public.t` (pg_dump's spelling) is the realm's `t`: every relation
    // a session sees is in schema public, whichever backend keeps it.
    let unqualified = |name: &ObjectName| match name.0.as_slice() {
        [ObjectNamePart::Identifier(schema), table] if schema.value == "public" => {
            ObjectName(vec![table.clone()])
        }
        _ => name.clone(),
    };
    let query = match source {
        ast::CopySource::Query(q) => q.to_string(),
        ast::CopySource::Table {
            table_name,
            columns,
        } if columns.is_empty() => format!("SELECT * FROM {}", unqualified(table_name)),
        ast::CopySource::Table {
            table_name,
            columns,
        } => format!(
            "SELECT {} FROM {}",
            columns
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            unqualified(table_name)
        ),
    };
    let mut out = CopyOut {
        query,
        csv: false,
        header: false,
        delimiter: '\t',
        null: "\\N".into(),
        quote: '"',
        escape: '"',
    };
    let (mut delimiter, mut null) = (None, None);
    let unsupported = |what: String| Err((UNSUPPORTED, format!("COPY with {what}")));
    for o in options {
        match o {
            Opt::Format(f) => match f.value.to_ascii_lowercase().as_str() {
                "csv" => out.csv = true,
                "text" => out.csv = false,
                other => return unsupported(format!("FORMAT {other}")),
            },
            Opt::Header(h) => out.header = *h,
            Opt::Delimiter(c) => delimiter = Some(*c),
            Opt::Null(n) => null = Some(n.clone()),
            Opt::Quote(c) => out.quote = *c,
            Opt::Escape(c) => out.escape = *c,
            Opt::Encoding(e)
                if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => return unsupported(other.to_string()),
        }
    }
    for o in legacy {
        match o {
            Legacy::Csv(csv) => {
                out.csv = true;
                for c in csv {
                    match c {
                        Csv::Header => out.header = true,
                        Csv::Quote(q) => out.quote = *q,
                        Csv::Escape(e) => out.escape = *e,
                        other => return unsupported(other.to_string()),
                    }
                }
            }
            Legacy::Header => out.header = true,
            Legacy::Delimiter(c) => delimiter = Some(*c),
            Legacy::Null(n) => null = Some(n.clone()),
            other => return unsupported(other.to_string()),
        }
    }
    if out.csv {
        out.delimiter = ',';
        out.null = String::new();
    }
    if let Some(d) = delimiter {
        out.delimiter = d;
    }
    if let Some(n) = null {
        out.null = n;
    }
    if matches!(out.delimiter, '\n' | '\r') || (out.csv && out.delimiter == out.quote) {
        return Err((
            "22023",
            "COPY delimiter cannot be a newline or the quote".into(),
        ));
    }
    Ok(out)
}

/// A table's columns and primary key, as its `CREATE TABLE` says.
#[derive(Debug, Default, PartialEq)]
pub struct TableShape {
    /// Name, declared type (empty when none) and whether `NOT NULL` (a
    /// primary key's columns are).
    pub columns: Vec<(String, String, bool)>,
    /// The primary key's columns, in key order (empty: none).
    pub primary_key: Vec<String>,
}

/// The [`TableShape`] of a SQLite `CREATE TABLE` statement (what
/// `sqlite_master.sql` keeps, its ALTERs included); `None` for anything
/// else.
pub fn sqlite_table_shape(ddl: &str) -> Option<TableShape> {
    let statements = Parser::parse_sql(&sqlparser::dialect::SQLiteDialect {}, ddl).ok()?;
    let [Statement::CreateTable(t)] = statements.as_slice() else {
        return None;
    };
    let column_of = |c: &ast::IndexColumn| match &c.column.expr {
        Expr::Identifier(i) => Some(i.value.clone()),
        _ => None,
    };
    let mut primary_key: Vec<String> = Vec::new();
    for c in &t.constraints {
        if let ast::TableConstraint::PrimaryKey(pk) = c {
            primary_key = pk.columns.iter().filter_map(column_of).collect();
        }
    }
    for c in &t.columns {
        if c.options
            .iter()
            .any(|o| matches!(o.option, ast::ColumnOption::PrimaryKey(_)))
        {
            primary_key = vec![c.name.value.clone()];
        }
    }
    let columns = t
        .columns
        .iter()
        .map(|c| {
            let not_null = primary_key.contains(&c.name.value)
                || c.options
                    .iter()
                    .any(|o| matches!(o.option, ast::ColumnOption::NotNull));
            let decl = match c.data_type {
                ast::DataType::Unspecified => String::new(),
                ref d => d.to_string(),
            };
            (c.name.value.clone(), decl, not_null)
        })
        .collect();
    Some(TableShape {
        columns,
        primary_key,
    })
}

/// [`output_names`] of parsed `statements`.
fn names_of(statements: &[Statement]) -> Option<Vec<String>> {
    only_select(statements)?
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            SelectItem::UnnamedExpr(e) => Some(expr_name(e)),
            _ => None,
        })
        .collect()
}

/// The name PostgreSQL gives an unnamed select item `e`.
fn expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.clone(),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map_or_else(|| "?column?".into(), |i| i.value.clone()),
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| match p {
                ObjectNamePart::Identifier(i) => Some(i.value.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "?column?".into()),
        Expr::Nested(expr) => expr_name(expr),
        // `x::int` keeps x's name; a cast of something unnamed is named by
        // its type, as PostgreSQL spells it internally.
        Expr::Cast {
            expr, data_type, ..
        } => match expr_name(expr).as_str() {
            "?column?" => type_column_name(&data_type.to_string()),
            named => named.into(),
        },
        Expr::Value(v) if matches!(v.value, Value::Boolean(_)) => "bool".into(),
        Expr::Case { .. } => "case".into(),
        Expr::Exists { .. } => "exists".into(),
        Expr::Array(_) => "array".into(),
        _ => "?column?".into(),
    }
}

fn unsupported(sql: &str, construct: &str) -> Error {
    Error::Sql(Box::new(SqlError {
        statement: sql.to_string(),
        code: SqlCode::Sqlstate("0A000".into()),
        message: format!(
            "{construct} is not supported on the SQLite backend (tabos translates PostgreSQL's \
             SQL to SQLite's; this has no SQLite form)"
        ),
        position: None,
    }))
}

/// [`bool_columns`] of parsed statements.
fn bools_of(statements: &[Statement]) -> Vec<bool> {
    let [Statement::Query(q)] = statements else {
        return vec![];
    };
    let mut body = q.body.as_ref();
    // A UNION's columns are its first SELECT's.
    while let SetExpr::SetOperation { left, .. } = body {
        body = left.as_ref();
    }
    let SetExpr::Select(select) = body else {
        return vec![];
    };
    let mut out = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                out.push(is_boolean(e))
            }
            _ => return vec![],
        }
    }
    out
}

/// Whether expression `e` is a boolean by its form.
fn is_boolean(e: &Expr) -> bool {
    use BinaryOperator as B;
    match unnested(e) {
        Expr::BinaryOp { op, .. } => matches!(
            op,
            B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq | B::And | B::Or | B::Xor
        ),
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            ..
        }
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsNotTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotUnknown(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..)
        | Expr::Like { .. }
        | Expr::ILike { .. }
        | Expr::SimilarTo { .. }
        | Expr::In { .. }
        | Expr::Between { .. }
        | Expr::Exists { .. }
        | Expr::AnyOp { .. }
        | Expr::AllOp { .. } => true,
        Expr::Value(v) => matches!(v.value, Value::Boolean(_)),
        Expr::Cast { data_type, .. } => matches!(
            target(&data_type.to_string()),
            Some(Target::Call("pg_bool"))
        ),
        Expr::TypedString(ts) => matches!(
            target(&ts.data_type.to_string()),
            Some(Target::Call("pg_bool"))
        ),
        _ => false,
    }
}

/// Rewrites an AST in place, children first; `Break` names what cannot
/// be translated.
struct Translator {
    changed: bool,
    mode: Mode,
}

impl VisitorMut for Translator {
    type Break = String;

    fn post_visit_statement(&mut self, statement: &mut Statement) -> ControlFlow<String> {
        // A tenant's table in PostgreSQL's DDL (a procedure's
        // `tabos.exec`): `serial` is SQLite's INTEGER (its rowid, counting
        // up, when the key), and a default that is not a literal is
        // parenthesized, as SQLite asks (`DEFAULT (pg_now())`).
        if let Statement::CreateTable(t) = statement {
            for c in &mut t.columns {
                let ty = c.data_type.to_string().to_ascii_lowercase();
                if matches!(
                    ty.as_str(),
                    "serial" | "bigserial" | "smallserial" | "serial4" | "serial8" | "serial2"
                ) {
                    c.data_type = ast::DataType::Integer(None);
                    self.changed = true;
                }
                for o in &mut c.options {
                    if let ast::ColumnOption::Default(e) = &mut o.option {
                        if !matches!(e, Expr::Value(_) | Expr::Nested(_)) {
                            *e = Expr::Nested(Box::new(e.clone()));
                            self.changed = true;
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_relation(&mut self, relation: &mut ObjectName) -> ControlFlow<String> {
        // `public.t` in a catalog statement: the catalog's relations are
        // all in schema public, which SQLite does not have. (A user's
        // `public.t` names the kernel's own table, outside a realm's
        // view, and is refused as such on both backends.)
        if self.mode != Mode::Catalog {
            return ControlFlow::Continue(());
        }
        if let [ObjectNamePart::Identifier(schema), _] = relation.0.as_slice() {
            if schema.value.eq_ignore_ascii_case("public") {
                relation.0.remove(0);
                self.changed = true;
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<String> {
        match query.body.as_ref() {
            SetExpr::Select(s) if matches!(s.distinct, Some(Distinct::On(_))) => {
                match distinct_on(query) {
                    Ok(q) => {
                        *query = q;
                        self.changed = true;
                        ControlFlow::Continue(())
                    }
                    Err(construct) => ControlFlow::Break(construct),
                }
            }
            SetExpr::SetOperation { .. } if has_distinct_on(&query.body) => {
                ControlFlow::Break("SELECT DISTINCT ON in a UNION".into())
            }
            _ => ControlFlow::Continue(()),
        }
    }

    fn post_visit_select(&mut self, select: &mut ast::Select) -> ControlFlow<String> {
        if self.mode == Mode::Catalog {
            match unnest_select_list(select) {
                Ok(true) => self.changed = true,
                Ok(false) => {}
                Err(construct) => return ControlFlow::Break(construct),
            }
        }
        for item in &select.projection {
            let e = match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                _ => continue,
            };
            if let Expr::Function(f) = e {
                if let Some(name) = set_returning(f) {
                    return ControlFlow::Break(format!(
                        "{name}() in a select list (use it in FROM)"
                    ));
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<String> {
        if let TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset,
            with_ordinality,
            ..
        } = factor
        {
            if self.mode != Mode::Catalog {
                return ControlFlow::Continue(());
            }
            let derived = match (array_exprs.as_slice(), *with_offset || *with_ordinality) {
                ([array], false) => unnest_in_from(array, alias.as_ref()),
                _ => None,
            };
            return self.replace_factor(factor, derived, "unnest() with these arguments");
        }
        let (name, args, alias) = match factor {
            TableFactor::Table {
                name,
                args: Some(args),
                alias,
                ..
            } => (name, args.args.clone(), alias.clone()),
            TableFactor::Function {
                name, args, alias, ..
            } => (name, args.clone(), alias.clone()),
            _ => return ControlFlow::Continue(()),
        };
        let Some(fname) = plain_name(name) else {
            return ControlFlow::Continue(());
        };
        if fname == "unnest" && self.mode == Mode::Catalog {
            // `pg_catalog.unnest(a) x`, which the parser reads as a table
            // function rather than its UNNEST.
            let derived = match args.as_slice() {
                [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))] => {
                    unnest_in_from(array, alias.as_ref())
                }
                _ => None,
            };
            return self.replace_factor(factor, derived, "unnest() with these arguments");
        }
        if fname == "pg_options_to_table" && self.mode == Mode::Catalog {
            // Options of foreign tables and servers: tabos has none.
            let empty = "SELECT 1 FROM (SELECT NULL AS option_name, NULL AS option_value \
                         WHERE 0) AS pg_options";
            return match parse_query(empty).and_then(|q| match *q.body {
                SetExpr::Select(s) => s.from.into_iter().next().map(|t| t.relation),
                _ => None,
            }) {
                Some(mut derived) => {
                    if let (TableFactor::Derived { alias: a, .. }, Some(given)) =
                        (&mut derived, alias)
                    {
                        *a = Some(given);
                    }
                    *factor = derived;
                    self.changed = true;
                    ControlFlow::Continue(())
                }
                None => ControlFlow::Break("pg_options_to_table".into()),
            };
        }
        if fname != "generate_series" {
            return ControlFlow::Continue(());
        }
        let args: Vec<Expr> = match args
            .into_iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
        {
            Some(a) if a.len() == 2 || a.len() == 3 => a,
            _ => return ControlFlow::Break("generate_series with these arguments".into()),
        };
        let (column, alias) = match alias {
            Some(mut a) => {
                let column = match a.columns.first() {
                    Some(c) => c.name.value.clone(),
                    None => a.name.value.clone(),
                };
                a.columns.clear();
                (column, a)
            }
            None => (
                "generate_series".to_string(),
                ast::TableAlias {
                    explicit: true,
                    name: Ident::new("generate_series"),
                    columns: vec![],
                    at: None,
                },
            ),
        };
        let step = args
            .get(2)
            .map_or_else(|| "1".to_string(), ToString::to_string);
        let (start, stop) = (&args[0], &args[1]);
        // A recursive CTE: SQLite's own generate_series is an extension
        // the reader's authorizer does not know; this is plain SQL,
        // bounded by the read path's deadline and SERIES_ROWS_MAX.
        let sql = format!(
            "SELECT v AS {col} FROM (WITH RECURSIVE s(v, n) AS (SELECT {start}, 1 \
             UNION ALL SELECT v + ({step}), n + 1 FROM s WHERE n < {SERIES_ROWS_MAX} AND \
             CASE WHEN ({step}) > 0 THEN v + ({step}) <= {stop} ELSE v + ({step}) >= {stop} END) \
             SELECT v FROM s WHERE CASE WHEN ({step}) > 0 THEN v <= {stop} ELSE v >= {stop} END)",
            col = Ident::with_quote('"', column),
        );
        let subquery = match Parser::new(&PostgreSqlDialect {}).try_with_sql(&sql) {
            Ok(mut p) => match p.parse_query() {
                Ok(q) => q,
                Err(_) => return ControlFlow::Break("generate_series with these arguments".into()),
            },
            Err(_) => return ControlFlow::Break("generate_series with these arguments".into()),
        };
        *factor = TableFactor::Derived {
            lateral: false,
            subquery,
            alias: Some(alias),
            sample: None,
        };
        self.changed = true;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<String> {
        match self.rewrite(expr) {
            Ok(Some(new)) => {
                *expr = new;
                self.changed = true;
                ControlFlow::Continue(())
            }
            Ok(None) => ControlFlow::Continue(()),
            Err(construct) => ControlFlow::Break(construct),
        }
    }
}

/// What a type a cast names becomes on SQLite.
enum Target {
    /// SQLite's own cast (`CAST(x AS INTEGER)` …).
    Native(&'static str),
    /// A function of [`install`].
    Call(&'static str),
    /// The value as it is (JSON is text on SQLite).
    Same,
}

/// A PostgreSQL type name (as sqlparser prints it) as SQLite holds it.
fn target(type_name: &str) -> Option<Target> {
    let t = type_name.to_ascii_lowercase();
    let base = t.split(['(', '[']).next().unwrap_or("").trim();
    let base = base.strip_prefix("pg_catalog.").unwrap_or(base);
    Some(match base {
        "int" | "integer" | "int2" | "int4" | "int8" | "smallint" | "bigint" | "tinyint"
        | "oid" | "serial" | "bigserial" => Target::Native("INTEGER"),
        "real" | "float" | "float4" | "float8" | "double" | "double precision" | "numeric"
        | "decimal" => Target::Native("REAL"),
        "text" | "varchar" | "char" | "character" | "character varying" | "name" | "string"
        | "bpchar" | "citext" => Target::Native("TEXT"),
        "bytea" | "blob" => Target::Native("BLOB"),
        "bool" | "boolean" => Target::Call("pg_bool"),
        "timestamp"
        | "timestamptz"
        | "timestamp with time zone"
        | "timestamp without time zone"
        | "datetime" => Target::Call("pg_ts"),
        "date" => Target::Call("pg_date"),
        "interval" => Target::Call("pg_interval"),
        "json" | "jsonb" => Target::Same,
        _ => return None,
    })
}

/// The unqualified (or `pg_catalog.`-qualified) lower-case name of a
/// function or relation, `None` for another schema's.
fn plain_name(name: &ObjectName) -> Option<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Some(i.value.to_ascii_lowercase()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [n] => Some(n.clone()),
        [s, n] if s == "pg_catalog" => Some(n.clone()),
        _ => None,
    }
}

/// Whether `name` is `information_schema._pg_expandarray` (or unqualified).
fn is_expandarray(name: &ObjectName) -> bool {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| match p {
            ObjectNamePart::Identifier(i) => Some(i.value.to_ascii_lowercase()),
            _ => None,
        })
        .collect();
    matches!(
        parts
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["_pg_expandarray"] | ["information_schema", "_pg_expandarray"]
    )
}

/// The set-returning function a select-list call names, if it is one.
fn set_returning(f: &Function) -> Option<String> {
    let name = plain_name(&f.name)?;
    matches!(
        name.as_str(),
        "generate_series"
            | "unnest"
            | "regexp_matches"
            | "json_array_elements"
            | "jsonb_array_elements"
    )
    .then_some(name)
}

/// Whether a set operation has a `DISTINCT ON` arm.
fn has_distinct_on(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(s) => matches!(s.distinct, Some(Distinct::On(_))),
        SetExpr::SetOperation { left, right, .. } => {
            has_distinct_on(left) || has_distinct_on(right)
        }
        _ => false,
    }
}

/// `SELECT DISTINCT ON (k…) items FROM … ORDER BY o…` as SQLite runs it:
/// each item and order key computed once in a subquery beside
/// `row_number() OVER (PARTITION BY k… ORDER BY o…)`, and the first row of
/// each partition kept, ordered by the keys — PostgreSQL's rows.
fn distinct_on(query: &ast::Query) -> Result<ast::Query, String> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Err("SELECT DISTINCT ON".into());
    };
    let Some(Distinct::On(keys)) = &select.distinct else {
        return Err("SELECT DISTINCT ON".into());
    };
    let mut inner = select.clone();
    inner.distinct = None;
    let mut outer = Vec::new();
    let mut projected = Vec::new();
    for (i, item) in select.projection.iter().enumerate() {
        let (expr, name) = match item {
            SelectItem::ExprWithAlias { expr, alias } => (expr, alias.value.clone()),
            SelectItem::UnnamedExpr(expr) => (expr, expr_name(expr)),
            _ => return Err("SELECT DISTINCT ON with *".into()),
        };
        projected.push(format!("{expr} AS pg_c{i}"));
        outer.push(format!("pg_c{i} AS {}", Ident::with_quote('"', name)));
    }
    let order: Vec<&ast::OrderByExpr> = match query.order_by.as_ref().map(|o| &o.kind) {
        Some(ast::OrderByKind::Expressions(e)) => e.iter().collect(),
        Some(ast::OrderByKind::All(_)) => return Err("SELECT DISTINCT ON … ORDER BY ALL".into()),
        None => Vec::new(),
    };
    let mut outer_order = Vec::new();
    for (k, o) in order.iter().enumerate() {
        projected.push(format!("{} AS pg_o{k}", o.expr));
        outer_order.push(
            o.to_string()
                .replacen(&o.expr.to_string(), &format!("pg_o{k}"), 1),
        );
    }
    let keys = keys
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let window_order = if order.is_empty() {
        String::new()
    } else {
        format!(
            " ORDER BY {}",
            order
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    projected.push(format!(
        "row_number() OVER (PARTITION BY {keys}{window_order}) AS pg_rn"
    ));
    inner.projection = Vec::new();
    let inner =
        inner
            .to_string()
            .replacen("SELECT ", &format!("SELECT {} ", projected.join(", ")), 1);
    let mut sql = format!(
        "SELECT {} FROM ({inner}) AS pg_distinct_on WHERE pg_rn = 1",
        outer.join(", ")
    );
    if !outer_order.is_empty() {
        sql.push_str(&format!(" ORDER BY {}", outer_order.join(", ")));
    }
    if let Some(limit) = &query.limit_clause {
        sql.push_str(&format!(" {limit}"));
    }
    let mut rewritten = *parse_query(&sql).ok_or_else(|| "SELECT DISTINCT ON".to_string())?;
    rewritten.with = query.with.clone();
    Ok(rewritten)
}

/// The table a catalog statement's `unnest` in a select list becomes.
const UNNESTED: &str = "pg_unnested";

/// In a catalog statement: `unnest(a)` and `generate_subscripts(a, 1)`
/// in a select list (SQLAlchemy's key queries, over `pg_index.indkey`),
/// all of the same array `a`, become the value and 1-based position of a
/// `json_each` over it joined to the FROM list — one row per element, as
/// PostgreSQL gives. The catalog database defines `pg_array_json`, an
/// array's text (`1 2`, `{1,2}`, JSON) as JSON. `Ok(false)`: none there.
fn unnest_select_list(select: &mut ast::Select) -> Result<bool, String> {
    let mut array: Option<String> = None;
    for item in &mut select.projection {
        let e = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => continue,
        };
        // `information_schema._pg_expandarray(a)` (JDBC's primary keys),
        // wherever it is in the item: its (x, n) rows as JSON objects, read
        // by `(…).x` and `(…).n` (see the rewrite of a field access).
        let mut failed = None;
        let _ = visit_expressions_mut(e, |inner| {
            let Expr::Function(f) = inner else {
                return ControlFlow::<()>::Continue(());
            };
            if !is_expandarray(&f.name) {
                return ControlFlow::Continue(());
            }
            let this = match plain_args(f).as_deref() {
                Some([a]) => a.to_string(),
                _ => {
                    failed = Some("_pg_expandarray() with these arguments".to_string());
                    return ControlFlow::Break(());
                }
            };
            if array.get_or_insert_with(|| this.clone()) != &this {
                failed = Some("_pg_expandarray() of two arrays in one select list".into());
                return ControlFlow::Break(());
            }
            match parse_expr(&format!(
                "json_object('x', {UNNESTED}.value, 'n', {UNNESTED}.key + 1)"
            )) {
                Some(object) => *inner = object,
                None => failed = Some("_pg_expandarray()".into()),
            }
            ControlFlow::Continue(())
        });
        if let Some(construct) = failed {
            return Err(construct);
        }
        let Expr::Function(f) = e else { continue };
        let name = plain_name(&f.name).unwrap_or_default();
        let replacement = match name.as_str() {
            "unnest" => "value",
            "generate_subscripts" => "key + 1",
            _ => continue,
        };
        let args = plain_args(f).ok_or_else(|| format!("{name}() with these arguments"))?;
        let Some(first) = args.first() else {
            return Err(format!("{name}() with these arguments"));
        };
        let this = first.to_string();
        if array.get_or_insert_with(|| this.clone()) != &this {
            return Err(format!("{name}() of two arrays in one select list"));
        }
        *e = parse_expr(&format!("({UNNESTED}.{replacement})"))
            .ok_or_else(|| format!("{name}() with these arguments"))?;
    }
    let Some(array) = array else {
        return Ok(false);
    };
    let joined = format!("SELECT 1 FROM json_each(pg_array_json({array})) AS {UNNESTED}");
    let from = match Parser::parse_sql(&PostgreSqlDialect {}, &joined).as_deref() {
        Ok([Statement::Query(q)]) => match q.body.as_ref() {
            SetExpr::Select(s) => s.from.clone(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    if from.is_empty() {
        return Err("unnest() of this array".into());
    }
    select.from.extend(from);
    Ok(true)
}

/// `unnest(a) [AS] alias[(column)]` in a catalog statement's FROM: a
/// derived table of `a`'s elements, one column named as PostgreSQL names
/// it (the alias's column, else the alias) — SQLite lets it refer to the
/// enclosing query's columns, as `unnest` of an outer row's array does.
fn unnest_in_from(array: &Expr, alias: Option<&ast::TableAlias>) -> Option<TableFactor> {
    let (name, column) = match alias {
        Some(a) => (
            a.name.value.clone(),
            a.columns
                .first()
                .map_or_else(|| a.name.value.clone(), |c| c.name.value.clone()),
        ),
        None => ("unnest".to_string(), "unnest".to_string()),
    };
    let sql = format!(
        "SELECT 1 FROM (SELECT value AS {} FROM json_each(pg_array_json({array}))) AS {}",
        Ident::with_quote('"', column),
        Ident::with_quote('"', name),
    );
    match Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .ok()?
        .as_slice()
    {
        [Statement::Query(q)] => match q.body.as_ref() {
            SetExpr::Select(s) => s.from.first().map(|t| t.relation.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// `ARRAY(subquery)` of one column: its values as a JSON array, as
/// `ARRAY[…]` and `array_agg` are on SQLite.
fn array_of_subquery(query: &ast::Query) -> Option<Expr> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    if select.projection.len() != 1 {
        return None;
    }
    let mut inner = query.clone();
    if let SetExpr::Select(s) = inner.body.as_mut() {
        let item = match &s.projection[0] {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e.clone(),
            _ => return None,
        };
        s.projection = vec![SelectItem::ExprWithAlias {
            expr: item,
            alias: Ident::new("pg_item"),
        }];
    }
    parse_expr(&format!(
        "(SELECT json_group_array(pg_item) FROM ({inner}) AS pg_array)"
    ))
}

/// The operator `OPERATOR(pg_catalog.op)` names, when it is one of the
/// built-in comparisons.
fn catalog_operator(parts: &[String]) -> Option<BinaryOperator> {
    let [schema, op] = parts else {
        return None;
    };
    if !schema.eq_ignore_ascii_case("pg_catalog") {
        return None;
    }
    Some(match op.as_str() {
        "=" => BinaryOperator::Eq,
        "<>" | "!=" => BinaryOperator::NotEq,
        "<" => BinaryOperator::Lt,
        ">" => BinaryOperator::Gt,
        "<=" => BinaryOperator::LtEq,
        ">=" => BinaryOperator::GtEq,
        "~" => BinaryOperator::PGRegexMatch,
        "!~" => BinaryOperator::PGRegexNotMatch,
        "~*" => BinaryOperator::PGRegexIMatch,
        "!~*" => BinaryOperator::PGRegexNotIMatch,
        _ => return None,
    })
}

/// An integer literal.
fn number(n: i64) -> Expr {
    Expr::value(Value::Number(n.to_string(), false))
}

/// `text` parsed as one PostgreSQL query.
fn parse_query(text: &str) -> Option<Box<ast::Query>> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .ok()?
        .parse_query()
        .ok()
}

/// `text` parsed as one PostgreSQL expression.
fn parse_expr(text: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .ok()?
        .parse_expr()
        .ok()
}

/// The plain arguments of a call (`None` when one is named, a wildcard or
/// a subquery).
fn plain_args(f: &Function) -> Option<Vec<Expr>> {
    match &f.args {
        FunctionArguments::None => Some(vec![]),
        FunctionArguments::List(l) if l.clauses.is_empty() && l.duplicate_treatment.is_none() => l
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// `name(args…)`.
fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        within_group: vec![],
        filter: None,
        null_treatment: None,
        over: None,
    })
}

fn text(s: impl Into<String>) -> Expr {
    Expr::value(Value::SingleQuotedString(s.into()))
}

/// Whether `e` is (after translation) an interval: a call of
/// `pg_interval`.
fn is_interval(e: &Expr) -> bool {
    fn_named(e, &["pg_interval"])
}

/// Whether `e` is (after translation) a timestamp: a call of `pg_ts`,
/// `pg_now`, `pg_to_timestamp`, `pg_date_trunc` or `pg_ts_add`.
fn is_timestamp(e: &Expr) -> bool {
    fn_named(
        e,
        &[
            "pg_ts",
            "pg_now",
            "pg_to_timestamp",
            "pg_date_trunc",
            "pg_ts_add",
        ],
    )
}

/// `e` without the parentheses around it.
fn unnested(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) => unnested(inner),
        e => e,
    }
}

fn fn_named(e: &Expr, names: &[&str]) -> bool {
    matches!(unnested(e), Expr::Function(f) if plain_name(&f.name).is_some_and(|n| names.contains(&n.as_str())))
}

impl Translator {
    /// Puts `derived` in `factor`'s place, or refuses naming `construct`.
    fn replace_factor(
        &mut self,
        factor: &mut TableFactor,
        derived: Option<TableFactor>,
        construct: &str,
    ) -> ControlFlow<String> {
        match derived {
            Some(d) => {
                *factor = d;
                self.changed = true;
                ControlFlow::Continue(())
            }
            None => ControlFlow::Break(construct.into()),
        }
    }

    /// `Ok(Some(new))` to replace `expr`, `Ok(None)` to keep it, `Err` to
    /// refuse the statement naming the construct.
    fn rewrite(&self, expr: &Expr) -> Result<Option<Expr>, String> {
        Ok(Some(match expr {
            Expr::Cast {
                kind,
                expr: inner,
                data_type,
                format: None,
            } => {
                let name = data_type.to_string();
                let native = matches!(
                    kind,
                    CastKind::Cast | CastKind::TryCast | CastKind::SafeCast
                ) && matches!(
                    name.to_ascii_uppercase().as_str(),
                    "INTEGER" | "REAL" | "TEXT" | "BLOB" | "NUMERIC"
                );
                if native {
                    // SQLite's own spelling: left as SQLite reads it.
                    return Ok(None);
                }
                if self.mode == Mode::Catalog && name.ends_with("[]") {
                    // An array literal (`'{1,2}'::oid[]`) stays text, which
                    // the catalog's array functions read.
                    return Ok(Some(Expr::Nested(inner.clone())));
                }
                match target(&name) {
                    Some(Target::Native(t)) => Expr::Cast {
                        kind: CastKind::Cast,
                        expr: inner.clone(),
                        data_type: native_type(t),
                        format: None,
                    },
                    Some(Target::Call(f)) => call(f, vec![(**inner).clone()]),
                    Some(Target::Same) => Expr::Nested(inner.clone()),
                    None if self.mode == Mode::Catalog => self.catalog_cast(&name, inner),
                    None => return Err(format!("a cast to {name}")),
                }
            }
            Expr::TypedString(ts) => {
                let name = ts.data_type.to_string();
                let lit = Expr::Value(ts.value.clone());
                match target(&name) {
                    Some(Target::Native(t)) => Expr::Cast {
                        kind: CastKind::Cast,
                        expr: Box::new(lit),
                        data_type: native_type(t),
                        format: None,
                    },
                    Some(Target::Call(f)) => call(f, vec![lit]),
                    Some(Target::Same) => lit,
                    None if self.mode == Mode::Catalog => self.catalog_cast(&name, &lit),
                    None => return Err(format!("a literal of type {name}")),
                }
            }
            Expr::Interval(iv) => {
                let unit = match (&iv.leading_field, &iv.last_field) {
                    (Some(f), None) => format!(" {f}"),
                    (None, None) => String::new(),
                    _ => return Err("an interval with a field range".into()),
                };
                let value = match iv.value.as_ref() {
                    Expr::Value(v) => match &v.value {
                        Value::SingleQuotedString(s) => text(format!("{s}{unit}")),
                        Value::Number(n, _) => text(format!("{n}{unit}")),
                        _ => return Err("an interval of this form".into()),
                    },
                    other if unit.is_empty() => other.clone(),
                    _ => return Err("an interval of this form".into()),
                };
                call("pg_interval", vec![value])
            }
            // `OPERATOR(pg_catalog.=)` and its kin (psql's and pg_dump's
            // spelling, proof against a user's operators): the operator.
            Expr::BinaryOp {
                left,
                op: BinaryOperator::PGCustomBinaryOperator(parts),
                right,
            } => match catalog_operator(parts) {
                Some(op) => Expr::BinaryOp {
                    left: left.clone(),
                    op,
                    right: right.clone(),
                },
                None => return Ok(None),
            },
            Expr::BinaryOp { left, op, right } => {
                let (l, r) = (left.as_ref(), right.as_ref());
                match op {
                    BinaryOperator::Plus if is_interval(r) => {
                        call("pg_ts_add", vec![l.clone(), r.clone()])
                    }
                    BinaryOperator::Plus if is_interval(l) => {
                        call("pg_ts_add", vec![r.clone(), l.clone()])
                    }
                    BinaryOperator::Minus if is_interval(r) => call(
                        "pg_ts_add",
                        vec![
                            l.clone(),
                            Expr::UnaryOp {
                                op: UnaryOperator::Minus,
                                expr: Box::new(r.clone()),
                            },
                        ],
                    ),
                    BinaryOperator::Minus if is_timestamp(l) && is_timestamp(r) => {
                        call("pg_ts_diff", vec![l.clone(), r.clone()])
                    }
                    _ => return Ok(None),
                }
            }
            Expr::ILike {
                negated,
                any: false,
                expr: inner,
                pattern,
                escape_char,
            } => Expr::Like {
                negated: *negated,
                any: false,
                expr: Box::new(call("lower", vec![(**inner).clone()])),
                pattern: Box::new(call("lower", vec![(**pattern).clone()])),
                escape_char: escape_char.clone(),
            },
            Expr::Extract {
                field, expr: inner, ..
            } => call(
                "pg_extract",
                vec![
                    text(field.to_string().to_ascii_lowercase()),
                    (**inner).clone(),
                ],
            ),
            Expr::AtTimeZone {
                timestamp,
                time_zone,
            } => match time_zone.as_ref() {
                Expr::Value(v)
                    if matches!(&v.value, Value::SingleQuotedString(z)
                        if z.eq_ignore_ascii_case("utc") || z == "Z" || z == "+00" || z == "+00:00") =>
                {
                    call("pg_ts", vec![(**timestamp).clone()])
                }
                _ => return Err("AT TIME ZONE other than 'UTC'".into()),
            },
            Expr::Array(a) => call("json_array", a.elem.clone()),
            Expr::AnyOp {
                left,
                compare_op: BinaryOperator::PGCustomBinaryOperator(parts),
                right,
                is_some,
            } => match catalog_operator(parts) {
                Some(op) => {
                    let plain = Expr::AnyOp {
                        left: left.clone(),
                        compare_op: op,
                        right: right.clone(),
                        is_some: *is_some,
                    };
                    return Ok(Some(self.rewrite(&plain)?.unwrap_or(plain)));
                }
                None => return Ok(None),
            },
            Expr::AnyOp {
                left,
                compare_op: BinaryOperator::Eq,
                right,
                is_some: false,
            } => match unnested(right) {
                // `x = ANY(ARRAY[…])`, already `json_array(…)`.
                Expr::Function(f) if fn_named(right, &["json_array"]) => Expr::In {
                    expr: left.clone(),
                    target: ast::InTarget::List(plain_args(f).unwrap_or_default()),
                    negated: false,
                    global: false,
                },
                // A catalog array column: its elements, as JSON.
                other if self.mode == Mode::Catalog => Expr::In {
                    expr: left.clone(),
                    target: ast::InTarget::Subquery(
                        parse_query(&format!(
                            "SELECT value FROM json_each(pg_array_json({other}))"
                        ))
                        .ok_or_else(|| "= ANY of this array".to_string())?,
                    ),
                    negated: false,
                    global: false,
                },
                _ => return Err("= ANY of something other than ARRAY[…]".into()),
            },
            // `a[n]` of a catalog array (1-based), or of a name (`typname[0]`,
            // its first character: PostgreSQL's name is a character array
            // from 0).
            Expr::CompoundFieldAccess { root, access_chain } if self.mode == Mode::Catalog => {
                // `(composite).field`: the catalog's composites are JSON
                // objects (`_pg_expandarray`'s, [`unnest_select_list`]).
                if let [ast::AccessExpr::Dot(Expr::Identifier(field))] = access_chain.as_slice() {
                    let path = format!("$.{}", field.value.to_ascii_lowercase());
                    return Ok(Some(call(
                        "json_extract",
                        vec![
                            (**root).clone(),
                            Expr::value(Value::SingleQuotedString(path)),
                        ],
                    )));
                }
                let [ast::AccessExpr::Subscript(ast::Subscript::Index { index })] =
                    access_chain.as_slice()
                else {
                    return Err("this array access".into());
                };
                let zero = matches!(index, Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n == "0"));
                if zero {
                    call("substr", vec![(**root).clone(), number(1), number(1)])
                } else {
                    parse_expr(&format!(
                        "json_extract(pg_array_json({root}), '$[' || (({index}) - 1) || ']')"
                    ))
                    .ok_or_else(|| "this array access".to_string())?
                }
            }
            Expr::Function(f) => return self.function(f),
            _ => return Ok(None),
        }))
    }

    /// A cast to type `name` in a catalog statement ([`Mode::Catalog`]).
    fn catalog_cast(&self, name: &str, inner: &Expr) -> Expr {
        let t = name.to_ascii_lowercase();
        let base = t.rsplit('.').next().unwrap_or("").trim_matches('"');
        match CATALOG_CASTS.iter().find(|c| **c == base) {
            Some(c) => call(&format!("pg_cast_{c}"), vec![inner.clone()]),
            None => Expr::Nested(Box::new(inner.clone())),
        }
    }

    fn function(&self, f: &Function) -> Result<Option<Expr>, String> {
        let Some(name) = plain_name(&f.name) else {
            return Ok(None);
        };
        if let ("array", FunctionArguments::Subquery(q)) = (name.as_str(), &f.args) {
            return array_of_subquery(q)
                .map(Some)
                .ok_or_else(|| "ARRAY(subquery) of other than one column".to_string());
        }
        if f.over.is_some() {
            // A window function: SQLite reads it as PostgreSQL does.
            return Ok(None);
        }
        let renamed = |to: &str| {
            let mut g = f.clone();
            g.name = ObjectName::from(vec![Ident::new(to)]);
            g
        };
        let args = || plain_args(f).ok_or_else(|| format!("{name}() with these arguments"));
        Ok(Some(match name.as_str() {
            "now"
            | "transaction_timestamp"
            | "statement_timestamp"
            | "clock_timestamp"
            | "current_timestamp"
            | "localtimestamp" => call("pg_now", vec![]),
            "current_date" => call("pg_current_date", vec![]),
            "to_timestamp" => match args()?.as_slice() {
                [secs] => call("pg_to_timestamp", vec![secs.clone()]),
                _ => return Err("to_timestamp(text, format)".into()),
            },
            "date_trunc" => match args()?.as_slice() {
                [field, ts] => call("pg_date_trunc", vec![field.clone(), ts.clone()]),
                _ => return Err("date_trunc with a time zone".into()),
            },
            "date_part" => match args()?.as_slice() {
                [field, ts] => call("pg_extract", vec![field.clone(), ts.clone()]),
                _ => return Err("date_part with these arguments".into()),
            },
            "greatest" => call("pg_greatest", args()?),
            "least" => call("pg_least", args()?),
            "string_agg" => Expr::Function(renamed("group_concat")),
            // Over SQLite's 0 and 1.
            "bool_and" | "every" => Expr::Function(renamed("min")),
            "bool_or" => Expr::Function(renamed("max")),
            "array_agg" => Expr::Function(renamed("json_group_array")),
            _ => return Ok(None),
        }))
    }
}

fn native_type(t: &str) -> ast::DataType {
    match t {
        "INTEGER" => ast::DataType::Integer(None),
        "REAL" => ast::DataType::Real,
        "TEXT" => ast::DataType::Text,
        _ => ast::DataType::Blob(None),
    }
}

// ------------------------------------------------------------ functions

/// PostgreSQL's `split_part`: field `n` of `text` split at `delim` (1-based;
/// negative from the end; empty past either end). `n` = 0 is an error, as
/// there.
pub(crate) fn split_part(text: &str, delim: &str, n: i64) -> std::result::Result<String, String> {
    if n == 0 {
        return Err("field position must not be zero".into());
    }
    if delim.is_empty() {
        // PostgreSQL: the whole string is the one field.
        return Ok(if n == 1 || n == -1 {
            text.to_string()
        } else {
            String::new()
        });
    }
    let fields: Vec<&str> = text.split(delim).collect();
    let at = if n > 0 {
        usize::try_from(n - 1).ok()
    } else {
        fields.len().checked_sub(n.unsigned_abs() as usize)
    };
    Ok(at
        .and_then(|i| fields.get(i))
        .map_or_else(String::new, |f| f.to_string()))
}

/// Installs on `conn` the functions translated SQL calls and the
/// catalog's session functions (see the module doc).
pub fn install(conn: &Connection) -> rusqlite::Result<()> {
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let volatile = FunctionFlags::SQLITE_UTF8;
    conn.create_scalar_function("pg_now", 0, volatile, |_| {
        Ok(crate::rfc3339(crate::now_us(), true))
    })?;
    // PostgreSQL's numeric functions SQLite's build leaves out (Grafana's
    // `$__timeGroup` expands to floor(extract(epoch …)/n)*n): a float in,
    // a float out, NULL for NULL.
    type Unary = fn(f64) -> f64;
    let unary: [(&str, Unary); 9] = [
        ("floor", f64::floor),
        ("ceil", f64::ceil),
        ("ceiling", f64::ceil),
        ("trunc", f64::trunc),
        ("sqrt", f64::sqrt),
        ("ln", f64::ln),
        ("exp", f64::exp),
        ("log", f64::log10),
        ("sign", f64::signum),
    ];
    for (name, f) in unary {
        conn.create_scalar_function(name, 1, pure, move |ctx| {
            Ok(ctx.get::<Option<f64>>(0)?.map(f))
        })?;
    }
    // PostgreSQL's string functions SQLite lacks, by the same names and
    // meaning: split_part(text, delimiter, n) — the n-th field (1-based;
    // negative counts from the end; '' past either end) — and
    // strpos(text, sub), 1-based, 0 when absent. What the README's
    // provenance queries cut a `PATH @OFFSET +BYTES` detail with.
    conn.create_scalar_function("split_part", 3, pure, |ctx| {
        let (Some(text), Some(delim), Some(n)) = (
            ctx.get::<Option<String>>(0)?,
            ctx.get::<Option<String>>(1)?,
            ctx.get::<Option<i64>>(2)?,
        ) else {
            return Ok(None);
        };
        Ok(Some(split_part(&text, &delim, n).map_err(|e| {
            rusqlite::Error::UserFunctionError(e.into())
        })?))
    })?;
    conn.create_scalar_function("strpos", 2, pure, |ctx| {
        let (Some(text), Some(sub)) =
            (ctx.get::<Option<String>>(0)?, ctx.get::<Option<String>>(1)?)
        else {
            return Ok(None);
        };
        Ok(Some(
            text.find(&sub)
                .map_or(0, |at| text[..at].chars().count() as i64 + 1),
        ))
    })?;
    for name in ["power", "pow"] {
        conn.create_scalar_function(name, 2, pure, |ctx| {
            let (Some(a), Some(b)) = (ctx.get::<Option<f64>>(0)?, ctx.get::<Option<f64>>(1)?)
            else {
                return Ok(None);
            };
            Ok(Some(a.powf(b)))
        })?;
    }
    conn.create_scalar_function("pg_current_date", 0, volatile, |_| {
        Ok(crate::rfc3339(crate::now_us(), false)[..10].to_string())
    })?;
    conn.create_scalar_function("pg_ts", 1, pure, |ctx| {
        Ok(opt_us(ctx, 0, "timestamp")?.map(|us| crate::rfc3339(us, true)))
    })?;
    conn.create_scalar_function("pg_date", 1, pure, |ctx| {
        Ok(opt_us(ctx, 0, "date")?.map(|us| crate::rfc3339(us, false)[..10].to_string()))
    })?;
    conn.create_scalar_function("pg_interval", 1, pure, |ctx| match ctx.get_raw(0) {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(i) => Ok(Some(i)),
        ValueRef::Text(t) => {
            let s = String::from_utf8_lossy(t);
            parse_interval(&s).map(Some).ok_or_else(|| {
                user_error(format!("invalid input syntax for type interval: \"{s}\""))
            })
        }
        _ => Err(user_error("an interval is text such as '1 hour'")),
    })?;
    conn.create_scalar_function("pg_ts_add", 2, pure, |ctx| {
        let (Some(ts), Some(d)) = (opt_us(ctx, 0, "timestamp")?, ctx.get::<Option<i64>>(1)?) else {
            return Ok(None);
        };
        Ok(Some(crate::rfc3339(ts.saturating_add(d), true)))
    })?;
    conn.create_scalar_function("pg_ts_diff", 2, pure, |ctx| {
        let (Some(a), Some(b)) = (opt_us(ctx, 0, "timestamp")?, opt_us(ctx, 1, "timestamp")?)
        else {
            return Ok(None);
        };
        Ok(Some(a.saturating_sub(b)))
    })?;
    conn.create_scalar_function("pg_to_timestamp", 1, pure, |ctx| {
        Ok(ctx
            .get::<Option<f64>>(0)?
            .map(|secs| crate::rfc3339((secs * 1e6).round() as i64, true)))
    })?;
    conn.create_scalar_function("pg_extract", 2, pure, |ctx| {
        let field: String = ctx.get(0)?;
        let Some(us) = opt_us(ctx, 1, "timestamp")? else {
            return Ok(None);
        };
        extract(&field.to_ascii_lowercase(), us)
            .map(Some)
            .ok_or_else(|| user_error(format!("unit \"{field}\" not recognized")))
    })?;
    conn.create_scalar_function("pg_date_trunc", 2, pure, |ctx| {
        let field: String = ctx.get(0)?;
        let Some(us) = opt_us(ctx, 1, "timestamp")? else {
            return Ok(None);
        };
        trunc(&field.to_ascii_lowercase(), us)
            .map(|us| Some(crate::rfc3339(us, true)))
            .ok_or_else(|| user_error(format!("unit \"{field}\" not recognized")))
    })?;
    conn.create_scalar_function("pg_bool", 1, pure, |ctx| match ctx.get_raw(0) {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(i) => Ok(Some(i != 0)),
        ValueRef::Real(r) => Ok(Some(r != 0.0)),
        ValueRef::Text(t) => {
            let s = String::from_utf8_lossy(t).trim().to_ascii_lowercase();
            match s.as_str() {
                "t" | "true" | "y" | "yes" | "on" | "1" => Ok(Some(true)),
                "f" | "false" | "n" | "no" | "off" | "0" => Ok(Some(false)),
                _ => Err(user_error(format!(
                    "invalid input syntax for type boolean: \"{s}\""
                ))),
            }
        }
        ValueRef::Blob(_) => Err(user_error("cannot cast type bytea to boolean")),
    })?;
    for (name, greatest) in [("pg_greatest", true), ("pg_least", false)] {
        conn.create_scalar_function(name, -1, pure, move |ctx| {
            let mut best: Option<SqlValue> = None;
            for i in 0..ctx.len() {
                let v: SqlValue = ctx.get(i)?;
                if v == SqlValue::Null {
                    continue;
                }
                best = Some(match best {
                    None => v,
                    Some(b) => {
                        let later = order(&v, &b) == std::cmp::Ordering::Greater;
                        if later == greatest {
                            v
                        } else {
                            b
                        }
                    }
                });
            }
            Ok(best.unwrap_or(SqlValue::Null))
        })?;
    }
    conn.create_scalar_function("version", 0, pure, |_| Ok(version()))?;
    conn.create_scalar_function("current_database", 0, pure, |_| Ok("tabos"))?;
    conn.create_scalar_function("current_schema", 0, pure, |_| Ok("public"))?;
    for arity in [1, 2] {
        conn.create_scalar_function("current_setting", arity, pure, |ctx| {
            let name: String = ctx.get(0)?;
            let missing_ok = ctx.len() > 1 && ctx.get::<bool>(1)?;
            match setting(&name) {
                Some(v) => Ok(Some(v.to_string())),
                None if missing_ok => Ok(None),
                None => Err(user_error(format!(
                    "unrecognized configuration parameter \"{name}\""
                ))),
            }
        })?;
    }
    // pg_dump and others set a setting for the session: every statement
    // here is its own read-only snapshot, so the value is what it returns.
    conn.create_scalar_function("set_config", 3, volatile, |ctx| {
        ctx.get::<Option<String>>(1)
    })?;
    Ok(())
}

/// An error a user's SQL caused, as SQLite reports a function's error.
fn user_error(message: impl Into<String>) -> rusqlite::Error {
    rusqlite::Error::UserFunctionError(message.into().into())
}

/// SQLite's order between two values of a row: NULL < numbers < text <
/// blobs, numbers by value.
fn order(a: &SqlValue, b: &SqlValue) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    fn rank(v: &SqlValue) -> u8 {
        match v {
            SqlValue::Null => 0,
            SqlValue::Integer(_) | SqlValue::Real(_) => 1,
            SqlValue::Text(_) => 2,
            SqlValue::Blob(_) => 3,
        }
    }
    fn num(v: &SqlValue) -> f64 {
        match v {
            SqlValue::Integer(i) => *i as f64,
            SqlValue::Real(r) => *r,
            _ => 0.0,
        }
    }
    match (a, b) {
        (SqlValue::Integer(x), SqlValue::Integer(y)) => x.cmp(y),
        (SqlValue::Text(x), SqlValue::Text(y)) => x.cmp(y),
        (SqlValue::Blob(x), SqlValue::Blob(y)) => x.cmp(y),
        _ if rank(a) == 1 && rank(b) == 1 => num(a).partial_cmp(&num(b)).unwrap_or(Ordering::Equal),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Argument `i` as a timestamp in µs: text is parsed (RFC 3339, or
/// PostgreSQL's `YYYY-MM-DD HH:MM:SS[.f][+00]`), an integer is taken as
/// µs since the epoch (the OS state's `*_us` columns).
fn opt_us(ctx: &Context<'_>, i: usize, what: &str) -> rusqlite::Result<Option<i64>> {
    match ctx.get_raw(i) {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(us) => Ok(Some(us)),
        ValueRef::Text(t) => {
            let s = String::from_utf8_lossy(t);
            parse_timestamp(&s)
                .map(Some)
                .ok_or_else(|| user_error(format!("invalid input syntax for type {what}: \"{s}\"")))
        }
        _ => Err(user_error(format!("cannot cast this value to {what}"))),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// days_from_civil, the inverse of [`crate::civil_from_days`]).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A timestamp's text as µs since the epoch: `YYYY-MM-DD`, then
/// optionally `T` or a space and `HH:MM[:SS[.ffffff]]`, then optionally
/// `Z`, `+HH[:MM]` or `-HH[:MM]` (none: UTC, the session's time zone).
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        (!t.is_empty() && t.bytes().all(|c| c.is_ascii_digit())).then(|| t.parse().ok())?
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut us = days_from_civil(year, month as u32, day as u32) * 86_400_000_000;
    let mut rest = &s[10..];
    if rest.is_empty() {
        return Some(us);
    }
    rest = rest.strip_prefix(['T', 't', ' '])?;
    let time_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    let (time, zone) = rest.split_at(time_end);
    let mut parts = time.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let (sec, frac) = match parts.next() {
        None => (0, 0),
        Some(sf) => {
            let (sec, frac) = sf.split_once('.').unwrap_or((sf, ""));
            let mut digits: String = frac.chars().take(6).collect();
            if !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            while digits.len() < 6 {
                digits.push('0');
            }
            (sec.parse::<i64>().ok()?, digits.parse::<i64>().ok()?)
        }
    };
    if parts.next().is_some() || h > 24 || m > 59 || sec > 60 {
        return None;
    }
    us += ((h * 60 + m) * 60 + sec) * 1_000_000 + frac;
    let zone = zone.trim();
    let offset_min = match zone {
        "" | "Z" | "z" | "UTC" | "utc" => 0,
        z => {
            let sign = match z.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let z = &z[1..];
            let (zh, zm) = match z.split_once(':') {
                Some((a, b)) => (a.parse::<i64>().ok()?, b.parse::<i64>().ok()?),
                None if z.len() == 4 => (z.get(..2)?.parse().ok()?, z.get(2..)?.parse().ok()?),
                None => (z.parse::<i64>().ok()?, 0),
            };
            sign * (zh * 60 + zm)
        }
    };
    Some(us - offset_min * 60_000_000)
}

const US_PER_DAY: i64 = 86_400_000_000;

/// An interval's text as µs: `<number> <unit>` pairs (`1 hour 30
/// minutes`, `-2 days`, `1.5h`), `HH:MM[:SS[.f]]`, and `ago` (negates).
/// A month is 30 days and a year 365.25, as PostgreSQL's epoch of an
/// interval counts them.
pub fn parse_interval(s: &str) -> Option<i64> {
    let mut total: f64 = 0.0;
    let mut tokens: Vec<String> = Vec::new();
    // Split "1hour" and "1.5h" into number and unit.
    for word in s.split_whitespace() {
        let w = word.trim_end_matches(',');
        let split = w
            .char_indices()
            .find(|(i, c)| c.is_ascii_alphabetic() && *i > 0)
            .map(|(i, _)| i);
        match split {
            Some(i) if w[..i].parse::<f64>().is_ok() => {
                tokens.push(w[..i].to_string());
                tokens.push(w[i..].to_string());
            }
            _ => tokens.push(w.to_string()),
        }
    }
    if tokens.is_empty() {
        return None;
    }
    let mut ago = false;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if t.eq_ignore_ascii_case("ago") {
            ago = true;
            i += 1;
            continue;
        }
        if t.contains(':') {
            let (neg, t) = match t.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, t.as_str()),
            };
            let mut secs = 0.0;
            let parts: Vec<&str> = t.split(':').collect();
            if parts.len() > 3 {
                return None;
            }
            for (k, p) in parts.iter().enumerate() {
                let v: f64 = p.parse().ok()?;
                secs += v * [3600.0, 60.0, 1.0][k];
            }
            total += if neg { -secs } else { secs } * 1e6;
            i += 1;
            continue;
        }
        let n: f64 = t.parse().ok()?;
        let unit = tokens.get(i + 1).map(|u| u.to_ascii_lowercase());
        let day = US_PER_DAY as f64;
        let per = match unit.as_deref() {
            Some("us" | "usec" | "usecs" | "microsecond" | "microseconds") => 1.0,
            Some("ms" | "msec" | "msecs" | "millisecond" | "milliseconds") => 1e3,
            Some("s" | "sec" | "secs" | "second" | "seconds") => 1e6,
            Some("m" | "min" | "mins" | "minute" | "minutes") => 60e6,
            Some("h" | "hr" | "hrs" | "hour" | "hours") => 3_600e6,
            Some("d" | "day" | "days") => day,
            Some("w" | "week" | "weeks") => 7.0 * day,
            Some("mon" | "mons" | "month" | "months") => 30.0 * day,
            Some("y" | "yr" | "yrs" | "year" | "years") => 365.25 * day,
            Some("decade" | "decades") => 3_652.5 * day,
            Some("century" | "centuries") => 36_525.0 * day,
            None => {
                // A bare number: seconds, as PostgreSQL reads '90'::interval.
                total += n * 1e6;
                i += 1;
                continue;
            }
            _ => return None,
        };
        total += n * per;
        i += 2;
    }
    let total = if ago { -total } else { total };
    (total.is_finite() && total.abs() < 9.0e18).then(|| total.round() as i64)
}

/// `extract(field FROM ts)` of a timestamp in µs.
fn extract(field: &str, us: i64) -> Option<f64> {
    let days = us.div_euclid(US_PER_DAY);
    let in_day = us.rem_euclid(US_PER_DAY);
    let (year, month, day) = crate::civil_from_days(days);
    let secs_in_day = in_day as f64 / 1e6;
    Some(match field {
        "epoch" => us as f64 / 1e6,
        "year" => year as f64,
        "month" => f64::from(month),
        "day" => f64::from(day),
        "hour" => (in_day / 3_600_000_000) as f64,
        "minute" => (in_day / 60_000_000 % 60) as f64,
        "second" => secs_in_day % 60.0,
        "milliseconds" => (secs_in_day % 60.0) * 1e3,
        "microseconds" => ((in_day % 60_000_000) as f64).round(),
        "dow" => (days + 4).rem_euclid(7) as f64,
        "isodow" => ((days + 3).rem_euclid(7) + 1) as f64,
        "doy" => (days - days_from_civil(year, 1, 1) + 1) as f64,
        "quarter" => f64::from((month - 1) / 3 + 1),
        "decade" => year.div_euclid(10) as f64,
        "century" => ((year - 1).div_euclid(100) + 1) as f64,
        "millennium" => ((year - 1).div_euclid(1000) + 1) as f64,
        "week" => {
            // ISO week: the week with the year's first Thursday is week 1.
            let thursday = days - (days + 3).rem_euclid(7) + 3;
            let (ty, _, _) = crate::civil_from_days(thursday);
            ((thursday - days_from_civil(ty, 1, 1)) / 7 + 1) as f64
        }
        _ => return None,
    })
}

/// `date_trunc(field, ts)` of a timestamp in µs.
fn trunc(field: &str, us: i64) -> Option<i64> {
    let days = us.div_euclid(US_PER_DAY);
    let (year, month, _) = crate::civil_from_days(days);
    let floor = |unit: i64| us - us.rem_euclid(unit);
    Some(match field {
        "microseconds" => us,
        "milliseconds" => floor(1_000),
        "second" => floor(1_000_000),
        "minute" => floor(60_000_000),
        "hour" => floor(3_600_000_000),
        "day" => floor(US_PER_DAY),
        "week" => (days - (days + 3).rem_euclid(7)) * US_PER_DAY,
        "month" => days_from_civil(year, month, 1) * US_PER_DAY,
        "quarter" => days_from_civil(year, (month - 1) / 3 * 3 + 1, 1) * US_PER_DAY,
        "year" => days_from_civil(year, 1, 1) * US_PER_DAY,
        "decade" => days_from_civil(year - year.rem_euclid(10), 1, 1) * US_PER_DAY,
        "century" => days_from_civil((year - 1).div_euclid(100) * 100 + 1, 1, 1) * US_PER_DAY,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(sql: &str) -> String {
        translate_uncached(sql).unwrap().to_string()
    }

    fn run(sql: &str) -> Vec<Vec<SqlValue>> {
        let conn = Connection::open_in_memory().unwrap();
        install(&conn).unwrap();
        let t = translate(sql).unwrap();
        let mut stmt = conn.prepare(&t).unwrap_or_else(|e| panic!("{t}: {e}"));
        let n = stmt.column_count();
        stmt.query_map([], |r| (0..n).map(|i| r.get::<_, SqlValue>(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn one(sql: &str) -> SqlValue {
        run(sql).remove(0).remove(0)
    }

    #[test]
    fn sqlite_and_untouched_statements_pass_as_written() {
        for sql in [
            "SELECT pid, state FROM proc WHERE realm = $1 ORDER BY pid LIMIT 10",
            "SELECT CAST(payload AS TEXT) FROM message",
            "SELECT * FROM t WHERE name GLOB 'a*'",
            "select a == b from t",
            "INSERT OR REPLACE INTO t VALUES (1)",
        ] {
            assert_eq!(tr(sql), sql);
        }
    }

    #[test]
    fn casts_booleans_and_literals() {
        assert_eq!(one("SELECT '1'::int + 1"), SqlValue::Integer(2));
        assert_eq!(one("SELECT 't'::boolean"), SqlValue::Integer(1));
        assert_eq!(one("SELECT CAST('off' AS bool)"), SqlValue::Integer(0));
        assert_eq!(one("SELECT '2.5'::float8"), SqlValue::Real(2.5));
        assert_eq!(one("SELECT 42::text"), SqlValue::Text("42".into()));
        assert_eq!(
            one("SELECT '2026-11-27 19:30:00+01'::timestamptz"),
            SqlValue::Text("2026-11-27T18:30:00.000000Z".into())
        );
        assert_eq!(
            one("SELECT timestamp '2026-01-02'"),
            SqlValue::Text("2026-01-02T00:00:00.000000Z".into())
        );
        assert_eq!(
            one("SELECT '2026-11-27T10:00:00Z'::date"),
            SqlValue::Text("2026-11-27".into())
        );
        assert_eq!(
            one("SELECT '90 minutes'::interval"),
            SqlValue::Integer(5_400_000_000)
        );
        let e = translate_uncached("SELECT x::uuid FROM t").unwrap_err();
        assert!(e.to_string().contains("a cast to UUID"), "{e}");
    }

    #[test]
    fn time_arithmetic_and_fields() {
        assert_eq!(
            one("SELECT timestamp '2026-11-27 12:00:00' - interval '1 hour'"),
            SqlValue::Text("2026-11-27T11:00:00.000000Z".into())
        );
        assert_eq!(
            one("SELECT interval '2 days' + '2026-02-27'::timestamptz"),
            SqlValue::Text("2026-03-01T00:00:00.000000Z".into())
        );
        assert_eq!(
            one("SELECT now() > now() - interval '1 hour'"),
            SqlValue::Integer(1)
        );
        assert_eq!(
            one("SELECT to_timestamp(0)"),
            SqlValue::Text("1970-01-01T00:00:00.000000Z".into())
        );
        assert_eq!(
            one("SELECT extract(year FROM timestamp '2026-11-27 12:34:56')"),
            SqlValue::Real(2026.0)
        );
        assert_eq!(
            one("SELECT date_part('dow', '2026-11-27'::date)"),
            SqlValue::Real(5.0)
        );
        assert_eq!(
            one("SELECT date_trunc('month', timestamptz '2026-11-27 12:34:56')"),
            SqlValue::Text("2026-11-01T00:00:00.000000Z".into())
        );
        assert_eq!(
            one("SELECT (timestamp '2026-11-27 13:00' - timestamp '2026-11-27 12:00') / 1000000"),
            SqlValue::Integer(3600)
        );
        assert_eq!(
            one("SELECT now() AT TIME ZONE 'UTC' <= now()"),
            SqlValue::Integer(1)
        );
    }

    #[test]
    fn functions_and_operators() {
        assert_eq!(one("SELECT 'ABC' ILIKE 'a%'"), SqlValue::Integer(1));
        assert_eq!(one("SELECT 'ABC' NOT ILIKE 'x%'"), SqlValue::Integer(1));
        assert_eq!(one("SELECT greatest(1, NULL, 3)"), SqlValue::Integer(3));
        assert_eq!(one("SELECT least(2, NULL, 1.5)"), SqlValue::Real(1.5));
        assert_eq!(
            one("SELECT coalesce(NULL, nullif(1, 1), 7)"),
            SqlValue::Integer(7)
        );
        assert_eq!(
            one("SELECT string_agg(x, ',') FROM (SELECT 'a' AS x UNION ALL SELECT 'b')"),
            SqlValue::Text("a,b".into())
        );
        assert_eq!(
            one("SELECT array_agg(x) FROM (SELECT 1 AS x UNION ALL SELECT 2)"),
            SqlValue::Text("[1,2]".into())
        );
        assert_eq!(
            one("SELECT count(*) FILTER (WHERE x > 1) FROM (SELECT 1 AS x UNION ALL SELECT 2)"),
            SqlValue::Integer(1)
        );
        assert_eq!(one("SELECT 2 = ANY(ARRAY[1, 2, 3])"), SqlValue::Integer(1));
        assert_eq!(
            one("SELECT '{\"a\": {\"b\": 5}}'::jsonb -> 'a' ->> 'b'"),
            SqlValue::Integer(5)
        );
        assert_eq!(one("SELECT true AND NOT false"), SqlValue::Integer(1));
        assert_eq!(
            one("SELECT current_setting('TimeZone')"),
            SqlValue::Text("UTC".into())
        );
        assert_eq!(
            one("SELECT set_config('search_path', '', false)"),
            SqlValue::Text(String::new())
        );
        assert_eq!(
            one("SELECT current_database()"),
            SqlValue::Text("tabos".into())
        );
        assert!(
            matches!(one("SELECT version()"), SqlValue::Text(v) if v.starts_with("PostgreSQL 15.0"))
        );
    }

    #[test]
    fn generate_series_in_from() {
        let rows = run("SELECT * FROM generate_series(1, 5, 2)");
        assert_eq!(
            rows,
            [
                [SqlValue::Integer(1)],
                [SqlValue::Integer(3)],
                [SqlValue::Integer(5)]
            ]
        );
        let rows = run("SELECT g.n * 10 FROM generate_series(3, 1, -1) AS g(n)");
        assert_eq!(
            rows,
            [
                [SqlValue::Integer(30)],
                [SqlValue::Integer(20)],
                [SqlValue::Integer(10)]
            ]
        );
        assert_eq!(run("SELECT * FROM generate_series(1, 0)").len(), 0);
    }

    #[test]
    fn what_has_no_sqlite_form_is_refused_by_name() {
        for (sql, name) in [
            ("SELECT DISTINCT ON (a) * FROM t", "DISTINCT ON with *"),
            (
                "SELECT DISTINCT ON (a) a FROM t UNION SELECT 1",
                "DISTINCT ON in a UNION",
            ),
            (
                "SELECT generate_series(1, 3)",
                "generate_series() in a select list",
            ),
            ("SELECT now() AT TIME ZONE 'Europe/Paris'", "AT TIME ZONE"),
        ] {
            let e = translate_uncached(sql).unwrap_err();
            assert!(e.to_string().contains(name), "{sql}: {e}");
            assert!(matches!(&e, Error::Sql(s) if s.code == SqlCode::Sqlstate("0A000".into())));
        }
    }

    #[test]
    fn times_parse_and_print_as_postgresql_reads_them() {
        assert_eq!(parse_timestamp("1970-01-01"), Some(0));
        assert_eq!(parse_timestamp("1970-01-01T00:00:01.5Z"), Some(1_500_000));
        assert_eq!(parse_timestamp("1970-01-01 01:00:00+01:00"), Some(0));
        assert_eq!(
            parse_timestamp("1970-01-01 00:00:00-0130"),
            Some(5_400_000_000)
        );
        assert_eq!(parse_timestamp("2026-13-01"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
        // Not a char boundary where the offset's minutes would start.
        assert_eq!(parse_timestamp("1970-01-01 00:00+a\u{e9}1"), None);
        let us = parse_timestamp("2026-11-27T19:30:00.123456Z").unwrap();
        assert_eq!(crate::rfc3339(us, true), "2026-11-27T19:30:00.123456Z");
        assert_eq!(parse_interval("1 hour 30 minutes"), Some(5_400_000_000));
        assert_eq!(parse_interval("2 days ago"), Some(-2 * US_PER_DAY));
        assert_eq!(parse_interval("00:00:01.5"), Some(1_500_000));
        assert_eq!(parse_interval("250 ms"), Some(250_000));
        assert_eq!(parse_interval("1.5h"), Some(5_400_000_000));
        assert_eq!(parse_interval("1 fortnight"), None);
    }

    #[test]
    fn boolean_columns_are_told_by_their_form() {
        assert_eq!(
            &*bool_columns("SELECT true, 1, a = b AS same, x IS NULL, 't'::bool, 'x' ILIKE 'y'"),
            [true, false, true, true, true, true]
        );
        assert_eq!(
            &*bool_columns("SELECT NOT (a > 1) FROM t UNION SELECT false"),
            [true]
        );
        assert!(bool_columns("SELECT * FROM t").is_empty());
        assert!(bool_columns("SHOW x").is_empty());
    }

    #[test]
    fn translations_are_cached_by_text() {
        let sql = "SELECT now() - interval '5 minutes' AS cached_case";
        let a = translate(sql).unwrap();
        let b = translate(sql).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn catalog_statements_read_casts_and_unnest() {
        // A user's cast to a catalog type is refused; a catalog
        // statement's becomes the catalog's function, or nothing.
        let sql =
            "SELECT CAST(CAST(a.attrelid AS REGCLASS) AS TEXT), x::oid, 'pg_class'::regclass \
                   FROM pg_attribute a";
        assert!(translate(sql).is_err());
        let t = translate_catalog(sql).unwrap();
        assert!(t.contains("pg_cast_regclass(a.attrelid)"), "{t}");
        assert!(t.contains("pg_cast_regclass('pg_class')"), "{t}");
        assert!(!t.to_ascii_lowercase().contains("oid"), "{t}");
        // unnest and generate_subscripts of one array: a json_each join.
        let t = translate_catalog(
            "SELECT c.conname, unnest(i.indkey) AS attnum, generate_subscripts(i.indkey, 1) AS ord \
             FROM pg_constraint c JOIN pg_index i ON c.conindid = i.indexrelid",
        )
        .unwrap();
        assert!(
            t.contains("json_each(pg_array_json(i.indkey)) AS pg_unnested")
                && t.contains("(pg_unnested.value) AS attnum")
                && t.contains("(pg_unnested.key + 1) AS ord"),
            "{t}"
        );
        assert!(translate_catalog("SELECT unnest(a), unnest(b) FROM t").is_err());
        // JDBC's primary keys: `_pg_expandarray`'s rows as JSON objects,
        // their fields read with json_extract, inside and outside.
        let t = translate_catalog(
            "SELECT * FROM (SELECT (information_schema._pg_expandarray(i.indkey)).n AS key_seq, \
               information_schema._pg_expandarray(i.indkey) AS keys, a.attnum AS a_attnum \
               FROM pg_attribute a JOIN pg_index i ON a.attrelid = i.indrelid) result \
             WHERE result.a_attnum = (result.keys).x",
        )
        .unwrap();
        assert!(
            t.contains("json_each(pg_array_json(i.indkey)) AS pg_unnested")
                && t.contains("json_extract((result.keys), '$.x')")
                && t.contains("'$.n'")
                && !t.contains("_pg_expandarray"),
            "{t}"
        );
        assert!(translate_catalog(
            "SELECT information_schema._pg_expandarray(a), information_schema._pg_expandarray(b) FROM t"
        )
        .is_err());
        // psql's \\d+: ARRAY(subquery) over unnest in FROM, of the outer
        // row's array.
        let t = translate_catalog(
            "SELECT array_to_string(array(select 'toast.' || x from unnest(tc.reloptions) x), ', ') \
             FROM pg_class tc",
        )
        .unwrap();
        assert!(
            t.contains("json_group_array(pg_item)")
                && t.contains("SELECT value AS \"x\" FROM json_each(pg_array_json(tc.reloptions))"),
            "{t}"
        );
        assert_eq!(
            one(
                "SELECT (SELECT json_group_array(pg_item) FROM (SELECT x * 2 AS pg_item FROM \
                 (SELECT 1 AS x UNION ALL SELECT 2)) AS pg_array)"
            ),
            SqlValue::Text("[2,4]".into())
        );
        assert!(translate("SELECT ARRAY(SELECT 1 AS a, 2 AS b)")
            .unwrap_err()
            .to_string()
            .contains("one column"));
        // bool_and over SQLite's 0 and 1.
        assert_eq!(
            one("SELECT bool_and(x) FROM (SELECT 1 AS x UNION ALL SELECT 0)"),
            SqlValue::Integer(0)
        );
    }

    #[test]
    fn numeric_functions_sqlite_leaves_out() {
        assert_eq!(one("SELECT floor(7.5) * 2"), SqlValue::Real(14.0));
        assert_eq!(one("SELECT ceil(7.1), power(2, 10)"), SqlValue::Real(8.0));
        assert_eq!(one("SELECT floor(NULL)"), SqlValue::Null);
    }

    /// As PostgreSQL answers them (checked against psql 15).
    #[test]
    fn string_functions_sqlite_leaves_out() {
        let t = |s: &str| SqlValue::Text(s.into());
        assert_eq!(one("SELECT split_part('/in @0 +5', ' @', 1)"), t("/in"));
        assert_eq!(one("SELECT split_part('/in @0 +5', ' @', 2)"), t("0 +5"));
        assert_eq!(one("SELECT split_part('a,b,c', ',', -1)"), t("c"));
        assert_eq!(one("SELECT split_part('a,b,c', ',', 4)"), t(""));
        assert_eq!(one("SELECT split_part('a,b,c', ',', -4)"), t(""));
        assert_eq!(one("SELECT split_part('abc', '', 1)"), t("abc"));
        assert_eq!(one("SELECT split_part(NULL, ',', 1)"), SqlValue::Null);
        assert_eq!(one("SELECT strpos('héllo', 'llo')"), SqlValue::Integer(3));
        assert_eq!(one("SELECT strpos('hello', 'z')"), SqlValue::Integer(0));
        let conn = Connection::open_in_memory().unwrap();
        install(&conn).unwrap();
        let e = conn
            .query_row("SELECT split_part('a', ',', 0)", [], |r| {
                r.get::<_, String>(0)
            })
            .unwrap_err();
        assert!(e.to_string().contains("must not be zero"), "{e}");
    }

    #[test]
    fn distinct_on_keeps_the_first_row_of_each_key() {
        let rows = run(
            "SELECT DISTINCT ON (k) k, v AS first FROM (SELECT 1 AS k, 3 AS v UNION ALL \
             SELECT 1, 2 UNION ALL SELECT 2, 5 UNION ALL SELECT 2, 9) t ORDER BY k, v DESC LIMIT 5",
        );
        assert_eq!(
            rows,
            [
                [SqlValue::Integer(1), SqlValue::Integer(3)],
                [SqlValue::Integer(2), SqlValue::Integer(9)]
            ]
        );
    }

    #[test]
    fn tenant_tables_take_postgresql_ddl() {
        let ddl = translate(
            "CREATE TABLE \"a/events\" (id serial PRIMARY KEY, at timestamptz DEFAULT now(), \
             ok boolean DEFAULT true, n bigint DEFAULT 0 - 1)",
        )
        .unwrap();
        assert!(
            ddl.contains("id INTEGER PRIMARY KEY") && ddl.contains("DEFAULT (pg_now())"),
            "{ddl}"
        );
        let conn = Connection::open_in_memory().unwrap();
        install(&conn).unwrap();
        conn.execute_batch(&ddl).unwrap();
        let insert = translate("INSERT INTO \"a/events\" DEFAULT VALUES").unwrap();
        conn.execute_batch(&format!("{insert}; {insert};")).unwrap();
        let rows: Vec<(i64, String, i64, i64)> = conn
            .prepare("SELECT id, at, ok, n FROM \"a/events\" ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
        assert!(parse_timestamp(&rows[0].1).is_some(), "{rows:?}");
        assert_eq!((rows[0].2, rows[0].3), (1, -1));
    }

    #[test]
    fn result_columns_are_named_as_postgresql_names_them() {
        let names = output_names(
            "SELECT a.conrelid, array_agg(CAST(b.attname AS TEXT)) AS cols, min(x), x::int, \
             CASE WHEN y THEN 1 END, 1 + 2 FROM t",
        )
        .unwrap();
        assert_eq!(names, ["conrelid", "cols", "min", "x", "case", "?column?"]);
        assert_eq!(
            output_names("SELECT 1::int, '2'::bigint, true, count(*), (pid), now()").unwrap(),
            ["int4", "int8", "bool", "count", "pid", "now"]
        );
        assert_eq!(output_names("SELECT * FROM t"), None);
        assert_eq!(
            &*array_columns("SELECT array_agg(x) AS a, x FROM t"),
            &[true, false]
        );
        assert_eq!(
            relations_named("WITH w AS (SELECT 1) SELECT * FROM public.node n JOIN w ON true"),
            Some(vec!["node".to_string(), "w".to_string()])
        );
        assert_eq!(relations_named("SELEC nonsense"), None);
    }

    #[test]
    fn create_table_statements_give_keys_and_not_null() {
        // As SQLite keeps a table an ALTER added a column to: after the
        // key.
        let shape = sqlite_table_shape(
            "CREATE TABLE proc (p_key INTEGER NOT NULL, realm TEXT NOT NULL, pid TEXT NOT NULL, \
             state TEXT CHECK (state IN ('a', 'b')), PRIMARY KEY (p_key, realm, pid), \
             log_bytes INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID",
        )
        .unwrap();
        assert_eq!(shape.primary_key, ["p_key", "realm", "pid"]);
        let names: Vec<(&str, bool)> = shape
            .columns
            .iter()
            .map(|(n, _, not_null)| (n.as_str(), *not_null))
            .collect();
        assert_eq!(
            names,
            [
                ("p_key", true),
                ("realm", true),
                ("pid", true),
                ("state", false),
                ("log_bytes", true)
            ]
        );
        assert_eq!(sqlite_table_shape("CREATE VIEW v AS SELECT 1"), None);
    }
}
