//! The utilisation history the dashboard plots: every node's measured
//! busy cores and every realm's procs and cores over the last
//! [`HISTORY_MAX`] samples, kept in the serving node's memory.
//!
//! A sample is taken on a node's heartbeat (the change feed's
//! [`tabos_kernel::nodes::HEARTBEAT_CHANNEL`]), at most once per
//! [`SAMPLE_EVERY`]: the cluster's own clock wakes the sampler, so it runs
//! no timer of its own, and a cluster with no node alive takes none. Each
//! sample is two small reads of the OS state (the `node` table and the
//! live procs), so it says what `tabos nodes` and `tabos ps` say.

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

/// One node at a sample.
#[derive(Debug, Clone)]
pub struct NodeSample {
    pub node_id: String,
    pub busy_cores: f64,
    pub cores: i64,
}

/// One realm at a sample: its procs that hold cores (claimed or running),
/// those cores, and its procs waiting to be placed.
#[derive(Debug, Clone)]
pub struct RealmSample {
    pub realm: String,
    pub running: i64,
    pub cores: i64,
    pub waiting: i64,
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
                .map(|n| json!({ "node_id": n.node_id, "busy_cores": n.busy_cores, "cores": n.cores }))
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
                    "realm": r.realm, "running": r.running, "cores": r.cores, "waiting": r.waiting
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
            match sample(&node).await {
                Ok(s) => {
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

async fn sample(node: &Node) -> Result<Sample, tabos_store::Error> {
    let at_us = tabos_store::now_us();
    // Nodes that are up and whose lease has not lapsed. (The sums are
    // cast: PostgreSQL's sum of integers is a numeric.)
    let lapsed = at_us - node.lease_us();
    let nodes = crate::sql::run(
        node,
        ReadScope::All,
        "SELECT node_id, busy_cores, cores FROM node \
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
                }
            })
            .collect(),
        realms: realms
            .rows
            .iter()
            .map(|r| {
                let v = r.values();
                RealmSample {
                    realm: text(&v[0]),
                    running: int(&v[1]),
                    cores: int(&v[2]),
                    waiting: int(&v[3]),
                }
            })
            .collect(),
    })
}
