//! Suite `mount`: Linux tools on a realm's files through `tabos mount`
//! against the same tools on ext4 (issue 40, item 2), in the same run:
//!
//! * fio (Debian's, installed with apt-get if missing), `psync`, 4 KiB
//!   blocks, the page cache left alone (`invalidate=0`): sequential and
//!   random reads of a file read once before (cached reads: what the
//!   mount's kept pages are for), and a sequential write of a new file
//!   ending with fsync;
//! * `git status` in a committed tree of 10,000 small files (2,000 with
//!   `--quick`), the tree and its `.git` on the contestant.
//!
//! The mount is `tabos mount` over the node's local socket (the local
//! transport), the node `tabos up` on embedded SQLite in this run's
//! directory, which is on the same ext4 file system as the peer's.
//! Contestants alternate within each round; every figure is the median
//! of the rounds. The floor, measured in the same rounds: the same work
//! through bindfs (Debian's; libfuse, a passthrough onto the same ext4
//! directory) — what any FUSE file system pays for the kernel's round trip
//! to its daemon, before doing anything. Targets (issue 40): reads ≥ 0.5× ext4, writes ≥ 0.3×,
//! `git status` ≥ 0.3× (its time at most 3.33× ext4's).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::Context;

use crate::report::{round, Better, Figure, Report, Stat};

struct Sizes {
    rounds: usize,
    /// The file fio reads.
    read_file: &'static str,
    /// How long each read job runs.
    read_secs: u32,
    /// What the write job writes.
    write_size: &'static str,
    /// Files in the git tree (100 a directory).
    tree_files: usize,
}

/// `tabos mount DIR` serving; unmounted (SIGTERM, then `umount -l`) when
/// dropped.
struct Mounted {
    child: Child,
    dir: PathBuf,
}

impl Mounted {
    fn start(
        exe: &Path,
        node: &crate::elastic::NodeProc,
        data: &Path,
        dir: &Path,
    ) -> anyhow::Result<Mounted> {
        std::fs::create_dir_all(dir)?;
        let socket = data.join(tabos_node::LOCAL_SOCKET_NAME);
        let mut child = Command::new(exe)
            .arg("mount")
            .arg(dir)
            .arg("--addr")
            .arg(format!("{}{}", tabos_client::UNIX_SCHEME, socket.display()))
            .env("TABOS_TOKEN", &node.token)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start tabos mount")?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let mounted = Mounted {
            child,
            dir: dir.to_path_buf(),
        };
        anyhow::ensure!(line.contains("files on"), "tabos mount said {line:?}");
        Ok(mounted)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // SIGTERM unmounts; a mount that had to be killed is detached.
        if crate::elastic::stop_child(&mut self.child) {
            return;
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status();
    }
}

/// bindfs of `src` on `dir` (it serves as a daemon); unmounted when
/// dropped.
struct Bindfs {
    dir: PathBuf,
}

impl Bindfs {
    fn start(bin: &Path, src: &Path, dir: &Path) -> anyhow::Result<Bindfs> {
        std::fs::create_dir_all(src)?;
        std::fs::create_dir_all(dir)?;
        let o = Command::new(bin)
            .arg(src)
            .arg(dir)
            .output()
            .context("start bindfs")?;
        anyhow::ensure!(
            o.status.success(),
            "bindfs: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(Bindfs {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        // Lazily if it is still busy (a git of the last round may still
        // hold it): a full run left it mounted otherwise.
        let unmounted = Command::new("umount")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.dir)
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// One fio job in `dir` (`rw`, 4 KiB blocks) and its JSON report.
fn fio(
    fio: &Path,
    dir: &Path,
    name: &str,
    rw: &str,
    extra: &[String],
) -> anyhow::Result<serde_json::Value> {
    let o = Command::new(fio)
        .arg(format!("--name={name}"))
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--rw={rw}"))
        .args([
            "--bs=4k",
            "--ioengine=psync",
            "--invalidate=0",
            "--output-format=json",
        ])
        .args(extra)
        .output()
        .context("run fio")?;
    anyhow::ensure!(
        o.status.success(),
        "fio {name} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    // fio may print notes before its JSON.
    let text = String::from_utf8_lossy(&o.stdout);
    let at = text.find('{').context("no JSON from fio")?;
    Ok(serde_json::from_str(&text[at..])?)
}

/// A job's figure from its report: `side` ("read" or "write"), `field`.
fn job_figure(v: &serde_json::Value, side: &str, field: &str) -> anyhow::Result<f64> {
    v["jobs"][0][side][field]
        .as_f64()
        .with_context(|| format!("fio's report has no jobs[0].{side}.{field}"))
}

/// What one round measures on one contestant.
#[derive(Default)]
struct Round {
    seq_read_iops: f64,
    rand_read_iops: f64,
    write_mb_s: f64,
}

fn fio_round(fio_bin: &Path, dir: &Path, sizes: &Sizes, round_no: usize) -> anyhow::Result<Round> {
    let read = |name: &str, rw: &str, timed: bool| -> anyhow::Result<f64> {
        let mut extra = vec![
            "--filename=read.dat".to_string(),
            format!("--size={}", sizes.read_file),
        ];
        if timed {
            extra.push("--time_based".into());
            extra.push(format!("--runtime={}", sizes.read_secs));
        }
        job_figure(&fio(fio_bin, dir, name, rw, &extra)?, "read", "iops")
    };
    // Laid out (the first round) and read once whole: what follows is
    // read from the page cache, where the contestant keeps it.
    read("warm", "read", false)?;
    let seq_read_iops = read("seqread", "read", true)?;
    let rand_read_iops = read("randread", "randread", true)?;
    let file = format!("write-{round_no}.dat");
    let v = fio(
        fio_bin,
        dir,
        "seqwrite",
        "write",
        &[
            format!("--filename={file}"),
            format!("--size={}", sizes.write_size),
            "--end_fsync=1".into(),
        ],
    )?;
    let write_mb_s = job_figure(&v, "write", "bw_bytes")? / 1e6;
    std::fs::remove_file(dir.join(file))?;
    Ok(Round {
        seq_read_iops,
        rand_read_iops,
        write_mb_s,
    })
}

/// A committed tree of `files` small files (100 a directory) in `dir`.
fn git_tree(dir: &Path, files: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for i in 0..files {
        let sub = dir.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(
            sub.join(format!("f{:03}.txt", i % 100)),
            format!("file {i}\n{}\n", "x".repeat(64)),
        )?;
    }
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "-q",
            "-m",
            "tree",
        ],
    ] {
        git(dir, args)?;
    }
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .context("run git")?;
    anyhow::ensure!(
        o.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The wall time of one `git status` in `dir`, in ms; the tree is clean.
fn git_status_ms(dir: &Path) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let out = git(dir, &["status", "--porcelain"])?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(
        out.is_empty(),
        "the tree in {} is not clean: {out}",
        dir.display()
    );
    Ok(ms)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let sizes = if quick {
        Sizes {
            rounds: 1,
            read_file: "16M",
            read_secs: 2,
            write_size: "8M",
            tree_files: 2_000,
        }
    } else {
        Sizes {
            rounds: 3,
            read_file: "64M",
            read_secs: 5,
            write_size: "32M",
            tree_files: 10_000,
        }
    };
    let mut report = Report::new("mount", quick);
    let exe = crate::tabos_exe()?;
    let fio_bin = crate::names::debian_binary("mount", "fio", &["/usr/bin/fio"])?;
    let dir = tabos_store::testing::TempDir::new("bench-mount");
    let data = dir.path().join("node");
    let node = crate::elastic::start_node(&exe, &[], &data)?;
    let mounted = Mounted::start(&exe, &node, &data, &dir.path().join("mnt"))?;
    let ext4 = dir.path().join("ext4");
    std::fs::create_dir_all(&ext4)?;
    let bindfs_bin = crate::names::debian_binary("mount", "bindfs", &["/usr/bin/bindfs"])?;
    let bindfs = Bindfs::start(
        &bindfs_bin,
        &dir.path().join("bindfs-src"),
        &dir.path().join("bindfs"),
    )?;
    let contestants = [
        ("tabos mount", mounted.dir.clone()),
        ("ext4", ext4),
        ("bindfs (the floor)", bindfs.dir.clone()),
    ];
    report.notes.push(format!(
        "tabos mount over the node's local socket (the local transport), the node tabos up on \
         embedded SQLite; the peer is the directory {} on the same ext4 file system; fio {}",
        dir.path().display(),
        Command::new(&fio_bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    ));

    let mut rounds: [Vec<Round>; 3] = Default::default();
    for r in 0..sizes.rounds {
        for (i, (name, d)) in contestants.iter().enumerate() {
            eprintln!("  fio, round {}/{}: {name}", r + 1, sizes.rounds);
            rounds[i].push(fio_round(&fio_bin, d, &sizes, r)?);
        }
    }
    let of = |i: usize, f: fn(&Round) -> f64| median(rounds[i].iter().map(f).collect());
    let runs = sizes.rounds as u32;
    let fio_note = |what: &str| {
        format!(
            "fio {what}, psync, 4 KiB blocks, invalidate=0; median of {runs} alternating rounds"
        )
    };
    type Of = fn(&Round) -> f64;
    let figures: [(&str, Of, &str, i32, &str, String); 3] = [
        (
            "fio.seqread_4k_cached.iops",
            |r| r.seq_read_iops,
            "ops/s",
            0,
            "ratio >= 0.5",
            format!(
                "sequential read of a {} file read once before, {} s",
                sizes.read_file, sizes.read_secs
            ),
        ),
        (
            "fio.randread_4k_cached.iops",
            |r| r.rand_read_iops,
            "ops/s",
            0,
            "ratio >= 0.5",
            format!(
                "random read of the same {} file, {} s",
                sizes.read_file, sizes.read_secs
            ),
        ),
        (
            "fio.seqwrite_4k.MB_s",
            |r| r.write_mb_s,
            "MB/s",
            2,
            "ratio >= 0.3",
            format!(
                "sequential write of a new {} file, ending with fsync",
                sizes.write_size
            ),
        ),
    ];
    for (name, f, unit, digits, target, what) in figures {
        let ext4 = Some(round(of(1, f), digits));
        report.figures.push(
            Figure::new(name, round(of(0, f), digits), unit, Better::Higher)
                .peer("ext4", ext4)
                .runs(runs, Stat::MedianOfRuns)
                .target(target)
                .note(fio_note(&what)),
        );
        report.figures.push(
            Figure::new(
                format!("{name}.floor_bindfs"),
                round(of(2, f), digits),
                unit,
                Better::Higher,
            )
            .peer("ext4", ext4)
            .runs(runs, Stat::MedianOfRuns)
            .note(fio_note(&format!(
                "the floor for a FUSE file system: the same through bindfs onto ext4; {what}"
            ))),
        );
    }

    // git status in a committed tree, on each contestant.
    for (name, d) in &contestants {
        eprintln!("  git: {} files on {name}", sizes.tree_files);
        let t0 = Instant::now();
        git_tree(&d.join("tree"), sizes.tree_files)?;
        eprintln!(
            "    made and committed in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    let mut status: [Vec<f64>; 3] = Default::default();
    for (_, d) in &contestants {
        git_status_ms(&d.join("tree"))?; // git's own index refresh, once
    }
    for r in 0..sizes.rounds.max(3) {
        for (i, (name, d)) in contestants.iter().enumerate() {
            eprintln!(
                "  git status, round {}/{}: {name}",
                r + 1,
                sizes.rounds.max(3)
            );
            status[i].push(git_status_ms(&d.join("tree"))?);
        }
    }
    let [tabos, peer, floor] = status;
    let floor = median(floor);
    report.figures.push(
        Figure::new(
            format!("git_status.{}_files.floor_bindfs.ms", sizes.tree_files),
            round(floor, 1),
            "ms",
            Better::Lower,
        )
        .peer("ext4", Some(round(median(peer.clone()), 1)))
        .runs(sizes.rounds.max(3) as u32, Stat::MedianOfRuns)
        .note("the floor for a FUSE file system: the same git status through bindfs onto ext4"),
    );
    report.figures.push(
        Figure::new(
            format!("git_status.{}_files.ms", sizes.tree_files),
            round(median(tabos), 1),
            "ms",
            Better::Lower,
        )
        .peer("ext4", Some(round(median(peer), 1)))
        .runs(sizes.rounds.max(3) as u32, Stat::MedianOfRuns)
        // ≥ 0.3× ext4's speed: at most 1 / 0.3 its time.
        .target("ratio <= 3.33")
        .note(format!(
            "git status --porcelain in a clean committed tree of {} files of 74 bytes (100 a \
             directory), .git beside it; one status first on each (git refreshes its index); \
             median of alternating rounds",
            sizes.tree_files
        )),
    );
    drop(bindfs);
    drop(mounted);
    drop(node);
    Ok(report)
}
