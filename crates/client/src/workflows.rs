//! Durable workflows from Rust (issue 22): functions whose every step is
//! recorded in the node's database, so that after a crash — of this
//! process, of a node, of the database — they go on from their last
//! completed step and no completed step runs again.
//!
//! ```no_run
//! # async fn demo(client: tabos_client::Client) -> Result<(), tabos_client::workflows::WfError> {
//! use tabos_client::workflows::{Executor, ExecutorOptions, Registry};
//! let mut registry = Registry::new();
//! registry.register("order", |ctx, input| async move {
//!     // Exactly once: the procedure and the step's record are one transaction.
//!     let n = ctx.procedure("reserve", input.clone()).await?;
//!     // At least once, with a key for effects outside tabos.
//!     ctx.step("email", |step| async move { Ok(step.key.into_bytes()) }).await?;
//!     ctx.sleep(std::time::Duration::from_secs(1)).await?;
//!     Ok(n)
//! });
//! let exec = Executor::start(client, "", "v1", registry, ExecutorOptions::default()).await?;
//! let id = exec.run("order", Some("order-17"), b"{}".to_vec()).await?;
//! let done = exec.result(&id, std::time::Duration::from_secs(60)).await?;
//! # Ok(()) }
//! ```
//!
//! An [`Executor`] is one process's registration: its application version,
//! the functions it can run ([`Registry`]) and a lease it renews. Its
//! workflows are run as Tokio tasks here; if it dies, its lease lapses and
//! another executor of the same version takes them over. Every call the
//! workflow makes is retried while the node cannot be reached (for
//! [`ExecutorOptions::retry_window`]), which is safe because each is
//! idempotent: a step is known by its number, a start by its workflow id.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tonic::Code;

use crate::proto::{self, workflows_client::WorkflowsClient};
use crate::retry::Backoff;
use crate::{Client, Error, Transport};

/// How long a call is retried while the node cannot be reached, unless the
/// options say otherwise.
pub const RETRY_WINDOW: Duration = Duration::from_secs(120);
/// Longest one wait the node is asked for (it caps waits at a minute).
const WAIT_CHUNK: Duration = Duration::from_secs(30);
/// The first pause before a call to an unreachable node is tried again.
const CALL_PAUSE_FIRST: Duration = Duration::from_millis(20);
/// The longest pause between tries of a call (within [`RETRY_WINDOW`]).
const CALL_PAUSE_MAX: Duration = Duration::from_millis(500);
/// The first pause after a claim failed (the node away), before asking
/// again.
const CLAIM_PAUSE_FIRST: Duration = Duration::from_millis(250);
/// The longest pause between failed claims.
const CLAIM_PAUSE_MAX: Duration = Duration::from_secs(5);
/// The longest pause between a step's attempts, however many it is given.
pub const STEP_PAUSE_MAX: Duration = Duration::from_secs(60);

/// How a workflow's call failed.
#[derive(Debug, thiserror::Error)]
pub enum WfError {
    /// The workflow is not this executor's to run any more: cancelled,
    /// finished, or taken over by another executor after this one's lease
    /// lapsed. Its function should return; nothing more is recorded.
    #[error("stopped: {0}")]
    Stopped(String),
    /// A step failed past its retries (recorded), or the function failed:
    /// the workflow's error.
    #[error("{0}")]
    Failed(String),
    /// The node refused the call, or could not be reached within the
    /// retry window.
    #[error(transparent)]
    Api(#[from] Error),
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type WorkflowFn = Arc<dyn Fn(Ctx, Vec<u8>) -> BoxFuture<Result<Vec<u8>, WfError>> + Send + Sync>;

/// The workflow functions an executor can run, by name.
#[derive(Clone, Default)]
pub struct Registry {
    fns: HashMap<String, WorkflowFn>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers `f` as workflow function `name`. It must take the same
    /// steps in the same order each time it runs with the same input (its
    /// steps are replayed by number).
    pub fn register<F, Fut>(&mut self, name: &str, f: F)
    where
        F: Fn(Ctx, Vec<u8>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<u8>, WfError>> + Send + 'static,
    {
        self.fns
            .insert(name.to_string(), Arc::new(move |c, i| Box::pin(f(c, i))));
    }

    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.fns.keys().cloned().collect();
        v.sort();
        v
    }
}

/// How an executor runs.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// Its lease: renewed every third of it; when it lapses, others take
    /// its workflows over.
    pub lease: Duration,
    /// How long a call is retried while the node cannot be reached.
    pub retry_window: Duration,
    /// This executor's id when it restarts (a process that keeps one
    /// across restarts, as DBOS's executor id): the workflows it was
    /// running are taken back at once, without waiting for its old lease.
    /// `None`: a new executor.
    pub id: Option<String>,
}

impl Default for ExecutorOptions {
    fn default() -> ExecutorOptions {
        ExecutorOptions {
            lease: Duration::from_secs(10),
            retry_window: RETRY_WINDOW,
            id: None,
        }
    }
}

/// Whether a failed call may be sent again ([`Error::is_cut_short`]; every
/// workflow call is idempotent).
fn transient(e: &Error) -> bool {
    e.is_cut_short()
}

/// A workflow running here: its task, and a flag raised when it ends
/// (what [`Executor::result`] waits on before it asks the node).
struct Running {
    task: tokio::task::JoinHandle<()>,
    ended: tokio::sync::watch::Receiver<bool>,
}

/// Raises a workflow's ended flag however its task ends.
struct EndedOnDrop(tokio::sync::watch::Sender<bool>);

impl Drop for EndedOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

struct Inner {
    client: Client,
    realm: String,
    app_version: String,
    id: String,
    lease_ms: u64,
    retry_window: Duration,
    registry: Registry,
    running: Mutex<HashMap<String, Running>>,
    stop: tokio::sync::watch::Sender<bool>,
    ids: AtomicU64,
}

impl Inner {
    fn rpc(&self) -> WorkflowsClient<Transport> {
        self.client.workflows_rpc()
    }

    /// Runs `call` until it succeeds, fails for good, or the node stays
    /// unreachable past the retry window.
    async fn retry<T, F, Fut>(&self, mut call: F) -> Result<T, Error>
    where
        F: FnMut(WorkflowsClient<Transport>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut pauses = Backoff::new(CALL_PAUSE_FIRST, CALL_PAUSE_MAX)
            .until(Instant::now() + self.retry_window);
        loop {
            match call(self.rpc()).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) => {
                    let e = Error::Status(s);
                    if !transient(&e) || !pauses.wait().await {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// A new workflow id, unique with overwhelming likelihood: the hash of
    /// this process's random state, the time and a counter.
    fn new_id(&self) -> String {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(self.ids.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write(self.id.as_bytes());
        format!("w{:016x}", h.finish())
    }
}

/// A step or a workflow's failure as the node records it.
fn outcome(r: Result<Vec<u8>, String>) -> proto::StepOutcome {
    match r {
        Ok(output) => proto::StepOutcome {
            status: proto::StepStatus::Success.into(),
            output,
            ..Default::default()
        },
        Err(error) => proto::StepOutcome {
            status: proto::StepStatus::Error.into(),
            error,
            ..Default::default()
        },
    }
}

/// What a recorded outcome means to the function.
fn result_of(o: proto::StepOutcome) -> Result<Vec<u8>, WfError> {
    if o.status() == proto::StepStatus::Success {
        Ok(o.output)
    } else {
        Err(WfError::Failed(o.error))
    }
}

/// A workflow call's error: a refusal because the workflow is not ours to
/// run any more stops it.
fn stop_or_api(e: Error) -> WfError {
    match e.code() {
        Some(Code::FailedPrecondition) => WfError::Stopped(
            e.to_string()
                .trim_start_matches("FAILED_PRECONDITION: ")
                .to_string(),
        ),
        _ => WfError::Api(e),
    }
}

/// One process's executor.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

impl Executor {
    /// Registers an executor of `app_version` in `realm` (empty: the
    /// credential's) that runs `registry`'s functions, and keeps its lease.
    pub async fn start(
        client: Client,
        realm: &str,
        app_version: &str,
        registry: Registry,
        options: ExecutorOptions,
    ) -> Result<Executor, WfError> {
        let lease_ms = options.lease.as_millis() as u64;
        let mut rpc = client.workflows_rpc();
        let info = rpc
            .register_executor(proto::RegisterExecutorRequest {
                realm: realm.into(),
                app_version: app_version.into(),
                functions: registry.names(),
                lease_ms,
                executor: options.id.clone().unwrap_or_default(),
            })
            .await
            .map_err(Error::Status)?
            .into_inner();
        let (stop, _) = tokio::sync::watch::channel(false);
        let inner = Arc::new(Inner {
            client,
            realm: realm.into(),
            app_version: app_version.into(),
            id: info.executor,
            lease_ms,
            retry_window: options.retry_window,
            registry,
            running: Mutex::new(HashMap::new()),
            stop,
            ids: AtomicU64::new(0),
        });
        tokio::spawn(keep_lease(Arc::downgrade(&inner), inner.stop.subscribe()));
        Ok(Executor { inner })
    }

    /// This executor's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Starts workflow `name` with `input` as `id` (none: a new id) and runs
    /// it here. A second start of an id returns it without running it
    /// again. Returns the workflow's id.
    pub async fn run(
        &self,
        name: &str,
        id: Option<&str>,
        input: Vec<u8>,
    ) -> Result<String, WfError> {
        let f = self.function(name)?;
        let id = id.map_or_else(|| self.inner.new_id(), String::from);
        let req = proto::StartWorkflowRequest {
            realm: self.inner.realm.clone(),
            workflow_id: id.clone(),
            name: name.into(),
            app_version: self.inner.app_version.clone(),
            input: input.clone(),
            executor: self.inner.id.clone(),
            ..Default::default()
        };
        let started = self
            .inner
            .retry(|mut c| {
                let req = req.clone();
                async move { c.start(req).await }
            })
            .await?;
        let w = started.workflow.unwrap_or_default();
        // Ours to run: new, or started by an attempt whose answer was lost
        // (then it may have a history to replay).
        if w.status() == proto::WorkflowStatus::Pending && w.executor == self.inner.id {
            self.spawn(id.clone(), f, w.input, started.created);
        }
        Ok(id)
    }

    /// Enqueues workflow `name` in `queue` (an executor that serves the
    /// queue runs it). Returns its id.
    pub async fn enqueue(
        &self,
        queue: &str,
        name: &str,
        id: Option<&str>,
        input: Vec<u8>,
        priority: i64,
    ) -> Result<String, WfError> {
        let id = id.map_or_else(|| self.inner.new_id(), String::from);
        let req = proto::StartWorkflowRequest {
            realm: self.inner.realm.clone(),
            workflow_id: id.clone(),
            name: name.into(),
            app_version: self.inner.app_version.clone(),
            input,
            queue: queue.into(),
            priority,
            ..Default::default()
        };
        self.inner
            .retry(|mut c| {
                let req = req.clone();
                async move { c.start(req).await }
            })
            .await?;
        Ok(id)
    }

    /// Waits up to `timeout` for workflow `id` to finish; its row then (a
    /// status that is not final when the time ran out).
    pub async fn result(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<proto::WorkflowInfo, WfError> {
        let until = Instant::now() + timeout;
        // Running here: its end is known here first (the node's answer
        // then comes at once).
        let local = self
            .inner
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .map(|r| r.ended.clone());
        if let Some(mut ended) = local {
            let _ = tokio::time::timeout_at(until, ended.wait_for(|e| *e)).await;
        }
        loop {
            let left = until
                .saturating_duration_since(Instant::now())
                .min(WAIT_CHUNK);
            let req = proto::WaitWorkflowRequest {
                realm: self.inner.realm.clone(),
                workflow_id: id.into(),
                timeout_ms: left.as_millis() as u32,
            };
            let w = self
                .inner
                .retry(|mut c| {
                    let req = req.clone();
                    async move { c.wait(req).await }
                })
                .await?;
            let done = w.status().is_final();
            if done || Instant::now() >= until {
                return Ok(w);
            }
        }
    }

    /// Takes over orphaned workflows of this version (in no queue) and runs
    /// them here; how many.
    pub async fn recover(&self) -> Result<usize, WfError> {
        let c = self.claim("Recover", "", 0).await?;
        let n = c.claims.len();
        self.run_claims(c);
        Ok(n)
    }

    async fn claim(
        &self,
        rpc: &str,
        queue: &str,
        wait: u32,
    ) -> Result<proto::ClaimResponse, WfError> {
        let req = proto::ClaimRequest {
            realm: self.inner.realm.clone(),
            executor: self.inner.id.clone(),
            queue: queue.into(),
            max: CLAIM_BATCH,
            wait_ms: wait,
        };
        let dequeue = rpc == "Dequeue";
        Ok(self
            .inner
            .retry(|mut c| {
                let req = req.clone();
                async move {
                    if dequeue {
                        c.dequeue(req).await
                    } else {
                        c.recover(req).await
                    }
                }
            })
            .await?)
    }

    fn run_claims(&self, c: proto::ClaimResponse) {
        for claim in c.claims {
            match self.function(&claim.name) {
                Ok(f) => self.spawn(claim.workflow_id, f, claim.input, !claim.recovered),
                // The node hands out only registered functions.
                Err(e) => eprintln!("workflow {}: {e}", claim.workflow_id),
            }
        }
    }

    /// Serves `queue` until [`Executor::shutdown`]: dequeues what the
    /// queue's limits allow (waiting on the node, which wakes on the change
    /// feed) and runs it here, with also the orphans of no queue.
    pub fn serve(&self, queue: &str) -> tokio::task::JoinHandle<()> {
        self.claim_loop("Dequeue", queue)
    }

    /// Serves the orphans of no queue until [`Executor::shutdown`] (the
    /// node wakes the wait when one appears or a lease lapses).
    pub fn serve_recovery(&self) -> tokio::task::JoinHandle<()> {
        self.claim_loop("Recover", "")
    }

    /// Claims with `method` (`Dequeue` or `Recover`) on `queue` and runs
    /// what it gets until shutdown, pausing with backoff after a failure.
    fn claim_loop(&self, method: &'static str, queue: &str) -> tokio::task::JoinHandle<()> {
        let (me, queue) = (self.clone(), queue.to_string());
        let mut stop = self.inner.stop.subscribe();
        tokio::spawn(async move {
            let mut pauses = Backoff::new(CLAIM_PAUSE_FIRST, CLAIM_PAUSE_MAX);
            loop {
                let got = tokio::select! {
                    r = me.claim(method, &queue, WAIT_CHUNK.as_millis() as u32) => r,
                    _ = stop.wait_for(|s| *s) => return,
                };
                match got {
                    Ok(c) => {
                        pauses.reset();
                        me.run_claims(c)
                    }
                    Err(e) => {
                        eprintln!("executor {}: {method} {queue:?}: {e}", me.inner.id);
                        pauses.wait().await;
                    }
                }
            }
        })
    }

    /// Workflows running here now.
    pub fn running(&self) -> usize {
        let mut r = self.inner.running.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|_, t| !t.task.is_finished());
        r.len()
    }

    /// Stops: the workflows running here are dropped where they are and
    /// handed to other executors at once.
    pub async fn shutdown(self) -> Result<(), WfError> {
        let _ = self.inner.stop.send(true);
        for (_, t) in self
            .inner
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            t.task.abort();
        }
        let req = proto::ExecutorRequest {
            realm: self.inner.realm.clone(),
            executor: self.inner.id.clone(),
            lease_ms: 0,
        };
        self.inner
            .retry(|mut c| {
                let req = req.clone();
                async move { c.leave_executor(req).await }
            })
            .await?;
        Ok(())
    }

    fn function(&self, name: &str) -> Result<WorkflowFn, WfError> {
        self.inner.registry.fns.get(name).cloned().ok_or_else(|| {
            WfError::Failed(format!(
                "no workflow function {name:?} is registered with this executor"
            ))
        })
    }

    /// Runs workflow `id` here; `fresh`: nothing of it is recorded, so its
    /// steps need no check against records before they run.
    fn spawn(&self, id: String, f: WorkflowFn, input: Vec<u8>, fresh: bool) {
        let ctx = Ctx {
            inner: self.inner.clone(),
            workflow_id: id.clone(),
            next_step: Arc::new(AtomicI64::new(1)),
            fresh,
        };
        let inner = self.inner.clone();
        let wid = id.clone();
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let _ended = EndedOnDrop(ended_tx);
            let out = match f(ctx, input).await {
                Ok(o) => Ok(o),
                Err(WfError::Stopped(_)) => return,
                Err(e) => Err(e.to_string()),
            };
            let req = proto::FinishWorkflowRequest {
                realm: inner.realm.clone(),
                executor: inner.id.clone(),
                workflow_id: wid.clone(),
                outcome: Some(outcome(out)),
            };
            let finished = inner
                .retry(|mut c| {
                    let req = req.clone();
                    async move { c.finish(req).await }
                })
                .await;
            if let Err(e) = finished {
                if e.code() != Some(Code::FailedPrecondition) {
                    eprintln!("workflow {wid}: cannot record its end: {e}");
                }
            }
        });
        let mut r = self.inner.running.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|_, t| !t.task.is_finished());
        r.insert(id, Running { task, ended });
    }
}

/// Most workflows one claim asks for.
const CLAIM_BATCH: u32 = 64;

/// Renews the executor's lease every third of it, until it stops (or is
/// dropped).
async fn keep_lease(inner: std::sync::Weak<Inner>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        let every = match inner.upgrade() {
            Some(i) => Duration::from_millis(i.lease_ms / 3),
            None => return,
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(i) = inner.upgrade() else { return };
        let req = proto::ExecutorRequest {
            realm: i.realm.clone(),
            executor: i.id.clone(),
            lease_ms: i.lease_ms,
        };
        if let Err(e) = i.rpc().renew_executor(req).await {
            // Unreachable now: the workflows' calls retry by themselves,
            // and the next renewal may get through.
            let e = Error::Status(e);
            if !transient(&e) {
                eprintln!("executor {}: cannot renew its lease: {e}", i.id);
            }
        }
    }
}

/// What a function step is told.
#[derive(Debug, Clone)]
pub struct StepInfo {
    /// `<workflow>/<step>`: an idempotency key for effects outside tabos
    /// (a step may run again if its executor dies before recording it).
    pub key: String,
    /// 1 for the first attempt.
    pub attempt: i64,
}

/// How a function step is retried.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in all (1: no retry).
    pub attempts: i64,
    /// Pause before the second attempt, doubled after each up to
    /// [`STEP_PAUSE_MAX`] (each jittered).
    pub backoff: Duration,
}

impl Retry {
    fn pauses(&self) -> Backoff {
        let first = self.backoff.min(STEP_PAUSE_MAX);
        Backoff::new(first, STEP_PAUSE_MAX)
    }
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 1,
            backoff: Duration::from_millis(100),
        }
    }
}

/// A running workflow's handle on its steps.
#[derive(Clone)]
pub struct Ctx {
    inner: Arc<Inner>,
    workflow_id: String,
    next_step: Arc<AtomicI64>,
    /// The workflow had no history when this run began: a function step
    /// runs without asking for its record first (there is none), and is
    /// recorded whole when it ends — one call per step, as DBOS's.
    fresh: bool,
}

impl Ctx {
    pub fn workflow_id(&self) -> &str {
        &self.workflow_id
    }

    fn next(&self) -> i64 {
        self.next_step.fetch_add(1, Ordering::Relaxed)
    }

    async fn call<T, F, Fut>(&self, call: F) -> Result<T, WfError>
    where
        F: FnMut(WorkflowsClient<Transport>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.inner.retry(call).await.map_err(stop_or_api)
    }

    /// Begins step `step` (a function, proc or get_event): its
    /// recorded outcome if it has one, else the attempt to make.
    async fn begin(
        &self,
        step: i64,
        name: &str,
        kind: proto::StepKind,
        input: &[u8],
    ) -> Result<proto::StepBeginResponse, WfError> {
        let req = proto::StepBeginRequest {
            realm: self.inner.realm.clone(),
            executor: self.inner.id.clone(),
            workflow_id: self.workflow_id.clone(),
            step,
            name: name.into(),
            kind: kind.into(),
            input: input.to_vec(),
        };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.step_begin(req).await }
        })
        .await
    }

    /// Records step `step`'s outcome `r` (`last`: its final one). In a
    /// workflow with no history the step was not begun, and is recorded
    /// whole: `kind`, `name` and the `attempts` it took.
    async fn end(
        &self,
        step: i64,
        r: Result<Vec<u8>, String>,
        last: bool,
        (name, kind, attempts, input): (&str, proto::StepKind, i64, &[u8]),
    ) -> Result<proto::StepOutcome, WfError> {
        let req = proto::StepEndRequest {
            realm: self.inner.realm.clone(),
            executor: self.inner.id.clone(),
            workflow_id: self.workflow_id.clone(),
            step,
            outcome: Some(outcome(r)),
            last,
            name: if self.fresh {
                name.into()
            } else {
                String::new()
            },
            kind: if self.fresh {
                kind.into()
            } else {
                proto::StepKind::Unspecified.into()
            },
            attempts,
            input: if self.fresh {
                input.to_vec()
            } else {
                Vec::new()
            },
        };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.step_end(req).await }
        })
        .await
    }

    /// Runs `f` as a step (once, without retry).
    pub async fn step<F, Fut>(&self, name: &str, f: F) -> Result<Vec<u8>, WfError>
    where
        F: FnMut(StepInfo) -> Fut,
        Fut: Future<Output = Result<Vec<u8>, String>>,
    {
        self.step_with(name, Retry::default(), f).await
    }

    /// Runs `f` as a step, retried per `retry`; past its attempts the step
    /// fails with its last error, recorded.
    pub async fn step_with<F, Fut>(
        &self,
        name: &str,
        retry: Retry,
        mut f: F,
    ) -> Result<Vec<u8>, WfError>
    where
        F: FnMut(StepInfo) -> Fut,
        Fut: Future<Output = Result<Vec<u8>, String>>,
    {
        let step = self.next();
        let mut pauses = retry.pauses();
        if self.fresh {
            return self.fresh_step(step, name, retry, f).await;
        }
        loop {
            let begun = self
                .begin(step, name, proto::StepKind::Function, b"")
                .await?;
            if let Some(done) = begun.done {
                return result_of(done);
            }
            let r = f(StepInfo {
                key: format!("{}/{step}", self.workflow_id),
                attempt: begun.attempt,
            })
            .await;
            let last = r.is_ok() || begun.attempt >= retry.attempts.max(1);
            let got = self
                .end(
                    step,
                    r,
                    last,
                    (name, proto::StepKind::Function, begun.attempt, b""),
                )
                .await?;
            if last {
                return result_of(got);
            }
            pauses.wait().await;
        }
    }

    /// [`Ctx::step_with`] in a workflow with no history: the attempts run
    /// here, and only the step's outcome is recorded (with how many
    /// attempts it took).
    async fn fresh_step<F, Fut>(
        &self,
        step: i64,
        name: &str,
        retry: Retry,
        mut f: F,
    ) -> Result<Vec<u8>, WfError>
    where
        F: FnMut(StepInfo) -> Fut,
        Fut: Future<Output = Result<Vec<u8>, String>>,
    {
        let mut pauses = retry.pauses();
        let mut attempt = 1;
        let r = loop {
            let r = f(StepInfo {
                key: format!("{}/{step}", self.workflow_id),
                attempt,
            })
            .await;
            if r.is_ok() || attempt >= retry.attempts.max(1) {
                break r;
            }
            attempt += 1;
            pauses.wait().await;
        };
        let got = self
            .end(
                step,
                r,
                true,
                (name, proto::StepKind::Function, attempt, b""),
            )
            .await?;
        result_of(got)
    }

    /// Calls stored procedure `name` as a step: its effects and the step's
    /// record commit together, so it runs exactly once.
    pub async fn procedure(&self, name: &str, args: Vec<u8>) -> Result<Vec<u8>, WfError> {
        self.procedure_with(name, args, Retry::default()).await
    }

    /// [`Ctx::procedure`], retried per `retry` (a failed call changed
    /// nothing).
    pub async fn procedure_with(
        &self,
        name: &str,
        args: Vec<u8>,
        retry: Retry,
    ) -> Result<Vec<u8>, WfError> {
        let step = self.next();
        let mut pauses = retry.pauses();
        let mut attempt = 1;
        loop {
            let last = attempt >= retry.attempts.max(1);
            let req = proto::StepProcedureRequest {
                realm: self.inner.realm.clone(),
                executor: self.inner.id.clone(),
                workflow_id: self.workflow_id.clone(),
                step,
                procedure: name.into(),
                args: args.clone(),
                last,
            };
            let o = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.step_procedure(req).await }
                })
                .await?;
            if o.status() == proto::StepStatus::Success || last || o.recorded {
                return result_of(o);
            }
            attempt += 1;
            pauses.wait().await;
        }
    }

    /// Runs `proc` as step `name`: spawned once — its pid is the step's, so
    /// a re-run finds the proc it spawned instead of spawning another —
    /// and waited for. Its exit status is the step's output (as text); a
    /// proc that does not exit 0 fails the step.
    pub async fn proc(&self, name: &str, mut proc: proto::ProcDescriptor) -> Result<i32, WfError> {
        let step = self.next();
        // Its input: the command line.
        let line = std::iter::once(proc.program.as_str())
            .chain(proc.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
            .into_bytes();
        if !self.fresh {
            if let Some(done) = self
                .begin(step, name, proto::StepKind::Proc, &line)
                .await?
                .done
            {
                return exit_status(result_of(done)?);
            }
        }
        proc.pid = step_pid(&self.workflow_id, step);
        let r = self.run_proc(proc).await;
        let got = self
            .end(step, r, true, (name, proto::StepKind::Proc, 1, &line))
            .await?;
        exit_status(result_of(got)?)
    }

    /// Spawns `proc` (or finds it spawned by an earlier run) and waits for
    /// its end: its exit status as text, or why it failed.
    async fn run_proc(&self, proc: proto::ProcDescriptor) -> Result<Vec<u8>, String> {
        let (realm, pid) = (self.inner.realm.clone(), proc.pid.clone());
        let mut c = self.inner.client.clone();
        let until = Instant::now() + self.inner.retry_window;
        let mut pauses = Backoff::new(CALL_PAUSE_FIRST, CALL_PAUSE_MAX).until(until);
        loop {
            match c.spawn(&realm, proc.clone()).await {
                Ok(_) => break,
                Err(e) if e.code() == Some(Code::AlreadyExists) => break,
                Err(e) if transient(&e) && pauses.wait().await => {}
                Err(e) => return Err(format!("spawn {pid}: {e}")),
            }
        }
        let mut pauses = Backoff::new(CALL_PAUSE_FIRST, CALL_PAUSE_MAX).until(until);
        let st = loop {
            match c.wait_exit(&realm, &pid).await {
                Ok(st) => break st,
                Err(e) if transient(&e) && pauses.wait().await => {}
                Err(e) => return Err(format!("wait for {pid}: {e}")),
            }
        };
        match (st.state(), st.exit_status) {
            (proto::ProcState::Exited, Some(0)) => Ok(b"0".to_vec()),
            (state, status) => Err(format!(
                "proc {pid} ended {state}{}{}",
                status.map_or(String::new(), |s| format!(" with status {s}")),
                if st.error.is_empty() {
                    String::new()
                } else {
                    format!(": {}", st.error)
                }
            )),
        }
    }

    /// Sleeps `d`, durably: the wake-up time is recorded, so after a crash
    /// the workflow sleeps only what is left.
    pub async fn sleep(&self, d: Duration) -> Result<(), WfError> {
        let req = proto::SleepRequest {
            realm: self.inner.realm.clone(),
            executor: self.inner.id.clone(),
            workflow_id: self.workflow_id.clone(),
            step: self.next(),
            duration_ms: d.as_millis() as i64,
        };
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.sleep(req).await }
            })
            .await?;
        let left = (r.wake_at_us - r.now_us).max(0) as u64;
        tokio::time::sleep(Duration::from_micros(left)).await;
        Ok(())
    }

    /// Sends `payload` on `topic` to workflow `to`, once.
    pub async fn send(&self, to: &str, topic: &str, payload: Vec<u8>) -> Result<(), WfError> {
        let req = proto::WorkflowSendRequest {
            realm: self.inner.realm.clone(),
            to: to.into(),
            topic: topic.into(),
            payload,
            executor: self.inner.id.clone(),
            workflow_id: self.workflow_id.clone(),
            step: self.next(),
        };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.send(req).await }
        })
        .await?;
        Ok(())
    }

    /// Receives the next message on `topic`, waiting up to `timeout`;
    /// `None` if none came (that too is recorded: a re-run gets `None`).
    pub async fn recv(&self, topic: &str, timeout: Duration) -> Result<Option<Vec<u8>>, WfError> {
        let step = self.next();
        // A wait the node cut short with time left: the step recorded
        // "nothing" only if it was the last chunk.
        wait_in_chunks(timeout, |timeout_ms| {
            let req = proto::WorkflowRecvRequest {
                realm: self.inner.realm.clone(),
                executor: self.inner.id.clone(),
                workflow_id: self.workflow_id.clone(),
                step,
                topic: topic.into(),
                timeout_ms,
            };
            async move {
                let r = self
                    .call(|mut c| {
                        let req = req.clone();
                        async move { c.recv(req).await }
                    })
                    .await?;
                Ok(r.received.then_some(r.payload))
            }
        })
        .await
    }

    /// Publishes `value` under `key` for this workflow, once.
    pub async fn set_event(&self, key: &str, value: Vec<u8>) -> Result<(), WfError> {
        let req = proto::SetEventRequest {
            realm: self.inner.realm.clone(),
            executor: self.inner.id.clone(),
            workflow_id: self.workflow_id.clone(),
            step: self.next(),
            key: key.into(),
            value,
        };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.set_event(req).await }
        })
        .await?;
        Ok(())
    }

    /// The event `key` of workflow `of`, waiting up to `timeout` for it,
    /// as a step (a re-run gets what this run got).
    pub async fn get_event(
        &self,
        of: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, WfError> {
        let (of, key) = (of.to_string(), key.to_string());
        let inner = self.inner.clone();
        let got = self
            .step(&format!("get_event.{key}"), |_| {
                let (of, key, inner) = (of.clone(), key.clone(), inner.clone());
                async move {
                    let v = get_event(&inner, &of, &key, timeout)
                        .await
                        .map_err(|e| e.to_string())?;
                    // Recorded as 0 (none) or 1 and the value.
                    Ok(match v {
                        Some(mut v) => {
                            v.insert(0, 1);
                            v
                        }
                        None => vec![0],
                    })
                }
            })
            .await?;
        Ok(match got.split_first() {
            Some((1, v)) => Some(v.to_vec()),
            _ => None,
        })
    }
}

/// The pid of a workflow's proc step: `<workflow>.s<step>`, or, for a long
/// workflow id, a hash of it (a pid is at most 128 bytes).
pub fn step_pid(workflow: &str, step: i64) -> String {
    let plain = format!("{workflow}.s{step}");
    if plain.len() <= 128 {
        return plain;
    }
    // FNV-1a: stable across processes, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in workflow.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("wf{h:016x}.s{step}")
}

fn exit_status(out: Vec<u8>) -> Result<i32, WfError> {
    String::from_utf8_lossy(&out)
        .trim()
        .parse()
        .map_err(|_| WfError::Failed(format!("a proc step recorded {out:?}, not an exit status")))
}

async fn get_event(
    inner: &Inner,
    of: &str,
    key: &str,
    timeout: Duration,
) -> Result<Option<Vec<u8>>, Error> {
    wait_in_chunks(timeout, |timeout_ms| {
        let req = proto::GetEventRequest {
            realm: inner.realm.clone(),
            workflow_id: of.into(),
            key: key.into(),
            timeout_ms,
        };
        async move {
            let r = inner
                .retry(|mut c| {
                    let req = req.clone();
                    async move { c.get_event(req).await }
                })
                .await?;
            Ok(r.set.then_some(r.value))
        }
    })
    .await
}

/// Waits up to `timeout` in waits of at most [`WAIT_CHUNK`] (the node
/// cuts a longer one short): `wait` is one of them, of the given ms,
/// `Some` once it got something; `None` after the last.
async fn wait_in_chunks<E, Fut>(
    timeout: Duration,
    mut wait: impl FnMut(u32) -> Fut,
) -> Result<Option<Vec<u8>>, E>
where
    Fut: std::future::Future<Output = Result<Option<Vec<u8>>, E>>,
{
    let until = Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if let Some(got) = wait(left.min(WAIT_CHUNK).as_millis() as u32).await? {
            return Ok(Some(got));
        }
        if left <= WAIT_CHUNK {
            return Ok(None);
        }
    }
}

impl Executor {
    /// The event `key` of workflow `of`, waiting up to `timeout`.
    pub async fn get_event(
        &self,
        of: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, WfError> {
        Ok(get_event(&self.inner, of, key, timeout).await?)
    }

    /// Sends `payload` on `topic` to workflow `to`, from outside any
    /// workflow (not retried: it has no step to make it idempotent).
    pub async fn send(&self, to: &str, topic: &str, payload: Vec<u8>) -> Result<(), WfError> {
        self.inner
            .rpc()
            .send(proto::WorkflowSendRequest {
                realm: self.inner.realm.clone(),
                to: to.into(),
                topic: topic.into(),
                payload,
                ..Default::default()
            })
            .await
            .map_err(Error::Status)?;
        Ok(())
    }
}
