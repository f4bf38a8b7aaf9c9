//! Proc commands: `spawn`, `ps`, `wait`, `evict`, `logs`, `realm create`.

use anyhow::Context;
use tabos_client::proto;

use crate::NodeAddr;

/// The realm a command acts in.
#[derive(clap::Args, Clone)]
pub struct RealmArg {
    /// Realm to act in: the credential's own (the default), or for an
    /// operator any realm [default: the credential's; an operator's: the
    /// node's]
    #[arg(long, env = "TABOS_REALM", default_value = "")]
    pub realm: String,
}

#[derive(clap::Args)]
pub struct SpawnArgs {
    /// Pid to give the proc (default: generated)
    #[arg(long)]
    pid: Option<String>,
    /// Parent pid
    #[arg(long)]
    parent: Option<String>,
    /// native (a program on the node) or wasm (a WASI module's path on the
    /// node, .wasm or .wat); js is refused until the JavaScript runtime lands
    #[arg(long, default_value = "native")]
    kind: String,
    /// LC (latency-critical: reserves its cores) or BE (best-effort: runs
    /// while the node's utilization is under its target)
    #[arg(long, default_value = "LC")]
    class: String,
    /// Cores to reserve (LC), or to count against the utilization target
    /// (BE; 0 for a light proc that mostly waits)
    #[arg(long, default_value_t = 1)]
    cores: i64,
    /// Memory to reserve, in MB (a wasm proc's memory limit; 0: 256 MiB)
    #[arg(long, default_value_t = 0)]
    mem_mb: i64,
    /// Node to prefer (locality scheduler)
    #[arg(long)]
    home_node: Option<String>,
    /// Environment variable NAME=VALUE (repeatable)
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Wait for the proc to exit and exit with its status
    #[arg(long)]
    wait: bool,
    /// Program and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

pub fn spawn(args: SpawnArgs) -> anyhow::Result<()> {
    let mut env = std::collections::HashMap::new();
    for e in &args.env {
        let (k, v) = e
            .split_once('=')
            .with_context(|| format!("--env takes NAME=VALUE, not {e:?}"))?;
        env.insert(k.to_string(), v.to_string());
    }
    let (program, rest) = args.command.split_first().context("no program given")?;
    let desc = proto::ProcDescriptor {
        pid: args.pid.clone().unwrap_or_default(),
        parent: args.parent.clone().unwrap_or_default(),
        kind: args.kind.clone(),
        class: args.class.clone(),
        program: program.clone(),
        args: rest.to_vec(),
        env,
        cores: Some(args.cores),
        mem_mb: Some(args.mem_mb),
        home_node: args.home_node.clone().unwrap_or_default(),
        restartable: false,
    };
    let realm = args.realm.realm.clone();
    let code = crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let spawned = client.spawn(&realm, desc).await.context("spawn failed")?;
        if !args.wait {
            let place = if spawned.worker.is_empty() {
                "deferred until a worker has room".to_string()
            } else {
                format!("on worker {}", spawned.worker)
            };
            println!("{} ({place})", spawned.pid);
            return Ok::<_, anyhow::Error>(0);
        }
        let s = client.wait_exit(&realm, &spawned.pid).await?;
        eprintln!("{}: {}{}", s.pid, s.state, exit_text(&s));
        Ok(match (s.state.as_str(), s.exit_status) {
            ("exited", Some(code)) => code,
            _ => 1,
        })
    })?;
    if code != 0 {
        std::process::exit(code.clamp(1, 255) as i32);
    }
    Ok(())
}

fn exit_text(s: &proto::ProcStatus) -> String {
    let mut t = String::new();
    if let Some(c) = s.exit_status {
        t.push_str(&format!(", status {c}"));
    }
    if !s.error.is_empty() {
        t.push_str(&format!(", {}", s.error));
    }
    t
}

#[derive(clap::Args)]
pub struct PsArgs {
    /// Show every realm's procs
    #[arg(long)]
    all: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// `tabos ps` is a query of the `ps` view.
pub fn ps(args: PsArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        // Without --realm: the credential's realm; an operator's sees all.
        let realm = match args.realm.realm.as_str() {
            "" => client.who_am_i().await?.realm,
            r => r.to_string(),
        };
        let (sql, params) = if args.all || realm.is_empty() {
            ("SELECT realm, pid, parent_pid AS parent, kind, class, state, worker_id AS worker, cores, program, exit_status FROM ps ORDER BY realm, spawn_us, pid", vec![])
        } else {
            (
                "SELECT pid, parent_pid AS parent, kind, class, state, worker_id AS worker, cores, program, exit_status FROM ps WHERE realm = $1 ORDER BY spawn_us, pid",
                vec![tabos_client::Value::Text(realm)],
            )
        };
        let result = client.sql_limited(sql, params, 10_000).await?;
        crate::output::print_result(&result, args.json);
        Ok(())
    })
}

#[derive(clap::Args)]
pub struct PidArgs {
    /// The proc's pid
    pid: String,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// `tabos wait PID`: WaitExit; exits with the proc's status.
pub fn wait(args: PidArgs) -> anyhow::Result<()> {
    let s = crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        Ok::<_, anyhow::Error>(client.wait_exit(&args.realm.realm, &args.pid).await?)
    })?;
    println!("{}: {}{}", s.pid, s.state, exit_text(&s));
    match (s.state.as_str(), s.exit_status) {
        ("exited", Some(0)) => Ok(()),
        ("exited", Some(c)) => std::process::exit(c.clamp(1, 255) as i32),
        _ => std::process::exit(1),
    }
}

/// `tabos evict PID`.
pub fn evict(args: PidArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        client.evict(&args.realm.realm, &args.pid).await?;
        println!("asked {} to leave", args.pid);
        Ok(())
    })
}

#[derive(clap::Args)]
pub struct LogsArgs {
    /// The proc's pid
    pid: String,
    /// Show stderr instead of stdout
    #[arg(long)]
    stderr: bool,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// `tabos logs PID`: a native proc's kept stdout (or stderr).
pub fn logs(args: LogsArgs) -> anyhow::Result<()> {
    use std::io::Write;
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let stream = if args.stderr { "stderr" } else { "stdout" };
        let r = client.logs(&args.realm.realm, &args.pid, stream).await?;
        std::io::stdout().write_all(&r.data)?;
        if r.truncated {
            eprintln!(
                "(log truncated: the node keeps the first {} bytes)",
                r.data.len()
            );
        }
        Ok(())
    })
}

#[derive(clap::Args)]
pub struct RealmArgs {
    #[command(subcommand)]
    command: RealmCommand,
}

#[derive(clap::Subcommand)]
enum RealmCommand {
    /// Create a realm
    Create {
        /// Realm name
        name: String,
        /// fifo, locality or least_loaded
        #[arg(long, default_value = "fifo")]
        scheduler: String,
        #[command(flatten)]
        node: NodeAddr,
    },
}

pub fn realm(args: RealmArgs) -> anyhow::Result<()> {
    match args.command {
        RealmCommand::Create {
            name,
            scheduler,
            node,
        } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            let created = client.create_realm(&name, &scheduler).await?;
            println!("realm {name} created (scheduler {scheduler})");
            println!(
                "its admin credential (id {}; shown once, keep it safe):",
                created.admin_token_id
            );
            println!("{}", created.admin_token);
            Ok(())
        }),
    }
}
