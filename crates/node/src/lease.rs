//! The node's lease in the cluster (issue 35, item 1): one heartbeat per
//! period, the cluster's leadership, the judging of other nodes' leases,
//! and what a node cut off from the database does.
//!
//! Every period the node runs one transaction on the cluster partition
//! ([`beat`]): it renews its lease on the database's clock
//! (`nodes::heartbeat_tx`), campaigns for the cluster's lease
//! (`alloc::CLUSTER_LEASE`: a read for a standby, a renewal for the
//! leader), and — if it leads — declares lost the nodes whose leases
//! lapsed and marks for give-back those silent past their grace
//! (`nodes::declare_lost_tx`, `nodes::due_give_back_tx`). An idle node
//! thus makes one write per period, whatever the realms it serves; the
//! leader acts on a loss realm by realm afterwards (`procs::node_lost`,
//! `procs::give_back_node`).
//!
//! Judging only counts time the leader itself reached the database
//! ([`Health`]): the time of a heartbeat is the database's, and a gap of
//! more than [`HEALTH_GAP_PERIODS`] periods between two of the leader's
//! successful heartbeats (its heartbeat waited on a database that was
//! away, however long it then took to succeed) starts its health over. So
//! after an outage every node saw — a failover — no node is judged until
//! all have had a lease's time to renew.
//!
//! A node that fails to renew for its grace (`--disconnect-grace-ms`,
//! 60 s by default) — cut off from a database the others still reach —
//! stops its restartable procs itself ([`crate::procd::Procd::fence`]);
//! the cluster queues them again elsewhere only after that grace and a
//! margin (`nodes::GIVE_BACK_MARGIN_LEASES`), so a restartable proc never
//! runs twice. When it reaches the database again it learns whether its
//! procs were given back meanwhile: if so its procds stop what they still
//! run and register again; if not, it keeps them, its workers are up
//! again, and it queues again the restartable procs it stopped.
//!
//! Leases are the one place time itself is the event, so this is a timer,
//! not a wait on the change feed.

use std::sync::atomic::{AtomicI64, Ordering};

use tabos_kernel::ids::Pid;
use tabos_kernel::nodes::{self, Beat, LeaseTerms, CLUSTER_PARTITION};

use crate::{Node, ServedRealms};

/// Periods between two successful heartbeats (on the database's clock)
/// past which the node counts itself as having been away from the
/// database: its health, which judging others needs, starts over.
pub const HEALTH_GAP_PERIODS: i64 = 2;

/// What the node knows of its own standing in the cluster, shared with
/// whoever acts on it (the managers run only on the leader).
#[derive(Debug, Default)]
pub struct Standing {
    /// The database's time of the last successful heartbeat (0: none).
    last_ok_us: AtomicI64,
    /// Since when (database time) the heartbeats have come without a gap.
    healthy_since_us: AtomicI64,
    /// It holds the cluster's lease; a watch, so the managers wait for
    /// leadership instead of looking for it.
    leading: tokio::sync::watch::Sender<bool>,
}

impl Standing {
    /// Whether this node leads the cluster (as of its last heartbeat).
    pub fn leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Told each time this node gains or loses the cluster's lead.
    pub fn watch_leading(&self) -> tokio::sync::watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn set_leading(&self, leading: bool) {
        self.leading
            .send_if_modified(|l| std::mem::replace(l, leading) != leading);
    }

    /// Whether its heartbeats have reached the database for at least
    /// `span_us` without a gap (on the database's clock, as of the last
    /// one).
    pub fn healthy_for(&self, span_us: i64) -> bool {
        let since = self.healthy_since_us.load(Ordering::SeqCst);
        since > 0 && self.last_ok_us.load(Ordering::SeqCst) - since >= span_us
    }
}

/// The health a heartbeat at `now_us` gives, after one at `last_ok_us`
/// (0: none) of a node healthy since `since_us`, with heartbeats every
/// `period_us`.
pub fn health_after(last_ok_us: i64, since_us: i64, now_us: i64, period_us: i64) -> i64 {
    if last_ok_us == 0 || since_us == 0 || now_us - last_ok_us > HEALTH_GAP_PERIODS * period_us {
        now_us
    } else {
        since_us
    }
}

/// What one heartbeat's transaction found.
struct Outcome {
    beat: Beat,
    healthy_since_us: i64,
    leading: bool,
    lost: Vec<String>,
    due: Vec<String>,
}

/// One heartbeat: renew, campaign, judge — one transaction.
async fn beat(node: Node, terms: LeaseTerms) -> Result<Outcome, tabos_kernel::Error> {
    let id = node.settings.node_id.clone();
    let started = node.started_us;
    let measured = nodes::Measured {
        busy_cores: node.load.measured_cores(),
        mem_used_bytes: node.load.memory_used_bytes(),
        disk_used_bytes: node.files.device().map(|d| {
            let free = d
                .stats()
                .free_blocks
                .saturating_mul(u64::from(d.block_size()));
            i64::try_from(d.total_bytes().saturating_sub(free)).unwrap_or(i64::MAX)
        }),
    };
    let period_us = node.settings.heartbeat.as_micros() as i64;
    let (last_ok, since) = (
        node.standing.last_ok_us.load(Ordering::SeqCst),
        node.standing.healthy_since_us.load(Ordering::SeqCst),
    );
    // READ COMMITTED: every write of this transaction is conditional (see
    // `Store::run_read_committed`), and a hundred nodes' heartbeats at
    // SERIALIZABLE failed each other most of the time.
    node.store
        .run_read_committed(CLUSTER_PARTITION, move |tx| {
            let beat = nodes::heartbeat_tx(tx, &id, started, measured, terms)?;
            let healthy_since_us = health_after(last_ok, since, beat.now_us, period_us);
            let lead = tabos_kernel::alloc::campaign_tx(
                tx,
                tabos_kernel::alloc::CLUSTER_LEASE,
                &id,
                beat.now_us,
                terms.lease_us,
            )?;
            let (lost, due) = match lead {
                Some(_) => (
                    nodes::declare_lost_tx(tx, beat.now_us, healthy_since_us)?,
                    nodes::due_give_back_tx(tx, beat.now_us, healthy_since_us)?,
                ),
                None => Default::default(),
            };
            Ok::<_, tabos_kernel::Error>(Outcome {
                beat,
                healthy_since_us,
                leading: lead.is_some(),
                lost,
                due,
            })
        })
        .await
}

/// Keeps the node's lease until `stop` (see the module doc).
pub async fn keep(node: Node, served: ServedRealms, mut stop: tokio::sync::watch::Receiver<bool>) {
    let id = node.settings.node_id.clone();
    let terms = node.lease_terms();
    let grace = std::time::Duration::from_micros(terms.grace_us as u64);
    let mut tick = tokio::time::interval(node.settings.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the lease was last renewed (this process's clock: what a node
    // cut off from the database has to go by).
    let mut renewed = tokio::time::Instant::now();
    // The restartable procs it stopped while cut off, by realm.
    let mut fenced: Option<Vec<(String, Pid)>> = None;
    // A heartbeat still waiting for the database: awaited again at the
    // next tick rather than joined by another, so that an outage does not
    // pile one transaction per period into the store's queue.
    let mut in_flight: Option<tokio::task::JoinHandle<Result<Outcome, tabos_kernel::Error>>> = None;
    // When heartbeats began to fail (said once, and once when they are
    // back, not every period).
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = stop.changed() => {
                if let Some(h) = in_flight.take() {
                    h.abort();
                }
                return;
            }
            _ = tick.tick() => {}
        }
        // Bounded by a lease: a heartbeat that takes longer (the database
        // out of reach, a connection hanging on a cut network) counts as
        // failed, so a cut-off node still sees its grace run out.
        let lease = std::time::Duration::from_micros(terms.lease_us as u64);
        let mut running = in_flight
            .take()
            .unwrap_or_else(|| tokio::spawn(beat(node.clone(), terms)));
        let beaten = match tokio::time::timeout(lease, &mut running).await {
            Ok(joined) => joined.unwrap_or_else(|e| {
                Err(tabos_kernel::Error::Store(tabos_store::Error::Internal(
                    format!("the heartbeat task ended: {e}"),
                )))
            }),
            Err(_) => {
                in_flight = Some(running);
                Err(tabos_kernel::Error::Store(tabos_store::Error::Unavailable(
                    "the heartbeat took longer than a lease".into(),
                )))
            }
        };
        let out = match beaten {
            Ok(out) => out,
            Err(e) => {
                if failing_since.is_none() {
                    failing_since = Some(tokio::time::Instant::now());
                    tracing::warn!(node = %id, "heartbeat failed: {e} (said again when they succeed)");
                }
                node.standing.set_leading(false);
                if fenced.is_none() && renewed.elapsed() >= grace {
                    fenced = Some(fence(&served));
                    tracing::warn!(
                        node = %id, "no lease renewed for {grace:?}: stopped its restartable \
                         procs {:?} (the cluster runs them elsewhere)",
                        fenced
                            .as_ref()
                            .map(|f| f.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>())
                    );
                }
                continue;
            }
        };
        renewed = tokio::time::Instant::now();
        if let Some(since) = failing_since.take() {
            tracing::info!(
                node = %id, "heartbeats reach the database again after {:.1} s",
                since.elapsed().as_secs_f64()
            );
        }
        let s = &node.standing;
        s.last_ok_us.store(out.beat.now_us, Ordering::SeqCst);
        s.healthy_since_us
            .store(out.healthy_since_us, Ordering::SeqCst);
        s.set_leading(out.leading);
        let returned = out.beat.returned;
        if let Some(r) = returned {
            tracing::warn!(
                node = %id, "back after {:.1} s declared lost; its procs {}",
                r.silent_us as f64 / 1e6,
                if r.given_back {
                    "had been given back: it stops what it still runs"
                } else {
                    "had not been given back, where it keeps them"
                }
            );
            if let Err(e) = tabos_kernel::procs::node_returned(&node.store, &id).await {
                tracing::error!(node = %id, "cannot take its place back: {e}");
            }
        }
        if let Some(stopped) = fenced.take() {
            // Queued again, unless the cluster gave them back meanwhile
            // (then they are no longer this node's, and nothing changes).
            requeue(&node, &stopped).await;
        }
        for lost in &out.lost {
            // Its claimed graph tasks are anyone's: it committed none of
            // their runs, and its late ones are refused.
            match tabos_kernel::graphs::requeue_node(&node.store, lost).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::warn!(node = %id, "gave back {n} graph tasks of lost node {lost}")
                }
                Err(e) => tracing::error!(node = %id, "cannot give back {lost}'s graph tasks: {e}"),
            }
            match tabos_kernel::procs::node_lost(&node.store, lost).await {
                Ok(done) => tracing::warn!(
                    node = %id, "node {lost} lost (its lease lapsed); its workers are down, \
                     unclaimed procs placed again: {:?}",
                    done.iter()
                        .flat_map(|(r, e)| e.requeued.iter().map(move |p| format!("{r}/{p}")))
                        .collect::<Vec<_>>()
                ),
                Err(e) => tracing::error!(node = %id, "cannot act on the loss of {lost}: {e}"),
            }
        }
        for gone in &out.due {
            let detail = format!("node {gone} lost (silent past its grace)");
            match tabos_kernel::procs::give_back_node(&node.store, gone, &detail).await {
                Ok(done) => {
                    fail_workflows(&node, &done, &detail).await;
                    tracing::info!(
                    node = %id, "gave back the procs of node {gone}: failed {:?}, re-queued {:?}",
                    done.iter()
                        .flat_map(|(r, e)| e.failed.iter().map(move |p| format!("{r}/{p}")))
                        .collect::<Vec<_>>(),
                    done.iter()
                        .flat_map(|(r, e)| e.requeued.iter().map(move |p| format!("{r}/{p}")))
                        .collect::<Vec<_>>()
                    )
                }
                Err(e) => tracing::error!(node = %id, "cannot give back the procs of {gone}: {e}"),
            }
        }
    }
}

/// The procs a lost node's give-back failed may have run workflows of
/// their own (`workflows::start_in_proc_tx`): those fail too, saying why.
/// (A later transaction than the give-back's; should this node die in
/// between, such a workflow stays pending until cancelled.)
async fn fail_workflows(node: &Node, done: &tabos_kernel::procs::NodeOutcome, why: &str) {
    for (realm, e) in done {
        let pids: Vec<Pid> = e
            .failed
            .iter()
            .filter_map(|p| Pid::new(p.as_str()).ok())
            .collect();
        if pids.is_empty() {
            continue;
        }
        let (r, why) = (realm.clone(), why.to_string());
        let failed = tabos_kernel::call(&node.store, realm, move |tx| {
            tabos_kernel::workflows::procs_failed_tx(tx, &r, &pids, &why, tabos_store::now_us())
        })
        .await;
        if let Err(e) = failed {
            tracing::error!(
                node = %node.settings.node_id, "cannot fail the workflows of {realm}'s lost procs: {e}");
        }
    }
}

/// Stops every restartable proc the node runs (see the module doc).
fn fence(served: &ServedRealms) -> Vec<(String, Pid)> {
    served
        .procds()
        .iter()
        .flat_map(|p| {
            let realm = p.realm.clone();
            p.fence().into_iter().map(move |pid| (realm.clone(), pid))
        })
        .collect()
}

/// Queues again the restartable procs the node stopped while cut off.
async fn requeue(node: &Node, stopped: &[(String, Pid)]) {
    let worker = node.worker_id();
    for (realm, pid) in stopped {
        let p = tabos_kernel::realm_partition(realm, node.store.partitions());
        let (r, pid2, w) = (realm.clone(), pid.clone(), worker.clone());
        let done = node
            .store
            .run(p, move |tx| {
                let now = tabos_store::now_us();
                let requeued = tabos_kernel::procs::requeue_stopped_tx(tx, &r, &pid2, &w, now)?;
                // Its restarts spent, it failed: so does a workflow it ran.
                tabos_kernel::workflows::procs_failed_tx(
                    tx,
                    &r,
                    std::slice::from_ref(&pid2),
                    "stopped while its node was cut off, its restarts spent",
                    now,
                )?;
                Ok::<_, tabos_kernel::Error>(requeued)
            })
            .await;
        if let Err(e) = done {
            tracing::error!(
                node = %node.settings.node_id, "cannot queue {realm}/{pid} again: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_starts_over_after_a_gap() {
        let p = 1_000_000;
        // The first heartbeat starts it.
        assert_eq!(health_after(0, 0, 50 * p, p), 50 * p);
        // Heartbeats a period apart keep it.
        assert_eq!(health_after(50 * p, 50 * p, 51 * p, p), 50 * p);
        assert_eq!(health_after(51 * p, 50 * p, 53 * p, p), 50 * p);
        // A heartbeat that waited out an outage starts it over.
        assert_eq!(health_after(53 * p, 50 * p, 60 * p, p), 60 * p);
    }
}
