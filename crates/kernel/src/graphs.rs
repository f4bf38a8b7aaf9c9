//! Task graphs (issue 43, item 1): DBOS's "user process is a collection of
//! short running tasks assembled into a graph … stored in the DBMS … and
//! tasks, to the extent possible, will be user-defined DBMS functions"
//! (DBOS paper, sections 2 and 5), with Ray's object references for the
//! data between them.
//!
//! Tables (migration 044, on the realm's partition): `graph`,
//! `graph_task`, `graph_edge`. A task is a stored procedure to call, a
//! workflow to run or a proc to spawn; its arguments are a JSON array in which
//! `{"$task": "<id>"}` stands for that task's output (which must then be
//! JSON), and each such reference is an edge. A task names only tasks
//! submitted before it, so a graph is acyclic by construction.
//!
//! * **The scheduler is a transaction.** A task whose inputs are all done
//!   is `ready`; a node's scheduler claims ready tasks ([`claim_tx`]:
//!   realm by realm, so one realm's thousands do not queue another's one)
//!   and runs each in a transaction of its own ([`run_tx`]): the
//!   procedure's effects, the task's output, and the readiness of every
//!   task that takes it commit together or not at all. A procedure task
//!   therefore runs **exactly once**: a failure rolls back all of it and
//!   is recorded apart ([`failed_tx`]), then tried again up to the task's
//!   `attempts_max`; a node that dies mid-run committed nothing, and its
//!   claims are given back when it is lost ([`requeue_node_tx`]) or when
//!   it starts again — the run of a claim given back is refused, since it
//!   checks its claim (node and attempt) in its own transaction.
//! * **Fan-out, fan-in.** A task's end lowers `deps_left` of the tasks
//!   after it (one statement, whatever their number); those at zero are
//!   ready. A graph ends when its last task does: its output is its
//!   result task's.
//! * **Dynamic tasks, child graphs.** A task submitted `dynamic` may
//!   answer `{"$tasks": [...], "$result": "<id>"}`: a child graph of those
//!   tasks is made in its run's transaction, and the task ends with the
//!   child's result (Ray's returning an object ref, DBOS's child
//!   workflows). A client adds tasks to a running graph too
//!   ([`add_tasks_tx`]).
//! * **Workflows.** A task of kind workflow starts a durable workflow
//!   (in a queue, by function name and version) with the task's arguments
//!   as its input, and ends when the workflow does ([`settle_children_tx`],
//!   on `workflows::ENDED_CHANNEL`); the workflow's recovery is its own.
//! * **Procs.** A task of kind proc spawns its program (native, or a wasm
//!   module) in its run's transaction, pid `<graph>:<task>:<run>`, with
//!   its arguments as JSON in [`TASK_ARGS_ENV`]; it ends with the proc's
//!   stdout once the proc exits 0 ([`settle_children_tx`], on
//!   `procs::ENDED_CHANNEL`). Another end — an exit status, an eviction, a
//!   lost node failing the proc — is a failed run, tried again while the
//!   task has runs left (a new proc).
//! * **Cancellation** ends a graph, its waiting and running tasks, its
//!   child graphs and its workflows; a run under way is refused at its
//!   commit.
//!
//! Channels: [`READY_CHANNEL`] (tasks became ready: wakes every node's
//! scheduler), [`graph_channel`] (a graph's tasks ended, or it did),
//! [`graphs_channel`] (a realm's graphs made and ended).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;
use tabos_sandbox::Sandbox;
use tabos_store::{params, Dialect, Row, Tx, Value};

use crate::auth::{Caller, Role};
use crate::ids::{validate_name, Pid, WorkflowId};
use crate::procedures::{self, CallPath, Called};
use crate::workflows;
use crate::{p_key, Error, Result};

/// Longest graph or task id (a child graph's id is `<graph>:<task>`).
pub const ID_BYTES_MAX: usize = crate::ids::NAME_BYTES_MAX;
/// Most tasks of one graph.
pub const TASKS_MAX: u64 = 100_000;
/// Most tasks one submission (or one dynamic task) adds.
pub const SUBMIT_TASKS_MAX: usize = 20_000;
/// Largest arguments of a task, and largest output.
pub const VALUE_BYTES_MAX: usize = 1 << 20;
/// Most references to other tasks in one task's arguments.
pub const REFS_MAX: usize = 1_024;
/// Deepest JSON in a task's arguments (a hostile nesting is refused).
pub const JSON_DEPTH_MAX: usize = 64;
/// Most runs of a task (the default is [`ATTEMPTS_DEFAULT`]).
pub const ATTEMPTS_MAX: u32 = 20;
pub const ATTEMPTS_DEFAULT: u32 = 3;
/// Deepest nesting of child graphs.
pub const DEPTH_MAX: i64 = 8;
/// Most tasks one claim takes, and most of one realm in a claim.
pub const CLAIM_MAX: usize = 256;
pub const CLAIM_PER_REALM_MAX: usize = CLAIM_MAX;
/// Most realms one claim looks at.
pub const CLAIM_REALMS_MAX: usize = 64;
/// Most tasks (and edges) one show returns, most graphs one list returns.
pub const SHOW_TASKS_MAX: usize = 10_000;
pub const LIST_MAX: usize = 1_000;
/// Longest recorded error (longer ones are cut).
pub const ERROR_BYTES_MAX: usize = 4 * 1024;
/// The environment variable a proc task's arguments are in (JSON), and
/// their most bytes there (an environment string's room).
pub const TASK_ARGS_ENV: &str = "TABOS_TASK_ARGS";
pub const PROC_ARGS_BYTES_MAX: usize = 64 * 1024;
/// Most entries of a proc task's argv.
pub const ARGV_MAX: usize = 256;

/// Channel raised when tasks become ready on a partition (payload: the
/// realm): every node's scheduler claims then.
pub const READY_CHANNEL: &str = "graphs/ready";

/// Channel raised when a task starts waiting for a workflow or a proc
/// (payload: the realm): a scheduler settles the ends of those
/// ([`settle_children_tx`]) only in realms where a task waits — known
/// from this channel and from [`waiting_realms_tx`] at its start — not
/// with a read at every end.
pub const WAITING_CHANNEL: &str = "graphs/waiting";

/// Channel of `realm`'s graphs: each one made or ended (payload `<id>
/// <status>`), what a dashboard's list follows.
pub fn graphs_channel(realm: &str) -> String {
    crate::bounded_channel("graphs/", realm)
}

/// Channel of graph `id` of `realm`: each task's end (`task <id>
/// <status>`) and the graph's (`status <status>`).
pub fn graph_channel(realm: &str, id: &str) -> String {
    crate::bounded_channel("graph/", &format!("{realm}/{id}"))
}

/// What a graph's channel ([`graph_channel`]) says: one of its tasks
/// ended, or it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    Task { id: String, status: TaskStatus },
    Graph(GraphStatus),
}

impl Announcement {
    fn payload(&self) -> String {
        match self {
            Announcement::Task { id, status } => format!("task {id} {}", status.as_str()),
            Announcement::Graph(s) => format!("status {}", s.as_str()),
        }
    }

    /// A payload of the graph's channel; `None` for one this kernel did
    /// not write.
    pub fn parse(payload: &str) -> Option<Announcement> {
        let mut words = payload.split(' ');
        match (words.next()?, words.next()?, words.next()) {
            ("task", id, Some(s)) => Some(Announcement::Task {
                id: id.to_string(),
                status: TaskStatus::parse(s).ok()?,
            }),
            ("status", s, None) => Some(Announcement::Graph(GraphStatus::parse(s).ok()?)),
            _ => None,
        }
    }
}

/// Announces `a` on graph `graph`'s channel.
fn announce(tx: &mut dyn Tx, realm: &str, graph: &str, a: Announcement) -> Result<()> {
    tx.notify(&graph_channel(realm, graph), &a.payload())?;
    Ok(())
}

/// A task's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A stored procedure of the realm, called with the arguments.
    Procedure,
    /// A durable workflow, started in a queue with the arguments as input.
    Workflow,
    /// A proc (a native program or a wasm module) spawned with the
    /// arguments in its environment ([`TASK_ARGS_ENV`]); its stdout is its
    /// output once it exits 0.
    Proc,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Procedure => "procedure",
            Kind::Workflow => "workflow",
            Kind::Proc => "proc",
        }
    }

    fn parse(s: &str) -> Result<Kind> {
        match s {
            "procedure" => Ok(Kind::Procedure),
            "workflow" => Ok(Kind::Workflow),
            "proc" => Ok(Kind::Proc),
            _ => Err(Error::Invalid(format!("unknown task kind {s:?}"))),
        }
    }
}

/// A graph's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphStatus {
    Running,
    Success,
    Error,
    Cancelled,
}

impl GraphStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GraphStatus::Running => "running",
            GraphStatus::Success => "success",
            GraphStatus::Error => "error",
            GraphStatus::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Result<GraphStatus> {
        match s {
            "running" => Ok(GraphStatus::Running),
            "success" => Ok(GraphStatus::Success),
            "error" => Ok(GraphStatus::Error),
            "cancelled" => Ok(GraphStatus::Cancelled),
            _ => Err(Error::Precondition(format!("graph status {s:?}"))),
        }
    }
}

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    Waiting,
    Ready,
    Running,
    Success,
    Error,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Waiting => "waiting",
            TaskStatus::Ready => "ready",
            TaskStatus::Running => "running",
            TaskStatus::Success => "success",
            TaskStatus::Error => "error",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Result<TaskStatus> {
        Ok(match s {
            "waiting" => TaskStatus::Waiting,
            "ready" => TaskStatus::Ready,
            "running" => TaskStatus::Running,
            "success" => TaskStatus::Success,
            "error" => TaskStatus::Error,
            "cancelled" => TaskStatus::Cancelled,
            _ => return Err(Error::Precondition(format!("task status {s:?}"))),
        })
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Success | TaskStatus::Error | TaskStatus::Cancelled
        )
    }
}

/// One task as submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub id: String,
    pub kind: Kind,
    /// The procedure's name, or the workflow's function.
    pub target: String,
    /// A JSON array; `{"$task": "<id>"}` in it is that task's output.
    pub args: Json,
    /// May answer `{"$tasks": [...], "$result": id}`: a child graph.
    pub dynamic: bool,
    /// Runs at most this many times (0: [`ATTEMPTS_DEFAULT`]).
    pub attempts_max: u32,
    /// A workflow's queue and application version.
    pub queue: Option<String>,
    pub app_version: Option<String>,
    /// A proc's arguments (its argv after the program) and kind.
    pub argv: Vec<String>,
    pub proc_kind: crate::procs::Kind,
}

impl TaskSpec {
    /// A procedure task.
    pub fn procedure(id: &str, name: &str, args: Json) -> TaskSpec {
        TaskSpec {
            id: id.into(),
            kind: Kind::Procedure,
            target: name.into(),
            args,
            dynamic: false,
            attempts_max: 0,
            queue: None,
            app_version: None,
            argv: Vec::new(),
            proc_kind: crate::procs::Kind::Native,
        }
    }

    /// The spec a dynamic task's answer (or a client's JSON) gives:
    /// `{"id", "procedure"|"workflow"|"proc", "args", "dynamic",
    /// "attempts_max", "queue", "version", "argv", "wasm"}`.
    pub fn from_json(v: &Json) -> Result<TaskSpec> {
        let bad = |why: &str| Error::Invalid(format!("a task {why}"));
        let o = v.as_object().ok_or_else(|| bad("is a JSON object"))?;
        let text = |k: &str| o.get(k).and_then(Json::as_str).map(String::from);
        let id = text("id").ok_or_else(|| bad("has an \"id\""))?;
        let (kind, target) = match (text("procedure"), text("workflow"), text("proc")) {
            (Some(p), None, None) => (Kind::Procedure, p),
            (None, Some(w), None) => (Kind::Workflow, w),
            (None, None, Some(p)) => (Kind::Proc, p),
            _ => return Err(bad("names one \"procedure\", \"workflow\" or \"proc\"")),
        };
        let argv = match o.get("argv") {
            None => Vec::new(),
            Some(Json::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("has an \"argv\" of strings"))?,
            Some(_) => return Err(bad("has an \"argv\" of strings")),
        };
        let attempts_max = match o.get("attempts_max") {
            None => 0,
            Some(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad("has a whole \"attempts_max\""))?,
        };
        Ok(TaskSpec {
            id,
            kind,
            target,
            args: o.get("args").cloned().unwrap_or(Json::Array(vec![])),
            dynamic: o.get("dynamic").and_then(Json::as_bool).unwrap_or(false),
            attempts_max,
            queue: text("queue"),
            app_version: text("version"),
            argv,
            proc_kind: if o.get("wasm").and_then(Json::as_bool).unwrap_or(false) {
                crate::procs::Kind::Wasm
            } else {
                crate::procs::Kind::Native
            },
        })
    }

    /// The proc a proc task spawns, as `user` with `args` (JSON) in its
    /// environment — checked when the task is submitted, spawned when it
    /// runs.
    fn descriptor(
        &self,
        user: &str,
        pid: Option<Pid>,
        args: &[u8],
    ) -> Result<crate::procs::Descriptor> {
        if self.argv.len() > ARGV_MAX {
            return Err(Error::Invalid(format!(
                "task {}: an argv of {} entries exceeds {ARGV_MAX}",
                self.id,
                self.argv.len()
            )));
        }
        if args.len() > PROC_ARGS_BYTES_MAX {
            return Err(Error::TooLarge(format!(
                "task {}: a proc's arguments of {} bytes exceed {PROC_ARGS_BYTES_MAX}",
                self.id,
                args.len()
            )));
        }
        let args = String::from_utf8(args.to_vec())
            .map_err(|_| Error::Invalid(format!("task {}: arguments are not UTF-8", self.id)))?;
        let d = crate::procs::Descriptor {
            pid,
            parent: None,
            kind: self.proc_kind,
            class: crate::procs::Class::Lc,
            program: self.target.clone(),
            args: self.argv.clone(),
            env: vec![(TASK_ARGS_ENV.to_string(), args)],
            cores: 1,
            mem_mb: 0,
            home_node: None,
            restartable: false,
            max_restarts: 0,
            user: user.to_string(),
            host_paths: Vec::new(),
            scope: None,
            code: None,
        };
        d.validate()?;
        Ok(d)
    }
}

/// A graph as submitted: its tasks, the one whose output is the graph's
/// (default: the last submitted — for a held graph, the last added), and whether it is held open — its client adds
/// tasks ([`add_tasks_tx`]) until it closes it ([`close_tx`]), and it
/// does not end before (Ray's driver submitting as it goes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GraphSpec {
    pub tasks: Vec<TaskSpec>,
    pub result: Option<String>,
    pub held: bool,
}

impl GraphSpec {
    /// `{"tasks": [...], "result": id}` (a client's file), or a dynamic
    /// task's answer `{"$tasks": [...], "$result": id}` (`prefix` "$").
    pub fn from_json(v: &Json, prefix: &str) -> Result<GraphSpec> {
        let tasks = v
            .get(format!("{prefix}tasks"))
            .and_then(Json::as_array)
            .ok_or_else(|| Error::Invalid(format!("a graph has a \"{prefix}tasks\" array")))?;
        if tasks.len() > SUBMIT_TASKS_MAX {
            return Err(Error::TooLarge(format!(
                "{} tasks in one submission; at most {SUBMIT_TASKS_MAX}",
                tasks.len()
            )));
        }
        Ok(GraphSpec {
            tasks: tasks
                .iter()
                .map(TaskSpec::from_json)
                .collect::<Result<_>>()?,
            result: v
                .get(format!("{prefix}result"))
                .and_then(Json::as_str)
                .map(String::from),
            held: false,
        })
    }
}

/// A graph as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub id: String,
    pub realm: String,
    pub user: String,
    pub status: GraphStatus,
    pub result_task: Option<String>,
    pub held: bool,
    pub output: Option<Vec<u8>>,
    pub error: Option<String>,
    /// A child graph's parent graph and task.
    pub parent: Option<(String, String)>,
    pub created_us: i64,
    pub ended_us: Option<i64>,
    /// Its tasks, and how many have ended (success, error, cancelled).
    pub tasks: u64,
    pub ended: u64,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub kind: Kind,
    pub target: String,
    pub status: TaskStatus,
    pub deps: Vec<String>,
    pub attempts: u32,
    pub node_id: Option<String>,
    /// Its child graph or workflow, once made.
    pub child: Option<String>,
    pub output: Option<Vec<u8>>,
    pub error: Option<String>,
    pub created_us: i64,
    pub started_us: Option<i64>,
    pub ended_us: Option<i64>,
}

fn acting(who: &Caller, need: Role) -> Result<&str> {
    who.may(need, "use task graphs")?;
    Ok(who.realm())
}

fn cut_error(e: &str) -> String {
    if e.len() <= ERROR_BYTES_MAX {
        return e.to_string();
    }
    format!("{}…", crate::utf8_prefix(e, ERROR_BYTES_MAX))
}

/// A new graph id: `g` and 16 hex digits.
pub fn new_graph_id() -> Result<String> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|e| Error::Invalid(format!("no randomness: {e}")))?;
    Ok(format!(
        "g{}",
        raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

// ---------------------------------------------------------------- submitting

/// The ids `args` refers to (`{"$task": id}` anywhere in it), checked.
fn refs_of(args: &Json) -> Result<BTreeSet<String>> {
    fn walk(v: &Json, depth: usize, out: &mut BTreeSet<String>) -> Result<()> {
        if depth > JSON_DEPTH_MAX {
            return Err(Error::Invalid(format!(
                "a task's arguments nest deeper than {JSON_DEPTH_MAX}"
            )));
        }
        match v {
            Json::Object(o) => {
                if let (1, Some(id)) = (o.len(), o.get("$task")) {
                    let id = id
                        .as_str()
                        .ok_or_else(|| Error::Invalid("{\"$task\": id} takes a string".into()))?;
                    out.insert(id.to_string());
                    if out.len() > REFS_MAX {
                        return Err(Error::TooLarge(format!(
                            "a task takes at most {REFS_MAX} other tasks"
                        )));
                    }
                    return Ok(());
                }
                o.values().try_for_each(|v| walk(v, depth + 1, out))
            }
            Json::Array(a) => a.iter().try_for_each(|v| walk(v, depth + 1, out)),
            _ => Ok(()),
        }
    }
    if !args.is_array() {
        return Err(Error::Invalid("a task's arguments are a JSON array".into()));
    }
    let mut out = BTreeSet::new();
    walk(args, 0, &mut out)?;
    Ok(out)
}

/// `args` with each `{"$task": id}` replaced by `outputs[id]`.
fn resolve(args: &Json, outputs: &BTreeMap<String, Json>) -> Json {
    match args {
        Json::Object(o) => {
            if let (1, Some(Json::String(id))) = (o.len(), o.get("$task")) {
                if let Some(v) = outputs.get(id) {
                    return v.clone();
                }
            }
            Json::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), resolve(v, outputs)))
                    .collect(),
            )
        }
        Json::Array(a) => Json::Array(a.iter().map(|v| resolve(v, outputs)).collect()),
        v => v.clone(),
    }
}

/// Inserts `tasks` into graph `graph` of `realm` (which has `existing`
/// tasks already, `seq` the next one's order); returns how many are ready.
fn insert_tasks(
    tx: &mut dyn Tx,
    realm: &str,
    user: &str,
    graph: &str,
    tasks: &[TaskSpec],
    now: i64,
) -> Result<u64> {
    if tasks.len() > SUBMIT_TASKS_MAX {
        return Err(Error::TooLarge(format!(
            "{} tasks in one submission; at most {SUBMIT_TASKS_MAX}",
            tasks.len()
        )));
    }
    let k = p_key(tx);
    let (existing, mut seq): (u64, i64) = {
        let r = tx.query_one(
            "SELECT count(*), COALESCE(max(seq), 0) FROM graph_task \
             WHERE p_key = $1 AND realm = $2 AND graph_id = $3",
            params![k, realm, graph],
        )?;
        (r.get::<i64>(0)? as u64, r.get(1)?)
    };
    if existing + tasks.len() as u64 > TASKS_MAX {
        return Err(Error::TooLarge(format!(
            "graph {graph} would have {} tasks; at most {TASKS_MAX}",
            existing + tasks.len() as u64
        )));
    }
    // The status of each task named so far: this submission's, then the
    // graph's (read once each).
    let mut known: BTreeMap<String, TaskStatus> = BTreeMap::new();
    let mut ready = 0;
    for t in tasks {
        validate_name("task id", &t.id)?;
        match t.kind {
            // A program's path (the spawn checks it, below).
            Kind::Proc => {
                t.descriptor(user, None, b"[]")?;
            }
            _ => validate_name("task target", &t.target)?,
        }
        if t.attempts_max > ATTEMPTS_MAX {
            return Err(Error::Invalid(format!(
                "task {}: attempts_max {} exceeds {ATTEMPTS_MAX}",
                t.id, t.attempts_max
            )));
        }
        let args = serde_json::to_vec(&t.args)
            .map_err(|e| Error::Invalid(format!("task {}: arguments: {e}", t.id)))?;
        if args.len() > VALUE_BYTES_MAX {
            return Err(Error::TooLarge(format!(
                "task {}: arguments of {} bytes exceed {VALUE_BYTES_MAX}",
                t.id,
                args.len()
            )));
        }
        let (queue, version) = match t.kind {
            Kind::Procedure | Kind::Proc => (None, None),
            Kind::Workflow => {
                let q = t.queue.as_deref().ok_or_else(|| {
                    Error::Invalid(format!("workflow task {} names its queue", t.id))
                })?;
                let v = t.app_version.as_deref().ok_or_else(|| {
                    Error::Invalid(format!("workflow task {} names its version", t.id))
                })?;
                validate_name("queue", q)?;
                validate_name("application version", v)?;
                (Some(q), Some(v))
            }
        };
        if t.dynamic && t.kind != Kind::Procedure {
            return Err(Error::Invalid(format!(
                "task {}: only a procedure task is dynamic",
                t.id
            )));
        }
        let deps = refs_of(&t.args).map_err(|e| match e {
            Error::TooLarge(m) => Error::TooLarge(format!("task {}: {m}", t.id)),
            e => Error::Invalid(format!("task {}: {e}", t.id)),
        })?;
        let mut left = 0i64;
        for d in &deps {
            let s = match known.get(d) {
                Some(s) => *s,
                None => {
                    let s = tx
                        .query_opt(
                            "SELECT status FROM graph_task \
                             WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4",
                            params![k, realm, graph, d.as_str()],
                        )?
                        .map(|r| TaskStatus::parse(&r.get::<String>(0)?))
                        .transpose()?
                        .ok_or_else(|| {
                            Error::Invalid(format!(
                                "task {} takes task {d}, which is not submitted before it",
                                t.id
                            ))
                        })?;
                    known.insert(d.clone(), s);
                    s
                }
            };
            match s {
                TaskStatus::Success => {}
                TaskStatus::Error | TaskStatus::Cancelled => {
                    return Err(Error::Precondition(format!(
                        "task {} takes task {d}, which ended {}",
                        t.id,
                        s.as_str()
                    )))
                }
                _ => left += 1,
            }
        }
        seq += 1;
        let status = if left == 0 {
            TaskStatus::Ready
        } else {
            TaskStatus::Waiting
        };
        let attempts_max = match t.attempts_max {
            0 => ATTEMPTS_DEFAULT,
            n => n,
        };
        let n = tx.execute(
            "INSERT INTO graph_task (p_key, realm, graph_id, task, kind, target, args, dynamic, \
             queue, app_version, status, deps_left, attempts_max, seq, created_us, argv, proc_kind) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
             ON CONFLICT (p_key, realm, graph_id, task) DO NOTHING",
            params![
                k,
                realm,
                graph,
                t.id.as_str(),
                t.kind.as_str(),
                t.target.as_str(),
                args,
                i64::from(t.dynamic),
                queue,
                version,
                status.as_str(),
                left,
                i64::from(attempts_max),
                seq,
                now,
                (t.kind == Kind::Proc).then(|| Json::from(t.argv.clone()).to_string()),
                (t.kind == Kind::Proc).then(|| t.proc_kind.as_str())
            ],
        )?;
        if n == 0 {
            return Err(Error::AlreadyExists(format!(
                "task {} in graph {graph}",
                t.id
            )));
        }
        for d in &deps {
            tx.execute(
                "INSERT INTO graph_edge (p_key, realm, graph_id, src, dst) \
                 VALUES ($1, $2, $3, $4, $5)",
                params![k, realm, graph, d.as_str(), t.id.as_str()],
            )?;
        }
        known.insert(t.id.clone(), status);
        if status == TaskStatus::Ready {
            ready += 1;
        }
    }
    Ok(ready)
}

/// Makes graph `id` of `realm` for `user` with `spec`'s tasks (a child of
/// `parent` at `depth`). False: a graph of that id existed (left as it is).
#[allow(clippy::too_many_arguments)]
fn make_graph(
    tx: &mut dyn Tx,
    realm: &str,
    user: &str,
    pid: Option<&str>,
    id: &str,
    spec: &GraphSpec,
    parent: Option<(&str, &str)>,
    depth: i64,
    now: i64,
) -> Result<bool> {
    validate_name("graph id", id)?;
    if spec.tasks.is_empty() && !spec.held {
        return Err(Error::Invalid(format!(
            "graph {id} has no tasks (only a graph held open starts empty)"
        )));
    }
    let result = spec
        .result
        .clone()
        .or_else(|| spec.tasks.last().map(|t| t.id.clone()));
    if let Some(r) = &result {
        if !spec.held && !spec.tasks.iter().any(|t| &t.id == r) {
            return Err(Error::Invalid(format!(
                "graph {id}'s result {r} is not one of its tasks"
            )));
        }
    }
    let k = p_key(tx);
    let n = tx.execute(
        "INSERT INTO graph (p_key, realm, graph_id, user_name, status, result_task, held, \
         parent_graph, parent_task, depth, created_us, pid) \
         VALUES ($1, $2, $3, $4, 'running', $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (p_key, realm, graph_id) DO NOTHING",
        params![
            k,
            realm,
            id,
            user,
            result,
            i64::from(spec.held),
            parent.map(|p| p.0),
            parent.map(|p| p.1),
            depth,
            now,
            pid
        ],
    )?;
    if n == 0 {
        return Ok(false);
    }
    if insert_tasks(tx, realm, user, id, &spec.tasks, now)? > 0 {
        tx.notify(READY_CHANNEL, realm)?;
    }
    tx.notify(&graphs_channel(realm), &format!("{id} running"))?;
    Ok(true)
}

/// Procedure body: submits graph `id` with `spec`'s tasks, acting for the
/// caller's user; a second submit of an id is the first's (idempotency by
/// graph id), returned as it is.
pub fn submit_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &str,
    spec: &GraphSpec,
    now: i64,
) -> Result<Graph> {
    let realm = acting(who, Role::Member)?;
    crate::realms::metered(tx, realm, |tx| {
        let pid = who.pid().map(Pid::as_str);
        make_graph(tx, realm, who.user(), pid, id, spec, None, 0, now)?;
        get_in(tx, realm, id)?.ok_or_else(|| Error::Precondition(format!("graph {id} just made")))
    })
}

/// Procedure body: adds `tasks` to running graph `id` (they may take its
/// tasks, ended or not).
pub fn add_tasks_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    id: &str,
    tasks: &[TaskSpec],
    now: i64,
) -> Result<Graph> {
    let realm = acting(who, Role::Member)?;
    crate::realms::metered(tx, realm, |tx| {
        let g = get_in(tx, realm, id)?
            .ok_or_else(|| Error::NotFound(format!("graph {id} in realm {realm}")))?;
        if g.status != GraphStatus::Running {
            return Err(Error::Precondition(format!(
                "graph {id} has ended ({}): no task is added to it",
                g.status.as_str()
            )));
        }
        if insert_tasks(tx, realm, who.user(), id, tasks, now)? > 0 {
            tx.notify(READY_CHANNEL, realm)?;
        }
        get_in(tx, realm, id)?.ok_or_else(|| Error::Precondition(format!("graph {id}")))
    })
}

// ---------------------------------------------------------------- reading

fn graph_of(tx: &mut dyn Tx, realm: &str, r: &Row) -> Result<Graph> {
    let id: String = r.get(0)?;
    let k = p_key(tx);
    let counts = tx.query_one(
        "SELECT count(*), COALESCE(sum(CASE WHEN status IN ('success', 'error', 'cancelled') \
         THEN 1 ELSE 0 END), 0) FROM graph_task WHERE p_key = $1 AND realm = $2 AND graph_id = $3",
        params![k, realm, id.as_str()],
    )?;
    let parent = match (r.get::<Option<String>>(6)?, r.get::<Option<String>>(7)?) {
        (Some(g), Some(t)) => Some((g, t)),
        _ => None,
    };
    Ok(Graph {
        id,
        realm: realm.to_string(),
        user: r.get(1)?,
        status: GraphStatus::parse(&r.get::<String>(2)?)?,
        result_task: r.get(3)?,
        held: r.get::<i64>(10)? != 0,
        output: r.get(4)?,
        error: r.get(5)?,
        parent,
        created_us: r.get(8)?,
        ended_us: r.get(9)?,
        tasks: counts.get::<i64>(0)? as u64,
        ended: counts.get::<i64>(1)? as u64,
    })
}

fn get_in(tx: &mut dyn Tx, realm: &str, id: &str) -> Result<Option<Graph>> {
    let k = p_key(tx);
    let row = tx.query_opt(
        "SELECT graph_id, user_name, status, result_task, output, error, parent_graph, \
         parent_task, created_us, ended_us, held FROM graph \
         WHERE p_key = $1 AND realm = $2 AND graph_id = $3",
        params![k, realm, id],
    )?;
    row.map(|r| graph_of(tx, realm, &r)).transpose()
}

/// Procedure body: graph `id`'s status, if it exists (one row, not its
/// tasks' counts: what a wait asks each time it is woken).
pub fn status_tx(tx: &mut dyn Tx, who: &Caller, id: &str) -> Result<Option<GraphStatus>> {
    let realm = acting(who, Role::Reader)?;
    let k = p_key(tx);
    tx.query_opt(
        "SELECT status FROM graph WHERE p_key = $1 AND realm = $2 AND graph_id = $3",
        params![k, realm, id],
    )?
    .map(|r| GraphStatus::parse(&r.get::<String>(0)?))
    .transpose()
}

/// Procedure body: graph `id`, if any.
pub fn get_tx(tx: &mut dyn Tx, who: &Caller, id: &str) -> Result<Option<Graph>> {
    get_in(tx, acting(who, Role::Reader)?, id)
}

fn task_of(r: &Row, deps: Vec<String>) -> Result<Task> {
    Ok(Task {
        id: r.get(0)?,
        kind: Kind::parse(&r.get::<String>(1)?)?,
        target: r.get(2)?,
        status: TaskStatus::parse(&r.get::<String>(3)?)?,
        deps,
        attempts: u32::try_from(r.get::<i64>(4)?).unwrap_or(u32::MAX),
        node_id: r.get(5)?,
        child: r.get(6)?,
        output: r.get(7)?,
        error: r.get(8)?,
        created_us: r.get(9)?,
        started_us: r.get(10)?,
        ended_us: r.get(11)?,
    })
}

/// Procedure body: task `task` of graph `graph`, if any (without its deps).
pub fn task_tx(tx: &mut dyn Tx, who: &Caller, graph: &str, task: &str) -> Result<Option<Task>> {
    let realm = acting(who, Role::Reader)?;
    let k = p_key(tx);
    tx.query_opt(
        "SELECT task, kind, target, status, attempts, node_id, child, output, error, \
         created_us, started_us, ended_us FROM graph_task \
         WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4",
        params![k, realm, graph, task],
    )?
    .map(|r| task_of(&r, Vec::new()))
    .transpose()
}

/// Procedure body: graph `id` and its first [`SHOW_TASKS_MAX`] tasks, in
/// submission order, each with the tasks it takes.
pub fn show_tx(tx: &mut dyn Tx, who: &Caller, id: &str) -> Result<(Graph, Vec<Task>)> {
    let realm = acting(who, Role::Reader)?;
    let g = get_in(tx, realm, id)?
        .ok_or_else(|| Error::NotFound(format!("graph {id} in realm {realm}")))?;
    let k = p_key(tx);
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &tx.query(
        "SELECT dst, src FROM graph_edge WHERE p_key = $1 AND realm = $2 AND graph_id = $3 \
         ORDER BY dst, src LIMIT $4",
        params![k, realm, id, (SHOW_TASKS_MAX * 4) as i64],
    )? {
        deps.entry(r.get(0)?).or_default().push(r.get(1)?);
    }
    let rows = tx.query(
        "SELECT task, kind, target, status, attempts, node_id, child, output, error, \
         created_us, started_us, ended_us FROM graph_task \
         WHERE p_key = $1 AND realm = $2 AND graph_id = $3 ORDER BY seq LIMIT $4",
        params![k, realm, id, SHOW_TASKS_MAX as i64],
    )?;
    let tasks = rows
        .iter()
        .map(|r| {
            let id: String = r.get(0)?;
            task_of(r, deps.remove(&id).unwrap_or_default())
        })
        .collect::<Result<_>>()?;
    Ok((g, tasks))
}

/// Procedure body: the realm's graphs (top-level and children), newest
/// first, at most `limit` (≤ [`LIST_MAX`]), optionally of one status.
pub fn list_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    status: Option<GraphStatus>,
    limit: usize,
) -> Result<Vec<Graph>> {
    let realm = acting(who, Role::Reader)?;
    let k = p_key(tx);
    let limit = limit.clamp(1, LIST_MAX) as i64;
    let rows = match status {
        Some(s) => tx.query(
            "SELECT graph_id, user_name, status, result_task, output, error, parent_graph, \
             parent_task, created_us, ended_us, held FROM graph \
             WHERE p_key = $1 AND realm = $2 AND status = $3 ORDER BY created_us DESC LIMIT $4",
            params![k, realm, s.as_str(), limit],
        )?,
        None => tx.query(
            "SELECT graph_id, user_name, status, result_task, output, error, parent_graph, \
             parent_task, created_us, ended_us, held FROM graph \
             WHERE p_key = $1 AND realm = $2 ORDER BY created_us DESC LIMIT $3",
            params![k, realm, limit],
        )?,
    };
    rows.iter().map(|r| graph_of(tx, realm, r)).collect()
}

// ---------------------------------------------------------------- running

/// A task a node claimed: what its run needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub realm: String,
    pub graph: String,
    pub task: String,
    pub kind: Kind,
    /// Its run: the claim's `attempts` (a run of an older claim is refused).
    pub attempt: i64,
}

/// Procedure body (a node's scheduler, on one partition): claims up to
/// `max` ready tasks for node `node_id`, at most
/// [`CLAIM_PER_REALM_MAX`] of a realm, realms in turn from the one after
/// `after` (the last realm the caller claimed from; "" at first). On
/// PostgreSQL the rows another node is claiming are skipped, not waited
/// for.
pub fn claim_tx(
    tx: &mut dyn Tx,
    node_id: &str,
    max: usize,
    after: &str,
    now: i64,
) -> Result<Vec<Claimed>> {
    let k = p_key(tx);
    let max = max.clamp(1, CLAIM_MAX);
    // Realms in turn: those after the last one claimed from (`after`),
    // then from the first — so no realm waits behind more than
    // CLAIM_REALMS_MAX others, however many have tasks ready.
    let mut realms: Vec<String> = tx
        .query(
            "SELECT DISTINCT realm FROM graph_task WHERE p_key = $1 AND status = 'ready' \
             AND realm > $2 ORDER BY realm LIMIT $3",
            params![k, after, CLAIM_REALMS_MAX as i64],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect::<std::result::Result<_, _>>()?;
    if realms.len() < CLAIM_REALMS_MAX {
        let from_start = tx.query(
            "SELECT DISTINCT realm FROM graph_task WHERE p_key = $1 AND status = 'ready' \
             AND realm <= $2 ORDER BY realm LIMIT $3",
            params![k, after, (CLAIM_REALMS_MAX - realms.len()) as i64],
        )?;
        for r in &from_start {
            realms.push(r.get(0)?);
        }
    }
    let per_realm = (max / realms.len().max(1)).clamp(1, CLAIM_PER_REALM_MAX);
    let select = match tx.dialect() {
        Dialect::Sqlite => {
            "SELECT graph_id, task, kind, attempts FROM graph_task \
             WHERE p_key = $1 AND status = 'ready' AND realm = $2 \
             ORDER BY created_us, seq LIMIT $3"
        }
        Dialect::Postgres => {
            "SELECT graph_id, task, kind, attempts FROM graph_task \
             WHERE p_key = $1 AND status = 'ready' AND realm = $2 \
             ORDER BY created_us, seq LIMIT $3 FOR UPDATE SKIP LOCKED"
        }
    };
    let mut out = Vec::new();
    for realm in realms {
        for t in &tx.query(select, params![k, realm.as_str(), per_realm as i64])? {
            let (graph, task): (String, String) = (t.get(0)?, t.get(1)?);
            let attempt = t.get::<i64>(3)? + 1;
            let n = tx.execute(
                "UPDATE graph_task SET status = 'running', node_id = $5, attempts = $6, \
                 started_us = $7 \
                 WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4 \
                   AND status = 'ready'",
                params![
                    k,
                    realm.as_str(),
                    graph.as_str(),
                    task.as_str(),
                    node_id,
                    attempt,
                    now
                ],
            )?;
            if n == 1 {
                out.push(Claimed {
                    realm: realm.clone(),
                    graph,
                    task,
                    kind: Kind::parse(&t.get::<String>(2)?)?,
                    attempt,
                });
            }
        }
        if out.len() >= max {
            break;
        }
    }
    Ok(out)
}

/// What a run's claimed task holds.
struct Running {
    user: String,
    target: String,
    args: Vec<u8>,
    dynamic: bool,
    queue: Option<String>,
    app_version: Option<String>,
    depth: i64,
    argv: Option<String>,
    proc_kind: Option<String>,
    /// The proc the graph acts for (its submitter's), if any.
    pid: Option<String>,
}

/// The claim `c` of node `node_id`, still its own: else the run is refused.
fn still_claimed(tx: &mut dyn Tx, c: &Claimed, node_id: &str) -> Result<Running> {
    let k = p_key(tx);
    let r = tx
        .query_opt(
            "SELECT g.user_name, t.target, t.args, t.dynamic, t.queue, t.app_version, g.depth, \
             t.argv, t.proc_kind, g.pid \
             FROM graph_task t JOIN graph g \
               ON g.p_key = t.p_key AND g.realm = t.realm AND g.graph_id = t.graph_id \
             WHERE t.p_key = $1 AND t.realm = $2 AND t.graph_id = $3 AND t.task = $4 \
               AND t.status = 'running' AND t.node_id = $5 AND t.attempts = $6 \
               AND t.child IS NULL AND g.status = 'running'",
            params![
                k,
                c.realm.as_str(),
                c.graph.as_str(),
                c.task.as_str(),
                node_id,
                c.attempt
            ],
        )?
        .ok_or_else(|| {
            Error::Precondition(format!(
                "task {}/{} is no longer claimed by node {node_id} (given back, or its graph ended)",
                c.graph, c.task
            ))
        })?;
    Ok(Running {
        user: r.get(0)?,
        target: r.get(1)?,
        args: r.get(2)?,
        dynamic: r.get::<i64>(3)? != 0,
        queue: r.get(4)?,
        app_version: r.get(5)?,
        depth: r.get(6)?,
        argv: r.get(7)?,
        proc_kind: r.get(8)?,
        pid: r.get(9)?,
    })
}

/// The arguments of a task, its references replaced by the outputs of
/// the tasks they name (each must be JSON).
fn resolved_args(tx: &mut dyn Tx, c: &Claimed, args: &[u8]) -> Result<Vec<u8>> {
    let args: Json = serde_json::from_slice(args)
        .map_err(|e| Error::Precondition(format!("task {}'s stored arguments: {e}", c.task)))?;
    let refs = refs_of(&args)?;
    if refs.is_empty() {
        return serde_json::to_vec(&args).map_err(|e| Error::Precondition(e.to_string()));
    }
    let k = p_key(tx);
    let mut outputs = BTreeMap::new();
    for id in refs {
        let out: Option<Vec<u8>> = tx
            .query_opt(
                "SELECT output FROM graph_task WHERE p_key = $1 AND realm = $2 \
                 AND graph_id = $3 AND task = $4 AND status = 'success'",
                params![k, c.realm.as_str(), c.graph.as_str(), id.as_str()],
            )?
            .map(|r| r.get(0))
            .transpose()?
            .flatten();
        let out = out
            .ok_or_else(|| Error::Precondition(format!("task {} ran before task {id}", c.task)))?;
        let v: Json = serde_json::from_slice(&out).map_err(|_| {
            Error::Invalid(format!(
                "task {}'s output, which task {} takes, is not JSON",
                id, c.task
            ))
        })?;
        outputs.insert(id, v);
    }
    let bytes = serde_json::to_vec(&resolve(&args, &outputs))
        .map_err(|e| Error::Precondition(e.to_string()))?;
    if bytes.len() > VALUE_BYTES_MAX {
        return Err(Error::TooLarge(format!(
            "task {}'s arguments with its inputs are {} bytes; at most {VALUE_BYTES_MAX}",
            c.task,
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// The task ended with its output.
    Done,
    /// It made a child graph (a dynamic task) or started a workflow, and
    /// ends when that does.
    Waits(String),
}

/// Procedure body (the scheduler's, on the task's partition): runs claim
/// `c` of node `node_id` — its procedure in this transaction, or its
/// workflow's start — and records its end, readying the tasks after it.
/// An error rolls the whole run back; the caller records it with
/// [`failed_tx`].
pub fn run_tx(
    tx: &mut dyn Tx,
    sandbox: &Sandbox,
    c: &Claimed,
    node_id: &str,
    now: i64,
) -> Result<Ran> {
    let t = still_claimed(tx, c, node_id)?;
    let args = resolved_args(tx, c, &t.args)?;
    let path = format!("{}/{}", c.graph, c.task);
    let acts_for = t.pid.clone().map(Pid::new).transpose()?;
    let who = Caller::of_graph_task(&c.realm, &t.user, &path, acts_for)?;
    match c.kind {
        Kind::Procedure => {
            let mut out = None;
            for path in [CallPath::Write, CallPath::Read] {
                match procedures::call_tx(tx, sandbox, &who, &t.target, &args, now, path)? {
                    Called::Ran(o, unrecorded) => {
                        // A writer's transaction records its proc's events.
                        debug_assert!(unrecorded.is_empty(), "recorded in the batch");
                        out = Some(o.result);
                        break;
                    }
                    Called::OtherPath { read_only: true } => continue,
                    other => {
                        return Err(Error::Precondition(format!(
                            "procedure {} on the writer answered {other:?}",
                            t.target
                        )))
                    }
                }
            }
            let out = out
                .ok_or_else(|| Error::Precondition(format!("procedure {} never ran", t.target)))?;
            if out.len() > VALUE_BYTES_MAX {
                return Err(Error::TooLarge(format!(
                    "task {}'s output of {} bytes exceeds {VALUE_BYTES_MAX}",
                    c.task,
                    out.len()
                )));
            }
            if t.dynamic {
                if let Some(spec) = dynamic_spec(&out)? {
                    let child = format!("{}:{}", c.graph, c.task);
                    if child.len() > ID_BYTES_MAX || t.depth + 1 > DEPTH_MAX {
                        return Err(Error::Invalid(format!(
                            "task {}'s child graph would nest deeper than {DEPTH_MAX} \
                             or have an id longer than {ID_BYTES_MAX}",
                            c.task
                        )));
                    }
                    crate::realms::metered(tx, &c.realm, |tx| {
                        make_graph(
                            tx,
                            &c.realm,
                            &t.user,
                            t.pid.as_deref(),
                            &child,
                            &spec,
                            Some((&c.graph, &c.task)),
                            t.depth + 1,
                            now,
                        )
                    })?;
                    waits_on(tx, c, &child)?;
                    return Ok(Ran::Waits(child));
                }
            }
            complete(tx, &c.realm, &c.graph, &c.task, &out, now)?;
            Ok(Ran::Done)
        }
        Kind::Workflow => {
            let id = WorkflowId::new(format!("{}:{}", c.graph, c.task))?;
            let spec = workflows::StartSpec {
                id: id.clone(),
                name: t.target.clone(),
                app_version: t.app_version.clone().unwrap_or_default(),
                input: args,
                queue: t.queue.clone(),
                priority: 0,
                executor: None,
            };
            workflows::start_tx(tx, &who, &spec, now)?;
            waits_for_end(tx, c, id.as_str())?;
            Ok(Ran::Waits(id.to_string()))
        }
        Kind::Proc => {
            let argv: Vec<String> = serde_json::from_str(t.argv.as_deref().unwrap_or("[]"))
                .map_err(|e| Error::Precondition(format!("task {}'s stored argv: {e}", c.task)))?;
            let spec = TaskSpec {
                argv,
                proc_kind: t.proc_kind.as_deref().unwrap_or("native").parse()?,
                ..TaskSpec::procedure(&c.task, &t.target, Json::Null)
            };
            // A pid per run: a run that failed leaves its proc's record.
            let pid = Pid::new(format!("{}:{}:{}", c.graph, c.task, c.attempt))?;
            let d = spec.descriptor(&t.user, Some(pid.clone()), &args)?;
            crate::procs::may_spawn(&who, std::slice::from_ref(&d))?;
            crate::procs::spawn_tx(tx, &c.realm, &pid, &d, now)?;
            waits_for_end(tx, c, pid.as_str())?;
            Ok(Ran::Waits(pid.to_string()))
        }
    }
}

/// A dynamic task's answer, if it is a child graph's spec.
fn dynamic_spec(out: &[u8]) -> Result<Option<GraphSpec>> {
    let Ok(v) = serde_json::from_slice::<Json>(out) else {
        return Ok(None);
    };
    if v.get("$tasks").is_none() {
        return Ok(None);
    }
    GraphSpec::from_json(&v, "$").map(Some)
}

/// Claim `c` now waits for `child`, a workflow or a proc, whose end is
/// settled by a scheduler ([`settle_children_tx`]): told on
/// [`WAITING_CHANNEL`].
fn waits_for_end(tx: &mut dyn Tx, c: &Claimed, child: &str) -> Result<()> {
    waits_on(tx, c, child)?;
    tx.notify(WAITING_CHANNEL, c.realm.as_str())?;
    Ok(())
}

/// Claim `c` now waits for `child` (its node no longer holds it).
fn waits_on(tx: &mut dyn Tx, c: &Claimed, child: &str) -> Result<()> {
    let k = p_key(tx);
    tx.execute(
        "UPDATE graph_task SET child = $5, node_id = NULL \
         WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4",
        params![
            k,
            c.realm.as_str(),
            c.graph.as_str(),
            c.task.as_str(),
            child
        ],
    )?;
    Ok(())
}

/// Task `task` of graph `graph` ended with `output`: the tasks that take
/// it lose a dependency (those at none are ready), and the graph ends
/// with it when it was the last.
fn complete(
    tx: &mut dyn Tx,
    realm: &str,
    graph: &str,
    task: &str,
    output: &[u8],
    now: i64,
) -> Result<()> {
    let k = p_key(tx);
    let n = tx.execute(
        "UPDATE graph_task SET status = 'success', output = $5, error = NULL, ended_us = $6 \
         WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4 \
           AND status = 'running'",
        params![k, realm, graph, task, output, now],
    )?;
    if n != 1 {
        return Err(Error::Precondition(format!(
            "task {graph}/{task} ended while not running"
        )));
    }
    // Each task that takes it, by its key (a statement over the graph's
    // waiting tasks would scan them all, per task: a graph's run would
    // cost the square of its size).
    let after = tx.query(
        "SELECT dst FROM graph_edge WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND src = $4",
        params![k, realm, graph, task],
    )?;
    if !after.is_empty() {
        let mut ready = 0;
        for r in &after {
            let dst: String = r.get(0)?;
            tx.execute(
                "UPDATE graph_task SET deps_left = deps_left - 1 \
                 WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4 \
                   AND status = 'waiting'",
                params![k, realm, graph, dst.as_str()],
            )?;
            ready += tx.execute(
                "UPDATE graph_task SET status = 'ready' \
                 WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4 \
                   AND status = 'waiting' AND deps_left = 0",
                params![k, realm, graph, dst.as_str()],
            )?;
        }
        if ready > 0 {
            tx.notify(READY_CHANNEL, realm)?;
        }
    } else {
        // Nothing waits for it: it may have been the graph's last.
        let unfinished = tx
            .query_opt(
                "SELECT task FROM graph_task WHERE p_key = $1 AND realm = $2 AND graph_id = $3 \
                 AND status IN ('waiting', 'ready', 'running') LIMIT 1",
                params![k, realm, graph],
            )?
            .is_some();
        if !unfinished {
            let ended = Announcement::Task {
                id: task.into(),
                status: TaskStatus::Success,
            };
            announce(tx, realm, graph, ended)?;
            return end_if_done(tx, realm, graph, now);
        }
    }
    let ended = Announcement::Task {
        id: task.into(),
        status: TaskStatus::Success,
    };
    announce(tx, realm, graph, ended)
}

/// Ends graph `graph` with its result's output, unless it is held open.
fn end_if_done(tx: &mut dyn Tx, realm: &str, graph: &str, now: i64) -> Result<()> {
    let k = p_key(tx);
    let g = tx.query_one(
        "SELECT held, result_task FROM graph WHERE p_key = $1 AND realm = $2 AND graph_id = $3",
        params![k, realm, graph],
    )?;
    if g.get::<i64>(0)? != 0 {
        return Ok(());
    }
    let out: Option<Vec<u8>> = match g.get::<Option<String>>(1)? {
        Some(t) => tx
            .query_opt(
                "SELECT output FROM graph_task WHERE p_key = $1 AND realm = $2 AND graph_id = $3 \
                 AND task = $4",
                params![k, realm, graph, t.as_str()],
            )?
            .map(|r| r.get(0))
            .transpose()?
            .flatten(),
        // A held graph submitted empty: its last task's.
        None => tx
            .query_opt(
                "SELECT output FROM graph_task WHERE p_key = $1 AND realm = $2 AND graph_id = $3 \
                 ORDER BY seq DESC LIMIT 1",
                params![k, realm, graph],
            )?
            .map(|r| r.get(0))
            .transpose()?
            .flatten(),
    };
    end_graph(
        tx,
        realm,
        graph,
        Ended::Success(out.unwrap_or_default()),
        now,
    )
}

/// Procedure body: closes held graph `id` — no task is added from now
/// on, and it ends once its tasks have (at once, if they have).
pub fn close_tx(tx: &mut dyn Tx, who: &Caller, id: &str, now: i64) -> Result<Graph> {
    let realm = acting(who, Role::Member)?;
    let k = p_key(tx);
    tx.execute(
        "UPDATE graph SET held = 0 WHERE p_key = $1 AND realm = $2 AND graph_id = $3",
        params![k, realm, id],
    )?;
    let g = get_in(tx, realm, id)?
        .ok_or_else(|| Error::NotFound(format!("graph {id} in realm {realm}")))?;
    if g.status == GraphStatus::Running && g.ended == g.tasks {
        end_if_done(tx, realm, id, now)?;
        return get_in(tx, realm, id)?.ok_or_else(|| Error::Precondition(format!("graph {id}")));
    }
    Ok(g)
}

/// How a graph ends.
enum Ended {
    Success(Vec<u8>),
    Error(String),
    Cancelled,
}

/// Ends graph `graph`: on error or cancellation its unfinished tasks are
/// cancelled, with their child graphs and workflows; a child graph's end
/// ends the task of its parent that waits for it.
fn end_graph(tx: &mut dyn Tx, realm: &str, graph: &str, how: Ended, now: i64) -> Result<()> {
    let k = p_key(tx);
    let (status, output, error): (GraphStatus, Value, Value) = match &how {
        Ended::Success(o) => (GraphStatus::Success, Value::Blob(o.clone()), Value::Null),
        Ended::Error(e) => (GraphStatus::Error, Value::Null, Value::Text(cut_error(e))),
        Ended::Cancelled => (GraphStatus::Cancelled, Value::Null, Value::Null),
    };
    let n = tx.execute(
        "UPDATE graph SET status = $4, output = $5, error = $6, ended_us = $7 \
         WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND status = 'running'",
        params![k, realm, graph, status.as_str(), output, error, now],
    )?;
    if n == 0 {
        return Ok(());
    }
    if !matches!(how, Ended::Success(_)) {
        // What still runs under it stops: child graphs, workflows.
        let waiting = tx.query(
            "SELECT task, kind, child, user_name FROM graph_task \
             JOIN graph USING (p_key, realm, graph_id) \
             WHERE graph_task.p_key = $1 AND graph_task.realm = $2 AND graph_task.graph_id = $3 \
               AND graph_task.status = 'running' AND child IS NOT NULL",
            params![k, realm, graph],
        )?;
        tx.execute(
            "UPDATE graph_task SET status = 'cancelled', node_id = NULL, ended_us = $4 \
             WHERE p_key = $1 AND realm = $2 AND graph_id = $3 \
               AND status IN ('waiting', 'ready', 'running')",
            params![k, realm, graph, now],
        )?;
        for w in &waiting {
            let (task, kind, child, user): (String, String, String, String) =
                (w.get(0)?, w.get(1)?, w.get(2)?, w.get(3)?);
            match Kind::parse(&kind)? {
                Kind::Procedure => end_graph(tx, realm, &child, Ended::Cancelled, now)?,
                Kind::Workflow => {
                    let task = format!("{graph}/{task}");
                    let who = Caller::of_graph_task(realm, &user, &task, None)?;
                    match workflows::cancel_tx(tx, &who, &WorkflowId::new(child)?, now) {
                        Ok(_) | Err(Error::NotFound(_)) | Err(Error::Precondition(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Kind::Proc => match crate::procs::evict_tx(tx, realm, &Pid::new(child)?, now) {
                    Ok(()) | Err(Error::NotFound(_)) | Err(Error::Precondition(_)) => {}
                    Err(e) => return Err(e),
                },
            }
        }
    }
    announce(tx, realm, graph, Announcement::Graph(status))?;
    tx.notify(
        &graphs_channel(realm),
        &format!("{graph} {}", status.as_str()),
    )?;
    // A child graph: the task that waits for it ends with it.
    let parent = tx.query_one(
        "SELECT parent_graph, parent_task FROM graph WHERE p_key = $1 AND realm = $2 AND graph_id = $3",
        params![k, realm, graph],
    )?;
    if let (Some(pg), Some(pt)) = (
        parent.get::<Option<String>>(0)?,
        parent.get::<Option<String>>(1)?,
    ) {
        child_ended(tx, realm, &pg, &pt, graph, how, now)?;
    }
    Ok(())
}

/// Child `child` (a graph or a workflow) of task `task` of graph `graph`
/// ended `how`.
fn child_ended(
    tx: &mut dyn Tx,
    realm: &str,
    graph: &str,
    task: &str,
    child: &str,
    how: Ended,
    now: i64,
) -> Result<()> {
    let k = p_key(tx);
    let still = tx
        .query_opt(
            "SELECT task FROM graph_task WHERE p_key = $1 AND realm = $2 AND graph_id = $3 \
             AND task = $4 AND status = 'running' AND child = $5",
            params![k, realm, graph, task, child],
        )?
        .is_some();
    if !still {
        return Ok(());
    }
    match how {
        Ended::Success(out) => complete(tx, realm, graph, task, &out, now),
        Ended::Error(e) => fail_for_good(tx, realm, graph, task, &format!("{child}: {e}"), now),
        Ended::Cancelled => {
            fail_for_good(tx, realm, graph, task, &format!("{child} cancelled"), now)
        }
    }
}

/// Task `task` ended in error, not to be tried again: so does its graph.
fn fail_for_good(
    tx: &mut dyn Tx,
    realm: &str,
    graph: &str,
    task: &str,
    error: &str,
    now: i64,
) -> Result<()> {
    let k = p_key(tx);
    tx.execute(
        "UPDATE graph_task SET status = 'error', error = $5, ended_us = $6 \
         WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4",
        params![k, realm, graph, task, cut_error(error), now],
    )?;
    announce(
        tx,
        realm,
        graph,
        Announcement::Task {
            id: task.into(),
            status: TaskStatus::Error,
        },
    )?;
    end_graph(
        tx,
        realm,
        graph,
        Ended::Error(format!("task {task}: {error}")),
        now,
    )
}

/// Procedure body: the run of claim `c` failed with `error` (its
/// transaction rolled back): the task is ready again while it has runs
/// left, else it and its graph end in error. A claim no longer the node's
/// is left alone.
pub fn failed_tx(
    tx: &mut dyn Tx,
    c: &Claimed,
    node_id: &str,
    error: &Error,
    now: i64,
) -> Result<()> {
    let k = p_key(tx);
    let still = tx.query_opt(
        "SELECT attempts_max FROM graph_task WHERE p_key = $1 AND realm = $2 AND graph_id = $3 \
         AND task = $4 AND status = 'running' AND node_id = $5 AND attempts = $6 AND child IS NULL",
        params![
            k,
            c.realm.as_str(),
            c.graph.as_str(),
            c.task.as_str(),
            node_id,
            c.attempt
        ],
    )?;
    if still.is_none() {
        return Ok(());
    }
    let text = error.to_string();
    // What no run will mend is not tried again: bad arguments, a missing
    // procedure, a refusal.
    let lasting = matches!(
        error,
        Error::Invalid(_) | Error::NotFound(_) | Error::Denied(_) | Error::TooLarge(_)
    );
    if !lasting {
        return run_failed(tx, &c.realm, &c.graph, &c.task, &text, now);
    }
    fail_for_good(tx, &c.realm, &c.graph, &c.task, &text, now)
}

/// Procedure body: cancels graph `id` (and what runs under it); a graph
/// cancelled already is returned as it is, one that ended otherwise is
/// refused.
pub fn cancel_tx(tx: &mut dyn Tx, who: &Caller, id: &str, now: i64) -> Result<Graph> {
    let realm = acting(who, Role::Member)?;
    let g = get_in(tx, realm, id)?
        .ok_or_else(|| Error::NotFound(format!("graph {id} in realm {realm}")))?;
    match g.status {
        GraphStatus::Running => end_graph(tx, realm, id, Ended::Cancelled, now)?,
        GraphStatus::Cancelled => {}
        s => {
            return Err(Error::Precondition(format!(
                "graph {id} has ended ({}): there is nothing to cancel",
                s.as_str()
            )))
        }
    }
    get_in(tx, realm, id)?.ok_or_else(|| Error::Precondition(format!("graph {id}")))
}

/// Procedure body (on each partition): gives back the tasks node
/// `node_id` claimed and did not end — it was lost, or it starts again
/// after a crash — so any node runs them. Returns how many.
pub fn requeue_node_tx(tx: &mut dyn Tx, node_id: &str) -> Result<u64> {
    let k = p_key(tx);
    let realms = tx.query(
        "SELECT DISTINCT realm FROM graph_task WHERE p_key = $1 AND node_id = $2 \
         AND status = 'running' AND child IS NULL",
        params![k, node_id],
    )?;
    let n = tx.execute(
        "UPDATE graph_task SET status = 'ready', node_id = NULL \
         WHERE p_key = $1 AND node_id = $2 AND status = 'running' AND child IS NULL",
        params![k, node_id],
    )?;
    for r in &realms {
        tx.notify(READY_CHANNEL, &r.get::<String>(0)?)?;
    }
    Ok(n)
}

/// Node `node_id` is lost (the cluster's leader, once, beside
/// `procs::node_lost`) or starts again: [`requeue_node_tx`] on every
/// partition. Returns how many tasks it gave back.
pub async fn requeue_node(store: &tabos_store::Store, node_id: &str) -> Result<u64> {
    let mut n = 0;
    for p in 0..store.partitions() {
        let id = node_id.to_string();
        n += store
            .run(tabos_store::PKey(p), move |tx| requeue_node_tx(tx, &id))
            .await?;
    }
    Ok(n)
}

/// Procedure body: the tasks of `realm` waiting for a workflow or a proc
/// that has ended end with it — a workflow's success with its output, a
/// proc's exit 0 with its stdout; a failed workflow fails its task, a
/// failed proc (an exit status not 0, evicted, failed) is a failed run,
/// tried again while the task has runs left. Returns how many. Run when
/// `workflows::ENDED_CHANNEL` or `procs::ENDED_CHANNEL` names the realm,
/// and at a scheduler's start (what ended while no node listened).
pub fn settle_children_tx(tx: &mut dyn Tx, realm: &str, now: i64) -> Result<u64> {
    let k = p_key(tx);
    let rows = tx.query(
        "SELECT t.graph_id, t.task, w.workflow_id, w.status, w.output, w.error \
         FROM graph_task t JOIN workflow w \
           ON w.p_key = t.p_key AND w.realm = t.realm AND w.workflow_id = t.child \
         WHERE t.p_key = $1 AND t.realm = $2 AND t.status = 'running' AND t.kind = 'workflow' \
           AND w.status IN ('success', 'error', 'cancelled') \
         LIMIT $3",
        params![k, realm, CLAIM_MAX as i64],
    )?;
    for r in &rows {
        let (graph, task, wf, status): (String, String, String, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        let how = match workflows::Status::parse(&status)? {
            workflows::Status::Success => {
                Ended::Success(r.get::<Option<Vec<u8>>>(4)?.unwrap_or_default())
            }
            workflows::Status::Error => {
                Ended::Error(r.get::<Option<String>>(5)?.unwrap_or_default())
            }
            _ => Ended::Cancelled,
        };
        child_ended(tx, realm, &graph, &task, &wf, how, now)?;
    }
    let procs = tx.query(
        "SELECT t.graph_id, t.task, p.pid, p.state, p.exit_status, p.error \
         FROM graph_task t JOIN proc p \
           ON p.p_key = t.p_key AND p.realm = t.realm AND p.pid = t.child \
         WHERE t.p_key = $1 AND t.realm = $2 AND t.status = 'running' AND t.kind = 'proc' \
           AND p.state IN ('exited', 'evicted', 'failed') \
         LIMIT $3",
        params![k, realm, CLAIM_MAX as i64],
    )?;
    for r in &procs {
        let (graph, task, pid, state): (String, String, String, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        let status: Option<i64> = r.get(4)?;
        match (state.parse::<crate::procs::State>()?, status) {
            (crate::procs::State::Exited, Some(0)) => {
                let out = crate::logs::head_tx(
                    tx,
                    realm,
                    &Pid::new(&pid)?,
                    crate::logs::Stream::Stdout,
                    VALUE_BYTES_MAX,
                )?;
                complete(tx, realm, &graph, &task, &out, now)?;
            }
            (st, status) => {
                let why = match (status, r.get::<Option<String>>(5)?) {
                    (Some(s), _) => format!("proc {pid} exited with status {s}"),
                    (None, Some(e)) => format!("proc {pid} {st}: {e}"),
                    (None, None) => format!("proc {pid} {st}"),
                };
                run_failed(tx, realm, &graph, &task, &why, now)?;
            }
        }
    }
    Ok((rows.len() + procs.len()) as u64)
}

/// Procedure body (read-only): whether `realm` has a task waiting for a
/// workflow or a proc — what [`settle_children_tx`] would look at. The
/// scheduler asks it on a read connection at each end its realm sees, so
/// that a realm with no graph waiting costs its partition's writer nothing
/// when its procs end (a task's child is recorded in the transaction that
/// starts the child, before the child can end).
pub fn waits_on_children_tx(tx: &mut dyn Tx, realm: &str) -> Result<bool> {
    let k = p_key(tx);
    Ok(tx
        .query_opt(
            "SELECT 1 FROM graph_task WHERE p_key = $1 AND status = 'running' AND realm = $2 \
             AND child IS NOT NULL AND kind IN ('workflow', 'proc') LIMIT 1",
            params![k, realm],
        )?
        .is_some())
}

/// Procedure body (a scheduler's, at its start; on one partition): the
/// realms with a task that waits for a workflow or a proc.
pub fn waiting_realms_tx(tx: &mut dyn Tx) -> Result<Vec<String>> {
    let k = p_key(tx);
    tx.query(
        "SELECT DISTINCT realm FROM graph_task WHERE p_key = $1 AND status = 'running' \
         AND child IS NOT NULL AND kind IN ('workflow', 'proc') LIMIT $2",
        params![k, CLAIM_REALMS_MAX as i64],
    )?
    .iter()
    .map(|r| r.get(0))
    .collect::<std::result::Result<_, _>>()
    .map_err(Error::from)
}

/// A run of task `task` failed with `error` (its proc's, or its
/// transaction's): ready again while it has runs left, else it and its
/// graph end in error.
fn run_failed(
    tx: &mut dyn Tx,
    realm: &str,
    graph: &str,
    task: &str,
    error: &str,
    now: i64,
) -> Result<()> {
    let k = p_key(tx);
    let r = tx.query_one(
        "SELECT attempts, attempts_max FROM graph_task WHERE p_key = $1 AND realm = $2 \
         AND graph_id = $3 AND task = $4",
        params![k, realm, graph, task],
    )?;
    if r.get::<i64>(0)? < r.get::<i64>(1)? {
        tx.execute(
            "UPDATE graph_task SET status = 'ready', node_id = NULL, child = NULL, error = $5 \
             WHERE p_key = $1 AND realm = $2 AND graph_id = $3 AND task = $4",
            params![k, realm, graph, task, cut_error(error)],
        )?;
        tx.notify(READY_CHANNEL, realm)?;
        return Ok(());
    }
    fail_for_good(tx, realm, graph, task, error, now)
}

/// Procedure body (realm teardown): removes every graph of `realm`.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    let k = p_key(tx);
    let mut n = 0;
    for sql in [
        "DELETE FROM graph_edge WHERE p_key = $1 AND realm = $2",
        "DELETE FROM graph_task WHERE p_key = $1 AND realm = $2",
        "DELETE FROM graph WHERE p_key = $1 AND realm = $2",
    ] {
        n += tx.execute(sql, params![k, realm])?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_found_and_replaced() {
        let args = json!([1, {"$task": "a"}, {"x": [{"$task": "b"}]}, {"$task": "a", "y": 1}]);
        let refs = refs_of(&args).unwrap();
        assert_eq!(refs.into_iter().collect::<Vec<_>>(), vec!["a", "b"]);
        let outs = BTreeMap::from([("a".to_string(), json!(5)), ("b".to_string(), json!("s"))]);
        assert_eq!(
            resolve(&args, &outs),
            json!([1, 5, {"x": ["s"]}, {"$task": "a", "y": 1}])
        );
        assert!(refs_of(&json!({"a": 1})).is_err(), "arguments are an array");
        let mut deep = json!(1);
        for _ in 0..(JSON_DEPTH_MAX + 2) {
            deep = json!([deep]);
        }
        assert!(refs_of(&deep).is_err(), "a hostile nesting is refused");
    }

    #[test]
    fn specs_are_read_from_json() {
        let g = GraphSpec::from_json(
            &json!({"tasks": [{"id": "a", "procedure": "p", "args": [1]},
                              {"id": "b", "workflow": "w", "queue": "q", "version": "v",
                               "args": [{"$task": "a"}], "attempts_max": 2}],
                    "result": "b"}),
            "",
        )
        .unwrap();
        assert_eq!(g.tasks[1].kind, Kind::Workflow);
        assert_eq!(g.tasks[1].attempts_max, 2);
        assert_eq!(g.result.as_deref(), Some("b"));
        assert!(TaskSpec::from_json(&json!({"id": "a"})).is_err());
        assert!(dynamic_spec(b"42").unwrap().is_none());
        assert!(
            dynamic_spec(br#"{"$tasks": [{"id": "x", "procedure": "p"}]}"#)
                .unwrap()
                .is_some()
        );
    }
}
