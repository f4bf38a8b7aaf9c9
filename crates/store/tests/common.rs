//! Test fixtures: temporary directories and a PostgreSQL source.
//!
//! PostgreSQL tests use `TABOS_TEST_PG` (a connection URL to a server where
//! the tests may create databases) when it is set; otherwise they start one
//! throwaway cluster per test process. When the server binaries are missing
//! they fail with a message naming the package, unless `TABOS_SKIP_PG=1`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use tabos_store::pg_cluster::{ClusterOptions, TempCluster};
use tabos_store::{Config, Migration, Store};

pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "tabos-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
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
        tabos_store::now_us() % 1_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    );
    match pg_source()? {
        PgSource::Cluster(c) => Some(c.create_database(&name).unwrap()),
        PgSource::Url(url) => {
            let mut admin = postgres::Client::connect(url, postgres::NoTls)
                .unwrap_or_else(|e| panic!("TABOS_TEST_PG: cannot connect: {e}"));
            admin
                .batch_execute(&format!("CREATE DATABASE \"{name}\""))
                .unwrap();
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

/// Where a conformance test runs.
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A store of the given backend plus what keeps it alive.
pub struct TestStore {
    pub store: Store,
    pub config: Config,
    pub _dir: Option<TempDir>,
}

impl Backend {
    /// A fresh config for this backend, or `None` when PostgreSQL is skipped.
    pub fn config(&self, tag: &str) -> Option<(Config, Option<TempDir>)> {
        match self {
            Backend::Sqlite => {
                let dir = TempDir::new(tag);
                Some((Config::sqlite(dir.path()).with_partitions(2), Some(dir)))
            }
            Backend::Postgres => {
                let url = pg_database()?;
                Some((
                    Config::postgres(url).with_partitions(2).with_connections(8),
                    None,
                ))
            }
        }
    }

    pub fn open(&self, tag: &str, migrations: &[Migration]) -> Option<TestStore> {
        let (config, dir) = self.config(tag)?;
        let store = Store::open(&config, migrations).unwrap();
        Some(TestStore {
            store,
            config,
            _dir: dir,
        })
    }
}

/// Generates `sqlite` and `postgres` variants of a conformance test body
/// `fn(Backend)`.
#[macro_export]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name(super::common::Backend::Sqlite);
            }
            #[test]
            fn postgres() {
                super::$name(super::common::Backend::Postgres);
            }
        }
    )*};
}
