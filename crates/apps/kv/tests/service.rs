//! The key-value service on a real node (in-process, embedded SQLite; kvd,
//! balancer and mover procs running the `tabos-kv-task` binary): clients
//! record their histories while the leading kvd of a group is SIGKILLed,
//! the balancer grows the service to two groups (moving shards under
//! load), the leading balancer is SIGKILLed in the middle of the move back
//! to one group, and the whole service is stopped and started again. The
//! history must be linearizable — so no acknowledged write is lost — and
//! every key must read back its last value after the restart.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tabos_client::Client;
use tabos_kv::clerk::Clerk;
use tabos_kv::config::{Config, Layout, Policy};
use tabos_kv::linearizability::{self, Action, Operation, Verdict};
use tabos_kv::resp::{self, Reply};
use tabos_kv::service::{self, Program, Supervisor};
use tabos_node::{Node, NodeSettings};
use tabos_store::testing::{kill_proc, TempDir};

const REALM: &str = "default";
const SVC: &str = "t";
const KEYS: usize = 8;
const CLIENTS: usize = 4;
/// Most operations one client makes (bounds the checker's work).
const OPS_MAX: usize = 3_000;

async fn start(dir: &TempDir) -> tabos_node::Embedded {
    let settings = NodeSettings {
        node_id: "n1".into(),
        logs: dir.path().join("logs"),
        cores: 16,
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
    let node = Node::open_with(
        &tabos_store::Config::sqlite(dir.path().join("db")),
        settings,
    )
    .unwrap();
    let node = tabos_node::Embedded::start(node).await.unwrap();
    // kvds listen where clients connect: the realm shares the host's network.
    node.client()
        .await
        .unwrap()
        .set_realm(tabos_client::proto::SetRealmRequest {
            realm: "default".into(),
            host_network: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    node
}

fn program() -> Program {
    Program {
        path: env!("CARGO_BIN_EXE_tabos-kv-task").into(),
        args: Vec::new(),
    }
}

/// One group of `kvds` kvds, never grown or shrunk on load (the tests
/// ask), snapshotting every `compact_at` batches.
fn one_group(kvds: u32, compact_at: u32) -> Policy {
    Policy {
        kvds_per_group: kvds,
        min_groups: 1,
        max_groups: 1,
        grow_ops: 1e12,
        shrink_ops: 0.0,
        shrink_after_ms: 0,
        grow_after_ms: 0,
        compact_at,
    }
}

/// `balancers` balancers running the service, once it is led.
async fn supervise(client: &Client, balancers: u32) -> Supervisor {
    let mut sup = Supervisor::new(client, REALM, SVC, program(), balancers).unwrap();
    sup.fill().await.unwrap();
    service::until_led(client, REALM, SVC, Duration::from_secs(60))
        .await
        .unwrap();
    sup
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn config(c: &mut Client) -> Config {
    Config::from_json(
        &c.name_get(REALM, &Layout::new(SVC).unwrap().config())
            .await
            .unwrap()
            .data,
    )
    .unwrap()
}

/// Waits (bounded) until the config satisfies `done`.
async fn until_config(c: &mut Client, what: &str, done: impl Fn(&Config) -> bool) -> Config {
    for _ in 0..3_000 {
        let conf = config(c).await;
        if done(&conf) {
            return conf;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the config never got to {what}: {:?}", config(c).await);
}

/// The pid of the kvd leading group `g` (its member entry holds the
/// address the leader symlink names).
async fn leading_kvd(c: &mut Client, g: u32) -> String {
    let l = Layout::new(SVC).unwrap();
    let addr = c.wait_exists(REALM, &l.leader(g)).await.unwrap().data;
    let members = c.name_readdir(REALM, &l.members(g)).await.unwrap();
    let m = members
        .entries
        .iter()
        .find(|e| e.data == addr)
        .expect("the leader is a member");
    m.path.rsplit('/').next().unwrap().to_string()
}

async fn set_policy(c: &mut Client, p: &Policy) {
    c.name_set(
        REALM,
        &Layout::new(SVC).unwrap().policy(),
        p.to_json(),
        None,
        None,
    )
    .await
    .unwrap();
}

/// One client: gets and sets of unique values on the keys until told to
/// stop, each recorded with its call and return times.
async fn client_loop(
    c: Client,
    id: usize,
    t0: tokio::time::Instant,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Operation>>>,
) -> (usize, usize) {
    let mut clerk = Clerk::new(&c, REALM, SVC).await.unwrap();
    let ns = || t0.elapsed().as_nanos() as u64;
    let (mut writes, mut failures) = (0, 0);
    for i in 0..OPS_MAX {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let key = format!("k{}", (i * 7 + id * 3) % KEYS).into_bytes();
        let call = ns();
        let op = if i % 2 == 0 {
            let v = format!("c{id}-{i}").into_bytes();
            match clerk.set(&key, &v).await {
                Ok(()) => {
                    writes += 1;
                    Some((Some(ns()), Action::Write(Some(v))))
                }
                Err(_) => {
                    failures += 1;
                    Some((None, Action::Write(Some(v))))
                }
            }
        } else {
            match clerk.get(&key).await {
                Ok(v) => Some((Some(ns()), Action::Read(v))),
                Err(_) => {
                    failures += 1;
                    None
                }
            }
        };
        if let Some((ret, action)) = op {
            history.lock().unwrap().push(Operation {
                key,
                call,
                ret,
                action,
            });
        }
    }
    (writes, failures)
}

#[test]
fn acknowledged_writes_survive_kills_and_moves_linearizably() {
    let dir = TempDir::new("kv-service");
    rt().block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        // Snapshots often, beside the writes and the kills.
        let policy = one_group(2, 16);
        service::create(&client, REALM, SVC, 8, 1, &policy)
            .await
            .unwrap();
        let mut sup = supervise(&client, 2).await;

        let t0 = tokio::time::Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let history = Arc::new(Mutex::new(Vec::new()));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|id| {
                tokio::spawn(client_loop(
                    client.clone(),
                    id,
                    t0,
                    stop.clone(),
                    history.clone(),
                ))
            })
            .collect();
        let writes_so_far = || {
            history
                .lock()
                .unwrap()
                .iter()
                .filter(|o| matches!(o.action, Action::Write(_)) && o.ret.is_some())
                .count()
        };
        let until_writes = |n: usize| async move {
            for _ in 0..3_000 {
                if writes_so_far() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the clients made no progress");
        };

        // Deadlines, durable like the values: one far (it must survive the
        // kills and the moves below), one near (gone by the end).
        let mut deadlines = Clerk::new(&client, REALM, SVC).await.unwrap();
        for set in [
            &["SET", "far", "x", "EX", "3600"][..],
            &["SET", "near", "y", "PX", "200"],
        ] {
            let args: Vec<&[u8]> = set.iter().map(|a| a.as_bytes()).collect();
            assert_eq!(deadlines.call(&args).await.unwrap(), Reply::ok());
        }

        // 1. The leading kvd of group 0 is SIGKILLed under load.
        until_writes(50).await;
        let victim = leading_kvd(&mut c, 0).await;
        assert!(kill_proc(&victim) > 0, "found no process of {victim}");
        let before = writes_so_far();
        until_writes(before + 50).await;
        assert_ne!(leading_kvd(&mut c, 0).await, victim, "another kvd leads");

        // 2. Grown to two groups: shards move under load.
        set_policy(
            &mut c,
            &Policy {
                min_groups: 2,
                max_groups: 2,
                ..policy.clone()
            },
        )
        .await;
        let two = until_config(&mut c, "two groups", |k| {
            k.groups.len() == 2 && k.target.is_none()
        })
        .await;
        assert_eq!(two.shards_of(0).len() + two.shards_of(1).len(), 8);
        let before = writes_so_far();
        until_writes(before + 50).await;

        // 3. Back to one group, the leading balancer SIGKILLed mid-move:
        // its standby finishes the move.
        let l = Layout::new(SVC).unwrap();
        set_policy(&mut c, &policy).await;
        until_config(&mut c, "a move in progress", |k| k.target.is_some()).await;
        let leader = c
            .name_get(REALM, &format!("{}/leader", l.balancer()))
            .await
            .unwrap()
            .data;
        let leader = String::from_utf8(leader).unwrap();
        assert!(kill_proc(&leader) > 0, "found no process of {leader}");
        let one = until_config(&mut c, "one group", |k| {
            k.groups == [0] && k.target.is_none()
        })
        .await;
        assert!(one.moving.is_empty());
        let before = writes_so_far();
        until_writes(before + 50).await;

        stop.store(true, Ordering::SeqCst);
        let mut failures = 0;
        for t in clients {
            failures += t.await.unwrap().1;
        }

        // 4. Everything stopped and started again: every key reads back
        // (recorded as reads after all else).
        sup.stop().await.unwrap();
        let mut sup = supervise(&client, 2).await;
        let mut clerk = Clerk::new(&client, REALM, SVC).await.unwrap();
        for k in 0..KEYS {
            let key = format!("k{k}").into_bytes();
            let call = t0.elapsed().as_nanos() as u64;
            let v = clerk.get(&key).await.unwrap();
            let ret = t0.elapsed().as_nanos() as u64;
            history.lock().unwrap().push(Operation {
                key,
                call,
                ret: Some(ret),
                action: Action::Read(v),
            });
        }
        // The deadlines came through the kill, the moves and the restart.
        let ttl = deadlines.call(&[b"TTL", b"far"]).await.unwrap();
        assert!(
            matches!(ttl, Reply::Integer(t) if (1..=3600).contains(&t)),
            "{ttl:?}"
        );
        let near = deadlines.call(&[b"GET", b"near"]).await.unwrap();
        assert_eq!(near, Reply::Null, "past its deadline");
        sup.stop().await.unwrap();

        let history = history.lock().unwrap().clone();
        let writes = history
            .iter()
            .filter(|o| matches!(o.action, Action::Write(_)) && o.ret.is_some())
            .count();
        eprintln!(
            "{} operations, {writes} acknowledged writes, {failures} failed calls",
            history.len()
        );
        assert!(writes >= 200, "too few writes to mean anything: {writes}");
        let verdict = linearizability::check(&history);
        if let Verdict::Violation { key } = &verdict {
            // The key's history, for whoever reads the failure.
            for o in history.iter().filter(|o| &o.key == key) {
                eprintln!("{} {:?} {:?}", o.call, o.ret, o.action);
            }
        }
        assert_eq!(verdict, Verdict::Linearizable);
        drop((c, client));
        node.stop().await.unwrap();
    });
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let dir = TempDir::new("kv-bad");
    rt().block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let p = Policy::default();
        // Bad shapes and names.
        assert!(service::create(&client, REALM, "a/b", 8, 1, &p)
            .await
            .is_err());
        assert!(service::create(&client, REALM, SVC, 0, 1, &p)
            .await
            .is_err());
        assert!(service::create(&client, REALM, SVC, 2, 3, &p)
            .await
            .is_err());
        let bad = Policy {
            min_groups: 3,
            max_groups: 2,
            ..p.clone()
        };
        assert!(service::create(&client, REALM, SVC, 8, 1, &bad)
            .await
            .is_err());
        // None of it created the service.
        assert!(Clerk::new(&client, REALM, SVC).await.is_err());
        assert!(service::status(&client, REALM, SVC).await.is_err());
        // A second create keeps the first config.
        let first = service::create(&client, REALM, SVC, 8, 2, &p)
            .await
            .unwrap();
        let again = service::create(&client, REALM, SVC, 4, 1, &p)
            .await
            .unwrap();
        assert_eq!(first, again);
        drop(client);
        node.stop().await.unwrap();
    });
}

/// One RESP round trip on `conn`.
async fn round(conn: &mut tokio::io::BufReader<tokio::net::TcpStream>, args: &[&str]) -> Reply {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Vec::new();
    resp::encode_request(&args, &mut out);
    resp::write_all(conn.get_mut(), &out).await.unwrap();
    resp::read_reply(conn).await.unwrap()
}

/// A connection to group 0's leader, signed in.
async fn leader_conn(c: &mut Client) -> tokio::io::BufReader<tokio::net::TcpStream> {
    let l = Layout::new(SVC).unwrap();
    let addr = c.wait_exists(REALM, &l.leader(0)).await.unwrap().data;
    let sock = tokio::net::TcpStream::connect(String::from_utf8(addr).unwrap())
        .await
        .unwrap();
    let mut conn = tokio::io::BufReader::new(sock);
    let password = tabos_kv::config::read_password(c, REALM, &l).await.unwrap();
    assert_eq!(round(&mut conn, &["AUTH", &password]).await, Reply::ok());
    conn
}

/// A clerk sends a write again when its reply was lost (a leader killed
/// between the append and the reply). Sent with `TABOS.ONCE`, the second
/// sending is answered and not applied over the writes made since — on
/// the kvd that applied it and, through the log and the snapshot, on the
/// kvd that loads the shard after a kill.
#[test]
fn a_request_sent_again_is_applied_once_even_after_a_kill() {
    let dir = TempDir::new("kv-once");
    rt().block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        // A snapshot after every other batch: the requests must survive
        // snapshots too.
        service::create(&client, REALM, SVC, 1, 1, &one_group(1, 2))
            .await
            .unwrap();
        let mut sup = supervise(&client, 1).await;
        let mut conn = leader_conn(&mut c).await;
        let get = |v: &str| Reply::Bulk(v.as_bytes().to_vec());
        let once = |seq: &'static str, v: &'static str| ["TABOS.ONCE", "77", seq, "SET", "k", v];

        assert_eq!(round(&mut conn, &once("1", "a")).await, Reply::ok());
        assert_eq!(round(&mut conn, &["SET", "k", "b"]).await, Reply::ok());
        // Sent again: answered, not applied.
        assert_eq!(round(&mut conn, &once("1", "a")).await, Reply::ok());
        assert_eq!(round(&mut conn, &["GET", "k"]).await, get("b"));
        // The clerk's next request is applied; an older one is not.
        let mset = ["TABOS.ONCE", "77", "2", "MSET", "k", "c", "j", "x"];
        assert_eq!(round(&mut conn, &mset).await, Reply::ok());
        assert_eq!(round(&mut conn, &["GET", "k"]).await, get("c"));
        assert_eq!(round(&mut conn, &once("1", "a")).await, Reply::ok());
        assert_eq!(round(&mut conn, &["GET", "k"]).await, get("c"));
        // Another clerk's first request is its own.
        let other = ["TABOS.ONCE", "78", "1", "SET", "j", "y"];
        assert_eq!(round(&mut conn, &other).await, Reply::ok());
        assert_eq!(round(&mut conn, &["GET", "j"]).await, get("y"));
        // Bad forms are refused and change nothing.
        for bad in [
            &["TABOS.ONCE", "77", "9", "DEL", "k"][..],
            &["TABOS.ONCE", "x", "9", "SET", "k", "z"],
            &["TABOS.ONCE", "77", "-1", "SET", "k", "z"],
            &["TABOS.ONCE", "77", "9"],
            &["TABOS.ONCE", "77", "9", "SET", "k"],
            &["TABOS.ONCE", "77", "9", "MSET", "k"],
        ] {
            let r = round(&mut conn, bad).await;
            assert!(matches!(r, Reply::Error(_)), "{bad:?} answered {r:?}");
        }
        assert_eq!(round(&mut conn, &["GET", "k"]).await, get("c"));

        // The kvd SIGKILLed: its successor loads the shard from the
        // snapshot and the log, requests and all.
        let l = Layout::new(SVC).unwrap();
        let victim_addr = c.wait_exists(REALM, &l.leader(0)).await.unwrap().data;
        let victim = leading_kvd(&mut c, 0).await;
        assert!(kill_proc(&victim) > 0, "found no process of {victim}");
        sup.fill().await.unwrap();
        // Led again once the leader symlink names another address (it is
        // gone while the killed kvd's session lapses).
        let mut pauses = 0;
        let mut conn = loop {
            match c.name_get(REALM, &l.leader(0)).await {
                Ok(e) if e.data != victim_addr => break leader_conn(&mut c).await,
                Ok(_) => {}
                Err(e) => assert_eq!(e.code(), Some(tonic::Code::NotFound), "{e}"),
            }
            pauses += 1;
            assert!(pauses < 3_000, "no kvd took over from {victim}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let read_k = loop {
            match round(&mut conn, &["GET", "k"]).await {
                Reply::Error(e) if e.starts_with("TRYAGAIN") => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                r => break r,
            }
        };
        assert_eq!(read_k, get("c"));
        assert_eq!(round(&mut conn, &once("1", "a")).await, Reply::ok());
        assert_eq!(round(&mut conn, &mset).await, Reply::ok());
        assert_eq!(round(&mut conn, &["SET", "k", "d"]).await, Reply::ok());
        assert_eq!(round(&mut conn, &mset).await, Reply::ok());
        assert_eq!(round(&mut conn, &["GET", "k"]).await, get("d"));
        assert_eq!(round(&mut conn, &once("3", "e")).await, Reply::ok());
        assert_eq!(round(&mut conn, &["GET", "k"]).await, get("e"));
        sup.stop().await.unwrap();
        drop((c, client));
        node.stop().await.unwrap();
    });
}

/// Established TCP connections whose local port is `port`, from
/// /proc/net/tcp (the kvds share the host's network here).
fn connections_to(port: u16) -> usize {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = f[1].rsplit(':').next().unwrap();
            u16::from_str_radix(local_port, 16).unwrap() == port && f[3] == "01"
        })
        .count()
}

/// The reads of many clerks in one process go over one connection to the
/// kvd (the clerk's pipe), many in flight at once, and each read gets its
/// own answer — single keys and MGETs, values that differ per key.
#[test]
fn the_reads_of_many_clerks_share_one_connection_and_each_gets_its_answer() {
    const CLERKS: usize = 24;
    const ROUNDS: usize = 50;
    let dir = TempDir::new("kv-pipe");
    rt().block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        service::create(&client, REALM, SVC, 4, 1, &one_group(1, 1_024))
            .await
            .unwrap();
        let mut sup = supervise(&client, 1).await;
        let l = Layout::new(SVC).unwrap();
        let addr = c.wait_exists(REALM, &l.leader(0)).await.unwrap().data;
        let port: u16 = String::from_utf8(addr)
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let mut writer = Clerk::new(&client, REALM, SVC).await.unwrap();
        let value = |i: usize| format!("value of key {i}: {}", "x".repeat(i * 7)).into_bytes();
        for i in 0..CLERKS {
            writer
                .set(format!("key{i}").as_bytes(), &value(i))
                .await
                .unwrap();
        }
        let readers: Vec<_> = (0..CLERKS)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let mut clerk = Clerk::new(&client, REALM, SVC).await.unwrap();
                    let (me, next) = (format!("key{i}"), format!("key{}", (i + 1) % CLERKS));
                    for _ in 0..ROUNDS {
                        let got = clerk.get(me.as_bytes()).await.unwrap();
                        assert_eq!(got, Some(value(i)), "{me}");
                        let both = clerk
                            .call(&[b"MGET", me.as_bytes(), b"nokey", next.as_bytes()])
                            .await
                            .unwrap();
                        assert_eq!(
                            both,
                            Reply::Array(vec![
                                Reply::Bulk(value(i)),
                                Reply::Null,
                                Reply::Bulk(value((i + 1) % CLERKS)),
                            ]),
                            "MGET {me} nokey {next}"
                        );
                    }
                    clerk
                })
            })
            .collect();
        let mut clerks = Vec::new();
        for r in readers {
            clerks.push(r.await.unwrap());
        }
        // The writer's own connection, and the readers' one pipe (while the
        // clerks live).
        let open = connections_to(port);
        assert!(
            (1..=2).contains(&open),
            "{CLERKS} reading clerks hold {open} connections to the kvd"
        );
        drop(clerks);
        sup.stop().await.unwrap();
        drop((c, client));
        node.stop().await.unwrap();
    });
}

/// A service written before the group logs — a log per shard, and a
/// snapshot pointer `"<seq> <file>"` — is served as it was: a shard with
/// only its own log, and one with a snapshot, entries it holds (skipped)
/// and entries after it (replayed). Each is then folded into a snapshot
/// pointing into its group's log, and its old log removed.
#[test]
fn a_service_from_before_the_group_logs_reads_back_and_is_folded() {
    use tabos_kv::shard::{self, Contents, Op, Pointer};
    let dir = TempDir::new("kv-legacy");
    rt().block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        let config = service::create(&client, REALM, SVC, 8, 1, &one_group(1, 1_024))
            .await
            .unwrap();
        let l = Layout::new(SVC).unwrap();
        // Two keys in two shards.
        let a = b"alpha".to_vec();
        let b = (0..100)
            .map(|i| format!("beta{i}").into_bytes())
            .find(|k| config.shard_of(k) != config.shard_of(&a))
            .unwrap();
        let (sa, sb) = (config.shard_of(&a), config.shard_of(&b));
        let set = |k: &[u8], v: &str| shard::encode(&[Op::Set(k.to_vec(), v.as_bytes().to_vec())]);
        for (s, seq, data) in [
            (sa, 1, set(&a, "a1")),
            (sa, 2, set(&a, "a2")),
            (sb, 4, set(&b, "old")),
            (sb, 6, set(&b, "b6")),
        ] {
            c.name_mkdir_all(REALM, &l.log(s)).await.unwrap();
            let path = format!("{}/{seq:020}", l.log(s));
            c.name_set(REALM, &path, data, Some(0), None).await.unwrap();
        }
        // Shard sb's snapshot holds its log up to entry 5.
        let mut snap = Contents::default();
        shard::apply(&mut snap, &Op::Set(b.clone(), b"b5".to_vec()));
        let file = format!("{}/s{sb}.00000000000000000005", l.snap_dir());
        for d in ["/kv".to_string(), l.snap_dir()] {
            let _ = c.fs_mkdir(REALM, "", &d, 0o755).await;
        }
        c.fs_write(
            REALM,
            "",
            file.as_str(),
            0,
            shard::encode_contents(&snap),
            true,
        )
        .await
        .unwrap();
        c.name_set(
            REALM,
            &l.snap(sb),
            format!("5 {file}").into_bytes(),
            None,
            None,
        )
        .await
        .unwrap();

        let mut sup = supervise(&client, 1).await;
        let mut clerk = Clerk::new(&client, REALM, SVC).await.unwrap();
        assert_eq!(clerk.get(&a).await.unwrap(), Some(b"a2".to_vec()));
        assert_eq!(clerk.get(&b).await.unwrap(), Some(b"b6".to_vec()));
        // Folded: pointers into group 0's log, the old logs gone.
        for s in [sa, sb] {
            let p = c.name_get(REALM, &l.snap(s)).await.unwrap().data;
            assert!(
                matches!(Pointer::parse(&p).unwrap(), Pointer::Group { group: 0, .. }),
                "shard {s}: {}",
                String::from_utf8_lossy(&p)
            );
            let left = match c.name_readdir(REALM, &l.log(s)).await {
                Ok(r) => r.entries.len(),
                Err(e) => {
                    assert_eq!(e.code(), Some(tonic::Code::NotFound));
                    0
                }
            };
            assert_eq!(left, 0, "shard {s}'s old log");
        }
        // Written after, read back after a restart (from the group's log).
        clerk.set(&a, b"a3").await.unwrap();
        sup.stop().await.unwrap();
        let mut sup = supervise(&client, 1).await;
        let mut clerk = Clerk::new(&client, REALM, SVC).await.unwrap();
        assert_eq!(clerk.get(&a).await.unwrap(), Some(b"a3".to_vec()));
        assert_eq!(clerk.get(&b).await.unwrap(), Some(b"b6".to_vec()));
        sup.stop().await.unwrap();
        drop((c, client, clerk));
        node.stop().await.unwrap();
    });
}
