//! The cluster's managers, run by every node (issue 19, item 2; σOS thesis
//! section 3.5): the σMGR, which grants elastic nodes' cores to elastic
//! realms, and one RMGR per elastic realm, which asks for cores as its
//! realm's demand changes. Each is a lease in `manager_lease`: one node
//! leads it, every other node is its standby and takes over once the lease
//! lapses (a leader that stops cleanly resigns, so at once); every write of
//! a leader is fenced by its lease's epoch. The decisions are
//! `tabos_kernel::alloc`'s; this is the loop that makes them.
//!
//! Only the node that leads the cluster (it holds `alloc::CLUSTER_LEASE`,
//! renewed in its heartbeat: see `crate::lease`) looks: a look happens
//! every `tick_ms` (a setting) while anything is elastic — demand and
//! leases are measurements over time — and also at once when a realm's
//! want or policy, a setting, or the cluster's nodes change (the change
//! feed); with nothing elastic, only then. A lease is renewed only in its
//! second half (`alloc::campaign_tx`), so a look is mostly reads. The
//! other nodes make no campaigns and read nothing; once the leader is
//! gone, its successor takes the managers' leases as they lapse.

use std::collections::HashMap;

use tabos_kernel::alloc::{self, Demand, Leadership, RealmAlloc, Settings, Want};
use tabos_kernel::nodes::CLUSTER_PARTITION;

use crate::Node;

/// Runs the managers' loop until `stop`; then resigns every lease this
/// node holds, so standbys take over at once.
pub async fn run(node: Node, mut stop: tokio::sync::watch::Receiver<bool>) {
    let store = node.store.clone();
    let mut wants = store.subscribe(alloc::WANTS_CHANNEL);
    let mut nodes = store.subscribe(tabos_kernel::nodes::CHANGED_CHANNEL);
    // When each realm this node's RMGR leads fell below what it has.
    let mut below: HashMap<String, i64> = HashMap::new();
    let mut settings = Settings::default();
    let mut leading = node.standing.watch_leading();
    loop {
        // Only the cluster's leader manages (its heartbeat holds the
        // cluster's lease); a standby reads and writes nothing here, and
        // waits to be told it leads.
        if !*leading.borrow_and_update() {
            tokio::select! {
                _ = stop.changed() => break,
                r = leading.changed() => if r.is_err() { break },
            }
            continue;
        }
        match alloc::settings(&store).await {
            Ok(s) => settings = s,
            Err(e) => tracing::warn!(
                node = %node.settings.node_id, "cannot read allocation settings: {e}"),
        }
        // Whether anything is elastic: with no elastic realm and no
        // elastic node there is nothing to measure over time, so the
        // leader waits for the change feed alone (issue 35, item 4).
        let active = match look(&node, &settings, &mut below).await {
            Ok(active) => active,
            Err(e) => {
                // Another leader, a conflict, the database away: the next
                // look starts over.
                if !matches!(e, tabos_kernel::Error::StaleEpoch { .. }) {
                    tracing::warn!(node = %node.settings.node_id, "managers: {e}");
                }
                true
            }
        };
        let tick_ms = settings.tick_ms as u64;
        let tick = async move {
            if active {
                tokio::time::sleep(std::time::Duration::from_millis(tick_ms)).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = stop.changed() => break,
            () = tick => {}
            r = leading.changed() => if r.is_err() { break },
            n = wants.recv() => if n.is_err() {
                wants = store.subscribe(alloc::WANTS_CHANNEL);
            },
            n = nodes.recv() => if n.is_err() {
                nodes = store.subscribe(tabos_kernel::nodes::CHANGED_CHANNEL);
            },
        }
    }
    let me = node.settings.node_id.clone();
    if let Err(e) = store
        .run(CLUSTER_PARTITION, move |tx| alloc::resign_all_tx(tx, &me))
        .await
    {
        tracing::warn!(
            node = %node.settings.node_id, "cannot resign its leases: {e}");
    }
}

/// One look: campaign for every lease, then do what the leases held say.
/// Returns whether anything is elastic (else nothing was campaigned for).
async fn look(
    node: &Node,
    settings: &Settings,
    below: &mut HashMap<String, i64>,
) -> Result<bool, tabos_kernel::Error> {
    let store = &node.store;
    let me = node.settings.node_id.clone();
    let now = tabos_store::now_us();
    let lease_us = settings.lease_ms * 1_000;
    let looked = store
        .run(CLUSTER_PARTITION, move |tx| {
            let realms = alloc::realms_tx(tx)?;
            if realms.is_empty() && alloc::view_tx(tx)?.pool.is_empty() {
                return Ok(None);
            }
            let smgr = alloc::campaign_tx(tx, alloc::SMGR, &me, now, lease_us)?;
            let mut led: Vec<(RealmAlloc, Leadership)> = Vec::new();
            for r in &realms {
                if let Some(l) = alloc::campaign_tx(tx, &alloc::rmgr(&r.realm), &me, now, lease_us)?
                {
                    led.push((r.clone(), l));
                }
            }
            let grants = alloc::grants_tx(tx, None)?;
            Ok::<_, tabos_kernel::Error>(Some((smgr, led, realms, grants)))
        })
        .await?;
    let Some((smgr, led, realms, grants)) = looked else {
        below.clear();
        return Ok(false);
    };
    below.retain(|r, _| led.iter().any(|(l, _)| &l.realm == r));
    if smgr.is_none() && led.is_empty() {
        return Ok(true);
    }
    // The demand of every realm this node decides for: its RMGRs' realms,
    // and as σMGR every elastic realm (where their procs run).
    let mut demands: HashMap<String, Demand> = HashMap::new();
    for r in &realms {
        let leads = led.iter().any(|(l, _)| l.realm == r.realm);
        if !(leads || smgr.is_some()) {
            continue;
        }
        match alloc::demand(store, &r.realm).await {
            Ok(d) => {
                demands.insert(r.realm.clone(), d);
            }
            // Removed meanwhile.
            Err(tabos_kernel::Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let now = tabos_store::now_us();
    let mut decided: Vec<(Leadership, String, Want)> = Vec::new();
    for (r, lead) in &led {
        let Some(d) = demands.get(&r.realm) else {
            continue;
        };
        let granted: i64 = grants
            .iter()
            .filter(|g| g.realm == r.realm)
            .map(|g| g.cores)
            .sum();
        let since = if d.live_cores < granted {
            Some(*below.entry(r.realm.clone()).or_insert(now))
        } else {
            below.remove(&r.realm);
            None
        };
        if let Some(w) =
            alloc::rmgr_decide(&r.policy, r.want_cores, granted, d, since, now, settings)
        {
            decided.push((lead.clone(), r.realm.clone(), w));
        }
    }
    store
        .run(CLUSTER_PARTITION, move |tx| {
            for (lead, realm, want) in &decided {
                match alloc::set_want_tx(tx, lead, realm, want, now) {
                    // Deposed meanwhile, or the realm is gone: its next
                    // leader decides.
                    Err(
                        tabos_kernel::Error::StaleEpoch { .. } | tabos_kernel::Error::NotFound(_),
                    ) => {}
                    r => r?,
                }
            }
            if let Some(lead) = &smgr {
                // The pool: the nodes the cluster's leader has not
                // declared lost (it judges only while it reaches the
                // database: see `crate::lease`).
                let mut view = alloc::view_tx(tx)?;
                for g in &mut view.grants {
                    g.used = demands
                        .get(&g.realm)
                        .and_then(|d| d.by_node.iter().find(|(n, _)| *n == g.node_id))
                        .map_or(0, |(_, c)| *c);
                }
                let changes = alloc::plan(&view.pool, &view.grants, &view.realms);
                if !changes.is_empty() {
                    alloc::apply_tx(tx, lead, &changes, now)?;
                }
            }
            Ok::<_, tabos_kernel::Error>(())
        })
        .await?;
    Ok(true)
}
