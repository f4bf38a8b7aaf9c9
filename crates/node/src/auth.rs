//! Authentication and authorization of every request (issue 17).
//!
//! Every service is wrapped in [`Authenticate`], a tonic interceptor: a
//! request without an `authorization: Bearer <token>` header, or whose
//! token is unknown, revoked or expired, is UNAUTHENTICATED before any
//! handler runs. An accepted request carries its [`Principal`] as a request
//! extension; every door makes it a kernel `Caller` with
//! `Principal::act` (the gRPC services through [`crate::op`]), which says
//! which realm and user it acts for — a request naming another realm or
//! user is PERMISSION_DENIED — and the kernel's operations check that
//! caller.
//!
//! A scoped credential ([`auth::Scope`]) reaches only the `Ipc` and `Batch`
//! services: every other service's interceptor is made with
//! [`Authenticate::closed_to_scoped`] and refuses it before its handler
//! runs; the mailbox operations check each mailbox against the scope
//! (`Caller::may_send`, `Caller::may_recv`, `Caller::unscoped`).
//!
//! The node checks tokens against an in-memory copy of the live
//! credentials (hash → principal). Those that are not procs' are loaded at
//! start and kept current by the change feed: each created or revoked
//! credential's id is notified on `auth::CHANGES_CHANNEL`, and the node
//! re-reads that one row ([`Auth::follow`]; the whole table only after a
//! lagging subscription was cut off). A check costs one SHA-256 and one
//! hash look-up.
//!
//! A proc's own credential (one per native spawn) is told to no node: a
//! node takes it when it is first shown it — the node that minted it at
//! once ([`Auth::remember`]), any other when a request carries it — by
//! subscribing to the credential's own channel (`auth::proc_channel`) and
//! then reading its row ([`Auth::check`]); a follower task then waits on
//! that channel for its revocation. Subscribing before reading means no
//! revocation can fall between the two. So a spawn's notifications reach
//! the nodes the proc talks to, not every node (issue 35, item 4). A node
//! follows at most [`FOLLOWED_MAX`] procs' credentials (past it, the
//! longest followed is dropped, and looked up again if shown again), and
//! looks up at most [`LOOKUPS_MAX`] unknown tokens at once (past it,
//! UNAVAILABLE: a flood of made-up tokens costs the database a bounded
//! number of indexed reads, and the flooding connections are closed after
//! `conn::AUTH_WAIT_MAX`).
//!
//! Credentials this node creates or revokes are applied to the copy before
//! the call returns (and a reload, whose snapshot may predate one created
//! here, keeps it); another node's are seen when its notification arrives
//! (after its commit), or when a request shows one not yet seen.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use tabos_kernel::auth::{self, CredentialId, Principal, TokenHash};
use tabos_store::{Store, Subscription};
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// Metadata key of the credential.
pub const AUTHORIZATION: &str = "authorization";

/// Most procs' credentials a node follows (holds, and listens for the
/// revocation of) at once.
pub const FOLLOWED_MAX: usize = 4_096;

/// Most tokens not in the copy a node looks up in the database at once.
pub const LOOKUPS_MAX: usize = 4;

/// The node's view of the live credentials.
#[derive(Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").finish_non_exhaustive()
    }
}

struct Inner {
    store: Store,
    live: RwLock<Live>,
    /// Look-ups under way ([`LOOKUPS_MAX`]).
    lookups: AtomicUsize,
    /// Raised when the node stops: no proc credential is followed after.
    stopped: AtomicBool,
}

/// The live credentials, by token hash and by id (to drop one by id).
#[derive(Default)]
struct Live {
    by_hash: HashMap<TokenHash, Arc<Principal>>,
    by_id: HashMap<CredentialId, TokenHash>,
    /// Created here since the last reload: a reload's snapshot may
    /// predate them, and must not drop them (its own notification would
    /// bring each back, but only later — a caller given it could be
    /// refused meanwhile).
    fresh: std::collections::HashSet<CredentialId>,
    /// Procs' credentials held, each with the task that waits for its
    /// revocation on its own channel; `order` holds them oldest first.
    followed: HashMap<CredentialId, tokio::task::AbortHandle>,
    order: VecDeque<CredentialId>,
}

/// Most credentials remembered as created here since the last reload;
/// past it they are left to their notifications.
const FRESH_MAX: usize = 4_096;

impl Live {
    fn insert(&mut self, hash: TokenHash, p: Principal) {
        if let Some(old) = self.by_id.insert(p.id().clone(), hash) {
            if old != hash {
                self.by_hash.remove(&old);
            }
        }
        self.by_hash.insert(hash, Arc::new(p));
    }

    fn remove(&mut self, id: &CredentialId) {
        self.fresh.remove(id);
        if let Some(task) = self.followed.remove(id) {
            task.abort();
            self.order.retain(|o| o != id);
        }
        if let Some(h) = self.by_id.remove(id) {
            self.by_hash.remove(&h);
        }
    }

    /// Makes room for one more followed credential.
    fn make_room(&mut self) {
        while self.followed.len() >= FOLLOWED_MAX {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.remove(&oldest);
        }
    }
}

/// A token's look-up slot, given back when dropped.
struct LookupSlot<'a>(&'a AtomicUsize);

impl<'a> LookupSlot<'a> {
    fn take(count: &'a AtomicUsize) -> Option<LookupSlot<'a>> {
        let taken = count.fetch_add(1, Ordering::AcqRel);
        if taken >= LOOKUPS_MAX {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(LookupSlot(count))
    }
}

impl Drop for LookupSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed, unknown, revoked or expired.
    NotLive,
    /// Not in the copy, and [`LOOKUPS_MAX`] look-ups are already under
    /// way: try again.
    Busy,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::NotLive => "the credential is unknown, revoked or expired",
            Refusal::Busy => {
                "the node is looking up too many unknown credentials at once; try again"
            }
        })
    }
}

impl Auth {
    /// Loads the live credentials of `store` that are not procs'.
    pub fn open(store: Store) -> Result<Auth, tabos_kernel::Error> {
        let a = Auth {
            inner: Arc::new(Inner {
                store,
                live: RwLock::new(Live::default()),
                lookups: AtomicUsize::new(0),
                stopped: AtomicBool::new(false),
            }),
        };
        a.reload()?;
        Ok(a)
    }

    /// Replaces the in-memory copy of credentials that are not procs' with
    /// the table's, keeping those created here since the last reload (the
    /// table's snapshot may predate them; the next reload goes by the
    /// table alone) and the procs' this node follows.
    pub fn reload(&self) -> Result<(), tabos_kernel::Error> {
        let now = tabos_store::now_us();
        let rows = auth::load(&self.inner.store, now)?;
        let mut live = self.write();
        let mut loaded = Live {
            followed: std::mem::take(&mut live.followed),
            order: std::mem::take(&mut live.order),
            ..Live::default()
        };
        for (h, p) in rows {
            loaded.insert(h, p);
        }
        let mut kept: Vec<CredentialId> = std::mem::take(&mut live.fresh).into_iter().collect();
        kept.extend(loaded.followed.keys().cloned());
        for id in &kept {
            let Some(h) = live.by_id.get(id).copied() else {
                continue;
            };
            if let Some(p) = live.by_hash.get(&h) {
                loaded.insert(h, (**p).clone());
            }
        }
        *live = loaded;
        Ok(())
    }

    /// Re-reads credential `id` (created or revoked elsewhere).
    fn refresh(&self, id: &CredentialId) -> Result<(), tabos_kernel::Error> {
        let one = auth::load_one(&self.inner.store, id, tabos_store::now_us())?;
        let mut live = self.write();
        match one {
            Some((h, p)) => live.insert(h, p),
            None => live.remove(id),
        }
        Ok(())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.inner.live.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The principal of `token`, if it is live now.
    pub fn check(&self, token: &str) -> Option<Arc<Principal>> {
        self.check_token(token).ok()
    }

    /// The principal of `token` if it is live now: from the copy, or else
    /// read from the table (a proc's credential this node has not been
    /// shown yet, or one created elsewhere whose notification is still on
    /// its way), blocking the calling thread for that read.
    pub fn check_token(&self, token: &str) -> Result<Arc<Principal>, Refusal> {
        // Only a well-formed token is hashed.
        let id = auth::token_id(token).ok_or(Refusal::NotLive)?;
        let hash = TokenHash::of(token);
        let now = tabos_store::now_us();
        {
            let live = self.inner.live.read().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = live.by_hash.get(&hash) {
                return p.is_live(now).then(|| p.clone()).ok_or(Refusal::NotLive);
            }
        }
        let _slot = LookupSlot::take(&self.inner.lookups).ok_or(Refusal::Busy)?;
        blocking_here(|| self.look_up(&id, hash))
    }

    /// Reads credential `id` and takes it if it is live and `hash` is its
    /// token's. A proc's is subscribed to first and then followed.
    fn look_up(&self, id: &CredentialId, hash: TokenHash) -> Result<Arc<Principal>, Refusal> {
        let store = &self.inner.store;
        let read = |now| match auth::load_one(store, id, now) {
            Ok(Some((h, p))) if h == hash => Some(p),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!("credentials: cannot look up {id}: {e}");
                None
            }
        };
        let p = read(tabos_store::now_us()).ok_or(Refusal::NotLive)?;
        if p.pid().is_none() {
            // Told on the shared channel, which the node follows: taken
            // now, then read again — a revocation committed before that
            // read is seen by it, one after by its notification.
            self.write().insert(hash, p);
            if read(tabos_store::now_us()).is_none() {
                self.write().remove(id);
                return Err(Refusal::NotLive);
            }
        } else {
            // Subscribed before the read that decides: a revocation
            // committed after it is delivered.
            let sub = store.subscribe(&auth::proc_channel(id));
            let p = read(tabos_store::now_us()).ok_or(Refusal::NotLive)?;
            self.follow_proc(hash, p, sub);
        }
        let live = self.inner.live.read().unwrap_or_else(|e| e.into_inner());
        live.by_hash.get(&hash).cloned().ok_or(Refusal::NotLive)
    }

    /// Holds proc credential `p` and starts the task that waits on `sub`
    /// (its channel) for its revocation. Without an async runtime (or
    /// once the node stops) nothing is held: it is looked up each time.
    fn follow_proc(&self, hash: TokenHash, p: Principal, sub: Subscription) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.inner.stopped.load(Ordering::Acquire) {
            return;
        }
        let id = p.id().clone();
        let mut live = self.write();
        if live.followed.contains_key(&id) {
            live.insert(hash, p);
            return; // an earlier look-up follows it already
        }
        live.make_room();
        let task = rt.spawn(self.clone().follow_one(id.clone(), sub));
        live.followed.insert(id.clone(), task.abort_handle());
        live.order.push_back(id);
        live.insert(hash, p);
    }

    /// Waits for proc credential `id`'s revocation; ends when it is gone
    /// from the copy (revoked, expired past a re-read, dropped or
    /// forgotten, which also aborts this task).
    async fn follow_one(self, id: CredentialId, mut sub: Subscription) {
        loop {
            if sub.recv().await.is_ok() {
                // Its channel says only that it is gone (revoked or
                // deleted: `auth::proc_channel`), which is final.
                self.write().remove(&id);
                return;
            }
            // Cut off (the listener reconnected): subscribed again before
            // it is read again, so that nothing falls between.
            let (me, id2) = (self.clone(), id.clone());
            let again = tokio::task::spawn_blocking(move || {
                let sub = me.inner.store.subscribe(&auth::proc_channel(&id2));
                if let Err(e) = me.refresh(&id2) {
                    tracing::warn!("credentials: cannot re-read {id2}: {e}");
                }
                sub
            })
            .await;
            match again {
                Ok(s) => sub = s,
                Err(_) => return,
            }
            let live = self.inner.live.read().unwrap_or_else(|e| e.into_inner());
            if !live.by_id.contains_key(&id) {
                return;
            }
        }
    }

    /// Whether credential `id` is still live (not revoked, not expired):
    /// for a session that checked its token once, at its start.
    pub fn is_live(&self, id: &CredentialId) -> bool {
        let live = self.inner.live.read().unwrap_or_else(|e| e.into_inner());
        live.by_id
            .get(id)
            .and_then(|h| live.by_hash.get(h))
            .is_some_and(|p| p.is_live(tabos_store::now_us()))
    }

    /// The principal of a request's metadata, or UNAUTHENTICATED
    /// (UNAVAILABLE while too many unknown tokens are being looked up).
    pub fn authenticate(&self, md: &MetadataMap) -> Result<Arc<Principal>, Status> {
        let Some(value) = md.get(AUTHORIZATION) else {
            return Err(Status::unauthenticated(
                "no credential: send `authorization: Bearer <token>` (the CLI takes --token, \
                 TABOS_TOKEN or a context of its credentials file)",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                Status::unauthenticated("the authorization header is not `Bearer <token>`")
            })?;
        self.check_token(token).map_err(|r| match r {
            Refusal::NotLive => Status::unauthenticated(r.to_string()),
            Refusal::Busy => Status::unavailable(r.to_string()),
        })
    }

    /// Creates a credential and makes it usable on this node at once.
    ///
    /// A proc's is followed from its commit on. Where the change feed
    /// delivers at once (SQLite's, in this process) its channel is
    /// subscribed to before the commit: no revocation can fall between,
    /// and no re-read is needed. Elsewhere subscribing is a round trip
    /// (PostgreSQL's LISTEN), made after the commit ([`Auth::remember`]).
    pub async fn create(
        &self,
        spec: auth::Spec,
    ) -> Result<(auth::Minted, Arc<Principal>), tabos_kernel::Error> {
        let store = &self.inner.store;
        let minted = auth::mint()?;
        let channel = auth::proc_channel(&minted.id);
        let early = (spec.pid.is_some() && store.feed_delivers(&channel))
            .then(|| store.subscribe(&channel));
        let (minted, principal) = auth::create_minted(store, spec, minted).await?;
        match early {
            Some(sub) => self.follow_proc(minted.hash, principal.clone(), sub),
            None => self.remember(minted.hash, principal.clone()),
        }
        Ok((minted, Arc::new(principal)))
    }

    /// [`Auth::create`] for `who`, which the kernel checks may grant
    /// `spec` ([`auth::may_grant`]).
    pub async fn create_for(
        &self,
        who: &tabos_kernel::auth::Caller,
        spec: auth::Spec,
    ) -> Result<(auth::Minted, Arc<Principal>), tabos_kernel::Error> {
        let (minted, principal) = auth::create_for(&self.inner.store, who, spec).await?;
        self.remember(minted.hash, principal.clone());
        Ok((minted, Arc::new(principal)))
    }

    /// Adds a credential this node has just committed to the in-memory
    /// copy. A proc's is then followed: its channel is subscribed to and
    /// its row read again off this thread (a revocation between the
    /// commit and the subscription is seen by that read).
    pub fn remember(&self, hash: TokenHash, p: Principal) {
        if p.pid().is_some() {
            let me = self.clone();
            let id = p.id().clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                // Usable at once; followed once subscribed.
                self.write().insert(hash, p.clone());
                rt.spawn_blocking(move || {
                    let sub = me.inner.store.subscribe(&auth::proc_channel(&id));
                    match auth::load_one(&me.inner.store, &id, tabos_store::now_us()) {
                        Ok(Some((h, p))) if h == hash => me.follow_proc(h, p, sub),
                        Ok(_) => me.write().remove(&id),
                        Err(e) => {
                            tracing::warn!("credentials: cannot re-read {id}: {e}");
                            me.write().remove(&id);
                        }
                    }
                });
            }
            return;
        }
        let mut live = self.write();
        if live.fresh.len() >= FRESH_MAX {
            live.fresh.clear();
        }
        live.fresh.insert(p.id().clone());
        live.insert(hash, p);
    }

    /// Drops credential `id` from the in-memory copy (after revoking it
    /// here).
    pub fn forget(&self, id: &CredentialId) {
        self.write().remove(id);
    }

    /// Drops every credential of `realm` from the in-memory copy (after
    /// removing the realm here): the removal's own notifications arrive
    /// later, and the realm's tokens must be refused as soon as the call
    /// returns.
    pub fn forget_realm(&self, realm: &str) {
        let mut live = self.write();
        let ids: Vec<CredentialId> = live
            .by_hash
            .values()
            .filter(|p| p.realm() == realm)
            .map(|p| p.id().clone())
            .collect();
        for id in &ids {
            live.remove(id);
        }
    }

    /// Keeps the in-memory copy current until `stop` is raised: re-reads
    /// each credential the change feed names, and the whole table after
    /// subscribing (anything committed before is in that load) — also
    /// after a lagging subscription is cut off. When stopped, stops
    /// following procs' credentials too.
    pub async fn follow(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let mut sub = self.inner.store.subscribe(auth::CHANGES_CHANNEL);
            let me = self.clone();
            if let Err(e) = blocking(move || me.reload()).await {
                tracing::warn!("credentials: reload failed: {e}");
            }
            loop {
                let n = tokio::select! {
                    _ = stop.changed() => {
                        self.stop_following();
                        return;
                    }
                    n = sub.recv() => n,
                };
                let Ok(n) = n else { break }; // cut off: subscribe again, reload
                                              // A payload that is not an id cannot name a credential.
                let Ok(id) = CredentialId::new(n.payload) else {
                    continue;
                };
                let me = self.clone();
                if let Err(e) = blocking(move || me.refresh(&id)).await {
                    tracing::warn!("credentials: refresh failed: {e}");
                }
            }
        }
    }

    /// Ends every follower task and drops the procs' credentials held (the
    /// node is stopping).
    fn stop_following(&self) {
        self.inner.stopped.store(true, Ordering::Release);
        let mut live = self.write();
        let ids: Vec<CredentialId> = live.followed.keys().cloned().collect();
        for id in &ids {
            live.remove(id);
        }
    }

    /// Procs' credentials this node follows now.
    pub fn followed(&self) -> usize {
        let live = self.inner.live.read().unwrap_or_else(|e| e.into_inner());
        live.followed.len()
    }

    /// The interceptor that authenticates every request of a service.
    pub fn interceptor(&self) -> Authenticate {
        Authenticate {
            mode: Mode::Check(self.clone()),
            closed_to_scoped: None,
        }
    }

    /// An interceptor that checks nothing and lets every request act as
    /// `operator` (a credential made for it): only for measuring what checking costs (`tabos-bench
    /// auth`). `tabos up` never serves this way.
    pub fn unchecked_for_measurement(operator: Arc<Principal>) -> Authenticate {
        debug_assert!(operator.is_operator());
        Authenticate {
            closed_to_scoped: None,
            mode: Mode::Unchecked(operator),
        }
    }
}

/// Runs `f`, a blocking store read, on this thread: moved out of the
/// async runtime's way where it has other worker threads
/// (`block_in_place`), run as is on a single-threaded runtime or none.
fn blocking_here<T>(f: impl FnOnce() -> T) -> T {
    if tabos_kernel::may_block_in_place() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// Runs a store read off the async runtime's threads.
async fn blocking(
    f: impl FnOnce() -> Result<(), tabos_kernel::Error> + Send + 'static,
) -> Result<(), tabos_kernel::Error> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(tabos_kernel::Error::Invalid(e.to_string())))
}

/// The interceptor every service is wrapped in.
#[derive(Clone, Debug)]
pub struct Authenticate {
    mode: Mode,
    /// `Some(service)`: scoped credentials are refused here.
    closed_to_scoped: Option<&'static str>,
}

impl Authenticate {
    /// The same check, refusing every scoped credential: for `service`,
    /// which a scope cannot name (all but `Ipc` and `Batch`).
    pub fn closed_to_scoped(&self, service: &'static str) -> Authenticate {
        Authenticate {
            mode: self.mode.clone(),
            closed_to_scoped: Some(service),
        }
    }
}

#[derive(Clone, Debug)]
enum Mode {
    Check(Auth),
    Unchecked(Arc<Principal>),
}

impl tonic::service::Interceptor for Authenticate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let p = match &self.mode {
            Mode::Check(auth) => auth.authenticate(request.metadata())?,
            Mode::Unchecked(p) => p.clone(),
        };
        if let (Some(service), Some(scope)) = (self.closed_to_scoped, &p.scope()) {
            return Err(Status::permission_denied(format!(
                "credential {} is scoped to {} ({scope}) and may not use the {service} \
                 service",
                p.id(),
                scope.kind()
            )));
        }
        // The connection has a caller now: it may stay past the wait for
        // a credential (`conn::AUTH_WAIT_MAX`), as one of its realm's
        // (`conn::CONNECTIONS_PER_REALM_MAX`).
        if let Some(conn) = request.extensions().get::<crate::conn::ConnInfo>() {
            conn.signed_in(p.realm())
                .map_err(Status::resource_exhausted)?;
        }
        request.extensions_mut().insert(p);
        Ok(request)
    }
}

/// The principal the interceptor attached to `request`.
pub fn caller<T>(request: &Request<T>) -> Result<Arc<Principal>, Status> {
    request
        .extensions()
        .get::<Arc<Principal>>()
        .cloned()
        // Only reachable if a service were added without the interceptor.
        .ok_or_else(|| Status::unauthenticated("no credential"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At most `LOOKUPS_MAX` look-ups at once; a slot comes back when its
    /// look-up ends.
    #[test]
    fn lookups_are_bounded() {
        let count = AtomicUsize::new(0);
        let slots: Vec<_> = (0..LOOKUPS_MAX)
            .map(|_| LookupSlot::take(&count).unwrap())
            .collect();
        assert!(LookupSlot::take(&count).is_none());
        assert_eq!(
            count.load(Ordering::Acquire),
            LOOKUPS_MAX,
            "a refusal takes nothing"
        );
        drop(slots);
        assert_eq!(count.load(Ordering::Acquire), 0);
        assert!(LookupSlot::take(&count).is_some());
    }

    /// Past `FOLLOWED_MAX`, the credential followed longest is dropped
    /// (and its follower ended) to make room.
    #[tokio::test]
    async fn followed_credentials_are_bounded_oldest_first() {
        let mut live = Live::default();
        let mut tasks = Vec::new();
        for i in 0..FOLLOWED_MAX {
            live.make_room();
            let id = CredentialId(format!("{i:016x}"));
            let task = tokio::spawn(std::future::pending::<()>());
            live.followed.insert(id.clone(), task.abort_handle());
            live.order.push_back(id);
            tasks.push(task);
        }
        live.make_room();
        assert_eq!(live.followed.len(), FOLLOWED_MAX - 1);
        assert!(!live
            .followed
            .contains_key(&CredentialId(format!("{:016x}", 0))));
        let first = tasks.swap_remove(0);
        assert!(
            first.await.unwrap_err().is_cancelled(),
            "its follower ended"
        );
    }

    /// A proc's credential is not loaded at start: it is looked up when
    /// shown, followed, and dropped when revoked (told on its channel).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_procs_credential_is_looked_up_followed_and_dropped() {
        let dir = tabos_store::testing::TempDir::new("auth-lookup");
        let store = tabos_kernel::open(&tabos_store::Config::sqlite(dir.path())).unwrap();
        tabos_kernel::realms::create(&store, "r", tabos_kernel::sched::Scheduler::Fifo).unwrap();
        let pid = tabos_kernel::ids::Pid::new("p1").unwrap();
        let spec = auth::Spec {
            pid: Some(pid.clone()),
            ..auth::Spec::realm("r", "alice", auth::Role::Member)
        };
        let (minted, _) = auth::create(&store, spec).await.unwrap();
        let a = Auth::open(store.clone()).unwrap();
        assert!(!a.is_live(&minted.id), "not loaded");
        assert_eq!(a.followed(), 0);
        let p = a.check_token(&minted.token).unwrap();
        assert_eq!(p.pid(), Some(&pid));
        assert_eq!(a.followed(), 1);
        assert!(a.is_live(&minted.id), "held after the look-up");
        // A made-up token with the same id is not it.
        let forged = format!("tabos_{}_{}", minted.id, "0".repeat(64));
        assert_eq!(a.check_token(&forged).unwrap_err(), Refusal::NotLive);
        tabos_kernel::auth::revoke_pid(&store, "r", &pid)
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while a.is_live(&minted.id) || a.followed() > 0 {
            assert!(std::time::Instant::now() < deadline, "never dropped");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(a.check_token(&minted.token).unwrap_err(), Refusal::NotLive);
    }

    /// A reload whose snapshot predates a credential created here keeps
    /// it (only that reload: the next one goes by the table alone).
    #[test]
    fn a_reload_keeps_what_was_created_here_meanwhile() {
        let dir = tabos_store::testing::TempDir::new("auth-reload");
        let store = tabos_kernel::open(&tabos_store::Config::sqlite(dir.path())).unwrap();
        let a = Auth::open(store).unwrap();
        // Remembered, as after a commit the reload's read did not see: it
        // is in the copy, not in the table.
        // A principal only comes from a committed row: this one's is in
        // another database.
        let elsewhere = tabos_store::testing::TempDir::new("auth-reload-elsewhere");
        let other = tabos_kernel::open(&tabos_store::Config::sqlite(elsewhere.path())).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (minted, principal) = rt
            .block_on(auth::create(&other, auth::Spec::operator("test")))
            .unwrap();
        a.remember(minted.hash, principal);
        assert!(a.check(&minted.token).is_some());
        a.reload().unwrap();
        assert!(a.check(&minted.token).is_some(), "kept through the reload");
        a.reload().unwrap();
        assert!(a.check(&minted.token).is_none(), "the table decides after");
    }
}
