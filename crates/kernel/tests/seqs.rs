//! Sequence numbers of spawns and proc events: taken from memory in
//! blocks, never given out twice — across rollbacks, restarts and a realm's
//! re-creation — on SQLite and on PostgreSQL.

use tabos_kernel::realms::{self, next_seq_tx};
use tabos_kernel::sched::Scheduler;
use tabos_kernel::Error;
use tabos_store::Store;

use crate::common;
use common::{call_in, Backend, Fixture};

both!(
    numbers_are_unique_and_increasing_across_rollbacks_and_restarts,
    one_transaction_takes_many,
    the_migration_starts_above_the_realms_counters
);

const REALM: &str = "r";

fn take(s: &Store, n: i64) -> i64 {
    call_in(s, REALM, move |tx| next_seq_tx(tx, n)).unwrap()
}

/// The partition's reserved counter (what a restart starts above), if it
/// has one yet.
fn reserved_row(s: &Store) -> Option<i64> {
    let pk = tabos_kernel::realm_partition(REALM, s.partitions());
    let rows = s
        .query(
            "SELECT next_seq FROM seq_block WHERE p_key = $1",
            &[i64::from(pk.0).into()],
        )
        .unwrap();
    rows.rows.first().map(|r| r.get(0).unwrap())
}

/// PostgreSQL's blocks come from a sequence (migration 029), whose
/// `nextval` is never rolled back: a block reserved by a transaction that
/// rolls back is skipped, not given back.
const PG_BLOCK: i64 = 16;

/// The first number not yet reserved.
fn reserved(s: &Store, b: Backend) -> i64 {
    match b {
        Backend::Sqlite => reserved_row(s).expect("a reserved block"),
        Backend::Postgres => {
            let rows = s.query("SELECT last_value FROM seq_blocks", &[]).unwrap();
            rows.rows[0].get::<i64>(0).unwrap() + PG_BLOCK
        }
    }
}

fn take_and_fail(s: &Store, n: i64) {
    let failed = call_in(s, REALM, move |tx| {
        let first = next_seq_tx(tx, n)?;
        Err::<i64, _>(Error::Invalid(format!("rolled back after taking {first}")))
    })
    .unwrap_err();
    assert!(matches!(failed, Error::Invalid(_)), "{failed}");
}

fn numbers_are_unique_and_increasing_across_rollbacks_and_restarts(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let mut seen = Vec::new();
    // A procedure that reserves a block and then fails leaves no
    // reservation behind, in the table or in memory (on PostgreSQL the
    // sequence skips exactly that block).
    let before = (b == Backend::Postgres).then(|| reserved(s, b));
    take_and_fail(s, 3);
    match before {
        None => assert_eq!(reserved_row(s), None),
        Some(before) => assert_eq!(reserved(s, b), before + PG_BLOCK),
    }
    let first = take(s, 2);
    seen.extend([first, first + 1]);
    let mark = reserved(s, b);
    assert!(mark > first + 1, "a block was reserved past what was taken");
    // From memory: the counter row does not move.
    for _ in 0..5 {
        seen.push(take(s, 1));
    }
    assert_eq!(reserved(s, b), mark);
    // One that takes numbers from memory and fails: they are skipped.
    take_and_fail(s, 3);
    assert_eq!(reserved(s, b), mark);
    let after = take(s, 1);
    assert!(after > *seen.last().unwrap());
    seen.push(after);
    // Bad counts are refused.
    for n in [0, -1, 17] {
        let e = call_in(s, REALM, move |tx| next_seq_tx(tx, n)).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{n}: {e}");
    }
    // Many takes cross block boundaries (PostgreSQL's blocks are small).
    for _ in 0..40 {
        seen.push(take(s, 1));
    }
    // A realm removed and made again goes on from the partition's counter.
    realms::create(s, REALM, Scheduler::Fifo).unwrap();
    seen.push(take(s, 1));
    call_in(s, REALM, |tx| {
        tabos_kernel::teardown::remove_realm_tx(tx, REALM)
    })
    .unwrap();
    realms::create(s, REALM, Scheduler::Fifo).unwrap();
    seen.push(take(s, 1));
    // A restart starts above every number reserved, used or not.
    let mark = reserved(s, b);
    let Fixture {
        store,
        config,
        _dir,
    } = f;
    drop(store);
    let s = tabos_kernel::open(&config).unwrap();
    let restarted = take(&s, 1);
    assert!(restarted >= mark, "{restarted} < {mark}");
    seen.push(restarted);
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, seen, "unique and in taking order");
}

/// One transaction taking more than any block holds (a batch spawn):
/// each reservation serves the rest of the transaction, so the counter
/// moves by whole blocks, not a block per take.
fn one_transaction_takes_many(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    const TAKES: usize = 3_000;
    let taken = call_in(s, REALM, |tx| {
        (0..TAKES)
            .map(|_| next_seq_tx(tx, 1))
            .collect::<tabos_kernel::Result<Vec<i64>>>()
    })
    .unwrap();
    assert_eq!(taken.len(), TAKES);
    assert!(taken.windows(2).all(|w| w[0] < w[1]), "increasing");
    let mark = reserved(s, b);
    let span = mark - taken[0];
    assert!(
        span < 2 * TAKES as i64 + 1_024,
        "{span} numbers reserved for {TAKES} takes"
    );
    // The same in a transaction that fails: nothing is left reserved, in
    // the table or in memory (on PostgreSQL its blocks are skipped, and no
    // more of them than it used, less what was left of the block in
    // memory), and later numbers are above all of these.
    let failed = call_in(s, REALM, |tx| {
        for _ in 0..TAKES {
            next_seq_tx(tx, 1)?;
        }
        Err::<(), _>(Error::Invalid("rolled back".into()))
    })
    .unwrap_err();
    assert!(matches!(failed, Error::Invalid(_)), "{failed}");
    match b {
        Backend::Sqlite => assert_eq!(reserved(s, b), mark),
        Backend::Postgres => {
            let skipped = reserved(s, b) - mark;
            assert!(
                (TAKES as i64 - PG_BLOCK..TAKES as i64 + 2 * PG_BLOCK).contains(&skipped),
                "{skipped} numbers skipped for {TAKES} takes"
            );
        }
    }
    let next = take(s, 1);
    assert!(next > *taken.last().unwrap());
}

/// A database from before migration 019, whose realm counters had given
/// out numbers: the partition's counter starts above every one of them.
fn the_migration_starts_above_the_realms_counters(b: Backend) {
    let Some((config, _dir)) = b.place() else {
        return;
    };
    let before = &tabos_kernel::MIGRATIONS[..18];
    assert_eq!(before.last().unwrap().version, 18);
    let old = Store::open(&config, before).unwrap();
    let pk = tabos_kernel::realm_partition(REALM, old.partitions());
    old.call(pk, move |tx| {
        let p = i64::from(pk.0);
        for (realm, next) in [(REALM, 500i64), ("other", 70)] {
            tx.execute_text(
                "INSERT INTO realm (p_key, realm, scheduler, next_seq, created_us) \
                 VALUES ($1, $2, 'fifo', $3, 0)",
                tabos_store::params![p, realm, next],
            )?;
        }
        Ok::<_, tabos_store::Error>(())
    })
    .unwrap();
    drop(old);
    let s = tabos_kernel::open(&config).unwrap();
    let first = take(&s, 1);
    assert!(first >= 500, "{first} was given out by the old counter");
}
