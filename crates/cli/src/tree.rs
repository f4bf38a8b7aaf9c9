//! `rm -r` over a tree the API keeps — the realm's files (`tabos fs rm
//! -r`) or its namespace (`tabos rm -r`): one walk for both.

/// Most entries one `rm -r` removes.
pub const RM_ENTRIES_MAX: u64 = 100_000;

/// A tree [`rm_tree`] can empty.
pub(crate) trait Tree {
    /// The entries of directory `dir`: each one's path, and whether it is
    /// a directory.
    async fn list(&mut self, dir: &str) -> anyhow::Result<Vec<(String, bool)>>;
    /// Removes entry `path` (`dir`: an empty directory).
    async fn remove(&mut self, path: &str, dir: bool) -> anyhow::Result<()>;
}

/// Removes directory `root` and everything under it, deepest first;
/// returns how many entries went. No recursion: a stack of directories
/// still to empty.
pub(crate) async fn rm_tree(t: &mut impl Tree, root: &str) -> anyhow::Result<u64> {
    let mut stack = vec![root.to_string()];
    let mut removed = 0u64;
    while let Some(dir) = stack.last().cloned() {
        if removed >= RM_ENTRIES_MAX {
            anyhow::bail!("stopped after removing {removed} entries (the most one rm -r removes)");
        }
        let entries = t.list(&dir).await?;
        if entries.is_empty() {
            t.remove(&dir, true).await?;
            stack.pop();
            removed += 1;
            continue;
        }
        for (path, is_dir) in entries {
            if is_dir {
                stack.push(path);
            } else {
                t.remove(&path, false).await?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}
