//! The node's cache of uploaded code (issue 41, item 1): the trees procs
//! run in, copied out of their realm's files once per node per realm and
//! content hash, checked against that hash, and evicted least recently
//! used past [`CODE_CACHE_BYTES_MAX`].
//!
//! A proc spawned with code (`/code/<hash>` in its realm's files,
//! `tabos_client::code`) or with a program of the realm's files
//! (`fs:/bin/tool`) is given a [`Lease`] on its tree before it starts:
//!
//! * the tree is looked up in the realm's files *as the proc's user*, so
//!   nothing its spawner could not read is run, and a tree another realm
//!   uploaded is not there to find — the cache is kept per realm, so a
//!   hash, which is not a secret, is never a way into another realm's
//!   copy;
//! * a tree already in the cache is hashed again before each use: one
//!   changed on the node's disk (tampered with, or damaged) is removed and
//!   copied again, never run;
//! * a tree copied from the realm's files must hash to its name: one
//!   changed after its upload is refused;
//! * a leased tree is never evicted; the copy lives under the node's log
//!   directory (the owner's alone), read-only to procs: a jailed proc sees
//!   it at [`crate::jail::CODE_DIR`] (its working directory) through a
//!   read-only bind.
//!
//! One copy of a realm's runs at a time (the node's disk and the database
//! are what it spends; another realm's copies do not wait for it), under
//! [`FETCH_WAIT_MAX`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tabos_client::code::{manifest, Manifest, CODE_BYTES_MAX, CODE_FILES_MAX};
use tabos_kernel::auth::Caller;
use tabos_kernel::fs::files::Files;
use tabos_kernel::fs::FileType;
use tabos_kernel::procs::{CodeHash, Kind};

/// Bytes of code a node keeps copied; least recently used trees not in use
/// go past it.
pub const CODE_CACHE_BYTES_MAX: u64 = 2 << 30;
/// Longest a proc waits for its code to be copied (behind other copies
/// included) before it fails.
pub const FETCH_WAIT_MAX: Duration = Duration::from_secs(300);
/// Bytes read from the realm's files per call.
const READ_CHUNK: usize = tabos_client::fs::CHUNK_BYTES;

/// Whether a proc's program is a file of its uploaded code: with code, a
/// relative path — with a `/` for a native program (a bare name is looked
/// up on `PATH`, as a shell does), any for a wasm module.
pub fn in_code(kind: Kind, has_code: bool, program: &str) -> bool {
    has_code && !program.starts_with('/') && (kind == Kind::Wasm || program.contains('/'))
}

/// What a proc runs from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A tree uploaded under its hash.
    Tree(CodeHash),
    /// One file of the realm's files (`fs:/path`).
    File(String),
}

/// Why code could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    #[error("no code {0} in the realm's files (upload it: tabos spawn --upload PATH)")]
    Missing(String),
    #[error("reading the realm's {path}: {source}")]
    Read {
        path: String,
        source: tabos_kernel::Error,
    },
    #[error("the realm's {dir} does not hold what its hash says (changed after its upload?): it hashes to {found}")]
    Mismatch { dir: String, found: String },
    #[error("{0}: more than {CODE_FILES_MAX} files or {CODE_BYTES_MAX} bytes")]
    TooBig(String),
    #[error("the node's code cache: {0}")]
    Disk(String),
    #[error("waited more than {FETCH_WAIT_MAX:?} for the code to be copied")]
    Slow,
}

/// What the cache holds of one tree.
#[derive(Debug)]
struct Slot {
    bytes: u64,
    /// When last leased (a counter: order is what eviction needs).
    used: u64,
    /// Leases held now.
    users: usize,
}

/// A file of the realm's files known by its identity and version: the tree
/// that holds it, without reading it again.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Known {
    id: String,
    mtime_us: i64,
    ctime_us: i64,
    size: i64,
    hash: String,
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<(String, String), Slot>,
    files: HashMap<(String, String), Known>,
    clock: u64,
}

/// The node's code cache.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    /// Per realm, held while that realm's code is copied: one copy of a
    /// realm's at a time, and one realm's big tree never holds up another's.
    copying: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Trees copied from realms' files since the node started.
    copies: AtomicU64,
    /// Trees found changed on the node's disk and copied again.
    tampered: AtomicU64,
}

/// A tree in use by a proc: not evicted while held.
#[derive(Debug)]
pub struct Lease {
    cache: Arc<Cache>,
    key: (String, String),
    /// The tree's directory on the node.
    pub dir: PathBuf,
    /// For a [`Source::File`]: the file's name in `dir`.
    pub file: Option<String>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut st = self.cache.state();
        if let Some(s) = st.slots.get_mut(&self.key) {
            debug_assert!(s.users > 0);
            s.users = s.users.saturating_sub(1);
            // A lease that failed before its tree was there leaves nothing.
            if s.users == 0 && s.bytes == 0 {
                st.slots.remove(&self.key);
            }
        }
    }
}

impl Cache {
    /// The cache in `dir` (made if missing; what an earlier run of the node
    /// left there is removed: its trees are copied again as needed).
    pub fn new(dir: PathBuf, max_bytes: u64) -> std::io::Result<Arc<Cache>> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(Arc::new(Cache {
            dir,
            max_bytes,
            state: Mutex::new(State::default()),
            copying: Mutex::new(HashMap::new()),
            copies: AtomicU64::new(0),
            tampered: AtomicU64::new(0),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Trees copied from realms' files, and trees found changed on disk.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.copies.load(Ordering::Relaxed),
            self.tampered.load(Ordering::Relaxed),
        )
    }

    fn tree_dir(&self, realm: &str, hash: &str) -> PathBuf {
        self.dir.join(realm).join(hash)
    }

    /// A lease on `source` of `who`'s realm, copied if the cache has no
    /// good copy.
    pub async fn lease(
        self: &Arc<Self>,
        files: &Files,
        who: &Caller,
        source: &Source,
    ) -> Result<Lease, CodeError> {
        tokio::time::timeout(FETCH_WAIT_MAX, self.lease_now(files, who, source))
            .await
            .map_err(|_| CodeError::Slow)?
    }

    async fn lease_now(
        self: &Arc<Self>,
        files: &Files,
        who: &Caller,
        source: &Source,
    ) -> Result<Lease, CodeError> {
        let realm = who.realm().to_string();
        let (hash, file) = match source {
            Source::Tree(hash) => {
                // The realm's tree, as the proc's user may see it.
                let dir = hash.dir();
                match stat(files, who, &dir).await {
                    Ok(st) if st.file_type == FileType::Dir => {}
                    Ok(_) | Err(tabos_kernel::Error::NotFound(_)) => {
                        return Err(CodeError::Missing(dir))
                    }
                    Err(source) => return Err(CodeError::Read { path: dir, source }),
                }
                (hash.to_string(), None)
            }
            Source::File(path) => {
                let st = stat(files, who, path).await.map_err(|e| match e {
                    tabos_kernel::Error::NotFound(_) => CodeError::Missing(format!("fs:{path}")),
                    source => CodeError::Read {
                        path: path.clone(),
                        source,
                    },
                })?;
                let name = path.rsplit('/').next().unwrap_or("program").to_string();
                let known = self
                    .state()
                    .files
                    .get(&(realm.clone(), path.clone()))
                    .cloned();
                let hash = match known {
                    Some(k)
                        if k.id == st.id
                            && k.mtime_us == st.mtime_us
                            && k.ctime_us == st.ctime_us
                            && k.size == st.size =>
                    {
                        k.hash
                    }
                    _ => {
                        let hash = self.copy_file(files, who, path, &name).await?;
                        self.state().files.insert(
                            (realm.clone(), path.clone()),
                            Known {
                                id: st.id,
                                mtime_us: st.mtime_us,
                                ctime_us: st.ctime_us,
                                size: st.size,
                                hash: hash.clone(),
                            },
                        );
                        hash
                    }
                };
                (hash, Some(name))
            }
        };
        // Pinned before it is checked: never evicted between the check
        // and the proc's start.
        let lease = self.pin((realm.clone(), hash.clone()), file);
        if !self.good(&lease.dir, &hash).await {
            let turn = self
                .copying
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(realm.clone())
                .or_default()
                .clone();
            let _copying = turn.lock().await;
            // Another spawn may have copied it meanwhile.
            if !self.good(&lease.dir, &hash).await {
                self.copy_in(files, who, source, &lease, &hash).await?;
            }
        }
        self.counted(&lease).await;
        Ok(lease)
    }

    /// Copies `source` into the leased place (a copy there that does not
    /// hash to its name was changed on the node's disk: removed first).
    async fn copy_in(
        &self,
        files: &Files,
        who: &Caller,
        source: &Source,
        lease: &Lease,
        hash: &str,
    ) -> Result<(), CodeError> {
        if lease.dir.exists() {
            self.tampered.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                realm = %who.realm(),
                "the node's copy of code {hash} changed on disk; copying it again"
            );
            remove(&lease.dir).await?;
        }
        match source {
            Source::Tree(h) => self.copy_tree(files, who, h).await,
            Source::File(path) => {
                let name = lease.file.clone().unwrap_or_default();
                let copied = self.copy_file(files, who, path, &name).await?;
                if copied != hash {
                    return Err(CodeError::Mismatch {
                        dir: format!("fs:{path}"),
                        found: copied,
                    });
                }
                Ok(())
            }
        }
    }

    /// Whether `dir` holds a tree hashing to `hash`.
    async fn good(&self, dir: &Path, hash: &str) -> bool {
        let dir = dir.to_path_buf();
        let found = tokio::task::spawn_blocking(move || manifest(&dir).ok())
            .await
            .ok()
            .flatten();
        found.is_some_and(|m| m.hash == hash)
    }

    /// A lease on the tree `key` names, whether or not it is there yet:
    /// from now until the lease is dropped it is not evicted.
    fn pin(self: &Arc<Self>, key: (String, String), file: Option<String>) -> Lease {
        let dir = self.tree_dir(&key.0, &key.1);
        let mut st = self.state();
        st.clock += 1;
        let now = st.clock;
        let slot = st.slots.entry(key.clone()).or_insert(Slot {
            bytes: 0,
            used: now,
            users: 0,
        });
        slot.used = now;
        slot.users += 1;
        drop(st);
        Lease {
            cache: self.clone(),
            key,
            dir,
            file,
        }
    }

    /// Counts a leased tree, there and checked, against the bound; evicts
    /// what is over it. The walk and the removals are file system calls:
    /// off the runtime's threads.
    async fn counted(&self, lease: &Lease) {
        let dir = lease.dir.clone();
        let bytes = tokio::task::spawn_blocking(move || dir_bytes(&dir))
            .await
            .unwrap_or(0);
        if let Some(s) = self.state().slots.get_mut(&lease.key) {
            s.bytes = bytes;
        }
        let gone = self.evictions();
        if !gone.is_empty() {
            let _ = tokio::task::spawn_blocking(move || remove_trees(gone)).await;
        }
    }

    /// Takes out of the cache's count the least recently used trees no
    /// proc holds while it is over its bound; their directories, for
    /// [`remove_trees`].
    fn evictions(&self) -> Vec<PathBuf> {
        let mut gone = Vec::new();
        {
            let mut st = self.state();
            let mut total: u64 = st.slots.values().map(|s| s.bytes).sum();
            while total > self.max_bytes {
                let Some(key) = st
                    .slots
                    .iter()
                    .filter(|(_, s)| s.users == 0)
                    .min_by_key(|(_, s)| s.used)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                if let Some(s) = st.slots.remove(&key) {
                    total -= s.bytes;
                }
                gone.push(self.tree_dir(&key.0, &key.1));
            }
        }
        gone
    }

    /// A staging directory of the cache's own.
    fn staging(&self) -> Result<PathBuf, CodeError> {
        let n = self.copies.load(Ordering::Relaxed);
        let dir = self.dir.join(format!(
            ".copy-{}-{n}-{}",
            std::process::id(),
            tabos_store::now_us()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| CodeError::Disk(e.to_string()))?;
        Ok(dir)
    }

    /// Copies the realm's `/code/<hash>` into the cache, checking it.
    async fn copy_tree(
        &self,
        files: &Files,
        who: &Caller,
        hash: &CodeHash,
    ) -> Result<(), CodeError> {
        let src = hash.dir();
        let staging = self.staging()?;
        let copied = self.copy_dir(files, who, &src, &staging).await;
        let checked = match copied {
            Ok(()) => self.check(&staging, &src, hash.as_str()).await,
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => self.place(&staging, who.realm(), hash.as_str()),
            Err(e) => {
                let _ = remove(&staging).await;
                Err(e)
            }
        }
    }

    /// Copies one file of the realm's into the cache as a tree of itself
    /// named `name`; its hash.
    async fn copy_file(
        &self,
        files: &Files,
        who: &Caller,
        path: &str,
        name: &str,
    ) -> Result<String, CodeError> {
        let staging = self.staging()?;
        let mut budget = Budget::default();
        let copied = self
            .copy_one(files, who, path, &staging.join(name), &mut budget)
            .await;
        let m = match copied {
            Ok(()) => hash_dir(&staging).await,
            Err(e) => Err(e),
        };
        match m {
            Ok(m) => {
                let dir = self.tree_dir(who.realm(), &m.hash);
                if dir.exists() {
                    let _ = remove(&staging).await;
                } else {
                    self.place(&staging, who.realm(), &m.hash)?;
                }
                Ok(m.hash)
            }
            Err(e) => {
                let _ = remove(&staging).await;
                Err(e)
            }
        }
    }

    async fn check(&self, staging: &Path, src: &str, hash: &str) -> Result<(), CodeError> {
        let m = hash_dir(staging).await?;
        if m.hash != hash {
            return Err(CodeError::Mismatch {
                dir: src.to_string(),
                found: m.hash,
            });
        }
        Ok(())
    }

    /// Moves a checked staging tree to its place.
    fn place(&self, staging: &Path, realm: &str, hash: &str) -> Result<(), CodeError> {
        let disk = |e: std::io::Error| CodeError::Disk(e.to_string());
        let dir = self.tree_dir(realm, hash);
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(disk)?;
        }
        std::fs::rename(staging, &dir).map_err(disk)?;
        self.copies.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Copies directory `src` of the realm's files into `to`.
    async fn copy_dir(
        &self,
        files: &Files,
        who: &Caller,
        src: &str,
        to: &Path,
    ) -> Result<(), CodeError> {
        let mut budget = Budget::default();
        let mut dirs = vec![(src.to_string(), to.to_path_buf())];
        while let Some((dir, local)) = dirs.pop() {
            let (entries, more) =
                readdir(files, who, &dir)
                    .await
                    .map_err(|source| CodeError::Read {
                        path: dir.clone(),
                        source,
                    })?;
            if more {
                return Err(CodeError::TooBig(src.to_string()));
            }
            for e in entries {
                let name = e.path.rsplit('/').next().unwrap_or_default().to_string();
                let (path, dest) = (format!("{dir}/{name}"), local.join(&name));
                match e.file_type {
                    FileType::Dir => {
                        std::fs::create_dir(&dest).map_err(|e| CodeError::Disk(e.to_string()))?;
                        dirs.push((path, dest));
                    }
                    FileType::File => self.copy_one(files, who, &path, &dest, &mut budget).await?,
                    // Not part of any tree's hash: the check refuses it.
                    FileType::Symlink | FileType::Fifo => {}
                }
            }
        }
        Ok(())
    }

    /// Copies file `path` of the realm's to `dest`, executable if any of
    /// its execute bits is set.
    async fn copy_one(
        &self,
        files: &Files,
        who: &Caller,
        path: &str,
        dest: &Path,
        budget: &mut Budget,
    ) -> Result<(), CodeError> {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let read_err = |source| CodeError::Read {
            path: path.to_string(),
            source,
        };
        let st = stat(files, who, path).await.map_err(read_err)?;
        budget.files += 1;
        budget.bytes += u64::try_from(st.size).unwrap_or(u64::MAX);
        if budget.files > CODE_FILES_MAX || budget.bytes > CODE_BYTES_MAX {
            return Err(CodeError::TooBig(path.to_string()));
        }
        let disk = |e: std::io::Error| CodeError::Disk(e.to_string());
        let mut out = std::fs::File::create(dest).map_err(disk)?;
        let mut at = 0i64;
        loop {
            let chunk = files
                .read(who, path, at, READ_CHUNK)
                .await
                .map_err(read_err)?;
            if chunk.is_empty() {
                break;
            }
            out.write_all(&chunk).map_err(disk)?;
            at += chunk.len() as i64;
            if at > st.size {
                // Grew while copied: the check will say so; stop here.
                break;
            }
        }
        let mode = if st.mode & 0o111 != 0 { 0o555 } else { 0o444 };
        std::fs::set_permissions(dest, std::fs::Permissions::from_mode(mode)).map_err(disk)?;
        Ok(())
    }
}

/// Files and bytes copied so far of one tree.
#[derive(Debug, Default)]
struct Budget {
    files: usize,
    bytes: u64,
}

async fn hash_dir(dir: &Path) -> Result<Manifest, CodeError> {
    let d = dir.to_path_buf();
    tokio::task::spawn_blocking(move || manifest(&d))
        .await
        .map_err(|e| CodeError::Disk(e.to_string()))?
        .map_err(|e| CodeError::Disk(e.to_string()))
}

async fn remove(dir: &Path) -> Result<(), CodeError> {
    let d = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        // Its files are read-only: their directories are what a removal
        // needs writable.
        make_writable(&d);
        std::fs::remove_dir_all(&d)
    })
    .await
    .map_err(|e| CodeError::Disk(e.to_string()))?
    .map_err(|e| CodeError::Disk(e.to_string()))
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&e.path());
            }
        }
    }
}

/// Removes evicted trees' directories.
fn remove_trees(gone: Vec<PathBuf>) {
    for d in gone {
        match std::fs::remove_dir_all(&d) {
            // A lease that failed before its tree was there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot evict code {}: {e}", d.display()),
            Ok(()) => {}
        }
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

async fn stat(
    files: &Files,
    who: &Caller,
    path: &str,
) -> tabos_kernel::Result<tabos_kernel::fs::Stat> {
    let (w, p) = (who.clone(), path.to_string());
    tabos_kernel::read(files.store(), who.realm(), move |tx| {
        tabos_kernel::fs::stat_tx(tx, &w, &p)
    })
    .await
}

async fn readdir(
    files: &Files,
    who: &Caller,
    dir: &str,
) -> tabos_kernel::Result<(Vec<tabos_kernel::fs::Stat>, bool)> {
    let (w, d) = (who.clone(), dir.to_string());
    tabos_kernel::read(files.store(), who.realm(), move |tx| {
        tabos_kernel::fs::readdir_tx(tx, &w, &d)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over its bound, the cache gives up its least recently used trees
    /// that no proc holds — and never one that a proc holds, however old.
    #[test]
    fn eviction_takes_the_least_recently_used_trees_no_proc_holds() {
        let dir = std::env::temp_dir().join(format!("tabos-code-evict-{}", std::process::id()));
        let cache = Cache::new(dir.clone(), 100).unwrap();
        {
            let mut st = cache.state();
            for (hash, bytes, used, users) in
                [("held", 60, 1, 1), ("old", 30, 2, 0), ("new", 30, 3, 0)]
            {
                st.slots
                    .insert(("r".into(), hash.into()), Slot { bytes, used, users });
            }
        }
        // 120 bytes over a bound of 100: "held" is the oldest but held, so
        // "old" goes, and the rest fits.
        assert_eq!(cache.evictions(), vec![dir.join("r").join("old")]);
        assert_eq!(cache.evictions(), Vec::<PathBuf>::new());
        let left: Vec<String> = {
            let st = cache.state();
            let mut k: Vec<String> = st.slots.keys().map(|(_, h)| h.clone()).collect();
            k.sort();
            k
        };
        assert_eq!(left, ["held", "new"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
