//! `tabos-client`: the gRPC protocol of a tabos node (`proto/tabos.proto`)
//! and the Rust client library over it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tabos_client::Error> {
//! let token = std::env::var("TABOS_TOKEN").unwrap_or_default();
//! let mut client = tabos_client::Client::connect("127.0.0.1:7070", &token).await?;
//! let result = client.sql("SELECT count(*) FROM kv", vec![]).await?;
//! println!("{:?}", result.rows);
//! # Ok(()) }
//! ```

/// The generated protocol types and service stubs.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("tabos.v1");
}

pub mod app;
pub mod batch;
pub mod code;
pub mod codec;
pub mod doors;
pub mod fault;
pub mod fs;
pub mod graphs;
pub mod local;
pub mod names;
pub mod procedures;
pub mod retry;
pub mod states;
pub mod wfmodule;
pub mod workflows;

use proto::batch_client::BatchClient;
use proto::fs_client::FsClient;
use proto::graphs_client::GraphsClient;
use proto::ipc_client::IpcClient;
use proto::names_client::NamesClient;
use proto::node_client::NodeClient;
use proto::procedures_client::ProceduresClient;
use proto::procs_client::ProcsClient;
use proto::sql_client::SqlClient;
use proto::tokens_client::TokensClient;
use proto::workflows_client::WorkflowsClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The address a client uses when neither `--addr` nor `TABOS_ADDR` says otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7070";
/// How an address names a node's local Unix socket: `unix:/path/to/tabos.sock`
/// (`tabos up` serves one in its data directory).
pub const UNIX_SCHEME: &str = "unix:";
/// Largest gRPC message a client or node accepts, in bytes.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;
/// Longest a TCP connection to a node may take to open (and its TLS
/// handshake): a node cut off from the network fails the connect within
/// this, not after the kernel's two minutes of SYN retries.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// A TCP connection to a node is pinged (HTTP/2 PING) this often, busy or
/// idle, and closed — its calls failing UNAVAILABLE, which
/// [`app::through_outage`] and the supervisors ask again — when a ping is
/// not answered within [`KEEPALIVE_TIMEOUT`]: a node partitioned away, or
/// one that accepted the connection at the kernel's door and never served
/// it, is not waited for forever. (The node pings its clients likewise.)
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// See [`KEEPALIVE_INTERVAL`].
pub const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Errors of the client library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot connect to tabos node at {addr}: {source} (is `tabos up` running? set --addr or TABOS_ADDR)")]
    Connect {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("cannot connect to tabos node at {addr}: {source} (is `tabos up` running? set --addr or TABOS_ADDR)")]
    ConnectLocal {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid node address {0:?}")]
    Address(String),
    #[error("the credential is not a token (it must be printable ASCII)")]
    Token,
    /// A variable procd sets is missing: not run as a tabos proc.
    #[error("{0} is not set (run as a tabos proc)")]
    NotAProc(&'static str),
    /// The node answered with an error; its message says what was wrong.
    #[error("{}: {}", code_name(.0.code()), status_text(.0))]
    Status(tonic::Status),
    /// Code that cannot be uploaded ([`code`]).
    #[error(transparent)]
    Code(#[from] code::CodeError),
    /// Arguments this client refuses before asking the node.
    #[error("{0}")]
    Invalid(String),
    /// A names call met more symlinks than [`names::HOPS_MAX`] (a loop).
    #[error("{path}: more than {hops} symlinks to follow (a loop?)")]
    Hops { path: String, hops: usize },
    /// A graph's task failed or was cancelled ([`graphs::Graph::get`]).
    #[error("{0}")]
    Task(String),
}

impl Error {
    /// The gRPC code of an error the node answered with.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Status(s) => Some(s.code()),
            _ => None,
        }
    }

    /// Why the call failed, as the node said it ([`fault::detail`]): `None`
    /// for an error that never reached a node (connecting, an address).
    pub fn detail(&self) -> Option<fault::ErrorDetail> {
        match self {
            Error::Status(s) => Some(fault::detail(s)),
            _ => None,
        }
    }

    /// The reason of [`detail`](Self::detail).
    pub fn reason(&self) -> Option<fault::ErrorReason> {
        self.detail().map(|d| d.reason())
    }

    /// Whether the call was cut short rather than answered: the node not
    /// reached, or gone mid-call, or away (or its database) for a while,
    /// or stopping — so that asking again, there or at another node, will
    /// do for an idempotent call. An answer (not found, denied, invalid…)
    /// is not. The one rule for every retry loop of the client's.
    pub fn is_cut_short(&self) -> bool {
        use tonic::Code;
        match self {
            Error::Connect { .. } | Error::ConnectLocal { .. } => true,
            Error::Status(s) => {
                matches!(
                    s.code(),
                    Code::Unavailable
                        | Code::Unknown
                        | Code::Cancelled
                        | Code::Aborted
                        | Code::DeadlineExceeded
                ) || (s.code() == Code::Internal && fault::from_transport(s))
            }
            _ => false,
        }
    }

    /// The request carried a fence older than its directory's epoch.
    pub fn is_stale_epoch(&self) -> bool {
        self.reason() == Some(fault::ErrorReason::StaleEpoch)
    }

    /// For a path that went through a symlink (σOS automount): the symlink,
    /// its target (a service's endpoint) and what is left to resolve there.
    pub fn mount(&self) -> Option<names::Mount> {
        match self.detail()?.more? {
            fault::More::Mounted(m) => Some(names::Mount {
                path: m.path,
                target: m.target,
                rest: m.rest,
            }),
            _ => None,
        }
    }
}

// Not `#[from]`: that would also make the status the error's source, and
// error reports would print its message twice.
impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        Error::Status(s)
    }
}

/// A status's message, followed — where this client's own transport made
/// it and the node said nothing ("http2 error", "transport error") — by
/// the transport's reasons ("keep-alive timed out", "Connection refused").
fn status_text(s: &tonic::Status) -> String {
    let mut text = s.message().to_string();
    let mut cause = std::error::Error::source(s);
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        InvalidArgument => "invalid argument",
        NotFound => "not found",
        AlreadyExists => "already exists",
        PermissionDenied => "refused",
        ResourceExhausted => "limit exceeded",
        FailedPrecondition => "failed precondition",
        Unavailable => "unavailable",
        DeadlineExceeded => "timed out",
        Aborted => "aborted",
        Unauthenticated => "unauthenticated",
        Unimplemented => "not supported",
        Cancelled => "cancelled",
        OutOfRange => "out of range",
        DataLoss => "data loss",
        // Not "error": the CLI says "error:" before every failure.
        Internal | Unknown | Ok => "internal error",
    }
}

/// What of a proc's log to read ([`Client::logs_with`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogsWant {
    /// Output read at or after this time (µs since the epoch; 0: all).
    pub since_us: i64,
    /// Only the last this many lines (0: all).
    pub tail_lines: u32,
}

impl LogsWant {
    fn request(self, realm: &str, pid: &str, stream: proto::LogStream) -> proto::LogsRequest {
        proto::LogsRequest {
            realm: realm.into(),
            pid: pid.into(),
            stream: stream.into(),
            since_us: self.since_us,
            tail_lines: self.tail_lines,
        }
    }
}

/// One SQL value on the client side.
pub type Value = proto::value::Kind;

/// Most host paths one proc may ask to see (`ProcDescriptor.host_paths`);
/// the node's limit, which it asserts equal to its own.
pub const HOST_PATHS_MAX: usize = 32;

/// Whether host path `path` is `prefix` or under it: the node's rule for a
/// spawn's host paths against those its realm allows.
pub fn host_path_within(path: &str, prefix: &str) -> bool {
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// A query result.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<Value>>>,
    pub truncated: bool,
}

/// Sends a client's credential with every call, as
/// `authorization: Bearer <token>` (no header for an empty token: the node
/// then refuses the call as UNAUTHENTICATED).
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.write_str(if self.0.is_some() {
            "Bearer(…)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Bearer {
    /// The header for `token`.
    pub fn new(token: &str) -> Result<Bearer, Error> {
        let token = token.trim();
        if token.is_empty() {
            return Ok(Bearer(None));
        }
        let mut v: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::Token)?;
        v.set_sensitive(true);
        Ok(Bearer(Some(v)))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            r.metadata_mut().insert(AUTHORIZATION, v.clone());
        }
        Ok(r)
    }
}

/// Metadata key of the credential.
pub const AUTHORIZATION: &str = "authorization";

/// A channel that carries the client's credential.
pub type Transport = InterceptedService<Wire, Bearer>;

/// How a client reaches its node: gRPC (HTTP/2 over TCP, TLS, or the
/// local socket), or the local transport ([`local`]) on the node's local
/// socket — what a `unix:` address gets. The same calls either way.
#[derive(Clone, Debug)]
pub enum Wire {
    Grpc(Channel),
    Local(local::LocalChannel),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Request<tonic::body::Body>> for Wire {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        match self {
            Wire::Grpc(c) => c.poll_ready(cx).map_err(Into::into),
            Wire::Local(l) => l.poll_ready(cx),
        }
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        match self {
            Wire::Grpc(c) => {
                let f = c.call(request);
                Box::pin(async move { f.await.map_err(Into::into) })
            }
            Wire::Local(l) => l.call(request),
        }
    }
}

/// A connection to one tabos node, acting with one credential.
#[derive(Debug, Clone)]
pub struct Client {
    sql: SqlClient<Transport>,
    node: NodeClient<Transport>,
    tokens: TokensClient<Transport>,
    procs: ProcsClient<Transport>,
    ipc: IpcClient<Transport>,
    names: NamesClient<Transport>,
    fs: FsClient<Transport>,
    procedures: ProceduresClient<Transport>,
    graphs: GraphsClient<Transport>,
    batch: BatchClient<Transport>,
    workflows: WorkflowsClient<Transport>,
    /// The proc this client acts for ([`Client::acting_for`]): its file
    /// reads and writes are recorded as that proc's provenance.
    proc_pid: String,
    /// How this client reaches another node with the same credential (a
    /// names call following an endpoint symlink, [`names`]); none for a
    /// client made over a channel it was given.
    dial: Option<std::sync::Arc<Dial>>,
}

/// A client's credential and trust, kept to dial another node of its
/// cluster with them.
#[derive(Debug)]
struct Dial {
    /// Prints no token.
    bearer: Bearer,
    ca_pem: Option<Vec<u8>>,
}

/// Where a node is and the credential to act with there: what a program
/// that opens many connections passes around.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: String,
    pub token: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    pub fn new(addr: impl Into<String>, token: impl Into<String>) -> Endpoint {
        Endpoint {
            addr: addr.into(),
            token: token.into(),
        }
    }

    /// A new connection acting with the endpoint's credential.
    pub async fn connect(&self) -> Result<Client, Error> {
        Client::connect(&self.addr, &self.token).await
    }
}

/// Turns `host:port` (or a full `http://` URI) into an endpoint URI; not
/// for a [`UNIX_SCHEME`] address, which [`Client::connect`] takes as is.
pub fn endpoint_uri(addr: &str) -> String {
    if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// A service's client stub over `channel`, taking messages up to
/// [`MESSAGE_BYTES_MAX`] either way.
macro_rules! sized {
    ($stub:ident, $channel:expr) => {
        $stub::new($channel)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    };
}

impl Client {
    /// Connects to the node at `addr` (`host:port`), acting with the
    /// credential `token` (as `tabos token create` printed it), in
    /// plaintext: for a node on this machine (loopback).
    pub async fn connect(addr: &str, token: &str) -> Result<Client, Error> {
        Client::connect_with(addr, token, None).await
    }

    /// Connects over TLS, trusting the certificate authority (or the
    /// node's self-signed certificate) `ca_pem`.
    pub async fn connect_tls(addr: &str, token: &str, ca_pem: &[u8]) -> Result<Client, Error> {
        Client::connect_with(addr, token, Some(ca_pem)).await
    }

    async fn connect_with(addr: &str, token: &str, ca_pem: Option<&[u8]>) -> Result<Client, Error> {
        Client::connect_bearer(addr, Bearer::new(token)?, ca_pem).await
    }

    async fn connect_bearer(
        addr: &str,
        bearer: Bearer,
        ca_pem: Option<&[u8]>,
    ) -> Result<Client, Error> {
        if let Some(path) = addr.strip_prefix(UNIX_SCHEME) {
            // The local socket carries no TLS: it never leaves the machine.
            if ca_pem.is_some() || path.is_empty() {
                return Err(Error::Address(addr.to_string()));
            }
            let channel = local::LocalChannel::connect(std::path::Path::new(path))
                .await
                .map_err(|e| Error::ConnectLocal {
                    addr: addr.to_string(),
                    source: e,
                })?;
            return Ok(Client::over(Wire::Local(channel), bearer.clone()).dialing(bearer, None));
        }
        let uri = match ca_pem {
            Some(_) if !addr.contains("://") => format!("https://{addr}"),
            _ => endpoint_uri(addr),
        };
        let mut endpoint = Channel::from_shared(uri)
            .map_err(|_| Error::Address(addr.to_string()))?
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if let Some(ca) = ca_pem {
            let tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca));
            endpoint = endpoint.tls_config(tls).map_err(|source| Error::Connect {
                addr: addr.to_string(),
                source,
            })?;
        }
        let channel = endpoint.connect().await.map_err(|source| Error::Connect {
            addr: addr.to_string(),
            source,
        })?;
        let ca = ca_pem.map(<[u8]>::to_vec);
        Ok(Client::from_channel(channel, bearer.clone()).dialing(bearer, ca))
    }

    /// Connects to the node's local socket at `path` with gRPC (HTTP/2)
    /// instead of the local transport a `unix:` address gets: what a gRPC
    /// client of another language does there (and what the benchmarks
    /// compare the local transport with).
    pub async fn connect_grpc_unix(path: &std::path::Path, token: &str) -> Result<Client, Error> {
        let bearer = Bearer::new(token)?;
        let path = path.to_path_buf();
        let addr = format!("{UNIX_SCHEME}{}", path.display());
        // The URI is not used to connect, only for the requests' authority.
        let channel = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|source| Error::Connect { addr, source })?;
        Ok(Client::from_channel(channel, bearer))
    }

    /// Connects the way a proc does: to `TABOS_ADDR`, with the credential
    /// its node gave it in `TABOS_TOKEN`.
    pub async fn connect_env() -> Result<Client, Error> {
        let addr = std::env::var("TABOS_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_string());
        let token = std::env::var("TABOS_TOKEN").unwrap_or_default();
        Client::connect(&addr, &token).await
    }

    /// The generated `Fs` client under this one: the raw RPCs, requests
    /// passed as they are (how a node forwards a request to the node
    /// holding a file's data).
    pub fn fs_rpc(&self) -> FsClient<Transport> {
        self.fs.clone()
    }

    /// The raw `Procs` RPCs: requests passed as they are (what a test of
    /// the node's refusals sends).
    pub fn procs_rpc(&self) -> ProcsClient<Transport> {
        self.procs.clone()
    }

    /// The raw `Workflows` RPCs ([`workflows`] is the library over them).
    pub fn workflows_rpc(&self) -> WorkflowsClient<Transport> {
        self.workflows.clone()
    }

    /// A client over an existing channel, acting with `bearer`'s credential.
    pub fn from_channel(channel: Channel, bearer: Bearer) -> Client {
        Client::over(Wire::Grpc(channel), bearer)
    }

    /// A client over `wire`, acting with `bearer`'s credential.
    pub fn over(wire: Wire, bearer: Bearer) -> Client {
        let channel = InterceptedService::new(wire, bearer);
        Client {
            tokens: sized!(TokensClient, channel.clone()),
            sql: sized!(SqlClient, channel.clone()),
            node: sized!(NodeClient, channel.clone()),
            procs: sized!(ProcsClient, channel.clone()),
            ipc: sized!(IpcClient, channel.clone()),
            names: sized!(NamesClient, channel.clone()),
            fs: sized!(FsClient, channel.clone()),
            procedures: sized!(ProceduresClient, channel.clone()),
            graphs: sized!(GraphsClient, channel.clone()),
            workflows: sized!(WorkflowsClient, channel.clone()),
            batch: sized!(BatchClient, channel),
            proc_pid: String::new(),
            dial: None,
        }
    }

    fn dialing(mut self, bearer: Bearer, ca_pem: Option<Vec<u8>>) -> Client {
        self.dial = Some(std::sync::Arc::new(Dial { bearer, ca_pem }));
        self
    }

    /// A client of the node at `addr` (`host:port`) with this client's
    /// credential and trust; `None` when this client was made over a
    /// channel it was given (it has no credential to pass on).
    pub(crate) async fn dial(&self, addr: &str) -> Option<Result<Client, Error>> {
        let d = self.dial.as_ref()?;
        Some(Client::connect_bearer(addr, d.bearer.clone(), d.ca_pem.as_deref()).await)
    }

    /// This client acting for proc `pid` (e.g. a proc's own `TABOS_PID`):
    /// the node records its file reads and writes as the proc's provenance
    /// events (`fs_read`, `fs_write`) and refuses them if the proc does
    /// not exist. An empty pid acts for no proc.
    pub fn acting_for(mut self, pid: &str) -> Client {
        self.proc_pid = pid.to_string();
        self
    }

    /// The proc this client acts for, if any.
    pub fn proc_pid(&self) -> Option<&str> {
        (!self.proc_pid.is_empty()).then_some(self.proc_pid.as_str())
    }

    /// Runs a read-only SQL query on the node.
    pub async fn sql(&mut self, sql: &str, params: Vec<Value>) -> Result<QueryResult, Error> {
        self.sql_limited(sql, params, 0).await
    }

    /// Like [`sql`](Client::sql), returning at most `max_rows` rows (0: the
    /// node's default).
    pub async fn sql_limited(
        &mut self,
        sql: &str,
        params: Vec<Value>,
        max_rows: u32,
    ) -> Result<QueryResult, Error> {
        self.sql_in("", sql, params, max_rows).await
    }

    /// Like [`sql_limited`](Client::sql_limited), seeing what `realm`'s
    /// admin sees: its rows of the OS-state views and its tenant tables
    /// ("": the credential's own scope — everything for an operator).
    pub async fn sql_in(
        &mut self,
        realm: &str,
        sql: &str,
        params: Vec<Value>,
        max_rows: u32,
    ) -> Result<QueryResult, Error> {
        let request = proto::SqlRequest {
            realm: realm.to_string(),
            sql: sql.to_string(),
            params: params
                .into_iter()
                .map(|k| proto::Value { kind: Some(k) })
                .collect(),
            max_rows,
        };
        let response = self.sql.query(request).await?.into_inner();
        Ok(QueryResult {
            columns: response.columns,
            rows: response
                .rows
                .into_iter()
                .map(|r| r.values.into_iter().map(|v| v.kind).collect())
                .collect(),
            truncated: response.truncated,
        })
    }

    /// Creates a realm with the given scheduler; needs an operator credential. The reply holds the
    /// realm's first admin credential.
    pub async fn create_realm(
        &mut self,
        realm: &str,
        scheduler: proto::Scheduler,
    ) -> Result<proto::CreateRealmResponse, Error> {
        Ok(self
            .procs
            .create_realm(proto::CreateRealmRequest {
                realm: realm.into(),
                scheduler: scheduler.into(),
                elastic: None,
            })
            .await?
            .into_inner())
    }

    /// Creates an elastic realm (operators only): its cores are granted on
    /// elastic nodes by the cluster manager, between the policy's bounds.
    pub async fn create_elastic_realm(
        &mut self,
        realm: &str,
        scheduler: proto::Scheduler,
        policy: proto::ElasticPolicy,
    ) -> Result<proto::CreateRealmResponse, Error> {
        Ok(self
            .procs
            .create_realm(proto::CreateRealmRequest {
                realm: realm.into(),
                scheduler: scheduler.into(),
                elastic: Some(policy),
            })
            .await?
            .into_inner())
    }

    /// Changes an elastic realm's policy (operators only).
    pub async fn set_elastic(
        &mut self,
        realm: &str,
        policy: proto::ElasticPolicy,
    ) -> Result<proto::RealmAllocation, Error> {
        Ok(self
            .node
            .set_elastic(proto::SetElasticRequest {
                realm: realm.into(),
                policy: Some(policy),
            })
            .await?
            .into_inner())
    }

    /// A realm's allocation with its latest `limit` decisions (0: 100).
    pub async fn allocation(
        &mut self,
        realm: &str,
        limit: u32,
    ) -> Result<proto::RealmAllocation, Error> {
        Ok(self
            .node
            .allocation(proto::AllocationRequest {
                realm: realm.into(),
                limit,
            })
            .await?
            .into_inner())
    }

    /// The allocation settings and the managers' leaders, after setting
    /// `set` (operators only).
    pub async fn alloc_settings(
        &mut self,
        set: std::collections::HashMap<String, i64>,
    ) -> Result<proto::AllocSettingsResponse, Error> {
        Ok(self
            .node
            .alloc_settings(proto::AllocSettingsRequest { set })
            .await?
            .into_inner())
    }

    /// The managers' latest `limit` decisions (about `realm`, or all when
    /// empty), oldest first (operators only).
    pub async fn decisions(
        &mut self,
        realm: &str,
        limit: u32,
    ) -> Result<Vec<proto::AllocDecision>, Error> {
        Ok(self
            .node
            .decisions(proto::DecisionsRequest {
                realm: realm.into(),
                limit,
            })
            .await?
            .into_inner()
            .decisions)
    }

    /// Sets a realm's quotas (operators only).
    pub async fn set_realm(
        &mut self,
        request: proto::SetRealmRequest,
    ) -> Result<proto::RealmInfo, Error> {
        Ok(self.procs.set_realm(request).await?.into_inner())
    }

    /// Deletes a realm and everything of it (operators only); returns the
    /// rows deleted.
    pub async fn remove_realm(&mut self, realm: &str) -> Result<i64, Error> {
        Ok(self
            .procs
            .remove_realm(proto::RemoveRealmRequest {
                realm: realm.into(),
            })
            .await?
            .into_inner()
            .rows)
    }

    /// Realms with their usage and quotas (an operator's: all).
    pub async fn list_realms(&mut self) -> Result<Vec<proto::RealmInfo>, Error> {
        Ok(self
            .procs
            .list_realms(proto::ListRealmsRequest {})
            .await?
            .into_inner()
            .realms)
    }

    /// Creates a credential (see `proto::CreateTokenRequest`); the token is
    /// in the reply and nowhere else.
    pub async fn create_token(
        &mut self,
        request: proto::CreateTokenRequest,
    ) -> Result<proto::CreatedToken, Error> {
        Ok(self.tokens.create(request).await?.into_inner())
    }

    /// The credentials of `realm` (empty: the caller's, or for an operator
    /// every realm's), procs' too when `procs`.
    pub async fn list_tokens(
        &mut self,
        realm: &str,
        procs: bool,
    ) -> Result<Vec<proto::TokenInfo>, Error> {
        Ok(self
            .tokens
            .list(proto::ListTokensRequest {
                realm: realm.into(),
                procs,
            })
            .await?
            .into_inner()
            .tokens)
    }

    /// Revokes credential `id`.
    pub async fn revoke_token(&mut self, id: &str) -> Result<(), Error> {
        self.tokens
            .revoke(proto::RevokeTokenRequest { id: id.into() })
            .await?;
        Ok(())
    }

    /// The caller's own credential: realm, user, role.
    pub async fn who_am_i(&mut self) -> Result<proto::TokenInfo, Error> {
        Ok(self.tokens.who_am_i(proto::Empty {}).await?.into_inner())
    }

    /// σOS Spawn: returns the pid and the worker chosen (empty if deferred).
    pub async fn spawn(
        &mut self,
        realm: &str,
        proc: proto::ProcDescriptor,
    ) -> Result<proto::Spawned, Error> {
        self.spawn_fenced(realm, proc, None).await
    }

    /// [`spawn`](Client::spawn), refused ("stale epoch") if the fence's
    /// directory has seen a newer epoch.
    pub async fn spawn_fenced(
        &mut self,
        realm: &str,
        proc: proto::ProcDescriptor,
        fence: Option<proto::Fence>,
    ) -> Result<proto::Spawned, Error> {
        Ok(self
            .procs
            .spawn(proto::SpawnRequest {
                realm: realm.into(),
                proc: Some(proc),
                fence,
            })
            .await?
            .into_inner())
    }

    /// σOS SpawnBurst: all of `procs` in one transaction.
    pub async fn spawn_burst(
        &mut self,
        realm: &str,
        procs: Vec<proto::ProcDescriptor>,
    ) -> Result<Vec<proto::Spawned>, Error> {
        Ok(self
            .procs
            .spawn_burst(proto::SpawnBurstRequest {
                realm: realm.into(),
                procs,
            })
            .await?
            .into_inner()
            .procs)
    }

    fn pid(realm: &str, pid: &str) -> proto::PidRequest {
        proto::PidRequest {
            realm: realm.into(),
            pid: pid.into(),
        }
    }

    /// σOS WaitStart.
    pub async fn wait_start(&mut self, realm: &str, pid: &str) -> Result<proto::ProcStatus, Error> {
        Ok(self
            .procs
            .wait_start(Self::pid(realm, pid))
            .await?
            .into_inner())
    }

    /// σOS WaitExit: the final status, with the exit status.
    pub async fn wait_exit(&mut self, realm: &str, pid: &str) -> Result<proto::ProcStatus, Error> {
        Ok(self
            .procs
            .wait_exit(Self::pid(realm, pid))
            .await?
            .into_inner())
    }

    /// σOS WaitEvict.
    pub async fn wait_evict(&mut self, realm: &str, pid: &str) -> Result<proto::ProcStatus, Error> {
        Ok(self
            .procs
            .wait_evict(Self::pid(realm, pid))
            .await?
            .into_inner())
    }

    /// σOS Started, for a proc that reports for itself.
    pub async fn started(&mut self, realm: &str, pid: &str) -> Result<(), Error> {
        self.procs.started(Self::pid(realm, pid)).await?;
        Ok(())
    }

    /// σOS Exited, for a proc that reports for itself.
    pub async fn exited(&mut self, realm: &str, pid: &str, status: i64) -> Result<(), Error> {
        self.procs
            .exited(proto::ExitedRequest {
                realm: realm.into(),
                pid: pid.into(),
                status,
            })
            .await?;
        Ok(())
    }

    /// σOS Evict.
    pub async fn evict(&mut self, realm: &str, pid: &str) -> Result<(), Error> {
        self.procs.evict(Self::pid(realm, pid)).await?;
        Ok(())
    }

    /// A proc's current status.
    pub async fn proc_status(
        &mut self,
        realm: &str,
        pid: &str,
    ) -> Result<proto::ProcStatus, Error> {
        Ok(self.procs.status(Self::pid(realm, pid)).await?.into_inner())
    }

    /// A proc's log so far, then what it writes as it writes it, until it
    /// has ended (FollowLogs).
    pub async fn follow_logs(
        &mut self,
        realm: &str,
        pid: &str,
        stream: proto::LogStream,
    ) -> Result<tonic::Streaming<proto::LogsResponse>, Error> {
        self.follow_logs_with(realm, pid, stream, LogsWant::default())
            .await
    }

    /// [`follow_logs`](Client::follow_logs) from a time or the last lines.
    pub async fn follow_logs_with(
        &mut self,
        realm: &str,
        pid: &str,
        stream: proto::LogStream,
        want: LogsWant,
    ) -> Result<tonic::Streaming<proto::LogsResponse>, Error> {
        Ok(self
            .procs
            .follow_logs(want.request(realm, pid, stream))
            .await?
            .into_inner())
    }

    /// Forgets ended procs: `pids` (each must have ended), or with none
    /// every proc that ended over `older_than_ms` ago (0: any); returns
    /// the pids removed.
    pub async fn prune(
        &mut self,
        realm: &str,
        pids: Vec<String>,
        older_than_ms: u64,
    ) -> Result<Vec<String>, Error> {
        Ok(self
            .procs
            .prune(proto::PruneRequest {
                realm: realm.into(),
                pids,
                older_than_ms,
            })
            .await?
            .into_inner()
            .pids)
    }

    /// A proc's stdout or stderr as the cluster keeps it.
    pub async fn logs(
        &mut self,
        realm: &str,
        pid: &str,
        stream: proto::LogStream,
    ) -> Result<proto::LogsResponse, Error> {
        self.logs_with(realm, pid, stream, LogsWant::default())
            .await
    }

    /// [`logs`](Client::logs) from a time or the last lines.
    pub async fn logs_with(
        &mut self,
        realm: &str,
        pid: &str,
        stream: proto::LogStream,
        want: LogsWant,
    ) -> Result<proto::LogsResponse, Error> {
        Ok(self
            .procs
            .logs(want.request(realm, pid, stream))
            .await?
            .into_inner())
    }

    /// The node's status.
    pub async fn status(&mut self) -> Result<proto::StatusResponse, Error> {
        Ok(self
            .node
            .status(proto::StatusRequest {})
            .await?
            .into_inner())
    }

    /// The cluster's nodes, in id order.
    pub async fn list_nodes(&mut self) -> Result<Vec<proto::NodeInfo>, Error> {
        Ok(self
            .node
            .list_nodes(proto::ListNodesRequest {})
            .await?
            .into_inner()
            .nodes)
    }

    /// Forgets node `node_id`, which must have left or be lost (operator).
    pub async fn remove_node(&mut self, node_id: &str) -> Result<(), Error> {
        self.node
            .remove_node(proto::RemoveNodeRequest {
                node_id: node_id.to_string(),
            })
            .await?;
        Ok(())
    }

    /// Drains node `node_id` (`drain`) or puts it back in service
    /// (operator); see the `DrainNode` RPC.
    pub async fn drain_node(
        &mut self,
        node_id: &str,
        drain: bool,
    ) -> Result<proto::DrainNodeResponse, Error> {
        Ok(self
            .node
            .drain_node(proto::DrainNodeRequest {
                node_id: node_id.to_string(),
                drain,
            })
            .await?
            .into_inner())
    }

    /// Backs the node up into `dest`, a new directory on its machine
    /// (operator); see the `Backup` RPC.
    pub async fn backup(&mut self, dest: &str) -> Result<proto::BackupResponse, Error> {
        Ok(self
            .node
            .backup(proto::BackupRequest {
                dest: dest.to_string(),
            })
            .await?
            .into_inner())
    }

    /// Creates named mailbox `name`; `bytes_max` 0 takes the node's default
    /// bound, `log_delivered` `None` the node's default.
    pub async fn create_mailbox(
        &mut self,
        realm: &str,
        name: &str,
        bytes_max: i64,
        log_delivered: Option<bool>,
    ) -> Result<(), Error> {
        self.ipc
            .create_mailbox(proto::CreateMailboxRequest {
                realm: realm.into(),
                name: name.into(),
                bytes_max,
                log_delivered,
            })
            .await?;
        Ok(())
    }

    /// Removes named mailbox `name`; returns how many queued messages went with it.
    pub async fn remove_mailbox(&mut self, realm: &str, name: &str) -> Result<u64, Error> {
        Ok(self
            .ipc
            .remove_mailbox(proto::RemoveMailboxRequest {
                realm: realm.into(),
                name: name.into(),
            })
            .await?
            .into_inner()
            .dropped)
    }

    /// Sends one message from `from` (empty: anonymous) to `to`; returns its seq.
    pub async fn send(
        &mut self,
        realm: &str,
        from: &str,
        to: &str,
        payload: Vec<u8>,
    ) -> Result<i64, Error> {
        let sent = self
            .send_many(
                realm,
                from,
                vec![proto::Outgoing {
                    to: to.into(),
                    payload,
                    message_id: String::new(),
                }],
            )
            .await?;
        Ok(sent.first().map_or(0, |s| s.seq))
    }

    /// Sends a batch (to one or several mailboxes) in one transaction.
    pub async fn send_many(
        &mut self,
        realm: &str,
        from: &str,
        messages: Vec<proto::Outgoing>,
    ) -> Result<Vec<proto::SentMessage>, Error> {
        self.send_fenced(realm, from, messages, None).await
    }

    /// [`send_many`](Client::send_many), refused ("stale epoch") — nothing
    /// sent — if the fence's directory has seen a newer epoch.
    pub async fn send_fenced(
        &mut self,
        realm: &str,
        from: &str,
        messages: Vec<proto::Outgoing>,
        fence: Option<proto::Fence>,
    ) -> Result<Vec<proto::SentMessage>, Error> {
        Ok(self
            .ipc
            .send(proto::SendRequest {
                realm: realm.into(),
                from: from.into(),
                messages,
                fence,
            })
            .await?
            .into_inner()
            .sent)
    }

    /// Sends the same payload to every mailbox in `to`, in one transaction.
    pub async fn multicast(
        &mut self,
        realm: &str,
        from: &str,
        to: &[String],
        payload: Vec<u8>,
    ) -> Result<Vec<proto::SentMessage>, Error> {
        let messages = to
            .iter()
            .map(|t| proto::Outgoing {
                to: t.clone(),
                payload: payload.clone(),
                message_id: String::new(),
            })
            .collect();
        self.send_many(realm, from, messages).await
    }

    fn recv_request(realm: &str, mailbox: &str, max: u32, timeout_ms: u32) -> proto::RecvRequest {
        proto::RecvRequest {
            realm: realm.into(),
            mailbox: mailbox.into(),
            max,
            timeout_ms,
        }
    }

    /// Takes up to `max` messages (0: the most the node gives), waiting up to
    /// `timeout_ms` for the first; empty when the wait ran out.
    pub async fn recv(
        &mut self,
        realm: &str,
        mailbox: &str,
        max: u32,
        timeout_ms: u32,
    ) -> Result<Vec<proto::Message>, Error> {
        Ok(self
            .ipc
            .recv(Self::recv_request(realm, mailbox, max, timeout_ms))
            .await?
            .into_inner()
            .messages)
    }

    /// Streams batches of messages as they arrive, until dropped.
    pub async fn recv_stream(
        &mut self,
        realm: &str,
        mailbox: &str,
        max: u32,
    ) -> Result<tonic::Streaming<proto::RecvResponse>, Error> {
        Ok(self
            .ipc
            .recv_stream(Self::recv_request(realm, mailbox, max, 0))
            .await?
            .into_inner())
    }

    /// The first `max` messages, left in the mailbox.
    pub async fn peek(
        &mut self,
        realm: &str,
        mailbox: &str,
        max: u32,
    ) -> Result<Vec<proto::Message>, Error> {
        Ok(self
            .ipc
            .peek(Self::recv_request(realm, mailbox, max, 0))
            .await?
            .into_inner()
            .messages)
    }

    /// A mailbox's counters and settings.
    pub async fn mailbox(
        &mut self,
        realm: &str,
        mailbox: &str,
    ) -> Result<proto::MailboxInfo, Error> {
        Ok(self
            .ipc
            .mailbox(proto::MailboxRequest {
                realm: realm.into(),
                mailbox: mailbox.into(),
            })
            .await?
            .into_inner())
    }
}

#[cfg(test)]
mod cut_short_tests {
    use super::Error;

    /// A wait cut short is asked again; an answer is not.
    #[test]
    fn cut_short_is_the_node_away_not_its_answer() {
        for s in [
            tonic::Status::unavailable("the node is stopping"),
            tonic::Status::deadline_exceeded("late"),
            tonic::Status::aborted("lost"),
            tonic::Status::unknown("h2 protocol error"),
        ] {
            assert!(Error::Status(s.clone()).is_cut_short(), "{s}");
        }
        for s in [
            tonic::Status::not_found("no proc"),
            tonic::Status::permission_denied("not yours"),
            tonic::Status::invalid_argument("bad pid"),
            tonic::Status::resource_exhausted("too many"),
        ] {
            assert!(!Error::Status(s.clone()).is_cut_short(), "{s}");
        }
        assert!(!Error::Invalid("x".into()).is_cut_short());
        assert!(!Error::Address("x".into()).is_cut_short());
    }
}
