//! IPC over gRPC and between wasm procs, on an in-process node over an
//! embedded store.

use crate::common;

use common::{code, start};
use tabos_client::{proto, Client};
use tabos_sandbox::programs;
use tabos_store::testing::TempDir;

const REALM: &str = "default";

fn out(to: &str, payload: &[u8]) -> proto::Outgoing {
    proto::Outgoing {
        to: to.into(),
        payload: payload.to_vec(),
        message_id: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_send_receive_stream_and_get_clear_errors() {
    let dir = TempDir::new("ipc-grpc");
    let n = start(&dir, "ipc-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.create_mailbox(REALM, "inbox", 0, None).await.unwrap();
    c.create_mailbox(REALM, "tiny", 100, Some(true))
        .await
        .unwrap();

    assert_eq!(
        c.send(REALM, "alice", "inbox", b"one".to_vec())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        c.send(REALM, "alice", "inbox", b"two".to_vec())
            .await
            .unwrap(),
        2
    );
    let peeked = c.peek(REALM, "inbox", 0).await.unwrap();
    assert_eq!(peeked.len(), 2);
    let got = c.recv(REALM, "inbox", 1, 0).await.unwrap();
    assert_eq!(
        (got[0].payload.as_slice(), got[0].sender.as_str()),
        (&b"one"[..], "alice")
    );
    let info = c.mailbox(REALM, "inbox").await.unwrap();
    assert_eq!((info.queued, info.queued_bytes), (1, 3));

    // A stream delivers what is queued, then what is sent later.
    let mut stream = c.recv_stream(REALM, "inbox", 0).await.unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.messages[0].payload, b"two");
    let mut c2 = c.clone();
    let sent = c2
        .multicast(
            REALM,
            "",
            &["inbox".into(), "tiny".into()],
            b"both".to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(sent.len(), 2);
    let later = stream.message().await.unwrap().unwrap();
    assert_eq!(later.messages[0].payload, b"both");
    drop(stream);
    assert_eq!(
        c.recv(REALM, "tiny", 0, 0).await.unwrap()[0].payload,
        b"both"
    );

    // A receive that waits is answered by a later send.
    let waiter = {
        let mut c = c.clone();
        tokio::spawn(async move { c.recv(REALM, "inbox", 0, 60_000).await })
    };
    c.send(REALM, "bob", "inbox", b"late".to_vec())
        .await
        .unwrap();
    assert_eq!(waiter.await.unwrap().unwrap()[0].payload, b"late");
    // One that times out returns nothing.
    assert!(c.recv(REALM, "inbox", 0, 10).await.unwrap().is_empty());

    // Idempotent send.
    let with_id = proto::Outgoing {
        message_id: "m-1".into(),
        ..out("inbox", b"once")
    };
    let a = c
        .send_many(REALM, "carol", vec![with_id.clone()])
        .await
        .unwrap();
    let b = c.send_many(REALM, "carol", vec![with_id]).await.unwrap();
    assert!(!a[0].duplicate && b[0].duplicate && a[0].seq == b[0].seq);
    assert_eq!(c.recv(REALM, "inbox", 0, 0).await.unwrap().len(), 1);

    // Errors, each clear and each changing nothing.
    let e = c
        .send(REALM, "", "nobody", b"x".to_vec())
        .await
        .unwrap_err();
    assert_eq!(code(&e), tonic::Code::NotFound, "{e}");
    let e = c.recv(REALM, "nobody", 0, 1_000).await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::NotFound, "{e}");
    assert_eq!(
        code(&c.recv_stream(REALM, "nobody", 0).await.unwrap_err()),
        tonic::Code::NotFound
    );
    let huge = vec![0u8; tabos_kernel::ipc::PAYLOAD_BYTES_MAX + 1];
    let e = c.send(REALM, "", "inbox", huge).await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("exceeds"), "{e}");
    let e = c.send(REALM, "", "tiny", vec![1; 101]).await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::ResourceExhausted, "{e}");
    assert!(e.to_string().contains("full"), "{e}");
    for bad in ["a/b", "", "proc/", "x y"] {
        let e = c.send(REALM, "", bad, b"x".to_vec()).await.unwrap_err();
        assert_eq!(code(&e), tonic::Code::InvalidArgument, "{bad:?}: {e}");
    }
    let e = c
        .send_many(REALM, "", vec![out("inbox", b"ok"), out("nobody", b"x")])
        .await
        .unwrap_err();
    assert_eq!(code(&e), tonic::Code::NotFound);
    let e = c.create_mailbox(REALM, "inbox", 0, None).await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::AlreadyExists);
    let e = c
        .create_mailbox("no such realm!", "m", 0, None)
        .await
        .unwrap_err();
    assert_eq!(code(&e), tonic::Code::InvalidArgument);
    let info = c.mailbox(REALM, "inbox").await.unwrap();
    assert_eq!(info.queued, 0, "{info:?}");

    // The delivered message of the logging mailbox is in message_log.
    let logged = c
        .sql("SELECT receiver, payload FROM message_log", vec![])
        .await
        .unwrap();
    assert_eq!(logged.rows.len(), 1);
    assert_eq!(c.remove_mailbox(REALM, "tiny").await.unwrap(), 0);
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undelivered_messages_survive_a_node_restart() {
    let dir = TempDir::new("ipc-restart");
    let n = start(&dir, "ipc-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.create_mailbox(REALM, "durable", 0, None).await.unwrap();
    for i in 0..10u8 {
        c.send(REALM, "a", "durable", vec![i]).await.unwrap();
    }
    assert_eq!(c.recv(REALM, "durable", 3, 0).await.unwrap().len(), 3);
    drop(c);
    n.shut_down().await;

    let n = start(&dir, "ipc-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let rest = c.recv(REALM, "durable", 0, 0).await.unwrap();
    assert_eq!(
        rest.iter().map(|m| m.payload[0]).collect::<Vec<_>>(),
        (3..10).collect::<Vec<u8>>()
    );
    n.shut_down().await;
}

/// Peeks at its own empty mailbox (must get EAGAIN), then sends "hello" to
/// mailbox `me` twice with message id `id-1`.
const IDEM_WAT: &str = r#"(module
  (import "tabos" "send" (func $send (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "tabos" "recv" (func $recv (param i32 i32 i32 i64 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "me")
  (data (i32.const 16) "id-1")
  (data (i32.const 32) "hello")
  (func (export "_start") (local $rc i32)
    (local.set $rc (call $recv (i32.const 0) (i32.const 0) (i32.const 1) (i64.const 0)
                               (i32.const 1024) (i32.const 1024) (i32.const 2048) (i32.const 256) (i32.const 4096)))
    (if (i32.ne (local.get $rc) (i32.const 6)) (then (call $exit (i32.add (i32.const 10) (local.get $rc)))))
    (local.set $rc (call $send (i32.const 0) (i32.const 2) (i32.const 32) (i32.const 5) (i32.const 16) (i32.const 4)))
    (if (local.get $rc) (then (call $exit (i32.const 2))))
    (local.set $rc (call $send (i32.const 0) (i32.const 2) (i32.const 32) (i32.const 5) (i32.const 16) (i32.const 4)))
    (if (local.get $rc) (then (call $exit (i32.const 3))))))"#;

fn wasm_proc(pid: &str, program: &std::path::Path) -> proto::ProcDescriptor {
    proto::ProcDescriptor {
        pid: pid.into(),
        kind: proto::ProcKind::Wasm.into(),
        program: program.to_str().unwrap().into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_procs_message_each_other_and_clients() {
    let dir = TempDir::new("ipc-wasm");
    let n = start(&dir, "ipc-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let echo = dir.path().join("echo.wat");
    std::fs::write(&echo, programs::echo()).unwrap();
    let ping = dir.path().join("ping.wat");
    let rounds = 50;
    let spec = programs::Ping {
        to: vec!["proc/echo-a".into(), "proc/echo-b".into()],
        burst: 3,
        rounds,
        payload_bytes: 100,
    };
    std::fs::write(&ping, programs::ping(&spec).unwrap()).unwrap();

    // Two echo procs, and a pinger multicasting to both.
    c.spawn(REALM, wasm_proc("echo-a", &echo)).await.unwrap();
    c.spawn(REALM, wasm_proc("echo-b", &echo)).await.unwrap();
    c.spawn(REALM, wasm_proc("pinger", &ping)).await.unwrap();
    for pid in ["pinger", "echo-a", "echo-b"] {
        let s = c.wait_exit(REALM, pid).await.unwrap();
        assert_eq!(
            (s.state().name(), s.exit_status),
            ("exited", Some(0)),
            "{pid}: {s:?}"
        );
    }
    let times = c
        .logs(REALM, "pinger", proto::LogStream::Stdout)
        .await
        .unwrap();
    assert_eq!(programs::ping_times(&times.data).len(), rounds as usize);

    // A client talks to a wasm echo proc: replies come to its own mailbox.
    c.spawn(REALM, wasm_proc("echo-c", &echo)).await.unwrap();
    c.create_mailbox(REALM, "me", 0, None).await.unwrap();
    for i in 0..20u32 {
        c.send(REALM, "me", "proc/echo-c", i.to_le_bytes().to_vec())
            .await
            .unwrap();
        let reply = c.recv(REALM, "me", 1, 60_000).await.unwrap();
        assert_eq!(reply[0].payload, i.to_le_bytes());
        assert_eq!(reply[0].sender, "proc/echo-c");
    }
    c.send(REALM, "me", "proc/echo-c", vec![]).await.unwrap();
    let s = c.wait_exit(REALM, "echo-c").await.unwrap();
    assert_eq!(s.exit_status, Some(0), "{s:?}");
    // Its mailbox closed with it.
    let e = c
        .send(REALM, "me", "proc/echo-c", b"x".to_vec())
        .await
        .unwrap_err();
    assert_eq!(code(&e), tonic::Code::FailedPrecondition, "{e}");

    // A proc blocked in recv is evicted: the wait ends and it is stopped.
    c.spawn(REALM, wasm_proc("waiter", &echo)).await.unwrap();
    c.wait_start(REALM, "waiter").await.unwrap();
    c.evict(REALM, "waiter").await.unwrap();
    let s = c.wait_exit(REALM, "waiter").await.unwrap();
    assert_eq!(s.state().name(), "evicted", "{s:?}");

    // A pool worker: an echo proc serving the shared named mailbox "jobs".
    c.create_mailbox(REALM, "jobs", 0, None).await.unwrap();
    let pool = dir.path().join("pool.wat");
    std::fs::write(&pool, programs::echo_from(Some("jobs")).unwrap()).unwrap();
    c.spawn(REALM, wasm_proc("worker", &pool)).await.unwrap();
    c.send(REALM, "me", "jobs", b"job-1".to_vec())
        .await
        .unwrap();
    let reply = c.recv(REALM, "me", 1, 60_000).await.unwrap();
    assert_eq!(
        (reply[0].payload.as_slice(), reply[0].sender.as_str()),
        (&b"job-1"[..], "proc/worker")
    );
    c.send(REALM, "me", "jobs", vec![]).await.unwrap();
    assert_eq!(
        c.wait_exit(REALM, "worker").await.unwrap().exit_status,
        Some(0)
    );

    // Peek (nothing yet: EAGAIN) and an idempotent send, twice, from a proc.
    let idem = dir.path().join("idem.wat");
    std::fs::write(&idem, IDEM_WAT).unwrap();
    c.spawn(REALM, wasm_proc("idem", &idem)).await.unwrap();
    let s = c.wait_exit(REALM, "idem").await.unwrap();
    assert_eq!(s.exit_status, Some(0), "{s:?}");
    let got = c.recv(REALM, "me", 0, 0).await.unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].payload.as_slice(), got[0].sender.as_str()),
        (&b"hello"[..], "proc/idem")
    );
    assert_eq!(got[0].message_id, "id-1");

    // A wasm proc sending to a mailbox that does not exist sees ENOENT.
    let lost = dir.path().join("lost.wat");
    let spec = programs::Ping {
        to: vec!["nobody".into()],
        burst: 1,
        rounds: 1,
        payload_bytes: 8,
    };
    std::fs::write(&lost, programs::ping(&spec).unwrap()).unwrap();
    c.spawn(REALM, wasm_proc("lost", &lost)).await.unwrap();
    let s = c.wait_exit(REALM, "lost").await.unwrap();
    let enoent = 100 + i64::from(tabos_sandbox::host::ENOENT);
    assert_eq!(s.exit_status, Some(enoent), "{s:?}");
    let err = c
        .logs(REALM, "lost", proto::LogStream::Stderr)
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&err.data).contains("tabos.send"),
        "{err:?}"
    );
    n.shut_down().await;
}
