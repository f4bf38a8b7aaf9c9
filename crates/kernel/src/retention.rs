//! Retention (issue 43, item 2): a realm's record of what is over is kept
//! for its retention (`realm.retention_us`, set by an operator:
//! [`crate::realms::set_retention_tx`]) and then removed — ended procs with
//! their events, logs and spent credentials ([`procs::prune_at_most_tx`]),
//! the provenance events of procs still running
//! ([`procs::expire_events_tx`]), and delivered messages kept in
//! `message_log` ([`ipc::expire_log_tx`]). Each owning module deletes its
//! own rows; this module only decides what is old and batches the work.
//!
//! The cluster's leader runs the reaper (`tabos-node`'s `retention.rs`);
//! expiring is idempotent, so two nodes that both think they lead agree.
//! Each batch is one
//! transaction charged to its realm, at most [`BATCH_MAX`] rows a table, so
//! a realm with millions of old rows holds its partition's writer no longer
//! than any other call of its own.

use tabos_store::{PKey, Store};

use crate::realms::{self, Retention};
use crate::{ipc, procs, Result};

/// Most rows of each kind one expiry transaction removes.
pub const BATCH_MAX: usize = 1_000;
/// Most batches one [`expire`] runs for a realm before it lets the other
/// realms (and the reaper's stop) have a turn: a realm left with old rows
/// is due again at once.
pub const BATCHES_PER_TURN_MAX: usize = 64;
/// The longest a realm's old rows wait for the next pass: a pass comes
/// every sixteenth of the retention, at least every minute and at most
/// every second.
pub const PASS_MAX_US: i64 = 60_000_000;
pub const PASS_MIN_US: i64 = 1_000_000;

/// What one expiry removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Ended procs (with their events, logs and spent credentials).
    pub procs: usize,
    /// Provenance events of procs not removed.
    pub events: usize,
    /// Logged messages.
    pub messages: usize,
    /// Old rows are left (a batch was full): the realm is due again now.
    pub more: bool,
}

impl Expired {
    fn add(&mut self, o: Expired) {
        self.procs += o.procs;
        self.events += o.events;
        self.messages += o.messages;
        self.more = o.more;
    }

    /// Rows removed, of every kind.
    pub fn total(&self) -> usize {
        self.procs + self.events + self.messages
    }
}

/// How often a realm of retention `r` is looked at.
pub fn pass_us(r: Retention) -> i64 {
    (r.as_us() / 16).clamp(PASS_MIN_US, PASS_MAX_US)
}

/// Procedure body: one batch of `realm`'s expiry at `now_us`, by the
/// retention its row has now (none: nothing is removed — it was cleared
/// since the reaper listed it).
pub fn expire_tx(tx: &mut dyn tabos_store::Tx, realm: &str, now_us: i64) -> Result<Expired> {
    let Some(r) = realms::retention_tx(tx, realm)? else {
        return Ok(Expired::default());
    };
    let before = now_us.saturating_sub(r.as_us());
    let procs = procs::prune_at_most_tx(tx, realm, &[], Some(before), BATCH_MAX)?.len();
    let events = procs::expire_events_tx(tx, realm, before, BATCH_MAX)?;
    let messages = ipc::expire_log_tx(tx, realm, before, BATCH_MAX)?;
    debug_assert!(procs <= BATCH_MAX && events <= BATCH_MAX && messages <= BATCH_MAX);
    Ok(Expired {
        procs,
        events,
        messages,
        more: procs == BATCH_MAX || events == BATCH_MAX || messages == BATCH_MAX,
    })
}

/// Expires `realm`'s old records, batch after batch, each its own
/// transaction charged to the realm, for at most [`BATCHES_PER_TURN_MAX`]
/// batches (`more` says whether old rows are left).
pub async fn expire(store: &Store, realm: &str) -> Result<Expired> {
    let mut all = Expired::default();
    for _ in 0..BATCHES_PER_TURN_MAX {
        let now = tabos_store::now_us();
        let r = realm.to_string();
        let one = crate::call(store, realm, move |tx| expire_tx(tx, &r, now)).await?;
        all.add(one);
        if !one.more {
            break;
        }
    }
    Ok(all)
}

/// The realms of partition `p` with a retention (a read).
pub async fn retained(store: &Store, p: PKey) -> Result<Vec<(String, Retention)>> {
    store.read(p, realms::retained_tx).await
}
