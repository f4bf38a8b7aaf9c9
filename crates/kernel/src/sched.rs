//! Scheduling: workers and the three schedulers of the DBOS paper.
//!
//! Table `worker(p_key, realm, worker_id, node_id, cores, mem_mb,
//! unused_capacity, unused_mem_mb, heartbeat_us, state)`: a worker is a set of
//! core slots of one node serving one realm; `unused_capacity` is in cores.
//! Invariant (a CHECK constraint on both backends): `0 <= unused_capacity <=
//! cores` and `0 <= unused_mem_mb <= mem_mb`, so capacity can never go
//! negative even if a procedure had a bug.
//!
//! The schedulers are procedures over that table (DBOS §4.2). Each picks one
//! worker of the proc's realm with room for it, and they differ by a line of
//! SQL, as in the paper:
//!
//! * FIFO (Figure 2): the first worker with room, `LIMIT 1`.
//! * locality-aware (Figure 3): the same, restricted to the proc's home node
//!   (`AND node_id = $home`); with no room there the proc is *deferred* — it
//!   is inserted with no worker and waits.
//! * least-loaded (Figure 4): the same as FIFO plus
//!   `ORDER BY unused_capacity DESC`.
//!
//! A proc that finds no room is deferred under every scheduler (the paper
//! leaves that case out of FIFO). Deferred procs are assigned, in spawn
//! order, by the transaction that frees capacity — a proc's exit or a worker's
//! registration ([`assign_deferred_tx`]) — never by polling.

use std::fmt;
use std::str::FromStr;

use tabos_store::{params, Store, Tx};

use crate::ids::WorkerId;
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

// The three schedulers' worker choice. $1 p_key, $2 realm, $3 cores, $4 mem_mb,
// $5 home node (locality only).
const PICK_FIFO: &str = "SELECT worker_id FROM worker \
     WHERE p_key = $1 AND realm = $2 AND state = 'up' \
       AND unused_capacity >= $3 AND unused_mem_mb >= $4 \
     LIMIT 1";
const PICK_LOCALITY: &str = "SELECT worker_id FROM worker \
     WHERE p_key = $1 AND realm = $2 AND state = 'up' \
       AND unused_capacity >= $3 AND unused_mem_mb >= $4 \
       AND node_id = $5 \
     LIMIT 1";
const PICK_LEAST_LOADED: &str = "SELECT worker_id FROM worker \
     WHERE p_key = $1 AND realm = $2 AND state = 'up' \
       AND unused_capacity >= $3 AND unused_mem_mb >= $4 \
     ORDER BY unused_capacity DESC \
     LIMIT 1";

/// What a proc asks of a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub cores: i64,
    pub mem_mb: i64,
    /// The locality scheduler's home node; other schedulers ignore it.
    pub home_node: Option<String>,
}

impl Need {
    /// What a proc of `class` must be given: LC procs reserve their cores
    /// and memory; BE procs reserve nothing (any live worker will do).
    pub fn of(
        class: crate::procs::Class,
        cores: i64,
        mem_mb: i64,
        home_node: Option<String>,
    ) -> Need {
        match class {
            crate::procs::Class::Lc => Need {
                cores,
                mem_mb,
                home_node,
            },
            crate::procs::Class::Be => Need {
                cores: 0,
                mem_mb: 0,
                home_node,
            },
        }
    }

    /// Whether there is anything to reserve.
    pub fn reserves(&self) -> bool {
        self.cores > 0 || self.mem_mb > 0
    }
}

/// Procedure body: the scheduler's choice of worker for `need`, or `None`
/// (defer). Does not reserve anything; see [`reserve_tx`].
pub fn pick_tx(
    tx: &mut dyn Tx,
    scheduler: Scheduler,
    realm: &str,
    need: &Need,
) -> Result<Option<WorkerId>> {
    let p = i64::from(tx.p_key().0);
    let row = match (scheduler, &need.home_node) {
        (Scheduler::Fifo, _) | (Scheduler::Locality, None) => {
            tx.query_opt(PICK_FIFO, params![p, realm, need.cores, need.mem_mb])?
        }
        (Scheduler::Locality, Some(home)) => tx.query_opt(
            PICK_LOCALITY,
            params![p, realm, need.cores, need.mem_mb, home.as_str()],
        )?,
        (Scheduler::LeastLoaded, _) => tx.query_opt(
            PICK_LEAST_LOADED,
            params![p, realm, need.cores, need.mem_mb],
        )?,
    };
    Ok(row.map(|r| r.get::<String>(0).map(WorkerId)).transpose()?)
}

/// Procedure body: takes `need`'s cores and memory from `worker`. Fails if it
/// no longer has room (the guard keeps capacity from going negative).
pub fn reserve_tx(tx: &mut dyn Tx, realm: &str, worker: &WorkerId, need: &Need) -> Result<()> {
    if !try_reserve_tx(tx, realm, worker, need)? {
        return Err(Error::Invalid(format!(
            "worker {worker} has no room for {} cores and {} MB",
            need.cores, need.mem_mb
        )));
    }
    Ok(())
}

/// Procedure body: [`reserve_tx`], answering `false` when there is no room
/// (or the worker is down) instead of failing.
pub fn try_reserve_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    need: &Need,
) -> Result<bool> {
    if !need.reserves() {
        return Ok(true);
    }
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE worker SET unused_capacity = unused_capacity - $4, unused_mem_mb = unused_mem_mb - $5 \
         WHERE p_key = $1 AND realm = $2 AND worker_id = $3 AND state = 'up' \
           AND unused_capacity >= $4 AND unused_mem_mb >= $5",
        params![p, realm, worker.as_str(), need.cores, need.mem_mb],
    )?;
    Ok(n == 1)
}

/// Procedure body: gives `cores` and `mem_mb` back to `worker` (capped at its
/// size, so a double release cannot inflate capacity).
pub fn release_tx(
    tx: &mut dyn Tx,
    realm: &str,
    worker: &WorkerId,
    cores: i64,
    mem_mb: i64,
) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    tx.execute(
        "UPDATE worker SET \
           unused_capacity = CASE WHEN unused_capacity + $4 > cores THEN cores ELSE unused_capacity + $4 END, \
           unused_mem_mb = CASE WHEN unused_mem_mb + $5 > mem_mb THEN mem_mb ELSE unused_mem_mb + $5 END \
         WHERE p_key = $1 AND realm = $2 AND worker_id = $3",
        params![p, realm, worker.as_str(), cores, mem_mb],
    )?;
    Ok(())
}

/// Most deferred procs one transaction looks at when capacity frees.
pub const DEFERRED_SCAN_MAX: i64 = 64;

/// Procedure body: assigns deferred procs of `realm`, oldest first, to
/// workers with room; returns the `(pid, worker)` pairs assigned. Called by
/// every transaction that frees capacity.
pub fn assign_deferred_tx(
    tx: &mut dyn Tx,
    realm: &str,
    now_us: i64,
) -> Result<Vec<(String, WorkerId)>> {
    let p = i64::from(tx.p_key().0);
    let scheduler = crate::realms::scheduler_tx(tx, realm)?;
    // The LIMIT is in the text, not a parameter: SQLite (3.47+) plans with a
    // bound LIMIT's value and so re-prepares such a statement on every call.
    const _: () = assert!(DEFERRED_SCAN_MAX == 64);
    let deferred = tx.query(
        "SELECT pid, cores, mem_mb, home_node, class FROM proc \
         WHERE p_key = $1 AND realm = $2 AND worker_id IS NULL AND state = 'spawned' \
         ORDER BY seq LIMIT 64",
        params![p, realm],
    )?;
    let mut assigned = Vec::new();
    // Needs that found no worker: a later proc needing at least as much
    // (with the same home) cannot fit either, so it is not asked again.
    // Keeps an exit behind a long queue of equal procs at two picks.
    let mut unplaceable: Vec<Need> = Vec::new();
    for row in &deferred {
        let pid: String = row.get(0)?;
        let class: crate::procs::Class = row.get::<String>(4)?.parse()?;
        let need = Need::of(class, row.get(1)?, row.get(2)?, row.get(3)?);
        if unplaceable.iter().any(|u| {
            u.home_node == need.home_node && need.cores >= u.cores && need.mem_mb >= u.mem_mb
        }) {
            continue;
        }
        let Some(worker) = pick_tx(tx, scheduler, realm, &need)? else {
            unplaceable.push(need);
            continue;
        };
        {
            reserve_tx(tx, realm, &worker, &need)?;
            tx.execute(
                "UPDATE proc SET worker_id = $4, assign_us = $5 \
                 WHERE p_key = $1 AND realm = $2 AND pid = $3",
                params![p, realm, pid.as_str(), worker.as_str(), now_us],
            )?;
            crate::procs::event_tx(tx, realm, &pid, "assign", Some(worker.as_str()), now_us)?;
            crate::procs::notify_assigned(tx, realm, &pid, &worker)?;
            assigned.push((pid, worker));
        }
    }
    Ok(assigned)
}

/// A worker's registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    pub worker_id: WorkerId,
    pub node_id: String,
    pub cores: i64,
    pub mem_mb: i64,
}

/// Procedure body: registers (or re-registers) a worker of `realm`. Its free
/// capacity is its size minus what the realm's live procs on it hold; then
/// deferred procs are assigned to the new room.
pub fn register_worker_tx(
    tx: &mut dyn Tx,
    realm: &str,
    w: &WorkerSpec,
    now_us: i64,
) -> Result<Vec<(String, WorkerId)>> {
    if w.cores <= 0 || w.mem_mb < 0 {
        return Err(Error::Invalid(format!(
            "a worker needs cores > 0 and mem_mb >= 0, not {} and {}",
            w.cores, w.mem_mb
        )));
    }
    crate::ids::validate_name("node id", &w.node_id)?;
    crate::realms::scheduler_tx(tx, realm)?; // the realm must exist
    let p = i64::from(tx.p_key().0);
    let held = tx.query_one(
        "SELECT COALESCE(SUM(cores), 0), COALESCE(SUM(mem_mb), 0) FROM proc \
         WHERE p_key = $1 AND realm = $2 AND worker_id = $3 AND class = 'LC' \
           AND state IN ('spawned', 'claimed', 'running')",
        params![p, realm, w.worker_id.as_str()],
    )?;
    let (held_cores, held_mem): (i64, i64) = (held.get(0)?, held.get(1)?);
    let unused = (w.cores - held_cores).max(0);
    let unused_mem = (w.mem_mb - held_mem).max(0);
    tx.execute(
        "INSERT INTO worker (p_key, realm, worker_id, node_id, cores, mem_mb, unused_capacity, \
                             unused_mem_mb, heartbeat_us, state) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'up') \
         ON CONFLICT (p_key, realm, worker_id) DO UPDATE SET \
           node_id = excluded.node_id, cores = excluded.cores, mem_mb = excluded.mem_mb, \
           unused_capacity = excluded.unused_capacity, unused_mem_mb = excluded.unused_mem_mb, \
           heartbeat_us = excluded.heartbeat_us, state = 'up'",
        params![
            p,
            realm,
            w.worker_id.as_str(),
            w.node_id.as_str(),
            w.cores,
            w.mem_mb,
            unused,
            unused_mem,
            now_us
        ],
    )?;
    assign_deferred_tx(tx, realm, now_us)
}

/// Registers a worker; blocks until committed.
pub fn register_worker(
    store: &Store,
    realm: &str,
    w: &WorkerSpec,
) -> Result<Vec<(String, WorkerId)>> {
    validate_realm(realm)?;
    let (r, w) = (realm.to_string(), w.clone());
    let now = tabos_store::now_us();
    store.call(realm_partition(realm, store.partitions()), move |tx| {
        register_worker_tx(tx, &r, &w, now)
    })
}

/// Procedure body: records that `worker` is alive at `now_us`.
pub fn heartbeat_tx(tx: &mut dyn Tx, realm: &str, worker: &WorkerId, now_us: i64) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE worker SET heartbeat_us = $4 WHERE p_key = $1 AND realm = $2 AND worker_id = $3",
        params![p, realm, worker.as_str(), now_us],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!(
            "no worker {worker} in realm {realm:?}"
        )));
    }
    Ok(())
}

/// What [`expire_tx`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expired {
    pub workers: Vec<WorkerId>,
    /// Live procs of those workers marked failed.
    pub failed: Vec<String>,
    /// Restartable procs put back in the queue.
    pub requeued: Vec<String>,
}

/// Procedure body: every worker of `realm` whose last heartbeat is older than
/// `now_us - ttl_us` is marked down; its live procs are failed ("node lost")
/// and their waiters woken, or — if spawned restartable — re-queued and
/// placed again by the realm's scheduler.
pub fn expire_tx(tx: &mut dyn Tx, realm: &str, now_us: i64, ttl_us: i64) -> Result<Expired> {
    let p = i64::from(tx.p_key().0);
    let lapsed = tx.query(
        "SELECT worker_id FROM worker WHERE p_key = $1 AND realm = $2 AND state = 'up' \
           AND heartbeat_us < $3",
        params![p, realm, now_us - ttl_us],
    )?;
    let mut out = Expired::default();
    for row in &lapsed {
        let worker = WorkerId(row.get(0)?);
        tx.execute(
            "UPDATE worker SET state = 'down' WHERE p_key = $1 AND realm = $2 AND worker_id = $3",
            params![p, realm, worker.as_str()],
        )?;
        let live = tx.query(
            "SELECT pid, restartable FROM proc WHERE p_key = $1 AND realm = $2 AND worker_id = $3 \
               AND state IN ('spawned', 'claimed', 'running')",
            params![p, realm, worker.as_str()],
        )?;
        for r in &live {
            let pid: String = r.get(0)?;
            if r.get::<bool>(1)? {
                tx.execute(
                    "UPDATE proc SET state = 'spawned', worker_id = NULL, assign_us = NULL, \
                       claim_us = NULL, start_us = NULL \
                     WHERE p_key = $1 AND realm = $2 AND pid = $3",
                    params![p, realm, pid.as_str()],
                )?;
                crate::procs::event_tx(tx, realm, &pid, "requeue", Some(worker.as_str()), now_us)?;
                tx.notify(&crate::procs::proc_channel(realm, &pid), "spawned")?;
                out.requeued.push(pid);
            } else {
                let detail = format!("node of worker {worker} lost (no heartbeat)");
                crate::procs::exited_tx(
                    tx,
                    realm,
                    &crate::ids::Pid(pid.clone()),
                    crate::procs::State::Failed,
                    None,
                    Some(&detail),
                    now_us,
                )?;
                out.failed.push(pid);
            }
        }
        out.workers.push(worker);
    }
    if !out.workers.is_empty() {
        assign_deferred_tx(tx, realm, now_us)?;
    }
    Ok(out)
}

/// Procedure body: the most cores and memory any live worker of `realm`
/// has (`None`: no live worker).
pub fn largest_worker_tx(tx: &mut dyn Tx, realm: &str) -> Result<Option<(i64, i64)>> {
    let row = tx.query_one(
        "SELECT max(cores), max(mem_mb) FROM worker WHERE p_key = $1 AND realm = $2 AND state = 'up'",
        params![crate::p_key(tx), realm],
    )?;
    Ok(
        match (row.get::<Option<i64>>(0)?, row.get::<Option<i64>>(1)?) {
            (Some(c), Some(m)) => Some((c, m)),
            _ => None,
        },
    )
}
