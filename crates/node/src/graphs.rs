//! The `Graphs` service ([`tabos_kernel::graphs`]) and the node's task
//! scheduler.
//!
//! The scheduler ([`schedule`]) claims ready tasks on every partition and
//! runs each in a transaction of its own on its realm's partition, as
//! tenant code (charged to the realm, sharing the executor with other
//! realms' procedures by run time); many run at once, so the store commits
//! them together. It sleeps on [`graphs::READY_CHANNEL`] when nothing is
//! ready — no polling — and is woken by any node's commit that readies a
//! task, by a lost node (its claims given back) and by workflows' ends
//! (a graph's workflow tasks end with them). At its start it gives back
//! what this node claimed before a crash.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tabos_client::proto;
use tabos_kernel::graphs::{self, Claimed, GraphSpec, Kind, TaskSpec};
use tabos_kernel::{Error, Result};
use tabos_store::PKey;
use tokio::time::Instant;

use crate::Node;

/// Most tasks one node runs at once (claimed and not yet committed).
pub const RUNNING_MAX: usize = 512;
/// Longest wait of one Wait call.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
/// How long the scheduler rests after a database error before it tries
/// again (the database is failing over, or gone).
const RETRY_PAUSE: Duration = Duration::from_millis(500);

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
    Ok(TaskSpec {
        id: t.id,
        kind,
        target: t.target,
        args,
        dynamic: t.dynamic,
        attempts_max: t.attempts_max,
        queue: opt(t.queue),
        app_version: opt(t.version),
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
/// the graph's channel (subscribed before the first look).
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
        let (id, task) = (r.graph_id.clone(), r.task.clone());
        let (g, t) = node
            .read_as(who.clone(), move |tx, who, _| {
                let g = graphs::get_tx(tx, who, &id)?.ok_or_else(|| {
                    Error::NotFound(format!("graph {id} in realm {}", who.realm()))
                })?;
                let t = match task.as_str() {
                    "" => None,
                    t => Some(
                        graphs::task_tx(tx, who, &id, t)?
                            .ok_or_else(|| Error::NotFound(format!("task {t} of graph {id}")))?,
                    ),
                };
                Ok((g, t))
            })
            .await?;
        let ended = match &t {
            Some(t) => t.status.is_final(),
            None => g.status != graphs::GraphStatus::Running,
        };
        if ended || Instant::now() >= deadline {
            return Ok(proto::WaitGraphResponse {
                ended,
                graph: Some(graph_info(g)),
                task: t.map(task_info),
            });
        }
        tokio::select! {
            n = sub.recv() => if n.is_err() {
                sub = node.store.subscribe(&channel);
            },
            () = tokio::time::sleep_until(deadline) => {}
            _ = stopping.wait_for(|s| *s) => {
                return Err(Error::Unavailable("the node is stopping".into()))
            }
        }
    }
}

/// One claimed task's run and, if it failed, its record.
async fn run_one(node: Node, p: PKey, c: Claimed) {
    let id = node.settings.node_id.clone();
    let store = node.store.for_tenant_code(&c.realm);
    let (sandbox, claim, me) = (node.sandbox.clone(), c.clone(), id.clone());
    let ran = store
        .submit(p, move |tx| {
            graphs::run_tx(tx, &sandbox, &claim, &me, tabos_store::now_us())
        })
        .await;
    let Err(e) = ran else { return };
    let stopping = *node.stopping.watch().borrow();
    if matches!(e, Error::Store(_)) && stopping {
        return; // given back at the next start
    }
    let failed = node
        .store
        .run(p, move |tx| {
            graphs::failed_tx(tx, &c, &id, &e, tabos_store::now_us())
        })
        .await;
    if let Err(e) = failed {
        tracing::warn!(node = %node.settings.node_id, "cannot record a task's failure: {e}");
    }
}

/// The node's task scheduler (see the module doc); ends when `stop` is
/// raised.
pub async fn schedule(node: Node, mut stop: tokio::sync::watch::Receiver<bool>) {
    let me = node.settings.node_id.clone();
    let mut ready = node.store.subscribe(graphs::READY_CHANNEL);
    let mut lost = node.store.subscribe(tabos_kernel::nodes::CHANGED_CHANNEL);
    let mut ended = node.store.subscribe(tabos_kernel::workflows::ENDED_CHANNEL);
    let partitions: Vec<PKey> = (0..node.store.partitions()).map(PKey).collect();
    // What this node claimed before it stopped (a crash) is anyone's again.
    for &p in &partitions {
        let mine = me.clone();
        match node
            .store
            .run(p, move |tx| graphs::requeue_node_tx(tx, &mine))
            .await
        {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(node = %me, "gave back {n} graph tasks claimed before a restart")
            }
            Err(e) => tracing::warn!(node = %me, "cannot give back graph tasks: {e}"),
        }
    }
    let mut running = FuturesUnordered::new();
    // Realms whose workflows ended: their workflow tasks are settled.
    let mut settle: VecDeque<String> = VecDeque::new();
    let mut look = true;
    // Lost nodes whose claims were given back.
    let mut given_back = std::collections::BTreeSet::new();
    let mut check_lost = false;
    loop {
        if std::mem::take(&mut check_lost) {
            give_back_lost(&node, &mut given_back).await;
        }
        while let Some(realm) = settle.pop_front() {
            let r = realm.clone();
            let settled = tabos_kernel::call(&node.store, &realm, move |tx| {
                graphs::settle_workflows_tx(tx, &r, tabos_store::now_us())
            })
            .await;
            if let Err(e) = settled {
                tracing::warn!(node = %me, realm, "cannot settle workflow tasks: {e}");
            }
        }
        if look && running.len() < RUNNING_MAX / 2 {
            look = false;
            for &p in &partitions {
                let (me2, max) = (
                    me.clone(),
                    (RUNNING_MAX - running.len()).min(graphs::CLAIM_MAX),
                );
                match node
                    .store
                    .run(p, move |tx| {
                        graphs::claim_tx(tx, &me2, max, tabos_store::now_us())
                    })
                    .await
                {
                    Ok(claimed) => {
                        // A full claim: there may be more.
                        look |= claimed.len() == max;
                        for c in claimed {
                            running.push(run_one(node.clone(), p, c));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(node = %me, "cannot claim graph tasks: {e}");
                        tokio::time::sleep(RETRY_PAUSE).await;
                        look = true;
                    }
                }
            }
        }
        let mut stopped = false;
        tokio::select! {
            Some(()) = running.next(), if !running.is_empty() => look = true,
            n = ready.recv() => {
                look = true;
                if n.is_err() {
                    ready = node.store.subscribe(graphs::READY_CHANNEL);
                }
            }
            n = lost.recv() => {
                match n {
                    Ok(_) => check_lost = true,
                    Err(_) => lost = node.store.subscribe(tabos_kernel::nodes::CHANGED_CHANNEL),
                }
            }
            n = ended.recv() => match n {
                Ok(n) => {
                    if !settle.contains(&n.payload) {
                        settle.push_back(n.payload);
                    }
                }
                Err(_) => ended = node.store.subscribe(tabos_kernel::workflows::ENDED_CHANNEL),
            },
            _ = stop.wait_for(|s| *s) => stopped = true,
        }
        if stopped {
            // Runs under way finish (or fail) on their own; what did not
            // commit is given back at the next start.
            while running.next().await.is_some() {}
            return;
        }
    }
}

/// Gives back the graph tasks of every node declared lost and not given
/// back yet (`given`: a node's change woke the scheduler). A lost node's
/// runs are refused should it try to commit them.
async fn give_back_lost(node: &Node, given: &mut std::collections::BTreeSet<String>) {
    let store = node.store.clone();
    let listed = tokio::task::spawn_blocking(move || tabos_kernel::nodes::list(&store, None)).await;
    let lost = match listed {
        Ok(Ok(nodes)) => nodes
            .into_iter()
            .filter(|n| n.lost_us.is_some() && n.state == tabos_kernel::nodes::NodeState::Lost)
            .map(|n| n.node_id)
            .collect::<std::collections::BTreeSet<_>>(),
        Ok(Err(e)) => {
            tracing::warn!(node = %node.settings.node_id, "cannot list nodes: {e}");
            return;
        }
        Err(e) => {
            tracing::warn!(node = %node.settings.node_id, "cannot list nodes: {e}");
            return;
        }
    };
    // One that came back and is lost again is given back again.
    given.retain(|id| lost.contains(id));
    for id in lost {
        if !given.insert(id.clone()) {
            continue;
        }
        for p in 0..node.store.partitions() {
            let lost = id.clone();
            let given = node
                .store
                .run(PKey(p), move |tx| graphs::requeue_node_tx(tx, &lost))
                .await;
            match given {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    node = %node.settings.node_id, "gave back {n} graph tasks of lost node {id}"),
                Err(e) => {
                    tracing::warn!(node = %node.settings.node_id, "cannot give back tasks: {e}")
                }
            }
        }
    }
}
