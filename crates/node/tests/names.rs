//! The namespace over gRPC, its client libraries (sessions, elections,
//! semaphores, groups), fences on other services, and the split-brain test:
//! two contender processes, the leader paused and then killed.

use crate::common;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::time::Duration;

use common::{code, start};
use tabos_client::names::{CreateOptions, Election, Group, Semaphore, Session, WatchMode};
use tabos_client::{proto, Client};
use tabos_store::testing::TempDir;
use tonic::Code;

const REALM: &str = "default";

fn file(data: &[u8]) -> (proto::NameKind, Vec<u8>) {
    (proto::NameKind::File, data.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_over_grpc_with_clear_refusals() {
    let dir = TempDir::new("names-grpc");
    let n = start(&dir, "names-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();

    c.name_mkdir_all(REALM, "/svc/a").await.unwrap();
    let (kind, data) = file(b"hello");
    assert_eq!(
        c.name_create(REALM, "/svc/a/f", kind, data, CreateOptions::default())
            .await
            .unwrap(),
        1
    );
    let again = c
        .name_create(
            REALM,
            "/svc/a/f",
            proto::NameKind::File,
            vec![],
            CreateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&again), Code::AlreadyExists);
    assert_eq!(
        c.name_set(REALM, "/svc/a/f", b"v2".to_vec(), Some(1), None)
            .await
            .unwrap(),
        2
    );
    // A conditional set at a stale version is refused and changes nothing.
    let stale = c
        .name_set(REALM, "/svc/a/f", b"v3".to_vec(), Some(1), None)
        .await
        .unwrap_err();
    assert_eq!(code(&stale), Code::FailedPrecondition);
    let e = c.name_get(REALM, "/svc/a/f").await.unwrap();
    assert_eq!((e.data.as_slice(), e.version), (&b"v2"[..], 2));
    // Only-if-absent.
    let absent = c
        .name_set(REALM, "/svc/a/f", b"x".to_vec(), Some(0), None)
        .await
        .unwrap_err();
    assert_eq!(code(&absent), Code::FailedPrecondition);

    // Rename over an existing file; readdir sees the result.
    c.name_set(REALM, "/svc/a/g", b"old".to_vec(), None, None)
        .await
        .unwrap();
    c.name_rename(REALM, "/svc/a/f", "/svc/a/g", None)
        .await
        .unwrap();
    let d = c.name_readdir(REALM, "/svc/a").await.unwrap();
    let paths: Vec<_> = d.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["/svc/a/g"]);
    assert_eq!(d.entries[0].data, b"v2");

    // A non-empty directory is not removed.
    let busy = c
        .name_remove(REALM, "/svc/a", None, None)
        .await
        .unwrap_err();
    assert_eq!(code(&busy), Code::FailedPrecondition);

    // A mount point: the error says where to go, also as metadata.
    c.name_create(
        REALM,
        "/svc/db",
        proto::NameKind::Symlink,
        b"10.0.0.7:7070".to_vec(),
        CreateOptions::default(),
    )
    .await
    .unwrap();
    let mounted = c.name_get(REALM, "/svc/db/tables/t1").await.unwrap_err();
    assert_eq!(code(&mounted), Code::FailedPrecondition);
    let m = mounted.mount().expect("a mount in the error");
    assert_eq!(
        (m.path.as_str(), m.target.as_str(), m.rest.as_str()),
        ("/svc/db", "10.0.0.7:7070", "/tables/t1")
    );
    // (Not followed: that endpoint is no node of this cluster, and the
    // client sends its credential to none but those.)

    // The client follows the symlinks it may (issue 43, item 3): a path
    // target on this node, an endpoint that is a node of the cluster (with
    // a connection of its own, the same credential), at most HOPS_MAX.
    let link = |target: &str| {
        (
            proto::NameKind::Symlink,
            target.as_bytes().to_vec(),
            CreateOptions::default(),
        )
    };
    c.name_mkdir_all(REALM, "/svc/t").await.unwrap();
    let (kind, data) = file(b"linked");
    c.name_create(REALM, "/svc/t/f", kind, data, CreateOptions::default())
        .await
        .unwrap();
    let (k, d, o) = link("/svc/t");
    c.name_create(REALM, "/svc/alias", k, d, o).await.unwrap();
    let (k, d, o) = link(&format!("http://{}", n.addr));
    c.name_create(REALM, "/svc/node", k, d, o).await.unwrap();
    let got = c.name_get(REALM, "/svc/alias/f").await.unwrap();
    assert_eq!(
        (got.path.as_str(), got.data.as_slice()),
        ("/svc/t/f", &b"linked"[..])
    );
    let got = c.name_get(REALM, "/svc/node/svc/alias/f").await.unwrap();
    assert_eq!(got.path, "/svc/t/f", "through the endpoint, then the path");
    c.name_set(REALM, "/svc/alias/g", b"via".to_vec(), None, None)
        .await
        .unwrap();
    let listed = c.name_readdir(REALM, "/svc/node/svc/t").await.unwrap();
    assert!(
        listed.entries.iter().any(|e| e.path == "/svc/t/g"),
        "{listed:?}"
    );
    c.name_remove(REALM, "/svc/alias/g", None, None)
        .await
        .unwrap();
    assert_eq!(
        code(&c.name_get(REALM, "/svc/t/g").await.unwrap_err()),
        Code::NotFound
    );
    // A fenced call does not leave this namespace: its fence is of here.
    let fence = proto::Fence {
        dir: "/svc".into(),
        epoch: 0,
    };
    let fenced = c
        .name_set(REALM, "/svc/node/x", b"x".to_vec(), None, Some(fence))
        .await
        .unwrap_err();
    assert!(fenced.mount().is_some(), "{fenced}");
    // A loop ends after HOPS_MAX symlinks.
    let (k, d, o) = link("/svc/loop/b");
    c.name_mkdir_all(REALM, "/svc/loop").await.unwrap();
    c.name_create(REALM, "/svc/loop/a", k, d, o).await.unwrap();
    let (k, d, o) = link("/svc/loop/a");
    c.name_create(REALM, "/svc/loop/b", k, d, o).await.unwrap();
    let looped = c.name_get(REALM, "/svc/loop/a/x").await.unwrap_err();
    assert!(
        matches!(looped, tabos_client::Error::Hops { hops, .. } if hops == tabos_client::names::HOPS_MAX),
        "{looped}"
    );

    // Paths that escape or are malformed are refused before any work.
    let long = format!("/{}", "x".repeat(300));
    for bad in [
        "",
        "relative",
        "/a/../b",
        "/a//b",
        "/a/",
        "/a\0b",
        long.as_str(),
    ] {
        let e = c
            .name_set(REALM, bad, b"x".to_vec(), None, None)
            .await
            .unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{bad:?}");
        let e = c.name_get(REALM, bad).await.unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{bad:?}");
    }
    // Another realm does not see this realm's names.
    let other = c.name_get("other", "/svc/a/g").await.unwrap_err();
    assert_eq!(code(&other), Code::NotFound);
    let e = c.name_get("bad realm!", "/svc").await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    // Nothing of the refused writes landed.
    let d = c.name_readdir(REALM, "/").await.unwrap();
    let top: Vec<_> = d.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(top, ["/svc"]);
    // The read-only view of the realm's procs.
    let procs = c.name_readdir(REALM, "/proc").await.unwrap();
    assert!(procs.entries.is_empty());
    let e = c
        .name_set(REALM, "/proc/x", b"x".to_vec(), None, None)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_refuse_stale_names_sends_and_spawns() {
    let dir = TempDir::new("names-fence");
    let n = start(&dir, "fence-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.name_mkdir_all(REALM, "/app/data").await.unwrap();
    c.create_mailbox(REALM, "jobs", 0, None).await.unwrap();
    let epoch1 = c.advance_epoch(REALM, "/app/epoch").await.unwrap();
    let epoch2 = c.advance_epoch(REALM, "/app/epoch").await.unwrap();
    assert_eq!((epoch1, epoch2), (1, 2));
    let old = proto::Fence {
        dir: "/app/data".into(),
        epoch: epoch1,
    };
    let new = proto::Fence {
        dir: "/app/data".into(),
        epoch: epoch2,
    };
    // Epoch 1 is fine until epoch 2 is seen.
    c.name_set(REALM, "/app/data/x", b"1".to_vec(), None, Some(old.clone()))
        .await
        .unwrap();
    c.fence(REALM, new.clone()).await.unwrap();
    let e = c
        .name_set(
            REALM,
            "/app/data/x",
            b"stale".to_vec(),
            None,
            Some(old.clone()),
        )
        .await
        .unwrap_err();
    assert!(e.is_stale_epoch(), "{e}");
    assert_eq!(c.name_get(REALM, "/app/data/x").await.unwrap().data, b"1");
    // A fence must cover the path it guards.
    let e = c
        .name_set(REALM, "/elsewhere", b"x".to_vec(), None, Some(new.clone()))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    // The same fence on ipc and procs.
    let msg = proto::Outgoing {
        to: "jobs".into(),
        payload: b"job".to_vec(),
        message_id: String::new(),
    };
    let e = c
        .send_fenced(REALM, "", vec![msg.clone()], Some(old.clone()))
        .await
        .unwrap_err();
    assert!(e.is_stale_epoch(), "{e}");
    assert_eq!(c.mailbox(REALM, "jobs").await.unwrap().queued, 0);
    c.send_fenced(REALM, "", vec![msg], Some(new.clone()))
        .await
        .unwrap();
    assert_eq!(c.mailbox(REALM, "jobs").await.unwrap().queued, 1);
    let proc = proto::ProcDescriptor {
        pid: "fenced-proc".into(),
        kind: proto::ProcKind::Native.into(),
        class: proto::ProcClass::Be.into(),
        program: "/bin/true".into(),
        ..Default::default()
    };
    let e = c.spawn_fenced(REALM, proc, Some(old)).await.unwrap_err();
    assert!(e.is_stale_epoch(), "{e}");
    let st = c.proc_status(REALM, "fenced-proc").await.unwrap_err();
    assert_eq!(code(&st), Code::NotFound);
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_sessions_take_their_ephemeral_entries_and_wake_watchers() {
    let dir = TempDir::new("names-session");
    let n = start(&dir, "session-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.name_mkdir_all(REALM, "/live").await.unwrap();
    // A session nobody renews (opened directly, not through Session).
    let s = c
        .open_session(REALM, "", "tester", Duration::from_millis(200))
        .await
        .unwrap()
        .session;
    let opts = CreateOptions {
        session: Some(s.clone()),
        ..CreateOptions::default()
    };
    c.name_create(
        REALM,
        "/live/me",
        proto::NameKind::File,
        b"here".to_vec(),
        opts.clone(),
    )
    .await
    .unwrap();
    c.name_create(
        REALM,
        "/live/me2",
        proto::NameKind::Symlink,
        b"addr".to_vec(),
        opts,
    )
    .await
    .unwrap();
    c.name_set(REALM, "/live/durable", b"stays".to_vec(), None, None)
        .await
        .unwrap();
    // Watchers of both kinds, started before the lapse.
    let mut gone = c
        .watch(REALM, "/live/me", WatchMode::Removed)
        .await
        .unwrap();
    let mut dir_watch = c.watch(REALM, "/live", WatchMode::Dir).await.unwrap();
    let first = dir_watch.message().await.unwrap().unwrap();
    assert_eq!(first.op(), proto::WatchOp::Watching);
    // The reaper ends the session; both entries go in one transaction.
    let ev = gone.message().await.unwrap().unwrap();
    assert_eq!(ev.op(), proto::WatchOp::Removed);
    let mut removed = Vec::new();
    while removed.len() < 2 {
        let ev = dir_watch.message().await.unwrap().unwrap();
        assert_eq!(ev.op(), proto::WatchOp::Remove);
        removed.push(ev.path);
    }
    removed.sort();
    assert_eq!(removed, ["/live/me", "/live/me2"]);
    let d = c.name_readdir(REALM, "/live").await.unwrap();
    assert_eq!(d.entries.len(), 1);
    assert_eq!(d.entries[0].path, "/live/durable");
    // A lapsed session can be neither renewed nor used.
    let e = c.renew_session(REALM, &s).await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    let opts = CreateOptions {
        session: Some(s.clone()),
        ..CreateOptions::default()
    };
    let e = c
        .name_create(REALM, "/live/late", proto::NameKind::File, vec![], opts)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition);

    // Closing a session removes its entries at once.
    let kept = Session::open(&c, REALM, "tester", Duration::from_secs(30))
        .await
        .unwrap();
    let g = Group::new(&c, REALM, "/groups/workers");
    g.join(&kept, "w1", b"10.0.0.1".to_vec()).await.unwrap();
    g.join(&kept, "w2", b"10.0.0.2".to_vec()).await.unwrap();
    let (members, _) = g.members().await.unwrap();
    assert_eq!(
        members,
        [
            ("w1".to_string(), b"10.0.0.1".to_vec()),
            ("w2".to_string(), b"10.0.0.2".to_vec())
        ]
    );
    let mut changes = g.watch().await.unwrap();
    assert_eq!(
        changes.message().await.unwrap().unwrap().op(),
        proto::WatchOp::Watching
    );
    g.leave("w1").await.unwrap();
    let ev = changes.message().await.unwrap().unwrap();
    assert_eq!(
        (ev.op(), ev.path.as_str()),
        (proto::WatchOp::Remove, "/groups/workers/w1")
    );
    assert_eq!(kept.close().await.unwrap(), 1);
    let ev = changes.message().await.unwrap().unwrap();
    assert_eq!(
        (ev.op(), ev.path.as_str()),
        (proto::WatchOp::Remove, "/groups/workers/w2")
    );
    assert!(g.members().await.unwrap().0.is_empty());
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_release_their_waiters() {
    let dir = TempDir::new("names-sem");
    let n = start(&dir, "sem-node").await;
    let c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.clone().name_mkdir_all(REALM, "/sem").await.unwrap();
    let started = Semaphore::new(&c, REALM, "/sem/started");
    started.init().await.unwrap();
    assert_eq!(
        code(&started.init().await.unwrap_err()),
        Code::AlreadyExists
    );
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let s = started.clone();
            tokio::spawn(async move { s.down().await })
        })
        .collect();
    // The waiters are parked on the feed; each is released exactly by `up`.
    let mut exists = c
        .clone()
        .watch(REALM, "/sem/started", WatchMode::Exists)
        .await
        .unwrap();
    assert_eq!(
        exists.message().await.unwrap().unwrap().op(),
        proto::WatchOp::Exists
    );
    started.up().await.unwrap();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    // Down on a semaphore that is already up returns at once.
    started.down().await.unwrap();
    n.shut_down().await;
}

/// Several writers in one directory; a watcher sees every change exactly
/// once, and each path's changes in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dir_watches_see_each_change_once_in_order_under_concurrent_writers() {
    const WRITERS: usize = 4;
    const FILES: usize = 5;
    const SETS: i64 = 4;
    let dir = TempDir::new("names-watch");
    let n = start(&dir, "watch-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    c.name_mkdir_all(REALM, "/w").await.unwrap();
    let mut watch = c.watch(REALM, "/w", WatchMode::Dir).await.unwrap();
    assert_eq!(
        watch.message().await.unwrap().unwrap().op(),
        proto::WatchOp::Watching
    );
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut c = c.clone();
            tokio::spawn(async move {
                for f in 0..FILES {
                    let path = format!("/w/{w}-{f}");
                    for _ in 0..SETS {
                        c.name_set(REALM, &path, b"x".to_vec(), None, None)
                            .await
                            .unwrap();
                    }
                    c.name_remove(REALM, &path, None, None).await.unwrap();
                }
            })
        })
        .collect();
    // create, SETS - 1 sets, remove: SETS + 1 changes per file.
    let expected = WRITERS * FILES * (SETS as usize + 1);
    let mut seen: BTreeMap<String, Vec<(proto::WatchOp, i64)>> = BTreeMap::new();
    for _ in 0..expected {
        let ev = watch.message().await.unwrap().unwrap();
        let op = ev.op();
        seen.entry(ev.path).or_default().push((op, ev.version));
    }
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(seen.len(), WRITERS * FILES);
    let mut want = vec![(proto::WatchOp::Create, 1)];
    want.extend((2..=SETS).map(|v| (proto::WatchOp::Set, v)));
    want.push((proto::WatchOp::Remove, SETS));
    for (path, events) in &seen {
        assert_eq!(events, &want, "{path}");
    }
    // Nothing more: one further change arrives next, not a duplicate.
    c.name_set(REALM, "/w/last", b"x".to_vec(), None, None)
        .await
        .unwrap();
    let ev = watch.message().await.unwrap().unwrap();
    assert_eq!(
        (ev.op(), ev.path.as_str()),
        (proto::WatchOp::Create, "/w/last")
    );
    n.shut_down().await;
}

/// A wasm proc uses the namespace through its host calls: it announces
/// itself, waits for a name a client creates, reads it and removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_procs_use_the_namespace() {
    let dir = TempDir::new("names-wasm");
    let n = start(&dir, "wasm-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let relay = dir.path().join("relay.wat");
    std::fs::write(
        &relay,
        tabos_sandbox::programs::name_relay("/relay").unwrap(),
    )
    .unwrap();
    let d = proto::ProcDescriptor {
        pid: "relay".into(),
        kind: proto::ProcKind::Wasm.into(),
        program: relay.to_str().unwrap().into(),
        ..Default::default()
    };
    c.spawn(REALM, d).await.unwrap();
    let ready = c.wait_exists(REALM, "/relay/ready").await.unwrap();
    assert_eq!(ready.data, b"ready");
    // The proc's view of the namespace is the client's: the proc sees this.
    c.name_set(REALM, "/relay/go", b"over to you".to_vec(), Some(0), None)
        .await
        .unwrap();
    let st = c.wait_exit(REALM, "relay").await.unwrap();
    assert_eq!(st.exit_status, Some(0), "{st:?}");
    let out = c
        .logs(REALM, "relay", proto::LogStream::Stdout)
        .await
        .unwrap();
    assert_eq!(out.data, b"over to you");
    let gone = c.name_get(REALM, "/relay/go").await.unwrap_err();
    assert_eq!(code(&gone), Code::NotFound);
    // The proc appears in the /proc view.
    let p = c.name_get(REALM, "/proc/relay").await.unwrap();
    assert!(String::from_utf8_lossy(&p.data).contains("exit_status 0"));
    n.shut_down().await;
}

// ---- split brain: contenders in their own processes ----

const ELECTION: &str = "/election";
const FENCED: &str = "/election/data";
/// A contender's session TTL; the leader renews every third of it.
const CONTENDER_TTL: Duration = Duration::from_millis(400);

/// The body of a contender process: campaigns, then writes
/// `/election/data/log` with its fence every few milliseconds, printing
/// `leader NAME EPOCH`, `wrote EPOCH VERSION` and, when fenced off,
/// `fenced EPOCH`. Runs only when the split-brain test starts this test
/// binary as a child with `TABOS_CONTENDER_ADDR` set.
#[test]
fn contender_process() {
    let (Ok(addr), Ok(me)) = (
        std::env::var("TABOS_CONTENDER_ADDR"),
        std::env::var("TABOS_CONTENDER_NAME"),
    ) else {
        return;
    };
    // libtest has printed "test contender_process ... " without a newline:
    // end that line, so each of ours starts one.
    println!();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let token = std::env::var("TABOS_CONTENDER_TOKEN").unwrap();
        let mut c = Client::connect(&addr, &token).await.unwrap();
        let session = Session::open(&c, REALM, &me, CONTENDER_TTL).await.unwrap();
        let election = Election::new(&c, REALM, ELECTION, FENCED);
        let lead = election.campaign(&session, &me).await.unwrap();
        println!("leader {me} {}", lead.epoch);
        loop {
            let wrote = c
                .name_set(
                    REALM,
                    &format!("{FENCED}/log"),
                    format!("{me} {}", lead.epoch).into_bytes(),
                    None,
                    Some(lead.fence.clone()),
                )
                .await;
            match wrote {
                Ok(v) => println!("wrote {} {v}", lead.epoch),
                Err(e) if e.is_stale_epoch() => {
                    println!("fenced {}", lead.epoch);
                    return;
                }
                Err(e) => panic!("{me}: write failed: {e}"),
            }
            // Pacing, so the log is not thousands of lines.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

/// A contender child process and the lines it prints.
struct Contender {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Contender {
    fn start(addr: &str, token: &str, name: &str) -> Contender {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                common::test_name(module_path!(), "contender_process").as_str(),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TABOS_CONTENDER_ADDR", addr)
            .env("TABOS_CONTENDER_TOKEN", token)
            .env("TABOS_CONTENDER_NAME", name)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Contender { child, lines }
    }

    /// The next line of ours starting with `prefix`, recording every
    /// `wrote` line on the way. The bound only keeps a broken run from
    /// hanging CI; nothing is asserted about how long anything takes.
    fn expect(&self, prefix: &str, log: &mut Vec<(i64, i64)>) -> String {
        loop {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("waiting for {prefix:?}: {e}"));
            eprintln!("contender: {l}");
            if let Some(w) = l.strip_prefix("wrote ") {
                let mut it = w.split(' ').map(|x| x.parse::<i64>().unwrap());
                log.push((it.next().unwrap(), it.next().unwrap()));
            }
            if l.starts_with(prefix) {
                return l;
            }
        }
    }

    /// Everything it printed until it exited.
    fn drain(&self, log: &mut Vec<(i64, i64)>) {
        for l in self.lines.iter() {
            if let Some(w) = l.strip_prefix("wrote ") {
                let mut it = w.split(' ').map(|x| x.parse::<i64>().unwrap());
                log.push((it.next().unwrap(), it.next().unwrap()));
            }
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "kill {sig}");
    }
}

#[test]
fn split_brain_a_paused_then_a_killed_leader_is_fenced_and_replaced() {
    let dir = TempDir::new("names-split");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = rt.block_on(start(&dir, "split-node"));
    let mut log: Vec<(i64, i64)> = Vec::new();

    let a = Contender::start(&n.addr, &n.token, "a");
    assert_eq!(a.expect("leader", &mut log), "leader a 1");
    a.expect("wrote", &mut log);
    let b = Contender::start(&n.addr, &n.token, "b");
    // Pause the leader: it stops renewing, its session lapses and b wins.
    a.signal(libc::SIGSTOP);
    assert_eq!(b.expect("leader", &mut log), "leader b 2");
    b.expect("wrote", &mut log);
    // The old leader wakes believing it leads: its next write is fenced off.
    a.signal(libc::SIGCONT);
    assert_eq!(a.expect("fenced", &mut log), "fenced 1");
    a.drain(&mut log);
    let mut a = a;
    assert!(a.child.wait().unwrap().success());

    // Kill the leader outright; a new contender is elected once its lease lapses.
    let c = Contender::start(&n.addr, &n.token, "c");
    b.signal(libc::SIGKILL);
    let mut b = b;
    b.child.wait().unwrap();
    b.drain(&mut log);
    assert_eq!(c.expect("leader", &mut log), "leader c 3");
    c.expect("wrote", &mut log);
    c.signal(libc::SIGKILL);
    let mut c = c;
    c.child.wait().unwrap();
    c.drain(&mut log);

    // Never two leaders: in commit (version) order, epochs never go back —
    // no write of an older leader landed after a newer leader's.
    log.sort_by_key(|&(_, version)| version);
    assert!(
        log.windows(2).all(|w| w[0].0 <= w[1].0),
        "writes out of epoch order: {log:?}"
    );
    let epochs: std::collections::BTreeSet<i64> = log.iter().map(|&(e, _)| e).collect();
    assert_eq!(epochs.into_iter().collect::<Vec<_>>(), [1, 2, 3]);
    // The log file's last write is the last leader's (perhaps one it had
    // committed but not yet printed when it was killed).
    let last = rt.block_on(async {
        let mut cl = Client::connect(&n.addr, &n.token).await.unwrap();
        cl.name_get(REALM, "/election/data/log").await.unwrap()
    });
    assert_eq!(last.data, b"c 3");
    assert!(last.version >= log.last().unwrap().1);
    rt.block_on(n.shut_down());
}
