//! Suite `store`: procedures per second and commit latency of the kernel
//! database (issue 2).
//!
//! For each backend — SQLite at durability `off`, `normal` and `full`, and
//! PostgreSQL (a throwaway local cluster with fsync on) — and each workload —
//! a no-op procedure, a single-row insert and a single-row update — at 1, 4
//! and 64 concurrent clients (closed loop: each client submits its next
//! procedure when the previous one committed), it reports procedures/s and
//! commit latency p50/p99.
//!
//! The peer of every figure is the same work done "raw": one connection, one
//! transaction per operation, the same pragmas (SQLite) or server
//! (PostgreSQL), no tabos in between — what an application gets from the
//! database library alone. The targets are held against SQLite
//! `normal` inserts with 64 clients: ≥ 200,000/s, ≥ 3× raw, and p99 commit
//! latency ≤ 1 ms when offered half of that peak rate (open loop, arrivals
//! paced every 100 us; latency is from submission to acknowledgement).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_store::pg_cluster::{ClusterOptions, TempCluster};
use tabos_store::{params, Config, Durability, Error, Migration, PKey, Pending, Store};

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};

const SCHEMA: &[Migration] = &[Migration {
    version: 1,
    name: "bench",
    sqlite:
        "CREATE TABLE ins (p_key INTEGER NOT NULL, id INTEGER NOT NULL, payload TEXT NOT NULL, \
             PRIMARY KEY (p_key, id));
             CREATE TABLE upd (p_key INTEGER NOT NULL, id INTEGER NOT NULL, n INTEGER NOT NULL, \
             payload TEXT NOT NULL, PRIMARY KEY (p_key, id));",
    postgres:
        "CREATE TABLE ins (p_key INTEGER NOT NULL, id BIGINT NOT NULL, payload TEXT NOT NULL, \
               PRIMARY KEY (p_key, id));
               CREATE TABLE upd (p_key INTEGER NOT NULL, id BIGINT NOT NULL, n BIGINT NOT NULL, \
               payload TEXT NOT NULL, PRIMARY KEY (p_key, id));",
}];

/// Rows the update workload spreads over, per partition.
const UPDATE_ROWS: i64 = 10_000;
const PAYLOAD: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const PARTITIONS: u32 = 2;
const CLIENTS: [usize; 3] = [1, 4, 64];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Noop,
    Insert,
    Update,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Noop => "noop",
            Workload::Insert => "insert",
            Workload::Update => "update",
        }
    }
}

struct Timing {
    run: Duration,
    warmup: Duration,
}

/// A unique id source for inserts, shared by all clients.
static NEXT_ID: AtomicI64 = AtomicI64::new(1);

/// How a client hands its procedure to the store: closed-loop clients wait
/// for each, so they `run` it (on their own thread when the partition is
/// idle); the open-loop pacer must not wait, so it `submit`s.
#[derive(Debug, Clone, Copy)]
enum Via {
    Run,
    Submit,
}

type BoxedProc = Box<dyn FnMut(&mut dyn tabos_store::Tx) -> Result<u64, Error> + Send>;

fn submit(store: &Store, w: Workload, client: usize, seq: u64, via: Via) -> Pending<u64, Error> {
    let p = (client as u32) % store.partitions();
    let go = |f: BoxedProc| match via {
        Via::Run => store.run(PKey(p), f),
        Via::Submit => store.submit(PKey(p), f),
    };
    match w {
        Workload::Noop => go(Box::new(|_tx| Ok(0))),
        Workload::Insert => {
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            go(Box::new(move |tx| {
                tx.execute(
                    "INSERT INTO ins (p_key, id, payload) VALUES ($1, $2, $3)",
                    params![p, id, PAYLOAD],
                )
            }))
        }
        Workload::Update => {
            let id =
                ((seq.wrapping_mul(2_654_435_761) ^ client as u64) % UPDATE_ROWS as u64) as i64;
            go(Box::new(move |tx| {
                tx.execute(
                    "UPDATE upd SET n = n + 1, payload = $3 WHERE p_key = $1 AND id = $2",
                    params![p, id, PAYLOAD],
                )
            }))
        }
    }
}

struct Run {
    ops_per_s: f64,
    samples: Samples,
}

/// `clients` closed-loop clients for `t.run` after `t.warmup`.
fn closed_loop(
    rt: &tokio::runtime::Runtime,
    store: &Store,
    w: Workload,
    clients: usize,
    t: &Timing,
) -> anyhow::Result<Run> {
    rt.block_on(async {
        let start = Instant::now();
        let measure_from = start + t.warmup;
        let until = measure_from + t.run;
        let mut tasks = Vec::new();
        for c in 0..clients {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut samples = Samples::with_capacity(1 << 14);
                let mut seq = 0u64;
                loop {
                    let t0 = Instant::now();
                    if t0 >= until {
                        break;
                    }
                    submit(&store, w, c, seq, Via::Run).await?;
                    seq += 1;
                    if t0 >= measure_from {
                        samples.push(t0.elapsed().as_nanos() as u64);
                    }
                }
                Ok::<_, Error>(samples)
            }));
        }
        let mut all = Samples::default();
        for t in tasks {
            all.extend(t.await??);
        }
        let ops_per_s = all.len() as f64 / t.run.as_secs_f64();
        Ok(Run {
            ops_per_s,
            samples: all,
        })
    })
}

/// A submitted procedure on its way to a collector: when it was submitted,
/// whether it falls in the measured window, and its result.
type Sent = (Instant, bool, Pending<u64, Error>);

/// Offers `rate` procedures/s for `t.run` (open loop). The calling thread
/// paces: every [`PACER_TICK`] it submits the procedures that have come due,
/// so arrivals are spread evenly rather than in bursts. One collector thread
/// per partition waits on that partition's procedures in submission order —
/// an executor answers its procedures in that order — and records each
/// latency, from submission to acknowledgement.
fn open_loop(store: &Store, w: Workload, rate: f64, t: &Timing) -> anyhow::Result<Samples> {
    let mut queues = Vec::new();
    let mut collectors = Vec::new();
    for _ in 0..store.partitions() {
        let (tx, rx) = std::sync::mpsc::channel::<Sent>();
        queues.push(tx);
        collectors.push(std::thread::spawn(move || {
            raise_priority();
            let mut samples = Samples::with_capacity(1 << 16);
            for (t0, measured, pending) in rx {
                pending.wait()?;
                if measured {
                    samples.push(t0.elapsed().as_nanos() as u64);
                }
            }
            Ok::<_, Error>(samples)
        }));
    }
    let pacer = std::thread::scope(|s| {
        s.spawn(|| {
            raise_priority();
            pace(store, w, rate, t, &queues)
        })
        .join()
    });
    pacer.map_err(|_| anyhow::anyhow!("pacer panicked"))??;
    drop(queues);
    let mut all = Samples::default();
    for c in collectors {
        all.extend(
            c.join()
                .map_err(|_| anyhow::anyhow!("collector panicked"))??,
        );
    }
    Ok(all)
}

/// The pacer of [`open_loop`]: submits procedures as they come due.
fn pace(
    store: &Store,
    w: Workload,
    rate: f64,
    t: &Timing,
    queues: &[std::sync::mpsc::Sender<Sent>],
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= t.warmup + t.run {
            break;
        }
        let due = (elapsed.as_secs_f64() * rate) as u64;
        let measured = elapsed >= t.warmup;
        while sent < due {
            let client = (sent % 64) as usize;
            let p = client % queues.len();
            let t0 = Instant::now();
            let pending = submit(store, w, client, sent, Via::Submit);
            queues[p]
                .send((t0, measured, pending))
                .map_err(|_| anyhow::anyhow!("collector thread ended early"))?;
            sent += 1;
        }
        std::thread::sleep(PACER_TICK);
    }
    Ok(())
}

/// The harness threads of the open loop run at the store executors' nice
/// value: a starved pacer would offer bursts instead of the intended rate,
/// and a starved collector would add its own wait to every latency.
fn raise_priority() {
    // SAFETY: gettid and setpriority take no pointers and affect only the
    // calling thread; failure (no privilege) leaves the default priority.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -10);
    }
}

/// How often the open-loop pacer submits what has come due.
const PACER_TICK: Duration = Duration::from_micros(100);

fn prepare(store: &Store) -> anyhow::Result<()> {
    for p in 0..store.partitions() {
        store.call(PKey(p), move |tx| {
            for id in 0..UPDATE_ROWS {
                tx.execute(
                    "INSERT INTO upd (p_key, id, n, payload) VALUES ($1, $2, 0, $3)",
                    params![p, id, PAYLOAD],
                )?;
            }
            Ok::<_, Error>(())
        })?;
    }
    Ok(())
}

/// The raw peer on SQLite: one connection, one transaction per operation,
/// the store's pragmas.
fn raw_sqlite(
    dir: &std::path::Path,
    durability: Durability,
    w: Workload,
    t: &Timing,
) -> anyhow::Result<Run> {
    let conn = rusqlite::Connection::open(dir.join("raw.db"))?;
    conn.execute_batch(&tabos_store::sqlite::writer_pragmas(durability))?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS ins (p_key INTEGER NOT NULL, id INTEGER NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (p_key, id));
         CREATE TABLE IF NOT EXISTS upd (p_key INTEGER NOT NULL, id INTEGER NOT NULL, n INTEGER NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (p_key, id));"
    )?;
    conn.execute_batch("BEGIN")?;
    for id in 0..UPDATE_ROWS {
        conn.execute(
            "INSERT OR IGNORE INTO upd (p_key, id, n, payload) VALUES (0, ?1, 0, ?2)",
            rusqlite::params![id, PAYLOAD],
        )?;
    }
    conn.execute_batch("COMMIT")?;
    let mut id = 1_000_000_000i64 + (NEXT_ID.load(Ordering::Relaxed));
    let mut op = |seq: u64| -> rusqlite::Result<()> {
        conn.execute_batch("BEGIN")?;
        match w {
            Workload::Noop => {}
            Workload::Insert => {
                id += 1;
                conn.prepare_cached("INSERT INTO ins (p_key, id, payload) VALUES (0, ?1, ?2)")?
                    .execute(rusqlite::params![id, PAYLOAD])?;
            }
            Workload::Update => {
                let k = (seq.wrapping_mul(2_654_435_761) % UPDATE_ROWS as u64) as i64;
                conn.prepare_cached(
                    "UPDATE upd SET n = n + 1, payload = ?2 WHERE p_key = 0 AND id = ?1",
                )?
                .execute(rusqlite::params![k, PAYLOAD])?;
            }
        }
        conn.execute_batch("COMMIT")
    };
    timed_loop(t, |seq| op(seq).map_err(anyhow::Error::from))
}

/// The raw peer on PostgreSQL: one connection, one transaction per operation.
fn raw_postgres(url: &str, w: Workload, t: &Timing) -> anyhow::Result<Run> {
    let mut c = postgres::Client::connect(url, postgres::NoTls)?;
    c.batch_execute("SET synchronous_commit = on")?;
    let ins = c.prepare("INSERT INTO ins (p_key, id, payload) VALUES (0, $1, $2)")?;
    let upd = c.prepare("UPDATE upd SET n = n + 1, payload = $2 WHERE p_key = 0 AND id = $1")?;
    let mut id = 2_000_000_000i64 + NEXT_ID.load(Ordering::Relaxed);
    timed_loop(t, |seq| {
        let mut tx = c.transaction()?;
        match w {
            Workload::Noop => {}
            Workload::Insert => {
                id += 1;
                tx.execute(&ins, &[&id, &PAYLOAD])?;
            }
            Workload::Update => {
                let k = (seq.wrapping_mul(2_654_435_761) % UPDATE_ROWS as u64) as i64;
                tx.execute(&upd, &[&k, &PAYLOAD])?;
            }
        }
        tx.commit()?;
        Ok(())
    })
}

/// Runs `op` in a loop: warm-up, then counts operations for `t.run`,
/// recording each one's latency as the closed loop does for tabos.
fn timed_loop(t: &Timing, mut op: impl FnMut(u64) -> anyhow::Result<()>) -> anyhow::Result<Run> {
    let start = Instant::now();
    let mut seq = 0;
    while start.elapsed() < t.warmup {
        op(seq)?;
        seq += 1;
    }
    let mut samples = Samples::with_capacity(1 << 16);
    let measure = Instant::now();
    loop {
        let t0 = Instant::now();
        if t0 - measure >= t.run {
            break;
        }
        op(seq)?;
        samples.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    Ok(Run {
        ops_per_s: samples.len() as f64 / t.run.as_secs_f64(),
        samples,
    })
}

/// Measures the raw peer of a workload: its throughput and latencies.
type RawPeer = Box<dyn Fn(Workload, &Timing) -> anyhow::Result<Run>>;

struct Backend {
    label: String,
    store: Store,
    raw: RawPeer,
    raw_name: &'static str,
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let t = if quick {
        Timing {
            run: Duration::from_millis(300),
            warmup: Duration::from_millis(50),
        }
    } else {
        Timing {
            run: Duration::from_secs(2),
            warmup: Duration::from_millis(300),
        }
    };
    let mut report = Report::new("store", quick);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let base = std::env::temp_dir().join(format!("tabos-bench-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);

    let mut backends = Vec::new();
    for d in [Durability::Off, Durability::Normal, Durability::Full] {
        let dir = base.join(format!("sqlite-{d}"));
        let store = Store::open(
            &Config::sqlite(&dir)
                .with_partitions(PARTITIONS)
                .with_durability(d),
            SCHEMA,
        )?;
        prepare(&store)?;
        let raw_dir = base.join(format!("raw-{d}"));
        std::fs::create_dir_all(&raw_dir)?;
        backends.push(Backend {
            label: format!("sqlite-{d}"),
            store,
            raw: Box::new(move |w, t| raw_sqlite(&raw_dir, d, w, t)),
            raw_name: "raw-rusqlite-1tx-per-op",
        });
    }

    let filter = std::env::var("TABOS_BENCH_FILTER").ok();
    let want_pg = filter.as_deref().is_none_or(|f| "postgres".contains(f));
    println!("starting a throwaway PostgreSQL cluster (fsync on) for the cluster backend ...");
    let cluster = if want_pg {
        TempCluster::start(&ClusterOptions {
            fsync: true,
            ..ClusterOptions::default()
        })
    } else {
        Err(tabos_store::Error::Config(
            "excluded by TABOS_BENCH_FILTER".into(),
        ))
    };
    let mut pg_note = None;
    let _cluster_guard;
    match cluster {
        Ok(cluster) => {
            report.notes.push(format!(
                "PostgreSQL peer and backend: {}, fsync on, synchronous_commit on",
                cluster.version()
            ));
            let url = cluster.create_database("bench")?;
            let store = Store::open(
                &Config::postgres(url.clone())
                    .with_partitions(PARTITIONS)
                    .with_connections(8),
                SCHEMA,
            )?;
            prepare(&store)?;
            backends.push(Backend {
                label: "postgres".into(),
                store,
                raw: Box::new(move |w, t| raw_postgres(&url, w, t)),
                raw_name: "raw-postgres-1tx-per-op",
            });
            _cluster_guard = Some(cluster);
        }
        Err(e) => {
            pg_note = Some(format!("PostgreSQL could not be started: {e}"));
            _cluster_guard = None;
        }
    }

    // TABOS_BENCH_FILTER=<substring> keeps only matching backends, for
    // profiling one configuration; a filtered run says so in its notes.
    if let Some(filter) = &filter {
        backends.retain(|b| b.label.contains(filter.as_str()));
        report
            .notes
            .push(format!("filtered to backends matching {filter:?}"));
    }
    let mut peak_insert_normal = None;
    for b in &backends {
        for w in [Workload::Noop, Workload::Insert, Workload::Update] {
            let mut raw =
                (b.raw)(w, &t).with_context(|| format!("raw peer of {} {}", b.label, w.name()))?;
            println!(
                "  {:<14} {:<7} raw peer {:>9.0}/s  p50 {:>8.1} us  p99 {:>8.1} us",
                b.label,
                w.name(),
                raw.ops_per_s,
                raw.samples.quantile_us(0.5),
                raw.samples.quantile_us(0.99)
            );
            for clients in CLIENTS {
                let mut run = closed_loop(&rt, &b.store, w, clients, &t)?;
                println!(
                    "  {:<14} {:<7} {:>2} clients {:>9.0}/s  p50 {:>8.1} us  p99 {:>8.1} us",
                    b.label,
                    w.name(),
                    clients,
                    run.ops_per_s,
                    run.samples.quantile_us(0.5),
                    run.samples.quantile_us(0.99)
                );
                let name = format!("{}.{}.{}c", w.name(), b.label, clients);
                let mut tput = Figure::new(
                    format!("{name}.procs_per_s"),
                    round(run.ops_per_s, 0),
                    "ops/s",
                    Better::Higher,
                )
                .peer(b.raw_name, Some(round(raw.ops_per_s, 0)))
                .runs(1, Stat::Rate);
                let peak_target =
                    b.label == "sqlite-normal" && w == Workload::Insert && clients == 64;
                if peak_target {
                    peak_insert_normal = Some(run.ops_per_s);
                    tput = tput.target("ratio >= 3");
                    report.figures.push(
                        Figure::new(
                            format!("{name}.procs_per_s.absolute"),
                            round(run.ops_per_s, 0),
                            "ops/s",
                            Better::Higher,
                        )
                        .peer(b.raw_name, Some(round(raw.ops_per_s, 0)))
                        .runs(1, Stat::Rate)
                        .target("value >= 200000"),
                    );
                }
                // Issue 18: a single-row insert at one client, durability
                // off, within half of raw SQLite's rate.
                if b.label == "sqlite-off" && w == Workload::Insert && clients == 1 {
                    tput = tput.target("ratio >= 0.5");
                }
                report.figures.push(tput);
                for (q, label, stat) in [(0.5, "p50", Stat::P50), (0.99, "p99", Stat::P99)] {
                    report.figures.push(
                        Figure::new(
                            format!("{name}.commit_{label}_us"),
                            round(run.samples.quantile_us(q), 1),
                            "us",
                            Better::Lower,
                        )
                        .peer(b.raw_name, Some(round(raw.samples.quantile_us(q), 1)))
                        .runs(1, stat),
                    );
                }
            }
        }
    }

    // The open loop has no raw peer: one connection cannot be offered half
    // of tabos's 64-client peak (it is below the raw rate's own peak), so
    // the figure is held to its absolute target alone.
    if let (Some(peak), Some(b)) = (
        peak_insert_normal,
        backends.iter().find(|b| b.label == "sqlite-normal"),
    ) {
        let rate = peak / 2.0;
        let mut s = open_loop(&b.store, Workload::Insert, rate, &t)?;
        let p99 = s.quantile_us(0.99);
        println!("  sqlite-normal insert at half peak ({rate:.0}/s offered): p50 {:.1} us p99 {p99:.1} us", s.quantile_us(0.5));
        let note = format!("open loop at {rate:.0} procedures/s offered, paced every 100 us");
        report.figures.push(
            Figure::new(
                "insert.sqlite-normal.half_peak.commit_p99_us",
                round(p99, 1),
                "us",
                Better::Lower,
            )
            .runs(1, Stat::P99)
            .target("value <= 1000")
            .note(note.clone()),
        );
        report.figures.push(
            Figure::new(
                "insert.sqlite-normal.half_peak.commit_p50_us",
                round(s.quantile_us(0.5), 1),
                "us",
                Better::Lower,
            )
            .runs(1, Stat::P50)
            .note(note),
        );
    }
    if let (Some(n), true) = (pg_note, want_pg) {
        for w in ["noop", "insert", "update"] {
            report.figures.push(
                Figure::new(
                    format!("{w}.postgres.64c.procs_per_s"),
                    f64::NAN,
                    "ops/s",
                    Better::Higher,
                )
                .peer("raw-postgres-1tx-per-op", None)
                .runs(1, Stat::Rate)
                .note(n.clone()),
            );
        }
    }
    drop(backends);
    let _ = std::fs::remove_dir_all(&base);
    Ok(report)
}
