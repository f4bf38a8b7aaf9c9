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
    let node = tabos_node::Node::open(&config).context("cannot open the kernel database")?;
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
