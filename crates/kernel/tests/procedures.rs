//! Stored procedures on SQLite and on PostgreSQL: install, list, call and
//! remove; atomicity; isolation between realms; every kind of failure;
//! chase against the same logic done by a client.

use std::time::Duration;

use tabos_kernel::auth::Caller;
use tabos_kernel::ids::Pid;
use tabos_kernel::procedures::{Install, Procedures};
use tabos_kernel::{ipc, kv, Error};
use tabos_sandbox::procedure::{examples, FailureKind, Language, Limits};
use tabos_sandbox::Sandbox;

use crate::common;
use common::Backend;

both!(
    install_list_call_remove,
    failures_roll_back_and_the_node_serves_on,
    realms_are_isolated,
    chase_equals_the_client_doing_it,
    messages_files_and_scans,
    tenant_sql_is_bounded,
    refused_ddl_leaves_nothing_even_when_caught,
    read_only_procedures_read_and_never_write,
    others_are_tried_on_a_read_connection_and_write_on_the_writer,
    holding_the_write_lock_is_bounded,
    a_procs_calls_are_its_provenance,
);

fn limits() -> Limits {
    Limits {
        memory_bytes: 16 << 20,
        timeout: Duration::from_millis(300),
    }
}

fn install(
    rt: &tokio::runtime::Runtime,
    p: &Procedures,
    realm: &str,
    name: &str,
    language: Language,
    code: &str,
) -> Result<(), Error> {
    rt.block_on(p.install(
        &common::as_user(realm, "root"),
        Install {
            name: name.into(),
            language,
            code: code.as_bytes().to_vec(),
            limits: limits(),
            read_only: false,
        },
    ))
    .map(|_| ())
}

/// [`install`], declared read-only.
fn install_read_only(
    rt: &tokio::runtime::Runtime,
    p: &Procedures,
    realm: &str,
    name: &str,
    code: &str,
) -> Result<(), Error> {
    rt.block_on(p.install(
        &common::as_user(realm, "root"),
        Install {
            name: name.into(),
            language: Language::Js,
            code: code.as_bytes().to_vec(),
            limits: limits(),
            read_only: true,
        },
    ))
    .map(|_| ())
}

fn call(
    rt: &tokio::runtime::Runtime,
    p: &Procedures,
    realm: &str,
    name: &str,
    args: &[u8],
) -> Result<Vec<u8>, Error> {
    rt.block_on(p.call(&common::as_user(realm, "root"), name, args.to_vec()))
        .map(|o| o.result)
}

fn failure_kind(e: &Error) -> FailureKind {
    match e {
        Error::Procedure { error, .. } => error.kind,
        other => panic!("expected a procedure failure, got {other}"),
    }
}

fn setup(b: Backend) -> Option<(common::Fixture, Procedures, tokio::runtime::Runtime)> {
    let f = b.open()?;
    let p = Procedures::new(f.store.clone(), Sandbox::new().unwrap());
    Some((f, p, common::rt()))
}

fn install_list_call_remove(b: Backend) {
    let Some((_f, p, rt)) = setup(b) else { return };
    install(&rt, &p, "a", "echo", Language::Js, examples::JS_ECHO).unwrap();
    install(&rt, &p, "a", "wecho", Language::Wasm, examples::WASM_ECHO).unwrap();
    let list = rt.block_on(p.list(&common::as_user("a", "root"))).unwrap();
    let names: Vec<_> = list.iter().map(|i| (i.name.as_str(), i.language)).collect();
    assert_eq!(names, [("echo", Language::Js), ("wecho", Language::Wasm)]);
    assert_eq!(call(&rt, &p, "a", "echo", b"hi").unwrap(), b"hi");
    assert_eq!(call(&rt, &p, "a", "wecho", b"there").unwrap(), b"there");
    // Reinstalling replaces the code (and never meets the old context).
    install(
        &rt,
        &p,
        "a",
        "echo",
        Language::Js,
        "function main(a) { return a + '!'; }",
    )
    .unwrap();
    assert_eq!(call(&rt, &p, "a", "echo", b"hi").unwrap(), b"hi!");
    // Bad code fails at install time with the compiler's message and
    // changes nothing.
    let e = install(&rt, &p, "a", "echo", Language::Js, "function main( {").unwrap_err();
    assert_eq!(failure_kind(&e), FailureKind::Invalid);
    assert!(e.to_string().contains("SyntaxError"), "{e}");
    let e = install(&rt, &p, "a", "bad", Language::Wasm, "(module (func").unwrap_err();
    assert_eq!(failure_kind(&e), FailureKind::Invalid);
    assert_eq!(call(&rt, &p, "a", "echo", b"hi").unwrap(), b"hi!");
    assert_eq!(
        rt.block_on(p.list(&common::as_user("a", "root")))
            .unwrap()
            .len(),
        2
    );
    // Bad names and unknown procedures.
    assert!(matches!(
        install(&rt, &p, "a", "no/slash", Language::Js, examples::JS_ECHO),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        call(&rt, &p, "a", "missing", b""),
        Err(Error::NotFound(_))
    ));
    rt.block_on(p.remove(&common::as_user("a", "root"), "echo"))
        .unwrap();
    assert!(matches!(
        call(&rt, &p, "a", "echo", b""),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        rt.block_on(p.remove(&common::as_user("a", "root"), "echo")),
        Err(Error::NotFound(_))
    ));
}

fn failures_roll_back_and_the_node_serves_on(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    let cases: &[(&str, Language, &str, FailureKind)] = &[
        (
            "throws",
            Language::Js,
            "function main() { tabos.put('k', 'js'); throw new Error('after the write'); }",
            FailureKind::Exception,
        ),
        (
            "spins",
            Language::Js,
            "function main() { tabos.put('k', 'js'); for (;;) {} }",
            FailureKind::Timeout,
        ),
        (
            "grows",
            Language::Js,
            "function main() { tabos.put('k', 'js'); const a = []; for (;;) a.push(new ArrayBuffer(1 << 20)); }",
            FailureKind::OutOfMemory,
        ),
        (
            "recurses",
            Language::Js,
            "function f() { return f() + 1; } function main() { tabos.put('k', 'js'); f(); }",
            FailureKind::StackOverflow,
        ),
        (
            "traps",
            Language::Wasm,
            r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "kv")
               (func (export "main") (param i32) (result i32)
                 (drop (call $put (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)))
                 unreachable))"#,
            FailureKind::Trap,
        ),
        (
            "loops",
            Language::Wasm,
            r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "kv")
               (func (export "main") (param i32) (result i32)
                 (drop (call $put (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)))
                 (loop $l (br $l)) (i32.const 0)))"#,
            FailureKind::Timeout,
        ),
        (
            "oom",
            Language::Wasm,
            r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "kv")
               (func (export "main") (param i32) (result i32)
                 (drop (call $put (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)))
                 (drop (memory.grow (i32.const 60000))) (i32.const 0)))"#,
            FailureKind::OutOfMemory,
        ),
        (
            "deep",
            Language::Wasm,
            r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "kv")
               (func $f (param i32) (result i32) (i32.add (call $f (local.get 0)) (i32.const 1)))
               (func (export "main") (param i32) (result i32)
                 (drop (call $put (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)))
                 (call $f (i32.const 0))))"#,
            FailureKind::StackOverflow,
        ),
        (
            "badptr",
            Language::Wasm,
            r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "kv")
               (func (export "main") (param i32) (result i32)
                 (drop (call $put (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)))
                 (call $put (i32.const 0) (i32.const 1) (i32.const 65000) (i32.const 100000))))"#,
            FailureKind::Trap,
        ),
        (
            "status",
            Language::Wasm,
            r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "kv")
               (func (export "main") (param i32) (result i32)
                 (drop (call $put (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)))
                 (i32.const 3)))"#,
            FailureKind::Status(3),
        ),
    ];
    install(&rt, &p, "b", "echo", Language::Js, examples::JS_ECHO).unwrap();
    for (name, lang, code, kind) in cases {
        install(&rt, &p, "a", name, *lang, code).unwrap();
        let e = call(&rt, &p, "a", name, b"").unwrap_err();
        assert_eq!(failure_kind(&e), *kind, "{name}: {e}");
        // The write before the failure was rolled back.
        assert_eq!(kv::get(&f.store, "a", "k").unwrap(), None, "{name}");
        // Everyone else is served, and so is the same realm.
        assert_eq!(call(&rt, &p, "b", "echo", b"ok").unwrap(), b"ok", "{name}");
    }
    // A procedure that succeeds commits all of its writes.
    install(
        &rt,
        &p,
        "a",
        "two",
        Language::Js,
        "function main() { tabos.put('x', '1'); tabos.put('y', '2'); return 'done'; }",
    )
    .unwrap();
    assert_eq!(call(&rt, &p, "a", "two", b"").unwrap(), b"done");
    assert_eq!(kv::get(&f.store, "a", "x").unwrap(), Some(b"1".to_vec()));
    assert_eq!(kv::get(&f.store, "a", "y").unwrap(), Some(b"2".to_vec()));
}

fn realms_are_isolated(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    let sqlite = f.store.kind() == tabos_store::BackendKind::Sqlite;
    kv::put(&f.store, "b", "secret", b"b's").unwrap();
    install(
        &rt,
        &p,
        "a",
        "peek",
        Language::Js,
        "function main(k) { return tabos.get(k); }",
    )
    .unwrap();
    assert_eq!(call(&rt, &p, "a", "peek", b"secret").unwrap(), b"");
    // Procedures are per realm: b cannot call a's.
    assert!(matches!(
        call(&rt, &p, "b", "peek", b"x"),
        Err(Error::NotFound(_))
    ));
    // SQL reaches only the realm's own tables.
    install(
        &rt,
        &p,
        "a",
        "sql",
        Language::Js,
        "function main(q) { try { return JSON.stringify(tabos.query(q)); } \
         catch (e) { return 'refused: ' + e.message; } }",
    )
    .unwrap();
    install(
        &rt,
        &p,
        "a",
        "ddl",
        Language::Js,
        "function main() { tabos.exec('CREATE TABLE \"a/points\" (x INTEGER, y INTEGER)'); \
         tabos.exec('INSERT INTO \"a/points\" VALUES ($1, $2), ($3, $4)', [1, 2, 3, 4]); \
         return JSON.stringify(tabos.query('SELECT x + y AS s FROM \"a/points\" ORDER BY x')); }",
    )
    .unwrap();
    install(
        &rt,
        &p,
        "b",
        "ddl",
        Language::Js,
        "function main() { tabos.exec('CREATE TABLE \"b/t\" (v TEXT)'); \
         tabos.exec('INSERT INTO \"b/t\" VALUES (\\'hidden\\')'); }",
    )
    .unwrap();
    if sqlite {
        assert_eq!(
            call(&rt, &p, "a", "ddl", b"").unwrap(),
            br#"[{"s":3},{"s":7}]"#
        );
        call(&rt, &p, "b", "ddl", b"").unwrap();
        for q in [
            "SELECT * FROM kv",
            "SELECT * FROM \"b/t\"",
            "SELECT name FROM sqlite_master",
            "PRAGMA table_info(kv)",
            "ATTACH DATABASE '/tmp/x.db' AS x",
        ] {
            let out = call(&rt, &p, "a", "sql", q.as_bytes()).unwrap();
            let out = String::from_utf8(out).unwrap();
            assert!(out.starts_with("refused:"), "{q}: {out}");
        }
        // A write through the read-only call is refused.
        let out = call(&rt, &p, "a", "sql", b"DELETE FROM \"a/points\"").unwrap();
        assert!(String::from_utf8(out).unwrap().starts_with("refused:"));
        let out = call(
            &rt,
            &p,
            "a",
            "sql",
            b"SELECT count(*) AS n FROM \"a/points\"",
        )
        .unwrap();
        assert_eq!(out, br#"[{"n":2}]"#);
        // The tenant tables stay out of the operator's union views.
        assert!(f.store.query("SELECT count(*) FROM kv", &[]).is_ok());
    } else {
        let e = call(&rt, &p, "a", "ddl", b"").unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
    }
}

fn chase_equals_the_client_doing_it(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    for i in 0..20 {
        kv::put(
            &f.store,
            "a",
            &format!("k{i}"),
            format!("v{}", (i * 7) % 23).as_bytes(),
        )
        .unwrap();
        if i % 3 != 0 {
            kv::put(
                &f.store,
                "a",
                &format!("v{i}"),
                format!("value {i}").as_bytes(),
            )
            .unwrap();
        }
    }
    install(&rt, &p, "a", "js", Language::Js, examples::JS_CHASE).unwrap();
    install(&rt, &p, "a", "wasm", Language::Wasm, examples::WASM_CHASE).unwrap();
    for i in 0..25 {
        let key = format!("k{i}");
        let client = kv::get(&f.store, "a", &key)
            .unwrap()
            .and_then(|v| kv::get(&f.store, "a", std::str::from_utf8(&v).unwrap()).unwrap())
            .unwrap_or_default();
        assert_eq!(
            call(&rt, &p, "a", "js", key.as_bytes()).unwrap(),
            client,
            "{key}"
        );
        assert_eq!(
            call(&rt, &p, "a", "wasm", key.as_bytes()).unwrap(),
            client,
            "{key}"
        );
    }
}

fn messages_files_and_scans(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    rt.block_on(ipc::create_mailbox(
        &f.store,
        &common::as_user("a", "root"),
        "inbox",
        ipc::MailboxOptions::default(),
    ))
    .unwrap();
    install(
        &rt,
        &p,
        "a",
        "relay",
        Language::Js,
        "function main(text) { tabos.send('inbox', text); const m = tabos.recv('inbox'); \
         tabos.write('/note', m.data); const none = tabos.recv('inbox'); \
         return tabos.read('/note') + (none === null ? ' (then empty)' : ''); }",
    )
    .unwrap();
    assert_eq!(
        call(&rt, &p, "a", "relay", b"hello").unwrap(),
        b"hello (then empty)"
    );
    for i in 0..1000 {
        kv::put(&f.store, "a", &format!("s{i:04}"), &[b'x'; 40]).unwrap();
    }
    install(&rt, &p, "a", "count", Language::Wasm, examples::WASM_COUNT).unwrap();
    let n = call(&rt, &p, "a", "count", b"s").unwrap();
    assert_eq!(u32::from_le_bytes(n.try_into().unwrap()), 1000);
    let n = call(&rt, &p, "a", "count", b"s0500").unwrap();
    assert_eq!(u32::from_le_bytes(n.try_into().unwrap()), 500);
    install(
        &rt,
        &p,
        "a",
        "first",
        Language::Js,
        "function main() { return tabos.scan('s', 't', 3).map(e => e[0]).join(','); }",
    )
    .unwrap();
    assert_eq!(
        call(&rt, &p, "a", "first", b"").unwrap(),
        b"s0000,s0001,s0002"
    );
}

/// Tenant SQL from a procedure: an endless recursive CTE stops at the
/// procedure's deadline, a huge value is refused before it is built, and a
/// foreign key from a tenant table to a kernel table is refused with the
/// DDL rolled back; the partition serves on (SQLite: tenant SQL is refused
/// on PostgreSQL for now).
fn tenant_sql_is_bounded(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    if f.store.kind() != tabos_store::BackendKind::Sqlite {
        return;
    }
    install(
        &rt,
        &p,
        "a",
        "q",
        Language::Js,
        "function main(q) { return JSON.stringify(tabos.query(q)); }",
    )
    .unwrap();
    install(
        &rt,
        &p,
        "a",
        "x",
        Language::Js,
        "function main(q) { tabos.exec(q); return 'done'; }",
    )
    .unwrap();
    // (The CTE's name is in the realm's prefix: confinement reads no other.)
    let endless = "WITH RECURSIVE \"a/r\"(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM \"a/r\") \
                   SELECT count(*) FROM \"a/r\"";
    let e = call(&rt, &p, "a", "q", endless.as_bytes()).unwrap_err();
    assert!(
        matches!(e, Error::Store(tabos_store::Error::Timeout(_)))
            || matches!(&e, Error::Procedure { error, .. } if error.kind == FailureKind::Timeout),
        "{e}"
    );
    let e = call(
        &rt,
        &p,
        "a",
        "q",
        b"SELECT length(randomblob(250000000)) AS n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("too big"), "{e}");
    for fk in [
        "CREATE TABLE \"a/evil\" (pid TEXT REFERENCES proc(pid))",
        "CREATE TABLE \"a/evil\" (r TEXT, FOREIGN KEY (r) REFERENCES realm(realm))",
    ] {
        let e = call(&rt, &p, "a", "x", fk.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("may not reference"), "{fk}: {e}");
    }
    // Rolled back: no such table; a reference within the realm is fine.
    let out = call(
        &rt,
        &p,
        "a",
        "x",
        b"CREATE TABLE \"a/parent\" (id INTEGER PRIMARY KEY)",
    )
    .unwrap();
    assert_eq!(out, b"done");
    call(
        &rt,
        &p,
        "a",
        "x",
        b"CREATE TABLE \"a/child\" (p INTEGER REFERENCES \"a/parent\"(id))",
    )
    .unwrap();
    let out = call(&rt, &p, "a", "q", b"SELECT count(*) AS n FROM \"a/evil\"");
    assert!(out.is_err(), "the refused table does not exist");
    assert_eq!(
        call(&rt, &p, "a", "q", b"SELECT 1 AS one").unwrap(),
        br#"[{"one":1}]"#
    );
}

/// A wasm procedure that runs its arguments as a writing statement,
/// ignores the errno and commits, returning the errno (4 bytes LE).
const WASM_EXEC_IGNORING: &str = r#"(module
  (import "tabos" "args" (func $args (param i32 i32) (result i32)))
  (import "tabos" "sql_exec" (func $exec (param i32 i32 i32 i32 i32) (result i32)))
  (import "tabos" "result" (func $result (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "main") (param $n i32) (result i32)
    (drop (call $args (i32.const 64) (local.get $n)))
    (i32.store (i32.const 0)
      (call $exec (i32.const 64) (local.get $n) (i32.const 0) (i32.const 0) (i32.const 8)))
    (drop (call $result (i32.const 0) (i32.const 4)))
    (i32.const 0)))"#;

/// Issue 36, item 3: a foreign key from a tenant table to a kernel table is
/// refused and leaves nothing behind even when the tenant's code catches
/// the refusal and its procedure commits (in JS and in wasm); another
/// realm on the same partition can then still prune its procs and be
/// removed (a table referencing `proc(pid)`, not a key of `proc`, would
/// make every delete from `proc` fail with "foreign key mismatch").
fn refused_ddl_leaves_nothing_even_when_caught(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    if f.store.kind() != tabos_store::BackendKind::Sqlite {
        return; // tenant SQL is SQLite's for now
    }
    install(
        &rt,
        &p,
        "a",
        "catch",
        Language::Js,
        "function main(q) { try { tabos.exec(q); } catch (e) { return 'caught: ' + e; } \
         return 'not refused'; }",
    )
    .unwrap();
    install(&rt, &p, "a", "wexec", Language::Wasm, WASM_EXEC_IGNORING).unwrap();
    install(
        &rt,
        &p,
        "a",
        "q",
        Language::Js,
        "function main(q) { return JSON.stringify(tabos.query(q)); }",
    )
    .unwrap();
    let js = call(
        &rt,
        &p,
        "a",
        "catch",
        b"CREATE TABLE \"a/evil\" (pid TEXT REFERENCES proc(pid))",
    )
    .unwrap();
    let js = String::from_utf8(js).unwrap();
    assert!(js.contains("may not reference"), "{js}");
    let errno = call(
        &rt,
        &p,
        "a",
        "wexec",
        b"CREATE TABLE \"a/evil2\" (r TEXT REFERENCES realm(realm))",
    )
    .unwrap();
    assert_ne!(errno, 0u32.to_le_bytes(), "the wasm call was refused");
    for table in ["a/evil", "a/evil2"] {
        let q = format!("SELECT count(*) AS n FROM \"{table}\"");
        let out = call(&rt, &p, "a", "q", q.as_bytes());
        assert!(out.is_err(), "the refused {table} was committed: {out:?}");
    }
    // A realm on a's partition spawns, ends and prunes a proc, and goes.
    let partitions = f.store.partitions();
    let home = tabos_kernel::realm_partition("a", partitions);
    let other = (0..1000)
        .map(|i| format!("b{i}"))
        .find(|r| tabos_kernel::realm_partition(r, partitions) == home)
        .unwrap();
    use tabos_kernel::procs::{self, Descriptor, State};
    use tabos_kernel::sched::{Scheduler, WorkerSpec};
    tabos_kernel::realms::create(&f.store, &other, Scheduler::Fifo).unwrap();
    let w = tabos_kernel::ids::WorkerId::new("w1").unwrap();
    procs::register_worker(
        &f.store,
        &other,
        &WorkerSpec {
            worker_id: w.clone(),
            node_id: "n1".into(),
            cores: 1,
            mem_mb: 64,
        },
    )
    .unwrap();
    rt.block_on(async {
        let (pid, _) = procs::spawn(&f.store, &other, Descriptor::native("/bin/true"))
            .await
            .unwrap();
        procs::exited(&f.store, &other, &pid, State::Exited, Some(0), None)
            .await
            .unwrap();
        let pruned = procs::prune(&f.store, &other, vec![pid.clone()], None)
            .await
            .unwrap();
        assert_eq!(pruned, vec![pid]);
        let r = other.clone();
        f.store
            .run(home, move |tx| {
                tabos_kernel::teardown::remove_realm_tx(tx, &r)
            })
            .await
            .unwrap();
    });
}

/// Issue 18, item 1: a procedure declared read-only runs on a read
/// connection: it sees every committed write, is not held up by a batch
/// on its partition's writer, and cannot write — a write fails the call and
/// changes nothing. Reinstalling changes the declaration for the next call.
fn read_only_procedures_read_and_never_write(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    kv::put(&f.store, "a", "k", b"v").unwrap();
    kv::put(&f.store, "a", "v", b"value").unwrap();
    install_read_only(&rt, &p, "a", "chase", examples::JS_CHASE).unwrap();
    let list = rt.block_on(p.list(&common::as_user("a", "root"))).unwrap();
    assert!(list[0].read_only, "listed as read-only");
    assert_eq!(call(&rt, &p, "a", "chase", b"k").unwrap(), b"value");
    // Its own caller's acknowledged write is seen by the next call.
    kv::put(&f.store, "a", "v", b"newer").unwrap();
    assert_eq!(call(&rt, &p, "a", "chase", b"k").unwrap(), b"newer");

    // A write in a read-only procedure fails the call and writes nothing,
    // twice (the second call takes the path the first one learned).
    const PUT: &str = "function main(a) { tabos.put('w', a); return 'done'; }";
    install_read_only(&rt, &p, "a", "put", PUT).unwrap();
    for _ in 0..2 {
        let e = call(&rt, &p, "a", "put", b"x").unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
        assert_eq!(kv::get(&f.store, "a", "w").unwrap(), None);
    }
    // Declared read-write again, the same code writes.
    install(&rt, &p, "a", "put", Language::Js, PUT).unwrap();
    assert_eq!(call(&rt, &p, "a", "put", b"x").unwrap(), b"done");
    assert_eq!(kv::get(&f.store, "a", "w").unwrap(), Some(b"x".to_vec()));
    // And read-only once more: refused again, the value stays.
    install_read_only(&rt, &p, "a", "put", PUT).unwrap();
    assert!(call(&rt, &p, "a", "put", b"y").is_err());
    assert_eq!(kv::get(&f.store, "a", "w").unwrap(), Some(b"x".to_vec()));

    // Not queued behind the writer: with the realm's partition held by a
    // submitted procedure, a read-only call still completes.
    assert_eq!(
        while_the_writer_is_held(&f, || call(&rt, &p, "a", "chase", b"k")).unwrap(),
        b"newer"
    );
}

/// A procedure not declared read-only is tried on a read connection
/// first: one that only reads runs there (not queued behind its
/// partition's writer); one that tries to write — even one that catches
/// the refusal and answers anyway — runs again on the writer, where its
/// write happens once and its answer is the writer's run's.
fn others_are_tried_on_a_read_connection_and_write_on_the_writer(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    kv::put(&f.store, "a", "k", b"v").unwrap();
    kv::put(&f.store, "a", "v", b"value").unwrap();
    install(&rt, &p, "a", "chase", Language::Js, examples::JS_CHASE).unwrap();
    assert_eq!(call(&rt, &p, "a", "chase", b"k").unwrap(), b"value");
    kv::put(&f.store, "a", "v", b"newer").unwrap();
    assert_eq!(call(&rt, &p, "a", "chase", b"k").unwrap(), b"newer");

    // Catches the write's refusal on the read connection: not its answer.
    const CAUGHT: &str = "function main(a) { try { tabos.put('w', a); } \
                          catch (e) { return 'caught'; } return 'wrote'; }";
    install(&rt, &p, "a", "caught", Language::Js, CAUGHT).unwrap();
    for v in [b"x", b"y"] {
        assert_eq!(call(&rt, &p, "a", "caught", v).unwrap(), b"wrote");
        assert_eq!(kv::get(&f.store, "a", "w").unwrap(), Some(v.to_vec()));
    }
    // A counter counts once per call, the first call's read-path run
    // dropped; one that read first and writes on a later call writes.
    const COUNT: &str = "function main(a) { const n = tabos.get('n'); \
                         if (a === 'peek') return n === null ? 'none' : n; \
                         const next = String((n === null ? 0 : Number(n)) + 1); \
                         tabos.put('n', next); return next; }";
    install(&rt, &p, "a", "count", Language::Js, COUNT).unwrap();
    assert_eq!(call(&rt, &p, "a", "count", b"peek").unwrap(), b"none");
    for i in 1..=5 {
        let got = call(&rt, &p, "a", "count", b"add").unwrap();
        assert_eq!(got, i.to_string().into_bytes());
    }
    assert_eq!(kv::get(&f.store, "a", "n").unwrap(), Some(b"5".to_vec()));

    // Not queued behind the writer: with the realm's partition held by a
    // submitted procedure, a read-write procedure that only reads still
    // completes.
    assert_eq!(
        while_the_writer_is_held(&f, || call(&rt, &p, "a", "chase", b"k")).unwrap(),
        b"newer"
    );
}

/// Longest `f` may take under the held writer: a call that queued behind
/// it would wait for ever, so the test fails after this instead of hanging.
const HELD_CALL_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// What `f` gives while realm `a`'s partition writer is held by a
/// submitted procedure (released after): a call that waits for the writer
/// fails the test after `HELD_CALL_MAX`.
fn while_the_writer_is_held<T: Send>(fx: &common::Fixture, f: impl FnOnce() -> T + Send) -> T {
    let pk = tabos_kernel::realm_partition("a", fx.store.partitions());
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let mut first = true;
    let held = fx.store.submit(pk, move |_tx| {
        if std::mem::take(&mut first) {
            entered_tx.send(()).unwrap();
            release_rx.lock().unwrap().recv().unwrap();
        }
        Ok::<_, tabos_store::Error>(())
    });
    entered_rx.recv().unwrap();
    std::thread::scope(|s| {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        s.spawn(move || {
            let _ = done_tx.send(f());
        });
        let got = done_rx.recv_timeout(HELD_CALL_MAX);
        // Released either way, so that a call stuck behind it ends and the
        // scope can join it.
        release_tx.send(()).unwrap();
        held.wait().unwrap();
        got.unwrap_or_else(|_| panic!("the call waited {HELD_CALL_MAX:?} behind the held writer"))
    })
}

/// Writes `k`, then spins until stopped.
const WASM_WRITE_THEN_SPIN: &str = r#"(module
  (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "kv")
  (func (export "main") (param $n i32) (result i32)
    (drop (call $put (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1)))
    (loop $spin (br $spin))
    (i32.const 0)))"#;

/// Issue 36, item 1: on SQLite, tenant code holds its partition's write
/// lock at most `WRITE_HOLD_MAX` (others' writes wait for it): a procedure
/// that writes and then computes past it is stopped, says why, and leaves
/// nothing; one that computes first and writes last runs to its end. On
/// PostgreSQL no lock is partition-wide, and neither is bounded so.
fn holding_the_write_lock_is_bounded(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    let sqlite = f.store.kind() == tabos_store::BackendKind::Sqlite;
    let spin = "const end = Date.now() + 200; while (Date.now() < end) {}";
    let first = format!("function main() {{ tabos.put('k', 'v'); {spin} return 'done'; }}");
    let last = format!("function main() {{ {spin} tabos.put('k2', 'v'); return 'done'; }}");
    install(&rt, &p, "a", "first", Language::Js, &first).unwrap();
    install(&rt, &p, "a", "last", Language::Js, &last).unwrap();
    install(&rt, &p, "a", "wfirst", Language::Wasm, WASM_WRITE_THEN_SPIN).unwrap();
    assert_eq!(call(&rt, &p, "a", "last", b"").unwrap(), b"done");
    assert_eq!(kv::get(&f.store, "a", "k2").unwrap(), Some(b"v".to_vec()));
    let got = call(&rt, &p, "a", "first", b"");
    if sqlite {
        let e = got.unwrap_err();
        assert_eq!(failure_kind(&e), FailureKind::Timeout, "{e}");
        assert!(e.to_string().contains("write lock past 40 ms"), "{e}");
        assert_eq!(kv::get(&f.store, "a", "k").unwrap(), None, "nothing stays");
        let e = call(&rt, &p, "a", "wfirst", b"").unwrap_err();
        assert_eq!(failure_kind(&e), FailureKind::Timeout, "{e}");
        assert!(e.to_string().contains("write lock past 40 ms"), "{e}");
        assert_eq!(kv::get(&f.store, "a", "k").unwrap(), None, "nothing stays");
    } else {
        assert_eq!(got.unwrap(), b"done");
        // The wasm one spins to its own deadline, and says so.
        let e = call(&rt, &p, "a", "wfirst", b"").unwrap_err();
        assert_eq!(failure_kind(&e), FailureKind::Timeout, "{e}");
        assert!(!e.to_string().contains("write lock"), "{e}");
    }
}

/// Issue 43, item 2: a procedure called by a proc acts for it — its file
/// reads and writes, sends and receipts are the proc's `proc_event` rows,
/// as the proc's own calls would be: a read-write procedure's in its own
/// transaction, a read-only one's (run on a read connection, which cannot
/// record) committed before the call returns. The same procedures called
/// by a client acting for no proc record nothing.
fn a_procs_calls_are_its_provenance(b: Backend) {
    let Some((f, p, rt)) = setup(b) else { return };
    let s = f.store.clone();
    let root = common::as_user("a", "root");
    let pid = Pid::new("worker-1").unwrap();
    rt.block_on(async {
        common::realm_with_proc_and_file(&s, "a", &pid, "/in", b"input").await;
        ipc::create_mailbox(&s, &root, "inbox", ipc::MailboxOptions::default())
            .await
            .unwrap();
    });
    install(
        &rt,
        &p,
        "a",
        "relay",
        Language::Js,
        "function main() { const d = tabos.read('/in'); tabos.write('/out', d); \
         tabos.send('inbox', d); const m = tabos.recv('inbox'); return m.data; }",
    )
    .unwrap();
    install_read_only(
        &rt,
        &p,
        "a",
        "peek",
        "function main() { return tabos.read('/in'); }",
    )
    .unwrap();
    let events = || -> Vec<(String, String)> {
        s.query(
            "SELECT event, detail FROM proc_event WHERE realm = 'a' AND pid = $1 \
             AND event NOT IN ('spawn', 'assign') ORDER BY seq",
            tabos_store::params![pid.as_str()],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect()
    };
    let by_client = |name: &str| call(&rt, &p, "a", name, b"").unwrap();
    // A client acting for no proc: nothing recorded.
    assert_eq!(by_client("relay"), b"input");
    assert_eq!(by_client("peek"), b"input");
    assert_eq!(events(), Vec::<(String, String)>::new());
    // The proc's credential.
    let proc_caller = Caller::of_started_proc("a", &pid, "root", None).unwrap();
    let by_proc = |name: &str| {
        rt.block_on(p.call(&proc_caller, name, Vec::new()))
            .unwrap()
            .result
    };
    assert_eq!(by_proc("relay"), b"input");
    let relayed = events();
    let names: Vec<&str> = relayed.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names,
        ["fs_read", "fs_write", "send", "recv"],
        "{relayed:?}"
    );
    assert_eq!(relayed[0].1, "/in @0 +5");
    assert_eq!(relayed[1].1, "/out @0 +5");
    assert_eq!(
        relayed[2].1, relayed[3].1,
        "the send and its receipt name the same message"
    );
    assert!(relayed[2].1.starts_with("inbox #"), "{relayed:?}");
    // Read-only, on a read connection: its read is recorded all the same,
    // before the answer, and nothing else.
    assert_eq!(by_proc("peek"), b"input");
    let after = events();
    assert_eq!(after.len(), relayed.len() + 1, "{after:?}");
    assert_eq!(
        after.last().unwrap(),
        &("fs_read".to_string(), "/in @0 +5".to_string())
    );
}
