//! Backups of an embedded node, and restoring one (issue 42, item 3).
//!
//! A backup is a directory a node makes while it serves
//! ([`take`], what `tabos backup DEST` asks for):
//!
//! ```text
//!   DEST/p<N>.db            every partition of the kernel database, at one point
//!   DEST/blocks.dev         the block store (sparse), when the node has one
//!   DEST/tabos-backup.json  the manifest: when, what, and each file's digest
//! ```
//!
//! The point: the fs's writes to segments are frozen ([`Files::freeze`]:
//! those under way commit first), the store reads every partition at one
//! point ([`Store::snapshot`]: each writer held for the moment that takes),
//! the block store is copied, the freeze ends — and only then are the
//! partitions copied from the snapshot, while the node goes on serving.
//! Writes to files in segments wait for the block store's copy (its used
//! bytes at disk speed); nothing else waits beyond the moment of the point.
//! So the copy's tables and the copy's block store agree: every extent a
//! table names is in the copy with the bytes it held at the point.
//!
//! It is written to `DEST.partial` and renamed to `DEST` when complete, so a
//! node killed during a backup leaves no DEST that looks whole (and its
//! source files, only read, are unharmed); a `DEST.partial` left behind is
//! refused until removed.
//!
//! [`restore`] (`tabos restore SRC --data DIR`) checks every file against
//! the manifest as it copies it and writes a data directory a node opens as it would its
//! own after a crash: what was running at the point is recovered as after a
//! kill -9 (the node's start-up recovery), segments no table names are
//! reclaimed, and a new operator credential is minted (a backup holds the
//! database's credentials, hashed, but not the node's credential file).
//!
//! PostgreSQL: the database is copied by `pg_dump` (its custom format, one
//! consistent snapshot) into `DEST/database.dump`, run while this node's
//! writes to segments are frozen, so its block store — copied in the same
//! freeze — holds every segment a dumped row names (reclaims wait too).
//! That holds for the one block store frozen: a backup through one node of
//! a cluster where other live nodes keep block stores is refused (their
//! writes would not wait), and a cluster on PostgreSQL runs without block
//! stores by default. Tenants' per-realm schemas and roles are not dumped:
//! a node makes them again when a realm first reads. [`restore`] with a
//! database URL runs `pg_restore` into that (empty) database, in one
//! transaction, and makes the data directory with the block store.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tabos_store::BackendKind;

use crate::fs::files::Files;
use crate::{Error, Result};

/// The manifest's file name in a backup.
pub const MANIFEST: &str = "tabos-backup.json";
/// The block store's file name in a backup (and in a restored data
/// directory, where `tabos up` looks for it by default).
pub const BLOCKS_FILE: &str = "blocks.dev";
/// The database's file name in a backup of a node on PostgreSQL.
pub const DUMP_FILE: &str = "database.dump";
/// The manifest's format; a restore refuses any other.
pub const FORMAT: u32 = 1;
/// Digests and copies go by pieces of this size; an all-zero piece is a
/// hole (skipped by both).
const PIECE_BYTES: usize = 1 << 20;
/// Longest manifest a restore reads.
const MANIFEST_BYTES_MAX: u64 = 1 << 20;
/// Suffix of a backup or restore being written.
const PARTIAL: &str = ".partial";

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupFile {
    /// Its name in the backup directory.
    pub name: String,
    /// Its length (a sparse file's holes included).
    pub bytes: u64,
    /// SHA-256 of its non-zero pieces with their offsets ([`digest`]).
    pub sha256: String,
}

/// What [`take`] made, as its manifest says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub dir: PathBuf,
    /// The point, in microseconds since the epoch.
    pub taken_us: i64,
    pub partitions: u32,
    pub files: Vec<BackupFile>,
    /// The block store's id (as extents name it) and segments, if any.
    pub block_store: Option<(String, u64)>,
    /// How long the fs's writes to segments waited, in microseconds.
    pub frozen_us: i64,
    /// The database it holds: SQLite partitions, or a PostgreSQL dump.
    pub backend: BackendKind,
}

/// A PostgreSQL client tool (`pg_dump`, `pg_restore`): in `$TABOS_PG_BIN`,
/// else `pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`
/// (a dump needs a pg_dump at least as new as the server), else `PATH`.
pub fn pg_tool(name: &str) -> Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("TABOS_PG_BIN") {
        dirs.push(d.into());
    }
    if let Ok(out) = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
    {
        if out.status.success() {
            dirs.push(String::from_utf8_lossy(&out.stdout).trim().into());
        }
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<(u32, PathBuf)> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
            .collect();
        versions.sort();
        dirs.extend(versions.into_iter().rev().map(|(_, d)| d));
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::Precondition(format!(
                "{name} is not installed on the node's machine (PostgreSQL's client tools: \
                 apt-get install postgresql-client, or set TABOS_PG_BIN)"
            ))
        })
}

/// A connection URL without its password, and the password: what a
/// client tool is given on its command line (which every local user can
/// read in /proc) and in its environment (`PGPASSWORD`, which they
/// cannot).
fn split_password(url: &str) -> (String, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..end].rfind('@') else {
        return (url.to_string(), None);
    };
    match rest[..at].split_once(':') {
        Some((user, password)) => (
            format!("{scheme}://{user}@{}", &rest[at + 1..]),
            Some(password.to_string()),
        ),
        None => (url.to_string(), None),
    }
}

/// Runs a PostgreSQL client tool on database `url`; its stderr is the
/// error's message.
fn run_pg_tool(name: &str, url: &str, args: &[std::ffi::OsString]) -> Result<()> {
    let tool = pg_tool(name)?;
    let (url, password) = split_password(url);
    let mut cmd = std::process::Command::new(&tool);
    if let Some(p) = password {
        // Percent-encoded in a URL; the environment takes it plain.
        cmd.env("PGPASSWORD", percent_decode(&p));
    }
    let out = cmd
        .args(args)
        .arg(format!("--dbname={url}"))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(io("run", &tool))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Precondition(format!(
            "{name} failed ({}): {}",
            out.status,
            err.trim().chars().take(2_000).collect::<String>()
        )));
    }
    Ok(())
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Refuses a backup through this node of a cluster where another live
/// node keeps a block store: its writes to segments would not wait for
/// this node's freeze.
async fn only_block_store(files: &Files) -> Result<()> {
    let own = files
        .device()
        .map(|d| format!("{:016x}", d.id()))
        .unwrap_or_default();
    let store = files.store().clone();
    let others = blocking(move || {
        let rows = store.query(
            "SELECT node_id FROM node WHERE state = 'up' AND block_store <> '' \
             AND block_store <> $1 ORDER BY node_id",
            &[own.as_str().into()],
        )?;
        rows.rows
            .iter()
            .map(|r| Ok(r.get::<String>(0)?))
            .collect::<Result<Vec<String>>>()
    })
    .await?;
    if others.is_empty() {
        return Ok(());
    }
    Err(Error::Precondition(format!(
        "nodes {} keep files in block stores of their own, whose writes a backup through this \
         node cannot hold: back up a cluster on PostgreSQL whose nodes run without block stores \
         (the default with --db), or stop the others first",
        others.join(", ")
    )))
}

/// Only one backup at a time runs on a node.
#[derive(Default)]
struct Running(tokio::sync::Mutex<()>);

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let (what, path) = (what.to_string(), path.display().to_string());
    move |e| Error::Store(tabos_store::Error::Io(format!("{what} {path}: {e}")))
}

/// `DIR.partial` beside `dir`.
fn partial_of(dir: &Path) -> Result<PathBuf> {
    let name = dir
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{} names no directory", dir.display())))?;
    let mut partial = name.to_os_string();
    partial.push(PARTIAL);
    Ok(dir.with_file_name(partial))
}

/// Removes a partial directory unless disarmed.
struct Scratch(Option<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// Takes a backup of the node whose fs is `files` into the new directory
/// `dest` (absolute; its parent must exist) while it serves (see the
/// module's docs). The caller has checked that it may ([`crate::cluster::backup`]).
///
/// `db_url` is the node's PostgreSQL URL when its database is one (what
/// `pg_dump` connects to).
pub async fn take(files: &Files, dest: &Path, db_url: Option<&str>) -> Result<Backup> {
    let store = files.store().clone();
    let backend = store.kind();
    let pg_url = match (backend, db_url) {
        (BackendKind::Sqlite, _) => None,
        (_, Some(url)) => Some(url.to_string()),
        (_, None) => {
            return Err(Error::Precondition(
                "this node's database is PostgreSQL and the node was not told its URL".into(),
            ))
        }
    };
    if !dest.is_absolute() {
        return Err(Error::Invalid(format!(
            "a backup's destination is an absolute path on the node's machine, not {}",
            dest.display()
        )));
    }
    if dest.exists() {
        return Err(Error::AlreadyExists(format!("{} exists", dest.display())));
    }
    // A mistake in the path, said as one: not an I/O failure of the node.
    if !dest.parent().is_some_and(Path::is_dir) {
        return Err(Error::Invalid(format!(
            "{} is not in a directory on the node's machine (its parent does not exist)",
            dest.display()
        )));
    }
    if pg_url.is_some() {
        only_block_store(files).await?;
        pg_tool("pg_dump")?;
    }
    let partial = partial_of(dest)?;
    let running = store.local::<Running>();
    let Ok(_one) = running.0.try_lock() else {
        return Err(Error::Precondition(
            "a backup of this node is under way: wait for it to end".into(),
        ));
    };
    match std::fs::create_dir(&partial) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::AlreadyExists(format!(
                "{} exists: a backup there was cut off; remove it first",
                partial.display()
            )))
        }
        Err(e) => return Err(io("create", &partial)(e)),
    }
    let mut scratch = Scratch(Some(partial.clone()));
    // The point: writes to segments frozen, every partition read at once,
    // the block store copied; then the freeze ends.
    let frozen_at = std::time::Instant::now();
    let frozen = files.freeze().await;
    let (device, dir) = (files.device().cloned(), partial.clone());
    let store2 = store.clone();
    let pg = pg_url.clone();
    let (snapshot, blocks) = blocking(move || {
        let snapshot = match &pg {
            // The database as one snapshot, while no segment is written
            // or reclaimed: every extent a dumped row names is in the copy.
            Some(url) => {
                let file = dir.join(DUMP_FILE);
                let mut args: Vec<std::ffi::OsString> = [
                    "--format=custom",
                    "--no-owner",
                    "--no-privileges",
                    // Tenants' views: made again by the node that serves them.
                    "--exclude-schema=tabos_r_*",
                    "--exclude-table=tenant_schema",
                ]
                .iter()
                .map(Into::into)
                .collect();
                let mut file_arg = std::ffi::OsString::from("--file=");
                file_arg.push(&file);
                args.push(file_arg);
                run_pg_tool("pg_dump", url, &args)?;
                None
            }
            None => Some(store2.snapshot()?),
        };
        let blocks = match &device {
            Some(dev) => Some((
                format!("{:016x}", dev.id()),
                dev.copy_to(&dir.join(BLOCKS_FILE))
                    .map_err(|e| Error::Blocks(e.to_string()))?
                    .segments,
            )),
            None => None,
        };
        Ok((snapshot, blocks))
    })
    .await?;
    drop(frozen);
    let frozen_us = frozen_at.elapsed().as_micros() as i64;
    // The partitions, from the snapshot, while the node serves.
    let dir = partial.clone();
    let (taken_us, partitions) = match &snapshot {
        Some(s) => (s.at_us(), s.partitions()),
        // The dump's point lies within the freeze.
        None => (tabos_store::now_us() - frozen_us / 2, store.partitions()),
    };
    let listed = blocking(move || {
        let mut names: Vec<String> = match snapshot {
            Some(snapshot) => {
                let copies = snapshot.write_to(&dir)?;
                copies
                    .iter()
                    .filter_map(|c| c.path.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect()
            }
            None => vec![DUMP_FILE.to_string()],
        };
        if dir.join(BLOCKS_FILE).exists() {
            names.push(BLOCKS_FILE.to_string());
        }
        names
            .into_iter()
            .map(|name| {
                let (bytes, sha256) = digest(&dir.join(&name))?;
                Ok(BackupFile {
                    name,
                    bytes,
                    sha256,
                })
            })
            .collect::<Result<Vec<_>>>()
    })
    .await?;
    let backup = Backup {
        dir: dest.to_path_buf(),
        taken_us,
        partitions,
        files: listed,
        block_store: blocks,
        frozen_us,
        backend,
    };
    let (dir, dest2, manifest) = (partial.clone(), dest.to_path_buf(), manifest_json(&backup));
    blocking(move || {
        let path = dir.join(MANIFEST);
        let mut f = std::fs::File::create(&path).map_err(io("create", &path))?;
        f.write_all(manifest.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io("write", &path))?;
        sync_dir(&dir)?;
        std::fs::rename(&dir, &dest2).map_err(io("rename to", &dest2))?;
        sync_dir(dest2.parent().unwrap_or(Path::new("/")))
    })
    .await?;
    scratch.0 = None;
    Ok(backup)
}

/// Runs blocking work (file copies, the snapshot's waits) off the async
/// workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Store(tabos_store::Error::Internal(format!("backup task: {e}"))))?
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))
}

fn manifest_json(b: &Backup) -> String {
    let files: Vec<serde_json::Value> = b
        .files
        .iter()
        .map(|f| serde_json::json!({"name": f.name, "bytes": f.bytes, "sha256": f.sha256}))
        .collect();
    let mut m = serde_json::json!({
        "format": FORMAT,
        "tabos": env!("CARGO_PKG_VERSION"),
        "taken_us": b.taken_us,
        "partitions": b.partitions,
        "backend": backend_name(b.backend),
        "files": files,
    });
    if let Some((id, segments)) = &b.block_store {
        m["block_store"] = serde_json::json!({"id": id, "segments": segments});
    }
    serde_json::to_string_pretty(&m).unwrap_or_default()
}

fn backend_name(b: BackendKind) -> &'static str {
    match b {
        BackendKind::Sqlite => "sqlite",
        BackendKind::Postgres => "postgres",
    }
}

/// Reads and checks a backup's manifest.
pub fn read_manifest(src: &Path) -> Result<Backup> {
    let path = src.join(MANIFEST);
    let f = std::fs::File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound(format!(
            "{} is not a tabos backup (no {MANIFEST})",
            src.display()
        )),
        _ => io("open", &path)(e),
    })?;
    let len = f.metadata().map_err(io("stat", &path))?.len();
    if len > MANIFEST_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "{} is {len} bytes, more than a manifest's {MANIFEST_BYTES_MAX}",
            path.display()
        )));
    }
    let m: serde_json::Value = serde_json::from_reader(std::io::BufReader::new(f))
        .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
    let bad = |what: &str| Error::Invalid(format!("{}: {what}", path.display()));
    let format = m["format"].as_u64().ok_or_else(|| bad("no format"))?;
    // (A manifest from before PostgreSQL backups names no backend.)
    let backend = match m["backend"].as_str().unwrap_or("sqlite") {
        "sqlite" => BackendKind::Sqlite,
        "postgres" => BackendKind::Postgres,
        other => return Err(bad(&format!("backend {other:?}"))),
    };
    if format != u64::from(FORMAT) {
        return Err(bad(&format!(
            "format {format}; this tabos reads format {FORMAT}"
        )));
    }
    let files = m["files"]
        .as_array()
        .ok_or_else(|| bad("no files"))?
        .iter()
        .map(|f| {
            let name = f["name"]
                .as_str()
                .ok_or_else(|| bad("a file without a name"))?;
            // Names stay inside the backup: no separators, no dot names.
            let plain = !name.is_empty()
                && !name.contains('/')
                && name != "."
                && name != ".."
                && (name == BLOCKS_FILE
                    || match backend {
                        BackendKind::Sqlite => name.starts_with('p') && name.ends_with(".db"),
                        BackendKind::Postgres => name == DUMP_FILE,
                    });
            if !plain {
                return Err(bad(&format!("a file named {name:?}")));
            }
            Ok(BackupFile {
                name: name.to_string(),
                bytes: f["bytes"]
                    .as_u64()
                    .ok_or_else(|| bad("a file without bytes"))?,
                sha256: f["sha256"]
                    .as_str()
                    .ok_or_else(|| bad("a file without sha256"))?
                    .to_string(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let partitions = m["partitions"]
        .as_u64()
        .ok_or_else(|| bad("no partitions"))? as u32;
    let dbs = files.iter().filter(|f| f.name != BLOCKS_FILE).count();
    let expected = match backend {
        BackendKind::Sqlite => partitions as usize,
        BackendKind::Postgres => 1,
    };
    if partitions == 0 || dbs != expected {
        return Err(bad(&format!(
            "{partitions} partitions but {dbs} partition files"
        )));
    }
    let block_store = m
        .get("block_store")
        .filter(|b| !b.is_null())
        .map(|b| {
            Ok::<_, Error>((
                b["id"]
                    .as_str()
                    .ok_or_else(|| bad("a block store without an id"))?
                    .to_string(),
                b["segments"].as_u64().unwrap_or(0),
            ))
        })
        .transpose()?;
    Ok(Backup {
        dir: src.to_path_buf(),
        taken_us: m["taken_us"].as_i64().ok_or_else(|| bad("no taken_us"))?,
        partitions,
        files,
        block_store,
        frozen_us: 0,
        backend,
    })
}

/// Makes data directory `data` (new, or an empty directory) from the
/// backup in `src`, checking every file against the manifest as it copies
/// it (a mismatch leaves nothing behind); a
/// node started on `data` (`tabos up --data DATA`) serves what the source
/// held at the backup's point. Writes `DATA.partial` first, so a restore
/// that fails leaves no `data` behind.
///
/// A backup of a node on PostgreSQL is restored into `db_url`, an empty
/// database (`pg_restore` in one transaction: a database that is not empty
/// is refused and left as it was); the data directory gets its block
/// store. A backup of an embedded node takes no URL.
pub fn restore(src: &Path, data: &Path, db_url: Option<&str>) -> Result<Backup> {
    let backup = read_manifest(src)?;
    match (backup.backend, db_url) {
        (BackendKind::Sqlite, Some(_)) => {
            return Err(Error::Invalid(
                "this backup is of an embedded node (SQLite): restore it without --db".into(),
            ))
        }
        (BackendKind::Sqlite, None) => {}
        (_, None) => {
            return Err(Error::Invalid(
                "this backup is of a node on PostgreSQL: give --db URL, an empty database to \
                 restore it into"
                    .into(),
            ))
        }
        (_, Some(_)) => {
            pg_tool("pg_restore")?;
        }
    }
    match std::fs::read_dir(data) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::AlreadyExists(format!(
                    "{} is not empty: a restore makes a new data directory",
                    data.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("read", data)(e)),
    }
    let partial = partial_of(data)?;
    if partial.exists() {
        return Err(Error::AlreadyExists(format!(
            "{} exists: a restore there was cut off; remove it first",
            partial.display()
        )));
    }
    std::fs::create_dir_all(&partial).map_err(io("create", &partial))?;
    let mut scratch = Scratch(Some(partial.clone()));
    // Each file checked as it is copied (read once): a mismatch stops the
    // restore, and what it wrote goes with `scratch`.
    for f in &backup.files {
        let path = src.join(&f.name);
        // The dump goes to the database, not into the data directory.
        let (bytes, sha256) = if f.name == DUMP_FILE {
            digest(&path)?
        } else {
            copy_sparse(&path, &partial.join(&f.name))?
        };
        if bytes != f.bytes || sha256 != f.sha256 {
            return Err(Error::Invalid(format!(
                "{} does not match the backup's manifest (damaged or changed since): \
                 {bytes} bytes, sha256 {sha256}; expected {} bytes, sha256 {}",
                path.display(),
                f.bytes,
                f.sha256
            )));
        }
    }
    if let Some(url) = db_url {
        let dump = src.join(DUMP_FILE);
        let mut args: Vec<std::ffi::OsString> = [
            "--exit-on-error",
            "--single-transaction",
            "--no-owner",
            "--no-privileges",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push(dump.into_os_string());
        run_pg_tool("pg_restore", url, &args)?;
    }
    sync_dir(&partial)?;
    // An empty directory given as DATA is replaced.
    if data.exists() {
        std::fs::remove_dir(data).map_err(io("replace", data))?;
    }
    std::fs::rename(&partial, data).map_err(io("rename to", data))?;
    sync_dir(
        data.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )?;
    scratch.0 = None;
    Ok(Backup {
        dir: data.to_path_buf(),
        ..backup
    })
}

/// The next offset at or after `at` where `f` holds data (not a hole), or
/// `None` past its last data.
fn next_data(f: &std::fs::File, at: u64) -> Option<u64> {
    // SAFETY: lseek on a descriptor we own; it touches no memory.
    let r = unsafe { libc::lseek(f.as_raw_fd(), at as libc::off_t, libc::SEEK_DATA) };
    // ENXIO: no data past `at`. Any other failure (a filesystem without
    // SEEK_DATA): read on from `at`.
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return (e.raw_os_error() != Some(libc::ENXIO)).then_some(at);
    }
    Some(r as u64)
}

/// Whether `piece` (at most [`PIECE_BYTES`]) is all zeros (a memcmp).
fn is_zero(piece: &[u8]) -> bool {
    static ZEROS: [u8; PIECE_BYTES] = [0; PIECE_BYTES];
    piece == &ZEROS[..piece.len()]
}

/// Calls `each(offset, piece)` for every non-zero [`PIECE_BYTES`]-aligned
/// piece of `path`, skipping holes without reading them; the file's length.
fn pieces(path: &Path, mut each: impl FnMut(u64, &[u8]) -> Result<()>) -> Result<u64> {
    let f = std::fs::File::open(path).map_err(io("open", path))?;
    let len = f.metadata().map_err(io("stat", path))?.len();
    let mut buf = vec![0u8; PIECE_BYTES];
    let mut at = 0u64;
    while at < len {
        let Some(data) = next_data(&f, at) else {
            break;
        };
        at = data / PIECE_BYTES as u64 * PIECE_BYTES as u64;
        if at >= len {
            break;
        }
        let n = (len - at).min(PIECE_BYTES as u64) as usize;
        f.read_exact_at(&mut buf[..n], at)
            .map_err(io("read", path))?;
        if !is_zero(&buf[..n]) {
            each(at, &buf[..n])?;
        }
        at += n as u64;
    }
    Ok(len)
}

/// A file's length and the SHA-256 of its non-zero pieces, each preceded
/// by its offset: the same for a file and any sparse or dense copy of it.
pub fn digest(path: &Path) -> Result<(u64, String)> {
    digest_with(path, |_, _| Ok(()))
}

/// [`digest`], giving `each` every non-zero piece on the way.
fn digest_with(
    path: &Path,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<(u64, String)> {
    let mut h = Sha256::new();
    let len = pieces(path, |at, piece| {
        h.update(at.to_le_bytes());
        h.update(piece);
        each(at, piece)
    })?;
    h.update(len.to_le_bytes());
    let sum = h.finalize();
    Ok((len, sum.iter().map(|b| format!("{b:02x}")).collect()))
}

/// Copies `from` to the new file `to`, leaving holes where `from` has
/// zeros; `from`'s length and [`digest`].
fn copy_sparse(from: &Path, to: &Path) -> Result<(u64, String)> {
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(io("create", to))?;
    let (len, sum) = digest_with(from, |at, piece| {
        out.write_all_at(piece, at).map_err(io("write", to))
    })?;
    out.set_len(len).map_err(io("size", to))?;
    out.sync_all().map_err(io("sync", to))?;
    Ok((len, sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_leaves_the_url_for_the_environment() {
        assert_eq!(
            split_password("postgres://u:p%40ss@h:5432/db?sslmode=require"),
            (
                "postgres://u@h:5432/db?sslmode=require".into(),
                Some("p%40ss".into())
            )
        );
        assert_eq!(percent_decode("p%40ss"), "p@ss");
        assert_eq!(
            split_password("postgres://postgres@127.0.0.1:5/t"),
            ("postgres://postgres@127.0.0.1:5/t".into(), None)
        );
        assert_eq!(
            split_password("postgres://h/db"),
            ("postgres://h/db".into(), None)
        );
    }
}
