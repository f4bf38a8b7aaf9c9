//! `tabos-bench cluster` (issue 35, item 5): what a node costs as the
//! cluster grows. Real `tabos up` processes on this machine — 1, 10, 30 and
//! 100 of them (`--quick`: 1 and 10) — over one PostgreSQL the suite
//! starts afresh for each size; every node offers one core, and all of
//! them share this machine's cores and its one database server, which the
//! output says.
//!
//! At each size:
//!
//! * **idle cost** over a quiet window: write transactions per node per
//!   second (PostgreSQL's transaction ids assigned — a read assigns none),
//!   database connections per node (`pg_stat_activity`), and notifications
//!   delivered per node per second (each node's own count, `tabos status`);
//! * **spawn → start** p50 and p99 of native and wasm procs spread over
//!   every node (a least-loaded realm), from the proc rows' own times, and
//!   the notifications all nodes together were delivered per spawn then
//!   (flat with the cluster's size if a placement is told only to the few
//!   nodes that need it);
//! * **scheduling decisions per second at the database**: spawns from
//!   several clients at once, each one placement transaction;
//! * **loss**: a node running a restartable proc is killed with SIGKILL —
//!   the time until the cluster has declared it lost, in leases, and until
//!   its proc runs on another node (its grace and a margin included);
//! * **come-up**: the time from the first `tabos up` to every node up.
//!
//! Targets: idle writes per node ≤ 1/s, spawn p50 at the largest size ≤
//! 1.5× at one node, loss detected within 2 leases at every size. The
//! curves over the sizes are in the result file and plotted.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_client::{proto, Client, Value};
use tabos_store::pg_cluster::{ClusterOptions, TempCluster};

use crate::elastic::{start_node, NodeProc};
use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Series, Stat};

/// The nodes' heartbeat, and so their lease (three of them).
const HEARTBEAT_MS: u64 = 1_000;
const LEASE_S: f64 = 3.0 * HEARTBEAT_MS as f64 / 1_000.0;
/// The nodes' grace: how long one may be cut off before its procs are
/// given back (short here, so that the loss figure is not all waiting).
const GRACE_MS: u64 = 3_000;
/// Longest any wait of the suite takes before it gives up.
const WAIT_MAX: Duration = Duration::from_secs(300);
/// A wasm proc that does nothing.
const WASM_NOOP: &str = r#"(module (memory (export "memory") 1) (func (export "_start")))"#;

/// What one size measured.
#[derive(Debug, Default, Clone)]
struct Point {
    nodes: usize,
    come_up_s: f64,
    idle_writes_per_node_s: f64,
    connections_per_node: f64,
    notifications_per_node_s: f64,
    deliveries_per_spawn: f64,
    native_p50_us: f64,
    native_p99_us: f64,
    wasm_p50_us: f64,
    wasm_p99_us: f64,
    decisions_per_s: f64,
    detect_leases: f64,
    requeue_s: f64,
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("cluster", quick);
    let exe = crate::tabos_exe()?;
    let sizes: &[usize] = if quick { &[1, 10] } else { &[1, 10, 30, 100] };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    report.notes.push(format!(
        "every node is a `tabos up` process on this {cpus}-core machine offering one core, over \
         one PostgreSQL server on the same machine: the nodes share its cores, memory and \
         database, so the figures are a cost per node under that sharing, not a cluster of \
         machines"
    ));
    let mut points = Vec::new();
    for &n in sizes {
        eprintln!("cluster: {n} nodes");
        points.push(measure(&exe, n, quick).with_context(|| format!("at {n} nodes"))?);
    }
    let one = points.first().cloned().unwrap_or_default();
    let runs = 1;
    for p in &points {
        let n = p.nodes;
        let f = |name: &str| format!("{name}.{n}_nodes");
        report.figures.push(
            Figure::new(
                f("idle.writes_per_node_per_s"),
                round(p.idle_writes_per_node_s, 3),
                "tx/s",
                Better::Lower,
            )
            .runs(runs, Stat::Rate)
            .target("value <= 1"),
        );
        report.figures.push(
            Figure::new(
                f("idle.db_connections_per_node"),
                round(p.connections_per_node, 2),
                "connections",
                Better::Lower,
            )
            .runs(runs, Stat::MedianOfRuns)
            .target("value <= 3"),
        );
        report.figures.push(
            Figure::new(
                f("idle.notifications_per_node_per_s"),
                round(p.notifications_per_node_s, 3),
                "notifications/s",
                Better::Lower,
            )
            .runs(runs, Stat::Rate),
        );
        let mut fig = Figure::new(
            f("notifications_delivered_per_spawn"),
            round(p.deliveries_per_spawn, 2),
            "notifications",
            Better::Lower,
        )
        .runs(runs, Stat::Mean)
        .note("delivered to all nodes together, per proc spawned and run");
        if n > 1 {
            fig = fig
                .peer("tabos at 1 node", Some(round(one.deliveries_per_spawn, 2)))
                .target("ratio <= 1.5");
        }
        report.figures.push(fig);
        for (kind, p50, p99) in [
            ("native", p.native_p50_us, p.native_p99_us),
            ("wasm", p.wasm_p50_us, p.wasm_p99_us),
        ] {
            let mut fig = Figure::new(
                f(&format!("spawn_to_start.{kind}.p50_us")),
                round(p50, 1),
                "us",
                Better::Lower,
            )
            .runs(runs, Stat::P50);
            if n > 1 {
                fig = fig.peer(
                    "tabos at 1 node",
                    Some(round(
                        match kind {
                            "native" => one.native_p50_us,
                            _ => one.wasm_p50_us,
                        },
                        1,
                    )),
                );
                if n == *sizes.last().unwrap_or(&1) {
                    fig = fig.target("ratio <= 1.5");
                }
            }
            report.figures.push(fig);
            report.figures.push(
                Figure::new(
                    f(&format!("spawn_to_start.{kind}.p99_us")),
                    round(p99, 1),
                    "us",
                    Better::Lower,
                )
                .runs(runs, Stat::P99),
            );
        }
        report.figures.push(
            Figure::new(
                f("scheduling_decisions_per_s"),
                round(p.decisions_per_s, 1),
                "spawns/s",
                Better::Higher,
            )
            .runs(runs, Stat::Rate),
        );
        // One node has no other to notice its loss.
        if n > 1 {
            report.figures.push(
                Figure::new(
                    f("loss_detected_leases"),
                    round(p.detect_leases, 2),
                    "leases",
                    Better::Lower,
                )
                .runs(runs, Stat::MedianOfRuns)
                .target("value <= 2")
                .note(format!(
                    "a lease is {LEASE_S} s (heartbeats of {HEARTBEAT_MS} ms)"
                )),
            );
            report.figures.push(
                Figure::new(
                    f("kill_to_requeued_s"),
                    round(p.requeue_s, 2),
                    "s",
                    Better::Lower,
                )
                .runs(runs, Stat::MedianOfRuns)
                .note(format!(
                    "includes the node's grace of {} s and a margin of two leases: a restartable \
                         proc runs elsewhere only once its node, if alive and cut off, has stopped it",
                    GRACE_MS as f64 / 1_000.0
                )),
            );
        }
        report.figures.push(
            Figure::new(f("come_up_s"), round(p.come_up_s, 2), "s", Better::Lower)
                .runs(runs, Stat::MedianOfRuns),
        );
    }
    let curve = |name: &str, unit: &str, y: fn(&Point) -> f64| Series {
        plot: "scale".into(),
        name: name.into(),
        x_unit: "nodes".into(),
        y_unit: unit.into(),
        points: points
            .iter()
            .map(|p| (p.nodes as f64, round(y(p), 3)))
            .collect(),
    };
    report
        .series
        .push(curve("idle writes per node per s", "per node", |p| {
            p.idle_writes_per_node_s
        }));
    report
        .series
        .push(curve("database connections per node", "per node", |p| {
            p.connections_per_node
        }));
    report
        .series
        .push(curve("notifications per node per s", "per node", |p| {
            p.notifications_per_node_s
        }));
    report.series.push(curve(
        "notifications delivered per spawn",
        "all nodes",
        |p| p.deliveries_per_spawn,
    ));
    report
        .series
        .push(curve("native spawn→start p50 (ms)", "ms", |p| {
            p.native_p50_us / 1_000.0
        }));
    report
        .series
        .push(curve("wasm spawn→start p50 (ms)", "ms", |p| {
            p.wasm_p50_us / 1_000.0
        }));
    Ok(report)
}

/// The cluster of `n` nodes, measured.
fn measure(exe: &Path, n: usize, quick: bool) -> anyhow::Result<Point> {
    let pg = TempCluster::start(&ClusterOptions {
        fsync: true,
        // A node opens up to its pool (4 here) and its listener while it
        // starts; idle, it keeps three.
        max_connections: (n as u32) * 6 + 40,
        ..ClusterOptions::default()
    })
    .context("the suite's PostgreSQL")?;
    let url = pg.create_database("tabos_cluster")?;
    let dir = tabos_store::testing::TempDir::new("bench-cluster");
    let t0 = Instant::now();
    let mut nodes: Vec<NodeProc> = Vec::with_capacity(n);
    let programs = dir.path().display().to_string();
    for i in 0..n {
        let (id, hb, grace) = (
            format!("n{i}"),
            HEARTBEAT_MS.to_string(),
            GRACE_MS.to_string(),
        );
        let args = [
            "--db",
            &url,
            "--node-id",
            &id,
            "--cores",
            "1",
            "--heartbeat-ms",
            &hb,
            "--disconnect-grace-ms",
            &grace,
            "--pg-listen",
            "none",
            "--http-listen",
            "none",
            "--no-context",
            "--db-connections",
            "4",
            // Its wasm module is written there (outside the node's data).
            "--program-dir",
            &programs,
        ];
        nodes.push(start_node(exe, &args, &dir.path().join(&id))?);
    }
    let rt = tokio::runtime::Runtime::new()?;
    let mut p = Point {
        nodes: n,
        ..Point::default()
    };
    rt.block_on(async {
        let mut c = Client::connect(&nodes[0].addr, &nodes[0].token).await?;
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            let up = c
                .list_nodes()
                .await?
                .iter()
                .filter(|x| x.state() == proto::NodeState::Up)
                .count();
            if up == n {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "only {up} of {n} nodes came up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        p.come_up_s = t0.elapsed().as_secs_f64();
        c.create_realm("bench", proto::Scheduler::LeastLoaded)
            .await?;
        c.create_realm("loss", proto::Scheduler::Locality).await?;
        wait_workers(&mut c, "bench", n).await?;
        wait_workers(&mut c, "loss", n).await?;

        // Idle: settle, then a quiet window.
        // Settled means past the pools' idle close, so that what the
        // set-up opened is closed again, as on any idle node.
        let idle_close = tabos_store::postgres::POOL_IDLE_CLOSE;
        tokio::time::sleep(idle_close + Duration::from_secs(if quick { 2 } else { 5 })).await;
        let window = Duration::from_secs(if quick { 4 } else { 10 });
        let (x0, notes0) = (next_xid(&url)?, notifications(&nodes).await?);
        tokio::time::sleep(window).await;
        let (x1, notes1) = (next_xid(&url)?, notifications(&nodes).await?);
        let secs = window.as_secs_f64();
        p.idle_writes_per_node_s = (x1 - x0) as f64 / secs / n as f64;
        p.notifications_per_node_s = (notes1 - notes0) as f64 / secs / n as f64;
        p.connections_per_node = connections(&url)? as f64 / n as f64;

        // Spawn → start, spread over the nodes.
        let wasm = dir.path().join("noop.wat");
        std::fs::write(&wasm, WASM_NOOP)?;
        let count = if quick { 20 } else { 60 };
        let notes0 = notifications(&nodes).await?;
        let native = spawn_latency(
            &mut c,
            "nat",
            count,
            proto::ProcDescriptor {
                program: "/bin/true".into(),
                class: proto::ProcClass::Be.into(),
                cores: Some(0),
                ..Default::default()
            },
        )
        .await?;
        let wasm_lat = spawn_latency(
            &mut c,
            "wsm",
            count,
            proto::ProcDescriptor {
                kind: proto::ProcKind::Wasm.into(),
                program: wasm.display().to_string(),
                class: proto::ProcClass::Be.into(),
                cores: Some(0),
                ..Default::default()
            },
        )
        .await?;
        let notes1 = notifications(&nodes).await?;
        p.deliveries_per_spawn = (notes1 - notes0) as f64 / (2 * count) as f64;
        (p.native_p50_us, p.native_p99_us) = native;
        (p.wasm_p50_us, p.wasm_p99_us) = wasm_lat;

        // Decisions per second: eight clients spawning at once, each spawn
        // one placement transaction at the database. The procs are wasm
        // no-ops, so that running them takes little of the cores the
        // nodes and the database share.
        let per = if quick { 25 } else { 100 };
        let t = Instant::now();
        let mut tasks = Vec::new();
        for k in 0..8 {
            let node = &nodes[k % n];
            let wasm = wasm.display().to_string();
            let mut ck = Client::connect(&node.addr, &node.token).await?;
            tasks.push(tokio::spawn(async move {
                for i in 0..per {
                    let d = proto::ProcDescriptor {
                        pid: format!("dec-{k}-{i}"),
                        kind: proto::ProcKind::Wasm.into(),
                        program: wasm.clone(),
                        class: proto::ProcClass::Be.into(),
                        cores: Some(0),
                        ..Default::default()
                    };
                    ck.spawn("bench", d).await?;
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        p.decisions_per_s = (8 * per) as f64 / t.elapsed().as_secs_f64();

        // Loss: a restartable proc is placed on the last node, and the node
        // that runs it (another may have stolen it first) is killed.
        let home = format!("n{}", n - 1);
        let d = proto::ProcDescriptor {
            pid: "victim".into(),
            program: "/bin/sleep".into(),
            args: vec!["3600".into()],
            home_node: home.clone(),
            restartable: true,
            class: proto::ProcClass::Be.into(),
            cores: Some(0),
            ..Default::default()
        };
        c.spawn("loss", d).await?;
        c.wait_start("loss", "victim").await?;
        // Its worker is `<node>.w<i>`.
        let worker = c.proc_status("loss", "victim").await?.worker;
        let home = worker.split('.').next().unwrap_or_default().to_string();
        let victim: usize = home
            .strip_prefix('n')
            .and_then(|i| i.parse().ok())
            .filter(|&i: &usize| i < n)
            .ok_or_else(|| anyhow::anyhow!("the victim runs on {worker:?}, not a bench node"))?;
        if n > 1 {
            nodes[victim].kill9();
            let killed = Instant::now();
            let deadline = killed + WAIT_MAX;
            let mut detected = None;
            loop {
                if detected.is_none() {
                    let lost = c
                        .list_nodes()
                        .await?
                        .iter()
                        .any(|x| x.node_id == home && x.lost_us != 0);
                    if lost {
                        detected = Some(killed.elapsed().as_secs_f64());
                    }
                }
                let st = c.proc_status("loss", "victim").await?;
                let elsewhere = st.state() == proto::ProcState::Running
                    && !st.worker.starts_with(&format!("{home}."));
                if elsewhere && detected.is_some() {
                    break;
                }
                anyhow::ensure!(Instant::now() < deadline, "the victim never ran again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            p.requeue_s = killed.elapsed().as_secs_f64();
            // The loop ends only once the loss was seen.
            p.detect_leases = detected.map_or(f64::NAN, |d| d / LEASE_S);
        }
        let _ = c.evict("loss", "victim").await;
        anyhow::Ok(())
    })?;
    drop(nodes);
    drop(pg);
    Ok(p)
}

/// Waits until `realm` has a live worker on each of `n` nodes.
async fn wait_workers(c: &mut Client, realm: &str, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let serving = c
            .list_nodes()
            .await?
            .iter()
            .filter(|x| x.realms.iter().any(|r| r.realm == realm))
            .count();
        if serving == n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{serving} of {n} nodes serve {realm}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Spawns `count` procs like `d` one after another in realm `bench` and
/// returns the p50 and p99 of their spawn → start times (the proc rows'
/// own, so each node's start is on the database's record).
async fn spawn_latency(
    c: &mut Client,
    prefix: &str,
    count: usize,
    d: proto::ProcDescriptor,
) -> anyhow::Result<(f64, f64)> {
    for i in 0..count {
        let d = proto::ProcDescriptor {
            pid: format!("{prefix}-{i}"),
            ..d.clone()
        };
        c.spawn("bench", d).await?;
        c.wait_exit("bench", &format!("{prefix}-{i}")).await?;
    }
    let rows = c
        .sql(
            "SELECT start_us - spawn_us FROM proc WHERE realm = 'bench' AND pid LIKE $1 \
             AND start_us IS NOT NULL",
            vec![Value::Text(format!("{prefix}-%"))],
        )
        .await?;
    let mut s = Samples::with_capacity(count);
    for r in &rows.rows {
        if let Some(Value::Int(us)) = &r[0] {
            s.push((*us).max(0) as u64 * 1_000);
        }
    }
    anyhow::ensure!(s.len() == count, "{} of {count} procs started", s.len());
    Ok((s.quantile_us(0.5), s.quantile_us(0.99)))
}

/// The sum over the nodes of the notifications each has received.
async fn notifications(nodes: &[NodeProc]) -> anyhow::Result<u64> {
    let mut sum = 0;
    for node in nodes {
        let mut c = Client::connect(&node.addr, &node.token).await?;
        sum += c.status().await?.notifications;
    }
    Ok(sum)
}

/// PostgreSQL's next transaction id: writing transactions get one, reads
/// do not, so its growth counts writes.
fn next_xid(url: &str) -> anyhow::Result<i64> {
    let out = psql(url, "SELECT txid_snapshot_xmax(txid_current_snapshot())")?;
    out.trim().parse().context("a transaction id")
}

/// Connections to the suite's database now.
fn connections(url: &str) -> anyhow::Result<i64> {
    let out = psql(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid()",
    )?;
    out.trim().parse().context("a count")
}

/// One query's single value, on a connection of the suite's own (closed
/// before it returns; `connections` counts others only).
/// On a thread of its own: the blocking client runs a runtime of its own,
/// which may not start inside the suite's.
fn psql(url: &str, sql: &str) -> anyhow::Result<String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = postgres::Client::connect(url, postgres::NoTls)?;
            let row = c.query_one(sql, &[])?;
            let v: i64 = row.get(0);
            Ok(v.to_string())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the query's thread panicked"))?
    })
}
