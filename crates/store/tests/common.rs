//! The backend matrix of the conformance suite; fixtures come from
//! `tabos_store::testing`.

#![allow(dead_code)]

pub use tabos_store::testing::{pg_database, TempDir};
use tabos_store::{Config, Migration, Store};

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
