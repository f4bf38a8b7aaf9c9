//! Who may hold a server's connections (issue 36, item 2): one [`Ledger`]
//! per door — the node's gRPC servers, PostgreSQL front door and
//! dashboard, and the servers built on this library (the KV service's
//! Redis front end, the web server) — so that no tenant, and no one
//! without a credential, can take the slots another needs. Server-side,
//! as [`crate::codec`] is: the programs that serve tabos's protocols share
//! it.
//!
//! A connection is *unauthenticated* from its accept until it signs in
//! (presents a good credential). At most
//! [`DoorLimits::unauthenticated_per_source`] of those come from one
//! [`Source`] (an IP address; on the local socket, the peer's uid) — past
//! it a new one is refused at once ([`Ledger::admit`]) — and at most
//! [`DoorLimits::unauthenticated`] from all sources — past it the oldest
//! of the source holding the most is closed — so connections that never
//! sign in hold a bounded share of the door, and no one address can take
//! that share from the others. Once signed in, a connection belongs to
//! its credential's realm (operators' together count as one, `""`, not
//! capped: they are no tenant): a realm holds at most
//! [`DoorLimits::per_realm`] ([`Ledger::sign_in`]).
//! When every slot of the door is held, [`Ledger::make_room`] closes an
//! idle connection of the realm holding the most — never one of a realm
//! holding fewer.
//!
//! The ledger only counts and chooses; each door closes what it is told
//! to close through [`Held::evict`], as soon as the connection is idle.
//!
//! What a signed-in connection opens — calls (gRPC streams), LISTEN
//! channels — is capped per realm too, by a [`PerRealm`] count: one realm's
//! connections, however few, cannot hold an unbounded number of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Where a connection comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// A TCP peer's address.
    Ip(std::net::IpAddr),
    /// A peer on the node's local socket, by its uid (the kernel's word,
    /// `SO_PEERCRED`).
    Local(u32),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Ip(ip) => write!(f, "{ip}"),
            Source::Local(uid) => write!(f, "local uid {uid}"),
        }
    }
}

/// What a ledger needs of a connection it counts.
pub trait Held: Send + Sync {
    /// Where it comes from.
    fn source(&self) -> &Source;
    /// Whether no request of it is under way (only an idle one is closed
    /// to make room).
    fn is_idle(&self) -> bool;
    /// Closes it as soon as it is idle.
    fn evict(&self);
    /// Whether [`Held::evict`] was called.
    fn is_evicted(&self) -> bool;
}

/// A door's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorLimits {
    /// Connections not signed in, from all sources together.
    pub unauthenticated: usize,
    /// Connections not signed in from one [`Source`].
    pub unauthenticated_per_source: usize,
    /// Signed-in connections of one realm (operators', counted as realm
    /// `""`, are not capped).
    pub per_realm: usize,
}

impl DoorLimits {
    /// A door's usual shares: of `connections_max`, a quarter for
    /// connections not signed in (so signed-in clients always have the
    /// rest), `per_source` of those from one address, and a quarter for
    /// one realm.
    pub const fn quarters(connections_max: usize, per_source: usize) -> DoorLimits {
        DoorLimits {
            unauthenticated: connections_max / 4,
            unauthenticated_per_source: per_source,
            per_realm: connections_max / 4,
        }
    }
}

/// Why [`Ledger::sign_in`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The realm holds [`DoorLimits::per_realm`] connections already.
    RealmFull { realm: String, held: usize },
    /// The connection is being closed (to make room).
    Evicted,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::RealmFull { realm, held } => {
                let who = if realm.is_empty() { "operators" } else { realm };
                write!(
                    f,
                    "{who} already hold {held} connections to this door of the node, the most \
                     one realm may; close or reuse one"
                )
            }
            Refused::Evicted => f.write_str("this connection is being closed; connect again"),
        }
    }
}

/// What a door's connections hold, for `tabos status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub unauthenticated: usize,
    /// Signed-in connections by realm (`""`: operators'), by name.
    pub by_realm: Vec<(String, usize)>,
}

/// The open connections of one door by standing (see the module's doc).
#[derive(Debug)]
pub struct Ledger<H> {
    limits: DoorLimits,
    table: Mutex<Table<H>>,
}

/// Each list oldest first.
#[derive(Debug)]
struct Table<H> {
    unauthenticated: HashMap<Source, Vec<Weak<H>>>,
    unauthenticated_count: usize,
    realms: HashMap<String, Vec<Weak<H>>>,
}

fn is<H>(w: &Weak<H>, h: &Arc<H>) -> bool {
    std::ptr::eq(w.as_ptr(), Arc::as_ptr(h))
}

impl<H: Held> Table<H> {
    fn leave_unauthenticated(&mut self, h: &Arc<H>) -> bool {
        let Some(list) = self.unauthenticated.get_mut(h.source()) else {
            return false;
        };
        let before = list.len();
        list.retain(|w| !is(w, h));
        let left = before - list.len();
        self.unauthenticated_count -= left;
        if list.is_empty() {
            self.unauthenticated.remove(h.source());
        }
        left > 0
    }
}

impl<H: Held> Ledger<H> {
    pub fn new(limits: DoorLimits) -> Ledger<H> {
        Ledger {
            limits,
            table: Mutex::new(Table {
                unauthenticated: HashMap::new(),
                unauthenticated_count: 0,
                realms: HashMap::new(),
            }),
        }
    }

    pub fn limits(&self) -> DoorLimits {
        self.limits
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table<H>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a new connection as unauthenticated, closing the oldest of
    /// the source holding the most when all sources together are at their
    /// limit; `false` (refuse it) when its own source is at its limit.
    pub fn admit(&self, h: &Arc<H>) -> bool {
        let mut t = self.table();
        let from_source = t.unauthenticated.get(h.source()).map_or(0, Vec::len);
        if from_source >= self.limits.unauthenticated_per_source {
            return false;
        }
        if t.unauthenticated_count >= self.limits.unauthenticated {
            let oldest = t
                .unauthenticated
                .values()
                .max_by_key(|l| l.len())
                .and_then(|l| l.first())
                .and_then(Weak::upgrade);
            if let Some(old) = oldest {
                old.evict();
                t.leave_unauthenticated(&old);
            }
        }
        t.unauthenticated
            .entry(h.source().clone())
            .or_default()
            .push(Arc::downgrade(h));
        t.unauthenticated_count += 1;
        true
    }

    /// Moves `h` from the unauthenticated to `realm`'s connections (`""`
    /// for an operator's), unless the realm holds its limit already (then
    /// `h` stays unauthenticated). A connection signed in already stays in
    /// the realm it first signed in for.
    pub fn sign_in(&self, h: &Arc<H>, realm: &str) -> Result<(), Refused> {
        let mut t = self.table();
        if h.is_evicted() {
            return Err(Refused::Evicted);
        }
        let waiting = t
            .unauthenticated
            .get(h.source())
            .is_some_and(|l| l.iter().any(|w| is(w, h)));
        if !waiting && t.realms.values().any(|l| l.iter().any(|w| is(w, h))) {
            return Ok(()); // signed in before
        }
        let held = t.realms.get(realm).map_or(0, Vec::len);
        // Operators are counted, not capped: they are no tenant, and a
        // cluster's nodes reach one another as operators.
        if !realm.is_empty() && held >= self.limits.per_realm {
            return Err(Refused::RealmFull {
                realm: realm.to_string(),
                held,
            });
        }
        t.leave_unauthenticated(h);
        t.realms
            .entry(realm.to_string())
            .or_default()
            .push(Arc::downgrade(h));
        Ok(())
    }

    /// Drops a closed connection from whichever list holds it.
    pub fn forget(&self, h: &Arc<H>) {
        let mut t = self.table();
        if t.leave_unauthenticated(h) {
            return;
        }
        t.realms.retain(|_, list| {
            list.retain(|w| !is(w, h));
            !list.is_empty()
        });
    }

    /// Every slot of the door is held: closes the oldest idle connection
    /// of the realm holding the most (it is over its share of the door,
    /// shared by fewer realms than it holds slots), if it has an idle one
    /// not already closing. Returns whether it closed one.
    pub fn make_room(&self) -> bool {
        let t = self.table();
        let Some(list) = t.realms.values().max_by_key(|l| l.len()) else {
            return false;
        };
        match list
            .iter()
            .filter_map(Weak::upgrade)
            .find(|c| c.is_idle() && !c.is_evicted())
        {
            Some(idle) => {
                idle.evict();
                true
            }
            None => false,
        }
    }

    /// Who holds the door now.
    pub fn usage(&self) -> Usage {
        let t = self.table();
        let mut by_realm: Vec<(String, usize)> =
            t.realms.iter().map(|(r, l)| (r.clone(), l.len())).collect();
        by_realm.sort();
        Usage {
            unauthenticated: t.unauthenticated_count,
            by_realm,
        }
    }
}

/// A door: its connection slots and the ledger of who holds them.
#[derive(Debug)]
pub struct Door<H> {
    free: Arc<tokio::sync::Semaphore>,
    connections_max: usize,
    pub ledger: Ledger<H>,
}

impl<H: Held> Door<H> {
    pub fn new(connections_max: usize, limits: DoorLimits) -> Door<H> {
        Door {
            free: Arc::new(tokio::sync::Semaphore::new(connections_max)),
            connections_max,
            ledger: Ledger::new(limits),
        }
    }

    /// Connections open now (accepted and not yet closed: the ledger's
    /// count, not the slots, one of which an accept loop holds while it
    /// waits for the next connection) and who holds them.
    pub fn usage(&self) -> (usize, Usage) {
        let u = self.ledger.usage();
        let open = u.unauthenticated + u.by_realm.iter().map(|(_, n)| n).sum::<usize>();
        (open, u)
    }

    /// The most connections the door holds.
    pub fn connections_max(&self) -> usize {
        self.connections_max
    }

    /// A slot if one is free now (a door that refuses when full, as
    /// Redis's `maxclients`, closes nothing to make room).
    pub fn try_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.free.clone().try_acquire_owned().ok()
    }

    /// A slot: at once if one is free, else after making room (an idle
    /// connection of the realm holding the most is closed), waiting at
    /// most `wait` (`None`: until one is free).
    pub async fn slot(
        &self,
        wait: Option<std::time::Duration>,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(s) = self.free.clone().try_acquire_owned() {
            return Some(s);
        }
        self.ledger.make_room();
        let free = self.free.clone().acquire_owned();
        match wait {
            Some(w) => tokio::time::timeout(w, free).await.ok()?.ok(),
            None => free.await.ok(),
        }
    }
}

/// A connection's standing at a door that has no state of its own to
/// count with: what [`Held`] needs, and a signal the door's connection
/// task waits on to close.
#[derive(Debug)]
pub struct Ticket {
    source: Source,
    evicted: std::sync::atomic::AtomicBool,
    busy: std::sync::atomic::AtomicUsize,
    closing: tokio::sync::Notify,
}

impl Ticket {
    pub fn new(source: Source) -> Arc<Ticket> {
        Arc::new(Ticket {
            source,
            evicted: Default::default(),
            busy: Default::default(),
            closing: tokio::sync::Notify::new(),
        })
    }

    /// Marks a request under way until the guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Returns once the door should close the connection: evicted and
    /// idle.
    pub async fn closing(self: Arc<Self>) {
        loop {
            let notified = self.closing.notified();
            if self.is_evicted() && self.is_idle() {
                return;
            }
            notified.await;
        }
    }
}

/// A request under way on a [`Ticket`]'s connection.
#[derive(Debug)]
pub struct Busy(Arc<Ticket>);

impl Drop for Busy {
    fn drop(&mut self) {
        let before = self
            .0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        debug_assert!(before > 0, "a request ends once");
        if before == 1 {
            self.0.closing.notify_waiters();
        }
    }
}

impl Held for Ticket {
    fn source(&self) -> &Source {
        &self.source
    }
    fn is_idle(&self) -> bool {
        self.busy.load(std::sync::atomic::Ordering::Acquire) == 0
    }
    fn evict(&self) {
        self.evicted
            .store(true, std::sync::atomic::Ordering::Release);
        self.closing.notify_waiters();
    }
    fn is_evicted(&self) -> bool {
        self.evicted.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Things of one kind a door's realms hold open beyond their connections
/// (open calls, LISTEN channels): each realm at most
/// [`per_realm`](PerRealm::per_realm); operators' (`""`) counted, not
/// capped.
#[derive(Debug)]
pub struct PerRealm {
    per_realm: usize,
    held: Mutex<HashMap<Arc<str>, usize>>,
}

/// Why [`PerRealm::take`] refused: the realm holds its most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealmFull {
    pub realm: String,
    pub held: usize,
}

/// One thing held (see [`PerRealm::take`]); given back when dropped.
#[derive(Debug)]
pub struct Taken {
    counts: Arc<PerRealm>,
    realm: Arc<str>,
}

impl PerRealm {
    pub fn new(per_realm: usize) -> Arc<PerRealm> {
        Arc::new(PerRealm {
            per_realm,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// The most one realm may hold.
    pub fn per_realm(&self) -> usize {
        self.per_realm
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        // Only counts change under the lock: nothing to leave half-done.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more for `realm` (`""`: operators), or why not.
    pub fn take(self: &Arc<Self>, realm: &str) -> Result<Taken, RealmFull> {
        let mut held = self.held();
        let n = held.get(realm).copied().unwrap_or(0);
        if !realm.is_empty() && n >= self.per_realm {
            return Err(RealmFull {
                realm: realm.to_string(),
                held: n,
            });
        }
        let realm: Arc<str> = match held.get_key_value(realm) {
            Some((k, _)) => k.clone(),
            None => realm.into(),
        };
        *held.entry(realm.clone()).or_default() += 1;
        Ok(Taken {
            counts: self.clone(),
            realm,
        })
    }

    /// What each realm holds now (`""`: operators), by name.
    pub fn usage(&self) -> Vec<(String, usize)> {
        let mut v: Vec<_> = self
            .held()
            .iter()
            .map(|(r, n)| (r.to_string(), *n))
            .collect();
        v.sort();
        v
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut held = self.counts.held();
        if let Some(n) = held.get_mut(&self.realm) {
            debug_assert!(*n > 0, "given back once");
            *n -= 1;
            if *n == 0 {
                held.remove(&self.realm);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: DoorLimits = DoorLimits {
        unauthenticated: 8,
        unauthenticated_per_source: 3,
        per_realm: 4,
    };

    fn ip(last: u8) -> Source {
        Source::Ip(std::net::Ipv4Addr::new(10, 0, 0, last).into())
    }

    /// A source past its limit is refused; all sources past theirs close
    /// the oldest of the source holding the most; signing in moves a
    /// connection out of the count.
    #[test]
    fn unauthenticated_connections_are_capped_per_source_and_in_all() {
        let door = Ledger::new(LIMITS);
        let mut kept = Vec::new();
        for _ in 0..3 {
            let c = Ticket::new(ip(1));
            assert!(door.admit(&c));
            kept.push(c);
        }
        assert!(
            !door.admit(&Ticket::new(ip(1))),
            "one past the source's limit"
        );
        for source in [2, 2, 3, 3, 4] {
            let c = Ticket::new(ip(source));
            assert!(door.admit(&c));
            kept.push(c);
        }
        assert_eq!(door.usage().unauthenticated, 8);
        let newest = Ticket::new(ip(9));
        assert!(door.admit(&newest));
        assert_eq!(door.usage().unauthenticated, 8, "one went to make room");
        let evicted: Vec<_> = kept.iter().filter(|c| c.is_evicted()).collect();
        assert_eq!(evicted.len(), 1);
        assert!(
            Arc::ptr_eq(evicted[0], &kept[0]),
            "the oldest of the source holding most"
        );
        // Signing in leaves the count; forgetting twice is harmless.
        door.sign_in(&newest, "r").unwrap();
        door.sign_in(&newest, "other").unwrap(); // signed in before: stays r's
        assert_eq!(door.usage().unauthenticated, 7);
        assert_eq!(door.usage().by_realm, vec![("r".to_string(), 1)]);
        door.forget(&newest);
        door.forget(&newest);
        assert_eq!(door.usage().by_realm, vec![]);
        // An evicted connection cannot sign in.
        assert_eq!(door.sign_in(&kept[0], "r"), Err(Refused::Evicted));
    }

    /// A realm holds at most its limit; another realm still signs in.
    #[test]
    fn a_realm_holds_at_most_its_share() {
        let door = Ledger::new(LIMITS);
        let mut kept = Vec::new();
        for i in 0..4 {
            let c = Ticket::new(ip(i));
            assert!(door.admit(&c));
            door.sign_in(&c, "a").unwrap();
            kept.push(c);
        }
        let c = Ticket::new(ip(5));
        assert!(door.admit(&c));
        assert_eq!(
            door.sign_in(&c, "a"),
            Err(Refused::RealmFull {
                realm: "a".into(),
                held: 4
            })
        );
        assert_eq!(door.usage().unauthenticated, 1, "it stays unauthenticated");
        door.sign_in(&c, "b").unwrap();
        // Operators are counted, not capped.
        for i in 0..6 {
            let c = Ticket::new(ip(10 + i));
            assert!(door.admit(&c));
            door.sign_in(&c, "").unwrap();
            kept.push(c);
        }
        assert!(door.usage().by_realm.contains(&(String::new(), 6)));
    }

    /// With every slot held, room is made from the realm holding the most,
    /// and only from an idle connection of it.
    #[test]
    fn room_is_made_from_the_realm_holding_the_most() {
        let door = Ledger::new(LIMITS);
        let of = |realm: &str, n: usize| -> Vec<Arc<Ticket>> {
            (0..n)
                .map(|i| {
                    let c = Ticket::new(ip(i as u8));
                    assert!(door.admit(&c));
                    door.sign_in(&c, realm).unwrap();
                    c
                })
                .collect()
        };
        let big = of("big", 4);
        let small = of("small", 2);
        let _busy = big[0].busy(); // the oldest has a request under way
        assert!(door.make_room());
        assert!(!big[0].is_evicted(), "a busy one stays");
        assert!(big[1].is_evicted(), "the oldest idle one goes");
        assert!(small.iter().all(|c| !c.is_evicted()));
        assert!(door.make_room());
        assert!(big[2].is_evicted(), "not the same one twice");
    }

    /// A ticket's connection closes once evicted and idle, not before.
    #[tokio::test]
    async fn a_ticket_closes_when_evicted_and_idle() {
        let t = Ticket::new(ip(1));
        let busy = t.busy();
        t.evict();
        let closing = tokio::spawn(t.clone().closing());
        tokio::task::yield_now().await;
        assert!(!closing.is_finished(), "a request is under way");
        drop(busy);
        closing.await.unwrap();
    }

    #[test]
    fn per_realm_counts_cap_tenants_not_operators() {
        let calls = PerRealm::new(2);
        let a1 = calls.take("a").unwrap();
        let _a2 = calls.take("a").unwrap();
        assert_eq!(
            calls.take("a").unwrap_err(),
            RealmFull {
                realm: "a".into(),
                held: 2
            }
        );
        let _b = calls.take("b").unwrap();
        let ops: Vec<_> = (0..5).map(|_| calls.take("").unwrap()).collect();
        assert_eq!(
            calls.usage(),
            vec![("".into(), 5), ("a".into(), 2), ("b".into(), 1)]
        );
        drop(a1);
        let _a3 = calls.take("a").unwrap();
        drop(ops);
        assert_eq!(calls.usage(), vec![("a".into(), 2), ("b".into(), 1)]);
    }
}
