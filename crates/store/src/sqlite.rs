//! The embedded backend: SQLite in WAL mode, one executor thread per partition.
//!
//! ## Files
//! A store directory holds `LOCK` (an exclusive `flock` held while a store has
//! it open, so two processes never write the same files) and `p<N>.db` for
//! each partition `N`, each with the full schema.
//!
//! ## Writer (one per partition): the caller leads, or the executor does
//! ```text
//!   run(job) ───── partition idle, and not busy ──yes──► the caller's thread leads:
//!        │                                  run the batch [job] (below), answer it;
//!        │                                  anything queued meanwhile? hand the
//!        │                                  lead to the partition's executor thread
//!        no (a leader is running)
//!        └──► queue the job; the leader takes it into its next batch
//!        no (idle, but the executor led within BUSY_COOLDOWN)
//!        └──► as submit
//!   submit(job) ── queue the job; if no one leads, hand the lead to the
//!                  executor thread (submit never runs a procedure itself)
//!
//!   a batch:  BEGIN IMMEDIATE
//!             for each job:  SAVEPOINT p; run; RELEASE p   (ok)
//!                            ROLLBACK TO p; RELEASE p      (error)
//!             COMMIT
//!             (a batch of one: no savepoint; if it fails, ROLLBACK)
//!             publish the committed jobs' notifications, in order;
//!             then answer every job
//!
//!   executor thread: parked until handed the lead; then, while jobs are
//!   queued, takes them all (≤ BATCH_PROCS_MAX) as one batch; gives the
//!   lead up when the queue has stayed empty for EXECUTOR_LINGER.
//! ```
//! A procedure given by `run` (what `Store::run` and `Store::call` use)
//! to an idle partition therefore runs on its caller's thread, during the
//! call, with no thread woken and none put to sleep; callers that arrive while a batch runs join the next group commit,
//! which one leader commits for all of them. At most one leader runs at a
//! time ([`Lane::leading`], changed only under the lane's lock), so the
//! writer's procedures of one partition run strictly one after another (no
//! locks, no aborts — the H-Store model; tenant code is the exception,
//! below), and a failing procedure undoes
//! only its own savepoint. The lead passes to the executor thread rather
//! than staying with the caller so that one caller's thread is never kept
//! serving others' work under sustained load. Invariant: a job is answered
//! exactly once, and only after the commit that contains it succeeded (or
//! with the error that stopped it). If the COMMIT itself fails every job of
//! the batch is answered with that error and nothing of the batch is
//! published.
//!
//! ## Tenant code (long procedures)
//! A job charged to tenant code ([`Store::for_tenant_code`]: a stored
//! procedure, which may run up to its deadline) never runs on the writer:
//! a partition has up to [`TENANT_CONNECTIONS`] more connections for it
//! (opened when first needed), each with a thread, and the jobs wait for one in a [`FairQueue`] (realms by
//! run time; the last free connection only for a realm running none). A
//! caller that finds a connection free and nothing waiting runs its job on
//! its own thread. The job runs in a *deferred* transaction: it reads a
//! snapshot and takes the partition's write lock only at its first write,
//! so the writer's group commits go on while tenant code computes — a
//! procedure that only reads and computes never holds the writer at all,
//! and one that writes holds it from its first write to its commit. A
//! write on a snapshot the writer has moved past fails with
//! SQLITE_BUSY_SNAPSHOT (and one while another tenant connection holds the
//! lock with SQLITE_BUSY: a transaction with a snapshot cannot wait for
//! it); the job rolls back, waits for the lock to be free, and runs again,
//! and after [`STALE_RETRIES_MAX`] such retries runs in an immediate
//! transaction (holding the write lock from the start, the writer waiting
//! for it — and so bounded by `WRITE_HOLD_MAX` from its start).
//! SQLite's lock is not fair (a tenant connection letting go of it could
//! hand it to another before the writer's busy handler looks), so every
//! connection passes the partition's [`WriteGate`] first — the writer
//! before BEGIN IMMEDIATE, tenant code before its first statement that may
//! write — and a writer waiting there goes before tenant code.
//! Holding it is bounded: [`Tx::writing_since`] tells the kernel's host
//! when a job's transaction began to hold it, and tenant code is stopped
//! [`WRITE_HOLD_MAX`](crate::WRITE_HOLD_MAX) later — so the writer waits
//! for tenant code at most that long, whatever the code does.
//! Snapshot reads plus the single write lock keep every job serializable:
//! one that writes does so on the latest state, and commits before any
//! other. Commits and the publishing of their notifications are ordered by
//! one lock per partition, so the feed still follows commit order.
//!
//! [`Store::for_tenant_code`]: crate::Store::for_tenant_code
//!
//! ## Readers
//! Read-only queries run on a pool of connections that open partition 0 as
//! `main`, attach the others, and define a TEMP view per table that is the
//! `UNION ALL` of that table over all partitions; they are `query_only` and,
//! thanks to WAL, never wait for a writer. A tenant's queries run on a
//! second, smaller pool of realm-scoped readers ([`crate::scoped`]).

use std::any::Any;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result, SqlCode};
use crate::fair::{FairQueue, Refused, SHARE_QUEUE_MAX};
use crate::feed::{self, Feed, Notification};
use crate::migrate::{self, Migration};
use crate::scoped::ScopedReader;
use crate::sql::to_sqlite;
use crate::statements::{Conn, NAMED_PARAMS_MAX};
use crate::value::{ByteBudget, Cap, ReadLimits, ReadScope, Row, Rows, Value};
use crate::{
    AfterCommit, Backend, BackendKind, Config, Confinement, Dialect, Durability, Failure, Job,
    Location, Outcome, PKey, Stats, Tx, QUEUE_PROCS_MAX,
};

/// Most procedures in one group commit.
pub const BATCH_PROCS_MAX: usize = 4_096;
/// Descriptors one partition holds at rest: its writer's database, WAL and
/// shared-memory files, and the database and WAL of its checkpointer and
/// of the first connection of each read pool over it (its own readers, the
/// all-partition and realm-scoped readers, the columnar loader) — kept
/// once opened. More readers are opened only with descriptors to spare
/// ([`crate::descriptors::reserve`]).
const DESCRIPTORS_PER_PARTITION: usize = 3 + 2 * 5;

/// Realm-scoped readers open at once (tenants' `tabos sql`), at most.
const SCOPED_READERS_MAX: usize = 4;
/// Prepared statements cached per connection.
const STATEMENT_CACHE_MAX: usize = 256;
/// The executor asks its checkpointer for a WAL checkpoint once the WAL holds
/// this many pages (16 MiB at 4 KiB pages). Checkpoints run beside the
/// executor rather than inside a commit, and rarely: each one fsyncs, and on
/// ext4 an fsync makes concurrent WAL writes wait for the journal commit —
/// the main source of multi-millisecond commit stalls.
const CHECKPOINT_WAL_PAGES: i32 = 4_096;
/// Backstop: if the WAL still grows past this many pages (the checkpointer
/// cannot keep up, e.g. a reader pins old frames), the executor checkpoints
/// inline.
const WAL_PAGES_MAX: i32 = 65_536;

thread_local! {
    /// Pages in this thread's WAL after its last commit, set by [`wal_hook`].
    static WAL_PAGES: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// Called by SQLite on the executor's thread after each commit with the WAL's
/// page count. (Installing it turns off SQLite's own auto-checkpoint; the
/// checkpointer and the backstop above take its place.)
fn wal_hook(_wal: &rusqlite::hooks::Wal, pages: std::os::raw::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|p| p.set(pages));
    // The commit is visible: count the changed tables' changes.
    crate::columnar::changes::published();
    Ok(())
}
/// How long a connection waits on a lock held by SQLite's own housekeeping
/// (a checkpoint, a WAL restart) before failing, in milliseconds.
const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Busy-handler calls answered by yielding the CPU before it starts sleeping.
const BUSY_YIELDS: i32 = 1_000;
/// Sleep per busy-handler call after the yields, in microseconds.
const BUSY_SLEEP_US: u64 = 100;

/// SQLite's default busy handler sleeps 1, 2, 5, 10 ... ms, so a lock held
/// for a few microseconds by the checkpointer costs a commit milliseconds.
/// This one yields first, then sleeps in short steps, and gives up after
/// about [`BUSY_TIMEOUT_MS`].
fn busy_handler(calls: i32) -> bool {
    if calls < BUSY_YIELDS {
        std::thread::yield_now();
        return true;
    }
    let slept_ms = (calls - BUSY_YIELDS) as u64 * BUSY_SLEEP_US / 1_000;
    if slept_ms >= BUSY_TIMEOUT_MS {
        return false;
    }
    std::thread::sleep(std::time::Duration::from_micros(BUSY_SLEEP_US));
    true
}

/// What every connection of the store has: the busy handler, and the
/// query planner's stability guarantee (`SQLITE_DBCONFIG_ENABLE_QPSG`).
/// Without it SQLite plans a statement from the values bound when it was
/// prepared where they could matter (a `LIMIT $N`; a `$N` compared with a
/// partial index's `WHERE`) and marks it expired at each new binding of
/// them, so such a statement was compiled again at every call — measured:
/// both of the graph scheduler's settling queries at every proc's end, a
/// tenth of the partition executor's time in a burst of wasm procs. With
/// it, a statement keeps the plan it was prepared with.
fn configure_connection(conn: &Connection) -> Result<()> {
    conn.busy_handler(Some(busy_handler))
        .map_err(|e| map_err(e, "busy_handler"))?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(|e| map_err(e, "SQLITE_DBCONFIG_ENABLE_QPSG"))?;
    Ok(())
}

pub struct SqliteBackend {
    partitions: u32,
    durability: Durability,
    /// The store directory (`p<N>.db`).
    dir: PathBuf,
    /// Per partition, its writer (see "Writer" above).
    writers: Vec<Arc<Partition>>,
    /// Executor and checkpointer threads, joined on drop.
    threads: Vec<JoinHandle<()>>,
    readers: ReadPool<Connection>,
    /// Per partition, read connections for [`Store::read`](crate::Store::read).
    partition_readers: Vec<ReadPool<PartitionReader>>,
    scoped: ReadPool<ScopedReader>,
    /// The columnar engine for read-path analytics ([`crate::columnar`]).
    columnar: crate::columnar::Columnar,
    feed: Arc<Feed>,
    stats: Arc<Stats>,
    _lock: File,
}

impl SqliteBackend {
    pub fn open(config: &Config, migrations: &[Migration]) -> Result<SqliteBackend> {
        let Location::Sqlite(dir) = &config.location else {
            return Err(Error::Config("not a SQLite location".into()));
        };
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::Io(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        let lock = File::create(dir.join("LOCK"))
            .map_err(|e| Error::Io(format!("cannot create {}/LOCK: {e}", dir.display())))?;
        // A lock just let go may still be held for an instant by a child
        // process forked before its holder closed it (until that child's
        // exec closes its copy): wait up to LOCK_WAIT_MAX before saying the
        // directory is in use.
        let waited = std::time::Instant::now();
        while lock.try_lock().is_err() {
            if waited.elapsed() >= LOCK_WAIT_MAX {
                return Err(Error::Config(format!(
                    "data directory {} is in use by another tabos process",
                    dir.display()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let partitions = partition_count(dir, config.partitions)?;

        let feed = Feed::new();
        let stats = Arc::new(Stats::new(partitions));
        let mut conns = Vec::new();
        let counts = crate::columnar::changes::Counts::leaked();
        for p in 0..partitions {
            let conn = open_writer(&partition_path(dir, p), config.durability, counts)?;
            init_partition(&conn, p, partitions, migrations)?;
            conns.push(conn);
        }
        let mut writers = Vec::new();
        let mut threads = Vec::new();
        let cores = pinning_cores(config.pin_executors);
        for (p, conn) in conns.into_iter().enumerate() {
            let checkpoints = start_checkpointer(dir, p as u32, &mut threads)?;
            let shared = PartitionShared {
                p_key: PKey(p as u32),
                feed: feed.clone(),
                stats: stats.clone(),
                checkpoints,
                commit_order: Arc::new(Mutex::new(())),
                gate: Arc::new(WriteGate::default()),
            };
            let (path, durability, of) = (
                partition_path(dir, p as u32),
                config.durability,
                shared.clone(),
            );
            let open_tenant: OpenTenant = Box::new(move || {
                Ok(Executor::new(
                    open_writer(&path, durability, counts)?,
                    of.clone(),
                    true,
                ))
            });
            let executor = Executor::new(conn, shared, false);
            let partition = Arc::new(Partition::new(executor, open_tenant));
            for t in 0..TENANT_CONNECTIONS {
                let runs = partition.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("tabos-tenant-p{p}-{t}"))
                    .spawn(move || runs.tenants.thread())
                    .map_err(|e| Error::Io(format!("cannot start tenant thread: {e}")))?;
                threads.push(handle);
            }
            let core = cores.as_ref().map(|c| c[p % c.len()]);
            let lead = partition.clone();
            let handle = std::thread::Builder::new()
                .name(format!("tabos-exec-p{p}"))
                .spawn(move || {
                    raise_priority();
                    if let Some(core) = core {
                        pin_to_core(core);
                    }
                    lead.executor_thread()
                })
                .map_err(|e| Error::Io(format!("cannot start executor thread: {e}")))?;
            writers.push(partition);
            threads.push(handle);
        }
        Ok(SqliteBackend {
            partitions,
            durability: config.durability,
            dir: dir.clone(),
            writers,
            threads,
            readers: ReadPool::new(
                dir.clone(),
                partitions,
                config.connections,
                partitions,
                open_reader,
            ),
            partition_readers: (0..partitions)
                .map(|p| {
                    ReadPool::new(dir.clone(), p, config.connections, 1, open_partition_reader)
                })
                .collect(),
            scoped: ReadPool::new(
                dir.clone(),
                partitions,
                config.connections.min(SCOPED_READERS_MAX),
                partitions,
                ScopedReader::open,
            ),
            columnar: crate::columnar::Columnar::new(dir, partitions, counts),
            feed,
            stats,
            _lock: lock,
        })
    }
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        // Closing the lanes lets each executor finish what is queued and
        // exit; the last reference to a partition closes its checkpointer.
        for w in self.writers.drain(..) {
            w.close();
        }
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

impl SqliteBackend {
    /// Gives `job` to its partition's writer (see "Writer" above).
    fn write(&self, job: Job, inline: bool) {
        let Some(partition) = self.writers.get(job.p_key.0 as usize) else {
            let p_key = job.p_key.0;
            job.finish_err(Error::UnknownPartition {
                p_key,
                partitions: self.partitions,
            });
            return;
        };
        partition.submit(job, inline);
    }
}

impl Backend for SqliteBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }
    fn partitions(&self) -> u32 {
        self.partitions
    }
    fn durability(&self) -> Durability {
        self.durability
    }
    fn submit(&self, job: Job) {
        self.write(job, false);
    }
    fn submit_all(&self, jobs: Vec<Job>) {
        let mut by_partition: Vec<Vec<Job>> = self.writers.iter().map(|_| Vec::new()).collect();
        for job in jobs {
            match by_partition.get_mut(job.p_key.0 as usize) {
                Some(jobs) => jobs.push(job),
                None => self.write(job, false), // refused as unknown
            }
        }
        for (partition, jobs) in self.writers.iter().zip(by_partition) {
            if !jobs.is_empty() {
                partition.submit_all(jobs);
            }
        }
    }
    fn begin_snapshot(&self) -> Result<Vec<Connection>> {
        (0..self.partitions)
            .map(|p| crate::backup::begin_read(&partition_path(&self.dir, p)))
            .collect()
    }
    fn run(&self, job: Job) {
        self.write(job, true);
    }
    fn read(&self, mut job: Job) {
        let Some(pool) = self.partition_readers.get(job.p_key.0 as usize) else {
            let p_key = job.p_key.0;
            job.finish_err(Error::UnknownPartition {
                p_key,
                partitions: self.partitions,
            });
            return;
        };
        let conn = match pool.get() {
            Ok(c) => c,
            Err(e) => return job.finish_err(e),
        };
        let outcome = read_on(&conn, &mut job);
        pool.put(conn);
        let _ = job.done.send(outcome);
    }
    fn query(&self, sql: &str, params: &[Value], limits: &ReadLimits) -> Result<Rows> {
        match &limits.scope {
            ReadScope::All => {
                let conn = self.readers.get()?;
                let rows = read_query(&conn, sql, params, limits, &self.columnar);
                self.readers.put(conn);
                rows
            }
            ReadScope::Realm(realm) => {
                let reader = self.scoped.get()?;
                let rows = scoped_query(&reader, realm, sql, params, limits, &self.columnar);
                self.scoped.put(reader);
                rows
            }
        }
    }
    fn feed(&self) -> &Arc<Feed> {
        &self.feed
    }
    fn columnar_stats(&self) -> crate::columnar::Stats {
        self.columnar.stats()
    }
    fn with_columnar_loads_held(&self, f: &mut dyn FnMut()) {
        self.columnar.with_loader_held(f)
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
}

pub(crate) fn partition_path(dir: &Path, p: u32) -> PathBuf {
    dir.join(format!("p{p}.db"))
}

/// Descriptors a store in `dir` holds at rest once opened with `asked`
/// partitions ([`crate::Config::descriptors_at_rest`]): its partitions'
/// and the directory's LOCK file.
pub(crate) fn descriptors_at_rest(dir: &Path, asked: Option<u32>) -> Result<usize> {
    Ok(partition_count(dir, asked)? as usize * DESCRIPTORS_PER_PARTITION + 1)
}

/// The partitions to open in `dir`: as many as its files (a directory
/// created with a count keeps it), else what `asked` says.
fn partition_count(dir: &Path, asked: Option<u32>) -> Result<u32> {
    let existing = (0..=crate::PARTITIONS_MAX)
        .filter(|p| partition_path(dir, *p).exists())
        .count() as u32;
    crate::partitions_to_open((existing > 0).then_some(existing), asked)
        .map_err(|e| Error::Config(format!("data directory {}: {e}", dir.display())))
}

/// Starts partition `p`'s checkpointer: a thread with its own connection
/// that runs a PASSIVE checkpoint (never blocking the writer or readers) each
/// time the executor asks. It ends when the executor drops its sender.
fn start_checkpointer(
    dir: &Path,
    p: u32,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<SyncSender<()>> {
    let conn = Connection::open_with_flags(
        partition_path(dir, p),
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| map_err(e, "open checkpointer"))?;
    configure_connection(&conn)?;
    let (tx, rx) = sync_channel::<()>(1);
    let handle = std::thread::Builder::new()
        .name(format!("tabos-ckpt-p{p}"))
        .spawn(move || {
            while rx.recv().is_ok() {
                // A failed passive checkpoint is retried at the next request;
                // the WAL_PAGES_MAX backstop in the executor bounds the WAL.
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        })
        .map_err(|e| Error::Io(format!("cannot start checkpointer thread: {e}")))?;
    threads.push(handle);
    Ok(tx)
}

fn lock(m: &Mutex<Option<Confinement>>) -> std::sync::MutexGuard<'_, Option<Confinement>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// After tenant DDL: refuses (the statement's savepoint then rolls the
/// DDL back) if a table of `prefix` has a foreign key to a table outside
/// it. Kernel tables are never a tenant's to reference: with foreign keys
/// enforced, a tenant's row could block the kernel's updates and deletes.
fn refuse_foreign_keys_out(conn: &Connection, prefix: &str) -> Result<()> {
    let sql = "SELECT m.name, f.\"table\" FROM sqlite_master AS m, \
               pragma_foreign_key_list(m.name) AS f \
               WHERE m.type = 'table' AND substr(m.name, 1, length(?1)) = ?1 \
               AND substr(f.\"table\", 1, length(?1)) <> ?1 LIMIT 1";
    let mut stmt = conn.prepare_cached(sql).map_err(|e| map_err(e, sql))?;
    let mut rows = stmt.query([prefix]).map_err(|e| map_err(e, sql))?;
    if let Some(r) = rows.next().map_err(|e| map_err(e, sql))? {
        let (table, target): (String, String) = (
            r.get(0).map_err(|e| map_err(e, sql))?,
            r.get(1).map_err(|e| map_err(e, sql))?,
        );
        return Err(Error::Invalid(format!(
            "table {table:?} may not reference {target:?}: a tenant's foreign keys stay \
             within its own tables"
        )));
    }
    Ok(())
}

/// Installs the authorizer that confines tenant SQL (see [`Tx::confined`]).
/// It runs only while statements are compiled; kernel statements (no scope)
/// are allowed everything, as before.
fn install_authorizer(conn: &Connection, confine: Arc<Mutex<Option<Confinement>>>) {
    conn.authorizer(Some(move |ctx: AuthContext<'_>| {
        let guard = lock(&confine);
        let Some(scope) = guard.as_ref() else {
            return Authorization::Allow;
        };
        let verdict = authorize(scope, &ctx);
        if verdict {
            Authorization::Allow
        } else {
            Authorization::Deny
        }
    }));
}

/// Whether tenant SQL under `scope` may do what `ctx` describes.
///
/// DDL: SQLite asks to write the schema table before it names the object
/// (CREATE TABLE: INSERT on sqlite_master, then CREATE_TABLE); the schema
/// write is allowed to a writing scope because every DDL action is
/// authorized on its own below (and SQLite itself refuses direct writes to
/// the schema table without PRAGMA writable_schema, which is denied).
fn authorize(scope: &Confinement, ctx: &AuthContext<'_>) -> bool {
    let main = ctx.database_name.is_none_or(|d| d == "main");
    let ours = |t: &str| main && t.starts_with(&scope.table_prefix);
    let schema = |t: &str| main && (t == "sqlite_master" || t == "sqlite_schema");
    let w = scope.write;
    match ctx.action {
        AuthAction::Select | AuthAction::Recursive | AuthAction::Function { .. } => true,
        // DDL also reads the schema table's rowids (nothing a tenant could
        // learn from).
        AuthAction::Read {
            table_name,
            column_name,
        } => ours(table_name) || (w && schema(table_name) && column_name == "ROWID"),
        AuthAction::Insert { table_name }
        | AuthAction::Delete { table_name }
        | AuthAction::Update { table_name, .. } => w && (ours(table_name) || schema(table_name)),
        AuthAction::CreateTable { table_name } | AuthAction::DropTable { table_name } => {
            w && ours(table_name)
        }
        AuthAction::CreateIndex {
            index_name,
            table_name,
        }
        | AuthAction::DropIndex {
            index_name,
            table_name,
        } => w && ours(table_name) && ours(index_name),
        // PRAGMA, ATTACH, transactions and savepoints, triggers, views,
        // temporary objects, virtual tables, ALTER, ANALYZE, REINDEX.
        _ => false,
    }
}

/// Page cache of each writer and partition reader, in KiB.
const CACHE_KIB: u32 = 32 << 10;
/// How much of a partition's file a writer or partition reader maps.
const MMAP_BYTES: u64 = 1 << 30;

/// The pragmas of a partition's writer at `durability`: what a benchmark's
/// raw SQLite peer sets too, so that both do the same work.
pub fn writer_pragmas(durability: Durability) -> String {
    let sync = match durability {
        Durability::Off => "OFF",
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    // A page cache of CACHE_KIB per connection and the database file mapped
    // (up to MMAP_BYTES): a read of a page the OS holds costs no system
    // call — on a virtual machine, a pread per page was most of a point
    // read's time.
    format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON; \
         PRAGMA temp_store=MEMORY; PRAGMA cache_size=-{CACHE_KIB}; PRAGMA mmap_size={MMAP_BYTES};"
    )
}

fn open_writer(
    path: &Path,
    durability: Durability,
    counts: &'static crate::columnar::changes::Counts,
) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| map_err(e, "open"))?;
    let pragmas = writer_pragmas(durability);
    conn.execute_batch(&pragmas)
        .map_err(|e| map_err(e, &pragmas))?;
    configure_connection(&conn)?;
    // Tenant SQL (stored procedures) runs on the writer too.
    crate::dialect::install(&conn).map_err(|e| map_err(e, "install the dialect's functions"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_MAX);
    conn.wal_hook(Some(wal_hook));
    // Which tables each transaction changes, for the columnar engine's
    // snapshots (published by the WAL hook once committed).
    crate::columnar::changes::watch(&conn, counts);
    Ok(conn)
}

/// Records the partition layout and applies pending migrations, atomically.
fn init_partition(
    conn: &Connection,
    p: u32,
    partitions: u32,
    migrations: &[Migration],
) -> Result<()> {
    let tx = conn
        .unchecked_transaction()
        .map_err(|e| map_err(e, "BEGIN"))?;
    let meta = "CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)";
    tx.execute_batch(meta).map_err(|e| map_err(e, meta))?;
    for (key, value) in [("partition", p), ("partitions", partitions)] {
        let existing: Option<String> = tx
            .query_row("SELECT value FROM store_meta WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .ok();
        match existing {
            None => {
                tx.execute(
                    "INSERT INTO store_meta (key, value) VALUES (?1, ?2)",
                    rusqlite::params![key, value.to_string()],
                )
                .map_err(|e| map_err(e, "INSERT INTO store_meta"))?;
            }
            Some(v) if v == value.to_string() => {}
            Some(v) => {
                return Err(Error::Config(format!(
                    "partition file {p} records {key} = {v}, expected {value}"
                )))
            }
        }
    }
    tx.execute_batch(migrate::SCHEMA_VERSION_DDL)
        .map_err(|e| map_err(e, migrate::SCHEMA_VERSION_DDL))?;
    let recorded: Vec<(u32, String)> = {
        let sql = "SELECT version, name FROM schema_version ORDER BY version";
        let mut stmt = tx.prepare(sql).map_err(|e| map_err(e, sql))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| map_err(e, sql))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| map_err(e, sql))?
    };
    for m in migrate::pending(&recorded, migrations)? {
        tx.execute_batch(m.sqlite).map_err(|e| {
            Error::Migration(format!(
                "{} {}: {}",
                m.version,
                m.name,
                map_err(e, m.sqlite)
            ))
        })?;
        tx.execute(
            "INSERT INTO schema_version (version, name, applied_us) VALUES (?1, ?2, ?3)",
            rusqlite::params![m.version, m.name, crate::now_us()],
        )
        .map_err(|e| map_err(e, "INSERT INTO schema_version"))?;
    }
    tx.commit().map_err(|e| map_err(e, "COMMIT"))
}

/// Converts a rusqlite error, keeping the statement, code and position.
pub(crate) fn map_err(e: rusqlite::Error, statement: &str) -> Error {
    match e {
        rusqlite::Error::SqliteFailure(err, msg) => Error::sql(
            statement,
            SqlCode::Sqlite {
                primary: err.extended_code & 0xff,
                extended: err.extended_code,
            },
            msg.unwrap_or_else(|| err.to_string()),
            None,
        ),
        rusqlite::Error::SqlInputError {
            error, msg, offset, ..
        } => Error::sql(
            statement,
            SqlCode::Sqlite {
                primary: error.extended_code & 0xff,
                extended: error.extended_code,
            },
            msg,
            usize::try_from(offset).ok(),
        ),
        other => Error::sql(statement, SqlCode::None, other.to_string(), None),
    }
}

pub(crate) struct Param<'a>(pub(crate) &'a Value);

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self.0 {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Real(r) => ValueRef::Real(*r),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

fn to_value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(r) => Value::Real(r),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// `$1` … `$64`: the names SQLite gives a kernel statement's parameters.
static PARAM_NAMES: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(|| (1..=NAMED_PARAMS_MAX).map(|i| format!("${i}")).collect());

/// Binds `params` to a kernel statement prepared from the house dialect's
/// text as is. SQLite reads `$N` as a parameter *named* "$N" (indexed by
/// first appearance, so `SET v = $2 WHERE k = $1` must not be bound by
/// position): each value is bound to the index its name has, which the
/// prepared statement caches. So the text needs no rewrite per call (see
/// `sql::to_sqlite`, still used for tenant SQL and ad-hoc queries).
fn bind_named(stmt: &mut rusqlite::Statement<'_>, sql: &str, params: &[Value]) -> Result<()> {
    if params.len() > NAMED_PARAMS_MAX || stmt.parameter_count() != params.len() {
        return Err(Error::sql(
            sql,
            SqlCode::None,
            format!(
                "the statement takes {} parameters, {} given (at most {NAMED_PARAMS_MAX})",
                stmt.parameter_count(),
                params.len()
            ),
            None,
        ));
    }
    for (name, v) in PARAM_NAMES.iter().zip(params) {
        let idx = stmt
            .parameter_index(name)
            .map_err(|e| map_err(e, sql))?
            .ok_or_else(|| {
                Error::sql(
                    sql,
                    SqlCode::None,
                    format!("parameter {name} is not used by the statement"),
                    None,
                )
            })?;
        stmt.raw_bind_parameter(idx, Param(v))
            .map_err(|e| map_err(e, sql))?;
    }
    Ok(())
}

fn run_query(
    stmt: &mut rusqlite::Statement<'_>,
    sql: &str,
    params: &[Value],
    limits: &ReadLimits,
) -> Result<Rows> {
    if stmt.parameter_count() != params.len() {
        return Err(Error::sql(
            sql,
            SqlCode::None,
            format!(
                "the statement takes {} parameters, {} given",
                stmt.parameter_count(),
                params.len()
            ),
            None,
        ));
    }
    for (i, v) in params.iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, Param(v))
            .map_err(|e| map_err(e, sql))?;
    }
    let columns: Arc<[String]> = stmt.column_names().into_iter().map(String::from).collect();
    collect_rows(stmt, &columns, sql, limits)
}

/// The rows of `stmt`, its parameters bound, under `limits`; `columns` are
/// its column names.
fn collect_rows(
    stmt: &mut rusqlite::Statement<'_>,
    columns: &Arc<[String]>,
    sql: &str,
    limits: &ReadLimits,
) -> Result<Rows> {
    let cap = limits.cap;
    let mut budget = ByteBudget::default();
    let n = columns.len();
    let mut rows = stmt.raw_query();
    let mut out = Rows {
        columns: columns.clone(),
        ..Rows::default()
    };
    while let Some(row) = rows.next().map_err(|e| map_err(e, sql))? {
        if limits.cancelled() {
            return Err(limits.stopped(sql));
        }
        if out.rows.len() >= cap.rows() {
            cap.exceeded(sql, &mut out)?;
            break;
        }
        let mut values = Vec::with_capacity(n);
        for i in 0..n {
            values.push(to_value(row.get_ref(i).map_err(|e| map_err(e, sql))?));
        }
        if !budget.admit(limits, &values, sql, &mut out)? {
            break;
        }
        out.rows.push(Row::new(columns.clone(), values));
    }
    Ok(out)
}

/// A kernel statement's rows (a procedure's, or a read-only procedure's).
fn kernel_query(conn: &Conn, sql: &'static str, params: &[Value]) -> Result<Rows> {
    conn.with(sql, params, |stmt, columns| {
        collect_rows(stmt, columns, sql, &ReadLimits::KERNEL)
    })
}

/// A statement built at run time: its rows.
fn text_query(conn: &Connection, sql: &str, params: &[Value]) -> Result<Rows> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| map_err(e, sql))?;
    bind_named(&mut stmt, sql, params)?;
    let columns: Arc<[String]> = stmt.column_names().into_iter().map(String::from).collect();
    collect_rows(&mut stmt, &columns, sql, &ReadLimits::KERNEL)
}

/// A statement built at run time: the rows it changed.
fn text_execute(conn: &Connection, sql: &str, params: &[Value]) -> Result<u64> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| map_err(e, sql))?;
    bind_named(&mut stmt, sql, params)?;
    let n = stmt.raw_execute().map_err(|e| map_err(e, sql))?;
    Ok(n as u64)
}

/// A procedure's transaction on the executor's connection.
struct SqliteTx<'c> {
    conn: &'c Conn,
    confine: &'c Mutex<Option<Confinement>>,
    p_key: PKey,
    /// What it queued for after the commit.
    after: After,
    /// On a tenant connection: since when it holds the write lock, once
    /// seen ([`Tx::writing_since`]); `None` forever on the writer.
    writing: Option<std::cell::Cell<Option<std::time::Instant>>>,
    /// On a tenant connection: the partition's gate, passed before its
    /// first statement that may write ([`SqliteTx::may_write`]).
    gate: Option<&'c WriteGate>,
    /// The gate passed, until the transaction ends.
    pass: Option<GatePass<'c>>,
}

impl SqliteTx<'_> {
    /// Before a statement that may write: on a tenant connection, passes
    /// the partition's gate first (once per transaction).
    fn may_write(&mut self) {
        if let (Some(gate), None) = (self.gate, &self.pass) {
            self.pass = Some(gate.tenant_enter());
        }
    }

    /// [`may_write`](Self::may_write) for `sql` unless it only reads.
    fn may_write_sql(&mut self, sql: &str) -> Result<()> {
        if self.gate.is_none() || self.pass.is_some() {
            return Ok(());
        }
        let readonly = self
            .conn
            .prepare_cached(sql)
            .map(|s| s.readonly())
            .map_err(|e| map_err(e, sql))?;
        if !readonly {
            self.may_write();
        }
        Ok(())
    }
}

impl Tx for SqliteTx<'_> {
    fn p_key(&self) -> PKey {
        self.p_key
    }
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        self.may_write();
        self.conn.with(sql, params, |stmt, _| {
            let n = stmt.raw_execute().map_err(|e| map_err(e, sql))?;
            Ok(n as u64)
        })
    }
    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Rows> {
        // Kernel queries may write too (`INSERT … RETURNING`).
        self.may_write_sql(sql)?;
        kernel_query(self.conn, sql, params)
    }
    fn execute_text(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        self.may_write();
        text_execute(self.conn, sql, params)
    }
    fn query_text(&mut self, sql: &str, params: &[Value]) -> Result<Rows> {
        self.may_write_sql(sql)?;
        text_query(self.conn, sql, params)
    }
    fn confined(
        &mut self,
        sql: &str,
        params: &[Value],
        scope: &Confinement,
        max_rows: usize,
    ) -> Result<(Rows, u64)> {
        if scope.write {
            self.may_write();
        }
        confined_on(self.conn, self.confine, sql, params, scope, max_rows)
    }
    fn drop_tables(&mut self, prefix: &str) -> Result<u64> {
        self.may_write();
        if prefix.is_empty() {
            return Err(Error::Invalid("dropping tables needs a prefix".into()));
        }
        let sql = "SELECT name FROM sqlite_master WHERE type = 'table' \
                   AND substr(name, 1, length(?1)) = ?1";
        let names: Vec<String> = {
            let mut stmt = self.conn.prepare(sql).map_err(|e| map_err(e, sql))?;
            let rows = stmt
                .query_map([prefix], |r| r.get::<_, String>(0))
                .map_err(|e| map_err(e, sql))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| map_err(e, sql))?
        };
        for name in &names {
            // A quoted identifier: the name is the tenant's text.
            let drop = format!("DROP TABLE \"{}\"", name.replace('"', "\"\""));
            self.conn
                .execute(&drop, [])
                .map_err(|e| map_err(e, &drop))?;
        }
        Ok(names.len() as u64)
    }
    fn tables_bytes(&mut self, prefix: &str) -> Result<i64> {
        // dbstat in aggregate mode, one row per b-tree, looked up by name:
        // the work is the pages of the prefix's tables, not the file's.
        let sql = "SELECT coalesce(sum(d.pgsize), 0) FROM sqlite_master AS m, \
                   dbstat('main', 1) AS d \
                   WHERE substr(m.tbl_name, 1, length(?1)) = ?1 AND d.name = m.name";
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| map_err(e, sql))?;
        stmt.query_row([prefix], |r| r.get::<_, i64>(0))
            .map_err(|e| map_err(e, sql))
    }
    fn notify(&mut self, channel: &str, payload: &str) -> Result<()> {
        feed::queue(&mut self.after.notes, channel, payload)
    }
    fn after_commit(&mut self, hook: AfterCommit) -> Result<()> {
        crate::queue_hook(&mut self.after.hooks, hook)
    }
    fn writing_since(&self) -> Option<std::time::Instant> {
        // Looked at when asked (after each host call of tenant code), not
        // after every statement: the write happened during the last call.
        let writing = self.writing.as_ref()?;
        if writing.get().is_none()
            && self.conn.transaction_state(Some("main")).ok()
                == Some(rusqlite::TransactionState::Write)
        {
            writing.set(Some(std::time::Instant::now()));
        }
        writing.get()
    }
}

/// Tenant SQL on `conn` under `scope` (see [`Tx::confined`]); `confine` is
/// what `conn`'s authorizer consults.
///
/// A writing statement runs in a savepoint of its own, rolled back when the
/// statement is refused after it ran (a foreign key out of the realm's
/// tables): the refusal is an error the tenant's code may catch and go on
/// from, and its procedure may then commit — which must not commit the
/// refused table too (issue 36, item 3).
fn confined_on(
    conn: &Connection,
    confine: &Mutex<Option<Confinement>>,
    sql: &str,
    params: &[Value],
    scope: &Confinement,
    max_rows: usize,
) -> Result<(Rows, u64)> {
    if scope.table_prefix.is_empty() {
        return Err(Error::Invalid("a confinement needs a table prefix".into()));
    }
    if !scope.write {
        return confined_statement(conn, confine, sql, params, scope, max_rows);
    }
    const BEGIN: &str = "SAVEPOINT tenant_statement";
    conn.execute_batch(BEGIN).map_err(|e| map_err(e, BEGIN))?;
    let done = confined_statement(conn, confine, sql, params, scope, max_rows);
    let end = match done {
        Ok(_) => "RELEASE tenant_statement",
        Err(_) => "ROLLBACK TO tenant_statement; RELEASE tenant_statement",
    };
    conn.execute_batch(end).map_err(|e| map_err(e, end))?;
    done
}

/// [`confined_on`]'s statement: compiled under the scope, run under its
/// deadline and bounds, and refused if it left a foreign key out of the
/// realm's tables.
fn confined_statement(
    conn: &Connection,
    confine: &Mutex<Option<Confinement>>,
    sql: &str,
    params: &[Value],
    scope: &Confinement,
    max_rows: usize,
) -> Result<(Rows, u64)> {
    // Only a writing scope may change the schema: a read costs no PRAGMA.
    let schema_before = if scope.write {
        Some(schema_version(conn)?)
    } else {
        None
    };
    // Compiled under the scope, never from (or into) the statement
    // cache: a cached statement was authorized for whoever prepared it.
    *lock(confine) = Some(scope.clone());
    let prepared = user_sql(sql).and_then(|t| conn.prepare(&t).map_err(|e| map_err(e, sql)));
    *lock(confine) = None;
    let mut stmt = prepared?;
    if !scope.write && !stmt.readonly() {
        return Err(Error::ReadOnly(format!(
            "this statement would change the database; use a write call: {sql}"
        )));
    }
    let before = conn.total_changes();
    let length = rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH;
    let kernel_length = conn.limit(length).map_err(|e| map_err(e, sql))?;
    conn.set_limit(length, crate::TENANT_VALUE_BYTES_MAX)
        .map_err(|e| map_err(e, sql))?;
    if let Some(deadline) = scope.deadline {
        conn.progress_handler(
            PROGRESS_STEPS,
            Some(move || std::time::Instant::now() >= deadline),
        );
    }
    let rows = run_query(
        &mut stmt,
        sql,
        params,
        &ReadLimits::rows(Cap::Fail(max_rows)),
    );
    drop(stmt);
    if scope.deadline.is_some() {
        conn.progress_handler(0, None::<fn() -> bool>);
    }
    conn.set_limit(length, kernel_length)
        .map_err(|e| map_err(e, sql))?;
    let rows = rows.map_err(|e| match scope.deadline {
        Some(d) if std::time::Instant::now() >= d => Error::Timeout(format!(
            "tenant SQL ran past its procedure's deadline and was stopped: {sql}"
        )),
        _ => e,
    })?;
    let changed = conn.total_changes().saturating_sub(before);
    // Whatever the statement's text looked like, a changed schema is
    // checked.
    if schema_before.is_some() && Some(schema_version(conn)?) != schema_before {
        refuse_foreign_keys_out(conn, &scope.table_prefix)?;
    }
    Ok((rows, changed))
}

/// The schema's version number: changed by every DDL statement.
fn schema_version(conn: &Connection) -> Result<i64> {
    const SQL: &str = "PRAGMA schema_version";
    conn.query_row(SQL, [], |r| r.get(0))
        .map_err(|e| map_err(e, SQL))
}

struct Executor {
    conn: Conn,
    /// Held from COMMIT to the end of publishing, by the partition's
    /// writer and its tenant connections alike: notifications are
    /// published in commit order (see "Tenant code" above).
    commit_order: Arc<Mutex<()>>,
    /// Passed before taking the partition's write lock ([`WriteGate`]).
    gate: Arc<WriteGate>,
    /// What the connection's authorizer allows while tenant SQL is being
    /// compiled; `None` (kernel SQL) allows everything.
    confine: Arc<Mutex<Option<Confinement>>>,
    p_key: PKey,
    feed: Arc<Feed>,
    stats: Arc<Stats>,
    checkpoints: SyncSender<()>,
    /// A tenant connection (see "Tenant code" above), not the writer.
    tenant: bool,
}

/// A job that has run and waits for the commit before it is answered.
struct Ran {
    done: tokio::sync::oneshot::Sender<Outcome>,
    fail: fn(Error) -> Box<dyn Any + Send>,
    outcome: Outcome,
}

/// What the connections of one partition (its writer and its tenant
/// connections) share.
#[derive(Clone)]
struct PartitionShared {
    p_key: PKey,
    feed: Arc<Feed>,
    stats: Arc<Stats>,
    checkpoints: SyncSender<()>,
    commit_order: Arc<Mutex<()>>,
    gate: Arc<WriteGate>,
}

impl Executor {
    /// The writer of a partition (`tenant` false) or one of its tenant
    /// connections.
    fn new(conn: Connection, shared: PartitionShared, tenant: bool) -> Executor {
        let confine = Arc::new(Mutex::new(None));
        install_authorizer(&conn, confine.clone());
        let PartitionShared {
            p_key,
            feed,
            stats,
            checkpoints,
            commit_order,
            gate,
        } = shared;
        Executor {
            conn: Conn::new(conn),
            commit_order,
            gate,
            confine,
            p_key,
            feed,
            stats,
            checkpoints,
            tenant,
        }
    }

    fn exec(&self, sql: &str) -> Result<()> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(|_| ())
            .map_err(|e| map_err(e, sql))
    }

    fn run_batch(&self, batch: &mut Vec<Job>) {
        // Held to the end of the batch's transaction (committed or not).
        let _pass = self.gate.writer_enter();
        let timings = self.stats.partition(self.p_key);
        let began = std::time::Instant::now();
        // Timed whatever way the transaction ends.
        let _timed = Timed(timings.map(|t| (&t.transaction, began)));
        if let Some(t) = timings {
            for job in batch.iter() {
                t.queued
                    .observe(began.saturating_duration_since(job.queued_at));
            }
        }
        if let Err(e) = self.exec("BEGIN IMMEDIATE") {
            for job in batch.drain(..) {
                job.finish_err(e.clone());
            }
            return;
        }
        // A batch of one needs no savepoint: if its procedure fails, the
        // whole transaction rolls back instead (two statements fewer on
        // the path an idle partition's caller takes).
        let alone = batch.len() == 1;
        let mut ran = Vec::with_capacity(batch.len());
        let mut after = After::default();
        for mut job in batch.drain(..) {
            let outcome = if alone {
                self.run_alone(&mut job, &mut after)
            } else {
                self.run_one(&mut job, &mut after)
            };
            ran.push(Ran {
                done: job.done,
                fail: job.fail,
                outcome,
            });
        }
        if alone && ran[0].outcome.is_err() {
            // Nothing to keep: undo it all; the job's own error stands.
            let _ = self.exec("ROLLBACK");
            let r = ran.pop().expect("a batch of one");
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            let _ = r.done.send(r.outcome);
            return;
        }
        let order = lock_order(&self.commit_order);
        let committed = self.exec("COMMIT");
        match committed {
            Ok(()) => {
                self.committed(after);
                drop(order);
                for r in ran {
                    let counter = if r.outcome.is_ok() {
                        &self.stats.committed
                    } else {
                        &self.stats.failed
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let _ = r.done.send(r.outcome);
                }
            }
            Err(e) => {
                let _ = self.exec("ROLLBACK");
                drop(order);
                for r in ran {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    let error = (r.fail)(e.clone());
                    let _ = r.done.send(Err(Failure {
                        error,
                        retryable: false,
                        unavailable: false,
                    }));
                }
            }
        }
    }

    /// After a commit, under the commit-order lock: counts it, asks for a
    /// checkpoint if the WAL grew, publishes what the transaction's
    /// procedures queued and runs their hooks.
    fn committed(&self, after: After) {
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        let pages = WAL_PAGES.with(std::cell::Cell::get);
        if pages >= WAL_PAGES_MAX {
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        } else if pages >= CHECKPOINT_WAL_PAGES {
            // Full means one is already pending: nothing to add.
            let _ = self.checkpoints.try_send(());
        }
        self.feed.publish(&after.notes);
        crate::run_hooks(after.hooks);
    }

    /// Runs one job of tenant code on this tenant connection (see "Tenant
    /// code" above) and answers it: in a deferred transaction, which takes
    /// the partition's write lock only at its first write; a write on a
    /// stale snapshot (the writer committed meanwhile) rolls back and runs
    /// the job again, and after [`STALE_RETRIES_MAX`] such retries the job
    /// runs in an immediate transaction, which cannot go stale.
    fn run_tenant(&self, mut job: Job) {
        let timings = self.stats.partition(self.p_key);
        if let Some(t) = timings {
            t.queued.observe(job.queued_at.elapsed());
        }
        let _timed = Timed(timings.map(|t| (&t.transaction, std::time::Instant::now())));
        let mut stale = 0;
        loop {
            let immediate = stale >= STALE_RETRIES_MAX;
            // Immediate: the gate first, as the writer does.
            let early = immediate.then(|| self.gate.tenant_enter());
            let begin = if immediate {
                "BEGIN IMMEDIATE"
            } else {
                "BEGIN DEFERRED"
            };
            if let Err(e) = self.exec(begin) {
                return job.finish_err(e);
            }
            let mut tx = self.tx();
            if let Some(p) = early {
                // Immediate: it holds the write lock from the start.
                tx.pass = Some(p);
                tx.writing = Some(std::cell::Cell::new(Some(std::time::Instant::now())));
            }
            let outcome = job.run_caught(&mut tx);
            // The pass is left when the transaction ends, below.
            let SqliteTx { after, pass, .. } = tx;
            let outcome = match outcome {
                Ok(v) => {
                    let order = lock_order(&self.commit_order);
                    let committed = self.exec("COMMIT");
                    if committed.is_err() {
                        let _ = self.exec("ROLLBACK");
                    }
                    drop(pass);
                    match committed {
                        Ok(()) => {
                            self.committed(after);
                            drop(order);
                            self.stats.committed.fetch_add(1, Ordering::Relaxed);
                            Ok(v)
                        }
                        Err(e) => {
                            drop(order);
                            self.stats.failed.fetch_add(1, Ordering::Relaxed);
                            Err(job.failure(e))
                        }
                    }
                }
                Err(f) => {
                    let _ = self.exec("ROLLBACK");
                    drop(pass);
                    if f.retryable && stale < STALE_RETRIES_MAX {
                        stale += 1;
                        self.stats.retries.fetch_add(1, Ordering::Relaxed);
                        // Another holds the write lock, or has just let it
                        // go: wait for the gate to be free, so the next
                        // run starts on the latest state.
                        drop(self.gate.tenant_enter());
                        continue;
                    }
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    Err(f)
                }
            };
            let _ = job.done.send(outcome);
            return;
        }
    }

    /// Runs the only procedure of a batch, with no savepoint (a failure
    /// rolls the whole transaction back); on success what it queued for
    /// after the commit is added to `after`.
    fn run_alone(&self, job: &mut Job, after: &mut After) -> Outcome {
        let mut tx = self.tx();
        let outcome = job.run_caught(&mut tx);
        if outcome.is_ok() {
            after.append(tx.after);
        }
        outcome
    }

    /// A procedure's transaction on this executor's connection.
    fn tx(&self) -> SqliteTx<'_> {
        SqliteTx {
            conn: &self.conn,
            confine: &self.confine,
            p_key: self.p_key,
            after: After::default(),
            writing: self.tenant.then(Default::default),
            gate: self.tenant.then_some(&*self.gate),
            pass: None,
        }
    }

    /// Runs one procedure inside its own savepoint; on success what it
    /// queued for after the commit is added to `after`.
    fn run_one(&self, job: &mut Job, after: &mut After) -> Outcome {
        if let Err(e) = self.exec("SAVEPOINT proc") {
            return Err(job.failure(e));
        }
        let mut tx = self.tx();
        let outcome = job.run_caught(&mut tx);
        let queued = tx.after;
        let closed = match &outcome {
            Ok(_) => self.exec("RELEASE proc"),
            Err(_) => self
                .exec("ROLLBACK TO proc")
                .and_then(|()| self.exec("RELEASE proc")),
        };
        match (outcome, closed) {
            (Ok(v), Ok(())) => {
                after.append(queued);
                Ok(v)
            }
            (Ok(_), Err(e)) => Err(job.failure(e)),
            (Err(f), _) => Err(f),
        }
    }
}

/// Observes the time from its start into its timing when dropped.
struct Timed<'a>(Option<(&'a crate::Timing, std::time::Instant)>);

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        if let Some((t, from)) = self.0.take() {
            t.observe(from.elapsed());
        }
    }
}

/// What a batch's procedures queued for after its commit: dropped unsent
/// and unrun if the commit fails.
#[derive(Default)]
struct After {
    notes: Vec<Notification>,
    hooks: Vec<AfterCommit>,
}

impl After {
    /// Adds what one more procedure queued (it succeeded).
    fn append(&mut self, mut other: After) {
        self.notes.append(&mut other.notes);
        self.hooks.append(&mut other.hooks);
    }
}

/// Connections (and threads) per partition that run tenant code: long
/// procedures of different realms run side by side, and never on the
/// writer. The last free one goes only to a realm running none
/// ([`FairQueue::pop_long_within`]), so one realm's long calls cannot make
/// another's wait for one of them to end.
pub const TENANT_CONNECTIONS: usize = 3;

/// Times tenant code runs again after a write on a stale snapshot (or
/// while another held the write lock) before it runs in an immediate
/// transaction (see [`Executor::run_tenant`]).
const STALE_RETRIES_MAX: u32 = 3;

fn lock_order(m: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    // Nothing panics while it is held but SQLite's COMMIT and publishing,
    // which leave nothing half-done for the next holder.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Who takes a partition's write lock next, decided in this process: the
/// writer and the tenant connections pass this gate before they take
/// SQLite's lock (the writer before BEGIN IMMEDIATE, tenant code before its
/// first statement that may write) and leave it when their transaction
/// ends. SQLite's lock is not fair — a tenant connection letting go of it
/// could take it again, or hand it to another, before the writer's busy
/// handler looks — so a writer that waits goes first: it waits at most for
/// the tenant code holding the lock now, which holds it at most
/// `WRITE_HOLD_MAX`.
#[derive(Debug, Default)]
struct WriteGate {
    state: Mutex<GateState>,
    turn: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    held: bool,
    writers_waiting: usize,
}

impl WriteGate {
    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        // Only flags and counts change under the lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer's turn: ahead of every tenant connection waiting.
    fn writer_enter(&self) -> GatePass<'_> {
        let mut st = self.state();
        st.writers_waiting += 1;
        while st.held {
            st = self.turn.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.writers_waiting -= 1;
        st.held = true;
        GatePass(self)
    }

    /// A tenant connection's turn: once no one holds the gate and the
    /// writer does not wait for it.
    fn tenant_enter(&self) -> GatePass<'_> {
        let mut st = self.state();
        while st.held || st.writers_waiting > 0 {
            st = self.turn.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.held = true;
        GatePass(self)
    }
}

/// The gate held, until dropped.
struct GatePass<'g>(&'g WriteGate);

impl Drop for GatePass<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state();
        debug_assert!(st.held, "a pass leaves once");
        st.held = false;
        drop(st);
        self.0.turn.notify_all();
    }
}

/// A partition's tenant connections and the long jobs that wait for one.
struct Tenants {
    state: Mutex<TenantState>,
    /// Wakes tenant threads: a job was queued or a connection freed, or
    /// the partition is closing.
    wake: Condvar,
    open: OpenTenant,
}

struct TenantState {
    /// Long jobs waiting, by realm (start-time fair queuing on run time).
    queue: FairQueue<Job>,
    /// Connections opened and not running a job; the jobs running (the
    /// queue's `running_long`) hold `opened - idle.len()`.
    idle: Vec<Executor>,
    /// Connections opened so far: they are opened when first needed (a
    /// node with many partitions and little tenant code keeps its file
    /// descriptors), at most [`TENANT_CONNECTIONS`].
    opened: usize,
    closed: bool,
}

impl TenantState {
    /// The next job to run, if a connection is free for it: an idle one,
    /// or one more (up to [`TENANT_CONNECTIONS`]) — past the first only
    /// while opening it (its database file and WAL) leaves the process
    /// enough descriptors free ([`crate::descriptors`]); else the job waits
    /// for a connection open to be freed. The descriptors are asked for
    /// only when a job would open one, and held (the [`Opening`]) until
    /// [`Tenants::run`] has opened it, so two openings cannot both take
    /// the last room.
    ///
    /// [`Opening`]: crate::descriptors::Opening
    fn pop(&mut self) -> Option<(Arc<str>, Job, Option<crate::descriptors::Opening>)> {
        let mut room = None;
        if self.idle.is_empty()
            && self.opened > 0
            && self.queue.next_long_within(TENANT_CONNECTIONS).is_some()
        {
            room = Some(crate::descriptors::reserve(2)?);
        }
        let (realm, job) = self.queue.pop_long_within(TENANT_CONNECTIONS)?;
        Some((realm, job, room))
    }
}

/// Opens one more tenant connection of a partition.
type OpenTenant = Box<dyn Fn() -> Result<Executor> + Send + Sync>;

impl Tenants {
    fn new(open: OpenTenant) -> Tenants {
        Tenants {
            state: Mutex::new(TenantState {
                queue: FairQueue::default(),
                idle: Vec::new(),
                opened: 0,
                closed: false,
            }),
            wake: Condvar::new(),
            open,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TenantState> {
        // A panic never happens under this lock (only queue operations).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues long `job`; with `inline`, a caller that finds a connection
    /// free and no job waiting runs it on its own thread.
    fn submit(&self, job: Job, inline: bool) {
        let mut st = self.state();
        if st.closed {
            drop(st);
            return job.finish_err(Error::Closed);
        }
        // Here only if nothing waits before it (the pop below then takes
        // this job, if a connection is free or may be opened).
        let run_here = inline && !st.queue.has_long();
        if let Err((job, why)) = st.queue.push(&job.share.clone(), job) {
            drop(st);
            let e = overloaded(&job, why);
            return job.finish_err(e);
        }
        if run_here {
            if let Some((realm, job, room)) = st.pop() {
                return self.run(st, realm, job, room);
            }
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Runs `job` of `realm` (popped, so counted as running) on a free
    /// connection, on this thread; then frees the connection, charges the
    /// run time and wakes a thread for what may now run.
    fn run(
        &self,
        mut st: std::sync::MutexGuard<'_, TenantState>,
        realm: Arc<str>,
        job: Job,
        room: Option<crate::descriptors::Opening>,
    ) {
        debug_assert!(st.idle.len() <= st.opened && st.opened <= TENANT_CONNECTIONS);
        // Taken under the lock, opened (file system work) outside it; the
        // lock is released on every path before the job runs.
        let idle = st.idle.pop();
        let open = idle.is_none() && st.opened < TENANT_CONNECTIONS;
        if open {
            st.opened += 1;
        }
        drop(st);
        let conn = match idle {
            Some(c) => Ok(c),
            None if open => (self.open)(),
            // The pop said a slot was free: a broken invariant, not a panic.
            None => Err(Error::Internal("no tenant connection free".into())),
        };
        // Opened (now counted in /proc/self/fd) or not: the room is given up.
        drop(room);
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                let mut st = self.state();
                if open {
                    st.opened -= 1; // not opened after all
                }
                st.queue.charge(&realm, std::time::Duration::ZERO);
                drop(st);
                self.wake.notify_one();
                return job.finish_err(e);
            }
        };
        let started = std::time::Instant::now();
        conn.run_tenant(job);
        let mut st = self.state();
        st.idle.push(conn);
        st.queue.charge(&realm, started.elapsed());
        drop(st);
        self.wake.notify_one();
    }

    /// A tenant thread: runs queued jobs while a connection is free; on
    /// close, once nothing waits or runs, returns.
    fn thread(&self) {
        let mut st = self.state();
        loop {
            if let Some((realm, job, room)) = st.pop() {
                self.run(st, realm, job, room);
                st = self.state();
                continue;
            }
            if st.closed && st.queue.is_empty() {
                self.wake.notify_all();
                return;
            }
            st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn close(&self) {
        self.state().closed = true;
        self.wake.notify_all();
    }
}

/// A partition's writer: the executor connection, and who may use it.
struct Partition {
    /// Tenant code's connections (see "Tenant code" above).
    tenants: Tenants,
    lane: Mutex<Lane>,
    /// Wakes the executor thread: the lead was handed to it, or the
    /// partition is closing.
    wake: Condvar,
    /// Locked only by the current leader (so never contended; the lock
    /// makes the hand-over between threads visible to the compiler too).
    writer: Mutex<Executor>,
}

/// The queue of a partition and the state of its lead.
#[derive(Default)]
struct Lane {
    /// Jobs waiting for the next batch, by realm; only non-empty while
    /// `leading`.
    queue: FairQueue<Job>,
    /// A leader (a caller's thread or the executor thread) is running
    /// batches; new jobs queue for it.
    leading: bool,
    /// The lead is with the executor thread (set by the caller's thread
    /// that handed it over, cleared by the executor when the queue runs
    /// dry).
    handed: bool,
    /// The store is closing: no new jobs; the executor drains and exits.
    closed: bool,
    /// When the executor last gave the lead up (see [`BUSY_COOLDOWN`]).
    executor_left: Option<std::time::Instant>,
}

impl Partition {
    fn new(executor: Executor, open_tenant: OpenTenant) -> Partition {
        Partition {
            tenants: Tenants::new(open_tenant),
            lane: Mutex::new(Lane::default()),
            wake: Condvar::new(),
            writer: Mutex::new(executor),
        }
    }

    fn lane(&self) -> std::sync::MutexGuard<'_, Lane> {
        // A panic never happens under this lock (only queue operations).
        self.lane.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `job` now on this thread if `inline` and the partition is idle;
    /// otherwise queues it for the running leader's next batch, handing the
    /// lead to the executor thread if no one leads.
    fn submit(&self, job: Job, inline: bool) {
        if job.share.long {
            return self.tenants.submit(job, inline);
        }
        let mut lane = self.lane();
        if lane.closed {
            drop(lane);
            return job.finish_err(Error::Closed);
        }
        if lane.leading {
            if let Err((job, why)) = lane.queue.push(&job.share.clone(), job) {
                drop(lane);
                let e = overloaded(&job, why);
                return job.finish_err(e);
            }
            return;
        }
        debug_assert!(lane.queue.is_empty(), "jobs queued with no leader");
        let busy = lane
            .executor_left
            .is_some_and(|t| t.elapsed() < BUSY_COOLDOWN);
        if !inline || busy {
            if let Err((job, why)) = lane.queue.push(&job.share.clone(), job) {
                drop(lane);
                let e = overloaded(&job, why);
                return job.finish_err(e);
            }
            lane.leading = true;
            lane.handed = true;
            drop(lane);
            self.wake.notify_one();
            return;
        }
        lane.leading = true;
        drop(lane);
        // The lead is ours until `Lead` lets go of it, even if a batch
        // panics outside the procedures (which `run_caught` contains).
        let lead = Lead(self);
        let mut batch = vec![job];
        self.writer().run_batch(&mut batch);
        drop(lead);
    }

    /// Queues `jobs` together under one hold of the lane, so that the
    /// leader takes them into one batch (whatever leads: handing the lead
    /// to the executor thread first if no one does).
    fn submit_all(&self, jobs: Vec<Job>) {
        let (long, short): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.share.long);
        for job in long {
            self.tenants.submit(job, false);
        }
        if short.is_empty() {
            return;
        }
        let mut lane = self.lane();
        if lane.closed {
            drop(lane);
            for job in short {
                job.finish_err(Error::Closed);
            }
            return;
        }
        let mut refused = Vec::new();
        for job in short {
            if let Err(full) = lane.queue.push(&job.share.clone(), job) {
                refused.push(full);
            }
        }
        let hand = !lane.leading && !lane.queue.is_empty();
        if hand {
            lane.leading = true;
            lane.handed = true;
        }
        drop(lane);
        if hand {
            self.wake.notify_one();
        }
        for (job, why) in refused {
            let e = overloaded(&job, why);
            job.finish_err(e);
        }
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Executor> {
        // A panic while this is held leaves the connection as SQLite left
        // it; the next BEGIN fails cleanly if a transaction is still open.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The executor thread: waits to be handed the lead, then runs every
    /// queued job in batches until the queue is empty; on close, drains
    /// the queue and returns.
    fn executor_thread(&self) {
        let mut batch: Vec<Job> = Vec::with_capacity(BATCH_PROCS_MAX);
        // While leading, when the queue last ran dry (see EXECUTOR_LINGER).
        let mut dry_since: Option<std::time::Instant> = None;
        // While leading, whether a batch held more than one job: callers
        // are really concurrent (see BUSY_COOLDOWN), not two colliding once.
        let mut grouped = false;
        let mut lane = self.lane();
        loop {
            while !lane.handed && !lane.closed {
                lane = self.wake.wait(lane).unwrap_or_else(|p| p.into_inner());
            }
            if lane.closed && !lane.handed {
                if lane.leading {
                    // A caller's thread still leads; it hands over (and
                    // wakes us) if it leaves anything queued.
                    lane = self.wake.wait(lane).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                debug_assert!(lane.queue.is_empty());
                return;
            }
            debug_assert!(lane.leading && lane.handed);
            // Only short procedures come here: tenant code runs on the
            // partition's tenant connections.
            debug_assert!(!lane.queue.has_long());
            while batch.len() < BATCH_PROCS_MAX {
                let Some(job) = lane.queue.pop_short() else {
                    break;
                };
                batch.push(job);
            }
            if batch.is_empty() {
                let since = *dry_since.get_or_insert_with(std::time::Instant::now);
                if lane.closed || !grouped || since.elapsed() >= EXECUTOR_LINGER {
                    lane.leading = false;
                    lane.handed = false;
                    lane.executor_left = grouped.then(std::time::Instant::now);
                    dry_since = None;
                    grouped = false;
                } else {
                    drop(lane);
                    std::thread::yield_now();
                    lane = self.lane();
                }
                continue;
            }
            dry_since = None;
            grouped |= batch.len() > 1;
            drop(lane);
            self.writer().run_batch(&mut batch);
            debug_assert!(batch.is_empty());
            lane = self.lane();
        }
    }

    /// Stops taking jobs; the executor and the tenant threads finish what
    /// is queued and exit.
    fn close(&self) {
        self.lane().closed = true;
        self.wake.notify_one();
        self.tenants.close();
    }
}

/// How long the executor keeps the lead after its queue ran dry, looking
/// for more work before it gives the lead up — once its batches have held
/// more than one job. Then the partition is busy, and more jobs are likely
/// within microseconds: kept, they join its next batch; let go, each would
/// run alone on its caller's thread, one commit apiece. Two callers that
/// merely collided once (a ping-pong's send meeting its receive) get the
/// lead back at once instead: spinning here would take a core from them.
/// At one client the executor is never handed the lead, so this costs
/// nothing there.
const EXECUTOR_LINGER: std::time::Duration = std::time::Duration::from_micros(50);

/// For this long after the executor gave the lead up (having grouped more
/// than one job in a batch), `run` queues its job for the executor instead
/// of running it on the caller's thread. Grouped batches mean the
/// partition has concurrent callers; group commit serves those better than
/// one commit per caller, and an async caller running its procedure inline
/// would also hold up the other tasks of its runtime thread, so that they
/// could not queue theirs to share a commit.
const BUSY_COOLDOWN: std::time::Duration = std::time::Duration::from_millis(1);

/// The lead of a partition held by a caller's thread; dropping it gives
/// the lead up, or hands it to the executor thread if jobs were queued
/// meanwhile.
struct Lead<'p>(&'p Partition);

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let mut lane = self.0.lane();
        debug_assert!(lane.leading && !lane.handed);
        if lane.queue.is_empty() {
            lane.leading = false;
            if lane.closed {
                // The executor may be waiting for us to finish.
                self.0.wake.notify_one();
            }
        } else {
            lane.handed = true;
            self.0.wake.notify_one();
        }
    }
}

/// Why a job was not queued on its partition, as the caller sees it.
fn overloaded(job: &Job, why: Refused) -> Error {
    let p_key = job.p_key;
    Error::Overloaded(match why {
        Refused::Full => format!("partition {p_key} has {QUEUE_PROCS_MAX} procedures queued"),
        Refused::ShareFull => format!(
            "realm {} has {SHARE_QUEUE_MAX} procedures queued on partition {p_key}: its share \
             of the queue",
            job.share.realm
        ),
    })
}

/// The cores executor threads are pinned to when the setting asks for it:
/// the ones this process may run on, in order. `None` (no pinning) when it
/// does not, or when the affinity mask cannot be read.
fn pinning_cores(pin: bool) -> Option<Vec<usize>> {
    if !pin {
        return None;
    }
    // SAFETY: `set` is a plain bit mask that sched_getaffinity fills; the
    // size passed is its own.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    let cores: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads bit `c` of a mask of CPU_SETSIZE bits.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    (!cores.is_empty()).then_some(cores)
}

/// Pins the calling thread to `core` (NautDB-style run-to-completion
/// executors: the partition's pages stay in that core's caches). A failure
/// leaves the thread unpinned.
fn pin_to_core(core: usize) {
    // SAFETY: as in `pinning_cores`; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Nice value of executor threads. Every procedure of a partition waits on
/// its executor, so a descheduled executor stalls all of them; running it
/// ahead of the node's other threads (gRPC, clients in the same process)
/// keeps commit latency flat under load. Needs CAP_SYS_NICE; without it the
/// executor keeps the default priority.
const EXECUTOR_NICE: i32 = -10;

fn raise_priority() {
    // SAFETY: gettid and setpriority take no pointers; setpriority on the
    // calling thread's tid changes only this thread's nice value, and its
    // failure (no privilege) is harmless and ignored.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, EXECUTOR_NICE);
    }
}

pub(crate) fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".to_string()
    }
}

/// A read-only procedure's transaction on a partition's read connection.
struct SqliteReadTx<'c> {
    conn: &'c Conn,
    confine: &'c Mutex<Option<Confinement>>,
    p_key: PKey,
    /// A write was refused ([`Tx::refused_write`]).
    refused: bool,
}

impl SqliteReadTx<'_> {
    /// `r`, noting a refused write.
    fn noted<T>(&mut self, r: Result<T>) -> Result<T> {
        if matches!(r, Err(Error::ReadOnly(_))) {
            self.refused = true;
        }
        r
    }
}

/// A write a read connection refused, told as a read-only procedure's.
fn read_refusal(e: Error, sql: &str) -> Error {
    if is_write_refusal(&e) {
        read_only_procedure(&format!("run {sql}"))
    } else {
        e
    }
}

fn read_only_procedure(what: &str) -> Error {
    Error::ReadOnly(format!(
        "a read-only procedure cannot {what}; submit it as a procedure instead"
    ))
}

impl Tx for SqliteReadTx<'_> {
    fn p_key(&self) -> PKey {
        self.p_key
    }
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        self.execute_text(sql, params)
    }
    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Rows> {
        // A query that writes (INSERT ... RETURNING) is refused by the
        // connection's query_only as SQLITE_READONLY (8).
        let r = kernel_query(self.conn, sql, params).map_err(|e| read_refusal(e, sql));
        self.noted(r)
    }
    fn execute_text(&mut self, sql: &str, _params: &[Value]) -> Result<u64> {
        self.noted(Err(read_only_procedure(&format!("run {sql}"))))
    }
    fn query_text(&mut self, sql: &str, params: &[Value]) -> Result<Rows> {
        let r = text_query(self.conn, sql, params).map_err(|e| read_refusal(e, sql));
        self.noted(r)
    }
    fn notify(&mut self, channel: &str, _payload: &str) -> Result<()> {
        self.noted(Err(read_only_procedure(&format!("notify {channel}"))))
    }
    fn confined(
        &mut self,
        sql: &str,
        params: &[Value],
        scope: &Confinement,
        max_rows: usize,
    ) -> Result<(Rows, u64)> {
        if scope.write {
            return self.noted(Err(read_only_procedure(&format!("run {sql}"))));
        }
        let r = confined_on(self.conn, self.confine, sql, params, scope, max_rows);
        self.noted(r)
    }
    fn refused_write(&self) -> bool {
        self.refused
    }
}

/// Runs `job` in one read transaction (one WAL snapshot) on `reader`.
fn read_on(reader: &PartitionReader, job: &mut Job) -> Outcome {
    let conn = &reader.conn;
    let exec = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(|_| ())
            .map_err(|e| map_err(e, sql))
    };
    if let Err(e) = exec("BEGIN") {
        return Err(job.failure(e));
    }
    let mut tx = SqliteReadTx {
        conn,
        confine: &reader.confine,
        p_key: job.p_key,
        refused: false,
    };
    let outcome = job.run_caught(&mut tx);
    // Nothing was written: ending the transaction only lets go of the
    // snapshot.
    if let Err(e) = exec("COMMIT") {
        let _ = exec("ROLLBACK");
        if outcome.is_ok() {
            return Err(job.failure(e));
        }
    }
    outcome
}

/// A bounded pool of read-only connections: plain readers over all
/// partitions or realm-scoped ones ([`ScopedReader`]) — `arg` is then the
/// partition count —, or one partition's readers (`arg`: the partition).
/// Past its first connection it grows only while the process keeps
/// descriptors free ([`crate::descriptors`]).
struct ReadPool<T> {
    dir: PathBuf,
    arg: u32,
    max: usize,
    /// Descriptors one connection holds (a database file and its WAL per
    /// partition it opens).
    cost: usize,
    open: fn(&Path, u32) -> Result<T>,
    state: Mutex<(Vec<T>, usize)>,
    freed: Condvar,
}

impl<T> ReadPool<T> {
    fn new(
        dir: PathBuf,
        arg: u32,
        max: usize,
        partitions: u32,
        open: fn(&Path, u32) -> Result<T>,
    ) -> Self {
        ReadPool {
            dir,
            arg,
            max,
            cost: 2 * partitions as usize,
            open,
            state: Mutex::new((Vec::new(), 0)),
            freed: Condvar::new(),
        }
    }

    fn get(&self) -> Result<T> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = state.0.pop() {
                return Ok(c);
            }
            // The first connection is always tried (without it the pool
            // cannot serve at all); later ones only with descriptors to
            // spare, else this waits for one in use.
            let room = match state.1 {
                n if n >= self.max => None,
                0 => Some(None),
                _ => crate::descriptors::reserve(self.cost).map(Some),
            };
            if let Some(room) = room {
                state.1 += 1;
                drop(state);
                let opened = (self.open)(&self.dir, self.arg);
                drop(room);
                if opened.is_err() {
                    self.state.lock().unwrap_or_else(|p| p.into_inner()).1 -= 1;
                    // A waiter may open in its place (this one was
                    // counted as open while it tried).
                    self.freed.notify_one();
                }
                return opened;
            }
            state = self.freed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn put(&self, conn: T) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .push(conn);
        self.freed.notify_one();
    }
}

/// What every reader sets up: the busy handler, and no value larger than a
/// reply can carry ever built (a `randomblob(250000000)` fails instead of
/// allocating).
pub(crate) fn prepare_reader(conn: &Connection) -> Result<()> {
    configure_connection(conn)?;
    crate::dialect::install(conn).map_err(|e| map_err(e, "install the dialect's functions"))?;
    conn.set_limit(
        rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH,
        READ_VALUE_BYTES_MAX,
    )
    .map_err(|e| map_err(e, "set SQLITE_LIMIT_LENGTH"))?;
    Ok(())
}

/// Opens a read connection on partition `p` alone (for read-only
/// procedures, whose SQL names the partition's tables as the executor's
/// does): read-only (`query_only`), kernel statements only, one read
/// transaction at a time.
/// A read connection of one partition, with an authorizer that confines
/// tenant SQL while it is compiled (read-only procedures' SQL).
struct PartitionReader {
    conn: Conn,
    confine: Arc<Mutex<Option<Confinement>>>,
}

fn open_partition_reader(dir: &Path, p: u32) -> Result<PartitionReader> {
    let conn = open_partition_conn(dir, p)?;
    let confine = Arc::new(Mutex::new(None));
    install_authorizer(&conn, confine.clone());
    Ok(PartitionReader {
        conn: Conn::new(conn),
        confine,
    })
}

fn open_partition_conn(dir: &Path, p: u32) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        partition_path(dir, p),
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| map_err(e, "open partition reader"))?;
    prepare_reader(&conn)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_MAX);
    // The writer's page cache and mapping: a point read should cost what
    // it costs on the executor.
    let pragmas = format!(
        "PRAGMA query_only = 1; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -{CACHE_KIB}; \
         PRAGMA mmap_size = {MMAP_BYTES};"
    );
    conn.execute_batch(&pragmas)
        .map_err(|e| map_err(e, &pragmas))?;
    Ok(conn)
}

/// Opens a plain reader: partition 0 as `main`, the others attached.
fn open_reader(dir: &Path, partitions: u32) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        partition_path(dir, 0),
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| map_err(e, "open reader"))?;
    prepare_reader(&conn)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_MAX);
    if partitions > 1 {
        for p in 1..partitions {
            let path = partition_path(dir, p);
            let sql = "ATTACH DATABASE ?1 AS ?2";
            conn.execute(
                sql,
                rusqlite::params![path.to_string_lossy(), format!("p{p}")],
            )
            .map_err(|e| map_err(e, sql))?;
        }
        let tables: Vec<String> = {
            // Tenant tables (`<realm>/<name>`, on their realm's partition
            // only) are not in the union views: they are the tenant's.
            let sql = "SELECT name FROM main.sqlite_master WHERE type = 'table' \
                       AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%/%' ORDER BY name";
            let mut stmt = conn.prepare(sql).map_err(|e| map_err(e, sql))?;
            let names = stmt
                .query_map([], |r| r.get(0))
                .map_err(|e| map_err(e, sql))?;
            names
                .collect::<rusqlite::Result<_>>()
                .map_err(|e| map_err(e, sql))?
        };
        // Views over those tables must read the union views too: recreate
        // each as a TEMP view, which resolves names in the temp schema.
        let views: Vec<String> = {
            let sql = "SELECT sql FROM main.sqlite_master WHERE type = 'view' ORDER BY name";
            let mut stmt = conn.prepare(sql).map_err(|e| map_err(e, sql))?;
            let defs = stmt
                .query_map([], |r| r.get(0))
                .map_err(|e| map_err(e, sql))?;
            defs.collect::<rusqlite::Result<_>>()
                .map_err(|e| map_err(e, sql))?
        };
        let schemas: Vec<String> = std::iter::once("main".to_string())
            .chain((1..partitions).map(|p| format!("p{p}")))
            .collect();
        for t in tables {
            let view = union_view(&t, &schemas, "");
            conn.execute_batch(&view).map_err(|e| map_err(e, &view))?;
        }
        for def in views {
            if let Some(temp) = temp_view(&def) {
                conn.execute_batch(&temp).map_err(|e| map_err(e, &temp))?;
            }
        }
    }
    conn.execute_batch("PRAGMA query_only = 1")
        .map_err(|e| map_err(e, "PRAGMA query_only"))?;
    // From here on a reader only reads: every other action — writes,
    // DDL, PRAGMA (which could turn query_only off), ATTACH, DETACH,
    // transaction control — is refused while the statement is
    // compiled, with SQLITE_AUTH.
    conn.authorizer(Some(|ctx: AuthContext<'_>| match ctx.action {
        AuthAction::Select
        | AuthAction::Read { .. }
        | AuthAction::Function { .. }
        | AuthAction::Recursive => Authorization::Allow,
        _ => Authorization::Deny,
    }));
    Ok(conn)
}

/// `CREATE TEMP VIEW "<table>"`: the union of `table` over `schemas`, each
/// part with `filter` (a `WHERE` clause, or empty) — how a reader sees a
/// table over every partition as one.
pub(crate) fn union_view(table: &str, schemas: &[String], filter: &str) -> String {
    let q = format!("\"{}\"", table.replace('"', "\"\""));
    let union = schemas
        .iter()
        .map(|schema| format!("SELECT * FROM {schema}.{q}{filter}"))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    format!("CREATE TEMP VIEW {q} AS {union}")
}

/// A view's definition re-created in the temp schema, where its names
/// resolve to the temp views first; `None` if `def` is not a CREATE VIEW.
pub(crate) fn temp_view(def: &str) -> Option<String> {
    def.strip_prefix("CREATE VIEW")
        .map(|rest| format!("CREATE TEMP VIEW{rest}"))
}

/// How long opening a data directory waits for another holder's lock.
pub const LOCK_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Largest value a read-path query may build, in bytes.
pub const READ_VALUE_BYTES_MAX: i32 = 16 << 20;
/// Virtual-machine steps between deadline checks of a read-path query
/// (about a millisecond of work).
const PROGRESS_STEPS: i32 = 10_000;

fn read_only_refusal(sql: &str) -> Error {
    Error::ReadOnly(format!(
        "this statement would change the database; queries here are read-only: {sql}"
    ))
}

/// A reader's authorizer refuses anything but reading with SQLITE_AUTH
/// (23) when the statement is compiled; `query_only` would refuse a write
/// that got past it with SQLITE_READONLY (8). Both are the caller trying to
/// change something, and are reported as such.
fn is_write_refusal(e: &Error) -> bool {
    e.as_sql().is_some_and(|s| {
        matches!(
            s.code,
            SqlCode::Sqlite {
                primary: 8 | 23,
                ..
            }
        )
    })
}

/// A user's statement (PostgreSQL's dialect, `$n` parameters) as SQLite
/// compiles it; what the translation refuses, refused.
fn user_sql(sql: &str) -> Result<String> {
    let translated = crate::dialect::translate(sql)?;
    Ok(to_sqlite(&translated).into_owned())
}

fn read_query(
    conn: &Connection,
    sql: &str,
    params: &[Value],
    limits: &ReadLimits,
    columnar: &crate::columnar::Columnar,
) -> Result<Rows> {
    if crate::sql::is_write_keyword(&crate::sql::first_keyword(sql)) {
        return Err(read_only_refusal(sql));
    }
    let translated = user_sql(sql)?;
    let mut stmt = match conn.prepare_cached(&translated) {
        Ok(s) => s,
        Err(e) => {
            let e = map_err(e, sql);
            return Err(if is_write_refusal(&e) {
                read_only_refusal(sql)
            } else {
                e
            });
        }
    };
    if !stmt.readonly() {
        return Err(read_only_refusal(sql));
    }
    if let Some(rows) = on_columnar(&stmt, sql, params, limits, columnar) {
        return rows;
    }
    bounded_run(conn, &mut stmt, sql, params, limits)
}

/// The columnar engine's answer to a statement SQLite has compiled (in
/// the caller's scope), if it gives one ([`crate::columnar`]).
fn on_columnar(
    stmt: &rusqlite::Statement<'_>,
    sql: &str,
    params: &[Value],
    limits: &ReadLimits,
    columnar: &crate::columnar::Columnar,
) -> Option<Result<Rows>> {
    if limits.engine == crate::columnar::Engine::RowStore || stmt.parameter_count() != params.len()
    {
        return None;
    }
    let columns: Arc<[String]> = stmt.column_names().into_iter().map(String::from).collect();
    columnar.run(sql, params, limits, &columns)
}

/// A query for one realm on a scoped reader (see [`crate::scoped`]).
fn scoped_query(
    reader: &ScopedReader,
    realm: &str,
    sql: &str,
    params: &[Value],
    limits: &ReadLimits,
    columnar: &crate::columnar::Columnar,
) -> Result<Rows> {
    if crate::sql::is_write_keyword(&crate::sql::first_keyword(sql)) {
        return Err(read_only_refusal(sql));
    }
    reader.enter(realm);
    let rows = (|| {
        // Never from the statement cache: the authorizer runs when a
        // statement is compiled, for the realm of that moment.
        let translated = user_sql(sql)?;
        let mut stmt = match reader.conn.prepare(&translated) {
            Ok(s) => s,
            Err(e) => {
                return Err(match reader.refusal() {
                    Some(why) => Error::OutOfScope(format!("{why}: {sql}")),
                    None => map_err(e, sql),
                })
            }
        };
        if !stmt.readonly() {
            return Err(read_only_refusal(sql));
        }
        if stmt.is_explain() != 0 {
            return Err(Error::OutOfScope(format!(
                "EXPLAIN is refused in realm-scoped SQL: {sql}"
            )));
        }
        if let Some(rows) = on_columnar(&stmt, sql, params, limits, columnar) {
            return rows;
        }
        bounded_run(&reader.conn, &mut stmt, sql, params, limits)
    })();
    reader.leave();
    rows
}

/// Runs a prepared read under `limits`' deadline and cancel flag.
fn bounded_run(
    conn: &Connection,
    stmt: &mut rusqlite::Statement<'_>,
    sql: &str,
    params: &[Value],
    limits: &ReadLimits,
) -> Result<Rows> {
    // Deadline and cancellation: SQLite calls the handler every
    // PROGRESS_STEPS steps and interrupts the statement when it says so.
    let started = std::time::Instant::now();
    let bounded = limits.time_max.is_some() || limits.cancel.is_some();
    if bounded {
        let l = limits.clone();
        conn.progress_handler(PROGRESS_STEPS, Some(move || l.stop(started)));
    }
    // A read transaction left open would pin the WAL; the statement is
    // reset when it is dropped or returned to the cache, which ends it.
    let rows = run_query(stmt, sql, params, limits);
    if bounded {
        conn.progress_handler(0, None::<fn() -> bool>);
    }
    rows.map_err(|e| {
        if bounded && limits.stop(started) {
            limits.stopped(sql)
        } else if is_write_refusal(&e) {
            read_only_refusal(sql)
        } else {
            e
        }
    })
}
