//! Suite `names`: the namespace (issue 6; σOS thesis sections 3.6, 4.1–4.3)
//! against etcd, in the same run, driven by the same harness.
//!
//! Operations, each at 1 and 16 concurrent clients for a fixed time (after a
//! warm-up), with every operation's latency recorded:
//! * create+remove: create a fresh file, then remove it (etcd: a
//!   create-if-absent transaction, then a delete) — one op is the pair;
//! * put: set the client's own file (etcd: put);
//! * get: read it (etcd: a linearizable get, etcd's default);
//! * cas: set it only at the version last written (etcd: a transaction
//!   comparing mod_revision).
//!
//! Watch latency: one writer sets a file while one watcher watches its
//! directory (etcd: the key's prefix); the sample is the time from issuing
//! the set to the watcher receiving the event — the commit and the
//! wake-up, measured the same way on both systems.
//!
//! Systems, both on loopback and on the same disk:
//! * tabos: an embedded node in this process (SQLite) at durability `full`
//!   (fsync on every commit, as etcd syncs its WAL on every write), through
//!   the Rust client over gRPC, each client with its own connection;
//! * etcd: Debian's etcd-server (installed with apt-get by the benchmark if
//!   missing), a single member started by the benchmark with its data in a
//!   temporary directory, through the etcd-client crate, one connection per
//!   client.

use std::time::{Duration, Instant};

use anyhow::Context;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tabos_client::names::{CreateOptions, WatchMode};
use tabos_client::proto::batch_call::Call as BatchCall;
use tabos_client::proto::batch_result::Result as BatchOut;
use tokio::task::JoinSet;

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};
use crate::served::Served;

const REALM: &str = "default";
const CLIENTS: [usize; 2] = [1, 16];
const VALUE_BYTES: usize = 128;
const WARMUP_OPS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    CreateRemove,
    Put,
    Get,
    Cas,
    /// Reads of GET_BATCH keys in one round trip: a tabos batch of gets
    /// against an etcd transaction of gets.
    GetBatch,
}

/// Keys read by one [`Op::GetBatch`].
const GET_BATCH: usize = 16;

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::CreateRemove => "create_remove",
            Op::Put => "put",
            Op::Get => "get",
            Op::Cas => "cas",
            Op::GetBatch => "get16",
        }
    }
}

/// One client's connection to one of the two systems (boxed: the two
/// clients differ in size by hundreds of bytes).
enum Conn {
    Tabos(Box<tabos_client::Client>),
    Etcd(Box<etcd_client::Client>),
}

/// One benchmark client: its connection, its key, and the version it last
/// wrote (for cas).
struct Worker {
    conn: Conn,
    key: String,
    version: i64,
    n: u64,
}

fn value() -> Vec<u8> {
    vec![b'v'; VALUE_BYTES]
}

impl Worker {
    async fn prepare(&mut self) -> anyhow::Result<()> {
        let v = value();
        for j in 0..GET_BATCH {
            let key = format!("{}-b{j}", self.key);
            match &mut self.conn {
                Conn::Tabos(c) => {
                    c.name_set(REALM, &key, v.clone(), None, None).await?;
                }
                Conn::Etcd(c) => {
                    c.put(key, v.clone(), None).await?;
                }
            }
        }
        self.version = match &mut self.conn {
            Conn::Tabos(c) => c.name_set(REALM, &self.key, v, None, None).await?,
            Conn::Etcd(c) => {
                let r = c.put(self.key.as_str(), v, None).await?;
                r.header().context("no header")?.revision()
            }
        };
        Ok(())
    }

    async fn op(&mut self, op: Op) -> anyhow::Result<()> {
        self.n += 1;
        let v = value();
        match (&mut self.conn, op) {
            (Conn::Tabos(c), Op::CreateRemove) => {
                let path = format!("{}-{}", self.key, self.n);
                c.name_create(
                    REALM,
                    &path,
                    tabos_client::proto::NameKind::File,
                    v,
                    CreateOptions::default(),
                )
                .await?;
                c.name_remove(REALM, &path, None, None).await?;
            }
            (Conn::Tabos(c), Op::Put) => {
                c.name_set(REALM, &self.key, v, None, None).await?;
            }
            (Conn::Tabos(c), Op::Get) => {
                let e = c.name_get(REALM, &self.key).await?;
                anyhow::ensure!(e.data.len() == VALUE_BYTES);
            }
            (Conn::Tabos(c), Op::GetBatch) => {
                let calls = (0..GET_BATCH)
                    .map(|j| {
                        BatchCall::NamesGet(tabos_client::proto::NameRequest {
                            realm: REALM.into(),
                            path: format!("{}-b{j}", self.key),
                        })
                    })
                    .collect();
                for r in c.batch(calls).await? {
                    anyhow::ensure!(
                        matches!(r?, BatchOut::NamesGet(e) if e.data.len() == VALUE_BYTES)
                    );
                }
            }
            (Conn::Etcd(c), Op::GetBatch) => {
                let gets: Vec<TxnOp> = (0..GET_BATCH)
                    .map(|j| TxnOp::get(format!("{}-b{j}", self.key), None))
                    .collect();
                let r = c.txn(Txn::new().and_then(gets)).await?;
                anyhow::ensure!(r.op_responses().len() == GET_BATCH);
            }
            (Conn::Tabos(c), Op::Cas) => {
                self.version = c
                    .name_set(REALM, &self.key, v, Some(self.version), None)
                    .await?;
            }
            (Conn::Etcd(c), Op::CreateRemove) => {
                let key = format!("{}-{}", self.key, self.n);
                let txn = Txn::new()
                    .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key.as_str(), v, None)]);
                anyhow::ensure!(c.txn(txn).await?.succeeded(), "{key} existed");
                c.delete(key, None).await?;
            }
            (Conn::Etcd(c), Op::Put) => {
                c.put(self.key.as_str(), v, None).await?;
            }
            (Conn::Etcd(c), Op::Get) => {
                let r = c.get(self.key.as_str(), None).await?;
                anyhow::ensure!(r.kvs().first().map(|kv| kv.value().len()) == Some(VALUE_BYTES));
            }
            (Conn::Etcd(c), Op::Cas) => {
                let txn = Txn::new()
                    .when([Compare::mod_revision(
                        self.key.as_str(),
                        CompareOp::Equal,
                        self.version,
                    )])
                    .and_then([TxnOp::put(self.key.as_str(), v, None)]);
                let r = c.txn(txn).await?;
                anyhow::ensure!(r.succeeded(), "cas on {} refused", self.key);
                self.version = r.header().context("no header")?.revision();
            }
        }
        Ok(())
    }
}

/// What one system did on one operation at one client count.
#[derive(Debug, Clone)]
struct Measured {
    ops_per_s: f64,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Tabos,
    Etcd,
}

struct Endpoints {
    tabos: tabos_client::Endpoint,
    etcd: String,
}

async fn connect(system: System, ends: &Endpoints) -> anyhow::Result<Conn> {
    Ok(match system {
        System::Tabos => Conn::Tabos(Box::new(ends.tabos.connect().await?)),
        System::Etcd => Conn::Etcd(Box::new(
            etcd_client::Client::connect([format!("http://{}", ends.etcd)], None).await?,
        )),
    })
}

async fn run_op(
    system: System,
    ends: &Endpoints,
    op: Op,
    clients: usize,
    dur: Duration,
    tag: &str,
) -> anyhow::Result<Measured> {
    let mut set = JoinSet::new();
    let start_line = std::sync::Arc::new(tokio::sync::Barrier::new(clients));
    for i in 0..clients {
        let mut w = Worker {
            conn: connect(system, ends).await?,
            key: format!("/bench/{tag}-c{i}"),
            version: 0,
            n: 0,
        };
        let start_line = start_line.clone();
        set.spawn(async move {
            w.prepare().await?;
            for _ in 0..WARMUP_OPS {
                w.op(op).await?;
            }
            start_line.wait().await;
            let mut samples = Samples::default();
            let t0 = Instant::now();
            while t0.elapsed() < dur {
                let t = Instant::now();
                w.op(op).await?;
                samples.push(t.elapsed().as_nanos() as u64);
            }
            anyhow::Ok((samples, t0, Instant::now()))
        });
    }
    let mut done = Vec::new();
    while let Some(r) = set.join_next().await {
        done.push(r.context("a benchmark client panicked")??);
    }
    let mut runs = crate::measure::Runs::of(done);
    Ok(Measured {
        ops_per_s: runs.all.len() as f64 / runs.span_s,
        p50_us: runs.all.quantile_us(0.5),
        p99_us: runs.all.quantile_us(0.99),
    })
}

/// Watch latency: set, and time until the watcher has the event.
async fn watch_latency(system: System, ends: &Endpoints, n: usize) -> anyhow::Result<Samples> {
    let mut samples = Samples::with_capacity(n);
    match connect(system, ends).await? {
        Conn::Tabos(mut c) => {
            c.name_mkdir_all(REALM, "/bench/watched").await?;
            let mut watch = c
                .clone()
                .watch(REALM, "/bench/watched", WatchMode::Dir)
                .await?;
            anyhow::ensure!(
                watch.message().await?.context("watch ended")?.op()
                    == tabos_client::proto::WatchOp::Watching
            );
            for i in 0..WARMUP_OPS + n {
                let t0 = Instant::now();
                let set = c.name_set(REALM, "/bench/watched/k", value(), None, None);
                let seen = async {
                    let ev = watch.message().await?.context("watch ended")?;
                    anyhow::Ok((Instant::now(), ev))
                };
                let (set, seen) = tokio::join!(set, seen);
                let version = set?;
                let (at, ev) = seen?;
                anyhow::ensure!(ev.version == version, "watch out of step");
                if i >= WARMUP_OPS {
                    samples.push((at - t0).as_nanos() as u64);
                }
            }
        }
        Conn::Etcd(mut c) => {
            let opts = etcd_client::WatchOptions::new().with_prefix();
            let mut watch = c.watch("/bench/watched/", Some(opts)).await?;
            // The first response confirms the watch was created.
            let created = watch.message().await?.context("watch ended")?;
            anyhow::ensure!(created.created(), "etcd watch not created");
            for i in 0..WARMUP_OPS + n {
                let t0 = Instant::now();
                let mut c2 = c.clone();
                let set = async move { c2.put("/bench/watched/k", value(), None).await };
                let seen = async {
                    loop {
                        let r = watch.message().await?.context("watch ended")?;
                        if !r.events().is_empty() {
                            return anyhow::Ok(Instant::now());
                        }
                    }
                };
                let (set, seen) = tokio::join!(set, seen);
                set?;
                let at = seen?;
                if i >= WARMUP_OPS {
                    samples.push((at - t0).as_nanos() as u64);
                }
            }
        }
    }
    Ok(samples)
}

// ---- the two servers ----

/// The etcd binary, installed with apt-get when missing.
fn etcd_binary() -> anyhow::Result<std::path::PathBuf> {
    debian_binary(
        "names",
        "etcd-server",
        &["/usr/bin/etcd", "/usr/local/bin/etcd"],
    )
}

/// A peer's binary at one of `paths`, installed from Debian `package` with
/// apt-get when missing (saying so on stderr, as `suite`).
pub(crate) fn debian_binary(
    suite: &str,
    package: &str,
    paths: &[&str],
) -> anyhow::Result<std::path::PathBuf> {
    let find = || {
        paths
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.exists())
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    eprintln!(
        "{suite}: {} not found; installing Debian's {package} with apt-get",
        paths[0]
    );
    let install = || {
        std::process::Command::new("apt-get")
            .args(["install", "-y", "-q", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
    };
    if !install()?.success() {
        std::process::Command::new("apt-get")
            .args(["update", "-q"])
            .status()?;
        anyhow::ensure!(install()?.success(), "apt-get install {package} failed");
    }
    find().with_context(|| format!("{package} installed but no binary found at {paths:?}"))
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A single-member etcd on loopback; killed when dropped.
struct Etcd {
    child: std::process::Child,
    addr: String,
    version: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_etcd(dir: &std::path::Path) -> anyhow::Result<Etcd> {
    let bin = etcd_binary()?;
    let version = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    let (client, peer) = (free_port()?, free_port()?);
    let addr = format!("127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = std::process::Command::new(&bin)
        .args(["--name", "bench", "--data-dir"])
        .arg(dir.join("etcd"))
        .args([
            "--listen-client-urls",
            &format!("http://{addr}"),
            "--advertise-client-urls",
            &format!("http://{addr}"),
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &format!("bench={peer_url}"),
            "--log-level",
            "error",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("cannot start etcd")?;
    let etcd = Etcd {
        child,
        addr,
        version,
    };
    // Wait for the external process to serve: a bounded start-up wait.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = async {
            let mut c =
                etcd_client::Client::connect([format!("http://{}", etcd.addr)], None).await?;
            c.put("/bench/ready", "1", None).await?;
            anyhow::Ok(())
        };
        match ready.await {
            Ok(()) => return Ok(etcd),
            Err(e) if Instant::now() > deadline => {
                anyhow::bail!("etcd did not start serving within 30 s: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn start_tabos(dir: &std::path::Path) -> anyhow::Result<Served> {
    let settings = tabos_node::NodeSettings {
        node_id: "bench-names".into(),
        logs: dir.join("logs"),
        realm: REALM.into(),
        ..tabos_node::NodeSettings::defaults()
    };
    let config =
        tabos_store::Config::sqlite(dir.join("db")).with_durability(tabos_store::Durability::Full);
    let node = tabos_node::Node::open_with(&config, settings)?;
    let served = Served::start(node, Default::default()).await?;
    let mut c = served.addr.connect().await?;
    c.name_mkdir_all(REALM, "/bench").await?;
    Ok(served)
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let dir = tabos_store::testing::TempDir::new("bench-names");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dur = Duration::from_millis(if quick { 300 } else { 2_000 });
    let watch_n = if quick { 100 } else { 1_000 };
    let filter = std::env::var("TABOS_BENCH_FILTER").unwrap_or_default();
    let mut report = Report::new("names", quick);
    rt.block_on(async {
        let etcd = start_etcd(dir.path()).await?;
        let node = start_tabos(dir.path()).await?;
        let ends = Endpoints {
            tabos: node.addr.clone(),
            etcd: etcd.addr.clone(),
        };
        for op in [Op::CreateRemove, Op::Put, Op::Get, Op::Cas, Op::GetBatch] {
            for clients in CLIENTS {
                let name = format!("{}.{clients}c", op.name());
                if !name.contains(&filter) {
                    continue;
                }
                eprintln!("names: {name} ...");
                let tag = format!("{}{clients}", op.name());
                let t = run_op(System::Tabos, &ends, op, clients, dur, &tag).await?;
                let e = run_op(System::Etcd, &ends, op, clients, dur, &tag).await?;
                eprintln!(
                    "  ops/s tabos {:.0} etcd {:.0}; p50 us tabos {:.1} etcd {:.1}; p99 us tabos {:.1} etcd {:.1}",
                    t.ops_per_s, e.ops_per_s, t.p50_us, e.p50_us, t.p99_us, e.p99_us
                );
                // Issue 18's targets (get raised from 2×; put keeps its 3×,
                // stricter than the 2× at one client).
                let target = match op {
                    Op::Put => Some("ratio >= 3"),
                    Op::Get => Some("ratio >= 3"),
                    _ => None,
                };
                let mut f = Figure::new(
                    format!("{name}.ops_per_s"),
                    round(t.ops_per_s, 0),
                    "ops/s",
                    Better::Higher,
                )
                .peer("etcd", Some(round(e.ops_per_s, 0)))
                .runs(1, Stat::Rate);
                if let Some(tg) = target {
                    f = f.target(tg);
                }
                report.figures.push(f);
                for (q, stat, tv, ev) in [
                    ("p50", Stat::P50, t.p50_us, e.p50_us),
                    ("p99", Stat::P99, t.p99_us, e.p99_us),
                ] {
                    report.figures.push(
                        Figure::new(format!("{name}.{q}_us"), round(tv, 1), "us", Better::Lower)
                            .peer("etcd", Some(round(ev, 1)))
                            .runs(1, stat),
                    );
                }
            }
        }
        if "watch".contains(&filter) || filter.is_empty() {
            eprintln!("names: watch latency ...");
            let mut t = watch_latency(System::Tabos, &ends, watch_n).await?;
            let mut e = watch_latency(System::Etcd, &ends, watch_n).await?;
            for (q, stat, target) in [(0.5, Stat::P50, Some("ratio <= 1")), (0.99, Stat::P99, None)] {
                let label = if q == 0.5 { "p50" } else { "p99" };
                let mut f = Figure::new(
                    format!("watch.{label}_us"),
                    round(t.quantile_us(q), 1),
                    "us",
                    Better::Lower,
                )
                .peer("etcd", Some(round(e.quantile_us(q), 1)))
                .runs(1, stat)
                .note("from issuing a set to the watcher receiving its event");
                if let Some(tg) = target {
                    f = f.target(tg);
                }
                report.figures.push(f);
            }
        }
        report.notes.push(format!(
            "tabos: embedded node (SQLite, durability full: fsync per commit) in this process, \
             clients over loopback gRPC, one connection each; etcd: {} single member on loopback, \
             started by the benchmark, data in the same temporary directory ({}), linearizable \
             reads, via etcd-client 0.18; {} s per measurement after {WARMUP_OPS} warm-up ops per \
             client; values of {VALUE_BYTES} bytes; create_remove counts one create plus one remove \
             as one op; get16 is one round trip reading {GET_BATCH} keys (a tabos Batch call of \
             gets; an etcd Txn of gets), counted as one op",
            etcd.version,
            dir.path().display(),
            dur.as_secs_f64()
        ));
        node.stop().await?;
        drop(etcd);
        anyhow::Ok(())
    })?;
    Ok(report)
}
