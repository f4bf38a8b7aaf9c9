//! Enough of PostgreSQL's `pg_catalog` and `information_schema` for psql's
//! `\d`, `\dt`, `\dv`, `\dn` and `\l`, and for the table pickers of SQL
//! tools (Grafana's), answered from what the session may read.
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
//! LIMIT 1` in that scope, their types from the backend's own catalog
//! (the declared types of SQLite's `CREATE TABLE`, PostgreSQL's
//! `information_schema.columns`; for a SQLite view, its first row's
//! values) mapped to what the front door sends: int8, float8, bytea or
//! text.
//!
//! The statement is translated to SQLite first ([`translate`]): schema
//! prefixes dropped (`information_schema.x` becomes `information_schema_x`),
//! casts (`::regclass`) and `COLLATE pg_catalog.default` removed, `~`,
//! `!~` and `OPERATOR(pg_catalog.~)` made `REGEXP`, `E'…'` made plain,
//! Grafana's `search_path` subquery and `parse_ident` made literals, and
//! PostgreSQL's functions that catalog queries call given SQLite
//! definitions ([`functions`]). A catalog statement SQLite still cannot
//! run (arrays, `generate_series` over them) that reads one of the
//! relations tabos keeps empty has no rows, which is its answer in
//! PostgreSQL too; any other is refused with its SQLite error.

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
    "pg_index",
    "pg_constraint",
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
];

/// The catalog's tables, as SQLite DDL.
const SCHEMA: &str = "
CREATE TABLE pg_namespace (oid INTEGER PRIMARY KEY, nspname TEXT, nspowner INTEGER, nspacl TEXT);
CREATE TABLE pg_class (oid INTEGER PRIMARY KEY, relname TEXT, relnamespace INTEGER, relkind TEXT,
    relowner INTEGER, relam INTEGER, relchecks INTEGER, relhasindex BOOLEAN, relhasrules BOOLEAN,
    relhastriggers BOOLEAN, relrowsecurity BOOLEAN, relforcerowsecurity BOOLEAN,
    relispartition BOOLEAN, reltablespace INTEGER, reloftype INTEGER, relpersistence TEXT,
    relreplident TEXT, reltoastrelid INTEGER, relpartbound TEXT, reloptions TEXT, relacl TEXT,
    reltuples REAL, relpages INTEGER, relnatts INTEGER, reltype INTEGER, relisshared BOOLEAN,
    relhassubclass BOOLEAN, relfilenode INTEGER);
CREATE TABLE pg_attribute (attrelid INTEGER, attname TEXT, atttypid INTEGER, atttypmod INTEGER,
    attnum INTEGER, attnotnull BOOLEAN, attisdropped BOOLEAN, atthasdef BOOLEAN, attidentity TEXT,
    attgenerated TEXT, attcollation INTEGER, attstorage TEXT, attcompression TEXT,
    attstattarget INTEGER, attlen INTEGER, attndims INTEGER, atthasmissing BOOLEAN,
    attislocal BOOLEAN, attinhcount INTEGER, attacl TEXT, attoptions TEXT);
CREATE TABLE pg_type (oid INTEGER PRIMARY KEY, typname TEXT, typnamespace INTEGER, typlen INTEGER,
    typtype TEXT, typcategory TEXT, typcollation INTEGER, typelem INTEGER, typarray INTEGER,
    typbasetype INTEGER, typnotnull BOOLEAN, typtypmod INTEGER, typrelid INTEGER, typowner INTEGER,
    typinput TEXT, typoutput TEXT, typdelim TEXT, typisdefined BOOLEAN);
CREATE TABLE pg_am (oid INTEGER PRIMARY KEY, amname TEXT, amtype TEXT);
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
    indkey TEXT, indnatts INTEGER, indisexclusion BOOLEAN, indimmediate BOOLEAN, indexprs TEXT,
    indpred TEXT);
CREATE TABLE pg_constraint (oid INTEGER, conname TEXT, connamespace INTEGER, contype TEXT,
    condeferrable BOOLEAN, condeferred BOOLEAN, convalidated BOOLEAN, conrelid INTEGER,
    contypid INTEGER, conindid INTEGER, confrelid INTEGER, conkey TEXT, confkey TEXT,
    conparentid INTEGER, conislocal BOOLEAN);
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
CREATE TABLE pg_sequence (seqrelid INTEGER, seqtypid INTEGER);
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
INSERT INTO pg_namespace VALUES (11, 'pg_catalog', 10, NULL), (2200, 'public', 10, NULL),
    (13000, 'information_schema', 10, NULL);
INSERT INTO pg_am VALUES (2, 'heap', 't');
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
];

/// Whether `sql` reads the catalog (names either schema or a `pg_`
/// catalog relation).
pub fn mentions_catalog(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    lower.contains("pg_catalog")
        || lower.contains("information_schema")
        || lower.contains("pg_class")
        || lower.contains("pg_namespace")
        || lower.contains("pg_attribute")
        || lower.contains("pg_type")
        || lower.contains("pg_tables")
        || lower.contains("pg_views")
        || lower.contains("pg_database")
        || lower.contains("pg_settings")
        || lower.contains("pg_roles")
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
    /// Its columns and their type oids.
    columns: Vec<(String, i64)>,
}

/// The type oid the front door sends a column of declared type `decl`
/// as (the store hands every integer and boolean over as an integer).
fn type_of(decl: &str) -> i64 {
    let d = decl.to_ascii_lowercase();
    if d.contains("int") || d.contains("bool") || d.contains("serial") {
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

/// Relation `name`'s columns' declared types, by column.
fn declared(
    store: &tabos_store::Store,
    name: &str,
    all: &tabos_store::ReadLimits,
) -> tabos_store::Result<std::collections::HashMap<String, String>> {
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
            .map(|ddl| create_table_types(&ddl))
            .unwrap_or_default(),
        tabos_store::BackendKind::Postgres => store
            .query_bounded(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1",
                &[name],
                all,
            )?
            .rows
            .iter()
            .filter_map(|r| Some((r.get::<String>(0).ok()?, r.get::<String>(1).ok()?)))
            .collect(),
    })
}

/// The declared type of each column of a `CREATE TABLE name (…)`
/// statement (constraints skipped, comments ignored).
fn create_table_types(ddl: &str) -> std::collections::HashMap<String, String> {
    let text: String = ddl
        .lines()
        .map(|l| l.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(" ");
    let Some(open) = text.find('(') else {
        return Default::default();
    };
    let mut out = std::collections::HashMap::new();
    let (mut depth, mut start) = (0usize, open + 1);
    let mut items = Vec::new();
    for (i, c) in text.char_indices().skip(open) {
        match c {
            '(' => depth += 1,
            ')' if depth == 1 => {
                items.push(&text[start..i]);
                break;
            }
            ')' => depth -= 1,
            ',' if depth == 1 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    for item in items {
        let mut words = item.split_whitespace();
        let (Some(column), ty) = (words.next(), words.next()) else {
            continue;
        };
        let upper = column.to_ascii_uppercase();
        if ["PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT"].contains(&upper.as_str()) {
            continue;
        }
        out.insert(
            column.trim_matches('"').to_string(),
            ty.unwrap_or_default().to_string(),
        );
    }
    out
}

/// The relations of `scope`, with their columns.
fn relations(node: &Node, scope: &ReadScope) -> tabos_store::Result<Vec<Relation>> {
    let store = &node.store;
    let all = tabos_store::ReadLimits::rows(tabos_store::Cap::Truncate(RELATIONS_MAX));
    // Every table and view of the kernel schema, and whether a view.
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
    let shown: Option<Vec<String>> = match scope {
        ReadScope::All => None,
        ReadScope::Realm(_) => Some(
            store
                .query_bounded("SELECT name FROM tenant_view", &[], &all)?
                .rows
                .iter()
                .filter_map(|r| r.get::<String>(0).ok())
                .collect(),
        ),
    };
    let mut out = Vec::new();
    for r in listed.rows.iter().take(RELATIONS_MAX) {
        let name: String = r.get(0)?;
        let view: i64 = r.get(1)?;
        if shown.as_ref().is_some_and(|s| !s.contains(&name)) {
            continue;
        }
        // A name outside `[a-z_0-9]` is never one of the schema's.
        if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            continue;
        }
        let limits = tabos_store::ReadLimits {
            scope: scope.clone(),
            time_max: Some(node.settings.query_time_max),
            bytes_max: tabos_store::RESULT_BYTES_MAX,
            ..tabos_store::ReadLimits::rows(tabos_store::Cap::Truncate(1))
        };
        let one = store.query_bounded(&format!("SELECT * FROM {name} LIMIT 1"), &[], &limits)?;
        let types = declared(store, &name, &all)?;
        let first = one.rows.first();
        let columns = one
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let ty = match (types.get(c), first.and_then(|r| r.values().get(i))) {
                    (Some(decl), _) => type_of(decl),
                    (None, Some(Value::Int(_))) => 20,
                    (None, Some(Value::Real(_))) => 701,
                    (None, Some(Value::Blob(_))) => 17,
                    (None, _) => 25,
                };
                (c.clone(), ty)
            })
            .collect();
        out.push(Relation {
            name,
            view: view != 0,
            columns,
        });
    }
    Ok(out)
}

/// The SQLite function definitions of the PostgreSQL functions catalog
/// queries call.
fn functions(db: &rusqlite::Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
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
        ])
        .collect();
    db.create_scalar_function("format_type", 2, flags, move |ctx| {
        let oid: Option<i64> = ctx.get(0)?;
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
    let nothing = |name: &str, arity: i32| {
        db.create_scalar_function(name, arity, flags, |_| Ok(None::<String>))
    };
    for (name, arity) in [
        ("pg_get_expr", 2),
        ("pg_get_expr", 3),
        ("pg_get_indexdef", 3),
        ("pg_get_constraintdef", 2),
        ("pg_get_triggerdef", 2),
        ("pg_get_viewdef", 1),
        ("pg_get_viewdef", 2),
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
    db.create_scalar_function("array_to_string", 2, flags, |ctx| {
        ctx.get::<Option<String>>(0)
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
    functions(&db)?;
    let tx = db.unchecked_transaction()?;
    for (oid, name, len, category) in TYPES {
        tx.execute(
            "INSERT INTO pg_type (oid, typname, typnamespace, typlen, typtype, typcategory, \
             typcollation, typelem, typarray, typbasetype, typnotnull, typtypmod, typrelid, \
             typowner, typisdefined) VALUES (?1, ?2, 11, ?3, 'b', ?4, 0, 0, 0, 0, 0, -1, 0, 10, 1)",
            rusqlite::params![oid, name, len, category],
        )?;
    }
    for (i, r) in relations.iter().enumerate() {
        let oid = FIRST_OID + i as i64;
        let kind = if r.view { "v" } else { "r" };
        tx.execute(
            "INSERT INTO pg_class (oid, relname, relnamespace, relkind, relowner, relam, \
             relchecks, relhasindex, relhasrules, relhastriggers, relrowsecurity, \
             relforcerowsecurity, relispartition, reltablespace, reloftype, relpersistence, \
             relreplident, reltoastrelid, reltuples, relpages, relnatts, reltype, relisshared, \
             relhassubclass, relfilenode) \
             VALUES (?1, ?2, ?3, ?4, 10, ?5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'p', 'd', 0, -1, 0, ?6, 0, \
             0, 0, ?1)",
            rusqlite::params![
                oid,
                r.name,
                PUBLIC,
                kind,
                if r.view { 0 } else { 2 },
                r.columns.len() as i64
            ],
        )?;
        if r.view {
            tx.execute(
                "INSERT INTO pg_views VALUES ('public', ?1, 'tabos', NULL)",
                [&r.name],
            )?;
        } else {
            tx.execute(
                "INSERT INTO pg_tables VALUES ('public', ?1, 'tabos', NULL, 0, 0, 0, 0)",
                [&r.name],
            )?;
        }
        tx.execute(
            "INSERT INTO information_schema_tables VALUES ('tabos', 'public', ?1, ?2, 'NO', 'NO')",
            rusqlite::params![r.name, if r.view { "VIEW" } else { "BASE TABLE" }],
        )?;
        for (n, (column, ty)) in r.columns.iter().enumerate() {
            let typname = TYPES.iter().find(|t| t.0 == *ty).map_or("text", |t| t.1);
            let data_type = match *ty {
                20 => "bigint",
                701 => "double precision",
                17 => "bytea",
                _ => "text",
            };
            tx.execute(
                "INSERT INTO pg_attribute (attrelid, attname, atttypid, atttypmod, attnum, \
                 attnotnull, attisdropped, atthasdef, attidentity, attgenerated, attcollation, \
                 attstorage, attcompression, attstattarget, attlen, attndims, atthasmissing, \
                 attislocal, attinhcount) \
                 VALUES (?1, ?2, ?3, -1, ?4, 0, 0, 0, '', '', 0, 'x', '', -1, -1, 0, 0, 1, 0)",
                rusqlite::params![oid, column, ty, n as i64 + 1],
            )?;
            tx.execute(
                "INSERT INTO information_schema_columns VALUES ('tabos', 'public', ?1, ?2, ?3, \
                 NULL, 'YES', ?4, ?5, NULL, NULL, NULL, 'NO', 'NEVER', 'NO')",
                rusqlite::params![r.name, column, n as i64 + 1, data_type, typname],
            )?;
        }
    }
    tx.commit()?;
    Ok(db)
}

/// Answers the catalog statement `sql` for `scope`.
pub fn answer(
    node: &Node,
    scope: &ReadScope,
    sql: &str,
    params: &[Value],
) -> PgWireResult<tabos_store::Rows> {
    let relations = relations(node, scope).map_err(|e| super::store_error(&e))?;
    let db = database(&relations)
        .map_err(|e| refused(sqlstate::INTERNAL_ERROR, format!("catalog: {e}")))?;
    confine(&db, node.settings.query_time_max);
    // PostgreSQL's own constructs SQLite lacks (`= ANY(ARRAY[…])`, casts
    // to known types, intervals) as for any statement; what the dialect
    // refuses (a `::regclass`) is left to the catalog's own rewriting.
    let plain = match tabos_store::dialect::translate(sql) {
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
                return Ok(rows(&[], Vec::new()));
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
    let mut q = stmt
        .query(rusqlite::params_from_iter(bound))
        .map_err(sqlite_error)?;
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
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut result = rows(&names, out);
    result.truncated = truncated;
    Ok(result)
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
        let types = create_table_types(
            "CREATE TABLE t (\n  a INTEGER NOT NULL, -- a, b: why\n  b TEXT CHECK (b IN ('x', 'y')),\n  \
             c REAL, PRIMARY KEY (a, b)\n), d BLOB",
        );
        assert_eq!(types.len(), 3, "{types:?}");
        assert_eq!(
            (types["a"].as_str(), types["b"].as_str()),
            ("INTEGER", "TEXT")
        );
        assert!(!names("select * from pg_indexes", "pg_index"));
    }

    #[test]
    fn the_catalog_answers_psql() {
        let relations = vec![
            Relation {
                name: "proc".into(),
                view: false,
                columns: vec![("pid".into(), 25), ("cores".into(), 20)],
            },
            Relation {
                name: "ps".into(),
                view: true,
                columns: vec![("pid".into(), 25)],
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
