//! The `Fs` service: files in tables over gRPC ([`tabos_kernel::fs`]).
//! Metadata requests are one kernel transaction on the realm's partition;
//! reads, writes, truncates and removals go through the node's
//! [`tabos_kernel::fs::files::Files`], which also serves parallel files and
//! files in block segments. Every request is checked (realm, user, path,
//! sizes) before any work. Changing requests may carry a fence
//! ([`tabos_kernel::names::check_fence_tx`], checked in the committing
//! transaction): a stale one is refused and changes nothing.

use tabos_client::proto;
use tabos_kernel::auth::Role;
use tabos_kernel::fs::{self, Stat};
use tabos_kernel::procs;
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

    /// Runs a changing operation `f(tx, realm, now)` after the request's
    /// fence, both in one transaction.
    async fn change<T, F>(
        &self,
        realm: &str,
        fence: Option<proto::Fence>,
        mut f: F,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn tabos_store::Tx, &str, i64) -> tabos_kernel::Result<T> + Send + 'static,
    {
        let fence = crate::names::fence_from_proto(fence)?;
        let r = realm.to_string();
        self.node
            .call(realm, move |tx| {
                let now = tabos_store::now_us();
                tabos_kernel::names::check_fence_if_tx(tx, &r, fence.as_ref(), now)?;
                f(tx, &r, now)
            })
            .await
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

fn path(p: &str) -> Result<String, Status> {
    tabos_kernel::names::validate_path(p).map_err(|e| kernel_status(&e))?;
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
    }
}

#[tonic::async_trait]
impl proto::fs_server::Fs for FsService {
    async fn create(
        &self,
        request: Request<proto::FsCreateRequest>,
    ) -> Result<Response<proto::FsStat>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, p) = (access.act(&r.realm, &r.user)?, path(&r.path)?);
        let mode = if r.mode == 0 {
            fs::MODE_FILE_DEFAULT
        } else {
            r.mode
        };
        let fence = crate::names::fence_from_proto(r.fence)?;
        let st = self
            .node
            .files
            .create(&r.realm, &who, &p, mode, r.parallel, fence)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(stat_to_proto(st)))
    }

    async fn mkdir(
        &self,
        request: Request<proto::FsCreateRequest>,
    ) -> Result<Response<proto::FsStat>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, p) = (access.act(&r.realm, &r.user)?, path(&r.path)?);
        let mode = if r.mode == 0 {
            fs::MODE_DIR_DEFAULT
        } else {
            r.mode
        };
        let st = self
            .change(&r.realm, r.fence, move |tx, realm, now| {
                fs::mkdir_tx(tx, realm, &who, &p, mode, now)
            })
            .await?;
        Ok(Response::new(stat_to_proto(st)))
    }

    async fn unlink(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, p) = (access.act(&r.realm, &r.user)?, path(&r.path)?);
        let fence = crate::names::fence_from_proto(r.fence)?;
        self.node
            .files
            .unlink(&r.realm, &who, &p, fence)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn rmdir(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, p) = (access.act(&r.realm, &r.user)?, path(&r.path)?);
        self.change(&r.realm, r.fence, move |tx, realm, now| {
            fs::rmdir_tx(tx, realm, &who, &p, now)
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn rename(
        &self,
        request: Request<proto::FsRenameRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, from, to) = (access.act(&r.realm, &r.user)?, path(&r.from)?, path(&r.to)?);
        let fence = crate::names::fence_from_proto(r.fence)?;
        self.node
            .files
            .rename(&r.realm, &who, &from, &to, fence)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn stat(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::FsStat>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        r.user = access.user(&r.user)?;
        let (p, realm) = (path(&r.path)?, r.realm.clone());
        let st = self
            .node
            .read(&r.realm, move |tx| fs::stat_tx(tx, &realm, &p))
            .await?;
        Ok(Response::new(stat_to_proto(st)))
    }

    async fn read_dir(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::FsReadDirResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        r.user = access.user(&r.user)?;
        let (who, p, realm) = (
            access.act(&r.realm, &r.user)?,
            path(&r.path)?,
            r.realm.clone(),
        );
        let (entries, more) = self
            .node
            .read(&r.realm, move |tx| fs::readdir_tx(tx, &realm, &who, &p))
            .await?;
        Ok(Response::new(proto::FsReadDirResponse {
            entries: entries.into_iter().map(stat_to_proto).collect(),
            more,
        }))
    }

    async fn read(
        &self,
        request: Request<proto::FsReadRequest>,
    ) -> Result<Response<proto::FsReadResponse>, Status> {
        let access = self.node.access(&request)?;
        let token = crate::forward::bearer(request.metadata())?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        r.user = access.user(&r.user)?;
        if !r.pid.is_empty() {
            access.acting_pid(&r.pid)?;
        }
        let (who, p) = (access.act(&r.realm, &r.user)?, path(&r.path)?);
        let read = self
            .node
            .files
            .read(&r.realm, &who, &p, r.offset, r.len as usize)
            .await;
        let data = match read {
            Ok(d) => d,
            // In another node's block store: read (and recorded) there.
            Err(tabos_kernel::Error::OnBlockStore { store_id, .. }) => {
                let addr = holder_addr(&self.node, &store_id, &p).await?;
                let mut fs = crate::forward::fs_at(&addr, &token).await?;
                let reply = crate::forward::rpc(&addr, fs.read(r)).await?;
                return Ok(Response::new(reply));
            }
            Err(e) => return Err(kernel_status(&e)),
        };
        // Recorded after the read (which changed nothing): an unknown pid
        // fails the request all the same. A read past the end (how a
        // reader finds the end) read nothing and is not recorded.
        if let Some(pid) = request_pid(&r.pid)? {
            let store = &self.node.store;
            let done = if data.is_empty() {
                procs::check_exists(store, &r.realm, &pid).await
            } else {
                let detail = format!("{p} @{} +{}", r.offset, data.len());
                procs::record(store, &r.realm, &pid, "fs_read", &detail).await
            };
            done.map_err(|e| kernel_status(&e))?;
        }
        Ok(Response::new(proto::FsReadResponse { data }))
    }

    async fn write(
        &self,
        request: Request<proto::FsWriteRequest>,
    ) -> Result<Response<proto::FsWriteResponse>, Status> {
        let access = self.node.access(&request)?;
        let token = crate::forward::bearer(request.metadata())?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        if !r.pid.is_empty() {
            access.acting_pid(&r.pid)?;
        }
        let (who, p) = (access.act(&r.realm, &r.user)?, path(&r.path)?);
        if r.data.len() > fs::IO_BYTES_MAX {
            return Err(Status::invalid_argument(format!(
                "a write is at most {} bytes",
                fs::IO_BYTES_MAX
            )));
        }
        let fence = crate::names::fence_from_proto(r.fence.clone())?;
        // An unknown pid is refused before anything is written.
        let pid = request_pid(&r.pid)?;
        if let Some(pid) = &pid {
            procs::check_exists(&self.node.store, &r.realm, pid)
                .await
                .map_err(|e| kernel_status(&e))?;
        }
        let (offset, len) = (r.offset, r.data.len());
        // Shared, so the request can still be forwarded if the file's data
        // turns out to be in another node's block store.
        let data = std::sync::Arc::new(std::mem::take(&mut r.data));
        let written = self
            .node
            .files
            .write(&r.realm, &who, &p, r.offset, data.clone(), r.create, fence)
            .await;
        let size = match written {
            Ok(size) => size,
            // Written (and recorded) there; nothing was written here.
            Err(tabos_kernel::Error::OnBlockStore { store_id, .. }) => {
                let addr = holder_addr(&self.node, &store_id, &p).await?;
                r.data = std::sync::Arc::try_unwrap(data).unwrap_or_else(|d| (*d).clone());
                let mut fs = crate::forward::fs_at(&addr, &token).await?;
                let reply = crate::forward::rpc(&addr, fs.write(r)).await?;
                return Ok(Response::new(reply));
            }
            Err(e) => return Err(kernel_status(&e)),
        };
        if let Some(pid) = pid {
            let detail = format!("{p} @{offset} +{len}");
            procs::record(&self.node.store, &r.realm, &pid, "fs_write", &detail)
                .await
                .map_err(|e| kernel_status(&e))?;
        }
        Ok(Response::new(proto::FsWriteResponse { size }))
    }

    async fn truncate(
        &self,
        request: Request<proto::FsTruncateRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let token = crate::forward::bearer(request.metadata())?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, p) = (access.act(&r.realm, &r.user)?, path(&r.path)?);
        let fence = crate::names::fence_from_proto(r.fence.clone())?;
        let done = self
            .node
            .files
            .truncate(&r.realm, &who, &p, r.size, fence)
            .await;
        match done {
            Ok(()) => Ok(Response::new(proto::Empty {})),
            // Growing a file in another node's block store: done there.
            Err(tabos_kernel::Error::OnBlockStore { store_id, .. }) => {
                let addr = holder_addr(&self.node, &store_id, &p).await?;
                let mut fs = crate::forward::fs_at(&addr, &token).await?;
                let reply = crate::forward::rpc(&addr, fs.truncate(r)).await?;
                Ok(Response::new(reply))
            }
            Err(e) => Err(kernel_status(&e)),
        }
    }

    async fn chmod(
        &self,
        request: Request<proto::FsChmodRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, p, mode) = (access.act(&r.realm, &r.user)?, path(&r.path)?, r.mode);
        self.change(&r.realm, None, move |tx, realm, now| {
            fs::chmod_tx(tx, realm, &who, &p, mode, now)
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn chown(
        &self,
        request: Request<proto::FsChownRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        r.user = access.user(&r.user)?;
        let (who, p, owner) = (access.act(&r.realm, &r.user)?, path(&r.path)?, r.owner);
        self.change(&r.realm, None, move |tx, realm, now| {
            fs::chown_tx(tx, realm, &who, &p, &owner, now)
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn du(
        &self,
        request: Request<proto::FsDuRequest>,
    ) -> Result<Response<proto::FsDuResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        let (p, realm, owner, min) = (path(&r.path)?, r.realm.clone(), r.owner, r.min_size);
        let (files, bytes) = self
            .node
            .read(&r.realm, move |tx| {
                let owner = (!owner.is_empty()).then_some(owner.as_str());
                fs::du_tx(tx, &realm, &p, owner, min)
            })
            .await?;
        Ok(Response::new(proto::FsDuResponse { files, bytes }))
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
