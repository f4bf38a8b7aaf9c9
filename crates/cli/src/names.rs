//! Namespace commands: `ls`, `cat`, `put`, `rm`, `mv`, `watch`.

use std::io::{Read, Write};

use anyhow::Context;
use tabos_client::names::{CreateOptions, WatchMode};
use tabos_client::proto;

use crate::procs::RealmArg;
use crate::NodeAddr;

/// A fence to carry on a write: refused if DIR has seen a newer epoch.
#[derive(clap::Args)]
pub struct FenceArgs {
    /// Fence the write on this directory (with --epoch)
    #[arg(long = "fence", value_name = "DIR", requires = "epoch")]
    fence: Option<String>,
    /// The epoch the fence carries
    #[arg(long, requires = "fence")]
    epoch: Option<i64>,
}

impl FenceArgs {
    fn get(&self) -> Option<proto::Fence> {
        Some(proto::Fence {
            dir: self.fence.clone()?,
            epoch: self.epoch?,
        })
    }
}

#[derive(clap::Args)]
pub struct LsArgs {
    /// Directory to list
    #[arg(default_value = "/")]
    path: String,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Args)]
pub struct CatArgs {
    /// Entry to print: a file's data, or a symlink's target
    path: String,
    /// Print the entry's metadata instead of its data
    #[arg(long)]
    stat: bool,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Args)]
pub struct PutArgs {
    /// Path of the file (or, with --dir / --symlink, of the directory or symlink)
    path: String,
    /// The data (a symlink's target); read from stdin when omitted
    data: Option<String>,
    /// Create a directory
    #[arg(long, conflicts_with_all = ["symlink", "data", "if_version"])]
    dir: bool,
    /// Create a symlink whose target is DATA (e.g. a service's endpoint)
    #[arg(long, conflicts_with = "if_version")]
    symlink: bool,
    /// Create only: fail if the path exists
    #[arg(long, conflicts_with = "if_version")]
    create: bool,
    /// Set only if the file is at this version (0: only if it does not exist)
    #[arg(long)]
    if_version: Option<i64>,
    /// Create missing parent directories first
    #[arg(short, long)]
    parents: bool,
    #[command(flatten)]
    fence: FenceArgs,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Args)]
pub struct RmArgs {
    /// Entry to remove (a directory only when empty, unless -r)
    path: String,
    /// Remove a directory and everything under it (at most 100,000
    /// entries; symlinks are removed, not followed)
    #[arg(short, long, conflicts_with = "if_version")]
    recursive: bool,
    /// Remove only at this version
    #[arg(long)]
    if_version: Option<i64>,
    #[command(flatten)]
    fence: FenceArgs,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Args)]
pub struct MvArgs {
    from: String,
    /// New path (an existing file there is replaced)
    to: String,
    #[command(flatten)]
    fence: FenceArgs,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Args)]
pub struct WatchArgs {
    /// Directory to watch (or, with --exists / --removed, the path to wait for)
    path: String,
    /// Wait until the path exists, print it and exit
    #[arg(long, conflicts_with = "removed")]
    exists: bool,
    /// Wait until the path does not exist and exit
    #[arg(long)]
    removed: bool,
    /// Exit after this many changes (directory watch)
    #[arg(long)]
    count: Option<u64>,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

async fn connect(node: &NodeAddr) -> anyhow::Result<tabos_client::Client> {
    node.connect().await
}

/// Adds where to go to an error for a path that crossed a mount point.
fn explain(e: tabos_client::Error) -> anyhow::Error {
    match e.mount() {
        Some(m) => anyhow::anyhow!(
            "{e}\n(hint: {} is a mount point; the service is at {}, resolve {:?} there)",
            m.path,
            m.target,
            m.rest
        ),
        None => e.into(),
    }
}

fn line(e: &proto::NameEntry) -> String {
    let mut l = format!(
        "{:<7} {:>6} {:>8} {}",
        e.kind().name(),
        e.version,
        e.data.len(),
        e.path
    );
    if e.kind() == proto::NameKind::Symlink {
        l.push_str(&format!(" -> {}", String::from_utf8_lossy(&e.data)));
    }
    if !e.session.is_empty() {
        l.push_str(&format!("  (ephemeral, session {})", e.session));
    }
    l
}

/// An entry as JSON: its data as text when it is UTF-8, else bytes as
/// numbers; times in RFC 3339.
fn entry_json(e: &proto::NameEntry) -> serde_json::Value {
    let data = match std::str::from_utf8(&e.data) {
        Ok(t) => serde_json::Value::from(t),
        Err(_) => serde_json::Value::from(e.data.clone()),
    };
    serde_json::json!({
        "path": e.path, "kind": e.kind().name(), "version": e.version, "size": e.data.len(),
        "owner": e.owner, "mode": format!("{:o}", e.mode), "session": e.session,
        "created": crate::output::rfc3339(e.created_us),
        "modified": crate::output::rfc3339(e.modified_us), "data": data,
    })
}

/// `tabos ls [PATH]`: kind, version, size and path of each entry.
pub fn ls(args: LsArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut c = connect(&args.node).await?;
        let d = c
            .name_readdir(&args.realm.realm, &args.path)
            .await
            .map_err(explain)?;
        crate::output::listing(&d.entries, d.more, line, entry_json)?;
        Ok(())
    })
}

/// `tabos cat PATH`: a file's data as is (or its metadata with --stat).
pub fn cat(args: CatArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut c = connect(&args.node).await?;
        let e = c
            .name_get(&args.realm.realm, &args.path)
            .await
            .map_err(explain)?;
        let mut out = std::io::stdout().lock();
        if crate::output::json() {
            writeln!(out, "{}", entry_json(&e))?;
            return Ok(());
        }
        if args.stat {
            writeln!(out, "path     {}", e.path)?;
            writeln!(out, "kind     {}", e.kind())?;
            writeln!(out, "version  {}", e.version)?;
            writeln!(out, "size     {}", e.data.len())?;
            writeln!(out, "owner    {}", e.owner)?;
            writeln!(out, "mode     {:o}", e.mode)?;
            if !e.session.is_empty() {
                writeln!(out, "session  {}", e.session)?;
            }
            writeln!(out, "created  {}", crate::output::rfc3339(e.created_us))?;
            writeln!(out, "modified {}", crate::output::rfc3339(e.modified_us))?;
        } else if e.kind() == proto::NameKind::Dir {
            anyhow::bail!("{} is a directory (use tabos ls)", e.path);
        } else {
            out.write_all(&e.data)?;
            // On a terminal the prompt starts on a line of its own (as
            // etcdctl's get); piped, the bytes are the entry's, exactly.
            use std::io::IsTerminal;
            if !e.data.is_empty() && !e.data.ends_with(b"\n") && std::io::stdout().is_terminal() {
                writeln!(out)?;
            }
        }
        Ok(())
    })
}

/// `tabos put PATH [DATA]`: prints the entry's new version.
pub fn put(args: PutArgs) -> anyhow::Result<()> {
    let data = match (&args.data, args.dir) {
        (_, true) => Vec::new(),
        (Some(d), _) => d.clone().into_bytes(),
        (None, _) => {
            let mut buf = Vec::new();
            std::io::stdin()
                .take(tabos_kernel::names::DATA_BYTES_MAX as u64 + 1)
                .read_to_end(&mut buf)
                .context("cannot read the data from stdin")?;
            buf
        }
    };
    let realm = &args.realm.realm;
    crate::runtime()?.block_on(async {
        let mut c = connect(&args.node).await?;
        if args.parents {
            let parent = tabos_kernel::names::parent_of(&args.path);
            c.name_mkdir_all(realm, parent).await.map_err(explain)?;
        }
        let kind = if args.dir {
            Some(proto::NameKind::Dir)
        } else if args.symlink {
            Some(proto::NameKind::Symlink)
        } else if args.create {
            Some(proto::NameKind::File)
        } else {
            None
        };
        let version = match kind {
            Some(kind) => {
                let opts = CreateOptions {
                    fence: args.fence.get(),
                    ..CreateOptions::default()
                };
                c.name_create(realm, &args.path, kind, data, opts).await
            }
            None => {
                c.name_set(realm, &args.path, data, args.if_version, args.fence.get())
                    .await
            }
        }
        .map_err(explain)?;
        crate::output::emit(
            || format!("{} version {version}", args.path),
            || serde_json::json!({"path": args.path, "version": version}),
        );
        Ok(())
    })
}

/// `tabos rm PATH`.
pub fn rm(args: RmArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut c = connect(&args.node).await?;
        let realm = &args.realm.realm;
        if args.recursive {
            let e = c.name_get(realm, &args.path).await.map_err(explain)?;
            if e.kind() == proto::NameKind::Dir {
                let mut names = Names {
                    c: &mut c,
                    realm,
                    fence: args.fence.get(),
                };
                let n = crate::tree::rm_tree(&mut names, &args.path).await?;
                crate::output::emit(
                    || format!("removed {n} entries under {}", args.path),
                    || serde_json::json!({"path": args.path, "removed": n}),
                );
                return Ok(());
            }
        }
        c.name_remove(realm, &args.path, args.if_version, args.fence.get())
            .await
            .map_err(explain)?;
        if crate::output::json() {
            crate::output::doc(&serde_json::json!({"path": args.path, "removed": 1}));
        }
        Ok(())
    })
}

/// `tabos mv FROM TO`.
pub fn mv(args: MvArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut c = connect(&args.node).await?;
        c.name_rename(&args.realm.realm, &args.from, &args.to, args.fence.get())
            .await
            .map_err(explain)?;
        if crate::output::json() {
            crate::output::doc(&serde_json::json!({"from": args.from, "to": args.to}));
        }
        Ok(())
    })
}

/// `tabos watch PATH`: one line per event, flushed as it arrives.
pub fn watch(args: WatchArgs) -> anyhow::Result<()> {
    let mode = if args.exists {
        WatchMode::Exists
    } else if args.removed {
        WatchMode::Removed
    } else {
        WatchMode::Dir
    };
    crate::runtime()?.block_on(async {
        let mut c = connect(&args.node).await?;
        let mut events = c
            .watch(&args.realm.realm, &args.path, mode)
            .await
            .map_err(explain)?;
        let mut changes = 0u64;
        while let Some(ev) = events.message().await.context("the watch failed")? {
            let mut out = std::io::stdout().lock();
            match &ev.entry {
                _ if crate::output::json() => writeln!(
                    out,
                    "{}",
                    serde_json::json!({
                        "op": ev.op().name(), "path": ev.path, "version": ev.version,
                        "entry": ev.entry.as_ref().map(entry_json),
                    })
                )?,
                Some(e) => writeln!(out, "{} {}", ev.op(), line(e))?,
                None => writeln!(out, "{} {} {}", ev.op(), ev.version, ev.path)?,
            }
            out.flush()?;
            if ev.op() != proto::WatchOp::Watching {
                changes += 1;
                if args.count.is_some_and(|n| changes >= n) {
                    break;
                }
            }
        }
        Ok(())
    })
}

/// The realm's namespace as `rm -r` walks it (symlinks themselves, not
/// what they name), each removal with the command's fence.
struct Names<'a> {
    c: &'a mut tabos_client::Client,
    realm: &'a str,
    fence: Option<proto::Fence>,
}

impl crate::tree::Tree for Names<'_> {
    async fn list(&mut self, dir: &str) -> anyhow::Result<Vec<(String, bool)>> {
        let listing = self
            .c
            .name_readdir(self.realm, dir)
            .await
            .map_err(explain)?;
        Ok(listing
            .entries
            .into_iter()
            .map(|e| {
                let is_dir = e.kind() == proto::NameKind::Dir;
                (e.path, is_dir)
            })
            .collect())
    }

    async fn remove(&mut self, path: &str, _dir: bool) -> anyhow::Result<()> {
        self.c
            .name_remove(self.realm, path, None, self.fence.clone())
            .await
            .map_err(explain)?;
        Ok(())
    }
}
