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
//! * the floors: a raw round trip of the same bytes over a Unix socket
//!   between two threads doing blocking reads and writes and nothing else
//!   (no node, no decoding: the fastest honest program for one request and
//!   one answer across a Unix socket), with the two threads pinned to one
//!   core and to two — a client and its node on different cores pay the
//!   second, a wake-up of the other core per message, which on a virtual
//!   machine costs tens of microseconds; and on two cores with both
//!   threads spinning on non-blocking reads instead of sleeping (no wake
//!   at all: the fastest way across cores, at a core each while waiting —
//!   the local transport spins too, for at most
//!   [`tabos_client::local::SPIN_MAX`] after each write).
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

/// Pins the calling thread to `core`; `false` when it cannot be.
fn pin(core: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set; pid 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Lets the calling thread run on every core again.
fn unpin() {
    // SAFETY: as in `pin`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut set);
        }
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The floor: `n` round trips of `bytes` bytes each way over a Unix
/// socket pair, an echoing thread on the other end; the two threads on
/// cores `(a, b)` (the same core: a switch on one core per message;
/// two: a wake-up of the other core per message, what a client and a
/// node on different cores pay).
fn raw_round(
    bytes: usize,
    n: usize,
    (a, b): (usize, usize),
    spin: bool,
    into: &mut Samples,
) -> anyhow::Result<()> {
    let (mut near, mut far) = std::os::unix::net::UnixStream::pair()?;
    near.set_nonblocking(spin)?;
    far.set_nonblocking(spin)?;
    let echo = std::thread::spawn(move || {
        pin(b);
        let mut buf = vec![0u8; bytes];
        while read_all(&mut far, &mut buf).is_ok() {
            if far.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let pinned = pin(a);
    let mut buf = vec![7u8; bytes];
    let mut run = || -> anyhow::Result<()> {
        for i in 0..n + 100 {
            let t0 = Instant::now();
            near.write_all(&buf)?;
            read_all(&mut near, &mut buf)?;
            if i >= 100 {
                into.push(t0.elapsed().as_nanos() as u64);
            }
        }
        Ok(())
    };
    let r = run();
    if pinned {
        unpin();
    }
    drop(near);
    let _ = echo.join();
    r
}

/// `read_exact`, spinning while a non-blocking socket has nothing (64
/// bytes always fit a socket's buffer, so writes never wait).
fn read_all(s: &mut std::os::unix::net::UnixStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
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
    let served = node_rt.block_on(async {
        let node = crate::served::node(&dir, "transport")?;
        let options = tabos_node::ServeOptions {
            local_socket: Some(tabos_node::LocalSocket::bind(&socket)?),
            ..Default::default()
        };
        crate::served::Served::start(node, options).await
    })?;
    let (tcp, token) = (served.addr.addr.clone(), served.addr.token.clone());

    // The client: a thread and a runtime of its own.
    let (socket2, tcp2, token2) = (socket.clone(), tcp.clone(), token.clone());
    let rounds = sizes.rounds;
    let calls = sizes.calls;
    let two_cores = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let measured = std::thread::spawn(move || -> anyhow::Result<[Samples; 6]> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut s: [Samples; 6] = Default::default();
        rt.block_on(async {
            for r in 0..rounds {
                eprintln!("  no-op call, round {}/{rounds}", r + 1);
                for (i, way) in [Way::Local, Way::GrpcUnix, Way::Tcp]
                    .into_iter()
                    .enumerate()
                {
                    noop_round(way, &tcp2, &socket2, &token2, calls, &mut s[i]).await?;
                }
                // The floor in the same rounds, from the same thread, the
                // node idle meanwhile: a request and an answer about the
                // local transport's sizes for this call.
                raw_round(64, calls, (0, 0), false, &mut s[3])?;
                if two_cores {
                    raw_round(64, calls, (0, 1), false, &mut s[4])?;
                    raw_round(64, calls, (0, 1), true, &mut s[5])?;
                }
            }
            Ok::<_, anyhow::Error>(())
        })?;
        Ok(s)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the client thread panicked"))??;
    let [mut local, mut grpc_unix, mut tcp_s, mut raw, mut raw_cross, mut raw_spin] = measured;

    let cross = if two_cores {
        format!(
            "{:.1} us with the two threads on two cores (a wake-up of the other core per \
             message, what a client and a node on different cores pay), {:.1} us on two \
             cores with both spinning on non-blocking reads",
            raw_cross.quantile_us(0.5),
            raw_spin.quantile_us(0.5)
        )
    } else {
        "one core only: no cross-core floor".to_string()
    };
    let note = format!(
        "Tokens.WhoAmI, one call at a time, one client thread with its own runtime, node on a \
         2-thread runtime in the same process, credentials checked; runs: {} alternating \
         rounds of {} calls each way and of the floors; stat: quantile of all samples. \
         Floors, a raw Unix-socket round trip of 64 bytes between two blocking threads: \
         {:.1} us median with both threads on one core, {cross}",
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
            f = f.target("value <= 15");
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
        // The floors, measured in the same rounds.
        let mut floors = vec![(
            "one_core",
            &mut raw,
            "the floor: 64 bytes each way, two threads pinned to one core, blocking reads and \
             writes",
        )];
        if two_cores {
            floors.push((
                "two_cores",
                &mut raw_cross,
                "the floor across cores: 64 bytes each way, the two threads pinned to two \
                 cores, blocking reads and writes",
            ));
            floors.push((
                "two_cores_spinning",
                &mut raw_spin,
                "the floor across cores without a wake: 64 bytes each way, the two threads \
                 pinned to two cores, each spinning on non-blocking reads",
            ));
        }
        for (name, samples, note) in floors {
            report.figures.push(
                Figure::new(
                    format!("raw_unix_round_trip.{name}.{label}"),
                    round(samples.quantile_us(q), 2),
                    "us",
                    Better::Lower,
                )
                .runs(sizes.rounds as u32, stat)
                .note(note),
            );
        }
    }

    node_rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), served.stop())
            .await
            .context("the node did not stop")?
    })?;
    Ok(report)
}
