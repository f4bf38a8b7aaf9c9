//! The cluster's nodes (issue 19, item 1; issue 35): who they are, what
//! they offer, where their API listens, and whether they are alive.
//!
//! Table `node` (migrations 020, 021, 022, 028), on partition 0
//! ([`CLUSTER_PARTITION`]). A node registers when it starts serving
//! ([`register_tx`]), renews its lease once per heartbeat
//! ([`heartbeat_tx`]: the one write an idle node makes), and on a clean
//! shutdown records that it left ([`leave`]) — so a stop is told apart
//! from a loss. A node id is one live process: the latest to register
//! takes the row over (a node restarted right after a crash must not wait
//! out its old lease), and the process it replaced learns it at its next
//! heartbeat, which fails.
//!
//! ## Leases, loss and give-back
//!
//! A lease is written on the database's clock (`Tx::clock_us`) as
//! `expires_us = heartbeat + lease_us`, with the node's own `lease_us`
//! and `grace_us`: nodes' clocks need not agree, and nodes with different
//! heartbeat periods are each judged by their own. Judging is the cluster
//! leader's, in its heartbeat's transaction, once per period:
//!
//! * [`declare_lost_tx`]: a node whose lease lapsed is *lost* (`lost_us`)
//!   — but only once the leader itself has reached the database for as
//!   long as that node's lease (`healthy_since_us`): after an outage that
//!   every node saw, every lease looks lapsed and none is lost; they renew
//!   first. The caller marks a lost node's workers down in each realm
//!   (nothing new is placed there) and places again what was assigned but
//!   never claimed there.
//! * [`due_give_back_tx`]: a lost node silent past its `grace_us` and a
//!   margin ([`GIVE_BACK_MARGIN_LEASES`] leases) has its procs *given back*
//!   (`given_back_us`; the caller re-queues the restartable ones and fails
//!   the others), since by then the node, if it lives, has stopped its
//!   restartable procs itself (it does so once it has failed to renew for
//!   its grace): a restartable proc never runs twice.
//!
//! A node that was lost and renews again *returns*: [`heartbeat_tx`]
//! tells it whether its procs were given back meanwhile (then it stops
//! what it still runs) or not (it keeps them), and records in `note`
//! which, for `tabos nodes`.
//!
//! An operator drains a node ([`set_draining`], column `draining_us`,
//! migration 021): it stays up and finishes what it runs, but takes no new
//! procs; [`crate::procs::drain_node`] marks its workers in every realm and
//! places their unclaimed procs elsewhere.

use std::collections::BTreeMap;
use std::fmt;

use tabos_store::{params, PKey, Row, Store, Tx};

use crate::ids::validate_name;
use crate::{Error, Result};

/// Where the cluster's own rows live.
pub const CLUSTER_PARTITION: PKey = PKey(0);
/// Channel told of every node that registers, leaves or is drained or put
/// back (payload: its id): the cluster manager re-plans.
pub const CHANGED_CHANNEL: &str = "nodes/changed";
/// Channel told of every heartbeat (payload: the node's id): what a
/// dashboard's utilisation history is sampled on, so that it is woken by
/// the cluster's own clock rather than one of its own.
pub const HEARTBEAT_CHANNEL: &str = "nodes/heartbeat";
/// Most labels on one node.
pub const LABELS_MAX: usize = 32;
/// Longest label key or value, in bytes.
pub const LABEL_BYTES_MAX: usize = 128;
/// Longest advertised address, in bytes.
pub const ADDRESS_BYTES_MAX: usize = 256;
/// Most nodes [`list`] returns.
pub const NODES_LIST_MAX: usize = 4_096;
/// How long a node that left stays listed: a single machine restarted with
/// a new id each time would otherwise list every past run.
pub const LEFT_KEEP_US: i64 = 24 * 3_600 * 1_000_000;
/// Leases of a lost node's own, beyond its grace, before its procs are
/// given back: the time it may take the node to notice its grace has
/// passed (a heartbeat period) and to stop its procs.
pub const GIVE_BACK_MARGIN_LEASES: i64 = 2;
/// Longest note kept on a node, in bytes.
pub const NOTE_BYTES_MAX: usize = 512;
/// Most nodes judged in one heartbeat (the rest in the next).
pub const JUDGED_MAX: i64 = 64;

/// A node's lease terms, which it registers and renews with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// How long a renewal holds.
    pub lease_us: i64,
    /// How long it may go without renewing before it stops its restartable
    /// procs (and after which, with a margin, the cluster gives them back).
    pub grace_us: i64,
}

/// What a node offers, as it registers.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    pub node_id: String,
    /// `host:port` of its API, or empty.
    pub address: String,
    pub cores: i64,
    pub mem_mb: i64,
    pub labels: BTreeMap<String, String>,
    /// Id of its block store, as file extents name it ('' for none).
    pub block_store: String,
    /// Its cores are the cluster manager's to grant to elastic realms
    /// (`tabos up --elastic`); else it serves every static realm.
    pub elastic: bool,
}

/// A node's state as read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Serving, its lease held.
    Up,
    /// Stopped cleanly.
    Left,
    /// Its lease lapsed without a clean stop.
    Lost,
    /// Up, but drained by an operator: it finishes what it runs and takes
    /// nothing new.
    Draining,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Left => "left",
            NodeState::Lost => "lost",
            NodeState::Draining => "draining",
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub node_id: String,
    pub address: String,
    pub cores: i64,
    pub mem_mb: i64,
    pub labels: BTreeMap<String, String>,
    pub state: NodeState,
    pub started_us: i64,
    pub heartbeat_us: i64,
    pub left_us: Option<i64>,
    /// When an operator drained it, if it is draining.
    pub draining_us: Option<i64>,
    /// Its lease as it renewed it last, on the database's clock.
    pub expires_us: i64,
    /// When the cluster declared it lost, and gave its procs back.
    pub lost_us: Option<i64>,
    pub given_back_us: Option<i64>,
    /// What happened when it last returned after being lost.
    pub note: String,
    /// Its cores are granted to elastic realms (see [`Registration`]).
    pub elastic: bool,
    /// Cores busy at its last heartbeat (measured).
    pub busy_cores: f64,
    /// Memory it and its procs used at its last heartbeat (measured).
    pub mem_used_bytes: Option<i64>,
    /// Bytes in use in its block store at its last heartbeat.
    pub disk_used_bytes: Option<i64>,
    /// The realms it serves, with the cores its worker there offers and
    /// those not taken by live LC procs.
    pub realms: Vec<NodeRealm>,
}

/// What a node measured of itself, carried by its heartbeat.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Measured {
    /// Cores busy over the last sample.
    pub busy_cores: f64,
    /// Memory the node process and its procs use, bytes.
    pub mem_used_bytes: Option<i64>,
    /// Bytes in use in its block store (none: it has none).
    pub disk_used_bytes: Option<i64>,
}

impl Measured {
    /// Busy cores alone (memory unmeasured).
    pub fn cores(busy_cores: f64) -> Measured {
        Measured {
            busy_cores,
            mem_used_bytes: None,
            disk_used_bytes: None,
        }
    }
}

/// A node's worker in one realm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRealm {
    pub realm: String,
    pub cores: i64,
    pub unused_cores: i64,
    /// Its live procs there (spawned on it, claimed or running).
    pub procs: i64,
}

impl Registration {
    pub fn validate(&self) -> Result<()> {
        validate_name("node id", &self.node_id)?;
        if self.cores <= 0 || self.mem_mb < 0 {
            return Err(Error::Invalid(format!(
                "a node offers at least one core and no negative memory, not {} cores and {} MB",
                self.cores, self.mem_mb
            )));
        }
        if self.block_store.len() > ADDRESS_BYTES_MAX
            || !self.block_store.chars().all(|c| c.is_ascii_hexdigit())
        {
            return Err(Error::Invalid(format!(
                "a block store id is at most {ADDRESS_BYTES_MAX} hex digits"
            )));
        }
        if self.address.len() > ADDRESS_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "a node's address is at most {ADDRESS_BYTES_MAX} bytes"
            )));
        }
        if self.labels.len() > LABELS_MAX {
            return Err(Error::Invalid(format!(
                "a node has at most {LABELS_MAX} labels, not {}",
                self.labels.len()
            )));
        }
        for (k, v) in &self.labels {
            validate_name("label key", k)?;
            if v.len() > LABEL_BYTES_MAX || v.chars().any(char::is_control) {
                return Err(Error::Invalid(format!(
                    "label {k}: a value is at most {LABEL_BYTES_MAX} bytes, without control characters"
                )));
            }
        }
        Ok(())
    }
}

/// Procedure body: registers (or re-registers, after a restart) node `r`
/// as up, its incarnation `started_us`, with lease `terms` from now on the
/// database's clock.
pub fn register_tx(
    tx: &mut dyn Tx,
    r: &Registration,
    started_us: i64,
    terms: LeaseTerms,
) -> Result<()> {
    r.validate()?;
    terms.validate()?;
    let p = i64::from(tx.p_key().0);
    let now = tx.clock_us()?;
    tx.execute(
        "DELETE FROM node WHERE p_key = $1 AND state = 'left' AND left_us < $2",
        params![p, now - LEFT_KEEP_US],
    )?;
    let labels =
        serde_json::to_string(&r.labels).map_err(|e| Error::Invalid(format!("labels: {e}")))?;
    tx.execute(
        "INSERT INTO node (p_key, node_id, address, cores, mem_mb, labels, state, started_us, \
                           heartbeat_us, left_us, busy_cores, block_store, elastic, lease_us, \
                           expires_us, grace_us, lost_us, given_back_us, note) \
         VALUES ($1, $2, $3, $4, $5, $6, 'up', $7, $10, NULL, 0, $8, $9, $11, $13, $12, \
                 NULL, NULL, '') \
         ON CONFLICT (p_key, node_id) DO UPDATE SET address = excluded.address, \
           block_store = excluded.block_store, elastic = excluded.elastic, \
           cores = excluded.cores, mem_mb = excluded.mem_mb, labels = excluded.labels, \
           state = 'up', started_us = excluded.started_us, heartbeat_us = excluded.heartbeat_us, \
           left_us = NULL, busy_cores = 0, lease_us = excluded.lease_us, \
           expires_us = excluded.expires_us, grace_us = excluded.grace_us, lost_us = NULL, \
           given_back_us = NULL, note = ''",
        params![
            p,
            r.node_id.as_str(),
            r.address.as_str(),
            r.cores,
            r.mem_mb,
            labels,
            started_us,
            r.block_store.as_str(),
            i64::from(r.elastic),
            now,
            terms.lease_us,
            terms.grace_us,
            now + terms.lease_us
        ],
    )?;
    tx.notify(CHANGED_CHANNEL, &r.node_id)?;
    Ok(())
}

/// Registers node `r` as its incarnation `started_us` (see [`register_tx`]).
pub async fn register(
    store: &Store,
    r: &Registration,
    started_us: i64,
    terms: LeaseTerms,
) -> Result<()> {
    let r = r.clone();
    store
        .run(CLUSTER_PARTITION, move |tx| {
            register_tx(tx, &r, started_us, terms)
        })
        .await
}

impl LeaseTerms {
    pub fn validate(&self) -> Result<()> {
        if self.lease_us <= 0 || self.grace_us < self.lease_us {
            return Err(Error::Invalid(format!(
                "a lease is positive and its grace at least the lease, not {} and {} µs",
                self.lease_us, self.grace_us
            )));
        }
        Ok(())
    }
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// The database's clock at the renewal.
    pub now_us: i64,
    /// The cluster had declared the node lost while it was silent.
    pub returned: Option<Returned>,
}

/// A node back after the cluster declared it lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Returned {
    /// How long it was silent, on the database's clock.
    pub silent_us: i64,
    /// Its procs were given back meanwhile (re-queued or failed): it must
    /// stop what it still runs. Else it keeps them, and its workers are up
    /// again.
    pub given_back: bool,
}

/// Procedure body: renews the lease of node `node_id`'s incarnation
/// `started_us` with `terms` and its measured busy cores. Fails with
/// [`Error::NotFound`] if that incarnation is not registered as up: it
/// left, an operator removed it, or a newer process registered the same
/// id. A node the cluster had declared lost returns (see the module doc).
pub fn heartbeat_tx(
    tx: &mut dyn Tx,
    node_id: &str,
    started_us: i64,
    measured: Measured,
    terms: LeaseTerms,
) -> Result<Beat> {
    terms.validate()?;
    let p = i64::from(tx.p_key().0);
    let now = tx.clock_us()?;
    let busy = if measured.busy_cores.is_finite() {
        measured.busy_cores.max(0.0)
    } else {
        0.0
    };
    let mem_used = measured.mem_used_bytes.filter(|b| *b >= 0);
    let disk_used = measured.disk_used_bytes.filter(|b| *b >= 0);
    let row = tx.query_opt(
        "SELECT heartbeat_us, lost_us, given_back_us FROM node \
         WHERE p_key = $1 AND node_id = $2 AND started_us = $3 AND state = 'up'",
        params![p, node_id, started_us],
    )?;
    let Some(row) = row else {
        return Err(Error::NotFound(format!(
            "node {node_id} (started at {started_us}) is not registered as up: it left, was \
             removed, or another process registered the same id"
        )));
    };
    let (last, lost, given_back): (i64, Option<i64>, Option<i64>) =
        (row.get(0)?, row.get(1)?, row.get(2)?);
    let returned = lost.map(|_| Returned {
        silent_us: (now - last).max(0),
        given_back: given_back.is_some(),
    });
    match returned {
        None => {
            tx.execute(
                "UPDATE node SET heartbeat_us = $4, expires_us = $8, lease_us = $5, \
                   grace_us = $6, busy_cores = $7, mem_used_bytes = $9, disk_used_bytes = $10 \
                 WHERE p_key = $1 AND node_id = $2 AND started_us = $3",
                params![
                    p,
                    node_id,
                    started_us,
                    now,
                    terms.lease_us,
                    terms.grace_us,
                    busy,
                    now + terms.lease_us,
                    mem_used,
                    disk_used
                ],
            )?;
        }
        Some(r) => {
            let note = format!(
                "returned at {} after {:.1} s silent; {}",
                now,
                r.silent_us as f64 / 1e6,
                if r.given_back {
                    "its procs had been given back (re-queued or failed): it stopped what it \
                     still ran"
                } else {
                    "its procs had not been given back: it kept them"
                }
            );
            tx.execute(
                "UPDATE node SET heartbeat_us = $4, expires_us = $9, lease_us = $5, \
                   grace_us = $6, busy_cores = $7, lost_us = NULL, given_back_us = NULL, \
                   note = $8, mem_used_bytes = $10, disk_used_bytes = $11 \
                 WHERE p_key = $1 AND node_id = $2 AND started_us = $3",
                params![
                    p,
                    node_id,
                    started_us,
                    now,
                    terms.lease_us,
                    terms.grace_us,
                    busy,
                    note.as_str(),
                    now + terms.lease_us,
                    mem_used,
                    disk_used
                ],
            )?;
            tx.notify(CHANGED_CHANNEL, node_id)?;
        }
    }
    tx.notify(HEARTBEAT_CHANNEL, node_id)?;
    Ok(Beat {
        now_us: now,
        returned,
    })
}

/// Procedure body (the cluster leader's, at `now_us` on the database's
/// clock): declares lost every node whose lease lapsed, provided the
/// leader has reached the database since `healthy_since_us` for at least
/// that node's lease (see the module doc). Returns their ids.
pub fn declare_lost_tx(tx: &mut dyn Tx, now_us: i64, healthy_since_us: i64) -> Result<Vec<String>> {
    let p = i64::from(tx.p_key().0);
    let rows = tx.query(
        "SELECT node_id FROM node WHERE p_key = $1 AND state = 'up' AND expires_us < $2 \
           AND lost_us IS NULL AND lease_us <= $3 \
         ORDER BY expires_us LIMIT $4",
        params![p, now_us, now_us - healthy_since_us, JUDGED_MAX],
    )?;
    let mut lost = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: String = r.get(0)?;
        // Conditional, so that it stays right at READ COMMITTED (the
        // heartbeat's isolation): a node that renewed meanwhile is not lost.
        let n = tx.execute(
            "UPDATE node SET lost_us = $3 WHERE p_key = $1 AND node_id = $2 \
               AND state = 'up' AND lost_us IS NULL AND expires_us < $3",
            params![p, id.as_str(), now_us],
        )?;
        if n == 0 {
            continue;
        }
        tx.notify(CHANGED_CHANNEL, &id)?;
        lost.push(id);
    }
    Ok(lost)
}

/// Procedure body (the cluster leader's, at `now_us`): the lost nodes
/// silent past their grace and the margin, whose procs are to be given
/// back now — marked so (`given_back_us`), once. Same health rule as
/// [`declare_lost_tx`].
pub fn due_give_back_tx(
    tx: &mut dyn Tx,
    now_us: i64,
    healthy_since_us: i64,
) -> Result<Vec<String>> {
    let p = i64::from(tx.p_key().0);
    let rows = tx.query(
        "SELECT node_id FROM node WHERE p_key = $1 AND state = 'up' AND lost_us IS NOT NULL \
           AND given_back_us IS NULL AND heartbeat_us + grace_us + $4 * lease_us <= $2 \
           AND lease_us <= $3 \
         ORDER BY heartbeat_us LIMIT $5",
        params![
            p,
            now_us,
            now_us - healthy_since_us,
            GIVE_BACK_MARGIN_LEASES,
            JUDGED_MAX
        ],
    )?;
    let mut due = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: String = r.get(0)?;
        let n = tx.execute(
            "UPDATE node SET given_back_us = $3 WHERE p_key = $1 AND node_id = $2 \
               AND state = 'up' AND lost_us IS NOT NULL AND given_back_us IS NULL \
               AND heartbeat_us + grace_us + $4 * lease_us <= $3",
            params![p, id.as_str(), now_us, GIVE_BACK_MARGIN_LEASES],
        )?;
        if n == 0 {
            continue; // it renewed meanwhile
        }
        due.push(id);
    }
    Ok(due)
}

/// Records that node `node_id`'s incarnation `started_us` stopped cleanly
/// (a newer incarnation's row is left alone).
pub async fn leave(store: &Store, node_id: &str, started_us: i64) -> Result<()> {
    let id = node_id.to_string();
    let now = tabos_store::now_us();
    store
        .run(CLUSTER_PARTITION, move |tx| {
            tx.execute(
                "UPDATE node SET state = 'left', left_us = $4, busy_cores = 0 \
                 WHERE p_key = $1 AND node_id = $2 AND started_us = $3",
                params![i64::from(tx.p_key().0), id.as_str(), started_us, now],
            )?;
            tx.notify(CHANGED_CHANNEL, &id)?;
            Ok(())
        })
        .await
}

/// Procedure body: forgets node `node_id`, which must have left or be lost
/// (its lease lapsed): a node that is up is stopped first.
pub fn remove_tx(tx: &mut dyn Tx, node_id: &str) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let now = tx.clock_us()?;
    let row = tx.query_opt(
        "SELECT state, expires_us, lost_us FROM node WHERE p_key = $1 AND node_id = $2",
        params![p, node_id],
    )?;
    let Some(row) = row else {
        return Err(Error::NotFound(format!("no node {node_id}")));
    };
    let state = derive_state(&row.get::<String>(0)?, row.get(1)?, row.get(2)?, None, now);
    if state == NodeState::Up {
        return Err(Error::Precondition(format!(
            "node {node_id} is up; stop it first (a node that left or is lost can be removed)"
        )));
    }
    tx.execute(
        "DELETE FROM node WHERE p_key = $1 AND node_id = $2",
        params![p, node_id],
    )?;
    Ok(())
}

/// Procedure body: marks node `node_id` as draining (`on`) or back in
/// service. Draining needs the node up; putting one back in service that
/// is not draining changes nothing. Returns whether the row changed.
pub fn set_draining_tx(tx: &mut dyn Tx, node_id: &str, on: bool) -> Result<bool> {
    let p = i64::from(tx.p_key().0);
    let now = tx.clock_us()?;
    let row = tx.query_opt(
        "SELECT state, expires_us, lost_us, draining_us FROM node \
         WHERE p_key = $1 AND node_id = $2",
        params![p, node_id],
    )?;
    let Some(row) = row else {
        return Err(Error::NotFound(format!("no node {node_id}")));
    };
    let draining = row.get::<Option<i64>>(3)?.is_some();
    let state = derive_state(&row.get::<String>(0)?, row.get(1)?, row.get(2)?, None, now);
    if on && state != NodeState::Up {
        return Err(Error::Precondition(format!(
            "node {node_id} is {state}; only a node that is up can be drained"
        )));
    }
    if on == draining {
        return Ok(false);
    }
    tx.execute(
        "UPDATE node SET draining_us = $3 WHERE p_key = $1 AND node_id = $2",
        params![p, node_id, on.then_some(now)],
    )?;
    tx.notify(CHANGED_CHANNEL, node_id)?;
    Ok(true)
}

/// Marks node `node_id` as draining or back in service (see
/// [`set_draining_tx`]; [`crate::procs::drain_node`] does the rest).
pub async fn set_draining(store: &Store, node_id: &str, on: bool) -> Result<bool> {
    let id = node_id.to_string();
    store
        .run(CLUSTER_PARTITION, move |tx| set_draining_tx(tx, &id, on))
        .await
}

/// Whether node `node_id` is draining (an unknown node is not).
pub async fn is_draining(store: &Store, node_id: &str) -> Result<bool> {
    let id = node_id.to_string();
    store
        .read(CLUSTER_PARTITION, move |tx| {
            let row = tx.query_opt(
                "SELECT draining_us FROM node WHERE p_key = $1 AND node_id = $2",
                params![i64::from(tx.p_key().0), id.as_str()],
            )?;
            Ok(match row {
                Some(r) => r.get::<Option<i64>>(0)?.is_some(),
                None => false,
            })
        })
        .await
}

/// Forgets node `node_id` (see [`remove_tx`]).
pub async fn remove(store: &Store, node_id: &str) -> Result<()> {
    let id = node_id.to_string();
    store
        .run(CLUSTER_PARTITION, move |tx| remove_tx(tx, &id))
        .await
}

/// A node's state as read at `now_us`: left, lost (declared, or its lease
/// lapsed and not yet judged), draining or up.
fn derive_state(
    stored: &str,
    expires_us: i64,
    lost_us: Option<i64>,
    draining_us: Option<i64>,
    now_us: i64,
) -> NodeState {
    match stored {
        "left" => NodeState::Left,
        _ if lost_us.is_some() || expires_us <= now_us => NodeState::Lost,
        _ if draining_us.is_some() => NodeState::Draining,
        _ => NodeState::Up,
    }
}

/// The columns [`node_from_row`] reads, in its order.
macro_rules! node_columns {
    () => {
        "node_id, address, cores, mem_mb, labels, state, started_us, heartbeat_us, left_us, \
         busy_cores, draining_us, elastic, expires_us, lost_us, given_back_us, note, \
         mem_used_bytes, disk_used_bytes"
    };
}

fn node_from_row(r: &Row, now_us: i64) -> Result<NodeInfo> {
    let labels: BTreeMap<String, String> = serde_json::from_str(&r.get::<String>(4)?)
        .map_err(|e| Error::Invalid(format!("stored labels: {e}")))?;
    let draining_us: Option<i64> = r.get(10)?;
    let (expires_us, lost_us): (i64, Option<i64>) = (r.get(12)?, r.get(13)?);
    Ok(NodeInfo {
        node_id: r.get(0)?,
        address: r.get(1)?,
        cores: r.get(2)?,
        mem_mb: r.get(3)?,
        labels,
        state: derive_state(
            &r.get::<String>(5)?,
            expires_us,
            lost_us,
            draining_us,
            now_us,
        ),
        started_us: r.get(6)?,
        heartbeat_us: r.get(7)?,
        left_us: r.get(8)?,
        draining_us,
        elastic: r.get::<i64>(11)? != 0,
        busy_cores: r.get(9)?,
        expires_us,
        lost_us,
        given_back_us: r.get(14)?,
        note: r.get(15)?,
        mem_used_bytes: r.get(16)?,
        disk_used_bytes: r.get(17)?,
        realms: Vec::new(),
    })
}

/// Node `node_id` as read now (without its realms).
pub async fn get(store: &Store, node_id: &str) -> Result<NodeInfo> {
    const Q: &str = concat!(
        "SELECT ",
        node_columns!(),
        " FROM node WHERE p_key = $1 AND node_id = $2"
    );
    one(store, Q, node_id, format!("no node {node_id}")).await
}

/// The node holding block store `store_id` — the latest to register it,
/// when a store moved between node ids — as read now (without its realms).
pub async fn holding_store(store: &Store, store_id: &str) -> Result<NodeInfo> {
    const Q: &str = concat!(
        "SELECT ",
        node_columns!(),
        " FROM node WHERE p_key = $1 AND block_store = $2 ORDER BY started_us DESC LIMIT 1"
    );
    let missing = format!("no node holds block store {store_id}");
    one(store, Q, store_id, missing).await
}

/// The node `query` (of [`node_columns`], `$1` the partition, `$2` `key`)
/// finds, or [`Error::NotFound`] saying `missing`.
async fn one(store: &Store, query: &'static str, key: &str, missing: String) -> Result<NodeInfo> {
    let key = key.to_string();
    store
        .read(CLUSTER_PARTITION, move |tx| {
            let row = tx.query_opt(query, params![i64::from(tx.p_key().0), key.as_str()])?;
            let now = tx.clock_us()?;
            match row {
                Some(r) => node_from_row(&r, now),
                None => Err(Error::NotFound(missing.clone())),
            }
        })
        .await
}

/// Every node (at most [`NODES_LIST_MAX`]) with the realms it serves —
/// all of them, or only `realm`'s when given (what a realm's member may
/// see). Blocking (a read over all partitions).
pub fn list(store: &Store, realm: Option<&str>) -> Result<Vec<NodeInfo>> {
    let now = tabos_store::now_us();
    let rows = store.query_capped(
        concat!(
            "SELECT ",
            node_columns!(),
            " FROM node WHERE p_key = $1 ORDER BY node_id"
        ),
        &[i64::from(CLUSTER_PARTITION.0).into()],
        NODES_LIST_MAX,
    )?;
    let mut nodes = rows
        .rows
        .iter()
        .map(|r| node_from_row(r, now))
        .collect::<Result<Vec<_>>>()?;
    let workers = match realm {
        Some(r) => store.query(
            "SELECT node_id, realm, cores, unused_capacity, (SELECT count(*) FROM proc p \
               WHERE p.p_key = w.p_key AND p.realm = w.realm AND p.worker_id = w.worker_id \
                 AND p.state IN ('spawned', 'claimed', 'running')) \
             FROM worker w WHERE realm = $1 AND state = 'up' ORDER BY node_id, realm",
            &[r.into()],
        )?,
        None => store.query(
            "SELECT node_id, realm, cores, unused_capacity, (SELECT count(*) FROM proc p \
               WHERE p.p_key = w.p_key AND p.realm = w.realm AND p.worker_id = w.worker_id \
                 AND p.state IN ('spawned', 'claimed', 'running')) \
             FROM worker w WHERE state = 'up' ORDER BY node_id, realm",
            &[],
        )?,
    };
    let at: std::collections::HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.node_id.clone(), i))
        .collect();
    for w in &workers.rows {
        let id: String = w.get(0)?;
        if let Some(&i) = at.get(&id) {
            nodes[i].realms.push(NodeRealm {
                realm: w.get(1)?,
                cores: w.get(2)?,
                unused_cores: w.get(3)?,
                procs: w.get(4)?,
            });
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg() -> Registration {
        Registration {
            node_id: "n1".into(),
            address: "127.0.0.1:7070".into(),
            cores: 2,
            mem_mb: 1024,
            labels: BTreeMap::from([("zone".to_string(), "east".to_string())]),
            block_store: "00ff00ff00ff00ff".into(),
            elastic: false,
        }
    }

    #[test]
    fn registrations_are_checked() {
        assert!(reg().validate().is_ok());
        let bad = [
            Registration {
                node_id: "../x".into(),
                ..reg()
            },
            Registration { cores: 0, ..reg() },
            Registration {
                mem_mb: -1,
                ..reg()
            },
            Registration {
                address: "a".repeat(ADDRESS_BYTES_MAX + 1),
                ..reg()
            },
            Registration {
                labels: (0..=LABELS_MAX)
                    .map(|i| (format!("k{i}"), String::new()))
                    .collect(),
                ..reg()
            },
            Registration {
                labels: BTreeMap::from([("bad key".to_string(), "v".to_string())]),
                ..reg()
            },
            Registration {
                labels: BTreeMap::from([("k".to_string(), "a\nb".to_string())]),
                ..reg()
            },
            Registration {
                labels: BTreeMap::from([("k".to_string(), "v".repeat(LABEL_BYTES_MAX + 1))]),
                ..reg()
            },
            Registration {
                block_store: "not/hex".into(),
                ..reg()
            },
        ];
        for r in bad {
            assert!(matches!(r.validate(), Err(Error::Invalid(_))), "{r:?}");
        }
    }

    #[test]
    fn state_comes_from_the_row_and_the_lease() {
        // (stored, expires, lost, draining, now)
        assert_eq!(derive_state("up", 2_000, None, None, 1_500), NodeState::Up);
        assert_eq!(
            derive_state("up", 2_000, None, None, 2_000),
            NodeState::Lost
        );
        assert_eq!(
            derive_state("up", 9_000, Some(1_000), None, 1_500),
            NodeState::Lost,
            "declared lost, whatever its lease says"
        );
        assert_eq!(
            derive_state("left", 2_000, None, None, 9_000),
            NodeState::Left
        );
        // Draining is up and drained; a lost or left node is that first.
        assert_eq!(
            derive_state("up", 2_000, None, Some(1), 1_500),
            NodeState::Draining
        );
        assert_eq!(
            derive_state("up", 2_000, None, Some(1), 2_500),
            NodeState::Lost
        );
        assert_eq!(
            derive_state("left", 2_000, None, Some(1), 1_500),
            NodeState::Left
        );
        let terms = |lease_us, grace_us| LeaseTerms { lease_us, grace_us };
        assert!(terms(3_000_000, 60_000_000).validate().is_ok());
        assert!(terms(0, 60_000_000).validate().is_err());
        assert!(terms(3_000_000, 1_000_000).validate().is_err());
    }
}
