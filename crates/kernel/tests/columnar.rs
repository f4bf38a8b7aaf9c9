//! The columnar engine (issue 43, item 4) gives SQLite's answers: every
//! query it takes, over the kernel's own tables, returns what SQLite
//! returns for it — all realms and one realm's scope — and it is never
//! stale, never past its deadline, and says so when it cannot answer.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tabos_store::{Cap, Engine, Error, ReadLimits, ReadScope, Rows, Store, Value};

use crate::common;
use common::Backend;

/// Events per realm: together above the engine's `ROWS_MIN`, so `Auto`
/// takes it.
const EVENTS_PER_REALM: usize = 60_000;
const PROCS_PER_REALM: usize = 200;

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// proc and proc_event rows for realms "a" and "b": events of 220 pids
/// (20 without a proc row), each pid's seqs rising.
fn fill(s: &Store) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for realm in ["a", "b"] {
        let p = tabos_kernel::realm_partition(realm, s.partitions());
        let mut procs = Vec::new();
        for i in 0..PROCS_PER_REALM {
            let user = ["root", "alice", "bob"][rng.next(3) as usize];
            let kind = ["native", "wasm"][rng.next(2) as usize];
            let cores = if rng.next(4) == 0 {
                Value::Null
            } else {
                Value::Real(rng.next(1000) as f64 / 7.0)
            };
            procs.push(vec![
                Value::Int(p.0 as i64),
                Value::Text(realm.into()),
                Value::Text(format!("p{i}")),
                Value::Int(i as i64),
                Value::Text(kind.into()),
                Value::Text(user.into()),
                cores,
            ]);
        }
        let mut events = Vec::new();
        let mut seqs = vec![0i64; 220];
        for n in 0..EVENTS_PER_REALM {
            let pid = rng.next(220) as usize;
            seqs[pid] += 1;
            let event =
                ["fs_read", "fs_write", "send", "recv", "spawn", "exit"][rng.next(6) as usize];
            let detail = match event {
                "fs_read" | "fs_write" => Value::Text(format!(
                    "/f{} @{} +{}",
                    rng.next(50),
                    rng.next(8) * 4096,
                    rng.next(4096)
                )),
                "send" | "recv" => {
                    let m = rng.next(400);
                    Value::Text(format!("mb{} #{m}-{m} +{}", rng.next(20), rng.next(64)))
                }
                _ if rng.next(2) == 0 => Value::Null,
                _ => Value::Text(format!("node{}", rng.next(3))),
            };
            events.push(vec![
                Value::Int(p.0 as i64),
                Value::Text(realm.into()),
                Value::Text(format!("p{pid}")),
                Value::Int(seqs[pid]),
                Value::Int(1_000_000 + n as i64 * 10 + rng.next(10) as i64),
                Value::Text(event.into()),
                detail,
            ]);
        }
        s.run(p, move |tx| {
            for r in &procs {
                tx.execute(
                    "INSERT INTO proc (p_key, realm, pid, seq, kind, class, program, args, env, \
                     cores, mem_mb, state, spawn_us, user_name, cpu_cores) \
                     VALUES ($1, $2, $3, $4, $5, 'BE', 'x', '[]', '{}', 1, 0, 'exited', 0, $6, $7)",
                    r,
                )?;
            }
            for e in &events {
                tx.execute(
                    "INSERT INTO proc_event (p_key, realm, pid, seq, at_us, event, detail) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    e,
                )?;
            }
            Ok::<_, tabos_store::Error>(())
        })
        .wait()
        .unwrap();
    }
}

fn limits(scope: &ReadScope, engine: Engine) -> ReadLimits {
    ReadLimits {
        scope: scope.clone(),
        time_max: Some(Duration::from_secs(60)),
        engine,
        ..ReadLimits::rows(Cap::Truncate(100_000))
    }
}

fn query(s: &Store, scope: &ReadScope, engine: Engine, sql: &str, params: &[Value]) -> Rows {
    s.query_bounded(sql, params, &limits(scope, engine))
        .unwrap_or_else(|e| panic!("{engine:?}: {sql}: {e}"))
}

/// Equal rows, reals to within rounding (a sum of reals is summed in
/// another order by the other engine).
fn same(a: &Rows, b: &Rows, sql: &str) {
    assert_eq!(a.columns, b.columns, "{sql}");
    assert_eq!(a.len(), b.len(), "{sql}: row counts");
    for (x, y) in a.rows.iter().zip(&b.rows) {
        for (u, v) in x.values().iter().zip(y.values()) {
            match (u, v) {
                (Value::Real(p), Value::Real(q)) => {
                    assert!(
                        (p - q).abs() <= 1e-9 * p.abs().max(1.0),
                        "{sql}: {p} vs {q}"
                    )
                }
                _ => assert_eq!(u, v, "{sql}"),
            }
        }
    }
}

/// The queries of the README's provenance section, and the usage
/// questions, in the shapes the engine takes.
fn queries() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        (
            "SELECT event, count(*) FROM proc_event GROUP BY event ORDER BY event",
            vec![],
        ),
        (
            "SELECT realm, event, count(*) AS n, min(at_us), max(at_us), sum(seq), avg(seq), \
             min(detail), max(detail) FROM proc_event GROUP BY realm, event ORDER BY realm, event",
            vec![],
        ),
        (
            "SELECT pid, count(*) AS n FROM proc_event WHERE event = 'fs_read' \
             GROUP BY pid ORDER BY n DESC, pid LIMIT 10",
            vec![],
        ),
        // Lineage: which procs wrote a file, and what each read before.
        (
            "SELECT DISTINCT w.pid, split_part(r.detail, ' @', 1) AS input \
               FROM proc_event w JOIN proc_event r \
                 ON r.realm = w.realm AND r.pid = w.pid AND r.event = 'fs_read' AND r.seq < w.seq \
              WHERE w.event = 'fs_write' AND split_part(w.detail, ' @', 1) = $1 \
              ORDER BY 1, 2",
            vec![Value::Text("/f3".into())],
        ),
        // Every file a user's procs touched in an interval.
        (
            "SELECT DISTINCT e.event, split_part(e.detail, ' @', 1) AS path \
               FROM proc_event e JOIN proc p ON p.realm = e.realm AND p.pid = e.pid \
              WHERE p.user_name = 'alice' AND e.event IN ('fs_read', 'fs_write') \
                AND e.at_us BETWEEN $1 AND $2 ORDER BY 1, 2",
            vec![Value::Int(1_100_000), Value::Int(1_300_000)],
        ),
        // Where what procs read of a file went: their later sends, and
        // who took them (a left join: sends nobody took).
        (
            "SELECT DISTINCT r.pid, split_part(s.detail, ' #', 1) AS sent_to, v.pid AS taken_by \
               FROM proc_event r \
               JOIN proc_event s ON s.realm = r.realm AND s.pid = r.pid AND s.event = 'send' \
                                AND s.seq > r.seq \
               LEFT JOIN proc_event v ON v.realm = s.realm AND v.event = 'recv' \
                                     AND v.detail = s.detail \
              WHERE r.event = 'fs_read' AND split_part(r.detail, ' @', 1) = '/f7' \
              ORDER BY 1, 2, 3",
            vec![],
        ),
        (
            "SELECT count(*), count(detail), count(DISTINCT detail), sum(at_us) FROM proc_event \
             WHERE detail IS NOT NULL AND seq > 10",
            vec![],
        ),
        (
            "SELECT realm, pid, seq, detail FROM proc_event \
             WHERE NOT (event = 'exit' OR seq < 5) AND detail IS NULL \
             ORDER BY realm, pid, seq LIMIT 50 OFFSET 3",
            vec![],
        ),
        (
            "SELECT e.realm, e.pid, e.seq, p.kind, p.cpu_cores FROM proc_event e \
             LEFT JOIN proc p ON p.realm = e.realm AND p.pid = e.pid \
             WHERE p.pid IS NULL OR p.cpu_cores > 100 ORDER BY 1, 2, 3 LIMIT 200",
            vec![],
        ),
        (
            "SELECT pid, count(*) FROM proc_event GROUP BY pid HAVING count(*) > 560 \
             ORDER BY 2 DESC, 1",
            vec![],
        ),
        (
            "SELECT split_part(detail, ' @', 1) AS path, count(*), min(seq) FROM proc_event \
             WHERE event IN ('fs_read', 'fs_write') GROUP BY path ORDER BY path",
            vec![],
        ),
        (
            "SELECT p.user_name, p.kind, count(*), sum(p.cpu_cores), avg(p.cpu_cores) \
             FROM proc_event e JOIN proc p ON p.realm = e.realm AND p.pid = e.pid \
             WHERE e.event <> 'exit' GROUP BY 1, 2 ORDER BY 1, 2",
            vec![],
        ),
        (
            "SELECT count(*), sum(seq), avg(seq), max(detail) FROM proc_event WHERE event = 'none'",
            vec![],
        ),
        (
            "SELECT event, count(*) FROM proc_event WHERE seq < 0 GROUP BY event",
            vec![],
        ),
        (
            "SELECT event, at_us > 1300000 AS late, count(*) FROM proc_event \
             WHERE event NOT IN ('spawn', 'exit') AND detail >= '/f4' \
             GROUP BY 1, 2 ORDER BY 1, 2",
            vec![],
        ),
    ]
}

#[test]
fn the_columnar_engine_answers_as_sqlite_does() {
    let f = Backend::Sqlite.open().unwrap();
    let s = &f.store;
    fill(s);
    for scope in [ReadScope::All, ReadScope::Realm("a".into())] {
        for (sql, params) in queries() {
            let rows = query(s, &scope, Engine::RowStore, sql, &params);
            let cols = query(s, &scope, Engine::Columnar, sql, &params);
            same(&rows, &cols, sql);
            // Auto, over tables this large, is the columnar engine.
            let before = s.columnar_stats().answered;
            let auto = query(s, &scope, Engine::Auto, sql, &params);
            same(&rows, &auto, sql);
            assert_eq!(s.columnar_stats().answered, before + 1, "{sql}");
        }
    }
    // A realm's scope reads its own rows only.
    let a = ReadScope::Realm("a".into());
    let realms = query(
        s,
        &a,
        Engine::Columnar,
        "SELECT realm, count(*) FROM proc_event GROUP BY realm",
        &[],
    );
    assert_eq!(realms.len(), 1);
    assert_eq!(realms.rows[0].values()[0], Value::Text("a".into()));
    assert_eq!(
        realms.rows[0].values()[1],
        Value::Int(EVENTS_PER_REALM as i64)
    );
    // The snapshots are kept: the same queries again load nothing.
    let loads = s.columnar_stats().loads;
    for (sql, params) in queries() {
        query(s, &ReadScope::All, Engine::Columnar, sql, &params);
    }
    assert_eq!(s.columnar_stats().loads, loads);
}

#[test]
fn a_snapshot_never_goes_stale() {
    let f = Backend::Sqlite.open().unwrap();
    let s = &f.store;
    fill(s);
    let sql = "SELECT event, count(*) FROM proc_event GROUP BY event ORDER BY event";
    let all = ReadScope::All;
    let first = query(s, &all, Engine::Columnar, sql, &[]);
    assert_eq!(first.len(), 6);
    let loads = s.columnar_stats().loads;
    // Unchanged: the snapshot is kept.
    query(s, &all, Engine::Columnar, sql, &[]);
    assert_eq!(s.columnar_stats().loads, loads);
    // A commit to another table leaves it be; one to proc_event is seen.
    let p = tabos_kernel::realm_partition("a", s.partitions());
    s.run(p, move |tx| {
        tx.execute(
            "INSERT INTO realm (p_key, realm, scheduler, created_us) VALUES ($1, 'c', 'fifo', 0)",
            &[Value::Int(p.0 as i64)],
        )
    })
    .wait()
    .unwrap();
    query(s, &all, Engine::Columnar, sql, &[]);
    assert_eq!(s.columnar_stats().loads, loads);
    s.run(p, move |tx| {
        tx.execute(
            "INSERT INTO proc_event (p_key, realm, pid, seq, at_us, event) \
             VALUES ($1, 'a', 'p1', 100000, 5, 'fresh')",
            &[Value::Int(p.0 as i64)],
        )
    })
    .wait()
    .unwrap();
    let after = query(s, &all, Engine::Columnar, sql, &[]);
    same(&query(s, &all, Engine::RowStore, sql, &[]), &after, sql);
    assert_eq!(after.len(), 7);
    assert_eq!(s.columnar_stats().loads, loads + 1);
    // A delete (the retention reaper's kind of change) is seen too.
    s.run(p, move |tx| {
        tx.execute("DELETE FROM proc_event WHERE event = 'fresh'", &[])
    })
    .wait()
    .unwrap();
    let gone = query(s, &all, Engine::Columnar, sql, &[]);
    assert_eq!(gone.len(), 6);
}

#[test]
fn what_the_engine_cannot_take_is_sqlites_and_bounds_hold() {
    let f = Backend::Sqlite.open().unwrap();
    let s = &f.store;
    fill(s);
    let all = ReadScope::All;
    for sql in [
        "SELECT * FROM proc_event LIMIT 3",
        "SELECT count(*) FROM proc_event WHERE detail LIKE '/f1%'",
        "SELECT count(*) FROM proc_event WHERE pid IN (SELECT pid FROM proc)",
        "SELECT seq + 1 FROM proc_event ORDER BY 1 LIMIT 3",
        "SELECT count(*) FROM proc_event WHERE seq = '5'",
        "SELECT count(*) FROM ps",
        "WITH x AS (SELECT pid FROM proc_event) SELECT count(*) FROM x",
    ] {
        // Forced: a clear refusal. Auto: SQLite's answer.
        match s.query_bounded(sql, &[], &limits(&all, Engine::Columnar)) {
            Err(Error::Invalid(why)) => assert!(why.contains("columnar engine"), "{why}"),
            other => panic!("{sql}: {other:?}"),
        }
        let before = s.columnar_stats().answered;
        same(
            &query(s, &all, Engine::RowStore, sql, &[]),
            &query(s, &all, Engine::Auto, sql, &[]),
            sql,
        );
        assert_eq!(s.columnar_stats().answered, before, "{sql}");
    }
    // Small tables stay on SQLite under Auto.
    let before = s.columnar_stats().answered;
    query(
        s,
        &all,
        Engine::Auto,
        "SELECT count(*) FROM proc GROUP BY kind",
        &[],
    );
    assert_eq!(s.columnar_stats().answered, before);
    // SQLite's errors stay SQLite's: bad SQL, a write.
    for sql in ["SELECT nope FROM proc_event", "DELETE FROM proc_event"] {
        assert!(s
            .query_bounded(sql, &[], &limits(&all, Engine::Auto))
            .is_err());
    }
    // The deadline and the cancel flag stop it.
    let sql = "SELECT pid, count(*) FROM proc_event GROUP BY pid";
    let late = ReadLimits {
        time_max: Some(Duration::ZERO),
        ..limits(&all, Engine::Columnar)
    };
    assert!(matches!(
        s.query_bounded(sql, &[], &late),
        Err(Error::Timeout(_))
    ));
    let gone = ReadLimits {
        cancel: Some(Arc::new(AtomicBool::new(true))),
        ..limits(&all, Engine::Columnar)
    };
    assert!(matches!(
        s.query_bounded(sql, &[], &gone),
        Err(Error::Cancelled(_))
    ));
    // Rows and bytes are cut as SQLite cuts them.
    let few = ReadLimits {
        cap: Cap::Truncate(5),
        ..limits(&all, Engine::Columnar)
    };
    let r = s
        .query_bounded(
            "SELECT pid, seq FROM proc_event ORDER BY pid, seq",
            &[],
            &few,
        )
        .unwrap();
    assert_eq!(r.len(), 5);
    assert!(r.truncated);
    let fail = ReadLimits {
        cap: Cap::Fail(5),
        ..limits(&all, Engine::Columnar)
    };
    assert!(matches!(
        s.query_bounded("SELECT pid FROM proc_event", &[], &fail),
        Err(Error::Limit { .. })
    ));
    // Another realm's scope sees none of these rows, and a kernel table
    // outside the tenant views is not there at all.
    let c = ReadScope::Realm("c".into());
    let none = query(
        s,
        &c,
        Engine::Columnar,
        "SELECT count(*) FROM proc_event",
        &[],
    );
    assert_eq!(none.rows[0].values()[0], Value::Int(0));
    assert!(s
        .query_bounded(
            "SELECT count(*) FROM credential",
            &[],
            &limits(&c, Engine::Columnar)
        )
        .is_err());
}

both!(postgres_answers_with_its_own_executor);

fn postgres_answers_with_its_own_executor(b: Backend) {
    let Some(f) = b.open() else { return };
    let all = ReadScope::All;
    let sql = "SELECT count(*) FROM proc_event";
    // Auto is always fine; forcing the columnar engine on PostgreSQL is
    // refused with the reason.
    let n = query(&f.store, &all, Engine::Auto, sql, &[]);
    assert_eq!(n.rows[0].values()[0], Value::Int(0));
    let forced = f
        .store
        .query_bounded(sql, &[], &limits(&all, Engine::Columnar));
    match (b, forced) {
        (Backend::Postgres, Err(Error::Invalid(why))) => {
            assert!(why.contains("PostgreSQL"), "{why}")
        }
        (Backend::Sqlite, Ok(r)) => assert_eq!(r.rows[0].values()[0], Value::Int(0)),
        (b, other) => panic!("{b:?}: {other:?}"),
    }
}

#[test]
fn a_table_written_faster_than_read_is_left_to_sqlite() {
    let f = Backend::Sqlite.open().unwrap();
    let s = &f.store;
    fill(s);
    let all = ReadScope::All;
    let sql = "SELECT event, count(*) FROM proc_event GROUP BY event ORDER BY event";
    let p = tabos_kernel::realm_partition("a", s.partitions());
    let mut n = 0;
    let mut write = || {
        n += 1;
        let seq = 1_000_000 + n;
        s.run(p, move |tx| {
            tx.execute(
                "INSERT INTO proc_event (p_key, realm, pid, seq, at_us, event) \
                 VALUES ($1, 'a', 'p1', $2, 5, 'spawn')",
                &[Value::Int(p.0 as i64), Value::Int(seq)],
            )
        })
        .wait()
        .unwrap();
    };
    // Each query below: (answered by the columnar engine?, loads so far).
    let mut seen = Vec::new();
    let mut ask = |s: &Store| {
        let before = s.columnar_stats();
        let auto = query(s, &all, Engine::Auto, sql, &[]);
        same(&query(s, &all, Engine::RowStore, sql, &[]), &auto, sql);
        let after = s.columnar_stats();
        seen.push((after.answered > before.answered, after.loads > before.loads));
    };
    ask(s); // loads
    write();
    ask(s); // its snapshot went stale unread: SQLite, once
    ask(s); // loads again
    write();
    ask(s); // stale unread again: SQLite twice
    ask(s);
    ask(s); // loads
    ask(s); // read again: kept, and the table's turns are forgotten
    write();
    ask(s); // stale but read twice before: loads at once
    assert_eq!(
        seen,
        vec![
            (true, true),
            (false, false),
            (true, true),
            (false, false),
            (false, false),
            (true, true),
            (true, false),
            (true, true),
        ]
    );
}

#[test]
fn a_join_past_the_engines_bound_stops_there_and_sqlite_keeps_its_deadline() {
    let f = Backend::Sqlite.open().unwrap();
    let s = &f.store;
    fill(s);
    // Every event of a realm with every other: 7.2 billion pairs. The
    // engine stops at its bound (not at memory's end) and says so.
    let sql = "SELECT count(*) FROM proc_event a JOIN proc_event b ON a.realm = b.realm";
    let a = ReadScope::Realm("a".into());
    match s.query_bounded(sql, &[], &limits(&a, Engine::Columnar)) {
        Err(Error::Invalid(why)) => assert!(why.contains("rows of a join"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Auto leaves it to SQLite, which its deadline stops.
    let short = ReadLimits {
        time_max: Some(Duration::from_secs(2)),
        ..limits(&a, Engine::Auto)
    };
    assert!(matches!(
        s.query_bounded(sql, &[], &short),
        Err(Error::Timeout(_))
    ));
}

/// Under `Auto` no query waits for another's snapshot load (perhaps
/// another realm's, for as long as its deadline): while the loader is
/// held, an operator's and a realm's queries are answered by SQLite and
/// load nothing. A forced query waits for the loader and answers once it
/// is free.
#[test]
fn under_auto_no_query_waits_for_another_querys_load() {
    let f = Backend::Sqlite.open().unwrap();
    let s = &f.store;
    fill(s);
    let sql = "SELECT event, count(*) FROM proc_event GROUP BY event ORDER BY event";
    let scopes = [ReadScope::All, ReadScope::Realm("a".into())];
    let want: Vec<Rows> = scopes
        .iter()
        .map(|scope| query(s, scope, Engine::RowStore, sql, &[]))
        .collect();
    // How long a query may take before the test says it waited: far
    // longer than SQLite takes, so only waiting for the loader reaches it.
    const WAITED: Duration = Duration::from_secs(120);
    std::thread::scope(|t| {
        let (forced_tx, forced_rx) = std::sync::mpsc::channel();
        s.with_columnar_loads_held(|| {
            let before = s.columnar_stats();
            for (scope, want) in scopes.iter().zip(&want) {
                let (tx, rx) = std::sync::mpsc::channel();
                t.spawn(move || tx.send(query(s, scope, Engine::Auto, sql, &[])));
                let auto = rx
                    .recv_timeout(WAITED)
                    .expect("an Auto query waited for another query's load");
                same(want, &auto, sql);
            }
            let after = s.columnar_stats();
            assert_eq!(
                (after.answered, after.loads),
                (before.answered, before.loads),
                "SQLite answered, nothing was loaded"
            );
            let forced_tx = forced_tx.clone();
            t.spawn(move || forced_tx.send(query(s, &ReadScope::All, Engine::Columnar, sql, &[])));
            // It cannot end while the loader is held.
            assert!(
                forced_rx.recv_timeout(Duration::from_millis(300)).is_err(),
                "a forced query answered without the loader"
            );
        });
        let forced = forced_rx
            .recv_timeout(WAITED)
            .expect("the forced query ends");
        same(&want[0], &forced, sql);
        let end = s.columnar_stats();
        assert!(end.loads > 0 && end.answered > 0, "the engine answered it");
    });
}
