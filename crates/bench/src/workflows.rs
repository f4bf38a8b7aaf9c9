//! Suite `workflows` (issue 22): durable workflows against DBOS Transact,
//! on the same machine, on SQLite and on PostgreSQL, in the same run.
//!
//! Contestants:
//! * tabos: a node (`tabos up`, its own process) at durability `full` on
//!   SQLite (every group commit fsynced, as SQLite's default `synchronous
//!   = FULL` that DBOS runs with), or on a PostgreSQL cluster with fsync on
//!   and a pool of 20 connections (DBOS's default for its system database);
//!   the workflows run in this process through `tabos_client::workflows`.
//! * DBOS Transact (`pip install dbos`, into the bench virtualenv, once),
//!   its system database a SQLite file or a database of the same
//!   PostgreSQL cluster; its workflows run in its Python process
//!   (`crates/bench/peers/dbos_workflows.py`).
//!
//! Both record every step's output before the workflow goes on. Figures,
//! per backend:
//! * `starts`: one-step workflows started and awaited, 16 in flight;
//! * `steps`: one workflow's steps, in sequence (tabos: function steps,
//!   and, apart, stored-procedure steps, which are exactly once, and the
//!   function steps of a workflow written as a wasm module, run by a proc
//!   of its own: `examples/workflow-wasm`);
//! * `queue_latency`: the time from an enqueue to the workflow's first line
//!   (DBOS with its default queue polling, 1 s, and polling every 10 ms);
//! * `recovery`: a process with 1,000 workflows half done is SIGKILLed; the
//!   time for a restarted executor (the same executor id, as DBOS recovers
//!   at launch) to finish all of them.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_client::workflows::{Executor, ExecutorOptions, Registry};

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};

const DBOS_SCRIPT: &str = include_str!("../peers/dbos_workflows.py");
/// The executor id both contestants restart with for recovery.
const EXECUTOR_ID: &str = "bench-executor";
const VERSION: &str = "bench-v1";
const IN_FLIGHT: usize = 16;

/// Sizes of one run.
struct Sizes {
    starts: usize,
    steps: usize,
    queue_samples: usize,
    pending: usize,
}

impl Sizes {
    fn of(quick: bool) -> Sizes {
        if quick {
            Sizes {
                starts: 200,
                steps: 300,
                queue_samples: 10,
                pending: 200,
            }
        } else {
            Sizes {
                starts: 2_000,
                steps: 2_000,
                queue_samples: 50,
                pending: 1_000,
            }
        }
    }
}

/// When each `marked` workflow's function began (the queue latency's end).
fn marks() -> &'static Mutex<HashMap<String, Instant>> {
    static M: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// Set in the `wf-pending` worker: the second step blocks there.
static DOOMED: OnceLock<bool> = OnceLock::new();

/// One permit per workflow that reached its second step (the worker).
fn in_second() -> &'static tokio::sync::Semaphore {
    static S: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    S.get_or_init(|| tokio::sync::Semaphore::new(0))
}

/// The benchmark's workflow functions (the same on both sides).
fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("one", |ctx, input| async move {
        ctx.step("s", move |_| {
            let input = input.clone();
            async move { Ok(input) }
        })
        .await
    });
    r.register("many", |ctx, input| async move {
        let n: usize = String::from_utf8_lossy(&input).parse().unwrap_or(0);
        for i in 0..n {
            ctx.step("s", move |_| async move { Ok(i.to_string().into_bytes()) })
                .await?;
        }
        Ok(input)
    });
    r.register("many_procedures", |ctx, input| async move {
        let n: usize = String::from_utf8_lossy(&input).parse().unwrap_or(0);
        for i in 0..n {
            ctx.procedure("noop", i.to_string().into_bytes()).await?;
        }
        Ok(input)
    });
    r.register("marked", |ctx, input| async move {
        marks()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ctx.workflow_id().to_string(), Instant::now());
        ctx.step("s", move |_| {
            let input = input.clone();
            async move { Ok(input) }
        })
        .await
    });
    r.register("two", |ctx, input| async move {
        ctx.step("a", |_| async { Ok(Vec::new()) }).await?;
        ctx.step("b", |_| async {
            if DOOMED.get().copied().unwrap_or(false) {
                in_second().add_permits(1);
                std::future::pending::<()>().await;
            }
            Ok(Vec::new())
        })
        .await?;
        Ok(input)
    });
    r
}

async fn executor(addr: &str, token: &str, id: Option<&str>) -> anyhow::Result<Executor> {
    let c = tabos_client::Client::connect(addr, token).await?;
    Ok(Executor::start(
        c,
        "",
        VERSION,
        registry(),
        ExecutorOptions {
            id: id.map(String::from),
            ..Default::default()
        },
    )
    .await?)
}

/// The `wf-pending` worker: starts `n` `two` workflows as executor
/// [`EXECUTOR_ID`], prints READY once every one is in its second step
/// (which never ends here), and waits to be killed.
pub fn pending_worker(args: &[String]) -> i32 {
    let [addr, token, n] = args else {
        eprintln!("usage: tabos-bench bench-worker wf-pending ADDR TOKEN N");
        return 2;
    };
    let Ok(n) = n.parse::<usize>() else {
        eprintln!("wf-pending: N must be a number");
        return 2;
    };
    let _ = DOOMED.set(true);
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        return 1;
    };
    let r: anyhow::Result<()> = rt.block_on(async {
        let exec = executor(addr, token, Some(EXECUTOR_ID)).await?;
        for i in 0..n {
            exec.run("two", Some(&format!("pending-{i}")), Vec::new())
                .await?;
        }
        // Each is in its second step (its first recorded) once it counts
        // itself in.
        let all = u32::try_from(n)?;
        let _in_second = in_second().acquire_many(all).await?;
        println!("READY");
        std::future::pending::<()>().await;
        Ok(())
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wf-pending: {e:#}");
            1
        }
    }
}

/// One backend's systems.
struct Systems {
    node: crate::elastic::NodeProc,
    dbos_url: String,
    label: &'static str,
}

fn dbos(
    python: &Path,
    script: &Path,
    url: &str,
    args: &[&str],
) -> anyhow::Result<serde_json::Value> {
    let out = Command::new(python)
        .arg(script)
        .arg(args[0])
        .arg(url)
        .args(&args[1..])
        .stderr(Stdio::inherit())
        .output()
        .context("running the DBOS Transact script")?;
    anyhow::ensure!(
        out.status.success(),
        "DBOS Transact {} failed: {}",
        args[0],
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().context("DBOS printed nothing")?;
    Ok(serde_json::from_str(line)?)
}

/// Kills the process with SIGKILL.
fn kill9(child: &mut std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits for a child's READY line.
fn ready(child: &mut std::process::Child, what: &str) -> anyhow::Result<()> {
    use std::io::BufRead;
    let out = child.stdout.take().context("stdout")?;
    let mut lines = std::io::BufReader::new(out).lines();
    for l in lines.by_ref() {
        if l? == "READY" {
            // Drain the rest so it never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(());
        }
    }
    anyhow::bail!("{what} ended before it was ready")
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let sizes = Sizes::of(quick);
    let python = crate::venv::python_with("dbos", "dbos").map_err(anyhow::Error::msg)?;
    let dir = tabos_store::testing::TempDir::new("bench-workflows");
    let script = dir.path().join("dbos_workflows.py");
    std::fs::write(&script, DBOS_SCRIPT)?;
    let exe = crate::tabos_exe()?;
    let module = workflow_module(dir.path())?;
    let mut report = Report::new("workflows", quick);
    let dbos_version = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('dbos'))",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    report.notes.push(format!(
        "peer: DBOS Transact {dbos_version} (pip), in its own Python process"
    ));

    // SQLite.
    {
        let data = dir.path().join("tabos-sqlite");
        let node = crate::elastic::start_node(&exe, &["--durability", "full"], &data)?;
        let dbos_url = format!("sqlite:///{}", dir.path().join("dbos.sqlite").display());
        let sys = Systems {
            node,
            dbos_url,
            label: "sqlite",
        };
        measure(&sys, &sizes, &python, &script, &module, &mut report)?;
    }
    // PostgreSQL: one cluster, a database each.
    match tabos_store::pg_cluster::TempCluster::start(&tabos_store::pg_cluster::ClusterOptions {
        fsync: true,
        ..Default::default()
    }) {
        Ok(cluster) => {
            let tabos_db = cluster.create_database("tabos")?;
            let dbos_db = cluster.create_database("dbos")?;
            let data = dir.path().join("tabos-pg");
            // The same pool as DBOS Transact's system database (20).
            let node = crate::elastic::start_node(
                &exe,
                &["--db", &tabos_db, "--db-connections", "20"],
                &data,
            )?;
            let sys = Systems {
                node,
                dbos_url: dbos_db,
                label: "postgres",
            };
            measure(&sys, &sizes, &python, &script, &module, &mut report)?;
        }
        Err(e) => report
            .notes
            .push(format!("PostgreSQL figures skipped: {e}")),
    }
    Ok(report)
}

/// The example workflow module (`examples/workflow-wasm`), built into
/// `dir` with its build script.
fn workflow_module(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    crate::mr::wasm_target()?;
    let build = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflow-wasm/build.sh");
    let built = Command::new("sh")
        .arg(&build)
        .arg(dir)
        .status()
        .context("run examples/workflow-wasm/build.sh")?;
    anyhow::ensure!(built.success(), "building the workflow module failed");
    Ok(dir.join("workflow.wasm"))
}

fn measure(
    sys: &Systems,
    sizes: &Sizes,
    python: &Path,
    script: &Path,
    module: &Path,
    report: &mut Report,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let (addr, token) = (sys.node.addr.clone(), sys.node.token.clone());
    let l = sys.label;
    rt.block_on(async {
        let mut c = tabos_client::Client::connect(&addr, &token).await?;
        c.procedure_install(
            "",
            "noop",
            "js",
            b"function main(a) { return a; }".to_vec(),
            Default::default(),
        )
        .await?;
        anyhow::Ok(())
    })?;
    let exec = rt.block_on(executor(&addr, &token, None))?;

    // Starts: one-step workflows, IN_FLIGHT at a time.
    eprintln!("workflows/{l}: starts ...");
    let t = rt.block_on(async {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t0 = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..IN_FLIGHT {
            let (exec, next, n) = (exec.clone(), next.clone(), sizes.starts);
            tasks.spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return anyhow::Ok(());
                    }
                    let id = exec.run("one", None, i.to_string().into_bytes()).await?;
                    let w = exec.result(&id, Duration::from_secs(60)).await?;
                    anyhow::ensure!(
                        w.status() == tabos_client::proto::WorkflowStatus::Success,
                        "workflow {id}: {}",
                        w.status()
                    );
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        anyhow::Ok(t0.elapsed().as_secs_f64())
    })?;
    let tabos_starts = sizes.starts as f64 / t;
    let d = dbos(
        python,
        script,
        &sys.dbos_url,
        &["starts", &sizes.starts.to_string(), &IN_FLIGHT.to_string()],
    )?;
    let dbos_starts = sizes.starts as f64 / d["seconds"].as_f64().context("seconds")?;
    report.figures.push(
        Figure::new(
            format!("{l}.starts.{IN_FLIGHT}_in_flight.per_s"),
            round(tabos_starts, 0),
            "workflows/s",
            Better::Higher,
        )
        .peer("DBOS Transact", Some(round(dbos_starts, 0)))
        .runs(1, Stat::Rate)
        .target("ratio >= 5"),
    );

    // Steps of one workflow, in sequence.
    eprintln!("workflows/{l}: steps ...");
    let run_one = |name: &str, n: usize| -> anyhow::Result<f64> {
        rt.block_on(async {
            let t0 = Instant::now();
            let id = exec.run(name, None, n.to_string().into_bytes()).await?;
            let w = exec.result(&id, Duration::from_secs(600)).await?;
            anyhow::ensure!(
                w.status() == tabos_client::proto::WorkflowStatus::Success,
                "workflow {id}: {}",
                w.status()
            );
            Ok(n as f64 / t0.elapsed().as_secs_f64())
        })
    };
    let tabos_steps = run_one("many", sizes.steps)?;
    let tabos_proc_steps = run_one("many_procedures", sizes.steps)?;
    // The same steps from a workflow written as a wasm module, run by a
    // proc of its own: from the start's request (the module uploaded, the
    // proc spawned) to its end.
    let tabos_wasm_steps = rt.block_on(async {
        let mut c = tabos_client::Client::connect(&addr, &token).await?;
        let w = tabos_client::wfmodule::ModuleWorkflow::new(
            module,
            "steps",
            sizes.steps.to_string().into_bytes(),
        );
        let t0 = Instant::now();
        let s = c.start_module_workflow("", w).await?;
        let id = s.workflow.workflow_id;
        let w = exec.result(&id, Duration::from_secs(600)).await?;
        anyhow::ensure!(
            w.status() == tabos_client::proto::WorkflowStatus::Success,
            "workflow {id}: {} {}",
            w.status(),
            w.error
        );
        anyhow::Ok(sizes.steps as f64 / t0.elapsed().as_secs_f64())
    })?;
    let d = dbos(
        python,
        script,
        &sys.dbos_url,
        &["steps", &sizes.steps.to_string()],
    )?;
    let dbos_steps = sizes.steps as f64 / d["seconds"].as_f64().context("seconds")?;
    report.figures.push(
        Figure::new(
            format!("{l}.steps.function.per_s"),
            round(tabos_steps, 0),
            "steps/s",
            Better::Higher,
        )
        .peer("DBOS Transact", Some(round(dbos_steps, 0)))
        .runs(1, Stat::Rate)
        .target("ratio >= 5"),
    );
    report.figures.push(
        Figure::new(
            format!("{l}.steps.procedure.per_s"),
            round(tabos_proc_steps, 0),
            "steps/s",
            Better::Higher,
        )
        .peer("DBOS Transact (its steps)", Some(round(dbos_steps, 0)))
        .runs(1, Stat::Rate)
        .note("tabos's stored-procedure steps run exactly once (the step's record in the procedure's transaction); DBOS's steps are at least once"),
    );
    report.figures.push(
        Figure::new(
            format!("{l}.steps.wasm_function.per_s"),
            round(tabos_wasm_steps, 0),
            "steps/s",
            Better::Higher,
        )
        .peer("DBOS Transact (its steps)", Some(round(dbos_steps, 0)))
        .runs(1, Stat::Rate)
        .note("a workflow written as a wasm module and run by a proc of its own (issue 41, item 4): each step two host calls the node records, without an RPC; the time includes uploading the module and spawning its proc. No target: the issue sets none"),
    );

    // Enqueue → start.
    eprintln!("workflows/{l}: queue latency ...");
    let serving = {
        let _g = rt.enter();
        exec.serve("bench")
    };
    let mut tabos_lat = Samples::with_capacity(sizes.queue_samples);
    rt.block_on(async {
        for _ in 0..sizes.queue_samples {
            let t0 = Instant::now();
            let id = exec.enqueue("bench", "marked", None, Vec::new(), 0).await?;
            let w = exec.result(&id, Duration::from_secs(60)).await?;
            anyhow::ensure!(
                w.status() == tabos_client::proto::WorkflowStatus::Success,
                "workflow {id}: {}",
                w.status()
            );
            let start = marks()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id)
                .context("no start mark")?;
            tabos_lat.push(start.duration_since(t0).as_nanos() as u64);
        }
        anyhow::Ok(())
    })?;
    serving.abort();
    for (poll, peer) in [
        ("1.0", "DBOS Transact (default queue polling, 1 s)"),
        ("0.01", "DBOS Transact (queue polling 10 ms)"),
    ] {
        let d = dbos(
            python,
            script,
            &sys.dbos_url,
            &["queue", &sizes.queue_samples.to_string(), poll],
        )?;
        let mut s = Samples::with_capacity(sizes.queue_samples);
        for v in d["samples"].as_array().context("samples")? {
            s.push((v.as_f64().unwrap_or(0.0) * 1e9) as u64);
        }
        let tag = if poll == "1.0" {
            "dbos_default"
        } else {
            "dbos_10ms"
        };
        report.figures.push(
            Figure::new(
                format!("{l}.queue_latency.p50_us.vs_{tag}"),
                round(tabos_lat.quantile_us(0.5), 0),
                "us",
                Better::Lower,
            )
            .peer(peer, Some(round(s.quantile_us(0.5), 0)))
            .runs(1, Stat::P50)
            .target("ratio <= 0.2"),
        );
    }

    // Recovery of pending workflows after SIGKILL.
    eprintln!("workflows/{l}: recovery of {} ...", sizes.pending);
    let mut worker = Command::new(std::env::current_exe()?)
        .args(["bench-worker", "wf-pending", &addr, &token])
        .arg(sizes.pending.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the wf-pending worker")?;
    ready(&mut worker, "the wf-pending worker")?;
    kill9(&mut worker);
    let tabos_recovery = rt.block_on(async {
        let t0 = Instant::now();
        let again = executor(&addr, &token, Some(EXECUTOR_ID)).await?;
        let recovering = again.serve_recovery();
        for i in 0..sizes.pending {
            let w = again
                .result(&format!("pending-{i}"), Duration::from_secs(600))
                .await?;
            anyhow::ensure!(
                w.status() == tabos_client::proto::WorkflowStatus::Success,
                "pending-{i}: {}",
                w.status()
            );
        }
        let t = t0.elapsed().as_secs_f64();
        recovering.abort();
        anyhow::Ok(t)
    })?;
    let mut peer = Command::new(python)
        .arg(script)
        .args(["pending", &sys.dbos_url, &sizes.pending.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting DBOS's pending process")?;
    ready(&mut peer, "DBOS's pending process")?;
    kill9(&mut peer);
    let d = dbos(
        python,
        script,
        &sys.dbos_url,
        &["recover", &sizes.pending.to_string()],
    )?;
    let dbos_recovery = d["seconds"].as_f64().context("seconds")?;
    report.figures.push(
        Figure::new(
            format!("{l}.recovery.{}_pending.s", sizes.pending),
            round(tabos_recovery, 3),
            "s",
            Better::Lower,
        )
        .peer("DBOS Transact", Some(round(dbos_recovery, 3)))
        .runs(1, Stat::MedianOfRuns)
        .target("ratio <= 0.2"),
    );
    Ok(())
}
