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

/// Issue 36, item 1: realms are served fairly on a partition's writer.
/// While one long procedure runs, three long ones of realm a, a short one
/// of realm b and a long one of realm c queue: the short one goes first
/// (it does not wait behind a's procedures, nor share a commit with any),
/// then the long ones by run time charged to their realm — c's before a's
/// second, though a's were queued first.
#[test]
fn realms_take_turns_on_a_partitions_writer() {
    let dir = TempDir::new("fair");
    let store = Store::open(&Config::sqlite(dir.path()).with_partitions(1), SCHEMA).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(released));
    let blocker = store.for_tenant_code("z").submit(PKey(0), move |_tx| {
        let _ = started_tx.send(());
        let _ = released.lock().unwrap().recv();
        Ok::<_, Error>(())
    });
    started.recv().unwrap();
    let job = |store: Store, tag: &'static str, took_ms: u64| {
        let order = order.clone();
        store.submit(PKey(0), move |tx| {
            tx.execute(
                "INSERT INTO log (p_key, seq) VALUES ($1, (SELECT count(*) FROM log))",
                params![0],
            )?;
            std::thread::sleep(std::time::Duration::from_millis(took_ms));
            order.lock().unwrap().push(tag.to_string());
            Ok::<_, Error>(())
        })
    };
    let mut pending = Vec::new();
    for tag in ["a0", "a1", "a2"] {
        pending.push(job(store.for_tenant_code("a"), tag, 20));
    }
    pending.push(job(store.for_realm("b"), "b", 0));
    pending.push(job(store.for_tenant_code("c"), "c0", 20));
    release.send(()).unwrap();
    blocker.wait().unwrap();
    for p in pending {
        p.wait().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["b", "a0", "c0", "a1", "a2"]);
}
