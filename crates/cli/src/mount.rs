//! `tabos mount DIR`: a realm's tabos fs as a Linux directory (FUSE, the
//! `fuser` crate), so ls, cat, cp, grep, rsync and editors work on it —
//! σOS lets Linux tools explore a realm through a 9P mount.
//!
//! Every operation is a call of the node's Fs API with the command's
//! credential (and `--user`, an operator's only), so the node decides
//! permissions exactly as for `tabos fs`: the kernel's own permission
//! checks are off (no `default_permissions`), and whoever uses the mount
//! acts as that credential. Inode numbers are handed out per file id as
//! the kernel looks names up (`Inodes`), so the names of one file (hard
//! links) share one.
//!
//! Entries and attributes: other clients change the files too, so the
//! mount watches the realm's file changes (the Fs API's `Watch`, from the
//! change feed) and tells the kernel to drop what it holds of a changed
//! name or file (FUSE's inval_entry and inval_inode); while the watch is
//! up the kernel keeps entries and attributes for [`WATCHED_TTL`] (a tree
//! looked at again — `git status` — is answered from its caches), and for
//! [`TTL`] while it is down (not yet started, cut off, refused), when every
//! entry it held is dropped. An answer read while a change came in is kept
//! for [`TTL`] only ([`Watched`]).
//!
//! Open files: `open` (and `create`) opens a node handle on the mount's
//! names session, checking the mode for the access asked; reads, writes,
//! ftruncate and fstat go through it, so a file unlinked or renamed over
//! while open stays readable and writable until its last close, as on a
//! local filesystem. The kernel keeps a file's pages across opens while
//! the file's version (change time, modification time, size) is the one
//! it cached: a file read again is read from memory, and a change made by
//! another client is seen by the next open (NFS's close-to-open
//! consistency). Small contiguous writes through one open file are held
//! and sent together ([`WRITE_BUFFER_BYTES`] a call) — a full buffer by a
//! thread of its own while the program writes the next ([`WriteBehind`]),
//! everything held before any other operation of the mount and at the
//! file's close or fsync, which report a failure of the writes sent, as
//! NFS's close and fsync do. The session is renewed while the mount runs; if the
//! mount dies, its handles go when the session lapses (`--session-ttl`).
//!
//! Provenance: each open names the Linux process behind it (pid, uid,
//! executable: [`host_caller`]) in the node's `fs_open` event, so "which
//! program read it" has an answer also when the kernel's page cache
//! answers the reads themselves and they never reach the node. A reader's
//! mount (no session, no handles) opens nothing on the node: its callers
//! are not named.
//!
//! Times: utimensat sets a file's access and modification times (touch,
//! `tar xf`, `cp -p`, `rsync -a`); reads do not move the access time (as
//! on a noatime mount). `statvfs` (df) reports the realm's storage quota
//! and use. Hard links and symbolic links are the node's (`link`,
//! `symlink`, `readlink`); the Linux VFS follows symlinks.
//!
//! Named pipes: mkfifo makes one of the node's (the kernel's `fs::fifo`), shown as an empty regular file opened direct and
//! unseekable — Linux serves a FIFO inode's I/O itself, so a real FIFO
//! would be a pipe of this machine only; this way `cat` on one machine
//! reads what `echo` writes on another, with the node's pipe semantics
//! (back-pressure, EOF when the writers close, EPIPE). Their reads and
//! writes wait on the mount's runtime, not a FUSE thread.
//!
//! Not supported (EPERM/ENOSYS): other special files (devices, sockets),
//! extended attributes, locks.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use tabos_client::proto::{self, FsStat};

use crate::procs::RealmArg;
use crate::NodeAddr;

/// How long the kernel may keep an entry's or a file's attributes while
/// the mount does not watch the realm's changes.
pub const TTL: Duration = Duration::from_secs(1);
/// How long the kernel may keep them while the mount watches (a change
/// drops them sooner): NFS's longest attribute cache time.
pub const WATCHED_TTL: Duration = Duration::from_secs(60);
/// Longest wait before watching again after a watch ended (doubling from
/// a tenth of a second).
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(10);
/// Longest the mount waits for its watch to begin before it mounts
/// anyway (on [`TTL`] until the watch begins).
pub const WATCH_START_WAIT: Duration = Duration::from_secs(5);
/// Most bytes one read asks the node for (the API's chunk).
pub const READ_BYTES_MAX: u32 = 4 << 20;
/// Most bytes of one open file's writes held before they are sent (as
/// one call, the node's largest write): contiguous small writes (a
/// program writing 4 KiB at a time) cost one call per this many bytes
/// instead of one each — and a file kept in the block store one sync of
/// its device per call.
pub const WRITE_BUFFER_BYTES: usize = 4 << 20;
/// Most open files holding buffered writes at once (so at most this many
/// times [`WRITE_BUFFER_BYTES`] held); past it a write goes to the node at
/// once.
pub const WRITE_BUFFERS_MAX: usize = 16;
/// Most full buffers on their way to the node at once, sent in order by
/// the mount's write-behind thread while the program goes on writing the
/// next (NFS's asynchronous write-back); past it a write waits for room.
pub const WRITES_BEHIND_MAX: usize = 2;
/// Most threads taking the kernel's FUSE requests ([`fuse_threads`]).
pub const FUSE_THREADS_MAX: usize = 4;

/// Threads taking the kernel's requests: one per CPU, at least two (one
/// may wait on the node while another answers) and at most
/// [`FUSE_THREADS_MAX`]. The kernel hands each request to the thread
/// that has waited longest, so threads past the CPUs only add wake-ups on
/// a CPU the program is not on: 4 KiB writes on this 2-CPU machine ran at
/// ~213 MB/s with four threads and ~255 MB/s with two (fio, 12 runs
/// each).
fn fuse_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, FUSE_THREADS_MAX)
}

/// The file-type bits of a mode, and a FIFO's (Linux's S_IFMT, S_IFIFO).
const S_IFMT: u32 = 0o170_000;
const S_IFIFO: u32 = 0o010_000;

/// The block `statvfs` counts in.
pub const STATFS_BLOCK: u64 = 4096;
/// What `statvfs` shows free for a realm without a storage quota.
pub const UNLIMITED_FREE_BYTES: u64 = 1 << 40;
/// Longest name in a directory (NAME_MAX): a longer one is ENAMETOOLONG.
pub const NAME_BYTES_MAX: usize = 255;
/// Most files the inode table remembers before it forgets those not open
/// (the kernel looks them up again).
pub const INODES_MAX: usize = 1 << 20;
/// The mount's names session lapses this long after the mount stops
/// renewing it (a crash): then the node drops its open handles
/// (`--session-ttl`, at most [`SESSION_TTL_MAX_SECS`]).
pub const SESSION_TTL_SECS: u64 = 30;
pub const SESSION_TTL_MAX_SECS: u64 = 3_600;

#[derive(clap::Args)]
pub struct Args {
    /// The empty directory to mount on
    dir: std::path::PathBuf,
    /// Mount it read-only
    #[arg(long)]
    read_only: bool,
    /// Let other local users use the mount too: with an operator's
    /// credential (and no --user) each acts as the tabos user of its uid
    /// (`root` for 0), so the files' modes apply to each; otherwise all act
    /// as this credential's user
    #[arg(long)]
    allow_other: bool,
    /// The fs user to act as (an operator's credential only)
    /// [default: the credential's user]
    #[arg(long, env = "TABOS_USER")]
    user: Option<String>,
    /// How long the node keeps the handles of files open through this
    /// mount after the mount stops renewing its session (it died): files
    /// removed while open are reclaimed then
    #[arg(long, value_name = "SECONDS", default_value_t = SESSION_TTL_SECS,
          value_parser = clap::value_parser!(u64).range(1..=SESSION_TTL_MAX_SECS))]
    session_ttl: u64,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// One file the kernel knows by inode number: its node id and the names
/// it was seen under (several for hard links; none once removed while
/// open).
struct Inode {
    id: String,
    paths: Vec<String>,
    /// Handles open on it (it is kept while any is).
    open: usize,
    /// The version of its contents the kernel's page cache may hold: what
    /// the node said at its last open through this mount.
    cached: Option<Version>,
    /// A directory's: the watch's count ([`Watched`]) when a name in it
    /// was last told changed, and when its listing was last let be cached
    /// (the kernel keeps a listing while neither moved: FOPEN_CACHE_DIR).
    dir_changed: u64,
    dir_listed: Option<u64>,
}

/// A file's contents as of one moment, told apart as NFS's close-to-open
/// consistency does: its change time (which every write, truncate and
/// utimensat moves), modification time and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    ctime_us: i64,
    mtime_us: i64,
    size: i64,
}

impl Version {
    fn of(st: &FsStat) -> Version {
        Version {
            ctime_us: st.ctime_us,
            mtime_us: st.mtime_us,
            size: st.size,
        }
    }
}

/// Files by inode number, by node id and by path.
struct Inodes {
    nodes: HashMap<u64, Inode>,
    by_id: HashMap<String, u64>,
    by_path: HashMap<String, u64>,
    next: u64,
    /// Where what the kernel must drop goes (the invalidating thread),
    /// once the mount runs.
    told: Option<std::sync::mpsc::Sender<Vec<Inval>>>,
}

impl Inodes {
    fn new() -> Inodes {
        let mut i = Inodes {
            nodes: HashMap::new(),
            by_id: HashMap::new(),
            by_path: HashMap::new(),
            next: 2,
            told: None,
        };
        i.nodes.insert(
            1,
            Inode {
                id: String::new(),
                paths: vec!["/".into()],
                open: 0,
                cached: None,
                dir_changed: 0,
                dir_listed: None,
            },
        );
        i.by_id.insert(String::new(), 1);
        i.by_path.insert("/".into(), 1);
        i
    }

    /// The inode number of the file `id`, now seen at `path`.
    fn ino(&mut self, path: &str, id: &str) -> u64 {
        if path == "/" {
            return 1;
        }
        match self.by_path.get(path) {
            Some(&i) if self.nodes.get(&i).is_some_and(|n| n.id == id) => return i,
            // Another file had this name before: it has it no more.
            Some(_) => self.forget(path),
            None => {}
        }
        if self.nodes.len() >= INODES_MAX {
            self.shrink();
        }
        let i = match self.by_id.get(id) {
            Some(&i) => i,
            None => {
                let i = self.next;
                self.next += 1;
                self.nodes.insert(
                    i,
                    Inode {
                        id: id.to_string(),
                        paths: Vec::new(),
                        open: 0,
                        cached: None,
                        dir_changed: 0,
                        dir_listed: None,
                    },
                );
                self.by_id.insert(id.to_string(), i);
                i
            }
        };
        if let Some(n) = self.nodes.get_mut(&i) {
            n.paths.push(path.to_string());
        }
        self.by_path.insert(path.to_string(), i);
        i
    }

    /// A name of `ino` to reach it by.
    fn path(&self, ino: u64) -> Option<String> {
        self.nodes.get(&ino).and_then(|n| n.paths.first().cloned())
    }

    /// `path` names nothing any more.
    fn forget(&mut self, path: &str) {
        let Some(i) = self.by_path.remove(path) else {
            return;
        };
        if let Some(n) = self.nodes.get_mut(&i) {
            n.paths.retain(|p| p != path);
        }
        self.drop_if_unused(i);
    }

    fn drop_if_unused(&mut self, i: u64) {
        if i != 1
            && self
                .nodes
                .get(&i)
                .is_some_and(|n| n.paths.is_empty() && n.open == 0)
        {
            if let Some(n) = self.nodes.remove(&i) {
                self.by_id.remove(&n.id);
            }
        }
    }

    /// Forgets every file not open (and every name): the kernel looks the
    /// names up again — told to drop every entry it holds, since the
    /// numbers they lead to are forgotten.
    fn shrink(&mut self) {
        if let Some(told) = &self.told {
            let _ = told.send(self.everything());
        }
        let open: Vec<(u64, Inode)> = self
            .nodes
            .drain()
            .filter(|(i, n)| *i != 1 && n.open > 0)
            .map(|(i, n)| {
                (
                    i,
                    Inode {
                        paths: Vec::new(),
                        ..n
                    },
                )
            })
            .collect();
        let (next, told) = (self.next, self.told.take());
        *self = Inodes::new();
        (self.next, self.told) = (next, told);
        for (i, n) in open {
            self.by_id.insert(n.id.clone(), i);
            self.nodes.insert(i, n);
        }
    }

    /// What the kernel must drop when `change` was made by another client
    /// (or this one), told at count `told`: a name's entry, and its
    /// directory's attributes and cached listing; a file's attributes.
    fn dropped_by(&mut self, change: &proto::FsChange, told: u64, out: &mut Vec<Inval>) {
        match change.kind() {
            proto::FsChangeKind::Name => {
                let path = change.path.as_str();
                let (dir, name) = match path.rfind('/') {
                    Some(0) => ("/", &path[1..]),
                    Some(i) => (&path[..i], &path[i + 1..]),
                    None => return,
                };
                if let Some(&d) = self.by_path.get(dir) {
                    out.push(Inval::Entry(d, name.into()));
                    out.push(Inval::Listing(d));
                    if let Some(n) = self.nodes.get_mut(&d) {
                        n.dir_changed = told;
                    }
                }
                if let Some(&i) = self.by_path.get(path) {
                    out.push(Inval::Attrs(i));
                }
            }
            proto::FsChangeKind::File => {
                if let Some(&i) = self.by_id.get(&change.id) {
                    out.push(Inval::Attrs(i));
                }
            }
            proto::FsChangeKind::Unspecified => {}
        }
    }

    /// Every entry, every file's attributes and every listing the kernel
    /// may hold.
    fn everything(&self) -> Vec<Inval> {
        let mut out: Vec<Inval> = self.nodes.keys().map(|&i| Inval::Listing(i)).collect();
        for path in self.by_path.keys() {
            if let Some(i) = path.rfind('/') {
                let dir = if i == 0 { "/" } else { &path[..i] };
                if let Some(&d) = self.by_path.get(dir) {
                    out.push(Inval::Entry(d, path[i + 1..].into()));
                }
            }
        }
        out
    }

    fn opened(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open += 1;
        }
    }

    /// Whether the kernel may keep the pages it has of `ino`, opened now
    /// at `now`: only if they are of that version (what was cached since
    /// is what the mount read or wrote of it). Remembers `now` either way:
    /// without [`FopenFlags::FOPEN_KEEP_CACHE`] the kernel drops the pages.
    /// Whether the kernel cached pages of `ino` at a version other than
    /// `now`: another client changed it since (its attributes may be old
    /// too, if the change's note is still on its way).
    fn changed_since_cached(&self, ino: u64, now: Version) -> bool {
        self.nodes
            .get(&ino)
            .and_then(|n| n.cached)
            .is_some_and(|c| c != now)
    }

    fn keep_cache(&mut self, ino: u64, now: Version) -> bool {
        self.nodes
            .get_mut(&ino)
            .is_some_and(|n| n.cached.replace(now) == Some(now))
    }

    fn closed(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open = n.open.saturating_sub(1);
        }
        self.drop_if_unused(ino);
    }

    /// `from` (and everything under it) is now `to`.
    fn rename(&mut self, from: &str, to: &str) {
        let moved: Vec<(String, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| *p == from || p.starts_with(&format!("{from}/")))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        self.forget(to);
        for (p, i) in moved {
            self.by_path.remove(&p);
            let new = format!("{to}{}", &p[from.len()..]);
            if let Some(n) = self.nodes.get_mut(&i) {
                for q in n.paths.iter_mut().filter(|q| **q == p) {
                    q.clone_from(&new);
                }
            }
            self.by_path.insert(new, i);
        }
    }
}

/// What the kernel is told to drop.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Inval {
    /// The entry `name` in directory inode `0`.
    Entry(u64, std::ffi::OsString),
    /// An inode's attributes (not its pages: those follow the file's
    /// version at the next open, close-to-open).
    Attrs(u64),
    /// An inode's attributes and pages: a directory's cached listing.
    Listing(u64),
}

/// Whether the mount is told of the realm's changes now, and a count of
/// what it was told, so an answer read while a change came in is not
/// kept long: the kernel drops an entry or attributes it holds when told,
/// but not those of an answer still on its way to it.
#[derive(Default)]
struct Watched {
    up: std::sync::atomic::AtomicBool,
    told: std::sync::atomic::AtomicU64,
    /// The count when the watch last began.
    up_at: std::sync::atomic::AtomicU64,
}

impl Watched {
    /// Where the count is as an operation starts.
    fn since(&self) -> u64 {
        self.told.load(std::sync::atomic::Ordering::Acquire)
    }

    /// How long the kernel may keep what an operation that started at
    /// `since` read.
    fn ttl(&self, since: u64) -> Duration {
        use std::sync::atomic::Ordering::Acquire;
        if self.up.load(Acquire) && self.told.load(Acquire) == since {
            WATCHED_TTL
        } else {
            TTL
        }
    }

    /// A change came in (or the watch began or ended).
    fn tell(&self) {
        self.told.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn set_up(&self, up: bool) {
        self.tell();
        self.up.store(up, std::sync::atomic::Ordering::Release);
        self.tell();
        if up {
            self.up_at
                .store(self.since(), std::sync::atomic::Ordering::Release);
        }
    }

    /// Whether the kernel may cache the listing of directory `n`, opened
    /// now at count `since`, and keep what it cached before: it may cache
    /// while the watch is up, and keep while no name in it was told
    /// changed since its last listing began, in this watch.
    fn listing(&self, n: &mut Inode, since: u64) -> FopenFlags {
        use std::sync::atomic::Ordering::Acquire;
        if !self.up.load(Acquire) {
            n.dir_listed = None;
            return FopenFlags::empty();
        }
        let keep = n
            .dir_listed
            .is_some_and(|l| l >= self.up_at.load(Acquire) && n.dir_changed <= l);
        n.dir_listed = Some(since);
        if keep {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_CACHE_DIR
        }
    }
}

/// What an open tells the kernel of its cached pages of the file.
fn keep_flag(keep: bool) -> FopenFlags {
    if keep {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::empty()
    }
}

/// A handle the mount gave the kernel: the node's handle on the file.
struct Open {
    ino: u64,
    handle: tabos_client::fs::FsHandle,
    user: String,
    /// A named pipe's: reads and writes go straight to the node, off the
    /// FUSE thread (they wait for the other end).
    fifo: bool,
}

struct TabosFs {
    client: tabos_client::Client,
    realm: String,
    /// Who the calls act as: one fs user (the credential's, or `--user`),
    /// or each Linux uid as the tabos user of that number (`root` for 0)
    /// — an operator's mount shared with `--allow-other`.
    user: Acting,
    rt: tokio::runtime::Runtime,
    inodes: std::sync::Arc<Mutex<Inodes>>,
    watched: std::sync::Arc<Watched>,
    /// The kernel's ear, once the mount runs.
    notifier: std::sync::Arc<std::sync::OnceLock<fuser::Notifier>>,
    /// The names session handles are opened on (renewed while it lives);
    /// `None` for a reader's credential, which may open none: its files
    /// are read by name.
    session: Option<tabos_client::names::Session>,
    /// Open files by the kernel's file handle.
    open: Mutex<HashMap<u64, Open>>,
    next_fh: std::sync::atomic::AtomicU64,
    /// Writes not sent yet, by the kernel's file handle (see
    /// [`TabosFs::settle`]).
    buffered: Mutex<HashMap<u64, Buffered>>,
    /// Held while buffered writes are handed to `behind` or sent (taken
    /// before `buffered`): whoever settles after that began waits for it
    /// to end — a close must not return, nor the node's handle close,
    /// while another thread's send of its writes is on its way.
    sending: Mutex<()>,
    /// Sends full buffers in order while the writes go on.
    behind: WriteBehind,
    /// What sending a handle's buffered writes met when another operation
    /// or the write-behind thread sent them: the handle's next write,
    /// flush (close) or fsync fails with it, as NFS reports a write-back
    /// error.
    deferred: std::sync::Arc<Mutex<HashMap<u64, Errno>>>,
}

/// What the write-behind thread is handed, in order.
enum Behind {
    /// A handle's buffered writes to send.
    Send(u64, Buffered),
    /// Told when everything handed before it has been sent.
    Barrier(std::sync::mpsc::Sender<()>),
}

/// The mount's write-behind thread: full buffers are sent by it, one at a
/// time in the order handed, so a program's next writes are held while
/// the last are on their way, at most [`WRITES_BEHIND_MAX`] waiting.
/// What a send meets goes into the mount's `deferred` for its handle.
struct WriteBehind {
    queue: std::sync::mpsc::SyncSender<Behind>,
    /// Buffers handed and not yet sent (or failed).
    pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl WriteBehind {
    fn start(
        client: tabos_client::Client,
        realm: String,
        rt: tokio::runtime::Handle,
        deferred: std::sync::Arc<Mutex<HashMap<u64, Errno>>>,
    ) -> anyhow::Result<WriteBehind> {
        let (queue, jobs) = std::sync::mpsc::sync_channel::<Behind>(WRITES_BEHIND_MAX);
        let pending = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let left = pending.clone();
        std::thread::Builder::new()
            .name("mount-write-behind".into())
            .spawn(move || {
                for job in jobs {
                    match job {
                        Behind::Send(fh, b) => {
                            if let Err(e) = send_buffered(&rt, &client, &realm, b) {
                                deferred
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .insert(fh, e);
                            }
                            left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                        }
                        Behind::Barrier(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .context("start the mount's write-behind thread")?;
        Ok(WriteBehind { queue, pending })
    }

    /// Hands `b` (the writes of kernel handle `fh`) to be sent after
    /// everything handed before; waits while [`WRITES_BEHIND_MAX`] wait.
    fn hand(&self, fh: u64, b: Buffered) -> Result<(), Errno> {
        self.pending
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.queue.send(Behind::Send(fh, b)).map_err(|_| {
            self.pending
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            Errno::EIO // the thread is gone: the mount is ending
        })
    }

    /// Whether anything handed is still to be sent.
    fn busy(&self) -> bool {
        self.pending.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// Waits until everything handed before has been sent.
    fn drain(&self) {
        if !self.busy() {
            return;
        }
        let (done, sent) = std::sync::mpsc::channel();
        if self.queue.send(Behind::Barrier(done)).is_ok() {
            let _ = sent.recv();
        }
    }
}

/// Sends buffered writes as one call.
fn send_buffered(
    rt: &tokio::runtime::Handle,
    client: &tabos_client::Client,
    realm: &str,
    b: Buffered,
) -> Result<(), Errno> {
    let at = tabos_client::fs::FsTarget::Handle(b.handle);
    rt.block_on(async {
        client
            .clone()
            .fs_write(realm, &b.user, at, b.offset, b.data, false)
            .await
    })
    .map(|_| ())
    .map_err(|e| errno(&e))
}

/// Contiguous writes through one handle, held to be sent as one call.
struct Buffered {
    /// The file's inode: at most one handle of a file holds writes, so
    /// writes through two descriptors of it reach the node in the order
    /// they were made.
    ino: u64,
    handle: tabos_client::fs::FsHandle,
    user: String,
    offset: i64,
    data: Vec<u8>,
}

/// The errno a failed call means: one per reason (`tabos_client::fault`).
fn errno(e: &tabos_client::Error) -> Errno {
    use tabos_client::fault::ErrorReason as R;
    let Some(reason) = e.reason() else {
        return Errno::EIO; // the node was not reached
    };
    match reason {
        R::Invalid => Errno::EINVAL,
        R::TooLarge => Errno::EFBIG,
        R::NotFound => Errno::ENOENT,
        R::AlreadyExists => Errno::EEXIST,
        R::Full => Errno::ENOSPC,
        R::OverQuota => Errno::EDQUOT,
        R::NotADirectory => Errno::ENOTDIR,
        R::IsADirectory => Errno::EISDIR,
        R::NotEmpty => Errno::ENOTEMPTY,
        R::BrokenPipe => Errno::EPIPE,
        R::Denied | R::Unauthenticated | R::ReadOnly => Errno::EACCES,
        R::Unimplemented => Errno::ENOSYS,
        R::TimedOut => Errno::ETIMEDOUT,
        R::Cancelled => Errno::EINTR,
        R::StaleEpoch => Errno::ESTALE,
        R::Overloaded | R::Contended | R::Conflict => Errno::EAGAIN,
        R::Precondition
        | R::Mounted
        | R::ProcedureFailed
        | R::Unavailable
        | R::Internal
        | R::Unspecified => Errno::EIO,
    }
}

/// The process behind a FUSE request, as the open's provenance names it:
/// its pid and uid, and its executable's path (its command name when the
/// path cannot be read: a process gone, or one of another user's that
/// this mount may not look at), cut to what the node takes. `None` for a
/// request with no process of this pid namespace behind it (pid 0).
fn host_caller(req: &Request) -> Option<proto::FsHostCaller> {
    // The kernel gives the calling *thread*'s id; the process is its
    // thread group (the tid itself if it is gone by now).
    let tid = req.pid();
    if tid == 0 {
        return None;
    }
    let pid = std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .unwrap_or(tid);
    let program = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .or_else(|_| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim_end().to_string())
        })
        .unwrap_or_default();
    let mut program: String = program.chars().filter(|c| !c.is_control()).collect();
    if program.is_empty() {
        program = "?".into();
    }
    let mut cut = program.len().min(tabos_kernel::fs::HOST_PROGRAM_BYTES_MAX);
    while !program.is_char_boundary(cut) {
        cut -= 1;
    }
    program.truncate(cut);
    Some(proto::FsHostCaller {
        pid,
        uid: req.uid(),
        program,
    })
}

/// The uid a tabos owner shows as: `root` 0, a number itself, anyone else
/// nobody.
fn uid_of(owner: &str) -> u32 {
    match owner {
        "root" => 0,
        o => o.parse().unwrap_or(65_534),
    }
}

/// The tabos owner a uid stands for.
fn owner_of(uid: u32) -> String {
    if uid == 0 {
        "root".into()
    } else {
        uid.to_string()
    }
}

fn time(us: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us.max(0) as u64)
}

fn attr(ino: u64, s: &FsStat) -> FileAttr {
    let dir = s.r#type() == proto::FileType::Dir;
    // A named pipe shows as an empty regular file: Linux serves a FIFO
    // inode's reads and writes itself on every filesystem (a pipe local to
    // this machine), so only a regular file's reach the node — and its
    // other ends on other machines. Its opens are direct and unseekable.
    let size = match s.r#type() {
        proto::FileType::Dir | proto::FileType::Fifo => 0,
        _ => s.size.max(0) as u64,
    };
    let kind = match s.r#type() {
        proto::FileType::Dir => FileType::Directory,
        proto::FileType::Symlink => FileType::Symlink,
        _ => FileType::RegularFile,
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time(s.atime_us),
        mtime: time(s.mtime_us),
        ctime: time(s.ctime_us),
        crtime: time(s.ctime_us),
        kind,
        perm: (s.mode & 0o7777) as u16,
        nlink: if dir { 2 } else { s.nlink.max(0) as u32 },
        uid: uid_of(&s.owner),
        gid: uid_of(&s.owner),
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

/// What a lookup of a name that is not there answers, for the kernel to
/// remember (node id 0: FUSE's negative entry).
fn no_entry() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 0,
    }
}

enum Acting {
    One(String),
    PerUid,
}

impl TabosFs {
    /// The fs user a request acts as.
    fn user_for(&self, req: &Request) -> String {
        match &self.user {
            Acting::One(u) => u.clone(),
            Acting::PerUid => owner_of(req.uid()),
        }
    }

    fn c(&self) -> tabos_client::Client {
        self.client.clone()
    }

    fn inodes(&self) -> std::sync::MutexGuard<'_, Inodes> {
        self.inodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.inodes().path(u64::from(ino)).ok_or(Errno::ENOENT)
    }

    fn realm_user(&self, req: &Request) -> (String, String) {
        (self.realm.clone(), self.user_for(req))
    }

    /// The node's handle behind the kernel's `fh`, if the mount gave it.
    fn handle(&self, fh: FileHandle) -> Option<(tabos_client::fs::FsHandle, String)> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&fh.0).map(|o| (o.handle.clone(), o.user.clone()))
    }

    /// What a data call on `ino` through `fh` goes to: the handle when the
    /// mount opened one (it outlives the file's names), else the path.
    fn target(
        &self,
        ino: INodeNo,
        fh: Option<FileHandle>,
        req: &Request,
    ) -> Result<(tabos_client::fs::FsTarget, String), Errno> {
        if let Some((h, user)) = fh.and_then(|fh| self.handle(fh)) {
            return Ok((tabos_client::fs::FsTarget::Handle(h), user));
        }
        match self.path(ino) {
            Ok(p) => Ok((tabos_client::fs::FsTarget::Path(p), self.user_for(req))),
            // Removed while open: any handle open on it reaches it.
            Err(e) => {
                let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
                open.values()
                    .find(|o| o.ino == u64::from(ino))
                    .map(|o| {
                        (
                            tabos_client::fs::FsTarget::Handle(o.handle.clone()),
                            o.user.clone(),
                        )
                    })
                    .ok_or(e)
            }
        }
    }

    /// The node's handle and user of kernel handle `fh`, if it is a named
    /// pipe's.
    fn fifo_handle(&self, fh: FileHandle) -> Option<(tabos_client::fs::FsHandle, String)> {
        let open = Self::lock(&self.open);
        open.get(&fh.0)
            .filter(|o| o.fifo)
            .map(|o| (o.handle.clone(), o.user.clone()))
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends buffered writes as one call.
    fn send(&self, b: Buffered) -> Result<(), Errno> {
        send_buffered(self.rt.handle(), &self.client, &self.realm, b)
    }

    /// Sends every open file's buffered writes and waits for those the
    /// write-behind thread holds, before any operation other than a
    /// write: whatever this mount does next sees them (other clients see
    /// them once the file is closed or synced: NFS's close-to-open
    /// consistency). A failure is kept for its handle.
    fn settle(&self) {
        if Self::lock(&self.buffered).is_empty()
            && !self.behind.busy()
            && self.sending.try_lock().is_ok()
        {
            return; // nothing held, nothing on its way
        }
        let _sending = Self::lock(&self.sending);
        // In order after whatever the thread holds.
        self.behind.drain();
        let all: Vec<(u64, Buffered)> = Self::lock(&self.buffered).drain().collect();
        for (fh, b) in all {
            if let Err(e) = self.send(b) {
                Self::lock(&self.deferred).insert(fh, e);
            }
        }
    }

    /// [`TabosFs::settle`], then what `fh`'s buffered writes met, if
    /// anything: what its flush (close) or fsync says.
    fn settle_handle(&self, fh: FileHandle) -> Result<(), Errno> {
        self.settle();
        Self::lock(&self.deferred).remove(&fh.0).map_or(Ok(()), Err)
    }

    /// A write through `fh`: appended to its buffer when it continues it,
    /// else the buffer is sent and this write starts the next one (or
    /// goes at once, when it is large or too many files hold buffers).
    fn write_through(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        data: &[u8],
    ) -> Result<(), Errno> {
        if let Some(e) = Self::lock(&self.deferred).remove(&fh.0) {
            return Err(e);
        }
        let (at, user) = self.target(ino, Some(fh), req)?;
        let handle = match at {
            tabos_client::fs::FsTarget::Handle(h) if data.len() < WRITE_BUFFER_BYTES => h,
            at => {
                // No handle of ours (a reader's mount) or a large write.
                self.settle_handle(fh)?;
                let realm = self.realm.clone();
                let data = data.to_vec();
                return self
                    .rt
                    .block_on(async {
                        self.c()
                            .fs_write(&realm, &user, at, offset, data, false)
                            .await
                    })
                    .map(|_| ())
                    .map_err(|e| errno(&e));
            }
        };
        {
            // The common case: this write continues the buffer.
            let mut bufs = Self::lock(&self.buffered);
            if let Some(b) = bufs.get_mut(&fh.0) {
                if b.offset + b.data.len() as i64 == offset
                    && b.data.len() + data.len() <= WRITE_BUFFER_BYTES
                {
                    b.data.extend_from_slice(data);
                    return Ok(());
                }
            }
        }
        let _sending = Self::lock(&self.sending);
        let new = Buffered {
            ino: u64::from(ino),
            handle,
            user,
            offset,
            data: data.to_vec(),
        };
        let (before, others, new) = {
            let mut bufs = Self::lock(&self.buffered);
            let before = bufs.remove(&fh.0);
            // Writes another handle of this file holds go first.
            let others: Vec<u64> = bufs
                .iter()
                .filter(|(_, b)| b.ino == new.ino)
                .map(|(fh, _)| *fh)
                .collect();
            let others: Vec<(u64, Buffered)> = others
                .into_iter()
                .filter_map(|fh| bufs.remove(&fh).map(|b| (fh, b)))
                .collect();
            if bufs.len() < WRITE_BUFFERS_MAX {
                bufs.insert(fh.0, new);
                (before, others, None)
            } else {
                (before, others, Some(new))
            }
        };
        // In order, handed with the sending lock held: a settle that
        // follows waits for them. The write is answered once they are
        // handed; what their sends meet is told to their handles' next
        // write, close or fsync.
        for (other, b) in others {
            self.behind.hand(other, b)?;
        }
        if let Some(b) = before {
            self.behind.hand(fh.0, b)?;
        }
        match new {
            Some(b) => self.behind.hand(fh.0, b),
            None => Ok(()),
        }
    }

    /// Opens the file `ino` for `flags`' access: a node handle, numbered
    /// for the kernel, and how the kernel is to treat its cached pages.
    fn open_file(
        &self,
        req: &Request,
        ino: INodeNo,
        flags: OpenFlags,
    ) -> Result<(FileHandle, FopenFlags), Errno> {
        let path = self.path(ino)?;
        self.open_path(req, &path, flags, None)
            .map(|(fh, _, keep)| (fh, keep))
    }

    /// Opens `path` (made first, with `create`'s mode, when given): the
    /// kernel's file handle, the file's attributes, and
    /// [`FopenFlags::FOPEN_KEEP_CACHE`] when the pages the kernel holds of
    /// it are of the version opened (close-to-open consistency, as NFS
    /// has: a change by another client is seen by the next open).
    fn open_path(
        &self,
        req: &Request,
        path: &str,
        flags: OpenFlags,
        create: Option<i64>,
    ) -> Result<(FileHandle, FileAttr, FopenFlags), Errno> {
        let (realm, user) = self.realm_user(req);
        let Some(session) = &self.session else {
            // A reader's mount: no handle, reads by name (the kernel's
            // FileHandle 0 is none of ours); a create is refused as the
            // node refuses a reader's.
            if create.is_some() {
                return Err(Errno::EACCES);
            }
            let st = self.stat_as(&user, path)?;
            let ino = self.inodes().ino(path, &st.id);
            let keep = keep_flag(self.keep_cache(ino, &st));
            return Ok((FileHandle(0), attr(ino, &st), keep));
        };
        let access = match flags.acc_mode() {
            fuser::OpenAccMode::O_WRONLY => proto::FsAccess::Write,
            fuser::OpenAccMode::O_RDWR => proto::FsAccess::ReadWrite,
            fuser::OpenAccMode::O_RDONLY => proto::FsAccess::Read,
        };
        let session = session.id().to_string();
        let how = tabos_client::fs::FsOpen {
            access,
            create,
            host: host_caller(req),
        };
        let (handle, st) = self
            .rt
            .block_on(async {
                self.c()
                    .fs_open_for(&realm, &user, path, &session, how)
                    .await
            })
            .map_err(|e| errno(&e))?;
        let fh = self
            .next_fh
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ino = {
            let mut inodes = self.inodes();
            let ino = inodes.ino(path, &st.id);
            inodes.opened(ino);
            ino
        };
        let fifo = st.r#type() == proto::FileType::Fifo;
        let flags = if fifo {
            // No page cache, no offsets: every read and write is the pipe's.
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NONSEEKABLE | FopenFlags::FOPEN_STREAM
        } else {
            keep_flag(self.keep_cache(ino, &st))
        };
        self.open.lock().unwrap_or_else(|e| e.into_inner()).insert(
            fh,
            Open {
                ino,
                handle,
                user,
                fifo,
            },
        );
        Ok((FileHandle(fh), attr(ino, &st), flags))
    }

    /// Whether the kernel may keep its pages of `ino`, opened now at
    /// `st`'s version; when another client changed the file since, its
    /// attributes go too (at once: the note of the change may still be on
    /// its way), so a read past the size the kernel held asks again.
    fn keep_cache(&self, ino: u64, st: &FsStat) -> bool {
        let now = Version::of(st);
        let mut inodes = self.inodes();
        if inodes.changed_since_cached(ino, now) {
            // Safe in a FUSE call: an inode's attributes are dropped
            // without its lock.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(INodeNo(ino), -1, 0);
            }
        }
        inodes.keep_cache(ino, now)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        if name.len() > NAME_BYTES_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        let dir = self.path(parent)?;
        Ok(if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        })
    }

    fn stat(&self, req: &Request, path: &str) -> Result<FsStat, Errno> {
        self.stat_as(&self.user_for(req), path)
    }

    fn stat_as(&self, user: &str, path: &str) -> Result<FsStat, Errno> {
        let (realm, path) = (self.realm.clone(), path.to_string());
        self.rt
            .block_on(async move { self.c().fs_stat_as(&realm, user, &path).await })
            .map_err(|e| errno(&e))
    }

    /// Stat of `ino`, through `fh`'s handle when there is one.
    fn stat_of(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: Option<FileHandle>,
    ) -> Result<FsStat, Errno> {
        let (at, user) = self.target(ino, fh, req)?;
        let realm = self.realm.clone();
        self.rt
            .block_on(async move {
                let mut c = self.c();
                match at {
                    tabos_client::fs::FsTarget::Path(p) => c.fs_stat_as(&realm, &user, &p).await,
                    tabos_client::fs::FsTarget::Handle(h) => {
                        c.fs_stat_handle(&realm, &user, &h).await
                    }
                }
            })
            .map_err(|e| errno(&e))
    }

    /// Makes `name` in `parent` — a directory (`dir`) or an empty file —
    /// with `mode`'s permission bits, and answers its attributes.
    /// unlink (`dir` false) or rmdir (`dir` true) of `name` in `parent`:
    /// the other kind of entry is EISDIR or ENOTDIR, as in Linux.
    fn remove(&self, req: &Request, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let path = self.child(parent, name)?;
        let (realm, user) = (self.realm.clone(), self.user_for(req));
        match (self.stat(req, &path)?.r#type() == proto::FileType::Dir, dir) {
            (true, false) => return Err(Errno::EISDIR),
            (false, true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        self.rt
            .block_on(async {
                let mut c = self.c();
                if dir {
                    c.fs_rmdir(&realm, &user, &path).await
                } else {
                    c.fs_unlink(&realm, &user, &path).await
                }
            })
            .map_err(|e| errno(&e))?;
        self.inodes().forget(&path);
        Ok(())
    }

    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        dir: bool,
    ) -> Result<FileAttr, Errno> {
        let path = self.child(parent, name)?;
        let (realm, user) = (self.realm.clone(), self.user_for(req));
        let mode = i64::from(mode & 0o7777);
        self.rt
            .block_on(async {
                let mut c = self.c();
                if dir {
                    c.fs_mkdir(&realm, &user, &path, mode).await
                } else {
                    c.fs_create(&realm, &user, &path, mode).await
                }
            })
            .map_err(|e| errno(&e))?;
        self.entry(req, &path)
    }

    /// The entry at `path`, numbered.
    fn entry(&self, req: &Request, path: &str) -> Result<FileAttr, Errno> {
        let s = self.stat(req, path)?;
        let ino = self.inodes().ino(path, &s.id);
        Ok(attr(ino, &s))
    }
}

impl TabosFs {
    /// Answers a lookup, or a call that made an entry, with what it found
    /// (the call started at `since`).
    fn entry_reply(&self, reply: ReplyEntry, since: u64, done: Result<FileAttr, Errno>) {
        match done {
            Ok(a) => reply.entry(&self.watched.ttl(since), &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Answers a call about inode `ino`'s attributes with what it found.
    fn attr_reply(&self, reply: ReplyAttr, since: u64, ino: INodeNo, done: Result<FsStat, Errno>) {
        match done {
            Ok(s) => reply.attr(&self.watched.ttl(since), &attr(u64::from(ino), &s)),
            Err(e) => reply.error(e),
        }
    }
}

impl Filesystem for TabosFs {
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let since = self.watched.since();
        self.settle();
        let path = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.entry(req, &path) {
            // No such name: the kernel may remember that as long as it
            // would an entry (a creation drops it) — git and make look
            // for many files that are not there, again and again.
            Err(Errno::ENOENT) if self.watched.ttl(since) == WATCHED_TTL => {
                reply.entry(&WATCHED_TTL, &no_entry(), Generation(0));
            }
            done => self.entry_reply(reply, since, done),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let since = self.watched.since();
        let flags = match self.inodes().nodes.get_mut(&u64::from(ino)) {
            Some(n) => self.watched.listing(n, since),
            None => FopenFlags::empty(),
        };
        reply.opened(FileHandle(0), flags);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let since = self.watched.since();
        self.settle();
        self.attr_reply(reply, since, ino, self.stat_of(req, ino, fh));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.settle();
        let done = self.path(ino).and_then(|path| {
            let (realm, user) = self.realm_user(req);
            self.rt
                .block_on(async { self.c().fs_readlink(&realm, &user, &path).await })
                .map_err(|e| errno(&e))
        });
        match done {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let since = self.watched.since();
        self.settle();
        let done = (|| {
            let path = self.child(parent, link_name)?;
            let target = target.to_str().ok_or(Errno::EINVAL)?;
            let (realm, user) = self.realm_user(req);
            self.rt
                .block_on(async { self.c().fs_symlink(&realm, &user, target, &path).await })
                .map_err(|e| errno(&e))?;
            self.entry(req, &path)
        })();
        self.entry_reply(reply, since, done);
    }

    /// mkfifo(1): a named pipe of the node's. Any other special file is
    /// EPERM, as on a filesystem that does not keep devices. The kernel
    /// wants the entry it made to be a FIFO; it is answered as one that
    /// is not kept (TTL 0), so the next lookup finds the regular file the
    /// mount shows a FIFO as (see `attr`), whose I/O reaches the node.
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        self.settle();
        if mode & S_IFMT != S_IFIFO {
            return reply.error(Errno::EPERM);
        }
        let done = (|| {
            let path = self.child(parent, name)?;
            let (realm, user) = self.realm_user(req);
            let perm = i64::from(mode & !umask & 0o7777);
            let st = self
                .rt
                .block_on(async { self.c().fs_mkfifo(&realm, &user, &path, perm).await })
                .map_err(|e| errno(&e))?;
            Ok(attr(self.inodes().ino(&path, &st.id), &st))
        })();
        match done {
            Ok(a) => reply.entry(
                &Duration::ZERO,
                &FileAttr {
                    kind: FileType::NamedPipe,
                    ..a
                },
                Generation(0),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let since = self.watched.since();
        self.settle();
        let done = (|| {
            let from = self.path(ino)?;
            let to = self.child(newparent, newname)?;
            if self.stat(req, &from)?.r#type() == proto::FileType::Dir {
                return Err(Errno::EPERM); // as Linux: a directory has one name
            }
            let (realm, user) = self.realm_user(req);
            self.rt
                .block_on(async { self.c().fs_link(&realm, &user, &from, &to).await })
                .map_err(|e| errno(&e))?;
            self.entry(req, &to)
        })();
        self.entry_reply(reply, since, done);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let since = self.watched.since();
        self.settle();
        let done = (|| {
            let (at, at_user) = self.target(ino, fh, req)?;
            let (realm, user) = (self.realm.clone(), self.user_for(req));
            let wanted = |t: Option<TimeOrNow>| -> Option<Option<i64>> {
                t.map(|t| match t {
                    TimeOrNow::Now => None,
                    TimeOrNow::SpecificTime(t) => Some(match t.duration_since(UNIX_EPOCH) {
                        Ok(d) => d.as_micros().min(i64::MAX as u128) as i64,
                        Err(e) => -(e.duration().as_micros().min(i64::MAX as u128) as i64),
                    }),
                })
            };
            let (atime, mtime) = (wanted(atime), wanted(mtime));
            self.rt
                .block_on(async {
                    let mut c = self.c();
                    // Mode and owner by name (the node has no fchmod).
                    if mode.is_some() || uid.is_some() {
                        let tabos_client::fs::FsTarget::Path(path) = &at else {
                            return Ok(Err(Errno::ENOENT));
                        };
                        if let Some(m) = mode {
                            c.fs_chmod(&realm, &user, path, i64::from(m & 0o7777))
                                .await?;
                        }
                        if let Some(u) = uid {
                            c.fs_chown(&realm, &user, path, &owner_of(u)).await?;
                        }
                    }
                    if let Some(sz) = size {
                        c.fs_truncate(&realm, &at_user, at.clone(), sz as i64)
                            .await?;
                    }
                    // After the size: a truncate moves the mtime too.
                    if atime.is_some() || mtime.is_some() {
                        c.fs_set_times(&realm, &at_user, at.clone(), atime, mtime)
                            .await?;
                    }
                    Ok::<_, tabos_client::Error>(Ok(()))
                })
                .map_err(|e| errno(&e))??;
            self.stat_of(req, ino, fh)
        })();
        self.attr_reply(reply, since, ino, done);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let since = self.watched.since();
        self.settle();
        let done = self.make(req, parent, name, mode & !umask, true);
        self.entry_reply(reply, since, done);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.settle();
        match self.remove(req, parent, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.settle();
        match self.remove(req, parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.settle();
        let done = (|| {
            if !flags.is_empty() {
                return Err(Errno::EINVAL); // RENAME_EXCHANGE, RENAME_NOREPLACE
            }
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            let (realm, user) = (self.realm.clone(), self.user_for(req));
            self.rt
                .block_on(async { self.c().fs_rename(&realm, &user, &from, &to).await })
                .map_err(|e| errno(&e))?;
            self.inodes().rename(&from, &to);
            Ok(())
        })();
        match done {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.settle();
        match self.open_file(req, ino, flags) {
            Ok((fh, keep)) => reply.opened(fh, keep),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Sent at the last close's flush already; whatever a write-back
        // met since has no one left to be told.
        let _ = self.settle_handle(fh);
        let open = self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        let Some(o) = open else {
            return reply.ok();
        };
        let realm = self.realm.clone();
        let closed = self
            .rt
            .block_on(async { self.c().fs_close(&realm, &o.user, &o.handle).await });
        self.inodes().closed(u64::from(ino));
        match closed {
            Ok(()) => reply.ok(),
            // Closed on the node already (its session lapsed): nothing held.
            Err(e) if errno(&e) == Errno::ENOENT => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.settle();
        if let Some((handle, user)) = self.fifo_handle(fh) {
            // Waits for a writer's bytes: on the runtime, not this thread.
            let (mut c, realm) = (self.c(), self.realm.clone());
            let at = tabos_client::fs::FsTarget::Handle(handle);
            let len = size.min(READ_BYTES_MAX);
            self.rt.spawn(async move {
                match c.fs_read(&realm, &user, at, 0, len).await {
                    Ok(data) => reply.data(&data),
                    Err(e) => reply.error(errno(&e)),
                }
            });
            return;
        }
        let done = (|| {
            let (at, user) = self.target(ino, Some(fh), req)?;
            let realm = self.realm.clone();
            let len = size.min(READ_BYTES_MAX);
            self.rt
                .block_on(async {
                    self.c()
                        .fs_read(&realm, &user, at, offset as i64, len)
                        .await
                })
                .map_err(|e| errno(&e))
        })();
        match done {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some((handle, user)) = self.fifo_handle(fh) {
            // Waits for room: on the runtime, not this thread; all of it
            // written (or EPIPE), as a blocking pipe write.
            let (mut c, realm, data) = (self.c(), self.realm.clone(), data.to_vec());
            let at = tabos_client::fs::FsTarget::Handle(handle);
            self.rt.spawn(async move {
                let n = data.len() as u32;
                match c.fs_write(&realm, &user, at, 0, data, false).await {
                    Ok(_) => reply.written(n),
                    Err(e) => reply.error(errno(&e)),
                }
            });
            return;
        }
        match self.write_through(req, ino, fh, offset as i64, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): its writes are sent (each a committed call).
        match self.settle_handle(fh) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.settle_handle(fh) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// `statvfs` (df): the realm's storage quota and what it stores, in
    /// 4 KiB blocks; a realm with no storage quota shows its use and
    /// [`UNLIMITED_FREE_BYTES`] free.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.settle();
        let realm = self.realm.clone();
        let info = self.rt.block_on(async move {
            let mut c = self.c();
            let realm = match realm.as_str() {
                "" => c.who_am_i().await?.default_realm,
                _ => realm,
            };
            let realms = c.list_realms().await?;
            Ok::<_, tabos_client::Error>(realms.into_iter().find(|r| r.realm == realm))
        });
        match info {
            Ok(Some(r)) => {
                let used = r.stored_bytes.max(0) as u64;
                let total = match r.quota_storage_mb {
                    Some(mb) => (mb.max(0) as u64) << 20,
                    None => used + UNLIMITED_FREE_BYTES,
                };
                let free = total.saturating_sub(used) / STATFS_BLOCK;
                let blocks = total.div_ceil(STATFS_BLOCK);
                reply.statfs(
                    blocks,
                    free,
                    free,
                    0,
                    0,
                    STATFS_BLOCK as u32,
                    NAME_BYTES_MAX as u32,
                    STATFS_BLOCK as u32,
                )
            }
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.settle();
        let listed = (|| {
            let dir = self.path(ino)?;
            let (realm, user) = (self.realm.clone(), self.user_for(req));
            let d = self
                .rt
                .block_on(async { self.c().fs_readdir(&realm, &user, &dir).await })
                .map_err(|e| errno(&e))?;
            // `..`'s number: the kernel answers `..` itself; any will do.
            let parent = self
                .inodes()
                .by_path
                .get(match dir.rsplit_once('/').map_or("/", |(p, _)| p) {
                    "" => "/",
                    up => up,
                })
                .copied()
                .unwrap_or(1);
            let mut entries = vec![
                (u64::from(ino), FileType::Directory, ".".to_string()),
                (parent, FileType::Directory, "..".to_string()),
            ];
            for e in d.entries {
                let name = e.path.rsplit('/').next().unwrap_or_default().to_string();
                let kind = attr(0, &e).kind;
                entries.push((self.inodes().ino(&e.path, &e.id), kind, name));
            }
            Ok(entries)
        })();
        match listed {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let since = self.watched.since();
        self.settle();
        // Made and opened in one call, as asked even when the new file's
        // mode would refuse it (open(2) with O_CREAT of a 0444 file writes).
        let mode = i64::from(mode & !umask & 0o7777);
        let done = self
            .child(parent, name)
            .and_then(|path| self.open_path(req, &path, OpenFlags(flags), Some(mode)));
        match done {
            Ok((fh, a, keep)) => {
                reply.created(&self.watched.ttl(since), &a, Generation(0), fh, keep)
            }
            Err(e) => reply.error(e),
        }
    }
}

/// `tabos mount DIR`: serves until interrupted or unmounted.
pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.dir.is_dir(),
        "{} is not a directory",
        args.dir.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = rt.block_on(args.node.connect())?;
    // The realm and user from the credential when not given, checked now
    // (a bad credential fails here, not at the first ls).
    let me = rt.block_on(client.clone().who_am_i())?;
    let realm = if args.realm.realm.is_empty() {
        me.realm.clone()
    } else {
        args.realm.realm.clone()
    };
    // An operator's mount shared with other local users acts for each as
    // the tabos user of its uid, so the node's modes apply to each.
    let user = match &args.user {
        Some(u) => Acting::One(u.clone()),
        None if args.allow_other && me.role() == proto::Role::Operator => Acting::PerUid,
        None => Acting::One(String::new()),
    };
    let session = match rt.block_on(tabos_client::names::Session::open(
        &client,
        &realm,
        "",
        Duration::from_secs(args.session_ttl),
    )) {
        Ok(s) => Some(s),
        // A reader may open no session: it reads files by name.
        Err(e) if e.reason() == Some(tabos_client::fault::ErrorReason::Denied) => {
            eprintln!(
                "note: this credential may not open a names session (a reader's): files are \
                 read by name, so one removed while open can no longer be read"
            );
            None
        }
        Err(e) => return Err(e).context("open the mount's names session"),
    };
    let watch_user = match &user {
        Acting::One(u) => u.clone(),
        Acting::PerUid => String::new(),
    };
    let (told, to_drop) = std::sync::mpsc::channel::<Vec<Inval>>();
    let inodes = std::sync::Arc::new(Mutex::new(Inodes::new()));
    lock(&inodes).told = Some(told.clone());
    let watched = std::sync::Arc::new(Watched::default());
    // Watching before mounting, so the first answers are kept long.
    let (began, watching) = tokio::sync::oneshot::channel();
    rt.spawn(watch_changes(
        client.clone(),
        realm.clone(),
        watch_user,
        inodes.clone(),
        watched.clone(),
        told,
        began,
    ));
    let watching = rt
        .block_on(async { tokio::time::timeout(WATCH_START_WAIT, watching).await })
        .ok()
        .and_then(Result::ok);
    let notifier = std::sync::Arc::new(std::sync::OnceLock::new());
    let deferred = std::sync::Arc::new(Mutex::new(HashMap::new()));
    let behind = WriteBehind::start(
        client.clone(),
        realm.clone(),
        rt.handle().clone(),
        deferred.clone(),
    )?;
    let fs = TabosFs {
        notifier: notifier.clone(),
        client,
        realm: realm.clone(),
        user,
        rt,
        inodes,
        watched,
        session,
        open: Mutex::new(HashMap::new()),
        next_fh: std::sync::atomic::AtomicU64::new(1),
        buffered: Mutex::new(HashMap::new()),
        sending: Mutex::new(()),
        behind,
        deferred,
    };
    fs.stat_as("", "/")
        .map_err(|e| anyhow::anyhow!("cannot read the root of realm {realm:?}: {e:?}"))?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("tabos:{realm}")),
        fuser::MountOption::Subtype("tabos".into()),
        if args.read_only {
            fuser::MountOption::RO
        } else {
            fuser::MountOption::RW
        },
    ];
    if args.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(fuse_threads());
    // The signals are taken before the mount is announced: whoever reads
    // that line and sends SIGTERM must find it handled (the default action
    // would leave the mount behind with no one serving it).
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the signal runtime")?;
    let (mut term, mut int) = {
        let _in = signals.enter();
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()).context("handle SIGTERM")?,
            signal(SignalKind::interrupt()).context("handle SIGINT")?,
        )
    };
    let session = fuser::spawn_mount(fs, &args.dir, &config)
        .with_context(|| format!("cannot mount on {}", args.dir.display()))?;
    // The kernel is told what to drop by a thread of its own: telling it
    // waits for the directory's lock, which a FUSE call may hold while it
    // waits for the mount's threads.
    let _ = notifier.set(session.notifier());
    let notifier = session.notifier();
    std::thread::Builder::new()
        .name("mount-inval".into())
        .spawn(move || invalidate(&notifier, &to_drop))
        .context("start the mount's invalidating thread")?;
    outln!(
        "realm {}'s files on {}, {} (Ctrl-C or umount to stop)",
        if realm.is_empty() { "default" } else { &realm },
        args.dir.display(),
        match watching {
            Some(Ok(())) => "kept in step with the realm's changes".to_string(),
            Some(Err(why)) => format!("kept {TTL:?} at most: {why}"),
            None => format!("kept {TTL:?} at most until the watch of the realm's changes begins"),
        }
    );
    // Until a signal (which unmounts) or an umount from outside: either
    // way the session ends and `join` returns.
    let dir = args.dir.clone();
    std::thread::spawn(move || {
        signals.block_on(async {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        });
        unmount(&dir);
    });
    session.join().context("the mount ended with an error")?;
    // Whoever read the first line may be gone by now.
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "unmounted");
    Ok(())
}

fn lock(inodes: &Mutex<Inodes>) -> std::sync::MutexGuard<'_, Inodes> {
    inodes.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tells the kernel to drop what it is sent, until the mount ends. A name
/// or inode it holds nothing of is no error (ENOENT, ignored).
fn invalidate(notifier: &fuser::Notifier, to_drop: &std::sync::mpsc::Receiver<Vec<Inval>>) {
    for batch in to_drop {
        for i in batch {
            let _ = match &i {
                Inval::Entry(dir, name) => notifier.inval_entry(INodeNo(*dir), name),
                Inval::Attrs(ino) => notifier.inval_inode(INodeNo(*ino), -1, 0),
                Inval::Listing(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
            };
        }
    }
}

/// Watches the realm's file changes for as long as the mount runs, and
/// has the kernel drop what they make stale; watches again after a watch
/// ends (backing off to [`WATCH_RETRY_MAX`]), with every entry dropped
/// and short timeouts meanwhile. A credential that may not watch (a
/// scoped one) or a node without the call leaves the mount on [`TTL`].
async fn watch_changes(
    client: tabos_client::Client,
    realm: String,
    user: String,
    inodes: std::sync::Arc<Mutex<Inodes>>,
    watched: std::sync::Arc<Watched>,
    told: std::sync::mpsc::Sender<Vec<Inval>>,
    began: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    use tabos_client::fault::ErrorReason as R;
    let mut began = Some(began);
    let first_wait = Duration::from_millis(100);
    let mut wait = first_wait;
    loop {
        let since = std::time::Instant::now();
        let ended = watch_once(&client, &realm, &user, &inodes, &watched, &told, &mut began).await;
        if watched.up.load(std::sync::atomic::Ordering::Acquire) {
            // Changes from now on go unseen: nothing may be kept long.
            watched.set_up(false);
            if told.send(lock(&inodes).everything()).is_err() {
                return;
            }
        }
        if let Err(e) = &ended {
            if matches!(e.reason(), Some(R::Denied | R::Unimplemented))
                || e.code() == Some(tonic::Code::Unimplemented)
            {
                let why = format!("the realm's changes cannot be watched ({e})");
                match began.take() {
                    Some(b) => {
                        let _ = b.send(Err(why));
                    }
                    None => eprintln!("note: {why}; entries and attributes are kept {TTL:?} now"),
                }
                return;
            }
        }
        if since.elapsed() > WATCH_RETRY_MAX {
            wait = first_wait;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(WATCH_RETRY_MAX);
    }
}

/// One watch, until it ends.
async fn watch_once(
    client: &tabos_client::Client,
    realm: &str,
    user: &str,
    inodes: &Mutex<Inodes>,
    watched: &Watched,
    told: &std::sync::mpsc::Sender<Vec<Inval>>,
    began: &mut Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
) -> Result<(), tabos_client::Error> {
    let mut changes = client.clone().fs_watch(realm, user).await?;
    while let Some(m) = changes.message().await? {
        if m.watching {
            watched.set_up(true);
            if let Some(b) = began.take() {
                let _ = b.send(Ok(()));
            }
            continue;
        }
        // Counted first: an answer read before this change and not yet
        // with the kernel is kept for a short time only.
        watched.tell();
        let mut drop = Vec::new();
        {
            let mut inodes = lock(inodes);
            let told = watched.since();
            for c in &m.changes {
                inodes.dropped_by(c, told, &mut drop);
            }
        }
        if !drop.is_empty() && told.send(drop).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Unmounts `dir` (lazily: a process still in it keeps its view until it
/// leaves): umount as root, fusermount3 -u otherwise.
fn unmount(dir: &std::path::Path) {
    let ok = std::process::Command::new("umount")
        .arg("-l")
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(dir)
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tabos_client::fault::{self, ErrorReason as R};

    fn failed(reason: R) -> tabos_client::Error {
        tabos_client::Error::Status(fault::status(&fault::detail_of(reason, "/p"), "words"))
    }

    /// Each reason its own errno: a non-empty directory is no longer the
    /// answer to every refused precondition, nor EINVAL to a file that is
    /// a directory.
    #[test]
    fn each_reason_has_its_errno() {
        for (reason, want) in [
            (R::NotEmpty, Errno::ENOTEMPTY),
            (R::NotADirectory, Errno::ENOTDIR),
            (R::IsADirectory, Errno::EISDIR),
            (R::Invalid, Errno::EINVAL),
            (R::NotFound, Errno::ENOENT),
            (R::OverQuota, Errno::EDQUOT),
            (R::Full, Errno::ENOSPC),
            (R::Denied, Errno::EACCES),
            (R::Precondition, Errno::EIO),
            (R::StaleEpoch, Errno::ESTALE),
        ] {
            assert_eq!(errno(&failed(reason)), want, "{reason:?}");
        }
        // Every reason has one (the match is exhaustive; this runs it).
        for r in fault::REASONS {
            let _ = errno(&failed(r));
        }
        // A status with no detail: its code's reason.
        let e = tabos_client::Error::Status(tonic::Status::failed_precondition("x"));
        assert_eq!(errno(&e), Errno::EIO);
    }
}
