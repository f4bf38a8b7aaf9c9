//! `tabos mr wordcount|grep`: a MapReduce job on the node (crates/apps/mr),
//! with a progress line while it runs and a summary at the end (Ctrl-C
//! leaves it running, and says how to follow or stop it); `tabos mr
//! ls|status|cancel|rm` for jobs already submitted; and the hidden `tabos
//! mr-task`, which is what the job's procs run.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use tabos_mr::driver::{Job, Progress, Submit};
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
            JobKind::Wordcount(_) | JobKind::Grep { .. } => {
                anyhow::bail!("wordcount and grep run a job, they do not control one")
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
    /// Results to print (the most frequent words; for grep, files in order)
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
    pub fn submit(&self, kind: Kind) -> anyhow::Result<Submit> {
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
            let mut out = job.output().await?;
            if matches!(kind, Kind::WordCount) {
                out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            }
            let top: Vec<_> = out
                .iter()
                .take(common.top)
                .map(|(k, n)| serde_json::json!({"key": String::from_utf8_lossy(k), "count": n}))
                .collect();
            let v = serde_json::json!({
                "job": job.id(), "seconds": done.elapsed.as_secs_f64(), "bytes": done.bytes,
                "maps": done.maps, "reducers": done.reducers, "retries": done.retries,
                "distinct": out.len(), "total": out.iter().map(|r| r.1).sum::<u64>(), "top": top,
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

/// The top `n` results: the most frequent words, or grep's files in order.
pub async fn print_top(job: &Job, kind: &Kind, n: usize) -> anyhow::Result<()> {
    let mut out = job.output().await?;
    let total = out.len();
    if matches!(kind, Kind::WordCount) {
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let words: u64 = out.iter().map(|r| r.1).sum();
        outln!(
            "\n{words} words, {total} distinct; the {} most frequent:",
            n.min(total)
        );
    } else {
        let lines: u64 = out.iter().map(|r| r.1).sum();
        outln!(
            "\n{lines} matching lines in {total} files; the first {}:",
            n.min(total)
        );
    }
    for (key, count) in out.iter().take(n) {
        outln!("  {count:>12}  {}", String::from_utf8_lossy(key));
    }
    Ok(())
}
