//! The dashboard (issue 21, item 3): the node serves a web page that shows
//! the cluster's OS state as it changes — nodes and realms with their
//! utilisation over time, procs with filters and a spawn → start → exit
//! timeline, MapReduce jobs' progress, mailboxes, the namespace, files, and
//! a SQL console.
//!
//! * **Serving.** `tabos up --http-listen` (default [`LISTEN_DEFAULT`],
//!   loopback only: there is no TLS) serves HTTP/1.1 with axum. The page,
//!   its script and its style are compiled into the binary
//!   (`dashboard/assets`): no build step, nothing fetched from anywhere.
//!   The same listener serves `GET /metrics` to Prometheus with an
//!   operator's `Bearer` credential ([`crate::metrics`]).
//! * **Sign-in.** The page asks for a credential, which `POST
//!   /api/session` checks as every RPC does ([`crate::auth::Auth::check`]).
//!   A session is a random id in an `HttpOnly`, `SameSite=Strict` cookie;
//!   the credential stays in the node's memory, and is checked again on
//!   every request (a revoked or expired one ends the session). The rules
//!   are SQL's, since every page is SQL over the OS state: an operator
//!   sees every realm, a realm's admin its own, a member, a reader or a
//!   scoped credential is refused. A request that changes something
//!   (sign-in, sign-out, queries) must come from the page's own origin.
//! * **Reading.** `POST /api/sql` runs a statement through
//!   [`crate::sql::run`] — the same realm scoping, deadline and limits as
//!   `tabos sql` and the PostgreSQL front door. `POST /api/fs/ls` and
//!   `/api/fs/read` read files as the credential's user, so files' modes
//!   apply. `POST /api/logs` is a proc's stdout or stderr (its last
//!   [`LOG_VIEW_LINES`] lines, at most [`LOG_VIEW_BYTES_MAX`]) from the
//!   cluster's log, as `tabos logs` reads it. `GET /api/history` is the utilisation history ([`history`]).
//! * **Live.** `GET /api/events?realm=R&ch=…` is a server-sent-event stream
//!   of the change-feed channels the page names (the names `LISTEN` takes:
//!   `procs`, `proc/<pid>`, `logs/<pid>`, `mailbox/<name>`, `names/<dir>`,
//!   `spawns`) and
//!   of each new utilisation sample. The page re-reads what an event
//!   concerns; nothing polls. A stream whose follower fell behind the feed
//!   ends, and the browser's `EventSource` reconnects and re-reads.
//!
//! Everything is bounded: [`CONNECTIONS_MAX`], [`SESSIONS_MAX`],
//! [`EVENT_STREAMS_MAX`], [`BODY_BYTES_MAX`], [`SQL_ROWS_MAX`],
//! [`FILE_VIEW_BYTES_MAX`], [`LOG_VIEW_BYTES_MAX`].

pub mod history;

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{DefaultBodyLimit, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::IncomingStream;
use axum::Extension;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value as Json};
use tabos_kernel::auth::{CredentialId, Principal};
use tabos_kernel::fs::Caller;
use tabos_store::{ReadScope, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::Node;

/// Where `tabos up` serves the dashboard unless told otherwise.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7071";
/// Most connections served at once (past it, an idle connection of the
/// realm holding the most is closed, or the next waits for a free one).
pub const CONNECTIONS_MAX: usize = 256;
/// Most connections not yet signed in (no request with a live session)
/// from one address (a browser opens about six).
pub const UNAUTHENTICATED_PER_SOURCE_MAX: usize = 16;
/// The dashboard's connection limits, as [`crate::doors`] applies them: a
/// quarter of the connections for those not signed in, a quarter per
/// realm.
pub const DOOR: crate::doors::DoorLimits =
    crate::doors::DoorLimits::quarters(CONNECTIONS_MAX, UNAUTHENTICATED_PER_SOURCE_MAX);
/// Most connections not yet signed in, from all addresses together.
pub const UNAUTHENTICATED_MAX: usize = DOOR.unauthenticated;
/// Most signed-in connections of one realm (operators are counted, not capped).
pub const CONNECTIONS_PER_REALM_MAX: usize = DOOR.per_realm;
/// Most signed-in sessions kept (past it, the least recently used of the
/// realm holding the most goes).
pub const SESSIONS_MAX: usize = 1_024;
/// Most sessions of one realm (operators' count as one): past it, that
/// realm's least recently used goes, never another realm's.
pub const SESSIONS_PER_REALM_MAX: usize = SESSIONS_MAX / 4;
/// A session unused this long is signed out.
pub const SESSION_IDLE_MAX: Duration = Duration::from_secs(12 * 3_600);
/// Most event streams open at once, over every session.
pub const EVENT_STREAMS_MAX: usize = 128;
/// Most event streams of one realm's sessions at once (operators' count
/// as one).
pub const EVENT_STREAMS_PER_REALM_MAX: usize = EVENT_STREAMS_MAX / 4;
/// Most change-feed channels one event stream follows.
pub const CHANNELS_PER_STREAM_MAX: usize = 16;
/// Events waiting to be written to one stream (its followers wait past
/// it, and the feed cuts them off if they wait too long).
pub const EVENT_QUEUE_MAX: usize = 256;
/// Largest request body (a statement of `tabos sql`'s largest, and room
/// for the JSON around it).
pub const BODY_BYTES_MAX: usize = crate::sql::SQL_BYTES_MAX + 16 * 1024;
/// Most rows one `/api/sql` answer carries (then cut, and it says so).
pub const SQL_ROWS_MAX: usize = 10_000;
/// Most bytes of a file `/api/fs/read` shows.
pub const FILE_VIEW_BYTES_MAX: usize = 256 * 1024;
/// Lines of a proc's output `/api/logs` shows, its last.
pub const LOG_VIEW_LINES: u32 = 500;
/// Bytes of a proc's output `/api/logs` shows at most (its last).
pub const LOG_VIEW_BYTES_MAX: usize = 64 * 1024;
/// How often an idle event stream sends a comment, so that proxies and the
/// browser keep it open (a keep-alive, not a poll: nothing is read).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The session cookie's name.
pub const COOKIE: &str = "tabos_session";

/// Headers every answer carries: the page runs only its own script and
/// style, in no one else's frame.
const SECURITY_HEADERS: [(header::HeaderName, &str); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::CACHE_CONTROL, "no-store"),
];

const INDEX_HTML: &str = include_str!("dashboard/assets/index.html");
const APP_JS: &str = include_str!("dashboard/assets/app.js");
const APP_CSS: &str = include_str!("dashboard/assets/app.css");

/// A signed-in browser.
struct Session {
    principal: Arc<Principal>,
    /// Kept to act on another node for it (a file whose data is there).
    token: String,
    last_used: Instant,
}

/// The signed-in sessions, by cookie value (the node's, so that `tabos
/// status` shows each realm's count).
#[derive(Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

impl std::fmt::Debug for Sessions {
    // Tokens stay out of debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("live", &self.lock().len())
            .finish()
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, principal: Arc<Principal>, token: String) -> Result<String, ApiError> {
        let id = session_id()?;
        let mut map = self.lock();
        let now = Instant::now();
        map.retain(|_, s| now.duration_since(s.last_used) < SESSION_IDLE_MAX);
        // Room is made from the realm signing in when it holds its share,
        // else from the realm holding the most: never from a realm below
        // its share.
        let mut per_realm: HashMap<&str, usize> = HashMap::new();
        for s in map.values() {
            *per_realm.entry(s.principal.realm()).or_default() += 1;
        }
        let realm = principal.realm();
        let from = if per_realm.get(realm).copied().unwrap_or(0) >= SESSIONS_PER_REALM_MAX {
            Some(realm.to_string())
        } else if map.len() >= SESSIONS_MAX {
            per_realm
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(r, _)| r.to_string())
        } else {
            None
        };
        if let Some(from) = from {
            let oldest = map
                .iter()
                .filter(|(_, s)| s.principal.realm() == from)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(
            id.clone(),
            Session {
                principal,
                token,
                last_used: now,
            },
        );
        Ok(id)
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The realm of session `id` (`""`: an operator's), if it is live;
    /// not marked used.
    fn realm_of(&self, id: &str) -> Option<String> {
        let map = self.lock();
        let s = map.get(id)?;
        (s.last_used.elapsed() < SESSION_IDLE_MAX).then(|| s.principal.realm().to_string())
    }

    /// The session `id`'s principal and token, marked used.
    fn touch(&self, id: &str) -> Option<(Arc<Principal>, String)> {
        let mut map = self.lock();
        let s = map.get_mut(id)?;
        let now = Instant::now();
        if now.duration_since(s.last_used) >= SESSION_IDLE_MAX {
            map.remove(id);
            return None;
        }
        s.last_used = now;
        Some((s.principal.clone(), s.token.clone()))
    }

    /// Signs out every session of credential `id` (it was found dead).
    fn forget_credential(&self, id: &CredentialId) {
        self.lock().retain(|_, s| s.principal.id() != id);
    }

    /// Live sessions by realm (`""`: operators'), by name.
    pub fn per_realm(&self) -> Vec<(String, usize)> {
        let mut by: HashMap<String, usize> = HashMap::new();
        for s in self.lock().values() {
            if s.last_used.elapsed() < SESSION_IDLE_MAX {
                *by.entry(s.principal.realm().to_string()).or_default() += 1;
            }
        }
        let mut v: Vec<_> = by.into_iter().collect();
        v.sort();
        v
    }
}

/// 32 random bytes, hex: unguessable, and nothing to do with the token.
fn session_id() -> Result<String, ApiError> {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| ApiError::internal(format!("no randomness: {e}")))?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// The dashboard's shared state.
#[derive(Clone)]
struct App {
    node: Node,
    sessions: Arc<Sessions>,
    history: Arc<history::History>,
    streams: Arc<Semaphore>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// Who a request is from.
struct SignedIn {
    principal: Arc<Principal>,
    token: String,
}

impl SignedIn {
    /// Its credential acting in `realm` (empty: its own; an operator's, the
    /// node's) as its own user: the kernel's one rule for every door.
    fn act(&self, node: &Node, realm: &str) -> Result<Caller, ApiError> {
        Ok(self.principal.act(realm, "", &node.settings.realm)?)
    }
}

/// An error as the page shows it: a status, a sentence, and the typed
/// reason (`ErrorReason` of tabos.proto without its prefix, e.g.
/// "NOT_EMPTY") for scripts.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    reason: &'static str,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            reason: "",
        }
    }
    fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, message)
    }
    fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, message)
    }
    fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl From<tonic::Status> for ApiError {
    fn from(s: tonic::Status) -> ApiError {
        use tonic::Code;
        let status = match s.code() {
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                StatusCode::BAD_REQUEST
            }
            Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let reason = tabos_client::fault::detail(&s).reason().as_str_name();
        ApiError {
            status,
            message: s.message().to_string(),
            reason: reason.strip_prefix("ERROR_REASON_").unwrap_or(reason),
        }
    }
}

impl From<&tabos_store::Error> for ApiError {
    fn from(e: &tabos_store::Error) -> ApiError {
        crate::status_of(e).into()
    }
}

impl From<&tabos_kernel::Error> for ApiError {
    fn from(e: &tabos_kernel::Error) -> ApiError {
        crate::kernel_status(e).into()
    }
}

impl From<tabos_kernel::Error> for ApiError {
    fn from(e: tabos_kernel::Error) -> ApiError {
        ApiError::from(&e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        with_security(
            (
                self.status,
                [(header::CONTENT_TYPE, "application/json")],
                if self.reason.is_empty() {
                    json!({ "error": self.message })
                } else {
                    json!({ "error": self.message, "reason": self.reason })
                }
                .to_string(),
            )
                .into_response(),
        )
    }
}

fn with_security(mut r: Response) -> Response {
    let h = r.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

fn json_response(status: StatusCode, body: Json) -> Response {
    with_security(
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response(),
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    with_security(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// The cookie's value in `headers`, if any.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// Refuses a request that changes something unless it comes from the
/// page's own origin: `Origin`, when the browser sends it, must name the
/// host the request was sent to. (The cookie is `SameSite=Strict` too;
/// this also stops a page on another port of the same host.)
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(()); // not a browser's cross-origin request
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let origin = origin.to_str().unwrap_or("");
    let ok = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| !host.is_empty() && o == host);
    if ok {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "a request from {origin:?} to {host:?}: the dashboard answers its own page only"
        )))
    }
}

impl App {
    /// The request's signed-in caller, its credential still live.
    fn caller(&self, headers: &HeaderMap) -> Result<SignedIn, ApiError> {
        let id = cookie(headers)
            .ok_or_else(|| ApiError::unauthorized("not signed in: sign in with a credential"))?;
        let (principal, token) = self
            .sessions
            .touch(&id)
            .ok_or_else(|| ApiError::unauthorized("the session has ended: sign in again"))?;
        if !self.node.auth.is_live(principal.id()) {
            self.sessions.forget_credential(principal.id());
            return Err(ApiError::unauthorized(format!(
                "credential {} was revoked or has expired: sign in again",
                principal.id()
            )));
        }
        Ok(SignedIn { principal, token })
    }

    /// What `caller`'s SQL reads ([`Caller::sql_scope`]): every realm for
    /// an operator who names none (or `*`), else one realm.
    fn scope(&self, caller: &SignedIn, realm: &str) -> Result<ReadScope, ApiError> {
        let every_realm = caller.principal.is_operator() && (realm.is_empty() || realm == "*");
        let asked = if every_realm { "" } else { realm };
        Ok(caller.act(&self.node, asked)?.sql_scope(every_realm)?)
    }
}

/// Who may sign in: who may use SQL, since every page is SQL.
fn may_sign_in(node: &Node, p: &Principal) -> Result<(), ApiError> {
    let refused = |e: tabos_kernel::Error| {
        ApiError::forbidden(format!("{e} (every page of the dashboard is SQL)"))
    };
    let who = p.act("", "", &node.settings.realm).map_err(refused)?;
    who.sql_scope(false).map_err(refused)?;
    Ok(())
}

fn parse<'a, T: Deserialize<'a>>(body: &'a Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("bad request body: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

async fn sign_in(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let go = || -> Result<Response, ApiError> {
        same_origin(&headers)?;
        let req: SignIn = parse(&body)?;
        let token = req.token.trim().to_string();
        let principal = app.node.auth.check(&token).ok_or_else(|| {
            ApiError::unauthorized("that is not a live tabos credential (tabos token create)")
        })?;
        may_sign_in(&app.node, &principal)?;
        let id = app.sessions.add(principal.clone(), token)?;
        let mut r = json_response(StatusCode::OK, whoami(&app.node, &principal));
        let cookie = format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict");
        r.headers_mut().insert(
            header::SET_COOKIE,
            HeaderValue::from_str(&cookie).map_err(|e| ApiError::internal(e.to_string()))?,
        );
        Ok(r)
    };
    go().unwrap_or_else(IntoResponse::into_response)
}

fn whoami(node: &Node, p: &Principal) -> Json {
    json!({
        "credential": p.id().to_string(),
        "realm": p.realm(),
        "user": p.user(),
        "role": p.role().to_string(),
        "operator": p.is_operator(),
        "node_id": node.settings.node_id,
        "node_realm": node.settings.realm,
        "backend": node.store.kind().to_string(),
    })
}

async fn me(State(app): State<App>, headers: HeaderMap) -> Response {
    match app.caller(&headers) {
        Ok(c) => json_response(StatusCode::OK, whoami(&app.node, &c.principal)),
        Err(e) => e.into_response(),
    }
}

async fn sign_out(State(app): State<App>, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&headers) {
        return e.into_response();
    }
    if let Some(id) = cookie(&headers) {
        app.sessions.remove(&id);
    }
    let mut r = json_response(StatusCode::OK, json!({}));
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("tabos_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlRequest {
    sql: String,
    #[serde(default)]
    realm: String,
    #[serde(default)]
    params: Vec<Json>,
}

/// A store value as JSON: a blob as its text (invalid UTF-8 replaced) and
/// length, for the page to show.
fn value_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Int(i) => json!(i),
        Value::Real(r) => json!(r),
        Value::Text(t) => json!(t),
        Value::Blob(b) => json!({ "blob": String::from_utf8_lossy(b), "bytes": b.len() }),
    }
}

fn param(v: Json, i: usize) -> Result<Value, ApiError> {
    match v {
        Json::Null => Ok(Value::Null),
        Json::Bool(b) => Ok(Value::Int(i64::from(b))),
        Json::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .or_else(|| n.as_f64().map(Value::Real))
            .ok_or_else(|| ApiError::bad(format!("parameter ${}: {n} is out of range", i + 1))),
        Json::String(s) => Ok(Value::Text(s)),
        _ => Err(ApiError::bad(format!(
            "parameter ${} is not null, a number, a string or a boolean",
            i + 1
        ))),
    }
}

async fn sql(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let go = async {
        same_origin(&headers)?;
        let caller = app.caller(&headers)?;
        let req: SqlRequest = parse(&body)?;
        let scope = app.scope(&caller, &req.realm)?;
        if req.sql.trim().is_empty() {
            return Err(ApiError::bad("empty SQL statement"));
        }
        if req.sql.len() > crate::sql::SQL_BYTES_MAX {
            return Err(ApiError::bad(format!(
                "a statement is at most {} bytes, not {}",
                crate::sql::SQL_BYTES_MAX,
                req.sql.len()
            )));
        }
        if req.params.len() > crate::sql::PARAMS_MAX {
            return Err(ApiError::bad(format!(
                "at most {} parameters",
                crate::sql::PARAMS_MAX
            )));
        }
        let params = req
            .params
            .into_iter()
            .enumerate()
            .map(|(i, v)| param(v, i))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = crate::sql::run(&app.node, scope, req.sql, params, SQL_ROWS_MAX)
            .await
            .map_err(|e| ApiError::from(&e))?;
        let body = json!({
            "columns": rows.columns.to_vec(),
            "rows": rows.rows.iter()
                .map(|r| r.values().iter().map(value_json).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
            "truncated": rows.truncated,
        });
        Ok(json_response(StatusCode::OK, body))
    };
    go.await.unwrap_or_else(IntoResponse::into_response)
}

async fn history_now(State(app): State<App>, headers: HeaderMap) -> Response {
    match app.caller(&headers) {
        Ok(c) => {
            let samples: Vec<Json> = app
                .history
                .samples()
                .iter()
                .map(|s| s.for_principal(&c.principal))
                .collect();
            json_response(
                StatusCode::OK,
                json!({ "every_ms": history::SAMPLE_EVERY.as_millis() as u64, "samples": samples }),
            )
        }
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FsRequest {
    path: String,
    #[serde(default)]
    realm: String,
}

impl FsRequest {
    /// The realm, the caller's user and the path, checked.
    fn checked(self, app: &App, caller: &SignedIn) -> Result<(String, Caller, String), ApiError> {
        let who = caller.act(&app.node, &self.realm)?;
        tabos_kernel::names::validate_path(&self.path)?;
        Ok((who.realm().to_string(), who, self.path))
    }
}

fn stat_json(s: &tabos_kernel::fs::Stat) -> Json {
    json!({
        "path": s.path,
        "type": s.file_type.as_str(),
        "owner": s.owner,
        "mode": s.mode,
        "layout": s.storage.as_str(),
        "size": s.size,
        "mtime_us": s.mtime_us,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsRequest {
    pid: String,
    #[serde(default)]
    realm: String,
    /// "stdout" (the default) or "stderr".
    #[serde(default)]
    stream: String,
}

/// A proc's output, its last lines: what its detail shows (re-read when
/// the page hears `logs/<pid>` on its event stream).
async fn logs(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    use tabos_kernel::logs::{Stream, Want};
    let go = async {
        same_origin(&headers)?;
        let caller = app.caller(&headers)?;
        let r = parse::<LogsRequest>(&body)?;
        let who = caller.act(&app.node, &r.realm)?;
        let pid = tabos_kernel::ids::Pid::new(r.pid)?;
        let stream = match r.stream.as_str() {
            "" | "stdout" => Stream::Stdout,
            "stderr" => Stream::Stderr,
            other => {
                return Err(ApiError::bad(format!(
                    "no stream {other:?}: stdout or stderr"
                )))
            }
        };
        let want = Want {
            tail_lines: LOG_VIEW_LINES,
            max_bytes: LOG_VIEW_BYTES_MAX,
            ..Default::default()
        };
        let read = tabos_kernel::logs::read_for(&app.node.store, &who, &pid, stream, want)
            .await
            .map_err(|e| ApiError::from(&e))?;
        Ok::<_, ApiError>(json_response(
            StatusCode::OK,
            json!({
                "text": String::from_utf8_lossy(&read.data),
                "truncated": read.truncated,
                "read_us": read.marks.last().map(|m| m.1),
            }),
        ))
    };
    go.await.unwrap_or_else(IntoResponse::into_response)
}

async fn fs_ls(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let go = async {
        same_origin(&headers)?;
        let caller = app.caller(&headers)?;
        let (realm, who, path) = parse::<FsRequest>(&body)?.checked(&app, &caller)?;
        let (entries, more) = tabos_kernel::fs::read(&app.node.store, &realm, move |tx| {
            tabos_kernel::fs::readdir_tx(tx, &who, &path)
        })
        .await
        .map_err(|e| ApiError::from(&e))?;
        Ok::<_, ApiError>(json_response(
            StatusCode::OK,
            json!({
                "entries": entries.iter().map(stat_json).collect::<Vec<_>>(),
                "more": more,
            }),
        ))
    };
    go.await.unwrap_or_else(IntoResponse::into_response)
}

async fn fs_read(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let go = async {
        same_origin(&headers)?;
        let caller = app.caller(&headers)?;
        let (realm, who, path) = parse::<FsRequest>(&body)?.checked(&app, &caller)?;
        let (w, p) = (who.clone(), path.clone());
        let st = tabos_kernel::fs::read(&app.node.store, &realm, move |tx| {
            tabos_kernel::fs::stat_tx(tx, &w, &p)
        })
        .await
        .map_err(|e| ApiError::from(&e))?;
        let data = match app
            .node
            .files
            .read(&who, &path, 0, FILE_VIEW_BYTES_MAX)
            .await
        {
            Ok(d) => d,
            // In another node's block store: read there, as the caller.
            Err(tabos_kernel::Error::OnBlockStore { store_id, .. }) => {
                let what = format!("the data of {path}");
                let addr =
                    match crate::forward::holder_of_store(&app.node, &store_id, &what).await? {
                        crate::forward::Holder::Peer(addr) => addr,
                        crate::forward::Holder::Here => {
                            return Err(ApiError::internal(format!(
                                "{path}: its block store {store_id} is this node's, yet the node \
                             did not find it so"
                            )))
                        }
                    };
                let mut fs = crate::forward::fs_at(&addr, &caller.token).await?;
                let req = tabos_client::proto::FsReadRequest {
                    realm: realm.clone(),
                    path: path.clone(),
                    offset: 0,
                    len: FILE_VIEW_BYTES_MAX as u32,
                    ..Default::default()
                };
                crate::forward::rpc(&addr, fs.read(req)).await?.data
            }
            Err(e) => return Err(ApiError::from(&e)),
        };
        Ok::<_, ApiError>(json_response(
            StatusCode::OK,
            json!({
                "stat": stat_json(&st),
                "text": String::from_utf8_lossy(&data),
                "truncated": (data.len() as i64) < st.size,
            }),
        ))
    };
    go.await.unwrap_or_else(IntoResponse::into_response)
}

/// The `(key, value)` pairs of a query string, decoded.
fn query_pairs(q: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(kv), String::new()),
        })
        .collect()
}

/// What an event stream's followers hand it.
enum Item {
    Event(Event),
    /// A follower fell behind the feed, or the credential died: end the
    /// stream (the browser reconnects, and re-reads).
    End,
}

/// Aborts its task when dropped: a stream's followers end with it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An event stream's state, held by the response body.
struct Stream {
    rx: mpsc::Receiver<Item>,
    stopping: tokio::sync::watch::Receiver<bool>,
    _followers: Vec<AbortOnDrop>,
    _slot: OwnedSemaphorePermit,
    _realm_slot: crate::doors::Taken,
    /// The connection counts as busy while the stream is open (so it is
    /// not closed to make room).
    _busy: Option<crate::doors::Busy>,
}

async fn events(
    State(app): State<App>,
    conn: Option<Extension<ConnTicket>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let go = async {
        let caller = app.caller(&headers)?;
        let mut realm = String::new();
        let mut channels = Vec::new();
        for (k, v) in query_pairs(query.as_deref().unwrap_or("")) {
            match k.as_str() {
                "realm" => realm = v,
                "ch" => channels.push(v),
                _ => return Err(ApiError::bad(format!("unknown parameter {k:?}"))),
            }
        }
        if channels.len() > CHANNELS_PER_STREAM_MAX {
            return Err(ApiError::bad(format!(
                "a stream follows at most {CHANNELS_PER_STREAM_MAX} channels"
            )));
        }
        let feeds = if channels.is_empty() {
            Vec::new()
        } else {
            // Channels carry what SQL shows: the same caller may follow them.
            let who = caller.act(&app.node, &realm)?;
            who.sql_scope(false)?;
            let realm = who.realm().to_string();
            channels
                .iter()
                .map(|c| {
                    crate::pg::feed_channel(&realm, c)
                        .map(|f| (c.clone(), f))
                        .map_err(ApiError::bad)
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        let realm_slot = app
            .node
            .dashboard_streams
            .take(caller.principal.realm())
            .map_err(|_| {
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "a realm's sessions hold at most {EVENT_STREAMS_PER_REALM_MAX} event \
                         streams at once; close one"
                    ),
                )
            })?;
        let slot = app.streams.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the node serves at most {EVENT_STREAMS_MAX} event streams at once"),
            )
        })?;
        let (tx, rx) = mpsc::channel(EVENT_QUEUE_MAX);
        let mut followers = Vec::new();
        for (name, feed) in feeds {
            let mut sub = app.node.store.subscribe(&feed);
            let (tx, node, id) = (tx.clone(), app.node.clone(), caller.principal.id().clone());
            followers.push(AbortOnDrop(tokio::spawn(async move {
                loop {
                    let item = match sub.recv().await {
                        Ok(n) if node.auth.is_live(&id) => Item::Event(
                            Event::default()
                                .event("change")
                                .data(json!({ "channel": name, "payload": n.payload }).to_string()),
                        ),
                        _ => Item::End,
                    };
                    let end = matches!(item, Item::End);
                    if tx.send(item).await.is_err() || end {
                        return;
                    }
                }
            })));
        }
        let mut samples = app.history.subscribe();
        let (principal, node) = (caller.principal.clone(), app.node.clone());
        followers.push(AbortOnDrop(tokio::spawn(async move {
            loop {
                let item = match samples.recv().await {
                    Ok(s) if node.auth.is_live(principal.id()) => Item::Event(
                        Event::default()
                            .event("sample")
                            .data(s.for_principal(&principal).to_string()),
                    ),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    _ => Item::End,
                };
                let end = matches!(item, Item::End);
                if tx.send(item).await.is_err() || end {
                    return;
                }
            }
        })));
        let state = Stream {
            rx,
            stopping: app.stopping.clone(),
            _followers: followers,
            _slot: slot,
            _realm_slot: realm_slot,
            _busy: conn.map(|Extension(t)| t.0.busy()),
        };
        let stream = futures::stream::unfold(state, |mut s| async move {
            let item = tokio::select! {
                i = s.rx.recv() => i,
                _ = s.stopping.wait_for(|stop| *stop) => None,
            };
            match item {
                Some(Item::Event(e)) => Some((Ok::<_, Infallible>(e), s)),
                Some(Item::End) | None => None,
            }
        });
        let sse = Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE));
        Ok(with_security(sse.into_response()))
    };
    go.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /metrics`: the node's metrics for Prometheus (its `authorization`
/// setting: a `Bearer` operator credential), in the OpenMetrics text
/// format ([`crate::metrics`]). Not for the page's session: no cookie.
async fn metrics(State(app): State<App>, headers: HeaderMap) -> Response {
    let go = async {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                ApiError::unauthorized(
                    "metrics need an operator's credential (or one scoped to metrics): \
                     Authorization: Bearer TOKEN",
                )
            })?;
        let principal = app.node.auth.check(token.trim()).ok_or_else(|| {
            ApiError::unauthorized("that is not a live tabos credential (tabos token create)")
        })?;
        if !principal.is_operator() {
            return Err(ApiError::forbidden(format!(
                "credential {} is realm {}'s; metrics show every realm and need an operator's",
                principal.id(),
                principal.realm()
            )));
        }
        // An operator's, unscoped or scoped to metrics (tabos token create
        // --role operator --scope metrics: a Prometheus server's, which
        // can do nothing else).
        if let Some(scope) = principal.scope().filter(|s| !s.may_read_metrics()) {
            return Err(ApiError::forbidden(format!(
                "credential {} is scoped ({scope}), without metrics",
                principal.id()
            )));
        }
        let text = app
            .node
            .metrics
            .scrape(&app.node)
            .await
            .map_err(ApiError::internal)?;
        let mut r = (StatusCode::OK, text).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        );
        Ok::<_, ApiError>(r)
    };
    go.await.unwrap_or_else(IntoResponse::into_response)
}

async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "no such page").into_response()
}

/// The dashboard's routes over `node` (public for tests that drive it
/// without a listener).
fn router(app: App) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route("/api/session", post(sign_in).get(me).delete(sign_out))
        .route("/api/sql", post(sql))
        .route("/api/history", get(history_now))
        .route("/api/events", get(events))
        .route("/api/fs/ls", post(fs_ls))
        .route("/api/fs/read", post(fs_read))
        .route("/api/logs", post(logs))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(|m: Method| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{m} is not served here"),
            )
            .into_response()
        })
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            door_keeper,
        ))
        .with_state(app)
}

/// A connection's ticket at the dashboard's door, from the listener.
#[derive(Clone)]
struct ConnTicket(Arc<crate::doors::Ticket>);

impl Connected<IncomingStream<'_, Limited>> for ConnTicket {
    fn connect_info(stream: IncomingStream<'_, Limited>) -> ConnTicket {
        ConnTicket(stream.io().ticket.clone())
    }
}

/// Every request: its connection is busy until the answer is made (an
/// event stream keeps it busy while open), and the first request with a
/// live session signs the connection in for the session's realm — past
/// [`CONNECTIONS_PER_REALM_MAX`], 429 and the connection stays
/// unauthenticated.
async fn door_keeper(State(app): State<App>, mut req: Request, next: Next) -> Response {
    let Some(ConnectInfo(ticket)) = req.extensions().get::<ConnectInfo<ConnTicket>>().cloned()
    else {
        return next.run(req).await;
    };
    let _busy = ticket.0.busy();
    if let Some(realm) = cookie(req.headers()).and_then(|id| app.sessions.realm_of(&id)) {
        if let Err(e) = app.node.dashboard_door.ledger.sign_in(&ticket.0, &realm) {
            return ApiError::new(StatusCode::TOO_MANY_REQUESTS, e.to_string()).into_response();
        }
    }
    req.extensions_mut().insert(ticket);
    next.run(req).await
}

/// Serves the dashboard on `listener` until `stopping` is raised.
pub async fn serve(
    node: Node,
    listener: TcpListener,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let history = history::History::start(node.clone(), stopping.clone());
    let app = App {
        sessions: node.dashboard_sessions.clone(),
        node,
        history,
        streams: Arc::new(Semaphore::new(EVENT_STREAMS_MAX)),
        stopping: stopping.clone(),
    };
    let listener = Limited {
        inner: listener,
        door: app.node.dashboard_door.clone(),
    };
    let stop = crate::stopping(stopping);
    let service = router(app).into_make_service_with_connect_info::<ConnTicket>();
    if let Err(e) = axum::serve(listener, service)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!("dashboard: {e}");
    }
}

/// The dashboard's connection slots and who holds them.
pub type Door = crate::doors::Door<crate::doors::Ticket>;

/// A new dashboard door with its limits.
pub fn door() -> Arc<Door> {
    Arc::new(Door::new(CONNECTIONS_MAX, DOOR))
}

/// A new count of the event streams each realm's sessions hold
/// ([`EVENT_STREAMS_PER_REALM_MAX`]; operators' counted, not capped — the
/// node's [`EVENT_STREAMS_MAX`] bounds them).
pub fn streams() -> Arc<crate::doors::PerRealm> {
    crate::doors::PerRealm::new(EVENT_STREAMS_PER_REALM_MAX)
}

/// A listener that holds at most [`CONNECTIONS_MAX`] connections, counted
/// at the node's dashboard [`Door`]: an address over its share of
/// connections not signed in is closed at once; when every slot is held,
/// an idle connection of the realm holding the most is closed, or the
/// next waits for a free one.
struct Limited {
    inner: TcpListener,
    door: Arc<Door>,
}

/// A connection, its slot and its ticket, given back when it closes.
struct LimitedStream {
    stream: TcpStream,
    ticket: Arc<crate::doors::Ticket>,
    door: Arc<Door>,
    /// Ready once the door closes the connection (evicted, idle).
    closing: Pin<Box<dyn std::future::Future<Output = ()> + Send + Sync>>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for LimitedStream {
    fn drop(&mut self) {
        self.door.ledger.forget(&self.ticket);
    }
}

impl axum::serve::Listener for Limited {
    type Io = LimitedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (LimitedStream, std::net::SocketAddr) {
        loop {
            let Some(slot) = self.door.slot(None).await else {
                // The semaphore is never closed; wait for the server to stop.
                std::future::pending::<()>().await;
                continue;
            };
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let ticket = crate::doors::Ticket::new(crate::doors::Source::Ip(addr.ip()));
                    if !self.door.ledger.admit(&ticket) {
                        continue; // over its address's share: closed at once
                    }
                    let _ = stream.set_nodelay(true);
                    return (
                        LimitedStream {
                            stream,
                            closing: Box::pin(ticket.clone().closing()),
                            ticket,
                            door: self.door.clone(),
                            _slot: slot,
                        },
                        addr,
                    );
                }
                // Out of descriptors, most likely: give the others a moment.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.closing.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(())); // closed by the door: end of stream
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_string_is_decoded() {
        assert_eq!(
            query_pairs("realm=acme&ch=mailbox%2Fin+box&ch=procs&x"),
            vec![
                ("realm".into(), "acme".into()),
                ("ch".into(), "mailbox/in box".into()),
                ("ch".into(), "procs".into()),
                ("x".into(), String::new()),
            ]
        );
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; tabos_session=abc; b=2"),
        );
        assert_eq!(cookie(&h).as_deref(), Some("abc"));
        h.insert(header::COOKIE, HeaderValue::from_static("tabos_sessionx=1"));
        assert_eq!(cookie(&h), None);
    }

    #[test]
    fn another_origin_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7071"));
        assert!(same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:7071"),
        );
        assert!(same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(same_origin(&h).is_err());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:7072"),
        );
        assert!(same_origin(&h).is_err());
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(same_origin(&h).is_err());
    }
}
