//! Suite `sched`: scheduling and spawning (issue 3).
//!
//! * DBOS Figure 5 on this machine: schedule-only decisions per second and
//!   p50/p99 latency against offered load, for each scheduler, with 1 and 2
//!   partitions. A decision is the real `spawn` procedure — insert the proc,
//!   pick a worker by the realm's scheduler, reserve its capacity, record
//!   provenance — on workers large enough never to fill; procs are scheduled,
//!   not run.
//! * spawn-to-start latency of `/bin/true` as a native proc on an in-process
//!   node (spawn → procd claims → process started → Started committed).
//! * σOS Table 6.2: burst-spawn 720 native procs and wait for all to exit.
//!   No-op task throughput: a burst of as many procs as Ray runs tasks.
//! * Peers in the same run: a raw spawn+wait loop of `/bin/true` (std's
//!   Command, which uses posix_spawn) as the floor for native procs, and Ray
//!   (pip-installed into a virtualenv by this benchmark, version recorded)
//!   running no-op tasks and the 720 burst.
//!
//! * The same spawn-to-start, 720 burst and a no-op task burst for wasm
//!   procs: a no-op WASI command run in-process by procd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_kernel::ids::WorkerId;
use tabos_kernel::procs::{self, Descriptor};
use tabos_kernel::realms;
use tabos_kernel::sched::{Scheduler, WorkerSpec};
use tabos_store::{Config, Store};

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};

/// Workers per realm in the schedule-only runs, and their (never filled) size.
const WORKERS: usize = 8;
const WORKER_CORES: i64 = 1 << 40;
const BURST: usize = 720;
/// DBOS Figure 5, quoted: 750,000 decisions/s on 80 cores of VoltDB.
const DBOS_FIG5_PER_CORE: &str = "DBOS on VoltDB, per core (paper Figure 5: 750000/s on 80 cores)";

fn scheduler_name(s: Scheduler) -> &'static str {
    s.as_str()
}

/// Realm names that land on each of `partitions` partitions, `per` of each.
fn realms_for(partitions: u32, per: usize, tag: &str) -> Vec<String> {
    let mut out = Vec::new();
    for p in 0..partitions {
        let mut n = 0;
        let mut i = 0;
        while n < per {
            let name = format!("{tag}-{i}");
            if tabos_kernel::realm_partition(&name, partitions).0 == p {
                out.push(name);
                n += 1;
            }
            i += 1;
        }
    }
    out
}

fn setup(store: &Store, realms: &[String], s: Scheduler) -> anyhow::Result<()> {
    for r in realms {
        realms::create(store, r, s)?;
        for w in 0..WORKERS {
            procs::register_worker(
                store,
                r,
                &WorkerSpec {
                    worker_id: WorkerId::new(format!("w{w}"))?,
                    node_id: format!("n{}", w % 2),
                    cores: WORKER_CORES,
                    mem_mb: 1 << 30,
                },
            )?;
        }
    }
    Ok(())
}

fn descriptor(s: Scheduler, i: u64) -> Descriptor {
    Descriptor {
        home_node: (s == Scheduler::Locality).then(|| format!("n{}", i % 2)),
        ..Descriptor::native("/bin/true")
    }
}

/// Closed loop: `clients` tasks spawning as fast as they can for `run`.
fn decisions_closed(
    rt: &tokio::runtime::Runtime,
    store: &Store,
    realms: &[String],
    s: Scheduler,
    clients: usize,
    run: Duration,
) -> anyhow::Result<(f64, Samples)> {
    rt.block_on(async {
        let until = Instant::now() + run;
        let mut tasks = Vec::new();
        for c in 0..clients {
            let store = store.clone();
            let realm = realms[c % realms.len()].clone();
            tasks.push(tokio::spawn(async move {
                let mut samples = Samples::default();
                let mut i = 0u64;
                while Instant::now() < until {
                    let t0 = Instant::now();
                    procs::spawn(&store, &realm, descriptor(s, i)).await?;
                    samples.push(t0.elapsed().as_nanos() as u64);
                    i += 1;
                }
                Ok::<_, tabos_kernel::Error>(samples)
            }));
        }
        let mut all = Samples::default();
        for t in tasks {
            all.extend(t.await??);
        }
        Ok((all.len() as f64 / run.as_secs_f64(), all))
    })
}

/// Open loop at `rate` decisions/s: a pacer submits what has come due every
/// 100 us; each decision's latency runs from its submission to its commit.
fn decisions_open(
    rt: &tokio::runtime::Runtime,
    store: &Store,
    realms: &[String],
    s: Scheduler,
    rate: f64,
    run: Duration,
) -> anyhow::Result<Samples> {
    let handle = rt.handle().clone();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tasks = Vec::new();
    while start.elapsed() < run {
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while sent < due {
            let (store, realm) = (store.clone(), realms[sent as usize % realms.len()].clone());
            let i = sent;
            let t0 = Instant::now();
            tasks.push(handle.spawn(async move {
                procs::spawn(&store, &realm, descriptor(s, i)).await?;
                Ok::<_, tabos_kernel::Error>(t0.elapsed().as_nanos() as u64)
            }));
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    rt.block_on(async {
        let mut samples = Samples::default();
        for t in tasks {
            samples.push(t.await??);
        }
        Ok(samples)
    })
}

/// The floor for native procs: spawn `/bin/true` and wait, `n` times.
/// `n` spawns and waits of `/bin/true` one after another: each one's time,
/// and the loop's rate (procs per second).
fn raw_spawn_wait(n: usize) -> anyhow::Result<(Samples, f64)> {
    let mut s = Samples::default();
    let started = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        let status = Command::new("/bin/true").status()?;
        anyhow::ensure!(status.success());
        s.push(t0.elapsed().as_nanos() as u64);
    }
    Ok((s, n as f64 / started.elapsed().as_secs_f64()))
}

/// The floor for the burst: 720 `/bin/true`, `width` at a time.
fn raw_burst(width: usize) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut running = std::collections::VecDeque::new();
    for _ in 0..BURST {
        if running.len() >= width {
            let mut c: std::process::Child = running.pop_front().context("queue")?;
            c.wait()?;
        }
        running.push_back(Command::new("/bin/true").spawn()?);
    }
    for mut c in running {
        c.wait()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

/// A WASI command that does nothing.
const WASM_NOOP: &str = r#"(module (memory (export "memory") 1) (func (export "_start")))"#;

/// What [`procs_on_node`] measured.
struct OnNode {
    /// Spawn to Started, as the spawner sees it (WaitStart returns).
    start: Samples,
    burst_ms: f64,
    /// Procs per second through a burst of `tasks` procs, spawn to all exited.
    tasks_per_s: f64,
}

/// Spawn-to-start, the 720 burst and a no-op task burst of `tasks` procs
/// made by `make`, on an in-process node with procd.
fn procs_on_node(
    quick: bool,
    dir: &Path,
    tasks: usize,
    make: impl Fn() -> Descriptor + Send + Sync + 'static,
) -> anyhow::Result<OnNode> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
    let settings = tabos_node::NodeSettings {
        node_id: "bench".into(),
        logs: dir.join("logs"),
        realm: "default".into(),
        cores,
        mem_mb: 1024,
        heartbeat: std::time::Duration::from_secs(1),
        // The no-op module is written there.
        program_dirs: vec![dir.to_path_buf()],
        ..tabos_node::NodeSettings::defaults()
    };
    let node = tabos_node::Node::open_with(&Config::sqlite(dir.join("node")), settings)?;
    // The node creates its realm when it starts serving; creating it here
    // first lets the warm-up spawn below go in before that.
    match realms::create(&node.store, "default", Scheduler::Fifo) {
        Ok(()) | Err(tabos_kernel::Error::AlreadyExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tabos_node::bind("127.0.0.1:0").await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let store = node.store.clone();
        let server = tokio::spawn(tabos_node::serve(node, listener, async {
            let _ = stopped.await;
        }));
        // A warm-up proc, not measured: spawned perhaps before the node has
        // registered its worker, it waits deferred and the registration
        // itself assigns it — no readiness polling needed.
        let (pid, _) = procs::spawn(&store, "default", make()).await?;
        let warm = procs::wait_exit(&store, "default", &pid).await?;
        anyhow::ensure!(
            warm.exit_status == Some(0),
            "the warm-up proc did not exit 0: {warm:?}"
        );
        let n = if quick { 50 } else { 300 };
        let mut start = Samples::default();
        for _ in 0..n {
            let t0 = Instant::now();
            let (pid, _) = procs::spawn(&store, "default", make()).await?;
            procs::wait_start(&store, "default", &pid).await?;
            start.push(t0.elapsed().as_nanos() as u64);
            procs::wait_exit(&store, "default", &pid).await?;
        }
        // A burst: spawned in one transaction, waited for in any order.
        let burst = |count: usize| {
            let (store, ds) = (store.clone(), (0..count).map(|_| make()).collect());
            async move {
                let t0 = Instant::now();
                let spawned = procs::spawn_burst(&store, "default", ds).await?;
                anyhow::ensure!(spawned.len() == count);
                for (pid, _) in &spawned {
                    let done = procs::wait_exit(&store, "default", pid).await?;
                    anyhow::ensure!(done.exit_status == Some(0), "{done:?}");
                }
                Ok::<_, anyhow::Error>(t0.elapsed().as_secs_f64())
            }
        };
        let burst_ms = burst(BURST).await? * 1e3;
        let tasks_per_s = tasks as f64 / burst(tasks).await?;
        let _ = stop.send(());
        server.await??;
        Ok::<_, anyhow::Error>(OnNode {
            start,
            burst_ms,
            tasks_per_s,
        })
    })
}

/// The wasm procs' run: a no-op WASI command, spawned as
/// [`procs_on_node`] spawns; printed.
fn wasm_on_node(quick: bool, base: &Path, tasks: usize) -> anyhow::Result<OnNode> {
    let wasm_dir = base.join("wasm");
    std::fs::create_dir_all(&wasm_dir)?;
    let module = wasm_dir.join("noop.wat");
    std::fs::write(&module, WASM_NOOP)?;
    let module = module.to_string_lossy().into_owned();
    let mut wasm = procs_on_node(quick, &wasm_dir, tasks, move || Descriptor {
        kind: tabos_kernel::procs::Kind::Wasm,
        ..Descriptor::native(module.clone())
    })?;
    println!(
        "  wasm spawn-to-start p50 {:.0} us p99 {:.0} us; 720 burst {:.1} ms; {tasks} no-op procs at {:.0}/s",
        wasm.start.quantile_us(0.5),
        wasm.start.quantile_us(0.99),
        wasm.burst_ms,
        wasm.tasks_per_s
    );
    Ok(wasm)
}

/// Ray, installed with pip into the benchmarks' virtualenv
/// ([`crate::venv`]); returns (version, no-op tasks/s, 720-burst ms) or why
/// it could not run.
fn ray_peer(tasks: usize) -> Result<(String, f64, f64), String> {
    let python = crate::venv::python_with("ray", "ray")?;
    let script = format!(
        r#"
import time, ray
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
@ray.remote
def noop():
    return None
ray.get([noop.remote() for _ in range(200)])  # warm the workers
t = time.perf_counter(); ray.get([noop.remote() for _ in range({tasks})]); tput = {tasks} / (time.perf_counter() - t)
t = time.perf_counter(); ray.get([noop.remote() for _ in range({BURST})]); burst = (time.perf_counter() - t) * 1e3
print(ray.__version__, tput, burst)
ray.shutdown()
"#
    );
    let out = Command::new(&python)
        .args(["-c", &script])
        .output()
        .map_err(|e| format!("running Ray: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    let f: Vec<&str> = line.split_whitespace().collect();
    match f.as_slice() {
        [v, t, b] => Ok((
            v.to_string(),
            t.parse().map_err(|_| format!("bad Ray output {line:?}"))?,
            b.parse().map_err(|_| format!("bad Ray output {line:?}"))?,
        )),
        _ => Err(format!(
            "Ray did not report: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )),
    }
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("sched", quick);
    let run = if quick {
        Duration::from_millis(400)
    } else {
        Duration::from_secs(2)
    };
    let base: PathBuf =
        std::env::temp_dir().join(format!("tabos-bench-sched-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    // DBOS Figure 5.
    let machine_cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut best: Option<(f64, String)> = None;
    let filter = std::env::var("TABOS_BENCH_FILTER").unwrap_or_default();
    let only_fig5 = filter == "decisions";
    // `procs`: only the proc figures (native and wasm), for profiling;
    // `wasm`: only the wasm procs' (and no Ray).
    let only_wasm = filter == "wasm";
    let only_procs = filter == "procs" || only_wasm;
    for partitions in [1u32, 2] {
        if only_procs {
            break;
        }
        for s in [Scheduler::Fifo, Scheduler::Locality, Scheduler::LeastLoaded] {
            let dir = base.join(format!("fig5-{partitions}-{}", scheduler_name(s)));
            let store = tabos_kernel::open(&Config::sqlite(&dir).with_partitions(partitions))?;
            let realms = realms_for(partitions, 4, "r");
            setup(&store, &realms, s)?;
            let (peak, mut closed) = decisions_closed(&rt, &store, &realms, s, 64, run)?;
            let name = format!("decisions.{}.{partitions}p", scheduler_name(s));
            println!(
                "  {name:<32} peak {peak:>9.0}/s  p50 {:>7.1} us  p99 {:>7.1} us (64 clients)",
                closed.quantile_us(0.5),
                closed.quantile_us(0.99)
            );
            report.figures.push(
                Figure::new(
                    format!("{name}.peak_per_s"),
                    round(peak, 0),
                    "decisions/s",
                    Better::Higher,
                )
                .runs(1, Stat::Rate)
                .target("value >= 100000"),
            );
            // DBOS's Figure 5 is a figure from a paper: shown beside
            // tabos's own rate per core of this machine, never a peer.
            report.figures.push(
                Figure::new(
                    format!("{name}.per_core_per_s"),
                    round(peak / machine_cores as f64, 0),
                    "decisions/s/core",
                    Better::Higher,
                )
                .runs(1, Stat::Rate)
                .reference(DBOS_FIG5_PER_CORE, 9_400.0)
                .note(format!("peak over the machine's {machine_cores} cores")),
            );
            for frac in [0.25, 0.5, 0.75] {
                let mut s_open = decisions_open(&rt, &store, &realms, s, peak * frac, run)?;
                let (p50, p99) = (s_open.quantile_us(0.5), s_open.quantile_us(0.99));
                println!(
                    "  {name:<32} at {:>3.0}% load: p50 {p50:>7.1} us  p99 {p99:>7.1} us",
                    frac * 100.0
                );
                let mut fig = Figure::new(
                    format!("{name}.load{:.0}.p99_us", frac * 100.0),
                    round(p99, 1),
                    "us",
                    Better::Lower,
                )
                .runs(1, Stat::P99)
                .reference("DBOS paper (section 4.3): sub-millisecond tail", 1000.0)
                .note(format!(
                    "open loop at {:.0} decisions/s, p50 {p50:.1} us",
                    peak * frac
                ));
                if frac == 0.5 {
                    fig = fig.target("value <= 1000");
                }
                report.figures.push(fig);
            }
            if best.as_ref().is_none_or(|(b, _)| peak > *b) {
                best = Some((peak, name));
            }
            drop(store);
        }
    }

    if only_fig5 {
        report
            .notes
            .push("filtered to the decision figures (TABOS_BENCH_FILTER=decisions)".into());
        return Ok(report);
    }
    let ray_tasks = if quick { 2_000 } else { 10_000 };
    if only_wasm {
        wasm_on_node(quick, &base, ray_tasks)?;
        report.notes.push(
            "filtered to the wasm procs, printed only (TABOS_BENCH_FILTER=wasm, for profiling)"
                .into(),
        );
        let _ = std::fs::remove_dir_all(&base);
        return Ok(report);
    }
    // Native procs: spawn-to-start, the 720 burst, and the raw floor.
    let n = if quick { 50 } else { 300 };
    let (mut floor, floor_rate) = raw_spawn_wait(n)?;
    let floor_p50 = floor.quantile_us(0.5);
    let cores = machine_cores;
    let floor_burst = raw_burst(cores)?;
    // As many /bin/true procs as Ray runs no-op tasks: the same work.
    let native = procs_on_node(quick, &base.join("native"), ray_tasks, || {
        Descriptor::native("/bin/true")
    })?;
    let mut start = native.start;
    let burst_ms = native.burst_ms;
    println!(
        "  native spawn-to-start p50 {:.0} us p99 {:.0} us (raw spawn+wait p50 {floor_p50:.0} us); 720 burst {burst_ms:.0} ms (raw {floor_burst:.0} ms); {:.0} procs/s",
        start.quantile_us(0.5),
        start.quantile_us(0.99),
        native.tasks_per_s
    );
    // One measurement, held to both of the issue's targets.
    let p50 = Figure::new(
        "spawn_to_start.native.p50_us",
        round(start.quantile_us(0.5), 1),
        "us",
        Better::Lower,
    )
    .peer(
        "raw posix_spawn+waitpid of /bin/true",
        Some(round(floor_p50, 1)),
    )
    .runs(1, Stat::P50)
    .note(format!("{n} spawns each"));
    let mut absolute = p50.clone().target("value <= 2000");
    absolute.name.push_str(".absolute");
    report.figures.push(p50.target("ratio <= 2"));
    report.figures.push(absolute);
    report.figures.push(
        Figure::new(
            "spawn_to_start.native.p99_us",
            round(start.quantile_us(0.99), 1),
            "us",
            Better::Lower,
        )
        .peer(
            "raw posix_spawn+waitpid of /bin/true",
            Some(round(floor.quantile_us(0.99), 1)),
        )
        .runs(1, Stat::P99),
    );

    // Wasm procs: the same, with a no-op WASI command run in-process.
    let wasm = wasm_on_node(quick, &base, ray_tasks)?;
    let mut wasm_start = wasm.start;
    report.figures.push(
        Figure::new(
            "spawn_to_start.wasm.p50_us",
            round(wasm_start.quantile_us(0.5), 1),
            "us",
            Better::Lower,
        )
        .runs(1, Stat::P50)
        .reference("σOS thesis: a cold proc start", 7_700.0)
        .target("value <= 100")
        .note("no-op WASI command"),
    );
    report.figures.push(
        Figure::new(
            "spawn_to_start.wasm.p99_us",
            round(wasm_start.quantile_us(0.99), 1),
            "us",
            Better::Lower,
        )
        .runs(1, Stat::P99),
    );

    let ray = ray_peer(ray_tasks);
    let (ray_name, ray_tput, ray_burst, ray_note) = match &ray {
        Ok((v, t, b)) => (
            format!("ray {v} (num_cpus=2)"),
            Some(round(*t, 0)),
            Some(round(*b, 1)),
            None,
        ),
        Err(e) => ("ray".to_string(), None, None, Some(e.clone())),
    };
    if let Some(v) = &ray_tput {
        println!(
            "  ray: {v:.0} no-op tasks/s, 720 burst {:.0} ms",
            ray_burst.unwrap_or(f64::NAN)
        );
    }
    let with_ray_note = |f: Figure| match &ray_note {
        Some(n) => f.note(format!("Ray not measured: {n}")),
        None => f,
    };
    report.figures.push(with_ray_note(
        Figure::new(
            "burst720.native.wall_ms",
            round(burst_ms, 1),
            "ms",
            Better::Lower,
        )
        .peer(&ray_name, ray_burst)
        .runs(1, Stat::MedianOfRuns)
        .note(format!(
            "raw spawn+wait floor, {cores} at a time: {floor_burst:.1} ms"
        )),
    ));
    report.figures.push(with_ray_note(
        Figure::new(
            "burst720.wasm.wall_ms",
            round(wasm.burst_ms, 1),
            "ms",
            Better::Lower,
        )
        .peer(&ray_name, ray_burst)
        .runs(1, Stat::MedianOfRuns)
        .target("value <= 100"),
    ));
    report.figures.push(with_ray_note(
        Figure::new(
            "noop_tasks.wasm.per_s",
            round(wasm.tasks_per_s, 0),
            "tasks/s",
            Better::Higher,
        )
        .peer(&ray_name, ray_tput)
        .runs(1, Stat::Rate)
        .target("ratio >= 10")
        .note(format!(
            "{ray_tasks} no-op wasm procs spawned in one burst, each run to exit; Ray: {ray_tasks} no-op tasks"
        )),
    ));
    report.figures.push(with_ray_note(
        Figure::new(
            "noop_tasks.native.per_s",
            round(native.tasks_per_s, 0),
            "tasks/s",
            Better::Higher,
        )
        .peer(&ray_name, ray_tput)
        .runs(1, Stat::Rate)
        .note(format!(
            "{ray_tasks} /bin/true procs spawned in one burst; Ray: {ray_tasks} no-op tasks"
        )),
    ));
    // Issue 40: the same procs against the same program's spawn+wait loop.
    report.figures.push(
        Figure::new(
            "noop_tasks.native.per_s.vs_posix_spawn",
            round(native.tasks_per_s, 0),
            "tasks/s",
            Better::Higher,
        )
        .peer(
            "raw posix_spawn+waitpid loop of /bin/true",
            Some(round(floor_rate, 0)),
        )
        .runs(1, Stat::Rate)
        .target("ratio >= 0.3")
        .note(format!(
            "{ray_tasks} /bin/true procs in one burst, jailed and confined, {cores} cores; the loop: {n} in a row"
        )),
    );
    if let Some((_, name)) = best {
        report.notes.push(format!("highest decision rate: {name}"));
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(report)
}
