//! Scheduling: workers and the three schedulers of the DBOS paper.
//!
//! Table `worker(p_key, realm, worker_id, node_id, cores, mem_mb,
//! unused_capacity, unused_mem_mb, heartbeat_us, state, draining)`: a worker
//! is a set of core slots of one node serving one realm; `unused_capacity`
//! is in cores; a draining worker (its node is drained) takes no new procs.
//! A worker is up while its node is: it is registered up, and marked down
//! when its node stops or is declared lost ([`crate::nodes`]) — there are
//! no heartbeats per worker (`heartbeat_us` is its registration's time).
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
//! registration ([`crate::procs::assign_deferred_tx`], which owns the proc
//! rows) — never by polling.

use tabos_store::{params, Tx};

use crate::ids::WorkerId;
use crate::{Error, Result};

pub use crate::realms::Scheduler;

// The three schedulers' worker choice. $1 p_key, $2 realm, $3 cores, $4 mem_mb,
// $5 home node (locality only).
// A draining worker (its node is being drained) is never picked.
const PICK_FIFO: &str = "SELECT worker_id FROM worker \
     WHERE p_key = $1 AND realm = $2 AND state = 'up' AND draining = 0 \
       AND unused_capacity >= $3 AND unused_mem_mb >= $4 \
     LIMIT 1";
// Locality: the home node's worker while the home node serves the realm
// (the proc waits for room there); any worker with room once it does not
// — lost, left, draining, or never there — so a lost node's procs are
// placed again.
const PICK_LOCALITY: &str = "SELECT worker_id FROM worker \
     WHERE p_key = $1 AND realm = $2 AND state = 'up' AND draining = 0 \
       AND unused_capacity >= $3 AND unused_mem_mb >= $4 \
       AND (node_id = $5 OR NOT EXISTS (SELECT 1 FROM worker AS home \
            WHERE home.p_key = $1 AND home.realm = $2 AND home.node_id = $5 \
              AND home.state = 'up' AND home.draining = 0)) \
     LIMIT 1";
const PICK_LEAST_LOADED: &str = "SELECT worker_id FROM worker \
     WHERE p_key = $1 AND realm = $2 AND state = 'up' AND draining = 0 \
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

/// A worker's registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    pub worker_id: WorkerId,
    pub node_id: String,
    pub cores: i64,
    pub mem_mb: i64,
}

/// Procedure body: registers (or re-registers) a worker of `realm` whose
/// live procs already hold `held_cores` and `held_mem_mb` of it (counted
/// by [`crate::procs::register_worker_tx`], which owns those rows): its
/// free capacity is its size minus that.
pub fn upsert_worker_tx(
    tx: &mut dyn Tx,
    realm: &str,
    w: &WorkerSpec,
    held_cores: i64,
    held_mem_mb: i64,
    now_us: i64,
) -> Result<()> {
    if w.cores <= 0 || w.mem_mb < 0 {
        return Err(Error::Invalid(format!(
            "a worker needs cores > 0 and mem_mb >= 0, not {} and {}",
            w.cores, w.mem_mb
        )));
    }
    crate::ids::validate_name("node id", &w.node_id)?;
    crate::realms::scheduler_tx(tx, realm)?; // the realm must exist
    let p = i64::from(tx.p_key().0);
    let unused = (w.cores - held_cores).max(0);
    let unused_mem = (w.mem_mb - held_mem_mb).max(0);
    tx.execute(
        "INSERT INTO worker (p_key, realm, worker_id, node_id, cores, mem_mb, unused_capacity, \
                             unused_mem_mb, heartbeat_us, state) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'up') \
         ON CONFLICT (p_key, realm, worker_id) DO UPDATE SET \
           node_id = excluded.node_id, cores = excluded.cores, mem_mb = excluded.mem_mb, \
           unused_capacity = excluded.unused_capacity, unused_mem_mb = excluded.unused_mem_mb, \
           heartbeat_us = excluded.heartbeat_us, state = 'up', given_back_us = NULL",
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
    Ok(())
}

/// Procedure body: marks down every worker of node `node_id` in `realm`
/// that is up (its node was declared lost), and returns them.
pub fn node_workers_down_tx(tx: &mut dyn Tx, realm: &str, node_id: &str) -> Result<Vec<WorkerId>> {
    set_node_workers_tx(tx, realm, node_id, "up", "down")
}

/// Procedure body: marks up again every worker of node `node_id` in
/// `realm` that is down but whose procs were not given back (its node
/// returned and kept them), and returns them.
pub fn node_workers_up_tx(tx: &mut dyn Tx, realm: &str, node_id: &str) -> Result<Vec<WorkerId>> {
    set_node_workers_tx(tx, realm, node_id, "down", "up")
}

/// Procedure body: the workers of node `node_id` in `realm` that are down
/// with their procs not yet given back, now marked given back at `now_us`
/// (the caller gives the procs back in the same transaction).
pub fn give_back_workers_tx(
    tx: &mut dyn Tx,
    realm: &str,
    node_id: &str,
    now_us: i64,
) -> Result<Vec<WorkerId>> {
    let p = i64::from(tx.p_key().0);
    let rows = tx.query(
        "UPDATE worker SET given_back_us = $4 WHERE p_key = $1 AND realm = $2 AND node_id = $3 \
           AND state = 'down' AND given_back_us IS NULL RETURNING worker_id",
        params![p, realm, node_id, now_us],
    )?;
    ids_sorted(&rows)
}

/// Procedure body: the workers of node `node_id` in `realm` whose procs
/// were given back.
pub fn given_back_workers_tx(tx: &mut dyn Tx, realm: &str, node_id: &str) -> Result<Vec<WorkerId>> {
    let rows = tx.query(
        "SELECT worker_id FROM worker WHERE p_key = $1 AND realm = $2 AND node_id = $3 \
           AND given_back_us IS NOT NULL ORDER BY worker_id",
        params![crate::p_key(tx), realm, node_id],
    )?;
    ids_sorted(&rows)
}

fn ids_sorted(rows: &tabos_store::Rows) -> Result<Vec<WorkerId>> {
    let mut out = rows
        .iter()
        .map(|r| r.get::<String>(0).map(WorkerId))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // RETURNING's order is unspecified; callers see a stable one.
    out.sort();
    Ok(out)
}

fn set_node_workers_tx(
    tx: &mut dyn Tx,
    realm: &str,
    node_id: &str,
    from: &str,
    to: &str,
) -> Result<Vec<WorkerId>> {
    let p = i64::from(tx.p_key().0);
    let rows = tx.query(
        "UPDATE worker SET state = $5 WHERE p_key = $1 AND realm = $2 AND node_id = $3 \
           AND state = $4 AND given_back_us IS NULL RETURNING worker_id",
        params![p, realm, node_id, from, to],
    )?;
    ids_sorted(&rows)
}

/// Procedure body: every worker of node `node_id` in `realm`, up or down.
pub fn node_workers_tx(tx: &mut dyn Tx, realm: &str, node_id: &str) -> Result<Vec<WorkerId>> {
    let rows = tx.query(
        "SELECT worker_id FROM worker WHERE p_key = $1 AND realm = $2 AND node_id = $3 \
         ORDER BY worker_id",
        params![crate::p_key(tx), realm, node_id],
    )?;
    Ok(rows
        .iter()
        .map(|r| r.get::<String>(0).map(WorkerId))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// Procedure body: marks every worker of node `node_id` in `realm` as
/// draining (`on`) or not, and returns them: a draining worker is never
/// picked, and its procd steals nothing ([`draining_tx`]).
pub fn set_draining_tx(
    tx: &mut dyn Tx,
    realm: &str,
    node_id: &str,
    on: bool,
) -> Result<Vec<WorkerId>> {
    let p = i64::from(tx.p_key().0);
    let rows = tx.query(
        "UPDATE worker SET draining = $4 WHERE p_key = $1 AND realm = $2 AND node_id = $3 \
         RETURNING worker_id",
        params![p, realm, node_id, i64::from(on)],
    )?;
    let mut out = rows
        .iter()
        .map(|r| r.get::<String>(0).map(WorkerId))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    out.sort();
    Ok(out)
}

/// Procedure body: whether `worker` is draining (an unknown worker is not).
pub fn draining_tx(tx: &mut dyn Tx, realm: &str, worker: &WorkerId) -> Result<bool> {
    let row = tx.query_opt(
        "SELECT draining FROM worker WHERE p_key = $1 AND realm = $2 AND worker_id = $3",
        params![crate::p_key(tx), realm, worker.as_str()],
    )?;
    Ok(match row {
        Some(r) => r.get::<i64>(0)? != 0,
        None => false,
    })
}

/// Procedure body: the node `worker` of `realm` belongs to (`None`: no
/// such worker).
pub fn node_of_tx(tx: &mut dyn Tx, realm: &str, worker: &WorkerId) -> Result<Option<String>> {
    let row = tx.query_opt(
        "SELECT node_id FROM worker WHERE p_key = $1 AND realm = $2 AND worker_id = $3",
        params![crate::p_key(tx), realm, worker.as_str()],
    )?;
    Ok(row.map(|r| r.get::<String>(0)).transpose()?)
}

/// Procedure body: takes `worker` down (its node stops); returns whether
/// it was up.
pub fn down_tx(tx: &mut dyn Tx, realm: &str, worker: &WorkerId) -> Result<bool> {
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "UPDATE worker SET state = 'down' WHERE p_key = $1 AND realm = $2 AND worker_id = $3 \
           AND state = 'up'",
        params![p, realm, worker.as_str()],
    )?;
    Ok(n == 1)
}

/// Payload on a worker's channel when its node returns to find its procs
/// given back ([`crate::procs::lapsed_tx`]): its procd stops what it
/// still runs there and registers the worker again.
pub const LAPSED: &str = "lapsed";

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
