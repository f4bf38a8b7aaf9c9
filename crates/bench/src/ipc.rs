//! Suite `ipc`: messaging through the Message table (issue 4; DBOS section
//! 4.3.3, Figures 6–8) against gRPC and raw TCP, in the same run.
//!
//! Workloads, each a loop of rounds timed end to end:
//! * ping-pong (Figure 6): a sender sends one message, its receiver replies;
//!   1 and 8 concurrent pairs; 64 B, 1 KB and 8 KB messages.
//! * ping20-pong20 (Figure 7): a sender sends 20 messages, its receiver
//!   replies to each; the round ends when all 20 replies are in.
//! * multicast (Figure 8): one sender sends a 64-byte message to 1, 10, 20
//!   or 40 receivers, each replies.
//!
//! Systems, all in this process over loopback:
//! * tabos through the Rust client: an embedded node (SQLite, durability
//!   `normal`); every sender and receiver has its own mailbox and its own
//!   connection — over the node's local socket (the local transport, what
//!   a client on the node's machine uses), and again over gRPC on TCP
//!   loopback (the `.over_tcp` figures); a round is one `Send` (a batch or a multicast: one
//!   transaction) and reading the replies from a `RecvStream`; a receiver
//!   replies to each batch it gets with one `Send`.
//! * tabos between wasm procs on that node: the shipped pinger and echo
//!   programs ([`tabos_sandbox::programs`]), using the `tabos.send` and
//!   `tabos.recv` host functions; round times are taken inside the pinger.
//! * gRPC (tonic, the peer): one echo server per receiver; a round is one
//!   unary call per message, the calls of a round issued concurrently on
//!   the sender's HTTP/2 connection to each receiver.
//! * gRPC streaming (for ping20 and multicast): the same echo servers,
//!   each sender holding one bidirectional call per receiver and writing a
//!   round's batch on it.
//! * raw TCP: one echo server per receiver, length-prefixed frames, one
//!   connection per sender and receiver, TCP_NODELAY.
//!
//! Throughput counts messages both ways (a round of ping-pong is 2).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_client::proto;
use tabos_sandbox::programs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};
use crate::served::Served;

/// The generated gRPC echo peer.
pub mod echo {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("benchecho");
}

const REALM: &str = "default";
const SIZES: [(usize, &str); 3] = [(64, "64B"), (1024, "1KB"), (8192, "8KB")];
const MULTICAST: [usize; 4] = [1, 10, 20, 40];
const WARMUP_ROUNDS: usize = 20;

/// One workload configuration.
#[derive(Debug, Clone, Copy)]
struct Workload {
    /// Concurrent senders, each with its own receivers.
    pairs: usize,
    /// Receivers per sender (more than one: a multicast).
    receivers: usize,
    /// Messages per receiver per round.
    burst: usize,
    bytes: usize,
}

impl Workload {
    fn msgs_per_round(&self) -> usize {
        2 * self.burst * self.receivers
    }
}

/// What one system did on one workload.
#[derive(Debug, Clone)]
struct Measured {
    median_us: f64,
    msgs_per_s: f64,
}

/// Round timing of one sender: warm-up rounds, then rounds until `dur`.
struct Rounds {
    i: usize,
    dur: Duration,
    start: Option<Instant>,
    t0: Instant,
    samples: Samples,
}

impl Rounds {
    fn new(dur: Duration) -> Rounds {
        Rounds {
            i: 0,
            dur,
            start: None,
            t0: Instant::now(),
            samples: Samples::default(),
        }
    }

    /// Whether to run another round; starts its clock.
    fn begin(&mut self) -> bool {
        let now = Instant::now();
        if self.i == WARMUP_ROUNDS {
            self.start = Some(now);
        }
        if let Some(s) = self.start {
            if now - s >= self.dur && self.samples.len() >= 5 {
                return false;
            }
        }
        self.t0 = now;
        true
    }

    fn end(&mut self) {
        if self.i >= WARMUP_ROUNDS {
            self.samples.push(self.t0.elapsed().as_nanos() as u64);
        }
        self.i += 1;
    }

    /// (samples, measured start, end)
    fn finish(self) -> (Samples, Instant, Instant) {
        let end = Instant::now();
        (self.samples, self.start.unwrap_or(end), end)
    }
}

/// Combines the senders' rounds: the median of every round, and messages
/// over the span from the first measured start to the last end.
fn combine(w: &Workload, runs: Vec<(Samples, Instant, Instant)>) -> Measured {
    let mut runs = crate::measure::Runs::of(runs);
    let rounds = runs.all.len();
    Measured {
        median_us: runs.all.quantile_us(0.5),
        msgs_per_s: (rounds * w.msgs_per_round()) as f64 / runs.span_s,
    }
}

async fn join_all<T: Send + 'static>(
    mut set: JoinSet<anyhow::Result<T>>,
) -> anyhow::Result<Vec<T>> {
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r.context("a benchmark task panicked")??);
    }
    Ok(out)
}

// ---- gRPC (tonic) ----

#[derive(Default)]
struct EchoServer;

/// The replies of one [`EchoServer::echo_stream`] call.
type EchoReplies =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<echo::Blob, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl echo::echo_server::Echo for EchoServer {
    async fn echo(
        &self,
        request: tonic::Request<echo::Blob>,
    ) -> Result<tonic::Response<echo::Blob>, tonic::Status> {
        Ok(tonic::Response::new(request.into_inner()))
    }

    type EchoStreamStream = EchoReplies;

    async fn echo_stream(
        &self,
        request: tonic::Request<tonic::Streaming<echo::Blob>>,
    ) -> Result<tonic::Response<EchoReplies>, tonic::Status> {
        // Every message comes back as it arrived: the stream is the echo.
        Ok(tonic::Response::new(Box::pin(request.into_inner())))
    }
}

/// Starts `n` echo servers; returns their addresses and a stop sender.
async fn grpc_servers(n: usize) -> anyhow::Result<(Vec<String>, tokio::sync::watch::Sender<bool>)> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut addrs = Vec::new();
    for _ in 0..n {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(listener.local_addr()?.to_string());
        let mut stopped = stopped.clone();
        tokio::spawn(
            tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(echo::echo_server::EchoServer::new(EchoServer))
                .serve_with_incoming_shutdown(tabos_node::incoming(listener), async move {
                    let _ = stopped.wait_for(|s| *s).await;
                }),
        );
    }
    Ok((addrs, stop))
}

/// A client of each echo server of `addrs`, each on its own connection.
async fn echo_clients(
    addrs: &[String],
) -> anyhow::Result<Vec<echo::echo_client::EchoClient<tonic::transport::Channel>>> {
    let mut clients = Vec::with_capacity(addrs.len());
    for a in addrs {
        let ch = tonic::transport::Channel::from_shared(format!("http://{a}"))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        clients.push(echo::echo_client::EchoClient::new(ch));
    }
    Ok(clients)
}

async fn grpc_run(w: Workload, dur: Duration) -> anyhow::Result<Measured> {
    let (addrs, stop) = grpc_servers(w.pairs * w.receivers).await?;
    let mut set = JoinSet::new();
    for p in 0..w.pairs {
        let mine = addrs[p * w.receivers..(p + 1) * w.receivers].to_vec();
        set.spawn(async move {
            let clients = echo_clients(&mine).await?;
            let payload = vec![7u8; w.bytes];
            let mut r = Rounds::new(dur);
            while r.begin() {
                let mut calls = JoinSet::new();
                for c in &clients {
                    for _ in 0..w.burst {
                        let mut c = c.clone();
                        let data = payload.clone();
                        calls.spawn(async move { c.echo(echo::Blob { data }).await });
                    }
                }
                while let Some(reply) = calls.join_next().await {
                    let reply = reply??.into_inner();
                    anyhow::ensure!(reply.data.len() == w.bytes);
                }
                r.end();
            }
            Ok(r.finish())
        });
    }
    let runs = join_all(set).await;
    let _ = stop.send(true);
    Ok(combine(&w, runs?))
}

/// The streaming gRPC peer: one long-lived bidirectional call per sender
/// and receiver; a round writes its messages to every receiver's call and
/// reads as many echoes back.
async fn grpc_stream_run(w: Workload, dur: Duration) -> anyhow::Result<Measured> {
    let (addrs, stop) = grpc_servers(w.pairs * w.receivers).await?;
    let mut set = JoinSet::new();
    for p in 0..w.pairs {
        let mine = addrs[p * w.receivers..(p + 1) * w.receivers].to_vec();
        set.spawn(async move {
            let mut calls = Vec::new();
            for mut client in echo_clients(&mine).await? {
                let (tx, rx) = tokio::sync::mpsc::channel::<echo::Blob>(w.burst.max(1) * 2);
                let replies = client
                    .echo_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
                    .await?
                    .into_inner();
                calls.push((tx, replies));
            }
            let payload = vec![7u8; w.bytes];
            let mut r = Rounds::new(dur);
            while r.begin() {
                for (tx, _) in &calls {
                    for _ in 0..w.burst {
                        tx.send(echo::Blob {
                            data: payload.clone(),
                        })
                        .await
                        .map_err(|_| anyhow::anyhow!("the echo stream closed"))?;
                    }
                }
                for (_, replies) in calls.iter_mut() {
                    for _ in 0..w.burst {
                        let reply = replies.message().await?.context("the echo stream ended")?;
                        anyhow::ensure!(reply.data.len() == w.bytes);
                    }
                }
                r.end();
            }
            Ok(r.finish())
        });
    }
    let runs = join_all(set).await;
    let _ = stop.send(true);
    Ok(combine(&w, runs?))
}

// ---- raw TCP ----

async fn tcp_servers(n: usize) -> anyhow::Result<(Vec<String>, JoinSet<()>)> {
    let mut addrs = Vec::new();
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(listener.local_addr()?.to_string());
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((mut s, _)) = listener.accept().await {
                let _ = s.set_nodelay(true);
                conns.spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let Ok(len) = s.read_u32_le().await else {
                            return;
                        };
                        buf.resize(len as usize, 0);
                        if s.read_exact(&mut buf).await.is_err() {
                            return;
                        }
                        let mut frame = Vec::with_capacity(4 + buf.len());
                        frame.extend_from_slice(&len.to_le_bytes());
                        frame.extend_from_slice(&buf);
                        if s.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
    }
    Ok((addrs, tasks))
}

async fn tcp_run(w: Workload, dur: Duration) -> anyhow::Result<Measured> {
    let (addrs, mut servers) = tcp_servers(w.pairs * w.receivers).await?;
    let mut set = JoinSet::new();
    for p in 0..w.pairs {
        let mine = addrs[p * w.receivers..(p + 1) * w.receivers].to_vec();
        set.spawn(async move {
            let mut conns = Vec::new();
            for a in &mine {
                let s = tokio::net::TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                conns.push(s);
            }
            // A round's frames to one receiver, written at once.
            let mut frames = Vec::new();
            for _ in 0..w.burst {
                frames.extend_from_slice(&(w.bytes as u32).to_le_bytes());
                frames.extend(std::iter::repeat_n(7u8, w.bytes));
            }
            let mut buf = vec![0u8; w.bytes];
            let mut r = Rounds::new(dur);
            while r.begin() {
                for c in conns.iter_mut() {
                    c.write_all(&frames).await?;
                }
                for c in conns.iter_mut() {
                    for _ in 0..w.burst {
                        let len = c.read_u32_le().await? as usize;
                        anyhow::ensure!(len == w.bytes);
                        c.read_exact(&mut buf).await?;
                    }
                }
                r.end();
            }
            Ok(r.finish())
        });
    }
    let runs = join_all(set).await;
    servers.abort_all();
    Ok(combine(&w, runs?))
}

// ---- tabos through the client ----

async fn tabos_client_run(
    addr: &tabos_client::Endpoint,
    tag: &str,
    w: Workload,
    dur: Duration,
) -> anyhow::Result<Measured> {
    let mut admin = addr.connect().await?;
    let mut echoes = JoinSet::new();
    let mut set = JoinSet::new();
    for p in 0..w.pairs {
        let me = format!("{tag}-s{p}");
        admin.create_mailbox(REALM, &me, 0, None).await?;
        let mut receivers = Vec::new();
        for k in 0..w.receivers {
            let name = format!("{tag}-r{p}.{k}");
            admin.create_mailbox(REALM, &name, 0, None).await?;
            receivers.push(name.clone());
            let addr = addr.clone();
            // A receiver: replies to each batch with one send.
            echoes.spawn(async move {
                let mut c = addr.connect().await?;
                let mut stream = c.recv_stream(REALM, &name, 0).await?;
                while let Some(batch) = stream.message().await? {
                    let replies = batch
                        .messages
                        .into_iter()
                        .map(|m| proto::Outgoing {
                            to: m.sender,
                            payload: m.payload,
                            message_id: String::new(),
                        })
                        .collect();
                    c.send_many(REALM, &name, replies).await?;
                }
                Ok::<_, anyhow::Error>(())
            });
        }
        let addr = addr.clone();
        set.spawn(async move {
            let mut c = addr.connect().await?;
            let mut stream = c.recv_stream(REALM, &me, 0).await?;
            let payload = vec![7u8; w.bytes];
            let round_msgs: Vec<proto::Outgoing> = (0..w.burst)
                .flat_map(|_| receivers.iter())
                .map(|to| proto::Outgoing {
                    to: to.clone(),
                    payload: payload.clone(),
                    message_id: String::new(),
                })
                .collect();
            let mut r = Rounds::new(dur);
            while r.begin() {
                c.send_many(REALM, &me, round_msgs.clone()).await?;
                let mut got = 0;
                while got < round_msgs.len() {
                    let batch = stream
                        .message()
                        .await?
                        .context("the receive stream ended")?;
                    got += batch.messages.len();
                }
                r.end();
            }
            Ok(r.finish())
        });
    }
    let runs = join_all(set).await;
    echoes.abort_all();
    Ok(combine(&w, runs?))
}

// ---- tabos between wasm procs ----

async fn tabos_wasm_run(
    addr: &tabos_client::Endpoint,
    dir: &Path,
    tag: &str,
    w: Workload,
    rounds: u32,
) -> anyhow::Result<Measured> {
    let mut c = addr.connect().await?;
    let echo_path = dir.join("echo.wat");
    if !echo_path.exists() {
        std::fs::write(&echo_path, programs::echo())?;
    }
    let proc_of = |pid: String, program: &Path| proto::ProcDescriptor {
        pid,
        kind: proto::ProcKind::Wasm.into(),
        program: program.display().to_string(),
        ..Default::default()
    };
    let mut echoes = Vec::new();
    let mut pingers = Vec::new();
    for p in 0..w.pairs {
        let to: Vec<String> = (0..w.receivers)
            .map(|k| format!("{tag}-e{p}.{k}"))
            .collect();
        echoes.extend(to.iter().map(|pid| proc_of(pid.clone(), &echo_path)));
        let spec = programs::Ping {
            to: to.iter().map(|pid| format!("proc/{pid}")).collect(),
            burst: w.burst as u32,
            rounds: rounds + WARMUP_ROUNDS as u32,
            payload_bytes: w.bytes,
        };
        let path = dir.join(format!("{tag}-ping{p}.wat"));
        std::fs::write(&path, programs::ping(&spec).map_err(anyhow::Error::msg)?)?;
        pingers.push(proc_of(format!("{tag}-p{p}"), &path));
    }
    // Echo servers first, so that the pingers' first sends find them.
    c.spawn_burst(REALM, echoes.clone()).await?;
    let started = Instant::now();
    c.spawn_burst(REALM, pingers.clone()).await?;
    let mut all = Samples::default();
    let mut ended = started;
    for p in &pingers {
        let s = c.wait_exit(REALM, &p.pid).await?;
        ended = Instant::now();
        anyhow::ensure!(s.exit_status == Some(0), "wasm pinger {}: {s:?}", p.pid);
        let out = c.logs(REALM, &p.pid, proto::LogStream::Stdout).await?;
        let times = programs::ping_times(&out.data);
        anyhow::ensure!(times.len() == (rounds as usize + WARMUP_ROUNDS));
        for &t in &times[WARMUP_ROUNDS..] {
            all.push(t);
        }
    }
    for e in &echoes {
        c.wait_exit(REALM, &e.pid).await?;
    }
    // Wall-clock throughput, as the client measures it: every message of
    // every round (warm-up included) over the time from spawning the
    // pingers to the last one's exit — their start-up counts against them.
    let msgs = (w.pairs * (rounds as usize + WARMUP_ROUNDS) * w.msgs_per_round()) as f64;
    Ok(Measured {
        median_us: all.quantile_us(0.5),
        msgs_per_s: msgs / (ended - started).as_secs_f64(),
    })
}

// ---- the suite ----

/// The suite's node, and the same node through its local socket (what
/// clients on its machine use: the local transport).
async fn start_node(dir: &Path) -> anyhow::Result<(Served, tabos_client::Endpoint)> {
    let settings = tabos_node::NodeSettings {
        node_id: "bench-ipc".into(),
        logs: dir.join("logs"),
        realm: REALM.into(),
        // Admission only: room for every wasm proc of the widest workload.
        cores: 256,
        // The echo and ping modules are written there.
        program_dirs: vec![dir.to_path_buf()],
        ..tabos_node::NodeSettings::defaults()
    };
    let node = tabos_node::Node::open_with(&tabos_store::Config::sqlite(dir.join("db")), settings)?;
    let socket = dir.join(tabos_node::LOCAL_SOCKET_NAME);
    let options = tabos_node::ServeOptions {
        local_socket: Some(tabos_node::LocalSocket::bind(&socket)?),
        ..Default::default()
    };
    let served = Served::start(node, options).await?;
    let local = tabos_client::Endpoint::new(
        format!("{}{}", tabos_client::UNIX_SCHEME, socket.display()),
        served.addr.token.clone(),
    );
    Ok((served, local))
}

/// One row of results: the four systems on one workload.
struct Row {
    name: String,
    w: Workload,
    /// Clients over the local transport.
    tabos: Measured,
    /// The same clients over gRPC on TCP loopback.
    tabos_tcp: Measured,
    wasm: Measured,
    grpc: Measured,
    /// The streaming gRPC peer, for workloads of more than one message a
    /// round (ping20, multicast).
    grpc_stream: Option<Measured>,
    tcp: Measured,
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let dir = tabos_store::testing::TempDir::new("bench-ipc");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dur = Duration::from_millis(if quick { 200 } else { 1_500 });
    let mut workloads = Vec::new();
    for (bytes, size) in SIZES {
        for pairs in [1, 8] {
            let plural = if pairs == 1 { "pair" } else { "pairs" };
            workloads.push((
                format!("pingpong.{size}.{pairs}{plural}"),
                Workload {
                    pairs,
                    receivers: 1,
                    burst: 1,
                    bytes,
                },
            ));
            workloads.push((
                format!("ping20.{size}.{pairs}{plural}"),
                Workload {
                    pairs,
                    receivers: 1,
                    burst: 20,
                    bytes,
                },
            ));
        }
    }
    for k in MULTICAST {
        workloads.push((
            format!("multicast.64B.{k}recv"),
            Workload {
                pairs: 1,
                receivers: k,
                burst: 1,
                bytes: 64,
            },
        ));
    }
    let filter = std::env::var("TABOS_BENCH_FILTER").unwrap_or_default();
    let rows = rt.block_on(async {
        let (node, local) = start_node(dir.path()).await?;
        let mut rows = Vec::new();
        for (i, (name, w)) in workloads.into_iter().enumerate() {
            if !name.contains(&filter) {
                continue;
            }
            let tag = format!("w{i}");
            eprintln!("ipc: {name} ...");
            let tabos = tabos_client_run(&local, &tag, w, dur).await?;
            let tabos_tcp = tabos_client_run(&node.addr, &format!("{tag}t"), w, dur).await?;
            // Rounds for about `dur` at the client's pace, within bounds.
            let per_round_us = tabos.median_us.max(5.0) / 3.0;
            let rounds = ((dur.as_secs_f64() * 1e6 / per_round_us) as u32).clamp(50, 20_000);
            let wasm = tabos_wasm_run(&node.addr, dir.path(), &tag, w, rounds).await?;
            let grpc = grpc_run(w, dur).await?;
            let grpc_stream = if w.burst * w.receivers > 1 {
                Some(grpc_stream_run(w, dur).await?)
            } else {
                None
            };
            let tcp = tcp_run(w, dur).await?;
            eprintln!(
                "  median us: tabos {:.1} (over TCP {:.1}) wasm {:.1} grpc {:.1} tcp {:.1}; msgs/s: tabos {:.0} (over TCP {:.0}) wasm {:.0} grpc {:.0} tcp {:.0}",
                tabos.median_us, tabos_tcp.median_us, wasm.median_us, grpc.median_us, tcp.median_us,
                tabos.msgs_per_s, tabos_tcp.msgs_per_s, wasm.msgs_per_s, grpc.msgs_per_s, tcp.msgs_per_s
            );
            rows.push(Row { name, w, tabos, tabos_tcp, wasm, grpc, grpc_stream, tcp });
        }
        node.stop().await?;
        Ok::<_, anyhow::Error>(rows)
    })?;

    let mut report = Report::new("ipc", quick);
    for r in rows {
        let targets = |metric: &str| -> Option<&'static str> {
            match (r.name.split('.').next(), metric) {
                // Issue 40: a client's ping-pong within tonic's unary call.
                (Some("pingpong"), "median_us") => Some("ratio <= 1"),
                (Some("ping20"), "msgs_per_s") => Some("ratio >= 2"),
                (Some("multicast"), "msgs_per_s") if r.w.receivers == 40 => Some("ratio >= 2"),
                _ => None,
            }
        };
        for (metric, unit, better, stat) in [
            ("median_us", "us", Better::Lower, Stat::P50),
            ("msgs_per_s", "msgs/s", Better::Higher, Stat::Rate),
        ] {
            let pick = |m: &Measured| match metric {
                "median_us" => round(m.median_us, 1),
                _ => round(m.msgs_per_s, 0),
            };
            let mut f = Figure::new(format!("{}.{metric}", r.name), pick(&r.tabos), unit, better)
                .peer("grpc-tonic", Some(pick(&r.grpc)))
                .runs(1, stat);
            if let Some(t) = targets(metric) {
                f = f.target(t);
            }
            report.figures.push(f);
            report.figures.push(
                Figure::new(
                    format!("{}.{metric}.over_tcp", r.name),
                    pick(&r.tabos_tcp),
                    unit,
                    better,
                )
                .peer("grpc-tonic", Some(pick(&r.grpc)))
                .runs(1, stat)
                .note("the same tabos clients over gRPC on TCP loopback"),
            );
            if let Some(stream) = &r.grpc_stream {
                report.figures.push(
                    Figure::new(
                        format!("{}.{metric}.vs_stream", r.name),
                        pick(&r.tabos),
                        unit,
                        better,
                    )
                    .peer("grpc-tonic-stream", Some(pick(stream)))
                    .runs(1, stat),
                );
            }
            let mut f = Figure::new(
                format!("{}.{metric}.wasm", r.name),
                pick(&r.wasm),
                unit,
                better,
            )
            .peer("grpc-tonic", Some(pick(&r.grpc)))
            .runs(1, stat);
            if r.name == "pingpong.64B.1pair" && metric == "median_us" {
                f = f.target("value <= 50");
            }
            report.figures.push(f);
            report.figures.push(
                Figure::new(
                    format!("{}.{metric}.vs_tcp", r.name),
                    pick(&r.tabos),
                    unit,
                    better,
                )
                .peer("tcp-loopback", Some(pick(&r.tcp)))
                .runs(1, stat),
            );
        }
    }
    report.notes.push(format!(
        "tabos: embedded node (SQLite, durability normal) in this process, clients over its local socket \
         (the local transport; .over_tcp: the same clients over gRPC on TCP loopback); \
         .wasm figures: wasm procs on that node using the tabos.send/recv host calls (msgs/s wall-clock, \
         from spawning the pingers to their exit); peers: tonic {} unary echo servers (grpc-tonic: one \
         call per message), the same servers streaming (grpc-tonic-stream: one long-lived bidirectional \
         call per sender and receiver, a round's batch written on it) and raw TCP echo servers, all in \
         this process; {} s per measurement",
        "0.14",
        dur.as_secs_f64()
    ));
    Ok(report)
}
