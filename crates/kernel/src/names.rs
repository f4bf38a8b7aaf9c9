//! The namespace: σOS-style names with watches, sessions, ephemeral entries,
//! versions, epochs and fences (thesis sections 3.6, 4.1–4.3).
//!
//! Tables (migration `005_names`), all on the realm's partition:
//!
//! * `name_entry(p_key, realm, path, parent, kind, data, version, owner,
//!   mode, session, created_us, modified_us)`: one row per entry; the root
//!   `/` is implicit and always a directory. `version` starts at 1 and grows
//!   by one with every change of the entry — for a directory, with every
//!   child created, removed or renamed in or out.
//! * `name_session(…, session, owner, ttl_us, expires_us)`: a client's
//!   lease. An ephemeral entry names its session; when the session is closed
//!   or lapses its ephemeral entries are removed in one transaction.
//! * `name_fence(…, dir, epoch)`: the highest epoch seen for a fenced
//!   directory.
//!
//! Paths are absolute (`/a/b`), at most [`PATH_BYTES_MAX`] bytes and
//! [`DEPTH_MAX`] components of at most [`COMPONENT_BYTES_MAX`] bytes, with no
//! empty, `.` or `..` component and no control character. A symlink's data
//! is its target — for a service, its endpoint. A path that goes *through* a
//! symlink is not resolved here: the operation fails with
//! [`Error::Mounted`], which says which prefix is mounted where and what is
//! left to resolve there (σOS automount).
//!
//! Watches: every change notifies the channel of the entry's parent
//! directory ([`dir_channel`]) after commit, with payload `op version path`
//! (`op`: `create`, `set`, `remove`); a rename is a `remove` in the old
//! parent and a `create` in the new one. Per directory, notifications arrive
//! in commit order, so a watcher sees each change once, in order.
//!
//! Fences: a request may carry a [`Fence`] (`dir`, `epoch`). Checked in the
//! request's own transaction ([`check_fence_tx`]), it raises the directory's
//! epoch to the request's, or refuses the request with
//! [`Error::StaleEpoch`] if a newer epoch has been seen. Services other than
//! names (ipc sends, proc spawns) accept the same fence.
//!
//! `/proc` is a read-only view generated from the proc table: `/proc/<pid>`
//! files whose data is the proc's state.
//!
//! Operations acting for someone take a [`Caller`] (section "operations"):
//! each checks the caller's role and scope and its permissions
//! ([`permit_tx`]) in its own transaction, so the doors that call them —
//! the Names service and wasm procs' host calls — check nothing
//! themselves. The `_tx` bodies below them act for nobody; only the
//! kernel calls those.
//!
//! Permissions, as the filesystem's: an entry belongs to the user who created
//! it; its owner and other mode bits say who may read it (`r`: get, list)
//! and change it (`w`: set, AdvanceEpoch, fence); creating, removing or
//! renaming needs `w` and `x` on the directory, and in a sticky directory
//! (mode 01000) removing or renaming another user's entry needs to own the
//! directory. The root `/` is root's, 0755. A session is its opener's: only
//! they (or root) renew or close it, or make entries ephemeral on it. Root
//! may do anything.

use tabos_store::{params, Row, Store, Tx};

use crate::auth::{Caller, Role, ROOT};
use crate::{p_key, validate_realm, Error, Result};

/// Longest path, in bytes.
pub const PATH_BYTES_MAX: usize = 1_024;
/// Longest path component, in bytes.
pub const COMPONENT_BYTES_MAX: usize = 255;
/// Most components in a path.
pub const DEPTH_MAX: usize = 64;
/// Largest data of one entry, in bytes (names hold small data; files go to fs).
pub const DATA_BYTES_MAX: usize = 1 << 20;
/// Most entries one readdir returns.
pub const READDIR_MAX: usize = 10_000;
/// Longest owner or session name, in bytes.
pub const OWNER_BYTES_MAX: usize = 128;
/// Longest session TTL.
pub const SESSION_TTL_MAX_US: i64 = 3_600 * 1_000_000;
/// Shortest session TTL.
pub const SESSION_TTL_MIN_US: i64 = 10_000;
/// Most sessions a realm may hold open at once: each is a row, and may
/// hold ephemeral entries and open files' handles
/// ([`crate::fs::HANDLES_PER_SESSION_MAX`]), so one realm opening
/// sessions without end would fill the store for every other.
pub const SESSIONS_PER_REALM_MAX: i64 = 10_000;
/// Sessions expired per transaction; the reaper runs again for the rest.
const EXPIRE_SESSIONS_MAX: usize = 64;
/// The read-only view of a realm's procs.
pub const PROC_VIEW: &str = "/proc";
/// Default mode of new entries.
pub const MODE_DEFAULT: i64 = 0o644;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Dir => "dir",
            Kind::File => "file",
            Kind::Symlink => "symlink",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Kind> {
        match s {
            "dir" => Ok(Kind::Dir),
            "file" => Ok(Kind::File),
            "symlink" => Ok(Kind::Symlink),
            other => Err(Error::Invalid(format!(
                "kind must be dir, file or symlink, not {other:?}"
            ))),
        }
    }
}

/// One entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub kind: Kind,
    pub data: Vec<u8>,
    pub version: i64,
    pub owner: String,
    pub mode: i64,
    /// The session of an ephemeral entry.
    pub session: Option<String>,
    pub created_us: i64,
    pub modified_us: i64,
}

/// A fence carried by a request: refuse it if `dir` has seen a newer epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub dir: String,
    pub epoch: i64,
}

/// How to create an entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateOptions {
    pub owner: String,
    /// 0 for [`MODE_DEFAULT`].
    pub mode: i64,
    /// Make the entry ephemeral, owned by this (live) session.
    pub session: Option<String>,
}

/// Checks a path (see the module doc).
pub fn validate_path(path: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::Invalid(format!("path {path:?}: {why}")));
    if path.len() > PATH_BYTES_MAX {
        return bad(&format!("longer than {PATH_BYTES_MAX} bytes"));
    }
    if !path.starts_with('/') {
        return bad("must start with /");
    }
    if path == "/" {
        return Ok(());
    }
    if path.chars().any(char::is_control) {
        return bad("has a control character");
    }
    let parts: Vec<&str> = path[1..].split('/').collect();
    if parts.len() > DEPTH_MAX {
        return bad(&format!("more than {DEPTH_MAX} components"));
    }
    for c in parts {
        match c {
            "" => return bad("has an empty component"),
            "." | ".." => return bad("has a . or .. component"),
            c if c.len() > COMPONENT_BYTES_MAX => {
                return bad(&format!(
                    "a component is longer than {COMPONENT_BYTES_MAX} bytes"
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The parent directory of a valid path other than `/`.
pub fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Whether `path` is `dir` or inside it.
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/"
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// The change-feed channel of a directory's children.
pub fn dir_channel(realm: &str, dir: &str) -> String {
    crate::bounded_channel(&format!("names/{realm}:"), dir)
}

/// The channel on which session openings are announced (for the reaper).
pub const SESSIONS_CHANNEL: &str = "names/sessions";

/// A parsed watch notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub op: String,
    pub version: i64,
    pub path: String,
}

impl Change {
    pub fn parse(payload: &str) -> Option<Change> {
        let mut it = payload.splitn(3, ' ');
        Some(Change {
            op: it.next()?.to_string(),
            version: it.next()?.parse().ok()?,
            path: it.next()?.to_string(),
        })
    }
}

fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > DATA_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "data of {} bytes exceeds the {DATA_BYTES_MAX}-byte limit of a name (use fs for files)",
            data.len()
        )));
    }
    Ok(())
}

fn check_owner(owner: &str) -> Result<()> {
    if owner.len() > OWNER_BYTES_MAX || owner.chars().any(char::is_control) {
        return Err(Error::Invalid(format!(
            "an owner or session is at most {OWNER_BYTES_MAX} bytes without control characters"
        )));
    }
    Ok(())
}

fn writable(path: &str) -> Result<()> {
    validate_path(path)?;
    if path == "/" {
        return Err(Error::Invalid("the root cannot be changed".into()));
    }
    if is_within(path, PROC_VIEW) {
        return Err(Error::Invalid(format!(
            "{PROC_VIEW} is a read-only view of the realm's procs"
        )));
    }
    Ok(())
}

fn notify(tx: &mut dyn Tx, realm: &str, op: &str, version: i64, path: &str) -> Result<()> {
    tx.notify(
        &dir_channel(realm, parent_of(path)),
        &format!("{op} {version} {path}"),
    )?;
    Ok(())
}

/// Bumps a directory's version (its children changed); the root has none.
fn touch_dir(tx: &mut dyn Tx, realm: &str, dir: &str, now_us: i64) -> Result<()> {
    if dir != "/" {
        tx.execute(
            "UPDATE name_entry SET version = version + 1, modified_us = $4 \
             WHERE p_key = $1 AND realm = $2 AND path = $3",
            params![p_key(tx), realm, dir, now_us],
        )?;
    }
    Ok(())
}

fn entry_from_row(r: &Row) -> Result<Entry> {
    Ok(Entry {
        path: r.get(0)?,
        kind: r.get::<String>(1)?.parse()?,
        data: r.get(2)?,
        version: r.get(3)?,
        owner: r.get(4)?,
        mode: r.get(5)?,
        session: r.get(6)?,
        created_us: r.get(7)?,
        modified_us: r.get(8)?,
    })
}

fn lookup(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Option<Entry>> {
    let row = tx.query_opt(
        "SELECT path, kind, data, version, owner, mode, session, created_us, modified_us \
         FROM name_entry WHERE p_key = $1 AND realm = $2 AND path = $3",
        params![p_key(tx), realm, path],
    )?;
    row.as_ref().map(entry_from_row).transpose()
}

/// Why `path` cannot be reached: the first ancestor that is a symlink (a
/// mount), missing, or not a directory.
fn unreachable(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Error> {
    let mut at = 0;
    while let Some(i) = path[at + 1..].find('/') {
        let prefix = &path[..at + 1 + i];
        match lookup(tx, realm, prefix)? {
            None => return Ok(Error::NotFound(format!("{prefix} in realm {realm:?}"))),
            Some(e) if e.kind == Kind::Symlink => {
                return Ok(Error::Mounted {
                    path: prefix.to_string(),
                    target: String::from_utf8_lossy(&e.data).into_owned(),
                    rest: path[prefix.len()..].to_string(),
                })
            }
            Some(e) if e.kind == Kind::File => {
                return Ok(Error::Invalid(format!(
                    "{prefix} is a file, not a directory"
                )))
            }
            Some(_) => at += 1 + i,
        }
    }
    Ok(Error::NotFound(format!("{path} in realm {realm:?}")))
}

/// The entry at `path`, or why there is none.
fn must_get(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Entry> {
    match lookup(tx, realm, path)? {
        Some(e) => Ok(e),
        None => Err(unreachable(tx, realm, path)?),
    }
}

/// Procedure body: checks a request's fence, raising the directory's epoch
/// to the request's. Refuses with [`Error::StaleEpoch`] if the directory
/// has seen a newer epoch.
pub(crate) fn check_fence_tx(
    tx: &mut dyn Tx,
    realm: &str,
    fence: &Fence,
    now_us: i64,
) -> Result<()> {
    validate_path(&fence.dir)?;
    if fence.epoch < 0 {
        return Err(Error::Invalid("an epoch is never negative".into()));
    }
    let pk = p_key(tx);
    tx.execute(
        "INSERT INTO name_fence (p_key, realm, dir, epoch, updated_us) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (p_key, realm, dir) DO UPDATE SET epoch = excluded.epoch, \
         updated_us = excluded.updated_us WHERE name_fence.epoch < excluded.epoch",
        params![pk, realm, fence.dir.as_str(), fence.epoch, now_us],
    )?;
    let seen: i64 = tx.query_scalar(
        "SELECT epoch FROM name_fence WHERE p_key = $1 AND realm = $2 AND dir = $3",
        params![pk, realm, fence.dir.as_str()],
    )?;
    if seen > fence.epoch {
        return Err(Error::StaleEpoch {
            what: format!(
                "{} is at epoch {seen}; this request carries epoch {}",
                fence.dir, fence.epoch
            ),
            current: seen,
            given: fence.epoch,
        });
    }
    Ok(())
}

/// Procedure body: checks a request's fence if it carries one — for
/// services whose requests name no path in the namespace (ipc, procs, fs).
pub fn check_fence_if_tx(
    tx: &mut dyn Tx,
    realm: &str,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<()> {
    match fence {
        Some(f) => check_fence_tx(tx, realm, f, now_us),
        None => Ok(()),
    }
}

/// Checks an optional fence for an operation on `path`.
fn fenced(
    tx: &mut dyn Tx,
    realm: &str,
    path: &str,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<()> {
    if let Some(f) = fence {
        if !is_within(path, &f.dir) {
            return Err(Error::Invalid(format!(
                "the fence on {} does not cover {path}",
                f.dir
            )));
        }
        check_fence_tx(tx, realm, f, now_us)?;
    }
    Ok(())
}

fn live_session(tx: &mut dyn Tx, realm: &str, session: &str, now_us: i64) -> Result<()> {
    let row = tx.query_opt(
        "SELECT expires_us FROM name_session WHERE p_key = $1 AND realm = $2 AND session = $3",
        params![p_key(tx), realm, session],
    )?;
    match row {
        Some(r) if r.get::<i64>(0)? > now_us => Ok(()),
        _ => Err(Error::Precondition(format!(
            "session {session} is closed or has expired"
        ))),
    }
}

/// Procedure body: creates `path` (exclusive: an existing entry is
/// [`Error::AlreadyExists`]). `data` is a file's bytes or a symlink's
/// target, empty for a directory. Returns the new entry's version (1).
#[allow(clippy::too_many_arguments)]
pub(crate) fn create_tx(
    tx: &mut dyn Tx,
    realm: &str,
    path: &str,
    kind: Kind,
    data: &[u8],
    opts: &CreateOptions,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<i64> {
    validate_realm(realm)?;
    writable(path)?;
    check_data(data)?;
    check_owner(&opts.owner)?;
    if kind == Kind::Dir && !data.is_empty() {
        return Err(Error::Invalid("a directory has no data".into()));
    }
    if !(0..=0o7777).contains(&opts.mode) {
        return Err(Error::Invalid(format!(
            "mode {:o} is not a mode",
            opts.mode
        )));
    }
    if let Some(s) = &opts.session {
        check_owner(s)?;
        if kind == Kind::Dir {
            return Err(Error::Invalid(
                "only files and symlinks are ephemeral".into(),
            ));
        }
    }
    fenced(tx, realm, path, fence, now_us)?;
    if let Some(s) = &opts.session {
        live_session(tx, realm, s, now_us)?;
    }
    let parent = parent_of(path);
    if parent != "/" {
        match lookup(tx, realm, parent)? {
            Some(e) if e.kind == Kind::Dir => {}
            _ => return Err(unreachable(tx, realm, path)?),
        }
    }
    let mode = if opts.mode == 0 {
        MODE_DEFAULT
    } else {
        opts.mode
    };
    let n = crate::realms::metered(tx, realm, |tx| {
        Ok(tx.execute(
            "INSERT INTO name_entry (p_key, realm, path, parent, kind, data, version, owner, \
             mode, session, created_us, modified_us) \
             VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9, $10, $10) \
             ON CONFLICT (p_key, realm, path) DO NOTHING",
            params![
                p_key(tx),
                realm,
                path,
                parent,
                kind.as_str(),
                data,
                opts.owner.as_str(),
                mode,
                opts.session.as_deref(),
                now_us
            ],
        )?)
    })?;
    if n == 0 {
        return Err(Error::AlreadyExists(format!("{path} in realm {realm:?}")));
    }
    touch_dir(tx, realm, parent, now_us)?;
    notify(tx, realm, "create", 1, path)?;
    Ok(1)
}

/// Procedure body: sets a file's data, creating the file (owned by
/// `owner`) if it does not exist; with `if_version`, only if the file is at
/// that version (0: only if it does not exist). Returns the new version.
#[allow(clippy::too_many_arguments)]
pub(crate) fn set_by_tx(
    tx: &mut dyn Tx,
    realm: &str,
    owner: &str,
    path: &str,
    data: &[u8],
    if_version: Option<i64>,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<i64> {
    validate_realm(realm)?;
    writable(path)?;
    check_data(data)?;
    fenced(tx, realm, path, fence, now_us)?;
    match lookup(tx, realm, path)? {
        None => {
            if let Some(v) = if_version.filter(|v| *v != 0) {
                return Err(Error::Conflict(format!(
                    "version mismatch: {path} does not exist, expected version {v}"
                )));
            }
            create_tx(
                tx,
                realm,
                path,
                Kind::File,
                data,
                &CreateOptions {
                    owner: owner.to_string(),
                    ..CreateOptions::default()
                },
                None,
                now_us,
            )
        }
        Some(e) => {
            if e.kind != Kind::File {
                return Err(Error::Invalid(format!(
                    "{path} is a {}, not a file",
                    e.kind.as_str()
                )));
            }
            if let Some(v) = if_version {
                if v != e.version {
                    return Err(Error::Conflict(format!(
                        "version mismatch: {path} is at version {}, expected {v}",
                        e.version
                    )));
                }
            }
            let version: i64 = crate::realms::metered(tx, realm, |tx| {
                Ok(tx.query_scalar(
                    "UPDATE name_entry SET data = $4, version = version + 1, modified_us = $5 \
                     WHERE p_key = $1 AND realm = $2 AND path = $3 RETURNING version",
                    params![p_key(tx), realm, path, data, now_us],
                )?)
            })?;
            notify(tx, realm, "set", version, path)?;
            Ok(version)
        }
    }
}

/// Procedure body: the entry at `path` (the `/proc` view included).
pub(crate) fn get_tx(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Entry> {
    validate_realm(realm)?;
    validate_path(path)?;
    if path == "/" {
        return Ok(Entry {
            path: "/".into(),
            kind: Kind::Dir,
            data: Vec::new(),
            version: 0,
            owner: ROOT.into(),
            mode: ROOT_MODE,
            session: None,
            created_us: 0,
            modified_us: 0,
        });
    }
    if is_within(path, PROC_VIEW) {
        return proc_view_entry(tx, realm, path);
    }
    must_get(tx, realm, path)
}

/// Mode of the implicit root directory.
pub const ROOT_MODE: i64 = 0o755;
/// The sticky bit of a directory's mode.
pub const STICKY: i64 = 0o1000;

/// What a request does to the namespace, for [`permit_tx`].
#[derive(Debug, Clone, Copy)]
pub enum NameOp<'a> {
    /// Get an entry (read its data).
    Read(&'a str),
    /// List a directory (or watch it).
    List(&'a str),
    /// Create an entry (exclusive).
    Create(&'a str),
    /// Set a file's data, creating it if missing (set, AdvanceEpoch).
    Write(&'a str),
    Remove(&'a str),
    Rename(&'a str, &'a str),
    /// Raise a directory's epoch (FenceAtEpoch).
    Fence(&'a str),
    /// Renew, close, or make entries ephemeral on a session.
    Session(&'a str),
}

fn may(e: &Entry, who: &Caller, need: i64, what: &str) -> Result<()> {
    let bits = if e.owner == who.user() {
        (e.mode >> 6) & 7
    } else {
        e.mode & 7
    };
    if bits & need == need {
        Ok(())
    } else {
        Err(Error::Denied(format!(
            "{} may not {what} {} (owner {}, mode {:o})",
            who.user(),
            e.path,
            e.owner,
            e.mode
        )))
    }
}

/// An existing directory that `who` may change entries in.
fn changeable_dir(tx: &mut dyn Tx, realm: &str, path: &str, who: &Caller) -> Result<Option<Entry>> {
    let parent = parent_of(path);
    let d = if parent == "/" {
        get_tx(tx, realm, "/")?
    } else {
        match lookup(tx, realm, parent)? {
            Some(d) if d.kind == Kind::Dir => d,
            // The operation itself says why (missing, mounted, a file).
            _ => return Ok(None),
        }
    };
    may(&d, who, 3, "change entries in")?;
    Ok(Some(d))
}

fn sticky(d: Option<&Entry>, e: &Entry, who: &Caller) -> Result<()> {
    match d {
        Some(d) if d.mode & STICKY != 0 && who.user() != e.owner && who.user() != d.owner => {
            Err(Error::Denied(format!(
                "{} may not remove or rename {} in sticky {} (owner {})",
                who.user(),
                e.path,
                d.path,
                e.owner
            )))
        }
        _ => Ok(()),
    }
}

/// Procedure body: `session` is open and `who`'s — or `who` is an
/// operator, who may act for any user of the realm (a shared mount binds
/// every user's handles to its one session) — what the fs asks of a
/// session its handles are bound to.
pub(crate) fn own_session_tx(tx: &mut dyn Tx, who: &Caller, session: &str) -> Result<()> {
    let row = tx.query_opt(
        "SELECT owner FROM name_session WHERE p_key = $1 AND realm = $2 AND session = $3",
        params![p_key(tx), who.realm(), session],
    )?;
    match row {
        None => Err(Error::NotFound(format!(
            "session {session} (lapsed or closed)"
        ))),
        Some(r) if r.get::<String>(0)? != who.user() && !who.is_operator() => Err(Error::Denied(
            format!("session {session} is not {}'s", who.user()),
        )),
        Some(_) => Ok(()),
    }
}

/// Procedure body: whether `who` may do `op` (see the module's
/// permissions). Call it in the operation's transaction, before the
/// operation; a refusal is [`Error::Denied`]. An entry that does not exist
/// is left for the operation to report.
pub(crate) fn permit_tx(tx: &mut dyn Tx, realm: &str, who: &Caller, op: NameOp<'_>) -> Result<()> {
    validate_realm(realm)?;
    if who.is_root() {
        return Ok(());
    }
    match op {
        NameOp::Read(path) | NameOp::List(path) => {
            validate_path(path)?;
            if path == "/" || is_within(path, PROC_VIEW) {
                return Ok(()); // 0755 and the read-only view
            }
            match lookup(tx, realm, path)? {
                Some(e) => may(&e, who, 4, "read"),
                None => Ok(()),
            }
        }
        NameOp::Create(path) => {
            validate_path(path)?;
            changeable_dir(tx, realm, path, who).map(drop)
        }
        NameOp::Write(path) => {
            validate_path(path)?;
            match lookup(tx, realm, path)? {
                Some(e) => may(&e, who, 2, "write"),
                None => changeable_dir(tx, realm, path, who).map(drop),
            }
        }
        NameOp::Remove(path) => {
            validate_path(path)?;
            let d = changeable_dir(tx, realm, path, who)?;
            match lookup(tx, realm, path)? {
                Some(e) => sticky(d.as_ref(), &e, who),
                None => Ok(()),
            }
        }
        NameOp::Rename(from, to) => {
            validate_path(from)?;
            validate_path(to)?;
            let fd = changeable_dir(tx, realm, from, who)?;
            if let Some(e) = lookup(tx, realm, from)? {
                sticky(fd.as_ref(), &e, who)?;
            }
            let td = changeable_dir(tx, realm, to, who)?;
            match lookup(tx, realm, to)? {
                Some(old) => sticky(td.as_ref(), &old, who),
                None => Ok(()),
            }
        }
        NameOp::Fence(dir) => {
            validate_path(dir)?;
            match lookup(tx, realm, dir)? {
                Some(e) => may(&e, who, 2, "fence"),
                None if dir == "/" => Err(Error::Denied(format!(
                    "{} may not fence / (root's)",
                    who.user()
                ))),
                None => Ok(()),
            }
        }
        NameOp::Session(session) => {
            let row = tx.query_opt(
                "SELECT owner FROM name_session WHERE p_key = $1 AND realm = $2 AND session = $3",
                params![p_key(tx), realm, session],
            )?;
            match row {
                Some(r) if r.get::<String>(0)? != who.user() => Err(Error::Denied(format!(
                    "session {session} is not {}'s",
                    who.user()
                ))),
                _ => Ok(()),
            }
        }
    }
}

/// Procedure body: removes `path` (a directory only when empty); with
/// `if_version`, only at that version.
pub(crate) fn remove_tx(
    tx: &mut dyn Tx,
    realm: &str,
    path: &str,
    if_version: Option<i64>,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    writable(path)?;
    fenced(tx, realm, path, fence, now_us)?;
    let e = must_get(tx, realm, path)?;
    if let Some(v) = if_version {
        if v != e.version {
            return Err(Error::Conflict(format!(
                "version mismatch: {path} is at version {}, expected {v}",
                e.version
            )));
        }
    }
    if e.kind == Kind::Dir {
        let child = tx.query_opt(
            "SELECT path FROM name_entry WHERE p_key = $1 AND realm = $2 AND parent = $3 LIMIT 1",
            params![p_key(tx), realm, path],
        )?;
        if child.is_some() {
            return Err(Error::NotEmpty(path.to_string()));
        }
    }
    remove_entry(tx, realm, &e, now_us)
}

fn remove_entry(tx: &mut dyn Tx, realm: &str, e: &Entry, now_us: i64) -> Result<()> {
    tx.execute(
        "DELETE FROM name_entry WHERE p_key = $1 AND realm = $2 AND path = $3",
        params![p_key(tx), realm, e.path.as_str()],
    )?;
    touch_dir(tx, realm, parent_of(&e.path), now_us)?;
    notify(tx, realm, "remove", e.version, &e.path)
}

/// Procedure body: renames `from` to `to` atomically, with everything under
/// it. `to` may be an existing file (replaced); not an existing directory.
pub(crate) fn rename_tx(
    tx: &mut dyn Tx,
    realm: &str,
    from: &str,
    to: &str,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    writable(from)?;
    writable(to)?;
    fenced(tx, realm, from, fence, now_us)?;
    fenced(tx, realm, to, fence, now_us)?;
    if from == to {
        must_get(tx, realm, from)?;
        return Ok(());
    }
    if is_within(to, from) {
        return Err(Error::Invalid(format!(
            "cannot move {from} into itself ({to})"
        )));
    }
    let e = must_get(tx, realm, from)?;
    let to_parent = parent_of(to);
    if to_parent != "/" {
        match lookup(tx, realm, to_parent)? {
            Some(d) if d.kind == Kind::Dir => {}
            _ => return Err(unreachable(tx, realm, to)?),
        }
    }
    if let Some(old) = lookup(tx, realm, to)? {
        if old.kind == Kind::Dir {
            return Err(Error::AlreadyExists(format!("{to} is a directory")));
        }
        remove_entry(tx, realm, &old, now_us)?;
    }
    let pk = p_key(tx);
    let (lo, hi) = crate::subtree_range(from);
    let cut = from.len() as i64 + 1;
    // Paths are stored bytes: a longer name for a subtree may pass a quota.
    crate::realms::metered(tx, realm, |tx| {
        tx.execute(
            "UPDATE name_entry SET path = $4 || substr(path, $6), \
             parent = $4 || substr(parent, $6) \
             WHERE p_key = $1 AND realm = $2 AND path >= $3 AND path < $5",
            params![pk, realm, lo.as_str(), to, hi.as_str(), cut],
        )?;
        tx.execute(
            "UPDATE name_entry SET path = $4, parent = $5, version = version + 1, \
             modified_us = $6 WHERE p_key = $1 AND realm = $2 AND path = $3",
            params![pk, realm, from, to, to_parent, now_us],
        )?;
        Ok(())
    })?;
    touch_dir(tx, realm, parent_of(from), now_us)?;
    touch_dir(tx, realm, to_parent, now_us)?;
    notify(tx, realm, "remove", e.version, from)?;
    notify(tx, realm, "create", e.version + 1, to)?;
    Ok(())
}

/// Procedure body: the directory's entries, by name (at most
/// [`READDIR_MAX`]; the flag says whether there were more), and its version.
pub(crate) fn readdir_tx(
    tx: &mut dyn Tx,
    realm: &str,
    dir: &str,
) -> Result<(Vec<Entry>, bool, i64)> {
    validate_realm(realm)?;
    validate_path(dir)?;
    if dir == PROC_VIEW {
        return proc_view_dir(tx, realm);
    }
    let d = get_tx(tx, realm, dir)?;
    if d.kind != Kind::Dir {
        return Err(Error::Invalid(format!(
            "{dir} is a {}, not a directory",
            d.kind.as_str()
        )));
    }
    // LIMIT as a literal (READDIR_MAX + 1, to see whether there are more).
    const READDIR: &str = "SELECT path, kind, data, version, owner, mode, session, created_us, \
         modified_us FROM name_entry WHERE p_key = $1 AND realm = $2 AND parent = $3 \
         ORDER BY path LIMIT 10001";
    debug_assert!(READDIR.ends_with(&format!("LIMIT {}", READDIR_MAX + 1)));
    let rows = tx.query(READDIR, params![p_key(tx), realm, dir])?;
    let mut entries = rows
        .iter()
        .map(entry_from_row)
        .collect::<Result<Vec<_>>>()?;
    let more = entries.len() > READDIR_MAX;
    entries.truncate(READDIR_MAX);
    Ok((entries, more, d.version))
}

/// Procedure body: AdvanceEpoch — reads the epoch file at `path` (created
/// at 0 if missing, owned by `owner`), increments it, returns the new
/// epoch.
pub(crate) fn advance_epoch_by_tx(
    tx: &mut dyn Tx,
    realm: &str,
    owner: &str,
    path: &str,
    now_us: i64,
) -> Result<i64> {
    validate_realm(realm)?;
    writable(path)?;
    let current = match lookup(tx, realm, path)? {
        None => 0,
        Some(e) if e.kind == Kind::File => std::str::from_utf8(&e.data)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .ok_or_else(|| Error::Invalid(format!("{path} does not hold an epoch number")))?,
        Some(e) => {
            return Err(Error::Invalid(format!(
                "{path} is a {}, not an epoch file",
                e.kind.as_str()
            )))
        }
    };
    let next = current + 1;
    set_by_tx(
        tx,
        realm,
        owner,
        path,
        next.to_string().as_bytes(),
        None,
        None,
        now_us,
    )?;
    Ok(next)
}

// ---- sessions ----

/// Procedure body: opens session `session` for `owner` with a TTL.
pub(crate) fn open_session_tx(
    tx: &mut dyn Tx,
    realm: &str,
    session: &str,
    owner: &str,
    ttl_us: i64,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    crate::ids::validate_name("session", session)?;
    check_owner(owner)?;
    if !(SESSION_TTL_MIN_US..=SESSION_TTL_MAX_US).contains(&ttl_us) {
        return Err(Error::Invalid(format!(
            "a session TTL is {}..={} ms",
            SESSION_TTL_MIN_US / 1000,
            SESSION_TTL_MAX_US / 1000
        )));
    }
    // Counted up to the limit only: the check costs at most that much.
    const HELD: &str = "SELECT count(*) FROM (SELECT 1 FROM name_session \
         WHERE p_key = $1 AND realm = $2 LIMIT 10000) held";
    debug_assert!(HELD.ends_with(&format!("LIMIT {SESSIONS_PER_REALM_MAX}) held")));
    let held: i64 = tx.query_scalar(HELD, params![p_key(tx), realm])?;
    if held >= SESSIONS_PER_REALM_MAX {
        return Err(Error::Full(format!(
            "realm {realm:?} holds {SESSIONS_PER_REALM_MAX} names sessions, the most it may \
             (close some, or let them lapse)"
        )));
    }
    let n = tx.execute(
        "INSERT INTO name_session (p_key, realm, session, owner, ttl_us, expires_us, created_us) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (p_key, realm, session) DO NOTHING",
        params![
            p_key(tx),
            realm,
            session,
            owner,
            ttl_us,
            now_us + ttl_us,
            now_us
        ],
    )?;
    if n == 0 {
        return Err(Error::AlreadyExists(format!("session {session}")));
    }
    tx.notify(SESSIONS_CHANNEL, &(now_us + ttl_us).to_string())?;
    Ok(())
}

/// Procedure body: renews a live session for another TTL; a session that
/// has lapsed (even if not yet reaped) cannot be renewed.
pub(crate) fn renew_session_tx(
    tx: &mut dyn Tx,
    realm: &str,
    session: &str,
    now_us: i64,
) -> Result<i64> {
    validate_realm(realm)?;
    let row = tx.query_opt(
        "UPDATE name_session SET expires_us = $4 + ttl_us \
         WHERE p_key = $1 AND realm = $2 AND session = $3 AND expires_us > $4 RETURNING expires_us",
        params![p_key(tx), realm, session, now_us],
    )?;
    match row {
        Some(r) => Ok(r.get(0)?),
        None => Err(Error::NotFound(format!(
            "session {session} is closed or has expired"
        ))),
    }
}

/// Procedure body: closes a session, removing its ephemeral entries.
pub(crate) fn close_session_tx(
    tx: &mut dyn Tx,
    realm: &str,
    session: &str,
    now_us: i64,
) -> Result<usize> {
    validate_realm(realm)?;
    let n = tx.execute(
        "DELETE FROM name_session WHERE p_key = $1 AND realm = $2 AND session = $3",
        params![p_key(tx), realm, session],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!("session {session}")));
    }
    remove_ephemerals(tx, realm, session, now_us)
}

fn remove_ephemerals(tx: &mut dyn Tx, realm: &str, session: &str, now_us: i64) -> Result<usize> {
    let rows = tx.query(
        "SELECT path, kind, data, version, owner, mode, session, created_us, modified_us \
         FROM name_entry WHERE p_key = $1 AND realm = $2 AND session = $3",
        params![p_key(tx), realm, session],
    )?;
    let entries = rows
        .iter()
        .map(entry_from_row)
        .collect::<Result<Vec<_>>>()?;
    for e in &entries {
        remove_entry(tx, realm, e, now_us)?;
    }
    Ok(entries.len())
}

/// What one expiry pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expired {
    /// (realm, session) of every session that lapsed.
    pub sessions: Vec<(String, String)>,
    /// Ephemeral entries removed with them.
    pub entries: usize,
    /// When the next live session lapses, if any.
    pub next_us: Option<i64>,
}

/// Procedure body: ends the partition's lapsed sessions (up to a batch),
/// removing their ephemeral entries and waking their watchers.
pub fn expire_sessions_tx(tx: &mut dyn Tx, now_us: i64) -> Result<Expired> {
    const LAPSED: &str = "SELECT realm, session FROM name_session \
         WHERE p_key = $1 AND expires_us <= $2 ORDER BY expires_us LIMIT 64";
    debug_assert!(LAPSED.ends_with(&format!("LIMIT {EXPIRE_SESSIONS_MAX}")));
    let pk = p_key(tx);
    let rows = tx.query(LAPSED, params![pk, now_us])?;
    let mut out = Expired::default();
    for r in rows.iter() {
        let (realm, session): (String, String) = (r.get(0)?, r.get(1)?);
        tx.execute(
            "DELETE FROM name_session WHERE p_key = $1 AND realm = $2 AND session = $3",
            params![pk, realm.as_str(), session.as_str()],
        )?;
        out.entries += remove_ephemerals(tx, &realm, &session, now_us)?;
        out.sessions.push((realm, session));
    }
    out.next_us = tx
        .query_one(
            "SELECT min(expires_us) FROM name_session WHERE p_key = $1",
            params![pk],
        )?
        .get(0)?;
    Ok(out)
}

// ---- the /proc view ----

fn proc_view_entry(tx: &mut dyn Tx, realm: &str, path: &str) -> Result<Entry> {
    if path == PROC_VIEW {
        return Ok(Entry {
            path: PROC_VIEW.into(),
            kind: Kind::Dir,
            data: Vec::new(),
            version: 0,
            owner: "tabos".into(),
            mode: 0o555,
            session: None,
            created_us: 0,
            modified_us: 0,
        });
    }
    let pid = &path[PROC_VIEW.len() + 1..];
    let Ok(pid) = crate::ids::Pid::new(pid) else {
        return Err(Error::NotFound(format!("{path} in realm {realm:?}")));
    };
    // The view reads `proc` itself, read-only: procs (above names in the
    // kernel's layers) owns the table and is its only writer.
    let row = tx.query_opt(
        "SELECT state, worker_id, exit_status, error, spawn_us, start_us, exit_us FROM proc \
         WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![p_key(tx), realm, pid.as_str()],
    )?;
    let Some(r) = row else {
        return Err(Error::NotFound(format!("{path} in realm {realm:?}")));
    };
    let (state, worker, status, error): (String, Option<String>, Option<i64>, Option<String>) =
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
    let (spawn_us, start_us, exit_us): (i64, Option<i64>, Option<i64>) =
        (r.get(4)?, r.get(5)?, r.get(6)?);
    let mut text = format!("state {state}\n");
    if let Some(w) = worker {
        text.push_str(&format!("worker {w}\n"));
    }
    if let Some(s) = status {
        text.push_str(&format!("exit_status {s}\n"));
    }
    if let Some(e) = error {
        text.push_str(&format!("error {e}\n"));
    }
    Ok(Entry {
        path: path.to_string(),
        kind: Kind::File,
        data: text.into_bytes(),
        version: 0,
        owner: "tabos".into(),
        mode: 0o444,
        session: None,
        created_us: spawn_us,
        modified_us: exit_us.or(start_us).unwrap_or(spawn_us),
    })
}

fn proc_view_dir(tx: &mut dyn Tx, realm: &str) -> Result<(Vec<Entry>, bool, i64)> {
    const PIDS: &str =
        "SELECT pid FROM proc WHERE p_key = $1 AND realm = $2 ORDER BY pid LIMIT 10001";
    let rows = tx.query(PIDS, params![p_key(tx), realm])?;
    let mut out = Vec::new();
    for r in rows.iter().take(READDIR_MAX) {
        let pid: String = r.get(0)?;
        out.push(proc_view_entry(tx, realm, &format!("{PROC_VIEW}/{pid}"))?);
    }
    Ok((out, rows.len() > READDIR_MAX, 0))
}

// ---- operations: each acts for a caller and checks it ----

/// What the namespace's operations refuse to a scoped credential.
const USE: &str = "use the namespace";

/// Creates `path` for `who` (exclusive), owned by them, with `mode` (0:
/// the default) and, with `session`, ephemeral on that session (theirs).
/// Needs role member. Returns the new entry's version (1).
#[allow(clippy::too_many_arguments)]
pub fn create(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    kind: Kind,
    data: &[u8],
    mode: i64,
    session: Option<&str>,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<i64> {
    who.may(Role::Member, USE)?;
    let realm = who.realm();
    permit_tx(tx, realm, who, NameOp::Create(path))?;
    if let Some(s) = session {
        permit_tx(tx, realm, who, NameOp::Session(s))?;
    }
    let opts = CreateOptions {
        owner: who.user().to_string(),
        mode,
        session: session.map(str::to_string),
    };
    create_tx(tx, realm, path, kind, data, &opts, fence, now_us)
}

/// Sets a file's data for `who` ([`set_by_tx`]: a file it creates is
/// theirs). Needs role member.
pub fn set(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    data: &[u8],
    if_version: Option<i64>,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<i64> {
    who.may(Role::Member, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Write(path))?;
    set_by_tx(
        tx,
        who.realm(),
        who.user(),
        path,
        data,
        if_version,
        fence,
        now_us,
    )
}

/// The entry at `path`, if `who` may read it. Needs role reader.
pub fn get(tx: &mut dyn Tx, who: &Caller, path: &str) -> Result<Entry> {
    who.may(Role::Reader, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Read(path))?;
    get_tx(tx, who.realm(), path)
}

/// Removes `path` ([`remove_tx`]) for `who`. Needs role member.
pub fn remove(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    if_version: Option<i64>,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<()> {
    who.may(Role::Member, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Remove(path))?;
    remove_tx(tx, who.realm(), path, if_version, fence, now_us)
}

/// Renames `from` to `to` ([`rename_tx`]) for `who`. Needs role member.
pub fn rename(
    tx: &mut dyn Tx,
    who: &Caller,
    from: &str,
    to: &str,
    fence: Option<&Fence>,
    now_us: i64,
) -> Result<()> {
    who.may(Role::Member, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Rename(from, to))?;
    rename_tx(tx, who.realm(), from, to, fence, now_us)
}

/// Lists `dir` ([`readdir_tx`]) for `who`. Needs role reader.
pub fn read_dir(tx: &mut dyn Tx, who: &Caller, dir: &str) -> Result<(Vec<Entry>, bool, i64)> {
    who.may(Role::Reader, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::List(dir))?;
    readdir_tx(tx, who.realm(), dir)
}

/// Raises `path`'s epoch for `who` ([`advance_epoch_by_tx`]). Needs role
/// member.
pub fn advance_epoch(tx: &mut dyn Tx, who: &Caller, path: &str, now_us: i64) -> Result<i64> {
    who.may(Role::Member, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Write(path))?;
    advance_epoch_by_tx(tx, who.realm(), who.user(), path, now_us)
}

/// Checks `fence` for `who` ([`check_fence_tx`]). Needs role member.
pub fn fence(tx: &mut dyn Tx, who: &Caller, fence: &Fence, now_us: i64) -> Result<()> {
    who.may(Role::Member, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Fence(&fence.dir))?;
    check_fence_tx(tx, who.realm(), fence, now_us)
}

/// Opens `session` for `who` (theirs) for `ttl_us`. Needs role member.
/// Returns when it lapses unless renewed.
pub fn open_session(
    tx: &mut dyn Tx,
    who: &Caller,
    session: &str,
    ttl_us: i64,
    now_us: i64,
) -> Result<i64> {
    who.may(Role::Member, USE)?;
    open_session_tx(tx, who.realm(), session, who.user(), ttl_us, now_us)?;
    Ok(now_us + ttl_us)
}

/// Renews `who`'s `session`. Needs role member.
pub fn renew_session(tx: &mut dyn Tx, who: &Caller, session: &str, now_us: i64) -> Result<i64> {
    who.may(Role::Member, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Session(session))?;
    renew_session_tx(tx, who.realm(), session, now_us)
}

/// Closes `who`'s `session`, removing its ephemeral entries. Needs role
/// member.
pub fn close_session(tx: &mut dyn Tx, who: &Caller, session: &str, now_us: i64) -> Result<usize> {
    who.may(Role::Member, USE)?;
    permit_tx(tx, who.realm(), who, NameOp::Session(session))?;
    close_session_tx(tx, who.realm(), session, now_us)
}

/// Whether `who` may watch `path`: `dir` (a directory's changes) is listing
/// it; waiting for a path is reading its directory. Needs role reader.
pub fn may_watch(tx: &mut dyn Tx, who: &Caller, path: &str, dir: bool) -> Result<()> {
    who.may(Role::Reader, USE)?;
    validate_path(path)?;
    let listed = if dir { path } else { parent_of(path) };
    permit_tx(tx, who.realm(), who, NameOp::List(listed))
}

// ---- calls ----

pub use crate::{call, read};

/// OpenWatch: waits until `path` exists and returns it. Needs what
/// [`may_watch`] does.
pub async fn wait_exists(store: &Store, who: &Caller, path: &str) -> Result<Entry> {
    watch_until(store, who, path, |looked| match looked {
        Err(Error::NotFound(_)) => None,
        found => Some(found),
    })
    .await
}

/// SetRemoveWatch: waits until `path` does not exist (at once if it does
/// not now). Needs what [`may_watch`] does.
pub async fn wait_removed(store: &Store, who: &Caller, path: &str) -> Result<()> {
    watch_until(store, who, path, |looked| match looked {
        Ok(_) => None,
        Err(Error::NotFound(_)) => Some(Ok(())),
        Err(e) => Some(Err(e)),
    })
    .await
}

/// Looks `path` up until `settled` takes what it found (`Some`), woken by
/// the change feed of its directory: subscribe, then look, then wait, so no
/// change between the look and the wait is missed.
async fn watch_until<T>(
    store: &Store,
    who: &Caller,
    path: &str,
    settled: impl Fn(Result<Entry>) -> Option<Result<T>>,
) -> Result<T> {
    validate_path(path)?;
    let realm = who.realm();
    let chan = dir_channel(realm, parent_of(path));
    let mut sub = store.subscribe(&chan);
    loop {
        let (w, pa) = (who.clone(), path.to_string());
        let looked = read(store, realm, move |tx| {
            may_watch(tx, &w, &pa, false)?;
            get_tx(tx, w.realm(), &pa)
        });
        if let Some(out) = settled(looked.await) {
            return out;
        }
        wait_note(store, &chan, &mut sub).await?;
    }
}

async fn wait_note(store: &Store, chan: &str, sub: &mut tabos_store::Subscription) -> Result<()> {
    match sub.recv().await {
        Ok(_) => Ok(()),
        // Cut off: changes may have been missed; resubscribe and look again.
        Err(tabos_store::Error::Lagged(_)) => {
            *sub = store.subscribe(chan);
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// SetDirWatch (needs what [`may_watch`] does): subscribes to `dir`'s
/// changes and then reads its version,
/// so every change committed after that version arrives on the
/// subscription, once and in commit order ([`Change::parse`] reads them).
pub async fn watch_dir(
    store: &Store,
    who: &Caller,
    dir: &str,
) -> Result<(tabos_store::Subscription, i64)> {
    validate_path(dir)?;
    let realm = who.realm();
    let sub = store.subscribe(&dir_channel(realm, dir));
    let (w, d) = (who.clone(), dir.to_string());
    let e = read(store, realm, move |tx| {
        may_watch(tx, &w, &d, true)?;
        get_tx(tx, w.realm(), &d)
    })
    .await?;
    if e.kind != Kind::Dir {
        return Err(Error::Invalid(format!(
            "{dir} is a {}, not a directory",
            e.kind.as_str()
        )));
    }
    Ok((sub, e.version))
}

/// A new session id: unique per process and time.
pub fn generate_session_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "s-{}-{}-{}",
        std::process::id(),
        tabos_store::now_us(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Procedure body: deletes `realm`'s namespace — entries, sessions, fences
/// (the realm's removal, [`crate::teardown`]); returns the rows deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    crate::delete_realm_rows(tx, realm, &["name_entry", "name_session", "name_fence"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_validated() {
        for ok in ["/", "/a", "/a/b c/d", "/proc/p1"] {
            assert!(validate_path(ok).is_ok(), "{ok}");
        }
        let long_component = format!("/{}", "x".repeat(COMPONENT_BYTES_MAX + 1));
        let deep = "/a".repeat(DEPTH_MAX + 1);
        let long = format!("/{}", "x/".repeat(PATH_BYTES_MAX / 2));
        for bad in [
            "",
            "a",
            "/a/",
            "//a",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/..",
            "/a\0b",
            "/a\nb",
            &long_component,
            &deep,
            &long,
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parent_of("/a/b"), "/a");
        assert_eq!(parent_of("/a"), "/");
        assert!(is_within("/a/b", "/a") && is_within("/a", "/a") && is_within("/x", "/"));
        assert!(!is_within("/ab", "/a"));
        assert!(
            dir_channel(&"r".repeat(64), &long[..1000]).len()
                <= tabos_store::feed::CHANNEL_BYTES_MAX
        );
        assert_eq!(
            Change::parse("create 3 /a/b c"),
            Some(Change {
                op: "create".into(),
                version: 3,
                path: "/a/b c".into()
            })
        );
    }
}
