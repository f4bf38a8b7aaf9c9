//! The cluster under real faults (issue 35): `tabos up` processes over one
//! throwaway PostgreSQL, a node killed with SIGKILL, a node cut off from
//! the database in a network namespace of the test's own, and a
//! pg_auto_failover formation promoting its standby by itself. What must
//! hold: a node's procs never outlive it, a restartable proc runs again
//! elsewhere and never twice at once, and a node that comes back says what
//! became of its procs.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tabos_store::pg_cluster::{find_bindir, free_port, ClusterOptions, TempCluster};
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
            // The tests' programs, in temporary directories.
            .arg("--program-dir")
            .arg(std::env::temp_dir())
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

/// Node `id` over the database at `url`, its data under `dir`.
fn node_on(url: &str, dir: &TempDir, id: &str) -> Up {
    Up::start(
        &[],
        &[
            "--db",
            url,
            "--node-id",
            id,
            "--data",
            dir.path().join(id).to_str().unwrap(),
        ],
        dir.path(),
    )
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
    serde_json::from_str::<serde_json::Value>(String::from_utf8_lossy(&o.stdout).trim())
        .ok()
        .and_then(|v| v.as_array()?.iter().find(|v| v["node_id"] == "a").cloned())
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

/// A pg_auto_failover formation in a directory of the test's own: a
/// monitor and two data nodes (the first primary, the second its
/// synchronous standby), each a `pg_autoctl run` process run as the
/// `postgres` user (pg_autoctl refuses root), killed with its PostgreSQL on
/// drop.
struct AutoFailover {
    dir: TempDir,
    monitor_port: u16,
    ports: [u16; 2],
    keepers: Vec<Option<Child>>,
}

/// SIGKILL to a pid, or to a process group as `-PGID`.
fn kill9(target: &str) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", target])
        .stderr(Stdio::null())
        .status();
}

impl AutoFailover {
    fn pgdata(&self, i: usize) -> std::path::PathBuf {
        self.dir.path().join(["mon", "a", "b"][i])
    }

    /// `pg_autoctl ARGS` as the postgres user, with its configuration and
    /// state under the test's directory.
    fn autoctl(&self, args: &[&str]) -> Command {
        let bindir = find_bindir().unwrap();
        let mut c = Command::new("/usr/sbin/runuser");
        c.args(["-u", "postgres", "--", "pg_autoctl"])
            .args(args)
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .env("PG_CONFIG", bindir.join("pg_config"))
            .env(
                "PATH",
                format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bindir.display()),
            )
            .current_dir(self.dir.path());
        c
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let o = self.autoctl(args).output().unwrap();
        assert!(
            o.status.success(),
            "pg_autoctl {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `pg_autoctl run` of node `i` (0: the monitor), in a process group of
    /// its own so that the test can kill the keeper and its services.
    fn keep(&mut self, i: usize) {
        use std::os::unix::process::CommandExt;
        let pgdata = self.pgdata(i).display().to_string();
        let child = self
            .autoctl(&["run", "--pgdata", &pgdata])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        self.keepers[i] = Some(child);
    }

    /// The formation's nodes' reported states, by port.
    fn states(&self) -> Vec<(u16, String)> {
        let mon = self.pgdata(0).display().to_string();
        let o = self
            .autoctl(&["show", "state", "--pgdata", &mon, "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|n| {
                        (
                            n["nodeport"].as_u64().unwrap_or(0) as u16,
                            n["current_group_state"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until each port's node is in one of its wanted states
    /// (`a|b`).
    fn wait_states(&self, want: &[(u16, &str)], within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let now = self.states();
            if want.iter().all(|(p, s)| {
                now.iter()
                    .any(|(q, t)| q == p && s.split('|').any(|w| w == t))
            }) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "formation states {now:?}, wanted {want:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn start() -> AutoFailover {
        let dir = TempDir::new("auto-failover");
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(chown.success());
        let mut f = AutoFailover {
            dir,
            monitor_port: free_port().unwrap(),
            ports: [free_port().unwrap(), free_port().unwrap()],
            keepers: vec![None, None, None],
        };
        let pg_ctl = find_bindir().unwrap().join("pg_ctl").display().to_string();
        let mon = f.pgdata(0).display().to_string();
        let mport = f.monitor_port.to_string();
        f.run_ok(&[
            "create",
            "monitor",
            "--pgdata",
            &mon,
            "--pgport",
            &mport,
            "--hostname",
            "localhost",
            "--auth",
            "trust",
            "--no-ssl",
            "--pgctl",
            &pg_ctl,
        ]);
        f.keep(0);
        let monitor =
            format!("postgres://autoctl_node@localhost:{mport}/pg_auto_failover?sslmode=disable");
        for i in [1, 2] {
            let pgdata = f.pgdata(i).display().to_string();
            let port = f.ports[i - 1].to_string();
            let name = ["", "a", "b"][i];
            f.run_ok(&[
                "create",
                "postgres",
                "--pgdata",
                &pgdata,
                "--pgport",
                &port,
                "--hostname",
                "localhost",
                "--name",
                name,
                "--dbname",
                "tabos",
                "--auth",
                "trust",
                "--no-ssl",
                "--monitor",
                &monitor,
                "--pgctl",
                &pg_ctl,
            ]);
            f.keep(i);
            let want: Vec<(u16, &str)> = if i == 1 {
                vec![(f.ports[0], "single")]
            } else {
                vec![(f.ports[0], "primary"), (f.ports[1], "secondary")]
            };
            f.wait_states(&want, Duration::from_secs(120));
        }
        f
    }

    /// The formation's URL for the tabos database: every data node, the
    /// one that takes writes chosen by the client.
    fn url(&self) -> String {
        let mon = self.pgdata(0).display().to_string();
        let uri = self.run_ok(&["show", "uri", "--pgdata", &mon, "--formation", "default"]);
        let url = uri
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("postgres://"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no formation URI in {uri}"));
        assert!(
            url.contains(',') && url.contains("target_session_attrs=read-write"),
            "{url}"
        );
        // As the postgres user, which the formation trusts.
        url.replacen("postgres://", "postgres://postgres@", 1)
    }

    /// SIGKILL of the primary's keeper (its whole process group) and of its
    /// postmaster, as a crashed machine would leave them.
    fn kill_primary(&mut self) {
        if let Some(mut k) = self.keepers[1].take() {
            kill9(&format!("-{}", k.id()));
            let _ = k.wait();
        }
        if let Ok(pid) = std::fs::read_to_string(self.pgdata(1).join("postmaster.pid")) {
            if let Some(pid) = pid.lines().next() {
                kill9(pid.trim());
            }
        }
    }
}

impl Drop for AutoFailover {
    fn drop(&mut self) {
        for k in self.keepers.iter_mut().flatten() {
            // SIGQUIT first: pg_autoctl and its PostgreSQL stop at once,
            // taking their children with them (a SIGKILL to the postmaster
            // would leave its workers running on).
            let group = format!("-{}", k.id());
            let _ = Command::new("kill")
                .args(["-QUIT", "--", &group])
                .stderr(Stdio::null())
                .status();
            let gone = Instant::now() + Duration::from_secs(5);
            while k.try_wait().ok().flatten().is_none() && Instant::now() < gone {
                std::thread::sleep(Duration::from_millis(20));
            }
            kill9(&group);
            let _ = k.wait();
        }
        for i in 0..3 {
            if let Ok(pid) = std::fs::read_to_string(self.pgdata(i).join("postmaster.pid")) {
                if let Some(pid) = pid.lines().next() {
                    stop_postmaster(pid.trim());
                }
            }
        }
    }
}

/// Stops a PostgreSQL postmaster and every process of it: SIGQUIT (its
/// immediate shutdown, which ends its children too — a SIGKILL would leave
/// them, e.g. pg_auto_failover's health-check worker, running on), then
/// SIGKILL if it has not ended within a few seconds.
fn stop_postmaster(pid: &str) {
    let _ = Command::new("kill")
        .args(["-QUIT", "--", pid])
        .stderr(Stdio::null())
        .status();
    let gone = Instant::now() + Duration::from_secs(5);
    while Path::new("/proc").join(pid).exists() && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(20));
    }
    kill9(pid);
}

/// The durable workflow of the failover test: steps that each append
/// their number to a file, with durable sleeps between them, so that it is
/// mid-way when the primary dies. Every step must be there exactly once.
const WORKFLOW_PY: &str = r#"
import sys, tabos
from tabos.workflows import Executor
addr, token, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = tabos.Client(addr, token)
ex = Executor(c, app_version="v1", serializer="raw")
@ex.workflow("ha")
def ha(ctx, _input):
    for i in range(steps):
        def record(s, i=i):
            with open(out, "a") as f:
                f.write(f"{i}\n")
            return b""
        ctx.step(f"s{i}", record)
        ctx.sleep(1.0)
    return b"done"
ex.start()
wid = ex.run("ha", b"", workflow_id="ha-1")
w = ex.result(wid, timeout=600)
print(w.status, flush=True)
print(w.error, file=sys.stderr, flush=True)
"#;

/// pg_auto_failover, as an operator runs it (item 6 of issue 35): its
/// monitor sees the primary's postmaster and keeper killed during a
/// MapReduce job, a send/recv storm, a durable workflow and a running proc,
/// and promotes the standby by itself; two nodes on the formation's
/// multi-host URL carry on. Nothing acknowledged is lost or doubled, no
/// proc fails, the job's answer is right, and no node is declared lost.
#[test]
fn pg_auto_failover_promotes_and_the_cluster_carries_on() {
    assert!(
        tabos_store::testing::is_root() && find_bindir().is_some(),
        "this test runs as root with PostgreSQL's server binaries (bash .ci/run installs them)"
    );
    assert!(
        Command::new("pg_autoctl")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "pg_autoctl is missing: apt-get install postgresql-15-auto-failover pg-auto-failover-cli \
         (bash .ci/run does)"
    );
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: bash .ci/run makes it",
        python.display()
    );
    let mut af = AutoFailover::start();
    let url = af.url();
    let dir = TempDir::new("ha-nodes");
    // The default grace (60 s): a failover is an outage every node sees.
    let grace = "60000";
    let start = |id: &str| {
        Up::start_with_grace(
            &[],
            &[
                "--db",
                &url,
                "--node-id",
                id,
                "--data",
                dir.path().join(id).to_str().unwrap(),
            ],
            dir.path(),
            grace,
        )
    };
    let (a, b) = (start("a"), start("b"));
    ok(&a.tabos(&["mailbox", "create", "inbox"]));

    // A proc running through the failover, not restartable.
    ok(&a.tabos(&["spawn", "--pid", "sleeper", "--", "sleep", "40"]));
    // A task graph running through it: 300 tasks of ~30 ms, each counted
    // in the realm's key-value table (exactly once, whatever the outage).
    for (name, js) in [
        (
            "slow",
            "function main(a) { const t = Date.now(); while (Date.now() - t < 30) {} \
             tabos.put('runs', String(Number(tabos.get('runs') || '0') + 1)); return '1'; }",
        ),
        (
            "runs",
            "function main(a) { return tabos.get('runs') || '0'; }",
        ),
        (
            "total",
            "function main(a) { return String(JSON.parse(a).reduce((x, y) => x + y, 0)); }",
        ),
    ] {
        let f = dir.path().join(format!("{name}.js"));
        std::fs::write(&f, js).unwrap();
        ok(&a.tabos(&["procedure", "install", name, f.to_str().unwrap()]));
    }
    let mut tasks: Vec<serde_json::Value> = (0..300)
        .map(|i| serde_json::json!({"id": format!("s{i}"), "procedure": "slow", "args": [i]}))
        .collect();
    let all: Vec<_> = (0..300)
        .map(|i| serde_json::json!({"$task": format!("s{i}")}))
        .collect();
    tasks.push(serde_json::json!({"id": "sum", "procedure": "total", "args": all}));
    let graph_file = dir.path().join("graph.json");
    std::fs::write(&graph_file, serde_json::json!({"tasks": tasks}).to_string()).unwrap();
    ok(&b.tabos(&[
        "graph",
        "submit",
        graph_file.to_str().unwrap(),
        "--id",
        "through",
    ]));
    // MapReduce input: known word counts.
    let input = dir.path().join("input");
    std::fs::create_dir_all(&input).unwrap();
    for f in 0..24 {
        let text = (0..2_000)
            .map(|i| format!("w{} ", (i * 7 + f) % 50))
            .collect::<String>();
        std::fs::write(input.join(format!("f{f}.txt")), text).unwrap();
    }
    let mut expected = std::collections::BTreeMap::<String, u64>::new();
    for f in 0..24 {
        for i in 0..2_000 {
            *expected
                .entry(format!("w{}", (i * 7 + f) % 50))
                .or_default() += 1;
        }
    }
    std::fs::set_permissions(&input, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The job's procs read the input where it is: the operator allows it.
    ok(&a.tabos(&[
        "realm",
        "set",
        "default",
        "--allow-host-path",
        input.to_str().unwrap(),
    ]));
    let job = {
        let (addr, token, input) = (b.addr.clone(), b.token.clone(), input.clone());
        std::thread::spawn(move || {
            Command::new(TABOS)
                .env("TABOS_ADDR", addr)
                .env("TABOS_TOKEN", token)
                .args([
                    "mr",
                    "wordcount",
                    "--json",
                    "--top",
                    "50",
                    "--task-mib",
                    "1",
                ])
                .arg("--input")
                .arg(input)
                .output()
                .unwrap()
        })
    };
    let wf_out = dir.path().join("workflow.steps");
    let workflow = {
        let (addr, token, out) = (a.addr.clone(), a.token.clone(), wf_out.clone());
        let script = dir.path().join("workflow.py");
        std::fs::write(&script, WORKFLOW_PY).unwrap();
        let python = python.clone();
        std::thread::spawn(move || {
            Command::new(python)
                .arg(script)
                .args([&addr, &token, out.to_str().unwrap(), "30"])
                .output()
                .unwrap()
        })
    };
    // The storm: a sender through a, each message with its key and sent
    // again while unanswered; a receiver through b.
    const MESSAGES: usize = 150;
    let sender = {
        let (addr, token) = (a.addr.clone(), a.token.clone());
        std::thread::spawn(move || {
            let mut refused = 0;
            for i in 0..MESSAGES {
                loop {
                    let o = Command::new(TABOS)
                        .env("TABOS_ADDR", &addr)
                        .env("TABOS_TOKEN", &token)
                        .args(["send", "inbox", &format!("m{i}"), "--id", &format!("id{i}")])
                        .output()
                        .unwrap();
                    if o.status.success() {
                        break;
                    }
                    refused += 1;
                    assert!(refused < 2_000, "never acknowledged");
                    std::thread::sleep(Duration::from_millis(100));
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            refused
        })
    };
    let receiver = {
        let (addr, token) = (b.addr.clone(), b.token.clone());
        std::thread::spawn(move || {
            let mut got = std::collections::BTreeMap::<String, usize>::new();
            let t = Instant::now();
            while got.values().sum::<usize>() < MESSAGES && t.elapsed() < Duration::from_secs(300) {
                let o = Command::new(TABOS)
                    .env("TABOS_ADDR", &addr)
                    .env("TABOS_TOKEN", &token)
                    .args([
                        "recv",
                        "inbox",
                        "--max",
                        "64",
                        "--timeout-ms",
                        "2000",
                        "--json",
                    ])
                    .output()
                    .unwrap();
                for l in String::from_utf8_lossy(&o.stdout).lines() {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    *got.entry(v["payload"].as_str().unwrap().to_string())
                        .or_default() += 1;
                }
                if !o.status.success() {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            got
        })
    };

    std::thread::sleep(Duration::from_secs(5));
    af.kill_primary();
    let killed = Instant::now();
    // The monitor promotes the standby on its own.
    // (wait_primary: a primary whose standby is gone.)
    af.wait_states(
        &[(af.ports[1], "primary|wait_primary")],
        Duration::from_secs(180),
    );
    eprintln!(
        "pg_auto_failover promoted the standby {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );

    let refused = sender.join().unwrap();
    let got = receiver.join().unwrap();
    eprintln!("sends answered UNAVAILABLE and sent again: {refused}");
    assert_eq!(got.len(), MESSAGES, "every acknowledged message arrived");
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");

    let o = job.join().unwrap();
    ok(&o);
    let counted: std::collections::BTreeMap<String, u64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|v| v["top"].as_array().cloned().unwrap_or_default())
        .map(|w| {
            (
                w["key"].as_str().unwrap_or_default().to_string(),
                w["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(counted, expected, "the job's answer");

    let o = workflow.join().unwrap();
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "success",
        "the workflow: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let steps = std::fs::read_to_string(&wf_out).unwrap();
    let steps: Vec<&str> = steps.lines().collect();
    let want: Vec<String> = (0..30).map(|i| i.to_string()).collect();
    assert_eq!(steps, want, "each step once, in order");

    let o = b.tabos(&["graph", "wait", "through", "--timeout", "300"]);
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "300",
        "the graph's answer"
    );
    let o = a.tabos(&["procedure", "call", "runs"]);
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "300",
        "each graph task's effect once, through the failover"
    );

    ok(&a.tabos(&["wait", "sleeper"]));
    let row = a.row("SELECT state, exit_status FROM proc WHERE pid = 'sleeper'");
    assert_eq!(
        (row["state"].as_str(), row["exit_status"].as_i64()),
        (Some("exited"), Some(0))
    );
    let failed = a.row("SELECT count(*) AS n FROM proc WHERE state = 'failed'");
    assert_eq!(failed["n"], 0, "no proc failed");
    let o = a.tabos(&["nodes", "--json"]);
    ok(&o);
    let listed: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    for n in listed.as_array().expect("a list is an array") {
        assert!(
            n["lost_us"].as_i64().unwrap_or(0) == 0,
            "no node declared lost: {n}"
        );
    }
    drop((a, b));
}

/// Code that travels with the request (issue 41, item 1): a shell script
/// and a statically linked binary that exist on no node — in a directory
/// of the test's, which no jail shows — run on each of two nodes from the
/// realm's files; a second run does not copy them again (nor upload
/// them); a copy changed on a node's disk is found and copied again; and
/// another realm can neither run nor read them, nor pass off other files
/// under their hash.
#[test]
fn uploaded_code_runs_on_every_node_and_only_for_its_realm() {
    if !tabos_store::testing::is_root() || find_bindir().is_none() {
        eprintln!("skipped: needs root (jails) and PostgreSQL's server binaries");
        return;
    }
    let pg = TempCluster::start(&ClusterOptions::default()).unwrap();
    let url = pg.create_database("code").unwrap();
    let dir = TempDir::new("cluster-code");
    let app = dir.path().join("app");
    std::fs::create_dir_all(app.join("bin")).unwrap();
    std::fs::write(
        app.join("run.sh"),
        "#!/bin/sh\necho \"script in $(pwd) on $TABOS_REALM\"\ncat data/words.txt\nexec ./bin/hello\n",
    )
    .unwrap();
    std::fs::create_dir_all(app.join("data")).unwrap();
    std::fs::write(app.join("data/words.txt"), "alpha beta\n").unwrap();
    // A static binary: it needs nothing of the node's but the kernel.
    let c = dir.path().join("hello.c");
    std::fs::write(
        &c,
        "#include <stdio.h>\nint main(void){puts(\"static hello\");return 7;}\n",
    )
    .unwrap();
    let built = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(app.join("bin/hello"))
        .arg(&c)
        .status()
        .unwrap();
    assert!(built.success(), "cc -static (gcc and libc6-dev)");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(app.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(app.join("cat.wat"), CAT_WAT).unwrap();
    let start = |id: &str| node_on(&url, &dir, id);
    let (a, b) = (start("a"), start("b"));
    ok(&a.tabos(&["realm", "create", "r", "--scheduler", "locality"]));
    ok(&a.tabos(&["realm", "create", "r2"]));
    until(
        "both nodes serve r",
        || a.row("SELECT count(*) AS n FROM worker WHERE realm = 'r' AND state = 'up'")["n"] == 2,
        || {},
    );
    let app_s = app.to_str().unwrap();
    // `tabos run` from a node's client, placed on each node in turn.
    let run_on = |n: &Up, node: &str| {
        let o = n.tabos(&[
            "run",
            "--realm",
            "r",
            "--home-node",
            node,
            app_s,
            "--",
            "./run.sh",
        ]);
        assert_eq!(
            o.status.code(),
            Some(7),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert_eq!(
            out,
            "script in /code on r\nalpha beta\nstatic hello\n",
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run_on(&b, "a");
    run_on(&a, "b");
    // A wasm module of the code, given the code as its preopened `.`.
    let o = b.tabos(&[
        "run",
        "--realm",
        "r",
        "--home-node",
        "a",
        "--kind",
        "wasm",
        app_s,
        "--",
        "./cat.wat",
    ]);
    assert_eq!(
        (o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()),
        (Some(0), "alpha beta\n"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let listed = |n: &Up, realm: &str| {
        let o = n.tabos(&["fs", "ls", "--realm", realm, "/code"]);
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let codes = listed(&a, "r");
    assert_eq!(codes.lines().count(), 1, "one upload: {codes}");
    let hash = codes.trim().rsplit('/').next().unwrap().to_string();
    assert_eq!(hash.len(), 64, "{codes}");
    let cached = |node: &str| dir.path().join(node).join("logs/.code/r").join(&hash);
    // A copy is made in a fresh directory: its identity and when its
    // last entry was made (an inode number alone may be reused at once).
    let ino = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        (m.ino(), m.mtime(), m.mtime_nsec())
    };
    let (ino_a, ino_b) = (ino(&cached("a")), ino(&cached("b")));
    // Again on each: neither uploaded nor copied again.
    run_on(&a, "a");
    run_on(&a, "b");
    assert_eq!(listed(&a, "r"), codes);
    assert_eq!((ino(&cached("a")), ino(&cached("b"))), (ino_a, ino_b));
    // A copy changed on a's disk is not run: copied again.
    let script = cached("a").join("run.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&script, "#!/bin/sh\necho tampered\n").unwrap();
    run_on(&b, "a");
    assert_ne!(ino(&cached("a")), ino_a, "copied again");
    assert_eq!(
        std::fs::read_to_string(cached("a").join("run.sh")).unwrap(),
        std::fs::read_to_string(app.join("run.sh")).unwrap()
    );
    // Another user of the realm uploads beside the first (/code is the
    // realm's, sticky, as /tmp is) and runs it as themself.
    let o = a.tabos(&[
        "-o", "json", "token", "create", "--realm", "r", "--user", "bob", "--role", "member",
    ]);
    ok(&o);
    let bob: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bobs = dir.path().join("bobs.sh");
    std::fs::write(&bobs, "#!/bin/sh\necho bob was here\n").unwrap();
    std::fs::set_permissions(&bobs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new(TABOS)
        .env("TABOS_ADDR", &a.addr)
        .env("TABOS_TOKEN", bob["token"].as_str().unwrap())
        .args(["run", bobs.to_str().unwrap(), "--", "./bobs.sh"])
        .output()
        .unwrap();
    ok(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bob was here\n");
    // A program of the realm's files, named by its path, on the other node.
    let tool = dir.path().join("tool.sh");
    std::fs::write(&tool, "#!/bin/sh\necho \"tool $1 in $(pwd)\"\n").unwrap();
    ok(&a.tabos(&["fs", "mkdir", "--realm", "r", "/bin"]));
    ok(&a.tabos(&[
        "fs",
        "put",
        "--realm",
        "r",
        "--mode",
        "755",
        tool.to_str().unwrap(),
        "/bin/tool",
    ]));
    ok(&a.tabos(&[
        "spawn",
        "--realm",
        "r",
        "--home-node",
        "b",
        "--pid",
        "tool1",
        "--wait",
        "--",
        "fs:/bin/tool",
        "x",
    ]));
    let o = a.tabos(&["logs", "--realm", "r", "tool1"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "tool x in /tabos\n");
    // Another realm: not there to run, nor to read.
    let o = a.tabos(&[
        "spawn", "--realm", "r2", "--code", &hash, "--wait", "--", "./run.sh",
    ]);
    assert_eq!(
        o.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no code"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let path = format!("/code/{hash}/run.sh");
    assert!(!a
        .tabos(&["fs", "cat", "--realm", "r2", &path])
        .status
        .success());
    // Nor can it pass off files of its own under that hash: the node that
    // claims the proc copies them, finds they do not hash to it, and runs
    // nothing.
    for p in ["/code".to_string(), format!("/code/{hash}")] {
        ok(&a.tabos(&["fs", "mkdir", "--realm", "r2", &p]));
    }
    let fake = dir.path().join("fake.sh");
    std::fs::write(&fake, "#!/bin/sh\necho not the uploaded code\n").unwrap();
    ok(&a.tabos(&[
        "fs",
        "put",
        "--realm",
        "r2",
        "--mode",
        "755",
        fake.to_str().unwrap(),
        &path,
    ]));
    let o = a.tabos(&[
        "spawn", "--realm", "r2", "--code", &hash, "--wait", "--", "./run.sh",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("does not hold what its hash says"), "{err}");
    assert!(!dir.path().join("a/logs/.code/r2").join(&hash).exists());
    assert!(!dir.path().join("b/logs/.code/r2").join(&hash).exists());
    drop(pg);
}

/// A WASI command that prints `data/words.txt` of its preopened directory.
const CAT_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "data/words.txt")
  (func (export "_start")
    (local $e i32)
    (local.set $e (call $open (i32.const 3) (i32.const 1) (i32.const 0) (i32.const 14) (i32.const 0)
                              (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 100)))
    (if (local.get $e) (then (call $exit (local.get $e))))
    (i32.store (i32.const 200) (i32.const 1024))
    (i32.store (i32.const 204) (i32.const 256))
    (drop (call $read (i32.load (i32.const 100)) (i32.const 200) (i32.const 1) (i32.const 300)))
    (i32.store (i32.const 204) (i32.load (i32.const 300)))
    (drop (call $write (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 304)))
    (call $exit (i32.const 0))))"#;

/// The workflow example (`examples/workflow-wasm`) built for
/// wasm32-wasip1 into `dir` with its build script (`.ci/run` adds the
/// target); the module's path.
fn workflow_wasm(dir: &Path) -> std::path::PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflow-wasm");
    let o = Command::new("sh")
        .arg(example.join("build.sh"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "building the workflow example failed (rustup target add wasm32-wasip1?): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    dir.join("workflow.wasm")
}

/// A workflow written as a wasm module (issue 41, item 4), run by a proc
/// of its own on node a, which is killed with SIGKILL while the workflow
/// waits halfway: its proc runs again on b, replays the recorded steps, and
/// the workflow ends with every step run once — each procedure step's
/// effect (a counter in the realm's key-value table) made exactly once,
/// each step recorded once.
#[test]
fn a_wasm_workflow_survives_its_nodes_kill_and_runs_each_step_once() {
    if !tabos_store::testing::is_root() || find_bindir().is_none() {
        eprintln!("skipped: needs root (jails) and PostgreSQL's server binaries");
        return;
    }
    let pg = TempCluster::start(&ClusterOptions::default()).unwrap();
    let url = pg.create_database("wfkill").unwrap();
    let dir = TempDir::new("cluster-wf");
    let module = workflow_wasm(dir.path());
    let start = |id: &str| node_on(&url, &dir, id);
    let (mut a, b) = (start("a"), start("b"));
    ok(&b.tabos(&["realm", "create", "r", "--scheduler", "locality"]));
    until(
        "both nodes serve r",
        || b.row("SELECT count(*) AS n FROM worker WHERE realm = 'r' AND state = 'up'")["n"] == 2,
        || {},
    );
    let counter = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/counter.js");
    ok(&b.tabos(&[
        "procedure",
        "install",
        "--realm",
        "r",
        "counter",
        counter.to_str().unwrap(),
    ]));
    let o = b.tabos(&[
        "workflow",
        "run",
        "--realm",
        "r",
        module.to_str().unwrap(),
        "--function",
        "tally",
        "--input",
        "6 /gate",
        "--id",
        "t",
        "--home-node",
        "a",
        "--detach",
        "--json",
    ]);
    ok(&o);
    let started: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pid = started["pid"].as_str().unwrap().to_string();
    let steps = |b: &Up| {
        b.row(
            "SELECT count(*) AS n, coalesce(max(attempts), 0) AS most FROM workflow_step \
             WHERE realm = 'r' AND workflow_id = 't' AND status = 'success'",
        )
    };
    // Three counters and the gate recorded, on a; then a is killed.
    until(
        "the workflow waits at its gate on a",
        || steps(&b)["n"] == 4 && whereabouts(&b, &pid) == ("running".into(), "a.w0".into()),
        || {},
    );
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    until(
        "its proc runs again on b",
        || whereabouts(&b, &pid) == ("running".into(), "b.w0".into()),
        || {},
    );
    ok(&b.tabos(&["put", "--realm", "r", "/gate", "open"]));
    let o = b.tabos(&["workflow", "wait", "--realm", "r", "t", "--json"]);
    ok(&o);
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(w["output"], "tallied 6", "{w}");
    assert_eq!(w["executor"], format!("proc:{pid}"), "{w}");
    // Every step once: seven recorded (six counters, the gate), none tried
    // twice; every counter at 1.
    let s = steps(&b);
    assert_eq!(
        (s["n"].as_i64(), s["most"].as_i64()),
        (Some(7), Some(1)),
        "{s}"
    );
    let counts = b.tabos(&[
        "sql",
        "--json",
        "SELECT key, CAST(value AS TEXT) AS v FROM kv WHERE realm = 'r' ORDER BY key",
    ]);
    ok(&counts);
    let v: serde_json::Value = serde_json::from_slice(&counts.stdout).unwrap();
    let got: Vec<(String, String)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let v = r["v"].as_str().unwrap_or_default();
            // PostgreSQL casts a bytea to its hex form.
            let v = match v.strip_prefix("\\x") {
                Some(hex) => (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap() as char)
                    .collect(),
                None => v.to_string(),
            };
            (r["key"].as_str().unwrap_or_default().to_string(), v)
        })
        .collect();
    let want: Vec<(String, String)> = (1..=6)
        .map(|i| (format!("count/step-{i}"), "1".to_string()))
        .collect();
    assert_eq!(got, want);
    let starts = b.row(&format!(
        "SELECT count(*) AS n FROM proc_event WHERE realm = 'r' AND pid = '{pid}' AND event = 'start'"
    ));
    assert_eq!(starts["n"], 2, "its proc ran twice, once on each node");
    drop((b, pg));
}

/// `tabos mount DIR` aimed at node `n`, unmounted (lazily) on drop.
struct Mount {
    child: Child,
    dir: std::path::PathBuf,
}

impl Mount {
    fn on(n: &Up, dir: &Path) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let mut child = Command::new(TABOS)
            .env("TABOS_ADDR", &n.addr)
            .env("TABOS_TOKEN", &n.token)
            .arg("mount")
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("files on"), "{line:?}");
        Mount {
            child,
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Issue 43, item 3: a named pipe joins Linux tools on two nodes — `cat`
/// in node b's mount reads what `printf` writes in node a's, and ends when
/// the writer closes. The bytes go through the database, and the reader
/// on b is woken by a's write over the change feed (PostgreSQL NOTIFY).
#[test]
fn a_named_pipe_joins_mounts_on_two_nodes() {
    if !tabos_store::testing::is_root() || find_bindir().is_none() {
        eprintln!("skipped: needs root (FUSE) and PostgreSQL's server binaries");
        return;
    }
    let pg = TempCluster::start(&ClusterOptions::default()).unwrap();
    let url = pg.create_database("fifo").unwrap();
    let dir = TempDir::new("cluster-fifo");
    let a = node_on(&url, &dir, "a");
    let b = node_on(&url, &dir, "b");
    let _ma = Mount::on(&a, &dir.path().join("ma"));
    let _mb = Mount::on(&b, &dir.path().join("mb"));
    let sh = |script: &str| {
        let o = Command::new("bash")
            .args(["-c", script])
            .current_dir(dir.path())
            .output()
            .unwrap();
        ok(&o);
    };
    let reader = |cmd: &str| {
        Command::new("bash")
            .args(["-c", &format!("timeout 60 {cmd}")])
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let read = |child: Child| {
        let o = child.wait_with_output().unwrap();
        ok(&o);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // Only once the pipe has counted the reader's open is the writer
    // started, so the reader sees a live stream across nodes (one whose
    // end opens after a writer has come and gone reads its bytes, then
    // EOF).
    let readers_opened = |n: i64| {
        until(
            "the reader's end is open",
            || {
                a.row(
                    "SELECT f.reader_opens AS n FROM fs_fifo f JOIN directory d \
                     ON d.realm = f.realm AND d.f_id = f.f_id WHERE d.d_name = '/p'",
                )["n"]
                    == n
            },
            || {},
        )
    };
    sh("mkfifo ma/p");
    for (n, (from, to)) in [(1, ("ma", "mb")), (2, ("mb", "ma"))] {
        let cat = reader(&format!("cat {to}/p"));
        readers_opened(n);
        sh(&format!("printf 'across from {from}\\n' > {from}/p"));
        assert_eq!(read(cat), format!("across from {from}\n"));
    }
}

/// Issue 43, item 2: "which files went over the network". A proc on node
/// a reads /in and sends it from its own address; a proc on node b takes
/// it from its mailbox. The README's last provenance query, run as
/// written through node b, names /in, both nodes and the taker.
#[test]
fn provenance_says_which_files_went_over_the_network() {
    if !tabos_store::testing::is_root() || find_bindir().is_none() {
        eprintln!("skipped: needs root (jails) and PostgreSQL's server binaries");
        return;
    }
    let pg = TempCluster::start(&ClusterOptions::default()).unwrap();
    let url = pg.create_database("network").unwrap();
    let dir = TempDir::new("cluster-network");
    let a = node_on(&url, &dir, "a");
    let b = node_on(&url, &dir, "b");
    ok(&b.tabos(&["realm", "create", "r", "--scheduler", "locality"]));
    until(
        "both nodes serve r",
        || b.row("SELECT count(*) AS n FROM worker WHERE realm = 'r' AND state = 'up'")["n"] == 2,
        || {},
    );
    let put = Command::new(TABOS)
        .env("TABOS_ADDR", &a.addr)
        .env("TABOS_TOKEN", &a.token)
        .args(["fs", "--realm", "r", "put", "-", "/in"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut put.stdin.as_ref().unwrap(), b"the input").unwrap();
    ok(&put.wait_with_output().unwrap());
    // The taker waits on b for what the reader on a sends it.
    let taker = format!("exec {TABOS} recv proc/taker --timeout-ms 60000");
    ok(&b.tabos(&[
        "spawn",
        "--realm",
        "r",
        "--pid",
        "taker",
        "--home-node",
        "b",
        "--",
        "sh",
        "-c",
        &taker,
    ]));
    let reader = format!("{TABOS} fs cat /in | {TABOS} send proc/taker --from proc/reader");
    ok(&b.tabos(&[
        "spawn",
        "--realm",
        "r",
        "--pid",
        "reader",
        "--home-node",
        "a",
        "--wait",
        "--",
        "sh",
        "-c",
        &reader,
    ]));
    ok(&b.tabos(&["wait", "--realm", "r", "taker"]));
    let readme = include_str!("../../../README.md");
    let at = readme.find("-- which files went over the network").unwrap();
    let from = readme[..at].rfind('\n').unwrap() + 1;
    let sql: String = readme[from..]
        .lines()
        .take_while(|l| l.starts_with("        "))
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    let o = b.tabos(&["sql", "--json", "--", &sql]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    let row = &rows[0];
    assert_eq!(
        (
            &row["path"],
            &row["read_on"],
            &row["taken_on"],
            &row["taken_by"]
        ),
        (
            &serde_json::json!("/in"),
            &serde_json::json!("a"),
            &serde_json::json!("b"),
            &serde_json::json!("taker")
        ),
        "{v}"
    );
}

/// Issue 43, item 1: a task graph on two `tabos up` nodes over one
/// PostgreSQL. Both nodes' schedulers take its tasks (a claim takes what
/// one batch runs, so slow tasks spread); node a is SIGKILLed mid-graph;
/// b finishes it once a is declared lost, and every task's effect is
/// counted once.
#[test]
fn a_task_graph_spreads_over_two_nodes_and_survives_ones_kill() {
    if find_bindir().is_none() {
        eprintln!("skipped: needs PostgreSQL's server binaries");
        return;
    }
    let pg = TempCluster::start(&ClusterOptions::default()).unwrap();
    let url = pg.create_database("graphs").unwrap();
    let dir = TempDir::new("cluster-graph");
    let mut a = node_on(&url, &dir, "a");
    let b = node_on(&url, &dir, "b");
    let code = |name: &str, js: &str| {
        let f = dir.path().join(format!("{name}.js"));
        std::fs::write(&f, js).unwrap();
        ok(&a.tabos(&["procedure", "install", name, f.to_str().unwrap()]));
    };
    // ~30 ms of work, counted in the realm's key-value table (a second
    // run of any task would show).
    code(
        "slow",
        "function main(a) { const t = Date.now(); while (Date.now() - t < 30) {} \
         tabos.put('runs', String(Number(tabos.get('runs') || '0') + 1)); return '1'; }",
    );
    code(
        "runs",
        "function main(a) { return tabos.get('runs') || '0'; }",
    );
    code(
        "total",
        "function main(a) { return String(JSON.parse(a).reduce((x, y) => x + y, 0)); }",
    );
    let mut tasks: Vec<serde_json::Value> = (0..120)
        .map(|i| serde_json::json!({"id": format!("s{i}"), "procedure": "slow", "args": [i]}))
        .collect();
    let all: Vec<_> = (0..120)
        .map(|i| serde_json::json!({"$task": format!("s{i}")}))
        .collect();
    tasks.push(serde_json::json!({"id": "sum", "procedure": "total", "args": all}));
    let file = dir.path().join("graph.json");
    std::fs::write(&file, serde_json::json!({"tasks": tasks}).to_string()).unwrap();
    ok(&b.tabos(&["graph", "submit", file.to_str().unwrap(), "--id", "spread"]));
    // Both nodes run its tasks.
    let ran_on = |n: &Up, node: &str| {
        n.row(&format!(
            "SELECT count(*) AS n FROM graph_task WHERE graph_id = 'spread' \
             AND status = 'success' AND node_id = '{node}'"
        ))["n"]
            .as_i64()
            .unwrap_or(0)
    };
    until(
        "both nodes have run tasks",
        || ran_on(&b, "a") > 0 && ran_on(&b, "b") > 0,
        || {},
    );
    a.child.kill().unwrap(); // SIGKILL, mid-graph
    a.child.wait().unwrap();
    let o = b.tabos(&["graph", "wait", "spread", "--timeout", "120"]);
    ok(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "120");
    let o = b.tabos(&["procedure", "call", "runs"]);
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "120",
        "each task's effect once"
    );
    let ran =
        b.row("SELECT count(*) AS n FROM graph_task WHERE graph_id = 'spread' AND attempts > 1");
    eprintln!(
        "tasks run on a {}, on b {}, claimed more than once {}",
        ran_on(&b, "a"),
        ran_on(&b, "b"),
        ran["n"]
    );
    drop(pg);
}
