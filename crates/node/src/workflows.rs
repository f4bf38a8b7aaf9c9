//! The `Workflows` service: durable workflows ([`tabos_kernel::workflows`])
//! over the API.
//!
//! Each call is one transaction on the realm's partition, acting in the
//! credential's realm (role member; listing and showing need reader). The
//! calls that wait — a dequeue, a receive, an event, a workflow's end —
//! subscribe to the change-feed channel that announces what they wait for
//! *before* they look, then sleep on it (no polling) up to their timeout
//! ([`WAIT_MAX`]) or the node's shutdown.

use std::time::Duration;

use tabos_client::proto;
use tabos_kernel::auth::Role;
use tabos_kernel::procedures::{self, CallPath, Called, Procedures};
use tabos_kernel::workflows::{self as wf, Outcome, StepKind};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

/// Longest any call waits.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
/// An executor's lease when it does not say.
pub const LEASE_DEFAULT_MS: u64 = 10_000;

#[derive(Clone)]
pub struct WorkflowsService {
    node: Node,
    procedures: Procedures,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl WorkflowsService {
    pub fn new(node: Node, stopping: tokio::sync::watch::Receiver<bool>) -> WorkflowsService {
        WorkflowsService {
            procedures: node.procedures.clone(),
            node,
            stopping,
        }
    }

    /// Waits for a notification on `sub` until `deadline`. A subscription
    /// the feed cut off (it fell behind) is renewed on `channel`; a node
    /// that is stopping ends the wait with UNAVAILABLE (the client asks
    /// again, elsewhere or later).
    async fn wait(
        &self,
        sub: &mut tabos_store::Subscription,
        channel: &str,
        deadline: Instant,
    ) -> Result<(), Status> {
        let mut stopping = self.stopping.clone();
        tokio::select! {
            n = sub.recv() => {
                if n.is_err() {
                    *sub = self.node.store.subscribe(channel);
                }
                Ok(())
            }
            () = tokio::time::sleep_until(deadline) => Ok(()),
            _ = stopping.wait_for(|s| *s) => Err(Status::unavailable("the node is stopping")),
        }
    }
}

impl WorkflowsService {
    /// Asks `look` until it has an answer, sleeping on workflow `id`'s
    /// channel between asks (subscribed before the first, so nothing
    /// announced in between is missed). `look` is told when the deadline
    /// has come (`true`): it must answer then.
    async fn until<T, F, Fut>(
        &self,
        realm: &str,
        id: &str,
        deadline: Instant,
        mut look: F,
    ) -> Result<T, Status>
    where
        F: FnMut(bool) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, Status>>,
    {
        wf::validate_id("workflow id", id).map_err(|e| kernel_status(&e))?;
        let channel = wf::workflow_channel(realm, id);
        let mut sub = self.node.store.subscribe(&channel);
        loop {
            let last = Instant::now() >= deadline;
            if let Some(t) = look(last).await? {
                return Ok(t);
            }
            if last {
                return Err(Status::internal("a wait's last look gave no answer"));
            }
            self.wait(&mut sub, &channel, deadline).await?;
        }
    }
}

fn wait_deadline(ms: u32) -> Instant {
    Instant::now() + Duration::from_millis(u64::from(ms)).min(WAIT_MAX)
}

fn opt(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn info(w: wf::Workflow) -> proto::WorkflowInfo {
    proto::WorkflowInfo {
        workflow_id: w.id,
        name: w.name,
        app_version: w.app_version,
        status: crate::wire::out(w.status),
        queue: w.queue.unwrap_or_default(),
        priority: w.priority,
        input: w.input,
        has_output: w.output.is_some(),
        output: w.output.unwrap_or_default(),
        error: w.error.unwrap_or_default(),
        executor: w.executor.unwrap_or_default(),
        node_id: w.node_id.unwrap_or_default(),
        attempts: w.attempts,
        user: w.user,
        forked_from: w.forked_from.unwrap_or_default(),
        created_us: w.created_us,
        started_us: w.started_us.unwrap_or(0),
        updated_us: w.updated_us,
        ended_us: w.ended_us.unwrap_or(0),
    }
}

fn outcome_to_proto(o: Outcome, recorded: bool) -> proto::StepOutcome {
    match o {
        Outcome::Success(output) => proto::StepOutcome {
            status: proto::StepStatus::Success.into(),
            output,
            error: String::new(),
            recorded,
        },
        Outcome::Error(error) => proto::StepOutcome {
            status: proto::StepStatus::Error.into(),
            output: Vec::new(),
            error,
            recorded,
        },
    }
}

fn outcome_from_proto(o: Option<proto::StepOutcome>) -> Result<Outcome, Status> {
    let o = o.ok_or_else(|| Status::invalid_argument("an outcome is required"))?;
    match crate::wire::request_proto("an outcome's status", o.status)? {
        Some(proto::StepStatus::Success) => Ok(Outcome::Success(o.output)),
        Some(proto::StepStatus::Error) => Ok(Outcome::Error(o.error)),
        _ => Err(Status::invalid_argument(
            "an outcome's status is success or error",
        )),
    }
}

/// A step kind a client records with StepBegin or StepEnd: a function, a
/// proc or a get_event (the others have calls of their own); `None` when
/// unspecified.
fn client_step_kind(v: i32) -> Result<Option<StepKind>, Status> {
    let kind = crate::wire::request::<StepKind>("step kind", v)?;
    match kind {
        None | Some(StepKind::Function | StepKind::Proc | StepKind::GetEvent) => Ok(kind),
        Some(k) => Err(Status::invalid_argument(format!(
            "a {} step has a call of its own",
            k.as_str()
        ))),
    }
}

fn claims(c: wf::Claimed) -> proto::ClaimResponse {
    proto::ClaimResponse {
        claims: c
            .claims
            .into_iter()
            .map(|c| proto::Claim {
                workflow_id: c.id,
                name: c.name,
                input: c.input,
                recovered: c.recovered,
            })
            .collect(),
        retry_at_us: c.retry_at_us.unwrap_or(0),
    }
}

fn limit(v: i64) -> Option<i64> {
    (v != 0).then_some(v)
}

fn queue_info(q: wf::QueueInfo) -> proto::QueueInfo {
    proto::QueueInfo {
        queue: q.queue,
        concurrency: q.limits.concurrency.unwrap_or(0),
        node_concurrency: q.limits.node_concurrency.unwrap_or(0),
        rate_limit: q.limits.rate_limit.unwrap_or(0),
        rate_period_ms: q.limits.rate_period_ms.unwrap_or(0),
        enqueued: q.enqueued,
        pending: q.pending,
    }
}

/// The queue a schedule enqueues in when it names none.
pub const SCHEDULE_QUEUE: &str = "schedules";

fn schedule_info(realm: &str, s: wf::Schedule) -> proto::ScheduleInfo {
    proto::ScheduleInfo {
        realm: realm.into(),
        schedule: s.schedule,
        name: s.name,
        cron: s.cron,
        app_version: s.app_version,
        queue: s.queue,
        next_us: s.next_us,
    }
}

/// Fires every realm's due schedules until `stop` (each node runs this;
/// a firing happens once whichever node gets to it, since it advances the
/// schedule in the transaction that enqueues). It sleeps until the
/// earliest next firing — a known time — or until a schedule changes (the
/// change feed), never on a timer of its own.
pub async fn fire_schedules(node: Node, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut changed = node.store.subscribe(wf::SCHEDULES_CHANNEL);
    loop {
        let earliest = match fire_once(&node).await {
            Ok(t) => t,
            Err(e) => {
                eprintln!(
                    "node {}: cannot fire workflow schedules: {e}",
                    node.settings.node_id
                );
                Some(tabos_store::now_us() + 1_000_000)
            }
        };
        let sleep = match earliest {
            Some(t) => Duration::from_micros((t - tabos_store::now_us()).max(0) as u64),
            None => Duration::from_secs(24 * 3_600),
        };
        tokio::select! {
            n = changed.recv() => if n.is_err() {
                changed = node.store.subscribe(wf::SCHEDULES_CHANNEL);
            },
            () = tokio::time::sleep(sleep) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Fires what is due in every realm; the earliest next firing.
async fn fire_once(node: &Node) -> Result<Option<i64>, tabos_kernel::Error> {
    let store = node.store.clone();
    let due = tokio::task::spawn_blocking(move || {
        store.query(
            "SELECT realm, min(next_us) FROM workflow_schedule GROUP BY realm",
            &[],
        )
    })
    .await
    .map_err(|e| tabos_kernel::Error::Invalid(format!("schedule query task: {e}")))??;
    let now = tabos_store::now_us();
    let mut earliest: Option<i64> = None;
    for row in due.rows.iter() {
        let (realm, next): (String, i64) = (row.get(0)?, row.get(1)?);
        let next = if next <= now {
            let r = realm.clone();
            tabos_kernel::call(&node.store, &realm, move |tx| {
                wf::fire_due_tx(tx, &r, tabos_store::now_us())
            })
            .await?
            .1
        } else {
            Some(next)
        };
        if let Some(t) = next {
            earliest = Some(earliest.map_or(t, |e| e.min(t)));
        }
    }
    Ok(earliest)
}

/// Workflows a claim asks for when it says 0.
pub const CLAIM_DEFAULT: usize = 64;

fn claim_max(max: u32) -> usize {
    match max {
        0 => CLAIM_DEFAULT,
        n => n as usize,
    }
}

/// A new workflow id: `w` and 16 random hex digits.
fn new_id() -> Result<String, Status> {
    wf::new_executor_id()
        .map(|x| format!("w{}", &x[1..]))
        .map_err(|e| kernel_status(&e))
}

#[tonic::async_trait]
impl proto::workflows_server::Workflows for WorkflowsService {
    async fn register_executor(
        &self,
        request: Request<proto::RegisterExecutorRequest>,
    ) -> Result<Response<proto::ExecutorInfo>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        // A restarted executor names itself again (its workflows are taken
        // back at once); a new one is given an id.
        let id = match r.executor.as_str() {
            "" => wf::new_executor_id().map_err(|e| kernel_status(&e))?,
            _ => r.executor.clone(),
        };
        let lease_ms = match r.lease_ms {
            0 => LEASE_DEFAULT_MS,
            n => n,
        };
        let spec = wf::ExecutorSpec {
            app_version: r.app_version,
            functions: r.functions,
            node_id: self.node.settings.node_id.clone(),
            lease_ms,
        };
        let (rl, i) = (realm.clone(), id.clone());
        self.node
            .call(&realm, move |tx| {
                wf::register_executor_tx(tx, &rl, &i, &spec, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::ExecutorInfo {
            executor: id,
            node_id: self.node.settings.node_id.clone(),
            lease_ms,
        }))
    }

    async fn renew_executor(
        &self,
        request: Request<proto::ExecutorRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let lease = match r.lease_ms {
            0 => LEASE_DEFAULT_MS,
            n => n,
        };
        let rl = realm.clone();
        self.node
            .call(&realm, move |tx| {
                wf::renew_executor_tx(tx, &rl, &r.executor, lease, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn leave_executor(
        &self,
        request: Request<proto::ExecutorRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let rl = realm.clone();
        self.node
            .call(&realm, move |tx| {
                wf::leave_executor_tx(tx, &rl, &r.executor, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn start(
        &self,
        request: Request<proto::StartWorkflowRequest>,
    ) -> Result<Response<proto::StartWorkflowResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let spec = wf::StartSpec {
            id: match r.workflow_id.as_str() {
                "" => new_id()?,
                _ => r.workflow_id,
            },
            name: r.name,
            app_version: r.app_version,
            input: r.input,
            queue: opt(r.queue),
            priority: r.priority,
            executor: opt(r.executor),
            user: access.user("")?,
        };
        let rl = realm.clone();
        let s = self
            .node
            .call(&realm, move |tx| {
                wf::start_tx(tx, &rl, &spec, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::StartWorkflowResponse {
            created: s.created,
            workflow: Some(info(s.workflow)),
        }))
    }

    async fn recover(
        &self,
        request: Request<proto::ClaimRequest>,
    ) -> Result<Response<proto::ClaimResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let deadline = wait_deadline(r.wait_ms);
        let mut orphans = self.node.store.subscribe(&wf::orphans_channel(&realm));
        loop {
            let (rl, ex) = (realm.clone(), r.executor.clone());
            let c = self
                .node
                .call(&realm, move |tx| {
                    wf::recover_tx(tx, &rl, &ex, claim_max(r.max), tabos_store::now_us())
                })
                .await?;
            if !c.claims.is_empty() || Instant::now() >= deadline {
                return Ok(Response::new(claims(c)));
            }
            // Woken by an orphan, or when a lease over one lapses.
            let until = match c.retry_at_us {
                Some(at) => {
                    let wait = (at - tabos_store::now_us()).max(0) as u64;
                    deadline.min(Instant::now() + Duration::from_micros(wait))
                }
                None => deadline,
            };
            self.wait(&mut orphans, &wf::orphans_channel(&realm), until)
                .await?;
        }
    }

    async fn dequeue(
        &self,
        request: Request<proto::ClaimRequest>,
    ) -> Result<Response<proto::ClaimResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        wf::validate_id("queue", &r.queue).map_err(|e| kernel_status(&e))?;
        let deadline = wait_deadline(r.wait_ms);
        // Subscribed before looking: nothing announced in between is lost.
        let mut sub = self
            .node
            .store
            .subscribe(&wf::queue_channel(&realm, &r.queue));
        let mut orphans = self.node.store.subscribe(&wf::orphans_channel(&realm));
        loop {
            let (rl, ex, q) = (realm.clone(), r.executor.clone(), r.queue.clone());
            let c = self
                .node
                .call(&realm, move |tx| {
                    wf::dequeue_tx(tx, &rl, &ex, &q, claim_max(r.max), tabos_store::now_us())
                })
                .await?;
            if !c.claims.is_empty() || Instant::now() >= deadline {
                return Ok(Response::new(claims(c)));
            }
            // Woken by the queue, by an orphan, or when a lease lapses or a
            // rate period ends (a known time, not a poll).
            let until = match c.retry_at_us {
                Some(at) => {
                    let wait = (at - tabos_store::now_us()).max(0) as u64;
                    deadline.min(Instant::now() + Duration::from_micros(wait))
                }
                None => deadline,
            };
            let mut stopping = self.stopping.clone();
            tokio::select! {
                n = sub.recv() => if n.is_err() {
                    sub = self.node.store.subscribe(&wf::queue_channel(&realm, &r.queue));
                },
                n = orphans.recv() => if n.is_err() {
                    orphans = self.node.store.subscribe(&wf::orphans_channel(&realm));
                },
                () = tokio::time::sleep_until(until) => {}
                _ = stopping.wait_for(|s| *s) => return Ok(Response::new(claims(c))),
            }
        }
    }

    async fn step_begin(
        &self,
        request: Request<proto::StepBeginRequest>,
    ) -> Result<Response<proto::StepBeginResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let kind = client_step_kind(r.kind)?
            .ok_or_else(|| Status::invalid_argument("a step's kind is required"))?;
        let rl = realm.clone();
        let b = self
            .node
            .call(&realm, move |tx| {
                wf::step_begin_tx(
                    tx,
                    &rl,
                    &r.executor,
                    &r.workflow_id,
                    r.step,
                    &r.name,
                    kind,
                    &r.input,
                    tabos_store::now_us(),
                )
            })
            .await?;
        Ok(Response::new(match b {
            wf::Begun::Done(o) => proto::StepBeginResponse {
                done: Some(outcome_to_proto(o, true)),
                attempt: 0,
            },
            wf::Begun::Run { attempt } => proto::StepBeginResponse {
                done: None,
                attempt,
            },
        }))
    }

    async fn step_end(
        &self,
        request: Request<proto::StepEndRequest>,
    ) -> Result<Response<proto::StepOutcome>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let outcome = outcome_from_proto(r.outcome)?;
        let unbegun = match client_step_kind(r.kind)? {
            None => None,
            Some(kind) => Some(wf::Unbegun {
                name: r.name.clone(),
                kind,
                input: r.input.clone(),
                attempts: r.attempts,
            }),
        };
        let (rl, o) = (realm.clone(), outcome.clone());
        let got = self
            .node
            .call(&realm, move |tx| {
                wf::step_end_tx(
                    tx,
                    &rl,
                    &r.executor,
                    &r.workflow_id,
                    r.step,
                    &o,
                    r.last,
                    unbegun.as_ref(),
                    tabos_store::now_us(),
                )
            })
            .await?;
        let recorded = got != outcome;
        Ok(Response::new(outcome_to_proto(got, recorded)))
    }

    async fn step_procedure(
        &self,
        request: Request<proto::StepProcedureRequest>,
    ) -> Result<Response<proto::StepOutcome>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        // The procedure's file calls act for the caller's user.
        let who = access.act(&realm, "")?;
        let now = tabos_store::now_us();
        let (rl, ex, id, name, args) = (
            realm.clone(),
            r.executor.clone(),
            r.workflow_id.clone(),
            r.procedure.clone(),
            r.args.clone(),
        );
        let ran = self
            .procedures
            .run_with(&realm, move |tx, sandbox| {
                let mut run = |tx: &mut dyn tabos_store::Tx| {
                    // Its declared path first; a read-only one runs on this
                    // transaction as on a read connection.
                    for path in [CallPath::Write, CallPath::Read] {
                        match procedures::call_tx(tx, sandbox, &rl, &who, &name, &args, now, path)?
                        {
                            Called::Ran(out) => return Ok(out.result),
                            Called::OtherPath { .. } => continue,
                        }
                    }
                    Err(tabos_kernel::Error::Precondition(format!(
                        "procedure {name} was reinstalled during the call; call it again"
                    )))
                };
                wf::step_procedure_tx(tx, &rl, &ex, &id, r.step, &name, &args, now, &mut run)
            })
            .await;
        match ran {
            Ok(o) => Ok(Response::new(outcome_to_proto(o, false))),
            // It failed and changed nothing: the attempt is recorded.
            Err(e @ tabos_kernel::Error::Procedure { .. }) => {
                let (rl, error) = (realm.clone(), e.to_string());
                let o = self
                    .node
                    .call(&realm, move |tx| {
                        wf::step_failed_tx(
                            tx,
                            &rl,
                            &r.executor,
                            &r.workflow_id,
                            r.step,
                            &r.procedure,
                            StepKind::Procedure,
                            &r.args,
                            &error,
                            r.last,
                            tabos_store::now_us(),
                        )
                    })
                    .await?;
                Ok(Response::new(outcome_to_proto(o, false)))
            }
            Err(e) => Err(kernel_status(&e)),
        }
    }

    async fn sleep(
        &self,
        request: Request<proto::SleepRequest>,
    ) -> Result<Response<proto::SleepResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let rl = realm.clone();
        let (at, now) = self
            .node
            .call(&realm, move |tx| {
                let now = tabos_store::now_us();
                let at = wf::sleep_tx(
                    tx,
                    &rl,
                    &r.executor,
                    &r.workflow_id,
                    r.step,
                    r.duration_ms.saturating_mul(1_000),
                    now,
                )?;
                Ok((at, now))
            })
            .await?;
        Ok(Response::new(proto::SleepResponse {
            wake_at_us: at,
            now_us: now,
        }))
    }

    async fn send(
        &self,
        request: Request<proto::WorkflowSendRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let from = match (r.executor.is_empty(), r.workflow_id.is_empty()) {
            (true, true) => None,
            (false, false) => Some(wf::Sender {
                executor: r.executor,
                workflow: r.workflow_id,
                step: r.step,
            }),
            _ => {
                return Err(Status::invalid_argument(
                    "a send from a workflow names its executor, workflow and step",
                ))
            }
        };
        let rl = realm.clone();
        self.node
            .call(&realm, move |tx| {
                wf::send_tx(
                    tx,
                    &rl,
                    from.as_ref(),
                    &r.to,
                    &r.topic,
                    &r.payload,
                    tabos_store::now_us(),
                )
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn recv(
        &self,
        request: Request<proto::WorkflowRecvRequest>,
    ) -> Result<Response<proto::WorkflowRecvResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let deadline = wait_deadline(r.timeout_ms);
        let got = self
            .until(&realm, &r.workflow_id, deadline, |give_up| {
                let (rl, ex, id, topic) = (
                    realm.clone(),
                    r.executor.clone(),
                    r.workflow_id.clone(),
                    r.topic.clone(),
                );
                let step = r.step;
                self.node.call(&realm, move |tx| {
                    wf::recv_tx(
                        tx,
                        &rl,
                        &ex,
                        &id,
                        step,
                        &topic,
                        give_up,
                        tabos_store::now_us(),
                    )
                })
            })
            .await?;
        Ok(Response::new(proto::WorkflowRecvResponse {
            received: got.is_some(),
            payload: got.unwrap_or_default(),
        }))
    }

    async fn set_event(
        &self,
        request: Request<proto::SetEventRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let rl = realm.clone();
        self.node
            .call(&realm, move |tx| {
                wf::set_event_tx(
                    tx,
                    &rl,
                    &r.executor,
                    &r.workflow_id,
                    r.step,
                    &r.key,
                    &r.value,
                    tabos_store::now_us(),
                )
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn get_event(
        &self,
        request: Request<proto::GetEventRequest>,
    ) -> Result<Response<proto::GetEventResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Reader)?;
        let deadline = wait_deadline(r.timeout_ms);
        let v = self
            .until(&realm, &r.workflow_id, deadline, |last| {
                let (rl, id, key) = (realm.clone(), r.workflow_id.clone(), r.key.clone());
                let read = self
                    .node
                    .read(&realm, move |tx| wf::get_event_tx(tx, &rl, &id, &key));
                async move {
                    let v = read.await?;
                    Ok((v.is_some() || last).then_some(v))
                }
            })
            .await?;
        Ok(Response::new(proto::GetEventResponse {
            set: v.is_some(),
            value: v.unwrap_or_default(),
        }))
    }

    async fn finish(
        &self,
        request: Request<proto::FinishWorkflowRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let outcome = outcome_from_proto(r.outcome)?;
        let rl = realm.clone();
        self.node
            .call(&realm, move |tx| {
                wf::finish_tx(
                    tx,
                    &rl,
                    &r.executor,
                    &r.workflow_id,
                    &outcome,
                    tabos_store::now_us(),
                )
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn wait(
        &self,
        request: Request<proto::WaitWorkflowRequest>,
    ) -> Result<Response<proto::WorkflowInfo>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Reader)?;
        let deadline = wait_deadline(r.timeout_ms);
        let w = self
            .until(&realm, &r.workflow_id, deadline, |last| {
                let (rl, id) = (realm.clone(), r.workflow_id.clone());
                let read = self.node.read(&realm, move |tx| wf::get_tx(tx, &rl, &id));
                let (realm, wid) = (realm.clone(), r.workflow_id.clone());
                async move {
                    let w = read.await?.ok_or_else(|| {
                        Status::not_found(format!("workflow {wid} in realm {realm}"))
                    })?;
                    Ok((w.status.is_final() || last).then_some(w))
                }
            })
            .await?;
        Ok(Response::new(info(w)))
    }

    async fn list(
        &self,
        request: Request<proto::ListWorkflowsRequest>,
    ) -> Result<Response<proto::ListWorkflowsResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Reader)?;
        let filter = wf::Filter {
            status: crate::wire::request("status", r.status)?,
            name: opt(r.name),
            queue: opt(r.queue),
            app_version: opt(r.app_version),
            since_us: (r.since_us != 0).then_some(r.since_us),
            limit: r.limit as usize,
        };
        let rl = realm.clone();
        let ws = self
            .node
            .read(&realm, move |tx| wf::list_tx(tx, &rl, &filter))
            .await?;
        Ok(Response::new(proto::ListWorkflowsResponse {
            workflows: ws.into_iter().map(info).collect(),
        }))
    }

    async fn show(
        &self,
        request: Request<proto::WorkflowRequest>,
    ) -> Result<Response<proto::WorkflowDetail>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Reader)?;
        let rl = realm.clone();
        let (w, steps, more) = self
            .node
            .read(&realm, move |tx| {
                wf::show_tx(tx, &rl, &r.workflow_id, r.after_step)
            })
            .await?;
        Ok(Response::new(proto::WorkflowDetail {
            workflow: Some(info(w)),
            steps: steps
                .into_iter()
                .map(|s| proto::WorkflowStep {
                    step: s.step,
                    name: s.name,
                    kind: crate::wire::out(s.kind),
                    status: crate::wire::of_text(&s.status, proto::StepStatus::from_name).into(),
                    output: s.output.unwrap_or_default(),
                    error: s.error.unwrap_or_default(),
                    attempts: s.attempts,
                    started_us: s.started_us,
                    ended_us: s.ended_us.unwrap_or(0),
                    input: s.input.unwrap_or_default(),
                })
                .collect(),
            more,
        }))
    }

    async fn cancel(
        &self,
        request: Request<proto::WorkflowRequest>,
    ) -> Result<Response<proto::WorkflowInfo>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let rl = realm.clone();
        let w = self
            .node
            .call(&realm, move |tx| {
                wf::cancel_tx(tx, &rl, &r.workflow_id, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(info(w)))
    }

    async fn resume(
        &self,
        request: Request<proto::ResumeWorkflowRequest>,
    ) -> Result<Response<proto::WorkflowInfo>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let rl = realm.clone();
        let w = self
            .node
            .call(&realm, move |tx| {
                wf::resume_tx(
                    tx,
                    &rl,
                    &r.workflow_id,
                    opt(r.app_version.clone()).as_deref(),
                    tabos_store::now_us(),
                )
            })
            .await?;
        Ok(Response::new(info(w)))
    }

    async fn fork(
        &self,
        request: Request<proto::ForkWorkflowRequest>,
    ) -> Result<Response<proto::WorkflowInfo>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let new_id = match r.new_id.as_str() {
            "" => new_id()?,
            _ => r.new_id.clone(),
        };
        let from = match r.from_step {
            0 => 1,
            n => n,
        };
        let (rl, user) = (realm.clone(), access.user("")?);
        let w = self
            .node
            .call(&realm, move |tx| {
                wf::fork_tx(
                    tx,
                    &rl,
                    &r.workflow_id,
                    &new_id,
                    from,
                    opt(r.app_version.clone()).as_deref(),
                    &user,
                    tabos_store::now_us(),
                )
            })
            .await?;
        Ok(Response::new(info(w)))
    }

    async fn retarget(
        &self,
        request: Request<proto::RetargetRequest>,
    ) -> Result<Response<proto::RetargetResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        // Moving a realm's workflows between versions is its operator's
        // (or admin's) call: a deploy.
        let realm = access.realm(&r.realm, Role::Admin)?;
        let rl = realm.clone();
        let moved = self
            .node
            .call(&realm, move |tx| {
                wf::retarget_tx(
                    tx,
                    &rl,
                    &r.from_version,
                    &r.to_version,
                    tabos_store::now_us(),
                )
            })
            .await?;
        Ok(Response::new(proto::RetargetResponse { moved }))
    }

    async fn set_queue(
        &self,
        request: Request<proto::SetQueueRequest>,
    ) -> Result<Response<proto::QueueInfo>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let limits = wf::QueueLimits {
            concurrency: limit(r.concurrency),
            node_concurrency: limit(r.node_concurrency),
            rate_limit: limit(r.rate_limit),
            rate_period_ms: limit(r.rate_period_ms),
        };
        let (rl, q) = (realm.clone(), r.queue.clone());
        let qs = self
            .node
            .call(&realm, move |tx| {
                wf::set_queue_tx(tx, &rl, &q, &limits, tabos_store::now_us())?;
                wf::queues_tx(tx, &rl)
            })
            .await?;
        let q = qs
            .into_iter()
            .find(|q| q.queue == r.queue)
            .ok_or_else(|| Status::internal(format!("queue {} was just set", r.queue)))?;
        Ok(Response::new(queue_info(q)))
    }

    async fn set_schedule(
        &self,
        request: Request<proto::ScheduleInfo>,
    ) -> Result<Response<proto::ScheduleInfo>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let s = wf::Schedule {
            schedule: r.schedule,
            name: r.name,
            cron: r.cron,
            app_version: r.app_version,
            queue: match r.queue.as_str() {
                "" => SCHEDULE_QUEUE.into(),
                _ => r.queue,
            },
            next_us: 0,
        };
        let rl = realm.clone();
        let s = self
            .node
            .call(&realm, move |tx| {
                wf::set_schedule_tx(tx, &rl, &s, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(schedule_info(&realm, s)))
    }

    async fn list_schedules(
        &self,
        request: Request<proto::ListSchedulesRequest>,
    ) -> Result<Response<proto::ListSchedulesResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Reader)?;
        let rl = realm.clone();
        let ss = self
            .node
            .read(&realm, move |tx| wf::schedules_tx(tx, &rl))
            .await?;
        Ok(Response::new(proto::ListSchedulesResponse {
            schedules: ss.into_iter().map(|s| schedule_info(&realm, s)).collect(),
        }))
    }

    async fn remove_schedule(
        &self,
        request: Request<proto::RemoveScheduleRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Member)?;
        let rl = realm.clone();
        self.node
            .call(&realm, move |tx| {
                wf::remove_schedule_tx(tx, &rl, &r.schedule)
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn list_queues(
        &self,
        request: Request<proto::ListQueuesRequest>,
    ) -> Result<Response<proto::ListQueuesResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Reader)?;
        let rl = realm.clone();
        let qs = self
            .node
            .read(&realm, move |tx| wf::queues_tx(tx, &rl))
            .await?;
        Ok(Response::new(proto::ListQueuesResponse {
            queues: qs.into_iter().map(queue_info).collect(),
        }))
    }
}
