//! The retention reaper: removes each realm's record of what is over once
//! it is older than the realm's retention ([`tabos_kernel::retention`]).
//!
//! Time is the event here, so this is a timer, not polling: each realm with
//! a retention is looked at every [`retention::pass_us`] of it (a sixteenth
//! of the retention, between a second and a minute), and the list of such
//! realms is read again on each wake. A retention set or cleared anywhere
//! is told on [`realms::RETENTION_CHANNEL`], which wakes the reaper at once
//! (on PostgreSQL the feed carries other nodes' notifications too). Only
//! the cluster's leader expires (nodes sharing a database would otherwise
//! delete the same rows at once, and on PostgreSQL retry each other's
//! conflicts); a node that gains the lead starts at once, one that loses
//! it stops. Expiring is idempotent, so two leaders for a moment agree.

use std::collections::BTreeMap;

use tabos_kernel::realms::{self, Retention};
use tabos_kernel::{retention, Error as KError};

use crate::Node;

/// Wait after a failed pass before trying that realm again.
const RETRY_AFTER_US: i64 = 5_000_000;

/// Runs the reaper until `stop`.
pub async fn reap(node: Node, mut stop: tokio::sync::watch::Receiver<bool>) {
    let store = node.store.clone();
    let mut told = store.subscribe(realms::RETENTION_CHANNEL);
    let mut leading = node.standing.watch_leading();
    // When each realm with a retention is due (µs), and its retention.
    let mut due: BTreeMap<String, (i64, Retention)> = BTreeMap::new();
    loop {
        if !*leading.borrow_and_update() {
            // Not the leader: nothing to do until this node leads.
            due.clear();
            tokio::select! {
                _ = stop.changed() => return,
                changed = leading.changed() => if changed.is_err() { return },
            }
            continue;
        }
        // The realms with a retention now: new ones are due at once, those
        // whose retention changed by their new pace, cleared ones forgotten.
        let mut listed = BTreeMap::new();
        for p in 0..store.partitions() {
            match retention::retained(&store, tabos_store::PKey(p)).await {
                Ok(rs) => listed.extend(rs),
                Err(KError::Store(tabos_store::Error::Closed)) => return,
                Err(e) => tracing::warn!(node = %node.settings.node_id, "retention: {e}"),
            }
        }
        due.retain(|realm, _| listed.contains_key(realm));
        let now = tabos_store::now_us();
        for (realm, r) in listed {
            let at = due
                .get(&realm)
                .map_or(now, |(at, old)| if *old == r { *at } else { now });
            due.insert(realm, (at, r));
        }
        for (realm, (at, r)) in due.iter_mut() {
            if *at > now {
                continue;
            }
            *at = match retention::expire(&store, realm).await {
                Ok(e) => {
                    if e.total() > 0 {
                        tracing::info!(
                            node = %node.settings.node_id,
                            "retention: realm {realm}: removed {} ended procs, {} events, {} logged messages",
                            e.procs, e.events, e.messages
                        );
                    }
                    if e.more {
                        now
                    } else {
                        now + retention::pass_us(*r)
                    }
                }
                Err(KError::Store(tabos_store::Error::Closed)) => return,
                // The realm removed meanwhile: forgotten at the next listing.
                Err(e) => {
                    tracing::warn!(node = %node.settings.node_id, "retention: realm {realm}: {e}");
                    now + RETRY_AFTER_US
                }
            };
        }
        let sleep = crate::supervise::sleep_until_us(due.values().map(|(at, _)| *at).min());
        tokio::select! {
            _ = stop.changed() => return,
            note = told.recv() => {
                if note.is_err() {
                    // Cut off: subscribe again; the listing reads what was missed.
                    told = store.subscribe(realms::RETENTION_CHANNEL);
                }
            }
            _ = sleep => {}
            changed = leading.changed() => if changed.is_err() { return },
        }
    }
}
