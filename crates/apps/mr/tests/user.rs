//! User jobs (issue 41, item 2) on a real node (in-process, native procs
//! running `tabos-mr-task`, jailed where the host allows): map, combine
//! and reduce as uploaded programs speaking the record protocol — the
//! examples (word count in Rust compiled to wasm, grep as shell scripts)
//! equal the built-in jobs' direct computation, an inverted index written
//! as a script equals one computed here, on SQLite and on PostgreSQL; a
//! mapper that crashes, a reducer that loops past its time limit and a
//! module that traps each fail their task with its message, attempt after
//! attempt, and then the job.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use tabos_client::Client;
use tabos_mr::driver::{Job, Submit};
use tabos_mr::job::Kind;
use tabos_mr::stream::{Program, ProgramKind, UserJob};
use tabos_mr::{direct, format};
use tabos_node::{Node, NodeSettings};
use tabos_store::testing::TempDir;
use tabos_store::Config;

const REALM: &str = "default";

/// The repository's examples/mr.
fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/mr")
}

/// The word count example built for wasm32-wasip1, once per test binary
/// (its build script with the installed rustc; `.ci/run` adds the target).
fn wordcount_wasm() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mr-wordcount-wasm");
        let o = std::process::Command::new("sh")
            .arg(examples().join("wordcount/build.sh"))
            .arg(&out)
            .output()
            .expect("run examples/mr/wordcount/build.sh");
        assert!(
            o.status.success(),
            "building the wasm example failed (rustup target add wasm32-wasip1?): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
}

/// A node with 2 cores whose BE procs fill up to 4, on `config`.
async fn start(dir: &TempDir, config: Config, id: &str) -> tabos_node::Embedded {
    let settings = NodeSettings {
        node_id: id.into(),
        logs: dir.path().join(format!("logs-{id}")),
        cores: 2,
        be_util_pct: 400,
        blocks: Some(tabos_node::BlockStoreSettings::new(
            dir.path().join(format!("blocks-{id}.dev")),
            256 << 20,
        )),
        // The tests' programs and modules: in temporary directories and
        // the build's target directory (an operator's --program-dir).
        program_dirs: vec![
            std::env::temp_dir(),
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(".."),
        ],
        ..NodeSettings::defaults()
    };
    let node = Node::open_with(&config, settings).unwrap();
    let running = tabos_node::Embedded::start(node).await.unwrap();
    running
        .client()
        .await
        .unwrap()
        .set_realm(tabos_client::proto::SetRealmRequest {
            realm: REALM.into(),
            host_paths: vec![dir.path().join("in").display().to_string()],
            ..Default::default()
        })
        .await
        .unwrap();
    running
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Inputs: small files of a few words (some with a backslash), bytes that
/// are not UTF-8, an empty file and a file cut into several splits.
fn inputs(dir: &Path) -> PathBuf {
    let root = dir.join("in");
    std::fs::create_dir_all(root.join("small")).unwrap();
    std::fs::write(root.join("empty.txt"), b"").unwrap();
    std::fs::write(
        root.join("latin1.txt"),
        b"caf\xe9 na\xefve \xff\xfe needle\ncaf\xe9 back\\slash\n",
    )
    .unwrap();
    let words = [
        "alpha", "beta", "gamma", "delta", "needle", "epsilon", "zeta",
    ];
    for i in 0..12 {
        let mut text = String::new();
        for j in 0..(50 + i * 7) {
            text.push_str(words[(i * 3 + j) % words.len()]);
            text.push(if j % 9 == 8 { '\n' } else { ' ' });
        }
        std::fs::write(root.join("small").join(format!("f{i:02}.txt")), text).unwrap();
    }
    let mut big = String::new();
    for j in 0..20_000 {
        big.push_str(words[j % words.len()]);
        big.push_str(if j % 11 == 10 { "\n" } else { "\t" });
    }
    std::fs::write(root.join("big.txt"), big).unwrap();
    root
}

/// Uploads `dir` as code; its hash.
async fn upload(c: &Client, dir: &Path) -> String {
    c.clone().upload_code(REALM, dir).await.unwrap().hash
}

fn program(path: &str, kind: ProgramKind) -> Program {
    Program {
        path: path.into(),
        kind,
    }
}

fn submit(job: UserJob, input: &Path) -> Submit {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_tabos-mr-task"));
    let mut s = Submit::new(job, vec![input.to_path_buf()], exe, Vec::new());
    s.reducers = 3;
    s.task_bytes = 16 << 10;
    s.session_ttl = Duration::from_secs(2);
    s
}

/// Runs a job to its end; its output, every part file in order.
async fn output(c: &Client, s: Submit) -> (Job, Vec<u8>) {
    let mut job = Job::submit(c, REALM, s).await.unwrap();
    job.wait(|_| {}).await.unwrap();
    let out = job.output_bytes().await.unwrap().concat();
    (job, out)
}

/// Parts of a built-in's text format, merged as the built-in's output is.
fn counts(text: &[u8]) -> BTreeMap<Vec<u8>, u64> {
    format::from_text(text).unwrap().into_iter().collect()
}

/// An inverted index as a script: map prints WORD<TAB>FILE for each word
/// of each line, reduce prints WORD<TAB>FILE,FILE… (its input is sorted by
/// word, then file: the list comes sorted, and repeats are neighbours).
const INDEX_MAP: &str = "#!/bin/sh\nLC_ALL=C exec awk -F '\\t' '{ n = split(substr($0, length($1) + 2), w, /[ \\t]+/); for (i = 1; i <= n; i++) if (w[i] != \"\") print w[i] \"\\t\" $1 }'\n";
const INDEX_REDUCE: &str = "#!/bin/sh\nLC_ALL=C exec awk -F '\\t' '$1 != word { if (NR > 1) print word \"\\t\" files; word = $1; files = $2; last = $2; next } $2 != last { files = files \",\" $2; last = $2 } END { if (NR > 0) print word \"\\t\" files }'\n";

/// The same index, computed here.
fn index_of(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        for w in text.split([' ', '\t', '\n']).filter(|w| !w.is_empty()) {
            out.entry(w.to_string())
                .or_default()
                .insert(p.display().to_string());
        }
    }
    out
}

async fn inverted_index(c: &Client, dir: &TempDir, root: &Path) {
    let code = dir.path().join("index-code");
    std::fs::create_dir_all(&code).unwrap();
    for (name, text) in [("map.sh", INDEX_MAP), ("reduce.sh", INDEX_REDUCE)] {
        std::fs::write(code.join(name), text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(code.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let job = UserJob {
        code: upload(c, &code).await,
        map: program("map.sh", ProgramKind::Native),
        reduce: program("reduce.sh", ProgramKind::Native),
        combine: None,
        args: vec![],
        time_limit_ms: 120_000,
    };
    let (job, out) = output(c, submit(job, root)).await;
    assert!(job.spec.maps > 3, "several map tasks");
    let got: BTreeMap<String, BTreeSet<String>> = String::from_utf8_lossy(&out)
        .lines()
        .map(|l| {
            let (w, files) = l.split_once('\t').unwrap();
            let list: Vec<String> = files.split(',').map(String::from).collect();
            let mut sorted = list.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(list, sorted, "{w}'s files come sorted, once each");
            (w.to_string(), list.into_iter().collect())
        })
        .collect();
    assert_eq!(got, index_of(root));
}

/// The examples equal the built-in jobs over the same inputs; an inverted
/// index equals the one computed here.
#[test]
fn the_examples_and_an_inverted_index_equal_direct_computations() {
    let wasm = wordcount_wasm();
    let dir = TempDir::new("mr-user");
    let root = inputs(dir.path());
    rt().block_on(async {
        let node = start(&dir, Config::sqlite(dir.path().join("db")), "n1").await;
        let c = node.client().await.unwrap();
        // Word count: Rust compiled to wasm, with its combiner.
        let job = UserJob {
            code: upload(&c, wasm).await,
            map: program("map.wasm", ProgramKind::Wasm),
            reduce: program("reduce.wasm", ProgramKind::Wasm),
            combine: Some(program("sum.wasm", ProgramKind::Wasm)),
            args: vec![],
            time_limit_ms: 120_000,
        };
        let (_, out) = output(&c, submit(job, &root)).await;
        let want = direct::run(&Kind::WordCount, std::slice::from_ref(&root)).unwrap();
        assert_eq!(counts(&out), want);
        // Grep: shell scripts, the pattern as their argument.
        let job = UserJob {
            code: upload(&c, &examples().join("grep")).await,
            map: program("map.sh", ProgramKind::Native),
            reduce: program("sum.sh", ProgramKind::Native),
            combine: Some(program("sum.sh", ProgramKind::Native)),
            args: vec!["needle".into()],
            time_limit_ms: 120_000,
        };
        let (_, out) = output(&c, submit(job, &root)).await;
        let kind = Kind::grep(b"needle").unwrap();
        assert_eq!(
            counts(&out),
            direct::run(&kind, std::slice::from_ref(&root)).unwrap()
        );
        inverted_index(&c, &dir, &root).await;
        // An input whose path cannot be a record's key: refused at once.
        let odd = root.join("small").join("tab\there.txt");
        std::fs::write(&odd, "x\n").unwrap();
        let job = UserJob {
            code: upload(&c, &examples().join("grep")).await,
            map: program("map.sh", ProgramKind::Native),
            reduce: program("sum.sh", ProgramKind::Native),
            combine: None,
            args: vec!["x".into()],
            time_limit_ms: 120_000,
        };
        let refused = Job::submit(&c, REALM, submit(job, &root)).await;
        assert!(
            matches!(&refused, Err(tabos_mr::Error::Invalid(why)) if why.contains("tab or newline")),
            "{:?}",
            refused.err()
        );
        std::fs::remove_file(&odd).unwrap();
        node.stop().await.unwrap();
    });
}

/// The inverted index on PostgreSQL.
#[test]
fn an_inverted_index_on_postgres_equals_a_direct_computation() {
    let Some(url) = tabos_store::testing::pg_database() else {
        return;
    };
    let dir = TempDir::new("mr-user-pg");
    let root = inputs(dir.path());
    rt().block_on(async {
        let config = Config::postgres(url).with_partitions(2);
        let node = start(&dir, config, "p1").await;
        let c = node.client().await.unwrap();
        inverted_index(&c, &dir, &root).await;
        node.stop().await.unwrap();
    });
}

/// A program that fails fails its task with its message, every attempt
/// (a crash, a loop past the time limit, a trap), and then the job,
/// saying why; every attempt ran as a proc of its own.
#[test]
fn a_crash_a_loop_and_a_trap_fail_the_task_with_their_words_on_every_attempt() {
    let dir = TempDir::new("mr-user-fail");
    let root = dir.path().join("in");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "one two\nthree\n").unwrap();
    let code = dir.path().join("code");
    std::fs::create_dir_all(&code).unwrap();
    for (name, text) in [
        (
            "crash.sh",
            "#!/bin/sh\necho 'boom: cannot map this' >&2\nexit 3\n",
        ),
        ("loop.sh", "#!/bin/sh\nwhile :; do :; done\n"),
        ("cat.sh", "#!/bin/sh\nexec cat\n"),
        (
            "trap.wat",
            "(module (memory (export \"memory\") 1) (func (export \"_start\") unreachable))",
        ),
    ] {
        std::fs::write(code.join(name), text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(code.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    rt().block_on(async {
        let node = start(&dir, Config::sqlite(dir.path().join("db")), "n1").await;
        let c = node.client().await.unwrap();
        let hash = upload(&c, &code).await;
        let cases = [
            (
                program("crash.sh", ProgramKind::Native),
                program("cat.sh", ProgramKind::Native),
                "m0",
                "map program crash.sh exited with status 3; its last words: boom: cannot map this",
            ),
            (
                program("cat.sh", ProgramKind::Native),
                program("loop.sh", ProgramKind::Native),
                "r",
                "reduce program loop.sh ran past its time limit of 1s",
            ),
            (
                program("trap.wat", ProgramKind::Wasm),
                program("cat.sh", ProgramKind::Native),
                "m0",
                "map program trap.wat failed: wasm trap",
            ),
        ];
        for (map, reduce, task, said) in cases {
            let job = UserJob {
                code: hash.clone(),
                map,
                reduce,
                combine: None,
                args: vec![],
                time_limit_ms: 1_000,
            };
            let mut s = submit(job, &root);
            s.reducers = 1;
            let mut job = Job::submit(&c, REALM, s).await.unwrap();
            let err = job.wait(|_| {}).await.unwrap_err().to_string();
            assert!(err.contains(said), "{err}");
            assert!(
                err.contains(&format!("failed {} times", tabos_mr::spec::ATTEMPTS_MAX)),
                "{err}"
            );
            // Every attempt of the task was a proc, and failed.
            let sql = format!(
                "SELECT count(*) FROM proc WHERE realm = 'default' AND pid LIKE '{}-{task}%' \
                 AND exit_status <> 0",
                job.id()
            );
            let rows = c.clone().sql(&sql, vec![]).await.unwrap();
            let n = match &rows.rows[0][0] {
                Some(tabos_client::Value::Int(n)) => *n,
                other => panic!("{other:?}"),
            };
            assert_eq!(n, tabos_mr::spec::ATTEMPTS_MAX as i64, "{sql}");
        }
        node.stop().await.unwrap();
    });
}
