//! The Fs service over gRPC on an in-process node: files end to end,
//! permissions between users, du as one query, and clear refusals.

use crate::common;

use common::{code, start};
use tabos_client::fault::{ErrorReason, More};
use tabos_client::{proto, Client};
use tabos_store::testing::TempDir;
use tonic::Code;

const REALM: &str = "default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_over_grpc_with_owners_and_clear_refusals() {
    let dir = TempDir::new("fs-grpc");
    let n = start(&dir, "fs-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.fs_mkdir(REALM, "root", "/home", 0).await.unwrap();
    c.fs_mkdir(REALM, "root", "/home/alice", 0).await.unwrap();
    c.fs_chown(REALM, "root", "/home/alice", "alice")
        .await
        .unwrap();

    // A file bigger than one message, written and read back in chunks.
    let big: Vec<u8> = (0..9_000_000u32).map(|i| (i % 253) as u8).collect();
    let mut at = 0;
    for chunk in big.chunks(tabos_client::fs::CHUNK_BYTES) {
        let size = c
            .fs_write(REALM, "alice", "/home/alice/big", at, chunk.to_vec(), true)
            .await
            .unwrap();
        at += chunk.len() as i64;
        assert_eq!(size, at);
    }
    let mut back = Vec::new();
    let n_read = c
        .fs_read_all(REALM, "alice", "/home/alice/big", &mut back)
        .await
        .unwrap();
    assert_eq!(n_read as usize, big.len());
    assert!(back == big, "the file read back differs");
    let st = c.fs_stat(REALM, "/home/alice/big").await.unwrap();
    assert_eq!(
        (st.owner.as_str(), st.size, st.mode),
        ("alice", big.len() as i64, 0o644)
    );
    // Past the 1 MiB threshold its data moved to the node's block store.
    assert_eq!(st.layout, "segments");
    let segments = n.node.files.device().unwrap().segments();
    assert!(!segments.is_empty(), "no segment holds the file");

    // A parallel file: 8 KB blocks spread over both partitions.
    let st = c
        .fs_create_parallel(REALM, "alice", "/home/alice/par", 0)
        .await
        .unwrap();
    assert_eq!((st.layout.as_str(), st.block_size), ("parallel", 8192));
    c.fs_write(
        REALM,
        "alice",
        "/home/alice/par",
        0,
        big[..100_000].to_vec(),
        false,
    )
    .await
    .unwrap();
    let mut back = Vec::new();
    c.fs_read_all(REALM, "alice", "/home/alice/par", &mut back)
        .await
        .unwrap();
    assert!(
        back == big[..100_000],
        "the parallel file read back differs"
    );

    // A private file: bob can neither read nor change it.
    c.fs_create(REALM, "alice", "/home/alice/diary", 0o600)
        .await
        .unwrap();
    c.fs_write(
        REALM,
        "alice",
        "/home/alice/diary",
        0,
        b"secret".to_vec(),
        false,
    )
    .await
    .unwrap();
    let e = c
        .fs_read(REALM, "bob", "/home/alice/diary", 0, 10)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    let e = c
        .fs_unlink(REALM, "bob", "/home/alice/diary")
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");

    // du: one query over the tree.
    let (files, bytes) = c.fs_du(REALM, "/home", "alice", 20 * 1024).await.unwrap();
    assert_eq!((files, bytes), (2, big.len() as i64 + 100_000));
    let (files, _) = c.fs_du(REALM, "/", "", 0).await.unwrap();
    assert_eq!(files, 3);

    // Refusals, each changing nothing.
    let e = c
        .fs_mkdir(REALM, "root", "/home/../etc", 0)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let e = c.fs_create(REALM, "bad user!", "/x", 0).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let e = c.fs_rmdir(REALM, "root", "/home").await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition);
    // Each refusal's reason is a type on the wire (issue 37, item 3), with
    // the path it is about.
    let d = e.detail().unwrap();
    assert_eq!(
        (d.reason(), d.subject.as_str()),
        (ErrorReason::NotEmpty, "/home")
    );
    let e = c
        .fs_rmdir(REALM, "root", "/home/alice/diary")
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let d = e.detail().unwrap();
    assert_eq!(
        (d.reason(), d.subject.as_str()),
        (ErrorReason::NotADirectory, "/home/alice/diary")
    );
    let e = c.fs_unlink(REALM, "root", "/home").await.unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::IsADirectory));
    let e = c.fs_stat(REALM, "/nope").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    let e = c
        .fs_read(REALM, "alice", "/home/alice/big", 0, 5 << 20)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let d = c.fs_readdir(REALM, "root", "/home/alice").await.unwrap();
    let names: Vec<_> = d.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        names,
        ["/home/alice/big", "/home/alice/diary", "/home/alice/par"]
    );
    // A fenced write is refused once its directory has a newer epoch.
    let fence = |epoch| proto::Fence {
        dir: "/jobs".into(),
        epoch,
    };
    c.fs_write_fenced(REALM, "root", "/fenced", 0, b"one".to_vec(), true, fence(2))
        .await
        .unwrap();
    let e = c
        .fs_write_fenced(REALM, "root", "/fenced", 0, b"two".to_vec(), true, fence(1))
        .await
        .unwrap_err();
    assert!(e.is_stale_epoch(), "{e}");
    match e.detail().and_then(|d| d.more) {
        Some(More::StaleEpoch(s)) => assert_eq!((s.current, s.given), (2, 1)),
        other => panic!("a stale epoch's detail, not {other:?}"),
    }
    assert_eq!(
        c.fs_read(REALM, "root", "/fenced", 0, 10).await.unwrap(),
        b"one"
    );
    // Other realms see nothing of this one.
    let e = c.fs_stat("other", "/home").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    // Removing the big file gives its segments back.
    c.fs_unlink(REALM, "alice", "/home/alice/big")
        .await
        .unwrap();
    assert!(n.node.files.device().unwrap().segments().is_empty());
    n.shut_down().await;
}

/// A wasm proc reads and writes files through its host calls, on the
/// node's own filesystem (a file in block segments here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_proc_copies_a_file_in_segments() {
    let dir = TempDir::new("fs-wasm");
    let n = start(&dir, "fs-wasm-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        c.fs_write(
            REALM,
            "root",
            "/src",
            (i << 20) as i64,
            chunk.to_vec(),
            true,
        )
        .await
        .unwrap();
    }
    assert_eq!(c.fs_stat(REALM, "/src").await.unwrap().layout, "segments");
    let copy = |pid: &str, from: &str, to: &str| {
        let wat = dir.path().join(format!("{pid}.wat"));
        std::fs::write(&wat, tabos_sandbox::programs::file_copy(from, to).unwrap()).unwrap();
        proto::ProcDescriptor {
            pid: pid.into(),
            kind: proto::ProcKind::Wasm.into(),
            program: wat.to_str().unwrap().into(),
            ..Default::default()
        }
    };
    c.spawn(REALM, copy("cp", "/src", "/dst")).await.unwrap();
    let st = c.wait_exit(REALM, "cp").await.unwrap();
    assert_eq!(st.exit_status, Some(0), "{st:?}");
    let out = c.logs(REALM, "cp", proto::LogStream::Stdout).await.unwrap();
    assert_eq!(out.data, b"3000000");
    let mut back = Vec::new();
    c.fs_read_all(REALM, "root", "/dst", &mut back)
        .await
        .unwrap();
    assert!(back == data, "the copy differs");
    assert_eq!(c.fs_stat(REALM, "/dst").await.unwrap().layout, "segments");
    // Its host calls are its provenance: every byte it read of /src and
    // wrote to /dst, path by path.
    let rows = c
        .sql(
            "SELECT event, detail FROM proc_event WHERE realm = $1 AND pid = 'cp' \
             AND event LIKE 'fs_%' ORDER BY seq",
            vec![tabos_client::Value::Text(REALM.into())],
        )
        .await
        .unwrap();
    let mut bytes = std::collections::BTreeMap::<String, usize>::new();
    for r in &rows.rows {
        let (event, detail) = (common::text(&r[0]), common::text(&r[1]));
        let (path, n) = detail.split_once(" @").unwrap();
        let n: usize = n.split_once(" +").unwrap().1.parse().unwrap();
        *bytes.entry(format!("{event} {path}")).or_default() += n;
    }
    assert_eq!(
        bytes.into_iter().collect::<Vec<_>>(),
        [
            ("fs_read /src".to_string(), data.len()),
            ("fs_write /dst".to_string(), data.len())
        ]
    );
    // A missing source: the proc sees ENOENT (44) from fs_stat.
    c.spawn(REALM, copy("cp2", "/nope", "/dst2")).await.unwrap();
    let st = c.wait_exit(REALM, "cp2").await.unwrap();
    assert_eq!(st.exit_status, Some(10_044), "{st:?}");
    n.shut_down().await;
}

/// A client acting for a proc has its reads and writes recorded as the
/// proc's provenance events; a pid the realm does not know is refused and
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_for_a_proc_are_its_provenance() {
    let dir = TempDir::new("fs-provenance");
    let n = start(&dir, "fs-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let p = c
        .spawn(
            REALM,
            proto::ProcDescriptor {
                pid: "reader".into(),
                kind: proto::ProcKind::Native.into(),
                class: proto::ProcClass::Be.into(),
                program: "/bin/true".into(),
                cores: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(p.pid, "reader");
    let mut as_proc = c.clone().acting_for("reader");
    as_proc
        .fs_write(REALM, "root", "/f", 0, b"hello".to_vec(), true)
        .await
        .unwrap();
    let mut back = Vec::new();
    as_proc
        .fs_read_all(REALM, "root", "/f", &mut back)
        .await
        .unwrap();
    assert_eq!(back, b"hello");
    let events = c
        .sql(
            "SELECT event, detail FROM proc_event WHERE realm = $1 AND pid = 'reader' \
             AND event LIKE 'fs_%' ORDER BY seq",
            vec![tabos_client::Value::Text(REALM.into())],
        )
        .await
        .unwrap();
    let got: Vec<String> = events
        .rows
        .iter()
        .map(|r| format!("{} {}", common::text(&r[0]), common::text(&r[1])))
        .collect();
    assert_eq!(got, ["fs_write /f @0 +5", "fs_read /f @0 +5"]);
    // An unknown pid: refused, and the write did not happen.
    let mut ghost = c.clone().acting_for("ghost");
    let e = ghost
        .fs_write(REALM, "root", "/g", 0, b"x".to_vec(), true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    assert_eq!(
        code(&c.fs_stat(REALM, "/g").await.unwrap_err()),
        Code::NotFound
    );
    let e = ghost.fs_read(REALM, "root", "/f", 0, 5).await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    n.shut_down().await;
}

/// A client acting for no proc (a user's shell, the SDKs, the mount
/// outside a proc) leaves no event while its realm's provenance is
/// `procs` (the default); with `all`, each of its reads, writes, sends and
/// receipts is recorded as `@USER/CREDENTIAL` — a small file read in its
/// transaction, a large one after it — and `procs` again stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realm_may_record_what_clients_acting_for_no_proc_do() {
    let dir = TempDir::new("fs-client-provenance");
    let n = start(&dir, "fs-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let me = c.who_am_i().await.unwrap();
    let clients_events = |c: &mut Client| {
        rows_text(
            c.clone(),
            "SELECT pid, event, detail FROM proc_event WHERE realm = $1 \
             AND pid LIKE '@%' ORDER BY seq",
            vec![tabos_client::Value::Text(REALM.into())],
            " ",
        )
    };
    let set = |c: &mut Client, p: proto::Provenance| {
        let mut c = c.clone();
        async move {
            c.set_realm(proto::SetRealmRequest {
                realm: REALM.into(),
                provenance: Some(p.into()),
                ..Default::default()
            })
            .await
            .unwrap()
        }
    };
    let big = vec![7u8; 2 << 20];
    c.fs_write(REALM, "root", "/small", 0, b"hello".to_vec(), true)
        .await
        .unwrap();
    assert_eq!(
        c.fs_read(REALM, "root", "/small", 0, 5).await.unwrap(),
        b"hello"
    );
    assert!(
        clients_events(&mut c).await.is_empty(),
        "procs: the default"
    );

    let info = set(&mut c, proto::Provenance::All).await;
    assert_eq!(info.provenance(), proto::Provenance::All);
    c.fs_write(REALM, "root", "/small", 0, b"HELLO".to_vec(), true)
        .await
        .unwrap();
    assert_eq!(
        c.fs_read(REALM, "root", "/small", 1, 3).await.unwrap(),
        b"ELL"
    );
    c.fs_write(REALM, "root", "/big", 0, big.clone(), true)
        .await
        .unwrap();
    let read = c
        .fs_read(REALM, "root", "/big", 4096, 65_536)
        .await
        .unwrap();
    assert_eq!(read, &big[4096..4096 + 65_536]);
    // Past the end: nothing read, nothing recorded.
    assert!(c
        .fs_read(REALM, "root", "/small", 5, 5)
        .await
        .unwrap()
        .is_empty());
    let actor = format!("@root/{}", me.id);
    assert_eq!(
        clients_events(&mut c).await,
        [
            format!("{actor} fs_write /small @0 +5"),
            format!("{actor} fs_read /small @1 +3"),
            format!("{actor} fs_write /big @0 +{}", big.len()),
            format!("{actor} fs_read /big @4096 +65536"),
        ]
    );

    // Its messages too: a send and its receipt, taken from the mailbox or
    // handed over to a receive waiting for it, name the same messages.
    c.create_mailbox(REALM, "inbox", 0, None).await.unwrap();
    c.send(REALM, "", "inbox", b"one".to_vec()).await.unwrap();
    assert_eq!(c.recv(REALM, "inbox", 10, 0).await.unwrap().len(), 1);
    let waiting = {
        let mut c = c.clone();
        tokio::spawn(async move { c.recv(REALM, "inbox", 10, 10_000).await.unwrap() })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    c.send(REALM, "", "inbox", b"two".to_vec()).await.unwrap();
    assert_eq!(waiting.await.unwrap()[0].payload, b"two");
    let events = clients_events(&mut c).await;
    assert_eq!(events.len(), 8, "{events:#?}");
    let sends: Vec<_> = events[4..]
        .iter()
        .filter_map(|e| e.strip_prefix(&format!("{actor} send ")))
        .collect();
    let receipts: Vec<_> = events[4..]
        .iter()
        .filter_map(|e| e.strip_prefix(&format!("{actor} recv ")))
        .collect();
    assert_eq!(sends.len(), 2, "{events:#?}");
    assert_eq!(sends, receipts, "{events:#?}");
    assert!(sends[0].ends_with(" +3"), "{events:#?}");

    // A stored procedure it calls acts for it too: the procedure's reads
    // (on a read connection, recorded before the answer) and writes.
    c.procedure_install(
        REALM,
        "copy",
        "js",
        b"function main() { tabos.write('/copy', tabos.read('/small')); return 'ok'; }".to_vec(),
        tabos_client::procedures::ProcedureLimits::default(),
    )
    .await
    .unwrap();
    c.procedure_install(
        REALM,
        "peek",
        "js",
        b"function main() { return tabos.read('/small'); }".to_vec(),
        tabos_client::procedures::ProcedureLimits::default(),
    )
    .await
    .unwrap();
    let called = c.procedure_call(REALM, "copy", vec![]).await.unwrap();
    assert_eq!(called.result, b"ok");
    let called = c.procedure_call(REALM, "peek", vec![]).await.unwrap();
    assert_eq!(called.result, b"HELLO");
    let events = clients_events(&mut c).await;
    assert_eq!(
        events[8..],
        [
            format!("{actor} fs_read /small @0 +5"),
            format!("{actor} fs_write /copy @0 +5"),
            format!("{actor} fs_read /small @0 +5"),
        ]
    );

    // So does a graph it submits: its procedure tasks' calls, as
    // `@USER/task:GRAPH/TASK`.
    c.graph_submit(
        REALM,
        "g1",
        vec![tabos_client::graphs::procedure_task(
            "t1",
            "peek",
            &serde_json::json!([]),
        )],
        "",
        false,
    )
    .await
    .unwrap();
    let waited = c
        .graph_wait(REALM, "g1", "", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(waited.graph.unwrap().status(), proto::GraphStatus::Success);
    let events = clients_events(&mut c).await;
    assert_eq!(
        events[11..],
        ["@root/task:g1/t1 fs_read /small @0 +5".to_string()]
    );

    // The README's query of what user root touched, by procs or by hand.
    let sql = readme_provenance_queries().remove(5);
    let rows = c.sql(&sql, vec![]).await.unwrap();
    let mut got: Vec<String> = rows
        .rows
        .iter()
        .map(|r| r.iter().map(common::text).collect::<Vec<_>>().join(" "))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            format!("{actor} fs_read /big"),
            format!("{actor} fs_read /small"),
            format!("{actor} fs_write /big"),
            format!("{actor} fs_write /copy"),
            format!("{actor} fs_write /small"),
            "@root/task:g1/t1 fs_read /small".to_string(),
        ]
    );

    let info = set(&mut c, proto::Provenance::Procs).await;
    assert_eq!(info.provenance(), proto::Provenance::Procs);
    c.fs_read(REALM, "root", "/small", 0, 5).await.unwrap();
    c.send(REALM, "", "inbox", b"three".to_vec()).await.unwrap();
    c.procedure_call(REALM, "copy", vec![]).await.unwrap();
    c.procedure_call(REALM, "peek", vec![]).await.unwrap();
    assert_eq!(
        clients_events(&mut c).await.len(),
        12,
        "procs again: no more"
    );
    n.shut_down().await;
}

/// A native proc's own credential makes its file reads and writes its
/// provenance without acting for it explicitly, each recorded with the
/// path (also one written through an open handle); it cannot act for
/// another proc (PERMISSION_DENIED, nothing written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procs_own_credential_records_its_provenance() {
    let dir = TempDir::new("fs-proc-cred");
    let n = start(&dir, "fs-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.fs_write(REALM, "root", "/in", 0, b"input".to_vec(), true)
        .await
        .unwrap();
    for pid in ["worker", "other"] {
        c.spawn(REALM, common::token_printer(pid)).await.unwrap();
    }
    let token = common::printed_token(&mut c, REALM, "worker").await;
    let mut p = n.client_with(&token).await;
    assert_eq!(p.proc_pid(), None, "not acting for it explicitly");
    let data = p.fs_read(REALM, "", "/in", 0, 100).await.unwrap();
    p.fs_write(REALM, "", "/out", 0, data.to_ascii_uppercase(), true)
        .await
        .unwrap();
    // A read at the end reads nothing and records nothing.
    assert!(p
        .fs_read(REALM, "", "/in", 5, 100)
        .await
        .unwrap()
        .is_empty());
    let mut other = p.clone().acting_for("other");
    let e = other
        .fs_write(REALM, "", "/stolen", 0, b"x".to_vec(), true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    assert_eq!(
        code(&c.fs_stat(REALM, "/stolen").await.unwrap_err()),
        Code::NotFound
    );
    let events = |pid: &'static str| {
        rows_text(
            c.clone(),
            "SELECT event, detail FROM proc_event WHERE realm = $1 AND pid = $2 \
             AND event IN ('fs_read', 'fs_write') ORDER BY seq",
            vec![
                tabos_client::Value::Text(REALM.into()),
                tabos_client::Value::Text(pid.into()),
            ],
            " ",
        )
    };
    assert_eq!(
        events("worker").await,
        ["fs_read /in @0 +5", "fs_write /out @0 +5"]
    );
    assert!(events("other").await.is_empty());
    assert_eq!(
        c.fs_read(REALM, "root", "/out", 0, 10).await.unwrap(),
        b"INPUT"
    );
    // The README's provenance queries, as written there: lineage of /out,
    // what root's procs touched in the last hour, and — once /in changes
    // (by a client acting for no proc) — who read it before.
    let queries = readme_provenance_queries();
    assert_eq!(queries.len(), 7, "{queries:#?}");
    let reader = c.clone();
    let answer = |sql: String| {
        let mut c = reader.clone();
        async move {
            let rows = c
                .sql(&sql, vec![])
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let mut got: Vec<String> = rows
                .rows
                .iter()
                .map(|r| r.iter().map(common::text).collect::<Vec<_>>().join(" "))
                .collect();
            got.sort();
            got
        }
    };
    assert_eq!(answer(queries[0].clone()).await, ["worker /in"]);
    assert_eq!(
        answer(queries[1].clone()).await,
        ["fs_read /in", "fs_write /out"]
    );
    // Nothing sent yet; then the worker sends what it read to `other`,
    // which takes it from its mailbox.
    assert!(answer(queries[2].clone()).await.is_empty());
    p.send(REALM, "proc/worker", "proc/other", data.clone())
        .await
        .unwrap();
    let took = c.recv(REALM, "proc/other", 10, 0).await.unwrap();
    assert_eq!(took[0].payload, data);
    assert_eq!(
        answer(queries[2].clone()).await,
        ["worker proc/other other"]
    );
    assert!(
        answer(queries[3].clone()).await.is_empty(),
        "nothing changed yet"
    );
    c.fs_write(REALM, "root", "/in", 0, b"later".to_vec(), false)
        .await
        .unwrap();
    assert_eq!(answer(queries[3].clone()).await, ["worker /in"]);
    // One node: nothing went over the network (the cluster tests have two).
    assert!(answer(queries[4].clone()).await.is_empty());
    for pid in ["worker", "other"] {
        c.evict(REALM, pid).await.unwrap();
    }
    n.shut_down().await;
}

/// Opening a handle is a provenance event, `fs_open` (`PATH @r|w|rw`),
/// and a client opening for a process of its host (`tabos mount`, for the
/// one behind a FUSE request) names it — pid, uid, program — as the
/// README's query reads it back; a malformed host caller (pid 0, a program
/// empty, too long or with a control character) is INVALID_ARGUMENT and
/// opens and records nothing; a realm recording procs only records no
/// client's open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_is_provenance_naming_the_host_process_it_is_for() {
    use tabos_client::fs::FsOpen;
    let dir = TempDir::new("fs-open-provenance");
    let n = start(&dir, "fs-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let me = c.who_am_i().await.unwrap();
    let actor = format!("@root/{}", me.id);
    let opens = |c: &Client| {
        rows_text(
            c.clone(),
            "SELECT pid, detail FROM proc_event WHERE realm = $1 \
             AND event = 'fs_open' ORDER BY seq",
            vec![tabos_client::Value::Text(REALM.into())],
            " ",
        )
    };
    let handles = |c: &Client| rows_text(c.clone(), "SELECT count(*) FROM fs_open", vec![], "");
    c.fs_write(REALM, "root", "/small", 0, b"hello".to_vec(), true)
        .await
        .unwrap();
    let session =
        tabos_client::names::Session::open(&c, REALM, "root", std::time::Duration::from_secs(30))
            .await
            .unwrap();
    let host = |pid: u32, program: &str| proto::FsHostCaller {
        pid,
        uid: 1000,
        program: program.into(),
    };
    let open = |c: &mut Client, access: proto::FsAccess, h: Option<proto::FsHostCaller>| {
        let (mut c, session) = (c.clone(), session.id().to_string());
        async move {
            let how = FsOpen {
                access,
                create: None,
                host: h,
            };
            c.fs_open_for(REALM, "root", "/small", &session, how).await
        }
    };
    // Procs only, the default: a client's open is not recorded.
    open(
        &mut c,
        proto::FsAccess::Read,
        Some(host(4242, "/usr/bin/cat")),
    )
    .await
    .unwrap();
    assert!(opens(&c).await.is_empty());

    c.set_realm(proto::SetRealmRequest {
        realm: REALM.into(),
        provenance: Some(proto::Provenance::All.into()),
        ..Default::default()
    })
    .await
    .unwrap();
    open(
        &mut c,
        proto::FsAccess::Read,
        Some(host(4242, "/usr/bin/cat")),
    )
    .await
    .unwrap();
    open(&mut c, proto::FsAccess::ReadWrite, None)
        .await
        .unwrap();
    let held = handles(&c).await;
    for bad in [
        host(0, "/usr/bin/cat"),
        host(7, ""),
        host(7, &"x".repeat(tabos_kernel::fs::HOST_PROGRAM_BYTES_MAX + 1)),
        host(7, "/usr/bin/cat\n/etc/forged @w"),
    ] {
        let e = open(&mut c, proto::FsAccess::Write, Some(bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{bad:?}: {e}");
    }
    assert_eq!(handles(&c).await, held, "refused: nothing opened");
    assert_eq!(
        opens(&c).await,
        [
            format!("{actor} /small @r by pid 4242 uid 1000 /usr/bin/cat"),
            format!("{actor} /small @rw"),
        ]
    );
    // The README's query: which Linux processes opened /small, for what.
    let sql = readme_provenance_queries().remove(6);
    assert_eq!(
        rows_text(c.clone(), &sql, vec![], " | ").await,
        [format!("{actor} | r | pid 4242 uid 1000 /usr/bin/cat")]
    );
    session.close().await.unwrap();
    n.shut_down().await;
}

/// The rows `sql` answers, each its columns' text joined by `sep`.
async fn rows_text(
    mut c: Client,
    sql: impl AsRef<str>,
    params: Vec<tabos_client::Value>,
    sep: &str,
) -> Vec<String> {
    let sql = sql.as_ref();
    let rows = c
        .sql(sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.rows
        .iter()
        .map(|r| r.iter().map(common::text).collect::<Vec<_>>().join(sep))
        .collect()
}

/// The SQL blocks of the README's provenance paragraph (from
/// "**Provenance.**" to "**Retention.**"), one query each.
fn readme_provenance_queries() -> Vec<String> {
    let readme = include_str!("../../../README.md");
    let start = readme.find("**Provenance.**").expect("the paragraph");
    let end = start + readme[start..].find("**Retention.**").expect("its end");
    let mut queries = Vec::new();
    let mut sql = String::new();
    for line in readme[start..end].lines() {
        match line.strip_prefix("        ") {
            Some(code) => {
                sql.push_str(code);
                sql.push('\n');
            }
            None if !sql.is_empty() => queries.push(std::mem::take(&mut sql)),
            None => {}
        }
    }
    queries
}

/// A realm holds at most `WATCHES_PER_REALM_MAX` watches (of files and
/// of names) open on a node: past it a watch is RESOURCE_EXHAUSTED, while
/// another realm and the operator still watch, and an ended watch gives
/// its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realm_holds_a_bounded_number_of_watches() {
    use tabos_client::proto::WatchMode;
    use tabos_node::streams::WATCHES_PER_REALM_MAX;
    let dir = TempDir::new("fs-watches");
    let n = start(&dir, "fs-node").await;
    let mut op = n.client().await;
    let admin = |name: &'static str| {
        let mut op = op.clone();
        let n = &n;
        async move {
            let made = op.create_realm(name, proto::Scheduler::Fifo).await.unwrap();
            n.client_with(&made.admin_token).await
        }
    };
    let mut a = admin("watchful").await;
    let mut b = admin("other").await;
    // Half file watches, half name watches: one count.
    let mut held = Vec::new();
    for i in 0..WATCHES_PER_REALM_MAX {
        if i % 2 == 0 {
            let mut s = a.fs_watch("", "").await.unwrap();
            assert!(s.message().await.unwrap().unwrap().watching);
            held.push(Some((Some(s), None)));
        } else {
            let mut s = a.watch("", "/", WatchMode::Dir).await.unwrap();
            s.message().await.unwrap().unwrap();
            held.push(Some((None, Some(s))));
        }
    }
    let e = a.fs_watch("", "").await.unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert!(e.to_string().contains("watches"), "{e}");
    let e = a.watch("", "/", WatchMode::Dir).await.unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    // Another realm, and the operator, are not held back by it.
    let mut s = b.fs_watch("", "").await.unwrap();
    assert!(s.message().await.unwrap().unwrap().watching);
    let mut s = op.fs_watch(REALM, "root").await.unwrap();
    assert!(s.message().await.unwrap().unwrap().watching);
    let shown = op.status().await.unwrap();
    let cap = shown
        .realm_caps
        .iter()
        .find(|c| c.what == "watches")
        .expect("watches are shown among the realms' caps");
    assert_eq!(cap.per_realm_max as usize, WATCHES_PER_REALM_MAX);
    assert_eq!(
        cap.by_realm.get("watchful").copied(),
        Some(WATCHES_PER_REALM_MAX as u64)
    );
    // A watch its client ends gives its place back (once the node has
    // seen the call go).
    held[0] = None;
    let mut again = None;
    for _ in 0..200 {
        match a.fs_watch("", "").await {
            Ok(s) => {
                again = Some(s);
                break;
            }
            Err(e) => assert_eq!(code(&e), Code::ResourceExhausted, "{e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(again.is_some(), "the ended watch's place was given back");
    drop((held, again, s));
    n.shut_down().await;
}

/// A watch whose client has stopped reading does not hold a stopping node
/// up, nor outlive it: the node stops, the watch's task ends (its place
/// given back), and a client that reads on gets what was sent and then an
/// error — never a clean end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_its_client_does_not_read_ends_when_the_node_stops() {
    let dir = TempDir::new("fs-unread-watch");
    let n = start(&dir, "fs-node").await;
    let mut op = n.client().await;
    // A client whose windows are small, so that the node's sends wait on
    // it after a few changes rather than after megabytes.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", n.addr))
        .unwrap()
        .initial_stream_window_size(Some(65_535))
        .initial_connection_window_size(Some(65_535))
        .connect()
        .await
        .unwrap();
    let mut slow = proto::fs_client::FsClient::with_interceptor(
        channel,
        tabos_client::Bearer::new(&n.token).unwrap(),
    );
    let mut unread = slow
        .watch(proto::FsWatchRequest {
            realm: REALM.into(),
            user: "root".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(unread.message().await.unwrap().unwrap().watching);
    // Changes with long names, well past what the stream and the client's
    // window hold (about 1 MiB), and within what the subscription holds.
    let mut deep = String::new();
    for i in 0..3 {
        deep.push_str(&format!("/{i}{}", "d".repeat(250)));
        op.fs_mkdir(REALM, "root", &deep, 0).await.unwrap();
    }
    let mut writers = Vec::new();
    for w in 0..4 {
        let (mut c, deep) = (op.clone(), deep.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..500 {
                let path = format!("{deep}/{w}-{i:04}-{}", "f".repeat(200));
                c.fs_create(REALM, "root", &path, 0).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let node = n.node.clone();
    assert_eq!(node.watches.usage(), vec![(String::new(), 1)]);
    // Bounded only so that a hang fails the test rather than the run.
    tokio::time::timeout(std::time::Duration::from_secs(120), n.shut_down())
        .await
        .expect("the node stopped with a watch its client does not read");
    assert!(
        node.watches.usage().is_empty(),
        "the unread watch's task ended with the node: {:?}",
        node.watches.usage()
    );
    let mut changes = 0;
    let end = loop {
        match unread.message().await {
            Ok(Some(m)) => changes += m.changes.len(),
            Ok(None) => panic!("the watch ended cleanly after {changes} changes"),
            Err(e) => break e,
        }
    };
    assert!(changes > 0, "changes were sent before the stop");
    // (Its connection outlives the node's server in this process, so the
    // node's last word reaches it.)
    assert_eq!(end.code(), Code::Unavailable, "{end}");
    assert!(end.message().contains("shutting down"), "{end}");
}
