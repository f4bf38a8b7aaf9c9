//! NautDB's specialised analytics path (issue 43, item 4): read-path SQL
//! over large kernel tables on a columnar, chunk-oriented engine.
//!
//! SQLite is a row store: a `GROUP BY` over ten million `proc_event`
//! rows walks ten million B-tree cells and decodes every record. Here a
//! query the planner ([`plan`]) can answer exactly as SQLite would runs
//! instead over **column snapshots** ([`table`]) — a kernel table's
//! columns as contiguous vectors in huge pages, texts dictionary-coded —
//! with vectorised operators ([`exec`]) that take [`CHUNK_ROWS`] values
//! at a time: scans filter codes, joins and groupings hash integers, and
//! a text is a text again only when it is compared by order or returned.
//!
//! **Which engine.** [`Engine::Auto`], what `tabos sql`, the PostgreSQL
//! front door and the dashboard ask for: the columnar engine when the
//! planner takes the statement and one of its tables has at least
//! [`ROWS_MIN`] rows; SQLite otherwise, and whenever the engine meets
//! something at run time whose answer is SQLite's to give (an integer
//! sum's overflow). The kernel's own reads stay on SQLite
//! ([`Engine::RowStore`]). [`Engine::Columnar`] forces it (tests, the
//! analytics benchmark) and says why when it cannot.
//!
//! **Same checks, same bounds.** The statement is compiled by SQLite
//! first, on the reader of the caller's scope — so the realm's authorizer
//! has admitted it, its errors are SQLite's, and its column names come
//! from there. A realm's query reads only rows of its realm (the same
//! `realm =` condition the scoped views apply), only of the tables the
//! schema's `tenant_view` names. The deadline and the cancel flag are
//! checked every chunk, loading included; rows and bytes are cut as on
//! SQLite; snapshots are bounded by [`CACHE_BYTES_MAX`], joins, groups
//! and sorts by their own limits — past one, SQLite answers under `Auto`
//! (within the query's deadline) and a forced query is refused.
//!
//! **Fresh, never stale.** A snapshot is kept while its table has not
//! changed: every writer connection's pre-update hook notes the tables a
//! transaction touches and its WAL hook — after the commit is visible —
//! counts a change for each ([`changes`]). A snapshot records its table's
//! count from before its read transaction began, so a commit it missed
//! always shows as a newer count, and the next query loads again. Only
//! the columns queries use are loaded; a table's columns are loaded
//! together, in one statement, so they agree.

pub(crate) mod changes;
mod exec;
mod plan;
mod table;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hashbrown::HashMap;
use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};
use crate::value::{ByteBudget, ReadLimits, ReadScope, Row, Rows, Value};

pub use exec::{GROUPS_MAX, JOIN_ROWS_MAX, SORT_ROWS_MAX};
pub use table::{huge_pages, CHUNK_ROWS, TABLE_ROWS_MAX};
use table::{Fail, TableSnap, Ty};

/// Which engine answers a read-path query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// SQLite's row store, always (the kernel's own reads).
    #[default]
    RowStore,
    /// The columnar engine for a statement it takes over a large table.
    Auto,
    /// The columnar engine or an error saying why not.
    Columnar,
}

/// Rows a table needs before [`Engine::Auto`] takes the columnar engine
/// (below it, SQLite answers before a snapshot would be loaded).
pub const ROWS_MIN: usize = 100_000;
/// Most bytes of column snapshots kept (past it, the older ones go).
pub const CACHE_BYTES_MAX: usize = 4 << 30;

/// What the columnar engine has done since the store opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Queries it answered.
    pub answered: u64,
    /// Table snapshots it loaded.
    pub loads: u64,
    /// Rows those snapshots held.
    pub rows_loaded: u64,
}

/// The columnar engine of one SQLite store: its loading connection and
/// its snapshots.
pub(crate) struct Columnar {
    dir: PathBuf,
    /// The store's per-table change counts, kept by its writers' hooks.
    counts: &'static changes::Counts,
    partitions: u32,
    /// The connection snapshots are read on (partition 0 as `main`, the
    /// others attached as `p1` …), opened at first use.
    loader: Mutex<Option<Connection>>,
    /// Another such connection for planning (the catalogue) and the
    /// bounded row counts, so no query waits on another's load to be
    /// planned — nor to be sent to SQLite.
    catalog: Mutex<Option<Connection>>,
    snapshots: Mutex<HashMap<String, Arc<TableSnap>>>,
    /// Tables found to have fewer than [`ROWS_MIN`] rows, at which change
    /// count.
    small: Mutex<HashMap<String, u64>>,
    /// Per table written to faster than read: SQLite's turns before the
    /// next load.
    backoffs: Mutex<HashMap<String, Backoff>>,
    answered: AtomicU64,
    loads: AtomicU64,
    rows_loaded: AtomicU64,
}

impl std::fmt::Debug for Columnar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Columnar").field("dir", &self.dir).finish()
    }
}

impl Columnar {
    pub(crate) fn new(dir: &Path, partitions: u32, counts: &'static changes::Counts) -> Columnar {
        Columnar {
            dir: dir.to_path_buf(),
            counts,
            partitions,
            loader: Mutex::new(None),
            catalog: Mutex::new(None),
            snapshots: Mutex::new(HashMap::new()),
            small: Mutex::new(HashMap::new()),
            backoffs: Mutex::new(HashMap::new()),
            answered: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            rows_loaded: AtomicU64::new(0),
        }
    }

    /// Runs `f` holding the loader, as a load does.
    pub(crate) fn with_loader_held(&self, f: &mut dyn FnMut()) {
        let _held = self.loader.lock().unwrap_or_else(|p| p.into_inner());
        f()
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            answered: self.answered.load(Ordering::Relaxed),
            loads: self.loads.load(Ordering::Relaxed),
            rows_loaded: self.rows_loaded.load(Ordering::Relaxed),
        }
    }

    /// Answers `sql` on the columnar engine when `limits.engine` lets it
    /// and the engine takes it; `None` leaves it to SQLite. `columns` are
    /// the names SQLite gave the statement's columns (it has compiled it,
    /// in the caller's scope, already).
    pub(crate) fn run(
        &self,
        sql: &str,
        params: &[Value],
        limits: &ReadLimits,
        columns: &Arc<[String]>,
    ) -> Option<Result<Rows>> {
        if limits.engine == Engine::RowStore {
            return None;
        }
        let started = std::time::Instant::now();
        let check = || -> Result<()> {
            if limits.stop(started) {
                Err(limits.stopped(sql))
            } else {
                Ok(())
            }
        };
        match self.try_run(sql, params, limits, columns, &check) {
            Ok(rows) => {
                self.answered.fetch_add(1, Ordering::Relaxed);
                Some(Ok(rows))
            }
            Err(Fail::Error(e)) => Some(Err(e)),
            Err(Fail::Unsupported(why)) => match limits.engine {
                Engine::Columnar => Some(Err(Error::Invalid(format!(
                    "the columnar engine does not take this query ({}): {sql}",
                    why.0
                )))),
                _ => None,
            },
        }
    }

    fn try_run(
        &self,
        sql: &str,
        params: &[Value],
        limits: &ReadLimits,
        columns: &Arc<[String]>,
        check: &dyn Fn() -> Result<()>,
    ) -> table::FResult<Rows> {
        let realm = match &limits.scope {
            ReadScope::All => None,
            ReadScope::Realm(r) => Some(r.as_str()),
        };
        let mut plan = {
            let mut guard = self.connection(&self.catalog)?;
            let conn = guard.as_mut().expect("opened by connection()");
            let catalog = Catalog { conn, realm };
            plan::plan(sql, params, &catalog)?
        };
        if plan.outputs.len() != columns.len() {
            return table::unsupported("a select list SQLite reads otherwise");
        }
        if let Some(realm) = realm {
            // The scoped views' own condition, on every table.
            for (i, slot) in plan.slots.iter_mut().enumerate() {
                if !slot.used.iter().any(|(c, _)| c == "realm") {
                    slot.used.push(("realm".into(), Ty::Text));
                }
                slot.filters.insert(
                    0,
                    plan::PExpr::Cmp(
                        plan::CmpOp::Eq,
                        Box::new(plan::PExpr::Col {
                            slot: i,
                            col: "realm".into(),
                        }),
                        Box::new(plan::PExpr::Lit(plan::Scalar::Text(realm.to_string()))),
                    ),
                );
            }
        }
        // The columns each table must have: every slot's of that table.
        let mut wanted: HashMap<String, Vec<(String, Ty)>> = HashMap::new();
        for slot in &plan.slots {
            let w = wanted.entry(slot.table.clone()).or_default();
            for c in &slot.used {
                if !w.contains(c) {
                    w.push(c.clone());
                }
            }
        }
        if limits.engine == Engine::Auto && !self.any_large(&wanted, check)? {
            return table::unsupported("no table large enough");
        }
        let snaps = self.snapshots_for(&wanted, limits.engine, check)?;
        let slots = plan.slots.iter().map(|s| snaps[&s.table].clone()).collect();
        let ctx = exec::Ctx::new(slots, check);
        let want = limits.cap.rows().saturating_add(1);
        let values = exec::execute(&ctx, &plan, want)?;
        let mut out = Rows {
            columns: columns.clone(),
            ..Rows::default()
        };
        let mut budget = ByteBudget::default();
        for v in values {
            if out.rows.len() >= limits.cap.rows() {
                limits.cap.exceeded(sql, &mut out)?;
                break;
            }
            if !budget.admit(limits, &v, sql, &mut out)? {
                break;
            }
            out.rows.push(Row::new(columns.clone(), v));
        }
        Ok(out)
    }

    /// `which` of the engine's connections, opened at first use.
    fn connection<'a>(
        &self,
        which: &'a Mutex<Option<Connection>>,
    ) -> Result<std::sync::MutexGuard<'a, Option<Connection>>> {
        self.opened(which.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A held connection slot, opened if it was not yet.
    fn opened<'a>(
        &self,
        mut guard: std::sync::MutexGuard<'a, Option<Connection>>,
    ) -> Result<std::sync::MutexGuard<'a, Option<Connection>>> {
        if guard.is_none() {
            *guard = Some(open_loader(&self.dir, self.partitions)?);
        }
        Ok(guard)
    }

    fn schemas(&self) -> Vec<String> {
        std::iter::once("main".to_string())
            .chain((1..self.partitions).map(|p| format!("p{p}")))
            .collect()
    }

    /// Whether a table of `wanted` has at least [`ROWS_MIN`] rows: known
    /// from its snapshot or an earlier count at the same change count, or
    /// counted up to [`ROWS_MIN`] (a bounded scan).
    fn any_large(
        &self,
        wanted: &HashMap<String, Vec<(String, Ty)>>,
        check: &dyn Fn() -> Result<()>,
    ) -> table::FResult<bool> {
        for table in wanted.keys() {
            let generation = self.counts.generation(table);
            if let Some(s) = self.cached(table) {
                if s.generation == generation {
                    if s.rows >= ROWS_MIN {
                        return Ok(true);
                    }
                    continue;
                }
            }
            let small = self.small.lock().unwrap_or_else(PoisonError::into_inner);
            if small.get(table) == Some(&generation) {
                continue;
            }
            drop(small);
            check()?;
            let guard = self.connection(&self.catalog)?;
            let conn = guard.as_ref().expect("opened by connection()");
            let q = format!("\"{}\"", table.replace('"', "\"\""));
            let union = self
                .schemas()
                .iter()
                .map(|s| format!("SELECT 1 FROM {s}.{q}"))
                .collect::<Vec<_>>()
                .join(" UNION ALL ");
            let sql = format!("SELECT count(*) FROM ({union} LIMIT {ROWS_MIN})");
            let n: i64 = conn
                .query_row(&sql, [], |r| r.get(0))
                .map_err(|e| crate::sqlite::map_err(e, &sql))?;
            if n as usize >= ROWS_MIN {
                return Ok(true);
            }
            let mut small = self.small.lock().unwrap_or_else(PoisonError::into_inner);
            if small.len() >= 1_024 {
                small.clear();
            }
            small.insert(table.clone(), generation);
        }
        Ok(false)
    }

    fn backoff(&self, table: &str) -> BackoffGuard<'_> {
        BackoffGuard {
            map: self.backoffs.lock().unwrap_or_else(PoisonError::into_inner),
            table: table.to_string(),
        }
    }

    fn cached(&self, table: &str) -> Option<Arc<TableSnap>> {
        self.snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .cloned()
    }

    /// Snapshots holding `wanted`'s columns of each table, as of now:
    /// kept ones whose table has not changed since, the rest loaded in
    /// one read transaction.
    fn snapshots_for(
        &self,
        wanted: &HashMap<String, Vec<(String, Ty)>>,
        engine: Engine,
        check: &dyn Fn() -> Result<()>,
    ) -> table::FResult<HashMap<String, Arc<TableSnap>>> {
        let mut out = HashMap::new();
        let mut to_load = Vec::new();
        for (table, cols) in wanted {
            let cached = self.cached(table);
            let current = cached
                .as_ref()
                .is_some_and(|s| s.generation == self.counts.generation(table));
            match cached {
                Some(s) if current && cols.iter().all(|(c, _)| s.columns.contains_key(c)) => {
                    s.uses.fetch_add(1, Ordering::Relaxed);
                    self.backoff(table).clear();
                    out.insert(table.clone(), s);
                }
                old => {
                    if engine == Engine::Auto {
                        // A table written to faster than its snapshots are
                        // read again would cost a load per query: after a
                        // snapshot that went stale unread, SQLite answers
                        // 1, 2, 4 … 64 queries before the next load.
                        let unread = old
                            .as_ref()
                            .is_some_and(|o| !current && o.uses.load(Ordering::Relaxed) == 0);
                        let mut b = self.backoff(table);
                        if unread {
                            b.stale_unread();
                            self.snapshots
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .remove(table);
                        }
                        if b.skip() {
                            return table::unsupported(format!(
                                "{table} changes faster than its snapshots are read"
                            ));
                        }
                    }
                    // Load what the old snapshot held too, so the next
                    // query of its columns need not load again.
                    let mut cols = cols.clone();
                    if let Some(old) = old {
                        for (name, col) in &old.columns {
                            if !cols.iter().any(|(c, _)| c == name) {
                                cols.push((name.clone(), col.ty()));
                            }
                        }
                    }
                    to_load.push((table.clone(), cols));
                }
            }
        }
        if to_load.is_empty() {
            return Ok(out);
        }
        // One load at a time. Under Auto no query waits for another's
        // load (perhaps another realm's, as long as its deadline): SQLite
        // answers it now. A forced query waits.
        let guard = match engine {
            Engine::Auto => match self.loader.try_lock() {
                Ok(g) => self.opened(g)?,
                Err(std::sync::TryLockError::Poisoned(p)) => self.opened(p.into_inner())?,
                Err(std::sync::TryLockError::WouldBlock) => {
                    return table::unsupported("another query is loading a snapshot")
                }
            },
            _ => self.connection(&self.loader)?,
        };
        let conn = guard.as_ref().expect("opened by connection()");
        let schemas = self.schemas();
        // Change counts before the read transaction starts: a commit the
        // snapshot misses counts after them.
        let generations: Vec<u64> = to_load
            .iter()
            .map(|(t, _)| self.counts.generation(t))
            .collect();
        conn.execute_batch("BEGIN")
            .map_err(|e| crate::sqlite::map_err(e, "BEGIN"))?;
        let kept: usize = out.values().map(|s: &Arc<TableSnap>| s.bytes()).sum();
        let mut loaded = Vec::new();
        let mut result = Ok(());
        for ((table, cols), generation) in to_load.iter().zip(generations) {
            match table::load(
                conn,
                &schemas,
                table,
                cols,
                generation,
                CACHE_BYTES_MAX.saturating_sub(kept),
                check,
            ) {
                Ok(s) => {
                    self.loads.fetch_add(1, Ordering::Relaxed);
                    self.rows_loaded.fetch_add(s.rows as u64, Ordering::Relaxed);
                    loaded.push(Arc::new(s))
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let _ = conn.execute_batch("COMMIT");
        result?;
        let mut snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for s in loaded {
            snapshots.insert(s.name.clone(), s.clone());
            out.insert(s.name.clone(), s);
        }
        // Past the bound, keep only what this query uses.
        let total: usize = snapshots.values().map(|s| s.bytes()).sum();
        if total > CACHE_BYTES_MAX {
            snapshots.retain(|name, _| out.contains_key(name));
        }
        Ok(out)
    }
}

/// Most queries SQLite answers for a table between loads of a snapshot
/// that keeps going stale unread.
pub const BACKOFF_QUERIES_MAX: u32 = 64;

/// A table's turns for SQLite (see [`Columnar::snapshots_for`]).
#[derive(Debug, Default, Clone, Copy)]
struct Backoff {
    /// Queries SQLite answers before the next load.
    left: u32,
    /// What `left` was set to last.
    last: u32,
}

/// One table's [`Backoff`], held.
struct BackoffGuard<'a> {
    map: std::sync::MutexGuard<'a, HashMap<String, Backoff>>,
    table: String,
}

impl BackoffGuard<'_> {
    fn entry(&mut self) -> &mut Backoff {
        if self.map.len() >= 1_024 && !self.map.contains_key(&self.table) {
            self.map.clear();
        }
        self.map.entry(self.table.clone()).or_default()
    }

    /// A snapshot went stale before a second query read it.
    fn stale_unread(&mut self) {
        let b = self.entry();
        b.last = (b.last * 2).clamp(1, BACKOFF_QUERIES_MAX);
        b.left = b.last;
    }

    /// Whether SQLite takes this query (and one turn).
    fn skip(&mut self) -> bool {
        let b = self.entry();
        if b.left > 0 {
            b.left -= 1;
            true
        } else {
            false
        }
    }

    /// A snapshot was read again: loads pay off for this table.
    fn clear(&mut self) {
        self.map.remove(&self.table);
    }
}

/// The planner's view of the database: kernel tables (not views, not
/// tenant tables), and for a realm only those `tenant_view` names.
struct Catalog<'a> {
    conn: &'a mut Connection,
    realm: Option<&'a str>,
}

impl plan::Catalog for Catalog<'_> {
    fn table(&self, name: &str) -> table::FResult<Option<plan::Declared>> {
        if name.contains('/') || name.starts_with("sqlite_") {
            return Ok(None);
        }
        let sql = "SELECT type FROM main.sqlite_master WHERE name = ?1";
        let kind: Option<String> = self
            .conn
            .query_row(sql, [name], |r| r.get(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(crate::sqlite::map_err(e, sql)),
            })?;
        if kind.as_deref() != Some("table") {
            return Ok(None);
        }
        let declared = table::declared_columns(self.conn, name)?;
        if self.realm.is_some() {
            let sql = "SELECT 1 FROM main.tenant_view WHERE name = ?1";
            let named = self
                .conn
                .query_row(sql, [name], |_| Ok(()))
                .map(|_| true)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(false),
                    e => Err(crate::sqlite::map_err(e, sql)),
                })?;
            if !named
                || !declared
                    .iter()
                    .any(|(c, t)| c == "realm" && *t == Some(Ty::Text))
            {
                return Ok(None);
            }
        }
        Ok(Some(declared))
    }
}

/// Opens the loading connection: read-only in effect (`query_only`),
/// every partition attached.
fn open_loader(dir: &Path, partitions: u32) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        crate::sqlite::partition_path(dir, 0),
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| crate::sqlite::map_err(e, "open the columnar loader"))?;
    for p in 1..partitions {
        let path = crate::sqlite::partition_path(dir, p);
        let sql = "ATTACH DATABASE ?1 AS ?2";
        conn.execute(
            sql,
            rusqlite::params![path.to_string_lossy(), format!("p{p}")],
        )
        .map_err(|e| crate::sqlite::map_err(e, sql))?;
    }
    conn.execute_batch("PRAGMA query_only = 1; PRAGMA cache_size = -65536")
        .map_err(|e| crate::sqlite::map_err(e, "PRAGMA query_only"))?;
    Ok(conn)
}
