//! The `Fs` service: files in tables over gRPC ([`tabos_kernel::fs`]).
//! Metadata requests are one kernel transaction on the realm's partition;
//! reads, writes, truncates and removals go through the node's
//! [`tabos_kernel::fs::files::Files`], which also serves parallel files and
//! files in block segments. Every request is checked (realm, user, path,
//! sizes) before any work. Changing requests may carry a fence
//! ([`tabos_kernel::names::check_fence_tx`], checked in the committing
//! transaction): a stale one is refused and changes nothing.

use tabos_client::proto;
use tabos_kernel::fs::{self, Stat};
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

#[derive(Clone)]
pub struct FsService {
    node: Node,
}

impl FsService {
    pub fn new(node: Node) -> FsService {
        FsService { node }
    }
}

/// The address of the node holding block store `store_id`, where the
/// request for `path`'s data goes (see `forward`).
async fn holder_addr(node: &crate::Node, store_id: &str, path: &str) -> Result<String, Status> {
    let what = format!("the data of {path}");
    match crate::forward::holder_of_store(node, store_id, &what).await? {
        crate::forward::Holder::Peer(addr) => Ok(addr),
        // The kernel said it is not ours: the two disagree.
        crate::forward::Holder::Here => Err(Status::internal(format!(
            "{path}: its block store {store_id} is this node's, yet the node did not find it so"
        ))),
    }
}

/// What a read, write, truncate, stat or times request is on: its path or
/// its handle, exactly one of them.
fn target(path: &str, handle: &str) -> Result<fs::FileRef, Status> {
    file_ref(path, handle).map_err(|e| kernel_status(&e))
}

/// [`target`] for an operation's body.
fn file_ref(path: &str, handle: &str) -> tabos_kernel::Result<fs::FileRef> {
    match (path.is_empty(), handle.is_empty()) {
        (_, true) => Ok(fs::FileRef::Path(checked(path)?)),
        (true, false) => Ok(fs::FileRef::Handle(fs::Handle::parse(handle)?)),
        (false, false) => Err(tabos_kernel::Error::Invalid(
            "a request names a path or a handle, not both".into(),
        )),
    }
}

/// A request's path, checked, for an operation's body.
fn checked(p: &str) -> tabos_kernel::Result<String> {
    tabos_kernel::names::validate_path(p)?;
    Ok(p.to_string())
}

pub fn stat_to_proto(s: Stat) -> proto::FsStat {
    proto::FsStat {
        path: s.path,
        r#type: crate::wire::out(s.file_type),
        owner: s.owner,
        mode: s.mode,
        layout: s.storage.as_str().into(),
        size: s.size,
        block_size: s.block_size,
        ctime_us: s.ctime_us,
        mtime_us: s.mtime_us,
        atime_us: s.atime_us,
        id: s.id,
        nlink: s.nlink,
    }
}

/// The Fs service's operations, each a call of [`tabos_kernel::fs`] (which
/// checks the caller's role and scope, and owners and modes). A changing
/// request's fence is checked in the operation's own transaction.
pub mod ops {
    use super::*;
    use crate::op::op;
    use tabos_kernel::names::check_fence_if_tx;

    fn mode_or(mode: i64, default: i64) -> i64 {
        if mode == 0 {
            default
        } else {
            mode
        }
    }

    op!(Create(FsCreateRequest) -> FsStat, |node, who, r| {
        let (p, mode) = (checked(&r.path)?, mode_or(r.mode, fs::MODE_FILE_DEFAULT));
        let fence = crate::names::fence_of(r.fence)?;
        let st = node.files.create(&who, &p, mode, r.parallel, fence).await?;
        Ok(stat_to_proto(st))
    });

    op!(Mkdir(FsCreateRequest) -> FsStat, |node, who, r| {
        let (p, mode) = (checked(&r.path)?, mode_or(r.mode, fs::MODE_DIR_DEFAULT));
        let fence = crate::names::fence_of(r.fence)?;
        let st = node
            .write_as(who, move |tx, who, now| {
                check_fence_if_tx(tx, who.realm(), fence.as_ref(), now)?;
                fs::mkdir_tx(tx, who, &p, mode, now)
            })
            .await?;
        Ok(stat_to_proto(st))
    });

    op!(Unlink(FsPathRequest) -> Empty, |node, who, r| {
        let (p, fence) = (checked(&r.path)?, crate::names::fence_of(r.fence)?);
        node.files.unlink(&who, &p, fence).await?;
        Ok(proto::Empty {})
    });

    op!(Rmdir(FsPathRequest) -> Empty, |node, who, r| {
        let (p, fence) = (checked(&r.path)?, crate::names::fence_of(r.fence)?);
        node.write_as(who, move |tx, who, now| {
            check_fence_if_tx(tx, who.realm(), fence.as_ref(), now)?;
            fs::rmdir_tx(tx, who, &p, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(Rename(FsRenameRequest) -> Empty, |node, who, r| {
        let (from, to) = (checked(&r.from)?, checked(&r.to)?);
        let fence = crate::names::fence_of(r.fence)?;
        node.files.rename(&who, &from, &to, fence).await?;
        Ok(proto::Empty {})
    });

    op!(Stat(FsPathRequest) -> FsStat, |node, who, r| {
        let t = file_ref(&r.path, &r.handle)?;
        let st = node
            .read_as(who, move |tx, who, _| fs::stat_ref_tx(tx, who, &t))
            .await?;
        Ok(stat_to_proto(st))
    });

    op!(Link(FsLinkRequest) -> FsStat, |node, who, r| {
        let (from, to) = (checked(&r.path)?, checked(&r.new_path)?);
        let st = node
            .write_as(who, move |tx, who, now| fs::link_tx(tx, who, &from, &to, now))
            .await?;
        Ok(stat_to_proto(st))
    });

    op!(Symlink(FsSymlinkRequest) -> FsStat, |node, who, r| {
        let (target, p) = (r.target, checked(&r.path)?);
        let st = node
            .write_as(who, move |tx, who, now| fs::symlink_tx(tx, who, &target, &p, now))
            .await?;
        Ok(stat_to_proto(st))
    });

    op!(Mkfifo(FsCreateRequest) -> FsStat, |node, who, r| {
        let (p, mode) = (checked(&r.path)?, mode_or(r.mode, fs::MODE_FILE_DEFAULT));
        let fence = crate::names::fence_of(r.fence)?;
        let st = node
            .write_as(who, move |tx, who, now| {
                check_fence_if_tx(tx, who.realm(), fence.as_ref(), now)?;
                fs::fifo::mkfifo_tx(tx, who, &p, mode, now)
            })
            .await?;
        Ok(stat_to_proto(st))
    });

    op!(Readlink(FsPathRequest) -> FsReadlinkResponse, |node, who, r| {
        let p = checked(&r.path)?;
        let target = node
            .read_as(who, move |tx, who, _| fs::readlink_tx(tx, who, &p))
            .await?;
        Ok(proto::FsReadlinkResponse { target })
    });

    op!(Open(FsOpenRequest) -> FsOpenResponse, |node, who, r| {
        let p = checked(&r.path)?;
        let access = crate::wire::field("access", r.access)?.unwrap_or(fs::Access::Read);
        let session = r.session;
        let create = r.create.then(|| mode_or(r.mode, fs::MODE_FILE_DEFAULT));
        let host = r
            .host
            .map(|h| fs::HostCaller::new(h.pid, h.uid, &h.program))
            .transpose()?;
        let (handle, st) = node
            .write_as(who, move |tx, who, now| {
                fs::open_tx(tx, who, &p, access, &session, create, host.as_ref(), now)
            })
            .await?;
        Ok(proto::FsOpenResponse {
            handle: handle.as_str().to_string(),
            stat: Some(stat_to_proto(st)),
        })
    });

    op!(Close(FsHandleRequest) -> Empty, |node, who, r| {
        let h = fs::Handle::parse(&r.handle)?;
        node.files.close(&who, &h).await?;
        Ok(proto::Empty {})
    });

    op!(ReadDir(FsPathRequest) -> FsReadDirResponse, |node, who, r| {
        let p = checked(&r.path)?;
        let (entries, more) = node
            .read_as(who, move |tx, who, _| fs::readdir_tx(tx, who, &p))
            .await?;
        Ok(proto::FsReadDirResponse {
            entries: entries.into_iter().map(stat_to_proto).collect(),
            more,
        })
    });

    op!(Chmod(FsChmodRequest) -> Empty, |node, who, r| {
        let (p, mode) = (checked(&r.path)?, r.mode);
        node.write_as(who, move |tx, who, now| {
            fs::chmod_tx(tx, who, &p, mode, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(SetTimes(FsTimesRequest) -> Empty, |node, who, r| {
        let p = file_ref(&r.path, &r.handle)?;
        let set = |kind: i32, us: i64| match proto::SetTime::try_from(kind) {
            Ok(proto::SetTime::Omit) => Ok(fs::SetTime::Omit),
            Ok(proto::SetTime::Now) => Ok(fs::SetTime::Now),
            Ok(proto::SetTime::At) => Ok(fs::SetTime::At(us)),
            _ => Err(tabos_kernel::Error::Invalid("a time is omit, now or at a time".into())),
        };
        let (atime, mtime) = (set(r.atime, r.atime_us)?, set(r.mtime, r.mtime_us)?);
        node.write_as(who, move |tx, who, now| {
            fs::set_times_tx(tx, who, p.clone(), atime, mtime, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(Chown(FsChownRequest) -> Empty, |node, who, r| {
        let (p, owner) = (checked(&r.path)?, r.owner);
        node.write_as(who, move |tx, who, now| {
            fs::chown_tx(tx, who, &p, &owner, now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(Du(FsDuRequest) -> FsDuResponse, |node, who, r| {
        let (p, owner, min) = (checked(&r.path)?, r.owner, r.min_size);
        let (files, bytes) = node
            .read_as(who, move |tx, who, _| {
                let owner = (!owner.is_empty()).then_some(owner.as_str());
                fs::du_tx(tx, who, &p, owner, min)
            })
            .await?;
        Ok(proto::FsDuResponse { files, bytes })
    });
}

crate::op::served! {
    FsService: proto::fs_server::Fs;
    create(FsCreateRequest) -> FsStat = Create;
    mkdir(FsCreateRequest) -> FsStat = Mkdir;
    unlink(FsPathRequest) -> Empty = Unlink;
    rmdir(FsPathRequest) -> Empty = Rmdir;
    rename(FsRenameRequest) -> Empty = Rename;
    stat(FsPathRequest) -> FsStat = Stat;
    read_dir(FsPathRequest) -> FsReadDirResponse = ReadDir;
    chmod(FsChmodRequest) -> Empty = Chmod;
    chown(FsChownRequest) -> Empty = Chown;
    set_times(FsTimesRequest) -> Empty = SetTimes;
    link(FsLinkRequest) -> FsStat = Link;
    symlink(FsSymlinkRequest) -> FsStat = Symlink;
    mkfifo(FsCreateRequest) -> FsStat = Mkfifo;
    readlink(FsPathRequest) -> FsReadlinkResponse = Readlink;
    open(FsOpenRequest) -> FsOpenResponse = Open;
    close(FsHandleRequest) -> Empty = Close;
    du(FsDuRequest) -> FsDuResponse = Du;
    @streams {
        type WatchStream = crate::streams::Streamed<proto::FsChanges>;

        async fn watch(
            &self,
            request: Request<proto::FsWatchRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            let who = self.node.caller_of(&request)?;
            let held = crate::streams::take_watch(&self.node, &who)?;
            let sub = fs::changes::watch(&self.node.store, &who).map_err(|e| kernel_status(&e))?;
            let (out, streamed) = crate::streams::channel(WATCH_BUFFER, self.node.stopping.watch());
            tokio::spawn(forward_changes(self.node.clone(), who, sub, out, held));
            Ok(Response::new(streamed))
        }

        async fn read(
            &self,
            request: Request<proto::FsReadRequest>,
        ) -> Result<Response<proto::FsReadResponse>, Status> {
            // Forwarded whole (with its token) if the data is another node's.
            let who = self.node.caller_of(&request)?;
            let token = crate::forward::bearer(request.metadata())?;
            let r = request.into_inner();
            let p = target(&r.path, &r.handle)?;
            // Done for the proc the request names, or the credential's own.
            let pid = request_pid(&r.pid)?.or_else(|| who.pid().cloned());
            let read = self
                .node
                .files
                .read_for(&who, pid, p.clone(), r.offset, r.len as usize)
                .await;
            let data = match read {
                Ok(d) => d,
                // In another node's block store: read (and recorded) there.
                Err(tabos_kernel::Error::OnBlockStore { store_id, .. }) => {
                    let addr = holder_addr(&self.node, &store_id, &p.to_string()).await?;
                    let mut fs = crate::forward::fs_at(&addr, &token).await?;
                    let reply = crate::forward::rpc(&addr, fs.read(r)).await?;
                    return Ok(Response::new(reply));
                }
                Err(e) => return Err(kernel_status(&e)),
            };
            Ok(Response::new(proto::FsReadResponse { data }))
        }

        async fn write(
            &self,
            request: Request<proto::FsWriteRequest>,
        ) -> Result<Response<proto::FsWriteResponse>, Status> {
            let who = self.node.caller_of(&request)?;
            let token = crate::forward::bearer(request.metadata())?;
            let mut r = request.into_inner();
            let p = target(&r.path, &r.handle)?;
            if r.data.len() > fs::IO_BYTES_MAX {
                return Err(Status::invalid_argument(format!(
                    "a write is at most {} bytes",
                    fs::IO_BYTES_MAX
                )));
            }
            let fence = crate::names::fence_from_proto(r.fence.clone())?;
            // Done for the proc the request names, or the credential's own
            // (an unknown one refuses the write before anything is written).
            let pid = request_pid(&r.pid)?.or_else(|| who.pid().cloned());
            // Shared, so the request can still be forwarded if the file's data
            // turns out to be in another node's block store.
            let data = std::sync::Arc::new(std::mem::take(&mut r.data));
            let written = self
                .node
                .files
                .write_for(&who, pid, p.clone(), r.offset, data.clone(), r.create, fence)
                .await;
            let size = match written {
                Ok(size) => size,
                // Written (and recorded) there; nothing was written here.
                Err(tabos_kernel::Error::OnBlockStore { store_id, .. }) => {
                    let addr = holder_addr(&self.node, &store_id, &p.to_string()).await?;
                    r.data = std::sync::Arc::try_unwrap(data).unwrap_or_else(|d| (*d).clone());
                    let mut fs = crate::forward::fs_at(&addr, &token).await?;
                    let reply = crate::forward::rpc(&addr, fs.write(r)).await?;
                    return Ok(Response::new(reply));
                }
                Err(e) => return Err(kernel_status(&e)),
            };
            Ok(Response::new(proto::FsWriteResponse { size }))
        }

        async fn truncate(
            &self,
            request: Request<proto::FsTruncateRequest>,
        ) -> Result<Response<proto::Empty>, Status> {
            let who = self.node.caller_of(&request)?;
            let token = crate::forward::bearer(request.metadata())?;
            let r = request.into_inner();
            let p = target(&r.path, &r.handle)?;
            let fence = crate::names::fence_from_proto(r.fence.clone())?;
            let done = self.node.files.truncate(&who, p.clone(), r.size, fence).await;
            match done {
                Ok(()) => Ok(Response::new(proto::Empty {})),
                // Growing a file in another node's block store: done there.
                Err(tabos_kernel::Error::OnBlockStore { store_id, .. }) => {
                    let addr = holder_addr(&self.node, &store_id, &p.to_string()).await?;
                    let mut fs = crate::forward::fs_at(&addr, &token).await?;
                    let reply = crate::forward::rpc(&addr, fs.truncate(r)).await?;
                    Ok(Response::new(reply))
                }
                Err(e) => Err(kernel_status(&e)),
            }
        }
    }
}

/// Messages of a file watch waiting for its client; past it the watch
/// waits (and the changes wait on its subscription, which is bounded too).
const WATCH_BUFFER: usize = 16;
/// Most changes one watch message carries.
const WATCH_BATCH_MAX: usize = 512;
/// Most bytes of notes one watch message is made from: with
/// [`WATCH_BUFFER`], what a watch's stream holds for a client that does
/// not read (its subscription holds the rest, bounded by the feed).
const WATCH_BATCH_BYTES_MAX: usize = 64 << 10;

/// Forwards a realm's file changes that `who` may see to a watcher, in
/// batches of what has come, until it goes away, falls behind or the node
/// stops; `_held` is its place among its realm's watches.
async fn forward_changes(
    node: Node,
    who: tabos_kernel::auth::Caller,
    mut sub: tabos_store::Subscription,
    out: crate::streams::Out<proto::FsChanges>,
    _held: crate::doors::Taken,
) {
    use fs::changes::Change;
    let watching = proto::FsChanges {
        watching: true,
        changes: Vec::new(),
    };
    if out.send(watching).await.is_err() {
        return;
    }
    loop {
        let first = tokio::select! {
            note = sub.recv() => note,
            _ = out.ended() => return,
        };
        let mut notes = vec![first];
        let mut bytes = 0;
        while notes.len() < WATCH_BATCH_MAX && bytes < WATCH_BATCH_BYTES_MAX {
            match sub.try_recv() {
                Ok(Some(n)) => {
                    bytes += n.payload.len();
                    notes.push(Ok(n));
                }
                Ok(None) => break,
                Err(e) => {
                    notes.push(Err(e));
                    break;
                }
            }
        }
        let mut changes = Vec::with_capacity(notes.len());
        for note in notes {
            match note {
                Ok(n) => changes.extend(Change::parse(&n.payload)),
                Err(e) => {
                    let status = match e {
                        tabos_store::Error::Lagged(n) => Status::data_loss(format!(
                            "the watch of the realm's files fell {n} changes behind and was \
                             cut off; drop what is cached and watch again"
                        )),
                        e => crate::status_of(&e),
                    };
                    out.finish(status);
                    return;
                }
            }
        }
        // Names are told only where the caller may list their directory,
        // which takes a read; a batch of file ids alone needs none.
        let seen = if changes.iter().any(|c| matches!(c, Change::Name(_))) {
            node.read_as(who.clone(), move |t, who, _| {
                fs::changes::visible_tx(t, who, changes.clone())
            })
            .await
        } else {
            Ok(changes)
        };
        match seen {
            Ok(cs) if cs.is_empty() => continue,
            Ok(cs) => {
                let message = proto::FsChanges {
                    watching: false,
                    changes: cs.into_iter().map(change_to_proto).collect(),
                };
                if out.send(message).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                out.finish(kernel_status(&e));
                return;
            }
        }
    }
}

fn change_to_proto(c: fs::changes::Change) -> proto::FsChange {
    use fs::changes::Change;
    let (kind, path, id) = match c {
        Change::Name(p) => (proto::FsChangeKind::Name, p, String::new()),
        Change::File(id) => (proto::FsChangeKind::File, String::new(), id),
    };
    proto::FsChange {
        kind: kind.into(),
        path,
        id,
    }
}

/// The proc a read or write is done for, if the request names one.
fn request_pid(pid: &str) -> Result<Option<tabos_kernel::ids::Pid>, Status> {
    if pid.is_empty() {
        return Ok(None);
    }
    tabos_kernel::ids::Pid::new(pid)
        .map(Some)
        .map_err(|e| Status::invalid_argument(e.to_string()))
}
