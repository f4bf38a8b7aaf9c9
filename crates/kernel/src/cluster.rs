//! The cluster as a caller may see and steer it: its realms (created, set
//! and removed by operators; each listed to itself), its nodes (listed to
//! every role, each realm's share on them only to that realm; removed and
//! drained by operators) and elastic allocation (a realm's to its readers;
//! policies, settings and the managers' decisions to operators).
//!
//! It owns no table: it asks its [`Caller`] first, then calls the modules
//! that own them ([`crate::realms`], [`crate::nodes`], [`crate::alloc`],
//! [`crate::procs`], [`crate::teardown`], [`crate::backup`]) — most of which sit below
//! authentication in the kernel's layers and so cannot ask it themselves.

use std::collections::BTreeMap;

use tabos_store::Store;

use crate::alloc::{self, Decision, Demand, Grant, Policy, RealmAlloc, Settings};
use crate::auth::{self, Caller, Minted, Principal, Role, Spec};
use crate::fs::files::Files;
use crate::ids::NodeId;
use crate::nodes::{self, NodeInfo, CLUSTER_PARTITION};
use crate::procs::{self, Drained};
use crate::realms::{self, Quota, Usage, QUOTA_NAMES};
use crate::sched::Scheduler;
use crate::{teardown, validate_realm, Error, Result};

/// What the node calls are, for refusals.
const USE: &str = "use the cluster's calls";

/// Runs blocking `f` off the async runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Invalid(format!("cluster read task failed: {e}")))?
}

/// The cluster's nodes: an operator sees every realm on them, anyone
/// else only its own.
pub async fn nodes(store: &Store, who: &Caller) -> Result<Vec<NodeInfo>> {
    who.may(Role::Reader, USE)?;
    let only = (!who.is_operator()).then(|| who.realm().to_string());
    let store = store.clone();
    blocking(move || nodes::list(&store, only.as_deref())).await
}

/// Removes node `node_id`'s row (one that has left): an operator's call.
pub async fn remove_node(store: &Store, who: &Caller, node_id: &NodeId) -> Result<()> {
    who.may(Role::Operator, USE)?;
    nodes::remove(store, node_id).await
}

/// Backs this node up into the new directory `dest` on its machine
/// ([`crate::backup::take`]): an operator's call.
pub async fn backup(
    files: &Files,
    who: &Caller,
    dest: &std::path::Path,
    db_url: Option<&str>,
) -> Result<crate::backup::Backup> {
    who.may(Role::Operator, USE)?;
    crate::backup::take(files, dest, db_url).await
}

/// Drains node `node_id` (`on`) or puts it back ([`procs::drain_node`]):
/// an operator's call.
pub async fn drain_node(
    store: &Store,
    who: &Caller,
    node_id: &NodeId,
    on: bool,
) -> Result<Drained> {
    who.may(Role::Operator, USE)?;
    procs::drain_node(store, node_id, on).await
}

/// Changes the elastic policy of the caller's realm (one that is elastic):
/// an operator's call.
pub async fn set_elastic(store: &Store, who: &Caller, policy: Policy) -> Result<()> {
    who.may(Role::Operator, USE)?;
    policy.validate()?;
    alloc::set_policy(store, who.realm(), policy, false).await
}

/// A realm's allocation as its readers see it.
#[derive(Debug, Clone, Default)]
pub struct Allocation {
    pub realm: String,
    /// What its procs ask for now.
    pub demand: Demand,
    /// `Some` for an elastic realm, with its grants and latest decisions.
    pub elastic: Option<(RealmAlloc, Vec<Grant>, Vec<Decision>)>,
}

/// The caller's realm's allocation, with its latest `limit` decisions.
pub async fn allocation(store: &Store, who: &Caller, limit: usize) -> Result<Allocation> {
    who.may(Role::Reader, USE)?;
    let realm = who.realm();
    let demand = alloc::demand(store, realm).await?;
    let elastic = match alloc::get(store, realm).await? {
        None => None,
        Some(a) => Some((
            a,
            alloc::grants_of_realm(store, realm).await?,
            alloc::history(store, Some(realm), limit).await?,
        )),
    };
    Ok(Allocation {
        realm: realm.to_string(),
        demand,
        elastic,
    })
}

/// A manager's lease: `(name, holder, epoch, expires_us)`.
pub type Leader = (String, String, i64, i64);

/// Changes the allocation settings named in `set` (each checked before
/// any is made; none: only reads them) and says who leads the managers:
/// an operator's call.
pub async fn alloc_settings(
    store: &Store,
    who: &Caller,
    set: &BTreeMap<String, i64>,
) -> Result<(Settings, Vec<Leader>)> {
    who.may(Role::Operator, USE)?;
    for (name, value) in set {
        alloc::check_setting(name, *value)?;
    }
    let mut settings = alloc::settings(store).await?;
    for (name, value) in set {
        settings = alloc::set_setting(store, name, *value).await?;
    }
    Ok((settings, alloc::leaders(store).await?))
}

/// The managers' latest `limit` decisions, for the caller's realm or
/// (`every_realm`) all: an operator's call.
pub async fn decisions(
    store: &Store,
    who: &Caller,
    every_realm: bool,
    limit: usize,
) -> Result<Vec<Decision>> {
    who.may(Role::Operator, USE)?;
    let realm = (!every_realm).then(|| who.realm().as_str());
    alloc::history(store, realm, limit).await
}

// ---- Realms ----

/// What `tabos realm set` may clear besides the quotas.
pub const CLEAR_HOST_PATHS: &str = "host-paths";
/// What `tabos realm set` clears to keep a realm's record until pruned by
/// hand.
pub const CLEAR_RETENTION: &str = "retention";

/// Creates realm `realm` with its first admin credential (`root`), which
/// commit together; an elastic realm's policy is set first, so that no
/// static node ever serves it. An operator's call.
pub async fn create_realm(
    store: &Store,
    who: &Caller,
    realm: &str,
    scheduler: Scheduler,
    elastic: Option<Policy>,
) -> Result<(Minted, Principal)> {
    who.may(Role::Operator, "create realms")?;
    validate_realm(realm)?;
    let minted = auth::mint()?;
    let spec = Spec {
        note: "realm admin (tabos realm create)".into(),
        ..Spec::realm(realm, auth::ROOT, Role::Admin)
    };
    if let Some(policy) = elastic {
        policy.validate()?;
        alloc::set_policy(store, realm, policy, true).await?;
    }
    let (r, m, now) = (realm.to_string(), minted.clone(), tabos_store::now_us());
    let created = crate::call(store, realm, move |tx| {
        realms::create_tx(tx, &r, scheduler, now)?;
        auth::create_tx(tx, &spec, &m, now)
    })
    .await;
    match created {
        Ok(p) => Ok((minted, p)),
        Err(e) => {
            if elastic.is_some() {
                // Undone: the realm did not come to be.
                let r = realm.to_string();
                let _ = store
                    .run(CLUSTER_PARTITION, move |tx| alloc::forget_tx(tx, &r))
                    .await;
            }
            Err(e)
        }
    }
}

/// A change to a realm's settings: each quota `set` names is set, each
/// named in `clear` (or [`CLEAR_HOST_PATHS`]) removed, the rest left as
/// they are.
#[derive(Debug, Clone, Default)]
pub struct RealmChange {
    /// The quotas to set (`None`: left as it is).
    pub set: Quota,
    pub clear: Vec<String>,
    /// Replaces the allowed host paths when not empty.
    pub host_paths: Vec<String>,
    pub host_network: Option<bool>,
    /// A new retention ([`realms::Retention`]; cleared by
    /// [`CLEAR_RETENTION`]).
    pub retention: Option<realms::Retention>,
    /// What its provenance records (`None`: left as it is).
    pub provenance: Option<realms::Provenance>,
}

/// Changes realm `realm`'s quotas and host access in one transaction: an
/// operator's call. Returns the realm as it is then.
pub async fn set_realm(store: &Store, who: &Caller, realm: &str, c: RealmChange) -> Result<Usage> {
    who.may(Role::Operator, "set realms' quotas")?;
    validate_realm(realm)?;
    for what in &c.clear {
        if !QUOTA_NAMES.contains(&what.as_str())
            && what != CLEAR_HOST_PATHS
            && what != CLEAR_RETENTION
        {
            return Err(Error::Invalid(format!(
                "what to clear is {CLEAR_HOST_PATHS}, {CLEAR_RETENTION} or a quota: {}, \
                 not {what:?}",
                QUOTA_NAMES.join(", ")
            )));
        }
    }
    if c.retention.is_some() && c.clear.iter().any(|x| x == CLEAR_RETENTION) {
        return Err(Error::Invalid(
            "a retention is either set or cleared, not both".into(),
        ));
    }
    let r = realm.to_string();
    crate::call(store, realm, move |tx| {
        let mut q = realms::quota_tx(tx, &r)?;
        let cleared = |what: &str| c.clear.iter().any(|x| x == what);
        let pick = |what: &str, new: Option<i64>, old: Option<i64>| {
            if cleared(what) {
                None
            } else {
                new.or(old)
            }
        };
        let new = c.set;
        q.procs = pick("procs", new.procs, q.procs);
        q.cores = pick("cores", new.cores, q.cores);
        q.mem_mb = pick("memory", new.mem_mb, q.mem_mb);
        q.storage_mb = pick("storage", new.storage_mb, q.storage_mb);
        q.mailbox_mb = pick("mailbox", new.mailbox_mb, q.mailbox_mb);
        q.procedures = pick("procedures", new.procedures, q.procedures);
        if cleared(CLEAR_HOST_PATHS) {
            realms::set_host_paths_tx(tx, &r, &[])?;
        } else if !c.host_paths.is_empty() {
            realms::set_host_paths_tx(tx, &r, &c.host_paths)?;
        }
        if let Some(allowed) = c.host_network {
            realms::set_host_network_tx(tx, &r, allowed)?;
        }
        if cleared(CLEAR_RETENTION) {
            realms::set_retention_tx(tx, &r, None)?;
        } else if let Some(keep) = c.retention {
            realms::set_retention_tx(tx, &r, Some(keep))?;
        }
        if let Some(p) = c.provenance {
            realms::set_provenance_tx(tx, &r, p)?;
        }
        realms::set_quota_tx(tx, &r, &q)
    })
    .await?;
    let store = store.clone();
    let r = realm.to_string();
    blocking(move || realms::usage(&store, Some(&r)))
        .await?
        .pop()
        .ok_or_else(|| Error::NotFound(format!("realm {realm}, just set")))
}

/// Removes realm `realm` and everything of it ([`teardown::remove_realm`]):
/// an operator's call. Returns the rows deleted.
pub async fn remove_realm(files: &Files, who: &Caller, realm: &str) -> Result<u64> {
    who.may(Role::Operator, "remove realms")?;
    teardown::remove_realm(files, realm).await
}

/// The realms and what they use: an operator sees every realm, anyone
/// else only its own.
pub async fn realms(store: &Store, who: &Caller) -> Result<Vec<Usage>> {
    who.may(Role::Reader, USE)?;
    let only = (!who.is_operator()).then(|| who.realm().to_string());
    let store = store.clone();
    blocking(move || realms::usage(&store, only.as_deref())).await
}
