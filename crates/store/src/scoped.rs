//! Realm-scoped readers (SQLite): what a tenant's `tabos sql` runs on.
//!
//! A scoped reader is a read-only connection whose `main` database is an
//! empty in-memory one. The partitions are attached under names drawn at
//! random when the connection opens (`k<128-bit hex>_<p>`), and a TEMP view
//! stands for each table the schema's `tenant_view` names:
//!
//! ```text
//!   temp.proc  = SELECT * FROM k…_0.proc WHERE realm = tabos_realm()
//!                UNION ALL SELECT * FROM k…_1.proc WHERE realm = tabos_realm() …
//!   temp.ps    = the schema's own `ps`, re-created in temp, so it reads temp.proc
//! ```
//!
//! SQLite resolves an unqualified name in `temp` first, so `SELECT * FROM
//! proc` reads the filtered view. `tabos_realm()` returns the realm of the
//! query being run (set just before, cleared just after). The authorizer
//! admits, while a statement is compiled, only:
//!
//! * reads of those temp views;
//! * reads of a partition's table `T` from inside the temp view `T` (the
//!   filtered wrappers themselves), or of the realm's own tenant tables
//!   (`<realm>/…`) anywhere;
//! * SELECT, functions and recursive CTEs — nothing that writes, no
//!   PRAGMA, ATTACH or transaction control, and no EXPLAIN.
//!
//! Why the random schema names: SQLite reports a read made inside a CTE
//! with the CTE's name as its "accessor", exactly as it reports one made
//! inside a view, so `WITH proc AS (SELECT * FROM k…_0.proc) …` would pass
//! the wrapper rule. A statement can only name a partition it knows the
//! name of; the names appear nowhere a scoped reader may look (the temp
//! schema's catalogue, `pragma_database_list` and EXPLAIN are refused).
//! Statements are prepared afresh for every query, never taken from a
//! statement cache, so a statement compiled — and authorized — for one
//! realm is never run for another.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::functions::FunctionFlags;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};

/// Bytes of randomness in a scoped reader's partition names.
const SECRET_BYTES: usize = 16;

/// The table of the schema that names what a scoped reader shows.
pub(crate) const TENANT_VIEW_TABLE: &str = "tenant_view";

/// One scoped reader: its connection and the realm it reads for now.
pub(crate) struct ScopedReader {
    pub(crate) conn: Connection,
    /// The realm of the query being run; empty between queries, which the
    /// authorizer and `tabos_realm()` treat as "nothing".
    realm: Arc<Mutex<String>>,
    /// Why the authorizer refused the statement being compiled, if it did.
    refused: Arc<Mutex<Option<String>>>,
}

/// What a scoped reader shows: the names of the wrapped tables and of the
/// re-created views.
#[derive(Default)]
struct Shown {
    tables: Vec<String>,
    views: Vec<String>,
}

impl Shown {
    fn contains(&self, name: &str) -> bool {
        self.tables.iter().chain(&self.views).any(|n| n == name)
    }
    fn is_table(&self, name: &str) -> bool {
        self.tables.iter().any(|n| n == name)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn sql_err(e: rusqlite::Error, what: &str) -> Error {
    crate::sqlite::map_err(e, what)
}

/// Random hex from the kernel's generator.
fn secret_hex() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; SECRET_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::Io(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl ScopedReader {
    /// Opens a scoped reader over the partitions of the store in `dir`.
    pub(crate) fn open(dir: &Path, partitions: u32) -> Result<ScopedReader> {
        let conn = Connection::open_with_flags(
            ":memory:",
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| sql_err(e, "open scoped reader"))?;
        crate::sqlite::prepare_reader(&conn)?;
        let prefix = format!("k{}_", secret_hex()?);
        for p in 0..partitions {
            let path = crate::sqlite::partition_path(dir, p);
            let sql = "ATTACH DATABASE ?1 AS ?2";
            conn.execute(
                sql,
                rusqlite::params![path.to_string_lossy(), format!("{prefix}{p}")],
            )
            .map_err(|e| sql_err(e, sql))?;
        }
        let realm = Arc::new(Mutex::new(String::new()));
        {
            let realm = realm.clone();
            conn.create_scalar_function("tabos_realm", 0, FunctionFlags::SQLITE_UTF8, move |_| {
                Ok(lock(&realm).clone())
            })
            .map_err(|e| sql_err(e, "create function tabos_realm"))?;
        }
        let shown = Self::define_views(&conn, &prefix, partitions)?;
        conn.execute_batch("PRAGMA query_only = 1")
            .map_err(|e| sql_err(e, "PRAGMA query_only"))?;
        let refused = Arc::new(Mutex::new(None));
        {
            let realm = realm.clone();
            let refused = refused.clone();
            conn.authorizer(Some(move |ctx: AuthContext<'_>| {
                let realm = lock(&realm);
                match admit(&ctx, &realm, &prefix, &shown) {
                    Ok(()) => Authorization::Allow,
                    Err(why) => {
                        lock(&refused).get_or_insert(why);
                        Authorization::Deny
                    }
                }
            }));
        }
        Ok(ScopedReader {
            conn,
            realm,
            refused,
        })
    }

    /// Creates the temp views of what `tenant_view` names.
    fn define_views(conn: &Connection, prefix: &str, partitions: u32) -> Result<Shown> {
        let first = format!("{prefix}0");
        let sql = format!(
            "SELECT v.name, m.type, m.sql FROM {first}.{TENANT_VIEW_TABLE} v \
             JOIN {first}.sqlite_master m ON m.name = v.name ORDER BY v.name"
        );
        let declared: Vec<(String, String, Option<String>)> = {
            let mut stmt = conn.prepare(&sql).map_err(|e| sql_err(e, &sql))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(|e| sql_err(e, &sql))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| sql_err(e, &sql))?
        };
        let mut shown = Shown::default();
        // Tables first: the views' definitions read them.
        let schemas: Vec<String> = (0..partitions).map(|p| format!("{prefix}{p}")).collect();
        for (name, _, _) in declared.iter().filter(|d| d.1 == "table") {
            let ddl = crate::sqlite::union_view(name, &schemas, " WHERE realm = tabos_realm()");
            conn.execute_batch(&ddl).map_err(|e| sql_err(e, &ddl))?;
            shown.tables.push(name.clone());
        }
        for (name, _, def) in declared.iter().filter(|d| d.1 == "view") {
            let Some(ddl) = def.as_deref().and_then(crate::sqlite::temp_view) else {
                return Err(Error::Internal(format!(
                    "view {name} has no CREATE VIEW definition"
                )));
            };
            conn.execute_batch(&ddl).map_err(|e| sql_err(e, &ddl))?;
            shown.views.push(name.clone());
        }
        Ok(shown)
    }

    /// Sets the realm the next statements are compiled and run for.
    pub(crate) fn enter(&self, realm: &str) {
        *lock(&self.realm) = realm.to_string();
        *lock(&self.refused) = None;
    }

    /// Ends a query: nothing is visible until the next [`enter`](Self::enter).
    pub(crate) fn leave(&self) {
        lock(&self.realm).clear();
    }

    /// Why the last statement was refused by the authorizer, if it was.
    pub(crate) fn refusal(&self) -> Option<String> {
        lock(&self.refused).take()
    }
}

/// The scoped reader's authorizer: see the module's documentation.
fn admit(
    ctx: &AuthContext<'_>,
    realm: &str,
    prefix: &str,
    shown: &Shown,
) -> std::result::Result<(), String> {
    if realm.is_empty() {
        return Err("no realm is set for this reader".into());
    }
    match ctx.action {
        AuthAction::Select | AuthAction::Function { .. } | AuthAction::Recursive => Ok(()),
        AuthAction::Read {
            table_name,
            column_name,
        } => {
            let tenant_table = table_name
                .strip_prefix(realm)
                .is_some_and(|rest| rest.starts_with('/'));
            match ctx.database_name {
                Some("temp") if shown.contains(table_name) => Ok(()),
                Some(db) if db.starts_with(prefix) => {
                    if tenant_table
                        || (shown.is_table(table_name) && ctx.accessor == Some(table_name))
                    {
                        Ok(())
                    } else {
                        Err(format!(
                            "{table_name} is not one of realm {realm}'s tables or views"
                        ))
                    }
                }
                // `count(*)` over a view reads no column: SQLite asks for
                // the view itself, with no column and no database. Its
                // rows are still read through the view, whose own reads
                // are checked as above.
                None if column_name.is_empty() && shown.contains(table_name) => Ok(()),
                _ => Err(format!(
                    "{table_name} is not one of realm {realm}'s tables or views"
                )),
            }
        }
        AuthAction::Pragma { pragma_name, .. } => Err(format!("PRAGMA {pragma_name} is refused")),
        _ => Err(format!(
            "{:?} is refused: realm-scoped SQL only reads",
            ctx.action
        )),
    }
}
