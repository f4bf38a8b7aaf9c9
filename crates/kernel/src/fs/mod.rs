//! The filesystem in tables (DBOS section 4.4, Figure 9): names in
//! `directory`, what they name in `fs_inode`, file data in blocks keyed by
//! the file's id, one transaction per operation.
//!
//! Tables (migrations `006_fs`, `007_fs_data`, `033_fs_inodes`): `fs_map`
//! (partitions and their hosts), `fs_user` (a realm's users: home
//! partition and current path), `directory` (one row per name: its path,
//! its parent and the id it names), `fs_inode` (one row per directory,
//! file or symbolic link: type, owner, mode, size, layout, block size,
//! times, version, number of names, a symlink's target),
//! `localized_file` (a file's blocks; a block never written — a hole — has
//! no row and reads as zeros), `parallel_file` (a parallel file's blocks,
//! each on the partition its block number picks), `fs_extent` (large
//! files' data in blockio segments), `fs_reclaim` (storage to give back
//! after a commit) and `fs_open` (open handles). The procedures here are
//! single transactions on the realm's partition and serve localized files
//! whole; parallel files and files in segments take several steps, which
//! [`files::Files`] runs.
//!
//! Files by id, as POSIX has them: a file may have several names (hard
//! links, [`link_tx`]); a rename moves names only; removing a file's last
//! name while a handle on it is open ([`open_tx`]) leaves it, nameless,
//! readable and writable through the handle until the last one closes
//! ([`close_tx`]). A handle belongs to its opener's names session, so a
//! client that dies without closing loses its handles when the session
//! lapses ([`session_ended_tx`]); what a crash leaves is swept when a node
//! starts ([`sweep_tx`]). Symbolic links ([`symlink_tx`]) are stored, not
//! followed: the mount's callers (the Linux VFS) follow them, and a path
//! given to the API names the link itself.
//!
//! A realm's files, metadata and blocks, are on the realm's partition — the
//! paper keeps a user's on the user's home partition; a realm's users share
//! it here, so that a path lookup and a rename between two users'
//! directories stay single-partition transactions.
//!
//! Every operation acts for a [`Caller`] and checks it first: role reader to
//! look (stat, list, read, du), member to change, and no scope (a scoped
//! credential has only mailboxes); it acts in the caller's realm, as the
//! caller's user.
//!
//! Permissions: POSIX owner and other bits (group bits are not used: there
//! are no groups). Reading a file needs `r` on it, writing `w`; creating,
//! removing or renaming an entry needs `w` and `x` on its directory;
//! listing a directory needs `r`. In a directory with the sticky bit
//! ([`STICKY`], mode 01777 for a shared one) only an entry's owner, the
//! directory's owner or [`ROOT`] may remove or rename the entry. Only the
//! owner (or [`ROOT`]) may chmod; only [`ROOT`] may chown. [`ROOT`] may do
//! anything. The root directory `/` is implicit, owned by [`ROOT`], mode
//! 0755: the realm's root makes the directories its users share.
//!
//! Paths follow the namespace's rules ([`crate::names::validate_path`]):
//! absolute, no empty, `.` or `..` component, no control character, at most
//! 1,024 bytes.

pub mod changes;
pub mod fifo;
pub mod files;

use tabos_store::{params, Row, Tx};

use crate::auth::Role;
use crate::names::{parent_of, validate_path};
pub use crate::{call, read};
use crate::{p_key, subtree_range, validate_realm, Error, Result};
use changes::{note, Change};

/// The user who may do anything.
pub use crate::auth::ROOT;
/// The sticky bit of a directory's mode: its entries are removed or
/// renamed only by their owner, the directory's owner or root.
pub const STICKY: i64 = 0o1000;
/// Mode of the implicit root directory.
pub const ROOT_DIR_MODE: i64 = 0o755;
/// Default block size of localized files (the paper's 2 KB).
pub const BLOCK_BYTES_LOCAL: i64 = 2_048;
/// Default block size of parallel files (the paper's 8 KB).
pub const BLOCK_BYTES_PARALLEL: i64 = 8_192;
/// Smallest block size a file may have.
pub const BLOCK_BYTES_MIN: i64 = 512;
/// Largest block size a file may have.
pub const BLOCK_BYTES_MAX: i64 = 1 << 20;
/// Most bytes one read returns or one write takes.
pub const IO_BYTES_MAX: usize = 4 << 20;
/// Largest file.
pub const FILE_BYTES_MAX: i64 = 1 << 40;
/// Most entries one readdir returns.
pub const READDIR_MAX: usize = 10_000;
/// Longest symbolic link target, in bytes (Linux's PATH_MAX less its NUL).
pub const SYMLINK_BYTES_MAX: usize = 4_095;
/// Most names one file may have (Linux's ext4 allows 65,000).
pub const LINKS_MAX: i64 = 65_000;
/// Most handles one session may hold open (a mount opens a file once per
/// open descriptor of a process on it).
pub const HANDLES_PER_SESSION_MAX: i64 = 4_096;
/// Mode of a symbolic link (its permission bits are never checked).
pub const MODE_SYMLINK: i64 = 0o777;
/// Mode of a new file when the caller gives none.
pub const MODE_FILE_DEFAULT: i64 = 0o644;
/// Mode of a new directory when the caller gives none.
pub const MODE_DIR_DEFAULT: i64 = 0o755;
/// Longest user name, in bytes.
pub use crate::auth::USER_BYTES_MAX;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Dir,
    File,
    Symlink,
    /// A named pipe ([`fifo`]).
    Fifo,
}

impl FileType {
    pub fn as_str(self) -> &'static str {
        match self {
            FileType::Dir => "dir",
            FileType::File => "file",
            FileType::Symlink => "symlink",
            FileType::Fifo => "fifo",
        }
    }

    fn parse(s: &str) -> Result<FileType> {
        match s {
            "dir" => Ok(FileType::Dir),
            "file" => Ok(FileType::File),
            "symlink" => Ok(FileType::Symlink),
            "fifo" => Ok(FileType::Fifo),
            _ => Err(Error::Invalid(format!("no entry type {s:?}"))),
        }
    }
}

/// Where a file's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Block rows on the realm's partition (`localized_file`).
    Local,
    /// Block rows spread over partitions by block number (`parallel_file`).
    Parallel,
    /// blockio segments, with the extent map in `fs_extent`.
    Segments,
}

impl Storage {
    pub fn as_str(self) -> &'static str {
        match self {
            Storage::Local => "local",
            Storage::Parallel => "parallel",
            Storage::Segments => "segments",
        }
    }

    pub fn parse(s: &str) -> Result<Storage> {
        match s {
            "local" => Ok(Storage::Local),
            "parallel" => Ok(Storage::Parallel),
            "segments" => Ok(Storage::Segments),
            _ => Err(Error::Invalid(format!(
                "a layout is local, parallel or segments, not {s:?}"
            ))),
        }
    }
}

/// An entry's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The name it was looked up by (for an open handle, a label).
    pub path: String,
    /// What names point at: stable across renames and links.
    pub id: String,
    /// How many names it has (0: removed, kept while open).
    pub nlink: i64,
    pub file_type: FileType,
    /// Where a file's data is ([`Storage::Local`] for a directory).
    pub storage: Storage,
    pub owner: String,
    pub mode: i64,
    pub size: i64,
    pub block_size: i64,
    pub ctime_us: i64,
    pub mtime_us: i64,
    /// Set by utimensat only; the modification time until then.
    pub atime_us: i64,
}

/// Who asks: defined with the credentials a caller's user comes from.
pub use crate::auth::Caller;

/// User names are checked where credentials are made: one rule for both.
pub use crate::auth::validate_user;

fn check_mode(mode: i64) -> Result<()> {
    if !(0..=0o1777).contains(&mode) {
        return Err(Error::Invalid(format!(
            "mode {mode:o} is not 0..=01777 (permission bits and the sticky bit)"
        )));
    }
    Ok(())
}

/// Which permission an operation needs.
#[derive(Debug, Clone, Copy)]
enum Need {
    Read = 4,
    Write = 2,
    WriteSearch = 3,
}

/// What every file operation asks of its caller first: role `need` (reader
/// to look, member to change) and no scope. Returns the caller's realm,
/// where the operation acts.
fn acting(who: &Caller, need: Role) -> Result<&str> {
    who.may(need, "use files")?;
    Ok(who.realm())
}

fn allowed(st: &Stat, who: &Caller, need: Need) -> Result<()> {
    if who.user() == ROOT {
        return Ok(());
    }
    let bits = if st.owner == who.user() {
        (st.mode >> 6) & 7
    } else {
        st.mode & 7
    };
    let need = need as i64;
    if bits & need != need {
        return Err(Error::Denied(format!(
            "{} may not {} {} (owner {}, mode {:o})",
            who.user(),
            match need {
                4 => "read",
                2 => "write",
                _ => "change entries in",
            },
            st.path,
            st.owner,
            st.mode
        )));
    }
    Ok(())
}

fn root_stat() -> Stat {
    Stat {
        path: "/".into(),
        id: String::new(),
        nlink: 1,
        file_type: FileType::Dir,
        storage: Storage::Local,
        owner: ROOT.into(),
        mode: ROOT_DIR_MODE,
        size: 0,
        block_size: 0,
        ctime_us: 0,
        mtime_us: 0,
        atime_us: 0,
    }
}

/// What [`stat_from_row`] reads of `fs_inode i`, as a literal for
/// `concat!`; a lookup by name adds `d.d_name` (column 12) from `directory
/// d` joined by `inode_of_name!`.
macro_rules! inode_columns {
    () => {
        "i.content_type, i.user_name, i.mode, i.f_size, i.block_size, i.ctime_us, \
         i.mtime_us, i.layout, i.in_segments, COALESCE(i.atime_us, i.mtime_us), i.f_id, i.nlink"
    };
}

/// The join from a name to what it names.
macro_rules! inode_of_name {
    () => {
        " FROM directory d JOIN fs_inode i \
          ON i.p_key = d.p_key AND i.realm = d.realm AND i.f_id = d.f_id "
    };
}

/// A row of [`inode_columns`]; the path is `path`, or column 12 when none
/// is given.
fn stat_from_row(r: &Row, path: Option<&str>) -> Result<Stat> {
    Ok(Stat {
        path: match path {
            Some(p) => p.to_string(),
            None => r.get(12)?,
        },
        file_type: FileType::parse(&r.get::<String>(0)?)?,
        owner: r.get(1)?,
        mode: r.get(2)?,
        size: r.get(3)?,
        block_size: r.get(4)?,
        ctime_us: r.get(5)?,
        mtime_us: r.get(6)?,
        atime_us: r.get(9)?,
        storage: match (r.get::<String>(7)?.as_str(), r.get::<i64>(8)?) {
            (_, 1) => Storage::Segments,
            ("parallel", _) => Storage::Parallel,
            _ => Storage::Local,
        },
        id: r.get(10)?,
        nlink: r.get(11)?,
    })
}

fn lookup(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Option<Stat>> {
    if path == "/" {
        return Ok(Some(root_stat()));
    }
    let row = tx.query_opt(
        concat!(
            "SELECT ",
            inode_columns!(),
            ", d.d_name",
            inode_of_name!(),
            "WHERE d.p_key = $1 AND d.realm = $2 AND d.d_name = $3"
        ),
        params![p_key(tx), realm, path],
    )?;
    row.as_ref().map(|r| stat_from_row(r, None)).transpose()
}

/// What `id` is, by id (`label` stands for its path in messages).
fn inode(tx: &mut dyn Tx, realm: &str, id: &str, label: &str) -> Result<Option<Stat>> {
    let row = tx.query_opt(
        concat!(
            "SELECT ",
            inode_columns!(),
            " FROM fs_inode i WHERE i.p_key = $1 AND i.realm = $2 AND i.f_id = $3"
        ),
        params![p_key(tx), realm, id],
    )?;
    row.as_ref()
        .map(|r| stat_from_row(r, Some(label)))
        .transpose()
}

fn must(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Stat> {
    lookup(tx, realm, path)?
        .ok_or_else(|| Error::NotFound(format!("{path}: no such file or directory")))
}

/// The directory `path` goes in, which must exist and let `who` change it.
fn parent_dir(tx: &mut dyn Tx, realm: &str, path: &str, who: &Caller) -> Result<Stat> {
    let parent = parent_of(path);
    let d = lookup(tx, realm, parent)?
        .ok_or_else(|| Error::NotFound(format!("{parent}: no such directory (creating {path})")))?;
    if d.file_type != FileType::Dir {
        return Err(Error::NotADirectory(parent.to_string()));
    }
    allowed(&d, who, Need::WriteSearch)?;
    Ok(d)
}

/// In a sticky directory `d`, only `entry`'s owner, `d`'s owner or root
/// may remove or rename `entry`.
fn sticky_allows(d: &Stat, entry: &Stat, who: &Caller) -> Result<()> {
    if d.mode & STICKY == 0
        || who.user() == ROOT
        || who.user() == entry.owner
        || who.user() == d.owner
    {
        return Ok(());
    }
    Err(Error::Denied(format!(
        "{} may not remove or rename {} in {} (sticky; owner {})",
        who.user(),
        entry.path,
        d.path,
        entry.owner
    )))
}

/// A directory's entries changed: its modification and change times move.
fn touch(tx: &mut dyn Tx, realm: &str, dir: &str, now_us: i64) -> Result<()> {
    if dir != "/" {
        tx.execute(
            "UPDATE fs_inode SET mtime_us = $4, ctime_us = $4 \
             WHERE p_key = $1 AND realm = $2 AND f_id = \
             (SELECT f_id FROM directory WHERE p_key = $1 AND realm = $2 AND d_name = $3)",
            params![p_key(tx), realm, dir, now_us],
        )?;
    }
    Ok(())
}

/// A new id for a file, a directory or a handle: unique across processes
/// (a random seed), restarts (the time) and calls (a counter); at most 48
/// bytes, so a segment named after it fits blockio's 64.
pub(crate) fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static SEED: OnceLock<u32> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as u32
    });
    format!(
        "{seed:08x}{:x}{:x}",
        tabos_store::now_us(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

fn writable(path: &str) -> Result<()> {
    validate_path(path)?;
    if path == "/" {
        return Err(Error::Invalid(
            "the root directory cannot be changed".into(),
        ));
    }
    Ok(())
}

/// How a new file keeps its blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// On the realm's partition, in blocks of this size.
    Local { block_size: i64 },
    /// Spread over partitions by block number, in blocks of this size; `id`
    /// keys the blocks (unique: [`files::Files`] makes one).
    Parallel { block_size: i64, id: String },
}

impl Layout {
    fn check(&self) -> Result<()> {
        let (Layout::Local { block_size: bs } | Layout::Parallel { block_size: bs, .. }) = self;
        if !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(bs) {
            return Err(Error::Invalid(format!(
                "a block size is {BLOCK_BYTES_MIN}..={BLOCK_BYTES_MAX} bytes, not {bs}"
            )));
        }
        if let Layout::Parallel { id, .. } = self {
            if id.is_empty() || id.len() > 64 {
                return Err(Error::Invalid(
                    "a parallel file's id is 1..=64 bytes".into(),
                ));
            }
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn insert_entry(
    tx: &mut dyn Tx,
    realm: &str,
    path: &str,
    t: FileType,
    layout: &Layout,
    who: &Caller,
    mode: i64,
    now_us: i64,
) -> Result<Stat> {
    writable(path)?;
    check_mode(mode)?;
    layout.check()?;
    parent_dir(tx, realm, path, who)?;
    let (block, storage, kind, id) = match (t, layout) {
        (FileType::File, Layout::Local { block_size }) => {
            (*block_size, Storage::Local, "local", new_id())
        }
        (FileType::File, Layout::Parallel { block_size, id }) => {
            (*block_size, Storage::Parallel, "parallel", id.clone())
        }
        _ => (0, Storage::Local, "local", new_id()),
    };
    if lookup(tx, realm, path)?.is_some() {
        return Err(Error::AlreadyExists(format!("{path}: file exists")));
    }
    let pk = p_key(tx);
    tx.execute(
        "INSERT INTO fs_inode (p_key, realm, f_id, content_type, user_name, mode, f_size, \
         layout, block_size, ctime_us, mtime_us, nlink) \
         VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8, $9, $9, 1)",
        params![
            pk,
            realm,
            id.as_str(),
            t.as_str(),
            who.user(),
            mode,
            kind,
            block,
            now_us
        ],
    )?;
    add_name(tx, realm, path, &id)?;
    touch(tx, realm, parent_of(path), now_us)?;
    Ok(Stat {
        path: path.into(),
        id,
        nlink: 1,
        file_type: t,
        storage,
        owner: who.user().to_string(),
        mode,
        size: 0,
        block_size: block,
        ctime_us: now_us,
        mtime_us: now_us,
        atime_us: now_us,
    })
}

/// Adds the name `path` for `id` (whose parent was checked).
fn add_name(tx: &mut dyn Tx, realm: &str, path: &str, id: &str) -> Result<()> {
    let n = tx.execute(
        "INSERT INTO directory (p_key, realm, d_name, parent, f_id) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (p_key, realm, d_name) DO NOTHING",
        params![p_key(tx), realm, path, parent_of(path), id],
    )?;
    if n == 0 {
        return Err(Error::AlreadyExists(format!("{path}: file exists")));
    }
    note(tx, realm, Change::Name(path.to_string()))
}

/// Procedure body: creates an empty localized file of 2 KB blocks
/// (exclusive).
pub fn create_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    mode: i64,
    now_us: i64,
) -> Result<Stat> {
    let layout = Layout::Local {
        block_size: BLOCK_BYTES_LOCAL,
    };
    create_with_tx(tx, who, path, mode, &layout, now_us)
}

/// Procedure body: creates an empty file with `layout` (exclusive).
pub fn create_with_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    mode: i64,
    layout: &Layout,
    now_us: i64,
) -> Result<Stat> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    insert_entry(tx, realm, path, FileType::File, layout, who, mode, now_us)
}

/// Procedure body: creates a directory (exclusive).
pub fn mkdir_tx(tx: &mut dyn Tx, who: &Caller, path: &str, mode: i64, now_us: i64) -> Result<Stat> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    let none = Layout::Local {
        block_size: BLOCK_BYTES_LOCAL,
    };
    insert_entry(tx, realm, path, FileType::Dir, &none, who, mode, now_us)
}

/// Procedure body: an entry's metadata.
pub fn stat_tx(tx: &mut dyn Tx, who: &Caller, path: &str) -> Result<Stat> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    validate_path(path)?;
    must(tx, realm, path)
}

/// Hands a file's parallel blocks or segments to `fs_reclaim` (given back
/// after the commit by [`files::Files::reclaim`]); how many entries it
/// queued.
fn release_data(tx: &mut dyn Tx, realm: &str, st: &Stat, from_offset: i64) -> Result<usize> {
    let pk = p_key(tx);
    match st.storage {
        Storage::Local => {
            Blocks::local(realm, &st.id).delete_from(tx, 0)?;
            Ok(0)
        }
        Storage::Parallel => {
            debug_assert_eq!(from_offset, 0, "parallel blocks are cut in place");
            let id = st.id.as_str();
            tx.execute(
                "INSERT INTO fs_reclaim (p_key, realm, kind, what, store_id) \
                 VALUES ($1, $2, 'parallel', $3, '') ON CONFLICT DO NOTHING",
                params![pk, realm, id],
            )?;
            Ok(1)
        }
        Storage::Segments => {
            let id = st.id.clone();
            // The node of each block store let go of gives it back when told
            // (a file written through one node may be removed through another).
            let stores = tx.query(
                "SELECT DISTINCT store_id FROM fs_extent \
                 WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND file_offset >= $4",
                params![pk, realm, id.as_str(), from_offset],
            )?;
            for r in &stores {
                tx.notify(&files::reclaim_channel(&r.get::<String>(0)?), realm)?;
            }
            let n = tx.execute(
                "INSERT INTO fs_reclaim (p_key, realm, kind, what, store_id) \
                 SELECT p_key, realm, 'segment', segment, store_id FROM fs_extent \
                 WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND file_offset >= $4 \
                 ON CONFLICT DO NOTHING",
                params![pk, realm, id.as_str(), from_offset],
            )?;
            tx.execute(
                "DELETE FROM fs_extent WHERE p_key = $1 AND realm = $2 AND f_id = $3 \
                 AND file_offset >= $4",
                params![pk, realm, id.as_str(), from_offset],
            )?;
            Ok(n as usize)
        }
    }
}

/// Removes the name `st.path`; what it named goes with it when that was
/// its last name and no handle holds it open. Returns how many storage
/// items it queued for reclaim.
fn delete_entry(tx: &mut dyn Tx, realm: &str, st: &Stat, now_us: i64) -> Result<usize> {
    let pk = p_key(tx);
    tx.execute(
        "DELETE FROM directory WHERE p_key = $1 AND realm = $2 AND d_name = $3",
        params![pk, realm, st.path.as_str()],
    )?;
    note(tx, realm, Change::Name(st.path.clone()))?;
    // By id too: a watcher that may not list the directory learns it.
    note(tx, realm, Change::File(st.id.clone()))?;
    touch(tx, realm, parent_of(&st.path), now_us)?;
    if st.file_type == FileType::Dir {
        tx.execute(
            "DELETE FROM fs_inode WHERE p_key = $1 AND realm = $2 AND f_id = $3",
            params![pk, realm, st.id.as_str()],
        )?;
        return Ok(0);
    }
    debug_assert!(st.nlink >= 1, "{} has a name, so a link", st.path);
    tx.execute(
        "UPDATE fs_inode SET nlink = nlink - 1, ctime_us = $4 \
         WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![pk, realm, st.id.as_str(), now_us],
    )?;
    let st = Stat {
        nlink: st.nlink - 1,
        ..st.clone()
    };
    release_if_unused(tx, realm, &st)
}

/// Deletes a file that has no name and no open handle, with its data;
/// returns how many storage items it queued for reclaim (0 when it stays).
fn release_if_unused(tx: &mut dyn Tx, realm: &str, st: &Stat) -> Result<usize> {
    if st.nlink > 0 {
        return Ok(0);
    }
    let pk = p_key(tx);
    let open = tx.query_opt(
        "SELECT handle FROM fs_open WHERE p_key = $1 AND realm = $2 AND f_id = $3 LIMIT 1",
        params![pk, realm, st.id.as_str()],
    )?;
    if open.is_some() {
        return Ok(0);
    }
    let queued = match st.file_type {
        FileType::File => release_data(tx, realm, st, 0)?,
        FileType::Fifo => {
            fifo::remove_tx(tx, realm, &st.id)?;
            0
        }
        FileType::Dir | FileType::Symlink => 0,
    };
    tx.execute(
        "DELETE FROM fs_inode WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![pk, realm, st.id.as_str()],
    )?;
    Ok(queued)
}

/// Procedure body: removes a file (not a directory); returns how many
/// storage items (segments, parallel block sets) wait in `fs_reclaim`.
pub fn unlink_tx(tx: &mut dyn Tx, who: &Caller, path: &str, now_us: i64) -> Result<usize> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    writable(path)?;
    let st = must(tx, realm, path)?;
    if st.file_type == FileType::Dir {
        return Err(Error::IsADirectory(path.to_string(), " (use rmdir)"));
    }
    let d = parent_dir(tx, realm, path, who)?;
    sticky_allows(&d, &st, who)?;
    delete_entry(tx, realm, &st, now_us)
}

fn has_children(tx: &mut dyn Tx, realm: &str, dir: &str) -> Result<bool> {
    Ok(tx
        .query_opt(
            "SELECT d_name FROM directory WHERE p_key = $1 AND realm = $2 AND parent = $3 LIMIT 1",
            params![p_key(tx), realm, dir],
        )?
        .is_some())
}

/// Procedure body: removes an empty directory.
pub fn rmdir_tx(tx: &mut dyn Tx, who: &Caller, path: &str, now_us: i64) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    writable(path)?;
    let st = must(tx, realm, path)?;
    if st.file_type != FileType::Dir {
        return Err(Error::NotADirectory(path.to_string()));
    }
    let d = parent_dir(tx, realm, path, who)?;
    sticky_allows(&d, &st, who)?;
    if has_children(tx, realm, path)? {
        return Err(Error::NotEmpty(path.to_string()));
    }
    delete_entry(tx, realm, &st, now_us).map(|_| ())
}

/// Procedure body: renames `from` to `to` atomically, with everything under
/// it. An existing file at `to` is replaced by a file; an existing empty
/// directory by a directory. Returns how many storage items of a replaced
/// file wait in `fs_reclaim`.
pub fn rename_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    from: &str,
    to: &str,
    now_us: i64,
) -> Result<usize> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    writable(from)?;
    writable(to)?;
    let st = must(tx, realm, from)?;
    if from == to {
        return Ok(0);
    }
    if crate::names::is_within(to, from) {
        return Err(Error::Invalid(format!(
            "cannot move {from} into itself ({to})"
        )));
    }
    let from_dir = parent_dir(tx, realm, from, who)?;
    sticky_allows(&from_dir, &st, who)?;
    let to_dir = parent_dir(tx, realm, to, who)?;
    let mut queued = 0;
    if let Some(old) = lookup(tx, realm, to)? {
        if old.id == st.id {
            // Two names of one file: POSIX leaves both.
            return Ok(0);
        }
        sticky_allows(&to_dir, &old, who)?;
        let (from_dir, to_dir) = (
            st.file_type == FileType::Dir,
            old.file_type == FileType::Dir,
        );
        match (from_dir, to_dir) {
            (false, false) => {}
            (true, true) if !has_children(tx, realm, to)? => {}
            (true, true) => return Err(Error::NotEmpty(to.to_string())),
            (false, true) => return Err(Error::IsADirectory(to.to_string(), "")),
            (true, false) => return Err(Error::NotADirectory(to.to_string())),
        }
        queued = delete_entry(tx, realm, &old, now_us)?;
    }
    let pk = p_key(tx);
    let (lo, hi) = subtree_range(from);
    let cut = from.len() as i64 + 1;
    tx.execute(
        "UPDATE directory SET d_name = $4 || substr(d_name, $6), parent = $4 || substr(parent, $6) \
         WHERE p_key = $1 AND realm = $2 AND d_name >= $3 AND d_name < $5",
        params![pk, realm, lo.as_str(), to, hi.as_str(), cut],
    )?;
    tx.execute(
        "UPDATE directory SET d_name = $4, parent = $5 \
         WHERE p_key = $1 AND realm = $2 AND d_name = $3",
        params![pk, realm, from, to, parent_of(to)],
    )?;
    tx.execute(
        "UPDATE fs_inode SET ctime_us = $4 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![pk, realm, st.id.as_str(), now_us],
    )?;
    note(tx, realm, Change::Name(from.to_string()))?;
    note(tx, realm, Change::Name(to.to_string()))?;
    note(tx, realm, Change::File(st.id.clone()))?;
    touch(tx, realm, parent_of(from), now_us)?;
    touch(tx, realm, parent_of(to), now_us)?;
    Ok(queued)
}

/// Procedure body: a directory's entries by name (at most [`READDIR_MAX`];
/// the flag says whether there were more).
pub fn readdir_tx(tx: &mut dyn Tx, who: &Caller, dir: &str) -> Result<(Vec<Stat>, bool)> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    validate_path(dir)?;
    let d = must(tx, realm, dir)?;
    if d.file_type != FileType::Dir {
        return Err(Error::NotADirectory(dir.to_string()));
    }
    allowed(&d, who, Need::Read)?;
    const LIST: &str = concat!(
        "SELECT ",
        inode_columns!(),
        ", d.d_name",
        inode_of_name!(),
        "WHERE d.p_key = $1 AND d.realm = $2 AND d.parent = $3 ORDER BY d.d_name LIMIT 10001"
    );
    debug_assert!(LIST.ends_with(&format!("LIMIT {}", READDIR_MAX + 1)));
    let rows = tx.query(LIST, params![p_key(tx), realm, dir])?;
    let mut out = rows
        .iter()
        .map(|r| stat_from_row(r, None))
        .collect::<Result<Vec<_>>>()?;
    let more = out.len() > READDIR_MAX;
    out.truncate(READDIR_MAX);
    Ok((out, more))
}

fn a_file(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Stat> {
    let st = must(tx, realm, path)?;
    is_file(st)
}

fn is_file(st: Stat) -> Result<Stat> {
    match st.file_type {
        FileType::File => Ok(st),
        FileType::Dir => Err(Error::IsADirectory(st.path, "")),
        FileType::Symlink => Err(Error::Invalid(format!(
            "{} is a symbolic link (the API does not follow links; read its target)",
            st.path
        ))),
        FileType::Fifo => Err(Error::Invalid(format!(
            "{} is a named pipe (it has no blocks to truncate, copy or place)",
            st.path
        ))),
    }
}

/// Refuses a file whose data is not in `localized_file`: the single-
/// transaction read, write and truncate serve only those.
fn must_be_local(st: &Stat) -> Result<()> {
    if st.storage != Storage::Local {
        return Err(Error::Invalid(format!(
            "{} keeps its data {}: read and write it through fs::files::Files",
            st.path,
            match st.storage {
                Storage::Parallel => "on every partition",
                _ => "in block segments",
            }
        )));
    }
    Ok(())
}

/// The block rows of one file: `localized_file` or `parallel_file` (on
/// whichever partition the transaction is on), keyed by the file's id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Blocks<'a> {
    sql: &'static BlockSql,
    pub realm: &'a str,
    pub key: &'a str,
}

/// The statements over one block table, written out at compile time (a
/// kernel statement is a `&'static str`: see `tabos_store::Tx`).
#[derive(Debug)]
struct BlockSql {
    at: &'static str,
    range: &'static str,
    delete_from: &'static str,
    put: &'static str,
    cut: &'static str,
}

macro_rules! block_sql {
    ($table:literal) => {
        BlockSql {
            at: concat!(
                "SELECT bytes FROM ",
                $table,
                " WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND block_no = $4"
            ),
            range: concat!(
                "SELECT block_no, bytes FROM ",
                $table,
                " WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND block_no >= $4 \
                 AND block_no <= $5 ORDER BY block_no"
            ),
            delete_from: concat!(
                "DELETE FROM ",
                $table,
                " WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND block_no >= $4"
            ),
            put: concat!(
                "INSERT INTO ",
                $table,
                " (p_key, realm, f_id, block_no, f_owner, bytes) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (p_key, realm, f_id, block_no) \
                 DO UPDATE SET bytes = excluded.bytes"
            ),
            cut: concat!(
                "UPDATE ",
                $table,
                " SET bytes = $5 WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND block_no = $4"
            ),
        }
    };
}

static LOCALIZED_SQL: BlockSql = block_sql!("localized_file");
static PARALLEL_SQL: BlockSql = block_sql!("parallel_file");

impl<'a> Blocks<'a> {
    pub(crate) fn local(realm: &'a str, id: &'a str) -> Blocks<'a> {
        Blocks {
            sql: &LOCALIZED_SQL,
            realm,
            key: id,
        }
    }

    pub(crate) fn parallel(realm: &'a str, id: &'a str) -> Blocks<'a> {
        Blocks {
            sql: &PARALLEL_SQL,
            realm,
            key: id,
        }
    }

    /// A stored block (`None`: a hole).
    fn at(&self, tx: &mut dyn Tx, no: i64) -> Result<Option<Vec<u8>>> {
        tx.query_opt(self.sql.at, params![p_key(tx), self.realm, self.key, no])?
            .map(|r| r.get(0))
            .transpose()
            .map_err(Error::from)
    }

    /// Stored blocks numbered `first..=last`, in order.
    pub(crate) fn range(
        &self,
        tx: &mut dyn Tx,
        first: i64,
        last: i64,
    ) -> Result<Vec<(i64, Vec<u8>)>> {
        let rows = tx.query(
            self.sql.range,
            params![p_key(tx), self.realm, self.key, first, last],
        )?;
        rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
    }

    fn delete_from(&self, tx: &mut dyn Tx, first: i64) -> Result<()> {
        tx.execute(
            self.sql.delete_from,
            params![p_key(tx), self.realm, self.key, first],
        )?;
        Ok(())
    }

    /// Writes `data` at `offset` into the blocks `mine` accepts, for a file
    /// whose committed size is `old_size` and whose new size is at least
    /// `offset + data.len()`. Bytes a block holds past `old_size` are
    /// dropped before the merge: they can only be a failed write's (a
    /// parallel write whose size never committed), never the file's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put(
        &self,
        tx: &mut dyn Tx,
        owner: &str,
        bs: i64,
        old_size: i64,
        new_size: i64,
        offset: i64,
        data: &[u8],
        mine: impl Fn(i64) -> bool,
    ) -> Result<()> {
        let end = offset + data.len() as i64;
        debug_assert!(new_size >= end && bs > 0);
        let pk = p_key(tx);
        let mut at = offset;
        while at < end {
            let no = at / bs;
            let block_start = no * bs;
            let within = (at - block_start) as usize;
            let n = ((bs - (at - block_start)).min(end - at)) as usize;
            if mine(no) {
                let src = &data[(at - offset) as usize..(at - offset) as usize + n];
                // Bytes this block holds after the write: up to the file's end.
                let keep_to = (new_size - block_start).min(bs) as usize;
                let block = if within == 0 && n == keep_to {
                    src.to_vec()
                } else {
                    let mut b = if block_start < old_size {
                        self.at(tx, no)?.unwrap_or_default()
                    } else {
                        Vec::new()
                    };
                    b.truncate((old_size - block_start).clamp(0, bs) as usize);
                    b.resize(keep_to.max(within + n), 0);
                    b[within..within + n].copy_from_slice(src);
                    b
                };
                tx.execute(
                    self.sql.put,
                    params![pk, self.realm, self.key, no, owner, block],
                )?;
            }
            at += n as i64;
        }
        Ok(())
    }

    /// Drops every byte at or past `size`: whole blocks go, the block
    /// holding `size` is cut.
    pub(crate) fn cut(&self, tx: &mut dyn Tx, bs: i64, size: i64) -> Result<()> {
        self.delete_from(tx, (size + bs - 1) / bs)?;
        if size % bs != 0 {
            let no = size / bs;
            if let Some(mut b) = self.at(tx, no)? {
                if b.len() as i64 > size - no * bs {
                    b.truncate((size - no * bs) as usize);
                    tx.execute(
                        self.sql.cut,
                        params![p_key(tx), self.realm, self.key, no, b],
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Copies the parts of `blocks` (block number, bytes) that fall in
/// `[offset, offset + out.len())` into `out`; what no block covers stays
/// zero (a hole).
pub(crate) fn assemble(out: &mut [u8], offset: i64, bs: i64, blocks: &[(i64, Vec<u8>)]) {
    let end = offset + out.len() as i64;
    for (no, bytes) in blocks {
        let block_start = no * bs;
        // Overlap of [block_start, block_start + len) with [offset, end).
        let lo = block_start.max(offset);
        let hi = (block_start + bytes.len() as i64).min(end);
        if lo < hi {
            out[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&bytes[(lo - block_start) as usize..(hi - block_start) as usize]);
        }
    }
}

/// Records a file's new size and modification time (a data change: the
/// version moves on).
/// Every change of a file's size comes here, so the realm's storage quota
/// is checked here (a file's size is what it stores, holes included).
fn set_size(tx: &mut dyn Tx, realm: &str, id: &str, size: i64, now_us: i64) -> Result<()> {
    crate::realms::metered(tx, realm, |tx| {
        tx.execute(
            "UPDATE fs_inode SET f_size = $4, mtime_us = $5, ctime_us = $5, \
             f_version = f_version + 1 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
            params![p_key(tx), realm, id, size, now_us],
        )?;
        note(tx, realm, Change::File(id.to_string()))
    })
}

fn check_read(offset: i64, len: usize) -> Result<()> {
    if offset < 0 || len > IO_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "a read is at offset >= 0 and of at most {IO_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// The end of a write, checked.
fn check_write(path: &str, offset: i64, len: usize) -> Result<i64> {
    if offset < 0 || len > IO_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "a write is at offset >= 0 and of at most {IO_BYTES_MAX} bytes"
        )));
    }
    let end = offset.saturating_add(len as i64);
    if end > FILE_BYTES_MAX {
        return Err(Error::Full(format!(
            "{path}: a file is at most {FILE_BYTES_MAX} bytes"
        )));
    }
    Ok(end)
}

fn check_size(size: i64) -> Result<()> {
    if !(0..=FILE_BYTES_MAX).contains(&size) {
        return Err(Error::Invalid(format!(
            "a size is 0..={FILE_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// A file event's provenance detail (`proc_event.detail` of `fs_read` and
/// `fs_write`): `PATH @OFFSET +BYTES`, what the README's queries split.
pub fn event_detail(path: &str, offset: i64, bytes: usize) -> String {
    format!("{path} @{offset} +{bytes}")
}

/// Procedure body: up to `len` bytes at `offset` of a localized file (fewer
/// at the end of the file, none past it); holes read as zeros.
pub fn read_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    offset: i64,
    len: usize,
) -> Result<Vec<u8>> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    validate_path(path)?;
    check_read(offset, len)?;
    let st = a_file(tx, realm, path)?;
    allowed(&st, who, Need::Read)?;
    read_local(tx, realm, &st, offset, len)
}

/// The read of a localized file whose permission was checked.
fn read_local(tx: &mut dyn Tx, realm: &str, st: &Stat, offset: i64, len: usize) -> Result<Vec<u8>> {
    must_be_local(st)?;
    let end = st.size.min(offset.saturating_add(len as i64));
    if end <= offset {
        return Ok(Vec::new());
    }
    let bs = st.block_size;
    let blocks = Blocks::local(realm, &st.id).range(tx, offset / bs, (end - 1) / bs)?;
    let mut out = vec![0u8; (end - offset) as usize];
    assemble(&mut out, offset, bs, &blocks);
    Ok(out)
}

/// Procedure body: writes `data` at `offset` of a localized file (past the
/// end: the gap is a hole); returns the file's new size.
pub fn write_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    offset: i64,
    data: &[u8],
    now_us: i64,
) -> Result<i64> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    validate_path(path)?;
    check_write(path, offset, data.len())?;
    let st = a_file(tx, realm, path)?;
    allowed(&st, who, Need::Write)?;
    write_local(tx, realm, &st, offset, data, now_us)
}

/// The write to a localized file whose permission was checked.
fn write_local(
    tx: &mut dyn Tx,
    realm: &str,
    st: &Stat,
    offset: i64,
    data: &[u8],
    now_us: i64,
) -> Result<i64> {
    must_be_local(st)?;
    let size = st.size.max(offset + data.len() as i64);
    Blocks::local(realm, &st.id).put(
        tx,
        &st.owner,
        st.block_size,
        st.size,
        size,
        offset,
        data,
        |_| true,
    )?;
    set_size(tx, realm, &st.id, size, now_us)?;
    Ok(size)
}

/// Procedure body: sets a localized file's size; bytes past a shrink are
/// gone, a grow adds a hole.
pub fn truncate_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    size: i64,
    now_us: i64,
) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    validate_path(path)?;
    check_size(size)?;
    let st = a_file(tx, realm, path)?;
    allowed(&st, who, Need::Write)?;
    must_be_local(&st)?;
    if size < st.size {
        Blocks::local(realm, &st.id).cut(tx, st.block_size, size)?;
    }
    set_size(tx, realm, &st.id, size, now_us)
}

/// Procedure body: changes an entry's mode (its owner or root only).
pub fn chmod_tx(tx: &mut dyn Tx, who: &Caller, path: &str, mode: i64, now_us: i64) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    writable(path)?;
    check_mode(mode)?;
    let st = must(tx, realm, path)?;
    if who.user() != ROOT && who.user() != st.owner {
        return Err(Error::Denied(format!(
            "only {} (the owner) or root may chmod {path}",
            st.owner
        )));
    }
    tx.execute(
        "UPDATE fs_inode SET mode = $4, ctime_us = $5 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, st.id.as_str(), mode, now_us],
    )?;
    note(tx, realm, Change::File(st.id))
}

/// Earliest and latest modification times an entry may be given (µs
/// since the epoch): 1 January 1900 to 1 January 3000, as tar and make
/// meet them.
pub const MTIME_MIN_US: i64 = -2_208_988_800_000_000;
pub const MTIME_MAX_US: i64 = 32_503_680_000_000_000;

/// What utimensat sets one of an entry's times to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// Left as it is (UTIME_OMIT).
    Omit,
    /// The time of the change (UTIME_NOW).
    Now,
    /// This time (µs since the epoch).
    At(i64),
}

/// Procedure body: sets an entry's access and modification times
/// (utimensat): to given times by its owner or root; to now, also by
/// whoever may write it — as Linux allows.
pub fn set_times_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    target: impl Into<FileRef>,
    atime: SetTime,
    mtime: SetTime,
    now_us: i64,
) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    let target = target.into();
    if let FileRef::Path(p) = &target {
        writable(p)?;
    }
    let st = resolve(tx, realm, who, &target, None)?;
    let path = st.path.as_str();
    if (atime, mtime) == (SetTime::Omit, SetTime::Omit) {
        return Ok(()); // nothing changes, not even the change time
    }
    let owner = who.user() == ROOT || who.user() == st.owner;
    let explicit = matches!(atime, SetTime::At(_)) || matches!(mtime, SetTime::At(_));
    if !owner {
        if explicit {
            return Err(Error::Denied(format!(
                "only {} (the owner) or root may set the times of {path}",
                st.owner
            )));
        }
        allowed(&st, who, Need::Write)?;
    }
    let value = |t: SetTime, now: i64, was: i64| -> Result<i64> {
        let t = match t {
            SetTime::Omit => return Ok(was),
            SetTime::Now => now,
            SetTime::At(t) => t,
        };
        if !(MTIME_MIN_US..=MTIME_MAX_US).contains(&t) {
            return Err(Error::Invalid(format!(
                "a time is within {MTIME_MIN_US}..={MTIME_MAX_US} µs since the epoch"
            )));
        }
        Ok(t)
    };
    let (a, m) = (
        value(atime, now_us, st.atime_us)?,
        value(mtime, now_us, st.mtime_us)?,
    );
    tx.execute(
        "UPDATE fs_inode SET atime_us = $4, mtime_us = $5, ctime_us = $6 \
         WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, st.id.as_str(), a, m, now_us],
    )?;
    note(tx, realm, Change::File(st.id))
}

/// Procedure body: gives an entry to another user (root only).
pub fn chown_tx(tx: &mut dyn Tx, who: &Caller, path: &str, owner: &str, now_us: i64) -> Result<()> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    writable(path)?;
    validate_user(owner)?;
    let st = must(tx, realm, path)?;
    if who.user() != ROOT {
        return Err(Error::Denied(format!("only root may chown {path}")));
    }
    let pk = p_key(tx);
    tx.execute(
        "UPDATE fs_inode SET user_name = $4, ctime_us = $5 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![pk, realm, st.id.as_str(), owner, now_us],
    )?;
    tx.execute(
        "UPDATE localized_file SET f_owner = $4 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![pk, realm, st.id.as_str(), owner],
    )?;
    note(tx, realm, Change::File(st.id))
}

/// Procedure body: gives the file (or symbolic link) at `existing` the
/// further name `path` (a hard link). Directories have one name.
pub fn link_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    existing: &str,
    path: &str,
    now_us: i64,
) -> Result<Stat> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    writable(existing)?;
    writable(path)?;
    let st = must(tx, realm, existing)?;
    if st.file_type == FileType::Dir {
        return Err(Error::Denied(format!(
            "{existing} is a directory: a directory has one name"
        )));
    }
    if st.nlink >= LINKS_MAX {
        return Err(Error::Full(format!(
            "{existing} has {LINKS_MAX} names, the most a file may have"
        )));
    }
    parent_dir(tx, realm, path, who)?;
    add_name(tx, realm, path, &st.id)?;
    touch(tx, realm, parent_of(path), now_us)?;
    tx.execute(
        "UPDATE fs_inode SET nlink = nlink + 1, ctime_us = $4 \
         WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, st.id.as_str(), now_us],
    )?;
    note(tx, realm, Change::File(st.id.clone()))?;
    Ok(Stat {
        path: path.to_string(),
        nlink: st.nlink + 1,
        ctime_us: now_us,
        ..st
    })
}

/// Procedure body: creates the symbolic link `path` to `target` (any text
/// of 1..=[`SYMLINK_BYTES_MAX`] bytes without NUL, stored as given and
/// never resolved here).
pub fn symlink_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    target: &str,
    path: &str,
    now_us: i64,
) -> Result<Stat> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    if target.is_empty() || target.len() > SYMLINK_BYTES_MAX || target.contains('\0') {
        return Err(Error::Invalid(format!(
            "a symbolic link's target is 1..={SYMLINK_BYTES_MAX} bytes without NUL"
        )));
    }
    let none = Layout::Local {
        block_size: BLOCK_BYTES_LOCAL,
    };
    let st = insert_entry(
        tx,
        realm,
        path,
        FileType::Symlink,
        &none,
        who,
        MODE_SYMLINK,
        now_us,
    )?;
    let size = target.len() as i64;
    crate::realms::metered(tx, realm, |tx| {
        tx.execute(
            "UPDATE fs_inode SET target = $4, f_size = $5 \
             WHERE p_key = $1 AND realm = $2 AND f_id = $3",
            params![p_key(tx), realm, st.id.as_str(), target, size],
        )?;
        Ok(())
    })?;
    Ok(Stat { size, ..st })
}

/// Procedure body: the target of the symbolic link `path`.
pub fn readlink_tx(tx: &mut dyn Tx, who: &Caller, path: &str) -> Result<String> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    validate_path(path)?;
    let st = must(tx, realm, path)?;
    if st.file_type != FileType::Symlink {
        return Err(Error::Invalid(format!("{path} is not a symbolic link")));
    }
    Ok(tx.query_scalar(
        "SELECT target FROM fs_inode WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, st.id.as_str()],
    )?)
}

/// An open file's handle: what [`open_tx`] returns and [`FileRef::Handle`]
/// names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Handle(String);

impl Handle {
    /// Longest handle, in bytes.
    pub const BYTES_MAX: usize = 64;

    /// A handle as a client gives it back.
    pub fn parse(s: &str) -> Result<Handle> {
        if s.is_empty() || s.len() > Self::BYTES_MAX || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::Invalid(format!("{s:?} is no file handle")));
        }
        Ok(Handle(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What an open handle allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl Access {
    /// The permission bits it needs (read 4, write 2), as `fs_open` keeps
    /// them.
    fn bits(self) -> i64 {
        match self {
            Access::Read => 4,
            Access::Write => 2,
            Access::ReadWrite => 6,
        }
    }

    /// As an `fs_open` event's detail says it: `r`, `w` or `rw`.
    fn word(self) -> &'static str {
        match self {
            Access::Read => "r",
            Access::Write => "w",
            Access::ReadWrite => "rw",
        }
    }
}

/// The longest program a [`HostCaller`] may name, in bytes (Linux's
/// `PATH_MAX` is 4,096; an executable's path past this is cut by the
/// client, not refused by the node).
pub const HOST_PROGRAM_BYTES_MAX: usize = 256;

/// The Linux process of the client's host a client opens a file for, when
/// that is not the client itself: `tabos mount` names the process behind
/// each FUSE open. The client's word, recorded in the open's provenance
/// event ([`open_detail`]); it widens nothing — the open is checked as the
/// credential's, whoever the client says it acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCaller {
    pid: u32,
    uid: u32,
    program: String,
}

impl HostCaller {
    /// A process `pid` (not 0) of user `uid` running `program` (its
    /// executable's path: 1..=[`HOST_PROGRAM_BYTES_MAX`] bytes, no control
    /// characters — the detail is one line a query splits).
    pub fn new(pid: u32, uid: u32, program: &str) -> Result<HostCaller> {
        if pid == 0 {
            return Err(Error::Invalid(
                "a host caller's pid is not 0 (the client's host has no such process)".into(),
            ));
        }
        if program.is_empty() || program.len() > HOST_PROGRAM_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "a host caller's program is 1..={HOST_PROGRAM_BYTES_MAX} bytes, not {}",
                program.len()
            )));
        }
        if program.chars().any(char::is_control) {
            return Err(Error::Invalid(
                "a host caller's program has no control characters".into(),
            ));
        }
        Ok(HostCaller {
            pid,
            uid,
            program: program.to_string(),
        })
    }
}

/// An `fs_open` event's provenance detail: `PATH @ACCESS` (`r`, `w` or
/// `rw`), then ` by pid PID uid UID PROGRAM` when the client named the
/// host process it opened for — so `split_part(detail, ' @', 1)` is the
/// path for every file event, and `split_part(detail, ' by ', 2)` the
/// Linux process.
pub fn open_detail(path: &str, access: Access, host: Option<&HostCaller>) -> String {
    match host {
        None => format!("{path} @{}", access.word()),
        Some(h) => format!(
            "{path} @{} by pid {} uid {} {}",
            access.word(),
            h.pid,
            h.uid,
            h.program
        ),
    }
}

/// Which file an operation is on: a name, or an open handle (which reaches
/// the file after its names are gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRef {
    Path(String),
    Handle(Handle),
}

impl From<&str> for FileRef {
    fn from(p: &str) -> FileRef {
        FileRef::Path(p.to_string())
    }
}

impl From<&String> for FileRef {
    fn from(p: &String) -> FileRef {
        FileRef::Path(p.clone())
    }
}

impl From<String> for FileRef {
    fn from(p: String) -> FileRef {
        FileRef::Path(p)
    }
}

impl From<Handle> for FileRef {
    fn from(h: Handle) -> FileRef {
        FileRef::Handle(h)
    }
}

impl std::fmt::Display for FileRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileRef::Path(p) => f.write_str(p),
            FileRef::Handle(h) => write!(f, "open file {}", h.0),
        }
    }
}

impl FileRef {
    /// Checked before anything is looked up.
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            FileRef::Path(p) => validate_path(p),
            FileRef::Handle(_) => Ok(()),
        }
    }
}

/// The file `target` names, for `who` to `need`: by name, checked against
/// its mode; by handle, the handle must be `who`'s and opened for `need`
/// (its mode was checked when it was opened, as POSIX has it).
fn resolve(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    target: &FileRef,
    need: Option<Need>,
) -> Result<Stat> {
    match target {
        FileRef::Path(p) => {
            let st = must(tx, realm, p)?;
            if let Some(need) = need {
                allowed(&st, who, need)?;
            }
            Ok(st)
        }
        FileRef::Handle(h) => {
            let row = tx.query_opt(
                "SELECT f_id, user_name, access FROM fs_open \
                 WHERE p_key = $1 AND realm = $2 AND handle = $3",
                params![p_key(tx), realm, h.as_str()],
            )?;
            let Some(r) = row else {
                return Err(Error::NotFound(format!(
                    "{target}: not open (closed, or its session ended)"
                )));
            };
            let (id, user, access): (String, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if user != who.user() {
                return Err(Error::Denied(format!("{target} is not {}'s", who.user())));
            }
            if let Some(need) = need {
                let need = need as i64 & 6;
                if access & need != need {
                    return Err(Error::Denied(format!(
                        "{target} was not opened for {}",
                        if need & 2 != 0 { "writing" } else { "reading" }
                    )));
                }
            }
            inode(tx, realm, &id, &target.to_string())?
                .ok_or_else(|| Error::NotFound(format!("{target}: gone")))
        }
    }
}

/// Procedure body: opens the file at `path` for `access` on `who`'s
/// `session` (its mode is checked now, not at each read or write). The
/// handle keeps the file after its last name is removed, until
/// [`close_tx`] or the end of the session. With `create` (a mode), the
/// file is created first (exclusive, a localized file) and opened without
/// checking that mode — as open(2) with O_CREAT lets a creator write a
/// file it makes read-only.
///
/// The open is a provenance event, `fs_open` ([`open_detail`], naming
/// `host` when the client opens for a process of its host), committed with
/// it: a proc's always, a client's when its realm records clients — so a
/// read the kernel's page cache answers behind a mount, which never
/// reaches the node, is still known by the open that let it happen.
#[allow(clippy::too_many_arguments)] // open(2)'s own, and who it is for
pub fn open_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    access: Access,
    session: &str,
    create: Option<i64>,
    host: Option<&HostCaller>,
    now_us: i64,
) -> Result<(Handle, Stat)> {
    // A reader may open to read; writing or creating is a member's.
    let realm = acting(
        who,
        if access == Access::Read && create.is_none() {
            Role::Reader
        } else {
            Role::Member
        },
    )?;
    validate_realm(realm)?;
    validate_path(path)?;
    crate::names::own_session_tx(tx, who, session)?;
    let st = match create {
        Some(mode) => {
            let layout = Layout::Local {
                block_size: BLOCK_BYTES_LOCAL,
            };
            insert_entry(tx, realm, path, FileType::File, &layout, who, mode, now_us)?
        }
        None => {
            let st = must(tx, realm, path)?;
            let st = if st.file_type == FileType::Fifo {
                st
            } else {
                is_file(st)?
            };
            if matches!(access, Access::Read | Access::ReadWrite) {
                allowed(&st, who, Need::Read)?;
            }
            if matches!(access, Access::Write | Access::ReadWrite) {
                allowed(&st, who, Need::Write)?;
            }
            st
        }
    };
    let pk = p_key(tx);
    let held: i64 = tx.query_scalar(
        "SELECT count(*) FROM fs_open WHERE p_key = $1 AND realm = $2 AND session = $3",
        params![pk, realm, session],
    )?;
    if held >= HANDLES_PER_SESSION_MAX {
        return Err(Error::Full(format!(
            "session {session} holds {HANDLES_PER_SESSION_MAX} open files, the most one may"
        )));
    }
    let mark = match st.file_type {
        FileType::Fifo => Some(fifo::opened_tx(tx, realm, &st.id, st.size, access)?),
        _ => None,
    };
    let handle = Handle(new_id());
    tx.execute(
        "INSERT INTO fs_open (p_key, realm, handle, f_id, user_name, session, access, opened_us, \
         fifo_mark) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        params![
            pk,
            realm,
            handle.as_str(),
            st.id.as_str(),
            who.user(),
            session,
            access.bits(),
            now_us,
            mark
        ],
    )?;
    let actor = who.actor(who.pid().cloned());
    actor.check_tx(tx, realm)?;
    actor.note_tx(
        tx,
        realm,
        "fs_open",
        &open_detail(&st.path, access, host),
        now_us,
    )?;
    Ok((handle, st))
}

/// Procedure body: closes `who`'s `handle`; a file with no name left goes
/// with its last handle. Returns how many storage items wait in
/// `fs_reclaim`.
pub fn close_tx(tx: &mut dyn Tx, who: &Caller, handle: &Handle) -> Result<usize> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    let target = FileRef::Handle(handle.clone());
    let st = resolve(tx, realm, who, &target, None)?;
    tx.execute(
        "DELETE FROM fs_open WHERE p_key = $1 AND realm = $2 AND handle = $3",
        params![p_key(tx), realm, handle.as_str()],
    )?;
    if st.file_type == FileType::Fifo {
        fifo::closed_tx(tx, realm, &st.id)?;
    }
    release_if_unused(tx, realm, &st)
}

/// Procedure body: drops the handles of `realm`'s ended `session` (for
/// whoever ends sessions: the session reaper, a close). Returns how many
/// storage items wait in `fs_reclaim`.
pub fn session_ended_tx(tx: &mut dyn Tx, realm: &str, session: &str) -> Result<usize> {
    let pk = p_key(tx);
    let rows = tx.query(
        "SELECT DISTINCT f_id FROM fs_open WHERE p_key = $1 AND realm = $2 AND session = $3",
        params![pk, realm, session],
    )?;
    let ids = rows
        .iter()
        .map(|r| r.get::<String>(0))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    tx.execute(
        "DELETE FROM fs_open WHERE p_key = $1 AND realm = $2 AND session = $3",
        params![pk, realm, session],
    )?;
    let mut queued = 0;
    for id in ids {
        if let Some(st) = inode(tx, realm, &id, &id)? {
            if st.file_type == FileType::Fifo {
                fifo::closed_tx(tx, realm, &st.id)?;
            }
            queued += release_if_unused(tx, realm, &st)?;
        }
    }
    Ok(queued)
}

/// Procedure body, when a node starts: drops the partition's handles whose
/// session is gone or lapsed by `now_us` (its reaper ends it soon: a
/// crashed node's clients' sessions lapse while it is down) and deletes
/// the files without a name that no handle holds (also what a crash
/// between a session's end and its handles' left). Returns the realms
/// whose storage now waits in `fs_reclaim`.
pub fn sweep_tx(tx: &mut dyn Tx, now_us: i64) -> Result<Vec<String>> {
    let pk = p_key(tx);
    // The named pipes whose ends go: their waiters (on any node) look again.
    let pipes = tx.query(
        "SELECT DISTINCT o.realm, o.f_id FROM fs_open o JOIN fs_fifo f \
         ON f.p_key = o.p_key AND f.realm = o.realm AND f.f_id = o.f_id \
         WHERE o.p_key = $1 AND NOT EXISTS (SELECT 1 FROM name_session s \
         WHERE s.p_key = o.p_key AND s.realm = o.realm \
         AND s.session = o.session AND s.expires_us > $2)",
        params![pk, now_us],
    )?;
    for r in pipes.iter() {
        let (realm, id): (String, String) = (r.get(0)?, r.get(1)?);
        fifo::closed_tx(tx, &realm, &id)?;
    }
    tx.execute(
        "DELETE FROM fs_open WHERE p_key = $1 AND NOT EXISTS (SELECT 1 FROM name_session s \
         WHERE s.p_key = fs_open.p_key AND s.realm = fs_open.realm \
         AND s.session = fs_open.session AND s.expires_us > $2)",
        params![pk, now_us],
    )?;
    let rows = tx.query(
        "SELECT realm, f_id FROM fs_inode WHERE p_key = $1 AND nlink = 0",
        params![pk],
    )?;
    let mut realms = Vec::new();
    for r in rows.iter() {
        let (realm, id): (String, String) = (r.get(0)?, r.get(1)?);
        if let Some(st) = inode(tx, &realm, &id, &id)? {
            if release_if_unused(tx, &realm, &st)? > 0 && !realms.contains(&realm) {
                realms.push(realm);
            }
        }
    }
    Ok(realms)
}

/// Procedure body: the metadata of the file `target` names (by handle:
/// also after its last name went).
pub fn stat_ref_tx(tx: &mut dyn Tx, who: &Caller, target: &FileRef) -> Result<Stat> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    target.check()?;
    resolve(tx, realm, who, target, None)
}

/// Procedure body: how many files, of how many bytes, are under `path` (or
/// are `path`), optionally only `owner`'s and only those of at least
/// `min_size` bytes — one query (DBOS Table 2).
pub fn du_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    owner: Option<&str>,
    min_size: i64,
) -> Result<(i64, i64)> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    validate_path(path)?;
    let (lo, hi) = subtree_range(path);
    let r = tx.query_one(
        concat!(
            "SELECT count(*), coalesce(sum(i.f_size), 0)",
            inode_of_name!(),
            "WHERE d.p_key = $1 AND d.realm = $2 AND i.content_type = 'file' \
             AND (d.d_name = $3 OR (d.d_name >= $4 AND d.d_name < $5)) \
             AND ($6 = '' OR i.user_name = $6) AND i.f_size >= $7"
        ),
        params![
            p_key(tx),
            realm,
            path,
            lo.as_str(),
            hi.as_str(),
            owner.unwrap_or(""),
            min_size
        ],
    )?;
    Ok((r.get(0)?, r.get(1)?))
}

/// Procedure body: deletes `realm`'s filesystem — its files' metadata and
/// block rows, with their segments and parallel blocks queued in
/// `fs_reclaim` (given back after the commit by
/// [`files::Files::reclaim`]) — for the realm's removal
/// ([`crate::teardown`]). Returns the rows deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    let pk = p_key(tx);
    tx.execute(
        "INSERT INTO fs_reclaim (p_key, realm, kind, what, store_id) \
         SELECT p_key, realm, 'parallel', f_id, '' FROM fs_inode \
         WHERE p_key = $1 AND realm = $2 AND content_type = 'file' AND layout = 'parallel' \
         AND in_segments = 0 ON CONFLICT DO NOTHING",
        params![pk, realm],
    )?;
    tx.execute(
        "INSERT INTO fs_reclaim (p_key, realm, kind, what, store_id) \
         SELECT p_key, realm, 'segment', segment, store_id FROM fs_extent \
         WHERE p_key = $1 AND realm = $2 ON CONFLICT DO NOTHING",
        params![pk, realm],
    )?;
    crate::delete_realm_rows(
        tx,
        realm,
        &[
            "fs_extent",
            "localized_file",
            "fs_fifo_data",
            "fs_fifo",
            "fs_open",
            "directory",
            "fs_inode",
            "fs_user",
        ],
    )
}
