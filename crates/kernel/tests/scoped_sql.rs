//! Realm-scoped SQL (issue 17, item 2) on SQLite and on PostgreSQL: a
//! realm's reader sees its own rows of the OS-state views and, on SQLite,
//! its own tenant tables — not another realm's rows, not the credentials,
//! not the catalogue, not the kernel's tables under any name a statement
//! can write; and nothing it sends changes anything.

use tabos_kernel::auth::{self, Role, Spec};
use tabos_kernel::sched::Scheduler;
use tabos_kernel::{kv, realms};
use tabos_store::{Cap, Error, ReadLimits, ReadScope, Rows, Store, Value};

use crate::common;
use common::Backend;

both!(a_realm_sees_only_its_own_rows);

fn read(s: &Store, scope: &ReadScope, sql: &str) -> tabos_store::Result<Rows> {
    let limits = ReadLimits {
        scope: scope.clone(),
        time_max: Some(std::time::Duration::from_secs(10)),
        ..ReadLimits::rows(Cap::Truncate(1_000))
    };
    s.query_bounded(sql, &[], &limits)
}

fn texts(rows: &Rows) -> Vec<String> {
    rows.rows
        .iter()
        .map(|r| match &r.values()[0] {
            Value::Text(t) => t.clone(),
            v => format!("{v:?}"),
        })
        .collect()
}

/// The statement is refused — out of scope, an unknown name, or a
/// function the realm may not call — and returns no rows.
fn refused(s: &Store, scope: &ReadScope, sql: &str) {
    match read(s, scope, sql) {
        Err(Error::OutOfScope(_) | Error::Sql(_) | Error::ReadOnly(_)) => {}
        other => panic!("{sql}: expected a refusal, got {other:?}"),
    }
}

fn a_realm_sees_only_its_own_rows(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, common::rt());
    // "r" and "s" live on different partitions of two.
    assert_ne!(
        tabos_kernel::realm_partition("r", 2),
        tabos_kernel::realm_partition("s", 2)
    );
    for realm in ["r", "s"] {
        realms::create(s, realm, Scheduler::Fifo).unwrap();
        kv::put(s, realm, "k", format!("{realm}'s value").as_bytes()).unwrap();
        rt.block_on(auth::create(s, Spec::realm(realm, "root", Role::Admin)))
            .unwrap();
    }
    let r = ReadScope::Realm("r".into());

    // Its own rows of tables and of views over them.
    let kv_rows = read(s, &r, "SELECT realm FROM kv").unwrap();
    assert_eq!(texts(&kv_rows), ["r"]);
    let realm_rows = read(s, &r, "SELECT realm FROM realm ORDER BY realm").unwrap();
    assert_eq!(texts(&realm_rows), ["r"]);
    let usage = read(s, &r, "SELECT realm FROM realm_usage").unwrap();
    assert_eq!(texts(&usage), ["r"]);
    assert!(read(s, &r, "SELECT * FROM ps").unwrap().rows.is_empty());
    // count(*) reads no column of the view (SQLite asks about the view
    // itself): counted in the realm only.
    let counted = read(s, &r, "SELECT count(*) FROM kv").unwrap();
    assert_eq!(counted.rows[0].get::<i64>(0).unwrap(), 1);
    // Filters, joins and CTEs of its own views work as usual.
    let joined = read(
        s,
        &r,
        "WITH k AS (SELECT realm FROM kv) SELECT realm.realm FROM realm JOIN k ON k.realm = realm.realm",
    )
    .unwrap();
    assert_eq!(texts(&joined), ["r"]);
    assert!(read(s, &r, "SELECT realm FROM kv WHERE realm = 's'")
        .unwrap()
        .rows
        .is_empty());

    // Not credentials, not bookkeeping, not the kernel's tables by any name.
    let out_of_view = [
        "SELECT token_hash FROM credential",
        "SELECT * FROM schema_version",
        "SELECT * FROM tenant_view",
        "SELECT * FROM main.kv",
        "SELECT * FROM public.kv",
        "WITH kv AS (SELECT * FROM main.kv) SELECT * FROM kv",
        "WITH kv AS (SELECT * FROM public.kv) SELECT * FROM kv",
        "WITH credential AS (SELECT * FROM credential) SELECT * FROM credential",
        "SELECT (SELECT count(*) FROM main.kv)",
        "SELECT count(*) FROM credential",
        "SELECT count(*) FROM tenant_view",
        "SELECT * FROM kv WHERE realm = 's' UNION ALL SELECT * FROM main.kv",
    ];
    for sql in out_of_view {
        refused(s, &r, sql);
    }
    // Nothing that writes, and nothing that changes the session.
    for sql in [
        "DELETE FROM kv",
        "INSERT INTO kv (p_key, realm, key, value) VALUES (0, 's', 'x', 'y')",
        "UPDATE kv SET realm = 'r'",
        "DROP TABLE kv",
    ] {
        refused(s, &r, sql);
    }
    match b {
        Backend::Sqlite => {
            for sql in [
                "SELECT * FROM sqlite_master",
                "SELECT * FROM sqlite_temp_master",
                "SELECT * FROM pragma_database_list",
                "PRAGMA query_only = 0",
                "EXPLAIN SELECT * FROM kv",
            ] {
                refused(s, &r, sql);
            }
            // A realm's tenant tables, and no other realm's.
            for realm in ["r", "s"] {
                let create = format!("CREATE TABLE \"{realm}/notes\" (n TEXT)");
                let insert = format!("INSERT INTO \"{realm}/notes\" VALUES ('{realm} note')");
                common::call_in(s, realm, move |tx| {
                    tx.execute_text(&create, &[])?;
                    tx.execute_text(&insert, &[])?;
                    Ok(())
                })
                .unwrap();
            }
            let notes = read(s, &r, "SELECT n FROM \"r/notes\"").unwrap();
            assert_eq!(texts(&notes), ["r note"]);
            refused(s, &r, "SELECT n FROM \"s/notes\"");
            refused(
                s,
                &r,
                "WITH \"r/x\" AS (SELECT * FROM \"s/notes\") SELECT * FROM \"r/x\"",
            );
        }
        Backend::Postgres => {
            for sql in [
                "SELECT set_config('role', current_setting('is_superuser'), true)",
                "SELECT set_config('search_path', 'public', false), count(*) FROM kv",
                "SELECT * FROM pg_catalog.pg_authid",
            ] {
                refused(s, &r, sql);
            }
        }
    }

    // The other realm and the operator are as they were.
    let s_scope = ReadScope::Realm("s".into());
    let theirs = read(s, &s_scope, "SELECT realm FROM kv").unwrap();
    assert_eq!(texts(&theirs), ["s"]);
    let all = read(s, &ReadScope::All, "SELECT realm FROM kv ORDER BY realm").unwrap();
    assert_eq!(texts(&all), ["r", "s"]);
    let hashes = read(s, &ReadScope::All, "SELECT token_hash FROM credential").unwrap();
    assert_eq!(hashes.rows.len(), 2);
}
