//! `tabos-kernel`: the kernel services (layer L3).
//!
//! Each service is a module that owns its tables (migration files under
//! `schema/<dialect>/NNN_*.sql`) and the procedures over them, and talks to the
//! other services only through the database. Services so far:
//!
//! * [`auth`] — credentials: who a request acts for.
//! * [`kv`] — the per-realm key-value table.
//! * [`realms`] — realms and their scheduler.
//! * [`sched`] — workers and the DBOS schedulers (FIFO, locality, least-loaded).
//! * [`procs`] — the σOS proc lifecycle: spawn, claim, started, exited, evict, waits.
//! * [`ipc`] — mailboxes and messages: send, multicast, receive, peek.
//! * [`names`] — the namespace: entries, watches, sessions, epochs, fences.
//!
//! [`MIGRATIONS`] is the kernel's schema, in version order, for
//! [`Store::open`](tabos_store::Store::open); [`open`] opens a store with it.

pub mod alloc;
pub mod auth;
pub mod backup;
pub mod cluster;
pub mod cron;
pub mod fs;
pub mod graphs;
pub mod ids;
pub mod ipc;
pub mod kv;
pub mod logs;
pub mod names;
pub mod nodes;
pub mod procedures;
pub mod procs;
pub mod realms;
pub mod retention;
pub mod sched;
pub(crate) mod seqs;
pub mod teardown;
pub mod workflows;

use tabos_store::{Config, Migration, PKey, Store, Tx};

/// The kernel schema, one entry per migration file pair.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "kv",
        sqlite: include_str!("../schema/sqlite/001_kv.sql"),
        postgres: include_str!("../schema/postgres/001_kv.sql"),
    },
    Migration {
        version: 2,
        name: "procs",
        sqlite: include_str!("../schema/sqlite/002_procs.sql"),
        postgres: include_str!("../schema/postgres/002_procs.sql"),
    },
    Migration {
        version: 3,
        name: "steal",
        sqlite: include_str!("../schema/sqlite/003_steal.sql"),
        postgres: include_str!("../schema/postgres/003_steal.sql"),
    },
    Migration {
        version: 4,
        name: "ipc",
        sqlite: include_str!("../schema/sqlite/004_ipc.sql"),
        postgres: include_str!("../schema/postgres/004_ipc.sql"),
    },
    Migration {
        version: 5,
        name: "names",
        sqlite: include_str!("../schema/sqlite/005_names.sql"),
        postgres: include_str!("../schema/postgres/005_names.sql"),
    },
    Migration {
        version: 6,
        name: "fs",
        sqlite: include_str!("../schema/sqlite/006_fs.sql"),
        postgres: include_str!("../schema/postgres/006_fs.sql"),
    },
    Migration {
        version: 7,
        name: "fs_data",
        sqlite: include_str!("../schema/sqlite/007_fs_data.sql"),
        postgres: include_str!("../schema/postgres/007_fs_data.sql"),
    },
    Migration {
        version: 8,
        name: "fs_blocks_rowid",
        sqlite: include_str!("../schema/sqlite/008_fs_blocks_rowid.sql"),
        postgres: include_str!("../schema/postgres/008_fs_blocks_rowid.sql"),
    },
    Migration {
        version: 9,
        name: "procedure",
        sqlite: include_str!("../schema/sqlite/009_procedure.sql"),
        postgres: include_str!("../schema/postgres/009_procedure.sql"),
    },
    Migration {
        version: 10,
        name: "be_zero_cores",
        sqlite: include_str!("../schema/sqlite/010_be_zero_cores.sql"),
        postgres: include_str!("../schema/postgres/010_be_zero_cores.sql"),
    },
    Migration {
        version: 11,
        name: "credentials",
        sqlite: include_str!("../schema/sqlite/011_credentials.sql"),
        postgres: include_str!("../schema/postgres/011_credentials.sql"),
    },
    Migration {
        version: 12,
        name: "proc_usage",
        sqlite: include_str!("../schema/sqlite/012_proc_usage.sql"),
        postgres: include_str!("../schema/postgres/012_proc_usage.sql"),
    },
    Migration {
        version: 13,
        name: "realm_quota",
        sqlite: include_str!("../schema/sqlite/013_realm_quota.sql"),
        postgres: include_str!("../schema/postgres/013_realm_quota.sql"),
    },
    Migration {
        version: 14,
        name: "tenant_view",
        sqlite: include_str!("../schema/sqlite/014_tenant_view.sql"),
        postgres: include_str!("../schema/postgres/014_tenant_view.sql"),
    },
    Migration {
        version: 15,
        name: "ps_waiting",
        sqlite: include_str!("../schema/sqlite/015_ps_waiting.sql"),
        postgres: include_str!("../schema/postgres/015_ps_waiting.sql"),
    },
    Migration {
        version: 16,
        name: "realm_storage",
        sqlite: include_str!("../schema/sqlite/016_realm_storage.sql"),
        postgres: include_str!("../schema/postgres/016_realm_storage.sql"),
    },
    Migration {
        version: 17,
        name: "host_paths",
        sqlite: include_str!("../schema/sqlite/017_host_paths.sql"),
        postgres: include_str!("../schema/postgres/017_host_paths.sql"),
    },
    Migration {
        version: 18,
        name: "procedure_read_only",
        sqlite: include_str!("../schema/sqlite/018_procedure_read_only.sql"),
        postgres: include_str!("../schema/postgres/018_procedure_read_only.sql"),
    },
    Migration {
        version: 19,
        name: "seq_block",
        sqlite: include_str!("../schema/sqlite/019_seq_block.sql"),
        postgres: include_str!("../schema/postgres/019_seq_block.sql"),
    },
    Migration {
        version: 20,
        name: "node",
        sqlite: include_str!("../schema/sqlite/020_node.sql"),
        postgres: include_str!("../schema/postgres/020_node.sql"),
    },
    Migration {
        version: 21,
        name: "drain",
        sqlite: include_str!("../schema/sqlite/021_drain.sql"),
        postgres: include_str!("../schema/postgres/021_drain.sql"),
    },
    Migration {
        version: 22,
        name: "node_block_store",
        sqlite: include_str!("../schema/sqlite/022_node_block_store.sql"),
        postgres: include_str!("../schema/postgres/022_node_block_store.sql"),
    },
    Migration {
        version: 23,
        name: "elastic",
        sqlite: include_str!("../schema/sqlite/023_elastic.sql"),
        postgres: include_str!("../schema/postgres/023_elastic.sql"),
    },
    Migration {
        version: 24,
        name: "scope",
        sqlite: include_str!("../schema/sqlite/024_scope.sql"),
        postgres: include_str!("../schema/postgres/024_scope.sql"),
    },
    Migration {
        version: 25,
        name: "workflow",
        sqlite: include_str!("../schema/sqlite/025_workflow.sql"),
        postgres: include_str!("../schema/postgres/025_workflow.sql"),
    },
    Migration {
        version: 26,
        name: "workflow_step_input",
        sqlite: include_str!("../schema/sqlite/026_workflow_step_input.sql"),
        postgres: include_str!("../schema/postgres/026_workflow_step_input.sql"),
    },
    Migration {
        version: 27,
        name: "host_network",
        sqlite: include_str!("../schema/sqlite/027_host_network.sql"),
        postgres: include_str!("../schema/postgres/027_host_network.sql"),
    },
    Migration {
        version: 28,
        name: "node_lease",
        sqlite: include_str!("../schema/sqlite/028_node_lease.sql"),
        postgres: include_str!("../schema/postgres/028_node_lease.sql"),
    },
    Migration {
        version: 29,
        name: "seq_sequence",
        sqlite: include_str!("../schema/sqlite/029_seq_sequence.sql"),
        postgres: include_str!("../schema/postgres/029_seq_sequence.sql"),
    },
    Migration {
        version: 30,
        name: "storage_classes",
        sqlite: include_str!("../schema/sqlite/030_storage_classes.sql"),
        postgres: include_str!("../schema/postgres/030_storage_classes.sql"),
    },
    Migration {
        version: 31,
        name: "ps_times",
        sqlite: include_str!("../schema/sqlite/031_ps_times.sql"),
        postgres: include_str!("../schema/postgres/031_ps_times.sql"),
    },
    Migration {
        version: 32,
        name: "fs_atime",
        sqlite: include_str!("../schema/sqlite/032_fs_atime.sql"),
        postgres: include_str!("../schema/postgres/032_fs_atime.sql"),
    },
    Migration {
        version: 33,
        name: "fs_inodes",
        sqlite: include_str!("../schema/sqlite/033_fs_inodes.sql"),
        postgres: include_str!("../schema/postgres/033_fs_inodes.sql"),
    },
    Migration {
        version: 34,
        name: "restart_limit",
        sqlite: include_str!("../schema/sqlite/034_restart_limit.sql"),
        postgres: include_str!("../schema/postgres/034_restart_limit.sql"),
    },
    Migration {
        version: 35,
        name: "proc_log",
        sqlite: include_str!("../schema/sqlite/035_proc_log.sql"),
        postgres: include_str!("../schema/postgres/035_proc_log.sql"),
    },
    Migration {
        version: 36,
        name: "live_usage",
        sqlite: include_str!("../schema/sqlite/036_live_usage.sql"),
        postgres: include_str!("../schema/postgres/036_live_usage.sql"),
    },
    Migration {
        version: 37,
        name: "dashboard",
        sqlite: include_str!("../schema/sqlite/037_dashboard.sql"),
        postgres: include_str!("../schema/postgres/037_dashboard.sql"),
    },
    Migration {
        version: 38,
        name: "code",
        sqlite: include_str!("../schema/sqlite/038_code.sql"),
        postgres: include_str!("../schema/postgres/038_code.sql"),
    },
    Migration {
        version: 39,
        name: "credential_by_id",
        sqlite: include_str!("../schema/sqlite/039_credential_by_id.sql"),
        postgres: include_str!("../schema/postgres/039_credential_by_id.sql"),
    },
    Migration {
        version: 40,
        name: "credential_by_pid",
        sqlite: include_str!("../schema/sqlite/040_credential_by_pid.sql"),
        postgres: include_str!("../schema/postgres/040_credential_by_pid.sql"),
    },
    Migration {
        version: 41,
        name: "proc_deferred_be",
        sqlite: include_str!("../schema/sqlite/041_proc_deferred_be.sql"),
        postgres: include_str!("../schema/postgres/041_proc_deferred_be.sql"),
    },
    Migration {
        version: 42,
        name: "retention",
        sqlite: include_str!("../schema/sqlite/042_retention.sql"),
        postgres: include_str!("../schema/postgres/042_retention.sql"),
    },
    Migration {
        version: 43,
        name: "fifo",
        sqlite: include_str!("../schema/sqlite/043_fifo.sql"),
        postgres: include_str!("../schema/postgres/043_fifo.sql"),
    },
    Migration {
        version: 44,
        name: "graph",
        sqlite: include_str!("../schema/sqlite/044_graph.sql"),
        postgres: include_str!("../schema/postgres/044_graph.sql"),
    },
    Migration {
        version: 45,
        name: "graph_pid",
        sqlite: include_str!("../schema/sqlite/045_graph_pid.sql"),
        postgres: include_str!("../schema/postgres/045_graph_pid.sql"),
    },
    Migration {
        version: 46,
        name: "client_provenance",
        sqlite: include_str!("../schema/sqlite/046_client_provenance.sql"),
        postgres: include_str!("../schema/postgres/046_client_provenance.sql"),
    },
];

/// Errors of kernel services.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] tabos_store::Error),
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A payload (a message, a send) larger than its limit: invalid, and
    /// told apart so a proc's host call can answer EMSGSIZE.
    #[error("invalid argument: {0}")]
    TooLarge(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// A bound was reached (a full mailbox); retry after the receiver drains.
    #[error("{0}")]
    Full(String),
    /// The request is valid but the object's state refuses it (a finished
    /// proc's mailbox).
    #[error("{0}")]
    Precondition(String),
    /// The block store under large files failed (an I/O error, a full
    /// device).
    #[error("block store: {0}")]
    Blocks(String),
    /// The caller's user may not do this (owner and mode, a sticky
    /// directory, another user's session).
    #[error("permission denied: {0}")]
    Denied(String),
    /// A fenced request carried an epoch older than one already seen for
    /// its directory (σOS FenceAtEpoch), or a deposed leader acted: the
    /// epoch now (`current`, -1 when there is none any more) and the one
    /// the request carried.
    #[error("stale epoch: {what}")]
    StaleEpoch {
        what: String,
        current: i64,
        given: i64,
    },
    /// A change would pass one of the realm's quotas (`quota`: "storage",
    /// "mailbox", "procedures", "procs", "cores", "memory"): `used` (after
    /// the change) against `limit`, in the quota's unit (bytes for storage
    /// and mailbox).
    #[error("{message}")]
    OverQuota {
        quota: &'static str,
        used: u64,
        limit: u64,
        message: String,
    },
    /// A path's parent, or rmdir's target, is not a directory.
    #[error("invalid argument: {0} is not a directory")]
    NotADirectory(String),
    /// A file operation on a directory (`.1` says which, e.g. "use rmdir").
    #[error("invalid argument: {0} is a directory{1}")]
    IsADirectory(String, &'static str),
    /// Removing, or renaming over, a directory that has entries.
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    /// The data changed under the request (another writer replaced a
    /// file's segments): read again and retry.
    #[error("{0}")]
    Conflict(String),
    /// The path crosses a symlink (a mount): the rest of it is to be
    /// resolved at the symlink's target (σOS automount).
    #[error("{path} is mounted at {target}: resolve {rest:?} there")]
    Mounted {
        path: String,
        target: String,
        rest: String,
    },
    /// A file's data is in segments of another node's block store: the
    /// request is for the node holding `store_id` (`nodes::holding_store`).
    #[error("{path}'s data is on block store {store_id}, not this node's")]
    OnBlockStore { path: String, store_id: String },
    /// A stored procedure failed (its transaction was rolled back), or its
    /// code was refused at install time.
    #[error("procedure {name}: {error}")]
    Procedure {
        name: String,
        error: tabos_sandbox::ProcError,
    },
    /// The node cannot answer now (it is stopping): ask again, elsewhere
    /// or later.
    #[error("{0}")]
    Unavailable(String),
    /// Valid, but not something this node does (yet).
    #[error("not supported: {0}")]
    Unimplemented(String),
    /// A write to a named pipe whose readers have all gone (EPIPE).
    #[error("broken pipe: {0}")]
    BrokenPipe(String),
}

impl Error {
    /// How a proc or a stored procedure sees this error through a host
    /// call (its errno): the one mapping for every sandbox. A store error
    /// is "invalid" here; callers that must fail the whole call on one
    /// look at it first.
    pub fn into_host(self) -> tabos_sandbox::HostError {
        use tabos_sandbox::HostError as H;
        match self {
            Error::NotFound(m) => H::NotFound(m),
            Error::AlreadyExists(m) => H::Exists(m),
            Error::Full(m) => H::Full(m),
            e @ Error::OverQuota { .. } => H::Full(e.to_string()),
            Error::Denied(m) => H::Denied(m),
            Error::Precondition(m) | Error::Conflict(m) => H::Conflict(m),
            e @ Error::NotEmpty(_) => H::Conflict(e.to_string()),
            Error::TooLarge(m) => H::PayloadTooLarge(m),
            Error::Invalid(m) => H::Invalid(m),
            e @ (Error::NotADirectory(_) | Error::IsADirectory(..)) => H::Invalid(e.to_string()),
            Error::StaleEpoch { what, .. } => H::StaleEpoch(what),
            e @ Error::Mounted { .. } => H::Mounted(e.to_string()),
            Error::BrokenPipe(m) => H::Closed(m),
            Error::Store(e) => H::Invalid(e.to_string()),
            other => H::Other(other.to_string()),
        }
    }

    /// [`into_host`](Self::into_host) for a message passing call, where a
    /// refused precondition means the receiver has finished (EPIPE).
    pub fn into_host_ipc(self) -> tabos_sandbox::HostError {
        match self {
            Error::Precondition(m) => tabos_sandbox::HostError::Closed(m),
            other => other.into_host(),
        }
    }
}

impl tabos_store::ProcedureError for Error {
    fn store_error(&self) -> Option<&tabos_store::Error> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens the kernel database described by `config`, applying the kernel
/// schema.
pub fn open(config: &Config) -> Result<Store> {
    Ok(Store::open(config, MIGRATIONS)?)
}

/// Whether this thread runs on tokio's multi-threaded runtime, the one
/// where `block_in_place` may run (it panics on a current-thread runtime,
/// and outside one there is nothing to step out of): the one test of every
/// caller that runs blocking work — tenant code, a store read — on the
/// thread that polls it.
pub fn may_block_in_place() -> bool {
    matches!(
        tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
        Ok(tokio::runtime::RuntimeFlavor::MultiThread)
    )
}

/// Longest realm name, in bytes.
pub const REALM_BYTES_MAX: usize = 64;

/// The partition a realm's rows live on: a stable hash (FNV-1a) of its name,
/// so every node computes the same answer without asking anyone.
pub fn realm_partition(realm: &str, partitions: u32) -> PKey {
    debug_assert!(partitions > 0);
    let mut h: u32 = 0x811c_9dc5;
    for b in realm.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    PKey(h % partitions.max(1))
}

/// The partition of `realm` in `store`, after checking the realm's name.
pub(crate) fn partition(store: &Store, realm: &str) -> Result<PKey> {
    validate_realm(realm)?;
    Ok(realm_partition(realm, store.partitions()))
}

/// Runs procedure `f` on `realm`'s partition: the one way a service's
/// async API reaches its procedures (re-exported as `names::call`,
/// `fs::call`).
pub async fn call<T, F>(store: &Store, realm: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnMut(&mut dyn tabos_store::Tx) -> Result<T> + Send + 'static,
{
    store
        .for_realm(realm)
        .run(partition(store, realm)?, f)
        .await
}

/// Runs read-only procedure `f` on `realm`'s partition on a read
/// connection ([`Store::read`](tabos_store::Store::read)): one snapshot
/// that holds every committed write, never queued behind the partition's
/// writes. For operations that only read (names get and readdir, proc
/// status and the re-reads of waits, mailbox peek).
pub async fn read<T, F>(store: &Store, realm: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnMut(&mut dyn tabos_store::Tx) -> Result<T> + Send + 'static,
{
    store
        .for_realm(realm)
        .read(partition(store, realm)?, f)
        .await
}

/// The key range `[lo, hi)` of every path strictly under `path` ('/' + 1
/// is '0', so `path/` ≤ p < `path0` is the subtree); for `/`, every path.
pub(crate) fn subtree_range(path: &str) -> (String, String) {
    if path == "/" {
        ("/".into(), "0".into())
    } else {
        (format!("{path}/"), format!("{path}0"))
    }
}

/// Procedure body: deletes every row of `realm` from each of `tables` on
/// the transaction's partition (a realm's removal; each owning module
/// names its own tables); returns the rows deleted.
pub(crate) fn delete_realm_rows(tx: &mut dyn Tx, realm: &str, tables: &[&str]) -> Result<u64> {
    let p = p_key(tx);
    let mut n = 0;
    for t in tables {
        debug_assert!(t.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        n += tx.execute_text(
            &format!("DELETE FROM {t} WHERE p_key = $1 AND realm = $2"),
            tabos_store::params![p, realm],
        )?;
    }
    Ok(n)
}

/// The `p_key` column value of a transaction's partition.
pub(crate) fn p_key(tx: &dyn tabos_store::Tx) -> i64 {
    i64::from(tx.p_key().0)
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character's boundary (what a bounded text column keeps of a longer one).
pub(crate) fn utf8_prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A change-feed channel named `{prefix}{name}`, or, when that is longer
/// than the feed allows, `{prefix}#{hash}` (FNV-1a 64 of the whole name):
/// two names sharing a hashed channel only cost a spurious wake-up.
pub(crate) fn bounded_channel(prefix: &str, name: &str) -> String {
    let plain = format!("{prefix}{name}");
    if plain.len() <= tabos_store::feed::CHANNEL_BYTES_MAX {
        return plain;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in plain.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{prefix}#{h:016x}")
}

/// Checks a realm name: 1..=REALM_BYTES_MAX bytes of `[A-Za-z0-9_.-]`,
/// the first a letter or digit (a realm names directories on nodes: never
/// `.`, `..` or hidden).
pub fn validate_realm(realm: &str) -> Result<()> {
    let ok = realm
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && realm.len() <= REALM_BYTES_MAX
        && realm
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "realm name {realm:?} must be 1..={REALM_BYTES_MAX} characters of A-Z a-z 0-9 _ . -, \
             the first a letter or digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_on_a_characters_boundary() {
        assert_eq!(
            utf8_prefix("héllo", 2),
            "h",
            "é is two bytes: not cut in half"
        );
        assert_eq!(utf8_prefix("héllo", 3), "hé");
        assert_eq!(utf8_prefix("abc", 10), "abc");
        assert_eq!(utf8_prefix("", 0), "");
    }

    #[test]
    fn realm_partition_is_stable_and_in_range() {
        for p in 1..=8 {
            for r in ["a", "root", "tenant-42"] {
                let k = realm_partition(r, p);
                assert!(k.0 < p);
                assert_eq!(k, realm_partition(r, p));
            }
        }
        assert!(validate_realm("ok-realm_1.x").is_ok());
        assert!(validate_realm("").is_err());
        assert!(validate_realm("../x").is_err());
        assert!(validate_realm(&"a".repeat(REALM_BYTES_MAX + 1)).is_err());
    }
}
