//! The cluster backend: PostgreSQL (or a wire-compatible database).
//!
//! ## Execution
//! A fixed pool of worker threads, each owning one connection, takes jobs from
//! one bounded queue. A procedure runs in a SERIALIZABLE transaction; if it
//! (or its COMMIT) fails with SQLSTATE 40001 (serialization failure) or 40P01
//! (deadlock), the transaction is rolled back and the procedure run again after
//! a jittered, exponentially growing pause, at most [`RETRIES_MAX`] times —
//! the contract CockroachDB and YugabyteDB impose as well. Procedures are
//! deterministic and act only through their transaction, so a retry is safe.
//!
//! A procedure's first attempt runs concurrently with everything else, which
//! keeps independent procedures parallel (and PostgreSQL's group commit
//! busy). After a serialization failure it retries holding its realm's turn
//! on its partition (a mutex per partition and realm — the kernel's own
//! work is one more realm —, within this node), and while any procedure of
//! that realm there is retrying, new ones take the turn too: a realm's
//! procedures share hot rows (its counters, its workers), and running them
//! all at once under contention would only make SERIALIZABLE abort all but
//! one of them, over and over. Per realm, not per partition: one realm's
//! procedures conflicting among themselves (sixteen tenant calls writing
//! one row, each running for most of a second) must not make another
//! realm's calls wait for their turns (issue 36, item 1). Reads never take
//! turns.
//!
//! ## A COMMIT whose answer is lost
//! When the connection breaks during COMMIT (the primary killed, a failover)
//! the transaction may or may not have committed. A destructive procedure —
//! a receive that deletes what it returns — must not then be reported failed
//! if it committed (its messages would be lost) nor run again if it did
//! (they would be taken twice). So every writing transaction stamps its
//! worker's row in `store_commit` with a number of its own (`COMMIT_MARK`,
//! skipped when the transaction wrote nothing), and after a lost COMMIT the
//! worker reconnects — to the promoted standby, if it came to that — and
//! reads the row back under the row's lock (`COMMIT_CHECK`, which waits for
//! an old backend still committing): its number there means committed, and
//! the procedure's result is returned; anything else means not committed,
//! and the procedure runs again. Only when the database stays out of reach
//! past the request's wait is the caller told the outcome is unknown.
//!
//! ## Change feed
//! A procedure's notifications are sent with `pg_notify` inside its own
//! transaction, so PostgreSQL delivers them only if and when it commits, in
//! commit order. Each tabos channel has a PostgreSQL channel of its own
//! ([`pg_channel`]), with the tabos channel framed before a newline in the
//! payload; a dedicated listener connection LISTENs on the channels this
//! process has subscribers for — a subscription to a new channel returns
//! once the LISTEN has run — and feeds what arrives into the in-process
//! [`Feed`]. So a notification reaches the nodes that wait for it, not
//! every node. Should the listener lose its connection, every subscriber
//! is cut off as lagged (they may have missed notifications and must
//! re-read) and the listener reconnects.
//!
//! ## Connections
//! The pool holds at most [`Config::connections`] connections and, once
//! idle, keeps [`POOL_IDLE_KEEP`] of them: a worker whose connection has
//! not been used for [`POOL_IDLE_CLOSE`] closes it, and connects again when
//! work comes. An idle node holds the pool's two and the listener's one.
//!
//! ## Types
//! Values cross as the five store types; see [`crate::value`].

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::BytesMut;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{FromSql, IsNull, ToSql, Type};
use postgres::{Client, IsolationLevel, NoTls, Statement};

use crate::error::{Error, Result, SqlCode};
use crate::fair::{FairQueue, Refused, Share, SHARE_QUEUE_MAX};
use crate::feed::{self, Feed, Notification};
use crate::migrate::{self, Migration};
use crate::value::{ByteBudget, ReadLimits, ReadScope, Row, Rows, Value};
use crate::{
    AfterCommit, Backend, BackendKind, Config, Dialect, Durability, Job, Location, Outcome, PKey,
    Stats, Tx, QUEUE_PROCS_MAX,
};

/// Connections the pool keeps when idle (see the module doc).
pub const POOL_IDLE_KEEP: usize = 2;
/// How long an extra connection of the pool may sit unused before it is
/// closed.
pub const POOL_IDLE_CLOSE: Duration = Duration::from_secs(10);
/// Most times one procedure is retried after a serialization failure.
pub const RETRIES_MAX: u32 = 100;
/// First retry pause, in microseconds; doubles per retry up to the cap.
const RETRY_PAUSE_MIN_US: u64 = 100;
const RETRY_PAUSE_MAX_US: u64 = 10_000;
/// Prepared statements kept per connection.
const STATEMENT_CACHE_MAX: usize = 256;
/// Attempts to connect a worker when the store opens before giving up.
const CONNECT_ATTEMPTS_MAX: u32 = 5;
/// How long a request waits for the database to come back (a restart, a
/// failover) before it fails with [`Error::Unavailable`]: its connection is
/// re-established meanwhile, with exponential back-off.
pub const RECONNECT_WAIT_MAX: Duration = Duration::from_secs(30);
/// First and longest pause between reconnection attempts.
const RECONNECT_PAUSE_MIN: Duration = Duration::from_millis(50);
const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(2);

enum PgJob {
    Proc(Job),
    /// A read-only procedure ([`crate::Store::read`]).
    ReadProc(Job),
    Read {
        sql: String,
        params: Vec<Value>,
        limits: Box<ReadLimits>,
        done: tokio::sync::oneshot::Sender<Result<Rows>>,
    },
}

pub struct PgBackend {
    partitions: u32,
    durability: Durability,
    queue: Arc<JobQueue>,
    workers: Vec<JoinHandle<()>>,
    listener: Option<JoinHandle<()>>,
    remote: Arc<PgRemote>,
    feed: Arc<Feed>,
    stats: Arc<Stats>,
}

fn connect(url: &str, durability: Durability) -> Result<Client> {
    let mut last = None;
    for attempt in 0..CONNECT_ATTEMPTS_MAX {
        match connect_once(url, durability) {
            Ok(c) => return Ok(c),
            // Not there (yet): a few tries, for a server still starting.
            Err(e) if e.is_unavailable() => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(50 << attempt));
            }
            Err(e) => return Err(e),
        }
    }
    let e = last.map_or_else(|| "no attempt made".to_string(), |e| e.to_string());
    Err(Error::Io(format!(
        "cannot connect to PostgreSQL at {}: {e}",
        redact(url)
    )))
}

/// Connects as [`connect`] does, retrying with exponential back-off until
/// `deadline`: how a worker gets its connection back after the server
/// restarted or failed over (a multi-host URL with
/// `target_session_attrs=read-write` finds the new primary).
fn reconnect_until(
    url: &str,
    durability: Durability,
    deadline: std::time::Instant,
) -> Result<Client> {
    let mut pause = RECONNECT_PAUSE_MIN;
    loop {
        let e = match connect_once(url, durability) {
            Ok(c) => return Ok(c),
            Err(e) => e,
        };
        let now = std::time::Instant::now();
        if now >= deadline {
            return Err(Error::Unavailable(format!(
                "cannot reach PostgreSQL at {} ({e})",
                redact(url)
            )));
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
    }
}

/// How long a connection attempt may take (an address no one answers
/// would otherwise hold it for minutes).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long data sent on a connection may go unacknowledged before the
/// connection is given up: a network cut is then an error in seconds, not
/// after TCP's many minutes of retries.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// Keepalives on a connection that is quiet (the listener's): a probe
/// after this long, every [`KEEPALIVE_INTERVAL`], [`KEEPALIVE_RETRIES`]
/// times, before the connection counts as lost.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_RETRIES: u32 = 3;
/// Longest a session may sit in a transaction waiting for its client: the
/// server then ends it and its locks go. A node cut off from the network
/// in the middle of a transaction cannot end it, and the server, with
/// nothing to send, would never notice (its keepalives wait hours): the
/// rows it had locked — its own lease, the cluster's — would stop every
/// other node's heartbeat. A store transaction is a procedure that runs
/// between its statements for at most a second (the sandbox's bound), so
/// this is far past any live one.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);

/// `url` as a connection's settings, with the store's bounds on time where
/// the URL names none.
fn pg_config(url: &str) -> Result<tokio_postgres::Config> {
    let mut c: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::Config(format!("bad PostgreSQL URL {}: {e}", redact(url))))?;
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(CONNECT_TIMEOUT);
    }
    if c.get_tcp_user_timeout().is_none() {
        c.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    c.keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES);
    Ok(c)
}

/// One connection attempt, set up for the store's transactions.
fn connect_once(url: &str, durability: Durability) -> Result<Client> {
    let mut c = postgres::Config::from(pg_config(url)?)
        .connect(NoTls)
        .map_err(|e| map_err(&e, "connect"))?;
    let sync = match durability {
        Durability::Off => "off",
        Durability::Normal | Durability::Full => "on",
    };
    // Times are in UTC at every door, as on SQLite (the dialect module).
    let setup = format!(
        "SET synchronous_commit = {sync}; SET default_transaction_isolation = 'serializable'; \
         SET TimeZone = 'UTC'; SET idle_in_transaction_session_timeout = {}",
        IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
    );
    c.batch_execute(&setup).map_err(|e| map_err(&e, &setup))?;
    Ok(c)
}

/// A READ COMMITTED transaction on `client` (set-up work: migrations, a
/// realm's schema, a commit's lookup).
fn begin_read_committed(client: &mut Client) -> Result<postgres::Transaction<'_>> {
    client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .map_err(|e| map_err(&e, "BEGIN"))
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(colon) => format!("{}:***{}", &url[..s + 3 + colon], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

/// Runs `f` on a fresh thread. The synchronous `postgres` client drives a
/// tokio runtime of its own and refuses to run on a thread that is already
/// inside one, which a caller (an async `main`, a test) may well be.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl PgBackend {
    pub fn open(config: &Config, migrations: &[Migration]) -> Result<PgBackend> {
        off_runtime(|| PgBackend::open_here(config, migrations))
    }

    fn open_here(config: &Config, migrations: &[Migration]) -> Result<PgBackend> {
        let Location::Postgres(url) = &config.location else {
            return Err(Error::Config("not a PostgreSQL location".into()));
        };
        let mut first = connect(url, config.durability)?;
        let partitions = init_database(&mut first, config.partitions, migrations)?;

        let feed = Feed::new();
        let stats = Arc::new(Stats::new(partitions));
        let (listener, remote) = start_listener(url.clone(), feed.clone(), stats.clone())?;
        let queue = Arc::new(JobQueue::new(config.connections));
        let mut workers = Vec::new();
        let turns = Arc::new(Turns::default());
        let mut first = Some(first);
        for i in 0..config.connections {
            // The first connection is kept; the others are made as work
            // needs them (see the module doc).
            let client = first.take();
            if client.is_some() {
                stats.connections.fetch_add(1, Ordering::Relaxed);
            }
            let worker = Worker {
                index: i,
                turns: turns.clone(),
                partitions,
                client,
                url: url.clone(),
                durability: config.durability,
                statements: PgStatements::default(),
                scoped_ready: std::collections::HashSet::new(),
                stats: stats.clone(),
                broken: false,
                reconnect_wait: config.reconnect_wait,
                idle_close: config.pool_idle_close,
                writer: writer_id(),
                mark_seq: 0,
                mark: None,
            };
            let queue = queue.clone();
            let h = std::thread::Builder::new()
                .name(format!("tabos-pg-{i}"))
                .spawn(move || worker.run(&queue))
                .map_err(|e| Error::Io(format!("cannot start worker thread: {e}")))?;
            workers.push(h);
        }
        Ok(PgBackend {
            partitions,
            durability: config.durability,
            queue,
            workers,
            listener: Some(listener),
            remote,
            feed,
            stats,
        })
    }

    fn send(&self, job: PgJob) -> std::result::Result<(), Box<(PgJob, Error)>> {
        self.queue.push(job)
    }
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        self.queue.close();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
        self.remote.stop.notify_one();
        if let Some(h) = self.listener.take() {
            let _ = h.join();
        }
    }
}

/// The pool's queue of requests: workers wait on it each with its own
/// deadline (so that an idle one can close its connection), which a
/// channel behind one mutex would not allow. A request wakes the idle
/// worker of the lowest index: work goes to the connections kept open,
/// and the others see none and close (a wake-anyone condition variable
/// would hand an idle node's one heartbeat a second to each worker in
/// turn, and none would ever idle long enough to close).
///
/// Requests wait by realm (`fair`): short ones first, round robin; long
/// ones (tenant code) by the run time charged to their realm, and at most
/// `long_max` at once, so a realm's long procedures never hold every
/// connection and a short call always finds one soon.
struct JobQueue {
    state: Mutex<QueueState>,
    /// One per worker, by index.
    wake: Vec<std::sync::Condvar>,
    /// Most long requests running at once: all workers but one.
    long_max: usize,
}

#[derive(Default)]
struct QueueState {
    jobs: FairQueue<PgJob>,
    closed: bool,
    /// Workers waiting for a request and not yet woken, by index.
    idle: std::collections::BTreeSet<usize>,
}

impl JobQueue {
    fn new(workers: usize) -> JobQueue {
        JobQueue {
            state: Mutex::default(),
            wake: (0..workers).map(|_| std::sync::Condvar::new()).collect(),
            long_max: workers.saturating_sub(1).max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `job`, or hands it back with why not.
    fn push(&self, job: PgJob) -> std::result::Result<(), Box<(PgJob, Error)>> {
        let mut q = self.lock();
        if q.closed {
            return Err(Box::new((job, Error::Closed)));
        }
        let share = match &job {
            PgJob::Proc(j) | PgJob::ReadProc(j) => j.share.clone(),
            PgJob::Read { .. } => Share::default(),
        };
        if let Err((job, why)) = q.jobs.push(&share, job) {
            let e = Error::Overloaded(match why {
                Refused::Full => {
                    format!("{QUEUE_PROCS_MAX} requests queued for the connection pool")
                }
                Refused::ShareFull => format!(
                    "realm {} has {SHARE_QUEUE_MAX} requests queued for the connection pool: \
                     its share of the queue",
                    share.realm
                ),
            });
            return Err(Box::new((job, e)));
        }
        let woken = q.idle.pop_first();
        drop(q);
        if let Some(i) = woken {
            self.wake[i].notify_one();
        }
        Ok(())
    }

    /// The next request for worker `index`, with the realm to charge its
    /// run time to if it is long ([`JobQueue::charge`]); `Err(true)` once
    /// closed, `Err(false)` if none came within `wait`.
    fn pop(
        &self,
        index: usize,
        wait: Duration,
    ) -> std::result::Result<(PgJob, Option<Arc<str>>), bool> {
        let deadline = std::time::Instant::now() + wait;
        let mut q = self.lock();
        loop {
            let next = match q.jobs.pop_short() {
                Some(job) => Some((job, None)),
                None => q
                    .jobs
                    .pop_long_within(self.long_max)
                    .map(|(realm, job)| (job, Some(realm))),
            };
            if let Some(next) = next {
                q.idle.remove(&index);
                return Ok(next);
            }
            if q.closed {
                q.idle.remove(&index);
                return Err(true);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                q.idle.remove(&index);
                return Err(false);
            }
            q.idle.insert(index);
            q = self.wake[index]
                .wait_timeout(q, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// A long request of `realm` ran for `took`; a long one waiting for
    /// its turn may go now.
    fn charge(&self, realm: &str, took: Duration) {
        let mut q = self.lock();
        q.jobs.charge(realm, took);
        let woken = if q.jobs.has_long() {
            q.idle.pop_first()
        } else {
            None
        };
        drop(q);
        if let Some(i) = woken {
            self.wake[i].notify_one();
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        for w in &self.wake {
            w.notify_all();
        }
    }
}

impl Backend for PgBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
    }
    fn partitions(&self) -> u32 {
        self.partitions
    }
    fn durability(&self) -> Durability {
        self.durability
    }
    fn submit(&self, job: Job) {
        if let Err(refused) = self.send(PgJob::Proc(job)) {
            if let (PgJob::Proc(job), e) = *refused {
                job.finish_err(e);
            }
        }
    }
    fn read(&self, job: Job) {
        if let Err(refused) = self.send(PgJob::ReadProc(job)) {
            if let (PgJob::ReadProc(job), e) = *refused {
                job.finish_err(e);
            }
        }
    }
    fn query(&self, sql: &str, params: &[Value], limits: &ReadLimits) -> Result<Rows> {
        // PostgreSQL answers with its own executor (Auto is PostgreSQL's).
        if limits.engine == crate::columnar::Engine::Columnar {
            return Err(Error::Invalid(
                "the columnar engine is the embedded (SQLite) backend's; PostgreSQL runs \
                 its own executor"
                    .into(),
            ));
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        let job = PgJob::Read {
            sql: sql.to_string(),
            params: params.to_vec(),
            limits: Box::new(limits.clone()),
            done,
        };
        if let Err(refused) = self.send(job) {
            return Err(refused.1);
        }
        crate::block_on(rx).unwrap_or(Err(Error::Closed))
    }
    fn feed(&self) -> &Arc<Feed> {
        &self.feed
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
}

/// Creates the bookkeeping tables, settles the partition count (the
/// database's own, or `asked` for a new one) and applies pending
/// migrations, under an advisory lock so that nodes starting together do
/// not race. Returns the partition count.
fn init_database(client: &mut Client, asked: Option<u32>, migrations: &[Migration]) -> Result<u32> {
    let mut t = begin_read_committed(client)?;
    let lock = "SELECT pg_advisory_xact_lock(7070707070)";
    t.execute(lock, &[]).map_err(|e| map_err(&e, lock))?;
    let meta = "CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)";
    t.batch_execute(meta).map_err(|e| map_err(&e, meta))?;
    let sql = "SELECT value FROM store_meta WHERE key = 'partitions'";
    let existing: Option<String> = t
        .query_opt(sql, &[])
        .map_err(|e| map_err(&e, sql))?
        .map(|r| r.get(0));
    let existing = match existing {
        None => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| {
            Error::Config(format!("store_meta says {v:?} partitions: not a count"))
        })?),
    };
    let partitions = crate::partitions_to_open(existing, asked)?;
    if existing.is_none() {
        let sql = "INSERT INTO store_meta (key, value) VALUES ('partitions', $1)";
        t.execute(sql, &[&partitions.to_string()])
            .map_err(|e| map_err(&e, sql))?;
    }
    t.batch_execute(COMMIT_MARK_DDL)
        .map_err(|e| map_err(&e, COMMIT_MARK_DDL))?;
    let sql = "DELETE FROM store_commit WHERE used_us < $1";
    let stale = crate::now_us() - COMMIT_MARK_KEEP.as_micros() as i64;
    t.execute(sql, &[&stale]).map_err(|e| map_err(&e, sql))?;
    t.batch_execute(migrate::SCHEMA_VERSION_DDL)
        .map_err(|e| map_err(&e, migrate::SCHEMA_VERSION_DDL))?;
    let sql = "SELECT version, name FROM schema_version ORDER BY version";
    let recorded: Vec<(u32, String)> = t
        .query(sql, &[])
        .map_err(|e| map_err(&e, sql))?
        .iter()
        .map(|r| (r.get::<_, i64>(0) as u32, r.get::<_, String>(1)))
        .collect();
    for m in migrate::pending(&recorded, migrations)? {
        t.batch_execute(m.postgres).map_err(|e| {
            Error::Migration(format!(
                "{} {}: {}",
                m.version,
                m.name,
                map_err(&e, m.postgres)
            ))
        })?;
        let sql = "INSERT INTO schema_version (version, name, applied_us) VALUES ($1, $2, $3)";
        t.execute(sql, &[&i64::from(m.version), &m.name, &crate::now_us()])
            .map_err(|e| map_err(&e, sql))?;
    }
    t.commit().map_err(|e| map_err(&e, "COMMIT"))?;
    Ok(partitions)
}

/// The PostgreSQL channel a tabos channel travels on: a name of its own
/// (a hash; PostgreSQL's names are at most 63 bytes), so that a process
/// LISTENs for the channels it has subscribers for and PostgreSQL delivers
/// it nothing else. The payload repeats the tabos channel, which tells
/// apart the (astronomically unlikely) channels that share a hash.
pub fn pg_channel(channel: &str) -> String {
    format!("tabos_{:016x}", fnv64(channel))
}

/// The listener's [`Remote`]: woken to bring its LISTENs in line with the
/// feed's subscribers.
struct PgRemote {
    wake: tokio::sync::Notify,
    stop: tokio::sync::Notify,
}

impl feed::Remote for PgRemote {
    fn poke(&self) {
        self.wake.notify_one();
    }
}

/// Starts the listener: a thread with one connection that LISTENs on
/// exactly the channels this process's feed has subscribers for, and
/// publishes what PostgreSQL delivers. Should it lose its connection,
/// every subscriber is cut off as lagged (they may have missed
/// notifications and must re-read) and it connects again, with
/// exponential back-off (nothing can wake it while the server is away).
fn start_listener(
    url: String,
    feed: Arc<Feed>,
    stats: Arc<Stats>,
) -> Result<(JoinHandle<()>, Arc<PgRemote>)> {
    let remote = Arc::new(PgRemote {
        wake: tokio::sync::Notify::new(),
        stop: tokio::sync::Notify::new(),
    });
    feed.set_remote(remote.clone());
    let r = remote.clone();
    let h = std::thread::Builder::new()
        .name("tabos-pg-listen".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                // No listener: subscriptions wait their bound and stand.
                Err(_) => return,
            };
            rt.block_on(listen(url, feed, stats, r));
        })
        .map_err(|e| Error::Io(format!("cannot start listener thread: {e}")))?;
    Ok((h, remote))
}

/// The listener's life: a session per connection, until stopped.
async fn listen(url: String, feed: Arc<Feed>, stats: Arc<Stats>, remote: Arc<PgRemote>) {
    let mut pause = RECONNECT_PAUSE_MIN;
    // Whether a subscriber may have missed something: the listener lost a
    // connection, or let subscribers go on without their LISTEN.
    let mut missed = false;
    loop {
        let config = match pg_config(&url) {
            Ok(c) => c,
            // The pool connected with it: not reached.
            Err(_) => return,
        };
        let connected = tokio::select! {
            c = config.connect(tokio_postgres::NoTls) => c,
            () = remote.stop.notified() => return,
        };
        let (client, connection) = match connected {
            Ok(c) => c,
            Err(_) => {
                // Waiting subscribers go on; they are cut off when it is back.
                feed.release_waiters();
                missed = true;
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = remote.stop.notified() => return,
                }
                pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
                continue;
            }
        };
        pause = RECONNECT_PAUSE_MIN;
        stats.connections.fetch_add(1, Ordering::Relaxed);
        // What changed while nobody listened is read again by every
        // waiter: cut off, they subscribe again, which LISTENs anew. (On
        // the first connection, with every subscriber still waiting for its
        // LISTEN, nothing can have been missed.)
        if std::mem::take(&mut missed) {
            feed.cut_off_all();
        }
        feed.mark_all_dirty();
        let stopped = session(&client, connection, &feed, &stats, &remote).await;
        stats.connections.fetch_sub(1, Ordering::Relaxed);
        if stopped {
            return;
        }
        // Notifications may have been missed: tell every subscriber.
        feed.cut_off_all();
        missed = true;
    }
}

/// One connection's life: delivers notifications and runs the feed's
/// LISTENs and UNLISTENs until the connection is lost (`false`) or the
/// listener is stopped (`true`).
async fn session<S>(
    client: &tokio_postgres::Client,
    mut connection: tokio_postgres::Connection<tokio_postgres::Socket, S>,
    feed: &Feed,
    stats: &Stats,
    remote: &PgRemote,
) -> bool
where
    S: tokio_postgres::tls::TlsStream + Unpin,
{
    let deliver = async {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    let Some((channel, payload)) = n.payload().split_once('\n') else {
                        continue;
                    };
                    stats.notifications.fetch_add(1, Ordering::Relaxed);
                    feed.publish(&[Notification {
                        channel: channel.to_string(),
                        payload: payload.to_string(),
                    }]);
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    };
    let reconcile = async {
        // PostgreSQL channels LISTENed on, by how many tabos channels
        // want each (two that share a hash share a LISTEN).
        let mut listening: HashMap<String, usize> = HashMap::new();
        loop {
            let (listen, unlisten, ticket) = feed.take_dirty();
            let mut sql = String::new();
            for ch in &listen {
                let pg = pg_channel(ch);
                let n = listening.entry(pg.clone()).or_default();
                *n += 1;
                if *n == 1 {
                    sql.push_str(&format!("LISTEN {pg};"));
                }
            }
            for ch in &unlisten {
                let pg = pg_channel(ch);
                if let Some(n) = listening.get_mut(&pg) {
                    *n -= 1;
                    if *n == 0 {
                        listening.remove(&pg);
                        sql.push_str(&format!("UNLISTEN {pg};"));
                    }
                }
            }
            if !sql.is_empty() && client.batch_execute(&sql).await.is_err() {
                return;
            }
            feed.unlistened(&unlisten);
            feed.listened_to(ticket);
            remote.wake.notified().await;
        }
    };
    tokio::select! {
        () = deliver => false,
        () = reconcile => false,
        () = remote.stop.notified() => true,
    }
}

/// Most (partition, realm) turns a node keeps; past it those no procedure
/// holds are forgotten.
const TURNS_MAX: usize = 4_096;

/// A partition and a realm (`""`: the kernel's own work).
type TurnKey = (u32, Arc<str>);

/// The turns of this node's procedures, by partition and realm (see the
/// module doc).
#[derive(Default)]
struct Turns {
    by: Mutex<std::collections::HashMap<TurnKey, Arc<Turn>>>,
}

impl Turns {
    /// The turn of `realm`'s procedures on partition `p`.
    fn get(&self, p: PKey, realm: &Arc<str>) -> Arc<Turn> {
        // Only the map changes under the lock.
        let mut by = self.by.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = by.get(&(p.0, realm.clone())) {
            return t.clone();
        }
        if by.len() >= TURNS_MAX {
            by.retain(|_, t| Arc::strong_count(t) > 1);
        }
        by.entry((p.0, realm.clone())).or_default().clone()
    }
}

/// A realm's turn on a partition within this node (see the module doc):
/// while any of its procedures there is retrying, they all run one at a
/// time.
#[derive(Default)]
struct Turn {
    lock: Mutex<()>,
    /// Its procedures currently retrying after a conflict.
    retrying: std::sync::atomic::AtomicU32,
}

/// Counts a procedure as retrying for as long as it lives.
struct Retrying<'a>(&'a Turn);

impl<'a> Retrying<'a> {
    fn new(t: &'a Turn) -> Retrying<'a> {
        t.retrying.fetch_add(1, Ordering::AcqRel);
        Retrying(t)
    }
}

impl Drop for Retrying<'_> {
    fn drop(&mut self) {
        self.0.retrying.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Worker {
    /// Its place in the pool: the first [`POOL_IDLE_KEEP`] keep their
    /// connections when idle.
    index: usize,
    /// The partitions' turns, per realm (see [`Turn`]).
    turns: Arc<Turns>,
    /// Partitions of the store (a job naming another gets no turn).
    partitions: u32,
    /// Its connection; `None` while idle (closed) or not yet made.
    client: Option<Client>,
    url: String,
    durability: Durability,
    statements: PgStatements,
    /// Realm schemas known to be up to date (see `realm_schema`).
    scoped_ready: std::collections::HashSet<String>,
    stats: Arc<Stats>,
    /// The connection was found unusable (lost, or to a server that no
    /// longer accepts writes): replaced before the next use.
    broken: bool,
    /// How long a request waits for the database ([`Config::reconnect_wait`]).
    reconnect_wait: Duration,
    /// How long its connection may idle ([`Config::pool_idle_close`]).
    idle_close: Duration,
    /// Its row in `store_commit`, and the last number it stamped there.
    writer: i64,
    mark_seq: i64,
    /// [`COMMIT_MARK`], prepared on the current connection.
    mark: Option<Statement>,
}

/// The table of commit marks (see the module doc, "A COMMIT whose answer
/// is lost"): one row per pool worker, updated in place (the low fill
/// factor keeps those updates HOT, out of the index).
const COMMIT_MARK_DDL: &str = "CREATE TABLE IF NOT EXISTS store_commit (
    writer BIGINT PRIMARY KEY, seq BIGINT NOT NULL, used_us BIGINT NOT NULL)
    WITH (fillfactor = 50)";
/// Stamps the worker's row, in a transaction that wrote something (one
/// with a transaction id); affects no row otherwise.
const COMMIT_MARK: &str = "INSERT INTO store_commit (writer, seq, used_us)
    SELECT $1, $2, $3 WHERE txid_current_if_assigned() IS NOT NULL
    ON CONFLICT (writer) DO UPDATE SET seq = excluded.seq, used_us = excluded.used_us";
/// Reads the worker's mark after a lost COMMIT, at READ COMMITTED: the
/// upsert waits for a backend still committing the old transaction (its
/// row lock, or its pending insert of the row) and then sees its outcome.
/// Leaves the mark as it is (or -1, which no transaction uses).
const COMMIT_CHECK: &str = "INSERT INTO store_commit (writer, seq, used_us) VALUES ($1, -1, $2)
    ON CONFLICT (writer) DO UPDATE SET used_us = excluded.used_us RETURNING seq";
/// Marks not used for this long are deleted when a node opens the
/// database (their workers are long gone).
const COMMIT_MARK_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

/// A writer id for a pool worker: unique across the cluster's processes
/// (64 bits from the OS's random keys, via the standard library's hasher
/// seeding, with this process's count of workers folded in).
fn writer_id() -> i64 {
    use std::hash::{BuildHasher, Hasher};
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(MADE.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    // Non-negative, and never the check's -1.
    (h.finish() >> 1) as i64
}

/// Realm schemas a worker remembers as ready before it checks again.
const SCOPED_REALMS_CACHED: usize = 1_024;

/// FNV-1a, 64 bits: a realm's schema name.
fn fnv64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Worker {
    fn run(mut self, queue: &JobQueue) {
        loop {
            let (job, long) = match queue.pop(self.index, self.idle_close) {
                Ok(next) => next,
                Err(true) => return,
                Err(false) => {
                    // Idle for a while: an extra connection goes.
                    if self.index >= POOL_IDLE_KEEP && self.client.take().is_some() {
                        self.stats.connections.fetch_sub(1, Ordering::Relaxed);
                        self.statements.clear();
                        self.scoped_ready.clear();
                    }
                    continue;
                }
            };
            let started = std::time::Instant::now();
            self.serve(job);
            if let Some(realm) = long {
                queue.charge(&realm, started.elapsed());
            }
        }
    }

    /// Runs one request, reconnecting first if need be.
    fn serve(&mut self, job: PgJob) {
        // Each request waits at most this long for the database.
        let deadline = std::time::Instant::now() + self.reconnect_wait;
        if let Err(e) = self.ensure_connected(deadline) {
            match job {
                PgJob::Proc(j) | PgJob::ReadProc(j) => j.finish_err(e),
                PgJob::Read { done, .. } => {
                    let _ = done.send(Err(e));
                }
            }
            return;
        }
        match job {
            PgJob::Proc(job) => self.run_proc(job, deadline),
            PgJob::ReadProc(mut job) => {
                // Reads change nothing: run again on a new connection.
                let outcome = loop {
                    match self.read_proc(&mut job) {
                        Err(f) if f.unavailable => {
                            self.broken = true;
                            if let Err(e) = self.ensure_connected(deadline) {
                                break Err(job.failure(e));
                            }
                        }
                        other => break other,
                    }
                };
                let _ = job.done.send(outcome);
            }
            PgJob::Read {
                sql,
                params,
                limits,
                done,
            } => {
                let rows = loop {
                    match self.read(&sql, &params, &limits) {
                        Err(e) if e.is_unavailable() => {
                            self.broken = true;
                            if let Err(e) = self.ensure_connected(deadline) {
                                break Err(e);
                            }
                        }
                        other => break other,
                    }
                };
                let _ = done.send(rows);
            }
        }
    }

    fn read(&mut self, sql: &str, params: &[Value], limits: &ReadLimits) -> Result<Rows> {
        let scope = match &limits.scope {
            ReadScope::All => None,
            ReadScope::Realm(realm) => {
                // A write is a write, whoever asks: said as such before the
                // realm's role would refuse it for want of a privilege
                // (as on SQLite).
                if crate::sql::is_write_keyword(&crate::sql::first_keyword(sql)) {
                    return Err(Error::ReadOnly(format!(
                        "this statement would change the database; queries here are read-only: \
                         {sql}"
                    )));
                }
                Some(self.realm_schema(realm)?)
            }
        };
        let Some(client) = self.client.as_mut() else {
            return Err(Error::Unavailable(
                "the pool's connection is not made".into(),
            ));
        };
        let mut t = client
            .build_transaction()
            .read_only(true)
            .start()
            .map_err(|e| map_err(&e, "BEGIN READ ONLY"))?;
        let started = std::time::Instant::now();
        if let Some(time) = limits.time_max {
            // The server stops the statement at its deadline (SQLSTATE 57014).
            let set = format!("SET LOCAL statement_timeout = {}", time.as_millis().max(1));
            t.batch_execute(&set).map_err(|e| map_err(&e, &set))?;
        }
        if let Some(schema) = &scope {
            // The realm's role may read only its schema's views (see
            // `realm_schema`); `SET LOCAL` ends with this transaction.
            let set =
                format!("SET LOCAL ROLE {schema}; SET LOCAL search_path = {schema}, pg_catalog");
            t.batch_execute(&set).map_err(|e| map_err(&e, &set))?;
        }
        // A scoped statement is prepared afresh: it was checked for the
        // role of this transaction.
        let mut fresh = PgStatements::default();
        let rows = {
            let mut tx = PgTx {
                t: &mut t,
                statements: if scope.is_some() {
                    &mut fresh
                } else {
                    &mut self.statements
                },
                p_key: PKey(0),
                notes: Vec::new(),
                hooks: Vec::new(),
            };
            tx.query_limited(sql, params, limits, started)
        };
        let _ = t.rollback();
        rows.map_err(|e| match e {
            Error::Sql(s) if s.code == SqlCode::Sqlstate("57014".into()) => limits.stopped(sql),
            Error::Sql(s) if s.code == SqlCode::Sqlstate("25006".into()) => {
                Error::ReadOnly(format!(
                    "this statement would change the database; queries here are read-only: {sql}"
                ))
            }
            // insufficient_privilege, undefined_table: outside the realm's view.
            Error::Sql(s)
                if scope.is_some()
                    && (s.code == SqlCode::Sqlstate("42501".into())
                        || s.code == SqlCode::Sqlstate("42P01".into())) =>
            {
                Error::OutOfScope(format!("{}: {sql}", s.message))
            }
            other => other,
        })
    }

    /// The schema (and role of the same name) holding `realm`'s views,
    /// created or brought up to date with the schema's `tenant_view` table
    /// when this connection first needs it.
    ///
    /// Each view is `SELECT * FROM public.<name> WHERE realm = '<realm>'`
    /// with the realm a literal, owned by the node's role, with
    /// `security_barrier` (a tenant's functions never see rows the filter
    /// drops). The role may use its schema and read its views, nothing else
    /// of the database. What keeps a tenant in its role: the statement is
    /// one SELECT in a READ ONLY transaction (no SET, no DDL), and
    /// `set_config` — the one function that could change `role` mid-query —
    /// is not executable by non-superusers in this database. Creating roles
    /// and revoking that function need the node's role to be a superuser;
    /// without one a scoped query is refused.
    fn realm_schema(&mut self, realm: &str) -> Result<String> {
        let name = format!("tabos_r_{:016x}", fnv64(realm));
        if self.scoped_ready.contains(&name) {
            return Ok(name);
        }
        let mut t = begin_read_committed(self.conn()?)?;
        let sql = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user";
        let superuser: bool = t.query_one(sql, &[]).map_err(|e| map_err(&e, sql))?.get(0);
        if !superuser {
            return Err(Error::Config(
                "realm-scoped SQL on PostgreSQL needs the node's database role to be a superuser \
                 (it creates a role per realm and revokes set_config from PUBLIC)"
                    .into(),
            ));
        }
        let lock = "SELECT pg_advisory_xact_lock(7070707071)";
        t.execute(lock, &[]).map_err(|e| map_err(&e, lock))?;
        let sql = "CREATE TABLE IF NOT EXISTS tenant_schema (
                       schema_name TEXT PRIMARY KEY,
                       realm TEXT NOT NULL UNIQUE,
                       version BIGINT NOT NULL)";
        t.batch_execute(sql).map_err(|e| map_err(&e, sql))?;
        let sql = "SELECT coalesce(max(version), 0) FROM schema_version";
        let version: i64 = t.query_one(sql, &[]).map_err(|e| map_err(&e, sql))?.get(0);
        let sql = "SELECT realm, version FROM tenant_schema WHERE schema_name = $1";
        let existing = t
            .query_opt(sql, &[&name])
            .map_err(|e| map_err(&e, sql))?
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)));
        match existing {
            Some((other, _)) if other != realm => {
                return Err(Error::Internal(format!(
                    "realms {other:?} and {realm:?} hash to the same schema {name}"
                )))
            }
            Some((_, v)) if v == version => {}
            _ => {
                let sql = format!(
                    "REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC;
                     DROP SCHEMA IF EXISTS {name} CASCADE;
                     CREATE SCHEMA {name};
                     DO $$ BEGIN CREATE ROLE {name} NOLOGIN;
                        EXCEPTION WHEN duplicate_object THEN NULL; END $$;
                     GRANT USAGE ON SCHEMA {name} TO {name};"
                );
                t.batch_execute(&sql).map_err(|e| map_err(&e, &sql))?;
                // Only what this dialect's schema has (some tables are SQLite's own).
                let sql = format!(
                    "SELECT name FROM {} WHERE to_regclass('public.' || quote_ident(name)) IS NOT NULL \
                     ORDER BY name",
                    crate::scoped::TENANT_VIEW_TABLE
                );
                let views: Vec<String> = t
                    .query(&sql, &[])
                    .map_err(|e| map_err(&e, &sql))?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                // Realm names are [A-Za-z0-9_.-] (kernel::validate_realm);
                // quoting keeps the literal a literal whatever they are.
                let literal = format!("'{}'", realm.replace('\'', "''"));
                for v in views {
                    let sql = format!(
                        "CREATE VIEW {name}.\"{v}\" WITH (security_barrier) AS \
                         SELECT * FROM public.\"{v}\" WHERE realm = {literal}"
                    );
                    t.batch_execute(&sql).map_err(|e| map_err(&e, &sql))?;
                }
                let sql = format!("GRANT SELECT ON ALL TABLES IN SCHEMA {name} TO {name}");
                t.batch_execute(&sql).map_err(|e| map_err(&e, &sql))?;
                let sql =
                    "INSERT INTO tenant_schema (schema_name, realm, version) VALUES ($1, $2, $3)
                           ON CONFLICT (schema_name) DO UPDATE SET version = excluded.version";
                t.execute(sql, &[&name, &realm, &version])
                    .map_err(|e| map_err(&e, sql))?;
            }
        }
        t.commit().map_err(|e| map_err(&e, "COMMIT"))?;
        if self.scoped_ready.len() >= SCOPED_REALMS_CACHED {
            self.scoped_ready.clear();
        }
        self.scoped_ready.insert(name.clone());
        Ok(name)
    }

    /// Replaces a lost (or write-refusing) connection, waiting for the
    /// database until `deadline`; its prepared statements go with it.
    fn ensure_connected(&mut self, deadline: std::time::Instant) -> Result<()> {
        if !self.broken && self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(());
        }
        self.statements.clear();
        self.scoped_ready.clear();
        self.mark = None;
        if self.client.take().is_some() {
            self.stats.connections.fetch_sub(1, Ordering::Relaxed);
        }
        self.client = Some(reconnect_until(&self.url, self.durability, deadline)?);
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        self.broken = false;
        Ok(())
    }

    /// Its connection ([`Worker::ensure_connected`] made it).
    fn conn(&mut self) -> Result<&mut Client> {
        self.client
            .as_mut()
            .ok_or_else(|| Error::Unavailable("the pool's connection is not made".into()))
    }

    fn run_proc(&mut self, mut job: Job, deadline: std::time::Instant) {
        let turn_of =
            (job.p_key.0 < self.partitions).then(|| self.turns.get(job.p_key, &job.share.realm));
        let part = turn_of.as_deref();
        // Held until the procedure ends: taken at once while the partition is
        // contended, otherwise after this procedure's first conflict.
        let mut turn = part
            .filter(|t| t.retrying.load(Ordering::Acquire) > 0)
            .map(|t| t.lock.lock().unwrap_or_else(|p| p.into_inner()));
        let mut counted = None;
        let mut retries = 0u32;
        let mut pause_us = RETRY_PAUSE_MIN_US;
        // Its own handle: the timings outlive the borrows of `self` below.
        let stats = self.stats.clone();
        let timings = stats.partition(job.p_key);
        if let Some(t) = timings {
            t.queued.observe(job.queued_at.elapsed());
        }
        loop {
            let tried = std::time::Instant::now();
            let attempt = self.attempt(&mut job, deadline);
            if let Some(t) = timings {
                t.transaction.observe(tried.elapsed());
            }
            match attempt {
                Attempt::Done(outcome) => {
                    let counter = if outcome.is_ok() {
                        &self.stats.committed
                    } else {
                        &self.stats.failed
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    if outcome.is_ok() {
                        self.stats.commits.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = job.done.send(outcome);
                    return;
                }
                Attempt::Conflict(last) => {
                    if retries >= RETRIES_MAX {
                        self.stats.failed.fetch_add(1, Ordering::Relaxed);
                        let e = match last {
                            Error::Sql(s) => Error::RetriesExhausted { retries, last: s },
                            other => other,
                        };
                        job.finish_err(e);
                        return;
                    }
                    retries += 1;
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    if counted.is_none() {
                        counted = part.map(Retrying::new);
                    }
                    if turn.is_none() {
                        turn = part.map(|t| t.lock.lock().unwrap_or_else(|p| p.into_inner()));
                    }
                    std::thread::sleep(Duration::from_micros(jitter(pause_us)));
                    pause_us = (pause_us * 2).min(RETRY_PAUSE_MAX_US);
                }
                Attempt::Unavailable(e) => {
                    // Rolled back (or never begun): safe to run again once
                    // the database is back.
                    self.broken = true;
                    if let Err(gone) = self.ensure_connected(deadline) {
                        self.stats.failed.fetch_add(1, Ordering::Relaxed);
                        let why = format!("{gone}; first: {e}");
                        job.finish_err(Error::Unavailable(why));
                        return;
                    }
                }
            }
        }
    }

    /// After a lost COMMIT of the transaction stamped `seq`: whether it
    /// committed, asked of the database (reconnecting, until `deadline`).
    fn committed(&mut self, seq: i64, deadline: std::time::Instant) -> Result<bool> {
        self.ensure_connected(deadline)?;
        let writer = self.writer;
        let result = (|| {
            let mut t = begin_read_committed(self.conn()?)?;
            // The wait for an old backend still committing ends by the
            // request's own deadline.
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let set = format!("SET LOCAL lock_timeout = {}", left.as_millis().max(1));
            t.batch_execute(&set).map_err(|e| map_err(&e, &set))?;
            let row = t
                .query_one(COMMIT_CHECK, &[&writer, &crate::now_us()])
                .map_err(|e| map_err(&e, COMMIT_CHECK))?;
            t.commit().map_err(|e| map_err(&e, "COMMIT"))?;
            Ok(row.get::<_, i64>(0) == seq)
        })();
        if result.as_ref().is_err_and(Error::is_unavailable) {
            self.broken = true;
        }
        result
    }

    /// A read-only procedure: one `REPEATABLE READ READ ONLY` transaction
    /// (one snapshot for all its statements; a read-only transaction at
    /// that level never fails for serialization, so nothing is retried),
    /// rolled back at the end. Writes fail with SQLSTATE 25006, mapped to
    /// [`Error::ReadOnly`]; notifications are refused.
    fn read_proc(&mut self, job: &mut Job) -> Outcome {
        let Some(client) = self.client.as_mut() else {
            return Err(job.failure(Error::Unavailable(
                "the pool's connection is not made".into(),
            )));
        };
        let begin = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start();
        let mut t = match begin {
            Ok(t) => t,
            Err(e) => return Err(job.failure(map_err(&e, "BEGIN READ ONLY"))),
        };
        let mut tx = PgReadTx(PgTx::new(&mut t, &mut self.statements, job.p_key), false);
        let outcome = job.run_caught(&mut tx);
        let _ = t.rollback();
        outcome
    }

    /// One try of a procedure: run it, stamp its commit mark, send its
    /// notifications, commit; a COMMIT whose answer is lost is resolved
    /// (see the module doc) by `deadline`.
    fn attempt(&mut self, job: &mut Job, deadline: std::time::Instant) -> Attempt {
        let Some(client) = self.client.as_mut() else {
            return Attempt::Unavailable(Error::Unavailable(
                "the pool's connection is not made".into(),
            ));
        };
        let isolation = if job.read_committed {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::Serializable
        };
        let mut t = match client
            .build_transaction()
            .isolation_level(isolation)
            .start()
        {
            Ok(t) => t,
            Err(e) => return Attempt::failed(job, map_err(&e, "BEGIN")),
        };
        let mut tx = PgTx::new(&mut t, &mut self.statements, job.p_key);
        let outcome = job.run_caught(&mut tx);
        let notes = std::mem::take(&mut tx.notes);
        let hooks = std::mem::take(&mut tx.hooks);
        match outcome {
            Ok(v) => {
                self.mark_seq += 1;
                let seq = self.mark_seq;
                let marked = match mark_commit(&mut t, &mut self.mark, self.writer, seq) {
                    Ok(marked) => marked,
                    Err(e) => {
                        let _ = t.rollback();
                        return Attempt::failed(job, e);
                    }
                };
                for n in &notes {
                    let framed = format!("{}\n{}", n.channel, n.payload);
                    let sql = "SELECT pg_notify($1, $2)";
                    if let Err(e) = t.execute(sql, &[&pg_channel(&n.channel), &framed]) {
                        let _ = t.rollback();
                        return Attempt::failed(job, map_err(&e, sql));
                    }
                }
                match t.commit() {
                    Ok(()) => {
                        crate::run_hooks(hooks);
                        Attempt::Done(Ok(v))
                    }
                    Err(e) => match map_err(&e, "COMMIT") {
                        Error::Unavailable(m) => {
                            self.broken = true;
                            if !marked {
                                // It wrote nothing: running it again is
                                // safe whatever became of it.
                                return Attempt::Unavailable(Error::Unavailable(m));
                            }
                            match self.committed(seq, deadline) {
                                Ok(true) => {
                                    crate::run_hooks(hooks);
                                    Attempt::Done(Ok(v))
                                }
                                Ok(false) => Attempt::Unavailable(Error::Unavailable(m)),
                                // Still unknown: never run again here; the
                                // caller is told so.
                                Err(gone) => {
                                    Attempt::Done(Err(job.failure(Error::Unavailable(format!(
                                        "the connection was lost during COMMIT, which may or \
                                         may not have taken effect ({m}); the database could \
                                         not be asked which: {gone}"
                                    )))))
                                }
                            }
                        }
                        e => Attempt::failed(job, e),
                    },
                }
            }
            Err(f) if f.unavailable => {
                let _ = t.rollback();
                Attempt::Unavailable(Error::Unavailable(
                    "the connection was lost during the transaction".into(),
                ))
            }
            Err(f) => {
                let _ = t.rollback();
                if f.retryable {
                    // Rebuild the store error from the boxed E is not possible
                    // in general; the retry only needs to know it conflicted.
                    Attempt::Conflict(Error::sql(
                        "procedure",
                        SqlCode::Sqlstate("40001".into()),
                        "serialization failure",
                        None,
                    ))
                } else {
                    Attempt::Done(Err(f))
                }
            }
        }
    }
}

/// Stamps `writer`'s commit mark with `seq` in `t`, if `t` wrote anything:
/// whether it did (see the module doc).
fn mark_commit(
    t: &mut postgres::Transaction<'_>,
    prepared: &mut Option<Statement>,
    writer: i64,
    seq: i64,
) -> Result<bool> {
    let stmt = match prepared {
        Some(s) => s.clone(),
        None => {
            let s = t
                .prepare(COMMIT_MARK)
                .map_err(|e| map_err(&e, COMMIT_MARK))?;
            prepared.insert(s).clone()
        }
    };
    let n = t
        .execute(&stmt, &[&writer, &seq, &crate::now_us()])
        .map_err(|e| map_err(&e, COMMIT_MARK))?;
    Ok(n == 1)
}

enum Attempt {
    Done(Outcome),
    Conflict(Error),
    /// The database could not be reached before the commit: nothing took
    /// effect; run again on a new connection.
    Unavailable(Error),
}

impl Attempt {
    fn failed(job: &Job, e: Error) -> Attempt {
        if e.is_retryable() {
            Attempt::Conflict(e)
        } else if e.is_unavailable() || is_read_only_server(&e) {
            Attempt::Unavailable(e)
        } else {
            Attempt::Done(Err(job.failure(e)))
        }
    }
}

/// SQLSTATE 25006 in a writing transaction: connected to a server that
/// accepts no writes (a standby, or the old primary after a failover).
fn is_read_only_server(e: &Error) -> bool {
    matches!(e.as_sql().map(|s| &s.code), Some(SqlCode::Sqlstate(c)) if c == "25006")
}

/// A pause in `[base/2, 3·base/2)` microseconds, so that conflicting
/// retries spread out instead of colliding again.
fn jitter(base_us: u64) -> u64 {
    use std::cell::Cell;
    thread_local!(static SEED: Cell<u64> = Cell::new(
        crate::now_us() as u64 ^ (std::process::id() as u64) << 32 | 1));
    SEED.with(|s| {
        // xorshift64*: plenty for spreading back-off.
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        base_us / 2 + r % base_us.max(1)
    })
}

/// A connection's prepared statements with their column names: those
/// written in the code by their text's address (see [`crate::Tx`]), those
/// built at run time by their text.
#[derive(Default)]
struct PgStatements {
    by_address: HashMap<(usize, usize), PgPrepared>,
    by_text: HashMap<String, PgPrepared>,
}

#[derive(Clone)]
struct PgPrepared {
    stmt: Statement,
    columns: Arc<[String]>,
}

impl PgStatements {
    fn clear(&mut self) {
        self.by_address.clear();
        self.by_text.clear();
    }
}

struct PgTx<'a, 'c> {
    t: &'a mut postgres::Transaction<'c>,
    statements: &'a mut PgStatements,
    p_key: PKey,
    notes: Vec<Notification>,
    hooks: Vec<AfterCommit>,
}

impl<'a, 'c> PgTx<'a, 'c> {
    fn new(
        t: &'a mut postgres::Transaction<'c>,
        statements: &'a mut PgStatements,
        p_key: PKey,
    ) -> Self {
        PgTx {
            t,
            statements,
            p_key,
            notes: Vec::new(),
            hooks: Vec::new(),
        }
    }

    fn prepare(&mut self, sql: &str) -> Result<PgPrepared> {
        let stmt = self.t.prepare(sql).map_err(|e| map_err(&e, sql))?;
        let columns = stmt
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        Ok(PgPrepared { stmt, columns })
    }

    /// Statement `sql` of the code, prepared on this connection once.
    fn statement(&mut self, sql: &'static str) -> Result<PgPrepared> {
        let key = (sql.as_ptr() as usize, sql.len());
        if let Some(p) = self.statements.by_address.get(&key) {
            return Ok(p.clone());
        }
        let p = self.prepare(sql)?;
        let cache = &mut self.statements.by_address;
        if cache.len() >= STATEMENT_CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, p.clone());
        Ok(p)
    }

    /// Statement `sql` built at run time, prepared once per text.
    fn statement_text(&mut self, sql: &str) -> Result<PgPrepared> {
        if let Some(p) = self.statements.by_text.get(sql) {
            return Ok(p.clone());
        }
        let p = self.prepare(sql)?;
        let cache = &mut self.statements.by_text;
        if cache.len() >= STATEMENT_CACHE_MAX {
            cache.clear();
        }
        cache.insert(sql.to_string(), p.clone());
        Ok(p)
    }
}

fn as_params(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

impl Tx for PgTx<'_, '_> {
    fn p_key(&self) -> PKey {
        self.p_key
    }
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        let p = self.statement(sql)?;
        self.t
            .execute(&p.stmt, &as_params(params))
            .map_err(|e| map_err(&e, sql))
    }
    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Rows> {
        let p = self.statement(sql)?;
        self.rows(
            &p,
            sql,
            params,
            &ReadLimits::KERNEL,
            std::time::Instant::now(),
        )
    }
    fn execute_text(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let p = self.statement_text(sql)?;
        self.t
            .execute(&p.stmt, &as_params(params))
            .map_err(|e| map_err(&e, sql))
    }
    fn query_text(&mut self, sql: &str, params: &[Value]) -> Result<Rows> {
        self.query_limited(sql, params, &ReadLimits::KERNEL, std::time::Instant::now())
    }
    fn notify(&mut self, channel: &str, payload: &str) -> Result<()> {
        feed::queue(&mut self.notes, channel, payload)
    }
    fn after_commit(&mut self, hook: AfterCommit) -> Result<()> {
        crate::queue_hook(&mut self.hooks, hook)
    }
    fn clock_us(&mut self) -> Result<i64> {
        server_clock_us(self)
    }
}

/// The server's clock, in µs since the epoch (`clock_timestamp()`, which
/// moves within a transaction, unlike `now()`).
fn server_clock_us(tx: &mut PgTx<'_, '_>) -> Result<i64> {
    let rows = tx.query(
        "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
        &[],
    )?;
    let row = rows
        .iter()
        .next()
        .ok_or_else(|| Error::Internal("the server's clock gave no row".into()))?;
    row.get::<i64>(0)
}

/// A read-only procedure's transaction: [`PgTx`] without writes or
/// notifications; `refused` says one was refused ([`Tx::refused_write`]).
struct PgReadTx<'a, 'c>(PgTx<'a, 'c>, bool);

impl PgReadTx<'_, '_> {
    /// `r`, noting a refused write: ours, or the server's refusal in a
    /// READ ONLY transaction (SQLSTATE 25006).
    fn noted<T>(&mut self, r: Result<T>) -> Result<T> {
        let refused = match &r {
            Err(Error::ReadOnly(_)) => true,
            Err(Error::Sql(s)) => s.code == SqlCode::Sqlstate("25006".into()),
            _ => false,
        };
        self.1 |= refused;
        r
    }
}

impl Tx for PgReadTx<'_, '_> {
    fn p_key(&self) -> PKey {
        self.0.p_key
    }
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
    fn execute(&mut self, sql: &'static str, params: &[Value]) -> Result<u64> {
        self.execute_text(sql, params)
    }
    fn query(&mut self, sql: &'static str, params: &[Value]) -> Result<Rows> {
        let r = self.0.query(sql, params);
        self.noted(r)
    }
    fn execute_text(&mut self, sql: &str, _params: &[Value]) -> Result<u64> {
        self.noted(Err(Error::ReadOnly(format!(
            "a read-only procedure cannot run {sql}; submit it as a procedure instead"
        ))))
    }
    fn query_text(&mut self, sql: &str, params: &[Value]) -> Result<Rows> {
        let r = self.0.query_text(sql, params);
        self.noted(r)
    }
    fn notify(&mut self, channel: &str, _payload: &str) -> Result<()> {
        self.noted(Err(Error::ReadOnly(format!(
            "a read-only procedure cannot notify {channel}; submit it as a procedure instead"
        ))))
    }
    fn refused_write(&self) -> bool {
        self.1
    }
    fn clock_us(&mut self) -> Result<i64> {
        server_clock_us(&mut self.0)
    }
}

impl PgTx<'_, '_> {
    fn query_limited(
        &mut self,
        sql: &str,
        params: &[Value],
        limits: &ReadLimits,
        started: std::time::Instant,
    ) -> Result<Rows> {
        let p = self.statement_text(sql)?;
        self.rows(&p, sql, params, limits, started)
    }

    /// The rows of prepared statement `p` (of text `sql`) under `limits`.
    fn rows(
        &mut self,
        p: &PgPrepared,
        sql: &str,
        params: &[Value],
        limits: &ReadLimits,
        started: std::time::Instant,
    ) -> Result<Rows> {
        let cap = limits.cap;
        let mut budget = ByteBudget::default();
        let mut it = self
            .t
            .query_raw(&p.stmt, params.iter())
            .map_err(|e| map_err(&e, sql))?;
        let mut out = Rows {
            columns: p.columns.clone(),
            ..Rows::default()
        };
        while let Some(r) = it.next().map_err(|e| map_err(&e, sql))? {
            // Between rows: the cancel flag (the server enforces the time).
            if limits.stop(started) {
                return Err(limits.stopped(sql));
            }
            if out.rows.len() >= cap.rows() {
                cap.exceeded(sql, &mut out)?;
                break;
            }
            let mut values = Vec::with_capacity(out.columns.len());
            for (i, name) in out.columns.iter().enumerate() {
                let v: PgValue = r
                    .try_get(i)
                    .map_err(|e| Error::Type(format!("column {name}: {}", source_message(&e))))?;
                values.push(v.0);
            }
            if !budget.admit(limits, &values, sql, &mut out)? {
                break;
            }
            out.rows.push(Row::new(p.columns.clone(), values));
        }
        Ok(out)
    }
}

fn source_message(e: &postgres::Error) -> String {
    match e.source() {
        Some(s) => s.to_string(),
        None => e.to_string(),
    }
}

/// Whether `e` says the server cannot be reached: the connection is
/// closed or broke (an I/O error), or the server refuses it as it shuts
/// down, starts or recovers (SQLSTATE class 08, 57P01–57P03).
fn is_connection_loss(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        Some(db) => {
            let c = db.code().code();
            // 25P03: the server ended a session idle in its transaction
            // past IDLE_IN_TRANSACTION_TIMEOUT — the connection is gone.
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "25P03")
        }
        None => e.source().is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// Converts a driver error, keeping the statement, SQLSTATE and position;
/// a lost connection is [`Error::Unavailable`].
pub(crate) fn map_err(e: &postgres::Error, statement: &str) -> Error {
    if is_connection_loss(e) {
        let what: String = statement.chars().take(60).collect();
        return Error::Unavailable(format!("{} (during {what})", source_message(e)));
    }
    match e.as_db_error() {
        Some(db) => {
            let position = match db.position() {
                // PostgreSQL counts characters from 1; the store reports bytes from 0.
                Some(postgres::error::ErrorPosition::Original(p)) => statement
                    .char_indices()
                    .nth((*p as usize).saturating_sub(1))
                    .map(|(b, _)| b),
                _ => None,
            };
            let mut message = db.message().to_string();
            if let Some(detail) = db.detail() {
                message.push_str(": ");
                message.push_str(detail);
            }
            Error::sql(
                statement,
                SqlCode::Sqlstate(db.code().code().to_string()),
                message,
                position,
            )
        }
        None => Error::sql(statement, SqlCode::None, source_message(e), None),
    }
}

type BoxError = Box<dyn StdError + Sync + Send>;

fn cannot(v: &Value, ty: &Type) -> BoxError {
    format!(
        "cannot pass a {} value as PostgreSQL type {ty}",
        v.type_name()
    )
    .into()
}

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::OID => u32::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::FLOAT4 => (*i as f32).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::UNKNOWN => i.to_string().to_sql(ty, out),
                _ => Err(cannot(self, ty)),
            },
            Value::Real(r) => match *ty {
                Type::FLOAT8 => r.to_sql(ty, out),
                Type::FLOAT4 => (*r as f32).to_sql(ty, out),
                _ => Err(cannot(self, ty)),
            },
            Value::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    s.to_sql(ty, out)
                }
                Type::BYTEA => s.as_bytes().to_sql(ty, out),
                _ => Err(cannot(self, ty)),
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => b.to_sql(ty, out),
                _ => Err(cannot(self, ty)),
            },
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// Reads any supported PostgreSQL column into a [`Value`].
struct PgValue(Value);

impl<'a> FromSql<'a> for PgValue {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Self, BoxError> {
        let v = match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::OID => Value::Int(u32::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::NUMERIC => decode_numeric(raw)?,
            Type::BYTEA => Value::Blob(raw.to_vec()),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
                Value::Text(std::str::from_utf8(raw)?.to_string())
            }
            // jsonb's binary form: a version byte (1), then the text.
            Type::JSONB => match raw.split_first() {
                Some((1, text)) => Value::Text(std::str::from_utf8(text)?.to_string()),
                _ => return Err("a jsonb value of an unknown version".into()),
            },
            // Times as on SQLite (the dialect module): RFC 3339 text in UTC
            // to the µs; intervals as µs.
            Type::TIMESTAMPTZ | Type::TIMESTAMP => Value::Text(pg_time_text(fixed::<8>(raw)?)),
            Type::DATE => {
                let days = i32::from_be_bytes(fixed::<4>(raw)?);
                match days {
                    i32::MAX => Value::Text("infinity".into()),
                    i32::MIN => Value::Text("-infinity".into()),
                    d => {
                        let (y, m, d) = crate::civil_from_days(i64::from(d) + PG_EPOCH_DAYS);
                        Value::Text(format!("{y:04}-{m:02}-{d:02}"))
                    }
                }
            }
            Type::INTERVAL => {
                let raw = fixed::<16>(raw)?;
                let us = i64::from_be_bytes(raw[..8].try_into()?);
                let days = i64::from(i32::from_be_bytes(raw[8..12].try_into()?));
                let months = i64::from(i32::from_be_bytes(raw[12..].try_into()?));
                // A month is 30 days, as PostgreSQL's epoch of an interval.
                Value::Int(us + (days + months * 30) * 86_400_000_000)
            }
            Type::UUID => {
                let hex: String = fixed::<16>(raw)?
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                Value::Text(format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                ))
            }
            _ => {
                return Err(format!(
                    "PostgreSQL type {ty} is not one of the store's types; cast it (e.g. ::text)"
                )
                .into())
            }
        };
        Ok(PgValue(v))
    }

    fn from_sql_null(_ty: &Type) -> std::result::Result<Self, BoxError> {
        Ok(PgValue(Value::Null))
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }
}

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;

/// `raw` as exactly `N` bytes (a fixed-width binary value).
fn fixed<const N: usize>(raw: &[u8]) -> std::result::Result<[u8; N], BoxError> {
    raw.try_into()
        .map_err(|_| format!("a {N}-byte value was {} bytes", raw.len()).into())
}

/// A binary timestamp(tz) — µs since 2000-01-01 UTC — as RFC 3339 text.
fn pg_time_text(raw: [u8; 8]) -> String {
    match i64::from_be_bytes(raw) {
        i64::MAX => "infinity".into(),
        i64::MIN => "-infinity".into(),
        us => crate::rfc3339(us.saturating_add(PG_EPOCH_DAYS * 86_400_000_000), true),
    }
}

/// Decodes PostgreSQL's binary NUMERIC (base-10000 digits): to `Int` when it
/// has no fraction and fits, else to `Real`. `sum(bigint)` returns NUMERIC,
/// so this is needed for ordinary aggregates.
fn decode_numeric(raw: &[u8]) -> std::result::Result<Value, BoxError> {
    let word = |i: usize| -> std::result::Result<u16, BoxError> {
        raw.get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "truncated NUMERIC".into())
    };
    let ndigits = word(0)? as usize;
    let weight = word(2)? as i16 as i32;
    let sign = word(4)?;
    let dscale = word(6)?;
    if sign == 0xC000 {
        return Ok(Value::Real(f64::NAN));
    }
    let mut int: Option<i128> = Some(0);
    let mut real = 0f64;
    for i in 0..ndigits {
        let d = word(8 + 2 * i)? as i32;
        let exp = weight - i as i32;
        real += f64::from(d) * 10000f64.powi(exp);
        int = match (int, exp) {
            (Some(acc), e) if e >= 0 => 10000i128
                .checked_pow(e as u32)
                .and_then(|m| acc.checked_add(i128::from(d) * m)),
            (acc, _) if d == 0 => acc,
            _ => None,
        };
    }
    let negative = sign == 0x4000;
    if dscale == 0 {
        if let Some(i) = int.and_then(|i| i64::try_from(if negative { -i } else { i }).ok()) {
            return Ok(Value::Int(i));
        }
    }
    Ok(Value::Real(if negative { -real } else { real }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_decoding() {
        // 12345678 = digits [1234, 5678], weight 1, scale 0
        let raw = [0u8, 2, 0, 1, 0, 0, 0, 0, 0x04, 0xD2, 0x16, 0x2E];
        assert_eq!(decode_numeric(&raw).unwrap(), Value::Int(12_345_678));
        // -1.5 = digits [1, 5000], weight 0, negative, scale 1
        let raw = [0u8, 2, 0, 0, 0x40, 0, 0, 1, 0, 1, 0x13, 0x88];
        assert_eq!(decode_numeric(&raw).unwrap(), Value::Real(-1.5));
        // zero: no digits
        let raw = [0u8, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_numeric(&raw).unwrap(), Value::Int(0));
        assert!(decode_numeric(&[0u8, 1]).is_err());
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..1000 {
            let j = jitter(1000);
            assert!((500..1500).contains(&j));
        }
    }
}
