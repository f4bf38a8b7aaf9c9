//! The cluster under real faults (issue 35): `tabos up` processes over one
//! throwaway PostgreSQL, a node killed with SIGKILL, and a node cut off
//! from the database in a network namespace of the test's own. What must
//! hold: a node's procs never outlive it, a restartable proc runs again
//! elsewhere and never twice at once, and a node that comes back says what
//! became of its procs.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tabos_store::pg_cluster::{find_bindir, ClusterOptions, TempCluster};
use tabos_store::testing::TempDir;

const TABOS: &str = env!("CARGO_BIN_EXE_tabos");
/// Heartbeats of the test's nodes: a lease is three.
const HEARTBEAT_MS: &str = "200";
/// How long a test's node may be cut off before it stops its restartable
/// procs; the cluster runs them elsewhere after that and two leases more.
const GRACE_MS: &str = "2000";
/// Longest any wait of these tests takes before it fails.
const WAIT_MAX: Duration = Duration::from_secs(60);

/// A `tabos up` process, killed on drop.
struct Up {
    child: Child,
    addr: String,
    token: String,
}

impl Up {
    /// Starts `tabos up ARGS` (behind `prefix`, e.g. `ip netns exec NS`)
    /// and reads its start-up lines.
    fn start(prefix: &[&str], args: &[&str], home: &Path) -> Up {
        Up::start_with_grace(prefix, args, home, GRACE_MS)
    }

    /// As [`Up::start`], with the node's grace `grace_ms`.
    fn start_with_grace(prefix: &[&str], args: &[&str], home: &Path, grace_ms: &str) -> Up {
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(TABOS);
                c
            }
            None => Command::new(TABOS),
        };
        cmd.arg("up")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--pg-listen", "none"])
            .args(["--http-listen", "none", "--no-context"])
            .args([
                "--heartbeat-ms",
                HEARTBEAT_MS,
                "--disconnect-grace-ms",
                grace_ms,
            ])
            .env("TABOS_CREDENTIALS", home.join("credentials.json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            assert!(
                out.read_line(&mut l).unwrap() > 0,
                "tabos up ended: {lines:?}"
            );
            let last = l.starts_with("try:");
            lines.push(l.trim_end().to_string());
            if last {
                break;
            }
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let addr = lines[0]
            .strip_prefix("tabos node on ")
            .map(|r| r.split(':').take(2).collect::<Vec<_>>().join(":"))
            .unwrap();
        let path = lines[1]
            .strip_prefix("operator credential: ")
            .and_then(|r| r.split(" (").next())
            .unwrap();
        let token = std::fs::read_to_string(path).unwrap().trim().to_string();
        Up { child, addr, token }
    }

    fn tabos(&self, args: &[&str]) -> Output {
        Command::new(TABOS)
            .env("TABOS_ADDR", &self.addr)
            .env("TABOS_TOKEN", &self.token)
            .args(args)
            .output()
            .unwrap()
    }

    /// One SQL row, as JSON.
    fn row(&self, sql: &str) -> serde_json::Value {
        let o = self.tabos(&["sql", "--json", sql]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["rows"][0].clone()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes on this machine whose command line is `argv` (NUL-joined).
fn processes(argv: &[u8]) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == argv))
        .count()
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Node a as `tabos nodes --json` lists it, through `n`.
fn node_a(n: &Up) -> serde_json::Value {
    let o = n.tabos(&["nodes", "--json"]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["node_id"] == "a")
        .unwrap_or_default()
}

/// Where proc `pid` of realm `r` is (`state`, `worker_id`), through `n`.
fn whereabouts(n: &Up, pid: &str) -> (String, String) {
    let row = n.row(&format!(
        "SELECT state, coalesce(worker_id, '') AS w FROM proc WHERE realm = 'r' AND pid = '{pid}'"
    ));
    (
        row["state"].as_str().unwrap_or_default().to_string(),
        row["w"].as_str().unwrap_or_default().to_string(),
    )
}

/// Waits (bounded) until `f` holds, checking `always` at every look.
fn until(what: &str, mut f: impl FnMut() -> bool, mut always: impl FnMut()) {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        always();
        if f() {
            return;
        }
        assert!(Instant::now() < deadline, "gave up waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two nodes over `url`: a (behind `prefix_a`) and b, and a realm `r`
/// whose locality scheduler puts a proc on its home node while that node
/// is up; a restartable proc `job` of a's, running.
fn two_nodes_and_a_job(
    dir: &TempDir,
    url_a: &str,
    url_b: &str,
    prefix_a: &[&str],
    argv: &str,
) -> (Up, Up) {
    let a = Up::start(
        prefix_a,
        &[
            "--db",
            url_a,
            "--node-id",
            "a",
            "--data",
            dir.path().join("a").to_str().unwrap(),
        ],
        dir.path(),
    );
    let b = Up::start(
        &[],
        &[
            "--db",
            url_b,
            "--node-id",
            "b",
            "--data",
            dir.path().join("b").to_str().unwrap(),
        ],
        dir.path(),
    );
    ok(&b.tabos(&["realm", "create", "r", "--scheduler", "locality"]));
    // Each node serves a realm once it has heard of it.
    until(
        "both nodes serve r",
        || b.row("SELECT count(*) AS n FROM worker WHERE realm = 'r' AND state = 'up'")["n"] == 2,
        || {},
    );
    let mut args = vec!["spawn", "--realm", "r", "--pid", "job", "--home-node", "a"];
    args.extend(["--restartable", "--", "sh", "-c", argv]);
    ok(&b.tabos(&args));
    until(
        "job runs on a",
        || whereabouts(&b, "job") == ("running".into(), "a.w0".into()),
        || {},
    );
    (a, b)
}

/// kill -9 of a node: its proc's processes end with it at once (the jail's
/// lifeline); once its grace has passed the cluster runs its restartable
/// proc elsewhere — and at no moment do two copies run.
#[test]
fn a_killed_nodes_restartable_proc_runs_again_and_never_twice() {
    if !tabos_store::testing::is_root() || find_bindir().is_none() {
        eprintln!("skipped: needs root (jails) and PostgreSQL's server binaries");
        return;
    }
    let pg = TempCluster::start(&ClusterOptions::default()).unwrap();
    let url = pg.create_database("killed").unwrap();
    let dir = TempDir::new("cluster-kill");
    let marker = b"sleep\x006171\x00";
    let (mut a, b) = two_nodes_and_a_job(&dir, &url, &url, &[], "exec sleep 6171");
    assert_eq!(processes(marker), 1);
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let mut most = 0;
    let mut count = || {
        let n = processes(marker);
        most = most.max(n);
        assert!(n <= 1, "two copies at once");
    };
    until(
        "the killed node's copy ends",
        || processes(marker) == 0,
        &mut count,
    );
    until(
        "job runs again on b",
        || whereabouts(&b, "job") == ("running".into(), "b.w0".into()),
        &mut count,
    );
    until("b's copy runs", || processes(marker) == 1, &mut count);
    let starts = b.row("SELECT count(*) AS n FROM proc_event WHERE realm = 'r' AND pid = 'job' AND event = 'start'");
    assert_eq!(starts["n"], 2, "started twice in all, one at a time");
    let a = node_a(&b);
    assert!(a["lost_us"].is_i64() && a["given_back_us"].is_i64(), "{a}");
    ok(&b.tabos(&["evict", "--realm", "r", "job"]));
    drop(pg);
}

/// A network namespace of the test's own, joined to this one by a veth
/// pair: what the node inside reaches the database through, and what the
/// test cuts.
struct Netns {
    name: String,
    host_if: String,
    host_ip: String,
}

impl Netns {
    fn make() -> Option<Netns> {
        let id = std::process::id() % 200 + 20;
        let n = Netns {
            name: format!("tabos-t{}", std::process::id()),
            host_if: format!("tbh{}", std::process::id() % 100_000),
            host_ip: format!("10.77.{id}.1"),
        };
        let ns_if = format!("tbn{}", std::process::id() % 100_000);
        let ns_ip = format!("10.77.{id}.2");
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        let made = ip(&["netns", "add", &n.name])
            && ip(&[
                "link", "add", &n.host_if, "type", "veth", "peer", "name", &ns_if,
            ])
            && ip(&["link", "set", &ns_if, "netns", &n.name])
            && ip(&[
                "addr",
                "add",
                &format!("{}/24", n.host_ip),
                "dev",
                &n.host_if,
            ])
            && ip(&["link", "set", &n.host_if, "up"])
            && ip(&[
                "netns",
                "exec",
                &n.name,
                "ip",
                "addr",
                "add",
                &format!("{ns_ip}/24"),
                "dev",
                &ns_if,
            ])
            && ip(&["netns", "exec", &n.name, "ip", "link", "set", &ns_if, "up"])
            && ip(&["netns", "exec", &n.name, "ip", "link", "set", "lo", "up"]);
        if made {
            Some(n)
        } else {
            eprintln!("cannot make network namespace {} with ip(8)", n.name);
            drop(n);
            None
        }
    }

    fn link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        let s = Command::new("ip")
            .args(["link", "set", &self.host_if, state])
            .status()
            .unwrap();
        assert!(s.success(), "ip link set {} {state}", self.host_if);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A node cut off from the database while the others still reach it
/// (its veth brought down): past its grace it stops its restartable proc
/// itself, and only after that and a margin does the cluster run it
/// elsewhere — never two copies at once. Back on the network, it finds its
/// proc was given back, keeps stopped what it stopped, and `tabos nodes`
/// says so.
#[test]
fn a_node_cut_off_stops_its_restartable_proc_before_it_runs_elsewhere() {
    if !tabos_store::testing::is_root() || find_bindir().is_none() {
        eprintln!("skipped: needs root (namespaces, jails) and PostgreSQL's server binaries");
        return;
    }
    let Some(ns) = Netns::make() else {
        panic!("a root test host can make network namespaces (ip netns, veth)");
    };
    let pg = TempCluster::start(&ClusterOptions {
        also_listen: vec![ns.host_ip.clone()],
        ..ClusterOptions::default()
    })
    .unwrap();
    let url = pg.create_database("cutoff").unwrap();
    let url_a = url.replace("127.0.0.1", &ns.host_ip);
    let dir = TempDir::new("cluster-cut");
    let prefix = ["ip", "netns", "exec", ns.name.as_str()];
    let marker = b"sleep\x006172\x00";
    let (a, b) = two_nodes_and_a_job(&dir, &url_a, &url, &prefix, "exec sleep 6172");
    assert_eq!(processes(marker), 1);
    ns.link(false);
    let cut = Instant::now();
    let mut count = || assert!(processes(marker) <= 1, "two copies at once");
    until(
        "the cut-off node stops its copy",
        || processes(marker) == 0,
        &mut count,
    );
    let stopped_after = cut.elapsed();
    until(
        "job runs again on b",
        || whereabouts(&b, "job") == ("running".into(), "b.w0".into()),
        &mut count,
    );
    until("b's copy runs", || processes(marker) == 1, &mut count);
    eprintln!("the cut-off node stopped its copy {stopped_after:?} after the cut");
    // Back: the node learns its proc was given back, and says so.
    ns.link(true);
    until(
        "a says what became of its procs",
        || {
            let a = node_a(&b);
            a["state"] == "up" && a["note"].as_str().is_some_and(|n| n.contains("given back"))
        },
        &mut count,
    );
    assert_eq!(processes(marker), 1, "still one copy, b's");
    assert_eq!(whereabouts(&b, "job"), ("running".into(), "b.w0".into()));
    ok(&b.tabos(&["evict", "--realm", "r", "job"]));
    drop((a, b, pg));
}
