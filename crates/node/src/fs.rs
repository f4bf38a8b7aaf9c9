//! The `Fs` service: files in tables over gRPC ([`tabos_kernel::fs`]). Each
//! request is one kernel transaction on the realm's partition, checked
//! (realm, user, path, sizes) before any work. Changing requests may carry
//! a fence ([`tabos_kernel::names::check_fence_tx`], in the same
//! transaction): a stale one is refused and changes nothing.

use tabos_client::proto;
use tabos_kernel::fs::{self, Caller, Stat};
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

pub struct FsService {
    node: Node,
}

impl FsService {
    pub fn new(node: Node) -> FsService {
        FsService { node }
    }

    async fn call<T, F>(&self, realm: &str, f: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn tabos_store::Tx) -> tabos_kernel::Result<T> + Send + 'static,
    {
        fs::call(&self.node.store, realm, f)
            .await
            .map_err(|e| kernel_status(&e))
    }
}

fn caller(user: &str) -> Result<Caller, Status> {
    Caller::new(user).map_err(|e| kernel_status(&e))
}

fn path(p: &str) -> Result<String, Status> {
    tabos_kernel::names::validate_path(p).map_err(|e| kernel_status(&e))?;
    Ok(p.to_string())
}

pub fn stat_to_proto(s: Stat) -> proto::FsStat {
    proto::FsStat {
        path: s.path,
        r#type: s.file_type.as_str().into(),
        owner: s.owner,
        mode: s.mode,
        size: s.size,
        block_size: s.block_size,
        ctime_us: s.ctime_us,
        mtime_us: s.mtime_us,
    }
}

fn now() -> i64 {
    tabos_store::now_us()
}

/// Checks a request's fence in the operation's own transaction.
fn fenced(
    tx: &mut dyn tabos_store::Tx,
    realm: &str,
    fence: &Option<tabos_kernel::names::Fence>,
    now_us: i64,
) -> tabos_kernel::Result<()> {
    match fence {
        Some(f) => tabos_kernel::names::check_fence_tx(tx, realm, f, now_us),
        None => Ok(()),
    }
}

#[tonic::async_trait]
impl proto::fs_server::Fs for FsService {
    async fn create(
        &self,
        request: Request<proto::FsCreateRequest>,
    ) -> Result<Response<proto::FsStat>, Status> {
        let r = request.into_inner();
        let (who, p, realm) = (caller(&r.user)?, path(&r.path)?, r.realm.clone());
        let mode = if r.mode == 0 { 0o644 } else { r.mode };
        let st = self
            .call(&r.realm, move |tx| {
                fs::create_tx(tx, &realm, &who, &p, mode, now())
            })
            .await?;
        Ok(Response::new(stat_to_proto(st)))
    }

    async fn mkdir(
        &self,
        request: Request<proto::FsCreateRequest>,
    ) -> Result<Response<proto::FsStat>, Status> {
        let r = request.into_inner();
        let (who, p, realm) = (caller(&r.user)?, path(&r.path)?, r.realm.clone());
        let mode = if r.mode == 0 { 0o755 } else { r.mode };
        let st = self
            .call(&r.realm, move |tx| {
                fs::mkdir_tx(tx, &realm, &who, &p, mode, now())
            })
            .await?;
        Ok(Response::new(stat_to_proto(st)))
    }

    async fn unlink(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let r = request.into_inner();
        let (who, p, realm) = (caller(&r.user)?, path(&r.path)?, r.realm.clone());
        self.call(&r.realm, move |tx| {
            fs::unlink_tx(tx, &realm, &who, &p, now())
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn rmdir(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let r = request.into_inner();
        let (who, p, realm) = (caller(&r.user)?, path(&r.path)?, r.realm.clone());
        self.call(&r.realm, move |tx| {
            fs::rmdir_tx(tx, &realm, &who, &p, now())
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn rename(
        &self,
        request: Request<proto::FsRenameRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let r = request.into_inner();
        let (who, from, to) = (caller(&r.user)?, path(&r.from)?, path(&r.to)?);
        let realm = r.realm.clone();
        let fence = crate::names::fence_from_proto(r.fence)?;
        self.call(&r.realm, move |tx| {
            let t = now();
            fenced(tx, &realm, &fence, t)?;
            fs::rename_tx(tx, &realm, &who, &from, &to, t)
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn stat(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::FsStat>, Status> {
        let r = request.into_inner();
        let (p, realm) = (path(&r.path)?, r.realm.clone());
        let st = self
            .call(&r.realm, move |tx| fs::stat_tx(tx, &realm, &p))
            .await?;
        Ok(Response::new(stat_to_proto(st)))
    }

    async fn read_dir(
        &self,
        request: Request<proto::FsPathRequest>,
    ) -> Result<Response<proto::FsReadDirResponse>, Status> {
        let r = request.into_inner();
        let (who, p, realm) = (caller(&r.user)?, path(&r.path)?, r.realm.clone());
        let (entries, more) = self
            .call(&r.realm, move |tx| fs::readdir_tx(tx, &realm, &who, &p))
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
        let r = request.into_inner();
        let (who, p, realm) = (caller(&r.user)?, path(&r.path)?, r.realm.clone());
        let (offset, len) = (r.offset, r.len as usize);
        let data = self
            .call(&r.realm, move |tx| {
                fs::read_tx(tx, &realm, &who, &p, offset, len)
            })
            .await?;
        Ok(Response::new(proto::FsReadResponse { data }))
    }

    async fn write(
        &self,
        request: Request<proto::FsWriteRequest>,
    ) -> Result<Response<proto::FsWriteResponse>, Status> {
        let r = request.into_inner();
        let (who, p, realm) = (caller(&r.user)?, path(&r.path)?, r.realm.clone());
        if r.data.len() > fs::IO_BYTES_MAX {
            return Err(Status::invalid_argument(format!(
                "a write is at most {} bytes",
                fs::IO_BYTES_MAX
            )));
        }
        let (offset, data, create) = (r.offset, r.data, r.create);
        let fence = crate::names::fence_from_proto(r.fence)?;
        let size = self
            .call(&r.realm, move |tx| {
                let t = now();
                fenced(tx, &realm, &fence, t)?;
                if create {
                    match fs::stat_tx(tx, &realm, &p) {
                        Ok(_) => {}
                        Err(tabos_kernel::Error::NotFound(_)) => {
                            fs::create_tx(tx, &realm, &who, &p, 0o644, t)?;
                        }
                        Err(e) => return Err(e),
                    }
                }
                fs::write_tx(tx, &realm, &who, &p, offset, &data, t)
            })
            .await?;
        Ok(Response::new(proto::FsWriteResponse { size }))
    }

    async fn truncate(
        &self,
        request: Request<proto::FsTruncateRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let r = request.into_inner();
        let (who, p, realm, size) = (caller(&r.user)?, path(&r.path)?, r.realm.clone(), r.size);
        let fence = crate::names::fence_from_proto(r.fence)?;
        self.call(&r.realm, move |tx| {
            let t = now();
            fenced(tx, &realm, &fence, t)?;
            fs::truncate_tx(tx, &realm, &who, &p, size, t)
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn chmod(
        &self,
        request: Request<proto::FsChmodRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let r = request.into_inner();
        let (who, p, realm, mode) = (caller(&r.user)?, path(&r.path)?, r.realm.clone(), r.mode);
        self.call(&r.realm, move |tx| {
            fs::chmod_tx(tx, &realm, &who, &p, mode, now())
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn chown(
        &self,
        request: Request<proto::FsChownRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let r = request.into_inner();
        let (who, p, realm, owner) = (caller(&r.user)?, path(&r.path)?, r.realm.clone(), r.owner);
        self.call(&r.realm, move |tx| {
            fs::chown_tx(tx, &realm, &who, &p, &owner, now())
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn du(
        &self,
        request: Request<proto::FsDuRequest>,
    ) -> Result<Response<proto::FsDuResponse>, Status> {
        let r = request.into_inner();
        let (p, realm, owner, min) = (path(&r.path)?, r.realm.clone(), r.owner, r.min_size);
        let (files, bytes) = self
            .call(&r.realm, move |tx| {
                let owner = (!owner.is_empty()).then_some(owner.as_str());
                fs::du_tx(tx, &realm, &p, owner, min)
            })
            .await?;
        Ok(Response::new(proto::FsDuResponse { files, bytes }))
    }
}
