//! The cluster's nodes (issue 19, item 1): who they are, what they offer,
//! where their API listens, and whether they are alive.
//!
//! Table `node(p_key, node_id, address, cores, mem_mb, labels, state,
//! started_us, heartbeat_us, left_us, busy_cores)` (migration 020), on
//! partition 0 ([`CLUSTER_PARTITION`]). A node registers when it starts
//! serving ([`register`]), renews its row every heartbeat with its
//! measured busy cores ([`heartbeat`]), and on a clean shutdown records
//! that it left ([`leave`]) — so a stop is told apart from a loss. A node
//! whose lease lapsed reads as [`NodeState::Lost`]: the state is derived
//! when read, from the heartbeat's age, so nothing has to sweep. A node id
//! is one live process: the latest to register takes the row over (a node
//! restarted right after a crash must not wait out its old lease), and
//! the process it replaced learns it at its next heartbeat, which fails.
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
    /// Its cores are granted to elastic realms (see [`Registration`]).
    pub elastic: bool,
    /// Cores busy at its last heartbeat (measured).
    pub busy_cores: f64,
    /// The realms it serves, with the cores its worker there offers and
    /// those not taken by live LC procs.
    pub realms: Vec<NodeRealm>,
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
/// as up, started at `now_us` — its incarnation, which its heartbeats name
/// (and its first heartbeat).
pub fn register_tx(tx: &mut dyn Tx, r: &Registration, now_us: i64) -> Result<()> {
    r.validate()?;
    let p = i64::from(tx.p_key().0);
    tx.execute(
        "DELETE FROM node WHERE p_key = $1 AND state = 'left' AND left_us < $2",
        params![p, now_us - LEFT_KEEP_US],
    )?;
    let labels =
        serde_json::to_string(&r.labels).map_err(|e| Error::Invalid(format!("labels: {e}")))?;
    tx.execute(
        "INSERT INTO node (p_key, node_id, address, cores, mem_mb, labels, state, started_us, \
                           heartbeat_us, left_us, busy_cores, block_store, elastic) \
         VALUES ($1, $2, $3, $4, $5, $6, 'up', $7, $7, NULL, 0, $8, $9) \
         ON CONFLICT (p_key, node_id) DO UPDATE SET address = excluded.address, \
           block_store = excluded.block_store, elastic = excluded.elastic, \
           cores = excluded.cores, mem_mb = excluded.mem_mb, labels = excluded.labels, \
           state = 'up', started_us = excluded.started_us, heartbeat_us = excluded.heartbeat_us, \
           left_us = NULL, busy_cores = 0",
        params![
            p,
            r.node_id.as_str(),
            r.address.as_str(),
            r.cores,
            r.mem_mb,
            labels,
            now_us,
            r.block_store.as_str(),
            i64::from(r.elastic)
        ],
    )?;
    tx.notify(CHANGED_CHANNEL, &r.node_id)?;
    Ok(())
}

/// Registers node `r` as its incarnation `started_us` (see [`register_tx`]).
pub async fn register(store: &Store, r: &Registration, started_us: i64) -> Result<()> {
    let r = r.clone();
    store
        .run(CLUSTER_PARTITION, move |tx| register_tx(tx, &r, started_us))
        .await
}

/// Renews the lease of node `node_id`'s incarnation `started_us` with its
/// measured busy cores. Fails with [`Error::NotFound`] if that incarnation
/// is not registered as up: it left, an operator removed it, or a newer
/// process registered the same id.
pub async fn heartbeat(
    store: &Store,
    node_id: &str,
    started_us: i64,
    busy_cores: f64,
) -> Result<()> {
    let id = node_id.to_string();
    let now = tabos_store::now_us();
    let busy = if busy_cores.is_finite() {
        busy_cores.max(0.0)
    } else {
        0.0
    };
    store
        .run(CLUSTER_PARTITION, move |tx| {
            let n = tx.execute(
                "UPDATE node SET heartbeat_us = $4, busy_cores = $5 \
                 WHERE p_key = $1 AND node_id = $2 AND started_us = $3 AND state = 'up'",
                params![i64::from(tx.p_key().0), id.as_str(), started_us, now, busy],
            )?;
            if n == 0 {
                return Err(Error::NotFound(format!(
                    "node {id} (started at {started_us}) is not registered as up: it left, \
                     was removed, or another process registered the same id"
                )));
            }
            tx.notify(HEARTBEAT_CHANNEL, &id)?;
            Ok(())
        })
        .await
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
/// (its lease older than `lease_us`): a node that is up is stopped first.
pub fn remove_tx(tx: &mut dyn Tx, node_id: &str, now_us: i64, lease_us: i64) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT state, heartbeat_us FROM node WHERE p_key = $1 AND node_id = $2",
        params![p, node_id],
    )?;
    let Some(row) = row else {
        return Err(Error::NotFound(format!("no node {node_id}")));
    };
    let state = derive_state(&row.get::<String>(0)?, row.get(1)?, None, now_us, lease_us);
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

/// Procedure body: marks node `node_id` as draining (`on`, since `now_us`)
/// or back in service. Draining needs the node up; putting one back in
/// service that is not draining changes nothing. Returns whether the row
/// changed.
pub fn set_draining_tx(
    tx: &mut dyn Tx,
    node_id: &str,
    on: bool,
    now_us: i64,
    lease_us: i64,
) -> Result<bool> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT state, heartbeat_us, draining_us FROM node WHERE p_key = $1 AND node_id = $2",
        params![p, node_id],
    )?;
    let Some(row) = row else {
        return Err(Error::NotFound(format!("no node {node_id}")));
    };
    let draining = row.get::<Option<i64>>(2)?.is_some();
    let state = derive_state(&row.get::<String>(0)?, row.get(1)?, None, now_us, lease_us);
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
        params![p, node_id, on.then_some(now_us)],
    )?;
    tx.notify(CHANGED_CHANNEL, node_id)?;
    Ok(true)
}

/// Marks node `node_id` as draining or back in service (see
/// [`set_draining_tx`]; [`crate::procs::drain_node`] does the rest).
pub async fn set_draining(store: &Store, node_id: &str, on: bool, lease_us: i64) -> Result<bool> {
    let id = node_id.to_string();
    let now = tabos_store::now_us();
    store
        .run(CLUSTER_PARTITION, move |tx| {
            set_draining_tx(tx, &id, on, now, lease_us)
        })
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
pub async fn remove(store: &Store, node_id: &str, lease_us: i64) -> Result<()> {
    let id = node_id.to_string();
    let now = tabos_store::now_us();
    store
        .run(CLUSTER_PARTITION, move |tx| {
            remove_tx(tx, &id, now, lease_us)
        })
        .await
}

fn derive_state(
    stored: &str,
    heartbeat_us: i64,
    draining_us: Option<i64>,
    now_us: i64,
    lease_us: i64,
) -> NodeState {
    match stored {
        "left" => NodeState::Left,
        _ if heartbeat_us <= now_us - lease_us => NodeState::Lost,
        _ if draining_us.is_some() => NodeState::Draining,
        _ => NodeState::Up,
    }
}

/// The columns [`node_from_row`] reads, in its order.
macro_rules! node_columns {
    () => {
        "node_id, address, cores, mem_mb, labels, state, started_us, heartbeat_us, left_us, \
         busy_cores, draining_us, elastic"
    };
}

fn node_from_row(r: &Row, now_us: i64, lease_us: i64) -> Result<NodeInfo> {
    let labels: BTreeMap<String, String> = serde_json::from_str(&r.get::<String>(4)?)
        .map_err(|e| Error::Invalid(format!("stored labels: {e}")))?;
    let heartbeat_us: i64 = r.get(7)?;
    let draining_us: Option<i64> = r.get(10)?;
    Ok(NodeInfo {
        node_id: r.get(0)?,
        address: r.get(1)?,
        cores: r.get(2)?,
        mem_mb: r.get(3)?,
        labels,
        state: derive_state(
            &r.get::<String>(5)?,
            heartbeat_us,
            draining_us,
            now_us,
            lease_us,
        ),
        started_us: r.get(6)?,
        heartbeat_us,
        left_us: r.get(8)?,
        draining_us,
        elastic: r.get::<i64>(11)? != 0,
        busy_cores: r.get(9)?,
        realms: Vec::new(),
    })
}

/// Node `node_id` as read now (without its realms).
pub async fn get(store: &Store, node_id: &str, lease_us: i64) -> Result<NodeInfo> {
    const Q: &str = concat!(
        "SELECT ",
        node_columns!(),
        " FROM node WHERE p_key = $1 AND node_id = $2"
    );
    one(store, Q, node_id, lease_us, format!("no node {node_id}")).await
}

/// The node holding block store `store_id` — the latest to register it,
/// when a store moved between node ids — as read now (without its realms).
pub async fn holding_store(store: &Store, store_id: &str, lease_us: i64) -> Result<NodeInfo> {
    const Q: &str = concat!(
        "SELECT ",
        node_columns!(),
        " FROM node WHERE p_key = $1 AND block_store = $2 ORDER BY started_us DESC LIMIT 1"
    );
    let missing = format!("no node holds block store {store_id}");
    one(store, Q, store_id, lease_us, missing).await
}

/// The node `query` (of [`node_columns`], `$1` the partition, `$2` `key`)
/// finds, or [`Error::NotFound`] saying `missing`.
async fn one(
    store: &Store,
    query: &'static str,
    key: &str,
    lease_us: i64,
    missing: String,
) -> Result<NodeInfo> {
    let key = key.to_string();
    store
        .read(CLUSTER_PARTITION, move |tx| {
            let row = tx.query_opt(query, params![i64::from(tx.p_key().0), key.as_str()])?;
            match row {
                Some(r) => node_from_row(&r, tabos_store::now_us(), lease_us),
                None => Err(Error::NotFound(missing.clone())),
            }
        })
        .await
}

/// Every node (at most [`NODES_LIST_MAX`]) with the realms it serves —
/// all of them, or only `realm`'s when given (what a realm's member may
/// see). Blocking (a read over all partitions).
pub fn list(store: &Store, realm: Option<&str>, lease_us: i64) -> Result<Vec<NodeInfo>> {
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
        .map(|r| node_from_row(r, now, lease_us))
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
        assert_eq!(derive_state("up", 1_000, None, 1_500, 1_000), NodeState::Up);
        assert_eq!(
            derive_state("up", 1_000, None, 2_000, 1_000),
            NodeState::Lost
        );
        assert_eq!(
            derive_state("left", 1_000, None, 9_000, 1_000),
            NodeState::Left
        );
        assert_eq!(
            derive_state("left", 1_000, None, 1_001, 1_000),
            NodeState::Left
        );
        // Draining is up and drained; a lost or left node is that first.
        assert_eq!(
            derive_state("up", 1_000, Some(1), 1_500, 1_000),
            NodeState::Draining
        );
        assert_eq!(
            derive_state("up", 1_000, Some(1), 2_000, 1_000),
            NodeState::Lost
        );
        assert_eq!(
            derive_state("left", 1_000, Some(1), 1_500, 1_000),
            NodeState::Left
        );
    }
}
