//! The cluster's nodes (issue 19, item 1): a serving node registers with
//! its address, cores and labels, renews its lease with its measured load,
//! and records a clean stop; listing is scoped to the caller's realm;
//! removing is the operator's, and only of a node that is not up.

use crate::common;

use common::code;
use tabos_store::testing::TempDir;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_register_list_leave_and_are_removed() {
    let dir = TempDir::new("nodes");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    let nodes = op.list_nodes().await.unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let me = &nodes[0];
    assert_eq!((me.node_id.as_str(), me.state().name()), ("n1", "up"));
    assert_eq!(me.address, n.addr, "registered with its API's address");
    assert_eq!((me.cores, me.left_us), (4, 0));
    assert!(me.heartbeat_age_ms < 60_000);
    assert!(
        me.realms
            .iter()
            .any(|r| r.realm == "default" && r.cores == 4),
        "{:?}",
        me.realms
    );

    // A realm's member sees the node, and no realm but its own on it.
    let created = op
        .create_realm("acme", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap();
    let mut acme = n.client_with(&created.admin_token).await;
    let seen = acme.list_nodes().await.unwrap();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].realms.iter().all(|r| r.realm == "acme"),
        "{:?}",
        seen[0].realms
    );

    // Removing: the operator's, of a node that is not up; nothing changes
    // otherwise.
    let e = acme.remove_node("n1").await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    let e = op.remove_node("n1").await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    let e = op.remove_node("nope").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let e = op.remove_node("../bad id").await.unwrap_err();
    assert!(
        matches!(code(&e), Code::NotFound | Code::InvalidArgument),
        "{e}"
    );
    assert_eq!(op.list_nodes().await.unwrap()[0].state().name(), "up");
    drop((op, acme));

    // A clean stop is recorded as such, not as a loss.
    n.shut_down().await;
    let n = common::start(&dir, "n2").await;
    let mut op = n.client().await;
    let nodes = op.list_nodes().await.unwrap();
    let states: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n.state().name()))
        .collect();
    assert_eq!(states, [("n1", "left"), ("n2", "up")]);
    assert!(nodes[0].left_us >= nodes[0].started_us && nodes[0].left_us > 0);
    op.remove_node("n1").await.unwrap();
    let ids: Vec<String> = op
        .list_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert_eq!(ids, ["n2"]);
    drop(op);
    n.shut_down().await;
}

/// Processes on this machine whose command line contains `marker`.
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(marker))
        .count()
}

/// A node the cluster declared lost while it was silent, its procs given
/// back, learns it at its next heartbeat: it kills the copies it still
/// runs (the procs were failed or placed again), their ends change nothing
/// recorded, its worker registers again and takes new work, and the node's
/// row says what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_declared_lost_stops_its_copies_and_rejoins() {
    let dir = TempDir::new("nodes-lapsed");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    // A marker no other process on the machine has.
    let marker = format!("613.{}", std::process::id());
    let proc = tabos_client::proto::ProcDescriptor {
        pid: "copy".into(),
        program: "sleep".into(),
        args: vec![marker.clone()],
        ..Default::default()
    };
    op.spawn("", proc).await.unwrap();
    op.wait_start("", "copy").await.unwrap();
    assert_eq!(processes_with(&marker), 1);

    // As the cluster's leader would, an hour on: its workers down and its
    // procs given back, realm by realm, then its row marked lost and given
    // back (in that order, so that the node's next heartbeat finds both).
    let store = n.node.store.clone();
    let far = tabos_store::now_us() + 3_600_000_000;
    let down = tabos_kernel::procs::node_lost(&store, "n1").await.unwrap();
    assert_eq!(down[0].1.workers.len(), 1, "{down:?}");
    let given = tabos_kernel::procs::give_back_node(&store, "n1", "node n1 lost (silent)")
        .await
        .unwrap();
    assert_eq!(given[0].1.failed, ["copy"]);
    let (lost, due) = store
        .run(tabos_kernel::nodes::CLUSTER_PARTITION, move |tx| {
            Ok::<_, tabos_kernel::Error>((
                tabos_kernel::nodes::declare_lost_tx(tx, far, 1)?,
                tabos_kernel::nodes::due_give_back_tx(tx, far, 1)?,
            ))
        })
        .await
        .unwrap();
    assert_eq!(
        (lost, due),
        (vec!["n1".to_string()], vec!["n1".to_string()])
    );

    // Its next heartbeat (one a second) finds it out: the copy goes.
    for _ in 0..200 {
        if processes_with(&marker) == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(processes_with(&marker), 0, "the copy was killed");
    let status = op.proc_status("", "copy").await.unwrap();
    assert_eq!(
        status.state().name(),
        "failed",
        "its end changed nothing recorded"
    );
    assert!(status.error.contains("lost"), "{}", status.error);

    // The worker is back and takes new work.
    let next = tabos_client::proto::ProcDescriptor {
        pid: "after".into(),
        program: "true".into(),
        ..Default::default()
    };
    op.spawn("", next).await.unwrap();
    let done = op.wait_exit("", "after").await.unwrap();
    assert_eq!((done.state().name(), done.exit_status), ("exited", Some(0)));
    let me = op.list_nodes().await.unwrap().remove(0);
    assert_eq!(me.state().name(), "up");
    assert!(
        me.note.contains("its procs had been given back"),
        "{}",
        me.note
    );
    drop(op);
    n.shut_down().await;
}

/// A node the cluster declared lost that comes back before its procs were
/// given back keeps them: its worker is up again, its proc runs on and
/// ends as recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_before_its_grace_keeps_its_procs() {
    let dir = TempDir::new("nodes-kept");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    let proc = tabos_client::proto::ProcDescriptor {
        pid: "kept".into(),
        program: "sh".into(),
        args: vec!["-c".into(), "sleep 3; echo done".into()],
        ..Default::default()
    };
    op.spawn("", proc).await.unwrap();
    op.wait_start("", "kept").await.unwrap();
    let store = n.node.store.clone();
    let far = tabos_store::now_us() + 3_600_000_000;
    tabos_kernel::procs::node_lost(&store, "n1").await.unwrap();
    let lost = store
        .run(tabos_kernel::nodes::CLUSTER_PARTITION, move |tx| {
            tabos_kernel::nodes::declare_lost_tx(tx, far, 1)
        })
        .await
        .unwrap();
    assert_eq!(lost, ["n1"]);
    let done = op.wait_exit("", "kept").await.unwrap();
    assert_eq!(
        (done.state().name(), done.exit_status),
        ("exited", Some(0)),
        "kept and ended as it did: {done:?}"
    );
    let me = op.list_nodes().await.unwrap().remove(0);
    assert!(me.note.contains("it kept them"), "{}", me.note);
    assert_eq!(me.realms[0].realm, "default", "its worker is up: {me:?}");
    drop(op);
    n.shut_down().await;
}

/// A node that stops cleanly stops its procs and gives them back at once:
/// a restartable one is queued again, the other fails saying the node
/// stopped — not a lease later, and not as a loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_gives_procs_back() {
    let dir = TempDir::new("nodes-stop");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    let marker = format!("614.{}", std::process::id());
    for (pid, restartable) in [("plain", false), ("again", true)] {
        let d = tabos_client::proto::ProcDescriptor {
            pid: pid.into(),
            program: "sleep".into(),
            args: vec![marker.clone()],
            restartable,
            ..Default::default()
        };
        op.spawn("", d).await.unwrap();
        op.wait_start("", pid).await.unwrap();
    }
    assert_eq!(processes_with(&marker), 2);
    drop(op);
    n.shut_down().await;
    assert_eq!(processes_with(&marker), 0, "stopped with the node");

    let store =
        tabos_kernel::open(&tabos_store::Config::sqlite(dir.path().join("db")).with_partitions(2))
            .unwrap();
    let pid = |p: &str| tabos_kernel::ids::Pid::new(p).unwrap();
    let plain = tabos_kernel::procs::get(&store, "default", &pid("plain")).unwrap();
    assert_eq!(plain.state.as_str(), "failed");
    assert!(plain.error.unwrap_or_default().contains("node n1 stopped"));
    let again = tabos_kernel::procs::get(&store, "default", &pid("again")).unwrap();
    assert_eq!((again.state.as_str(), again.worker), ("spawned", None));
    let nodes = tabos_kernel::nodes::list(&store, None).unwrap();
    assert_eq!(nodes[0].state, tabos_kernel::nodes::NodeState::Left);
}

/// A drained node finishes what it runs and takes nothing new, across a
/// restart, until it is put back in service; draining is the operator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_takes_nothing_new_until_undone() {
    let dir = TempDir::new("nodes-drain");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    let proc = |pid: &str, program: &str| tabos_client::proto::ProcDescriptor {
        pid: pid.into(),
        program: program.into(),
        args: if program == "sleep" {
            vec!["600".into()]
        } else {
            vec![]
        },
        ..Default::default()
    };
    op.spawn("", proc("long", "sleep")).await.unwrap();
    op.wait_start("", "long").await.unwrap();

    let created = op
        .create_realm("acme", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap();
    let mut acme = n.client_with(&created.admin_token).await;
    let e = acme.drain_node("n1", true).await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    let e = op.drain_node("nope", true).await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    assert_eq!(op.list_nodes().await.unwrap()[0].state().name(), "up");

    let done = op.drain_node("n1", true).await.unwrap();
    assert!(done.changed);
    let listed = op.list_nodes().await.unwrap();
    assert_eq!(listed[0].state().name(), "draining");
    assert!(listed[0].draining_us > 0);
    let default = listed[0]
        .realms
        .iter()
        .find(|r| r.realm == "default")
        .unwrap();
    assert_eq!(default.procs, 1, "long still runs");
    op.spawn("", proc("next", "true")).await.unwrap();
    let next = op.proc_status("", "next").await.unwrap();
    assert_eq!((next.state().name(), next.worker.as_str()), ("spawned", ""));
    assert_eq!(
        op.proc_status("", "long").await.unwrap().state().name(),
        "running"
    );
    drop((op, acme));

    // Restarted, it is still drained: next waits.
    n.shut_down().await;
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    assert_eq!(op.list_nodes().await.unwrap()[0].state().name(), "draining");
    let next = op.proc_status("", "next").await.unwrap();
    assert_eq!((next.state().name(), next.worker.as_str()), ("spawned", ""));

    // Back in service, the waiting proc runs.
    assert!(op.drain_node("n1", false).await.unwrap().changed);
    assert!(!op.drain_node("n1", false).await.unwrap().changed);
    let done = op.wait_exit("", "next").await.unwrap();
    assert_eq!((done.state().name(), done.exit_status), ("exited", Some(0)));
    assert_eq!(op.list_nodes().await.unwrap()[0].state().name(), "up");
    drop(op);
    n.shut_down().await;
}

/// Two nodes on one PostgreSQL database, each with its own block store: a
/// large file written through one lives in its segments, and is read,
/// overwritten in place and grown through the other — each request
/// forwarded to the holder with the caller's own credential; a file removed
/// through the other has its segments given back by the holder. Once the
/// holder stops, UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_in_another_nodes_block_store_are_forwarded() {
    // Creating the database blocks: off the async threads.
    let url = tokio::task::spawn_blocking(tabos_store::testing::pg_database)
        .await
        .unwrap();
    let Some(url) = url else { return };
    let config = tabos_store::Config::postgres(url).with_partitions(2);
    let (d1, d2) = (TempDir::new("fwd-1"), TempDir::new("fwd-2"));
    let opts = tabos_node::ServeOptions::default;
    let n1 = common::start_on(&d1, "n1", &config, opts()).await;
    let n2 = common::start_on(&d2, "n2", &config, opts()).await;
    let (mut c1, mut c2) = (n1.client().await, n2.client().await);
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    c1.fs_write("", "", "/big", 0, big.clone(), true)
        .await
        .unwrap();
    let mut listed = Vec::new();
    c2.fs_read_all("", "", "/big", &mut listed).await.unwrap();
    assert!(listed == big, "read through n2");
    // In place, through n2: written in n1's segments.
    c2.fs_write("", "", "/big", 1 << 20, b"hello".to_vec(), false)
        .await
        .unwrap();
    c2.fs_truncate("", "", "/big", 5 << 20).await.unwrap();
    let mut want = big.clone();
    want[1 << 20..(1 << 20) + 5].copy_from_slice(b"hello");
    want.resize(5 << 20, 0);
    let mut got = Vec::new();
    c1.fs_read_all("", "", "/big", &mut got).await.unwrap();
    assert!(got == want, "n1 sees n2's changes");
    // Forwarding acts as the caller: another user reads (mode 0644) but
    // may not write.
    let bob = c1
        .create_token(tabos_client::proto::CreateTokenRequest {
            realm: "default".into(),
            user: "bob".into(),
            role: tabos_client::proto::Role::Member.into(),
            ttl_ms: 0,
            note: "test".into(),
            scope: String::new(),
        })
        .await
        .unwrap();
    // n2 learns of the credential from the change feed.
    for _ in 0..400 {
        if n2.node.auth.check(&bob.token).is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let mut r2 = n2.client_with(&bob.token).await;
    assert_eq!(r2.fs_read("", "", "/big", 0, 5).await.unwrap(), &big[..5]);
    let e = r2
        .fs_write("", "", "/big", 0, b"x".to_vec(), false)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    // Removed through n2, its segments are given back by n1 (told by the
    // change feed), not left queued.
    c2.fs_write("", "", "/gone", 0, big.clone(), true)
        .await
        .unwrap();
    c2.fs_unlink("", "", "/gone").await.unwrap();
    let queued = || {
        n1.node
            .store
            .query("SELECT count(*) FROM fs_reclaim", &[])
            .unwrap()
            .rows[0]
            .get::<i64>(0)
            .unwrap()
    };
    let mut left = queued();
    for _ in 0..200 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        left = queued();
    }
    assert_eq!(left, 0, "n1 gave back the segments n2's unlink let go of");
    drop((c1, r2));
    n1.shut_down().await;
    let e = c2.fs_read("", "", "/big", 0, 5).await.unwrap_err();
    assert_eq!(code(&e), Code::Unavailable, "{e}");
    assert!(e.to_string().contains("node n1, which is left"), "{e}");
    drop(c2);
    n2.shut_down().await;
}

/// A proc's output is in the cluster: followed from another node while it
/// runs, and read there — whole, by its last lines, since a time, with
/// when each piece was read — after the proc's node is gone (its local
/// directory removed too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procs_logs_outlive_its_node() {
    use tabos_client::proto::LogStream;
    use tabos_client::LogsWant;
    let url = tokio::task::spawn_blocking(tabos_store::testing::pg_database)
        .await
        .unwrap();
    let Some(url) = url else { return };
    let config = tabos_store::Config::postgres(url).with_partitions(2);
    let (d1, d2) = (TempDir::new("logs-1"), TempDir::new("logs-2"));
    let opts = tabos_node::ServeOptions::default;
    let n1 = common::start_on(&d1, "n1", &config, opts()).await;
    let n2 = common::start_on(&d2, "n2", &config, opts()).await;
    let (mut c1, mut c2) = (n1.client().await, n2.client().await);
    // n2 takes nothing: the proc runs on n1 (once n2 has joined).
    let joined = std::time::Instant::now();
    while let Err(e) = c1.drain_node("n2", true).await {
        assert!(joined.elapsed() < std::time::Duration::from_secs(10), "{e}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let d = tabos_client::proto::ProcDescriptor {
        pid: "talker".into(),
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "echo one; echo two; sleep 1; echo three; echo oops >&2; exec sleep 600".into(),
        ],
        ..Default::default()
    };
    let placed = c1.spawn("", d).await.unwrap();
    assert!(placed.worker.contains("n1"), "{}", placed.worker);
    // Followed through n2 while it runs on n1.
    let mut follow = c2
        .follow_logs("", "talker", LogStream::Stdout)
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut marks = Vec::new();
    while !seen.ends_with(b"three\n") {
        let m = follow
            .message()
            .await
            .unwrap()
            .expect("the proc still runs");
        marks.extend(m.marks.iter().map(|k| k.time_us));
        seen.extend_from_slice(&m.data);
    }
    assert_eq!(seen, b"one\ntwo\nthree\n");
    assert!(
        marks.len() >= 2 && marks.windows(2).all(|w| w[0] <= w[1]),
        "{marks:?}"
    );
    let before_three = marks[marks.len() - 1] - 1;
    // n1 goes, and with it everything it kept locally; the follower hears
    // the end.
    drop(c1);
    n1.shut_down().await;
    std::fs::remove_dir_all(d1.path()).unwrap();
    assert!(
        follow.message().await.unwrap().is_none(),
        "the follow ends with the proc"
    );
    let status = c2.proc_status("", "talker").await.unwrap();
    assert_eq!(status.state().name(), "failed");
    let all = c2.logs("", "talker", LogStream::Stdout).await.unwrap();
    assert_eq!(all.data, b"one\ntwo\nthree\n");
    assert!(!all.truncated);
    let err = c2.logs("", "talker", LogStream::Stderr).await.unwrap();
    assert_eq!(err.data, b"oops\n");
    let tail = c2
        .logs_with(
            "",
            "talker",
            LogStream::Stdout,
            LogsWant {
                tail_lines: 1,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (tail.data.as_slice(), tail.truncated),
        (&b"three\n"[..], true)
    );
    assert_eq!(tail.marks.len(), 1);
    let since = c2
        .logs_with(
            "",
            "talker",
            LogStream::Stdout,
            LogsWant {
                since_us: before_three + 1,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(since.data, b"three\n");
    // Another realm's credential does not read it.
    let other = c2
        .create_realm("elsewhere", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap();
    let mut theirs = n2.client_with(&other.admin_token).await;
    let e = theirs
        .logs("default", "talker", LogStream::Stdout)
        .await
        .unwrap_err();
    assert_ne!(common::code(&e), tonic::Code::Ok);
    let e = theirs
        .logs("", "talker", LogStream::Stdout)
        .await
        .unwrap_err();
    assert_eq!(common::code(&e), tonic::Code::NotFound, "{e}");
    n2.shut_down().await;
}
