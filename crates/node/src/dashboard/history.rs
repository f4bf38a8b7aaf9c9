//! The utilisation history the dashboard plots: every node's measured
//! busy cores and every realm's procs and cores over the last
//! [`HISTORY_MAX`] samples, kept in the serving node's memory.
//!
//! A sample is taken on a node's heartbeat (the change feed's
//! [`tabos_kernel::nodes::HEARTBEAT_CHANNEL`]), at most once per
//! [`SAMPLE_EVERY`]: the cluster's own clock wakes the sampler, so it runs
//! no timer of its own, and a cluster with no node alive takes none. Each
//! sample is three small reads of the OS state — the `node` table (busy
//! cores, memory and block store in use, as heartbeats carry them), the
//! live procs (cores held, memory measured) and the procs that failed
//! since the last sample (a range of the `proc_by_exit` index) — so it
//! says what `tabos nodes`, `tabos top` and `tabos ps` say. What each
//! realm stores is summed over its tables, which costs more: it is read
//! at most once per [`STORAGE_EVERY`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value as Json};
use tabos_kernel::auth::Principal;
use tabos_store::{ReadScope, Value};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::Node;

/// Least time between two samples.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples kept: a quarter of an hour at one a second.
pub const HISTORY_MAX: usize = 900;
/// Most nodes and most realms one sample holds.
pub const SAMPLE_ROWS_MAX: usize = 1_000;
/// Least time between two reads of what realms store.
pub const STORAGE_EVERY: Duration = Duration::from_secs(60);
/// How far behind now the failures a sample counts end: a proc's end is
/// stamped when its transaction runs and seen once it commits, so a
/// window that stopped at now would miss one stamped just before.
pub const FAILURES_SETTLE_US: i64 = 2_000_000;

/// One node at a sample.
#[derive(Debug, Clone)]
pub struct NodeSample {
    pub node_id: String,
    pub busy_cores: f64,
    pub cores: i64,
    /// Memory it offers, MiB, and what it and its procs use, bytes.
    pub mem_mb: i64,
    pub mem_used_bytes: Option<i64>,
    /// Bytes in use in its block store.
    pub disk_used_bytes: Option<i64>,
}

/// One realm at a sample: its procs that hold cores (claimed or running),
/// those cores, and its procs waiting to be placed.
#[derive(Debug, Clone)]
pub struct RealmSample {
    pub realm: String,
    pub running: i64,
    pub cores: i64,
    pub waiting: i64,
    /// Memory its running procs use (as their nodes measured it), bytes.
    pub mem_bytes: i64,
    /// Its procs that failed or exited with a status other than 0 in the
    /// sample's window.
    pub failed: i64,
    /// What it stores, bytes: read in some samples only (see
    /// [`STORAGE_EVERY`]).
    pub stored_bytes: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub at_us: i64,
    pub nodes: Vec<NodeSample>,
    pub realms: Vec<RealmSample>,
}

impl Sample {
    /// The sample as `p` may see it: an operator all of it, a realm's
    /// admin its realm only (nodes are the operator's).
    pub fn for_principal(&self, p: &Principal) -> Json {
        let all = p.is_operator();
        let nodes: Vec<Json> = if all {
            self.nodes
                .iter()
                .map(|n| {
                    json!({
                        "node_id": n.node_id, "busy_cores": n.busy_cores, "cores": n.cores,
                        "mem_mb": n.mem_mb, "mem_used_bytes": n.mem_used_bytes,
                        "disk_used_bytes": n.disk_used_bytes,
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let realms: Vec<Json> = self
            .realms
            .iter()
            .filter(|r| all || r.realm == p.realm())
            .map(|r| {
                json!({
                    "realm": r.realm, "running": r.running, "cores": r.cores, "waiting": r.waiting,
                    "mem_bytes": r.mem_bytes, "failed": r.failed, "stored_bytes": r.stored_bytes,
                })
            })
            .collect();
        json!({ "at_us": self.at_us, "nodes": nodes, "realms": realms })
    }
}

/// The history, and the live samples' broadcast.
pub struct History {
    samples: Mutex<VecDeque<Arc<Sample>>>,
    live: broadcast::Sender<Arc<Sample>>,
}

impl History {
    /// Starts sampling `node`'s cluster until `stopping` is raised.
    pub fn start(node: Node, stopping: tokio::sync::watch::Receiver<bool>) -> Arc<History> {
        let (live, _) = broadcast::channel(16);
        let h = Arc::new(History {
            samples: Mutex::new(VecDeque::with_capacity(HISTORY_MAX)),
            live,
        });
        tokio::spawn(h.clone().run(node, stopping));
        h
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> Vec<Arc<Sample>> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Each new sample, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Sample>> {
        self.live.subscribe()
    }

    async fn run(self: Arc<History>, node: Node, stopping: tokio::sync::watch::Receiver<bool>) {
        let stop = crate::stopping(stopping);
        tokio::pin!(stop);
        let mut beats = node.store.subscribe(tabos_kernel::nodes::HEARTBEAT_CHANNEL);
        let mut last: Option<Instant> = None;
        let mut stored_at: Option<Instant> = None;
        // The end of the last sample's failure window (µs).
        let mut failures_from = tabos_store::now_us() - FAILURES_SETTLE_US;
        loop {
            let beat = tokio::select! {
                () = &mut stop => return,
                b = beats.recv() => b,
            };
            if beat.is_err() {
                // Cut off (it fell behind): follow again from now.
                beats = node.store.subscribe(tabos_kernel::nodes::HEARTBEAT_CHANNEL);
                continue;
            }
            // (Heartbeats come about once a second each: a tenth of slack
            // keeps one that comes a little early.)
            if last.is_some_and(|t| t.elapsed() < SAMPLE_EVERY.mul_f32(0.9)) {
                continue;
            }
            last = Some(Instant::now());
            let storage = stored_at.is_none_or(|t| t.elapsed() >= STORAGE_EVERY);
            match sample(&node, failures_from, storage).await {
                Ok(s) => {
                    failures_from = s.at_us - FAILURES_SETTLE_US;
                    if storage {
                        stored_at = Some(Instant::now());
                    }
                    let s = Arc::new(s);
                    {
                        let mut v = self.samples.lock().unwrap_or_else(|e| e.into_inner());
                        if v.len() >= HISTORY_MAX {
                            v.pop_front();
                        }
                        v.push_back(s.clone());
                    }
                    let _ = self.live.send(s);
                }
                Err(e) => tracing::warn!("dashboard: cannot sample utilisation: {e}"),
            }
        }
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::Real(r) => *r as i64,
        _ => 0,
    }
}

/// An integer, or none for NULL (not measured).
fn maybe(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Real(r) => Some(*r as i64),
        _ => None,
    }
}

fn real(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Real(r) => *r,
        _ => 0.0,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Text(t) => t.clone(),
        _ => String::new(),
    }
}

/// One sample at now: failures counted from `failures_from` (µs), what
/// realms store read when `storage` is set.
async fn sample(
    node: &Node,
    failures_from: i64,
    storage: bool,
) -> Result<Sample, tabos_store::Error> {
    let at_us = tabos_store::now_us();
    // Nodes that are up and whose lease has not lapsed. (The sums are
    // cast: PostgreSQL's sum of integers is a numeric.)
    let lapsed = at_us - node.lease_us();
    let nodes = crate::sql::run(
        node,
        ReadScope::All,
        "SELECT node_id, busy_cores, cores, mem_mb, mem_used_bytes, disk_used_bytes FROM node \
         WHERE state = 'up' AND heartbeat_us >= $1 ORDER BY node_id"
            .into(),
        vec![Value::Int(lapsed)],
        SAMPLE_ROWS_MAX,
    )
    .await?;
    let realms = crate::sql::run(
        node,
        ReadScope::All,
        "SELECT r.realm, \
                CAST(coalesce(sum(CASE WHEN p.state IN ('claimed', 'running') \
                                   THEN 1 ELSE 0 END), 0) AS BIGINT), \
                CAST(coalesce(sum(CASE WHEN p.state IN ('claimed', 'running') \
                                   THEN p.cores ELSE 0 END), 0) AS BIGINT), \
                CAST(coalesce(sum(CASE WHEN p.state = 'spawned' THEN 1 ELSE 0 END), 0) \
                     AS BIGINT), \
                CAST(coalesce(sum(CASE WHEN p.state = 'running' THEN p.mem_bytes ELSE 0 END), 0) \
                     AS BIGINT) \
         FROM realm r LEFT JOIN proc p \
           ON p.p_key = r.p_key AND p.realm = r.realm \
          AND p.state IN ('spawned', 'claimed', 'running') \
         GROUP BY r.realm ORDER BY r.realm"
            .into(),
        Vec::new(),
        SAMPLE_ROWS_MAX,
    )
    .await?;
    let failed = crate::sql::run(
        node,
        ReadScope::All,
        "SELECT realm, count(*) FROM proc \
         WHERE exit_us >= $1 AND exit_us < $2 \
           AND (state = 'failed' OR (state = 'exited' AND exit_status <> 0)) \
         GROUP BY realm"
            .into(),
        vec![
            Value::Int(failures_from),
            Value::Int(at_us - FAILURES_SETTLE_US),
        ],
        SAMPLE_ROWS_MAX,
    )
    .await?;
    let failed: std::collections::HashMap<String, i64> = failed
        .rows
        .iter()
        .map(|r| (text(&r.values()[0]), int(&r.values()[1])))
        .collect();
    let stored: std::collections::HashMap<String, i64> = if storage {
        crate::sql::run(
            node,
            ReadScope::All,
            "SELECT realm, CAST(stored_bytes AS BIGINT) FROM realm_usage".into(),
            Vec::new(),
            SAMPLE_ROWS_MAX,
        )
        .await?
        .rows
        .iter()
        .map(|r| (text(&r.values()[0]), int(&r.values()[1])))
        .collect()
    } else {
        Default::default()
    };
    Ok(Sample {
        at_us,
        nodes: nodes
            .rows
            .iter()
            .map(|r| {
                let v = r.values();
                NodeSample {
                    node_id: text(&v[0]),
                    busy_cores: real(&v[1]),
                    cores: int(&v[2]),
                    mem_mb: int(&v[3]),
                    mem_used_bytes: maybe(&v[4]),
                    disk_used_bytes: maybe(&v[5]),
                }
            })
            .collect(),
        realms: realms
            .rows
            .iter()
            .map(|r| {
                let v = r.values();
                let realm = text(&v[0]);
                RealmSample {
                    running: int(&v[1]),
                    cores: int(&v[2]),
                    waiting: int(&v[3]),
                    mem_bytes: int(&v[4]),
                    failed: failed.get(&realm).copied().unwrap_or(0),
                    stored_bytes: stored.get(&realm).copied(),
                    realm,
                }
            })
            .collect(),
    })
}
