//! The README's quick start, run as written, line by line: what a new user
//! types after the demo. Each line runs in a shell from a copy of the files
//! it names (the README says "from the repository root"), with the `tabos`
//! just built first on the PATH and a credentials file of the test's own.
//!
//! Two things differ from a user's terminal, both so that the test can run
//! beside others: `tabos up` listens on free ports rather than 7070 and
//! 5433 (and serves no dashboard), and the psql line is pointed at the
//! PostgreSQL port it got. Everything else — the context `up` saves (the
//! node's local socket), the files, the Python SDK — is as the user has it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tabos_store::testing::TempDir;

const TABOS: &str = env!("CARGO_BIN_EXE_tabos");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The quick start's command lines, in order: the indented lines of the
/// section, without whole-line comments, each without its trailing
/// comment (two spaces, then `#`).
fn quick_start() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme.find("## Quick start").expect("a quick start");
    let end = start
        + readme[start..]
            .find("\n## Glossary")
            .expect("the section ends");
    readme[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .map(|l| match l.find("  #") {
            Some(i) => l[..i].trim().to_string(),
            None => l.trim().to_string(),
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn the_quick_start_runs_as_written() {
    let lines = quick_start();
    assert!(lines.len() >= 15, "{lines:?}");
    assert_eq!(lines[0], "tabos up", "the quick start begins with the node");
    let venv = repo().join("target/test-venv/bin");
    assert!(
        venv.join("python").exists(),
        "{} is missing: `bash .ci/run` makes it",
        venv.display()
    );
    let dir = TempDir::new("readme");
    let work = dir.path().join("checkout");
    std::fs::create_dir_all(work.join("examples")).unwrap();
    std::fs::copy(repo().join("README.md"), work.join("README.md")).unwrap();
    for f in ["counter.js", "sum.js", "graph.json"] {
        std::fs::copy(
            repo().join("examples").join(f),
            work.join("examples").join(f),
        )
        .unwrap();
    }
    let bin = Path::new(TABOS).parent().unwrap();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        venv.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |line: &str| {
        let mut c = Command::new("bash");
        c.args(["-c", line])
            .current_dir(&work)
            .env("PATH", &path)
            .env("HOME", dir.path())
            .env("TABOS_CREDENTIALS", dir.path().join("credentials.json"))
            .env_remove("TABOS_ADDR")
            .env_remove("TABOS_TOKEN")
            .env_remove("TABOS_CONTEXT");
        c
    };

    // The node, in the background (the user's second terminal).
    let mut up =
        shell("exec tabos up --listen 127.0.0.1:0 --pg-listen 127.0.0.1:0 --http-listen none")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
    let mut out = BufReader::new(up.stdout.take().unwrap());
    let mut said = Vec::new();
    loop {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).unwrap() > 0,
            "tabos up ended: {said:?}"
        );
        let last = l.starts_with("try:");
        said.push(l.trim_end().to_string());
        if last {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let pg_port = said
        .iter()
        .find_map(|l| l.strip_prefix("PostgreSQL protocol on 127.0.0.1:"))
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no PostgreSQL port in {said:?}"))
        .to_string();
    assert!(
        said.iter().any(|l| l.contains("(current)")),
        "up saves its context: {said:?}"
    );

    let mut outputs = Vec::new();
    for line in &lines[1..] {
        let line = line.replace("-p 5433", &format!("-p {pg_port}"));
        let o = shell(&line).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{line}\nstdout: {text}\nstderr: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        outputs.push((line, text));
    }
    let said_by = |prefix: &str| {
        outputs
            .iter()
            .find(|(l, _)| l.starts_with(prefix))
            .map(|(_, o)| o.clone())
            .unwrap_or_else(|| panic!("no line {prefix:?}"))
    };
    assert!(said_by("tabos wait hello").contains("hello\n"));
    assert!(said_by("tabos send inbox").contains("first message"));
    assert!(said_by("tabos put -p /cfg/db").contains("primary=a"));
    assert!(said_by("tabos fs mkdir").contains("readme.md"));
    assert!(said_by("tabos procedure install counter")
        .trim_end()
        .ends_with('1'));
    assert!(said_by("tabos procedure install sum")
        .trim_end()
        .ends_with("\n20"));
    assert!(said_by("tabos sql").contains("hello"));
    assert!(said_by("PGPASSWORD").contains("proc"));
    assert!(said_by("python3").contains("hello"));
    // The member's context was saved, not switched to: it acts in acme
    // when named, and the operator's context is still current.
    assert!(said_by("tabos --context acme-member logs").contains("hello from acme"));
    assert!(said_by("tabos context list").contains("acme-member"));
    let o = shell("tabos ps").output().unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("hello"),
        "the operator's context is still current"
    );
    let o = shell("tabos realm create acme2 | head -1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("panicked"),
        "a closed pipe ends the command quietly"
    );

    // Ctrl-C's clean stop.
    let _ = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status();
    let _ = up.wait();
}
