//! The filesystem in tables (DBOS section 4.4, Figure 9): metadata in
//! `directory`, file data in blocks in `localized_file`, by fully qualified
//! name, one transaction per operation. Open and close need no state.
//!
//! Tables (migration `006_fs`): `fs_map` (partitions and their hosts),
//! `fs_user` (a realm's users: home partition and current path),
//! `directory` (one row per file or directory: owner, mode, size, layout,
//! block size, times), `localized_file` (a file's blocks; a block never
//! written — a hole — has no row and reads as zeros) and `parallel_file`
//! (blocks spread over partitions; not used yet: every file is localized).
//!
//! A realm's files, metadata and blocks, are on the realm's partition — the
//! paper keeps a user's on the user's home partition; a realm's users share
//! it here, so that a path lookup and a rename between two users'
//! directories stay single-partition transactions.
//!
//! Permissions: POSIX owner and other bits (group bits are not used: there
//! are no groups). Reading a file needs `r` on it, writing `w`; creating,
//! removing or renaming an entry needs `w` and `x` on its directory;
//! listing a directory needs `r`. Only the owner (or [`ROOT`]) may chmod;
//! only [`ROOT`] may chown. [`ROOT`] may do anything. The root directory
//! `/` is implicit, owned by [`ROOT`], mode 0777.
//!
//! Paths follow the namespace's rules ([`crate::names::validate_path`]):
//! absolute, no empty, `.` or `..` component, no control character, at most
//! 1,024 bytes.

use tabos_store::{params, Row, Tx};

pub use crate::call;
use crate::names::{parent_of, validate_path};
use crate::{p_key, subtree_range, validate_realm, Error, Result};

/// The user who may do anything.
pub const ROOT: &str = "root";
/// Block size of localized files (the paper's 2 KB).
pub const BLOCK_BYTES_LOCAL: i64 = 2_048;
/// Largest block size a file may have.
pub const BLOCK_BYTES_MAX: i64 = 1 << 20;
/// Most bytes one read returns or one write takes.
pub const IO_BYTES_MAX: usize = 4 << 20;
/// Largest file.
pub const FILE_BYTES_MAX: i64 = 1 << 40;
/// Most entries one readdir returns.
pub const READDIR_MAX: usize = 10_000;
/// Mode of a new file when the caller gives none.
pub const MODE_FILE_DEFAULT: i64 = 0o644;
/// Mode of a new directory when the caller gives none.
pub const MODE_DIR_DEFAULT: i64 = 0o755;
/// Longest user name, in bytes.
pub const USER_BYTES_MAX: usize = 64;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Dir,
    File,
}

impl FileType {
    pub fn as_str(self) -> &'static str {
        match self {
            FileType::Dir => "dir",
            FileType::File => "file",
        }
    }
}

/// An entry's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub path: String,
    pub file_type: FileType,
    pub owner: String,
    pub mode: i64,
    pub size: i64,
    pub block_size: i64,
    pub ctime_us: i64,
    pub mtime_us: i64,
}

/// Who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
}

impl Caller {
    pub fn new(user: &str) -> Result<Caller> {
        validate_user(user)?;
        Ok(Caller { user: user.into() })
    }

    pub fn root() -> Caller {
        Caller { user: ROOT.into() }
    }
}

pub fn validate_user(user: &str) -> Result<()> {
    if user.is_empty()
        || user.len() > USER_BYTES_MAX
        || !user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(Error::Invalid(format!(
            "a user name is 1..={USER_BYTES_MAX} bytes of [A-Za-z0-9_.-], not {user:?}"
        )));
    }
    Ok(())
}

fn check_mode(mode: i64) -> Result<()> {
    if !(0..=0o777).contains(&mode) {
        return Err(Error::Invalid(format!("mode {mode:o} is not 0..=0777")));
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

fn allowed(st: &Stat, who: &Caller, need: Need) -> Result<()> {
    if who.user == ROOT {
        return Ok(());
    }
    let bits = if st.owner == who.user {
        (st.mode >> 6) & 7
    } else {
        st.mode & 7
    };
    let need = need as i64;
    if bits & need != need {
        return Err(Error::Precondition(format!(
            "permission denied: {} may not {} {} (owner {}, mode {:o})",
            who.user,
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
        file_type: FileType::Dir,
        owner: ROOT.into(),
        mode: 0o777,
        size: 0,
        block_size: 0,
        ctime_us: 0,
        mtime_us: 0,
    }
}

const STAT_COLUMNS: &str =
    "d_name, content_type, user_name, mode, f_size, block_size, ctime_us, mtime_us";

fn stat_from_row(r: &Row) -> Result<Stat> {
    Ok(Stat {
        path: r.get(0)?,
        file_type: match r.get::<String>(1)?.as_str() {
            "dir" => FileType::Dir,
            _ => FileType::File,
        },
        owner: r.get(2)?,
        mode: r.get(3)?,
        size: r.get(4)?,
        block_size: r.get(5)?,
        ctime_us: r.get(6)?,
        mtime_us: r.get(7)?,
    })
}

fn lookup(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Option<Stat>> {
    if path == "/" {
        return Ok(Some(root_stat()));
    }
    let row = tx.query_opt(
        &format!(
            "SELECT {STAT_COLUMNS} FROM directory WHERE p_key = $1 AND realm = $2 AND d_name = $3"
        ),
        params![p_key(tx), realm, path],
    )?;
    row.as_ref().map(stat_from_row).transpose()
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
        return Err(Error::Invalid(format!("{parent} is not a directory")));
    }
    allowed(&d, who, Need::WriteSearch)?;
    Ok(d)
}

fn touch(tx: &mut dyn Tx, realm: &str, dir: &str, now_us: i64) -> Result<()> {
    if dir != "/" {
        tx.execute(
            "UPDATE directory SET mtime_us = $4 WHERE p_key = $1 AND realm = $2 AND d_name = $3",
            params![p_key(tx), realm, dir, now_us],
        )?;
    }
    Ok(())
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

fn insert_entry(
    tx: &mut dyn Tx,
    realm: &str,
    path: &str,
    t: FileType,
    who: &Caller,
    mode: i64,
    now_us: i64,
) -> Result<Stat> {
    writable(path)?;
    check_mode(mode)?;
    parent_dir(tx, realm, path, who)?;
    let block = if t == FileType::File {
        BLOCK_BYTES_LOCAL
    } else {
        0
    };
    let n = tx.execute(
        "INSERT INTO directory (p_key, realm, d_name, parent, content_type, user_name, mode, \
         f_size, layout, block_size, ctime_us, mtime_us) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 'local', $8, $9, $9) \
         ON CONFLICT (p_key, realm, d_name) DO NOTHING",
        params![
            p_key(tx),
            realm,
            path,
            parent_of(path),
            t.as_str(),
            who.user.as_str(),
            mode,
            block,
            now_us
        ],
    )?;
    if n == 0 {
        return Err(Error::AlreadyExists(format!("{path}: file exists")));
    }
    touch(tx, realm, parent_of(path), now_us)?;
    Ok(Stat {
        path: path.into(),
        file_type: t,
        owner: who.user.clone(),
        mode,
        size: 0,
        block_size: block,
        ctime_us: now_us,
        mtime_us: now_us,
    })
}

/// Procedure body: creates an empty file (exclusive).
pub fn create_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    mode: i64,
    now_us: i64,
) -> Result<Stat> {
    validate_realm(realm)?;
    insert_entry(tx, realm, path, FileType::File, who, mode, now_us)
}

/// Procedure body: creates a directory (exclusive).
pub fn mkdir_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    mode: i64,
    now_us: i64,
) -> Result<Stat> {
    validate_realm(realm)?;
    insert_entry(tx, realm, path, FileType::Dir, who, mode, now_us)
}

/// Procedure body: an entry's metadata.
pub fn stat_tx(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Stat> {
    validate_realm(realm)?;
    validate_path(path)?;
    must(tx, realm, path)
}

fn delete_blocks_from(tx: &mut dyn Tx, realm: &str, path: &str, first: i64) -> Result<()> {
    tx.execute(
        "DELETE FROM localized_file WHERE p_key = $1 AND realm = $2 AND f_name = $3 AND block_no >= $4",
        params![p_key(tx), realm, path, first],
    )?;
    Ok(())
}

fn delete_entry(tx: &mut dyn Tx, realm: &str, st: &Stat, now_us: i64) -> Result<()> {
    tx.execute(
        "DELETE FROM directory WHERE p_key = $1 AND realm = $2 AND d_name = $3",
        params![p_key(tx), realm, st.path.as_str()],
    )?;
    if st.file_type == FileType::File {
        delete_blocks_from(tx, realm, &st.path, 0)?;
    }
    touch(tx, realm, parent_of(&st.path), now_us)
}

/// Procedure body: removes a file (not a directory).
pub fn unlink_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    writable(path)?;
    let st = must(tx, realm, path)?;
    if st.file_type == FileType::Dir {
        return Err(Error::Invalid(format!("{path} is a directory (use rmdir)")));
    }
    parent_dir(tx, realm, path, who)?;
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
pub fn rmdir_tx(tx: &mut dyn Tx, realm: &str, who: &Caller, path: &str, now_us: i64) -> Result<()> {
    validate_realm(realm)?;
    writable(path)?;
    let st = must(tx, realm, path)?;
    if st.file_type != FileType::Dir {
        return Err(Error::Invalid(format!("{path} is not a directory")));
    }
    parent_dir(tx, realm, path, who)?;
    if has_children(tx, realm, path)? {
        return Err(Error::Precondition(format!("{path}: directory not empty")));
    }
    delete_entry(tx, realm, &st, now_us)
}

/// Procedure body: renames `from` to `to` atomically, with everything under
/// it. An existing file at `to` is replaced by a file; an existing empty
/// directory by a directory.
pub fn rename_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    from: &str,
    to: &str,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    writable(from)?;
    writable(to)?;
    let st = must(tx, realm, from)?;
    if from == to {
        return Ok(());
    }
    if crate::names::is_within(to, from) {
        return Err(Error::Invalid(format!(
            "cannot move {from} into itself ({to})"
        )));
    }
    parent_dir(tx, realm, from, who)?;
    parent_dir(tx, realm, to, who)?;
    if let Some(old) = lookup(tx, realm, to)? {
        match (st.file_type, old.file_type) {
            (FileType::File, FileType::File) => {}
            (FileType::Dir, FileType::Dir) if !has_children(tx, realm, to)? => {}
            (FileType::Dir, FileType::Dir) => {
                return Err(Error::Precondition(format!("{to}: directory not empty")))
            }
            (FileType::File, FileType::Dir) => {
                return Err(Error::Invalid(format!("{to} is a directory")))
            }
            (FileType::Dir, FileType::File) => {
                return Err(Error::Invalid(format!("{to} is not a directory")))
            }
        }
        delete_entry(tx, realm, &old, now_us)?;
    }
    let pk = p_key(tx);
    let (lo, hi) = subtree_range(from);
    let cut = from.len() as i64 + 1;
    tx.execute(
        "UPDATE localized_file SET f_name = $4 || substr(f_name, $6) \
         WHERE p_key = $1 AND realm = $2 AND ((f_name >= $3 AND f_name < $5) OR f_name = $7)",
        params![pk, realm, lo.as_str(), to, hi.as_str(), cut, from],
    )?;
    tx.execute(
        "UPDATE directory SET d_name = $4 || substr(d_name, $6), parent = $4 || substr(parent, $6) \
         WHERE p_key = $1 AND realm = $2 AND d_name >= $3 AND d_name < $5",
        params![pk, realm, lo.as_str(), to, hi.as_str(), cut],
    )?;
    tx.execute(
        "UPDATE directory SET d_name = $4, parent = $5, ctime_us = $6 \
         WHERE p_key = $1 AND realm = $2 AND d_name = $3",
        params![pk, realm, from, to, parent_of(to), now_us],
    )?;
    touch(tx, realm, parent_of(from), now_us)?;
    touch(tx, realm, parent_of(to), now_us)
}

/// Procedure body: a directory's entries by name (at most [`READDIR_MAX`];
/// the flag says whether there were more).
pub fn readdir_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    dir: &str,
) -> Result<(Vec<Stat>, bool)> {
    validate_realm(realm)?;
    validate_path(dir)?;
    let d = must(tx, realm, dir)?;
    if d.file_type != FileType::Dir {
        return Err(Error::Invalid(format!("{dir} is not a directory")));
    }
    allowed(&d, who, Need::Read)?;
    const LIST: &str = "SELECT d_name, content_type, user_name, mode, f_size, block_size, \
         ctime_us, mtime_us FROM directory WHERE p_key = $1 AND realm = $2 AND parent = $3 \
         ORDER BY d_name LIMIT 10001";
    debug_assert!(LIST.ends_with(&format!("LIMIT {}", READDIR_MAX + 1)));
    let rows = tx.query(LIST, params![p_key(tx), realm, dir])?;
    let mut out = rows.iter().map(stat_from_row).collect::<Result<Vec<_>>>()?;
    let more = out.len() > READDIR_MAX;
    out.truncate(READDIR_MAX);
    Ok((out, more))
}

fn a_file(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Stat> {
    let st = must(tx, realm, path)?;
    if st.file_type != FileType::File {
        return Err(Error::Invalid(format!("{path} is a directory")));
    }
    Ok(st)
}

/// A stored block of a localized file (`None`: a hole).
fn block_at(tx: &mut dyn Tx, realm: &str, path: &str, no: i64) -> Result<Option<Vec<u8>>> {
    tx.query_opt(
        "SELECT bytes FROM localized_file WHERE p_key = $1 AND realm = $2 \
         AND f_name = $3 AND block_no = $4",
        params![p_key(tx), realm, path, no],
    )?
    .map(|r| r.get(0))
    .transpose()
    .map_err(Error::from)
}

/// Records a file's new size and modification time.
fn set_size(tx: &mut dyn Tx, realm: &str, path: &str, size: i64, now_us: i64) -> Result<()> {
    tx.execute(
        "UPDATE directory SET f_size = $4, mtime_us = $5 \
         WHERE p_key = $1 AND realm = $2 AND d_name = $3",
        params![p_key(tx), realm, path, size, now_us],
    )?;
    Ok(())
}

/// Procedure body: up to `len` bytes at `offset` (fewer at the end of the
/// file, none past it); holes read as zeros.
pub fn read_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    offset: i64,
    len: usize,
) -> Result<Vec<u8>> {
    validate_realm(realm)?;
    validate_path(path)?;
    if offset < 0 || len > IO_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "a read is at offset >= 0 and of at most {IO_BYTES_MAX} bytes"
        )));
    }
    let st = a_file(tx, realm, path)?;
    allowed(&st, who, Need::Read)?;
    let end = st.size.min(offset.saturating_add(len as i64));
    if end <= offset {
        return Ok(Vec::new());
    }
    let bs = st.block_size;
    let (first, last) = (offset / bs, (end - 1) / bs);
    let rows = tx.query(
        "SELECT block_no, bytes FROM localized_file WHERE p_key = $1 AND realm = $2 \
         AND f_name = $3 AND block_no >= $4 AND block_no <= $5 ORDER BY block_no",
        params![p_key(tx), realm, path, first, last],
    )?;
    let mut out = vec![0u8; (end - offset) as usize];
    for r in rows.iter() {
        let (no, bytes): (i64, Vec<u8>) = (r.get(0)?, r.get(1)?);
        let block_start = no * bs;
        // Overlap of [block_start, block_start + len) with [offset, end).
        let lo = block_start.max(offset);
        let hi = (block_start + bytes.len() as i64).min(end);
        if lo < hi {
            out[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&bytes[(lo - block_start) as usize..(hi - block_start) as usize]);
        }
    }
    Ok(out)
}

/// Procedure body: writes `data` at `offset` (past the end: the gap is a
/// hole); returns the file's new size.
pub fn write_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    offset: i64,
    data: &[u8],
    now_us: i64,
) -> Result<i64> {
    validate_realm(realm)?;
    validate_path(path)?;
    if offset < 0 || data.len() > IO_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "a write is at offset >= 0 and of at most {IO_BYTES_MAX} bytes"
        )));
    }
    let end = offset.saturating_add(data.len() as i64);
    if end > FILE_BYTES_MAX {
        return Err(Error::Full(format!(
            "{path}: a file is at most {FILE_BYTES_MAX} bytes"
        )));
    }
    let st = a_file(tx, realm, path)?;
    allowed(&st, who, Need::Write)?;
    let bs = st.block_size;
    let pk = p_key(tx);
    let mut at = offset;
    while at < end {
        let no = at / bs;
        let block_start = no * bs;
        let within = (at - block_start) as usize;
        let n = ((bs - (at - block_start)).min(end - at)) as usize;
        let src = &data[(at - offset) as usize..(at - offset) as usize + n];
        // Bytes this block holds after the write: up to the file's end.
        let keep_to = (st.size.max(end) - block_start).min(bs) as usize;
        let block = if within == 0 && n == keep_to {
            src.to_vec()
        } else {
            let mut b = block_at(tx, realm, path, no)?.unwrap_or_default();
            b.resize(keep_to.max(within + n), 0);
            b[within..within + n].copy_from_slice(src);
            b
        };
        tx.execute(
            "INSERT INTO localized_file (p_key, realm, f_name, block_no, f_owner, bytes) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (p_key, realm, f_name, block_no) \
             DO UPDATE SET bytes = excluded.bytes",
            params![pk, realm, path, no, st.owner.as_str(), block],
        )?;
        at += n as i64;
    }
    let size = st.size.max(end);
    set_size(tx, realm, path, size, now_us)?;
    Ok(size)
}

/// Procedure body: sets a file's size; bytes past a shrink are gone, a
/// grow adds a hole.
pub fn truncate_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    size: i64,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    validate_path(path)?;
    if !(0..=FILE_BYTES_MAX).contains(&size) {
        return Err(Error::Invalid(format!(
            "a size is 0..={FILE_BYTES_MAX} bytes"
        )));
    }
    let st = a_file(tx, realm, path)?;
    allowed(&st, who, Need::Write)?;
    let bs = st.block_size;
    let pk = p_key(tx);
    if size < st.size {
        // Whole blocks past the new end go; the last kept block is cut.
        delete_blocks_from(tx, realm, path, (size + bs - 1) / bs)?;
        if size % bs != 0 {
            let no = size / bs;
            if let Some(mut b) = block_at(tx, realm, path, no)? {
                b.truncate((size - no * bs) as usize);
                tx.execute(
                    "UPDATE localized_file SET bytes = $5 WHERE p_key = $1 AND realm = $2 \
                     AND f_name = $3 AND block_no = $4",
                    params![pk, realm, path, no, b],
                )?;
            }
        }
    }
    set_size(tx, realm, path, size, now_us)
}

/// Procedure body: changes an entry's mode (its owner or root only).
pub fn chmod_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    mode: i64,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    writable(path)?;
    check_mode(mode)?;
    let st = must(tx, realm, path)?;
    if who.user != ROOT && who.user != st.owner {
        return Err(Error::Precondition(format!(
            "permission denied: only {} (the owner) or root may chmod {path}",
            st.owner
        )));
    }
    tx.execute(
        "UPDATE directory SET mode = $4, ctime_us = $5 WHERE p_key = $1 AND realm = $2 AND d_name = $3",
        params![p_key(tx), realm, path, mode, now_us],
    )?;
    Ok(())
}

/// Procedure body: gives an entry to another user (root only).
pub fn chown_tx(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    path: &str,
    owner: &str,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    writable(path)?;
    validate_user(owner)?;
    must(tx, realm, path)?;
    if who.user != ROOT {
        return Err(Error::Precondition(format!(
            "permission denied: only root may chown {path}"
        )));
    }
    let pk = p_key(tx);
    tx.execute(
        "UPDATE directory SET user_name = $4, ctime_us = $5 WHERE p_key = $1 AND realm = $2 AND d_name = $3",
        params![pk, realm, path, owner, now_us],
    )?;
    tx.execute(
        "UPDATE localized_file SET f_owner = $4 WHERE p_key = $1 AND realm = $2 AND f_name = $3",
        params![pk, realm, path, owner],
    )?;
    Ok(())
}

/// Procedure body: how many files, of how many bytes, are under `path` (or
/// are `path`), optionally only `owner`'s and only those of at least
/// `min_size` bytes — one query (DBOS Table 2).
pub fn du_tx(
    tx: &mut dyn Tx,
    realm: &str,
    path: &str,
    owner: Option<&str>,
    min_size: i64,
) -> Result<(i64, i64)> {
    validate_realm(realm)?;
    validate_path(path)?;
    let (lo, hi) = subtree_range(path);
    let r = tx.query_one(
        "SELECT count(*), coalesce(sum(f_size), 0) FROM directory          WHERE p_key = $1 AND realm = $2 AND content_type = 'file'          AND (d_name = $3 OR (d_name >= $4 AND d_name < $5))          AND ($6 = '' OR user_name = $6) AND f_size >= $7",
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
