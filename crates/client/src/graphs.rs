//! Task graphs from the client side (`tabos_kernel::graphs`): submit,
//! add to, close, show, wait for, cancel and list graphs, and a Ray-like
//! builder — [`Graph::call`] returns a [`TaskRef`] that other tasks take
//! as arguments, and [`Graph::get`] submits what is pending and waits for
//! one task's output.
//!
//! ```no_run
//! # async fn f(client: tabos_client::Client) -> Result<(), tabos_client::Error> {
//! use serde_json::json;
//! let mut g = tabos_client::graphs::Graph::held(client, "demo").await?;
//! let a = g.call("add", json!([1, 2]));
//! let b = g.call("add", json!([a.arg(), 3]));
//! let out = g.get(&b).await?; // b"6"
//! g.close().await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use serde_json::Value as Json;

use crate::proto::{self, GraphInfo, GraphTask, ShowGraphResponse, WaitGraphResponse};
use crate::{Client, Error};

/// The longest one Wait call waits (the node's bound); [`Graph::get`]
/// asks again until the task ends.
pub const WAIT_SLICE: Duration = Duration::from_secs(60);

/// A procedure task: `id` calls `procedure` with `args` (a JSON array in
/// which `{"$task": id}` stands for that task's output).
pub fn procedure_task(id: &str, procedure: &str, args: &Json) -> GraphTask {
    GraphTask {
        id: id.into(),
        kind: proto::TaskKind::Procedure.into(),
        target: procedure.into(),
        args: args.to_string().into_bytes(),
        ..GraphTask::default()
    }
}

/// A proc task: `id` spawns `program` with `argv` (a native program; a
/// wasm module with `wasm`), `args` (JSON, references resolved) in its
/// environment as `TABOS_TASK_ARGS`; its stdout is its output once it
/// exits 0.
pub fn proc_task(id: &str, program: &str, argv: &[&str], args: &Json, wasm: bool) -> GraphTask {
    GraphTask {
        id: id.into(),
        kind: proto::TaskKind::Proc.into(),
        target: program.into(),
        args: args.to_string().into_bytes(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        proc_kind: if wasm {
            proto::ProcKind::Wasm
        } else {
            proto::ProcKind::Native
        }
        .into(),
        ..GraphTask::default()
    }
}

/// `{"$task": id}`: what an argument is that takes task `id`'s output.
pub fn task_ref(id: &str) -> Json {
    serde_json::json!({ "$task": id })
}

impl Client {
    /// Submits graph `graph_id` (empty: the node names it) of `realm`;
    /// `result` names the task whose output is the graph's (empty: the
    /// last); a `held` graph takes tasks until closed.
    pub async fn graph_submit(
        &mut self,
        realm: &str,
        graph_id: &str,
        tasks: Vec<GraphTask>,
        result: &str,
        held: bool,
    ) -> Result<GraphInfo, Error> {
        Ok(self
            .graphs
            .submit(proto::SubmitGraphRequest {
                realm: realm.into(),
                graph_id: graph_id.into(),
                tasks,
                result: result.into(),
                held,
            })
            .await?
            .into_inner())
    }

    /// Adds `tasks` to running graph `graph_id`.
    pub async fn graph_add(
        &mut self,
        realm: &str,
        graph_id: &str,
        tasks: Vec<GraphTask>,
    ) -> Result<GraphInfo, Error> {
        Ok(self
            .graphs
            .add_tasks(proto::AddTasksRequest {
                realm: realm.into(),
                graph_id: graph_id.into(),
                tasks,
            })
            .await?
            .into_inner())
    }

    fn graph_request(realm: &str, graph_id: &str) -> proto::GraphRequest {
        proto::GraphRequest {
            realm: realm.into(),
            graph_id: graph_id.into(),
        }
    }

    pub async fn graph_close(&mut self, realm: &str, graph_id: &str) -> Result<GraphInfo, Error> {
        let r = Client::graph_request(realm, graph_id);
        Ok(self.graphs.close(r).await?.into_inner())
    }

    pub async fn graph_show(
        &mut self,
        realm: &str,
        graph_id: &str,
    ) -> Result<ShowGraphResponse, Error> {
        let r = Client::graph_request(realm, graph_id);
        Ok(self.graphs.show(r).await?.into_inner())
    }

    pub async fn graph_cancel(&mut self, realm: &str, graph_id: &str) -> Result<GraphInfo, Error> {
        let r = Client::graph_request(realm, graph_id);
        Ok(self.graphs.cancel(r).await?.into_inner())
    }

    /// Waits up to `timeout` (at most [`WAIT_SLICE`] a call) for graph
    /// `graph_id`, or its task `task` (non-empty), to end.
    pub async fn graph_wait(
        &mut self,
        realm: &str,
        graph_id: &str,
        task: &str,
        timeout: Duration,
    ) -> Result<WaitGraphResponse, Error> {
        Ok(self
            .graphs
            .wait(proto::WaitGraphRequest {
                realm: realm.into(),
                graph_id: graph_id.into(),
                task: task.into(),
                timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            })
            .await?
            .into_inner())
    }

    /// The realm's graphs, newest first (`status`: unspecified for any).
    pub async fn graph_list(
        &mut self,
        realm: &str,
        status: proto::GraphStatus,
        limit: u32,
    ) -> Result<Vec<GraphInfo>, Error> {
        Ok(self
            .graphs
            .list(proto::ListGraphsRequest {
                realm: realm.into(),
                status: status.into(),
                limit,
            })
            .await?
            .into_inner()
            .graphs)
    }
}

/// A task of a [`Graph`], for other tasks to take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef(String);

impl TaskRef {
    pub fn id(&self) -> &str {
        &self.0
    }

    /// The argument that takes this task's output.
    pub fn arg(&self) -> Json {
        task_ref(&self.0)
    }
}

/// A held graph built as Ray's driver submits tasks: calls are kept until
/// [`Graph::submit`] (or a [`Graph::get`]) sends them in one call.
pub struct Graph {
    client: Client,
    realm: String,
    id: String,
    pending: Vec<GraphTask>,
    next: u64,
}

impl Graph {
    /// A new held graph of `realm`.
    pub async fn held(mut client: Client, realm: &str) -> Result<Graph, Error> {
        let g = client.graph_submit(realm, "", Vec::new(), "", true).await?;
        Ok(Graph {
            client,
            realm: realm.into(),
            id: g.graph_id,
            pending: Vec::new(),
            next: 0,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// A task calling `procedure` with `args` (a JSON array; a
    /// [`TaskRef::arg`] in it takes that task's output).
    pub fn call(&mut self, procedure: &str, args: Json) -> TaskRef {
        self.next += 1;
        let id = format!("t{}", self.next);
        self.pending.push(procedure_task(&id, procedure, &args));
        TaskRef(id)
    }

    /// As [`Graph::call`], of a task that may answer a child graph
    /// (`{"$tasks": [...], "$result": id}`).
    pub fn call_dynamic(&mut self, procedure: &str, args: Json) -> TaskRef {
        let t = self.call(procedure, args);
        if let Some(last) = self.pending.last_mut() {
            last.dynamic = true;
        }
        t
    }

    /// Sends the pending tasks.
    pub async fn submit(&mut self) -> Result<(), Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let tasks = std::mem::take(&mut self.pending);
        self.client.graph_add(&self.realm, &self.id, tasks).await?;
        Ok(())
    }

    /// Task `t`'s output, once it has one (pending tasks are sent first):
    /// an error if it failed or was cancelled.
    pub async fn get(&mut self, t: &TaskRef) -> Result<Vec<u8>, Error> {
        self.submit().await?;
        loop {
            let w = self
                .client
                .graph_wait(&self.realm, &self.id, &t.0, WAIT_SLICE)
                .await?;
            let task = w.task.unwrap_or_default();
            if !w.ended {
                continue;
            }
            return match task.status() {
                proto::TaskStatus::Success => Ok(task.output),
                s => Err(Error::Task(format!(
                    "task {} of graph {} {s}: {}",
                    t.0, self.id, task.error
                ))),
            };
        }
    }

    /// Closes the graph (it ends once its tasks have); returns it.
    pub async fn close(&mut self) -> Result<GraphInfo, Error> {
        self.submit().await?;
        self.client.graph_close(&self.realm, &self.id).await
    }
}
