//! MapReduce as procs on a real node (in-process, embedded SQLite, native
//! procs running the `tabos-mr-task` binary): results equal the direct
//! computation, and the job finishes correctly when a mapper, a reducer
//! or the leading coordinator is killed with SIGKILL, and when a reducer
//! finds an intermediate file damaged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tabos_client::names::CreateOptions;
use tabos_client::{Client, Value};
use tabos_mr::direct;
use tabos_mr::driver::{Job, Order, Submit};
use tabos_mr::job::Kind;
use tabos_mr::spec::{Pause, Task, TaskState, FS_USER};
use tabos_node::{Node, NodeSettings};
use tabos_store::testing::TempDir;
use tabos_store::Config;

const REALM: &str = "default";

struct Running(tabos_node::Embedded);

/// A node with 2 cores whose BE procs fill up to 4 (reducers beside mappers).
async fn start(dir: &TempDir) -> Running {
    let settings = NodeSettings {
        node_id: "n1".into(),
        logs: dir.path().join("logs"),
        cores: 2,
        be_util_pct: 400,
        blocks: Some(tabos_node::BlockStoreSettings::new(
            dir.path().join("blocks.dev"),
            256 << 20,
        )),
        // The tests' programs and modules: in temporary directories and
        // the build's target directory (an operator's --program-dir).
        program_dirs: vec![
            std::env::temp_dir(),
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(".."),
        ],
        ..NodeSettings::defaults()
    };
    let node = Node::open_with(&Config::sqlite(dir.path().join("db")), settings).unwrap();
    let running = tabos_node::Embedded::start(node).await.unwrap();
    // Mappers see the inputs (read-only, in their jails): the realm's
    // operator allows them.
    running
        .client()
        .await
        .unwrap()
        .set_realm(tabos_client::proto::SetRealmRequest {
            realm: REALM.into(),
            host_paths: vec![dir.path().join("in").display().to_string()],
            ..Default::default()
        })
        .await
        .unwrap();
    Running(running)
}

impl Running {
    async fn shut_down(self) {
        self.0.stop().await.unwrap();
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Inputs with the awkward cases: an empty file, a line over the piece
/// size with a word longer than the word limit, bytes that are not UTF-8,
/// many small files (packed into tasks) and a file cut into several splits.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let root = dir.join("in");
    std::fs::create_dir_all(root.join("small")).unwrap();
    std::fs::write(root.join("empty.txt"), b"").unwrap();
    let mut huge = b"start ".to_vec();
    huge.extend(std::iter::repeat_n(
        b'x',
        tabos_mr::job::WORD_BYTES_MAX + 10,
    ));
    huge.extend_from_slice(b" needle end\nnext line\n");
    std::fs::write(root.join("huge.txt"), &huge).unwrap();
    std::fs::write(
        root.join("latin1.txt"),
        b"caf\xe9 na\xefve \xff\xfe needle\ncaf\xe9\n",
    )
    .unwrap();
    let words = [
        "alpha", "beta", "gamma", "delta", "needle", "epsilon", "zeta",
    ];
    for i in 0..40 {
        let mut text = String::new();
        for j in 0..(50 + i * 7) {
            text.push_str(words[(i * 3 + j) % words.len()]);
            text.push(if j % 9 == 8 { '\n' } else { ' ' });
        }
        std::fs::write(root.join("small").join(format!("f{i:02}.txt")), text).unwrap();
    }
    let mut big = String::new();
    for j in 0..30_000 {
        big.push_str(words[j % words.len()]);
        big.push_str(if j % 11 == 10 { "\n" } else { "\t" });
    }
    std::fs::write(root.join("big.txt"), big).unwrap();
    vec![root]
}

fn submit(kind: Kind, inputs: Vec<PathBuf>) -> Submit {
    let program = PathBuf::from(env!("CARGO_BIN_EXE_tabos-mr-task"));
    let mut s = Submit::new(kind, inputs, program, Vec::new());
    s.reducers = 3;
    // Many map tasks from a small input.
    s.task_bytes = 16 << 10;
    // Short, so a killed coordinator's standby takes over soon; not so
    // short that a renewal late on a loaded 2-core machine (eleven jobs,
    // each with its node and procs, run at once here) ends a healthy
    // coordinator's session: at 600 ms a fresh-clone CI run lost all 8
    // coordinators of three jobs that way.
    s.session_ttl = Duration::from_secs(2);
    s
}

async fn run_to_end(c: &Client, s: Submit) -> (Job, BTreeMap<Vec<u8>, u64>) {
    let mut job = Job::submit(c, REALM, s).await.unwrap();
    job.wait(|_| {}).await.unwrap();
    let out: BTreeMap<Vec<u8>, u64> = job.output().await.unwrap().into_iter().collect();
    summed_up_as_the_output(&job, &out).await;
    (job, out)
}

/// A job's summary (what `tabos mr` prints) agrees with its whole output:
/// its records and total, and its first records in either order.
async fn summed_up_as_the_output(job: &Job, out: &BTreeMap<Vec<u8>, u64>) {
    let total: u64 = out.values().sum();
    let mut frequent: Vec<(Vec<u8>, u64)> = out.iter().map(|(k, c)| (k.clone(), *c)).collect();
    frequent.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let by_key: Vec<(Vec<u8>, u64)> = out.iter().map(|(k, c)| (k.clone(), *c)).collect();
    for n in [0usize, 1, 5, out.len() + 1] {
        for (order, all) in [(Order::MostFrequent, &frequent), (Order::ByKey, &by_key)] {
            let sum = job.summary(n, order).await.unwrap();
            assert_eq!(
                (sum.records, sum.total),
                (out.len(), total),
                "{order:?} {n}"
            );
            assert_eq!(sum.top, all[..n.min(all.len())], "{order:?} {n}");
        }
    }
}

async fn task_state(c: &Client, job: &Job, t: Task) -> TaskState {
    let e = c
        .clone()
        .name_get(REALM, &job.layout.task(t))
        .await
        .unwrap();
    TaskState::decode(&e.data).unwrap()
}

/// Waits until attempt `t` announces it paused; returns its OS pid on
/// this machine. (The pid it announces is the one it sees, which in its
/// jail's pid namespace is not the host's: the host's is found by its
/// command line, which names role, job and task.)
async fn paused(c: &Client, job: &Job, t: Task) -> i32 {
    c.clone()
        .wait_exists(REALM, &job.layout.paused(t))
        .await
        .unwrap();
    let (role, index) = match t {
        Task::Map(i) => ("map", i),
        Task::Reduce(i) => ("reduce", i),
    };
    host_pid(&format!("\0{role}\0{}\0{index}\0", job.layout.job))
}

/// The OS pid on this machine of the one process whose command line
/// holds `tail`.
fn host_pid(tail: &str) -> i32 {
    let found: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmd).contains(tail).then_some(pid)
        })
        .collect();
    assert_eq!(found.len(), 1, "one process of {tail:?}: {found:?}");
    found[0]
}

fn kill9(os_pid: i32) {
    let st = std::process::Command::new("kill")
        .args(["-9", &os_pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -9 {os_pid}");
}

async fn resume(c: &Client, job: &Job) {
    c.clone()
        .name_create(
            REALM,
            &job.layout.resume(),
            tabos_client::proto::NameKind::File,
            Vec::new(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
}

#[test]
fn wordcount_and_grep_equal_the_direct_computation() {
    let dir = TempDir::new("mr-procs");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        for kind in [Kind::WordCount, Kind::grep(b"needle").unwrap()] {
            let want = direct::run(&kind, &inputs).unwrap();
            let (job, got) = run_to_end(&c, submit(kind.clone(), inputs.clone())).await;
            assert!(job.spec.maps > 3, "the input makes several map tasks");
            assert_eq!(got, want, "{kind:?}");
            let p = job.progress().await.unwrap();
            assert_eq!((p.maps_done, p.reducers_done, p.retries), (p.maps, 3, 0));
            // Every task reported to the job's mailbox, and taking the
            // reports moves them to the message log.
            let reports = job.reports().await.unwrap();
            assert_eq!(reports.len(), job.spec.maps + 3);
            assert!(reports.iter().all(|(from, _)| from.starts_with(job.id())));
        }
        // Provenance, in SQL: the reducers' reads of map outputs and the
        // messages the mappers sent.
        let mut c2 = c.clone();
        let reads = c2
            .sql(
                "SELECT count(*) FROM proc_event WHERE realm = $1 AND event = 'fs_read' \
                 AND pid LIKE '%-r%' AND detail LIKE '%/inter/%'",
                vec![Value::Text(REALM.into())],
            )
            .await
            .unwrap();
        assert!(matches!(reads.rows[0][0], Some(Value::Int(n)) if n > 0));
        let sent = c2
            .sql(
                "SELECT count(*) FROM message_log l JOIN proc p ON p.realm = l.realm \
                 AND p.pid = l.sender WHERE l.realm = $1 AND p.pid LIKE '%-m%'",
                vec![Value::Text(REALM.into())],
            )
            .await
            .unwrap();
        assert!(matches!(sent.rows[0][0], Some(Value::Int(n)) if n > 0));
        node.shut_down().await;
    });
}

#[test]
fn a_mapper_killed_mid_job_is_run_again() {
    let dir = TempDir::new("mr-kill-map");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        let want = direct::run(&Kind::WordCount, &inputs).unwrap();
        let mut s = submit(Kind::WordCount, inputs);
        // Map task 1, attempt 1 stops after writing its runs, before
        // announcing them.
        s.pause = Some(Pause {
            task: "m1".into(),
            attempt: 1,
            at: "output".into(),
        });
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        kill9(paused(&c, &job, Task::Map(1)).await);
        job.wait(|_| {}).await.unwrap();
        let got: BTreeMap<_, _> = job.output().await.unwrap().into_iter().collect();
        assert_eq!(got, want);
        let m1 = task_state(&c, &job, Task::Map(1)).await;
        assert_eq!((m1.attempt, m1.done), (2, true));
        let first = c
            .clone()
            .proc_status(REALM, &job.layout.pid(Task::Map(1), 1))
            .await
            .unwrap();
        assert_ne!(
            first.exit_status,
            Some(0),
            "the killed attempt did not succeed"
        );
        node.shut_down().await;
    });
}

#[test]
fn a_reducer_killed_mid_job_is_run_again() {
    let dir = TempDir::new("mr-kill-reduce");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        let kind = Kind::grep(b"needle").unwrap();
        let want = direct::run(&kind, &inputs).unwrap();
        let mut s = submit(kind, inputs);
        // Reducer 0, attempt 1 stops with every run taken, before writing.
        s.pause = Some(Pause {
            task: "r0".into(),
            attempt: 1,
            at: "output".into(),
        });
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        kill9(paused(&c, &job, Task::Reduce(0)).await);
        job.wait(|_| {}).await.unwrap();
        let got: BTreeMap<_, _> = job.output().await.unwrap().into_iter().collect();
        assert_eq!(got, want);
        let r0 = task_state(&c, &job, Task::Reduce(0)).await;
        assert_eq!((r0.attempt, r0.done), (2, true));
        node.shut_down().await;
    });
}

#[test]
fn a_damaged_intermediate_file_reruns_its_mapper() {
    let dir = TempDir::new("mr-damaged");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        let want = direct::run(&Kind::WordCount, &inputs).unwrap();
        let mut s = submit(Kind::WordCount, inputs);
        // Reducer 0 waits before it reads anything.
        s.pause = Some(Pause {
            task: "r0".into(),
            attempt: 1,
            at: "start".into(),
        });
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        paused(&c, &job, Task::Reduce(0)).await;
        // Damage map task 0's run for reducer 0 once it is announced.
        let mut c2 = c.clone();
        let a = c2
            .wait_exists(REALM, &job.layout.announcement(0, 0))
            .await
            .unwrap();
        let a = tabos_mr::spec::Announcement::decode(&a.data).unwrap();
        let file = a.path.expect("map task 0 has words for reducer 0");
        c2.fs_write(REALM, FS_USER, &file, 3, b"garbage".to_vec(), false)
            .await
            .unwrap();
        resume(&c, &job).await;
        job.wait(|_| {}).await.unwrap();
        let got: BTreeMap<_, _> = job.output().await.unwrap().into_iter().collect();
        assert_eq!(got, want);
        let m0 = task_state(&c, &job, Task::Map(0)).await;
        assert!(m0.attempt >= 2 && m0.done, "{m0:?}");
        node.shut_down().await;
    });
}

#[test]
fn the_standby_coordinator_finishes_when_the_leader_is_killed() {
    let dir = TempDir::new("mr-kill-coord");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        let want = direct::run(&Kind::WordCount, &inputs).unwrap();
        let mut s = submit(Kind::WordCount, inputs);
        // Hold map task 0 so the job cannot finish before the kill.
        s.pause = Some(Pause {
            task: "m0".into(),
            attempt: 1,
            at: "start".into(),
        });
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        paused(&c, &job, Task::Map(0)).await;
        let leader = c
            .clone()
            .name_get(REALM, &format!("{}/leader", job.layout.election()))
            .await
            .unwrap();
        let leader = String::from_utf8(leader.data).unwrap();
        // "<proc pid> <os pid as it sees it>"; the proc pid ends in its
        // coordinator number, which its command line holds.
        let (leader_pid, _) = leader.split_once(' ').unwrap();
        let n = leader_pid.rsplit('-').next().unwrap();
        kill9(host_pid(&format!(
            "\0coordinator\0{}\0{n}\0",
            job.layout.job
        )));
        resume(&c, &job).await;
        job.wait(|_| {}).await.unwrap();
        let got: BTreeMap<_, _> = job.output().await.unwrap().into_iter().collect();
        assert_eq!(got, want);
        let killed = c.clone().proc_status(REALM, leader_pid).await.unwrap();
        assert_ne!(killed.exit_status, Some(0));
        // Another coordinator led after it, at a newer epoch.
        let epoch = c
            .clone()
            .name_get(REALM, &format!("{}/epoch", job.layout.election()))
            .await
            .unwrap();
        let epoch: i64 = String::from_utf8(epoch.data)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(epoch >= 2, "epoch {epoch}");
        // Map task 0's first attempt outlived its coordinator and was adopted.
        let m0 = task_state(&c, &job, Task::Map(0)).await;
        assert_eq!((m0.attempt, m0.done), (1, true));
        node.shut_down().await;
    });
}

/// The database fails over during a job (issue 19, item 4): a node on a
/// PostgreSQL primary with a synchronous standby runs a word count; the
/// primary is killed and the standby promoted while the job's procs run.
/// The job finishes with the direct computation's answer.
#[test]
fn a_job_finishes_across_a_database_failover() {
    use tabos_store::pg_cluster::{find_bindir, ClusterOptions, ReplicatedCluster};
    if find_bindir().is_none() {
        return; // no PostgreSQL server binaries here
    }
    let dir = TempDir::new("mr-failover");
    let inputs = inputs(dir.path());
    let rc = ReplicatedCluster::start(&ClusterOptions::default()).unwrap();
    let url = rc.create_database("mr").unwrap();
    let want = direct::run(&Kind::WordCount, &inputs).unwrap();
    rt().block_on(async {
        let settings = NodeSettings {
            node_id: "n1".into(),
            logs: dir.path().join("logs"),
            cores: 2,
            be_util_pct: 400,
            // The tests' programs and modules: in temporary directories and
            // the build's target directory (an operator's --program-dir).
            program_dirs: vec![
                std::env::temp_dir(),
                std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(".."),
            ],
            ..NodeSettings::defaults()
        };
        let config = Config::postgres(url).with_partitions(2);
        // Opening PostgreSQL blocks: off the async threads.
        let node = tokio::task::spawn_blocking(move || Node::open_with(&config, settings))
            .await
            .unwrap()
            .unwrap();
        let node = Running(tabos_node::Embedded::start(node).await.unwrap());
        let c = node.0.client().await.unwrap();
        c.clone()
            .set_realm(tabos_client::proto::SetRealmRequest {
                realm: REALM.into(),
                host_paths: vec![dir.path().join("in").display().to_string()],
                ..Default::default()
            })
            .await
            .unwrap();
        let mut s = submit(Kind::WordCount, inputs.clone());
        // Sessions outlive the outage (its renewals wait through it).
        s.session_ttl = Duration::from_secs(10);
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let rc = tokio::task::spawn_blocking(move || {
            rc.fail_over(Duration::from_millis(500)).unwrap();
            rc
        })
        .await
        .unwrap();
        job.wait(|_| {}).await.unwrap();
        let got: BTreeMap<Vec<u8>, u64> = job.output().await.unwrap().into_iter().collect();
        assert_eq!(got, want);
        node.shut_down().await;
        drop(rc);
    });
}

/// Copies the files under `root` on this machine into tabos fs under
/// `into` (as the operator, mode 0644), directories included.
async fn put_tree(c: &Client, root: &Path, into: &str) {
    let mut c = c.clone();
    let _ = c.fs_mkdir(REALM, "", into, 0o755).await;
    let mut entries: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = format!("{into}/{}", p.file_name().unwrap().to_str().unwrap());
        if p.is_dir() {
            Box::pin(put_tree(&c, &p, &name)).await;
        } else {
            let data = std::fs::read(&p).unwrap();
            c.fs_create(REALM, "", &name, 0o644).await.unwrap();
            for (n, chunk) in data.chunks(tabos_client::fs::CHUNK_BYTES).enumerate() {
                let at = (n * tabos_client::fs::CHUNK_BYTES) as i64;
                c.fs_write(REALM, "", &name, at, chunk.to_vec(), false)
                    .await
                    .unwrap();
            }
        }
    }
}

/// Inputs in tabos fs (issue 19, item 5): the mappers read their splits
/// through the API, and the answer is the direct computation's over the
/// same files.
#[test]
fn inputs_in_tabos_fs_equal_the_direct_computation() {
    let dir = TempDir::new("mr-fs-inputs");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        put_tree(&c, &dir.path().join("in"), "/in").await;
        // Grep counts per file: the host's paths are tabos fs's under /in.
        let host_root = dir.path().join("in").display().to_string().into_bytes();
        for kind in [Kind::WordCount, Kind::grep(b"needle").unwrap()] {
            let want: BTreeMap<Vec<u8>, u64> = direct::run(&kind, &inputs)
                .unwrap()
                .into_iter()
                .map(|(k, n)| match k.strip_prefix(host_root.as_slice()) {
                    Some(rest) if matches!(kind, Kind::Grep { .. }) => {
                        ([b"/in".as_slice(), rest].concat(), n)
                    }
                    _ => (k, n),
                })
                .collect();
            let mut s = submit(kind.clone(), vec![PathBuf::from("/in")]);
            s.inputs_in_fs = true;
            let (job, got) = run_to_end(&c, s).await;
            assert!(job.spec.maps > 3, "several map tasks");
            assert!(job.spec.host_paths.is_empty(), "no host path asked for");
            assert_eq!(got, want, "{kind:?}");
        }
        // A missing input is refused before anything starts.
        let mut s = submit(Kind::WordCount, vec![PathBuf::from("/nope")]);
        s.inputs_in_fs = true;
        assert!(Job::submit(&c, REALM, s).await.is_err());
        node.shut_down().await;
    });
}

/// `control`: a running job (a reducer held paused) is listed and
/// followed from another client, cancelled — marked failed, its procs
/// evicted, the submitter's wait ends with the cancellation and starts
/// nothing more — and then removed with everything it left; a finished or
/// unknown job is refused where that makes no sense.
#[test]
fn a_running_job_is_cancelled_and_removed() {
    use tabos_mr::control;
    let dir = TempDir::new("mr-cancel");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        let mut s = submit(Kind::WordCount, inputs);
        s.pause = Some(Pause {
            task: "r0".into(),
            attempt: 1,
            at: "start".into(),
        });
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        let id = job.id().to_string();
        paused(&c, &job, Task::Reduce(0)).await;
        let listed = control::list(&c, REALM).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].running() && listed[0].id == id, "{listed:?}");
        let st = control::status(&c, REALM, &id).await.unwrap();
        assert_eq!(st.kind, "wordcount");
        assert!(st.reducers >= 1 && st.reducers_done < st.reducers, "{st:?}");
        assert!(control::remove(&c, REALM, &id).await.is_err(), "running");
        let waiter = tokio::spawn(async move { job.wait(|_| {}).await });
        let evicted = control::cancel(&c, REALM, &id).await.unwrap();
        assert!(
            evicted.iter().any(|p| p.contains("-coord-"))
                && evicted.iter().any(|p| p.contains("-r0-")),
            "{evicted:?}"
        );
        let waited = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the submitter's wait ends")
            .unwrap();
        assert!(
            matches!(&waited, Err(tabos_mr::Error::Failed(why)) if why == "cancelled"),
            "{waited:?}"
        );
        let st = control::status(&c, REALM, &id).await.unwrap();
        assert_eq!(st.status, control::CANCELLED);
        // Nothing of the job runs any more.
        let live = c
            .clone()
            .sql(
                "SELECT count(*) FROM proc WHERE pid LIKE $1 \
                 AND state IN ('spawned', 'claimed', 'running')",
                vec![Value::Text(format!("{id}-%"))],
            )
            .await
            .unwrap();
        assert_eq!(live.rows[0][0], Some(Value::Int(0)));
        assert!(control::cancel(&c, REALM, &id).await.is_err(), "ended");
        assert!(control::remove(&c, REALM, &id).await.unwrap() > 5);
        assert!(control::status(&c, REALM, &id).await.is_err());
        assert!(c
            .clone()
            .fs_stat(REALM, &format!("/mr/{id}"))
            .await
            .is_err());
        assert!(control::list(&c, REALM).await.unwrap().is_empty());
        assert!(control::status(&c, REALM, "nope").await.is_err());
        assert!(control::status(&c, REALM, "../x").await.is_err());
        node.shut_down().await;
    });
}

/// The job's procs still alive (spawned, claimed or running).
async fn live_procs(c: &Client, id: &str) -> i64 {
    let live = c
        .clone()
        .sql(
            "SELECT count(*) FROM proc WHERE pid LIKE $1 \
             AND state IN ('spawned', 'claimed', 'running')",
            vec![Value::Text(format!("{id}-%"))],
        )
        .await
        .unwrap();
    match live.rows[0][0] {
        Some(Value::Int(n)) => n,
        ref other => panic!("{other:?}"),
    }
}

#[test]
fn inputs_the_procs_cannot_read_are_left_out_and_said() {
    if !tabos_store::testing::is_root() {
        eprintln!("skipped: not root, so procs run as this user and read what it reads");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("mr-unreadable");
    let inputs = inputs(dir.path());
    // As Debian's polkit has it: a directory only its owner may enter, and
    // a file only its owner may read (the test runs as root, which may).
    let root = dir.path().join("in");
    let private_dir = root.join("a-private");
    std::fs::create_dir(&private_dir).unwrap();
    std::fs::write(private_dir.join("rules"), b"needle needle\n").unwrap();
    std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(root.join("secret.txt"), b"needle\n").unwrap();
    std::fs::set_permissions(
        root.join("secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        // Strict: refused at once, saying what and why.
        let mut s = submit(Kind::WordCount, inputs.clone());
        s.strict = true;
        let refused = Job::submit(&c, REALM, s).await.err().expect("refused");
        let text = refused.to_string();
        assert!(
            text.contains("skipped 2 unreadable inputs, e.g. ")
                && text.contains("a-private: permission denied"),
            "{text}"
        );
        // By default: left out, listed, and the job is right about the rest.
        let (job, got) = run_to_end(&c, submit(Kind::WordCount, inputs.clone())).await;
        let skipped: Vec<_> = job.skipped.iter().map(|s| s.path.clone()).collect();
        assert_eq!(skipped, vec![private_dir.clone(), root.join("secret.txt")]);
        assert!(job.skipped.iter().all(|s| s.why == "permission denied"));
        std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_dir_all(&private_dir).unwrap();
        std::fs::remove_file(root.join("secret.txt")).unwrap();
        assert_eq!(got, direct::run(&Kind::WordCount, &inputs).unwrap());
        let p = job.progress().await.unwrap();
        assert_eq!(p.retries, 0, "no mapper tripped over an unreadable file");
        node.shut_down().await;
    });
}

#[test]
fn a_coordinator_that_fails_by_itself_fails_the_job_at_once() {
    let dir = TempDir::new("mr-coord-fails");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        // A "coordinator" that cannot do its work and says why.
        let mut s = submit(Kind::WordCount, inputs);
        s.program = PathBuf::from("/bin/sh");
        s.program_args = vec![
            "-c".into(),
            "echo 'coordinator: the spec is not mine' >&2; exit 3".into(),
            "sh".into(),
        ];
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        let id = job.id().to_string();
        let waited = tokio::time::timeout(Duration::from_secs(60), job.wait(|_| {}))
            .await
            .expect("fails at once, not after restarts");
        let Err(tabos_mr::Error::Failed(why)) = waited else {
            panic!("{waited:?}");
        };
        assert!(
            why.contains("exited with status 3: coordinator: the spec is not mine"),
            "{why}"
        );
        // Only the first two (leader and standby) ever ran.
        let ran = c
            .clone()
            .sql(
                "SELECT count(*) FROM proc WHERE pid LIKE $1",
                vec![Value::Text(format!("{id}-%"))],
            )
            .await
            .unwrap();
        assert_eq!(ran.rows[0][0], Some(Value::Int(2)));
        let st = tabos_mr::control::status(&c, REALM, &id).await.unwrap();
        assert!(st.status.starts_with("failed: ") && st.status.contains("spec is not mine"));
        assert_eq!(live_procs(&c, &id).await, 0);
        node.shut_down().await;
    });
}

#[test]
fn a_task_that_fails_every_attempt_fails_the_job_with_its_words_and_stops_the_rest() {
    let dir = TempDir::new("mr-task-fails");
    let inputs = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir).await;
        let c = node.0.client().await.unwrap();
        // m0 reads big.txt, the first file in name order (as the next few
        // tasks do): it is gone by the time they run, so every attempt of
        // theirs fails — while the reducers wait for their output.
        let mut s = submit(Kind::WordCount, inputs);
        s.pause = Some(Pause {
            task: "m0".into(),
            attempt: 1,
            at: "start".into(),
        });
        let mut job = Job::submit(&c, REALM, s).await.unwrap();
        let id = job.id().to_string();
        paused(&c, &job, Task::Map(0)).await;
        std::fs::remove_file(dir.path().join("in/big.txt")).unwrap();
        resume(&c, &job).await;
        let waited = tokio::time::timeout(Duration::from_secs(120), job.wait(|_| {}))
            .await
            .expect("the job ends");
        let Err(tabos_mr::Error::Failed(why)) = waited else {
            panic!("{waited:?}");
        };
        assert!(
            why.starts_with("task m") && why.contains(" failed 4 times"),
            "{why}"
        );
        assert!(
            why.contains("exited with status 1: mr: ") && why.contains("big.txt"),
            "the last attempt's own words: {why}"
        );
        let failure = job.last_failure(5).await.unwrap().expect("a failed proc");
        assert!(failure.0.ends_with("-a4"), "{failure:?}");
        assert!(
            failure.1.iter().any(|l| l.contains("big.txt")),
            "{failure:?}"
        );
        // Nothing of the failed job keeps running: its reducers were
        // evicted before it was marked failed, and its coordinators leave.
        for n in 1..=2 {
            let pid = job.layout.coordinator_pid(n);
            tokio::time::timeout(Duration::from_secs(30), c.clone().wait_exit(REALM, &pid))
                .await
                .expect("the coordinators leave")
                .unwrap();
        }
        // On a loaded machine a task's exit may lag its eviction (a reducer
        // claimed but not yet started is stopped when it starts; the job's
        // own wait for each is bounded), and more coordinators than the
        // first two may have run (one whose session lapsed is replaced while
        // the job runs). So: every task of the job still live has been
        // asked to leave, every coordinator leaves by itself, and then
        // nothing of the job is left.
        let live = c
            .clone()
            .sql(
                "SELECT pid, evict_requested FROM proc WHERE pid LIKE $1 \
                 AND state IN ('spawned', 'claimed', 'running')",
                vec![Value::Text(format!("{id}-%"))],
            )
            .await
            .unwrap();
        for row in &live.rows {
            let Some(Value::Text(pid)) = &row[0] else {
                panic!("{row:?}")
            };
            // A coordinator runs as `<job>-coord-<n>` (spec.rs).
            let coordinator = pid.starts_with(&format!("{}-coord-", job.layout.job));
            assert!(
                coordinator || matches!(row[1], Some(Value::Int(1))),
                "task {pid} of the failed job runs on, never evicted: {row:?}"
            );
            tokio::time::timeout(Duration::from_secs(60), c.clone().wait_exit(REALM, pid))
                .await
                .expect("it ends")
                .unwrap();
        }
        assert_eq!(live_procs(&c, &id).await, 0);
        let evicted = c
            .clone()
            .sql(
                "SELECT count(*) FROM proc WHERE pid LIKE $1 AND state = 'evicted'",
                vec![Value::Text(format!("{id}-r%"))],
            )
            .await
            .unwrap();
        assert_eq!(evicted.rows[0][0], Some(Value::Int(3)), "every reducer");
        let listed = tabos_mr::control::list(&c, REALM).await.unwrap();
        assert!(listed[0].status.starts_with("failed: task m"), "{listed:?}");
        node.shut_down().await;
    });
}
