//! Behaviour specific to the PostgreSQL backend: serialization failures are
//! retried until both transactions' effects are correct.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};

use tabos_store::{params, Config, Error, Migration, PKey, Store};

const SCHEMA: &[Migration] = &[Migration {
    version: 1,
    name: "oncall",
    sqlite: "CREATE TABLE oncall (p_key INTEGER NOT NULL, doctor TEXT NOT NULL, on_call INTEGER NOT NULL)",
    postgres: "CREATE TABLE oncall (p_key INTEGER NOT NULL, doctor TEXT NOT NULL, on_call INTEGER NOT NULL, \
               PRIMARY KEY (p_key, doctor))",
}];

/// Two stores on one database (two nodes), its two doctors off call.
fn two_nodes_with_doctors(url: String) -> (Store, Store) {
    let config = Config::postgres(url).with_partitions(1).with_connections(4);
    let store = Store::open(&config, SCHEMA).unwrap();
    let other_node = Store::open(&config, SCHEMA).unwrap();
    store
        .call(PKey(0), |tx| {
            tx.execute(
                "INSERT INTO oncall (p_key, doctor, on_call) VALUES (0, 'alice', 0), (0, 'bob', 0)",
                &[],
            )
        })
        .unwrap();
    (store, other_node)
}

/// The classic write-skew: two procedures each read both rows and then
/// update a different one. Forced to overlap by a barrier on their first
/// attempt, SERIALIZABLE aborts one with 40001; the store retries it, and the
/// retry sees the other's commit.
#[test]
fn serialization_conflicts_are_retried() {
    let Some(url) = common::pg_database() else {
        return;
    };
    // Two stores on one database: two nodes. (Within one node, a realm's
    // procedures on a partition take turns, so the conflict has to come from
    // another node.)
    let (store, other_node) = two_nodes_with_doctors(url);
    let both_read = Arc::new(Barrier::new(2));
    let attempts = Arc::new(AtomicU32::new(0));
    let proc_for = |me: &'static str| {
        let both_read = both_read.clone();
        let attempts = attempts.clone();
        let mut first = true;
        move |tx: &mut dyn tabos_store::Tx| {
            attempts.fetch_add(1, Ordering::Relaxed);
            // Each doctor goes on call by incrementing the total it read.
            let total: i64 = tx.query_scalar("SELECT sum(on_call) FROM oncall", &[])?;
            if std::mem::take(&mut first) {
                both_read.wait();
            }
            tx.execute(
                "UPDATE oncall SET on_call = $1 WHERE doctor = $2",
                params![total + 1, me],
            )?;
            Ok::<_, Error>(total)
        }
    };
    let retries_before = store.stats().retries + other_node.stats().retries;
    let a = store.submit(PKey(0), proc_for("alice"));
    let b = other_node.submit(PKey(0), proc_for("bob"));
    let (ra, rb) = (a.wait().unwrap(), b.wait().unwrap());
    let retries_after = store.stats().retries + other_node.stats().retries;
    assert!(retries_after > retries_before, "no conflict was retried");
    assert!(attempts.load(Ordering::Relaxed) >= 3);
    // Serial outcome: one saw 0, the other saw the first's 1.
    let mut seen = [ra, rb];
    seen.sort();
    assert_eq!(seen, [0, 1]);
    let rows = store
        .query("SELECT doctor, on_call FROM oncall ORDER BY doctor", &[])
        .unwrap();
    let mut values: Vec<i64> = rows.iter().map(|r| r.get(1).unwrap()).collect();
    values.sort();
    assert_eq!(values, vec![1, 2]);
}

#[test]
fn unreachable_server_is_a_clear_error() {
    // Port 1 on loopback: nothing listens there.
    let e = Store::open(
        &Config::postgres("postgres://postgres@127.0.0.1:1/none").with_partitions(1),
        SCHEMA,
    )
    .unwrap_err();
    assert!(e.to_string().contains("cannot connect"), "{e}");
}

/// Notifications reach the processes that have subscribers for their
/// channel and no others (each channel is a PostgreSQL channel of its own,
/// LISTENed while subscribed), and a subscription made is delivered at
/// once: what commits after it returns arrives.
#[test]
fn notifications_reach_only_the_nodes_that_wait_for_them() {
    let Some(url) = common::pg_database() else {
        return;
    };
    let config = Config::postgres(url).with_partitions(1).with_connections(2);
    let writer = Store::open(&config, SCHEMA).unwrap();
    let waiter = Store::open(&config, SCHEMA).unwrap();
    let bystander = Store::open(&config, SCHEMA).unwrap();
    let mut sub = waiter.subscribe("wanted");
    // Committed right after the subscription returned: delivered.
    for i in 0..20 {
        writer
            .call(PKey(0), move |tx| {
                tx.notify("wanted", &i.to_string())?;
                tx.notify("unwanted", "x")
            })
            .unwrap();
    }
    for i in 0..20 {
        assert_eq!(sub.blocking_recv().unwrap().payload, i.to_string());
    }
    // A marker on a channel the bystander then waits for: once it has it,
    // everything committed before has been through PostgreSQL.
    let mut marker = bystander.subscribe("marker");
    writer.call(PKey(0), |tx| tx.notify("marker", "m")).unwrap();
    marker.blocking_recv().unwrap();
    assert_eq!(
        bystander.stats().notifications,
        1,
        "the bystander got only its marker"
    );
    assert_eq!(
        waiter.stats().notifications,
        20,
        "the waiter got only its channel"
    );
    // Unsubscribed: no longer delivered.
    drop(sub);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while waiter.feed_delivers("wanted") {
        assert!(std::time::Instant::now() < deadline, "still LISTENing");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    writer
        .call(PKey(0), |tx| tx.notify("wanted", "late"))
        .unwrap();
    let mut marker = waiter.subscribe("marker");
    writer.call(PKey(0), |tx| tx.notify("marker", "m")).unwrap();
    marker.blocking_recv().unwrap();
    assert_eq!(waiter.stats().notifications, 21, "only the marker more");
}

/// An idle pool keeps two connections, whatever its size; work opens more.
#[test]
fn an_idle_pool_keeps_two_connections() {
    let Some(url) = common::pg_database() else {
        return;
    };
    let mut config = Config::postgres(url).with_partitions(1).with_connections(6);
    config.pool_idle_close = std::time::Duration::from_millis(200);
    let store = Store::open(&config, SCHEMA).unwrap();
    // Six slow procedures at once: six connections, and the listener's.
    // They are counted while all six are still inside their procedures
    // (held at `release`: none can have gone idle and closed), once the
    // listener — which connects on a thread of its own — is up.
    let (gate, release) = (Arc::new(Barrier::new(7)), Arc::new(Barrier::new(7)));
    let pending: Vec<_> = (0..6)
        .map(|_| {
            let (gate, release) = (gate.clone(), release.clone());
            let mut first = true;
            store.submit(PKey(0), move |_tx| {
                if std::mem::take(&mut first) {
                    gate.wait();
                    release.wait();
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    gate.wait();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.stats().connections < 7 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let busy = store.stats().connections;
    release.wait();
    for p in pending {
        p.wait().unwrap();
    }
    assert_eq!(busy, 7, "six workers' and the listener's");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.stats().connections > 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool never shrank"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(store.stats().connections, 3, "two kept, and the listener's");
    // And work still runs (a connection made again on demand).
    for _ in 0..10 {
        store
            .call(PKey(0), |tx| tx.query_scalar::<i64>("SELECT 1", &[]))
            .unwrap();
    }
}

/// Leases are judged on the database's clock: a procedure reads the
/// server's, which moves within a transaction.
#[test]
fn the_clock_is_the_servers() {
    let Some(url) = common::pg_database() else {
        return;
    };
    let store = Store::open(&Config::postgres(url).with_partitions(1), SCHEMA).unwrap();
    let (a, b) = store
        .call(PKey(0), |tx| {
            let a = tx.clock_us()?;
            std::thread::sleep(std::time::Duration::from_millis(5));
            Ok::<_, Error>((a, tx.clock_us()?))
        })
        .unwrap();
    assert!(b - a >= 5_000, "{a} then {b}");
    let here = tabos_store::now_us();
    assert!(
        (here - b).abs() < 60_000_000,
        "same machine: {here} and {b}"
    );
}

/// Issue 36, item 1: a realm's procedures retrying after a conflict take
/// turns with that realm's only. Realm a's procedure loses a write skew to
/// another node's, and its retry holds a's turn (blocked here until
/// released); realm b's procedure on the same partition runs meanwhile —
/// under one turn per partition it waited for a's.
#[test]
fn a_realms_retries_do_not_hold_another_realms_turn() {
    let Some(url) = common::pg_database() else {
        return;
    };
    let (store, other_node) = two_nodes_with_doctors(url);
    let both_read = Arc::new(Barrier::new(2));
    let (x_done_tx, x_done) = std::sync::mpsc::channel::<()>();
    let (retrying_tx, retrying) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (x_done, released) = (
        std::sync::Mutex::new(x_done),
        std::sync::Mutex::new(released),
    );
    let barrier = both_read.clone();
    let mut attempt = 0;
    let a = store.for_realm("a").submit(PKey(0), move |tx| {
        attempt += 1;
        if attempt == 2 {
            // The retry, holding a's turn.
            let _ = retrying_tx.send(());
            let _ = released.lock().unwrap().recv();
        }
        let total: i64 = tx.query_scalar("SELECT sum(on_call) FROM oncall", &[])?;
        if attempt == 1 {
            barrier.wait();
        }
        tx.execute(
            "UPDATE oncall SET on_call = $1 WHERE doctor = 'alice'",
            params![total + 1],
        )?;
        if attempt == 1 {
            // The other node commits first: this one then fails (40001).
            let _ = x_done.lock().unwrap().recv();
        }
        Ok::<_, Error>(total)
    });
    let mut first = true;
    let x = other_node.submit(PKey(0), move |tx| {
        let total: i64 = tx.query_scalar("SELECT sum(on_call) FROM oncall", &[])?;
        if std::mem::take(&mut first) {
            both_read.wait();
        }
        tx.execute(
            "UPDATE oncall SET on_call = $1 WHERE doctor = 'bob'",
            params![total + 1],
        )?;
        Ok::<_, Error>(total)
    });
    assert_eq!(x.wait().unwrap(), 0);
    x_done_tx.send(()).unwrap();
    retrying.recv().unwrap();
    // b's procedure, on the same partition, while a's retry holds a's turn.
    let (b_done_tx, b_done) = std::sync::mpsc::channel();
    let b_store = store.for_realm("b");
    std::thread::spawn(move || {
        let r = b_store.call(PKey(0), |tx| {
            tx.query_scalar::<i64>("SELECT count(*) FROM oncall", &[])
        });
        let _ = b_done_tx.send(r);
    });
    let b = b_done.recv_timeout(std::time::Duration::from_secs(60));
    release.send(()).unwrap();
    assert_eq!(
        a.wait().unwrap(),
        1,
        "a's retry saw the other node's commit"
    );
    assert_eq!(b.expect("b waited for a's turn").unwrap(), 2);
}

/// A node cut off in the middle of a transaction cannot end it, and the
/// server has nothing to send it that would show the cut: the session is
/// idle in its transaction, holding its row locks. The server ends such a
/// session after `IDLE_IN_TRANSACTION_TIMEOUT`, so another node's write to
/// the same row goes through while the stalled procedure still sleeps —
/// here a procedure that stops between two statements for three times
/// that long stands for the cut-off node.
#[test]
fn a_session_stalled_in_its_transaction_does_not_hold_its_locks() {
    let Some(url) = common::pg_database() else {
        return;
    };
    let (store, other_node) = two_nodes_with_doctors(url);
    let stall = tabos_store::postgres::IDLE_IN_TRANSACTION_TIMEOUT * 3;
    let locked = Arc::new(Barrier::new(2));
    let woke = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut first = true;
    let stalled = store.submit(PKey(0), {
        let (locked, woke) = (locked.clone(), woke.clone());
        move |tx: &mut dyn tabos_store::Tx| {
            tx.execute("UPDATE oncall SET on_call = 1 WHERE doctor = 'alice'", &[])?;
            if std::mem::take(&mut first) {
                locked.wait();
                std::thread::sleep(stall);
                woke.store(true, Ordering::SeqCst);
            }
            Ok::<_, Error>(())
        }
    });
    locked.wait();
    other_node
        .call(PKey(0), |tx| {
            tx.execute("UPDATE oncall SET on_call = 2 WHERE doctor = 'alice'", &[])
        })
        .unwrap();
    assert!(
        !woke.load(Ordering::SeqCst),
        "the other node's write waited for the stalled transaction"
    );
    // The stalled procedure finds its session ended and runs again on a
    // new one (its second run does not stall).
    stalled.wait().unwrap();
    let rows = store
        .query("SELECT on_call FROM oncall WHERE doctor = 'alice'", &[])
        .unwrap();
    let on_call: i64 = rows.rows[0].get(0).unwrap();
    assert_eq!(on_call, 1, "the stalled procedure's second run wrote last");
}
