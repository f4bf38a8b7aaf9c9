//! `tabos workflow run|list|show|wait|cancel|resume|fork|retarget|send|queue|schedule`:
//! durable workflows seen and operated from the shell (the workflows
//! themselves are code run by executors: `tabos_client::workflows`, the
//! Python SDK's `tabos.workflows` — or wasm modules `run` starts in procs
//! of their own, `tabos_client::wfmodule`).

use std::time::Duration;

use tabos_client::proto;

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
    /// Run a workflow written as a wasm module: upload it, start its
    /// function in a proc of its own (restartable: when its node is lost it
    /// runs again elsewhere, replaying its recorded steps), wait, print its
    /// output; exits non-zero unless it succeeded
    Run(RunArgs),
    /// List workflows, newest first
    #[command(alias = "ls")]
    List {
        /// enqueued, pending, success, error or cancelled
        #[arg(long, value_parser = |s: &str| proto::WorkflowStatus::parse("status", s))]
        status: Option<proto::WorkflowStatus>,
        /// Only this workflow function's
        #[arg(long)]
        name: Option<String>,
        /// Only this queue's
        #[arg(long)]
        queue: Option<String>,
        /// Only this application version's
        #[arg(long = "app-version")]
        app_version: Option<String>,
        /// Only those created in the last D (e.g. 90s, 30m, 12h, 7d)
        #[arg(long)]
        since: Option<String>,
        /// At most this many
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// A workflow and its recorded steps
    Show { id: String },
    /// Wait for a workflow to finish; exits non-zero unless it succeeded
    Wait {
        id: String,
        /// Give up after D
        #[arg(long, default_value = "60s")]
        timeout: String,
    },
    /// Cancel a workflow: its executor stops at its next step
    Cancel { id: String },
    /// Resume a cancelled, failed or stuck workflow from its last completed
    /// step (optionally under another application version)
    Resume {
        id: String,
        #[arg(long = "app-version")]
        app_version: Option<String>,
    },
    /// Start a copy of a workflow that keeps its completed steps before
    /// --from-step and runs the rest again
    Fork {
        id: String,
        /// The first step to run again [default: 1, everything]
        #[arg(long, default_value_t = 1)]
        from_step: i64,
        /// The copy's id [default: a new one]
        #[arg(long)]
        new_id: Option<String>,
        #[arg(long = "app-version")]
        app_version: Option<String>,
    },
    /// Move every unfinished workflow of one application version to another
    /// (after a deploy: the new version's executors take them over)
    Retarget {
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
    /// Send a message to a workflow (its recv steps take it)
    Send {
        id: String,
        topic: String,
        /// The message [default: stdin]
        data: Option<String>,
    },
    /// Queues: tabos workflow queue ls | set Q [--concurrency N] [--node-concurrency N] [--rate N/D]
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Cron schedules: tabos workflow schedule ls | set NAME --workflow F --cron EXPR --app-version V [--queue Q] | rm NAME
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// The module (a .wasm file of yours), or with --code DIR its path in
    /// DIR
    module: std::path::PathBuf,
    /// The workflow function: the module's first argument
    #[arg(long)]
    function: String,
    /// Upload this directory and run MODULE from it [default: upload the
    /// module alone]
    #[arg(long, value_name = "DIR")]
    code: Option<std::path::PathBuf>,
    /// Its input [default: empty]
    #[arg(long, conflicts_with = "input_file")]
    input: Option<String>,
    /// Its input, read from a file (- for stdin)
    #[arg(long, value_name = "PATH")]
    input_file: Option<std::path::PathBuf>,
    /// Its id, the idempotency key: a second run of the id is the first
    /// [default: a new one]
    #[arg(long)]
    id: Option<String>,
    /// [default: the uploaded code's content hash]
    #[arg(long = "app-version")]
    app_version: Option<String>,
    /// How many times its proc runs again when its node is lost, at most
    /// [default: 10]
    #[arg(long, value_name = "N")]
    max_restarts: Option<i64>,
    /// Its proc's memory, in MB
    #[arg(long, default_value_t = tabos_client::wfmodule::MEM_MB_DEFAULT)]
    mem_mb: i64,
    /// A node to prefer (locality scheduler)
    #[arg(long)]
    home_node: Option<String>,
    /// Print its id and proc, and do not wait for it
    #[arg(long)]
    detach: bool,
    /// Give up waiting after D (it runs on)
    #[arg(long, default_value = "1h")]
    timeout: String,
}

#[derive(clap::Subcommand)]
enum ScheduleCommand {
    /// The realm's schedules and their next firings
    #[command(alias = "list")]
    Ls,
    /// Create or replace a schedule: each firing enqueues the workflow once
    /// (as sched-NAME-TIME, its input the firing time in µs)
    Set {
        name: String,
        /// The workflow function to start
        #[arg(long)]
        workflow: String,
        /// 5 fields (minute hour day month weekday) or 6 (a second first), UTC
        #[arg(long)]
        cron: String,
        /// The application version whose executors run it
        #[arg(long = "app-version")]
        app_version: String,
        /// The queue it is enqueued in [default: schedules]
        #[arg(long, default_value = "")]
        queue: String,
    },
    /// Remove a schedule
    Rm { name: String },
}

#[derive(clap::Subcommand)]
enum QueueCommand {
    /// The realm's queues, their limits and what is in them
    #[command(alias = "list")]
    Ls,
    /// Set a queue's limits (taken into account at once, while it runs)
    Set {
        queue: String,
        /// Workflows of the queue running at once over the cluster [default: no limit]
        #[arg(long)]
        concurrency: Option<i64>,
        /// Workflows of the queue running at once on one node [default: no limit]
        #[arg(long)]
        node_concurrency: Option<i64>,
        /// Starts per period, N/D (e.g. 100/1s) [default: no limit]
        #[arg(long)]
        rate: Option<String>,
    },
}

fn time(us: i64) -> String {
    if us == 0 {
        String::new()
    } else {
        crate::output::rfc3339(us)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A step's output as a person reads it: a sleep's is when it wakes (the
/// kernel records µs since the epoch), shown as a time.
fn step_output(s: &proto::WorkflowStep) -> String {
    let out = text(&s.output);
    match (s.kind(), out.parse::<i64>()) {
        (proto::StepKind::Sleep, Ok(us)) => format!("until {}", crate::output::rfc3339(us)),
        _ => out,
    }
}

fn info_json(w: &proto::WorkflowInfo) -> serde_json::Value {
    serde_json::json!({
        "workflow_id": w.workflow_id, "name": w.name, "app_version": w.app_version,
        "status": w.status().name(), "queue": w.queue, "priority": w.priority,
        "input": text(&w.input),
        "output": w.has_output.then(|| text(&w.output)),
        "error": (!w.error.is_empty()).then_some(&w.error),
        "executor": w.executor, "node_id": w.node_id, "attempts": w.attempts,
        "user": w.user, "forked_from": w.forked_from,
        "created": time(w.created_us), "started": time(w.started_us),
        "ended": time(w.ended_us),
        "created_us": w.created_us, "started_us": w.started_us, "ended_us": w.ended_us,
    })
}

fn info_text(w: &proto::WorkflowInfo) -> String {
    let mut s = format!(
        "workflow {} ({} {}): {}",
        w.workflow_id,
        w.name,
        w.app_version,
        w.status()
    );
    if !w.queue.is_empty() {
        s.push_str(&format!(", queue {}", w.queue));
    }
    if !w.executor.is_empty() && w.status() == proto::WorkflowStatus::Pending {
        s.push_str(&format!(", run by {} on {}", w.executor, w.node_id));
    }
    if w.has_output {
        s.push_str(&format!("\noutput: {}", text(&w.output)));
    }
    if !w.error.is_empty() {
        s.push_str(&format!("\nerror: {}", w.error));
    }
    s
}

/// `N/D` as (N, D in ms).
fn parse_rate(s: &str) -> anyhow::Result<(i64, i64)> {
    let (n, d) = s
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--rate {s:?}: expected N/D, e.g. 100/1s"))?;
    let n: i64 = n
        .parse()
        .map_err(|_| anyhow::anyhow!("--rate {s:?}: {n:?} is not a number"))?;
    let ms = crate::tokens::parse_ttl(d)?;
    Ok((n, i64::try_from(ms)?))
}

/// Workflow `id` once it has ended, or as it is after `timeout`.
async fn wait_for(
    rpc: &mut proto::workflows_client::WorkflowsClient<tabos_client::Transport>,
    realm: &str,
    id: &str,
    timeout: Duration,
) -> anyhow::Result<proto::WorkflowInfo> {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let w = rpc
            .wait(proto::WaitWorkflowRequest {
                realm: realm.to_string(),
                workflow_id: id.to_string(),
                timeout_ms: left.min(Duration::from_secs(30)).as_millis() as u32,
            })
            .await
            .map_err(tabos_client::Error::Status)?
            .into_inner();
        if w.status().is_final() || left.is_zero() {
            return Ok(w);
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let realm = args.realm.realm;
    crate::runtime()?.block_on(async {
        let c = args.node.connect().await?;
        let mut rpc = c.workflows_rpc();
        match args.command {
            Command::Run(a) => {
                let input = match (&a.input, &a.input_file) {
                    (Some(t), _) => t.clone().into_bytes(),
                    (None, Some(p)) if p.as_os_str() == "-" => {
                        let mut b = Vec::new();
                        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)?;
                        b
                    }
                    (None, Some(p)) => std::fs::read(p)
                        .map_err(|e| anyhow::anyhow!("--input-file {}: {e}", p.display()))?,
                    (None, None) => Vec::new(),
                };
                let mut w = match &a.code {
                    Some(dir) => {
                        let mut w = tabos_client::wfmodule::ModuleWorkflow::new(dir, &a.function, input);
                        w.program = Some(a.module.to_string_lossy().into_owned());
                        w
                    }
                    None => tabos_client::wfmodule::ModuleWorkflow::new(&a.module, &a.function, input),
                };
                w.id = a.id.clone();
                w.app_version = a.app_version.clone();
                w.max_restarts = a.max_restarts;
                w.mem_mb = a.mem_mb;
                w.home_node = a.home_node.clone();
                let timeout = crate::tokens::parse_ttl(&a.timeout)?;
                let mut c = c.clone();
                let s = c.start_module_workflow(&realm, w).await?;
                let id = s.workflow.workflow_id.clone();
                let what = if s.created { "started" } else { "exists already" };
                if a.detach {
                    crate::output::emit(
                        || format!("workflow {id} {what}, run by proc {}", s.pid),
                        || serde_json::json!({"workflow_id": id, "pid": s.pid, "created": s.created}),
                    );
                    return Ok(());
                }
                if !crate::output::json() {
                    eprintln!("workflow {id} {what}, run by proc {}", s.pid);
                }
                let w = wait_for(&mut rpc, &realm, &id, Duration::from_millis(timeout)).await?;
                crate::output::emit(
                    || match w.status() {
                        proto::WorkflowStatus::Success => text(&w.output),
                        _ => info_text(&w),
                    },
                    || info_json(&w),
                );
                if w.status() != proto::WorkflowStatus::Success {
                    anyhow::bail!("workflow {} is {}", w.workflow_id, w.status());
                }
            }
            Command::List {
                status,
                name,
                queue,
                app_version,
                since,
                limit,
            } => {
                let since_us = match since {
                    Some(d) => {
                        tabos_store::now_us()
                            - i64::try_from(crate::tokens::parse_ttl(&d)?)? * 1_000
                    }
                    None => 0,
                };
                let list = rpc
                    .list(proto::ListWorkflowsRequest {
                        realm,
                        status: status.unwrap_or_default().into(),
                        name: name.unwrap_or_default(),
                        queue: queue.unwrap_or_default(),
                        app_version: app_version.unwrap_or_default(),
                        since_us,
                        limit,
                    })
                    .await
                    .map_err(tabos_client::Error::Status)?
                    .into_inner()
                    .workflows;
                if crate::output::json() {
                    let v: Vec<_> = list.iter().map(info_json).collect();
                    crate::output::doc(&serde_json::Value::Array(v));
                } else {
                    let cols = [
                        "workflow", "function", "version", "status", "queue", "executor",
                        "attempts", "created",
                    ];
                    let rows: Vec<Vec<String>> = list
                        .iter()
                        .map(|w| {
                            vec![
                                w.workflow_id.clone(),
                                w.name.clone(),
                                w.app_version.clone(),
                                w.status().name().to_string(),
                                w.queue.clone(),
                                w.executor.clone(),
                                w.attempts.to_string(),
                                time(w.created_us),
                            ]
                        })
                        .collect();
                    out!("{}", crate::output::table(&cols, &rows));
                }
            }
            Command::Show { id } => {
                // Page by page (a page is bounded by the node).
                let mut d = proto::WorkflowDetail::default();
                let mut after = 0;
                loop {
                    let page = rpc
                        .show(proto::WorkflowRequest {
                            realm: realm.clone(),
                            workflow_id: id.clone(),
                            after_step: after,
                        })
                        .await
                        .map_err(tabos_client::Error::Status)?
                        .into_inner();
                    d.workflow = page.workflow;
                    after = page.steps.last().map_or(after, |s| s.step);
                    d.steps.extend(page.steps);
                    if !page.more {
                        break;
                    }
                }
                let w = d.workflow.unwrap_or_default();
                if crate::output::json() {
                    let mut v = info_json(&w);
                    v["steps"] = d
                        .steps
                        .iter()
                        .map(|s| {
                            serde_json::json!({
                                "step": s.step, "name": s.name, "kind": s.kind().name(),
                                "input": text(&s.input),
                                "status": s.status().name(), "output": text(&s.output),
                                "wakes": (s.kind() == proto::StepKind::Sleep)
                                    .then(|| text(&s.output).parse::<i64>().ok().map(crate::output::rfc3339))
                                    .flatten(),
                                "error": (!s.error.is_empty()).then_some(&s.error),
                                "attempts": s.attempts,
                                "started": time(s.started_us), "ended": time(s.ended_us),
                            })
                        })
                        .collect();
                    crate::output::doc(&v);
                } else {
                    outln!("{}", info_text(&w));
                    let cols = ["step", "name", "kind", "status", "attempts", "output"];
                    let rows: Vec<Vec<String>> = d
                        .steps
                        .iter()
                        .map(|s| {
                            let out = if s.error.is_empty() {
                                step_output(s)
                            } else {
                                s.error.clone()
                            };
                            vec![
                                s.step.to_string(),
                                s.name.clone(),
                                s.kind().name().to_string(),
                                s.status().name().to_string(),
                                s.attempts.to_string(),
                                out.chars().take(60).collect(),
                            ]
                        })
                        .collect();
                    out!("{}", crate::output::table(&cols, &rows));
                }
            }
            Command::Wait { id, timeout } => {
                let timeout = Duration::from_millis(crate::tokens::parse_ttl(&timeout)?);
                let w = wait_for(&mut rpc, &realm, &id, timeout).await?;
                crate::output::emit(|| info_text(&w), || info_json(&w));
                if w.status() != proto::WorkflowStatus::Success {
                    anyhow::bail!("workflow {} is {}", w.workflow_id, w.status());
                }
            }
            Command::Cancel { id } => {
                let w = rpc
                    .cancel(proto::WorkflowRequest {
                        realm,
                        workflow_id: id,
                        after_step: 0,
                    })
                    .await
                    .map_err(tabos_client::Error::Status)?
                    .into_inner();
                crate::output::emit(|| info_text(&w), || info_json(&w));
            }
            Command::Resume { id, app_version } => {
                let w = rpc
                    .resume(proto::ResumeWorkflowRequest {
                        realm,
                        workflow_id: id,
                        app_version: app_version.unwrap_or_default(),
                    })
                    .await
                    .map_err(tabos_client::Error::Status)?
                    .into_inner();
                crate::output::emit(|| info_text(&w), || info_json(&w));
            }
            Command::Fork {
                id,
                from_step,
                new_id,
                app_version,
            } => {
                let w = rpc
                    .fork(proto::ForkWorkflowRequest {
                        realm,
                        workflow_id: id,
                        new_id: new_id.unwrap_or_default(),
                        from_step,
                        app_version: app_version.unwrap_or_default(),
                    })
                    .await
                    .map_err(tabos_client::Error::Status)?
                    .into_inner();
                crate::output::emit(|| info_text(&w), || info_json(&w));
            }
            Command::Retarget { from, to } => {
                let r = rpc
                    .retarget(proto::RetargetRequest {
                        realm,
                        from_version: from.clone(),
                        to_version: to.clone(),
                    })
                    .await
                    .map_err(tabos_client::Error::Status)?
                    .into_inner();
                crate::output::emit(
                    || format!("{} workflows moved from version {from} to {to}", r.moved),
                    || serde_json::json!({"moved": r.moved, "from": from, "to": to}),
                );
            }
            Command::Send { id, topic, data } => {
                let payload = match data {
                    Some(d) => d.into_bytes(),
                    None => {
                        use std::io::Read;
                        let mut b = Vec::new();
                        std::io::stdin()
                            .take(tabos_kernel::workflows::VALUE_BYTES_MAX as u64 + 1)
                            .read_to_end(&mut b)?;
                        b
                    }
                };
                rpc.send(proto::WorkflowSendRequest {
                    realm,
                    to: id.clone(),
                    topic: topic.clone(),
                    payload,
                    ..Default::default()
                })
                .await
                .map_err(tabos_client::Error::Status)?;
                crate::output::emit(
                    || format!("sent to workflow {id} on {topic}"),
                    || serde_json::json!({"workflow_id": id, "topic": topic}),
                );
            }
            Command::Schedule { command } => match command {
                ScheduleCommand::Ls => {
                    let ss = rpc
                        .list_schedules(proto::ListSchedulesRequest { realm })
                        .await
                        .map_err(tabos_client::Error::Status)?
                        .into_inner()
                        .schedules;
                    schedules_out(&ss);
                }
                ScheduleCommand::Set {
                    name,
                    workflow,
                    cron,
                    app_version,
                    queue,
                } => {
                    let s = rpc
                        .set_schedule(proto::ScheduleInfo {
                            realm,
                            schedule: name,
                            name: workflow,
                            cron,
                            app_version,
                            queue,
                            next_us: 0,
                        })
                        .await
                        .map_err(tabos_client::Error::Status)?
                        .into_inner();
                    schedules_out(&[s]);
                }
                ScheduleCommand::Rm { name } => {
                    rpc.remove_schedule(proto::RemoveScheduleRequest {
                        realm,
                        schedule: name.clone(),
                    })
                    .await
                    .map_err(tabos_client::Error::Status)?;
                    crate::output::emit(
                        || format!("schedule {name} removed"),
                        || serde_json::json!({"schedule": name, "removed": true}),
                    );
                }
            },
            Command::Queue { command } => match command {
                QueueCommand::Ls => {
                    let qs = rpc
                        .list_queues(proto::ListQueuesRequest { realm })
                        .await
                        .map_err(tabos_client::Error::Status)?
                        .into_inner()
                        .queues;
                    queues_out(&qs);
                }
                QueueCommand::Set {
                    queue,
                    concurrency,
                    node_concurrency,
                    rate,
                } => {
                    for (flag, v) in [
                        ("--concurrency", concurrency),
                        ("--node-concurrency", node_concurrency),
                    ] {
                        if let Some(n) = v.filter(|&n| n < 1) {
                            anyhow::bail!(
                                "{flag} is at least 1, not {n} (leave it out for no limit)"
                            );
                        }
                    }
                    let (rate_limit, rate_period_ms) = rate
                        .as_deref()
                        .map(parse_rate)
                        .transpose()?
                        .unwrap_or((0, 0));
                    if rate.is_some() && rate_limit < 1 {
                        anyhow::bail!("--rate N/D: N is at least 1");
                    }
                    let q = rpc
                        .set_queue(proto::SetQueueRequest {
                            realm,
                            queue,
                            concurrency: concurrency.unwrap_or(0),
                            node_concurrency: node_concurrency.unwrap_or(0),
                            rate_limit,
                            rate_period_ms,
                        })
                        .await
                        .map_err(tabos_client::Error::Status)?
                        .into_inner();
                    queues_out(&[q]);
                }
            },
        }
        Ok(())
    })
}

fn queues_out(qs: &[proto::QueueInfo]) {
    let none = |n: i64| {
        if n == 0 {
            "-".to_string()
        } else {
            n.to_string()
        }
    };
    if crate::output::json() {
        let v: Vec<_> = qs
            .iter()
            .map(|q| {
                serde_json::json!({
                    "queue": q.queue,
                    "concurrency": (q.concurrency != 0).then_some(q.concurrency),
                    "node_concurrency": (q.node_concurrency != 0).then_some(q.node_concurrency),
                    "rate_limit": (q.rate_limit != 0).then_some(q.rate_limit),
                    "rate_period_ms": (q.rate_period_ms != 0).then_some(q.rate_period_ms),
                    "enqueued": q.enqueued, "pending": q.pending,
                })
            })
            .collect();
        crate::output::doc(&serde_json::Value::Array(v));
        return;
    }
    let cols = [
        "queue",
        "concurrency",
        "per node",
        "rate",
        "enqueued",
        "pending",
    ];
    let rows: Vec<Vec<String>> = qs
        .iter()
        .map(|q| {
            vec![
                q.queue.clone(),
                none(q.concurrency),
                none(q.node_concurrency),
                if q.rate_limit == 0 {
                    "-".into()
                } else {
                    format!("{}/{}ms", q.rate_limit, q.rate_period_ms)
                },
                q.enqueued.to_string(),
                q.pending.to_string(),
            ]
        })
        .collect();
    out!("{}", crate::output::table(&cols, &rows));
}

fn schedules_out(ss: &[proto::ScheduleInfo]) {
    if crate::output::json() {
        let v: Vec<_> = ss
            .iter()
            .map(|s| {
                serde_json::json!({
                    "schedule": s.schedule, "workflow": s.name, "cron": s.cron,
                    "app_version": s.app_version, "queue": s.queue,
                    "next": time(s.next_us), "next_us": s.next_us,
                })
            })
            .collect();
        crate::output::doc(&serde_json::Value::Array(v));
        return;
    }
    let cols = ["schedule", "workflow", "cron", "version", "queue", "next"];
    let rows: Vec<Vec<String>> = ss
        .iter()
        .map(|s| {
            vec![
                s.schedule.clone(),
                s.name.clone(),
                s.cron.clone(),
                s.app_version.clone(),
                s.queue.clone(),
                time(s.next_us),
            ]
        })
        .collect();
    out!("{}", crate::output::table(&cols, &rows));
}
