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

/// The classic write-skew: two procedures each read both rows and then
/// update a different one. Forced to overlap by a barrier on their first
/// attempt, SERIALIZABLE aborts one with 40001; the store retries it, and the
/// retry sees the other's commit.
#[test]
fn serialization_conflicts_are_retried() {
    let Some(url) = common::pg_database() else {
        return;
    };
    // Two stores on one database: two nodes. (Within one node, procedures of
    // a partition take turns, so the conflict has to come from another node.)
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
