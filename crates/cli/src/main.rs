//! `tabos`: the command-line tool, a thin client of the node API.
//!
//! One file per command. Client commands find the node and their
//! credential through `--addr`/`TABOS_ADDR`, `--token`/`TABOS_TOKEN`, or a
//! context of the credentials file ([`credentials`]).

/// `print!` and `println!` for the command's output, which — unlike
/// std's, which panic — end the process quietly when its reader has gone
/// (`tabos realm create R | head -1`), as a shell's default SIGPIPE would:
/// exit status 141 ([`output::write_out`]).
macro_rules! out {
    ($($t:tt)*) => { $crate::output::write_out(format_args!($($t)*)) };
}
macro_rules! outln {
    () => { $crate::output::write_out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::output::write_out(format_args!("{}\n", format_args!($($t)*))) };
}

mod backup;
mod batch;
mod cluster;
mod context;
mod credentials;
mod demo;
mod fs;
mod graph;
mod ipc;
mod kv;
mod mount;
mod mr;
mod names;
mod nodes;
mod output;
mod procedure;
mod procs;
mod sql;
mod status;
mod tokens;
mod top;
mod tree;
mod up;
mod workflow;
mod www;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tabos",
    version,
    about = "tabos: a database-oriented operating system for clusters",
    long_about = "tabos keeps every piece of OS state in a transactional database and \
                  runs every OS service as short transactions over it.\n\n\
                  Start a node with `tabos up`, then talk to it with the other commands; \
                  `tabos demo` shows the whole thing on a throwaway embedded node.\n\n\
                  Exit status: 0 done; 1 failed; 2 a command line it cannot take; \
                  124 something named (a realm, proc, path, mailbox, workflow) is not \
                  there; 141 the output's reader went away. `tabos wait` and `spawn \
                  --wait` exit with the proc's status, and 125 when tabos itself failed."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    // Where the node is, the credential and the realm: accepted before
    // the command or anywhere after it (global), and seen by every
    // command that flattens the same structs.
    #[command(flatten)]
    node: NodeAddr,
    #[command(flatten)]
    realm: procs::RealmArg,
    /// Print JSON (one object or array; a stream, one per line) instead
    /// of text: numbers as numbers, times in RFC 3339 (`-o json`)
    #[arg(long, global = true)]
    json: bool,
    /// Output format: text, wide (more columns in listings), json or yaml
    #[arg(short = 'o', long = "output", global = true, value_name = "FORMAT")]
    output: Option<output::Format>,
    /// The fs user to act as (tabos fs; an operator's credential only)
    /// [default: the credential's user]
    #[arg(long, global = true, env = "TABOS_USER")]
    user: Option<String>,
}

/// Where client commands find the node, and the credential they act with.
#[derive(clap::Args, Clone)]
struct NodeAddr {
    /// Address of the tabos node: host:port, or unix:PATH for its local
    /// socket [default: the context's, else 127.0.0.1:7070]
    #[arg(long, env = "TABOS_ADDR", global = true)]
    addr: Option<String>,
    /// The credential to act with (a token from `tabos up`, `tabos realm
    /// create` or `tabos token create`) [default: the context's]
    #[arg(long, env = "TABOS_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Context of the credentials file to use (TABOS_CREDENTIALS, else
    /// ~/.config/tabos/credentials.json) [default: its current context]
    #[arg(long, env = "TABOS_CONTEXT", global = true)]
    context: Option<String>,
    /// Connect with TLS, trusting this PEM certificate authority (or the
    /// node's self-signed certificate) [default: the context's; none:
    /// plaintext]
    #[arg(long, env = "TABOS_TLS_CA", global = true)]
    tls_ca: Option<std::path::PathBuf>,
}

/// Where a node is, the credential to use there, and the TLS authority to
/// trust (if it serves TLS).
struct Target {
    addr: String,
    token: String,
    tls_ca: Option<std::path::PathBuf>,
}

impl NodeAddr {
    /// The address, token and TLS authority to use (see [`credentials`]
    /// for precedence).
    fn resolve(&self) -> anyhow::Result<Target> {
        // The file is read only when flags and environment leave something
        // to it (a proc has TABOS_ADDR and TABOS_TOKEN, and may not be able
        // to read its node's file).
        let file = if self.addr.is_some() && self.token.is_some() && self.context.is_none() {
            credentials::File::default()
        } else {
            credentials::File::load()?
        };
        let ctx = file.context(self.context.as_deref())?;
        let tls_ca = self.tls_ca.clone().or_else(|| {
            ctx.filter(|c| !c.tls_ca.is_empty())
                .map(|c| std::path::PathBuf::from(&c.tls_ca))
        });
        let addr = self
            .addr
            .clone()
            .or_else(|| ctx.map(|c| c.addr.clone()))
            .unwrap_or_else(|| tabos_client::DEFAULT_ADDR.to_string());
        let token = self
            .token
            .clone()
            .or_else(|| ctx.map(|c| c.token.clone()))
            .unwrap_or_default();
        if addr.starts_with("https://") && tls_ca.is_none() {
            anyhow::bail!("{addr} serves TLS: say which authority to trust with --tls-ca");
        }
        Ok(Target {
            addr,
            token,
            tls_ca,
        })
    }

    /// The node's address.
    fn addr(&self) -> anyhow::Result<String> {
        Ok(self.resolve()?.addr)
    }

    /// Connects with the resolved address, credential and TLS authority.
    async fn connect(&self) -> anyhow::Result<tabos_client::Client> {
        let t = self.resolve()?;
        Ok(match &t.tls_ca {
            Some(ca) => {
                let pem = std::fs::read(ca)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", ca.display()))?;
                tabos_client::Client::connect_tls(&t.addr, &t.token, &pem).await?
            }
            None => tabos_client::Client::connect(&t.addr, &t.token).await?,
        })
    }
}

/// `tabos mr-task|kv-task|www-task ROLE …`: one proc of an application
/// (what its supervisor spawns), with the proc's own command line.
#[derive(clap::Args)]
struct TaskArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

impl TaskArgs {
    /// Runs the application's proc `main` and exits with its status.
    fn run(self, main: fn(&[String]) -> i32) -> std::process::ExitCode {
        std::process::ExitCode::from(main(&self.args).clamp(0, 255) as u8)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Start a node: open the kernel database and serve the gRPC API
    ///
    /// The node raises its soft open-files limit (RLIMIT_NOFILE) to the
    /// hard one; the procs it starts get the limit it was given. Under a
    /// limit below what its database holds at rest, what serving takes and
    /// an eighth free for clients (169 for SQLite's 8 partitions), it does
    /// not start: it says the least limit that serves.
    Up(up::Args),
    /// Run a read-only SQL query on the node and print the result (scans of
    /// large kernel tables run on the columnar engine, with SQLite's answers)
    Sql(sql::Args),
    /// Show what the node runs on and what it has done
    Status(status::Args),
    /// List the cluster's nodes: state (up, draining, drained, left, lost), address, cores, measured load, heartbeat age, realms
    Nodes(nodes::ListArgs),
    /// Manage a cluster node: tabos node drain [--undo] NODE, tabos node rm NODE
    Node(nodes::NodeArgs),
    /// Elastic realms' managers: tabos cluster settings [NAME=VALUE...], tabos cluster decisions
    Cluster(cluster::ClusterArgs),
    /// Back the node up while it serves (operator; on PostgreSQL with pg_dump): tabos backup DEST
    Backup(backup::BackupArgs),
    /// Make a data directory from a backup: tabos restore SRC --data DIR
    Restore(backup::RestoreArgs),
    /// Start a throwaway embedded node, run a workload on it and query what it did
    Demo(demo::Args),
    /// Spawn a proc: tabos spawn [--wait] [--upload PATH] -- PROGRAM ARGS...
    Spawn(procs::SpawnArgs),
    /// Run your code: upload DIR, spawn CMD in it, print its output, exit
    /// with its status: tabos run DIR -- CMD ARGS...
    Run(procs::RunArgs),
    /// List procs (a query of the ps view; -o wide adds what each uses)
    Ps(procs::PsArgs),
    /// What each node and the busiest running procs use now (CPU,
    /// memory), refreshed: tabos top [--once]
    Top(top::Args),
    /// Wait for a proc to exit, through a failover or its node's restart
    /// (up to 3 min); exits with its status (125 when tabos itself
    /// failed: no such proc, no node)
    Wait(procs::PidArgs),
    /// Ask a proc to leave (SIGTERM, then SIGKILL after a grace period)
    Evict(procs::PidArgs),
    /// Print a native proc's kept stdout (or --stderr)
    Logs(procs::LogsArgs),
    /// Forget ended procs (rows, events, spent credentials): tabos prune [PID...] [--older-than 1h]
    Prune(procs::PruneArgs),
    /// Manage realms: tabos realm create R (prints its admin credential) | set R --procs N ... | list | show R
    Realm(procs::RealmArgs),
    /// Manage credentials: tabos token create|list|revoke|whoami
    Token(tokens::Args),
    /// The saved contexts (node address and credential): list, use, rm
    Context(context::Args),
    /// Send a message to a mailbox (or proc/<pid>): tabos send TO [DATA]
    Send(ipc::SendArgs),
    /// Receive (take) messages from a mailbox; --follow streams them
    Recv(ipc::RecvArgs),
    /// Create, remove or show named mailboxes
    Mailbox(ipc::MailboxArgs),
    /// List a namespace directory: tabos ls [PATH]
    Ls(names::LsArgs),
    /// Print a namespace entry's data (or --stat its metadata)
    Cat(names::CatArgs),
    /// Set a namespace file (or create a --dir or --symlink): tabos put PATH [DATA]
    Put(names::PutArgs),
    /// Remove a namespace entry
    Rm(names::RmArgs),
    /// Rename a namespace entry atomically
    Mv(names::MvArgs),
    /// Watch a namespace directory's changes, or wait until a path --exists or is --removed
    Watch(names::WatchArgs),
    /// Mount the realm's files on a directory (FUSE): tabos mount DIR
    Mount(mount::Args),
    /// Files in tables: tabos fs ls|cat|put|get|rm|mkfifo|mkdir|mv|stat|du|chmod|chown|ln|watch
    Fs(fs::FsArgs),
    /// Stored procedures (wasm or js) run next to the data, each call one
    /// transaction: tabos procedure install|list|remove|call
    Procedure(procedure::ProcedureArgs),
    /// Several calls in one round trip, one per line of stdin (put, get, rm, send, recv, call, status, stat, read, write)
    Batch(batch::Args),
    /// Run a MapReduce job on the node: tabos mr wordcount|grep --input PATH..., or your own programs: tabos mr run --map M --reduce R --input PATH...
    Mr(mr::Args),
    /// Durable workflows: tabos workflow run|list|show|wait|cancel|resume|fork|retarget|send|queue|schedule
    Workflow(workflow::Args),
    /// Task graphs of procedures, workflows and procs, each task run as its inputs complete: tabos graph submit|show|wait|cancel|ls
    Graph(graph::Args),
    /// One proc of a MapReduce job (what `tabos mr` spawns)
    #[command(hide = true)]
    MrTask(TaskArgs),
    /// The sharded key-value service: tabos kv serve|get|set|status
    Kv(kv::Args),
    /// One proc of a key-value service (what `tabos kv serve` spawns)
    #[command(hide = true)]
    KvTask(TaskArgs),
    /// The web server: tabos www serve --root /site --listen ADDR
    Www(www::Args),
    /// One proc of a site (what `tabos www serve` spawns)
    #[command(hide = true)]
    WwwTask(TaskArgs),
    /// Print a shell completion script: tabos completions bash|zsh|fish
    /// (e.g. `tabos completions bash > /etc/bash_completion.d/tabos`)
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let format = match (cli.json, cli.output) {
        (false, f) => f.unwrap_or(output::Format::Text),
        (true, None | Some(output::Format::Json)) => output::Format::Json,
        (true, Some(_)) => {
            eprintln!("error: --json is -o json: give one format");
            return std::process::ExitCode::from(USAGE_STATUS);
        }
    };
    output::set_format(format);
    let documents = output::json();
    // Commands whose output is a running service's log or a script: JSON
    // would be a lie there.
    let no_json = match &cli.command {
        Command::Up(_) => Some("up"),
        Command::Demo(_) => Some("demo"),
        Command::Completions { .. } => Some("completions"),
        Command::Www(_) => Some("www"),
        Command::Mount(_) => Some("mount"),
        // The proc's own output, as it writes it.
        Command::Run(_) => Some("run"),
        _ => None,
    };
    if let (true, Some(name)) = (documents, no_json) {
        eprintln!("error: tabos {name} has no JSON output (nor YAML)");
        return std::process::ExitCode::FAILURE;
    }
    // Commands that exit with a proc's status say their own failures
    // (no such proc, the node away) with a status no proc's exit is taken
    // for, as `docker run` does.
    let passes_status = match &cli.command {
        Command::Wait(_) => true,
        Command::Spawn(a) => a.waits(),
        Command::Run(_) => true,
        _ => false,
    };
    let result = match cli.command {
        Command::MrTask(a) => return a.run(tabos_mr::procs::main),
        Command::KvTask(a) => return a.run(tabos_kv::main),
        Command::WwwTask(a) => return a.run(tabos_www::main),
        Command::Www(a) => www::run(a),
        Command::Kv(a) => kv::run(a),
        Command::Mr(a) => mr::run(a),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            use std::io::Write;
            // Into memory first: the generator panics on a write error (a
            // closed pipe), which is the reader's business, not a crash.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tabos", &mut script);
            let _ = std::io::stdout().write_all(&script);
            Ok(())
        }
        Command::Up(a) => up::run(a),
        Command::Sql(a) => sql::run(a),
        Command::Status(a) => status::run(a),
        Command::Nodes(a) => nodes::list(a),
        Command::Node(a) => nodes::node(a),
        Command::Cluster(a) => cluster::run(a),
        Command::Backup(a) => backup::backup(a),
        Command::Restore(a) => backup::restore(a),
        Command::Demo(a) => demo::run(a),
        Command::Spawn(a) => procs::spawn(a),
        Command::Run(a) => procs::run(a),
        Command::Ps(a) => procs::ps(a),
        Command::Top(a) => top::run(a),
        Command::Wait(a) => procs::wait(a),
        Command::Evict(a) => procs::evict(a),
        Command::Logs(a) => procs::logs(a),
        Command::Prune(a) => procs::prune(a),
        Command::Realm(a) => procs::realm(a),
        Command::Token(a) => tokens::run(a),
        Command::Context(a) => context::run(a),
        Command::Workflow(a) => workflow::run(a),
        Command::Send(a) => ipc::send(a),
        Command::Recv(a) => ipc::recv(a),
        Command::Mailbox(a) => ipc::mailbox(a),
        Command::Ls(a) => names::ls(a),
        Command::Cat(a) => names::cat(a),
        Command::Put(a) => names::put(a),
        Command::Rm(a) => names::rm(a),
        Command::Mv(a) => names::mv(a),
        Command::Watch(a) => names::watch(a),
        Command::Fs(a) => fs::run(a),
        Command::Mount(a) => mount::run(a),
        Command::Procedure(a) => procedure::run(a),
        Command::Graph(a) => graph::run(a),
        Command::Batch(a) => batch::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Output into a pipe whose reader has gone: its business, said by
        // the status alone.
        Err(e) if output::is_closed_pipe(&e) => {
            std::process::ExitCode::from(output::CLOSED_PIPE_STATUS)
        }
        Err(e) => {
            eprintln!("error: {}", said_once(&e));
            if is_not_found(&e) {
                std::process::ExitCode::from(NOT_FOUND_STATUS)
            } else if passes_status {
                std::process::ExitCode::from(OWN_FAILURE_STATUS)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// What `tabos wait` and `tabos spawn --wait` exit with when tabos itself
/// failed rather than the proc (whose status they exit with otherwise).
const OWN_FAILURE_STATUS: u8 = 125;
/// What every command exits with when something it named — a realm, a
/// proc, a path, a mailbox, a workflow, a token — is not there: its own
/// status, distinct from a failure's (1) and, with `wait`, from the
/// statuses procs conventionally exit with (as `docker run` keeps 125–127
/// for its own).
const NOT_FOUND_STATUS: u8 = 124;
/// A command line clap would refuse (its own status for usage errors).
const USAGE_STATUS: u8 = 2;

/// Something a command named is not there, found so by the command itself
/// (the node says so with its NOT_FOUND code): exits [`NOT_FOUND_STATUS`].
#[derive(Debug)]
pub struct NotFound(pub String);

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not found: {}", self.0)
    }
}

impl std::error::Error for NotFound {}

/// Whether `e` is, at bottom, "not found": said by the node or the command.
fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<NotFound>().is_some()
            || matches!(
                c.downcast_ref::<tabos_mr::Error>(),
                Some(tabos_mr::Error::NotFound(_))
            )
            || matches!(
                c.downcast_ref::<tabos_kv::Error>(),
                Some(tabos_kv::Error::NotFound(_))
            )
            || c.downcast_ref::<tabos_client::Error>()
                .is_some_and(|e| e.code() == Some(tonic::Code::NotFound))
            || c.downcast_ref::<tonic::Status>()
                .is_some_and(|s| s.code() == tonic::Code::NotFound)
    })
}

/// An error and its causes, each said once: a cause whose text the
/// message already holds (an error that prints its source, then the
/// source itself) is left out.
fn said_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// A multi-threaded runtime for the commands that need one.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

#[cfg(test)]
mod tests {
    /// clap's own checks of the whole command tree: no two arguments of
    /// one command share a name, the global ones included.
    #[test]
    fn each_cause_is_said_once() {
        #[derive(Debug)]
        struct Inner;
        impl std::fmt::Display for Inner {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("tcp connect error: refused")
            }
        }
        impl std::error::Error for Inner {}
        let e = anyhow::Error::new(Inner)
            .context("cannot connect: tcp connect error: refused (is it up?)")
            .context("spawn failed");
        assert_eq!(
            super::said_once(&e),
            "spawn failed: cannot connect: tcp connect error: refused (is it up?)"
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
