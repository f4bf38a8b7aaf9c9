//! `tabos-store`: the kernel database (layer L2).
//!
//! Every piece of tabos OS state is a row, and every state change is a
//! *procedure*: a Rust function that runs inside one transaction against a
//! [`Tx`] and may [`notify`](Tx::notify) a channel. This crate runs procedures on
//! one of two backends and guarantees the same behaviour on both:
//!
//! * **SQLite (embedded, default)** — [`sqlite`]: one executor thread per
//!   partition owns that partition's write connection and runs procedures
//!   serially, many to a commit (group commit), each inside a SAVEPOINT so a
//!   failing procedure is rolled back alone. Reads run on a pool of
//!   `query_only` connections and never wait for a writer (WAL).
//! * **PostgreSQL (cluster)** — [`postgres`]: each procedure in a SERIALIZABLE
//!   transaction on a pooled connection, retried on SQLSTATE 40001/40P01 with
//!   bounded, jittered back-off.
//!
//! Guarantees, on both backends:
//! * a procedure's writes and notifications commit together or not at all;
//! * a notification reaches subscribers only after its commit, never for a
//!   rolled-back procedure, in commit order per channel ([`feed`]);
//! * migrations ([`Migration`]) are applied once, in version order, at open;
//! * every error is a value ([`Error`]); a SQL error carries the statement, the
//!   backend's code and the position of the bad token.
//!
//! Partitions: every table has a `p_key` column; a procedure runs on one
//! partition, named by its [`PKey`], which must lie in `0..partitions`. On
//! SQLite each partition is its own database file with its own executor; on
//! PostgreSQL the same `p_key` is the distribution column.

pub mod backup;
pub mod columnar;
pub mod descriptors;
pub mod dialect;
pub mod error;
pub mod fair;
pub mod feed;
pub mod pg_cluster;
pub mod postgres;
mod scoped;
pub mod sql;
pub mod sqlite;
mod statements;
pub mod testing;
pub mod value;

mod migrate;
mod pending;

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use backup::{PartitionCopy, Snapshot};
pub use columnar::Engine;
pub use error::{Error, ProcedureError, Result, SqlCode, SqlError};
pub use fair::Share;
pub use feed::{Notification, Subscription};
pub use migrate::Migration;
pub use pending::Pending;
pub use value::{Cap, FromValue, ReadLimits, ReadScope, Row, Rows, Value, RESULT_BYTES_MAX};

/// Most partitions a store may have. SQLite attaches every partition to each
/// read connection, and SQLite attaches at most 10 databases.
pub const PARTITIONS_MAX: u32 = 8;
/// Partitions of a database created without a count: a property of the
/// database, never of the machine that first opened it (nodes of any
/// size join a cluster's database; a data directory moves between
/// machines). As many as a store may have: on PostgreSQL they bound how
/// many conflicting procedures of one node retry at once, and on SQLite
/// an idle partition costs two sleeping threads and a file.
pub const PARTITIONS_DEFAULT: u32 = PARTITIONS_MAX;
/// Most procedures waiting for one executor (SQLite) or for the connection
/// pool (PostgreSQL); past it, submission fails with [`Error::Overloaded`].
pub const QUEUE_PROCS_MAX: usize = 65_536;

/// The procedures a [`grouped`] task started during one poll, held to be
/// handed to their backends together.
type Held = Arc<std::sync::Mutex<Vec<(Arc<dyn Backend>, Job)>>>;

tokio::task_local! {
    static GROUPED: Held;
}

/// Runs `f` — a task that starts several procedures at once and awaits
/// them together (`join_all`) — so that they share a group commit: each
/// [`Store::run`] in it is held, not run, and after each poll of `f`
/// everything held is queued for its partition's executor at once
/// ([`Backend::submit_all`]). Without it the first would run alone on the
/// caller's thread, commit, and only then let the next start: one commit
/// each. Queued one at a time instead, how many shared a commit would
/// depend on whether the executor woke before the next arrived — on the
/// machine's load, not on the caller.
pub async fn grouped<F: std::future::Future>(f: F) -> F::Output {
    let held = Held::default();
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(move |cx| {
        let out = GROUPED.sync_scope(held.clone(), || f.as_mut().poll(cx));
        release(&held);
        out
    })
    .await
}

/// Hands every procedure in `held` to its backend, a backend's together.
fn release(held: &Held) {
    let jobs = std::mem::take(&mut *held.lock().unwrap_or_else(|p| p.into_inner()));
    let mut jobs = jobs.into_iter().peekable();
    while let Some((backend, job)) = jobs.next() {
        let mut together = vec![job];
        while let Some((_, job)) = jobs.next_if(|(b, _)| Arc::ptr_eq(b, &backend)) {
            together.push(job);
        }
        backend.submit_all(together);
    }
}

/// Before a thread blocks on a procedure inside a [`grouped`] task (a
/// [`Pending::wait`]), what the task holds is handed on: the procedure
/// waited for may be among it.
pub(crate) fn release_held() {
    let _ = GROUPED.try_with(release);
}
/// Most rows a single query may return into memory.
pub const QUERY_ROWS_MAX: usize = 1_000_000;

/// A partition number: the `p_key` column of every table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PKey(pub u32);

impl fmt::Display for PKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Which SQL dialect a transaction speaks, for the few statements that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// What a committed transaction survives.
///
/// | setting  | SQLite (WAL)                  | survives a tabos crash | survives power loss / OS crash |
/// |----------|-------------------------------|------------------------|--------------------------------|
/// | `off`    | `synchronous=OFF`             | yes                    | no: recent commits may be lost and the database may be corrupted |
/// | `normal` | `synchronous=NORMAL`          | yes                    | the database stays consistent, but commits since the last WAL checkpoint may be lost |
/// | `full`   | `synchronous=FULL`            | yes                    | yes: the WAL is fsynced before each group commit is acknowledged |
///
/// On PostgreSQL `off` sets `synchronous_commit=off` (a crash of the database
/// server may lose the last few hundred milliseconds of commits, never
/// corrupts); `normal` and `full` set `synchronous_commit=on` (every
/// acknowledged commit is flushed by the server), since PostgreSQL has no
/// cheaper setting that survives a server crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    Off,
    #[default]
    Normal,
    Full,
}

impl FromStr for Durability {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "off" => Ok(Durability::Off),
            "normal" => Ok(Durability::Normal),
            "full" => Ok(Durability::Full),
            other => Err(Error::Config(format!(
                "durability must be off, normal or full, not {other:?}"
            ))),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Off => "off",
            Durability::Normal => "normal",
            Durability::Full => "full",
        })
    }
}

/// Where the kernel database lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory holding one SQLite file per partition.
    Sqlite(PathBuf),
    /// A `postgres://` connection URL (PostgreSQL, or a compatible database).
    Postgres(String),
}

/// Settings of a store.
#[derive(Debug, Clone)]
pub struct Config {
    pub location: Location,
    /// Number of partitions, `1..=PARTITIONS_MAX`, for a database being
    /// created; `None`: [`PARTITIONS_DEFAULT`]. An existing database keeps
    /// its own: `None` opens it whatever it has, a number it does not have
    /// is refused. [`Store::partitions`] tells what was opened.
    pub partitions: Option<u32>,
    pub durability: Durability,
    /// SQLite: most read connections. PostgreSQL: pooled connections.
    pub connections: usize,
    /// SQLite: pin each partition's executor thread to one core (partition
    /// `p` to the `p`-th core this process may run on, round robin), so a
    /// partition's pages stay in one core's caches. Off by default: on a
    /// machine shared with other work a pinned thread cannot move away
    /// from a busy core. PostgreSQL: no effect.
    pub pin_executors: bool,
    /// PostgreSQL: how long a request waits for the database to come back
    /// (a restart, a failover) before failing with [`Error::Unavailable`]
    /// (default [`postgres::RECONNECT_WAIT_MAX`]). SQLite: no effect.
    pub reconnect_wait: std::time::Duration,
    /// PostgreSQL: how long a connection of the pool beyond the first
    /// [`postgres::POOL_IDLE_KEEP`] may go unused before it is closed
    /// (default [`postgres::POOL_IDLE_CLOSE`]). SQLite: no effect.
    pub pool_idle_close: std::time::Duration,
}

impl Config {
    /// File descriptors the store this opens holds however idle it is:
    /// what a server checks its limit against
    /// ([`descriptors::room_to_serve`]) before opening it. Fails as
    /// opening would on a partition count the database does not have.
    pub fn descriptors_at_rest(&self) -> Result<usize> {
        match &self.location {
            Location::Sqlite(dir) => sqlite::descriptors_at_rest(dir, self.partitions),
            // A socket per pooled connection (the pool may open them all)
            // and the LISTEN connection's.
            Location::Postgres(_) => Ok(self.connections + 1),
        }
    }

    /// An embedded store in `dir` (its partitions: see
    /// [`Config::partitions`]), `normal` durability.
    pub fn sqlite(dir: impl Into<PathBuf>) -> Config {
        Config {
            location: Location::Sqlite(dir.into()),
            partitions: None,
            durability: Durability::Normal,
            connections: 8,
            pin_executors: false,
            reconnect_wait: postgres::RECONNECT_WAIT_MAX,
            pool_idle_close: postgres::POOL_IDLE_CLOSE,
        }
    }

    /// A store on the PostgreSQL server at `url`.
    pub fn postgres(url: impl Into<String>) -> Config {
        Config {
            location: Location::Postgres(url.into()),
            partitions: None,
            durability: Durability::Normal,
            connections: 8,
            pin_executors: false,
            reconnect_wait: postgres::RECONNECT_WAIT_MAX,
            pool_idle_close: postgres::POOL_IDLE_CLOSE,
        }
    }

    /// Sets [`Config::reconnect_wait`].
    pub fn with_reconnect_wait(mut self, wait: std::time::Duration) -> Config {
        self.reconnect_wait = wait;
        self
    }

    /// Asks for `n` partitions (see [`Config::partitions`]).
    pub fn with_partitions(mut self, n: u32) -> Config {
        self.partitions = Some(n);
        self
    }

    pub fn with_durability(mut self, d: Durability) -> Config {
        self.durability = d;
        self
    }

    pub fn with_connections(mut self, n: usize) -> Config {
        self.connections = n;
        self
    }

    pub fn with_pinned_executors(mut self, pin: bool) -> Config {
        self.pin_executors = pin;
        self
    }

    fn validate(&self) -> Result<()> {
        if let Some(n) = self.partitions {
            if !(1..=PARTITIONS_MAX).contains(&n) {
                return Err(Error::Config(format!(
                    "partitions must be 1..={PARTITIONS_MAX}, not {n}"
                )));
            }
        }
        if !(1..=256).contains(&self.connections) {
            return Err(Error::Config(format!(
                "connections must be 1..=256, not {}",
                self.connections
            )));
        }
        Ok(())
    }
}

/// The partitions of a database that has `existing` (`None`: it is new),
/// opened with `asked` ([`Config::partitions`]).
pub(crate) fn partitions_to_open(existing: Option<u32>, asked: Option<u32>) -> Result<u32> {
    match (existing, asked) {
        (Some(have), Some(want)) if have != want => Err(Error::Config(format!(
            "the database has {have} partitions, not {want}: a count is chosen when a \
             database is created, and kept (leave it out to open this one)"
        ))),
        (Some(have), _) => Ok(have),
        (None, want) => Ok(want.unwrap_or(PARTITIONS_DEFAULT)),
    }
}

/// Which backend a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Sqlite,
    Postgres,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
        })
    }
}

/// The handle a procedure works through: one open transaction.
///
/// Statements use `$1`, `$2`, ... for parameters on both backends. A
/// statement written in the code (`&'static str`) is prepared once per
/// connection and found again by its address ([`Tx::execute`],
/// [`Tx::query`]); one built at run time goes through a cache keyed by its
/// text ([`Tx::execute_text`], [`Tx::query_text`]).
pub trait Tx {
    /// The partition this transaction runs on.
    fn p_key(&self) -> PKey;
    fn dialect(&self) -> Dialect;
    /// Runs a statement; returns the number of rows it changed.
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64>;
    /// Runs a query; returns all its rows (at most [`QUERY_ROWS_MAX`]).
    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Rows>;
    /// [`Tx::execute`] for a statement built at run time.
    fn execute_text(&mut self, sql: &str, params: &[Value]) -> Result<u64>;
    /// [`Tx::query`] for a statement built at run time.
    fn query_text(&mut self, sql: &str, params: &[Value]) -> Result<Rows>;
    /// Queues a notification, delivered to `channel`'s subscribers after the
    /// commit, and dropped if the procedure rolls back.
    fn notify(&mut self, channel: &str, payload: &str) -> Result<()>;
    /// Runs `hook` in this process right after the transaction commits
    /// (before the procedure's caller is answered), or drops it unrun if
    /// the procedure rolls back — for handing committed state to someone
    /// waiting in memory. A hook must be quick and must not wait for the
    /// store: it runs on the thread that committed. At most
    /// [`AFTER_COMMIT_HOOKS_MAX`] per procedure. A read-only transaction
    /// commits nothing and refuses hooks.
    fn after_commit(&mut self, hook: AfterCommit) -> Result<()> {
        drop(hook);
        Err(Error::ReadOnly(
            "a read-only transaction commits nothing to run a hook after".into(),
        ))
    }
    /// The store's per-process state ([`Store::local`]); every procedure's
    /// transaction has it (`None` only for a backend's own statements).
    fn locals(&self) -> Option<&Locals> {
        None
    }
    /// The database's clock now, in µs since the epoch: what leases are
    /// written and judged by, so that nodes' clocks need not agree. SQLite
    /// (one machine): this process's clock; PostgreSQL: the server's.
    fn clock_us(&mut self) -> Result<i64> {
        Ok(now_us())
    }
    /// Runs one statement of untrusted (tenant) SQL that may touch only the
    /// tables [`Confinement`] allows; returns its rows (at most `max_rows`,
    /// more is an error) and the number of rows it changed. The backend
    /// enforces the confinement while the statement is compiled, so nothing
    /// the text says — other tables, the schema catalogue, PRAGMA, ATTACH,
    /// transaction control — gets past it. It also runs under the scope's
    /// deadline, builds no value over [`TENANT_VALUE_BYTES_MAX`], and may
    /// not make a tenant table reference a table outside the scope (a
    /// foreign key would let tenant rows block kernel updates).
    fn confined(
        &mut self,
        sql: &str,
        params: &[Value],
        scope: &Confinement,
        max_rows: usize,
    ) -> Result<(Rows, u64)> {
        let _ = (sql, params, scope, max_rows);
        Err(Error::Invalid(format!(
            "tenant SQL is not supported on the {:?} backend yet",
            self.dialect()
        )))
    }
    /// Whether this transaction refused a write: a read transaction
    /// ([`Store::read`]) answers every statement, notification or tenant
    /// write that would change the database with [`Error::ReadOnly`], and
    /// remembers that it did — whatever the caller made of the error — so
    /// that code tried first on a read connection can be sent to the
    /// writer instead. A writer's transaction never refuses one.
    fn refused_write(&self) -> bool {
        false
    }
    /// Bytes of the database pages that hold the tables whose names start
    /// with `prefix` (tenant tables: see [`Confinement::table_prefix`]) and
    /// their indexes. A backend without tenant tables holds none: 0.
    fn tables_bytes(&mut self, prefix: &str) -> Result<i64> {
        let _ = prefix;
        Ok(0)
    }
    /// Drops the tables whose names start with `prefix` (a realm's tenant
    /// tables, when the realm is removed), with their indexes; returns how
    /// many. A backend without tenant tables has none to drop.
    fn drop_tables(&mut self, prefix: &str) -> Result<u64> {
        let _ = prefix;
        Ok(0)
    }
    /// Since when this transaction of tenant code holds its partition's
    /// write lock — on SQLite's tenant connections, from its first write
    /// (`sqlite`, "Tenant code"); `None` while it has not written, and on
    /// a backend with no partition-wide write lock. Tenant code holds it
    /// at most [`WRITE_HOLD_MAX`] from then on.
    fn writing_since(&self) -> Option<std::time::Instant> {
        None
    }
}

/// Longest tenant code may hold its partition's write lock (SQLite): from
/// its first write to its commit. Past it the procedure is stopped, as at
/// its deadline, and changes nothing; so a procedure that writes and then
/// computes delays the partition's other realms by at most this. Compute
/// before the first write, or in a read-only procedure, is bounded only by
/// the procedure's own deadline.
pub const WRITE_HOLD_MAX: std::time::Duration = std::time::Duration::from_millis(40);

/// Code run after a commit (see [`Tx::after_commit`]).
pub type AfterCommit = Box<dyn FnOnce() + Send>;

/// Most after-commit hooks one procedure may queue.
pub const AFTER_COMMIT_HOOKS_MAX: usize = 1_024;

/// Queues `hook` on `hooks` within [`AFTER_COMMIT_HOOKS_MAX`].
pub(crate) fn queue_hook(hooks: &mut Vec<AfterCommit>, hook: AfterCommit) -> Result<()> {
    if hooks.len() >= AFTER_COMMIT_HOOKS_MAX {
        return Err(Error::Invalid(format!(
            "a procedure may queue at most {AFTER_COMMIT_HOOKS_MAX} after-commit hooks"
        )));
    }
    hooks.push(hook);
    Ok(())
}

/// Runs committed hooks; one that panics is contained (and reported), so
/// the thread that committed — an executor — goes on.
pub(crate) fn run_hooks(hooks: Vec<AfterCommit>) {
    for hook in hooks {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(hook)).is_err() {
            eprintln!("tabos store: an after-commit hook panicked; the commit stands");
        }
    }
}

/// The tables a piece of tenant SQL may touch (see [`Tx::confined`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// Tables whose names start with this (e.g. `"<realm>/"`); nothing else,
    /// not even to read. Must be non-empty.
    pub table_prefix: String,
    /// Whether the statement may write: INSERT, UPDATE, DELETE, and
    /// CREATE/DROP TABLE and INDEX, all within the prefix. Without it only
    /// reads are allowed.
    pub write: bool,
    /// When the statement must stop (the calling procedure's deadline):
    /// past it the statement is interrupted and fails with
    /// [`Error::Timeout`].
    pub deadline: Option<std::time::Instant>,
}

/// Largest value one statement of tenant SQL may build, in bytes.
pub const TENANT_VALUE_BYTES_MAX: i32 = 16 << 20;

impl dyn Tx + '_ {
    /// The single row of a query, or `None`; more than one row is an error.
    pub fn query_opt(&mut self, sql: &'static str, params: &[Value]) -> Result<Option<Row>> {
        let rows = self.query(sql, params)?.rows;
        single(rows, sql)
    }

    /// [`query_opt`](Self::query_opt) for a statement built at run time.
    pub fn query_opt_text(&mut self, sql: &str, params: &[Value]) -> Result<Option<Row>> {
        let rows = self.query_text(sql, params)?.rows;
        single(rows, sql)
    }

    /// The single row of a query; none or several is an error.
    pub fn query_one(&mut self, sql: &'static str, params: &[Value]) -> Result<Row> {
        self.query_opt(sql, params)?
            .ok_or_else(|| Error::Invalid(format!("expected one row, got none: {sql}")))
    }

    /// This process's `T` for the transaction's store ([`Store::local`]).
    pub fn local<T: Any + Send + Sync + Default>(&self) -> Result<Arc<T>> {
        self.locals()
            .map(Locals::get)
            .ok_or_else(|| Error::Internal("this transaction has no store state".into()))
    }

    /// The first column of the single row of a query.
    pub fn query_scalar<T: FromValue>(&mut self, sql: &'static str, params: &[Value]) -> Result<T> {
        self.query_one(sql, params)?.get(0)
    }
}

/// The single row of `rows`, or `None`; more than one is an error.
fn single(mut rows: Vec<Row>, sql: &str) -> Result<Option<Row>> {
    match rows.len() {
        0 => Ok(None),
        1 => Ok(rows.pop()),
        n => Err(Error::Invalid(format!(
            "expected at most one row, got {n}: {sql}"
        ))),
    }
}

/// Counters kept by a store since it was opened.
#[derive(Debug, Default)]
pub struct Stats {
    /// Per partition, how long procedures waited and transactions took.
    pub partitions: Vec<PartitionTimings>,
    /// Procedures that committed.
    pub committed: AtomicU64,
    /// Procedures that failed and were rolled back.
    pub failed: AtomicU64,
    /// Commits (on SQLite one commit covers a batch of procedures).
    pub commits: AtomicU64,
    /// Serialization-failure retries (PostgreSQL).
    pub retries: AtomicU64,
    /// Notifications this process received from the database (PostgreSQL:
    /// only those of channels it has subscribers for).
    pub notifications: AtomicU64,
    /// Connections to the database open now (PostgreSQL: the pool's and
    /// the listener's; SQLite: 0).
    pub connections: AtomicU64,
}

/// A plain copy of [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub committed: u64,
    pub failed: u64,
    pub commits: u64,
    pub retries: u64,
    pub notifications: u64,
    pub connections: u64,
}

/// Upper bounds of the store's timing buckets, in µs: 50 µs to 10 s, and
/// one past the last.
pub const TIMING_BUCKETS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// A histogram of durations, counted with atomics (the store has no
/// metrics library: the node exports these as Prometheus histograms).
#[derive(Debug, Default)]
pub struct Timing {
    /// Per bucket of [`TIMING_BUCKETS_US`], then those past the last.
    counts: [AtomicU64; TIMING_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

/// A copy of a [`Timing`]: per bucket (not cumulative), and the sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimingSnapshot {
    pub counts: [u64; TIMING_BUCKETS_US.len() + 1],
    pub sum_us: u64,
}

impl Timing {
    pub fn observe(&self, d: std::time::Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = TIMING_BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(TIMING_BUCKETS_US.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> TimingSnapshot {
        TimingSnapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// One partition's timings.
#[derive(Debug, Default)]
pub struct PartitionTimings {
    /// From a procedure's submission to the start of its run: how long it
    /// queued for the partition's writer (or, on PostgreSQL, a connection).
    pub queued: Timing,
    /// A transaction from its BEGIN to its COMMIT (or rollback) done: a
    /// group commit's on SQLite, each procedure's try on PostgreSQL.
    pub transaction: Timing,
}

impl Stats {
    /// Counters for a store of `partitions` partitions.
    pub fn new(partitions: u32) -> Stats {
        Stats {
            partitions: (0..partitions)
                .map(|_| PartitionTimings::default())
                .collect(),
            ..Stats::default()
        }
    }

    /// Partition `p`'s timings (none for a partition this store has not).
    pub fn partition(&self, p: PKey) -> Option<&PartitionTimings> {
        self.partitions.get(p.0 as usize)
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            committed: self.committed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            notifications: self.notifications.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
        }
    }
}

/// The type-erased result of a procedure: the boxed `T` or the boxed `E`.
pub(crate) type Outcome = std::result::Result<Box<dyn Any + Send>, Failure>;

/// A type-erased procedure body, as the executors run it.
pub(crate) type ErasedProc = Box<dyn FnMut(&mut dyn Tx) -> Outcome + Send>;

pub(crate) struct Failure {
    /// The boxed procedure error type `E`.
    pub error: Box<dyn Any + Send>,
    /// Whether this is a serialization conflict the executor should retry.
    pub retryable: bool,
    /// Whether the database was unreachable (before any commit): the
    /// executor may reconnect and run the procedure again.
    pub unavailable: bool,
}

/// A procedure on its way to an executor.
pub struct Job {
    pub(crate) p_key: PKey,
    /// Who it is charged to ([`fair`]).
    pub(crate) share: Share,
    pub(crate) run: ErasedProc,
    /// Builds the caller's error type from a store error (commit failures).
    pub(crate) fail: fn(Error) -> Box<dyn Any + Send>,
    pub(crate) done: tokio::sync::oneshot::Sender<Outcome>,
    /// The store's per-process state, which the procedure reaches through
    /// [`Tx::local`](trait.Tx.html#method.local).
    locals: Arc<Locals>,
    /// Whether it runs at READ COMMITTED on PostgreSQL
    /// ([`Store::run_read_committed`]).
    pub(crate) read_committed: bool,
    /// When it was submitted ([`PartitionTimings::queued`]).
    pub(crate) queued_at: std::time::Instant,
}

impl Job {
    /// The job that runs `f` on `p_key`, and what its caller waits on.
    fn of<T, E, F>(p_key: PKey, share: Share, locals: Arc<Locals>, mut f: F) -> (Job, Pending<T, E>)
    where
        T: Send + 'static,
        E: ProcedureError,
        F: FnMut(&mut dyn Tx) -> std::result::Result<T, E> + Send + 'static,
    {
        let (done, rx) = tokio::sync::oneshot::channel();
        let job = Job {
            p_key,
            share,
            run: Box::new(move |tx| match f(tx) {
                Ok(v) => Ok(Box::new(v) as Box<dyn Any + Send>),
                Err(e) => {
                    let retryable = e.store_error().is_some_and(Error::is_retryable);
                    let unavailable = e.store_error().is_some_and(Error::is_unavailable);
                    Err(Failure {
                        error: Box::new(e),
                        retryable,
                        unavailable,
                    })
                }
            }),
            fail: |e| Box::new(E::from(e)),
            done,
            locals,
            read_committed: false,
            queued_at: std::time::Instant::now(),
        };
        (job, Pending::new(rx))
    }

    /// Runs the job's procedure on `tx`; a panic in it is the job's error
    /// (and the connection goes on serving).
    pub(crate) fn run_caught(&mut self, tx: &mut dyn Tx) -> Outcome {
        let run = &mut self.run;
        let mut tx = WithLocals {
            tx,
            locals: &self.locals,
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut tx))) {
            Ok(o) => o,
            Err(panic) => Err(self.failure(Error::Internal(format!(
                "procedure panicked: {}",
                sqlite::panic_message(&panic)
            )))),
        }
    }

    /// A store-level failure in the caller's error type (never retried).
    pub(crate) fn failure(&self, e: Error) -> Failure {
        Failure {
            unavailable: e.is_unavailable(),
            error: (self.fail)(e),
            retryable: false,
        }
    }

    /// Completes the job with a store-level failure.
    pub(crate) fn finish_err(self, e: Error) {
        let error = (self.fail)(e);
        let _ = self.done.send(Err(Failure {
            error,
            retryable: false,
            unavailable: false,
        }));
    }
}

/// What each backend implements. Procedures reach it only through [`Store`].
pub trait Backend: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn partitions(&self) -> u32;
    fn durability(&self) -> Durability;
    /// Queues a procedure; on a full queue the job is completed with
    /// [`Error::Overloaded`].
    fn submit(&self, job: Job);
    /// Queues several procedures at once ([`grouped`]): a backend that
    /// batches commits puts them in the same batch where it can.
    fn submit_all(&self, jobs: Vec<Job>) {
        for job in jobs {
            self.submit(job);
        }
    }
    /// Like `submit`, but a backend may run the job on the calling thread,
    /// during this call, when nothing else is running on its partition
    /// (see [`Store::run`]).
    fn run(&self, job: Job) {
        self.submit(job)
    }
    /// Runs a read-only procedure on a read connection of its partition
    /// (see [`Store::read`]).
    fn read(&self, job: Job);
    /// A read-only query over all partitions, capped as `cap` says.
    fn query(&self, sql: &str, params: &[Value], limits: &value::ReadLimits) -> Result<Rows>;
    fn feed(&self) -> &Arc<feed::Feed>;
    fn stats(&self) -> &Stats;
    /// What the columnar engine has done (nothing, but on SQLite).
    fn columnar_stats(&self) -> columnar::Stats {
        columnar::Stats::default()
    }
    /// Runs `f` while the columnar engine's snapshot loader is held, as
    /// a long load holds it (tests).
    fn with_columnar_loads_held(&self, f: &mut dyn FnMut()) {
        f()
    }
    /// One connection per partition, each in a read transaction begun now
    /// (see [`backup`]); called while every partition's writer is held.
    fn begin_snapshot(&self) -> Result<Vec<rusqlite::Connection>> {
        Err(Error::Invalid(format!(
            "a {} store cannot be snapshotted by tabos",
            self.kind()
        )))
    }
}

/// A kernel database: the one handle services use. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// Who this handle's procedures are charged to ([`Store::for_realm`]).
    share: Share,
    locals: Arc<Locals>,
}

/// State that layers above keep per open store in this process (see
/// [`Store::local`]): one value per type, made on first use.
#[derive(Default)]
pub struct Locals(std::sync::Mutex<Vec<Arc<dyn Any + Send + Sync>>>);

impl Locals {
    /// This process's `T`, made with `T::default()` on first use. A
    /// handful of types use it, so a scan beats a map.
    pub fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let want = std::any::TypeId::of::<T>();
        if let Some(l) = all.iter().find(|l| (***l).type_id() == want) {
            return l.clone().downcast::<T>().expect("found by its type id");
        }
        let made = Arc::new(T::default());
        all.push(made.clone());
        made
    }
}

/// A procedure's transaction with its store's [`Locals`] (what
/// [`Job::run_caught`] hands the procedure).
struct WithLocals<'a> {
    tx: &'a mut dyn Tx,
    locals: &'a Locals,
}

impl Tx for WithLocals<'_> {
    fn p_key(&self) -> PKey {
        self.tx.p_key()
    }
    fn dialect(&self) -> Dialect {
        self.tx.dialect()
    }
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        self.tx.execute(sql, params)
    }
    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Rows> {
        self.tx.query(sql, params)
    }
    fn execute_text(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        self.tx.execute_text(sql, params)
    }
    fn query_text(&mut self, sql: &str, params: &[Value]) -> Result<Rows> {
        self.tx.query_text(sql, params)
    }
    fn notify(&mut self, channel: &str, payload: &str) -> Result<()> {
        self.tx.notify(channel, payload)
    }
    fn after_commit(&mut self, hook: AfterCommit) -> Result<()> {
        self.tx.after_commit(hook)
    }
    fn confined(
        &mut self,
        sql: &str,
        params: &[Value],
        scope: &Confinement,
        max_rows: usize,
    ) -> Result<(Rows, u64)> {
        self.tx.confined(sql, params, scope, max_rows)
    }
    fn tables_bytes(&mut self, prefix: &str) -> Result<i64> {
        self.tx.tables_bytes(prefix)
    }
    fn drop_tables(&mut self, prefix: &str) -> Result<u64> {
        self.tx.drop_tables(prefix)
    }
    fn writing_since(&self) -> Option<std::time::Instant> {
        self.tx.writing_since()
    }
    fn refused_write(&self) -> bool {
        self.tx.refused_write()
    }
    fn locals(&self) -> Option<&Locals> {
        Some(self.locals)
    }
    fn clock_us(&mut self) -> Result<i64> {
        self.tx.clock_us()
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend.kind())
            .field("partitions", &self.backend.partitions())
            .finish()
    }
}

impl Store {
    /// Opens (creating if needed) the database that `config` names and applies
    /// the pending `migrations`, in version order.
    pub fn open(config: &Config, migrations: &[Migration]) -> Result<Store> {
        config.validate()?;
        migrate::check_sequence(migrations)?;
        let backend: Arc<dyn Backend> = match &config.location {
            Location::Sqlite(_) => Arc::new(sqlite::SqliteBackend::open(config, migrations)?),
            Location::Postgres(_) => Arc::new(postgres::PgBackend::open(config, migrations)?),
        };
        Ok(Store {
            backend,
            share: Share::default(),
            locals: Arc::default(),
        })
    }

    /// This store, its procedures charged to `realm`'s share of each
    /// partition's writer (SQLite) or of the pool (PostgreSQL): realms are
    /// served fairly, round robin ([`fair`]).
    pub fn for_realm(&self, realm: &str) -> Store {
        Store {
            share: Share::realm(realm),
            ..self.clone()
        }
    }

    /// This store, its procedures charged to `realm` as tenant code: each
    /// may run up to its deadline, so it runs apart from short procedures
    /// and long ones of different realms share by run time ([`fair`]).
    pub fn for_tenant_code(&self, realm: &str) -> Store {
        Store {
            share: Share {
                realm: realm.into(),
                long: true,
            },
            ..self.clone()
        }
    }

    /// Who this handle's procedures are charged to.
    pub fn share(&self) -> &Share {
        &self.share
    }

    /// This process's `T` for this store, made with `T::default()` on first
    /// use and shared by every clone of the store — for state that lives
    /// beside the database but not in it, such as the kernel's registry of
    /// receivers waiting in this process. A handful of types use it, so a
    /// scan beats a map.
    pub fn local<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.locals.get()
    }

    pub fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    pub fn partitions(&self) -> u32 {
        self.backend.partitions()
    }

    pub fn durability(&self) -> Durability {
        self.backend.durability()
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.backend.stats().snapshot()
    }

    /// Per partition, how long procedures queued and transactions took.
    pub fn timings(&self) -> Vec<(PKey, TimingSnapshot, TimingSnapshot)> {
        self.backend
            .stats()
            .partitions
            .iter()
            .enumerate()
            .map(|(p, t)| {
                (
                    PKey(p as u32),
                    t.queued.snapshot(),
                    t.transaction.snapshot(),
                )
            })
            .collect()
    }

    /// Checks that `p_key` names a partition of this store.
    pub fn check_partition(&self, p_key: PKey) -> Result<()> {
        let partitions = self.partitions();
        if p_key.0 >= partitions {
            return Err(Error::UnknownPartition {
                p_key: p_key.0,
                partitions,
            });
        }
        Ok(())
    }

    /// Submits procedure `f` to partition `p_key` and returns at once. The
    /// [`Pending`] resolves after the commit (or the rollback); wait on it with
    /// `.wait()` from a thread or `.await` it from async code.
    ///
    /// `f` may run more than once (PostgreSQL retries serialization
    /// failures), so it must be deterministic given the database state and
    /// must not act outside the transaction.
    pub fn submit<T, E, F>(&self, p_key: PKey, f: F) -> Pending<T, E>
    where
        T: Send + 'static,
        E: ProcedureError,
        F: FnMut(&mut dyn Tx) -> std::result::Result<T, E> + Send + 'static,
    {
        self.dispatch(p_key, f, |b, job| b.submit(job))
    }

    /// Runs procedure `f` on partition `p_key` now, on the calling thread,
    /// if nothing else is running on that partition (SQLite): the
    /// procedure commits during this call, with no hand-off to another
    /// thread, and the returned [`Pending`] is ready. If a batch is
    /// running, `f` joins the next group commit like a
    /// [`submit`](Store::submit)ted one. On PostgreSQL it is `submit`: its
    /// client library blocks on its own runtime, which cannot run on an
    /// async caller's thread.
    ///
    /// For kernel procedures, which are short and bounded: from async code
    /// it blocks the calling worker for the procedure and its commit.
    /// Tenant code (stored procedures with long deadlines) and anything
    /// that must return before its procedure runs use `submit`.
    ///
    /// Inside [`grouped`] it is held and queued with the others the task
    /// starts, which should share its commit.
    pub fn run<T, E, F>(&self, p_key: PKey, f: F) -> Pending<T, E>
    where
        T: Send + 'static,
        E: ProcedureError,
        F: FnMut(&mut dyn Tx) -> std::result::Result<T, E> + Send + 'static,
    {
        if let Ok(held) = GROUPED.try_with(Arc::clone) {
            let (job, pending) = Job::of(p_key, self.share.clone(), self.locals.clone(), f);
            match self.check_partition(p_key) {
                Ok(()) => held
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((self.backend.clone(), job)),
                Err(e) => job.finish_err(e),
            }
            return pending;
        }
        self.dispatch(p_key, f, |b, job| b.run(job))
    }

    /// As [`run`](Store::run), for a procedure each of whose writes is one
    /// conditional statement that stays right whatever commits beside it
    /// (a lease renewed `WHERE` its holder still holds it, a row marked
    /// `WHERE` its state still allows it): on PostgreSQL it runs at READ
    /// COMMITTED, so that many of them at once — every node's heartbeat on
    /// the cluster's partition — never fail each other for serialization,
    /// which under SERIALIZABLE a hundred of them on one small table did
    /// most of the time (its predicate locks cover pages, not rows). On
    /// SQLite, where a partition's procedures run one at a time, it is
    /// [`run`](Store::run).
    pub fn run_read_committed<T, E, F>(&self, p_key: PKey, f: F) -> Pending<T, E>
    where
        T: Send + 'static,
        E: ProcedureError,
        F: FnMut(&mut dyn Tx) -> std::result::Result<T, E> + Send + 'static,
    {
        let (mut job, pending) = Job::of(p_key, self.share.clone(), self.locals.clone(), f);
        job.read_committed = true;
        match self.check_partition(p_key) {
            Ok(()) => self.backend.run(job),
            Err(e) => job.finish_err(e),
        }
        pending
    }

    /// Hands the job running `f` to `to` (the backend's submit, run or read),
    /// or fails it at once for a partition this store does not have.
    fn dispatch<T, E, F>(&self, p_key: PKey, f: F, to: fn(&dyn Backend, Job)) -> Pending<T, E>
    where
        T: Send + 'static,
        E: ProcedureError,
        F: FnMut(&mut dyn Tx) -> std::result::Result<T, E> + Send + 'static,
    {
        let (job, pending) = Job::of(p_key, self.share.clone(), self.locals.clone(), f);
        match self.check_partition(p_key) {
            Ok(()) => to(self.backend.as_ref(), job),
            Err(e) => job.finish_err(e),
        }
        pending
    }

    /// Runs read-only procedure `f` on partition `p_key` on a read
    /// connection, never on the partition's executor: it does not wait for
    /// a batch of writes and holds none up. It sees one consistent
    /// snapshot of the partition — every transaction committed before it
    /// began (so a caller reads its own acknowledged writes), nothing
    /// after. A write or a notification in `f` fails with
    /// [`Error::ReadOnly`].
    ///
    /// On SQLite `f` runs on the calling thread, during this call (a WAL
    /// read transaction; the returned [`Pending`] is ready); on PostgreSQL
    /// one of the pool's connections runs it in a `REPEATABLE READ READ
    /// ONLY` transaction (one snapshot; such a transaction never fails for
    /// serialization, so it is never retried).
    pub fn read<T, E, F>(&self, p_key: PKey, f: F) -> Pending<T, E>
    where
        T: Send + 'static,
        E: ProcedureError,
        F: FnMut(&mut dyn Tx) -> std::result::Result<T, E> + Send + 'static,
    {
        self.dispatch(p_key, f, |b, job| b.read(job))
    }

    /// Runs procedure `f` and blocks the calling thread until it committed or
    /// rolled back; on an idle partition it runs on this thread (see
    /// [`run`](Store::run)). In async code `.await` a [`run`](Store::run) or
    /// [`submit`](Store::submit) instead.
    pub fn call<T, E, F>(&self, p_key: PKey, f: F) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: ProcedureError,
        F: FnMut(&mut dyn Tx) -> std::result::Result<T, E> + Send + 'static,
    {
        self.run(p_key, f).wait()
    }

    /// Runs a read-only query over all partitions and returns its rows. A
    /// statement that would write is refused with [`Error::ReadOnly`]. Blocks;
    /// from async code call it inside `spawn_blocking`.
    pub fn query(&self, sql: &str, params: &[Value]) -> Result<Rows> {
        self.backend.query(
            sql,
            params,
            &value::ReadLimits::rows(value::Cap::Fail(QUERY_ROWS_MAX)),
        )
    }

    /// A read-only query under `limits` (rows, result bytes, time, a
    /// cancel flag): what client-reachable SQL runs as. Blocks.
    pub fn query_bounded(
        &self,
        sql: &str,
        params: &[Value],
        limits: &value::ReadLimits,
    ) -> Result<Rows> {
        self.backend.query(sql, params, limits)
    }

    /// Like [`query`](Store::query), but returns at most `max_rows` rows and
    /// sets [`Rows::truncated`] when there were more, without reading them.
    pub fn query_capped(&self, sql: &str, params: &[Value], max_rows: usize) -> Result<Rows> {
        self.backend.query(
            sql,
            params,
            &value::ReadLimits::rows(value::Cap::Truncate(max_rows.min(QUERY_ROWS_MAX))),
        )
    }

    /// What the columnar engine has answered and loaded so far.
    pub fn columnar_stats(&self) -> columnar::Stats {
        self.backend.columnar_stats()
    }

    /// Runs `f` while the columnar engine's snapshot loader is held, as a
    /// long load of another query holds it: for tests of what waits for a
    /// load and what does not.
    #[doc(hidden)]
    pub fn with_columnar_loads_held(&self, mut f: impl FnMut()) {
        self.backend.with_columnar_loads_held(&mut f)
    }

    /// Subscribes to a change-feed channel (see [`feed`]).
    pub fn subscribe(&self, channel: &str) -> Subscription {
        self.backend.feed().subscribe(channel)
    }

    /// Change-feed subscribers cut off so far for falling behind.
    pub fn feed_cut_offs(&self) -> u64 {
        self.backend.feed().cut_offs()
    }

    /// What the change feed's subscribers in this process have not read.
    pub fn feed_backlog(&self) -> feed::Backlog {
        self.backend.feed().backlog()
    }

    /// Whether this process is delivered `channel`'s notifications now
    /// (always on SQLite; on PostgreSQL while it has subscribers for it).
    pub fn feed_delivers(&self, channel: &str) -> bool {
        self.backend.feed().delivered(channel)
    }

    /// How many of this process's subscriptions to `channel` are live: a
    /// waiter's, once it waits (what a test waits for before it acts).
    pub fn feed_subscribers(&self, channel: &str) -> usize {
        self.backend.feed().subscribers(channel)
    }
}

/// Runs a future to completion on the calling thread, parking it between
/// wake-ups. Used for the store's blocking waits so that they work on any
/// thread — a plain thread, a `spawn_blocking` thread or (blocking it, which
/// is the caller's choice) an async worker — and never panic the way tokio's
/// own `blocking_recv` does inside a runtime.
pub(crate) fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            // A spurious unpark just polls again; the waker unparks us when
            // the future can make progress.
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Microseconds since the Unix epoch, the unit of every tabos timestamp.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// (year, month 1–12, day 1–31) of `days` since 1970-01-01, proleptic
/// Gregorian (Howard Hinnant's civil_from_days): the one copy, for the
/// kernel's schedules and every printed time.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// A timestamp (µs since the epoch) as RFC 3339 in UTC: to the µs
/// (`2026-11-24T21:04:38.123456Z`) with `micros`, else to the second.
pub fn rfc3339(us: i64, micros: bool) -> String {
    let (secs, frac) = (us.div_euclid(1_000_000), us.rem_euclid(1_000_000));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (rest / 3_600, rest % 3_600 / 60, rest % 60);
    if micros {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{frac:06}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
    }
}
