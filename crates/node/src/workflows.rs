//! The `Workflows` service: durable workflows ([`tabos_kernel::workflows`])
//! over the API.
//!
//! Each operation ([`ops`]) is one transaction on the caller's realm's
//! partition; the kernel's operation checks the caller (role member;
//! listing and showing need reader, retargeting admin). The operations
//! that wait — a dequeue, a receive, an event, a workflow's end —
//! subscribe to the change-feed channel that announces what they wait for
//! *before* they look, then sleep on it (no polling) up to their timeout
//! ([`WAIT_MAX`]) or the node's shutdown ([`crate::Stopping`]).

use std::time::Duration;

use tabos_client::proto;
use tabos_kernel::ids::{ExecutorId, WorkflowId};
use tabos_kernel::procedures::{self, CallPath, Called};
use tabos_kernel::workflows::{self as wf, Outcome, StepKind};
use tabos_kernel::{Error, Result};
use tokio::time::Instant;

use crate::Node;

/// Longest any call waits.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
/// An executor's lease when it does not say.
pub const LEASE_DEFAULT_MS: u64 = 10_000;
/// The application version of a workflow run by a proc of its own, when
/// neither the request nor the proc's code names one.
pub const PROC_VERSION: &str = "wasm";

#[derive(Clone)]
pub struct WorkflowsService {
    node: Node,
}

impl WorkflowsService {
    pub fn new(node: Node) -> WorkflowsService {
        WorkflowsService { node }
    }
}

/// Waits for a notification on `sub` until `deadline`. A subscription the
/// feed cut off (it fell behind) is renewed on `channel`; a node that is
/// stopping ends the wait as unavailable (the client asks again, elsewhere
/// or later).
async fn wait(
    node: &Node,
    sub: &mut tabos_store::Subscription,
    channel: &str,
    deadline: Instant,
) -> Result<()> {
    let mut stopping = node.stopping.watch();
    tokio::select! {
        n = sub.recv() => {
            if n.is_err() {
                *sub = node.store.subscribe(channel);
            }
            Ok(())
        }
        () = tokio::time::sleep_until(deadline) => Ok(()),
        _ = stopping.wait_for(|s| *s) => Err(Error::Unavailable("the node is stopping".into())),
    }
}

/// Asks `look` until it has an answer, sleeping on workflow `id`'s channel
/// (in `realm`) between asks (subscribed before the first, so nothing
/// announced in between is missed). `look` is told when the deadline has
/// come (`true`): it must answer then.
async fn until<T, F, Fut>(
    node: &Node,
    realm: &str,
    id: &WorkflowId,
    deadline: Instant,
    mut look: F,
) -> Result<T>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let channel = wf::workflow_channel(realm, id);
    let mut sub = node.store.subscribe(&channel);
    loop {
        let last = Instant::now() >= deadline;
        match look(last).await? {
            Some(t) => return Ok(t),
            None if last => return Err(Error::Invalid("a wait's last look gave no answer".into())),
            None => wait(node, &mut sub, &channel, deadline).await?,
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

fn outcome_from_proto(o: Option<proto::StepOutcome>) -> Result<Outcome> {
    let o = o.ok_or_else(|| Error::Invalid("an outcome is required".into()))?;
    match crate::wire::field_proto("an outcome's status", o.status)? {
        Some(proto::StepStatus::Success) => Ok(Outcome::Success(o.output)),
        Some(proto::StepStatus::Error) => Ok(Outcome::Error(o.error)),
        _ => Err(Error::Invalid(
            "an outcome's status is success or error".into(),
        )),
    }
}

/// A step kind a client records with StepBegin or StepEnd: a function, a
/// proc or a get_event (the others have calls of their own); `None` when
/// unspecified.
fn client_step_kind(v: i32) -> Result<Option<StepKind>> {
    let kind = crate::wire::field::<StepKind>("step kind", v)?;
    match kind {
        None | Some(StepKind::Function | StepKind::Proc | StepKind::GetEvent) => Ok(kind),
        Some(k) => Err(Error::Invalid(format!(
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
                tracing::warn!(
                    node = %node.settings.node_id, "cannot fire workflow schedules: {e}");
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
async fn fire_once(node: &Node) -> Result<Option<i64>> {
    let store = node.store.clone();
    let due = tokio::task::spawn_blocking(move || {
        store.query(
            "SELECT realm, min(next_us) FROM workflow_schedule GROUP BY realm",
            &[],
        )
    })
    .await
    .map_err(|e| Error::Invalid(format!("schedule query task: {e}")))??;
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
/// A new workflow id: `w` and 16 random hex digits.
fn new_id() -> Result<WorkflowId> {
    WorkflowId::new(format!("w{}", &wf::new_executor_id()?[1..]))
}

/// A request's executor and workflow ids, checked.
fn ids(executor: &str, workflow: &str) -> Result<(ExecutorId, WorkflowId)> {
    Ok((ExecutorId::new(executor)?, WorkflowId::new(workflow)?))
}

/// A workflow's step that is a stored procedure.
pub(crate) struct ProcedureStep {
    pub executor: ExecutorId,
    pub workflow: WorkflowId,
    pub step: i64,
    pub procedure: String,
    pub args: Vec<u8>,
    /// Its last attempt: a failure is the step's outcome.
    pub last: bool,
}

/// Runs step `s` for `who`: the procedure in the transaction that records
/// the step, exactly once; a failing procedure changed nothing and its
/// attempt is recorded. The `StepProcedure` operation's and a workflow
/// proc's ([`crate::wfproc`]).
pub(crate) async fn step_procedure(
    store: &tabos_store::Store,
    procedures: &procedures::Procedures,
    who: tabos_kernel::auth::Caller,
    s: ProcedureStep,
) -> Result<Outcome> {
    let now = tabos_store::now_us();
    let realm = who.realm().to_string();
    let (w, ex, id, name, args, step) = (
        who.clone(),
        s.executor.clone(),
        s.workflow.clone(),
        s.procedure.clone(),
        s.args.clone(),
        s.step,
    );
    // The procedure's file calls act for the caller's user.
    let ran = procedures
        .run_with(&realm, move |tx, sandbox| {
            let mut run = |tx: &mut dyn tabos_store::Tx| {
                // Its declared path first; a read-only one runs on this
                // transaction as on a read connection.
                for path in [CallPath::Write, CallPath::Read] {
                    match procedures::call_tx(tx, sandbox, &w, &name, &args, now, path)? {
                        Called::Ran(out, unrecorded) => {
                            // A writer's transaction records its proc's events.
                            debug_assert!(unrecorded.is_empty(), "recorded in the step");
                            return Ok(out.result);
                        }
                        // (Wrote cannot come from the writer's transaction,
                        // which refuses no write.)
                        Called::OtherPath { .. } | Called::Wrote => continue,
                    }
                }
                Err(Error::Precondition(format!(
                    "procedure {name} was reinstalled during the call; call it again"
                )))
            };
            wf::step_procedure_tx(tx, &w, &ex, &id, step, &name, &args, now, &mut run)
        })
        .await;
    match ran {
        Ok(o) => Ok(o),
        // It failed and changed nothing: the attempt is recorded.
        Err(e @ Error::Procedure { .. }) => {
            let error = e.to_string();
            tabos_kernel::call(store, &realm, move |tx| {
                wf::step_failed_tx(
                    tx,
                    &who,
                    &s.executor,
                    &s.workflow,
                    s.step,
                    &s.procedure,
                    StepKind::Procedure,
                    &s.args,
                    &error,
                    s.last,
                    tabos_store::now_us(),
                )
            })
            .await
        }
        Err(e) => Err(e),
    }
}

crate::op::served! {
    WorkflowsService: proto::workflows_server::Workflows;
    register_executor(RegisterExecutorRequest) -> ExecutorInfo = RegisterExecutor;
    renew_executor(ExecutorRequest) -> Empty = RenewExecutor;
    leave_executor(ExecutorRequest) -> Empty = LeaveExecutor;
    start(StartWorkflowRequest) -> StartWorkflowResponse = Start;
    recover(ClaimRequest) -> ClaimResponse = Recover;
    dequeue(ClaimRequest) -> ClaimResponse = Dequeue;
    step_begin(StepBeginRequest) -> StepBeginResponse = StepBegin;
    step_end(StepEndRequest) -> StepOutcome = StepEnd;
    step_procedure(StepProcedureRequest) -> StepOutcome = StepProcedure;
    sleep(SleepRequest) -> SleepResponse = Sleep;
    send(WorkflowSendRequest) -> Empty = Send;
    recv(WorkflowRecvRequest) -> WorkflowRecvResponse = Recv;
    set_event(SetEventRequest) -> Empty = SetEvent;
    get_event(GetEventRequest) -> GetEventResponse = GetEvent;
    finish(FinishWorkflowRequest) -> Empty = Finish;
    wait(WaitWorkflowRequest) -> WorkflowInfo = Wait;
    list(ListWorkflowsRequest) -> ListWorkflowsResponse = List;
    show(WorkflowRequest) -> WorkflowDetail = Show;
    cancel(WorkflowRequest) -> WorkflowInfo = Cancel;
    resume(ResumeWorkflowRequest) -> WorkflowInfo = Resume;
    fork(ForkWorkflowRequest) -> WorkflowInfo = Fork;
    retarget(RetargetRequest) -> RetargetResponse = Retarget;
    set_queue(SetQueueRequest) -> QueueInfo = SetQueue;
    set_schedule(ScheduleInfo) -> ScheduleInfo = SetSchedule;
    list_schedules(ListSchedulesRequest) -> ListSchedulesResponse = ListSchedules;
    remove_schedule(RemoveScheduleRequest) -> Empty = RemoveSchedule;
    list_queues(ListQueuesRequest) -> ListQueuesResponse = ListQueues;
}

/// The service's operations: each decodes its request, runs the kernel's
/// operation for the caller (which checks it) and encodes the answer.
pub mod ops {
    use super::*;
    use crate::op::op;

    /// `lease_ms`, or the default when it says 0.
    fn lease(ms: u64) -> u64 {
        match ms {
            0 => LEASE_DEFAULT_MS,
            n => n,
        }
    }

    op!(RegisterExecutor(RegisterExecutorRequest) -> ExecutorInfo, |node, who, r| {
        // A restarted executor names itself again (its workflows are taken
        // back at once); a new one is given an id.
        let id = match r.executor.as_str() {
            "" => wf::new_executor_id()?,
            _ => ExecutorId::new(r.executor)?,
        };
        let lease_ms = lease(r.lease_ms);
        let spec = wf::ExecutorSpec {
            app_version: r.app_version,
            functions: r.functions,
            node_id: node.settings.node_id.clone(),
            lease_ms,
        };
        let i = id.clone();
        node.write_as(who, move |tx, who, now| {
            wf::register_executor_tx(tx, who, &i, &spec, now)
        })
        .await?;
        Ok(proto::ExecutorInfo {
            executor: id.into_string(),
            node_id: node.settings.node_id.clone(),
            lease_ms,
        })
    });

    op!(RenewExecutor(ExecutorRequest) -> Empty, |node, who, r| {
        let lease_ms = lease(r.lease_ms);
        let ex = ExecutorId::new(r.executor)?;
        node.write_as(who, move |tx, who, now| {
            wf::renew_executor_tx(tx, who, &ex, lease_ms, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(LeaveExecutor(ExecutorRequest) -> Empty, |node, who, r| {
        let ex = ExecutorId::new(r.executor)?;
        node.write_as(who, move |tx, who, now| {
            wf::leave_executor_tx(tx, who, &ex, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(Start(StartWorkflowRequest) -> StartWorkflowResponse, |node, who, r| {
        let proc_ = match r.proc {
            Some(d) => Some(crate::procs::admit(node, &who, d).await?),
            None => None,
        };
        let app_version = match (r.app_version.as_str(), &proc_) {
            ("", Some(d)) => d.code.as_ref().map_or(PROC_VERSION.to_string(), |c| c.to_string()),
            _ => r.app_version,
        };
        let spec = wf::StartSpec {
            id: match r.workflow_id.as_str() {
                "" => new_id()?,
                _ => WorkflowId::new(r.workflow_id)?,
            },
            name: r.name,
            app_version,
            input: r.input,
            queue: opt(r.queue),
            priority: r.priority,
            executor: opt(r.executor).map(ExecutorId::new).transpose()?,
        };
        let Some(d) = proc_ else {
            let s = node
                .write_as(who, move |tx, who, now| wf::start_tx(tx, who, &spec, now))
                .await?;
            return Ok(proto::StartWorkflowResponse {
                created: s.created,
                workflow: Some(info(s.workflow)),
                pid: String::new(),
            });
        };
        let pid = d.pid.clone().unwrap_or_else(tabos_kernel::procs::generate_pid);
        let p = pid.clone();
        let s = node
            .write_as(who, move |tx, who, now| wf::start_in_proc_tx(tx, who, &spec, &p, &d, now))
            .await?;
        // A second start of the id: the first's proc.
        let pid = match s.workflow.executor.clone().map(ExecutorId::new).transpose()? {
            Some(ex) => ex.proc().unwrap_or_default().to_string(),
            None => pid.into_string(),
        };
        Ok(proto::StartWorkflowResponse {
            created: s.created,
            workflow: Some(info(s.workflow)),
            pid,
        })
    });

    /// How long a claim that found nothing sleeps: to its deadline, or to
    /// the time the kernel named (a lease lapsing, a rate period ending —
    /// a known time, not a poll), whichever is first.
    fn claim_sleep(deadline: Instant, retry_at_us: Option<i64>) -> Instant {
        match retry_at_us {
            Some(at) => {
                let wait = (at - tabos_store::now_us()).max(0) as u64;
                deadline.min(Instant::now() + Duration::from_micros(wait))
            }
            None => deadline,
        }
    }

    op!(Recover(ClaimRequest) -> ClaimResponse, |node, who, r| {
        let deadline = wait_deadline(r.wait_ms);
        let channel = wf::orphans_channel(who.realm());
        let mut orphans = node.store.subscribe(&channel);
        let max = claim_max(r.max);
        let executor = ExecutorId::new(r.executor)?;
        loop {
            let ex = executor.clone();
            let c = node
                .write_as(who.clone(), move |tx, who, now| wf::recover_tx(tx, who, &ex, max, now))
                .await?;
            if !c.claims.is_empty() || Instant::now() >= deadline {
                return Ok(claims(c));
            }
            // Woken by an orphan, or when a lease over one lapses.
            wait(node, &mut orphans, &channel, claim_sleep(deadline, c.retry_at_us)).await?;
        }
    });

    op!(Dequeue(ClaimRequest) -> ClaimResponse, |node, who, r| {
        tabos_kernel::ids::validate_name("queue", &r.queue)?;
        let deadline = wait_deadline(r.wait_ms);
        // Subscribed before looking: nothing announced in between is lost.
        let (queue, orphaned) = (
            wf::queue_channel(who.realm(), &r.queue),
            wf::orphans_channel(who.realm()),
        );
        let mut sub = node.store.subscribe(&queue);
        let mut orphans = node.store.subscribe(&orphaned);
        let max = claim_max(r.max);
        let mut stopping = node.stopping.watch();
        let executor = ExecutorId::new(r.executor)?;
        loop {
            let (ex, q) = (executor.clone(), r.queue.clone());
            let c = node
                .write_as(who.clone(), move |tx, who, now| {
                    wf::dequeue_tx(tx, who, &ex, &q, max, now)
                })
                .await?;
            if !c.claims.is_empty() || Instant::now() >= deadline {
                return Ok(claims(c));
            }
            // Woken by the queue, by an orphan, or when a lease lapses or a
            // rate period ends.
            let until = claim_sleep(deadline, c.retry_at_us);
            tokio::select! {
                n = sub.recv() => if n.is_err() {
                    sub = node.store.subscribe(&queue);
                },
                n = orphans.recv() => if n.is_err() {
                    orphans = node.store.subscribe(&orphaned);
                },
                () = tokio::time::sleep_until(until) => {}
                _ = stopping.wait_for(|s| *s) => return Ok(claims(c)),
            }
        }
    });

    op!(StepBegin(StepBeginRequest) -> StepBeginResponse, |node, who, r| {
        let kind = client_step_kind(r.kind)?
            .ok_or_else(|| Error::Invalid("a step's kind is required".into()))?;
        let (ex, id) = ids(&r.executor, &r.workflow_id)?;
        let b = node
            .write_as(who, move |tx, who, now| {
                wf::step_begin_tx(tx, who, &ex, &id, r.step, &r.name, kind, &r.input, now)
            })
            .await?;
        Ok(match b {
            wf::Begun::Done(o) => proto::StepBeginResponse {
                done: Some(outcome_to_proto(o, true)),
                attempt: 0,
            },
            wf::Begun::Run { attempt } => proto::StepBeginResponse {
                done: None,
                attempt,
            },
        })
    });

    op!(StepEnd(StepEndRequest) -> StepOutcome, |node, who, r| {
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
        let o = outcome.clone();
        let (ex, id) = ids(&r.executor, &r.workflow_id)?;
        let got = node
            .write_as(who, move |tx, who, now| {
                wf::step_end_tx(
                    tx,
                    who,
                    &ex,
                    &id,
                    r.step,
                    &o,
                    r.last,
                    unbegun.as_ref(),
                    now,
                )
            })
            .await?;
        let recorded = got != outcome;
        Ok(outcome_to_proto(got, recorded))
    });

    op!(StepProcedure(StepProcedureRequest) -> StepOutcome, |node, who, r| {
        let (executor, workflow) = ids(&r.executor, &r.workflow_id)?;
        let step = ProcedureStep {
            executor,
            workflow,
            step: r.step,
            procedure: r.procedure,
            args: r.args,
            last: r.last,
        };
        let o = step_procedure(&node.store, &node.procedures, who, step).await?;
        Ok(outcome_to_proto(o, false))
    });

    op!(Sleep(SleepRequest) -> SleepResponse, |node, who, r| {
        let (ex, id) = ids(&r.executor, &r.workflow_id)?;
        let (at, now) = node
            .write_as(who, move |tx, who, now| {
                let duration = r.duration_ms.saturating_mul(1_000);
                let at = wf::sleep_tx(tx, who, &ex, &id, r.step, duration, now)?;
                Ok((at, now))
            })
            .await?;
        Ok(proto::SleepResponse {
            wake_at_us: at,
            now_us: now,
        })
    });

    op!(Send(WorkflowSendRequest) -> Empty, |node, who, r| {
        let from = match (r.executor.is_empty(), r.workflow_id.is_empty()) {
            (true, true) => None,
            (false, false) => Some(wf::Sender {
                executor: ExecutorId::new(r.executor)?,
                workflow: WorkflowId::new(r.workflow_id)?,
                step: r.step,
            }),
            _ => {
                return Err(Error::Invalid(
                    "a send from a workflow names its executor, workflow and step".into(),
                ))
            }
        };
        let to = WorkflowId::new(r.to)?;
        node.write_as(who, move |tx, who, now| {
            wf::send_tx(tx, who, from.as_ref(), &to, &r.topic, &r.payload, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(Recv(WorkflowRecvRequest) -> WorkflowRecvResponse, |node, who, r| {
        let deadline = wait_deadline(r.timeout_ms);
        let realm = who.realm().to_string();
        let (executor, workflow) = ids(&r.executor, &r.workflow_id)?;
        let got = until(node, &realm, &workflow, deadline, |give_up| {
            let (ex, id, topic, step) = (
                executor.clone(),
                workflow.clone(),
                r.topic.clone(),
                r.step,
            );
            node.write_as(who.clone(), move |tx, who, now| {
                wf::recv_tx(tx, who, &ex, &id, step, &topic, give_up, now)
            })
        })
        .await?;
        Ok(proto::WorkflowRecvResponse {
            received: got.is_some(),
            payload: got.unwrap_or_default(),
        })
    });

    op!(SetEvent(SetEventRequest) -> Empty, |node, who, r| {
        let (ex, id) = ids(&r.executor, &r.workflow_id)?;
        node.write_as(who, move |tx, who, now| {
            wf::set_event_tx(tx, who, &ex, &id, r.step, &r.key, &r.value, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(GetEvent(GetEventRequest) -> GetEventResponse, |node, who, r| {
        let deadline = wait_deadline(r.timeout_ms);
        let realm = who.realm().to_string();
        let workflow = WorkflowId::new(r.workflow_id)?;
        let v = until(node, &realm, &workflow, deadline, |last| {
            let (id, key) = (workflow.clone(), r.key.clone());
            let read = node.read_as(who.clone(), move |tx, who, _| wf::get_event_tx(tx, who, &id, &key));
            async move {
                let v = read.await?;
                Ok((v.is_some() || last).then_some(v))
            }
        })
        .await?;
        Ok(proto::GetEventResponse {
            set: v.is_some(),
            value: v.unwrap_or_default(),
        })
    });

    op!(Finish(FinishWorkflowRequest) -> Empty, |node, who, r| {
        let outcome = outcome_from_proto(r.outcome)?;
        let (ex, id) = ids(&r.executor, &r.workflow_id)?;
        node.write_as(who, move |tx, who, now| {
            wf::finish_tx(tx, who, &ex, &id, &outcome, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(Wait(WaitWorkflowRequest) -> WorkflowInfo, |node, who, r| {
        let deadline = wait_deadline(r.timeout_ms);
        let realm = who.realm().to_string();
        let workflow = WorkflowId::new(r.workflow_id)?;
        let w = until(node, &realm, &workflow, deadline, |last| {
            let id = workflow.clone();
            let read = node.read_as(who.clone(), move |tx, who, _| wf::get_tx(tx, who, &id));
            let (realm, wid) = (realm.clone(), workflow.clone());
            async move {
                let w = read
                    .await?
                    .ok_or_else(|| Error::NotFound(format!("workflow {wid} in realm {realm}")))?;
                Ok((w.status.is_final() || last).then_some(w))
            }
        })
        .await?;
        Ok(info(w))
    });

    op!(List(ListWorkflowsRequest) -> ListWorkflowsResponse, |node, who, r| {
        let filter = wf::Filter {
            status: crate::wire::field("status", r.status)?,
            name: opt(r.name),
            queue: opt(r.queue),
            app_version: opt(r.app_version),
            since_us: (r.since_us != 0).then_some(r.since_us),
            limit: r.limit as usize,
        };
        let ws = node
            .read_as(who, move |tx, who, _| wf::list_tx(tx, who, &filter))
            .await?;
        Ok(proto::ListWorkflowsResponse {
            workflows: ws.into_iter().map(info).collect(),
        })
    });

    op!(Show(WorkflowRequest) -> WorkflowDetail, |node, who, r| {
        let id = WorkflowId::new(r.workflow_id)?;
        let (w, steps, more) = node
            .read_as(who, move |tx, who, _| wf::show_tx(tx, who, &id, r.after_step))
            .await?;
        Ok(proto::WorkflowDetail {
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
        })
    });

    op!(Cancel(WorkflowRequest) -> WorkflowInfo, |node, who, r| {
        let id = WorkflowId::new(r.workflow_id)?;
        let w = node
            .write_as(who, move |tx, who, now| wf::cancel_tx(tx, who, &id, now))
            .await?;
        Ok(info(w))
    });

    op!(Resume(ResumeWorkflowRequest) -> WorkflowInfo, |node, who, r| {
        let version = opt(r.app_version);
        let id = WorkflowId::new(r.workflow_id)?;
        let w = node
            .write_as(who, move |tx, who, now| {
                wf::resume_tx(tx, who, &id, version.as_deref(), now)
            })
            .await?;
        Ok(info(w))
    });

    op!(Fork(ForkWorkflowRequest) -> WorkflowInfo, |node, who, r| {
        let new_id = match r.new_id.as_str() {
            "" => new_id()?,
            _ => WorkflowId::new(r.new_id)?,
        };
        let id = WorkflowId::new(r.workflow_id)?;
        let from = match r.from_step {
            0 => 1,
            n => n,
        };
        let version = opt(r.app_version);
        let w = node
            .write_as(who, move |tx, who, now| {
                wf::fork_tx(tx, who, &id, &new_id, from, version.as_deref(), now)
            })
            .await?;
        Ok(info(w))
    });

    // Moving a realm's workflows between versions is its operator's (or
    // admin's) call: a deploy.
    op!(Retarget(RetargetRequest) -> RetargetResponse, |node, who, r| {
        let moved = node
            .write_as(who, move |tx, who, now| {
                wf::retarget_tx(tx, who, &r.from_version, &r.to_version, now)
            })
            .await?;
        Ok(proto::RetargetResponse { moved })
    });

    op!(SetQueue(SetQueueRequest) -> QueueInfo, |node, who, r| {
        let limits = wf::QueueLimits {
            concurrency: limit(r.concurrency),
            node_concurrency: limit(r.node_concurrency),
            rate_limit: limit(r.rate_limit),
            rate_period_ms: limit(r.rate_period_ms),
        };
        let q = r.queue.clone();
        let qs = node
            .write_as(who, move |tx, who, now| {
                wf::set_queue_tx(tx, who, &q, &limits, now)?;
                wf::queues_tx(tx, who)
            })
            .await?;
        qs.into_iter()
            .find(|q| q.queue == r.queue)
            .map(queue_info)
            .ok_or_else(|| Error::NotFound(format!("queue {}, just set", r.queue)))
    });

    op!(SetSchedule(ScheduleInfo) -> ScheduleInfo, |node, who, r| {
        let realm = who.realm().to_string();
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
        let s = node
            .write_as(who, move |tx, who, now| wf::set_schedule_tx(tx, who, &s, now))
            .await?;
        Ok(schedule_info(&realm, s))
    });

    op!(ListSchedules(ListSchedulesRequest) -> ListSchedulesResponse, |node, who, _r| {
        let realm = who.realm().to_string();
        let ss = node
            .read_as(who, move |tx, who, _| wf::schedules_tx(tx, who))
            .await?;
        Ok(proto::ListSchedulesResponse {
            schedules: ss.into_iter().map(|s| schedule_info(&realm, s)).collect(),
        })
    });

    op!(RemoveSchedule(RemoveScheduleRequest) -> Empty, |node, who, r| {
        node.write_as(who, move |tx, who, _| wf::remove_schedule_tx(tx, who, &r.schedule))
            .await?;
        Ok(proto::Empty {})
    });

    op!(ListQueues(ListQueuesRequest) -> ListQueuesResponse, |node, who, _r| {
        let qs = node
            .read_as(who, move |tx, who, _| wf::queues_tx(tx, who))
            .await?;
        Ok(proto::ListQueuesResponse {
            queues: qs.into_iter().map(queue_info).collect(),
        })
    });
}
