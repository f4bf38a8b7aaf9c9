//! `tabos-bench fair` (issue 36, item 1): what a noisy neighbour costs a
//! quiet realm on the same partition.
//!
//! One `tabos up` node with one partition, so that two realms must share
//! it: realm `noisy` has [`NOISY_CLIENTS`] clients calling a JavaScript
//! procedure back to back; realm `quiet` sends a message, puts a name and
//! calls a no-op procedure, one at a time, and its p50 and p99 of each are
//! measured — alone first (the floor: the same operations with no
//! neighbour), then beside the noisy realm. The noisy procedure is one of
//! [`NOISES`]: a spin of [`SPIN_MS`] (`noisy`), or a write followed by the
//! same spin (`noisy_writer`: on SQLite it holds the partition's write lock
//! until it is stopped at `WRITE_HOLD_MAX`, so each of its calls fails).
//! Run on the embedded SQLite (one writer per partition) and on PostgreSQL
//! (a pool of connections), each node started afresh.
//!
//! Target: p99 beside the neighbour ≤ 50 ms for each operation.

use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_client::procedures::ProcedureLimits;
use tabos_client::Client;
use tabos_store::pg_cluster::{ClusterOptions, TempCluster};

use crate::elastic::start_node;
use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};

/// Clients of the noisy realm, each calling the spinning procedure back to
/// back.
const NOISY_CLIENTS: usize = 16;
/// How long each of the noisy realm's calls spins.
const SPIN_MS: u64 = 900;
/// The spinning procedure's deadline: the most a procedure may have.
const SPIN_TIMEOUT_MS: u32 = 1_000;
/// The quiet realm's target p99 beside the noisy one: 50 ms.
const TARGET_P99: &str = "value <= 50000";

const SPIN_JS: &str = "function main(ms) { const end = Date.now() + Number(ms); \
                       while (Date.now() < end) {} return ''; }";
const WRITE_SPIN_JS: &str = "function main(ms) { tabos.put('noise', ms); \
                             const end = Date.now() + Number(ms); \
                             while (Date.now() < end) {} return ''; }";
/// The noisy neighbours: the figures' name, and its procedure.
const NOISES: [(&str, &str); 2] = [("noisy", SPIN_JS), ("noisy_writer", WRITE_SPIN_JS)];
const NOOP_JS: &str = "function main(a) { return a; }";

/// The quiet realm's operations.
const OPS: [&str; 3] = ["send", "put", "call"];

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("fair", quick);
    let exe = crate::tabos_exe()?;
    let samples = if quick { 20 } else { 100 };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    report.notes.push(format!(
        "one node with one partition on this {cpus}-core machine; the noisy realm's \
         {NOISY_CLIENTS} clients call a {SPIN_MS} ms JavaScript spin back to back (noisy_writer: \
         a put first, then the spin); the quiet realm's {samples} calls of each operation run \
         one at a time, alone and then beside it"
    ));
    for backend in ["sqlite", "postgres"] {
        eprintln!("fair: {backend}");
        let dir = tabos_store::testing::TempDir::new("bench-fair");
        let pg = if backend == "postgres" {
            Some(TempCluster::start(&ClusterOptions::default()).context("the suite's PostgreSQL")?)
        } else {
            None
        };
        for (noise, code) in NOISES {
            let mut args: Vec<String> = [
                "--partitions",
                "1",
                "--pg-listen",
                "none",
                "--http-listen",
                "none",
                "--no-context",
            ]
            .map(String::from)
            .to_vec();
            if let Some(pg) = &pg {
                // A database of its own: each neighbour meets a fresh node.
                args.extend([
                    "--db".to_string(),
                    pg.create_database(&format!("tabos_{noise}"))?,
                ]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut node = start_node(&exe, &args, &dir.path().join(noise))?;
            let rt = tokio::runtime::Runtime::new()?;
            let measured = rt.block_on(measure(&node.addr, &node.token, code, samples));
            node.kill9();
            let (alone, beside) = measured.with_context(|| format!("on {backend}, {noise}"))?;
            for (op, (mut a, mut b)) in OPS.iter().zip(alone.into_iter().zip(beside)) {
                let name = |stat: &str| format!("{backend}.quiet_{op}_beside_{noise}.{stat}_us");
                report.figures.push(
                    Figure::new(
                        name("p99"),
                        round(b.quantile_us(0.99), 1),
                        "us",
                        Better::Lower,
                    )
                    .runs(1, Stat::P99)
                    .peer("the same, alone", Some(round(a.quantile_us(0.99), 1)))
                    .target(TARGET_P99),
                );
                report.figures.push(
                    Figure::new(
                        name("p50"),
                        round(b.quantile_us(0.5), 1),
                        "us",
                        Better::Lower,
                    )
                    .runs(1, Stat::P50)
                    .peer("the same, alone", Some(round(a.quantile_us(0.5), 1))),
                );
            }
        }
    }
    Ok(report)
}

/// The quiet realm's samples of each of [`OPS`], alone and beside the noisy
/// realm.
async fn measure(
    addr: &str,
    token: &str,
    noise: &str,
    samples: usize,
) -> anyhow::Result<(Vec<Samples>, Vec<Samples>)> {
    let mut op = Client::connect(addr, token).await?;
    let noisy_token = op
        .create_realm("noisy", tabos_client::proto::Scheduler::Fifo)
        .await?
        .admin_token;
    let quiet_token = op
        .create_realm("quiet", tabos_client::proto::Scheduler::Fifo)
        .await?
        .admin_token;
    let mut noisy = Client::connect(addr, &noisy_token).await?;
    let limits = ProcedureLimits {
        timeout_ms: SPIN_TIMEOUT_MS,
        ..ProcedureLimits::default()
    };
    noisy
        .procedure_install("", "spin", "js", noise.into(), limits)
        .await?;
    let mut quiet = Client::connect(addr, &quiet_token).await?;
    quiet
        .procedure_install("", "noop", "js", NOOP_JS.into(), ProcedureLimits::default())
        .await?;
    quiet.create_mailbox("", "inbox", 0, None).await?;

    let alone = quiet_ops(&mut quiet, samples).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut spinners = Vec::new();
    for _ in 0..NOISY_CLIENTS {
        let mut c = Client::connect(addr, &noisy_token).await?;
        let stop = stop.clone();
        spinners.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // The writer's calls fail (stopped for holding the write
                // lock): that is its noise; any other failure is not.
                let called = c
                    .procedure_call("", "spin", SPIN_MS.to_string().into_bytes())
                    .await;
                if let Err(e) = called {
                    anyhow::ensure!(e.to_string().contains("write lock"), "{e}");
                }
            }
            anyhow::Ok(())
        }));
    }
    // Every noisy client has a call queued or running.
    tokio::time::sleep(Duration::from_millis(2 * SPIN_MS)).await;
    let beside = quiet_ops(&mut quiet, samples).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.await??;
    }
    Ok((alone, beside?))
}

/// `samples` of each of [`OPS`], one call at a time.
async fn quiet_ops(c: &mut Client, samples: usize) -> anyhow::Result<Vec<Samples>> {
    let mut out = Vec::new();
    for op in OPS {
        let mut s = Samples::with_capacity(samples);
        for i in 0..samples {
            let t = Instant::now();
            match op {
                "send" => {
                    c.send("", "", "inbox", b"m".to_vec()).await?;
                }
                "put" => {
                    c.name_set("", "/quiet", format!("{i}").into_bytes(), None, None)
                        .await?;
                }
                _ => {
                    c.procedure_call("", "noop", b"x".to_vec()).await?;
                }
            }
            s.push(t.elapsed().as_nanos() as u64);
        }
        out.push(s);
    }
    Ok(out)
}
