//! Serving a node: its listeners (TCP, the local socket, the PostgreSQL
//! front door, the dashboard), the gRPC services behind one interceptor,
//! the realms it serves (a worker and a procd in each) and its background
//! tasks under one [`Supervisor`], started in order and stopped in
//! reverse.

use std::future::Future;
use std::net::SocketAddr;

use tabos_client::proto::batch_server::BatchServer;
use tabos_client::proto::fs_server::FsServer;
use tabos_client::proto::graphs_server::GraphsServer;
use tabos_client::proto::ipc_server::IpcServer;
use tabos_client::proto::names_server::NamesServer;
use tabos_client::proto::node_server::NodeServer;
use tabos_client::proto::procedures_server::ProceduresServer;
use tabos_client::proto::procs_server::ProcsServer;
use tabos_client::proto::sql_server::SqlServer;
use tabos_client::proto::tokens_server::TokensServer;
use tabos_client::proto::workflows_server::WorkflowsServer;
use tabos_client::MESSAGE_BYTES_MAX;
use tabos_kernel::sched::Scheduler;
use tokio::net::TcpListener;

use crate::supervise::{Policy, Supervisor};

/// A service's server, taking and giving messages of at most
/// [`MESSAGE_BYTES_MAX`] (tonic's default is 4 MiB in).
macro_rules! sized {
    ($server:ident, $service:expr) => {
        $server::new($service)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    };
}
use crate::{
    auth, batch, conn, dashboard, fs, grants, graphs, ipc, lease, local, managers, names, pg,
    procd, procedures, procs, sql, status, tokens, workflows, Error, Node, JAILS_DIR,
};

/// Binds `addr` (e.g. `127.0.0.1:7070`, or port 0 for any free port).
pub async fn bind(addr: &str) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })
}

/// The node's local socket in its data directory.
pub const LOCAL_SOCKET_NAME: &str = "tabos.sock";
/// Longest path a Unix socket may have (`sun_path` less its NUL).
pub const LOCAL_SOCKET_PATH_MAX: usize = 107;
/// How long a stopping node waits for its open calls to end — their
/// streams end when the stop begins ([`crate::streams`]), and what they
/// sent last is delivered to clients that read it — before it stops
/// without them: a client that reads nothing cannot hold a node up.
pub const DRAIN_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a node served without a local socket of its own (an embedded
/// node: tests, the demo) puts the one its jailed procs reach it through:
/// beside their jails, or — past the length a socket path may have — in
/// the temp dir. Named per node served in this process: embedded nodes
/// with default settings share their logs directory (it is named after
/// the process), and tests serve several at once — a fixed name made the
/// second one's start fail with "address in use" while the first served.
fn private_socket_path(node: &Node) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let beside = node
        .settings
        .logs
        .join(JAILS_DIR)
        .join(format!("node-{n}.sock"));
    if beside.as_os_str().len() <= LOCAL_SOCKET_PATH_MAX {
        return beside;
    }
    std::env::temp_dir().join(format!("tabos-{}-{n}.sock", std::process::id()))
}

/// A node's local Unix socket, bound (so clients may connect from then on)
/// and waiting to be served by [`serve_with`], which removes it when the
/// node stops.
#[derive(Clone)]
pub struct LocalSocket {
    path: std::path::PathBuf,
    listener: std::sync::Arc<std::sync::Mutex<Option<tokio::net::UnixListener>>>,
}

impl std::fmt::Debug for LocalSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSocket")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LocalSocket {
    /// Listens on the Unix socket `path`, within a Tokio runtime. A socket
    /// left there by a node that is gone is replaced; one a live node
    /// answers on is not. The socket is open to every user (mode 0666):
    /// who may reach it is decided by the directory it is in (a data
    /// directory is its owner's alone) and what a connection may do by its
    /// calls' credentials.
    pub fn bind(path: &std::path::Path) -> Result<LocalSocket, Error> {
        Ok(LocalSocket {
            path: path.to_path_buf(),
            listener: std::sync::Arc::new(std::sync::Mutex::new(Some(bind_local(path)?))),
        })
    }

    /// The listener, to the one server that serves it.
    fn take(&self) -> Option<tokio::net::UnixListener> {
        self.listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// See [`LocalSocket::bind`].
fn bind_local(path: &std::path::Path) -> Result<tokio::net::UnixListener, Error> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let fail = |source: std::io::Error| Error::Listen {
        addr: path.display().to_string(),
        source,
    };
    if path.as_os_str().len() > LOCAL_SOCKET_PATH_MAX {
        return Err(fail(std::io::Error::other(format!(
            "a Unix socket path has at most {LOCAL_SOCKET_PATH_MAX} bytes"
        ))));
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(fail(std::io::Error::other("something else is there")));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(fail(std::io::Error::from(std::io::ErrorKind::AddrInUse)));
        }
        std::fs::remove_file(path).map_err(fail)?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(fail)?;
    Ok(listener)
}

/// How [`serve_with`] serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Check every request's credential. Off only to measure what checking
    /// costs (`tabos-bench auth`): every request then acts as an operator.
    pub check_credentials: bool,
    /// Serve TLS (rustls) with this certificate chain and key, PEM.
    pub tls: Option<TlsIdentity>,
    /// What each connection may hold and how long it may idle.
    pub limits: conn::Limits,
    /// Also serve on this Unix socket (`tabos up`: the data directory's
    /// [`LOCAL_SOCKET_NAME`]), without TLS: the way clients on this
    /// machine, and the node's native procs, reach it.
    pub local_socket: Option<LocalSocket>,
    /// Also serve the PostgreSQL wire protocol ([`pg`]) on this listener.
    pub pg: Option<SideListener>,
    /// Also serve the dashboard ([`dashboard`]) on this listener.
    pub http: Option<SideListener>,
}

/// A TCP listener for a front door beside the API (the PostgreSQL wire
/// protocol, the dashboard), bound before the node serves (so that a
/// taken port is known at once) and taken by [`serve_with`].
#[derive(Clone)]
pub struct SideListener {
    addr: std::net::SocketAddr,
    listener: std::sync::Arc<std::sync::Mutex<Option<TcpListener>>>,
}

impl std::fmt::Debug for SideListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideListener")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl SideListener {
    /// Listens on `addr` (`host:port`; port 0 for any) for `what` (named
    /// in the error), within a Tokio runtime.
    pub async fn bind(addr: &str, what: &str) -> Result<SideListener, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Startup(format!("cannot listen on {addr} ({what}): {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Startup(e.to_string()))?;
        Ok(SideListener {
            addr,
            listener: std::sync::Arc::new(std::sync::Mutex::new(Some(listener))),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    fn take(&self) -> Option<TcpListener> {
        self.listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl ServeOptions {
    /// Serving with TLS from PEM files, as `tabos up --tls-cert --tls-key`.
    pub fn with_tls_files(
        mut self,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<ServeOptions, Error> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| Error::Startup(format!("cannot read {}: {e}", p.display())))
        };
        self.tls = Some(TlsIdentity {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        });
        Ok(self)
    }
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            check_credentials: true,
            tls: None,
            limits: conn::Limits::default(),
            local_socket: None,
            pg: None,
            http: None,
        }
    }
}

/// A server's TLS certificate chain and private key, PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("TlsIdentity").finish_non_exhaustive()
    }
}

/// Serves the node's API on `listener` until `shutdown` completes.
pub async fn serve(
    node: Node,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    serve_with(node, listener, shutdown, ServeOptions::default()).await
}

/// [`serve`] with options.
pub async fn serve_with(
    node: Node,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    mut options: ServeOptions,
) -> Result<(), Error> {
    use tonic::service::interceptor::InterceptedService;
    if options.local_socket.is_none() && node.confine.jailed() {
        // Jailed procs have a network of their own: the node's socket,
        // bound into their jails, is their way to it.
        options.local_socket = Some(LocalSocket::bind(&private_socket_path(&node))?);
    }
    // TLS first: a bad certificate or key stops the node before it does
    // anything else.
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &options.tls {
        let identity = tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem);
        builder = builder
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .map_err(|e| Error::Startup(format!("TLS: {e}")))?;
    }
    let guard = if options.check_credentials {
        node.auth.interceptor()
    } else {
        let spec = tabos_kernel::auth::Spec::operator("unchecked, for measurement");
        let (_, operator) = tabos_kernel::auth::create(&node.store, spec).await?;
        auth::Auth::unchecked_for_measurement(std::sync::Arc::new(operator))
    };
    let tokens = sized!(TokensServer, tokens::TokensService::new(node.clone()));
    let sql = sized!(SqlServer, sql::SqlService::new(node.clone()));
    let status = sized!(NodeServer, status::StatusService::new(node.clone()));
    // Raised when shutdown begins: open streams (watches, RecvStream,
    // FollowLogs) end then, since a graceful shutdown waits for every open
    // call.
    let stopping = node.stopping.watch();
    let procs_inner = procs::ProcsService::new(node.clone());
    let procs_service = sized!(ProcsServer, procs_inner.clone());
    let stop = &node.stopping;
    let shutdown = async move {
        shutdown.await;
        stop.raise();
    };
    // Both servers (TCP, the local socket) stop when shutdown begins.
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // The batch service hands its calls to these same instances.
    let batch = batch::BatchService {
        names: names::NamesService::new(node.clone()),
        ipc: ipc::IpcService::new(node.clone()),
        fs: fs::FsService::new(node.clone()),
        procs: procs_inner,
        procedures: procedures::ProceduresService::new(node.clone()),
    };
    let ipc_service = sized!(IpcServer, batch.ipc.clone());
    let fs_service = sized!(FsServer, batch.fs.clone());
    let names_service = sized!(NamesServer, batch.names.clone());
    let procedures_service = sized!(ProceduresServer, batch.procedures.clone());
    let workflows_service = sized!(
        WorkflowsServer,
        workflows::WorkflowsService::new(node.clone())
    );
    let graphs_service = sized!(GraphsServer, graphs::GraphsService::new(node.clone()));
    let batch_service = sized!(BatchServer, batch);

    // The node's own realm exists before anyone is served; its worker and
    // every other realm's are registered by serve_realms.
    let local_listener = match &options.local_socket {
        Some(local) => Some(
            local
                .take()
                .ok_or_else(|| Error::Startup("the local socket is served already".into()))?,
        ),
        None => None,
    };
    let addr = procd::NodeAddr {
        tcp: local_addr(&listener).map_or_else(String::new, |a| a.to_string()),
        local: options.local_socket.as_ref().map(|l| l.path.clone()),
    };
    let (n2, own) = (node.clone(), node.settings.realm.clone());
    tokio::task::spawn_blocking(move || {
        if n2.settings.elastic {
            // Its cores are granted realm by realm: no worker of its own.
            match tabos_kernel::realms::create(&n2.store, &own, Scheduler::Fifo) {
                Ok(()) | Err(tabos_kernel::Error::AlreadyExists(_)) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            n2.register_in(&own)
        }
    })
    .await
    .map_err(|e| Error::Startup(e.to_string()))??;
    // A cluster member from here on: listed, leased, and told apart when it
    // stops cleanly.
    tabos_kernel::nodes::register(
        &node.store,
        &node.registration(&addr.tcp),
        node.started_us,
        node.lease_terms(),
    )
    .await?;
    tracing::info!(
        node = %node.settings.node_id,
        api = %addr.tcp,
        realm = %node.settings.realm,
        "joined the cluster; serving"
    );
    // Give back file storage a crash left behind, before anyone writes.
    let orphans = node.files.recover().await?;
    if orphans > 0 {
        tracing::info!(
            node = %node.settings.node_id, "removed {orphans} block segments no file named (a write cut short)");
    }
    // The background tasks, in the order they start; they stop in reverse
    // (the doors, then procd while the heartbeat still holds the lease,
    // then the heartbeat, then the rest).
    let served_realms = ServedRealms::default();
    let mut tasks = Supervisor::new(&node.settings.node_id, node.stopping.clone());
    {
        let n = node.clone();
        tasks.spawn("load sampler", Policy::Restart, move |stop| {
            n.load.clone().sample(stop)
        });
    }
    if node.files.device().is_some() {
        let files = node.files.clone();
        tasks.spawn("block reclaimer", Policy::Restart, move |stop| {
            let files = files.clone();
            async move { files.follow_reclaims(stop).await }
        });
    }
    {
        let n = node.clone();
        tasks.spawn("workflow schedules", Policy::Restart, move |stop| {
            workflows::fire_schedules(n.clone(), stop)
        });
    }
    {
        let n = node.clone();
        tasks.spawn("graph scheduler", Policy::Restart, move |stop| {
            graphs::schedule(n.clone(), stop)
        });
    }
    {
        let auth = node.auth.clone();
        tasks.spawn("credentials follower", Policy::Restart, move |stop| {
            auth.clone().follow(stop)
        });
    }
    {
        let n = node.clone();
        tasks.spawn("managers", Policy::Restart, move |stop| {
            managers::run(n.clone(), stop)
        });
    }
    {
        let n = node.clone();
        tasks.spawn("session reaper", Policy::Restart, move |stop| {
            names::reap_sessions(n.clone(), stop)
        });
    }
    {
        let n = node.clone();
        tasks.spawn("retention reaper", Policy::Restart, move |stop| {
            crate::retention::reap(n.clone(), stop)
        });
    }
    {
        let (n, served) = (node.clone(), served_realms.clone());
        tasks.spawn("heartbeat", Policy::Essential, move |stop| {
            lease::keep(n.clone(), served.clone(), stop)
        });
    }
    {
        let (n, served) = (node.clone(), served_realms.clone());
        tasks.spawn("procd", Policy::Essential, move |stop| {
            serve_realms(n.clone(), addr.clone(), served.clone(), stop)
        });
    }

    // The API's routes: every service behind the interceptor; a scoped
    // credential reaches only Ipc and Batch (which checks each call itself).
    let closed = |service: &'static str| guard.closed_to_scoped(service);
    let routes = tonic::service::Routes::builder()
        .add_service(InterceptedService::new(tokens, closed("Tokens")))
        .add_service(InterceptedService::new(sql, closed("Sql")))
        .add_service(InterceptedService::new(status, closed("Node")))
        .add_service(InterceptedService::new(procs_service, closed("Procs")))
        .add_service(InterceptedService::new(ipc_service, guard.clone()))
        .add_service(InterceptedService::new(names_service, closed("Names")))
        .add_service(InterceptedService::new(fs_service, closed("Fs")))
        .add_service(InterceptedService::new(
            procedures_service,
            closed("Procedures"),
        ))
        .add_service(InterceptedService::new(
            workflows_service,
            closed("Workflows"),
        ))
        .add_service(InterceptedService::new(graphs_service, closed("Graphs")))
        .add_service(InterceptedService::new(batch_service, guard.clone()))
        .clone()
        .routes();
    // One gRPC router per listener: TCP (with TLS when asked) and the
    // local socket (never TLS: it does not leave the machine), the same
    // routes and layers, one count of connections.
    let router = |builder: tonic::transport::Server| {
        builder
            .layer(node.request_bytes.clone())
            .tcp_nodelay(true)
            .max_concurrent_streams(conn::STREAMS_PER_CONNECTION_MAX)
            .http2_keepalive_interval(Some(conn::KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(conn::KEEPALIVE_TIMEOUT))
            .add_routes(routes.clone())
    };
    let slots = node.doors.clone();
    let local_slots = slots.clone();
    // A server that ends on its own (an error) stops the other too.
    let tcp_served = async {
        let r = router(builder)
            .serve_with_incoming_shutdown(
                conn::incoming_shared(conn::Listener::Tcp(listener), options.limits, slots),
                stopped(stopping.clone()),
            )
            .await;
        stop.raise();
        r
    };
    // The local socket: the local transport's connections served by the
    // same routes under the same budget layer ([`local`]), gRPC's handed
    // to a gRPC server of their own.
    let local_served = async {
        let r = match local_listener {
            Some(l) => {
                let (grpc_tx, grpc_rx) = tokio::sync::mpsc::channel(1);
                let api = tower::ServiceBuilder::new()
                    .layer(node.request_bytes.clone())
                    .service(routes.clone().prepare());
                let framed = local::serve(
                    conn::incoming_shared(conn::Listener::Unix(l), options.limits, local_slots),
                    api,
                    grpc_tx,
                    stopping.clone(),
                );
                let grpc = router(tonic::transport::Server::builder())
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::ReceiverStream::new(grpc_rx),
                        stopped(stopping.clone()),
                    );
                tokio::join!(framed, grpc).1
            }
            None => return Ok(()),
        };
        stop.raise();
        r
    };
    if let Some(pg) = options.pg.as_ref().and_then(SideListener::take) {
        let n = node.clone();
        tasks.spawn_once("postgres door", move |stop| pg::serve(n, pg, stop));
    }
    if let Some(http) = options.http.as_ref().and_then(SideListener::take) {
        let n = node.clone();
        tasks.spawn_once("dashboard", move |stop| dashboard::serve(n, http, stop));
    }
    let servers = async { tokio::join!(tcp_served, local_served) };
    tokio::pin!(servers);
    let (tcp_served, local_served) = tokio::select! {
        r = &mut servers => r,
        () = shutdown => match tokio::time::timeout(DRAIN_MAX, &mut servers).await {
            Ok(r) => r,
            // Calls whose clients do not read what is sent to them (their
            // streams ended on the stop, but what was sent waits on the
            // client's flow-control window): not waited for any longer.
            Err(_) => {
                tracing::warn!(
                    node = %node.settings.node_id, "calls still open {DRAIN_MAX:?} after its shutdown began (their \
                     clients do not read); stopping without them");
                (Ok(()), Ok(()))
            }
        },
    };
    let served = tcp_served.and(local_served);
    let failed = tasks.shut_down().await;
    // Its procds have stopped what they ran: give the procs back now (re-
    // queued or failed, "node stopped") rather than a lease later.
    for realm in served_realms.list() {
        match tabos_kernel::procs::hand_back(
            &node.store,
            &realm,
            &node.worker_id(),
            &node.settings.node_id,
        )
        .await
        {
            Ok(e) if !(e.failed.is_empty() && e.requeued.is_empty()) => tracing::info!(
                node = %node.settings.node_id, "stopping; in realm {realm} failed {:?}, re-queued {:?}", e.failed, e.requeued),
            Ok(_) => {}
            Err(e) => tracing::error!(
                node = %node.settings.node_id, "cannot give back its procs in realm {realm}: {e}"),
        }
    }
    if let Err(e) =
        tabos_kernel::nodes::leave(&node.store, &node.settings.node_id, node.started_us).await
    {
        tracing::warn!(node = %node.settings.node_id, "cannot record leaving: {e}");
    }
    if let Some(local) = &options.local_socket {
        let _ = std::fs::remove_file(&local.path);
    }
    tracing::info!(node = %node.settings.node_id, "left the cluster; stopped");
    served?;
    match failed {
        Some(why) => Err(Error::Stopped(why)),
        None => Ok(()),
    }
}

/// One realm this node serves, with its procd once it runs.
type ServedRealm = (String, Option<procd::ProcdRef>);

/// The realms this node serves (has a worker and a procd in).
#[derive(Clone, Default)]
pub struct ServedRealms(std::sync::Arc<std::sync::Mutex<Vec<ServedRealm>>>);

impl std::fmt::Debug for ServedRealms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ServedRealms").field(&self.list()).finish()
    }
}

impl ServedRealms {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Option<procd::ProcdRef>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn list(&self) -> Vec<String> {
        self.lock().iter().map(|(r, _)| r.clone()).collect()
    }

    /// Removes `realm` (no longer served).
    pub fn remove(&self, realm: &str) {
        self.lock().retain(|(r, _)| r != realm);
    }

    /// Adds `realm`; false if it was served already.
    pub fn add(&self, realm: &str) -> bool {
        let mut v = self.lock();
        if v.iter().any(|(r, _)| r == realm) {
            return false;
        }
        v.push((realm.to_string(), None));
        true
    }

    /// Records the procd serving `realm` (while the realm is served).
    pub fn set_procd(&self, realm: &str, procd: procd::ProcdRef) {
        if let Some(entry) = self.lock().iter_mut().find(|(r, _)| r == realm) {
            entry.1 = Some(procd);
        }
    }

    /// The procds of the realms served now.
    pub fn procds(&self) -> Vec<procd::ProcdRef> {
        self.lock().iter().filter_map(|(_, p)| p.clone()).collect()
    }
}

/// First and longest pause before a node tries again to serve a realm it
/// could not begin to serve.
const SERVE_RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(100);
const SERVE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether this node serves `realm` (not if it is elastic, which elastic
/// nodes serve as granted), registered in it if so; what went wrong, said.
async fn begin_serving(node: &Node, realm: &str) -> Result<bool, String> {
    match tabos_kernel::alloc::get(&node.store, realm).await {
        Ok(None) => {}
        Ok(Some(_)) => return Ok(false),
        Err(e) => return Err(format!("cannot tell whether realm {realm} is elastic: {e}")),
    }
    let (n, r) = (node.clone(), realm.to_string());
    match tokio::task::spawn_blocking(move || n.register_in(&r)).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => Err(format!("cannot serve realm {realm}: {e}")),
        Err(e) => Err(format!(
            "cannot serve realm {realm}: its registration ended: {e}"
        )),
    }
}

/// One node serves every realm: a worker and a procd in each, all sharing
/// the node's cores (one busy-cores count, so BE admission is the node's).
/// Started for every realm that exists, and for each realm created later
/// (its creation is announced on the change feed), until `stop`; a realm
/// removed (announced likewise) is no longer served.
async fn serve_realms(
    node: Node,
    addr: procd::NodeAddr,
    served: ServedRealms,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if node.settings.elastic {
        return grants::serve(node, addr, served, stop).await;
    }
    let shared = procd::Shared {
        metrics: Some(node.metrics.clone()),
        code: Some(node.code.clone()),
        programs: node.programs.clone(),
        ..procd::Shared::node(node.settings.cores)
    };
    let mut procds = tokio::task::JoinSet::new();
    let mut created = node.store.subscribe(tabos_kernel::realms::CREATED_CHANNEL);
    let mut removed = node.store.subscribe(tabos_kernel::realms::REMOVED_CHANNEL);
    // Each realm's procd stops on its own (the realm was removed) or with
    // the node.
    let mut stops: std::collections::HashMap<String, tokio::sync::watch::Sender<bool>> =
        std::collections::HashMap::new();
    let start = |realm: String,
                 procds: &mut tokio::task::JoinSet<()>,
                 stops: &mut std::collections::HashMap<String, _>| {
        if !served.add(&realm) {
            return;
        }
        let (stop_tx, realm_stop) = tokio::sync::watch::channel(false);
        stops.insert(realm.clone(), stop_tx);
        let (node, addr, shared, served) =
            (node.clone(), addr.clone(), shared.clone(), served.clone());
        procds.spawn(async move {
            let mut realm_stop = realm_stop;
            // Trouble reading or registering (the database away, the
            // process out of descriptors) must not leave the realm unserved
            // for the node's life: tried again, with back-off, until it
            // works or the realm or node stops.
            let mut pauses = tabos_client::retry::Backoff::new(SERVE_RETRY_MIN, SERVE_RETRY_MAX);
            loop {
                match begin_serving(&node, &realm).await {
                    Ok(true) => break,
                    // An elastic realm is served by elastic nodes, as granted.
                    Ok(false) => {
                        served.remove(&realm);
                        return;
                    }
                    Err(why) => {
                        let pause = pauses.pause();
                        tracing::warn!(
                            node = %node.settings.node_id, "{why}; trying again in {pause:?}");
                        tokio::select! {
                            _ = realm_stop.changed() => {
                                served.remove(&realm);
                                return;
                            }
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
            }
            // A drained node stays drained in a realm it begins to serve
            // (created after the drain, or served again after a restart).
            let id = &node.settings.node_id;
            let drained = match tabos_kernel::nodes::is_draining(&node.store, id).await {
                Ok(true) => tabos_kernel::procs::drain(&node.store, &realm, id, true)
                    .await
                    .map(|_| ()),
                Ok(false) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = drained {
                tracing::warn!(node = %id, "cannot keep realm {realm} drained: {e}");
            }
            let procd = procd::Procd::new(
                node.store.clone(),
                node.files.clone(),
                node.procedures.clone(),
                &realm,
                node.worker_spec(),
                node.logs.clone(),
                addr,
                node.sandbox.clone(),
                procd::Policy {
                    cores: node.settings.cores,
                    be_util_pct: node.settings.be_util_pct,
                    steal_after: node.settings.steal_after,
                    mailbox: node.settings.mailbox,
                    logs_per_realm_max: node.settings.logs_per_realm_max,
                },
                node.auth.clone(),
                shared,
                node.load.clone(),
                node.confine.clone(),
                None,
                false,
            );
            served.set_procd(&realm, procd.clone());
            procd.run(realm_stop).await;
        });
    };
    let list = |node: &Node| {
        let store = node.store.clone();
        tokio::task::spawn_blocking(move || tabos_kernel::realms::list(&store))
    };
    // The node's own realm first (created if missing), then every other.
    start(node.settings.realm.clone(), &mut procds, &mut stops);
    match list(&node).await {
        Ok(Ok(realms)) => {
            for r in realms {
                start(r, &mut procds, &mut stops);
            }
        }
        Ok(Err(e)) => tracing::warn!(node = %node.settings.node_id, "cannot list realms: {e}"),
        Err(_) => {}
    }
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            n = created.recv() => match n {
                Ok(n) => start(n.payload, &mut procds, &mut stops),
                Err(_) => {
                    // Cut off: subscribe again, and look for what was missed.
                    created = node.store.subscribe(tabos_kernel::realms::CREATED_CHANNEL);
                    if let Ok(Ok(realms)) = list(&node).await {
                        for r in realms {
                            start(r, &mut procds, &mut stops);
                        }
                    }
                }
            },
            n = removed.recv() => match n {
                Ok(n) => {
                    if let Some(s) = stops.remove(&n.payload) {
                        let _ = s.send(true);
                    }
                    served.remove(&n.payload);
                }
                Err(_) => {
                    // Cut off: stop serving whatever no longer exists.
                    removed = node.store.subscribe(tabos_kernel::realms::REMOVED_CHANNEL);
                    if let Ok(Ok(realms)) = list(&node).await {
                        let gone: Vec<String> = stops
                            .keys()
                            .filter(|r| !realms.contains(r) && **r != node.settings.realm)
                            .cloned()
                            .collect();
                        for r in gone {
                            if let Some(s) = stops.remove(&r) {
                                let _ = s.send(true);
                            }
                            served.remove(&r);
                        }
                    }
                }
            },
            // A procd that ended is reaped here, so the set does not grow.
            Some(_) = procds.join_next(), if !procds.is_empty() => {}
        }
    }
    for s in stops.values() {
        let _ = s.send(true);
    }
    while procds.join_next().await.is_some() {}
}

/// Completes when the node begins to shut down.
pub async fn stopping(mut s: tokio::sync::watch::Receiver<bool>) {
    let _ = s.wait_for(|stopping| *stopping).await;
}

/// The address a bound listener actually listens on.
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}
