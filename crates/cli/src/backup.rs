//! `tabos backup DEST` and `tabos restore SRC --data DIR`: a consistent
//! copy of an embedded node while it serves, and a data directory made
//! from one (`tabos_kernel::backup`).

use anyhow::Context;

use crate::NodeAddr;

#[derive(clap::Args)]
pub struct BackupArgs {
    /// A new directory on the node's machine (a relative path is taken from
    /// this directory): every partition of the kernel database at one
    /// point, the block store, and a manifest with each file's SHA-256
    dest: std::path::PathBuf,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A backup's directory (what `tabos backup` made)
    src: std::path::PathBuf,
    /// The data directory to make (new or empty); then `tabos up --data DIR`
    #[arg(long)]
    data: std::path::PathBuf,
    /// For a backup of a node on PostgreSQL: the empty database to restore
    /// it into (postgres://...; pg_restore must be installed)
    #[arg(long, value_name = "URL")]
    db: Option<String>,
}

/// `p` from the working directory, without `.` components.
fn absolute(p: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let full = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .context("cannot read the working directory")?
            .join(p)
    };
    Ok(full.components().collect())
}

pub fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let dest = absolute(&args.dest)?;
    crate::runtime()?.block_on(async {
        let b = args
            .node
            .connect()
            .await?
            .backup(&dest.to_string_lossy())
            .await?;
        if crate::output::json() {
            let files: Vec<_> = b
                .files
                .iter()
                .map(|f| serde_json::json!({"name": f.name, "bytes": f.bytes, "sha256": f.sha256}))
                .collect();
            let v = serde_json::json!({
                "dest": b.dest,
                "taken": crate::output::rfc3339(b.taken_us),
                "taken_us": b.taken_us,
                "partitions": b.partitions,
                "files": files,
                "block_store": b.block_store,
                "segments": b.segments,
                "frozen_us": b.frozen_us,
            });
            crate::output::doc(&v);
            return Ok(());
        }
        let bytes: u64 = b.files.iter().map(|f| f.bytes).sum();
        outln!(
            "backup of {} in {}: {} partitions{}, {} files, {} bytes (holes included)",
            crate::output::rfc3339(b.taken_us),
            b.dest,
            b.partitions,
            if b.block_store.is_empty() {
                String::new()
            } else {
                format!(
                    ", block store {} with {} segments",
                    b.block_store, b.segments
                )
            },
            b.files.len(),
            bytes
        );
        outln!(
            "writes to files in the block store waited {} ms",
            b.frozen_us / 1_000
        );
        if b.files
            .iter()
            .any(|f| f.name == tabos_kernel::backup::DUMP_FILE)
        {
            outln!(
                "restore: tabos restore {} --data DIR --db URL (an empty database), then tabos \
                 up --data DIR --db URL",
                b.dest
            );
        } else {
            outln!(
                "restore: tabos restore {} --data DIR, then tabos up --data DIR",
                b.dest
            );
        }
        Ok(())
    })
}

pub fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let b = tabos_kernel::backup::restore(&args.src, &args.data, args.db.as_deref())
        .with_context(|| format!("cannot restore {}", args.src.display()))?;
    if crate::output::json() {
        let v = serde_json::json!({
            "data": b.dir.display().to_string(),
            "taken": crate::output::rfc3339(b.taken_us),
            "taken_us": b.taken_us,
            "partitions": b.partitions,
            "files": b.files.len(),
        });
        crate::output::doc(&v);
        return Ok(());
    }
    outln!(
        "restored the backup of {} into {}: {} partitions, {} files checked against the manifest",
        crate::output::rfc3339(b.taken_us),
        b.dir.display(),
        b.partitions,
        b.files.len()
    );
    match &args.db {
        Some(url) => outln!(
            "start it: tabos up --data {} --db {url} --blocks {}/blocks.dev (if it had a block store)",
            b.dir.display(),
            b.dir.display()
        ),
        None => outln!("start it: tabos up --data {}", b.dir.display()),
    }
    Ok(())
}
