//! A throwaway PostgreSQL cluster, for tests and benchmarks.
//!
//! [`TempCluster::start`] runs the system's `initdb` and `pg_ctl` (found via
//! `pg_config --bindir`, then `/usr/lib/postgresql/*/bin`, then `PATH`) on a
//! fresh directory under the temp dir, listening on 127.0.0.1 on a free port
//! with trust authentication. As root it runs the server as the `postgres`
//! user, since PostgreSQL refuses to run as root.
//!
//! Clean-up does not depend on anyone calling a destructor: a small watchdog
//! shell process holds the read end of a pipe whose write end only this
//! process holds. When this process exits — normally, by panic or by SIGKILL —
//! the pipe closes, the watchdog's `read` returns, and it stops the server and
//! deletes the directory. No polling is involved.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::error::{Error, Result};

/// The Debian package that provides `initdb` and `pg_ctl`.
pub const PACKAGE_HINT: &str =
    "install the PostgreSQL server binaries (Debian/Ubuntu: apt-get install postgresql)";

/// A running throwaway cluster.
pub struct TempCluster {
    dir: PathBuf,
    port: u16,
    bindir: PathBuf,
    run_as: Option<(u32, u32)>,
    watchdog: Option<Child>,
}

impl std::fmt::Debug for TempCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempCluster")
            .field("dir", &self.dir)
            .field("port", &self.port)
            .finish()
    }
}

/// Options for [`TempCluster::start`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// `fsync=off` makes tests fast; benchmarks keep the server default (on).
    pub fsync: bool,
    pub max_connections: u32,
    /// Addresses to listen on besides 127.0.0.1, each with the network
    /// (`ADDR/24`) it trusts: a test's own network namespaces reach it there.
    pub also_listen: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            fsync: false,
            max_connections: 200,
            also_listen: Vec::new(),
        }
    }
}

/// Where the PostgreSQL server binaries are, or `None`.
pub fn find_bindir() -> Option<PathBuf> {
    let has_initdb = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_initdb(&d) {
            return Some(d);
        }
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| has_initdb(d))
            .collect();
        dirs.sort();
        if let Some(d) = dirs.pop() {
            return Some(d);
        }
    }
    std::env::var_os("PATH").and_then(|path| std::env::split_paths(&path).find(|d| has_initdb(d)))
}

/// uid and gid of the `postgres` user, from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == "postgres")
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
            .flatten()
    })
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// A free TCP port on loopback (the kernel's pick, released at once): for
/// a server a test starts on a port it must know in advance.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Io(format!("cannot find a free port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::Io(e.to_string()))
}

impl TempCluster {
    /// Creates and starts a cluster. Fails with a message naming the package
    /// to install when the server binaries are missing.
    pub fn start(options: &ClusterOptions) -> Result<TempCluster> {
        let mut cluster = TempCluster::empty()?;
        cluster.init(options, "")?;
        cluster.serve(options)?;
        Ok(cluster)
    }

    /// A cluster directory and port, nothing in it yet.
    fn empty() -> Result<TempCluster> {
        let bindir = find_bindir().ok_or_else(|| {
            Error::Config(format!(
                "PostgreSQL server binaries (initdb, pg_ctl) not found: {PACKAGE_HINT}"
            ))
        })?;
        let run_as = if is_root() {
            Some(postgres_user().ok_or_else(|| {
                Error::Config(format!(
                    "running as root but there is no `postgres` user to run the server: {PACKAGE_HINT}"
                ))
            })?)
        } else {
            None
        };
        // Unique within the process too: two clusters made in the same
        // microsecond (a replicated pair, tests in parallel) once shared one.
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "tabos-pg-{}-{}-{n}",
            std::process::id(),
            crate::now_us()
        ));
        std::fs::create_dir(&dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::Io(e.to_string()))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| Error::Io(format!("chown {}: {e}", dir.display())))?;
        }
        Ok(TempCluster {
            dir,
            port: free_port()?,
            bindir,
            run_as,
            watchdog: None,
        })
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bindir.join(program));
        if let Some((uid, gid)) = self.run_as {
            c.uid(uid).gid(gid);
        }
        c.env("LC_ALL", "C").current_dir(&self.dir);
        c
    }

    fn run(&self, mut c: Command, what: &str) -> Result<()> {
        let out = c
            .output()
            .map_err(|e| Error::Io(format!("{what}: cannot run: {e}")))?;
        if !out.status.success() {
            return Err(Error::Io(format!(
                "{what} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// initdb, with `extra` server settings (`-c` options) for every start.
    fn init(&mut self, options: &ClusterOptions, extra: &str) -> Result<()> {
        let mut init = self.command("initdb");
        init.arg("-D").arg(self.data()).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        self.run(init, "initdb")?;
        if !options.also_listen.is_empty() {
            let hba = self.data().join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).unwrap_or_default();
            for a in &options.also_listen {
                text.push_str(&format!("host all all {a}/24 trust\n"));
            }
            std::fs::write(&hba, text).map_err(|e| Error::Io(format!("{}: {e}", hba.display())))?;
        }
        self.extra_settings(extra)
    }

    /// Appends `extra` (`name = value` lines) to the server's settings.
    fn extra_settings(&self, extra: &str) -> Result<()> {
        if extra.is_empty() {
            return Ok(());
        }
        let conf = self.data().join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap_or_default();
        text.push_str(extra);
        text.push('\n');
        std::fs::write(&conf, text).map_err(|e| Error::Io(format!("{}: {e}", conf.display())))
    }

    /// Starts the server on its data directory (pg_ctl start, waiting), and
    /// the watchdog that stops and removes it when this value is dropped.
    fn serve(&mut self, options: &ClusterOptions) -> Result<()> {
        let listen = std::iter::once("127.0.0.1".to_string())
            .chain(options.also_listen.iter().cloned())
            .collect::<Vec<_>>()
            .join(",");
        let server_opts = format!(
            "-c listen_addresses={listen} -p {} -k {} -c fsync={} -c max_connections={} \
             -c shared_buffers=128MB",
            self.port,
            self.dir.display(),
            if options.fsync { "on" } else { "off" },
            options.max_connections
        );
        let mut start = self.command("pg_ctl");
        start
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-t", "60", "-l"])
            .arg(self.dir.join("server.log"))
            .args(["-o", &server_opts, "start"]);
        self.run(start, "pg_ctl start")?;
        if self.watchdog.is_some() {
            return Ok(()); // started again: its watchdog is running
        }

        // The watchdog: stop and delete when our end of its stdin closes.
        let script = format!(
            "read _ignored; '{}' -D '{}' -m immediate stop >/dev/null 2>&1; rm -rf '{}'",
            self.bindir.join("pg_ctl").display(),
            self.data().display(),
            self.dir.display()
        );
        let mut wd = Command::new("/bin/sh");
        wd.args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = self.run_as {
            wd.uid(uid).gid(gid);
        }
        // Not in our process group, so a Ctrl-C to the tests does not kill the
        // watchdog before it has cleaned up.
        wd.process_group(0);
        self.watchdog = Some(
            wd.spawn()
                .map_err(|e| Error::Io(format!("cannot start watchdog: {e}")))?,
        );
        Ok(())
    }

    /// Restarts the server as a crash would (`pg_ctl restart -m
    /// immediate`: connections cut, no shutdown checkpoint, crash recovery
    /// at start), waiting until it accepts connections again.
    pub fn restart_immediately(&self) -> Result<()> {
        let mut restart = self.command("pg_ctl");
        restart
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "-t", "60", "-l"])
            .arg(self.dir.join("server.log"))
            .arg("restart");
        self.run(restart, "pg_ctl restart -m immediate")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connection URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a fresh database and returns its URL.
    pub fn create_database(&self, name: &str) -> Result<String> {
        let mut c = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .map_err(|e| Error::Io(format!("connect to temp cluster: {e}")))?;
        let sql = format!("CREATE DATABASE \"{}\"", name.replace('"', ""));
        c.batch_execute(&sql)
            .map_err(|e| crate::postgres::map_err(&e, &sql))?;
        Ok(self.url(name))
    }

    /// Server version string, for benchmark reports.
    pub fn version(&self) -> String {
        Command::new(self.bindir.join("postgres"))
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}

/// A primary and its synchronous streaming standby (issue 19, item 4): a
/// commit is acknowledged once the standby has it, so a failover loses no
/// acknowledged transaction. [`ReplicatedCluster::url`] names both servers
/// with `target_session_attrs=read-write`, so a client finds whichever is
/// the primary.
pub struct ReplicatedCluster {
    pub primary: TempCluster,
    pub standby: TempCluster,
    options: ClusterOptions,
}

impl ReplicatedCluster {
    /// Starts a primary, takes a base backup of it for the standby, and
    /// starts the standby streaming from it (synchronously).
    pub fn start(options: &ClusterOptions) -> Result<ReplicatedCluster> {
        let mut primary = TempCluster::empty()?;
        primary.init(
            options,
            "wal_level = replica\nsynchronous_standby_names = '*'\nwal_keep_size = '256MB'",
        )?;
        primary.serve(options)?;
        let mut standby = TempCluster::empty()?;
        let mut backup = standby.command("pg_basebackup");
        backup
            .arg("-D")
            .arg(standby.data())
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "--no-sync"]);
        standby.run(backup, "pg_basebackup")?;
        // The base backup carries the primary's settings; the standby's
        // own name is what synchronous_standby_names matches.
        standby.extra_settings("primary_slot_name = ''\ncluster_name = 'standby'")?;
        standby.serve(options)?;
        Ok(ReplicatedCluster {
            primary,
            standby,
            options: options.clone(),
        })
    }

    /// The URL of database `db` on whichever server is the primary.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// Creates a database (on the primary; it streams to the standby).
    pub fn create_database(&self, name: &str) -> Result<String> {
        self.primary.create_database(name)?;
        Ok(self.url(name))
    }

    /// Kills the primary's server at once (`pg_ctl stop -m immediate`: no
    /// shutdown checkpoint, connections cut, as in a crash).
    pub fn kill_primary(&self) -> Result<()> {
        let mut stop = self.primary.command("pg_ctl");
        stop.arg("-D")
            .arg(self.primary.data())
            .args(["-m", "immediate", "-w", "stop"]);
        self.primary.run(stop, "pg_ctl stop -m immediate")
    }

    /// Promotes the standby to primary (`pg_ctl promote`, waiting until it
    /// accepts writes). With the old primary gone, its commits are no
    /// longer waited for by a standby: synchronous replication is turned
    /// off on the new primary, which has none.
    pub fn promote(&self) -> Result<()> {
        let mut promote = self.standby.command("pg_ctl");
        promote
            .arg("-D")
            .arg(self.standby.data())
            .args(["-w", "promote"]);
        self.standby.run(promote, "pg_ctl promote")?;
        let mut c = postgres::Client::connect(&self.standby.url("postgres"), postgres::NoTls)
            .map_err(|e| Error::Io(format!("connect to the promoted standby: {e}")))?;
        // ALTER SYSTEM runs outside a transaction block: one statement each.
        for sql in [
            "ALTER SYSTEM SET synchronous_standby_names = ''",
            "SELECT pg_reload_conf()",
        ] {
            c.batch_execute(sql)
                .map_err(|e| crate::postgres::map_err(&e, sql))?;
        }
        Ok(())
    }

    /// A failover as an operator's tooling would do it: the primary
    /// killed, `outage` later the standby promoted.
    pub fn fail_over(&self, outage: std::time::Duration) -> Result<()> {
        self.kill_primary()?;
        std::thread::sleep(outage);
        self.promote()
    }

    /// Starts the (stopped) primary again, as it was.
    pub fn restart_primary(&mut self) -> Result<()> {
        let options = self.options.clone();
        self.primary.serve(&options)
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        if let Some(mut wd) = self.watchdog.take() {
            // Closing stdin triggers the clean-up; wait for it to finish.
            if let Some(mut stdin) = wd.stdin.take() {
                let _ = stdin.write_all(b"\n");
            }
            let _ = wd.wait();
        }
    }
}
