//! `tabos fs ls|cat|put|get|rm|mkfifo|mkdir|mv|stat|du|…|watch`: files in tables.

use std::io::{Read, Write};

use anyhow::Context;
use tabos_client::fs::CHUNK_BYTES;
use tabos_client::proto::{self, FsStat};

use crate::procs::RealmArg;
use crate::NodeAddr;

#[derive(clap::Args)]
pub struct FsArgs {
    #[command(subcommand)]
    command: FsCommand,
    /// User to act as; only an operator's credential may name one
    /// [default: the credential's user]
    #[arg(long, global = true, env = "TABOS_USER")]
    user: Option<String>,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Subcommand)]
enum FsCommand {
    /// List a directory
    Ls {
        #[arg(default_value = "/")]
        path: String,
    },
    /// Print a file
    Cat { path: String },
    /// Copy a local file (or stdin, with -) into tabos
    Put {
        local: String,
        path: String,
        /// Mode of a new file (octal)
        #[arg(long, default_value = "644")]
        mode: String,
        /// Make a new file a parallel one: its blocks spread over every
        /// partition by block number (otherwise local blocks, moved to
        /// block segments once the file passes the node's threshold)
        #[arg(long)]
        parallel: bool,
    },
    /// Copy a tabos file to a local file (or stdout without LOCAL)
    Get { path: String, local: Option<String> },
    /// Remove a file, or an empty directory
    Rm {
        path: String,
        /// Remove a directory and everything under it (at most 100,000
        /// entries)
        #[arg(short, long)]
        recursive: bool,
    },
    /// Create a named pipe (FIFO): `cat` on it waits for a writer's bytes
    /// and ends when the writers close; `put` to it waits for room
    Mkfifo {
        path: String,
        #[arg(long, default_value = "644")]
        mode: String,
    },
    /// Create a directory
    Mkdir {
        path: String,
        /// Create missing parents too
        #[arg(short, long)]
        parents: bool,
        #[arg(long, default_value = "755")]
        mode: String,
    },
    /// Rename atomically (over an existing file)
    Mv { from: String, to: String },
    /// Show an entry's metadata
    Stat { path: String },
    /// Files and bytes under a path — one SQL query
    Du {
        #[arg(default_value = "/")]
        path: String,
        /// Only this owner's files
        #[arg(long, default_value = "")]
        owner: String,
        /// Only files of at least this many bytes
        #[arg(long, default_value_t = 0)]
        min_size: i64,
    },
    /// Change an entry's mode (octal)
    Chmod { mode: String, path: String },
    /// Give an entry to another user (root only)
    Chown { owner: String, path: String },
    /// Give a file a further name (a hard link), or with -s make a
    /// symbolic link whose target is TARGET (stored as given)
    Ln {
        /// Make a symbolic link instead
        #[arg(short, long)]
        symbolic: bool,
        target: String,
        path: String,
    },
    /// Print a symbolic link's target
    Readlink { path: String },
    /// Print the realm's file changes as they commit, until interrupted:
    /// `name PATH` when a name is added or removed (only where you may
    /// list its directory), `file ID` when a file's data or attributes
    /// change. Says on stderr when it watches
    Watch,
}

fn octal(s: &str) -> anyhow::Result<i64> {
    i64::from_str_radix(s, 8).with_context(|| format!("{s:?} is not an octal mode"))
}

fn line(e: &FsStat) -> String {
    format!(
        "{}{:o} {:>3} {:<10} {:>12} {}",
        match e.r#type() {
            proto::FileType::Dir => "d",
            proto::FileType::Symlink => "l",
            proto::FileType::Fifo => "p",
            _ => "-",
        },
        e.mode,
        e.nlink,
        e.owner,
        e.size,
        e.path
    )
}

/// A file's or directory's metadata as JSON (times in RFC 3339).
fn stat_json(s: &tabos_client::proto::FsStat) -> serde_json::Value {
    serde_json::json!({
        "path": s.path, "type": s.r#type().name(), "owner": s.owner,
        "mode": format!("{:o}", s.mode), "size": s.size, "block_size": s.block_size,
        "layout": s.layout, "links": s.nlink, "id": s.id,
        "changed": crate::output::rfc3339(s.ctime_us),
        "modified": crate::output::rfc3339(s.mtime_us),
    })
}

pub fn run(args: FsArgs) -> anyhow::Result<()> {
    let user = args.user.clone().unwrap_or_default();
    let realm = args.realm.realm.clone();
    crate::runtime()?.block_on(async {
        let mut c = args.node.connect().await?;
        match args.command {
            FsCommand::Ls { path } => {
                let d = c.fs_readdir(&realm, &user, &path).await?;
                crate::output::listing(&d.entries, d.more, line, stat_json)?;
            }
            FsCommand::Cat { path } => {
                if c.fs_stat(&realm, &path).await?.r#type() == proto::FileType::Fifo {
                    // An end of its own: waits for a writer, EOF when they close.
                    let end = c
                        .fs_open_pipe(&realm, &user, &path, proto::FsAccess::Read)
                        .await?;
                    let mut out = std::io::stdout().lock();
                    loop {
                        let got = c
                            .fs_read(&realm, &user, end.target(), 0, CHUNK_BYTES as u32)
                            .await?;
                        if got.is_empty() {
                            break;
                        }
                        out.write_all(&got)?;
                        out.flush()?;
                    }
                    end.close(&mut c, &realm, &user).await?;
                } else {
                    c.fs_read_all(&realm, &user, &path, std::io::stdout().lock())
                        .await?;
                }
            }
            FsCommand::Mkfifo { path, mode } => {
                let st = c.fs_mkfifo(&realm, &user, &path, octal(&mode)?).await?;
                if crate::output::json() {
                    crate::output::doc(&stat_json(&st));
                }
            }
            FsCommand::Get { path, local } => {
                let n = match &local {
                    Some(l) => {
                        let f = std::fs::File::create(l)
                            .with_context(|| format!("cannot create {l}"))?;
                        c.fs_read_all(&realm, &user, &path, std::io::BufWriter::new(f))
                            .await?
                    }
                    None => {
                        c.fs_read_all(&realm, &user, &path, std::io::stdout().lock())
                            .await?
                    }
                };
                if local.is_some() {
                    if crate::output::json() {
                        crate::output::doc(&serde_json::json!({"path": path, "bytes": n}));
                    } else {
                        eprintln!("{path}: {n} bytes");
                    }
                }
            }
            FsCommand::Put {
                local,
                path,
                mode,
                parallel,
            } => {
                let mode = octal(&mode)?;
                let mut input: Box<dyn Read> = if local == "-" {
                    Box::new(std::io::stdin())
                } else {
                    Box::new(
                        std::fs::File::open(&local)
                            .with_context(|| format!("cannot open {local}"))?,
                    )
                };
                // Replace: a new file, or an existing one cut to zero.
                let created = if parallel {
                    c.fs_create_parallel(&realm, &user, &path, mode).await
                } else {
                    c.fs_create(&realm, &user, &path, mode).await
                };
                let mut pipe = None;
                match created {
                    Ok(_) => {}
                    Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {
                        if c.fs_stat(&realm, &path).await?.r#type() == proto::FileType::Fifo {
                            // One write end for the whole input: its close
                            // is the readers' EOF.
                            let end = c
                                .fs_open_pipe(&realm, &user, &path, proto::FsAccess::Write)
                                .await?;
                            pipe = Some(end);
                        } else {
                            c.fs_truncate(&realm, &user, &path, 0).await?;
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
                let target = |at: &Option<tabos_client::fs::PipeEnd>| match at {
                    Some(end) => end.target(),
                    None => tabos_client::fs::FsTarget::Path(path.clone()),
                };
                let mut at = 0i64;
                let mut buf = vec![0u8; CHUNK_BYTES];
                loop {
                    let n = tabos_client::code::read_full(&mut input, &mut buf)
                        .context("cannot read the input")?;
                    if n == 0 {
                        break;
                    }
                    c.fs_write(&realm, &user, target(&pipe), at, buf[..n].to_vec(), false)
                        .await?;
                    at += n as i64;
                }
                if let Some(end) = pipe {
                    end.close(&mut c, &realm, &user).await?;
                }
                crate::output::emit(
                    || format!("{path}: {at} bytes"),
                    || serde_json::json!({"path": path, "bytes": at}),
                );
            }
            FsCommand::Rm { path, recursive } => {
                let st = c.fs_stat(&realm, &path).await?;
                if recursive && st.r#type() == proto::FileType::Dir {
                    let mut files = Files {
                        c: &mut c,
                        realm: &realm,
                        user: &user,
                    };
                    let n = crate::tree::rm_tree(&mut files, &path).await?;
                    crate::output::emit(
                        || format!("removed {n} entries under {path}"),
                        || serde_json::json!({"path": path, "removed": n}),
                    );
                } else {
                    if st.r#type() == proto::FileType::Dir {
                        c.fs_rmdir(&realm, &user, &path).await?;
                    } else {
                        c.fs_unlink(&realm, &user, &path).await?;
                    }
                    if crate::output::json() {
                        crate::output::doc(&serde_json::json!({"path": path, "removed": 1}));
                    }
                }
            }
            FsCommand::Mkdir {
                path,
                parents,
                mode,
            } => {
                let mode = octal(&mode)?;
                if parents {
                    let mut at = String::new();
                    for part in path.split('/').filter(|p| !p.is_empty()) {
                        at.push('/');
                        at.push_str(part);
                        match c.fs_mkdir(&realm, &user, &at, mode).await {
                            Ok(_) => {}
                            Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                } else {
                    c.fs_mkdir(&realm, &user, &path, mode).await?;
                }
                if crate::output::json() {
                    let s = c.fs_stat(&realm, &path).await?;
                    crate::output::doc(&stat_json(&s));
                }
            }
            FsCommand::Mv { from, to } => {
                c.fs_rename(&realm, &user, &from, &to).await?;
                if crate::output::json() {
                    crate::output::doc(&serde_json::json!({"from": from, "to": to}));
                }
            }
            FsCommand::Stat { path } => {
                let s = c.fs_stat(&realm, &path).await?;
                if crate::output::json() {
                    crate::output::doc(&stat_json(&s));
                    return Ok(());
                }
                outln!("path       {}", s.path);
                outln!("type       {}", s.r#type());
                outln!("owner      {}", s.owner);
                outln!("mode       {:o}", s.mode);
                outln!("size       {}", s.size);
                outln!("links      {}", s.nlink);
                outln!("block size {}", s.block_size);
                if s.r#type() == proto::FileType::File {
                    outln!("layout     {}", s.layout);
                }
                outln!("changed    {}", crate::output::rfc3339(s.ctime_us));
                outln!("modified   {}", crate::output::rfc3339(s.mtime_us));
            }
            FsCommand::Du {
                path,
                owner,
                min_size,
            } => {
                let (files, bytes) = c.fs_du(&realm, &path, &owner, min_size).await?;
                crate::output::emit(
                    || format!("{bytes} bytes in {files} files under {path}"),
                    || serde_json::json!({"path": path, "files": files, "bytes": bytes}),
                );
            }
            FsCommand::Chmod { mode, path } => {
                c.fs_chmod(&realm, &user, &path, octal(&mode)?).await?;
                if crate::output::json() {
                    crate::output::doc(&stat_json(&c.fs_stat(&realm, &path).await?));
                }
            }
            FsCommand::Chown { owner, path } => {
                c.fs_chown(&realm, &user, &path, &owner).await?;
                if crate::output::json() {
                    crate::output::doc(&stat_json(&c.fs_stat(&realm, &path).await?));
                }
            }
            FsCommand::Ln {
                symbolic,
                target,
                path,
            } => {
                let st = if symbolic {
                    c.fs_symlink(&realm, &user, &target, &path).await?
                } else {
                    c.fs_link(&realm, &user, &target, &path).await?
                };
                if crate::output::json() {
                    crate::output::doc(&stat_json(&st));
                }
            }
            FsCommand::Readlink { path } => {
                let target = c.fs_readlink(&realm, &user, &path).await?;
                crate::output::emit(
                    || target.clone(),
                    || serde_json::json!({"path": path, "target": target}),
                );
            }
            FsCommand::Watch => {
                let mut changes = c.fs_watch(&realm, &user).await?;
                while let Some(m) = changes.message().await? {
                    if m.watching {
                        eprintln!("watching the realm's file changes");
                    }
                    for ch in m.changes {
                        let (kind, what) = match ch.kind() {
                            proto::FsChangeKind::Name => ("name", ch.path),
                            proto::FsChangeKind::File => ("file", ch.id),
                            proto::FsChangeKind::Unspecified => continue,
                        };
                        crate::output::emit(
                            || format!("{kind} {what}"),
                            || serde_json::json!({"kind": kind, "what": what}),
                        );
                    }
                }
            }
        }
        Ok(())
    })
}

/// The realm's files as `rm -r` walks them, as one user.
struct Files<'a> {
    c: &'a mut tabos_client::Client,
    realm: &'a str,
    user: &'a str,
}

impl crate::tree::Tree for Files<'_> {
    async fn list(&mut self, dir: &str) -> anyhow::Result<Vec<(String, bool)>> {
        let listing = self.c.fs_readdir(self.realm, self.user, dir).await?;
        Ok(listing
            .entries
            .into_iter()
            .map(|e| {
                let is_dir = e.r#type() == proto::FileType::Dir;
                (e.path, is_dir)
            })
            .collect())
    }

    async fn remove(&mut self, path: &str, dir: bool) -> anyhow::Result<()> {
        if dir {
            self.c.fs_rmdir(self.realm, self.user, path).await?;
        } else {
            self.c.fs_unlink(self.realm, self.user, path).await?;
        }
        Ok(())
    }
}
