//! `tabos graph submit|show|wait|cancel|ls`: task graphs.
//!
//! A graph file is JSON: `{"tasks": [{"id": "a", "procedure": "add",
//! "args": [1, 2]}, {"id": "b", "procedure": "add", "args": [{"$task":
//! "a"}, 3]}], "result": "b"}` — a task names a `procedure`, a
//! `workflow` (with its `queue` and `version`) or a `proc` (a program,
//! with its `argv`, `wasm` for a module), may be `dynamic` and set
//! `attempts_max`.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value as Json;
use tabos_client::proto::{self, GraphInfo, GraphTask, TaskInfo};

use crate::procs::RealmArg;
use crate::NodeAddr;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Submit a graph from a JSON file (- for stdin) and print its id; its
    /// tasks (procedures, workflows, procs) run as their inputs complete,
    /// each procedure task in one transaction with its output
    Submit {
        file: String,
        /// The graph's id (a second submit of it is the first): default, a
        /// new one
        #[arg(long, default_value = "")]
        id: String,
        /// Wait for it to end and print its output (exit 1 if it failed)
        #[arg(long)]
        wait: bool,
    },
    /// Show a graph and its tasks (each with the tasks it takes)
    Show { id: String },
    /// Wait for a graph (or one --task) to end and print its output; exit 1
    /// if it failed or was cancelled
    Wait {
        id: String,
        #[arg(long, default_value = "")]
        task: String,
        /// Give up after this many seconds (exit 2) [default: wait on]
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Cancel a graph: its waiting and running tasks, child graphs,
    /// workflows and procs
    Cancel { id: String },
    /// List the realm's graphs, newest first
    Ls {
        /// Only graphs of this status (running, success, error, cancelled)
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

/// The tasks and result of a graph file.
fn read_graph(path: &str) -> anyhow::Result<(Vec<GraphTask>, String)> {
    let mut text = Vec::new();
    if path == "-" {
        std::io::stdin().read_to_end(&mut text)?;
    } else {
        text = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
    }
    let v: Json = serde_json::from_slice(&text).with_context(|| format!("{path} is not JSON"))?;
    let tasks = v
        .get("tasks")
        .and_then(Json::as_array)
        .with_context(|| format!("{path}: a graph has a \"tasks\" array"))?;
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let text = |k: &str| t.get(k).and_then(Json::as_str).unwrap_or("").to_string();
        let (kind, target) = match (t.get("procedure"), t.get("workflow"), t.get("proc")) {
            (Some(_), None, None) => (proto::TaskKind::Procedure, text("procedure")),
            (None, Some(_), None) => (proto::TaskKind::Workflow, text("workflow")),
            (None, None, Some(_)) => (proto::TaskKind::Proc, text("proc")),
            _ => {
                anyhow::bail!("{path}: task {t} names one \"procedure\", \"workflow\" or \"proc\"")
            }
        };
        let argv = match t.get("argv") {
            None => Vec::new(),
            Some(a) => a
                .as_array()
                .and_then(|a| a.iter().map(|v| v.as_str().map(String::from)).collect())
                .with_context(|| format!("{path}: task {t}'s \"argv\" is an array of strings"))?,
        };
        let wasm = t.get("wasm").and_then(Json::as_bool).unwrap_or(false);
        out.push(GraphTask {
            id: text("id"),
            kind: kind.into(),
            target,
            args: t
                .get("args")
                .map(|a| a.to_string().into_bytes())
                .unwrap_or_default(),
            dynamic: t.get("dynamic").and_then(Json::as_bool).unwrap_or(false),
            attempts_max: t
                .get("attempts_max")
                .and_then(Json::as_u64)
                .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            queue: text("queue"),
            version: text("version"),
            argv,
            proc_kind: if wasm {
                proto::ProcKind::Wasm
            } else {
                proto::ProcKind::Native
            }
            .into(),
        });
    }
    let result = v.get("result").and_then(Json::as_str).unwrap_or("");
    Ok((out, result.to_string()))
}

/// An output as JSON: itself if it is JSON, else its text.
fn output_json(o: &[u8]) -> Json {
    serde_json::from_slice(o).unwrap_or_else(|_| Json::String(String::from_utf8_lossy(o).into()))
}

fn graph_json(g: &GraphInfo) -> Json {
    serde_json::json!({
        "graph_id": g.graph_id, "status": g.status().name(), "user": g.user,
        "result_task": g.result_task, "output": output_json(&g.output), "error": g.error,
        "parent_graph": g.parent_graph, "parent_task": g.parent_task,
        "tasks": g.tasks, "ended": g.ended, "held": g.held,
        "created": crate::output::rfc3339(g.created_us),
        "ended_at": (g.ended_us != 0).then(|| crate::output::rfc3339(g.ended_us)),
    })
}

fn task_json(t: &TaskInfo) -> Json {
    serde_json::json!({
        "id": t.id, "kind": t.kind().name(), "target": t.target, "status": t.status().name(),
        "deps": t.deps, "attempts": t.attempts, "node_id": t.node_id, "child": t.child,
        "output": output_json(&t.output), "error": t.error,
    })
}

/// Prints an output (with a newline if it has none).
fn print_output(o: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(o)?;
    if o.last() != Some(&b'\n') {
        stdout.write_all(b"\n")?;
    }
    Ok(())
}

/// Waits for graph `id` (or its `task`) up to `timeout`; prints its output
/// or says why not, and exits 1 (failed) or 2 (timed out).
async fn wait_and_print(
    c: &mut tabos_client::Client,
    realm: &str,
    id: &str,
    task: &str,
    timeout: Option<u64>,
) -> anyhow::Result<()> {
    let deadline = timeout.map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
    loop {
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(tokio::time::Instant::now()),
            None => tabos_client::graphs::WAIT_SLICE,
        }
        .min(tabos_client::graphs::WAIT_SLICE);
        let w = c.graph_wait(realm, id, task, slice).await?;
        let g = w.graph.clone().unwrap_or_default();
        if w.ended {
            if crate::output::json() {
                let mut v = graph_json(&g);
                if let Some(t) = &w.task {
                    v["task"] = task_json(t);
                }
                crate::output::doc(&v);
            }
            let (ok, output, error, what) = match &w.task {
                Some(t) => (
                    t.status() == proto::TaskStatus::Success,
                    &t.output,
                    &t.error,
                    format!("task {} {}", t.id, t.status()),
                ),
                None => (
                    g.status() == proto::GraphStatus::Success,
                    &g.output,
                    &g.error,
                    format!("graph {} {}", g.graph_id, g.status()),
                ),
            };
            if ok {
                if !crate::output::json() {
                    print_output(output)?;
                }
                return Ok(());
            }
            eprintln!("{what}: {error}");
            std::process::exit(1);
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            eprintln!(
                "graph {id} is still running ({} of {} tasks ended)",
                g.ended, g.tasks
            );
            std::process::exit(2);
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let realm = args.realm.realm.clone();
    crate::runtime()?.block_on(async {
        let mut c = args.node.connect().await?;
        match args.command {
            Command::Submit { file, id, wait } => {
                let (tasks, result) = read_graph(&file)?;
                let g = c.graph_submit(&realm, &id, tasks, &result, false).await?;
                if wait {
                    return wait_and_print(&mut c, &realm, &g.graph_id, "", None).await;
                }
                crate::output::emit(|| g.graph_id.clone(), || graph_json(&g));
            }
            Command::Show { id } => {
                let s = c.graph_show(&realm, &id).await?;
                let g = s.graph.unwrap_or_default();
                if crate::output::json() {
                    let mut v = graph_json(&g);
                    v["task_list"] = s.tasks.iter().map(task_json).collect();
                    crate::output::doc(&v);
                    return Ok(());
                }
                let mut out = std::io::stdout().lock();
                writeln!(
                    out,
                    "graph {} {} ({} of {} tasks ended){}{}",
                    g.graph_id,
                    g.status(),
                    g.ended,
                    g.tasks,
                    if g.parent_graph.is_empty() {
                        String::new()
                    } else {
                        format!(", child of {}/{}", g.parent_graph, g.parent_task)
                    },
                    if g.error.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", g.error)
                    }
                )?;
                writeln!(
                    out,
                    "{:<16} {:<9} {:<10} {:<20} {:>3}  {:<24} OUTPUT/ERROR",
                    "TASK", "KIND", "STATUS", "TARGET", "RUN", "TAKES"
                )?;
                for t in &s.tasks {
                    let shown = if t.error.is_empty() {
                        String::from_utf8_lossy(&t.output)
                            .chars()
                            .take(40)
                            .collect::<String>()
                    } else {
                        t.error.replace('\n', " ").chars().take(60).collect()
                    };
                    writeln!(
                        out,
                        "{:<16} {:<9} {:<10} {:<20} {:>3}  {:<24} {}{}",
                        t.id,
                        t.kind().name(),
                        t.status().name(),
                        t.target,
                        t.attempts,
                        t.deps.join(","),
                        shown,
                        if t.child.is_empty() {
                            String::new()
                        } else {
                            format!(" (child {})", t.child)
                        }
                    )?;
                }
            }
            Command::Wait { id, task, timeout } => {
                return wait_and_print(&mut c, &realm, &id, &task, timeout).await;
            }
            Command::Cancel { id } => {
                let g = c.graph_cancel(&realm, &id).await?;
                crate::output::emit(
                    || format!("graph {} {}", g.graph_id, g.status()),
                    || graph_json(&g),
                );
            }
            Command::Ls { status, limit } => {
                let status = match status {
                    Some(s) => {
                        proto::GraphStatus::parse("--status", &s).map_err(anyhow::Error::msg)?
                    }
                    None => proto::GraphStatus::Unspecified,
                };
                let list = c.graph_list(&realm, status, limit).await?;
                if crate::output::json() {
                    crate::output::doc(&list.iter().map(graph_json).collect());
                    return Ok(());
                }
                let mut out = std::io::stdout().lock();
                writeln!(
                    out,
                    "{:<28} {:<10} {:>7} {:>7}  CREATED",
                    "GRAPH", "STATUS", "TASKS", "ENDED"
                )?;
                for g in list {
                    writeln!(
                        out,
                        "{:<28} {:<10} {:>7} {:>7}  {}",
                        g.graph_id,
                        g.status().name(),
                        g.tasks,
                        g.ended,
                        crate::output::rfc3339(g.created_us)
                    )?;
                }
            }
        }
        Ok(())
    })
}
