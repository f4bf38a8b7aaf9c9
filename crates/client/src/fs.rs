//! Files in tables from the client side: the `Fs` calls, each acting for a
//! user of a realm, plus whole-file upload and download in bounded chunks.

use crate::proto::{self, FsStat};
use crate::{Client, Error};

/// Most bytes one Read or Write carries (the node's limit).
pub const CHUNK_BYTES: usize = 4 << 20;

/// An open file, from [`Client::fs_open`]: it reaches the file after its
/// last name is removed, until [`Client::fs_close`] or the end of the
/// session it was opened on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FsHandle(pub String);

/// How [`Client::fs_open_for`] opens a file: for what, made first with a
/// mode or not, and for which process of this host (`None`: the client
/// itself).
#[derive(Debug, Clone)]
pub struct FsOpen {
    pub access: proto::FsAccess,
    pub create: Option<i64>,
    pub host: Option<proto::FsHostCaller>,
}

/// Which file a read, write, truncate, stat or times call is on: a path
/// (`&str` converts) or an open handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsTarget {
    Path(String),
    Handle(FsHandle),
}

impl From<&str> for FsTarget {
    fn from(p: &str) -> FsTarget {
        FsTarget::Path(p.to_string())
    }
}

impl From<&String> for FsTarget {
    fn from(p: &String) -> FsTarget {
        FsTarget::Path(p.clone())
    }
}

impl From<&FsHandle> for FsTarget {
    fn from(h: &FsHandle) -> FsTarget {
        FsTarget::Handle(h.clone())
    }
}

impl FsTarget {
    /// The request's (path, handle) fields: one of them set.
    fn fields(self) -> (String, String) {
        match self {
            FsTarget::Path(p) => (p, String::new()),
            FsTarget::Handle(h) => (String::new(), h.0),
        }
    }
}

fn path_request(realm: &str, user: &str, path: &str) -> proto::FsPathRequest {
    proto::FsPathRequest {
        realm: realm.into(),
        user: user.into(),
        path: path.into(),
        fence: None,
        handle: String::new(),
    }
}

fn create_request(realm: &str, user: &str, path: &str, mode: i64) -> proto::FsCreateRequest {
    proto::FsCreateRequest {
        realm: realm.into(),
        user: user.into(),
        path: path.into(),
        mode,
        fence: None,
        parallel: false,
    }
}

impl Client {
    /// Creates an empty file (exclusive); mode 0: 0644.
    pub async fn fs_create(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        mode: i64,
    ) -> Result<FsStat, Error> {
        Ok(self
            .fs
            .create(create_request(realm, user, path, mode))
            .await?
            .into_inner())
    }

    /// Creates an empty parallel file (exclusive): its blocks are spread
    /// over the partitions by block number; mode 0: 0644.
    pub async fn fs_create_parallel(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        mode: i64,
    ) -> Result<FsStat, Error> {
        let mut req = create_request(realm, user, path, mode);
        req.parallel = true;
        Ok(self.fs.create(req).await?.into_inner())
    }

    /// Creates a directory (exclusive); mode 0: 0755.
    pub async fn fs_mkdir(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        mode: i64,
    ) -> Result<FsStat, Error> {
        Ok(self
            .fs
            .mkdir(create_request(realm, user, path, mode))
            .await?
            .into_inner())
    }

    /// Creates a named pipe (exclusive); mode 0: 0644.
    pub async fn fs_mkfifo(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        mode: i64,
    ) -> Result<FsStat, Error> {
        Ok(self
            .fs
            .mkfifo(create_request(realm, user, path, mode))
            .await?
            .into_inner())
    }

    pub async fn fs_unlink(&mut self, realm: &str, user: &str, path: &str) -> Result<(), Error> {
        self.fs.unlink(path_request(realm, user, path)).await?;
        Ok(())
    }

    pub async fn fs_rmdir(&mut self, realm: &str, user: &str, path: &str) -> Result<(), Error> {
        self.fs.rmdir(path_request(realm, user, path)).await?;
        Ok(())
    }

    /// Renames atomically (over an existing file or empty directory).
    pub async fn fs_rename(
        &mut self,
        realm: &str,
        user: &str,
        from: &str,
        to: &str,
    ) -> Result<(), Error> {
        self.fs
            .rename(proto::FsRenameRequest {
                realm: realm.into(),
                user: user.into(),
                from: from.into(),
                to: to.into(),
                fence: None,
            })
            .await?;
        Ok(())
    }

    /// Stat as fs user `user` (an operator's credential only; empty: the
    /// credential's).
    pub async fn fs_stat_as(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
    ) -> Result<FsStat, Error> {
        Ok(self
            .fs
            .stat(path_request(realm, user, path))
            .await?
            .into_inner())
    }

    pub async fn fs_stat(&mut self, realm: &str, path: &str) -> Result<FsStat, Error> {
        Ok(self
            .fs
            .stat(path_request(realm, "", path))
            .await?
            .into_inner())
    }

    /// Stat of an open file (also after its last name went: nlink 0).
    pub async fn fs_stat_handle(
        &mut self,
        realm: &str,
        user: &str,
        handle: &FsHandle,
    ) -> Result<FsStat, Error> {
        let mut req = path_request(realm, user, "");
        req.handle = handle.0.clone();
        Ok(self.fs.stat(req).await?.into_inner())
    }

    /// Gives the file (or symlink) at `path` the further name `new_path`.
    pub async fn fs_link(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        new_path: &str,
    ) -> Result<FsStat, Error> {
        Ok(self
            .fs
            .link(proto::FsLinkRequest {
                realm: realm.into(),
                user: user.into(),
                path: path.into(),
                new_path: new_path.into(),
            })
            .await?
            .into_inner())
    }

    /// Creates the symbolic link `path` to `target` (stored as given).
    pub async fn fs_symlink(
        &mut self,
        realm: &str,
        user: &str,
        target: &str,
        path: &str,
    ) -> Result<FsStat, Error> {
        Ok(self
            .fs
            .symlink(proto::FsSymlinkRequest {
                realm: realm.into(),
                user: user.into(),
                target: target.into(),
                path: path.into(),
            })
            .await?
            .into_inner())
    }

    /// The target of the symbolic link `path`.
    pub async fn fs_readlink(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
    ) -> Result<String, Error> {
        Ok(self
            .fs
            .readlink(path_request(realm, user, path))
            .await?
            .into_inner()
            .target)
    }

    /// Opens `path` for `access` on `session` (the caller's names session):
    /// the mode is checked now; the handle reaches the file until closed.
    /// With `create` (a mode; 0: 0644) the file is made first (exclusive)
    /// and opened whatever that mode, as open(2) with O_CREAT.
    pub async fn fs_open(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        access: proto::FsAccess,
        session: &str,
        create: Option<i64>,
    ) -> Result<(FsHandle, FsStat), Error> {
        self.fs_open_for(
            realm,
            user,
            path,
            session,
            FsOpen {
                access,
                create,
                host: None,
            },
        )
        .await
    }

    /// [`fs_open`](Client::fs_open) as `how` says, naming the process of
    /// this host the file is opened for (`tabos mount`: the one behind
    /// the FUSE request) in the open's provenance event.
    pub async fn fs_open_for(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        session: &str,
        how: FsOpen,
    ) -> Result<(FsHandle, FsStat), Error> {
        let r = self
            .fs
            .open(proto::FsOpenRequest {
                realm: realm.into(),
                user: user.into(),
                path: path.into(),
                access: how.access.into(),
                session: session.into(),
                create: how.create.is_some(),
                mode: how.create.unwrap_or(0),
                host: how.host,
            })
            .await?
            .into_inner();
        Ok((FsHandle(r.handle), r.stat.unwrap_or_default()))
    }

    /// Closes a handle; a file whose names are all gone goes with its last.
    pub async fn fs_close(
        &mut self,
        realm: &str,
        user: &str,
        handle: &FsHandle,
    ) -> Result<(), Error> {
        self.fs
            .close(proto::FsHandleRequest {
                realm: realm.into(),
                user: user.into(),
                handle: handle.0.clone(),
            })
            .await?;
        Ok(())
    }

    pub async fn fs_readdir(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
    ) -> Result<proto::FsReadDirResponse, Error> {
        Ok(self
            .fs
            .read_dir(path_request(realm, user, path))
            .await?
            .into_inner())
    }

    /// Up to `len` (≤ [`CHUNK_BYTES`]) bytes at `offset`.
    pub async fn fs_read(
        &mut self,
        realm: &str,
        user: &str,
        at: impl Into<FsTarget>,
        offset: i64,
        len: u32,
    ) -> Result<Vec<u8>, Error> {
        let (path, handle) = at.into().fields();
        Ok(self
            .fs
            .read(proto::FsReadRequest {
                realm: realm.into(),
                user: user.into(),
                path,
                offset,
                len,
                pid: self.proc_pid.clone(),
                handle,
            })
            .await?
            .into_inner()
            .data)
    }

    /// Writes `data` (≤ [`CHUNK_BYTES`]) at `offset`, creating the file
    /// first if `create`; returns the file's size. For a fenced write, call
    /// [`fs_write_fenced`](Client::fs_write_fenced).
    pub async fn fs_write(
        &mut self,
        realm: &str,
        user: &str,
        at: impl Into<FsTarget>,
        offset: i64,
        data: Vec<u8>,
        create: bool,
    ) -> Result<i64, Error> {
        self.write(realm, user, at.into(), offset, data, create, None)
            .await
    }

    /// [`fs_write`](Client::fs_write) carrying a fence: refused ("stale
    /// epoch"), writing nothing, once the fenced directory has a newer epoch.
    #[allow(clippy::too_many_arguments)]
    pub async fn fs_write_fenced(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        offset: i64,
        data: Vec<u8>,
        create: bool,
        fence: proto::Fence,
    ) -> Result<i64, Error> {
        self.write(realm, user, path.into(), offset, data, create, Some(fence))
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn write(
        &mut self,
        realm: &str,
        user: &str,
        at: FsTarget,
        offset: i64,
        data: Vec<u8>,
        create: bool,
        fence: Option<proto::Fence>,
    ) -> Result<i64, Error> {
        let (path, handle) = at.fields();
        Ok(self
            .fs
            .write(proto::FsWriteRequest {
                realm: realm.into(),
                user: user.into(),
                path,
                offset,
                data,
                create,
                fence,
                pid: self.proc_pid.clone(),
                handle,
            })
            .await?
            .into_inner()
            .size)
    }

    pub async fn fs_truncate(
        &mut self,
        realm: &str,
        user: &str,
        at: impl Into<FsTarget>,
        size: i64,
    ) -> Result<(), Error> {
        let (path, handle) = at.into().fields();
        self.fs
            .truncate(proto::FsTruncateRequest {
                realm: realm.into(),
                user: user.into(),
                path,
                size,
                fence: None,
                handle,
            })
            .await?;
        Ok(())
    }

    pub async fn fs_chmod(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        mode: i64,
    ) -> Result<(), Error> {
        self.fs
            .chmod(proto::FsChmodRequest {
                realm: realm.into(),
                user: user.into(),
                path: path.into(),
                mode,
            })
            .await?;
        Ok(())
    }

    /// Sets `path`'s access and modification times (utimensat): each
    /// `None` to leave it, `Some(None)` for now, `Some(Some(µs))` for a
    /// time.
    pub async fn fs_set_times(
        &mut self,
        realm: &str,
        user: &str,
        at: impl Into<FsTarget>,
        atime: Option<Option<i64>>,
        mtime: Option<Option<i64>>,
    ) -> Result<(), Error> {
        let set = |t: Option<Option<i64>>| match t {
            None => (proto::SetTime::Omit, 0),
            Some(None) => (proto::SetTime::Now, 0),
            Some(Some(us)) => (proto::SetTime::At, us),
        };
        let ((a, a_us), (m, m_us)) = (set(atime), set(mtime));
        let (path, handle) = at.into().fields();
        self.fs
            .set_times(proto::FsTimesRequest {
                realm: realm.into(),
                user: user.into(),
                path,
                handle,
                atime: a.into(),
                atime_us: a_us,
                mtime: m.into(),
                mtime_us: m_us,
            })
            .await?;
        Ok(())
    }

    pub async fn fs_chown(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        owner: &str,
    ) -> Result<(), Error> {
        self.fs
            .chown(proto::FsChownRequest {
                realm: realm.into(),
                user: user.into(),
                path: path.into(),
                owner: owner.into(),
            })
            .await?;
        Ok(())
    }

    /// The realm's file changes from now on (acting as `user`): first a
    /// message with `watching` set, then the changes in commit order; a
    /// name only where `user` may list its directory. DATA_LOSS ends a
    /// watch that fell behind (drop what is cached; watch again).
    pub async fn fs_watch(
        &mut self,
        realm: &str,
        user: &str,
    ) -> Result<tonic::Streaming<proto::FsChanges>, Error> {
        Ok(self
            .fs
            .watch(proto::FsWatchRequest {
                realm: realm.into(),
                user: user.into(),
            })
            .await?
            .into_inner())
    }

    /// Files and bytes under `path` (optionally one owner's, at least
    /// `min_size` bytes each).
    pub async fn fs_du(
        &mut self,
        realm: &str,
        path: &str,
        owner: &str,
        min_size: i64,
    ) -> Result<(i64, i64), Error> {
        let r = self
            .fs
            .du(proto::FsDuRequest {
                realm: realm.into(),
                path: path.into(),
                owner: owner.into(),
                min_size,
            })
            .await?
            .into_inner();
        Ok((r.files, r.bytes))
    }

    /// The whole file, read in chunks (a file changing meanwhile may be
    /// read partly old, partly new: each chunk is its own transaction).
    pub async fn fs_read_all(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        mut sink: impl std::io::Write,
    ) -> Result<i64, Error> {
        let mut at = 0i64;
        loop {
            let chunk = self
                .fs_read(realm, user, path, at, CHUNK_BYTES as u32)
                .await?;
            if chunk.is_empty() {
                return Ok(at);
            }
            sink.write_all(&chunk).map_err(|e| {
                Error::Status(tonic::Status::internal(format!("cannot write: {e}")))
            })?;
            at += chunk.len() as i64;
        }
    }
}

/// How long the session a [`PipeEnd`] holds its handle on lives without a
/// renewal (renewed every third of it while held): a client that dies
/// holding a write end gives the pipe's readers EOF this long after.
pub const PIPE_SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// One end of a named pipe, held open on a names session of its own (kept
/// alive while held), from [`Client::fs_open_pipe`]: a read end waits for
/// a writer's bytes and reads EOF once the writers that came since it
/// opened have closed; a write end's close is EOF to the readers.
#[derive(Debug)]
pub struct PipeEnd {
    session: crate::names::Session,
    handle: FsHandle,
}

impl PipeEnd {
    pub fn handle(&self) -> &FsHandle {
        &self.handle
    }

    /// What reads and writes through this end are on.
    pub fn target(&self) -> FsTarget {
        FsTarget::Handle(self.handle.clone())
    }

    /// Closes the end and its session.
    pub async fn close(self, c: &mut Client, realm: &str, user: &str) -> Result<(), Error> {
        c.fs_close(realm, user, &self.handle).await?;
        self.session.close().await?;
        Ok(())
    }
}

impl Client {
    /// Opens an end of the named pipe at `path` (`access` Read or Write).
    pub async fn fs_open_pipe(
        &mut self,
        realm: &str,
        user: &str,
        path: &str,
        access: proto::FsAccess,
    ) -> Result<PipeEnd, Error> {
        let session = crate::names::Session::open(self, realm, "", PIPE_SESSION_TTL).await?;
        let (handle, _) = self
            .fs_open(realm, user, path, access, session.id(), None)
            .await?;
        Ok(PipeEnd { session, handle })
    }
}
