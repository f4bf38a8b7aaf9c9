//! Procs: the σOS process model as rows (thesis §3.3, Figure 3-3).
//!
//! Table `proc` (schema/*/002_procs.sql) holds one row per proc, on its
//! realm's partition; `proc_event` keeps one provenance row per lifecycle
//! event. The lifecycle:
//!
//! ```text
//!            spawn                claim (procd)      started
//!   ───────► spawned ──────────► claimed ──────────► running
//!            │  (worker_id NULL = deferred,           │
//!            │   assigned when capacity frees)        │ exited(status)
//!            │                                        ▼
//!            ├── evict (while deferred) ──► evicted   exited | evicted | failed
//!            └── exited / failed from any live state ─┘
//! ```
//!
//! Invariants: a proc leaves a live state (spawned, claimed, running) exactly
//! once, and the transaction that makes it leave gives its cores back to its
//! worker and assigns deferred procs; so a proc never runs twice and capacity
//! is conserved. Every transition notifies `proc/<realm>/<pid>` with the new
//! state, which is what [`wait_start`], [`wait_exit`] and [`wait_evict`] wait
//! on; an assignment notifies `worker/<realm>/<worker>` so its procd claims.

use std::fmt;
use std::str::FromStr;

use tabos_store::{params, Dialect, Row, Store, Tx};

pub use crate::auth::Actor;
use crate::auth::{Caller, Role};
use crate::ids::{Pid, WorkerId};
use crate::sched::{self, Need, WorkerSpec};
use crate::{partition, validate_realm, Error, Result};

/// Most procs in one SpawnBurst.
pub const BURST_PROCS_MAX: usize = 10_000;
/// Longest program path, argument list or environment, in bytes (JSON).
pub const DESCRIPTOR_BYTES_MAX: usize = 64 * 1024;
/// Most cores or MB a proc may ask for.
pub const CORES_MAX: i64 = 1_024;
pub const MEM_MB_MAX: i64 = 1 << 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Native,
    Wasm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Latency-critical: reserves its cores.
    Lc,
    /// Best-effort.
    Be,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Spawned,
    Claimed,
    Running,
    Exited,
    Evicted,
    Failed,
}

macro_rules! text_enum {
    ($t:ty, $what:expr, $($v:path => $s:expr),*) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $($v => $s),* }
            }
        }
        impl FromStr for $t {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                match s {
                    $($s => Ok($v),)*
                    other => Err(Error::Invalid(format!(concat!($what, " {:?} is not one of: ", $($s, " "),*), other))),
                }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum!(Kind, "kind", Kind::Native => "native", Kind::Wasm => "wasm");
text_enum!(Class, "class", Class::Lc => "LC", Class::Be => "BE");
text_enum!(State, "state",
    State::Spawned => "spawned", State::Claimed => "claimed", State::Running => "running",
    State::Exited => "exited", State::Evicted => "evicted", State::Failed => "failed");

impl State {
    /// Exited, evicted or failed: the proc will not run (again).
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Exited | State::Evicted | State::Failed)
    }
}

/// What to run: σOS's proc descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptor {
    /// Caller-chosen pid; `None` to have one generated.
    pub pid: Option<Pid>,
    pub parent: Option<Pid>,
    pub kind: Kind,
    pub class: Class,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cores: i64,
    pub mem_mb: i64,
    /// Node to prefer (locality scheduler).
    pub home_node: Option<String>,
    /// Re-queue instead of failing when its node is lost.
    pub restartable: bool,
    /// How many times a restartable proc is queued again before it fails
    /// instead (at most [`RESTARTS_MAX`]; [`RESTARTS_DEFAULT`] unless set).
    pub max_restarts: i64,
    /// The user the proc acts for (its files' owner): its spawner's, taken
    /// from the spawner's credential, never from the request.
    pub user: String,
    /// Host paths a native proc sees, read-only, besides its working
    /// directory and the system's (e.g. MapReduce inputs); each must be
    /// within one its realm allows ([`crate::realms::host_paths_tx`]).
    pub host_paths: Vec<String>,
    /// `Some`: the proc's credential may do only this (a native proc's;
    /// [`crate::auth::Scope`]).
    pub scope: Option<crate::auth::Scope>,
    /// `Some`: code uploaded to the realm's files ([`CodeHash::dir`]) that
    /// the proc runs in, read-only, as its working directory; a relative
    /// program with a `/` (`./run.sh`) is a file of it.
    pub code: Option<CodeHash>,
}

/// Where uploaded code lives in a realm's files: `/code/<hash>/…`.
pub const CODE_DIR: &str = "/code";
/// A program named by a path in the realm's files: `fs:/bin/tool`.
pub const FS_PROGRAM_PREFIX: &str = "fs:";

/// The content hash of a tree of uploaded code: 64 lowercase hex digits,
/// the SHA-256 of its manifest (`tabos_client::code`), which names every
/// file with its own SHA-256 and whether it is executable — so the name
/// says exactly what the files hold, and whoever materialises them checks
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeHash(String);

impl CodeHash {
    pub fn parse(s: &str) -> Result<CodeHash> {
        if s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(CodeHash(s.to_string()))
        } else {
            Err(Error::Invalid(format!(
                "code {s:?} is not a content hash (64 lowercase hex digits)"
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its directory in the realm's files.
    pub fn dir(&self) -> String {
        format!("{CODE_DIR}/{}", self.0)
    }
}

impl std::fmt::Display for CodeHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The path in the realm's files of a program named `fs:/path`, if it is
/// one.
pub fn fs_program(program: &str) -> Option<&str> {
    program.strip_prefix(FS_PROGRAM_PREFIX)
}

pub use crate::realms::{
    host_path_within, validate_host_path, HOST_PATHS_MAX, HOST_PATH_BYTES_MAX,
};

/// Times a restartable proc is queued again unless its spawner says.
pub const RESTARTS_DEFAULT: i64 = 10;
/// Most restarts a proc may be given.
pub const RESTARTS_MAX: i64 = 1_000;

impl Descriptor {
    /// A one-core latency-critical native proc running `program`.
    pub fn native(program: impl Into<String>) -> Descriptor {
        Descriptor {
            pid: None,
            parent: None,
            kind: Kind::Native,
            class: Class::Lc,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cores: 1,
            mem_mb: 0,
            home_node: None,
            restartable: false,
            max_restarts: RESTARTS_DEFAULT,
            user: "root".into(),
            host_paths: Vec::new(),
            scope: None,
            code: None,
        }
    }

    /// Checks everything that can be checked without the database.
    pub fn validate(&self) -> Result<()> {
        if !(0..=RESTARTS_MAX).contains(&self.max_restarts) {
            return Err(Error::Invalid(format!(
                "a restart limit is 0..={RESTARTS_MAX}, not {}",
                self.max_restarts
            )));
        }
        if let Some(p) = &self.pid {
            crate::ids::validate_name("pid", p.as_str())?;
        }
        if let Some(p) = &self.parent {
            crate::ids::validate_name("parent pid", p.as_str())?;
        }
        if let Some(h) = &self.home_node {
            crate::ids::validate_name("home node", h)?;
        }
        crate::auth::validate_user(&self.user)?;
        if self.program.is_empty() || self.program.contains('\0') {
            return Err(Error::Invalid(
                "program must be non-empty and have no NUL".into(),
            ));
        }
        if self.code.is_some()
            && !self.program.starts_with('/')
            && self.program.split('/').any(|c| c == "..")
        {
            return Err(Error::Invalid(format!(
                "program {}: a file of uploaded code is named within it, with no ..",
                self.program
            )));
        }
        if let Some(path) = fs_program(&self.program) {
            crate::names::validate_path(path)
                .map_err(|e| Error::Invalid(format!("program {}: {e}", self.program)))?;
            if self.code.is_some() {
                return Err(Error::Invalid(format!(
                    "program {} names a file in the realm's files: it is its own code, \
                     not a file of uploaded code",
                    self.program
                )));
            }
        }
        // A BE proc may declare 0 cores: a light proc that mostly waits (a
        // coordinator, a watcher) and counts nothing against its worker's
        // utilization target.
        let least = if self.class == Class::Be { 0 } else { 1 };
        if !(least..=CORES_MAX).contains(&self.cores) {
            return Err(Error::Invalid(format!(
                "cores must be {least}..={CORES_MAX} for a {} proc, not {}",
                self.class.as_str(),
                self.cores
            )));
        }
        if !(0..=MEM_MB_MAX).contains(&self.mem_mb) {
            return Err(Error::Invalid(format!(
                "mem_mb must be 0..={MEM_MB_MAX}, not {}",
                self.mem_mb
            )));
        }
        if self
            .args
            .iter()
            .chain(self.env.iter().flat_map(|(k, v)| [k, v]))
            .any(|s| s.contains('\0'))
            || self
                .env
                .iter()
                .any(|(k, _)| k.is_empty() || k.contains('='))
        {
            return Err(Error::Invalid(
                "arguments and environment must have no NUL, and variable names no '='".into(),
            ));
        }
        if self.host_paths.len() > HOST_PATHS_MAX {
            return Err(Error::Invalid(format!(
                "at most {HOST_PATHS_MAX} host paths, not {}",
                self.host_paths.len()
            )));
        }
        for p in &self.host_paths {
            validate_host_path(p)?;
        }
        // A wasm proc's host calls carry no credential a scope could
        // narrow: only a native proc is given one.
        if self.scope.is_some() && self.kind != Kind::Native {
            return Err(Error::Invalid(
                "only a native proc's credential can be scoped".into(),
            ));
        }
        // A proc's credential is its realm's: metrics, which show every
        // realm, are an operator credential's grant (refused here, at the
        // spawn, not when the credential is minted as the proc starts).
        if self.scope.as_ref().is_some_and(|s| s.metrics) {
            return Err(Error::Invalid(
                "a proc's credential cannot be scoped to metrics (an operator credential's)".into(),
            ));
        }
        if !self.host_paths.is_empty() && self.kind != Kind::Native {
            return Err(Error::Invalid("only a native proc sees host paths".into()));
        }
        // Counted without serializing: the JSON adds a few bytes of quoting
        // per item, which the limit's margin absorbs.
        let size = self.program.len()
            + self.args.iter().map(|a| a.len() + 3).sum::<usize>()
            + self
                .env
                .iter()
                .map(|(k, v)| k.len() + v.len() + 6)
                .sum::<usize>()
            + self.host_paths.iter().map(|p| p.len() + 3).sum::<usize>();
        if size > DESCRIPTOR_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "descriptor of {size} bytes exceeds {DESCRIPTOR_BYTES_MAX}"
            )));
        }
        Ok(())
    }

    fn host_paths_json(&self) -> String {
        serde_json::Value::from(self.host_paths.clone()).to_string()
    }

    fn args_json(&self) -> String {
        serde_json::Value::from(self.args.clone()).to_string()
    }

    fn env_json(&self) -> String {
        let obj: serde_json::Map<String, serde_json::Value> = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone())))
            .collect();
        serde_json::Value::Object(obj).to_string()
    }

    /// What the scheduler must find and reserve: an LC proc's cores and
    /// memory; nothing for a BE proc, which only needs a live worker and
    /// runs when that worker's procd admits it (σOS Figure 3-5).
    fn need(&self) -> Need {
        need_of(self.class, self.cores, self.mem_mb, self.home_node.clone())
    }
}

/// A proc's row.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcInfo {
    pub realm: String,
    pub pid: Pid,
    pub parent: Option<Pid>,
    pub kind: Kind,
    pub class: Class,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cores: i64,
    pub mem_mb: i64,
    pub state: State,
    pub worker: Option<WorkerId>,
    pub evict_requested: bool,
    pub spawn_us: i64,
    pub start_us: Option<i64>,
    pub exit_us: Option<i64>,
    pub exit_status: Option<i64>,
    pub error: Option<String>,
    /// The user the proc acts for.
    pub user: String,
    /// Host paths it sees read-only ([`Descriptor::host_paths`]).
    pub host_paths: Vec<String>,
    /// Its credential's scope ([`Descriptor::scope`]).
    pub scope: Option<crate::auth::Scope>,
    /// The uploaded code it runs in ([`Descriptor::code`]).
    pub code: Option<CodeHash>,
    /// It shares the host's network: its realm allowed it when it was
    /// spawned (else a native proc has a network of its own, loopback
    /// only).
    pub host_network: bool,
    /// Re-queued rather than failed when its node is lost
    /// ([`Descriptor::restartable`]).
    pub restartable: bool,
    /// Who the proc acts as in its host calls: set by the claim that starts
    /// a proc run inside procd (wasm), `None` on every other read. (A
    /// native proc acts with its own credential.)
    pub caller: Option<crate::auth::Caller>,
}

/// The columns [`proc_from_row`] reads, as a literal for `concat!` (a
/// kernel statement is a `&'static str`: see `tabos_store::Tx`).
macro_rules! proc_columns {
    () => {
        "realm, pid, parent_pid, kind, class, program, args, env, cores, mem_mb, \
         state, worker_id, evict_requested, spawn_us, start_us, exit_us, exit_status, error, \
         user_name, host_paths, scope, host_network, restartable, code"
    };
}

fn proc_from_row(r: &Row) -> Result<ProcInfo> {
    let args: Vec<String> = serde_json::from_str(&r.get::<String>(6)?)
        .map_err(|e| Error::Invalid(format!("stored args: {e}")))?;
    let env: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&r.get::<String>(7)?)
            .map_err(|e| Error::Invalid(format!("stored env: {e}")))?;
    Ok(ProcInfo {
        realm: r.get(0)?,
        pid: Pid(r.get(1)?),
        parent: r.get::<Option<String>>(2)?.map(Pid),
        kind: r.get::<String>(3)?.parse()?,
        class: r.get::<String>(4)?.parse()?,
        program: r.get(5)?,
        args,
        env: env
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
            .collect(),
        cores: r.get(8)?,
        mem_mb: r.get(9)?,
        state: r.get::<String>(10)?.parse()?,
        worker: r.get::<Option<String>>(11)?.map(WorkerId),
        evict_requested: r.get(12)?,
        spawn_us: r.get(13)?,
        start_us: r.get(14)?,
        exit_us: r.get(15)?,
        exit_status: r.get(16)?,
        error: r.get(17)?,
        user: r.get(18)?,
        host_paths: serde_json::from_str(&r.get::<String>(19)?)
            .map_err(|e| Error::Invalid(format!("stored host paths: {e}")))?,
        scope: r
            .get::<Option<String>>(20)?
            .map(|s| crate::auth::Scope::parse(&s))
            .transpose()?,
        host_network: r.get(21)?,
        restartable: r.get(22)?,
        code: r
            .get::<Option<String>>(23)?
            .map(|c| CodeHash::parse(&c))
            .transpose()?,
        caller: None,
    })
}

/// The change-feed channel of one proc.
pub fn proc_channel(realm: &str, pid: &str) -> String {
    format!("proc/{realm}/{pid}")
}

/// The change-feed channel of every proc of `realm`: each transition
/// notified on a proc's own channel is notified here too, as
/// `<pid> <what>` (for watchers of the whole realm: a dashboard, a
/// PostgreSQL client's `LISTEN procs`).
pub fn procs_channel(realm: &str) -> String {
    format!("procs/{realm}")
}

/// Channel raised when a proc ends — exited, evicted or failed (payload:
/// its realm): what waits on procs of several realms (a graph's proc
/// tasks, `graphs::settle_children_tx`) follows.
pub const ENDED_CHANNEL: &str = "procs/ended";

/// Notifies proc `pid`'s transition `what` on its channel and on its
/// realm's ([`procs_channel`]).
fn notify_proc(tx: &mut dyn Tx, realm: &str, pid: &str, what: &str) -> Result<()> {
    tx.notify(&proc_channel(realm, pid), what)?;
    tx.notify(&procs_channel(realm), &format!("{pid} {what}"))?;
    Ok(())
}

/// The change-feed channel a worker's procd listens on for assignments.
pub fn worker_channel(realm: &str, worker: &WorkerId) -> String {
    format!("worker/{realm}/{worker}")
}

/// The change-feed channel on which every placement of a proc in `realm`
/// is announced (payload: the worker), for watchers outside the node (a
/// PostgreSQL client's `LISTEN spawns`). Procds do not listen on it: a
/// placement reaches the idle workers that may steal it by
/// [`STEAL_HINT`]s on their own channels, so that what a placement costs
/// in deliveries does not grow with the cluster (issue 35, item 4).
pub fn queue_channel(realm: &str) -> String {
    format!("queue/{realm}")
}

/// Payload prefix on a worker's channel: a proc was placed on the worker
/// named after it, and this worker may steal it if it stays unclaimed
/// (σOS Figure 3-6).
pub const STEAL_HINT: &str = "steal ";

/// Most workers told of one placement besides the worker placed on. A
/// constant, so a placement's notifications are `1 + STEAL_HINTS_MAX`
/// whatever the size of the cluster; a thief that finds more to steal than
/// it can take tells as many others ([`steal_tx`]), so a burst spreads to
/// as many workers as it needs.
pub const STEAL_HINTS_MAX: i64 = 2;

/// Procedure body: tells up to [`STEAL_HINTS_MAX`] other live workers of
/// `realm` with room for `cores` that `victim` was given a proc. Which
/// ones rotates with `key` (a pid), over the workers in id order, so
/// hints spread over the realm's workers instead of falling on the first.
fn hint_thieves_tx(
    tx: &mut dyn Tx,
    realm: &str,
    victim: &WorkerId,
    cores: i64,
    key: &str,
) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let candidates: i64 = tx
        .query_one(
            "SELECT count(*) FROM worker WHERE p_key = $1 AND realm = $2 AND state = 'up' \
               AND draining = 0 AND worker_id <> $3 AND unused_capacity >= $4",
            params![p, realm, victim.as_str(), cores],
        )?
        .get(0)?;
    if candidates == 0 {
        return Ok(());
    }
    let start = (fnv1a(key) % candidates as u64) as i64;
    let want = STEAL_HINTS_MAX.min(candidates);
    const PICK: &str = "SELECT worker_id FROM worker WHERE p_key = $1 AND realm = $2 \
           AND state = 'up' AND draining = 0 AND worker_id <> $3 AND unused_capacity >= $4 \
         ORDER BY worker_id LIMIT $5 OFFSET $6";
    let mut thieves = Vec::new();
    for row in &tx.query(PICK, params![p, realm, victim.as_str(), cores, want, start])? {
        thieves.push(WorkerId(row.get(0)?));
    }
    let short = want - thieves.len() as i64;
    if short > 0 {
        // Wrapped past the last worker: the rest from the first.
        for row in &tx.query(PICK, params![p, realm, victim.as_str(), cores, short, 0i64])? {
            thieves.push(WorkerId(row.get(0)?));
        }
    }
    let hint = format!("{STEAL_HINT}{victim}");
    for thief in &thieves {
        tx.notify(&worker_channel(realm, thief), &hint)?;
    }
    Ok(())
}

/// FNV-1a: a stable, well-spread hash of a short key (no need to resist
/// an adversary: it only rotates which idle workers hear of a placement).
fn fnv1a(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(crate) fn notify_assigned(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &str,
    worker: &WorkerId,
    need: &Need,
) -> Result<()> {
    tx.notify(&worker_channel(realm, worker), pid)?;
    tx.notify(&queue_channel(realm), worker.as_str())?;
    hint_thieves_tx(tx, realm, worker, need.cores, pid)
}

/// Procedure body: appends a provenance row for `pid`.
pub fn event_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &str,
    event: &str,
    detail: Option<&str>,
    now_us: i64,
) -> Result<()> {
    let seq = crate::realms::next_seq_tx(tx, 1)?;
    event_at_tx(tx, realm, pid, seq, event, detail, now_us)
}

/// Procedure body: appends a provenance row with a sequence number the
/// caller already took from the realm.
fn event_at_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &str,
    seq: i64,
    event: &str,
    detail: Option<&str>,
    now_us: i64,
) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    tx.execute(
        "INSERT INTO proc_event (p_key, realm, pid, seq, at_us, event, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        params![p, realm, pid, seq, now_us, event, detail],
    )?;
    Ok(())
}

pub(crate) fn get_tx(tx: &mut dyn Tx, realm: &str, pid: &str) -> Result<ProcInfo> {
    let p = i64::from(tx.p_key().0);
    let row = tx
        .query_opt(
            concat!(
                "SELECT ",
                proc_columns!(),
                " FROM proc WHERE p_key = $1 AND realm = $2 AND pid = $3"
            ),
            params![p, realm, pid],
        )?
        .ok_or_else(|| Error::NotFound(format!("no proc {pid:?} in realm {realm:?}")))?;
    proc_from_row(&row)
}

/// Refuses a spawn that would take `realm` past a quota (checked in the
/// spawn's transaction, so concurrent spawns cannot both pass it).
fn check_quota_tx(
    tx: &mut dyn Tx,
    realm: &str,
    q: &crate::realms::Quota,
    d: &Descriptor,
) -> Result<()> {
    if *q == crate::realms::Quota::default() {
        return Ok(()); // no quota: nothing to count
    }
    let row = tx.query_one(
        "SELECT count(*), coalesce(sum(cores), 0), coalesce(sum(mem_mb), 0) FROM proc \
         WHERE p_key = $1 AND realm = $2 AND state IN ('spawned', 'claimed', 'running')",
        params![crate::p_key(tx), realm],
    )?;
    let (procs, cores, mem): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
    let over = |what: &'static str, used: i64, adding: i64, quota: Option<i64>, unit: &str| {
        let Some(q) = quota.filter(|q| used + adding > *q) else {
            return Ok(());
        };
        let message = format!(
            "realm {realm} is over its {what} quota: {used}{unit} used of {q}{unit}, \
             this spawn adds {adding}{unit}"
        );
        Err(crate::realms::over_quota(what, used + adding, q, message))
    };
    over("procs", procs, 1, q.procs, "")?;
    over("cores", cores, d.cores, q.cores, "")?;
    over("memory", mem, d.mem_mb, q.mem_mb, " MB")?;
    Ok(())
}

/// Procedure body: spawns one proc: inserts its row, lets the realm's
/// scheduler pick a worker (or defers it), and notifies.
pub fn spawn_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    d: &Descriptor,
    now_us: i64,
) -> Result<Option<WorkerId>> {
    d.validate()?;
    let policy = crate::realms::spawn_policy_tx(tx, realm)?;
    let p = i64::from(tx.p_key().0);
    check_quota_tx(tx, realm, &policy.quota, d)?;
    if !d.host_paths.is_empty() {
        let allowed = crate::realms::host_paths_tx(tx, realm)?;
        if let Some(p) = d
            .host_paths
            .iter()
            .find(|p| !allowed.iter().any(|a| host_path_within(p, a)))
        {
            return Err(Error::Denied(format!(
                "realm {realm} may not see host path {p} (its operator allows: {})",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            )));
        }
    }
    if let Some(parent) = &d.parent {
        let live = tx.query_opt(
            "SELECT state FROM proc WHERE p_key = $1 AND realm = $2 AND pid = $3",
            params![p, realm, parent.as_str()],
        )?;
        if live.is_none() {
            return Err(Error::NotFound(format!(
                "parent {parent} does not exist in realm {realm:?}"
            )));
        }
    }
    // Choose and reserve first, so the row is written once with its worker.
    let need = d.need();
    let worker = sched::pick_tx(tx, policy.scheduler, realm, &need)?;
    if let Some(w) = &worker {
        sched::reserve_tx(tx, realm, w, &need)?;
    } else if let Some((cores, mem_mb)) = sched::largest_worker_tx(tx, realm)? {
        // Deferred procs wait for room; one no live worker could ever hold
        // would wait forever.
        if need.cores > cores || need.mem_mb > mem_mb {
            return Err(Error::Invalid(format!(
                "proc needs {} cores and {} MB, more than any live worker of realm {realm:?} \
                 has (at most {cores} cores and {mem_mb} MB)",
                need.cores, need.mem_mb
            )));
        }
    }
    // One sequence number for the proc (spawn order), one for its event.
    let seq = crate::realms::next_seq_tx(tx, 2)?;
    tx.execute(
        "INSERT INTO proc (p_key, realm, pid, seq, parent_pid, kind, class, program, args, env, \
                           cores, mem_mb, home_node, restartable, state, worker_id, spawn_us, \
                           assign_us, user_name, host_paths, scope, host_network, max_restarts, \
                           code) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'spawned', $15, \
                 $16, $17, $18, $19, $20, $21, $22, $23)",
        params![
            p,
            realm,
            pid.as_str(),
            seq,
            d.parent.as_ref().map(Pid::as_str),
            d.kind.as_str(),
            d.class.as_str(),
            d.program.as_str(),
            d.args_json(),
            d.env_json(),
            d.cores,
            d.mem_mb,
            d.home_node.as_deref(),
            d.restartable,
            worker.as_ref().map(WorkerId::as_str),
            now_us,
            worker.as_ref().map(|_| now_us),
            d.user.as_str(),
            d.host_paths_json(),
            d.scope.as_ref().map(crate::auth::Scope::to_string),
            policy.host_network && d.kind == Kind::Native,
            d.max_restarts,
            d.code.as_ref().map(CodeHash::as_str)
        ],
    )
    .map_err(|e| {
        if e.is_unique_violation() {
            Error::AlreadyExists(format!("proc {pid} in realm {realm:?}"))
        } else {
            Error::Store(e)
        }
    })?;
    // The spawn event names the worker; a deferred proc gets an `assign`
    // event when it is placed later.
    let detail = worker.as_ref().map(WorkerId::as_str);
    event_at_tx(tx, realm, pid.as_str(), seq + 1, "spawn", detail, now_us)?;
    if let Some(w) = &worker {
        notify_assigned(tx, realm, pid.as_str(), w, &need)?;
    }
    notify_proc(tx, realm, pid.as_str(), State::Spawned.as_str())?;
    Ok(worker)
}

/// What BE admission allows a procd now (σOS Figure 3-5): BE procs start
/// while the worker's busy cores are under its target. The procd of a
/// static realm measures busy cores (the CPU its procs and the node use,
/// plus the declared cores of procs started too recently to show in a
/// measurement); the procd of a granted worker counts the declared cores of
/// what it runs. Each BE proc a claim takes adds its declared cores, so one
/// claim does not overshoot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Admission {
    /// Cores busy now.
    pub busy_cores: f64,
    /// Utilization target in cores (cores × target fraction).
    pub target_cores: f64,
    /// `busy_cores` are declared cores (a worker's grant in an elastic
    /// realm), not a measurement: a proc of no cores takes none of them,
    /// so it is admitted even when the grant is full. (Measured, a proc of
    /// no cores still adds load, so a full node admits none.) Without
    /// this, a job's coordinator (0 cores) waits behind the reducers that
    /// wait for it.
    pub declared: bool,
}

impl Admission {
    /// Admission by a measurement of the node's load.
    pub const fn measured(busy_cores: f64, target_cores: f64) -> Admission {
        Admission {
            busy_cores,
            target_cores,
            declared: false,
        }
    }

    /// Admission by the declared cores of what a granted worker runs.
    pub const fn declared(busy_cores: f64, target_cores: f64) -> Admission {
        Admission {
            busy_cores,
            target_cores,
            declared: true,
        }
    }

    /// Whether another BE proc (of any cores) may start now.
    pub fn admits(&self) -> bool {
        self.busy_cores < self.target_cores
    }

    /// Whether a BE proc of `cores` may start now.
    pub fn admits_proc(&self, cores: i64) -> bool {
        self.admits() || (self.declared && cores == 0)
    }
}

/// What [`claim_tx`] took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claimed {
    pub procs: Vec<ProcInfo>,
    /// BE procs assigned to the worker are still waiting because admission
    /// closed: the procd claims again when its measured load falls (and
    /// only then — an idle node with nothing waiting is not woken).
    pub be_waiting: bool,
}

impl Kind {
    /// Wasm procs run inside procd, which starts them the moment it
    /// has claimed them: for these, claiming *is* starting, and the claim
    /// transaction records both (one transaction less on the start path).
    pub fn starts_when_claimed(self) -> bool {
        matches!(self, Kind::Wasm)
    }
}

/// Marks `info` claimed by `worker` (its current worker, or a thief), and
/// running as well if its kind starts when claimed.
fn claim_one_tx(
    tx: &mut dyn Tx,
    realm: &str,
    info: &mut ProcInfo,
    worker: &WorkerId,
    event: &str,
    detail: &str,
    now_us: i64,
) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let start = info.kind.starts_when_claimed();
    let state = if start {
        State::Running
    } else {
        State::Claimed
    };
    let n = tx.execute(
        "UPDATE proc SET state = $6, claim_us = $4, worker_id = $5, start_us = $7 \
         WHERE p_key = $1 AND realm = $2 AND pid = $3 AND state = 'spawned'",
        params![
            p,
            realm,
            info.pid.as_str(),
            now_us,
            worker.as_str(),
            state.as_str(),
            start.then_some(now_us)
        ],
    )?;
    debug_assert_eq!(n, 1, "only spawned procs are claimed");
    event_tx(tx, realm, info.pid.as_str(), event, Some(detail), now_us)?;
    if start {
        event_tx(tx, realm, info.pid.as_str(), "start", None, now_us)?;
        info.start_us = Some(now_us);
        info.caller = Some(crate::auth::Caller::of_started_proc(
            &info.realm,
            &info.pid,
            &info.user,
            info.scope.clone(),
        )?);
    }
    notify_proc(tx, realm, info.pid.as_str(), state.as_str())?;
    info.state = state;
    info.worker = Some(worker.clone());
    Ok(())
}

/// Procedure body: a worker's procd takes the procs assigned to it: every
/// LC proc (their cores are already reserved), then BE procs in spawn order
/// while `admission` admits them; at most `max` in all.
pub fn claim_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    max: i64,
    admission: Admission,
    now_us: i64,
) -> Result<Claimed> {
    let p = i64::from(tx.p_key().0);
    let max = max.clamp(0, CLAIM_MAX);
    // LIMIT in the text: a bound LIMIT makes SQLite re-prepare every call.
    const _: () = assert!(CLAIM_MAX == 64);
    let select = concat!(
        "SELECT ",
        proc_columns!(),
        " FROM proc WHERE p_key = $1 AND realm = $2 AND worker_id = $3 \
         AND state = 'spawned' AND class = $4 ORDER BY seq LIMIT 64"
    );
    let mut claimed = Vec::new();
    let mut be_waiting = false;
    let mut admission = admission;
    // LC procs first (their cores are reserved), then BE procs while admitted.
    for class in [Class::Lc, Class::Be] {
        let admits = |a: &Admission, cores: i64| class == Class::Lc || a.admits_proc(cores);
        if claimed.len() as i64 >= max {
            continue;
        }
        if !admits(&admission, 0) {
            // Not even a proc of no cores: nothing of this class starts.
            be_waiting = tx
                .query_opt(
                    "SELECT 1 FROM proc WHERE p_key = $1 AND realm = $2 AND worker_id = $3 \
                       AND state = 'spawned' AND class = 'BE' LIMIT 1",
                    params![p, realm, worker.as_str()],
                )?
                .is_some();
            continue;
        }
        let rows = tx.query(select, params![p, realm, worker.as_str(), class.as_str()])?;
        for r in rows.iter() {
            if claimed.len() as i64 >= max {
                break;
            }
            let mut info = proc_from_row(r)?;
            if !admits(&admission, info.cores) {
                // A later proc of no cores may still be admitted.
                be_waiting = true;
                continue;
            }
            claim_one_tx(
                tx,
                realm,
                &mut info,
                worker,
                "claim",
                worker.as_str(),
                now_us,
            )?;
            admission.busy_cores += info.cores as f64;
            claimed.push(info);
        }
    }
    debug_assert!(claimed.len() as i64 <= max);
    Ok(Claimed {
        procs: claimed,
        be_waiting,
    })
}

/// What [`steal_tx`] took and when to look again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stolen {
    pub procs: Vec<ProcInfo>,
    /// When the oldest proc of another worker that is still unclaimed, but
    /// not yet stealable, becomes stealable.
    pub next_us: Option<i64>,
}

/// Procs looked at per steal (the LIMIT in `steal_tx`'s query).
pub const STEAL_SCAN_MAX: i64 = 64;
const _: () = assert!(STEAL_SCAN_MAX == 64);

/// Most procs one claim takes (the LIMIT in `claim_tx`'s query).
pub const CLAIM_MAX: i64 = 64;

/// Procedure body: σOS work stealing (Figure 3-6). `thief` takes procs that
/// were placed on other workers at least `steal_after_us` ago and are still
/// unclaimed: an LC proc if the thief has room for it (its reservation
/// moves from the victim to the thief, and the victim's freed room goes to
/// deferred procs), a BE proc while `admission` admits it.
pub fn steal_tx(
    tx: &mut dyn Tx,
    realm: &str,
    thief: &WorkerId,
    admission: Admission,
    steal_after_us: i64,
    now_us: i64,
) -> Result<Stolen> {
    if sched::draining_tx(tx, realm, thief)? {
        // A draining node takes no new work, stolen or placed.
        return Ok(Stolen::default());
    }
    let p = i64::from(tx.p_key().0);
    // Only procs old enough to steal. On PostgreSQL, locked as they are
    // read and skipping those another thief or their owner holds: every
    // idle node of a busy realm steals at once, and thieves that waited on
    // each other's rows (and on the owners', taken in another order)
    // deadlocked, a second each to detect (issue 35).
    let stealable = assign_cutoff(now_us, steal_after_us);
    macro_rules! stealable {
        ($lock:literal) => {
            concat!(
                "SELECT ",
                proc_columns!(),
                " FROM proc \
                 WHERE p_key = $1 AND realm = $2 AND state = 'spawned' \
                   AND worker_id IS NOT NULL AND worker_id <> $3 \
                   AND COALESCE(assign_us, 0) <= $4 \
                 ORDER BY assign_us LIMIT 64",
                $lock
            )
        };
    }
    let select = match tx.dialect() {
        Dialect::Sqlite => stealable!(""),
        Dialect::Postgres => stealable!(" FOR UPDATE SKIP LOCKED"),
    };
    let rows = tx.query(select, params![p, realm, thief.as_str(), stealable])?;
    // The next proc that will be old enough, for the thief's timer.
    let next_us = tx
        .query_one(
            "SELECT min(assign_us) FROM proc \
             WHERE p_key = $1 AND realm = $2 AND state = 'spawned' AND worker_id IS NOT NULL \
               AND worker_id <> $3 AND assign_us > $4",
            params![p, realm, thief.as_str(), stealable],
        )?
        .get::<Option<i64>>(0)?
        .map(|a| a + steal_after_us);
    let mut out = Stolen {
        next_us,
        ..Stolen::default()
    };
    let mut admission = admission;
    let mut victims_freed = false;
    // The first stealable proc this thief had no room for, if any.
    let mut left: Option<String> = None;
    for r in &rows {
        let mut info = proc_from_row(r)?;
        let victim = info
            .worker
            .clone()
            .ok_or_else(|| Error::Invalid(format!("unclaimed proc {} has no worker", info.pid)))?;
        match info.class {
            Class::Lc => {
                let need = need_of(Class::Lc, info.cores, info.mem_mb, None);
                if !sched::try_reserve_tx(tx, realm, thief, &need)? {
                    left.get_or_insert_with(|| info.pid.to_string());
                    continue;
                }
                sched::release_tx(tx, realm, &victim, info.cores, info.mem_mb)?;
                victims_freed = true;
            }
            Class::Be => {
                if !admission.admits_proc(info.cores) {
                    left.get_or_insert_with(|| info.pid.to_string());
                    continue;
                }
            }
        }
        let detail = format!("{thief} from {victim}");
        claim_one_tx(tx, realm, &mut info, thief, "steal", &detail, now_us)?;
        admission.busy_cores += info.cores as f64;
        out.procs.push(info);
    }
    if victims_freed {
        assign_deferred_tx(tx, realm, now_us)?;
    }
    // More to steal than this thief could take: a burst placed on a few
    // workers spreads to others, a few more for every thief that fills up.
    if let Some(pid) = left {
        hint_thieves_tx(tx, realm, thief, 0, &pid)?;
    }
    Ok(out)
}

/// The latest assignment time a proc may have to be stolen at `now_us`.
fn assign_cutoff(now_us: i64, steal_after_us: i64) -> i64 {
    now_us.saturating_sub(steal_after_us.max(0))
}

/// Most deferred procs one transaction looks at when capacity frees.
pub const DEFERRED_SCAN_MAX: i64 = 64;
/// Deferred procs looked at first; the rest of [`DEFERRED_SCAN_MAX`] only
/// while something among them could still be placed. An exit frees one
/// proc's room: the first deferred proc takes it and reading 63 more rows
/// to find none fits was most of an exit's transaction (issue 40).
const DEFERRED_FIRST: i64 = 8;
const _: () = assert!(DEFERRED_FIRST < DEFERRED_SCAN_MAX);

/// Procedure body: assigns deferred procs of `realm`, oldest first, to
/// workers with room; returns the `(pid, worker)` pairs assigned. Called by
/// every transaction that frees capacity.
///
/// It looks at the oldest [`DEFERRED_SCAN_MAX`], [`DEFERRED_FIRST`] at
/// first; the others only if one of them could still be placed — a
/// worker that may take work (`up`, not draining: what every pick asks)
/// has a core free, which any LC proc needs, or has any room at all and
/// a BE proc (which needs none) waits among them. Otherwise none of them
/// could be placed, so the result is the same as reading them all.
pub fn assign_deferred_tx(
    tx: &mut dyn Tx,
    realm: &str,
    now_us: i64,
) -> Result<Vec<(String, WorkerId)>> {
    let p = i64::from(tx.p_key().0);
    let scheduler = crate::realms::scheduler_tx(tx, realm)?;
    // The LIMITs are in the text, not parameters: SQLite (3.47+) plans with
    // a bound LIMIT's value and so re-prepares such a statement on every
    // call.
    const _: () = assert!(DEFERRED_FIRST == 8 && DEFERRED_SCAN_MAX - DEFERRED_FIRST == 56);
    let first = tx.query(
        "SELECT pid, cores, mem_mb, home_node, class, seq FROM proc \
         WHERE p_key = $1 AND realm = $2 AND worker_id IS NULL AND state = 'spawned' \
         ORDER BY seq LIMIT 8",
        params![p, realm],
    )?;
    let mut assigned = Vec::new();
    // Needs that found no worker: a later proc needing at least as much
    // (with the same home) cannot fit either, so it is not asked again.
    // Keeps an exit behind a long queue of equal procs at two picks.
    let mut unplaceable: Vec<Need> = Vec::new();
    let mut place = |tx: &mut dyn Tx, rows: &tabos_store::Rows| -> Result<Option<i64>> {
        let mut last = None;
        for row in rows {
            last = Some(row.get::<i64>(5)?);
            let pid: String = row.get(0)?;
            let class: Class = row.get::<String>(4)?.parse()?;
            let need = need_of(class, row.get(1)?, row.get(2)?, row.get(3)?);
            if unplaceable.iter().any(|u| {
                u.home_node == need.home_node && need.cores >= u.cores && need.mem_mb >= u.mem_mb
            }) {
                continue;
            }
            let Some(worker) = sched::pick_tx(tx, scheduler, realm, &need)? else {
                unplaceable.push(need);
                continue;
            };
            sched::reserve_tx(tx, realm, &worker, &need)?;
            tx.execute(
                "UPDATE proc SET worker_id = $4, assign_us = $5 \
                 WHERE p_key = $1 AND realm = $2 AND pid = $3",
                params![p, realm, pid.as_str(), worker.as_str(), now_us],
            )?;
            event_tx(tx, realm, &pid, "assign", Some(worker.as_str()), now_us)?;
            notify_assigned(tx, realm, &pid, &worker, &need)?;
            assigned.push((pid, worker));
        }
        Ok(last)
    };
    let last = place(tx, &first)?;
    // A full first page (else every deferred proc was read), and the seq
    // the rest starts after.
    if let Some(last) = last.filter(|_| first.len() as i64 == DEFERRED_FIRST) {
        let may_place = tx
            .query_opt(
                "SELECT 1 FROM worker \
                 WHERE p_key = $1 AND realm = $2 AND state = 'up' AND draining = 0 \
                   AND (unused_capacity >= 1 OR EXISTS (SELECT 1 FROM proc \
                     WHERE p_key = $1 AND realm = $2 AND worker_id IS NULL \
                       AND state = 'spawned' AND class = 'BE' AND seq > $3)) \
                 LIMIT 1",
                params![p, realm, last],
            )?
            .is_some();
        if may_place {
            let rest = tx.query(
                "SELECT pid, cores, mem_mb, home_node, class, seq FROM proc \
                 WHERE p_key = $1 AND realm = $2 AND worker_id IS NULL AND state = 'spawned' \
                   AND seq > $3 \
                 ORDER BY seq LIMIT 56",
                params![p, realm, last],
            )?;
            place(tx, &rest)?;
        }
    }
    Ok(assigned)
}

/// Procedure body: registers (or re-registers) a worker of `realm`. Its free
/// capacity is its size minus what the realm's live LC procs on it hold;
/// then deferred procs are assigned to the new room.
pub fn register_worker_tx(
    tx: &mut dyn Tx,
    realm: &str,
    w: &WorkerSpec,
    now_us: i64,
) -> Result<Vec<(String, WorkerId)>> {
    let p = i64::from(tx.p_key().0);
    let held = tx.query_one(
        "SELECT COALESCE(SUM(cores), 0), COALESCE(SUM(mem_mb), 0) FROM proc \
         WHERE p_key = $1 AND realm = $2 AND worker_id = $3 AND class = 'LC' \
           AND state IN ('spawned', 'claimed', 'running')",
        params![p, realm, w.worker_id.as_str()],
    )?;
    sched::upsert_worker_tx(tx, realm, w, held.get(0)?, held.get(1)?, now_us)?;
    assign_deferred_tx(tx, realm, now_us)
}

/// Registers a worker; blocks until committed.
pub fn register_worker(
    store: &Store,
    realm: &str,
    w: &WorkerSpec,
) -> Result<Vec<(String, WorkerId)>> {
    validate_realm(realm)?;
    let (r, w) = (realm.to_string(), w.clone());
    let now = tabos_store::now_us();
    store.call(
        crate::realm_partition(realm, store.partitions()),
        move |tx| register_worker_tx(tx, &r, &w, now),
    )
}

/// What the loss of a node, or the give-back of its procs, did in a realm.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expired {
    /// The node's workers in the realm that went down.
    pub workers: Vec<WorkerId>,
    /// Live procs of those workers marked failed.
    pub failed: Vec<String>,
    /// Procs put back in the queue (restartable ones, and ones assigned
    /// there that never started).
    pub requeued: Vec<String>,
}

/// Procedure body: node `node_id` was declared lost ([`crate::nodes`]):
/// its workers in `realm` go down (nothing new is placed there), and the
/// procs assigned to them that it never claimed are placed again — they
/// never ran, so they cannot run twice. Its claimed and running procs stay
/// its until they are given back ([`give_back_node_tx`]) or it returns
/// ([`node_returned_tx`]).
pub fn node_lost_tx(tx: &mut dyn Tx, realm: &str, node_id: &str, now_us: i64) -> Result<Expired> {
    let mut out = Expired {
        workers: sched::node_workers_down_tx(tx, realm, node_id)?,
        ..Expired::default()
    };
    if out.workers.is_empty() {
        return Ok(out);
    }
    for worker in &out.workers {
        out.requeued
            .extend(unassign_unclaimed_tx(tx, realm, worker, now_us)?);
    }
    assign_deferred_tx(tx, realm, now_us)?;
    Ok(out)
}

/// Procedure body: the procs assigned to `worker` that it has not claimed
/// go back to waiting for a place (their reservations released); the
/// caller places them ([`assign_deferred_tx`]). Returns their pids.
fn unassign_unclaimed_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    now_us: i64,
) -> Result<Vec<String>> {
    let p = i64::from(tx.p_key().0);
    let unclaimed = tx.query(
        "SELECT pid, cores, mem_mb, class FROM proc \
         WHERE p_key = $1 AND realm = $2 AND worker_id = $3 AND state = 'spawned'",
        params![p, realm, worker.as_str()],
    )?;
    let mut moved = Vec::with_capacity(unclaimed.len());
    for r in &unclaimed {
        let pid: String = r.get(0)?;
        let class: Class = r.get::<String>(3)?.parse()?;
        let need = need_of(class, r.get(1)?, r.get(2)?, None);
        if need.reserves() {
            sched::release_tx(tx, realm, worker, need.cores, need.mem_mb)?;
        }
        tx.execute(
            "UPDATE proc SET worker_id = NULL, assign_us = NULL \
             WHERE p_key = $1 AND realm = $2 AND pid = $3",
            params![p, realm, pid.as_str()],
        )?;
        event_tx(tx, realm, &pid, "requeue", Some(worker.as_str()), now_us)?;
        moved.push(pid);
    }
    Ok(moved)
}

/// Procedure body: node `node_id`, lost, has been silent past its grace:
/// the live procs of its workers in `realm` that went down with it (and
/// have not come back) are given back — restartable ones queued again, the
/// others failed with `detail` — and their waiters woken; each such worker
/// is marked given back. (The node has stopped its restartable procs
/// itself by now, if it lives.) A worker its node brought back up in the
/// meanwhile keeps its procs.
pub fn give_back_node_tx(
    tx: &mut dyn Tx,
    realm: &str,
    node_id: &str,
    detail: &str,
    now_us: i64,
) -> Result<Expired> {
    let mut out = Expired::default();
    for worker in sched::give_back_workers_tx(tx, realm, node_id, now_us)? {
        give_back_tx(tx, realm, &worker, detail, now_us, &mut out)?;
        out.workers.push(worker);
    }
    if !out.workers.is_empty() {
        assign_deferred_tx(tx, realm, now_us)?;
    }
    Ok(out)
}

/// Procedure body: node `node_id`, declared lost, renews again. In
/// `realm`: a worker whose procs were given back has its procd told
/// ([`sched::LAPSED`] on its channel) to stop what it still runs there and
/// register again; a worker down whose procs were not is up again (the
/// node kept them), and procs waiting for room may be placed there.
pub fn node_returned_tx(tx: &mut dyn Tx, realm: &str, node_id: &str, now_us: i64) -> Result<()> {
    for worker in sched::given_back_workers_tx(tx, realm, node_id)? {
        tx.notify(&worker_channel(realm, &worker), sched::LAPSED)?;
    }
    if !sched::node_workers_up_tx(tx, realm, node_id)?.is_empty() {
        assign_deferred_tx(tx, realm, now_us)?;
    }
    Ok(())
}

/// Procedure body: proc `pid`, which `worker`'s node stopped while it was
/// cut off from the database (restartable, past the node's grace), is
/// queued again — if the cluster has not given it back meanwhile (then it
/// is no longer live there, and nothing changes). Returns whether it was.
pub fn requeue_stopped_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    worker: &WorkerId,
    now_us: i64,
) -> Result<bool> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT class, cores, mem_mb, home_node, restarts, max_restarts FROM proc \
         WHERE p_key = $1 AND realm = $2 \
           AND pid = $3 AND worker_id = $4 AND state IN ('claimed', 'running') \
           AND restartable <> 0",
        params![p, realm, pid.as_str(), worker.as_str()],
    )?;
    let Some(r) = row else {
        return Ok(false);
    };
    let n = match Restart::of(true, r.get(4)?, r.get(5)?) {
        Restart::Again(n) => n,
        spent => {
            // Its last restart is spent: it fails where it stopped.
            let why = format!(
                "{worker}: stopped while its node was cut off{}",
                spent.why()
            );
            exited_tx(tx, realm, pid, State::Failed, None, Some(&why), now_us)?;
            return Ok(false);
        }
    };
    let need = need_of(
        r.get::<String>(0)?.parse()?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
    );
    if need.reserves() {
        sched::release_tx(tx, realm, worker, need.cores, need.mem_mb)?;
    }
    tx.execute(
        "UPDATE proc SET state = 'spawned', worker_id = NULL, assign_us = NULL, \
           claim_us = NULL, start_us = NULL, restarts = $4 \
         WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![p, realm, pid.as_str(), n],
    )?;
    event_tx(
        tx,
        realm,
        pid.as_str(),
        "requeue",
        Some(&format!("{worker}: stopped while its node was cut off")),
        now_us,
    )?;
    notify_proc(tx, realm, pid.as_str(), "spawned")?;
    assign_deferred_tx(tx, realm, now_us)?;
    Ok(true)
}

/// Procedure body: `worker`'s node stops cleanly (its procs there were
/// stopped first): the worker goes down, and its live procs are given back
/// as [`give_back_node_tx`] does — re-queued if restartable, else failed, saying
/// the node stopped — at once rather than a lease later.
pub fn hand_back_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    node_id: &str,
    now_us: i64,
) -> Result<Expired> {
    let mut out = Expired::default();
    if sched::down_tx(tx, realm, worker)? {
        let detail = format!("node {node_id} stopped (worker {worker})");
        give_back_tx(tx, realm, worker, &detail, now_us, &mut out)?;
        out.workers.push(worker.clone());
        assign_deferred_tx(tx, realm, now_us)?;
    }
    Ok(out)
}

/// Procedure body: `worker`'s node starts again under its id, its earlier
/// process gone (its procs' processes went with it: see the node's jail
/// lifeline). The procs that process had claimed or started are given
/// back — restartable ones queued again, the others failed with `detail`;
/// those merely assigned to the worker stay, for the new process to claim.
pub fn restarted_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    detail: &str,
    now_us: i64,
) -> Result<Expired> {
    let mut out = Expired::default();
    give_back_where_tx(tx, realm, worker, false, detail, now_us, &mut out)?;
    Ok(out)
}

/// Gives back the live procs of `worker`, which has gone down: restartable
/// ones are queued again, the others fail with `detail`.
fn give_back_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    detail: &str,
    now_us: i64,
    out: &mut Expired,
) -> Result<()> {
    give_back_where_tx(tx, realm, worker, true, detail, now_us, out)
}

/// Gives back `worker`'s claimed and running procs, and with `assigned`
/// also those only assigned to it (see [`give_back_one_tx`]).
fn give_back_where_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    assigned: bool,
    detail: &str,
    now_us: i64,
    out: &mut Expired,
) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let sql = if assigned {
        "SELECT pid, restartable, restarts, max_restarts FROM proc \
         WHERE p_key = $1 AND realm = $2 AND worker_id = $3 \
           AND state IN ('spawned', 'claimed', 'running')"
    } else {
        "SELECT pid, restartable, restarts, max_restarts FROM proc \
         WHERE p_key = $1 AND realm = $2 AND worker_id = $3 \
           AND state IN ('claimed', 'running')"
    };
    let live = tx.query(sql, params![p, realm, worker.as_str()])?;
    for r in &live {
        let pid: String = r.get(0)?;
        let again = Restart::of(r.get(1)?, r.get(2)?, r.get(3)?);
        give_back_one_tx(tx, realm, worker, &pid, again, detail, now_us, out)?;
    }
    Ok(())
}

/// Whether a proc given back runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restart {
    /// Not restartable: it fails.
    No,
    /// Queued again: its `n`th restart.
    Again(i64),
    /// Restarted `n` times already, its limit: it fails.
    Spent(i64),
}

impl Restart {
    fn of(restartable: bool, restarts: i64, max_restarts: i64) -> Restart {
        match (restartable, restarts < max_restarts) {
            (false, _) => Restart::No,
            (true, true) => Restart::Again(restarts + 1),
            (true, false) => Restart::Spent(restarts),
        }
    }

    /// What a failure says beyond its cause.
    fn why(self) -> String {
        match self {
            Restart::Spent(n) => format!(" (restarted {n} times, its limit)"),
            _ => String::new(),
        }
    }
}

/// Gives back proc `pid` of `worker`: queued again if `restartable`, else
/// failed with `detail`.
#[allow(clippy::too_many_arguments)]
fn give_back_one_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    pid: &str,
    again: Restart,
    detail: &str,
    now_us: i64,
    out: &mut Expired,
) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    if let Restart::Again(n) = again {
        tx.execute(
            "UPDATE proc SET state = 'spawned', worker_id = NULL, assign_us = NULL, \
               claim_us = NULL, start_us = NULL, restarts = $4 \
             WHERE p_key = $1 AND realm = $2 AND pid = $3",
            params![p, realm, pid, n],
        )?;
        event_tx(tx, realm, pid, "requeue", Some(worker.as_str()), now_us)?;
        notify_proc(tx, realm, pid, "spawned")?;
        out.requeued.push(pid.to_string());
    } else {
        let detail = format!("{detail}{}", again.why());
        exited_tx(
            tx,
            realm,
            &Pid(pid.to_string()),
            State::Failed,
            None,
            Some(&detail),
            now_us,
        )?;
        out.failed.push(pid.to_string());
    }
    Ok(())
}

/// Procedure body: node `node_id` is drained (`on`) or back in service:
/// its workers in `realm` are marked ([`sched::set_draining_tx`]) and, when
/// draining, the procs placed on them but not yet claimed are placed again
/// elsewhere (their reservations released) — what already runs there
/// finishes. Returns the pids placed again.
pub fn drain_tx(
    tx: &mut dyn Tx,
    realm: &str,
    node_id: &str,
    on: bool,
    now_us: i64,
) -> Result<Vec<String>> {
    let workers = sched::set_draining_tx(tx, realm, node_id, on)?;
    let mut moved = Vec::new();
    if !on {
        // Back in service: its room may hold deferred procs.
        if !workers.is_empty() {
            assign_deferred_tx(tx, realm, now_us)?;
        }
        return Ok(moved);
    }
    for w in &workers {
        moved.extend(unassign_unclaimed_tx(tx, realm, w, now_us)?);
    }
    if !moved.is_empty() {
        assign_deferred_tx(tx, realm, now_us)?;
    }
    Ok(moved)
}

/// Drains node `node_id` in `realm`, or puts it back in service (see
/// [`drain_tx`]).
pub async fn drain(store: &Store, realm: &str, node_id: &str, on: bool) -> Result<Vec<String>> {
    let n = node_id.to_string();
    call(store, realm, move |tx, r, now| drain_tx(tx, r, &n, on, now)).await
}

/// The node whose worker holds (or last held) proc `pid` of `realm` —
/// where its logs are — or `None` if it was never placed.
pub async fn holder(store: &Store, realm: &str, pid: &Pid) -> Result<Option<String>> {
    let (pid, r) = (pid.clone(), realm.to_string());
    // Only reads: on a read connection, not the partition's executor.
    crate::read(store, realm, move |tx| {
        let info = get_tx(tx, &r, pid.as_str())?;
        match &info.worker {
            Some(w) => sched::node_of_tx(tx, &r, w),
            None => Ok(None),
        }
    })
    .await
}

/// Procedure body: the cores of `realm`'s live procs (spawned, claimed or
/// running), of those not placed on a worker yet, and how many live procs
/// there are (a proc of no cores still needs a worker to run on).
pub fn live_cores_tx(tx: &mut dyn Tx, realm: &str) -> Result<(i64, i64, i64)> {
    let row = tx.query_one(
        "SELECT COALESCE(SUM(cores), 0), \
                COALESCE(SUM(CASE WHEN worker_id IS NULL THEN cores ELSE 0 END), 0), \
                count(*) \
         FROM proc WHERE p_key = $1 AND realm = $2 \
           AND state IN ('spawned', 'claimed', 'running')",
        params![crate::p_key(tx), realm],
    )?;
    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
}

/// Procedure body: the cores of `realm`'s live procs placed on each node
/// (by its workers), node by node.
pub fn live_cores_by_node_tx(tx: &mut dyn Tx, realm: &str) -> Result<Vec<(String, i64)>> {
    let rows = tx.query(
        "SELECT w.node_id, COALESCE(SUM(p.cores), 0) FROM proc p JOIN worker w \
           ON w.p_key = p.p_key AND w.realm = p.realm AND w.worker_id = p.worker_id \
         WHERE p.p_key = $1 AND p.realm = $2 AND p.state IN ('spawned', 'claimed', 'running') \
         GROUP BY w.node_id ORDER BY w.node_id",
        params![crate::p_key(tx), realm],
    )?;
    rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
}

/// The realms node `node_id` has workers in (a read over all partitions,
/// by the `worker_by_node` index; blocking).
pub fn node_realms(store: &Store, node_id: &str) -> Result<Vec<String>> {
    let rows = store.query(
        "SELECT DISTINCT realm FROM worker WHERE node_id = $1 ORDER BY realm",
        &[node_id.into()],
    )?;
    Ok(rows
        .iter()
        .map(|r| r.get::<String>(0))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// What happened to a node's procs, realm by realm.
pub type NodeOutcome = Vec<(String, Expired)>;

/// Runs `each(tx, realm, now)` in every realm node `node_id` has workers
/// in, one transaction per realm (a realm removed meanwhile is skipped).
async fn per_node_realm(
    store: &Store,
    node_id: &str,
    each: impl Fn(&mut dyn Tx, &str, i64) -> Result<Expired> + Clone + Send + 'static,
) -> Result<NodeOutcome> {
    let (s2, id) = (store.clone(), node_id.to_string());
    let realms = tokio::task::spawn_blocking(move || node_realms(&s2, &id))
        .await
        .map_err(|e| Error::Invalid(format!("listing the node's realms: {e}")))??;
    let mut out = Vec::with_capacity(realms.len());
    for realm in realms {
        let each = each.clone();
        match call(store, &realm, move |tx, r, now| each(tx, r, now)).await {
            Ok(e) => out.push((realm, e)),
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Node `node_id` was declared lost: [`node_lost_tx`] in each of its realms.
pub async fn node_lost(store: &Store, node_id: &str) -> Result<NodeOutcome> {
    let id = node_id.to_string();
    per_node_realm(store, node_id, move |tx, r, now| {
        node_lost_tx(tx, r, &id, now)
    })
    .await
}

/// Node `node_id`'s procs are given back: [`give_back_node_tx`] in each of
/// its realms.
pub async fn give_back_node(store: &Store, node_id: &str, detail: &str) -> Result<NodeOutcome> {
    let (id, detail) = (node_id.to_string(), detail.to_string());
    per_node_realm(store, node_id, move |tx, r, now| {
        give_back_node_tx(tx, r, &id, &detail, now)
    })
    .await
}

/// Node `node_id`, declared lost, renews again: [`node_returned_tx`] in
/// each of its realms.
pub async fn node_returned(store: &Store, node_id: &str) -> Result<()> {
    let id = node_id.to_string();
    per_node_realm(store, node_id, move |tx, r, now| {
        node_returned_tx(tx, r, &id, now)?;
        Ok(Expired::default())
    })
    .await
    .map(drop)
}

/// What [`drain_node`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// Whether the node's state changed (false: it was so already).
    pub changed: bool,
    /// `(realm, pid)` of the unclaimed procs placed again elsewhere.
    pub moved: Vec<(String, String)>,
}

/// Drains node `node_id` (`on`) — it stops taking new procs, its unclaimed
/// ones are placed elsewhere, what it runs finishes — or puts it back in
/// service. First the node's row ([`crate::nodes::set_draining`]), then its
/// workers realm by realm: a worker the node registers meanwhile reads the
/// row after registering ([`crate::nodes::is_draining`]), so whichever
/// comes second sees the other. Repeating a drain repeats the realm pass.
pub async fn drain_node(store: &Store, node_id: &str, on: bool) -> Result<Drained> {
    crate::ids::validate_name("node id", node_id)?;
    let changed = crate::nodes::set_draining(store, node_id, on).await?;
    let s2 = store.clone();
    let realms = tokio::task::spawn_blocking(move || crate::realms::list(&s2))
        .await
        .map_err(|e| Error::Invalid(format!("listing realms: {e}")))??;
    let mut out = Drained {
        changed,
        moved: Vec::new(),
    };
    for realm in realms {
        match drain(store, &realm, node_id, on).await {
            Ok(pids) => out
                .moved
                .extend(pids.into_iter().map(|p| (realm.clone(), p))),
            // Removed meanwhile.
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Gives `worker`'s procs back because its node stops cleanly (see
/// [`hand_back_tx`]).
pub async fn hand_back(
    store: &Store,
    realm: &str,
    worker: &WorkerId,
    node_id: &str,
) -> Result<Expired> {
    let (w, n) = (worker.clone(), node_id.to_string());
    call(store, realm, move |tx, r, now| {
        hand_back_tx(tx, r, &w, &n, now)
    })
    .await
}

/// What a proc of `class` must be given: LC procs reserve their cores and
/// memory; BE procs reserve nothing (any live worker will do).
fn need_of(class: Class, cores: i64, mem_mb: i64, home_node: Option<String>) -> Need {
    match class {
        Class::Lc => Need {
            cores,
            mem_mb,
            home_node,
        },
        Class::Be => Need {
            cores: 0,
            mem_mb: 0,
            home_node,
        },
    }
}

/// Procedure body: σOS `Started`: claimed → running.
/// Procedure body: a claimed proc's program has started. Returns whether
/// an eviction was requested before (which its worker, having nothing to
/// signal then, carries out now) — read in this transaction, so the worker
/// needs no read of its own.
pub fn started_tx(tx: &mut dyn Tx, realm: &str, pid: &Pid, now_us: i64) -> Result<bool> {
    let p = i64::from(tx.p_key().0);
    let info = get_tx(tx, realm, pid.as_str())?;
    if info.state != State::Claimed {
        return Err(Error::Invalid(format!(
            "proc {pid} is {}, not claimed: it cannot start",
            info.state
        )));
    }
    tx.execute(
        "UPDATE proc SET state = 'running', start_us = $4 WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![p, realm, pid.as_str(), now_us],
    )?;
    event_tx(tx, realm, pid.as_str(), "start", None, now_us)?;
    notify_proc(tx, realm, pid.as_str(), State::Running.as_str())?;
    Ok(info.evict_requested)
}

/// Procedure body: σOS `Exited` (and eviction and failure): a live proc
/// becomes `state` (exited, evicted or failed); its worker gets its cores
/// back and deferred procs are assigned to them. Returns the procs assigned.
pub fn exited_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    state: State,
    status: Option<i64>,
    error: Option<&str>,
    now_us: i64,
) -> Result<Vec<(String, WorkerId)>> {
    if !state.is_terminal() {
        return Err(Error::Invalid(format!("{state} is not a final state")));
    }
    let p = i64::from(tx.p_key().0);
    let info = get_tx(tx, realm, pid.as_str())?;
    if info.state.is_terminal() {
        return Err(Error::Invalid(format!(
            "proc {pid} has already {}",
            info.state
        )));
    }
    tx.execute(
        "UPDATE proc SET state = $4, exit_us = $5, exit_status = $6, error = $7 \
         WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![
            p,
            realm,
            pid.as_str(),
            state.as_str(),
            now_us,
            status,
            error
        ],
    )?;
    event_tx(tx, realm, pid.as_str(), state.as_str(), error, now_us)?;
    notify_proc(tx, realm, pid.as_str(), state.as_str())?;
    if state.is_terminal() {
        tx.notify(ENDED_CHANNEL, realm)?;
    }
    match (&info.worker, info.class) {
        (Some(w), Class::Lc) => {
            sched::release_tx(tx, realm, w, info.cores, info.mem_mb)?;
            assign_deferred_tx(tx, realm, now_us)
        }
        // A BE proc held no reservation; its procd admits the next one.
        _ => Ok(Vec::new()),
    }
}

/// Procedure body: σOS `Evict`. A deferred proc is evicted at once; a
/// proc on a worker is marked and its procd told, which stops it and records
/// `evicted`. Evicting a finished proc is a no-op.
pub fn evict_tx(tx: &mut dyn Tx, realm: &str, pid: &Pid, now_us: i64) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let info = get_tx(tx, realm, pid.as_str())?;
    if info.state.is_terminal() {
        return Ok(());
    }
    match &info.worker {
        None => {
            exited_tx(
                tx,
                realm,
                pid,
                State::Evicted,
                None,
                Some("evicted before it was scheduled"),
                now_us,
            )?;
        }
        Some(w) => {
            tx.execute(
                "UPDATE proc SET evict_requested = 1 WHERE p_key = $1 AND realm = $2 AND pid = $3",
                params![p, realm, pid.as_str()],
            )?;
            event_tx(tx, realm, pid.as_str(), "evict-requested", None, now_us)?;
            tx.notify(&worker_channel(realm, w), &format!("evict {pid}"))?;
            notify_proc(tx, realm, pid.as_str(), "evict-requested")?;
        }
    }
    Ok(())
}

static PID_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A fresh pid: time, process and a counter, unique on this machine.
pub fn generate_pid() -> Pid {
    let n = PID_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Pid(format!(
        "p{:x}-{:x}-{n:x}",
        tabos_store::now_us(),
        std::process::id()
    ))
}

/// Records what a proc used (CPU time, peak memory), measured by its node
/// when it ended; `None` leaves a figure unmeasured.
pub async fn record_usage(
    store: &Store,
    realm: &str,
    pid: &Pid,
    cpu_us: Option<i64>,
    peak_mem_bytes: Option<i64>,
) -> Result<()> {
    let (r, p) = (realm.to_string(), pid.clone());
    crate::call(store, realm, move |tx| {
        record_usage_tx(tx, &r, &p, cpu_us, peak_mem_bytes)
    })
    .await
}

/// Procedure body of [`record_usage`].
pub fn record_usage_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    cpu_us: Option<i64>,
    peak_mem_bytes: Option<i64>,
) -> Result<()> {
    let k = crate::p_key(tx);
    tx.execute(
        "UPDATE proc SET cpu_us = $4, peak_mem_bytes = $5 \
         WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![k, realm, pid.as_str(), cpu_us, peak_mem_bytes],
    )?;
    Ok(())
}

/// What a running proc uses now, as its node measured it (`tabos top`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LiveUsage {
    /// CPU time so far, µs.
    pub cpu_us: Option<i64>,
    /// Cores used over the last measuring interval.
    pub cpu_cores: Option<f64>,
    /// Memory in use, bytes.
    pub mem_bytes: Option<i64>,
}

/// Most procs one [`record_live_usage`] transaction writes (the caller
/// gives larger sets in batches of this many).
pub const LIVE_USAGE_BATCH_MAX: usize = 256;

/// Records what running procs of `realm` use now, in one transaction: a
/// proc that is no longer running keeps what its end recorded.
pub async fn record_live_usage(
    store: &Store,
    realm: &str,
    samples: Vec<(Pid, LiveUsage)>,
) -> Result<()> {
    if samples.len() > LIVE_USAGE_BATCH_MAX {
        return Err(Error::Invalid(format!(
            "{} procs' usage in one transaction: at most {LIVE_USAGE_BATCH_MAX}",
            samples.len()
        )));
    }
    if samples.is_empty() {
        return Ok(());
    }
    let r = realm.to_string();
    crate::call(store, realm, move |tx| {
        let k = crate::p_key(tx);
        let now = tx.clock_us()?;
        for (pid, u) in &samples {
            let cores = u.cpu_cores.filter(|c| c.is_finite() && *c >= 0.0);
            tx.execute(
                "UPDATE proc SET cpu_us = $4, cpu_cores = $5, mem_bytes = $6, usage_us = $7 \
                 WHERE p_key = $1 AND realm = $2 AND pid = $3 AND state = 'running'",
                params![
                    k,
                    r.as_str(),
                    pid.as_str(),
                    u.cpu_us,
                    cores,
                    u.mem_bytes,
                    now
                ],
            )?;
        }
        Ok(())
    })
    .await
}

/// Spawns a proc; returns its pid and, if the scheduler placed it at once,
/// its worker. Awaitable; the pid is chosen before the transaction so a retry
/// cannot spawn twice.
pub async fn spawn(store: &Store, realm: &str, d: Descriptor) -> Result<(Pid, Option<WorkerId>)> {
    spawn_fenced(store, realm, d, None).await
}

/// [`spawn`], refused with [`Error::StaleEpoch`] — and nothing spawned — if
/// `fence`'s directory has seen a newer epoch (checked in the spawn's own
/// transaction).
pub async fn spawn_fenced(
    store: &Store,
    realm: &str,
    d: Descriptor,
    fence: Option<crate::names::Fence>,
) -> Result<(Pid, Option<WorkerId>)> {
    // `spawn_tx` validates the descriptor; a bad one rolls back, writing nothing.
    let p = partition(store, realm)?;
    let pid = d.pid.clone().unwrap_or_else(generate_pid);
    let (r, pid2) = (realm.to_string(), pid.clone());
    let now = tabos_store::now_us();
    let worker = store
        .run(p, move |tx| {
            crate::names::check_fence_if_tx(tx, &r, fence.as_ref(), now)?;
            spawn_tx(tx, &r, &pid2, &d, now)
        })
        .await?;
    Ok((pid, worker))
}

/// σOS `SpawnBurst`: many procs in one transaction, all or none.
pub async fn spawn_burst(
    store: &Store,
    realm: &str,
    ds: Vec<Descriptor>,
) -> Result<Vec<(Pid, Option<WorkerId>)>> {
    if ds.len() > BURST_PROCS_MAX {
        return Err(Error::Invalid(format!(
            "a burst of {} procs exceeds {BURST_PROCS_MAX}",
            ds.len()
        )));
    }
    // `spawn_tx` validates each descriptor; one bad one rolls the burst back.
    let p = partition(store, realm)?;
    let with_pids: Vec<(Pid, Descriptor)> = ds
        .into_iter()
        .map(|d| (d.pid.clone().unwrap_or_else(generate_pid), d))
        .collect();
    let r = realm.to_string();
    let now = tabos_store::now_us();
    store
        .run(p, move |tx| {
            with_pids
                .iter()
                .map(|(pid, d)| Ok((pid.clone(), spawn_tx(tx, &r, pid, d, now)?)))
                .collect::<Result<Vec<_>>>()
        })
        .await
}

/// Runs one of this module's procedures for `realm` and awaits it.
async fn call<T: Send + 'static>(
    store: &Store,
    realm: &str,
    f: impl FnMut(&mut dyn Tx, &str, i64) -> Result<T> + Send + 'static,
) -> Result<T> {
    let p = partition(store, realm)?;
    let r = realm.to_string();
    let now = tabos_store::now_us();
    let mut f = f;
    // Charged to the realm: its turn, its share of the partition's queue.
    store
        .for_realm(realm)
        .run(p, move |tx| f(tx, &r, now))
        .await
}

pub async fn claim(
    store: &Store,
    realm: &str,
    worker: &WorkerId,
    max: i64,
    admission: Admission,
) -> Result<Claimed> {
    let w = worker.clone();
    call(store, realm, move |tx, r, now| {
        claim_tx(tx, r, &w, max, admission, now)
    })
    .await
}

/// What a procd records of an ended proc beside its end, in the same
/// transaction ([`exited_and_claim`]): what it used, whether its
/// credentials go with it (a native proc's), and whether it ran to its
/// end — exited or was killed — so that an eviction requested meanwhile
/// decides its state ([`ran_to_end`]) in that transaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub cpu_us: Option<i64>,
    pub peak_mem_bytes: Option<i64>,
    pub revoke: bool,
    pub ran: bool,
}

/// The end recorded for a proc that ran to its end as its worker saw it
/// (`state`, `error`: exited, or failed for memory): `evicted`, with no
/// error, when an eviction had been requested — its kill was the eviction.
pub fn ran_to_end(
    state: State,
    error: Option<String>,
    evict_requested: bool,
) -> (State, Option<String>) {
    if evict_requested {
        (State::Evicted, None)
    } else {
        (state, error)
    }
}

/// What [`exited_and_claim`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ended {
    /// What the worker claimed to run next.
    pub claimed: Claimed,
    /// The credentials revoked with the end.
    pub revoked: Vec<crate::auth::CredentialId>,
    /// The state recorded; `None` where this copy's end was not the
    /// proc's (the worker no longer held it, or it had ended).
    pub state: Option<State>,
}

/// A procd's proc ended: records it ([`exited_tx`]) with what it `spent`
/// (its usage, its credentials revoked — whoever holds it now: those are
/// this copy's) and, in the same transaction, claims what the worker may
/// run next ([`claim_tx`]) — so a core freed by an exit is refilled without
/// another round trip, and an end costs one commit. (Its output is in
/// [`crate::logs`] already: a procd appends all of it first.)
#[allow(clippy::too_many_arguments)]
pub async fn exited_and_claim(
    store: &Store,
    realm: &str,
    pid: &Pid,
    state: State,
    status: Option<i64>,
    error: Option<String>,
    spent: Spent,
    worker: &WorkerId,
    max: i64,
    admission: Admission,
) -> Result<Ended> {
    let (pid, w) = (pid.clone(), worker.clone());
    call(store, realm, move |tx, r, now| {
        let revoked = if spent.revoke {
            crate::auth::revoke_pid_tx(tx, r, &pid, now)?
        } else {
            Vec::new()
        };
        if spent.cpu_us.is_some() || spent.peak_mem_bytes.is_some() {
            record_usage_tx(tx, r, &pid, spent.cpu_us, spent.peak_mem_bytes)?;
        }
        // A proc this worker no longer holds, or that has ended — failed or
        // placed again when the worker was declared lost — keeps what was
        // recorded: this copy's end is not the proc's.
        let info = get_tx(tx, r, pid.as_str())?;
        let recorded = if info.worker.as_ref() == Some(&w) && !info.state.is_terminal() {
            let (state, error) =
                ran_to_end(state, error.clone(), spent.ran && info.evict_requested);
            exited_tx(tx, r, &pid, state, status, error.as_deref(), now)?;
            Some(state)
        } else {
            None
        };
        claim_tx(tx, r, &w, max, admission, now).map(|claimed| Ended {
            claimed,
            revoked,
            state: recorded,
        })
    })
    .await
}

/// Procedure body: proc `pid`'s logs hold `delta` more bytes (less, when
/// negative): [`crate::logs`]'s, which owns what they hold. Counted
/// against the realm's storage (migration 030's trigger).
pub fn add_log_bytes_tx(tx: &mut dyn Tx, realm: &str, pid: &str, delta: i64) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    tx.execute(
        "UPDATE proc SET log_bytes = log_bytes + $4 WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![p, realm, pid, delta],
    )?;
    Ok(())
}

pub async fn steal(
    store: &Store,
    realm: &str,
    thief: &WorkerId,
    admission: Admission,
    steal_after_us: i64,
) -> Result<Stolen> {
    let w = thief.clone();
    call(store, realm, move |tx, r, now| {
        steal_tx(tx, r, &w, admission, steal_after_us, now)
    })
    .await
}

/// [`started_tx`]: whether an eviction was requested before it started.
pub async fn started(store: &Store, realm: &str, pid: &Pid) -> Result<bool> {
    let pid = pid.clone();
    call(store, realm, move |tx, r, now| started_tx(tx, r, &pid, now)).await
}

pub async fn exited(
    store: &Store,
    realm: &str,
    pid: &Pid,
    state: State,
    status: Option<i64>,
    error: Option<String>,
) -> Result<()> {
    let pid = pid.clone();
    call(store, realm, move |tx, r, now| {
        exited_tx(tx, r, &pid, state, status, error.as_deref(), now).map(|_| ())
    })
    .await
}

pub async fn evict(store: &Store, realm: &str, pid: &Pid) -> Result<()> {
    let pid = pid.clone();
    call(store, realm, move |tx, r, now| evict_tx(tx, r, &pid, now)).await
}

/// Most procs one prune removes.
pub const PRUNE_MAX: usize = 10_000;

/// Procedure body: forgets ended procs of `realm` — their `proc` rows,
/// their events and their revoked credentials — so that the tables keep
/// what runs and what is still of interest, and a pid can be used again.
/// With `pids`, exactly those (each must exist, NotFound, and have ended,
/// FailedPrecondition otherwise; nothing is removed unless all can be);
/// without, every proc that ended before `ended_before_us` (every ended one
/// when `None`), at most [`PRUNE_MAX`]. Returns the pids removed.
pub fn prune_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pids: &[Pid],
    ended_before_us: Option<i64>,
) -> Result<Vec<Pid>> {
    prune_at_most_tx(tx, realm, pids, ended_before_us, PRUNE_MAX)
}

/// [`prune_tx`], choosing at most `limit` (≤ [`PRUNE_MAX`]) ended procs
/// when `pids` is empty: what the retention reaper removes in one batch.
pub fn prune_at_most_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pids: &[Pid],
    ended_before_us: Option<i64>,
    limit: usize,
) -> Result<Vec<Pid>> {
    debug_assert!(limit <= PRUNE_MAX, "a prune's batch is bounded");
    let p = i64::from(tx.p_key().0);
    let chosen: Vec<Pid> = if pids.is_empty() {
        let rows = tx.query(
            "SELECT pid FROM proc WHERE p_key = $1 AND realm = $2 \
             AND state IN ('exited', 'evicted', 'failed') \
             AND (CAST($3 AS BIGINT) IS NULL OR coalesce(exit_us, spawn_us) < $3) \
             ORDER BY seq LIMIT $4",
            params![p, realm, ended_before_us, limit.min(PRUNE_MAX) as i64],
        )?;
        rows.iter()
            .map(|r| r.get::<String>(0).map(Pid))
            .collect::<std::result::Result<_, _>>()?
    } else {
        if pids.len() > PRUNE_MAX {
            return Err(Error::Invalid(format!(
                "a prune removes at most {PRUNE_MAX} procs"
            )));
        }
        for pid in pids {
            let info = get_tx(tx, realm, pid.as_str())?;
            if !info.state.is_terminal() {
                return Err(Error::Precondition(format!(
                    "proc {pid} is {}: evict it and wait for it first",
                    info.state.as_str()
                )));
            }
        }
        let mut v = pids.to_vec();
        v.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        v.dedup_by(|a, b| a.as_str() == b.as_str());
        v
    };
    for pid in &chosen {
        tx.execute(
            "DELETE FROM proc_event WHERE p_key = $1 AND realm = $2 AND pid = $3",
            params![p, realm, pid.as_str()],
        )?;
        let n = tx.execute(
            "DELETE FROM proc WHERE p_key = $1 AND realm = $2 AND pid = $3 \
             AND state IN ('exited', 'evicted', 'failed')",
            params![p, realm, pid.as_str()],
        )?;
        debug_assert_eq!(n, 1, "an ended proc chosen is deleted");
        crate::auth::delete_revoked_of_pid_tx(tx, realm, pid)?;
    }
    Ok(chosen)
}

/// Procedure body: removes at most `limit` of `realm`'s provenance events
/// recorded before `before_us`, oldest first, whatever their proc's state
/// (the retention reaper's: a long-running proc's old events go too).
/// Returns how many.
pub fn expire_events_tx(
    tx: &mut dyn Tx,
    realm: &str,
    before_us: i64,
    limit: usize,
) -> Result<usize> {
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "DELETE FROM proc_event WHERE (p_key, realm, pid, seq) IN \
         (SELECT p_key, realm, pid, seq FROM proc_event \
          WHERE p_key = $1 AND realm = $2 AND at_us < $3 ORDER BY at_us LIMIT $4)",
        params![p, realm, before_us, limit as i64],
    )?;
    debug_assert!(n as usize <= limit, "at most the batch is removed");
    Ok(n as usize)
}

/// Forgets ended procs of `realm` ([`prune_tx`]).
pub async fn prune(
    store: &Store,
    realm: &str,
    pids: Vec<Pid>,
    ended_before_us: Option<i64>,
) -> Result<Vec<Pid>> {
    call(store, realm, move |tx, r, _| {
        prune_tx(tx, r, &pids, ended_before_us)
    })
    .await
}

/// Longest detail of a recorded provenance event.
pub const EVENT_DETAIL_BYTES_MAX: usize = 4_096;

/// Appends provenance event `event` (e.g. `fs_read`) with `detail` for
/// proc `pid`, which must exist in `realm` (NotFound otherwise): how the
/// services record what a proc did on its behalf — which file it read or
/// wrote — beside its lifecycle events.
pub async fn record(
    store: &Store,
    realm: &str,
    pid: &Pid,
    event: &str,
    detail: &str,
) -> Result<()> {
    if detail.len() > EVENT_DETAIL_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "an event detail is at most {EVENT_DETAIL_BYTES_MAX} bytes"
        )));
    }
    let (pid, event, detail) = (pid.clone(), event.to_string(), detail.to_string());
    call(store, realm, move |tx, r, now| {
        get_tx(tx, r, pid.as_str())?;
        event_tx(tx, r, pid.as_str(), &event, Some(&detail), now)
    })
    .await
}

/// Procedure body: NotFound unless proc `pid` exists in `realm`.
pub fn exists_tx(tx: &mut dyn Tx, realm: &str, pid: &Pid) -> Result<()> {
    let found = tx.query_opt(
        "SELECT 1 FROM proc WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![crate::p_key(tx), realm, pid.as_str()],
    )?;
    match found {
        Some(_) => Ok(()),
        None => Err(Error::NotFound(format!(
            "no proc {pid:?} in realm {realm:?}"
        ))),
    }
}

/// Procedure body: records `event` with `detail` for proc `pid` of `realm`
/// in the caller's transaction, which has already checked the proc with
/// [`exists_tx`] (NotFound rolls back the operation with it): how an
/// operation done for a proc (a file read or write) leaves its provenance
/// in its own commit. A detail past [`EVENT_DETAIL_BYTES_MAX`] is cut there.
pub fn note_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    event: &str,
    detail: &str,
    now_us: i64,
) -> Result<()> {
    let detail = crate::utf8_prefix(detail, EVENT_DETAIL_BYTES_MAX);
    event_tx(tx, realm, pid.as_str(), event, Some(detail), now_us)
}

/// What an actor's events take: `proc_event` is this module's.
impl Actor {
    /// Procedure body: NotFound for a proc that is not in `realm` (a
    /// client always is).
    pub fn check_tx(&self, tx: &mut dyn Tx, realm: &str) -> Result<()> {
        match self {
            Actor::Proc(pid) => exists_tx(tx, realm, pid),
            Actor::Client(_) => Ok(()),
        }
    }

    /// Procedure body: whether `realm` records this actor's events — a
    /// proc's always, a client's as the realm says.
    pub fn recorded_tx(&self, tx: &mut dyn Tx, realm: &str) -> Result<bool> {
        Ok(match self {
            Actor::Proc(_) => true,
            Actor::Client(_) => {
                crate::realms::provenance_tx(tx, realm)? == crate::realms::Provenance::All
            }
        })
    }

    /// Procedure body: [`note_tx`] for this actor, if its realm records it
    /// ([`recorded_tx`](Self::recorded_tx)).
    pub fn note_tx(
        &self,
        tx: &mut dyn Tx,
        realm: &str,
        event: &str,
        detail: &str,
        now_us: i64,
    ) -> Result<()> {
        match self {
            Actor::Proc(pid) => note_tx(tx, realm, pid, event, detail, now_us),
            Actor::Client(who) => {
                if self.recorded_tx(tx, realm)? {
                    let detail = crate::utf8_prefix(detail, EVENT_DETAIL_BYTES_MAX);
                    event_tx(tx, realm, who, event, Some(detail), now_us)?;
                }
                Ok(())
            }
        }
    }
}

/// [`record`] for `who` (role member), who must be able to act for `pid`
/// (its own proc's credential, or one that is not a proc's): what a door
/// records when a request says it is done for a proc.
pub async fn record_for(
    store: &Store,
    who: &Caller,
    pid: &Pid,
    event: &str,
    detail: &str,
) -> Result<()> {
    who.may(Role::Member, USE)?;
    who.may_act_for(pid)?;
    record(store, who.realm(), pid, event, detail).await
}

/// [`check_exists`] for `who` (role reader), who must be able to act for
/// `pid`: a door checks a request's proc before it does anything for it.
pub async fn check_exists_for(store: &Store, who: &Caller, pid: &Pid) -> Result<()> {
    who.may(Role::Reader, USE)?;
    who.may_act_for(pid)?;
    check_exists(store, who.realm(), pid).await
}

/// Fails with NotFound unless proc `pid` exists in `realm`.
pub async fn check_exists(store: &Store, realm: &str, pid: &Pid) -> Result<()> {
    status(store, realm, pid).await.map(|_| ())
}

/// The proc's current row, read on a read connection (never queued
/// behind the partition's writes): awaitable, and sees every committed
/// transition.
pub async fn status(store: &Store, realm: &str, pid: &Pid) -> Result<ProcInfo> {
    let (r, pid) = (realm.to_string(), pid.clone());
    crate::read(store, realm, move |tx| get_tx(tx, &r, pid.as_str())).await
}

/// The proc's current row, read on the (blocking) read path.
pub fn get(store: &Store, realm: &str, pid: &Pid) -> Result<ProcInfo> {
    validate_realm(realm)?;
    let rows = store.query(
        concat!(
            "SELECT ",
            proc_columns!(),
            " FROM proc WHERE realm = $1 AND pid = $2"
        ),
        params![realm, pid.as_str()],
    )?;
    let row = rows
        .rows
        .first()
        .ok_or_else(|| Error::NotFound(format!("no proc {pid} in realm {realm:?}")))?;
    proc_from_row(row)
}

/// Waits until `done` holds for the proc, woken by the change feed: it
/// subscribes first, then reads (inside a procedure, so the read is async and
/// sees every committed transition), then sleeps until the next transition.
pub async fn wait_until(
    store: &Store,
    realm: &str,
    pid: &Pid,
    done: impl Fn(&ProcInfo) -> bool,
) -> Result<ProcInfo> {
    let channel = proc_channel(realm, pid.as_str());
    let mut sub = store.subscribe(&channel);
    loop {
        let info = status(store, realm, pid).await?;
        if done(&info) {
            return Ok(info);
        }
        match sub.recv().await {
            Ok(_) => {}
            // Cut off (lagged, or the listener reconnected): transitions may
            // have been missed, so resubscribe and re-read.
            Err(tabos_store::Error::Lagged(_)) => sub = store.subscribe(&channel),
            Err(e) => return Err(e.into()),
        }
    }
}

/// σOS `WaitStart`: until the proc runs (or has already finished).
pub async fn wait_start(store: &Store, realm: &str, pid: &Pid) -> Result<ProcInfo> {
    wait_until(store, realm, pid, |i| {
        i.state == State::Running || i.state.is_terminal()
    })
    .await
}

/// σOS `WaitExit`: until the proc has finished; returns its row with the
/// exit status.
pub async fn wait_exit(store: &Store, realm: &str, pid: &Pid) -> Result<ProcInfo> {
    wait_until(store, realm, pid, |i| i.state.is_terminal()).await
}

/// σOS `WaitEvict`: until the proc has been asked to leave (or has finished).
pub async fn wait_evict(store: &Store, realm: &str, pid: &Pid) -> Result<ProcInfo> {
    wait_until(store, realm, pid, |i| {
        i.evict_requested || i.state.is_terminal()
    })
    .await
}

// ---- operations for a caller: each checks it, then acts in its realm ----

/// What the procs' operations refuse to a scoped credential.
const USE: &str = "use procs";

/// Whether `who` may spawn procs described by `ds`: role member, unscoped,
/// and each proc acting for the caller's own user. What [`spawn_for`] and
/// [`spawn_burst_for`] ask first — and a door asks before any work on the
/// caller's behalf (compiling its wasm modules).
pub fn may_spawn(who: &Caller, ds: &[Descriptor]) -> Result<()> {
    who.may(Role::Member, USE)?;
    match ds.iter().find(|d| d.user != who.user()) {
        Some(d) => Err(Error::Denied(format!(
            "a proc spawned as {} acts for its user, not {:?}",
            who.user(),
            d.user
        ))),
        None => Ok(()),
    }
}

/// [`spawn_fenced`] for `who` ([`may_spawn`]): the procs it spawns act for
/// the caller's user.
pub async fn spawn_for(
    store: &Store,
    who: &Caller,
    d: Descriptor,
    fence: Option<crate::names::Fence>,
) -> Result<(Pid, Option<WorkerId>)> {
    may_spawn(who, std::slice::from_ref(&d))?;
    spawn_fenced(store, who.realm(), d, fence).await
}

/// [`spawn_burst`] for `who` ([`may_spawn`]).
pub async fn spawn_burst_for(
    store: &Store,
    who: &Caller,
    ds: Vec<Descriptor>,
) -> Result<Vec<(Pid, Option<WorkerId>)>> {
    may_spawn(who, &ds)?;
    spawn_burst(store, who.realm(), ds).await
}

/// [`status`] for `who` (role reader).
pub async fn status_for(store: &Store, who: &Caller, pid: &Pid) -> Result<ProcInfo> {
    who.may(Role::Reader, USE)?;
    status(store, who.realm(), pid).await
}

/// [`wait_start`] for `who` (role reader).
pub async fn wait_start_for(store: &Store, who: &Caller, pid: &Pid) -> Result<ProcInfo> {
    who.may(Role::Reader, USE)?;
    wait_start(store, who.realm(), pid).await
}

/// [`wait_exit`] for `who` (role reader).
pub async fn wait_exit_for(store: &Store, who: &Caller, pid: &Pid) -> Result<ProcInfo> {
    who.may(Role::Reader, USE)?;
    wait_exit(store, who.realm(), pid).await
}

/// [`wait_evict`] for `who` (role reader).
pub async fn wait_evict_for(store: &Store, who: &Caller, pid: &Pid) -> Result<ProcInfo> {
    who.may(Role::Reader, USE)?;
    wait_evict(store, who.realm(), pid).await
}

/// [`started`] for `who` (role member), who must be able to act for `pid`:
/// a proc says it started.
pub async fn started_for(store: &Store, who: &Caller, pid: &Pid) -> Result<()> {
    who.may(Role::Member, USE)?;
    who.may_act_for(pid)?;
    started(store, who.realm(), pid).await.map(|_| ())
}

/// [`exited`] for `who` (role member), who must be able to act for `pid`:
/// a proc says it exited with `status`.
pub async fn exited_for(store: &Store, who: &Caller, pid: &Pid, status: i64) -> Result<()> {
    who.may(Role::Member, USE)?;
    who.may_act_for(pid)?;
    exited(store, who.realm(), pid, State::Exited, Some(status), None).await
}

/// [`evict`] for `who` (role member).
pub async fn evict_for(store: &Store, who: &Caller, pid: &Pid) -> Result<()> {
    who.may(Role::Member, USE)?;
    evict(store, who.realm(), pid).await
}

/// [`prune`] for `who` (role member).
pub async fn prune_for(
    store: &Store,
    who: &Caller,
    pids: Vec<Pid>,
    ended_before_us: Option<i64>,
) -> Result<Vec<Pid>> {
    who.may(Role::Member, USE)?;
    prune(store, who.realm(), pids, ended_before_us).await
}

/// Procedure body: deletes `realm`'s procs, their events and its workers
/// (the realm's removal, [`crate::teardown`]); refused while a proc is
/// live — spawned, claimed or running — since a removal must not strand a
/// running process. Returns the rows deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    let live: i64 = tx.query_scalar(
        "SELECT count(*) FROM proc WHERE p_key = $1 AND realm = $2 \
         AND state IN ('spawned', 'claimed', 'running')",
        params![crate::p_key(tx), realm],
    )?;
    if live > 0 {
        return Err(Error::Precondition(format!(
            "realm {realm} has {live} live procs: evict them (or wait for them) first"
        )));
    }
    crate::delete_realm_rows(tx, realm, &["proc_event", "proc", "worker"])
}

#[cfg(test)]
mod scope_tests {
    use super::Descriptor;
    use crate::auth::Scope;

    #[test]
    fn a_procs_credential_is_not_scoped_to_metrics() {
        let mut d = Descriptor::native("/bin/true");
        d.scope = Some(Scope::parse("send:inbox").unwrap());
        d.validate().unwrap();
        d.scope = Some(Scope::parse("metrics").unwrap());
        let e = d.validate().unwrap_err();
        assert!(e.to_string().contains("cannot be scoped to metrics"), "{e}");
    }
}
