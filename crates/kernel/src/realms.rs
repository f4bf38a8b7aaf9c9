//! Realms: a tenant's slice of the system.
//!
//! Table `realm(p_key, realm, scheduler, next_seq, created_us)`; a realm's row
//! and everything else of the realm (workers, procs, kv) live on
//! [`realm_partition`](crate::realm_partition). `next_seq` orders the realm's
//! spawns and proc events.

use tabos_store::{params, Store, Tx};

/// Change-feed channel told of every realm created; the payload is its
/// name (nodes start serving it).
pub const CREATED_CHANNEL: &str = "realms/created";

use crate::sched::Scheduler;
use crate::{realm_partition, validate_realm, Error, Result};

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
}

/// Procedure body: sets the quotas of `realm` (every field: `None` clears).
pub fn set_quota_tx(tx: &mut dyn Tx, realm: &str, q: &Quota) -> Result<()> {
    for (what, v) in [("procs", q.procs), ("cores", q.cores), ("memory", q.mem_mb)] {
        if v.is_some_and(|v| v < 0) {
            return Err(Error::Invalid(format!("a {what} quota is never negative")));
        }
    }
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE realm SET quota_procs = $3, quota_cores = $4, quota_mem_mb = $5 \
         WHERE p_key = $1 AND realm = $2",
        params![p, realm, q.procs, q.cores, q.mem_mb],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("unknown realm {realm:?}")));
    }
    Ok(())
}

/// Procedure body: the quotas of `realm`.
pub fn quota_tx(tx: &mut dyn Tx, realm: &str) -> Result<Quota> {
    Ok(spawn_policy_tx(tx, realm)?.1)
}

/// Procedure body: what a spawn in `realm` needs of its row, in one
/// statement: its scheduler and its quotas.
pub fn spawn_policy_tx(tx: &mut dyn Tx, realm: &str) -> Result<(Scheduler, Quota)> {
    let p = i64::from(tx.p_key().0);
    let row = tx
        .query_opt(
            "SELECT scheduler, quota_procs, quota_cores, quota_mem_mb FROM realm \
             WHERE p_key = $1 AND realm = $2",
            params![p, realm],
        )?
        .ok_or_else(|| Error::NotFound(format!("unknown realm {realm:?}")))?;
    let quota = Quota {
        procs: row.get(1)?,
        cores: row.get(2)?,
        mem_mb: row.get(3)?,
    };
    Ok((row.get::<String>(0)?.parse()?, quota))
}

/// A realm's usage against its quotas (the `realm_usage` view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub realm: String,
    pub live_procs: i64,
    pub cores: i64,
    pub mem_mb: i64,
    pub quota: Quota,
}

/// Usage of `realm`, or of every realm when `None`, by name, on the read
/// path.
pub fn usage(store: &Store, realm: Option<&str>) -> Result<Vec<Usage>> {
    let rows = store.query(
        "SELECT realm, live_procs, quota_procs, cores, quota_cores, mem_mb, quota_mem_mb \
         FROM realm_usage WHERE CAST($1 AS TEXT) IS NULL OR realm = $1 ORDER BY realm",
        params![realm],
    )?;
    rows.rows
        .iter()
        .map(|r| {
            Ok(Usage {
                realm: r.get(0)?,
                live_procs: r.get(1)?,
                cores: r.get(3)?,
                mem_mb: r.get(5)?,
                quota: Quota {
                    procs: r.get(2)?,
                    cores: r.get(4)?,
                    mem_mb: r.get(6)?,
                },
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

/// Procedure body: takes `n` consecutive sequence numbers of the realm and
/// returns the first.
pub fn next_seq_tx(tx: &mut dyn Tx, realm: &str, n: i64) -> Result<i64> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "UPDATE realm SET next_seq = next_seq + $3 WHERE p_key = $1 AND realm = $2 \
         RETURNING next_seq - $3",
        params![p, realm, n],
    )?;
    Ok(row
        .ok_or_else(|| Error::NotFound(format!("unknown realm {realm:?}")))?
        .get(0)?)
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
