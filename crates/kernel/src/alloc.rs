//! Elastic realms (issue 19, item 2; σOS thesis section 3.5, Figures 3-7
//! to 3-9): which cores of which node serve which realm, who decides, and
//! why.
//!
//! Tables (migration 023), all on partition 0 ([`CLUSTER_PARTITION`]):
//!
//! * `realm_alloc(realm, class, min_cores, max_cores, want_cores,
//!   want_reason, want_us)` — an elastic realm's policy and what its realm
//!   manager last asked for. A realm without a row is static: every static
//!   node serves it with all its cores, as before.
//! * `core_grant(node_id, realm, cores, since_us)` — the cores of an
//!   elastic node (`node.elastic`) given to an elastic realm: whole or
//!   partial machines. Invariant: a node's grants add up to at most its
//!   cores (checked by [`plan`]'s callers, asserted by [`apply_tx`]).
//! * `alloc_decision(seq, at_us, manager, realm, node_id, cores_before,
//!   cores_after, reason)` — every decision with its reason: what
//!   `tabos realm show` prints as the realm's allocation over time.
//! * `manager_lease(name, holder, epoch, expires_us)` — the managers'
//!   leaders, each with standbys ([`campaign_tx`]); a takeover bumps the
//!   epoch, and every write of a manager is fenced by its epoch.
//! * `alloc_setting(name, value)` — the policy's parameters
//!   ([`Settings`]), changed while running.
//!
//! The managers, as in σOS: a realm manager (RMGR, one leader per elastic
//! realm) watches its realm's demand — the cores of its live procs,
//! placed or waiting ([`demand_tx`]) — and asks for cores
//! ([`rmgr_decide`], [`set_want_tx`]): at once when demand exceeds what it
//! has, and only after the realm stayed below it for `idle_ms` when it
//! could give some back. The cluster manager (σMGR, one leader) turns the
//! realms' wants into grants ([`plan`]): it gives back what realms no
//! longer want, grows LC realms before BE realms from free cores (the
//! realm's own nodes first, then whole free machines, then partial ones),
//! and when an LC realm still lacks cores it takes them back from BE
//! realms above their minimum — whose nodes then evict BE procs to fit
//! (the node's part). Unlike σOS's conservative eviction (its LC realm at
//! 44 % of dedicated throughput in Figure 6-3), a take-back happens in the
//! σMGR's next decision after the LC realm asks.
//!
//! The loops that run the managers are the node's (`tabos-node`,
//! `managers.rs`); everything here is procedures and a pure planner.

use std::collections::BTreeMap;

use tabos_store::{params, Store, Tx};

use crate::nodes::CLUSTER_PARTITION;
use crate::procs::Class;
use crate::{validate_realm, Error, Result};

/// The σMGR's lease name.
pub const SMGR: &str = "smgr";
/// The cluster's own lease: its holder judges the nodes' leases (see
/// `crate::nodes`) and runs the managers. Held in `manager_lease` beside
/// theirs; renewed in the leader's heartbeat.
pub const CLUSTER_LEASE: &str = "cluster";
/// Most decisions kept; older ones are pruned as new ones are written.
pub const DECISIONS_KEEP: i64 = 100_000;
/// Most decisions [`history`] returns.
pub const HISTORY_MAX: usize = 10_000;
/// Most elastic realms (the σMGR plans them all in one transaction).
pub const ELASTIC_REALMS_MAX: i64 = 1_024;
/// Longest reason stored, in bytes.
pub const REASON_BYTES_MAX: usize = 512;
/// Most cores a realm may ask for.
pub const CORES_MAX: i64 = 1 << 20;
/// Channel on which the σMGR is woken: a realm's want or policy changed.
pub const WANTS_CHANNEL: &str = "alloc/wants";

/// The RMGR lease name of `realm`.
pub fn rmgr(realm: &str) -> String {
    format!("rmgr/{realm}")
}

/// The channel on which node `node_id` is told its grants changed
/// (payload: the realm).
pub fn node_channel(node_id: &str) -> String {
    format!("alloc/node/{node_id}")
}

// ---- Policy ----

/// An elastic realm's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// LC realms are grown first and take cores back from BE realms.
    pub class: Class,
    pub min_cores: i64,
    pub max_cores: i64,
}

impl Policy {
    pub fn validate(&self) -> Result<()> {
        if self.min_cores < 0 || self.max_cores <= 0 || self.max_cores < self.min_cores {
            return Err(Error::Invalid(format!(
                "an elastic realm needs 0 <= min cores <= max cores and max cores > 0, \
                 not min {} and max {}",
                self.min_cores, self.max_cores
            )));
        }
        if self.max_cores > CORES_MAX {
            return Err(Error::Invalid(format!(
                "an elastic realm has at most {CORES_MAX} cores"
            )));
        }
        Ok(())
    }
}

/// An elastic realm as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealmAlloc {
    pub realm: String,
    pub policy: Policy,
    /// What its RMGR last asked for, why, and when.
    pub want_cores: i64,
    pub want_reason: String,
    pub want_us: i64,
}

/// Procedure body (partition 0): makes `realm` elastic with `policy`
/// (`create`), or changes the policy of a realm that is. A new realm
/// starts wanting its minimum.
pub fn set_policy_tx(
    tx: &mut dyn Tx,
    realm: &str,
    policy: Policy,
    create: bool,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    policy.validate()?;
    let p = i64::from(tx.p_key().0);
    let exists = tx
        .query_opt(
            "SELECT 1 FROM realm_alloc WHERE p_key = $1 AND realm = $2",
            params![p, realm],
        )?
        .is_some();
    match (create, exists) {
        (true, true) => {
            return Err(Error::AlreadyExists(format!(
                "realm {realm} is elastic already"
            )))
        }
        (false, false) => {
            return Err(Error::NotFound(format!("realm {realm} is not elastic")));
        }
        (true, false) => {
            let n: i64 = tx.query_scalar(
                "SELECT count(*) FROM realm_alloc WHERE p_key = $1",
                params![p],
            )?;
            if n >= ELASTIC_REALMS_MAX {
                return Err(Error::Full(format!(
                    "the cluster has {ELASTIC_REALMS_MAX} elastic realms, its most"
                )));
            }
            tx.execute(
                "INSERT INTO realm_alloc (p_key, realm, class, min_cores, max_cores, want_cores, \
                                          want_reason, want_us, created_us) \
                 VALUES ($1, $2, $3, $4, $5, $4, 'its minimum, as created', $6, $6)",
                params![
                    p,
                    realm,
                    policy.class.as_str(),
                    policy.min_cores,
                    policy.max_cores,
                    now_us
                ],
            )?;
        }
        (false, true) => {
            // The want is clamped to the new bounds at once; its RMGR
            // refines it at its next look.
            tx.execute(
                "UPDATE realm_alloc SET class = $3, min_cores = $4, max_cores = $5, \
                   want_cores = CASE WHEN want_cores < $4 THEN $4 \
                                     WHEN want_cores > $5 THEN $5 ELSE want_cores END \
                 WHERE p_key = $1 AND realm = $2",
                params![
                    p,
                    realm,
                    policy.class.as_str(),
                    policy.min_cores,
                    policy.max_cores
                ],
            )?;
        }
    }
    tx.notify(WANTS_CHANNEL, realm)?;
    Ok(())
}

/// Makes `realm` elastic, or changes its policy (see [`set_policy_tx`]).
pub async fn set_policy(store: &Store, realm: &str, policy: Policy, create: bool) -> Result<()> {
    let r = realm.to_string();
    let now = tabos_store::now_us();
    store
        .run(CLUSTER_PARTITION, move |tx| {
            set_policy_tx(tx, &r, policy, create, now)
        })
        .await
}

fn alloc_from_row(r: &tabos_store::Row) -> Result<RealmAlloc> {
    Ok(RealmAlloc {
        realm: r.get(0)?,
        policy: Policy {
            class: r.get::<String>(1)?.parse()?,
            min_cores: r.get(2)?,
            max_cores: r.get(3)?,
        },
        want_cores: r.get(4)?,
        want_reason: r.get(5)?,
        want_us: r.get(6)?,
    })
}

const ALLOC_COLUMNS: &str = "realm, class, min_cores, max_cores, want_cores, want_reason, want_us";

/// Procedure body (partition 0): every elastic realm, by name.
pub fn realms_tx(tx: &mut dyn Tx) -> Result<Vec<RealmAlloc>> {
    let rows = tx.query(
        "SELECT realm, class, min_cores, max_cores, want_cores, want_reason, want_us \
         FROM realm_alloc WHERE p_key = $1 ORDER BY realm",
        params![i64::from(tx.p_key().0)],
    )?;
    debug_assert!(ALLOC_COLUMNS.starts_with("realm, class"));
    rows.iter().map(alloc_from_row).collect()
}

/// Realm `realm`'s allocation, if it is elastic.
pub async fn get(store: &Store, realm: &str) -> Result<Option<RealmAlloc>> {
    validate_realm(realm)?;
    let r = realm.to_string();
    store
        .read(CLUSTER_PARTITION, move |tx| {
            let row = tx.query_opt(
                "SELECT realm, class, min_cores, max_cores, want_cores, want_reason, want_us \
                 FROM realm_alloc WHERE p_key = $1 AND realm = $2",
                params![i64::from(tx.p_key().0), r.as_str()],
            )?;
            row.as_ref().map(alloc_from_row).transpose()
        })
        .await
}

/// Every elastic realm.
pub async fn realms(store: &Store) -> Result<Vec<RealmAlloc>> {
    store.read(CLUSTER_PARTITION, realms_tx).await
}

/// Procedure body (partition 0): forgets `realm`'s policy and grants (the
/// realm is being removed); tells the nodes that served it.
pub fn forget_tx(tx: &mut dyn Tx, realm: &str) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let nodes = tx.query(
        "DELETE FROM core_grant WHERE p_key = $1 AND realm = $2 RETURNING node_id",
        params![p, realm],
    )?;
    for n in &nodes {
        tx.notify(&node_channel(&n.get::<String>(0)?), realm)?;
    }
    tx.execute(
        "DELETE FROM realm_alloc WHERE p_key = $1 AND realm = $2",
        params![p, realm],
    )?;
    tx.execute(
        "DELETE FROM manager_lease WHERE p_key = $1 AND name = $2",
        params![p, rmgr(realm)],
    )?;
    tx.notify(WANTS_CHANNEL, realm)?;
    Ok(())
}

// ---- Settings ----

/// The allocation policy's parameters (table `alloc_setting`; a missing
/// row is the default). Each is bounded ([`Settings::BOUNDS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How often the managers look (ms): demand is a measurement over time.
    pub tick_ms: i64,
    /// How long a realm's demand must stay below what it has before its
    /// RMGR gives cores back (ms).
    pub idle_ms: i64,
    /// How long a manager's lease lasts without renewal (ms): a standby
    /// takes over this long after a leader dies.
    pub lease_ms: i64,
    /// Headroom an RMGR asks for above its realm's demand, in percent of
    /// it (0: exactly the demand).
    pub headroom_pct: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tick_ms: 200,
            idle_ms: 2_000,
            lease_ms: 2_000,
            headroom_pct: 0,
        }
    }
}

impl Settings {
    /// Each setting's name and bounds (inclusive).
    pub const BOUNDS: [(&'static str, i64, i64); 4] = [
        ("tick_ms", 10, 60_000),
        ("idle_ms", 0, 3_600_000),
        ("lease_ms", 100, 600_000),
        ("headroom_pct", 0, 1_000),
    ];

    fn slot(&mut self, name: &str) -> Option<&mut i64> {
        match name {
            "tick_ms" => Some(&mut self.tick_ms),
            "idle_ms" => Some(&mut self.idle_ms),
            "lease_ms" => Some(&mut self.lease_ms),
            "headroom_pct" => Some(&mut self.headroom_pct),
            _ => None,
        }
    }

    /// The settings as `(name, value)` pairs, in [`Self::BOUNDS`]' order.
    pub fn pairs(&self) -> Vec<(&'static str, i64)> {
        let mut s = *self;
        Self::BOUNDS
            .iter()
            .map(|(n, _, _)| (*n, *s.slot(n).expect("every bound names a setting")))
            .collect()
    }
}

/// Checks a setting's name and value.
pub fn check_setting(name: &str, value: i64) -> Result<()> {
    let Some((_, lo, hi)) = Settings::BOUNDS.iter().find(|(n, _, _)| *n == name) else {
        let names: Vec<&str> = Settings::BOUNDS.iter().map(|(n, _, _)| *n).collect();
        return Err(Error::Invalid(format!(
            "no allocation setting {name:?}; there are {}",
            names.join(", ")
        )));
    };
    if value < *lo || value > *hi {
        return Err(Error::Invalid(format!(
            "{name} is between {lo} and {hi}, not {value}"
        )));
    }
    Ok(())
}

/// Procedure body (partition 0): the settings now.
pub fn settings_tx(tx: &mut dyn Tx) -> Result<Settings> {
    let rows = tx.query(
        "SELECT name, value FROM alloc_setting WHERE p_key = $1",
        params![i64::from(tx.p_key().0)],
    )?;
    let mut s = Settings::default();
    for r in &rows {
        let name: String = r.get(0)?;
        // A row this version does not know (written by a newer one) is
        // left alone.
        if let Some(slot) = s.slot(&name) {
            *slot = r.get(1)?;
        }
    }
    Ok(s)
}

/// The settings now.
pub async fn settings(store: &Store) -> Result<Settings> {
    store.read(CLUSTER_PARTITION, settings_tx).await
}

/// Sets setting `name` to `value` (checked); the managers use it from
/// their next look.
pub async fn set_setting(store: &Store, name: &str, value: i64) -> Result<Settings> {
    check_setting(name, value)?;
    let n = name.to_string();
    store
        .run(CLUSTER_PARTITION, move |tx| {
            tx.execute(
                "INSERT INTO alloc_setting (p_key, name, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (p_key, name) DO UPDATE SET value = excluded.value",
                params![i64::from(tx.p_key().0), n.as_str(), value],
            )?;
            tx.notify(WANTS_CHANNEL, "")?;
            settings_tx(tx)
        })
        .await
}

// ---- Leases ----

/// A leadership held: the lease's name and its epoch, which fences writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    pub name: String,
    pub epoch: i64,
}

/// Procedure body (partition 0): `holder` campaigns for lease `name` at
/// `now_us`: renews it if it holds it (once less than half of it is
/// left), takes it (a new epoch) if it is free or expired, else stays a
/// standby (`None`).
pub fn campaign_tx(
    tx: &mut dyn Tx,
    name: &str,
    holder: &str,
    now_us: i64,
    lease_us: i64,
) -> Result<Option<Leadership>> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT holder, epoch, expires_us FROM manager_lease WHERE p_key = $1 AND name = $2",
        params![p, name],
    )?;
    let epoch = match row {
        Some(r) => {
            let (h, epoch, expires): (String, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if h == holder {
                // Renewed only in the lease's second half: a leader that
                // looks every tick writes about twice per lease, not once
                // per tick (issue 35, item 4). Its epoch fences as before.
                if expires - now_us > lease_us / 2 {
                    return Ok(Some(Leadership {
                        name: name.to_string(),
                        epoch,
                    }));
                }
                epoch
            } else if expires <= now_us {
                epoch + 1
            } else {
                return Ok(None);
            }
        }
        None => 1,
    };
    // The write holds only if the lease is still as read (its holder's, or
    // lapsed): under READ COMMITTED — the heartbeat's isolation — two
    // campaigners that both read it lapsed do not both take it.
    let took = tx.query_opt(
        "INSERT INTO manager_lease (p_key, name, holder, epoch, expires_us) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (p_key, name) DO UPDATE SET holder = excluded.holder, \
           epoch = excluded.epoch, expires_us = excluded.expires_us \
         WHERE manager_lease.holder = excluded.holder OR manager_lease.expires_us <= $6 \
         RETURNING epoch",
        params![p, name, holder, epoch, now_us + lease_us, now_us],
    )?;
    if took.is_none() {
        return Ok(None);
    }
    Ok(Some(Leadership {
        name: name.to_string(),
        epoch,
    }))
}

/// Procedure body (partition 0): fails with [`Error::StaleEpoch`] unless
/// `lead` is still the lease's epoch (a deposed leader writes nothing).
pub fn check_lead_tx(tx: &mut dyn Tx, lead: &Leadership) -> Result<()> {
    let epoch: Option<i64> = tx
        .query_opt(
            "SELECT epoch FROM manager_lease WHERE p_key = $1 AND name = $2",
            params![i64::from(tx.p_key().0), lead.name.as_str()],
        )?
        .map(|r| r.get(0))
        .transpose()?;
    if epoch != Some(lead.epoch) {
        return Err(Error::StaleEpoch {
            what: format!(
                "{} at epoch {} was deposed (now {epoch:?})",
                lead.name, lead.epoch
            ),
            current: epoch.unwrap_or(-1),
            given: lead.epoch,
        });
    }
    Ok(())
}

/// Procedure body (partition 0): `holder` gives up every lease it holds
/// (a clean stop), so standbys take over at once.
pub fn resign_all_tx(tx: &mut dyn Tx, holder: &str) -> Result<()> {
    tx.execute(
        "UPDATE manager_lease SET expires_us = 0 WHERE p_key = $1 AND holder = $2",
        params![i64::from(tx.p_key().0), holder],
    )?;
    Ok(())
}

/// Who leads each manager now: `(name, holder, epoch, expires_us)`.
pub async fn leaders(store: &Store) -> Result<Vec<(String, String, i64, i64)>> {
    store
        .read(CLUSTER_PARTITION, |tx| {
            let rows = tx.query(
                "SELECT name, holder, epoch, expires_us FROM manager_lease WHERE p_key = $1 \
                 ORDER BY name",
                params![i64::from(tx.p_key().0)],
            )?;
            rows.iter()
                .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .collect()
        })
        .await
}

// ---- Demand (the realm's partition) ----

/// What a realm's procs ask for now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demand {
    /// Cores of its live procs: placed, claimed, running, or waiting to be
    /// placed.
    pub live_cores: i64,
    /// Of those, the cores of procs no worker holds yet.
    pub unplaced_cores: i64,
    /// How many live procs: one of no cores still needs a worker, so a
    /// realm with live procs asks for at least one core.
    pub live_procs: i64,
    /// Of those, the cores placed on each node.
    pub by_node: Vec<(String, i64)>,
}

/// Procedure body (the realm's partition): `realm`'s demand.
pub fn demand_tx(tx: &mut dyn Tx, realm: &str) -> Result<Demand> {
    let (live_cores, unplaced_cores, live_procs) = crate::procs::live_cores_tx(tx, realm)?;
    Ok(Demand {
        live_cores,
        unplaced_cores,
        live_procs,
        by_node: crate::procs::live_cores_by_node_tx(tx, realm)?,
    })
}

/// `realm`'s demand.
pub async fn demand(store: &Store, realm: &str) -> Result<Demand> {
    let r = realm.to_string();
    crate::read(store, realm, move |tx| demand_tx(tx, &r)).await
}

// ---- RMGR ----

/// An RMGR's decision: the cores its realm wants, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub cores: i64,
    pub reason: String,
}

/// What the RMGR of a realm with `policy`, `granted` cores and `demand`
/// asks for now, given that its demand has been below `granted` since
/// `below_since_us` (`None`: it is not). `None`: keep the current want
/// `current`. Grows at once; shrinks only after `settings.idle_ms`.
pub fn rmgr_decide(
    policy: &Policy,
    current: i64,
    granted: i64,
    demand: &Demand,
    below_since_us: Option<i64>,
    now_us: i64,
    settings: &Settings,
) -> Option<Want> {
    // Procs of no cores (a job's coordinator) need a worker all the same.
    let cores = demand.live_cores.max(demand.live_procs.min(1));
    let asked = cores.saturating_add(cores.saturating_mul(settings.headroom_pct) / 100);
    let target = asked.clamp(policy.min_cores, policy.max_cores);
    let (want, reason) = if target > granted {
        (
            target,
            format!(
                "demand {} cores ({} waiting to be placed) over {granted} granted",
                demand.live_cores, demand.unplaced_cores
            ),
        )
    } else if target < granted {
        match below_since_us {
            Some(since) if now_us - since >= settings.idle_ms * 1_000 => (
                target,
                format!(
                    "demand {} cores under {granted} granted for {} ms",
                    demand.live_cores,
                    (now_us - since) / 1_000
                ),
            ),
            // Not for long enough: keep what it has.
            _ => (
                granted.clamp(policy.min_cores, policy.max_cores),
                String::new(),
            ),
        }
    } else {
        (target, String::new())
    };
    if want == current {
        return None;
    }
    let reason = if reason.is_empty() {
        format!(
            "demand {} cores; keeps {granted} granted",
            demand.live_cores
        )
    } else {
        reason
    };
    Some(Want {
        cores: want,
        reason,
    })
}

/// Procedure body (partition 0): the RMGR `lead` of `realm` records what
/// the realm wants, with a decision row; the σMGR is woken.
pub fn set_want_tx(
    tx: &mut dyn Tx,
    lead: &Leadership,
    realm: &str,
    want: &Want,
    now_us: i64,
) -> Result<()> {
    check_lead_tx(tx, lead)?;
    let p = i64::from(tx.p_key().0);
    let before: Option<i64> = tx
        .query_opt(
            "SELECT want_cores FROM realm_alloc WHERE p_key = $1 AND realm = $2",
            params![p, realm],
        )?
        .map(|r| r.get(0))
        .transpose()?;
    let Some(before) = before else {
        return Err(Error::NotFound(format!("realm {realm} is not elastic")));
    };
    let reason = bounded(&want.reason);
    tx.execute(
        "UPDATE realm_alloc SET want_cores = $3, want_reason = $4, want_us = $5 \
         WHERE p_key = $1 AND realm = $2",
        params![p, realm, want.cores, reason.as_str(), now_us],
    )?;
    decision_tx(tx, "rmgr", realm, "", before, want.cores, &reason, now_us)?;
    tx.notify(WANTS_CHANNEL, realm)?;
    Ok(())
}

fn bounded(reason: &str) -> String {
    crate::utf8_prefix(reason, REASON_BYTES_MAX).to_string()
}

#[allow(clippy::too_many_arguments)]
fn decision_tx(
    tx: &mut dyn Tx,
    manager: &str,
    realm: &str,
    node_id: &str,
    before: i64,
    after: i64,
    reason: &str,
    now_us: i64,
) -> Result<()> {
    let p = i64::from(tx.p_key().0);
    let seq: i64 = tx.query_scalar(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM alloc_decision WHERE p_key = $1",
        params![p],
    )?;
    tx.execute(
        "INSERT INTO alloc_decision (p_key, seq, at_us, manager, realm, node_id, cores_before, \
                                     cores_after, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        params![p, seq, now_us, manager, realm, node_id, before, after, reason],
    )?;
    if seq % 1_024 == 0 {
        tx.execute(
            "DELETE FROM alloc_decision WHERE p_key = $1 AND seq <= $2",
            params![p, seq - DECISIONS_KEEP],
        )?;
    }
    Ok(())
}

// ---- σMGR ----

/// A node whose cores the σMGR grants: elastic and up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolNode {
    pub node_id: String,
    pub cores: i64,
    /// False while it is drained: it keeps what it has, and is granted
    /// nothing more.
    pub accepting: bool,
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub node_id: String,
    pub realm: String,
    pub cores: i64,
    /// Cores of the realm's live procs on the node (filled in by the σMGR
    /// from the realm's partition; 0 when unknown): a shrink takes unused
    /// cores first.
    pub used: i64,
}

/// One change of a grant the σMGR decided, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub node_id: String,
    pub realm: String,
    pub from: i64,
    pub to: i64,
    pub reason: String,
}

/// The σMGR's plan: the grant changes that bring `grants` toward what
/// `realms` want on the nodes of `pool` (see the module doc for the
/// order). Pure, so it is tested on its own. Every node's grants in the
/// result add up to at most its cores.
pub fn plan(pool: &[PoolNode], grants: &[Grant], realms: &[RealmAlloc]) -> Vec<Change> {
    let cores: BTreeMap<&str, i64> = pool.iter().map(|n| (n.node_id.as_str(), n.cores)).collect();
    let accepting: BTreeMap<&str, bool> = pool
        .iter()
        .map(|n| (n.node_id.as_str(), n.accepting))
        .collect();
    let used: BTreeMap<(String, String), i64> = grants
        .iter()
        .map(|g| ((g.node_id.clone(), g.realm.clone()), g.used))
        .collect();
    let policy: BTreeMap<&str, &RealmAlloc> =
        realms.iter().map(|r| (r.realm.as_str(), r)).collect();
    // Current and planned grants, (node, realm) → cores.
    let before: BTreeMap<(String, String), i64> = grants
        .iter()
        .map(|g| ((g.node_id.clone(), g.realm.clone()), g.cores))
        .collect();
    let mut now = before.clone();
    let mut reasons: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut set = |now: &mut BTreeMap<(String, String), i64>,
                   node: &str,
                   realm: &str,
                   to: i64,
                   reason: String| {
        let key = (node.to_string(), realm.to_string());
        if to == 0 {
            now.remove(&key);
        } else {
            now.insert(key.clone(), to);
        }
        reasons
            .entry(key)
            .and_modify(|r| {
                r.push_str("; ");
                r.push_str(&reason)
            })
            .or_insert(reason);
    };

    // 1. Grants on nodes out of the pool, or of realms no longer elastic.
    for ((node, realm), _) in before.iter() {
        if !cores.contains_key(node.as_str()) {
            set(
                &mut now,
                node,
                realm,
                0,
                format!("node {node} left the pool (lost, stopped, drained or not elastic)"),
            );
        } else if !policy.contains_key(realm.as_str()) {
            set(
                &mut now,
                node,
                realm,
                0,
                format!("realm {realm} is no longer elastic"),
            );
        }
    }
    // 2. A node's grants over its cores (it restarted with fewer): cut the
    //    largest grants first.
    for (node, &c) in &cores {
        loop {
            let mine: Vec<((String, String), i64)> = now
                .iter()
                .filter(|((n, _), _)| n == node)
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            let total: i64 = mine.iter().map(|(_, v)| v).sum();
            if total <= c {
                break;
            }
            let ((n, r), v) = mine
                .into_iter()
                .max_by_key(|(_, v)| *v)
                .expect("a total over the cores has a grant");
            let cut = (total - c).min(v);
            set(
                &mut now,
                &n,
                &r,
                v - cut,
                format!("node {n} has only {c} cores"),
            );
        }
    }
    let granted = |now: &BTreeMap<(String, String), i64>, realm: &str| -> i64 {
        now.iter()
            .filter(|((_, r), _)| r == realm)
            .map(|(_, v)| v)
            .sum()
    };
    // 3. Give back what realms no longer want, unused cores only while
    //    there are any, so no running proc loses its cores.
    for r in realms {
        let mut over = granted(&now, &r.realm) - r.want_cores;
        while over > 0 {
            let unused =
                |k: &(String, String), v: i64| (v - used.get(k).copied().unwrap_or(0)).max(0);
            let Some(((n, _), v, spare)) = now
                .iter()
                .filter(|((_, rr), _)| *rr == r.realm)
                .map(|(k, v)| (k.clone(), *v, unused(k, *v)))
                // An idle grant that fits in what is over goes whole
                // (smallest first: what remains is on fewer nodes); else
                // the grant with the most unused cores gives some.
                .min_by_key(|(k, v, spare)| {
                    let whole = *spare == *v && *v <= over;
                    (!whole, if whole { *v } else { -*spare }, k.clone())
                })
            else {
                break;
            };
            let cut = if spare > 0 {
                over.min(spare)
            } else {
                over.min(v)
            };
            set(
                &mut now,
                &n,
                &r.realm,
                v - cut,
                format!("shrink: {}", r.want_reason),
            );
            over -= cut;
        }
    }
    let free = |now: &BTreeMap<(String, String), i64>, node: &str| -> i64 {
        cores.get(node).copied().unwrap_or(0)
            - now
                .iter()
                .filter(|((n, _), _)| n == node)
                .map(|(_, v)| v)
                .sum::<i64>()
    };
    // 4. Grow, LC realms first, then by the largest deficit.
    let mut order: Vec<&RealmAlloc> = realms.iter().collect();
    order.sort_by_key(|r| {
        (
            r.policy.class != Class::Lc,
            -(r.want_cores - granted(&before, &r.realm)),
            r.realm.clone(),
        )
    });
    for r in &order {
        let mut deficit = r.want_cores - granted(&now, &r.realm);
        if deficit <= 0 {
            continue;
        }
        // Its own nodes first, then whole free machines, then the most free.
        let mut candidates: Vec<(&str, (u8, i64))> = cores
            .keys()
            .filter(|n| accepting.get(*n).copied().unwrap_or(false))
            .map(|n| {
                let f = free(&now, n);
                let own = now.contains_key(&(n.to_string(), r.realm.clone()));
                let whole = f == cores[n];
                (
                    *n,
                    (
                        if own {
                            0
                        } else if whole {
                            1
                        } else {
                            2
                        },
                        -f,
                    ),
                )
            })
            .filter(|(n, _)| free(&now, n) > 0)
            .collect();
        candidates.sort_by_key(|(n, k)| (*k, n.to_string()));
        for (n, _) in candidates {
            if deficit == 0 {
                break;
            }
            let take = deficit.min(free(&now, n));
            let have = now
                .get(&(n.to_string(), r.realm.clone()))
                .copied()
                .unwrap_or(0);
            set(
                &mut now,
                n,
                &r.realm,
                have + take,
                format!("grow: {}", r.want_reason),
            );
            deficit -= take;
        }
        // 5. An LC realm still short takes cores back from BE realms above
        //    their minimum: on its own nodes first, then the largest grants.
        if deficit > 0 && r.policy.class == Class::Lc {
            let mut victims: Vec<((String, String), i64)> = now
                .iter()
                .filter(|((_, vr), _)| {
                    policy
                        .get(vr.as_str())
                        .is_some_and(|p| p.policy.class == Class::Be)
                })
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            victims.sort_by_key(|((n, vr), v)| {
                let own = now.contains_key(&(n.clone(), r.realm.clone()));
                (!own, -*v, n.clone(), vr.clone())
            });
            for ((n, vr), _) in victims {
                if deficit == 0 {
                    break;
                }
                if !accepting.get(n.as_str()).copied().unwrap_or(false) {
                    continue;
                }
                let v = now.get(&(n.clone(), vr.clone())).copied().unwrap_or(0);
                let spare = granted(&now, &vr) - policy[vr.as_str()].policy.min_cores;
                let take = deficit.min(v).min(spare.max(0));
                if take == 0 {
                    continue;
                }
                set(
                    &mut now,
                    &n,
                    &vr,
                    v - take,
                    format!("taken back for LC realm {} ({})", r.realm, r.want_reason),
                );
                let have = now.get(&(n.clone(), r.realm.clone())).copied().unwrap_or(0);
                set(
                    &mut now,
                    &n,
                    &r.realm,
                    have + take,
                    format!(
                        "grow with cores taken back from BE realm {vr}: {}",
                        r.want_reason
                    ),
                );
                deficit -= take;
            }
        }
    }
    // The changes: every key whose cores differ.
    let mut keys: Vec<&(String, String)> = before.keys().chain(now.keys()).collect();
    keys.sort();
    keys.dedup();
    let changes: Vec<Change> = keys
        .into_iter()
        .filter_map(|k| {
            let (from, to) = (
                before.get(k).copied().unwrap_or(0),
                now.get(k).copied().unwrap_or(0),
            );
            (from != to).then(|| Change {
                node_id: k.0.clone(),
                realm: k.1.clone(),
                from,
                to,
                reason: reasons.get(k).cloned().unwrap_or_default(),
            })
        })
        .collect();
    debug_assert!(cores.keys().all(|n| free(&now, n) >= 0));
    changes
}

/// What the σMGR plans from: the pool, the grants and the elastic realms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub pool: Vec<PoolNode>,
    pub grants: Vec<Grant>,
    pub realms: Vec<RealmAlloc>,
}

/// Procedure body (partition 0): the σMGR's view (a node the cluster's
/// leader declared lost is out of the pool: see `crate::nodes`).
pub fn view_tx(tx: &mut dyn Tx) -> Result<View> {
    let p = i64::from(tx.p_key().0);
    let nodes = tx.query(
        "SELECT node_id, cores, draining_us FROM node WHERE p_key = $1 AND elastic = 1 \
           AND state = 'up' AND lost_us IS NULL ORDER BY node_id",
        params![p],
    )?;
    let pool = nodes
        .iter()
        .map(|r| {
            Ok(PoolNode {
                node_id: r.get(0)?,
                cores: r.get(1)?,
                accepting: r.get::<Option<i64>>(2)?.is_none(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let grants = grants_tx(tx, None)?;
    Ok(View {
        pool,
        grants,
        realms: realms_tx(tx)?,
    })
}

/// Procedure body (partition 0): the grants, all or of one node.
pub fn grants_tx(tx: &mut dyn Tx, node_id: Option<&str>) -> Result<Vec<Grant>> {
    let p = i64::from(tx.p_key().0);
    let rows = match node_id {
        Some(n) => tx.query(
            "SELECT node_id, realm, cores FROM core_grant WHERE p_key = $1 AND node_id = $2 \
             ORDER BY node_id, realm",
            params![p, n],
        )?,
        None => tx.query(
            "SELECT node_id, realm, cores FROM core_grant WHERE p_key = $1 \
             ORDER BY node_id, realm",
            params![p],
        )?,
    };
    rows.iter().map(grant_of).collect()
}

/// A grant from a row of `node_id, realm, cores`.
fn grant_of(r: &tabos_store::Row) -> Result<Grant> {
    Ok(Grant {
        node_id: r.get(0)?,
        realm: r.get(1)?,
        cores: r.get(2)?,
        used: 0,
    })
}

/// The grants of node `node_id`.
pub async fn grants_of_node(store: &Store, node_id: &str) -> Result<Vec<Grant>> {
    let n = node_id.to_string();
    store
        .read(CLUSTER_PARTITION, move |tx| grants_tx(tx, Some(&n)))
        .await
}

/// The grants of realm `realm` (what its members may see).
pub async fn grants_of_realm(store: &Store, realm: &str) -> Result<Vec<Grant>> {
    validate_realm(realm)?;
    let r = realm.to_string();
    store
        .read(CLUSTER_PARTITION, move |tx| {
            let rows = tx.query(
                "SELECT node_id, realm, cores FROM core_grant WHERE p_key = $1 AND realm = $2 \
                 ORDER BY node_id",
                params![i64::from(tx.p_key().0), r.as_str()],
            )?;
            rows.iter().map(grant_of).collect()
        })
        .await
}

/// Every grant.
pub async fn grants(store: &Store) -> Result<Vec<Grant>> {
    store
        .read(CLUSTER_PARTITION, |tx| grants_tx(tx, None))
        .await
}

/// Procedure body (partition 0): the σMGR `lead` carries out `changes`:
/// grants written, a decision row each, each node told. Fenced by the
/// lease; each change must still find the grant it planned from, and no
/// node may end over its cores (an invariant: the σMGR is the only writer).
pub fn apply_tx(tx: &mut dyn Tx, lead: &Leadership, changes: &[Change], now_us: i64) -> Result<()> {
    check_lead_tx(tx, lead)?;
    let p = i64::from(tx.p_key().0);
    for c in changes {
        let have: i64 = tx
            .query_opt(
                "SELECT cores FROM core_grant WHERE p_key = $1 AND node_id = $2 AND realm = $3",
                params![p, c.node_id.as_str(), c.realm.as_str()],
            )?
            .map(|r| r.get(0))
            .transpose()?
            .unwrap_or(0);
        if have != c.from {
            return Err(Error::Precondition(format!(
                "the grant of node {} to realm {} changed meanwhile ({} now, planned from {})",
                c.node_id, c.realm, have, c.from
            )));
        }
        if c.to == 0 {
            tx.execute(
                "DELETE FROM core_grant WHERE p_key = $1 AND node_id = $2 AND realm = $3",
                params![p, c.node_id.as_str(), c.realm.as_str()],
            )?;
        } else {
            tx.execute(
                "INSERT INTO core_grant (p_key, node_id, realm, cores, since_us) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (p_key, node_id, realm) DO UPDATE SET cores = excluded.cores, \
                   since_us = excluded.since_us",
                params![p, c.node_id.as_str(), c.realm.as_str(), c.to, now_us],
            )?;
        }
        decision_tx(
            tx,
            "smgr",
            &c.realm,
            &c.node_id,
            c.from,
            c.to,
            &bounded(&c.reason),
            now_us,
        )?;
        tx.notify(&node_channel(&c.node_id), &c.realm)?;
    }
    // The invariant, at the writing end: no node over its cores.
    let over = tx.query_opt(
        "SELECT g.node_id FROM core_grant g JOIN node n \
           ON n.p_key = g.p_key AND n.node_id = g.node_id \
         WHERE g.p_key = $1 GROUP BY g.node_id, n.cores HAVING SUM(g.cores) > n.cores",
        params![p],
    )?;
    if let Some(r) = over {
        return Err(Error::Precondition(format!(
            "grants of node {} would exceed its cores",
            r.get::<String>(0)?
        )));
    }
    Ok(())
}

// ---- History ----

/// One decision as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub seq: i64,
    pub at_us: i64,
    pub manager: String,
    pub realm: String,
    /// '' for an RMGR's want.
    pub node_id: String,
    pub cores_before: i64,
    pub cores_after: i64,
    pub reason: String,
}

/// The latest `limit` (at most [`HISTORY_MAX`]) decisions about `realm`
/// (all realms for `None`), oldest first.
pub async fn history(store: &Store, realm: Option<&str>, limit: usize) -> Result<Vec<Decision>> {
    if let Some(r) = realm {
        validate_realm(r)?;
    }
    let limit = limit.min(HISTORY_MAX) as i64;
    let r = realm.map(str::to_string);
    let mut out = store
        .read(CLUSTER_PARTITION, move |tx| {
            let p = i64::from(tx.p_key().0);
            let rows = match &r {
                Some(r) => tx.query(
                    "SELECT seq, at_us, manager, realm, node_id, cores_before, cores_after, \
                            reason \
                     FROM alloc_decision WHERE p_key = $1 AND realm = $2 \
                     ORDER BY seq DESC LIMIT $3",
                    params![p, r.as_str(), limit],
                )?,
                None => tx.query(
                    "SELECT seq, at_us, manager, realm, node_id, cores_before, cores_after, \
                            reason \
                     FROM alloc_decision WHERE p_key = $1 ORDER BY seq DESC LIMIT $2",
                    params![p, limit],
                )?,
            };
            rows.iter()
                .map(|r| {
                    Ok(Decision {
                        seq: r.get(0)?,
                        at_us: r.get(1)?,
                        manager: r.get(2)?,
                        realm: r.get(3)?,
                        node_id: r.get(4)?,
                        cores_before: r.get(5)?,
                        cores_after: r.get(6)?,
                        reason: r.get(7)?,
                    })
                })
                .collect::<Result<Vec<_>>>()
        })
        .await?;
    out.reverse();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, cores: i64) -> PoolNode {
        PoolNode {
            node_id: id.into(),
            cores,
            accepting: true,
        }
    }

    fn grant(n: &str, r: &str, cores: i64) -> Grant {
        Grant {
            node_id: n.into(),
            realm: r.into(),
            cores,
            used: 0,
        }
    }

    fn realm(r: &str, class: Class, min: i64, max: i64, want: i64) -> RealmAlloc {
        RealmAlloc {
            realm: r.into(),
            policy: Policy {
                class,
                min_cores: min,
                max_cores: max,
            },
            want_cores: want,
            want_reason: format!("{r} wants {want}"),
            want_us: 0,
        }
    }

    /// The grants after `changes`.
    fn after(grants: &[Grant], changes: &[Change]) -> BTreeMap<(String, String), i64> {
        let mut m: BTreeMap<(String, String), i64> = grants
            .iter()
            .map(|g| ((g.node_id.clone(), g.realm.clone()), g.cores))
            .collect();
        for c in changes {
            let k = (c.node_id.clone(), c.realm.clone());
            assert_eq!(m.get(&k).copied().unwrap_or(0), c.from, "{c:?}");
            if c.to == 0 {
                m.remove(&k);
            } else {
                m.insert(k, c.to);
            }
        }
        m
    }

    fn check(pool: &[PoolNode], m: &BTreeMap<(String, String), i64>) {
        for n in pool {
            let used: i64 = m
                .iter()
                .filter(|((nn, _), _)| *nn == n.node_id)
                .map(|(_, v)| v)
                .sum();
            assert!(used <= n.cores, "node {} over: {m:?}", n.node_id);
        }
        for (n, _) in m.keys() {
            assert!(
                pool.iter().any(|p| &p.node_id == n),
                "grant off the pool: {m:?}"
            );
        }
    }

    fn cores_of(m: &BTreeMap<(String, String), i64>, realm: &str) -> i64 {
        m.iter()
            .filter(|((_, r), _)| r == realm)
            .map(|(_, v)| v)
            .sum()
    }

    #[test]
    fn grows_on_own_nodes_then_whole_machines() {
        let pool = [node("a", 4), node("b", 4), node("c", 4)];
        let grants = [grant("b", "mr", 1), grant("a", "other", 2)];
        let realms = [
            realm("mr", Class::Be, 1, 12, 6),
            realm("other", Class::Be, 0, 12, 2),
        ];
        let ch = plan(&pool, &grants, &realms);
        let m = after(&grants, &ch);
        check(&pool, &m);
        assert_eq!(cores_of(&m, "mr"), 6);
        // b (its own) filled first, then c (a whole free machine), not a.
        assert_eq!(m.get(&("b".into(), "mr".into())), Some(&4));
        assert_eq!(m.get(&("c".into(), "mr".into())), Some(&2));
        assert!(ch.iter().all(|c| c.reason.starts_with("grow: mr wants 6")));
        // Planning again changes nothing.
        let grants2: Vec<Grant> = m.iter().map(|((n, r), v)| grant(n, r, *v)).collect();
        assert!(plan(&pool, &grants2, &realms).is_empty());
    }

    #[test]
    fn shrinks_idle_grants_whole_first_and_frees_lost_nodes() {
        let pool = [node("a", 4), node("b", 4)];
        let grants = [
            grant("a", "r", 4),
            grant("b", "r", 1),
            grant("gone", "r", 4),
            grant("a", "static", 1),
        ];
        let realms = [realm("r", Class::Be, 0, 8, 3)];
        let ch = plan(&pool, &grants, &realms);
        let m = after(&grants, &ch);
        check(&pool, &m);
        // gone's and the non-elastic realm's grants dropped; b's 1 first.
        assert_eq!(m, BTreeMap::from([(("a".into(), "r".into()), 3)]));
        let gone = ch.iter().find(|c| c.node_id == "gone").unwrap();
        assert!(gone.reason.contains("left the pool"), "{gone:?}");
    }

    #[test]
    fn shrinking_keeps_the_cores_procs_use_and_drained_nodes_take_nothing() {
        let pool = [
            node("a", 4),
            node("b", 4),
            PoolNode {
                accepting: false,
                ..node("c", 4)
            },
        ];
        let grants = [
            Grant {
                used: 1,
                ..grant("a", "r", 1)
            },
            grant("b", "r", 3),
            grant("c", "r", 2),
        ];
        let realms = [realm("r", Class::Be, 0, 8, 1)];
        let m = after(&grants, &plan(&pool, &grants, &realms));
        check(&pool, &m);
        // a's used core stays; b's and c's unused ones go.
        assert_eq!(m, BTreeMap::from([(("a".into(), "r".into()), 1)]));
        // Growing skips the drained node, which keeps its grant.
        let grants = [grant("c", "r", 2)];
        let realms = [realm("r", Class::Be, 0, 12, 12)];
        let m = after(&grants, &plan(&pool, &grants, &realms));
        check(&pool, &m);
        assert_eq!(m.get(&("c".into(), "r".into())), Some(&2));
        assert_eq!(cores_of(&m, "r"), 10);
    }

    #[test]
    fn lc_takes_back_from_be_above_its_minimum() {
        let pool = [node("a", 4), node("b", 4)];
        let grants = [grant("a", "be", 4), grant("b", "be", 4)];
        let realms = [
            realm("be", Class::Be, 2, 8, 8),
            realm("lc", Class::Lc, 0, 8, 7),
        ];
        let ch = plan(&pool, &grants, &realms);
        let m = after(&grants, &ch);
        check(&pool, &m);
        // BE keeps its minimum; LC gets the rest.
        assert_eq!((cores_of(&m, "lc"), cores_of(&m, "be")), (6, 2));
        assert!(ch
            .iter()
            .any(|c| c.realm == "be" && c.reason.contains("taken back for LC realm lc")));
    }

    #[test]
    fn lc_grows_before_be_and_never_over_a_node() {
        let pool = [node("a", 2), node("b", 3)];
        let realms = [
            realm("be", Class::Be, 0, 10, 10),
            realm("lc", Class::Lc, 0, 10, 4),
        ];
        let ch = plan(&pool, &[], &realms);
        let m = after(&[], &ch);
        check(&pool, &m);
        assert_eq!((cores_of(&m, "lc"), cores_of(&m, "be")), (4, 1));
    }

    #[test]
    fn a_node_with_fewer_cores_cuts_its_largest_grants() {
        let pool = [node("a", 3)];
        let grants = [grant("a", "x", 3), grant("a", "y", 2)];
        let realms = [
            realm("x", Class::Be, 0, 8, 3),
            realm("y", Class::Be, 0, 8, 2),
        ];
        let m = after(&grants, &plan(&pool, &grants, &realms));
        check(&pool, &m);
    }

    #[test]
    fn rmgr_grows_at_once_and_shrinks_after_idle() {
        let p = Policy {
            class: Class::Be,
            min_cores: 1,
            max_cores: 8,
        };
        let s = Settings::default();
        let d = |live, unplaced| Demand {
            live_cores: live,
            unplaced_cores: unplaced,
            live_procs: live,
            by_node: Vec::new(),
        };
        // Demand over the grant: want it (capped at max).
        let w = rmgr_decide(&p, 1, 1, &d(20, 19), None, 0, &s).unwrap();
        assert_eq!(w.cores, 8);
        assert!(w.reason.contains("19 waiting"), "{}", w.reason);
        // Below, not for long: nothing.
        assert_eq!(rmgr_decide(&p, 8, 8, &d(2, 0), Some(0), 1_000, &s), None);
        // Below for idle_ms: down to demand, not under min.
        let w = rmgr_decide(&p, 8, 8, &d(0, 0), Some(0), s.idle_ms * 1_000, &s).unwrap();
        assert_eq!(w.cores, 1);
        // Headroom.
        let s2 = Settings {
            headroom_pct: 50,
            ..s
        };
        assert_eq!(
            rmgr_decide(&p, 1, 1, &d(4, 4), None, 0, &s2).unwrap().cores,
            6
        );
        // Procs of no cores still want a core (a realm of minimum 0).
        let p0 = Policy { min_cores: 0, ..p };
        let coordinators = Demand {
            live_procs: 2,
            ..d(0, 0)
        };
        let w = rmgr_decide(&p0, 0, 0, &coordinators, None, 0, &s).unwrap();
        assert_eq!(w.cores, 1);
    }

    #[test]
    fn settings_are_checked() {
        assert!(check_setting("tick_ms", 100).is_ok());
        assert!(check_setting("tick_ms", 0).is_err());
        assert!(check_setting("nope", 1).is_err());
        let s = Settings::default();
        assert_eq!(s.pairs().len(), Settings::BOUNDS.len());
        let bad = Policy {
            class: Class::Lc,
            min_cores: 3,
            max_cores: 2,
        };
        assert!(bad.validate().is_err());
    }
}
