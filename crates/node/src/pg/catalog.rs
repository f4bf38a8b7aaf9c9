//! Enough of PostgreSQL's `pg_catalog` and `information_schema` for psql's
//! `\d`, `\d+`, `\dt`, `\dv`, `\dn` and `\l`, pg_dump, SQLAlchemy's
//! inspector, JDBC's metadata and the table pickers of SQL tools
//! (Grafana's), answered from what the session may read.
//!
//! A statement naming either schema is not run on the store: it runs on a
//! private in-memory SQLite database made for it, whose tables are the
//! catalog relations clients read (`pg_class`, `pg_attribute`,
//! `pg_namespace`, `pg_type`, `information_schema_tables`, …; those tabos
//! has nothing for — indexes, constraints, policies, triggers,
//! publications, inheritance — are there and empty). Its rows describe the
//! relations of the session's scope: every table and view of the kernel
//! schema for an operator's `*`, the OS-state views of `tenant_view` for a
//! realm; their columns come from running each relation's `SELECT *
//! LIMIT 1` in that scope, their types, NOT NULL and primary keys from
//! the backend's own catalog (SQLite's `CREATE TABLE`, read by
//! [`tabos_store::dialect::sqlite_table_shape`]; PostgreSQL's
//! `information_schema`; for a SQLite view, its first row's values),
//! types mapped to what the front door sends: int8, float8, bytea or
//! text. A primary key is an index (`<table>_pkey`) in `pg_class` and
//! `pg_index` and a constraint in `pg_constraint`, as PostgreSQL keeps it;
//! a realm does not see the kernel's own `p_key` ([`HIDDEN`]), in a
//! column list or a key. Booleans (columns declared BOOLEAN) go out as
//! `bool`, arrays built by a select item as `text[]`.
//!
//! The dialect reads the statement first, in its catalog mode
//! ([`tabos_store::dialect::translate_catalog`]: `reg*` casts become the
//! catalog's `pg_cast_*` functions — an oid prints as its name, a name
//! gives its oid —, `unnest`, `generate_subscripts` and
//! `_pg_expandarray` in a select list a `json_each` join, a composite's
//! `(…).field` a JSON field). Then the catalog's own rewriting ([`translate`]): schema
//! prefixes dropped (`information_schema.x` becomes `information_schema_x`),
//! casts (`::regclass`) and `COLLATE pg_catalog.default` removed, `~`,
//! `!~` and `OPERATOR(pg_catalog.~)` made `REGEXP`, `E'…'` made plain,
//! Grafana's `search_path` subquery and `parse_ident` made literals, and
//! PostgreSQL's functions that catalog queries call given SQLite
//! definitions ([`functions`]). A catalog statement SQLite still cannot
//! run (arrays, `generate_series` over them) that reads one of the
//! relations tabos keeps empty has no rows (with its columns named as
//! PostgreSQL names them), which is its answer in PostgreSQL too; any
//! other is refused with its SQLite error.

use std::time::Duration;

use pgwire::error::PgWireResult;
use rusqlite::functions::FunctionFlags;
use tabos_store::{ReadScope, Value};

use super::{refused, sqlstate};
use crate::Node;

/// The oid of schema `public`, where tabos's relations are.
const PUBLIC: i64 = 2200;
/// The first relation's oid (as PostgreSQL's user relations start).
const FIRST_OID: i64 = 16_384;
/// Most relations the catalog describes.
pub const RELATIONS_MAX: usize = 512;
/// Most rows a catalog statement returns.
pub const ROWS_MAX: usize = 100_000;
/// Largest value a catalog statement may build, in bytes.
pub const VALUE_BYTES_MAX: i32 = 1 << 20;
/// Virtual-machine steps between deadline checks of a catalog statement.
const PROGRESS_STEPS: i32 = 10_000;

/// The catalog relations with no rows in tabos.
const EMPTY: &[&str] = &[
    "pg_attrdef",
    "pg_collation",
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_rel",
    "pg_publication_namespace",
    "pg_inherits",
    "pg_trigger",
    "pg_rewrite",
    "pg_description",
    "pg_proc",
    "pg_foreign_table",
    "pg_partitioned_table",
    "pg_sequence",
    "pg_depend",
    // What pg_dump reads besides: extensions, languages, operators,
    // text search, foreign data, default privileges, casts, event
    // triggers, initial privileges, security labels, subscriptions.
    "pg_extension",
    "pg_language",
    "pg_operator",
    "pg_opclass",
    "pg_opfamily",
    "pg_amop",
    "pg_amproc",
    "pg_ts_parser",
    "pg_ts_template",
    "pg_ts_dict",
    "pg_ts_config",
    "pg_foreign_data_wrapper",
    "pg_foreign_server",
    "pg_default_acl",
    "pg_conversion",
    "pg_cast",
    "pg_range",
    "pg_transform",
    "pg_event_trigger",
    "pg_init_privs",
    "pg_seclabels",
    "pg_subscription",
];

/// The catalog's tables, as SQLite DDL.
const SCHEMA: &str = "
CREATE TABLE pg_namespace (oid INTEGER PRIMARY KEY, nspname TEXT, nspowner INTEGER, nspacl TEXT,
    tableoid INTEGER DEFAULT 2615);
CREATE TABLE pg_class (oid INTEGER PRIMARY KEY, relname TEXT, relnamespace INTEGER, relkind TEXT,
    relowner INTEGER, relam INTEGER, relchecks INTEGER, relhasindex BOOLEAN, relhasrules BOOLEAN,
    relhastriggers BOOLEAN, relrowsecurity BOOLEAN, relforcerowsecurity BOOLEAN,
    relispartition BOOLEAN, reltablespace INTEGER, reloftype INTEGER, relpersistence TEXT,
    relreplident TEXT, reltoastrelid INTEGER, relpartbound TEXT, reloptions TEXT, relacl TEXT,
    reltuples REAL, relpages INTEGER, relnatts INTEGER, reltype INTEGER, relisshared BOOLEAN,
    relhassubclass BOOLEAN, relfilenode INTEGER, relfrozenxid INTEGER DEFAULT 0,
    relminmxid INTEGER DEFAULT 0, relispopulated BOOLEAN DEFAULT 1, tableoid INTEGER DEFAULT 1259);
CREATE TABLE pg_attribute (attrelid INTEGER, attname TEXT, atttypid INTEGER, atttypmod INTEGER,
    attnum INTEGER, attnotnull BOOLEAN, attisdropped BOOLEAN, atthasdef BOOLEAN, attidentity TEXT,
    attgenerated TEXT, attcollation INTEGER, attstorage TEXT, attcompression TEXT,
    attstattarget INTEGER, attlen INTEGER, attndims INTEGER, atthasmissing BOOLEAN,
    attislocal BOOLEAN, attinhcount INTEGER, attacl TEXT, attoptions TEXT, attalign TEXT DEFAULT 'd',
    attfdwoptions TEXT, attmissingval TEXT, tableoid INTEGER DEFAULT 1249);
CREATE TABLE pg_type (oid INTEGER PRIMARY KEY, typname TEXT, typnamespace INTEGER, typlen INTEGER,
    typtype TEXT, typcategory TEXT, typcollation INTEGER, typelem INTEGER, typarray INTEGER,
    typbasetype INTEGER, typnotnull BOOLEAN, typtypmod INTEGER, typrelid INTEGER, typowner INTEGER,
    typinput TEXT, typoutput TEXT, typdelim TEXT, typisdefined BOOLEAN, typacl TEXT,
    typstorage TEXT DEFAULT 'p', typalign TEXT DEFAULT 'd', tableoid INTEGER DEFAULT 1247);
CREATE TABLE pg_am (oid INTEGER PRIMARY KEY, amname TEXT, amtype TEXT, amhandler INTEGER DEFAULT 0,
    tableoid INTEGER DEFAULT 2601);
CREATE TABLE pg_roles (oid INTEGER PRIMARY KEY, rolname TEXT, rolsuper BOOLEAN, rolinherit BOOLEAN,
    rolcreaterole BOOLEAN, rolcreatedb BOOLEAN, rolcanlogin BOOLEAN, rolreplication BOOLEAN,
    rolconnlimit INTEGER, rolvaliduntil TEXT, rolbypassrls BOOLEAN, rolconfig TEXT);
CREATE TABLE pg_user (usesysid INTEGER, usename TEXT, usesuper BOOLEAN);
CREATE TABLE pg_database (oid INTEGER PRIMARY KEY, datname TEXT, datdba INTEGER, encoding INTEGER,
    datcollate TEXT, datctype TEXT, daticulocale TEXT, datlocprovider TEXT, datacl TEXT,
    datallowconn BOOLEAN, datistemplate BOOLEAN, datconnlimit INTEGER, dattablespace INTEGER);
CREATE TABLE pg_tablespace (oid INTEGER PRIMARY KEY, spcname TEXT, spcowner INTEGER);
CREATE TABLE pg_settings (name TEXT, setting TEXT, unit TEXT, category TEXT, short_desc TEXT);
CREATE TABLE pg_tables (schemaname TEXT, tablename TEXT, tableowner TEXT, tablespace TEXT,
    hasindexes BOOLEAN, hasrules BOOLEAN, hastriggers BOOLEAN, rowsecurity BOOLEAN);
CREATE TABLE pg_views (schemaname TEXT, viewname TEXT, viewowner TEXT, definition TEXT);
CREATE TABLE pg_attrdef (oid INTEGER, adrelid INTEGER, adnum INTEGER, adbin TEXT);
CREATE TABLE pg_collation (oid INTEGER, collname TEXT, collnamespace INTEGER, collprovider TEXT);
CREATE TABLE pg_index (indexrelid INTEGER, indrelid INTEGER, indisprimary BOOLEAN,
    indisunique BOOLEAN, indisclustered BOOLEAN, indisvalid BOOLEAN, indisreplident BOOLEAN,
    indkey TEXT, indnatts INTEGER, indnkeyatts INTEGER, indnullsnotdistinct BOOLEAN,
    indisexclusion BOOLEAN, indimmediate BOOLEAN, indexprs TEXT, indpred TEXT, indoption TEXT,
    indcollation TEXT, indclass TEXT, indisready BOOLEAN DEFAULT 1, indislive BOOLEAN DEFAULT 1);
CREATE TABLE pg_constraint (oid INTEGER, conname TEXT, connamespace INTEGER, contype TEXT,
    condeferrable BOOLEAN, condeferred BOOLEAN, convalidated BOOLEAN, conrelid INTEGER,
    contypid INTEGER, conindid INTEGER, confrelid INTEGER, conkey TEXT, confkey TEXT,
    conparentid INTEGER, conislocal BOOLEAN, tableoid INTEGER DEFAULT 2606);
CREATE TABLE pg_policy (oid INTEGER, polname TEXT, polrelid INTEGER, polcmd TEXT,
    polpermissive BOOLEAN, polroles TEXT, polqual TEXT, polwithcheck TEXT);
CREATE TABLE pg_statistic_ext (oid INTEGER, stxrelid INTEGER, stxname TEXT, stxnamespace INTEGER,
    stxkind TEXT, stxstattarget INTEGER, stxowner INTEGER, stxkeys TEXT);
CREATE TABLE pg_publication (oid INTEGER, pubname TEXT, puballtables BOOLEAN, pubinsert BOOLEAN,
    pubupdate BOOLEAN, pubdelete BOOLEAN, pubtruncate BOOLEAN, pubviaroot BOOLEAN);
CREATE TABLE pg_publication_rel (oid INTEGER, prpubid INTEGER, prrelid INTEGER, prqual TEXT,
    prattrs TEXT);
CREATE TABLE pg_publication_namespace (oid INTEGER, pnpubid INTEGER, pnnspid INTEGER);
CREATE TABLE pg_inherits (inhrelid INTEGER, inhparent INTEGER, inhseqno INTEGER,
    inhdetachpending BOOLEAN);
CREATE TABLE pg_trigger (oid INTEGER, tgrelid INTEGER, tgname TEXT, tgisinternal BOOLEAN,
    tgenabled TEXT, tgparentid INTEGER, tgfoid INTEGER, tgtype INTEGER);
CREATE TABLE pg_rewrite (oid INTEGER, rulename TEXT, ev_class INTEGER, ev_type TEXT,
    is_instead BOOLEAN);
CREATE TABLE pg_description (objoid INTEGER, classoid INTEGER, objsubid INTEGER,
    description TEXT);
CREATE TABLE pg_proc (oid INTEGER, proname TEXT, pronamespace INTEGER, prokind TEXT,
    prorettype INTEGER, proargtypes TEXT);
CREATE TABLE pg_foreign_table (ftrelid INTEGER, ftserver INTEGER, ftoptions TEXT);
CREATE TABLE pg_partitioned_table (partrelid INTEGER, partstrat TEXT, partnatts INTEGER);
CREATE TABLE pg_sequence (seqrelid INTEGER, seqtypid INTEGER, seqstart INTEGER, seqincrement INTEGER,
    seqmax INTEGER, seqmin INTEGER, seqcache INTEGER, seqcycle BOOLEAN);
CREATE TABLE pg_depend (classid INTEGER, objid INTEGER, objsubid INTEGER, refclassid INTEGER,
    refobjid INTEGER, refobjsubid INTEGER, deptype TEXT);
CREATE TABLE information_schema_schemata (catalog_name TEXT, schema_name TEXT, schema_owner TEXT);
CREATE TABLE information_schema_tables (table_catalog TEXT, table_schema TEXT, table_name TEXT,
    table_type TEXT, is_insertable_into TEXT, is_typed TEXT);
CREATE TABLE information_schema_views (table_catalog TEXT, table_schema TEXT, table_name TEXT,
    view_definition TEXT);
CREATE TABLE information_schema_columns (table_catalog TEXT, table_schema TEXT, table_name TEXT,
    column_name TEXT, ordinal_position INTEGER, column_default TEXT, is_nullable TEXT,
    data_type TEXT, udt_name TEXT, character_maximum_length INTEGER, numeric_precision INTEGER,
    numeric_scale INTEGER, is_identity TEXT, is_generated TEXT, is_updatable TEXT);
INSERT INTO pg_namespace (oid, nspname, nspowner, nspacl) VALUES (11, 'pg_catalog', 10, NULL),
    (2200, 'public', 10, NULL), (13000, 'information_schema', 10, NULL);
INSERT INTO pg_am (oid, amname, amtype) VALUES (2, 'heap', 't'), (403, 'btree', 'i');
INSERT INTO pg_roles VALUES (10, 'tabos', 0, 1, 0, 0, 1, 0, -1, NULL, 0, NULL);
INSERT INTO pg_user VALUES (10, 'tabos', 0);
INSERT INTO pg_database VALUES (1, 'tabos', 10, 6, 'C.UTF-8', 'C.UTF-8', NULL, 'c', NULL, 1, 0,
    -1, 1663);
INSERT INTO pg_tablespace VALUES (1663, 'pg_default', 10);
INSERT INTO information_schema_schemata VALUES ('tabos', 'public', 'tabos'),
    ('tabos', 'pg_catalog', 'tabos'), ('tabos', 'information_schema', 'tabos');
";

/// The types a column may have: oid, name, length.
const TYPES: &[(i64, &str, i64, &str)] = &[
    (16, "bool", 1, "B"),
    (17, "bytea", -1, "U"),
    (19, "name", 64, "S"),
    (20, "int8", 8, "N"),
    (23, "int4", 4, "N"),
    (25, "text", -1, "S"),
    (26, "oid", 4, "N"),
    (701, "float8", 8, "N"),
    (1043, "varchar", -1, "S"),
    (1184, "timestamptz", 8, "D"),
];

/// Whether `sql` reads the catalog: names either schema, or one of the
/// catalog relations (those of [`SCHEMA`] and [`EMPTY`]) as a word.
pub fn mentions_catalog(sql: &str) -> bool {
    use std::sync::OnceLock;
    static RELATIONS: OnceLock<Vec<String>> = OnceLock::new();
    let relations = RELATIONS.get_or_init(|| {
        SCHEMA
            .split("CREATE TABLE ")
            .skip(1)
            .filter_map(|t| t.split_whitespace().next())
            .map(str::to_string)
            .chain(EMPTY.iter().map(|t| t.to_string()))
            .filter(|t| t.starts_with("pg_"))
            .collect()
    });
    let lower = sql.to_ascii_lowercase();
    lower.contains("pg_catalog")
        || lower.contains("information_schema")
        || (lower.contains("pg_") && relations.iter().any(|r| names(&lower, r)))
}

/// Rows with the given column names.
pub fn rows(columns: &[&str], values: Vec<Vec<Value>>) -> tabos_store::Rows {
    let columns: std::sync::Arc<[String]> = columns.iter().map(|c| c.to_string()).collect();
    tabos_store::Rows {
        rows: values
            .into_iter()
            .map(|v| tabos_store::Row::new(columns.clone(), v))
            .collect(),
        columns,
        truncated: false,
    }
}

/// One relation the session may read.
struct Relation {
    name: String,
    view: bool,
    /// Its columns: name, type oid, whether NOT NULL.
    columns: Vec<Column>,
    /// Its primary key's columns, in key order (empty: none).
    primary_key: Vec<String>,
    /// A view's query, as its backend keeps it.
    definition: Option<String>,
}

/// One column of a [`Relation`].
struct Column {
    name: String,
    type_oid: i64,
    not_null: bool,
}

/// Columns the kernel keeps for itself, not shown to a realm: `p_key`
/// places a row in its partition and is always its realm's.
const HIDDEN: &[&str] = &["p_key"];

/// The type oid the front door sends a column of declared type `decl`
/// as (the store hands every integer and boolean over as an integer).
fn type_of(decl: &str) -> i64 {
    let d = decl.to_ascii_lowercase();
    if d.starts_with("timestamp") {
        1184
    } else if d.contains("int") || d.contains("bool") || d.contains("serial") {
        20
    } else if d.contains("real")
        || d.contains("floa")
        || d.contains("doub")
        || d.contains("numeric")
    {
        701
    } else if d.contains("blob") || d.contains("bytea") {
        17
    } else {
        25
    }
}

/// What the backend's own catalog says of relation `name`: each column's
/// declared type and whether NOT NULL, and its primary key.
fn declared(
    store: &tabos_store::Store,
    name: &str,
    all: &tabos_store::ReadLimits,
) -> tabos_store::Result<tabos_store::dialect::TableShape> {
    let name = Value::Text(name.into());
    Ok(match store.kind() {
        // The read path runs no PRAGMA: the table's own CREATE statement
        // (SQLite keeps it, ALTERs included) says.
        tabos_store::BackendKind::Sqlite => store
            .query_bounded(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = $1",
                &[name],
                all,
            )?
            .rows
            .first()
            .and_then(|r| r.get::<String>(0).ok())
            .and_then(|ddl| tabos_store::dialect::sqlite_table_shape(&ddl))
            .unwrap_or_default(),
        tabos_store::BackendKind::Postgres => {
            let columns = store
                .query_bounded(
                    "SELECT column_name::text, data_type::text, (is_nullable = 'NO')::int \
                     FROM information_schema.columns \
                     WHERE table_schema = current_schema() AND table_name = $1 \
                     ORDER BY ordinal_position",
                    std::slice::from_ref(&name),
                    all,
                )?
                .rows
                .iter()
                .filter_map(|r| {
                    Some((
                        r.get::<String>(0).ok()?,
                        r.get::<String>(1).ok()?,
                        r.get::<i64>(2).ok()? != 0,
                    ))
                })
                .collect();
            let primary_key = store
                .query_bounded(
                    "SELECT k.column_name::text FROM information_schema.table_constraints c \
                     JOIN information_schema.key_column_usage k \
                       ON k.constraint_name = c.constraint_name \
                      AND k.table_schema = c.table_schema AND k.table_name = c.table_name \
                     WHERE c.constraint_type = 'PRIMARY KEY' \
                       AND c.table_schema = current_schema() AND c.table_name = $1 \
                     ORDER BY k.ordinal_position",
                    &[name],
                    all,
                )?
                .rows
                .iter()
                .filter_map(|r| r.get::<String>(0).ok())
                .collect();
            tabos_store::dialect::TableShape {
                columns,
                primary_key,
            }
        }
    })
}

/// View `name`'s query, as the backend keeps it (SQLite: the text after
/// `AS` of its `CREATE VIEW`; PostgreSQL: `pg_get_viewdef`).
fn view_definition(
    store: &tabos_store::Store,
    name: &str,
    all: &tabos_store::ReadLimits,
) -> tabos_store::Result<Option<String>> {
    let name = Value::Text(name.into());
    let sql = match store.kind() {
        tabos_store::BackendKind::Sqlite => {
            "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = $1"
        }
        tabos_store::BackendKind::Postgres => {
            "SELECT pg_get_viewdef(c.oid, true) FROM pg_class c \
             WHERE c.relname = $1 AND c.relnamespace = to_regnamespace(current_schema())"
        }
    };
    let text = store
        .query_bounded(sql, &[name], all)?
        .rows
        .first()
        .and_then(|r| r.get::<String>(0).ok());
    Ok(text.map(|t| match store.kind() {
        tabos_store::BackendKind::Sqlite => {
            use std::sync::OnceLock;
            static HEADER: OnceLock<regex::Regex> = OnceLock::new();
            let header = HEADER.get_or_init(|| {
                regex::Regex::new(
                    r#"(?is)^\s*CREATE\s+(?:TEMP(?:ORARY)?\s+)?VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:"[^"]*"|\S+?)(?:\s*\([^)]*\))?\s+AS\s"#,
                )
                .expect("a valid pattern")
            });
            match header.find(&t) {
                Some(m) => t[m.end()..].trim().to_string(),
                None => t,
            }
        }
        tabos_store::BackendKind::Postgres => t,
    }))
}

/// Every table and view of the kernel schema, whether a view, and
/// whether in a realm's view (`tenant_view`).
fn listed(store: &tabos_store::Store) -> tabos_store::Result<Vec<(String, bool, bool)>> {
    let all = tabos_store::ReadLimits::rows(tabos_store::Cap::Truncate(RELATIONS_MAX));
    let listed = match store.kind() {
        tabos_store::BackendKind::Sqlite => store.query_bounded(
            "SELECT name, type = 'view' FROM sqlite_master WHERE type IN ('table', 'view') \
             AND name NOT LIKE 'sqlite%' ORDER BY name",
            &[],
            &all,
        )?,
        tabos_store::BackendKind::Postgres => store.query_bounded(
            "SELECT table_name::text, (table_type = 'VIEW')::int FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY table_name",
            &[],
            &all,
        )?,
    };
    let realm_view: Vec<String> = store
        .query_bounded("SELECT name FROM tenant_view", &[], &all)?
        .rows
        .iter()
        .filter_map(|r| r.get::<String>(0).ok())
        .collect();
    let mut out = Vec::new();
    for r in listed.rows.iter().take(RELATIONS_MAX) {
        let name: String = r.get(0)?;
        let view: i64 = r.get(1)?;
        // A name outside `[a-z_0-9]` is never one of the schema's.
        if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            continue;
        }
        let in_view = realm_view.contains(&name);
        out.push((name, view != 0, in_view));
    }
    Ok(out)
}

/// The cluster's relations: the kernel's tables and views outside a
/// realm's view (`node`, `grants`, `credential` …), which an operator
/// signed in to a realm reads whole.
pub fn cluster_relations(store: &tabos_store::Store) -> tabos_store::Result<Vec<String>> {
    Ok(listed(store)?
        .into_iter()
        .filter(|(_, _, in_view)| !in_view)
        .map(|(name, _, _)| name)
        .collect())
}

/// The relations of `scope`, with their columns: for a realm, its view,
/// and the cluster's relations too when `operator` signed in to it.
fn relations(node: &Node, scope: &ReadScope, operator: bool) -> tabos_store::Result<Vec<Relation>> {
    let store = &node.store;
    let all = tabos_store::ReadLimits::rows(tabos_store::Cap::Truncate(RELATIONS_MAX));
    let mut out = Vec::new();
    for (name, view, in_view) in listed(store)? {
        let (scope, realm_scoped) = match scope {
            ReadScope::All => (ReadScope::All, false),
            ReadScope::Realm(_) if in_view => (scope.clone(), true),
            ReadScope::Realm(_) if operator => (ReadScope::All, false),
            ReadScope::Realm(_) => continue,
        };
        let scope = &scope;
        let limits = tabos_store::ReadLimits {
            scope: scope.clone(),
            time_max: Some(node.settings.query_time_max),
            bytes_max: tabos_store::RESULT_BYTES_MAX,
            ..tabos_store::ReadLimits::rows(tabos_store::Cap::Truncate(1))
        };
        let one = store.query_bounded(&format!("SELECT * FROM {name} LIMIT 1"), &[], &limits)?;
        let shape = declared(store, &name, &all)?;
        let hidden = |c: &str| realm_scoped && HIDDEN.contains(&c);
        let first = one.rows.first();
        let columns = one
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| !hidden(c))
            .map(|(i, c)| {
                let declared = shape.columns.iter().find(|d| d.0 == *c);
                let type_oid = match (declared, first.and_then(|r| r.values().get(i))) {
                    (Some((_, decl, _)), _) if !decl.is_empty() => type_of(decl),
                    (_, Some(Value::Int(_))) => 20,
                    (_, Some(Value::Real(_))) => 701,
                    (_, Some(Value::Blob(_))) => 17,
                    // A view's column of times (ps's spawned_at …), as the
                    // front door sends it.
                    (_, Some(Value::Text(t))) if super::time_us(t).is_some() => 1184,
                    _ => 25,
                };
                Column {
                    name: c.clone(),
                    type_oid,
                    not_null: declared.is_some_and(|d| d.2),
                }
            })
            .collect();
        // A key is shown as it is, or not at all: a realm's view hides
        // p_key, and the rest of such a key is still unique within it.
        let primary_key = shape
            .primary_key
            .into_iter()
            .filter(|c| !hidden(c))
            .collect();
        let definition = if view {
            view_definition(store, &name, &all)?
        } else {
            None
        };
        out.push(Relation {
            name,
            view,
            columns,
            primary_key,
            definition,
        });
    }
    Ok(out)
}

/// Argument `i` of a catalog function as an oid: an integer, or text of
/// one (`'16384'`, as psql and pg_dump write oids); `None` otherwise.
fn oid_arg(ctx: &rusqlite::functions::Context<'_>, i: usize) -> Option<i64> {
    match ctx.get_raw(i) {
        rusqlite::types::ValueRef::Integer(n) => Some(n),
        rusqlite::types::ValueRef::Text(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// A type's length (-1: variable), by its oid.
fn type_len(oid: i64) -> i64 {
    TYPES.iter().find(|t| t.0 == oid).map_or(-1, |t| t.2)
}

/// How PostgreSQL stores a type of length `len`: a variable-length one
/// out of line when large (`x`), a fixed one plain (`p`), as its own
/// types are; a column keeps its type's.
fn storage(len: i64) -> &'static str {
    if len < 0 {
        "x"
    } else {
        "p"
    }
}

/// Function `name(oid[, pretty])`: `texts`' entry for the oid, NULL for
/// any other (pg_get_viewdef, pg_get_constraintdef).
fn by_oid(
    db: &rusqlite::Connection,
    name: &str,
    texts: std::collections::HashMap<i64, String>,
) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let texts = std::sync::Arc::new(texts);
    for arity in [1, 2] {
        let texts = texts.clone();
        db.create_scalar_function(name, arity, flags, move |ctx| {
            Ok(oid_arg(ctx, 0).and_then(|o| texts.get(&o).cloned()))
        })?;
    }
    Ok(())
}

/// Relation `i`'s oid.
fn relation_oid(i: usize) -> i64 {
    FIRST_OID + i as i64
}

/// The oid of relation `i`'s primary key index.
fn key_index_oid(i: usize) -> i64 {
    FIRST_OID + (RELATIONS_MAX + i) as i64
}

/// The oid of relation `i`'s primary key constraint.
fn key_constraint_oid(i: usize) -> i64 {
    FIRST_OID + (2 * RELATIONS_MAX + i) as i64
}

/// PostgreSQL's own oids of the catalog relations clients name in casts
/// (`'pg_class'::regclass`).
const SYSTEM_RELATIONS: &[(i64, &str)] = &[
    (1247, "pg_type"),
    (1249, "pg_attribute"),
    (1255, "pg_proc"),
    (1259, "pg_class"),
    (1262, "pg_database"),
    (2604, "pg_attrdef"),
    (2606, "pg_constraint"),
    (2608, "pg_depend"),
    (2609, "pg_description"),
    (2610, "pg_index"),
    (2611, "pg_inherits"),
    (2615, "pg_namespace"),
    (2618, "pg_rewrite"),
    (2620, "pg_trigger"),
    (3456, "pg_collation"),
    (826, "pg_default_acl"),
    (1213, "pg_tablespace"),
    (1260, "pg_authid"),
    (2601, "pg_am"),
    (2602, "pg_amop"),
    (2603, "pg_amproc"),
    (2605, "pg_cast"),
    (2612, "pg_language"),
    (2616, "pg_opclass"),
    (2617, "pg_operator"),
    (2753, "pg_opfamily"),
    (3079, "pg_extension"),
    (3256, "pg_policy"),
    (3381, "pg_statistic_ext"),
    (3394, "pg_init_privs"),
    (3466, "pg_event_trigger"),
    (3541, "pg_range"),
    (3576, "pg_transform"),
    (3596, "pg_seclabel"),
    (6100, "pg_subscription"),
    (6104, "pg_publication"),
    (6106, "pg_publication_rel"),
];

/// The schemas: oid and name.
const SCHEMAS: &[(i64, &str)] = &[
    (11, "pg_catalog"),
    (PUBLIC, "public"),
    (13000, "information_schema"),
];

/// A cast of an oid to a `reg*` type prints as the name it stands for;
/// a cast of a name gives its oid (what the catalog database holds for
/// either: see [`tabos_store::dialect::Mode::Catalog`]). An unknown name
/// is an error, as in PostgreSQL; an unknown oid prints as its number.
fn reg_cast(
    db: &rusqlite::Connection,
    type_name: &'static str,
    known: Vec<(i64, String)>,
) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let by_oid: std::collections::HashMap<i64, String> = known.iter().cloned().collect();
    let by_name: std::collections::HashMap<String, i64> =
        known.into_iter().map(|(o, n)| (n, o)).collect();
    db.create_scalar_function(
        format!("pg_cast_{type_name}").as_str(),
        1,
        flags,
        move |ctx| {
            use rusqlite::types::{Value as V, ValueRef};
            Ok(match ctx.get_raw(0) {
                ValueRef::Integer(oid) => match by_oid.get(&oid) {
                    Some(n) => V::Text(n.clone()),
                    None => V::Text(oid.to_string()),
                },
                ValueRef::Text(t) => {
                    let text = String::from_utf8_lossy(t);
                    let name = text
                        .trim()
                        .trim_start_matches("pg_catalog.")
                        .trim_start_matches("public.")
                        .trim_matches('"')
                        .to_string();
                    match (by_name.get(&name), name.parse::<i64>()) {
                        (Some(oid), _) => V::Integer(*oid),
                        (None, Ok(oid)) => V::Integer(oid),
                        (None, Err(_)) => {
                            return Err(rusqlite::Error::UserFunctionError(
                                format!("{type_name} \"{name}\" does not exist").into(),
                            ))
                        }
                    }
                }
                _ => V::Null,
            })
        },
    )
}

/// The SQLite function definitions of the PostgreSQL functions catalog
/// queries call, over `relations`.
fn functions(db: &rusqlite::Connection, relations: &[Relation]) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let mut classes: Vec<(i64, String)> = SYSTEM_RELATIONS
        .iter()
        .map(|(o, n)| (*o, n.to_string()))
        .collect();
    // Definitions of the primary keys, by index and by constraint oid.
    let mut index_defs = std::collections::HashMap::new();
    let mut constraint_defs = std::collections::HashMap::new();
    for (i, r) in relations.iter().enumerate() {
        classes.push((relation_oid(i), r.name.clone()));
        if r.primary_key.is_empty() {
            continue;
        }
        let key = r.primary_key.join(", ");
        let index = format!("{}_pkey", r.name);
        classes.push((key_index_oid(i), index.clone()));
        index_defs.insert(
            key_index_oid(i),
            (
                format!(
                    "CREATE UNIQUE INDEX {index} ON public.{} USING btree ({key})",
                    r.name
                ),
                r.primary_key.clone(),
            ),
        );
        constraint_defs.insert(key_constraint_oid(i), format!("PRIMARY KEY ({key})"));
    }
    let views: std::collections::HashMap<i64, String> = relations
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((relation_oid(i), r.definition.clone()?)))
        .collect();
    by_oid(db, "pg_get_viewdef", views)?;
    reg_cast(db, "regclass", classes)?;
    reg_cast(
        db,
        "regtype",
        TYPES.iter().map(|t| (t.0, t.1.to_string())).collect(),
    )?;
    reg_cast(
        db,
        "regnamespace",
        SCHEMAS.iter().map(|(o, n)| (*o, n.to_string())).collect(),
    )?;
    reg_cast(db, "regrole", vec![(10, "tabos".into())])?;
    reg_cast(db, "regproc", vec![])?;
    // pg_get_indexdef(index, column, pretty): the whole definition for
    // column 0, else that key column's name.
    let index_def = move |ctx: &rusqlite::functions::Context<'_>| {
        let oid = oid_arg(ctx, 0);
        let column: i64 = if ctx.len() > 1 { ctx.get(1)? } else { 0 };
        Ok(oid
            .and_then(|o| index_defs.get(&o))
            .and_then(|(def, cols)| {
                if column == 0 {
                    Some(def.clone())
                } else {
                    cols.get(usize::try_from(column - 1).ok()?).cloned()
                }
            }))
    };
    let index_def = std::sync::Arc::new(index_def);
    for arity in [1, 3] {
        let f = index_def.clone();
        db.create_scalar_function("pg_get_indexdef", arity, flags, move |ctx| f(ctx))?;
    }
    by_oid(db, "pg_get_constraintdef", constraint_defs)?;
    // An array's text — an int2vector's `1 2`, an array's `{1,2}`, JSON —
    // as a JSON array, for `json_each` (see the dialect's `unnest`).
    db.create_scalar_function("pg_array_json", 1, flags, |ctx| {
        use rusqlite::types::ValueRef;
        let text = match ctx.get_raw(0) {
            ValueRef::Null => return Ok("[]".to_string()),
            ValueRef::Integer(n) => return Ok(format!("[{n}]")),
            ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
            _ => String::new(),
        };
        let t = text.trim();
        if t.starts_with('[') {
            return Ok(t.to_string());
        }
        let items: Vec<serde_json::Value> = t
            .trim_start_matches('{')
            .trim_end_matches('}')
            .split([' ', ','])
            .filter(|i| !i.is_empty())
            .map(|i| match i.parse::<i64>() {
                Ok(n) => n.into(),
                Err(_) => i.trim_matches('"').to_string().into(),
            })
            .collect();
        Ok(serde_json::Value::Array(items).to_string())
    })?;
    // json_build_object(k, v, …) (SQLAlchemy's column query builds
    // identity options with it), as JSON text.
    db.create_scalar_function("json_build_object", -1, flags, |ctx| {
        use rusqlite::types::ValueRef;
        if ctx.len() % 2 != 0 {
            return Err(rusqlite::Error::UserFunctionError(
                "json_build_object takes keys and values in pairs".into(),
            ));
        }
        let mut object = serde_json::Map::new();
        for i in (0..ctx.len()).step_by(2) {
            let key = match ctx.get_raw(i) {
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                ValueRef::Integer(n) => n.to_string(),
                ValueRef::Real(r) => r.to_string(),
                _ => String::new(),
            };
            let value = match ctx.get_raw(i + 1) {
                ValueRef::Null => serde_json::Value::Null,
                ValueRef::Integer(n) => n.into(),
                ValueRef::Real(r) => r.into(),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
                ValueRef::Blob(_) => serde_json::Value::Null,
            };
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object).to_string())
    })?;
    db.create_scalar_function("regexp", 2, flags, |ctx| {
        let pattern: String = ctx.get(0)?;
        let Some(value) = ctx.get::<Option<String>>(1)? else {
            return Ok(false);
        };
        let re = regex::RegexBuilder::new(&pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))?;
        Ok(re.is_match(&value))
    })?;
    let type_names: std::collections::HashMap<i64, &str> = [
        (16, "boolean"),
        (17, "bytea"),
        (19, "name"),
        (20, "bigint"),
        (23, "integer"),
        (25, "text"),
        (26, "oid"),
        (701, "double precision"),
        (1043, "character varying"),
        (1184, "timestamp with time zone"),
    ]
    .into_iter()
    .collect();
    let oids: std::collections::HashMap<&str, i64> = type_names
        .iter()
        .map(|(oid, name)| (*name, *oid))
        .chain([
            ("bool", 16),
            ("int8", 20),
            ("int", 23),
            ("int4", 23),
            ("float8", 701),
            ("varchar", 1043),
            ("timestamptz", 1184),
        ])
        .collect();
    db.create_scalar_function("format_type", 2, flags, move |ctx| {
        let oid = oid_arg(ctx, 0);
        Ok(oid.and_then(|o| type_names.get(&o).map(|n| n.to_string())))
    })?;
    // psycopg's TypeInfo.fetch (SQLAlchemy asks it for hstore): the oid of
    // a type the catalog has, NULL for any other, as PostgreSQL answers a
    // type that does not exist.
    db.create_scalar_function("to_regtype", 1, flags, move |ctx| {
        let name: Option<String> = ctx.get(0)?;
        Ok(name.and_then(|n| {
            let n = n
                .trim()
                .trim_start_matches("pg_catalog.")
                .to_ascii_lowercase();
            oids.get(n.as_str()).copied()
        }))
    })?;
    let constant = |name: &str, arity: i32, value: &'static str| {
        db.create_scalar_function(name, arity, flags, move |_| Ok(value.to_string()))
    };
    constant("pg_get_userbyid", 1, "tabos")?;
    constant("pg_encoding_to_char", 1, "UTF8")?;
    let truth =
        |name: &str, arity: i32| db.create_scalar_function(name, arity, flags, |_| Ok(true));
    truth("pg_table_is_visible", 1)?;
    truth("pg_type_is_visible", 1)?;
    truth("has_table_privilege", 2)?;
    truth("has_table_privilege", 3)?;
    truth("has_schema_privilege", 2)?;
    truth("pg_relation_is_publishable", 1)?;
    truth("pg_collation_is_visible", 1)?;
    db.create_scalar_function("pg_is_in_recovery", 0, flags, |_| Ok(false))?;
    // A schema search path as an array (pg_dump's): the one schema.
    db.create_scalar_function("current_schemas", 1, flags, |_| Ok("{public}".to_string()))?;
    db.create_scalar_function("quote_literal", 1, flags, |ctx| {
        Ok(ctx
            .get::<Option<String>>(0)?
            .map(|v| format!("'{}'", v.replace('\'', "''"))))
    })?;
    // `array_remove(a, x)`: `a` without `x` (a JSON array here; NULL
    // stays NULL, as an absent array of options does).
    db.create_scalar_function("array_remove", 2, flags, |ctx| {
        let Some(text) = ctx.get::<Option<String>>(0)? else {
            return Ok(None);
        };
        let gone: Option<String> = ctx.get(1)?;
        Ok(Some(
            match serde_json::from_str::<Vec<serde_json::Value>>(&text) {
                Ok(items) => serde_json::Value::Array(
                    items
                        .into_iter()
                        .filter(|v| v.as_str() != gone.as_deref())
                        .collect(),
                )
                .to_string(),
                Err(_) => text,
            },
        ))
    })?;
    let nothing = |name: &str, arity: i32| {
        db.create_scalar_function(name, arity, flags, |_| Ok(None::<String>))
    };
    for (name, arity) in [
        // Default privileges: none beyond the owner's, which NULL says.
        ("acldefault", 2),
        ("pg_get_expr", 2),
        ("pg_get_expr", 3),
        ("pg_get_serial_sequence", 2),
        ("pg_get_triggerdef", 2),
        ("pg_get_partkeydef", 1),
        ("pg_get_statisticsobjdef_columns", 1),
        ("obj_description", 1),
        ("obj_description", 2),
        ("col_description", 2),
        ("shobj_description", 2),
    ] {
        nothing(name, arity)?;
    }
    db.create_scalar_function("quote_ident", 1, flags, |ctx| ctx.get::<Option<String>>(0))?;
    // An array (a JSON one here) joined by the separator; NULLs left out.
    db.create_scalar_function("array_to_string", 2, flags, |ctx| {
        let Some(text) = ctx.get::<Option<String>>(0)? else {
            return Ok(None);
        };
        let separator = ctx.get::<Option<String>>(1)?.unwrap_or_default();
        Ok(Some(
            match serde_json::from_str::<Vec<serde_json::Value>>(&text) {
                Ok(items) => items
                    .into_iter()
                    .filter_map(|v| match v {
                        serde_json::Value::Null => None,
                        serde_json::Value::String(s) => Some(s),
                        other => Some(other.to_string()),
                    })
                    .collect::<Vec<_>>()
                    .join(&separator),
                Err(_) => text,
            },
        ))
    })?;
    db.create_scalar_function("pg_relation_size", 1, flags, |_| Ok(0i64))?;
    db.create_scalar_function("pg_total_relation_size", 1, flags, |_| Ok(0i64))?;
    db.create_scalar_function("pg_size_pretty", 1, flags, |ctx| {
        Ok(format!("{} bytes", ctx.get::<Option<i64>>(0)?.unwrap_or(0)))
    })?;
    // version(), current_schema(), current_setting, set_config … as on
    // the store's own connections.
    tabos_store::dialect::install(db)?;
    Ok(())
}

/// The catalog database of `relations`.
fn database(relations: &[Relation]) -> rusqlite::Result<rusqlite::Connection> {
    let db = rusqlite::Connection::open_in_memory()?;
    db.execute_batch(SCHEMA)?;
    functions(&db, relations)?;
    let tx = db.unchecked_transaction()?;
    for (oid, name, len, category) in TYPES {
        tx.execute(
            "INSERT INTO pg_type (oid, typname, typnamespace, typlen, typtype, typcategory, \
             typcollation, typelem, typarray, typbasetype, typnotnull, typtypmod, typrelid, \
             typowner, typisdefined, typstorage) \
             VALUES (?1, ?2, 11, ?3, 'b', ?4, 0, 0, 0, 0, 0, -1, 0, 10, 1, ?5)",
            rusqlite::params![oid, name, len, category, storage(*len)],
        )?;
    }
    for (i, r) in relations.iter().enumerate() {
        let oid = relation_oid(i);
        let kind = if r.view { "v" } else { "r" };
        tx.execute(
            "INSERT INTO pg_class (oid, relname, relnamespace, relkind, relowner, relam, \
             relchecks, relhasindex, relhasrules, relhastriggers, relrowsecurity, \
             relforcerowsecurity, relispartition, reltablespace, reloftype, relpersistence, \
             relreplident, reltoastrelid, reltuples, relpages, relnatts, reltype, relisshared, \
             relhassubclass, relfilenode) \
             VALUES (?1, ?2, ?3, ?4, 10, ?5, 0, ?7, 0, 0, 0, 0, 0, 0, 0, 'p', 'd', 0, -1, 0, ?6, \
             0, 0, 0, ?1)",
            rusqlite::params![
                oid,
                r.name,
                PUBLIC,
                kind,
                if r.view { 0 } else { 2 },
                r.columns.len() as i64,
                !r.primary_key.is_empty()
            ],
        )?;
        if r.view {
            tx.execute(
                "INSERT INTO pg_views VALUES ('public', ?1, 'tabos', NULL)",
                [&r.name],
            )?;
        } else {
            tx.execute(
                "INSERT INTO pg_tables VALUES ('public', ?1, 'tabos', NULL, ?2, 0, 0, 0)",
                rusqlite::params![r.name, !r.primary_key.is_empty()],
            )?;
        }
        tx.execute(
            "INSERT INTO information_schema_tables VALUES ('tabos', 'public', ?1, ?2, 'NO', 'NO')",
            rusqlite::params![r.name, if r.view { "VIEW" } else { "BASE TABLE" }],
        )?;
        for (n, c) in r.columns.iter().enumerate() {
            let typname = TYPES
                .iter()
                .find(|t| t.0 == c.type_oid)
                .map_or("text", |t| t.1);
            let data_type = match c.type_oid {
                20 => "bigint",
                701 => "double precision",
                17 => "bytea",
                1184 => "timestamp with time zone",
                _ => "text",
            };
            tx.execute(
                "INSERT INTO pg_attribute (attrelid, attname, atttypid, atttypmod, attnum, \
                 attnotnull, attisdropped, atthasdef, attidentity, attgenerated, attcollation, \
                 attstorage, attcompression, attstattarget, attlen, attndims, atthasmissing, \
                 attislocal, attinhcount) \
                 VALUES (?1, ?2, ?3, -1, ?4, ?5, 0, 0, '', '', 0, ?6, '', -1, ?7, 0, 0, 1, 0)",
                rusqlite::params![
                    oid,
                    c.name,
                    c.type_oid,
                    n as i64 + 1,
                    c.not_null,
                    storage(type_len(c.type_oid)),
                    type_len(c.type_oid)
                ],
            )?;
            tx.execute(
                "INSERT INTO information_schema_columns VALUES ('tabos', 'public', ?1, ?2, ?3, \
                 NULL, ?6, ?4, ?5, NULL, NULL, NULL, 'NO', 'NEVER', 'NO')",
                rusqlite::params![
                    r.name,
                    c.name,
                    n as i64 + 1,
                    data_type,
                    typname,
                    if c.not_null { "NO" } else { "YES" }
                ],
            )?;
        }
        // The primary key: its index (a relation of its own) and its
        // constraint, over the key's column numbers.
        let attnums: Vec<i64> = r
            .primary_key
            .iter()
            .filter_map(|k| r.columns.iter().position(|c| c.name == *k))
            .map(|n| n as i64 + 1)
            .collect();
        if attnums.is_empty() {
            continue;
        }
        let index = format!("{}_pkey", r.name);
        tx.execute(
            "INSERT INTO pg_class (oid, relname, relnamespace, relkind, relowner, relam, \
             relchecks, relhasindex, relhasrules, relhastriggers, relrowsecurity, \
             relforcerowsecurity, relispartition, reltablespace, reloftype, relpersistence, \
             relreplident, reltoastrelid, reltuples, relpages, relnatts, reltype, relisshared, \
             relhassubclass, relfilenode) \
             VALUES (?1, ?2, ?3, 'i', 10, 403, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'p', 'n', 0, -1, 0, ?4, \
             0, 0, 0, ?1)",
            rusqlite::params![key_index_oid(i), index, PUBLIC, attnums.len() as i64],
        )?;
        let indkey = attnums
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        tx.execute(
            "INSERT INTO pg_index (indexrelid, indrelid, indisprimary, indisunique, \
             indisclustered, indisvalid, indisreplident, indkey, indnatts, indnkeyatts, \
             indnullsnotdistinct, indisexclusion, indimmediate, indexprs, indpred, indoption, \
             indcollation, indclass) \
             VALUES (?1, ?2, 1, 1, 0, 1, 0, ?3, ?4, ?4, 0, 0, 1, NULL, NULL, ?5, ?5, ?5)",
            rusqlite::params![
                key_index_oid(i),
                oid,
                indkey,
                attnums.len() as i64,
                vec!["0"; attnums.len()].join(" ")
            ],
        )?;
        let conkey = format!(
            "{{{}}}",
            attnums
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        tx.execute(
            "INSERT INTO pg_constraint (oid, conname, connamespace, contype, condeferrable, \
             condeferred, convalidated, conrelid, contypid, conindid, confrelid, conkey, confkey, \
             conparentid, conislocal) VALUES (?1, ?2, ?3, 'p', 0, 0, 1, ?4, 0, ?5, 0, ?6, NULL, 0, 1)",
            rusqlite::params![key_constraint_oid(i), index, PUBLIC, oid, key_index_oid(i), conkey],
        )?;
    }
    tx.commit()?;
    Ok(db)
}

/// Answers the catalog statement `sql` for `scope` (and, for an
/// `operator` signed in to a realm, the cluster's relations too).
pub(super) fn answer(
    node: &Node,
    scope: &ReadScope,
    operator: bool,
    sql: &str,
    params: &[Value],
) -> PgWireResult<super::Typed> {
    let relations = relations(node, scope, operator).map_err(|e| super::store_error(&e))?;
    let db = database(&relations)
        .map_err(|e| refused(sqlstate::INTERNAL_ERROR, format!("catalog: {e}")))?;
    confine(&db, node.settings.query_time_max);
    // PostgreSQL's own constructs SQLite lacks (`= ANY(ARRAY[…])`, casts,
    // intervals, `unnest` in a select list) through the dialect's catalog
    // reading; what it cannot read is left to the catalog's own rewriting.
    // What tools send whole (Grafana's search_path subquery), and
    // psql's and pg_dump's spelled-out operators, first: the SQL parser
    // reads what is left.
    let tools = rewrite_tools(sql);
    let sql = &plain_operators(&tools);
    let plain = match tabos_store::dialect::translate_catalog(sql) {
        Ok(t) => t.to_string(),
        Err(_) => sql.to_string(),
    };
    let translated = translate(&plain);
    let mut stmt = match db.prepare(&translated) {
        Ok(s) => s,
        Err(e)
            if e.sqlite_error_code()
                == Some(rusqlite::ErrorCode::AuthorizationForStatementDenied) =>
        {
            return Err(refused(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                "a catalog statement only reads the catalog",
            ))
        }
        Err(e) => {
            // Past SQLite's grammar (arrays and the like), but over a
            // relation tabos keeps empty: no rows, as in PostgreSQL.
            let lower = translated.to_ascii_lowercase();
            if EMPTY.iter().any(|t| names(&lower, t)) {
                // With its columns, named as PostgreSQL names them: a
                // client reads a result's shape before its rows.
                let named = tabos_store::dialect::output_names(sql).unwrap_or_default();
                let named: Vec<&str> = named.iter().map(String::as_str).collect();
                return Ok(rows(&named, Vec::new()).into());
            }
            return Err(refused(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("this catalog query is beyond what tabos answers: {e}"),
            ));
        }
    };
    if !stmt.readonly() {
        return Err(refused(
            sqlstate::READ_ONLY_TRANSACTION,
            "a catalog statement only reads the catalog",
        ));
    }
    let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    // Booleans: a catalog column declared BOOLEAN, or an item boolean by
    // its form; arrays: an item that builds one.
    let by_form = tabos_store::dialect::bool_columns(sql);
    let bools: std::sync::Arc<[bool]> = stmt
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            c.decl_type()
                .is_some_and(|t| t.eq_ignore_ascii_case("boolean"))
                || by_form.get(i) == Some(&true)
        })
        .collect();
    let arrays = tabos_store::dialect::array_columns(sql);
    let bound: Vec<rusqlite::types::Value> = params
        .iter()
        .map(|v| match v {
            Value::Null => rusqlite::types::Value::Null,
            Value::Int(i) => rusqlite::types::Value::Integer(*i),
            Value::Real(r) => rusqlite::types::Value::Real(*r),
            Value::Text(t) => rusqlite::types::Value::Text(t.clone()),
            Value::Blob(b) => rusqlite::types::Value::Blob(b.clone()),
        })
        .collect();
    let sqlite_error = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::OperationInterrupted) => refused(
            sqlstate::QUERY_CANCELED,
            format!(
                "the catalog statement ran past its {:?}",
                node.settings.query_time_max
            ),
        ),
        _ => refused(sqlstate::SYNTAX_OR_ACCESS, e.to_string()),
    };
    // By number, not position: `$n` is what the client bound n-th,
    // wherever (and whether) translation left it in the statement.
    for i in 1..=stmt.parameter_count() {
        let n = stmt
            .parameter_name(i)
            .and_then(|name| name.trim_start_matches(['$', '?']).parse::<usize>().ok())
            .unwrap_or(i);
        let value = bound.get(n.wrapping_sub(1)).ok_or_else(|| {
            refused(
                sqlstate::PROTOCOL_VIOLATION,
                format!("${n} has no value: {} were bound", bound.len()),
            )
        })?;
        stmt.raw_bind_parameter(i, value).map_err(sqlite_error)?;
    }
    let mut q = stmt.raw_query();
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut truncated = false;
    while let Some(r) = q.next().map_err(sqlite_error)? {
        if out.len() >= ROWS_MAX || bytes >= crate::sql::RESULT_BYTES_MAX {
            truncated = true;
            break;
        }
        let mut values = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            values.push(match r.get_ref(i).map_err(sqlite_error)? {
                rusqlite::types::ValueRef::Null => Value::Null,
                rusqlite::types::ValueRef::Integer(i) => Value::Int(i),
                rusqlite::types::ValueRef::Real(f) => Value::Real(f),
                rusqlite::types::ValueRef::Text(t) => {
                    Value::Text(String::from_utf8_lossy(t).into_owned())
                }
                rusqlite::types::ValueRef::Blob(b) => Value::Blob(b.to_vec()),
            });
        }
        bytes += values
            .iter()
            .map(|v| match v {
                Value::Text(t) => t.len(),
                Value::Blob(b) => b.len(),
                _ => 8,
            })
            .sum::<usize>();
        out.push(values);
    }
    // Named as PostgreSQL names them (SQLite names an expression by its
    // text).
    let columns = match tabos_store::dialect::output_names(sql) {
        Some(named) if named.len() == columns.len() => named,
        _ => columns,
    };
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut result = rows(&names, out);
    result.truncated = truncated;
    Ok(super::Typed {
        rows: result,
        bools,
        arrays,
        types: None,
    })
}

/// Confines the catalog database to what a tenant's statement may do
/// there: read its tables and call functions (no ATTACH of the node's
/// files, no VACUUM INTO, no PRAGMA, nothing that writes), build no value
/// over [`VALUE_BYTES_MAX`], and stop at the node's query deadline.
fn confine(db: &rusqlite::Connection, time_max: Duration) {
    use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
    use rusqlite::limits::Limit;
    db.authorizer(Some(|ctx: AuthContext<'_>| match ctx.action {
        AuthAction::Select
        | AuthAction::Read { .. }
        | AuthAction::Function { .. }
        | AuthAction::Recursive => Authorization::Allow,
        _ => Authorization::Deny,
    }));
    let _ = db.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0);
    let _ = db.set_limit(Limit::SQLITE_LIMIT_LENGTH, VALUE_BYTES_MAX);
    let started = std::time::Instant::now();
    db.progress_handler(PROGRESS_STEPS, Some(move || started.elapsed() >= time_max));
}

/// Whether the lower-cased `sql` names relation `table` (as a whole word).
fn names(sql: &str, table: &str) -> bool {
    sql.match_indices(table).any(|(i, _)| {
        let before = sql[..i].chars().next_back();
        let after = sql[i + table.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

/// `OPERATOR(pg_catalog.=)` and the other comparisons psql and pg_dump
/// spell so, as the plain operator (which the SQL parser reads, before
/// `ANY` too).
fn plain_operators(sql: &str) -> std::borrow::Cow<'_, str> {
    use std::sync::OnceLock;
    static OPERATOR: OnceLock<regex::Regex> = OnceLock::new();
    OPERATOR
        .get_or_init(|| {
            regex::Regex::new(r"OPERATOR\(pg_catalog\.(=|<>|!=|<=|>=|<|>|!~|~)\)")
                .expect("a valid pattern")
        })
        .replace_all(sql, " $1 ")
}

/// Rewrites what SQL tools send that SQLite has no grammar for, whole:
/// the `search_path` subquery of Grafana's table and column pickers
/// (`trim(s[i])` over `generate_series` of an array) becomes the one
/// schema, `('public')`; `parse_ident('a.b')`'s length and parts become
/// literals.
fn rewrite_tools(sql: &str) -> String {
    use std::sync::OnceLock;
    static SEARCH_PATH: OnceLock<regex::Regex> = OnceLock::new();
    static IDENT_LEN: OnceLock<regex::Regex> = OnceLock::new();
    static IDENT_PART: OnceLock<regex::Regex> = OnceLock::new();
    let search_path = SEARCH_PATH.get_or_init(|| {
        regex::Regex::new(
            r"(?is)\(\s*SELECT\s+CASE\s+WHEN\s+trim\(s\[i\]\).*?string_to_array\(current_setting\('search_path'\)\s*,\s*','\)\s+s\s*\)",
        )
        .expect("a valid pattern")
    });
    let ident_len = IDENT_LEN.get_or_init(|| {
        regex::Regex::new(r"(?i)array_length\(\s*parse_ident\('([^']*)'\)\s*,\s*1\s*\)")
            .expect("a valid pattern")
    });
    let ident_part = IDENT_PART.get_or_init(|| {
        regex::Regex::new(r"(?i)\(\s*parse_ident\('([^']*)'\)\s*\)\[(\d+)\]")
            .expect("a valid pattern")
    });
    let sql = search_path.replace_all(sql, "('public')");
    let sql = ident_len.replace_all(&sql, |c: &regex::Captures<'_>| {
        c[1].split('.').count().to_string()
    });
    let sql = ident_part.replace_all(&sql, |c: &regex::Captures<'_>| {
        let n: usize = c[2].parse().unwrap_or(0);
        let part = c[1].split('.').nth(n.wrapping_sub(1)).unwrap_or("");
        format!("'{}'", part.replace('\'', "''"))
    });
    sql.into_owned()
}

/// Rewrites a PostgreSQL catalog statement into SQLite, outside string
/// literals and quoted identifiers (after [`rewrite_tools`]).
pub fn translate(sql: &str) -> String {
    let tools = rewrite_tools(sql);
    let sql = tools.as_str();
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let starts = |i: usize, word: &str| {
        b.len() >= i + word.len() && b[i..i + word.len()].eq_ignore_ascii_case(word.as_bytes())
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let c = b[i];
        let prev_ident = i > 0 && ident(b[i - 1]);
        // A string literal, as is ('' inside); E'…' loses its E.
        if c == b'\'' || ((c == b'E' || c == b'e') && !prev_ident && b.get(i + 1) == Some(&b'\'')) {
            let start = if c == b'\'' { i } else { i + 1 };
            let mut j = start + 1;
            while j < b.len() {
                if b[j] == b'\'' {
                    if b.get(j + 1) == Some(&b'\'') {
                        j += 2;
                        continue;
                    }
                    break;
                }
                if c != b'\'' && b[j] == b'\\' {
                    j += 1; // E'…': a backslash escapes the next byte
                }
                j += 1;
            }
            let end = (j + 1).min(b.len());
            out.push_str(&sql[start..end]);
            i = end;
            continue;
        }
        // A quoted identifier, as is.
        if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += 1;
            }
            let end = (j + 1).min(b.len());
            out.push_str(&sql[i..end]);
            i = end;
            continue;
        }
        if !prev_ident && starts(i, "pg_catalog.") {
            i += "pg_catalog.".len();
            continue;
        }
        if !prev_ident && starts(i, "information_schema.") {
            out.push_str("information_schema_");
            i += "information_schema.".len();
            continue;
        }
        if starts(i, "OPERATOR(pg_catalog.~)") {
            out.push_str(" REGEXP ");
            i += "OPERATOR(pg_catalog.~)".len();
            continue;
        }
        if starts(i, "OPERATOR(pg_catalog.!~)") {
            out.push_str(" NOT REGEXP ");
            i += "OPERATOR(pg_catalog.!~)".len();
            continue;
        }
        if starts(i, "!~") {
            out.push_str(" NOT REGEXP ");
            i += 2;
            continue;
        }
        if c == b'~' {
            out.push_str(" REGEXP ");
            i += 1;
            continue;
        }
        // A cast: `::name`, `::schema.name`, `::name[]`, `::name(n)`.
        if starts(i, "::") {
            let mut j = i + 2;
            loop {
                while j < b.len() && (ident(b[j]) || b[j] == b'.') {
                    j += 1;
                }
                if starts(j, "[]") {
                    j += 2;
                }
                if b.get(j) == Some(&b'(') {
                    while j < b.len() && b[j] != b')' {
                        j += 1;
                    }
                    j += 1;
                }
                // A chain of casts.
                if starts(j, "::") {
                    j += 2;
                    continue;
                }
                break;
            }
            i = j.min(b.len());
            continue;
        }
        if !prev_ident && starts(i, "COLLATE") && !ident(*b.get(i + 7).unwrap_or(&b' ')) {
            // COLLATE and its collation name: SQLite's collations differ.
            let mut j = i + 7;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            if b.get(j) == Some(&b'"') {
                j += 1;
                while j < b.len() && b[j] != b'"' {
                    j += 1;
                }
                j += 1;
            } else {
                while j < b.len() && (ident(b[j]) || b[j] == b'.') {
                    j += 1;
                }
            }
            i = j.min(b.len());
            continue;
        }
        // Multi-byte characters pass whole.
        let len = sql[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&sql[i..i + len]);
        i += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psql_constructs_become_sqlite() {
        let t = translate(
            "SELECT c.oid::pg_catalog.regclass, n.nspname FROM pg_catalog.pg_class c \
             WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default \
             AND n.nspname !~ '^pg_toast' AND x = E'a\\'b' AND y::int[] = 1",
        );
        assert_eq!(
            t,
            "SELECT c.oid, n.nspname FROM pg_class c WHERE c.relname  REGEXP  '^(t)$'  AND \
             n.nspname  NOT REGEXP  '^pg_toast' AND x = 'a\\'b' AND y = 1"
        );
        assert_eq!(
            translate("SELECT 'pg_catalog.x::y ~' FROM information_schema.tables"),
            "SELECT 'pg_catalog.x::y ~' FROM information_schema_tables"
        );
        assert_eq!(
            translate("SELECT \"a::b\" FROM t"),
            "SELECT \"a::b\" FROM t"
        );
        assert!(names("select * from pg_index i", "pg_index"));
        // A tenant's catalog statement reads, within bounds, and nothing
        // more: no files attached, nothing written, no endless query.
        let db = database(&[]).unwrap();
        confine(&db, Duration::from_millis(200));
        for bad in [
            "ATTACH '/tmp/x.db' AS x",
            "VACUUM INTO '/tmp/x.db'",
            "PRAGMA writable_schema = 1",
            "DELETE FROM pg_class",
        ] {
            assert!(db.execute_batch(bad).is_err(), "{bad} refused");
        }
        let endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                       SELECT count(*) FROM n";
        let e = db
            .query_row(endless, [], |r| r.get::<_, i64>(0))
            .unwrap_err();
        assert_eq!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::OperationInterrupted)
        );
        assert!(db
            .query_row("SELECT length(zeroblob(2000000))", [], |r| r
                .get::<_, i64>(0))
            .is_err());
        let shape = tabos_store::dialect::sqlite_table_shape(
            "CREATE TABLE t (\n  a INTEGER NOT NULL, -- a, b: why\n  b TEXT CHECK (b IN ('x', 'y')),\n  \
             c REAL, d, PRIMARY KEY (a, b)\n)",
        )
        .unwrap();
        assert_eq!(
            shape.columns,
            [
                ("a".to_string(), "INTEGER".to_string(), true),
                ("b".to_string(), "TEXT".to_string(), true),
                ("c".to_string(), "REAL".to_string(), false),
                ("d".to_string(), String::new(), false),
            ]
        );
        assert_eq!(shape.primary_key, ["a", "b"]);
        let one = tabos_store::dialect::sqlite_table_shape(
            "CREATE TABLE u (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT)",
        )
        .unwrap();
        assert_eq!(one.primary_key, ["id"]);
        assert!(one.columns[0].2, "a key's column is NOT NULL");
        assert!(!names("select * from pg_indexes", "pg_index"));
    }

    fn column(name: &str, type_oid: i64, not_null: bool) -> Column {
        Column {
            name: name.into(),
            type_oid,
            not_null,
        }
    }

    #[test]
    fn the_catalog_answers_psql() {
        let relations = vec![
            Relation {
                name: "proc".into(),
                view: false,
                columns: vec![column("pid", 25, true), column("cores", 20, false)],
                primary_key: vec!["pid".into()],
                definition: None,
            },
            Relation {
                name: "ps".into(),
                view: true,
                columns: vec![column("pid", 25, false)],
                primary_key: vec![],
                definition: Some("SELECT pid FROM proc".into()),
            },
        ];
        let db = database(&relations).unwrap();
        // psql 15's \dt, translated.
        let dt = translate(
            "SELECT n.nspname as \"Schema\", c.relname as \"Name\", \
             CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' END as \"Type\", \
             pg_catalog.pg_get_userbyid(c.relowner) as \"Owner\" \
             FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam \
             WHERE c.relkind IN ('r','p','') AND n.nspname <> 'pg_catalog' \
             AND n.nspname !~ '^pg_toast' AND n.nspname <> 'information_schema' \
             AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 1,2;",
        );
        let names: Vec<String> = db
            .prepare(&dt)
            .unwrap()
            .query_map([], |r| r.get::<_, String>(1))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(names, ["proc"]);
        let cols = translate(
            "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) \
             FROM pg_catalog.pg_attribute a WHERE a.attrelid = '16384' AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum;",
        );
        let got: Vec<(String, String)> = db
            .prepare(&cols)
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            got,
            [
                ("pid".to_string(), "text".to_string()),
                ("cores".to_string(), "bigint".to_string())
            ]
        );
        // Grafana's table and column pickers, as it sends them.
        let tables: Vec<String> = db
            .prepare(&translate(GRAFANA_TABLES))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(tables, ["proc", "ps"]);
        let columns: Vec<(String, String)> = db
            .prepare(&translate(&GRAFANA_COLUMNS.replace("TABLE", "public.proc")))
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            columns,
            [
                ("pid".to_string(), "text".to_string()),
                ("cores".to_string(), "bigint".to_string())
            ]
        );
        let bare: Vec<String> = db
            .prepare(&translate(&GRAFANA_COLUMNS.replace("TABLE", "ps")))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(bare, ["pid"]);
    }

    /// Grafana's PostgreSQL data source: the table picker's query.
    const GRAFANA_TABLES: &str = r#"SELECT
        CASE WHEN
              quote_ident(table_schema) IN (
              SELECT
                CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
              FROM
                generate_series(
                  array_lower(string_to_array(current_setting('search_path'),','),1),
                  array_upper(string_to_array(current_setting('search_path'),','),1)
                ) as i,
                string_to_array(current_setting('search_path'),',') s
              )
          THEN quote_ident(table_name)
          ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
        END AS "table"
        FROM information_schema.tables
        WHERE quote_ident(table_schema) NOT IN ('information_schema',
                                 'pg_catalog',
                                 '_timescaledb_cache')
        ORDER BY CASE WHEN
              quote_ident(table_schema) IN (
              SELECT
                CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
              FROM
                generate_series(
                  array_lower(string_to_array(current_setting('search_path'),','),1),
                  array_upper(string_to_array(current_setting('search_path'),','),1)
                ) as i,
                string_to_array(current_setting('search_path'),',') s
              ) THEN 0 ELSE 1 END, 1"#;

    /// Grafana's column picker, for table `TABLE`.
    const GRAFANA_COLUMNS: &str = r#"SELECT quote_ident(column_name) AS "column", data_type AS "type"
        FROM information_schema.columns
        WHERE
          CASE WHEN array_length(parse_ident('TABLE'),1) = 2
            THEN quote_ident(table_schema) = (parse_ident('TABLE'))[1]
              AND quote_ident(table_name) = (parse_ident('TABLE'))[2]
            ELSE quote_ident(table_name) = 'TABLE'
              AND
              quote_ident(table_schema) IN (
              SELECT
                CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
              FROM
                generate_series(
                  array_lower(string_to_array(current_setting('search_path'),','),1),
                  array_upper(string_to_array(current_setting('search_path'),','),1)
                ) as i,
                string_to_array(current_setting('search_path'),',') s
              )
          END"#;
}
