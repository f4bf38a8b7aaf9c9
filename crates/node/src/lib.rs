//! `tabos-node`: the node daemon.
//!
//! A node ([`Node`]: its settings, its kernel database and what it shares
//! with every door) opens the kernel database ([`tabos_kernel::open`]) and
//! serves the gRPC API of `proto/tabos.proto` on a listener it is given
//! ([`serve`], in [`mod@serve`]), until a shutdown future completes — the
//! mini-redis shape, so that tests run a node in-process on port 0
//! ([`Embedded`]). Every request is authenticated by its bearer credential
//! ([`auth`]) and served by operations ([`op`]) whose kernel calls check
//! the caller; errors reach clients as typed statuses ([`fault`]). One
//! file per RPC family: [`sql`], [`status`], [`tokens`], [`procs`],
//! [`ipc`], [`names`] (with the session reaper), [`fs`], [`procedures`],
//! [`workflows`]; [`procd`], which runs the procs scheduled onto this
//! node's worker; [`host`], the kernel behind wasm procs' host calls; and
//! [`supervise`], the background tasks' supervisor.
//!
//! Diagnostics are `tracing` events (fields `node` or `worker`), and every
//! RPC runs in a span carrying its method and realm ([`budget`]); the
//! process that runs the node (`tabos up`) chooses the filter and the
//! format. The node never prints.
#![cfg_attr(not(test), deny(clippy::print_stderr, clippy::print_stdout))]

pub mod auth;
pub mod batch;
pub mod budget;
pub mod cgroup;
pub mod code;
pub mod confine;
pub mod conn;
pub mod dashboard;
pub mod doors;
pub use conn::{incoming, Conn};
mod embedded;
pub use embedded::Embedded;
pub mod fault;
pub use fault::{kernel_status, status_of, store_reason};
pub mod forward;
pub mod fs;
pub mod grants;
pub mod graphs;
pub mod host;
pub mod ipc;
pub mod jail;
pub mod lease;
pub mod load;
pub mod local;
pub mod managers;
pub mod metrics;
pub mod names;
pub mod netns;
pub mod op;
pub mod pg;
pub mod procd;
pub mod procedures;
pub mod proclog;
pub mod procs;
pub mod programs;
pub mod rawsys;
pub mod retention;
pub mod seccomp;
pub mod serve;
pub use serve::{
    bind, local_addr, serve, serve_with, stopping, LocalSocket, ServeOptions, ServedRealms,
    SideListener, TlsIdentity, LOCAL_SOCKET_NAME, LOCAL_SOCKET_PATH_MAX,
};
pub mod size;
pub mod sql;
pub mod status;
pub mod streams;
pub mod supervise;
pub mod tokens;
pub mod wfproc;
pub mod wire;
pub mod workflows;

use std::path::PathBuf;

use tabos_kernel::ids::WorkerId;
use tabos_kernel::sched::{Scheduler, WorkerSpec};
use tabos_store::{Config, Store};

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
    /// A task the node cannot run without ended ([`supervise::Policy::Essential`]).
    #[error("the node stopped: {0}")]
    Stopped(String),
}

/// Where, under its logs directory, a node makes its procs' jails (roots
/// and working directories); not a realm's name, which has no dot.
pub const JAILS_DIR: &str = ".jails";
/// The code cache's directory in the node's log directory ([`code`]).
pub const CODE_CACHE_DIR: &str = ".code";

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
    /// Directories of programs its operator installed, which any realm's
    /// procs may run besides the system's and their allowed host paths
    /// ([`programs`]; the node's own executable's directory always is one).
    pub program_dirs: Vec<PathBuf>,
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
            program_dirs: Vec::new(),
        }
    }
}

/// A node: its database, settings and start time.
#[derive(Debug, Clone)]
pub struct Node {
    pub store: Store,
    /// Where its kernel database is (a backup of a node on PostgreSQL
    /// dumps it from there).
    pub db: tabos_store::Location,
    /// Its procd's worker id in every realm ([`WorkerId::of_node`]).
    worker: WorkerId,
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
    /// Which programs on the node procs may run.
    pub programs: std::sync::Arc<programs::Programs>,
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
    /// The file and name watches each realm's callers hold.
    pub watches: std::sync::Arc<doors::PerRealm>,
    /// What `/metrics` shows.
    pub metrics: std::sync::Arc<metrics::Metrics>,
    /// Its copies of uploaded code ([`code`]).
    pub code: std::sync::Arc<code::Cache>,
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
    /// Opens the kernel database for a node with default settings.
    pub fn open(config: &Config) -> Result<Node, Error> {
        Node::open_with(config, NodeSettings::defaults())
    }

    /// Opens the kernel database for a node.
    pub fn open_with(config: &Config, settings: NodeSettings) -> Result<Node, Error> {
        let node_id = tabos_kernel::ids::NodeId::new(&settings.node_id)?;
        let worker = WorkerId::of_node(&node_id)?;
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
        // The node's own data is never a proc's program.
        let mut private = vec![settings.logs.clone()];
        if let tabos_store::Location::Sqlite(dir) = &config.location {
            private.push(dir.clone());
        }
        private.extend(settings.blocks.as_ref().map(|b| b.path.clone()));
        let programs =
            std::sync::Arc::new(programs::Programs::new(&settings.program_dirs, &private));
        let metrics = std::sync::Arc::new(metrics::Metrics::new());
        let code = code::Cache::new(
            settings.logs.join(CODE_CACHE_DIR),
            code::CODE_CACHE_BYTES_MAX,
        )
        .map_err(|e| Error::Startup(format!("code cache in {}: {e}", settings.logs.display())))?;
        Ok(Node {
            code,
            db: config.location.clone(),
            worker,
            procedures: tabos_kernel::procedures::Procedures::new(store.clone(), sandbox.clone()),
            sandbox,
            files,
            auth,
            confine,
            programs,
            request_bytes: budget::RequestBytes::new(budget::REQUEST_BYTES_MAX)
                .observed_by(metrics.clone()),
            load,
            standing: Default::default(),
            doors: conn::Slots::new(),
            pg_door: pg::door(),
            pg_listens: pg::listens(),
            dashboard_door: dashboard::door(),
            dashboard_streams: dashboard::streams(),
            watches: streams::watches(),
            metrics,
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
            doors::door_use("api", self.doors.door(), caller),
            doors::door_use("postgres", &self.pg_door, caller),
            doors::door_use("dashboard", &self.dashboard_door, caller),
        ]
    }

    /// What each realm holds open beyond its connections (API calls,
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
            counted("API calls", self.doors.calls()),
            counted("postgres LISTEN channels", &self.pg_listens),
            counted("dashboard event streams", &self.dashboard_streams),
            counted("watches", &self.watches),
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
        self.worker.clone()
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

/// Makes a directory the node's alone (mode 0700).
fn restrict_to_owner(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
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
