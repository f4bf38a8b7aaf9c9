//! `tabos up`: start a node.

use anyhow::Context;
use tabos_store::{Config, Durability};

#[derive(clap::Args)]
pub struct Args {
    /// Directory of the embedded SQLite database
    #[arg(long, default_value = "./tabos-data", conflicts_with = "db")]
    data: String,
    /// A postgres:// URL: keep the kernel database in PostgreSQL instead
    #[arg(long)]
    db: Option<String>,
    /// Address to serve the gRPC API on
    #[arg(long, default_value = tabos_client::DEFAULT_ADDR)]
    listen: String,
    /// Number of partitions (fixed when the database is created; default: one per core)
    #[arg(long)]
    partitions: Option<u32>,
    /// What a commit survives: off, normal (a crash of tabos) or full (power loss)
    #[arg(long, default_value = "normal")]
    durability: Durability,
    /// This node's name (default: node-<pid>)
    #[arg(long)]
    node_id: Option<String>,
    /// Realm this node runs procs for (created if missing)
    #[arg(long, default_value = "default")]
    realm: String,
    /// Cores this node offers to procs (default: all)
    #[arg(long)]
    cores: Option<i64>,
    /// Heartbeat period in ms; a node silent for 3 periods is declared lost
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    heartbeat_ms: u64,
    /// Best-effort procs run while the node's busy cores are under this
    /// percentage of its cores; latency-critical procs reserve theirs
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=tabos_node::procd::BE_UTIL_PCT_MAX as i64))]
    be_util_pct: u32,
    /// A proc left unclaimed on another node this long is stolen by this one
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    steal_after_ms: u64,
    /// Bound on a mailbox's queued bytes, for mailboxes created without one
    /// and for procs' mailboxes; a send past it is refused as "mailbox full"
    #[arg(long, default_value_t = tabos_kernel::ipc::MAILBOX_BYTES_DEFAULT, value_parser = clap::value_parser!(i64).range(1..=tabos_kernel::ipc::MAILBOX_BYTES_MAX))]
    mailbox_bytes_max: i64,
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
}

pub fn run(args: Args) -> anyhow::Result<()> {
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
    config = config.with_durability(args.durability);
    let where_ = match &args.db {
        Some(_) => "PostgreSQL".to_string(),
        None => format!("SQLite in {}", args.data),
    };
    let mut settings = tabos_node::NodeSettings::defaults();
    if let Some(id) = &args.node_id {
        settings.node_id = id.clone();
    }
    settings.realm = args.realm.clone();
    if let Some(c) = args.cores {
        settings.cores = c;
    }
    settings.heartbeat = std::time::Duration::from_millis(args.heartbeat_ms);
    settings.be_util_pct = args.be_util_pct;
    settings.steal_after = std::time::Duration::from_millis(args.steal_after_ms);
    settings.mailbox = tabos_kernel::ipc::MailboxOptions {
        bytes_max: args.mailbox_bytes_max,
        log_delivered: args.log_messages,
    };
    // procs' stdout and stderr are kept beside the embedded database, or in
    // the temp dir when the database is PostgreSQL.
    settings.logs = match &args.db {
        Some(_) => std::env::temp_dir().join(format!("tabos-logs-{}", settings.node_id)),
        None => std::path::Path::new(&args.data).join("logs"),
    };
    let blocks = match (&args.blocks, &args.db) {
        _ if args.no_blocks => None,
        (Some(p), _) => Some(std::path::PathBuf::from(p)),
        (None, None) => Some(std::path::Path::new(&args.data).join("blocks.dev")),
        (None, Some(_)) => None,
    };
    settings.blocks = blocks.map(|p| tabos_node::BlockStoreSettings::new(p, args.blocks_mib << 20));
    settings.fs.segment_threshold = args.segment_threshold;
    if args.db.is_none() {
        // The block store goes beside the database, which may not exist yet.
        std::fs::create_dir_all(&args.data)
            .with_context(|| format!("cannot create {}", args.data))?;
    }
    let node = tabos_node::Node::open_with(&config, settings)
        .context("cannot open the kernel database")?;
    let rt = crate::runtime()?;
    rt.block_on(async move {
        let listener = tabos_node::bind(&args.listen).await?;
        let addr = tabos_node::local_addr(&listener).map_or(args.listen.clone(), |a| a.to_string());
        println!(
            "tabos node on {addr}: {where_}, {} partitions, durability {}",
            node.store.partitions(),
            node.store.durability()
        );
        println!("try: tabos sql --addr {addr} \"SELECT * FROM schema_version\"   (Ctrl-C stops)");
        tabos_node::serve(node, listener, shutdown_signal()).await?;
        println!("tabos node stopped");
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}
