//! Proc commands: `spawn`, `ps`, `wait`, `evict`, `logs`, `realm create`.

use anyhow::Context;
use tabos_client::proto::{self, ProcState};

use crate::NodeAddr;

/// The realm a command acts in.
#[derive(clap::Args, Clone)]
pub struct RealmArg {
    /// Realm to act in: the credential's own (the default), or for an
    /// operator any realm [default: the credential's; an operator's: the
    /// node's]
    #[arg(long, env = "TABOS_REALM", default_value = "", global = true)]
    pub realm: String,
}

/// What a proc is given, the same for `spawn` and `run`.
#[derive(clap::Args)]
pub struct ProcOpts {
    /// Pid to give the proc (default: generated)
    #[arg(long)]
    pid: Option<String>,
    /// Parent pid
    #[arg(long)]
    parent: Option<String>,
    /// native (a program on the node — in the system's directories, under
    /// an asked --host-path, or in a directory of the operator's `tabos up
    /// --program-dir` —, of the realm's files as fs:/PATH, or of its
    /// uploaded code as ./PATH) or wasm (a WASI module, .wasm or .wat,
    /// found the same ways); JavaScript runs as stored procedures (`tabos
    /// procedure install`), not as procs
    #[arg(long, default_value = "native", value_parser = |s: &str| proto::ProcKind::parse("kind", s))]
    kind: proto::ProcKind,
    /// LC (latency-critical: reserves its cores) or BE (best-effort: runs
    /// while the node's utilization is under its target)
    #[arg(long, default_value = "LC", value_parser = proc_class)]
    class: proto::ProcClass,
    /// Cores to reserve (LC), or to count against the utilization target
    /// (BE; 0 for a light proc that mostly waits)
    #[arg(long, default_value_t = 1)]
    cores: i64,
    /// Memory to reserve, in MB (a native proc is killed past it; a wasm
    /// proc's memory limit) [default: none reserved; a wasm proc: 256]
    #[arg(long)]
    mem_mb: Option<i64>,
    /// Node to prefer (locality scheduler)
    #[arg(long)]
    home_node: Option<String>,
    /// Environment variable NAME=VALUE (repeatable)
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// A host path the proc sees read-only (repeatable; native procs; each
    /// within a path the realm's operator allows: `realm set
    /// --allow-host-path`)
    #[arg(long = "host-path", value_name = "PATH")]
    host_paths: Vec<String>,
    /// Limit the proc's credential to mailboxes (native procs):
    /// space-separated `send:MAILBOX` and `recv:MAILBOX` grants; it may
    /// then send and receive there and do nothing else [default: all its
    /// spawner's role allows]
    #[arg(long, default_value = "", value_name = "GRANTS")]
    scope: String,
    /// Run it again elsewhere when its node is lost (instead of failing
    /// it); the node stops it first, so it never runs twice at once
    #[arg(long)]
    restartable: bool,
    /// How many times a restartable proc runs again before it fails
    /// instead [default: 10]
    #[arg(long, value_name = "N", requires = "restartable")]
    max_restarts: Option<i64>,
}

impl ProcOpts {
    /// The descriptor of a proc running `command` in uploaded code `code`
    /// (a content hash, or empty).
    fn descriptor(
        &self,
        command: &[String],
        code: String,
    ) -> anyhow::Result<proto::ProcDescriptor> {
        let mut env = std::collections::HashMap::new();
        for e in &self.env {
            let (k, v) = e
                .split_once('=')
                .with_context(|| format!("--env takes NAME=VALUE, not {e:?}"))?;
            env.insert(k.to_string(), v.to_string());
        }
        let (program, rest) = command.split_first().context("no program given")?;
        // With the program's own flags allowed after it, an unknown flag of
        // spawn's would otherwise become the program.
        if program.starts_with('-') {
            anyhow::bail!(
                "unknown option {program}: options go before the program, and the program \
                 after -- (tabos spawn [OPTIONS] -- PROGRAM ARGS...)"
            );
        }
        Ok(proto::ProcDescriptor {
            pid: self.pid.clone().unwrap_or_default(),
            parent: self.parent.clone().unwrap_or_default(),
            kind: self.kind.into(),
            class: self.class.into(),
            program: program.clone(),
            args: rest.to_vec(),
            env,
            cores: Some(self.cores),
            mem_mb: self.mem_mb,
            home_node: self.home_node.clone().unwrap_or_default(),
            restartable: self.restartable,
            max_restarts: self.max_restarts,
            host_paths: self.host_paths.clone(),
            scope: self.scope.clone(),
            code,
        })
    }
}

#[derive(clap::Args)]
pub struct SpawnArgs {
    #[command(flatten)]
    proc: ProcOpts,
    /// Code to run it in: a file or directory of yours, put into the
    /// realm's files under /code/<its content hash> (once: the same content
    /// is not uploaded again) and shown to the proc, read-only, as its
    /// working directory; name a file of it as ./PATH
    #[arg(long, value_name = "PATH")]
    upload: Option<std::path::PathBuf>,
    /// Run it in code uploaded before, by its content hash (as `spawn
    /// --upload` and `tabos fs ls /code` show it)
    #[arg(long, value_name = "HASH", conflicts_with = "upload")]
    code: Option<String>,
    /// Wait for the proc to exit and exit with its status (125 when tabos
    /// itself failed)
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

impl SpawnArgs {
    /// Whether it waits and exits with the proc's status.
    pub fn waits(&self) -> bool {
        self.wait
    }
}

/// Uploads `local` as code (see `tabos_client::code`); its hash.
pub(crate) async fn upload(
    client: &mut tabos_client::Client,
    realm: &str,
    local: &std::path::Path,
) -> anyhow::Result<String> {
    let m = client
        .upload_code(realm, local)
        .await
        .with_context(|| format!("cannot upload {}", local.display()))?;
    Ok(m.hash)
}

pub fn spawn(args: SpawnArgs) -> anyhow::Result<()> {
    // Checked before anything is uploaded.
    args.proc.descriptor(&args.command, String::new())?;
    let realm = args.realm.realm.clone();
    let code = crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let code = match (&args.upload, &args.code) {
            (Some(local), _) => upload(&mut client, &realm, local).await?,
            (None, Some(hash)) => hash.clone(),
            (None, None) => String::new(),
        };
        let desc = args.proc.descriptor(&args.command, code)?;
        let spawned = client.spawn(&realm, desc).await.context("spawn failed")?;
        if !args.wait {
            let place = if spawned.worker.is_empty() {
                "deferred until a worker has room".to_string()
            } else {
                format!("on worker {}", spawned.worker)
            };
            crate::output::emit(
                || format!("{} ({place})", spawned.pid),
                || serde_json::json!({"pid": spawned.pid, "worker": spawned.worker}),
            );
            return Ok::<_, anyhow::Error>(0);
        }
        let s = exit_through_outage(&client, &realm, &spawned.pid).await?;
        if crate::output::json() {
            crate::output::doc(&status_json(&s));
        } else {
            eprintln!("{}: {}{}", s.pid, s.state(), exit_text(&s));
        }
        Ok(exit_code(&s))
    })?;
    exit_with(code)
}

/// Ends the process with a proc's status when it is not 0 (clamped to
/// what an exit status holds).
fn exit_with(code: i64) -> anyhow::Result<()> {
    if code != 0 {
        std::process::exit(code.clamp(1, 255) as i32);
    }
    Ok(())
}

/// The status a command that passes a proc's on exits with: its exit
/// status, or 1 for a proc that did not exit by itself.
fn exit_code(s: &proto::ProcStatus) -> i64 {
    match (s.state(), s.exit_status) {
        (ProcState::Exited, Some(code)) => code,
        _ => 1,
    }
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// A file or directory of yours: uploaded as code (tabos spawn
    /// --upload) and the proc's working directory
    dir: std::path::PathBuf,
    #[command(flatten)]
    proc: ProcOpts,
    /// The command, e.g. ./start.sh or python3 main.py
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// `tabos run DIR -- CMD`: uploads DIR, spawns CMD in it, prints its
/// stdout and stderr as it writes them and exits with its status (125
/// when tabos itself failed).
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    args.proc.descriptor(&args.command, String::new())?;
    let realm = args.realm.realm.clone();
    let code = crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let code = upload(&mut client, &realm, &args.dir).await?;
        let desc = args.proc.descriptor(&args.command, code)?;
        let spawned = client.spawn(&realm, desc).await.context("spawn failed")?;
        let pid = spawned.pid;
        let follow = |stream: proto::LogStream| {
            let (mut c, realm, pid) = (client.clone(), realm.clone(), pid.clone());
            async move {
                use std::io::Write;
                let want = tabos_client::LogsWant::default();
                let mut s = c.follow_logs_with(&realm, &pid, stream, want).await?;
                let mut line_start = true;
                while let Some(m) = s.message().await? {
                    let mut out: Box<dyn Write> = if stream == proto::LogStream::Stderr {
                        Box::new(std::io::stderr().lock())
                    } else {
                        Box::new(std::io::stdout().lock())
                    };
                    write_log(&mut out, &m.data, &m.marks, false, &mut line_start)?;
                    out.flush()?;
                }
                Ok::<_, anyhow::Error>(())
            }
        };
        // Each stream ends when the proc has ended and its output is all
        // there.
        let (out, err) = tokio::join!(
            follow(proto::LogStream::Stdout),
            follow(proto::LogStream::Stderr)
        );
        out?;
        err?;
        let s = exit_through_outage(&client, &realm, &pid).await?;
        if s.state() != ProcState::Exited || !s.error.is_empty() {
            eprintln!("{}: {}{}", s.pid, s.state(), exit_text(&s));
        }
        Ok::<_, anyhow::Error>(exit_code(&s))
    })?;
    exit_with(code)
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
    /// Only procs in this state (repeatable): spawned, claimed, running,
    /// exited, evicted, failed; or waiting (not placed yet, the reason
    /// column says why)
    #[arg(long = "state", value_name = "STATE", value_parser = ["spawned", "claimed", "running", "exited", "evicted", "failed", "waiting"])]
    states: Vec<String>,
    /// Only procs spawned within this long, e.g. 90s, 30m, 12h, 7d
    #[arg(long, value_name = "DURATION")]
    since: Option<String>,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// A realm that does not exist (or that the credential may not see) has
/// no procs to list: said so as [`crate::NotFound`], not shown as an
/// empty table.
pub async fn ensure_realm(client: &mut tabos_client::Client, realm: &str) -> anyhow::Result<()> {
    let known = client
        .sql_limited(
            "SELECT realm FROM realm WHERE realm = $1",
            vec![tabos_client::Value::Text(realm.to_string())],
            1,
        )
        .await?;
    if known.rows.is_empty() {
        return Err(crate::NotFound(format!(
            "no realm {realm:?} (or not yours: tabos realm list shows those you may see)"
        ))
        .into());
    }
    Ok(())
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
        use tabos_client::Value;
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        // $1 is now: each row's age in seconds; the reason is why it failed
        // or why it still waits.
        let mut params = vec![Value::Int(now_us)];
        let mut filters = Vec::new();
        let every_realm = args.all || realm.is_empty();
        if !every_realm {
            ensure_realm(&mut client, &realm).await?;
            params.push(Value::Text(realm));
            filters.push(format!("realm = ${}", params.len()));
        }
        if !args.states.is_empty() {
            // "waiting" is not a state but what `ps` shows of one: a proc
            // not placed yet, with its reason.
            let mut any = Vec::new();
            let mut placeholders = Vec::new();
            for s in args.states.iter().filter(|s| *s != "waiting") {
                params.push(Value::Text(s.clone()));
                placeholders.push(format!("${}", params.len()));
            }
            if !placeholders.is_empty() {
                any.push(format!("state IN ({})", placeholders.join(", ")));
            }
            if args.states.iter().any(|s| s == "waiting") {
                any.push("waiting IS NOT NULL".to_string());
            }
            filters.push(format!("({})", any.join(" OR ")));
        }
        if let Some(since) = &args.since {
            let ms = crate::tokens::parse_ttl(since).map_err(|_| {
                anyhow::anyhow!("--since {since:?}: a number and a unit (ms, s, m, h, d)")
            })?;
            params.push(Value::Int(now_us - (ms as i64).saturating_mul(1000)));
            filters.push(format!("spawn_us >= ${}", params.len()));
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", filters.join(" AND "))
        };
        // -o wide: what kubectl's wide adds — where and how it runs, and
        // what it uses (measured while it runs; at its end, the total).
        let wide = if crate::output::wide() {
            ", kind, mem_mb, restarts, cpu_cores, cpu_us, mem_bytes, peak_mem_bytes, \
             spawned_at, started_at, exited_at"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {}pid, parent_pid AS parent, class, state, ($1 - spawn_us) / 1000000 AS age_s, \
             worker_id AS worker, cores, program, exit_status, coalesce(error, waiting) AS reason\
             {wide} FROM ps{filter} ORDER BY {}spawn_us, pid",
            if every_realm { "realm, " } else { "" },
            if every_realm { "realm, " } else { "" },
        );
        let result = client.sql_limited(&sql, params, 10_000).await?;
        if crate::output::json() {
            // One object per proc, as `docker ps --format json` and
            // `kubectl get -o json`'s items are.
            crate::output::print_rows_json(&result);
        } else {
            crate::output::print_result(&result, false);
        }
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

/// A proc's status as JSON: numbers as numbers, times in RFC 3339.
fn status_json(s: &proto::ProcStatus) -> serde_json::Value {
    let t = |us: Option<i64>| us.map(crate::output::rfc3339);
    serde_json::json!({
        "realm": s.realm, "pid": s.pid, "state": s.state().name(), "worker": s.worker,
        "exit_status": s.exit_status, "error": s.error,
        "evict_requested": s.evict_requested,
        "spawned": t(Some(s.spawn_us)), "started": t(s.start_us), "exited": t(s.exit_us),
    })
}

/// Proc `pid`'s end, waited for through an outage of up to 3 minutes
/// ([`tabos_client::app::exit_of`]), saying so once on stderr.
async fn exit_through_outage(
    client: &tabos_client::Client,
    realm: &str,
    pid: &str,
) -> Result<proto::ProcStatus, tabos_client::Error> {
    let mut said = false;
    tabos_client::app::exit_of(client, realm, pid, |e| {
        if !std::mem::replace(&mut said, true) {
            eprintln!(
                "tabos: {e}; waiting for {pid} to end, asking again for up to {} s",
                tabos_client::app::OUTAGE_MAX.as_secs()
            );
        }
    })
    .await
}

/// `tabos wait PID`: WaitExit, asked again through an outage
/// ([`exit_through_outage`]); exits with the proc's status.
pub fn wait(args: PidArgs) -> anyhow::Result<()> {
    let s = crate::runtime()?.block_on(async {
        let client = args.node.connect().await?;
        Ok::<_, anyhow::Error>(exit_through_outage(&client, &args.realm.realm, &args.pid).await?)
    })?;
    crate::output::emit(
        || format!("{}: {}{}", s.pid, s.state(), exit_text(&s)),
        || status_json(&s),
    );
    match (s.state(), s.exit_status) {
        (ProcState::Exited, Some(0)) => Ok(()),
        (ProcState::Exited, Some(c)) => std::process::exit(c.clamp(1, 255) as i32),
        _ => std::process::exit(1),
    }
}

/// `tabos evict PID`.
pub fn evict(args: PidArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        client.evict(&args.realm.realm, &args.pid).await?;
        crate::output::emit(
            || format!("asked {} to leave", args.pid),
            || serde_json::json!({"pid": args.pid, "evicting": true}),
        );
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
    /// Keep printing what the proc writes, until it has ended
    #[arg(short, long)]
    follow: bool,
    /// Only output written since then: an age (10s, 5m, 1h, 2d) or a time
    /// (RFC 3339, e.g. 2026-11-30T10:00:00Z)
    #[arg(long, value_name = "AGE|TIME")]
    since: Option<String>,
    /// Only the last N lines (with -f: of what is there, then the rest)
    #[arg(long, value_name = "N")]
    tail: Option<u32>,
    /// Start each line with when the proc's node read it (RFC 3339)
    #[arg(long)]
    timestamps: bool,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// `--since`: an age before now, or a time; as µs since the epoch.
fn since_us(s: &str) -> anyhow::Result<i64> {
    if let Some(us) = tabos_store::dialect::parse_timestamp(s) {
        return Ok(us);
    }
    let ms = crate::tokens::parse_ttl(s).map_err(|_| {
        anyhow::anyhow!(
            "--since {s:?}: an age (a number and ms, s, m, h or d) or a time (RFC 3339)"
        )
    })?;
    let ago = i64::try_from(ms.saturating_mul(1_000)).unwrap_or(i64::MAX);
    Ok(tabos_store::now_us().saturating_sub(ago).max(1))
}

/// Writes `data` to `out`, each line started with its time when
/// `timestamps` (a line takes the time of the piece it starts in, from
/// `marks`; `line_start`: whether `data` begins a line).
fn write_log(
    out: &mut impl std::io::Write,
    data: &[u8],
    marks: &[proto::LogMark],
    timestamps: bool,
    line_start: &mut bool,
) -> std::io::Result<()> {
    if !timestamps {
        out.write_all(data)?;
        if let Some(last) = data.last() {
            *line_start = *last == b'\n';
        }
        return Ok(());
    }
    let mut mark = 0;
    let mut at = 0;
    while at < data.len() {
        while mark + 1 < marks.len() && marks[mark + 1].at as usize <= at {
            mark += 1;
        }
        let end = data[at..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(data.len(), |i| at + i + 1);
        if *line_start {
            let t = marks.get(mark).map_or(0, |m| m.time_us);
            write!(out, "{} ", crate::output::rfc3339(t))?;
        }
        out.write_all(&data[at..end])?;
        *line_start = data[end - 1] == b'\n';
        at = end;
    }
    Ok(())
}

/// `tabos logs PID`: a proc's stdout (or stderr) as the cluster keeps it,
/// from any node; with `-f`, followed as it is written.
pub fn logs(args: LogsArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let want = tabos_client::LogsWant {
        since_us: args
            .since
            .as_deref()
            .map(since_us)
            .transpose()?
            .unwrap_or(0),
        tail_lines: args.tail.unwrap_or(0),
    };
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let stream = if args.stderr {
            proto::LogStream::Stderr
        } else {
            proto::LogStream::Stdout
        };
        let mut line_start = true;
        if args.follow {
            let mut s = client
                .follow_logs_with(&args.realm.realm, &args.pid, stream, want)
                .await?;
            while let Some(m) = s.message().await? {
                let mut out = std::io::stdout().lock();
                write_log(
                    &mut out,
                    &m.data,
                    &m.marks,
                    args.timestamps,
                    &mut line_start,
                )?;
                out.flush()?;
            }
            return Ok(());
        }
        let r = client
            .logs_with(&args.realm.realm, &args.pid, stream, want)
            .await?;
        if crate::output::json() {
            let marks: Vec<_> = r
                .marks
                .iter()
                .map(|m| serde_json::json!({"at": m.at, "time": crate::output::rfc3339(m.time_us)}))
                .collect();
            let v = serde_json::json!({
                "pid": args.pid, "stream": stream.name(),
                "data": String::from_utf8_lossy(&r.data), "truncated": r.truncated,
                "marks": marks,
            });
            crate::output::doc(&v);
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        write_log(
            &mut out,
            &r.data,
            &r.marks,
            args.timestamps,
            &mut line_start,
        )?;
        out.flush()?;
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
        #[arg(long, default_value = "fifo", value_parser = scheduler)]
        scheduler: proto::Scheduler,
        /// Make it elastic, of class LC or BE: its cores are granted on
        /// elastic nodes (`tabos up --elastic`) as its demand changes, LC
        /// realms first (only at creation)
        #[arg(long, value_name = "CLASS", value_parser = proc_class)]
        elastic: Option<proto::ProcClass>,
        /// An elastic realm's fewest cores
        #[arg(long, default_value_t = 0, requires = "elastic")]
        min_cores: i64,
        /// An elastic realm's most cores
        #[arg(long, requires = "elastic")]
        max_cores: Option<i64>,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Change an elastic realm's policy (operators)
    Elastic {
        /// Realm name
        name: String,
        /// LC or BE
        #[arg(long, value_parser = proc_class)]
        class: proto::ProcClass,
        /// Fewest cores
        #[arg(long)]
        min_cores: i64,
        /// Most cores
        #[arg(long)]
        max_cores: i64,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Set a realm's quotas (operators): a number, or `none` to remove one
    Set {
        /// Realm name
        name: String,
        /// Most live procs
        #[arg(long)]
        procs: Option<String>,
        /// Most cores of its live procs
        #[arg(long)]
        cores: Option<String>,
        /// Most memory of its live procs, in MiB
        #[arg(long)]
        memory_mib: Option<String>,
        /// Most bytes stored, in MiB: kv, names, files, logged messages,
        /// procedures' code and tenant tables
        #[arg(long)]
        storage_mib: Option<String>,
        /// Most bytes of messages queued in its mailboxes, in MiB
        #[arg(long)]
        mailbox_mib: Option<String>,
        /// Most procedures installed
        #[arg(long)]
        procedures: Option<String>,
        /// A host path (or directory) the realm's native procs may ask to
        /// see read-only (repeatable; replaces the list; `none` empties it)
        #[arg(long = "allow-host-path", value_name = "PATH")]
        allow_host_paths: Vec<String>,
        /// Let the realm's native procs share the host's network (by
        /// default each has a network of its own, loopback only: it cannot
        /// reach services on the host or beyond, nor listen for them);
        /// procs spawned before keep what they had
        #[arg(long, conflicts_with = "no_host_network")]
        host_network: bool,
        /// Give the realm's native procs networks of their own again
        #[arg(long)]
        no_host_network: bool,
        /// How long to keep the record of what is over — ended procs with
        /// their events and logs, provenance events, delivered messages of
        /// logging mailboxes — e.g. 1h, 7d (at least 1s); the cluster's leader
        /// removes what is older. `none`: keep until `tabos prune`
        #[arg(long, value_name = "DURATION")]
        retention: Option<String>,
        /// What provenance (`proc_event`) records: `procs` (the default),
        /// or `all` — also the file reads and writes, sends and receipts of
        /// clients acting for no proc (a user's shell, the SDKs, the mount
        /// outside a proc), as pid `@USER/CREDENTIAL`; each such file read
        /// then commits a write
        #[arg(long, value_name = "procs|all", value_parser = ["procs", "all"])]
        provenance: Option<String>,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Remove a realm and everything of it — names, files, kv, mailboxes,
    /// procedures, tenant tables, finished procs, credentials (operators;
    /// refused while it has live procs)
    Rm {
        /// Realm name
        name: String,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Realms with their usage and quotas (an operator sees all)
    List {
        #[command(flatten)]
        node: NodeAddr,
    },
    /// One realm's usage and quotas; for an elastic realm also its policy,
    /// its grants per node and its allocation over time (each decision of
    /// its managers, with the reason)
    Show {
        /// Realm name
        name: String,
        /// Most allocation decisions to show (newest)
        #[arg(long, default_value_t = 20)]
        decisions: u32,
        #[command(flatten)]
        node: NodeAddr,
    },
}

/// `N` or `none` (no quota).
fn quota_arg(what: &str, v: &Option<String>) -> anyhow::Result<(Option<i64>, bool)> {
    match v.as_deref() {
        None => Ok((None, false)),
        Some("none") => Ok((None, true)),
        Some(n) => {
            let n: i64 = n
                .parse()
                .ok()
                .filter(|n: &i64| *n >= 0)
                .with_context(|| format!("--{what} takes a number ≥ 0 or `none`, not {n:?}"))?;
            Ok((Some(n), false))
        }
    }
}

/// One realm as a JSON object: usage beside quotas, and its settings.
fn realm_json(r: &proto::RealmInfo) -> serde_json::Value {
    serde_json::json!({
        "realm": r.realm, "live_procs": r.live_procs, "quota_procs": r.quota_procs,
        "cores": r.cores, "quota_cores": r.quota_cores,
        "mem_mb": r.mem_mb, "quota_mem_mb": r.quota_mem_mb,
        "stored_bytes": r.stored_bytes, "quota_storage_mb": r.quota_storage_mb,
        "mailbox_bytes": r.mailbox_bytes, "quota_mailbox_mb": r.quota_mailbox_mb,
        "procedures": r.procedures, "quota_procedures": r.quota_procedures,
        "host_paths": r.host_paths, "host_network": r.host_network,
        "retention_s": r.retention_s,
        "provenance": r.provenance().name(),
        "scheduler": scheduler_name(r.scheduler),
        "created": crate::output::rfc3339(r.created_us),
        "stored": r.stored.iter().map(|s| (class_name(s.class).to_string(), s.bytes.into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
    })
}

/// A scheduler's name, as `realm create --scheduler` takes it.
fn scheduler_name(s: i32) -> &'static str {
    use proto::Scheduler as S;
    match S::try_from(s).unwrap_or(S::Unspecified) {
        S::Fifo => "fifo",
        S::Locality => "locality",
        S::LeastLoaded => "least-loaded",
        S::Unspecified => "unspecified",
    }
}

fn print_realms(realms: &[proto::RealmInfo], json: bool) {
    if json {
        let v: Vec<_> = realms.iter().map(realm_json).collect();
        crate::output::doc(&serde_json::Value::Array(v));
        return;
    }
    // Each usage beside its quota: "3/8", or "3" with no quota.
    let of = |used: String, quota: Option<i64>| match quota {
        Some(q) => format!("{used}/{q}"),
        None => used,
    };
    let mib = |bytes: i64| format!("{:.1}", bytes as f64 / f64::from(1 << 20));
    let cols = [
        "realm",
        "procs",
        "cores",
        "memory MB",
        "stored MiB",
        "mailboxes MiB",
        "procedures",
        "network",
    ];
    let rows: Vec<Vec<String>> = realms
        .iter()
        .map(|r| {
            vec![
                r.realm.clone(),
                of(r.live_procs.to_string(), r.quota_procs),
                of(r.cores.to_string(), r.quota_cores),
                of(r.mem_mb.to_string(), r.quota_mem_mb),
                of(mib(r.stored_bytes), r.quota_storage_mb),
                of(mib(r.mailbox_bytes), r.quota_mailbox_mb),
                of(r.procedures.to_string(), r.quota_procedures),
                if r.host_network { "host" } else { "own" }.to_string(),
            ]
        })
        .collect();
    out!("{}", crate::output::table(&cols, &rows));
}

/// What a realm's stored bytes are, by class (`realm show`).
fn print_stored(r: &proto::RealmInfo) {
    let mib = |bytes: i64| format!("{:.1}", bytes as f64 / f64::from(1 << 20));
    let cols = vec!["stored".to_string(), "MiB".to_string()];
    let rows: Vec<Vec<String>> = r
        .stored
        .iter()
        .map(|s| vec![class_name(s.class).to_string(), mib(s.bytes)])
        .collect();
    out!("{}", crate::output::table(&cols, &rows));
}

/// `--class`/`--elastic`: LC or BE, in either case.
fn proc_class(s: &str) -> Result<proto::ProcClass, String> {
    proto::ProcClass::parse("class", &s.to_ascii_uppercase())
}

/// `--scheduler`: also `least-loaded`, as the kernel has always taken it.
fn scheduler(s: &str) -> Result<proto::Scheduler, String> {
    proto::Scheduler::parse("scheduler", &s.replace('-', "_"))
}

/// A storage class's name (as `realm_usage` and the kernel call it).
fn class_name(class: i32) -> &'static str {
    use proto::StorageClass as C;
    match C::try_from(class).unwrap_or(C::Unspecified) {
        C::Kv => "kv",
        C::Names => "names",
        C::Files => "files",
        C::QueuedMail => "queued mail",
        C::DeliveredMail => "delivered mail",
        C::Code => "code",
        C::Workflows => "workflows",
        C::Tables => "tables",
        C::Logs => "logs",
        C::Unspecified => "other",
    }
}

pub fn realm(args: RealmArgs) -> anyhow::Result<()> {
    match args.command {
        RealmCommand::Create {
            name,
            scheduler,
            elastic,
            min_cores,
            max_cores,
            node,
        } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            let created = match elastic {
                Some(class) => {
                    let max_cores = max_cores
                        .ok_or_else(|| anyhow::anyhow!("an elastic realm needs --max-cores"))?;
                    let policy = proto::ElasticPolicy {
                        class: class.into(),
                        min_cores,
                        max_cores,
                    };
                    let c = client
                        .create_elastic_realm(&name, scheduler, policy)
                        .await?;
                    if !crate::output::json() {
                        outln!(
                            "realm {name} created (scheduler {scheduler}; elastic {class}, \
                             {min_cores} to {max_cores} cores)"
                        );
                    }
                    c
                }
                None => {
                    let c = client.create_realm(&name, scheduler).await?;
                    if !crate::output::json() {
                        outln!("realm {name} created (scheduler {scheduler})");
                    }
                    c
                }
            };
            if crate::output::json() {
                outln!(
                    "{}",
                    serde_json::json!({
                        "realm": name, "admin_token": created.admin_token,
                        "admin_token_id": created.admin_token_id,
                    })
                );
                return Ok(());
            }
            outln!(
                "its admin credential (id {}; shown once, keep it safe):",
                created.admin_token_id
            );
            outln!("{}", created.admin_token);
            Ok(())
        }),
        RealmCommand::Set {
            name,
            procs,
            cores,
            memory_mib,
            storage_mib,
            mailbox_mib,
            procedures,
            allow_host_paths,
            host_network,
            no_host_network,
            retention,
            provenance,
            node,
        } => {
            let mut clear = Vec::new();
            let retention_s = match retention.as_deref() {
                None => None,
                Some("none") => {
                    clear.push("retention".to_string());
                    None
                }
                Some(d) => {
                    let ms = crate::tokens::parse_ttl(d).map_err(|_| {
                        anyhow::anyhow!(
                            "--retention {d:?}: a number and a unit (s, m, h, d), or none"
                        )
                    })?;
                    anyhow::ensure!(
                        ms >= 1_000 && ms % 1_000 == 0,
                        "--retention {d:?}: whole seconds, at least 1s"
                    );
                    Some(ms as i64 / 1_000)
                }
            };
            let host_paths = if allow_host_paths.iter().any(|p| p == "none") {
                anyhow::ensure!(
                    allow_host_paths.len() == 1,
                    "--allow-host-path none cannot be given with paths"
                );
                clear.push("host-paths".to_string());
                Vec::new()
            } else {
                allow_host_paths
            };
            let mut arg = |flag: &str, quota: &str, v: &Option<String>| {
                let (n, cleared) = quota_arg(flag, v)?;
                if cleared {
                    clear.push(quota.to_string());
                }
                anyhow::Ok(n)
            };
            let request = proto::SetRealmRequest {
                realm: name,
                procs: arg("procs", "procs", &procs)?,
                cores: arg("cores", "cores", &cores)?,
                mem_mb: arg("memory-mib", "memory", &memory_mib)?,
                storage_mb: arg("storage-mib", "storage", &storage_mib)?,
                mailbox_mb: arg("mailbox-mib", "mailbox", &mailbox_mib)?,
                procedures: arg("procedures", "procedures", &procedures)?,
                clear: Vec::new(),
                host_paths,
                host_network: match (host_network, no_host_network) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                retention_s,
                provenance: provenance
                    .as_deref()
                    .map(|p| {
                        proto::Provenance::from_name(p)
                            .map(i32::from)
                            .ok_or_else(|| anyhow::anyhow!("--provenance {p:?}: procs or all"))
                    })
                    .transpose()?,
            };
            let request = proto::SetRealmRequest { clear, ..request };
            crate::runtime()?.block_on(async {
                let mut client = node.connect().await?;
                let info = client.set_realm(request).await?;
                print_realms(&[info], crate::output::json());
                Ok(())
            })
        }
        RealmCommand::Rm { name, node } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            let rows = client.remove_realm(&name).await?;
            crate::output::emit(
                || format!("realm {name} removed ({rows} rows)"),
                || serde_json::json!({"realm": name, "removed_rows": rows}),
            );
            Ok(())
        }),
        RealmCommand::List { node } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            print_realms(&client.list_realms().await?, crate::output::json());
            Ok(())
        }),
        RealmCommand::Show {
            name,
            decisions,
            node,
        } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            let all = client.list_realms().await?;
            let one: Vec<_> = all.into_iter().filter(|r| r.realm == name).collect();
            if one.is_empty() {
                return Err(crate::NotFound(format!("no realm {name:?} (or not yours)")).into());
            }
            let alloc = client.allocation(&name, decisions).await?;
            if crate::output::json() {
                // One document: the realm, its settings and its allocation.
                let mut v = realm_json(&one[0]);
                v["allocation"] = crate::cluster::allocation_json(&alloc);
                crate::output::doc(&v);
            } else {
                let r = &one[0];
                outln!("realm:      {}", r.realm);
                outln!(
                    "created:    {} ({} ago)",
                    crate::output::rfc3339(r.created_us),
                    crate::output::age(r.created_us)
                );
                outln!("scheduler:  {}", scheduler_name(r.scheduler));
                outln!(
                    "network:    {}",
                    if r.host_network {
                        "the host's (its native procs share it)"
                    } else {
                        "its own (each native proc has loopback only)"
                    }
                );
                if let Some(uid) = r.proc_uid {
                    outln!("proc uid:   {uid} (on this node)");
                }
                match r.retention_s {
                    Some(s) => outln!(
                        "retention:  {} (ended procs, events, logged messages older are removed)",
                        crate::output::duration(s)
                    ),
                    None => outln!("retention:  none (kept until tabos prune)"),
                }
                outln!(
                    "provenance: {}",
                    match r.provenance() {
                        proto::Provenance::All => "all (what procs and clients do is recorded)",
                        _ => "procs (what procs do is recorded)",
                    }
                );
                outln!();
                print_realms(&one, false);
                print_stored(&one[0]);
                // What its native procs may see of the host.
                let paths = &one[0].host_paths;
                if paths.is_empty() {
                    outln!("host paths: none (tabos realm set --allow-host-path PATH)");
                } else {
                    outln!("host paths (read-only to its native procs):");
                    for p in paths {
                        outln!("  {p}");
                    }
                }
                crate::cluster::print_allocation(&alloc);
            }
            Ok(())
        }),
        RealmCommand::Elastic {
            name,
            class,
            min_cores,
            max_cores,
            node,
        } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            let policy = proto::ElasticPolicy {
                class: class.into(),
                min_cores,
                max_cores,
            };
            let alloc = client.set_elastic(&name, policy).await?;
            crate::cluster::print_allocation(&alloc);
            Ok(())
        }),
    }
}

#[derive(clap::Args)]
pub struct PruneArgs {
    /// The ended procs to forget [default: every ended proc]
    pids: Vec<String>,
    /// Only procs that ended over this long ago, e.g. 1h, 7d (without
    /// PIDs)
    #[arg(long, value_name = "DURATION", conflicts_with = "pids")]
    older_than: Option<String>,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// `tabos prune [PID...] [--older-than D]`: forgets ended procs.
pub fn prune(args: PruneArgs) -> anyhow::Result<()> {
    let older_than_ms = match &args.older_than {
        Some(d) => crate::tokens::parse_ttl(d).map_err(|_| {
            anyhow::anyhow!("--older-than {d:?}: a number and a unit (ms, s, m, h, d)")
        })?,
        None => 0,
    };
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let pruned = client
            .prune(&args.realm.realm, args.pids.clone(), older_than_ms)
            .await?;
        if crate::output::json() {
            crate::output::doc(&serde_json::json!({ "pruned": pruned }));
        } else {
            outln!("forgot {} ended procs", pruned.len());
        }
        Ok(())
    })
}
