//! Stored procedures: tenant code, installed by name into a realm and called
//! inside one transaction on the realm's partition (issue 7; the paper's
//! "tenant code next to the data").
//!
//! Table `procedure(p_key, realm, name, language, code, code_hash,
//! memory_bytes, timeout_ms, installed_us)` (migration `009_procedure`),
//! on the realm's partition. [`Procedures::install`] checks the code with
//! the sandbox first (a compile error fails the install with the compiler's
//! message and writes nothing), then inserts or replaces the row.
//!
//! [`call_tx`] runs the procedure in the caller's transaction and lends it a
//! [`TxHost`]: every host call — the realm's key-value table, SQL over the
//! realm's own tables, messages, files — is a statement of that same
//! transaction, so a procedure's effects commit together or not at all: a
//! trap, an exception, a time-out or a non-zero status rolls all of them
//! back. A procedure reaches only its own realm: the host is bound to the
//! realm the procedure was installed in, and its SQL is confined to tables
//! named `<realm>/<table>` (see [`tabos_store::Confinement`]; the SQLite
//! backend enforces it — on PostgreSQL SQL from procedures is refused).
//!
//! Inside a transaction nothing waits: `recv` takes a message that is there
//! or reports none; files must be local (one-partition) files.
//!
//! Provenance: a procedure called by a proc (its credential's, or a graph
//! task acting for the proc that submitted its graph) acts for that proc,
//! so its file reads and writes, sends and receipts are the proc's
//! `proc_event` rows as its own calls would be — in the call's own
//! transaction; a read-path call's reads, which a read connection cannot
//! record, are committed in a writer transaction right after it, before
//! its answer is returned ([`Unrecorded`]).

use std::sync::Arc;
use std::time::Duration;

use tabos_sandbox::host::{FileEntry, Received, SqlResult, SqlValue};
use tabos_sandbox::procedure::{code_hash, validate_name, Language, Limits, ProcSpec};
use tabos_sandbox::{CallOutput, Host, HostError, RecvCall, Sandbox};
use tabos_store::{params, Confinement, Store, Tx, Value};

use crate::auth::{Actor, Role};
use crate::fs::{self, Caller, FileType};
use crate::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use crate::kv::{self, SCAN_LIMITS};
use crate::{p_key, partition, validate_realm, Error, Result};

/// What procedures' operations refuse to a scoped credential.
const USE: &str = "use procedures";
/// Most file reads one call by a proc on the read path may make: each is a
/// provenance event held until the call ends.
pub const EVENTS_PER_CALL_MAX: usize = 10_000;

/// What `list` reports about one procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub realm: String,
    pub name: String,
    pub language: Language,
    pub code_bytes: usize,
    /// The sandbox's content hash of the code, in hex.
    pub code_hash: String,
    pub memory_bytes: usize,
    pub timeout: Duration,
    pub installed_us: i64,
    /// Declared read-only: runs on a read connection (see [`Install`]).
    pub read_only: bool,
}

/// What an install asks for.
#[derive(Debug, Clone)]
pub struct Install {
    pub name: String,
    pub language: Language,
    pub code: Vec<u8>,
    pub limits: Limits,
    /// The procedure only reads: each call runs on a read connection of
    /// the realm's partition — one snapshot of every committed write, on
    /// the caller's thread (SQLite) or in a `REPEATABLE READ READ ONLY`
    /// transaction (PostgreSQL) — never queued behind the partition's
    /// writes; a write, notification or send in it fails the call.
    pub read_only: bool,
}

/// The stored-procedure service of a node: the store and the sandbox.
#[derive(Debug, Clone)]
pub struct Procedures {
    store: Store,
    sandbox: Sandbox,
    /// The path a call of a procedure called before tries first: the
    /// writer for one that tried to write, else a read connection. Only a
    /// hint — every call checks the procedure's row in its own
    /// transaction — so it is never stale in a way that matters. Bounded
    /// per realm ([`HINTS_PER_REALM_MAX`]), so that one realm calling many
    /// procedures clears only its own hints, never another's.
    path_hints: std::sync::Arc<std::sync::Mutex<Hints>>,
}

/// First paths by realm, then procedure name: looked up with borrowed
/// names, so a call allocates no key.
#[derive(Debug, Default)]
struct Hints {
    by_realm: std::collections::HashMap<String, std::collections::HashMap<String, CallPath>>,
}

impl Hints {
    fn get(&self, realm: &str, name: &str) -> Option<CallPath> {
        self.by_realm.get(realm)?.get(name).copied()
    }

    fn remember(&mut self, realm: &str, name: &str, path: CallPath) {
        if !self.by_realm.contains_key(realm) && self.by_realm.len() >= HINT_REALMS_MAX {
            self.by_realm.clear();
        }
        let own = self.by_realm.entry(realm.to_string()).or_default();
        if !own.contains_key(name) && own.len() >= HINTS_PER_REALM_MAX {
            own.clear();
        }
        own.insert(name.to_string(), path);
        debug_assert!(own.len() <= HINTS_PER_REALM_MAX);
    }
}

/// Attempts of one call to find its path: a read connection, the writer
/// (it tried to write), and one reinstall between attempts that changes
/// its declaration; more changes during one call are left to the caller
/// to retry.
const CALL_PATHS_MAX: usize = 3;

/// Most procedures of one realm whose first path a node remembers: a
/// realm past it forgets its own (and only its own) hints.
const HINTS_PER_REALM_MAX: usize = 1_024;
/// Most realms whose hints a node keeps. Realms are made by the cluster's
/// admin, not by tenants, so clearing every realm's hints past it is no
/// lever for one tenant against another.
const HINT_REALMS_MAX: usize = 4_096;

/// Which connection a call runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPath {
    /// The partition's writer, in a transaction of its own.
    Write,
    /// A read connection ([`Store::read`]): a read-only procedure's, and
    /// the first try of any other not known to write — one that tries to
    /// write there is run again on the writer ([`Called::Wrote`]).
    Read,
}

/// What [`call_tx`] did.
#[derive(Debug)]
pub enum Called {
    /// It ran; on a read connection, with the calling proc's provenance
    /// events it could not record there.
    Ran(CallOutput, Unrecorded),
    /// It did not run: it is declared read-only (`true`) and must not get
    /// a write transaction, where it could write.
    OtherPath { read_only: bool },
    /// Not declared read-only and tried on a read connection, it tried to
    /// write: that run is dropped (it changed nothing, and what it made of
    /// the refusal is not its answer); it is to run on the writer.
    Wrote,
}

/// Provenance events of a call on a read connection (its file reads, for
/// the proc it acts for, or its client where the realm records clients)
/// that the connection refused to record: whoever
/// returns the call's answer commits them first ([`Unrecorded::record`]).
/// Empty for a call on a writer's transaction, which records its own.
#[derive(Debug, Default)]
#[must_use = "a proc's provenance is to be recorded before the call's answer goes"]
pub struct Unrecorded(Vec<Noted>);

/// One provenance event a procedure's host call owes whom it acts for.
#[derive(Debug, Clone)]
struct Noted {
    actor: Actor,
    event: &'static str,
    detail: String,
}

impl Unrecorded {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Procedure body: records the events, in order.
    pub fn record(&self, tx: &mut dyn Tx, realm: &str, now_us: i64) -> Result<()> {
        for n in &self.0 {
            n.actor.note_tx(tx, realm, n.event, &n.detail, now_us)?;
        }
        Ok(())
    }
}

fn lang_of(s: &str) -> Result<Language> {
    s.parse().map_err(Error::Invalid)
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

impl Procedures {
    pub fn new(store: Store, sandbox: Sandbox) -> Procedures {
        Procedures {
            store,
            sandbox,
            path_hints: Default::default(),
        }
    }

    fn hints(&self) -> std::sync::MutexGuard<'_, Hints> {
        // Only inserts and lookups happen under this lock.
        self.path_hints.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The path the last call of `realm`'s `name` ran on.
    fn hint(&self, realm: &str, name: &str) -> Option<CallPath> {
        self.hints().get(realm, name)
    }

    fn remember(&self, realm: &str, name: &str, path: CallPath) {
        self.hints().remember(realm, name, path);
    }

    /// Runs tenant code `f` on `path`. Tenant code may run up to its
    /// timeout. On a multi-threaded runtime it runs on this thread (no
    /// hand-off to an executor) after telling the runtime, which moves
    /// this worker's other tasks to another thread meanwhile; elsewhere (a
    /// current-thread runtime, where that is impossible) a write goes to
    /// the partition's executor so as not to stall the runtime.
    ///
    /// Its time is charged to `realm` as tenant code: it runs apart from
    /// the partition's short procedures and takes turns with other realms'
    /// by run time (`tabos_store::fair`).
    async fn run_tenant<T: Send + 'static>(
        &self,
        realm: &str,
        p: tabos_store::PKey,
        path: CallPath,
        f: impl FnMut(&mut dyn Tx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let multi = crate::may_block_in_place();
        let store = self.store.for_tenant_code(realm);
        match (path, multi) {
            (CallPath::Read, true) => tokio::task::block_in_place(|| store.read(p, f).wait()),
            (CallPath::Read, false) => store.read(p, f).await,
            (CallPath::Write, true) => tokio::task::block_in_place(|| store.run(p, f).wait()),
            (CallPath::Write, false) => store.submit(p, f).await,
        }
    }

    /// Runs `f` in one write transaction on `realm`'s partition, lending
    /// it the sandbox: for a caller that records something together with a
    /// procedure's effects ([`call_tx`] inside `f`) — a workflow's
    /// procedure step (`workflows::step_procedure_tx`).
    pub async fn run_with<T: Send + 'static>(
        &self,
        realm: &str,
        mut f: impl FnMut(&mut dyn Tx, &Sandbox) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let p = partition(&self.store, realm)?;
        let sandbox = self.sandbox.clone();
        self.run_tenant(realm, p, CallPath::Write, move |tx| f(tx, &sandbox))
            .await
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Checks and installs (or replaces) a procedure in the caller's realm;
    /// returns what was stored. Needs role admin.
    pub async fn install(&self, who: &Caller, req: Install) -> Result<Info> {
        who.may(Role::Admin, USE)?;
        let realm = who.realm();
        validate_name(&req.name).map_err(Error::Invalid)?;
        // The check compiles (wasm) or evaluates (JS) on a blocking thread:
        // it can take milliseconds, and a hostile script up to its limit.
        let sandbox = self.sandbox.clone();
        let (lang, code, limits) = (req.language, req.code.clone(), req.limits);
        tokio::task::spawn_blocking(move || sandbox.check_procedure(lang, &code, &limits))
            .await
            .map_err(|e| Error::Invalid(format!("procedure check failed: {e}")))?
            .map_err(|error| Error::Procedure {
                name: req.name.clone(),
                error,
            })?;
        let info = Info {
            realm: realm.to_string(),
            name: req.name.clone(),
            language: req.language,
            code_bytes: req.code.len(),
            code_hash: hex(code_hash(&req.code)),
            memory_bytes: req.limits.memory_bytes,
            timeout: req.limits.timeout,
            installed_us: tabos_store::now_us(),
            read_only: req.read_only,
        };
        let (row, code) = (info.clone(), req.code);
        self.store
            .run(partition(&self.store, realm)?, move |tx| {
                install_tx(tx, &row, &code)
            })
            .await?;
        Ok(info)
    }

    /// Removes a procedure of the caller's realm; `NotFound` if there is
    /// none of that name. Needs role admin.
    pub async fn remove(&self, who: &Caller, name: &str) -> Result<()> {
        who.may(Role::Admin, USE)?;
        let realm = who.realm();
        validate_name(name).map_err(Error::Invalid)?;
        let (r, n) = (realm.to_string(), name.to_string());
        self.store
            .run(partition(&self.store, realm)?, move |tx| {
                let k = p_key(tx);
                let gone = tx.execute(
                    "DELETE FROM procedure WHERE p_key = $1 AND realm = $2 AND name = $3",
                    params![k, r.as_str(), n.as_str()],
                )?;
                if gone == 0 {
                    return Err(Error::NotFound(format!("procedure {n} in realm {r}")));
                }
                Ok(())
            })
            .await
    }

    /// The caller's realm's procedures, by name. Needs role reader.
    pub async fn list(&self, who: &Caller) -> Result<Vec<Info>> {
        who.may(Role::Reader, USE)?;
        let realm = who.realm();
        let r = realm.to_string();
        self.store
            .run(partition(&self.store, realm)?, move |tx| list_tx(tx, &r))
            .await
    }

    /// Calls procedure `name` of the caller's realm with `args` in one
    /// transaction, its file calls acting for the caller's user (a
    /// procedure never has more rights than its caller). Needs role
    /// member.
    pub async fn call(&self, who: &Caller, name: &str, args: Vec<u8>) -> Result<CallOutput> {
        who.may(Role::Member, USE)?;
        let realm = who.realm();
        validate_name(name).map_err(Error::Invalid)?;
        // Shared, not copied, by each attempt's closure.
        let n: Arc<str> = name.into();
        let args: Arc<[u8]> = args.into();
        let now = tabos_store::now_us();
        let p = partition(&self.store, realm)?;
        let call = |path: CallPath| {
            let (n, args) = (n.clone(), args.clone());
            let (sandbox, who) = (self.sandbox.clone(), who.clone());
            move |tx: &mut dyn Tx| call_tx(tx, &sandbox, &who, &n, &args, now, path)
        };
        // The path the last call ran on; a procedure not known to write
        // is tried on a read connection first (a page, a lookup: no
        // write transaction, not queued behind the realm's writes), and
        // runs on the writer once it tries to write.
        let first = self.hint(realm, name).unwrap_or(CallPath::Read);
        let mut path = first;
        for _ in 0..CALL_PATHS_MAX {
            match self.run_tenant(realm, p, path, call(path)).await? {
                Called::Ran(out, unrecorded) => {
                    if path != first {
                        self.remember(realm, name, path);
                    }
                    if !unrecorded.is_empty() {
                        // The proc's reads, before it learns what it read.
                        let r = realm.to_string();
                        crate::call(&self.store, realm, move |tx| unrecorded.record(tx, &r, now))
                            .await?;
                    }
                    return Ok(out);
                }
                Called::OtherPath { read_only } => {
                    path = if read_only {
                        CallPath::Read
                    } else {
                        CallPath::Write
                    };
                }
                Called::Wrote => path = CallPath::Write,
            }
        }
        // Redeclared between every attempt: the caller may call again.
        Err(Error::Precondition(format!(
            "procedure {name} in realm {realm} was reinstalled during the call; call it again"
        )))
    }
}

/// Procedure body: inserts or replaces the procedure row.
pub fn install_tx(tx: &mut dyn Tx, info: &Info, code: &[u8]) -> Result<()> {
    let k = p_key(tx);
    crate::realms::metered(tx, &info.realm, |tx| {
        install_unmetered_tx(tx, k, info, code)
    })
}

fn install_unmetered_tx(tx: &mut dyn Tx, k: i64, info: &Info, code: &[u8]) -> Result<()> {
    tx.execute(
        "INSERT INTO procedure (p_key, realm, name, language, code, code_hash, memory_bytes, \
         timeout_ms, installed_us, read_only) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (p_key, realm, name) DO UPDATE SET language = excluded.language, \
         code = excluded.code, code_hash = excluded.code_hash, \
         memory_bytes = excluded.memory_bytes, timeout_ms = excluded.timeout_ms, \
         installed_us = excluded.installed_us, read_only = excluded.read_only",
        params![
            k,
            info.realm.as_str(),
            info.name.as_str(),
            info.language.as_str(),
            code,
            info.code_hash.as_str(),
            info.memory_bytes as i64,
            info.timeout.as_millis() as i64,
            info.installed_us,
            i64::from(info.read_only)
        ],
    )?;
    Ok(())
}

/// Procedure body: the realm's procedures, by name.
pub fn list_tx(tx: &mut dyn Tx, realm: &str) -> Result<Vec<Info>> {
    validate_realm(realm)?;
    let k = p_key(tx);
    let rows = tx.query(
        "SELECT name, language, length(code), code_hash, memory_bytes, timeout_ms, installed_us, \
         read_only FROM procedure WHERE p_key = $1 AND realm = $2 ORDER BY name",
        params![k, realm],
    )?;
    rows.rows
        .iter()
        .map(|r| {
            Ok(Info {
                realm: realm.to_string(),
                name: r.get(0)?,
                language: lang_of(&r.get::<String>(1)?)?,
                code_bytes: r.get::<i64>(2)? as usize,
                code_hash: r.get(3)?,
                memory_bytes: r.get::<i64>(4)? as usize,
                timeout: Duration::from_millis(r.get::<i64>(5)? as u64),
                installed_us: r.get(6)?,
                read_only: r.get::<i64>(7)? != 0,
            })
        })
        .collect()
}

/// Procedure body: runs procedure `name` of the caller's realm in this
/// transaction (role member). A failing procedure returns
/// [`Error::Procedure`]; the caller's transaction must then roll back (the
/// store does, for an `Err`).
pub fn call_tx(
    tx: &mut dyn Tx,
    sandbox: &Sandbox,
    who: &Caller,
    name: &str,
    args: &[u8],
    now_us: i64,
    path: CallPath,
) -> Result<Called> {
    who.may(Role::Member, USE)?;
    let realm = who.realm();
    let k = p_key(tx);
    let row = tx
        .query_opt(
            "SELECT language, code_hash, memory_bytes, timeout_ms, read_only FROM procedure \
             WHERE p_key = $1 AND realm = $2 AND name = $3",
            params![k, realm, name],
        )?
        .ok_or_else(|| Error::NotFound(format!("procedure {name} in realm {realm}")))?;
    let read_only = row.get::<i64>(4)? != 0;
    // A read-only procedure never gets a write transaction, where it could
    // write; any other may be tried on a read connection (below).
    if read_only && path == CallPath::Write {
        return Ok(Called::OtherPath { read_only });
    }
    let language = lang_of(&row.get::<String>(0)?)?;
    let hash_hex: String = row.get(1)?;
    let hash = u64::from_str_radix(&hash_hex, 16)
        .map_err(|_| Error::Invalid(format!("procedure {name}: bad code hash {hash_hex:?}")))?;
    let limits = Limits {
        memory_bytes: row.get::<i64>(2)? as usize,
        timeout: Duration::from_millis(row.get::<i64>(3)? as u64),
    };
    let spec = ProcSpec {
        tenant: realm,
        name,
        language,
        code_hash: hash,
        limits,
    };
    let run = |tx: &mut dyn Tx| {
        let mut host = TxHost {
            tx: &mut *tx,
            realm,
            who,
            name,
            now_us,
            deadline: std::time::Instant::now() + limits.timeout,
            failed: None,
            wrote_tables: false,
            reads: Vec::new(),
            recorded_for: None,
            path,
        };
        let ran = sandbox.call_procedure(&spec, &mut host, &mut TxHost::code, args);
        // A store error inside a host call (a failed statement, a conflict to
        // retry) decides the outcome even if the guest swallowed its errno.
        if let Some(e) = host.failed.take() {
            return Err(e);
        }
        // Stopped for holding the write lock too long, not at its own
        // deadline: say which.
        let ran = match (ran, host.write_deadline()) {
            (Err(mut e), Some(w))
                if e.kind == tabos_sandbox::procedure::FailureKind::Timeout
                    && w < host.deadline =>
            {
                e.message = format!(
                    "the procedure held its partition's write lock past {} ms (the most \
                     tenant code may: others wait for it); write last, and compute before \
                     the first write or in a read-only procedure",
                    tabos_store::WRITE_HOLD_MAX.as_millis()
                );
                Err(e)
            }
            (ran, _) => ran,
        };
        let out = ran.map_err(|error| Error::Procedure {
            name: name.to_string(),
            error,
        })?;
        let reads = std::mem::take(&mut host.reads);
        if host.wrote_tables {
            crate::realms::measure_tenant_tables_tx(tx, realm)?;
        }
        Ok((out, Unrecorded(reads)))
    };
    let out = match path {
        // Nothing to meter: a read connection refuses every write. One
        // refused to a procedure not declared read-only sends the call to
        // the writer, whatever the guest made of the refusal.
        CallPath::Read => {
            let ran = run(tx);
            if !read_only && tx.refused_write() {
                return Ok(Called::Wrote);
            }
            let (out, reads) = ran?;
            // A writer's transaction run as a read path (a workflow's or a
            // graph's read-only procedure) records them here; a read
            // connection refuses, and they go back to the caller.
            match reads.record(tx, realm, now_us) {
                Ok(()) => (out, Unrecorded::default()),
                Err(Error::Store(tabos_store::Error::ReadOnly(_))) => (out, reads),
                Err(e) => return Err(e),
            }
        }
        // The whole call is metered: a guest that swallowed a quota error
        // of one host call still does not commit past the quota.
        CallPath::Write => {
            let (out, reads) = crate::realms::metered(tx, realm, run)?;
            reads.record(tx, realm, now_us)?;
            (out, Unrecorded::default())
        }
    };
    Ok(Called::Ran(out.0, out.1))
}

/// The host a procedure gets: its realm's state, through the transaction
/// it runs in.
pub struct TxHost<'a> {
    tx: &'a mut dyn Tx,
    realm: &'a str,
    /// The caller's user: whose files the procedure reads and writes.
    who: &'a Caller,
    name: &'a str,
    now_us: i64,
    /// The procedure's deadline: its SQL stops there too.
    deadline: std::time::Instant,
    /// The first store error a host call met: the transaction is not to be
    /// committed (and may be retried).
    failed: Option<Error>,
    /// Whether tenant SQL may have changed the realm's tables (their size
    /// is measured again for the storage quota after the call).
    wrote_tables: bool,
    /// On the read path, the file reads done for whom the call is
    /// recorded for ([`TxHost::recorded_for`]), to be
    /// recorded after the run (a read connection cannot; see
    /// [`Unrecorded`]). On the writer each is recorded as it is done, so
    /// its seq orders it among the call's writes and sends (the README's
    /// lineage query compares them).
    reads: Vec<Noted>,
    /// Whom the call's file calls are recorded for — its proc, or its
    /// client where the realm records clients — once asked (`None`
    /// inside: recorded for no one).
    recorded_for: Option<Option<Actor>>,
    path: CallPath,
}

// The largest scan a procedure may ask for is one the kernel offers.
const _: () = assert!(SCAN_LIMITS[3] == tabos_sandbox::procedure::SCAN_ROWS_MAX);

impl TxHost<'_> {
    /// Whom the call's file reads and writes are recorded for (asked of
    /// the realm once a call, for a client; a proc's always are).
    fn recorded_for(&mut self) -> Result<Option<Actor>> {
        if let Some(known) = &self.recorded_for {
            return Ok(known.clone());
        }
        let actor = self.who.own_actor();
        let recorded = actor.recorded_tx(self.tx, self.realm)?.then_some(actor);
        self.recorded_for = Some(recorded.clone());
        Ok(recorded)
    }

    /// The procedure's code (read on a context miss).
    fn code(&mut self) -> std::result::Result<Vec<u8>, String> {
        let k = p_key(self.tx);
        let row = self
            .tx
            .query_opt(
                "SELECT code FROM procedure WHERE p_key = $1 AND realm = $2 AND name = $3",
                params![k, self.realm, self.name],
            )
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("procedure {} vanished", self.name))?;
        row.get::<Vec<u8>>(0).map_err(|e| e.to_string())
    }

    /// A kernel error as the guest sees it; a store error is also kept to
    /// fail the call.
    fn refuse(&mut self, e: Error) -> HostError {
        match e {
            Error::Store(se) => {
                let m = se.to_string();
                // Bad tenant SQL is the tenant's error; anything else
                // (I/O, a conflict) fails the whole call.
                let tenant = matches!(
                    se,
                    tabos_store::Error::Sql(_)
                        | tabos_store::Error::ReadOnly(_)
                        | tabos_store::Error::Invalid(_)
                        | tabos_store::Error::Limit { .. }
                        | tabos_store::Error::Type(_)
                ) && !se.is_retryable();
                if !tenant && self.failed.is_none() {
                    self.failed = Some(Error::Store(se));
                }
                HostError::Invalid(m)
            }
            other => other.into_host(),
        }
    }

    fn result<T>(&mut self, r: Result<T>) -> std::result::Result<T, HostError> {
        r.map_err(|e| self.refuse(e))
    }

    /// Like [`result`](Self::result) for IPC, where a refused precondition
    /// means the receiving proc has finished (EPIPE, as procs see it).
    fn ipc_result<T>(&mut self, r: Result<T>) -> std::result::Result<T, HostError> {
        r.map_err(|e| match e {
            e @ Error::Precondition(_) => e.into_host_ipc(),
            other => self.refuse(other),
        })
    }
}

fn sql_value(v: &SqlValue) -> Value {
    match v {
        SqlValue::Null => Value::Null,
        SqlValue::Int(i) => Value::Int(*i),
        SqlValue::Real(r) => Value::Real(*r),
        SqlValue::Text(t) => Value::Text(t.clone()),
        SqlValue::Blob(b) => Value::Blob(b.clone()),
    }
}

fn host_value(v: &Value) -> SqlValue {
    match v {
        Value::Null => SqlValue::Null,
        Value::Int(i) => SqlValue::Int(*i),
        Value::Real(r) => SqlValue::Real(*r),
        Value::Text(t) => SqlValue::Text(t.clone()),
        Value::Blob(b) => SqlValue::Blob(b.clone()),
    }
}

impl TxHost<'_> {
    /// When the procedure must stop holding its partition's write lock
    /// (`tabos_store::WRITE_HOLD_MAX` after its first write), if it holds
    /// it.
    fn write_deadline(&self) -> Option<std::time::Instant> {
        self.tx
            .writing_since()
            .map(|t| t + tabos_store::WRITE_HOLD_MAX)
    }
}

impl Host for TxHost<'_> {
    fn deadline(&self) -> Option<std::time::Instant> {
        self.write_deadline()
    }
    fn send(
        &mut self,
        to: &[&str],
        payload: &[u8],
        id: Option<&str>,
    ) -> std::result::Result<(), HostError> {
        let msgs = self.result(Outgoing::to_each(to, payload, id))?;
        let actor = self.who.own_actor();
        let sent = ipc::send_for_tx(
            self.tx,
            self.realm,
            Some(&actor),
            &msgs,
            &MailboxOptions::default(),
            self.now_us,
        );
        self.ipc_result(sent).map(|_| ())
    }

    fn recv(&mut self, call: RecvCall<'_>) -> std::result::Result<Received, HostError> {
        let Some(from) = call.from else {
            return Err(HostError::Invalid(
                "a procedure has no mailbox of its own: name one".into(),
            ));
        };
        let address = self.result(Address::parse(from))?;
        let take = Take {
            max: 1,
            bytes_max: call.bytes_max.min(ipc::RECV_BYTES_MAX),
        };
        let got = if call.peek {
            ipc::peek_tx(self.tx, self.realm, &address, &take)
        } else {
            let actor = self.who.own_actor();
            ipc::recv_for_tx(
                self.tx,
                self.realm,
                &address,
                &take,
                Some(&actor),
                self.now_us,
            )
        };
        let got = self.ipc_result(got)?;
        if let Some(n) = got.next_bytes {
            return Err(HostError::TooBig(n));
        }
        match got.messages.into_iter().next() {
            Some(m) => Ok(Received {
                sender: m.sender,
                payload: m.payload,
            }),
            // Nothing waits inside a transaction.
            None if call.peek => Err(HostError::Empty),
            None => Err(HostError::TimedOut),
        }
    }

    fn fs_read(
        &mut self,
        path: &str,
        offset: i64,
        len: usize,
    ) -> std::result::Result<Vec<u8>, HostError> {
        let r = fs::read_tx(self.tx, self.who, path, offset, len);
        let data = self.result(r)?;
        if data.is_empty() {
            return Ok(data);
        }
        let recorded_for = self.recorded_for();
        if let Some(actor) = self.result(recorded_for)? {
            let detail = fs::event_detail(path, offset, data.len());
            if self.path == CallPath::Write {
                let noted = actor.note_tx(self.tx, self.realm, "fs_read", &detail, self.now_us);
                self.result(noted)?;
                return Ok(data);
            }
            if self.reads.len() >= EVENTS_PER_CALL_MAX {
                return Err(HostError::Invalid(format!(
                    "a procedure whose reads are recorded (called by a proc, or where \
                     clients are recorded) reads at most {EVENTS_PER_CALL_MAX} times"
                )));
            }
            self.reads.push(Noted {
                actor,
                event: "fs_read",
                detail,
            });
        }
        Ok(data)
    }

    fn fs_write(
        &mut self,
        path: &str,
        offset: i64,
        data: &[u8],
        create: bool,
    ) -> std::result::Result<i64, HostError> {
        let who = self.who.clone();
        if create {
            let exists = fs::stat_tx(self.tx, self.who, path);
            if let Err(Error::NotFound(_)) = exists {
                let made = fs::create_tx(self.tx, &who, path, fs::MODE_FILE_DEFAULT, self.now_us);
                self.result(made)?;
            } else {
                self.result(exists)?;
            }
        }
        let r = fs::write_tx(self.tx, &who, path, offset, data, self.now_us);
        let size = self.result(r)?;
        if data.is_empty() {
            return Ok(size);
        }
        let recorded_for = self.recorded_for();
        if let Some(actor) = self.result(recorded_for)? {
            let detail = fs::event_detail(path, offset, data.len());
            let noted = actor.note_tx(self.tx, self.realm, "fs_write", &detail, self.now_us);
            self.result(noted)?;
        }
        Ok(size)
    }

    fn fs_stat(&mut self, path: &str) -> std::result::Result<FileEntry, HostError> {
        let st = fs::stat_tx(self.tx, self.who, path);
        let st = self.result(st)?;
        Ok(FileEntry {
            kind: u32::from(st.file_type == FileType::File),
            mode: st.mode as u32,
            size: st.size,
        })
    }

    fn kv_get(&mut self, key: &str) -> std::result::Result<Option<Vec<u8>>, HostError> {
        let r = kv::get_tx(self.tx, self.realm, key);
        self.result(r)
    }

    fn kv_put(&mut self, key: &str, value: &[u8]) -> std::result::Result<(), HostError> {
        let r = kv::put_tx(self.tx, self.realm, key, value, self.now_us);
        self.result(r).map(|_| ())
    }

    fn kv_delete(&mut self, key: &str) -> std::result::Result<bool, HostError> {
        let r = kv::delete_tx(self.tx, self.realm, key);
        self.result(r)
    }

    fn kv_scan(
        &mut self,
        start: &str,
        end: Option<&str>,
        after: bool,
        max: usize,
    ) -> std::result::Result<Vec<(String, Vec<u8>)>, HostError> {
        let max = max.clamp(1, SCAN_LIMITS[3]);
        let limit = SCAN_LIMITS
            .iter()
            .copied()
            .find(|&l| l >= max)
            .unwrap_or(SCAN_LIMITS[3]);
        let r = kv::scan_tx(self.tx, self.realm, start, end, after, limit);
        let mut rows = self.result(r)?;
        rows.truncate(max);
        Ok(rows)
    }

    fn sql(
        &mut self,
        sql: &str,
        params: &[SqlValue],
        write: bool,
    ) -> std::result::Result<SqlResult, HostError> {
        if sql.len() > tabos_sandbox::procedure::SQL_BYTES_MAX {
            return Err(HostError::Invalid(format!(
                "statement of {} bytes exceeds {}",
                sql.len(),
                tabos_sandbox::procedure::SQL_BYTES_MAX
            )));
        }
        self.wrote_tables |= write;
        let scope = Confinement {
            table_prefix: crate::realms::tenant_prefix(self.realm),
            write,
            deadline: Some(
                self.write_deadline()
                    .map_or(self.deadline, |w| w.min(self.deadline)),
            ),
        };
        let params: Vec<Value> = params.iter().map(sql_value).collect();
        let r = self
            .tx
            .confined(sql, &params, &scope, tabos_sandbox::procedure::SQL_ROWS_MAX)
            .map_err(Error::from);
        let (rows, changed) = self.result(r)?;
        Ok(SqlResult {
            columns: rows.columns.to_vec(),
            rows: rows
                .rows
                .iter()
                .map(|r| r.values().iter().map(host_value).collect())
                .collect(),
            changed,
        })
    }

    fn nop(&mut self) -> u64 {
        0
    }
}

/// Procedure body: deletes `realm`'s procedures and drops its tenant tables
/// (the realm's removal, [`crate::teardown`]); returns the rows and tables
/// deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    let rows = crate::delete_realm_rows(tx, realm, &["procedure"])?;
    Ok(rows + tx.drop_tables(&crate::realms::tenant_prefix(realm))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A realm calling more procedures than its bound forgets its own
    /// hints and leaves every other realm's alone.
    #[test]
    fn a_realm_past_its_hint_bound_clears_only_its_own() {
        let mut hints = Hints::default();
        hints.remember("quiet", "page", CallPath::Write);
        for i in 0..HINTS_PER_REALM_MAX {
            hints.remember("busy", &format!("p{i}"), CallPath::Read);
        }
        assert_eq!(hints.get("busy", "p0"), Some(CallPath::Read));
        // One more name than the bound: the busy realm starts over.
        hints.remember("busy", "one-more", CallPath::Write);
        assert_eq!(hints.get("busy", "p0"), None);
        assert_eq!(hints.get("busy", "one-more"), Some(CallPath::Write));
        assert_eq!(hints.by_realm["busy"].len(), 1);
        // Known names are updated in place, never clearing.
        hints.remember("busy", "one-more", CallPath::Read);
        assert_eq!(hints.by_realm["busy"].len(), 1);
        assert_eq!(hints.get("quiet", "page"), Some(CallPath::Write));
    }
}
