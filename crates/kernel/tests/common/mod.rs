//! The kernel test fixture: every test runs on SQLite and on PostgreSQL.

#![allow(dead_code)]

use tabos_store::testing::{pg_database, TempDir};
use tabos_store::{Config, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A kernel database on one backend, with 2 partitions.
pub struct Fixture {
    pub store: Store,
    /// How to open it again (a restart).
    pub config: Config,
    pub _dir: Option<TempDir>,
}

impl Backend {
    /// Where a fresh kernel database goes, not yet opened (with the
    /// directory that holds it, on SQLite); `None` when PostgreSQL tests are
    /// skipped.
    pub fn place(&self) -> Option<(Config, Option<TempDir>)> {
        Some(match self {
            Backend::Sqlite => {
                let dir = TempDir::new("kernel");
                (Config::sqlite(dir.path()).with_partitions(2), Some(dir))
            }
            Backend::Postgres => (Config::postgres(pg_database()?).with_partitions(2), None),
        })
    }

    /// `None` when PostgreSQL tests are skipped.
    pub fn open(&self) -> Option<Fixture> {
        let (config, dir) = self.place()?;
        Some(Fixture {
            store: tabos_kernel::open(&config).unwrap(),
            config,
            _dir: dir,
        })
    }
}

/// `both!(a, b)`: tests `a::sqlite`, `a::postgres`, … each calling `a(Backend)`.
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() { super::$name(super::common::Backend::Sqlite); }
            #[test]
            fn postgres() { super::$name(super::common::Backend::Postgres); }
        }
    )*};
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs procedure `f` on `realm`'s partition, blocking the thread.
pub fn call_in<T: Send + 'static>(
    s: &Store,
    realm: &str,
    f: impl FnMut(&mut dyn tabos_store::Tx) -> tabos_kernel::Result<T> + Send + 'static,
) -> tabos_kernel::Result<T> {
    s.call(tabos_kernel::realm_partition(realm, s.partitions()), f)
}

/// The tests' operator: a credential committed to a database of its own
/// (only authentication makes a principal), which acts in any realm as any
/// user. The database is gone once it is made; the principal is a value.
fn operator() -> &'static tabos_kernel::auth::Principal {
    use tabos_kernel::auth;
    static OPERATOR: std::sync::OnceLock<auth::Principal> = std::sync::OnceLock::new();
    OPERATOR.get_or_init(|| {
        let dir = TempDir::new("kernel-operator");
        let s = tabos_kernel::open(&Config::sqlite(dir.path())).unwrap();
        let (m, spec, now) = (
            auth::mint().unwrap(),
            auth::Spec::operator("tests"),
            tabos_store::now_us(),
        );
        s.call(tabos_store::PKey(0), move |tx| {
            auth::create_tx(tx, &spec, &m, now)
        })
        .unwrap()
    })
}

/// `user` acting in `realm` (through [`operator`]'s credential).
pub fn caller(realm: &str, user: &str) -> tabos_kernel::Result<tabos_kernel::auth::Caller> {
    operator().act(realm, user, realm)
}

/// [`caller`], for a test that needs it to work.
pub fn as_user(realm: &str, user: &str) -> tabos_kernel::auth::Caller {
    caller(realm, user).unwrap()
}

/// A realm of `realm` with a (never placed) proc `pid` and a file `path`
/// of `data` that root made: what a provenance test acts on.
pub async fn realm_with_proc_and_file(
    s: &Store,
    realm: &str,
    pid: &tabos_kernel::ids::Pid,
    path: &str,
    data: &[u8],
) {
    use tabos_kernel::fs::files::{Files, FsSettings};
    tabos_kernel::realms::create(s, realm, tabos_kernel::sched::Scheduler::Fifo).unwrap();
    let d = tabos_kernel::procs::Descriptor {
        pid: Some(pid.clone()),
        ..tabos_kernel::procs::Descriptor::native("/bin/true")
    };
    tabos_kernel::procs::spawn(s, realm, d).await.unwrap();
    let root = as_user(realm, "root");
    let files = Files::new(s.clone(), None, FsSettings::default()).unwrap();
    files.create(&root, path, 0o644, false, None).await.unwrap();
    files
        .write(&root, path, 0, data.to_vec(), false, None)
        .await
        .unwrap();
}

/// The name libtest knows a test of this binary by, to run it alone in a
/// child process (`--exact`): its module's path without the crate's name.
pub fn test_name(module_path: &str, test: &str) -> String {
    let (_, module) = module_path
        .split_once("::")
        .expect("a test in a module of the tests' binary");
    format!("{module}::{test}")
}
