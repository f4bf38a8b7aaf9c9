//! Authentication and authorization of every request (issue 17).
//!
//! Every service is wrapped in [`Authenticate`], a tonic interceptor: a
//! request without an `authorization: Bearer <token>` header, or whose
//! token is unknown, revoked or expired, is UNAUTHENTICATED before any
//! handler runs. An accepted request carries its [`Principal`] as a request
//! extension; handlers take it with [`caller`] and derive the realm and the
//! user they act for from it ([`Access`]), never from a request field: a
//! field naming another realm or user is PERMISSION_DENIED.
//!
//! A scoped credential ([`auth::Scope`]) reaches only the `Ipc` and `Batch`
//! services: every other service's interceptor is made with
//! [`Authenticate::closed_to_scoped`] and refuses it before its handler
//! runs; the `Ipc` handlers and the batch check each mailbox against the
//! scope ([`Access::may_send`], [`Access::may_recv`], [`Access::unscoped`]).
//!
//! The node checks tokens against an in-memory copy of the live
//! credentials (hash → principal), loaded at start and kept current by the
//! change feed: each created or revoked credential's id is notified, and
//! the node re-reads that one row ([`Auth::follow`]; the whole table only
//! after a lagging subscription was cut off). A check costs one SHA-256 and
//! one hash look-up.
//! Credentials this node creates or revokes are applied to the copy before
//! the call returns (and a reload, whose snapshot may predate one created
//! here, keeps it); another node's are seen when its notification arrives
//! (after its commit).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tabos_kernel::auth::{self, CredentialId, Principal, Role, TokenHash};
use tabos_store::Store;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// Metadata key of the credential.
pub const AUTHORIZATION: &str = "authorization";

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
}

/// Most credentials remembered as created here since the last reload;
/// past it they are left to their notifications.
const FRESH_MAX: usize = 4_096;

impl Live {
    fn insert(&mut self, hash: TokenHash, p: Principal) {
        self.by_id.insert(p.id.clone(), hash);
        self.by_hash.insert(hash, Arc::new(p));
    }

    fn remove(&mut self, id: &CredentialId) {
        self.fresh.remove(id);
        if let Some(h) = self.by_id.remove(id) {
            self.by_hash.remove(&h);
        }
    }
}

impl Auth {
    /// Loads the live credentials of `store`.
    pub fn open(store: Store) -> Result<Auth, tabos_kernel::Error> {
        let a = Auth {
            inner: Arc::new(Inner {
                store,
                live: RwLock::new(Live::default()),
            }),
        };
        a.reload()?;
        Ok(a)
    }

    /// Replaces the in-memory copy with the table's live credentials,
    /// keeping those created here since the last reload (the table's
    /// snapshot may predate them; the next reload goes by the table alone).
    pub fn reload(&self) -> Result<(), tabos_kernel::Error> {
        let now = tabos_store::now_us();
        let mut loaded = Live::default();
        for (h, p) in auth::load(&self.inner.store, now)? {
            loaded.insert(h, p);
        }
        let mut live = self.write();
        for id in std::mem::take(&mut live.fresh) {
            let Some(h) = live.by_id.get(&id).copied() else {
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
        live.remove(id);
        if let Some((h, p)) = one {
            live.insert(h, p);
        }
        Ok(())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.inner.live.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The principal of `token`, if it is live now.
    pub fn check(&self, token: &str) -> Option<Arc<Principal>> {
        // Only a well-formed token is hashed.
        auth::token_id(token)?;
        let hash = TokenHash::of(token);
        let live = self.inner.live.read().unwrap_or_else(|e| e.into_inner());
        let p = live.by_hash.get(&hash)?;
        p.is_live(tabos_store::now_us()).then(|| p.clone())
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

    /// The principal of a request's metadata, or UNAUTHENTICATED.
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
        self.check(token)
            .ok_or_else(|| Status::unauthenticated("the credential is unknown, revoked or expired"))
    }

    /// Creates a credential and makes it usable on this node at once.
    pub async fn create(&self, spec: auth::Spec) -> Result<auth::Minted, tabos_kernel::Error> {
        let minted = auth::create(&self.inner.store, spec.clone()).await?;
        self.remember(&minted, &spec);
        Ok(minted)
    }

    /// Adds a credential this node has just committed to the in-memory copy.
    pub fn remember(&self, minted: &auth::Minted, spec: &auth::Spec) {
        let p = Principal {
            id: minted.id.clone(),
            realm: spec.realm.clone(),
            user: spec.user.clone(),
            role: spec.role,
            pid: spec.pid.clone(),
            expires_us: spec.expires_us,
            scope: spec.scope.clone(),
        };
        let mut live = self.write();
        if live.fresh.len() >= FRESH_MAX {
            live.fresh.clear();
        }
        live.fresh.insert(p.id.clone());
        live.insert(minted.hash, p);
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
            .filter(|p| p.realm == realm)
            .map(|p| p.id.clone())
            .collect();
        for id in &ids {
            live.remove(id);
        }
    }

    /// Keeps the in-memory copy current until `stop` is raised: re-reads
    /// each credential the change feed names, and the whole table after
    /// subscribing (anything committed before is in that load) — also
    /// after a lagging subscription is cut off.
    pub async fn follow(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let mut sub = self.inner.store.subscribe(auth::CHANGES_CHANNEL);
            let me = self.clone();
            if let Err(e) = blocking(move || me.reload()).await {
                eprintln!("credentials: reload failed: {e}");
            }
            loop {
                let n = tokio::select! {
                    _ = stop.changed() => return,
                    n = sub.recv() => n,
                };
                let Ok(n) = n else { break }; // cut off: subscribe again, reload
                                              // A payload that is not an id cannot name a credential.
                let Ok(id) = CredentialId::new(n.payload) else {
                    continue;
                };
                let me = self.clone();
                if let Err(e) = blocking(move || me.refresh(&id)).await {
                    eprintln!("credentials: refresh failed: {e}");
                }
            }
        }
    }

    /// The interceptor that authenticates every request of a service.
    pub fn interceptor(&self) -> Authenticate {
        Authenticate {
            mode: Mode::Check(self.clone()),
            closed_to_scoped: None,
        }
    }

    /// An interceptor that checks nothing and lets every request act as an
    /// operator: only for measuring what checking costs (`tabos-bench
    /// auth`). `tabos up` never serves this way.
    pub fn unchecked_for_measurement() -> Authenticate {
        Authenticate {
            closed_to_scoped: None,
            mode: Mode::Unchecked(Arc::new(Principal {
                id: auth::CredentialId("0000000000000000".into()),
                realm: String::new(),
                user: "root".into(),
                role: Role::Operator,
                pid: None,
                expires_us: None,
                scope: None,
            })),
        }
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
        if let (Some(service), Some(scope)) = (self.closed_to_scoped, &p.scope) {
            return Err(Status::permission_denied(format!(
                "credential {} is scoped to mailboxes ({scope}) and may not use the {service} \
                 service",
                p.id
            )));
        }
        // The connection has a caller now: it may stay past the wait for
        // a credential (`conn::AUTH_WAIT_MAX`).
        if let Some(conn) = request.extensions().get::<crate::conn::ConnInfo>() {
            conn.state.authenticated();
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

/// What a caller may do: its principal and the node's default realm (where
/// an operator acts when its request names none).
#[derive(Debug, Clone)]
pub struct Access {
    pub principal: Arc<Principal>,
    default_realm: String,
}

impl Access {
    pub fn new(principal: Arc<Principal>, default_realm: &str) -> Access {
        Access {
            principal,
            default_realm: default_realm.to_string(),
        }
    }

    /// Refuses the call unless the credential has at least `need`.
    pub fn require(&self, need: Role) -> Result<(), Status> {
        let p = &self.principal;
        if p.role >= need {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "credential {} has role {}; this call needs {need}",
                p.id, p.role
            )))
        }
    }

    /// The realm a request acts in: the credential's (a request may name
    /// it, or leave it empty); an operator's request names any realm, or
    /// acts in the node's. Needs at least role `need`.
    pub fn realm(&self, requested: &str, need: Role) -> Result<String, Status> {
        self.require(need)?;
        let p = &self.principal;
        if p.is_operator() {
            return Ok(if requested.is_empty() {
                self.default_realm.clone()
            } else {
                requested.to_string()
            });
        }
        if requested.is_empty() || requested == p.realm {
            Ok(p.realm.clone())
        } else {
            Err(Status::permission_denied(format!(
                "credential {} acts for realm {}, not {requested}",
                p.id, p.realm
            )))
        }
    }

    /// The fs user a request acts as: the credential's (an operator's may
    /// name any, `root` by default).
    pub fn user(&self, requested: &str) -> Result<String, Status> {
        let p = &self.principal;
        if p.is_operator() {
            return Ok(if requested.is_empty() {
                p.user.clone()
            } else {
                requested.to_string()
            });
        }
        if requested.is_empty() || requested == p.user {
            Ok(p.user.clone())
        } else {
            Err(Status::permission_denied(format!(
                "credential {} acts as user {}, not {requested}",
                p.id, p.user
            )))
        }
    }

    /// Refuses a scoped credential, for `what` (e.g. "create mailboxes").
    pub fn unscoped(&self, what: &str) -> Result<(), Status> {
        match &self.principal.scope {
            Some(scope) => Err(Status::permission_denied(format!(
                "credential {} is scoped to mailboxes ({scope}) and may not {what}",
                self.principal.id
            ))),
            None => Ok(()),
        }
    }

    /// Refuses sending to `to` unless the credential is unscoped or its
    /// scope grants it.
    pub fn may_send(&self, to: &tabos_kernel::ipc::Address) -> Result<(), Status> {
        self.scope_allows(|s| s.may_send(to), &format!("send to {to}"))
    }

    /// Refuses receiving from (or looking at) `from` unless the credential
    /// is unscoped or its scope grants it.
    pub fn may_recv(&self, from: &tabos_kernel::ipc::Address) -> Result<(), Status> {
        self.scope_allows(|s| s.may_recv(from), &format!("receive from {from}"))
    }

    fn scope_allows(
        &self,
        grants: impl Fn(&auth::Scope) -> bool,
        what: &str,
    ) -> Result<(), Status> {
        match &self.principal.scope {
            Some(scope) if !grants(scope) => self.unscoped(what),
            _ => Ok(()),
        }
    }

    /// Refuses a call that names a proc as its caller (Started, Exited, a
    /// proc's provenance) unless the credential is that proc's or is not
    /// a proc's.
    pub fn acting_pid(&self, pid: &str) -> Result<(), Status> {
        match &self.principal.pid {
            Some(own) if own.as_str() != pid => Err(Status::permission_denied(format!(
                "credential {} is proc {own}'s and cannot act for proc {pid}",
                self.principal.id
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload whose snapshot predates a credential created here keeps
    /// it (only that reload: the next one goes by the table alone).
    #[test]
    fn a_reload_keeps_what_was_created_here_meanwhile() {
        let dir = tabos_store::testing::TempDir::new("auth-reload");
        let store = tabos_kernel::open(&tabos_store::Config::sqlite(dir.path())).unwrap();
        let a = Auth::open(store).unwrap();
        // Remembered, as after a commit the reload's read did not see: it
        // is in the copy, not in the table.
        let minted = auth::mint().unwrap();
        let spec = auth::Spec::operator("test");
        a.remember(&minted, &spec);
        assert!(a.check(&minted.token).is_some());
        a.reload().unwrap();
        assert!(a.check(&minted.token).is_some(), "kept through the reload");
        a.reload().unwrap();
        assert!(a.check(&minted.token).is_none(), "the table decides after");
    }
}
