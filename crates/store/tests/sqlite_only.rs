//! Behaviour specific to the embedded SQLite backend: crash recovery,
//! readers that never wait for the writer, and the data-directory lock.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};

use common::TempDir;
use tabos_store::{params, Config, Durability, Error, Migration, PKey, Store};

const SCHEMA: &[Migration] = &[Migration {
    version: 1,
    name: "log",
    sqlite:
        "CREATE TABLE log (p_key INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (p_key, seq))",
    postgres:
        "CREATE TABLE log (p_key INTEGER NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (p_key, seq))",
}];

const CHILD_ENV: &str = "TABOS_RECOVERY_CHILD_DIR";
const ACKS_BEFORE_KILL: usize = 2_000;

/// Not a test by itself: the child process of `recovery_after_sigkill`. It
/// writes sequence numbers under `normal` durability from 4 threads and
/// prints each one after its commit was acknowledged, until it is killed.
#[test]
#[ignore = "helper process for recovery_after_sigkill"]
fn recovery_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let config = Config::sqlite(&dir)
        .with_partitions(2)
        .with_durability(Durability::Normal);
    let store = Store::open(&config, SCHEMA).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<i64>();
    for t in 0..4i64 {
        let store = store.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for i in 0.. {
                let seq = i * 4 + t;
                let p = (seq % 2) as u32;
                store
                    .call(PKey(p), move |tx| {
                        tx.execute(
                            "INSERT INTO log (p_key, seq) VALUES ($1, $2)",
                            params![p, seq],
                        )
                    })
                    .unwrap();
                if tx.send(seq).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for seq in rx {
        writeln!(out, "ack {seq}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn recovery_after_sigkill() {
    let dir = TempDir::new("recovery");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "recovery_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while acked.len() < ACKS_BEFORE_KILL {
        let line = lines
            .next()
            .expect("child exited before acknowledging enough writes")
            .unwrap();
        if let Some(seq) = line.strip_prefix("ack ") {
            acked.push(seq.parse::<i64>().unwrap());
        }
    }
    child.kill().unwrap(); // SIGKILL, mid-load
    child.wait().unwrap();

    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(2), SCHEMA).unwrap();
    let rows = store.query("SELECT seq FROM log", &[]).unwrap();
    let present: std::collections::HashSet<i64> =
        rows.iter().map(|r| r.get::<i64>(0).unwrap()).collect();
    let missing: Vec<_> = acked.iter().filter(|s| !present.contains(s)).collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    assert!(present.len() >= ACKS_BEFORE_KILL);
}

#[test]
fn readers_never_wait_for_the_writer() {
    let dir = TempDir::new("readers");
    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(1), SCHEMA).unwrap();
    store
        .call(PKey(0), |tx| {
            tx.execute("INSERT INTO log (p_key, seq) VALUES (0, 1)", &[])
        })
        .unwrap();
    let inside = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    let (i2, r2) = (inside.clone(), release.clone());
    let mut first = true;
    let writer = store.submit(PKey(0), move |tx| {
        tx.execute("INSERT INTO log (p_key, seq) VALUES (0, 2)", &[])?;
        if std::mem::take(&mut first) {
            i2.wait();
            r2.wait();
        }
        Ok::<_, Error>(())
    });
    inside.wait();
    // The writer holds an open write transaction; the read completes anyway
    // and sees only committed data.
    let n: i64 = store.query("SELECT count(*) FROM log", &[]).unwrap().rows[0]
        .get(0)
        .unwrap();
    assert_eq!(n, 1);
    release.wait();
    writer.wait().unwrap();
    let n: i64 = store.query("SELECT count(*) FROM log", &[]).unwrap().rows[0]
        .get(0)
        .unwrap();
    assert_eq!(n, 2);
}

#[test]
fn a_data_directory_is_opened_by_one_store_at_a_time() {
    let dir = TempDir::new("lock");
    let config = Config::sqlite(dir.path()).with_partitions(1);
    let store = Store::open(&config, SCHEMA).unwrap();
    let e = Store::open(&config, SCHEMA).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    drop(store);
    Store::open(&config, SCHEMA).unwrap();
}

#[test]
fn bad_settings_are_refused() {
    let dir = TempDir::new("settings");
    for bad in [0, tabos_store::PARTITIONS_MAX + 1] {
        let e = Store::open(&Config::sqlite(dir.path()).with_partitions(bad), SCHEMA).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
    }
    assert!("sometimes".parse::<Durability>().is_err());
    assert_eq!("full".parse::<Durability>().unwrap(), Durability::Full);
}

#[test]
fn blocking_waits_work_on_any_thread_and_never_panic() {
    let dir = TempDir::new("runtime");
    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(1), SCHEMA).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        // Inside a runtime thread a blocking wait blocks (the caller's choice)
        // but completes: the executor is a thread of its own.
        let mut sub = store.subscribe("x");
        store.call(PKey(0), |tx| tx.notify("x", "1")).unwrap();
        assert_eq!(sub.blocking_recv().unwrap().payload, "1");
        store.query("SELECT 1", &[]).unwrap();
        // The async path.
        store
            .submit(PKey(0), |_tx| Ok::<_, Error>(()))
            .await
            .unwrap();
        tokio::task::spawn_blocking(move || store.call(PKey(0), |_tx| Ok::<_, Error>(())))
            .await
            .unwrap()
            .unwrap();
    });
}

/// Issue 36, item 1: tenant code runs beside the partition's writer, and
/// realms take turns on its connections. While a long procedure of realm z
/// and one of realm a run (both computing, neither writing), a short one of
/// realm b runs on the writer at once; a's second long one waits, as the
/// last free connection goes only to a realm running none — c's, queued
/// after it, runs first. (Order served, not time.)
#[test]
fn realms_take_turns_on_a_partitions_writer() {
    let dir = TempDir::new("fair");
    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(1), SCHEMA).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    // A long job that tells it started, then waits to be released.
    let held = |realm: &str| {
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = std::sync::Mutex::new(released);
        let pending = store.for_tenant_code(realm).submit(PKey(0), move |_tx| {
            let _ = started_tx.send(());
            let _ = released.lock().unwrap().recv();
            Ok::<_, Error>(())
        });
        started.recv().unwrap();
        (pending, release)
    };
    let (z, release_z) = held("z");
    let (a0, release_a0) = held("a");
    let job = |store: Store, tag: &'static str| {
        let order = order.clone();
        store.submit(PKey(0), move |tx| {
            tx.execute(
                "INSERT INTO log (p_key, seq) VALUES ($1, (SELECT count(*) FROM log))",
                params![0],
            )?;
            order.lock().unwrap().push(tag.to_string());
            Ok::<_, Error>(())
        })
    };
    let a1 = job(store.for_tenant_code("a"), "a1");
    job(store.for_realm("b"), "b").wait().unwrap();
    job(store.for_tenant_code("c"), "c0").wait().unwrap();
    assert_eq!(*order.lock().unwrap(), ["b", "c0"], "a1 still waits");
    release_a0.send(()).unwrap();
    a0.wait().unwrap();
    a1.wait().unwrap();
    release_z.send(()).unwrap();
    z.wait().unwrap();
    assert_eq!(*order.lock().unwrap(), ["b", "c0", "a1"]);
}

/// Tenant code reads a snapshot and writes only on the latest state: a
/// job that read, then wrote after the writer committed, is run again (no
/// lost update); one whose snapshot keeps going stale runs, after
/// STALE_RETRIES_MAX tries, in an immediate transaction, and commits.
#[test]
fn tenant_code_on_a_stale_snapshot_runs_again() {
    let dir = TempDir::new("stale");
    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(1), SCHEMA).unwrap();
    let before = store.stats().retries;
    // Each of the job's first `stale` runs reads the log's size, has the
    // writer add a row meanwhile, then adds the row it read as next.
    let run = |stale: usize| {
        let (store2, runs) = (
            store.clone(),
            Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        );
        let counted = runs.clone();
        let seq: i64 = store
            .for_tenant_code("t")
            .run(PKey(0), move |tx| {
                let run = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let n: i64 = tx
                    .query_one("SELECT count(*) FROM log", params![])?
                    .get(0)?;
                if run < stale {
                    let w = store2.clone();
                    std::thread::spawn(move || {
                        w.call(PKey(0), |tx| {
                            tx.execute(
                                "INSERT INTO log (p_key, seq) VALUES (0, 1000 + \
                                 (SELECT count(*) FROM log))",
                                params![],
                            )
                        })
                    })
                    .join()
                    .unwrap()?;
                }
                tx.execute("INSERT INTO log (p_key, seq) VALUES (0, $1)", params![n])?;
                Ok::<_, Error>(n)
            })
            .wait()
            .unwrap();
        (seq, runs.load(std::sync::atomic::Ordering::SeqCst))
    };
    // Stale once: run again, on the row the writer added.
    assert_eq!(run(1), (1, 2));
    assert_eq!(store.stats().retries, before + 1);
    // Stale as often as it may be (three times): the fourth run is
    // immediate (had it waited for the writer there, neither could go on).
    let (seq, runs) = run(3);
    assert_eq!(runs, 4);
    assert_eq!(seq, 5, "two rows before, and one per stale run");
    assert_eq!(store.stats().retries, before + 4);
}

/// Two realms' tenant code writing at once: one holds the write lock while
/// the other, which read first, comes to write — it waits at the
/// partition's write gate, and then its snapshot is stale
/// (SQLITE_BUSY_SNAPSHOT), so it runs again, and both commit.
#[test]
fn tenant_code_writing_beside_tenant_code_runs_again() {
    let dir = TempDir::new("busy");
    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(1), SCHEMA).unwrap();
    let (holds_tx, holds) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let a = store.for_tenant_code("a").submit(PKey(0), move |tx| {
        tx.execute("INSERT INTO log (p_key, seq) VALUES (0, 100)", params![])?;
        let _ = holds_tx.send(());
        let _ = released.lock().unwrap().recv();
        Ok::<_, Error>(())
    });
    holds.recv().unwrap();
    let (writing_tx, writing) = std::sync::mpsc::channel::<()>();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let b = store.for_tenant_code("b").submit(PKey(0), move |tx| {
        let run = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let n: i64 = tx
            .query_one("SELECT count(*) FROM log", params![])?
            .get(0)?;
        if run == 0 {
            let _ = writing_tx.send(());
        }
        tx.execute("INSERT INTO log (p_key, seq) VALUES (0, $1)", params![n])?;
        Ok::<_, Error>(n)
    });
    writing.recv().unwrap();
    release.send(()).unwrap();
    a.wait().unwrap();
    assert_eq!(b.wait().unwrap(), 1, "b ran again after a's row");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A snapshot taken while a chain of writes moves round every partition
/// (write `i` on partition `i mod 8`, each acknowledged before the next)
/// holds a prefix of the chain: every partition read at one point. Read
/// one after another instead, a partition read later would hold writes
/// whose predecessors on a partition read earlier are missing.
#[test]
fn a_snapshot_reads_every_partition_at_one_point() {
    const PARTITIONS: u32 = 8;
    const COPIES: usize = 10;
    let dir = TempDir::new("snapshot-src");
    // Durability off: the faster the chain moves, the more a copy read
    // partition by partition would see it move.
    let config = Config::sqlite(dir.path())
        .with_partitions(PARTITIONS)
        .with_durability(Durability::Off);
    let store = Store::open(&config, SCHEMA).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let chain = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seq = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = (seq % i64::from(PARTITIONS)) as u32;
                store
                    .call(PKey(p), move |tx| {
                        tx.execute(
                            "INSERT INTO log (p_key, seq) VALUES ($1, $2)",
                            params![p, seq],
                        )
                    })
                    .unwrap();
                seq += 1;
            }
            seq
        })
    };
    // Let the chain run, then copy in the middle of it, again and again.
    let copies: Vec<TempDir> = (0..COPIES)
        .map(|i| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let snapshot = store.snapshot().unwrap();
            assert_eq!(snapshot.partitions(), PARTITIONS);
            let out = TempDir::new(&format!("snapshot-copy{i}"));
            let files = snapshot.write_to(out.path()).unwrap();
            assert_eq!(files.len(), PARTITIONS as usize);
            assert!(files
                .iter()
                .all(|f| f.bytes > 0 && f.path.starts_with(out.path())));
            // Written to new files only.
            assert!(matches!(
                snapshot.write_to(out.path()),
                Err(Error::Invalid(_))
            ));
            out
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = chain.join().unwrap();
    drop(store);
    let mut before = -1;
    for out in &copies {
        let copy = Store::open(&Config::sqlite(out.path()), SCHEMA).unwrap();
        assert_eq!(copy.partitions(), PARTITIONS);
        let mut seqs: Vec<i64> = copy
            .query("SELECT seq FROM log ORDER BY seq", &[])
            .unwrap()
            .rows
            .iter()
            .map(|r| r.get(0).unwrap())
            .collect();
        seqs.sort_unstable();
        let n = seqs.len() as i64;
        assert!(n > 0 && n < written, "{n} of {written} written");
        let gap = seqs.iter().zip(0..).find(|(s, i)| **s != *i);
        assert!(
            gap.is_none(),
            "not a prefix of the chain: {gap:?} (seq, expected)"
        );
        assert!(n > before, "later copies hold more");
        before = n;
    }
}

/// Procedures a `grouped` task starts in one poll share one group commit,
/// whatever the machine's load: they are queued together, not one at a
/// time racing the executor (an independent batch's writes took one
/// commit each on a loaded CI machine when they were). A blocking wait on
/// one of them inside the task hands them on first, so it cannot hang.
#[test]
fn a_grouped_tasks_procedures_share_one_commit() {
    const WRITES: i64 = 100;
    let dir = TempDir::new("grouped");
    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(1), SCHEMA).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let before = store.stats().commits;
        let writes = (0..WRITES).map(|seq| {
            store.run(PKey(0), move |tx| {
                tx.execute("INSERT INTO log (p_key, seq) VALUES (0, $1)", params![seq])
            })
        });
        let results = tabos_store::grouped(async {
            let writes: Vec<_> = writes.collect();
            let mut all = Vec::new();
            for w in writes {
                all.push(w.await);
            }
            all
        })
        .await;
        assert!(
            results.iter().all(Result::is_ok),
            "{:?}",
            results.iter().find(|r| r.is_err())
        );
        assert_eq!(
            store.stats().commits - before,
            1,
            "one commit for {WRITES} writes"
        );

        let waited = tabos_store::grouped(async {
            let other = store.run(PKey(0), |tx| {
                tx.execute("INSERT INTO log (p_key, seq) VALUES (0, -1)", &[])
            });
            let blocking = store
                .run(PKey(0), |tx| {
                    tx.execute("INSERT INTO log (p_key, seq) VALUES (0, -2)", &[])
                })
                .wait();
            (blocking, other.await)
        })
        .await;
        assert!(waited.0.is_ok() && waited.1.is_ok(), "{waited:?}");
    });
    let n: i64 = store.query("SELECT count(*) FROM log", &[]).unwrap().rows[0]
        .get(0)
        .unwrap();
    assert_eq!(n, WRITES + 2);
}
