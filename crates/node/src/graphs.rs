//! The `Graphs` service ([`tabos_kernel::graphs`]) and the node's task
//! scheduler.
//!
//! The scheduler ([`schedule`]) claims ready tasks on the partitions whose
//! commits readied some, and runs them in batches ([`run_claims`]): one
//! transaction of tenant code per batch (charged to the realm, sharing the
//! tenant connections with other realms' procedures by run time), each
//! task's run, output and readying of the tasks after it inside it. A
//! claim takes what one batch runs in [`BATCH_TIME`] (by what tasks took
//! lately), at most [`LANES_MAX`] batch runners at once, so a node holds
//! no more than it is about to run and slow tasks spread over the
//! cluster's nodes. It sleeps on [`graphs::READY_CHANNEL`] when nothing is
//! ready — no polling — and is woken by any node's commit that readies a
//! task (the cluster's leader giving a lost node's claims back among
//! them: `lease.rs`) and by workflows' and procs' ends (the tasks waiting
//! for them end with them) in the realms where a task waits for one
//! ([`graphs::WAITING_CHANNEL`]). At its start it gives back what this node
//! claimed before a crash.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tabos_client::proto;
use tabos_kernel::graphs::{self, Claimed, GraphSpec, Kind, TaskSpec};
use tabos_kernel::{Error, Result};
use tabos_store::PKey;
use tokio::time::Instant;

use crate::Node;

/// Most batch runners (lanes) one node runs at once; each holds the
/// claims of one realm on one partition, run one batch after another.
pub const LANES_MAX: usize = 4;
/// How long one batch of tasks runs before it commits (well within the
/// store's bound on tenant code holding the write lock).
pub const BATCH_TIME: Duration = Duration::from_millis(5);
/// Longest wait of one Wait call.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
/// How long the scheduler rests after a database error before it tries
/// again (the database is failing over, or gone).
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// How long a batch the database keeps failing is tried again before its
/// first task's run counts as failed (a failover takes 10–30 s).
const RETRY_WINDOW: Duration = Duration::from_secs(120);

#[derive(Clone)]
pub struct GraphsService {
    node: Node,
}

impl GraphsService {
    pub fn new(node: Node) -> GraphsService {
        GraphsService { node }
    }
}

fn graph_info(g: graphs::Graph) -> proto::GraphInfo {
    let (parent_graph, parent_task) = g.parent.unwrap_or_default();
    proto::GraphInfo {
        graph_id: g.id,
        status: crate::wire::out(g.status),
        user: g.user,
        result_task: g.result_task.unwrap_or_default(),
        output: g.output.unwrap_or_default(),
        error: g.error.unwrap_or_default(),
        parent_graph,
        parent_task,
        created_us: g.created_us,
        ended_us: g.ended_us.unwrap_or(0),
        tasks: g.tasks,
        ended: g.ended,
        held: g.held,
    }
}

fn task_info(t: graphs::Task) -> proto::TaskInfo {
    proto::TaskInfo {
        id: t.id,
        kind: crate::wire::out(t.kind),
        target: t.target,
        status: crate::wire::out(t.status),
        deps: t.deps,
        attempts: t.attempts,
        node_id: t.node_id.unwrap_or_default(),
        child: t.child.unwrap_or_default(),
        output: t.output.unwrap_or_default(),
        error: t.error.unwrap_or_default(),
        created_us: t.created_us,
        started_us: t.started_us.unwrap_or(0),
        ended_us: t.ended_us.unwrap_or(0),
    }
}

/// A task as the wire gives it.
fn task_spec(t: proto::GraphTask) -> Result<TaskSpec> {
    let kind = crate::wire::field::<Kind>("task kind", t.kind)?
        .ok_or_else(|| Error::Invalid(format!("task {} names its kind", t.id)))?;
    let args = match t.args.as_slice() {
        [] => serde_json::Value::Array(Vec::new()),
        a => serde_json::from_slice(a)
            .map_err(|e| Error::Invalid(format!("task {}: arguments are not JSON: {e}", t.id)))?,
    };
    let opt = |s: String| (!s.is_empty()).then_some(s);
    let proc_kind = crate::wire::field::<tabos_kernel::procs::Kind>("proc kind", t.proc_kind)?
        .unwrap_or(tabos_kernel::procs::Kind::Native);
    Ok(TaskSpec {
        id: t.id,
        kind,
        target: t.target,
        args,
        dynamic: t.dynamic,
        attempts_max: t.attempts_max,
        queue: opt(t.queue),
        app_version: opt(t.version),
        argv: t.argv,
        proc_kind,
    })
}

fn task_specs(tasks: Vec<proto::GraphTask>) -> Result<Vec<TaskSpec>> {
    if tasks.len() > graphs::SUBMIT_TASKS_MAX {
        return Err(Error::TooLarge(format!(
            "{} tasks in one call; at most {}",
            tasks.len(),
            graphs::SUBMIT_TASKS_MAX
        )));
    }
    tasks.into_iter().map(task_spec).collect()
}

/// The service's operations: each decodes its request, runs the kernel's
/// operation for the caller (which checks it) and encodes the answer.
pub mod ops {
    use super::*;
    use crate::op::op;

    op!(Submit(SubmitGraphRequest) -> GraphInfo, |node, who, r| {
        let id = match r.graph_id.as_str() {
            "" => graphs::new_graph_id()?,
            _ => r.graph_id,
        };
        let spec = GraphSpec {
            tasks: task_specs(r.tasks)?,
            result: (!r.result.is_empty()).then_some(r.result),
            held: r.held,
        };
        let g = node
            .write_as(who, move |tx, who, now| graphs::submit_tx(tx, who, &id, &spec, now))
            .await?;
        Ok(graph_info(g))
    });

    op!(AddTasks(AddTasksRequest) -> GraphInfo, |node, who, r| {
        let tasks = task_specs(r.tasks)?;
        let id = r.graph_id;
        let g = node
            .write_as(who, move |tx, who, now| graphs::add_tasks_tx(tx, who, &id, &tasks, now))
            .await?;
        Ok(graph_info(g))
    });

    op!(Close(GraphRequest) -> GraphInfo, |node, who, r| {
        let id = r.graph_id;
        Ok(graph_info(
            node.write_as(who, move |tx, who, now| graphs::close_tx(tx, who, &id, now))
                .await?,
        ))
    });

    op!(Show(GraphRequest) -> ShowGraphResponse, |node, who, r| {
        let id = r.graph_id;
        let (g, tasks) = node
            .read_as(who, move |tx, who, _| graphs::show_tx(tx, who, &id))
            .await?;
        Ok(proto::ShowGraphResponse {
            graph: Some(graph_info(g)),
            tasks: tasks.into_iter().map(task_info).collect(),
        })
    });

    op!(Wait(WaitGraphRequest) -> WaitGraphResponse, |node, who, r| {
        wait(node, who, r).await
    });

    op!(Cancel(GraphRequest) -> GraphInfo, |node, who, r| {
        let id = r.graph_id;
        Ok(graph_info(
            node.write_as(who, move |tx, who, now| graphs::cancel_tx(tx, who, &id, now))
                .await?,
        ))
    });

    op!(List(ListGraphsRequest) -> ListGraphsResponse, |node, who, r| {
        let status = crate::wire::field("status", r.status)?;
        let limit = match r.limit {
            0 => 100,
            n => n as usize,
        };
        let list = node
            .read_as(who, move |tx, who, _| graphs::list_tx(tx, who, status, limit))
            .await?;
        Ok(proto::ListGraphsResponse {
            graphs: list.into_iter().map(graph_info).collect(),
        })
    });
}

crate::op::served! {
    GraphsService: proto::graphs_server::Graphs;
    submit(SubmitGraphRequest) -> GraphInfo = Submit;
    add_tasks(AddTasksRequest) -> GraphInfo = AddTasks;
    close(GraphRequest) -> GraphInfo = Close;
    show(GraphRequest) -> ShowGraphResponse = Show;
    wait(WaitGraphRequest) -> WaitGraphResponse = Wait;
    cancel(GraphRequest) -> GraphInfo = Cancel;
    list(ListGraphsRequest) -> ListGraphsResponse = List;
}

/// Waits for graph `r.graph_id` (or its task `r.task`) to end, sleeping on
/// the graph's channel (subscribed before the first look). Woken by every
/// task's end, it looks again only at what concerns it — the graph's end,
/// or its own task's — so a wait costs one read per look, not one per task
/// of the graph.
async fn wait(
    node: &Node,
    who: tabos_kernel::auth::Caller,
    r: proto::WaitGraphRequest,
) -> Result<proto::WaitGraphResponse> {
    let deadline = Instant::now() + Duration::from_millis(u64::from(r.timeout_ms)).min(WAIT_MAX);
    let channel = graphs::graph_channel(who.realm(), &r.graph_id);
    let mut sub = node.store.subscribe(&channel);
    let mut stopping = node.stopping.watch();
    loop {
        // A look: has it ended?
        let (id, task) = (r.graph_id.clone(), r.task.clone());
        let ended = node
            .read_as(who.clone(), move |tx, who, _| {
                let status = graphs::status_tx(tx, who, &id)?.ok_or_else(|| {
                    Error::NotFound(format!("graph {id} in realm {}", who.realm()))
                })?;
                Ok(match task.as_str() {
                    "" => status != graphs::GraphStatus::Running,
                    t => graphs::task_tx(tx, who, &id, t)?
                        .ok_or_else(|| Error::NotFound(format!("task {t} of graph {id}")))?
                        .status
                        .is_final(),
                })
            })
            .await?;
        if ended || Instant::now() >= deadline {
            let (id, task) = (r.graph_id.clone(), r.task.clone());
            let (g, t) = node
                .read_as(who.clone(), move |tx, who, _| {
                    let g = graphs::get_tx(tx, who, &id)?
                        .ok_or_else(|| Error::NotFound(format!("graph {id}")))?;
                    let t = match task.as_str() {
                        "" => None,
                        t => graphs::task_tx(tx, who, &id, t)?,
                    };
                    Ok((g, t))
                })
                .await?;
            return Ok(proto::WaitGraphResponse {
                ended,
                graph: Some(graph_info(g)),
                task: t.map(task_info),
            });
        }
        // Sleeps until something that concerns it is announced.
        loop {
            tokio::select! {
                n = sub.recv() => match n {
                    Ok(n) => {
                        let concerns = match graphs::Announcement::parse(&n.payload) {
                            Some(graphs::Announcement::Task { id, .. }) => id == r.task,
                            Some(graphs::Announcement::Graph(_)) | None => true,
                        };
                        if concerns {
                            break;
                        }
                    }
                    Err(_) => {
                        sub = node.store.subscribe(&channel);
                        break;
                    }
                },
                () = tokio::time::sleep_until(deadline) => break,
                _ = stopping.wait_for(|s| *s) => {
                    return Err(Error::Unavailable("the node is stopping".into()))
                }
            }
        }
    }
}

/// What a batch's transaction did: how many of its claims it ran (a
/// prefix), or at which one it failed and why.
enum Batch {
    /// It ran this many, taking this long to (its commit aside).
    Ran(usize, Duration),
    FailedAt(usize, Error),
}

/// Runs claims `claims` (of one realm, on partition `p`) in batches: each
/// batch one transaction of tenant code, its tasks one after the other
/// until [`BATCH_TIME`] has passed — a commit per batch, not per task. A
/// task that fails rolls its whole batch back (a savepoint would keep the
/// notifications and after-commit hand-overs the failed procedure made):
/// the tasks before it run again as a batch of their own, and its failure
/// is recorded alone ([`graphs::failed_tx`]). A batch the database could
/// not take (a failover) is tried again after [`RETRY_PAUSE`]: its claims
/// stay this node's meanwhile.
/// Returns how long a task took to run, on average (`None`: the node is
/// stopping).
async fn run_claims(node: Node, p: PKey, mut claims: Vec<Claimed>) -> Option<Duration> {
    let n = claims.len() as u32;
    // What its tasks took to run (the batches' own time: not the waits for
    // a tenant connection, nor the commits).
    let mut busy = Duration::ZERO;
    // Since when the database has failed this runner's batches.
    let mut outage: Option<std::time::Instant> = None;
    let id = node.settings.node_id.clone();
    let mut limit = usize::MAX;
    while !claims.is_empty() {
        let store = node.store.for_tenant_code(&claims[0].realm);
        let (sandbox, batch, me) = (node.sandbox.clone(), claims.clone(), id.clone());
        let max = limit.min(batch.len());
        let failed = std::sync::Arc::new(std::sync::Mutex::new(None));
        let failed_in = failed.clone();
        let ran = store
            .submit(p, move |tx| {
                let start = std::time::Instant::now();
                for (i, c) in batch[..max].iter().enumerate() {
                    if i > 0 && start.elapsed() >= BATCH_TIME {
                        return Ok((i, start.elapsed()));
                    }
                    if let Err(e) = graphs::run_tx(tx, &sandbox, c, &me, tabos_store::now_us()) {
                        *failed_in.lock().unwrap_or_else(|p| p.into_inner()) = Some((i, e.clone()));
                        return Err(e);
                    }
                }
                Ok((max, start.elapsed()))
            })
            .await;
        let outcome = match ran {
            Ok((done, took)) => Batch::Ran(done, took),
            Err(e) => match failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some((i, e)) => Batch::FailedAt(i, e),
                // It failed past its tasks: at its commit.
                None => Batch::FailedAt(usize::MAX, e),
            },
        };
        match outcome {
            Batch::Ran(done, took) => {
                outage = None;
                claims.drain(..done);
                busy += took;
                limit = usize::MAX;
            }
            // The database's failure, not a task's (or one past every
            // task): tried again for RETRY_WINDOW, then the first task's.
            Batch::FailedAt(_, e @ Error::Store(_)) | Batch::FailedAt(usize::MAX, e)
                if outage.get_or_insert_with(std::time::Instant::now).elapsed() < RETRY_WINDOW =>
            {
                if *node.stopping.watch().borrow() {
                    return None; // given back at the next start
                }
                tracing::warn!(node = %id, "cannot run graph tasks now ({e}); trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Batch::FailedAt(0, e) | Batch::FailedAt(usize::MAX, e) => {
                outage = None;
                let (c, me) = (claims[0].clone(), id.clone());
                let recorded = node
                    .store
                    .run(p, move |tx| {
                        graphs::failed_tx(tx, &c, &me, &e, tabos_store::now_us())
                    })
                    .await;
                match recorded {
                    Ok(()) => {
                        claims.remove(0);
                    }
                    // Kept, and run again: its claim is still this node's.
                    Err(e) => {
                        tracing::warn!(node = %id, "cannot record a task's failure: {e}");
                        if *node.stopping.watch().borrow() {
                            return None;
                        }
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                }
                limit = usize::MAX;
            }
            // The tasks before the failing one, as a batch of their own.
            Batch::FailedAt(i, _) => {
                outage = None;
                limit = i.max(1);
            }
        }
    }
    Some(busy / n.max(1))
}

/// The node's task scheduler (see the module doc); ends when `stop` is
/// raised.
pub async fn schedule(node: Node, mut stop: tokio::sync::watch::Receiver<bool>) {
    let me = node.settings.node_id.clone();
    let mut ready = node.store.subscribe(graphs::READY_CHANNEL);
    let mut ended = node.store.subscribe(tabos_kernel::workflows::ENDED_CHANNEL);
    let mut procs_ended = node.store.subscribe(tabos_kernel::procs::ENDED_CHANNEL);
    // Subscribed before the realms with waiting tasks are read, so that
    // none starts waiting unseen between.
    let mut started_waiting = node.store.subscribe(graphs::WAITING_CHANNEL);
    let partitions: Vec<PKey> = (0..node.store.partitions()).map(PKey).collect();
    // What this node claimed before it stopped (a crash) is anyone's again.
    match graphs::requeue_node(&node.store, &me).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(node = %me, "gave back {n} graph tasks claimed before a restart"),
        Err(e) => tracing::warn!(node = %me, "cannot give back graph tasks: {e}"),
    }
    let mut running = FuturesUnordered::new();
    // What a task takes, as the last runs went (a moving average): a claim
    // takes what one batch runs in its time, so that a node holds no more
    // tasks than it is about to run, and slow tasks spread over the nodes.
    let mut per_task = Duration::from_micros(200);
    // Realms whose workflows or procs ended: their tasks that wait for
    // them are settled — at the start, every realm with such a task (what
    // ended while no node listened).
    let (realms, complete) = waiting_realms(&node).await;
    // The realms where a task may wait for a workflow or a proc: an end
    // elsewhere needs no look (`graphs::WAITING_CHANNEL` adds a realm; a
    // look that finds none there takes it out — a task that starts waiting
    // after that look is told on the channel after its commit). `None`:
    // not known (a partition could not be read, or had more such realms
    // than one read returns) — every end is looked at.
    let mut waiting: Option<HashSet<String>> = complete.then(|| realms.iter().cloned().collect());
    let mut settle: VecDeque<String> = realms.into();
    // The partitions to claim on: all at first, then those a readying
    // commit named (its payload is the realm) or whose last claim was full.
    let mut due: std::collections::BTreeSet<PKey> = partitions.iter().copied().collect();
    let partition_of = |realm: &str| tabos_kernel::realm_partition(realm, node.store.partitions());
    // Per partition, the realm claimed from last: the next claim starts
    // after it (realms in turn).
    let mut cursor: std::collections::BTreeMap<PKey, String> = Default::default();
    loop {
        // What the database refused now is tried again after a pause
        // (nothing else may come to wake this loop while it is away).
        let mut refused = false;
        let mut unsettled = Vec::new();
        while let Some(realm) = settle.pop_front() {
            // Most ends are of procs and workflows no graph waits for:
            // looked at on a read connection, they cost the writer nothing.
            let r = realm.clone();
            let waits = tabos_kernel::read(&node.store, &realm, move |tx| {
                graphs::waits_on_children_tx(tx, &r)
            })
            .await;
            if matches!(waits, Ok(false)) {
                if let Some(w) = &mut waiting {
                    w.remove(&realm);
                }
                continue;
            }
            let r = realm.clone();
            let settled = tabos_kernel::call(&node.store, &realm, move |tx| {
                graphs::settle_children_tx(tx, &r, tabos_store::now_us())
            })
            .await;
            match settled {
                // One look settles a bounded number: there may be more.
                Ok(n) if n >= graphs::CLAIM_MAX as u64 => settle.push_back(realm),
                Ok(_) => {}
                Err(e @ Error::Store(_)) => {
                    tracing::warn!(node = %me, realm, "cannot settle graph tasks now: {e}");
                    unsettled.push(realm);
                    refused = true;
                }
                Err(e) => tracing::error!(node = %me, realm, "cannot settle graph tasks: {e}"),
            }
        }
        settle.extend(unsettled);
        // Claims while a runner is free.
        if running.len() < LANES_MAX {
            for p in std::mem::take(&mut due) {
                if running.len() >= LANES_MAX {
                    due.insert(p);
                    continue;
                }
                let per_batch = (BATCH_TIME.as_nanos() / per_task.as_nanos().max(1)) as usize;
                let (me2, max) = (me.clone(), per_batch.clamp(1, graphs::CLAIM_MAX));
                let after = cursor.get(&p).cloned().unwrap_or_default();
                match node
                    .store
                    .run(p, move |tx| {
                        graphs::claim_tx(tx, &me2, max, &after, tabos_store::now_us())
                    })
                    .await
                {
                    Ok(claimed) => {
                        if let Some(last) = claimed.last() {
                            cursor.insert(p, last.realm.clone());
                        }
                        // A full claim: there may be more.
                        if claimed.len() == max {
                            due.insert(p);
                        }
                        // One batch runner per realm claimed.
                        let mut by_realm: std::collections::BTreeMap<String, Vec<Claimed>> =
                            Default::default();
                        for c in claimed {
                            by_realm.entry(c.realm.clone()).or_default().push(c);
                        }
                        for (_, cs) in by_realm {
                            running.push(run_claims(node.clone(), p, cs));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(node = %me, "cannot claim graph tasks: {e}");
                        refused = true;
                        due.insert(p);
                    }
                }
            }
        }
        let (mut stopped, mut relist, mut waits_now) = (false, false, Vec::new());
        let may_wait = |realm: &String| waiting.as_ref().is_none_or(|w| w.contains(realm));
        tokio::select! {
            () = tokio::time::sleep(RETRY_PAUSE), if refused => {}
            // A run's end makes room (a claim waiting for it is `due`).
            Some(took) = running.next(), if !running.is_empty() => {
                if let Some(t) = took {
                    per_task = (per_task * 3 + t) / 4;
                }
            }
            n = ready.recv() => {
                // Every readying commit queued so far: one claim for all.
                let mut n = n.map(Some);
                loop {
                    match n {
                        Ok(Some(note)) => {
                            due.insert(partition_of(&note.payload));
                        }
                        Ok(None) => break,
                        Err(_) => {
                            ready = node.store.subscribe(graphs::READY_CHANNEL);
                            due.extend(partitions.iter().copied());
                            break;
                        }
                    }
                    n = ready.try_recv();
                }
            }
            n = ended.recv() => match n {
                Ok(n) => {
                    if may_wait(&n.payload) && !settle.contains(&n.payload) {
                        settle.push_back(n.payload);
                    }
                }
                Err(_) => ended = node.store.subscribe(tabos_kernel::workflows::ENDED_CHANNEL),
            },
            n = procs_ended.recv() => match n {
                Ok(n) => {
                    if may_wait(&n.payload) && !settle.contains(&n.payload) {
                        settle.push_back(n.payload);
                    }
                }
                Err(_) => procs_ended = node.store.subscribe(tabos_kernel::procs::ENDED_CHANNEL),
            },
            n = started_waiting.recv() => {
                // A task now waits: settled at once too (its child may have
                // ended before this was read).
                match n {
                    Ok(n) => waits_now.push(n.payload),
                    Err(_) => {
                        // Notes were missed: known again from a read made
                        // once subscribed again (below).
                        started_waiting = node.store.subscribe(graphs::WAITING_CHANNEL);
                        relist = true;
                    }
                }
            }
            _ = stop.wait_for(|s| *s) => stopped = true,
        }
        if stopped {
            // Runs under way finish (or fail) on their own; what did not
            // commit is given back at the next start.
            while running.next().await.is_some() {}
            return;
        }
        if relist {
            let (realms, complete) = waiting_realms(&node).await;
            waiting = complete.then(HashSet::new);
            waits_now.extend(realms);
        }
        for realm in waits_now {
            if let Some(w) = &mut waiting {
                w.insert(realm.clone());
            }
            if !settle.contains(&realm) {
                settle.push_back(realm);
            }
        }
    }
}

/// The realms with a task waiting for a workflow or a proc, on every
/// partition, and whether that is all of them (each partition read, none
/// at the most one read returns).
async fn waiting_realms(node: &Node) -> (Vec<String>, bool) {
    let (mut out, mut complete) = (Vec::new(), true);
    for p in 0..node.store.partitions() {
        match node.store.read(PKey(p), graphs::waiting_realms_tx).await {
            Ok(realms) => {
                complete &= realms.len() < graphs::CLAIM_REALMS_MAX;
                out.extend(realms);
            }
            Err(e) => {
                complete = false;
                tracing::warn!(node = %node.settings.node_id, "cannot list graph tasks: {e}");
            }
        }
    }
    (out, complete)
}
