//! `tabos kv serve|get|set|status`: the sharded key-value service
//! (crates/apps/kv) — its kvd procs kept running and a Redis-protocol
//! front end; a clerk's get and set; what serves what. And the hidden
//! `tabos kv-task`, which is what the kvd procs run.

use anyhow::Context;
use tabos_kv::clerk::Clerk;
use tabos_kv::config::Policy;
use tabos_kv::service::{self, Program, Supervisor};

use crate::procs::RealmArg;
use crate::NodeAddr;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(clap::Args)]
struct Service {
    /// The service's name (its state is under /kv/NAME in the namespace)
    #[arg(long, default_value = "main")]
    service: String,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Subcommand)]
enum KvCommand {
    /// Run the service: create it if new, run its balancer procs (a leader
    /// and a standby), which keep the kvd procs running (one leader and
    /// standbys per group) and add and remove groups as the load asks; serve
    /// the Redis protocol on --listen (behind the service's password, in the
    /// namespace at /kv/NAME/password) until interrupted or terminated
    /// (which evicts the service's procs; the data stays in the kernel
    /// database)
    Serve {
        /// Shards (fixed when the service is created)
        #[arg(long, default_value_t = 16)]
        shards: u32,
        /// Groups when the service is created
        #[arg(long, default_value_t = 1)]
        groups: u32,
        /// kvd procs per group: one leads, the others stand by
        #[arg(long, default_value_t = 2)]
        kvds: u32,
        /// Fewest groups the balancer keeps
        #[arg(long, default_value_t = 1)]
        min_groups: u32,
        /// Most groups the balancer grows to (default: --groups, so no
        /// growth unless asked)
        #[arg(long)]
        max_groups: Option<u32>,
        /// A group is added when one serves more requests per second than this
        #[arg(long, default_value_t = 20_000.0)]
        grow_at: f64,
        /// A group is removed when all of the load would fit in one group
        /// fewer under this many requests per second each, for 10 s
        #[arg(long, default_value_t = 5_000.0)]
        shrink_at: f64,
        /// Where to serve the Redis protocol (redis-cli -p PORT)
        #[arg(long, default_value = "127.0.0.1:6380")]
        listen: String,
        /// Threads the Redis front end serves on, each connection whole on
        /// one (an event loop each, as nginx's workers) [default: half the
        /// cores, at least 1; at most 64]
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=tabos_kv::loops::LOOPS_MAX as i64))]
        threads: Option<u16>,
        #[command(flatten)]
        svc: Service,
    },
    /// Print a key's value (nothing and exit status 1 if it has none)
    Get {
        key: String,
        #[command(flatten)]
        svc: Service,
    },
    /// Set a key's value (acknowledged once durable)
    Set {
        key: String,
        value: String,
        #[command(flatten)]
        svc: Service,
    },
    /// The shard map, and each group's leader, shards, keys and load
    Status {
        #[command(flatten)]
        svc: Service,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        match args.command {
            KvCommand::Serve {
                shards,
                groups,
                kvds,
                min_groups,
                max_groups,
                grow_at,
                shrink_at,
                listen,
                threads,
                svc,
            } => {
                let policy = Policy {
                    kvds_per_group: kvds,
                    min_groups,
                    max_groups: max_groups.unwrap_or(groups.max(min_groups)),
                    grow_ops: grow_at,
                    shrink_ops: shrink_at,
                    ..Policy::default()
                };
                let threads = threads.map_or_else(tabos_kv::front::default_threads, usize::from);
                serve(shards, groups, &policy, &listen, threads, svc).await
            }
            KvCommand::Get { key, svc } => {
                let client = svc.node.connect().await?;
                let mut clerk = Clerk::new(&client, &svc.realm.realm, &svc.service).await?;
                match clerk.get(key.as_bytes()).await? {
                    Some(v) => {
                        crate::output::emit(
                            || String::from_utf8_lossy(&v).into_owned(),
                            || serde_json::json!({"key": key, "value": String::from_utf8_lossy(&v)}),
                        );
                        Ok(())
                    }
                    None => {
                        eprintln!("{key}: no value");
                        std::process::exit(1)
                    }
                }
            }
            KvCommand::Set { key, value, svc } => {
                let client = svc.node.connect().await?;
                let mut clerk = Clerk::new(&client, &svc.realm.realm, &svc.service).await?;
                clerk.set(key.as_bytes(), value.as_bytes()).await?;
                if crate::output::json() {
                    crate::output::doc(&serde_json::json!({"key": key, "set": true}));
                }
                Ok(())
            }
            KvCommand::Status { svc } => {
                let client = svc.node.connect().await?;
                let st = service::status(&client, &svc.realm.realm, &svc.service).await?;
                if crate::output::json() {
                    crate::output::doc(&serde_json::to_value(&st)?);
                    return Ok(());
                }
                outln!(
                    "service {}: config epoch {}, {} shards over {} groups; balancer {}",
                    st.service,
                    st.config.epoch,
                    st.config.shards.len(),
                    st.groups.len(),
                    st.balancer.as_deref().unwrap_or("(none leads)")
                );
                if let Some(p) = &st.policy {
                    outln!(
                        "policy: {} kvds per group, {}..={} groups, grow over {} req/s per group, \
                         shrink under {}",
                        p.kvds_per_group, p.min_groups, p.max_groups, p.grow_ops, p.shrink_ops
                    );
                }
                if !st.config.moving.is_empty() {
                    outln!("moving shards {:?}", st.config.moving);
                }
                outln!(
                    "{:<6} {:<22} {:>6} {:>10} {:>8}  shards",
                    "group", "leader", "keys", "req/s", "age"
                );
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_micros() as i64)
                    .unwrap_or(0);
                for g in &st.groups {
                    let (ops, age) = match &g.load {
                        Some(l) => (
                            format!("{:.0}", l.ops_per_s),
                            format!("{:.1}s", (now - l.at_us) as f64 / 1e6),
                        ),
                        None => ("-".into(), "-".into()),
                    };
                    // Counted now by the leader, as INFO and DBSIZE count.
                    let keys = g.keys.map_or_else(|| "-".to_string(), |k| k.to_string());
                    outln!(
                        "{:<6} {:<22} {:>6} {:>10} {:>8}  {}",
                        g.group,
                        g.leader.as_deref().unwrap_or("(none)"),
                        keys,
                        ops,
                        age,
                        g.shards
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    );
                }
                Ok(())
            }
        }
    })
}

async fn serve(
    shards: u32,
    groups: u32,
    policy: &Policy,
    listen: &str,
    threads: usize,
    svc: Service,
) -> anyhow::Result<()> {
    // Installed before anything is printed: whoever reads the address and
    // sends SIGTERM must find it handled (the default action kills the
    // process without stopping the service's procs).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("handle SIGTERM")?;
    let client = svc.node.connect().await?;
    let realm = svc.realm.realm.clone();
    let name = svc.service.clone();
    let config = service::create(&client, &realm, &name, shards, groups, policy)
        .await
        .context("create the service")?;
    let program = Program::this_executable("kv-task").context("find the tabos executable")?;
    let mut sup = Supervisor::new(&client, &realm, &name, program, BALANCERS)?;
    sup.fill().await.context("start the balancers")?;
    service::until_led(&client, &realm, &name, std::time::Duration::from_secs(60))
        .await
        .context("wait for the groups' leaders")?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listen on {listen}"))?;
    outln!(
        "kv service {name}: {} shards over {} groups, {} kvds each (groups {}..={} as the load \
         asks); Redis protocol on {}",
        config.shards.len(),
        config.groups.len(),
        policy.kvds_per_group,
        policy.min_groups,
        policy.max_groups,
        listener.local_addr()?
    );
    outln!(
        "its password (AUTH; redis-cli -a): tabos cat {}",
        tabos_kv::config::Layout::new(&name)?.password()
    );
    let front = tokio::spawn(tabos_kv::front::serve(
        listener,
        client.clone(),
        realm.clone(),
        name.clone(),
        threads,
    ));
    let outcome: anyhow::Result<()> = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = term.recv() => break Ok(()),
            exited = sup.exited() => {
                let pid = match exited {
                    Ok(p) => p,
                    Err(e) => break Err(e.into()),
                };
                if let Err(e) = sup.fill().await {
                    break Err(e.into());
                }
                eprintln!("balancer {pid} exited; started another");
            }
        }
    };
    front.abort();
    eprintln!("stopping the service's procs (its data stays in the kernel database)");
    sup.stop().await?;
    outcome
}

/// Balancers a service runs: a leader and a standby.
const BALANCERS: u32 = 2;
