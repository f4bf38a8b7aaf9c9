//! Suite `auth`: what credentials and their checks cost (issue 17, item 8).
//!
//! Two nodes in this process, alike in everything (embedded SQLite,
//! durability `off`, 2 partitions) but one: the first checks every
//! request's bearer credential (the interceptor hashes the token and looks
//! it up; every handler derives its realm and user from the principal),
//! the second is served with `ServeOptions { check_credentials: false }`,
//! its requests acting as an operator with no token sent or checked. Each
//! figure's peer is the unchecked node, measured in the same run, in
//! alternating rounds so that drift of the machine falls on both alike:
//!
//! * the median latency of a no-op RPC (`Node.Status`), one client;
//! * the throughput of a single-row write RPC (`Names.Set` of a distinct
//!   file per client) with 64 closed-loop clients.
//!
//! Targets (issue 17): checked / unchecked ≤ 1.05 for the latency and
//! ≥ 0.95 for the throughput. Also reported, without a peer: the cost of
//! one `Auth::check` in this process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tabos_client::Endpoint;

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};

const REALM: &str = "default";
const CLIENTS: usize = 64;

struct Sizes {
    /// Rounds each contestant gets, alternating.
    rounds: usize,
    /// No-op calls per round.
    calls: usize,
    /// Length of one throughput round.
    run: Duration,
}

/// A node of the suite: its API (and the same node through its local
/// socket) with the credential its clients send.
struct Node {
    endpoint: Endpoint,
    local: Endpoint,
    served: crate::served::Served,
    _dir: tabos_store::testing::TempDir,
}

async fn start(check: bool) -> anyhow::Result<Node> {
    let dir = tabos_store::testing::TempDir::new(if check { "bench-auth" } else { "bench-noauth" });
    let node = crate::served::node(&dir, if check { "checked" } else { "unchecked" })?;
    let socket = dir.path().join(tabos_node::LOCAL_SOCKET_NAME);
    let options = tabos_node::ServeOptions {
        check_credentials: check,
        local_socket: Some(tabos_node::LocalSocket::bind(&socket)?),
        ..Default::default()
    };
    let served = crate::served::Served::start(node, options).await?;
    // The unchecked node is sent no token at all (nothing to parse or
    // hash).
    let token = if check {
        served.addr.token.clone()
    } else {
        String::new()
    };
    Ok(Node {
        local: Endpoint::new(
            format!("{}{}", tabos_client::UNIX_SCHEME, socket.display()),
            token.clone(),
        ),
        endpoint: Endpoint::new(served.addr.addr.clone(), token),
        served,
        _dir: dir,
    })
}

/// One round of `n` no-op calls on one connection.
async fn noop_round(e: &Endpoint, n: usize, into: &mut Samples) -> anyhow::Result<()> {
    let mut c = e.connect().await?;
    c.status().await?; // the connection is up before timing
    for _ in 0..n {
        let t0 = Instant::now();
        c.status().await?;
        into.push(t0.elapsed().as_nanos() as u64);
    }
    Ok(())
}

/// One round of 64 closed-loop writers for `run`; returns writes/s.
async fn write_round(e: &Endpoint, tag: &str, run: Duration) -> anyhow::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let mut c = e.connect().await?;
        c.status().await?;
        clients.push(c);
    }
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, mut c) in clients.into_iter().enumerate() {
        let done = done.clone();
        let path = format!("/bench-auth/{tag}-{i}");
        set.spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < run {
                c.name_set(REALM, &path, n.to_le_bytes().to_vec(), None, None)
                    .await?;
                n += 1;
            }
            done.fetch_add(n, Ordering::Relaxed);
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let sizes = if quick {
        Sizes {
            rounds: 3,
            calls: 1_000,
            run: Duration::from_millis(1_500),
        }
    } else {
        Sizes {
            rounds: 7,
            calls: 5_000,
            run: Duration::from_secs(5),
        }
    };
    let mut report = Report::new("auth", quick);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let checked = start(true).await?;
        let unchecked = start(false).await?;
        for e in [&checked.endpoint, &unchecked.endpoint] {
            e.connect()
                .await?
                .name_mkdir_all(REALM, "/bench-auth")
                .await?;
        }

        // No-op latency: alternating rounds, every sample of each side
        // pooled, the median of each.
        let (mut with, mut without) = (Samples::default(), Samples::default());
        for r in 0..sizes.rounds {
            eprintln!("  no-op RPC, round {}/{}", r + 1, sizes.rounds);
            noop_round(&checked.endpoint, sizes.calls, &mut with).await?;
            noop_round(&unchecked.endpoint, sizes.calls, &mut without).await?;
        }
        let (w50, wo50) = (with.quantile_us(0.5), without.quantile_us(0.5));

        // The transport: the same calls on the checked node through its
        // local socket and over TCP loopback, alternating.
        let (mut unix, mut tcp) = (Samples::default(), Samples::default());
        for r in 0..sizes.rounds {
            eprintln!(
                "  no-op RPC, local socket vs TCP, round {}/{}",
                r + 1,
                sizes.rounds
            );
            noop_round(&checked.local, sizes.calls, &mut unix).await?;
            noop_round(&checked.endpoint, sizes.calls, &mut tcp).await?;
        }
        for (label, q, stat) in [("median_us", 0.5, Stat::P50), ("p99_us", 0.99, Stat::P99)] {
            report.figures.push(
                Figure::new(
                    format!("noop_rpc.1client.local_socket.{label}"),
                    round(unix.quantile_us(q), 2),
                    "us",
                    Better::Lower,
                )
                .peer(
                    "same node over TCP loopback",
                    Some(round(tcp.quantile_us(q), 2)),
                )
                .runs(sizes.rounds as u32, stat)
                .note(
                    "Node.Status through the node's Unix socket (what clients on its machine use)",
                ),
            );
        }
        report.figures.push(
            Figure::new(
                "noop_rpc.1client.median_us",
                round(w50, 2),
                "us",
                Better::Lower,
            )
            .peer("same node, credentials unchecked", Some(round(wo50, 2)))
            .runs(sizes.rounds as u32, Stat::P50)
            .target("ratio <= 1.05")
            .note(format!(
                "Node.Status over gRPC on loopback; runs: {} alternating rounds of {} \
                     calls each side; stat: median of all samples; p99 {:.1} vs {:.1} us",
                sizes.rounds,
                sizes.calls,
                with.quantile_us(0.99),
                without.quantile_us(0.99)
            )),
        );

        // Write throughput at 64 clients: alternating rounds, the median
        // round of each side.
        let (mut tw, mut two) = (Vec::new(), Vec::new());
        for r in 0..sizes.rounds {
            eprintln!("  64-client writes, round {}/{}", r + 1, sizes.rounds);
            tw.push(write_round(&checked.endpoint, &format!("r{r}"), sizes.run).await?);
            two.push(write_round(&unchecked.endpoint, &format!("r{r}"), sizes.run).await?);
        }
        report.figures.push(
            Figure::new(
                "names_set.64clients.ops_per_s",
                round(median(tw), 0),
                "ops/s",
                Better::Higher,
            )
            .peer(
                "same node, credentials unchecked",
                Some(round(median(two), 0)),
            )
            .runs(sizes.rounds as u32, Stat::MedianOfRuns)
            .target("ratio >= 0.95")
            .note(format!(
                "Names.Set of one file per client (one single-row write transaction each), \
                 64 closed-loop clients with a connection each, durability off; runs: {} \
                 alternating rounds of {} ms each side; stat: median round",
                sizes.rounds,
                sizes.run.as_millis()
            )),
        );

        for s in [checked, unchecked] {
            s.served.stop().await?;
        }
        Ok::<_, anyhow::Error>(())
    })?;

    // The check itself, in process: hash and look-up of a live token.
    let dir = tabos_store::testing::TempDir::new("bench-auth-check");
    let store = tabos_kernel::open(&tabos_store::Config::sqlite(dir.path()))?;
    let auth = tabos_node::auth::Auth::open(store.clone())?;
    let token = rt
        .block_on(auth.create(tabos_kernel::auth::Spec::operator("bench")))?
        .0
        .token;
    let n = if quick { 100_000 } else { 1_000_000 };
    let t0 = Instant::now();
    for _ in 0..n {
        std::hint::black_box(auth.check(std::hint::black_box(&token)));
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    report.figures.push(
        Figure::new("check.one_token_ns", round(ns, 1), "ns", Better::Lower)
            .runs(1, Stat::Mean)
            .note(format!(
                "Auth::check in process (SHA-256 of the token and a hash-map look-up); runs: 1 \
             of {n} calls; stat: mean"
            )),
    );
    Ok(report)
}
