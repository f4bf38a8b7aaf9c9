//! Credentials: who a request acts for (issue 17).
//!
//! Table `credential` (migration 011), owned by this module: one row per
//! bearer token, holding only the SHA-256 of the token. A credential acts
//! for one realm with one [`Role`]; an operator's acts for every realm; a
//! proc's also names its pid. A realm's credentials live on the realm's
//! partition (so a realm and its first credential are created in one
//! transaction), operators' on partition 0.
//!
//! A token is `tabos_<id>_<secret>`: `id` is 64 random bits in hex, public
//! (what `tabos token list` shows and `revoke` takes), `secret` 256 random
//! bits in hex. Only [`mint`] makes tokens, outside any transaction (a
//! procedure stays deterministic: it is given the hash, never draws
//! randomness).
//!
//! Every change of a credential that is not a proc's notifies
//! [`CHANGES_CHANNEL`], so that nodes keep their in-memory view of those
//! ([`load`]) current without polling. A proc's own credential (one per
//! native spawn) is told to no node when it is made: a node that is shown
//! it looks it up ([`load_one`]) after subscribing to its own channel
//! ([`proc_channel`]), where its revocation is told — so a spawn's
//! notifications reach the nodes the proc talks to, not every node
//! (issue 35, item 4).
//!
//! A credential may be *scoped* (column `scope`, migration 024): then it
//! may do nothing but send to and receive from the mailboxes its
//! [`Scope`] names — no names, files, procs, SQL or procedures (σOS
//! section 5.3: wwd runs without access to the realm's namespace). Nodes
//! enforce it at the door of every service.
//!
//! Invariants: a token is never stored, logged or returned after [`mint`];
//! `id` and `token_hash` are each unique; a revoked or expired credential
//! authenticates nothing ([`Principal::is_live`]).

use std::fmt;

use sha2::{Digest, Sha256};
use tabos_store::{params, PKey, Store, Tx};

use crate::ids::Address;
use crate::ids::{Pid, RealmName};
use crate::{realm_partition, validate_realm, Error, Result};

/// Change-feed channel told of every created or revoked credential that
/// is not a proc's; the payload is the credential's id (one notification
/// per credential).
pub const CHANGES_CHANNEL: &str = "auth/credentials";

/// Change-feed channel told when proc credential `id` is revoked or
/// deleted (payload: the id): listened to only by the nodes that honour
/// it at that moment. Nothing else is said on it, and neither is undone:
/// a notification there means the credential is gone for good.
pub fn proc_channel(id: &CredentialId) -> String {
    format!("auth/credential/{id}")
}

/// Tells the nodes that follow credential `id` that it changed: every
/// node for a credential that is not a proc's, those that took it for a
/// proc's (`is_proc`).
fn notify_change(tx: &mut dyn Tx, id: &CredentialId, is_proc: bool) -> Result<()> {
    if is_proc {
        tx.notify(&proc_channel(id), id.as_str())?;
    } else {
        tx.notify(CHANGES_CHANNEL, id.as_str())?;
    }
    Ok(())
}
/// Prefix of every token.
pub const TOKEN_PREFIX: &str = "tabos_";
/// Random bytes of a token's public id.
pub const ID_BYTES: usize = 8;
/// Random bytes of a token's secret (256 bits).
pub const SECRET_BYTES: usize = 32;
/// Longest token accepted for checking, in bytes (a real one is 87).
pub const TOKEN_BYTES_MAX: usize = 128;
/// Most live credentials a realm may hold, procs' own not counted (those
/// are bounded by the realm's procs).
pub const CREDENTIALS_PER_REALM_MAX: i64 = 1_000;
/// Longest user name, in bytes.
pub const USER_BYTES_MAX: usize = 64;
/// Longest note on a credential, in bytes.
pub const NOTE_BYTES_MAX: usize = 256;

/// Most grants a [`Scope`] holds.
pub const SCOPE_GRANTS_MAX: usize = 16;

/// What a scoped credential may do, and all it may do: send to the
/// mailboxes of `send` and receive from (or look at) those of `recv`, in
/// its realm, and — an operator's — read the node's metrics (`metrics`).
/// Its text form is the grants separated by spaces, each
/// `send:<address>`, `recv:<address>` or `metrics` (e.g.
/// `send:www-a-requests recv:proc/www-a-wwd-1`, or `metrics` for a
/// Prometheus server's credential, which can do nothing else).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scope {
    pub send: std::collections::BTreeSet<Address>,
    pub recv: std::collections::BTreeSet<Address>,
    pub metrics: bool,
}

impl Scope {
    /// Parses the text form; at least one grant, at most
    /// [`SCOPE_GRANTS_MAX`].
    pub fn parse(text: &str) -> Result<Scope> {
        let mut scope = Scope::default();
        let mut grants = 0;
        for grant in text.split_whitespace() {
            grants += 1;
            if grants > SCOPE_GRANTS_MAX {
                return Err(Error::Invalid(format!(
                    "a scope holds at most {SCOPE_GRANTS_MAX} grants"
                )));
            }
            if grant == "metrics" {
                scope.metrics = true;
                continue;
            }
            let (set, addr) = match grant.split_once(':') {
                Some(("send", a)) => (&mut scope.send, a),
                Some(("recv", a)) => (&mut scope.recv, a),
                _ => {
                    return Err(Error::Invalid(format!(
                        "scope grant {grant:?} is not send:<mailbox>, recv:<mailbox> or metrics"
                    )))
                }
            };
            set.insert(Address::parse(addr)?);
        }
        if grants == 0 {
            return Err(Error::Invalid(
                "a scope grants at least one mailbox (send:<mailbox> or recv:<mailbox>) or \
                 metrics"
                    .into(),
            ));
        }
        Ok(scope)
    }

    /// What it is scoped to, for messages: "mailboxes", "metrics" or both.
    pub fn kind(&self) -> &'static str {
        match (self.send.is_empty() && self.recv.is_empty(), self.metrics) {
            (false, false) => "mailboxes",
            (true, _) => "metrics",
            (false, true) => "mailboxes and metrics",
        }
    }

    /// Whether it may read the node's metrics.
    pub fn may_read_metrics(&self) -> bool {
        self.metrics
    }

    /// Whether it may send to `to`.
    pub fn may_send(&self, to: &Address) -> bool {
        self.send.contains(to)
    }

    /// Whether it may receive from (or peek at) `from`.
    pub fn may_recv(&self, from: &Address) -> bool {
        self.recv.contains(from)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let grants = self
            .send
            .iter()
            .map(|a| format!("send:{a}"))
            .chain(self.recv.iter().map(|a| format!("recv:{a}")))
            .chain(self.metrics.then(|| "metrics".to_string()));
        f.write_str(&grants.collect::<Vec<_>>().join(" "))
    }
}

/// What a credential may do, weakest first: a role admits everything the
/// ones before it do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads its realm's state: gets, stats, waits, SQL.
    Reader,
    /// Also changes its realm's state: spawns, sends, writes.
    Member,
    /// Also manages its realm: credentials, procedures.
    Admin,
    /// Every realm, and the node: creates realms and operators.
    Operator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Member => "member",
            Role::Admin => "admin",
            Role::Operator => "operator",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = Error;
    fn from_str(s: &str) -> Result<Role> {
        match s {
            "reader" => Ok(Role::Reader),
            "member" => Ok(Role::Member),
            "admin" => Ok(Role::Admin),
            "operator" => Ok(Role::Operator),
            _ => Err(Error::Invalid(format!(
                "role must be reader, member, admin or operator, not {s:?}"
            ))),
        }
    }
}

/// A credential's public id (16 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialId(pub String);

impl CredentialId {
    /// Validates and wraps.
    pub fn new(s: impl Into<String>) -> Result<CredentialId> {
        let s = s.into();
        if s.len() == 2 * ID_BYTES && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(CredentialId(s.to_ascii_lowercase()))
        } else {
            Err(Error::Invalid(format!(
                "credential id {s:?} must be {} hex digits",
                2 * ID_BYTES
            )))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SHA-256 of a token: what the table keeps.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash(pub [u8; 32]);

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({}…)", &self.hex()[..8])
    }
}

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &str) -> TokenHash {
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
    fn from_hex(s: &str) -> Result<TokenHash> {
        let mut out = [0u8; 32];
        if s.len() != 64 {
            return Err(Error::Invalid("credential hash of the wrong length".into()));
        }
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
                .map_err(|_| Error::Invalid("credential hash is not hex".into()))?;
        }
        Ok(TokenHash(out))
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Splits a well-formed token into its id; `None` for anything else (so a
/// caller never hashes arbitrary input of any size).
pub fn token_id(token: &str) -> Option<CredentialId> {
    if token.len() > TOKEN_BYTES_MAX {
        return None;
    }
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    if secret.len() != 2 * SECRET_BYTES || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    CredentialId::new(id).ok()
}

/// A token just made: shown once to whoever asked for it.
#[derive(Clone)]
pub struct Minted {
    pub id: CredentialId,
    pub token: String,
    pub hash: TokenHash,
}

impl fmt::Debug for Minted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the token itself.
        f.debug_struct("Minted").field("id", &self.id).finish()
    }
}

/// Makes a new token from the operating system's random source.
pub fn mint() -> Result<Minted> {
    let mut raw = [0u8; ID_BYTES + SECRET_BYTES];
    getrandom::fill(&mut raw)
        .map_err(|e| Error::Invalid(format!("no random source for a credential: {e}")))?;
    let id = CredentialId(hex(&raw[..ID_BYTES]));
    let token = format!("{TOKEN_PREFIX}{id}_{}", hex(&raw[ID_BYTES..]));
    debug_assert_eq!(token_id(&token).as_ref(), Some(&id));
    let hash = TokenHash::of(&token);
    Ok(Minted { id, token, hash })
}

/// Who a credential acts for. Its fields are private: a principal is made
/// only here, from a credential row the store holds ([`load`],
/// [`load_one`], [`list`]) or one just committed ([`create_tx`]) — so no
/// code outside authentication can make one, or change one it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    id: CredentialId,
    /// The realm; empty for an operator (who acts for any realm).
    realm: String,
    /// The user within the realm: whose files it reads and writes.
    user: String,
    role: Role,
    /// A proc's credential: the proc it was made for.
    pid: Option<Pid>,
    expires_us: Option<i64>,
    /// `Some`: it may do only what the scope names.
    scope: Option<Scope>,
}

impl Principal {
    /// Whether the credential is still good at `now_us` (revoked ones are
    /// never loaded).
    pub fn is_live(&self, now_us: i64) -> bool {
        self.expires_us.is_none_or(|e| now_us < e)
    }

    pub fn is_operator(&self) -> bool {
        self.role == Role::Operator
    }

    pub fn id(&self) -> &CredentialId {
        &self.id
    }

    /// The realm; empty for an operator.
    pub fn realm(&self) -> &str {
        &self.realm
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// A proc's credential: the proc it was made for.
    pub fn pid(&self) -> Option<&Pid> {
        self.pid.as_ref()
    }

    pub fn expires_us(&self) -> Option<i64> {
        self.expires_us
    }

    pub fn scope(&self) -> Option<&Scope> {
        self.scope.as_ref()
    }

    /// The one way to a [`Caller`]: this principal acting in `realm` as
    /// `user` (each empty for the credential's own). An operator's acts in
    /// any realm (`default_realm`, the node's, when none is named) as any
    /// user (`root` by default); any other acts only in its realm, as its
    /// user.
    pub fn act(&self, realm: &str, user: &str, default_realm: &str) -> Result<Caller> {
        let denied = |what: &str, own: &str, asked: &str| {
            Err(Error::Denied(format!(
                "credential {} {what} {own}, not {asked}",
                self.id
            )))
        };
        let (realm, user) = if self.is_operator() {
            let realm = if realm.is_empty() {
                default_realm
            } else {
                realm
            };
            let user = if user.is_empty() {
                self.user.as_str()
            } else {
                user
            };
            (realm, user)
        } else {
            if !(realm.is_empty() || realm == self.realm) {
                return denied("acts for realm", &self.realm, realm);
            }
            if !(user.is_empty() || user == self.user) {
                return denied("acts as user", &self.user, user);
            }
            (self.realm.as_str(), self.user.as_str())
        };
        let realm = RealmName::new(realm)?;
        validate_user(user)?;
        Ok(Caller {
            realm,
            user: user.to_string(),
            role: self.role,
            pid: self.pid.clone(),
            scope: self.scope.clone(),
            origin: Origin::Credential(self.id.clone()),
        })
    }

    /// The principal of a credential just committed.
    fn created(spec: &Spec, minted: &Minted) -> Principal {
        Principal {
            id: minted.id.clone(),
            realm: spec.realm.clone(),
            user: spec.user.clone(),
            role: spec.role,
            pid: spec.pid.clone(),
            expires_us: spec.expires_us,
            scope: spec.scope.clone(),
        }
    }
}

/// A credential to create: everything but the token.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The realm; empty only for an operator.
    pub realm: String,
    pub user: String,
    pub role: Role,
    pub pid: Option<Pid>,
    pub expires_us: Option<i64>,
    pub note: String,
    /// `Some`: the credential may do only what the scope names.
    pub scope: Option<Scope>,
}

impl Spec {
    /// The operator credential of a node.
    pub fn operator(note: impl Into<String>) -> Spec {
        Spec {
            realm: String::new(),
            user: "root".into(),
            role: Role::Operator,
            pid: None,
            expires_us: None,
            note: note.into(),
            scope: None,
        }
    }

    /// A realm's credential for `user` with `role`.
    pub fn realm(realm: &str, user: &str, role: Role) -> Spec {
        Spec {
            realm: realm.into(),
            user: user.into(),
            role,
            pid: None,
            expires_us: None,
            note: String::new(),
            scope: None,
        }
    }

    /// Checks the spec's fields.
    pub fn validate(&self) -> Result<()> {
        // Metrics show every realm: only an operator's credential reads
        // them, and one scoped so reads them alone (mailboxes belong to a
        // realm, which an operator's credential does not name).
        let metrics_only = self
            .scope
            .as_ref()
            .map(|s| s.metrics && s.send.is_empty() && s.recv.is_empty());
        if self.role == Role::Operator {
            if !self.realm.is_empty() || self.pid.is_some() || metrics_only == Some(false) {
                return Err(Error::Invalid(
                    "an operator credential names no realm, no proc and no scope but metrics"
                        .into(),
                ));
            }
        } else {
            validate_realm(&self.realm)?;
            if self.scope.as_ref().is_some_and(|s| s.metrics) {
                return Err(Error::Invalid(
                    "the metrics scope is an operator credential's (--role operator)".into(),
                ));
            }
        }
        validate_user(&self.user)?;
        if self.note.len() > NOTE_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "a credential's note is at most {NOTE_BYTES_MAX} bytes"
            )));
        }
        Ok(())
    }

    /// The partition the credential's row lives on.
    pub fn partition(&self, partitions: u32) -> PKey {
        partition_of(&self.realm, partitions)
    }
}

fn partition_of(realm: &str, partitions: u32) -> PKey {
    if realm.is_empty() {
        PKey(0)
    } else {
        realm_partition(realm, partitions)
    }
}

/// Whom a provenance event names ([`Caller::actor`]); what its events
/// take is `procs`'s (it owns `proc_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A proc: every event of its is recorded.
    Proc(Pid),
    /// A client acting for no proc (`@USER/CREDENTIAL`): its file reads
    /// and writes, sends and receipts are recorded when its realm's
    /// provenance is `all`.
    Client(String),
}

/// The user who may do anything in a realm's files and names.
pub const ROOT: &str = "root";

/// Who an operation acts for: a realm, the user in it, the credential's
/// role, its proc and its scope. Made only by authentication
/// ([`Principal::act`]; the fields are private), it is the first argument
/// of every kernel operation that acts for someone, and each operation
/// asks it what it needs ([`Caller::require`], [`Caller::unscoped`],
/// [`Caller::may_send`] …) — no door checks access on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    realm: RealmName,
    user: String,
    role: Role,
    pid: Option<Pid>,
    scope: Option<Scope>,
    /// What it acts by.
    origin: Origin,
}

/// What a [`Caller`] acts by.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// A credential its request carried.
    Credential(CredentialId),
    /// A proc procd runs itself (wasm), started by the claim that made
    /// this caller: it acts for its spawner's user without a credential.
    Proc(Pid),
    /// A task of a graph (`graphs`), run by the node's scheduler for the
    /// user who submitted the graph, without a credential.
    Task(String),
}

impl Caller {
    pub fn realm(&self) -> &RealmName {
        &self.realm
    }

    /// The user whose files and names it uses.
    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The proc the credential was made for.
    pub fn pid(&self) -> Option<&Pid> {
        self.pid.as_ref()
    }

    pub fn scope(&self) -> Option<&Scope> {
        self.scope.as_ref()
    }

    pub fn is_root(&self) -> bool {
        self.user == ROOT
    }

    pub fn is_operator(&self) -> bool {
        self.role == Role::Operator
    }

    /// The same caller in `realm`: only an operator's moves (an
    /// operator acts for every realm).
    pub fn in_realm(&self, realm: &str) -> Result<Caller> {
        if self.realm == realm {
            return Ok(self.clone());
        }
        self.require(Role::Operator)?;
        Ok(Caller {
            realm: RealmName::new(realm)?,
            ..self.clone()
        })
    }

    /// The credential it came from (`None`: a proc run inside procd).
    pub fn credential(&self) -> Option<&CredentialId> {
        match &self.origin {
            Origin::Credential(id) => Some(id),
            Origin::Proc(_) | Origin::Task(_) => None,
        }
    }

    /// A proc procd runs itself, as the claim that starts it makes it
    /// (`procs::ProcInfo::caller`): its realm, its spawner's `user`, role
    /// member (a native proc's credential's), its scope.
    pub fn of_started_proc(
        realm: &str,
        pid: &Pid,
        user: &str,
        scope: Option<Scope>,
    ) -> Result<Caller> {
        validate_user(user)?;
        Ok(Caller {
            realm: RealmName::new(realm)?,
            user: user.to_string(),
            role: Role::Member,
            pid: Some(pid.clone()),
            scope,
            origin: Origin::Proc(pid.clone()),
        })
    }

    /// A graph's task as the scheduler runs it (`graphs`): in `realm`,
    /// for `user` (the graph's submitter), role member, unscoped, acting
    /// for `pid` — the proc that submitted the graph, whose provenance its
    /// tasks' reads, writes and messages are — or for no proc. `task`
    /// (`<graph>/<task>`) names it in refusals.
    pub fn of_graph_task(realm: &str, user: &str, task: &str, pid: Option<Pid>) -> Result<Caller> {
        validate_user(user)?;
        Ok(Caller {
            realm: RealmName::new(realm)?,
            user: user.to_string(),
            role: Role::Member,
            pid,
            scope: None,
            origin: Origin::Task(task.to_string()),
        })
    }

    /// Whom a provenance event of an operation done for `pid` (one this
    /// caller may act for), or for no proc, names: the proc; else this
    /// client — `@USER/CREDENTIAL`, or `@USER/task:GRAPH/TASK` for a
    /// graph's task acting for no proc (`@` is never in a pid).
    pub fn actor(&self, pid: Option<Pid>) -> Actor {
        match pid {
            Some(pid) => Actor::Proc(pid),
            None => Actor::Client(match &self.origin {
                Origin::Credential(id) => format!("@{}/{id}", self.user),
                Origin::Task(task) => format!("@{}/task:{task}", self.user),
                // A proc procd runs always acts for itself.
                Origin::Proc(pid) => return Actor::Proc(pid.clone()),
            }),
        }
    }

    /// [`Caller::actor`] of what it does for its own proc, if any: whom
    /// the events of a call that names no other proc name.
    pub fn own_actor(&self) -> Actor {
        self.actor(self.pid.clone())
    }

    fn who(&self) -> String {
        match &self.origin {
            Origin::Credential(id) => format!("credential {id}"),
            Origin::Proc(pid) => format!("proc {pid}"),
            Origin::Task(task) => format!("task {task}"),
        }
    }

    /// Refuses unless the credential has at least `need`.
    pub fn require(&self, need: Role) -> Result<()> {
        if self.role >= need {
            Ok(())
        } else {
            Err(Error::Denied(format!(
                "{} has role {}; this needs {need}",
                self.who(),
                self.role
            )))
        }
    }

    /// Refuses a scoped credential, for `what` (e.g. "create mailboxes").
    pub fn unscoped(&self, what: &str) -> Result<()> {
        match &self.scope {
            Some(scope) => Err(Error::Denied(format!(
                "{} is scoped to {} ({scope}) and may not {what}",
                self.who(),
                scope.kind()
            ))),
            None => Ok(()),
        }
    }

    /// [`Caller::require`] `need`, and [`Caller::unscoped`]: what every
    /// operation outside the mailboxes asks first.
    pub fn may(&self, need: Role, what: &str) -> Result<()> {
        self.require(need)?;
        self.unscoped(what)
    }

    /// Refuses sending to `to` unless the credential is unscoped or its
    /// scope grants it.
    pub fn may_send(&self, to: &Address) -> Result<()> {
        self.scope_allows(|s| s.may_send(to), &format!("send to {to}"))
    }

    /// Refuses receiving from (or looking at) `from` unless the credential
    /// is unscoped or its scope grants it.
    pub fn may_recv(&self, from: &Address) -> Result<()> {
        self.scope_allows(|s| s.may_recv(from), &format!("receive from {from}"))
    }

    /// What this caller's SQL reads — every door's SQL (the Sql service,
    /// the PostgreSQL front door, the dashboard) asks this, and only this:
    /// every realm's rows for an operator asking for all (`every_realm`),
    /// else its realm's. Only an admin may query at all (SQL reads files'
    /// blocks and names' values past their owners' modes, which only an
    /// admin may bypass), and no scoped credential.
    pub fn sql_scope(&self, every_realm: bool) -> Result<tabos_store::ReadScope> {
        // The scope first: it is the reason a scoped admin is refused.
        self.unscoped("use SQL")?;
        self.require(Role::Admin)?;
        Ok(if every_realm && self.is_operator() {
            tabos_store::ReadScope::All
        } else {
            tabos_store::ReadScope::Realm(self.realm.0.clone())
        })
    }

    /// Refuses acting for proc `pid` (sending as it, saying it started or
    /// exited) unless the credential is that proc's or is not a proc's.
    pub fn may_act_for(&self, pid: &Pid) -> Result<()> {
        match &self.pid {
            Some(own) if own != pid => Err(Error::Denied(format!(
                "{} is proc {own}'s and cannot act for proc {pid}",
                self.who()
            ))),
            _ => Ok(()),
        }
    }

    /// What a send from `from` to `to` needs: role member, acting for the
    /// proc it sends as, and a scope that grants each mailbox.
    pub fn may_send_all<'a>(
        &self,
        from: Option<&Address>,
        to: impl IntoIterator<Item = &'a Address>,
    ) -> Result<()> {
        self.require(Role::Member)?;
        if let Some(Address::Proc(pid)) = from {
            self.may_act_for(pid)?;
        }
        to.into_iter().try_for_each(|a| self.may_send(a))
    }

    fn scope_allows(&self, ok: impl Fn(&Scope) -> bool, what: &str) -> Result<()> {
        match &self.scope {
            // The same words as `unscoped`.
            Some(scope) if !ok(scope) => Err(Error::Denied(format!(
                "{} is scoped to {} ({scope}) and may not {what}",
                self.who(),
                scope.kind()
            ))),
            _ => Ok(()),
        }
    }
}

/// Checks a user name: 1..=USER_BYTES_MAX bytes of `[A-Za-z0-9_.-]`.
pub fn validate_user(user: &str) -> Result<()> {
    let ok = !user.is_empty()
        && user.len() <= USER_BYTES_MAX
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "user name {user:?} must be 1..={USER_BYTES_MAX} characters of A-Z a-z 0-9 _ . -"
        )))
    }
}

/// Procedure body: records a credential (its hash) made by [`mint`]. A
/// realm credential needs its realm; a realm holds at most
/// [`CREDENTIALS_PER_REALM_MAX`] live ones besides its procs'.
pub fn create_tx(tx: &mut dyn Tx, spec: &Spec, minted: &Minted, now_us: i64) -> Result<Principal> {
    spec.validate()?;
    let p = crate::p_key(tx);
    debug_assert!(!spec.realm.is_empty() || tx.p_key() == PKey(0));
    if spec.role != Role::Operator {
        crate::realms::scheduler_tx(tx, &spec.realm)?; // NotFound for an unknown realm
        if spec.pid.is_none() {
            let live: i64 = tx.query_scalar(LIVE_COUNT, params![p, spec.realm.as_str(), now_us])?;
            if live >= CREDENTIALS_PER_REALM_MAX {
                return Err(Error::Full(format!(
                    "realm {} is over its credential quota: {live} live of {CREDENTIALS_PER_REALM_MAX}",
                    spec.realm
                )));
            }
        }
    }
    tx.execute(
        "INSERT INTO credential (p_key, id, token_hash, realm, user_name, role, pid, created_us, \
                                 expires_us, note, scope) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        params![
            p,
            minted.id.as_str(),
            minted.hash.hex(),
            spec.realm.as_str(),
            spec.user.as_str(),
            spec.role.as_str(),
            spec.pid.as_ref().map(Pid::as_str),
            now_us,
            spec.expires_us,
            spec.note.as_str(),
            spec.scope.as_ref().map(Scope::to_string)
        ],
    )
    .map_err(|e| {
        if e.is_unique_violation() {
            Error::AlreadyExists(format!("credential {}", minted.id))
        } else {
            Error::Store(e)
        }
    })?;
    // A proc's is looked up by the nodes shown it; no node holds it yet.
    if spec.pid.is_none() {
        notify_change(tx, &minted.id, false)?;
    }
    Ok(Principal::created(spec, minted))
}

/// Creates a credential: mints its token and records it. The token is in
/// the result and nowhere else; the principal is the one the row makes.
pub async fn create(store: &Store, spec: Spec) -> Result<(Minted, Principal)> {
    create_minted(store, spec, mint()?).await
}

/// [`create`] of a credential minted already ([`mint`]): its id is known
/// before it is committed (a node subscribes to its channel first).
pub async fn create_minted(
    store: &Store,
    spec: Spec,
    minted: Minted,
) -> Result<(Minted, Principal)> {
    spec.validate()?;
    let now = tabos_store::now_us();
    let (s, m) = (spec.clone(), minted.clone());
    let principal = store
        .run(spec.partition(store.partitions()), move |tx| {
            create_tx(tx, &s, &m, now)
        })
        .await?;
    Ok((minted, principal))
}

/// Refuses unless `who` may grant `spec`: a credential is never more than
/// its creator — an admin's (or operator's) call, a role up to the
/// caller's own, in the caller's realm; an operator credential (which names
/// no realm) only by an operator.
pub fn may_grant(who: &Caller, spec: &Spec) -> Result<()> {
    who.may(Role::Admin, "make credentials")?;
    who.require(spec.role)?;
    let in_reach = match spec.role {
        Role::Operator => spec.realm.is_empty(),
        _ => *who.realm() == *spec.realm,
    };
    if !in_reach {
        return Err(Error::Denied(format!(
            "{} acts for realm {}, not {:?}",
            who.who(),
            who.realm(),
            spec.realm
        )));
    }
    Ok(())
}

/// [`create`] for `who`, once it may grant `spec` ([`may_grant`]).
pub async fn create_for(store: &Store, who: &Caller, spec: Spec) -> Result<(Minted, Principal)> {
    may_grant(who, &spec)?;
    create(store, spec).await
}

/// Revokes credential `id` for `who`: an admin revokes its realm's, an
/// operator any (another realm's is NotFound to an admin).
pub async fn revoke_for(store: &Store, who: &Caller, id: &CredentialId) -> Result<()> {
    who.may(Role::Admin, "revoke credentials")?;
    let realm = (!who.is_operator()).then(|| who.realm().as_str());
    revoke(store, id, realm).await
}

/// The credentials `who` may see ([`list`]): an admin's realm's; an
/// operator's, every realm's when `every_realm`. Off the async runtime's
/// threads.
pub async fn list_for(
    store: &Store,
    who: &Caller,
    every_realm: bool,
    with_procs: bool,
) -> Result<Vec<Info>> {
    who.may(Role::Admin, "list credentials")?;
    let realm = (!(every_realm && who.is_operator())).then(|| who.realm().to_string());
    let store = store.clone();
    tokio::task::spawn_blocking(move || list(&store, realm.as_deref(), with_procs))
        .await
        .map_err(|e| Error::Invalid(format!("credential listing task failed: {e}")))?
}

/// Procedure body: revokes credential `id` if `realm` is its realm (any
/// realm when `None`). Revoking twice is not an error; an unknown id (or
/// another realm's) is NotFound.
pub fn revoke_tx(
    tx: &mut dyn Tx,
    id: &CredentialId,
    realm: Option<&str>,
    now_us: i64,
) -> Result<()> {
    let p = crate::p_key(tx);
    let rows = tx.query(
        "UPDATE credential SET revoked_us = coalesce(revoked_us, $3) \
         WHERE p_key = $1 AND id = $2 AND (CAST($4 AS TEXT) IS NULL OR realm = $4) \
         RETURNING pid",
        params![p, id.as_str(), now_us, realm],
    )?;
    let Some(row) = rows.rows.first() else {
        return Err(Error::NotFound(format!("credential {id}")));
    };
    let is_proc = row.get::<Option<String>>(0)?.is_some();
    notify_change(tx, id, is_proc)
}

/// Revokes credential `id`, which must belong to `realm` (any realm when
/// `None`, as for an operator). The credential's partition is found on
/// the read path first.
pub async fn revoke(store: &Store, id: &CredentialId, realm: Option<&str>) -> Result<()> {
    // A read on the read path, off the async runtime's threads.
    let (s, i) = (store.clone(), id.clone());
    let owner = tokio::task::spawn_blocking(move || s.query(OWNER, params![i.as_str()]))
        .await
        .map_err(|e| Error::Invalid(format!("credential look-up failed: {e}")))??;
    let Some(owner) = owner.rows.first() else {
        return Err(Error::NotFound(format!("credential {id}")));
    };
    let owner: String = owner.get(0)?;
    if realm.is_some_and(|r| r != owner) {
        return Err(Error::NotFound(format!("credential {id}")));
    }
    let (id2, realm2, now) = (id.clone(), realm.map(str::to_string), tabos_store::now_us());
    store
        .run(partition_of(&owner, store.partitions()), move |tx| {
            revoke_tx(tx, &id2, realm2.as_deref(), now)
        })
        .await
}

/// Procedure body: revokes every live credential of proc `pid` in `realm`
/// (when the proc has ended). Returns their ids.
pub fn revoke_pid_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    now_us: i64,
) -> Result<Vec<CredentialId>> {
    let p = crate::p_key(tx);
    let rows = tx.query(REVOKE_PID, params![p, realm, pid.as_str(), now_us])?;
    let mut ids = Vec::with_capacity(rows.len());
    for r in rows.iter() {
        let id = CredentialId::new(r.get::<String>(0)?)?;
        notify_change(tx, &id, true)?;
        ids.push(id);
    }
    Ok(ids)
}

/// Procedure body: deletes proc `pid`'s revoked credentials, when its row
/// is pruned ([`crate::procs::prune_tx`]): a native proc's credential is
/// revoked as it ends, and its row would otherwise stay for ever, one per
/// proc ever run. Nodes dropped them at the revocation, so no notice is
/// sent; one still live (which an ended proc should not have) is kept.
pub fn delete_revoked_of_pid_tx(tx: &mut dyn Tx, realm: &str, pid: &Pid) -> Result<u64> {
    let p = crate::p_key(tx);
    Ok(tx.execute(DELETE_REVOKED_OF_PID, params![p, realm, pid.as_str()])?)
}

/// Revokes proc `pid`'s credentials; returns their ids.
pub async fn revoke_pid(store: &Store, realm: &str, pid: &Pid) -> Result<Vec<CredentialId>> {
    let (r, p, now) = (realm.to_string(), pid.clone(), tabos_store::now_us());
    crate::call(store, realm, move |tx| revoke_pid_tx(tx, &r, &p, now)).await
}

/// A credential as `tabos token list` shows it (never its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub principal: Principal,
    pub created_us: i64,
    pub revoked_us: Option<i64>,
    pub note: String,
}

const COLUMNS: &str =
    "id, realm, user_name, role, pid, expires_us, created_us, revoked_us, note, token_hash, scope";

fn info_of(row: &tabos_store::Row) -> Result<(Info, TokenHash)> {
    let pid: Option<String> = row.get(4)?;
    let principal = Principal {
        id: CredentialId::new(row.get::<String>(0)?)?,
        realm: row.get(1)?,
        user: row.get(2)?,
        role: row.get::<String>(3)?.parse()?,
        pid: pid.map(Pid::new).transpose()?,
        expires_us: row.get(5)?,
        scope: row
            .get::<Option<String>>(10)?
            .map(|s| Scope::parse(&s))
            .transpose()?,
    };
    let info = Info {
        principal,
        created_us: row.get(6)?,
        revoked_us: row.get(7)?,
        note: row.get(8)?,
    };
    Ok((info, TokenHash::from_hex(&row.get::<String>(9)?)?))
}

/// The credentials of `realm` (every realm's when `None`), procs' included
/// only when `with_procs`, oldest first, on the read path.
pub fn list(store: &Store, realm: Option<&str>, with_procs: bool) -> Result<Vec<Info>> {
    let rows = store.query(
        &format!(
            "SELECT {COLUMNS} FROM credential WHERE (CAST($1 AS TEXT) IS NULL OR realm = $1) \
             AND ($2 = 1 OR pid IS NULL) ORDER BY created_us, id"
        ),
        params![realm, i64::from(with_procs)],
    )?;
    rows.rows
        .iter()
        .map(|r| info_of(r).map(|(i, _)| i))
        .collect()
}

// The statements run once per proc (its start and end) or per change a
// node is told of: each must find its rows through an index, never by
// scanning every credential (one per native proc ever run) — checked by
// `every_hot_statement_uses_an_index` below.
const LIVE_COUNT: &str = "SELECT count(*) FROM credential WHERE p_key = $1 AND realm = $2 \
     AND pid IS NULL AND revoked_us IS NULL AND (expires_us IS NULL OR expires_us > $3)";
const OWNER: &str = "SELECT realm FROM credential WHERE id = $1";
// The rows are chosen in a subquery: an UPDATE or DELETE that would find
// them through an index whose columns it changes does not search it.
const REVOKE_PID: &str = "UPDATE credential SET revoked_us = $4 WHERE p_key = $1 AND id IN \
     (SELECT id FROM credential \
      WHERE p_key = $1 AND realm = $2 AND pid = $3 AND revoked_us IS NULL) RETURNING id";
const DELETE_REVOKED_OF_PID: &str = "DELETE FROM credential WHERE p_key = $1 AND id IN \
     (SELECT id FROM credential \
      WHERE p_key = $1 AND realm = $2 AND pid = $3 AND revoked_us IS NOT NULL)";

fn load_one_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM credential WHERE id = $1 AND revoked_us IS NULL \
         AND (expires_us IS NULL OR expires_us > $2)"
    )
}

/// Credential `id` with its hash if it is neither revoked nor expired at
/// `now_us` (`None`: unknown, revoked or expired), on the read path: how a
/// node applies one change notification.
pub fn load_one(
    store: &Store,
    id: &CredentialId,
    now_us: i64,
) -> Result<Option<(TokenHash, Principal)>> {
    let rows = store.query(&load_one_sql(), params![id.as_str(), now_us])?;
    rows.rows
        .first()
        .map(|r| info_of(r).map(|(i, h)| (h, i.principal)))
        .transpose()
}

/// Every credential that is neither revoked nor expired at `now_us` and
/// is not a proc's, by hash: what a node checks tokens against first
/// (procs' are looked up when shown, [`load_one`]).
pub fn load(store: &Store, now_us: i64) -> Result<Vec<(TokenHash, Principal)>> {
    let rows = store.query(
        &format!(
            "SELECT {COLUMNS} FROM credential WHERE revoked_us IS NULL \
             AND (expires_us IS NULL OR expires_us > $1) AND pid IS NULL"
        ),
        params![now_us],
    )?;
    rows.rows
        .iter()
        .map(|r| info_of(r).map(|(i, h)| (h, i.principal)))
        .collect()
}

/// Procedure body: deletes `realm`'s credentials, its procs' too (the
/// realm's removal, [`crate::teardown`]); every node forgets them on the
/// change feed. Returns the rows deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    let p = crate::p_key(tx);
    let rows = tx.query(
        "DELETE FROM credential WHERE p_key = $1 AND realm = $2 RETURNING id, pid",
        params![p, realm],
    )?;
    for r in rows.iter() {
        let id = CredentialId::new(r.get::<String>(0)?)?;
        notify_change(tx, &id, r.get::<Option<String>>(1)?.is_some())?;
    }
    Ok(rows.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On SQLite (without statistics, as a node runs it), each statement
    /// run per proc or per credential change searches: none scans the
    /// table, nor walks the whole partition by its primary key's `p_key`
    /// alone.
    #[test]
    fn every_hot_statement_uses_an_index() {
        let dir = tabos_store::testing::TempDir::new("auth-plans");
        let store = crate::open(&tabos_store::Config::sqlite(dir.path())).unwrap();
        let load_one = load_one_sql();
        for sql in [
            LIVE_COUNT,
            OWNER,
            REVOKE_PID,
            DELETE_REVOKED_OF_PID,
            load_one.as_str(),
        ] {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            // As many parameters as the statement takes (the plan does not
            // depend on their values).
            let n = (1..=9).filter(|k| sql.contains(&format!("${k}"))).count();
            let params = vec![tabos_store::Value::Int(0); n];
            let plan = store
                .call(PKey(0), move |tx| {
                    Ok::<_, Error>(tx.query_text(&explain, &params)?)
                })
                .unwrap();
            let steps: Vec<String> = plan.iter().map(|r| r.get::<String>(3).unwrap()).collect();
            assert!(
                steps.iter().any(|s| s.starts_with("SEARCH")),
                "{sql}: {steps:?}"
            );
            for step in &steps {
                let whole_partition = step.ends_with("USING PRIMARY KEY (p_key=?)");
                assert!(
                    !step.starts_with("SCAN") && !whole_partition,
                    "{sql}: {steps:?}"
                );
            }
        }
    }

    #[test]
    fn tokens_are_well_formed_and_distinct() {
        let a = mint().unwrap();
        let b = mint().unwrap();
        assert_ne!(a.token, b.token);
        assert_eq!(token_id(&a.token), Some(a.id.clone()));
        assert_eq!(TokenHash::of(&a.token), a.hash);
        assert_eq!(TokenHash::from_hex(&a.hash.hex()).unwrap(), a.hash);
        assert!(!format!("{a:?}").contains(&a.token));
        for bad in [
            "",
            "tabos_",
            "tabos_0123456789abcdef_short",
            "bearer 123",
            &format!("{}x", a.token),
            &"x".repeat(TOKEN_BYTES_MAX + 1),
        ] {
            assert_eq!(token_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn roles_are_ordered_and_parsed() {
        assert!(Role::Reader < Role::Member && Role::Member < Role::Admin);
        assert!(Role::Admin < Role::Operator);
        for r in [Role::Reader, Role::Member, Role::Admin, Role::Operator] {
            assert_eq!(r.as_str().parse::<Role>().unwrap(), r);
        }
        assert!("root".parse::<Role>().is_err());
    }

    #[test]
    fn specs_are_checked() {
        assert!(Spec::operator("x").validate().is_ok());
        assert!(Spec::realm("a", "alice", Role::Member).validate().is_ok());
        assert!(Spec::realm("", "alice", Role::Member).validate().is_err());
        assert!(Spec::realm("a", "../x", Role::Member).validate().is_err());
        let mut op = Spec::operator("x");
        op.realm = "a".into();
        assert!(op.validate().is_err());
    }

    #[test]
    fn scopes_are_parsed_checked_and_printed() {
        let s = Scope::parse("send:www-a-requests  recv:proc/wwd-1 send:load").unwrap();
        assert!(s.may_send(&Address::parse("www-a-requests").unwrap()));
        assert!(!s.may_send(&Address::parse("proc/wwd-1").unwrap()));
        assert!(s.may_recv(&Address::parse("proc/wwd-1").unwrap()));
        assert!(!s.may_recv(&Address::parse("www-a-requests").unwrap()));
        assert_eq!(
            s.to_string(),
            "send:load send:www-a-requests recv:proc/wwd-1"
        );
        assert_eq!(Scope::parse(&s.to_string()).unwrap(), s);
        for bad in [
            "",
            "  ",
            "names:/x",
            "send:",
            "send:a/b",
            "recv:proc/",
            "sendx",
        ] {
            assert!(Scope::parse(bad).is_err(), "{bad:?} refused");
        }
        let many: Vec<String> = (0..=SCOPE_GRANTS_MAX)
            .map(|i| format!("send:m{i}"))
            .collect();
        assert!(Scope::parse(&many.join(" ")).is_err());
        let op = Spec {
            scope: Some(s),
            ..Spec::operator("x")
        };
        assert!(op.validate().is_err(), "an operator is never scoped");
    }
}
