//! The proc API over gRPC with procd running native procs, in-process on
//! port 0 over an embedded store.

use tabos_client::{proto, Client, Endpoint, Error as ClientError};
use tabos_node::{Node, NodeSettings};
use tabos_store::testing::TempDir;
use tabos_store::Config;

async fn start(dir: &TempDir, cores: i64) -> (Node, Endpoint, tokio::sync::oneshot::Sender<()>) {
    start_with(dir, cores, |_| Ok(())).await
}

/// [`start`], when the node jails native procs here (root, x86-64 or
/// aarch64, namespaces): else the node is stopped, the reason printed and
/// `None` returned.
async fn start_jailed(
    dir: &TempDir,
    cores: i64,
) -> Option<(Node, Endpoint, tokio::sync::oneshot::Sender<()>)> {
    let (node, addr, stop) = start(dir, cores).await;
    if node.confine.jailed() {
        return Some((node, addr, stop));
    }
    eprintln!(
        "no jail here ({:?}): nothing to test",
        node.confine.describe()
    );
    let _ = stop.send(());
    None
}

/// Opens a node, runs `prepare` on its store, then serves.
async fn start_with(
    dir: &TempDir,
    cores: i64,
    prepare: impl FnOnce(&tabos_store::Store) -> tabos_kernel::Result<()>,
) -> (Node, Endpoint, tokio::sync::oneshot::Sender<()>) {
    start_tuned(dir, cores, 100, prepare).await
}

/// [`start_with`] a BE utilization target of `be_util_pct`.
async fn start_tuned(
    dir: &TempDir,
    cores: i64,
    be_util_pct: u32,
    prepare: impl FnOnce(&tabos_store::Store) -> tabos_kernel::Result<()>,
) -> (Node, Endpoint, tokio::sync::oneshot::Sender<()>) {
    start_custom(dir, cores, |s| s.be_util_pct = be_util_pct, prepare).await
}

/// [`start_with`] settings changed by `tune`.
async fn start_custom(
    dir: &TempDir,
    cores: i64,
    tune: impl FnOnce(&mut NodeSettings),
    prepare: impl FnOnce(&tabos_store::Store) -> tabos_kernel::Result<()>,
) -> (Node, Endpoint, tokio::sync::oneshot::Sender<()>) {
    let mut settings = NodeSettings {
        node_id: "test-node".into(),
        logs: dir.path().join("logs"),
        realm: "default".into(),
        cores,
        mem_mb: 1024,
        // Long enough that a worker registered by a test without a procd
        // keeps its lease for the whole test.
        heartbeat: std::time::Duration::from_secs(10),
        // The tests' programs and modules: in temporary directories and
        // the build's target directory (an operator's --program-dir).
        program_dirs: vec![
            std::env::temp_dir(),
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(".."),
        ],
        ..tabos_node::NodeSettings::defaults()
    };
    tune(&mut settings);
    let node = Node::open_with(
        &Config::sqlite(dir.path().join("db")).with_partitions(2),
        settings,
    )
    .unwrap();
    prepare(&node.store).unwrap();
    let token = node.operator_credential("test").await.unwrap().token;
    let listener = tabos_node::bind("127.0.0.1:0").await.unwrap();
    let addr = tabos_node::local_addr(&listener).unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(tabos_node::serve(node.clone(), listener, async {
        let _ = stopped.await;
    }));
    (node, Endpoint::new(addr, token), stop)
}

fn native(program: &str, args: &[&str]) -> proto::ProcDescriptor {
    proto::ProcDescriptor {
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn wasm(program: &str) -> proto::ProcDescriptor {
    proto::ProcDescriptor {
        kind: proto::ProcKind::Wasm.into(),
        program: program.into(),
        ..Default::default()
    }
}

/// Prints its first argument and `TABOS_PID`'s presence, then exits with 42.
const WASM_ECHO: &str = r#"(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $as (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $ag (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func $strlen (param $p i32) (result i32) (local $n i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
      (local.set $n (i32.add (local.get $n) (i32.const 1))) (br $l)))
    (local.get $n))
  (func (export "_start") (local $arg i32)
    ;; argc, size at 0, 4; argv at 64; strings at 256
    (drop (call $as (i32.const 0) (i32.const 4)))
    (drop (call $ag (i32.const 64) (i32.const 256)))
    (local.set $arg (i32.load (i32.const 68)))       ;; argv[1]
    (i32.store (i32.const 16) (local.get $arg))
    (i32.store (i32.const 20) (call $strlen (local.get $arg)))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
    (call $exit (i32.const 42))))"#;

const WASM_SPIN: &str = r#"(module (memory (export "memory") 1)
  (func (export "_start") (loop $l (br $l))))"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_procs_run_report_status_keep_logs_and_are_evicted() {
    let dir = TempDir::new("wasmproc");
    let (node, addr, stop) = start(&dir, 2).await;
    let echo = dir.path().join("echo.wat");
    std::fs::write(&echo, WASM_ECHO).unwrap();
    let spin = dir.path().join("spin.wat");
    std::fs::write(&spin, WASM_SPIN).unwrap();
    let mut c = connect(&addr).await;

    let d = proto::ProcDescriptor {
        args: vec!["hello-wasm".into()],
        ..wasm(echo.to_str().unwrap())
    };
    let s = c.spawn("default", d).await.unwrap();
    let done = c.wait_exit("default", &s.pid).await.unwrap();
    assert_eq!(
        (done.state().name(), done.exit_status),
        ("exited", Some(42)),
        "{done:?}"
    );
    let out = c
        .logs("default", &s.pid, proto::LogStream::Stdout)
        .await
        .unwrap();
    assert_eq!(out.data, b"hello-wasm");
    // It wrote nothing to stderr: an empty log, not an error.
    assert!(c
        .logs("default", &s.pid, proto::LogStream::Stderr)
        .await
        .unwrap()
        .data
        .is_empty());

    // An infinite loop runs until evicted, and the eviction stops it.
    let looping = c
        .spawn("default", wasm(spin.to_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(
        c.wait_start("default", &looping.pid)
            .await
            .unwrap()
            .state()
            .name(),
        "running"
    );
    c.evict("default", &looping.pid).await.unwrap();
    let gone = c.wait_exit("default", &looping.pid).await.unwrap();
    assert_eq!(gone.state().name(), "evicted", "{gone:?}");

    // A trap fails the proc with the trap's message.
    let trap = dir.path().join("trap.wat");
    std::fs::write(&trap, r#"(module (func (export "_start") unreachable))"#).unwrap();
    let t = c
        .spawn("default", wasm(trap.to_str().unwrap()))
        .await
        .unwrap();
    let failed = c.wait_exit("default", &t.pid).await.unwrap();
    assert_eq!(failed.state().name(), "failed");
    assert!(failed.error.contains("unreachable"), "{failed:?}");

    // Each module was compiled once, by the Spawn RPC.
    assert_eq!(node.sandbox.cached_modules(), 3);
    let _ = stop.send(());
}

fn code(e: &ClientError) -> tonic::Code {
    match e {
        ClientError::Status(s) => s.code(),
        other => panic!("expected a status, got {other}"),
    }
}

/// The listener is bound before serve() starts, so a connection made now
/// waits in the backlog until the node has registered its worker and serves.
async fn connect(addr: &Endpoint) -> Client {
    addr.connect().await.unwrap()
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
    assert_eq!(done.state().name(), "exited");
    assert_eq!(done.exit_status, Some(3));
    let out = c
        .logs("default", &s.pid, proto::LogStream::Stdout)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.data),
        format!("out {}\n", s.pid)
    );
    let err = c
        .logs("default", &s.pid, proto::LogStream::Stderr)
        .await
        .unwrap();
    assert_eq!(err.data, b"err\n");

    // WaitStart, then Evict stops a sleeping proc; WaitEvict sees the request.
    let sleeper = proto::ProcDescriptor {
        pid: "sleeper".into(),
        ..native("sleep", &["100"])
    };
    c.spawn("default", sleeper).await.unwrap();
    assert_eq!(
        c.wait_start("default", "sleeper")
            .await
            .unwrap()
            .state()
            .name(),
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
    assert_eq!(gone.state().name(), "evicted");
    assert_eq!(gone.exit_status, Some(128 + 15), "SIGTERM");
    let _ = stop.send(());
}

/// The bytes of logs `realm` stores, as the API reports them.
async fn stored_logs(c: &mut Client, realm: &str) -> i64 {
    let r = c.list_realms().await.unwrap();
    let r = r.iter().find(|r| r.realm == realm).unwrap();
    r.stored
        .iter()
        .find(|s| s.class == proto::StorageClass::Logs as i32)
        .map(|s| s.bytes)
        .unwrap()
}

/// A realm's procs' logs are bounded: past the realm's bound its oldest
/// output goes first (the first proc's), and what is kept is counted as
/// the realm's stored logs. One stream keeps its newest 8 MiB, and says
/// the rest was rotated out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realms_logs_are_bounded_and_counted() {
    let dir = TempDir::new("procd-logs");
    let (_node, addr, stop) =
        start_custom(&dir, 2, |s| s.logs_per_realm_max = 10_000, |_| Ok(())).await;
    let mut c = connect(&addr).await;
    let chatty = |pid: &str| proto::ProcDescriptor {
        pid: pid.into(),
        ..sh("head -c 6000 /dev/zero | tr '\\0' x; echo e >&2")
    };
    let (done, out, _) = finished_output(&mut c, "default", chatty("first")).await;
    assert_eq!(done.state().name(), "exited");
    assert_eq!(out.len(), 6_000);
    assert_eq!(stored_logs(&mut c, "default").await, 6_002);
    let (_, out, _) = finished_output(&mut c, "default", chatty("second")).await;
    assert_eq!(out.len(), 6_000, "the newest are kept");
    // 12,004 bytes passed 10,000: the first proc's output went first.
    let gone = c
        .logs("default", "first", proto::LogStream::Stdout)
        .await
        .unwrap();
    assert!(gone.data.is_empty() && gone.truncated, "{gone:?}");
    let mut kept = 0i64;
    for pid in ["first", "second"] {
        for stream in [proto::LogStream::Stdout, proto::LogStream::Stderr] {
            kept += c.logs("default", pid, stream).await.unwrap().data.len() as i64;
        }
    }
    assert!((6_002..=10_000).contains(&kept), "{kept}");
    assert_eq!(stored_logs(&mut c, "default").await, kept);
    let _ = stop.send(());
}

/// One stream past 8 MiB keeps its newest 8 MiB, and says the rest was
/// rotated out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_keeps_its_newest_bytes() {
    let dir = TempDir::new("procd-long-log");
    let (_node, addr, stop) = start(&dir, 2).await;
    let mut c = connect(&addr).await;
    let (done, out, _) = finished_output(
        &mut c,
        "default",
        proto::ProcDescriptor {
            pid: "long".into(),
            ..sh("head -c 9000000 /dev/zero | tr '\\0' x; echo; echo END")
        },
    )
    .await;
    assert_eq!(done.state().name(), "exited");
    let r = c
        .logs("default", "long", proto::LogStream::Stdout)
        .await
        .unwrap();
    assert!(r.truncated, "the beginning was rotated out");
    let max = tabos_node::procd::LOG_BYTES_MAX;
    assert!(r.data.len() as u64 <= max && r.data.len() as u64 > max - (64 << 10));
    assert!(out.ends_with("x\nEND\n"), "{}", &out[out.len() - 10..]);
    // Its last line, followed: read from the end, not the first MiB's.
    let mut s = c
        .follow_logs_with(
            "default",
            "long",
            proto::LogStream::Stdout,
            tabos_client::LogsWant {
                tail_lines: 1,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut followed = Vec::new();
    while let Some(m) = s.message().await.unwrap() {
        followed.extend_from_slice(&m.data);
    }
    assert_eq!(followed, b"END\n");
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
        c.proc_status("default", &second.pid)
            .await
            .unwrap()
            .state()
            .name(),
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
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm\x01\0\0\0 not really").unwrap();
    let no_start = dir.path().join("lib.wat");
    std::fs::write(&no_start, "(module (memory 1))").unwrap();
    let cases = [
        (
            "default",
            wasm(garbage.to_str().unwrap()),
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            wasm(no_start.to_str().unwrap()),
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            wasm("/no/such/module.wasm"),
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            // Kind 3 was JavaScript procs, never run: an unknown kind now.
            proto::ProcDescriptor {
                kind: 3,
                ..native("main.js", &[])
            },
            tonic::Code::InvalidArgument,
        ),
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
                // No kind has this number (a newer client's, or garbage).
                kind: 99,
                ..native("true", &[])
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "default",
            proto::ProcDescriptor {
                class: 7,
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
        code(
            &c.logs("default", "nobody", proto::LogStream::Stdout)
                .await
                .unwrap_err()
        ),
        tonic::Code::NotFound
    );
    // 7: no stream has this number.
    let stdin = c
        .procs_rpc()
        .logs(proto::LogsRequest {
            realm: "default".into(),
            pid: "taken".into(),
            stream: 7,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(stdin.code(), tonic::Code::InvalidArgument, "{stdin}");
    let _ = stop.send(());
}

/// A bound for a wait that would otherwise hang, not a measurement.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// σOS Figure 3-5: BE procs are admitted by measured utilization. A BE
/// proc that spins keeps the next one out, while an LC proc (its core
/// reserved) starts at once; when the spinner ends, the next BE proc runs
/// although the LC proc still holds the node's one declared core — it
/// sleeps, so the core is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn be_procs_wait_for_utilization_and_lc_procs_do_not() {
    let dir = TempDir::new("lcbe");
    // A target of 5 % of the one core: a spinning proc is far above it
    // however busy the machine running the tests is.
    let (_node, addr, stop) = start_tuned(&dir, 1, 5, |_| Ok(())).await;
    let mut c = connect(&addr).await;
    let be = |pid: &str, program: &str, args: &[&str]| proto::ProcDescriptor {
        pid: pid.into(),
        class: proto::ProcClass::Be.into(),
        ..native(program, args)
    };
    c.spawn("default", be("be1", "sh", &["-c", "while :; do :; done"]))
        .await
        .unwrap();
    c.wait_start("default", "be1").await.unwrap();
    // The core is busy: the next BE proc is placed but not admitted...
    c.spawn("default", be("be2", "true", &[])).await.unwrap();
    // ...while an LC proc, which reserved its core, starts at once.
    let lc = proto::ProcDescriptor {
        pid: "lc".into(),
        ..native("sleep", &["100"])
    };
    c.spawn("default", lc).await.unwrap();
    c.wait_start("default", "lc").await.unwrap();
    assert_eq!(
        c.proc_status("default", "be2")
            .await
            .unwrap()
            .state()
            .name(),
        "spawned"
    );
    // The spinner ends: measured utilization falls under the target and
    // be2 runs beside the sleeping LC proc.
    c.evict("default", "be1").await.unwrap();
    let be1 = c.wait_exit("default", "be1").await.unwrap();
    let be2 = tokio::time::timeout(PATIENCE, c.wait_exit("default", "be2"))
        .await
        .expect("be2 is admitted once the spinner is gone")
        .unwrap();
    assert_eq!((be2.state().name(), be2.exit_status), ("exited", Some(0)));
    assert!(be2.start_us.unwrap() >= be1.exit_us.unwrap());
    assert_eq!(
        c.proc_status("default", "lc").await.unwrap().state().name(),
        "running"
    );
    c.evict("default", "lc").await.unwrap();
    let _ = stop.send(());
}

/// BE procs that declare a core each but wait (sleep) do not keep each
/// other out: on a one-core node, three run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_be_procs_do_not_fill_a_node() {
    let dir = TempDir::new("beidle");
    let (_node, addr, stop) = start(&dir, 1).await;
    let mut c = connect(&addr).await;
    for pid in ["s1", "s2", "s3"] {
        let d = proto::ProcDescriptor {
            pid: pid.into(),
            class: proto::ProcClass::Be.into(),
            cores: Some(1),
            ..native("sleep", &["600"])
        };
        c.spawn("default", d).await.unwrap();
    }
    for pid in ["s1", "s2", "s3"] {
        let started = tokio::time::timeout(PATIENCE, c.wait_start("default", pid))
            .await
            .expect("an idle BE proc leaves room for the next")
            .unwrap();
        assert_eq!(started.state().name(), "running");
    }
    for pid in ["s1", "s2", "s3"] {
        c.evict("default", pid).await.unwrap();
        c.wait_exit("default", pid).await.unwrap();
    }
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procs_left_on_a_stuck_worker_are_stolen() {
    let dir = TempDir::new("steal");
    // A worker whose node never claims anything (it has no procd), and a
    // realm whose locality scheduler sends procs there.
    let (node, addr, stop) = start_with(&dir, 2, |store| {
        tabos_kernel::realms::create(store, "default", tabos_kernel::sched::Scheduler::Locality)?;
        tabos_kernel::procs::register_worker(
            store,
            "default",
            &tabos_kernel::sched::WorkerSpec {
                worker_id: tabos_kernel::ids::WorkerId::new("stuck.w0").unwrap(),
                node_id: "stuck".into(),
                cores: 4,
                mem_mb: 1024,
            },
        )?;
        Ok(())
    })
    .await;
    let mut c = connect(&addr).await;
    for (pid, class) in [("lc", proto::ProcClass::Lc), ("be", proto::ProcClass::Be)] {
        let d = proto::ProcDescriptor {
            pid: pid.into(),
            class: class.into(),
            home_node: "stuck".into(),
            ..native("true", &[])
        };
        assert_eq!(c.spawn("default", d).await.unwrap().worker, "stuck.w0");
    }
    for pid in ["lc", "be"] {
        let done = c.wait_exit("default", pid).await.unwrap();
        assert_eq!((done.state().name(), done.exit_status), ("exited", Some(0)));
        assert_eq!(
            done.worker,
            node.worker_id().to_string(),
            "run by the thief"
        );
    }
    let store = node.store.clone();
    let steals = tokio::task::spawn_blocking(move || {
        store
            .query("SELECT count(*) FROM proc_event WHERE event = 'steal'", &[])
            .unwrap()
            .rows[0]
            .get::<i64>(0)
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(steals, 2);
    let _ = stop.send(());
}

/// Whether OS process `pid` is gone (or a zombie waiting for its reaper):
/// not running any more.
fn not_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Whether a process whose command line is `argv` runs on this machine
/// (zombies aside). A jailed proc's own pids are its pid namespace's, so
/// its processes are found by what they run.
fn alive(argv: &[&str]) -> bool {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            return false;
        };
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want) && !not_running(pid)
    })
}

/// Waits (boundedly) until no process runs `argv`; whether none does.
/// Whether a process of `argv` is running within a few seconds (a shell
/// prints a child's pid as it forks, before the child has exec'd).
async fn appears(argv: &[&str]) -> bool {
    for _ in 0..500 {
        if alive(argv) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

async fn gone(argv: &[&str]) -> bool {
    for _ in 0..500 {
        if !alive(argv) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

/// The OS pids a proc printed, one per line, once it has printed `n`.
async fn printed_pids(c: &mut Client, pid: &str, n: usize) -> Vec<u32> {
    for _ in 0..500 {
        let out = c
            .logs("default", pid, proto::LogStream::Stdout)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.data).into_owned();
        let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() >= n {
            return pids;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("proc {pid} did not print {n} pids");
}

/// A native proc is its process group: it has exited when its main
/// process has (a background child holding its stdout does not keep it
/// running), what it left running is killed, and eviction ends every
/// process of the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_procs_are_process_groups() {
    let dir = TempDir::new("pgroup");
    let (_node, addr, stop) = start(&dir, 2).await;
    let mut c = connect(&addr).await;

    // Exits while its background child (which keeps stdout open) sleeps:
    // without waitpid this wait would last 600 s.
    let s = c
        .spawn(
            "default",
            proto::ProcDescriptor {
                pid: "bg".into(),
                ..native("/bin/sh", &["-c", "sleep 6002 & echo $!; echo done"])
            },
        )
        .await
        .unwrap();
    let done = c.wait_exit("default", &s.pid).await.unwrap();
    assert_eq!((done.state().name(), done.exit_status), ("exited", Some(0)));
    // It printed the child's pid: the child was started.
    printed_pids(&mut c, "bg", 1).await;
    let out = c
        .logs("default", "bg", proto::LogStream::Stdout)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.data).contains("done"));
    // Killed with its group when the proc ended (reaped or a zombie soon).
    assert!(
        gone(&["sleep", "6002"]).await,
        "the background child survived"
    );

    // Eviction of a shell with two children: no survivor.
    let s = c
        .spawn(
            "default",
            proto::ProcDescriptor {
                pid: "family".into(),
                ..native(
                    "/bin/sh",
                    &["-c", "sleep 7771 & echo $!; sleep 7781 & echo $!; wait"],
                )
            },
        )
        .await
        .unwrap();
    printed_pids(&mut c, &s.pid, 2).await;
    assert!(appears(&["sleep", "7771"]).await && appears(&["sleep", "7781"]).await);
    c.evict("default", &s.pid).await.unwrap();
    let evicted = c.wait_exit("default", &s.pid).await.unwrap();
    assert_eq!(evicted.state().name(), "evicted");
    for k in ["7771", "7781"] {
        assert!(
            gone(&["sleep", k]).await,
            "child sleep {k} survived the eviction"
        );
    }
    let _ = stop.send(());
}

/// A proc's stdout, once it has exited.
async fn finished_output(
    c: &mut Client,
    realm: &str,
    d: proto::ProcDescriptor,
) -> (proto::ProcStatus, String, String) {
    let s = c.spawn(realm, d).await.unwrap();
    let done = c.wait_exit(realm, &s.pid).await.unwrap();
    let out = c
        .logs(realm, &s.pid, proto::LogStream::Stdout)
        .await
        .unwrap();
    let err = c
        .logs(realm, &s.pid, proto::LogStream::Stderr)
        .await
        .unwrap();
    (
        done,
        String::from_utf8_lossy(&out.data).into_owned(),
        String::from_utf8_lossy(&err.data).into_owned(),
    )
}

fn sh(script: &str) -> proto::ProcDescriptor {
    native("/bin/sh", &["-c", script])
}

/// Confinement (as root, on a machine with the v1 cgroup controllers): a
/// native proc runs as its realm's uid, cannot read the node's data
/// directory or signal another realm's proc, is killed for memory past its
/// limit (and recorded so), cannot fork past the pids limit, and its CPU
/// time and peak memory are recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_procs_are_confined() {
    let dir = TempDir::new("confined");
    let (node, addr, stop) = start(&dir, 2).await;
    if !node.confine.describe().iter().any(|l| l.contains("uid")) {
        eprintln!("not root: confinement is off, nothing to test");
        let _ = stop.send(());
        return;
    }
    let mut c = connect(&addr).await;
    let uid = tabos_node::confine::uid_for("default");

    let (done, out, _) = finished_output(&mut c, "default", sh("id -u; id -G")).await;
    assert_eq!(done.exit_status, Some(0));
    assert_eq!(out, format!("{uid}\n{uid}\n"));

    let data = dir.path().join("db");
    let (_, out, _) = finished_output(
        &mut c,
        "default",
        sh(&format!(
            "ls {} >/dev/null 2>&1 && echo read || echo refused",
            data.display()
        )),
    )
    .await;
    assert_eq!(out, "refused\n");

    // Another realm's proc cannot be signalled: it is not even there to
    // see (its own pid namespace), and by its host pid not reachable.
    c.create_realm("other", proto::Scheduler::Fifo)
        .await
        .unwrap();
    let victim = c
        .spawn(
            "other",
            proto::ProcDescriptor {
                pid: "victim".into(),
                ..native("sleep", &["601"])
            },
        )
        .await
        .unwrap();
    c.wait_start("other", &victim.pid).await.unwrap();
    let mut os_pid = None;
    for _ in 0..500 {
        os_pid = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            (cmd == b"sleep\x00601\x00")
                .then(|| e.file_name().to_str()?.parse::<u32>().ok())
                .flatten()
        });
        if os_pid.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let os_pid = os_pid.expect("the victim is running");
    let (_, out, _) = finished_output(
        &mut c,
        "default",
        sh(&format!(
            "kill -KILL {os_pid} 2>/dev/null && echo killed || echo refused; \
             ls /proc | grep -c '^[0-9]'"
        )),
    )
    .await;
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("refused"));
    let seen: u32 = lines.next().unwrap().parse().unwrap();
    assert!(seen <= 4, "its /proc shows its own processes only: {out}");
    assert_eq!(
        c.proc_status("other", "victim")
            .await
            .unwrap()
            .state()
            .name(),
        "running"
    );
    c.evict("other", "victim").await.unwrap();
    c.wait_exit("other", "victim").await.unwrap();

    // Past its memory: killed, and recorded as killed for memory.
    let hog = proto::ProcDescriptor {
        mem_mb: Some(32),
        ..sh("a=$(head -c 200000000 /dev/zero | tr '\\0' x); echo ${#a}")
    };
    let (done, _, _) = finished_output(&mut c, "default", hog).await;
    assert_eq!(done.state().name(), "failed", "{done:?}");
    assert!(done.error.contains("killed for memory"), "{done:?}");

    // A fork bomb stops at the pids limit, and nothing of it survives.
    let bomb = format!(
        "i=0; while [ $i -lt {} ]; do sleep 3 & i=$((i+1)); done; echo forked",
        tabos_node::confine::PIDS_MAX + 100
    );
    let (done, _, err) = finished_output(&mut c, "default", sh(&bomb)).await;
    assert!(err.to_lowercase().contains("fork"), "{done:?} {err}");

    // Usage is in the proc row.
    let (done, _, _) = finished_output(
        &mut c,
        "default",
        proto::ProcDescriptor {
            pid: "busy".into(),
            ..sh("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
        },
    )
    .await;
    assert_eq!(done.exit_status, Some(0));
    let r = c
        .sql(
            "SELECT cpu_us, peak_mem_bytes FROM proc WHERE realm = 'default' AND pid = 'busy'",
            vec![],
        )
        .await
        .unwrap();
    for v in &r.rows[0] {
        assert!(
            matches!(v, Some(tabos_client::Value::Int(n)) if *n > 0),
            "{:?}",
            r.rows
        );
    }
    let _ = stop.send(());
}

/// The jail (as root): a native proc sees its working directory, the
/// system's directories read-only and the host paths its realm allows —
/// nothing of the node's — and its seccomp filter refuses what would
/// leave the jail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_procs_are_jailed() {
    let dir = TempDir::new("jailed");
    let (node, addr, stop) = start(&dir, 2).await;
    if !node.confine.jailed() {
        eprintln!(
            "no jail here ({:?}): nothing to test",
            node.confine.describe()
        );
        let _ = stop.send(());
        return;
    }
    let mut c = connect(&addr).await;
    let script = "pwd; ls / | tr '\\n' ' '; echo; \
                  echo kept > f && cat f; \
                  touch /new 2>/dev/null && echo root-writable || echo root-read-only; \
                  touch /usr/new 2>/dev/null && echo usr-writable || echo usr-read-only; \
                  unshare -U true 2>/dev/null && echo escaped || echo unshare-refused";
    let (done, out, err) = finished_output(&mut c, "default", sh(script)).await;
    assert_eq!(done.exit_status, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], tabos_node::jail::WORK_DIR);
    // The node's own executable is there too (a proc may run the CLI):
    // the directory it is under, and nothing else.
    let exe = std::env::current_exe().unwrap();
    let exe_top = exe.iter().nth(1).unwrap().to_str().unwrap().to_string();
    for seen in lines[1].split_whitespace() {
        assert!(
            [
                "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sbin",
                "tabos", "tmp", "usr", &exe_top,
                // The node's socket (/run/tabos/node.sock): its way to the node.
                "run",
            ]
            .contains(&seen),
            "the jail's root shows {seen}: {}",
            lines[1]
        );
    }
    assert_eq!(
        &lines[2..],
        ["kept", "root-read-only", "usr-read-only", "unshare-refused"]
    );

    // Host paths: refused unless the realm's operator allows them.
    let inputs = dir.path().join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    std::fs::write(inputs.join("in.txt"), "the input\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path(), inputs.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let reader = proto::ProcDescriptor {
        host_paths: vec![inputs.display().to_string()],
        ..native("cat", &[&inputs.join("in.txt").display().to_string()])
    };
    let e = c.spawn("default", reader.clone()).await.unwrap_err();
    assert_eq!(e.code(), Some(tonic::Code::PermissionDenied), "{e}");
    c.set_realm(proto::SetRealmRequest {
        realm: "default".into(),
        host_paths: vec![dir.path().display().to_string()],
        ..Default::default()
    })
    .await
    .unwrap();
    let (done, out, err) = finished_output(&mut c, "default", reader).await;
    assert_eq!(
        (done.exit_status, out.as_str()),
        (Some(0), "the input\n"),
        "{err}"
    );
    // Without asking, the same file is not there.
    let (_, out, _) = finished_output(
        &mut c,
        "default",
        sh(&format!(
            "cat {} 2>/dev/null || echo absent",
            inputs.join("in.txt").display()
        )),
    )
    .await;
    assert_eq!(out, "absent\n");
    // Within the allowance by its text, but a symlink to elsewhere: the
    // proc fails and sees nothing. `/` is never a host path.
    let secret = dir.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::os::unix::fs::symlink(&secret, inputs.join("link")).unwrap();
    let sneaky = proto::ProcDescriptor {
        host_paths: vec![inputs.join("link").display().to_string()],
        ..native("true", &[])
    };
    let (done, _, _) = finished_output(&mut c, "default", sneaky).await;
    assert_eq!(done.state().name(), "failed", "{done:?}");
    assert!(done.error.contains("symlink"), "{done:?}");
    let root = proto::ProcDescriptor {
        host_paths: vec!["/".into()],
        ..native("true", &[])
    };
    let e = c.spawn("default", root).await.unwrap_err();
    assert_eq!(e.code(), Some(tonic::Code::InvalidArgument), "{e}");
    let _ = stop.send(());
}

/// Jailed procs that copy the node's template root (no host paths, code
/// or program of their own: `jail::Template`) see nothing of each other: a
/// proc's `/tmp`, working directory and mounts are its own while another
/// runs beside it, and the shared root stays read-only and as it was for
/// the procs after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procs_copying_the_template_root_see_nothing_of_each_other() {
    let dir = TempDir::new("template");
    let Some((node, addr, stop)) = start_jailed(&dir, 2).await else {
        return;
    };
    let mut c = connect(&addr).await;
    // What a proc sees of its root: /tmp, its working directory, whether
    // it may write the root, and its mounts (each line: its mount point,
    // and the source's path within its file system).
    let look = "ls -A /tmp | tr '\\n' ' '; echo '|'; ls -A . | tr '\\n' ' '; echo '|'; \
                touch /new 2>/dev/null && echo root-writable || echo root-read-only; \
                cut -d' ' -f4,5 /proc/self/mountinfo | sort";
    // A holder writes into its /tmp and working directory, and waits.
    let holder = c
        .spawn(
            "default",
            proto::ProcDescriptor {
                pid: "holder".into(),
                ..sh("echo mine > /tmp/held && echo mine > held && sleep 30")
            },
        )
        .await
        .unwrap();
    let held = dir
        .path()
        .join("logs")
        .join(tabos_node::JAILS_DIR)
        .join("work/default.holder/held");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !held.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never wrote"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let seen = |pid: &str| proto::ProcDescriptor {
        pid: pid.into(),
        ..sh(look)
    };
    let (done, beside, err) = finished_output(&mut c, "default", seen("beside")).await;
    assert_eq!(done.exit_status, Some(0), "{err}");
    let parts: Vec<&str> = beside.splitn(3, '|').collect();
    assert_eq!(parts[0].trim(), "", "another proc's /tmp shows: {beside}");
    assert_eq!(parts[1].trim(), "", "another proc's work shows: {beside}");
    assert!(parts[2].starts_with("\nroot-read-only\n"), "{beside}");
    assert!(!beside.contains("default.holder"), "{beside}");
    assert!(beside.contains("/work/default.beside /tabos"), "{beside}");
    assert!(
        node.confine
            .describe()
            .iter()
            .any(|l| l.contains("template")),
        "no template root was made: {:?}",
        node.confine.describe()
    );
    c.evict("default", &holder.pid).await.unwrap();
    c.wait_exit("default", &holder.pid).await.unwrap();
    // After it: the same root, with nothing of the holder's or the
    // looker's — the same mounts but for its own working directory.
    let (done, after, err) = finished_output(&mut c, "default", seen("after")).await;
    assert_eq!(done.exit_status, Some(0), "{err}");
    assert_eq!(
        after.replace("default.after", "default.beside"),
        beside,
        "the root changed between procs"
    );
    let _ = stop.send(());
}

/// Where the host shares its mounts (as systemd does), a proc copying the
/// template root still shares no mount event with the host: its working
/// directory is copied from the host's tree (`open_tree`), which makes the
/// copy a peer of its source until the jail makes it private. Here the
/// node's log directory (and so the jails' working directories) is a
/// shared mount of the test's; a mount the host makes under the proc's
/// working directory while it runs must not appear in the jail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_the_host_makes_later_does_not_reach_a_jail() {
    let dir = TempDir::new("propagation");
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    /// Unmounted (lazily) however the test ends.
    struct Mounted(String);
    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .args(["-l", &self.0])
                .status();
        }
    }
    let logs_s = logs.display().to_string();
    run(&["mount", "-t", "tmpfs", "tabos-test", &logs_s]);
    let _logs = Mounted(logs_s.clone());
    run(&["mount", "--make-shared", &logs_s]);
    let Some((node, addr, stop)) = start_jailed(&dir, 2).await else {
        return;
    };
    let mut c = connect(&addr).await;
    let watcher = c
        .spawn(
            "default",
            proto::ProcDescriptor {
                pid: "watcher".into(),
                ..sh("touch ready; while [ ! -e go ]; do sleep 0.05; done; \
                      grep -c ' /tabos/sub ' /proc/self/mountinfo; true")
            },
        )
        .await
        .unwrap();
    let work = logs
        .join(tabos_node::JAILS_DIR)
        .join("work/default.watcher");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !work.join("ready").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the watcher never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let sub = work.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let sub_s = sub.display().to_string();
    run(&["mount", "-t", "tmpfs", "tabos-host-later", &sub_s]);
    let sub_mount = Mounted(sub_s);
    std::fs::write(work.join("go"), "").unwrap();
    let done = c.wait_exit("default", &watcher.pid).await.unwrap();
    let out = c
        .logs("default", &watcher.pid, proto::LogStream::Stdout)
        .await
        .unwrap();
    drop(sub_mount);
    assert_eq!(done.exit_status, Some(0), "{done:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.data),
        "0\n",
        "the host's later mount reached the jail"
    );
    let _ = stop.send(());
    drop(node);
}

/// A jailed proc's network namespace, once nothing of the proc is left,
/// is kept for its realm's next proc (`netns::give_back`): never for
/// another realm's, which gets one of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_namespace_is_kept_for_its_realms_next_proc_only() {
    let dir = TempDir::new("netns-kept");
    let Some((_node, addr, stop)) = start_jailed(&dir, 2).await else {
        return;
    };
    let mut c = connect(&addr).await;
    c.create_realm("other", proto::Scheduler::Fifo)
        .await
        .unwrap();
    let mut network = async |realm: &str| {
        let (done, out, err) =
            finished_output(&mut c, realm, sh("readlink /proc/self/ns/net")).await;
        assert_eq!(done.exit_status, Some(0), "{err}");
        out.trim().to_string()
    };
    let first = network("default").await;
    let other = network("other").await;
    let again = network("default").await;
    assert!(first.starts_with("net:["), "{first}");
    assert_ne!(
        other, first,
        "another realm's proc got this realm's network"
    );
    assert_eq!(
        again, first,
        "the realm's network was not kept for its next proc"
    );
    let node_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(node_ns.display().to_string(), first);
    let _ = stop.send(());
}

/// A spawn no live worker of the realm could ever hold is refused (it would
/// wait forever), and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_larger_than_every_worker_is_refused() {
    let dir = TempDir::new("too-big");
    let (_node, addr, stop) = start(&dir, 2).await;
    let mut c = connect(&addr).await;
    // The worker is registered before the node serves: a small proc runs.
    let s = c.spawn("default", native("true", &[])).await.unwrap();
    c.wait_exit("default", &s.pid).await.unwrap();
    for (cores, mem_mb) in [(3, 0), (1, 1 << 20)] {
        let d = proto::ProcDescriptor {
            pid: "huge".into(),
            cores: Some(cores),
            mem_mb: Some(mem_mb),
            ..native("true", &[])
        };
        let e = c.spawn("default", d).await.unwrap_err();
        assert_eq!(code(&e), tonic::Code::InvalidArgument, "{e}");
        assert!(e.to_string().contains("more than any live worker"), "{e}");
    }
    let e = c.proc_status("default", "huge").await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::NotFound);
    let _ = stop.send(());
}

/// A jailed proc is in its own cgroup of the unified tree (hybrid or v2
/// hosts) from its first instruction, and in a network of its own: it
/// cannot reach a service on the host's loopback until its realm's
/// operator allows the realm the host's network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_procs_have_their_own_cgroup_and_network() {
    let dir = TempDir::new("cgroup-net");
    // Three cores: the three procs below run at once (a core each).
    let (node, addr, stop) = start(&dir, 3).await;
    if !node.confine.jailed() {
        eprintln!("skipped: no jail here ({:?})", node.confine.describe());
        let _ = stop.send(());
        return;
    }
    let mut c = connect(&addr).await;
    if tabos_node::cgroup::Hierarchies::detect().unified.is_some() {
        let (done, out, err) = finished_output(
            &mut c,
            "default",
            proto::ProcDescriptor {
                pid: "cg".into(),
                ..sh("grep '^0::' /proc/self/cgroup")
            },
        )
        .await;
        assert_eq!(done.exit_status, Some(0), "{err}");
        assert!(
            out.trim_end().ends_with("/default.cg") && out.contains("/tabos/test-node."),
            "its own unified cgroup: {out}"
        );
    } else {
        eprintln!("no unified cgroup tree here: membership not checked");
    }

    // A service on the host's loopback.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(b"host service\n").await;
        }
    });
    let probe = format!(
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '; echo; \
         if exec 3<>/dev/tcp/127.0.0.1/{port}; then head -1 <&3; else echo unreachable; fi"
    );
    let bash = |script: &str| native("/bin/bash", &["-c", script]);
    let (done, out, err) = finished_output(&mut c, "default", bash(&probe)).await;
    assert_eq!(done.exit_status, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0].trim(), "lo", "loopback only: {out}");
    assert_eq!(lines[1], "unreachable", "{out}");
    // Refused by its own loopback, which is up (a loopback down would be
    // "Network is unreachable").
    assert!(err.contains("Connection refused"), "{err}");
    // Each proc's network is its own: procs running at once never share
    // one, nor the node's. (Only at once: a namespace's inode number is
    // used again once it has gone.)
    let node_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    let mut pids = Vec::new();
    for _ in 0..3 {
        let d = bash("readlink /proc/self/ns/net; sleep 5");
        pids.push(c.spawn("default", d).await.unwrap().pid);
    }
    // At once: each started while the others run (a realm's network is
    // kept for its next proc once one has ended: netns::give_back).
    for pid in &pids {
        c.wait_start("default", pid).await.unwrap();
    }
    for pid in &pids {
        let s = c.proc_status("default", pid).await.unwrap();
        assert_eq!(s.state().name(), "running", "{s:?}");
    }
    let mut seen = vec![node_ns.display().to_string()];
    for pid in &pids {
        let done = c.wait_exit("default", pid).await.unwrap();
        let out = c
            .logs("default", pid, proto::LogStream::Stdout)
            .await
            .unwrap();
        let ns = String::from_utf8_lossy(&out.data).trim().to_string();
        assert_eq!(done.exit_status, Some(0), "{done:?}");
        assert!(
            ns.starts_with("net:[") && !seen.contains(&ns),
            "{ns} among {seen:?}"
        );
        seen.push(ns);
    }

    // The operator allows the host's network: a new proc reaches the host.
    let info = c
        .set_realm(proto::SetRealmRequest {
            realm: "default".into(),
            host_network: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(info.host_network);
    let (done, out, err) = finished_output(&mut c, "default", bash(&probe)).await;
    assert_eq!(done.exit_status, Some(0), "{err}");
    assert_eq!(out.lines().nth(1), Some("host service"), "{out}");
    assert!(
        out.lines().next().unwrap().split_whitespace().count() > 1,
        "{out}"
    );
    // A member cannot allow it.
    let member = c
        .create_token(proto::CreateTokenRequest {
            realm: "default".into(),
            role: proto::Role::Admin.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut m = Client::connect(&addr.addr, &member.token).await.unwrap();
    let e = m
        .set_realm(proto::SetRealmRequest {
            realm: "default".into(),
            host_network: Some(false),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&e), tonic::Code::PermissionDenied, "{e}");
    let _ = stop.send(());
}

/// LC reservations are the node's, across realms (issue 35, item 3): on a
/// one-core node an LC proc of one core in each of two realms — each
/// realm's worker offering the node's one core — run one after the other,
/// never at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lc_cores_are_reserved_on_the_node_across_realms() {
    let dir = TempDir::new("lc-node");
    let (_node, addr, stop) = start(&dir, 1).await;
    let mut c = connect(&addr).await;
    c.create_realm("other", proto::Scheduler::Fifo)
        .await
        .unwrap();
    // The node serves the new realm once it hears of it.
    let one = proto::ProcDescriptor {
        pid: "x".into(),
        ..native("true", &[])
    };
    let s = c.spawn("other", one).await.unwrap();
    c.wait_exit("other", &s.pid).await.unwrap();
    for realm in ["default", "other"] {
        let d = proto::ProcDescriptor {
            pid: "lc".into(),
            class: proto::ProcClass::Lc.into(),
            cores: Some(1),
            ..sh("sleep 0.5")
        };
        let placed = c.spawn(realm, d).await.unwrap();
        assert!(
            !placed.worker.is_empty(),
            "placed at once in {realm}: {placed:?}"
        );
    }
    let mut spans = Vec::new();
    for realm in ["default", "other"] {
        let done = c.wait_exit(realm, "lc").await.unwrap();
        assert_eq!(done.exit_status, Some(0), "{done:?}");
        spans.push((done.start_us.unwrap(), done.exit_us.unwrap()));
    }
    let ((s1, e1), (s2, e2)) = (spans[0], spans[1]);
    assert!(
        s2 >= e1 || s1 >= e2,
        "the node's one core held by two LC procs at once: {spans:?}"
    );
    let _ = stop.send(());
}

/// A node's stop ends the waits in flight: a wait for a running proc's
/// exit is told UNAVAILABLE (the node is stopping) and a receive on an
/// empty mailbox comes back empty. Before, neither ended until the node's
/// drain gave up on them (then the wait answered with the proc's end,
/// recorded after the drain, and the receive lost its connection): a
/// `tabos wait` held every stop of its node for ten seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_ends_the_waits_in_flight() {
    let dir = TempDir::new("stop-waits");
    let (node, addr, stop) = start(&dir, 2).await;
    let mut c = connect(&addr).await;
    let pid = c
        .spawn("default", native("/bin/sleep", &["600"]))
        .await
        .unwrap()
        .pid;
    c.wait_start("default", &pid).await.unwrap();
    c.create_mailbox("default", "idle", 0, None).await.unwrap();
    let (mut w, mut r) = (c.clone(), c.clone());
    let channel = tabos_kernel::procs::proc_channel("default", &pid);
    let before = node.store.feed_subscribers(&channel);
    let wait = tokio::spawn(async move { w.wait_exit("default", &pid).await });
    // Ten minutes, far past the drain: only the stop can end it soon.
    let recv = tokio::spawn(async move { r.recv("default", "idle", 1, 600_000).await });
    // Both calls are in and waiting before the node is stopped.
    let idle = tabos_kernel::ipc::Address::parse("idle").unwrap();
    for _ in 0..100_000 {
        if node.store.feed_subscribers(&channel) > before
            && tabos_kernel::ipc::local_waiters(&node.store, "default", &idle) == 1
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_micros(100)).await;
    }
    assert!(
        node.store.feed_subscribers(&channel) > before,
        "the wait never waited"
    );
    assert_eq!(
        tabos_kernel::ipc::local_waiters(&node.store, "default", &idle),
        1,
        "the receive never waited"
    );
    let _ = stop.send(());
    let e = wait.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Some(tonic::Code::Unavailable), "{e}");
    assert!(e.to_string().contains("stopping"), "{e}");
    assert_eq!(recv.await.unwrap().unwrap(), Vec::new());
}
