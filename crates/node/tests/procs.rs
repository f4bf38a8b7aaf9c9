//! The proc API over gRPC with procd running native procs, in-process on
//! port 0 over an embedded store.

use tabos_client::{proto, Client, Error as ClientError};
use tabos_node::{Node, NodeSettings};
use tabos_store::testing::TempDir;
use tabos_store::Config;

async fn start(dir: &TempDir, cores: i64) -> (Node, String, tokio::sync::oneshot::Sender<()>) {
    let settings = NodeSettings {
        node_id: "test-node".into(),
        logs: dir.path().join("logs"),
        realm: "default".into(),
        cores,
        mem_mb: 1024,
        heartbeat: std::time::Duration::from_secs(1),
    };
    let node = Node::open_with(
        &Config::sqlite(dir.path().join("db")).with_partitions(2),
        settings,
    )
    .unwrap();
    let listener = tabos_node::bind("127.0.0.1:0").await.unwrap();
    let addr = tabos_node::local_addr(&listener).unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(tabos_node::serve(node.clone(), listener, async {
        let _ = stopped.await;
    }));
    (node, addr, stop)
}

fn native(program: &str, args: &[&str]) -> proto::ProcDescriptor {
    proto::ProcDescriptor {
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn code(e: &ClientError) -> tonic::Code {
    match e {
        ClientError::Status(s) => s.code(),
        other => panic!("expected a status, got {other}"),
    }
}

/// The listener is bound before serve() starts, so a connection made now
/// waits in the backlog until the node has registered its worker and serves.
async fn connect(addr: &str) -> Client {
    Client::connect(addr).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_procs_run_report_status_and_keep_logs() {
    let dir = TempDir::new("procd");
    let (_node, addr, stop) = start(&dir, 2).await;
    let mut c = connect(&addr).await;
    let s = c
        .spawn(
            "default",
            native(
                "/bin/sh",
                &["-c", "echo out $TABOS_PID; echo err >&2; exit 3"],
            ),
        )
        .await
        .unwrap();
    let done = c.wait_exit("default", &s.pid).await.unwrap();
    assert_eq!(done.state, "exited");
    assert_eq!(done.exit_status, Some(3));
    let out = c.logs("default", &s.pid, "stdout").await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.data),
        format!("out {}\n", s.pid)
    );
    let err = c.logs("default", &s.pid, "stderr").await.unwrap();
    assert_eq!(err.data, b"err\n");

    // WaitStart, then Evict stops a sleeping proc; WaitEvict sees the request.
    let sleeper = proto::ProcDescriptor {
        pid: "sleeper".into(),
        ..native("sleep", &["100"])
    };
    c.spawn("default", sleeper).await.unwrap();
    assert_eq!(
        c.wait_start("default", "sleeper").await.unwrap().state,
        "running"
    );
    c.evict("default", "sleeper").await.unwrap();
    assert!(
        c.wait_evict("default", "sleeper")
            .await
            .unwrap()
            .evict_requested
    );
    let gone = c.wait_exit("default", "sleeper").await.unwrap();
    assert_eq!(gone.state, "evicted");
    assert_eq!(gone.exit_status, Some(128 + 15), "SIGTERM");
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_defers_and_exits_start_the_next() {
    let dir = TempDir::new("defer");
    let (_node, addr, stop) = start(&dir, 1).await;
    let mut c = connect(&addr).await;
    let first = c.spawn("default", native("sleep", &["100"])).await.unwrap();
    let second = c.spawn("default", native("true", &[])).await.unwrap();
    assert!(!first.worker.is_empty());
    assert!(
        second.worker.is_empty(),
        "one core, held by the sleeper: the second waits"
    );
    c.wait_start("default", &first.pid).await.unwrap();
    assert_eq!(
        c.proc_status("default", &second.pid).await.unwrap().state,
        "spawned"
    );
    // The first's end (here: its eviction) assigns the second, which runs.
    c.evict("default", &first.pid).await.unwrap();
    assert_eq!(
        c.wait_exit("default", &second.pid)
            .await
            .unwrap()
            .exit_status,
        Some(0)
    );
    let first_done = c.wait_exit("default", &first.pid).await.unwrap();
    let second_done = c.proc_status("default", &second.pid).await.unwrap();
    assert!(second_done.start_us.unwrap() >= first_done.exit_us.unwrap());
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_descriptors_are_refused_and_write_nothing() {
    let dir = TempDir::new("badproc");
    let (node, addr, stop) = start(&dir, 1).await;
    let mut c = connect(&addr).await;
    c.spawn(
        "default",
        proto::ProcDescriptor {
            pid: "taken".into(),
            ..native("true", &[])
        },
    )
    .await
    .unwrap();
    let cases = [
        (
            "default",
            native("/no/such/binary", &[]),
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            native("no-such-program-anywhere", &[]),
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            proto::ProcDescriptor {
                cores: Some(0),
                ..native("true", &[])
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            proto::ProcDescriptor {
                cores: Some(-2),
                ..native("true", &[])
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            proto::ProcDescriptor {
                kind: "cobol".into(),
                ..native("true", &[])
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            proto::ProcDescriptor {
                parent: "ghost".into(),
                ..native("true", &[])
            },
            tonic::Code::NotFound,
        ),
        (
            "default",
            proto::ProcDescriptor {
                pid: "taken".into(),
                ..native("true", &[])
            },
            tonic::Code::AlreadyExists,
        ),
        ("nowhere", native("true", &[]), tonic::Code::NotFound),
        (
            "default",
            proto::ProcDescriptor {
                pid: "a/b".into(),
                ..native("true", &[])
            },
            tonic::Code::InvalidArgument,
        ),
    ];
    let store = node.store.clone();
    let count = move || {
        store.query("SELECT count(*) FROM proc", &[]).unwrap().rows[0]
            .get::<i64>(0)
            .unwrap()
    };
    let before = tokio::task::spawn_blocking(count.clone()).await.unwrap();
    for (realm, d, want) in cases {
        let e = c.spawn(realm, d.clone()).await.unwrap_err();
        assert_eq!(code(&e), want, "{d:?}: {e}");
    }
    assert_eq!(tokio::task::spawn_blocking(count).await.unwrap(), before);
    // Unknown pids.
    assert_eq!(
        code(&c.wait_exit("default", "nobody").await.unwrap_err()),
        tonic::Code::NotFound
    );
    assert_eq!(
        code(&c.logs("default", "nobody", "stdout").await.unwrap_err()),
        tonic::Code::NotFound
    );
    assert_eq!(
        code(&c.logs("default", "taken", "stdin").await.unwrap_err()),
        tonic::Code::InvalidArgument
    );
    let _ = stop.send(());
}
