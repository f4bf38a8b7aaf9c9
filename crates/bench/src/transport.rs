//! Suite `transport`: what one call to a node on the same machine costs
//! (issue 40, item 1).
//!
//! One node (embedded SQLite, durability `off`, credentials checked) with
//! its local socket; one client on its own thread and runtime, as a
//! process on the machine would be. The no-op call (`Tokens.WhoAmI`: the
//! credential checked, the caller made, its description sent back; no
//! database, no file read) is timed one at a time, in alternating rounds of:
//!
//! * the local transport ([`tabos_client::local`]) on the local socket —
//!   what a `unix:` address gets;
//! * gRPC (HTTP/2) on the same socket — what it got before, and what a
//!   gRPC client of another language gets;
//! * gRPC over TCP loopback;
//! * the floor: a raw round trip of the same bytes over a Unix socket
//!   between two threads doing blocking reads and writes and nothing else
//!   (no node, no decoding: the fastest honest program for one request and
//!   one answer across a Unix socket).
//!
//! Target: the local transport's median ≤ 15 µs.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};

struct Sizes {
    rounds: usize,
    calls: usize,
}

/// The three ways a client reaches the node.
#[derive(Clone, Copy)]
enum Way {
    Local,
    GrpcUnix,
    Tcp,
}

/// One round of `n` no-op calls on one new connection, on the client's
/// own runtime.
async fn noop_round(
    way: Way,
    tcp: &str,
    socket: &std::path::Path,
    token: &str,
    n: usize,
    into: &mut Samples,
) -> anyhow::Result<()> {
    let mut c = match way {
        Way::Local => {
            let addr = format!("{}{}", tabos_client::UNIX_SCHEME, socket.display());
            tabos_client::Client::connect(&addr, token).await?
        }
        Way::GrpcUnix => tabos_client::Client::connect_grpc_unix(socket, token).await?,
        Way::Tcp => tabos_client::Client::connect(tcp, token).await?,
    };
    for _ in 0..100 {
        c.who_am_i().await?; // warm: connected, signed in, caches filled
    }
    for _ in 0..n {
        let t0 = Instant::now();
        c.who_am_i().await?;
        into.push(t0.elapsed().as_nanos() as u64);
    }
    Ok(())
}

/// The floor: `n` round trips of `bytes` bytes each way over a Unix
/// socket pair, an echoing thread on the other end.
fn raw_round(bytes: usize, n: usize, into: &mut Samples) -> anyhow::Result<()> {
    let (mut a, mut b) = std::os::unix::net::UnixStream::pair()?;
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; bytes];
        while b.read_exact(&mut buf).is_ok() {
            if b.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut buf = vec![7u8; bytes];
    for i in 0..n + 100 {
        let t0 = Instant::now();
        a.write_all(&buf)?;
        a.read_exact(&mut buf)?;
        if i >= 100 {
            into.push(t0.elapsed().as_nanos() as u64);
        }
    }
    drop(a);
    let _ = echo.join();
    Ok(())
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let sizes = if quick {
        Sizes {
            rounds: 3,
            calls: 2_000,
        }
    } else {
        Sizes {
            rounds: 7,
            calls: 10_000,
        }
    };
    let mut report = Report::new("transport", quick);
    let dir = tabos_store::testing::TempDir::new("bench-transport");
    let node_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let socket = dir.path().join(tabos_node::LOCAL_SOCKET_NAME);
    let (tcp, token, stop, served) = node_rt.block_on(async {
        let settings = tabos_node::NodeSettings {
            node_id: "transport".into(),
            logs: dir.path().join("logs"),
            ..tabos_node::NodeSettings::defaults()
        };
        let config = tabos_store::Config::sqlite(dir.path().join("db"))
            .with_partitions(2)
            .with_durability(tabos_store::Durability::Off);
        let node = tabos_node::Node::open_with(&config, settings)?;
        let token = node.operator_credential("bench transport").await?.token;
        let listener = tabos_node::bind("127.0.0.1:0").await?;
        let tcp = tabos_node::local_addr(&listener)
            .context("no local address")?
            .to_string();
        let local = tabos_node::LocalSocket::bind(&socket)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(tabos_node::serve_with(
            node,
            listener,
            async {
                let _ = stopped.await;
            },
            tabos_node::ServeOptions {
                local_socket: Some(local),
                ..Default::default()
            },
        ));
        Ok::<_, anyhow::Error>((tcp, token, stop, served))
    })?;

    // The client: a thread and a runtime of its own.
    let (socket2, tcp2, token2) = (socket.clone(), tcp.clone(), token.clone());
    let rounds = sizes.rounds;
    let calls = sizes.calls;
    let measured = std::thread::spawn(move || -> anyhow::Result<[Samples; 3]> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut s: [Samples; 3] = Default::default();
        rt.block_on(async {
            for r in 0..rounds {
                eprintln!("  no-op call, round {}/{rounds}", r + 1);
                for (i, way) in [Way::Local, Way::GrpcUnix, Way::Tcp]
                    .into_iter()
                    .enumerate()
                {
                    noop_round(way, &tcp2, &socket2, &token2, calls, &mut s[i]).await?;
                }
            }
            Ok::<_, anyhow::Error>(())
        })?;
        Ok(s)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the client thread panicked"))??;
    let [mut local, mut grpc_unix, mut tcp_s] = measured;

    // The floor, in the same rounds' count: a request and an answer of
    // the local transport's sizes for this call.
    let mut raw = Samples::default();
    for _ in 0..sizes.rounds {
        raw_round(64, sizes.calls, &mut raw)?;
    }

    let note = format!(
        "Tokens.WhoAmI, one call at a time, one client thread with its own runtime, node on a \
         2-thread runtime in the same process, credentials checked; runs: {} alternating \
         rounds of {} calls each way; stat: quantile of all samples. Floor: raw Unix-socket \
         round trip of 64 bytes between two blocking threads: {:.1} us median",
        sizes.rounds,
        sizes.calls,
        raw.quantile_us(0.5)
    );
    for (label, q, stat) in [("median_us", 0.5, Stat::P50), ("p99_us", 0.99, Stat::P99)] {
        let mut f = Figure::new(
            format!("noop_call.local_transport.{label}"),
            round(local.quantile_us(q), 2),
            "us",
            Better::Lower,
        )
        .peer(
            "gRPC (HTTP/2) on the same Unix socket",
            Some(round(grpc_unix.quantile_us(q), 2)),
        )
        .runs(sizes.rounds as u32, stat)
        .note(note.clone());
        if q == 0.5 {
            f = f.target("<= 15 us");
        }
        report.figures.push(f);
        report.figures.push(
            Figure::new(
                format!("noop_call.grpc_tcp.{label}"),
                round(tcp_s.quantile_us(q), 2),
                "us",
                Better::Lower,
            )
            .peer("the local transport", Some(round(local.quantile_us(q), 2)))
            .runs(sizes.rounds as u32, stat)
            .note("the same calls over gRPC on TCP loopback (remote clients' way)"),
        );
        report.figures.push(
            Figure::new(
                format!("raw_unix_round_trip.{label}"),
                round(raw.quantile_us(q), 2),
                "us",
                Better::Lower,
            )
            .runs(sizes.rounds as u32, stat)
            .note("the floor: 64 bytes each way, two threads, blocking reads and writes"),
        );
    }

    node_rt.block_on(async {
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(30), served)
            .await
            .context("the node did not stop")???;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(report)
}
