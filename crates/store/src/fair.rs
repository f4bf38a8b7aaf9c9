//! Fair shares of a partition's writer (SQLite) and of the connection pool
//! (PostgreSQL) between realms (issue 36, item 1).
//!
//! Every procedure is charged to a [`Share`]: the realm it works for (the
//! kernel's own work is the system share) and whether it is *long* —
//! tenant code, which may run up to its procedure's deadline — or short (a
//! kernel procedure: microseconds). [`FairQueue`] holds what waits:
//!
//! * short procedures are taken before long ones, round robin over the
//!   shares that have any, so a realm's flood of short calls delays
//!   another's only by its turn in the ring;
//! * long procedures never share a group commit that short ones wait on:
//!   on SQLite they run on a partition's tenant connections, in deferred
//!   transactions beside the writer (`sqlite`, "Tenant code"); on
//!   PostgreSQL on all of the pool's connections but one. Between realms,
//!   long procedures go by start-time fair queuing:
//!   the share that has been charged the least run time goes next, and a
//!   share that was idle comes back at the current virtual time (no credit
//!   banked while idle);
//! * no share may hold more than [`SHARE_QUEUE_MAX`] of the queue, so one
//!   realm's flood is refused as overloaded before it fills the queue that
//!   every realm shares.
//!
//! Invariant: `len` is the number of items in all the shares' queues, and
//! a share is in `shorts_ring` exactly while it has short items queued.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::QUEUE_PROCS_MAX;

/// Most procedures one realm may have queued on one partition (SQLite) or
/// for the pool (PostgreSQL): a quarter of the whole queue, so that a
/// flood from one realm leaves room for the others. The system share (the
/// kernel's own work) is bounded only by the whole queue.
pub const SHARE_QUEUE_MAX: usize = QUEUE_PROCS_MAX / 4;

/// Who a procedure's time is charged to, and whether it may run long.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Share {
    /// The realm it works for; empty: the system (the kernel's own work).
    pub realm: Arc<str>,
    /// Tenant code (a stored procedure), which may run for up to its
    /// deadline: run apart from short procedures.
    pub long: bool,
}

impl Share {
    /// Short work for `realm`.
    pub fn realm(realm: &str) -> Share {
        Share {
            realm: realm.into(),
            long: false,
        }
    }

    /// Whether this is the kernel's own work.
    pub fn is_system(&self) -> bool {
        self.realm.is_empty()
    }
}

/// One share's waiting items and charged time.
struct Queued<T> {
    shorts: VecDeque<T>,
    longs: VecDeque<T>,
    /// Run time of its long items (µs), from the virtual time it (re)joined.
    used_us: u64,
    /// When it (re)joined with long items: the tie-breaker, first come
    /// first served.
    joined: u64,
}

impl<T> Queued<T> {
    fn len(&self) -> usize {
        self.shorts.len() + self.longs.len()
    }
}

/// What waits, by share; see the module's documentation.
pub struct FairQueue<T> {
    shares: HashMap<Arc<str>, Queued<T>>,
    /// Shares with short items, in round-robin order.
    shorts_ring: VecDeque<Arc<str>>,
    len: usize,
    /// Virtual time: the charged time of the long item last started.
    vtime_us: u64,
    /// Arrivals, for `joined`.
    arrivals: u64,
    /// Long items started and not yet charged ([`FairQueue::charge`]).
    running: usize,
    /// The same, by realm.
    running_by: HashMap<Arc<str>, usize>,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue {
            shares: HashMap::new(),
            shorts_ring: VecDeque::new(),
            len: 0,
            vtime_us: 0,
            arrivals: 0,
            running: 0,
            running_by: HashMap::new(),
        }
    }
}

/// Why an item was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The whole queue is full.
    Full,
    /// The item's realm holds its most of the queue.
    ShareFull,
}

impl<T> FairQueue<T> {
    /// Items queued, over all shares.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a short item waits.
    pub fn has_short(&self) -> bool {
        !self.shorts_ring.is_empty()
    }

    /// Whether a long item waits.
    pub fn has_long(&self) -> bool {
        self.shares.values().any(|q| !q.longs.is_empty())
    }

    /// Long items started and not yet [`charge`](Self::charge)d.
    pub fn running_long(&self) -> usize {
        self.running
    }

    /// Queues `item` for `share`, or says why not (the item is handed
    /// back).
    pub fn push(&mut self, share: &Share, item: T) -> Result<(), (T, Refused)> {
        if self.len >= QUEUE_PROCS_MAX {
            return Err((item, Refused::Full));
        }
        let queued = self.shares.get(&share.realm).map_or(0, Queued::len);
        if !share.is_system() && queued >= SHARE_QUEUE_MAX {
            return Err((item, Refused::ShareFull));
        }
        self.arrivals += 1;
        let (vtime, arrival) = (self.vtime_us, self.arrivals);
        let q = self
            .shares
            .entry(share.realm.clone())
            .or_insert_with(|| Queued {
                shorts: VecDeque::new(),
                longs: VecDeque::new(),
                used_us: vtime,
                joined: arrival,
            });
        if share.long {
            if q.longs.is_empty() {
                // Back after an idle spell: at the current virtual time.
                q.used_us = q.used_us.max(vtime);
                q.joined = arrival;
            }
            q.longs.push_back(item);
        } else {
            if q.shorts.is_empty() {
                self.shorts_ring.push_back(share.realm.clone());
            }
            q.shorts.push_back(item);
        }
        self.len += 1;
        Ok(())
    }

    /// The next short item, round robin over the shares.
    pub fn pop_short(&mut self) -> Option<T> {
        let realm = self.shorts_ring.pop_front()?;
        let q = self.shares.get_mut(&realm)?;
        let item = q.shorts.pop_front();
        debug_assert!(item.is_some(), "a share in the ring has short items");
        if !q.shorts.is_empty() {
            self.shorts_ring.push_back(realm.clone());
        }
        self.forget_if_empty(&realm);
        self.len -= usize::from(item.is_some());
        item
    }

    /// The next long item: the oldest of the share charged the least. The
    /// caller reports its run time with [`charge`](Self::charge).
    pub fn pop_long(&mut self) -> Option<(Arc<str>, T)> {
        self.pop_long_within(1)
    }

    /// The realm whose item [`pop_long_within`](Self::pop_long_within)
    /// would take now, if any (nothing is taken).
    pub fn next_long_within(&self, slots: usize) -> Option<Arc<str>> {
        if self.running >= slots {
            return None;
        }
        let last_slot = slots > 1 && self.running + 1 == slots;
        let running_by = &self.running_by;
        self.shares
            .iter()
            .filter(|(_, q)| !q.longs.is_empty())
            .filter(|(r, _)| !last_slot || running_by.get(*r).is_none_or(|&n| n == 0))
            .min_by_key(|(_, q)| (q.used_us, q.joined))
            .map(|(r, _)| r.clone())
    }

    /// [`pop_long`](Self::pop_long) where `slots` long items may run at
    /// once (a pool's connections): none while they are all taken, and
    /// the last free one only for a realm running none — so a realm that
    /// fills the others cannot make another realm's call wait for one of
    /// its own to end.
    pub fn pop_long_within(&mut self, slots: usize) -> Option<(Arc<str>, T)> {
        let realm = self.next_long_within(slots)?;
        let q = self.shares.get_mut(&realm)?;
        self.vtime_us = self.vtime_us.max(q.used_us);
        let item = q.longs.pop_front()?;
        self.len -= 1;
        self.running += 1;
        *self.running_by.entry(realm.clone()).or_default() += 1;
        // Its share stays (with its charge) while it has items; the run
        // time is added when the item ends.
        self.forget_if_empty(&realm);
        Some((realm, item))
    }

    /// A long item of `realm` ran for `took`: charged to its share (if it
    /// still waits for more; an idle share comes back at the virtual time).
    pub fn charge(&mut self, realm: &str, took: Duration) {
        debug_assert!(self.running > 0, "charged a long item never popped");
        self.running = self.running.saturating_sub(1);
        if let Some(n) = self.running_by.get_mut(realm) {
            *n -= 1;
            if *n == 0 {
                self.running_by.remove(realm);
            }
        }
        if let Some(q) = self.shares.get_mut(realm) {
            q.used_us = q.used_us.saturating_add(took.as_micros() as u64);
        }
    }

    /// Takes every item (closing: each is answered with an error).
    pub fn drain(&mut self) -> Vec<T> {
        let mut all = Vec::with_capacity(self.len);
        for (_, q) in self.shares.drain() {
            all.extend(q.shorts);
            all.extend(q.longs);
        }
        self.shorts_ring.clear();
        self.len = 0;
        all
    }

    fn forget_if_empty(&mut self, realm: &Arc<str>) {
        if self.shares.get(realm).is_some_and(|q| q.len() == 0) {
            self.shares.remove(realm);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(realm: &str) -> Share {
        Share {
            realm: realm.into(),
            long: true,
        }
    }

    #[test]
    fn shorts_go_round_robin_and_before_longs() {
        let mut q = FairQueue::default();
        for i in 0..3 {
            q.push(&Share::realm("a"), format!("a{i}")).unwrap();
        }
        q.push(&long("a"), "A0".to_string()).unwrap();
        q.push(&Share::realm("b"), "b0".to_string()).unwrap();
        let shorts: Vec<String> = std::iter::from_fn(|| q.pop_short()).collect();
        assert_eq!(shorts, ["a0", "b0", "a1", "a2"]);
        assert!(q.has_long());
        assert_eq!(q.pop_long().unwrap().1, "A0");
        assert!(q.is_empty());
    }

    #[test]
    fn longs_go_to_the_share_charged_least() {
        let mut q = FairQueue::default();
        for i in 0..4 {
            q.push(&long("a"), format!("a{i}")).unwrap();
        }
        q.push(&long("c"), "c0".to_string()).unwrap();
        q.push(&long("c"), "c1".to_string()).unwrap();
        let mut order = Vec::new();
        while let Some((realm, item)) = q.pop_long() {
            // a's calls take 10× c's.
            let took = if &*realm == "a" { 1_000 } else { 100 };
            q.charge(&realm, Duration::from_millis(took));
            order.push(item);
        }
        assert_eq!(order, ["a0", "c0", "c1", "a1", "a2", "a3"]);
    }

    #[test]
    fn the_last_slot_is_kept_for_a_realm_running_none() {
        let mut q = FairQueue::default();
        for i in 0..4 {
            q.push(&long("a"), format!("a{i}")).unwrap();
        }
        assert_eq!(q.pop_long_within(3).unwrap().1, "a0");
        assert_eq!(q.pop_long_within(3).unwrap().1, "a1");
        assert!(
            q.pop_long_within(3).is_none(),
            "a may not take the last slot"
        );
        assert_eq!(q.next_long_within(3), None, "the peek agrees");
        q.push(&long("b"), "b0".to_string()).unwrap();
        assert_eq!(q.next_long_within(3).as_deref(), Some("b"));
        assert_eq!(q.len(), 3, "a peek takes nothing");
        assert_eq!(q.pop_long_within(3).unwrap().1, "b0");
        assert!(q.pop_long_within(3).is_none(), "all three taken");
        // One slot free, the last: a and b each run one, so it waits for a
        // realm that runs none (a reserve, as PostgreSQL keeps for
        // superusers); with two free, a goes on.
        q.charge("a", Duration::from_millis(1));
        assert!(q.pop_long_within(3).is_none());
        q.charge("b", Duration::from_millis(1));
        assert_eq!(q.pop_long_within(3).unwrap().1, "a2");
    }

    #[test]
    fn a_share_is_capped_below_the_whole_queue() {
        let mut q = FairQueue::default();
        for i in 0..SHARE_QUEUE_MAX {
            q.push(&Share::realm("a"), i).unwrap();
        }
        let (_, why) = q.push(&Share::realm("a"), 0).unwrap_err();
        assert_eq!(why, Refused::ShareFull);
        q.push(&Share::realm("b"), 0).unwrap();
        q.push(&Share::default(), 0).unwrap();
        assert_eq!(q.len(), SHARE_QUEUE_MAX + 2);
    }
}
