//! `tabos-bench elastic`: σOS's elasticity experiments (thesis chapter 6)
//! on a cluster of real `tabos up --elastic` processes on this machine,
//! over one PostgreSQL database (a throwaway cluster the suite starts; it
//! needs Debian's postgresql). Each node is given a share of this machine's
//! cores (`--cores`), so "machines" here are shares of one: the output says
//! so.
//!
//! * **Table 6.2** — burst-spawn 720 procs (`/bin/true`, BE, one core
//!   each) into an elastic realm that starts at one core and must grow,
//!   against the same burst into a realm pre-grown to every core; timed
//!   from the first spawn to the last exit.
//! * **Figure 6-1** — a MapReduce word count in an elastic realm that
//!   starts with one core and grows to all, against the same job in a
//!   static full-size realm (pre-grown to every core); both as speedups
//!   over the job on one core. Goal: ≥ 0.9× the static speedup.
//!
//! * **Figure 6-3** — a BE realm running MapReduce jobs back to back
//!   beside an LC realm whose load rises and falls: the LC service is
//!   procs of `tabos-bench bench-worker lc` (each request 1 ms of CPU, answered
//!   by message) loaded by closed-loop clients; when the load rises its
//!   servers are spawned, its RMGR asks for their cores, and the σMGR takes
//!   them back from the BE realm, whose newest procs are evicted. Figures:
//!   the LC throughput while loaded against the same servers in a
//!   dedicated realm (goal ≥ 0.8×; σOS's conservative eviction left 44 %),
//!   the time until it first reaches 80 % of that (goal ≤ 2 s), and the
//!   cluster's lowest utilization (goal ≥ 90 %).
//!
//! Each run samples, every 100 ms, granted cores and the nodes' measured
//! busy cores (as of their last heartbeat); the series are in the result
//! file and plotted to PNG.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_client::proto;
use tabos_mr::driver::{Job, Submit};
use tabos_mr::job::Kind;
use tabos_store::pg_cluster::{ClusterOptions, TempCluster};

use crate::report::{round, Better, Figure, Report, Series, Stat};

/// Procs in the burst (σOS Table 6.2).
const BURST: usize = 720;
/// How often the time series are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Longest any one experiment may take.
const EXPERIMENT_MAX: Duration = Duration::from_secs(900);
/// The managers' settings for the suite: a look every 100 ms, a realm idle
/// after 1 s.
const TICK_MS: i64 = 100;
const IDLE_MS: i64 = 1_000;

/// One `tabos up` process.
pub(crate) struct NodeProc {
    child: Child,
    pub(crate) addr: String,
    pub(crate) token: String,
}

/// Starts `tabos up` on a free loopback port with `args`, its data (and
/// credentials file) under `data`.
pub(crate) fn start_node(exe: &Path, args: &[&str], data: &Path) -> anyhow::Result<NodeProc> {
    std::fs::create_dir_all(data)?;
    // Its stderr is kept beside its data, and said if it ends early.
    let stderr_path = data.join("stderr.log");
    let mut child = Command::new(exe)
        .args(["up", "--listen", "127.0.0.1:0"])
        .args(args)
        .arg("--data")
        .arg(data)
        .env("TABOS_CREDENTIALS", data.join("credentials.json"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path)?)
        .spawn()
        .context("starting tabos up")?;
    let (addr, token) = read_start(&mut child).with_context(|| {
        let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        format!(
            "its stderr ends: {:?}",
            tail.into_iter().rev().collect::<Vec<_>>()
        )
    })?;
    Ok(NodeProc { child, addr, token })
}

impl NodeProc {
    /// Kills the node with SIGKILL, as a crash would (no clean stop).
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a child asked to stop with SIGTERM has before SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

/// Stops `child` with SIGTERM (a clean stop), or SIGKILL after
/// [`STOP_GRACE`]; true if it stopped cleanly.
pub(crate) fn stop_child(child: &mut Child) -> bool {
    // SAFETY: kill takes no pointers; the pid is our own child's.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        // A clean stop: procs handed back, leases resigned.
        stop_child(&mut self.child);
    }
}

/// A cluster of elastic nodes over one PostgreSQL database.
struct Cluster {
    nodes: Vec<NodeProc>,
    _pg: TempCluster,
    _dir: tabos_store::testing::TempDir,
}

impl Cluster {
    fn start(exe: &Path, nodes: usize, cores: i64) -> anyhow::Result<Cluster> {
        let pg = TempCluster::start(&ClusterOptions {
            fsync: true,
            ..ClusterOptions::default()
        })
        .context("the suite's PostgreSQL")?;
        let url = pg.create_database("tabos_elastic")?;
        let dir = tabos_store::testing::TempDir::new("bench-elastic");
        let mut started = Vec::new();
        for i in 0..nodes {
            let data = dir.path().join(format!("e{i}"));
            let (id, cores) = (format!("e{i}"), cores.to_string());
            let args = [
                "--elastic",
                "--db",
                &url,
                "--node-id",
                &id,
                "--cores",
                &cores,
                "--heartbeat-ms",
                "1000",
            ];
            started.push(start_node(exe, &args, &data)?);
        }
        Ok(Cluster {
            nodes: started,
            _pg: pg,
            _dir: dir,
        })
    }

    async fn client(&self, i: usize) -> anyhow::Result<tabos_client::Client> {
        let n = &self.nodes[i % self.nodes.len()];
        Ok(tabos_client::Client::connect(&n.addr, &n.token).await?)
    }
}

/// `tabos up`'s first lines: its address, and (from the file the second
/// names) its operator credential. The rest of its output is drained.
fn read_start(child: &mut Child) -> anyhow::Result<(String, String)> {
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(child.stdout.take().context("stdout")?);
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        anyhow::ensure!(
            out.read_line(&mut l)? > 0,
            "tabos up ended early: {lines:?}"
        );
        let last = l.starts_with("try:");
        lines.push(l.trim_end().to_string());
        if last {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let addr = lines[0]
        .strip_prefix("tabos node on ")
        .map(|r| r.split(':').take(2).collect::<Vec<_>>().join(":"))
        .with_context(|| format!("unexpected first line {:?}", lines[0]))?;
    let path = lines
        .get(1)
        .and_then(|l| l.strip_prefix("operator credential: "))
        .and_then(|r| r.split(" (").next())
        .with_context(|| format!("unexpected second line {:?}", lines.get(1)))?;
    let token = std::fs::read_to_string(path)?.trim().to_string();
    Ok((addr, token))
}

/// The LC service of Figure 6-3, as a proc (`tabos-bench bench-worker lc
/// MAILBOX WORK_US`, with the node's TABOS_* environment): takes requests
/// from `MAILBOX`, spends `WORK_US` of CPU on each, and replies to each
/// request's sender. Runs until evicted. Returns the exit status.
pub fn lc_server(args: &[String]) -> i32 {
    let [mailbox, work_us] = args else {
        eprintln!("usage: bench-worker lc MAILBOX WORK_US");
        return 2;
    };
    let Ok(work_us) = work_us.parse::<u64>() else {
        eprintln!("WORK_US must be a number, not {work_us:?}");
        return 2;
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return 1;
        }
    };
    let served = rt.block_on(async {
        let mut c = tabos_client::Client::connect_env().await?;
        let realm = std::env::var("TABOS_REALM").unwrap_or_default();
        loop {
            let batch = c.recv(&realm, mailbox, 16, 60_000).await?;
            let mut replies = Vec::with_capacity(batch.len());
            for m in batch {
                // The request's work: CPU, as a service's would be.
                let t = Instant::now();
                let mut x = 0u64;
                while t.elapsed() < Duration::from_micros(work_us) {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                }
                std::hint::black_box(x);
                if !m.sender.is_empty() {
                    replies.push(proto::Outgoing {
                        to: m.sender,
                        payload: m.payload,
                        message_id: String::new(),
                    });
                }
            }
            if !replies.is_empty() {
                c.send_many(&realm, "", replies).await?;
            }
        }
        #[allow(unreachable_code)]
        Ok::<(), tabos_client::Error>(())
    });
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lc server: {e}");
            1
        }
    }
}

fn policy(class: proto::ProcClass, min: i64, max: i64) -> proto::ElasticPolicy {
    proto::ElasticPolicy {
        class: class.into(),
        min_cores: min,
        max_cores: max,
    }
}

fn granted(a: &proto::RealmAllocation) -> i64 {
    a.grants.iter().map(|g| g.cores).sum()
}

/// Waits until `realm` is granted `cores` (bounded).
async fn until_granted(
    c: &mut tabos_client::Client,
    realm: &str,
    cores: i64,
) -> anyhow::Result<()> {
    let t = Instant::now();
    loop {
        if granted(&c.allocation(realm, 1).await?) == cores {
            return Ok(());
        }
        anyhow::ensure!(
            t.elapsed() < Duration::from_secs(60),
            "realm {realm} was never granted {cores} cores"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the sampler saw: seconds since the start, granted cores, busy
/// cores (measured by the nodes, as of their last heartbeat).
#[derive(Default)]
struct Samples {
    granted: Vec<(f64, f64)>,
    busy: Vec<(f64, f64)>,
}

/// Samples `realm`'s grants and the nodes' busy cores until `stop`.
async fn sample(
    mut c: tabos_client::Client,
    realm: String,
    start: Instant,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Samples {
    let mut s = Samples::default();
    loop {
        let at = round(start.elapsed().as_secs_f64(), 2);
        if let Ok(a) = c.allocation(&realm, 1).await {
            s.granted.push((at, granted(&a) as f64));
        }
        if let Ok(nodes) = c.list_nodes().await {
            let busy: f64 = nodes.iter().map(|n| n.busy_cores).sum();
            s.busy.push((at, round(busy, 2)));
        }
        tokio::select! {
            _ = stop.changed() => return s,
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
    }
}

/// Runs `work` while sampling `realm`; its seconds and the samples.
async fn measured<F, Fut>(cluster: &Cluster, realm: &str, work: F) -> anyhow::Result<(f64, Samples)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let sampler = tokio::spawn(sample(
        cluster.client(0).await?,
        realm.to_string(),
        start,
        stopped,
    ));
    let done = tokio::time::timeout(EXPERIMENT_MAX, work()).await;
    let secs = start.elapsed().as_secs_f64();
    let _ = stop.send(true);
    let samples = sampler.await?;
    done.map_err(|_| anyhow::anyhow!("{realm}: no end within {EXPERIMENT_MAX:?}"))??;
    Ok((secs, samples))
}

/// The burst: `BURST` one-core BE procs of `/bin/true` into `realm`, timed
/// from the first spawn to the last exit.
async fn burst(cluster: &Cluster, realm: &str, run: u32) -> anyhow::Result<(f64, Samples)> {
    let realm = realm.to_string();
    measured(cluster, &realm.clone(), || async move {
        let pids: Vec<String> = (0..BURST).map(|i| format!("b{run}-{i}")).collect();
        let mut c = cluster.client(0).await?;
        for chunk in pids.chunks(120) {
            let procs = chunk
                .iter()
                .map(|pid| proto::ProcDescriptor {
                    pid: pid.clone(),
                    program: "/bin/true".into(),
                    class: proto::ProcClass::Be.into(),
                    cores: Some(1),
                    ..Default::default()
                })
                .collect();
            c.spawn_burst(&realm, procs).await?;
        }
        // Waited on from every node, a share each.
        let shares = 8;
        let mut waits = tokio::task::JoinSet::new();
        for s in 0..shares {
            let mut c = cluster.client(s).await?;
            let mine: Vec<String> = pids.iter().skip(s).step_by(shares).cloned().collect();
            let realm = realm.clone();
            waits.spawn(async move {
                for pid in mine {
                    let st = c.wait_exit(&realm, &pid).await?;
                    anyhow::ensure!(
                        st.state() == proto::ProcState::Exited,
                        "{pid} ended {}: {}",
                        st.state(),
                        st.error
                    );
                }
                anyhow::Ok(())
            });
        }
        while let Some(r) = waits.join_next().await {
            r??;
        }
        Ok(())
    })
    .await
}

/// One word count of `inputs` in `realm`: its seconds, the samples, and
/// the words it counted (every configuration must count the same).
async fn wordcount(
    cluster: &Cluster,
    exe: &Path,
    realm: &str,
    inputs: &[PathBuf],
) -> anyhow::Result<(f64, Samples, u64)> {
    let client = cluster.client(0).await?;
    let words = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let w2 = words.clone();
    let (secs, samples) = measured(cluster, realm, || async move {
        let mut s = Submit::new(
            Kind::WordCount,
            inputs.to_vec(),
            exe.to_path_buf(),
            vec!["mr-task".into()],
        );
        s.reducers = 2;
        let mut job = Job::submit(&client, realm, s).await?;
        job.wait(|_| {}).await?;
        let total: u64 = job.output().await?.iter().map(|(_, n)| n).sum();
        w2.store(total, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    })
    .await?;
    Ok((
        secs,
        samples,
        words.load(std::sync::atomic::Ordering::SeqCst),
    ))
}

fn series(plot: &str, name: &str, y_unit: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        plot: plot.into(),
        name: name.into(),
        x_unit: "s".into(),
        y_unit: y_unit.into(),
        points,
    }
}

/// The MapReduce input: part of the Linux source (its `kernel/`; with a
/// full run also `mm/`, `fs/` and `net/`), unpacked by the mr suite's
/// helper.
fn mr_inputs(quick: bool) -> anyhow::Result<Vec<PathBuf>> {
    let root = crate::mr::linux_source()?;
    let dirs: &[&str] = if quick {
        &["kernel"]
    } else {
        &["kernel", "mm", "fs", "net"]
    };
    let out: Vec<PathBuf> = dirs
        .iter()
        .map(|d| root.join(d))
        .filter(|p| p.is_dir())
        .collect();
    anyhow::ensure!(!out.is_empty(), "no kernel/ in {}", root.display());
    Ok(out)
}

/// Figure 6-3's phases: the BE realm alone, then the LC load, then again
/// alone.
const FIG63_BEFORE: Duration = Duration::from_secs(4);
const FIG63_LOAD: Duration = Duration::from_secs(8);
const FIG63_AFTER: Duration = Duration::from_secs(4);
/// CPU per LC request, and the closed-loop clients loading the service.
const LC_WORK_US: u64 = 1_000;
const LC_CLIENTS: usize = 4;
/// A window of LC throughput, and the first seconds of the load that the
/// loaded throughput leaves out (the take-back itself).
const LC_WINDOW: Duration = Duration::from_millis(500);
const LC_SETTLE: Duration = Duration::from_secs(2);

/// Loads the LC service in `realm` (requests to mailbox `lc-in`) from
/// `LC_CLIENTS` closed-loop clients until `stop`; each completion's time
/// (seconds since `start`) goes into `done`.
async fn lc_load(
    cluster: &Cluster,
    realm: &str,
    start: Instant,
    stop: tokio::sync::watch::Receiver<bool>,
    done: std::sync::Arc<std::sync::Mutex<Vec<f64>>>,
) -> anyhow::Result<tokio::task::JoinSet<anyhow::Result<()>>> {
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..LC_CLIENTS {
        let mut c = cluster.client(i).await?;
        let (realm, done, mut stop) = (realm.to_string(), done.clone(), stop.clone());
        let me = format!("lc-reply-{i}-{}", start.elapsed().as_micros());
        c.create_mailbox(&realm, &me, 0, None).await?;
        clients.spawn(async move {
            let mut n = 0u64;
            while !*stop.borrow() {
                n += 1;
                let req = proto::Outgoing {
                    to: "lc-in".into(),
                    payload: n.to_le_bytes().to_vec(),
                    message_id: String::new(),
                };
                c.send_many(&realm, &me, vec![req]).await?;
                // The reply, or the end of the phase.
                loop {
                    tokio::select! {
                        r = c.recv(&realm, &me, 1, 1_000) => {
                            if !r?.is_empty() {
                                done.lock().unwrap_or_else(|e| e.into_inner())
                                    .push(start.elapsed().as_secs_f64());
                                break;
                            }
                            if *stop.borrow() {
                                return Ok(());
                            }
                        }
                        _ = stop.changed() => return Ok(()),
                    }
                }
            }
            Ok(())
        });
    }
    Ok(clients)
}

/// Spawns `n` LC servers (one core each) into `realm`: procs of this
/// benchmark binary (`tabos-bench bench-worker lc`); their pids.
async fn lc_servers(
    c: &mut tabos_client::Client,
    realm: &str,
    n: usize,
    tag: &str,
) -> anyhow::Result<Vec<String>> {
    let worker = std::env::current_exe()?;
    let mut pids = Vec::new();
    for i in 0..n {
        let pid = format!("lc-{tag}-{i}");
        c.spawn(
            realm,
            proto::ProcDescriptor {
                pid: pid.clone(),
                program: worker.display().to_string(),
                args: vec![
                    "bench-worker".into(),
                    "lc".into(),
                    "lc-in".into(),
                    LC_WORK_US.to_string(),
                ],
                class: proto::ProcClass::Lc.into(),
                cores: Some(1),
                ..Default::default()
            },
        )
        .await?;
        pids.push(pid);
    }
    Ok(pids)
}

/// Completions per second in each `LC_WINDOW` from `from` to `to`.
fn rates(done: &[f64], from: f64, to: f64) -> Vec<(f64, f64)> {
    let w = LC_WINDOW.as_secs_f64();
    let mut out = Vec::new();
    let mut t = from;
    while t + w <= to + 1e-9 {
        let n = done.iter().filter(|&&x| x >= t && x < t + w).count();
        out.push((round(t + w, 2), round(n as f64 / w, 1)));
        t += w;
    }
    out
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Figure 6-3 (see the module doc): its figures and series.
async fn fig6_3(
    cluster: &Cluster,
    exe: &Path,
    inputs: &[PathBuf],
    host_paths: &[String],
    total: i64,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut op = cluster.client(0).await?;
    let servers = (total / 2).max(1) as usize;
    // The LC service alone, on cores of its own: its dedicated throughput.
    op.create_elastic_realm(
        "web-dedicated",
        proto::Scheduler::Fifo,
        policy(proto::ProcClass::Lc, servers as i64, servers as i64),
    )
    .await?;
    op.create_mailbox("web-dedicated", "lc-in", 0, None).await?;
    until_granted(&mut op, "web-dedicated", servers as i64).await?;
    let pids = lc_servers(&mut op, "web-dedicated", servers, "d").await?;
    for p in &pids {
        op.wait_start("web-dedicated", p).await?;
    }
    let start = Instant::now();
    let done = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut clients = lc_load(cluster, "web-dedicated", start, stopped, done.clone()).await?;
    tokio::time::sleep(FIG63_LOAD).await;
    let _ = stop.send(true);
    while let Some(r) = clients.join_next().await {
        r??;
    }
    for p in &pids {
        op.evict("web-dedicated", p).await?;
        op.wait_exit("web-dedicated", p).await?;
    }
    let loaded = FIG63_LOAD.as_secs_f64();
    let dedicated = {
        let d = done.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut r: Vec<f64> = rates(&d, LC_SETTLE.as_secs_f64(), loaded)
            .into_iter()
            .map(|(_, y)| y)
            .collect();
        median(&mut r)
    };
    op.remove_realm("web-dedicated").await?;
    println!("elastic: dedicated LC throughput {dedicated:.0} requests/s");

    // The BE realm runs jobs back to back; the LC realm's load comes and
    // goes.
    op.create_elastic_realm(
        "batch",
        proto::Scheduler::Fifo,
        policy(proto::ProcClass::Be, 0, total),
    )
    .await?;
    op.set_realm(proto::SetRealmRequest {
        realm: "batch".into(),
        host_paths: host_paths.to_vec(),
        ..Default::default()
    })
    .await?;
    op.create_elastic_realm(
        "web",
        proto::Scheduler::Fifo,
        policy(proto::ProcClass::Lc, 0, total),
    )
    .await?;
    op.create_mailbox("web", "lc-in", 0, None).await?;
    let (stop_jobs, jobs_stopped) = tokio::sync::watch::channel(false);
    let jobs = {
        let client = cluster.client(1).await?;
        let (exe, inputs) = (exe.to_path_buf(), inputs.to_vec());
        tokio::spawn(async move {
            let mut n = 0u32;
            while !*jobs_stopped.borrow() {
                let mut s = Submit::new(
                    Kind::WordCount,
                    inputs.clone(),
                    exe.clone(),
                    vec!["mr-task".into()],
                );
                s.reducers = 2;
                s.task_bytes = 1 << 20;
                let mut job = Job::submit(&client, "batch", s).await?;
                job.wait(|_| {}).await?;
                n += 1;
            }
            anyhow::Ok(n)
        })
    };
    let start = Instant::now();
    let (stop_sampling, sampling) = tokio::sync::watch::channel(false);
    let sampler = {
        let (c, stop) = (cluster.client(0).await?, sampling);
        tokio::spawn(async move {
            let mut c = c;
            let mut out: Vec<(f64, f64, f64, f64)> = Vec::new();
            let mut stop = stop;
            loop {
                let at = round(start.elapsed().as_secs_f64(), 2);
                let web = c
                    .allocation("web", 1)
                    .await
                    .map(|a| granted(&a))
                    .unwrap_or(0);
                let batch = c
                    .allocation("batch", 1)
                    .await
                    .map(|a| granted(&a))
                    .unwrap_or(0);
                let busy: f64 = c
                    .list_nodes()
                    .await
                    .map(|n| n.iter().map(|n| n.busy_cores).sum())
                    .unwrap_or(0.0);
                out.push((at, web as f64, batch as f64, round(busy, 2)));
                tokio::select! {
                    _ = stop.changed() => return out,
                    () = tokio::time::sleep(SAMPLE_EVERY) => {}
                }
            }
        })
    };
    tokio::time::sleep(FIG63_BEFORE).await;
    // The load rises: the service's servers and its clients.
    let rise = start.elapsed().as_secs_f64();
    let pids = lc_servers(&mut op, "web", servers, "w").await?;
    let done = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut clients = lc_load(cluster, "web", start, stopped, done.clone()).await?;
    tokio::time::sleep(FIG63_LOAD).await;
    // The load falls.
    let fall = start.elapsed().as_secs_f64();
    let _ = stop.send(true);
    while let Some(r) = clients.join_next().await {
        r??;
    }
    for p in &pids {
        op.evict("web", p).await?;
    }
    tokio::time::sleep(FIG63_AFTER).await;
    let end = start.elapsed().as_secs_f64();
    let _ = stop_sampling.send(true);
    let samples = sampler.await?;
    let _ = stop_jobs.send(true);
    let jobs_done = tokio::time::timeout(EXPERIMENT_MAX, jobs)
        .await
        .map_err(|_| anyhow::anyhow!("the last job did not end"))???;
    for p in &pids {
        op.wait_exit("web", p).await?;
    }
    op.remove_realm("web").await?;
    op.remove_realm("batch").await?;

    let done = done.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let lc = rates(&done, rise, fall);
    let recovered = lc
        .iter()
        .find(|(_, y)| *y >= 0.8 * dedicated)
        .map(|(t, _)| t - rise);
    let mut settled: Vec<f64> = lc
        .iter()
        .filter(|(t, _)| *t - rise > LC_SETTLE.as_secs_f64())
        .map(|(_, y)| *y)
        .collect();
    let loaded = median(&mut settled);
    // Utilization: after the BE realm's first job got going (1 s).
    let util_min = samples
        .iter()
        .filter(|s| s.0 >= 1.0 && s.0 <= end)
        .map(|s| 100.0 * s.3 / total as f64)
        .fold(f64::INFINITY, f64::min);
    println!(
        "elastic: LC throughput {loaded:.0}/s loaded (dedicated {dedicated:.0}/s), reached 80% \
         after {recovered:?} s; lowest utilization {util_min:.0}%; {jobs_done} MR jobs"
    );
    report.figures.push(
        Figure::new(
            "fig6_3.lc_throughput_loaded",
            round(loaded, 1),
            "requests/s",
            Better::Higher,
        )
        .peer(
            "the same LC servers in a dedicated realm",
            Some(round(dedicated, 1)),
        )
        .reference("σOS Figure 6-3: LC realm at 44% of dedicated (ratio)", 0.44)
        .runs(1, Stat::P50)
        .target("ratio >= 0.8")
        .note(format!(
            "median of {}-ms windows after the first {} s of the load; {servers} LC server(s) \
                 of {LC_WORK_US} us per request, {LC_CLIENTS} closed-loop clients; beside a BE \
                 realm running word counts back to back ({jobs_done} jobs)",
            LC_WINDOW.as_millis(),
            LC_SETTLE.as_secs()
        )),
    );
    let load_s = fall - rise;
    report.figures.push(
        Figure::new(
            "fig6_3.lc_back_to_80pct_s",
            round(recovered.unwrap_or(load_s), 2),
            "s",
            Better::Lower,
        )
        .runs(1, Stat::MedianOfRuns)
        .target("value <= 2")
        .note(match recovered {
            Some(_) => "from the load rising to the end of the first window at 80% of the \
                        dedicated throughput"
                .to_string(),
            None => format!(
                "no window of the load reached 80% of the dedicated throughput: the value is \
                 the load's whole length ({load_s:.1} s)"
            ),
        }),
    );
    report.figures.push(
        Figure::new(
            "fig6_3.cluster_utilization_min_pct",
            round(util_min, 1),
            "%",
            Better::Higher,
        )
        .runs(1, Stat::MedianOfRuns)
        .target("value >= 90")
        .note(
            "lowest of the nodes' measured busy cores over all cores, sampled every 100 ms \
               (each node measures at its heartbeat) from 1 s on",
        ),
    );
    let col = |i: usize| -> Vec<(f64, f64)> {
        samples
            .iter()
            .map(|s| (s.0, [s.0, s.1, s.2, s.3][i]))
            .collect()
    };
    report
        .series
        .push(series("fig6_3", "granted cores, LC realm", "cores", col(1)));
    report
        .series
        .push(series("fig6_3", "granted cores, BE realm", "cores", col(2)));
    report
        .series
        .push(series("fig6_3", "busy cores (measured)", "cores", col(3)));
    report
        .series
        .push(series("fig6_3", "LC throughput", "requests/s", lc));
    Ok(())
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("elastic", quick);
    let exe = crate::tabos_exe()?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    // One node per core, each offering one core: "machines" are shares.
    let (nodes, per_node) = (cpus.max(2) as usize, 1i64);
    let total = nodes as i64 * per_node;
    let runs: u32 = if quick { 1 } else { 2 };
    report.notes.push(format!(
        "{nodes} nodes (tabos up --elastic processes) on this {cpus}-core machine over one \
         PostgreSQL, each offering {per_node} core: the cluster's machines are shares of one"
    ));
    let inputs = mr_inputs(quick)?;
    let host_paths: Vec<String> = inputs
        .iter()
        .map(|p| Ok(std::fs::canonicalize(p)?.display().to_string()))
        .collect::<anyhow::Result<_>>()?;
    let cluster = Cluster::start(&exe, nodes, per_node)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut op = cluster.client(0).await?;
        op.alloc_settings(
            [
                ("tick_ms".to_string(), TICK_MS),
                ("idle_ms".to_string(), IDLE_MS),
            ]
            .into_iter()
            .collect(),
        )
        .await?;

        // TABOS_BENCH_FILTER=NAME runs only the experiments whose name has
        // NAME in it (table6_2, fig6_1, fig6_3).
        let filter = std::env::var("TABOS_BENCH_FILTER").unwrap_or_default();
        let want = |name: &str| filter.is_empty() || name.contains(filter.as_str());
        // Table 6.2: a burst into a realm that must grow, and pre-grown.
        let mut grow = Vec::new();
        let mut pre = Vec::new();
        for run in 0..runs {
            if !want("table6_2") {
                break;
            }
            // One realm at a time: each may take every core.
            let (g, p) = (format!("burst-grow-{run}"), format!("burst-pre-{run}"));
            op.create_elastic_realm(
                &g,
                proto::Scheduler::Fifo,
                policy(proto::ProcClass::Be, 1, total),
            )
            .await?;
            until_granted(&mut op, &g, 1).await?;
            let (secs, samples) = burst(&cluster, &g, run).await?;
            println!("elastic: burst of {BURST} into a realm that grows: {secs:.2} s");
            if run == 0 {
                report.series.push(series(
                    "table6_2",
                    "granted cores (must grow)",
                    "cores",
                    samples.granted,
                ));
                report.series.push(series(
                    "table6_2",
                    "busy cores (must grow)",
                    "cores",
                    samples.busy,
                ));
            }
            grow.push(secs);
            op.remove_realm(&g).await?;
            op.create_elastic_realm(
                &p,
                proto::Scheduler::Fifo,
                policy(proto::ProcClass::Be, total, total),
            )
            .await?;
            until_granted(&mut op, &p, total).await?;
            let (secs, samples) = burst(&cluster, &p, run).await?;
            println!("elastic: burst of {BURST} into a pre-grown realm: {secs:.2} s");
            if run == 0 {
                report.series.push(series(
                    "table6_2",
                    "busy cores (pre-grown)",
                    "cores",
                    samples.busy,
                ));
            }
            pre.push(secs);
            op.remove_realm(&p).await?;
        }
        let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        if !grow.is_empty() {
            report.figures.push(
                Figure::new(
                    "table6_2.burst720.must_grow.s",
                    round(best(&grow), 3),
                    "s",
                    Better::Lower,
                )
                .peer("pre-grown realm", Some(round(best(&pre), 3)))
                .runs(runs, Stat::BestOfRuns)
                .note(format!(
                    "{BURST} one-core BE procs of /bin/true, first spawn to last exit; the realm \
                 starts at 1 core of {total}"
                )),
            );
        }

        // Figure 6-1: a word count on one core, in a realm that grows from
        // one core to all, and in a static full-size realm.
        let mut one = Vec::new();
        let mut elastic = Vec::new();
        let mut full = Vec::new();
        let mut counted: Option<u64> = None;
        for run in 0..runs {
            if !want("fig6_1") {
                break;
            }
            for (name, min, max, out) in [
                (format!("mr-one-{run}"), 1, 1, &mut one),
                (format!("mr-elastic-{run}"), 1, total, &mut elastic),
                (format!("mr-full-{run}"), total, total, &mut full),
            ] {
                op.create_elastic_realm(
                    &name,
                    proto::Scheduler::Fifo,
                    policy(proto::ProcClass::Be, min, max),
                )
                .await?;
                op.set_realm(proto::SetRealmRequest {
                    realm: name.clone(),
                    host_paths: host_paths.clone(),
                    ..Default::default()
                })
                .await?;
                until_granted(&mut op, &name, min).await?;
                let (secs, samples, words) = wordcount(&cluster, &exe, &name, &inputs).await?;
                println!("elastic: word count in {name}: {secs:.2} s, {words} words");
                anyhow::ensure!(words > 0, "{name}: the job counted no words");
                match counted {
                    None => counted = Some(words),
                    Some(w) => {
                        anyhow::ensure!(w == words, "{name} counted {words} words, another run {w}")
                    }
                }
                if run == 0 && name.starts_with("mr-elastic") {
                    report.series.push(series(
                        "fig6_1",
                        "granted cores (elastic realm)",
                        "cores",
                        samples.granted,
                    ));
                    report.series.push(series(
                        "fig6_1",
                        "busy cores (elastic realm)",
                        "cores",
                        samples.busy,
                    ));
                }
                out.push(secs);
                op.remove_realm(&name).await?;
            }
        }
        let (t1, te, ts) = (best(&one), best(&elastic), best(&full));
        if !one.is_empty() {
            report.figures.push(
                Figure::new(
                    "fig6_1.mr_wordcount.speedup_elastic",
                    round(t1 / te, 3),
                    "x",
                    Better::Higher,
                )
                .peer("static full-size realm", Some(round(t1 / ts, 3)))
                .runs(runs, Stat::BestOfRuns)
                .target("ratio >= 0.9")
                .note(format!(
                    "speedup over the job on 1 core ({:.2} s): elastic realm 1 to {total} cores \
                 {te:.2} s, static {total}-core realm {ts:.2} s",
                    t1
                )),
            );
        }

        // Figure 6-3.
        if want("fig6_3") {
            fig6_3(&cluster, &exe, &inputs, &host_paths, total, &mut report).await?;
        }
        anyhow::Ok(())
    })?;
    drop(cluster);
    Ok(report)
}
