//! `tabos-node`: the node daemon.
//!
//! A node opens the kernel database ([`tabos_kernel::open`]) and serves the
//! gRPC API of `proto/tabos.proto` on a listener it is given ([`serve`]), until
//! a shutdown future completes — the mini-redis shape, so that tests run a
//! node in-process on port 0. Every request is authenticated by its bearer
//! credential ([`auth`]) before any service sees it. One file per RPC
//! family: [`sql`], [`status`], [`tokens`], [`procs`], [`ipc`], [`names`]
//! (with the session reaper), [`fs`], [`procedures`]; [`procd`], which
//! runs the procs scheduled onto this node's worker; and [`host`], the kernel
//! behind wasm procs' host calls.

pub mod auth;
pub mod batch;
pub mod budget;
pub mod cgroup;
pub mod confine;
pub mod conn;
pub mod dashboard;
pub mod doors;
pub use conn::{incoming, Conn};
pub mod forward;
pub mod fs;
pub mod grants;
pub mod host;
pub mod ipc;
pub mod jail;
pub mod lease;
pub mod load;
pub mod managers;
pub mod names;
pub mod op;
pub mod pg;
pub mod procd;
pub mod procedures;
pub mod procs;
pub mod seccomp;
pub mod size;
pub mod sql;
pub mod status;
pub mod tokens;
pub mod wire;
pub mod workflows;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use tabos_client::proto::batch_server::BatchServer;
use tabos_client::proto::fs_server::FsServer;
use tabos_client::proto::ipc_server::IpcServer;
use tabos_client::proto::names_server::NamesServer;
use tabos_client::proto::node_server::NodeServer;
use tabos_client::proto::procedures_server::ProceduresServer;
use tabos_client::proto::procs_server::ProcsServer;
use tabos_client::proto::sql_server::SqlServer;
use tabos_client::proto::tokens_server::TokensServer;
use tabos_client::proto::workflows_server::WorkflowsServer;
use tabos_client::MESSAGE_BYTES_MAX;
use tabos_kernel::ids::WorkerId;
use tabos_kernel::sched::{Scheduler, WorkerSpec};
use tabos_store::{Config, Store};
use tokio::net::TcpListener;

/// Errors of the node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kernel(#[from] tabos_kernel::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("node start-up failed: {0}")]
    Startup(String),
}

/// Where, under its logs directory, a node makes its procs' jails (roots
/// and working directories); not a realm's name, which has no dot.
pub const JAILS_DIR: &str = ".jails";

/// What a node is and offers to its realm.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub node_id: String,
    /// Where procd keeps procs' stdout and stderr.
    pub logs: PathBuf,
    /// Bytes of ended procs' logs kept per realm
    /// ([`procd::LOGS_PER_REALM_MAX`] by default); the oldest go first.
    pub logs_per_realm_max: u64,
    /// The realm this node's worker serves (created if missing).
    pub realm: String,
    /// Cores and memory the worker offers.
    pub cores: i64,
    pub mem_mb: i64,
    /// How often the node renews its worker's lease; a worker whose lease is
    /// [`LEASE_HEARTBEATS`] heartbeats old is declared lost by the others.
    pub heartbeat: std::time::Duration,
    /// How long it may fail to renew its lease before it stops its
    /// restartable procs itself — and after which, with a margin, the
    /// cluster gives its procs back to run elsewhere ([`lease`]). A
    /// database outage shorter than this fails no proc.
    pub disconnect_grace: std::time::Duration,
    /// BE procs run while the node's measured busy cores ([`load::Load`])
    /// are under this percentage of its cores (σOS Figure 3-5); at most
    /// [`procd::BE_UTIL_PCT_MAX`].
    pub be_util_pct: u32,
    /// A proc left unclaimed on another worker this long may be stolen by
    /// this node (σOS Figure 3-6).
    pub steal_after: std::time::Duration,
    /// Bound and logging of the mailboxes this node creates (named ones
    /// without their own bound, and procs' mailboxes).
    pub mailbox: tabos_kernel::ipc::MailboxOptions,
    /// Block sizes and the threshold past which a file's data moves to
    /// block segments.
    pub fs: tabos_kernel::fs::files::FsSettings,
    /// The block store for large files' data (`None`: every file stays in
    /// the tables).
    pub blocks: Option<BlockStoreSettings>,
    /// Longest a `tabos sql` query may run before it is stopped.
    pub query_time_max: std::time::Duration,
    /// Confine native procs (their realm's uid, cgroups) where the node
    /// can (it runs as root, the controllers are mounted).
    pub confine: bool,
    /// Labels the node registers with (`tabos nodes` shows them).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The API address other nodes and clients should use, when not the
    /// listener's own (e.g. behind NAT).
    pub advertise: Option<String>,
    /// Its cores are the cluster manager's to grant to elastic realms: it
    /// serves only the realms it is granted cores in, each with a worker of
    /// the granted size (`grants`), and no static realm.
    pub elastic: bool,
}

/// Where a node keeps its block store, and how big.
#[derive(Debug, Clone)]
pub struct BlockStoreSettings {
    /// A file (formatted on first use, sparse) or a block device.
    pub path: PathBuf,
    /// Size of a new file-backed store.
    pub bytes: u64,
    /// Shared block cache.
    pub cache_bytes: u64,
}

/// Block size of a node's block store.
pub const STORE_BLOCK_BYTES: u32 = 4096;

impl BlockStoreSettings {
    /// A store of `bytes` in `path`, with a 64 MiB cache.
    pub fn new(path: impl Into<PathBuf>, bytes: u64) -> BlockStoreSettings {
        BlockStoreSettings {
            path: path.into(),
            bytes,
            cache_bytes: 64 << 20,
        }
    }

    /// Opens the store, formatting it first if `path` does not exist yet.
    pub fn open(&self) -> Result<tabos_blockio::Device, Error> {
        let fail = |e: tabos_blockio::Error| {
            Error::Startup(format!("block store {}: {e}", self.path.display()))
        };
        if !self.path.exists() {
            tabos_blockio::Device::format(
                &self.path,
                &tabos_blockio::FormatOptions {
                    blocks: Some(self.bytes / u64::from(STORE_BLOCK_BYTES)),
                    block_size: STORE_BLOCK_BYTES,
                },
            )
            .map_err(fail)?;
        }
        tabos_blockio::Device::open(
            &self.path,
            (self.cache_bytes / u64::from(STORE_BLOCK_BYTES)) as usize,
        )
        .map_err(fail)
    }
}

/// Missed heartbeats after which a worker is declared lost.
pub const LEASE_HEARTBEATS: u32 = 3;
/// How long a node may fail to renew before it stops its restartable
/// procs (see [`NodeSettings::disconnect_grace`]).
pub const DISCONNECT_GRACE_DEFAULT: std::time::Duration = std::time::Duration::from_secs(60);

impl NodeSettings {
    /// One worker of this machine's size ([`size::detect`]: its cores, and
    /// its memory less the node's reserve), serving realm `default`; logs
    /// under the system temp dir.
    pub fn defaults() -> NodeSettings {
        let node_id = format!("node-{}", std::process::id());
        let size = size::detect();
        NodeSettings {
            logs: std::env::temp_dir().join(format!("tabos-logs-{node_id}")),
            logs_per_realm_max: procd::LOGS_PER_REALM_MAX,
            node_id,
            realm: "default".into(),
            cores: size.cores,
            mem_mb: size.mem_mib,
            heartbeat: std::time::Duration::from_secs(1),
            disconnect_grace: DISCONNECT_GRACE_DEFAULT,
            be_util_pct: 100,
            steal_after: std::time::Duration::from_millis(50),
            mailbox: tabos_kernel::ipc::MailboxOptions::default(),
            fs: tabos_kernel::fs::files::FsSettings::default(),
            blocks: None,
            query_time_max: sql::QUERY_TIME_MAX,
            confine: true,
            labels: std::collections::BTreeMap::new(),
            advertise: None,
            elastic: false,
        }
    }
}

/// A node: its database, settings and start time.
#[derive(Debug, Clone)]
pub struct Node {
    pub store: Store,
    pub started_us: i64,
    pub settings: NodeSettings,
    pub logs: PathBuf,
    /// Runs the node's wasm procs; its module cache is shared with the
    /// Spawn RPC, which compiles (and so validates) modules before spawning.
    pub sandbox: tabos_sandbox::Sandbox,
    /// The realms' stored procedures, run in that sandbox (one instance, so
    /// one memory of which path each procedure takes).
    pub procedures: tabos_kernel::procedures::Procedures,
    /// The filesystem, with the node's block store.
    pub files: tabos_kernel::fs::files::Files,
    /// The live credentials every request is checked against.
    pub auth: auth::Auth,
    /// How native procs are confined.
    pub confine: std::sync::Arc<confine::Confine>,
    /// Bytes of requests still arriving, over every connection.
    pub request_bytes: budget::RequestBytes,
    /// The node's measured CPU use, for BE admission.
    pub load: std::sync::Arc<load::Load>,
    /// Its standing in the cluster: its health on the database's clock,
    /// and whether it leads ([`lease`]).
    pub standing: std::sync::Arc<lease::Standing>,
    /// The gRPC servers' connection slots (TCP and the local socket) and
    /// who holds them.
    pub doors: conn::Slots,
    /// The PostgreSQL front door's and the dashboard's.
    pub pg_door: std::sync::Arc<pg::Door>,
    /// The channels each realm listens on at the PostgreSQL front door.
    pub pg_listens: std::sync::Arc<doors::PerRealm>,
    pub dashboard_door: std::sync::Arc<dashboard::Door>,
    /// The event streams each realm's dashboard sessions hold.
    pub dashboard_streams: std::sync::Arc<doors::PerRealm>,
    /// The dashboard's signed-in sessions.
    pub dashboard_sessions: std::sync::Arc<dashboard::Sessions>,
    /// Raised when the node's shutdown begins.
    pub stopping: Stopping,
}

/// Raised once when a node's shutdown begins: the calls that wait (a
/// dequeue, a workflow's end, a watch) and the streams end then, since a
/// graceful shutdown waits for every open call.
#[derive(Debug, Clone)]
pub struct Stopping(std::sync::Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Stopping {
    fn default() -> Stopping {
        Stopping(std::sync::Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl Stopping {
    /// Raises it (once is enough; again is harmless).
    pub fn raise(&self) {
        self.0.send_replace(true);
    }

    /// A receiver that sees it raised.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<bool> {
        self.0.subscribe()
    }

    /// Returns once it is raised.
    pub async fn raised(&self) {
        let _ = self.watch().wait_for(|s| *s).await;
    }
}

impl Node {
    /// Runs kernel procedure `f` in one transaction on `realm`'s
    /// partition, charged to `realm`, its error as a status
    /// ([`kernel_status`]): how every service's handler reaches the
    /// kernel's procedures.
    pub async fn call<T, F>(&self, realm: &str, f: F) -> Result<T, tonic::Status>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn tabos_store::Tx) -> tabos_kernel::Result<T> + Send + 'static,
    {
        tabos_kernel::call(&self.store, realm, f)
            .await
            .map_err(|e| kernel_status(&e))
    }

    /// [`Node::call`] for operations that only read: on a read connection.
    pub async fn read<T, F>(&self, realm: &str, f: F) -> Result<T, tonic::Status>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn tabos_store::Tx) -> tabos_kernel::Result<T> + Send + 'static,
    {
        tabos_kernel::read(&self.store, realm, f)
            .await
            .map_err(|e| kernel_status(&e))
    }

    /// Opens the kernel database for a node with default settings.
    pub fn open(config: &Config) -> Result<Node, Error> {
        Node::open_with(config, NodeSettings::defaults())
    }

    /// Opens the kernel database for a node.
    pub fn open_with(config: &Config, settings: NodeSettings) -> Result<Node, Error> {
        tabos_kernel::ids::validate_name("node id", &settings.node_id)?;
        tabos_kernel::validate_realm(&settings.realm)?;
        if settings.cores <= 0 || settings.be_util_pct > procd::BE_UTIL_PCT_MAX {
            return Err(Error::Startup(format!(
                "a node needs cores > 0 and a BE utilization target of at most {}%",
                procd::BE_UTIL_PCT_MAX
            )));
        }
        settings.mailbox.validate()?;
        let sandbox = tabos_sandbox::Sandbox::new()
            .map_err(|e| Error::Startup(format!("cannot start the wasm runtime: {e}")))?;
        let store = tabos_kernel::open(config)?;
        let device = settings.blocks.as_ref().map(|b| b.open()).transpose()?;
        let files =
            tabos_kernel::fs::files::Files::new(store.clone(), device, settings.fs.clone())?;
        let auth = auth::Auth::open(store.clone())?;
        let confine = std::sync::Arc::new(if settings.confine {
            confine::Confine::detect(&settings.node_id, &settings.logs.join(JAILS_DIR))
        } else {
            confine::Confine::none("confinement is off (node settings)")
        });
        let load = std::sync::Arc::new(load::Load::new(confine.load_source()));
        // Procs run as other uids: the database, block store and logs are
        // the node's alone.
        if let tabos_store::Location::Sqlite(dir) = &config.location {
            restrict_to_owner(dir)
                .map_err(|e| Error::Startup(format!("data directory {}: {e}", dir.display())))?;
        }
        std::fs::create_dir_all(&settings.logs)
            .and_then(|()| restrict_to_owner(&settings.logs))
            .map_err(|e| {
                Error::Startup(format!("log directory {}: {e}", settings.logs.display()))
            })?;
        Ok(Node {
            procedures: tabos_kernel::procedures::Procedures::new(store.clone(), sandbox.clone()),
            sandbox,
            files,
            auth,
            confine,
            request_bytes: budget::RequestBytes::new(budget::REQUEST_BYTES_MAX),
            load,
            standing: Default::default(),
            doors: conn::Slots::new(),
            pg_door: pg::door(),
            pg_listens: pg::listens(),
            dashboard_door: dashboard::door(),
            dashboard_streams: dashboard::streams(),
            dashboard_sessions: Default::default(),
            stopping: Stopping::default(),
            store,
            started_us: tabos_store::now_us(),
            logs: settings.logs.clone(),
            settings,
        })
    }

    /// Each door's connection limits and use, as `caller` may see them.
    pub fn door_uses(
        &self,
        caller: &tabos_kernel::auth::Caller,
    ) -> Vec<tabos_client::proto::DoorUse> {
        vec![
            doors::door_use("grpc", self.doors.door(), caller),
            doors::door_use("postgres", &self.pg_door, caller),
            doors::door_use("dashboard", &self.dashboard_door, caller),
        ]
    }

    /// What each realm holds open beyond its connections (gRPC calls,
    /// LISTEN channels, dashboard event streams and sessions) against its
    /// cap, as `caller` may see it.
    pub fn realm_caps(
        &self,
        caller: &tabos_kernel::auth::Caller,
    ) -> Vec<tabos_client::proto::RealmCap> {
        let counted = |what: &str, c: &doors::PerRealm| {
            doors::realm_cap(what, c.per_realm(), c.usage(), caller)
        };
        vec![
            counted("gRPC calls", self.doors.calls()),
            counted("postgres LISTEN channels", &self.pg_listens),
            counted("dashboard event streams", &self.dashboard_streams),
            doors::realm_cap(
                "dashboard sessions",
                dashboard::SESSIONS_PER_REALM_MAX,
                self.dashboard_sessions.per_realm(),
                caller,
            ),
        ]
    }

    /// Creates an operator credential (for a node hosted in-process: the
    /// demo, tests, benchmarks). The token is in the result only.
    pub async fn operator_credential(
        &self,
        note: &str,
    ) -> Result<tabos_kernel::auth::Minted, Error> {
        let spec = tabos_kernel::auth::Spec::operator(note);
        Ok(self.auth.create(spec).await?.0)
    }

    /// The operator credential kept in `path` (mode 0600): the one already
    /// there if it is still live, else a new one written there. Returns the
    /// token and whether it is new.
    pub async fn operator_credential_file(
        &self,
        path: &std::path::Path,
    ) -> Result<(String, bool), Error> {
        if let Ok(old) = std::fs::read_to_string(path) {
            let old = old.trim();
            if self.auth.check(old).is_some_and(|p| p.is_operator()) {
                return Ok((old.to_string(), false));
            }
        }
        let minted = self
            .operator_credential(&format!("operator of node {}", self.settings.node_id))
            .await?;
        let fail = |e: std::io::Error| {
            Error::Startup(format!(
                "cannot write the operator credential {}: {e}",
                path.display()
            ))
        };
        write_secret(path, format!("{}\n", minted.token).as_bytes()).map_err(fail)?;
        Ok((minted.token, true))
    }

    /// How long a heartbeat's lease lasts: [`LEASE_HEARTBEATS`] heartbeats.
    pub fn lease_us(&self) -> i64 {
        self.settings.heartbeat.as_micros() as i64 * i64::from(LEASE_HEARTBEATS)
    }

    /// The lease terms it registers and renews with: [`LEASE_HEARTBEATS`]
    /// heartbeats, and its grace ([`NodeSettings::disconnect_grace`], at
    /// least the lease).
    pub fn lease_terms(&self) -> tabos_kernel::nodes::LeaseTerms {
        let lease_us = self.lease_us();
        tabos_kernel::nodes::LeaseTerms {
            lease_us,
            grace_us: (self.settings.disconnect_grace.as_micros() as i64).max(lease_us),
        }
    }

    /// What this node registers in the cluster's `node` table, its API at
    /// `address` (or the advertised address, when set).
    pub fn registration(&self, address: &str) -> tabos_kernel::nodes::Registration {
        let s = &self.settings;
        tabos_kernel::nodes::Registration {
            node_id: s.node_id.clone(),
            address: s.advertise.clone().unwrap_or_else(|| address.to_string()),
            cores: s.cores,
            mem_mb: s.mem_mb,
            labels: s.labels.clone(),
            block_store: self.files.store_id(),
            elastic: s.elastic,
        }
    }

    /// This node's worker id in its realm.
    pub fn worker_id(&self) -> WorkerId {
        WorkerId(format!("{}.w0", self.settings.node_id))
    }

    /// Registers the node's worker in `realm`, creating the realm first if
    /// it is the node's own and missing.
    fn register_in(&self, realm: &str) -> Result<(), tabos_kernel::Error> {
        let s = &self.settings;
        if realm == s.realm {
            match tabos_kernel::realms::create(&self.store, &s.realm, Scheduler::Fifo) {
                Ok(()) | Err(tabos_kernel::Error::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // What an earlier process of this node id left claimed or running
        // ended with it (see `jail`'s lifeline): given back before the new
        // worker takes anything.
        let (worker, detail) = (
            self.worker_id(),
            format!("node {} restarted (its earlier process ended)", s.node_id),
        );
        let (r, now) = (realm.to_string(), tabos_store::now_us());
        self.store.call(
            tabos_kernel::realm_partition(realm, self.store.partitions()),
            move |tx| tabos_kernel::procs::restarted_tx(tx, &r, &worker, &detail, now),
        )?;
        tabos_kernel::procs::register_worker(&self.store, realm, &self.worker_spec())?;
        Ok(())
    }

    /// What this node's worker offers in each realm it serves.
    pub fn worker_spec(&self) -> WorkerSpec {
        let s = &self.settings;
        WorkerSpec {
            worker_id: self.worker_id(),
            node_id: s.node_id.clone(),
            cores: s.cores,
            mem_mb: s.mem_mb,
        }
    }
}

/// A node served in-process on a free loopback port, with an operator
/// credential: how the demo, tests and benchmarks host a node.
pub struct Embedded {
    /// The node's address and its operator credential.
    pub endpoint: tabos_client::Endpoint,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<Result<(), Error>>>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Embedded {
    /// Serves `node` on 127.0.0.1 (a free port) until [`Embedded::stop`]
    /// or drop.
    pub async fn start(node: Node) -> Result<Embedded, Error> {
        let operator = node.operator_credential("in-process node").await?;
        let listener = bind("127.0.0.1:0").await?;
        let addr = local_addr(&listener)
            .ok_or_else(|| Error::Startup("the listener has no address".into()))?
            .to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(serve(node, listener, async {
            let _ = stopped.await;
        }));
        Ok(Embedded {
            endpoint: tabos_client::Endpoint::new(addr, operator.token),
            stop: Some(stop),
            served: Some(served),
        })
    }

    /// The node's address.
    pub fn addr(&self) -> &str {
        &self.endpoint.addr
    }

    /// A client acting as the node's operator.
    pub async fn client(&self) -> Result<tabos_client::Client, tabos_client::Error> {
        self.endpoint.connect().await
    }

    /// Stops the node and waits until it has stopped.
    pub async fn stop(mut self) -> Result<(), Error> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.served.take() {
            Some(h) => h
                .await
                .map_err(|e| Error::Startup(format!("node task: {e}")))?,
            None => Ok(()),
        }
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Makes a directory the node's alone (mode 0700).
fn restrict_to_owner(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

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

/// Where a node served without a local socket of its own (an embedded
/// node: tests, the demo) puts the one its jailed procs reach it through:
/// beside their jails, or — past the length a socket path may have — in
/// the temp dir.
fn private_socket_path(node: &Node) -> std::path::PathBuf {
    let beside = node.settings.logs.join(JAILS_DIR).join("node.sock");
    if beside.as_os_str().len() <= LOCAL_SOCKET_PATH_MAX {
        return beside;
    }
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "tabos-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ))
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
    let tokens = TokensServer::new(tokens::TokensService::new(node.clone()))
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let sql = SqlServer::new(sql::SqlService::new(node.clone()))
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let status = NodeServer::new(status::StatusService::new(node.clone()))
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    // Raised when shutdown begins: open streams (watches, RecvStream,
    // FollowLogs) end then, since a graceful shutdown waits for every open
    // call.
    let stopping = node.stopping.watch();
    let procs_inner = procs::ProcsService::new(node.clone(), stopping.clone());
    let procs_service = ProcsServer::new(procs_inner.clone())
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
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
        names: names::NamesService::new(node.clone(), stopping.clone()),
        ipc: ipc::IpcService::new(node.clone(), stopping.clone()),
        fs: fs::FsService::new(node.clone()),
        procs: procs_inner,
        procedures: procedures::ProceduresService::new(node.clone()),
    };
    let ipc_service = IpcServer::new(batch.ipc.clone())
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let fs_service = FsServer::new(batch.fs.clone())
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let names_service = NamesServer::new(batch.names.clone())
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let procedures_service = ProceduresServer::new(batch.procedures.clone())
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let workflows_service = WorkflowsServer::new(workflows::WorkflowsService::new(node.clone()))
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let batch_service = BatchServer::new(batch)
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);

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
    // Give back file storage a crash left behind, before anyone writes.
    let orphans = node.files.recover().await?;
    if orphans > 0 {
        eprintln!(
            "node {}: removed {orphans} block segments no file named (a write cut short)",
            node.settings.node_id
        );
    }
    let (stop_procd, procd_stopped) = tokio::sync::watch::channel(false);
    let served_realms = ServedRealms::default();
    let procd_task = tokio::spawn(serve_realms(
        node.clone(),
        addr,
        served_realms.clone(),
        procd_stopped.clone(),
    ));
    let lease_task = tokio::spawn(lease::keep(
        node.clone(),
        served_realms.clone(),
        procd_stopped.clone(),
    ));
    let reaper_task = tokio::spawn(names::reap_sessions(node.clone(), procd_stopped.clone()));
    let managers_task = tokio::spawn(managers::run(node.clone(), procd_stopped.clone()));
    let load_task = tokio::spawn(node.load.clone().sample(procd_stopped.clone()));
    let reclaim_task = {
        let (files, stop) = (node.files.clone(), procd_stopped.clone());
        tokio::spawn(async move { files.follow_reclaims(stop).await })
    };
    let schedules_task = tokio::spawn(workflows::fire_schedules(
        node.clone(),
        procd_stopped.clone(),
    ));
    let auth_task = tokio::spawn(node.auth.clone().follow(procd_stopped));

    // One router per listener: TCP (with TLS when asked) and the local
    // socket (never TLS: it does not leave the machine), the same services
    // and layers, one count of connections.
    let router = |builder: tonic::transport::Server| {
        builder
            .layer(node.request_bytes.clone())
            .tcp_nodelay(true)
            .max_concurrent_streams(conn::STREAMS_PER_CONNECTION_MAX)
            .http2_keepalive_interval(Some(conn::KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(conn::KEEPALIVE_TIMEOUT))
            .add_service(InterceptedService::new(
                tokens.clone(),
                guard.closed_to_scoped("Tokens"),
            ))
            .add_service(InterceptedService::new(
                sql.clone(),
                guard.closed_to_scoped("Sql"),
            ))
            .add_service(InterceptedService::new(
                status.clone(),
                guard.closed_to_scoped("Node"),
            ))
            .add_service(InterceptedService::new(
                procs_service.clone(),
                guard.closed_to_scoped("Procs"),
            ))
            .add_service(InterceptedService::new(ipc_service.clone(), guard.clone()))
            .add_service(InterceptedService::new(
                names_service.clone(),
                guard.closed_to_scoped("Names"),
            ))
            .add_service(InterceptedService::new(
                fs_service.clone(),
                guard.closed_to_scoped("Fs"),
            ))
            .add_service(InterceptedService::new(
                procedures_service.clone(),
                guard.closed_to_scoped("Procedures"),
            ))
            .add_service(InterceptedService::new(
                workflows_service.clone(),
                guard.closed_to_scoped("Workflows"),
            ))
            .add_service(InterceptedService::new(
                batch_service.clone(),
                guard.clone(),
            ))
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
    let local_served = async {
        let r = match local_listener {
            Some(l) => {
                router(tonic::transport::Server::builder())
                    .serve_with_incoming_shutdown(
                        conn::incoming_shared(conn::Listener::Unix(l), options.limits, local_slots),
                        stopped(stopping.clone()),
                    )
                    .await
            }
            None => return Ok(()),
        };
        stop.raise();
        r
    };
    if let Some(pg) = options.pg.as_ref().and_then(SideListener::take) {
        tokio::spawn(pg::serve(node.clone(), pg, stopping.clone()));
    }
    let dashboard_task = options
        .http
        .as_ref()
        .and_then(SideListener::take)
        .map(|http| tokio::spawn(dashboard::serve(node.clone(), http, stopping.clone())));
    let servers = async { tokio::join!(tcp_served, local_served) };
    tokio::pin!(servers);
    let (tcp_served, local_served) = tokio::select! {
        r = &mut servers => r,
        () = shutdown => servers.await,
    };
    let served = tcp_served.and(local_served);
    let _ = stop_procd.send(true);
    let _ = procd_task.await;
    let _ = lease_task.await;
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
            Ok(e) if !(e.failed.is_empty() && e.requeued.is_empty()) => eprintln!(
                "node {}: stopping; in realm {realm} failed {:?}, re-queued {:?}",
                node.settings.node_id, e.failed, e.requeued
            ),
            Ok(_) => {}
            Err(e) => eprintln!(
                "node {}: cannot give back its procs in realm {realm}: {e}",
                node.settings.node_id
            ),
        }
    }
    if let Err(e) =
        tabos_kernel::nodes::leave(&node.store, &node.settings.node_id, node.started_us).await
    {
        eprintln!("node {}: cannot record leaving: {e}", node.settings.node_id);
    }
    if let Some(t) = dashboard_task {
        let _ = t.await;
    }
    let _ = reaper_task.await;
    let _ = managers_task.await;
    let _ = auth_task.await;
    let _ = schedules_task.await;
    let _ = reclaim_task.await;
    let _ = load_task.await;
    if let Some(local) = &options.local_socket {
        let _ = std::fs::remove_file(&local.path);
    }
    served?;
    Ok(())
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
    let shared = procd::Shared::node(node.settings.cores);
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
                        eprintln!(
                            "node {}: {why}; trying again in {pause:?}",
                            node.settings.node_id
                        );
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
                eprintln!("node {id}: cannot keep realm {realm} drained: {e}");
            }
            let procd = procd::Procd::new(
                node.store.clone(),
                node.files.clone(),
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
        Ok(Err(e)) => eprintln!("node {}: cannot list realms: {e}", node.settings.node_id),
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

/// Maps a kernel error onto a gRPC status: its typed reason (and what
/// the reason carries) as the status's detail, its code the reason's
/// ([`tabos_client::fault`]), and the message for people.
pub fn kernel_status(e: &tabos_kernel::Error) -> tonic::Status {
    use tabos_client::fault::{self, detail_of, ErrorReason as R, More};
    use tabos_kernel::Error as K;
    let plain = |reason: R, message: &str| fault::status(&detail_of(reason, ""), message);
    match e {
        K::Store(s) => status_of(s),
        K::Unavailable(m) => plain(R::Unavailable, m),
        K::Invalid(m) => plain(R::Invalid, m),
        K::TooLarge(m) => plain(R::TooLarge, m),
        K::NotFound(m) => plain(R::NotFound, m),
        K::AlreadyExists(m) => plain(R::AlreadyExists, m),
        K::Full(m) => plain(R::Full, m),
        K::Precondition(m) => plain(R::Precondition, m),
        K::Conflict(m) => plain(R::Conflict, m),
        K::Denied(_) => plain(R::Denied, &e.to_string()),
        K::Blocks(_) => plain(R::Internal, &e.to_string()),
        K::NotADirectory(path) => fault::status(&detail_of(R::NotADirectory, path), e.to_string()),
        K::IsADirectory(path, _) => fault::status(&detail_of(R::IsADirectory, path), e.to_string()),
        K::NotEmpty(path) => fault::status(&detail_of(R::NotEmpty, path), e.to_string()),
        K::StaleEpoch { current, given, .. } => {
            let mut d = detail_of(R::StaleEpoch, "");
            d.more = Some(More::StaleEpoch(fault::StaleEpochDetail {
                current: *current,
                given: *given,
            }));
            fault::status(&d, e.to_string())
        }
        K::OverQuota {
            quota,
            used,
            limit,
            message,
        } => {
            let mut d = detail_of(R::OverQuota, "");
            d.more = Some(More::OverQuota(fault::OverQuotaDetail {
                quota: quota.to_string(),
                used: *used,
                limit: *limit,
            }));
            fault::status(&d, message)
        }
        // Reached here only when it could not be forwarded to the holder.
        K::OnBlockStore { path, .. } => {
            fault::status(&detail_of(R::Unavailable, path), e.to_string())
        }
        // A failed procedure changed nothing: PROCEDURE_FAILED (INVALID for
        // code that does not compile and limits out of range), with its log
        // after the message.
        K::Procedure { name, error } => {
            let mut msg = e.to_string();
            for line in &error.log {
                msg.push_str("\nlog: ");
                msg.push_str(line);
            }
            let reason = match error.kind {
                tabos_sandbox::FailureKind::Invalid | tabos_sandbox::FailureKind::Limit => {
                    R::Invalid
                }
                _ => R::ProcedureFailed,
            };
            fault::status(&detail_of(reason, name), msg)
        }
        K::Mounted { path, target, rest } => {
            // The parts in the detail, so clients resolve without parsing.
            let mut d = detail_of(R::Mounted, path);
            d.more = Some(More::Mounted(fault::MountedDetail {
                path: path.clone(),
                target: target.clone(),
                rest: rest.clone(),
            }));
            fault::status(&d, e.to_string())
        }
    }
}

/// Writes `bytes` to `path` as a secret: to a new file with mode 0600 from
/// the start, synced, then renamed over the old one — never readable by
/// others, never half-written. (The operator credential, the CLI's
/// credentials file.)
pub fn write_secret(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The address a bound listener actually listens on.
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}

/// Maps a store error onto a gRPC status with a message a person can act
/// on, and its reason as the detail ([`kernel_status`]).
pub fn status_of(e: &tabos_store::Error) -> tonic::Status {
    use tabos_client::fault;
    fault::status(&fault::detail_of(store_reason(e), ""), e.to_string())
}

/// The reason of a store error (every door's, the PostgreSQL front door's
/// too).
pub fn store_reason(e: &tabos_store::Error) -> tabos_client::fault::ErrorReason {
    use tabos_client::fault::ErrorReason as R;
    use tabos_store::Error as E;
    match e {
        E::Sql(_) | E::Invalid(_) | E::Type(_) => R::Invalid,
        E::ReadOnly(_) => R::ReadOnly,
        E::OutOfScope(_) => R::Denied,
        E::UnknownPartition { .. } => R::NotFound,
        E::Limit { .. } => R::Full,
        E::Overloaded(_) => R::Overloaded,
        E::Aborted(_) | E::RetriesExhausted { .. } => R::Contended,
        E::Closed | E::Unavailable(_) => R::Unavailable,
        E::Timeout(_) => R::TimedOut,
        E::Cancelled(_) => R::Cancelled,
        _ => R::Internal,
    }
}
