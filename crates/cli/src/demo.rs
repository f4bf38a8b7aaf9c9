//! `tabos demo`: a newcomer's first run — MapReduce on tabos.
//!
//! Starts an embedded node in a temporary directory (nothing to install),
//! serves its API on a free loopback port, and runs the main job on it: a
//! word count (crates/apps/mr) over a text corpus every Linux machine has
//! (/usr/include and /usr/share, text files only; `--input` overrides) —
//! a coordinator proc, one mapper proc per map task, one reducer proc per
//! partition, all real processes talking to the node through its API. It
//! prints the 20 most frequent words and the job's phases, runs a user's
//! own job (the grep example: shell scripts uploaded with it), and asks
//! the node, in SQL through the same API, about the OS state the job left
//! behind: its procs, their timings, and their provenance.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use tabos_client::Value;
use tabos_mr::driver::Submit;
use tabos_mr::job::Kind;
use tabos_store::Config;

#[derive(clap::Args)]
pub struct Args {
    /// Input files or directories (default: /usr/include and /usr/share)
    #[arg(long = "input", num_args = 1..)]
    inputs: Vec<PathBuf>,
    /// Reducers (output partitions)
    #[arg(long, default_value_t = 4)]
    reducers: usize,
    /// Input per map task, in MiB
    #[arg(long, default_value_t = 16)]
    task_mib: u64,
    /// Keep the data directory here instead of a temporary one
    #[arg(long)]
    data: Option<PathBuf>,
}

/// The default corpus: text every Linux machine has.
const CORPUS: [&str; 2] = ["/usr/include", "/usr/share"];

pub fn run(args: Args) -> anyhow::Result<()> {
    // The throwaway node's own diagnostics: only what went wrong.
    crate::up::init_logs(crate::up::LogFormat::Text, "warn")?;
    let t0 = Instant::now();
    let tmp;
    let dir = match &args.data {
        Some(d) => d.clone(),
        None => {
            tmp = TempDir::new()?;
            tmp.0.clone()
        }
    };
    let inputs: Vec<PathBuf> = if args.inputs.is_empty() {
        CORPUS
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect()
    } else {
        args.inputs.clone()
    };
    anyhow::ensure!(
        !inputs.is_empty(),
        "no input: none of {CORPUS:?} exists; give --input"
    );
    outln!("tabos demo: an embedded node in {}", dir.display());
    let settings = tabos_node::NodeSettings {
        logs: dir.join("logs"),
        blocks: Some(tabos_node::BlockStoreSettings::new(
            dir.join("blocks.dev"),
            4 << 30,
        )),
        ..tabos_node::NodeSettings::defaults()
    };
    let (cores, realm) = (settings.cores, settings.realm.clone());
    // A node, as `tabos up` serves one: its descriptors up to the hard
    // limit (its procs get the old one back).
    let _ = tabos_store::descriptors::raise_soft_limit();
    let config = Config::sqlite(dir.join("db"));
    tabos_store::descriptors::room_to_serve(config.descriptors_at_rest()?)?;
    let node =
        tabos_node::Node::open_with(&config, settings).context("open the kernel database")?;
    outln!(
        "  kernel database: SQLite, {} partitions; one worker of {cores} cores in realm `{realm}`",
        node.store.partitions(),
    );
    let exe = std::env::current_exe().context("find the tabos executable")?;
    let mut submit = Submit::new(
        Kind::WordCount,
        inputs.clone(),
        exe.clone(),
        vec!["mr-task".into()],
    );
    submit.reducers = args.reducers;
    submit.task_bytes = args.task_mib.max(1) << 20;
    submit.text_only = true;

    crate::runtime()?.block_on(async move {
        let listener = tabos_node::bind("127.0.0.1:0").await?;
        let addr = tabos_node::local_addr(&listener)
            .context("listener address")?
            .to_string();
        // The demo acts as the operator of its throwaway node.
        let operator = node.operator_credential("tabos demo").await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(tabos_node::serve(node, listener, async {
            let _ = stopped.await;
        }));
        outln!("  serving the tabos API on {addr}\n");
        let client = tabos_client::Client::connect(&addr, &operator.token).await?;
        // The mappers read the inputs in their jails: as the operator, the
        // demo lets its realm's procs see them (read-only).
        let mut allowed = Vec::new();
        for p in &inputs {
            let p = std::fs::canonicalize(p).with_context(|| format!("input {}", p.display()))?;
            allowed.push(p.display().to_string());
        }
        client
            .clone()
            .set_realm(tabos_client::proto::SetRealmRequest {
                realm: realm.clone(),
                host_paths: allowed,
                ..Default::default()
            })
            .await
            .context("allow the realm's procs to see the inputs")?;

        let shown: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
        outln!(
            "[1/4] word count over the text files of {} (mappers are LC procs of one core, \
             reducers and coordinators BE procs; progress on stderr)",
            shown.join(" ")
        );
        let (job, done) = crate::mr::run_job(&client, &realm, submit, false).await?;
        outln!();
        crate::mr::print_summary(&job, &done).await?;
        crate::mr::print_top(&job, &Kind::WordCount, 20).await?;

        user_job(&client, &realm, &dir, &inputs[0], &args, exe).await?;

        outln!("\n[3/4] asking the node about the job, in SQL through its API:\n");
        let mut c = client.clone();
        let role = "CASE substr(pid, $2, 1) WHEN 'm' THEN 'mapper' WHEN 'r' THEN 'reducer' \
                    ELSE 'coordinator' END";
        let queries = [
            (
                "Procs per role, kind, class and state",
                format!(
                    "SELECT {role} AS role, kind, class, state, count(*) AS procs \
                     FROM proc WHERE realm = $1 AND pid LIKE $3 \
                     GROUP BY 1, 2, 3, 4 ORDER BY 1, 4"
                ),
            ),
            (
                "Time from spawn to exit, per phase (ms): queued = spawn to start",
                format!(
                    "SELECT {role} AS phase, count(*) AS procs, \
                     round(avg(start_us - spawn_us) / 1000.0, 1) AS avg_queued, \
                     round(avg(exit_us - start_us) / 1000.0, 1) AS avg_run, \
                     round((max(exit_us) - min(spawn_us)) / 1000.0, 1) AS phase_span \
                     FROM proc WHERE realm = $1 AND pid LIKE $3 \
                     GROUP BY 1 ORDER BY min(spawn_us)"
                ),
            ),
            (
                "Provenance: which proc read which file and sent which message",
                "SELECT e.pid, split_part(e.detail, ' @', 1) AS read_file, \
                 CAST(m.payload AS TEXT) AS sent_message \
                 FROM proc_event e JOIN message_log m ON m.realm = e.realm AND m.sender = e.pid \
                 WHERE e.realm = $1 AND e.event = 'fs_read' AND e.pid LIKE $2 \
                 AND (e.pid LIKE '%-m0-%' OR e.pid LIKE '%-r0-%') \
                 ORDER BY e.pid, e.seq LIMIT 12"
                    .to_string(),
            ),
        ];
        let realm_value = Value::Text(realm.clone());
        let procs = Value::Text(format!("{}-%", job.id()));
        let role_at = Value::Int(job.id().len() as i64 + 2);
        for (n, (title, sql)) in queries.iter().enumerate() {
            outln!("-- {title}\n{}\n", squeeze(sql));
            let params = if n < 2 {
                vec![realm_value.clone(), role_at.clone(), procs.clone()]
            } else {
                vec![realm_value.clone(), procs.clone()]
            };
            let result = c.sql(sql, params).await?;
            crate::output::print_result(&result, false);
            outln!();
        }

        outln!("[4/4] the namespace and files the job used:");
        let listed = c.name_readdir(&realm, &job.layout.root()).await?;
        let names: Vec<&str> = listed
            .entries
            .iter()
            .map(|e| e.path.rsplit('/').next().unwrap_or_default())
            .collect();
        outln!("  tabos ls {}: {}", job.layout.root(), names.join(" "));
        let (files, bytes) = c.fs_du(&realm, &job.layout.root(), "", 0).await?;
        outln!(
            "  tabos fs du {}: {files} files, {bytes} bytes",
            job.layout.root()
        );
        outln!("\ndemo finished in {:.1} s", t0.elapsed().as_secs_f64());
        let _ = stop.send(());
        server.await??;
        Ok(())
    })
}

/// The grep example (examples/mr/grep: two shell scripts, built into this
/// binary) as a user's own job: uploaded to the realm's files, run by the
/// same coordinator, mapper and reducer procs, over `input`.
async fn user_job(
    client: &tabos_client::Client,
    realm: &str,
    dir: &std::path::Path,
    input: &std::path::Path,
    args: &Args,
    exe: PathBuf,
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use tabos_mr::stream::{Program, ProgramKind, UserJob};
    const PATTERN: &str = "#include";
    outln!(
        "\n[2/4] your own code: examples/mr/grep, two shell scripts, uploaded to the realm's \
         files and run by the same procs (`tabos mr run --map map.sh --reduce sum.sh \
         --arg '{PATTERN}'`) over {}",
        input.display()
    );
    let code = dir.join("grep-example");
    std::fs::create_dir_all(&code)?;
    for (name, text) in [
        ("map.sh", include_str!("../../../examples/mr/grep/map.sh")),
        ("sum.sh", include_str!("../../../examples/mr/grep/sum.sh")),
    ] {
        std::fs::write(code.join(name), text)?;
        std::fs::set_permissions(code.join(name), std::fs::Permissions::from_mode(0o755))?;
    }
    let uploaded = client.clone().upload_code(realm, &code).await?;
    let script = |path: &str| Program {
        path: path.into(),
        kind: ProgramKind::Native,
    };
    let job = UserJob {
        code: uploaded.hash,
        map: script("map.sh"),
        reduce: script("sum.sh"),
        combine: Some(script("sum.sh")),
        args: vec![PATTERN.into()],
        time_limit_ms: tabos_mr::stream::TIME_LIMIT_DEFAULT.as_millis() as u64,
    };
    let mut submit = Submit::new(job, vec![input.to_path_buf()], exe, vec!["mr-task".into()]);
    submit.reducers = args.reducers;
    submit.task_bytes = args.task_mib.max(1) << 20;
    submit.text_only = true;
    let (job, done) = crate::mr::run_job(client, realm, submit, false).await?;
    outln!();
    crate::mr::print_summary(&job, &done).await?;
    let text = job.output_bytes().await?.concat();
    let mut files: Vec<(u64, String)> = String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            let (file, n) = l.rsplit_once('\t')?;
            Some((n.parse().ok()?, file.to_string()))
        })
        .collect();
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    outln!(
        "\n{} files have lines with {PATTERN:?}; the 5 with the most:",
        files.len()
    );
    for (n, file) in files.iter().take(5) {
        outln!("  {n:>12}  {file}");
    }
    Ok(())
}

/// A query on one line, for printing.
fn squeeze(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A temporary directory removed when the demo ends.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let p = std::env::temp_dir().join(format!(
            "tabos-demo-{}-{}",
            std::process::id(),
            tabos_store::now_us()
        ));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
