//! Test support shared by every crate's tests: temporary directories and
//! fresh PostgreSQL databases.
//!
//! [`pg_database`] gives each test an empty database. It uses
//! `TABOS_TEST_PG` (a URL to a server where tests may create databases) when
//! set, and otherwise one throwaway cluster per test process
//! ([`TempCluster`]). When the server binaries are missing it panics with a
//! message naming the package, unless `TABOS_SKIP_PG=1`, in which case it
//! returns `None` and the caller skips.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::pg_cluster::{ClusterOptions, TempCluster};

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "tabos-test-{tag}-{}-{}-{}",
            std::process::id(),
            crate::now_us(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        if let Err(e) = std::fs::create_dir_all(&p) {
            panic!("cannot create test directory {}: {e}", p.display());
        }
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

enum PgSource {
    Url(String),
    Cluster(TempCluster),
}

fn pg_source() -> Option<&'static PgSource> {
    static SOURCE: OnceLock<Option<PgSource>> = OnceLock::new();
    SOURCE
        .get_or_init(|| {
            if let Ok(url) = std::env::var("TABOS_TEST_PG") {
                if !url.is_empty() {
                    return Some(PgSource::Url(url));
                }
            }
            match TempCluster::start(&ClusterOptions::default()) {
                Ok(c) => Some(PgSource::Cluster(c)),
                Err(e) if std::env::var("TABOS_SKIP_PG").as_deref() == Ok("1") => {
                    eprintln!("skipping PostgreSQL tests (TABOS_SKIP_PG=1): {e}");
                    None
                }
                Err(e) => panic!(
                    "PostgreSQL tests need a server: {e}\n\
                     (set TABOS_TEST_PG to a connection URL, or TABOS_SKIP_PG=1 to skip them)"
                ),
            }
        })
        .as_ref()
}

/// A fresh, empty PostgreSQL database; `None` when PostgreSQL tests are skipped.
pub fn pg_database() -> Option<String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        crate::now_us() % 1_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    );
    match pg_source()? {
        PgSource::Cluster(c) => Some(
            c.create_database(&name)
                .unwrap_or_else(|e| panic!("cannot create test database: {e}")),
        ),
        PgSource::Url(url) => {
            let mut admin = postgres::Client::connect(url, postgres::NoTls)
                .unwrap_or_else(|e| panic!("TABOS_TEST_PG: cannot connect: {e}"));
            if let Err(e) = admin.batch_execute(&format!("CREATE DATABASE \"{name}\"")) {
                panic!("TABOS_TEST_PG: cannot create a database: {e}");
            }
            // Replace the database name, the last path segment of the URL.
            let (base, query) = match url.split_once('?') {
                Some((b, q)) => (b, format!("?{q}")),
                None => (url.as_str(), String::new()),
            };
            let root = match base.rfind('/') {
                Some(i) if i > base.find("://").map_or(0, |s| s + 2) => &base[..i],
                _ => base,
            };
            Some(format!("{root}/{name}{query}"))
        }
    }
}

/// The Linux processes on this machine of tabos proc `pid` (found by the
/// `TABOS_PID` procd puts in their environment) — how tests and benchmarks
/// reach a proc's process to kill or pin it.
pub fn os_pids_of_proc(pid: &str) -> Vec<i32> {
    let want = format!("TABOS_PID={pid}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
                out.push(n);
            }
        }
    }
    out
}

/// SIGKILLs every process of tabos proc `pid` on this machine; returns how
/// many.
pub fn kill_proc(pid: &str) -> usize {
    let pids = os_pids_of_proc(pid);
    for p in &pids {
        // SAFETY: kill(2) takes no pointers.
        unsafe {
            libc::kill(*p, libc::SIGKILL);
        }
    }
    pids.len()
}

/// Whether this process is root — what confinement (and so the tests of
/// it) needs. A test that needs root and is not says that it skipped.
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
