//! Realms: a tenant's slice of the system.
//!
//! Table `realm(p_key, realm, scheduler, next_seq, created_us)`; a realm's row
//! and everything else of the realm (workers, procs, kv) live on
//! [`realm_partition`](crate::realm_partition). The numbers that order the
//! realm's spawns and proc events come from its partition's counter
//! ([`next_seq_tx`]); `next_seq` is no longer written (migration 019).

use std::fmt;
use std::str::FromStr;

use tabos_store::{params, PKey, Store, Tx};

/// Change-feed channel told of every realm created; the payload is its
/// name (nodes start serving it).
pub const CREATED_CHANNEL: &str = "realms/created";

use crate::{realm_partition, validate_realm, Error, Result};

/// Which scheduler a realm uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    Fifo,
    Locality,
    LeastLoaded,
}

impl Scheduler {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheduler::Fifo => "fifo",
            Scheduler::Locality => "locality",
            Scheduler::LeastLoaded => "least_loaded",
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scheduler {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "fifo" => Ok(Scheduler::Fifo),
            "locality" => Ok(Scheduler::Locality),
            "least_loaded" | "least-loaded" => Ok(Scheduler::LeastLoaded),
            other => Err(Error::Invalid(format!(
                "scheduler must be fifo, locality or least_loaded, not {other:?}"
            ))),
        }
    }
}

/// Procedure body: creates `realm` with the given scheduler.
pub fn create_tx(tx: &mut dyn Tx, realm: &str, scheduler: Scheduler, now_us: i64) -> Result<()> {
    validate_realm(realm)?;
    let p = i64::from(tx.p_key().0);
    tx.execute(
        "INSERT INTO realm (p_key, realm, scheduler, next_seq, created_us) VALUES ($1, $2, $3, 1, $4)",
        params![p, realm, scheduler.as_str(), now_us],
    )
    .map_err(|e| {
        if e.is_unique_violation() {
            Error::AlreadyExists(format!("realm {realm}"))
        } else {
            Error::Store(e)
        }
    })?;
    tx.notify(CREATED_CHANNEL, realm)?;
    Ok(())
}

/// A realm's quotas; `None` is no quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// Live procs (spawned, claimed or running).
    pub procs: Option<i64>,
    /// Cores of its live procs.
    pub cores: Option<i64>,
    /// Memory of its live procs, in MB.
    pub mem_mb: Option<i64>,
    /// Bytes stored, every [`StorageClass`]'s, in MiB.
    pub storage_mb: Option<i64>,
    /// Bytes of messages queued in the realm's mailboxes, in MiB.
    pub mailbox_mb: Option<i64>,
    /// Procedures installed.
    pub procedures: Option<i64>,
}

impl Quota {
    fn fields(&self) -> [(&'static str, Option<i64>); 6] {
        let [procs, cores, memory, storage, mailbox, procedures] = QUOTA_NAMES;
        [
            (procs, self.procs),
            (cores, self.cores),
            (memory, self.mem_mb),
            (storage, self.storage_mb),
            (mailbox, self.mailbox_mb),
            (procedures, self.procedures),
        ]
    }
}

impl Quota {
    /// The realm keeps counters of what it stores (migration 030): it has
    /// a storage, mailbox or procedures quota.
    pub fn is_metered(&self) -> bool {
        self.storage_mb.is_some() || self.mailbox_mb.is_some() || self.procedures.is_some()
    }
}

/// The names [`Quota`]'s fields go by (in `tabos realm set --clear`).
pub const QUOTA_NAMES: [&str; 6] = [
    "procs",
    "cores",
    "memory",
    "storage",
    "mailbox",
    "procedures",
];

/// Largest quota of any kind: far past any machine, and small enough that
/// a quota in MiB converted to bytes cannot overflow.
pub const QUOTA_MAX: i64 = 1 << 40;

const MIB: i64 = 1 << 20;

/// Procedure body: sets the quotas of `realm` (every field: `None` clears).
/// A realm's counters are kept while it has a storage, mailbox or
/// procedures quota (it is `metered`); the first such quota starts them,
/// counted from the tables in this transaction (kept by the triggers of
/// migration 030 from then on), and clearing the last stops them.
pub fn set_quota_tx(tx: &mut dyn Tx, realm: &str, q: &Quota) -> Result<()> {
    for (what, v) in q.fields() {
        if v.is_some_and(|v| !(0..=QUOTA_MAX).contains(&v)) {
            return Err(Error::Invalid(format!(
                "a {what} quota is between 0 and {QUOTA_MAX}"
            )));
        }
    }
    let before = quota_tx(tx, realm)?;
    let p = i64::from(tx.p_key().0);
    tx.execute(
        "UPDATE realm SET quota_procs = $3, quota_cores = $4, quota_mem_mb = $5, \
         quota_storage_mb = $6, quota_mailbox_mb = $7, quota_procedures = $8, metered = $9 \
         WHERE p_key = $1 AND realm = $2",
        params![
            p,
            realm,
            q.procs,
            q.cores,
            q.mem_mb,
            q.storage_mb,
            q.mailbox_mb,
            q.procedures,
            q.is_metered()
        ],
    )?;
    if !before.is_metered() && q.is_metered() {
        let tenant = tx.tables_bytes(&tenant_prefix(realm))?;
        let recount = concat!(
            "UPDATE realm SET ",
            "kv_bytes = (SELECT s.kv_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "name_bytes = (SELECT s.name_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "file_bytes = (SELECT s.file_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "mailbox_bytes = (SELECT s.mailbox_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "delivered_bytes = (SELECT s.delivered_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "code_bytes = (SELECT s.code_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "workflow_bytes = (SELECT s.workflow_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "log_bytes = (SELECT s.log_bytes FROM realm_stored s WHERE s.p_key = $1 AND s.realm = $2), ",
            "tenant_bytes = $3, ",
            "procedures = (SELECT count(*) FROM procedure WHERE p_key = $1 AND realm = $2) ",
            "WHERE p_key = $1 AND realm = $2"
        );
        tx.execute(recount, params![p, realm, tenant])?;
    }
    Ok(())
}

/// Procedure body: the host paths `realm`'s native procs may ask to see
/// (read-only), as its operator set them.
pub fn host_paths_tx(tx: &mut dyn Tx, realm: &str) -> Result<Vec<String>> {
    let p = i64::from(tx.p_key().0);
    let json: String = tx
        .query_opt(
            "SELECT host_paths FROM realm WHERE p_key = $1 AND realm = $2",
            params![p, realm],
        )?
        .ok_or_else(|| Error::NotFound(format!("unknown realm {realm:?}")))?
        .get(0)?;
    serde_json::from_str(&json).map_err(|e| Error::Invalid(format!("stored host paths: {e}")))
}

/// Procedure body: sets the host paths `realm`'s native procs may ask to
/// see (replacing the list; empty: none).
pub fn set_host_paths_tx(tx: &mut dyn Tx, realm: &str, paths: &[String]) -> Result<()> {
    if paths.len() > HOST_PATHS_MAX {
        return Err(Error::Invalid(format!(
            "at most {} host paths per realm",
            HOST_PATHS_MAX
        )));
    }
    for path in paths {
        validate_host_path(path)?;
    }
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE realm SET host_paths = $3 WHERE p_key = $1 AND realm = $2",
        params![
            p,
            realm,
            serde_json::Value::from(paths.to_vec()).to_string()
        ],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("unknown realm {realm:?}")));
    }
    Ok(())
}

/// The prefix of `realm`'s tenant tables (`<realm>/<name>`).
pub fn tenant_prefix(realm: &str) -> String {
    format!("{realm}/")
}

/// Procedure body: the quotas of `realm`.
pub fn quota_tx(tx: &mut dyn Tx, realm: &str) -> Result<Quota> {
    Ok(spawn_policy_tx(tx, realm)?.quota)
}

/// Procedure body: what a spawn in `realm` needs of its row, in one
/// statement: its scheduler, its quotas and its network.
pub fn spawn_policy_tx(tx: &mut dyn Tx, realm: &str) -> Result<SpawnPolicy> {
    let p = i64::from(tx.p_key().0);
    let row = tx
        .query_opt(
            "SELECT scheduler, quota_procs, quota_cores, quota_mem_mb, quota_storage_mb, \
             quota_mailbox_mb, quota_procedures, host_network FROM realm \
             WHERE p_key = $1 AND realm = $2",
            params![p, realm],
        )?
        .ok_or_else(|| Error::NotFound(format!("unknown realm {realm:?}")))?;
    let quota = Quota {
        procs: row.get(1)?,
        cores: row.get(2)?,
        mem_mb: row.get(3)?,
        storage_mb: row.get(4)?,
        mailbox_mb: row.get(5)?,
        procedures: row.get(6)?,
    };
    Ok(SpawnPolicy {
        scheduler: row.get::<String>(0)?.parse()?,
        quota,
        host_network: row.get(7)?,
    })
}

/// What a spawn in a realm goes by: its scheduler, its quotas, and whether
/// its native procs may use the host's network.
#[derive(Debug, Clone, Copy)]
pub struct SpawnPolicy {
    pub scheduler: Scheduler,
    pub quota: Quota,
    pub host_network: bool,
}

/// Procedure body: allows (or forbids) realm `realm`'s native procs the
/// host's network — an operator's decision, like host paths. Procs
/// already spawned keep what they had.
pub fn set_host_network_tx(tx: &mut dyn Tx, realm: &str, allowed: bool) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE realm SET host_network = $3 WHERE p_key = $1 AND realm = $2",
        params![p, realm, allowed],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("unknown realm {realm:?}")));
    }
    Ok(())
}

/// What a realm's provenance (`proc_event`) records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provenance {
    /// What procs do (the default).
    #[default]
    Procs,
    /// Also the file reads and writes, sends and receipts of clients
    /// acting for no proc — each such file read then commits a write, so
    /// it is the operator's choice.
    All,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Procs => "procs",
            Provenance::All => "all",
        }
    }
}

impl std::str::FromStr for Provenance {
    type Err = Error;
    fn from_str(s: &str) -> Result<Provenance> {
        match s {
            "procs" => Ok(Provenance::Procs),
            "all" => Ok(Provenance::All),
            _ => Err(Error::Invalid(format!("provenance {s:?} is procs or all"))),
        }
    }
}

/// Procedure body: sets what `realm`'s provenance records — an operator's
/// decision, like its retention.
pub fn set_provenance_tx(tx: &mut dyn Tx, realm: &str, p: Provenance) -> Result<()> {
    let pk = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE realm SET provenance = $3 WHERE p_key = $1 AND realm = $2",
        params![pk, realm, p.as_str()],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("unknown realm {realm:?}")));
    }
    Ok(())
}

/// Procedure body: what `realm`'s provenance records (the default for no
/// such realm: its operations fail on their own).
pub fn provenance_tx(tx: &mut dyn Tx, realm: &str) -> Result<Provenance> {
    let pk = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT provenance FROM realm WHERE p_key = $1 AND realm = $2",
        params![pk, realm],
    )?;
    match row {
        Some(r) => r.get::<String>(0)?.parse(),
        None => Ok(Provenance::default()),
    }
}

/// Shortest retention a realm may have: a record kept less than a second
/// would be gone before most questions about it could be asked.
pub const RETENTION_MIN_US: i64 = 1_000_000;
/// Longest retention: about a century (longer is "keep": no retention).
pub const RETENTION_MAX_US: i64 = 100 * 366 * 86_400 * 1_000_000;

/// How long realm `realm` keeps the record of what is over — ended procs
/// with their events, logs and spent credentials, provenance events, and
/// delivered messages — before every node's retention reaper removes it
/// (`crate::retention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention(i64);

impl Retention {
    /// A retention of `us` microseconds, within
    /// [`RETENTION_MIN_US`]..=[`RETENTION_MAX_US`].
    pub fn new(us: i64) -> Result<Retention> {
        if !(RETENTION_MIN_US..=RETENTION_MAX_US).contains(&us) {
            return Err(Error::Invalid(format!(
                "a retention is {}s to {}s, not {us}us",
                RETENTION_MIN_US / 1_000_000,
                RETENTION_MAX_US / 1_000_000
            )));
        }
        Ok(Retention(us))
    }

    pub fn as_us(self) -> i64 {
        self.0
    }
}

/// The notification channel a retention change is told on (payload: the
/// realm), which wakes every node's retention reaper.
pub const RETENTION_CHANNEL: &str = "realm-retention";

/// Procedure body: sets (or, with `None`, removes) `realm`'s retention.
pub fn set_retention_tx(tx: &mut dyn Tx, realm: &str, r: Option<Retention>) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE realm SET retention_us = $3 WHERE p_key = $1 AND realm = $2",
        params![p, realm, r.map(Retention::as_us)],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("unknown realm {realm:?}")));
    }
    tx.notify(RETENTION_CHANNEL, realm)?;
    Ok(())
}

/// Procedure body: `realm`'s retention (`None`: none, or no such realm).
pub fn retention_tx(tx: &mut dyn Tx, realm: &str) -> Result<Option<Retention>> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT retention_us FROM realm WHERE p_key = $1 AND realm = $2",
        params![p, realm],
    )?;
    Ok(match row {
        Some(r) => r.get::<Option<i64>>(0)?.map(Retention),
        None => None,
    })
}

/// Procedure body: the realms of this transaction's partition that have a
/// retention, with it.
pub fn retained_tx(tx: &mut dyn Tx) -> Result<Vec<(String, Retention)>> {
    let p = i64::from(tx.p_key().0);
    let rows = tx.query(
        "SELECT realm, retention_us FROM realm WHERE p_key = $1 AND retention_us IS NOT NULL \
         ORDER BY realm",
        params![p],
    )?;
    rows.rows
        .iter()
        .map(|r| Ok((r.get::<String>(0)?, Retention(r.get(1)?))))
        .collect()
}

/// What a realm's stored bytes are: the classes `realm show` and the
/// `realm_usage` view break them into, each kept by the triggers of
/// migration 030 on the tables named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageClass {
    /// Keys and values of `kv`.
    Kv,
    /// Paths and data of the namespace (`name_entry`).
    Names,
    /// Files: their size (whatever holds their data) and directory rows.
    Files,
    /// Mail still queued in mailboxes (`message`), its payloads: also what
    /// the mailbox quota bounds.
    Mail,
    /// Delivered mail kept in `message_log`.
    Delivered,
    /// Procedures' code.
    Code,
    /// Workflows: inputs, outputs, errors, step records, messages, events,
    /// executors, queues and schedules.
    Workflows,
    /// The realm's own tables (measured after a procedure call writes).
    Tables,
    /// Proc logs kept on nodes (recorded when each proc ends).
    Logs,
}

impl StorageClass {
    /// Every class, in the order `realm show` lists them.
    pub const ALL: [StorageClass; 9] = [
        StorageClass::Kv,
        StorageClass::Names,
        StorageClass::Files,
        StorageClass::Mail,
        StorageClass::Delivered,
        StorageClass::Code,
        StorageClass::Workflows,
        StorageClass::Tables,
        StorageClass::Logs,
    ];

    /// Its name in messages, `realm show` and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageClass::Kv => "kv",
            StorageClass::Names => "names",
            StorageClass::Files => "files",
            StorageClass::Mail => "queued mail",
            StorageClass::Delivered => "delivered mail",
            StorageClass::Code => "code",
            StorageClass::Workflows => "workflows",
            StorageClass::Tables => "tables",
            StorageClass::Logs => "logs",
        }
    }

    /// Its counter on `realm` and its column of `realm_stored` and
    /// `realm_usage`.
    pub fn column(self) -> &'static str {
        match self {
            StorageClass::Kv => "kv_bytes",
            StorageClass::Names => "name_bytes",
            StorageClass::Files => "file_bytes",
            StorageClass::Mail => "mailbox_bytes",
            StorageClass::Delivered => "delivered_bytes",
            StorageClass::Code => "code_bytes",
            StorageClass::Workflows => "workflow_bytes",
            StorageClass::Tables => "tenant_bytes",
            StorageClass::Logs => "log_bytes",
        }
    }

    fn index(self) -> usize {
        Self::ALL
            .iter()
            .position(|c| *c == self)
            .unwrap_or_default()
    }
}

impl fmt::Display for StorageClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A realm's stored bytes by [`StorageClass`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stored([i64; 9]);

impl Stored {
    pub fn get(&self, class: StorageClass) -> i64 {
        self.0[class.index()]
    }

    /// Every class's bytes: what the storage quota bounds.
    pub fn total(&self) -> i64 {
        self.0.iter().sum()
    }

    /// Each class with its bytes, in [`StorageClass::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (StorageClass, i64)> + '_ {
        StorageClass::ALL.iter().map(|c| (*c, self.get(*c)))
    }

    /// Reads the classes from `row`'s columns `first..first + 9`, in
    /// [`StorageClass::ALL`]'s order.
    fn from_row(row: &tabos_store::Row, first: usize) -> Result<Stored> {
        let mut s = Stored::default();
        for i in 0..s.0.len() {
            s.0[i] = row.get(first + i)?;
        }
        Ok(s)
    }

    /// The class that grew the most from `before`, and by how much (none:
    /// nothing grew).
    fn grown_most(&self, before: &Stored) -> Option<(StorageClass, i64)> {
        self.iter()
            .map(|(c, b)| (c, b - before.get(c)))
            .filter(|(_, d)| *d > 0)
            .max_by_key(|(_, d)| *d)
    }
}

/// The class columns, comma-separated, in [`StorageClass::ALL`]'s order
/// (a literal, for statements the store caches: see the unit test).
macro_rules! class_columns {
    () => {
        "kv_bytes, name_bytes, file_bytes, mailbox_bytes, delivered_bytes, code_bytes, \
         workflow_bytes, tenant_bytes, log_bytes"
    };
}

/// A realm's metered counters with their quotas, read in a transaction.
#[derive(Debug, Clone, Copy)]
struct Meter {
    stored: Stored,
    procedures: i64,
    quota: Quota,
}

/// The realm's counters, or `None` when it is not metered (it has no
/// storage, mailbox or procedures quota: nothing is counted then, see
/// migration 030).
fn meter_tx(tx: &mut dyn Tx, realm: &str) -> Result<Option<Meter>> {
    let p = i64::from(tx.p_key().0);
    let sql = concat!(
        "SELECT procedures, quota_storage_mb, quota_mailbox_mb, quota_procedures, ",
        class_columns!(),
        " FROM realm WHERE p_key = $1 AND realm = $2 AND metered = $3"
    );
    let Some(row) = tx.query_opt(sql, params![p, realm, true])? else {
        return Ok(None);
    };
    Ok(Some(Meter {
        procedures: row.get(0)?,
        quota: Quota {
            storage_mb: row.get(1)?,
            mailbox_mb: row.get(2)?,
            procedures: row.get(3)?,
            ..Quota::default()
        },
        stored: Stored::from_row(&row, 4)?,
    }))
}

/// [`Error::OverQuota`] of `quota`: `used` (after the change) against
/// `limit`, in the quota's unit.
pub(crate) fn over_quota(quota: &'static str, used: i64, limit: i64, message: String) -> Error {
    Error::OverQuota {
        quota,
        used: u64::try_from(used).unwrap_or(0),
        limit: u64::try_from(limit).unwrap_or(0),
        message,
    }
}

/// `bytes` in MiB for a message: whole when whole, else to a tenth (to a
/// thousandth below a tenth, so that a small change does not read 0.0).
fn mib(bytes: i64) -> String {
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes.abs() < MIB / 10 {
        format!("{:.3} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

/// Runs `change` — a change of `realm`'s stored bytes, queued messages or
/// procedures — in this transaction and refuses it (an error: the caller's
/// transaction rolls back, so nothing changes) if it grew a metered usage
/// past its quota; a storage refusal names the class that grew the most
/// and by how much. A change that shrinks usage, or leaves it alone, passes
/// even over quota (an operator may lower a quota below what is used).
/// Nested calls are fine: each compares its own before and after.
pub fn metered<T>(
    tx: &mut dyn Tx,
    realm: &str,
    change: impl FnOnce(&mut dyn Tx) -> Result<T>,
) -> Result<T> {
    let Some(before) = meter_tx(tx, realm)? else {
        return change(tx);
    };
    let out = change(tx)?;
    let Some(after) = meter_tx(tx, realm)? else {
        return Ok(out);
    };
    let grew_past = |used: i64, was: i64, quota: Option<i64>, unit: i64| match quota {
        Some(q) if used > was && used > q.saturating_mul(unit) => Some(q),
        _ => None,
    };
    // The narrower quota first: queued mail is also stored bytes.
    let (mail, mail_was) = (
        after.stored.get(StorageClass::Mail),
        before.stored.get(StorageClass::Mail),
    );
    if let Some(q) = grew_past(mail, mail_was, after.quota.mailbox_mb, MIB) {
        return Err(over_quota(
            "mailbox",
            mail,
            q * MIB,
            format!(
                "realm {realm} is over its mailbox quota: {} used of {}",
                mib(mail),
                mib(q * MIB)
            ),
        ));
    }
    let (stored, stored_was) = (after.stored.total(), before.stored.total());
    if let Some(q) = grew_past(stored, stored_was, after.quota.storage_mb, MIB) {
        let what = match after.stored.grown_most(&before.stored) {
            Some((class, by)) => format!("; this change adds {} of {class}", mib(by)),
            None => String::new(),
        };
        return Err(over_quota(
            "storage",
            stored,
            q * MIB,
            format!(
                "realm {realm} is over its storage quota: {} used of {}{what}",
                mib(stored),
                mib(q * MIB)
            ),
        ));
    }
    if let Some(q) = grew_past(
        after.procedures,
        before.procedures,
        after.quota.procedures,
        1,
    ) {
        return Err(over_quota(
            "procedures",
            after.procedures,
            q,
            format!(
                "realm {realm} is over its procedures quota: {} used of {q}",
                after.procedures
            ),
        ));
    }
    Ok(out)
}

/// [`metered`] when `grows`, else `change` unchecked (its growth is still
/// counted): for records of failure, which must land even over quota.
pub fn metered_if<T>(
    grows: bool,
    tx: &mut dyn Tx,
    realm: &str,
    change: impl FnOnce(&mut dyn Tx) -> Result<T>,
) -> Result<T> {
    if grows {
        metered(tx, realm, change)
    } else {
        change(tx)
    }
}

/// Procedure body: refuses, before a change of several steps begins, one
/// that will add `bytes` of `class` to `realm`'s stored bytes past its
/// storage quota (its last step is [`metered`] too; this spares the work in
/// between and keeps the first step from committing anything). `bytes` ≤ 0
/// passes.
pub fn check_room_tx(tx: &mut dyn Tx, realm: &str, class: StorageClass, bytes: i64) -> Result<()> {
    if bytes <= 0 {
        return Ok(());
    }
    let Some(m) = meter_tx(tx, realm)? else {
        return Ok(());
    };
    let stored = m.stored.total();
    match m.quota.storage_mb {
        Some(q) if stored.saturating_add(bytes) > q.saturating_mul(MIB) => {
            Err(over_quota("storage", stored.saturating_add(bytes), q.saturating_mul(MIB), format!(
                "realm {realm} is over its storage quota: {} used of {}; this change adds {} of {class}",
                mib(stored),
                mib(q * MIB),
                mib(bytes)
            )))
        }
        _ => Ok(()),
    }
}

/// Procedure body: measures `realm`'s tenant tables again (after a
/// procedure call wrote to them), when the realm is metered.
pub fn measure_tenant_tables_tx(tx: &mut dyn Tx, realm: &str) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let metered = tx.query_opt(
        "SELECT 1 FROM realm WHERE p_key = $1 AND realm = $2 AND metered = $3",
        params![p, realm, true],
    )?;
    if metered.is_some() {
        let bytes = tx.tables_bytes(&tenant_prefix(realm))?;
        tx.execute(
            "UPDATE realm SET tenant_bytes = $3 WHERE p_key = $1 AND realm = $2",
            params![p, realm, bytes],
        )?;
    }
    Ok(())
}

/// A realm's usage against its quotas (the `realm_usage` view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub realm: String,
    pub live_procs: i64,
    pub cores: i64,
    pub mem_mb: i64,
    /// Bytes stored, every class's (see [`Quota::storage_mb`]).
    pub stored_bytes: i64,
    /// Bytes queued in mailboxes (also [`StorageClass::Mail`] of `stored`).
    pub mailbox_bytes: i64,
    /// Bytes stored by class.
    pub stored: Stored,
    /// Procedures installed.
    pub procedures: i64,
    pub quota: Quota,
    /// Host paths its native procs may ask to see.
    pub host_paths: Vec<String>,
    /// Its native procs share the host's network.
    pub host_network: bool,
    /// How its procs are placed.
    pub scheduler: Scheduler,
    /// When it was created, µs since the epoch.
    pub created_us: i64,
    /// How long the record of what is over is kept, in µs ([`Retention`];
    /// `None`: until pruned by hand).
    pub retention_us: Option<i64>,
    /// What its provenance records.
    pub provenance: Provenance,
}

/// Usage of `realm`, or of every realm when `None`, by name, on the read
/// path.
///
/// Read on each partition's own read connection, not through the read
/// path's views over every partition: the statement joins two views of a
/// dozen subqueries each, and SQLite took over a second to prepare it over
/// the `UNION ALL` of eight partitions (then 6 ms a call on that
/// connection) — a second of CPU for the first `tabos realm ls` or
/// metrics scrape on each pooled connection, and for every fresh node.
pub fn usage(store: &Store, realm: Option<&str>) -> Result<Vec<Usage>> {
    // realm_usage's class columns are named as the counters are.
    const SQL: &str = concat!(
        "SELECT u.realm, u.live_procs, u.quota_procs, u.cores, u.quota_cores, u.mem_mb, \
         u.quota_mem_mb, u.stored_bytes, u.quota_storage_mb, u.mailbox_bytes, \
         u.quota_mailbox_mb, u.procedures, u.quota_procedures, r.host_paths, r.host_network, \
         r.scheduler, r.created_us, ",
        class_columns!(),
        ", r.retention_us, r.provenance FROM realm_usage u \
         JOIN (SELECT p_key, realm AS name, host_paths, host_network, scheduler, created_us, \
               retention_us, provenance FROM realm) r \
           ON r.name = u.realm \
         WHERE r.p_key = $2 AND (CAST($1 AS TEXT) IS NULL OR u.realm = $1) ORDER BY u.realm"
    );
    let partitions: Vec<PKey> = match realm {
        Some(r) => vec![realm_partition(r, store.partitions())],
        None => (0..store.partitions()).map(PKey).collect(),
    };
    let mut usage = Vec::new();
    for p in partitions {
        let r = realm.map(str::to_string);
        let rows = store
            .read(p, move |tx| {
                Ok::<_, Error>(tx.query(SQL, params![r.clone(), i64::from(p.0)])?)
            })
            .wait()?;
        usage.extend(usage_of(&rows)?);
    }
    usage.sort_by(|a, b| a.realm.cmp(&b.realm));
    Ok(usage)
}

/// [`usage`]'s rows, read.
fn usage_of(rows: &tabos_store::Rows) -> Result<Vec<Usage>> {
    rows.rows
        .iter()
        .map(|r| {
            Ok(Usage {
                realm: r.get(0)?,
                live_procs: r.get(1)?,
                cores: r.get(3)?,
                mem_mb: r.get(5)?,
                stored_bytes: r.get(7)?,
                mailbox_bytes: r.get(9)?,
                procedures: r.get(11)?,
                quota: Quota {
                    procs: r.get(2)?,
                    cores: r.get(4)?,
                    mem_mb: r.get(6)?,
                    storage_mb: r.get(8)?,
                    mailbox_mb: r.get(10)?,
                    procedures: r.get(12)?,
                },
                host_paths: serde_json::from_str(&r.get::<String>(13)?)
                    .map_err(|e| Error::Invalid(format!("stored host paths: {e}")))?,
                host_network: r.get(14)?,
                scheduler: r.get::<String>(15)?.parse()?,
                created_us: r.get(16)?,
                stored: Stored::from_row(r, 17)?,
                retention_us: r.get(17 + StorageClass::ALL.len())?,
                provenance: r.get::<String>(18 + StorageClass::ALL.len())?.parse()?,
            })
        })
        .collect()
}

/// Sets the quotas of `realm`.
pub async fn set_quota(store: &Store, realm: &str, q: Quota) -> Result<()> {
    let r = realm.to_string();
    crate::call(store, realm, move |tx| set_quota_tx(tx, &r, &q)).await
}

/// Every realm's name, on the read path.
pub fn list(store: &Store) -> Result<Vec<String>> {
    let rows = store.query("SELECT realm FROM realm ORDER BY realm", &[])?;
    rows.rows.iter().map(|r| Ok(r.get(0)?)).collect()
}

/// Procedure body: the realm's scheduler, or `UnknownRealm`.
pub fn scheduler_tx(tx: &mut dyn Tx, realm: &str) -> Result<Scheduler> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT scheduler FROM realm WHERE p_key = $1 AND realm = $2",
        params![p, realm],
    )?;
    let name: String = row
        .ok_or_else(|| Error::NotFound(format!("unknown realm {realm:?}")))?
        .get(0)?;
    name.parse()
}

/// Procedure body: sets the realm's scheduler.
pub fn set_scheduler_tx(tx: &mut dyn Tx, realm: &str, scheduler: Scheduler) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE realm SET scheduler = $3 WHERE p_key = $1 AND realm = $2",
        params![p, realm, scheduler.as_str()],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("unknown realm {realm:?}")));
    }
    Ok(())
}

/// Procedure body: takes `n` (1..=16) consecutive sequence numbers, which
/// order the spawns and proc events of the transaction's partition — so of
/// each realm on it — and returns the first. Mostly from memory: see
/// [`crate::seqs`].
pub fn next_seq_tx(tx: &mut dyn Tx, n: i64) -> Result<i64> {
    crate::seqs::take(tx, n)
}

/// Creates a realm; blocks until committed.
pub fn create(store: &Store, realm: &str, scheduler: Scheduler) -> Result<()> {
    validate_realm(realm)?;
    let r = realm.to_string();
    let now = tabos_store::now_us();
    store.call(realm_partition(realm, store.partitions()), move |tx| {
        create_tx(tx, &r, scheduler, now)
    })
}

/// Changes a realm's scheduler; blocks until committed.
pub fn set_scheduler(store: &Store, realm: &str, scheduler: Scheduler) -> Result<()> {
    validate_realm(realm)?;
    let r = realm.to_string();
    store.call(realm_partition(realm, store.partitions()), move |tx| {
        set_scheduler_tx(tx, &r, scheduler)
    })
}

/// Change-feed channel told of every realm removed; the payload is its
/// name (nodes stop serving it).
pub const REMOVED_CHANNEL: &str = "realms/removed";

/// Procedure body: deletes `realm`'s row, last of the realm's removal
/// ([`crate::teardown`]), and announces it.
pub fn remove_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    let n = crate::delete_realm_rows(tx, realm, &["realm"])?;
    if n == 0 {
        return Err(Error::NotFound(format!("unknown realm {realm:?}")));
    }
    tx.notify(REMOVED_CHANNEL, realm)?;
    Ok(n)
}

/// Most host paths one proc may ask for.
pub const HOST_PATHS_MAX: usize = 32;
/// Longest host path.
pub const HOST_PATH_BYTES_MAX: usize = 4_096;

/// Checks a host path a proc asks to see: absolute, below `/` (never `/` itself: it would
/// cover the jail's own root), normal (no `.`, `..` or empty component, no
/// trailing `/`), no NUL, at most [`HOST_PATH_BYTES_MAX`] bytes.
pub fn validate_host_path(path: &str) -> Result<()> {
    let normal = path.len() > 1
        && path.starts_with('/')
        && !path.contains('\0')
        && path.len() <= HOST_PATH_BYTES_MAX
        && path[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if normal {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "host path {path:?} must be absolute, below / and normal (no ., .. or empty \
             component), at most {HOST_PATH_BYTES_MAX} bytes"
        )))
    }
}

/// Whether `path` is `prefix` or under it (both valid host paths). The
/// client has the same rule (`tabos_client::host_path_within`).
pub fn host_path_within(path: &str, prefix: &str) -> bool {
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literal column list is the classes' columns, in their order.
    #[test]
    fn class_columns_follow_the_classes() {
        let listed: Vec<&str> = class_columns!().split(',').map(str::trim).collect();
        let columns: Vec<&str> = StorageClass::ALL.iter().map(|c| c.column()).collect();
        assert_eq!(listed, columns);
    }
}
