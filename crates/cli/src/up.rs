//! `tabos up`: start a node.

use anyhow::Context;
use tabos_store::{Config, Durability};

#[derive(clap::Args)]
pub struct Args {
    /// Directory of the embedded SQLite database, of the node's operator
    /// credential (`operator.token`), of its local socket (`tabos.sock`,
    /// which clients on this machine use) and of its working files (`logs`:
    /// procs' jails, its copies of uploaded code); with --db, all but the
    /// first
    #[arg(long, default_value = "./tabos-data")]
    data: String,
    /// A postgres:// URL: keep the kernel database in PostgreSQL instead
    #[arg(long)]
    db: Option<String>,
    /// Address to serve the gRPC API on; one reachable beyond this machine
    /// (not loopback) needs --tls-cert and --tls-key
    #[arg(long, default_value = tabos_client::DEFAULT_ADDR)]
    listen: String,
    /// Address to serve the PostgreSQL wire protocol on (psql, psycopg,
    /// JDBC, Grafana: user = the realm, password = a credential), loopback
    /// only; `none` not to serve it. When the default is taken the node
    /// starts without it and says so
    #[arg(long, default_value = tabos_node::pg::LISTEN_DEFAULT, value_name = "ADDR|none")]
    pg_listen: String,
    /// Address to serve the dashboard on (a web page of the cluster's
    /// state; sign in with a credential) and /metrics for Prometheus (an
    /// operator's credential as Bearer), loopback only; `none` not to
    /// serve it. When the default is taken the node starts without it and
    /// says so
    #[arg(long, default_value = tabos_node::dashboard::LISTEN_DEFAULT, value_name = "ADDR|none")]
    http_listen: String,
    /// Serve TLS with this PEM certificate (chain)
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Do not save the operator credential as a context of the credentials
    /// file (it is always kept in DATA/operator.token)
    #[arg(long)]
    no_context: bool,
    /// Partitions of a new kernel database, 1..=8 (default: 8); a database
    /// keeps the count it was created with, and nodes of any size join it
    #[arg(long)]
    partitions: Option<u32>,
    /// Connections to the database: PostgreSQL's pool (writes and reads),
    /// SQLite's read connections; 1..=256
    #[arg(long, default_value_t = 8)]
    db_connections: usize,
    /// What a commit survives: off, normal (a crash of tabos) or full (power loss)
    #[arg(long, default_value = "normal")]
    durability: Durability,
    /// Pin each partition's executor thread to a core of its own (SQLite;
    /// best on a machine that runs tabos alone)
    #[arg(long)]
    pin_executors: bool,
    /// This node's name (default: node-<pid>)
    #[arg(long)]
    node_id: Option<String>,
    /// A label this node registers with, KEY=VALUE (repeatable; `tabos nodes` shows them)
    #[arg(long = "label", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// The API address to register for this node when it is not the listener's own (e.g. behind NAT)
    #[arg(long)]
    advertise: Option<String>,
    /// Offer this node's cores to elastic realms: the cluster manager grants them realm by realm (whole or partial machine), and the node serves only what it is granted — no static realm
    #[arg(long)]
    elastic: bool,
    /// Realm this node runs procs for (created if missing)
    #[arg(long, default_value = "default")]
    realm: String,
    /// Cores this node offers to procs (default: what the host, or the
    /// node's cgroup, lets it use)
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=4096))]
    cores: Option<i64>,
    /// Memory this node offers to procs, in MiB (default: what the host,
    /// or the node's cgroup, lets it use, less a reserve for the node:
    /// 10%, 256 MiB to 2 GiB)
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1 << 30))]
    mem_mib: Option<i64>,
    /// Heartbeat period in ms; a node silent for 3 periods is declared lost
    /// (nothing new is placed on it)
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    heartbeat_ms: u64,
    /// How long this node may fail to renew its lease (cut off from the
    /// database) before it stops its restartable procs itself; after that
    /// and a margin the cluster runs them elsewhere and fails its others.
    /// A database outage shorter than this fails no proc
    #[arg(long, default_value_t = tabos_node::DISCONNECT_GRACE_DEFAULT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(10..=86_400_000))]
    disconnect_grace_ms: u64,
    /// A directory of programs you installed that any realm's procs may run
    /// by path (repeatable). Besides these and this tabos executable's own
    /// directory, a proc runs only the system's programs (/usr, /bin, …),
    /// code uploaded with its spawn or in the realm's files (fs:/PATH), and
    /// programs under the host paths its realm is allowed
    #[arg(long = "program-dir", value_name = "DIR")]
    program_dirs: Vec<std::path::PathBuf>,
    /// Best-effort procs run while the node's measured busy cores (CPU used
    /// by its procs and itself) are under this percentage of its cores;
    /// latency-critical procs reserve theirs
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=tabos_node::procd::BE_UTIL_PCT_MAX as i64))]
    be_util_pct: u32,
    /// A proc left unclaimed on another node this long is stolen by this one
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    steal_after_ms: u64,
    /// Bound on a mailbox's queued bytes, for mailboxes created without one
    /// and for procs' mailboxes; a send past it is refused as "mailbox full"
    #[arg(long, default_value_t = tabos_kernel::ipc::MAILBOX_BYTES_DEFAULT, value_parser = clap::value_parser!(i64).range(1..=tabos_kernel::ipc::MAILBOX_BYTES_MAX))]
    mailbox_bytes_max: i64,
    /// MiB of procs' logs kept per realm (enforced by the appends of procs
    /// this node runs); past it the realm's oldest output is dropped first
    /// (what logs hold counts against the realm's storage quota)
    #[arg(long, default_value_t = tabos_node::procd::LOGS_PER_REALM_MAX >> 20, value_parser = clap::value_parser!(u64).range(0..=1 << 30))]
    logs_per_realm_mib: u64,
    /// Keep delivered messages in the message_log table (for provenance
    /// queries), for mailboxes that do not say otherwise
    #[arg(long)]
    log_messages: bool,
    /// Block store for large files' data: a file (formatted on first use)
    /// or a block device [default: DATA/blocks.dev; none with --db]
    #[arg(long, conflicts_with = "no_blocks")]
    blocks: Option<String>,
    /// Size of a new file-backed block store, in MiB (sparse until written)
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=16 << 20))]
    blocks_mib: u64,
    /// No block store: every file's data stays in the tables
    #[arg(long)]
    no_blocks: bool,
    /// A file a write takes past this many bytes moves its data to block
    /// segments
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(i64).range(0..=tabos_kernel::fs::files::SEGMENT_THRESHOLD_MAX))]
    segment_threshold: i64,
    /// How the node's diagnostics are written to stderr: text lines, or
    /// one JSON object per line (timestamp, level, target, fields, the
    /// call's span). Which are written: RUST_LOG (e.g. `warn`,
    /// `info,tabos::rpc=debug` for a line per API call with its method,
    /// realm, code and duration) [default filter: info]
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How `tabos up` writes the node's diagnostics.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Sends the node's `tracing` events to stderr in `format`, filtered by
/// RUST_LOG (else `default`); a RUST_LOG that does not parse is refused.
pub fn init_logs(format: LogFormat, default: &str) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(spec) => EnvFilter::try_new(&spec)
            .map_err(|e| anyhow::anyhow!("RUST_LOG={spec:?} is not a filter: {e}"))?,
        Err(_) => EnvFilter::new(default),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
    set.map_err(|e| anyhow::anyhow!("cannot set up the node's logs: {e}"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    init_logs(args.log_format, "info")?;
    let mut config = match &args.db {
        Some(url) => {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                anyhow::bail!("--db takes a postgres:// URL, not {url:?}");
            }
            Config::postgres(url.clone())
        }
        None => Config::sqlite(&args.data),
    };
    if let Some(p) = args.partitions {
        config = config.with_partitions(p);
    }
    config = config
        .with_connections(args.db_connections)
        .with_durability(args.durability)
        .with_pinned_executors(args.pin_executors);
    let where_ = match &args.db {
        Some(_) => "PostgreSQL".to_string(),
        None => format!("SQLite in {}", args.data),
    };
    let mut settings = tabos_node::NodeSettings::defaults();
    if let Some(id) = &args.node_id {
        settings.node_id = id.clone();
    }
    settings.realm = args.realm.clone();
    settings.labels = args.labels.iter().cloned().collect();
    settings.advertise = args.advertise.clone();
    settings.elastic = args.elastic;
    if let Some(c) = args.cores {
        settings.cores = c;
    }
    if let Some(m) = args.mem_mib {
        settings.mem_mb = m;
    }
    let offered = format!(
        "offering procs {} cores and {} MiB{}",
        settings.cores,
        settings.mem_mb,
        match (args.cores, args.mem_mib) {
            (Some(_), Some(_)) => " (as told)",
            _ => " (the rest of what the host lets this node use is its own reserve)",
        }
    );
    settings.heartbeat = std::time::Duration::from_millis(args.heartbeat_ms);
    settings.disconnect_grace = std::time::Duration::from_millis(args.disconnect_grace_ms);
    for d in &args.program_dirs {
        if !d.is_dir() {
            anyhow::bail!("--program-dir {}: not a directory", d.display());
        }
    }
    settings.program_dirs = args.program_dirs.clone();
    settings.be_util_pct = args.be_util_pct;
    settings.steal_after = std::time::Duration::from_millis(args.steal_after_ms);
    settings.logs_per_realm_max = args.logs_per_realm_mib << 20;
    settings.mailbox = tabos_kernel::ipc::MailboxOptions {
        bytes_max: args.mailbox_bytes_max,
        log_delivered: args.log_messages,
    };
    // The node's own working files (procs' jails, its copies of uploaded
    // code) are kept in the data directory whatever the database: each
    // node's own (a directory in the temp dir named by the node's id would
    // be shared by two nodes of that id on one machine, as tests run them).
    settings.logs = std::path::Path::new(&args.data).join("logs");
    let blocks = match (&args.blocks, &args.db) {
        _ if args.no_blocks => None,
        (Some(p), _) => Some(std::path::PathBuf::from(p)),
        (None, None) => Some(std::path::Path::new(&args.data).join("blocks.dev")),
        (None, Some(_)) => None,
    };
    settings.blocks = blocks.map(|p| tabos_node::BlockStoreSettings::new(p, args.blocks_mib << 20));
    settings.fs.segment_threshold = args.segment_threshold;
    // The block store and the operator credential go in the data
    // directory, which may not exist yet.
    std::fs::create_dir_all(&args.data).with_context(|| format!("cannot create {}", args.data))?;
    let tls = args.tls_cert.is_some();
    if !tls {
        refuse_plaintext_beyond_loopback("--listen", &args.listen)?;
    }
    // The PostgreSQL protocol is served without TLS: loopback only.
    let pg_listen = (args.pg_listen != "none").then(|| args.pg_listen.clone());
    if let Some(pg) = &pg_listen {
        refuse_plaintext_beyond_loopback("--pg-listen", pg)?;
    }
    // So is the dashboard.
    let http_listen = (args.http_listen != "none").then(|| args.http_listen.clone());
    if let Some(http) = &http_listen {
        refuse_plaintext_beyond_loopback("--http-listen", http)?;
    }
    let mut options = tabos_node::ServeOptions::default();
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        options = options.with_tls_files(cert, key)?;
    }
    // Descriptors for CONNECTIONS_MAX clients beside the store's pools:
    // the soft limit up to the hard one (procs get the old one back).
    match tabos_store::descriptors::raise_soft_limit() {
        Some(nofile) => tracing::info!("file descriptors: up to {nofile}"),
        None => tracing::warn!("file descriptors: the limit cannot be read (getrlimit failed)"),
    }
    // Below what the node holds at rest and room to accept, whichever
    // opening came first would keep the descriptors clients free, and the
    // node would stop accepting for good: refused before anything is
    // created, with what to do.
    tabos_store::descriptors::room_to_serve(config.descriptors_at_rest()?)?;
    let node = tabos_node::Node::open_with(&config, settings)
        .context("cannot open the kernel database")?;
    // The local socket, by its absolute path: the saved context reaches it
    // from any working directory.
    let socket = std::fs::canonicalize(&args.data)
        .with_context(|| format!("cannot resolve {}", args.data))?
        .join(tabos_node::LOCAL_SOCKET_NAME);
    let serve_local = socket.as_os_str().len() <= tabos_node::LOCAL_SOCKET_PATH_MAX;
    if !serve_local {
        outln!(
            "no local socket: {} is longer than a Unix socket path may be ({} bytes); clients use TCP",
            socket.display(),
            tabos_node::LOCAL_SOCKET_PATH_MAX
        );
    }
    let local_addr =
        serve_local.then(|| format!("{}{}", tabos_client::UNIX_SCHEME, socket.display()));
    let rt = crate::runtime()?;
    rt.block_on(async move {
        let stop = shutdown_signal()?;
        let listener = tabos_node::bind(&args.listen).await?;
        if serve_local {
            options.local_socket = Some(tabos_node::LocalSocket::bind(&socket)?);
        }
        let (pg, pg_said) = bind_side(
            pg_listen.as_deref(),
            tabos_node::pg::LISTEN_DEFAULT,
            "PostgreSQL protocol",
            "--pg-listen",
            |a| format!("PostgreSQL protocol on {a} (user = realm, password = a credential)"),
        )
        .await?;
        options.pg = pg;
        let (http, http_said) = bind_side(
            http_listen.as_deref(),
            tabos_node::dashboard::LISTEN_DEFAULT,
            "dashboard",
            "--http-listen",
            |a| format!("dashboard on http://{a}/ (sign in with a credential)"),
        )
        .await?;
        options.http = http;
        let addr = tabos_node::local_addr(&listener).map_or(args.listen.clone(), |a| a.to_string());
        outln!(
            "tabos node on {addr}: {where_}, {} partitions, durability {}{}",
            node.store.partitions(),
            node.store.durability(),
            if tls { ", TLS" } else { "" }
        );
        // Every call needs a credential: the operator's is kept in the data
        // directory (mode 0600) and, unless --no-context, saved as the
        // current context of the credentials file, so that the other
        // commands find it with no flag.
        let node_protections = node.confine.describe();
        let token_path = std::path::Path::new(&args.data).join(OPERATOR_TOKEN_FILE);
        let (token, new) = node
            .operator_credential_file(&token_path)
            .await
            .context("cannot set up the operator credential")?;
        outln!(
            "operator credential: {} ({})",
            token_path.display(),
            if new {
                "new"
            } else {
                "kept from an earlier start"
            }
        );
        outln!("{offered}");
        for line in node_protections.iter() {
            outln!("confinement: {line}");
        }
        if let Some(local) = &local_addr {
            outln!("local socket: {local}");
        }
        outln!("{pg_said}");
        outln!("{http_said}");
        if !args.no_context {
            // Clients on this machine use the local socket; without one,
            // TCP (and TLS when the node serves it).
            let (context_addr, tls_ca) = match &local_addr {
                Some(local) => (local.clone(), String::new()),
                // A self-signed certificate is its own authority.
                None => (
                    addr.clone(),
                    args.tls_cert
                        .as_ref()
                        .and_then(|c| std::fs::canonicalize(c).ok())
                        .map(|c| c.display().to_string())
                        .unwrap_or_default(),
                ),
            };
            let context = crate::credentials::Context {
                addr: context_addr,
                realm: String::new(),
                token,
                tls_ca,
            };
            match crate::credentials::File::save_context(&addr, context, true) {
                Ok(path) => outln!("saved as context {addr} (current) in {}", path.display()),
                Err(e) => outln!("not saved as a context ({e:#}): use --token or TABOS_TOKEN"),
            }
        }
        outln!("try: tabos sql \"SELECT * FROM schema_version\"   (Ctrl-C stops)");
        tabos_node::serve_with(node, listener, stop, options).await?;
        outln!("tabos node stopped");
        Ok(())
    })
}

/// The file in the data directory that holds the node's operator credential.
pub const OPERATOR_TOKEN_FILE: &str = "operator.token";

/// Credentials travel in every request, so a listener others can reach
/// must be TLS (--tls-cert, --tls-key); plaintext is for loopback only.
fn refuse_plaintext_beyond_loopback(flag: &str, listen: &str) -> anyhow::Result<()> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = listen
        .to_socket_addrs()
        .with_context(|| format!("{flag} {listen:?} is not host:port"))?
        .collect();
    if addrs.is_empty() || addrs.iter().any(|a| !a.ip().is_loopback()) {
        let remedy = if flag == "--listen" {
            "give --tls-cert and --tls-key, or listen on a loopback address (127.0.0.1:PORT)"
        } else {
            "the PostgreSQL protocol is served on a loopback address only (127.0.0.1:PORT)"
        };
        anyhow::bail!(
            "refusing to listen on {listen} in plaintext: credentials would cross the network \
             readable; {remedy}"
        );
    }
    Ok(())
}

/// The signals that stop the node, taken when this is called (not when the
/// future is first polled): the node registers itself as up before its
/// serve loop polls the future, and whoever sees it up and sends SIGTERM
/// must find the signal handled — the default action kills the process,
/// and it would leave the cluster uncleanly, its lease to lapse.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

/// `KEY=VALUE`.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("a label is KEY=VALUE, not {s:?}"))?;
    Ok((k.to_string(), v.to_string()))
}

/// Binds a front door beside the API (`what`, asked for with `flag`) on
/// `addr`, or not when `None`: the listener and the line `up` prints
/// (`served` of where it listens). The default address taken (another
/// node on this machine) starts the node without it; one asked for must
/// be served.
async fn bind_side(
    addr: Option<&str>,
    default: &str,
    what: &str,
    flag: &str,
    served: impl Fn(std::net::SocketAddr) -> String,
) -> anyhow::Result<(Option<tabos_node::SideListener>, String)> {
    let Some(addr) = addr else {
        return Ok((None, format!("no {what} ({flag} none)")));
    };
    match tabos_node::SideListener::bind(addr, what).await {
        Ok(l) => {
            let said = served(l.addr());
            Ok((Some(l), said))
        }
        Err(e) if addr == default => Ok((
            None,
            format!("no {what}: {e}; give {flag} ADDR to serve it"),
        )),
        Err(e) => Err(e.into()),
    }
}
