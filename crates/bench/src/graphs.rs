//! Suite `graphs` (issue 43, item 1): task graphs against Ray, on this
//! machine, in the same run.
//!
//! Contestants:
//! * tabos: a `tabos up` node (its own process, embedded SQLite at its
//!   default durability: every group commit is written before its tasks
//!   are answered); each task a wasm stored procedure answering `0`, run
//!   by the node's scheduler in one transaction with its output. The graph
//!   is submitted in one call and awaited (`Graphs.Submit`, `Graphs.Wait`).
//! * Ray (`pip install ray` into the bench virtualenv, once), `num_cpus=2`,
//!   each task `@ray.remote def zero(*a): return 0`, submitted by its
//!   driver (`.remote()` per task, object refs as arguments) and awaited
//!   with `ray.get`: `crates/bench/peers/ray_graphs.py`. Ray keeps its
//!   objects in memory and writes nothing.
//!
//! Figures (each contestant the same runs; the median of the runs'
//! wall times, submit to result):
//! * `tree`: a reduction tree of 10,000 tasks (5,000 leaves, then pairs
//!   summed until one is left: 9,999 tasks);
//! * `fan`: 1,000 independent tasks and one that takes all 1,000;
//! * `recovery.restart_s`: the only tabos node (embedded SQLite) is
//!   SIGKILLed with a graph of 2,000 tasks of ~1 ms each part done; a new
//!   node on the same data finishes it: the time from the new node's start
//!   to the graph's end, and every task's effect counted once. No Ray
//!   figure: a Ray job dies with its head node (its driver owns the refs).
//! * `recovery.node_kill_s`: two nodes, one SIGKILLed a fifth of the way
//!   through 2,000 such tasks; the time from the kill to the graph's end
//!   on the other — tabos: two `tabos up` over one PostgreSQL (heartbeat
//!   200 ms), the graph's tasks spread over both; Ray: a two-node Ray
//!   cluster on this machine (`ray.cluster_utils.Cluster`, one CPU each),
//!   the worker node removed ungracefully, its tasks retried
//!   (`crates/bench/peers/ray_recovery.py`). Ray retries tasks at least
//!   once; tabos's count says each effect happened once.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use tabos_client::graphs::{procedure_task, task_ref};
use tabos_client::proto::{GraphStatus, GraphTask};
use tabos_client::Client;

use crate::elastic::start_node;
use crate::report::{round, Better, Figure, Report, Stat};

const RAY_SCRIPT: &str = include_str!("../peers/ray_graphs.py");
const RAY_RECOVERY: &str = include_str!("../peers/ray_recovery.py");

/// A wasm procedure answering `0` (JSON): the no-op task.
const ZERO_WAT: &str = r#"(module
  (import "tabos" "result" (func $result (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "0")
  (func (export "main") (param i32) (result i32)
    (drop (call $result (i32.const 0) (i32.const 1)))
    (i32.const 0)))"#;

/// ~1 ms of work, counted in the realm's table: the recovery's task.
const WORK_JS: &str = "function main(a) { const t = Date.now(); while (Date.now() - t < 1) {} \
     tabos.put('runs', String(Number(tabos.get('runs') || '0') + 1)); return '0'; }";
const RUNS_JS: &str = "function main(a) { return tabos.get('runs') || '0'; }";

/// Sizes of one run.
struct Sizes {
    leaves: usize,
    fan: usize,
    runs: usize,
    recovery_tasks: usize,
}

impl Sizes {
    fn of(quick: bool) -> Sizes {
        if quick {
            Sizes {
                leaves: 500,
                fan: 200,
                runs: 2,
                recovery_tasks: 300,
            }
        } else {
            Sizes {
                leaves: 5_000,
                fan: 1_000,
                runs: 3,
                recovery_tasks: 2_000,
            }
        }
    }
}

/// A reduction tree over `leaves` leaves: the leaves, then pairs (an odd
/// one out is carried up alone) until one task is left, which is last.
fn tree(leaves: usize) -> Vec<GraphTask> {
    let mut tasks = Vec::new();
    let mut level: Vec<String> = (0..leaves)
        .map(|i| {
            let id = format!("l{i}");
            tasks.push(procedure_task(&id, "zero", &json!([])));
            id
        })
        .collect();
    let mut n = 0;
    while level.len() > 1 {
        let mut next = Vec::new();
        for pair in level.chunks(2) {
            if let [a, b] = pair {
                n += 1;
                let id = format!("s{n}");
                tasks.push(procedure_task(
                    &id,
                    "zero",
                    &json!([task_ref(a), task_ref(b)]),
                ));
                next.push(id);
            } else {
                next.push(pair[0].clone());
            }
        }
        level = next;
    }
    tasks
}

/// `width` independent tasks and one that takes them all.
fn fan(width: usize) -> Vec<GraphTask> {
    let mut tasks: Vec<GraphTask> = (0..width)
        .map(|i| procedure_task(&format!("f{i}"), "zero", &json!([])))
        .collect();
    let all: Vec<_> = (0..width).map(|i| task_ref(&format!("f{i}"))).collect();
    tasks.push(procedure_task(
        "join",
        "zero",
        &serde_json::Value::Array(all),
    ));
    tasks
}

/// Submits `tasks` as one graph and waits for its end; the wall time.
async fn run_graph(c: &mut Client, tasks: Vec<GraphTask>) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let g = c.graph_submit("", "", tasks, "", false).await?;
    ended_well(c, &g.graph_id).await?;
    Ok(t.elapsed())
}

/// Waits for graph `id` to end; an error unless it succeeded.
async fn ended_well(c: &mut Client, id: &str) -> anyhow::Result<()> {
    loop {
        let w = c.graph_wait("", id, "", Duration::from_secs(60)).await?;
        if w.ended {
            let g = w.graph.unwrap_or_default();
            anyhow::ensure!(
                g.status() == GraphStatus::Success,
                "graph {id} {}: {}",
                g.status(),
                g.error
            );
            return Ok(());
        }
    }
}

/// The runs of [`WORK_JS`] counted so far.
async fn runs_counted(c: &mut Client) -> anyhow::Result<u64> {
    let runs = c.procedure_call("", "runs", Vec::new()).await?;
    Ok(String::from_utf8_lossy(&runs.result).parse()?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs Ray script `script` with `args` in the bench virtualenv; the JSON
/// object of its last line that is one (Ray's own logs go to its stdout
/// too), or why there is none.
fn ray_json(script: &str, args: &[String]) -> Result<serde_json::Value, String> {
    let python = crate::venv::python_with("ray", "ray")?;
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .map_err(|e| format!("running Ray: {e}"))?;
    crate::venv::last_json_line(&out, "Ray")
}

/// Ray's wall times (ms) for the tree and the fan, `runs` each.
fn ray_peer(sizes: &Sizes) -> Result<(String, Vec<f64>, Vec<f64>), String> {
    let v = ray_json(
        RAY_SCRIPT,
        &[
            sizes.leaves.to_string(),
            sizes.fan.to_string(),
            sizes.runs.to_string(),
        ],
    )?;
    let ms = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default()
    };
    Ok((
        format!("ray {} (num_cpus=2)", v["version"].as_str().unwrap_or("?")),
        ms("tree_ms"),
        ms("fan_ms"),
    ))
}

async fn install(c: &mut Client, name: &str, language: &str, code: &str) -> anyhow::Result<()> {
    c.procedure_install(
        "",
        name,
        language,
        code.as_bytes().to_vec(),
        Default::default(),
    )
    .await?;
    Ok(())
}

/// The recovery experiment: the seconds from the new node's start to the
/// graph's end, and the runs counted (each task's effect once: `tasks`).
fn recovery(exe: &Path, base: &Path, tasks: usize) -> anyhow::Result<(f64, u64, u64)> {
    let data = base.join("recovery");
    let args = [
        "--pg-listen",
        "none",
        "--http-listen",
        "none",
        "--heartbeat-ms",
        "200",
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut node = start_node(exe, &args, &data)?;
    let ended_before = rt.block_on(async {
        let mut c = Client::connect(&node.addr, &node.token).await?;
        install(&mut c, "work", "js", WORK_JS).await?;
        install(&mut c, "runs", "js", RUNS_JS).await?;
        let list: Vec<GraphTask> = (0..tasks)
            .map(|i| procedure_task(&format!("w{i}"), "work", &json!([])))
            .collect();
        c.graph_submit("", "recover", list, "", false).await?;
        // Killed once a fifth has ended.
        loop {
            let s = c.graph_show("", "recover").await?;
            let g = s.graph.unwrap_or_default();
            if g.ended as usize >= tasks / 5 {
                return anyhow::Ok(g.ended);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })?;
    node.kill9();
    let t = Instant::now();
    let node = start_node(exe, &args, &data)?;
    let (secs, runs) = rt.block_on(async {
        let mut c = Client::connect(&node.addr, &node.token).await?;
        ended_well(&mut c, "recover").await?;
        let secs = t.elapsed().as_secs_f64();
        anyhow::Ok((secs, runs_counted(&mut c).await?))
    })?;
    drop(node);
    Ok((secs, runs, ended_before))
}

/// Two nodes over a PostgreSQL of the bench's own, one SIGKILLed once a
/// fifth of `tasks` have ended: the seconds from the kill to the graph's
/// end through the other, and the runs counted.
fn node_kill(exe: &Path, base: &Path, tasks: usize) -> anyhow::Result<(f64, u64)> {
    let pg =
        tabos_store::pg_cluster::TempCluster::start(&tabos_store::pg_cluster::ClusterOptions {
            fsync: true,
            ..Default::default()
        })?;
    let url = pg.create_database("graphs")?;
    let node = |id: &str| {
        start_node(
            exe,
            &[
                "--db",
                &url,
                "--node-id",
                id,
                "--pg-listen",
                "none",
                "--http-listen",
                "none",
                "--heartbeat-ms",
                "200",
            ],
            &base.join(format!("kill-{id}")),
        )
    };
    let (mut a, b) = (node("a")?, node("b")?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (secs, runs) = rt.block_on(async {
        let mut c = Client::connect(&b.addr, &b.token).await?;
        install(&mut c, "work", "js", WORK_JS).await?;
        install(&mut c, "runs", "js", RUNS_JS).await?;
        let list: Vec<GraphTask> = (0..tasks)
            .map(|i| procedure_task(&format!("w{i}"), "work", &json!([])))
            .collect();
        c.graph_submit("", "kill", list, "", false).await?;
        loop {
            let g = c.graph_show("", "kill").await?.graph.unwrap_or_default();
            if g.ended as usize >= tasks / 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        a.kill9();
        let t = Instant::now();
        ended_well(&mut c, "kill").await?;
        let secs = t.elapsed().as_secs_f64();
        anyhow::Ok((secs, runs_counted(&mut c).await?))
    })?;
    drop(b);
    drop(pg);
    Ok((secs, runs))
}

/// Ray's node kill ([`RAY_RECOVERY`]): its version and seconds.
fn ray_node_kill(tasks: usize) -> Result<(String, f64), String> {
    let v = ray_json(RAY_RECOVERY, &[tasks.to_string()])?;
    if v["total"].as_u64() != Some(tasks as u64) {
        return Err(format!("Ray returned {} results of {tasks}", v["total"]));
    }
    Ok((
        format!("ray {} (2 nodes)", v["version"].as_str().unwrap_or("?")),
        v["secs"].as_f64().ok_or("no seconds")?,
    ))
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("graphs", quick);
    let sizes = Sizes::of(quick);
    let exe = crate::tabos_exe()?;
    let base = std::env::temp_dir().join(format!("tabos-bench-graphs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let node = start_node(
        &exe,
        &["--pg-listen", "none", "--http-listen", "none"],
        &base.join("node"),
    )?;
    let tree_tasks = tree(sizes.leaves);
    let fan_tasks = fan(sizes.fan);
    let (n_tree, n_fan) = (tree_tasks.len(), fan_tasks.len());
    let (tree_ms, fan_ms) = rt.block_on(async {
        let mut c = Client::connect(&node.addr, &node.token).await?;
        install(&mut c, "zero", "wasm", ZERO_WAT).await?;
        // One warm-up of each, not counted.
        run_graph(&mut c, fan(50)).await?;
        let (mut t, mut f) = (Vec::new(), Vec::new());
        for _ in 0..sizes.runs {
            t.push(run_graph(&mut c, tree_tasks.clone()).await?.as_secs_f64() * 1e3);
            f.push(run_graph(&mut c, fan_tasks.clone()).await?.as_secs_f64() * 1e3);
        }
        anyhow::Ok((t, f))
    })?;
    drop(node);
    let (tree_ms, fan_ms) = (median(tree_ms), median(fan_ms));
    println!("  tabos tree of {n_tree}: {tree_ms:.0} ms; fan of {n_fan}: {fan_ms:.0} ms");
    let ray = ray_peer(&sizes);
    let (ray_name, ray_tree, ray_fan, ray_note) = match &ray {
        Ok((name, t, f)) if !t.is_empty() && !f.is_empty() => {
            println!(
                "  {name} tree: {:.0} ms; fan: {:.0} ms",
                median(t.clone()),
                median(f.clone())
            );
            (
                name.clone(),
                Some(median(t.clone())),
                Some(median(f.clone())),
                String::new(),
            )
        }
        Ok(_) => ("ray".into(), None, None, "Ray gave no times".into()),
        Err(e) => ("ray".into(), None, None, format!("Ray not measured: {e}")),
    };
    let per_s = |n: usize, ms: f64| n as f64 / (ms / 1e3);
    for (name, n, ms, peer_ms) in [
        ("tree", n_tree, tree_ms, ray_tree),
        ("fan", n_fan, fan_ms, ray_fan),
    ] {
        let note = format!(
            "{n} tasks, the graph submitted in one call (Ray: one .remote() per task); \
             median of {} runs{}",
            sizes.runs,
            if ray_note.is_empty() {
                String::new()
            } else {
                format!("; {ray_note}")
            }
        );
        report.figures.push(
            Figure::new(
                format!("{name}.tasks_per_s"),
                round(per_s(n, ms), 0),
                "tasks/s",
                Better::Higher,
            )
            .peer(&ray_name, peer_ms.map(|p| round(per_s(n, p), 0)))
            .runs(sizes.runs as u32, Stat::MedianOfRuns)
            .target("ratio >= 5")
            .note(note.clone()),
        );
        report.figures.push(
            Figure::new(format!("{name}.wall_ms"), round(ms, 1), "ms", Better::Lower)
                .peer(&ray_name, peer_ms.map(|p| round(p, 1)))
                .runs(sizes.runs as u32, Stat::MedianOfRuns)
                .note(note),
        );
    }
    let (secs, runs, before) =
        recovery(&exe, &base, sizes.recovery_tasks).context("the recovery experiment")?;
    println!(
        "  recovery: {secs:.2} s from the new node's start ({before} of {} tasks had ended); \
         {runs} runs counted",
        sizes.recovery_tasks
    );
    report.figures.push(
        Figure::new("recovery.restart_s", round(secs, 2), "s", Better::Lower)
            .runs(1, Stat::MedianOfRuns)
            .note(format!(
                "{} tasks of ~1 ms; SIGKILL after {before} had ended; a new node (new id, \
                 heartbeat 200 ms) on the same data: the dead node's claims are given back \
                 once it is declared lost; {runs} task effects counted (exactly once: {}). \
                 No Ray figure: a Ray job dies with its head node",
                sizes.recovery_tasks,
                runs as usize == sizes.recovery_tasks
            )),
    );
    anyhow::ensure!(
        runs as usize == sizes.recovery_tasks,
        "{runs} task effects counted for {} tasks: not exactly once",
        sizes.recovery_tasks
    );
    let (kill_secs, kill_runs) =
        node_kill(&exe, &base, sizes.recovery_tasks).context("the node kill experiment")?;
    let ray_kill = ray_node_kill(sizes.recovery_tasks);
    println!(
        "  node kill: {kill_secs:.2} s from the kill to the graph's end ({kill_runs} runs counted); \
         {}",
        match &ray_kill {
            Ok((name, s)) => format!("{name}: {s:.2} s"),
            Err(e) => format!("Ray not measured: {e}"),
        }
    );
    let (ray_name, ray_secs, ray_note) = match &ray_kill {
        Ok((name, s)) => (name.clone(), Some(round(*s, 2)), String::new()),
        Err(e) => ("ray".to_string(), None, format!("; Ray not measured: {e}")),
    };
    report.figures.push(
        Figure::new("recovery.node_kill_s", round(kill_secs, 2), "s", Better::Lower)
            .peer(&ray_name, ray_secs)
            .runs(1, Stat::MedianOfRuns)
            .note(format!(
                "{} tasks of ~1 ms on two nodes (tabos: two tabos up over one PostgreSQL, \
                 heartbeat 200 ms; Ray: ray.cluster_utils.Cluster, 1 CPU a node), one killed \
                 a fifth of the way: kill to the last result. tabos's task effects counted: \
                 {kill_runs} (exactly once); Ray retries a lost node's tasks (at least once){ray_note}",
                sizes.recovery_tasks
            )),
    );
    anyhow::ensure!(
        kill_runs as usize == sizes.recovery_tasks,
        "{kill_runs} task effects counted for {} tasks across the node kill: not exactly once",
        sizes.recovery_tasks
    );
    let _ = std::fs::remove_dir_all(&base);
    Ok(report)
}
