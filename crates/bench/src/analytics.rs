//! Suite `analytics`: NautDB's specialised analytics path (issue 43,
//! item 4).
//!
//! * **Figure 1, allocation by size.** Nanoseconds per allocation (and
//!   its free) of objects of 8 B … 4 KiB: an arena (bumpalo, reset
//!   between rounds — a per-task arena) against glibc's malloc and
//!   mimalloc, each allocating the same objects, touching the first byte,
//!   and freeing them all.
//! * **Figure 2, row-oriented sort by columns and chunk size.** A table
//!   of C 8-byte columns in 256 chunks of S rows, each chunk's rows
//!   sorted by the first column into an output table: in the columnar
//!   engine's memory (huge pages asked for, `tabos_store::columnar::
//!   huge_pages`) against the same sort on plain `Vec`s (4 KiB pages;
//!   this machine's THP is `madvise`).
//! * **Queries over OS state.** Ten million `proc_event` rows (and 8,000
//!   procs) in a kernel database; the usage and provenance questions of
//!   README's provenance section, answered by the columnar engine
//!   (snapshot warm) against SQLite's row store on the same database
//!   (`Engine::RowStore`, the same statement) and against DuckDB (pip,
//!   in-memory tables loaded from the same rows) in the same run. The
//!   first query with a cold snapshot is its own figure. Targets: ≥ 10×
//!   SQLite (ratio ≤ 0.1) and within 2× DuckDB (ratio ≤ 2).
//!
//! For a profile (`perf record -p`): `TABOS_ANALYTICS_LOOP=<query name>`
//! runs that query on the columnar engine over and over for 30 s once the
//! snapshots are warm, and ends the suite without writing its result.

use std::alloc::{GlobalAlloc, Layout};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_store::{Cap, Config, Engine, ReadLimits, ReadScope, Store, Value};

use crate::report::{round, Better, Figure, Report, Stat};

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("analytics", quick);
    allocation(&mut report, quick);
    row_sort(&mut report, quick);
    queries(&mut report, quick)?;
    Ok(report)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Figure 1.
fn allocation(report: &mut Report, quick: bool) {
    let n = if quick { 200_000 } else { 2_000_000 };
    let runs = if quick { 3 } else { 5 };
    let mut ptrs: Vec<*mut u8> = Vec::with_capacity(n);
    let mut arena = bumpalo::Bump::new();
    let mi = mimalloc::MiMalloc;
    for size in [8usize, 16, 32, 64, 128, 256, 1024, 4096] {
        let layout = Layout::from_size_align(size, 8).expect("a layout");
        let (mut a, mut g, mut m) = (Vec::new(), Vec::new(), Vec::new());
        // One round of each untimed first: every contestant warm.
        for round_no in 0..=runs {
            let t = Instant::now();
            for _ in 0..n {
                let p = arena.alloc_layout(layout).as_ptr();
                // SAFETY: p points to `size` >= 1 fresh bytes.
                unsafe { p.write_volatile(1) };
            }
            arena.reset();
            let arena_ns = t.elapsed().as_nanos() as f64 / n as f64;
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: malloc of a non-zero size; checked for NULL.
                let p = unsafe { libc::malloc(size) } as *mut u8;
                assert!(!p.is_null(), "malloc failed");
                // SAFETY: p points to `size` fresh bytes.
                unsafe { p.write_volatile(1) };
                ptrs.push(p);
            }
            for p in ptrs.drain(..) {
                // SAFETY: each p came from malloc above and is freed once.
                unsafe { libc::free(p as *mut libc::c_void) };
            }
            let glibc_ns = t.elapsed().as_nanos() as f64 / n as f64;
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: a non-zero-size layout; checked for NULL.
                let p = unsafe { mi.alloc(layout) };
                assert!(!p.is_null(), "mimalloc failed");
                // SAFETY: p points to `size` fresh bytes.
                unsafe { p.write_volatile(1) };
                ptrs.push(p);
            }
            for p in ptrs.drain(..) {
                // SAFETY: each p came from mi.alloc(layout) and is freed once.
                unsafe { mi.dealloc(p, layout) };
            }
            let mi_ns = t.elapsed().as_nanos() as f64 / n as f64;
            if round_no > 0 {
                a.push(arena_ns);
                g.push(glibc_ns);
                m.push(mi_ns);
            }
        }
        let (a, g, m) = (median(a), median(g), median(m));
        let name = format!("fig1.alloc.{size}B.ns_per_alloc");
        report.figures.push(
            Figure::new(&name, round(a, 2), "ns", Better::Lower)
                .peer("glibc malloc", Some(round(g, 2)))
                .runs(runs, Stat::MedianOfRuns)
                .note(format!("{n} objects a round, alloc + first byte + free")),
        );
        report.figures.push(
            Figure::new(
                format!("{name}.vs_mimalloc"),
                round(a, 2),
                "ns",
                Better::Lower,
            )
            .peer("mimalloc", Some(round(m, 2)))
            .runs(runs, Stat::MedianOfRuns),
        );
    }
    // The figure held 2 M live objects of each size for each allocator
    // (8 GiB at 4 KiB): give back what glibc and mimalloc keep of it, or
    // the queries' run carries ~8 GiB it does not use.
    drop(arena);
    // SAFETY: both only return free memory to the system.
    unsafe {
        libc::malloc_trim(0);
        libmimalloc_sys::mi_collect(true);
    }
}

/// Figure 2: each chunk's rows (`cols` words each) sorted by the first
/// word into `out`.
fn sort_chunks(input: &[i64], out: &mut [i64], cols: usize, rows_per_chunk: usize) {
    let chunk_words = cols * rows_per_chunk;
    let mut idx: Vec<u32> = Vec::with_capacity(rows_per_chunk);
    for (inc, outc) in input.chunks(chunk_words).zip(out.chunks_mut(chunk_words)) {
        idx.clear();
        idx.extend(0..rows_per_chunk as u32);
        idx.sort_unstable_by_key(|&r| inc[r as usize * cols]);
        for (to, &from) in idx.iter().enumerate() {
            let f = from as usize * cols;
            outc[to * cols..(to + 1) * cols].copy_from_slice(&inc[f..f + cols]);
        }
    }
}

fn anon_huge_kib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("AnonHugePages:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn row_sort(report: &mut Report, quick: bool) {
    let chunks = if quick { 64 } else { 256 };
    let runs = if quick { 3 } else { 5 };
    let cols_set: &[usize] = if quick { &[1, 16] } else { &[1, 16, 128] };
    let sizes: &[usize] = if quick { &[1_024] } else { &[1_024, 8_192] };
    for &cols in cols_set {
        for &rows in sizes {
            let words = chunks * rows * cols;
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let data: Vec<i64> = (0..words)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 1) as i64
                })
                .collect();
            let before = anon_huge_kib();
            let huge_in = tabos_store::columnar::huge_pages(data.clone());
            let mut huge_out = tabos_store::columnar::huge_pages(vec![0i64; words]);
            let huge_kib = anon_huge_kib().saturating_sub(before);
            let plain_in = data;
            let mut plain_out = vec![0i64; words];
            let (mut h, mut p) = (Vec::new(), Vec::new());
            for r in 0..=runs {
                let t = Instant::now();
                sort_chunks(&huge_in, &mut huge_out, cols, rows);
                let ht = t.elapsed().as_secs_f64() * 1e3;
                let t = Instant::now();
                sort_chunks(&plain_in, &mut plain_out, cols, rows);
                let pt = t.elapsed().as_secs_f64() * 1e3;
                if r > 0 {
                    h.push(ht);
                    p.push(pt);
                }
            }
            assert_eq!(huge_out, plain_out, "both sorts agree");
            report.figures.push(
                Figure::new(
                    format!("fig2.row_sort.{cols}cols.{rows}rows.ms"),
                    round(median(h), 2),
                    "ms",
                    Better::Lower,
                )
                .peer("plain Vec (4 KiB pages)", Some(round(median(p), 2)))
                .runs(runs, Stat::MedianOfRuns)
                .note(format!(
                    "{chunks} chunks; {} MiB a table; huge pages backing the engine's: {} MiB",
                    (words * 8) >> 20,
                    huge_kib >> 10
                )),
            );
        }
    }
}

/// A query of the suite: a name, the statement (PostgreSQL's dialect,
/// which DuckDB reads too) and its parameters.
struct Q {
    name: &'static str,
    sql: &'static str,
    params: Vec<Value>,
}

fn suite_queries(files: u64) -> Vec<Q> {
    let third = format!("/f{}", files / 3);
    vec![
        Q {
            name: "usage_by_realm_event",
            sql: "SELECT realm, event, count(*) AS n, min(at_us), max(at_us) FROM proc_event \
                  GROUP BY realm, event ORDER BY realm, event",
            params: vec![],
        },
        Q {
            name: "top_readers",
            sql: "SELECT realm, pid, count(*) AS n FROM proc_event WHERE event = 'fs_read' \
                  GROUP BY realm, pid ORDER BY n DESC, realm, pid LIMIT 10",
            params: vec![],
        },
        Q {
            name: "distinct_files_per_event",
            sql: "SELECT event, count(DISTINCT detail) FROM proc_event \
                  WHERE event IN ('fs_read', 'fs_write') GROUP BY event ORDER BY event",
            params: vec![],
        },
        Q {
            name: "lineage",
            sql: "SELECT DISTINCT w.pid, split_part(r.detail, ' @', 1) AS input \
                    FROM proc_event w JOIN proc_event r \
                      ON r.realm = w.realm AND r.pid = w.pid AND r.event = 'fs_read' \
                     AND r.seq < w.seq \
                   WHERE w.event = 'fs_write' AND split_part(w.detail, ' @', 1) = $1 \
                   ORDER BY 1, 2",
            params: vec![Value::Text(third.clone())],
        },
        Q {
            name: "user_files_in_interval",
            sql: "SELECT DISTINCT e.event, split_part(e.detail, ' @', 1) AS path \
                    FROM proc_event e JOIN proc p ON p.realm = e.realm AND p.pid = e.pid \
                   WHERE p.user_name = 'alice' AND e.event IN ('fs_read', 'fs_write') \
                     AND e.at_us BETWEEN $1 AND $2 ORDER BY 1, 2",
            params: vec![Value::Int(2_000_000), Value::Int(2_000_000 + 20_000_000)],
        },
        Q {
            name: "where_reads_went",
            sql: "SELECT DISTINCT r.pid, split_part(s.detail, ' #', 1) AS sent_to, \
                         v.pid AS taken_by \
                    FROM proc_event r \
                    JOIN proc_event s ON s.realm = r.realm AND s.pid = r.pid \
                                     AND s.event = 'send' AND s.seq > r.seq \
                    LEFT JOIN proc_event v ON v.realm = s.realm AND v.event = 'recv' \
                                          AND v.detail = s.detail \
                   WHERE r.event = 'fs_read' AND split_part(r.detail, ' @', 1) = $1 \
                   ORDER BY 1, 2, 3",
            params: vec![Value::Text(third)],
        },
    ]
}

/// Fills a kernel database with `events` proc_event rows over 4 realms
/// (2,000 procs each) and writes the same rows as CSV for DuckDB.
fn fill(store: &Store, dir: &Path, events: usize) -> anyhow::Result<u64> {
    const REALMS: usize = 4;
    const PIDS: u64 = 2_000;
    const FILES: u64 = 1_000;
    const BATCH: usize = 50_000;
    let mut ev_csv = std::io::BufWriter::new(std::fs::File::create(dir.join("proc_event.csv"))?);
    let mut proc_csv = std::io::BufWriter::new(std::fs::File::create(dir.join("proc.csv"))?);
    writeln!(ev_csv, "realm,pid,seq,at_us,event,detail")?;
    writeln!(proc_csv, "realm,pid,user_name,kind")?;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for r in 0..REALMS {
        let realm = format!("r{r}");
        let p = tabos_kernel::realm_partition(&realm, store.partitions());
        let mut procs = Vec::new();
        for i in 0..PIDS {
            let user = ["root", "alice", "bob"][rnd(3) as usize];
            let kind = ["native", "wasm"][rnd(2) as usize];
            writeln!(proc_csv, "{realm},p{i},{user},{kind}")?;
            procs.push(vec![
                Value::Int(p.0 as i64),
                Value::Text(realm.clone()),
                Value::Text(format!("p{i}")),
                Value::Int(i as i64),
                Value::Text(kind.into()),
                Value::Text(user.into()),
            ]);
        }
        store
            .run(p, move |tx| {
                for row in &procs {
                    tx.execute(
                        "INSERT INTO proc (p_key, realm, pid, seq, kind, class, program, args, \
                         env, cores, mem_mb, state, spawn_us, user_name) VALUES \
                         ($1, $2, $3, $4, $5, 'BE', 'x', '[]', '{}', 1, 0, 'exited', 0, $6)",
                        row,
                    )?;
                }
                Ok::<_, tabos_store::Error>(())
            })
            .wait()?;
        let mut seqs = vec![0i64; PIDS as usize];
        let per_realm = events / REALMS;
        let mut done = 0;
        while done < per_realm {
            let n = BATCH.min(per_realm - done);
            let mut rows = Vec::with_capacity(n);
            for k in 0..n {
                let pid = rnd(PIDS) as usize;
                seqs[pid] += 1;
                let event =
                    ["fs_read", "fs_write", "send", "recv", "spawn", "exit"][rnd(6) as usize];
                let detail = match event {
                    "fs_read" | "fs_write" => Some(format!(
                        "/f{} @{} +{}",
                        rnd(FILES),
                        rnd(16) * 4096,
                        rnd(4096)
                    )),
                    "send" | "recv" => {
                        let m = rnd(2_000);
                        Some(format!("mb{} #{m}-{m} +{}", rnd(100), rnd(64)))
                    }
                    _ => None,
                };
                let at = 1_000_000 + (done + k) as i64 * 10;
                writeln!(
                    ev_csv,
                    "{realm},p{pid},{},{at},{event},{}",
                    seqs[pid],
                    detail
                        .as_deref()
                        .map_or(String::new(), |d| format!("\"{d}\""))
                )?;
                rows.push(vec![
                    Value::Int(p.0 as i64),
                    Value::Text(realm.clone()),
                    Value::Text(format!("p{pid}")),
                    Value::Int(seqs[pid]),
                    Value::Int(at),
                    Value::Text(event.into()),
                    detail.map_or(Value::Null, Value::Text),
                ]);
            }
            store
                .run(p, move |tx| {
                    for row in &rows {
                        tx.execute(
                            "INSERT INTO proc_event (p_key, realm, pid, seq, at_us, event, \
                             detail) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                            row,
                        )?;
                    }
                    Ok::<_, tabos_store::Error>(())
                })
                .wait()?;
            done += n;
        }
    }
    ev_csv.flush()?;
    proc_csv.flush()?;
    Ok(FILES)
}

const DUCKDB: &str = r#"
import json, statistics, sys, time
import duckdb
d, runs = sys.argv[1], int(sys.argv[2])
queries = json.loads(sys.stdin.read())
con = duckdb.connect()
t = time.perf_counter()
con.execute(f"CREATE TABLE proc_event AS SELECT * FROM read_csv('{d}/proc_event.csv', header=true, "
            "columns={'realm':'VARCHAR','pid':'VARCHAR','seq':'BIGINT','at_us':'BIGINT',"
            "'event':'VARCHAR','detail':'VARCHAR'})")
con.execute(f"CREATE TABLE proc AS SELECT * FROM read_csv('{d}/proc.csv', header=true, "
            "columns={'realm':'VARCHAR','pid':'VARCHAR','user_name':'VARCHAR','kind':'VARCHAR'})")
load = time.perf_counter() - t
out = {"load_s": load, "threads": con.execute("SELECT current_setting('threads')").fetchone()[0]}
for q in queries:
    times, rows = [], 0
    for _ in range(runs + 1):
        t = time.perf_counter()
        rows = len(con.execute(q["sql"], q["params"]).fetchall())
        times.append((time.perf_counter() - t) * 1e3)
    out[q["name"]] = {"ms": statistics.median(times[1:]), "rows": rows}
print(json.dumps(out))
"#;

fn duckdb(dir: &Path, qs: &[Q], runs: u32) -> Result<serde_json::Value, String> {
    let python = crate::venv::python_with("duckdb", "duckdb")?;
    let queries: Vec<serde_json::Value> = qs
        .iter()
        .map(|q| {
            serde_json::json!({
                "name": q.name,
                "sql": q.sql,
                "params": q.params.iter().map(|v| match v {
                    Value::Int(i) => serde_json::json!(i),
                    Value::Text(t) => serde_json::json!(t),
                    _ => serde_json::Value::Null,
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut child = Command::new(python)
        .arg("-c")
        .arg(DUCKDB)
        .arg(dir)
        .arg(runs.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("running DuckDB: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(serde_json::to_string(&queries).expect("json").as_bytes())
        .map_err(|e| format!("feeding DuckDB: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("DuckDB: {e}"))?;
    crate::venv::last_json_line(&out, "DuckDB")
}

fn limits(engine: Engine) -> ReadLimits {
    ReadLimits {
        scope: ReadScope::All,
        time_max: Some(Duration::from_secs(3_600)),
        engine,
        ..ReadLimits::rows(Cap::Truncate(10_000_000))
    }
}

/// One timed run of `q` on `engine`: milliseconds and rows.
fn timed(store: &Store, q: &Q, engine: Engine) -> anyhow::Result<(f64, usize)> {
    let t = Instant::now();
    let rows = store
        .query_bounded(q.sql, &q.params, &limits(engine))
        .with_context(|| format!("{} on {engine:?}", q.name))?;
    Ok((t.elapsed().as_secs_f64() * 1e3, rows.len()))
}

fn queries(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let events = if quick { 1_000_000 } else { 10_000_000 };
    let runs: u32 = if quick { 1 } else { 3 };
    let dir = tabos_store::testing::TempDir::new("analytics");
    let store = tabos_kernel::open(&Config::sqlite(dir.path()))?;
    println!("filling a kernel database with {events} proc_event rows ...");
    let t = Instant::now();
    let files = fill(&store, dir.path(), events)?;
    println!("  filled in {:.1} s", t.elapsed().as_secs_f64());
    let qs = suite_queries(files);
    // The cold figure: the first query, its snapshot loaded as it runs,
    // against SQLite answering the same.
    let all_columns = Q {
        name: "cold_scan",
        sql: "SELECT count(*), count(DISTINCT realm), count(DISTINCT pid), count(seq), \
              max(at_us), count(DISTINCT event), count(detail) FROM proc_event",
        params: vec![],
    };
    let (cold, _) = timed(&store, &all_columns, Engine::Columnar)?;
    let (warm, _) = timed(&store, &all_columns, Engine::Columnar)?;
    let (row_store, _) = timed(&store, &all_columns, Engine::RowStore)?;
    report.figures.push(
        Figure::new(
            "queries.cold_scan.first_query_ms",
            round(cold, 1),
            "ms",
            Better::Lower,
        )
        .peer("sqlite (row store)", Some(round(row_store, 1)))
        .runs(1, Stat::MedianOfRuns)
        .note(format!(
            "{events} rows; the first columnar query loads the snapshot (every column \
                 it reads); the same query warm: {warm:.1} ms"
        )),
    );
    // Warm every snapshot the queries read.
    for q in &qs {
        timed(&store, q, Engine::Columnar)?;
    }
    if let Ok(name) = std::env::var("TABOS_ANALYTICS_LOOP") {
        let q = qs
            .iter()
            .find(|q| q.name == name)
            .with_context(|| format!("no query {name}"))?;
        println!("looping {name} for 30 s (pid {})", std::process::id());
        let t = Instant::now();
        let mut n = 0;
        while t.elapsed() < Duration::from_secs(30) {
            timed(&store, q, Engine::Columnar)?;
            n += 1;
        }
        anyhow::bail!("profiling run: {n} runs of {name}, no result written");
    }
    let duck = match duckdb(dir.path(), &qs, runs) {
        Ok(d) => Ok(d),
        Err(e) => {
            println!("DuckDB did not run: {e}");
            Err(e)
        }
    };
    for q in &qs {
        let (mut c, mut s) = (Vec::new(), Vec::new());
        let mut rows = (0, 0);
        for _ in 0..runs {
            let (ms, n) = timed(&store, q, Engine::Columnar)?;
            c.push(ms);
            rows.0 = n;
            let (ms, n) = timed(&store, q, Engine::RowStore)?;
            s.push(ms);
            rows.1 = n;
        }
        anyhow::ensure!(
            rows.0 == rows.1,
            "{}: the columnar engine returned {} rows, SQLite {}",
            q.name,
            rows.0,
            rows.1
        );
        let (c, s) = (median(c), median(s));
        report.figures.push(
            Figure::new(
                format!("queries.{}.ms", q.name),
                round(c, 2),
                "ms",
                Better::Lower,
            )
            .peer("sqlite (row store)", Some(round(s, 2)))
            .runs(runs, Stat::MedianOfRuns)
            .target("ratio <= 0.1")
            .note(format!("{events} events; {} rows", rows.0)),
        );
        let (d, note) = match &duck {
            Ok(d) => match d[q.name]["ms"].as_f64() {
                Some(ms) => (
                    Some(round(ms, 2)),
                    format!(
                        "DuckDB {} threads, {} rows",
                        d["threads"], d[q.name]["rows"]
                    ),
                ),
                None => (None, "DuckDB gave no time".to_string()),
            },
            Err(e) => (None, format!("DuckDB did not run: {e}")),
        };
        report.figures.push(
            Figure::new(
                format!("queries.{}.vs_duckdb.ms", q.name),
                round(c, 2),
                "ms",
                Better::Lower,
            )
            .peer("duckdb", d)
            .runs(runs, Stat::MedianOfRuns)
            .target("ratio <= 2")
            .note(note),
        );
    }
    Ok(())
}
