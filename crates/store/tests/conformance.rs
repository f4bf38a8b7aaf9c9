//! The backend conformance suite: every test runs on SQLite and on PostgreSQL
//! and must behave identically on both.

mod common;

use std::sync::{Arc, Barrier};

use common::Backend;
use tabos_store::{params, Error, Migration, PKey, Rows, Store, Value};

const SCHEMA: &[Migration] = &[Migration {
    version: 1,
    name: "test",
    sqlite: "CREATE TABLE item (p_key INTEGER NOT NULL, id INTEGER NOT NULL, v TEXT, \
             PRIMARY KEY (p_key, id));
             CREATE TABLE counter (p_key INTEGER NOT NULL, id INTEGER NOT NULL, n INTEGER NOT NULL, \
             PRIMARY KEY (p_key, id));
             CREATE TABLE typed (p_key INTEGER NOT NULL, i INTEGER, r REAL, t TEXT, b BLOB);",
    postgres: "CREATE TABLE item (p_key INTEGER NOT NULL, id BIGINT NOT NULL, v TEXT, \
               PRIMARY KEY (p_key, id));
               CREATE TABLE counter (p_key INTEGER NOT NULL, id BIGINT NOT NULL, n BIGINT NOT NULL, \
               PRIMARY KEY (p_key, id));
               CREATE TABLE typed (p_key INTEGER NOT NULL, i BIGINT, r DOUBLE PRECISION, t TEXT, b BYTEA);",
}];

fn ids(store: &Store) -> Vec<i64> {
    let rows = store.query("SELECT id FROM item ORDER BY id", &[]).unwrap();
    rows.iter().map(|r| r.get::<i64>(0).unwrap()).collect()
}

fn insert(store: &Store, p: u32, id: i64) -> tabos_store::Pending<(), Error> {
    store.submit(PKey(p), move |tx| {
        tx.execute(
            "INSERT INTO item (p_key, id, v) VALUES ($1, $2, 'x')",
            params![p, id],
        )?;
        Ok(())
    })
}

/// Holds partition 0's executor inside a first procedure until the
/// returned gate is passed (then wait on the blocker): procedures submitted
/// meanwhile queue up behind it.
fn hold_executor(store: &Store) -> (tabos_store::Pending<(), Error>, Arc<Barrier>) {
    let entered = Arc::new(Barrier::new(2));
    let gate = Arc::new(Barrier::new(2));
    let (e2, g2) = (entered.clone(), gate.clone());
    let mut first = true;
    let blocker = store.submit(PKey(0), move |_tx| {
        if std::mem::take(&mut first) {
            e2.wait();
            g2.wait();
        }
        Ok::<_, Error>(())
    });
    entered.wait();
    (blocker, gate)
}

fn atomicity(backend: Backend) {
    let Some(t) = backend.open("atomicity", SCHEMA) else {
        return;
    };
    let store = &t.store;
    // Committed beforehand, so that `d` below conflicts with it on both
    // backends whatever order the pool runs a..d in.
    insert(store, 0, 10).wait().unwrap();
    // Hold the executor inside a first procedure so that the following ones
    // queue up and are committed together as one batch on SQLite.
    let (blocker, gate) = hold_executor(store);
    let before = store.stats();
    let a = insert(store, 0, 1);
    let b = store.submit(PKey(0), |tx| {
        tx.execute("INSERT INTO item (p_key, id, v) VALUES (0, 2, 'x')", &[])?;
        tx.notify("atomicity", "from-b")?;
        Err::<(), _>(Error::Aborted("b changes its mind".into()))
    });
    let c = insert(store, 0, 3);
    let d = insert(store, 0, 10); // duplicate: constraint violation
    gate.wait();
    blocker.wait().unwrap();
    a.wait().unwrap();
    assert!(matches!(b.wait(), Err(Error::Aborted(_))));
    c.wait().unwrap();
    let e = d.wait().unwrap_err();
    assert!(e.is_unique_violation(), "{e}");
    assert!(
        e.to_string().contains("INSERT INTO item"),
        "error names its statement: {e}"
    );
    assert_eq!(ids(store), vec![1, 3, 10]);
    let after = store.stats();
    assert_eq!(after.committed - before.committed, 3, "blocker, a and c");
    assert_eq!(after.failed - before.failed, 2, "b and d");
    if store.kind() == tabos_store::BackendKind::Sqlite {
        // a..d arrived during the blocker's batch and were committed as one.
        assert_eq!(after.commits - before.commits, 2);
    }
}

/// Read-then-write increments: a lost update would show as a short count.
fn isolation(backend: Backend) {
    let Some(t) = backend.open("isolation", SCHEMA) else {
        return;
    };
    let store = t.store.clone();
    store
        .call(PKey(1), |tx| {
            tx.execute("INSERT INTO counter (p_key, id, n) VALUES (1, 1, 0)", &[])
        })
        .unwrap();
    let threads = 8;
    let per_thread = 10_000;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..per_thread {
                    store
                        .call(PKey(1), |tx| {
                            let n: i64 = tx.query_scalar(
                                "SELECT n FROM counter WHERE p_key = 1 AND id = 1",
                                &[],
                            )?;
                            tx.execute(
                                "UPDATE counter SET n = $1 WHERE p_key = 1 AND id = 1",
                                params![n + 1],
                            )
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let n: i64 = store
        .query("SELECT n FROM counter WHERE id = 1", &[])
        .unwrap()
        .rows[0]
        .get(0)
        .unwrap();
    assert_eq!(n, threads * per_thread);
}

fn notifications(backend: Backend) {
    let Some(t) = backend.open("notify", SCHEMA) else {
        return;
    };
    let store = t.store.clone();
    let mut sub = store.subscribe("chan");

    // Not before the commit: while the procedure is inside its transaction,
    // nothing has been delivered.
    let inside = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    let (i2, r2) = (inside.clone(), release.clone());
    let mut first = true;
    let pending = store.submit(PKey(0), move |tx| {
        tx.notify("chan", "committed-1")?;
        if std::mem::take(&mut first) {
            i2.wait();
            r2.wait();
        }
        Ok::<_, Error>(())
    });
    inside.wait();
    assert_eq!(sub.try_recv().unwrap(), None, "delivered before commit");
    release.wait();
    pending.wait().unwrap();
    assert_eq!(sub.blocking_recv().unwrap().payload, "committed-1");

    // Never for a rollback: the rolled-back one must not arrive before the
    // next committed one.
    let r = store.call(PKey(0), |tx| {
        tx.notify("chan", "rolled-back")?;
        Err::<(), _>(Error::Aborted("no".into()))
    });
    assert!(r.is_err());
    let r = store.call(PKey(0), |tx| {
        tx.notify("chan", "fails-in-sql")?;
        tx.execute("INSERT INTO nonexistent VALUES (1)", &[])?;
        Ok::<_, Error>(())
    });
    assert!(r.is_err());
    store
        .call(PKey(0), |tx| tx.notify("chan", "committed-2"))
        .unwrap();
    assert_eq!(sub.blocking_recv().unwrap().payload, "committed-2");

    // In commit order, under concurrent writers: each procedure increments a
    // counter and notifies the value it wrote, so commit order is value order.
    store
        .call(PKey(0), |tx| {
            tx.execute("INSERT INTO counter (p_key, id, n) VALUES (0, 7, 0)", &[])
        })
        .unwrap();
    let writers = 4;
    let each = 250;
    let handles: Vec<_> = (0..writers)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..each {
                    store
                        .call(PKey(0), |tx| {
                            let n: i64 = tx.query_scalar(
                                "SELECT n FROM counter WHERE p_key = 0 AND id = 7",
                                &[],
                            )?;
                            tx.execute(
                                "UPDATE counter SET n = $1 WHERE p_key = 0 AND id = 7",
                                params![n + 1],
                            )?;
                            tx.notify("chan", &(n + 1).to_string())
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for expected in 1..=(writers * each) {
        let got = sub.blocking_recv().unwrap().payload;
        assert_eq!(
            got,
            expected.to_string(),
            "notifications out of commit order"
        );
    }
    assert_eq!(sub.try_recv().unwrap(), None);

    // Bad channel names and oversized payloads are errors, and roll back.
    let big = "x".repeat(tabos_store::feed::NOTIFY_PAYLOAD_BYTES_MAX + 1);
    let e = store
        .call(PKey(0), move |tx| tx.notify("chan", &big))
        .unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    let e = store.call(PKey(0), |tx| tx.notify("", "x")).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
}

fn types_round_trip(backend: Backend) {
    let Some(t) = backend.open("types", SCHEMA) else {
        return;
    };
    let store = &t.store;
    let blob = vec![0u8, 1, 2, 255];
    let b2 = blob.clone();
    store
        .call(PKey(0), move |tx| {
            tx.execute(
                "INSERT INTO typed (p_key, i, r, t, b) VALUES (0, $1, $2, $3, $4)",
                params![-42i64, 2.5, "héllo", b2.clone()],
            )?;
            tx.execute(
                "INSERT INTO typed (p_key, i, r, t, b) VALUES (0, $1, $2, $3, $4)",
                &[Value::Null, Value::Null, Value::Null, Value::Null],
            )
        })
        .unwrap();
    let rows = store
        .query("SELECT i, r, t, b FROM typed ORDER BY i NULLS LAST", &[])
        .unwrap();
    assert_eq!(rows.columns.to_vec(), ["i", "r", "t", "b"]);
    assert_eq!(
        rows.rows[0].values(),
        &[
            Value::Int(-42),
            Value::Real(2.5),
            Value::Text("héllo".into()),
            Value::Blob(blob)
        ]
    );
    assert!(rows.rows[1].values().iter().all(Value::is_null));
    // Aggregates come back as integers on both backends.
    let r = store
        .query("SELECT count(*) AS c, sum(i) AS s FROM typed", &[])
        .unwrap();
    assert_eq!(r.rows[0].values(), &[Value::Int(2), Value::Int(-42)]);
    // Parameters may be written out of order.
    let r = store
        .query("SELECT $2 || '-' || $1 AS s", params!["a", "b"])
        .unwrap();
    assert_eq!(r.rows[0].get::<String>(0).unwrap(), "b-a");
}

fn bad_input(backend: Backend) {
    let Some(t) = backend.open("badinput", SCHEMA) else {
        return;
    };
    let store = &t.store;
    insert(store, 0, 1).wait().unwrap();

    // A syntax error names its statement and the position of the bad token.
    let sql = "SELECT id FROM item WHERE id = 1 AND AND v = 'x'";
    let e = store.query(sql, &[]).unwrap_err();
    let s = e.as_sql().unwrap_or_else(|| panic!("not a SQL error: {e}"));
    assert_eq!(s.statement, sql);
    assert_eq!(s.position, Some(sql.find("AND v").unwrap()), "{e}");
    assert!(e.to_string().contains("syntax error"), "{e}");
    // The same inside a procedure, which then changes nothing.
    let e = store
        .call(PKey(0), |tx| {
            tx.execute("INSERT INTO item (p_key, id, v) VALUES (0, 5, 'y')", &[])?;
            tx.execute("UPDATE item SET v = WHERE id = 1", &[])
        })
        .unwrap_err();
    assert!(e.as_sql().is_some_and(|s| s.position.is_some()), "{e}");

    // Unknown partition.
    let e = insert(store, 99, 9).wait().unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnknownPartition {
                p_key: 99,
                partitions: 2
            }
        ),
        "{e}"
    );

    // Writes through the read-only query path are refused.
    for w in [
        "INSERT INTO item (p_key, id, v) VALUES (0, 7, 'z')",
        "DELETE FROM item",
        "UPDATE item SET v = 'w'",
        "DROP TABLE item",
        "CREATE TABLE sneaky (x INTEGER)",
    ] {
        let e = store.query(w, &[]).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{w}: {e}");
    }
    // A wrong parameter count is an error, not a panic.
    assert!(store.query("SELECT $1", &[]).is_err());
    // Nothing changed.
    assert_eq!(ids(store), vec![1]);
    let v: String = store.query("SELECT v FROM item", &[]).unwrap().rows[0]
        .get(0)
        .unwrap();
    assert_eq!(v, "x");
}

fn panicking_procedure_is_an_error(backend: Backend) {
    let Some(t) = backend.open("panic", SCHEMA) else {
        return;
    };
    let store = &t.store;
    let e = store
        .call(PKey(0), |tx| -> Result<(), Error> {
            tx.execute("INSERT INTO item (p_key, id, v) VALUES (0, 1, 'p')", &[])?;
            panic!("bug in a procedure");
        })
        .unwrap_err();
    assert!(e.to_string().contains("bug in a procedure"), "{e}");
    // The executor survived and the panicking procedure left nothing.
    insert(store, 0, 2).wait().unwrap();
    assert_eq!(ids(store), vec![2]);
}

fn migrations_apply_once_and_mismatch_is_refused(backend: Backend) {
    let Some((config, _dir)) = backend.config("migrate") else {
        return;
    };
    let v2: Vec<Migration> = SCHEMA
        .iter()
        .copied()
        .chain([Migration {
            version: 2,
            name: "second",
            sqlite: "ALTER TABLE item ADD COLUMN w INTEGER",
            postgres: "ALTER TABLE item ADD COLUMN w BIGINT",
        }])
        .collect();
    {
        let store = Store::open(&config, SCHEMA).unwrap();
        insert(&store, 0, 1).wait().unwrap();
    }
    {
        // Reopening with one more migration applies just that one.
        let store = Store::open(&config, &v2).unwrap();
        let rows: Rows = store
            .query(
                "SELECT version, name FROM schema_version ORDER BY version",
                &[],
            )
            .unwrap();
        let names: Vec<String> = rows.iter().map(|r| r.get(1).unwrap()).collect();
        // SQLite records migrations per partition file; the view unions them.
        assert!(names.iter().all(|n| n == "test" || n == "second"));
        assert!(names.contains(&"second".to_string()));
        assert_eq!(ids(&store), vec![1]);
        store
            .query("SELECT w FROM item", &[])
            .expect("column from migration 2");
    }
    // A build whose migration 2 has another name is refused.
    let mut renamed = v2.clone();
    renamed[1].name = "other";
    let e = Store::open(&config, &renamed).unwrap_err();
    assert!(matches!(e, Error::Migration(_)), "{e}");
    // So is an older build that does not know migration 2.
    let e = Store::open(&config, SCHEMA).unwrap_err();
    assert!(matches!(e, Error::Migration(_)), "{e}");
    // And another partition count: a database keeps the one it was made
    // with, which any opener that names none gets (a node of any size
    // joins).
    let e = Store::open(&config.clone().with_partitions(3), &v2).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("has 2 partitions, not 3"), "{e}");
    let mut any = config.clone();
    any.partitions = None;
    assert_eq!(Store::open(&any, &v2).unwrap().partitions(), 2);
    // A gap in versions is refused before touching anything.
    let mut gap = v2.clone();
    gap[1].version = 3;
    assert!(matches!(
        Store::open(&config, &gap),
        Err(Error::Migration(_))
    ));
}

fn async_submit_and_partitions(backend: Backend) {
    let Some(t) = backend.open("async", SCHEMA) else {
        return;
    };
    let store = t.store.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut pending = Vec::new();
        for i in 0..200i64 {
            let p = (i % 2) as u32;
            pending.push(store.submit(PKey(p), move |tx| {
                tx.execute(
                    "INSERT INTO item (p_key, id, v) VALUES ($1, $2, 'a')",
                    params![p, i],
                )
            }));
        }
        for p in pending {
            assert_eq!(p.await.unwrap(), 1);
        }
    });
    let r = t
        .store
        .query(
            "SELECT p_key, count(*) FROM item GROUP BY p_key ORDER BY p_key",
            &[],
        )
        .unwrap();
    let counts: Vec<(i64, i64)> = r
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert_eq!(counts, vec![(0, 100), (1, 100)]);
}

conformance!(
    atomicity,
    isolation,
    notifications,
    types_round_trip,
    bad_input,
    panicking_procedure_is_an_error,
    migrations_apply_once_and_mismatch_is_refused,
    async_submit_and_partitions,
);

fn capped_queries_truncate(backend: Backend) {
    let Some(t) = backend.open("capped", SCHEMA) else {
        return;
    };
    for id in 0..5 {
        insert(&t.store, 0, id).wait().unwrap();
    }
    let r = t
        .store
        .query_capped("SELECT id FROM item ORDER BY id", &[], 3)
        .unwrap();
    assert_eq!(r.len(), 3);
    assert!(r.truncated);
    let r = t
        .store
        .query_capped("SELECT id FROM item ORDER BY id", &[], 5)
        .unwrap();
    assert_eq!(r.len(), 5);
    assert!(!r.truncated);
    assert!(!t.store.query("SELECT id FROM item", &[]).unwrap().truncated);
}

conformance!(capped_queries_truncate);

/// Client-reachable reads under `ReadLimits`: a query past its deadline is
/// stopped with `Timeout`, a cancelled one with `Cancelled`, a result past
/// its bytes is cut (truncating cap) or refused (failing cap); the store
/// answers the next query as before.
fn bounded_reads(backend: Backend) {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;
    use tabos_store::{Cap, ReadLimits};
    let Some(t) = backend.open("bounded", SCHEMA) else {
        return;
    };
    for id in 0..10 {
        insert(&t.store, 0, id).wait().unwrap();
    }
    let endless = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) \
                   SELECT count(*) FROM r";
    let timed = ReadLimits {
        time_max: Some(Duration::from_millis(200)),
        ..ReadLimits::rows(Cap::Truncate(10))
    };
    let e = t.store.query_bounded(endless, &[], &timed).unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    // A cancelled query stops at its next check (a row, or SQLite's
    // progress handler).
    let cancelled = ReadLimits {
        cancel: Some(Arc::new(AtomicBool::new(true))),
        ..timed.clone()
    };
    let e = t
        .store
        .query_bounded("SELECT id FROM item", &[], &cancelled)
        .unwrap_err();
    assert!(matches!(e, Error::Cancelled(_)), "{e}");
    // 10 rows of 4 bytes of text plus an 8-byte id: 12 bytes each.
    let sql = "SELECT id, 'abcd' FROM item ORDER BY id";
    let small = ReadLimits {
        bytes_max: 30,
        ..ReadLimits::rows(Cap::Truncate(100))
    };
    let r = t.store.query_bounded(sql, &[], &small).unwrap();
    assert_eq!(r.len(), 2);
    assert!(r.truncated);
    let failing = ReadLimits {
        bytes_max: 30,
        ..ReadLimits::rows(Cap::Fail(100))
    };
    let e = t.store.query_bounded(sql, &[], &failing).unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    assert_eq!(ids(&t.store).len(), 10);
}

conformance!(bounded_reads);

/// `Store::read`: a read-only procedure on a read connection sees every
/// committed write, one snapshot throughout, never waits for the executor,
/// and may neither write nor notify.
fn read_only_procedures(backend: Backend) {
    let Some(t) = backend.open("readonly", SCHEMA) else {
        return;
    };
    let store = t.store.clone();
    let count = |tx: &mut dyn tabos_store::Tx| -> Result<i64, Error> {
        tx.query_scalar("SELECT count(*) FROM item WHERE p_key = $1", params![0])
    };
    // Reads its own acknowledged writes.
    insert(&store, 0, 1).wait().unwrap();
    assert_eq!(store.read(PKey(0), count).wait().unwrap(), 1);
    // One snapshot: a write committed while the read is open is not seen
    // by its later statements.
    let (entered, gate) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let (e2, g2, s2) = (entered.clone(), gate.clone(), store.clone());
    let reader = std::thread::spawn(move || {
        s2.read(PKey(0), move |tx| {
            let before = count(tx)?;
            e2.wait();
            g2.wait();
            Ok::<_, Error>((before, count(tx)?))
        })
        .wait()
    });
    entered.wait();
    insert(&store, 0, 2).wait().unwrap();
    gate.wait();
    assert_eq!(reader.join().unwrap().unwrap(), (1, 1));
    assert_eq!(store.read(PKey(0), count).wait().unwrap(), 2);
    // A read does not wait for the executor: one procedure holds it.
    let (blocker, gate) = hold_executor(&store);
    assert_eq!(store.read(PKey(0), count).wait().unwrap(), 2);
    gate.wait();
    blocker.wait().unwrap();
    // Writes and notifications are refused, and change nothing.
    let e = store
        .read(PKey(0), |tx| {
            tx.execute("INSERT INTO item (p_key, id, v) VALUES (0, 3, 'x')", &[])
        })
        .wait()
        .unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    let e = store
        .read(PKey(0), |tx| tx.notify("c", "x"))
        .wait()
        .unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    assert_eq!(ids(&store), [1, 2]);
    // A partition that does not exist.
    let e = store.read(PKey(99), count).wait().unwrap_err();
    assert!(matches!(e, Error::UnknownPartition { .. }), "{e}");
    // Bad SQL is an error like any other.
    let e = store
        .read(PKey(0), |tx| tx.query("SELEC nonsense", &[]))
        .wait()
        .unwrap_err();
    assert!(matches!(e, Error::Sql(_)), "{e}");
}

conformance!(read_only_procedures);

/// Procedures of the race below, per kind of caller.
const RACE_PROCS_PER_CALLER: i64 = 150;
/// Every RACE_FAIL_EVERY-th procedure writes, notifies, then fails.
const RACE_FAIL_EVERY: i64 = 7;

/// One procedure of the race: bumps its partition's counter, inserts row
/// `id` carrying the counter's new value, and notifies `race-p<p>` with
/// "<value> <id>" — or, for a failing id, does all that and then fails.
fn race_proc(p: u32, id: i64) -> impl FnMut(&mut dyn tabos_store::Tx) -> Result<i64, Error> {
    move |tx| {
        let n: i64 = tx
            .query_opt(
                "SELECT n FROM counter WHERE p_key = $1 AND id = 0",
                params![p],
            )?
            .expect("the counter row")
            .get(0)?;
        tx.execute(
            "UPDATE counter SET n = $2 WHERE p_key = $1 AND id = 0",
            params![p, n + 1],
        )?;
        tx.execute(
            "INSERT INTO item (p_key, id, v) VALUES ($1, $2, $3)",
            params![p, id, (n + 1).to_string()],
        )?;
        tx.notify(&format!("race-p{p}"), &format!("{} {id}", n + 1))?;
        if id % RACE_FAIL_EVERY == 0 {
            return Err(Error::Aborted(format!("{id} fails after writing")));
        }
        Ok(n + 1)
    }
}

/// Issue 18, item 5: callers on the idle-partition path (`call` from
/// threads, `run` from async tasks: they run on their own thread when the
/// partition is idle) race bursts of `submit`ted procedures, which form
/// group-commit batches. No procedure is lost or run twice, a failing one
/// leaves nothing, and each partition's notifications arrive after their
/// commit, every committed one exactly once, in commit order.
fn inline_callers_race_batches(backend: Backend) {
    let Some(t) = backend.open("race", SCHEMA) else {
        return;
    };
    let store = t.store.clone();
    for p in 0..2u32 {
        store
            .call(PKey(p), move |tx| {
                tx.execute(
                    "INSERT INTO counter (p_key, id, n) VALUES ($1, 0, 0)",
                    params![p],
                )
            })
            .unwrap();
    }
    // Collectors: check each notification against a fresh snapshot (its
    // row must already be committed), until the closing "end".
    let collectors: Vec<_> = (0..2u32)
        .map(|p| {
            let mut sub = store.subscribe(&format!("race-p{p}"));
            let store = store.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let note = sub.blocking_recv().expect("no lag at this volume");
                    if note.payload == "end" {
                        return got;
                    }
                    let (n, id) = note.payload.split_once(' ').unwrap();
                    let (n, id): (i64, i64) = (n.parse().unwrap(), id.parse().unwrap());
                    let seen = store
                        .read(PKey(p), move |tx| {
                            tx.query_opt(
                                "SELECT v FROM item WHERE p_key = $1 AND id = $2",
                                params![p, id],
                            )
                        })
                        .wait()
                        .unwrap();
                    assert_eq!(
                        seen.map(|r| r.get::<String>(0).unwrap()),
                        Some(n.to_string()),
                        "notification of {id} before its commit"
                    );
                    got.push((n, id));
                }
            })
        })
        .collect();

    // Ids by caller kind: 1 + k * 10_000 + i, so no two callers share one.
    let next = |k: i64, i: i64| 1 + k * 10_000 + i;
    let mut callers = Vec::new();
    for k in 0..3i64 {
        let store = store.clone();
        callers.push(std::thread::spawn(move || {
            (0..RACE_PROCS_PER_CALLER)
                .map(|i| {
                    let (id, p) = (next(k, i), (i % 2) as u32);
                    (id, store.call(PKey(p), race_proc(p, id)).is_ok())
                })
                .collect::<Vec<_>>()
        }));
    }
    for k in 3..5i64 {
        let store = store.clone();
        callers.push(std::thread::spawn(move || {
            let mut out = Vec::new();
            for burst in (0..RACE_PROCS_PER_CALLER).collect::<Vec<_>>().chunks(16) {
                let pending: Vec<_> = burst
                    .iter()
                    .map(|&i| {
                        let (id, p) = (next(k, i), (i % 2) as u32);
                        (id, store.submit(PKey(p), race_proc(p, id)))
                    })
                    .collect();
                out.extend(pending.into_iter().map(|(id, w)| (id, w.wait().is_ok())));
            }
            out
        }));
    }
    {
        let store = store.clone();
        callers.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .unwrap();
            rt.block_on(async move {
                let tasks: Vec<_> = (0..4i64)
                    .map(|task| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            let mut out = Vec::new();
                            for i in (task..RACE_PROCS_PER_CALLER).step_by(4) {
                                let (id, p) = (next(5, i), (i % 2) as u32);
                                out.push((id, store.run(PKey(p), race_proc(p, id)).await.is_ok()));
                            }
                            out
                        })
                    })
                    .collect();
                let mut out = Vec::new();
                for t in tasks {
                    out.extend(t.await.unwrap());
                }
                out
            })
        }));
    }
    let mut acked = std::collections::BTreeSet::new();
    for c in callers {
        for (id, ok) in c.join().unwrap() {
            assert_eq!(ok, id % RACE_FAIL_EVERY != 0, "procedure {id}'s outcome");
            if ok {
                acked.insert(id);
            }
        }
    }
    for p in 0..2u32 {
        store
            .call(PKey(p), move |tx| tx.notify(&format!("race-p{p}"), "end"))
            .unwrap();
    }

    // The rows are exactly the acknowledged procedures'.
    let rows: Vec<i64> = ids(&store);
    assert_eq!(rows.len(), acked.len(), "rows vs acknowledged procedures");
    assert_eq!(
        rows.into_iter().collect::<std::collections::BTreeSet<_>>(),
        acked
    );
    for (p, c) in collectors.into_iter().enumerate() {
        let got = c.join().unwrap();
        let n: i64 = store
            .query(
                "SELECT n FROM counter WHERE p_key = $1 AND id = 0",
                params![p as i64],
            )
            .unwrap()
            .rows[0]
            .get(0)
            .unwrap();
        // Every committed procedure notified once, in commit order (the
        // counter's order), and nothing of the failed ones arrived.
        let values: Vec<i64> = got.iter().map(|(v, _)| *v).collect();
        assert_eq!(
            values,
            (1..=n).collect::<Vec<_>>(),
            "partition {p}'s notifications"
        );
        assert!(got.iter().all(|(_, id)| acked.contains(id)));
    }
}

conformance!(inline_callers_race_batches);
