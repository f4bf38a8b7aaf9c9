//! The `Names` service: the realm namespace over gRPC
//! ([`tabos_kernel::names`]), and the node's session reaper.
//!
//! Each request is one kernel transaction on the realm's partition. Watches
//! are server streams fed by the change feed: `exists` and `removed` end
//! after their one event; `dir` sends the directory's version first and then
//! every change in it, in commit order, until the client cancels — or ends
//! with DATA_LOSS if the watcher fell so far behind that the feed cut it off
//! (the client re-reads the directory and watches again, as with etcd's
//! compaction).

use std::time::Duration;

use tabos_client::proto;
use tabos_kernel::auth::{Caller, Role};
use tabos_kernel::names::{self, CreateOptions, Entry, Fence, Kind, NameOp};
use tabos_kernel::Error as KError;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

/// Events a dir watch may have in flight to a slow client before it waits.
const WATCH_BUFFER: usize = 256;

#[derive(Clone)]
pub struct NamesService {
    node: Node,
    /// Raised when the node begins to shut down: watches end then.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl NamesService {
    pub fn new(node: Node, stopping: tokio::sync::watch::Receiver<bool>) -> NamesService {
        NamesService { node, stopping }
    }
}

/// The kernel fence of a request (none when absent).
pub fn fence_from_proto(f: Option<proto::Fence>) -> Result<Option<Fence>, Status> {
    let Some(f) = f else { return Ok(None) };
    names::validate_path(&f.dir).map_err(|e| kernel_status(&e))?;
    if f.epoch < 0 {
        return Err(Status::invalid_argument("an epoch is never negative"));
    }
    Ok(Some(Fence {
        dir: f.dir,
        epoch: f.epoch,
    }))
}

pub fn entry_to_proto(e: Entry) -> proto::NameEntry {
    proto::NameEntry {
        path: e.path,
        kind: crate::wire::out(e.kind),
        data: e.data,
        version: e.version,
        owner: e.owner,
        mode: e.mode,
        session: e.session.unwrap_or_default(),
        created_us: e.created_us,
        modified_us: e.modified_us,
    }
}

/// The user a request acts as in the namespace (its credential's).
fn caller(access: &crate::auth::Access) -> Result<Caller, Status> {
    Ok(Caller {
        user: access.user("")?,
    })
}

fn checked_path(path: &str) -> Result<(), Status> {
    names::validate_path(path).map_err(|e| kernel_status(&e))
}

#[tonic::async_trait]
impl proto::names_server::Names for NamesService {
    async fn create(
        &self,
        request: Request<proto::CreateNameRequest>,
    ) -> Result<Response<proto::NameVersion>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        checked_path(&r.path)?;
        let kind: Kind = crate::wire::request("kind", r.kind)?
            .ok_or_else(|| Status::invalid_argument("kind must be dir, file or symlink"))?;
        let fence = fence_from_proto(r.fence)?;
        let who = caller(&access)?;
        // The entry is the caller's, whatever the request says.
        let opts = CreateOptions {
            owner: who.user.clone(),
            mode: r.mode,
            session: (!r.session.is_empty()).then_some(r.session),
        };
        let (realm, path, data) = (r.realm.clone(), r.path, r.data);
        let version = self
            .node
            .call(&r.realm, move |tx| {
                let now = tabos_store::now_us();
                names::permit_tx(tx, &realm, &who, NameOp::Create(&path))?;
                if let Some(s) = &opts.session {
                    names::permit_tx(tx, &realm, &who, NameOp::Session(s))?;
                }
                names::create_tx(tx, &realm, &path, kind, &data, &opts, fence.as_ref(), now)
            })
            .await?;
        Ok(Response::new(proto::NameVersion { version }))
    }

    async fn set(
        &self,
        request: Request<proto::SetNameRequest>,
    ) -> Result<Response<proto::NameVersion>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        checked_path(&r.path)?;
        let fence = fence_from_proto(r.fence)?;
        let who = caller(&access)?;
        let (realm, path, data, if_version) = (r.realm.clone(), r.path, r.data, r.if_version);
        let version = self
            .node
            .call(&r.realm, move |tx| {
                let now = tabos_store::now_us();
                names::permit_tx(tx, &realm, &who, NameOp::Write(&path))?;
                let (owner, f) = (who.user.as_str(), fence.as_ref());
                names::set_by_tx(tx, &realm, owner, &path, &data, if_version, f, now)
            })
            .await?;
        Ok(Response::new(proto::NameVersion { version }))
    }

    async fn get(
        &self,
        request: Request<proto::NameRequest>,
    ) -> Result<Response<proto::NameEntry>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        checked_path(&r.path)?;
        let who = caller(&access)?;
        let (realm, path) = (r.realm.clone(), r.path);
        let e = self
            .node
            .read(&r.realm, move |tx| {
                names::permit_tx(tx, &realm, &who, NameOp::Read(&path))?;
                names::get_tx(tx, &realm, &path)
            })
            .await?;
        Ok(Response::new(entry_to_proto(e)))
    }

    async fn remove(
        &self,
        request: Request<proto::RemoveNameRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        checked_path(&r.path)?;
        let fence = fence_from_proto(r.fence)?;
        let who = caller(&access)?;
        let (realm, path, if_version) = (r.realm.clone(), r.path, r.if_version);
        self.node
            .call(&r.realm, move |tx| {
                let now = tabos_store::now_us();
                names::permit_tx(tx, &realm, &who, NameOp::Remove(&path))?;
                names::remove_tx(tx, &realm, &path, if_version, fence.as_ref(), now)
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn rename(
        &self,
        request: Request<proto::RenameNameRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        checked_path(&r.from)?;
        checked_path(&r.to)?;
        let fence = fence_from_proto(r.fence)?;
        let who = caller(&access)?;
        let (realm, from, to) = (r.realm.clone(), r.from, r.to);
        self.node
            .call(&r.realm, move |tx| {
                let now = tabos_store::now_us();
                names::permit_tx(tx, &realm, &who, NameOp::Rename(&from, &to))?;
                names::rename_tx(tx, &realm, &from, &to, fence.as_ref(), now)
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn read_dir(
        &self,
        request: Request<proto::NameRequest>,
    ) -> Result<Response<proto::ReadDirResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        checked_path(&r.path)?;
        let who = caller(&access)?;
        let (realm, path) = (r.realm.clone(), r.path);
        let (entries, more, version) = self
            .node
            .read(&r.realm, move |tx| {
                names::permit_tx(tx, &realm, &who, NameOp::List(&path))?;
                names::readdir_tx(tx, &realm, &path)
            })
            .await?;
        Ok(Response::new(proto::ReadDirResponse {
            entries: entries.into_iter().map(entry_to_proto).collect(),
            more,
            version,
        }))
    }

    async fn advance_epoch(
        &self,
        request: Request<proto::NameRequest>,
    ) -> Result<Response<proto::EpochResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        checked_path(&r.path)?;
        let who = caller(&access)?;
        let (realm, path) = (r.realm.clone(), r.path);
        let epoch = self
            .node
            .call(&r.realm, move |tx| {
                names::permit_tx(tx, &realm, &who, NameOp::Write(&path))?;
                names::advance_epoch_by_tx(tx, &realm, &who.user, &path, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::EpochResponse { epoch }))
    }

    async fn fence(
        &self,
        request: Request<proto::FenceRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let fence = fence_from_proto(r.fence)?
            .ok_or_else(|| Status::invalid_argument("Fence needs a fence (dir and epoch)"))?;
        let who = caller(&access)?;
        let realm = r.realm.clone();
        self.node
            .call(&r.realm, move |tx| {
                names::permit_tx(tx, &realm, &who, NameOp::Fence(&fence.dir))?;
                names::check_fence_tx(tx, &realm, &fence, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn open_session(
        &self,
        request: Request<proto::OpenSessionRequest>,
    ) -> Result<Response<proto::SessionResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let session = if r.session.is_empty() {
            names::generate_session_id()
        } else {
            r.session
        };
        let ttl_us = r.ttl_ms.saturating_mul(1000);
        // The session is the caller's, whatever the request says.
        let (realm, s, owner) = (r.realm.clone(), session.clone(), caller(&access)?.user);
        let expires_us = self
            .node
            .call(&r.realm, move |tx| {
                let now = tabos_store::now_us();
                names::open_session_tx(tx, &realm, &s, &owner, ttl_us, now)?;
                Ok(now + ttl_us)
            })
            .await?;
        Ok(Response::new(proto::SessionResponse {
            session,
            expires_us,
        }))
    }

    async fn renew_session(
        &self,
        request: Request<proto::SessionRequest>,
    ) -> Result<Response<proto::SessionResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let who = caller(&access)?;
        let (realm, s) = (r.realm.clone(), r.session.clone());
        let expires_us = self
            .node
            .call(&r.realm, move |tx| {
                names::permit_tx(tx, &realm, &who, NameOp::Session(&s))?;
                names::renew_session_tx(tx, &realm, &s, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::SessionResponse {
            session: r.session,
            expires_us,
        }))
    }

    async fn close_session(
        &self,
        request: Request<proto::SessionRequest>,
    ) -> Result<Response<proto::CloseSessionResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let who = caller(&access)?;
        let (realm, s) = (r.realm.clone(), r.session);
        let removed = self
            .node
            .call(&r.realm, move |tx| {
                names::permit_tx(tx, &realm, &who, NameOp::Session(&s))?;
                names::close_session_tx(tx, &realm, &s, tabos_store::now_us())
            })
            .await?;
        Ok(Response::new(proto::CloseSessionResponse {
            removed: removed as u64,
        }))
    }

    type WatchStream = ReceiverStream<Result<proto::WatchEvent, Status>>;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        checked_path(&r.path)?;
        tabos_kernel::validate_realm(&r.realm).map_err(|e| kernel_status(&e))?;
        let mode: proto::WatchMode = crate::wire::request_proto("watch mode", r.mode)?
            .ok_or_else(|| Status::invalid_argument("watch mode must be exists, removed or dir"))?;
        // Watching a directory is listing it; waiting for a path is reading
        // its directory.
        let who = caller(&access)?;
        let (realm, path, dir_mode) = (
            r.realm.clone(),
            r.path.clone(),
            mode == proto::WatchMode::Dir,
        );
        self.node
            .read(&r.realm, move |tx| {
                let dir = if dir_mode {
                    path.as_str()
                } else {
                    names::parent_of(&path)
                };
                names::permit_tx(tx, &realm, &who, NameOp::List(dir))
            })
            .await?;
        let store = self.node.store.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER);
        let stopping = self.stopping.clone();
        match mode {
            proto::WatchMode::Exists | proto::WatchMode::Removed => {
                let exists = mode == proto::WatchMode::Exists;
                tokio::spawn(async move {
                    let waited = async {
                        if exists {
                            names::wait_exists(&store, &r.realm, &r.path)
                                .await
                                .map(|e| proto::WatchEvent {
                                    op: proto::WatchOp::Exists.into(),
                                    path: e.path.clone(),
                                    version: e.version,
                                    entry: Some(entry_to_proto(e)),
                                })
                        } else {
                            names::wait_removed(&store, &r.realm, &r.path)
                                .await
                                .map(|()| proto::WatchEvent {
                                    op: proto::WatchOp::Removed.into(),
                                    path: r.path.clone(),
                                    version: 0,
                                    entry: None,
                                })
                        }
                    };
                    tokio::select! {
                        got = waited => {
                            let _ = tx.send(got.map_err(|e| kernel_status(&e))).await;
                        }
                        () = tx.closed() => {}
                        () = crate::stopping(stopping) => {
                            let _ = tx.send(Err(shutting_down())).await;
                        }
                    }
                });
            }
            proto::WatchMode::Dir | proto::WatchMode::Unspecified => {
                let (sub, version) = names::watch_dir(&store, &r.realm, &r.path)
                    .await
                    .map_err(|e| kernel_status(&e))?;
                tokio::spawn(forward_dir(sub, r.path, version, tx, stopping));
            }
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

fn shutting_down() -> Status {
    Status::unavailable("the node is shutting down; watch again on another node or after restart")
}

/// Forwards a directory's changes to a watcher until it goes away.
async fn forward_dir(
    mut sub: tabos_store::Subscription,
    dir: String,
    version: i64,
    tx: tokio::sync::mpsc::Sender<Result<proto::WatchEvent, Status>>,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let stopping = crate::stopping(stopping);
    tokio::pin!(stopping);
    let first = proto::WatchEvent {
        op: proto::WatchOp::Watching.into(),
        path: dir.clone(),
        version,
        entry: None,
    };
    if tx.send(Ok(first)).await.is_err() {
        return;
    }
    loop {
        let note = tokio::select! {
            note = sub.recv() => note,
            () = tx.closed() => return,
            () = &mut stopping => {
                let _ = tx.send(Err(shutting_down())).await;
                return;
            }
        };
        let event = match note {
            // Long directory paths share hashed channels: keep only ours.
            Ok(n) => match names::Change::parse(&n.payload) {
                Some(c) if names::parent_of(&c.path) == dir => Ok(proto::WatchEvent {
                    op: crate::wire::of_text(&c.op, proto::WatchOp::from_name).into(),
                    path: c.path,
                    version: c.version,
                    entry: None,
                }),
                _ => continue,
            },
            Err(tabos_store::Error::Lagged(n)) => Err(Status::data_loss(format!(
                "the watch of {dir} fell {n} changes behind and was cut off; \
                 read the directory again and watch from its new version"
            ))),
            Err(e) => Err(crate::status_of(&e)),
        };
        let last = event.is_err();
        if tx.send(event).await.is_err() || last {
            return;
        }
    }
}

/// The session reaper: ends lapsed sessions on every partition, removing
/// their ephemeral entries (which wakes those entries' watchers). It sleeps
/// until the earliest expiry it knows of and is woken when a session is
/// opened anywhere (`SESSIONS_CHANNEL`; on PostgreSQL the feed carries other
/// nodes' notifications too). Time itself is the event here, so this is a
/// timer, not polling: a renewal needs no wake-up, since the pass at the old
/// expiry finds the session alive and learns its new expiry. Every node runs
/// one; expiring is idempotent, so nodes racing on a shared database agree.
pub async fn reap_sessions(node: Node, mut stop: tokio::sync::watch::Receiver<bool>) {
    /// Wait after a failed pass before trying that partition again.
    const RETRY_AFTER_US: i64 = 1_000_000;
    let store = node.store.clone();
    let mut opened = store.subscribe(names::SESSIONS_CHANNEL);
    // Earliest known expiry per partition (None: no session); 0 looks now.
    let mut next: Vec<Option<i64>> = vec![Some(0); store.partitions() as usize];
    loop {
        let now = tabos_store::now_us();
        for (i, due) in next.iter_mut().enumerate() {
            if due.is_none_or(|d| d > now) {
                continue;
            }
            let p = tabos_store::PKey(i as u32);
            *due = loop {
                let got = store
                    .run(p, move |tx| names::expire_sessions_tx(tx, now))
                    .await;
                match got {
                    Ok(e) => {
                        if !e.sessions.is_empty() {
                            eprintln!(
                                "node {}: sessions expired: {:?} ({} ephemeral entries removed)",
                                node.settings.node_id, e.sessions, e.entries
                            );
                        }
                        // A full batch leaves lapsed ones behind: go again.
                        if e.next_us.is_some_and(|n| n <= now) {
                            continue;
                        }
                        break e.next_us;
                    }
                    Err(KError::Store(tabos_store::Error::Closed)) => return,
                    Err(e) => {
                        eprintln!("node {}: session reaper: {e}", node.settings.node_id);
                        break Some(now + RETRY_AFTER_US);
                    }
                }
            };
        }
        let sleep = async {
            match next.iter().flatten().min() {
                Some(t) => {
                    let wait = t.saturating_sub(tabos_store::now_us()).max(0);
                    tokio::time::sleep(Duration::from_micros(wait as u64)).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            note = opened.recv() => match note.ok().and_then(|n| n.payload.parse::<i64>().ok()) {
                // A session opened somewhere: every partition is due by its expiry.
                Some(t) => next.iter_mut().for_each(|d| *d = Some(d.map_or(t, |d| d.min(t)))),
                // Cut off (or a payload we do not know): look everywhere now.
                None => {
                    opened = store.subscribe(names::SESSIONS_CHANNEL);
                    next.iter_mut().for_each(|d| *d = Some(0));
                }
            },
            () = sleep => {}
        }
    }
}
