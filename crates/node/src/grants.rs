//! An elastic node (`tabos up --elastic`; issue 19, item 2) serves the
//! realms the cluster manager granted it cores in, each with a worker of
//! the granted size, and follows the grants as they change: told on its
//! channel (`alloc::node_channel`) by the σMGR's transaction.
//!
//! * A new grant: the realm's worker registers with the granted cores and
//!   a procd starts, admitting by its own grant (not the node's load).
//! * A grant that grows or shrinks: the worker registers again with the
//!   new size; a procd over its grant evicts its newest BE procs — in a BE
//!   realm, its newest procs of either class — which is how the σMGR takes
//!   cores back for an LC realm.
//! * A grant withdrawn (the σMGR withdraws only cores no live proc uses,
//!   or takes them back from a BE realm, or its node left the pool): the
//!   worker is drained (nothing new placed, its unclaimed procs placed
//!   elsewhere) and what it still runs there is evicted, procs of no cores
//!   too; once it runs nothing, its procd stops and its worker goes down.
//!   A grant that comes back before then puts it back in service.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tabos_kernel::alloc;
use tabos_kernel::sched::WorkerSpec;

use crate::procd::{self, Procd};
use crate::{Node, ServedRealms};

/// Pauses before following the grants again after a failure.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How often a withdrawn realm's procd is looked at to see whether it has
/// finished what it ran (in memory, no database).
const WITHDRAWN_CHECK: Duration = Duration::from_millis(200);

struct Serving {
    grant: Arc<AtomicI64>,
    procd: Arc<Procd>,
    stop: tokio::sync::watch::Sender<bool>,
    /// Its grant was withdrawn: it finishes what it runs, then stops.
    withdrawn: bool,
}

/// Serves this elastic node's grants until `stop`.
pub async fn serve(
    node: Node,
    addr: procd::NodeAddr,
    served: ServedRealms,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let channel = alloc::node_channel(&node.settings.node_id);
    let mut feed = node.store.subscribe(&channel);
    let mut serving: HashMap<String, Serving> = HashMap::new();
    let mut procds = tokio::task::JoinSet::new();
    let mut retries = tabos_client::retry::Backoff::new(RETRY_FIRST, RETRY_MAX);
    loop {
        // A failed follow (the store busy, a registration refused) is tried
        // again after a pause: the grant it missed will not be told again.
        let failed = match follow(&node, &addr, &served, &mut serving, &mut procds).await {
            Ok(()) => {
                retries.reset();
                false
            }
            Err(e) => {
                tracing::warn!(
                    node = %node.settings.node_id, "cannot follow its grants (trying again): {e}");
                true
            }
        };
        let retry = async {
            if failed {
                tokio::time::sleep(retries.pause()).await
            } else {
                std::future::pending().await
            }
        };
        let withdrawn = serving.values().any(|s| s.withdrawn);
        let check = async {
            if withdrawn {
                tokio::time::sleep(WITHDRAWN_CHECK).await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            _ = stop.changed() => break,
            n = feed.recv() => if n.is_err() {
                feed = node.store.subscribe(&channel);
            },
            () = check => {}
            () = retry => {}
            Some(_) = procds.join_next(), if !procds.is_empty() => {}
        }
    }
    for s in serving.values() {
        let _ = s.stop.send(true);
    }
    while procds.join_next().await.is_some() {}
}

/// Brings what it serves in line with its grants.
async fn follow(
    node: &Node,
    addr: &procd::NodeAddr,
    served: &ServedRealms,
    serving: &mut HashMap<String, Serving>,
    procds: &mut tokio::task::JoinSet<()>,
) -> Result<(), tabos_kernel::Error> {
    let id = node.settings.node_id.clone();
    let grants: HashMap<String, i64> = alloc::grants_of_node(&node.store, &id)
        .await?
        .into_iter()
        .map(|g| (g.realm, g.cores))
        .collect();
    for (realm, &cores) in &grants {
        match serving.get_mut(realm) {
            Some(s) => {
                let back = s.withdrawn;
                if !back && s.grant.load(Ordering::SeqCst) == cores {
                    continue;
                }
                s.grant.store(cores, Ordering::SeqCst);
                register(node, realm, cores).await?;
                // (register put a withdrawn worker back in service.)
                s.withdrawn = false;
                s.procd.regranted().await;
            }
            None => {
                register(node, realm, cores).await?;
                let grant = Arc::new(AtomicI64::new(cores));
                let (stop, realm_stop) = tokio::sync::watch::channel(false);
                // A BE realm is best effort as a whole: all its procs are
                // evicted to give cores back.
                let be_realm = matches!(
                    alloc::get(&node.store, realm).await?,
                    Some(a) if a.policy.class == tabos_kernel::procs::Class::Be
                );
                let procd = new_procd(node, addr, realm, cores, grant.clone(), be_realm);
                served.add(realm);
                served.set_procd(realm, procd.clone());
                let p2 = procd.clone();
                procds.spawn(async move { p2.run(realm_stop).await });
                serving.insert(
                    realm.clone(),
                    Serving {
                        grant,
                        procd,
                        stop,
                        withdrawn: false,
                    },
                );
            }
        }
    }
    // Withdrawn: drain, evict BE procs, and stop once nothing runs.
    let mut done = Vec::new();
    for (realm, s) in serving.iter_mut() {
        if grants.contains_key(realm) {
            continue;
        }
        if !s.withdrawn {
            s.withdrawn = true;
            s.grant.store(0, Ordering::SeqCst);
            match tabos_kernel::procs::drain(&node.store, realm, &id, true).await {
                Ok(_) | Err(tabos_kernel::Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
            s.procd.regranted().await;
        }
        if s.procd.idle() {
            let _ = s.stop.send(true);
            done.push(realm.clone());
        }
    }
    for realm in done {
        serving.remove(&realm);
        served.remove(&realm);
        match tabos_kernel::procs::hand_back(&node.store, &realm, &node.worker_id(), &id).await {
            Ok(_) | Err(tabos_kernel::Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Registers this node's worker in `realm` with `cores` (the grant), kept
/// drained if the node is.
async fn register(node: &Node, realm: &str, cores: i64) -> Result<(), tabos_kernel::Error> {
    let spec = WorkerSpec {
        cores,
        ..node.worker_spec()
    };
    let (store, r) = (node.store.clone(), realm.to_string());
    tokio::task::spawn_blocking(move || tabos_kernel::procs::register_worker(&store, &r, &spec))
        .await
        .map_err(|e| tabos_kernel::Error::Invalid(format!("registering a worker: {e}")))??;
    // Drained as the node is: a worker withdrawn earlier was drained, and
    // a node drained by its operator stays so.
    let id = &node.settings.node_id;
    let draining = tabos_kernel::nodes::is_draining(&node.store, id).await?;
    tabos_kernel::procs::drain(&node.store, realm, id, draining).await?;
    Ok(())
}

fn new_procd(
    node: &Node,
    addr: &procd::NodeAddr,
    realm: &str,
    cores: i64,
    grant: Arc<AtomicI64>,
    be_realm: bool,
) -> Arc<Procd> {
    Procd::new(
        node.store.clone(),
        node.files.clone(),
        node.procedures.clone(),
        realm,
        WorkerSpec {
            cores,
            ..node.worker_spec()
        },
        node.logs.clone(),
        addr.clone(),
        node.sandbox.clone(),
        procd::Policy {
            cores: cores.max(1),
            be_util_pct: node.settings.be_util_pct,
            steal_after: node.settings.steal_after,
            mailbox: node.settings.mailbox,
            logs_per_realm_max: node.settings.logs_per_realm_max,
        },
        node.auth.clone(),
        // Its own busy cores: admission goes by its grant alone.
        procd::Shared {
            metrics: Some(node.metrics.clone()),
            code: Some(node.code.clone()),
            programs: node.programs.clone(),
            ..procd::Shared::granted()
        },
        node.load.clone(),
        node.confine.clone(),
        Some(grant),
        be_realm,
    )
}
