//! Retention (kernel::retention), on SQLite and on PostgreSQL: what is over
//! and older than a realm's retention goes — ended procs with their events,
//! the old events of procs still live, logged messages — and nothing else,
//! in batches; a realm without a retention keeps everything.

use std::time::Duration;

use tabos_kernel::ids::Pid;
use tabos_kernel::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use tabos_kernel::procs::{self, Descriptor};
use tabos_kernel::realms::{self, Retention};
use tabos_kernel::retention::{self, Expired, BATCH_MAX};
use tabos_kernel::sched::Scheduler;
use tabos_store::{PKey, Store};

use crate::common;
use common::{rt, Backend};

both!(
    what_is_over_and_old_goes_and_nothing_else,
    a_realm_with_many_old_rows_is_expired_in_batches,
);

const HOUR_US: i64 = 3_600_000_000;

fn pid(s: &str) -> Pid {
    Pid::new(s).unwrap()
}

fn named(p: &str) -> Descriptor {
    Descriptor {
        pid: Some(pid(p)),
        ..Descriptor::native("/bin/true")
    }
}

fn count(s: &Store, sql: &str, realm: &str) -> i64 {
    s.query(sql, tabos_store::params![realm]).unwrap().rows[0]
        .get(0)
        .unwrap()
}

fn procs_of(s: &Store, realm: &str) -> Vec<String> {
    s.query(
        "SELECT pid FROM proc WHERE realm = $1 ORDER BY pid",
        tabos_store::params![realm],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0).unwrap())
    .collect()
}

fn events_of(s: &Store, realm: &str) -> i64 {
    count(s, "SELECT count(*) FROM proc_event WHERE realm = $1", realm)
}

fn logged_of(s: &Store, realm: &str) -> i64 {
    count(
        s,
        "SELECT count(*) FROM message_log WHERE realm = $1",
        realm,
    )
}

/// One expiry batch of `realm` as if it were `now_us`.
async fn expire_at(s: &Store, realm: &str, now_us: i64) -> Expired {
    let r = realm.to_string();
    let p = tabos_kernel::realm_partition(realm, s.partitions());
    s.run(p, move |tx| retention::expire_tx(tx, &r, now_us))
        .await
        .unwrap()
}

/// Two realms alike — an ended proc, a live one with events, a logged
/// message — one with a retention of an hour: looked at an hour and a bit
/// later, it loses the ended proc, every event and the logged message but
/// keeps the live proc; looked at now, nothing is old; the other realm
/// keeps all of it. Clearing the retention stops the expiry.
fn what_is_over_and_old_goes_and_nothing_else(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        for realm in ["kept", "expiring"] {
            realms::create(&s, realm, Scheduler::Fifo).unwrap();
            // Deferred (no worker): evicting ends them at once.
            procs::spawn(&s, realm, named("done")).await.unwrap();
            procs::spawn(&s, realm, named("live")).await.unwrap();
            procs::evict(&s, realm, &pid("done")).await.unwrap();
            procs::record(&s, realm, &pid("live"), "fs_read", "/in @0 +5")
                .await
                .unwrap();
            let root = common::as_user(realm, "root");
            let logged = MailboxOptions {
                bytes_max: 1 << 20,
                log_delivered: true,
            };
            ipc::create_mailbox(&s, &root, "audited", logged)
                .await
                .unwrap();
            let out = Outgoing {
                to: Address::parse("audited").unwrap(),
                payload: b"hello".to_vec(),
                message_id: None,
            };
            ipc::send(&s, &root, None, vec![out], logged).await.unwrap();
            let got = ipc::recv(
                &s,
                &root,
                &Address::parse("audited").unwrap(),
                Take::messages(10),
                Duration::ZERO,
                std::future::pending(),
            )
            .await
            .unwrap();
            assert_eq!(got.messages.len(), 1);
            assert_eq!(logged_of(&s, realm), 1);
        }
        let before = events_of(&s, "expiring");
        assert!(before >= 3, "spawns, the eviction and the read: {before}");
        // Without a retention, expiring removes nothing, however late.
        let now = tabos_store::now_us();
        assert_eq!(
            expire_at(&s, "expiring", now + 100 * HOUR_US).await,
            Expired::default()
        );
        let hour = Retention::new(HOUR_US).unwrap();
        let p = tabos_kernel::realm_partition("expiring", s.partitions());
        s.run(p, move |tx| {
            realms::set_retention_tx(tx, "expiring", Some(hour))
        })
        .await
        .unwrap();
        let listed = retention::retained(&s, p).await.unwrap();
        assert_eq!(listed, [("expiring".to_string(), hour)]);
        // Nothing is an hour old yet.
        assert_eq!(expire_at(&s, "expiring", now).await.total(), 0);
        assert_eq!(procs_of(&s, "expiring"), ["done", "live"]);
        // An hour and a minute on: the ended proc (and its events), the
        // live proc's events and the logged message go; the live proc stays.
        let e = expire_at(&s, "expiring", now + HOUR_US + 60_000_000).await;
        assert_eq!((e.procs, e.messages, e.more), (1, 1, false), "{e:?}");
        assert!(e.events >= 2, "the live proc's events: {e:?}");
        assert_eq!(procs_of(&s, "expiring"), ["live"]);
        assert_eq!(events_of(&s, "expiring"), 0);
        assert_eq!(logged_of(&s, "expiring"), 0);
        // The other realm has all of it.
        assert_eq!(procs_of(&s, "kept"), ["done", "live"]);
        assert_eq!(events_of(&s, "kept"), before);
        assert_eq!(logged_of(&s, "kept"), 1);
        // Cleared: a later ended proc stays, however old it gets.
        s.run(p, |tx| realms::set_retention_tx(tx, "expiring", None))
            .await
            .unwrap();
        procs::evict(&s, "expiring", &pid("live")).await.unwrap();
        assert_eq!(
            expire_at(&s, "expiring", now + 100 * HOUR_US).await.total(),
            0
        );
        assert_eq!(procs_of(&s, "expiring"), ["live"]);
        assert!(retention::retained(&s, p).await.unwrap().is_empty());
        // Out of range: refused, and an unknown realm is NotFound.
        assert!(Retention::new(999_999).is_err());
        assert!(Retention::new(i64::MAX).is_err());
        let e = s
            .run(p, move |tx| {
                realms::set_retention_tx(tx, "nope", Some(hour))
            })
            .await
            .unwrap_err();
        assert!(matches!(e, tabos_kernel::Error::NotFound(_)), "{e:?}");
    });
}

/// More old events than a batch holds: each batch removes `BATCH_MAX` and
/// says there is more; [`retention::expire`] runs batches until none is
/// left, each its own transaction.
fn a_realm_with_many_old_rows_is_expired_in_batches(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "busy", Scheduler::Fifo).unwrap();
        procs::spawn(&s, "busy", named("reader")).await.unwrap();
        let n = 2 * BATCH_MAX + 10;
        let p: PKey = tabos_kernel::realm_partition("busy", s.partitions());
        // Recorded two hours ago.
        let then = tabos_store::now_us() - 2 * HOUR_US;
        s.run(p, move |tx| {
            for i in 0..n {
                let detail = format!("/f{i} @0 +1");
                procs::event_tx(tx, "busy", "reader", "fs_read", Some(&detail), then)?;
            }
            Ok::<_, tabos_kernel::Error>(())
        })
        .await
        .unwrap();
        let hour = Retention::new(HOUR_US).unwrap();
        s.run(p, move |tx| {
            realms::set_retention_tx(tx, "busy", Some(hour))
        })
        .await
        .unwrap();
        let first = expire_at(&s, "busy", tabos_store::now_us()).await;
        assert_eq!((first.events, first.more), (BATCH_MAX, true), "{first:?}");
        let rest = retention::expire(&s, "busy").await.unwrap();
        assert_eq!(rest.events, n - BATCH_MAX, "{rest:?}");
        assert!(!rest.more);
        // The spawn's own event is recent: it stays, and so does the proc.
        assert_eq!(
            count(
                &s,
                "SELECT count(*) FROM proc_event WHERE realm = $1 AND event = 'fs_read'",
                "busy"
            ),
            0
        );
        assert_eq!(procs_of(&s, "busy"), ["reader"]);
    });
}
