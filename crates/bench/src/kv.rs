//! `tabos-bench kv`: σOS's key-value experiments (thesis section 6, Figures
//! 6-4 and 6-2) and redis-benchmark, against redis-server (Debian's
//! `redis-server` and `redis-tools`, installed with apt-get if missing),
//! on a `tabos up` process on this machine (embedded SQLite at durability
//! `normal`: an acknowledged write survives the process's crash).
//!
//! * **Figure 6-4** — clients each doing SET and GET in turn on their own
//!   1,000 keys in a closed loop, at 1, 2, 4, 8 and 16 clients: tabos KV
//!   (clerks talking to one kvd) against redis-server, each server pinned
//!   to the same one core (`taskset`). Redis runs with its append-only
//!   file on (`appendfsync everysec`): like tabos at `normal`, it writes
//!   each acknowledged write to the kernel before replying. The kvd's
//!   writes also go through the tabos node (its database), which is not
//!   pinned: the output says so. Goal: ≥ 1× Redis at 16 clients (σOS
//!   reached 0.44×, a reference).
//! * **redis-benchmark** — SET and GET, 16 connections, against the
//!   Redis front end of `tabos kv serve` and against redis-server.
//! * **Figure 6-2** — 16 clerks against a service whose balancer may grow
//!   from one group to two: throughput over time (PNG), the throughput at
//!   one group and at two, and how long the move's dip lasted.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_client::Client;
use tabos_kv::clerk::Clerk;
use tabos_kv::config::{Layout, Policy};
use tabos_kv::resp::{self, Reply};
use tabos_kv::service::{self, Program, Supervisor};
use tokio::io::BufReader;
use tokio::net::TcpStream;

use crate::report::{round, Better, Figure, Report, Series, Stat};

/// Keys per client (σOS: 1,000 per clerk).
const KEYS_PER_CLIENT: usize = 1_000;
/// Client counts of Figure 6-4.
const CLIENTS: [usize; 5] = [1, 2, 4, 8, 16];
/// Bytes of each value.
const VALUE_BYTES: usize = 16;
/// Figure 6-2: how long the load stays over the balancer's threshold
/// before it grows the service (so a steady stretch at one group shows).
const GROW_AFTER_MS: u64 = 4_000;
/// Window of Figure 6-2's throughput series.
const WINDOW: Duration = Duration::from_millis(250);

struct Redis {
    child: Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// redis-server on loopback, pinned to `cpu`, with its append-only file
/// and `password`.
fn start_redis(dir: &Path, cpu: usize, password: &str) -> anyhow::Result<Redis> {
    let bin = crate::names::debian_binary("kv", "redis-server", &["/usr/bin/redis-server"])?;
    let port = free_port()?;
    let child = Command::new("taskset")
        .args(["-c", &cpu.to_string()])
        .arg(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
        ])
        // Behind a password, as tabos KV is.
        .args(["--requirepass", password])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start redis-server (under taskset)")?;
    let redis = Redis { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(redis)
}

/// A connection speaking RESP (to redis-server or a kvd).
struct Conn {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
}

impl Conn {
    /// Connects and gives `password` (AUTH).
    async fn open(addr: &str, password: &str) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        let mut c = Conn {
            r: BufReader::new(r),
            w,
        };
        match c.call(&[b"AUTH", password.as_bytes()]).await? {
            Reply::Simple(_) => Ok(c),
            r => anyhow::bail!("{addr} refused the password: {r:?}"),
        }
    }

    async fn call(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut out = Vec::new();
        resp::encode_request(args, &mut out);
        resp::write_all(&mut self.w, &out).await?;
        Ok(resp::read_reply(&mut self.r).await?)
    }
}

/// Who a load runs against.
#[derive(Clone)]
enum Target {
    /// Its address and password.
    Redis(String, String),
    Kv(Box<Client>, String, String),
}

/// One client's side of the closed loop: SET then GET on its own keys.
enum Side {
    Redis(Conn),
    Kv(Box<Clerk>),
}

impl Side {
    async fn open(t: &Target) -> anyhow::Result<Side> {
        Ok(match t {
            Target::Redis(addr, pw) => Side::Redis(Conn::open(addr, pw).await?),
            Target::Kv(c, realm, svc) => Side::Kv(Box::new(Clerk::new(c, realm, svc).await?)),
        })
    }

    async fn op(&mut self, args: &[&[u8]]) -> anyhow::Result<()> {
        let r = match self {
            Side::Redis(c) => c.call(args).await?,
            Side::Kv(c) => c.call(args).await?,
        };
        match r {
            Reply::Error(e) => anyhow::bail!("{e}"),
            _ => Ok(()),
        }
    }
}

fn key(client: usize, i: usize) -> Vec<u8> {
    format!("c{client}:k{i}").into_bytes()
}

/// Puts every client's keys (MSET in batches).
async fn preload(t: &Target, clients: usize) -> anyhow::Result<()> {
    let mut side = Side::open(t).await?;
    let value = vec![b'v'; VALUE_BYTES];
    for c in 0..clients {
        for chunk in (0..KEYS_PER_CLIENT).collect::<Vec<_>>().chunks(100) {
            let keys: Vec<Vec<u8>> = chunk.iter().map(|i| key(c, *i)).collect();
            let mut args: Vec<&[u8]> = vec![b"MSET"];
            for k in &keys {
                args.push(k);
                args.push(&value);
            }
            side.op(&args).await?;
        }
    }
    Ok(())
}

/// `clients` closed loops for `dur`; every operation's completion time
/// (seconds since `t0`) is recorded when `times` is given. Returns the
/// operations done per second.
async fn load(
    t: &Target,
    clients: usize,
    dur: Duration,
    t0: Instant,
    times: Option<Arc<Mutex<Vec<f64>>>>,
) -> anyhow::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut side = Side::open(t).await?;
        let (done, stop, times) = (done.clone(), stop.clone(), times.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0usize;
            let value = format!("{c:08}{i:08}").into_bytes();
            while !stop.load(Ordering::Relaxed) {
                let k = key(c, i % KEYS_PER_CLIENT);
                if i.is_multiple_of(2) {
                    side.op(&[b"SET", &k, &value]).await?;
                } else {
                    side.op(&[b"GET", &k]).await?;
                }
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
                if let Some(t) = &times {
                    t.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(t0.elapsed().as_secs_f64());
                }
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    for t in tasks {
        t.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / secs)
}

/// Starts service `svc` (one balancer) and waits for its leaders.
async fn start_service(
    c: &Client,
    realm: &str,
    svc: &str,
    exe: &Path,
    policy: &Policy,
) -> anyhow::Result<Supervisor> {
    // kvds listen where clients connect: on the host's network.
    c.clone()
        .set_realm(tabos_client::proto::SetRealmRequest {
            realm: realm.into(),
            host_network: Some(true),
            ..Default::default()
        })
        .await?;
    service::create(c, realm, svc, 16, 1, policy).await?;
    let program = Program {
        path: exe.display().to_string(),
        args: vec!["kv-task".into()],
    };
    let mut sup = Supervisor::new(c, realm, svc, program, 1)?;
    sup.fill().await?;
    service::until_led(c, realm, svc, Duration::from_secs(60)).await?;
    Ok(sup)
}

/// Pins every kvd of group 0 of `svc` to `cpu`; returns how many processes.
async fn pin_kvds(c: &Client, realm: &str, svc: &str, cpu: usize) -> anyhow::Result<usize> {
    let l = Layout::new(svc)?;
    let members = c.clone().name_readdir(realm, &l.members(0)).await?;
    let mut n = 0;
    for m in members.entries {
        let pid = m.path.rsplit('/').next().unwrap_or_default().to_string();
        for os in tabos_store::testing::os_pids_of_proc(&pid) {
            let ok = Command::new("taskset")
                .args(["-a", "-cp", &cpu.to_string(), &os.to_string()])
                .stdout(Stdio::null())
                .status()?
                .success();
            anyhow::ensure!(ok, "taskset could not pin {pid}");
            n += 1;
        }
    }
    Ok(n)
}

/// redis-benchmark's requests per second for SET and GET against `port`.
fn redis_benchmark(port: u16, n: usize, password: &str) -> anyhow::Result<(f64, f64)> {
    let bin = crate::names::debian_binary("kv", "redis-tools", &["/usr/bin/redis-benchmark"])?;
    let out = Command::new(bin)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-t",
            "set,get",
            "-c",
            "16",
            "-r",
            "16000",
            "-d",
            &VALUE_BYTES.to_string(),
        ])
        .args(["-n", &n.to_string(), "--csv", "-a", password])
        .output()?;
    anyhow::ensure!(out.status.success(), "redis-benchmark failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = |test: &str| -> anyhow::Result<f64> {
        text.lines()
            .find(|l| l.starts_with(&format!("\"{test}\"")))
            .and_then(|l| l.split(',').nth(1))
            .and_then(|v| v.trim_matches('"').parse().ok())
            .with_context(|| format!("no {test} line in redis-benchmark's output: {text}"))
    };
    Ok((rps("SET")?, rps("GET")?))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("kv", quick);
    let exe = crate::tabos_exe()?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = cpus - 1;
    let runs: u32 = if quick { 1 } else { 3 };
    let dur = Duration::from_millis(if quick { 1_000 } else { 3_000 });
    let dir = tabos_store::testing::TempDir::new("bench-kv");
    let node = crate::elastic::start_node(&exe, &["--cores", "16"], &dir.path().join("node"))?;
    let redis_password = tabos_kv::config::new_password()?;
    let redis = start_redis(dir.path(), pin, &redis_password)?;
    report.notes.push(format!(
        "one tabos node (embedded SQLite, durability normal) and redis-server (appendonly yes, \
         appendfsync everysec, requirepass: clients of both give a password per connection) on this {cpus}-core machine; the kvd and redis-server each pinned to \
         core {pin} (the tabos node, which makes the kvd's writes durable, and the clients are not \
         pinned)"
    ));
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let c = Client::connect(&node.addr, &node.token).await?;
        let realm = "default".to_string();
        let redis_t = Target::Redis(format!("127.0.0.1:{}", redis.port), redis_password.clone());

        // Figure 6-4: one kvd, pinned; redis-server, pinned.
        let one = Policy {
            kvds_per_group: 1,
            ..Policy::default()
        };
        let mut sup = start_service(&c, &realm, "fig64", &exe, &one).await?;
        let pinned = pin_kvds(&c, &realm, "fig64", pin).await?;
        anyhow::ensure!(pinned > 0, "found no kvd process to pin");
        let kv_t = Target::Kv(Box::new(c.clone()), realm.clone(), "fig64".into());
        let max = *CLIENTS.last().expect("client counts");
        preload(&kv_t, max).await?;
        preload(&redis_t, max).await?;
        let mut at16 = 0.0;
        for clients in CLIENTS {
            let (mut kv, mut rd) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                kv.push(load(&kv_t, clients, dur, Instant::now(), None).await?);
                rd.push(load(&redis_t, clients, dur, Instant::now(), None).await?);
            }
            let (kv, rd) = (median(&mut kv), median(&mut rd));
            println!("kv: {clients} clients: tabos {kv:.0}/s, redis {rd:.0}/s");
            if clients == max {
                at16 = kv;
            }
            let mut f = Figure::new(
                format!("fig6_4.set_get.{clients}c"),
                round(kv, 0),
                "ops/s",
                Better::Higher,
            )
            .peer("redis-server (AOF, everysec)", Some(round(rd, 0)))
            .runs(runs, Stat::MedianOfRuns)
            .note(format!(
                "{clients} closed-loop clients, SET and GET in turn on their own \
                 {KEYS_PER_CLIENT} keys of {VALUE_BYTES}-byte values, {:.0} s per run",
                dur.as_secs_f64()
            ));
            if clients == max {
                f = f
                    .reference("σOS Figure 6-4: σOS-KV at 16 clerks (ratio to Redis)", 0.44)
                    .target("ratio >= 1");
            }
            report.figures.push(f);
        }

        // redis-benchmark: the Redis front end against redis-server.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let front_port = listener.local_addr()?.port();
        let front = tokio::spawn(tabos_kv::front::serve(
            listener,
            c.clone(),
            realm.clone(),
            "fig64".into(),
            tabos_kv::front::default_threads(),
        ));
        let n = if quick { 20_000 } else { 100_000 };
        let (mut fs, mut fg, mut rs, mut rg) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let front_password =
            tabos_kv::config::read_password(&c, &realm, &Layout::new("fig64")?).await?;
        for _ in 0..runs {
            let pw = front_password.clone();
            let (s, g) =
                tokio::task::spawn_blocking(move || redis_benchmark(front_port, n, &pw)).await??;
            fs.push(s);
            fg.push(g);
            let (port, pw) = (redis.port, redis_password.clone());
            let (s, g) =
                tokio::task::spawn_blocking(move || redis_benchmark(port, n, &pw)).await??;
            rs.push(s);
            rg.push(g);
        }
        front.abort();
        for (test, t, r) in [("set", &mut fs, &mut rs), ("get", &mut fg, &mut rg)] {
            let (t, r) = (median(t), median(r));
            println!("kv: redis-benchmark {test}: tabos front end {t:.0}/s, redis {r:.0}/s");
            report.figures.push(
                Figure::new(
                    format!("redis_benchmark.{test}.16c"),
                    round(t, 0),
                    "requests/s",
                    Better::Higher,
                )
                .peer("redis-server (AOF, everysec)", Some(round(r, 0)))
                .runs(runs, Stat::MedianOfRuns)
                .target("ratio >= 0.5")
                .note(format!(
                    "redis-benchmark -t {test} -c 16 -r 16000 -d {VALUE_BYTES} -n {n}, against \
                     the Redis front end of tabos kv serve (a clerk per connection) and against \
                     redis-server"
                )),
            );
        }
        sup.stop().await?;

        // Figure 6-2: 16 clerks; the balancer grows the service to two
        // groups once one serves more than half of what one kvd did above.
        let grow_at = (at16 / 2.0).max(100.0);
        let elastic = Policy {
            kvds_per_group: 1,
            min_groups: 1,
            max_groups: 2,
            grow_ops: grow_at,
            shrink_ops: 0.0,
            shrink_after_ms: 600_000,
            grow_after_ms: GROW_AFTER_MS,
            ..Policy::default()
        };
        let mut sup = start_service(&c, &realm, "fig62", &exe, &elastic).await?;
        let kv_t = Target::Kv(Box::new(c.clone()), realm.clone(), "fig62".into());
        preload(&kv_t, max).await?;
        let span = Duration::from_secs(if quick { 8 } else { 20 });
        let t0 = Instant::now();
        let times = Arc::new(Mutex::new(Vec::new()));
        // The config's group count over time, as the balancer changes it.
        let watch_c = c.clone();
        let (watch_realm, layout) = (realm.clone(), Layout::new("fig62")?);
        let groups_at = tokio::spawn(async move {
            let mut out: Vec<(f64, f64, bool)> = Vec::new();
            while t0.elapsed() < span {
                if let Ok((conf, _)) = tabos_kv::config::read(&watch_c, &watch_realm, &layout).await
                {
                    out.push((
                        t0.elapsed().as_secs_f64(),
                        conf.groups.len() as f64,
                        conf.target.is_some(),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            out
        });
        load(&kv_t, max, span, t0, Some(times.clone())).await?;
        let groups_at = groups_at.await?;
        sup.stop().await?;
        let times = times.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let windows = (span.as_secs_f64() / WINDOW.as_secs_f64()).ceil() as usize;
        let mut counts = vec![0u64; windows];
        for t in &times {
            let w = (t / WINDOW.as_secs_f64()) as usize;
            if w < windows {
                counts[w] += 1;
            }
        }
        let rate: Vec<(f64, f64)> = counts
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    (i + 1) as f64 * WINDOW.as_secs_f64(),
                    *n as f64 / WINDOW.as_secs_f64(),
                )
            })
            .collect();
        let move_start = groups_at.iter().find(|(_, _, moving)| *moving).map(|p| p.0);
        let move_end = groups_at
            .iter()
            .filter(|(t, g, moving)| *g >= 2.0 && !moving && Some(*t) > move_start)
            .map(|p| p.0)
            .next();
        report.series.push(Series {
            plot: "fig6_2".into(),
            name: "throughput (16 clerks)".into(),
            x_unit: "s".into(),
            y_unit: "ops/s".into(),
            points: rate.clone(),
        });
        report.series.push(Series {
            plot: "fig6_2".into(),
            name: "groups".into(),
            x_unit: "s".into(),
            y_unit: "groups".into(),
            points: groups_at.iter().map(|(t, g, _)| (*t, *g)).collect(),
        });
        let in_range = |from: f64, to: f64| -> Vec<f64> {
            rate.iter()
                .filter(|(t, _)| *t > from && *t <= to)
                .map(|(_, r)| *r)
                .collect()
        };
        match (move_start, move_end) {
            (Some(s), Some(e)) => {
                let before = median(&mut in_range(1.0, s));
                let after = median(&mut in_range(e + 0.5, span.as_secs_f64()));
                let below = rate
                    .iter()
                    .filter(|(t, r)| *t > s - 0.5 && *t <= e + 1.0 && *r < before / 2.0)
                    .count() as f64
                    * WINDOW.as_secs_f64();
                println!(
                    "kv: fig 6-2: {before:.0}/s at one group, {after:.0}/s at two; the move \
                     from {s:.1} s to {e:.1} s, {below:.2} s under half"
                );
                report.figures.push(
                    Figure::new(
                        "fig6_2.throughput_two_groups",
                        round(after, 0),
                        "ops/s",
                        Better::Higher,
                    )
                    .peer(
                        "the same service at one group, before the move",
                        Some(round(before, 0)),
                    )
                    .runs(1, Stat::P50)
                    .note(format!(
                        "16 clerks; medians of {} ms windows; the balancer grows at {grow_at:.0} \
                             req/s per group",
                        WINDOW.as_millis()
                    )),
                );
                report.figures.push(
                    Figure::new(
                        "fig6_2.dip_under_half_s",
                        round(below, 2),
                        "s",
                        Better::Lower,
                    )
                    .runs(1, Stat::MedianOfRuns)
                    .note(format!(
                        "time the throughput spent under half of its one-group median while \
                             the shards moved ({:.1} s to {:.1} s after the load began)",
                        s, e
                    )),
                );
            }
            _ => report.notes.push(format!(
                "Figure 6-2: the balancer did not grow the service within {} s (growing at \
                 {grow_at:.0} req/s per group)",
                span.as_secs()
            )),
        }
        anyhow::Ok(())
    })?;
    drop(node);
    Ok(report)
}
