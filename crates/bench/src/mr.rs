//! `tabos-bench mr`: MapReduce word count and grep on tabos against the
//! systems people use for them, in the same run.
//!
//! Input: the Linux kernel source (Debian's `linux-source-6.1`, installed
//! with apt-get if missing and unpacked once under `target/bench-data`), or
//! a directory given with `--input`; `--quick` takes only its `kernel/`,
//! `fs/` and `mm/` subdirectories when they exist. The word count runs
//! again over `/usr/include` (`/usr/include/linux` in `--quick`), whose
//! distinct words are few next to the kernel source's 12 million: the
//! `wordcount_few_words.*` figures, the other regime.
//!
//! * tabos: an embedded node in-process (SQLite, block store) whose worker
//!   has 1 core slot, then 2 (σOS's workers: the cores a node offers its
//!   realm), running the job through the tabos API with the real procs —
//!   the coordinators, mappers and reducers are `tabos mr-task` processes.
//!   Timed from submission (planning included) to the job's `done`.
//! * The floor: tabos's map and reduce work in plain Rust (read each file,
//!   split on ASCII whitespace, count with the mapper's FNV-1a hash and no
//!   allocation per occurrence, sort and write the output), on 1 thread
//!   and on 2 (files dealt out by size; the counts partitioned by key, each
//!   partition merged and written by its own thread).
//! * grep: `grep -r -c` and `rg -c` (ripgrep, installed with apt-get if
//!   missing) over the same tree, against `tabos mr grep`.
//! * PySpark `local[2]` (pip-installed into `target/bench-venv`, or
//!   `TABOS_BENCH_VENV`): `read.text` with recursive lookup, then the
//!   DataFrame word count (split on ASCII whitespace, explode, `groupBy`
//!   count) — it runs in the JVM, several times faster than the same job
//!   with Python lambdas on RDDs — timed inside the script after the
//!   session is up (so the JVM's start is not counted against Spark).
//!
//! * tabos with the user's own code (`tabos mr run`): the examples of
//!   `examples/mr` — word count in Rust compiled to wasm (map, combine,
//!   reduce), grep as two shell scripts — uploaded and run by the same
//!   procs, against the built-in jobs and the same peers.
//!
//! Every contestant — tabos, the floor, grep, rg, PySpark — runs twice in
//! a full run (once in `--quick`) and its faster run counts; the page cache is warmed first so
//! every contestant reads from memory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use tabos_mr::driver::{Job, Submit, Work};
use tabos_mr::job::{Combiner, Kind, WORD_BYTES_MAX};
use tabos_mr::stream::{Program, ProgramKind, UserJob};

use crate::report::{round, Better, Figure, Report, Stat};

/// A job's output: keys and counts.
type Records = Vec<(Vec<u8>, u64)>;

const PATTERN: &str = "EXPORT_SYMBOL";
const REDUCERS: usize = 2;
/// Input per map task: at most 32 MiB, and at least 16 tasks.
const TASK_BYTES_MAX: u64 = 32 << 20;

/// Runs the suite over `input` (default: the Linux source).
pub fn run(quick: bool, input: Option<&Path>) -> anyhow::Result<Report> {
    let mut report = Report::new("mr", quick);
    let root = match input {
        Some(p) => p.to_path_buf(),
        None => linux_source()?,
    };
    let inputs = if quick {
        let parts: Vec<PathBuf> = ["kernel", "fs", "mm"]
            .iter()
            .map(|d| root.join(d))
            .filter(|p| p.is_dir())
            .collect();
        if parts.is_empty() {
            vec![root.clone()]
        } else {
            parts
        }
    } else {
        vec![root.clone()]
    };
    let exe = crate::tabos_exe()?;
    let files = plan(&inputs)?;
    let bytes: u64 = files.iter().map(|f| f.1).sum();
    let mb = bytes as f64 / 1e6;
    let under: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    let input_note = format!(
        "input: {} files, {mb:.1} MB under {}",
        files.len(),
        under.join(" ")
    );
    println!("mr: {input_note}");
    report.notes.push(input_note);
    // Every contestant runs this many times, and its best run counts.
    let runs: u32 = if quick { 1 } else { 2 };
    let task_bytes = TASK_BYTES_MAX
        .min(bytes / 16)
        .max(tabos_mr::split::SPLIT_BYTES_MIN);

    // Warm the page cache: every contestant reads from memory.
    for (f, _) in &files {
        let _ = std::fs::read(f);
    }

    let wc = wordcount(&exe, &inputs, &files, runs, task_bytes)?;
    let (floor_words, floor_keys) = (wc.words, wc.keys);
    let mut tabos_grep = f64::INFINITY;
    let mut grep_total = 0u64;
    for _ in 0..runs {
        let (secs, out) = tabos_job(
            &exe,
            &inputs,
            2,
            Kind::grep(PATTERN.as_bytes())?,
            task_bytes,
        )?;
        grep_total = out.iter().map(|r| r.1).sum();
        tabos_grep = tabos_grep.min(secs);
    }
    println!(
        "  tabos grep, 2 core slots: {:.1} MB/s ({grep_total} lines)",
        mb / tabos_grep
    );

    // The same jobs as the user's own code: the examples.
    let (wasm_dir, grep_dir) = user_examples()?;
    let mut user_wc = f64::INFINITY;
    let mut user_grep = f64::INFINITY;
    for _ in 0..runs {
        let (secs, out) = tabos_job(&exe, &inputs, 2, user_wordcount(&wasm_dir), task_bytes)?;
        let words: u64 = out.iter().map(|r| r.1).sum();
        anyhow::ensure!(
            words == floor_words && out.len() == floor_keys,
            "the wasm word count counted {words} words ({} distinct), the floor {floor_words} ({})",
            out.len(),
            floor_keys
        );
        user_wc = user_wc.min(secs);
        let (secs, out) = tabos_job(&exe, &inputs, 2, user_grep_job(&grep_dir), task_bytes)?;
        let lines: u64 = out.iter().map(|r| r.1).sum();
        anyhow::ensure!(
            lines == grep_total,
            "the grep scripts counted {lines} lines, the built-in grep {grep_total}"
        );
        user_grep = user_grep.min(secs);
    }
    println!(
        "  tabos mr run, 2 core slots: word count in wasm {:.1} MB/s, grep in sh {:.1} MB/s",
        mb / user_wc,
        mb / user_grep
    );

    // grep -r -c and rg -c.
    let grep = best_count(runs, || {
        timed_count(
            Command::new("grep")
                .args(["-r", "-c", PATTERN])
                .args(&inputs),
        )
    })?;
    let rg_bin = crate::names::debian_binary("mr", "ripgrep", &["/usr/bin/rg"])?;
    let rg = best_count(runs, || {
        timed_count(
            Command::new(&rg_bin)
                .args([
                    "-c",
                    "--no-ignore",
                    "--hidden",
                    "--no-messages",
                    "-j",
                    "2",
                    PATTERN,
                ])
                .args(&inputs),
        )
    })?;
    for (name, (_, n)) in [("grep -r -c", &grep), ("rg -c", &rg)] {
        if *n != grep_total {
            report.notes.push(format!(
                "{name} counted {n} matching lines, tabos {grep_total} (files it reads differently)"
            ));
        }
    }

    push_wordcount(&mut report, "wordcount", &wc);
    let mbps = |secs: f64| round(mb / secs, 1);
    let wc2 = mbps(wc.tabos[1]);
    report.figures.push(
        Figure::new(
            "grep.2workers_vs_grep.mb_per_s",
            mbps(tabos_grep),
            "MB/s",
            Better::Higher,
        )
        .peer("grep -r -c", Some(mbps(grep.0)))
        .runs(runs, Stat::BestOfRuns)
        .note(format!("pattern {PATTERN:?}: {grep_total} matching lines")),
    );
    report.figures.push(
        Figure::new(
            "grep.2workers_vs_rg.mb_per_s",
            mbps(tabos_grep),
            "MB/s",
            Better::Higher,
        )
        .peer("rg -c -j 2", Some(mbps(rg.0)))
        .runs(runs, Stat::BestOfRuns),
    );
    report.figures.push(
        Figure::new(
            "wordcount.user_wasm_2workers_vs_builtin.mb_per_s",
            mbps(user_wc),
            "MB/s",
            Better::Higher,
        )
        .peer(
            "tabos mr wordcount (built in, native), 2 core slots",
            Some(wc2),
        )
        .runs(runs, Stat::BestOfRuns)
        .note("examples/mr/wordcount: map, combine, reduce in Rust compiled to wasm32-wasip1"),
    );
    report.figures.push(
        Figure::new(
            "wordcount.user_wasm_2workers_vs_pyspark.mb_per_s",
            mbps(user_wc),
            "MB/s",
            Better::Higher,
        )
        .peer(
            "PySpark local[2]",
            wc.spark.as_ref().ok().map(|p| mbps(p.secs)),
        )
        .runs(runs, Stat::BestOfRuns),
    );
    report.figures.push(
        Figure::new(
            "grep.user_sh_2workers_vs_builtin.mb_per_s",
            mbps(user_grep),
            "MB/s",
            Better::Higher,
        )
        .peer(
            "tabos mr grep (built in, native), 2 core slots",
            Some(mbps(tabos_grep)),
        )
        .runs(runs, Stat::BestOfRuns)
        .note("examples/mr/grep: map and combine/reduce as awk scripts"),
    );
    report.notes.push(format!(
        "tabos: an embedded node (SQLite, block store) whose worker offers 1 or 2 core slots; \
         {REDUCERS} reducers, map tasks of {:.1} MiB, coordinator and standby; timed from \
         submission (planning and writing the split lists included) to the job's done; best of {runs}",
        task_bytes as f64 / f64::from(1 << 20)
    ));

    // The other regime: few distinct words (the issue's second input).
    let few = Path::new(FEW_WORDS_INPUT);
    let few_inputs = if quick && few.join("linux").is_dir() {
        vec![few.join("linux")]
    } else {
        vec![few.to_path_buf()]
    };
    let few_files = plan(&few_inputs)?;
    let few_bytes: u64 = few_files.iter().map(|f| f.1).sum();
    let few_task_bytes = TASK_BYTES_MAX
        .min(few_bytes / 16)
        .max(tabos_mr::split::SPLIT_BYTES_MIN);
    for (f, _) in &few_files {
        let _ = std::fs::read(f);
    }
    let few_note = format!(
        "second input (few distinct words): {} files, {:.1} MB under {}",
        few_files.len(),
        few_bytes as f64 / 1e6,
        few_inputs[0].display()
    );
    println!("mr: {few_note}");
    report.notes.push(few_note);
    let few_wc = wordcount(&exe, &few_inputs, &few_files, runs, few_task_bytes)?;
    push_wordcount(&mut report, "wordcount_few_words", &few_wc);
    Ok(report)
}

/// The input with few distinct words beside the Linux source's 12 million:
/// the system's C headers.
const FEW_WORDS_INPUT: &str = "/usr/include";

/// The files under `inputs`, with their sizes.
fn plan(inputs: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    Ok(tabos_mr::split::plan(inputs, u64::MAX)?
        .into_iter()
        .map(|s| (s.path, s.len))
        .collect())
}

/// PySpark's run: its version, best seconds, words counted.
struct Spark {
    version: String,
    secs: f64,
    words: u64,
}

/// One input's word count by every contestant: the floor on 1 and 2
/// threads, tabos on 1 and 2 core slots, PySpark; best of `runs` each.
struct WordCount {
    runs: u32,
    mb: f64,
    floor1: f64,
    floor2: f64,
    tabos: [f64; 2],
    spark: Result<Spark, String>,
    /// Words and distinct words, as the floor counted them (tabos's
    /// counts are checked equal).
    words: u64,
    keys: usize,
}

/// Measures [`WordCount`] over `inputs` (`files`: their files, already
/// read once so the page cache holds them).
fn wordcount(
    exe: &Path,
    inputs: &[PathBuf],
    files: &[(PathBuf, u64)],
    runs: u32,
    task_bytes: u64,
) -> anyhow::Result<WordCount> {
    let mb = files.iter().map(|f| f.1).sum::<u64>() as f64 / 1e6;
    let mut floor1 = f64::INFINITY;
    let mut floor2 = f64::INFINITY;
    let mut floor_counts: Vec<Records> = Vec::new();
    let floor_out = tabos_store::testing::TempDir::new("bench-mr-floor");
    for _ in 0..runs {
        let t = Instant::now();
        floor_counts = floor_wordcount(files, 1, floor_out.path())?;
        floor1 = floor1.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let c2 = floor_wordcount(files, 2, floor_out.path())?;
        floor2 = floor2.min(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            c2 == floor_counts,
            "the 2-thread floor disagrees with the 1-thread one"
        );
    }
    let words: u64 = floor_counts.iter().flatten().map(|r| r.1).sum();
    let keys: usize = floor_counts.iter().map(Vec::len).sum();
    drop(floor_counts);
    println!(
        "  floor: 1 thread {:.1} MB/s, 2 threads {:.1} MB/s ({words} words, {keys} distinct)",
        mb / floor1,
        mb / floor2
    );
    let mut tabos = [f64::INFINITY; 2];
    for (slot, cores) in [1i64, 2].into_iter().enumerate() {
        for _ in 0..runs {
            let (secs, out) = tabos_job(exe, inputs, cores, Kind::WordCount, task_bytes)?;
            let counted: u64 = out.iter().map(|r| r.1).sum();
            anyhow::ensure!(
                counted == words && out.len() == keys,
                "tabos counted {counted} words ({} distinct), the floor {words} ({keys})",
                out.len(),
            );
            tabos[slot] = tabos[slot].min(secs);
        }
        println!(
            "  tabos wordcount, {cores} core slot(s): {:.1} MB/s",
            mb / tabos[slot]
        );
    }
    let spark = pyspark_wordcount(inputs, runs).map(|(version, secs, words)| Spark {
        version,
        secs,
        words,
    });
    match &spark {
        Ok(p) => println!(
            "  PySpark {} local[2]: {:.1} MB/s ({} words)",
            p.version,
            mb / p.secs,
            p.words
        ),
        Err(e) => println!("  PySpark: not measured: {e}"),
    }
    Ok(WordCount {
        runs,
        mb,
        floor1,
        floor2,
        tabos,
        spark,
        words,
        keys,
    })
}

/// The figures of one input's word count, named `{prefix}.…`.
fn push_wordcount(report: &mut Report, prefix: &str, wc: &WordCount) {
    let mbps = |secs: f64| round(wc.mb / secs, 1);
    let runs = wc.runs;
    let wc2 = mbps(wc.tabos[1]);
    let counted = format!("{} words, {} distinct", wc.words, wc.keys);
    match &wc.spark {
        Ok(p) => report.notes.push(format!(
            "{prefix}: PySpark {} local[2], DataFrame API: {} words (split on ASCII \
             whitespace after UTF-8 decoding; tabos and the floor {} over bytes); \
             timed after the session started",
            p.version, p.words, wc.words
        )),
        Err(e) => report
            .notes
            .push(format!("{prefix}: PySpark not measured: {e}")),
    }
    report.figures.push(
        Figure::new(
            format!("{prefix}.2workers_vs_pyspark.mb_per_s"),
            wc2,
            "MB/s",
            Better::Higher,
        )
        .peer(
            "PySpark local[2]",
            wc.spark.as_ref().ok().map(|p| mbps(p.secs)),
        )
        .runs(runs, Stat::BestOfRuns)
        .target("ratio >= 5")
        .note(counted.clone()),
    );
    report.figures.push(
        Figure::new(
            format!("{prefix}.2workers_vs_floor2.mb_per_s"),
            wc2,
            "MB/s",
            Better::Higher,
        )
        .peer(
            "floor: the same work in Rust, 2 threads, counting partitioned by key",
            Some(mbps(wc.floor2)),
        )
        .runs(runs, Stat::BestOfRuns)
        .target("ratio >= 0.8"),
    );
    report.figures.push(
        Figure::new(
            format!("{prefix}.1worker_vs_floor1.mb_per_s"),
            mbps(wc.tabos[0]),
            "MB/s",
            Better::Higher,
        )
        .peer(
            "floor: the same work in Rust, 1 thread",
            Some(mbps(wc.floor1)),
        )
        .runs(runs, Stat::BestOfRuns),
    );
    report.figures.push(
        Figure::new(
            format!("{prefix}.2workers_vs_1worker.mb_per_s"),
            wc2,
            "MB/s",
            Better::Higher,
        )
        .peer("tabos, 1 worker core", Some(mbps(wc.tabos[0])))
        .runs(runs, Stat::BestOfRuns)
        .target("ratio >= 1.8"),
    );
}

/// What [`tabos_job`] takes: a [`Contest`], or a built-in [`Kind`].
struct ContestOrKind(Contest);

impl From<Kind> for ContestOrKind {
    fn from(k: Kind) -> Self {
        ContestOrKind(Contest::BuiltIn(k))
    }
}

impl From<Contest> for ContestOrKind {
    fn from(c: Contest) -> Self {
        ContestOrKind(c)
    }
}

/// A job to time: a built-in one, or the user's own programs and the
/// local directory uploaded as their code.
enum Contest {
    BuiltIn(Kind),
    User { code: PathBuf, job: UserJob },
}

/// The examples of `examples/mr`: the word count built for wasm (with the
/// installed rustc; its target added once), and grep's scripts.
fn user_examples() -> anyhow::Result<(PathBuf, PathBuf)> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/mr");
    wasm_target()?;
    let out = std::env::temp_dir().join(format!("tabos-bench-mr-wasm-{}", std::process::id()));
    let built = Command::new("sh")
        .arg(examples.join("wordcount/build.sh"))
        .arg(&out)
        .status()
        .context("run examples/mr/wordcount/build.sh")?;
    anyhow::ensure!(built.success(), "building the wasm word count failed");
    Ok((out, examples.join("grep")))
}

/// The installed rustc's wasm32-wasip1 target, added once (what the
/// examples written in Rust for wasm are built with).
pub(crate) fn wasm_target() -> anyhow::Result<()> {
    let has_target = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == "wasm32-wasip1")
        })
        .unwrap_or(false);
    if !has_target {
        let ok = Command::new("rustup")
            .args(["target", "add", "wasm32-wasip1"])
            .status()
            .context("cannot run rustup to add the wasm32-wasip1 target")?;
        anyhow::ensure!(ok.success(), "rustup target add wasm32-wasip1 failed");
    }
    Ok(())
}

fn user_wordcount(dir: &Path) -> Contest {
    let wasm = |p: &str| Program {
        path: p.into(),
        kind: ProgramKind::Wasm,
    };
    Contest::User {
        code: dir.to_path_buf(),
        job: UserJob {
            code: String::new(),
            map: wasm("map.wasm"),
            reduce: wasm("reduce.wasm"),
            combine: Some(wasm("sum.wasm")),
            args: Vec::new(),
            time_limit_ms: tabos_mr::stream::TIME_LIMIT_DEFAULT.as_millis() as u64,
        },
    }
}

fn user_grep_job(dir: &Path) -> Contest {
    let sh = |p: &str| Program {
        path: p.into(),
        kind: ProgramKind::Native,
    };
    Contest::User {
        code: dir.to_path_buf(),
        job: UserJob {
            code: String::new(),
            map: sh("map.sh"),
            reduce: sh("sum.sh"),
            combine: Some(sh("sum.sh")),
            args: vec![PATTERN.into()],
            time_limit_ms: tabos_mr::stream::TIME_LIMIT_DEFAULT.as_millis() as u64,
        },
    }
}

/// Runs one job on a fresh embedded node whose worker has `cores`; its
/// wall time and output.
fn tabos_job(
    exe: &Path,
    inputs: &[PathBuf],
    cores: i64,
    kind: impl Into<ContestOrKind>,
    task_bytes: u64,
) -> anyhow::Result<(f64, Records)> {
    let kind = kind.into().0;
    let dir = tabos_store::testing::TempDir::new("bench-mr");
    let settings = tabos_node::NodeSettings {
        logs: dir.path().join("logs"),
        cores,
        blocks: Some(tabos_node::BlockStoreSettings::new(
            dir.path().join("blocks.dev"),
            8 << 30,
        )),
        ..tabos_node::NodeSettings::defaults()
    };
    let node = tabos_node::Node::open_with(
        &tabos_store::Config::sqlite(dir.path().join("db")),
        settings,
    )?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let listener = tabos_node::bind("127.0.0.1:0").await?;
        let addr = tabos_node::local_addr(&listener)
            .context("listener address")?
            .to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let operator = node.operator_credential("bench").await?;
        let server = tokio::spawn(tabos_node::serve(node, listener, async {
            let _ = stopped.await;
        }));
        let mut client = tabos_client::Client::connect(&addr, &operator.token).await?;
        // The mappers read the inputs in their jails: the realm's operator
        // allows those paths.
        let host_paths = inputs
            .iter()
            .map(|p| Ok(std::fs::canonicalize(p)?.display().to_string()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        client
            .set_realm(tabos_client::proto::SetRealmRequest {
                realm: "default".into(),
                host_paths,
                ..Default::default()
            })
            .await?;
        // A user job's code is uploaded before the clock starts (as a
        // user's would be, once, before the jobs that use it).
        let work: Work = match kind {
            Contest::BuiltIn(k) => k.into(),
            Contest::User { code, mut job } => {
                job.code = client.upload_code("default", &code).await?.hash;
                job.into()
            }
        };
        let mut s = Submit::new(
            work,
            inputs.to_vec(),
            exe.to_path_buf(),
            vec!["mr-task".into()],
        );
        s.reducers = REDUCERS;
        s.task_bytes = task_bytes;
        let t = Instant::now();
        let mut job = Job::submit(&client, "default", s).await?;
        job.wait(|_| {}).await?;
        let secs = t.elapsed().as_secs_f64();
        let out = job.output().await?;
        let _ = stop.send(());
        server.await??;
        Ok((secs, out))
    })
}

/// The floor: the work of tabos's mappers and reducers with nothing of
/// tabos in between — read each whole file, split on ASCII whitespace
/// (words cut at the mapper's [`WORD_BYTES_MAX`]), count in the mapper's
/// own [`Combiner`] (FNV-1a, short keys in their table slots and long
/// ones in an arena, split by key over the job's reducers; each key copied
/// out once, for the merge), then sort and write each reducer's
/// output — on `threads` threads: files dealt out in turn by size, each
/// thread counting its files into its own combiner and sorting its
/// partitions, then each partition merged from every thread's, sorted
/// run by sorted run, and written by a thread of its own (partitioned by
/// key: no thread merges alone — with 12 million distinct words, merging
/// is most of the work). Returns each reducer's records, sorted by key.
fn floor_wordcount(
    files: &[(PathBuf, u64)],
    threads: usize,
    out_dir: &Path,
) -> anyhow::Result<Vec<Records>> {
    let mut order: Vec<&(PathBuf, u64)> = files.iter().collect();
    order.sort_by_key(|f| std::cmp::Reverse(f.1));
    let shares: Vec<Vec<&(PathBuf, u64)>> = (0..threads)
        .map(|t| order.iter().skip(t).step_by(threads).copied().collect())
        .collect();
    // Each thread's partitions, each sorted by key.
    let counted: Vec<Vec<Records>> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .iter()
            .map(|share| {
                s.spawn(move || -> anyhow::Result<Vec<Records>> {
                    let mut c = Combiner::new(REDUCERS)?;
                    for (f, _) in share {
                        let Ok(data) = std::fs::read(f) else { continue };
                        for w in data
                            .split(|b| b.is_ascii_whitespace())
                            .filter(|w| !w.is_empty())
                        {
                            for piece in w.chunks(WORD_BYTES_MAX) {
                                c.emit(piece, 1);
                            }
                        }
                    }
                    Ok(c.into_parts())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(joined)
            .collect::<anyhow::Result<_>>()
    })?;
    // Partition r's sorted runs, from every thread.
    let mut runs: Vec<Vec<Records>> = (0..REDUCERS).map(|_| Vec::new()).collect();
    for parts in counted {
        for (r, part) in parts.into_iter().enumerate() {
            runs[r].push(part);
        }
    }
    // Merged and written, the partitions dealt out over the threads.
    let mut dealt: Vec<Vec<(usize, Vec<Records>)>> = (0..threads).map(|_| Vec::new()).collect();
    for (r, part_runs) in runs.into_iter().enumerate() {
        dealt[r % threads].push((r, part_runs));
    }
    let mut parts: Vec<(usize, Records)> = std::thread::scope(|s| {
        let handles: Vec<_> = dealt
            .into_iter()
            .map(|mine| {
                s.spawn(move || -> anyhow::Result<Vec<(usize, Records)>> {
                    let mut done = Vec::new();
                    for (r, part_runs) in mine {
                        let merged = part_runs
                            .into_iter()
                            .reduce(merge_counts)
                            .unwrap_or_default();
                        write_part(&out_dir.join(format!("floor.{r}.out")), &merged)?;
                        done.push((r, merged));
                    }
                    Ok(done)
                })
            })
            .collect();
        let per_thread: Vec<Vec<(usize, Records)>> = handles
            .into_iter()
            .map(joined)
            .collect::<anyhow::Result<_>>()?;
        Ok::<_, anyhow::Error>(per_thread.into_iter().flatten().collect())
    })?;
    parts.sort_by_key(|p| p.0);
    Ok(parts.into_iter().map(|p| p.1).collect())
}

/// A floor thread's result.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, anyhow::Result<T>>) -> anyhow::Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("a floor thread panicked"))?
}

/// Two runs of records sorted by key, merged into one: a key in both gets
/// the sum of its counts.
fn merge_counts(a: Records, b: Records) -> Records {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match x.0.cmp(&y.0) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    let (k, n) = a.next().expect("peeked");
                    let (_, m) = b.next().expect("peeked");
                    Some((k, n + m))
                }
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// One reducer's output: a `word<TAB>count` line per record, synced.
fn write_part(path: &Path, records: &Records) -> anyhow::Result<()> {
    use std::io::Write as _;
    // Lines as a reducer writes them (tabos_mr::format::put_text), written
    // a megabyte at a time.
    let mut f = std::fs::File::create(path)?;
    let mut text = Vec::with_capacity(2 << 20);
    for (k, v) in records {
        tabos_mr::format::put_text(&mut text, k, *v);
        if text.len() >= 1 << 20 {
            f.write_all(&text)?;
            text.clear();
        }
    }
    f.write_all(&text)?;
    f.sync_all()?;
    Ok(())
}

/// The fastest of `runs` runs of `f` (wall time, count).
fn best_count(
    runs: u32,
    mut f: impl FnMut() -> anyhow::Result<(f64, u64)>,
) -> anyhow::Result<(f64, u64)> {
    let mut best = f()?;
    for _ in 1..runs {
        let next = f()?;
        if next.0 < best.0 {
            best = next;
        }
    }
    Ok(best)
}

/// Runs a `-c` grep; its wall time and the sum of its counts.
fn timed_count(cmd: &mut Command) -> anyhow::Result<(f64, u64)> {
    let t = Instant::now();
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    let secs = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let total = text
        .lines()
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<u64>().ok())
        .sum();
    Ok((secs, total))
}

/// The Linux source tree, unpacked once under target/bench-data.
pub fn linux_source() -> anyhow::Result<PathBuf> {
    let dest = PathBuf::from("target/bench-data");
    let tree = dest.join("linux-source-6.1");
    if tree.join("Makefile").exists() {
        return Ok(tree);
    }
    let tarball = crate::names::debian_binary(
        "mr",
        "linux-source-6.1",
        &["/usr/src/linux-source-6.1.tar.xz"],
    )?;
    std::fs::create_dir_all(&dest)?;
    println!(
        "mr: unpacking {} into {} (once) ...",
        tarball.display(),
        dest.display()
    );
    let ok = Command::new("tar")
        .arg("-xJf")
        .arg(&tarball)
        .arg("-C")
        .arg(&dest)
        .status()?;
    anyhow::ensure!(ok.success(), "tar -xJf {} failed", tarball.display());
    anyhow::ensure!(
        tree.join("Makefile").exists(),
        "no {} after unpacking",
        tree.display()
    );
    Ok(tree)
}

/// PySpark local[2] word count over `inputs`: (version, seconds, words).
fn pyspark_wordcount(inputs: &[PathBuf], runs: u32) -> Result<(String, f64, u64), String> {
    let python = crate::venv::python_with("pyspark", "pyspark")?;
    let paths: Vec<String> = inputs
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    let script = format!(
        r#"
import time, pyspark
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("wc")
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
from pyspark.sql import functions as F
best = None
for _ in range({runs}):
    t = time.perf_counter()
    text = spark.read.option("recursiveFileLookup", "true").text([{paths}])
    words = text.select(F.explode(F.split(F.col("value"), "[ \\t\\n\\f\\r]+")).alias("w")).where(F.col("w") != "")
    counts = words.groupBy("w").count()
    total = counts.agg(F.sum("count")).collect()[0][0]
    secs = time.perf_counter() - t
    best = secs if best is None else min(best, secs)
print("RESULT", pyspark.__version__, best, total)
spark.stop()
"#,
        paths = paths.join(", ")
    );
    let out = Command::new(&python)
        .args(["-c", &script])
        .output()
        .map_err(|e| format!("running PySpark: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            format!("PySpark printed no result: {}", tail.join(" | "))
        })?;
    let f: Vec<&str> = line.split_whitespace().collect();
    match f.as_slice() {
        [_, v, s, w] => Ok((
            v.to_string(),
            s.parse().map_err(|_| format!("bad output {line:?}"))?,
            w.parse().map_err(|_| format!("bad output {line:?}"))?,
        )),
        _ => Err(format!("bad output {line:?}")),
    }
}
