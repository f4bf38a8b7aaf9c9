//! `tabos mr wordcount|grep|run`: a MapReduce job on the node (crates/apps/mr) —
//! with a progress line while it runs and a summary at the end (Ctrl-C
//! leaves it running, and says how to follow or stop it); `tabos mr
//! ls|status|cancel|rm` for jobs already submitted; and the hidden `tabos
//! mr-task`, which is what the job's procs run.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use tabos_mr::driver::{Job, Order, Progress, Submit};
use tabos_mr::job::Kind;

use crate::procs::RealmArg;
use crate::NodeAddr;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    job: JobKind,
}

#[derive(clap::Subcommand)]
enum JobKind {
    /// Count the words (runs of non-whitespace bytes) of the input
    Wordcount(Common),
    /// Count, per input file, the lines that contain --pattern
    Grep {
        /// The byte string to look for
        #[arg(long)]
        pattern: String,
        #[command(flatten)]
        common: Common,
    },
    /// Run your own job: map and reduce programs of your own, wasm or native
    ///
    /// Map and reduce are wasm modules, or native programs and scripts,
    /// that read and print records on stdin and stdout — one
    /// `key<TAB>value` per line; a map program reads
    /// `file<TAB>line`, a reducer its records sorted by key. The programs
    /// are uploaded to the realm's files and run in the tasks' jails; see
    /// README.md, "MapReduce with your own code"
    Run {
        /// The map program: a file of this machine, or with --code a path
        /// inside DIR
        #[arg(long, value_name = "PROGRAM")]
        map: String,
        /// The reduce program (as --map)
        #[arg(long, value_name = "PROGRAM")]
        reduce: String,
        /// A combine program, run over each map task's records for each
        /// reducer (as --map)
        #[arg(long, value_name = "PROGRAM")]
        combine: Option<String>,
        /// Upload this directory as the job's code: --map, --reduce and
        /// --combine are then paths inside it (and may use its other files)
        #[arg(long, value_name = "DIR")]
        code: Option<PathBuf>,
        /// An argument given to every program (repeatable)
        #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
        args: Vec<String>,
        /// Seconds one run of a program may take before its task fails
        #[arg(long, default_value_t = 600)]
        time_limit: u64,
        #[command(flatten)]
        common: Common,
    },
    /// List the realm's jobs: status and progress
    Ls {
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// One job's status and progress
    Status {
        /// The job's id (printed when it was submitted; tabos mr ls)
        job: String,
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Stop a running job: it is marked failed ("cancelled") and its procs
    /// are evicted
    Cancel {
        job: String,
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Remove what an ended job left: its names, its files under /mr/JOB
    /// (intermediates and output) and its mailbox
    Rm {
        job: String,
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
}

fn status_json(s: &tabos_mr::control::JobStatus) -> serde_json::Value {
    serde_json::json!({
        "job": s.id, "kind": s.kind, "status": s.status,
        "maps": s.maps, "maps_done": s.maps_done,
        "reducers": s.reducers, "reducers_done": s.reducers_done,
        "retries": s.retries,
    })
}

/// `tabos mr ls|status|cancel|rm`.
fn control(job: &JobKind) -> anyhow::Result<()> {
    use tabos_mr::control;
    crate::runtime()?.block_on(async {
        match job {
            JobKind::Ls { realm, node } => {
                let c = node.connect().await?;
                let jobs = control::list(&c, &realm.realm).await?;
                if crate::output::json() {
                    let v: Vec<_> = jobs.iter().map(status_json).collect();
                    crate::output::doc(&serde_json::Value::Array(v));
                } else {
                    let cols = ["job", "kind", "status", "maps", "reduces", "retries"];
                    let rows: Vec<Vec<String>> = jobs
                        .iter()
                        .map(|s| {
                            vec![
                                s.id.clone(),
                                s.kind.clone(),
                                s.status.clone(),
                                format!("{}/{}", s.maps_done, s.maps),
                                format!("{}/{}", s.reducers_done, s.reducers),
                                s.retries.to_string(),
                            ]
                        })
                        .collect();
                    out!("{}", crate::output::table(&cols, &rows));
                }
            }
            JobKind::Status { job, realm, node } => {
                let c = node.connect().await?;
                let s = control::status(&c, &realm.realm, job).await?;
                if crate::output::json() {
                    crate::output::doc(&status_json(&s));
                } else {
                    outln!(
                        "job {} ({}): {}; maps {}/{}, reduces {}/{}, {} retried attempts",
                        s.id,
                        s.kind,
                        s.status,
                        s.maps_done,
                        s.maps,
                        s.reducers_done,
                        s.reducers,
                        s.retries
                    );
                }
            }
            JobKind::Cancel { job, realm, node } => {
                let c = node.connect().await?;
                let evicted = control::cancel(&c, &realm.realm, job).await?;
                crate::output::emit(
                    || format!("job {job} cancelled; evicted {} procs", evicted.len()),
                    || serde_json::json!({"job": job, "cancelled": true, "evicted": evicted}),
                );
            }
            JobKind::Rm { job, realm, node } => {
                let c = node.connect().await?;
                let n = control::remove(&c, &realm.realm, job).await?;
                crate::output::emit(
                    || format!("job {job} removed ({n} names and files)"),
                    || serde_json::json!({"job": job, "removed": n}),
                );
            }
            JobKind::Wordcount(_) | JobKind::Grep { .. } | JobKind::Run { .. } => {
                anyhow::bail!("wordcount, grep and run run a job, they do not control one")
            }
        }
        Ok(())
    })
}

#[derive(clap::Args)]
pub struct Common {
    /// Input files or directories of this machine (directories are walked;
    /// symlinks are not followed), or with --in-fs of the realm's tabos fs;
    /// repeatable
    #[arg(long = "input", required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    /// The inputs are in the realm's tabos fs (`tabos fs put`): mappers read
    /// them through the API from whichever node runs them — no file system
    /// shared between nodes
    #[arg(long)]
    pub in_fs: bool,
    /// Reducers (output partitions)
    #[arg(long, default_value_t = 4)]
    pub reducers: usize,
    /// Input per map task, in MiB (small files are packed together)
    #[arg(long, default_value_t = 32)]
    pub task_mib: u64,
    /// Leave out files that do not look like text (a NUL in their first 8 KiB)
    #[arg(long)]
    pub text_only: bool,
    /// Run without a standby coordinator
    #[arg(long)]
    pub no_standby: bool,
    /// Refuse the job if an input cannot be read by the realm's procs
    /// (by default such inputs are left out, and said so in one line)
    #[arg(long)]
    pub strict: bool,
    /// Results to print (the most frequent words; for grep, files in
    /// order; for run, the output's first lines)
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Fault injection for tests: attempt ATTEMPT of task TASK (m0, r1…)
    /// waits at AT (start) until told to resume — TASK:ATTEMPT:AT
    #[arg(long, hide = true, value_name = "TASK:ATTEMPT:AT")]
    pub pause: Option<String>,
    #[command(flatten)]
    pub realm: RealmArg,
    #[command(flatten)]
    pub node: NodeAddr,
}

impl Common {
    /// The job this asks for, with the procs run as `tabos mr-task …`.
    pub fn submit(&self, kind: impl Into<tabos_mr::driver::Work>) -> anyhow::Result<Submit> {
        let exe = std::env::current_exe().context("find the tabos executable")?;
        let mut s = Submit::new(kind, self.inputs.clone(), exe, vec!["mr-task".into()]);
        s.reducers = self.reducers;
        s.task_bytes = self.task_mib.max(1) << 20;
        s.text_only = self.text_only;
        s.standby = !self.no_standby;
        s.strict = self.strict;
        anyhow::ensure!(
            !(self.in_fs && self.text_only),
            "--text-only looks at files of this machine; it does not go with --in-fs"
        );
        s.inputs_in_fs = self.in_fs;
        if let Some(p) = &self.pause {
            let parts: Vec<&str> = p.split(':').collect();
            let [task, attempt, at] = parts[..] else {
                anyhow::bail!("--pause takes TASK:ATTEMPT:AT, not {p:?}");
            };
            s.pause = Some(tabos_mr::spec::Pause {
                task: task.into(),
                attempt: attempt
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--pause: {attempt:?} is not an attempt"))?,
                at: at.into(),
            });
        }
        Ok(s)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let JobKind::Run {
        map,
        reduce,
        combine,
        code,
        args,
        time_limit,
        common,
    } = &args.job
    {
        let programs = Programs {
            map,
            reduce,
            combine: combine.as_deref(),
            code: code.as_deref(),
        };
        return run_user(programs, args, *time_limit, common);
    }
    let (common, kind) = match &args.job {
        JobKind::Wordcount(c) => (c, Kind::WordCount),
        JobKind::Grep { pattern, common } => (common, Kind::grep(pattern.as_bytes())?),
        other => return control(other),
    };
    let submit = common.submit(kind.clone())?;
    crate::runtime()?.block_on(async {
        let client = common.node.connect().await?;
        let realm = &common.realm.realm;
        let (job, done) = run_job(&client, realm, submit, true).await?;
        if crate::output::json() {
            let sum = job.summary(common.top, order_of(&kind)).await?;
            let top: Vec<_> = sum
                .top
                .iter()
                .map(|(k, n)| serde_json::json!({"key": String::from_utf8_lossy(k), "count": n}))
                .collect();
            let v = serde_json::json!({
                "job": job.id(), "seconds": done.elapsed.as_secs_f64(), "bytes": done.bytes,
                "maps": done.maps, "reducers": done.reducers, "retries": done.retries,
                "distinct": sum.records, "total": sum.total, "top": top,
            });
            crate::output::doc(&v);
            return Ok(());
        }
        print_summary(&job, &done).await?;
        print_top(&job, &kind, common.top).await
    })
}

/// Submits and follows a job, drawing the progress line on stderr. With
/// `detachable`, Ctrl-C leaves the job running on the node and says how
/// to follow or stop it (not for a node that ends with this process).
/// Lines of a failed proc's stderr shown when its job fails.
const FAILURE_LINES: usize = 10;

pub async fn run_job(
    client: &tabos_client::Client,
    realm: &str,
    submit: Submit,
    detachable: bool,
) -> anyhow::Result<(Job, Progress)> {
    let mut job = Job::submit(client, realm, submit)
        .await
        .context("submit the job")?;
    eprintln!(
        "job {}: {} files, {:.1} MB in {} map tasks, {} reducers",
        job.id(),
        job.input_files,
        job.input_bytes() as f64 / 1e6,
        job.spec.maps,
        job.spec.reducers
    );
    if let Some(line) = tabos_mr::split::skipped_summary(&job.skipped) {
        eprintln!("{line} (--strict refuses the job instead)");
    }
    let tty = std::io::stderr().is_terminal();
    let mut last = (usize::MAX, usize::MAX, u32::MAX);
    let id = job.id().to_string();
    let interrupted = async move {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!(
            "\njob {id} goes on without this command: follow it with `tabos mr status {id}`, \
             stop it with `tabos mr cancel {id}`"
        );
        std::process::exit(130);
    };
    let interrupted = tokio::spawn(async move {
        if detachable {
            interrupted.await
        }
    });
    let done = job
        .wait(|p| {
            let now = (p.maps_done, p.reducers_done, p.retries);
            if now == last {
                return;
            }
            last = now;
            let line = progress_line(p);
            if tty {
                eprint!("\r{line}\x1b[K");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
        })
        .await;
    interrupted.abort();
    if tty {
        eprintln!();
    }
    if done.is_err() {
        // The failing proc's own last words, while they can still be read
        // (the demo's node goes away with it).
        if let Ok(Some((pid, lines))) = job.last_failure(FAILURE_LINES).await {
            if !lines.is_empty() {
                eprintln!("the last lines {pid} wrote to stderr:");
                for l in lines {
                    eprintln!("  {l}");
                }
            }
        }
    }
    Ok((job, done.context("the job did not finish")?))
}

fn progress_line(p: &Progress) -> String {
    const WIDTH: usize = 24;
    let total = (p.maps + p.reducers).max(1);
    let filled = (p.maps_done + p.reducers_done) * WIDTH / total;
    let secs = p.elapsed.as_secs_f64().max(1e-3);
    format!(
        "[{}{}] maps {}/{}  reduces {}/{}  {:.1} MB/s  {:.1} s{}",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        p.maps_done,
        p.maps,
        p.reducers_done,
        p.reducers,
        p.bytes_mapped as f64 / 1e6 / secs,
        secs,
        if p.retries > 0 {
            format!("  ({} retried)", p.retries)
        } else {
            String::new()
        }
    )
}

/// The job's totals and per-phase timings.
pub async fn print_summary(job: &Job, p: &Progress) -> anyhow::Result<()> {
    let secs = p.elapsed.as_secs_f64().max(1e-3);
    outln!(
        "job {} done in {:.2} s: {:.1} MB at {:.1} MB/s, {} map tasks, {} reducers, {} retried attempts",
        job.id(),
        secs,
        p.bytes as f64 / 1e6,
        p.bytes as f64 / 1e6 / secs,
        p.maps,
        p.reducers,
        p.retries
    );
    outln!("  phase        procs    first spawn → last exit    summed run time");
    for ph in job.phases().await? {
        outln!(
            "  {:<12} {:>5}    {:>10.3} s                {:>8.3} s",
            ph.name,
            ph.procs,
            ph.span.as_secs_f64(),
            ph.run.as_secs_f64()
        );
    }
    let reports = job.reports().await?;
    outln!(
        "  {} task reports taken from mailbox {}; output in tabos fs {}/out/part-0..{} (user mr)",
        reports.len(),
        job.layout.mailbox(),
        job.layout.root(),
        job.spec.reducers - 1
    );
    Ok(())
}

/// Which of a built-in job's records come first: the most frequent
/// words, or grep's files in order.
fn order_of(kind: &Kind) -> Order {
    match kind {
        Kind::WordCount => Order::MostFrequent,
        Kind::Grep { .. } => Order::ByKey,
    }
}

/// The top `n` results: the most frequent words, or grep's files in order.
pub async fn print_top(job: &Job, kind: &Kind, n: usize) -> anyhow::Result<()> {
    let sum = job.summary(n, order_of(kind)).await?;
    let (records, total) = (sum.records, sum.total);
    if matches!(kind, Kind::WordCount) {
        outln!(
            "\n{total} words, {records} distinct; the {} most frequent:",
            n.min(records)
        );
    } else {
        outln!(
            "\n{total} matching lines in {records} files; the first {}:",
            n.min(records)
        );
    }
    for (key, count) in &sum.top {
        outln!("  {count:>12}  {}", String::from_utf8_lossy(key));
    }
    Ok(())
}

/// The programs of `tabos mr run`, as given.
struct Programs<'a> {
    map: &'a str,
    reduce: &'a str,
    combine: Option<&'a str>,
    code: Option<&'a std::path::Path>,
}

impl Programs<'_> {
    /// Uploads the job's code — `--code DIR`, or a tree of the programs'
    /// files by their names — and says where each program is in it.
    async fn upload(
        &self,
        client: &mut tabos_client::Client,
        realm: &str,
    ) -> anyhow::Result<(String, Vec<tabos_mr::stream::Program>)> {
        use tabos_mr::stream::{Program, ProgramKind};
        let named: Vec<&str> = [Some(self.map), Some(self.reduce), self.combine]
            .into_iter()
            .flatten()
            .collect();
        let kind_of = |local: &std::path::Path| -> anyhow::Result<ProgramKind> {
            let mut head = [0u8; 4];
            let mut f = std::fs::File::open(local)
                .with_context(|| format!("cannot open {}", local.display()))?;
            let n = std::io::Read::read(&mut f, &mut head).unwrap_or(0);
            Ok(ProgramKind::of(&head[..n]))
        };
        if let Some(dir) = self.code {
            let mut programs = Vec::new();
            for p in &named {
                let path = p.trim_start_matches("./").to_string();
                // Inside the code, checked before anything is read.
                Program {
                    path: path.clone(),
                    kind: ProgramKind::Native,
                }
                .validate()?;
                let kind = kind_of(&dir.join(&path))?;
                programs.push(Program { path, kind });
            }
            let hash = crate::procs::upload(client, realm, dir).await?;
            return Ok((hash, programs));
        }
        // The programs' files, each by its name, in a tree of their own.
        let tree = std::env::temp_dir().join(format!(
            "tabos-mr-code-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        ));
        std::fs::create_dir(&tree).with_context(|| format!("cannot make {}", tree.display()))?;
        let made = async {
            let mut programs = Vec::new();
            let mut names: std::collections::HashMap<String, std::path::PathBuf> =
                Default::default();
            for p in &named {
                let local = std::fs::canonicalize(p).with_context(|| format!("cannot find {p}"))?;
                anyhow::ensure!(
                    local.is_file(),
                    "{p} is not a file (--code DIR uploads a directory)"
                );
                let name = local
                    .file_name()
                    .and_then(|n| n.to_str())
                    .with_context(|| format!("{p}: its name is not UTF-8"))?
                    .to_string();
                match names.get(&name) {
                    Some(other) if *other != local => anyhow::bail!(
                        "{p} and {} have the same name: put them in one directory and give --code",
                        other.display()
                    ),
                    Some(_) => {}
                    None => {
                        std::fs::copy(&local, tree.join(&name))
                            .with_context(|| format!("cannot copy {p}"))?;
                        names.insert(name.clone(), local.clone());
                    }
                }
                programs.push(Program {
                    path: name,
                    kind: kind_of(&local)?,
                });
            }
            let hash = crate::procs::upload(client, realm, &tree).await?;
            Ok((hash, programs))
        }
        .await;
        let _ = std::fs::remove_dir_all(&tree);
        made
    }
}

/// `tabos mr run`: uploads the programs, runs the job, and prints where
/// its output is and its first lines.
fn run_user(
    programs: Programs<'_>,
    args: &[String],
    time_limit: u64,
    common: &Common,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=tabos_mr::stream::TIME_LIMIT_MAX.as_secs()).contains(&time_limit),
        "--time-limit is 1..={} seconds",
        tabos_mr::stream::TIME_LIMIT_MAX.as_secs()
    );
    crate::runtime()?.block_on(async {
        let mut client = common.node.connect().await?;
        let realm = match common.realm.realm.as_str() {
            "" => client.who_am_i().await?.default_realm,
            r => r.to_string(),
        };
        // In the order named: map, reduce, then the combiner if any.
        let (code, found) = programs.upload(&mut client, &realm).await?;
        let mut found = found.into_iter();
        let (Some(map), Some(reduce), combine) = (found.next(), found.next(), found.next()) else {
            anyhow::bail!("a job needs a map and a reduce program");
        };
        let job = tabos_mr::stream::UserJob {
            code,
            map,
            reduce,
            combine,
            args: args.to_vec(),
            time_limit_ms: time_limit * 1000,
        };
        let submit = common.submit(job)?;
        let (job, done) = run_job(&client, &realm, submit, true).await?;
        let parts = job.output_bytes().await?;
        let lines: Vec<&[u8]> = parts
            .iter()
            .flat_map(|p| p.split(|&b| b == b'\n').filter(|l| !l.is_empty()))
            .collect();
        if crate::output::json() {
            let first: Vec<_> = lines
                .iter()
                .take(common.top)
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect();
            crate::output::doc(&serde_json::json!({
                "job": job.id(), "seconds": done.elapsed.as_secs_f64(), "bytes": done.bytes,
                "maps": done.maps, "reducers": done.reducers, "retries": done.retries,
                "output": (0..job.spec.reducers).map(|k| job.layout.output(k)).collect::<Vec<_>>(),
                "lines": lines.len(), "first": first,
            }));
            return Ok(());
        }
        print_summary(&job, &done).await?;
        outln!(
            "\n{} output lines; the first {}:",
            lines.len(),
            common.top.min(lines.len())
        );
        for l in lines.iter().take(common.top) {
            outln!("  {}", String::from_utf8_lossy(l));
        }
        Ok(())
    })
}
