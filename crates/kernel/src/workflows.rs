//! Durable workflows (issue 22): DBOS's task graphs kept in the database
//! (DBOS paper section 3.2), as DBOS Transact offers them.
//!
//! A workflow is a function of the client's code (the Rust client's or the
//! Python SDK's), run by an *executor* — a process that registered the
//! functions it can run and the application version it is — whose every
//! step is recorded here before the workflow goes on. Tables (migration
//! 025, all on the realm's partition): `workflow`, `workflow_step`,
//! `workflow_message`, `workflow_event`, `workflow_executor`,
//! `workflow_queue`, `workflow_schedule`.
//!
//! * **Steps run once.** A step is numbered by its order in the function,
//!   so a re-run of the function after a crash meets the same numbers and
//!   gets each completed step's recorded outcome instead of running it
//!   again. A stored-procedure step runs in the same transaction as its
//!   record ([`step_procedure_tx`]): exactly once. A client function's
//!   step is recorded when it returns ([`step_begin_tx`], [`step_end_tx`]);
//!   it is given an idempotency key (`<workflow>/<step>`) for effects
//!   outside tabos, since an executor that dies between the effect and the
//!   record runs it again. Sends, receives, events and sleeps are steps too,
//!   each in one transaction with its record.
//! * **Ownership.** A pending workflow is run by one executor at a time:
//!   every step names its executor, and is refused unless the workflow is
//!   still pending and still that executor's ([`Error::Precondition`]). An
//!   executor holds a lease it renews; a pending workflow whose executor's
//!   lease lapsed (or which has none: resumed, forked) is an *orphan*, and
//!   any live executor of its application version that knows its function
//!   takes it over ([`recover_tx`], [`dequeue_tx`]) and runs the function
//!   again from the start, skipping what was recorded.
//! * **Versions.** An executor takes only workflows of its own version;
//!   the operator moves workflows to another one ([`retarget_tx`],
//!   [`resume_tx`] with a version), so a deploy strands nothing.
//! * **Queues.** A workflow started in a queue waits (`enqueued`) until an
//!   executor dequeues it within the queue's limits — concurrency over the
//!   cluster and per node, a rate over a period — by priority, then age.
//!   Limits are rows, changed while the queue runs ([`set_queue_tx`]). A
//!   workflow no live executor can run does not hold up the ones behind it.
//!
//! Channels (payloads are informative): [`workflow_channel`] (a workflow's
//! status, messages and events), [`queue_channel`] (a queue's enqueues,
//! finishes and limits), [`orphans_channel`] (workflows up for recovery).

use std::fmt;

use tabos_store::{params, Row, Tx, Value};

use crate::auth::{Caller, Role};
use crate::ids::{validate_name, ExecutorId, WorkflowId};
use crate::{p_key, validate_realm, Error, Result};

/// The realm `who` acts in, once it may use workflows with role `need`
/// (every operation of this module that acts for someone asks this first).
fn acting(who: &Caller, need: Role) -> Result<&str> {
    who.may(need, "use workflows")?;
    Ok(who.realm())
}

/// [`acting`] as executor `executor` (role member): an executor that is a
/// proc ([`ExecutorId::of_proc`]) is that proc's alone — no client and no
/// other proc registers, renews, leaves, claims or steps as it.
fn acting_for<'a>(who: &'a Caller, executor: &ExecutorId) -> Result<&'a str> {
    let realm = acting(who, Role::Member)?;
    if let Some(pid) = executor.proc() {
        if who.pid().map(|p| p.as_str()) != Some(pid) {
            return Err(Error::Denied(format!(
                "executor {executor} is proc {pid}'s own"
            )));
        }
    }
    Ok(realm)
}

/// Longest workflow id, function name, version, queue, topic or event key.
pub const ID_BYTES_MAX: usize = crate::ids::NAME_BYTES_MAX;
/// Largest input, output, step output, message or event value.
pub const VALUE_BYTES_MAX: usize = 1 << 20;
/// Longest recorded error (longer ones are cut).
pub const ERROR_BYTES_MAX: usize = 4 * 1024;
/// Most functions one executor registers.
pub const FUNCTIONS_MAX: usize = 256;
/// An executor's lease, bounds.
pub const LEASE_MIN_MS: u64 = 200;
pub const LEASE_MAX_MS: u64 = 600_000;
/// Most workflows one list returns.
pub const LIST_MAX: usize = 10_000;
/// Most workflows one dequeue or recovery claims.
pub const CLAIM_MAX: usize = 256;
/// About the most bytes of inputs one claim carries (it always carries
/// one workflow): its answer must fit a message, or the workflows it
/// claimed would be held by an executor that never heard of them.
pub const CLAIM_BYTES_MAX: usize = 4 << 20;
/// Highest step number.
pub const STEP_MAX: i64 = 10_000_000;
/// Most steps one show returns (the rest are asked for after the last).
pub const SHOW_STEPS_MAX: usize = 1_000;
/// About the most bytes of steps' inputs and outputs one show returns.
pub const SHOW_BYTES_MAX: usize = 4 << 20;
/// Longest durable sleep.
pub const SLEEP_MAX_US: i64 = 366 * 24 * 3_600 * 1_000_000;

fn check_value(what: &str, v: &[u8]) -> Result<()> {
    if v.len() > VALUE_BYTES_MAX {
        return Err(Error::TooLarge(format!(
            "{what} of {} bytes exceeds {VALUE_BYTES_MAX}",
            v.len()
        )));
    }
    Ok(())
}

fn cut_error(e: &str) -> String {
    if e.len() <= ERROR_BYTES_MAX {
        return e.to_string();
    }
    format!("{}…", crate::utf8_prefix(e, ERROR_BYTES_MAX))
}

/// A workflow's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Enqueued,
    Pending,
    Success,
    Error,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Enqueued => "enqueued",
            Status::Pending => "pending",
            Status::Success => "success",
            Status::Error => "error",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Result<Status> {
        Ok(match s {
            "enqueued" => Status::Enqueued,
            "pending" => Status::Pending,
            "success" => Status::Success,
            "error" => Status::Error,
            "cancelled" => Status::Cancelled,
            _ => {
                return Err(Error::Invalid(format!(
                    "unknown workflow status {s:?}: enqueued, pending, success, error or \
                     cancelled"
                )))
            }
        })
    }

    /// Finished: it will not change again unless resumed.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Success | Status::Error | Status::Cancelled)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Function,
    Procedure,
    Proc,
    Sleep,
    Send,
    Recv,
    SetEvent,
    GetEvent,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Function => "function",
            StepKind::Procedure => "procedure",
            StepKind::Proc => "proc",
            StepKind::Sleep => "sleep",
            StepKind::Send => "send",
            StepKind::Recv => "recv",
            StepKind::SetEvent => "set_event",
            StepKind::GetEvent => "get_event",
        }
    }

    pub fn parse(s: &str) -> Result<StepKind> {
        Ok(match s {
            "function" => StepKind::Function,
            "procedure" => StepKind::Procedure,
            "proc" => StepKind::Proc,
            "sleep" => StepKind::Sleep,
            "send" => StepKind::Send,
            "recv" => StepKind::Recv,
            "set_event" => StepKind::SetEvent,
            "get_event" => StepKind::GetEvent,
            _ => return Err(Error::Invalid(format!("unknown step kind {s:?}"))),
        })
    }
}

/// How a step or a workflow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success(Vec<u8>),
    Error(String),
}

/// A workflow's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub id: String,
    pub name: String,
    pub app_version: String,
    pub status: Status,
    pub queue: Option<String>,
    pub priority: i64,
    pub input: Vec<u8>,
    pub output: Option<Vec<u8>>,
    pub error: Option<String>,
    pub executor: Option<String>,
    pub node_id: Option<String>,
    pub attempts: i64,
    pub user: String,
    pub forked_from: Option<String>,
    pub created_us: i64,
    pub started_us: Option<i64>,
    pub updated_us: i64,
    pub ended_us: Option<i64>,
}

const WORKFLOW_COLUMNS: &str = "workflow_id, name, app_version, status, queue, priority, input, \
     output, error, executor, node_id, attempts, user_name, forked_from, created_us, started_us, \
     updated_us, ended_us";

fn workflow_of(r: &Row) -> Result<Workflow> {
    Ok(Workflow {
        id: r.get(0)?,
        name: r.get(1)?,
        app_version: r.get(2)?,
        status: Status::parse(&r.get::<String>(3)?)?,
        queue: r.get(4)?,
        priority: r.get(5)?,
        // NULL in a list (see `list_tx`).
        input: r.get::<Option<Vec<u8>>>(6)?.unwrap_or_default(),
        output: r.get(7)?,
        error: r.get(8)?,
        executor: r.get(9)?,
        node_id: r.get(10)?,
        attempts: r.get(11)?,
        user: r.get(12)?,
        forked_from: r.get(13)?,
        created_us: r.get(14)?,
        started_us: r.get(15)?,
        updated_us: r.get(16)?,
        ended_us: r.get(17)?,
    })
}

/// A step's record.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub step: i64,
    pub name: String,
    pub kind: StepKind,
    /// What it was given: a procedure's arguments, a proc's command line,
    /// a message sent, an event's value, a receive's topic, a sleep's
    /// length (µs); empty for a client function (its input is what its
    /// closure holds).
    pub input: Option<Vec<u8>>,
    /// `running`, `success` or `error`.
    pub status: String,
    pub output: Option<Vec<u8>>,
    pub error: Option<String>,
    pub attempts: i64,
    pub started_us: i64,
    pub ended_us: Option<i64>,
}

/// Channel of workflow `id`'s changes: its status (`status <s>`), a message
/// for it (`message <topic>`), an event it set (`event <key>`).
pub fn workflow_channel(realm: &str, id: &str) -> String {
    format!("workflow/{realm}/{id}")
}

/// Channel of `realm`'s workflows that are enqueued or change status —
/// finish, are cancelled, resumed or forked (payload `<id> <status>`):
/// what a dashboard follows. A start run at once and a claim are not
/// announced (see [`start_tx`]).
pub fn workflows_channel(realm: &str) -> String {
    format!("workflows/{realm}")
}

/// Channel of queue `queue`: a workflow enqueued or finished, its limits
/// changed.
pub fn queue_channel(realm: &str, queue: &str) -> String {
    format!("workflows/{realm}/queue/{queue}")
}

/// Channel told when workflows of `realm` are up for recovery (resumed,
/// forked, retargeted, or their executor left).
pub fn orphans_channel(realm: &str) -> String {
    format!("workflows/{realm}/orphans")
}

// ---------------------------------------------------------------- executors

/// What an executor registers.
#[derive(Debug, Clone)]
pub struct ExecutorSpec {
    pub app_version: String,
    /// The workflow functions it can run.
    pub functions: Vec<String>,
    /// The node it reaches (the one serving its registration).
    pub node_id: String,
    pub lease_ms: u64,
}

fn check_lease(ms: u64) -> Result<i64> {
    if !(LEASE_MIN_MS..=LEASE_MAX_MS).contains(&ms) {
        return Err(Error::Invalid(format!(
            "an executor's lease is {LEASE_MIN_MS}..={LEASE_MAX_MS} ms, not {ms}"
        )));
    }
    Ok(ms as i64 * 1_000)
}

/// A new executor id: `x` and 16 random hex digits.
pub fn new_executor_id() -> Result<ExecutorId> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|e| Error::Invalid(format!("no randomness: {e}")))?;
    ExecutorId::new(format!(
        "x{}",
        raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// Procedure body: registers executor `id` of `realm`. An id registered
/// already is a restarted executor (DBOS's executor id): its row is
/// replaced, and the workflows it was running are up for recovery at once
/// rather than after its old lease.
pub fn register_executor_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &ExecutorId,
    spec: &ExecutorSpec,
    now: i64,
) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    crate::realms::metered(tx, realm, |tx| {
        validate_realm(realm)?;
        validate_name("application version", &spec.app_version)?;
        if spec.functions.len() > FUNCTIONS_MAX {
            return Err(Error::Invalid(format!(
                "an executor registers at most {FUNCTIONS_MAX} functions"
            )));
        }
        for f in &spec.functions {
            validate_name("workflow function", f)?;
        }
        if id.proc().is_some() {
            return Err(Error::Invalid(format!(
                "executor ids beginning {:?} are procs' own",
                ExecutorId::PROC_PREFIX
            )));
        }
        let lease = check_lease(spec.lease_ms)?;
        let k = p_key(tx);
        let restarted = tx.execute(
            "DELETE FROM workflow_executor WHERE p_key = $1 AND realm = $2 AND executor = $3",
            params![k, realm, id],
        )? > 0;
        if restarted {
            tx.execute(
                "UPDATE workflow SET executor = NULL, updated_us = $4 \
                 WHERE p_key = $1 AND realm = $2 AND executor = $3 AND status = 'pending'",
                params![k, realm, id, now],
            )?;
        }
        tx.execute(
            "INSERT INTO workflow_executor (p_key, realm, executor, app_version, functions, node_id, \
             lease_until_us, started_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params![
                k,
                realm,
                id,
                spec.app_version.as_str(),
                spec.functions.join(" "),
                spec.node_id.as_str(),
                now + lease,
                now
            ],
        )?;
        tx.notify(&orphans_channel(realm), "executor")?;
        Ok(())
    })
}

/// Procedure body: renews executor `id`'s lease. NotFound if it left.
pub fn renew_executor_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &ExecutorId,
    lease_ms: u64,
    now: i64,
) -> Result<()> {
    let realm = acting_for(who, id)?;
    let lease = check_lease(lease_ms)?;
    let k = p_key(tx);
    let n = tx.execute(
        "UPDATE workflow_executor SET lease_until_us = $4 \
         WHERE p_key = $1 AND realm = $2 AND executor = $3",
        params![k, realm, id, now + lease],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("executor {id} in realm {realm}")));
    }
    Ok(())
}

/// Procedure body: executor `id` leaves; its pending workflows are up for
/// recovery at once. Returns how many.
pub fn leave_executor_tx(tx: &mut dyn Tx, who: &Caller, id: &ExecutorId, now: i64) -> Result<u64> {
    let realm = acting_for(who, id)?;
    let k = p_key(tx);
    tx.execute(
        "DELETE FROM workflow_executor WHERE p_key = $1 AND realm = $2 AND executor = $3",
        params![k, realm, id],
    )?;
    let n = tx.execute(
        "UPDATE workflow SET executor = NULL, updated_us = $4 \
         WHERE p_key = $1 AND realm = $2 AND executor = $3 AND status = 'pending'",
        params![k, realm, id, now],
    )?;
    if n > 0 {
        tx.notify(&orphans_channel(realm), "left")?;
    }
    Ok(n)
}

/// A live executor's row.
struct Executor {
    app_version: String,
    functions: Vec<String>,
    node_id: String,
}

fn live_executor(tx: &mut dyn Tx, realm: &str, id: &str, now: i64) -> Result<Executor> {
    let k = p_key(tx);
    let row = tx
        .query_opt(
            "SELECT app_version, functions, node_id, lease_until_us FROM workflow_executor \
             WHERE p_key = $1 AND realm = $2 AND executor = $3",
            params![k, realm, id],
        )?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "executor {id} in realm {realm} (it left, or never registered)"
            ))
        })?;
    if row.get::<i64>(3)? < now {
        return Err(Error::Precondition(format!(
            "executor {id}'s lease lapsed: renew it before claiming workflows"
        )));
    }
    Ok(Executor {
        app_version: row.get(0)?,
        functions: row
            .get::<String>(1)?
            .split_whitespace()
            .map(String::from)
            .collect(),
        node_id: row.get(2)?,
    })
}

// ---------------------------------------------------------------- starting

/// What a start asks for.
#[derive(Debug, Clone)]
pub struct StartSpec {
    pub id: WorkflowId,
    pub name: String,
    pub app_version: String,
    pub input: Vec<u8>,
    /// Start in this queue (`enqueued`), else run at once by `executor`.
    pub queue: Option<String>,
    pub priority: i64,
    pub executor: Option<ExecutorId>,
}

/// What a start did.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    /// False: a workflow of that id existed, and is returned as it is.
    pub created: bool,
    pub workflow: Workflow,
}

/// Procedure body: starts workflow `spec.id`, or returns the one of that
/// id (a second start is the first's: idempotency by workflow id).
pub fn start_tx(tx: &mut dyn Tx, who: &Caller, spec: &StartSpec, now: i64) -> Result<Started> {
    let realm = match &spec.executor {
        Some(ex) => acting_for(who, ex)?,
        None => acting(who, Role::Member)?,
    };
    start_in(tx, realm, who.user(), spec, now)
}

/// [`start_tx`] in `realm` for `user` (a caller's, or a schedule's).
fn start_in(
    tx: &mut dyn Tx,
    realm: &str,
    user: &str,
    spec: &StartSpec,
    now: i64,
) -> Result<Started> {
    crate::realms::metered(tx, realm, |tx| {
        validate_realm(realm)?;
        validate_name("workflow function", &spec.name)?;
        validate_name("application version", &spec.app_version)?;
        check_value("a workflow's input", &spec.input)?;
        // Inserted first, the row of an id that exists left alone: reading a
        // missing row first would, on PostgreSQL, lock the index's gap and make
        // concurrent starts conflict.
        let k = p_key(tx);
        let inserted = match (&spec.queue, &spec.executor) {
            (Some(q), _) => {
                validate_name("queue", q)?;
                ensure_queue(tx, realm, q, now)?;
                tx.execute(
                    "INSERT INTO workflow (p_key, realm, workflow_id, name, app_version, status, queue, \
                     priority, input, user_name, created_us, updated_us) \
                     VALUES ($1, $2, $3, $4, $5, 'enqueued', $6, $7, $8, $9, $10, $10) \
                     ON CONFLICT (p_key, realm, workflow_id) DO NOTHING",
                    params![
                        k,
                        realm,
                        spec.id.as_str(),
                        spec.name.as_str(),
                        spec.app_version.as_str(),
                        q.as_str(),
                        spec.priority,
                        spec.input.as_slice(),
                        user,
                        now
                    ],
                )?
            }
            (None, Some(ex)) => {
                let e = live_executor(tx, realm, ex, now)?;
                if e.app_version != spec.app_version {
                    return Err(Error::Invalid(format!(
                        "executor {ex} runs version {}, not {}",
                        e.app_version, spec.app_version
                    )));
                }
                tx.execute(
                    "INSERT INTO workflow (p_key, realm, workflow_id, name, app_version, status, \
                     priority, input, executor, node_id, attempts, user_name, created_us, started_us, \
                     updated_us) \
                     VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, 1, $10, $11, $11, $11) \
                     ON CONFLICT (p_key, realm, workflow_id) DO NOTHING",
                    params![
                        k,
                        realm,
                        spec.id.as_str(),
                        spec.name.as_str(),
                        spec.app_version.as_str(),
                        spec.priority,
                        spec.input.as_slice(),
                        ex.as_str(),
                        e.node_id.as_str(),
                        user,
                        now
                    ],
                )?
            }
            (None, None) => {
                return Err(Error::Invalid(
                    "a workflow starts in a queue, or run by an executor".into(),
                ))
            }
        };
        let w = get_in(tx, realm, &spec.id)?
            .ok_or_else(|| Error::NotFound(format!("workflow {} just inserted", spec.id)))?;
        if inserted == 0 {
            return second_start(w, spec);
        }
        if let Some(q) = &spec.queue {
            tx.notify(&queue_channel(realm, q), &format!("enqueued {}", spec.id))?;
        }
        debug_assert!(matches!(w.status, Status::Enqueued | Status::Pending));
        // A start run at once is not announced: on PostgreSQL a transaction
        // that notifies commits alone (notifications are queued under one
        // lock), and a workflow's start, steps and end would all pay it. The
        // end is announced.
        if w.status == Status::Enqueued {
            tx.notify(&workflows_channel(realm), &format!("{} {}", w.id, w.status))?;
        }
        Ok(Started {
            created: true,
            workflow: w,
        })
    })
}

/// Procedure body: starts workflow `spec.id` run by a proc of its own,
/// spawned in this transaction as `pid` from `d` — a wasm module whose
/// function `spec.name` is the workflow (issue 41): the proc is the
/// workflow's executor ([`ExecutorId::of_proc`]), its steps the `tabos`
/// host calls `wf_*`, and its restarts (a restartable proc runs again
/// elsewhere when its node is lost) run the function again from the start,
/// skipping what was recorded. The proc's executor row never lapses, so no
/// other executor takes the workflow over; the proc's end, when it did not
/// finish the workflow, fails it ([`proc_ended_tx`]). The module is given
/// the function's name as its first argument. A second start of the id is
/// the first's, and spawns nothing.
pub fn start_in_proc_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    spec: &StartSpec,
    pid: &crate::ids::Pid,
    d: &crate::procs::Descriptor,
    now: i64,
) -> Result<Started> {
    let realm = acting(who, Role::Member)?;
    crate::procs::may_spawn(who, std::slice::from_ref(d))?;
    if spec.queue.is_some() || spec.executor.is_some() {
        return Err(Error::Invalid(
            "a workflow run by a proc of its own is in no queue and has no other executor".into(),
        ));
    }
    if d.kind != crate::procs::Kind::Wasm {
        return Err(Error::Invalid(
            "a workflow's proc is a wasm module (its steps are host calls)".into(),
        ));
    }
    validate_name("workflow function", &spec.name)?;
    if let Some(w) = get_in(tx, realm, &spec.id)? {
        return second_start(w, spec);
    }
    let ex = ExecutorId::of_proc(pid)?;
    let k = p_key(tx);
    tx.execute(
        "INSERT INTO workflow_executor (p_key, realm, executor, app_version, functions, node_id, \
         lease_until_us, started_us) VALUES ($1, $2, $3, $4, $5, '', $6, $7)",
        params![
            k,
            realm,
            &ex,
            spec.app_version.as_str(),
            spec.name.as_str(),
            PROC_LEASE_UNTIL,
            now
        ],
    )?;
    let run = StartSpec {
        executor: Some(ex),
        ..spec.clone()
    };
    let started = start_in(tx, realm, who.user(), &run, now)?;
    debug_assert!(started.created);
    let mut d = d.clone();
    d.args.insert(0, spec.name.clone());
    d.env.retain(|(k, _)| k != PROC_ENV);
    d.env.push((PROC_ENV.to_string(), spec.id.to_string()));
    crate::procs::spawn_tx(tx, realm, pid, &d, now)?;
    // Where it runs is its proc's business: the row names no node.
    tx.execute(
        "UPDATE workflow SET node_id = NULL WHERE p_key = $1 AND realm = $2 AND workflow_id = $3",
        params![k, realm, spec.id.as_str()],
    )?;
    get_in(tx, realm, &spec.id)?
        .map(|workflow| Started {
            created: true,
            workflow,
        })
        .ok_or_else(|| Error::NotFound(format!("workflow {} just inserted", spec.id)))
}

/// The lease of a proc that runs a workflow of its own: it never lapses
/// (the proc's restarts keep the workflow), and no claim waits for it.
pub const PROC_LEASE_UNTIL: i64 = i64::MAX;

/// The environment variable that tells a workflow's own proc its
/// workflow's id (and its node that its end may be the workflow's).
pub const PROC_ENV: &str = "TABOS_WORKFLOW";

/// What a workflow proc's host needs of its workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcRun {
    pub workflow: WorkflowId,
    pub executor: ExecutorId,
    pub input: Vec<u8>,
    /// Its status now: a proc restarted after its workflow ended finds it
    /// final, and should exit.
    pub status: Status,
    /// Nothing of it is recorded yet: its function steps need not be begun
    /// (there is nothing to replay), each is recorded whole at its end.
    pub fresh: bool,
}

/// The workflow proc `who` (a proc's caller) runs, if any; the proc's node
/// is recorded as where it runs.
pub fn proc_run_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    node_id: &str,
    now: i64,
) -> Result<Option<ProcRun>> {
    let realm = acting(who, Role::Member)?;
    let pid = who
        .pid()
        .ok_or_else(|| Error::Invalid("only a proc runs a workflow of its own".into()))?;
    let ex = ExecutorId::of_proc(pid)?;
    let k = p_key(tx);
    let row = tx.query_opt(
        "SELECT workflow_id, input, status FROM workflow \
         WHERE p_key = $1 AND realm = $2 AND executor = $3",
        params![k, realm, &ex],
    )?;
    let Some(r) = row else {
        return Ok(None);
    };
    let workflow = WorkflowId(r.get(0)?);
    let recorded = tx.query_opt(
        "SELECT 1 FROM workflow_step WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 LIMIT 1",
        params![k, realm, &workflow],
    )?;
    let run = ProcRun {
        workflow,
        executor: ex,
        input: r.get(1)?,
        status: Status::parse(&r.get::<String>(2)?)?,
        fresh: recorded.is_none(),
    };
    if run.status == Status::Pending {
        tx.execute(
            "UPDATE workflow SET node_id = $4, updated_us = $5 \
             WHERE p_key = $1 AND realm = $2 AND workflow_id = $3",
            params![k, realm, &run.workflow, node_id, now],
        )?;
    }
    Ok(Some(run))
}

/// Procedure body: proc `pid` of `realm`, which ran a workflow of its own,
/// has ended for good (`why`); the workflow, if still pending and its, fails
/// with that reason. Returns whether it did.
pub fn proc_ended_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &crate::ids::Pid,
    why: &str,
    now: i64,
) -> Result<bool> {
    let ex = ExecutorId::of_proc(pid)?;
    let k = p_key(tx);
    let row = tx.query_opt(
        "SELECT workflow_id FROM workflow WHERE p_key = $1 AND realm = $2 AND executor = $3 \
         AND status = 'pending'",
        params![k, realm, &ex],
    )?;
    let Some(r) = row else {
        return Ok(false);
    };
    let id: String = r.get(0)?;
    let error = Outcome::Error(format!("its proc {pid} ended without finishing it: {why}"));
    record_finish(tx, realm, &ex, &id, &error, now)?;
    Ok(true)
}

/// Procedure body: [`proc_ended_tx`] for those of `pids` (procs of
/// `realm`) that have ended — the cluster failed them, their node lost and
/// their restarts spent — with `why`; a proc queued again is left alone.
/// Returns how many workflows failed.
pub fn procs_failed_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pids: &[crate::ids::Pid],
    why: &str,
    now: i64,
) -> Result<u64> {
    let mut n = 0;
    for pid in pids {
        let over = match crate::procs::get_tx(tx, realm, pid.as_str()) {
            Ok(p) => p.state.is_terminal(),
            Err(Error::NotFound(_)) => true,
            Err(e) => return Err(e),
        };
        if over && proc_ended_tx(tx, realm, pid, why, now)? {
            n += 1;
        }
    }
    Ok(n)
}

/// Refuses to hand workflow `w` to other executors when a proc of its own
/// runs it: only that proc can.
fn not_proc_run(w: &Workflow, what: &str) -> Result<()> {
    match w.executor.clone().map(ExecutorId) {
        Some(ex) if ex.proc().is_some() => Err(Error::Precondition(format!(
            "workflow {} is run by its own proc {}, which no executor takes over: {what} it by \
             starting a new workflow of its module",
            w.id,
            ex.proc().unwrap_or_default()
        ))),
        _ => Ok(()),
    }
}

/// A second start of workflow `w`'s id: the first, unless it asks for
/// another function.
fn second_start(w: Workflow, spec: &StartSpec) -> Result<Started> {
    if w.name != spec.name {
        return Err(Error::AlreadyExists(format!(
            "workflow {} exists, running function {}, not {}",
            spec.id, w.name, spec.name
        )));
    }
    Ok(Started {
        created: false,
        workflow: w,
    })
}

fn ensure_queue(tx: &mut dyn Tx, realm: &str, queue: &str, now: i64) -> Result<()> {
    let k = p_key(tx);
    let exists = tx
        .query_opt(
            "SELECT 1 FROM workflow_queue WHERE p_key = $1 AND realm = $2 AND queue = $3",
            params![k, realm, queue],
        )?
        .is_some();
    if !exists {
        tx.execute(
            "INSERT INTO workflow_queue (p_key, realm, queue, updated_us) VALUES ($1, $2, $3, $4)",
            params![k, realm, queue, now],
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------- claiming

/// A workflow an executor claimed, to run its function.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub id: String,
    pub name: String,
    pub input: Vec<u8>,
    /// It has a history — claimed from an executor that lapsed or left,
    /// or resumed, or forked — so its steps are checked against their
    /// records; false: nothing of it is recorded.
    pub recovered: bool,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claimed {
    pub claims: Vec<Claim>,
    /// When to try again though nothing is announced: the earliest lapse of
    /// another executor's lease over a workflow this one could take, or the
    /// end of the rate limit's period.
    pub retry_at_us: Option<i64>,
}

/// `name IN ($n, …)` over `functions`, numbered from `first`, with its
/// parameters.
fn functions_in(functions: &[String], first: usize) -> (String, Vec<Value>) {
    if functions.is_empty() {
        return ("FALSE".into(), Vec::new());
    }
    let marks: Vec<String> = (0..functions.len())
        .map(|i| format!("${}", first + i))
        .collect();
    (
        format!("w.name IN ({})", marks.join(", ")),
        functions.iter().map(|f| Value::Text(f.clone())).collect(),
    )
}

/// Orphaned pending workflows: in `queue` (or none), of `ex`'s version and
/// functions, oldest first; and the earliest lapse of a live lease over
/// Orphaned pending workflows: in `queue` (or none), of `ex`'s version and
/// functions, oldest first, at most `max` and about [`CLAIM_BYTES_MAX`]
/// of inputs; and the earliest lapse of a live lease over one that would
/// be (when to look again).
fn orphans(
    tx: &mut dyn Tx,
    realm: &str,
    ex: &Executor,
    queue: Option<&str>,
    max: usize,
    now: i64,
) -> Result<(Vec<Claim>, Option<i64>)> {
    let k = p_key(tx);
    let (in_fns, fn_params) = functions_in(&ex.functions, 6);
    let queue_cond = if queue.is_some() {
        "w.queue = $4"
    } else {
        "w.queue IS NULL AND $4 = ''"
    };
    let from = format!(
        "FROM workflow w LEFT JOIN workflow_executor e \
           ON e.p_key = w.p_key AND e.realm = w.realm AND e.executor = w.executor \
         WHERE w.p_key = $1 AND w.realm = $2 AND w.status = 'pending' AND w.app_version = $3 \
           AND {queue_cond} AND {in_fns}"
    );
    let mut p = vec![
        Value::Int(k),
        Value::Text(realm.into()),
        Value::Text(ex.app_version.clone()),
        Value::Text(queue.unwrap_or("").into()),
        Value::Int(now),
    ];
    p.extend(fn_params);
    let rows = tx.query_text(
        &format!(
            "SELECT w.workflow_id, w.name, w.input {from} \
               AND (e.lease_until_us IS NULL OR e.lease_until_us < $5) \
             ORDER BY w.priority, w.created_us LIMIT {max}"
        ),
        &p,
    )?;
    let mut out = Vec::new();
    let mut bytes = 0;
    for r in rows.iter() {
        let c = Claim {
            id: r.get(0)?,
            name: r.get(1)?,
            input: r.get(2)?,
            recovered: true,
        };
        if !within_claim_bytes(&mut bytes, &c, out.len()) {
            break;
        }
        out.push(c);
    }
    // Only asked for when there is nothing to take now (it is then when
    // to look again).
    let mut retry: Option<i64> = None;
    if out.is_empty() {
        let rows = tx.query_text(
            &format!(
                "SELECT min(e.lease_until_us) {from} AND e.lease_until_us >= $5 \
                 AND e.lease_until_us < {PROC_LEASE_UNTIL}"
            ),
            &p,
        )?;
        if let Some(r) = rows.iter().next() {
            retry = r.get::<Option<i64>>(0)?.map(|t| t + 1);
        }
    }
    Ok((out, retry))
}

/// Adds `c`'s input to `bytes`; false when it would take a claim of more
/// than `taken` workflows past [`CLAIM_BYTES_MAX`] (one is always taken).
fn within_claim_bytes(bytes: &mut usize, c: &Claim, taken: usize) -> bool {
    if taken > 0 && *bytes + c.input.len() > CLAIM_BYTES_MAX {
        return false;
    }
    *bytes += c.input.len();
    true
}

fn claim(
    tx: &mut dyn Tx,
    realm: &str,
    id: &str,
    executor: &str,
    node: &str,
    now: i64,
) -> Result<()> {
    let k = p_key(tx);
    let n = tx.execute(
        "UPDATE workflow SET status = 'pending', executor = $4, node_id = $5, \
         started_us = coalesce(started_us, $6), attempts = attempts + 1, updated_us = $6 \
         WHERE p_key = $1 AND realm = $2 AND workflow_id = $3",
        params![k, realm, id, executor, node, now],
    )?;
    debug_assert_eq!(n, 1);
    Ok(())
}

/// Procedure body: executor `executor` takes over up to `max` orphaned
/// workflows that are in no queue (those of a queue it dequeues).
pub fn recover_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    max: usize,
    now: i64,
) -> Result<Claimed> {
    let realm = acting_for(who, executor)?;
    let ex = live_executor(tx, realm, executor, now)?;
    let (claims, retry_at_us) = orphans(tx, realm, &ex, None, max.min(CLAIM_MAX), now)?;
    for c in &claims {
        claim(tx, realm, &c.id, executor, &ex.node_id, now)?;
    }
    Ok(Claimed {
        claims,
        retry_at_us,
    })
}

/// A queue's limits; `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueLimits {
    /// Workflows of the queue pending at once, over the cluster.
    pub concurrency: Option<i64>,
    /// … on one node (its executors together).
    pub node_concurrency: Option<i64>,
    /// Workflows started per `rate_period_ms`.
    pub rate_limit: Option<i64>,
    pub rate_period_ms: Option<i64>,
}

fn queue_limits(tx: &mut dyn Tx, realm: &str, queue: &str) -> Result<QueueLimits> {
    let k = p_key(tx);
    let row = tx.query_opt(
        "SELECT concurrency, node_concurrency, rate_limit, rate_period_ms FROM workflow_queue \
         WHERE p_key = $1 AND realm = $2 AND queue = $3",
        params![k, realm, queue],
    )?;
    Ok(match row {
        Some(r) => QueueLimits {
            concurrency: r.get(0)?,
            node_concurrency: r.get(1)?,
            rate_limit: r.get(2)?,
            rate_period_ms: r.get(3)?,
        },
        None => QueueLimits::default(),
    })
}

fn count(tx: &mut dyn Tx, sql: &'static str, params: &[Value]) -> Result<i64> {
    Ok(tx.query_one(sql, params)?.get(0)?)
}

/// Procedure body: executor `executor` claims up to `max` workflows of
/// `queue`: first the queue's orphans (they hold their slots already),
/// then enqueued ones within the queue's limits, by priority then age.
pub fn dequeue_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    queue: &str,
    max: usize,
    now: i64,
) -> Result<Claimed> {
    let realm = acting_for(who, executor)?;
    validate_name("queue", queue)?;
    let ex = live_executor(tx, realm, executor, now)?;
    let limits = queue_limits(tx, realm, queue)?;
    let k = p_key(tx);
    let max = max.min(CLAIM_MAX);
    let on_node = |tx: &mut dyn Tx| {
        count(
            tx,
            "SELECT count(*) FROM workflow WHERE p_key = $1 AND realm = $2 AND queue = $3 \
             AND status = 'pending' AND node_id = $4",
            params![k, realm, queue, ex.node_id.as_str()],
        )
    };
    let node_free = |tx: &mut dyn Tx| -> Result<i64> {
        Ok(match limits.node_concurrency {
            Some(n) => (n - on_node(tx)?).max(0),
            None => i64::MAX,
        })
    };
    let (mut orphaned, mut retry) = orphans(tx, realm, &ex, Some(queue), max, now)?;
    orphaned.truncate(node_free(tx)?.min(max as i64) as usize);
    for c in &orphaned {
        claim(tx, realm, &c.id, executor, &ex.node_id, now)?;
    }
    let pending = count(
        tx,
        "SELECT count(*) FROM workflow WHERE p_key = $1 AND realm = $2 AND queue = $3 \
         AND status = 'pending'",
        params![k, realm, queue],
    )?;
    let mut free = (max - orphaned.len()) as i64;
    if let Some(c) = limits.concurrency {
        free = free.min((c - pending).max(0));
    }
    free = free.min(node_free(tx)?);
    if let (Some(limit), Some(period)) = (limits.rate_limit, limits.rate_period_ms) {
        let since = now - period * 1_000;
        let started = count(
            tx,
            "SELECT count(*) FROM workflow WHERE p_key = $1 AND realm = $2 AND queue = $3 \
             AND started_us >= $4",
            params![k, realm, queue, since],
        )?;
        if started >= limit {
            // Free again when the oldest start in the period leaves it.
            let oldest: Option<i64> = tx
                .query_one(
                    "SELECT min(started_us) FROM workflow WHERE p_key = $1 AND realm = $2 \
                     AND queue = $3 AND started_us >= $4",
                    params![k, realm, queue, since],
                )?
                .get(0)?;
            if let Some(t) = oldest {
                let at = t + period * 1_000 + 1;
                retry = Some(retry.map_or(at, |r| r.min(at)));
            }
        }
        free = free.min((limit - started).max(0));
    }
    let mut bytes: usize = orphaned.iter().map(|c| c.input.len()).sum();
    let mut claims = orphaned;
    if free > 0 {
        let (in_fns, fn_params) = functions_in(&ex.functions, 5);
        let sql = format!(
            "SELECT w.workflow_id, w.name, w.input, \
                    CASE WHEN w.attempts > 0 OR w.forked_from IS NOT NULL THEN 1 ELSE 0 END \
             FROM workflow w \
             WHERE w.p_key = $1 AND w.realm = $2 AND w.queue = $3 AND w.status = 'enqueued' \
               AND w.app_version = $4 AND {in_fns} \
             ORDER BY w.priority, w.created_us LIMIT {free}"
        );
        let mut p = vec![
            Value::Int(k),
            Value::Text(realm.into()),
            Value::Text(queue.into()),
            Value::Text(ex.app_version.clone()),
        ];
        p.extend(fn_params);
        let rows = tx.query_text(&sql, &p)?;
        for r in rows.iter() {
            let c = Claim {
                id: r.get(0)?,
                name: r.get(1)?,
                input: r.get(2)?,
                // Resumed or forked: it has steps to replay.
                recovered: r.get::<i64>(3)? != 0,
            };
            if !within_claim_bytes(&mut bytes, &c, claims.len()) {
                break;
            }
            claim(tx, realm, &c.id, executor, &ex.node_id, now)?;
            claims.push(c);
        }
    }
    Ok(Claimed {
        claims,
        retry_at_us: retry,
    })
}

// ---------------------------------------------------------------- steps

/// Refuses a step of workflow `id` unless it is pending and `executor`'s.
fn owned(tx: &mut dyn Tx, realm: &str, id: &str, executor: &str) -> Result<()> {
    let k = p_key(tx);
    let row = tx
        .query_opt(
            "SELECT status, executor FROM workflow WHERE p_key = $1 AND realm = $2 \
             AND workflow_id = $3",
            params![k, realm, id],
        )?
        .ok_or_else(|| Error::NotFound(format!("workflow {id} in realm {realm}")))?;
    let status = Status::parse(&row.get::<String>(0)?)?;
    let owner: Option<String> = row.get(1)?;
    match status {
        Status::Pending if owner.as_deref() == Some(executor) => Ok(()),
        Status::Pending => Err(Error::Precondition(format!(
            "workflow {id} is run by {} now: this executor's lease lapsed and it was taken over",
            owner.as_deref().unwrap_or("no executor")
        ))),
        Status::Cancelled => Err(Error::Precondition(format!("workflow {id} was cancelled"))),
        Status::Enqueued => Err(Error::Precondition(format!(
            "workflow {id} is enqueued, not started"
        ))),
        s => Err(Error::Precondition(format!(
            "workflow {id} has finished ({s})"
        ))),
    }
}

fn check_step(step: i64) -> Result<()> {
    if !(1..=STEP_MAX).contains(&step) {
        return Err(Error::Invalid(format!(
            "a step number is 1..={STEP_MAX}, not {step}"
        )));
    }
    Ok(())
}

/// A step's record, if any.
fn step_in(tx: &mut dyn Tx, realm: &str, id: &str, step: i64) -> Result<Option<Step>> {
    let k = p_key(tx);
    let row = tx.query_opt(
        "SELECT step, name, kind, status, output, error, attempts, started_us, ended_us, input \
         FROM workflow_step WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step = $4",
        params![k, realm, id, step],
    )?;
    row.map(|r| step_of(&r)).transpose()
}

fn step_of(r: &Row) -> Result<Step> {
    Ok(Step {
        step: r.get(0)?,
        name: r.get(1)?,
        kind: StepKind::parse(&r.get::<String>(2)?)?,
        status: r.get(3)?,
        output: r.get(4)?,
        error: r.get(5)?,
        attempts: r.get(6)?,
        started_us: r.get(7)?,
        ended_us: r.get(8)?,
        input: r.get(9)?,
    })
}

fn recorded(s: &Step) -> Option<Outcome> {
    match s.status.as_str() {
        "success" => Some(Outcome::Success(s.output.clone().unwrap_or_default())),
        "error" => Some(Outcome::Error(s.error.clone().unwrap_or_default())),
        _ => None,
    }
}

/// The step found for `step`, checked to be the step the function runs
/// there now (a function must take the same steps in the same order).
fn same_step(
    tx: &mut dyn Tx,
    realm: &str,
    id: &str,
    step: i64,
    name: &str,
    kind: StepKind,
) -> Result<Option<Step>> {
    let s = step_in(tx, realm, id, step)?;
    if let Some(s) = &s {
        if s.name != name || s.kind != kind {
            return Err(Error::Precondition(format!(
                "workflow {id} is not deterministic: its step {step} was {} {:?} and is now {} \
                 {name:?} (a workflow function must take the same steps in the same order)",
                s.kind.as_str(),
                s.name,
                kind.as_str()
            )));
        }
    }
    Ok(s)
}

/// What [`step_begin_tx`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// Recorded already: its outcome, not to be run again.
    Done(Outcome),
    /// To run: this is attempt `attempt`.
    Run { attempt: i64 },
}

/// Procedure body: begins step `step` (a client function, a proc, a
/// get_event) of workflow `id`.
#[allow(clippy::too_many_arguments)]
pub fn step_begin_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    step: i64,
    name: &str,
    kind: StepKind,
    input: &[u8],
    now: i64,
) -> Result<Begun> {
    let realm = acting_for(who, executor)?;
    crate::realms::metered(tx, realm, |tx| {
        check_step(step)?;
        validate_name("step name", name)?;
        owned(tx, realm, id, executor)?;
        let k = p_key(tx);
        match same_step(tx, realm, id, step, name, kind)? {
            Some(s) => {
                if let Some(o) = recorded(&s) {
                    return Ok(Begun::Done(o));
                }
                tx.execute(
                    "UPDATE workflow_step SET attempts = attempts + 1 \
                     WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step = $4",
                    params![k, realm, id, step],
                )?;
                Ok(Begun::Run {
                    attempt: s.attempts + 1,
                })
            }
            None => {
                tx.execute(
                    "INSERT INTO workflow_step (p_key, realm, workflow_id, step, name, kind, status, \
                     input, attempts, started_us) VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, 1, $8)",
                    params![k, realm, id, step, name, kind.as_str(), input, now],
                )?;
                Ok(Begun::Run { attempt: 1 })
            }
        }
    })
}

/// A step that ends without having begun: a workflow with no history runs
/// its steps without [`step_begin_tx`] (there is nothing to replay), and
/// records each whole at its end.
#[derive(Debug, Clone)]
pub struct Unbegun {
    pub name: String,
    pub kind: StepKind,
    /// What it was given (a proc's command line; empty for a function).
    pub input: Vec<u8>,
    /// Attempts made (at least 1).
    pub attempts: i64,
}

/// Procedure body: records step `step`'s outcome — or, with `last` false,
/// an attempt's error, the step staying to be retried. A step recorded
/// already keeps its first outcome, which is returned. A step never begun
/// is recorded whole when `unbegun` says what it is.
#[allow(clippy::too_many_arguments)]
pub fn step_end_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    step: i64,
    outcome: &Outcome,
    last: bool,
    unbegun: Option<&Unbegun>,
    now: i64,
) -> Result<Outcome> {
    let realm = acting_for(who, executor)?;
    // An error is recorded even over quota (bounded by cut_error): a step
    // that cannot record its failure would leave its workflow stuck.
    crate::realms::metered_if(matches!(outcome, Outcome::Success(_)), tx, realm, |tx| {
        check_step(step)?;
        owned(tx, realm, id, executor)?;
        let k = p_key(tx);
        // The common case — a step of a workflow with no history, ended for
        // good — is recorded whole without reading first (on PostgreSQL a read
        // of a missing row locks the index's gap, and concurrent workflows'
        // steps would conflict); a row already there is left alone.
        if let (Some(u), true) = (unbegun, last) {
            validate_name("step name", &u.name)?;
            let (status, output, error): (&str, Value, Value) = match outcome {
                Outcome::Success(o) => {
                    check_value("a step's output", o)?;
                    ("success", Value::Blob(o.clone()), Value::Null)
                }
                Outcome::Error(e) => ("error", Value::Null, Value::Text(cut_error(e))),
            };
            let n = tx.execute(
                "INSERT INTO workflow_step (p_key, realm, workflow_id, step, name, kind, status, \
                 input, output, error, attempts, started_us, ended_us) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) \
                 ON CONFLICT (p_key, realm, workflow_id, step) DO NOTHING",
                params![
                    k,
                    realm,
                    id,
                    step,
                    u.name.as_str(),
                    u.kind.as_str(),
                    status,
                    u.input.as_slice(),
                    output,
                    error,
                    u.attempts.max(1),
                    now
                ],
            )?;
            if n == 1 {
                return Ok(outcome.clone());
            }
        }
        let s = match (step_in(tx, realm, id, step)?, unbegun) {
            (Some(s), _) => s,
            (None, Some(u)) => {
                validate_name("step name", &u.name)?;
                tx.execute(
                    "INSERT INTO workflow_step (p_key, realm, workflow_id, step, name, kind, status, \
                     input, attempts, started_us) \
                     VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, $9)",
                    params![
                        k,
                        realm,
                        id,
                        step,
                        u.name.as_str(),
                        u.kind.as_str(),
                        u.input.as_slice(),
                        u.attempts.max(1),
                        now
                    ],
                )?;
                step_in(tx, realm, id, step)?
                    .ok_or_else(|| Error::NotFound(format!("step {step} of {id} just inserted")))?
            }
            (None, None) => {
                return Err(Error::Precondition(format!(
                    "step {step} of workflow {id} was not begun"
                )))
            }
        };
        if let Some(u) = unbegun {
            if s.name != u.name || s.kind != u.kind {
                return Err(Error::Precondition(format!(
                    "workflow {id} is not deterministic: its step {step} was {} {:?} and is now {} \
                     {:?}",
                    s.kind.as_str(),
                    s.name,
                    u.kind.as_str(),
                    u.name
                )));
            }
        }
        if let Some(o) = recorded(&s) {
            return Ok(o);
        }
        match outcome {
            Outcome::Success(out) => {
                check_value("a step's output", out)?;
                tx.execute(
                    "UPDATE workflow_step SET status = 'success', output = $5, error = NULL, \
                     ended_us = $6 WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step = $4",
                    params![k, realm, id, step, out.as_slice(), now],
                )?;
            }
            Outcome::Error(e) if last => {
                tx.execute(
                    "UPDATE workflow_step SET status = 'error', error = $5, ended_us = $6 \
                     WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step = $4",
                    params![k, realm, id, step, cut_error(e), now],
                )?;
            }
            Outcome::Error(e) => {
                tx.execute(
                    "UPDATE workflow_step SET error = $5 \
                     WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step = $4",
                    params![k, realm, id, step, cut_error(e)],
                )?;
                return Ok(outcome.clone());
            }
        }
        Ok(outcome.clone())
    })
}

/// Records step `step` done with `output` in the caller's transaction
/// (after its effects): for the steps that are one transaction.
#[allow(clippy::too_many_arguments)]
fn record_done(
    tx: &mut dyn Tx,
    realm: &str,
    id: &str,
    step: i64,
    name: &str,
    kind: StepKind,
    input: &[u8],
    output: Option<&[u8]>,
    now: i64,
) -> Result<()> {
    let k = p_key(tx);
    let out: Value = match output {
        Some(o) => Value::Blob(o.to_vec()),
        None => Value::Null,
    };
    let n = tx.execute(
        "UPDATE workflow_step SET status = 'success', output = $5, attempts = attempts + 1, \
         ended_us = $6 WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step = $4",
        params![k, realm, id, step, out.clone(), now],
    )?;
    if n == 0 {
        tx.execute(
            "INSERT INTO workflow_step (p_key, realm, workflow_id, step, name, kind, status, \
             input, output, attempts, started_us, ended_us) \
             VALUES ($1, $2, $3, $4, $5, $6, 'success', $7, $8, 1, $9, $9)",
            params![k, realm, id, step, name, kind.as_str(), input, out, now],
        )?;
    }
    Ok(())
}

/// Where a one-transaction step stands before it runs: `Some` when it is
/// recorded already (its outcome).
fn before_step(
    tx: &mut dyn Tx,
    realm: &str,
    executor: &str,
    id: &str,
    step: i64,
    name: &str,
    kind: StepKind,
) -> Result<Option<Outcome>> {
    check_step(step)?;
    validate_name("step name", name)?;
    owned(tx, realm, id, executor)?;
    Ok(same_step(tx, realm, id, step, name, kind)?.and_then(|s| recorded(&s)))
}

/// Procedure body: stored-procedure step `step` — the procedure runs in
/// this transaction and the step is recorded in it, so its effects happen
/// exactly once. `run` calls the procedure (in this transaction); a
/// procedure that fails fails the transaction (nothing of it stays), and
/// the caller records the failed attempt with [`step_failed_tx`].
#[allow(clippy::too_many_arguments)]
pub fn step_procedure_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    step: i64,
    procedure: &str,
    args: &[u8],
    now: i64,
    run: &mut dyn FnMut(&mut dyn Tx) -> Result<Vec<u8>>,
) -> Result<Outcome> {
    let realm = acting_for(who, executor)?;
    crate::realms::metered(tx, realm, |tx| {
        if let Some(o) = before_step(
            tx,
            realm,
            executor,
            id,
            step,
            procedure,
            StepKind::Procedure,
        )? {
            return Ok(o);
        }
        let out = run(tx)?;
        check_value("a procedure step's output", &out)?;
        record_done(
            tx,
            realm,
            id,
            step,
            procedure,
            StepKind::Procedure,
            args,
            Some(&out),
            now,
        )?;
        Ok(Outcome::Success(out))
    })
}

/// Procedure body: records a failed attempt of a one-transaction step
/// (`last`: its final outcome is that error).
#[allow(clippy::too_many_arguments)]
pub fn step_failed_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    step: i64,
    name: &str,
    kind: StepKind,
    input: &[u8],
    error: &str,
    last: bool,
    now: i64,
) -> Result<Outcome> {
    let realm = acting_for(who, executor)?;
    if let Some(o) = before_step(tx, realm, executor, id, step, name, kind)? {
        return Ok(o);
    }
    let k = p_key(tx);
    let status = if last { "error" } else { "running" };
    let ended: Value = if last { Value::Int(now) } else { Value::Null };
    let n = tx.execute(
        "UPDATE workflow_step SET status = $5, error = $6, attempts = attempts + 1, ended_us = $7 \
         WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step = $4",
        params![k, realm, id, step, status, cut_error(error), ended.clone()],
    )?;
    if n == 0 {
        tx.execute(
            "INSERT INTO workflow_step (p_key, realm, workflow_id, step, name, kind, status, \
             input, error, attempts, started_us, ended_us) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1, $10, $11)",
            params![
                k,
                realm,
                id,
                step,
                name,
                kind.as_str(),
                status,
                input,
                cut_error(error),
                now,
                ended
            ],
        )?;
    }
    Ok(Outcome::Error(error.to_string()))
}

/// Procedure body: durable sleep step `step` of `duration_us`: returns when
/// it wakes (µs since the epoch), recorded at the first call, so a re-run
/// sleeps only what is left.
#[allow(clippy::too_many_arguments)]
pub fn sleep_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    step: i64,
    duration_us: i64,
    now: i64,
) -> Result<i64> {
    let realm = acting_for(who, executor)?;
    crate::realms::metered(tx, realm, |tx| {
        if !(0..=SLEEP_MAX_US).contains(&duration_us) {
            return Err(Error::Invalid(format!(
                "a durable sleep is 0..={} s",
                SLEEP_MAX_US / 1_000_000
            )));
        }
        check_step(step)?;
        owned(tx, realm, id, executor)?;
        if let Some(s) = same_step(tx, realm, id, step, "sleep", StepKind::Sleep)? {
            let at = s
                .output
                .as_deref()
                .and_then(|o| std::str::from_utf8(o).ok())
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| {
                    Error::Invalid(format!("step {step} of {id}: a bad wake-up time"))
                })?;
            return Ok(at);
        }
        let at = now + duration_us;
        let k = p_key(tx);
        // Recorded as done with its wake-up time: what a re-run needs.
        tx.execute(
            "INSERT INTO workflow_step (p_key, realm, workflow_id, step, name, kind, status, input, \
             output, attempts, started_us, ended_us) \
             VALUES ($1, $2, $3, $4, 'sleep', 'sleep', 'success', $5, $6, 1, $7, $8)",
            params![
                k,
                realm,
                id,
                step,
                duration_us.to_string().into_bytes(),
                at.to_string().into_bytes(),
                now,
                at
            ],
        )?;
        Ok(at)
    })
}

/// Who sends a message: a workflow's step, or a client outside any.
#[derive(Debug, Clone)]
pub struct Sender {
    pub executor: ExecutorId,
    pub workflow: WorkflowId,
    pub step: i64,
}

/// Procedure body: sends `payload` on `topic` to workflow `to`. From a
/// workflow's step, once: the message and the step's record commit
/// together.
pub fn send_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    from: Option<&Sender>,
    to: &WorkflowId,
    topic: &str,
    payload: &[u8],
    now: i64,
) -> Result<()> {
    let realm = match from {
        Some(s) => acting_for(who, &s.executor)?,
        None => acting(who, Role::Member)?,
    };
    crate::realms::metered(tx, realm, |tx| {
        validate_name("topic", topic)?;
        check_value("a message", payload)?;
        if let Some(s) = from {
            if before_step(
                tx,
                realm,
                &s.executor,
                &s.workflow,
                s.step,
                "send",
                StepKind::Send,
            )?
            .is_some()
            {
                return Ok(());
            }
        }
        if get_in(tx, realm, to)?.is_none() {
            return Err(Error::NotFound(format!("workflow {to} in realm {realm}")));
        }
        let k = p_key(tx);
        let seq: i64 = tx
            .query_one(
                "SELECT coalesce(max(seq), 0) + 1 FROM workflow_message \
                 WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND topic = $4",
                params![k, realm, to, topic],
            )?
            .get(0)?;
        let sender = from.map_or(String::new(), |s| s.workflow.0.clone());
        tx.execute(
            "INSERT INTO workflow_message (p_key, realm, workflow_id, topic, seq, sender, payload, \
             sent_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params![k, realm, to, topic, seq, sender, payload, now],
        )?;
        if let Some(s) = from {
            record_done(
                tx,
                realm,
                &s.workflow,
                s.step,
                "send",
                StepKind::Send,
                payload,
                None,
                now,
            )?;
        }
        tx.notify(&workflow_channel(realm, to), &format!("message {topic}"))?;
        Ok(())
    })
}

/// Procedure body: receive step `step` on `topic`: takes the oldest
/// message and records it with the step, at once. With none there, records
/// "none" when `give_up` (its wait ended), else returns `None` (the caller
/// waits for the workflow's channel and asks again). `Some(None)`: the step
/// received nothing.
#[allow(clippy::too_many_arguments)]
pub fn recv_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    step: i64,
    topic: &str,
    give_up: bool,
    now: i64,
) -> Result<Option<Option<Vec<u8>>>> {
    let realm = acting_for(who, executor)?;
    crate::realms::metered(tx, realm, |tx| {
        validate_name("topic", topic)?;
        check_step(step)?;
        owned(tx, realm, id, executor)?;
        let before = same_step(tx, realm, id, step, topic, StepKind::Recv)?;
        if let Some(s) = before.filter(|s| s.status == "success") {
            return Ok(Some(s.output));
        }
        let k = p_key(tx);
        let first = tx.query_opt(
            "SELECT seq, payload FROM workflow_message \
             WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND topic = $4 \
             ORDER BY seq LIMIT 1",
            params![k, realm, id, topic],
        )?;
        match first {
            Some(r) => {
                let (seq, payload): (i64, Vec<u8>) = (r.get(0)?, r.get(1)?);
                tx.execute(
                    "DELETE FROM workflow_message WHERE p_key = $1 AND realm = $2 \
                     AND workflow_id = $3 AND topic = $4 AND seq = $5",
                    params![k, realm, id, topic, seq],
                )?;
                record_done(
                    tx,
                    realm,
                    id,
                    step,
                    topic,
                    StepKind::Recv,
                    topic.as_bytes(),
                    Some(&payload),
                    now,
                )?;
                Ok(Some(Some(payload)))
            }
            None if give_up => {
                record_done(
                    tx,
                    realm,
                    id,
                    step,
                    topic,
                    StepKind::Recv,
                    topic.as_bytes(),
                    None,
                    now,
                )?;
                Ok(Some(None))
            }
            None => Ok(None),
        }
    })
}

/// Procedure body: set-event step `step`: publishes `value` under `key`
/// for workflow `id`, with the step's record.
#[allow(clippy::too_many_arguments)]
pub fn set_event_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    step: i64,
    key: &str,
    value: &[u8],
    now: i64,
) -> Result<()> {
    let realm = acting_for(who, executor)?;
    crate::realms::metered(tx, realm, |tx| {
        validate_name("event key", key)?;
        check_value("an event's value", value)?;
        if before_step(tx, realm, executor, id, step, key, StepKind::SetEvent)?.is_some() {
            return Ok(());
        }
        let k = p_key(tx);
        let n = tx.execute(
            "UPDATE workflow_event SET value = $5, set_us = $6 \
             WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND key = $4",
            params![k, realm, id, key, value, now],
        )?;
        if n == 0 {
            tx.execute(
                "INSERT INTO workflow_event (p_key, realm, workflow_id, key, value, set_us) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                params![k, realm, id, key, value, now],
            )?;
        }
        record_done(
            tx,
            realm,
            id,
            step,
            key,
            StepKind::SetEvent,
            value,
            None,
            now,
        )?;
        tx.notify(&workflow_channel(realm, id), &format!("event {key}"))?;
        Ok(())
    })
}

/// Procedure body: the value workflow `id` set under `key`, if any.
pub fn get_event_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &WorkflowId,
    key: &str,
) -> Result<Option<Vec<u8>>> {
    let realm = acting(who, Role::Reader)?;
    validate_name("event key", key)?;
    let k = p_key(tx);
    Ok(tx
        .query_opt(
            "SELECT value FROM workflow_event WHERE p_key = $1 AND realm = $2 \
             AND workflow_id = $3 AND key = $4",
            params![k, realm, id, key],
        )?
        .map(|r| r.get(0))
        .transpose()?)
}

/// Procedure body: workflow `id`'s function returned `outcome`.
pub fn finish_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    executor: &ExecutorId,
    id: &WorkflowId,
    outcome: &Outcome,
    now: i64,
) -> Result<()> {
    let realm = acting_for(who, executor)?;
    // An error is recorded even over quota, as step_end_tx's.
    crate::realms::metered_if(matches!(outcome, Outcome::Success(_)), tx, realm, |tx| {
        record_finish(tx, realm, executor, id, outcome, now)
    })
}

fn record_finish(
    tx: &mut dyn Tx,
    realm: &str,
    executor: &str,
    id: &str,
    outcome: &Outcome,
    now: i64,
) -> Result<()> {
    owned(tx, realm, id, executor)?;
    let k = p_key(tx);
    let (status, output, error): (&str, Value, Value) = match outcome {
        Outcome::Success(o) => {
            check_value("a workflow's output", o)?;
            ("success", Value::Blob(o.clone()), Value::Null)
        }
        Outcome::Error(e) => ("error", Value::Null, Value::Text(cut_error(e))),
    };
    tx.execute(
        "UPDATE workflow SET status = $4, output = $5, error = $6, ended_us = $7, updated_us = $7 \
         WHERE p_key = $1 AND realm = $2 AND workflow_id = $3",
        params![k, realm, id, status, output, error, now],
    )?;
    announce(tx, realm, id, status)?;
    Ok(())
}

/// Channel raised when a workflow ends — success, error or cancelled
/// (payload: its realm): what waits on workflows of several realms (a
/// graph's workflow tasks, `graphs::settle_children_tx`) follows.
pub const ENDED_CHANNEL: &str = "workflows/ended";

/// Tells workflow `id`'s channel, and its queue's, that its status is now
/// `status`.
fn announce(tx: &mut dyn Tx, realm: &str, id: &str, status: &str) -> Result<()> {
    tx.notify(&workflow_channel(realm, id), &format!("status {status}"))?;
    if matches!(status, "success" | "error" | "cancelled") {
        tx.notify(ENDED_CHANNEL, realm)?;
    }
    tx.notify(&workflows_channel(realm), &format!("{id} {status}"))?;
    if let Some(w) = get_in(tx, realm, id)? {
        if let Some(q) = &w.queue {
            tx.notify(&queue_channel(realm, q), &format!("{status} {id}"))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- reading

/// Procedure body: workflow `id`, if any.
pub fn get_tx(tx: &mut dyn Tx, who: &Caller, id: &WorkflowId) -> Result<Option<Workflow>> {
    get_in(tx, acting(who, Role::Reader)?, id)
}

/// [`get_tx`] in `realm`, for this module's operations that have checked
/// their caller.
fn get_in(tx: &mut dyn Tx, realm: &str, id: &str) -> Result<Option<Workflow>> {
    let k = p_key(tx);
    let sql = format!(
        "SELECT {WORKFLOW_COLUMNS} FROM workflow WHERE p_key = $1 AND realm = $2 \
         AND workflow_id = $3"
    );
    let rows = tx.query_text(&sql, params![k, realm, id])?;
    rows.iter().next().map(workflow_of).transpose()
}

/// Procedure body: workflow `id` and its steps after step `after`, in
/// order: at most [`SHOW_STEPS_MAX`] of them and about
/// [`SHOW_BYTES_MAX`] of their inputs and outputs (at least one step);
/// `true` when there are more.
pub fn show_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &WorkflowId,
    after: i64,
) -> Result<(Workflow, Vec<Step>, bool)> {
    let realm = acting(who, Role::Reader)?;
    let w = get_in(tx, realm, id)?
        .ok_or_else(|| Error::NotFound(format!("workflow {id} in realm {realm}")))?;
    let k = p_key(tx);
    let rows = tx.query_text(
        &format!(
            "SELECT step, name, kind, status, output, error, attempts, started_us, ended_us, \
             input FROM workflow_step \
             WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step > $4 \
             ORDER BY step LIMIT {}",
            SHOW_STEPS_MAX + 1
        ),
        params![k, realm, id, after],
    )?;
    let mut steps = Vec::new();
    let mut bytes = 0;
    let mut more = false;
    for r in rows.iter() {
        let s = step_of(r)?;
        let size = s.input.as_ref().map_or(0, Vec::len) + s.output.as_ref().map_or(0, Vec::len);
        if steps.len() == SHOW_STEPS_MAX || (!steps.is_empty() && bytes + size > SHOW_BYTES_MAX) {
            more = true;
            break;
        }
        bytes += size;
        steps.push(s);
    }
    Ok((w, steps, more))
}

/// Which workflows [`list_tx`] returns.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub status: Option<Status>,
    pub name: Option<String>,
    pub queue: Option<String>,
    pub app_version: Option<String>,
    /// Created at or after (µs).
    pub since_us: Option<i64>,
    pub limit: usize,
}

/// Procedure body: workflows of `realm` by `filter`, newest first, their
/// inputs and outputs left out.
pub fn list_tx(tx: &mut dyn Tx, who: &Caller, filter: &Filter) -> Result<Vec<Workflow>> {
    let realm = acting(who, Role::Reader)?;
    let k = p_key(tx);
    let mut conds = vec!["p_key = $1".to_string(), "realm = $2".to_string()];
    let mut p: Vec<Value> = vec![Value::Int(k), Value::Text(realm.into())];
    let mut add = |cond: &str, v: Value| {
        p.push(v);
        conds.push(cond.replace('?', &format!("${}", p.len())));
    };
    if let Some(s) = filter.status {
        add("status = ?", Value::Text(s.as_str().into()));
    }
    if let Some(n) = &filter.name {
        add("name = ?", Value::Text(n.clone()));
    }
    if let Some(q) = &filter.queue {
        add("queue = ?", Value::Text(q.clone()));
    }
    if let Some(v) = &filter.app_version {
        add("app_version = ?", Value::Text(v.clone()));
    }
    if let Some(t) = filter.since_us {
        add("created_us >= ?", Value::Int(t));
    }
    let limit = match filter.limit {
        0 => LIST_MAX,
        n => n.min(LIST_MAX),
    };
    // Without inputs and outputs (up to VALUE_BYTES_MAX each, times
    // LIST_MAX): `show_tx` has them.
    let columns = WORKFLOW_COLUMNS.replace("input, output,", "NULL, NULL,");
    debug_assert_ne!(columns, WORKFLOW_COLUMNS);
    let sql = format!(
        "SELECT {columns} FROM workflow WHERE {} ORDER BY created_us DESC, workflow_id \
         LIMIT {limit}",
        conds.join(" AND ")
    );
    let rows = tx.query_text(&sql, &p)?;
    rows.iter().map(workflow_of).collect()
}

// ---------------------------------------------------------------- operating

/// Procedure body: cancels workflow `id`: its executor stops at its next
/// step. A finished workflow cannot be cancelled; a cancelled one is left.
pub fn cancel_tx(tx: &mut dyn Tx, who: &Caller, id: &WorkflowId, now: i64) -> Result<Workflow> {
    let realm = acting(who, Role::Member)?;
    let w = get_in(tx, realm, id)?
        .ok_or_else(|| Error::NotFound(format!("workflow {id} in realm {realm}")))?;
    match w.status {
        Status::Cancelled => return Ok(w),
        Status::Success | Status::Error => {
            return Err(Error::Precondition(format!(
                "workflow {id} has finished ({}): there is nothing to cancel",
                w.status
            )))
        }
        _ => {}
    }
    let k = p_key(tx);
    tx.execute(
        "UPDATE workflow SET status = 'cancelled', ended_us = $4, updated_us = $4 \
         WHERE p_key = $1 AND realm = $2 AND workflow_id = $3",
        params![k, realm, id, now],
    )?;
    // A proc of its own stops with it, wherever it waits (its steps would
    // be refused from now on anyway).
    let own = w.executor.clone().map(ExecutorId);
    if let Some(pid) = own.as_ref().and_then(|ex| ex.proc()) {
        match crate::procs::evict_tx(tx, realm, &crate::ids::Pid(pid.to_string()), now) {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    announce(tx, realm, id, "cancelled")?;
    get_in(tx, realm, id)?.ok_or_else(|| Error::NotFound(id.to_string()))
}

/// Makes `id` runnable again: in its queue, enqueued (it waits for a slot);
/// else pending with no executor (any executor of its version takes it).
fn requeue(tx: &mut dyn Tx, realm: &str, id: &str, queue: Option<&str>, now: i64) -> Result<()> {
    let k = p_key(tx);
    let status = if queue.is_some() {
        "enqueued"
    } else {
        "pending"
    };
    tx.execute(
        "UPDATE workflow SET status = $4, executor = NULL, node_id = NULL, error = NULL, \
         output = NULL, ended_us = NULL, updated_us = $5 \
         WHERE p_key = $1 AND realm = $2 AND workflow_id = $3",
        params![k, realm, id, status, now],
    )?;
    match queue {
        Some(q) => tx.notify(&queue_channel(realm, q), &format!("enqueued {id}"))?,
        None => tx.notify(&orphans_channel(realm), id)?,
    }
    tx.notify(&workflow_channel(realm, id), &format!("status {status}"))?;
    tx.notify(&workflows_channel(realm), &format!("{id} {status}"))?;
    Ok(())
}

/// Procedure body: resumes workflow `id` (cancelled, failed, or pending —
/// to hand it to another executor), optionally under application version
/// `version`. Its completed steps stay; steps that failed or were under
/// way when it stopped are forgotten, so they run again.
pub fn resume_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &WorkflowId,
    version: Option<&str>,
    now: i64,
) -> Result<Workflow> {
    let realm = acting(who, Role::Member)?;
    let w = get_in(tx, realm, id)?
        .ok_or_else(|| Error::NotFound(format!("workflow {id} in realm {realm}")))?;
    if w.status == Status::Success {
        return Err(Error::Precondition(format!(
            "workflow {id} succeeded: there is nothing to resume (fork it to run it again)"
        )));
    }
    not_proc_run(&w, "resume")?;
    let k = p_key(tx);
    if let Some(v) = version {
        validate_name("application version", v)?;
        tx.execute(
            "UPDATE workflow SET app_version = $4 WHERE p_key = $1 AND realm = $2 \
             AND workflow_id = $3",
            params![k, realm, id, v],
        )?;
    }
    if w.status == Status::Enqueued {
        // Not started: only its version changed.
        tx.notify(
            &queue_channel(realm, w.queue.as_deref().unwrap_or("")),
            &format!("enqueued {id}"),
        )?;
    } else {
        tx.execute(
            "DELETE FROM workflow_step WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 \
             AND status <> 'success'",
            params![k, realm, id],
        )?;
        requeue(tx, realm, id, w.queue.as_deref(), now)?;
    }
    get_in(tx, realm, id)?.ok_or_else(|| Error::NotFound(id.to_string()))
}

/// Procedure body: forks workflow `id` as `new_id`: the same function and
/// input, with its completed steps before `from_step` copied (so they are
/// not run again) and the rest to run, optionally under `version`.
pub fn fork_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &WorkflowId,
    new_id: &WorkflowId,
    from_step: i64,
    version: Option<&str>,
    now: i64,
) -> Result<Workflow> {
    let realm = acting(who, Role::Member)?;
    let user = who.user();
    crate::realms::metered(tx, realm, |tx| {
        if !(1..=STEP_MAX + 1).contains(&from_step) {
            return Err(Error::Invalid(format!(
                "a fork starts at step 1..={}, not {from_step}",
                STEP_MAX + 1
            )));
        }
        let w = get_in(tx, realm, id)?
            .ok_or_else(|| Error::NotFound(format!("workflow {id} in realm {realm}")))?;
        not_proc_run(&w, "fork")?;
        if get_in(tx, realm, new_id)?.is_some() {
            return Err(Error::AlreadyExists(format!(
                "workflow {new_id} in realm {realm}"
            )));
        }
        let version = match version {
            Some(v) => {
                validate_name("application version", v)?;
                v.to_string()
            }
            None => w.app_version.clone(),
        };
        let k = p_key(tx);
        tx.execute(
            "INSERT INTO workflow (p_key, realm, workflow_id, name, app_version, status, queue, \
             priority, input, user_name, forked_from, created_us, updated_us) \
             VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $10, $11, $11)",
            params![
                k,
                realm,
                new_id,
                w.name.as_str(),
                version,
                w.queue.clone(),
                w.priority,
                w.input.as_slice(),
                user,
                id,
                now
            ],
        )?;
        tx.execute(
            "INSERT INTO workflow_step (p_key, realm, workflow_id, step, name, kind, status, input, \
             output, error, attempts, started_us, ended_us) \
             SELECT p_key, realm, $4, step, name, kind, status, input, output, error, attempts, \
                    started_us, ended_us \
             FROM workflow_step WHERE p_key = $1 AND realm = $2 AND workflow_id = $3 AND step < $5 \
               AND status = 'success'",
            params![k, realm, id, new_id, from_step],
        )?;
        requeue(tx, realm, new_id, w.queue.as_deref(), now)?;
        get_in(tx, realm, new_id)?.ok_or_else(|| Error::NotFound(new_id.to_string()))
    })
}

/// Procedure body: moves every unfinished workflow of version `from` to
/// version `to` (after a deploy: the new executors take them); returns
/// how many.
pub fn retarget_tx(tx: &mut dyn Tx, who: &Caller, from: &str, to: &str, now: i64) -> Result<u64> {
    let realm = acting(who, Role::Admin)?;
    validate_name("application version", from)?;
    validate_name("application version", to)?;
    let k = p_key(tx);
    let n = tx.execute(
        "UPDATE workflow SET app_version = $4, updated_us = $5 \
         WHERE p_key = $1 AND realm = $2 AND app_version = $3 \
           AND status IN ('enqueued', 'pending')",
        params![k, realm, from, to, now],
    )?;
    if n > 0 {
        tx.notify(&orphans_channel(realm), "retarget")?;
        let queues = tx.query(
            "SELECT queue FROM workflow_queue WHERE p_key = $1 AND realm = $2",
            params![k, realm],
        )?;
        for q in queues.iter() {
            let q: String = q.get(0)?;
            tx.notify(&queue_channel(realm, &q), "retarget")?;
        }
    }
    Ok(n)
}

/// A queue and what is in it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    pub queue: String,
    pub limits: QueueLimits,
    pub enqueued: i64,
    pub pending: i64,
}

fn check_limit(what: &str, v: Option<i64>) -> Result<()> {
    if let Some(n) = v {
        if n < 1 {
            return Err(Error::Invalid(format!("{what} is at least 1, not {n}")));
        }
    }
    Ok(())
}

/// Procedure body: sets queue `queue`'s limits (while it runs: executors
/// waiting on it are told).
pub fn set_queue_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    queue: &str,
    limits: &QueueLimits,
    now: i64,
) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    crate::realms::metered(tx, realm, |tx| {
        validate_name("queue", queue)?;
        check_limit("a queue's concurrency", limits.concurrency)?;
        check_limit("a queue's per-node concurrency", limits.node_concurrency)?;
        check_limit("a queue's rate limit", limits.rate_limit)?;
        check_limit("a queue's rate period (ms)", limits.rate_period_ms)?;
        if limits.rate_limit.is_some() != limits.rate_period_ms.is_some() {
            return Err(Error::Invalid(
                "a rate limit needs its period, and a period its limit".into(),
            ));
        }
        ensure_queue(tx, realm, queue, now)?;
        let k = p_key(tx);
        tx.execute(
            "UPDATE workflow_queue SET concurrency = $4, node_concurrency = $5, rate_limit = $6, \
             rate_period_ms = $7, updated_us = $8 WHERE p_key = $1 AND realm = $2 AND queue = $3",
            params![
                k,
                realm,
                queue,
                limits.concurrency,
                limits.node_concurrency,
                limits.rate_limit,
                limits.rate_period_ms,
                now
            ],
        )?;
        tx.notify(&queue_channel(realm, queue), "limits")?;
        Ok(())
    })
}

/// Procedure body: the realm's queues.
pub fn queues_tx(tx: &mut dyn Tx, who: &Caller) -> Result<Vec<QueueInfo>> {
    let realm = acting(who, Role::Reader)?;
    let k = p_key(tx);
    let rows = tx.query(
        "SELECT q.queue, q.concurrency, q.node_concurrency, q.rate_limit, q.rate_period_ms, \
           (SELECT count(*) FROM workflow w WHERE w.p_key = q.p_key AND w.realm = q.realm \
              AND w.queue = q.queue AND w.status = 'enqueued'), \
           (SELECT count(*) FROM workflow w WHERE w.p_key = q.p_key AND w.realm = q.realm \
              AND w.queue = q.queue AND w.status = 'pending') \
         FROM workflow_queue q WHERE q.p_key = $1 AND q.realm = $2 ORDER BY q.queue",
        params![k, realm],
    )?;
    rows.iter()
        .map(|r| {
            Ok(QueueInfo {
                queue: r.get(0)?,
                limits: QueueLimits {
                    concurrency: r.get(1)?,
                    node_concurrency: r.get(2)?,
                    rate_limit: r.get(3)?,
                    rate_period_ms: r.get(4)?,
                },
                enqueued: r.get(5)?,
                pending: r.get(6)?,
            })
        })
        .collect()
}

// ---------------------------------------------------------------- schedules

/// Channel told when any realm's schedules change (payload: the realm):
/// the nodes' firing task re-reads when to wake.
pub const SCHEDULES_CHANNEL: &str = "workflows/schedules";
/// Longest schedule name (its workflows are `sched-<name>-<time>`).
pub const SCHEDULE_BYTES_MAX: usize = 64;
/// Most schedules of one realm.
pub const SCHEDULES_MAX: i64 = 1_000;

/// A cron schedule: each firing enqueues workflow `name` (version
/// `app_version`) in `queue`, as `sched-<schedule>-<time µs>` with the
/// firing time as its input — once, whichever node fires it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub schedule: String,
    pub name: String,
    pub cron: String,
    pub app_version: String,
    pub queue: String,
    pub next_us: i64,
}

/// Procedure body: creates or replaces schedule `s.schedule` (its
/// `next_us` is computed from `now`).
pub fn set_schedule_tx(tx: &mut dyn Tx, who: &Caller, s: &Schedule, now: i64) -> Result<Schedule> {
    let realm = acting(who, Role::Member)?;
    crate::realms::metered(tx, realm, |tx| {
        validate_realm(realm)?;
        validate_name("schedule", &s.schedule)?;
        if s.schedule.len() > SCHEDULE_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "a schedule's name is at most {SCHEDULE_BYTES_MAX} bytes"
            )));
        }
        validate_name("workflow function", &s.name)?;
        validate_name("application version", &s.app_version)?;
        validate_name("queue", &s.queue)?;
        let next = crate::cron::Cron::parse(&s.cron)?
            .next_after(now)
            .ok_or_else(|| Error::Invalid(format!("cron {:?} never fires", s.cron)))?;
        let k = p_key(tx);
        let n = count(
            tx,
            "SELECT count(*) FROM workflow_schedule WHERE p_key = $1 AND realm = $2",
            params![k, realm],
        )?;
        let replaced = tx.execute(
            "DELETE FROM workflow_schedule WHERE p_key = $1 AND realm = $2 AND schedule = $3",
            params![k, realm, s.schedule.as_str()],
        )?;
        if replaced == 0 && n >= SCHEDULES_MAX {
            return Err(Error::Full(format!(
                "realm {realm} has {SCHEDULES_MAX} schedules, the most it may"
            )));
        }
        ensure_queue(tx, realm, &s.queue, now)?;
        tx.execute(
            "INSERT INTO workflow_schedule (p_key, realm, schedule, name, cron, app_version, queue, \
             next_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params![
                k,
                realm,
                s.schedule.as_str(),
                s.name.as_str(),
                s.cron.as_str(),
                s.app_version.as_str(),
                s.queue.as_str(),
                next
            ],
        )?;
        tx.notify(SCHEDULES_CHANNEL, realm)?;
        Ok(Schedule {
            next_us: next,
            ..s.clone()
        })
    })
}

/// Procedure body: removes schedule `schedule`.
pub fn remove_schedule_tx(tx: &mut dyn Tx, who: &Caller, schedule: &str) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    validate_name("schedule", schedule)?;
    let k = p_key(tx);
    let n = tx.execute(
        "DELETE FROM workflow_schedule WHERE p_key = $1 AND realm = $2 AND schedule = $3",
        params![k, realm, schedule],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!(
            "schedule {schedule} in realm {realm}"
        )));
    }
    tx.notify(SCHEDULES_CHANNEL, realm)?;
    Ok(())
}

/// Procedure body: the realm's schedules.
pub fn schedules_tx(tx: &mut dyn Tx, who: &Caller) -> Result<Vec<Schedule>> {
    schedules_in(tx, acting(who, Role::Reader)?)
}

/// [`schedules_tx`] in `realm`, for the schedules' firing.
fn schedules_in(tx: &mut dyn Tx, realm: &str) -> Result<Vec<Schedule>> {
    let k = p_key(tx);
    let rows = tx.query(
        "SELECT schedule, name, cron, app_version, queue, next_us FROM workflow_schedule \
         WHERE p_key = $1 AND realm = $2 ORDER BY schedule",
        params![k, realm],
    )?;
    rows.iter()
        .map(|r| {
            Ok(Schedule {
                schedule: r.get(0)?,
                name: r.get(1)?,
                cron: r.get(2)?,
                app_version: r.get(3)?,
                queue: r.get(4)?,
                next_us: r.get(5)?,
            })
        })
        .collect()
}

/// The user a schedule's workflows run as.
pub const SCHEDULE_USER: &str = "schedule";

/// Procedure body: fires the realm's schedules that are due at `now` —
/// each enqueues its workflow (once: the id names the firing) and moves on
/// to its next time after `now` (a firing missed while no node was up is
/// fired once, late, not once per miss). Returns how many fired and the
/// realm's next firing time.
pub fn fire_due_tx(tx: &mut dyn Tx, realm: &str, now: i64) -> Result<(u64, Option<i64>)> {
    let mut fired = 0;
    for s in schedules_in(tx, realm)? {
        if s.next_us > now {
            continue;
        }
        let spec = StartSpec {
            id: WorkflowId::new(format!("sched-{}-{}", s.schedule, s.next_us))?,
            name: s.name.clone(),
            app_version: s.app_version.clone(),
            input: s.next_us.to_string().into_bytes(),
            queue: Some(s.queue.clone()),
            priority: 0,
            executor: None,
        };
        if start_in(tx, realm, SCHEDULE_USER, &spec, now)?.created {
            fired += 1;
        }
        let next = crate::cron::Cron::parse(&s.cron)?.next_after(now);
        let k = p_key(tx);
        match next {
            Some(t) => tx.execute(
                "UPDATE workflow_schedule SET next_us = $4 \
                 WHERE p_key = $1 AND realm = $2 AND schedule = $3",
                params![k, realm, s.schedule.as_str(), t],
            )?,
            // It will not fire again.
            None => tx.execute(
                "DELETE FROM workflow_schedule WHERE p_key = $1 AND realm = $2 AND schedule = $3",
                params![k, realm, s.schedule.as_str()],
            )?,
        };
    }
    let next = schedules_in(tx, realm)?.iter().map(|s| s.next_us).min();
    Ok((fired, next))
}

/// Procedure body: deletes every row of `realm`'s workflows (its removal).
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    crate::delete_realm_rows(
        tx,
        realm,
        &[
            "workflow_step",
            "workflow_message",
            "workflow_event",
            "workflow_executor",
            "workflow_queue",
            "workflow_schedule",
            "workflow",
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(validate_name("workflow id", "order-17.a:b_c").is_ok());
        for bad in ["", "a b", "a/b", &"x".repeat(ID_BYTES_MAX + 1)] {
            assert!(validate_name("workflow id", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn statuses_round_trip() {
        for s in [
            Status::Enqueued,
            Status::Pending,
            Status::Success,
            Status::Error,
            Status::Cancelled,
        ] {
            assert_eq!(Status::parse(s.as_str()).unwrap(), s);
        }
        assert!(Status::parse("done").is_err());
    }

    #[test]
    fn long_errors_are_cut_on_a_character() {
        let e = "é".repeat(ERROR_BYTES_MAX);
        let cut = cut_error(&e);
        assert!(cut.len() <= ERROR_BYTES_MAX + "…".len());
        assert!(cut.ends_with('…'));
    }
}
